/*
 * The hybrid listener of a VM (its uds_path), compatible with Firecracker /
 * Cloud Hypervisor / vhost-device-vsock hybrid vsock: a host program
 * connects and writes "CONNECT <port>\n" (decimal, at most
 * VSX_HYBRID_CONNECT_MAX bytes, within the router's handshake timeout; junk, a
 * missing newline, extra spaces, a sign, a value above 2^32-2 close the
 * socket without a reply, as Firecracker does). The line is consumed
 * exactly (peek, then read up to the newline), so bytes the program sends
 * right behind it stay in the socket for the guest; the socket then goes
 * to the host peer (vsxb__host_hybrid), which asks the guest. At most
 * VSXB_MAX_HANDSHAKES clients may be sending their line at once.
 *
 * Every attempt that goes no further is one REFUSE event (a log line, rate
 * limited, and conns-refused): a bad line (bad-handshake), no line in time
 * (handshake-timeout), the device not running when the line is complete
 * (vm-not-running, with the port asked for: QEMU not there yet, the
 * guest's driver not loaded, the device broken) and the handshake limit
 * (limit=handshakes). A client that closes before sending a byte (a
 * liveness probe: vsx__unix_bind's, say) asked nothing and is not one.
 *
 * The listener survives running out of descriptors as every listener of
 * vsx does (vhost-user/acceptor.h: it backs off, its connections wait in
 * the backlog, its log lines are rate limited).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer.h"
#include "util.h"
#include "vhost-user/acceptor.h"

struct hs {
	struct vsxb_list node;        /* vm->handshakes */
	struct vsxb_vm *vm;
	int fd;
	struct vsxu_watch *w;
	struct vsxu_timer *t;
	unsigned n;
	char buf[VSX_HYBRID_CONNECT_MAX];
};

static const struct vsxu_loop *loop_of(const struct vsxb_vm *vm)
{
	return vm->sh->loop;
}

static void hs_free(struct hs *h)
{
	const struct vsxu_loop *l = loop_of(h->vm);

	if (h->w)
		l->unwatch(h->w);
	if (h->t)
		l->timer_free(h->t);
	if (h->fd >= 0)
		close(h->fd);
	vsxb_list_del(&h->node);
	h->vm->nhandshakes--;
	free(h);
}

/* "CONNECT <decimal port>\n", nothing else (backend-int.h). */
int vsxb__host_parse_connect(const char *s, size_t n, uint32_t *port)
{
	uint64_t v;

	if (n < 10 || memcmp(s, "CONNECT ", 8) != 0 || s[n - 1] != '\n')
		return -1;
	/* 2^32-1 is VMADDR_PORT_ANY: not a port to connect to */
	if (vsx__parse_dec(s + 8, n - 9, UINT32_MAX - 1, &v) < 0)
		return -1;
	*port = (uint32_t)v;
	return 0;
}

/* One REFUSE event for a hybrid client of @vm that asked for @port
 * (VSXB_PORT_UNKNOWN: no port yet). */
static void refuse(struct vsxb_vm *vm, uint32_t port, int reason, int limit)
{
	vsxb__refuse(vm, VIRTIO_VSOCK_TYPE_STREAM, port, VSOCK_CID_HOST, VSXB_PORT_UNKNOWN,
		     false, reason, 0, limit);
}

/* The listening socket at @path, mode @mode (0: 0600) and group @gid (a
 * stale socket file is replaced, nothing else): 0 and *@out, or a
 * negative errno. */
static int unix_listen(const char *path, mode_t mode, gid_t gid, int *out)
{
	int fd, rc;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = vsx__unix_bind(fd, path, mode ? mode : 0600, gid, NULL);
	if (rc == 0 && listen(fd, 128) < 0) {
		rc = -errno;
		unlink(path);
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

static void hs_cb(int fd, int events, void *arg)
{
	struct hs *h = arg;
	struct vsxb_vm *vm = h->vm;
	char tmp[VSX_HYBRID_CONNECT_MAX];
	size_t want = sizeof(h->buf) - h->n, take;
	uint32_t port;
	ssize_t r;
	char *nl;

	(void)events;
	r = recv(fd, tmp, want, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (r < 0 || (r == 0 && h->n == 0))
		goto drop;      /* an error, or a probe that asked nothing */
	if (r == 0)
		goto bad;       /* closed in the middle of its line */
	nl = memchr(tmp, '\n', (size_t)r);
	take = nl ? (size_t)(nl - tmp) + 1 : (size_t)r;
	/* Consume the line exactly: what follows belongs to the guest. */
	if (recv(fd, h->buf + h->n, take, MSG_DONTWAIT) != (ssize_t)take)
		goto drop;
	h->n += (unsigned)take;
	if (!nl) {
		if (h->n >= sizeof(h->buf))
			goto bad;
		return;
	}
	if (vsxb__host_parse_connect(h->buf, h->n, &port) < 0)
		goto bad;
	if (!vm->live || vm->broken) {
		refuse(vm, port, VSXB_REASON_VM_NOT_RUNNING, 0);
		goto drop;
	}
	h->fd = -1;
	hs_free(h);
	vsxb__host_hybrid(vm, fd, port);
	vsxb__round_owe(vm->sh);
	return;
bad:
	refuse(vm, VSXB_PORT_UNKNOWN, VSXB_REASON_BAD_HANDSHAKE, 0);
drop:
	hs_free(h);
}

static void hs_timeout(void *arg)
{
	struct hs *h = arg;

	refuse(h->vm, VSXB_PORT_UNKNOWN, VSXB_REASON_HANDSHAKE_TIMEOUT, 0);
	hs_free(h);
}

static void hs_new(struct vsxb_vm *vm, int fd)
{
	const struct vsxu_loop *l = loop_of(vm);
	struct hs *h;

	h = calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		return;
	}
	h->vm = vm;
	h->fd = fd;
	vsxb_list_add_tail(&vm->handshakes, &h->node);
	vm->nhandshakes++;
	h->w = l->watch(l->ctx, fd, VSXU_EV_READ, hs_cb, h);
	h->t = l->timer(l->ctx, hs_timeout, h);
	if (!h->w || !h->t) {
		hs_free(h);
		return;
	}
	l->timer_arm(h->t, vm->r->lim.handshake_ms);
}

static void accept_cb(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
	struct vsxb_vm *vm = arg;

	(void)sa;
	(void)len;
	if (vm->nhandshakes >= VSXB_MAX_HANDSHAKES) {
		refuse(vm, VSXB_PORT_UNKNOWN, VSXB_REASON_LIMIT, VSXB_LIMIT_HANDSHAKES);
		close(fd);
		return;
	}
	hs_new(vm, fd);
}

int vsxb__host_listen(struct vsxb_vm *vm)
{
	const struct vsxu_loop *l = loop_of(vm);
	struct vsxu_acceptor_conf ac = {
		.loop = l,
		.cb = accept_cb,
		.arg = vm,
		.log = vm->r->log,
		.log_arg = vm->r->log_arg,
	};
	char name[256];
	int rc;

	rc = unix_listen(vm->uds_path, vm->sock_mode, vm->sock_gid, &vm->lfd);
	if (rc < 0)
		return rc;
	snprintf(name, sizeof(name), "vm %s's uds-path %s", vm->name, vm->uds_path);
	ac.fd = vm->lfd;
	ac.name = name;
	rc = vsxu_acceptor_new(&ac, &vm->acc);
	if (rc < 0)
		vsxb__host_unlisten(vm);
	return rc;
}

void vsxb__host_unlisten(struct vsxb_vm *vm)
{
	while (!vsxb_list_empty(&vm->handshakes))
		hs_free(vsxb_container_of(vm->handshakes.next, struct hs, node));
	vsxu_acceptor_free(vm->acc);
	vm->acc = NULL;
	if (vm->lfd >= 0) {
		close(vm->lfd);
		unlink(vm->uds_path);
	}
	vm->lfd = -1;
}
