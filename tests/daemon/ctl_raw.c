/*
 * ctl_raw: a raw client of vsxd's control socket, for control.test. It
 * sends its standard input as is (any bytes: junk, oversized, many
 * requests in a row), then prints every byte vsxd answers on standard
 * output, and a summary line on standard error:
 *
 *     ctl_raw: replies=N closed=0|1
 *
 * (replies: blocks ended by an empty line; closed: vsxd closed the
 * connection). It stops once -n N replies arrived, or when vsxd closes, or
 * after -t SECONDS (default 30; exit 3).
 *
 *   ctl_raw [-n N] [-s] [-t SECONDS] [-w MS] [-r CMD [-a KEY=VALUE]...] SOCKET
 *     -s   shut down the sending side after the input (EOF to vsxd)
 *     -w   read nothing for the first MS milliseconds (a slow reader)
 *     -r   send one well-formed request instead of standard input: command
 *          CMD with the -a arguments, made by the request builder every
 *          client uses (vsx__ctl_req_*, ctl-proto.h); exit 2 if it refuses
 *          them (raw mode, standard input, is for what it refuses)
 *
 * A send that fails because vsxd closed first (EPIPE) is reported on
 * standard error and the reply is still read.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "util.h"


static int usage(void)
{
	fprintf(stderr, "usage: ctl_raw [-n N] [-s] [-t SECONDS] [-w MS] SOCKET <REQUESTS\n"
		"       ctl_raw [-n N] [-s] [-t SECONDS] [-w MS] -r CMD [-a KEY=VALUE]... "
		"SOCKET\n");
	return 2;
}

/* -r CMD -a KEY=VALUE...: the request, built, in @in (malloc'ed). */
static int build(const char *cmd, char **args, unsigned nargs, char **in, size_t *inlen)
{
	static struct vsx_ctl_req req;
	unsigned i;

	vsx__ctl_req_init(&req, cmd);
	for (i = 0; i < nargs; i++) {
		char *eq = strchr(args[i], '=');

		if (!eq) {
			fprintf(stderr, "ctl_raw: -a %s: not KEY=VALUE\n", args[i]);
			return -1;
		}
		*eq = '\0';
		vsx__ctl_req_add(&req, args[i], eq + 1);
		*eq = '=';
	}
	if (vsx__ctl_req_end(&req) < 0) {
		fprintf(stderr, "ctl_raw: the request builder refuses this request: %s\n",
			strerror(-req.err));
		return -1;
	}
	*in = strdup(req.buf);
	*inlen = req.len;
	return *in ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	long want = -1, replies = 0, timeout_s = 30, wait_ms = 0;
	char *in = NULL, buf[65536], last = 0, *cmd = NULL, *args[VSX_CTL_MAX_LINES];
	unsigned nargs = 0;
	size_t inlen = 0, incap = 0, off = 0;
	int fd, ch, shut = 0, closed = 0;
	long long deadline, read_from;
	ssize_t n;

	while ((ch = getopt(argc, argv, "n:st:w:r:a:")) != -1) {
		switch (ch) {
		case 'r':
			cmd = optarg;
			break;
		case 'a':
			if (nargs == VSX_CTL_MAX_LINES)
				return usage();
			args[nargs++] = optarg;
			break;
		case 'n':
			want = atol(optarg);
			break;
		case 's':
			shut = 1;
			break;
		case 't':
			timeout_s = atol(optarg);
			break;
		case 'w':
			wait_ms = atol(optarg);
			break;
		default:
			return usage();
		}
	}
	if (optind + 1 != argc || strlen(argv[optind]) >= sizeof(un.sun_path) ||
	    (nargs && !cmd))
		return usage();
	strcpy(un.sun_path, argv[optind]);

	if (cmd && build(cmd, args, nargs, &in, &inlen) < 0)
		return 2;
	/* the whole input first */
	for (; !cmd;) {
		if (inlen == incap) {
			incap = incap ? incap * 2 : 65536;
			in = realloc(in, incap);
			if (!in)
				return 99;
		}
		n = read(0, in + inlen, incap - inlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			perror("ctl_raw: stdin");
			return 99;
		}
		if (n == 0)
			break;
		inlen += (size_t)n;
	}

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		fprintf(stderr, "ctl_raw: connect %s: %s\n", un.sun_path, strerror(errno));
		return 1;
	}
	deadline = vsx__now_ms() + timeout_s * 1000;
	read_from = vsx__now_ms() + wait_ms;
	if (!inlen && shut)
		shutdown(fd, SHUT_WR);
	while (want < 0 || replies < want) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - vsx__now_ms();

		if (vsx__now_ms() < read_from) {
			p.events = 0;   /* not reading yet */
			if (left > read_from - vsx__now_ms())
				left = read_from - vsx__now_ms();
			if (left < 1)
				left = 1;
		}
		if (off < inlen)
			p.events |= POLLOUT;
		if (left <= 0) {
			fprintf(stderr, "ctl_raw: timed out after %ld s\n", timeout_s);
			fprintf(stderr, "ctl_raw: replies=%ld closed=0\n", replies);
			return 3;
		}
		if (poll(&p, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			return 99;
		}
		if (p.revents & POLLOUT) {
			n = send(fd, in + off, inlen - off, MSG_NOSIGNAL);
			if (n > 0) {
				off += (size_t)n;
				if (off == inlen && shut)
					shutdown(fd, SHUT_WR);
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				fprintf(stderr, "ctl_raw: send: %s (after %zu of %zu bytes)\n",
					strerror(errno), off, inlen);
				off = inlen;  /* stop sending; read what came */
			}
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, buf, sizeof(buf), 0);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0) {
				if (n < 0 && errno != ECONNRESET)
					fprintf(stderr, "ctl_raw: recv: %s\n", strerror(errno));
				closed = 1;
				break;
			}
			fwrite(buf, 1, (size_t)n, stdout);
			for (ssize_t i = 0; i < n; i++) {
				/* a reply ends with an empty line */
				if (buf[i] == '\n' && last == '\n') {
					replies++;
					last = 0;
				} else {
					last = buf[i];
				}
			}
		}
	}
	fflush(stdout);
	fprintf(stderr, "ctl_raw: replies=%ld closed=%d\n", replies, closed);
	free(in);
	close(fd);
	return 0;
}
