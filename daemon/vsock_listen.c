/*
 * forward-listen: the host kernel's vsock listeners of a forward-cid VM
 * (vsock_listen.h). Each accepted socket goes to the guest at once; the
 * backend answers a refusal by closing it, as for any vsxd forward.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include <event2/event.h>

#include "util.h"
#include "vsock_listen.h"

struct vlisten_port {
	struct vsxd_vlisten *l;
	uint32_t port;
	int fd;
	struct event *ev;
};

struct vsxd_vlisten {
	struct vsxb_vm *vm;
	vsxb_log_fn log;
	size_t n;
	struct vlisten_port p[];
};

static void vlog(const struct vsxd_vlisten *l, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void vlog(const struct vsxd_vlisten *l, int prio, const char *fmt, ...)
{
	va_list ap;

	if (!l->log)
		return;
	va_start(ap, fmt);
	vsx__logv(l->log, NULL, prio, fmt, ap);
	va_end(ap);
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct vlisten_port *p = arg;
	uint64_t id;
	int fd, r;

	(void)what;
	fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			vlog(p->l, VSXB_LOG_WARNING, "vm %s: forward-listen %u: accept: %s",
			     vsxb_vm_name(p->l->vm), p->port, strerror(errno));
		return;
	}
	r = vsxb_vm_connect_fd(p->l->vm, fd, p->port, "forward-listen", &id);
	if (r < 0)
		vlog(p->l, VSXB_LOG_INFO, "vm %s: forward-listen %u: %s",
		     vsxb_vm_name(p->l->vm), p->port, strerror(-r));
}

static int listen_port(struct event_base *base, struct vlisten_port *p)
{
	struct sockaddr_vm sa = {
		.svm_family = AF_VSOCK,
		.svm_cid = VMADDR_CID_ANY,
		.svm_port = p->port,
	};
	int err;

	p->fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->fd < 0)
		return -errno;
	if (bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(p->fd, 128) < 0)
		goto err;
	p->ev = event_new(base, p->fd, EV_READ | EV_PERSIST, accept_cb, p);
	if (!p->ev || event_add(p->ev, NULL) < 0) {
		errno = ENOMEM;
		goto err;
	}
	return 0;
err:
	err = errno;
	if (p->ev)
		event_free(p->ev);
	p->ev = NULL;
	close(p->fd);
	p->fd = -1;
	return -err;
}

int vsxd_vlisten_new(struct event_base *base, struct vsxb_vm *vm, const uint32_t *ports,
		     size_t n, vsxb_log_fn log, struct vsxd_vlisten **out,
		     uint32_t *bad_port)
{
	struct vsxd_vlisten *l;
	size_t i;
	int r;

	*out = NULL;
	l = calloc(1, sizeof(*l) + n * sizeof(l->p[0]));
	if (!l)
		return -ENOMEM;
	l->vm = vm;
	l->log = log;
	for (i = 0; i < n; i++)
		l->p[i].fd = -1;
	for (i = 0; i < n; i++) {
		l->p[i].l = l;
		l->p[i].port = ports[i];
		r = listen_port(base, &l->p[i]);
		l->n = i;
		if (r < 0) {
			*bad_port = ports[i];
			vsxd_vlisten_free(l);
			return r;
		}
	}
	l->n = n;
	*out = l;
	return 0;
}

void vsxd_vlisten_free(struct vsxd_vlisten *l)
{
	size_t i;

	if (!l)
		return;
	for (i = 0; i < l->n; i++) {
		event_free(l->p[i].ev);
		close(l->p[i].fd);
	}
	free(l);
}
