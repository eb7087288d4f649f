/*
 * The rings (ring.c): a VM's virtqueues (vhost-user/vq.h) as vsock
 * packets. Called by the connection API (conn.c) and the device
 * (device.c); it calls nothing of the backend. Their state (the queues,
 * the chains popped, the slices of RX payload) is ring.c's alone, behind
 * vm->ring: a caller names a chain by its place in the batch popped and
 * sees at most the bytes it may read or fill. No peer includes it for its
 * calls: a peer fills the guest's RX buffers through the connection API
 * (vsxb__rx_reserve and vsxb__rx_commit, conn.h) and takes guest payload through its table
 * (ops->rw), never seeing a chain.
 */
#ifndef VSXB_RING_H
#define VSXB_RING_H

#include "backend-int.h"
#include "vhost-user/vq.h"

/* A VM's ring state (lifecycle.c makes and frees it with the VM):
 * NULL when out of memory. */
struct vsxb_ring *vsxb__ring_new(void);
void vsxb__ring_free(struct vsxb_ring *g);

/* ---- RX: buffers the guest posted for packets to it ---- */

/* Pop one RX chain (the batch's first): 1, 0 (none, or the VM is paused), -EIO (the
 * device is gone or broken; *@why, when not NULL, says why the device
 * must break: the caller breaks it). */
int vsxb__ring_rx_pop(struct vsxb_vm *vm, const char **why);
/* Pop RX chains while their payload room (each at most one packet's,
 * VSOCK_MAX_PKT_PAYLOAD) is below @want, at most @max chains and
 * VSXB_IOV_MAX slices: the payload parts are *@iov (*@niov of them, the
 * rings' storage, valid until the next pop), each chain's room goes to
 * @cap, their sum to *@room. Returns the
 * chains popped (0: none), -EIO as vsxb__ring_rx_pop. @whole: less room
 * than @want gives every chain back and returns -ENOBUFS, or -EMSGSIZE
 * when the ring could never hold @want (its size, @max or the slices ran
 * out). */
int vsxb__ring_rx_gather(struct vsxb_vm *vm, size_t want, unsigned max, bool whole,
			 uint32_t *cap, struct iovec **iov, unsigned *niov, size_t *room,
			 const char **why);
/* RX chain @i of those popped carries @h (CPU order; its h->len payload bytes are
 * already in the chain): the header is written and the chain pushed, to
 * be published by vsxb__ring_rx_publish. */
void vsxb__ring_rx_push(struct vsxb_vm *vm, unsigned i, struct virtio_vsock_hdr *h);
/* Give the last @n chains popped back to the ring, unused. */
void vsxb__ring_rx_unpop(struct vsxb_vm *vm, unsigned n);
/* Publish the RX used entries pushed since the last call (one flush, the
 * guest notified as the ring asks): once per round (conn.c). */
void vsxb__ring_rx_publish(struct vsxb_vm *vm);

/* ---- TX: the guest's packets ---- */

/* Pop up to VSXB_TX_BATCH chains: how many, or -EIO (*@why: the device
 * must break). Kicks are off meanwhile. */
int vsxb__ring_tx_pop(struct vsxb_vm *vm, const char **why);
/* What the guest wrote in TX chain @i of those popped: @c's pieces (at most
 * VSXB_CHAIN_IOV, the rings' storage: valid until the chains are done),
 * their count and bytes. */
#define VSXB_CHAIN_IOV VSXU_VQ_MAX_IOV
struct vsxb_chain {
	const struct iovec *iov;
	unsigned n;
	uint32_t len;
};
void vsxb__ring_tx_chain(const struct vsxb_vm *vm, unsigned i, struct vsxb_chain *c);
/* The @n chains popped were handled: all pushed, published with one flush. */
void vsxb__ring_tx_done(struct vsxb_vm *vm, unsigned n);
/* Kicks on again; true when chains came meanwhile (fenced). */
bool vsxb__ring_tx_rearm(struct vsxb_vm *vm);
/* The TX ring is set up and has chains (@sleeping: kicks on first). */
bool vsxb__ring_tx_ready(struct vsxb_vm *vm, bool sleeping);
/* Forget the TX batch (its payload is in guest memory: nothing to free). */
void vsxb__batch_drop(struct vsxb_vm *vm);

/* ---- Event queue ---- */

/* Put event @id into one event-queue buffer and publish it: 1 sent, 0 no
 * buffer yet, -EIO (*@why: the device must break). */
int vsxb__ring_event(struct vsxb_vm *vm, uint32_t id, const char **why);

#endif
