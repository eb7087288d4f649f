/*
 * The sibling peer: a connection whose other end is a connection of
 * another VM (sibling routing between VMs sharing a group, router.c).
 *
 * A REQUEST from VM A to the CID of a live VM B that shares a group with
 * A creates two connections, one in each VM, each the other's peer.
 * Packets are relayed: payload is copied from A's TX buffers straight into
 * B's RX buffers when B has some (and nothing waits for them), otherwise
 * into the B-side connection's queue, which keeps where each of A's
 * packets ended, STREAM too: no packet to B spans two of A's, as a
 * direct copy's never does (a Linux receiver credits whole packets:
 * vsxb__sib_keep_bounds). Credit is end to end: the buf_alloc
 * and fwd_cnt A sees are B's, whatever vsxd's tx-buffer-size, so A can
 * never have more in flight than B's guest can take, and when B raises or
 * lowers its buffer A hears of it. The bytes stay in vsxd only while B has
 * no RX buffers posted; that queue is bounded by the window, which is
 * capped by the A-side connection's buf_alloc: vsxb__sib_cap(), at most
 * VSXB_SIBLING_WINDOW_MAX (or tx-buffer-size when larger, or half of
 * max-conn-memory), and lowered by a set-buffer on the connection. SHUTDOWN, RST and
 * CREDIT_REQUEST are relayed; SHUTDOWN and RST only after the data queued
 * before them.
 *
 * The two halves belong to two VMs. This file reaches the other half only
 * through the engine's connection calls on it (vsxb__conn_*, and
 * vsxb__rx_reserve / vsxb__rx_commit / vsxb__rx_empty, which fill its
 * guest's RX buffers) and
 * its queue, and reads the guest credit values it relays
 * (peer_buf_alloc, peer_fwd_cnt): that is the whole cross-VM surface, the
 * reason both halves must be on one thread: a pair whose VMs two threads
 * serve is made by peer_xsib.c instead (vsxb__xsib_request), whose halves
 * receive through this file's receiving half (peer_sib.h:
 * vsxb__sib_deliver, vsxb__sib_emit, vsxb__sib_pending).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer_sib.h"

static const struct vsxb_peer_ops sib_ops;

static struct sib_peer *sp(const struct conn *c)
{
	return c->priv;
}

/* Unlink the pair, telling nobody. */
static void sib_unlink(struct conn *c)
{
	struct conn *p = sp(c)->other;

	if (!p)
		return;
	sp(p)->other = NULL;
	sp(c)->other = NULL;
}

/* The half @c goes away: its other half ends with an RST once the data
 * already queued for its guest is out (bounded by the linger time). */
static void sib_detach(struct conn *c)
{
	struct conn *p = sp(c)->other;

	if (!p)
		return;
	sib_unlink(c);
	vsxb__conn_peer_reset(p, vsxb__sib_pending(p));
}

void vsxb__sib_request(struct vsxb_vm *vm, struct vsxb_vm *to,
		      const struct virtio_vsock_hdr *h)
{
	struct vsxb_router *r = vm->r;
	struct conn *a, *b;
	int lim;

	if ((h->type == VIRTIO_VSOCK_TYPE_SEQPACKET && !to->seqpacket) ||
	    vsxb__conn_find(to, h->dst_port, vm->cid, h->src_port)) {
		vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
			    VSXB_REASON_REFUSED, 0, 0);
		goto refuse;
	}
	/* two connections: one in each VM */
	lim = vsxb__conn_limit(to, 1);
	if (!lim && r->lim.max_conns && vsxb_load(&r->nconns) + 2 > r->lim.max_conns) {
		vsxb_add(&r->st.refused_limit_conns, 1);
		lim = VSXB_LIMIT_CONNS;
	}
	if (lim) {
		vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
			    VSXB_REASON_LIMIT, 0, lim);
		goto refuse;
	}
	a = vsxb__conn_new(vm, &sib_ops, h->type, h->src_port, h->dst_cid,
			  h->dst_port);
	if (!a) {
		vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
			    VSXB_REASON_ERROR, ENOMEM, 0);
		goto refuse;
	}
	b = vsxb__conn_new(to, &sib_ops, h->type, h->dst_port, vm->cid, h->src_port);
	if (!b) {
		a->guest_initiated = true;
		vsxb__conn_why(a, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_kill(a);
		goto refuse;
	}
	a->guest_initiated = true;
	vsxb__sib_keep_bounds(a);
	vsxb__sib_keep_bounds(b);
	a->cr.buf_alloc = vsxb__sib_cap(vm);
	b->cr.buf_alloc = vsxb__sib_cap(to);
	sp(a)->other = b;
	sp(b)->other = a;
	a->cr.peer_buf_alloc = h->buf_alloc;
	a->cr.peer_fwd_cnt = h->fwd_cnt;
	vsxb__conn_timer(b, T_CONNECT, vm->r->lim.connect_ms);
	vsxb__conn_ctrl(b, C_REQUEST);
	return;
refuse:
	vsxb__orphan_rst(vm, h);
}


/* Copy @len bytes from @src (skipping @soff) into @dst (skipping @doff). */
static void iov_copy(const struct iovec *dst, unsigned dn, size_t doff,
		     const struct iovec *src, unsigned sn, size_t soff, size_t len)
{
	unsigned si = 0;

	while (len && si < sn) {
		size_t k;

		if (soff >= src[si].iov_len) {
			soff -= src[si].iov_len;
			si++;
			continue;
		}
		k = src[si].iov_len - soff;
		if (k > len)
			k = len;
		k = vsxu_iov_from_buf(dst, dn, doff,
				     (const char *)src[si].iov_base + soff, k);
		if (!k)
			return;
		doff += k;
		soff += k;
		len -= k;
	}
}

void vsxb__sib_keep_bounds(struct conn *c)
{
	vsxb__txq_init(&c->q, true);
}

bool vsxb__sib_pending(const struct conn *c)
{
	return c->q.bytes || sp(c)->eom_pending;
}

static bool sib_can_direct(const struct conn *b)
{
	return vsxb__conn_rx_direct_ok(b) && !vsxb__sib_pending(b);
}

/* From the sender's TX buffers straight into @b's guest's RX buffers. */
static size_t sib_direct(struct conn *b, const struct iovec *iov, unsigned n,
			 size_t len, unsigned flags)
{
	uint32_t credit = vsxb__conn_peer_free(b);
	struct vsxb_rx rx;
	size_t k = 0;

	if (credit && !vsxb__rx_reserve(b, len < credit ? len : credit, VSXB_RX_BATCH,
					false, &rx)) {
		k = rx.room;
		iov_copy(rx.iov, rx.niov, 0, iov, n, 0, k);
		vsxb__rx_commit(b, &rx, k, k == len ? flags : 0);
	}
	if (k < len && k == credit)
		vsxb__conn_stall(b);
	return k;
}

bool vsxb__sib_direct_all(struct conn *b, const struct iovec *iov, unsigned n,
			  uint32_t len, unsigned flags)
{
	struct vsxb_rx rx;

	if (!len || !vsxb__conn_takes_data(b) || !sib_can_direct(b) ||
	    vsxb__conn_peer_free(b) < len ||
	    vsxb__rx_reserve(b, len, VSXB_RX_BATCH, true, &rx) < 0)
		return false;
	iov_copy(rx.iov, rx.niov, 0, iov, n, 0, len);
	vsxb__rx_commit(b, &rx, len, flags);
	return true;
}

int vsxb__sib_deliver(struct conn *b, const struct iovec *iov, unsigned n,
		      uint32_t len, unsigned flags, size_t room, bool msg_open)
{
	struct iovec rest[VSXU_VQ_MAX_IOV];
	size_t off = 0;
	unsigned k;
	int rc;

	if (!vsxb__conn_takes_data(b))
		return 0; /* nobody will read it */
	if (!len) {
		if (!(flags & VIRTIO_VSOCK_SEQ_EOM) || !msg_open)
			return 0; /* nothing, or an empty message: dropped */
		if (vsxb__txq_end_msg(&b->q, flags)) {
			vsxb__conn_schedule(b);
			return 0;
		}
		/* The message's bytes are already in the guest: end it there. */
		if (sib_can_direct(b) && vsxb__rx_empty(b, flags))
			return 0;
		sp(b)->eom_pending = flags;
		vsxb__conn_schedule(b);
		return 0;
	}
	if (sib_can_direct(b))
		off = sib_direct(b, iov, n, len, flags);
	if (off == len)
		return 0;
	k = vsxu_iov_slice(rest, VSXU_VQ_MAX_IOV, iov, n, off, len - off);
	/* STREAM: the packet's end is kept too (vsxb__sib_keep_bounds) */
	if (b->type == VIRTIO_VSOCK_TYPE_STREAM)
		flags = VIRTIO_VSOCK_SEQ_EOM;
	rc = vsxb__conn_enqueue(b, rest, k, len - off, room, flags);
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0)
		return 0;
	vsxb__conn_schedule(b);
	return 0;
}

static void sib_relay(struct conn *a, const struct iovec *iov, unsigned n,
		      uint32_t len, unsigned flags)
{
	struct conn *b = sp(a)->other;
	int32_t room = (int32_t)(a->cr.rx_limit - a->cr.rx_cnt);

	if (!b)
		return; /* nobody will read it */
	if (vsxb__sib_deliver(b, iov, n, len, flags, room > 0 ? (size_t)room : 0,
			      a->msg_open) == -ENOMEM) {
		vsxb__log(a->vm->r, VSXB_LOG_ERR, "vm %s: connection %llu: out of memory",
			 a->vm->name, (unsigned long long)a->id);
		vsxb__conn_why(a, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(a, false);
	}
}

static void sib_rw(struct conn *a, struct iovec *iov, unsigned n, uint32_t len,
		   unsigned flags)
{
	sib_relay(a, iov, n, len, flags);
	/* The other guest's credit news may have been held back while this
	 * one had room; now that it used some, pass it on. */
	if (!a->dead)
		vsxb__conn_credit_check(a);
}

/* The head of @b's queue, up to one packet of the other guest, into the
 * RX buffer @rx of @b's guest; the bytes taken. */
static size_t sib_queue_copy(struct conn *b, const struct vsxb_rx *rx, unsigned *flags)
{
	struct iovec *q = b->vm->fiov;
	unsigned nq, fl;
	size_t k;

	k = vsxb__txq_peek(&b->q, q, VSXB_IOV_MAX, &nq, rx->room, &fl);
	if (b->type == VIRTIO_VSOCK_TYPE_STREAM)
		fl = 0; /* a packet's end, not a message's */
	iov_copy(rx->iov, rx->niov, 0, q, nq, 0, k);
	vsxb__txq_consume(&b->q, k);
	*flags = fl;
	return k;
}

/* The other guest's queued payload -> this guest. */
int vsxb__sib_emit(struct conn *b)
{
	size_t sent = 0, k;
	struct vsxb_rx rx;
	uint32_t credit;
	unsigned fl;

	if (sp(b)->eom_pending) {
		if (!vsxb__rx_empty(b, sp(b)->eom_pending))
			return EMIT_NOBUF;
		sp(b)->eom_pending = 0;
	}
	while (b->q.bytes) {
		credit = vsxb__conn_peer_free(b);
		if (!credit) {
			vsxb__conn_stall(b);
			return EMIT_DONE; /* resumed when the guest's credit moves */
		}
		if (sent >= VSOCK_MAX_PKT_PAYLOAD)
			return EMIT_MORE;
		if (vsxb__rx_reserve(b, credit, 1, false, &rx) < 0)
			return EMIT_NOBUF;
		k = sib_queue_copy(b, &rx, &fl);
		vsxb__rx_commit(b, &rx, k, fl);
		if (!k)
			return EMIT_NOBUF;
		sent += k;
	}
	return EMIT_DONE;
}

static void sib_guest_shutdown(struct conn *c, unsigned flags)
{
	struct conn *p = sp(c)->other;

	if (p) {
		vsxb__conn_why(p, VSXB_REASON_PEER_SHUTDOWN, 0);
		vsxb__conn_shutdown(p, flags);
	}
}

static void sib_credit_request(struct conn *c)
{
	if (sp(c)->other)
		vsxb__conn_ctrl(sp(c)->other, C_CREDIT_REQUEST);
}

static void sib_credit_changed(struct conn *c)
{
	if (vsxb__sib_pending(c))
		vsxb__conn_schedule(c);
	if (sp(c)->other)
		vsxb__conn_credit_check(sp(c)->other);
}

/* The guest at the other end accepted: so does the other half. */
static int sib_established(struct conn *c)
{
	struct conn *p = sp(c)->other;

	if (!p) {
		vsxb__conn_why(c, VSXB_REASON_PEER_RST, 0);
		return -ECONNRESET;
	}
	vsxb__conn_accept(p);
	return 0;
}

/* End to end: the other guest's values, buf_alloc capped by vsxb__sib_cap()
 * (or the operator's set-buffer) on this half. */
static void sib_window(const struct conn *c, uint32_t *fwd, uint32_t *buf)
{
	const struct conn *p = sp(c)->other;

	*fwd = p ? p->cr.peer_fwd_cnt : c->cr.last_fwd_sent;
	*buf = p ? vsxb_u32min(p->cr.peer_buf_alloc, c->cr.buf_alloc) : c->cr.last_buf_sent;
}

static void sib_close(struct conn *c)
{
	struct conn *p = sp(c)->other;

	vsxb__conn_shutdown(c, VSXB_SHUT_BOTH);
	if (p)
		vsxb__conn_shutdown(p, VSXB_SHUT_BOTH);
}

static void sib_reset(struct conn *c)
{
	sib_detach(c);
	sp(c)->eom_pending = 0;
}

static void sib_gone(struct conn *c)
{
	sib_detach(c);
	vsxb__conn_kill(c);
}

/* ---- Kept across a live handoff (restart.c) ---- */

int vsxb__sib_keep_q(const struct conn *c, struct vsxb_conn_keep *k, size_t more,
		     unsigned more_ends)
{
	/* a stream's queue has an end per packet: at most one per byte */
	size_t cap = c->q.bytes + more, nends = c->q.bytes + more_ends;
	uint8_t *q = malloc(cap ? cap : 1);
	struct vsxb_msg_end *ends = malloc((nends ? nends : 1) * sizeof(*ends));

	if (!q || !ends) {
		free(q);
		free(ends);
		return -ENOMEM;
	}
	k->qlen = (uint32_t)vsxb__txq_copy(&c->q, q, ends, &k->nends);
	k->q = q;
	k->ends = ends;
	return 0;
}

void vsxb__sib_keep_twin(struct vsxb_conn_keep *k, const struct conn *twin,
			 unsigned eom_pending)
{
	k->sibling = true;
	snprintf(k->twin_vm, sizeof(k->twin_vm), "%s", twin->vm->name);
	k->twin_id = twin->id;
	k->eom_pending = eom_pending;
}

/* An established pair goes on in the next process: this half names the
 * other, and keeps what waits for its guest. */
static int sib_keep(const struct conn *c, struct vsxb_conn_keep *k)
{
	const struct conn *p = sp(c)->other;

	if (!p || p->dead || c->state != VSXB_CONN_ESTABLISHED ||
	    p->state != VSXB_CONN_ESTABLISHED)
		return 0;
	vsxb__sib_keep_twin(k, p, sp(c)->eom_pending);
	return vsxb__sib_keep_q(c, k, 0, 0);
}

struct conn *vsxb__sib_half_new(struct vsxb_vm *vm, const struct vsxb_conn_keep *k,
				const struct vsxb_peer_ops *ops)
{
	struct conn *c = vsxb__conn_new(vm, ops, (uint16_t)k->type, k->guest_port,
				       k->peer_cid, k->peer_port);

	if (c)
		vsxb__sib_keep_bounds(c);
	return c;
}

struct conn *vsxb__sib_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k)
{
	return vsxb__sib_half_new(vm, k, &sib_ops);
}

void vsxb__sib_join(struct conn *a, struct conn *b, unsigned eom_a, unsigned eom_b)
{
	sp(a)->other = b;
	sp(b)->other = a;
	sp(a)->eom_pending = eom_a;
	sp(b)->eom_pending = eom_b;
}

static bool sib_end(struct conn *c, enum vsxb_end how)
{
	switch (how) {
	case VSXB_END_CLOSE:
		sib_close(c);
		break;
	case VSXB_END_RESET:
		sib_reset(c);
		break;
	case VSXB_END_GONE:
		sib_gone(c);
		break;
	case VSXB_END_RELEASE:
		sib_unlink(c);
		break;
	}
	return true;
}

/* What this connection's guest sent that waits for the other guest. */
static const struct txq *sib_queue(const struct conn *c)
{
	return sp(c)->other ? &sp(c)->other->q : NULL;
}

static const struct vsxb_peer_ops sib_ops = {
	.name = "sibling",
	.priv_size = sizeof(struct sib_peer),
	/* Guest -> peer */
	.rw = sib_rw,
	.guest_shutdown = sib_guest_shutdown,
	.credit_request = sib_credit_request,
	.credit_changed = sib_credit_changed,
	.established = sib_established,
	/* Peer -> guest */
	.emit = vsxb__sib_emit,
	.pending = vsxb__sib_pending,
	/* Credit */
	.window = sib_window,
	/* End */
	.end = sib_end,
	/* Control */
	.queue = sib_queue,
	.keep = sib_keep,
};
