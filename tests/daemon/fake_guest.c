/*
 * fake_guest: plays QEMU and a guest against a running vsxd through the
 * in-process test driver (tests/driver/driver.h), and a host program
 * through libvsx (unix:PATH:PORT and vm:NAME:PORT addresses), on commands
 * read from standard input, so that control.test can drive live
 * connections without QEMU.
 *
 *   fake_guest [-I] [-D] [-Q SIZE] VHOST_SOCKET
 *
 * -I: no indirect descriptors (every RX buffer is two descriptors on the
 * ring, so that a shrunk file leaves the ring and takes the buffers).
 * -D: the descriptor tables at the top of guest memory (drv_opts.desc_top).
 * -Q SIZE: the virtqueues' size (default 256): SIZE RX buffers of 4096
 * bytes, so that what a sibling sends beyond them waits in vsxd.
 *
 * Every command line gets one answer line on standard output,
 * "N ok ..." or "N err ...", N being the command's number (1, 2, ...).
 * The guest keeps one connection at a time, credit kept as a Linux guest
 * keeps it; payload bytes follow a pattern per direction, checked on
 * receipt. Between commands (and while a host call runs in a thread) the
 * guest's RX queue is served.
 *
 * Guest commands:
 *   listen PORT        accept a host's (or a sibling's) connection to
 *                      guest port PORT
 *   peer CID           the peer gconnect connects to from now on: the host
 *                      (2, the default) or a sibling VM's CID
 *   gconnect PORT [CID] connect to port PORT of CID (default: the peer
 *                      above) (wait for RESPONSE/RST); a sibling sends the
 *                      pattern a guest sends (gsend), so RW is checked
 *                      against that one
 *   gsend N [PKT]      send N payload bytes (within the credit) in packets
 *                      of PKT bytes (default 4096, at most 65536); on a
 *                      SEQPACKET connection each packet is a message (EOM)
 *   seqpacket SIZE     gconnect makes SEQPACKET connections from now on
 *                      (0: STREAM again), and every message received on
 *                      one must end at a multiple of SIZE bytes (grecv
 *                      fails otherwise)
 *   grecv TOTAL        wait until TOTAL bytes were received in all
 *   gcredit            send a CREDIT_UPDATE (our fwd_cnt)
 *   gshut FLAGS        send SHUTDOWN with FLAGS (1 rcv, 2 send)
 *   wait-credit BYTES  wait for a CREDIT_UPDATE advertising BYTES
 *   wait-rst           wait for an RST
 *   wait-shut FLAGS    wait until the host sent SHUTDOWN with FLAGS
 *   wait-closed        wait until the connection ended (an RST, or
 *                      SHUTDOWN both ways: we answered with an RST)
 *   state              the guest's view of the connection
 *   rxhold 1|0         stop (1) or go on (0) reading the RX queue: what
 *                      comes once its buffers are full waits in vsxd
 *   pause, resume      QEMU's stop and cont (drv_pause, drv_resume)
 *   break              a TX avail index no ring can hold: vsxd marks the
 *                      device broken
 *   backend            is the back-end still there? (a GET_FEATURES on the
 *                      vhost-user connection: "alive=1", or "alive=0" once
 *                      it closed the connection)
 * The misbehaving VMM (vsxd(8), Memory faults): shrink the file behind
 * guest memory and make vsxd touch what went; from then on the guest
 * touches no guest memory (it is served no more; only quit is left):
 *   fault tx-header    a TX packet whose header lies past the new end
 *   fault tx-payload   an RW of 4096 bytes on the connection whose header
 *                      is readable and whose payload lies past the end
 *   fault indirect     a TX chain whose indirect table lies past the end
 *   fault avail        the file shrunk to nothing, the TX queue kicked:
 *                      the rings themselves are gone
 *   fault desc         (with -D) a TX packet whose descriptor is cut off
 *                      with the tables at the top; the avail ring stays
 *   fault rx           every buffer gone, the rings kept: what the host
 *                      sends next is written into buffers that are gone
 * A hostile guest or front-end (the cases of tests/vhost-user's
 * test_vu_hostile.c, here against a real vsxd: hostile.test); the answer
 * is ok whatever vsxd made of it, which the test judges:
 *   hostile desc-outside | len-overflow | addr-wraps | loop | next-out |
 *           indirect-outside   a TX chain of that kind, kicked
 *   hostile oversized | unknown | vring-num | vring-addr | mem-table |
 *           fds-extra | features   a vhost-user message of that kind
 * Host commands (libvsx):
 *   hconnect ADDR      vsx_connect (prints the host port vsxd assigned)
 *   hlisten ADDR       vsx_listen;  haccept: vsx_accept
 *   hsend N            send N bytes; hrecv N: receive exactly N bytes
 *   hsetbuf BYTES      vsx_set_buffer(VSX_RX) (asks vsxd: set-buffer
 *                      uds-path= host-port=)
 *   hclosed            wait until the host socket reads EOF or an error
 *   hclose             vsx_close
 *   hinfo              vsx_info: credit=0|1 (VSX_INFO_CREDIT) and the
 *                      six credit fields, rx_buffer
 *   hshut              shut down the host socket's sending side
 * Plain sockets in place of the libvsx host socket (for forwards):
 *   tconnect ADDR      connect to tcp:HOST:PORT or unix:PATH
 *   tlisten ADDR       listen on tcp:HOST:PORT or unix:PATH
 *   taccept            accept one connection on it
 *   (hsend, hrecv, hclosed, hshut and hclose then use that socket)
 *   quit
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <linux/virtio_ring.h>
#include <vsx/vsx.h>

#include "../driver/driver.h"
#include "util.h"

#define WAIT_MS 10000           /* "should happen" */
#define GUEST_BUF (256u * 1024) /* our buf_alloc */
#define GUEST_PORT_BASE 40000

struct gconn {
	uint16_t type;            /* VIRTIO_VSOCK_TYPE_* */
	uint64_t msgs;            /* SEQPACKET: messages received (EOM) */
	bool open, responded, rst;
	uint64_t pcid;            /* the peer: the host or a sibling VM */
	uint32_t lport, pport;
	uint32_t buf_alloc, fwd_cnt, last_fwd_sent, tx_cnt;
	uint32_t peer_buf, peer_fwd;
	uint32_t first_buf;       /* vsxd's buf_alloc in REQUEST/RESPONSE */
	uint32_t last_update_buf; /* in the last CREDIT_UPDATE */
	unsigned updates, shut;
	uint64_t rx, tx;
	bool bad;                 /* a payload byte off the pattern */
};

static struct drv *d;
static uint64_t cid;
static uint32_t listen_port, next_gport = GUEST_PORT_BASE;
static uint64_t peer_cid = VSOCK_CID_HOST; /* gconnect's default (peer) */
static uint32_t seq_msg;        /* seqpacket: gconnect's type, message size */
static struct gconn g;
static vsx_sock *hs, *hl;
/* Host sockets a new hconnect, haccept or hlisten replaced: left as they
 * are (a test may count on vsxd still holding their connections), closed
 * at quit. */
static vsx_sock *retired[256];
static unsigned nretired;

static void retire(vsx_sock *s)
{
	if (!s)
		return;
	if (nretired == sizeof(retired) / sizeof(retired[0]))
		vsx_close(retired[--nretired]);
	retired[nretired++] = s;
}
static int rawfd = -1, rawl = -1;       /* plain sockets, when used */
static uint64_t host_rx, host_tx;
static unsigned cmd_no;
static bool shrunk;             /* fault: guest memory is not ours to touch */
static bool rx_held;            /* rxhold: the RX queue is not read */

/* Payload byte @off of direction @seed (1: guest to host, 2: host to guest). */
static uint8_t pat(unsigned seed, uint64_t off)
{
	return (uint8_t)((off * 131 + seed * 17) ^ (off >> 9));
}


__attribute__((format(printf, 2, 3)))
static void answer(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%u %s", cmd_no, ok ? "ok" : "err");
	if (*fmt)
		putchar(' ');
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* ---- The guest ---- */

/* The header of a packet to @pcid:@pport from our port @lport. */
static struct virtio_vsock_hdr ghdr(uint16_t op, uint32_t flags, uint32_t len,
				    uint64_t pcid, uint32_t lport, uint32_t pport)
{
	struct virtio_vsock_hdr h = {
		.src_cid = htole64(cid),
		.dst_cid = htole64(pcid),
		.src_port = htole32(lport),
		.dst_port = htole32(pport),
		.len = htole32(len),
		.type = htole16(g.type),
		.op = htole16(op),
		.flags = htole32(flags),
		.buf_alloc = htole32(g.buf_alloc),
		.fwd_cnt = htole32(g.fwd_cnt),
	};

	return h;
}

static int gsend_pkt(uint16_t op, uint32_t flags, const void *data, uint32_t len,
		     uint64_t pcid, uint32_t lport, uint32_t pport)
{
	struct virtio_vsock_hdr h = ghdr(op, flags, len, pcid, lport, pport);

	if (pcid == g.pcid && lport == g.lport && pport == g.pport)
		g.last_fwd_sent = g.fwd_cnt;
	return drv_send(d, &h, data, len, WAIT_MS);
}

static int gsend_conn(uint16_t op, uint32_t flags, const void *data, uint32_t len)
{
	return gsend_pkt(op, flags, data, len, g.pcid, g.lport, g.pport);
}

static void conn_start(uint64_t pcid, uint32_t lport, uint32_t pport)
{
	memset(&g, 0, sizeof(g));
	g.pcid = pcid;
	g.lport = lport;
	g.pport = pport;
	g.buf_alloc = GUEST_BUF;
	g.type = VIRTIO_VSOCK_TYPE_STREAM;
}

static void handle(struct virtio_vsock_hdr *h, const uint8_t *data, int len)
{
	uint32_t src_port = le32toh(h->src_port), dst_port = le32toh(h->dst_port);
	uint64_t src_cid = le64toh(h->src_cid);
	uint16_t op = le16toh(h->op);
	bool mine = g.lport == dst_port && g.pport == src_port && src_cid == g.pcid;
	int i;

	if (le64toh(h->dst_cid) != cid)
		return;
	if (op == VIRTIO_VSOCK_OP_REQUEST) {
		if (!listen_port || dst_port != listen_port || g.open) {
			gsend_pkt(VIRTIO_VSOCK_OP_RST, 0, NULL, 0, src_cid, dst_port, src_port);
			return;
		}
		conn_start(src_cid, dst_port, src_port);
		g.type = le16toh(h->type);
		g.open = true;
		g.first_buf = le32toh(h->buf_alloc);
		g.peer_buf = le32toh(h->buf_alloc);
		g.peer_fwd = le32toh(h->fwd_cnt);
		gsend_conn(VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0);
		return;
	}
	if (!mine || (!g.open && op != VIRTIO_VSOCK_OP_RESPONSE &&
		      !(op == VIRTIO_VSOCK_OP_RST && !g.responded))) {
		if (op != VIRTIO_VSOCK_OP_RST)
			gsend_pkt(VIRTIO_VSOCK_OP_RST, 0, NULL, 0, src_cid, dst_port, src_port);
		return;
	}
	g.peer_buf = le32toh(h->buf_alloc);
	g.peer_fwd = le32toh(h->fwd_cnt);
	switch (op) {
	case VIRTIO_VSOCK_OP_RESPONSE:
		g.open = g.responded = true;
		g.first_buf = g.peer_buf;
		break;
	case VIRTIO_VSOCK_OP_RW:
		for (i = 0; i < len; i++)
			if (data[i] != pat(g.pcid == VSOCK_CID_HOST ? 2 : 1,
					       g.rx + (uint64_t)i))
				g.bad = true;
		g.rx += (uint64_t)len;
		g.fwd_cnt += (uint32_t)len;     /* read at once */
		if (g.type == VIRTIO_VSOCK_TYPE_SEQPACKET &&
		    (le32toh(h->flags) & VIRTIO_VSOCK_SEQ_EOM)) {
			g.msgs++;
			if (seq_msg && g.rx % seq_msg)
				g.bad = true;   /* a message end where none was */
		}
		if (g.fwd_cnt - g.last_fwd_sent > g.buf_alloc / 2)
			gsend_conn(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
		break;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		g.updates++;
		g.last_update_buf = g.peer_buf;
		break;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		gsend_conn(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
		break;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		g.shut |= le32toh(h->flags) & 3;
		if (g.shut == 3) {      /* as Linux: both ways shut, nothing to read */
			gsend_conn(VIRTIO_VSOCK_OP_RST, 0, NULL, 0);
			g.open = false;
		}
		break;
	case VIRTIO_VSOCK_OP_RST:
		g.rst = true;
		g.open = false;
		break;
	}
}

/* Take what the RX queue holds, waiting up to @ms for the first packet. */
static void service(int ms)
{
	static uint8_t data[65536];
	struct virtio_vsock_hdr h;
	int n;

	/* shrunk: nothing of guest memory is ours now; rx_held: rxhold */
	if (shrunk || rx_held) {
		if (ms)
			poll(NULL, 0, ms);
		return;
	}
	for (;;) {
		n = drv_recv(d, &h, data, sizeof(data), ms);
		if (n < 0)
			return;
		handle(&h, data, n);
		ms = 0;
	}
}

/* ---- The host, in a thread while the guest is served ---- */

enum job_kind { J_CONNECT, J_ACCEPT, J_SEND, J_RECV, J_CLOSED, J_TACCEPT };

/* "tcp:HOST:PORT" (numeric IPv4) or "unix:PATH" */
static int raw_addr(const char *a, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (!strncmp(a, "unix:", 5)) {
		struct sockaddr_un *un = (struct sockaddr_un *)ss;

		un->sun_family = AF_UNIX;
		snprintf(un->sun_path, sizeof(un->sun_path), "%s", a + 5);
		*len = sizeof(*un);
		return 0;
	}
	if (!strncmp(a, "tcp:", 4)) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		char host[64];
		const char *c = strrchr(a, ':');

		if (c == a + 3 || (size_t)(c - a - 4) >= sizeof(host))
			return -EINVAL;
		memcpy(host, a + 4, (size_t)(c - a - 4));
		host[c - a - 4] = '\0';
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)atoi(c + 1));
		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return -EINVAL;
		*len = sizeof(*in);
		return 0;
	}
	return -EINVAL;
}

static ssize_t h_send(const void *p, size_t n)
{
	ssize_t r;

	if (rawfd < 0)
		return vsx_send(hs, p, n);
	r = send(rawfd, p, n, MSG_NOSIGNAL);
	return r < 0 ? -errno : r;
}

static ssize_t h_recv(void *p, size_t n)
{
	ssize_t r;

	if (rawfd < 0)
		return vsx_recv(hs, p, n);
	r = recv(rawfd, p, n, 0);
	return r < 0 ? -errno : r;
}

struct job {
	enum job_kind kind;
	char addr[256];
	uint64_t n;
	int rc;
	char msg[300];
	volatile int done;
};

static void *job_run(void *arg)
{
	struct job *j = arg;
	struct vsx_opts o = { .linger_ms = 1000 };
	vsx_sock *ns = NULL;
	uint8_t buf[16384];
	uint64_t k;
	ssize_t n;
	size_t m, i;

	switch (j->kind) {
	case J_CONNECT:
		j->rc = vsx_connect(j->addr, &o, &ns);
		if (j->rc == 0) {
			retire(hs);
			hs = ns;
		}
		if (j->rc < 0)
			snprintf(j->msg, sizeof(j->msg), "%s", vsx_strerror(j->rc));
		host_rx = host_tx = 0;
		break;
	case J_ACCEPT:
		j->rc = vsx_accept(hl, &ns);
		if (j->rc == 0) {
			retire(hs);
			hs = ns;
		}
		if (j->rc < 0)
			snprintf(j->msg, sizeof(j->msg), "%s", vsx_strerror(j->rc));
		host_rx = host_tx = 0;
		break;
	case J_SEND:
		for (k = 0; k < j->n; k += (uint64_t)n) {
			m = j->n - k < sizeof(buf) ? (size_t)(j->n - k) : sizeof(buf);
			for (i = 0; i < m; i++)
				buf[i] = pat(2, host_tx + i);
			n = h_send(buf, m);
			if (n <= 0) {
				j->rc = n < 0 ? (int)n : -EIO;
				snprintf(j->msg, sizeof(j->msg), "%s", vsx_strerror(j->rc));
				break;
			}
			host_tx += (uint64_t)n;
		}
		break;
	case J_RECV:
		for (k = 0; k < j->n; k += (uint64_t)n) {
			m = j->n - k < sizeof(buf) ? (size_t)(j->n - k) : sizeof(buf);
			n = h_recv(buf, m);
			if (n <= 0) {
				j->rc = n < 0 ? (int)n : -ENODATA;
				snprintf(j->msg, sizeof(j->msg), "after %llu bytes: %s",
					 (unsigned long long)k,
					 n < 0 ? vsx_strerror((int)n) : "EOF");
				break;
			}
			for (i = 0; i < (size_t)n; i++)
				if (buf[i] != pat(1, host_rx + i)) {
					j->rc = -EBADMSG;
					snprintf(j->msg, sizeof(j->msg), "byte %llu is wrong",
						 (unsigned long long)(host_rx + i));
					goto out;
				}
			host_rx += (uint64_t)n;
		}
		break;
	case J_TACCEPT: {
		struct pollfd p = { .fd = rawl, .events = POLLIN };

		if (poll(&p, 1, WAIT_MS) != 1) {
			j->rc = -ETIMEDOUT;
			snprintf(j->msg, sizeof(j->msg), "nothing to accept");
			break;
		}
		rawfd = accept(rawl, NULL, NULL);
		j->rc = rawfd < 0 ? -errno : 0;
		if (rawfd < 0)
			snprintf(j->msg, sizeof(j->msg), "accept: %s", strerror(errno));
		host_rx = host_tx = 0;
		break;
	}
	case J_CLOSED:
		n = h_recv(buf, sizeof(buf));
		j->rc = n < 0 ? (int)n : 0;
		snprintf(j->msg, sizeof(j->msg), "%s", n == 0 ? "eof" : n > 0 ? "data" :
			 vsx_strerror((int)n));
		if (n > 0)
			j->rc = -EBADMSG;
		break;
	}
out:
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Run @j in a thread, serving the guest meanwhile. */
static void job(struct job *j)
{
	pthread_t t;

	j->done = 0;
	j->rc = 0;
	j->msg[0] = '\0';
	if (pthread_create(&t, NULL, job_run, j) != 0) {
		j->rc = -EAGAIN;
		snprintf(j->msg, sizeof(j->msg), "pthread_create failed");
		return;
	}
	while (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE))
		service(5);
	pthread_join(t, NULL);
	service(0);
}

/* Serve the guest until @cond holds or WAIT_MS passed. */
#define WAIT_FOR(cond) ({                                               \
	long long _end = vsx__now_ms() + WAIT_MS;                            \
	while (!(cond) && vsx__now_ms() < _end)                              \
		service(10);                                            \
	(cond);                                                         \
})

/* ---- Commands ---- */

static void print_state(void)
{
	answer(true, "open=%d lport=%u pport=%u rx=%llu tx=%llu buf_alloc=%u fwd_cnt=%u "
	       "peer_buf=%u peer_fwd=%u first_buf=%u updates=%u last_update_buf=%u "
	       "rst=%d shut=%u bad=%d msgs=%llu", g.open, g.lport, g.pport,
	       (unsigned long long)g.rx, (unsigned long long)g.tx, g.buf_alloc, g.fwd_cnt,
	       g.peer_buf, g.peer_fwd, g.first_buf, g.updates, g.last_update_buf, g.rst,
	       g.shut, g.bad, (unsigned long long)g.msgs);
}

static void gsend_cmd(uint64_t n, uint64_t pkt)
{
	static uint8_t buf[65536];
	long long end = vsx__now_ms() + WAIT_MS;
	uint32_t credit, k, i;

	if (!pkt || pkt > sizeof(buf)) {
		answer(false, "a packet size from 1 to %zu", sizeof(buf));
		return;
	}
	while (n) {
		if (!g.open) {
			answer(false, "connection closed after %llu bytes",
			       (unsigned long long)g.tx);
			return;
		}
		credit = g.peer_buf - (g.tx_cnt - g.peer_fwd);
		if ((int32_t)credit <= 0) {
			if (vsx__now_ms() > end) {
				answer(false, "no credit");
				return;
			}
			service(10);
			continue;
		}
		k = n < pkt ? (uint32_t)n : (uint32_t)pkt;
		if (k > credit)
			k = credit;
		for (i = 0; i < k; i++)
			buf[i] = pat(1, g.tx + i);
		if (gsend_conn(VIRTIO_VSOCK_OP_RW, g.type == VIRTIO_VSOCK_TYPE_SEQPACKET ?
			       VIRTIO_VSOCK_SEQ_EOM : 0, buf, k) < 0) {
			answer(false, "drv_send failed");
			return;
		}
		g.tx += k;
		g.tx_cnt += k;
		n -= k;
		service(0);
	}
	answer(true, "tx=%llu", (unsigned long long)g.tx);
}

/* hostile KIND (see the top). */
static void hostile_cmd(const char *kind)
{
	enum { GET_FEATURES = 1, SET_FEATURES = 2, SET_MEM_TABLE = 5, SET_VRING_NUM = 8,
	       SET_VRING_ADDR = 9, GET_VRING_BASE = 11, V1 = 1 };
	const uint32_t hdr = sizeof(struct virtio_vsock_hdr);
	size_t slen;
	uint64_t scratch = drv_scratch(d, &slen), v = 0;
	uint64_t addr[2] = { 0, 0 };
	uint32_t len[2] = { hdr, 0 }, st[2] = { 0, 0 };
	uint16_t flags[2] = { 0, 0 }, next[2] = { 1, 0 };
	unsigned n = 0;
	int rc = 0;

	if (!kind) {
		answer(false, "hostile needs a kind");
		return;
	}
	if (!strcmp(kind, "desc-outside")) {
		addr[0] = 0x1000;                       /* below guest memory */
		n = 1;
	} else if (!strcmp(kind, "len-overflow")) {
		addr[0] = DRV_GPA_BASE + 4096;
		len[0] = 0xffffffffu;
		n = 1;
	} else if (!strcmp(kind, "addr-wraps")) {
		addr[0] = scratch;
		addr[1] = UINT64_MAX - 10;
		len[1] = 100;
		flags[0] = VRING_DESC_F_NEXT;
		n = 2;
	} else if (!strcmp(kind, "loop")) {
		addr[0] = addr[1] = scratch;
		flags[0] = flags[1] = VRING_DESC_F_NEXT;
		next[1] = 0;                            /* back to the first */
		n = 2;
	} else if (!strcmp(kind, "next-out")) {
		addr[0] = scratch;
		flags[0] = VRING_DESC_F_NEXT;
		next[0] = 0x7fff;                       /* no such descriptor */
		n = 1;
	} else if (!strcmp(kind, "indirect-outside")) {
		addr[0] = 0x2000;
		len[0] = 16 * 4;
		flags[0] = VRING_DESC_F_INDIRECT;
		n = 1;
	}
	if (n) {
		rc = drv_send_raw(d, addr, len, flags, next, n);
	} else if (!strcmp(kind, "oversized")) {
		rc = drv_vhost_msg(d, GET_FEATURES, V1, NULL, 100000, NULL, 0, &v, sizeof(v));
	} else if (!strcmp(kind, "unknown")) {
		rc = drv_vhost_msg(d, 99, V1, &v, sizeof(v), NULL, 0, NULL, 0);
	} else if (!strcmp(kind, "vring-num")) {
		/* stopped first, so that the size itself is judged */
		rc = drv_vhost_msg(d, GET_VRING_BASE, V1, st, sizeof(st), NULL, 0, st, sizeof(st));
		st[0] = 0;
		st[1] = 100;                            /* not a power of two */
		rc = drv_vhost_msg(d, SET_VRING_NUM, V1, st, sizeof(st), NULL, 0, NULL, 0);
	} else if (!strcmp(kind, "vring-addr")) {
		struct {
			uint32_t index, flags;
			uint64_t desc, used, avail, log;
		} a = { .desc = 0xdead0000, .used = 0xdeae0000, .avail = 0xdeaf0000 };

		rc = drv_vhost_msg(d, GET_VRING_BASE, V1, st, sizeof(st), NULL, 0, st, sizeof(st));
		rc = drv_vhost_msg(d, SET_VRING_ADDR, V1, &a, sizeof(a), NULL, 0, NULL, 0);
	} else if (!strcmp(kind, "mem-table")) {
		/* nine regions (more than the protocol's eight), no descriptors */
		struct {
			uint32_t n, pad;
			uint64_t r[9][4];
		} m = { .n = 9 };

		rc = drv_vhost_msg(d, SET_MEM_TABLE, V1, &m, sizeof(m), NULL, 0, NULL, 0);
	} else if (!strcmp(kind, "fds-extra")) {
		int p[2];

		if (pipe(p) < 0) {
			answer(false, "pipe: %s", strerror(errno));
			return;
		}
		rc = drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, p, 2, &v, sizeof(v));
		close(p[0]);
		close(p[1]);
	} else if (!strcmp(kind, "features")) {
		v = ~0ull;                              /* every bit, known or not */
		rc = drv_vhost_msg(d, SET_FEATURES, V1, &v, sizeof(v), NULL, 0, NULL, 0);
	} else {
		answer(false, "no hostile case '%s'", kind);
		return;
	}
	answer(true, "rc=%d", rc);
}

/*
 * fault KIND (see the top). Guest memory is one memfd shared as two
 * regions, its halves (driver.h): the rings lie at its start, the
 * driver's scratch area around the middle. A chain is posted while its
 * memory is there, the file shrinks, then the queue is kicked.
 */
static void fault_cmd(const char *kind)
{
	struct virtio_vsock_hdr h;
	size_t slen;
	uint64_t scratch = drv_scratch(d, &slen);       /* below the middle */
	uint64_t mid = scratch + slen / 2;
	uint64_t gone = mid + 65536;                    /* past the middle */
	uint64_t size = mid - DRV_GPA_BASE;             /* the file's new size */
	uint64_t addr[2] = { gone, 0 };
	uint32_t len[2] = { sizeof(h), 0 };
	uint16_t flags[2] = { 0, 0 }, next[2] = { 1, 0 };
	unsigned n = 1;
	int rc;

	if (!kind) {
		answer(false, "fault needs a kind");
		return;
	}
	if (!strcmp(kind, "tx-header")) {
		/* one descriptor, the header, in the part that goes */
	} else if (!strcmp(kind, "tx-payload")) {
		if (!g.open) {
			answer(false, "no open connection");
			return;
		}
		h = ghdr(VIRTIO_VSOCK_OP_RW, 0, 4096, g.pcid, g.lport, g.pport);
		memcpy(drv_mem(d, scratch, sizeof(h)), &h, sizeof(h));
		addr[0] = scratch;
		flags[0] = VRING_DESC_F_NEXT;
		addr[1] = gone;
		len[1] = 4096;
		n = 2;
	} else if (!strcmp(kind, "indirect")) {
		if (!(drv_features(d) & (1ull << VIRTIO_RING_F_INDIRECT_DESC))) {
			answer(false, "indirect descriptors not negotiated");
			return;
		}
		len[0] = 2 * sizeof(struct vring_desc);
		flags[0] = VRING_DESC_F_INDIRECT;
	} else if (!strcmp(kind, "desc")) {
		/* a whole packet in the scratch area, which stays; the file
		 * ends in the middle of the upper half, below the tables */
		h = ghdr(VIRTIO_VSOCK_OP_CREDIT_REQUEST, 0, 0, VSOCK_CID_HOST, 1, 1);
		memcpy(drv_mem(d, scratch, sizeof(h)), &h, sizeof(h));
		addr[0] = scratch;
		size = size + size / 2;
	} else if (!strcmp(kind, "avail")) {
		n = 0;
		size = 0;
	} else if (!strcmp(kind, "rx")) {
		n = 0;
		size = 1u << 20;        /* the rings lie in the first 64 KiB */
	} else {
		answer(false, "unknown fault kind '%s'", kind);
		return;
	}
	service(0);
	if (n && (rc = drv_post_raw(d, addr, len, flags, next, n)) < 0) {
		answer(false, "drv_post_raw: %s", strerror(-rc));
		return;
	}
	shrunk = true;
	rc = drv_truncate_mem(d, size);
	if (rc < 0) {
		answer(false, "ftruncate: %s", strerror(-rc));
		return;
	}
	if (strcmp(kind, "rx"))
		drv_kick(d, VSOCK_VQ_TX);
	answer(true, "%s size=%llu", kind, (unsigned long long)size);
}

static void command(char *line)
{
	struct job j = { 0 };
	char *verb = strtok(line, " \t"), *a = strtok(NULL, " \t"), *b = strtok(NULL, " \t");
	unsigned long long v = a ? strtoull(a, NULL, 0) : 0;
	struct vsx_info info;
	size_t bytes;
	int rc;

	cmd_no++;
	if (!verb) {
		answer(false, "empty command");
	} else if (!strcmp(verb, "listen")) {
		listen_port = (uint32_t)v;
		answer(true, "port=%u", listen_port);
	} else if (!strcmp(verb, "peer")) {
		peer_cid = v;
		answer(true, "cid=%llu", v);
	} else if (!strcmp(verb, "gconnect")) {
		conn_start(b ? strtoull(b, NULL, 0) : peer_cid, next_gport++, (uint32_t)v);
		if (seq_msg)
			g.type = VIRTIO_VSOCK_TYPE_SEQPACKET;
		gsend_conn(VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
		if (WAIT_FOR(g.responded || g.rst) && g.responded)
			answer(true, "lport=%u buf=%u", g.lport, g.first_buf);
		else
			answer(false, "%s", g.rst ? "refused (RST)" : "no answer");
	} else if (!strcmp(verb, "gsend")) {
		gsend_cmd(v, b ? strtoull(b, NULL, 0) : 4096);
	} else if (!strcmp(verb, "grecv")) {
		if (WAIT_FOR(g.rx >= v) && !g.bad)
			answer(true, "rx=%llu", (unsigned long long)g.rx);
		else
			answer(false, "rx=%llu bad=%d", (unsigned long long)g.rx, g.bad);
	} else if (!strcmp(verb, "gcredit")) {
		rc = gsend_conn(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
		answer(rc == 0, "fwd_cnt=%u", g.fwd_cnt);
	} else if (!strcmp(verb, "gshut")) {
		rc = gsend_conn(VIRTIO_VSOCK_OP_SHUTDOWN, (uint32_t)v, NULL, 0);
		answer(rc == 0, "flags=%llu", v);
	} else if (!strcmp(verb, "wait-credit")) {
		if (WAIT_FOR(g.updates && g.last_update_buf == v))
			answer(true, "buf=%u updates=%u", g.last_update_buf, g.updates);
		else
			answer(false, "last CREDIT_UPDATE buf=%u (updates=%u)",
			       g.last_update_buf, g.updates);
	} else if (!strcmp(verb, "wait-rst")) {
		if (WAIT_FOR(g.rst))
			answer(true, "rst");
		else
			answer(false, "no RST");
	} else if (!strcmp(verb, "wait-shut")) {
		if (WAIT_FOR((g.shut & v) == v || g.rst))
			answer((g.shut & v) == v, "shut=%u rst=%d open=%d", g.shut, g.rst, g.open);
		else
			answer(false, "shut=%u", g.shut);
	} else if (!strcmp(verb, "fault")) {
		fault_cmd(a);
	} else if (!strcmp(verb, "hostile")) {
		hostile_cmd(a);
	} else if (!strcmp(verb, "wait-closed")) {
		bool closed = WAIT_FOR(!g.open);

		answer(closed, "open=%d rst=%d shut=%u", g.open, g.rst, g.shut);
	} else if (!strcmp(verb, "state")) {
		service(0);
		print_state();
	} else if (!strcmp(verb, "seqpacket")) {
		seq_msg = (uint32_t)v;
		answer(true, "seqpacket=%u", seq_msg);
	} else if (!strcmp(verb, "rxhold")) {
		rx_held = v != 0;
		answer(true, "rxhold=%d", rx_held);
	} else if (!strcmp(verb, "pause")) {
		rc = drv_pause(d);
		answer(rc == 0, "rc=%d", rc);
	} else if (!strcmp(verb, "resume")) {
		rc = drv_resume(d, 0);
		answer(rc == 0, "rc=%d", rc);
	} else if (!strcmp(verb, "break")) {
		/* avail->idx half the index space away: more buffers than the
		 * ring holds, which vsxd takes for a broken guest */
		rc = drv_set_avail_idx(d, VSOCK_VQ_TX, 0x8000);
		answer(rc == 0, "rc=%d", rc);
	} else if (!strcmp(verb, "backend")) {
		uint64_t f;

		rc = drv_vhost_msg(d, 1 /* GET_FEATURES */, 1, NULL, 0, NULL, 0, &f, sizeof(f));
		answer(true, "alive=%d", rc == (int)sizeof(f));
	} else if (!strcmp(verb, "hconnect") || !strcmp(verb, "hlisten")) {
		if (!a) {
			answer(false, "needs an address");
			return;
		}
		if (verb[1] == 'l') {
			struct vsx_opts o = { .linger_ms = 1000 };
			vsx_sock *nl = NULL;

			rc = vsx_listen(a, &o, &nl);
			if (rc < 0) {
				answer(false, "%s", vsx_strerror(rc));
			} else {
				retire(hl);
				hl = nl;
				answer(true, "listening");
			}
			return;
		}
		j.kind = J_CONNECT;
		snprintf(j.addr, sizeof(j.addr), "%s", a);
		job(&j);
		if (j.rc < 0) {
			answer(false, "%s", j.msg);
			return;
		}
		vsx_info(hs, &info);
		answer(true, "local=%s", info.local);
	} else if (!strcmp(verb, "haccept")) {
		j.kind = J_ACCEPT;
		job(&j);
		answer(j.rc == 0, "%s", j.rc ? j.msg : "accepted");
	} else if (!strcmp(verb, "hsend") || !strcmp(verb, "hrecv")) {
		j.kind = verb[1] == 's' ? J_SEND : J_RECV;
		j.n = v;
		if (!hs && rawfd < 0) {
			answer(false, "no host socket");
			return;
		}
		job(&j);
		answer(j.rc == 0, "%s%s%llu", j.msg, j.rc ? " " : "",
		       (unsigned long long)(verb[1] == 's' ? host_tx : host_rx));
	} else if (!strcmp(verb, "hclosed")) {
		j.kind = J_CLOSED;
		if (!hs && rawfd < 0) {
			answer(false, "no host socket");
			return;
		}
		job(&j);
		answer(j.rc == 0 || j.rc == -ECONNRESET, "%s", j.msg);
	} else if (!strcmp(verb, "hsetbuf")) {
		rc = hs ? vsx_set_buffer(hs, VSX_RX, (size_t)v) : -ENOTCONN;
		if (rc < 0) {
			answer(false, "%s", vsx_strerror(rc));
			return;
		}
		rc = vsx_get_buffer(hs, VSX_RX, &bytes);
		answer(rc == 0, "rx=%zu", rc == 0 ? bytes : 0);
	} else if (!strcmp(verb, "hinfo")) {
		rc = hs ? vsx_info(hs, &info) : -ENOTCONN;
		if (rc < 0) {
			answer(false, "%s", vsx_strerror(rc));
			return;
		}
		answer(true, "credit=%d buf_alloc=%u fwd_cnt=%u peer_buf_alloc=%u "
		       "peer_fwd_cnt=%u tx_free=%u rx_free=%u rx_buffer=%zu",
		       !!(info.flags & VSX_INFO_CREDIT), info.buf_alloc, info.fwd_cnt,
		       info.peer_buf_alloc, info.peer_fwd_cnt, info.tx_free, info.rx_free,
		       info.rx_buffer);
	} else if (!strcmp(verb, "hclose")) {
		vsx_close(hs);
		hs = NULL;
		if (rawfd >= 0)
			close(rawfd);
		rawfd = -1;
		answer(true, "closed");
	} else if (!strcmp(verb, "hshut")) {
		rc = rawfd >= 0 ? (shutdown(rawfd, SHUT_WR) < 0 ? -errno : 0)
			       : hs ? vsx_shutdown(hs, SHUT_WR) : -ENOTCONN;
		answer(rc == 0, "%s", rc ? strerror(-rc) : "shut");
	} else if (!strcmp(verb, "tconnect") || !strcmp(verb, "tlisten")) {
		struct sockaddr_storage ss;
		socklen_t len;
		int fd;

		if (!a || raw_addr(a, &ss, &len) < 0) {
			answer(false, "needs tcp:IPV4:PORT or unix:PATH");
			return;
		}
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			answer(false, "socket: %s", strerror(errno));
			return;
		}
		if (verb[1] == 'c') {
			if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
				answer(false, "connect: %s", strerror(errno));
				close(fd);
				return;
			}
			if (rawfd >= 0)
				close(rawfd);
			rawfd = fd;
			host_rx = host_tx = 0;
			answer(true, "connected");
			return;
		}
		if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
			answer(false, "listen: %s", strerror(errno));
			close(fd);
			return;
		}
		if (rawl >= 0)
			close(rawl);
		rawl = fd;
		answer(true, "listening");
	} else if (!strcmp(verb, "taccept")) {
		if (rawl < 0) {
			answer(false, "no tlisten socket");
			return;
		}
		if (rawfd >= 0)
			close(rawfd);
		rawfd = -1;
		j.kind = J_TACCEPT;
		job(&j);
		answer(j.rc == 0, "%s", j.rc ? j.msg : "accepted");
	} else {
		answer(false, "unknown command '%s'", verb);
	}
}

int main(int argc, char **argv)
{
	struct drv_opts o = { 0 };
	char line[512];
	size_t len = 0;
	int rc;

	while (argc > 2 && argv[1][0] == '-') {
		if (!strcmp(argv[1], "-I"))
			o.no_indirect = true;
		else if (!strcmp(argv[1], "-D"))
			o.desc_top = true;
		else if (!strcmp(argv[1], "-Q") && argc > 3) {
			o.queue_size = (unsigned)strtoul(argv[2], NULL, 0);
			argv++;
			argc--;
		} else {
			break;
		}
		argv++;
		argc--;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: fake_guest [-I] [-D] [-Q SIZE] VHOST_SOCKET <COMMANDS\n");
		return 2;
	}
	rc = drv_open(argv[1], &o, &d);
	if (rc < 0) {
		fprintf(stderr, "fake_guest: %s: %s\n", argv[1], strerror(-rc));
		return 1;
	}
	cid = drv_cid(d);
	printf("0 ok cid=%llu\n", (unsigned long long)cid);
	fflush(stdout);
	for (;;) {
		struct pollfd p = { .fd = 0, .events = POLLIN };
		ssize_t n;
		char *nl;

		service(0);
		if (poll(&p, 1, 10) <= 0)
			continue;
		n = read(0, line + len, sizeof(line) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		line[len] = '\0';
		while ((nl = memchr(line, '\n', len))) {
			size_t used = (size_t)(nl - line) + 1;

			*nl = '\0';
			if (!strcmp(line, "quit"))
				goto out;
			command(line);
			memmove(line, nl + 1, len - used);
			len -= used;
			line[len] = '\0';
		}
		if (len == sizeof(line) - 1)
			len = 0;        /* an overlong line: dropped */
	}
out:
	vsx_close(hs);
	vsx_close(hl);
	while (nretired)
		vsx_close(retired[--nretired]);
	drv_close(d);
	return 0;
}
