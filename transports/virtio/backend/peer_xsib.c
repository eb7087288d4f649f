/*
 * The cross-thread sibling peer: siblings two threads serve (VMs of one
 * group on different shards, struct vsxb_shard; a pair on one shard is
 * peer_sibling.c's). The pair is two connections, one in each VM, joined
 * by a Unix socketpair of the guests' type (xsib_ops, peer kind
 * "sibling"). The kernel's socket buffers are the bounded hand-off
 * between the threads, and each half has the host peer's data path
 * (peer_host.h: this file calls peer_host.c, never the reverse): one copy
 * from A's guest into the pair, one from the pair into B's guest. Only
 * the setup and the credit cross threads, as posted messages (struct
 * xsib_msg) naming a VM and a connection id, checked on arrival:
 * - A's REQUEST makes the A half, CONNECTING with its end of the pair,
 *   and posts MAKE to B's thread, which makes the B half and sends B's
 *   guest the REQUEST; B's guest's RESPONSE posts OK back, and A answers
 *   its guest. A refusal there (no listener, a limit, B gone) closes B's
 *   end: A reads EOF while connecting and resets its guest.
 * - Credit end to end, as between siblings of one thread (peer_sibling.c):
 *   each half's buf_alloc is the other guest's buf_alloc, capped by
 *   vsxb__sib_cap(); a guest that changes its buffer has its half post BUF
 *   to the other. vsxd holds at most that window per half (plus what the
 *   socketpair holds).
 * - Ends: a SHUTDOWN shuts the pair's direction, an RST closes the half's
 *   end; the other half sees EOF, as a host program's socket would show.
 *   A half still CONNECTING that reads EOF was refused (close_refuses).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_host.h"

/* xsib_ops: the other half of the pair, on another thread (hp() first) */
struct xsib_peer {
	struct host_peer h;
	struct vsxb_vm *xvm;         /* NULL once that VM is gone */
	uint64_t xserial;            /* its serial */
	uint64_t xid;                /* its id; 0: not known yet */
	uint32_t xbuf;               /* this guest's buf_alloc, as last told it */
};

static const struct vsxb_peer_ops xsib_ops;

static struct xsib_peer *xp(const struct conn *c)
{
	return c->priv;
}

enum xsib_what { XS_MAKE, XS_OK, XS_BUF };

struct xsib_msg {
	enum xsib_what what;
	struct vsxb_router *r;
	struct vsxb_vm *vm;          /* whose thread runs it; it may be gone */
	uint64_t serial;             /* ... and be another VM at that address */
	uint64_t id;                 /* OK, BUF: the half there */
	struct vsxb_vm *from;        /* the sending half's VM (may be gone:
				        only its cid is read, in MAKE) ... */
	uint64_t from_cid, from_serial;
	uint64_t from_id;            /* ... and id */
	uint32_t buf;                /* the sending half's guest's buf_alloc */
	/* MAKE: the B half */
	int fd;                      /* its end of the pair */
	uint16_t type;
	uint32_t guest_port, peer_port;
};

void vsxb__xsib_forget(struct vsxb_router *r, const struct vsxb_vm *gone)
{
	struct eng_list *n, *m;

	for (n = r->vms.next; n != &r->vms; n = n->next) {
		struct vsxb_vm *vm = eng_container_of(n, struct vsxb_vm, node);

		for (m = vm->conns.next; m != &vm->conns; m = m->next) {
			struct conn *c = eng_container_of(m, struct conn, node);

			if (c->ops == &xsib_ops && xp(c)->xvm == gone)
				xp(c)->xvm = NULL;
		}
	}
}

static void xsib_run(void *arg);

static int xsib_post(struct xsib_msg *m)
{
	const struct vsx_loop *l;
	struct xsib_msg *copy;
	int rc;

	if (!m->vm)
		return -ENOENT; /* the other VM is gone; its end of the pair too */
	l = m->vm->sh->loop;
	copy = malloc(sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	*copy = *m;
	rc = l->post(l->ctx, xsib_run, copy);
	if (rc < 0)
		free(copy);
	return rc;
}

static uint32_t xsib_window(const struct vsxb_vm *vm, uint32_t guest_buf)
{
	return eng_u32min(guest_buf ? guest_buf : 1, vsxb__sib_cap(vm));
}

/* On B's thread: the B half, and B's guest asked. */
static void xsib_make(struct xsib_msg *m)
{
	struct vsxb_vm *vm = m->vm;
	struct conn *c;
	int lim;

	/* as vsxb__sib_request refuses; a paused VM gets the REQUEST at cont.
	 * A gone (it cannot go while this thread runs): nobody to answer */
	if (!vsxb__vm_listed(m->r, m->from, m->from_serial) ||
	    !vm->live || vm->broken || vm->freeing ||
	    (m->type == VIRTIO_VSOCK_TYPE_SEQPACKET && !vm->seqpacket) ||
	    vsxb__conn_find(vm, m->guest_port, m->from_cid, m->peer_port)) {
		close(m->fd);
		return;
	}
	lim = vsxb__conn_limit(vm, 1);
	if (lim) {
		vsxb__refuse(vm, m->type, m->guest_port, m->from_cid, m->peer_port, false,
			    VSXB_REASON_LIMIT, 0, lim);
		close(m->fd);
		return;
	}
	c = vsxb__conn_new(vm, &xsib_ops, m->type, m->guest_port, m->from_cid,
			  m->peer_port);
	if (!c) {
		close(m->fd);
		return;
	}
	hp(c)->fd = -1;
	hp(c)->close_refuses = true;
	xp(c)->xvm = m->from;        /* listed: forgotten when it goes */
	xp(c)->xserial = m->from_serial;
	xp(c)->xid = m->from_id;
	c->buf_alloc = xsib_window(vm, m->buf);
	if (vsxb__host_attach(c, m->fd) < 0) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_kill(c);   /* closes the fd */
		return;
	}
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	vsxb__conn_ctrl(c, C_REQUEST);
}

/* On A's thread: B's guest accepted. */
static void xsib_ok(struct xsib_msg *m)
{
	struct conn *c = vsxb__vm_conn(m->vm, m->id);

	if (!c || c->state != VSXB_CONN_CONNECTING || hp(c)->fd < 0)
		return; /* gone: B reads EOF from the pair */
	xp(c)->xid = m->from_id;
	c->buf_alloc = xsib_window(c->vm, m->buf);
	vsxb__host_accept(c);
}

static void xsib_run(void *arg)
{
	struct xsib_msg *m = arg;
	struct conn *c;

	if (!vsxb__vm_listed(m->r, m->vm, m->serial)) {
		if (m->what == XS_MAKE)
			close(m->fd);
		free(m);
		return;
	}
	switch (m->what) {
	case XS_MAKE:
		xsib_make(m);
		break;
	case XS_OK:
		xsib_ok(m);
		break;
	case XS_BUF:
		c = vsxb__vm_conn(m->vm, m->id);
		if (c && c->buf_alloc != xsib_window(m->vm, m->buf))
			vsxb__conn_set_buffer(c, xsib_window(m->vm, m->buf));
		break;
	}
	vsxb__round(m->vm->sh);
	free(m);
}

/* A's REQUEST cannot go on: refused, and the guest told. */
static void xsib_refuse(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h, int err)
{
	vsxb__refuse(vm, h->type, h->src_port, h->dst_cid, h->dst_port, true,
		    VSXB_REASON_ERROR, err, 0);
	vsxb__orphan_rst(vm, h);
}

/* (the router checked A's connection limits) */
void vsxb__xsib_request(struct vsxb_vm *vm, struct vsxb_vm *to,
		       const struct virtio_vsock_hdr *h)
{
	bool seq = h->type == VIRTIO_VSOCK_TYPE_SEQPACKET;
	struct xsib_msg m;
	struct conn *c;
	int sp[2];

	if (socketpair(AF_UNIX, (seq ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_NONBLOCK |
		       SOCK_CLOEXEC, 0, sp) < 0) {
		xsib_refuse(vm, h, errno);
		return;
	}
	c = vsxb__conn_new(vm, &xsib_ops, h->type, h->src_port, h->dst_cid, h->dst_port);
	if (!c) {
		close(sp[0]);
		close(sp[1]);
		xsib_refuse(vm, h, ENOMEM);
		return;
	}
	hp(c)->fd = -1;
	hp(c)->close_refuses = true;
	xp(c)->xvm = to;
	xp(c)->xserial = to->serial;
	c->guest_initiated = true;
	c->peer_buf_alloc = h->buf_alloc;
	c->peer_fwd_cnt = h->fwd_cnt;
	xp(c)->xbuf = h->buf_alloc;
	c->buf_alloc = xsib_window(vm, VSXB_DEFAULT_BUF_ALLOC);
	if (vsxb__host_attach(c, sp[0]) < 0) {
		close(sp[1]);
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
		return;
	}
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	m = (struct xsib_msg){ .what = XS_MAKE, .r = vm->r, .vm = to, .serial = to->serial,
			       .from = vm, .from_cid = vm->cid, .from_serial = vm->serial,
			       .from_id = c->id,
			       .buf = h->buf_alloc, .fd = sp[1], .type = h->type,
			       .guest_port = h->dst_port, .peer_port = h->src_port };
	if (xsib_post(&m) < 0) {
		close(sp[1]);
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
	}
}

/* The B half's guest accepted: tell the A half, with this guest's buffer. */
static int xsib_established(struct conn *c)
{
	struct xsib_msg m = {
		.what = XS_OK, .r = c->vm->r, .vm = xp(c)->xvm, .serial = xp(c)->xserial,
		.id = xp(c)->xid, .from = c->vm, .from_id = c->id, .buf = c->peer_buf_alloc,
	};
	int rc = vsxb__host_established(c);

	if (rc < 0)
		return rc;
	xp(c)->xbuf = c->peer_buf_alloc;
	if (xsib_post(&m) < 0) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		return -ENOMEM;
	}
	return 0;
}

/* This guest's buffer changed: the other half's window follows. */
static void xsib_credit_changed(struct conn *c)
{
	struct xsib_msg m = {
		.what = XS_BUF, .r = c->vm->r, .vm = xp(c)->xvm, .serial = xp(c)->xserial,
		.id = xp(c)->xid, .from = c->vm, .from_id = c->id, .buf = c->peer_buf_alloc,
	};

	vsxb__host_sync(c);
	if (c->dead || !xp(c)->xid || c->peer_buf_alloc == xp(c)->xbuf)
		return;
	if (xsib_post(&m) == 0)
		xp(c)->xbuf = c->peer_buf_alloc;
}

/* A sibling on another thread: the host data path over a socketpair,
 * with the setup and the credit told across. */
static const struct vsxb_peer_ops xsib_ops = {
	.name = "sibling",
	.priv_size = sizeof(struct xsib_peer),
	HOST_PEER_HOOKS,
	.credit_changed = xsib_credit_changed,
	.established = xsib_established,
};
