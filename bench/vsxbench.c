/*
 * vsxbench: throughput, latency, CPU cost and memory of a vhost-user-vsock
 * backend running as its own process (vsxd, or any other backend that
 * takes a vhost-user socket and a hybrid uds-path, such as rust-vmm's
 * vhost-device-vsock), each figure beside the same work done over a plain
 * AF_UNIX socketpair in the same run.
 *
 *   vsxbench --socket VHOST --uds-path UDS [--pid PID] [--label NAME]
 *            [--cases g2h,h2g,lat,mem] [--sizes LIST] [--reps N] [--scale F]
 *            [--queue-size N] [--conns N] [--lat-iters N] [--queued-cmd CMD]
 *            [--idle-conns N] [--buffer BYTES] [--bytes N]
 *            [--together DIR [--socketpair-only]]
 *
 * The "guest" is the in-process test driver (tests/driver/driver.h): it
 * plays QEMU and a Linux guest's virtio-vsock driver, single-threaded and
 * synchronous, with queues of 128 (QEMU's vhost-user-vsock), 4 KiB RX
 * buffers, and credit kept as Linux keeps it: buf_alloc --buffer (default
 * 256 KiB, Linux's default), a CREDIT_UPDATE when the free space the peer
 * last heard of falls below 64 KiB, and a TX credit window of the smaller
 * of the peer's buf_alloc and its own (Linux's "vsock/virtio: limit the TX
 * credit to buf_alloc"; equal to the peer's at the default sizes). The
 * "host program" is a thread of this process on the hybrid Unix socket: it
 * CONNECTs through UDS (host to guest) or listens on UDS_PORT (guest to
 * host).
 *
 * --buffer BYTES (K, M suffixes: powers of 1024) other than the default
 * also sets SO_SNDBUF and SO_RCVBUF to BYTES on the host program's sockets
 * and on both ends of every socketpair baseline, so that the baseline has
 * the same buffer as the vsxd path (the backend's own buffer is its
 * business: vsxd's tx-buffer-size). The "setup" line says what the kernel
 * made of it (sockbuf_eff: SO_SNDBUF read back, which Linux doubles and
 * caps at net.core.wmem_max).
 *
 * Cases (a payload is the write size on the sending side: the guest sends
 * RW packets of that size, at most 64 KiB each and within its credit, so a
 * 256 KiB write is 4 packets; the host write()s that size):
 *   g2h  guest -> host throughput, payloads 64 B, 4 KiB, 64 KiB, 256 KiB;
 *   h2g  host -> guest throughput, the same payloads;
 *   lat  512-byte ping-pong on one connection (guest sends, host echoes);
 *   mem  the guest floods 1-byte RW packets on --conns connections at a
 *        host that never reads; the backend's RSS growth against its
 *        credit per connection, and what it gives back after they close;
 *   idle --idle-conns (10000) connections established and left idle: the
 *        backend's RSS growth per connection (not in the default set:
 *        it needs that many descriptors here and in the backend, and the
 *        backend's per-VM connection limit above it).
 * Every throughput and latency run is followed by the same work over a
 * socketpair (writer thread, reader thread, same write size, same checks);
 * each is repeated --reps times and the median reported. Every byte is
 * checked at the receiver against a pseudo-random pattern of period 65521
 * (a prime: no write size is a multiple of it), and the byte count must
 * match.
 *
 * Backend CPU time is read from /proc/PID (the sum of every thread's
 * schedstat run time, and utime/stime ticks for the user/system split),
 * before and after each run, with the times it was switched in; RSS from
 * /proc/PID/status. Without --pid those figures are left out. This
 * process's CPU is getrusage(RUSAGE_SELF) (every thread together) and, for
 * throughput, each side's own thread (CLOCK_THREAD_CPUTIME_ID, sampled in
 * that thread): the socketpair's writer and reader, the backend run's host
 * program and guest, so that the backend's CPU per GiB can be set against
 * what one socketpair writer spends on the same bytes. With
 * --queued-cmd, a shell command printing the backend's connections (vsxd:
 * "vsxctl -j list"), the "queued" values it prints are summed at the
 * flood's peak: the backend's own accounting beside its RSS.
 *
 * --together DIR: one of several vsxbench processes started at once
 * against one backend (bench/run.sh's multi-VM phase: each its own VM, so
 * its own guest and host program). Each g2h or h2g run (one per selected
 * size; --reps and the socketpair beside it do not apply) gets its
 * connection up, creates DIR/ready.PID, and moves its bytes only once
 * DIR/go exists (the caller creates it when every process is ready); it
 * prints a "together ..." line with its bytes and its first and last byte
 * on CLOCK_MONOTONIC (t0_ns, t1_ns: one clock for every process, so the
 * caller can take the span of them all) and this process's CPU time.
 * --socketpair-only runs the socketpair baseline of those runs instead,
 * with no backend (no --socket, --uds-path): the same number of processes
 * of it make the baseline of the same number of VMs. --bytes N moves N
 * bytes per run (rounded down to a multiple of the size) instead of the
 * size's default times --scale.
 *
 * Output: a "setup ..." line, one line per run ("run ..."), one per
 * median ("median ...", with buffer=BYTES: the --buffer it ran with),
 * "mem ..." for the flood and "idle ..." for the idle connections, as
 * key=value pairs; bench/run.sh turns them into bench/RESULTS.md. Nothing
 * here asserts a timing: a failed check (a wrong byte, a timeout, a reset)
 * ends the program with status 1; bad options with status 2.
 */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util.h"
#include "../tests/driver/driver.h"

#define WAIT_MS 20000              /* "should have happened by now" */
#define DEFAULT_BUF (256u * 1024)  /* Linux's default buf_alloc */
#define GUEST_BUF opt.buffer       /* the guest's buf_alloc */
#define MAX_PKT VSOCK_MAX_PKT_PAYLOAD
#define PAT_PERIOD 65521u          /* a prime: no write size divides it */
#define RBUF (256u * 1024)         /* host reads */
#define MAX_CONNS 64
#define LAT_MSG 512
#define GUEST_PORT_BASE 50000
#define HOST_PORT_BASE 7000
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

static const size_t sizes[] = { 64, 4096, 65536, 262144 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
/* Bytes moved per run, per payload size (times --scale). */
static const uint64_t base_total[] = { 32ull << 20, 512ull << 20, 1024ull << 20,
				       1024ull << 20 };

static struct {
	const char *vhost, *uds, *label, *queued_cmd;
	int pid;
	unsigned reps, queue_size, conns, lat_iters, idle_conns;
	const char *together;      /* --together DIR */
	bool pair_only;            /* --socketpair-only */
	uint64_t bytes;            /* --bytes: per run (0: by size and --scale) */
	uint32_t buffer;           /* --buffer: guest buf_alloc (and socket buffers) */
	bool sockbuf;              /* --buffer other than the default: set SO_*BUF */
	double scale;
	bool g2h, h2g, lat, mem, idle;
	unsigned size_mask;        /* bit i: sizes[i] runs */
} opt = {
	.label = "vsxd", .reps = 3, .queue_size = 128, .conns = 16, .lat_iters = 20000,
	.idle_conns = 10000, .buffer = DEFAULT_BUF, .scale = 1.0, .size_mask = ~0u,
};

static uint8_t *pat;               /* PAT_PERIOD + 512 KiB: pat_at(o) .. +RBUF */

static const uint8_t *pat_at(uint64_t off)
{
	return pat + off % PAT_PERIOD;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time (user + system, ns): one side of a
 * transfer, where getrusage(RUSAGE_SELF) sums every thread. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "vsxbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* ---- --together: start with the other processes ---- */

/* This process's connection is up: DIR/ready.PID says so to the caller. */
static void together_ready(void)
{
	char path[300];
	int fd;

	snprintf(path, sizeof(path), "%s/ready.%d", opt.together, (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		die("together: %s: %s", path, strerror(errno));
	close(fd);
}

/*
 * Wait for DIR/go. Polled: a file is what a shell script can make, and
 * half a millisecond of skew between the processes is nothing against
 * runs of seconds. Bounded well below the sockets' WAIT_MS timeouts, which
 * run meanwhile on an idle connection.
 */
static void together_go(void)
{
	uint64_t end = now_ns() + (uint64_t)WAIT_MS / 2 * 1000000;
	char path[300];

	snprintf(path, sizeof(path), "%s/go", opt.together);
	while (access(path, F_OK) != 0) {
		if (now_ns() > end)
			die("together: no %s after %d s", path, WAIT_MS / 2000);
		usleep(500);
	}
}

/* ---- The backend process, from /proc ---- */

struct cpu {
	uint64_t be_ns;        /* backend: every thread's run time (schedstat) */
	uint64_t be_runs;      /* times a backend thread was switched in */
	uint64_t be_utick, be_stick;
	uint64_t self_ns;      /* this process (guest + host program) */
	uint64_t self_cs;      /* its context switches */
	bool be_ok;
};

static bool read_file(const char *path, char *buf, size_t max)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, max - 1, f);
	buf[n] = '\0';
	fclose(f);
	return n > 0;
}

static void cpu_sample(struct cpu *c)
{
	char path[64], buf[1024], *p;
	struct rusage ru;
	struct dirent *de;
	DIR *dir;

	memset(c, 0, sizeof(*c));
	getrusage(RUSAGE_SELF, &ru);
	c->self_ns = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
		     1000000000ull +
		     ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000;
	c->self_cs = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
	if (opt.pid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/stat", opt.pid);
	if (!read_file(path, buf, sizeof(buf)) || !(p = strrchr(buf, ')')))
		return;
	/* after ")": field 3 (state) ... field 14 utime, 15 stime */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %" SCNu64
		   " %" SCNu64, &c->be_utick, &c->be_stick) != 2)
		return;
	snprintf(path, sizeof(path), "/proc/%d/task", opt.pid);
	dir = opendir(path);
	if (!dir)
		return;
	while ((de = readdir(dir))) {
		char tp[300];
		unsigned long long ns, wait, runs;

		if (de->d_name[0] == '.')
			continue;
		snprintf(tp, sizeof(tp), "/proc/%d/task/%s/schedstat", opt.pid, de->d_name);
		/* run time (ns), wait time (ns), times switched in */
		if (read_file(tp, buf, sizeof(buf)) &&
		    sscanf(buf, "%llu %llu %llu", &ns, &wait, &runs) == 3) {
			c->be_ns += ns;
			c->be_runs += runs;
		}
	}
	closedir(dir);
	c->be_ok = true;
}

struct mem {
	long rss, anon, shmem, hwm;   /* KiB */
};

static bool mem_sample(struct mem *m)
{
	char path[64], buf[4096], *p;

	memset(m, 0, sizeof(*m));
	if (opt.pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/status", opt.pid);
	if (!read_file(path, buf, sizeof(buf)))
		return false;
	if ((p = strstr(buf, "VmRSS:")))
		m->rss = strtol(p + 6, NULL, 10);
	if ((p = strstr(buf, "RssAnon:")))
		m->anon = strtol(p + 8, NULL, 10);
	if ((p = strstr(buf, "RssShmem:")))
		m->shmem = strtol(p + 9, NULL, 10);
	if ((p = strstr(buf, "VmHWM:")))
		m->hwm = strtol(p + 6, NULL, 10);
	return true;
}

/* Sum of the "queued" values in @cmd's output (vsxctl -j list); -1 if the
 * command failed or printed none. */
static long long queued_sum(const char *cmd, unsigned *nconn)
{
	char buf[65536];
	long long sum = 0;
	size_t n = 0, k;
	const char *p;
	FILE *f;

	*nconn = 0;
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (n < sizeof(buf) - 1 && (k = fread(buf + n, 1, sizeof(buf) - 1 - n, f)) > 0)
		n += k;
	buf[n] = '\0';
	if (pclose(f) != 0)
		return -1;
	for (p = buf; (p = strstr(p, "queued")); ) {
		p += 6;
		while (*p == '"' || *p == ':' || *p == '=' || *p == ' ')
			p++;
		if (*p >= '0' && *p <= '9') {
			sum += strtoll(p, NULL, 10);
			(*nconn)++;
		}
	}
	return *nconn ? sum : -1;
}

/* ---- The guest ---- */

struct gconn {
	bool used, open, rst, sent_rst;
	uint32_t lport, pport;
	uint32_t fwd_cnt, last_fwd_sent, tx_cnt;
	uint32_t peer_buf, peer_fwd;
	unsigned shut;               /* SHUTDOWN flags received */
	uint64_t rx, tx;             /* payload bytes */
	uint64_t rx_want, t_rx_done; /* when rx reached rx_want (ns) */
};

static struct drv *d;
static uint64_t cid;
static struct gconn conns[MAX_CONNS];
static uint32_t listen_port, next_gport = GUEST_PORT_BASE;
static uint32_t backend_buf;     /* buf_alloc the backend announced */

static struct gconn *conn_find(uint32_t lport, uint32_t pport)
{
	for (unsigned i = 0; i < MAX_CONNS; i++)
		if (conns[i].used && conns[i].lport == lport && conns[i].pport == pport)
			return &conns[i];
	return NULL;
}

static struct gconn *conn_new(uint32_t lport, uint32_t pport)
{
	for (unsigned i = 0; i < MAX_CONNS; i++) {
		if (conns[i].used)
			continue;
		memset(&conns[i], 0, sizeof(conns[i]));
		conns[i].used = true;
		conns[i].lport = lport;
		conns[i].pport = pport;
		return &conns[i];
	}
	die("guest: more than %u connections", MAX_CONNS);
}

static void conn_free(struct gconn *c)
{
	c->used = false;
}

/* The open connection a host made to guest port @lport, or NULL. */
static struct gconn *conn_accepted(uint32_t lport)
{
	for (unsigned i = 0; i < MAX_CONNS; i++)
		if (conns[i].used && conns[i].lport == lport && conns[i].open)
			return &conns[i];
	return NULL;
}

static int gsend_raw(uint16_t op, uint32_t flags, const void *data, uint32_t len,
		     uint32_t lport, uint32_t pport, uint32_t fwd)
{
	struct virtio_vsock_hdr h = {
		.src_cid = htole64(cid),
		.dst_cid = htole64(VSOCK_CID_HOST),
		.src_port = htole32(lport),
		.dst_port = htole32(pport),
		.len = htole32(len),
		.type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
		.op = htole16(op),
		.flags = htole32(flags),
		.buf_alloc = htole32(GUEST_BUF),
		.fwd_cnt = htole32(fwd),
	};

	return drv_send(d, &h, data, len, WAIT_MS);
}

static void gsend(struct gconn *c, uint16_t op, uint32_t flags, const void *data,
		  uint32_t len)
{
	int r;

	c->last_fwd_sent = c->fwd_cnt;
	r = gsend_raw(op, flags, data, len, c->lport, c->pport, c->fwd_cnt);
	if (r < 0)
		die("guest: drv_send (op %u, %u bytes): %s", op, len, strerror(-r));
	if (op == VIRTIO_VSOCK_OP_RST)
		c->sent_rst = true;
}

static void handle(const struct virtio_vsock_hdr *h, const uint8_t *data, int len)
{
	uint32_t sport = le32toh(h->src_port), dport = le32toh(h->dst_port);
	uint16_t op = le16toh(h->op);
	struct gconn *c;

	if (le64toh(h->dst_cid) != cid || le64toh(h->src_cid) != VSOCK_CID_HOST)
		die("guest: packet %" PRIu64 " -> %" PRIu64, (uint64_t)le64toh(h->src_cid),
		    (uint64_t)le64toh(h->dst_cid));
	c = conn_find(dport, sport);
	if (op == VIRTIO_VSOCK_OP_REQUEST) {
		if (c || !listen_port || dport != listen_port) {
			gsend_raw(VIRTIO_VSOCK_OP_RST, 0, NULL, 0, dport, sport, 0);
			return;
		}
		c = conn_new(dport, sport);
		c->open = true;
		c->peer_buf = le32toh(h->buf_alloc);
		c->peer_fwd = le32toh(h->fwd_cnt);
		backend_buf = c->peer_buf;
		gsend(c, VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0);
		return;
	}
	if (!c || c->sent_rst || c->rst) {
		if (op != VIRTIO_VSOCK_OP_RST)
			gsend_raw(VIRTIO_VSOCK_OP_RST, 0, NULL, 0, dport, sport, 0);
		return;
	}
	c->peer_buf = le32toh(h->buf_alloc);
	c->peer_fwd = le32toh(h->fwd_cnt);
	switch (op) {
	case VIRTIO_VSOCK_OP_RESPONSE:
		c->open = true;
		backend_buf = c->peer_buf;
		break;
	case VIRTIO_VSOCK_OP_RW:
		if (len < 0 || (uint32_t)len != le32toh(h->len))
			die("guest: RW of %d bytes, header says %u", len, le32toh(h->len));
		if (memcmp(data, pat_at(c->rx), (size_t)len))
			die("guest: connection %u: wrong bytes at offset %" PRIu64 "..+%d",
			    c->lport, c->rx, len);
		c->rx += (uint64_t)len;
		c->fwd_cnt += (uint32_t)len;  /* the application reads at once */
		if (c->rx_want && c->rx >= c->rx_want && !c->t_rx_done)
			c->t_rx_done = now_ns();
		/* Linux 6.1 virtio_transport_stream_do_dequeue */
		if (GUEST_BUF - (c->fwd_cnt - c->last_fwd_sent) < MAX_PKT)
			gsend(c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
		break;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		break;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		gsend(c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
		break;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		c->shut |= le32toh(h->flags) & 3;
		if (c->shut == 3) {
			/* as Linux: both ways shut, nothing left to read */
			gsend(c, VIRTIO_VSOCK_OP_RST, 0, NULL, 0);
			c->open = false;
		}
		break;
	case VIRTIO_VSOCK_OP_RST:
		c->rst = true;
		c->open = false;
		break;
	default:
		die("guest: unexpected op %u", op);
	}
}

/* Take one packet, waiting up to @ms; false on timeout. */
static bool service_one(int ms)
{
	static uint8_t buf[MAX_PKT];
	struct virtio_vsock_hdr h;
	int n;

	n = drv_recv(d, &h, buf, sizeof(buf), ms);
	if (n == -ETIMEDOUT)
		return false;
	if (n < 0)
		die("guest: drv_recv: %s", strerror(-n));
	handle(&h, buf, n);
	return true;
}

/* Everything the RX queue holds now; returns the packets taken. */
static unsigned service_all(void)
{
	unsigned n = 0;

	while (service_one(0))
		n++;
	return n;
}

#define WAIT_FOR(cond, what) do {                                          \
	uint64_t _end = now_ns() + (uint64_t)WAIT_MS * 1000000;            \
	while (!(cond)) {                                                  \
		if (now_ns() > _end)                                       \
			die("guest: timed out waiting for %s", what);      \
		service_one(100);                                          \
	}                                                                  \
} while (0)

/* The TX credit: Linux's virtio_transport_get_credit()/has_space(), with the
 * window limited to the smaller of the peer's buf_alloc and our own. */
static uint32_t gcredit(const struct gconn *c)
{
	uint32_t inflight = c->tx_cnt - c->peer_fwd;
	uint32_t win = c->peer_buf < GUEST_BUF ? c->peer_buf : GUEST_BUF;

	return inflight >= win ? 0 : win - inflight;
}

/* One application write of @len bytes, as Linux's stream sendmsg: packets
 * of at most 64 KiB, each within the credit, waiting for credit if none. */
static void gwrite(struct gconn *c, size_t len)
{
	while (len) {
		uint32_t credit = gcredit(c), k;

		if (credit < len && credit < MAX_PKT) {
			service_all();
			credit = gcredit(c);
		}
		if (!credit) {
			WAIT_FOR(gcredit(c) || !c->open, "credit");
			if (!c->open)
				die("guest: connection %u closed while writing", c->lport);
			continue;
		}
		k = len < MAX_PKT ? (uint32_t)len : MAX_PKT;
		if (k > credit)
			k = credit;
		gsend(c, VIRTIO_VSOCK_OP_RW, 0, pat_at(c->tx), k);
		c->tx += k;
		c->tx_cnt += k;
		len -= k;
	}
}

static struct gconn *gconnect(uint32_t port)
{
	struct gconn *c = conn_new(next_gport++, port);

	gsend(c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	WAIT_FOR(c->open || c->rst, "RESPONSE");
	if (!c->open)
		die("guest: connect to host port %u refused", port);
	return c;
}

/* close(): SHUTDOWN both ways, wait for the RST (or send it). */
static void gclose(struct gconn *c)
{
	if (!c->rst && !c->sent_rst)
		gsend(c, VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_RCV |
		      VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0);
	WAIT_FOR(c->rst || c->sent_rst, "RST after SHUTDOWN");
	conn_free(c);
}

/* ---- The host program (a thread) ---- */

enum hkind { H_SINK, H_SOURCE, H_ECHO, H_HOLD, H_IDLE };

struct hjob {
	enum hkind kind;
	int lfd;                     /* accept from here (-1: connect) */
	uint32_t port;               /* CONNECT to this guest port */
	int fd;                      /* an already connected fd (socketpair) */
	size_t wsize;
	uint64_t total;
	unsigned iters, nconns;
	uint64_t t0, t1;             /* first write / last byte read (ns) */
	uint64_t cpu_ns;             /* H_SOURCE, H_SINK: this thread's CPU in source()/sink() */
	uint64_t got;
	int fds[MAX_CONNS];
	int *idle_fds;               /* H_IDLE: nconns of them */
	unsigned accepted;           /* H_IDLE: so far (atomic) */
	int stop;                    /* H_HOLD, H_IDLE: close and return (atomic) */
	bool go;                     /* H_SOURCE connecting: together_go() first */
	char err[256];
	pthread_t th;
};

__attribute__((format(printf, 2, 3)))
static void *hfail(struct hjob *j, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->err, sizeof(j->err), fmt, ap);
	va_end(ap);
	return NULL;
}

/* Every socket of the host program and of the socketpair baseline: timeouts
 * (a stuck peer fails the run instead of hanging it), and with --buffer
 * other than the default, that socket buffer. */
static void set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = WAIT_MS / 1000 };
	int v = (int)opt.buffer;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (opt.sockbuf &&
	    (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) < 0 ||
	     setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) < 0))
		die("SO_SNDBUF/SO_RCVBUF %d: %s", v, strerror(errno));
}

static int unix_sa(struct sockaddr_un *sa, const char *path)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, path);
	return 0;
}

static int host_accept(int lfd)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	int fd;

	if (poll(&p, 1, WAIT_MS) != 1)
		return -1;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		set_timeouts(fd);
	return fd;
}

/* Hybrid: connect to UDS, "CONNECT <port>\n", read "OK <n>\n". */
static int host_connect(uint32_t port, char *why, size_t max)
{
	struct sockaddr_un sa;
	char line[64];
	size_t n = 0;
	int fd, k;

	if (unix_sa(&sa, opt.uds) < 0) {
		snprintf(why, max, "uds path too long");
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(why, max, "connect %s: %s", opt.uds, strerror(errno));
		goto fail;
	}
	set_timeouts(fd);
	k = snprintf(line, sizeof(line), "CONNECT %u\n", port);
	if (write(fd, line, (size_t)k) != k) {
		snprintf(why, max, "CONNECT: %s", strerror(errno));
		goto fail;
	}
	/* byte by byte: what follows the line is the guest's */
	while (n < sizeof(line) - 1) {
		if (read(fd, line + n, 1) != 1) {
			snprintf(why, max, "no OK from the backend");
			goto fail;
		}
		if (line[n++] == '\n')
			break;
	}
	line[n] = '\0';
	if (strncmp(line, "OK ", 3) != 0) {
		snprintf(why, max, "unexpected reply '%s'", line);
		goto fail;
	}
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Read @total bytes, checking each against the pattern; then until EOF. */
static void sink(struct hjob *j, int fd)
{
	uint64_t cpu0 = thread_cpu_ns();
	uint8_t *buf = malloc(RBUF);
	ssize_t n;

	if (!buf) {
		hfail(j, "out of memory");
		return;
	}
	while (j->got < j->total) {
		n = read(fd, buf, RBUF);
		if (n <= 0) {
			hfail(j, "read after %" PRIu64 " of %" PRIu64 " bytes: %s", j->got,
			      j->total, n ? strerror(errno) : "EOF");
			goto out;
		}
		if (memcmp(buf, pat_at(j->got), (size_t)n)) {
			hfail(j, "wrong bytes at offset %" PRIu64 "..+%zd", j->got, n);
			goto out;
		}
		j->got += (uint64_t)n;
	}
	j->t1 = now_ns();
	n = read(fd, buf, RBUF);
	if (n > 0)
		hfail(j, "%zd bytes beyond the %" PRIu64 " sent", n, j->total);
out:
	free(buf);
	j->cpu_ns = thread_cpu_ns() - cpu0;
}

static void source(struct hjob *j, int fd)
{
	uint64_t off = 0, cpu0 = thread_cpu_ns();
	ssize_t n;

	j->t0 = now_ns();
	while (off < j->total) {
		size_t k = j->total - off < j->wsize ? (size_t)(j->total - off) : j->wsize;

		n = write(fd, pat_at(off), k);
		if (n <= 0) {
			hfail(j, "write at %" PRIu64 ": %s", off, strerror(errno));
			break;
		}
		off += (uint64_t)n;
	}
	j->cpu_ns = thread_cpu_ns() - cpu0;
}

static bool read_full(int fd, void *b, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = read(fd, (char *)b + got, len - got);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static bool write_full(int fd, const void *b, size_t len)
{
	size_t put = 0;
	ssize_t n;

	while (put < len) {
		n = write(fd, (const char *)b + put, len - put);
		if (n <= 0)
			return false;
		put += (size_t)n;
	}
	return true;
}

static void echo(struct hjob *j, int fd)
{
	uint8_t b[LAT_MSG];

	for (unsigned i = 0; i < j->iters; i++) {
		if (!read_full(fd, b, sizeof(b))) {
			hfail(j, "echo: read %u: %s", i, strerror(errno));
			return;
		}
		if (!write_full(fd, b, sizeof(b))) {
			hfail(j, "echo: write %u: %s", i, strerror(errno));
			return;
		}
	}
}

/* Shut our side, wait for the peer's close (EOF or error), close. */
static void finish(int fd)
{
	char b[4096];

	shutdown(fd, SHUT_WR);
	while (read(fd, b, sizeof(b)) > 0)
		;
	close(fd);
}

static void *host_main(void *arg)
{
	struct hjob *j = arg;
	int fd = j->fd;

	switch (j->kind) {
	case H_SINK:
		if (fd < 0 && (fd = host_accept(j->lfd)) < 0)
			return hfail(j, "no connection from the backend");
		sink(j, fd);
		close(fd);
		return NULL;
	case H_SOURCE:
		if (fd < 0) {
			fd = host_connect(j->port, j->err, sizeof(j->err));
			if (fd < 0)
				return NULL;
			if (j->go)
				together_go();
			source(j, fd);
			finish(fd);
		} else {
			source(j, fd);
			close(fd);
		}
		return NULL;
	case H_ECHO:
		if (fd < 0) {
			fd = host_connect(j->port, j->err, sizeof(j->err));
			if (fd < 0)
				return NULL;
			echo(j, fd);
			finish(fd);
		} else {
			echo(j, fd);
			close(fd);
		}
		return NULL;
	case H_HOLD:
		for (unsigned i = 0; i < j->nconns; i++) {
			j->fds[i] = host_accept(j->lfd);
			if (j->fds[i] < 0)
				return hfail(j, "connection %u did not come", i);
		}
		while (!__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE))
			usleep(10000);
		for (unsigned i = 0; i < j->nconns; i++)
			close(j->fds[i]);
		return NULL;
	case H_IDLE: {
		/* accept as they come (the guest connects in bursts), hold */
		unsigned k = 0;

		while (!__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE)) {
			struct pollfd p = { .fd = j->lfd, .events = POLLIN };

			if (k == j->nconns || poll(&p, 1, 100) != 1) {
				usleep(10000);
				continue;
			}
			j->idle_fds[k] = accept4(j->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (j->idle_fds[k] < 0)
				return hfail(j, "accept (connection %u): %s", k, strerror(errno));
			__atomic_store_n(&j->accepted, ++k, __ATOMIC_RELEASE);
		}
		for (unsigned i = 0; i < k; i++)
			close(j->idle_fds[i]);
		return NULL;
	}
	}
	return NULL;
}

static void hstart(struct hjob *j)
{
	if (pthread_create(&j->th, NULL, host_main, j) != 0)
		die("pthread_create failed");
}

static void hjoin(struct hjob *j, const char *what)
{
	pthread_join(j->th, NULL);
	if (j->err[0])
		die("%s: host: %s", what, j->err);
}

static int host_listen(uint32_t port, char *path, size_t max)
{
	struct sockaddr_un sa;
	int fd;

	snprintf(path, max, "%s_%u", opt.uds, port);
	if (unix_sa(&sa, path) < 0)
		die("%s: path too long", path);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 128) < 0)
		die("listen on %s: %s", path, strerror(errno));
	return fd;
}

/* ---- Results ---- */

struct run {
	double mibs;
	double be_cpu_s_gib, be_user_s_gib, be_sys_s_gib, self_cpu_s_gib;
	/* Throughput, per thread (CLOCK_THREAD_CPUTIME_ID): on a socketpair
	 * its writer and reader, on the backend the host program and the
	 * guest. self_cpu_s_gib is their sum and a little more (thread start,
	 * the samples themselves). */
	double wr_cpu_s_gib, rd_cpu_s_gib;      /* socketpair */
	double host_cpu_s_gib, guest_cpu_s_gib; /* backend */
	bool pair;                     /* a socketpair run: wr/rd, not host/guest */
	double be_runs_mib, self_cs_mib;  /* switches per MiB moved */
	double p50, p99, mean;         /* latency, us */
	uint64_t t0_ns, t1_ns;         /* throughput: first write, last byte read */
	bool be_ok;
};

static void run_cpu(struct run *r, const struct cpu *a, const struct cpu *b,
		    uint64_t bytes)
{
	double gib = (double)bytes / GIB;
	long tck = sysconf(_SC_CLK_TCK);

	r->self_cpu_s_gib = (double)(b->self_ns - a->self_ns) / 1e9 / gib;
	r->self_cs_mib = (double)(b->self_cs - a->self_cs) / (gib * 1024);
	r->be_ok = a->be_ok && b->be_ok;
	if (!r->be_ok)
		return;
	r->be_runs_mib = (double)(b->be_runs - a->be_runs) / (gib * 1024);
	r->be_cpu_s_gib = (double)(b->be_ns - a->be_ns) / 1e9 / gib;
	r->be_user_s_gib = (double)(b->be_utick - a->be_utick) / (double)tck / gib;
	r->be_sys_s_gib = (double)(b->be_stick - a->be_stick) / (double)tck / gib;
}

static double per_gib(uint64_t ns, uint64_t bytes)
{
	return (double)ns / 1e9 / ((double)bytes / GIB);
}

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median_of(const struct run *r, unsigned n, size_t off)
{
	double v[64];

	for (unsigned i = 0; i < n && i < 64; i++)
		v[i] = *(const double *)((const char *)&r[i] + off);
	qsort(v, n, sizeof(double), dcmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double extreme_of(const struct run *r, unsigned n, size_t off, bool max)
{
	double v = *(const double *)((const char *)&r[0] + off);

	for (unsigned i = 1; i < n; i++) {
		double x = *(const double *)((const char *)&r[i] + off);

		if (max ? x > v : x < v)
			v = x;
	}
	return v;
}

#define MED(r, n, field) median_of(r, n, offsetof(struct run, field))
#define MIN(r, n, field) extreme_of(r, n, offsetof(struct run, field), false)
#define MAX(r, n, field) extreme_of(r, n, offsetof(struct run, field), true)

static void print_run(const char *cs, size_t size, const char *path, unsigned rep,
		      uint64_t bytes, double secs, const struct run *r)
{
	printf("run case=%s size=%zu buffer=%u path=%s rep=%u bytes=%" PRIu64 " secs=%.4f "
	       "mibs=%.1f self_cpu_s_per_gib=%.3f self_cs_per_mib=%.1f", cs, size, opt.buffer,
	       path, rep, bytes, secs, r->mibs, r->self_cpu_s_gib, r->self_cs_mib);
	if (r->pair)
		printf(" writer_cpu_s_per_gib=%.3f reader_cpu_s_per_gib=%.3f", r->wr_cpu_s_gib,
		       r->rd_cpu_s_gib);
	else
		printf(" host_cpu_s_per_gib=%.3f guest_cpu_s_per_gib=%.3f", r->host_cpu_s_gib,
		       r->guest_cpu_s_gib);
	if (r->be_ok)
		printf(" be_cpu_s_per_gib=%.3f be_user_s_per_gib=%.2f be_sys_s_per_gib=%.2f "
		       "be_runs_per_mib=%.1f", r->be_cpu_s_gib, r->be_user_s_gib,
		       r->be_sys_s_gib, r->be_runs_mib);
	printf("\n");
	fflush(stdout);
}

/* ---- Throughput ---- */

static uint64_t case_total(unsigned si)
{
	uint64_t t = opt.bytes ? opt.bytes : (uint64_t)((double)base_total[si] * opt.scale);

	return t < sizes[si] ? sizes[si] : t - t % sizes[si];
}

static void tp_g2h(size_t size, uint64_t total, struct run *r, double *secs)
{
	static uint32_t port_seq;
	uint32_t port = HOST_PORT_BASE + (port_seq++ % 1000);
	struct hjob j = { .kind = H_SINK, .fd = -1, .total = total };
	char path[200];
	struct cpu a, b;
	struct gconn *c;
	uint64_t t0, sent = 0, gcpu;

	j.lfd = host_listen(port, path, sizeof(path));
	hstart(&j);
	c = gconnect(port);
	if (opt.together) {
		together_ready();
		together_go();
	}
	cpu_sample(&a);
	gcpu = thread_cpu_ns();
	t0 = now_ns();
	while (sent < total) {
		size_t k = total - sent < size ? (size_t)(total - sent) : size;

		gwrite(c, k);
		sent += k;
	}
	gclose(c);
	hjoin(&j, "g2h");
	gcpu = thread_cpu_ns() - gcpu;
	cpu_sample(&b);
	close(j.lfd);
	unlink(path);
	*secs = (double)(j.t1 - t0) / 1e9;
	r->mibs = (double)total / MIB / *secs;
	r->t0_ns = t0;
	r->t1_ns = j.t1;
	run_cpu(r, &a, &b, total);
	r->host_cpu_s_gib = per_gib(j.cpu_ns, total);
	r->guest_cpu_s_gib = per_gib(gcpu, total);
}

static void tp_h2g(size_t size, uint64_t total, struct run *r, double *secs)
{
	static uint32_t port_seq;
	struct hjob j = { .kind = H_SOURCE, .fd = -1, .lfd = -1, .wsize = size,
			  .total = total, .go = opt.together != NULL };
	struct gconn *c = NULL;
	struct cpu a, b;
	uint64_t t1, gcpu;

	listen_port = 9000 + (port_seq++ % 1000);
	j.port = listen_port;
	cpu_sample(&a);
	gcpu = thread_cpu_ns();
	hstart(&j);
	WAIT_FOR((c = conn_accepted(listen_port)), "the host's connection");
	if (opt.together)
		together_ready();        /* the host thread waits for the go */
	c->rx_want = total;
	WAIT_FOR(c->t_rx_done || !c->open, "host data");
	if (!c->t_rx_done)
		die("h2g: connection closed after %" PRIu64 " of %" PRIu64 " bytes", c->rx,
		    total);
	WAIT_FOR((c->shut & VIRTIO_VSOCK_SHUTDOWN_SEND) || !c->open, "host EOF");
	if (c->rx != total)
		die("h2g: %" PRIu64 " bytes received, %" PRIu64 " sent", c->rx, total);
	t1 = c->t_rx_done;
	gclose(c);
	listen_port = 0;
	hjoin(&j, "h2g");
	gcpu = thread_cpu_ns() - gcpu;
	cpu_sample(&b);
	*secs = (double)(t1 - j.t0) / 1e9;
	r->mibs = (double)total / MIB / *secs;
	r->t0_ns = j.t0;
	r->t1_ns = t1;
	run_cpu(r, &a, &b, total);
	r->host_cpu_s_gib = per_gib(j.cpu_ns, total);
	r->guest_cpu_s_gib = per_gib(gcpu, total);
}

static void tp_pair(size_t size, uint64_t total, struct run *r, double *secs)
{
	struct hjob w = { .kind = H_SOURCE, .wsize = size, .total = total };
	struct hjob rd = { .kind = H_SINK, .total = total };
	struct cpu a, b;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	w.fd = sv[0];
	rd.fd = sv[1];
	set_timeouts(sv[0]);
	set_timeouts(sv[1]);
	if (opt.together) {
		together_ready();
		together_go();
	}
	cpu_sample(&a);
	hstart(&w);
	host_main(&rd);                /* reads, then closes sv[1] */
	hjoin(&w, "socketpair");       /* wrote, then closed sv[0] */
	if (rd.err[0])
		die("socketpair: reader: %s", rd.err);
	cpu_sample(&b);
	*secs = (double)(rd.t1 - w.t0) / 1e9;
	r->mibs = (double)total / MIB / *secs;
	r->t0_ns = w.t0;
	r->t1_ns = rd.t1;
	run_cpu(r, &a, &b, total);
	r->be_ok = false;
	r->pair = true;
	r->wr_cpu_s_gib = per_gib(w.cpu_ns, total);
	r->rd_cpu_s_gib = per_gib(rd.cpu_ns, total);
}

/* --together: one run per selected size, on the backend or (with
 * --socketpair-only) on a socketpair, and its "together" line. */
static void throughput_together(const char *cs, bool g2h)
{
	for (unsigned si = 0; si < NSIZES; si++) {
		uint64_t total = case_total(si);
		struct run r = { 0 };
		double secs;

		if (!(opt.size_mask & (1u << si)))
			continue;
		if (opt.pair_only)
			tp_pair(sizes[si], total, &r, &secs);
		else if (g2h)
			tp_g2h(sizes[si], total, &r, &secs);
		else
			tp_h2g(sizes[si], total, &r, &secs);
		printf("together case=%s size=%zu buffer=%u path=%s label=%s bytes=%" PRIu64
		       " secs=%.4f mibs=%.1f t0_ns=%" PRIu64 " t1_ns=%" PRIu64
		       " self_cpu_s=%.3f\n", cs, sizes[si], opt.buffer,
		       opt.pair_only ? "socketpair" : "backend", opt.label, total, secs, r.mibs,
		       r.t0_ns, r.t1_ns, r.self_cpu_s_gib * (double)total / GIB);
		fflush(stdout);
	}
}

static void throughput(const char *cs, bool g2h)
{
	if (opt.together) {
		throughput_together(cs, g2h);
		return;
	}
	for (unsigned si = 0; si < NSIZES; si++) {
		struct run rv[64] = { 0 }, rp[64] = { 0 };
		uint64_t total = case_total(si);
		double secs;

		if (!(opt.size_mask & (1u << si)))
			continue;
		for (unsigned k = 0; k < opt.reps; k++) {
			if (g2h)
				tp_g2h(sizes[si], total, &rv[k], &secs);
			else
				tp_h2g(sizes[si], total, &rv[k], &secs);
			print_run(cs, sizes[si], opt.label, k + 1, total, secs, &rv[k]);
			tp_pair(sizes[si], total, &rp[k], &secs);
			print_run(cs, sizes[si], "socketpair", k + 1, total, secs, &rp[k]);
		}
		printf("median case=%s size=%zu buffer=%u reps=%u bytes=%" PRIu64 " mibs=%.1f "
		       "min_mibs=%.1f max_mibs=%.1f pair_mibs=%.1f pair_min_mibs=%.1f "
		       "pair_max_mibs=%.1f ratio=%.3f self_cpu_s_per_gib=%.3f "
		       "pair_cpu_s_per_gib=%.3f self_cs_per_mib=%.1f pair_cs_per_mib=%.1f",
		       cs, sizes[si], opt.buffer, opt.reps, total, MED(rv, opt.reps, mibs),
		       MIN(rv, opt.reps, mibs), MAX(rv, opt.reps, mibs), MED(rp, opt.reps, mibs),
		       MIN(rp, opt.reps, mibs), MAX(rp, opt.reps, mibs),
		       MED(rv, opt.reps, mibs) / MED(rp, opt.reps, mibs),
		       MED(rv, opt.reps, self_cpu_s_gib), MED(rp, opt.reps, self_cpu_s_gib),
		       MED(rv, opt.reps, self_cs_mib), MED(rp, opt.reps, self_cs_mib));
		printf(" host_cpu_s_per_gib=%.3f guest_cpu_s_per_gib=%.3f "
		       "pair_writer_cpu_s_per_gib=%.3f pair_reader_cpu_s_per_gib=%.3f",
		       MED(rv, opt.reps, host_cpu_s_gib), MED(rv, opt.reps, guest_cpu_s_gib),
		       MED(rp, opt.reps, wr_cpu_s_gib), MED(rp, opt.reps, rd_cpu_s_gib));
		if (rv[0].be_ok)
			printf(" be_cpu_s_per_gib=%.3f be_user_s_per_gib=%.2f "
			       "be_sys_s_per_gib=%.2f be_runs_per_mib=%.1f",
			       MED(rv, opt.reps, be_cpu_s_gib), MED(rv, opt.reps, be_user_s_gib),
			       MED(rv, opt.reps, be_sys_s_gib), MED(rv, opt.reps, be_runs_mib));
		printf("\n");
		fflush(stdout);
	}
}

/* ---- Latency ---- */

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void lat_stats(uint64_t *ns, unsigned n, struct run *r)
{
	double sum = 0;

	qsort(ns, n, sizeof(*ns), u64cmp);
	for (unsigned i = 0; i < n; i++)
		sum += (double)ns[i];
	r->p50 = (double)ns[n / 2] / 1e3;
	r->p99 = (double)ns[(size_t)n * 99 / 100] / 1e3;
	r->mean = sum / n / 1e3;
}

static void lat_backend(uint64_t *ns, struct run *r)
{
	static uint32_t port_seq;
	struct hjob j = { .kind = H_ECHO, .fd = -1, .lfd = -1, .iters = opt.lat_iters };
	struct gconn *c = NULL;
	struct cpu a, b;

	listen_port = 11000 + (port_seq++ % 1000);
	j.port = listen_port;
	hstart(&j);
	WAIT_FOR((c = conn_accepted(listen_port)), "the host's connection");
	cpu_sample(&a);
	for (unsigned i = 0; i < opt.lat_iters; i++) {
		uint64_t t = now_ns(), want = c->rx + LAT_MSG;

		gwrite(c, LAT_MSG);
		while (c->rx < want) {
			if (!c->open)
				die("lat: connection closed at round trip %u", i);
			if (!service_one(WAIT_MS))
				die("lat: no echo for round trip %u", i);
		}
		ns[i] = now_ns() - t;
	}
	cpu_sample(&b);
	WAIT_FOR((c->shut & VIRTIO_VSOCK_SHUTDOWN_SEND) || !c->open, "host EOF");
	gclose(c);
	listen_port = 0;
	hjoin(&j, "lat");
	run_cpu(r, &a, &b, (uint64_t)opt.lat_iters * LAT_MSG * 2);
	lat_stats(ns, opt.lat_iters, r);
}

static void lat_pair(uint64_t *ns, struct run *r)
{
	struct hjob j = { .kind = H_ECHO, .iters = opt.lat_iters };
	uint8_t b[LAT_MSG];
	struct cpu a, z;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	j.fd = sv[1];
	set_timeouts(sv[0]);
	set_timeouts(sv[1]);
	hstart(&j);
	cpu_sample(&a);
	for (unsigned i = 0; i < opt.lat_iters; i++) {
		uint64_t t = now_ns();

		memcpy(b, pat_at(i), sizeof(b));
		if (!write_full(sv[0], b, sizeof(b)) || !read_full(sv[0], b, sizeof(b)))
			die("socketpair ping-pong: %s", strerror(errno));
		if (memcmp(b, pat_at(i), sizeof(b)))
			die("socketpair ping-pong: wrong echo");
		ns[i] = now_ns() - t;
	}
	cpu_sample(&z);
	hjoin(&j, "socketpair latency");
	close(sv[0]);
	run_cpu(r, &a, &z, (uint64_t)opt.lat_iters * LAT_MSG * 2);
	r->be_ok = false;
	lat_stats(ns, opt.lat_iters, r);
}

static void latency(void)
{
	struct run rv[64] = { 0 }, rp[64] = { 0 };
	uint64_t *ns = calloc(opt.lat_iters, sizeof(*ns));

	if (!ns)
		die("out of memory");
	for (unsigned k = 0; k < opt.reps; k++) {
		lat_backend(ns, &rv[k]);
		printf("run case=lat size=%u buffer=%u path=%s rep=%u n=%u p50_us=%.1f "
		       "p99_us=%.1f mean_us=%.1f", LAT_MSG, opt.buffer, opt.label, k + 1,
		       opt.lat_iters, rv[k].p50, rv[k].p99, rv[k].mean);
		if (rv[k].be_ok)
			printf(" be_cpu_us_per_rt=%.2f be_runs_per_rt=%.2f", rv[k].be_cpu_s_gib *
			       ((double)LAT_MSG * 2 / GIB) * 1e6,
			       rv[k].be_runs_mib * ((double)LAT_MSG * 2 / MIB));
		printf("\n");
		lat_pair(ns, &rp[k]);
		printf("run case=lat size=%u buffer=%u path=socketpair rep=%u n=%u "
		       "p50_us=%.1f p99_us=%.1f mean_us=%.1f\n", LAT_MSG, opt.buffer, k + 1,
		       opt.lat_iters, rp[k].p50, rp[k].p99, rp[k].mean);
		fflush(stdout);
	}
	printf("median case=lat size=%u buffer=%u reps=%u n=%u p50_us=%.1f p99_us=%.1f "
	       "min_p50_us=%.1f max_p50_us=%.1f pair_p50_us=%.1f pair_p99_us=%.1f "
	       "pair_min_p50_us=%.1f pair_max_p50_us=%.1f ratio_p50=%.2f ratio_p99=%.2f",
	       LAT_MSG, opt.buffer, opt.reps, opt.lat_iters, MED(rv, opt.reps, p50),
	       MED(rv, opt.reps, p99), MIN(rv, opt.reps, p50), MAX(rv, opt.reps, p50),
	       MED(rp, opt.reps, p50), MED(rp, opt.reps, p99), MIN(rp, opt.reps, p50),
	       MAX(rp, opt.reps, p50),
	       MED(rv, opt.reps, p50) / MED(rp, opt.reps, p50),
	       MED(rv, opt.reps, p99) / MED(rp, opt.reps, p99));
	if (rv[0].be_ok)
		printf(" be_cpu_us_per_rt=%.2f be_runs_per_rt=%.2f",
		       MED(rv, opt.reps, be_cpu_s_gib) * ((double)LAT_MSG * 2 / GIB) * 1e6,
		       MED(rv, opt.reps, be_runs_mib) * ((double)LAT_MSG * 2 / MIB));
	printf("\n");
	fflush(stdout);
	free(ns);
}

/* ---- Memory under a 1-byte flood ---- */

/* 1-byte RW packets round-robin over @cs[0..n) until none has credit and
 * none comes back for half a second; returns the packets sent. */
static uint64_t flood(struct gconn **cs, unsigned n)
{
	uint64_t pkts = 0, quiet_since = 0;
	uint8_t one;

	for (;;) {
		bool sent = false;

		for (unsigned i = 0; i < n; i++) {
			struct gconn *c = cs[i];

			if (!c->open || !gcredit(c))
				continue;
			one = pat_at(c->tx)[0];
			gsend(c, VIRTIO_VSOCK_OP_RW, 0, &one, 1);
			c->tx++;
			c->tx_cnt++;
			pkts++;
			sent = true;
		}
		if (sent) {
			quiet_since = 0;
			continue;
		}
		/* every connection is out of credit: does any come back? */
		if (service_one(50)) {
			service_all();
			quiet_since = 0;
			continue;
		}
		if (!quiet_since)
			quiet_since = now_ns();
		else if (now_ns() - quiet_since > 500000000ull)
			break;
	}
	for (unsigned i = 0; i < n; i++)
		if (!cs[i]->open)
			die("mem: connection %u was closed during the flood", i);
	return pkts;
}

/*
 * The guest opens --conns connections to a host that accepts and never
 * reads, and floods the first half, then the second half. RssAnon growth
 * from the idle process, per connection, is the figure (bounded by 1.25 x
 * credit); the second half's growth per connection is the marginal cost,
 * without what the first flood touched once for the whole VM (batch
 * arrays and the like).
 */
static void memory(void)
{
	struct hjob j = { .kind = H_HOLD, .fd = -1, .nconns = opt.conns };
	struct gconn *cs[MAX_CONNS];
	struct mem m0, m1, mh, m2, m3, m4;
	struct cpu a, b;
	uint64_t pkts, t0, t1;
	long long queued = -1;
	unsigned nq = 0, half = opt.conns / 2;
	char path[200];
	double bound, per0, per1, marg;

	if (opt.conns > MAX_CONNS || opt.conns < 2)
		die("--conns: 2 to %u", MAX_CONNS);
	if (!mem_sample(&m0))
		die("mem: needs --pid (the backend's RSS)");
	j.lfd = host_listen(13000, path, sizeof(path));
	hstart(&j);
	for (unsigned i = 0; i < opt.conns; i++)
		cs[i] = gconnect(13000);
	/* let the host accept them all */
	usleep(200000);
	service_all();
	mem_sample(&m1);
	cpu_sample(&a);
	t0 = now_ns();
	pkts = flood(cs, half);
	mem_sample(&mh);
	pkts += flood(cs + half, opt.conns - half);
	t1 = now_ns() - 2 * 500000000ull;
	cpu_sample(&b);
	mem_sample(&m2);
	if (opt.queued_cmd)
		queued = queued_sum(opt.queued_cmd, &nq);

	/* release: the host goes away, the guest closes */
	__atomic_store_n(&j.stop, 1, __ATOMIC_RELEASE);
	hjoin(&j, "mem");
	for (unsigned i = 0; i < opt.conns; i++)
		gclose(cs[i]);
	close(j.lfd);
	unlink(path);
	usleep(200000);
	mem_sample(&m3);
	/* the backend may keep freed queue memory for a while (vsxd: spare
	 * chunks for a second of quiet, then malloc_trim) */
	usleep(2800000);
	mem_sample(&m4);

	bound = 1.25 * backend_buf;
	per0 = (double)(m2.anon - m0.anon) * 1024 / opt.conns;
	per1 = (double)(m2.anon - m1.anon) * 1024 / opt.conns;
	marg = (double)(m2.anon - mh.anon) * 1024 / (opt.conns - half);
	printf("mem conns=%u credit=%u pkts=%" PRIu64 " secs=%.3f mpps=%.3f "
	       "rss_idle_kib=%ld rss_conns_kib=%ld rss_flood_kib=%ld rss_after_kib=%ld "
	       "anon_idle_kib=%ld anon_conns_kib=%ld anon_half_kib=%ld anon_flood_kib=%ld "
	       "anon_after_kib=%ld anon_after3s_kib=%ld shmem_flood_kib=%ld hwm_kib=%ld "
	       "growth_per_conn_from_idle_bytes=%.0f growth_per_conn_bytes=%.0f "
	       "marginal_per_conn_bytes=%.0f bound_bytes=%.0f ratio_to_credit=%.3f "
	       "marginal_ratio_to_credit=%.3f within_bound=%s",
	       opt.conns, backend_buf, pkts, (double)(t1 - t0) / 1e9,
	       (double)pkts / ((double)(t1 - t0) / 1e9) / 1e6, m0.rss, m1.rss, m2.rss,
	       m3.rss, m0.anon, m1.anon, mh.anon, m2.anon, m3.anon, m4.anon, m2.shmem, m2.hwm,
	       per0, per1, marg, bound, per0 / backend_buf, marg / backend_buf,
	       per0 <= bound ? "yes" : "NO");
	if (a.be_ok && b.be_ok)
		printf(" be_ns_per_pkt=%.0f be_pkts_per_run=%.1f",
		       (double)(b.be_ns - a.be_ns) / (double)pkts,
		       (double)pkts / (double)(b.be_runs - a.be_runs ? b.be_runs - a.be_runs : 1));
	if (queued >= 0)
		printf(" queued_total=%lld queued_conns=%u queued_per_conn=%.0f", queued, nq,
		       (double)queued / (nq ? nq : 1));
	else if (opt.queued_cmd)
		printf(" queued_total=unavailable");
	printf("\n");
	fflush(stdout);
}

/* ---- Memory per idle connection ---- */

/*
 * --idle-conns guest connections to one host listener, established and
 * left idle; the backend's RSS growth per connection (RssAnon: what it
 * allocates; VmRSS beside it) from its idle state before the first one.
 * The guest side is kept here, not in conns[]: a port each, from
 * IDLE_PORT_BASE, answered by RESPONSE. Then the guest resets them all.
 */
#define IDLE_PORT_BASE 100000u
#define IDLE_BURST 64              /* REQUESTs in flight */
#define IDLE_BACKLOG_USE 96        /* connections not yet accepted (< 128) */

/* One answer to a REQUEST: true for RESPONSE, false for RST (refused). */
static bool idle_answer(unsigned answered, unsigned sent)
{
	static uint8_t buf[MAX_PKT];
	struct virtio_vsock_hdr h;
	int n;

	n = drv_recv(d, &h, buf, sizeof(buf), WAIT_MS);
	if (n < 0)
		die("idle: no answer after %u of %u REQUESTs: %s", answered, sent,
		    strerror(-n));
	if (le16toh(h.op) == VIRTIO_VSOCK_OP_RST)
		return false;
	if (le16toh(h.op) != VIRTIO_VSOCK_OP_RESPONSE)
		die("idle: op %u for guest port %u", le16toh(h.op), le32toh(h.dst_port));
	return true;
}

static void idle(void)
{
	struct hjob j = { .kind = H_IDLE, .fd = -1, .nconns = opt.idle_conns };
	unsigned n = opt.idle_conns, sent = 0, done = 0, refused = 0;
	struct mem m0, m1, m2;
	struct cpu a, b;
	char path[200];
	uint64_t t0, t1;

	if (!mem_sample(&m0))
		die("idle: needs --pid (the backend's RSS)");
	j.idle_fds = calloc(n, sizeof(int));
	if (!j.idle_fds)
		die("out of memory");
	j.lfd = host_listen(14000, path, sizeof(path));
	hstart(&j);
	cpu_sample(&a);
	t0 = now_ns();
	while (done + refused < sent || (sent < n && !refused)) {
		while (sent < n && !refused && sent - done - refused < IDLE_BURST) {
			int r;

			/* The listener's backlog is finite: a connect to a full
			 * one fails, and the guest would be refused. */
			if (sent - __atomic_load_n(&j.accepted, __ATOMIC_ACQUIRE) >=
			    IDLE_BACKLOG_USE)
				break;
			r = gsend_raw(VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0, IDLE_PORT_BASE + sent,
				      14000, 0);
			if (r < 0)
				die("idle: REQUEST %u: %s", sent, strerror(-r));
			sent++;
		}
		if (done + refused == sent) {
			usleep(200); /* the host program is accepting */
			continue;
		}
		if (idle_answer(done + refused, sent))
			done++;
		else
			refused++;
	}
	t1 = now_ns();
	if (!done)
		die("idle: every connection was refused");
	cpu_sample(&b);
	/* every host socket accepted, nothing in flight */
	WAIT_FOR(__atomic_load_n(&j.accepted, __ATOMIC_ACQUIRE) == done, "the host's accepts");
	usleep(500000);
	mem_sample(&m1);

	for (unsigned i = 0; i < sent; i++) {
		int r = gsend_raw(VIRTIO_VSOCK_OP_RST, 0, NULL, 0, IDLE_PORT_BASE + i, 14000,
				  0);

		if (r < 0)
			die("idle: RST %u: %s", i, strerror(-r));
	}
	__atomic_store_n(&j.stop, 1, __ATOMIC_RELEASE);
	hjoin(&j, "idle");
	close(j.lfd);
	unlink(path);
	free(j.idle_fds);
	/* whatever the backend still says about them (nothing is expected) */
	while (service_one(200))
		;
	usleep(3000000);
	mem_sample(&m2);

	printf("idle conns=%u wanted=%u refused=%u secs=%.3f rss_before_kib=%ld "
	       "rss_idle_kib=%ld rss_after_kib=%ld anon_before_kib=%ld anon_idle_kib=%ld "
	       "anon_after_kib=%ld anon_per_conn_bytes=%.0f rss_per_conn_bytes=%.0f",
	       done, n, refused, (double)(t1 - t0) / 1e9, m0.rss, m1.rss, m2.rss, m0.anon,
	       m1.anon, m2.anon, (double)(m1.anon - m0.anon) * 1024 / done,
	       (double)(m1.rss - m0.rss) * 1024 / done);
	if (a.be_ok && b.be_ok)
		printf(" be_us_per_conn=%.1f", (double)(b.be_ns - a.be_ns) / 1e3 / done);
	printf("\n");
	fflush(stdout);
}

/* ---- Main ---- */

static void usage(FILE *f)
{
	fprintf(f, "usage: vsxbench --socket VHOST --uds-path UDS [--pid PID] "
		"[--label NAME]\n"
		"                [--cases g2h,h2g,lat,mem,idle] [--reps N] [--scale F]\n"
		"                [--sizes 64,4096,65536,262144] [--queue-size N] "
		"[--conns N]\n"
		"                [--lat-iters N] [--queued-cmd CMD] [--idle-conns N]\n"
		"                [--buffer BYTES]  (guest buf_alloc and socket buffers;\n"
		"                                   default 262144; K, M suffixes)\n"
		"                [--bytes N] [--together DIR [--socketpair-only]]\n"
		"                (--together: with other processes, --cases g2h or h2g;\n"
		"                 --socketpair-only: no --socket, --uds-path)\n");
}

/* Bad option values end the program with status 2 and say why. */
__attribute__((format(printf, 1, 2), noreturn))
static void bad_opt(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "vsxbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* An unsigned number of @name in [@min, @max]; with @suffix, an optional
 * K, M or G (powers of 1024). vsxd's own parsers (daemon/settings.c), so
 * that the benchmark takes what vsxd takes. Anything else is refused. */
static unsigned long long parse_num(const char *name, const char *s, unsigned long long min,
				    unsigned long long max, bool suffix)
{
	uint64_t v;
	int r;

	r = suffix ? vsx__parse_size(s, strlen(s), max, &v)
		   : vsx__parse_uint(s, strlen(s), max, &v);
	if (r == -EINVAL)
		bad_opt("--%s '%s': not a number%s", name, s,
			suffix ? " (with an optional K, M or G)" : "");
	if (r < 0 || v < min)
		bad_opt("--%s '%s': out of range (%llu to %llu)", name, s, min, max);
	return v;
}

static double parse_real(const char *name, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !(v > 0) || v > 1e6)
		bad_opt("--%s '%s': want a positive number", name, s);
	return v;
}

static void parse_sizes(const char *s)
{
	char buf[128], *t, *save;
	unsigned i;

	opt.size_mask = 0;
	snprintf(buf, sizeof(buf), "%s", s);
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned long long v = parse_num("sizes", t, 1, 1ull << 30, true);

		for (i = 0; i < NSIZES; i++)
			if (v == sizes[i])
				break;
		if (i == NSIZES)
			bad_opt("--sizes: %s is not one of 64, 4096, 65536, 262144", t);
		opt.size_mask |= 1u << i;
	}
}

static void parse_cases(const char *s)
{
	char buf[128], *t, *save;

	opt.g2h = opt.h2g = opt.lat = opt.mem = opt.idle = false;
	snprintf(buf, sizeof(buf), "%s", s);
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "g2h"))
			opt.g2h = true;
		else if (!strcmp(t, "h2g"))
			opt.h2g = true;
		else if (!strcmp(t, "lat"))
			opt.lat = true;
		else if (!strcmp(t, "mem"))
			opt.mem = true;
		else if (!strcmp(t, "idle"))
			opt.idle = true;
		else
			bad_opt("--cases: unknown case '%s'", t);
	}
}

/* What the kernel makes of the socket buffers set_timeouts() asks for: read
 * back from a socketpair (Linux doubles SO_SNDBUF/SO_RCVBUF for its
 * bookkeeping and caps the request at net.core.wmem_max/rmem_max). */
static void sockbuf_probe(int *snd, int *rcv)
{
	socklen_t len = sizeof(int);
	int sv[2];

	*snd = *rcv = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	set_timeouts(sv[0]);
	if (getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, snd, &len) < 0)
		*snd = -1;
	len = sizeof(int);
	if (getsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, rcv, &len) < 0)
		*rcv = -1;
	close(sv[0]);
	close(sv[1]);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "uds-path", required_argument, NULL, 'u' },
		{ "pid", required_argument, NULL, 'p' },
		{ "label", required_argument, NULL, 'l' },
		{ "cases", required_argument, NULL, 'c' },
		{ "reps", required_argument, NULL, 'r' },
		{ "scale", required_argument, NULL, 'S' },
		{ "queue-size", required_argument, NULL, 'q' },
		{ "conns", required_argument, NULL, 'n' },
		{ "lat-iters", required_argument, NULL, 'i' },
		{ "queued-cmd", required_argument, NULL, 'Q' },
		{ "sizes", required_argument, NULL, 'z' },
		{ "idle-conns", required_argument, NULL, 'I' },
		{ "buffer", required_argument, NULL, 'B' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "together", required_argument, NULL, 'T' },
		{ "socketpair-only", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct drv_opts dopts = { 0 };
	uint64_t x = 0x9E3779B97F4A7C15ull;
	int sndbuf, rcvbuf;
	bool capped;
	size_t patlen = PAT_PERIOD + 2 * RBUF;
	int ch, r;

	opt.g2h = opt.h2g = opt.lat = opt.mem = true;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 's': opt.vhost = optarg; break;
		case 'u': opt.uds = optarg; break;
		case 'p': opt.pid = (int)parse_num("pid", optarg, 1, INT32_MAX, false); break;
		case 'l': opt.label = optarg; break;
		case 'c': parse_cases(optarg); break;
		case 'r': opt.reps = (unsigned)parse_num("reps", optarg, 1, 64, false); break;
		case 'S': opt.scale = parse_real("scale", optarg); break;
		case 'q':
			opt.queue_size = (unsigned)parse_num("queue-size", optarg, 2, 32768, false);
			break;
		case 'n': opt.conns = (unsigned)parse_num("conns", optarg, 2, MAX_CONNS, false);
			break;
		case 'i':
			opt.lat_iters = (unsigned)parse_num("lat-iters", optarg, 1, 100000000,
							    false);
			break;
		case 'Q': opt.queued_cmd = optarg; break;
		case 'z': parse_sizes(optarg); break;
		case 'I':
			opt.idle_conns = (unsigned)parse_num("idle-conns", optarg, 1, 10000000,
							     false);
			break;
		case 'B':
			/* vsxd's tx-buffer-size range ends at 1 GiB too */
			opt.buffer = (uint32_t)parse_num("buffer", optarg, 4096, 1ull << 30, true);
			break;
		case 'b':
			opt.bytes = parse_num("bytes", optarg, 1, 1ull << 40, true);
			break;
		case 'T': opt.together = optarg; break;
		case 'P': opt.pair_only = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if ((!opt.pair_only && (!opt.vhost || !opt.uds)) || optind != argc || !opt.reps ||
	    opt.reps > 64 || opt.scale <= 0 || !opt.lat_iters || !opt.conns ||
	    !opt.idle_conns) {
		usage(stderr);
		return 2;
	}
	if (opt.pair_only && !opt.together)
		bad_opt("--socketpair-only: only with --together");
	if (opt.together && (opt.lat || opt.mem || opt.idle || !(opt.g2h || opt.h2g)))
		bad_opt("--together: --cases g2h, h2g or both, nothing else");
	opt.sockbuf = opt.buffer != DEFAULT_BUF;
	sockbuf_probe(&sndbuf, &rcvbuf);
	capped = opt.sockbuf && (long long)sndbuf < 2ll * opt.buffer;

	pat = malloc(patlen);
	if (!pat)
		die("out of memory");
	for (size_t i = 0; i < PAT_PERIOD; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pat[i] = (uint8_t)(x >> 32);
	}
	for (size_t i = PAT_PERIOD; i < patlen; i++)
		pat[i] = pat[i - PAT_PERIOD];

	if (opt.idle) {
		/* a descriptor per held connection, and some */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    opt.idle_conns + 64 > rl.rlim_cur)
			die("--idle-conns %u: only %llu descriptors (ulimit -n)", opt.idle_conns,
			    (unsigned long long)rl.rlim_cur);
	}
	if (opt.pair_only) {
		/* the baseline of a --together run: no backend, no setup line */
		if (opt.g2h)
			throughput("g2h", true);
		if (opt.h2g)
			throughput("h2g", false);
		return 0;
	}
	dopts.queue_size = opt.queue_size;
	r = drv_open(opt.vhost, &dopts, &d);
	if (r < 0)
		die("drv_open %s: %s", opt.vhost, strerror(-r));
	cid = drv_cid(d);
	/* --together: the processes of a multi-VM run are many; the setup is
	 * the single-VM phases' */
	if (!opt.together)
		printf("setup label=%s cid=%" PRIu64 " features=0x%" PRIx64 " queue_size=%u "
		       "guest_buf=%u reps=%u scale=%g pid=%d sockbuf=%s sockbuf_eff=%d "
		       "rcvbuf_eff=%d%s\n", opt.label, cid, drv_features(d), opt.queue_size,
		       GUEST_BUF, opt.reps, opt.scale, opt.pid,
		       opt.sockbuf ? "set" : "default", sndbuf, rcvbuf,
		       capped ? " sockbuf_capped=yes" : "");
	if (capped)
		fprintf(stderr, "vsxbench: SO_SNDBUF %u became %d (net.core.wmem_max): the "
			"socketpair and host sockets have less buffer than asked\n",
			opt.buffer, sndbuf);
	fflush(stdout);

	if (opt.idle)
		idle();
	if (opt.mem)
		memory();
	if (opt.g2h)
		throughput("g2h", true);
	if (opt.h2g)
		throughput("h2g", false);
	if (opt.lat)
		latency();
	drv_close(d);
	return 0;
}
