/*
 * Lifecycle: backend.h's vsxb_router_new / vsxb_router_free and
 * vsxb_vm_new / vsxb_vm_free. The one room that puts the others together
 * (a VM's vhost-user device, its hybrid listener, its place in the
 * router) and takes them apart again in order: RSTs to a live guest
 * while its queues are still ours, then the device, then the memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "vhost-user/acceptor.h"
#include "router.h"
#include "util.h"

/* ---- Router ---- */

static void vm_resume_cb(void *arg)
{
	struct vsxb_vm *vm = arg;

	vsxb__vm_resume(vm);
	vsxb__round(vm->sh);
}

int vsxb_router_new(const struct vsxu_loop *loop, vsxb_log_fn log, void *log_arg,
		   struct vsxb_router **out)
{
	struct vsxb_router *r;

	if (!loop || !loop->queue || !out)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->loop = loop;
	r->round = vsxb__round_cb;
	r->log = log;
	r->log_arg = log_arg;
	vsxb_list_init(&r->vms);
	vsxb_list_init(&r->ports);
	r->next_id = 1;
	vsxb__limits_defaults(&r->lim);
	if (vsxb__shards_init(r) < 0) {
		free(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

void vsxb_router_free(struct vsxb_router *r)
{
	if (!r)
		return;
	while (!vsxb_list_empty(&r->vms))
		vsxb_vm_free(vsxb_container_of(r->vms.next, struct vsxb_vm, node));
	while (!vsxb_list_empty(&r->ports))
		vsxb_port_free(vsxb_container_of(r->ports.next, struct vsxb_port, node));
	vsxb__shards_free(r);
	free(r);
}

/* ---- VMs ---- */

/* "a+b" -> {"a", "b"}; the array and strings are the VM's. */
static int parse_groups(struct vsxb_vm *vm, const char *spec)
{
	char *copy, *p, *tok, *save = NULL;
	unsigned n = 1;
	int rc = 0;

	for (p = (char *)spec; *p; p++)
		n += *p == '+';
	copy = strdup(spec);
	vm->groups = calloc(n, sizeof(*vm->groups));
	if (!copy || !vm->groups) {
		free(copy);
		return -ENOMEM;
	}
	for (tok = strtok_r(copy, "+", &save); tok; tok = strtok_r(NULL, "+", &save)) {
		if (!vsx__name_ok(tok, strlen(tok))) {
			rc = -EINVAL;
			break;
		}
		vm->groups[vm->ngroups] = strdup(tok);
		if (!vm->groups[vm->ngroups]) {
			rc = -ENOMEM;
			break;
		}
		vm->ngroups++;
	}
	if (!rc && (!vm->ngroups || vm->ngroups != n))
		rc = -EINVAL; /* empty group names ("a++b", "+a") */
	free(copy);
	return rc;
}

static void vm_release(struct vsxb_vm *vm)
{
	unsigned i;

	for (i = 0; i < vm->ngroups; i++)
		free(vm->groups[i]);
	free(vm->groups);
	free(vm->name);
	free(vm->socket_path);
	free(vm->uds_path);
	free(vm->hash);
	vsxb__ring_free(vm->ring);
	free(vm->iov);
	free(vm->fiov);
	free(vm);
}

static int bad_config(struct vsxb_router *r, const char *what)
{
	vsxb__log(r, VSXB_LOG_ERR, "vm config: %s", what);
	return -EINVAL;
}

static const char *listen_error(int rc)
{
	switch (rc) {
	case -ENOTSOCK:
		return "the path exists and is not a socket (only a stale socket "
		       "is replaced, never another file)";
	case -EADDRINUSE:
		return "another program listens there";
	default:
		return strerror(-rc);
	}
}

static int vm_new(struct vsxb_router *r, const struct vsxb_vm_config *cfg,
		  struct vsxb_shard *sh, struct vsxb_vm **out)
{
	const struct vsxu_loop *l;
	struct sockaddr_un un;
	struct vsxb_vm *vm;
	char name[32];
	int rc;

	if (!cfg || !out)
		return -EINVAL;
	if (cfg->guest_cid < 3 || cfg->guest_cid > 0xFFFFFFFEull)
		return bad_config(r, "guest-cid must be 3 .. 4294967294");
	if (!cfg->socket_path || !*cfg->socket_path ||
	    strlen(cfg->socket_path) >= sizeof(un.sun_path))
		return bad_config(r, "socket path missing or too long");
	/* "_4294967295" must still fit for guest connections to host ports. */
	if (cfg->uds_path && (!*cfg->uds_path ||
			      strlen(cfg->uds_path) + 11 >= sizeof(un.sun_path)))
		return bad_config(r, "uds-path empty or too long (at most 96 bytes)");
	if (cfg->name && !vsx__name_ok(cfg->name, strlen(cfg->name)))
		return bad_config(r, "name must be 1-64 of [A-Za-z0-9._-]");
	if (cfg->tx_buffer_size > VSXB_MAX_BUF_ALLOC)
		return bad_config(r, "tx-buffer-size above 1 GiB");
	if (cfg->queue_size && (cfg->queue_size & (cfg->queue_size - 1) ||
				cfg->queue_size > VSXU_VQ_MAX_SIZE))
		return bad_config(r, "queue-size must be a power of two up to 32768");
	snprintf(name, sizeof(name), "cid%llu", (unsigned long long)cfg->guest_cid);
	if (vsxb_router_vm_by_cid(r, cfg->guest_cid) ||
	    vsxb_router_vm_by_name(r, cfg->name ? cfg->name : name))
		return -EEXIST;

	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->r = r;
	vm->sh = sh;
	vm->serial = ++r->next_serial;
	l = sh->loop;
	vm->cid = cfg->guest_cid;
	vm->lfd = -1;
	vm->buf_default = cfg->tx_buffer_size ? cfg->tx_buffer_size
					      : VSXB_DEFAULT_BUF_ALLOC;
	vm->queue_size = cfg->queue_size ? cfg->queue_size : VSXB_DEFAULT_QUEUE_SIZE;
	vm->next_host_port = VSXB_HOST_PORT_FIRST;
	vsxb_list_init(&vm->node);
	vsxb_list_init(&vm->dnode);
	vsxb_list_init(&vm->conns);
	vsxb_list_init(&vm->dead);
	vsxb_list_init(&vm->pending);
	vsxb_list_init(&vm->handshakes);
	vm->name = strdup(cfg->name ? cfg->name : name);
	vm->socket_path = strdup(cfg->socket_path);
	vm->uds_path = cfg->uds_path ? strdup(cfg->uds_path) : NULL;
	vm->sock_mode = (mode_t)cfg->socket_mode;
	vm->sock_gid = cfg->socket_group ? (gid_t)cfg->socket_gid : VSX__GID_KEEP;
	vm->forward = cfg->forward;
	vm->forward_cid = cfg->forward_cid;
	vm->forward_connect = cfg->forward_connect ? cfg->forward_connect
						   : vsxb__vsock_connect;
	vm->forward_arg = cfg->forward_arg;
	vm->ring = vsxb__ring_new();
	vm->iov = calloc(VSXB_IOV_MAX, sizeof(*vm->iov));
	vm->fiov = calloc(VSXB_IOV_MAX, sizeof(*vm->fiov));
	rc = -ENOMEM;
	if (!vm->name || !vm->socket_path || (cfg->uds_path && !vm->uds_path) ||
	    !vm->ring || !vm->iov || !vm->fiov)
		goto err_vm;
	rc = parse_groups(vm, cfg->groups ? cfg->groups : VSXB_GROUP_DEFAULT);
	if (rc < 0) {
		if (rc == -EINVAL)
			bad_config(r, "groups must be names joined by '+'");
		goto err_vm;
	}
	vm->resume = l->timer(l->ctx, vm_resume_cb, vm);
	if (!vm->resume)
		goto err_vm;
	if (vm->uds_path) {
		rc = vsxb__host_listen(vm);
		if (rc < 0) {
			vsxb__log(r, VSXB_LOG_ERR, "vm %s: cannot listen on %s: %s",
				 vm->name, vm->uds_path, listen_error(rc));
			goto err_timer;
		}
		if (cfg->hold_accept)
			vsxu_acceptor_hold(vm->acc, true);
	}
	rc = vsxu_vu_new(vm->socket_path, vm->sock_mode, vm->sock_gid, l, &vsxb__vsock_ops, vm,
			&vm->vu);
	if (rc < 0) {
		vsxb__log(r, VSXB_LOG_ERR, "vm %s: cannot listen on %s: %s", vm->name,
			 vm->socket_path, listen_error(rc));
		goto err_listen;
	}
	rc = vsxu_vu_set_queue_max(vm->vu, vm->queue_size);
	if (rc < 0) {
		vsxu_vu_free(vm->vu);
		goto err_listen;
	}
	vsxb_list_add_tail(&r->vms, &vm->node);
	*out = vm;
	return 0;

err_listen:
	if (vm->uds_path)
		vsxb__host_unlisten(vm);
err_timer:
	l->timer_free(vm->resume);
err_vm:
	vm_release(vm);
	return rc;
}

int vsxb_vm_new(struct vsxb_router *r, const struct vsxb_vm_config *cfg,
	       struct vsxb_vm **out)
{
	struct vsxb_shard *sh;
	int rc;

	if (!r || !cfg)
		return -EINVAL;
	/* the shard first, so that the stop parks its thread too: the VM's
	 * watches and timers go on its loop */
	sh = vsxb__shard_get(r, cfg->loop);
	if (!sh)
		return cfg->loop->post ? -ENOMEM
				       : bad_config(r, "a loop of another thread needs post");
	sh->nvms++;          /* counted now, so that the stop parks it */
	vsxb__world_stop(r);
	rc = vm_new(r, cfg, sh, out);
	if (rc < 0)
		sh->nvms--;
	vsxb__world_start(r);
	return rc;
}

static void vm_free(struct vsxb_vm *vm)
{
	struct vsxb_shard *sh = vm->sh;
	struct vsxb_list *n;

	/* RSTs to a live guest while its queues are still ours. */
	vsxb__vm_drop_all(vm, true);
	vsxb__vm_touch(vm);
	vsxb__round(sh);
	vm->freeing = true;
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (!c->dead)
			vsxb__conn_reset(c, true);
	}
	vsxb__vm_touch(vm);
	vsxb__round(sh);
	if (vm->uds_path)
		vsxb__host_unlisten(vm);
	vsxu_vu_free(vm->vu);   /* may call stop: nothing is left to drop */
	vm->vu = NULL;
	vsxb__restart_free(vm);
	vm->live = false;
	/* Whatever stop touched is done; nothing may refer to @vm now. */
	if (vm->dirty) {
		vsxb_list_del(&vm->dnode);
		vm->dirty = false;
	}
	vsxb__vm_round(vm);
	if (vm->dirty) {
		vsxb_list_del(&vm->dnode);
		vm->dirty = false;
	}
	sh->loop->timer_free(vm->resume);
	vsxb_list_del(&vm->node);
	sh->nvms--;
	vm_release(vm);
	vsxb__round(sh); /* siblings (same shard) told of the resets */
}

void vsxb_vm_free(struct vsxb_vm *vm)
{
	struct vsxb_router *r;

	if (!vm)
		return;
	r = vm->r;
	vsxb__world_stop(r);
	vm_free(vm);
	vsxb__world_start(r);
}
