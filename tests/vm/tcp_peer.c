/*
 * tcp_peer: the host end of a checked conversation over TCP, speaking
 * vsx_peer's protocol (its 16-byte hello and its byte pattern), so that a
 * vsx_peer in the lab guest can be the other end through a vsxd forward
 * (tests/vm/forward-guest.test). Plain sockets only; no vsock.
 *
 *   tcp_peer connect IPV4 PORT SIZE   hello, send SIZE, shut, receive
 *                                     SIZE (checked), then EOF
 *   tcp_peer listen IPV4 PORT SIZE    accept one; hello, receive SIZE
 *                                     (checked) and EOF, send SIZE, close
 *   tcp_peer vlisten ADDR KEYFILE SIZE  the same on a libvsx listener (in
 *                                     the lab guest: vsock:any:PORT) that
 *                                     requires the pre-shared key in
 *                                     KEYFILE (vsx_auth(7)); the peer must
 *                                     authenticate ("-": no key)
 *
 * SIZE: bytes, or with K, M, G. Connect retries refused or reset attempts
 * that moved nothing for up to 60 s (the guest may not listen yet). Output:
 * one "tcp_peer: ok ..." or "tcp_peer: FAIL ..." line; exit 0 or 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "pattern.h"
#include "util.h"

#define CHUNK (256 * 1024)
#define HELLO_LEN 16

static int die(const char *what)
{
	printf("tcp_peer: FAIL %s\n", what);
	return 1;
}

static vsx_sock *vs;    /* vlisten: the accepted socket (fd unused) */

static ssize_t io_send(int fd, const void *p, size_t n)
{
	if (vs)
		return vsx_send(vs, p, n);
	return send(fd, p, n, MSG_NOSIGNAL);
}

static ssize_t io_recv(int fd, void *p, size_t n)
{
	ssize_t r;

	if (vs) {
		r = vsx_recv(vs, p, n);
		if (r < 0) {
			errno = (int)-r;
			return -1;
		}
		return r;
	}
	return recv(fd, p, n, 0);
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = io_send(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int send_pattern(int fd, uint64_t seed, uint64_t size, uint8_t *buf)
{
	uint64_t off;
	size_t k;

	for (off = 0; off < size; off += k) {
		k = size - off < CHUNK ? (size_t)(size - off) : CHUNK;
		pattern_fill(seed, off, buf, k);
		if (send_all(fd, buf, k) < 0)
			return -1;
	}
	return 0;
}

/* Receive exactly @size pattern bytes, then EOF. 0, or -1 with @why. */
static int recv_pattern(int fd, uint64_t seed, uint64_t size, uint8_t *buf,
			char *why, size_t wl)
{
	static uint8_t scratch[CHUNK]; /* static: nothing to free (LSan) */
	uint64_t off = 0, bad;
	ssize_t r;
	size_t n;

	for (;;) {
		r = io_recv(fd, buf, CHUNK);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(why, wl, "recv after %llu bytes: %s",
				 (unsigned long long)off, strerror(errno));
			return -1;
		}
		if (r == 0)
			break;
		/* the bytes up to @size must be the pattern; any beyond are too many */
		n = off >= size ? 0 : size - off < (uint64_t)r ? (size_t)(size - off) : (size_t)r;
		bad = pattern_mismatch(seed, off, buf, n, scratch);
		if (bad == UINT64_MAX && n < (size_t)r)
			bad = off + n;
		if (bad != UINT64_MAX) {
			snprintf(why, wl, "byte %llu is %s", (unsigned long long)bad,
				 bad >= size ? "too many" : "wrong");
			return -1;
		}
		off += (uint64_t)r;
	}
	if (off != size) {
		snprintf(why, wl, "EOF after %llu of %llu bytes", (unsigned long long)off,
			 (unsigned long long)size);
		return -1;
	}
	return 0;
}

static uint64_t size_arg(const char *s)
{
	uint64_t v;

	if (vsx__parse_size(s, strlen(s), UINT64_MAX, &v) < 0) {
		fprintf(stderr, "tcp_peer: '%s' is not a size\n", s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	static uint8_t buf[CHUNK];      /* static: nothing to free (LSan) */
	uint8_t hello[HELLO_LEN];
	uint64_t size, seed = 424242, rseed;
	char why[256];
	time_t end = time(NULL) + 60;
	int fd, lfd, one = 1, i;
	ssize_t r;

	if (argc == 5 && !strcmp(argv[1], "vlisten")) {
		struct vsx_opts o = { .auth_key_file = strcmp(argv[3], "-") ? argv[3] : NULL };
		struct vsx_info info;
		vsx_sock *l;
		int rc;

		size = size_arg(argv[4]);
		alarm(900);
		rc = vsx_listen(argv[2], &o, &l);
		if (rc < 0)
			return die(vsx_strerror(rc));
		printf("tcp_peer: listening\n");
		fflush(stdout);
		rc = vsx_accept(l, &vs);
		vsx_close(l);
		if (rc < 0)
			return die(vsx_strerror(rc));
		fd = -1;
		vsx_info(vs, &info);
		printf("tcp_peer: accepted %s%s\n", info.peer,
		       info.flags & VSX_INFO_AUTH ? " (authenticated)" : "");
		goto serve;
	}
	if (argc != 5 || (strcmp(argv[1], "connect") && strcmp(argv[1], "listen")) ||
	    inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: tcp_peer connect|listen IPV4 PORT SIZE\n"
			"       tcp_peer vlisten ADDR KEYFILE SIZE\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[3]));
	size = size_arg(argv[4]);
	alarm(900);

	if (!strcmp(argv[1], "listen")) {
		lfd = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(lfd, 4) < 0)
			return die("listen");
		printf("tcp_peer: listening\n");
		fflush(stdout);
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			return die("accept");
serve:
		for (i = 0; i < HELLO_LEN; i += (int)r) {
			r = io_recv(fd, hello + i, (size_t)(HELLO_LEN - i));
			if (r <= 0)
				return die("no hello");
		}
		if (memcmp(hello, "VSXP", 4))
			return die("bad hello");
		for (rseed = 0, i = 0; i < 8; i++)
			rseed |= (uint64_t)hello[8 + i] << (8 * i);
		if (recv_pattern(fd, rseed, size, buf, why, sizeof(why)) < 0)
			return die(why);
		if (send_pattern(fd, rseed ^ 0x5a5a5a5a5a5a5a5aull, size, buf) < 0)
			return die("send");
		if (vs)
			vsx_close(vs);
		else
			close(fd);
		printf("tcp_peer: ok: received and sent %llu bytes\n",
		       (unsigned long long)size);
		return 0;
	}

	memcpy(hello, "VSXP", 4);
	memset(hello + 4, 0, 4);
	for (i = 0; i < 8; i++)
		hello[8 + i] = (uint8_t)(seed >> (8 * i));
	for (;;) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			return die("socket");
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
		    send_all(fd, hello, HELLO_LEN) == 0) {
			/* the forward connects the guest now: a refusal closes us */
			struct timeval tv = { 2, 0 };
			char c;

			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			r = recv(fd, &c, 1, MSG_PEEK);
			tv.tv_sec = 0;
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;  /* accepted, silent: the guest waits for our bytes */
		}
		close(fd);
		if (time(NULL) >= end)
			return die("the guest never accepted");
		usleep(200000);
	}
	if (send_pattern(fd, seed, size, buf) < 0)
		return die("send");
	shutdown(fd, SHUT_WR);
	if (recv_pattern(fd, seed ^ 0x5a5a5a5a5a5a5a5aull, size, buf, why, sizeof(why)) < 0)
		return die(why);
	close(fd);
	printf("tcp_peer: ok: sent and received %llu bytes\n", (unsigned long long)size);
	return 0;
}
