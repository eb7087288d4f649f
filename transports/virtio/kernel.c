/*
 * The kernel AF_VSOCK transport ("virtio"): a virtio-vsock guest, a
 * vhost-vsock host, or the vsock_loopback transport, all through the
 * kernel's socket API.
 *
 * Buffer knob: the kernel keeps one buffer size per socket,
 * SO_VM_SOCKETS_BUFFER_SIZE, set here after moving SO_VM_SOCKETS_BUFFER_MAX_SIZE
 * (or _MIN_SIZE) out of the way. It is the credit advertised to the peer
 * (buf_alloc: VSX_RX) and, since the Linux fix that caps a sender's credit at
 * its own buffer ("vsock/virtio: cap TX credit to local buffer size", in
 * Debian's 6.1 kernels), also the most a socket keeps in flight (VSX_TX).
 * So VSX_RX and VSX_TX name the same value here: setting either sets both,
 * and asking for both with different sizes is -EINVAL.
 *
 * Refusal: the kernel reports a refused connect (the peer's RST) as
 * ECONNRESET; libvsx reports -ECONNREFUSED, as on every transport.
 */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <linux/vm_sockets.h>

#include "vsx-int.h"

static void to_addr(const struct sockaddr_vm *sa, struct vsx_addr *a)
{
	memset(a, 0, sizeof(*a));
	a->kind = VSX_ADDR_VSOCK;
	a->cid = sa->svm_cid;
	a->port = sa->svm_port;
}

static int apply_opts(vsx_sock *s);

/* The socket of @s, with the buffer options applied. */
static int open_socket(vsx_sock *s)
{
	s->fd = socket(AF_VSOCK, s->type | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		if (errno == EAFNOSUPPORT)
			return vsx__err(-ENODEV, "virtio: this kernel has no AF_VSOCK "
					"(load the vsock modules)");
		if (errno == ESOCKTNOSUPPORT || errno == EPROTONOSUPPORT)
			return vsx__err(-ESOCKTNOSUPPORT, "virtio: socket type not supported");
		return vsx__errno("virtio: socket");
	}
	return apply_opts(s);
}

static int set_u64(int fd, int opt, uint64_t v)
{
	return setsockopt(fd, AF_VSOCK, opt, &v, sizeof(v));
}

static int get_u64(int fd, int opt, uint64_t *v)
{
	socklen_t len = sizeof(*v);

	return getsockopt(fd, AF_VSOCK, opt, v, &len);
}

static int vk_set_buffer(vsx_sock *s, int which, size_t bytes)
{
	uint64_t lim;

	if (get_u64(s->fd, SO_VM_SOCKETS_BUFFER_MAX_SIZE, &lim) == 0 && bytes > lim &&
	    set_u64(s->fd, SO_VM_SOCKETS_BUFFER_MAX_SIZE, bytes) < 0)
		return vsx__errno("virtio: SO_VM_SOCKETS_BUFFER_MAX_SIZE");
	if (get_u64(s->fd, SO_VM_SOCKETS_BUFFER_MIN_SIZE, &lim) == 0 && bytes < lim &&
	    set_u64(s->fd, SO_VM_SOCKETS_BUFFER_MIN_SIZE, bytes) < 0)
		return vsx__errno("virtio: SO_VM_SOCKETS_BUFFER_MIN_SIZE");
	if (set_u64(s->fd, SO_VM_SOCKETS_BUFFER_SIZE, bytes) < 0)
		return vsx__errno("virtio: SO_VM_SOCKETS_BUFFER_SIZE");
	return 0;
}

static int vk_get_buffer(const vsx_sock *s, int which, size_t *bytes)
{
	uint64_t v;

	(void)which; /* one buffer for both directions, see the top */
	if (get_u64(s->fd, SO_VM_SOCKETS_BUFFER_SIZE, &v) < 0)
		return vsx__errno("virtio: SO_VM_SOCKETS_BUFFER_SIZE");
	*bytes = (size_t)v;
	return 0;
}

static int apply_opts(vsx_sock *s)
{
	if (s->rx_buffer && s->tx_buffer && s->rx_buffer != s->tx_buffer)
		return vsx__err(-EINVAL, "virtio: RX and TX are one buffer on kernel "
				"vsock; %zu and %zu differ", s->rx_buffer, s->tx_buffer);
	if (s->rx_buffer || s->tx_buffer)
		return vk_set_buffer(s, VSX_RX, s->rx_buffer ? s->rx_buffer : s->tx_buffer);
	return 0;
}

static int vk_connect(vsx_sock *s, const struct vsx_addr *a,
		      const struct vsx_opts *o)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK };
	struct timeval tv = {
		.tv_sec = s->connect_timeout_ms / 1000,
		.tv_usec = (s->connect_timeout_ms % 1000) * 1000,
	};
	socklen_t len = sizeof(sa);
	int rc, ev, err = 0;

	(void)o;
	if (a->port == VSX_PORT_ANY || a->cid == VSX_CID_ANY)
		return vsx__err(-EINVAL, "virtio: cannot connect to 'any'");
	rc = open_socket(s);
	if (rc < 0)
		return rc;
	setsockopt(s->fd, AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv, sizeof(tv));
	vsx__set_nonblock(s->fd, 1);

	sa.svm_cid = a->cid;
	sa.svm_port = a->port;
	if (connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS && errno != EINTR)
			err = errno;
		else {
			ev = vsx__wait_fd(s->fd, POLLOUT,
					  vsx__now_ms() + s->connect_timeout_ms);
			if (ev == 0)
				err = ETIMEDOUT;
			else if (ev < 0)
				err = -ev;
			else if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err,
					    &(socklen_t){ sizeof(err) }) < 0)
				err = errno;
		}
	}
	if (err == ECONNRESET || err == ECONNREFUSED)
		return vsx__err(-ECONNREFUSED, "virtio: connection to %u:%u refused",
				a->cid, a->port);
	if (err == ETIMEDOUT)
		return vsx__err(-ETIMEDOUT, "virtio: no answer from %u:%u within %d ms",
				a->cid, a->port, s->connect_timeout_ms);
	if (err == ENODEV || err == ENETUNREACH || err == EHOSTUNREACH)
		return vsx__err(-ENETUNREACH, "virtio: no transport reaches CID %u "
				"(%s)", a->cid, strerror(err));
	if (err)
		return vsx__err(-err, "virtio: connect to %u:%u: %s", a->cid, a->port,
				strerror(err));
	if (!(s->flags & VSX_O_NONBLOCK))
		vsx__set_nonblock(s->fd, 0);
	if (getsockname(s->fd, (struct sockaddr *)&sa, &len) == 0)
		to_addr(&sa, &s->local);
	return 0;
}

static int vk_listen(vsx_sock *s, const struct vsx_addr *a,
		     const struct vsx_opts *o)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK };
	socklen_t len = sizeof(sa);
	int rc;

	(void)o;
	rc = open_socket(s);
	if (rc < 0)
		return rc;
	sa.svm_cid = a->cid;
	sa.svm_port = a->port;
	if (bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return vsx__errno("virtio: bind");
	if (listen(s->fd, s->backlog) < 0)
		return vsx__errno("virtio: listen");
	if (s->flags & VSX_O_NONBLOCK)
		vsx__set_nonblock(s->fd, 1);
	if (getsockname(s->fd, (struct sockaddr *)&sa, &len) == 0)
		to_addr(&sa, &s->local);
	return 0;
}

static int vk_accept(vsx_sock *l, vsx_sock *s)
{
	struct sockaddr_vm sa;
	socklen_t len = sizeof(sa);
	int fl = SOCK_CLOEXEC | ((l->flags & VSX_O_NONBLOCK) ? SOCK_NONBLOCK : 0);

	do
		s->fd = accept4(l->fd, (struct sockaddr *)&sa, &len, fl);
	while (s->fd < 0 && errno == EINTR);
	if (s->fd < 0)
		return errno == EAGAIN ? -EAGAIN : vsx__errno("virtio: accept");
	to_addr(&sa, &s->peer);
	len = sizeof(sa);
	if (getsockname(s->fd, (struct sockaddr *)&sa, &len) == 0)
		to_addr(&sa, &s->local);
	return 0;
}

const struct vsx_transport vsx__virtio_kernel = {
	.name = "virtio",
	.addr_kinds = 1u << VSX_ADDR_VSOCK,
	/* Connections */
	.connect = vk_connect,
	.listen = vk_listen,
	.accept = vk_accept,
	/* Buffer knob */
	.set_buffer = vk_set_buffer,
	.get_buffer = vk_get_buffer,
};
