/*
 * The host kernel's vsock, as the far end of a forward (vhost-device-vsock's
 * forward-cid): the default vsxb_forward_connect_fn, which opens a
 * non-blocking AF_VSOCK stream socket to (cid, port). Once it connects, the
 * connection is a host peer's like any other (peer_host.c, kind "vsock"); this
 * file only opens the socket, so that tests, which may not touch AF_VSOCK
 * on the build machine, can give a connect of their own instead.
 */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "peer.h"

int vsxb__vsock_connect(void *arg, uint32_t cid, uint32_t port)
{
	struct sockaddr_vm sa = {
		.svm_family = AF_VSOCK,
		.svm_cid = cid,
		.svm_port = port,
	};
	int fd, err;

	(void)arg;
	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	    errno != EINPROGRESS && errno != EINTR) {
		err = errno;
		close(fd);
		return -err;
	}
	return fd;
}
