/*
 * The virtio-vsock device: one per VM, a vhost-user device with three
 * queues (rx 0, tx 1, event 2) whose config space is le64 guest_cid. This
 * file runs the connection state machine and the credit flow control;
 * host.c connects connections to host programs (hybrid Unix sockets),
 * router.c to other VMs (sibling routing), txbuf.c queues bytes.
 *
 * Connections are keyed by (guest port, peer CID, peer port) in a per-VM
 * hash; ids are unique in the process and never reused. A connection's
 * peer is a host socket (PEER_HOST) or the other half of a sibling pair
 * (PEER_SIBLING: one connection in each VM).
 *
 * Processing rounds. Every entry point (a kick, a host socket event, a
 * timer, a control call) does its work and ends with vsxb__router_round(),
 * which serves the RX schedule of every VM it touched and publishes used
 * entries with one flush per queue per round (push many, flush once).
 * Connections are freed at the end of a round, never under a caller.
 *
 * Guest -> peer (TX). A round pops up to ENG_TX_BATCH chains. Headers are
 * checked before anything is trusted: src_cid must be the guest's (else the
 * packet is dropped), len must fit in 64 KiB and in the chain, type and op
 * must be known, RW must stay within the credit we gave; a bad packet for a
 * connection resets that connection only, one without a connection gets an
 * RST reply (never for an RST). Payload of consecutive RW packets of one
 * connection is gathered as iovecs pointing into guest memory and written
 * to the host socket with one sendmsg (host.c); what the socket does not
 * take is copied into the connection's queue (txbuf.c), which the credit
 * window bounds: the guest may not send beyond it, and is reset if it does.
 * While bytes wait there the socket is full: new payload is only appended
 * (no sendmsg that would say EAGAIN), and the socket's write watch flushes.
 * Sibling payload is copied from the sender's TX buffers straight into the
 * receiver's RX buffers.
 *
 * Peer -> guest (RX). Control packets are a bitmask per connection (at most
 * one of each kind pending: the queue is bounded whatever the guest does).
 * When nothing waits for the guest's RX buffers, a packet goes straight
 * into the RX queue; otherwise the connection joins the VM's pending list,
 * served round-robin whenever RX buffers are there. Emission order per
 * connection: REQUEST/RESPONSE, credit packets, data, SHUTDOWN, RST. Host
 * data is read with readv directly into the payload part of as many RX
 * chains as the guest's credit allows, up to ENG_RX_READ (128 KiB) per read,
 * at most 64 KiB per packet (host.c).
 *
 * Credit. Counters are wrapping u32 byte counts. We may send
 * peer_buf_alloc - (tx_cnt - peer_fwd_cnt); every packet carries our
 * buf_alloc and fwd_cnt (for a sibling pair, the other guest's values, so
 * credit is end to end, capped by our buf_alloc). The window's right edge
 * (fwd_cnt + buf_alloc) we announce never moves back, as TCP never shrinks
 * a window: a smaller buf_alloc (set_buffer) takes effect as bytes are
 * consumed. So the edge announced last is a hard limit: an RW beyond it
 * resets the connection, and what we queue for a connection never exceeds
 * its window. A CREDIT_UPDATE is sent only when the guest could otherwise
 * stall, as Linux's virtio_transport_common does: when the free space the
 * guest last heard of fell below one maximum packet (64 KiB) and we have
 * consumed bytes since (for buf_alloc below 64 KiB that is after every
 * consumption); unlike Linux we count bytes still queued, i.e. we use the
 * guest's view, not only what was consumed since the last update. A
 * CREDIT_REQUEST is always answered; set_buffer always sends an update. We
 * send CREDIT_REQUEST ourselves only when a whole SEQPACKET message from a
 * host socket waits for more credit than the guest gave.
 *
 * Close. A guest SHUTDOWN is applied to the host socket per direction
 * (SEND: shutdown(SHUT_WR) once the queue drained; RCV: SHUT_RD, we stop
 * reading). When the guest has shut down both ways we answer RST, as Linux
 * does, and the host side keeps draining the queue for up to VSXB_DEFAULT_LINGER_MS.
 * A host EOF sends SHUTDOWN(SEND); a host that is fully gone (POLLHUP)
 * SHUTDOWN(RCV|SEND), and if the guest does not RST within VSXB_DEFAULT_LINGER_MS we
 * do. Nothing answers an RST with an RST.
 *
 * Broken guests. A chain vq.c rejects marks the device broken: logged
 * once, every connection reset, host peers closed, siblings told; the
 * device stays silent until the front-end restarts it. The next start
 * after any stop sends VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the event
 * queue so the guest drops sockets it still believes in, when the
 * front-end gave us that queue (QEMU 7.2 keeps it and sends the event
 * itself, on migration); a stale guest socket then meets an RST on its
 * first packet instead.
 */
#include <endian.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#define HDR_LEN ((uint32_t)sizeof(struct virtio_vsock_hdr))

static void vm_tx_run(struct vsxb_vm *vm);
static int conn_emit(struct conn *c);

/* ---- Headers ---- */

/* Wire (little-endian) <-> CPU order, in place; the same operation. */
static void hdr_swap(struct virtio_vsock_hdr *h)
{
	h->src_cid = le64toh(h->src_cid);
	h->dst_cid = le64toh(h->dst_cid);
	h->src_port = le32toh(h->src_port);
	h->dst_port = le32toh(h->dst_port);
	h->len = le32toh(h->len);
	h->type = le16toh(h->type);
	h->op = le16toh(h->op);
	h->flags = le32toh(h->flags);
	h->buf_alloc = le32toh(h->buf_alloc);
	h->fwd_cnt = le32toh(h->fwd_cnt);
}

static uint32_t u32min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

void vsxb__conn_window(const struct conn *c, uint32_t *fwd, uint32_t *buf)
{
	if (c->ops->window) {
		c->ops->window(c, fwd, buf);
		return;
	}
	*fwd = c->fwd_cnt;
	*buf = c->buf_alloc;
}

/* What we may still send to the guest. */
uint32_t vsxb__conn_peer_free(const struct conn *c)
{
	uint32_t inflight = c->tx_cnt - c->peer_fwd_cnt;

	return inflight >= c->peer_buf_alloc ? 0 : c->peer_buf_alloc - inflight;
}

/* What the guest may still send us, by the furthest limit we announced. */
static uint32_t conn_rx_room(const struct conn *c)
{
	int32_t room = (int32_t)(c->rx_limit - c->rx_cnt);

	return c->advertised && room > 0 ? (uint32_t)room : 0;
}

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
	if (c->advertised && (int32_t)(*fwd + *buf - c->rx_limit) < 0 &&
	    (int32_t)(c->rx_limit - *fwd) > 0)
		*buf = c->rx_limit - *fwd;
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
	c->last_fwd_sent = fwd;
	c->last_buf_sent = buf;
	c->rx_limit = fwd + buf;
	c->advertised = true;
}

/* ---- RX queue ---- */

int vsxb__rx_pop(struct vsxb_vm *vm, struct vsx_vq_elem *e)
{
	int rc;

	if (!vm->live || vm->broken)
		return -EIO;
	rc = vsx_vq_pop(vm->rxq, e);
	if (rc < 0) {
		vsxb__vm_broken(vm, "RX queue: invalid descriptor chain");
		return rc;
	}
	if (rc == 0)
		return 0;
	if (e->in_len <= HDR_LEN) {
		vsx_vq_push(vm->rxq, e, 0);
		vsxb__vm_broken(vm, "RX queue: buffer without room for a payload");
		return -EINVAL;
	}
	return 1;
}

static void rx_push(struct vsxb_vm *vm, struct vsx_vq_elem *e,
		    struct virtio_vsock_hdr *h)
{
	uint32_t len = h->len;

	hdr_swap(h);
	vsx_iov_from_buf(e->iov + e->out_num, e->in_num, 0, h, HDR_LEN);
	vsx_vq_push(vm->rxq, e, HDR_LEN + len);
	vm->st.rx_pkts++;
	vsxb__vm_touch(vm);
	vm->rx_pushed = true;
}

/* A data packet of @len payload bytes already in @e. */
void vsxb__rx_put(struct vsxb_vm *vm, struct conn *c, struct vsx_vq_elem *e,
		 uint32_t len, unsigned flags)
{
	struct virtio_vsock_hdr h;

	conn_hdr(c, &h, VIRTIO_VSOCK_OP_RW, flags, len);
	rx_push(vm, e, &h);
	c->tx_cnt += len;
	c->to_guest += len;
}

/* One header-only packet into the RX queue; false without a buffer. */
static bool rx_send_hdr(struct vsxb_vm *vm, struct virtio_vsock_hdr *h)
{
	struct vsx_vq_elem *e = &vm->rxe[0];

	if (vsxb__rx_pop(vm, e) <= 0)
		return false;
	if (vm->direct)
		vm->st.ctrl_direct++;
	else
		vm->st.ctrl_queued++;
	if (h->op == VIRTIO_VSOCK_OP_RST)
		vm->st.resets++;
	else if (h->op == VIRTIO_VSOCK_OP_CREDIT_UPDATE)
		vm->st.credit_updates++;
	else if (h->op == VIRTIO_VSOCK_OP_CREDIT_REQUEST)
		vm->st.credit_requests++;
	rx_push(vm, e, h);
	return true;
}

static bool rx_ctrl(struct conn *c, uint16_t op, uint32_t flags)
{
	struct virtio_vsock_hdr h;
	uint32_t fwd = c->last_fwd_sent, buf = c->last_buf_sent, lim = c->rx_limit;
	bool adv = c->advertised;

	conn_hdr(c, &h, op, flags, 0);
	if (rx_send_hdr(c->vm, &h))
		return true;
	/* Not sent: the guest learnt nothing. */
	c->last_fwd_sent = fwd;
	c->last_buf_sent = buf;
	c->rx_limit = lim;
	c->advertised = adv;
	return false;
}

/* An RST for a packet that has no connection (CPU-order @h from the guest). */
static void orphan_rst(struct vsxb_vm *vm, const struct virtio_vsock_hdr *in)
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
	if (!vm->orphan_n && eng_list_empty(&vm->pending) && !vm->emitting) {
		vm->direct = true;
		if (rx_send_hdr(vm, &h)) {
			vm->direct = false;
			return;
		}
		vm->direct = false;
	}
	if (vm->orphan_n == ENG_ORPHAN_MAX) {
		vm->st.orphans_dropped++;
		return;
	}
	vm->orphan[(vm->orphan_head + vm->orphan_n) % ENG_ORPHAN_MAX] = h;
	vm->orphan_n++;
}

void vsxb__orphan_rst(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h)
{
	orphan_rst(vm, h);
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

/* ---- Connection events and limits ---- */

static const char *const reason_names[] = {
	[VSXB_REASON_NONE] = "none",
	[VSXB_REASON_GUEST_SHUTDOWN] = "guest-shutdown",
	[VSXB_REASON_HOST_EOF] = "host-eof",
	[VSXB_REASON_HOST_CLOSED] = "host-closed",
	[VSXB_REASON_PEER_SHUTDOWN] = "peer-shutdown",
	[VSXB_REASON_GUEST_RST] = "guest-rst",
	[VSXB_REASON_PEER_RST] = "peer-rst",
	[VSXB_REASON_REFUSED] = "refused",
	[VSXB_REASON_CONNECT_TIMEOUT] = "connect-timeout",
	[VSXB_REASON_HANDSHAKE_TIMEOUT] = "handshake-timeout",
	[VSXB_REASON_LINGER_TIMEOUT] = "linger-timeout",
	[VSXB_REASON_CONTROL_CLOSE] = "control-close",
	[VSXB_REASON_CONTROL_RESET] = "control-reset",
	[VSXB_REASON_VM_GONE] = "vm-gone",
	[VSXB_REASON_LIMIT] = "limit",
	[VSXB_REASON_PROTOCOL] = "protocol",
	[VSXB_REASON_ERROR] = "error",
};

const char *vsxb_conn_reason_name(int reason)
{
	if (reason < 0 || (size_t)reason >= sizeof(reason_names) / sizeof(reason_names[0]))
		return "?";
	return reason_names[reason];
}

const char *vsxb_conn_event_name(int type)
{
	switch (type) {
	case VSXB_CONN_EV_OPEN:
		return "open";
	case VSXB_CONN_EV_CLOSE:
		return "close";
	case VSXB_CONN_EV_RESET:
		return "reset";
	case VSXB_CONN_EV_REFUSE:
		return "refuse";
	}
	return "?";
}

const char *vsxb_limit_name(int kind)
{
	switch (kind) {
	case VSXB_LIMIT_VM_CONNS:
		return "conns-per-vm";
	case VSXB_LIMIT_CONNS:
		return "conns";
	case VSXB_LIMIT_MEMORY:
		return "conn-memory";
	}
	return "none";
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool reason_graceful(int why)
{
	return why == VSXB_REASON_GUEST_SHUTDOWN || why == VSXB_REASON_HOST_EOF ||
	       why == VSXB_REASON_HOST_CLOSED || why == VSXB_REASON_PEER_SHUTDOWN ||
	       why == VSXB_REASON_CONTROL_CLOSE;
}

void vsxb__conn_why(struct conn *c, int reason, int err)
{
	if (c->dead)
		return;
	if (c->why && (!reason_graceful(c->why) || reason_graceful(reason) ||
		       reason == VSXB_REASON_GUEST_RST || reason == VSXB_REASON_PEER_RST))
		return;
	c->why = reason;
	c->why_err = err;
}

static const char *conn_origin(const struct conn *c)
{
	if (c->guest_initiated)
		return "guest";
	return c->ops->name;
}

/* The rate limit for logging refusals: a burst, then one per ENG_REFUSE_MS. */
static void refuse_rate(struct vsxb_vm *vm, struct vsxb_conn_event *ev)
{
	uint64_t now = mono_ms();

	if (!vm->refuse_ms || now - vm->refuse_ms >= (uint64_t)ENG_REFUSE_MS *
						      ENG_REFUSE_BURST) {
		vm->refuse_tokens = ENG_REFUSE_BURST;
		vm->refuse_ms = now;
	} else {
		uint64_t add = (now - vm->refuse_ms) / ENG_REFUSE_MS;

		if (add) {
			vm->refuse_tokens += (unsigned)add;
			if (vm->refuse_tokens > ENG_REFUSE_BURST)
				vm->refuse_tokens = ENG_REFUSE_BURST;
			vm->refuse_ms += add * ENG_REFUSE_MS;
		}
	}
	if (!vm->refuse_tokens) {
		ev->log_suppressed = true;
		vm->refuse_suppressed++;
		return;
	}
	vm->refuse_tokens--;
	ev->suppressed = vm->refuse_suppressed;
	vm->refuse_suppressed = 0;
}

static void conn_event(struct conn *c, int type)
{
	struct vsxb_router *r = c->vm->r;
	struct vsxb_conn_event ev = { .type = type };

	if (type == VSXB_CONN_EV_OPEN)
		r->st.opened++;
	else if (type == VSXB_CONN_EV_REFUSE)
		r->st.refused++;
	if (!r->ev_fn)
		return;
	vsxb__conn_info(c, &ev.ci);
	ev.origin = conn_origin(c);
	if (type != VSXB_CONN_EV_OPEN) {
		ev.reason = c->why;
		ev.err = c->why_err;
		ev.limit = c->why_limit;
	}
	if (c->opened && type != VSXB_CONN_EV_OPEN)
		ev.duration_ms = mono_ms() - c->opened_ms;
	if (type == VSXB_CONN_EV_REFUSE)
		refuse_rate(c->vm, &ev);
	r->ev_fn(r->ev_arg, &ev);
}

void vsxb__conn_opened(struct conn *c)
{
	if (c->opened || c->dead)
		return;
	c->opened = true;
	c->opened_ms = mono_ms();
	conn_event(c, VSXB_CONN_EV_OPEN);
}

void vsxb__refuse(struct vsxb_vm *vm, uint16_t type, uint32_t guest_port,
		 uint64_t peer_cid, uint32_t peer_port, bool guest_initiated,
		 int reason, int err, int limit)
{
	struct vsxb_router *r = vm->r;
	struct vsxb_conn_event ev = {
		.type = VSXB_CONN_EV_REFUSE,
		.reason = reason,
		.err = err,
		.limit = limit,
	};

	r->st.refused++;
	if (!r->ev_fn)
		return;
	ev.ci.vm = vm->name;
	ev.ci.type = type;
	ev.ci.state = VSXB_CONN_CONNECTING;
	ev.ci.guest_cid = vm->cid;
	ev.ci.guest_port = guest_port;
	ev.ci.peer_cid = peer_cid;
	ev.ci.peer_port = peer_port;
	ev.ci.guest_initiated = guest_initiated;
	ev.origin = guest_initiated ? "guest" : peer_cid == VSOCK_CID_HOST ? "host"
									  : "sibling";
	refuse_rate(vm, &ev);
	r->ev_fn(r->ev_arg, &ev);
}

int vsxb__conn_limit(struct vsxb_vm *vm, unsigned n)
{
	struct vsxb_router *r = vm->r;

	if (vm->nconns + n > r->max_conns_vm) {
		r->st.refused_limit_vm++;
		vsxb__log(r, VSXB_LOG_DEBUG, "vm %s: connection refused: max-conns-per-vm "
			 "(%u) reached", vm->name, r->max_conns_vm);
		return VSXB_LIMIT_VM_CONNS;
	}
	if (r->max_conns && r->nconns + n > r->max_conns) {
		r->st.refused_limit_conns++;
		vsxb__log(r, VSXB_LOG_DEBUG, "vm %s: connection refused: max-conns (%u) "
			 "reached", vm->name, r->max_conns);
		return VSXB_LIMIT_CONNS;
	}
	return VSXB_LIMIT_NONE;
}

uint32_t vsxb__buf_cap(const struct vsxb_router *r, uint32_t bytes)
{
	if (r->max_conn_mem && bytes > r->max_conn_mem / 2)
		return (uint32_t)(r->max_conn_mem / 2);
	return bytes;
}

bool vsxb__conn_mem_ok(struct conn *c)
{
	struct vsxb_router *r = c->vm->r;

	if (!r->max_conn_mem || c->dead || c->q.mem <= r->max_conn_mem)
		return true;
	r->st.reset_limit_memory++;
	vsxb__log(r, VSXB_LOG_WARNING, "vm %s: connection %llu: queue memory %zu above "
		 "max-conn-memory (%llu): reset", c->vm->name, (unsigned long long)c->id,
		 c->q.mem, (unsigned long long)r->max_conn_mem);
	vsxb__conn_why(c, VSXB_REASON_LIMIT, 0);
	c->why_limit = VSXB_LIMIT_MEMORY;
	vsxb__conn_reset(c, false);
	return false;
}

bool vsxb__conn_rx_direct_ok(const struct conn *c)
{
	const struct vsxb_vm *vm = c->vm;

	return vm->live && !vm->broken && !vm->emitting && !vm->orphan_n &&
	       eng_list_empty(&vm->pending);
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

	if (vm->nconns >= vm->r->max_conns_vm ||
	    (vm->r->max_conns && vm->r->nconns >= vm->r->max_conns)) {
		vsxb__vm_warn(vm, "connection limit reached");
		return NULL;
	}
	c = calloc(1, off + ops->priv_size);
	if (!c)
		return NULL;
	c->id = vm->r->next_id++;
	c->ops = ops;
	c->priv = ops->priv_size ? (char *)c + off : NULL;
	c->vm = vm;
	eng_list_init(&c->pnode);
	c->type = type;
	c->state = VSXB_CONN_CONNECTING;
	c->guest_port = guest_port;
	c->peer_cid = peer_cid;
	c->peer_port = peer_port;
	c->buf_alloc = vsxb__buf_cap(vm->r, vm->buf_default);
	c->rx_cnt = c->fwd_cnt = c->tx_cnt = vm->r->counter_base;
	c->last_fwd_sent = c->peer_fwd_cnt = vm->r->counter_base;
	vsxb__txq_init(&c->q, type == VIRTIO_VSOCK_TYPE_SEQPACKET);
	c->q.pool = &vm->pool;
	eng_list_add_tail(&vm->conns, &c->node);
	vm->nconns++;
	vm->r->nconns++;
	conn_hash_add(c);
	return c;
}

static void conn_timer_cb(void *arg)
{
	struct conn *c = arg;
	struct vsxb_router *r = c->vm->r;
	enum conn_timer_kind k = c->tkind;

	c->tkind = T_NONE;
	switch (k) {
	case T_CONNECT:
		/* debug only: the refuse event (reason connect-timeout) is the
		 * rate-limited line operators see */
		vsxb__log(r, VSXB_LOG_DEBUG, "vm %s: connection %llu: no answer to REQUEST "
			 "in %u ms", c->vm->name, (unsigned long long)c->id,
			 r->connect_ms);
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
	vsxb__router_round(r);
}

void vsxb__conn_timer(struct conn *c, enum conn_timer_kind kind, unsigned ms)
{
	const struct vsx_loop *l = c->vm->r->loop;

	if (c->dead)
		return;
	if (kind == T_NONE) {
		if (c->timer)
			l->timer_disarm(c->timer);
		c->tkind = T_NONE;
		return;
	}
	if (!c->timer) {
		c->timer = l->timer(l->ctx, conn_timer_cb, c);
		if (!c->timer)
			return; /* unbounded wait rather than a failure: logged */
	}
	c->tkind = kind;
	l->timer_arm(c->timer, ms);
}

void vsxb__conn_kill(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;

	if (c->dead)
		return;
	/* The one place every connection ends: report it. */
	if (c->opened)
		conn_event(c, reason_graceful(c->why) ? VSXB_CONN_EV_CLOSE
						      : VSXB_CONN_EV_RESET);
	else
		conn_event(c, VSXB_CONN_EV_REFUSE);
	c->dead = true;
	vsxb__conn_unhash(c);
	eng_list_del(&c->pnode);
	if (c->ops->release)
		c->ops->release(c);
	if (c->timer) {
		vm->r->loop->timer_free(c->timer);
		c->timer = NULL;
	}
	vsxb__txq_clear(&c->q);
	if (vm->batch == c) {
		vm->batch = NULL;
		vm->batch_niov = 0;
		vm->batch_len = 0;
		vm->batch_flags = 0;
	}
	c->ctrl = 0;
	c->shut_pending = 0;
	vm->nconns--;
	vm->r->nconns--;
	vm->ndead++;
	vsxb__vm_touch(vm);
}

void vsxb__conn_peer_reset(struct conn *c)
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
	if (c->ops->pending && c->ops->pending(c))
		vsxb__conn_timer(c, T_LINGER, c->vm->r->linger_ms);
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
	if (c->ops->reset)
		c->ops->reset(c);
	vsxb__txq_clear(&c->q);
	if (vm->batch == c) {
		vm->batch = NULL;
		vm->batch_niov = 0;
		vm->batch_len = 0;
		vm->batch_flags = 0;
	}
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
	c->shut_pending |= flags & ENG_SHUT_BOTH;
	if (c->state == VSXB_CONN_ESTABLISHED)
		c->state = VSXB_CONN_CLOSING;
	if ((c->host_shut | c->shut_pending) == 3 && c->tkind != T_LINGER &&
	    !(c->ctrl & C_RST))
		vsxb__conn_timer(c, T_LINGER, c->vm->r->linger_ms);
	if (c->ops->sync)
		c->ops->sync(c);
	vsxb__conn_schedule(c);
}

void vsxb__conn_close(struct conn *c)
{
	if (c->dead)
		return;
	if (c->state == VSXB_CONN_CONNECTING) {
		vsxb__conn_reset(c, false);
		return;
	}
	if (c->ops->close)
		c->ops->close(c);
	else
		vsxb__conn_shutdown(c, ENG_SHUT_BOTH);
}

void vsxb__conn_gone(struct conn *c)
{
	if (c->ops->gone)
		c->ops->gone(c);
	else
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

void vsxb__batch_flush(struct vsxb_vm *vm)
{
	struct conn *c = vm->batch;

	if (c && c->ops->flush)
		c->ops->flush(c);
}

void vsxb__conn_set_buffer(struct conn *c, uint32_t bytes)
{
	c->buf_alloc = bytes;
	if (c->ops->set_buffer)
		c->ops->set_buffer(c);
	if (c->state != VSXB_CONN_CONNECTING)
		vsxb__conn_ctrl(c, C_CREDIT_REPLY);
}

/* The guest may not know our latest fwd_cnt / buf_alloc. */
static bool credit_news(const struct conn *c)
{
	uint32_t fwd, buf;

	conn_adv(c, &fwd, &buf);
	return fwd != c->last_fwd_sent || buf != c->last_buf_sent;
}

void vsxb__conn_credit_check(struct conn *c)
{
	uint32_t win;
	int64_t seen;

	if (c->dead || c->draining || c->state == VSXB_CONN_CONNECTING ||
	    (c->ctrl & C_RST) ||
	    (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) || !credit_news(c))
		return;
	/* Free space as the guest last heard of it. A Linux guest also caps
	 * its credit at its own buf_alloc ("vsock/virtio: cap TX credit to
	 * local buffer size"), so it stalls at the smaller of the two windows:
	 * with ours larger, waiting for ours to run low would deadlock. */
	win = c->last_buf_sent;
	if (c->peer_buf_alloc && c->peer_buf_alloc < win)
		win = c->peer_buf_alloc;
	seen = (int64_t)win - (uint32_t)(c->rx_cnt - c->last_fwd_sent);
	if (seen < VSOCK_MAX_PKT_PAYLOAD)
		vsxb__conn_ctrl(c, C_CREDIT_UPDATE);
}

/* ---- Emission to the guest ---- */

static int conn_emit_locked(struct conn *c)
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

	for (i = 0; i < sizeof(order) / sizeof(order[0]) && !(c->ctrl & C_RST); i++) {
		if (!(c->ctrl & order[i].bit))
			continue;
		if (order[i].bit == C_CREDIT_UPDATE && !credit_news(c)) {
			c->ctrl &= ~C_CREDIT_UPDATE;
			continue;
		}
		if (!rx_ctrl(c, order[i].op, 0))
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
		if (!rx_ctrl(c, VIRTIO_VSOCK_OP_SHUTDOWN, c->host_shut | ready))
			return EMIT_NOBUF;
		c->host_shut |= ready;
		c->shut_pending &= ~ready;
	}

	if ((c->ctrl & C_RST) && !data_left) {
		if (!rx_ctrl(c, VIRTIO_VSOCK_OP_RST, 0))
			return EMIT_NOBUF;
		c->ctrl = 0;
		vsxb__conn_gone(c);
	}
	return EMIT_DONE;
}

static int conn_emit(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;
	bool was = vm->emitting;
	int r;

	if (c->dead || !vm->live || vm->broken)
		return EMIT_DONE;
	vm->emitting = true;
	r = conn_emit_locked(c);
	vm->emitting = was;
	return r;
}

void vsxb__conn_schedule(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;
	int r;

	if (c->dead || c->draining)
		return;
	vsxb__vm_touch(vm);
	if (!eng_list_empty(&c->pnode))
		return;
	if (eng_list_empty(&vm->pending) && !vm->orphan_n && !vm->emitting &&
	    vm->live && !vm->broken) {
		/* Nothing waits for the guest: straight into the RX queue. */
		vm->direct = true;
		r = conn_emit(c);
		vm->direct = false;
		if (r == EMIT_DONE || c->dead)
			return;
	}
	if (!c->dead && eng_list_empty(&c->pnode))
		eng_list_add_tail(&vm->pending, &c->pnode);
}

/* Serve the pending list while RX buffers last. */
static void vm_rx_run(struct vsxb_vm *vm)
{
	unsigned budget = 4 * ENG_TX_BATCH;
	struct conn *c;
	int r;

	while (vm->orphan_n && vm->live && !vm->broken) {
		if (!rx_send_hdr(vm, &vm->orphan[vm->orphan_head]))
			return;
		vm->orphan_head = (vm->orphan_head + 1) % ENG_ORPHAN_MAX;
		vm->orphan_n--;
	}
	while (!eng_list_empty(&vm->pending) && vm->live && !vm->broken) {
		if (!budget--) {
			/* Let other VMs and the TX side run; come back soon. */
			vm->rx_more = true;
			if (vm->resume)
				vm->r->loop->timer_arm(vm->resume, 0);
			return;
		}
		c = eng_container_of(vm->pending.next, struct conn, pnode);
		/* Unlinked while it emits: whatever it schedules for itself
		 * meanwhile (a CREDIT_REQUEST, an RST) links it again. */
		eng_list_del(&c->pnode);
		r = conn_emit(c);
		if (c->dead)
			continue;
		if (r == EMIT_NOBUF) {
			if (eng_list_empty(&c->pnode))
				eng_list_add_head(&vm->pending, &c->pnode);
			return;
		}
		if (r == EMIT_MORE && eng_list_empty(&c->pnode))
			eng_list_add_tail(&vm->pending, &c->pnode);
	}
}

static void vm_send_event(struct vsxb_vm *vm)
{
	struct vsx_vq_elem *e = &vm->rxe[0];
	uint32_t id = htole32(VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	int rc;

	/* Only when the front-end gave us the event queue (QEMU keeps it). */
	if (!vm->event_pending || !vm->live || vm->broken || !vsx_vq_ready(vm->evq))
		return;
	rc = vsx_vq_pop(vm->evq, e);
	if (rc < 0) {
		vsxb__vm_broken(vm, "event queue: invalid descriptor chain");
		return;
	}
	if (rc == 0)
		return; /* no buffer yet: the next event-queue kick */
	if (e->in_len < sizeof(id)) {
		vsx_vq_push(vm->evq, e, 0);
		vsx_vq_flush(vm->evq);
		vsxb__vm_broken(vm, "event queue: buffer too small");
		return;
	}
	vsx_iov_from_buf(e->iov + e->out_num, e->in_num, 0, &id, sizeof(id));
	vsx_vq_push(vm->evq, e, sizeof(id));
	vsx_vq_flush(vm->evq);
	vm->event_pending = false;
}

/*
 * Spare queue chunks (txbuf.c): while the VM runs, a timer sweeps the pool
 * every ENG_POOL_SWEEP_MS and frees it once it went unused for a whole
 * period, then gives memory back to the system (malloc_trim) when queues
 * freed enough since the last time: bounded, and only after a quiet
 * period, never per packet. A stopped VM's pool is freed at once.
 */
/*
 * Once per process, when a device first starts: malloc keeps freed memory
 * at the top of its heap (up to ENG_TRIM_THRESHOLD) instead of handing it
 * back at every free, which cost a brk and fresh page faults per queue
 * fill-and-drain cycle; the sweep gives it back (malloc_trim) after a quiet
 * period. This also fixes the mmap threshold, so malloc's dynamic
 * threshold no longer moves: queue chunks (at most ENG_CHUNK_MAX) stay
 * below it whatever was freed before.
 */
static void malloc_tune(void)
{
	static int done;

	if (__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
		return;
	mallopt(M_MMAP_THRESHOLD, ENG_MMAP_THRESHOLD);
	mallopt(M_TRIM_THRESHOLD, ENG_TRIM_THRESHOLD);
}

static void pool_timer_cb(void *arg)
{
	struct vsxb_vm *vm = arg;

	vm->ptimer_armed = false;
	if (vsxb__txq_pool_sweep(&vm->pool))
		malloc_trim(0);
	if (vm->pool.n || vm->pool.freed) {
		vm->r->loop->timer_arm(vm->ptimer, ENG_POOL_SWEEP_MS);
		vm->ptimer_armed = true;
	}
}

static void pool_tend(struct vsxb_vm *vm)
{
	const struct vsx_loop *l = vm->r->loop;

	if (!vm->live) {
		if (vm->pool.n || vm->pool.freed >= ENG_TRIM_MIN) {
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
		l->timer_arm(vm->ptimer, ENG_POOL_SWEEP_MS);
		vm->ptimer_armed = true;
	}
}

/* End of a round for @vm (router.c calls it for every touched VM). */
void vsxb__vm_round(struct vsxb_vm *vm)
{
	struct eng_list *n, *next;

	if (vm->live && !vm->broken)
		vm_rx_run(vm);
	if (vm->rx_pushed && vm->live && vm->rxq) {
		vsx_vq_flush(vm->rxq);
		vm->st.rx_flushes++;
	}
	vm->rx_pushed = false;
	pool_tend(vm);
	if (!vm->ndead)
		return;
	for (n = vm->conns.next; n != &vm->conns; n = next) {
		struct conn *c = eng_container_of(n, struct conn, node);

		next = n->next;
		if (!c->dead)
			continue;
		eng_list_del(&c->node);
		free(c);
	}
	vm->ndead = 0;
}

/* ---- Guest -> us (TX) ---- */

/* The guest changed its credit values on @c. */
static void credit_moved(struct conn *c)
{
	c->credit_req_sent = false;
	if (c->ops->credit_changed)
		c->ops->credit_changed(c);
}

static void tx_rw(struct vsxb_vm *vm, struct conn *c, const struct vsx_vq_elem *e,
		  const struct virtio_vsock_hdr *h)
{
	struct iovec iov[VSX_VQ_MAX_IOV];
	unsigned n, flags = 0;

	if (c->state == VSXB_CONN_CONNECTING) {
		vsxb__vm_warn(vm, "RW before the connection was established (port %u)",
			     h->src_port);
		vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
		vsxb__conn_reset(c, false);
		return;
	}
	if (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) {
		vsxb__vm_warn(vm, "RW after SHUTDOWN(SEND) (port %u)", h->src_port);
		vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
		vsxb__conn_reset(c, false);
		return;
	}
	/* The edge we announced last is the limit (it never moved back). */
	if (!c->advertised || (int32_t)(c->rx_cnt + h->len - c->rx_limit) > 0) {
		vsxb__vm_warn(vm, "RW beyond the credit given (port %u: %u bytes, "
			     "room %u)", h->src_port, h->len, conn_rx_room(c));
		vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
		vsxb__conn_reset(c, false);
		return;
	}
	c->rx_cnt += h->len;
	c->from_guest += h->len;
	if (c->type == VIRTIO_VSOCK_TYPE_SEQPACKET) {
		flags = h->flags & (VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR);
		if (!(flags & VIRTIO_VSOCK_SEQ_EOM))
			flags = 0;
	}
	n = vsx_iov_slice(iov, VSX_VQ_MAX_IOV, e->iov, e->out_num, HDR_LEN, h->len);
	c->ops->rw(c, iov, n, h->len, flags);
	if (!c->dead && c->type == VIRTIO_VSOCK_TYPE_SEQPACKET) {
		if (flags & VIRTIO_VSOCK_SEQ_EOM)
			c->msg_open = false;
		else if (h->len)
			c->msg_open = true;
	}
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
	flags &= ENG_SHUT_BOTH;
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

static void tx_no_conn(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h)
{
	struct vsxb_vm *to;

	int lim;

	if (h->op != VIRTIO_VSOCK_OP_REQUEST) {
		orphan_rst(vm, h);
		return;
	}
	lim = vsxb__conn_limit(vm, 1);
	if (lim) {
		vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
			    VSXB_REASON_LIMIT, 0, lim);
		orphan_rst(vm, h);
		return;
	}
	if (h->dst_cid == VSOCK_CID_HOST) {
		vsxb__host_connect(vm, h);
		return;
	}
	to = vsxb__sibling(vm, h->dst_cid);
	if (to) {
		vsxb__sib_request(vm, to, h);
		return;
	}
	vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
		    VSXB_REASON_REFUSED, EHOSTUNREACH, 0);
	orphan_rst(vm, h);
}

static void tx_packet(struct vsxb_vm *vm, const struct vsx_vq_elem *e)
{
	struct virtio_vsock_hdr h;
	const char *bad = NULL;
	struct conn *c;
	bool moved;

	vm->st.tx_pkts++;
	if (e->out_len < HDR_LEN) {
		vm->st.dropped++;
		vsxb__vm_warn(vm, "TX packet shorter than a header (%u bytes): dropped",
			     e->out_len);
		return;
	}
	vsx_iov_to_buf(e->iov, e->out_num, 0, &h, HDR_LEN);
	hdr_swap(&h);
	if (h.src_cid != vm->cid) {
		vm->st.dropped++;
		vsxb__vm_warn(vm, "packet from CID %llu, not the guest's: dropped",
			     (unsigned long long)h.src_cid);
		return;
	}
	c = vsxb__conn_find(vm, h.src_port, h.dst_cid, h.dst_port);
	if (h.len > VSOCK_MAX_PKT_PAYLOAD)
		bad = "payload above 64 KiB";
	else if (h.len > e->out_len - HDR_LEN)
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
				vsxb__batch_flush(vm);
			vsxb__conn_why(c, VSXB_REASON_PROTOCOL, 0);
			vsxb__conn_reset(c, false);
		} else {
			orphan_rst(vm, &h);
		}
		return;
	}
	if (!c) {
		tx_no_conn(vm, &h);
		return;
	}
	if (h.op != VIRTIO_VSOCK_OP_RW && vm->batch == c)
		vsxb__batch_flush(vm);
	if (c->dead)
		return;

	moved = false;
	if (h.op != VIRTIO_VSOCK_OP_REQUEST && h.op != VIRTIO_VSOCK_OP_RST) {
		moved = c->peer_buf_alloc != h.buf_alloc || c->peer_fwd_cnt != h.fwd_cnt;
		c->peer_buf_alloc = h.buf_alloc;
		c->peer_fwd_cnt = h.fwd_cnt;
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
	unsigned budget = ENG_TX_BUDGET, n, i;
	int rc;

	vm->tx_more = false;
	while (vm->live && !vm->broken) {
		vsx_vq_set_notify(vm->txq, false);
		for (n = 0; n < ENG_TX_BATCH; n++) {
			rc = vsx_vq_pop(vm->txq, &vm->txe[n]);
			if (rc < 0) {
				vsxb__vm_broken(vm, "TX queue: invalid descriptor chain");
				return;
			}
			if (rc == 0)
				break;
		}
		for (i = 0; i < n && !vm->broken; i++)
			tx_packet(vm, &vm->txe[i]);
		vsxb__batch_flush(vm);
		if (vm->broken || !vm->live)
			return;
		for (i = 0; i < n; i++)
			vsx_vq_push(vm->txq, &vm->txe[i], 0);
		if (n) {
			vsx_vq_flush(vm->txq);
			vm->st.tx_rounds++;
		}
		budget -= n < budget ? n : budget;
		if (n < ENG_TX_BATCH) {
			/* the loop polls the ring (vsxb_router_poll): no kick */
			if (vm->r->polling)
				return;
			vsx_vq_set_notify(vm->txq, true);
			if (!vsx_vq_avail(vm->txq))
				return;
		}
		if (!budget) {
			/* Yield to other VMs and sockets; resume right after. */
			vm->tx_more = true;
			if (vm->resume)
				vm->r->loop->timer_arm(vm->resume, 0);
			return;
		}
	}
}

bool vsxb__vm_poll(struct vsxb_vm *vm, bool sleeping)
{
	if (!vm->live || vm->broken || !vm->txq || !vsx_vq_ready(vm->txq))
		return false;
	if (sleeping)
		vsx_vq_set_notify(vm->txq, true);   /* fences, then look */
	if (!vsx_vq_avail(vm->txq))
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

/* ---- Device-wide ---- */

void vsxb__vm_drop_all(struct vsxb_vm *vm, bool tell_guest)
{
	struct eng_list *n;

	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = eng_container_of(n, struct conn, node);

		if (!c->dead) {
			vsxb__conn_why(c, VSXB_REASON_VM_GONE, 0);
			vsxb__conn_reset(c, !tell_guest);
		}
	}
	if (!tell_guest) {
		vm->orphan_n = 0;
		vm->orphan_head = 0;
	}
	vm->batch = NULL;
	vm->batch_niov = 0;
	vm->batch_len = 0;
	vm->batch_flags = 0;
}

void vsxb__vm_broken(struct vsxb_vm *vm, const char *why)
{
	if (vm->broken)
		return;
	vm->broken = true;
	vsxb__log(vm->r, VSXB_LOG_ERR, "vm %s: %s: device stopped until the guest resets "
		 "it; %u connection(s) reset", vm->name, why, vm->nconns);
	vsxb__vm_drop_all(vm, false);
	vsxb__vm_touch(vm);
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
		memcpy(buf, cfg + off, u32min(len, (uint32_t)sizeof(cfg) - off));
	return 0;
}

static void op_kick(void *dev, unsigned q)
{
	struct vsxb_vm *vm = dev;

	if (!vm->live || vm->broken)
		return;
	if (q == VSOCK_VQ_TX)
		vm_tx_run(vm);
	else if (q == VSOCK_VQ_EVENT)
		vm_send_event(vm);
	vsxb__vm_touch(vm); /* RX: buffers came; the round serves them */
	vsxb__router_round(vm->r);
}

static void op_start(void *dev)
{
	struct vsxb_vm *vm = dev;
	struct vsx_vq *q[VSOCK_NUM_QUEUES];
	unsigned i;

	if (vm->freeing)
		return;
	malloc_tune();
	for (i = 0; i < VSOCK_NUM_QUEUES; i++)
		q[i] = vsx_vu_queue(vm->vu, i);
	vm->rxq = q[VSOCK_VQ_RX];
	vm->txq = q[VSOCK_VQ_TX];
	vm->evq = q[VSOCK_VQ_EVENT];
	vm->seqpacket = vsx_vu_features(vm->vu) & (1ull << VIRTIO_VSOCK_F_SEQPACKET);
	vm->live = true;
	vm->broken = false;
	vm->log_budget = ENG_LOG_BUDGET;
	vm->orphan_n = 0;
	vm->orphan_head = 0;
	vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device started (cid %llu%s)", vm->name,
		 (unsigned long long)vm->cid, vm->seqpacket ? ", seqpacket" : "");
	/* Always: a front-end that reconnects to a restarted vsxd keeps a
	 * guest whose sockets belong to a device session this process never
	 * saw; for a fresh guest the event resets nothing. */
	vm->event_pending = true;
	vm_send_event(vm);
	vm_tx_run(vm);
	vsxb__vm_touch(vm);
	vsxb__router_round(vm->r);
}

static void op_stop(void *dev)
{
	struct vsxb_vm *vm = dev;

	if (!vm->live)
		return;
	if (vm->nconns)
		vsxb__log(vm->r, VSXB_LOG_INFO, "vm %s: device stopped: %u connection(s) "
			 "reset", vm->name, vm->nconns);
	vsxb__vm_drop_all(vm, false);
	vm->live = false;
	vm->broken = false;
	vm->event_pending = false;
	vm->tx_more = false;
	vm->rx_pushed = false;
	vm->rxq = vm->txq = vm->evq = NULL;
	if (vm->resume)
		vm->r->loop->timer_disarm(vm->resume);
	vsxb__vm_touch(vm);
	vsxb__router_round(vm->r);
}

static void op_log(void *dev, const char *msg)
{
	struct vsxb_vm *vm = dev;

	vsxb__log(vm->r, VSXB_LOG_WARNING, "vm %s: %s", vm->name, msg);
}

const struct vsx_vu_ops vsxb__vsock_ops = {
	.features = 1ull << VIRTIO_VSOCK_F_SEQPACKET,
	.nqueues = VSOCK_NUM_QUEUES,
	.min_queues = 2, /* rx, tx; QEMU keeps the event queue itself */
	.get_config = op_get_config,
	.kick = op_kick,
	.start = op_start,
	.stop = op_stop,
	.log = op_log,
};
