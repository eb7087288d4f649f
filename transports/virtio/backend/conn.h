/*
 * The backend's connection API (conn.c, conn_events.c): what the peers,
 * the device and the router call. It calls nothing above it but the
 * peers through their tables (struct vsxb_peer_ops, backend-int.h); below
 * it, the rings (ring.h), which only conn.c and device.c call: a peer
 * fills the guest's buffers the engine reserves (vsxb__rx_reserve,
 * vsxb__rx_commit).
 */
#ifndef VSXB_CONN_H
#define VSXB_CONN_H

#include "ring.h"

/* conn_events.c: logging, connection events, refusals, limits */
void vsxb__log(struct vsxb_router *r, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A guest-caused warning, rate limited per VM session. */
void vsxb__vm_warn(struct vsxb_vm *vm, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Record why @c ends (enum vsxb_conn_reason; @err a positive errno or 0).
 * The first cause wins, except that a hard one (a timeout, an error, a
 * limit, control-reset, vm-gone, protocol) overrides a graceful one; a
 * guest or peer RST never does. Reported when @c is freed (conn_kill). */
void vsxb__conn_why(struct conn *c, int reason, int err);
/* @c just became ESTABLISHED: report OPEN. */
void vsxb__conn_opened(struct conn *c);
/* @c was made again from a live handoff's or restart's record: OPEN
 * reported, not counted (the earlier process counted it). */
void vsxb__conn_reopened(struct conn *c);
/* @c ends (vsxb__conn_kill): CLOSE, RESET or REFUSE by its cause. */
void vsxb__conn_ended(struct conn *c);
/* A limit that forbids @n more connections in @vm (enum vsxb_limit_kind),
 * counted in the router's stats when not VSXB_LIMIT_NONE. */
int vsxb__conn_limit(struct vsxb_vm *vm, unsigned n);
/* A refused attempt that has no connection (id 0): REFUSE event. */
void vsxb__refuse(struct vsxb_vm *vm, uint16_t type, uint32_t guest_port,
		 uint64_t peer_cid, uint32_t peer_port, bool guest_initiated,
		 int reason, int err, int limit);
/* buf_alloc allowed by max_conn_memory (@bytes or less). */
uint32_t vsxb__buf_cap(const struct vsxb_router *r, uint32_t bytes);
/* The most a sibling pair may have in flight each way (the guests' own
 * buffers decide below it): VSXB_SIBLING_WINDOW_MAX, or tx-buffer-size
 * when larger, capped as vsxb__buf_cap does. */
uint32_t vsxb__sib_cap(const struct vsxb_vm *vm);
/* What vsxctl shows of @c. */
void vsxb__conn_info(const struct conn *c, struct vsxb_conn_info *ci);

/* conn.c: connections */
/* A connection of @vm whose peer is @ops (c->priv zeroed), or NULL. */
struct conn *vsxb__conn_new(struct vsxb_vm *vm, const struct vsxb_peer_ops *ops,
			   uint16_t type, uint32_t guest_port, uint64_t peer_cid,
			   uint32_t peer_port);
struct conn *vsxb__conn_find(struct vsxb_vm *vm, uint32_t guest_port,
			    uint64_t peer_cid, uint32_t peer_port);
/* @vm's connection @id, or NULL (none, or a dead one). */
struct conn *vsxb__vm_conn(struct vsxb_vm *vm, uint64_t id);
/* @vm is still the router's VM of @serial: listed in r->vms, and not
 * another VM allocated where a freed one was (a posted message names a VM
 * by both). On the control thread, or on a shard's thread: the list
 * changes only while that thread is parked. */
bool vsxb__vm_listed(const struct vsxb_router *r, const struct vsxb_vm *vm,
		     uint64_t serial);
void vsxb__conn_unhash(struct conn *c);
/* Free the connection at the end of the round (ops->end VSXB_END_RELEASE:
 * the peer lets go of its side without telling it). */
void vsxb__conn_kill(struct conn *c);
/* Abort: RST to the guest (unless @quiet), the peer side dropped and told
 * (ops->end VSXB_END_RESET). */
void vsxb__conn_reset(struct conn *c, bool quiet);
/* @c's peer went away (the other half of a sibling pair): RST to the
 * guest once the data queued for it is out (@data_left: the peer has
 * some, its ops->pending), bounded by the linger time; a connection
 * still CONNECTING is refused at once. */
void vsxb__conn_peer_reset(struct conn *c, bool data_left);
/* @c's guest still reads what its peer sends (no RST, no SHUTDOWN(RCV)). */
bool vsxb__conn_takes_data(const struct conn *c);
void vsxb__conn_ctrl(struct conn *c, unsigned bits);
void vsxb__conn_shutdown(struct conn *c, unsigned flags);
/* Put @c on its VM's RX schedule (or serve it right away). */
void vsxb__conn_schedule(struct conn *c);
void vsxb__conn_timer(struct conn *c, enum conn_timer_kind kind, unsigned ms);
/* What is left of @c's timer, in ms (at least 1 while one runs; @full
 * for one held until the VM resumes; 0: none). */
unsigned vsxb__conn_timer_left(const struct conn *c, unsigned full);
void vsxb__conn_credit_check(struct conn *c);
/* The guest side of @c is over (its RST, or ours is out): ops->end
 * VSXB_END_GONE, or killed. */
void vsxb__conn_gone(struct conn *c);
/* The guest shut down both ways: answer RST (as Linux does); the peer
 * side drains meanwhile. */
void vsxb__conn_answer_rst(struct conn *c);
/* The peer accepted a connection the guest asked for: ESTABLISHED,
 * RESPONSE to the guest, OPEN reported. */
void vsxb__conn_accept(struct conn *c);
/* A sibling's packet for @c may go straight into its guest's RX buffers
 * now, in the order its emission would give: nothing of @c waits that
 * must go first, and no connection of the VM waits for buffers. */
bool vsxb__conn_rx_direct_ok(const struct conn *c);
/* Append payload for the peer or the guest to @holder's queue (@room: how
 * much more may follow); counted in the VM's stats. 0; -ENOMEM: nothing
 * queued; -ENOBUFS: queued, but @holder went above max_conn_memory and
 * was reset. */
int vsxb__conn_enqueue(struct conn *holder, const struct iovec *iov, unsigned n,
		       size_t len, size_t room, unsigned flags);
/* @holder's queue grew: false (and @holder reset, reason limit) when its
 * memory is above the router's max_conn_memory. */
bool vsxb__conn_mem_ok(struct conn *holder);
void vsxb__set_tag(char *dst, const char *tag);
/* Peer -> guest, in two steps: the engine reserves guest RX buffers
 * (vsxb__rx_reserve), the peer reads or copies its data into their
 * payload parts, and the engine sends what it put there
 * (vsxb__rx_commit). Between the two nothing else touches the VM's RX
 * ring. */
struct vsxb_rx {
	struct iovec *iov;           /* the buffers' payload parts, in order */
	unsigned niov;
	size_t room;                 /* what they hold: at most the bytes asked for */
	unsigned n;                  /* buffers reserved */
	uint32_t cap[VSXB_RX_BATCH]; /* each one's payload room */
};
/* Reserve RX buffers of @c's guest whose payload room adds up to @want
 * bytes (at most @max buffers, each one packet of at most 64 KiB). With
 * @whole, all of @want or nothing. 0; -ENOBUFS when there is no buffer
 * (or, @whole, not enough yet); -EMSGSIZE (@whole) when the ring can
 * never hold @want. */
int vsxb__rx_reserve(struct conn *c, size_t want, unsigned max, bool whole,
		     struct vsxb_rx *rx);
/* The peer put @len bytes (at most rx->room) into @rx's buffers: one RW
 * packet per buffer filled, the last with @flags (SEQ_EOM/EOR); the
 * buffers left empty go back to the ring (@len 0: all of them). */
void vsxb__rx_commit(struct conn *c, struct vsxb_rx *rx, size_t len, unsigned flags);
/* One RW packet without payload to @c's guest (a message end, @flags);
 * false without an RX buffer. */
bool vsxb__rx_empty(struct conn *c, unsigned flags);
/* An RST for a guest packet that has no connection (CPU order). */
void vsxb__orphan_rst(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h);

/* A header-only packet to the guest, @h as is (an orphan's RST); false
 * without an RX buffer. */
bool vsxb__rx_hdr(struct vsxb_vm *vm, struct virtio_vsock_hdr *h);
/* Control packet @op (a SHUTDOWN's @flags) from @c to its guest, with its
 * credit; false without an RX buffer, and then the guest learnt nothing. */
bool vsxb__rx_ctrl(struct conn *c, uint16_t op, uint32_t flags);
/* The guest may not know @c's latest fwd_cnt or buf_alloc. */
bool vsxb__conn_credit_news(const struct conn *c);

/* conn.c: VMs and what the rounds owe */
void vsxb__vm_touch(struct vsxb_vm *vm);
/* @vm, worked on in a lent room (struct vsxb_shard), needs a round of its
 * own thread: a ring to break, a pending list, connections to free, a
 * memory fault. The borrower's round then wakes that thread. */
bool vsxb__vm_lent_owed(const struct vsxb_vm *vm);
/* The round of @sh, owed by one of its loop's callbacks: the loop runs
 * it once that callback returns (loop.h's queue), or the round now
 * running does. How a peer's or a timer's callback ends, calling no
 * round itself. */
void vsxb__round_owe(struct vsxb_shard *sh);

/* round.c: the rounds, above the peers (no peer calls them) */
/* End of a processing round: RX scheduling, used-ring flushes, deferred
 * frees, for every VM of @sh touched; then the rooms of other shards the
 * round borrowed (vsxb__shard_borrow) given back, what their VMs owe
 * sent and their RX used entries published. An entry point that is no
 * peer's or timer's callback calls it last. */
void vsxb__round(struct vsxb_shard *sh);
/* vsxb__round as the loop runs it (struct vsxu_work's cb, @arg a shard;
 * vsxb_router_new puts it in r->round). */
void vsxb__round_cb(void *arg);
/* Every shard's round: backend.h's calls, on the control thread, with the
 * world stopped. */
void vsxb__round_all(struct vsxb_router *r);
/* vsxb__round's work for one VM. */
void vsxb__vm_round(struct vsxb_vm *vm);
/* What the VM owes its guest into its RX buffers while they last: the
 * RSTs for packets without a connection, then the pending connections
 * round-robin (the round does it, and device.c after each TX batch, so
 * a batch's RSTs never outgrow VSXB_ORPHAN_MAX). Published at the end
 * of the round. */
void vsxb__vm_rx_run(struct vsxb_vm *vm);

/* conn.c: the device as a whole */
void vsxb__vm_broken(struct vsxb_vm *vm, const char *why);
void vsxb__vm_drop_all(struct vsxb_vm *vm, bool tell_guest);
/* While paused, timers that wait for the guest (connect, linger) are
 * held; released, they start over with their whole time. */
void vsxb__vm_timers_hold(struct vsxb_vm *vm);
void vsxb__vm_timers_release(struct vsxb_vm *vm);

#endif
