/*
 * The cross-thread sibling peer: siblings two threads serve (VMs of one
 * group on different shards, struct vsxb_shard; a pair on one shard is
 * peer_sibling.c's). The pair is two connections, one in each VM (xsib_ops,
 * peer kind "sibling"), joined by a link: two single-producer
 * single-consumer queues of records, one each way. Everything one half
 * would do to the other on one thread (peer_sibling.c) becomes a record
 * the other half's thread applies in order, with the same calls on its
 * half, so the other guest sees what it would see on one thread: every
 * RW with its EOM and EOR, SHUTDOWN with its flags, RST after the data
 * queued before it, CREDIT_REQUEST, and the credit end to end.
 *
 * - A's REQUEST makes the A half and the link, and sends MAKE: B's thread
 *   makes the B half and sends B's guest the REQUEST; its RESPONSE sends
 *   OK back with B's guest's credit, and A answers its guest. A refusal
 *   there (no listener, a limit, B gone) comes back as RST, and A's guest
 *   is refused (vsxb__conn_peer_reset on a connection still CONNECTING).
 * - Data, one copy: a DATA record does not carry the payload. It names a
 *   hold, a slot of the link that lends the receiver's thread the sender
 *   guest's TX buffers (the packet's payload iovecs in the sender's guest
 *   memory) while the sender keeps their chain unpublished
 *   (vsxb__tx_hold). The receiver's thread copies the bytes straight into
 *   its guest's RX buffers, or its half's queue while it has none, as
 *   peer_sibling.c's receiving half does (vsxb__sib_deliver), and marks
 *   the hold done. The sender's thread publishes the chain's used entry
 *   (vsxb__tx_release; out of order, as a split ring allows) and frees
 *   the slot when it next looks: at its guest's next packet or record
 *   for it, at the latest VSXB_REAP_MS later (ops->reap, the VM's resume
 *   timer), or when the receiver wakes it because half the pair's holds
 *   are done. A wake-up per hand-off back would cost a system call and a
 *   switch per packet, which the one copy does not pay for. Credit bounds
 *   the bytes in
 *   records: a guest sends only within the window its half announced, the
 *   other guest's buf_alloc and fwd_cnt.
 * - The bound: a pair holds at most XSIB_HOLDS chains each way, a VM at
 *   most an eighth of its TX ring's descriptors in chains (vsxb__tx_hold:
 *   a packet takes two or more), a chain of at most
 *   XSIB_HOLD_IOV payload pieces; past any of them the sender's thread
 *   copies the payload into the record (two copies) and the chain is
 *   published with its batch. A hold lasts until the receiver's thread
 *   applies the record, which it does at its next wake-up whatever its
 *   guest does: without RX buffers (a paused VM, a guest that does not
 *   refill them) the bytes go to the half's queue, so no receiver keeps
 *   the sender's chains, and the sender's other connections keep moving.
 * - Safety: the receiver reads the sender's guest memory only while a
 *   hold is TAKEN, which it makes from HELD with a compare-and-swap. The
 *   sender's thread recalls every hold it has before anything may unmap
 *   or reuse those buffers (ops->recall: its guest memory unmapped or
 *   replaced, SET_MEM_TABLE; its rings stopped, a reset or a pause; its
 *   half killed, which a VM freed or a front-end gone does first; a world
 *   frozen for a handoff): a HELD hold becomes RECALLING, the sender
 *   copies the bytes out into the slot (RECALLED: the receiver delivers
 *   the copy), a TAKEN one is waited for (the receiver only copies
 *   memory while it holds it: microseconds, no lock, no call that could
 *   wait for the sender); then the chain is published. So no hold is
 *   HELD or TAKEN once the sender's memory may go, and the receiver
 *   never reads an unmapped or remapped region. A region the VMM shrinks
 *   under the copy raises SIGBUS on the receiver's thread: the memory
 *   guard (vhost-user/memguard.h) zero-fills that mapping, the sender's
 *   own, and marks it; the sender's thread, woken by the hold done, finds
 *   the mark in its round and breaks the sender's device, the VM at
 *   fault.
 * - Credit: each half keeps the other guest's buf_alloc and fwd_cnt as
 *   the last CREDIT (or OK, MAKE) record told it, and announces them to
 *   its guest (window), buf_alloc capped by vsxb__sib_cap() or a
 *   set-buffer on the half. A half sends CREDIT when its guest's values
 *   change.
 * - Wake-up: a record pushed to an empty queue posts one callback to the
 *   other thread's loop (loop.h's post: its eventfd); the callback drains
 *   the queue and ends with the shard's round. No other system call.
 * - Lifetime: the link is counted (each half, a pending MAKE, each posted
 *   wake-up) and freed by whoever lets go last; a half names the other
 *   only through the link, so a VM freed under a pair (a reload, its
 *   connections reset: RST to the other half) leaves nothing dangling.
 *   The queues are touched by the two halves' threads, or by the control
 *   thread in a world stop while those are parked.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "peer_sib.h"

#define XSIB_HOLDS 32                /* chains a pair holds each way */
#define XSIB_HOLD_IOV 8              /* payload pieces of a held chain */

uint64_t vsxb__xsib_lent, vsxb__xsib_copied;

enum xrec_what { XR_MAKE, XR_OK, XR_DATA, XR_SHUT, XR_CREDIT, XR_CREDIT_REQ,
		 XR_CLOSE, XR_RST };

/* One record: what a half did, for the other half's thread. */
struct xrec {
	struct xrec *next;           /* __atomic: the producer links, the consumer reads */
	enum xrec_what what;
	unsigned flags;              /* DATA: EOM/EOR; SHUT: SHUTDOWN flags */
	uint32_t buf, fwd;           /* MAKE, OK, CREDIT: the sender's guest's */
	uint32_t len;                /* DATA: payload bytes, in @data */
	size_t room;                 /* DATA: how much more the sender may send */
	bool msg_open;               /* DATA: its message had bytes before */
	/* MAKE: the B half */
	struct vsxb_vm *from;        /* A's VM (may be gone: checked by serial) */
	uint64_t from_serial, from_cid;
	uint16_t type;
	uint32_t guest_port, peer_port;
	struct xhold *h;             /* DATA: the lent payload (NULL: in @data) */
	unsigned char data[];
};

/* A hold's states (__atomic): the sender's thread makes FREE -> HELD,
 * HELD -> RECALLING -> RECALLED, DONE -> FREE; the receiver's HELD ->
 * TAKEN -> DONE, RECALLED -> DONE. */
enum { XH_FREE, XH_HELD, XH_TAKEN, XH_DONE, XH_RECALLING, XH_RECALLED };

/* One TX chain of the sender's guest lent to the receiver's thread. */
struct xhold {
	int state;                   /* __atomic */
	int token;                   /* vsxb__tx_hold's; -1 once published */
	unsigned n;
	uint32_t len;
	struct iovec iov[XSIB_HOLD_IOV]; /* into the sender's guest memory */
	void *copy;                  /* RECALLED: the bytes (NULL: no memory) */
};

/* Records for one half: single producer (the other half's thread),
 * single consumer (this half's). @head is a consumed record (at first
 * @stub) whose next is the oldest unconsumed one. */
struct xring {
	struct xrec *head;           /* consumer */
	struct xrec *tail;           /* producer */
	struct xrec stub;
	bool armed;                  /* __atomic: a wake-up is posted */
};

struct xsib_link;

struct xsib_end {
	struct xsib_link *l;
	unsigned side;
};

struct xsib_link {
	struct vsxb_router *r;
	int refs;                    /* __atomic */
	struct xring ring[2];        /* ring[s]: for side s (0: A, 1: B) */
	struct conn *half[2];        /* touched on side s's thread only */
	struct vsxb_vm *vm[2];       /* side s's VM; may be gone ... */
	uint64_t serial[2];          /* ... checked by serial */
	struct vsxb_shard *sh[2];    /* side s's loop */
	struct xsib_end end[2];      /* wake-up arguments */
	/* What vsxctl shows of each half's queue (__atomic): payload side s's
	 * guest sent that waits for the other guest, in records or in the
	 * other half's queue, and the memory holding it */
	size_t held[2], held_mem[2];
	/* hold[s]: XSIB_HOLDS slots for side s's guest's chains, made on its
	 * first DATA; nheld[s]: those not FREE (side s's thread only) */
	struct xhold *hold[2];
	unsigned nheld[2];
	bool woke[2];                /* woke[s]: side s has holds done (set on
					the other side's thread) */
	unsigned done[2];            /* side s's holds done since it was woken
					(the other side's thread only) */
};

/* c->priv of a cross-thread half (sib_peer first: peer_sib.h) */
struct xsib_peer {
	struct sib_peer s;
	struct xsib_link *l;
	unsigned side;
	bool detached;               /* the other half is gone or told so */
	bool xknown;                 /* xbuf, xfwd valid */
	uint32_t xbuf, xfwd;         /* the other guest's buf_alloc, fwd_cnt */
	uint32_t sbuf, sfwd;         /* this guest's, as last told across */
	size_t qbytes, qmem;         /* this half's queue, as last published */
	struct txq shown;            /* the queue hook's answer */
};

static const struct vsxb_peer_ops xsib_ops;

static struct xsib_peer *xp(const struct conn *c)
{
	return c->priv;
}

/* ---- The link ---- */

static void ring_init(struct xring *q)
{
	q->stub.next = NULL;
	q->head = q->tail = &q->stub;
	q->armed = false;
}

static void ring_push(struct xring *q, struct xrec *rec)
{
	rec->next = NULL;
	__atomic_store_n(&q->tail->next, rec, __ATOMIC_RELEASE);
	q->tail = rec;
}

/* The oldest unconsumed record, valid until the next pop, or NULL. */
static struct xrec *ring_pop(struct xring *q)
{
	struct xrec *h = q->head, *next = __atomic_load_n(&h->next, __ATOMIC_ACQUIRE);

	if (!next)
		return NULL;
	q->head = next;
	if (h != &q->stub)
		free(h);
	return next;
}

static void ring_drain(struct xring *q)
{
	while (ring_pop(q))
		;
	if (q->head != &q->stub)
		free(q->head);
	ring_init(q);
}

static struct xsib_link *link_new(struct vsxb_vm *a, struct vsxb_vm *b)
{
	struct xsib_link *l = calloc(1, sizeof(*l));
	unsigned s;

	if (!l)
		return NULL;
	l->r = a->r;
	l->refs = 2;         /* the A half, and the MAKE that becomes the B half */
	l->vm[0] = a;
	l->vm[1] = b;
	for (s = 0; s < 2; s++) {
		ring_init(&l->ring[s]);
		l->serial[s] = l->vm[s]->serial;
		l->sh[s] = l->vm[s]->sh;
		l->end[s] = (struct xsib_end){ .l = l, .side = s };
	}
	return l;
}

static void link_put(struct xsib_link *l)
{
	unsigned s, i;

	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL))
		return;
	ring_drain(&l->ring[0]);
	ring_drain(&l->ring[1]);
	for (s = 0; s < 2; s++) {
		for (i = 0; l->hold[s] && i < XSIB_HOLDS; i++)
			free(l->hold[s][i].copy);
		free(l->hold[s]);
	}
	free(l);
}

static struct xrec *rec_new(enum xrec_what what, size_t len)
{
	/* the payload is written over at once: only the record is cleared */
	struct xrec *rec = malloc(sizeof(*rec) + len);

	if (rec) {
		memset(rec, 0, sizeof(*rec));
		rec->what = what;
	}
	return rec;
}

static void xsib_run(void *arg);

/* Side @to's thread is woken (unless a wake-up is posted already) to look
 * at its records, and at its holds the other side is done with. */
static void link_wake(struct xsib_link *l, unsigned to)
{
	const struct vsxu_loop *loop = l->sh[to]->loop;

	if (__atomic_exchange_n(&l->ring[to].armed, true, __ATOMIC_SEQ_CST))
		return;
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
	/* (a shard of another thread has post: vsxb__shard_get) */
	if (!loop->post || loop->post(loop->ctx, xsib_run, &l->end[to]) < 0) {
		/* out of memory: the next record tries again (and the next TX
		 * packet of that side reaps its holds) */
		__atomic_store_n(&l->ring[to].armed, false, __ATOMIC_SEQ_CST);
		link_put(l);
	}
}

/* @rec for side @to's thread, woken when its queue was idle. */
static void link_send(struct xsib_link *l, unsigned to, struct xrec *rec)
{
	ring_push(&l->ring[to], rec);
	link_wake(l, to);
}

/* What @c's half does reaches the other half (unless it is gone). */
static void xsib_send(struct conn *c, struct xrec *rec)
{
	struct xsib_peer *x = xp(c);

	if (x->detached) {
		free(rec);
		return;
	}
	link_send(x->l, !x->side, rec);
}

static void xsib_send_op(struct conn *c, enum xrec_what what, unsigned flags)
{
	struct xrec *rec = rec_new(what, 0);

	if (!rec) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
		return;
	}
	rec->flags = flags;
	xsib_send(c, rec);
}

/* This guest's credit, if the other half has not heard it. */
static void xsib_send_credit(struct conn *c, enum xrec_what what)
{
	struct xsib_peer *x = xp(c);
	struct xrec *rec;

	if (what == XR_CREDIT && x->sbuf == c->peer_buf_alloc &&
	    x->sfwd == c->peer_fwd_cnt)
		return;
	rec = rec_new(what, 0);
	if (!rec) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
		return;
	}
	rec->buf = x->sbuf = c->peer_buf_alloc;
	rec->fwd = x->sfwd = c->peer_fwd_cnt;
	xsib_send(c, rec);
}

/* The other half is gone: this one ends as peer_sibling.c's would. */
static void xsib_detach(struct conn *c)
{
	struct xsib_peer *x = xp(c);
	struct xrec *rst;

	if (x->detached)
		return;
	x->detached = true;
	/* without memory for it, the other half is reset when its guest
	 * gives up (a timeout, or its guest's own RST) */
	rst = rec_new(XR_RST, 0);
	if (rst)
		link_send(x->l, !x->side, rst);
}

/* @c's queue holds @bytes in @mem: the other half's view follows. */
static void xsib_publish_as(struct conn *c, size_t bytes, size_t mem)
{
	struct xsib_peer *x = xp(c);
	unsigned o;

	if (!x->l || (x->qbytes == bytes && x->qmem == mem))
		return;
	o = !x->side;
	__atomic_add_fetch(&x->l->held[o], bytes - x->qbytes, __ATOMIC_RELAXED);
	__atomic_add_fetch(&x->l->held_mem[o], mem - x->qmem, __ATOMIC_RELAXED);
	x->qbytes = bytes;
	x->qmem = mem;
}

static void xsib_publish(struct conn *c)
{
	xsib_publish_as(c, c->q.bytes, c->q.mem);
}

/* ---- Holds: on the sender's thread ---- */

/* A hold for the chain of the packet @a's guest sent (@iov, @n, @len), or
 * NULL past a bound: the caller copies the payload instead. */
static struct xhold *hold_get(struct conn *a, const struct iovec *iov, unsigned n,
			      uint32_t len)
{
	struct xsib_link *l = xp(a)->l;
	unsigned s = xp(a)->side, i;
	struct xhold *h;
	int token;

	if (n > XSIB_HOLD_IOV || l->nheld[s] >= XSIB_HOLDS)
		return NULL;
	if (!l->hold[s]) {
		l->hold[s] = calloc(XSIB_HOLDS, sizeof(*l->hold[s]));
		if (!l->hold[s])
			return NULL;
	}
	for (i = 0; i < XSIB_HOLDS; i++)
		if (__atomic_load_n(&l->hold[s][i].state, __ATOMIC_ACQUIRE) == XH_FREE)
			break;
	if (i == XSIB_HOLDS)
		return NULL;
	token = vsxb__tx_hold(a);
	if (token < 0)
		return NULL;
	h = &l->hold[s][i];
	h->token = token;
	h->n = n;
	h->len = len;
	memcpy(h->iov, iov, n * sizeof(*iov));
	/* (published by the record's push, a release) */
	__atomic_store_n(&h->state, XH_HELD, __ATOMIC_RELAXED);
	l->nheld[s]++;
	return h;
}

/* Holds of side @s that the receiver is done with: their chains are
 * published (@vm: side s's VM, its half alive; else none is unpublished)
 * and their slots free. */
static void holds_reap(struct xsib_link *l, unsigned s, struct vsxb_vm *vm)
{
	struct xhold *h;
	unsigned i;

	for (i = 0; l->nheld[s] && i < XSIB_HOLDS; i++) {
		h = &l->hold[s][i];
		if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != XH_DONE)
			continue;
		if (h->token >= 0 && vm)
			vsxb__tx_release(vm, h->token);
		h->token = -1;
		__atomic_store_n(&h->state, XH_FREE, __ATOMIC_RELAXED);
		l->nheld[s]--;
	}
}

/* ops->reap */
static void xsib_reap(struct conn *c)
{
	struct xsib_peer *x = xp(c);

	if (x->l && x->l->nheld[x->side])
		holds_reap(x->l, x->side, c->vm);
}

/*
 * ops->recall: no hold of @c's guest stays HELD or TAKEN. A HELD one is
 * copied out (RECALLING, RECALLED: the receiver delivers the copy), a
 * TAKEN one waited for (the receiver's thread is copying memory and
 * nothing else: it ends without us), and every chain is published. After
 * this the receiver reads nothing of @c's guest memory.
 */
static void xsib_recall(struct conn *c)
{
	struct xsib_peer *x = xp(c);
	struct xsib_link *l = x->l;
	unsigned s = x->side, i;
	struct xhold *h;
	int st;

	if (!l || !l->nheld[s])
		return;
	for (i = 0; i < XSIB_HOLDS; i++) {
		h = &l->hold[s][i];
		st = XH_HELD;
		if (__atomic_compare_exchange_n(&h->state, &st, XH_RECALLING, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			h->copy = malloc(h->len ? h->len : 1);
			if (h->copy) {
				vsxu_iov_to_buf(h->iov, h->n, 0, h->copy, h->len);
				__atomic_add_fetch(&vsxb__xsib_copied, h->len, __ATOMIC_RELAXED);
			}
			__atomic_store_n(&h->state, XH_RECALLED, __ATOMIC_RELEASE);
		} else {
			while (st == XH_TAKEN) {
				sched_yield();
				st = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
			}
		}
		if (st == XH_FREE)
			continue;
		if (h->token >= 0)
			vsxb__tx_release(c->vm, h->token);
		h->token = -1;
	}
	holds_reap(l, s, c->vm);
	vsxb__tx_publish(c->vm);
}

/* ---- On B's thread: MAKE ---- */

static void xsib_make(struct xsib_link *l, struct xrec *m)
{
	struct vsxb_vm *vm = l->vm[1];
	struct conn *c;
	int lim;

	/* as vsxb__sib_request refuses; a paused VM gets the REQUEST at cont.
	 * A gone (it cannot go while this thread runs): nobody to answer */
	if (!vsxb__vm_listed(l->r, vm, l->serial[1]) ||
	    !vsxb__vm_listed(l->r, m->from, m->from_serial) ||
	    !vm->live || vm->broken || vm->freeing ||
	    (m->type == VIRTIO_VSOCK_TYPE_SEQPACKET && !vm->seqpacket) ||
	    vsxb__conn_find(vm, m->guest_port, m->from_cid, m->peer_port))
		goto refuse;
	lim = vsxb__conn_limit(vm, 1);
	if (lim) {
		vsxb__refuse(vm, m->type, m->guest_port, m->from_cid, m->peer_port, false,
			    VSXB_REASON_LIMIT, 0, lim);
		goto refuse;
	}
	c = vsxb__conn_new(vm, &xsib_ops, m->type, m->guest_port, m->from_cid,
			  m->peer_port);
	if (!c)
		goto refuse;
	vsxb__sib_keep_bounds(c);
	xp(c)->l = l;        /* the MAKE's reference is the half's now */
	xp(c)->side = 1;
	xp(c)->xknown = true;
	xp(c)->xbuf = m->buf;
	xp(c)->xfwd = m->fwd;
	l->half[1] = c;
	c->buf_alloc = vsxb__sib_cap(vm);
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	vsxb__conn_ctrl(c, C_REQUEST);
	return;
refuse: {
	struct xrec *rst = rec_new(XR_RST, 0);

	/* without memory for the answer, A's half never hears: it is
	 * reset when its guest gives up (or its VM goes) */
	if (rst)
		link_send(l, 0, rst);
	link_put(l);
	}
}

/* ---- On a half's thread: the other half's records ---- */

/* DATA that lands in @c's guest (@c NULL: dropped). */
static void xsib_data(struct conn *c, const struct iovec *iov, unsigned n,
		      const struct xrec *rec)
{
	if (vsxb__sib_deliver(c, iov, n, rec->len, rec->flags, rec->room,
			      rec->msg_open) == -ENOMEM) {
		vsxb__log(c->vm->r, VSXB_LOG_ERR, "vm %s: connection %llu: out "
			 "of memory", c->vm->name, (unsigned long long)c->id);
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
	}
}

/* DATA lent by side !@s's guest (rec->h): copied from its TX buffers into
 * @c's guest (or queue), unless the sender recalled it first (then from
 * its copy); the hold is done, and the sender's thread woken once the
 * round of records ends (l->woke). */
static void xsib_take(struct xsib_link *l, unsigned s, struct conn *c,
		      const struct xrec *rec)
{
	struct xhold *h = rec->h;
	struct iovec iov;
	int st = XH_HELD;

	if (__atomic_compare_exchange_n(&h->state, &st, XH_TAKEN, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* the sender's memory stays mapped until DONE (xsib_recall) */
		if (c) {
			xsib_data(c, h->iov, h->n, rec);
			__atomic_add_fetch(&vsxb__xsib_lent, rec->len, __ATOMIC_RELAXED);
		}
		__atomic_store_n(&h->state, XH_DONE, __ATOMIC_RELEASE);
	} else {
		while (st == XH_RECALLING) {
			sched_yield();
			st = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
		}
		/* RECALLED: the bytes are the slot's */
		if (c && !h->copy) {
			vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
			vsxb__conn_reset(c, false);
		} else if (c) {
			iov = (struct iovec){ .iov_base = h->copy, .iov_len = rec->len };
			xsib_data(c, &iov, 1, rec);
		}
		free(h->copy);
		h->copy = NULL;
		__atomic_store_n(&h->state, XH_DONE, __ATOMIC_RELEASE);
	}
	/* the sender's thread finds done holds by itself (its next packet,
	 * record or reap timer, VSXB_REAP_MS); woken only when half its
	 * holds are done, so that it may lend more */
	if (++l->done[!s] >= XSIB_HOLDS / 2) {
		l->done[!s] = 0;
		l->woke[!s] = true;
	}
}

static void xsib_apply(struct xsib_link *l, unsigned s, struct xrec *rec)
{
	struct conn *c = l->half[s];
	struct iovec iov;

	if (rec->what == XR_MAKE) {
		xsib_make(l, rec);
		return;
	}
	if (rec->what == XR_DATA) {
		__atomic_sub_fetch(&l->held[!s], rec->len, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&l->held_mem[!s], sizeof(*rec) + (rec->h ? 0 : rec->len),
				   __ATOMIC_RELAXED);
		if (rec->h) {
			xsib_take(l, s, c, rec);
			return;
		}
	}
	if (!c)
		return; /* this half is gone: the other was told */
	switch (rec->what) {
	case XR_MAKE:
		break;
	case XR_OK:
		xp(c)->xknown = true;
		xp(c)->xbuf = rec->buf;
		xp(c)->xfwd = rec->fwd;
		if (c->state == VSXB_CONN_CONNECTING)
			vsxb__conn_accept(c);
		break;
	case XR_DATA:
		iov = (struct iovec){ .iov_base = rec->data, .iov_len = rec->len };
		xsib_data(c, &iov, 1, rec);
		break;
	case XR_SHUT:
		vsxb__conn_why(c, VSXB_REASON_PEER_SHUTDOWN, 0);
		vsxb__conn_shutdown(c, rec->flags);
		break;
	case XR_CREDIT:
		xp(c)->xbuf = rec->buf;
		xp(c)->xfwd = rec->fwd;
		vsxb__conn_credit_check(c);
		break;
	case XR_CREDIT_REQ:
		vsxb__conn_ctrl(c, C_CREDIT_REQUEST);
		break;
	case XR_CLOSE:
		vsxb__conn_shutdown(c, VSXB_SHUT_BOTH);
		break;
	case XR_RST:
		xp(c)->detached = true;
		vsxb__conn_peer_reset(c);
		break;
	}
}

/* Posted to side s's loop: drain its queue, then the shard's round. */
static void xsib_run(void *arg)
{
	struct xsib_end *e = arg;
	struct xsib_link *l = e->l;
	struct vsxb_shard *sh = l->sh[e->side];
	struct xring *q = &l->ring[e->side];
	struct xrec *rec;

	struct conn *c;

	/* disarmed first: a record pushed from now on posts again */
	__atomic_store_n(&q->armed, false, __ATOMIC_SEQ_CST);
	while ((rec = ring_pop(q)))
		xsib_apply(l, e->side, rec);
	c = l->half[e->side];
	if (c)
		xsib_publish(c);
	/* this side's chains the other is done with; the other side told
	 * of the ones it lent that this side took */
	if (l->nheld[e->side])
		holds_reap(l, e->side, c ? c->vm : NULL);
	if (l->woke[!e->side]) {
		l->woke[!e->side] = false;
		link_wake(l, !e->side);
	}
	link_put(l);
	vsxb__round(sh);
}

/* ---- On A's thread: the REQUEST ---- */

/* (the router checked A's connection limits) */
void vsxb__xsib_request(struct vsxb_vm *vm, struct vsxb_vm *to,
		       const struct virtio_vsock_hdr *h)
{
	struct xsib_link *l;
	struct xrec *m;
	struct conn *c;

	l = link_new(vm, to);
	m = rec_new(XR_MAKE, 0);
	c = l && m ? vsxb__conn_new(vm, &xsib_ops, h->type, h->src_port, h->dst_cid,
				    h->dst_port) : NULL;
	if (!c) {
		free(l);
		free(m);
		vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
			    VSXB_REASON_ERROR, ENOMEM, 0);
		vsxb__orphan_rst(vm, h);
		return;
	}
	vsxb__sib_keep_bounds(c);
	xp(c)->l = l;
	l->half[0] = c;
	c->guest_initiated = true;
	c->buf_alloc = vsxb__sib_cap(vm);
	c->peer_buf_alloc = h->buf_alloc;
	c->peer_fwd_cnt = h->fwd_cnt;
	m->buf = xp(c)->sbuf = h->buf_alloc;
	m->fwd = xp(c)->sfwd = h->fwd_cnt;
	m->from = vm;
	m->from_serial = vm->serial;
	m->from_cid = vm->cid;
	m->type = h->type;
	m->guest_port = h->dst_port;
	m->peer_port = h->src_port;
	link_send(l, 1, m);
}

/* ---- The hooks ---- */

static void xsib_rw(struct conn *a, struct iovec *iov, unsigned n, uint32_t len,
		    unsigned flags)
{
	int32_t room = (int32_t)(a->rx_limit - a->rx_cnt);
	struct xsib_peer *x = xp(a);
	struct xhold *h = NULL;
	struct xrec *rec;

	if (x->detached)
		return; /* nobody will read it */
	if (x->l->nheld[x->side])
		holds_reap(x->l, x->side, a->vm);
	if (len || ((flags & VIRTIO_VSOCK_SEQ_EOM) && a->msg_open)) {
		/* lend the chain; past a bound, copy the payload (two copies) */
		if (len)
			h = hold_get(a, iov, n, len);
		rec = rec_new(XR_DATA, h ? 0 : len);
		if (!rec) {
			if (h) {
				vsxb__tx_release(a->vm, h->token);
				h->token = -1;
				__atomic_store_n(&h->state, XH_DONE, __ATOMIC_RELAXED);
				holds_reap(x->l, x->side, a->vm);
			}
			vsxb__log(a->vm->r, VSXB_LOG_ERR, "vm %s: connection %llu: out of "
				 "memory", a->vm->name, (unsigned long long)a->id);
			vsxb__conn_why(a, VSXB_REASON_ERROR, ENOMEM);
			vsxb__conn_reset(a, false);
			return;
		}
		rec->len = len;
		rec->flags = flags;
		rec->room = room > 0 ? (size_t)room : 0;
		rec->msg_open = a->msg_open;
		rec->h = h;
		if (!h && len) {
			vsxu_iov_to_buf(iov, n, 0, rec->data, len);
			__atomic_add_fetch(&vsxb__xsib_copied, len, __ATOMIC_RELAXED);
		}
		__atomic_add_fetch(&x->l->held[x->side], len, __ATOMIC_RELAXED);
		__atomic_add_fetch(&x->l->held_mem[x->side],
				   sizeof(*rec) + (h ? 0 : len), __ATOMIC_RELAXED);
		xsib_send(a, rec);
	}
	/* The other guest's credit news may have been held back while this
	 * one had room; now that it used some, pass it on. */
	vsxb__conn_credit_check(a);
}

static void xsib_guest_shutdown(struct conn *c, unsigned flags)
{
	xsib_send_op(c, XR_SHUT, flags);
}

static void xsib_credit_request(struct conn *c)
{
	xsib_send_op(c, XR_CREDIT_REQ, 0);
}

static void xsib_credit_changed(struct conn *c)
{
	if (vsxb__sib_pending(c))
		vsxb__conn_schedule(c);
	xsib_send_credit(c, XR_CREDIT);
}

/* The B half's guest accepted: so does the A half, with this guest's credit. */
static int xsib_established(struct conn *c)
{
	if (xp(c)->detached) {
		vsxb__conn_why(c, VSXB_REASON_PEER_RST, 0);
		return -ECONNRESET;
	}
	xsib_send_credit(c, XR_OK);
	return c->dead ? -ENOMEM : 0;
}

/* End to end: the other guest's values, buf_alloc capped on this half;
 * once the other half is gone, what this guest last heard. */
static void xsib_window(const struct conn *c, uint32_t *fwd, uint32_t *buf)
{
	const struct xsib_peer *x = xp(c);
	bool known = x->xknown && !x->detached;

	*fwd = known ? x->xfwd : c->last_fwd_sent;
	*buf = known ? vsxb_u32min(x->xbuf, c->buf_alloc) : c->last_buf_sent;
}

static void xsib_close(struct conn *c)
{
	vsxb__conn_shutdown(c, VSXB_SHUT_BOTH);
	xsib_send_op(c, XR_CLOSE, 0);
}

static void xsib_reset(struct conn *c)
{
	xsib_detach(c);
	xp(c)->s.eom_pending = 0;
}

static void xsib_gone(struct conn *c)
{
	xsib_detach(c);
	vsxb__conn_kill(c);
}

/* The other guest's payload -> this guest (peer_sibling.c's), and the
 * other half's view of what is left follows. */
static int xsib_emit(struct conn *c)
{
	int rc = vsxb__sib_emit(c);

	xsib_publish(c);
	return rc;
}

/* What this guest sent that waits for the other guest: in records, or in
 * the other half's queue as it last published it. */
static const struct txq *xsib_queue(const struct conn *c)
{
	struct xsib_peer *x = xp(c);

	if (!x->l)
		return NULL;
	x->shown.bytes = __atomic_load_n(&x->l->held[x->side], __ATOMIC_RELAXED);
	x->shown.mem = __atomic_load_n(&x->l->held_mem[x->side], __ATOMIC_RELAXED);
	return &x->shown;
}

/* The half is killed: the other hears (if it has not yet), the link lets
 * go of it. */
static void xsib_release(struct conn *c)
{
	struct xsib_peer *x = xp(c);

	if (!x->l)
		return;
	/* the other half may read this guest's chains no more: its VM may
	 * go, its memory with it */
	xsib_recall(c);
	xsib_detach(c);
	xsib_publish_as(c, 0, 0);    /* freed with the connection */
	x->l->half[x->side] = NULL;
	link_put(x->l);
	x->l = NULL;
}

/* A sibling on another thread: peer_sibling.c's receiving half, fed by
 * the other half's records. */
static const struct vsxb_peer_ops xsib_ops = {
	.name = "sibling",
	.priv_size = sizeof(struct xsib_peer),
	/* Guest -> peer */
	.rw = xsib_rw,
	.guest_shutdown = xsib_guest_shutdown,
	.credit_request = xsib_credit_request,
	.credit_changed = xsib_credit_changed,
	.established = xsib_established,
	/* Peer -> guest */
	.emit = xsib_emit,
	.pending = vsxb__sib_pending,
	/* Credit */
	.window = xsib_window,
	/* Ends */
	.close = xsib_close,
	.reset = xsib_reset,
	.gone = xsib_gone,
	.release = xsib_release,
	.recall = xsib_recall,
	.reap = xsib_reap,
	/* Control */
	.queue = xsib_queue,
};
