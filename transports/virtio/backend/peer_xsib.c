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
 * - Data: the sender's thread copies a guest packet's payload out of its
 *   TX buffers into a DATA record; the receiver's thread puts it into its
 *   guest's RX buffers, or its half's queue while it has none, as
 *   peer_sibling.c's receiving half does (vsxb__sib_deliver). Credit
 *   bounds the bytes in records: a guest sends only within the window its
 *   half announced, the other guest's buf_alloc and fwd_cnt.
 * - Credit: each half keeps the other guest's buf_alloc and fwd_cnt as
 *   the last CREDIT (or OK, MAKE) record told it, and announces them to
 *   its guest (window), buf_alloc capped by vsxb__sib_cap() or a
 *   set-buffer on the half. A half sends CREDIT when its guest's values
 *   change.
 * - Wake-up: a record pushed to an empty queue owes the other thread's
 *   loop one callback, posted (loop.h's post: its eventfd) when the
 *   pushing round ends, so the records of one round cost one wake-up;
 *   the callback drains the queue and ends with the shard's round. No
 *   other system call.
 * - In the other thread's room: while that thread is idle (in none of
 *   its loop's callbacks) and no record is on its way to it, a half
 *   borrows its room until this round ends (struct vsxb_shard) and does
 *   what one thread's pair does, with no record and no wake-up: a DATA
 *   packet goes straight from this guest's TX buffers into the other
 *   guest's RX buffers (one copy, vsxb__sib_direct_all: all of it or
 *   none), and a change of this guest's credit reaches the other half at
 *   once (its CREDIT_UPDATE to its guest with it). Whatever the room
 *   does not allow (the other guest without the buffers or credit for
 *   the whole packet, bytes queued there, the other half not plainly
 *   established, a packet without payload) goes by record, and records
 *   go first: nothing overtakes one. A guest sees the same either way.
 * - Lifetime: the link is counted (each half, a pending MAKE, each posted
 *   wake-up) and freed by whoever lets go last; a half names the other
 *   only through the link, so a VM freed under a pair (a reload, its
 *   connections reset: RST to the other half) leaves nothing dangling.
 *   The queues are touched by the two halves' threads, or by the control
 *   thread in a world stop while those are parked; a half's state by its
 *   thread, or by the other half's in its room.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer_sib.h"

enum xrec_what { XR_MAKE, XR_OK, XR_DATA, XR_SHUT, XR_CREDIT, XR_CREDIT_REQ,
		 XR_CLOSE, XR_RST };

/* One record: what a half did, for the other half's thread. */
struct xrec {
	struct xrec *next;           /* __atomic: the producer links, the consumer reads */
	enum xrec_what what;
	unsigned flags;              /* DATA: EOM/EOR; SHUT: SHUTDOWN flags */
	uint32_t buf, fwd;           /* MAKE, OK, CREDIT: the sender's guest's */
	uint32_t len;                /* DATA: payload bytes, in @data */
	uint32_t cap;                /* bytes @data has room for */
	size_t room;                 /* DATA: how much more the sender may send */
	bool msg_open;               /* DATA: its message had bytes before */
	/* MAKE: the B half */
	struct vsxb_vm *from;        /* A's VM (may be gone: checked by serial) */
	uint64_t from_serial, from_cid;
	uint16_t type;
	uint32_t guest_port, peer_port;
	unsigned char data[];
};

#define XSIB_LINE 64                 /* a cache line: what one thread writes */

/* Records for one half: single producer (the other half's thread),
 * single consumer (this half's). @head is a consumed record (at first
 * @stub) whose next is the oldest unconsumed one. The consumer's and the
 * producer's fields sit on lines of their own. */
struct xring {
	struct xrec *head __attribute__((aligned(XSIB_LINE)));  /* consumer */
	struct xrec *tail __attribute__((aligned(XSIB_LINE)));  /* producer */
	bool armed;                  /* __atomic: a wake-up is posted or owed */
	struct xrec stub;
};

/* What vsxctl shows of the bytes in flight between the halves, counted by
 * each side's thread on a line of its own, which only it writes (__atomic
 * stores; read in a world stop): the data path shares no counter with the
 * other thread. The payload side s's guest sent that waits for the other
 * guest is tally[s].sent - tally[!s].took + tally[!s].queued (and the
 * same for the memory holding it). */
struct xsib_tally {
	size_t sent, sent_mem;       /* into records for the other side, ever */
	size_t took, took_mem;       /* out of the other side's records, ever */
	size_t queued, queued_mem;   /* the other guest's, in this half's queue */
} __attribute__((aligned(XSIB_LINE)));

/* Records side s took, given back to side !s to carry its next DATA
 * (struct xspare, one each way): a record malloc'd on one thread and freed
 * on the other costs both malloc's slow paths (another thread's arena), so
 * the one that took it hands it back instead. A queue of the same shape
 * as struct xring, the other way: side s gives (tail, @given), side !s
 * takes (head, @taken); at most XSIB_SPARE_MAX bytes of payload room wait
 * in it, and a record past that, or too small to be worth it, is freed. */
#define XSIB_SPARE_MAX (128u * 1024)
#define XSIB_SPARE_MIN 1024u

struct xspare {
	struct xrec *head __attribute__((aligned(XSIB_LINE)));  /* taker */
	size_t taken;                /* room taken, ever (the taker's) */
	struct xrec *tail __attribute__((aligned(XSIB_LINE)));  /* giver */
	size_t given;                /* room given, ever (the giver's) */
	struct xrec stub;
};

struct xsib_link;

struct xsib_end {
	struct xsib_link *l;
	unsigned side;
	struct vsxb_later w;         /* the wake-up of side @side's thread */
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
	struct xsib_tally tally[2];  /* tally[s]: side s's thread's */
	struct xspare spare[2];      /* spare[s]: what side s took, given back */
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

/* @*p += @n, by the one thread that writes @p (others read it). */
static void tally_add(size_t *p, size_t n)
{
	__atomic_store_n(p, *p + n, __ATOMIC_RELAXED);
}

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

/* The oldest unconsumed record, valid until the next pop, or NULL; the
 * one this pop let go of (the previous), if it is no stub, in *@done. */
static struct xrec *ring_pop(struct xring *q, struct xrec **done)
{
	struct xrec *h = q->head, *next = __atomic_load_n(&h->next, __ATOMIC_ACQUIRE);

	*done = NULL;
	if (!next)
		return NULL;
	q->head = next;
	if (h != &q->stub)
		*done = h;
	return next;
}

static void ring_drain(struct xring *q)
{
	struct xrec *done;

	while (ring_pop(q, &done))
		free(done);
	if (q->head != &q->stub)
		free(q->head);
	ring_init(q);
}

static void spare_init(struct xspare *sp)
{
	sp->stub.next = NULL;
	sp->head = sp->tail = &sp->stub;
	sp->taken = sp->given = 0;
}

/* On the giver's thread: @rec (taken, applied) back to the other side, or
 * freed. */
static void spare_give(struct xspare *sp, struct xrec *rec)
{
	size_t waiting = sp->given - __atomic_load_n(&sp->taken, __ATOMIC_RELAXED);

	if (rec->cap < XSIB_SPARE_MIN || waiting + rec->cap > XSIB_SPARE_MAX) {
		free(rec);
		return;
	}
	rec->next = NULL;
	__atomic_store_n(&sp->given, sp->given + rec->cap, __ATOMIC_RELAXED);
	__atomic_store_n(&sp->tail->next, rec, __ATOMIC_RELEASE);
	sp->tail = rec;
}

/* On the taker's thread: a record given back, or NULL. The queue keeps
 * the last one it let go of as its head (as struct xring does): what
 * comes out is the head before, once it has a successor. */
static struct xrec *spare_take(struct xspare *sp)
{
	for (;;) {
		struct xrec *h = sp->head, *next = __atomic_load_n(&h->next, __ATOMIC_ACQUIRE);

		if (!next)
			return NULL;
		sp->head = next;
		if (h != &sp->stub) {
			__atomic_store_n(&sp->taken, sp->taken + h->cap, __ATOMIC_RELAXED);
			return h;
		}
	}
}

static void spare_drain(struct xspare *sp)
{
	struct xrec *rec;

	while ((rec = spare_take(sp)))
		free(rec);
	if (sp->head != &sp->stub)
		free(sp->head);
	spare_init(sp);
}

static void xsib_run(void *arg);

static struct xsib_link *link_new(struct vsxb_vm *a, struct vsxb_vm *b)
{
	/* (its counters' and queues' lines aligned: not calloc's 16 bytes) */
	struct xsib_link *l = aligned_alloc(XSIB_LINE, sizeof(*l));
	unsigned s;

	if (!l)
		return NULL;
	memset(l, 0, sizeof(*l));
	l->r = a->r;
	l->refs = 2;         /* the A half, and the MAKE that becomes the B half */
	l->vm[0] = a;
	l->vm[1] = b;
	for (s = 0; s < 2; s++) {
		ring_init(&l->ring[s]);
		spare_init(&l->spare[s]);
		l->serial[s] = l->vm[s]->serial;
		l->sh[s] = l->vm[s]->sh;
		l->end[s] = (struct xsib_end){
			.l = l, .side = s,
			.w = { .loop = l->sh[s]->loop, .fn = xsib_run, .arg = &l->end[s] },
		};
	}
	return l;
}

static void link_put(struct xsib_link *l)
{
	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL))
		return;
	ring_drain(&l->ring[0]);
	ring_drain(&l->ring[1]);
	spare_drain(&l->spare[0]);
	spare_drain(&l->spare[1]);
	free(l);
}

static struct xrec *rec_new(enum xrec_what what, size_t len)
{
	/* the payload is written over at once: only the record is cleared */
	struct xrec *rec = malloc(sizeof(*rec) + len);

	if (rec) {
		memset(rec, 0, sizeof(*rec));
		rec->what = what;
		rec->cap = (uint32_t)len;
	}
	return rec;
}

/* A DATA record of @len payload bytes from @c's half to the other
 * (side @to): one side @to gave back if it has the room, else a new one. */
static struct xrec *rec_data(struct conn *c, struct xsib_link *l, unsigned to, size_t len)
{
	struct xrec *rec = spare_take(&l->spare[to]);
	uint32_t cap;

	if (!rec || rec->cap < len) {
		free(rec);
		return rec_new(XR_DATA, len);
	}
	cap = rec->cap;
	memset(rec, 0, sizeof(*rec));
	rec->what = XR_DATA;
	rec->cap = cap;
	c->vm->st.sib_reused++;
	return rec;
}

/* Side @to's thread owes a drain of its queue and a round: a wake-up,
 * posted when this round ends (vsxb__shard_posts), unless one is owed or
 * posted already (the queue is armed): the records the round pushes
 * meanwhile ride on the same one. @from: side !@to's VM, counted (NULL:
 * not counted, it may be gone). link_send: @rec for that thread, then
 * the wake-up. */
static void link_wake(struct xsib_link *l, unsigned to, struct vsxb_vm *from)
{
	if (__atomic_exchange_n(&l->ring[to].armed, true, __ATOMIC_SEQ_CST))
		return;
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
	/* records to side @to come from side !@to's thread (or the control
	 * thread in a stop, which posts as the stop ends) */
	vsxb__shard_post_later(l->sh[!to], &l->end[to].w);
	if (from)
		from->st.sib_wakes++;
}

static void link_send(struct xsib_link *l, unsigned to, struct xrec *rec,
		      struct vsxb_vm *from)
{
	ring_push(&l->ring[to], rec);
	link_wake(l, to, from);
}

/* What @c's half does reaches the other half (unless it is gone). */
static void xsib_send(struct conn *c, struct xrec *rec)
{
	struct xsib_peer *x = xp(c);

	if (x->detached) {
		free(rec);
		return;
	}
	link_send(x->l, !x->side, rec, c->vm);
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

/* This guest's credit for the other half (CREDIT: only sent when it has
 * not heard it, xsib_credit_changed). */
static void xsib_send_credit(struct conn *c, enum xrec_what what)
{
	struct xsib_peer *x = xp(c);
	struct xrec *rec;

	rec = rec_new(what, 0);
	if (!rec) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
		return;
	}
	rec->buf = x->sbuf = c->cr.peer_buf_alloc;
	rec->fwd = x->sfwd = c->cr.peer_fwd_cnt;
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
		link_send(x->l, !x->side, rst, c->vm);
}

/* @c's queue holds @bytes in @mem: the other half's view follows. */
static void xsib_publish_as(struct conn *c, size_t bytes, size_t mem)
{
	struct xsib_peer *x = xp(c);
	struct xsib_tally *t;

	if (!x->l || (x->qbytes == bytes && x->qmem == mem))
		return;
	t = &x->l->tally[x->side];
	__atomic_store_n(&t->queued, bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&t->queued_mem, mem, __ATOMIC_RELAXED);
	x->qbytes = bytes;
	x->qmem = mem;
}

static void xsib_publish(struct conn *c)
{
	xsib_publish_as(c, c->q.bytes, c->q.mem);
}

/* ---- In the other half's room ---- */

/* The other half, worked on here in its thread's room (struct
 * vsxb_shard: lent until this round ends), as peer_sibling.c works on
 * its other half on one thread; NULL when that thread is in a callback,
 * records are on their way to it (they go first, in order, applied by
 * that thread), or the other half is not plainly established (what a lent
 * room does not do is its own thread's). What the work there schedules for
 * that guest goes as this round ends, which also wakes that thread if its
 * VM needs more (round.c: round_lent). */
static struct conn *xsib_lend(struct conn *c)
{
	struct xsib_peer *x = xp(c);
	struct xsib_link *l = x->l;
	unsigned to = !x->side;
	struct conn *o;

	if (!l || x->detached || !vsxb__shard_borrow(c->vm->sh, l->sh[to]))
		return NULL;
	if (l->ring[to].head->next)
		return NULL;
	o = l->half[to];
	if (!o || o->dead || o->draining || o->state != VSXB_CONN_ESTABLISHED ||
	    o->ctrl || o->shut_pending || xp(o)->detached)
		return NULL;
	return o;
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
	c->cr.buf_alloc = vsxb__sib_cap(vm);
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	vsxb__conn_ctrl(c, C_REQUEST);
	return;
refuse: {
	struct xrec *rst = rec_new(XR_RST, 0);

	/* without memory for the answer, A's half never hears: it is
	 * reset when its guest gives up (or its VM goes) */
	if (rst)
		link_send(l, 0, rst, NULL);  /* (B may be gone) */
	link_put(l);
	}
}

/* ---- On a half's thread: the other half's records ---- */

static void xsib_apply(struct xsib_link *l, unsigned s, struct xrec *rec)
{
	struct conn *c = l->half[s];
	struct iovec iov;

	if (rec->what == XR_MAKE) {
		xsib_make(l, rec);
		return;
	}
	if (rec->what == XR_DATA) {
		tally_add(&l->tally[s].took, rec->len);
		tally_add(&l->tally[s].took_mem, sizeof(*rec) + rec->cap);
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
		if (vsxb__sib_deliver(c, &iov, 1, rec->len, rec->flags, rec->room,
				      rec->msg_open) == -ENOMEM) {
			vsxb__log(c->vm->r, VSXB_LOG_ERR, "vm %s: connection %llu: out "
				 "of memory", c->vm->name, (unsigned long long)c->id);
			vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
			vsxb__conn_reset(c, false);
		}
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
		vsxb__conn_peer_reset(c, vsxb__sib_pending(c));
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
	struct xrec *rec, *done;

	/* disarmed first: a record pushed from now on posts again */
	__atomic_store_n(&q->armed, false, __ATOMIC_SEQ_CST);
	while ((rec = ring_pop(q, &done))) {
		if (done)
			spare_give(&l->spare[e->side], done);
		xsib_apply(l, e->side, rec);
	}
	if (l->half[e->side])
		xsib_publish(l->half[e->side]);
	link_put(l);
	vsxb__round_owe(sh);
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
	c->cr.buf_alloc = vsxb__sib_cap(vm);
	c->cr.peer_buf_alloc = h->buf_alloc;
	c->cr.peer_fwd_cnt = h->fwd_cnt;
	m->buf = xp(c)->sbuf = h->buf_alloc;
	m->fwd = xp(c)->sfwd = h->fwd_cnt;
	m->from = vm;
	m->from_serial = vm->serial;
	m->from_cid = vm->cid;
	m->type = h->type;
	m->guest_port = h->dst_port;
	m->peer_port = h->src_port;
	link_send(l, 1, m, vm);
}

/* ---- The hooks ---- */

static void xsib_rw(struct conn *a, struct iovec *iov, unsigned n, uint32_t len,
		    unsigned flags)
{
	int32_t room = (int32_t)(a->cr.rx_limit - a->cr.rx_cnt);
	struct xrec *rec;

	if (xp(a)->detached)
		return; /* nobody will read it */
	if (len) {
		/* the other thread idle: one copy into its guest's buffers,
		 * no record, no wake-up */
		struct conn *b = xsib_lend(a);

		if (b && vsxb__sib_direct_all(b, iov, n, len, flags)) {
			a->vm->st.sib_lent++;
			goto credit;
		}
	}
	if (len || ((flags & VIRTIO_VSOCK_SEQ_EOM) && a->msg_open)) {
		rec = rec_data(a, xp(a)->l, !xp(a)->side, len);
		if (!rec) {
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
		vsxu_iov_to_buf(iov, n, 0, rec->data, len);
		if (!xp(a)->detached) {
			struct xsib_tally *t = &xp(a)->l->tally[xp(a)->side];

			tally_add(&t->sent, len);
			tally_add(&t->sent_mem, sizeof(*rec) + rec->cap);
		}
		xsib_send(a, rec);
	}
credit:
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
	struct xsib_peer *x = xp(c);
	struct conn *o;

	if (vsxb__sib_pending(c))
		vsxb__conn_schedule(c);
	/* the other half has heard these already */
	if (x->sbuf == c->cr.peer_buf_alloc && x->sfwd == c->cr.peer_fwd_cnt)
		return;
	/* the other thread idle: the other half hears it at once, as
	 * XR_CREDIT would tell it, and its guest gets the CREDIT_UPDATE it
	 * may be waiting for without a wake-up; with bytes queued for that
	 * guest (its emission's) by a record */
	o = xsib_lend(c);
	if (o && !vsxb__sib_pending(o)) {
		xp(o)->xbuf = x->sbuf = c->cr.peer_buf_alloc;
		xp(o)->xfwd = x->sfwd = c->cr.peer_fwd_cnt;
		vsxb__conn_credit_check(o);
		c->vm->st.sib_lent++;
		return;
	}
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

	*fwd = known ? x->xfwd : c->cr.last_fwd_sent;
	*buf = known ? vsxb_u32min(x->xbuf, c->cr.buf_alloc) : c->cr.last_buf_sent;
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
 * the other half's queue as it last published it (struct xsib_tally). */
static const struct txq *xsib_queue(const struct conn *c)
{
	struct xsib_peer *x = xp(c);

	const struct xsib_tally *me, *other;

	if (!x->l)
		return NULL;
	me = &x->l->tally[x->side];
	other = &x->l->tally[!x->side];
	x->shown.bytes = __atomic_load_n(&me->sent, __ATOMIC_RELAXED) -
			 __atomic_load_n(&other->took, __ATOMIC_RELAXED) +
			 __atomic_load_n(&other->queued, __ATOMIC_RELAXED);
	x->shown.mem = __atomic_load_n(&me->sent_mem, __ATOMIC_RELAXED) -
		       __atomic_load_n(&other->took_mem, __ATOMIC_RELAXED) +
		       __atomic_load_n(&other->queued_mem, __ATOMIC_RELAXED);
	return &x->shown;
}

/* The half is killed: the other hears (if it has not yet), the link lets
 * go of it. */
static void xsib_release(struct conn *c)
{
	struct xsib_peer *x = xp(c);

	if (!x->l)
		return;
	xsib_detach(c);
	xsib_publish_as(c, 0, 0);    /* freed with the connection */
	x->l->half[x->side] = NULL;
	link_put(x->l);
	x->l = NULL;
}

/* ---- Kept across a live handoff (restart.c) ---- */

/* At a freeze (both threads parked): this half names the other, and keeps
 * what waits for its guest: its queue, then the DATA records the other
 * half sent that this thread has not applied yet, as xsib_apply would
 * deliver them (each packet's end kept). CREDIT records are superseded
 * by the other half's own counters, which its record keeps; a
 * CREDIT_REQUEST on the way is one owed to this guest (k->ctrl); a pair
 * with anything else on the way (an OK, SHUTDOWN, RST, CLOSE) is not
 * kept. */
static int xsib_keep(const struct conn *c, struct vsxb_conn_keep *k)
{
	const struct xsib_peer *x = xp(c);
	const struct xring *q;
	const struct conn *p;
	const struct xrec *rec;
	size_t more = 0;
	unsigned more_ends = 0, eom = x->s.eom_pending;
	bool takes = vsxb__conn_takes_data(c);
	int err;

	if (!x->l || x->detached || c->state != VSXB_CONN_ESTABLISHED)
		return 0;
	p = x->l->half[!x->side];
	if (!p || p->dead || p->state != VSXB_CONN_ESTABLISHED || xp(p)->detached)
		return 0;
	q = &x->l->ring[x->side];
	for (rec = q->head->next; rec; rec = rec->next) {
		if (rec->what == XR_DATA) {
			more += rec->len;
			more_ends++;
		} else if (rec->what != XR_CREDIT && rec->what != XR_CREDIT_REQ) {
			return 0;
		}
	}
	err = vsxb__sib_keep_q(c, k, more, more_ends);
	if (err)
		return err;
	for (rec = q->head->next; rec; rec = rec->next) {
		uint8_t *dst = (uint8_t *)k->q;
		struct vsxb_msg_end *ends = (struct vsxb_msg_end *)k->ends;
		uint32_t last = k->nends ? ends[k->nends - 1].end : 0;
		unsigned fl = rec->flags & (VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR);

		if (rec->what == XR_CREDIT_REQ)
			k->ctrl |= C_CREDIT_REQUEST;
		if (rec->what != XR_DATA || !takes)
			continue;   /* (nobody would read it) */
		if (!rec->len) {
			/* an empty packet ends the open message, if any */
			if (c->type != VIRTIO_VSOCK_TYPE_SEQPACKET ||
			    !(fl & VIRTIO_VSOCK_SEQ_EOM) || !rec->msg_open)
				continue;
			if (k->qlen > last)
				ends[k->nends++] = (struct vsxb_msg_end){ k->qlen, fl };
			else if (!k->qlen && !eom)
				eom = fl;
			continue;
		}
		memcpy(dst + k->qlen, rec->data, rec->len);
		k->qlen += rec->len;
		if (c->type == VIRTIO_VSOCK_TYPE_STREAM)
			fl = VIRTIO_VSOCK_SEQ_EOM;   /* the packet's end */
		if (fl & VIRTIO_VSOCK_SEQ_EOM)
			ends[k->nends++] = (struct vsxb_msg_end){ k->qlen, fl };
	}
	vsxb__sib_keep_twin(k, p, eom);
	return 0;
}

struct conn *vsxb__xsib_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k)
{
	return vsxb__sib_half_new(vm, k, &xsib_ops);
}

int vsxb__xsib_join(struct conn *a, struct conn *b, unsigned eom_a, unsigned eom_b)
{
	struct xsib_link *l = link_new(a->vm, b->vm);   /* a reference per half */
	struct conn *half[2] = { a, b };
	unsigned eom[2] = { eom_a, eom_b };

	if (!l)
		return -ENOMEM;
	for (unsigned s = 0; s < 2; s++) {
		struct xsib_peer *x = xp(half[s]);
		const struct conn *o = half[!s];

		l->half[s] = half[s];
		x->l = l;
		x->side = s;
		x->s.eom_pending = eom[s];
		/* each guest's values as its half has them: nothing is on
		 * the way between the two any more */
		x->xknown = true;
		x->xbuf = o->cr.peer_buf_alloc;
		x->xfwd = o->cr.peer_fwd_cnt;
		x->sbuf = half[s]->cr.peer_buf_alloc;
		x->sfwd = half[s]->cr.peer_fwd_cnt;
	}
	xsib_publish(a);
	xsib_publish(b);
	return 0;
}

static bool xsib_end(struct conn *c, enum vsxb_end how)
{
	switch (how) {
	case VSXB_END_CLOSE:
		xsib_close(c);
		break;
	case VSXB_END_RESET:
		xsib_reset(c);
		break;
	case VSXB_END_GONE:
		xsib_gone(c);
		break;
	case VSXB_END_RELEASE:
		xsib_release(c);
		break;
	}
	return true;
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
	/* End */
	.end = xsib_end,
	/* Control */
	.queue = xsib_queue,
	.keep = xsib_keep,
};
