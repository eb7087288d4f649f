/*
 * The vmbus transport's calls into the real kernel: the C library itself.
 * Deliberately nothing but pointers, so the only vmbus code that cannot be
 * exercised off Hyper-V is the C library's (see vmbus-sys.h). The four
 * wrappers exist only because glibc declares the sockaddr arguments as a
 * transparent union under _GNU_SOURCE; they pass their arguments through.
 */
#include <stdio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "vsx-int.h"
#include "vmbus-sys.h"

static int sys_getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	return getsockname(fd, sa, len);
}

static int sys_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	return connect(fd, sa, len);
}

static int sys_bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	return bind(fd, sa, len);
}

static int sys_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	return accept4(fd, sa, len, flags);
}

static int kernel_release(char *buf, size_t len)
{
	struct utsname u;

	if (uname(&u) < 0)
		return -1;
	snprintf(buf, len, "%s", u.release);
	return 0;
}

const struct vmbus_sys vsx__vmbus_sys_kernel = {
	.name = "kernel",
	/* Sockets */
	.socket = socket,
	.setsockopt = setsockopt,
	.getsockopt = getsockopt,
	.getsockname = sys_getsockname,
	/* Connections */
	.connect = sys_connect,
	.bind = sys_bind,
	.listen = listen,
	.accept4 = sys_accept4,
	.shutdown = shutdown,
	.close = close,
	/* STREAM */
	.send = send,
	.recv = recv,
	.kernel_release = kernel_release,
};
