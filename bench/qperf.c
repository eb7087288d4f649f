/*
 * qperf: one end of a checked bulk transfer, for bench/qemu.sh (vsock
 * through vsxd against TCP over virtio-net, in a real QEMU guest).
 *
 *   qperf [-l LABEL] [-s SIZE] [-w MS] [-t SECONDS] listen|connect ADDR send|recv BYTES
 *   qperf freeport
 *
 * ADDR is one of
 *   vsock:CID:PORT  kernel AF_VSOCK (CID a number, host or any); only where
 *                   VSX_LAB_GUEST=1, which the lab guest's /init sets: this
 *                   program never opens AF_VSOCK on the build machine
 *   tcp:A.B.C.D:PORT  IPv4 TCP
 *   unix:PATH       a Unix stream socket (the hybrid convention's host
 *                   listener: vsxd's uds-path followed by _PORT)
 *   hybrid:PATH:PORT  connect only: PATH is vsxd's uds-path; "CONNECT PORT\n"
 *                   is written and "OK n\n" read before any data
 *
 * One connection is made (listen: the first one accepted), then BYTES
 * bytes go one way: the sender write()s SIZE bytes at a time (default
 * 65536), shuts down its sending side and waits for the receiver's EOF; the
 * receiver read()s up to SIZE bytes at a time, checks every byte against a
 * pseudo-random pattern of period 65521 (a prime, so a lost, repeated or
 * misplaced block shows), checks that EOF follows the last byte, then
 * closes. Both print one line on stdout,
 *   qperf-result label=LABEL role=recv bytes=N secs=S mibs=M
 * where the receiver's time runs from its first byte to its last and the
 * sender's from connected to the receiver's EOF. -w MS retries a refused
 * connect (no listener yet) for up to MS milliseconds; -t SECONDS ends the
 * program (SIGALRM) when it has not finished by then.
 *
 * freeport prints a TCP port on 127.0.0.1 that was free a moment ago.
 *
 * Exit status: 0 when every byte arrived and matched, 1 on a failure
 * (described on stderr), 2 on bad usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/vm_sockets.h>
#endif

#define PERIOD 65521u
#define SIZE_MAX_IO (1u << 20)

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

static int fail(const char *what, int err)
{
	fprintf(stderr, "qperf[%s]: FAIL: %s: %s\n", label, what, strerror(err));
	return -err;
}

/* ---- Addresses ------------------------------------------------------------ */

struct qaddr {
	int family;                     /* AF_UNIX, AF_INET, AF_VSOCK */
	int hybrid;                     /* AF_UNIX with the CONNECT handshake */
	uint32_t port;                  /* hybrid port */
	struct sockaddr_storage ss;
	socklen_t len;
};

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int parse_addr(const char *text, struct qaddr *a)
{
	const char *colon;
	char buf[128];

	memset(a, 0, sizeof(*a));
	if (!strncmp(text, "unix:", 5) || !strncmp(text, "hybrid:", 7)) {
		struct sockaddr_un *un = (struct sockaddr_un *)&a->ss;
		const char *path = strchr(text, ':') + 1;
		size_t n;

		a->family = AF_UNIX;
		n = strlen(path);
		if (text[0] == 'h') {
			colon = strrchr(path, ':');
			if (!colon || parse_u32(colon + 1, &a->port))
				return -EINVAL;
			a->hybrid = 1;
			n = (size_t)(colon - path);
		}
		if (n == 0 || n >= sizeof(un->sun_path))
			return -EINVAL;
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, path, n);
		a->len = sizeof(*un);
		return 0;
	}
	if (!strncmp(text, "tcp:", 4)) {
		struct sockaddr_in *in = (struct sockaddr_in *)&a->ss;
		uint32_t port;

		colon = strrchr(text + 4, ':');
		if (!colon || (size_t)(colon - text - 4) >= sizeof(buf) ||
		    parse_u32(colon + 1, &port) || port > 65535)
			return -EINVAL;
		memcpy(buf, text + 4, (size_t)(colon - text - 4));
		buf[colon - text - 4] = '\0';
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, buf, &in->sin_addr) != 1)
			return -EINVAL;
		a->family = AF_INET;
		a->len = sizeof(*in);
		return 0;
	}
#ifdef AF_VSOCK
	if (!strncmp(text, "vsock:", 6)) {
		struct sockaddr_vm *vm = (struct sockaddr_vm *)&a->ss;
		const char *env = getenv("VSX_LAB_GUEST");
		uint32_t cid, port;

		/* The build machine's vsock belongs to its infrastructure. */
		if (!env || strcmp(env, "1")) {
			fprintf(stderr, "qperf: vsock: addresses only inside the lab guest "
				"(VSX_LAB_GUEST=1)\n");
			return -EPERM;
		}
		colon = strrchr(text + 6, ':');
		if (!colon || (size_t)(colon - text - 6) >= sizeof(buf) ||
		    parse_u32(colon + 1, &port))
			return -EINVAL;
		memcpy(buf, text + 6, (size_t)(colon - text - 6));
		buf[colon - text - 6] = '\0';
		if (!strcmp(buf, "host"))
			cid = VMADDR_CID_HOST;
		else if (!strcmp(buf, "any"))
			cid = VMADDR_CID_ANY;
		else if (parse_u32(buf, &cid))
			return -EINVAL;
		vm->svm_family = AF_VSOCK;
		vm->svm_cid = cid;
		vm->svm_port = port;
		a->family = AF_VSOCK;
		a->len = sizeof(*vm);
		return 0;
	}
#endif
	return -EINVAL;
}

/* ---- Connections ------------------------------------------------------------ */

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The hybrid handshake; the reply is read a byte at a time (nothing follows
 * it before we send). 0, or -ECONNREFUSED when vsxd closed (no listener). */
static int hybrid_handshake(int fd, uint32_t port)
{
	char line[32];
	size_t n = 0;
	int err;

	snprintf(line, sizeof(line), "CONNECT %" PRIu32 "\n", port);
	err = write_all(fd, line, strlen(line));
	if (err)
		return err == -EPIPE ? -ECONNREFUSED : err;
	for (;;) {
		ssize_t r = read(fd, line + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == ECONNRESET ? -ECONNREFUSED : -errno;
		if (r == 0)
			return -ECONNREFUSED;
		if (line[n] == '\n')
			break;
		if (++n == sizeof(line) - 1)
			return -EPROTO;
	}
	line[n] = '\0';
	if (strncmp(line, "OK ", 3)) {
		fprintf(stderr, "qperf[%s]: hybrid reply '%s'\n", label, line);
		return -EPROTO;
	}
	return 0;
}

static int do_connect(const struct qaddr *a, int wait_ms, int *out)
{
	double deadline = now() + wait_ms / 1000.0;

	for (;;) {
		int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int err = 0;

		if (fd < 0)
			return fail("socket", errno);
		if (connect(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
			err = -errno;
		else if (a->hybrid)
			err = hybrid_handshake(fd, a->port);
		if (!err) {
			*out = fd;
			return 0;
		}
		close(fd);
		if ((err != -ECONNREFUSED && err != -ENOENT && err != -ECONNRESET) ||
		    now() >= deadline)
			return fail("connect", -err);
		usleep(50 * 1000);
	}
}

static int do_listen(const struct qaddr *a, const char *text, int *out)
{
	int one = 1, fd, cfd;

	fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail("socket", errno);
	if (a->family == AF_INET)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (a->family == AF_UNIX)
		unlink(((const struct sockaddr_un *)&a->ss)->sun_path);
	if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, 4) < 0) {
		int e = errno;

		close(fd);
		return fail("bind/listen", e);
	}
	fprintf(stderr, "qperf[%s]: listening on %s\n", label, text);
	do {
		cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	} while (cfd < 0 && errno == EINTR);
	if (cfd < 0) {
		int e = errno;

		close(fd);
		return fail("accept", e);
	}
	if (a->family == AF_UNIX)
		unlink(((const struct sockaddr_un *)&a->ss)->sun_path);
	close(fd);
	*out = cfd;
	return 0;
}

/* ---- Transfers ---------------------------------------------------------------- */

static int do_send(int fd, uint64_t bytes, size_t size, double *secs)
{
	uint64_t off = 0;
	double t0 = now();
	char c;
	ssize_t r;
	int err;

	while (off < bytes) {
		size_t n = bytes - off < size ? (size_t)(bytes - off) : size;

		err = write_all(fd, pattern + off % PERIOD, n);
		if (err)
			return fail("send", -err);
		off += n;
	}
	if (shutdown(fd, SHUT_WR) < 0)
		return fail("shutdown", errno);
	do {
		r = read(fd, &c, 1);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return fail("waiting for the receiver's EOF", errno);
	if (r > 0) {
		fprintf(stderr, "qperf[%s]: FAIL: the receiver sent data\n", label);
		return -EPROTO;
	}
	*secs = now() - t0;
	return 0;
}

static int do_recv(int fd, uint64_t bytes, size_t size, double *secs)
{
	static uint8_t buf[SIZE_MAX_IO];
	uint64_t off = 0;
	double t0 = 0, t1 = 0;

	for (;;) {
		ssize_t n = read(fd, buf, size);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fail("recv", errno);
		if (n == 0)
			break;
		if (off == 0)
			t0 = now();
		if (off + (uint64_t)n > bytes) {
			fprintf(stderr, "qperf[%s]: FAIL: more than %" PRIu64 " bytes\n",
				label, bytes);
			return -EPROTO;
		}
		if (memcmp(buf, pattern + off % PERIOD, (size_t)n)) {
			for (ssize_t i = 0; i < n; i++) {
				if (buf[i] != pattern[(off + (uint64_t)i) % PERIOD]) {
					fprintf(stderr, "qperf[%s]: FAIL: byte %" PRIu64
						" of the stream is 0x%02x, want 0x%02x\n",
						label, off + (uint64_t)i, buf[i],
						pattern[(off + (uint64_t)i) % PERIOD]);
					break;
				}
			}
			return -EILSEQ;
		}
		off += (uint64_t)n;
		if (off == bytes)
			t1 = now();
	}
	if (off != bytes) {
		fprintf(stderr, "qperf[%s]: FAIL: EOF after %" PRIu64 " of %" PRIu64
			" bytes\n", label, off, bytes);
		return -EPROTO;
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

static int usage(void)
{
	fprintf(stderr, "usage: qperf [-l LABEL] [-s SIZE] [-w MS] [-t SECONDS] "
		"listen|connect ADDR send|recv BYTES\n       qperf freeport\n");
	return 2;
}

static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t bytes, size = 65536;
	int wait_ms = 0, opt, fd = -1, err, sending;
	unsigned timeout_s = 0;
	struct qaddr a;
	double secs = 0;

	if (argc == 2 && !strcmp(argv[1], "freeport"))
		return freeport();
	while ((opt = getopt(argc, argv, "l:s:w:t:")) != -1) {
		switch (opt) {
		case 'l': label = optarg; break;
		case 's':
			if (parse_bytes(optarg, &size) || !size || size > SIZE_MAX_IO)
				return usage();
			break;
		case 'w': wait_ms = atoi(optarg); break;
		case 't': timeout_s = (unsigned)atoi(optarg); break;
		default: return usage();
		}
	}
	if (argc - optind != 4 || parse_bytes(argv[optind + 3], &bytes))
		return usage();
	if (strcmp(argv[optind], "listen") && strcmp(argv[optind], "connect"))
		return usage();
	if (!strcmp(argv[optind + 2], "send"))
		sending = 1;
	else if (!strcmp(argv[optind + 2], "recv"))
		sending = 0;
	else
		return usage();
	err = parse_addr(argv[optind + 1], &a);
	if (err) {
		fprintf(stderr, "qperf: bad address '%s'\n", argv[optind + 1]);
		return err == -EPERM ? 1 : 2;
	}
	if (a.hybrid && argv[optind][0] == 'l')
		return usage();
	pattern_init();
	if (timeout_s)
		alarm(timeout_s);

	if (argv[optind][0] == 'l')
		err = do_listen(&a, argv[optind + 1], &fd);
	else
		err = do_connect(&a, wait_ms, &fd);
	if (err)
		return 1;
	if (sending)
		err = do_send(fd, bytes, (size_t)size, &secs);
	else
		err = do_recv(fd, bytes, (size_t)size, &secs);
	close(fd);
	if (err)
		return 1;
	printf("qperf-result label=%s role=%s bytes=%" PRIu64 " secs=%.6f mibs=%.2f\n",
	       label, sending ? "send" : "recv", bytes, secs,
	       secs > 0 ? (double)bytes / 1048576.0 / secs : 0.0);
	fflush(stdout);
	return 0;
}
