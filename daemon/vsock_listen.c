/*
 * forward-listen: the host kernel's vsock listeners of a forward-cid VM
 * (vsock_listen.h). Each accepted socket goes to the guest at once; the
 * backend answers a refusal by closing it, as for any vsxd forward. A
 * listener out of descriptors backs off (vhost-user/acceptor.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>


#include "util.h"
#include "vhost-user/acceptor.h"
#include "vhost-user/loop-event.h"
#include "vsock_listen.h"

struct vlisten_port {
	struct vsxd_vlisten *l;
	uint32_t port;
	int fd;
	struct vsxu_acceptor *acc;
};

struct vsxd_vlisten {
	struct vsxb_vm *vm;
	vsxb_log_fn log;
	struct vsxu_evloop ev;        /* the listeners' adapter over the base */
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

static void accept_cb(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
	struct vlisten_port *p = arg;
	uint64_t id;
	int r;

	(void)sa;
	(void)len;
	r = vsxb_vm_connect_fd(p->l->vm, fd, p->port, "forward-listen", &id);
	if (r < 0)
		vlog(p->l, VSXB_LOG_INFO, "vm %s: forward-listen %u: %s",
		     vsxb_vm_name(p->l->vm), p->port, strerror(-r));
}

static int listen_port(struct vlisten_port *p)
{
	struct sockaddr_vm sa = {
		.svm_family = AF_VSOCK,
		.svm_cid = VMADDR_CID_ANY,
		.svm_port = p->port,
	};
	struct vsxu_acceptor_conf ac = {
		.loop = &p->l->ev.loop,
		.cb = accept_cb,
		.arg = p,
		.log = p->l->log,
	};
	char name[96];
	int err;

	p->fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->fd < 0)
		return -errno;
	/* a live handoff's listener for this port, or a new one */
	err = vsx__inherit_take(p->fd, (struct sockaddr *)&sa, sizeof(sa));
	if (err < 0)
		goto err;
	if ((err == 0 && bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) ||
	    listen(p->fd, 128) < 0) {
		err = -errno;
		goto err;
	}
	snprintf(name, sizeof(name), "vm %s's forward-listen port %u", vsxb_vm_name(p->l->vm),
		 p->port);
	ac.fd = p->fd;
	ac.name = name;
	err = vsxu_acceptor_new(&ac, &p->acc);
	if (err < 0)
		goto err;
	return 0;
err:
	close(p->fd);
	p->fd = -1;
	return err;
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
	vsxu_evloop_init(&l->ev, base);
	for (i = 0; i < n; i++)
		l->p[i].fd = -1;
	for (i = 0; i < n; i++) {
		l->p[i].l = l;
		l->p[i].port = ports[i];
		r = listen_port(&l->p[i]);
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
		vsxu_acceptor_free(l->p[i].acc);
		close(l->p[i].fd);
	}
	free(l);
}
