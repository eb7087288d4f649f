/*
 * The virtio-vsock device of one VM: a vhost-user device with three queues
 * (rx 0, tx 1, event 2) whose config space is le64 guest_cid. This room
 * holds the vhost-user callbacks (config, kick, start, stop), the TX side
 * (pop chains, check each header, hand the packet to its connection or to
 * the router when it has none), the TRANSPORT_RESET event, and polling
 * (vsxb_router_poll). The guest's packets drive the connection state
 * machine of conn.c; what goes back to the guest is conn.c's RX path.
 */
#include <endian.h>
#include <errno.h>
#include <malloc.h>
#include <string.h>

#include "router.h"
#include "util.h"

static void vm_tx_run(struct vsxb_vm *vm);

/* ---- Event queue ---- */

static void vm_send_event(struct vsxb_vm *vm)
{
	const char *why;
	int rc;

	/* Only when the front-end gave us the event queue (QEMU keeps it). */
	if (!vm->event_pending || !vm->live || vm->paused || vm->broken)
		return;
	rc = vsxb__ring_event(vm, VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, &why);
	if (rc < 0)
		vsxb__vm_broken(vm, why);
	else if (rc > 0)
		vm->event_pending = false;
}

/* ---- Guest -> us (TX) ---- */

/* The guest changed its credit values on @c. Its buf_alloc also bounds
 * what it believes it may send (a Linux guest caps its credit at it), so
 * credit news held back while it had room may be due now: a guest that
 * lowers its buffer below what it has in flight sends nothing more, and
 * would wait for ever. */
static void credit_moved(struct conn *c)
{
	c->credit_req_sent = false;
	if (vsxb__conn_peer_free(c))
		c->credit_stalled = false;
	if (c->ops->credit_changed)
		c->ops->credit_changed(c);
	if (!c->dead)
		vsxb__conn_credit_check(c);
}

/* Deliver the TX batch to its connection's peer (ops->rw). */
static void tx_flush(struct vsxb_vm *vm)
{
	struct conn *c = vm->batch;
	unsigned niov = vm->batch_niov, flags = vm->batch_flags;
	size_t len = vm->batch_len;

	vsxb__batch_drop(vm);
	if (c && !c->dead)
		c->ops->rw(c, vm->iov, niov, (uint32_t)len, flags);
}

/* Guest payload for @c's peer: gathered with the packets of @c before it
 * while its peer takes them at once (ops->gather), delivered at a message
 * end, before any other packet of @c, when the batch is full, and at the
 * end of the TX round; else at once. */
static void tx_data(struct vsxb_vm *vm, struct conn *c, struct iovec *iov,
		    unsigned n, uint32_t len, unsigned flags)
{
	unsigned i;

	if (!c->ops->gather || !c->ops->gather(c)) {
		c->ops->rw(c, iov, n, len, flags);
		return;
	}
	if (vm->batch && (vm->batch != c || vm->batch_niov + n > VSXB_IOV_MAX))
		tx_flush(vm);
	if (c->dead)
		return;
	vm->batch = c;
	for (i = 0; i < n; i++)
		if (iov[i].iov_len)
			vm->iov[vm->batch_niov++] = iov[i];
	vm->batch_len += len;
	if (flags & VIRTIO_VSOCK_SEQ_EOM) {
		vm->batch_flags = flags;
		tx_flush(vm);
	}
}

static void tx_rw(struct vsxb_vm *vm, struct conn *c, const struct vsxb_chain *e,
		  const struct virtio_vsock_hdr *h)
{
	struct iovec iov[VSXB_CHAIN_IOV];
	unsigned n, flags = 0;

	if (c->state == VSXB_CONN_CONNECTING) {
		vsxb__vm_warn(vm, "RW before the connection was established (port %u)",
			     h->src_port);
		goto bad;
	}
	if (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) {
		vsxb__vm_warn(vm, "RW after SHUTDOWN(SEND) (port %u)", h->src_port);
		goto bad;
	}
	/* The edge we announced last is the limit (it never moved back). */
	if (!c->advertised || (int32_t)(c->cr.rx_cnt + h->len - c->cr.rx_limit) > 0) {
		vsxb__vm_warn(vm, "RW beyond the credit given (port %u: %u bytes, "
			     "room %u)", h->src_port, h->len, vsxb__conn_rx_room(c));
		goto bad;
	}
	c->cr.rx_cnt += h->len;
	c->from_guest += h->len;
	vm->ct.from_guest_bytes += h->len;
	if (c->type == VIRTIO_VSOCK_TYPE_SEQPACKET) {
		flags = h->flags & (VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR);
		if (!(flags & VIRTIO_VSOCK_SEQ_EOM))
			flags = 0;
	}
	n = vsxu_iov_slice(iov, VSXB_CHAIN_IOV, e->iov, e->n, VSXB_HDR_LEN, h->len);
	tx_data(vm, c, iov, n, h->len, flags);
	if (!c->dead && c->type == VIRTIO_VSOCK_TYPE_SEQPACKET) {
		if (flags & VIRTIO_VSOCK_SEQ_EOM)
			c->msg_open = false;
		else if (h->len)
			c->msg_open = true;
	}
	return;
bad:
	/* the guest broke the protocol: this connection only */
	vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
	vsxb__conn_reset(c, false);
}

static void tx_response(struct vsxb_vm *vm, struct conn *c)
{
	if (c->state != VSXB_CONN_CONNECTING || c->guest_initiated) {
		vsxb__vm_warn(vm, "unexpected RESPONSE (port %u)", c->guest_port);
		vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
		vsxb__conn_reset(c, false);
		return;
	}
	vsxb__conn_timer(c, T_NONE, 0);
	c->state = VSXB_CONN_ESTABLISHED;
	if (c->ops->established && c->ops->established(c) < 0) {
		vsxb__conn_reset(c, false);
		return;
	}
	vsxb__conn_opened(c);
}

static void tx_rst(struct conn *c)
{
	vsxb__conn_why(c, c->state == VSXB_CONN_CONNECTING ? VSXB_REASON_REFUSED
							 : VSXB_REASON_GUEST_RST, 0);
	/* Never answered. What the guest sent before still goes to the peer. */
	vsxb__conn_gone(c);
}

static void tx_shutdown(struct conn *c, uint32_t flags)
{
	flags &= VSXB_SHUT_BOTH;
	if (c->state == VSXB_CONN_CONNECTING) {
		vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
		vsxb__conn_reset(c, false);
		return;
	}
	if (!flags)
		return;
	c->guest_shut |= flags;
	c->state = VSXB_CONN_CLOSING;
	vsxb__conn_why(c, VSXB_REASON_GUEST_SHUTDOWN, 0);
	if (c->ops->guest_shutdown)
		c->ops->guest_shutdown(c, flags);
}

static void tx_packet(struct vsxb_vm *vm, const struct vsxb_chain *e)
{
	struct virtio_vsock_hdr h;
	const char *bad = NULL;
	struct conn *c;
	bool moved;

	vm->st.tx_pkts++;
	if (e->len < VSXB_HDR_LEN) {
		vm->st.dropped++;
		vsxb__vm_warn(vm, "TX packet shorter than a header (%u bytes): dropped",
			     e->len);
		return;
	}
	/* How the guest's driver lays packets out (6.12 splits the large
	 * ones: header, linear part, pages): at debug level, each time a
	 * packet comes in more pieces than any before. */
	if (e->n > vm->tx_pieces_max) {
		vm->tx_pieces_max = e->n;
		vsxb__log(vm->r, VSXB_LOG_DEBUG, "vm %s: a TX packet in %u piece(s) (%u bytes), "
			  "the most so far", vm->name, e->n, e->len);
	}
	vsxu_iov_to_buf(e->iov, e->n, 0, &h, VSXB_HDR_LEN);
	vsxb_hdr_swap(&h);
	if (h.src_cid != vm->cid) {
		vm->st.dropped++;
		vsxb__vm_warn(vm, "packet from CID %llu, not the guest's: dropped",
			     (unsigned long long)h.src_cid);
		return;
	}
	c = vsxb__conn_find(vm, h.src_port, h.dst_cid, h.dst_port);
	if (h.len > VSOCK_MAX_PKT_PAYLOAD)
		bad = "payload above 64 KiB";
	else if (h.len > e->len - VSXB_HDR_LEN)
		bad = "len beyond the descriptor chain";
	else if (h.type != VIRTIO_VSOCK_TYPE_STREAM &&
		 !(h.type == VIRTIO_VSOCK_TYPE_SEQPACKET && vm->seqpacket))
		bad = "unknown socket type";
	else if (h.op < VIRTIO_VSOCK_OP_REQUEST || h.op > VIRTIO_VSOCK_OP_CREDIT_REQUEST)
		bad = "unknown op";
	else if (c && c->type != h.type)
		bad = "socket type differs from the connection's";
	if (bad) {
		vm->st.dropped++;
		vsxb__vm_warn(vm, "bad packet (%s: type %u op %u len %u, port %u -> "
			     "%llu:%u)", bad, h.type, h.op, h.len, h.src_port,
			     (unsigned long long)h.dst_cid, h.dst_port);
		if (c) {
			if (vm->batch == c)
				tx_flush(vm);
			vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
			vsxb__conn_reset(c, false);
		} else {
			vsxb__orphan_rst(vm, &h);
		}
		return;
	}
	if (!c) {
		vsxb__router_request(vm, &h);
		return;
	}
	if (h.op != VIRTIO_VSOCK_OP_RW && vm->batch == c)
		tx_flush(vm);
	if (c->dead)
		return;

	moved = false;
	if (h.op != VIRTIO_VSOCK_OP_REQUEST && h.op != VIRTIO_VSOCK_OP_RST) {
		moved = c->cr.peer_buf_alloc != h.buf_alloc || c->cr.peer_fwd_cnt != h.fwd_cnt;
		c->cr.peer_buf_alloc = h.buf_alloc;
		c->cr.peer_fwd_cnt = h.fwd_cnt;
	}
	switch (h.op) {
	case VIRTIO_VSOCK_OP_REQUEST:
		vsxb__vm_warn(vm, "REQUEST on an existing connection (port %u)",
			     h.src_port);
		vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
		vsxb__conn_reset(c, false);
		return;
	case VIRTIO_VSOCK_OP_RESPONSE:
		tx_response(vm, c);
		break;
	case VIRTIO_VSOCK_OP_RST:
		tx_rst(c);
		return;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		tx_shutdown(c, h.flags);
		break;
	case VIRTIO_VSOCK_OP_RW:
		tx_rw(vm, c, e, &h);
		break;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		break;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		vsxb__conn_ctrl(c, C_CREDIT_REPLY);
		if (c->ops->credit_request)
			c->ops->credit_request(c);
		break;
	}
	if (moved && !c->dead)
		credit_moved(c);
}

static void vm_tx_run(struct vsxb_vm *vm)
{
	unsigned budget = VSXB_TX_BUDGET, i;
	const char *why;
	int n;

	vm->tx_more = false;
	/* (tx_hold: an adopted device's sibling halves are not made yet:
	 * restart.c runs this once they are) */
	while (vm->live && !vm->paused && !vm->broken && !vm->tx_hold) {
		n = vsxb__ring_tx_pop(vm, &why);
		if (n < 0) {
			vsxb__vm_broken(vm, why);
			return;
		}
		for (i = 0; i < (unsigned)n && !vm->broken; i++) {
			struct vsxb_chain e;

			vsxb__ring_tx_chain(vm, i, &e);
			tx_packet(vm, &e);
		}
		tx_flush(vm);
		if (vm->broken || !vm->live)
			return;
		vsxb__ring_tx_done(vm, (unsigned)n);
		/* what the batch owes the guest (its RSTs among it) */
		vsxb__vm_rx_run(vm);
		budget -= (unsigned)n < budget ? (unsigned)n : budget;
		if (n < VSXB_TX_BATCH) {
			/* the loop polls the ring (vsxb_router_poll): no kick */
			if (vm->sh->polling)
				return;
			if (!vsxb__ring_tx_rearm(vm))
				return;
		}
		if (!budget) {
			/* Yield to other VMs and sockets; resume right after. */
			vm->tx_more = true;
			if (vm->resume)
				vm->sh->loop->timer_arm(vm->resume, 0);
			return;
		}
	}
}

/* vsxb_router_poll for one VM: true when its TX ring had packets. */
static bool vm_poll(struct vsxb_vm *vm, bool sleeping)
{
	if (!vm->live || vm->paused || vm->broken || !vsxb__ring_tx_ready(vm, sleeping))
		return false;
	vm_tx_run(vm);
	vsxb__vm_touch(vm);
	return true;
}

void vsxb__vm_resume(struct vsxb_vm *vm)
{
	vm->rx_more = false;
	if (vm->tx_more)
		vm_tx_run(vm);
	vsxb__vm_touch(vm);
}

bool vsxb_router_poll_loop(struct vsxb_router *r, const struct vsxu_loop *loop,
			   bool sleeping)
{
	struct vsxb_shard *sh = loop ? NULL : r->home;
	struct vsxb_list *n;
	bool found = false;

	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = vsxb_container_of(n, struct vsxb_vm, node);

		if (sh ? vm->sh != sh : vm->sh->loop != loop)
			continue;
		sh = vm->sh;
		sh->polling = !sleeping;
		found |= vm_poll(vm, sleeping);
	}
	if (found)
		vsxb__round(sh);
	return found;
}

bool vsxb_router_poll(struct vsxb_router *r, bool sleeping)
{
	return vsxb_router_poll_loop(r, NULL, sleeping);
}

/* ---- Device callbacks ---- */

/*
 * Once per process, when a device first starts: malloc keeps freed memory
 * at the top of its heap (up to VSXB_TRIM_THRESHOLD) instead of handing it
 * back at every free, which cost a brk and fresh page faults per queue
 * fill-and-drain cycle; the sweep gives it back (malloc_trim) after a quiet
 * period. This also fixes the mmap threshold, so malloc's dynamic
 * threshold no longer moves: queue chunks (at most VSXB_CHUNK_MAX) stay
 * below it whatever was freed before.
 */
static void malloc_tune(void)
{
	static int done;

	if (__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
		return;
	mallopt(M_MMAP_THRESHOLD, VSXB_MMAP_THRESHOLD);
	mallopt(M_TRIM_THRESHOLD, VSXB_TRIM_THRESHOLD);
}

static int op_get_config(void *dev, uint32_t off, void *buf, uint32_t len)
{
	struct vsxb_vm *vm = dev;
	uint64_t cid = htole64(vm->cid);
	uint8_t cfg[8];

	if (off > 256 || len > 256 - off)
		return -EINVAL;
	memcpy(cfg, &cid, sizeof(cfg));
	memset(buf, 0, len);
	if (off < sizeof(cfg))
		memcpy(buf, cfg + off, vsxb_u32min(len, (uint32_t)sizeof(cfg) - off));
	return 0;
}

static void op_kick(void *dev, unsigned q)
{
	struct vsxb_vm *vm = dev;

	if (!vm->live || vm->paused || vm->broken)
		return;
	if (q == VSOCK_VQ_TX)
		vm_tx_run(vm);
	else if (q == VSOCK_VQ_EVENT)
		vm_send_event(vm);
	vsxb__vm_touch(vm); /* RX: buffers came; the round serves them */
	vsxb__round(vm->sh);
}

/* ---- Pause and resume ---- */

/*
 * QEMU stops a device's rings with GET_VRING_BASE both when the VM pauses
 * (stop, snapshot, migration) and when the guest resets the device; only
 * the next start tells them apart (vhost-user: the rings restart where
 * they stopped, or at 0). Until then the VM is paused: its connections
 * stay, nothing reads or writes guest memory (vsxb__ring_rx_pop finds no
 * buffers, TX is not looked at), host sockets are read only into RX
 * buffers, so their bytes wait in the kernel's socket buffers, and what
 * vsxd holds stays within the credit windows it gave; timers that wait for
 * the guest are held. Control requests go on as usual.
 */
static void vm_pause(struct vsxb_vm *vm)
{
	vm->paused = true;
	vm->paused_ms = vsx__now_ms();
	vm->tx_more = false;
	vsxb__vm_timers_hold(vm);
	if (vm->resume)
		vm->sh->loop->timer_disarm(vm->resume);
	vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device stopped (VM paused, or a guest "
		 "reset the restart will show): %u connection(s) kept", vm->name, vm->nconns);
}

static void vm_unpause(struct vsxb_vm *vm)
{
	vsxb__ring_take(vm);
	vm->paused = false;
	vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device resumed after %.1f s (VM paused "
		 "and continued): %u connection(s) kept", vm->name,
		 (double)(vsx__now_ms() - vm->paused_ms) / 1000.0, vm->nconns);
	vsxb__vm_timers_release(vm);
}

static void vm_reset_paused(struct vsxb_vm *vm, bool bad)
{
	vsxb__log(vm->r, bad ? VSXB_LOG_ERR : VSXB_LOG_INFO, "vm %s: device restarted %s: "
		 "%u connection(s) reset", vm->name, bad ? "at ring indexes where it did not "
		 "stop" : "as new (the guest reset it)", vm->nconns);
	vm->paused = false;
	vsxb__vm_drop_all(vm, false);
	vm->tx_more = false;
	vsxb__ring_release(vm);
}

static void op_start(void *dev, enum vsxu_vu_start how)
{
	struct vsxb_vm *vm = dev;

	if (vm->freeing)
		return;
	malloc_tune();
	if (vm->paused) {
		if (how == VSXU_VU_START_RESUMED) {
			vm_unpause(vm);
			vsxb__device_event(vm, true);
			vm_send_event(vm);
			/* RSTs an adoption while paused still owes (restart.c) */
			if (vm->rst_next < vm->rst_n && vm->rst_timer)
				vm->sh->loop->timer_arm(vm->rst_timer, 0);
			vm_tx_run(vm);
			vsxb__vm_touch(vm);
			vsxb__round(vm->sh);
			return;
		}
		vm_reset_paused(vm, how == VSXU_VU_START_BAD);
	}
	vsxb__vm_rings_taken(vm);
	vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device started (cid %llu%s)", vm->name,
		 (unsigned long long)vm->cid, vm->seqpacket ? ", seqpacket" : "");
	if (how == VSXU_VU_START_BAD) {
		vsxb__vm_broken(vm, "rings restarted where they did not stop");
		return;
	}
	/* Always: a front-end that reconnects to a restarted vsxd keeps a
	 * guest whose sockets belong to a device session this process never
	 * saw; for a fresh guest the event resets nothing. Not when a live
	 * handoff kept the connections (restart.c): they go on. */
	vm->event_pending = !vm->keep_conns;
	vm->keep_conns = false;
	vm_send_event(vm);
	vsxb__device_event(vm, true);
	vm_tx_run(vm);
	vsxb__vm_touch(vm);
	vsxb__round(vm->sh);
}

static void op_changed(void *dev)
{
	struct vsxb_vm *vm = dev;

	/* paused: the state once every ring stopped, or none while the
	 * front-end sets them up again */
	if (vm->live)
		vsxb__device_event(vm, true);
}

static void op_stop(void *dev, bool resumable)
{
	struct vsxb_vm *vm = dev;

	if (!vm->live)
		return;
	if (resumable && !vm->broken) {
		vm_pause(vm);
		/* held, its state complete once every ring stopped (op_changed) */
		vsxb__device_event(vm, true);
		return;
	}
	vsxb__device_event(vm, false);
	if (vm->nconns)
		vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device stopped%s: %u connection(s) "
			 "reset", vm->name, vm->paused ? " for good while paused" : "",
			 vm->nconns);
	vm->paused = false;
	vsxb__vm_drop_all(vm, false);
	vm->live = false;
	vm->broken = false;
	vm->break_owed = NULL;
	vm->event_pending = false;
	vm->tx_more = false;
	vsxb__ring_release(vm);
	if (vm->resume)
		vm->sh->loop->timer_disarm(vm->resume);
	vsxb__vm_touch(vm);
	vsxb__round(vm->sh);
}

static void op_log(void *dev, const char *msg)
{
	struct vsxb_vm *vm = dev;

	vsxb__log(vm->r, VSXB_LOG_WARNING, "vm %s: %s", vm->name, msg);
}

const struct vsxu_vu_ops vsxb__vsock_ops = {
	.features = 1ull << VIRTIO_VSOCK_F_SEQPACKET,
	.nqueues = VSOCK_NUM_QUEUES,
	.min_queues = 2, /* rx, tx; QEMU keeps the event queue itself */
	.get_config = op_get_config,
	.kick = op_kick,
	.changed = op_changed,
	.start = op_start,
	.stop = op_stop,
	.log = op_log,
};
