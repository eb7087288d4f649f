/*
 * The sibling peer's receiving half (peer_sibling.c), for the kind that
 * relays siblings across threads (peer_xsib.c): how another guest's
 * payload reaches this guest, straight into its RX buffers or through the
 * half's queue, with the message ends (EOM, EOR) it carried. Included by
 * peer_sibling.c and peer_xsib.c, which sits above it in the call graph.
 */
#ifndef VSXB_PEER_SIB_H
#define VSXB_PEER_SIB_H

#include "peer.h"

/* c->priv of a sibling half; a kind built on it puts it first in its own
 * (peer_xsib.c leaves @other NULL: its other half is another thread's). */
struct sib_peer {
	struct conn *other;          /* the other VM's half, NULL once unlinked */
	unsigned eom_pending;        /* seq: an empty EOM/EOR still owed */
};

/*
 * @c's queue keeps where each of the other guest's packets ended, STREAM
 * too, and emits no packet across that end, as a direct copy does not: a
 * Linux receiver credits its fwd_cnt a whole packet at a time, so bytes
 * its program read from a packet merged with later ones would stay
 * uncredited, and a sender that needs exactly its window (backend.test
 * 8f: the 16-byte hello merged into the first 3732-byte packet, the last
 * 16 bytes of 2 MiB waiting 20 s for the reader) stalls. Called on a new
 * half, its queue still empty.
 */
void vsxb__sib_keep_bounds(struct conn *c);
/* @len bytes of the other guest's packet (@flags: EOM/EOR) for @b's guest:
 * into its RX buffers while nothing waits for them and credit lasts, the
 * rest into @b's queue (@room: how much more the sender may send). An
 * empty packet with EOM ends the open message. @msg_open: the sender's
 * message had bytes before this packet. 0, or -ENOMEM (the rest lost: the
 * caller resets a half). */
int vsxb__sib_deliver(struct conn *b, const struct iovec *iov, unsigned n,
		      uint32_t len, unsigned flags, size_t room, bool msg_open);
/* All of @len bytes of the other guest's packet (@flags: EOM/EOR, @len
 * not 0) straight into @b's guest's RX buffers, as one thread's pair
 * copies them, or none: false when @b's guest would not take them all now
 * (its credit, its buffers, something waiting before them) or nobody
 * reads them. What a lent room allows (struct vsxb_shard): peer_xsib.c. */
bool vsxb__sib_direct_all(struct conn *b, const struct iovec *iov, unsigned n,
			  uint32_t len, unsigned flags);
/* The hooks of the receiving half (struct vsxb_peer_ops, backend-int.h) */
int vsxb__sib_emit(struct conn *b);
bool vsxb__sib_pending(const struct conn *c);
/* A kept half (ops->keep): @c's queue into k->q and k->ends (malloc'ed),
 * with room for @more bytes and @more_ends ends after it. -ENOMEM. */
int vsxb__sib_keep_q(const struct conn *c, struct vsxb_conn_keep *k, size_t more,
		     unsigned more_ends);
/* A kept half (@k's addresses) made again on @vm with @ops, its queue
 * keeping packet ends; NULL: no memory. */
struct conn *vsxb__sib_half_new(struct vsxb_vm *vm, const struct vsxb_conn_keep *k,
				const struct vsxb_peer_ops *ops);
/* @k names @twin as its other half. */
void vsxb__sib_keep_twin(struct vsxb_conn_keep *k, const struct conn *twin,
			 unsigned eom_pending);

#endif
