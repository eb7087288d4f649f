/*
 * libvsx core: the public socket calls, independent of any transport.
 *
 * A vsx_sock is created here, handed to its transport's connect, listen or
 * accept hook, and destroyed here (transport destruct, then the fd). The
 * core owns the semantics every transport shares: send loops until all is
 * written or the socket would block, byte counters, the state shown by
 * vsx_info, and the bounded close (shut down sending, wait for the peer's EOF
 * up to the linger time, then release). Transports supply single steps.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/vm_sockets.h>
#include <unistd.h>

#include "auth.h"
#include "vsx-int.h"

#define VSX_VERSION_STRING PACKAGE_VERSION
#define DEFAULT_BACKLOG 128

static int opts_check(const struct vsx_opts *o)
{
	size_t i;

	if (o->connect_timeout_ms < 0)
		return vsx__err(-EINVAL, "options: negative connect timeout");
	if (o->backlog < 0)
		return vsx__err(-EINVAL, "options: negative backlog");
	if (o->flags & ~(VSX_O_NONBLOCK | VSX_O_SEQPACKET | VSX_O_BUFFER_NEXT))
		return vsx__err(-EINVAL, "options: unknown flags 0x%x", o->flags);
	if (o->rx_buffer > UINT32_MAX || o->tx_buffer > UINT32_MAX)
		return vsx__err(-EINVAL, "options: a buffer is 1 to 4294967295 bytes");
	for (i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return vsx__err(-EINVAL, "options: reserved fields must be zero");
	return 0;
}

static vsx_sock *sock_new(const struct vsx_transport *t, const struct vsx_opts *o)
{
	vsx_sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->t = t;
	s->fd = -1;
	s->type = (o->flags & VSX_O_SEQPACKET) ? SOCK_SEQPACKET : SOCK_STREAM;
	s->flags = o->flags;
	s->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms
						      : VSX_DEFAULT_CONNECT_TIMEOUT_MS;
	s->linger_ms = o->linger_ms ? o->linger_ms : VSX_DEFAULT_LINGER_MS;
	s->backlog = o->backlog ? o->backlog : DEFAULT_BACKLOG;
	s->rx_buffer = o->rx_buffer;
	s->tx_buffer = o->tx_buffer;
	return s;
}

static void sock_free(vsx_sock *s)
{
	vsx__auth_free(s);
	if (s->t->destruct)
		s->t->destruct(s);
	if (s->fd >= 0)
		close(s->fd);
	free(s);
}

/* The end of a call that makes a socket: @s freed when @rc is an error,
 * else in @state and handed to the caller. */
static int sock_done(vsx_sock *s, int rc, int state, vsx_sock **out)
{
	if (rc < 0) {
		sock_free(s);
		return rc;
	}
	s->state = state;
	*out = s;
	return 0;
}

/* The start of a call that makes a socket: the error cleared, @arg (the
 * call's input) and @out checked, *@out NULL, *@opts the defaults when NULL
 * and checked. */
static int call_begin(const void *arg, const struct vsx_opts **opts, vsx_sock **out)
{
	static const struct vsx_opts defaults;

	vsx__err_clear();
	if (out)
		*out = NULL;
	if (!arg || !out)
		return vsx__err(-EINVAL, "NULL argument");
	if (!*opts)
		*opts = &defaults;
	return opts_check(*opts);
}

/* Resolve text + options into a transport and a fresh socket, which the
 * caller hands out (sock_done) once it is connected or listening. NULL with
 * the error in *@rc; *@out is NULL either way. */
static vsx_sock *sock_open(const char *addr, const struct vsx_opts *opts,
			   struct vsx_addr *a, vsx_sock **out, int *rc)
{
	const struct vsx_transport *t;
	vsx_sock *s;

	*rc = call_begin(addr, &opts, out);
	if (*rc < 0)
		return NULL;
	*rc = vsx_addr_parse(addr, a);
	if (*rc < 0)
		return NULL;
	t = vsx__transport_for(a, opts->transport);
	if (!t) {
		if (opts->transport && !vsx__transport_by_name(opts->transport))
			*rc = vsx__err(-EINVAL, "no transport named '%.32s'", opts->transport);
		else
			*rc = vsx__err(-ENODEV, "%s: no transport on this machine serves "
				       "this address", addr);
		return NULL;
	}
	s = sock_new(t, opts);
	if (!s) {
		*rc = vsx__err(-ENOMEM, "out of memory");
		return NULL;
	}
	*rc = vsx__auth_setup(s, opts);
	if (*rc < 0) {
		sock_free(s);
		return NULL;
	}
	return s;
}

VSX_EXPORT int vsx_connect(const char *addr, const struct vsx_opts *opts,
			   vsx_sock **out)
{
	struct vsx_addr a;
	int64_t deadline;
	vsx_sock *s;
	int rc;

	s = sock_open(addr, opts, &a, out, &rc);
	if (!s)
		return rc;
	s->state = VSX_STATE_CONNECTING;
	s->peer = a;
	deadline = vsx__now_ms() + s->connect_timeout_ms;
	rc = s->t->connect(s, &a, opts ? opts : &(struct vsx_opts){ 0 });
	if (rc >= 0)
		rc = vsx__auth_connect(s, deadline);
	return sock_done(s, rc, VSX_STATE_CONNECTED, out);
}

VSX_EXPORT int vsx_listen(const char *addr, const struct vsx_opts *opts,
			  vsx_sock **out)
{
	struct vsx_addr a;
	vsx_sock *s;
	int rc;

	s = sock_open(addr, opts, &a, out, &rc);
	if (!s)
		return rc;
	s->local = a;
	if (!s->t->listen)
		rc = vsx__err(-EOPNOTSUPP, "%s: transport %s cannot listen", addr,
			      s->t->name);
	else
		rc = s->t->listen(s, &a, opts ? opts : &(struct vsx_opts){ 0 });
	return sock_done(s, rc, VSX_STATE_LISTENING, out);
}

VSX_EXPORT int vsx_accept(vsx_sock *l, vsx_sock **out)
{
	vsx_sock *s;
	int rc;

	vsx__err_clear();
	if (!l || !out)
		return vsx__err(-EINVAL, "NULL argument");
	*out = NULL;
	if (l->state != VSX_STATE_LISTENING)
		return vsx__err(-EINVAL, "accept: not a listening socket");
	s = calloc(1, sizeof(*s));
	if (!s)
		return vsx__err(-ENOMEM, "out of memory");
	*s = *l;
	s->trans = NULL;
	s->auth = NULL;
	s->info_flags = 0;
	s->fd = -1;
	s->bytes_sent = s->bytes_received = 0;
	s->shut_local = s->peer_eof = 0;
	memset(&s->peer, 0, sizeof(s->peer));
	rc = l->t->accept(l, s);
	if (rc >= 0)
		rc = vsx__auth_accept(l, s);
	return sock_done(s, rc, VSX_STATE_CONNECTED, out);
}

VSX_EXPORT int vsx_adopt(int fd, const struct vsx_opts *opts, vsx_sock **out)
{
	struct sockaddr_storage ss;
	struct sockaddr_vm *vm = (struct sockaddr_vm *)&ss;
	socklen_t len = sizeof(ss);
	int type, listening = 0, rc;
	vsx_sock *s;

	rc = call_begin(&fd, &opts, out);
	if (rc < 0)
		return rc;
	rc = vsx__auth_setup(NULL, opts);
	if (rc < 0)
		return rc;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return vsx__errno("adopt: getsockname");
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &(socklen_t){ sizeof(type) }) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening,
		       &(socklen_t){ sizeof(listening) }) < 0)
		return vsx__errno("adopt: getsockopt");
	if (ss.ss_family != AF_VSOCK && ss.ss_family != AF_UNIX)
		return vsx__err(-EAFNOSUPPORT, "adopt: fd %d is neither AF_VSOCK nor AF_UNIX", fd);
	if (!listening && getpeername(fd, (struct sockaddr *)&(struct sockaddr_storage){ 0 },
				      &(socklen_t){ sizeof(ss) }) < 0)
		return vsx__err(-ENOTCONN, "adopt: fd %d is not connected", fd);
	s = sock_new(ss.ss_family == AF_VSOCK ? &vsx__virtio_kernel : &vsx__hybrid, opts);
	if (!s)
		return vsx__err(-ENOMEM, "out of memory");
	s->fd = fd;
	s->type = type;
	s->state = listening ? VSX_STATE_LISTENING : VSX_STATE_CONNECTED;
	if (ss.ss_family == AF_VSOCK) {
		s->local = (struct vsx_addr){ .kind = VSX_ADDR_VSOCK, .cid = vm->svm_cid,
					      .port = vm->svm_port };
		len = sizeof(ss);
		if (!listening && getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
			s->peer = (struct vsx_addr){ .kind = VSX_ADDR_VSOCK,
						     .cid = vm->svm_cid,
						     .port = vm->svm_port };
	}
	*out = s;
	return 0;
}

static ssize_t step_send(vsx_sock *s, const char *p, size_t n)
{
	ssize_t r;

	if (s->t->send)
		return s->t->send(s, p, n);
	r = send(s->fd, p, n, MSG_NOSIGNAL);
	return r < 0 ? -errno : r;
}

static ssize_t step_recv(vsx_sock *s, void *p, size_t n)
{
	ssize_t r;

	if (s->t->recv)
		return s->t->recv(s, p, n);
	r = recv(s->fd, p, n, 0);
	return r < 0 ? -errno : r;
}

static int connected(const vsx_sock *s)
{
	return s->state == VSX_STATE_CONNECTED || s->state == VSX_STATE_CLOSING;
}

VSX_EXPORT ssize_t vsx_send(vsx_sock *s, const void *buf, size_t len)
{
	const char *p = buf;
	size_t done = 0;
	ssize_t r;

	vsx__err_clear();
	if (!s || (!buf && len))
		return vsx__err(-EINVAL, "NULL argument");
	if (!connected(s))
		return vsx__err(-ENOTCONN, "send: socket is not connected");
	if (s->shut_local & VSX_SHUT_WR)
		return vsx__err(-EPIPE, "send: sending side already shut down");
	while (done < len) {
		r = step_send(s, p + done, len - done);
		if (r > 0) {
			done += (size_t)r;
			s->bytes_sent += (uint64_t)r;
			continue;
		}
		if (r == -EINTR)
			continue;
		if (r == -EAGAIN || r == -EWOULDBLOCK) {
			if (s->flags & VSX_O_NONBLOCK)
				break;
			r = vsx__wait_fd(s->fd, POLLOUT, -1);
			if (r >= 0)
				continue;
		}
		if (r == 0)
			r = -EPIPE;
		if (done)
			break;
		return r == -EAGAIN ? r : vsx__err((int)r, "send: %s", strerror((int)-r));
	}
	if (!done && len)
		return -EAGAIN;
	return (ssize_t)done;
}

VSX_EXPORT ssize_t vsx_recv(vsx_sock *s, void *buf, size_t len)
{
	ssize_t r;

	vsx__err_clear();
	if (!s || (!buf && len))
		return vsx__err(-EINVAL, "NULL argument");
	if (!connected(s))
		return vsx__err(-ENOTCONN, "recv: socket is not connected");
	do
		r = step_recv(s, buf, len);
	while (r == -EINTR);
	if (r > 0)
		s->bytes_received += (uint64_t)r;
	else if (r == 0 && len && !(s->shut_local & VSX_SHUT_RD)) {
		s->peer_eof = 1;
		s->state = VSX_STATE_CLOSING;
	} else if (r < 0 && r != -EAGAIN)
		return vsx__err((int)r, "recv: %s", strerror((int)-r));
	return r;
}

/*
 * @how is POSIX's SHUT_RD (0), SHUT_WR (1) or SHUT_RDWR (2), or the
 * shut_local bits VSX_SHUT_RD (4), VSX_SHUT_WR (1, SHUT_WR itself) or
 * both (5): no value means two things. The transports get POSIX's.
 */
VSX_EXPORT int vsx_shutdown(vsx_sock *s, int how)
{
	unsigned bits;
	int rc;

	vsx__err_clear();
	if (!s)
		return vsx__err(-EINVAL, "NULL argument");
	switch (how) {
	case SHUT_RD:
	case VSX_SHUT_RD:
		how = SHUT_RD;
		bits = VSX_SHUT_RD;
		break;
	case SHUT_WR:           /* == VSX_SHUT_WR */
		bits = VSX_SHUT_WR;
		break;
	case SHUT_RDWR:
	case VSX_SHUT_RDWR:
		how = SHUT_RDWR;
		bits = VSX_SHUT_RDWR;
		break;
	default:
		return vsx__err(-EINVAL, "shutdown: how must be SHUT_RD, SHUT_WR, SHUT_RDWR "
				"or VSX_SHUT_RD, VSX_SHUT_WR, VSX_SHUT_RDWR");
	}
	if (!connected(s))
		return vsx__err(-ENOTCONN, "shutdown: socket is not connected");
	if (s->t->shutdown)
		rc = s->t->shutdown(s, how);
	else
		rc = shutdown(s->fd, how) < 0 ? vsx__errno("shutdown") : 0;
	if (rc < 0)
		return rc;
	s->shut_local |= bits;
	s->state = VSX_STATE_CLOSING;
	return 0;
}

/* Wait for the peer's EOF until the linger deadline, discarding its data. */
static int linger_wait(vsx_sock *s)
{
	int64_t deadline = vsx__now_ms() + s->linger_ms;
	char scratch[4096];
	ssize_t r;
	int ev;

	while (!s->peer_eof) {
		/* A peer that keeps sending keeps the fd readable: check the
		 * deadline here too, not only when the poll times out. */
		if (vsx__now_ms() >= deadline)
			return -ETIMEDOUT;
		ev = vsx__wait_fd(s->fd, POLLIN, deadline);
		if (ev == 0)
			return -ETIMEDOUT;
		if (ev < 0)
			return 0;
		r = recv(s->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return 0; /* EOF, or reset: either way the peer is gone */
		if (ev & (POLLHUP | POLLERR) && r < 0)
			return 0;
	}
	return 0;
}

VSX_EXPORT int vsx_close(vsx_sock *s)
{
	int rc = 0;

	vsx__err_clear();
	if (!s)
		return 0;
	if (connected(s) && s->linger_ms >= 0 && s->fd >= 0) {
		if (!(s->shut_local & VSX_SHUT_WR)) {
			if (s->t->shutdown)
				s->t->shutdown(s, SHUT_WR);
			else
				shutdown(s->fd, SHUT_WR);
		}
		rc = linger_wait(s);
		if (rc < 0)
			vsx__err(rc, "close: the peer did not finish within %d ms; "
				 "connection reset", s->linger_ms);
	}
	s->state = VSX_STATE_CLOSED;
	sock_free(s);
	return rc;
}

VSX_EXPORT int vsx_fd(const vsx_sock *s)
{
	return s ? s->fd : -EINVAL;
}

VSX_EXPORT int vsx_set_buffer(vsx_sock *s, int which, size_t bytes)
{
	vsx__err_clear();
	if (!s)
		return vsx__err(-EINVAL, "NULL argument");
	if (!which || (which & ~(VSX_RX | VSX_TX)))
		return vsx__err(-EINVAL, "set_buffer: which must be VSX_RX, VSX_TX or both");
	if (bytes == 0 || bytes > UINT32_MAX)
		return vsx__err(-EINVAL, "set_buffer: %zu bytes: a buffer is 1 to 4294967295 bytes",
				bytes);
	if (!s->t->set_buffer)
		return vsx__err(-EOPNOTSUPP, "set_buffer: transport %s has no buffer to set",
				s->t->name);
	return s->t->set_buffer(s, which, bytes);
}

VSX_EXPORT int vsx_get_buffer(const vsx_sock *s, int which, size_t *bytes)
{
	vsx__err_clear();
	if (!s || !bytes)
		return vsx__err(-EINVAL, "NULL argument");
	if (which != VSX_RX && which != VSX_TX)
		return vsx__err(-EINVAL, "get_buffer: which must be VSX_RX or VSX_TX");
	if (!s->t->get_buffer)
		return vsx__err(-EOPNOTSUPP, "get_buffer: transport %s has no buffer",
				s->t->name);
	return s->t->get_buffer(s, which, bytes);
}

VSX_EXPORT int vsx_info(const vsx_sock *s, struct vsx_info *out)
{
	int rc;

	vsx__err_clear();
	if (!s || !out)
		return vsx__err(-EINVAL, "NULL argument");
	memset(out, 0, sizeof(*out));
	snprintf(out->transport, sizeof(out->transport), "%s", s->t->name);
	if (s->local.kind)
		vsx_addr_format(&s->local, out->local, sizeof(out->local));
	if (s->peer.kind)
		vsx_addr_format(&s->peer, out->peer, sizeof(out->peer));
	out->type = s->type;
	out->state = s->state;
	out->shut_local = s->shut_local;
	out->bytes_sent = s->bytes_sent;
	out->bytes_received = s->bytes_received;
	if (s->t->get_buffer) {
		s->t->get_buffer(s, VSX_RX, &out->rx_buffer);
		s->t->get_buffer(s, VSX_TX, &out->tx_buffer);
	}
	vsx__err_clear();
	rc = s->t->info ? s->t->info(s, out) : 0;
	out->flags |= s->info_flags;
	return rc;
}

VSX_EXPORT const char *vsx_version(void)
{
	return VSX_VERSION_STRING;
}
