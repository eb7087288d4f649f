/*
 * Hybrid vsock client and listener ("hybrid"): vsock through a Unix socket,
 * the convention of Firecracker, Cloud Hypervisor, vhost-device-vsock and
 * vsxd.
 *
 * Connect: connect to PATH, write "CONNECT <port>\n", read "OK <n>\n" within
 * the connect timeout; after that the Unix stream is the vsock stream. The
 * reply is peeked and then consumed exactly, so guest bytes that follow OK in
 * the same read are left for vsx_recv. No reply (EOF) is -ECONNREFUSED, a
 * malformed one -EPROTO, none in time -ETIMEDOUT.
 *
 * Listen: "unix:PATH:PORT" binds PATH_PORT, where a backend delivers guest
 * connections to host port PORT as plain streams. With VSX_O_SEQPACKET the
 * socket there is a SOCK_SEQPACKET one, which vsxd connects for guest
 * SEQPACKET sockets: each record is one guest message. A stale socket file
 * (one nobody listens on) is replaced; anything else there is -EADDRINUSE.
 * Connecting is stream only: the CONNECT handshake has no socket type.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "hybrid-proto.h"
#include "vsx-int.h"

#define CTL_TIMEOUT_MS 2000
#define INFO_TIMEOUT_MS 1000 /* vsx_info's question to vsxd */

/* Per-socket private state (s->trans), owned here. */
struct hy {
	char *bound;                    /* listener: PATH_PORT to unlink */
	char control[VSX_PATH_MAX];     /* vsxd's control socket */
	uint32_t rx_buffer;             /* last value vsxd accepted, 0: unknown */
};

static int hy_set_buffer(vsx_sock *s, int which, size_t bytes);

static const char *control_path(const struct vsx_opts *o)
{
	const char *env = getenv("VSXD_CONTROL");

	if (o && o->control_path)
		return o->control_path;
	return env && *env ? env : VSX_CONTROL_PATH;
}

/* vsxd's control socket @ctl refused us: the file's mode (connect's
 * EACCES) or vsxd's peer check (errno=13 in its reply). */
static int ctl_denied(const char *what, const char *ctl)
{
	return vsx__err(-EACCES, "%s: permission denied on vsxd's control socket %s (root, "
			"vsxd's user, control-allow-uid and control-group members may use "
			"it)", what, ctl);
}

static struct hy *hy_state(vsx_sock *s, const struct vsx_opts *o)
{
	struct hy *h = s->trans;

	if (!h) {
		h = calloc(1, sizeof(*h));
		if (!h)
			return NULL;
		snprintf(h->control, sizeof(h->control), "%s", control_path(o));
		s->trans = h;
	}
	return h;
}

static int unix_addr(struct sockaddr_un *un, const char *path)
{
	if (vsx__unix_addr(un, path) < 0)
		return vsx__err(-ENAMETOOLONG, "hybrid: socket path '%.40s...' is empty or "
				"longer than %zu bytes", path, sizeof(un->sun_path) - 1);
	return 0;
}

/* Parse "OK <decimal>\n" exactly; returns 0 and the port, or -1. */
static int parse_ok(const char *line, size_t n, uint32_t *port)
{
	uint64_t v = 0;
	size_t i;

	if (n < 5 || memcmp(line, "OK ", 3) != 0 || line[n - 1] != '\n')
		return -1;
	for (i = 3; i < n - 1; i++) {
		if (line[i] < '0' || line[i] > '9' || i > 12)
			return -1;
		v = v * 10 + (uint64_t)(line[i] - '0');
	}
	if (v > UINT32_MAX)
		return -1;
	*port = (uint32_t)v;
	return 0;
}

static int read_reply(vsx_sock *s, int64_t deadline, uint32_t *port)
{
	char buf[VSX_HYBRID_OK_MAX + 1];
	size_t have = 0;
	char *nl;
	ssize_t r;
	int ev;

	/* Peek until a newline shows up, then consume just that line. */
	for (;;) {
		ev = vsx__wait_fd(s->fd, POLLIN | POLLRDHUP, deadline);
		if (ev == 0)
			return vsx__err(-ETIMEDOUT, "hybrid: no reply to CONNECT within %d ms",
					s->connect_timeout_ms);
		if (ev < 0)
			return vsx__err(ev, "hybrid: poll: %s", strerror(-ev));
		r = recv(s->fd, buf, VSX_HYBRID_OK_MAX, MSG_PEEK | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r < 0 && errno != ECONNRESET)
			return vsx__errno("hybrid: recv");
		if (r <= 0)
			return vsx__err(-ECONNREFUSED, "hybrid: %s closed the connection: "
					"port %u refused", s->peer.path, s->peer.port);
		nl = memchr(buf, '\n', (size_t)r);
		if (nl)
			break;
		if (r >= VSX_HYBRID_OK_MAX)
			return vsx__err(-EPROTO, "hybrid: reply to CONNECT is too long");
		/* The peer shut down before the poll: all it sent is in the peek. */
		if (ev & (POLLRDHUP | POLLHUP))
			return vsx__err(-EPROTO, "hybrid: %s closed the connection in the "
					"middle of the reply to CONNECT", s->peer.path);
		if ((size_t)r == have) {
			/* Nothing new since the last peek: wait for more. */
			if (vsx__now_ms() >= deadline)
				return vsx__err(-ETIMEDOUT, "hybrid: incomplete reply to CONNECT");
			usleep(1000);
		}
		have = (size_t)r;
	}
	r = recv(s->fd, buf, (size_t)(nl - buf + 1), 0);
	if (r != nl - buf + 1)
		return vsx__err(-EPROTO, "hybrid: short read of the reply");
	if (parse_ok(buf, (size_t)r, port) < 0) {
		buf[r - 1] = '\0';
		return vsx__err(-EPROTO, "hybrid: malformed reply to CONNECT: '%.24s'", buf);
	}
	return 0;
}

static int hy_connect(vsx_sock *s, const struct vsx_addr *a,
		      const struct vsx_opts *o)
{
	int64_t deadline = vsx__now_ms() + s->connect_timeout_ms;
	struct sockaddr_un un;
	char line[32];
	uint32_t hport = 0;
	int rc, n, ev, err = 0;

	(void)o;
	if (s->type != SOCK_STREAM)
		return vsx__err(-ESOCKTNOSUPPORT, "hybrid: only stream sockets");
	if (a->port == VSX_PORT_ANY)
		return vsx__err(-EINVAL, "hybrid: cannot connect to port 'any'");
	if (!hy_state(s, o))
		return vsx__err(-ENOMEM, "out of memory");
	rc = unix_addr(&un, a->path);
	if (rc < 0)
		return rc;
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->fd < 0)
		return vsx__errno("hybrid: socket");
	if (connect(s->fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		if (errno != EINPROGRESS && errno != EAGAIN)
			return vsx__err(errno == ENOENT || errno == ECONNREFUSED
						? -ECONNREFUSED : -errno,
					"hybrid: connect to %s: %s", a->path, strerror(errno));
		ev = vsx__wait_fd(s->fd, POLLOUT, deadline);
		if (ev == 0)
			return vsx__err(-ETIMEDOUT, "hybrid: connect to %s timed out", a->path);
		getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &(socklen_t){ sizeof(err) });
		if (err)
			return vsx__err(-err, "hybrid: connect to %s: %s", a->path,
					strerror(err));
	}
	n = snprintf(line, sizeof(line), "CONNECT %u\n", a->port);
	if (send(s->fd, line, (size_t)n, MSG_NOSIGNAL) != n)
		return vsx__err(-ECONNREFUSED, "hybrid: %s: could not send CONNECT", a->path);
	rc = read_reply(s, deadline, &hport);
	if (rc < 0)
		return rc;
	s->local.kind = VSX_ADDR_UNIX;
	snprintf(s->local.path, sizeof(s->local.path), "%s", a->path);
	s->local.port = hport;
	if (!(s->flags & VSX_O_NONBLOCK))
		vsx__set_nonblock(s->fd, 0);
	if (s->tx_buffer)
		return vsx__err(-EOPNOTSUPP, "hybrid: no send buffer to set; the "
				"sender is bounded by the guest's credit");
	if (s->rx_buffer)
		return hy_set_buffer(s, VSX_RX, s->rx_buffer);
	return 0;
}

static int hy_listen(vsx_sock *s, const struct vsx_addr *a,
		     const struct vsx_opts *o)
{
	struct sockaddr_un un;
	char path[VSX_PATH_MAX + 16];
	int rc;

	(void)o;
	if (s->type != SOCK_STREAM && s->type != SOCK_SEQPACKET)
		return vsx__err(-ESOCKTNOSUPPORT, "hybrid: stream or seqpacket sockets only");
	if (a->port == VSX_PORT_ANY)
		return vsx__err(-EINVAL, "hybrid: listening needs a port");
	snprintf(path, sizeof(path), "%s_%u", a->path, a->port);
	rc = unix_addr(&un, path);
	if (rc < 0)
		return rc;
	s->fd = socket(AF_UNIX, s->type | SOCK_CLOEXEC, 0);
	if (s->fd < 0)
		return vsx__errno("hybrid: socket");
	/* Replace a stale socket file only: nobody accepts on it. */
	rc = vsx__unix_bind(s->fd, path, VSX__MODE_UMASK, VSX__GID_KEEP, NULL);
	if (rc == -EADDRINUSE || rc == -ENOTSOCK)
		return vsx__err(-EADDRINUSE, "hybrid: %s is in use", path);
	if (rc < 0)
		return vsx__err(rc, "hybrid: bind %s: %s", path, strerror(-rc));
	if (!hy_state(s, o) || !(((struct hy *)s->trans)->bound = strdup(path))) {
		unlink(path);
		return vsx__err(-ENOMEM, "out of memory");
	}
	if (listen(s->fd, s->backlog) < 0)
		return vsx__errno("hybrid: listen");
	if (s->flags & VSX_O_NONBLOCK)
		vsx__set_nonblock(s->fd, 1);
	return 0;
}

static int hy_accept(vsx_sock *l, vsx_sock *s)
{
	int fl = SOCK_CLOEXEC | ((l->flags & VSX_O_NONBLOCK) ? SOCK_NONBLOCK : 0);

	do
		s->fd = accept4(l->fd, NULL, NULL, fl);
	while (s->fd < 0 && errno == EINTR);
	if (s->fd < 0)
		return errno == EAGAIN ? -EAGAIN : vsx__errno("hybrid: accept");
	return 0;
}

/* A listener's PATH_PORT is removed with it. */
static void hy_destruct(vsx_sock *s)
{
	struct hy *h = s->trans;

	if (!h)
		return;
	if (h->bound) {
		unlink(h->bound);
		free(h->bound);
	}
	free(h);
	s->trans = NULL;
}

/* Ask vsxd to change the credit it gives the guest for this connection. */
static int hy_set_buffer(vsx_sock *s, int which, size_t bytes)
{
	char why[VSX_CTL_VALUE_MAX + 1] = "";
	struct hy *h = s->trans;
	struct vsx_ctl_req req;
	char *reply = NULL;
	int rc, rerr = 0;

	if (which & VSX_TX)
		return vsx__err(-EOPNOTSUPP, "hybrid: no send buffer to set; the "
				"sender is bounded by the guest's credit");
	if (!h || s->local.kind != VSX_ADDR_UNIX)
		return vsx__err(-ENOTCONN, "hybrid: not a connected hybrid socket");
	vsx__ctl_req_init(&req, VSX_CTL_SET_BUFFER);
	vsx__ctl_req_add(&req, VSX_CTL_K_UDS_PATH, s->local.path);
	vsx__ctl_req_addf(&req, VSX_CTL_K_HOST_PORT, "%u", s->local.port);
	vsx__ctl_req_addf(&req, VSX_CTL_K_RX, "%zu", bytes);
	rc = vsx__ctl_req_end(&req);
	if (rc < 0)     /* what vsxd would refuse (EINVAL): not sent */
		return vsx__err(-EINVAL, "hybrid: vsxd refused the buffer change: the "
				"socket path is not printable ASCII");
	rc = vsx__ctl_call(h->control, req.buf, CTL_TIMEOUT_MS, &reply, &rerr);
	if (rc == 0 && rerr && !vsx__ctl_reply_error(reply, why, sizeof(why)))
		snprintf(why, sizeof(why), "%s", strerror(rerr));
	free(reply);
	if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -EPROTO)
		return vsx__err(-EOPNOTSUPP, "hybrid: the buffer is the backend's; no vsxd "
				"answers at %s to change it", h->control);
	if (rc == -EACCES || rerr == EACCES)
		return ctl_denied("hybrid", h->control);
	if (rc < 0)
		return vsx__err(rc, "hybrid: vsxd control %s: %s", h->control, strerror(-rc));
	if (rerr == ENOENT)
		return vsx__err(-EOPNOTSUPP, "hybrid: %s is not served by the vsxd at %s",
				s->local.path, h->control);
	if (rerr)
		return vsx__err(-rerr, "hybrid: vsxd refused the buffer change: %s", why);
	h->rx_buffer = (uint32_t)bytes;
	return 0;
}

static int hy_get_buffer(const vsx_sock *s, int which, size_t *bytes)
{
	const struct hy *h = s->trans;

	if (which == VSX_TX)
		return vsx__err(-EOPNOTSUPP, "hybrid: no send buffer");
	if (!h || !h->rx_buffer)
		return vsx__err(-ENODATA, "hybrid: the backend's buffer is not known "
				"until set through vsxd");
	*bytes = h->rx_buffer;
	return 0;
}

/*
 * The credit of a connection we made, as vsxd keeps it for its host end
 * (show uds-path= host-port=, protocol version 2): vsxd sends and receives
 * for us, so its buf_alloc and fwd_cnt are ours, the guest's are the
 * peer's, and its tx-free/rx-free are what we may send and what the guest
 * may. A server that is not vsxd (Firecracker, Cloud Hypervisor,
 * vhost-device-vsock), no vsxd, or an older one leaves the fields empty
 * and VSX_INFO_CREDIT clear: that is not an error of vsx_info.
 */
static int hy_info(const vsx_sock *s, struct vsx_info *out)
{
	static const char *const keys[6] = {
		VSX_CTL_K_BUF_ALLOC, VSX_CTL_K_FWD_CNT, VSX_CTL_K_PEER_BUF_ALLOC,
		VSX_CTL_K_PEER_FWD_CNT, VSX_CTL_K_TX_FREE, VSX_CTL_K_RX_FREE,
	};
	const struct hy *h = s->trans;
	struct vsx_ctl_req req;
	struct vsx_kvs kvs;
	uint32_t v[6];
	uint64_t n;
	char *reply = NULL;
	const char *val;
	int rc, rerr = 0;
	unsigned i;

	if (!h || s->local.kind != VSX_ADDR_UNIX ||
	    (s->state != VSX_STATE_CONNECTED && s->state != VSX_STATE_CLOSING))
		return 0;
	vsx__ctl_req_init(&req, VSX_CTL_SHOW);
	vsx__ctl_req_add(&req, VSX_CTL_K_UDS_PATH, s->local.path);
	vsx__ctl_req_addf(&req, VSX_CTL_K_HOST_PORT, "%u", s->local.port);
	if (vsx__ctl_req_end(&req) < 0)
		return 0;
	rc = vsx__ctl_call(h->control, req.buf, INFO_TIMEOUT_MS, &reply, &rerr);
	if (rc < 0 || rerr) {
		free(reply);
		return 0;
	}
	rc = vsx__ctl_parse_reply(reply, strlen(reply) - 1, &kvs);
	for (i = 0; rc == 0 && i < 6; i++) {
		val = vsx__ctl_get(&kvs, keys[i]);
		if (!val || vsx__parse_dec(val, strlen(val), UINT32_MAX, &n) < 0)
			rc = -EPROTO;
		else
			v[i] = (uint32_t)n;
	}
	vsx__ctl_kvs_free(&kvs);
	free(reply);
	if (rc < 0)
		return 0;
	out->buf_alloc = v[0];
	out->fwd_cnt = v[1];
	out->peer_buf_alloc = v[2];
	out->peer_fwd_cnt = v[3];
	out->tx_free = v[4];
	out->rx_free = v[5];
	if (!out->rx_buffer)
		out->rx_buffer = v[0];  /* the credit vsxd gives the guest for us */
	out->flags |= VSX_INFO_CREDIT;
	return 0;
}

/* vm:NAME:PORT: resolve NAME through vsxd, then the hybrid handshake. */
static int vm_connect(vsx_sock *s, const struct vsx_addr *a,
		      const struct vsx_opts *o)
{
	struct vsx_addr ua = { .kind = VSX_ADDR_UNIX, .port = a->port };
	const char *ctl = control_path(o), *path;
	struct vsx_ctl_req req;
	char *reply = NULL;
	struct vsx_kvs kvs;
	int64_t started;
	int rc, rerr = 0;

	vsx__ctl_req_init(&req, VSX_CTL_RESOLVE);
	vsx__ctl_req_add(&req, VSX_CTL_K_VM, a->path);
	rc = vsx__ctl_req_end(&req);
	if (rc < 0)
		return vsx__err(-EINVAL, "vm: '%s' cannot be a VM name", a->path);
	started = vsx__now_ms();
	rc = vsx__ctl_call(ctl, req.buf, s->connect_timeout_ms, &reply, &rerr);
	if (rc == -ENOENT || rc == -ECONNREFUSED)
		return vsx__err(-ENODEV, "vm: no vsxd answers at %s", ctl);
	if (rc == -EACCES)
		return ctl_denied("vm", ctl);
	if (rc < 0)
		return vsx__err(rc, "vm: vsxd control %s: %s", ctl, strerror(-rc));
	if (rerr == ENOENT) {
		free(reply);
		return vsx__err(-EHOSTUNREACH, "vm: vsxd does not know a VM named '%s'", a->path);
	}
	if (rerr == EACCES) {
		free(reply);
		return ctl_denied("vm", ctl);
	}
	if (rerr) {
		char why[VSX_CTL_VALUE_MAX + 1];

		if (!vsx__ctl_reply_error(reply, why, sizeof(why)))
			snprintf(why, sizeof(why), "%s", strerror(rerr));
		free(reply);
		return vsx__err(-rerr, "vm: vsxd cannot resolve '%s': %s", a->path, why);
	}
	/* vsx__ctl_call guarantees a complete block ending in "\n\n". */
	path = NULL;
	if (vsx__ctl_parse_reply(reply, strlen(reply) - 1, &kvs) == 0)
		path = vsx__ctl_get(&kvs, VSX_CTL_K_UDS_PATH);
	if (!path || !*path || strlen(path) >= sizeof(ua.path)) {
		vsx__ctl_kvs_free(&kvs);
		free(reply);
		return vsx__err(-EPROTO, "vm: vsxd's answer has no usable uds-path");
	}
	memcpy(ua.path, path, strlen(path) + 1);
	vsx__ctl_kvs_free(&kvs);
	free(reply);
	/* One connect timeout covers the lookup and the handshake. */
	s->connect_timeout_ms -= (int)(vsx__now_ms() - started);
	if (s->connect_timeout_ms <= 0)
		return vsx__err(-ETIMEDOUT, "vm: no time left after asking vsxd");
	rc = hy_connect(s, &ua, o);
	s->peer = *a;
	return rc;
}

const struct vsx_transport vsx__hybrid = {
	.name = "hybrid",
	.addr_kinds = 1u << VSX_ADDR_UNIX,
	/* Connections */
	.connect = hy_connect,
	.listen = hy_listen,
	.accept = hy_accept,
	.destruct = hy_destruct,
	/* Buffer knob */
	.set_buffer = hy_set_buffer,
	.get_buffer = hy_get_buffer,
	/* Inspection */
	.info = hy_info,
};

const struct vsx_transport vsx__vm = {
	.name = "vm",
	.addr_kinds = 1u << VSX_ADDR_VM,
	/* Connections */
	.connect = vm_connect,
	.destruct = hy_destruct,
	/* Buffer knob */
	.set_buffer = hy_set_buffer,
	.get_buffer = hy_get_buffer,
	/* Inspection */
	.info = hy_info,
};
