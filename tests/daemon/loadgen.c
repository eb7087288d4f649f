/*
 * loadgen: load and fault generator for vsxd, without QEMU. The in-process
 * test driver (tests/driver) plays QEMU and a Linux-like guest on one VM of
 * a running vsxd; host programs are plain Unix sockets on the VM's hybrid
 * socket (host -> guest: "CONNECT 7000\n" on UDS; guest -> host: vsxd
 * connects to our listener at UDS_7001). Guest and host side run in one
 * thread, each driven without blocking, so many connections move at once.
 *
 *   loadgen [-p VSXD_PID] [-T SECS] VHOST UDS MODE [ARGS]
 *
 * Modes (figures on standard output, problems on standard error; exit 0 only
 * when every outcome was as expected):
 *   conc N SIZE    N connections, half opened by the host, half by the guest,
 *                  all established before any data moves, then SIZE bytes
 *                  each way on every one at once; every byte checked, every
 *                  connection closed cleanly (SHUTDOWN, EOF, RST).
 *   cycles N [W]   N connect/close cycles (W first as a warm-up), 32 in
 *                  flight, alternately opened by the host and by the guest,
 *                  100 bytes each way checked; one in ten aborted (the host
 *                  closes at once / the guest resets at once). With -p:
 *                  vsxd's open fds (/proc/PID/fd) and VmRSS after the
 *                  warm-up and after the N cycles (fds must be equal).
 *   flip           negative control: 4 connections, the guest flips one bit
 *                  of its stream on one of them: the host must report that
 *                  byte and no other (exit 0 when it does).
 *   fdlimit        vsxd runs with a low RLIMIT_NOFILE: host connections are
 *                  opened until one is not served; then a guest connect
 *                  must be refused (RST); the held connections still move
 *                  data; half of them close; the waiting one is then served
 *                  and new connections both ways work.
 *   reattach       the front-end disconnects and reconnects to the same
 *                  vsxd: the host end of a live connection reads EOF, the
 *                  guest gets VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, a packet
 *                  of the stale connection is answered with RST, new
 *                  connections both ways work.
 *   abandon N      N host connections closed while the guest leaves their
 *                  REQUEST unanswered: prints when vsxd reset them (RST).
 *   pingpong N [SIZE]  one connection opened by the host, then N round
 *                  trips of SIZE bytes (default 1): the host writes, the
 *                  guest answers with as many bytes as soon as they came,
 *                  the host reads them back (bytes checked); prints the
 *                  round trips' percentiles (bench/stall.sh: what a busy
 *                  worker costs another VM's packets).
 *   restart        as reattach, but vsxd itself is killed and restarted by
 *                  the caller: loadgen prints "ready" once a connection is
 *                  up, waits for a line on standard input, then reconnects
 *                  (retrying for up to 20 s) to the new vsxd's socket.
 *   churn H N [W]  (needs -p) H host connections opened and held (no data,
 *                  no close), then W warm-up and N measured connect/close
 *                  cycles as in "cycles" beside them: vsxd's CPU (all its
 *                  threads, /proc/PID/task/ * /schedstat) per cycle
 *                  (bench/churn.py: the cost of a connection event with H
 *                  others open).
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <dirent.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "../driver/driver.h"
#include "util.h"

#define GPORT 7000              /* the guest listens here */
#define HPORT 7001              /* the host listens at UDS_7001 */
#define GUEST_BUF (256u * 1024) /* guest buf_alloc */
#define CHUNK (32u * 1024)      /* guest payload per packet */
#define MAXCONN 8192
#define HASH 16384
#define MAX_REPORTS 10

enum { C_REQ = 1, C_RESP = 2, C_CREDIT = 4, C_SHUT = 8, C_SHUT3 = 16, C_RST = 32 };

/* ---- Run parameters and figures ---- */

static struct {
	uint64_t size;          /* bytes each way per connection */
	bool barrier;           /* no data until every connection is up */
	bool abort10;           /* one connection in ten aborted */
	bool hold;              /* new connections hold: no data, no close */
	unsigned inflight;      /* per direction */
	bool ignore_req;        /* the guest leaves REQUESTs unanswered */
	long flip_at;           /* guest flips a bit at this offset (-1: no) */
	uint32_t flip_key;      /* of this connection */
} P = { .flip_at = -1 };

static struct {
	unsigned h_started, h_total, g_started, g_total;
	unsigned h_up, g_up;            /* established (both sides agree) */
	unsigned h_done, g_done;        /* checked and closed, host side */
	unsigned gg_done;               /* closed, guest side */
	unsigned h_aborted, g_aborted;  /* aborted (by host, by guest) */
	unsigned g_aborted_h;           /* guest aborts the host saw */
	unsigned g_open;                /* guest-initiated, live in the guest */
	unsigned live_max;
	uint64_t bytes;                 /* checked payload bytes, both ways */
	unsigned errors;
	bool go;
	unsigned held_eof;              /* held connections the host saw end */
	unsigned req_ignored;
	long bad_offset;                /* first bad byte seen by the host */
} S;

static long long t_end;
static struct drv *d;
static uint64_t cid;
static const char *uds;


static double now_s(void)
{
	return (double)vsx__now_ms() / 1000.0;
}

__attribute__((format(printf, 1, 2)))
static void error(const char *fmt, ...)
{
	va_list ap;

	if (S.errors++ >= MAX_REPORTS)
		return;
	fprintf(stderr, "loadgen: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Byte @off of the stream of connection @key in direction @dir (0: guest to
 * host, 1: host to guest). */
static uint8_t pat(uint32_t key, unsigned dir, uint64_t off)
{
	uint64_t x = off + (uint64_t)key * 7919 + dir * 104729;

	return (uint8_t)((x * 131) ^ (off >> 9) ^ (key >> 3));
}

static void fill(uint8_t *p, size_t n, uint32_t key, unsigned dir, uint64_t off)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = pat(key, dir, off + i);
}

/* Index of the first byte off the pattern, or -1. */
static long check(const uint8_t *p, size_t n, uint32_t key, unsigned dir, uint64_t off)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != pat(key, dir, off + i))
			return (long)i;
	return -1;
}

/* ---- The guest ---- */

struct gc {
	uint32_t lport, pport, key;
	bool hostinit, up, abort, hold, tx_shut, rx_eof, peer_shut_rcv, closing;
	unsigned ctl;
	uint32_t fwd_cnt, last_fwd_sent, tx_cnt, peer_buf, peer_fwd;
	uint64_t rx, tx, hello_tx;
	long long t0;
	int slot;
};

static struct gc *gtab[HASH];
static struct gc *glive[MAXCONN];
static unsigned nglive;
static uint32_t next_lport = 20000;
static unsigned g_pending;      /* guest REQUESTs not yet answered */
static uint32_t orphan_q[256][2];
static unsigned orphan_n;
static unsigned rst_seen;       /* RSTs for connections we had dropped */
static uint32_t last_rst[2];    /* its ports: source, destination */

static unsigned ghash(uint32_t l, uint32_t p)
{
	return (l * 2654435761u ^ p * 40503u) & (HASH - 1);
}

static struct gc *gfind(uint32_t l, uint32_t p)
{
	unsigned i = ghash(l, p);

	while (gtab[i]) {
		if (gtab[i]->lport == l && gtab[i]->pport == p)
			return gtab[i];
		i = (i + 1) & (HASH - 1);
	}
	return NULL;
}

static struct gc *gnew(uint32_t l, uint32_t p)
{
	struct gc *g;
	unsigned i = ghash(l, p);

	if (nglive >= MAXCONN)
		return NULL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->lport = l;
	g->pport = p;
	g->t0 = vsx__now_ms();
	while (gtab[i])
		i = (i + 1) & (HASH - 1);
	gtab[i] = g;
	g->slot = (int)nglive;
	glive[nglive++] = g;
	if (nglive > S.live_max)
		S.live_max = nglive;
	return g;
}

/* Backward-shift deletion keeps the probe chains intact. */
static void gfree(struct gc *g)
{
	unsigned i = ghash(g->lport, g->pport), j, k;

	while (gtab[i] != g)
		i = (i + 1) & (HASH - 1);
	gtab[i] = NULL;
	j = i;
	for (;;) {
		j = (j + 1) & (HASH - 1);
		if (!gtab[j])
			break;
		k = ghash(gtab[j]->lport, gtab[j]->pport);
		if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		gtab[i] = gtab[j];
		gtab[j] = NULL;
		i = j;
	}
	glive[g->slot] = glive[--nglive];
	glive[g->slot]->slot = g->slot;
	if (!g->hostinit && !g->up)
		g_pending--;
	if (!g->hostinit)
		S.g_open--;
	S.gg_done++;
	free(g);
}

static int gsend(struct gc *g, uint16_t op, uint32_t flags, const void *data, uint32_t len)
{
	struct virtio_vsock_hdr h = {
		.src_cid = htole64(cid),
		.dst_cid = htole64(VSOCK_CID_HOST),
		.src_port = htole32(g->lport),
		.dst_port = htole32(g->pport),
		.len = htole32(len),
		.type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
		.op = htole16(op),
		.flags = htole32(flags),
		.buf_alloc = htole32(GUEST_BUF),
		.fwd_cnt = htole32(g->fwd_cnt),
	};
	int rc = drv_send(d, &h, data, len, 0);

	if (rc == 0)
		g->last_fwd_sent = g->fwd_cnt;
	return rc;
}

static void orphan_rst(const struct virtio_vsock_hdr *h)
{
	if (le16toh(h->op) == VIRTIO_VSOCK_OP_RST) {
		rst_seen++;
		last_rst[0] = le32toh(h->src_port);
		last_rst[1] = le32toh(h->dst_port);
		return;
	}
	if (orphan_n < 256) {
		orphan_q[orphan_n][0] = le32toh(h->dst_port);
		orphan_q[orphan_n][1] = le32toh(h->src_port);
		orphan_n++;
	}
}

static bool g_finished(struct gc *g)
{
	return g->up && !g->hold && g->tx_shut && g->rx_eof;
}

static void ghandle(const struct virtio_vsock_hdr *h, const uint8_t *data, int len)
{
	uint32_t sp = le32toh(h->src_port), dp = le32toh(h->dst_port);
	uint16_t op = le16toh(h->op);
	struct gc *g;
	long bad;

	if (le64toh(h->dst_cid) != cid || le64toh(h->src_cid) != VSOCK_CID_HOST) {
		error("guest: packet for cid %llu from cid %llu",
		      (unsigned long long)le64toh(h->dst_cid),
		      (unsigned long long)le64toh(h->src_cid));
		return;
	}
	g = gfind(dp, sp);
	if (op == VIRTIO_VSOCK_OP_REQUEST && P.ignore_req) {
		S.req_ignored++;
		return;
	}
	if (op == VIRTIO_VSOCK_OP_REQUEST) {
		if (g || dp != GPORT) {
			orphan_rst(h);
			return;
		}
		g = gnew(dp, sp);
		if (!g) {
			orphan_rst(h);
			return;
		}
		g->hostinit = true;
		g->key = sp;
		g->abort = P.abort10 && sp % 10 == 7;
		g->hold = P.hold;
		g->peer_buf = le32toh(h->buf_alloc);
		g->peer_fwd = le32toh(h->fwd_cnt);
		g->up = true;
		g->ctl |= C_RESP;
		S.g_up++;
		return;
	}
	if (!g) {
		orphan_rst(h);
		return;
	}
	g->peer_buf = le32toh(h->buf_alloc);
	g->peer_fwd = le32toh(h->fwd_cnt);
	switch (op) {
	case VIRTIO_VSOCK_OP_RESPONSE:
		if (g->up || g->hostinit) {
			error("guest: RESPONSE on an established connection %u", g->lport);
			break;
		}
		g->up = true;
		g_pending--;
		S.g_up++;
		if (g->abort) {
			g->ctl |= C_RST;
			break;
		}
		g->hello_tx = 4;        /* the host learns our port from it */
		break;
	case VIRTIO_VSOCK_OP_RW:
		if (g->abort || g->rx_eof || g->rx + (uint64_t)len > P.size) {
			error("guest: conn %u: %d unexpected bytes at %llu", g->key, len,
			      (unsigned long long)g->rx);
			break;
		}
		bad = check(data, (size_t)len, g->key, 1, g->rx);
		if (bad >= 0)
			error("guest: conn %u: byte %llu of the host's stream is wrong", g->key,
			      (unsigned long long)(g->rx + (uint64_t)bad));
		g->rx += (uint64_t)len;
		g->fwd_cnt += (uint32_t)len;
		S.bytes += (uint64_t)len;
		if (g->fwd_cnt - g->last_fwd_sent >= GUEST_BUF / 2)
			g->ctl |= C_CREDIT;
		break;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		g->ctl |= C_CREDIT;
		break;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		break;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		if (le32toh(h->flags) & VIRTIO_VSOCK_SHUTDOWN_SEND) {
			if (!g->abort && !g->hold && g->rx != P.size)
				error("guest: conn %u: EOF after %llu of %llu bytes", g->key,
				      (unsigned long long)g->rx, (unsigned long long)P.size);
			g->rx_eof = true;
		}
		if (le32toh(h->flags) & VIRTIO_VSOCK_SHUTDOWN_RCV)
			g->peer_shut_rcv = true;
		if ((le32toh(h->flags) & 3) == 3 || (g->rx_eof && g->peer_shut_rcv)) {
			/* the host is gone: as Linux, answer RST and forget it */
			if (!g->abort && !g->hold && !g->tx_shut)
				error("guest: conn %u: host gone before our %llu bytes were sent",
				      g->key, (unsigned long long)P.size);
			g->ctl = C_RST;
		}
		break;
	case VIRTIO_VSOCK_OP_RST:
		if (!g->up && !g->hostinit) {
			error("guest: connect from port %u refused (RST)", g->lport);
		} else if (!g->abort && !g->hold && !g_finished(g)) {
			error("guest: conn %u reset (rx %llu tx %llu)", g->key,
			      (unsigned long long)g->rx, (unsigned long long)g->tx);
		}
		gfree(g);
		break;
	default:
		error("guest: conn %u: op %u", g->key, op);
	}
}

/* Guest connect to host port @port; NULL when the table is full. */
static struct gc *gconnect(uint32_t port)
{
	struct gc *g;

	do {
		next_lport = next_lport >= 60000 ? 20000 : next_lport + 1;
	} while (gfind(next_lport, port));
	g = gnew(next_lport, port);
	if (!g)
		return NULL;
	g->key = next_lport;
	g->abort = P.abort10 && next_lport % 10 == 7;
	g->hold = P.hold;
	g->ctl = C_REQ;
	g_pending++;
	S.g_open++;
	return g;
}

/* Send what @g has to send; false when the TX ring is full. */
static bool gtx(struct gc *g)
{
	static uint8_t buf[CHUNK];
	uint32_t credit, k;
	uint64_t left;
	uint8_t hello[4];

	if (g->ctl & C_RST) {
		if (gsend(g, VIRTIO_VSOCK_OP_RST, 0, NULL, 0) < 0)
			return false;
		if (g->abort && !g->hostinit)
			S.g_aborted++;
		gfree(g);
		return true;
	}
	if (g->ctl & C_REQ) {
		if (gsend(g, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0) < 0)
			return false;
		g->ctl &= ~C_REQ;
	}
	if (g->ctl & C_RESP) {
		if (gsend(g, VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0) < 0)
			return false;
		g->ctl &= ~C_RESP;
	}
	if (!g->up)
		return true;
	while (g->hello_tx) {
		credit = g->peer_buf - (g->tx_cnt - g->peer_fwd);
		if ((int32_t)credit < 4)
			break;
		hello[0] = (uint8_t)g->lport;
		hello[1] = (uint8_t)(g->lport >> 8);
		hello[2] = (uint8_t)(g->lport >> 16);
		hello[3] = (uint8_t)(g->lport >> 24);
		if (gsend(g, VIRTIO_VSOCK_OP_RW, 0, hello, 4) < 0)
			return false;
		g->tx_cnt += 4;
		g->hello_tx = 0;
	}
	while (!g->hello_tx && S.go && !g->abort && !g->hold && g->tx < P.size) {
		credit = g->peer_buf - (g->tx_cnt - g->peer_fwd);
		if ((int32_t)credit <= 0)
			break;
		left = P.size - g->tx;
		k = left < CHUNK ? (uint32_t)left : CHUNK;
		if (k > credit)
			k = credit;
		fill(buf, k, g->key, 0, g->tx);
		if (P.flip_at >= 0 && g->hostinit && g->key == P.flip_key &&
		    (uint64_t)P.flip_at >= g->tx && (uint64_t)P.flip_at < g->tx + k)
			buf[(uint64_t)P.flip_at - g->tx] ^= 0x10;
		if (gsend(g, VIRTIO_VSOCK_OP_RW, 0, buf, k) < 0)
			return false;
		g->tx += k;
		g->tx_cnt += k;
	}
	if (g->ctl & C_CREDIT) {
		if (gsend(g, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0) < 0)
			return false;
		g->ctl &= ~C_CREDIT;
	}
	if (!g->tx_shut && !g->abort && !g->hold && !g->hello_tx && g->tx == P.size &&
	    (S.go || !P.size)) {
		if (gsend(g, VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0) < 0)
			return false;
		g->tx_shut = true;
	}
	if (g_finished(g) && !g->closing) {
		/* close(): SHUTDOWN both ways, vsxd answers RST */
		if (gsend(g, VIRTIO_VSOCK_OP_SHUTDOWN, 3, NULL, 0) < 0)
			return false;
		g->closing = true;
	}
	return true;
}

/* One round of the guest: take RX, start connections, send. True if
 * anything happened. */
static bool guest_step(void)
{
	static uint8_t data[65536];
	struct virtio_vsock_hdr h;
	bool busy = false;
	unsigned i, n = 0;
	int len;

	while (n++ < 512 && (len = drv_recv(d, &h, data, sizeof(data), 0)) >= 0) {
		ghandle(&h, data, len);
		busy = true;
	}
	while (orphan_n) {
		struct virtio_vsock_hdr r = {
			.src_cid = htole64(cid), .dst_cid = htole64(VSOCK_CID_HOST),
			.src_port = htole32(orphan_q[orphan_n - 1][0]),
			.dst_port = htole32(orphan_q[orphan_n - 1][1]),
			.type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
			.op = htole16(VIRTIO_VSOCK_OP_RST),
		};

		if (drv_send(d, &r, NULL, 0, 0) < 0)
			return true;
		orphan_n--;
	}
	while (S.g_started < S.g_total && g_pending < P.inflight &&
	       (P.barrier || S.g_open < P.inflight)) {
		if (!gconnect(HPORT))
			break;
		S.g_started++;
		busy = true;
	}
	for (i = 0; i < nglive; i++) {
		struct gc *g = glive[i];
		unsigned before = nglive;

		if (!gtx(g))
			return true;
		if (nglive < before)
			i--;    /* freed: another one moved into slot i */
	}
	return busy;
}

/* ---- The host ---- */

enum { H_CONNECT, H_HANDSHAKE, H_HELLO, H_DATA };

struct hc {
	int fd, state;
	bool hostinit, abort, hold, shut, eof, want_out;
	uint32_t key;
	uint64_t rx, tx;
	char line[40];
	unsigned linelen;
	uint8_t hello[4];
	unsigned hellolen;
	long long t0;
	int slot;
};

static int ep = -1, lfd = -1;
static struct hc *hlive[MAXCONN];
static unsigned nhlive;
static unsigned h_pending;      /* handshakes in progress */
static struct hc *hlast;        /* the last host connection started */

static void hupdate(struct hc *c)
{
	struct epoll_event ev = { .events = EPOLLIN | (c->want_out ? EPOLLOUT : 0),
				  .data.ptr = c };

	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void hclose(struct hc *c, bool done)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->state == H_HANDSHAKE)
		h_pending--;
	if (done) {
		if (c->hostinit)
			S.h_done++;
		else
			S.g_done++;
	}
	if (hlast == c)
		hlast = NULL;
	hlive[c->slot] = hlive[--nhlive];
	hlive[c->slot]->slot = c->slot;
	free(c);
}

static void hadd(struct hc *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	c->slot = (int)nhlive;
	hlive[nhlive++] = c;
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static int uds_connect(const char *path, int *fd)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };

	*fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (*fd < 0)
		return -errno;
	snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
	if (connect(*fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		int e = errno;

		close(*fd);
		*fd = -1;
		return -e;
	}
	return 0;
}

/* Host connect to guest port @port; -EAGAIN when vsxd's backlog is full. */
static int hconnect(uint32_t port)
{
	char line[32];
	struct hc *c;
	int fd, rc, n;

	rc = uds_connect(uds, &fd);
	if (rc < 0)
		return rc;
	n = snprintf(line, sizeof(line), "CONNECT %u\n", port);
	if (write(fd, line, (size_t)n) != n) {
		rc = -errno;
		close(fd);
		return rc;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->state = H_HANDSHAKE;
	c->hostinit = true;
	c->hold = P.hold;
	c->t0 = vsx__now_ms();
	hadd(c);
	h_pending++;
	hlast = c;
	return 0;
}

static void hdata_in(struct hc *c, const uint8_t *p, size_t n)
{
	long bad;

	if (c->abort || c->rx + n > P.size) {
		error("host: conn %u: %zu unexpected bytes at %llu", c->key, n,
		      (unsigned long long)c->rx);
		return;
	}
	bad = check(p, n, c->key, 0, c->rx);
	if (bad >= 0) {
		if (S.bad_offset < 0)
			S.bad_offset = (long)(c->rx + (uint64_t)bad);
		error("host: conn %u: byte %llu of the guest's stream is wrong", c->key,
		      (unsigned long long)(c->rx + (uint64_t)bad));
	}
	c->rx += n;
	S.bytes += n;
}

/* Returns false when @c was closed. */
static bool hstep(struct hc *c, uint32_t events)
{
	static uint8_t buf[65536];
	ssize_t n;
	size_t k;
	char *nl;

	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		for (;;) {
			n = read(c->fd, buf, sizeof(buf));
			if (n < 0 && errno == EAGAIN)
				break;
			if (n <= 0) {
				if (c->state == H_HANDSHAKE) {
					error("host: CONNECT %u refused (%s)", GPORT,
					      n ? strerror(errno) : "closed");
					hclose(c, false);
					return false;
				}
				if (c->state == H_HELLO && c->hellolen == 0 && n == 0) {
					/* a guest connection reset at once */
					S.g_aborted_h++;
					hclose(c, false);
					return false;
				}
				if (c->hold)
					S.held_eof++;
				else if (n < 0 || c->rx != (c->abort ? 0 : P.size))
					error("host: conn %u: %s after %llu bytes", c->key,
					      n ? strerror(errno) : "EOF",
					      (unsigned long long)c->rx);
				c->eof = true;
				break;
			}
			k = 0;
			if (c->state == H_HANDSHAKE) {
				size_t m = (size_t)n;

				nl = memchr(buf, '\n', m);
				k = nl ? (size_t)(nl - (char *)buf) + 1 : m;
				if (c->linelen + k >= sizeof(c->line)) {
					error("host: overlong handshake reply");
					hclose(c, false);
					return false;
				}
				memcpy(c->line + c->linelen, buf, k);
				c->linelen += (unsigned)k;
				if (!nl)
					continue;
				c->line[c->linelen] = '\0';
				if (sscanf(c->line, "OK %u", &c->key) != 1) {
					error("host: handshake reply '%s'", c->line);
					hclose(c, false);
					return false;
				}
				c->state = H_DATA;
				h_pending--;
				S.h_up++;
				c->abort = P.abort10 && c->key % 10 == 7;
				if (c->abort) {
					S.h_aborted++;
					hclose(c, true);
					return false;
				}
				c->want_out = true;
				hupdate(c);
			}
			while (c->state == H_HELLO && k < (size_t)n && c->hellolen < 4)
				c->hello[c->hellolen++] = buf[k++];
			if (c->state == H_HELLO && c->hellolen == 4) {
				c->key = (uint32_t)c->hello[0] | (uint32_t)c->hello[1] << 8 |
					 (uint32_t)c->hello[2] << 16 | (uint32_t)c->hello[3] << 24;
				c->state = H_DATA;
				c->hold = P.hold;
				S.h_up++;
				c->want_out = true;
				hupdate(c);
			}
			if (k < (size_t)n)
				hdata_in(c, buf + k, (size_t)n - k);
		}
	}
	while (c->state == H_DATA && S.go && !c->hold && c->tx < P.size) {
		k = P.size - c->tx < sizeof(buf) ? (size_t)(P.size - c->tx) : sizeof(buf);
		fill(buf, k, c->key, 1, c->tx);
		n = send(c->fd, buf, k, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN) {
				error("host: conn %u: send: %s after %llu bytes", c->key,
				      strerror(errno), (unsigned long long)c->tx);
				c->tx = P.size;
			}
			break;
		}
		c->tx += (uint64_t)n;
	}
	if (c->state == H_DATA && !c->hold && !c->shut && c->tx == P.size &&
	    (S.go || !P.size)) {
		shutdown(c->fd, SHUT_WR);
		c->shut = true;
		c->want_out = false;
		hupdate(c);
	}
	if (c->eof && (c->shut || c->hold)) {
		hclose(c, !c->hold);
		return false;
	}
	return true;
}

static bool host_step(void)
{
	struct epoll_event evs[256];
	bool busy = false;
	int i, n, fd;

	while (S.h_started < S.h_total && h_pending < P.inflight &&
	       (P.barrier || S.h_started - S.h_done < P.inflight)) {
		if (hconnect(GPORT) < 0)
			break;  /* EAGAIN: vsxd's backlog is full */
		S.h_started++;
		busy = true;
	}
	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			break;
		struct hc *c = calloc(1, sizeof(*c));

		if (!c) {
			close(fd);
			break;
		}
		if (nhlive >= MAXCONN) {
			close(fd);
			free(c);
			break;
		}
		c->fd = fd;
		c->state = H_HELLO;
		c->t0 = vsx__now_ms();
		hadd(c);
		busy = true;
	}
	n = epoll_wait(ep, evs, 256, 0);
	for (i = 0; i < n; i++)
		hstep(evs[i].data.ptr, evs[i].events);
	return busy || n > 0;
}

/* ---- Running ---- */

static unsigned nglive_held;   /* guest connections held aside (churn) */

static bool all_done(void)
{
	return S.h_done >= S.h_total && S.g_done + S.g_aborted_h >= S.g_total &&
	       nglive <= nglive_held;
}

static void step(void)
{
	bool busy = guest_step();

	busy |= host_step();
	/* every connection is up on both sides once the host has the OK of
	 * each of its own and the hello of each of the guest's */
	if (!S.go && P.barrier && S.h_up == S.h_total + S.g_total)
		S.go = true;
	if (!busy)
		usleep(200);
}

static int run(const char *what)
{
	while (!all_done()) {
		if (vsx__now_ms() > t_end) {
			error("%s: time is up: host %u/%u done, guest-initiated %u/%u done, "
			      "%u guest connection(s) live, %u up (host view), go=%d", what,
			      S.h_done, S.h_total, S.g_done, S.g_total, nglive, S.h_up, S.go);
			return -1;
		}
		step();
	}
	return 0;
}

static void reset_figures(unsigned nh, unsigned ng)
{
	unsigned errors = S.errors;

	memset(&S, 0, sizeof(S));
	S.errors = errors;
	S.h_total = nh;
	S.g_total = ng;
	S.go = !P.barrier;
	S.bad_offset = -1;
}

static int proc_fds(int pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

static long proc_rss_kib(int pid)
{
	char path[64], line[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Wait up to @ms for vsxd's fd count to come back to @want (it closes
 * sockets as the last packets of a connection are handled). */
static int fds_settle(int pid, int want, int ms)
{
	long long end = vsx__now_ms() + ms;
	int n;

	for (;;) {
		n = proc_fds(pid);
		if (n == want || vsx__now_ms() > end)
			return n;
		step();
	}
}

static int host_listen(void)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };

	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	snprintf(un.sun_path, sizeof(un.sun_path), "%s_%u", uds, HPORT);
	unlink(un.sun_path);
	if (bind(lfd, (struct sockaddr *)&un, sizeof(un)) < 0 || listen(lfd, 4096) < 0)
		return -errno;
	return 0;
}

static int attach(const char *vhost, int wait_ms)
{
	long long end = vsx__now_ms() + wait_ms;
	int rc;

	for (;;) {
		rc = drv_open(vhost, NULL, &d);
		if (rc == 0 || vsx__now_ms() > end)
			break;
		usleep(100 * 1000);
	}
	if (rc < 0) {
		fprintf(stderr, "loadgen: %s: %s\n", vhost, strerror(-rc));
		return rc;
	}
	cid = drv_cid(d);
	return 0;
}

/* ---- Modes ---- */

static int mode_conc(unsigned n, uint64_t size)
{
	double t0, t1, ts;
	unsigned nh = n / 2, ng = n - n / 2;

	P.size = size;
	P.barrier = true;
	P.inflight = 32;
	reset_figures(nh, ng);
	t0 = now_s();
	while (!S.go && vsx__now_ms() < t_end && !S.errors)
		step();
	ts = now_s();
	if (!S.go) {
		error("conc: only %u of %u connections came up", S.h_up, n);
		return 1;
	}
	printf("conc: %u connections up at once (%u opened by the host, %u by the guest) "
	       "in %.2f s; the guest holds %u\n", n, nh, ng, ts - t0, nglive);
	S.bytes = 0;
	if (run("conc") < 0)
		return 1;
	t1 = now_s();
	printf("conc: connections=%u bytes=%llu (%llu each way on each) seconds=%.2f "
	       "MiB/s=%.1f errors=%u\n", n, (unsigned long long)S.bytes,
	       (unsigned long long)size, t1 - ts, (double)S.bytes / 1048576.0 / (t1 - ts),
	       S.errors);
	if (S.bytes != 2ull * n * size)
		error("conc: %llu bytes checked, expected %llu", (unsigned long long)S.bytes,
		      2ull * n * size);
	return S.errors ? 1 : 0;
}

static int cycles(unsigned n)
{
	P.size = 100;
	P.barrier = false;
	P.abort10 = true;
	P.inflight = 16;
	reset_figures(n / 2, n - n / 2);
	return run("cycles");
}

static int mode_cycles(unsigned n, unsigned warm, int pid)
{
	int fd0 = 0, fd1 = 0;
	long rss0 = 0, rss1 = 0;
	double t0, t1;
	unsigned ab;

	if (warm && cycles(warm) < 0)
		return 1;
	if (pid > 0) {
		fd0 = proc_fds(pid);
		rss0 = proc_rss_kib(pid);
	}
	t0 = now_s();
	if (cycles(n) < 0)
		return 1;
	t1 = now_s();
	ab = S.h_aborted + S.g_aborted;
	printf("cycles: %u connect/close cycles (%u opened by the host, %u by the guest; "
	       "%u aborted) in %.2f s (%.0f/s), %llu bytes checked, errors=%u\n", n,
	       S.h_total, S.g_total, ab, t1 - t0, n / (t1 - t0),
	       (unsigned long long)S.bytes, S.errors);
	if (ab < n / 20)
		error("cycles: only %u aborted cycles", ab);
	if (pid > 0) {
		fd1 = fds_settle(pid, fd0, 10000);
		rss1 = proc_rss_kib(pid);
		printf("cycles: vsxd fds start=%d end=%d; VmRSS start=%ld KiB end=%ld KiB "
		       "(%+ld KiB)\n", fd0, fd1, rss0, rss1, rss1 - rss0);
		if (fd0 <= 0 || fd1 != fd0)
			error("cycles: vsxd's fd count %d at the start, %d at the end", fd0, fd1);
	}
	return S.errors ? 1 : 0;
}

static int mode_flip(void)
{
	unsigned i;

	P.size = 256 * 1024;
	P.barrier = true;
	P.inflight = 4;
	reset_figures(2, 2);
	while (!S.go && vsx__now_ms() < t_end)
		step();
	if (!S.go)
		return 1;
	/* the guest flips a bit on the connection with the lowest host port */
	P.flip_key = UINT32_MAX;
	for (i = 0; i < nglive; i++)
		if (glive[i]->hostinit && glive[i]->key < P.flip_key)
			P.flip_key = glive[i]->key;
	P.flip_at = 100000;
	run("flip");
	printf("flip: the guest flipped a bit of byte %ld on connection %u; the host "
	       "reported byte %ld; errors=%u\n", P.flip_at, P.flip_key, S.bad_offset,
	       S.errors);
	return S.errors == 1 && S.bad_offset == P.flip_at ? 0 : 1;
}

/* ---- pingpong: round trips on one connection ---- */

static int ncmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The guest's next packet of kind @op for port pair (@lp, @pp), others
 * answered or dropped as a Linux guest would: -1 after 5 s. */
static int pp_expect(uint16_t op, uint32_t lp, uint32_t pp, struct virtio_vsock_hdr *h,
		     uint8_t *data, size_t max)
{
	long long end = vsx__now_ms() + 5000;
	int len;

	while (vsx__now_ms() < end) {
		len = drv_recv(d, h, data, max, 1000);
		if (len < 0)
			continue;
		if (le16toh(h->op) == op && le32toh(h->dst_port) == lp &&
		    (!pp || le32toh(h->src_port) == pp))
			return len;
	}
	return -1;
}

static int pp_send(uint16_t op, uint32_t lp, uint32_t pp, uint32_t fwd, const void *data,
		   uint32_t len)
{
	struct virtio_vsock_hdr h = {
		.src_cid = htole64(cid), .dst_cid = htole64(VSOCK_CID_HOST),
		.src_port = htole32(lp), .dst_port = htole32(pp), .len = htole32(len),
		.type = htole16(VIRTIO_VSOCK_TYPE_STREAM), .op = htole16(op),
		.buf_alloc = htole32(GUEST_BUF), .fwd_cnt = htole32(fwd),
	};

	return drv_send(d, &h, data, len, 5000);
}

static bool fd_read_all(int fd, uint8_t *p, size_t n)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	ssize_t r;

	while (n) {
		r = read(fd, p, n);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
		} else if (r < 0 && errno == EAGAIN) {
			if (poll(&pf, 1, 5000) != 1)
				return false;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else {
			return false;
		}
	}
	return true;
}

static int mode_pingpong(unsigned n, unsigned size)
{
	static uint8_t out[65536], in[65536], g[65536];
	struct virtio_vsock_hdr h;
	char line[64];
	long long *rtt;
	uint32_t pp, fwd = 0;
	unsigned i, k;
	int fd, len;

	if (!n || !size || size > sizeof(out)) {
		fprintf(stderr, "loadgen: pingpong: N > 0, SIZE 1..65536\n");
		return 2;
	}
	rtt = calloc(n, sizeof(*rtt));
	if (!rtt || uds_connect(uds, &fd) < 0) {
		perror("loadgen: pingpong");
		return 1;
	}
	len = snprintf(line, sizeof(line), "CONNECT %u\n", GPORT);
	if (write(fd, line, (size_t)len) != len ||
	    pp_expect(VIRTIO_VSOCK_OP_REQUEST, GPORT, 0, &h, g, sizeof(g)) < 0) {
		error("pingpong: no REQUEST for port %u", GPORT);
		return 1;
	}
	pp = le32toh(h.src_port);
	if (pp_send(VIRTIO_VSOCK_OP_RESPONSE, GPORT, pp, 0, NULL, 0) < 0) {
		error("pingpong: RESPONSE not sent");
		return 1;
	}
	/* "OK <port>\n" */
	for (k = 0; k < sizeof(line) - 1; k++) {
		if (!fd_read_all(fd, (uint8_t *)line + k, 1)) {
			error("pingpong: no OK line");
			return 1;
		}
		if (line[k] == '\n')
			break;
	}
	for (i = 0; i < n; i++) {
		long long t0;
		uint32_t got = 0;

		for (k = 0; k < size; k++)
			out[k] = (uint8_t)(i * 7 + k);
		t0 = now_ns();
		if (write(fd, out, size) != (ssize_t)size) {
			error("pingpong: host write: %s", strerror(errno));
			return 1;
		}
		while (got < size) {
			len = pp_expect(VIRTIO_VSOCK_OP_RW, GPORT, pp, &h, g + got, sizeof(g) - got);
			if (len <= 0) {
				error("pingpong: round trip %u: the guest got %u of %u bytes", i,
				      got, size);
				return 1;
			}
			got += (uint32_t)len;
		}
		fwd += size;
		if (memcmp(g, out, size) || pp_send(VIRTIO_VSOCK_OP_RW, GPORT, pp, fwd, g, size) < 0 ||
		    !fd_read_all(fd, in, size) || memcmp(in, out, size)) {
			error("pingpong: round trip %u: bytes differ or went missing", i);
			return 1;
		}
		rtt[i] = now_ns() - t0;
	}
	qsort(rtt, n, sizeof(*rtt), ncmp);
	printf("pingpong n=%u size=%u p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f "
	       "max_us=%.1f\n", n, size, rtt[n / 2] / 1e3, rtt[n * 9 / 10] / 1e3,
	       rtt[n * 99 / 100] / 1e3, rtt[(size_t)n * 999 / 1000] / 1e3, rtt[n - 1] / 1e3);
	close(fd);
	free(rtt);
	return S.errors ? 1 : 0;
}

/* Run until @cond or @ms passed; returns cond. */
#define UNTIL(cond, ms) ({                                              \
	long long _e = vsx__now_ms() + (ms);                                 \
	while (!(cond) && vsx__now_ms() < _e)                                \
		step();                                                 \
	(cond);                                                         \
})

/* Let host connection @c and its guest side go: data, then close. */
static void release(struct hc *c)
{
	struct gc *g = c->hostinit ? gfind(GPORT, c->key) : gfind(c->key, HPORT);

	c->hold = false;
	c->want_out = true;
	hupdate(c);
	if (g)
		g->hold = false;
}

/* Forget every guest connection without a word (the device went away). */
static void guest_forget(void)
{
	while (nglive)
		gfree(glive[0]);
	g_pending = 0;
}

/* CPU time vsxd's threads have had, in ns (schedstat), or -1 */
static long long proc_cpu_ns(int pid)
{
	char path[320], line[128];
	struct dirent *e;
	long long sum = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir))) {
		unsigned long long ns;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f) && sscanf(line, "%llu", &ns) == 1)
			sum += (long long)ns;
		fclose(f);
	}
	closedir(dir);
	return sum;
}

static int mode_churn(unsigned hold, unsigned n, unsigned warm, int pid)
{
	unsigned held = 0;
	long long c0, c1;
	double t0, t1;

	if (pid <= 0) {
		error("churn: needs -p VSXD_PID");
		return 1;
	}
	P.size = 4096;
	P.hold = true;
	P.inflight = 1;
	reset_figures(0, 0);
	S.go = true;
	t0 = now_s();
	while (held < hold) {
		if (hconnect(GPORT) < 0 || !UNTIL(!hlast || hlast->state == H_DATA, 5000) ||
		    !hlast) {
			error("churn: held connection %u was not served", held + 1);
			return 1;
		}
		held++;
	}
	/* the guest's halves of them are up too */
	UNTIL(nglive >= held, 5000);
	nglive_held = nglive;
	printf("churn: %u connections held open (%.2f s); the guest holds %u\n", held,
	       now_s() - t0, nglive);
	P.hold = false;
	if (warm && cycles(warm) < 0)
		return 1;
	c0 = proc_cpu_ns(pid);
	t0 = now_s();
	if (cycles(n) < 0)
		return 1;
	t1 = now_s();
	c1 = proc_cpu_ns(pid);
	printf("churn: held=%u cycles=%u vsxd_cpu_ms=%.1f us_per_cycle=%.1f wall_us_per_cycle=%.1f "
	       "errors=%u\n", held, n, (double)(c1 - c0) / 1e6, (double)(c1 - c0) / 1e3 / n,
	       (t1 - t0) * 1e6 / n, S.errors);
	if (nglive < held)
		error("churn: %u of the %u held connections ended", held - nglive, held);
	return S.errors ? 1 : 0;
}

static int mode_fdlimit(int pid)
{
	unsigned held = 0, released = 0, errs, i, h0, g0;
	bool refused = false;
	struct hc *waiting;
	struct gc *g;
	uint32_t lport;
	int rc;

	P.size = 4096;
	P.hold = true;
	P.inflight = 1;
	reset_figures(0, 0);
	S.go = true;
	/* host connections, one at a time, until one is not served in 3 s */
	while (held < 4000) {
		rc = hconnect(GPORT);
		if (rc < 0) {
			printf("fdlimit: connect() to the hybrid socket: %s\n", strerror(-rc));
			break;
		}
		if (!UNTIL(!hlast || hlast->state == H_DATA, 3000) || !hlast)
			break;
		held++;
	}
	waiting = hlast;
	printf("fdlimit: %u host connection(s) served; the next one %s; vsxd has %d fds\n",
	       held, waiting ? "waits (vsxd cannot accept it)" : "was closed (refused)",
	       pid > 0 ? proc_fds(pid) : -1);
	S.errors = 0;   /* a closed CONNECT was reported: the expected refusal */
	if (held == 0 || held >= 4000) {
		error("fdlimit: %u connections served before the limit", held);
		return 1;
	}
	S.errors = 0;
	/* a guest connect now: vsxd has no fd for its host side: RST */
	g = gconnect(HPORT);
	if (!g) {
		error("fdlimit: no room for a guest connection");
		return 1;
	}
	lport = g->lport;
	if (UNTIL(!gfind(lport, HPORT) || g->up, 5000) && !gfind(lport, HPORT)) {
		refused = true;
		S.errors--;     /* its "refused (RST)" report is the expected outcome */
	}
	printf("fdlimit: a guest connect at the limit was %s\n",
	       refused ? "refused (RST)" : "NOT refused");
	if (!refused)
		error("fdlimit: a guest connect at the limit was not refused");
	/* half of the held connections move 4 KiB each way and close */
	for (i = 0; i < nhlive && released < held / 2 + 1; i++)
		if (hlive[i] != waiting && hlive[i]->state == H_DATA) {
			release(hlive[i]);
			released++;
		}
	if (!UNTIL(S.h_done >= released, 20000))
		error("fdlimit: %u of %u released connections finished", S.h_done, released);
	/* the waiting one is accepted now */
	if (waiting) {
		if (!UNTIL(!hlast || hlast->state == H_DATA, 10000) || !hlast) {
			error("fdlimit: the connection that waited was not served");
			return 1;
		}
		release(hlast);
		if (!UNTIL(S.h_done >= released + 1, 20000))
			error("fdlimit: the connection that waited did not finish");
	}
	printf("fdlimit: %u connection(s) moved 4 KiB each way and closed%s\n", released,
	       waiting ? "; the one that waited was then served and did too" : "");
	/* new connections both ways, not held */
	P.hold = false;
	h0 = S.h_done;
	g0 = S.g_done;
	if (hconnect(GPORT) < 0 || !gconnect(HPORT))
		error("fdlimit: new connections could not be started");
	if (!UNTIL(S.h_done == h0 + 1 && S.g_done == g0 + 1, 20000))
		error("fdlimit: new connections after the limit: host %u guest %u done",
		      S.h_done - h0, S.g_done - g0);
	else
		printf("fdlimit: after that, a new host->guest and a new guest->host "
		       "connection moved 4 KiB each way, checked\n");
	for (i = 0; i < nhlive; i++)
		release(hlive[i]);
	if (!UNTIL(!nhlive && !nglive, 20000))
		error("fdlimit: %u host and %u guest connection(s) left", nhlive, nglive);
	errs = S.errors;
	printf("fdlimit: served=%u refused-guest-connects=%d recovered=%s errors=%u\n", held,
	       refused, errs ? "no" : "yes", errs);
	return errs ? 1 : 0;
}

/* A host->guest and a guest->host connection, 64 KiB each way moved and
 * held open. */
static int two_held(const char *what)
{
	P.size = 65536;
	P.hold = true;
	P.inflight = 1;
	reset_figures(0, 0);
	S.go = true;
	if (hconnect(GPORT) < 0 || !gconnect(HPORT) ||
	    !UNTIL(S.h_up == 2 && nglive == 2, 10000)) {
		error("%s: the connections did not come up", what);
		return -1;
	}
	return 0;
}

static int after_reset(const char *vhost, bool same, int pid)
{
	struct virtio_vsock_hdr h = { 0 };
	uint32_t lport = GPORT, pport = 0, id = 99;
	bool stale_rst = false;
	unsigned i, rst0;
	int rc;
	double t0;

	for (i = 0; i < nglive; i++)
		if (glive[i]->hostinit)
			pport = glive[i]->key;
	t0 = now_s();
	drv_close(d);
	d = NULL;
	guest_forget();
	if (attach(vhost, 20000) < 0)
		return 1;
	printf("%s: the front-end reconnected after %.2f s (cid %llu)\n", same ? "reattach" :
	       "restart", now_s() - t0, (unsigned long long)cid);
	/* the host ends of both connections read EOF */
	if (!UNTIL(!nhlive, 10000))
		error("the host ends of the old connections did not read EOF (%u left)", nhlive);
	else
		printf("the host ends of both old connections read EOF (%u)\n", S.held_eof);
	/* vsxd sends the event at every device start, a restarted one too */
	rc = drv_recv_event(d, &id, 5000);
	printf("event queue: %s\n", rc == 0 ? (id == VIRTIO_VSOCK_EVENT_TRANSPORT_RESET ?
	       "VIRTIO_VSOCK_EVENT_TRANSPORT_RESET" : "an unknown event") :
	       rc == -ETIMEDOUT ? "no event" : strerror(-rc));
	if (rc != 0 || id != VIRTIO_VSOCK_EVENT_TRANSPORT_RESET)
		error("%s: no TRANSPORT_RESET event (%s, id %u)", same ? "reattach" : "restart",
		      strerror(-rc), id);
	/* a packet of the stale connection meets an RST */
	rst0 = rst_seen;
	h.src_cid = htole64(cid);
	h.dst_cid = htole64(VSOCK_CID_HOST);
	h.src_port = htole32(lport);
	h.dst_port = htole32(pport);
	h.len = htole32(8);
	h.type = htole16(VIRTIO_VSOCK_TYPE_STREAM);
	h.op = htole16(VIRTIO_VSOCK_OP_RW);
	h.buf_alloc = htole32(GUEST_BUF);
	if (drv_send(d, &h, "stale!!!", 8, 5000) < 0)
		error("sending the stale packet failed");
	stale_rst = UNTIL(rst_seen > rst0 && last_rst[0] == pport && last_rst[1] == lport,
			  5000);
	printf("a packet of the stale connection (guest port %u, host port %u): %s\n",
	       lport, pport, stale_rst ? "RST" : "no RST");
	if (!stale_rst)
		error("the stale connection's packet got no RST");
	/* new connections, both ways, 256 KiB each way, checked */
	P.size = 256 * 1024;
	P.hold = false;
	P.inflight = 4;
	reset_figures(2, 2);
	if (run("new connections") == 0)
		printf("4 new connections (2 each way) moved %llu bytes, checked\n",
		       (unsigned long long)S.bytes);
	if (pid > 0)
		printf("vsxd has %d fds\n", proc_fds(pid));
	return S.errors ? 1 : 0;
}

static int mode_reattach(const char *vhost, int pid)
{
	if (two_held("reattach") < 0)
		return 1;
	return after_reset(vhost, true, pid);
}

static int mode_restart(const char *vhost)
{
	char line[64];

	if (two_held("restart") < 0)
		return 1;
	printf("ready\n");
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	return after_reset(vhost, false, 0);
}

/* Host connections abandoned while their REQUEST is unanswered: how long
 * until vsxd resets them towards the guest. */
static int mode_abandon(unsigned n)
{
	double t0, t1;
	unsigned i;

	P.ignore_req = true;
	P.inflight = n;
	reset_figures(0, 0);
	for (i = 0; i < n; i++)
		if (hconnect(GPORT) < 0)
			break;
	if (!UNTIL(S.req_ignored >= n, 10000)) {
		error("abandon: %u of %u REQUESTs arrived", S.req_ignored, n);
		return 1;
	}
	while (nhlive)
		hclose(hlive[0], false);
	t0 = now_s();
	rst_seen = 0;
	UNTIL(rst_seen >= n, 20000);
	t1 = now_s();
	printf("abandon: %u host connections closed while their REQUEST was unanswered; "
	       "the guest got %u RST(s), the last %.2f s later\n", n, rst_seen, t1 - t0);
	if (rst_seen < n)
		error("abandon: only %u of %u connections were reset", rst_seen, n);
	return S.errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	int pid = 0, secs = 300, opt, rc = 2;
	const char *mode;

	while ((opt = getopt(argc, argv, "p:T:")) != -1) {
		switch (opt) {
		case 'p':
			pid = atoi(optarg);
			break;
		case 'T':
			secs = atoi(optarg);
			break;
		default:
			goto usage;
		}
	}
	if (argc - optind < 3)
		goto usage;
	uds = argv[optind + 1];
	mode = argv[optind + 2];
	t_end = vsx__now_ms() + (long long)secs * 1000;
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0 || host_listen() < 0) {
		perror("loadgen: host listener");
		return 1;
	}
	if (attach(argv[optind], 5000) < 0)
		return 1;
	if (!strcmp(mode, "conc") && argc - optind == 5)
		rc = mode_conc((unsigned)atoi(argv[optind + 3]),
			       strtoull(argv[optind + 4], NULL, 0));
	else if (!strcmp(mode, "cycles") && argc - optind >= 4)
		rc = mode_cycles((unsigned)atoi(argv[optind + 3]),
				 argc - optind > 4 ? (unsigned)atoi(argv[optind + 4]) : 0, pid);
	else if (!strcmp(mode, "churn") && argc - optind >= 5)
		rc = mode_churn((unsigned)atoi(argv[optind + 3]), (unsigned)atoi(argv[optind + 4]),
				argc - optind > 5 ? (unsigned)atoi(argv[optind + 5]) : 0, pid);
	else if (!strcmp(mode, "flip"))
		rc = mode_flip();
	else if (!strcmp(mode, "abandon") && argc - optind == 4)
		rc = mode_abandon((unsigned)atoi(argv[optind + 3]));
	else if (!strcmp(mode, "fdlimit"))
		rc = mode_fdlimit(pid);
	else if (!strcmp(mode, "reattach"))
		rc = mode_reattach(argv[optind], pid);
	else if (!strcmp(mode, "restart"))
		rc = mode_restart(argv[optind]);
	else if (!strcmp(mode, "pingpong") && argc - optind >= 4)
		rc = mode_pingpong((unsigned)atoi(argv[optind + 3]),
				   argc - optind > 4 ? (unsigned)atoi(argv[optind + 4]) : 1);
	else
		goto usage;
	if (d)
		drv_close(d);
	close(lfd);
	{
		char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];

		snprintf(path, sizeof(path), "%s_%u", uds, HPORT);
		unlink(path);
	}
	return rc;
usage:
	fprintf(stderr, "usage: loadgen [-p VSXD_PID] [-T SECS] VHOST UDS "
		"conc N SIZE | cycles N [WARMUP] | flip | fdlimit | reattach | restart |\n"
		"       abandon N | churn HELD N [WARMUP] | pingpong N [SIZE]\n");
	return 2;
}
