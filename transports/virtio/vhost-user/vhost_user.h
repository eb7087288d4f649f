/*
 * vhost-user device side (QEMU's docs/interop/vhost-user.rst), for one
 * device with a fixed number of queues. Owns no event loop (see loop.h).
 *
 * The server listens on a Unix socket path; QEMU connects as the front-end
 * (one at a time; a second connection is refused while one is live). It
 * negotiates features (VERSION_1, EVENT_IDX, INDIRECT_DESC, NOTIFY_ON_EMPTY,
 * PROTOCOL_FEATURES, plus the device's own) and protocol features
 * (REPLY_ACK, CONFIG, RESET_DEVICE), maps the memory table, sets up the
 * rings, and tells the device through vsxu_vu_ops when queues are kicked,
 * when the device is started and when it must drop everything (disconnect,
 * reset, ring stop).
 *
 * The engine's side of it, as QEMU 7.2 drives it: start comes once rx and
 * tx are mapped, kicked and enabled (the event queue is never handed over:
 * QEMU keeps it); kick then follows for each ready queue. Elements popped
 * point into guest memory: use them before returning to the loop, or at
 * least never across a SET_MEM_TABLE that drops their region. stop comes on
 * the first GET_VRING_BASE (guest reset, VM stop or shutdown), on
 * RESET_OWNER/RESET_DEVICE, and on disconnect; after a QEMU restart a new
 * connection does the whole setup again and start comes again.
 *
 * A malformed or unknown message gets a failure reply where the protocol
 * has one (REPLY_ACK) and is otherwise ignored; a message that breaks the
 * framing closes the front-end connection. Neither affects any other device.
 */
#ifndef VSX_VHOST_USER_H
#define VSX_VHOST_USER_H

#include <stdint.h>
#include <sys/types.h>

#include "loop.h"
#include "memguard.h"
#include "vq.h"

#define VSXU_VU_MAX_QUEUES 3

struct vsxu_vu;

/* What a start continues (vsxu_vu_ops.start). */
enum vsxu_vu_start {
	VSXU_VU_START_NEW,      /* a new session: the first start, a guest reset
				* (rings back at index 0), renegotiated features */
	VSXU_VU_START_RESUMED,  /* every ring restarted exactly where the last,
				* resumable, stop left it (QEMU stop / cont) */
	VSXU_VU_START_BAD,      /* a ring restarted elsewhere: neither (logged) */
};

struct vsxu_vu_ops {
	uint64_t features;        /* device-specific feature bits offered */
	unsigned nqueues;
	/* Optional: queues 0..min_queues-1 must be started before start().
	 * The front-end decides which queues it sets up: QEMU's
	 * vhost-user-vsock hands only rx and tx (0, 1) to the back-end and
	 * keeps the event queue (2) itself. */
	unsigned min_queues;
	/* Read @len bytes of config space at @off into @buf. */
	int (*get_config)(void *dev, uint32_t off, void *buf, uint32_t len);
	/* Queue @q has work: the guest kicked it, or it just became usable
	 * (right after start, or re-enabled while live). Only called while
	 * live and vsxu_vq_ready(q). */
	void (*kick)(void *dev, unsigned q);
	/* The device is live: the memory table is mapped, every queue the
	 * front-end started (SET_VRING_KICK) is mapped and enabled, and at
	 * least min_queues (and one) are. kick follows for each ready queue.
	 * Queues the front-end never set up stay !vsxu_vq_ready. @how says
	 * whether this continues the session a resumable stop paused. */
	void (*start)(void *dev, enum vsxu_vu_start how);
	/* The device stops. @resumable: a ring stopped (GET_VRING_BASE: a VM
	 * pause, or a guest reset; the next start's @how tells which), and
	 * state may be kept for the next start, which must not touch guest
	 * memory until then. Otherwise the session is over (front-end gone,
	 * RESET_OWNER / RESET_DEVICE): every guest-visible state
	 * (connections) must be dropped; this also comes after a resumable
	 * stop that no start followed. Called once per start, plus that
	 * final one. The queues are still mapped during the call: hand back
	 * each element still held (vsxu_vq_push with 0 written, or
	 * vsxu_vq_unpop) before returning; they are flushed right after, and
	 * not usable until the next start. */
	void (*stop)(void *dev, bool resumable);
	/* Optional: a one-line log message (no newline) worth an operator's
	 * attention, e.g. why a front-end or guest was cut off. */
	void (*log)(void *dev, const char *msg);
	/* Optional: while live, a message changed what vsxu_vu_get_state
	 * reports (QEMU sends SET_VRING_CALL again after the start, and may
	 * send a new memory table): whoever keeps that state for a restart
	 * reads it again. */
	void (*changed)(void *dev);
};

/*
 * Listen on @path, created with permission bits @mode (0: 0600) and group
 * @gid (VSX__GID_KEEP, util.h: the process's), both in force before the
 * socket listens; an existing stale socket is replaced, a live one is
 * -EADDRINUSE, a file of another kind -ENOTSOCK. The device @dev is passed
 * to every op. Returns 0 and *@out (freed with vsxu_vu_free), or a negative
 * errno.
 */
int vsxu_vu_new(const char *path, mode_t mode, gid_t gid, const struct vsxu_loop *loop,
	       const struct vsxu_vu_ops *ops, void *dev, struct vsxu_vu **out);

/* Close the front-end connection and the listener, unlink @path, unmap.
 * Calls no op (not even stop): the device is being torn down. */
void vsxu_vu_free(struct vsxu_vu *vu);

/* Largest ring size SET_VRING_NUM accepts (a power of two up to
 * VSXU_VQ_MAX_SIZE, the default). -EINVAL otherwise. */
int vsxu_vu_set_queue_max(struct vsxu_vu *vu, unsigned max);

/* Did the file behind guest memory shrink under us (memguard.h)? Its
 * pages read as zeros now: the device is to be dropped. Asked every
 * round: inline, and only a load while no SIGBUS was ever absorbed. */
bool vsxu_vu__mem_faulted(const struct vsxu_vu *vu);

static inline bool vsxu_vu_mem_faulted(const struct vsxu_vu *vu)
{
	return vsxu_memguard_any() && vsxu_vu__mem_faulted(vu);
}

/* The device's queue @q (0 <= q < nqueues). */
struct vsxu_vq *vsxu_vu_queue(struct vsxu_vu *vu, unsigned q);

/* Features negotiated with the front-end (valid after start). */
uint64_t vsxu_vu_features(const struct vsxu_vu *vu);

/* A front-end is connected. */
int vsxu_vu_connected(const struct vsxu_vu *vu);

/* ---- Restarts (vhost_user_state.c) ----
 *
 * QEMU cannot reconnect a vhost-user-vsock device, so a backend process
 * that dies takes the device with it, unless someone (systemd's file
 * descriptor store) kept its descriptors: the front-end connection, the
 * guest memory files, the kick and call eventfds. With them and this
 * record of what was negotiated, a new process adopts the device on the
 * same connection; QEMU resends nothing and notices nothing.
 */
struct vsxu_vu_region_state {
	uint64_t gpa, size, uva, mmap_offset;
	int fd;                       /* the file mapped */
};

struct vsxu_vu_queue_state {
	unsigned index, num;
	bool enabled;
	uint64_t desc, avail, used;   /* the front-end's addresses (uva) */
	int kick_fd, call_fd;         /* eventfds; call_fd -1: none; kick_fd
				       * -1 in a paused device's rings */
	unsigned base;                /* paused: the index GET_VRING_BASE
				       * returned (0 otherwise) */
};

struct vsxu_vu_state {
	uint64_t features, protocol_features;
	int conn_fd;                  /* the front-end's connection */
	bool paused;                  /* stopped resumably by the front-end
				       * (QEMU stop): the rings are where
				       * GET_VRING_BASE left them */
	unsigned nregions;
	struct vsxu_vu_region_state region[VSXU_MEM_MAX_REGIONS];
	unsigned nqueues;             /* the started queues; paused: the
				       * stopped ones */
	struct vsxu_vu_queue_state queue[VSXU_VU_MAX_QUEUES];
};

/*
 * The live device's state, or a paused one's (@out->paused: every ring
 * the front-end stopped with GET_VRING_BASE, none started, the memory
 * table still mapped; the front-end sets the rings up again at cont). The
 * descriptors are @vu's own (not duplicated: valid while it keeps them).
 * -ENOTCONN: no device (no front-end, or not started); -EAGAIN: one
 * between states (its rings half stopped, or being set up again after a
 * pause: what the front-end already sent would be lost).
 */
int vsxu_vu_get_state(const struct vsxu_vu *vu, struct vsxu_vu_state *out);

/*
 * Serve the device @s describes, whose front-end is already connected
 * (@s->conn_fd) and has set it up in another process: map the memory,
 * take the rings where they are, watch the connection and the kicks, and
 * start (ops->start, VSXU_VU_START_NEW: nothing of the old process's
 * connections is known here; then a kick per queue). Where a ring
 * resumes: its used index, for both the next chain to take and the next
 * used entry: chains the old process took and never gave back are taken
 * again (a device that completes chains in order, as the vsock device
 * does, loses none and completes none twice).
 *
 * A paused state (@s->paused) is adopted paused: the memory mapped, the
 * rings placed where they stopped (their base, size and addresses, as the
 * front-end's cont will set them again), no kick watched, no start: the
 * device goes on at the front-end's next start as it would have in the
 * old process (ops->start, VSXU_VU_START_RESUMED for a cont, NEW for a
 * guest reset). A paused state with a started ring (a kick) is refused.
 *
 * Everything is checked first: each descriptor's kind (a Unix stream
 * socket, regular files covering their regions, eventfds), the regions
 * (no overlap), the features (offered ones only), the rings (sizes up to
 * the queue maximum, inside guest memory, aligned). @vu takes every
 * descriptor of @s whatever the result; on failure they are all closed
 * (the front-end sees its back-end go), a log line says why, and @vu is
 * as it was: listening, no front-end. -EBUSY: @vu has a front-end.
 */
int vsxu_vu_adopt(struct vsxu_vu *vu, const struct vsxu_vu_state *s);

/* Close every descriptor of @s (each once: two slots may share one). */
void vsxu_vu_state_close(const struct vsxu_vu_state *s);

#endif
