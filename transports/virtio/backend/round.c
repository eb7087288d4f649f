/*
 * The engine's rounds (conn.c's design comment, "Processing rounds"):
 * the work that follows an entry point's. For every VM of the shard
 * touched, a memory fault or a ring broken in a lent room acted on, what
 * it owes its guest sent while RX buffers last (the orphans' RSTs, then
 * each pending connection's control packets, its peer's data through
 * ops->emit, its SHUTDOWN and RST), the round's RX used entries
 * published, spare queue memory tended and dead connections freed; then
 * the rooms the round borrowed given back and the other threads' wake-ups
 * posted.
 *
 * This file sits above the peers: it calls their emit and pending hooks,
 * and they call the connection API (conn.c) below it, never this file. A
 * peer's or a timer's callback owes its shard a round
 * (vsxb__round_owe), which the loop runs here once the callback returns
 * (loop.h's queue): so one host byte goes from the loop, through this
 * file, to the peer's read, to conn.c and ring.c, each once.
 */
#include <malloc.h>
#include <stdlib.h>

#include "conn.h"
#include "util.h"

/* What @c owes its guest, in order, while RX buffers last (EMIT_*). */
static int conn_emit(struct conn *c)
{
	static const struct {
		unsigned bit;
		uint16_t op;
	} order[] = {
		{ C_REQUEST, VIRTIO_VSOCK_OP_REQUEST },
		{ C_RESPONSE, VIRTIO_VSOCK_OP_RESPONSE },
		{ C_CREDIT_REPLY, VIRTIO_VSOCK_OP_CREDIT_UPDATE },
		{ C_CREDIT_UPDATE, VIRTIO_VSOCK_OP_CREDIT_UPDATE },
		{ C_CREDIT_REQUEST, VIRTIO_VSOCK_OP_CREDIT_REQUEST },
	};
	bool data_left = false;
	unsigned i, ready;
	int r;

	if (c->dead || !c->vm->live || c->vm->broken)
		return EMIT_DONE;
	for (i = 0; i < sizeof(order) / sizeof(order[0]) && !(c->ctrl & C_RST); i++) {
		if (!(c->ctrl & order[i].bit))
			continue;
		if (order[i].bit == C_CREDIT_UPDATE && !vsxb__conn_credit_news(c)) {
			c->ctrl &= ~C_CREDIT_UPDATE;
			continue;
		}
		if (!vsxb__rx_ctrl(c, order[i].op, 0))
			return EMIT_NOBUF;
		c->ctrl &= ~order[i].bit;
		if (order[i].bit == C_CREDIT_REPLY)
			c->ctrl &= ~C_CREDIT_UPDATE;
	}

	if (c->state != VSXB_CONN_CONNECTING) {
		r = c->ops->emit(c);
		if (r != EMIT_DONE || c->dead)
			return c->dead ? EMIT_DONE : r;
		data_left = c->ops->pending && c->ops->pending(c);
	}

	ready = c->shut_pending;
	if (data_left)
		ready &= ~VIRTIO_VSOCK_SHUTDOWN_SEND;
	if (ready && !(c->ctrl & C_RST)) {
		if (!vsxb__rx_ctrl(c, VIRTIO_VSOCK_OP_SHUTDOWN, c->host_shut | ready))
			return EMIT_NOBUF;
		c->host_shut |= ready;
		c->shut_pending &= ~ready;
	}

	if ((c->ctrl & C_RST) && !data_left) {
		if (!vsxb__rx_ctrl(c, VIRTIO_VSOCK_OP_RST, 0))
			return EMIT_NOBUF;
		c->ctrl = 0;
		vsxb__conn_gone(c);
	}
	return EMIT_DONE;
}

/* Serve the orphans' RSTs and the pending list while RX buffers last. */
void vsxb__vm_rx_run(struct vsxb_vm *vm)
{
	unsigned budget = 4 * VSXB_TX_BATCH;
	struct conn *c;
	int r;

	vm->rx_behind = true;
	while (vm->orphan_n && vm->live && !vm->broken) {
		if (!vsxb__rx_hdr(vm, &vm->orphan[vm->orphan_head])) {
			vm->st.rx_short++;
			return;
		}
		vm->orphan_head = (vm->orphan_head + 1) % VSXB_ORPHAN_MAX;
		vm->orphan_n--;
	}
	while (!vsxb_list_empty(&vm->pending) && vm->live && !vm->broken) {
		if (!budget--) {
			/* Let other VMs and the TX side run; come back soon. */
			vm->rx_more = true;
			if (vm->resume)
				vm->sh->loop->timer_arm(vm->resume, 0);
			return;
		}
		c = vsxb_container_of(vm->pending.next, struct conn, pnode);
		/* Unlinked while it emits: whatever it schedules for itself
		 * meanwhile (a CREDIT_REQUEST, an RST) links it again. */
		vsxb_list_del(&c->pnode);
		r = conn_emit(c);
		if (c->dead)
			continue;
		if (r == EMIT_NOBUF) {
			if (vsxb_list_empty(&c->pnode))
				vsxb_list_add_head(&vm->pending, &c->pnode);
			vm->st.rx_short++;
			return;
		}
		if (r == EMIT_MORE && vsxb_list_empty(&c->pnode))
			vsxb_list_add_tail(&vm->pending, &c->pnode);
	}
	vm->rx_behind = false;
}
/* ---- Rounds ---- */

/*
 * Spare queue chunks (txbuf.c): while the VM runs, a timer sweeps the pool
 * every VSXB_POOL_SWEEP_MS and frees it once it went unused for a whole
 * period, then gives memory back to the system (malloc_trim) when queues
 * freed enough since the last time: bounded, and only after a quiet
 * period, never per packet. A stopped VM's pool is freed at once.
 */
static void pool_timer_cb(void *arg)
{
	struct vsxb_vm *vm = arg;

	vm->ptimer_armed = false;
	if (vsxb__txq_pool_sweep(&vm->pool))
		malloc_trim(0);
	if (vm->pool.n || vm->pool.freed) {
		vm->sh->loop->timer_arm(vm->ptimer, VSXB_POOL_SWEEP_MS);
		vm->ptimer_armed = true;
	}
}

static void pool_tend(struct vsxb_vm *vm)
{
	const struct vsxu_loop *l = vm->sh->loop;

	if (!vm->live) {
		if (vm->pool.n || vm->pool.freed >= VSXB_TRIM_MIN) {
			vsxb__txq_pool_drain(&vm->pool);
			malloc_trim(0);
		}
		if (vm->ptimer)
			l->timer_free(vm->ptimer);
		vm->ptimer = NULL;
		vm->ptimer_armed = false;
		return;
	}
	if (vm->ptimer_armed || (!vm->pool.n && !vm->pool.freed))
		return;
	if (!vm->ptimer)
		vm->ptimer = l->timer(l->ctx, pool_timer_cb, vm);
	if (vm->ptimer) {
		l->timer_arm(vm->ptimer, VSXB_POOL_SWEEP_MS);
		vm->ptimer_armed = true;
	}
}

/* End of a round for @vm (router.c calls it for every touched VM). */
void vsxb__vm_round(struct vsxb_vm *vm)
{
	/* A SIGBUS in this VM's memory was absorbed (vhost-user/memguard.h):
	 * what it read since are zeros; the device goes, the others stay. */
	if (vm->live && !vm->broken && vsxu_vu_mem_faulted(vm->vu))
		vsxb__vm_broken(vm, VSXB_MEM_FAULT);
	/* a ring found broken in a lent room (struct vsxb_shard) */
	if (vm->break_owed) {
		const char *why = vm->break_owed;

		vm->break_owed = NULL;
		if (vm->live)
			vsxb__vm_broken(vm, why);
	}

	if (vm->live && !vm->broken)
		vsxb__vm_rx_run(vm);
	vsxb__ring_rx_publish(vm);
	pool_tend(vm);
	while (!vsxb_list_empty(&vm->dead)) {
		struct conn *c = vsxb_container_of(vm->dead.next, struct conn, pnode);

		vsxb_list_del(&c->pnode);
		vsxb_list_del(&c->node);
		free(c);
	}
	vm->ndead = 0;
}

/* The end of a lent round (struct vsxb_shard): what this thread's work
 * scheduled in @to's room goes to the guests, as the VMs' own rounds
 * would send it, when their own thread's last round was not left
 * behind (vm->rx_behind: all that is pending is then this room's); their
 * RX used entries are published and the guests told. A VM that needs
 * more stays dirty for its own thread, which this round's end wakes
 * (vsxb__shard_wake). Then the room goes back. */
static void round_lent(struct vsxb_shard *sh, struct vsxb_shard *to)
{
	struct vsxb_list *n, *next;
	bool owed = false;

	for (n = to->dirty.next; n != &to->dirty; n = next) {
		struct vsxb_vm *vm = vsxb_container_of(n, struct vsxb_vm, dnode);

		if (vm->live && !vm->broken && !vm->break_owed && !vm->rx_behind &&
		    !vsxb_list_empty(&vm->pending))
			vsxb__vm_rx_run(vm);
		next = n->next;   /* (after the run: it may touch more) */
		if (vsxb__vm_lent_owed(vm)) {
			vm->st.sib_wakes++;   /* (the lent path's only wake-up) */
			owed = true;
			continue;
		}
		vsxb__ring_rx_publish(vm);
		vsxb_list_del(&vm->dnode);
		vm->dirty = false;
	}
	if (owed)
		vsxb__shard_wake(sh, to);
	to->borrowed = false;
	to->loop->give_back(to->loop->ctx);
}

void vsxb__round(struct vsxb_shard *sh)
{
	unsigned guard = 0;

	if (sh->in_round)
		return;
	sh->in_round = 1;
	while (!vsxb_list_empty(&sh->dirty) && guard++ < 10000) {
		struct vsxb_vm *vm = vsxb_container_of(sh->dirty.next, struct vsxb_vm, dnode);

		vsxb_list_del(&vm->dnode);
		vm->dirty = false;
		vsxb__vm_round(vm);
	}
	/* the rooms this round borrowed, given back once nothing of its
	 * own can borrow more */
	while (sh->nlent)
		round_lent(sh, sh->lent[--sh->nlent]);
	sh->in_round = 0;
	/* after every VM's round: one wake-up per other thread's queue the
	 * round pushed to, however many records it pushed */
	vsxb__shard_posts(sh);
}

void vsxb__round_cb(void *arg)
{
	vsxb__round(arg);
}

void vsxb__round_all(struct vsxb_router *r)
{
	struct vsxb_list *n;

	for (n = r->shards.next; n != &r->shards; n = n->next)
		vsxb__round(vsxb_container_of(n, struct vsxb_shard, node));
}
