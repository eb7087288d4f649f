/*
 * The router: what the VMs of one process share (struct vsxb_router, the
 * only cross-VM state): the VM registry and its lookups, the limits and
 * settings of backend.h, groups and sibling lookup, the routing of a
 * guest REQUEST that has no connection yet (to a host port's handler, to
 * a host socket at uds_path_<port>, to a sibling VM sharing a group with
 * it, or refused), the handlers of host ports that vsxd's forwards
 * register, and the introspection and control calls of backend.h (list,
 * set-buffer, close, attach a descriptor). It creates connections only
 * through the peers' own functions, and changes them only through the
 * connection API.
 *
 * Every backend.h call here runs on the control thread; those that read or
 * change VM state do it in a world stop (shard.c), whichever thread serves
 * the VM.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "router.h"
#include "util.h"

/* ---- Settings and lookups ---- */

void vsxb__router_set_timeouts(struct vsxb_router *r, unsigned handshake_ms,
			      unsigned connect_ms, unsigned linger_ms)
{
	vsxb__world_stop(r);
	if (handshake_ms)
		r->lim.handshake_ms = handshake_ms;
	if (connect_ms)
		r->lim.connect_ms = connect_ms;
	if (linger_ms)
		r->lim.linger_ms = linger_ms;
	vsxb__world_start(r);
}

void vsxb_router_set_conn_events(struct vsxb_router *r, vsxb_conn_event_fn fn, void *arg)
{
	vsxb__world_stop(r);
	r->ev_fn = fn;
	r->ev_arg = arg;
	vsxb__world_start(r);
}

void vsxb__limits_defaults(struct vsxb_router_limits *l)
{
	if (!l->max_conns_per_vm)
		l->max_conns_per_vm = VSXB_DEFAULT_MAX_CONNS_PER_VM;
	if (!l->handshake_ms)
		l->handshake_ms = VSXB_DEFAULT_HANDSHAKE_MS;
	if (!l->connect_ms)
		l->connect_ms = VSXB_DEFAULT_CONNECT_MS;
	if (!l->linger_ms)
		l->linger_ms = VSXB_DEFAULT_LINGER_MS;
}

int vsxb_router_set_limits(struct vsxb_router *r, const struct vsxb_router_limits *l)
{
	struct vsxb_router_limits n;

	if (!l || (l->max_conn_memory && l->max_conn_memory < VSXB_MIN_CONN_MEMORY) ||
	    l->handshake_ms > VSXB_MAX_TIMEOUT_MS || l->connect_ms > VSXB_MAX_TIMEOUT_MS ||
	    l->linger_ms > VSXB_MAX_TIMEOUT_MS)
		return -EINVAL;
	n = *l;
	vsxb__limits_defaults(&n);
	vsxb__world_stop(r);
	r->lim = n;
	vsxb__world_start(r);
	return 0;
}

void vsxb_router_get_limits(const struct vsxb_router *r, struct vsxb_router_limits *out)
{
	*out = r->lim;
}

void vsxb_router_get_stats(const struct vsxb_router *r, struct vsxb_router_stats *out)
{
	*out = (struct vsxb_router_stats){
		.conns = vsxb_load(&r->nconns),
		.opened = vsxb_load(&r->st.opened),
		.refused = vsxb_load(&r->st.refused),
		.refused_limit_vm = vsxb_load(&r->st.refused_limit_vm),
		.refused_limit_conns = vsxb_load(&r->st.refused_limit_conns),
		.reset_limit_memory = vsxb_load(&r->st.reset_limit_memory),
	};
}

void vsxb_router_add_stats(struct vsxb_router *r, const struct vsxb_router_stats *add)
{
	vsxb_add(&r->st.opened, add->opened);
	vsxb_add(&r->st.refused, add->refused);
	vsxb_add(&r->st.refused_limit_vm, add->refused_limit_vm);
	vsxb_add(&r->st.refused_limit_conns, add->refused_limit_conns);
	vsxb_add(&r->st.reset_limit_memory, add->reset_limit_memory);
}

void vsxb__router_set_counter_base(struct vsxb_router *r, uint32_t base)
{
	vsxb__world_stop(r);
	r->counter_base = base;
	vsxb__world_start(r);
}

struct vsxb_vm *vsxb_router_vm_by_name(struct vsxb_router *r, const char *name)
{
	struct vsxb_list *n;

	if (!name)
		return NULL;
	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = vsxb_container_of(n, struct vsxb_vm, node);

		if (!strcmp(vm->name, name))
			return vm;
	}
	return NULL;
}

struct vsxb_vm *vsxb_router_vm_by_cid(struct vsxb_router *r, uint64_t cid)
{
	struct vsxb_list *n;

	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = vsxb_container_of(n, struct vsxb_vm, node);

		if (vm->cid == cid)
			return vm;
	}
	return NULL;
}

const char *vsxb_vm_name(const struct vsxb_vm *vm)
{
	return vm->name;
}

/* ---- Routing ---- */

bool vsxb__share_group(const struct vsxb_vm *a, const struct vsxb_vm *b)
{
	unsigned i, j;

	for (i = 0; i < a->ngroups; i++)
		for (j = 0; j < b->ngroups; j++)
			if (!strcmp(a->groups[i], b->groups[j]))
				return true;
	return false;
}

/* The VM reachable as @cid from @from (common group, live), or NULL. */
static struct vsxb_vm *sibling(struct vsxb_vm *from, uint64_t cid)
{
	struct vsxb_vm *to = vsxb_router_vm_by_cid(from->r, cid);

	if (!to || to == from || !vsxb__share_group(from, to))
		return NULL;
	/* another thread's VM: its state is read there (peer_xsib.c) */
	if (to->sh != from->sh)
		return to;
	if (!to->live || to->broken || to->freeing)
		return NULL;
	return to;
}

void vsxb__router_request(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h)
{
	struct vsxb_port *p;
	struct vsxb_vm *to;
	int lim;

	if (h->op != VIRTIO_VSOCK_OP_REQUEST) {
		vsxb__orphan_rst(vm, h);
		return;
	}
	lim = vsxb__conn_limit(vm, 1);
	if (lim) {
		vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
			    VSXB_REASON_LIMIT, 0, lim);
		vsxb__orphan_rst(vm, h);
		return;
	}
	if (h->dst_cid == VSOCK_CID_HOST) {
		p = vsxb__port_find(vm->r, vm, h->dst_port);
		if (p)
			vsxb__host_port_request(vm, p, h);
		else if (vm->forward)
			vsxb__host_forward(vm, h);
		else
			vsxb__host_connect(vm, h);
		return;
	}
	to = sibling(vm, h->dst_cid);
	if (to && to->sh != vm->sh) {
		vsxb__xsib_request(vm, to, h);
		return;
	}
	if (to) {
		vsxb__sib_request(vm, to, h);
		return;
	}
	vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
		    VSXB_REASON_REFUSED, EHOSTUNREACH, 0);
	vsxb__orphan_rst(vm, h);
}

/* ---- Introspection and control ---- */

static int vm_foreach(struct vsxb_vm *vm, vsxb_conn_cb cb, void *arg)
{
	struct vsxb_conn_info ci;
	struct vsxb_list *n;
	int rc;

	/* Dead connections stay on the list until the round ends, so the
	 * walk survives a callback that closes connections. */
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (c->dead)
			continue;
		vsxb__conn_info(c, &ci);
		rc = cb(&ci, arg);
		if (rc)
			return rc;
	}
	return 0;
}

int vsxb_router_foreach_conn(struct vsxb_router *r, struct vsxb_vm *vm,
			    vsxb_conn_cb cb, void *arg)
{
	struct vsxb_list *n;
	int rc = 0;

	if (!cb)
		return -EINVAL;
	vsxb__world_stop(r);
	if (vm) {
		rc = vm_foreach(vm, cb, arg);
	} else {
		for (n = r->vms.next; n != &r->vms && !rc; n = n->next)
			rc = vm_foreach(vsxb_container_of(n, struct vsxb_vm, node), cb,
					arg);
	}
	vsxb__round_all(r);
	vsxb__world_start(r);
	return rc;
}

static struct conn *conn_by_id(struct vsxb_router *r, uint64_t id)
{
	struct vsxb_list *n;
	struct conn *c;

	for (n = r->vms.next; n != &r->vms; n = n->next) {
		c = vsxb__vm_conn(vsxb_container_of(n, struct vsxb_vm, node), id);
		if (c)
			return c;
	}
	return NULL;
}

/* The operator's buf_alloc for @c: its peer adapts (ops->set_buffer),
 * the guest hears of it at once (unless it has not answered yet). Here,
 * above the peers, not in the connection API they call back. */
static void conn_set_buffer(struct conn *c, uint32_t bytes)
{
	c->cr.buf_alloc = bytes;
	if (c->ops->set_buffer)
		c->ops->set_buffer(c);
	if (c->state != VSXB_CONN_CONNECTING)
		vsxb__conn_ctrl(c, C_CREDIT_REPLY);
}

int vsxb_router_conn_set_buffer(struct vsxb_router *r, uint64_t id, uint32_t bytes)
{
	struct conn *c;
	int rc = -ENOENT;

	if (!bytes || bytes > VSXB_MAX_BUF_ALLOC || vsxb__buf_cap(r, bytes) != bytes)
		return -EINVAL;
	vsxb__world_stop(r);
	c = conn_by_id(r, id);
	if (c) {
		conn_set_buffer(c, bytes);
		vsxb__round_all(r);
		rc = 0;
	}
	vsxb__world_start(r);
	return rc;
}

/* A control close of @c: SHUTDOWN both ways, RST after linger (the
 * peer's ops->end VSXB_END_CLOSE, else the engine's shutdown, after which
 * the peer re-evaluates what to read: ops->sync). Here, above the peers,
 * not in the connection API they call back. */
static void conn_close(struct conn *c)
{
	if (c->dead)
		return;
	if (c->state == VSXB_CONN_CONNECTING) {
		vsxb__conn_reset(c, false);
		return;
	}
	if (c->ops->end && c->ops->end(c, VSXB_END_CLOSE))
		return;
	if (c->draining)
		return; /* the guest had its RST: nothing to shut */
	vsxb__conn_shutdown(c, VSXB_SHUT_BOTH);
	if (!c->dead && c->ops->sync)
		c->ops->sync(c);
}

int vsxb_router_conn_close(struct vsxb_router *r, uint64_t id, bool reset)
{
	struct conn *c;
	int rc = -ENOENT;

	vsxb__world_stop(r);
	c = conn_by_id(r, id);
	if (c) {
		vsxb__conn_why(c, reset ? VSXB_REASON_CONTROL_RESET
					: VSXB_REASON_CONTROL_CLOSE, 0);
		if (reset)
			vsxb__conn_reset(c, false);
		else
			conn_close(c);
		vsxb__round_all(r);
		rc = 0;
	}
	vsxb__world_start(r);
	return rc;
}

/* ---- Descriptors handed over (vsxd forwards) ---- */

struct vsxb_port *vsxb__port_find(struct vsxb_router *r, const struct vsxb_vm *vm,
				uint32_t port)
{
	struct vsxb_list *n;

	for (n = r->ports.next; n != &r->ports; n = n->next) {
		struct vsxb_port *p = vsxb_container_of(n, struct vsxb_port, node);

		if (p->port == port && !strcmp(p->vm, vm->name))
			return p;
	}
	return NULL;
}

int vsxb_router_listen_port(struct vsxb_router *r, const char *vm_name, uint32_t port,
			   const char *tag, vsxb_port_cb cb, void *arg,
			   struct vsxb_port **out)
{
	struct vsxb_list *n;
	struct vsxb_port *p;

	if (!r || !vm_name || !vsx__name_ok(vm_name, strlen(vm_name)) || !cb || !out ||
	    port == UINT32_MAX)
		return -EINVAL;
	for (n = r->ports.next; n != &r->ports; n = n->next) {
		p = vsxb_container_of(n, struct vsxb_port, node);
		if (p->port == port && !strcmp(p->vm, vm_name))
			return -EADDRINUSE;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->r = r;
	snprintf(p->vm, sizeof(p->vm), "%s", vm_name);
	p->port = port;
	vsxb__set_tag(p->tag, tag);
	p->cb = cb;
	p->arg = arg;
	vsxb__world_stop(r);
	vsxb_list_add_tail(&r->ports, &p->node);
	vsxb__world_start(r);
	*out = p;
	return 0;
}

void vsxb_port_free(struct vsxb_port *p)
{
	if (!p)
		return;
	vsxb__world_stop(p->r);
	vsxb_list_del(&p->node);
	vsxb__world_start(p->r);
	free(p);
}

int vsxb_vm_connect_fd(struct vsxb_vm *vm, int fd, uint32_t guest_port, const char *tag,
		      uint64_t *id)
{
	int rc;

	if (!vm || fd < 0) {
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	vsxb__world_stop(vm->r);
	rc = vsxb__host_connect_fd(vm, fd, guest_port, tag, id);
	vsxb__round(vm->sh);
	vsxb__world_start(vm->r);
	return rc;
}

int vsxb_router_conn_attach_fd(struct vsxb_router *r, uint64_t id, int fd)
{
	struct conn *c;
	int rc = -ENOENT;

	if (fd < 0)
		return -ENOENT;
	vsxb__world_stop(r);
	c = conn_by_id(r, id);
	if (c && c->ops->attach_fd)
		rc = c->ops->attach_fd(c, fd);
	vsxb__round_all(r);
	vsxb__world_start(r);
	return rc;
}

int vsxb_router_close_tagged(struct vsxb_router *r, const char *tag, bool reset)
{
	struct vsxb_list *n, *m;
	int count = 0;

	if (!tag || !*tag)
		return 0;
	vsxb__world_stop(r);
	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = vsxb_container_of(n, struct vsxb_vm, node);

		/* killed connections stay listed until the round ends */
		for (m = vm->conns.next; m != &vm->conns; m = m->next) {
			struct conn *c = vsxb_container_of(m, struct conn, node);

			if (c->dead || strcmp(c->tag, tag))
				continue;
			if (reset || c->state == VSXB_CONN_CONNECTING)
				vsxb__conn_reset(c, false);
			else
				conn_close(c);
			count++;
		}
	}
	vsxb__round_all(r);
	vsxb__world_start(r);
	return count;
}

uint64_t vsxb_router_new_id(struct vsxb_router *r)
{
	return vsxb_add(&r->next_id, 1) - 1;
}

int vsxb_vm_set_default_buffer(struct vsxb_vm *vm, uint32_t bytes)
{
	if (!bytes || bytes > VSXB_MAX_BUF_ALLOC || vsxb__buf_cap(vm->r, bytes) != bytes)
		return -EINVAL;
	vsxb__world_stop(vm->r);
	vm->buf_default = bytes;
	vsxb__world_start(vm->r);
	return 0;
}

void vsxb_vm_get_info(const struct vsxb_vm *vm, struct vsxb_vm_info *out)
{
	vsxb__world_stop(vm->r);
	*out = (struct vsxb_vm_info){
		.name = vm->name,
		.guest_cid = vm->cid,
		.socket_path = vm->socket_path,
		.uds_path = vm->uds_path,
		.buf_default = vm->buf_default,
		.connected = vm->live,
		.broken = vm->broken,
		.paused = vm->paused,
		.conns = vm->nconns,
		.loop = vm->sh->loop,
	};
	vsxb__world_start(vm->r);
}

void vsxb_vm_get_counters(const struct vsxb_vm *vm, struct vsxb_vm_counters *out)
{
	const struct vsxb_list *n;

	vsxb__world_stop(vm->r);
	*out = vm->ct;
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		const struct conn *c = vsxb_container_of(n, struct conn, node);
		const struct txq *q = c->ops->queue ? c->ops->queue(c) : &c->q;

		if (c->dead)
			continue;
		if (c->state >= VSXB_CONN_CONNECTING && c->state <= VSXB_CONN_CLOSING)
			out->conns[c->state]++;
		if (q)
			out->queued_bytes += q->bytes;
	}
	vsxb__world_start(vm->r);
}

void vsxb_vm_add_counters(struct vsxb_vm *vm, const struct vsxb_vm_counters *add)
{
	vsxb__world_stop(vm->r);
	vm->ct.opened += add->opened;
	for (unsigned k = 0; k < VSXB_REASON_COUNT; k++) {
		vm->ct.closed[k] += add->closed[k];
		vm->ct.reset[k] += add->reset[k];
		vm->ct.refused[k] += add->refused[k];
	}
	vm->ct.to_guest_bytes += add->to_guest_bytes;
	vm->ct.from_guest_bytes += add->from_guest_bytes;
	vm->ct.credit_stalls += add->credit_stalls;
	vsxb__world_start(vm->r);
}

int vsxb_router_foreach_vm(struct vsxb_router *r, vsxb_vm_cb cb, void *arg)
{
	struct vsxb_list *n;
	int rc;

	if (!cb)
		return -EINVAL;
	/* one stop for the walk: the callback's own calls nest in it */
	vsxb__world_stop(r);
	for (n = r->vms.next, rc = 0; n != &r->vms && !rc; n = n->next)
		rc = cb(vsxb_container_of(n, struct vsxb_vm, node), arg);
	vsxb__world_start(r);
	return rc;
}

void vsxb__vm_stats(const struct vsxb_vm *vm, struct vsxb_engine_stats *st)
{
	vsxb__world_stop(vm->r);
	*st = vm->st;
	vsxb__world_start(vm->r);
}

int vsxb__conn_mem(struct vsxb_router *r, uint64_t id, size_t *mem)
{
	const struct txq *q;
	struct conn *c;
	int rc = -ENOENT;

	vsxb__world_stop(r);
	c = conn_by_id(r, id);
	if (c) {
		q = c->ops->queue ? c->ops->queue(c) : &c->q;
		*mem = q ? q->mem : 0;
		rc = 0;
	}
	vsxb__world_start(r);
	return rc;
}
