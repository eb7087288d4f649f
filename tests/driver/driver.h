/*
 * The in-process test driver: plays QEMU (the vhost-user front-end) and the
 * guest's virtio-vsock driver against any vhost-user-vsock backend, over a
 * real Unix socket, with guest memory in a shared memfd and split
 * virtqueues laid out as a Linux 6.1 guest does (RX buffers: a 44-byte
 * header descriptor and a 4096-byte payload descriptor).
 *
 * It is synchronous and single-threaded: run the backend in another thread
 * or process. Every call returns 0/a count or a negative errno.
 */
#ifndef VSX_TEST_DRIVER_H
#define VSX_TEST_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "backend/vsock_wire.h"

struct drv;

struct drv_opts {
	unsigned queue_size;     /* 0: 256 */
	uint64_t mem_size;       /* 0: 64 MiB */
	bool no_event_idx;       /* do not negotiate VIRTIO_RING_F_EVENT_IDX */
	bool no_seqpacket;       /* do not negotiate VIRTIO_VSOCK_F_SEQPACKET */
	unsigned rx_buf_size;    /* 0: 4096, as Linux */
	bool no_indirect;        /* do not negotiate VIRTIO_RING_F_INDIRECT_DESC
				    (with it, multi-descriptor chains go in
				    indirect tables, as Linux does) */
	bool no_event_queue;     /* set up rx and tx only, as QEMU does (its
				    vhost-user-vsock keeps the event queue) */
	bool desc_top;           /* descriptor tables at the top of guest
				    memory, above everything else (a VMM
				    that shrinks the file cuts them off and
				    leaves the rest) */
	bool rx_one_desc;        /* RX buffers are one device-writable
				    descriptor of 44 + rx_buf_size bytes, header
				    and payload together: what Debian's
				    6.1.0-57 guest kernel posts (skb-based
				    virtio-vsock, 3776 bytes: rx_buf_size 3732) */
};

/*
 * Guest memory: one memfd shared as two vhost-user regions (its two
 * halves), guest physical addresses from DRV_GPA_BASE; "QEMU" virtual
 * addresses are the driver's own mapping. Headers passed to and from the
 * driver are in wire byte order (little-endian), as the guest sees them.
 */
#define DRV_GPA_BASE 0x40000000ull

/* Connect to a backend's vhost-user socket and bring the device up: features,
 * memory table, rings, kick/call eventfds, enable, RX buffers posted. */
int drv_open(const char *vhost_socket, const struct drv_opts *o, struct drv **out);
void drv_close(struct drv *d);
uint64_t drv_cid(const struct drv *d);            /* from GET_CONFIG */
uint64_t drv_features(const struct drv *d);       /* negotiated */

/* Put one packet on the TX queue (header + payload, two descriptors) and
 * kick. Blocks (polling the used ring) while the TX ring is full, up to
 * @timeout_ms. */
int drv_send(struct drv *d, const struct virtio_vsock_hdr *h,
	     const void *payload, size_t len, int timeout_ms);

/* Wait up to @timeout_ms for one packet on the RX queue; copies its header
 * and up to @max payload bytes; reposts the buffer. Returns the payload
 * length, or -ETIMEDOUT. */
int drv_recv(struct drv *d, struct virtio_vsock_hdr *h, void *payload,
	     size_t max, int timeout_ms);

/* Wait for one event on the event queue (returns the event id); -ENOTSUP
 * when the event queue is not set up (no_event_queue, or a back-end whose
 * GET_QUEUE_NUM says 2). */
int drv_recv_event(struct drv *d, uint32_t *id, int timeout_ms);

/* Hostile-guest hooks: write a raw chain of descriptors (addresses are guest
 * physical, flags as the spec) on the TX queue and kick. next[i] < n names
 * the chain's own i-th descriptor (so loops can be built); any other value
 * is written as is. The chain's first descriptor is the avail entry. */
int drv_send_raw(struct drv *d, const uint64_t *addr, const uint32_t *len,
		 const uint16_t *flags, const uint16_t *next, unsigned n);
/* The same without the kick: the chain waits on the ring until drv_kick
 * (a VMM that shrinks guest memory between the two, say). */
int drv_post_raw(struct drv *d, const uint64_t *addr, const uint32_t *len,
		 const uint16_t *flags, const uint16_t *next, unsigned n);
/* Kick queue @q; touches no guest memory. */
int drv_kick(struct drv *d, unsigned q);
/* Guest memory: physical address <-> pointer (NULL outside guest memory). */
void *drv_mem(struct drv *d, uint64_t gpa, size_t len);
/* A scratch area of guest memory the driver never uses (for raw chains,
 * indirect tables): returns its guest physical address and *@len. Its
 * middle is the boundary between the two memory regions. */
uint64_t drv_scratch(struct drv *d, size_t *len);
/* Write avail->idx of queue @q as is (no buffers behind it) and kick. */
int drv_set_avail_idx(struct drv *d, unsigned q, uint16_t idx);
/* 1 if the backend signalled queue @q's error eventfd (SET_VRING_ERR)
 * since the last call, 0 if not, negative errno. Does not wait. */
int drv_ring_error(struct drv *d, unsigned q);
/* The VM's lifecycle as QEMU drives it. drv_pause: stop/pause (rings
 * disabled, GET_VRING_BASE each); drv_resume: cont, the rings restarted
 * with the bases the back-end returned (plus @skew: a front-end that lies,
 * for bad-input tests), guest state untouched; drv_reset: the guest reset
 * its device (driver reload, system_reset): stop, fresh rings at index 0,
 * features again, buffers posted. */
int drv_pause(struct drv *d);
/* A misbehaving VMM: shrink the file behind guest memory to @size. The
 * driver must not touch guest memory afterwards (only drv_close). */
int drv_truncate_mem(struct drv *d, uint64_t size);
int drv_resume(struct drv *d, int skew);
int drv_reset(struct drv *d);
/* Send an arbitrary vhost-user message (for protocol fuzzing/bad input);
 * returns the reply payload size or a negative errno. */
int drv_vhost_msg(struct drv *d, uint32_t req, uint32_t flags, const void *payload,
		  uint32_t size, const int *fds, unsigned nfds, void *reply,
		  uint32_t reply_max);
#endif
