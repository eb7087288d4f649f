/*
 * guest_tests: libvsx over the guest kernel's vsock loopback transport.
 *
 * Runs INSIDE the lab guest (tests/vm/loopback.test boots it); it opens
 * AF_VSOCK sockets, so it refuses to run unless $VSX_LAB_GUEST is set (the
 * guest's /init sets it). Every case is real: bytes are compared one by one
 * against a seeded pattern, states and buffer sizes are read back, errors
 * are checked by value, and the only time bounds asserted are correctness
 * bounds (a close must not outlive its linger time, a refusal must come
 * within the connect timeout).
 *
 *   guest_tests all | list | CASE...
 *
 * Prints "ok - CASE" or "not ok - CASE: REASON" per case, "# ..." notes, and
 * finally "N passed, M failed". Exits 1 if any case failed. Each case runs
 * in its own child process under a time limit, so a hang or a crash fails
 * that case alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "pattern.h"
#include "util.h"

#define WHY_LEN 512
#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define BIG_TRANSFER (64 * MiB)

/* Every case has its own ports: PORT_BASE + 10 * case index + n. */
#define PORT_BASE 24000u

static unsigned case_port; /* the running case's first port */

/* ---- Small helpers ------------------------------------------------------ */


static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("# ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
}

/* Fail the case: record why and jump to its cleanup. */
#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			snprintf(why, WHY_LEN, __VA_ARGS__);      \
			goto out;                                 \
		}                                                 \
	} while (0)

/* A vsx call returned @r: its message (valid until the next vsx call). */
#define VERR(r) ((r) < 0 ? vsx_strerror((int)(r)) : "no error")

static const char *addr_of(unsigned port, const char *cid)
{
	static char buf[64];

	snprintf(buf, sizeof(buf), "vsock:%s:%u", cid, port);
	return buf;
}

/*
 * A connected pair over loopback: listen on vsock:any:PORT, connect to
 * vsock:local:PORT, accept. The kernel completes the handshake before
 * accept, so no second thread is needed. *l, *c, *a are the caller's.
 */
static int make_pair(unsigned port, const struct vsx_opts *lopts,
		     const struct vsx_opts *copts, vsx_sock **l, vsx_sock **c,
		     vsx_sock **a, char *why)
{
	struct pollfd p;
	int r;

	*l = *c = *a = NULL;
	r = vsx_listen(addr_of(port, "any"), lopts, l);
	if (r < 0) {
		snprintf(why, WHY_LEN, "vsx_listen(port %u): %s", port, VERR(r));
		return -1;
	}
	r = vsx_connect(addr_of(port, "local"), copts, c);
	if (r < 0) {
		snprintf(why, WHY_LEN, "vsx_connect(port %u): %s", port, VERR(r));
		return -1;
	}
	p = (struct pollfd){ .fd = vsx_fd(*l), .events = POLLIN };
	if (poll(&p, 1, 5000) != 1) {
		snprintf(why, WHY_LEN, "listener not readable 5 s after connect");
		return -1;
	}
	r = vsx_accept(*l, a);
	if (r < 0) {
		snprintf(why, WHY_LEN, "vsx_accept: %s", VERR(r));
		return -1;
	}
	return 0;
}

/* Shut both ends down first, so that neither close lingers for the other. */
static void close_all(vsx_sock *l, vsx_sock *c, vsx_sock *a)
{
	if (c)
		vsx_shutdown(c, SHUT_WR);
	if (a)
		vsx_shutdown(a, SHUT_WR);
	vsx_close(c);
	vsx_close(a);
	vsx_close(l);
}

/* ---- The byte pattern (tests/common/pattern.h) ----------------------------- */

/* Compare @n received bytes at stream offset @off; @scratch holds n bytes. */
static int pattern_check(uint64_t seed, uint64_t off, const uint8_t *got, size_t n,
			 uint8_t *scratch, char *why)
{
	uint64_t bad = pattern_mismatch(seed, off, got, n, scratch);
	size_t i;

	if (bad == UINT64_MAX)
		return 0;
	i = (size_t)(bad - off);
	snprintf(why, WHY_LEN, "byte %" PRIu64 " of the stream is 0x%02x, expected 0x%02x",
		 bad, got[i], scratch[i]);
	return -1;
}

/* Send @total pattern bytes from offset @off, @chunk bytes per vsx_send. */
static int send_pattern(vsx_sock *s, uint64_t seed, uint64_t off, uint64_t total,
			size_t chunk, char *why)
{
	uint8_t *buf = malloc(chunk);
	uint64_t done = 0;
	size_t n;
	ssize_t r;
	int rc = -1;

	CHECK(buf, "out of memory");
	while (done < total) {
		n = total - done < chunk ? (size_t)(total - done) : chunk;
		pattern_fill(seed, off + done, buf, n);
		r = vsx_send(s, buf, n);
		CHECK(r == (ssize_t)n, "vsx_send(%zu) at byte %" PRIu64 " returned %zd: %s",
		      n, off + done, r, VERR(r));
		done += n;
	}
	rc = 0;
out:
	free(buf);
	return rc;
}

/* Receive and check exactly @total pattern bytes, reads of up to @chunk. */
static int recv_pattern(vsx_sock *s, uint64_t seed, uint64_t off, uint64_t total,
			size_t chunk, char *why)
{
	uint8_t *buf = malloc(chunk), *scratch = malloc(chunk);
	uint64_t done = 0;
	size_t n;
	ssize_t r;
	int rc = -1;

	CHECK(buf && scratch, "out of memory");
	while (done < total) {
		n = total - done < chunk ? (size_t)(total - done) : chunk;
		r = vsx_recv(s, buf, n);
		CHECK(r != 0, "EOF after %" PRIu64 " of %" PRIu64 " bytes", done, total);
		CHECK(r > 0, "vsx_recv after %" PRIu64 " bytes: %s", done, VERR(r));
		if (pattern_check(seed, off + done, buf, (size_t)r, scratch, why) < 0)
			goto out;
		done += (uint64_t)r;
	}
	rc = 0;
out:
	free(buf);
	free(scratch);
	return rc;
}

/* The next vsx_recv on @who's socket must report EOF (0). */
static int expect_eof(vsx_sock *s, const char *who, char *why)
{
	char c;
	ssize_t r = vsx_recv(s, &c, 1);

	if (r == 0)
		return 0;
	if (r > 0)
		snprintf(why, WHY_LEN, "%s: data (0x%02x) where EOF was expected", who,
			 (uint8_t)c);
	else
		snprintf(why, WHY_LEN, "%s: vsx_recv where EOF was expected: %s", who, VERR(r));
	return -1;
}

/* A peer thread running one job on its own socket. */
struct job {
	vsx_sock *s;
	int (*fn)(struct job *j);
	uint64_t seed, total;
	size_t chunk;
	int linger_rc;
	double secs;     /* the whole job */
	double secs_rx;  /* its receiving part, where it has one */
	int rc;
	char why[WHY_LEN];
	pthread_t th;
};

static void *job_main(void *arg)
{
	struct job *j = arg;
	double t0 = now_s();

	j->rc = j->fn(j);
	j->secs = now_s() - t0;
	return NULL;
}

static int job_start(struct job *j, char *why)
{
	int r = pthread_create(&j->th, NULL, job_main, j);

	if (r)
		snprintf(why, WHY_LEN, "pthread_create: %s", strerror(r));
	return r ? -1 : 0;
}

/* Join @j; 0 if it succeeded, else copy its reason (prefixed) into @why. */
static int job_join(struct job *j, const char *who, char *why)
{
	pthread_join(j->th, NULL);
	if (j->rc == 0)
		return 0;
	snprintf(why, WHY_LEN, "%.20s: %.480s", who, j->why);
	return -1;
}

static int job_send(struct job *j)
{
	return send_pattern(j->s, j->seed, 0, j->total, j->chunk, j->why);
}

/* ---- Cases ---------------------------------------------------------------- */

static int port_of(const char *text, uint32_t *cid, uint32_t *port)
{
	struct vsx_addr a;

	if (vsx_addr_parse(text, &a) < 0 || a.kind != VSX_ADDR_VSOCK)
		return -1;
	*cid = a.cid;
	*port = a.port;
	return 0;
}

/* The checker itself: it must catch a flipped bit, a wrong seed, a shift. */
static int case_pattern_selfcheck(char *why)
{
	static uint8_t a[10007], b[10007], scratch[10007];
	char w[WHY_LEN] = "";
	int seen[256] = { 0 }, distinct = 0, ok = -1;
	size_t i;

	pattern_fill(5, 3, a, sizeof(a));
	pattern_fill(5, 3, b, 1);
	pattern_fill(5, 4, b + 1, 4000);
	pattern_fill(5, 4004, b + 4001, sizeof(b) - 4001);
	CHECK(memcmp(a, b, sizeof(a)) == 0, "filling in pieces differs from one fill");
	for (i = 0; i < sizeof(a); i++)
		distinct += !seen[a[i]]++;
	CHECK(distinct > 250, "only %d distinct byte values in 10007 bytes", distinct);
	CHECK(pattern_check(5, 3, a, sizeof(a), scratch, w) == 0, "clean data rejected: %s", w);
	b[7777] ^= 0x40;
	CHECK(pattern_check(5, 3, b, sizeof(b), scratch, w) < 0 && strstr(w, "byte 7780 "),
	      "a flipped bit at stream byte 7780 was not reported (%s)", w);
	CHECK(pattern_check(6, 3, a, sizeof(a), scratch, w) < 0, "another seed's data passed");
	CHECK(pattern_check(5, 4, a, sizeof(a), scratch, w) < 0, "data shifted by one passed");
	ok = 0;
out:
	return ok;
}

static int case_probe(char *why)
{
	struct vsx_probe p;
	int r, ok = -1;

	r = vsx_probe(&p);
	CHECK(r == 0, "vsx_probe: %s", VERR(r));
	note("probe: have 0x%x, local CID %" PRIu32 ", transport '%s'", p.have, p.local_cid,
	     p.transport);
	CHECK(p.have & VSX_HAVE_AF_VSOCK, "VSX_HAVE_AF_VSOCK not reported (vsock loaded)");
	CHECK(p.have & VSX_HAVE_LOOPBACK,
	      "VSX_HAVE_LOOPBACK not reported (vsock_loopback loaded)");
	CHECK(!(p.have & VSX_HAVE_VMBUS), "VSX_HAVE_VMBUS reported in a QEMU guest");
	CHECK(strcmp(p.transport, "virtio") == 0, "transport '%s', expected 'virtio'",
	      p.transport);
	ok = 0;
out:
	return ok;
}

static int case_connect_accept(char *why)
{
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	struct vsx_info li, ci, ai;
	uint32_t cid, port, cport, acid, aport;
	char want[64], buf[16];
	ssize_t n;
	int r, ok = -1;

	if (make_pair(case_port, NULL, NULL, &l, &c, &a, why) < 0)
		goto out;
	CHECK(vsx_fd(l) >= 0 && vsx_fd(c) >= 0 && vsx_fd(a) >= 0, "vsx_fd < 0");
	r = vsx_info(l, &li);
	CHECK(r == 0, "vsx_info(listener): %s", VERR(r));
	r = vsx_info(c, &ci);
	CHECK(r == 0, "vsx_info(connected): %s", VERR(r));
	r = vsx_info(a, &ai);
	CHECK(r == 0, "vsx_info(accepted): %s", VERR(r));
	note("listener: transport %s, state %d, local %s", li.transport, li.state, li.local);
	note("connect side: transport %s, state %d, local %s, peer %s", ci.transport,
	     ci.state, ci.local, ci.peer);
	note("accept side:  transport %s, state %d, local %s, peer %s", ai.transport,
	     ai.state, ai.local, ai.peer);

	CHECK(strcmp(li.transport, "virtio") == 0, "listener transport '%s'", li.transport);
	CHECK(li.state == VSX_STATE_LISTENING, "listener state %d", li.state);
	snprintf(want, sizeof(want), "vsock:any:%u", case_port);
	CHECK(strcmp(li.local, want) == 0, "listener local '%s', expected '%s'", li.local, want);

	CHECK(strcmp(ci.transport, "virtio") == 0, "connect side transport '%s'", ci.transport);
	CHECK(strcmp(ai.transport, "virtio") == 0, "accept side transport '%s'", ai.transport);
	CHECK(ci.state == VSX_STATE_CONNECTED, "connect side state %d", ci.state);
	CHECK(ai.state == VSX_STATE_CONNECTED, "accept side state %d", ai.state);
	CHECK(ci.type == SOCK_STREAM && ai.type == SOCK_STREAM, "type not SOCK_STREAM");

	/* connect side: the peer is what we dialled, in canonical text */
	snprintf(want, sizeof(want), "vsock:1:%u", case_port);
	CHECK(strcmp(ci.peer, want) == 0, "connect side peer '%s', expected '%s'", ci.peer,
	      want);
	/* accept side: local is the listening port on CID 1 */
	CHECK(strcmp(ai.local, want) == 0, "accept side local '%s', expected '%s'", ai.local,
	      want);
	/* the two ends name the same ephemeral port */
	CHECK(port_of(ci.local, &cid, &cport) == 0, "connect side local '%s' unparsable",
	      ci.local);
	CHECK(port_of(ai.peer, &acid, &aport) == 0, "accept side peer '%s' unparsable", ai.peer);
	CHECK(acid == VSX_CID_LOCAL, "accept side peer CID %" PRIu32 ", expected 1", acid);
	CHECK(cport == aport, "connect side local port %" PRIu32 " != accept side peer port %"
	      PRIu32, cport, aport);
	CHECK(cid == VSX_CID_LOCAL || cid == VSX_CID_ANY,
	      "connect side local CID %" PRIu32, cid);
	(void)port;

	/* and the pair carries bytes both ways */
	n = vsx_send(c, "ping", 4);
	CHECK(n == 4, "vsx_send(ping): %zd %s", n, VERR(n));
	n = vsx_recv(a, buf, sizeof(buf));
	CHECK(n == 4 && memcmp(buf, "ping", 4) == 0, "accept side got %zd bytes, not 'ping'", n);
	n = vsx_send(a, "pong!", 5);
	CHECK(n == 5, "vsx_send(pong): %zd %s", n, VERR(n));
	n = vsx_recv(c, buf, sizeof(buf));
	CHECK(n == 5 && memcmp(buf, "pong!", 5) == 0, "connect side got %zd bytes, not 'pong!'",
	      n);
	r = vsx_info(c, &ci);
	CHECK(r == 0 && ci.bytes_sent == 4 && ci.bytes_received == 5,
	      "connect side counters sent %" PRIu64 " received %" PRIu64 ", expected 4 and 5",
	      ci.bytes_sent, ci.bytes_received);
	ok = 0;
out:
	close_all(l, c, a);
	return ok;
}

/* 64 MiB each way, checked byte for byte: client->server, then back. */
static int job_bulk_client(struct job *j)
{
	double t0;
	int r;

	if (send_pattern(j->s, j->seed, 0, BIG_TRANSFER, MiB, j->why) < 0)
		return -1;
	r = vsx_shutdown(j->s, SHUT_WR);
	if (r < 0) {
		snprintf(j->why, WHY_LEN, "vsx_shutdown: %s", vsx_strerror(r));
		return -1;
	}
	t0 = now_s();
	if (recv_pattern(j->s, j->seed + 1, 0, BIG_TRANSFER, 65537, j->why) < 0 ||
	    expect_eof(j->s, "client", j->why) < 0)
		return -1;
	j->secs_rx = now_s() - t0; /* the reverse direction, as the client saw it */
	j->linger_rc = vsx_close(j->s);
	j->s = NULL;
	return 0;
}

static int case_transfer_64m(char *why)
{
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	struct job j = { .seed = 0x5eed0001, .fn = job_bulk_client };
	struct vsx_info ai;
	double t0, up, down;
	int r, started = 0, ok = -1;

	if (make_pair(case_port, NULL, NULL, &l, &c, &a, why) < 0)
		goto out;
	j.s = c;
	c = NULL; /* the job owns and closes it */
	t0 = now_s();
	if (job_start(&j, why) < 0)
		goto out;
	started = 1;
	if (recv_pattern(a, j.seed, 0, BIG_TRANSFER, 256 * KiB + 3, why) < 0)
		goto out;
	if (expect_eof(a, "server, after 64 MiB", why) < 0)
		goto out;
	up = now_s() - t0;
	note("64 MiB client->server in %.2f s (%.1f MiB/s), every byte checked", up, 64 / up);
	if (send_pattern(a, j.seed + 1, 0, BIG_TRANSFER, 777777, why) < 0)
		goto out;
	r = vsx_info(a, &ai);
	CHECK(r == 0, "vsx_info: %s", VERR(r));
	CHECK(ai.bytes_received == BIG_TRANSFER && ai.bytes_sent == BIG_TRANSFER,
	      "server counters: received %" PRIu64 ", sent %" PRIu64, ai.bytes_received,
	      ai.bytes_sent);
	CHECK(ai.state == VSX_STATE_CLOSING, "server state %d after the peer's EOF", ai.state);
	r = vsx_close(a);
	a = NULL;
	CHECK(r == 0, "server vsx_close: %s", VERR(r));
	started = 0;
	if (job_join(&j, "client", why) < 0)
		goto out;
	down = j.secs_rx;
	note("64 MiB server->client in %.2f s (%.1f MiB/s), every byte checked", down,
	     64 / down);
	CHECK(j.linger_rc == 0, "client vsx_close: %s", VERR(j.linger_rc));
	ok = 0;
out:
	if (started) {
		vsx_close(a); /* unblocks the client with EOF/reset */
		a = NULL;
		pthread_join(j.th, NULL);
		vsx_close(j.s);
	}
	close_all(l, c, a);
	return ok;
}

static int case_half_close(char *why)
{
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	struct job j = { .seed = 0xba5e, .total = 4 * MiB, .chunk = 100000, .fn = job_send };
	struct vsx_info ci, ai;
	int r, started = 0, ok = -1;
	ssize_t n;

	if (make_pair(case_port, NULL, NULL, &l, &c, &a, why) < 0)
		goto out;
	/* client: 100 KiB, then shut down sending */
	if (send_pattern(c, 0xc11e, 0, 100 * KiB, 4096, why) < 0)
		goto out;
	r = vsx_shutdown(c, SHUT_WR);
	CHECK(r == 0, "vsx_shutdown(SHUT_WR): %s", VERR(r));
	r = vsx_info(c, &ci);
	CHECK(r == 0 && ci.shut_local == VSX_SHUT_WR && (ci.shut_local & SHUT_WR) &&
	      ci.state == VSX_STATE_CLOSING,
	      "client after SHUT_WR: shut_local %u state %d", ci.shut_local, ci.state);
	n = vsx_send(c, "x", 1);
	CHECK(n == -EPIPE, "vsx_send after SHUT_WR returned %zd, expected -EPIPE", n);

	/* server: all 100 KiB, then EOF */
	if (recv_pattern(a, 0xc11e, 0, 100 * KiB, 7000, why) < 0)
		goto out;
	if (expect_eof(a, "server", why) < 0 || expect_eof(a, "server, second read", why) < 0)
		goto out;
	r = vsx_info(a, &ai);
	CHECK(r == 0 && ai.state == VSX_STATE_CLOSING && ai.shut_local == 0,
	      "server after EOF: state %d shut_local %u", ai.state, ai.shut_local);

	/* the other direction still works: 4 MiB server->client, checked */
	j.s = a;
	if (job_start(&j, why) < 0)
		goto out;
	started = 1;
	if (recv_pattern(c, j.seed, 0, j.total, 32768, why) < 0)
		goto out;
	started = 0;
	if (job_join(&j, "server", why) < 0)
		goto out;
	note("4 MiB server->client after the client's SHUT_WR in %.2f s, checked", j.secs);
	r = vsx_shutdown(a, SHUT_WR);
	CHECK(r == 0, "server vsx_shutdown: %s", VERR(r));
	if (expect_eof(c, "client", why) < 0)
		goto out;
	r = vsx_close(c);
	c = NULL;
	CHECK(r == 0, "client vsx_close: %s", VERR(r));
	r = vsx_close(a);
	a = NULL;
	CHECK(r == 0, "server vsx_close: %s", VERR(r));
	ok = 0;
out:
	if (started) {
		vsx_close(c); /* unblocks the sender */
		c = NULL;
		pthread_join(j.th, NULL);
	}
	close_all(l, c, a);
	return ok;
}

/* The peer keeps its socket open and never reads: close must give up in time. */
static int case_close_linger_timeout(char *why)
{
	struct vsx_opts co = { .linger_ms = 1500 };
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	int64_t t0, el;
	uint8_t buf[2000], scratch[2000];
	ssize_t n;
	int r, ok = -1;

	if (make_pair(case_port, NULL, &co, &l, &c, &a, why) < 0)
		goto out;
	if (send_pattern(c, 7, 0, 1000, 1000, why) < 0)
		goto out;
	t0 = vsx__now_ms();
	r = vsx_close(c);
	el = vsx__now_ms() - t0;
	c = NULL;
	note("vsx_close with linger 1500 ms, silent peer: %d (%s) after %" PRId64 " ms", r,
	     VERR(r), el);
	CHECK(r == -ETIMEDOUT, "vsx_close returned %d (%s), expected -ETIMEDOUT", r, VERR(r));
	CHECK(el >= co.linger_ms - 5, "gave up after %" PRId64 " ms, before the linger time",
	      el);
	CHECK(el <= co.linger_ms + 1000, "took %" PRId64 " ms, more than linger + 1 s", el);

	/* The peer, reading now: the 1000 bytes, then the EOF close sent. */
	n = vsx_recv(a, buf, sizeof(buf));
	CHECK(n == 1000, "peer read %zd (%s), expected the 1000 bytes", n, VERR(n));
	if (pattern_check(7, 0, buf, 1000, scratch, why) < 0)
		goto out;
	if (expect_eof(a, "peer", why) < 0)
		goto out;
	ok = 0;
out:
	close_all(l, c, a);
	return ok;
}

static int job_drain_and_close(struct job *j)
{
	uint64_t got = 0;
	uint8_t buf[4096];
	ssize_t r;

	while ((r = vsx_recv(j->s, buf, sizeof(buf))) > 0)
		got += (uint64_t)r;
	if (r < 0) {
		snprintf(j->why, WHY_LEN, "vsx_recv: %s", vsx_strerror((int)r));
		return -1;
	}
	if (got != j->total) {
		snprintf(j->why, WHY_LEN, "got %" PRIu64 " bytes before EOF, expected %" PRIu64,
			 got, j->total);
		return -1;
	}
	j->linger_rc = vsx_close(j->s);
	j->s = NULL;
	return 0;
}

/* The peer reads to EOF and closes: close returns 0, well within linger. */
static int case_close_peer_closes(char *why)
{
	struct vsx_opts co = { .linger_ms = 5000 };
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	struct job j = { .total = 300 * KiB, .fn = job_drain_and_close };
	int r, started = 0, ok = -1;
	int64_t t0, el;

	if (make_pair(case_port, NULL, &co, &l, &c, &a, why) < 0)
		goto out;
	j.s = a;
	a = NULL;
	if (job_start(&j, why) < 0)
		goto out;
	started = 1;
	if (send_pattern(c, 9, 0, j.total, 50000, why) < 0)
		goto out;
	t0 = vsx__now_ms();
	r = vsx_close(c);
	el = vsx__now_ms() - t0;
	c = NULL;
	note("vsx_close with linger 5000 ms, peer closes: %d after %" PRId64 " ms", r, el);
	CHECK(r == 0, "vsx_close returned %d (%s), expected 0", r, VERR(r));
	CHECK(el < co.linger_ms, "took %" PRId64 " ms, not less than the linger time", el);
	started = 0;
	if (job_join(&j, "peer", why) < 0)
		goto out;
	CHECK(j.linger_rc == 0, "peer vsx_close: %s", VERR(j.linger_rc));
	ok = 0;
out:
	if (started) {
		vsx_close(c);
		c = NULL;
		pthread_join(j.th, NULL);
		vsx_close(j.s);
	}
	close_all(l, c, a);
	return ok;
}

static int case_connect_refused(char *why)
{
	struct vsx_opts o = { .connect_timeout_ms = 2000 };
	vsx_sock *s = (vsx_sock *)&o, *l = NULL;
	int64_t t0, el;
	int r, ok = -1;

	/* nobody listens on case_port */
	t0 = vsx__now_ms();
	r = vsx_connect(addr_of(case_port, "local"), &o, &s);
	el = vsx__now_ms() - t0;
	note("connect to a port nobody listens on: %d (%s) after %" PRId64 " ms", r, VERR(r),
	     el);
	CHECK(r == -ECONNREFUSED, "vsx_connect returned %d (%s), expected -ECONNREFUSED", r,
	      VERR(r));
	CHECK(s == NULL, "*out not NULL after a failed connect");
	CHECK(el < o.connect_timeout_ms, "refusal took %" PRId64 " ms, not within the %d ms "
	      "connect timeout", el, o.connect_timeout_ms);

	/* a port that had a listener, now closed, refuses too */
	r = vsx_listen(addr_of(case_port + 1, "any"), NULL, &l);
	CHECK(r == 0, "vsx_listen: %s", VERR(r));
	vsx_close(l);
	l = NULL;
	o.flags = VSX_O_NONBLOCK;
	r = vsx_connect(addr_of(case_port + 1, "local"), &o, &s);
	CHECK(r == -ECONNREFUSED, "non-blocking connect to a closed listener: %d (%s)", r,
	      VERR(r));
	ok = 0;
out:
	vsx_close(l);
	return ok;
}

/*
 * Is there any way to get -ETIMEDOUT from a connect on loopback? The loopback
 * transport answers every REQUEST from a kernel worker (RESPONSE, or RST
 * when nobody listens or the backlog is full), so only a connect timeout
 * shorter than that worker's turnaround can expire. Try: 1 ms timeouts
 * against a live listener; a full backlog; CIDs no transport reaches.
 * Every outcome is checked against the documented error set and printed.
 */
static int case_connect_timeout_explore(char *why)
{
	/* no lingering in this case: peers here never close on their own */
	struct vsx_opts o = { .connect_timeout_ms = 1, .linger_ms = -1 },
			lo = { .linger_ms = -1 };
	vsx_sock *l = NULL, *s = NULL, *acc, *held[4] = { NULL };
	int i, r, n_ok = 0, n_to = 0, ok = -1;
	int64_t t0, el, worst = 0;
	static const uint32_t cids[] = { VSX_CID_HOST, 3, 1234567 };
	char addr[64];

	r = vsx_listen(addr_of(case_port, "any"), &lo, &l);
	CHECK(r == 0, "vsx_listen: %s", VERR(r));
	for (i = 0; i < 40; i++) {
		t0 = vsx__now_ms();
		r = vsx_connect(addr_of(case_port, "local"), &o, &s);
		el = vsx__now_ms() - t0;
		CHECK(r == 0 || r == -ETIMEDOUT, "1 ms connect #%d: %d (%s), expected 0 or "
		      "-ETIMEDOUT", i, r, VERR(r));
		if (r == 0) {
			n_ok++;
			vsx_close(s);
			s = NULL;
			if (vsx_accept(l, &acc) == 0)
				vsx_close(acc);
		} else {
			n_to++;
			if (el > worst)
				worst = el;
		}
	}
	note("1 ms connect timeout x40 against a live listener: %d connected, %d -ETIMEDOUT "
	     "(slowest timeout %" PRId64 " ms)", n_ok, n_to, worst);
	CHECK(worst <= 1 + 1000, "a 1 ms connect timeout took %" PRId64 " ms", worst);
	vsx_close(l);
	l = NULL;
	lo.backlog = 1;

	/* a full backlog: the kernel answers with RST, so -ECONNREFUSED */
	r = vsx_listen(addr_of(case_port + 1, "any"), &lo, &l);
	CHECK(r == 0, "vsx_listen(backlog 1): %s", VERR(r));
	for (i = 0; i < 4; i++) {
		o.connect_timeout_ms = 2000;
		t0 = vsx__now_ms();
		r = vsx_connect(addr_of(case_port + 1, "local"), &o, &held[i]);
		el = vsx__now_ms() - t0;
		note("backlog 1, connect #%d (none accepted): %d (%s) after %" PRId64 " ms", i,
		     r, VERR(r), el);
		CHECK(r == 0 || r == -ECONNREFUSED, "connect #%d: %d (%s)", i, r, VERR(r));
		CHECK(i > 0 || r == 0, "the first connect must succeed: %s", VERR(r));
		CHECK(el < 2000, "connect #%d took %" PRId64 " ms", i, el);
		if (r < 0)
			break;
	}
	CHECK(i < 4, "a listener with backlog 1 took 4 unaccepted connections");

	/* CIDs that no transport of this guest reaches */
	for (i = 0; i < (int)(sizeof(cids) / sizeof(cids[0])); i++) {
		snprintf(addr, sizeof(addr), "vsock:%" PRIu32 ":%u", cids[i], case_port);
		t0 = vsx__now_ms();
		r = vsx_connect(addr, &o, &s);
		el = vsx__now_ms() - t0;
		note("connect %s: %d (%s) after %" PRId64 " ms", addr, r, VERR(r), el);
		CHECK(r == -ENETUNREACH || r == -ECONNREFUSED || r == -ETIMEDOUT ||
		      r == -ENODEV, "connect %s: %d (%s), not a documented error", addr, r,
		      VERR(r));
		CHECK(el <= o.connect_timeout_ms + 1000, "connect %s took %" PRId64 " ms", addr,
		      el);
		vsx_close(s);
		s = NULL;
	}
	ok = 0;
out:
	for (i = 0; i < 4; i++)
		vsx_close(held[i]);
	vsx_close(s);
	vsx_close(l);
	return ok;
}

static int case_buffer(char *why)
{
	struct vsx_opts lo = { .rx_buffer = 2 * MiB }, co = { .flags = VSX_O_NONBLOCK };
	static const size_t sizes[] = { 1 * MiB, 4 * MiB, 4 * KiB, 256 * KiB };
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	uint8_t *big = NULL;
	size_t v, i, sent;
	ssize_t n;
	int r, ok = -1;

	if (make_pair(case_port, &lo, &co, &l, &c, &a, why) < 0)
		goto out;
	r = vsx_get_buffer(c, VSX_RX, &v);
	CHECK(r == 0, "vsx_get_buffer(RX): %s", VERR(r));
	note("default RX buffer: %zu", v);
	CHECK(v == 256 * KiB, "default RX buffer %zu, expected the kernel's 262144", v);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		r = vsx_set_buffer(c, VSX_RX, sizes[i]);
		CHECK(r == 0, "vsx_set_buffer(RX, %zu): %s", sizes[i], VERR(r));
		r = vsx_get_buffer(c, VSX_RX, &v);
		CHECK(r == 0 && v == sizes[i], "set RX %zu, read back %zu (%s)", sizes[i], v,
		      VERR(r));
	}
	/* One kernel buffer serves both directions: TX reads and sets it too. */
	r = vsx_set_buffer(c, VSX_TX, 64 * KiB);
	CHECK(r == 0, "vsx_set_buffer(TX): %d (%s)", r, VERR(r));
	r = vsx_get_buffer(c, VSX_RX, &v);
	CHECK(r == 0 && v == 64 * KiB, "RX after set TX 64K: %zu (%s)", v, VERR(r));
	r = vsx_get_buffer(c, VSX_TX, &v);
	CHECK(r == 0 && v == 64 * KiB, "TX read back %zu (%s), expected 64K", v, VERR(r));
	r = vsx_set_buffer(c, VSX_RX | VSX_TX, 256 * KiB);
	CHECK(r == 0, "vsx_set_buffer(RX|TX): %d (%s)", r, VERR(r));
	r = vsx_get_buffer(c, VSX_TX, &v);
	CHECK(r == 0 && v == 256 * KiB, "TX read back %zu, expected 256K", v);
	r = vsx_set_buffer(c, VSX_RX, 0);
	CHECK(r == -EINVAL, "vsx_set_buffer(RX, 0): %d, expected -EINVAL", r);
	r = vsx_set_buffer(c, 0x10, 4096);
	CHECK(r == -EINVAL, "vsx_set_buffer(which 0x10): %d, expected -EINVAL", r);
	r = vsx_get_buffer(c, VSX_RX, &v);
	CHECK(r == 0 && v == 256 * KiB, "RX changed by refused calls: %zu", v);

	/* rx_buffer given at listen: the listener and what it accepts */
	r = vsx_get_buffer(l, VSX_RX, &v);
	CHECK(r == 0 && v == 2 * MiB, "listener RX %zu (%s), expected 2 MiB", v, VERR(r));
	r = vsx_get_buffer(a, VSX_RX, &v);
	CHECK(r == 0 && v == 2 * MiB, "accepted socket RX %zu (%s), expected 2 MiB inherited",
	      v, VERR(r));
	/*
	 * ... and it is the credit really advertised: a non-blocking sender
	 * puts exactly that much in flight while nobody reads. Kernels with
	 * "vsock/virtio: cap TX credit to local buffer size" also bound the
	 * sender by its OWN buffer: with the client's RX at 256 KiB it stops
	 * there, and raising its RX buffer to 4 MiB releases the rest.
	 */
	big = malloc(4 * MiB);
	CHECK(big, "out of memory");
	pattern_fill(11, 0, big, 4 * MiB);
	n = vsx_send(c, big, 4 * MiB);
	note("non-blocking send of 4 MiB to the 2 MiB receiver (own RX 256 KiB): %zd", n);
	CHECK(n == (ssize_t)(2 * MiB) || n == (ssize_t)(256 * KiB),
	      "sent %zd (%s), expected the 2 MiB credit (or 256 KiB where the kernel caps TX "
	      "credit at the sender's own buffer)", n, VERR(n));
	sent = (size_t)n;
	if (sent < 2 * MiB) {
		note("this kernel caps TX credit at the sender's own buffer size");
		r = vsx_set_buffer(c, VSX_RX, 4 * MiB);
		CHECK(r == 0, "vsx_set_buffer(RX, 4 MiB): %s", VERR(r));
		n = vsx_send(c, big + sent, 4 * MiB - sent);
		note("after raising the sender's RX buffer to 4 MiB: %zd more", n);
		CHECK(n == (ssize_t)(2 * MiB - sent), "sent %zd more (%s), expected the %zu "
		      "left of the receiver's 2 MiB", n, VERR(n), 2 * MiB - sent);
		sent += (size_t)n;
	}
	n = vsx_send(c, big + sent, 4 * MiB - sent);
	CHECK(n == -EAGAIN, "send with no credit left: %zd, expected -EAGAIN", n);
	/* and what was sent arrives intact */
	CHECK(vsx_set_buffer(a, VSX_RX, 2 * MiB) == 0, "vsx_set_buffer(accepted)");
	if (recv_pattern(a, 11, 0, 2 * MiB, 65536, why) < 0)
		goto out;
	ok = 0;
out:
	free(big);
	close_all(l, c, a);
	return ok;
}

/* One end of the non-blocking poll loop. */
struct nb_end {
	const char *name;
	vsx_sock *s;
	uint64_t tx_seed, tx_off, tx_total;
	uint64_t rx_seed, rx_off, rx_total;
	uint8_t txbuf[64 * 1024], rxbuf[64 * 1024], scratch[64 * 1024];
	size_t tx_len, tx_pos;
	int tx_shut, rx_eof;
};

static short nb_events(const struct nb_end *e)
{
	short ev = 0;

	if (!e->rx_eof)
		ev |= POLLIN;
	if (!e->tx_shut)
		ev |= POLLOUT;
	return ev;
}

static int nb_step(struct nb_end *e, short revents, char *why)
{
	ssize_t r;
	size_t n;

	if ((revents & POLLOUT) && !e->tx_shut) {
		if (e->tx_pos == e->tx_len) {
			n = e->tx_total - e->tx_off < sizeof(e->txbuf)
				    ? (size_t)(e->tx_total - e->tx_off) : sizeof(e->txbuf);
			pattern_fill(e->tx_seed, e->tx_off, e->txbuf, n);
			e->tx_len = n;
			e->tx_pos = 0;
		}
		if (e->tx_len) {
			r = vsx_send(e->s, e->txbuf + e->tx_pos, e->tx_len - e->tx_pos);
			CHECK(r > 0 || r == -EAGAIN, "%s: vsx_send: %s", e->name, VERR(r));
			if (r > 0) {
				e->tx_pos += (size_t)r;
				e->tx_off += (uint64_t)r;
			}
		}
		if (e->tx_off == e->tx_total) {
			r = vsx_shutdown(e->s, SHUT_WR);
			CHECK(r == 0, "%s: vsx_shutdown: %s", e->name, VERR(r));
			e->tx_shut = 1;
		}
	}
	if ((revents & (POLLIN | POLLHUP | POLLERR)) && !e->rx_eof) {
		r = vsx_recv(e->s, e->rxbuf, sizeof(e->rxbuf));
		CHECK(r >= 0 || r == -EAGAIN, "%s: vsx_recv: %s", e->name, VERR(r));
		if (r == 0) {
			CHECK(e->rx_off == e->rx_total, "%s: EOF after %" PRIu64 " of %" PRIu64
			      " bytes", e->name, e->rx_off, e->rx_total);
			e->rx_eof = 1;
		} else if (r > 0) {
			CHECK(e->rx_off + (uint64_t)r <= e->rx_total, "%s: more bytes than sent",
			      e->name);
			if (pattern_check(e->rx_seed, e->rx_off, e->rxbuf, (size_t)r, e->scratch,
					  why) < 0)
				return -1;
			e->rx_off += (uint64_t)r;
		}
	}
	return 0;
out:
	return -1;
}

static int case_nonblock(char *why)
{
	struct vsx_opts o = { .flags = VSX_O_NONBLOCK };
	vsx_sock *l = NULL, *c = NULL, *a = NULL;
	struct nb_end *e = calloc(2, sizeof(*e));
	struct pollfd p[2];
	uint8_t chunk[5000];
	size_t credit;
	double t0;
	ssize_t n;
	int r, i, ok = -1;

	CHECK(e, "out of memory");
	r = vsx_listen(addr_of(case_port, "any"), &o, &l);
	CHECK(r == 0, "vsx_listen: %s", VERR(r));
	r = vsx_accept(l, &a);
	CHECK(r == -EAGAIN && !a, "vsx_accept with nothing pending: %d (%s), expected -EAGAIN",
	      r, VERR(r));
	vsx_close(l);
	l = NULL;
	if (make_pair(case_port + 1, &o, &o, &l, &c, &a, why) < 0)
		goto out;

	n = vsx_recv(c, chunk, sizeof(chunk));
	CHECK(n == -EAGAIN, "vsx_recv on an empty socket: %zd (%s), expected -EAGAIN", n,
	      VERR(n));
	n = vsx_recv(a, chunk, sizeof(chunk));
	CHECK(n == -EAGAIN, "vsx_recv on an empty accepted socket: %zd, expected -EAGAIN", n);

	/* the client sends while the server does not read: partial, then -EAGAIN */
	e[0] = (struct nb_end){ .name = "client", .s = c, .tx_seed = 21, .tx_total = 4 * MiB,
				.rx_seed = 22, .rx_total = 3 * MiB + 12345 };
	e[1] = (struct nb_end){ .name = "server", .s = a, .tx_seed = 22,
				.tx_total = 3 * MiB + 12345, .rx_seed = 21, .rx_total = 4 * MiB };
	r = vsx_get_buffer(a, VSX_RX, &credit);
	CHECK(r == 0, "vsx_get_buffer: %s", VERR(r));
	/* 5000-byte sends do not divide the credit: the last one is partial */
	n = 0;
	while (e[0].tx_off < MiB) {
		pattern_fill(21, e[0].tx_off, chunk, sizeof(chunk));
		n = vsx_send(c, chunk, sizeof(chunk));
		if (n < 0)
			break;
		e[0].tx_off += (uint64_t)n;
		if ((size_t)n < sizeof(chunk))
			break;
	}
	note("non-blocking sender: last send %zd of %zu, %" PRIu64 " bytes in all (peer RX "
	     "buffer %zu)", n, sizeof(chunk), e[0].tx_off, credit);
	CHECK(n > 0 && (size_t)n < sizeof(chunk), "the send that used up the credit "
	      "returned %zd (%s), expected a partial count", n, VERR(n));
	CHECK(e[0].tx_off == credit, "sent %" PRIu64 " before blocking, expected the peer's "
	      "credit %zu", e[0].tx_off, credit);
	n = vsx_send(c, chunk, sizeof(chunk));
	CHECK(n == -EAGAIN, "send with the credit used up: %zd (%s), expected -EAGAIN", n,
	      VERR(n));
	p[0] = (struct pollfd){ .fd = vsx_fd(c), .events = POLLOUT };
	CHECK(poll(p, 1, 0) == 0, "vsx_fd polls writable with no credit left");

	/* now a poll() loop moves everything, both ways at once */
	t0 = now_s();
	while (!e[0].rx_eof || !e[1].rx_eof) {
		for (i = 0; i < 2; i++)
			p[i] = (struct pollfd){ .fd = vsx_fd(e[i].s), .events = nb_events(&e[i]) };
		r = poll(p, 2, 10000);
		CHECK(r > 0, "poll: %s", r == 0 ? "no progress for 10 s" : strerror(errno));
		for (i = 0; i < 2; i++)
			if (nb_step(&e[i], p[i].revents, why) < 0)
				goto out;
	}
	note("poll loop: 4 MiB client->server and 3 MiB+12345 back in %.2f s, checked",
	     now_s() - t0);
	CHECK(e[0].rx_off == e[0].rx_total && e[1].rx_off == e[1].rx_total,
	      "incomplete transfer");
	ok = 0;
out:
	free(e);
	close_all(l, c, a);
	return ok;
}

static int case_bad_input(char *why)
{
	static const char *const bad[] = {
		"", "vsock", "vsock:", "vsock:1", "vsock:1:", "vsock::5", "vsock:x:5",
		"vsock:1:x", "vsock:-1:5", "vsock:1:-5", "vsock:1:4294967296",
		"vsock:99999999999:5", "vsock:1:5:6", "vsock:1 :5", "vsock: 1:5",
		"VSOCK:1:5", "tcp:1:5", "unix:", "unix::5", "hvsock:not-a-guid",
		"vm::5", "vsock:local", "vsock:any:any:1",
	};
	static const char *const cannot_connect[] = { "vsock:any:5000", "vsock:local:any" };
	struct vsx_opts o;
	vsx_sock *s;
	size_t i;
	int r, ok = -1;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s = (vsx_sock *)&o;
		r = vsx_connect(bad[i], NULL, &s);
		CHECK(r == -EINVAL, "vsx_connect(\"%s\"): %d (%s), expected -EINVAL", bad[i], r,
		      VERR(r));
		CHECK(s == NULL, "vsx_connect(\"%s\") left *out set", bad[i]);
		CHECK(vsx_strerror(r)[0], "no message for vsx_connect(\"%s\")", bad[i]);
		r = vsx_listen(bad[i], NULL, &s);
		CHECK(r == -EINVAL, "vsx_listen(\"%s\"): %d (%s), expected -EINVAL", bad[i], r,
		      VERR(r));
	}
	r = vsx_connect("vsock:x:5", NULL, &s);
	note("%zu malformed addresses refused with -EINVAL, e.g. \"vsock:x:5\": %s",
	     sizeof(bad) / sizeof(bad[0]), vsx_strerror(r));
	for (i = 0; i < sizeof(cannot_connect) / sizeof(cannot_connect[0]); i++) {
		r = vsx_connect(cannot_connect[i], NULL, &s);
		CHECK(r == -EINVAL, "vsx_connect(\"%s\"): %d (%s), expected -EINVAL",
		      cannot_connect[i], r, VERR(r));
	}
	r = vsx_connect(NULL, NULL, &s);
	CHECK(r == -EINVAL, "vsx_connect(NULL): %d", r);
	r = vsx_connect("vsock:local:5000", NULL, NULL);
	CHECK(r == -EINVAL, "vsx_connect(out NULL): %d", r);

	o = (struct vsx_opts){ .connect_timeout_ms = -1 };
	r = vsx_connect("vsock:local:5000", &o, &s);
	CHECK(r == -EINVAL, "negative connect timeout: %d (%s)", r, VERR(r));
	o = (struct vsx_opts){ .flags = 0x100 };
	r = vsx_connect("vsock:local:5000", &o, &s);
	CHECK(r == -EINVAL, "unknown flag: %d (%s)", r, VERR(r));
	o = (struct vsx_opts){ .reserved = { 1 } };
	r = vsx_connect("vsock:local:5000", &o, &s);
	CHECK(r == -EINVAL, "reserved field set: %d (%s)", r, VERR(r));
	o = (struct vsx_opts){ .transport = "no-such-transport" };
	r = vsx_connect("vsock:local:5000", &o, &s);
	CHECK(r == -EINVAL, "unknown transport name: %d (%s)", r, VERR(r));
	o = (struct vsx_opts){ .backlog = -1 };
	r = vsx_listen("vsock:any:5000", &o, &s);
	CHECK(r == -EINVAL, "negative backlog: %d (%s)", r, VERR(r));
	ok = 0;
out:
	return ok;
}

/* ---- The runner ---------------------------------------------------------- */

struct tcase {
	const char *name;
	int (*fn)(char *why);
	unsigned limit_s; /* the child is killed after this long */
};

static const struct tcase cases[] = {
	{ "pattern_selfcheck", case_pattern_selfcheck, 30 },
	{ "probe", case_probe, 30 },
	{ "connect_accept", case_connect_accept, 30 },
	{ "transfer_64m", case_transfer_64m, 240 },
	{ "half_close", case_half_close, 60 },
	{ "close_linger_timeout", case_close_linger_timeout, 30 },
	{ "close_peer_closes", case_close_peer_closes, 30 },
	{ "connect_refused", case_connect_refused, 30 },
	{ "connect_timeout_explore", case_connect_timeout_explore, 60 },
	{ "buffer", case_buffer, 30 },
	{ "nonblock", case_nonblock, 120 },
	{ "bad_input", case_bad_input, 30 },
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* Run one case in a child; print its line; 0 if it passed. */
static int run_case(size_t idx)
{
	const struct tcase *c = &cases[idx];
	char why[WHY_LEN] = "", msg[WHY_LEN] = "";
	size_t got = 0;
	int pfd[2], status, r;
	ssize_t n;
	pid_t pid;

	fflush(stdout);
	if (pipe(pfd) < 0 || (pid = fork()) < 0) {
		printf("not ok - %s: cannot start: %s\n", c->name, strerror(errno));
		return -1;
	}
	if (pid == 0) {
		close(pfd[0]);
		alarm(c->limit_s);
		case_port = PORT_BASE + 10 * (unsigned)idx;
		r = c->fn(why);
		if (r < 0 && !why[0])
			snprintf(why, sizeof(why), "failed (no reason given)");
		if (r < 0 && write(pfd[1], why, strlen(why)) < 0)
			_exit(2);
		fflush(stdout);
		_exit(r < 0 ? 1 : 0);
	}
	close(pfd[1]);
	while (got < sizeof(msg) - 1 &&
	       (n = read(pfd[0], msg + got, sizeof(msg) - 1 - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
	}
	msg[got] = 0;
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("ok - %s\n", c->name);
		return 0;
	}
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		printf("not ok - %s: time limit of %u s exceeded\n", c->name, c->limit_s);
	else if (WIFSIGNALED(status))
		printf("not ok - %s: killed by signal %d (%s)\n", c->name, WTERMSIG(status),
		       strsignal(WTERMSIG(status)));
	else
		printf("not ok - %s: %s\n", c->name, msg[0] ? msg : "failed");
	return -1;
}

static int usage(void)
{
	size_t i;

	fprintf(stderr, "usage: guest_tests all | list | CASE...\ncases:");
	for (i = 0; i < N_CASES; i++)
		fprintf(stderr, " %s", cases[i].name);
	fputc('\n', stderr);
	return 2;
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0, all, i;
	size_t k;
	double t0;

	if (argc < 2)
		return usage();
	if (strcmp(argv[1], "list") == 0) {
		for (k = 0; k < N_CASES; k++)
			printf("%s\n", cases[k].name);
		return 0;
	}
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "all") == 0)
			continue;
		for (k = 0; k < N_CASES && strcmp(argv[i], cases[k].name); k++)
			;
		if (k == N_CASES) {
			fprintf(stderr, "guest_tests: no case '%s'\n", argv[i]);
			return usage();
		}
	}
	if (!getenv("VSX_LAB_GUEST")) {
		fprintf(stderr, "guest_tests: opens AF_VSOCK sockets; it runs only inside the "
			"lab guest (its /init sets VSX_LAB_GUEST)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	printf("# guest_tests: libvsx %s over vsock loopback\n", vsx_version());
	for (k = 0; k < N_CASES; k++) {
		for (all = 0, i = 1; i < argc; i++)
			all |= !strcmp(argv[i], "all") || !strcmp(argv[i], cases[k].name);
		if (!all)
			continue;
		t0 = now_s();
		if (run_case(k) == 0)
			passed++;
		else
			failed++;
		note("%s took %.2f s", cases[k].name, now_s() - t0);
	}
	printf("%d passed, %d failed\n", passed, failed);
	fflush(stdout);
	return failed ? 1 : 0;
}
