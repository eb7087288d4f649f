/*
 * The state record's entries made from the live objects (state_live.h):
 * a VM's from its device's state, a connection's from what the backend
 * shows of it or, at a freeze, whole. Shared by the file descriptor store
 * (fdstore.c) and the live handoff (handoff.c); the record itself is
 * state.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "state.h"
#include "state_live.h"
#include "backend/backend.h"
#include "vhost-user/vhost_user.h"

int vsxd_state_vm_fill(struct vsxd_state_vm *v, const struct vsxu_vu_state *st,
		       int (*store)(void *arg, const char *name, int fd), void *arg)
{
	struct stat rs[VSXU_MEM_MAX_REGIONS];
	char nm[VSXD_STATE_NAME_MAX + 1];   /* (a copy: @v's names are written) */
	int err;

	snprintf(nm, sizeof(nm), "%s", v->name);

	snprintf(v->conn, sizeof(v->conn), "vm.%s.conn", nm);
	v->features = st->features;
	v->protocol_features = st->protocol_features;
	v->paused = st->paused;
	v->nregions = st->nregions;
	v->nqueues = st->nqueues;
	err = store(arg, v->conn, st->conn_fd);
	for (unsigned i = 0; i < st->nregions && !err; i++) {
		const struct vsxu_vu_region_state *r = &st->region[i];
		struct vsxd_state_region *g = &v->region[i];
		int same = -1;

		g->gpa = r->gpa;
		g->size = r->size;
		g->uva = r->uva;
		g->mmap_offset = r->mmap_offset;
		/* QEMU maps several regions from one file: the store keeps a
		 * file once, so they share its name */
		if (fstat(r->fd, &rs[i]) == 0) {
			for (unsigned j = 0; j < i && same < 0; j++)
				if (rs[j].st_dev == rs[i].st_dev && rs[j].st_ino == rs[i].st_ino)
					same = (int)j;
		} else {
			rs[i].st_dev = 0;
			rs[i].st_ino = 0;
		}
		if (same >= 0) {
			strcpy(g->fd, v->region[same].fd);
			continue;
		}
		snprintf(g->fd, sizeof(g->fd), "vm.%s.mem%u", nm, i);
		err = store(arg, g->fd, r->fd);
	}
	for (unsigned i = 0; i < st->nqueues && !err; i++) {
		const struct vsxu_vu_queue_state *q = &st->queue[i];
		struct vsxd_state_queue *g = &v->queue[i];

		g->index = q->index;
		g->enabled = q->enabled;
		g->num = q->num;
		g->desc = q->desc;
		g->avail = q->avail;
		g->used = q->used;
		g->base = q->base;
		g->kick[0] = '\0';
		g->call[0] = '\0';
		/* a paused VM's stopped ring has none */
		if (q->kick_fd >= 0) {
			snprintf(g->kick, sizeof(g->kick), "vm.%s.kick%u", nm, q->index);
			err = store(arg, g->kick, q->kick_fd);
		}
		if (!err && q->call_fd >= 0) {
			snprintf(g->call, sizeof(g->call), "vm.%s.call%u", nm, q->index);
			err = store(arg, g->call, q->call_fd);
		}
	}
	return err;
}

void vsxd_state_conn_from_info(struct vsxd_state_conn *sc,
			       const struct vsxb_conn_info *ci)
{
	memset(sc, 0, sizeof(*sc));
	sc->id = ci->id;
	sc->guest_cid = ci->guest_cid;
	sc->peer_cid = ci->peer_cid;
	sc->guest_port = ci->guest_port;
	sc->peer_port = ci->peer_port;
	sc->type = ci->type == 2 ? 2 : 1;
	sc->state = ci->state >= VSXB_CONN_CONNECTING && ci->state <= VSXB_CONN_CLOSING ?
		    (unsigned)ci->state : VSXB_CONN_ESTABLISHED;
	sc->flags = ci->guest_initiated ? VSXD_CONN_GUEST_INITIATED : 0;
	sc->guest_shut = ci->guest_shut & 3;
	sc->host_shut = ci->host_shut & 3;
	sc->peer = !strcmp(ci->peer_kind, "sibling") ? VSXD_PEER_SIBLING :
		   !strcmp(ci->peer_kind, "vsock") ? VSXD_PEER_VSOCK : VSXD_PEER_HOST;
	sc->cr.buf_alloc = ci->buf_alloc;
	sc->cr.fwd_cnt = ci->fwd_cnt;
	sc->cr.peer_buf_alloc = ci->peer_buf_alloc;
	sc->cr.peer_fwd_cnt = ci->peer_fwd_cnt;
	sc->to_guest = ci->to_guest_bytes;
	sc->from_guest = ci->from_guest_bytes;
	/* a tag is printable ASCII (backend.h), cut to what a str holds */
	for (size_t i = 0; ci->tag && ci->tag[i] && i < sizeof(sc->tag) - 1; i++)
		sc->tag[i] = ci->tag[i] >= 0x20 && ci->tag[i] <= 0x7e ? ci->tag[i] : '?';
}

/* The bytes @k holds for its host socket into @b. */
static int conn_bytes(const struct vsxb_conn_keep *k, struct vsxd_state_bytes *b)
{
	if (k->qlen) {
		b->data = malloc(k->qlen);
		if (!b->data)
			return -ENOMEM;
		memcpy(b->data, k->q, k->qlen);
		b->len = k->qlen;
	}
	if (k->nends) {
		b->ends = calloc(k->nends, sizeof(*b->ends));
		if (!b->ends)
			return -ENOMEM;
		for (unsigned i = 0; i < k->nends; i++)
			b->ends[i] = (struct vsxd_state_end){ k->ends[i].end, k->ends[i].flags };
		b->nends = k->nends;
	}
	return 0;
}

int vsxd_state_conn_whole(struct vsxd_state_conn *c, const struct vsxb_conn_keep *k)
{
	vsxd_state_conn_from_info(c, k->ci);
	if (k->fd < 0 && !k->sibling && !(k->host_flags & VSXB_KEEP_HOST_LINGER))
		return 0;  /* ends in the next process */
	c->flags |= VSXD_CONN_WHOLE |
		    (k->advertised ? VSXD_CONN_ADVERTISED : 0) |
		    (k->credit_req_sent ? VSXD_CONN_CREDIT_REQ_SENT : 0) |
		    (k->msg_open ? VSXD_CONN_MSG_OPEN : 0) |
		    (k->host_flags & VSXB_KEEP_HOST_EOF ? VSXD_CONN_HOST_EOF : 0) |
		    (k->host_flags & VSXB_KEEP_HOST_WR_SHUT ? VSXD_CONN_HOST_WR_SHUT : 0) |
		    (k->host_flags & VSXB_KEEP_HOST_WR_DEAD ? VSXD_CONN_HOST_WR_DEAD : 0);
	c->state = (unsigned)k->state;
	if (k->host_flags & VSXB_KEEP_HOST_HYBRID) {
		/* a hybrid program's "OK" owed: its connect timeout runs on */
		c->timer = VSXD_TIMER_CONNECT;
		c->timer_ms = k->timer_ms;
	} else if (k->host_flags & VSXB_KEEP_HOST_DRAIN) {
		/* what its guest sent still goes to the socket: the drain
		 * runs on */
		c->timer = VSXD_TIMER_DRAIN;
		c->timer_ms = k->timer_ms;
	} else if (k->host_flags & VSXB_KEEP_HOST_LINGER) {
		/* shut down both ways: the guest's RST awaited */
		c->timer = VSXD_TIMER_LINGER;
		c->timer_ms = k->timer_ms;
	}
	c->guest_shut = k->guest_shut & 3;
	c->host_shut = k->host_shut & 3;
	c->shut_pending = k->shut_pending & 3;
	c->ctrl = k->ctrl & 0x3f;
	c->peer = k->vsock ? VSXD_PEER_VSOCK : VSXD_PEER_HOST;
	c->cr = k->cr;
	/* (an unknown one, from a later backend, is no reason here) */
	if (k->why > 0 && k->why < VSXB_REASON_COUNT) {
		c->why = (unsigned)k->why;
		c->why_limit = k->why_limit > 0 && k->why_limit <= 255 ? (unsigned)k->why_limit : 0;
		c->why_err = k->why_err > 0 && k->why_err <= 4095 ? (uint32_t)k->why_err : 0;
	}
	if (k->sibling) {
		/* its twin's record holds the rest of the pair; the bytes
		 * here are those for this half's guest */
		c->peer = VSXD_PEER_SIBLING;
		snprintf(c->twin_vm, sizeof(c->twin_vm), "%s", k->twin_vm);
		c->twin_id = k->twin_id;
		c->eom_pending = k->eom_pending & 3;
		return conn_bytes(k, &c->to_guest_q);
	}
	/* (a lingering one whose program's socket is closed has none) */
	if (k->fd >= 0)
		snprintf(c->host_fd, sizeof(c->host_fd), "conn.%llu.host",
			 (unsigned long long)k->id);
	return conn_bytes(k, &c->to_host_q);
}
