/*
 * vhost-user device side (QEMU's docs/interop/vhost-user.rst), for one
 * device with a fixed number of queues. Owns no event loop (see loop.h).
 *
 * The server listens on a Unix socket path; QEMU connects as the front-end
 * (one at a time; a second connection is refused while one is live). It
 * negotiates features (VERSION_1, EVENT_IDX, INDIRECT_DESC,
 * PROTOCOL_FEATURES, plus the device's own) and protocol features
 * (REPLY_ACK, CONFIG), maps the memory table, sets up the rings, and tells
 * the device through vsx_vu_ops when queues are kicked, when the device is
 * started and when it must drop everything (disconnect, reset, ring stop).
 *
 * A malformed or unknown message gets a failure reply where the protocol
 * has one (REPLY_ACK) and is otherwise ignored; a message that breaks the
 * framing closes the front-end connection. Neither affects any other device.
 */
#ifndef VSX_VHOST_USER_H
#define VSX_VHOST_USER_H

#include <stdint.h>

#include "loop.h"
#include "vq.h"

#define VSX_VU_MAX_QUEUES 3

struct vsx_vu;

struct vsx_vu_ops {
	uint64_t features;        /* device-specific feature bits offered */
	unsigned nqueues;
	/* Read @len bytes of config space at @off into @buf. */
	int (*get_config)(void *dev, uint32_t off, void *buf, uint32_t len);
	/* Queue @q has work: the guest kicked it, or it just started. */
	void (*kick)(void *dev, unsigned q);
	/* All queues are started and enabled: the device is live. */
	void (*start)(void *dev);
	/* The device stops: front-end gone, reset, or a ring stopped. Every
	 * guest-visible state (connections) must be dropped; the queues are
	 * not usable until the next start. */
	void (*stop)(void *dev);
	/* Optional: a one-line log message (no newline) worth an operator's
	 * attention, e.g. why a front-end or guest was cut off. */
	void (*log)(void *dev, const char *msg);
};

/*
 * Listen on @path (created mode 0600; an existing stale socket is replaced,
 * anything else is -EADDRINUSE). The device @dev is passed to every op.
 * Returns 0 and *@out (freed with vsx_vu_free), or a negative errno.
 */
int vsx_vu_new(const char *path, const struct vsx_loop *loop,
	       const struct vsx_vu_ops *ops, void *dev, struct vsx_vu **out);

/* Close the front-end connection and the listener, unlink @path, unmap. */
void vsx_vu_free(struct vsx_vu *vu);

/* The device's queue @q (0 <= q < nqueues). */
struct vsx_vq *vsx_vu_queue(struct vsx_vu *vu, unsigned q);

/* Features negotiated with the front-end (valid after start). */
uint64_t vsx_vu_features(const struct vsx_vu *vu);

/* A front-end is connected. */
int vsx_vu_connected(const struct vsx_vu *vu);

#endif
