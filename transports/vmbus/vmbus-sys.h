/*
 * The vmbus transport's window on the kernel: every socket call it makes.
 *
 * vmbus.c never calls socket(2) and friends itself; it calls through the
 * table vsx__vmbus_sys points at. In libvsx that is vsx__vmbus_sys_kernel
 * (sys-kernel.c), which is the C library's own functions and nothing else,
 * so the real path stays as thin as the code that cannot be run here (no
 * Hyper-V host is reachable, and AF_VSOCK must not be opened on the build
 * machine). The tests link the hv_sock simulator (tests/vmbus/sim.c, never
 * part of libvsx) and point vsx__vmbus_sys at it before the first socket is
 * made: there is no environment variable or other run-time switch in the
 * library.
 *
 * Every hook has the C library's signature and convention: -1 and errno on
 * failure.
 */
#ifndef VSX_VMBUS_SYS_H
#define VSX_VMBUS_SYS_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

struct vmbus_sys {
	const char *name;

	/* Sockets */
	int (*socket)(int domain, int type, int protocol);
	int (*setsockopt)(int fd, int level, int opt, const void *val, socklen_t len);
	int (*getsockopt)(int fd, int level, int opt, void *val, socklen_t *len);
	int (*getsockname)(int fd, struct sockaddr *sa, socklen_t *len);

	/* Connections */
	int (*connect)(int fd, const struct sockaddr *sa, socklen_t len);
	int (*bind)(int fd, const struct sockaddr *sa, socklen_t len);
	int (*listen)(int fd, int backlog);
	int (*accept4)(int fd, struct sockaddr *sa, socklen_t *len, int flags);
	int (*shutdown)(int fd, int how);
	int (*close)(int fd);

	/* STREAM */
	ssize_t (*send)(int fd, const void *buf, size_t len, int flags);
	ssize_t (*recv)(int fd, void *buf, size_t len, int flags);

	/* The running kernel's release ("6.1.0-57-amd64"), as uname -r. */
	int (*kernel_release)(char *buf, size_t len);
};

/* The real kernel (sys-kernel.c). */
extern const struct vmbus_sys vsx__vmbus_sys_kernel;

/* What the vmbus transport uses; tests may repoint it before any socket. */
extern const struct vmbus_sys *vsx__vmbus_sys;

#endif /* VSX_VMBUS_SYS_H */
