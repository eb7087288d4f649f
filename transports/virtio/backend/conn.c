/*
 * The vsock backend's design, and its core: the connections.
 *
 * One device per VM, a vhost-user device with three queues (rx 0, tx 1,
 * event 2) whose config space is le64 guest_cid (device.c). Each guest
 * connection has a peer, the other end: a host program on a Unix socket
 * (peer_host.c: guest -> host through "<uds_path>_<port>", host -> guest
 * through the hybrid CONNECT handshake of uds.c, or a descriptor a
 * vsxd forward hands over), or a connection of a sibling VM sharing a
 * group (one connection in each VM: peer_sibling.c when both VMs are on
 * one thread, peer_xsib.c when they are on two, with records through a
 * queue each way). A peer kind is one
 * file and one static const struct vsxb_peer_ops (backend-int.h); a connection
 * carries its table and a private part only that file touches, and the
 * engine calls through the table, never asking which kind it has. The
 * router (router.c) holds what VMs share and routes a guest REQUEST to
 * the peer that creates the connection. This file is the connection API
 * the peers, the device and the router call: the state machine, credit,
 * what goes to the guest (control packets, the pending list, and the
 * guest RX buffers a peer fills with its data: vsxb__rx_reserve and
 * vsxb__rx_commit) and timers; when it goes, the rounds, is round.c's,
 * above the peers. The ring mechanics are ring.c's: popping
 * chains, laying headers and payload slices, giving back unused chains,
 * publishing used entries; no peer touches a chain or calls vq.c.
 *
 * Connections are keyed by (guest port, peer CID, peer port) in a per-VM
 * hash; ids are unique in the process and never reused. Everything of a
 * connection belongs to its VM and is touched from that VM's loop (its
 * shard's thread, or the control thread in a world stop: backend-int.h); the
 * router's state (struct vsxb_router) is the only thing VMs share.
 *
 * Processing rounds (round.c). Every entry point (a kick, a host socket
 * event, a timer, a control call) does its work, then its shard's round
 * runs (vsxb__round): a control call and a kick call it last; a peer's or
 * a timer's callback only owes it (vsxb__round_owe), and the loop runs it
 * once that callback returns (loop.h's queue), so no peer runs the
 * engine's round from inside its own callback. The round serves the
 * pending RX list of every VM the work touched (what it scheduled) and
 * publishes the RX used entries of the round with one flush (push many,
 * flush once: ring.c, vsxb__ring_rx_publish). TX used entries are
 * published per batch of TX chains (device.c: up to VSXB_TX_BATCH chains,
 * flushed once the batch's packets were handled: vsxb__ring_tx_done).
 * Connections are freed at the end of a round, never under a caller.
 *
 * Guest -> peer (TX, device.c). A round pops up to VSXB_TX_BATCH chains.
 * Headers are checked before anything is trusted: src_cid must be the
 * guest's (else the packet is dropped), len must fit in 64 KiB and in the
 * chain, type and op must be known, RW must stay within the credit we
 * gave; a bad packet for a connection resets that connection only, one
 * without a connection gets an RST reply (never for an RST). Payload goes
 * to the peer (ops->rw) as iovecs pointing into guest memory. For a peer
 * that takes them at once (ops->gather: the host peer while its socket
 * takes data), device.c gathers consecutive RW packets of one connection
 * in the VM's TX batch and hands them over at a message end, before any
 * other packet of the connection, when the batch is full and at the end of
 * the batch of chains; the host peer writes them to the host socket with
 * one sendmsg; what the socket does not take is copied into the
 * connection's queue (txbuf.c),
 * which the credit window bounds: the guest may not send beyond it, and
 * is reset if it does. While bytes wait there the socket is full: new
 * payload is only appended (no sendmsg that would say EAGAIN), and the
 * socket's write watch flushes. The sibling peer copies payload from the
 * sender's TX buffers straight into the receiver's RX buffers.
 *
 * Peer -> guest (RX). Control packets are a bitmask per connection (at most
 * one of each kind pending: the queue is bounded whatever the guest does).
 * A connection that owes its guest something joins the VM's pending list
 * (vsxb__conn_schedule), whatever callback it is in; the engine serves
 * the list round-robin while RX buffers last (round.c's vsxb__vm_rx_run: at the end
 * of the round, and after each TX batch, so that a batch's answers, its
 * RSTs for packets without a connection among them, never wait for the
 * next). Nothing emits from inside a peer's callback, and no flag says
 * whether an emission is in progress. Emission order per
 * connection: REQUEST/RESPONSE, credit packets, data (ops->emit), SHUTDOWN,
 * RST. A peer's data goes in two steps, as libvhost-user's pop and push:
 * vsxb__rx_reserve pops as many RX chains as the bytes asked for need (at
 * most 64 KiB per packet) and hands their payload parts to the peer as
 * iovecs; the peer reads or copies into them and says how much it put
 * there, and vsxb__rx_commit writes one header per chain filled and gives
 * the others back. No callback: the peer's own code does the read. The
 * host peer's is one readv from the socket, asking for as much as the
 * guest's credit allows, up to VSXB_RX_READ (512 KiB: a whole ring of
 * Linux's 4 KiB buffers) and VSXB_RX_BATCH chains; so a wakeup that finds
 * a window of data takes it in one readv. The sibling peer copies from the
 * other guest's TX buffers (or from the receiving half's queue).
 *
 * Credit. Counters are wrapping u32 byte counts. We may send
 * peer_buf_alloc - (tx_cnt - peer_fwd_cnt); every packet carries our
 * buf_alloc and fwd_cnt (ops->window: for a sibling pair, the other
 * guest's values, so credit is end to end, capped by our buf_alloc). The
 * window's right edge (fwd_cnt + buf_alloc) we announce never moves back,
 * as TCP never shrinks a window: a smaller buf_alloc (set_buffer) takes
 * effect as bytes are consumed. So the edge announced last is a hard
 * limit: an RW beyond it resets the connection, and what we queue for a
 * connection never exceeds its window. A CREDIT_UPDATE is sent only when
 * the guest could otherwise stall, as Linux's virtio_transport_common
 * does: when the free space the guest last heard of fell below one
 * maximum packet (64 KiB) and we have consumed bytes since (for buf_alloc
 * below 64 KiB that is after every consumption); unlike Linux we count
 * bytes still queued, i.e. we use the guest's view, not only what was
 * consumed since the last update. The free space the guest heard of is
 * also capped by its own buf_alloc (a Linux guest caps its credit at it),
 * so the check runs again whenever a guest's buffer changes: a guest that
 * lowered it below what it has in flight sends no packet that would run
 * it otherwise.
 * A CREDIT_REQUEST is always answered;
 * set_buffer always sends an update. We send CREDIT_REQUEST ourselves
 * only when a whole SEQPACKET message from a host socket waits for more
 * credit than the guest gave.
 *
 * Close. A guest SHUTDOWN goes to the peer (ops->guest_shutdown): the host
 * peer applies it to the socket per direction (SEND: shutdown(SHUT_WR)
 * once the queue drained; RCV: SHUT_RD, we stop reading); the sibling
 * peer relays it. When the guest has shut a host connection down both
 * ways we answer RST, as Linux does, and the host side keeps draining the
 * queue for up to the linger time (VSXB_DEFAULT_LINGER_MS unless set;
 * ops->end, VSXB_END_GONE). A host EOF sends SHUTDOWN(SEND); a host that is fully gone
 * (POLLHUP) SHUTDOWN(RCV|SEND), and if the guest does not RST within the
 * linger time we do. Nothing answers an RST with an RST.
 *
 * Broken guests. A chain vq.c rejects marks the device broken: logged
 * once, every connection reset, host peers closed, siblings told; the
 * device stays silent until the front-end restarts it. The next start
 * after a stop that was not a pause sends VIRTIO_VSOCK_EVENT_TRANSPORT_RESET
 * on the event queue so the guest drops sockets it still believes in, when
 * the front-end gave us that queue (QEMU 7.2 keeps it and sends the event
 * itself, on migration); a stale guest socket then meets an RST on its
 * first packet instead.
 *
 * Memory faults. A VMM that shrinks the file behind guest memory makes our
 * next access to it raise SIGBUS. vhost-user/memguard.h absorbs that
 * signal inside guest mappings (the mapping becomes zero pages and is
 * marked), so the access completes with zeros; vsxb__vm_round sees the
 * mark (vsxu_vu_mem_faulted) at the end of that VM's round and breaks the
 * device as above, before anything else is sent for it. A kernel copy on
 * such memory fails with EFAULT instead (peer_host.c, host_mem_fault):
 * the same break. Other VMs never notice.
 *
 * Pauses. A stop the front-end may resume (device.c, vm_pause) keeps
 * every connection; until the start that says what it was, nothing
 * touches the VM's memory (vsxb__ring_rx_pop finds no buffers, TX is not
 * read) and its guest-bound timers are held (vsxb__vm_timers_hold).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "conn.h"
#include "util.h"

/* a TX batch's RSTs all fit (device.c serves them after each batch) */
_Static_assert(VSXB_ORPHAN_MAX >= VSXB_TX_BATCH, "VSXB_ORPHAN_MAX below VSXB_TX_BATCH");

/* ---- Headers to the guest ---- */

/*
 * The fwd_cnt and buf_alloc to announce now. The window's right edge
 * (fwd_cnt + buf_alloc) never moves back, as TCP never shrinks its window:
 * a smaller buf_alloc takes effect as the guest's bytes are consumed, so a
 * guest never has packets in flight that a newer announcement forbids, and
 * the edge we announced last is a hard limit.
 */
static void conn_adv(const struct conn *c, uint32_t *fwd, uint32_t *buf)
{
	vsxb__conn_window(c, fwd, buf);
	if (c->advertised && (int32_t)(*fwd + *buf - c->cr.rx_limit) < 0 &&
	    (int32_t)(c->cr.rx_limit - *fwd) > 0)
		*buf = c->cr.rx_limit - *fwd;
}

/* A header from us (the peer) to the guest, in CPU order; records what
 * the guest now knows of our credit. */
static void conn_hdr(struct conn *c, struct virtio_vsock_hdr *h, uint16_t op,
		     uint32_t flags, uint32_t len)
{
	uint32_t fwd, buf;

	conn_adv(c, &fwd, &buf);
	h->src_cid = c->peer_cid;
	h->dst_cid = c->vm->cid;
	h->src_port = c->peer_port;
	h->dst_port = c->guest_port;
	h->len = len;
	h->type = c->type;
	h->op = op;
	h->flags = flags;
	h->buf_alloc = buf;
	h->fwd_cnt = fwd;
	c->cr.last_fwd_sent = fwd;
	c->cr.last_buf_sent = buf;
	c->cr.rx_limit = fwd + buf;
	c->advertised = true;
}

/* ---- RX queue ---- */

/* Payload of @len bytes for @c already in RX chain @i: its RW header
 * (the last packet of a message with @flags), pushed. */
static void rx_put(struct conn *c, unsigned i, uint32_t len, unsigned flags)
{
	struct vsxb_vm *vm = c->vm;
	struct virtio_vsock_hdr h;

	conn_hdr(c, &h, VIRTIO_VSOCK_OP_RW, flags, len);
	vsxb__ring_rx_push(vm, i, &h);
	vsxb__vm_touch(vm);
	c->cr.tx_cnt += len;
	c->to_guest += len;
	vm->ct.to_guest_bytes += len;
}

int vsxb__rx_reserve(struct conn *c, size_t want, unsigned max, bool whole,
		     struct vsxb_rx *rx)
{
	struct vsxb_vm *vm = c->vm;
	const char *why;
	int n;

	n = vsxb__ring_rx_gather(vm, want, max, whole, rx->cap, &rx->iov, &rx->niov,
				 &rx->room, &why);
	if (n == -EIO && why)
		vsxb__vm_broken(vm, why);
	if (n == -EMSGSIZE)
		return n;
	if (n <= 0)
		return -ENOBUFS;
	rx->n = (unsigned)n;
	return 0;
}

void vsxb__rx_commit(struct conn *c, struct vsxb_rx *rx, size_t len, unsigned flags)
{
	unsigned i;

	/* One packet per buffer filled, in order; the rest go back. */
	for (i = 0; i < rx->n && len; i++) {
		uint32_t k = len < rx->cap[i] ? (uint32_t)len : rx->cap[i];

		len -= k;
		rx_put(c, i, k, len ? 0 : flags);
	}
	vsxb__ring_rx_unpop(c->vm, rx->n - i);
	rx->n = 0;
}

bool vsxb__rx_empty(struct conn *c, unsigned flags)
{
	const char *why;
	int rc = vsxb__ring_rx_pop(c->vm, &why);

	if (rc < 0 && why)
		vsxb__vm_broken(c->vm, why);
	if (rc <= 0)
		return false;
	rx_put(c, 0, 0, flags);
	return true;
}

/* One header-only packet into the RX queue; false without a buffer. */
bool vsxb__rx_hdr(struct vsxb_vm *vm, struct virtio_vsock_hdr *h)
{
	const char *why;
	int rc = vsxb__ring_rx_pop(vm, &why);

	if (rc < 0 && why)
		vsxb__vm_broken(vm, why);
	if (rc <= 0)
		return false;
	vm->st.ctrl_sent++;
	if (h->op == VIRTIO_VSOCK_OP_RST)
		vm->st.resets++;
	else if (h->op == VIRTIO_VSOCK_OP_CREDIT_UPDATE)
		vm->st.credit_updates++;
	else if (h->op == VIRTIO_VSOCK_OP_CREDIT_REQUEST)
		vm->st.credit_requests++;
	vsxb__ring_rx_push(vm, 0, h);
	vsxb__vm_touch(vm);
	return true;
}

bool vsxb__rx_ctrl(struct conn *c, uint16_t op, uint32_t flags)
{
	struct virtio_vsock_hdr h;
	uint32_t fwd = c->cr.last_fwd_sent, buf = c->cr.last_buf_sent, lim = c->cr.rx_limit;
	bool adv = c->advertised;

	conn_hdr(c, &h, op, flags, 0);
	if (vsxb__rx_hdr(c->vm, &h))
		return true;
	/* Not sent: the guest learnt nothing. */
	c->cr.last_fwd_sent = fwd;
	c->cr.last_buf_sent = buf;
	c->cr.rx_limit = lim;
	c->advertised = adv;
	return false;
}

/* An RST for a packet that has no connection (CPU-order @h from the guest). */
void vsxb__orphan_rst(struct vsxb_vm *vm, const struct virtio_vsock_hdr *in)
{
	struct virtio_vsock_hdr h = {
		.src_cid = in->dst_cid,
		.dst_cid = in->src_cid,
		.src_port = in->dst_port,
		.dst_port = in->src_port,
		.type = in->type,
		.op = VIRTIO_VSOCK_OP_RST,
	};

	if (in->op == VIRTIO_VSOCK_OP_RST || !vm->live || vm->broken)
		return;
	vsxb__vm_touch(vm);
	if (vm->orphan_n == VSXB_ORPHAN_MAX) {
		vm->st.orphans_dropped++;
		return;
	}
	vm->orphan[(vm->orphan_head + vm->orphan_n) % VSXB_ORPHAN_MAX] = h;
	vm->orphan_n++;
}

/* ---- Connection table ---- */

static unsigned conn_hash(const struct vsxb_vm *vm, uint32_t gport, uint64_t pcid,
			  uint32_t pport)
{
	uint64_t k = ((uint64_t)gport << 32 | pport) ^ (pcid * 0x9E3779B97F4A7C15ull)
		     ^ vm->hash_seed;

	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return (unsigned)k & (vm->hash_size - 1);
}

struct conn *vsxb__conn_find(struct vsxb_vm *vm, uint32_t gport, uint64_t pcid,
			    uint32_t pport)
{
	struct conn *c;

	if (!vm->hash_size)
		return NULL;
	for (c = vm->hash[conn_hash(vm, gport, pcid, pport)]; c; c = c->hnext)
		if (c->guest_port == gport && c->peer_cid == pcid &&
		    c->peer_port == pport)
			return c;
	return NULL;
}

struct conn *vsxb__vm_conn(struct vsxb_vm *vm, uint64_t id)
{
	struct vsxb_list *n;

	/* ids are unique in the router: the first match is the only one */
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (c->id == id)
			return c->dead ? NULL : c;
	}
	return NULL;
}

bool vsxb__vm_listed(const struct vsxb_router *r, const struct vsxb_vm *vm,
		     uint64_t serial)
{
	const struct vsxb_list *n;

	for (n = r->vms.next; n != &r->vms; n = n->next)
		if (vsxb_container_of(n, struct vsxb_vm, node) == vm)
			return vm->serial == serial;
	return false;
}

static void hash_grow(struct vsxb_vm *vm)
{
	unsigned nsize = vm->hash_size ? vm->hash_size * 2 : 64, i;
	struct conn **old = vm->hash, **nh, *c, *next;
	unsigned osize = vm->hash_size;

	nh = calloc(nsize, sizeof(*nh));
	if (!nh)
		return; /* longer chains, still correct */
	if (!vm->hash_seed) {
		if (getrandom(&vm->hash_seed, sizeof(vm->hash_seed), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(vm->hash_seed))
			vm->hash_seed = (uint64_t)(uintptr_t)vm ^
					(uint64_t)getpid() << 32;
	}
	vm->hash = nh;
	vm->hash_size = nsize;
	for (i = 0; i < osize; i++) {
		for (c = old[i]; c; c = next) {
			unsigned b = conn_hash(vm, c->guest_port, c->peer_cid,
					       c->peer_port);

			next = c->hnext;
			c->hnext = nh[b];
			nh[b] = c;
		}
	}
	free(old);
}

static void conn_hash_add(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;
	unsigned b;

	if (vm->hashed >= vm->hash_size)
		hash_grow(vm);
	if (!vm->hash_size)
		return;
	b = conn_hash(vm, c->guest_port, c->peer_cid, c->peer_port);
	c->hnext = vm->hash[b];
	vm->hash[b] = c;
	c->hashed = true;
	vm->hashed++;
}

void vsxb__conn_unhash(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;
	struct conn **pp;

	if (!c->hashed)
		return;
	pp = &vm->hash[conn_hash(vm, c->guest_port, c->peer_cid, c->peer_port)];
	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == c) {
			*pp = c->hnext;
			break;
		}
	}
	c->hnext = NULL;
	c->hashed = false;
	vm->hashed--;
}

/* ---- Queue memory ---- */

bool vsxb__conn_mem_ok(struct conn *c)
{
	struct vsxb_router *r = c->vm->r;

	if (!r->lim.max_conn_memory || c->dead || c->q.mem <= r->lim.max_conn_memory)
		return true;
	vsxb_add(&r->st.reset_limit_memory, 1);
	vsxb__log(r, VSXB_LOG_WARNING, "vm %s: connection %llu: queue memory %zu above "
		 "max-conn-memory (%llu): reset", c->vm->name, (unsigned long long)c->id,
		 c->q.mem, (unsigned long long)r->lim.max_conn_memory);
	vsxb__conn_why(c, VSXB_REASON_LIMIT, 0);
	c->why_limit = VSXB_LIMIT_MEMORY;
	vsxb__conn_reset(c, false);
	return false;
}

/*
 * Whether a sibling's bytes may go straight into @c's guest's RX buffers
 * now, in the order one thread's emission would give them: nothing of @c
 * waits that must reach the guest before them (a credit packet may
 * follow them: it says what they say, or newer), and no connection of
 * the VM waits for buffers the round before could not find.
 */
bool vsxb__conn_rx_direct_ok(const struct conn *c)
{
	const struct vsxb_vm *vm = c->vm;

	return vm->live && !vm->broken && !vm->break_owed && !vm->rx_behind &&
	       !(c->ctrl & ~(unsigned)(C_CREDIT_UPDATE | C_CREDIT_REPLY | C_CREDIT_REQUEST)) &&
	       !c->shut_pending;
}

int vsxb__conn_enqueue(struct conn *holder, const struct iovec *iov, unsigned n,
		       size_t len, size_t room, unsigned flags)
{
	if (vsxb__txq_append(&holder->q, iov, n, len, room, flags) < 0)
		return -ENOMEM;
	holder->vm->st.queued_bytes += len;
	return vsxb__conn_mem_ok(holder) ? 0 : -ENOBUFS;
}

/* ---- Connection life ---- */

struct conn *vsxb__conn_new(struct vsxb_vm *vm, const struct vsxb_peer_ops *ops,
			   uint16_t type, uint32_t guest_port, uint64_t peer_cid,
			   uint32_t peer_port)
{
	/* the peer's private part follows, aligned for anything */
	size_t off = (sizeof(struct conn) + _Alignof(max_align_t) - 1) &
		     ~(_Alignof(max_align_t) - 1);
	struct conn *c;

	if (vm->nconns >= vm->r->lim.max_conns_per_vm)
		goto limit;
	/* across shards: take the place, give it back when over */
	if (vsxb_add(&vm->r->nconns, 1) > vm->r->lim.max_conns && vm->r->lim.max_conns) {
		vsxb_add(&vm->r->nconns, -1);
		goto limit;
	}
	c = calloc(1, off + ops->priv_size);
	if (!c) {
		vsxb_add(&vm->r->nconns, -1);
		return NULL;
	}
	c->id = vsxb_add(&vm->r->next_id, 1) - 1;
	c->ops = ops;
	c->peer_kind = ops->name;
	c->priv = ops->priv_size ? (char *)c + off : NULL;
	c->vm = vm;
	vsxb_list_init(&c->pnode);
	c->type = type;
	c->state = VSXB_CONN_CONNECTING;
	c->guest_port = guest_port;
	c->peer_cid = peer_cid;
	c->peer_port = peer_port;
	c->cr.buf_alloc = vsxb__buf_cap(vm->r, vm->buf_default);
	c->cr.rx_cnt = c->cr.fwd_cnt = c->cr.tx_cnt = vm->r->counter_base;
	c->cr.last_fwd_sent = c->cr.peer_fwd_cnt = vm->r->counter_base;
	vsxb__txq_init(&c->q, type == VIRTIO_VSOCK_TYPE_SEQPACKET);
	c->q.pool = &vm->pool;
	vsxb_list_add_tail(&vm->conns, &c->node);
	vm->nconns++;
	conn_hash_add(c);
	return c;
limit:
	vsxb__vm_warn(vm, "connection limit reached");
	return NULL;
}

/* Timers that wait for the guest: a paused guest cannot answer. */
static bool guest_timer(enum conn_timer_kind kind)
{
	return kind == T_CONNECT || kind == T_LINGER;
}

static void conn_timer_cb(void *arg)
{
	struct conn *c = arg;
	struct vsxb_router *r = c->vm->r;
	enum conn_timer_kind k = c->tkind;

	if (c->vm->paused && guest_timer(k)) {
		c->theld = true; /* vsxb__vm_timers_release re-arms it */
		return;
	}
	c->tkind = T_NONE;
	switch (k) {
	case T_CONNECT:
		/* debug only: the refuse event (reason connect-timeout) is the
		 * rate-limited line operators see */
		vsxb__log(r, VSXB_LOG_DEBUG, "vm %s: connection %llu: no answer to REQUEST "
			 "in %u ms", c->vm->name, (unsigned long long)c->id,
			 r->lim.connect_ms);
		vsxb__conn_why(c, VSXB_REASON_CONNECT_TIMEOUT, 0);
		vsxb__conn_reset(c, false);
		break;
	case T_LINGER:
		vsxb__conn_why(c, VSXB_REASON_LINGER_TIMEOUT, 0);
		vsxb__conn_reset(c, false);
		break;
	case T_DRAIN:
		vsxb__conn_kill(c);
		break;
	case T_NONE:
		break;
	}
	vsxb__round_owe(c->vm->sh);
}

static unsigned timer_ms(const struct vsxb_router *r, enum conn_timer_kind kind)
{
	return kind == T_CONNECT ? r->lim.connect_ms : r->lim.linger_ms;
}

void vsxb__conn_timer(struct conn *c, enum conn_timer_kind kind, unsigned ms)
{
	const struct vsxu_loop *l = c->vm->sh->loop;

	VSXB_OWNED(c->vm, "conn_timer");
	if (c->dead)
		return;
	c->theld = false;
	if (kind == T_NONE) {
		if (c->timer)
			l->timer_disarm(c->timer);
		c->tkind = T_NONE;
		return;
	}
	if (c->vm->paused && guest_timer(kind)) {
		if (c->timer)
			l->timer_disarm(c->timer);
		c->tkind = kind;
		c->theld = true;
		c->tdue_ms = 0;
		return;
	}
	if (!c->timer) {
		c->timer = l->timer(l->ctx, conn_timer_cb, c);
		if (!c->timer)
			return; /* unbounded wait rather than a failure: logged */
	}
	c->tkind = kind;
	c->tdue_ms = vsx__now_ms() + ms;
	l->timer_arm(c->timer, ms);
}

unsigned vsxb__conn_timer_left(const struct conn *c, unsigned full)
{
	uint64_t now = vsx__now_ms();

	if (c->tkind == T_NONE)
		return 0;
	if (c->theld || !c->tdue_ms)
		return full;     /* held: armed again whole at the resume */
	return c->tdue_ms > now ? (unsigned)(c->tdue_ms - now) : 1;
}

void vsxb__conn_kill(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;

	VSXB_OWNED(vm, "conn_kill");
	if (c->dead)
		return;
	/* The one place every connection ends: report it. */
	vsxb__conn_ended(c);
	c->dead = true;
	vsxb__conn_unhash(c);
	vsxb_list_del(&c->pnode);
	if (c->ops->end)
		c->ops->end(c, VSXB_END_RELEASE);
	if (c->timer) {
		vm->sh->loop->timer_free(c->timer);
		c->timer = NULL;
	}
	vsxb__txq_clear(&c->q);
	if (vm->batch == c)
		vsxb__batch_drop(vm);
	c->ctrl = 0;
	c->shut_pending = 0;
	vm->nconns--;
	vsxb_add(&vm->r->nconns, -1);
	vm->ndead++;
	/* (freed at the end of the round without a walk of every
	 * connection: a close costs the same however many are open) */
	vsxb_list_add_tail(&vm->dead, &c->pnode);
	vsxb__vm_touch(vm);
}

void vsxb__conn_peer_reset(struct conn *c, bool data_left)
{
	if (c->dead)
		return;
	vsxb__conn_why(c, c->state == VSXB_CONN_CONNECTING && c->guest_initiated ?
			 VSXB_REASON_REFUSED : VSXB_REASON_PEER_RST, 0);
	if (c->state == VSXB_CONN_CONNECTING) {
		vsxb__conn_reset(c, false);
		return;
	}
	c->state = VSXB_CONN_CLOSING;
	vsxb__conn_unhash(c);
	c->ctrl = C_RST;
	if (data_left)
		vsxb__conn_timer(c, T_LINGER, c->vm->r->lim.linger_ms);
	vsxb__conn_schedule(c);
}

bool vsxb__conn_takes_data(const struct conn *c)
{
	return !c->dead && !(c->ctrl & C_RST) &&
	       !(c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV);
}

void vsxb__conn_reset(struct conn *c, bool quiet)
{
	struct vsxb_vm *vm = c->vm;

	if (c->dead)
		return;
	if (c->draining) {
		/* The guest already had its RST: just let the host side go. */
		vsxb__conn_kill(c);
		return;
	}
	if (c->ops->end)
		c->ops->end(c, VSXB_END_RESET);
	vsxb__txq_clear(&c->q);
	if (vm->batch == c)
		vsxb__batch_drop(vm);
	if (quiet || !vm->live || vm->broken) {
		vsxb__conn_kill(c);
		return;
	}
	vsxb__conn_unhash(c);
	vsxb__conn_timer(c, T_NONE, 0);
	c->state = VSXB_CONN_CLOSING;
	c->shut_pending = 0;
	c->ctrl = C_RST;
	vsxb__conn_schedule(c);
}

void vsxb__conn_ctrl(struct conn *c, unsigned bits)
{
	if (c->dead || c->draining)
		return;
	c->ctrl |= bits;
	vsxb__conn_schedule(c);
}

void vsxb__conn_shutdown(struct conn *c, unsigned flags)
{
	if (c->dead || c->draining)
		return;
	flags &= ~c->host_shut;
	c->shut_pending |= flags & VSXB_SHUT_BOTH;
	if (c->state == VSXB_CONN_ESTABLISHED)
		c->state = VSXB_CONN_CLOSING;
	if ((c->host_shut | c->shut_pending) == 3 && c->tkind != T_LINGER &&
	    !(c->ctrl & C_RST))
		vsxb__conn_timer(c, T_LINGER, c->vm->r->lim.linger_ms);
	vsxb__conn_schedule(c);
}

void vsxb__conn_gone(struct conn *c)
{
	if (!c->ops->end || !c->ops->end(c, VSXB_END_GONE))
		vsxb__conn_kill(c);
}

void vsxb__conn_answer_rst(struct conn *c)
{
	vsxb__conn_unhash(c);
	vsxb__conn_timer(c, T_NONE, 0);
	c->shut_pending = 0;
	c->ctrl = C_RST;
	vsxb__conn_schedule(c);
}

void vsxb__conn_accept(struct conn *c)
{
	c->state = VSXB_CONN_ESTABLISHED;
	vsxb__conn_timer(c, T_NONE, 0);
	vsxb__conn_ctrl(c, C_RESPONSE);
	vsxb__conn_opened(c);
}

/* The guest may not know our latest fwd_cnt / buf_alloc. */
bool vsxb__conn_credit_news(const struct conn *c)
{
	uint32_t fwd, buf;

	conn_adv(c, &fwd, &buf);
	return fwd != c->cr.last_fwd_sent || buf != c->cr.last_buf_sent;
}

void vsxb__conn_credit_check(struct conn *c)
{
	uint32_t win;
	int64_t seen;

	if (c->dead || c->draining || c->state == VSXB_CONN_CONNECTING ||
	    (c->ctrl & C_RST) ||
	    (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) || !vsxb__conn_credit_news(c))
		return;
	/* Free space as the guest last heard of it. A Linux guest also caps
	 * its credit at its own buf_alloc ("vsock/virtio: cap TX credit to
	 * local buffer size"), so it stalls at the smaller of the two windows:
	 * with ours larger, waiting for ours to run low would deadlock. */
	win = c->cr.last_buf_sent;
	if (c->cr.peer_buf_alloc && c->cr.peer_buf_alloc < win)
		win = c->cr.peer_buf_alloc;
	seen = (int64_t)win - (uint32_t)(c->cr.rx_cnt - c->cr.last_fwd_sent);
	if (seen < VSOCK_MAX_PKT_PAYLOAD)
		vsxb__conn_ctrl(c, C_CREDIT_UPDATE);
}

/* ---- Scheduling (the rounds: round.c) ---- */

/* @c owes the guest something: the round sends it (vsxb__vm_rx_run),
 * never the caller, whichever callback it is in. */
void vsxb__conn_schedule(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;

	VSXB_OWNED(vm, "conn_schedule");
	if (c->dead || c->draining)
		return;
	vsxb__vm_touch(vm);
	if (vsxb_list_empty(&c->pnode))
		vsxb_list_add_tail(&vm->pending, &c->pnode);
}

void vsxb__vm_touch(struct vsxb_vm *vm)
{
	if (vm->dirty)
		return;
	vm->dirty = true;
	vsxb_list_add_tail(&vm->sh->dirty, &vm->dnode);
}

bool vsxb__vm_lent_owed(const struct vsxb_vm *vm)
{
	return vm->break_owed || vm->orphan_n || vm->ndead || !vsxb_list_empty(&vm->pending) ||
	       (vm->live && !vm->broken && vsxu_vu_mem_faulted(vm->vu));
}

void vsxb__round_owe(struct vsxb_shard *sh)
{
	if (!sh->in_round)
		sh->loop->queue(sh->loop->ctx, &sh->round);
}

/* ---- Device-wide ---- */

void vsxb__vm_drop_all(struct vsxb_vm *vm, bool tell_guest)
{
	struct vsxb_list *n;

	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (!c->dead) {
			vsxb__conn_why(c, VSXB_REASON_VM_GONE, 0);
			vsxb__conn_reset(c, !tell_guest);
		}
	}
	if (!tell_guest) {
		vm->orphan_n = 0;
		vm->orphan_head = 0;
	}
	vsxb__batch_drop(vm);
}

/*
 * The VM paused: timers waiting for its guest stop (held, not fired); on
 * resume they get their whole time again, so a pause never ends a
 * connection and the guest has the usual time to answer after it.
 */
void vsxb__vm_timers_hold(struct vsxb_vm *vm)
{
	const struct vsxu_loop *l = vm->sh->loop;
	struct vsxb_list *n;

	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (!c->dead && c->timer && guest_timer(c->tkind)) {
			l->timer_disarm(c->timer);
			c->theld = true;
		}
	}
}

void vsxb__vm_timers_release(struct vsxb_vm *vm)
{
	struct vsxb_list *n;

	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (!c->dead && c->theld)
			vsxb__conn_timer(c, c->tkind, timer_ms(vm->r, c->tkind));
	}
}

void vsxb__vm_broken(struct vsxb_vm *vm, const char *why)
{
	if (vm->broken)
		return;
	/* in a lent room: breaking resets connections and stops their
	 * timers and watches, the VM's own thread's work */
	if (vm->sh->borrowed) {
		if (!vm->break_owed)
			vm->break_owed = why;
		vsxb__vm_touch(vm);
		return;
	}
	/* what broke a ring may be a fault absorbed in its memory: say that */
	if (vm->vu && vsxu_vu_mem_faulted(vm->vu))
		why = VSXB_MEM_FAULT;
	vm->broken = true;
	vsxb__log(vm->r, VSXB_LOG_ERR, "vm %s: %s: device stopped until the guest resets "
		 "it; %u connection(s) reset", vm->name, why, vm->nconns);
	vsxb__vm_drop_all(vm, false);
	vsxb__vm_touch(vm);
}

void vsxb__set_tag(char *dst, const char *tag)
{
	snprintf(dst, VSXB_TAG_MAX, "%s", tag ? tag : "");
}
