/*
 * host_peer: the host programs of engine_guest.test, on Unix sockets only
 * (it never opens AF_VSOCK).
 *
 *   host_peer echo PATH            listen on PATH (SOCK_STREAM), echo one
 *                                  connection until EOF
 *   host_peer echo-seq PATH        the same with SOCK_SEQPACKET, record by
 *                                  record; prints the record count
 *   host_peer hybrid UDS PORT N    connect to a VM's hybrid socket, send
 *                                  "CONNECT PORT" (retrying until the guest
 *                                  listens, up to 200 s), then N pattern bytes,
 *                                  shut down writing, check the echo
 *
 * Exit 0 when every byte came back as sent.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int addr(struct sockaddr_un *un, const char *path)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(un->sun_path))
		return -1;
	strcpy(un->sun_path, path);
	return 0;
}

static int serve(const char *path, int type)
{
	static char buf[1 << 20];
	struct sockaddr_un un;
	unsigned long long total = 0, records = 0;
	int l, c;
	ssize_t n;

	if (addr(&un, path) < 0)
		return 2;
	unlink(path);
	l = socket(AF_UNIX, type, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&un, sizeof(un)) < 0 || listen(l, 4) < 0) {
		perror("host_peer: listen");
		return 2;
	}
	c = accept(l, NULL, NULL);
	if (c < 0) {
		perror("host_peer: accept");
		return 2;
	}
	while ((n = recv(c, buf, sizeof(buf), 0)) > 0) {
		total += (unsigned long long)n;
		records++;
		if (send(c, buf, (size_t)n, MSG_NOSIGNAL) != n) {
			perror("host_peer: send");
			return 1;
		}
	}
	printf("host_peer: %s: echoed %llu bytes in %llu %s\n", path, total, records,
	       type == SOCK_SEQPACKET ? "records" : "reads");
	close(c);
	close(l);
	unlink(path);
	return n < 0;
}

struct wr {
	int fd;
	const unsigned char *p;
	size_t n;
	int rc;
};

static void *writer(void *arg)
{
	struct wr *w = arg;
	size_t off = 0;
	ssize_t k;

	while (off < w->n) {
		k = send(w->fd, w->p + off, w->n - off, MSG_NOSIGNAL);
		if (k < 0) {
			w->rc = -errno;
			return NULL;
		}
		off += (size_t)k;
	}
	shutdown(w->fd, SHUT_WR);
	return NULL;
}

static int hybrid(const char *uds, const char *port, size_t n)
{
	unsigned char *out = malloc(n), *in = malloc(n + 1);
	time_t deadline = time(NULL) + 200;
	struct sockaddr_un un;
	char line[64], want[16];
	struct wr w = { 0 };
	pthread_t t;
	size_t got = 0, i;
	ssize_t k;
	int fd = -1, rc;

	if (!out || !in || addr(&un, uds) < 0)
		return 2;
	for (i = 0; i < n; i++)
		out[i] = (unsigned char)(i * 131 + (i >> 12));
	snprintf(want, sizeof(want), "OK ");
	while (time(NULL) < deadline) {
		size_t m = 0;

		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&un, sizeof(un)) == 0) {
			snprintf(line, sizeof(line), "CONNECT %s\n", port);
			if (send(fd, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line)) {
				while (m + 1 < sizeof(line) && recv(fd, line + m, 1, 0) == 1)
					if (line[m++] == '\n')
						break;
			}
		}
		line[m] = '\0';
		if (!strncmp(line, want, 3))
			break;
		close(fd);
		fd = -1;
		sleep(1);
	}
	if (fd < 0) {
		fprintf(stderr, "host_peer: no guest listening on port %s\n", port);
		free(out);
		free(in);
		return 1;
	}
	printf("host_peer: %s CONNECT %s: %s", uds, port, line);
	w.fd = fd;
	w.p = out;
	w.n = n;
	pthread_create(&t, NULL, writer, &w);
	while ((k = recv(fd, in + got, n + 1 - got, 0)) > 0)
		got += (size_t)k;
	pthread_join(t, NULL);
	close(fd);
	rc = w.rc || got != n || memcmp(in, out, n);
	if (rc)
		printf("host_peer: echo: %zu of %zu bytes back, %s\n", got, n,
		       got == n ? "different" : "short");
	else
		printf("host_peer: echo: all %zu bytes back\n", n);
	free(out);
	free(in);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "echo"))
		return serve(argv[2], SOCK_STREAM);
	if (argc == 3 && !strcmp(argv[1], "echo-seq"))
		return serve(argv[2], SOCK_SEQPACKET);
	if (argc == 5 && !strcmp(argv[1], "hybrid"))
		return hybrid(argv[2], argv[3], strtoul(argv[4], NULL, 0));
	fprintf(stderr, "usage: host_peer echo PATH | echo-seq PATH | hybrid UDS PORT N\n");
	return 2;
}
