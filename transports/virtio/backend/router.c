/*
 * The router: the VMs of one process, their lifetimes, sibling routing
 * between VMs sharing a group, and the introspection/control calls of
 * backend.h.
 *
 * Sibling routing. A REQUEST from VM A to the CID of a live VM B that
 * shares a group with A creates two connections, one in each VM, linked as
 * peers. Packets are relayed: payload is copied from A's TX buffers
 * straight into B's RX buffers when B has some (and nothing waits for
 * them), otherwise into the B-side connection's queue. Credit is end to
 * end: the buf_alloc and fwd_cnt A sees are B's (buf_alloc capped by the
 * A-side connection's own buf_alloc), so A can never have more in flight
 * than B can take, and the queue in between is bounded by that window.
 * SHUTDOWN, RST and CREDIT_REQUEST are relayed; SHUTDOWN and RST only after
 * the data queued before them.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "engine.h"

#define HDR_LEN ((uint32_t)sizeof(struct virtio_vsock_hdr))

/* ---- Logging ---- */

static void vlog(struct vsxb_router *r, int prio, const char *fmt, va_list ap)
{
	char msg[512];

	if (!r->log)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	r->log(r->log_arg, prio, msg);
}

void vsxb__log(struct vsxb_router *r, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(r, prio, fmt, ap);
	va_end(ap);
}

void vsxb__vm_warn(struct vsxb_vm *vm, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	if (!vm->log_budget)
		return;
	vm->log_budget--;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vsxb__log(vm->r, VSXB_LOG_WARNING, "vm %s: guest: %s%s", vm->name, msg,
		 vm->log_budget ? "" : " (further guest errors not logged until "
		 "the device restarts)");
}

/* ---- Rounds ---- */

void vsxb__vm_touch(struct vsxb_vm *vm)
{
	if (vm->dirty)
		return;
	vm->dirty = true;
	eng_list_add_tail(&vm->r->dirty, &vm->dnode);
}

void vsxb__router_round(struct vsxb_router *r)
{
	unsigned guard = 0;

	if (r->in_round)
		return;
	r->in_round = 1;
	while (!eng_list_empty(&r->dirty) && guard++ < 10000) {
		struct vsxb_vm *vm = eng_container_of(r->dirty.next, struct vsxb_vm, dnode);

		eng_list_del(&vm->dnode);
		vm->dirty = false;
		vsxb__vm_round(vm);
	}
	r->in_round = 0;
}

bool vsxb_router_poll(struct vsxb_router *r, bool sleeping)
{
	struct eng_list *n;
	bool found = false;

	r->polling = !sleeping;
	for (n = r->vms.next; n != &r->vms; n = n->next)
		found |= vsxb__vm_poll(eng_container_of(n, struct vsxb_vm, node), sleeping);
	if (found)
		vsxb__router_round(r);
	return found;
}

static void vm_resume_cb(void *arg)
{
	struct vsxb_vm *vm = arg;

	vsxb__vm_resume(vm);
	vsxb__router_round(vm->r);
}

/* ---- Siblings ---- */

static bool share_group(const struct vsxb_vm *a, const struct vsxb_vm *b)
{
	unsigned i, j;

	for (i = 0; i < a->ngroups; i++)
		for (j = 0; j < b->ngroups; j++)
			if (!strcmp(a->groups[i], b->groups[j]))
				return true;
	return false;
}

struct vsxb_vm *vsxb__sibling(struct vsxb_vm *from, uint64_t cid)
{
	struct vsxb_vm *to = vsxb_router_vm_by_cid(from->r, cid);

	if (!to || to == from || !to->live || to->broken || to->freeing ||
	    !share_group(from, to))
		return NULL;
	return to;
}

/* ---- Router and VMs ---- */

int vsxb_router_new(const struct vsx_loop *loop, vsxb_log_fn log, void *log_arg,
		   struct vsxb_router **out)
{
	struct vsxb_router *r;

	if (!loop || !out)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->loop = loop;
	r->log = log;
	r->log_arg = log_arg;
	eng_list_init(&r->vms);
	eng_list_init(&r->dirty);
	eng_list_init(&r->ports);
	r->next_id = 1;
	r->handshake_ms = ENG_HANDSHAKE_MS;
	r->connect_ms = ENG_CONNECT_MS;
	r->linger_ms = VSXB_DEFAULT_LINGER_MS;
	r->max_conns_vm = ENG_MAX_CONNS;
	*out = r;
	return 0;
}

void vsxb_router_free(struct vsxb_router *r)
{
	if (!r)
		return;
	while (!eng_list_empty(&r->vms))
		vsxb_vm_free(eng_container_of(r->vms.next, struct vsxb_vm, node));
	while (!eng_list_empty(&r->ports))
		vsxb_port_free(eng_container_of(r->ports.next, struct vsxb_port, node));
	free(r);
}

void vsxb__router_set_timeouts(struct vsxb_router *r, unsigned handshake_ms,
			      unsigned connect_ms, unsigned linger_ms)
{
	if (handshake_ms)
		r->handshake_ms = handshake_ms;
	if (connect_ms)
		r->connect_ms = connect_ms;
	if (linger_ms)
		r->linger_ms = linger_ms;
}

void vsxb_router_set_conn_events(struct vsxb_router *r, vsxb_conn_event_fn fn, void *arg)
{
	r->ev_fn = fn;
	r->ev_arg = arg;
}

int vsxb_router_set_limits(struct vsxb_router *r, const struct vsxb_router_limits *l)
{
	if (!l || (l->max_conn_memory && l->max_conn_memory < ENG_MIN_CONN_MEMORY) ||
	    l->handshake_ms > ENG_MAX_TIMEOUT_MS || l->connect_ms > ENG_MAX_TIMEOUT_MS ||
	    l->linger_ms > ENG_MAX_TIMEOUT_MS)
		return -EINVAL;
	r->max_conns = l->max_conns;
	r->max_conns_vm = l->max_conns_per_vm ? l->max_conns_per_vm : ENG_MAX_CONNS;
	r->max_conn_mem = l->max_conn_memory;
	r->handshake_ms = l->handshake_ms ? l->handshake_ms : ENG_HANDSHAKE_MS;
	r->connect_ms = l->connect_ms ? l->connect_ms : ENG_CONNECT_MS;
	r->linger_ms = l->linger_ms ? l->linger_ms : VSXB_DEFAULT_LINGER_MS;
	return 0;
}

void vsxb_router_get_limits(const struct vsxb_router *r, struct vsxb_router_limits *out)
{
	memset(out, 0, sizeof(*out));
	out->max_conns = r->max_conns;
	out->max_conns_per_vm = r->max_conns_vm;
	out->max_conn_memory = r->max_conn_mem;
	out->handshake_ms = r->handshake_ms;
	out->connect_ms = r->connect_ms;
	out->linger_ms = r->linger_ms;
}

void vsxb_router_get_stats(const struct vsxb_router *r, struct vsxb_router_stats *out)
{
	*out = r->st;
	out->conns = r->nconns;
}

void vsxb__router_set_counter_base(struct vsxb_router *r, uint32_t base)
{
	r->counter_base = base;
}

struct vsxb_vm *vsxb_router_vm_by_name(struct vsxb_router *r, const char *name)
{
	struct eng_list *n;

	if (!name)
		return NULL;
	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = eng_container_of(n, struct vsxb_vm, node);

		if (!strcmp(vm->name, name))
			return vm;
	}
	return NULL;
}

struct vsxb_vm *vsxb_router_vm_by_cid(struct vsxb_router *r, uint64_t cid)
{
	struct eng_list *n;

	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = eng_container_of(n, struct vsxb_vm, node);

		if (vm->cid == cid)
			return vm;
	}
	return NULL;
}

const char *vsxb_vm_name(const struct vsxb_vm *vm)
{
	return vm->name;
}

static bool name_ok(const char *s, size_t max)
{
	size_t n = strlen(s), i;

	if (!n || n > max)
		return false;
	for (i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
			return false;
	}
	return true;
}

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
		if (!name_ok(tok, 64)) {
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
	free(vm->txe);
	free(vm->rxe);
	free(vm->iov);
	free(vm->riov);
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

int vsxb_vm_new(struct vsxb_router *r, const struct vsxb_vm_config *cfg,
	       struct vsxb_vm **out)
{
	const struct vsx_loop *l = r->loop;
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
	if (cfg->name && !name_ok(cfg->name, 64))
		return bad_config(r, "name must be 1-64 of [A-Za-z0-9._-]");
	if (cfg->tx_buffer_size > ENG_MAX_BUF)
		return bad_config(r, "tx-buffer-size above 1 GiB");
	if (cfg->queue_size && (cfg->queue_size & (cfg->queue_size - 1) ||
				cfg->queue_size > VSX_VQ_MAX_SIZE))
		return bad_config(r, "queue-size must be a power of two up to 32768");
	snprintf(name, sizeof(name), "cid%llu", (unsigned long long)cfg->guest_cid);
	if (vsxb_router_vm_by_cid(r, cfg->guest_cid) ||
	    vsxb_router_vm_by_name(r, cfg->name ? cfg->name : name))
		return -EEXIST;

	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->r = r;
	vm->cid = cfg->guest_cid;
	vm->lfd = -1;
	vm->buf_default = cfg->tx_buffer_size ? cfg->tx_buffer_size
					      : VSXB_DEFAULT_BUF_ALLOC;
	vm->queue_size = cfg->queue_size ? cfg->queue_size : VSXB_DEFAULT_QUEUE_SIZE;
	vm->next_host_port = ENG_HOST_PORT_FIRST;
	eng_list_init(&vm->node);
	eng_list_init(&vm->dnode);
	eng_list_init(&vm->conns);
	eng_list_init(&vm->pending);
	eng_list_init(&vm->handshakes);
	vm->name = strdup(cfg->name ? cfg->name : name);
	vm->socket_path = strdup(cfg->socket_path);
	vm->uds_path = cfg->uds_path ? strdup(cfg->uds_path) : NULL;
	vm->txe = calloc(ENG_TX_BATCH, sizeof(*vm->txe));
	vm->rxe = calloc(ENG_RX_BATCH, sizeof(*vm->rxe));
	vm->iov = calloc(ENG_IOV_MAX, sizeof(*vm->iov));
	vm->riov = calloc(ENG_IOV_MAX, sizeof(*vm->riov));
	vm->fiov = calloc(ENG_IOV_MAX, sizeof(*vm->fiov));
	rc = -ENOMEM;
	if (!vm->name || !vm->socket_path || (cfg->uds_path && !vm->uds_path) ||
	    !vm->txe || !vm->rxe || !vm->iov || !vm->riov || !vm->fiov)
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
	}
	rc = vsx_vu_new(vm->socket_path, l, &vsxb__vsock_ops, vm, &vm->vu);
	if (rc < 0) {
		vsxb__log(r, VSXB_LOG_ERR, "vm %s: cannot listen on %s: %s", vm->name,
			 vm->socket_path, listen_error(rc));
		goto err_listen;
	}
	rc = vsx_vu_set_queue_max(vm->vu, vm->queue_size);
	if (rc < 0) {
		vsx_vu_free(vm->vu);
		goto err_listen;
	}
	eng_list_add_tail(&r->vms, &vm->node);
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

void vsxb_vm_free(struct vsxb_vm *vm)
{
	struct vsxb_router *r;
	struct eng_list *n;

	if (!vm)
		return;
	r = vm->r;
	/* RSTs to a live guest while its queues are still ours. */
	vsxb__vm_drop_all(vm, true);
	vsxb__vm_touch(vm);
	vsxb__router_round(r);
	vm->freeing = true;
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = eng_container_of(n, struct conn, node);

		if (!c->dead)
			vsxb__conn_reset(c, true);
	}
	vsxb__vm_touch(vm);
	vsxb__router_round(r);
	if (vm->uds_path)
		vsxb__host_unlisten(vm);
	vsx_vu_free(vm->vu);   /* may call stop: nothing is left to drop */
	vm->vu = NULL;
	vm->live = false;
	/* Whatever stop touched is done; nothing may refer to @vm now. */
	if (vm->dirty) {
		eng_list_del(&vm->dnode);
		vm->dirty = false;
	}
	vsxb__vm_round(vm);
	if (vm->dirty) {
		eng_list_del(&vm->dnode);
		vm->dirty = false;
	}
	r->loop->timer_free(vm->resume);
	eng_list_del(&vm->node);
	vm_release(vm);
	vsxb__router_round(r); /* siblings told of the resets */
}

/* ---- Introspection and control ---- */

void vsxb__conn_info(const struct conn *c, struct vsxb_conn_info *ci)
{
	const struct txq *q = c->ops->queue ? c->ops->queue(c) : &c->q;
	uint32_t fwd, buf, held;

	vsxb__conn_window(c, &fwd, &buf);
	held = c->rx_cnt - fwd;

	memset(ci, 0, sizeof(*ci));
	ci->id = c->id;
	ci->vm = c->vm->name;
	ci->type = c->type;
	ci->state = c->state;
	ci->guest_cid = c->vm->cid;
	ci->guest_port = c->guest_port;
	ci->peer_cid = c->peer_cid;
	ci->peer_port = c->peer_port;
	ci->guest_initiated = c->guest_initiated;
	ci->guest_shut = c->guest_shut;
	ci->host_shut = c->host_shut;
	ci->to_guest_bytes = c->to_guest;
	ci->from_guest_bytes = c->from_guest;
	ci->buf_alloc = buf;
	ci->fwd_cnt = fwd;
	ci->peer_buf_alloc = c->peer_buf_alloc;
	ci->peer_fwd_cnt = c->peer_fwd_cnt;
	ci->tx_free = vsxb__conn_peer_free(c);
	ci->rx_free = held < buf ? buf - held : 0;
	ci->queued = q ? (uint32_t)q->bytes : 0;
	ci->tag = c->tag;
}

static int vm_foreach(struct vsxb_vm *vm, vsxb_conn_cb cb, void *arg)
{
	struct vsxb_conn_info ci;
	struct eng_list *n;
	int rc;

	/* Dead connections stay on the list until the round ends, so the
	 * walk survives a callback that closes connections. */
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = eng_container_of(n, struct conn, node);

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
	struct eng_list *n;
	int rc = 0;

	if (!cb)
		return -EINVAL;
	if (vm) {
		rc = vm_foreach(vm, cb, arg);
	} else {
		for (n = r->vms.next; n != &r->vms && !rc; n = n->next)
			rc = vm_foreach(eng_container_of(n, struct vsxb_vm, node), cb,
					arg);
	}
	vsxb__router_round(r);
	return rc;
}

static struct conn *conn_by_id(struct vsxb_router *r, uint64_t id)
{
	struct eng_list *n, *m;

	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = eng_container_of(n, struct vsxb_vm, node);

		for (m = vm->conns.next; m != &vm->conns; m = m->next) {
			struct conn *c = eng_container_of(m, struct conn, node);

			if (c->id == id && !c->dead)
				return c;
		}
	}
	return NULL;
}

int vsxb_router_conn_set_buffer(struct vsxb_router *r, uint64_t id, uint32_t bytes)
{
	struct conn *c;

	if (!bytes || bytes > ENG_MAX_BUF || vsxb__buf_cap(r, bytes) != bytes)
		return -EINVAL;
	c = conn_by_id(r, id);
	if (!c)
		return -ENOENT;
	vsxb__conn_set_buffer(c, bytes);
	vsxb__router_round(r);
	return 0;
}

int vsxb_router_conn_close(struct vsxb_router *r, uint64_t id, bool reset)
{
	struct conn *c = conn_by_id(r, id);

	if (!c)
		return -ENOENT;
	vsxb__conn_why(c, reset ? VSXB_REASON_CONTROL_RESET : VSXB_REASON_CONTROL_CLOSE, 0);
	if (reset)
		vsxb__conn_reset(c, false);
	else
		vsxb__conn_close(c);
	vsxb__router_round(r);
	return 0;
}

/* ---- Descriptors handed over (vsxd forwards) ---- */

void vsxb__set_tag(char *dst, const char *tag)
{
	snprintf(dst, VSXB_TAG_MAX, "%s", tag ? tag : "");
}

struct vsxb_port *vsxb__port_find(struct vsxb_router *r, const struct vsxb_vm *vm,
				uint32_t port)
{
	struct eng_list *n;

	for (n = r->ports.next; n != &r->ports; n = n->next) {
		struct vsxb_port *p = eng_container_of(n, struct vsxb_port, node);

		if (p->port == port && !strcmp(p->vm, vm->name))
			return p;
	}
	return NULL;
}

int vsxb_router_listen_port(struct vsxb_router *r, const char *vm_name, uint32_t port,
			   const char *tag, vsxb_port_cb cb, void *arg,
			   struct vsxb_port **out)
{
	struct eng_list *n;
	struct vsxb_port *p;

	if (!r || !vm_name || !name_ok(vm_name, VSXB_NAME_LEN - 1) || !cb || !out ||
	    port == UINT32_MAX)
		return -EINVAL;
	for (n = r->ports.next; n != &r->ports; n = n->next) {
		p = eng_container_of(n, struct vsxb_port, node);
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
	eng_list_add_tail(&r->ports, &p->node);
	*out = p;
	return 0;
}

void vsxb_port_free(struct vsxb_port *p)
{
	if (!p)
		return;
	eng_list_del(&p->node);
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
	rc = vsxb__host_connect_fd(vm, fd, guest_port, tag, id);
	vsxb__router_round(vm->r);
	return rc;
}

int vsxb_router_conn_attach_fd(struct vsxb_router *r, uint64_t id, int fd)
{
	struct conn *c = conn_by_id(r, id);
	int rc;

	if (!c || fd < 0)
		return -ENOENT;
	rc = c->ops->attach_fd ? c->ops->attach_fd(c, fd) : -ENOENT;
	vsxb__router_round(r);
	return rc;
}

int vsxb_router_close_tagged(struct vsxb_router *r, const char *tag, bool reset)
{
	struct eng_list *n, *m;
	int count = 0;

	if (!tag || !*tag)
		return 0;
	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = eng_container_of(n, struct vsxb_vm, node);

		/* killed connections stay listed until the round ends */
		for (m = vm->conns.next; m != &vm->conns; m = m->next) {
			struct conn *c = eng_container_of(m, struct conn, node);

			if (c->dead || strcmp(c->tag, tag))
				continue;
			if (reset || c->state == VSXB_CONN_CONNECTING)
				vsxb__conn_reset(c, false);
			else
				vsxb__conn_close(c);
			count++;
		}
	}
	vsxb__router_round(r);
	return count;
}

uint64_t vsxb_router_new_id(struct vsxb_router *r)
{
	return r->next_id++;
}

int vsxb_vm_set_default_buffer(struct vsxb_vm *vm, uint32_t bytes)
{
	if (!bytes || bytes > ENG_MAX_BUF || vsxb__buf_cap(vm->r, bytes) != bytes)
		return -EINVAL;
	vm->buf_default = bytes;
	return 0;
}

void vsxb_vm_get_info(const struct vsxb_vm *vm, struct vsxb_vm_info *out)
{
	memset(out, 0, sizeof(*out));
	out->name = vm->name;
	out->guest_cid = vm->cid;
	out->socket_path = vm->socket_path;
	out->uds_path = vm->uds_path;
	out->buf_default = vm->buf_default;
	out->connected = vm->live;
	out->broken = vm->broken;
	out->conns = vm->nconns;
}

int vsxb_router_foreach_vm(struct vsxb_router *r, vsxb_vm_cb cb, void *arg)
{
	struct eng_list *n;
	int rc;

	if (!cb)
		return -EINVAL;
	for (n = r->vms.next; n != &r->vms; n = n->next) {
		rc = cb(eng_container_of(n, struct vsxb_vm, node), arg);
		if (rc)
			return rc;
	}
	return 0;
}

void vsxb__vm_stats(const struct vsxb_vm *vm, struct vsxb_engine_stats *st)
{
	*st = vm->st;
}

int vsxb__conn_mem(struct vsxb_router *r, uint64_t id, size_t *mem)
{
	struct conn *c = conn_by_id(r, id);
	const struct txq *q;

	if (!c)
		return -ENOENT;
	q = c->ops->queue ? c->ops->queue(c) : &c->q;
	*mem = q ? q->mem : 0;
	return 0;
}
