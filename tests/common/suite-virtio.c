/*
 * suite_guest: the shared libvsx suite (suite.c) over the virtio transport,
 * INSIDE THE LAB GUEST ONLY.
 *
 * It opens AF_VSOCK sockets, so it refuses to run unless $VSX_LAB_GUEST is
 * set (the lab guest's /init sets it; tests/vm boots the guest). The socket
 * under test is libvsx's ("virtio" transport); its peer is a raw kernel
 * AF_VSOCK socket in the same process, over the guest kernel's vsock
 * loopback (CID 1), so both ends are the real kernel.
 *
 *   suite_guest [CASE...]     (no CASE: all of them)
 *
 * Prints "ok - CASE [virtio]" or "not ok - CASE [virtio]" per case, the
 * reasons on stderr, and "N passed, M failed". Each case runs in its own
 * child under a time limit, so a hang fails that case alone. Exit 1 if any
 * case failed, 2 on misuse.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "suite.h"

#define CASE_LIMIT_S 120
#define PORT_BASE 27000u

static uint32_t next_port = PORT_BASE;

static int vs_listen(uint32_t port)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY,
				  .svm_port = port };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

static int v_serve(void *ctx, char *addr, size_t len)
{
	uint32_t port = next_port++;

	snprintf(addr, len, "vsock:1:%u", port);
	return vs_listen(port);
}

/* One connection per service: the listener goes once it is taken. */
static int v_serve_accept(void *ctx, int h, int timeout_ms)
{
	struct pollfd p = { .fd = h, .events = POLLIN };
	int fd;

	if (poll(&p, 1, timeout_ms) <= 0) {
		close(h);
		return -ETIMEDOUT;
	}
	fd = accept4(h, NULL, NULL, SOCK_CLOEXEC);
	fd = fd < 0 ? -errno : fd;
	close(h);
	return fd;
}

static int v_listen_addr(void *ctx, char *addr, size_t len)
{
	snprintf(addr, len, "vsock:any:%u", next_port++);
	return 0;
}

static int v_dial(void *ctx, uint32_t port)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_LOCAL,
				  .svm_port = port };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

static int v_unserved(void *ctx, char *addr, size_t len)
{
	snprintf(addr, len, "vsock:1:%u", next_port++);
	return 0;
}

/* virtio: one kernel buffer (SO_VM_SOCKETS_BUFFER_SIZE) for RX and TX,
 * exactly as asked; 256 KiB by default. */
static int v_expect_buffer(void *ctx, int role, int which, size_t rx, size_t tx,
			   size_t *out)
{
	*out = rx ? rx : tx ? tx : 256 * 1024;
	return 0;
}

static const struct vsx_suite_env env = {
	.name = "virtio",
	.transport = VSX_TRANSPORT_VIRTIO,
	.expect_name = VSX_TRANSPORT_VIRTIO,
	.serve = v_serve,
	.serve_accept = v_serve_accept,
	.listen_addr = v_listen_addr,
	.dial = v_dial,
	.unserved = v_unserved,
	.unserved_err = -ECONNREFUSED,   /* loopback answers with an RST */
	.set_connected_err = 0,          /* buf_alloc changes at any time */
	.one_buffer = 1,                 /* RX and TX are the same size */
	.expect_buffer = v_expect_buffer,
	.close_settle_ms = 10000,        /* VSOCK_CLOSE_TIMEOUT is 8 s */
};

static int run_one(const char *name, unsigned idx)
{
	int status = 0, rc;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		alarm(CASE_LIMIT_S);
		next_port = PORT_BASE + 100 * idx;
		rc = vsx_suite_run_case(&env, name);
		_exit(rc == 0 ? 0 : rc == -2 ? 3 : 1);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
		fprintf(stderr, "suite_guest: no case named %s\n", name);
	if (WIFSIGNALED(status))
		fprintf(stderr, "suite_guest: %s: killed by signal %d%s\n", name,
			WTERMSIG(status), WTERMSIG(status) == SIGALRM ? " (time limit)" : "");
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const struct vsx_suite_case *c;
	int passed = 0, failed = 0, i;
	unsigned idx = 0;

	if (!getenv("VSX_LAB_GUEST")) {
		fprintf(stderr, "suite_guest: refusing to run outside the lab guest: it "
			"opens AF_VSOCK sockets ($VSX_LAB_GUEST is not set)\n");
		return 2;
	}
	if (argc > 1) {
		for (i = 1; i < argc; i++, idx++) {
			if (run_one(argv[i], idx) == 0) {
				printf("ok - %s [virtio]\n", argv[i]);
				passed++;
			} else {
				printf("not ok - %s [virtio]\n", argv[i]);
				failed++;
			}
		}
	} else {
		for (c = vsx_suite_cases; c->name; c++, idx++) {
			if (run_one(c->name, idx) == 0) {
				printf("ok - %s [virtio]\n", c->name);
				passed++;
			} else {
				printf("not ok - %s [virtio]\n", c->name);
				failed++;
			}
		}
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
