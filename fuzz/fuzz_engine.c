/*
 * Fuzz target: the virtio-vsock engine (transports/virtio/backend/: device,
 * connections, router, peers, txbuf) as vsxd runs it, minus the event loop: a router with
 * two VMs (CIDs 3 and 4, one group, so they can reach each other), each
 * brought up by a scripted front-end over its real vhost-user socket, as
 * QEMU 7.2 does (two queues of 64, EVENT_IDX, INDIRECT_DESC, SEQPACKET,
 * guest RAM in a memfd). The input then plays the guests and the host
 * programs, one operation at a time:
 *
 *   op & 15:
 *   0-5  guest TX packet on VM (op >> 4) & 1: mode u8, header fields,
 *        payload length u16, payload bytes (see tx_packet)
 *   6    guests: take used RX buffers (their headers are checked) and
 *        post them again, kick RX
 *   7    host: accept pending connections on the listening ports
 *   8    host: write to connection n: idx u8, length u16, bytes
 *   9    host: read everything pending
 *   10   host: shutdown (SHUT_WR / SHUT_RD) or close connection n
 *   11   host: connect to VM's hybrid socket, send a line: len u8, bytes
 *   12   fire every armed timer (handshake, connect, linger, resume)
 *   13   run ready watches (host sockets, listeners)
 *   14   front-end stops the rings (GET_VRING_BASE) and restarts them
 *   15   front-end disconnects (QEMU gone) and a new one sets up again
 *
 * Host programs listen on <uds-path>_1234 and _5000 of each VM. The engine
 * is run single-threaded by fuzz/common.c's loop, so every run is
 * reproducible; at the end everything is freed and no watch or timer may
 * remain.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backend/backend-int.h"
#include "fuzz.h"

#define NVM 2
#define QSZ 64
#define MEM_SIZE (2u * 1024 * 1024)
#define GPA_BASE 0x100000ull
#define UVA_BASE 0x7f0000000000ull
/* layout, as offsets into guest RAM */
#define RXQ 0x0000u          /* desc, avail at +0x400, used at +0x800 */
#define TXQ 0x1000u
#define IND 0x2000u          /* TX indirect tables, 64 bytes per slot */
#define RXB 0x4000u          /* RX buffers, RXB_LEN each */
#define RXB_LEN 4096u
#define TXB (RXB + QSZ * RXB_LEN)
#define TXB_LEN 0x5000u      /* per TX slot: header + payload */
#define HDR_LEN 44u
#define NHOST 16
#define NPORT 2

_Static_assert(TXB + QSZ * TXB_LEN <= MEM_SIZE, "guest RAM layout");

struct gvm {
	struct vsxb_vm *vm;
	uint64_t cid;
	char sock[108], uds[108];
	int memfd;
	uint8_t *ram;
	int fe;                     /* front-end socket */
	int kick[2], call[2];       /* our ends of the eventfds, rx and tx */
	uint16_t tx_avail, rx_avail, rx_used_seen, tx_used_seen;
	int lis[NPORT];             /* host programs' listeners */
};

static const uint32_t ports[NPORT] = { 1234, 5000 };
static struct gvm g[NVM];
static bool inited;
static int host[NHOST];
static unsigned nhost;

struct vring_d {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
} __attribute__((packed));

static bool verbose; /* FUZZ_VERBOSE=1: engine log and host traffic on stderr */

static void logfn(void *arg, int prio, const char *msg)
{
	if (verbose)
		fprintf(stderr, "  [vsx %d] %s\n", prio, msg);
}

static void die(const char *what)
{
	fprintf(stderr, "fuzz_engine: %s: %s\n", what, strerror(errno));
	abort();
}

static uint64_t gpa(uint32_t off)
{
	return GPA_BASE + off;
}

static void put16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static void put_desc(uint8_t *p, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	struct vring_d d = { htole64(addr), htole32(len), htole16(flags), htole16(next) };

	memcpy(p, &d, sizeof(d));
}

static int listen_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket");
	if (strlen(path) >= sizeof(sa.sun_path))
		die("path too long");
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0)
		die("bind");
	return fd;
}

static void setup_once(void)
{
	char p[160];

	for (unsigned i = 0; i < NVM; i++) {
		struct gvm *v = &g[i];

		v->cid = 3 + i;
		snprintf(v->sock, sizeof(v->sock), "%s/vm%u.sock", fz_dir(), i);
		snprintf(v->uds, sizeof(v->uds), "%s/vm%u.h", fz_dir(), i);
		v->memfd = memfd_create("vsxfuzz-ram", MFD_CLOEXEC);
		if (v->memfd < 0 || ftruncate(v->memfd, MEM_SIZE) < 0)
			die("memfd");
		v->ram = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, v->memfd, 0);
		if (v->ram == MAP_FAILED)
			die("mmap");
		for (unsigned k = 0; k < NPORT; k++) {
			snprintf(p, sizeof(p), "%s_%u", v->uds, ports[k]);
			v->lis[k] = listen_at(p);
		}
		v->fe = -1;
	}
	verbose = getenv("FUZZ_VERBOSE") != NULL;
	inited = true;
}

static void fe_msg(struct gvm *v, uint32_t req, const void *pl, uint32_t size, int fd)
{
	fe_send(v->fe, req, pl, size, &fd, fd >= 0 ? 1 : 0);
	fl_run(4);
	fe_drain(v->fe);
}

/* Rings empty, every RX buffer posted. */
static void rings_init(struct gvm *v)
{
	memset(v->ram, 0, RXB);
	for (unsigned i = 0; i < QSZ; i++) {
		put_desc(v->ram + RXQ + 16 * i, gpa(RXB + i * RXB_LEN), RXB_LEN, 2 /* WRITE */, 0);
		put16(v->ram + RXQ + 0x400 + 4 + 2 * i, (uint16_t)i);
	}
	put16(v->ram + RXQ + 0x400 + 2, QSZ);
	v->rx_avail = QSZ;
	v->tx_avail = 0;
	v->rx_used_seen = v->tx_used_seen = 0;
}

static void rings_start(struct gvm *v)
{
	for (uint32_t q = 0; q < 2; q++) {
		uint32_t base = q ? TXQ : RXQ;
		uint32_t st[2] = { q, QSZ };
		struct {
			uint32_t index, flags;
			uint64_t desc, used, avail, log;
		} a = { q, 0, UVA_BASE + base, UVA_BASE + base + 0x800,
			UVA_BASE + base + 0x400, 0 };
		uint64_t idx = q;
		int k, c;

		fe_msg(v, 8, st, sizeof(st), -1);          /* SET_VRING_NUM */
		fe_msg(v, 9, &a, sizeof(a), -1);           /* SET_VRING_ADDR */
		st[1] = 0;
		fe_msg(v, 10, st, sizeof(st), -1);         /* SET_VRING_BASE */
		c = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		fe_msg(v, 13, &idx, sizeof(idx), c);       /* SET_VRING_CALL */
		if (v->call[q] >= 0)
			close(v->call[q]);
		v->call[q] = c;
		k = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		fe_msg(v, 12, &idx, sizeof(idx), k);       /* SET_VRING_KICK */
		if (v->kick[q] >= 0)
			close(v->kick[q]);
		v->kick[q] = k;
	}
	for (uint32_t q = 0; q < 2; q++) {
		uint32_t st[2] = { q, 1 };

		fe_msg(v, 18, st, sizeof(st), -1);         /* SET_VRING_ENABLE */
	}
}

static void fe_up(struct gvm *v)
{
	uint64_t feat = (1ull << 32) | (1ull << 29) | (1ull << 28) | (1ull << 30) | (1ull << 1);
	uint64_t pf = (1ull << 3) | (1ull << 9);
	struct {
		uint32_t n, pad;
		uint64_t gpa, size, uva, off;
	} mem = { 1, 0, GPA_BASE, MEM_SIZE, UVA_BASE, 0 };

	v->fe = fe_connect(v->sock);
	if (v->fe < 0)
		die("connect vhost-user");
	fl_run(4);
	v->kick[0] = v->kick[1] = v->call[0] = v->call[1] = -1;
	rings_init(v);
	fe_msg(v, 1, NULL, 0, -1);                          /* GET_FEATURES */
	fe_msg(v, 15, NULL, 0, -1);                         /* GET_PROTOCOL_FEATURES */
	fe_msg(v, 16, &pf, sizeof(pf), -1);                 /* SET_PROTOCOL_FEATURES */
	fe_msg(v, 3, NULL, 0, -1);                          /* SET_OWNER */
	fe_msg(v, 2, &feat, sizeof(feat), -1);              /* SET_FEATURES */
	fe_msg(v, 5, &mem, sizeof(mem), v->memfd);          /* SET_MEM_TABLE */
	rings_start(v);
}

static void fe_down(struct gvm *v)
{
	if (v->fe >= 0)
		close(v->fe);
	v->fe = -1;
	fl_run(4);
	for (unsigned q = 0; q < 2; q++) {
		if (v->kick[q] >= 0)
			close(v->kick[q]);
		if (v->call[q] >= 0)
			close(v->call[q]);
		v->kick[q] = v->call[q] = -1;
	}
}

static void kick(struct gvm *v, unsigned q)
{
	uint64_t one = 1;

	if (v->kick[q] >= 0 && write(v->kick[q], &one, sizeof(one)) < 0)
		return;
	fl_run(8);
}

/* A guest packet: header fields (some filled in when @mode asks, so that
 * most packets reach the state machine), payload, and a chain layout. */
static void tx_packet(struct gvm *v, struct fin *f)
{
	uint8_t mode = fin_u8(f);
	struct virtio_vsock_hdr h;
	unsigned slot = v->tx_avail % QSZ, layout = (mode >> 5) & 3;
	uint32_t plen, off = TXB + slot * TXB_LEN;
	uint8_t *buf = v->ram + off;
	uint8_t *desc = v->ram + TXQ + 16 * slot;

	h.src_cid = (mode & 1) ? v->cid : fin_uint(f, 8);
	switch ((mode >> 1) & 3) {
	case 0:
		h.dst_cid = VSOCK_CID_HOST;
		break;
	case 1:
		h.dst_cid = v->cid == 3 ? 4 : 3; /* the sibling */
		break;
	case 2:
		h.dst_cid = fin_uint(f, 8);
		break;
	default:
		h.dst_cid = fin_u8(f);
		break;
	}
	h.src_port = fin_u32(f);
	h.dst_port = fin_u32(f);
	h.type = fin_u16(f);
	h.op = fin_u16(f);
	h.flags = fin_u32(f);
	h.buf_alloc = fin_u32(f);
	h.fwd_cnt = fin_u32(f);
	plen = fin_u16(f) % (TXB_LEN - HDR_LEN + 1);
	h.len = (mode & 8) ? fin_u32(f) : plen;
	if (mode & 16)
		h.len = plen; /* keep the header honest */

	h.src_cid = htole64(h.src_cid);
	h.dst_cid = htole64(h.dst_cid);
	h.src_port = htole32(h.src_port);
	h.dst_port = htole32(h.dst_port);
	h.len = htole32(h.len);
	h.type = htole16(h.type);
	h.op = htole16(h.op);
	h.flags = htole32(h.flags);
	h.buf_alloc = htole32(h.buf_alloc);
	h.fwd_cnt = htole32(h.fwd_cnt);
	memcpy(buf, &h, HDR_LEN);
	fin_bytes(f, buf + HDR_LEN, plen);

	switch (layout) {
	case 0: /* one descriptor: header and payload */
		put_desc(desc, gpa(off), HDR_LEN + plen, 0, 0);
		break;
	case 1: { /* indirect, one entry: header and payload */
		uint8_t *t = v->ram + IND + 64 * slot;

		put_desc(t, gpa(off), HDR_LEN + plen, 0, 0);
		put_desc(desc, gpa(IND + 64 * slot), 16, 4 /* INDIRECT */, 0);
		break;
	}
	case 2: { /* indirect: header, payload */
		uint8_t *t = v->ram + IND + 64 * slot;

		put_desc(t, gpa(off), HDR_LEN, plen ? 1 : 0, 1);
		put_desc(t + 16, gpa(off + HDR_LEN), plen, 0, 0);
		put_desc(desc, gpa(IND + 64 * slot), plen ? 32 : 16, 4 /* INDIRECT */, 0);
		break;
	}
	default: { /* indirect, header split in two, payload in two */
		uint8_t *t = v->ram + IND + 64 * slot;
		uint32_t cut = plen / 2;

		put_desc(t, gpa(off), 20, 1, 1);
		put_desc(t + 16, gpa(off + 20), HDR_LEN - 20, 1, 2);
		put_desc(t + 32, gpa(off + HDR_LEN), cut, 1, 3);
		put_desc(t + 48, gpa(off + HDR_LEN + cut), plen - cut, 0, 0);
		put_desc(desc, gpa(IND + 64 * slot), 64, 4, 0);
		break;
	}
	}
	put16(v->ram + TXQ + 0x400 + 4 + 2 * slot, (uint16_t)slot);
	v->tx_avail++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	put16(v->ram + TXQ + 0x400 + 2, v->tx_avail);
	kick(v, 1);
}

/* Take what the device put in RX and post the buffers again. */
static void rx_refill(struct gvm *v)
{
	uint16_t used = get16(v->ram + RXQ + 0x800 + 2);
	unsigned n = 0;

	while (v->rx_used_seen != used && n++ < QSZ) {
		const uint8_t *u = v->ram + RXQ + 0x800 + 4 + 8 * (v->rx_used_seen % QSZ);
		uint32_t id, len;
		struct virtio_vsock_hdr h;

		memcpy(&id, u, 4);
		memcpy(&len, u + 4, 4);
		id = le32toh(id);
		len = le32toh(len);
		if (id >= QSZ || len > RXB_LEN || (len && len < HDR_LEN))
			abort(); /* the device wrote a bad used entry */
		if (len) {
			memcpy(&h, v->ram + RXB + id * RXB_LEN, HDR_LEN);
			if (verbose)
				fprintf(stderr, "  guest %llu rx: op %u type %u %u->%u len %u "
					"flags %u buf %u fwd %u\n", (unsigned long long)v->cid,
					le16toh(h.op), le16toh(h.type), le32toh(h.src_port),
					le32toh(h.dst_port), le32toh(h.len), le32toh(h.flags),
					le32toh(h.buf_alloc), le32toh(h.fwd_cnt));
			if (le32toh(h.len) != len - HDR_LEN || le64toh(h.dst_cid) != v->cid)
				abort(); /* header and used length disagree */
		}
		put16(v->ram + RXQ + 0x400 + 4 + 2 * (v->rx_avail % QSZ), (uint16_t)id);
		v->rx_avail++;
		v->rx_used_seen++;
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);
	put16(v->ram + RXQ + 0x400 + 2, v->rx_avail);
	kick(v, 0);
}

static void host_add(int fd)
{
	if (fd < 0)
		return;
	if (nhost == NHOST) {
		close(fd);
		return;
	}
	host[nhost++] = fd;
}

static void host_accept(void)
{
	for (unsigned i = 0; i < NVM; i++)
		for (unsigned k = 0; k < NPORT; k++) {
			int fd;

			while ((fd = accept4(g[i].lis[k], NULL, NULL,
					     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
				host_add(fd);
		}
}

static void host_drop(unsigned i)
{
	close(host[i]);
	host[i] = host[--nhost];
}

static void restart_rings(struct gvm *v)
{
	for (uint32_t q = 0; q < 2; q++) {
		uint32_t st[2] = { q, 0 };

		fe_msg(v, 11, st, sizeof(st), -1);         /* GET_VRING_BASE */
	}
	rings_init(v);
	rings_start(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fin f = { data, size };
	struct vsxb_router *r;
	unsigned steps = 0;
	uint8_t buf[4096];

	if (!inited)
		setup_once();
	if (vsxb_router_new(&fl_loop, logfn, NULL, &r) < 0)
		die("router");
	for (unsigned i = 0; i < NVM; i++) {
		struct vsxb_vm_config c = {
			.guest_cid = g[i].cid,
			.socket_path = g[i].sock,
			.uds_path = g[i].uds,
			.tx_buffer_size = i ? 4096 : 0,
		};

		if (vsxb_vm_new(r, &c, &g[i].vm) < 0)
			die("vm");
		fe_up(&g[i]);
	}

	while (fin_left(&f) && steps++ < 1024) {
		uint8_t op = fin_u8(&f);
		struct gvm *v = &g[(op >> 4) & 1];

		switch (op & 15) {
		case 0: case 1: case 2: case 3: case 4: case 5:
			tx_packet(v, &f);
			break;
		case 6:
			for (unsigned i = 0; i < NVM; i++)
				rx_refill(&g[i]);
			break;
		case 7:
			host_accept();
			break;
		case 8: {
			uint8_t i = fin_u8(&f);
			size_t len = fin_u16(&f) % sizeof(buf);

			len = fin_bytes(&f, buf, len);
			if (nhost && len)
				(void)!send(host[i % nhost], buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			fl_run(8);
			break;
		}
		case 9:
			for (unsigned i = 0; i < nhost; i++) {
				ssize_t k;

				while ((k = recv(host[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0)
					if (verbose)
						fprintf(stderr, "  host %u read %zd: %.*s\n", i, k,
							(int)(k < 40 ? k : 40), buf);
			}
			fl_run(8);
			break;
		case 10: {
			uint8_t i = fin_u8(&f);

			if (!nhost)
				break;
			if ((i >> 6) == 0)
				shutdown(host[i % nhost], SHUT_WR);
			else if ((i >> 6) == 1)
				shutdown(host[i % nhost], SHUT_RD);
			else
				host_drop(i % nhost);
			fl_run(8);
			break;
		}
		case 11: {
			size_t len = fin_u8(&f);
			int fd;

			len = fin_bytes(&f, buf, len);
			fd = fe_connect(v->uds);
			if (fd >= 0 && len)
				(void)!send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			host_add(fd);
			fl_run(8);
			break;
		}
		case 12:
			fl_fire_timers();
			fl_run(8);
			break;
		case 13:
			fl_run(8);
			break;
		case 14:
			restart_rings(v);
			break;
		default:
			fe_down(v);
			fe_up(v);
			break;
		}
	}

	while (nhost)
		host_drop(0);
	vsxb_router_free(r);
	for (unsigned i = 0; i < NVM; i++) {
		fe_down(&g[i]);
		g[i].vm = NULL;
	}
	host_accept();
	while (nhost)
		host_drop(0);
	if (fl_watches() || fl_timers())
		abort(); /* the engine left a watch or a timer behind */
	return 0;
}
