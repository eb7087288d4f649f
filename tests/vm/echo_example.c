/*
 * echo_example: a small libvsx program, built against an installed libvsx
 * with `pkg-config --cflags --libs libvsx` (tests/vm/pkgconfig.test) and used
 * by scripts/demo. It uses nothing but <vsx/vsx.h> and libc.
 *
 *   echo_example [PORT]          server and client in one run, over vsock:local
 *   echo_example server ADDR     echo one connection on ADDR (vsock:any:PORT)
 *   echo_example client ADDR [CONNECT_TIMEOUT_MS]
 *                                send messages to ADDR, check every echoed byte;
 *                                the connect waits CONNECT_TIMEOUT_MS (default:
 *                                libvsx's, VSX_DEFAULT_CONNECT_TIMEOUT_MS)
 *
 * Prints a transcript; exits 0 only when every echo matched.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vsx/vsx.h>

#define CHUNK 65536

static int fail(const char *who, const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", who, what, vsx_strerror(err));
	return 1;
}

/* Echo one connection on @l until the peer shuts down; @l stays open. */
static int serve_one(vsx_sock *l)
{
	struct vsx_info in;
	unsigned long long total = 0;
	static char buf[CHUNK];
	vsx_sock *s;
	ssize_t n, w;
	int r;

	r = vsx_accept(l, &s);
	if (r < 0)
		return fail("server", "accept", r);
	vsx_info(s, &in);
	printf("server: accepted %s on %s (transport %s)\n", in.peer, in.local, in.transport);
	fflush(stdout);
	while ((n = vsx_recv(s, buf, sizeof(buf))) > 0) {
		w = vsx_send(s, buf, (size_t)n);
		if (w != n) {
			vsx_close(s);
			return fail("server", "send", w < 0 ? (int)w : -EIO);
		}
		total += (unsigned long long)n;
	}
	if (n < 0) {
		vsx_close(s);
		return fail("server", "recv", (int)n);
	}
	r = vsx_close(s);
	printf("server: peer finished; echoed %llu bytes; close: %s\n", total,
	       r ? vsx_strerror(r) : "ok");
	fflush(stdout);
	return r ? 1 : 0;
}

static int recv_all(vsx_sock *s, char *buf, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = vsx_recv(s, buf + got, len - got);
		if (n <= 0)
			return n ? (int)n : -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

/* Send @len bytes in chunks, reading each echo back; 0 when all matched. */
static int round_trip(vsx_sock *s, const char *data, size_t len)
{
	static char back[CHUNK];
	size_t off, n;
	ssize_t w;
	int r;

	for (off = 0; off < len; off += n) {
		n = len - off < CHUNK ? len - off : CHUNK;
		w = vsx_send(s, data + off, n);
		if (w != (ssize_t)n)
			return fail("client", "send", w < 0 ? (int)w : -EIO);
		r = recv_all(s, back, n);
		if (r < 0)
			return fail("client", "recv", r);
		if (memcmp(back, data + off, n) != 0) {
			fprintf(stderr, "client: echo differs within bytes %zu..%zu\n", off,
				off + n - 1);
			return 1;
		}
	}
	return 0;
}

static int client(const char *addr, int timeout_ms)
{
	static const char hello[] = "hello over vsock, from libvsx";
	struct vsx_opts o = { .connect_timeout_ms = timeout_ms };
	struct vsx_info in;
	size_t big = 1 << 20, i;
	char *data;
	vsx_sock *s;
	int r;

	r = vsx_connect(addr, &o, &s);
	if (r < 0)
		return fail("client", addr, r);
	vsx_info(s, &in);
	printf("client: connected to %s from %s (transport %s)\n", in.peer, in.local,
	       in.transport);
	if (round_trip(s, hello, sizeof(hello) - 1))
		goto err;
	printf("client: sent \"%s\" (%zu bytes); the echo matches\n", hello, sizeof(hello) - 1);
	data = malloc(big);
	if (!data)
		goto err;
	for (i = 0; i < big; i++)
		data[i] = (char)(i * 2654435761u >> 13);
	r = round_trip(s, data, big);
	free(data);
	if (r)
		goto err;
	printf("client: sent %zu bytes in %zu KiB pieces; every echoed byte matches\n", big,
	       (size_t)CHUNK / 1024);
	vsx_info(s, &in);
	printf("client: %llu bytes sent, %llu received\n", (unsigned long long)in.bytes_sent,
	       (unsigned long long)in.bytes_received);
	r = vsx_close(s);
	printf("client: close: %s\n", r ? vsx_strerror(r) : "ok");
	return r ? 1 : 0;
err:
	vsx_close(s);
	return 1;
}

static int listen_on(const char *addr, vsx_sock **l)
{
	int r = vsx_listen(addr, NULL, l);

	if (r < 0)
		return fail("server", addr, r);
	printf("server: listening on %s\n", addr);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	char laddr[64], caddr[64];
	int status, rc_server, rc_client;
	vsx_sock *l;
	pid_t pid;

	if (argc == 3 && strcmp(argv[1], "server") == 0) {
		if (listen_on(argv[2], &l))
			return 1;
		rc_server = serve_one(l);
		vsx_close(l);
		return rc_server;
	}
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "client") == 0)
		return client(argv[2], argc == 4 ? atoi(argv[3]) : 0);
	if (argc > 2 || (argc == 2 && !strtoul(argv[1], NULL, 10))) {
		fprintf(stderr, "usage: echo_example [PORT] | server ADDR | "
			"client ADDR [CONNECT_TIMEOUT_MS]\n");
		return 2;
	}
	printf("echo_example: libvsx %s\n", vsx_version());
	snprintf(laddr, sizeof(laddr), "vsock:any:%s", argc == 2 ? argv[1] : "5000");
	snprintf(caddr, sizeof(caddr), "vsock:local:%s", argc == 2 ? argv[1] : "5000");
	if (listen_on(laddr, &l))
		return 1;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return fail("echo_example", "fork", -errno);
	if (pid == 0) {
		vsx_close(l);
		rc_client = client(caddr, 0);
		fflush(stdout);
		_exit(rc_client);
	}
	rc_server = serve_one(l);
	vsx_close(l);
	if (waitpid(pid, &status, 0) < 0)
		return fail("echo_example", "waitpid", -errno);
	rc_client = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	printf("echo_example: %s\n", rc_server || rc_client ? "FAILED" : "all echoes matched");
	return rc_server || rc_client;
}
