/*
 * Restarts (backend.h, "Restarts"): what a VM's device tells whoever keeps
 * it for a new process (device events), and a new process's adoption of a
 * device whose descriptors it inherited.
 *
 * An adopted device starts with the connections a live handoff kept
 * (vsxb_vm_foreach_keep in the old process, vsxb_vm_adopt_keep in the
 * new: host socket connections, a lingering one's socket possibly gone
 * already, made again before the device runs, so
 * that what the guest queued meanwhile finds them; sibling pairs, made
 * again by vsxb_router_pair_kept once both VMs are adopted, the devices
 * reading nothing from their guests until then), and no other: those
 * of a crashed process are gone with its host sockets (host programs saw
 * EOF when it died). The guest still has them, and one that only waits to
 * read would wait for ever: each one the old process's state named and
 * that was not kept gets an RST. They go out
 * through the VM's queue of RSTs for packets without a connection, refilled
 * from a timer as it drains, so the data path does not change.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "vhost-user/acceptor.h"
#include "peer_host.h"
#include "router.h"
#include "util.h"

void vsxb_router_set_device_events(struct vsxb_router *r, vsxb_device_event_fn fn,
				   void *arg)
{
	vsxb__world_stop(r);
	r->dev_fn = fn;
	r->dev_arg = arg;
	vsxb__world_start(r);
}

void vsxb__device_event(struct vsxb_vm *vm, bool live)
{
	struct vsxb_router *r = vm->r;
	struct vsxu_vu_state st;

	if (!r->dev_fn || vm->freeing)
		return;
	if (live && vsxu_vu_get_state(vm->vu, &st) == 0)
		r->dev_fn(r->dev_arg, vm, vm->name, vm->cid, &st, false);
	else
		r->dev_fn(r->dev_arg, vm, vm->name, vm->cid, NULL,
			  live && vm->live && vm->paused);
}

/* Move what fits of the RSTs still to send into the VM's RST queue. */
static void rst_cb(void *arg)
{
	struct vsxb_vm *vm = arg;

	if (!vm->live || vm->broken) {
		vm->rst_n = vm->rst_next = 0;
		return;
	}
	if (vm->paused)
		return;  /* the resume arms it again (device.c) */
	while (vm->rst_next < vm->rst_n && vm->orphan_n < VSXB_ORPHAN_MAX) {
		const struct vsxb_conn_addr *a = &vm->rst[vm->rst_next++];
		/* as if the guest had sent a packet on it: the answer is an RST */
		struct virtio_vsock_hdr h = {
			.src_cid = a->guest_cid,
			.dst_cid = a->peer_cid,
			.src_port = a->guest_port,
			.dst_port = a->peer_port,
			.type = (uint16_t)a->type,
			.op = VIRTIO_VSOCK_OP_RW,
		};

		vsxb__orphan_rst(vm, &h);
	}
	vsxb__vm_touch(vm);
	vsxb__round(vm->sh);
	if (vm->rst_next < vm->rst_n)
		vm->sh->loop->timer_arm(vm->rst_timer, 1);
}

/* ---- Connections kept across a live handoff ---- */

int vsxb_vm_foreach_keep(struct vsxb_vm *vm, vsxb_keep_cb cb, void *arg)
{
	struct vsxb_conn_info ci;
	struct vsxb_list *n;
	int rc = 0;

	vsxb__world_stop(vm->r);
	for (n = vm->conns.next; n != &vm->conns && !rc; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);
		struct vsxb_conn_keep k;
		size_t qn = c->q.bytes ? c->q.bytes : 1;
		uint8_t *q;
		struct vsxb_msg_end *ends;

		if (c->dead)
			continue;
		vsxb__conn_info(c, &ci);
		memset(&k, 0, sizeof(k));
		k.ci = &ci;
		k.fd = vsxb__host_keepable(c, &k);
		k.id = c->id;
		k.type = c->type;
		k.state = c->state;
		k.guest_port = c->guest_port;
		k.peer_cid = c->peer_cid;
		k.peer_port = c->peer_port;
		k.guest_initiated = c->guest_initiated;
		k.guest_shut = c->guest_shut;
		k.host_shut = c->host_shut;
		k.shut_pending = c->shut_pending;
		k.ctrl = c->ctrl;
		k.cr = c->cr;
		k.advertised = c->advertised;
		k.credit_req_sent = c->credit_req_sent;
		k.msg_open = c->msg_open;
		k.to_guest = c->to_guest;
		k.from_guest = c->from_guest;
		k.why = c->why;
		k.why_limit = c->why_limit;
		k.why_err = c->why_err;
		memcpy(k.tag, c->tag, sizeof(k.tag));
		if (c->state == VSXB_CONN_CONNECTING)
			k.timer_ms = vsxb__conn_timer_left(c, vm->r->lim.connect_ms);
		else if (k.host_flags & (VSXB_KEEP_HOST_DRAIN | VSXB_KEEP_HOST_LINGER))
			k.timer_ms = vsxb__conn_timer_left(c, vm->r->lim.linger_ms);
		if (k.fd < 0 && c->ops->keep) {
			/* a sibling half: the bytes for its guest */
			rc = c->ops->keep(c, &k);
			if (!rc)
				rc = cb(&k, arg);
			free((void *)k.q);
			free((void *)k.ends);
			continue;
		}
		/* the bytes a host socket has not taken yet */
		q = malloc(qn);
		ends = malloc(qn * sizeof(*ends));
		if (!q || !ends) {
			rc = -ENOMEM;
		} else {
			if (k.fd >= 0)
				k.qlen = (uint32_t)vsxb__txq_copy(&c->q, q, ends, &k.nends);
			k.q = q;
			k.ends = ends;
			rc = cb(&k, arg);
		}
		free(q);
		free(ends);
	}
	vsxb__world_start(vm->r);
	return rc;
}

/*
 * @vm's device was adopted paused (vsxu_vu_adopt, no start): the old
 * process's VM was live and paused, so this one is, as device.c's pause
 * leaves a VM. Its connections (made again before) wait for the
 * front-end's cont, which starts the device as in the old process
 * (op_start: resumed, or reset).
 */
static void vm_adopted_paused(struct vsxb_vm *vm)
{
	vsxb__vm_rings_taken(vm);
	/* (as op_start's: the event is the front-end's, when it has one) */
	vm->event_pending = !vm->keep_conns;
	vm->paused = true;
	vm->paused_ms = vsx__now_ms();
	vm->tx_more = false;
	vsxb__vm_timers_hold(vm);
	vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device taken over paused (cid %llu%s): %u "
		 "connection(s) wait for the VM to continue", vm->name,
		 (unsigned long long)vm->cid, vm->seqpacket ? ", seqpacket" : "", vm->nconns);
	vsxb__device_event(vm, true);
}

/* @k's counters and queue onto @c, made again: 0, or -EINVAL (the
 * queue's ends do not fit it), -ENOMEM. */
static int keep_apply(struct conn *c, const struct vsxb_conn_keep *k)
{
	struct iovec v;
	uint32_t at = 0;
	int err = 0;

	c->id = k->id;
	c->state = k->state;
	c->guest_initiated = k->guest_initiated;
	c->guest_shut = k->guest_shut;
	c->host_shut = k->host_shut;
	c->shut_pending = k->shut_pending;
	c->ctrl = k->ctrl;
	c->cr = k->cr;
	c->why = k->why;
	c->why_limit = k->why_limit;
	c->why_err = k->why_err;
	c->advertised = k->advertised;
	c->credit_req_sent = k->credit_req_sent;
	c->msg_open = k->msg_open;
	c->to_guest = k->to_guest;
	c->from_guest = k->from_guest;
	memcpy(c->tag, k->tag, sizeof(c->tag));
	c->tag[sizeof(c->tag) - 1] = '\0';
	/* the queue as it was: its messages end where they ended */
	for (unsigned i = 0; i <= k->nends && !err; i++) {
		uint32_t end = i < k->nends ? k->ends[i].end : k->qlen;

		if (end < at || end > k->qlen) {
			err = -EINVAL;
			break;
		}
		v.iov_base = (void *)(k->q + at);
		v.iov_len = end - at;
		if (end > at || i < k->nends)
			err = vsxb__txq_append(&c->q, &v, 1, end - at, 0,
					       i < k->nends ? k->ends[i].flags : 0);
		at = end;
	}
	return err;
}

/* @k's connection made again on @vm (its socket taken), or NULL. */
static struct conn *keep_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k)
{
	bool drain = k->host_flags & VSXB_KEEP_HOST_DRAIN;
	bool linger = k->host_flags & VSXB_KEEP_HOST_LINGER;
	struct conn *c = NULL;

	/* (a draining one is not on its address: a new connection of the
	 * guest may be; a lingering one may have no socket any more) */
	if ((k->fd < 0 && !linger) || (k->type != VIRTIO_VSOCK_TYPE_STREAM &&
			  k->type != VIRTIO_VSOCK_TYPE_SEQPACKET) ||
	    k->peer_cid != VSOCK_CID_HOST ||
	    (!drain && vsxb__conn_find(vm, k->guest_port, k->peer_cid, k->peer_port)))
		goto fail;
	c = vsxb__host_restore(vm, k);
	if (!c)
		goto fail;
	if (keep_apply(c, k) < 0 || (k->fd >= 0 && vsxb__host_attach(c, k->fd) < 0)) {
		vsxb__conn_kill(c);   /* closes the socket */
		return NULL;
	}
	/* a hybrid program's "OK" owed: the guest's answer has what was
	 * left of the connect timeout to come */
	if (c->state == VSXB_CONN_CONNECTING)
		vsxb__conn_timer(c, T_CONNECT, k->timer_ms ? k->timer_ms
							   : vm->r->lim.connect_ms);
	/* a drain goes on for what was left of its time (the write watch,
	 * armed by the attach, writes the queue) */
	if (drain)
		vsxb__conn_timer(c, T_DRAIN, k->timer_ms ? k->timer_ms
							 : vm->r->lim.linger_ms);
	/* the guest's RST has what was left of the linger time to come
	 * (held, as any, while its VM is paused) */
	if (linger)
		vsxb__conn_timer(c, T_LINGER, k->timer_ms ? k->timer_ms
							  : vm->r->lim.linger_ms);
	return c;
fail:
	if (k->fd >= 0)
		close(k->fd);
	return NULL;
}

/* ---- Sibling pairs kept across a live handoff ---- */

/* A sibling half an adoption kept, waiting for its twin's adoption. */
struct vsxb_sibkeep {
	struct vsxb_sibkeep *next;
	struct vsxb_vm *vm;          /* (vsxb__restart_free drops its own) */
	struct vsxb_conn_keep k;     /* q and ends copied (owned) */
	bool done;
};

static void sibkeep_free(struct vsxb_sibkeep *e)
{
	free((void *)e->k.q);
	free((void *)e->k.ends);
	free(e);
}

/* @k, copied, waits on @r for its twin. -ENOMEM. */
static int sibkeep_add(struct vsxb_vm *vm, const struct vsxb_conn_keep *k)
{
	struct vsxb_sibkeep *e = calloc(1, sizeof(*e));
	uint8_t *q = malloc(k->qlen ? k->qlen : 1);
	struct vsxb_msg_end *ends = malloc((k->nends ? k->nends : 1) * sizeof(*ends));

	if (!e || !q || !ends) {
		free(e);
		free(q);
		free(ends);
		return -ENOMEM;
	}
	if (k->qlen)
		memcpy(q, k->q, k->qlen);
	if (k->nends)
		memcpy(ends, k->ends, k->nends * sizeof(*ends));
	e->vm = vm;
	e->k = *k;
	e->k.ci = NULL;
	e->k.fd = -1;
	e->k.q = q;
	e->k.ends = ends;
	e->k.twin_vm[sizeof(e->k.twin_vm) - 1] = '\0';
	e->next = vm->r->sibkeep;
	vm->r->sibkeep = e;
	return 0;
}

/* Are @a and @b the two halves of one pair, and can it go on here? */
static bool sibkeep_twins(const struct vsxb_sibkeep *a, const struct vsxb_sibkeep *b)
{
	return a != b && !b->done && a->vm != b->vm &&
	       !strcmp(a->k.twin_vm, b->vm->name) && a->k.twin_id == b->k.id &&
	       !strcmp(b->k.twin_vm, a->vm->name) && b->k.twin_id == a->k.id &&
	       a->k.peer_cid == b->vm->cid && b->k.peer_cid == a->vm->cid &&
	       a->k.peer_port == b->k.guest_port && b->k.peer_port == a->k.guest_port &&
	       a->k.type == b->k.type && vsxb__share_group(a->vm, b->vm);
}

/* A half made again on its VM, its counters and queue restored. */
static struct conn *sibkeep_half(struct vsxb_sibkeep *e, bool xthread)
{
	struct vsxb_vm *vm = e->vm;
	struct conn *c;

	if (!vm->live || vm->broken || vm->freeing ||
	    (e->k.type != VIRTIO_VSOCK_TYPE_STREAM &&
	     e->k.type != VIRTIO_VSOCK_TYPE_SEQPACKET) ||
	    vsxb__conn_find(vm, e->k.guest_port, e->k.peer_cid, e->k.peer_port))
		return NULL;
	c = xthread ? vsxb__xsib_restore(vm, &e->k) : vsxb__sib_restore(vm, &e->k);
	if (c && keep_apply(c, &e->k) < 0) {
		vsxb__conn_kill(c);
		c = NULL;
	}
	return c;
}

/* One RST more for @vm's adoption to send (rst_cb). */
static void rst_add(struct vsxb_vm *vm, const struct vsxb_conn_keep *k)
{
	struct vsxb_conn_addr *n;

	if (!vm->rst_timer)
		return;   /* (no memory for it at adoption: the guest's timeouts) */
	n = realloc(vm->rst, (vm->rst_n + 1) * sizeof(*n));
	if (!n)
		return;
	vm->rst = n;
	vm->rst[vm->rst_n++] = (struct vsxb_conn_addr){
		.guest_cid = vm->cid, .peer_cid = k->peer_cid,
		.guest_port = k->guest_port, .peer_port = k->peer_port, .type = k->type,
	};
	vm->sh->loop->timer_arm(vm->rst_timer, 0);
}

static void sibkeep_end(struct vsxb_sibkeep *e, const char *why)
{
	vsxb__log(e->vm->r, VSXB_LOG_ERR, "vm %s: sibling connection %llu: %s: it ends "
		 "(RST to the guest)", e->vm->name, (unsigned long long)e->k.id, why);
	rst_add(e->vm, &e->k);
}

/* @c made again: what was owed to its guest goes out. */
static void sibkeep_go(struct conn *c)
{
	if (c->ctrl || c->shut_pending || c->q.bytes || (c->ops->pending && c->ops->pending(c)))
		vsxb__conn_schedule(c);
	/* the other guest's credit as it is now (across threads, news of
	 * it may have been on the way) */
	vsxb__conn_credit_check(c);
	/* OPEN for the record and the log, not counted again (the counters
	 * go on from the earlier process's: daemon/counters.h) */
	vsxb__conn_reopened(c);
	vsxb__vm_touch(c->vm);
}

unsigned vsxb_router_pair_kept(struct vsxb_router *r, unsigned *ended)
{
	struct vsxb_sibkeep *e, *t, *next;
	struct vsxb_list *n;
	unsigned pairs = 0, gone = 0;

	vsxb__world_stop(r);
	for (e = r->sibkeep; e; e = e->next) {
		struct conn *a = NULL, *b = NULL;
		bool x;

		if (e->done)
			continue;
		e->done = true;
		for (t = r->sibkeep; t && !sibkeep_twins(e, t); t = t->next)
			;
		if (!t) {
			char why[160];

			snprintf(why, sizeof(why), "its twin (vm %s, connection %llu) was "
				 "not handed over", *e->k.twin_vm ? e->k.twin_vm : "?",
				 (unsigned long long)e->k.twin_id);
			sibkeep_end(e, why);
			gone++;
			continue;
		}
		t->done = true;
		x = e->vm->sh != t->vm->sh;
		a = sibkeep_half(e, x);
		b = a ? sibkeep_half(t, x) : NULL;
		if (a && b && x && vsxb__xsib_join(a, b, e->k.eom_pending, t->k.eom_pending) < 0) {
			vsxb__conn_kill(b);
			b = NULL;
		} else if (a && b && !x) {
			vsxb__sib_join(a, b, e->k.eom_pending, t->k.eom_pending);
		}
		if (!a || !b) {
			if (a)
				vsxb__conn_kill(a);
			sibkeep_end(e, "it cannot be made again");
			sibkeep_end(t, "it cannot be made again");
			gone += 2;
			continue;
		}
		sibkeep_go(a);
		sibkeep_go(b);
		pairs++;
	}
	for (e = r->sibkeep; e; e = next) {
		next = e->next;
		sibkeep_free(e);
	}
	r->sibkeep = NULL;
	/* the guests' packets now find their connections: the TX ring is
	 * read on the VM's own thread, as after a budget ran out */
	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = vsxb_container_of(n, struct vsxb_vm, node);

		if (!vm->tx_hold)
			continue;
		vm->tx_hold = false;
		vm->tx_more = true;
		if (vm->resume)
			vm->sh->loop->timer_arm(vm->resume, 0);
	}
	vsxb__world_start(r);
	if (ended)
		*ended = gone;
	return pairs;
}

void vsxb_router_ids_past(struct vsxb_router *r, uint64_t id)
{
	uint64_t cur = vsxb_load(&r->next_id);

	/* (only raised, whatever another thread takes meanwhile) */
	while (cur <= id && !__atomic_compare_exchange_n(&r->next_id, &cur, id + 1, false,
							 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}

int vsxb_vm_adopt(struct vsxb_vm *vm, const struct vsxu_vu_state *st,
		  const struct vsxb_conn_addr *conns, unsigned n)
{
	return vsxb_vm_adopt_keep(vm, st, conns, n, NULL, 0, NULL);
}

int vsxb_vm_adopt_keep(struct vsxb_vm *vm, const struct vsxu_vu_state *st,
		       const struct vsxb_conn_addr *conns, unsigned n,
		       const struct vsxb_conn_keep *keep, unsigned nkeep,
		       unsigned *kept)
{
	struct vsxb_router *r = vm->r;
	const struct vsxu_loop *l = vm->sh->loop;
	struct vsxb_conn_addr *copy = NULL;
	struct conn **made = NULL;
	unsigned nmade = 0, nsib = 0;
	uint64_t next = 0;
	int err;

	if (kept)
		*kept = 0;
	/* room for the RSTs of those that cannot be made again too */
	if (n + nkeep) {
		copy = calloc(n + nkeep, sizeof(*copy));
		made = calloc(nkeep ? nkeep : 1, sizeof(*made));
		if (!copy || !made) {
			/* the descriptors are taken whatever the result */
			vsxu_vu_state_close(st);
			for (unsigned i = 0; i < nkeep; i++)
				if (keep[i].fd >= 0)
					close(keep[i].fd);
			free(copy);
			free(made);
			return -ENOMEM;
		}
		memcpy(copy, conns, n * sizeof(*copy));
	}
	vsxb__world_stop(r);
	if (!vm->rst_timer)
		vm->rst_timer = l->timer(l->ctx, rst_cb, vm);
	/* Before the device starts: what the guest queued on them meanwhile
	 * is theirs, not a stranger's to be answered with an RST. */
	for (unsigned i = 0; i < nkeep; i++) {
		struct conn *c;

		if (keep[i].sibling) {
			/* made with its twin, once that one's VM is adopted too */
			if (sibkeep_add(vm, &keep[i]) == 0) {
				nsib++;
				if (keep[i].id >= next)
					next = keep[i].id + 1;
				continue;
			}
			c = NULL;
		} else {
			c = keep_restore(vm, &keep[i]);
		}

		if (c) {
			made[nmade++] = c;
			if (keep[i].id >= next)
				next = keep[i].id + 1;
			continue;
		}
		if (keep[i].host_flags & VSXB_KEEP_HOST_DRAIN)
			continue;   /* its guest had its RST: not another */
		copy[n++] = (struct vsxb_conn_addr){
			.guest_cid = vm->cid, .peer_cid = keep[i].peer_cid,
			.guest_port = keep[i].guest_port, .peer_port = keep[i].peer_port,
			.type = keep[i].type,
		};
	}
	/* ids go on past the kept ones: vsxctl never shows one twice */
	if (next)
		vsxb_router_ids_past(r, next - 1);
	vm->keep_conns = nmade + nsib > 0;
	vm->tx_hold = nsib > 0;
	err = vsxu_vu_adopt(vm->vu, st);
	/* paused: no start came; the device is held as its stop left it */
	if (!err && st->paused)
		vm_adopted_paused(vm);
	vm->keep_conns = false;
	for (unsigned i = 0; i < nmade; i++) {
		if (err) {
			vsxb__conn_kill(made[i]);
			continue;
		}
		/* what was owed to the guest goes out, reads start again */
		if (made[i]->ctrl || made[i]->shut_pending)
			vsxb__conn_schedule(made[i]);
		if (made[i]->ops->sync)
			made[i]->ops->sync(made[i]);
		/* OPEN again for vsxd's record of them (fdstore.c) and its
		 * log; not counted again: the counters go on from the
		 * earlier process's (daemon/counters.h). One still
		 * connecting opens when the guest answers, as any. */
		if (made[i]->state != VSXB_CONN_CONNECTING)
			vsxb__conn_reopened(made[i]);
	}
	if (!err && kept)
		*kept = nmade + nsib;
	if (err && nmade)
		vsxb__round(vm->sh);
	if (!err && n && vm->rst_timer) {
		free(vm->rst);
		vm->rst = copy;
		vm->rst_n = n;
		vm->rst_next = 0;
		copy = NULL;
		l->timer_arm(vm->rst_timer, 0);
	} else if (!err && n) {
		err = -ENOMEM;
	}
	vsxb__world_start(r);
	free(copy);
	free(made);
	return err;
}

void vsxb__restart_free(struct vsxb_vm *vm)
{
	struct vsxb_sibkeep **pp = &vm->r->sibkeep, *e;

	/* its halves waiting for a twin: the twin finds none */
	while ((e = *pp)) {
		if (e->vm == vm) {
			*pp = e->next;
			sibkeep_free(e);
		} else {
			pp = &e->next;
		}
	}
	if (vm->rst_timer)
		vm->sh->loop->timer_free(vm->rst_timer);
	vm->rst_timer = NULL;
	free(vm->rst);
	vm->rst = NULL;
	vm->rst_n = vm->rst_next = 0;
}

/* ---- Live handoff ---- */

void vsxb_router_freeze(struct vsxb_router *r)
{
	vsxb__world_stop(r);
}

void vsxb_vm_accept_start(struct vsxb_vm *vm)
{
	vsxb__world_stop(vm->r);
	if (vm->acc)
		vsxu_acceptor_hold(vm->acc, false);
	vsxb__world_start(vm->r);
}

void vsxb_router_thaw(struct vsxb_router *r)
{
	vsxb__world_start(r);
}

int vsxb_vm_device_state(struct vsxb_vm *vm, struct vsxu_vu_state *st)
{
	int err;

	vsxb__world_stop(vm->r);
	err = vsxu_vu_get_state(vm->vu, st);
	/* a front-end still setting the device up would lose it; a paused
	 * device whose VM this side does not hold paused (it broke, and
	 * dropped all) is not one to resume */
	if ((err == -ENOTCONN && vsxu_vu_connected(vm->vu)) ||
	    (err == 0 && st->paused && !vm->paused))
		err = -EAGAIN;
	vsxb__world_start(vm->r);
	return err;
}
