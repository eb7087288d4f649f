/*
 * qperf: one end of a checked bulk transfer, for bench/qemu.sh (vsock
 * through vsxd against TCP over virtio-net, in a real QEMU guest).
 *
 *   qperf [-l LABEL] [-s SIZE] [-w MS] [-t SECONDS] listen|connect ADDR send|recv BYTES
 *   qperf freeport
 *
 * ADDR is a libvsx address (libvsx(3)), connected, listened on and accepted
 * through libvsx:
 *   vsock:CID:PORT  kernel AF_VSOCK (CID a number, host, local or any); only
 *                   where VSX_LAB_GUEST=1, which the lab guest's /init
 *                   sets: this program never opens AF_VSOCK on the build
 *                   machine (nor hvsock:GUID)
 *   unix:PATH:PORT  hybrid vsock at a backend's uds-path PATH: connect does
 *                   the "CONNECT PORT" handshake; listen binds PATH_PORT,
 *                   where vsxd delivers the guest's connections to port PORT
 * or, because libvsx has no TCP transport, plain TCP here:
 *   tcp:HOST:PORT   HOST a numeric IPv4 or IPv6 address (IPv6 may be in
 *                   brackets), PORT 1 to 65535
 *
 * One connection is made (listen: the first one accepted), then BYTES
 * bytes go one way: the sender writes SIZE bytes at a time (default
 * 65536), shuts down its sending side and waits for the receiver's EOF; the
 * receiver reads up to SIZE bytes at a time, checks every byte against a
 * pseudo-random pattern of period 65521 (a prime, so a lost, repeated or
 * misplaced block shows), checks that EOF follows the last byte, then
 * closes. Both print one line on stdout,
 *   qperf-result label=LABEL role=recv bytes=N secs=S mibs=M
 * where the receiver's time runs from its first byte to its last and the
 * sender's from connected to the receiver's EOF. A listener says
 *   qperf[LABEL]: listening on ADDR
 * on stderr once it listens. -w MS retries a refused connect (no listener
 * yet) for up to MS milliseconds; -t SECONDS ends the program (SIGALRM)
 * when it has not finished by then. SIZE and BYTES take K, M, G suffixes.
 *
 * freeport prints a TCP port on 127.0.0.1 that was free a moment ago.
 *
 * Exit status: 0 when every byte arrived and matched, 1 on a failure
 * (described on stderr), 2 on bad usage (a bad option, role or address).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "util.h"

#define PERIOD 65521u
#define SIZE_MAX_IO (1u << 20)
/* Bounds one connect attempt (a refused one returns at once and is retried
 * under -w); generous, for a loaded TCG guest. */
#define CONNECT_TIMEOUT_MS 30000

static const char *label = "qperf";
static uint8_t pattern[PERIOD + SIZE_MAX_IO];

static void pattern_init(void)
{
	uint32_t x = 0x9e3779b9u;

	for (size_t i = 0; i < sizeof(pattern); i++) {
		if (i < PERIOD) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			pattern[i] = (uint8_t)(x >> 11);
		} else {
			pattern[i] = pattern[i - PERIOD];
		}
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* @detail: what went wrong (vsx_strerror or strerror text). Returns -1. */
static int fail(const char *what, const char *detail)
{
	fprintf(stderr, "qperf[%s]: FAIL: %s: %s\n", label, what, detail);
	return -1;
}

/* ---- Connections: libvsx, or a TCP socket ---------------------------------- */

/* One end: @vs (libvsx addresses) or @fd (tcp:), the other NULL / -1. */
struct conn {
	vsx_sock *vs;
	int fd;
};

/* A parsed tcp: address. */
struct tcp_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* The last error's text: libvsx's detail, or the errno's. */
static const char *conn_strerror(const struct conn *c, int err)
{
	return c->vs ? vsx_strerror(err) : strerror(-err);
}

/* Send all of @buf. 0 or a negative errno. */
static int conn_send_all(struct conn *c, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n;

		if (c->vs) {
			n = vsx_send(c->vs, buf, len);
		} else {
			n = send(c->fd, buf, len, MSG_NOSIGNAL);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				n = -errno;
		}
		if (n < 0)
			return (int)n;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A count, 0 at EOF, or a negative errno. */
static ssize_t conn_recv(struct conn *c, void *buf, size_t len)
{
	ssize_t n;

	if (c->vs)
		return vsx_recv(c->vs, buf, len);
	do
		n = recv(c->fd, buf, len, 0);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static int conn_shutdown_wr(struct conn *c)
{
	if (c->vs)
		return vsx_shutdown(c->vs, SHUT_WR);
	return shutdown(c->fd, SHUT_WR) < 0 ? -errno : 0;
}

/* Closes at once (linger -1: both ends saw EOF already, or we failed). */
static void conn_close(struct conn *c)
{
	if (c->vs)
		vsx_close(c->vs);
	else if (c->fd >= 0)
		close(c->fd);
	c->vs = NULL;
	c->fd = -1;
}

/* Decimal, at most @max. */
static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	uint64_t v;
	int r = vsx__parse_dec(s, strlen(s), max, &v);

	if (r == 0)
		*out = (unsigned long)v;
	return r;
}

/* "tcp:HOST:PORT" into @a. 0, or -EINVAL with a message on stderr. */
static int tcp_parse(const char *text, struct tcp_addr *a)
{
	const char *host = text + 4, *colon = strrchr(host, ':');
	struct sockaddr_in *in = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
	char buf[INET6_ADDRSTRLEN + 2];
	unsigned long port;
	size_t n;

	memset(a, 0, sizeof(*a));
	if (!colon || parse_uint(colon + 1, 65535, &port) || !port) {
		fprintf(stderr, "qperf: bad address '%s': expected tcp:HOST:PORT, "
			"PORT 1 to 65535\n", text);
		return -EINVAL;
	}
	n = (size_t)(colon - host);
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		host++;
		n -= 2;
	}
	if (n && n < sizeof(buf)) {
		memcpy(buf, host, n);
		buf[n] = '\0';
		if (inet_pton(AF_INET, buf, &in->sin_addr) == 1) {
			in->sin_family = AF_INET;
			in->sin_port = htons((uint16_t)port);
			a->len = sizeof(*in);
			return 0;
		}
		if (inet_pton(AF_INET6, buf, &in6->sin6_addr) == 1) {
			in6->sin6_family = AF_INET6;
			in6->sin6_port = htons((uint16_t)port);
			a->len = sizeof(*in6);
			return 0;
		}
	}
	fprintf(stderr, "qperf: bad address '%s': HOST must be a numeric IPv4 or "
		"IPv6 address\n", text);
	return -EINVAL;
}

/*
 * Check @text: a tcp: address (into @tcp, *@is_tcp = 1) or one libvsx
 * parses. 0, -EINVAL (bad: a message on stderr) or -EPERM (AF_VSOCK outside
 * the lab guest).
 */
static int check_addr(const char *text, struct tcp_addr *tcp, int *is_tcp)
{
	const char *lab = getenv("VSX_LAB_GUEST");
	struct vsx_addr a;
	int err;

	*is_tcp = !strncmp(text, "tcp:", 4);
	if (*is_tcp)
		return tcp_parse(text, tcp);
	err = vsx_addr_parse(text, &a);
	if (err) {
		fprintf(stderr, "qperf: bad address: %s (qperf takes vsock:CID:PORT, "
			"unix:PATH:PORT or tcp:HOST:PORT)\n", vsx_strerror(err));
		return err;
	}
	/* The build machine's vsock belongs to its infrastructure. */
	if ((a.kind == VSX_ADDR_VSOCK || a.kind == VSX_ADDR_HVSOCK) &&
	    (!lab || strcmp(lab, "1"))) {
		fprintf(stderr, "qperf: %s would open AF_VSOCK: only inside the lab guest "
			"(VSX_LAB_GUEST=1)\n", text);
		return -EPERM;
	}
	return 0;
}

/* The options of every libvsx socket here (vsx_accept's inherit them). */
static const struct vsx_opts vsx_options = {
	.connect_timeout_ms = CONNECT_TIMEOUT_MS,
	.linger_ms = -1,
	.backlog = 4,
};

static int connect_once(const char *text, const struct tcp_addr *tcp, struct conn *c)
{
	int fd;

	if (!tcp)
		return vsx_connect(text, &vsx_options, &c->vs);
	fd = socket(tcp->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&tcp->ss, tcp->len) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	c->fd = fd;
	return 0;
}

/* Connect, retrying what a missing listener gives for up to @wait_ms. */
static int do_connect(const char *text, const struct tcp_addr *tcp, int wait_ms,
		      struct conn *c)
{
	double deadline = now() + wait_ms / 1000.0;
	char what[300];

	for (;;) {
		int err = connect_once(text, tcp, c);

		if (!err)
			return 0;
		if ((err != -ECONNREFUSED && err != -ENOENT && err != -ECONNRESET) ||
		    now() >= deadline) {
			snprintf(what, sizeof(what), "connect to %s", text);
			return fail(what, tcp ? strerror(-err) : vsx_strerror(err));
		}
		usleep(50 * 1000);
	}
}

static int tcp_listen_accept(const char *text, const struct tcp_addr *tcp, struct conn *c)
{
	int one = 1, fd, cfd, err;

	fd = socket(tcp->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail("socket", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&tcp->ss, tcp->len) < 0 || listen(fd, 4) < 0) {
		err = errno;
		close(fd);
		return fail(text, strerror(err));
	}
	fprintf(stderr, "qperf[%s]: listening on %s\n", label, text);
	do
		cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	while (cfd < 0 && errno == EINTR);
	err = errno;
	close(fd);
	if (cfd < 0)
		return fail("accept", strerror(err));
	c->fd = cfd;
	return 0;
}

/* Listen on @text, accept one connection, stop listening. */
static int do_listen(const char *text, const struct tcp_addr *tcp, struct conn *c)
{
	vsx_sock *l;
	int err;

	if (tcp)
		return tcp_listen_accept(text, tcp, c);
	err = vsx_listen(text, &vsx_options, &l);
	if (err)
		return fail(text, vsx_strerror(err));
	fprintf(stderr, "qperf[%s]: listening on %s\n", label, text);
	err = vsx_accept(l, &c->vs);
	if (err)
		fail("accept", vsx_strerror(err));
	vsx_close(l);   /* a hybrid listener's PATH_PORT goes with it */
	return err ? -1 : 0;
}

/* ---- Transfers ---------------------------------------------------------------- */

static int do_send(struct conn *c, uint64_t bytes, size_t size, double *secs)
{
	uint64_t off = 0;
	double t0 = now();
	char ch;
	ssize_t r;
	int err;

	while (off < bytes) {
		size_t n = bytes - off < size ? (size_t)(bytes - off) : size;

		err = conn_send_all(c, pattern + off % PERIOD, n);
		if (err)
			return fail("send", conn_strerror(c, err));
		off += n;
	}
	err = conn_shutdown_wr(c);
	if (err)
		return fail("shutdown", conn_strerror(c, err));
	r = conn_recv(c, &ch, 1);
	if (r < 0)
		return fail("waiting for the receiver's EOF", conn_strerror(c, (int)r));
	if (r > 0)
		return fail("waiting for the receiver's EOF", "the receiver sent data");
	*secs = now() - t0;
	return 0;
}

static int do_recv(struct conn *c, uint64_t bytes, size_t size, double *secs)
{
	static uint8_t buf[SIZE_MAX_IO];
	uint64_t off = 0;
	double t0 = 0, t1 = 0;

	for (;;) {
		ssize_t n = conn_recv(c, buf, size);

		if (n < 0)
			return fail("recv", conn_strerror(c, (int)n));
		if (n == 0)
			break;
		if (off == 0)
			t0 = now();
		if (off + (uint64_t)n > bytes) {
			fprintf(stderr, "qperf[%s]: FAIL: more than %" PRIu64 " bytes\n",
				label, bytes);
			return -1;
		}
		if (memcmp(buf, pattern + off % PERIOD, (size_t)n)) {
			for (ssize_t i = 0; i < n; i++) {
				uint8_t want = pattern[(off + (uint64_t)i) % PERIOD];

				if (buf[i] == want)
					continue;
				fprintf(stderr, "qperf[%s]: FAIL: byte %" PRIu64 " of the "
					"stream is 0x%02x, want 0x%02x\n", label,
					off + (uint64_t)i, buf[i], want);
				break;
			}
			return -1;
		}
		off += (uint64_t)n;
		if (off == bytes)
			t1 = now();
	}
	if (off != bytes) {
		fprintf(stderr, "qperf[%s]: FAIL: EOF after %" PRIu64 " of %" PRIu64
			" bytes\n", label, off, bytes);
		return -1;
	}
	*secs = t1 - t0;
	return 0;
}

static int freeport(void)
{
	struct sockaddr_in in = { .sin_family = AF_INET };
	socklen_t len = sizeof(in);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return 1;
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&in, sizeof(in)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&in, &len) < 0) {
		close(fd);
		return 1;
	}
	printf("%u\n", ntohs(in.sin_port));
	close(fd);
	return 0;
}

/* ---- Command line --------------------------------------------------------------- */

static int usage(void)
{
	fprintf(stderr, "usage: qperf [-l LABEL] [-s SIZE] [-w MS] [-t SECONDS] "
		"listen|connect ADDR send|recv BYTES\n       qperf freeport\n"
		"ADDR: vsock:CID:PORT (lab guest only), unix:PATH:PORT or tcp:HOST:PORT\n");
	return 2;
}

/* "qperf: WHAT 'ARG': WANT", then the usage. Returns 2. */
static int bad_arg(const char *what, const char *arg, const char *want)
{
	fprintf(stderr, "qperf: %s '%s': %s\n", what, arg, want);
	return usage();
}

/* A byte count: decimal with an optional K, M or G (binary) suffix, as
 * vsxd reads sizes (daemon/settings.c). */
static int parse_bytes(const char *s, uint64_t *out)
{
	return vsx__parse_size(s, strlen(s), UINT64_MAX, out);
}

int main(int argc, char **argv)
{
	uint64_t bytes, size = 65536;
	unsigned long wait_ms = 0, timeout_s = 0;
	int opt, err, sending, listening, is_tcp;
	struct conn c = { .vs = NULL, .fd = -1 };
	struct tcp_addr tcp;
	const char *addr;
	double secs = 0;

	if (argc == 2 && !strcmp(argv[1], "freeport"))
		return freeport();
	while ((opt = getopt(argc, argv, "l:s:w:t:")) != -1) {
		switch (opt) {
		case 'l':
			label = optarg;
			break;
		case 's':
			if (parse_bytes(optarg, &size) || !size || size > SIZE_MAX_IO)
				return bad_arg("-s", optarg, "want 1 to 1M bytes (K, M suffixes)");
			break;
		case 'w':
			if (parse_uint(optarg, INT_MAX / 2, &wait_ms))
				return bad_arg("-w", optarg, "want milliseconds");
			break;
		case 't':
			if (parse_uint(optarg, UINT_MAX / 2, &timeout_s))
				return bad_arg("-t", optarg, "want seconds (0: no limit)");
			break;
		default:
			return usage();
		}
	}
	if (argc - optind != 4)
		return usage();
	if (!strcmp(argv[optind], "listen"))
		listening = 1;
	else if (!strcmp(argv[optind], "connect"))
		listening = 0;
	else
		return bad_arg("role", argv[optind], "want listen or connect");
	addr = argv[optind + 1];
	if (!strcmp(argv[optind + 2], "send"))
		sending = 1;
	else if (!strcmp(argv[optind + 2], "recv"))
		sending = 0;
	else
		return bad_arg("direction", argv[optind + 2], "want send or recv");
	if (parse_bytes(argv[optind + 3], &bytes))
		return bad_arg("BYTES", argv[optind + 3], "want a byte count (K, M, G suffixes)");
	err = check_addr(addr, &tcp, &is_tcp);
	if (err)
		return err == -EPERM ? 1 : 2;
	pattern_init();
	if (timeout_s)
		alarm((unsigned)timeout_s);

	if (listening)
		err = do_listen(addr, is_tcp ? &tcp : NULL, &c);
	else
		err = do_connect(addr, is_tcp ? &tcp : NULL, (int)wait_ms, &c);
	if (err)
		return 1;
	if (sending)
		err = do_send(&c, bytes, (size_t)size, &secs);
	else
		err = do_recv(&c, bytes, (size_t)size, &secs);
	conn_close(&c);
	if (err)
		return 1;
	printf("qperf-result label=%s role=%s bytes=%" PRIu64 " secs=%.6f mibs=%.2f\n",
	       label, sending ? "send" : "recv", bytes, secs,
	       secs > 0 ? (double)bytes / 1048576.0 / secs : 0.0);
	fflush(stdout);
	return 0;
}
