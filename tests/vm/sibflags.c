/*
 * sibflags: what one guest's socket calls set in vsock headers, as another
 * guest sees it: the same conversation, with the same checks, over the
 * guest kernel's own loopback (the reference) and between two sibling
 * guests of vsxd (tests/vm/siblings.test), on raw AF_VSOCK sockets so that
 * nothing stands between the program and the kernel's flags.
 *
 *   sibflags listen PORT BIG        the accepting side (ports PORT..PORT+2)
 *   sibflags connect CID PORT BIG   the connecting side (retries until the
 *                                   listener is up, up to 300 s)
 *   sibflags loop PORT BIG          both in this guest, over CID 1
 *
 * The conversation, each check made by the side that receives:
 *   seq     SEQPACKET on PORT: messages of 1, 100, 4096, 65537, 200000 and
 *           7 bytes, every other one sent with MSG_EOR: each must arrive
 *           whole and alone, its bytes checked, MSG_EOR set exactly when
 *           the sender set it, no MSG_TRUNC; the listener echoes each with
 *           the same flag. Then half-close: the connector's SHUT_WR is EOF
 *           (0) at the listener, which still sends one more MSG_EOR
 *           message, then shuts down: EOF at the connector.
 *   stream  STREAM on PORT+1: BIG bytes each way, checked, each direction
 *           ended by SHUT_WR and seen as EOF.
 *   rst     STREAM on PORT+2: the connector sends 100000 bytes and closes
 *           at once (SHUTDOWN, then the RST); the listener reads only 1 s
 *           later: every byte, then EOF (not ECONNRESET), then a send
 *           fails with EPIPE.
 *   refuse  a connect to PORT+3, where nobody listens: ECONNRESET.
 *
 * Output: "sibflags[ROLE]: ..." lines; exit 0 when every check passed,
 * 1 otherwise, 2 usage, 77 outside the lab guest.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/vm_sockets.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pattern.h"

static const size_t msg_sizes[] = { 1, 100, 4096, 65537, 200000, 7 };
#define N_MSGS (sizeof(msg_sizes) / sizeof(msg_sizes[0]))
#define MSG_MAX 200000
#define RST_BYTES 100000
#define TAIL_BYTES 3000

static const char *role = "?";
static int failures;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	printf("sibflags[%s]: ", role);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		failures++; \
		say("FAIL: " __VA_ARGS__); \
		return -1; \
	} \
} while (0)

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int write_all(int fd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* @n bytes of stream @seed, in pieces, from offset 0. */
static int send_stream(int fd, uint64_t seed, size_t n)
{
	static uint8_t b[1 << 16];
	size_t off, k;

	for (off = 0; off < n; off += k) {
		k = n - off < sizeof(b) ? n - off : sizeof(b);
		pattern_fill(seed, off, b, k);
		CHECK(write_all(fd, b, k) == 0, "send at byte %zu: %s", off, strerror(errno));
	}
	return 0;
}

/* Exactly @n bytes of stream @seed, every one checked, then EOF. */
static int recv_stream(int fd, uint64_t seed, size_t n, const char *what)
{
	static uint8_t b[1 << 16], scratch[1 << 16];
	size_t off = 0;
	uint64_t bad;
	ssize_t k;

	while (off < n) {
		k = recv(fd, b, n - off < sizeof(b) ? n - off : sizeof(b), 0);
		if (k < 0 && errno == EINTR)
			continue;
		CHECK(k > 0, "%s: %s after %zu of %zu bytes", what,
		      k ? strerror(errno) : "EOF", off, n);
		bad = pattern_mismatch(seed, off, b, (size_t)k, scratch);
		CHECK(bad == UINT64_MAX, "%s: byte %" PRIu64 " is wrong", what, bad);
		off += (size_t)k;
	}
	k = recv(fd, b, 1, 0);
	CHECK(k == 0, "%s: after %zu bytes, %s where EOF was expected", what, n,
	      k > 0 ? "more data" : strerror(errno));
	return 0;
}

static int send_msg(int fd, uint64_t seed, size_t n, bool eor)
{
	static uint8_t b[MSG_MAX];
	ssize_t k;

	pattern_fill(seed, 0, b, n);
	k = send(fd, b, n, MSG_NOSIGNAL | (eor ? MSG_EOR : 0));
	CHECK(k == (ssize_t)n, "send of a %zu-byte message%s: %s", n,
	      eor ? " with MSG_EOR" : "", k < 0 ? strerror(errno) : "short");
	return 0;
}

/* One message: whole, alone, its bytes and its MSG_EOR as sent. */
static int recv_msg(int fd, uint64_t seed, size_t n, bool eor)
{
	static uint8_t b[MSG_MAX + 4096], scratch[MSG_MAX + 4096];
	struct iovec iov = { b, sizeof(b) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	uint64_t bad;
	ssize_t k;

	do
		k = recvmsg(fd, &mh, 0);
	while (k < 0 && errno == EINTR);
	CHECK(k >= 0, "a %zu-byte message: %s", n, strerror(errno));
	CHECK((size_t)k == n, "a %zu-byte message arrived as %zd bytes", n, k);
	CHECK(!(mh.msg_flags & MSG_TRUNC), "a %zu-byte message: MSG_TRUNC", n);
	CHECK(!!(mh.msg_flags & MSG_EOR) == eor, "a %zu-byte message sent %s MSG_EOR "
	      "arrived %s it", n, eor ? "with" : "without", eor ? "without" : "with");
	bad = pattern_mismatch(seed, 0, b, n, scratch);
	CHECK(bad == UINT64_MAX, "a %zu-byte message: byte %" PRIu64 " is wrong", n, bad);
	return 0;
}

static int expect_eof(int fd, const char *what)
{
	char c;
	ssize_t k = recv(fd, &c, 1, 0);

	CHECK(k == 0, "%s: %s where EOF was expected", what,
	      k > 0 ? "data" : strerror(errno));
	return 0;
}

static int open_sock(int type)
{
	int fd = socket(AF_VSOCK, type | SOCK_CLOEXEC, 0);

	if (fd < 0)
		say("FAIL: socket: %s", strerror(errno));
	return fd;
}

static int listen_on(unsigned port, int type)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY,
				 .svm_port = port };
	int fd = open_sock(type);

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4) < 0) {
		say("FAIL: listen on %u: %s", port, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static int accept_on(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		say("FAIL: accept: %s", strerror(errno));
	return fd;
}

/* -errno, or the connected socket. With @retry, a refusal (the listener
 * not up yet) is tried again for up to 300 s. */
static int connect_to(unsigned cid, unsigned port, int type, bool retry)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = cid, .svm_port = port };
	int tries = retry ? 1500 : 1, fd = -1, err = 0;

	while (tries--) {
		fd = open_sock(type);
		if (fd < 0)
			return -EIO;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
		err = errno;
		close(fd);
		if (err != ECONNRESET && err != ECONNREFUSED)
			break;
		if (tries)
			sleep_ms(200);
	}
	return -err;
}

/* ---- The two sides ---- */

static int listener(unsigned port, size_t big)
{
	int l[3], fd, i, rc = 0;
	static uint8_t b[RST_BYTES];
	ssize_t k;

	role = "listen";
	l[0] = listen_on(port, SOCK_SEQPACKET);
	l[1] = listen_on(port + 1, SOCK_STREAM);
	l[2] = listen_on(port + 2, SOCK_STREAM);
	if (l[0] < 0 || l[1] < 0 || l[2] < 0)
		return 1;
	say("listening on %u..%u", port, port + 2);

	/* seq */
	fd = accept_on(l[0]);
	if (fd < 0)
		return 1;
	for (i = 0; i < (int)N_MSGS && rc == 0; i++) {
		rc = recv_msg(fd, 10 + i, msg_sizes[i], i % 2);
		if (rc == 0)
			rc = send_msg(fd, 20 + i, msg_sizes[i], i % 2);
	}
	if (rc == 0)
		rc = expect_eof(fd, "seq: after the connector's SHUT_WR");
	if (rc == 0)
		rc = send_msg(fd, 30, TAIL_BYTES, true);
	if (rc == 0 && shutdown(fd, SHUT_WR) < 0)
		rc = -1;
	if (rc == 0)
		say("seq: %zu messages each way, MSG_EOR and bounds as sent; half-close",
		    N_MSGS);
	close(fd);

	/* stream */
	fd = accept_on(l[1]);
	if (fd < 0)
		return 1;
	if (rc == 0)
		rc = recv_stream(fd, 40, big, "stream: in");
	if (rc == 0)
		rc = send_stream(fd, 41, big);
	if (rc == 0 && shutdown(fd, SHUT_WR) < 0)
		rc = -1;
	if (rc == 0)
		say("stream: %zu bytes in, checked, then EOF", big);
	/* the connector's EOF check ends the conversation */
	k = recv(fd, b, 1, 0);
	close(fd);

	/* rst */
	fd = accept_on(l[2]);
	if (fd < 0)
		return 1;
	sleep_ms(1000);
	if (rc == 0)
		rc = recv_stream(fd, 50, RST_BYTES, "rst: the data before the close");
	if (rc == 0) {
		k = send(fd, b, 1, MSG_NOSIGNAL);
		if (k >= 0 || errno != EPIPE) {
			failures++;
			say("FAIL: rst: a send after the peer closed: %s, expected EPIPE",
			    k >= 0 ? "accepted" : strerror(errno));
			rc = -1;
		}
	}
	if (rc == 0)
		say("rst: %u bytes then EOF, then EPIPE", RST_BYTES);
	close(fd);
	for (i = 0; i < 3; i++)
		close(l[i]);
	return failures ? 1 : 0;
}

static int connector(unsigned cid, unsigned port, size_t big)
{
	int fd, i, rc = 0;

	role = "connect";
	/* seq */
	fd = connect_to(cid, port, SOCK_SEQPACKET, true);
	if (fd < 0) {
		say("FAIL: seq: connect to %u:%u: %s", cid, port, strerror(-fd));
		return 1;
	}
	for (i = 0; i < (int)N_MSGS && rc == 0; i++) {
		rc = send_msg(fd, 10 + i, msg_sizes[i], i % 2);
		if (rc == 0)
			rc = recv_msg(fd, 20 + i, msg_sizes[i], i % 2);
	}
	if (rc == 0 && shutdown(fd, SHUT_WR) < 0)
		rc = -1;
	if (rc == 0)
		rc = recv_msg(fd, 30, TAIL_BYTES, true);
	if (rc == 0)
		rc = expect_eof(fd, "seq: after the listener's SHUT_WR");
	if (rc == 0)
		say("seq: %zu messages each way, MSG_EOR and bounds as sent; half-close",
		    N_MSGS);
	close(fd);
	if (rc)
		return 1;

	/* stream */
	fd = connect_to(cid, port + 1, SOCK_STREAM, false);
	if (fd < 0) {
		say("FAIL: stream: connect: %s", strerror(-fd));
		return 1;
	}
	rc = send_stream(fd, 40, big);
	if (rc == 0 && shutdown(fd, SHUT_WR) < 0)
		rc = -1;
	if (rc == 0)
		rc = recv_stream(fd, 41, big, "stream: back");
	if (rc == 0)
		say("stream: %zu bytes back, checked, then EOF", big);
	close(fd);
	if (rc)
		return 1;

	/* rst: send, close at once */
	fd = connect_to(cid, port + 2, SOCK_STREAM, false);
	if (fd < 0) {
		say("FAIL: rst: connect: %s", strerror(-fd));
		return 1;
	}
	rc = send_stream(fd, 50, RST_BYTES);
	close(fd);
	if (rc)
		return 1;

	/* refuse */
	fd = connect_to(cid, port + 3, SOCK_STREAM, false);
	if (fd >= 0) {
		close(fd);
		failures++;
		say("FAIL: refuse: a connect to %u, where nobody listens, succeeded",
		    port + 3);
	} else if (fd != -ECONNRESET) {
		failures++;
		say("FAIL: refuse: %s, expected ECONNRESET", strerror(-fd));
	} else {
		say("refuse: ECONNRESET");
	}
	return failures ? 1 : 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: sibflags listen PORT BIG | connect CID PORT BIG | "
		"loop PORT BIG\n");
	return 2;
}

static size_t size_arg(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end == 'M')
		v <<= 20;
	else if (*end == 'K')
		v <<= 10;
	return (size_t)v;
}

int main(int argc, char **argv)
{
	int st, rc;
	pid_t pid;

	if (argc < 4)
		return usage();
	if (!getenv("VSX_LAB_GUEST")) {
		fprintf(stderr, "sibflags: opens AF_VSOCK sockets; it runs only inside "
			"the lab guest (its /init sets VSX_LAB_GUEST)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "listen"))
		return listener((unsigned)atoi(argv[2]), size_arg(argv[3]));
	if (!strcmp(argv[1], "connect") && argc >= 5)
		return connector((unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]),
				 size_arg(argv[4]));
	if (strcmp(argv[1], "loop"))
		return usage();
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0)
		_exit(listener((unsigned)atoi(argv[2]), size_arg(argv[3])));
	rc = connector(VMADDR_CID_LOCAL, (unsigned)atoi(argv[2]), size_arg(argv[3]));
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		rc = 1;
	return rc;
}
