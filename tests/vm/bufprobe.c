/*
 * bufprobe: a guest program that owns kernel vsock sockets for vsxctl to
 * look at (ss -p) and tune from outside (set-buffer --pid PID --fd FD), for
 * tests/vm/ctl.test. Plain AF_VSOCK, no libvsx: the sockets are an ordinary
 * program's. It refuses to run unless $VSX_LAB_GUEST is set (the lab
 * guest's /init sets it): it opens AF_VSOCK.
 *
 *   bufprobe PORT
 *
 * It listens on vsock:any:PORT, connects to itself over the loopback
 * transport (CID 1) and accepts, so it holds a listener, a client and the
 * accepted end; then a connected AF_UNIX socket and /dev/null (fds that are
 * not vsock sockets / not sockets). It prints one line
 *
 *   bufprobe: ready pid=P port=PORT listen_fd=L client_fd=C accepted_fd=A
 *             client_port=X unix_fd=U file_fd=F
 *
 * and waits. On SIGUSR1 it prints
 *
 *   bufprobe: report N: listen=B client=B accepted=B sent=S checked
 *
 * where B is getsockopt(SO_VM_SOCKETS_BUFFER_SIZE) of each socket, read now,
 * and S what one non-blocking send of 1 MiB from the client to the accepted
 * end put in flight: the credit the accepted end advertises (its buffer,
 * capped by the client's own buffer). The accepted end then reads those S
 * bytes and checks every one ("checked"), so the connection is known to be
 * intact after whatever was done to it from outside. On SIGTERM it prints
 * "bufprobe: ok: N reports" and exits 0; any failure prints "bufprobe: FAIL:
 * ..." and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#define BIG (1024 * 1024)

static volatile sig_atomic_t got_usr1, got_term;

static void on_sig(int sig)
{
	if (sig == SIGUSR1)
		got_usr1 = 1;
	else
		got_term = 1;
}

static int fail(const char *what)
{
	printf("bufprobe: FAIL: %s: %s\n", what, strerror(errno));
	fflush(stdout);
	return 1;
}

static unsigned long long bufsize(int fd)
{
	unsigned long long v = 0;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, AF_VSOCK, SO_VM_SOCKETS_BUFFER_SIZE, &v, &len) < 0)
		return 0;
	return v;
}

static uint8_t pat(uint64_t off, unsigned n)
{
	return (uint8_t)((off * 131 + off / 251 + n * 7) & 0xff);
}

/* One report; 0 ok, 1 failure (printed). */
static int report(unsigned n, int l, int c, int a)
{
	static uint8_t tx[BIG], rx[BIG];
	ssize_t sent, r;
	size_t got = 0, i;
	int fl;

	for (i = 0; i < BIG; i++)
		tx[i] = pat(i, n);
	fl = fcntl(c, F_GETFL);
	if (fl < 0 || fcntl(c, F_SETFL, fl | O_NONBLOCK) < 0)
		return fail("fcntl");
	sent = send(c, tx, BIG, MSG_NOSIGNAL);
	if (sent < 0 && errno == EAGAIN)
		sent = 0;
	if (sent < 0)
		return fail("send");
	if (fcntl(c, F_SETFL, fl) < 0)
		return fail("fcntl");
	while (got < (size_t)sent) {
		r = recv(a, rx + got, (size_t)sent - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EPIPE;
			return fail("recv on the accepted end");
		}
		got += (size_t)r;
	}
	for (i = 0; i < got; i++)
		if (rx[i] != tx[i]) {
			printf("bufprobe: FAIL: report %u: byte %zu is 0x%02x, expected 0x%02x\n",
			       n, i, rx[i], tx[i]);
			fflush(stdout);
			return 1;
		}
	printf("bufprobe: report %u: listen=%llu client=%llu accepted=%llu sent=%zd checked\n",
	       n, bufsize(l), bufsize(c), bufsize(a), sent);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY };
	struct sockaddr_vm me;
	socklen_t len = sizeof(me);
	struct sigaction act = { .sa_handler = on_sig };
	sigset_t block, old;
	int l, c, a, u[2], f;
	unsigned n = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: bufprobe PORT\n");
		return 2;
	}
	if (!getenv("VSX_LAB_GUEST")) {
		fprintf(stderr, "bufprobe: opens AF_VSOCK; runs only inside the lab guest\n");
		return 77;
	}
	sa.svm_port = (unsigned)atoi(argv[1]);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &old);
	sigaction(SIGUSR1, &act, NULL);
	sigaction(SIGTERM, &act, NULL);

	l = socket(AF_VSOCK, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 4) < 0)
		return fail("listen");
	c = socket(AF_VSOCK, SOCK_STREAM, 0);
	sa.svm_cid = VMADDR_CID_LOCAL;
	if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return fail("connect to vsock:1");
	a = accept(l, NULL, NULL);
	if (a < 0)
		return fail("accept");
	if (getsockname(c, (struct sockaddr *)&me, &len) < 0)
		return fail("getsockname");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, u) < 0)
		return fail("socketpair");
	f = open("/dev/null", O_RDONLY);
	if (f < 0)
		return fail("open /dev/null");
	printf("bufprobe: ready pid=%d port=%u listen_fd=%d client_fd=%d accepted_fd=%d "
	       "client_port=%u unix_fd=%d file_fd=%d\n", (int)getpid(), sa.svm_port, l, c, a,
	       me.svm_port, u[0], f);
	fflush(stdout);

	while (!got_term) {
		sigsuspend(&old);
		if (got_usr1) {
			got_usr1 = 0;
			if (report(++n, l, c, a))
				return 1;
		}
	}
	printf("bufprobe: ok: %u reports\n", n);
	return 0;
}
