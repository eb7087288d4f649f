/*
 * vsx_peer: one end of a checked vsock conversation, for the real-guest
 * tests of vsxd (tests/vm/backend.test) and the demo. The same program runs
 * on both sides: in the lab guest with vsock: addresses (the guest kernel's
 * virtio-vsock), on the host with unix:PATH:PORT addresses (hybrid vsock
 * through vsxd). It opens AF_VSOCK only for vsock: addresses, and refuses
 * those unless $VSX_LAB_GUEST is set (the guest's /init sets it).
 *
 *   vsx_peer [OPTIONS] listen ADDR [STEPS]
 *   vsx_peer [OPTIONS] connect ADDR [STEPS]
 *
 * Every connection starts with a hello from the connecting side (16 bytes:
 * "VSXP", its index, its seed), so that each side knows which pattern the
 * other sends. Then both sides run STEPS, a comma-separated list:
 *
 *   send:SIZE    send SIZE bytes of the pattern (SIZE: bytes, or K, M, G)
 *   recv:SIZE    receive exactly SIZE bytes; every byte is checked
 *   duplex:SIZE  send and receive SIZE bytes at once (one poll loop)
 *   shut         shut down the sending side (SHUT_WR)
 *   eof          the next receive must report EOF
 *   gone         the next receive must report EOF or a reset (the peer died)
 *   msend:N      SEQPACKET: send N messages of the sizes in msg_sizes[]
 *   mrecv:N      SEQPACKET: receive N messages; each one must arrive whole,
 *                alone and intact (its size and every byte checked)
 *   sleep:MS     wait
 *   hold         wait until the process gets SIGUSR1 (every connection's
 *                hold ends at the first one: a test's go, not a time)
 *   within:MS    the step before this one must have taken at most MS
 *                (e.g. send:2M,within:8000 with a receiver that sleeps
 *                first: the bytes fit in the receiver's credit)
 *   buf:SIZE     set this socket's receive buffer (vsx_set_buffer VSX_RX:
 *                the credit the peer gets) to SIZE now
 *   info         print vsx_info
 *   close        vsx_close now; it must return 0 (the peer finished)
 * A connection whose STEPS do not end with close is closed at the end the
 * same way, and that close must return 0 too.
 *
 * The pattern: byte i of a stream with seed S is a fixed function of (S, i),
 * so a receiver checks any offset whatever the sizes of its reads.
 *
 * Options:
 *   -n N        connections: connect opens N at once (a thread each);
 *               listen accepts N (0: until SIGTERM), each served in a thread
 *   -s          SEQPACKET. For listen on unix:PATH:PORT, libvsx binds a
 *               SOCK_SEQPACKET Unix socket at PATH_PORT (vsxd connects guest
 *               SEQPACKET sockets there)
 *   -t MS       connect timeout (vsx_opts.connect_timeout_ms)
 *   -w MS       keep retrying a failed connect for MS (refused, timed out,
 *               unreachable), 100 ms apart
 *   -x ERR      the connect must fail with ERR (ECONNREFUSED, ETIMEDOUT, ...);
 *               with -w, attempts that fail otherwise or succeed (closed at
 *               once) are retried until ERR shows up
 *   -m MS       with -x: the failing attempt must end within MS
 *   -k SEED     seed base (default 1)
 *   -T SECS     overall time limit (default 900)
 *   -l LABEL    name in the output (default: the mode)
 *   -R FILE     listen: create FILE once listening
 *   -v          per-step lines for every connection
 *   -X OFFSET   corrupt what this side sends: flip one bit of stream byte
 *               OFFSET (a negative control: the receiver must notice)
 *   -M SIZE     SEQPACKET: messages of at most SIZE bytes (the sizes of
 *               msg_sizes[] clamped to it)
 *   -S MS       fail a step that makes no progress for MS (default 60000)
 *
 * Output: "vsx_peer[LABEL]: ..." lines; the last one is "ok: ..." or
 * "FAIL: ...". Exit status 0 when everything was as expected, 1 otherwise,
 * 2 for usage errors, 77 for a vsock: address outside the lab guest.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "pattern.h"
#include "util.h"

#define WHY_LEN 512
#define KiB ((uint64_t)1024)
#define MiB (1024 * KiB)
#define IO_CHUNK (256 * 1024)
#define MSG_BUF (256 * 1024 + 1)   /* larger than any message in msg_sizes */
#define STALL_MS 60000             /* no progress for this long: fail (-S) */
static int stall_ms = STALL_MS;
#define HELLO_LEN 16
#define MAX_STEPS 32
#define MAX_CONNS 256

/* SEQPACKET message sizes, cycled: around page and packet (64 KiB) edges. */
static const uint32_t msg_sizes[] = {
	1, 100, 4095, 4096, 4097, 8192, 20000, 65535, 65536, 65537, 131072, 7, 333,
};
#define N_MSG_SIZES (sizeof(msg_sizes) / sizeof(msg_sizes[0]))

enum step_op { S_SEND, S_RECV, S_DUPLEX, S_SHUT, S_EOF, S_GONE, S_MSEND, S_MRECV,
	       S_SLEEP, S_WITHIN, S_BUF, S_INFO, S_CLOSE, S_HOLD };

struct step {
	enum step_op op;
	uint64_t arg;
	const char *text;
};

static struct {
	const char *label;
	int listen;
	const char *addr;
	int nconns;
	int seq;
	int connect_timeout_ms;
	int retry_ms;
	int expect_err;         /* positive errno, 0: none */
	int expect_max_ms;
	uint64_t seed;
	unsigned limit_s;
	const char *ready_file;
	int verbose;
	int64_t corrupt_at;     /* -X: stream byte to flip, -1: none */
	uint32_t msg_max;       /* -M: largest message, 0: msg_sizes[] as is */
	struct step steps[MAX_STEPS];
	int nsteps;
	char *steps_text;       /* the STEPS argument, which steps[] point into */
	char *unlink_path;      /* a hybrid listener's PATH_PORT */
} cfg = { .nconns = 1, .seed = 1, .limit_s = 900, .corrupt_at = -1 };

static volatile sig_atomic_t stop;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- Output ---------------------------------------------------------------- */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* one write per line: several processes share the guest's console */
	pthread_mutex_lock(&out_lock);
	printf("vsx_peer[%s]: %s\n", cfg.label, line);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}


static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const struct {
	int err;
	const char *name;
} err_names[] = {
	{ ECONNREFUSED, "ECONNREFUSED" }, { ETIMEDOUT, "ETIMEDOUT" },
	{ ECONNRESET, "ECONNRESET" },     { ENETUNREACH, "ENETUNREACH" },
	{ EHOSTUNREACH, "EHOSTUNREACH" }, { ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT" },
	{ EPROTO, "EPROTO" },             { EPIPE, "EPIPE" },
	{ ENODEV, "ENODEV" },             { EINVAL, "EINVAL" },
	{ EAGAIN, "EAGAIN" },             { EMSGSIZE, "EMSGSIZE" },
	{ ENOENT, "ENOENT" },             { EADDRINUSE, "EADDRINUSE" },
};

static const char *err_name(int err)
{
	static __thread char buf[24];
	size_t i;

	if (err < 0)
		err = -err;
	for (i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++)
		if (err_names[i].err == err)
			return err_names[i].name;
	snprintf(buf, sizeof(buf), "errno %d", err);
	return buf;
}

static int err_from_name(const char *s)
{
	size_t i;

	for (i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++)
		if (!strcmp(err_names[i].name, s))
			return err_names[i].err;
	return 0;
}

static double mib(uint64_t n)
{
	return (double)n / (double)MiB;
}

/* ---- One connection ----------------------------------------------------------- */

struct conn {
	int idx;
	vsx_sock *s;
	uint64_t tx_seed, rx_seed;
	uint64_t tx_off, rx_off;   /* stream offsets (messages: bytes so far) */
	uint64_t tx_msgs, rx_msgs; /* SEQPACKET messages so far */
	uint8_t *txbuf, *rxbuf, *scratch;
	size_t tx_len, tx_pos;     /* pattern bytes staged in txbuf */
	double secs;
	int rc;
	char why[WHY_LEN];
	pthread_t th;
	int started;
};

#define FAIL(c, ...)                                                   \
	do {                                                           \
		snprintf((c)->why, WHY_LEN, __VA_ARGS__);              \
		return -1;                                             \
	} while (0)

static int check_bytes(struct conn *c, const uint8_t *got, size_t n)
{
	uint64_t bad = pattern_mismatch(c->rx_seed, c->rx_off, got, n, c->scratch);
	size_t i;

	if (bad == UINT64_MAX)
		return 0;
	i = (size_t)(bad - c->rx_off);
	FAIL(c, "byte %" PRIu64 " of the stream is 0x%02x, expected 0x%02x", bad, got[i],
	     c->scratch[i]);
}

/* Wait for @events on the socket; 0 on time, -1 (why set) when stalled. */
static int wait_io(struct conn *c, short events, short *revents)
{
	struct pollfd p = { .fd = vsx_fd(c->s), .events = events };
	int r;

	do
		r = poll(&p, 1, stall_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		FAIL(c, "no progress for %d s (sent %" PRIu64 ", received %" PRIu64 ")",
		     stall_ms / 1000, c->tx_off, c->rx_off);
	if (r < 0)
		FAIL(c, "poll: %s", strerror(errno));
	*revents = p.revents;
	return 0;
}

/*
 * Stream: send @tx pattern bytes and receive (and check) @rx at once, on a
 * non-blocking socket. With @raw, the bytes are @rawtx / into @rawrx
 * instead of the pattern (the hello).
 */
static int xfer(struct conn *c, uint64_t tx, uint64_t rx, const uint8_t *rawtx,
		uint8_t *rawrx)
{
	uint64_t rx_end = c->rx_off + rx, sent = 0, got = 0;
	short ev, rev;
	ssize_t r;
	size_t n;

	c->tx_len = c->tx_pos = 0;
	while (sent < tx || got < rx) {
		ev = (sent < tx ? POLLOUT : 0) | (got < rx ? POLLIN : 0);
		if (wait_io(c, ev, &rev) < 0)
			return -1;
		if ((rev & (POLLOUT | POLLERR | POLLHUP)) && sent < tx) {
			if (c->tx_pos == c->tx_len) {
				n = tx - sent < IO_CHUNK ? (size_t)(tx - sent) : IO_CHUNK;
				if (rawtx)
					memcpy(c->txbuf, rawtx + sent, n);
				else
					pattern_fill(c->tx_seed, c->tx_off, c->txbuf, n);
				if (!rawtx && cfg.corrupt_at >= (int64_t)c->tx_off &&
				    cfg.corrupt_at < (int64_t)(c->tx_off + n))
					c->txbuf[cfg.corrupt_at - (int64_t)c->tx_off] ^= 0x10;
				c->tx_len = n;
				c->tx_pos = 0;
			}
			r = vsx_send(c->s, c->txbuf + c->tx_pos, c->tx_len - c->tx_pos);
			if (r < 0 && r != -EAGAIN)
				FAIL(c, "vsx_send after %" PRIu64 " bytes: %s (%s)", c->tx_off,
				     vsx_strerror((int)r), err_name((int)r));
			if (r > 0) {
				c->tx_pos += (size_t)r;
				sent += (uint64_t)r;
				if (!rawtx)
					c->tx_off += (uint64_t)r;
			}
		}
		if ((rev & (POLLIN | POLLERR | POLLHUP)) && got < rx) {
			n = rx - got < IO_CHUNK ? (size_t)(rx - got) : IO_CHUNK;
			r = vsx_recv(c->s, rawrx ? rawrx + got : c->rxbuf, n);
			if (r == 0)
				FAIL(c, "EOF after %" PRIu64 " of %" PRIu64 " bytes",
				     rawrx ? got : c->rx_off, rawrx ? rx : rx_end);
			if (r < 0 && r != -EAGAIN)
				FAIL(c, "vsx_recv after %" PRIu64 " bytes: %s (%s)",
				     rawrx ? got : c->rx_off, vsx_strerror((int)r),
				     err_name((int)r));
			if (r > 0) {
				if (!rawrx) {
					if (check_bytes(c, c->rxbuf, (size_t)r) < 0)
						return -1;
					c->rx_off += (uint64_t)r;
				}
				got += (uint64_t)r;
			}
		}
	}
	return 0;
}

/* The next receive: 0 EOF, or the error; -1000 when data came. */
static int next_recv(struct conn *c, uint8_t *byte)
{
	short rev;
	ssize_t r;

	for (;;) {
		if (!cfg.seq && wait_io(c, POLLIN, &rev) < 0)
			return -2000;
		r = vsx_recv(c->s, byte, 1);
		if (r == -EAGAIN)
			continue;
		if (r > 0)
			return -1000;
		return (int)r;
	}
}

/* The hold step's go: SIGUSR1 (on_go) makes the pipe readable for good. */
static int go_pipe[2] = { -1, -1 };

static int step_hold(struct conn *c)
{
	struct pollfd p = { .fd = go_pipe[0], .events = POLLIN };

	while (!stop) {
		int r = poll(&p, 1, -1);

		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			FAIL(c, "poll: %s", strerror(errno));
	}
	FAIL(c, "stopped while holding");
}

static int step_eof(struct conn *c, int allow_reset)
{
	uint8_t b = 0;
	int r = next_recv(c, &b);

	if (r == -2000)
		return -1;
	if (allow_reset && (r == 0 || r == -ECONNRESET || r == -EPIPE)) {
		say("conn %d: the peer is gone: %s", c->idx, r ? err_name(r) : "EOF");
		return 0;
	}
	if (r == 0)
		return 0;
	if (r == -1000)
		FAIL(c, "data (0x%02x) where %s was expected", b,
		     allow_reset ? "EOF or a reset" : "EOF");
	FAIL(c, "vsx_recv where %s was expected: %s (%s)", allow_reset ? "EOF or a reset"
	     : "EOF", vsx_strerror(r), err_name(r));
}

static uint32_t msg_size(uint64_t k)
{
	uint32_t len = msg_sizes[k % N_MSG_SIZES];

	return cfg.msg_max && len > cfg.msg_max ? cfg.msg_max : len;
}

/* SEQPACKET (blocking socket): whole messages. */
static int step_msend(struct conn *c, uint64_t n)
{
	uint64_t i;
	uint32_t len;
	ssize_t r;

	for (i = 0; i < n; i++) {
		len = msg_size(c->tx_msgs);
		pattern_fill(c->tx_seed, c->tx_off, c->txbuf, len);
		r = vsx_send(c->s, c->txbuf, len);
		if (r != (ssize_t)len)
			FAIL(c, "message %" PRIu64 " (%u bytes): vsx_send returned %zd: %s",
			     c->tx_msgs, len, r, r < 0 ? vsx_strerror((int)r) : "short");
		c->tx_off += len;
		c->tx_msgs++;
	}
	return 0;
}

static int step_mrecv(struct conn *c, uint64_t n)
{
	uint64_t i;
	uint32_t len;
	ssize_t r;

	for (i = 0; i < n; i++) {
		len = msg_size(c->rx_msgs);
		r = vsx_recv(c->s, c->rxbuf, MSG_BUF);
		if (r == 0)
			FAIL(c, "EOF where message %" PRIu64 " (%u bytes) was expected",
			     c->rx_msgs, len);
		if (r < 0)
			FAIL(c, "message %" PRIu64 ": vsx_recv: %s (%s)", c->rx_msgs,
			     vsx_strerror((int)r), err_name((int)r));
		if (r != (ssize_t)len)
			FAIL(c, "message %" PRIu64 " is %zd bytes, expected %u: message "
			     "boundaries not kept", c->rx_msgs, r, len);
		if (check_bytes(c, c->rxbuf, len) < 0) {
			char w[WHY_LEN];

			snprintf(w, sizeof(w), "%s", c->why);
			FAIL(c, "message %" PRIu64 ": %.460s", c->rx_msgs, w);
		}
		c->rx_off += len;
		c->rx_msgs++;
	}
	return 0;
}

static void print_info(struct conn *c)
{
	struct vsx_info in;
	int r = vsx_info(c->s, &in);

	if (r < 0) {
		say("conn %d: vsx_info: %s", c->idx, vsx_strerror(r));
		return;
	}
	say("conn %d: transport %s, local %s, peer %s, type %s, sent %" PRIu64
	    ", received %" PRIu64, c->idx, in.transport, in.local, in.peer,
	    in.type == SOCK_SEQPACKET ? "seqpacket" : "stream", in.bytes_sent,
	    in.bytes_received);
}

static int do_close(struct conn *c)
{
	int r = vsx_close(c->s);

	c->s = NULL;
	if (r < 0)
		FAIL(c, "vsx_close: %s (%s)", vsx_strerror(r), err_name(r));
	return 0;
}

static int run_steps(struct conn *c)
{
	const struct step *st;
	uint64_t tx0, rx0;
	double t0, dt = 0;
	int i, r;

	for (i = 0; i < cfg.nsteps; i++) {
		st = &cfg.steps[i];
		if (!c->s)
			FAIL(c, "step '%s' after close", st->text);
		tx0 = c->tx_off;
		rx0 = c->rx_off;
		t0 = now_s();
		switch (st->op) {
		case S_SEND:
			r = xfer(c, st->arg, 0, NULL, NULL);
			break;
		case S_RECV:
			r = xfer(c, 0, st->arg, NULL, NULL);
			break;
		case S_DUPLEX:
			r = xfer(c, st->arg, st->arg, NULL, NULL);
			break;
		case S_SHUT:
			r = vsx_shutdown(c->s, SHUT_WR);
			if (r < 0)
				FAIL(c, "vsx_shutdown(SHUT_WR): %s", vsx_strerror(r));
			break;
		case S_EOF:
		case S_GONE:
			r = step_eof(c, st->op == S_GONE);
			break;
		case S_MSEND:
			r = step_msend(c, st->arg);
			break;
		case S_MRECV:
			r = step_mrecv(c, st->arg);
			break;
		case S_SLEEP:
			usleep((useconds_t)st->arg * 1000);
			r = 0;
			break;
		case S_HOLD:
			r = step_hold(c);
			break;
		case S_WITHIN:
			r = 0;
			if (dt * 1000 > (double)st->arg)
				FAIL(c, "the step before took %.0f ms, more than %" PRIu64,
				     dt * 1000, st->arg);
			break;
		case S_BUF:
			r = vsx_set_buffer(c->s, VSX_RX, (size_t)st->arg);
			if (r < 0)
				FAIL(c, "vsx_set_buffer(VSX_RX, %" PRIu64 "): %s", st->arg,
				     vsx_strerror(r));
			break;
		case S_INFO:
			print_info(c);
			r = 0;
			break;
		case S_CLOSE:
			r = do_close(c);
			break;
		default:
			r = -1;
		}
		if (r < 0) {
			char w[WHY_LEN];

			snprintf(w, sizeof(w), "%s", c->why);
			snprintf(c->why, WHY_LEN, "step '%s': %.450s", st->text, w);
			return -1;
		}
		dt = now_s() - t0;
		if ((cfg.verbose || cfg.nconns == 1) &&
		    (c->tx_off != tx0 || c->rx_off != rx0)) {
			uint64_t moved = c->tx_off - tx0 + c->rx_off - rx0;

			say("conn %d: %s: %.1f MiB in %.2f s (%.1f MiB/s), %s", c->idx,
			    st->text, mib(moved), dt, dt > 0 ? mib(moved) / dt : 0.0,
			    c->rx_off != rx0 ? "every byte checked" : "sent");
		}
	}
	if (c->s)
		return do_close(c);
	return 0;
}

/* The hello: "VSXP", le32 index, le64 seed. */
static void hello_pack(uint8_t *h, uint32_t idx, uint64_t seed)
{
	int i;

	memcpy(h, "VSXP", 4);
	for (i = 0; i < 4; i++)
		h[4 + i] = (uint8_t)(idx >> (8 * i));
	for (i = 0; i < 8; i++)
		h[8 + i] = (uint8_t)(seed >> (8 * i));
}

static int hello_send(struct conn *c)
{
	uint8_t h[HELLO_LEN];
	ssize_t r;

	hello_pack(h, (uint32_t)c->idx, c->tx_seed);
	if (!cfg.seq)
		return xfer(c, HELLO_LEN, 0, h, NULL);
	r = vsx_send(c->s, h, HELLO_LEN);
	if (r != HELLO_LEN)
		FAIL(c, "sending the hello: %zd (%s)", r, r < 0 ? vsx_strerror((int)r) : "short");
	return 0;
}

/* 0: got it; 1: the connection ended before any byte (a stray); -1 bad. */
static int hello_recv(struct conn *c)
{
	uint8_t h[64];
	uint64_t seed = 0;
	uint32_t idx = 0;
	ssize_t r;
	int i;

	if (!cfg.seq) {
		short rev;

		/* the first byte decides whether this is a stray */
		for (;;) {
			if (wait_io(c, POLLIN, &rev) < 0)
				return -1;
			r = vsx_recv(c->s, h, 1);
			if (r == -EAGAIN)
				continue;
			break;
		}
		if (r == 0 || r == -ECONNRESET || r == -EPIPE)
			return 1;
		if (r < 0)
			FAIL(c, "receiving the hello: %s", vsx_strerror((int)r));
		if (xfer(c, 0, HELLO_LEN - 1, NULL, h + 1) < 0)
			return -1;
	} else {
		r = vsx_recv(c->s, h, sizeof(h));
		if (r == 0 || r == -ECONNRESET || r == -EPIPE)
			return 1;
		if (r < 0)
			FAIL(c, "receiving the hello: %s", vsx_strerror((int)r));
		if (r != HELLO_LEN)
			FAIL(c, "hello message of %zd bytes, expected %d", r, HELLO_LEN);
	}
	if (memcmp(h, "VSXP", 4))
		FAIL(c, "bad hello (not from vsx_peer)");
	for (i = 0; i < 4; i++)
		idx |= (uint32_t)h[4 + i] << (8 * i);
	for (i = 0; i < 8; i++)
		seed |= (uint64_t)h[8 + i] << (8 * i);
	c->idx = (int)idx;
	c->rx_seed = seed;
	c->tx_seed = seed ^ 0x5a5a5a5a5a5a5a5aull;
	return 0;
}

static int conn_bufs(struct conn *c)
{
	c->txbuf = malloc(MSG_BUF);
	c->rxbuf = malloc(MSG_BUF);
	c->scratch = malloc(MSG_BUF);
	if (!c->txbuf || !c->rxbuf || !c->scratch)
		FAIL(c, "out of memory");
	return 0;
}

static void conn_free(struct conn *c)
{
	if (c->s)
		vsx_close(c->s);
	c->s = NULL;
	free(c->txbuf);
	free(c->rxbuf);
	free(c->scratch);
	c->txbuf = c->rxbuf = c->scratch = NULL;
}

/* ---- connect ------------------------------------------------------------------ */

static struct vsx_opts base_opts(void)
{
	struct vsx_opts o = { .connect_timeout_ms = cfg.connect_timeout_ms };

	o.flags = cfg.seq ? VSX_O_SEQPACKET : VSX_O_NONBLOCK;
	return o;
}

static int retryable(int r)
{
	return r == -ECONNREFUSED || r == -ETIMEDOUT || r == -ENETUNREACH ||
	       r == -ECONNRESET || r == -EPROTO || r == -ENODEV || r == -EHOSTUNREACH;
}

static int connect_expect_error(struct conn *c)
{
	struct vsx_opts o = base_opts();
	int64_t start = vsx__now_ms(), t0, took;
	int attempts = 0, r;
	vsx_sock *s;

	o.linger_ms = -1;
	for (;;) {
		attempts++;
		t0 = vsx__now_ms();
		r = vsx_connect(cfg.addr, &o, &s);
		took = vsx__now_ms() - t0;
		if (r == -cfg.expect_err)
			break;
		if (r == 0)
			vsx_close(s); /* linger < 0: no wait for the peer */
		if (!cfg.retry_ms || vsx__now_ms() - start >= cfg.retry_ms) {
			if (r == 0)
				FAIL(c, "connected (attempt %d), expected -%s", attempts,
				     err_name(cfg.expect_err));
			FAIL(c, "connect failed with -%s (%s) after %" PRId64 " ms (attempt "
			     "%d), expected -%s", err_name(r), vsx_strerror(r), took, attempts,
			     err_name(cfg.expect_err));
		}
		usleep(100 * 1000);
	}
	say("conn %d: connect failed with -%s after %" PRId64 " ms (attempt %d): %s",
	    c->idx, err_name(r), took, attempts, vsx_strerror(r));
	if (cfg.expect_max_ms && took > cfg.expect_max_ms)
		FAIL(c, "the failure took %" PRId64 " ms, more than the %d ms allowed", took,
		     cfg.expect_max_ms);
	if (cfg.expect_err == ETIMEDOUT && cfg.connect_timeout_ms &&
	    took < cfg.connect_timeout_ms - 50)
		FAIL(c, "timed out after %" PRId64 " ms, before the %d ms timeout", took,
		     cfg.connect_timeout_ms);
	return 0;
}

static int connect_one(struct conn *c)
{
	struct vsx_opts o = base_opts();
	int64_t start = vsx__now_ms();
	int attempts = 0, r;

	if (cfg.expect_err)
		return connect_expect_error(c);
	for (;;) {
		attempts++;
		r = vsx_connect(cfg.addr, &o, &c->s);
		if (r == 0)
			break;
		if (!cfg.retry_ms || !retryable(r) || vsx__now_ms() - start >= cfg.retry_ms)
			FAIL(c, "vsx_connect(%s) failed after %d attempt(s) in %" PRId64
			     " ms: %s (%s)", cfg.addr, attempts, vsx__now_ms() - start,
			     vsx_strerror(r), err_name(r));
		usleep(100 * 1000);
	}
	if (attempts > 1 || cfg.verbose)
		say("conn %d: connected after %d attempt(s), %" PRId64 " ms", c->idx, attempts,
		    vsx__now_ms() - start);
	else
		say("conn %d: connected", c->idx);
	if (cfg.verbose)
		print_info(c);
	if (hello_send(c) < 0)
		return -1;
	return run_steps(c);
}

static void *connect_main(void *arg)
{
	struct conn *c = arg;
	double t0 = now_s();

	c->rc = conn_bufs(c) < 0 ? -1 : connect_one(c);
	c->secs = now_s() - t0;
	conn_free(c);
	return NULL;
}

/* ---- listen ------------------------------------------------------------------- */

static void *serve_main(void *arg)
{
	struct conn *c = arg;
	double t0 = now_s();

	c->rc = run_steps(c);
	c->secs = now_s() - t0;
	conn_free(c);
	return NULL;
}

static int do_listen(struct conn *conns, int *nserved, int *strays)
{
	struct vsx_opts o = base_opts();
	struct vsx_addr a;
	vsx_sock *l = NULL;
	struct pollfd p;
	int r, n = 0, fd, want = cfg.nconns;
	struct conn *c;

	r = vsx_addr_parse(cfg.addr, &a);
	if (r < 0) {
		say("FAIL: %s: %s", cfg.addr, vsx_strerror(r));
		return -1;
	}
	r = vsx_listen(cfg.addr, &o, &l);
	/* the hybrid listener's PATH_PORT, for an exit on the time limit */
	if (r == 0 && a.kind == VSX_ADDR_UNIX &&
	    asprintf(&cfg.unlink_path, "%s_%u", a.path, a.port) < 0)
		cfg.unlink_path = NULL;
	if (r < 0) {
		say("FAIL: vsx_listen(%s): %s (%s)", cfg.addr, vsx_strerror(r), err_name(r));
		return -1;
	}
	say("listening on %s%s", cfg.addr, cfg.seq ? " (seqpacket)" : "");
	if (cfg.ready_file) {
		fd = open(cfg.ready_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0)
			close(fd);
	}
	while (!stop && (want == 0 || n < want)) {
		p = (struct pollfd){ .fd = vsx_fd(l), .events = POLLIN };
		r = poll(&p, 1, 200);
		if (r <= 0)
			continue;
		c = &conns[n];
		memset(c, 0, sizeof(*c));
		r = vsx_accept(l, &c->s);
		if (r == -EAGAIN)
			continue;
		if (r < 0) {
			say("FAIL: vsx_accept: %s", vsx_strerror(r));
			break;
		}
		if (conn_bufs(c) < 0) {
			say("FAIL: %s", c->why);
			conn_free(c);
			break;
		}
		r = hello_recv(c);
		if (r == 1) {
			(*strays)++;
			say("note: a connection ended before its hello (a stray; ignored)");
			conn_free(c);
			continue;
		}
		if (r < 0) {
			c->rc = -1;
			c->started = 0;
			n++;
			conn_free(c);
			continue;
		}
		if (cfg.verbose)
			print_info(c);
		else if (want == 1)
			say("conn %d: accepted", c->idx);
		if (pthread_create(&c->th, NULL, serve_main, c) != 0) {
			snprintf(c->why, WHY_LEN, "pthread_create failed");
			c->rc = -1;
			conn_free(c);
		} else {
			c->started = 1;
		}
		n++;
		if (n >= MAX_CONNS)
			break;
	}
	*nserved = n;
	vsx_close(l);
	if (cfg.unlink_path)
		unlink(cfg.unlink_path);
	return 0;
}

/* ---- main --------------------------------------------------------------------- */

static int parse_size(const char *s, uint64_t *out)
{
	return vsx__parse_size(s, strlen(s), UINT64_MAX, out) < 0 ? -1 : 0;
}

static int parse_steps(char *text)
{
	static const struct {
		const char *name;
		enum step_op op;
		int has_arg;
	} ops[] = {
		{ "send", S_SEND, 1 },   { "recv", S_RECV, 1 },   { "duplex", S_DUPLEX, 1 },
		{ "shut", S_SHUT, 0 },   { "eof", S_EOF, 0 },     { "gone", S_GONE, 0 },
		{ "msend", S_MSEND, 1 }, { "mrecv", S_MRECV, 1 }, { "sleep", S_SLEEP, 1 },
		{ "within", S_WITHIN, 1 }, { "buf", S_BUF, 1 },
		{ "info", S_INFO, 0 },   { "close", S_CLOSE, 0 },   { "hold", S_HOLD, 0 },
	};
	char *tok, *save = NULL, *colon;
	size_t i;

	for (tok = strtok_r(text, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct step *st = &cfg.steps[cfg.nsteps];

		if (cfg.nsteps == MAX_STEPS)
			return -1;
		st->text = strdup(tok);
		colon = strchr(tok, ':');
		if (colon)
			*colon++ = '\0';
		for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
			if (!strcmp(ops[i].name, tok))
				break;
		if (i == sizeof(ops) / sizeof(ops[0]) || !!colon != ops[i].has_arg) {
			fprintf(stderr, "vsx_peer: bad step '%s'\n", st->text);
			return -1;
		}
		st->op = ops[i].op;
		if (colon && parse_size(colon, &st->arg) < 0) {
			fprintf(stderr, "vsx_peer: bad size in '%s'\n", st->text);
			return -1;
		}
		if (cfg.seq && (st->op == S_SEND || st->op == S_RECV || st->op == S_DUPLEX)) {
			fprintf(stderr, "vsx_peer: '%s' is a stream step; use msend/mrecv "
				"with -s\n", st->text);
			return -1;
		}
		if (!cfg.seq && (st->op == S_MSEND || st->op == S_MRECV)) {
			fprintf(stderr, "vsx_peer: '%s' needs -s\n", st->text);
			return -1;
		}
		cfg.nsteps++;
	}
	return 0;
}

static void on_alarm(int sig)
{
	static const char msg[] = "vsx_peer: FAIL: time limit exceeded\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to do */
	}
	if (cfg.unlink_path)
		unlink(cfg.unlink_path);
	_exit(1);
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void on_go(int sig)
{
	(void)sig;
	if (write(go_pipe[1], "g", 1) < 0) {
		/* (full: it is readable already) */
	}
}

static int usage(void)
{
	fprintf(stderr,
		"usage: vsx_peer [-n N] [-s] [-t MS] [-w MS] [-x ERR [-m MS]] [-k SEED]\n"
		"                [-T SECS] [-l LABEL] [-R FILE] [-v] [-X OFFSET] [-M SIZE] [-S MS]\n"
		"                listen|connect ADDR [STEPS]\n"
		"steps: send:SIZE recv:SIZE duplex:SIZE shut eof gone msend:N mrecv:N\n"
		"       sleep:MS within:MS buf:SIZE info close hold (comma-separated)\n");
	return 2;
}

int main(int argc, char **argv)
{
	static struct conn conns[MAX_CONNS];
	struct sigaction sa = { .sa_handler = on_term };
	uint64_t sent = 0, got = 0;
	int opt, i, failed = 0, ok = 0, nserved = 0, strays = 0;
	double t0;

	while ((opt = getopt(argc, argv, "n:st:w:x:m:k:T:l:R:vX:M:S:")) != -1) {
		switch (opt) {
		case 'n': cfg.nconns = atoi(optarg); break;
		case 's': cfg.seq = 1; break;
		case 't': cfg.connect_timeout_ms = atoi(optarg); break;
		case 'w': cfg.retry_ms = atoi(optarg); break;
		case 'x':
			cfg.expect_err = err_from_name(optarg);
			if (!cfg.expect_err) {
				fprintf(stderr, "vsx_peer: unknown error name '%s'\n", optarg);
				return 2;
			}
			break;
		case 'm': cfg.expect_max_ms = atoi(optarg); break;
		case 'k': cfg.seed = strtoull(optarg, NULL, 0); break;
		case 'T': cfg.limit_s = (unsigned)atoi(optarg); break;
		case 'l': cfg.label = optarg; break;
		case 'R': cfg.ready_file = optarg; break;
		case 'v': cfg.verbose = 1; break;
		case 'S':
			stall_ms = atoi(optarg);
			if (stall_ms <= 0)
				return usage();
			break;
		case 'X': cfg.corrupt_at = strtoll(optarg, NULL, 0); break;
		case 'M': {
			uint64_t m;

			if (parse_size(optarg, &m) < 0 || !m || m >= MSG_BUF) {
				fprintf(stderr, "vsx_peer: -M %s: a size of 1 to %d bytes\n",
					optarg, MSG_BUF - 1);
				return 2;
			}
			cfg.msg_max = (uint32_t)m;
			break;
		}
		default: return usage();
		}
	}
	if (argc - optind < 2 || argc - optind > 3)
		return usage();
	if (!strcmp(argv[optind], "listen"))
		cfg.listen = 1;
	else if (strcmp(argv[optind], "connect"))
		return usage();
	cfg.addr = argv[optind + 1];
	if (!cfg.label)
		cfg.label = argv[optind];
	if (cfg.nconns < 0 || cfg.nconns > MAX_CONNS || (!cfg.listen && cfg.nconns == 0) ||
	    (cfg.expect_err && (cfg.listen || cfg.nconns != 1)))
		return usage();
	cfg.steps_text = strdup(argc - optind == 3 ? argv[optind + 2] : "");
	if (!cfg.steps_text || parse_steps(cfg.steps_text) < 0)
		return 2;
	if ((!strncmp(cfg.addr, "vsock:", 6) || !strncmp(cfg.addr, "hvsock:", 7)) &&
	    !getenv("VSX_LAB_GUEST")) {
		fprintf(stderr, "vsx_peer: %s would open AF_VSOCK; that happens only inside "
			"the lab guest (its /init sets VSX_LAB_GUEST)\n", cfg.addr);
		return 77;
	}

	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (pipe2(go_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		perror("vsx_peer: pipe2");
		return 1;
	}
	sa.sa_handler = on_go;
	sigaction(SIGUSR1, &sa, NULL);
	alarm(cfg.limit_s);
	t0 = now_s();

	if (cfg.listen) {
		if (do_listen(conns, &nserved, &strays) < 0)
			return 1;
	} else {
		nserved = cfg.nconns;
		for (i = 0; i < nserved; i++) {
			conns[i].idx = i;
			conns[i].tx_seed = cfg.seed * 1000003ull + (uint64_t)i;
			conns[i].rx_seed = conns[i].tx_seed ^ 0x5a5a5a5a5a5a5a5aull;
			if (pthread_create(&conns[i].th, NULL, connect_main, &conns[i]) != 0) {
				conns[i].rc = -1;
				snprintf(conns[i].why, WHY_LEN, "pthread_create failed");
				continue;
			}
			conns[i].started = 1;
		}
	}
	for (i = 0; i < nserved; i++) {
		if (conns[i].started)
			pthread_join(conns[i].th, NULL);
		if (conns[i].rc < 0) {
			say("FAIL: conn %d: %s", conns[i].idx, conns[i].why);
			failed++;
		} else {
			ok++;
			sent += conns[i].tx_off;
			got += conns[i].rx_off;
		}
	}
	if (cfg.listen && cfg.nconns && nserved < cfg.nconns) {
		say("FAIL: accepted %d of %d connections", nserved, cfg.nconns);
		failed++;
	}
	if (failed) {
		say("FAIL: %d of %d connection(s) failed", failed, nserved);
		return 1;
	}
	if (cfg.expect_err)
		say("ok: connect failed with -%s, as expected", err_name(cfg.expect_err));
	else
		say("ok: %d connection(s)%s, %.1f MiB sent, %.1f MiB received%s, %.2f s",
		    ok, strays ? " (and strays)" : "", mib(sent), mib(got),
		    got ? " (every byte checked)" : "", now_s() - t0);
	return 0;
}
