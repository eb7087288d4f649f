/*
 * The transport-independent libvsx suite (see suite.h): transfers checked
 * byte for byte both ways, half-close, bounded close, timeouts, the buffer
 * knob read back. The only time bounds asserted are correctness bounds (a
 * close must not outlive its linger time by more than a generous margin, a
 * connect must give up within its timeout plus that margin).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "suite.h"
#include "util.h"

#define IO_WAIT_MS 20000   /* no single wait in a case may exceed this */
#define SLACK_MS 5000      /* margin on every correctness time bound */
#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

/* ---- Reporting ---------------------------------------------------------- */

static void fail_at(const struct vsx_suite_env *env, const char *fn, int line,
		    const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "suite[%s] %s:%d: ", env->name, fn, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define FAIL(...)                                                        \
	do {                                                             \
		fail_at(env, __func__, __LINE__, __VA_ARGS__);           \
		goto out;                                                \
	} while (0)
#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond))                                             \
			FAIL(__VA_ARGS__);                               \
	} while (0)
/* A libvsx call that must return @want. */
#define CALL_EQ(expr, want)                                              \
	do {                                                             \
		long long got_ = (long long)(expr);                      \
		long long want_ = (long long)(want);                     \
		if (got_ != want_)                                       \
			FAIL("%s = %lld (%s), want %lld", #expr, got_,   \
			     got_ < 0 ? vsx_strerror((int)got_) : "-", want_); \
	} while (0)


/* ---- Data --------------------------------------------------------------- */

/* The byte at offset @off of stream @seed: never periodic in short runs. */
static uint8_t pat(unsigned seed, uint64_t off)
{
	uint64_t x = off * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 17));
}

static void fill(uint8_t *b, size_t n, unsigned seed, uint64_t off)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = pat(seed, off + i);
}

/* Index of the first wrong byte, or -1. */
static long long verify(const uint8_t *b, size_t n, unsigned seed, uint64_t off)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != pat(seed, off + i))
			return (long long)(off + i);
	return -1;
}

/* ---- The peer: plain fds ------------------------------------------------ */

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int n;

	do
		n = poll(&p, 1, ms);
	while (n < 0 && errno == EINTR);
	return n;
}

/* Read until EOF or @max bytes, checking the pattern. */
struct reader {
	int fd;
	unsigned seed;
	size_t max;
	int close_at_eof;
	/* results */
	size_t got;
	int eof;
	int err;                /* errno of a failed read, or ETIMEDOUT */
	long long bad_at;       /* first wrong byte, -1 */
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	uint8_t *buf = malloc(64 * KiB);
	ssize_t n;

	r->bad_at = -1;
	while (buf && r->got < r->max) {
		if (wait_fd(r->fd, POLLIN, IO_WAIT_MS) <= 0) {
			r->err = ETIMEDOUT;
			break;
		}
		n = recv(r->fd, buf, r->max - r->got < 64 * KiB ? r->max - r->got : 64 * KiB,
			 MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0) {
			r->err = errno;
			break;
		}
		if (n == 0) {
			r->eof = 1;
			break;
		}
		if (r->bad_at < 0)
			r->bad_at = verify(buf, (size_t)n, r->seed, r->got);
		r->got += (size_t)n;
	}
	if (r->close_at_eof && r->eof) {
		close(r->fd);
		r->fd = -1;
	}
	free(buf);
	return NULL;
}

/* Write @n pattern bytes, then maybe shut down or close. */
struct writer {
	int fd;
	unsigned seed;
	size_t n;
	int then; /* 0, SHUT_WR + 1, or -1 for close */
	size_t put;
	int err;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint8_t *buf = malloc(64 * KiB);
	size_t chunk;
	ssize_t n;

	while (buf && w->put < w->n) {
		chunk = w->n - w->put < 64 * KiB ? w->n - w->put : 64 * KiB;
		fill(buf, chunk, w->seed, w->put);
		if (wait_fd(w->fd, POLLOUT, IO_WAIT_MS) <= 0) {
			w->err = ETIMEDOUT;
			break;
		}
		n = send(w->fd, buf, chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0) {
			w->err = errno;
			break;
		}
		w->put += (size_t)n;
	}
	if (w->then == SHUT_WR + 1)
		shutdown(w->fd, SHUT_WR);
	else if (w->then < 0) {
		close(w->fd);
		w->fd = -1;
	}
	free(buf);
	return NULL;
}

/* ---- Pairs --------------------------------------------------------------- */

static struct vsx_opts opts_for(const struct vsx_suite_env *env)
{
	struct vsx_opts o;

	memset(&o, 0, sizeof(o));
	o.transport = env->transport;
	return o;
}

/* The socket under test connected to a fresh peer service. */
static int pair_client(const struct vsx_suite_env *env, const struct vsx_opts *o,
		       vsx_sock **s, int *peer)
{
	char addr[VSX_ADDR_STRLEN];
	int h, rc;

	*s = NULL;
	*peer = -1;
	h = env->serve(env->ctx, addr, sizeof(addr));
	if (h < 0) {
		fail_at(env, __func__, __LINE__, "serve: %s", strerror(-h));
		return -1;
	}
	rc = vsx_connect(addr, o, s);
	if (rc < 0) {
		fail_at(env, __func__, __LINE__, "vsx_connect(%s) = %d: %s", addr, rc,
			vsx_strerror(rc));
		return -1;
	}
	*peer = env->serve_accept(env->ctx, h, IO_WAIT_MS);
	if (*peer < 0) {
		fail_at(env, __func__, __LINE__, "the peer saw no connection: %s",
			strerror(-*peer));
		vsx_close(*s);
		*s = NULL;
		return -1;
	}
	return 0;
}

static int local_port(const vsx_sock *s, uint32_t *port)
{
	struct vsx_info info;
	struct vsx_addr a;

	if (vsx_info(s, &info) < 0 || vsx_addr_parse(info.local, &a) < 0)
		return -1;
	*port = a.port;
	return 0;
}

/* A listener under test, the peer connected to it, and the accepted socket. */
static int pair_accepted(const struct vsx_suite_env *env, const struct vsx_opts *o,
			 vsx_sock **l, vsx_sock **s, int *peer)
{
	char addr[VSX_ADDR_STRLEN];
	uint32_t port;
	int rc;

	*l = *s = NULL;
	*peer = -1;
	if (env->listen_addr(env->ctx, addr, sizeof(addr)) < 0)
		return -1;
	rc = vsx_listen(addr, o, l);
	if (rc < 0) {
		fail_at(env, __func__, __LINE__, "vsx_listen(%s) = %d: %s", addr, rc,
			vsx_strerror(rc));
		return -1;
	}
	if (local_port(*l, &port) < 0) {
		fail_at(env, __func__, __LINE__, "listener has no local address");
		return -1;
	}
	*peer = env->dial(env->ctx, port);
	if (*peer < 0) {
		fail_at(env, __func__, __LINE__, "peer connect to port %u: %s", port,
			strerror(-*peer));
		return -1;
	}
	if (wait_fd(vsx_fd(*l), POLLIN, IO_WAIT_MS) <= 0) {
		fail_at(env, __func__, __LINE__, "listener never became readable");
		return -1;
	}
	rc = vsx_accept(*l, s);
	if (rc < 0) {
		fail_at(env, __func__, __LINE__, "vsx_accept = %d: %s", rc, vsx_strerror(rc));
		return -1;
	}
	return 0;
}

/* Receive exactly @n pattern bytes through libvsx. */
static int recv_verify(const struct vsx_suite_env *env, vsx_sock *s, size_t n,
		       unsigned seed)
{
	uint8_t *buf = malloc(64 * KiB);
	size_t got = 0;
	long long bad;
	ssize_t r;
	int rc = -1;

	if (!buf)
		FAIL("out of memory");
	while (got < n) {
		r = vsx_recv(s, buf, n - got < 64 * KiB ? n - got : 64 * KiB);
		if (r == -EAGAIN) {
			CHECK(wait_fd(vsx_fd(s), POLLIN, IO_WAIT_MS) > 0,
			      "no data for %d ms after %zu of %zu bytes", IO_WAIT_MS, got, n);
			continue;
		}
		CHECK(r > 0, "vsx_recv after %zu of %zu bytes = %zd (%s)", got, n, r,
		      r < 0 ? vsx_strerror((int)r) : "EOF");
		bad = verify(buf, (size_t)r, seed, got);
		CHECK(bad < 0, "byte %lld differs", bad);
		got += (size_t)r;
	}
	rc = 0;
out:
	free(buf);
	return rc;
}

/* The next vsx_recv must be EOF. */
static int expect_eof(const struct vsx_suite_env *env, vsx_sock *s)
{
	char c;
	ssize_t r;
	int rc = -1;

	for (;;) {
		r = vsx_recv(s, &c, 1);
		if (r != -EAGAIN)
			break;
		CHECK(wait_fd(vsx_fd(s), POLLIN, IO_WAIT_MS) > 0, "no EOF within %d ms",
		      IO_WAIT_MS);
	}
	CHECK(r == 0, "vsx_recv = %zd, want 0 (EOF)", r);
	rc = 0;
out:
	return rc;
}

/* ---- Cases --------------------------------------------------------------- */

static const size_t sizes[] = {
	1, 1000, 4095, 4096, 16383, 16384, 16385, 65537, MiB + 3,
};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Every size both ways over @s, each send one vsx_send call. */
static int transfer(const struct vsx_suite_env *env, vsx_sock *s, int peer)
{
	struct reader rd = { .fd = peer, .seed = 11, .max = 0 };
	struct writer wr = { .fd = peer, .seed = 12 };
	struct vsx_info info;
	pthread_t th;
	uint8_t *buf = NULL;
	size_t total = 0, off = 0, i;
	int rc = -1, running = 0;
	ssize_t r;

	for (i = 0; i < N_SIZES; i++)
		total += sizes[i];
	buf = malloc(MiB + 3);
	CHECK(buf, "out of memory");
	rd.max = total;
	CHECK(pthread_create(&th, NULL, reader_main, &rd) == 0, "pthread_create");
	running = 1;
	for (i = 0; i < N_SIZES; i++) {
		fill(buf, sizes[i], 11, off);
		r = vsx_send(s, buf, sizes[i]);
		CHECK(r == (ssize_t)sizes[i], "vsx_send(%zu) = %zd (%s): a blocking "
		      "send moves everything", sizes[i], r,
		      r < 0 ? vsx_strerror((int)r) : "short");
		off += sizes[i];
	}
	pthread_join(th, NULL);
	running = 0;
	CHECK(rd.got == total && rd.bad_at < 0, "peer got %zu of %zu bytes, first "
	      "wrong byte %lld, err %s", rd.got, total, rd.bad_at, strerror(rd.err));

	wr.n = total;
	CHECK(pthread_create(&th, NULL, writer_main, &wr) == 0, "pthread_create");
	running = 2;
	if (recv_verify(env, s, total, 12) < 0)
		goto out;
	pthread_join(th, NULL);
	running = 0;
	CHECK(wr.put == total, "peer wrote %zu of %zu (%s)", wr.put, total,
	      strerror(wr.err));
	CALL_EQ(vsx_info(s, &info), 0);
	CHECK(info.bytes_sent == total && info.bytes_received == total,
	      "counters sent %llu received %llu, want %zu each",
	      (unsigned long long)info.bytes_sent,
	      (unsigned long long)info.bytes_received, total);
	rc = 0;
out:
	if (running)
		pthread_join(th, NULL);
	free(buf);
	return rc;
}

static int case_transfer_client(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;

	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	rc = transfer(env, s, peer);
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

static int case_transfer_accepted(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	vsx_sock *l = NULL, *s = NULL;
	int peer = -1, rc = -1;

	if (pair_accepted(env, &o, &l, &s, &peer) < 0)
		goto out;
	rc = transfer(env, s, peer);
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	vsx_close(l);
	return rc;
}

/* Our SHUT_WR reaches the peer as EOF; the peer can still send to us. */
static int case_half_close(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	struct reader rd = { .seed = 21, .max = 1 << 20 };
	struct writer wr = { .seed = 22, .n = 7000, .then = -1 };
	struct vsx_info info;
	uint8_t buf[5000];
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;
	pthread_t th;

	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	fill(buf, sizeof(buf), 21, 0);
	CALL_EQ(vsx_send(s, buf, sizeof(buf)), sizeof(buf));
	CALL_EQ(vsx_shutdown(s, SHUT_WR), 0);
	rd.fd = peer;
	reader_main(&rd);
	CHECK(rd.eof && rd.got == sizeof(buf) && rd.bad_at < 0,
	      "peer: %zu bytes (want %zu), eof %d, first wrong byte %lld, err %s",
	      rd.got, sizeof(buf), rd.eof, rd.bad_at, strerror(rd.err));
	CALL_EQ(vsx_info(s, &info), 0);
	CHECK(info.shut_local == VSX_SHUT_WR && (info.shut_local & SHUT_WR) &&
	      info.state == VSX_STATE_CLOSING,
	      "info: shut_local %u state %d, want VSX_SHUT_WR (SHUT_WR) and CLOSING",
	      info.shut_local, info.state);
	CALL_EQ(vsx_send(s, buf, 1), -EPIPE);

	wr.fd = peer;
	CHECK(pthread_create(&th, NULL, writer_main, &wr) == 0, "pthread_create");
	rc = recv_verify(env, s, wr.n, 22);
	pthread_join(th, NULL);
	peer = -1; /* closed by the writer */
	if (rc < 0)
		goto out;
	rc = -1;
	if (expect_eof(env, s) < 0)
		goto out;
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

/* The peer reads everything and closes on EOF: vsx_close returns 0. */
static int case_close_graceful(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	struct reader rd = { .seed = 31, .max = 64 * MiB, .close_at_eof = 1 };
	const size_t n = 200000;
	uint8_t *buf = malloc(n);
	vsx_sock *s = NULL;
	int peer = -1, rc = -1, running = 0;
	pthread_t th;

	CHECK(buf, "out of memory");
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	rd.fd = peer;
	CHECK(pthread_create(&th, NULL, reader_main, &rd) == 0, "pthread_create");
	running = 1;
	fill(buf, n, 31, 0);
	CALL_EQ(vsx_send(s, buf, n), n);
	rc = vsx_close(s);
	s = NULL;
	pthread_join(th, NULL);
	running = 0;
	peer = rd.fd;
	CHECK(rc == 0, "vsx_close = %d (%s), want 0: the peer finished", rc,
	      vsx_strerror(rc));
	rc = -1;
	CHECK(rd.eof && rd.got == n && rd.bad_at < 0,
	      "peer: %zu of %zu bytes, eof %d, first wrong byte %lld", rd.got, n, rd.eof,
	      rd.bad_at);
	rc = 0;
out:
	if (running)
		pthread_join(th, NULL);
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	free(buf);
	return rc;
}

/* After the close, the connection must really end: the peer's writes fail. */
static int peer_sees_end(const struct vsx_suite_env *env, int peer)
{
	int64_t until = vsx__now_ms() + env->close_settle_ms + SLACK_MS;
	char c = 'x', sink[4096];
	ssize_t n;

	while (vsx__now_ms() < until) {
		while (recv(peer, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		n = send(peer, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return 0;
		usleep(20 * 1000);
	}
	return -1;
}

/* The peer never closes: vsx_close gives up after the linger time. */
static int case_close_linger_timeout(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;
	int64_t t0, took;

	o.linger_ms = 300;
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	CALL_EQ(vsx_send(s, "bye", 3), 3);
	t0 = vsx__now_ms();
	rc = vsx_close(s);
	took = vsx__now_ms() - t0;
	s = NULL;
	CHECK(rc == -ETIMEDOUT, "vsx_close = %d (%s), want -ETIMEDOUT", rc,
	      vsx_strerror(rc));
	rc = -1;
	CHECK(strstr(vsx_strerror(-ETIMEDOUT), "300 ms"),
	      "message does not name the linger time: %s", vsx_strerror(-ETIMEDOUT));
	CHECK(took >= 300 - 20 && took < 300 + SLACK_MS,
	      "vsx_close took %lld ms with a 300 ms linger", (long long)took);
	CHECK(peer_sees_end(env, peer) == 0, "the peer could still write %d ms after "
	      "the close: the connection was never released",
	      env->close_settle_ms + SLACK_MS);
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

/* linger_ms < 0: vsx_close does not wait for the peer at all. */
static int case_close_no_linger(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;
	int64_t t0, took;

	o.linger_ms = -1;
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	t0 = vsx__now_ms();
	rc = vsx_close(s);
	took = vsx__now_ms() - t0;
	s = NULL;
	CHECK(rc == 0, "vsx_close = %d (%s), want 0", rc, vsx_strerror(rc));
	rc = -1;
	CHECK(took < SLACK_MS, "vsx_close without linger took %lld ms", (long long)took);
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

/* Nobody serves the address: the transport's error, within the timeout. */
static int case_connect_unserved(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	char addr[VSX_ADDR_STRLEN];
	vsx_sock *s = NULL;
	int64_t t0, took;
	int rc = -1, r;

	o.connect_timeout_ms = 500;
	CHECK(env->unserved(env->ctx, addr, sizeof(addr)) == 0, "no unserved address");
	t0 = vsx__now_ms();
	r = vsx_connect(addr, &o, &s);
	took = vsx__now_ms() - t0;
	CHECK(s == NULL, "a failed connect left a socket");
	if (env->unserved_err)
		CHECK(r == env->unserved_err, "vsx_connect(%s) = %d (%s), want %d", addr, r,
		      vsx_strerror(r), env->unserved_err);
	else
		CHECK(r == -ECONNREFUSED || r == -ETIMEDOUT, "vsx_connect(%s) = %d (%s), "
		      "want -ECONNREFUSED or -ETIMEDOUT", addr, r, vsx_strerror(r));
	CHECK(took < 500 + SLACK_MS, "gave up after %lld ms with a 500 ms timeout",
	      (long long)took);
	rc = 0;
out:
	vsx_close(s);
	return rc;
}

static int case_nonblock_recv(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	uint8_t buf[64], want[10];
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;

	o.flags = VSX_O_NONBLOCK;
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	CALL_EQ(vsx_recv(s, buf, sizeof(buf)), -EAGAIN);
	fill(want, sizeof(want), 41, 0);
	CHECK(send(peer, want, sizeof(want), MSG_NOSIGNAL) == sizeof(want), "peer send");
	CHECK(wait_fd(vsx_fd(s), POLLIN, IO_WAIT_MS) > 0, "vsx_fd never readable");
	CALL_EQ(vsx_recv(s, buf, sizeof(buf)), sizeof(want));
	CHECK(memcmp(buf, want, sizeof(want)) == 0, "bytes differ");
	CALL_EQ(vsx_recv(s, buf, sizeof(buf)), -EAGAIN);
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

/* A non-blocking send takes what fits and says how much; nothing is lost. */
static int case_nonblock_send(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	struct reader rd = { .seed = 51 };
	const size_t n = 8 * MiB;
	uint8_t *buf = malloc(n);
	size_t took = 0;
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;
	ssize_t r;

	CHECK(buf, "out of memory");
	o.flags = VSX_O_NONBLOCK;
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	fill(buf, n, 51, 0);
	r = vsx_send(s, buf, n);
	CHECK(r > 0 && (size_t)r < n, "non-blocking vsx_send(%zu) = %zd (%s), want a "
	      "partial count", n, r, r < 0 ? vsx_strerror((int)r) : "-");
	took = (size_t)r;
	while ((r = vsx_send(s, buf + took, n - took)) > 0)
		took += (size_t)r;
	CHECK(r == -EAGAIN, "vsx_send when full = %zd (%s), want -EAGAIN", r,
	      vsx_strerror((int)r));
	CALL_EQ(vsx_shutdown(s, SHUT_WR), 0);
	rd.fd = peer;
	rd.max = n;
	reader_main(&rd);
	CHECK(rd.eof && rd.got == took && rd.bad_at < 0,
	      "peer got %zu bytes (eof %d, first wrong byte %lld); vsx_send accepted %zu",
	      rd.got, rd.eof, rd.bad_at, took);
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	free(buf);
	return rc;
}

/* The peer goes away: EOF, then sends fail with -EPIPE (or reset). */
static int case_peer_gone(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	int64_t until;
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;
	ssize_t r = 0;

	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	close(peer);
	peer = -1;
	if (expect_eof(env, s) < 0)
		goto out;
	until = vsx__now_ms() + SLACK_MS;
	while (vsx__now_ms() < until && (r = vsx_send(s, "x", 1)) == 1)
		usleep(10 * 1000);
	CHECK(r == -EPIPE || r == -ECONNRESET, "vsx_send to a closed peer = %zd (%s), "
	      "want -EPIPE or -ECONNRESET", r, r < 0 ? vsx_strerror((int)r) : "sent");
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

/* vsx_get_buffer(@s, @which) must be what the environment promises after
 * asking @rx and @tx. */
static int buffer_is(const struct vsx_suite_env *env, const vsx_sock *s, int role,
		     int which, size_t rx, size_t tx, const char *what)
{
	size_t want = 0, got = 0;
	int werr, rc;

	werr = env->expect_buffer(env->ctx, role, which, rx, tx, &want);
	rc = vsx_get_buffer(s, which, &got);
	if (werr < 0 && rc != werr) {
		fail_at(env, __func__, __LINE__, "%s: vsx_get_buffer(%s) = %d (%s), want %d",
			what, which == VSX_RX ? "RX" : "TX", rc, vsx_strerror(rc), werr);
		return -1;
	}
	if (werr == 0 && (rc != 0 || got != want)) {
		fail_at(env, __func__, __LINE__, "%s: vsx_get_buffer(%s) = %d, %zu bytes; "
			"want %zu after asking rx %zu tx %zu", what,
			which == VSX_RX ? "RX" : "TX", rc, got, want, rx, tx);
		return -1;
	}
	return 0;
}

/* Sizes asked in vsx_opts, on a connected socket, on a listener. */
static int case_buffer_knob(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	const size_t rx = 65536, later = 131072, lrx = 40000;
	const size_t tx = env->one_buffer ? rx : 98304;
	struct vsx_info info;
	size_t dummy, before = 0, after = 0;
	vsx_sock *s = NULL, *l = NULL, *a = NULL;
	int peer = -1, peer2 = -1, rc = -1, tx_ok, err;

	/* Defaults first. */
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	if (buffer_is(env, s, VSX_SUITE_CLIENT, VSX_RX, 0, 0, "default") < 0 ||
	    buffer_is(env, s, VSX_SUITE_CLIENT, VSX_TX, 0, 0, "default") < 0)
		goto out;
	close(peer); /* the peer first: the close then has nothing to wait for */
	peer = -1;
	vsx_close(s);
	s = NULL;

	/* Asked before connecting. */
	tx_ok = env->expect_buffer(env->ctx, VSX_SUITE_CLIENT, VSX_TX, rx, tx, &dummy) == 0;
	o.rx_buffer = rx;
	o.tx_buffer = tx_ok ? tx : 0;
	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	if (buffer_is(env, s, VSX_SUITE_CLIENT, VSX_RX, rx, o.tx_buffer, "opts") < 0 ||
	    buffer_is(env, s, VSX_SUITE_CLIENT, VSX_TX, rx, o.tx_buffer, "opts") < 0)
		goto out;
	CALL_EQ(vsx_info(s, &info), 0);
	CALL_EQ(vsx_get_buffer(s, VSX_RX, &before), 0);
	CHECK(info.rx_buffer == before, "vsx_info rx_buffer %zu, vsx_get_buffer %zu",
	      info.rx_buffer, before);

	/* Changed while connected. */
	err = vsx_set_buffer(s, VSX_RX, later);
	CHECK(err == env->set_connected_err, "vsx_set_buffer on a connected socket = %d "
	      "(%s), want %d", err, vsx_strerror(err), env->set_connected_err);
	if (err == 0) {
		if (buffer_is(env, s, VSX_SUITE_CLIENT, VSX_RX, later, 0, "changed") < 0)
			goto out;
	} else {
		CALL_EQ(vsx_get_buffer(s, VSX_RX, &after), 0);
		CHECK(after == before, "a refused change moved the buffer from %zu to %zu",
		      before, after);
	}
	close(peer);
	peer = -1;
	vsx_close(s);
	s = NULL;

	/* On a listener: its accepted sockets inherit. */
	o.rx_buffer = lrx;
	o.tx_buffer = 0;
	if (pair_accepted(env, &o, &l, &a, &peer2) < 0)
		goto out;
	if (buffer_is(env, l, VSX_SUITE_LISTENER, VSX_RX, lrx, 0, "listener") < 0 ||
	    buffer_is(env, a, VSX_SUITE_ACCEPTED, VSX_RX, lrx, 0, "accepted") < 0 ||
	    buffer_is(env, a, VSX_SUITE_ACCEPTED, VSX_TX, lrx, 0, "accepted") < 0)
		goto out;
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	if (peer2 >= 0)
		close(peer2);
	vsx_close(s);
	vsx_close(a);
	vsx_close(l);
	return rc;
}

static int case_info(const struct vsx_suite_env *env)
{
	struct vsx_opts o = opts_for(env);
	struct vsx_info info;
	struct vsx_addr a;
	vsx_sock *s = NULL;
	int peer = -1, rc = -1;

	if (pair_client(env, &o, &s, &peer) < 0)
		goto out;
	CALL_EQ(vsx_info(s, &info), 0);
	CHECK(strcmp(info.transport, env->expect_name) == 0, "transport '%s', want '%s'",
	      info.transport, env->expect_name);
	CHECK(info.state == VSX_STATE_CONNECTED, "state %d, want CONNECTED", info.state);
	CHECK(info.type == SOCK_STREAM, "type %d, want SOCK_STREAM", info.type);
	CHECK(vsx_addr_parse(info.peer, &a) == 0, "peer address '%s' does not parse",
	      info.peer);
	CHECK(vsx_addr_parse(info.local, &a) == 0, "local address '%s' does not parse",
	      info.local);
	CHECK(info.bytes_sent == 0 && info.bytes_received == 0, "fresh counters not 0");
	rc = 0;
out:
	if (peer >= 0)
		close(peer);
	vsx_close(s);
	return rc;
}

const struct vsx_suite_case vsx_suite_cases[] = {
	{ "transfer_client", case_transfer_client },
	{ "transfer_accepted", case_transfer_accepted },
	{ "half_close", case_half_close },
	{ "close_graceful", case_close_graceful },
	{ "close_linger_timeout", case_close_linger_timeout },
	{ "close_no_linger", case_close_no_linger },
	{ "connect_unserved", case_connect_unserved },
	{ "nonblock_recv", case_nonblock_recv },
	{ "nonblock_send", case_nonblock_send },
	{ "peer_gone", case_peer_gone },
	{ "buffer_knob", case_buffer_knob },
	{ "info", case_info },
	{ NULL, NULL },
};

int vsx_suite_run_case(const struct vsx_suite_env *env, const char *name)
{
	const struct vsx_suite_case *c;

	for (c = vsx_suite_cases; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c->run(env) < 0 ? -1 : 0;
	return -2;
}

int vsx_suite_run_all(const struct vsx_suite_env *env)
{
	const struct vsx_suite_case *c;
	int failed = 0;

	for (c = vsx_suite_cases; c->name; c++) {
		if (c->run(env) < 0) {
			printf("not ok - %s [%s]\n", c->name, env->name);
			failed++;
		} else {
			printf("ok - %s [%s]\n", c->name, env->name);
		}
		fflush(stdout);
	}
	return failed;
}
