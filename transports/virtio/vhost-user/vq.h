/*
 * Guest memory and split virtqueues, device side.
 *
 * Guest memory is the table from VHOST_USER_SET_MEM_TABLE: regions mapped
 * with mmap from the fds QEMU passed. Every address the guest gives is
 * translated through it with bounds checks; nothing the guest wrote is
 * trusted (indices, lengths, flags, chain links are all checked).
 *
 * A popped element is a descriptor chain translated into iovecs that point
 * straight into mapped guest memory: device-readable (out) iovecs first,
 * then device-writable (in) ones. Used entries are published in batches
 * (vsxu_vq_push then one vsxu_vq_flush), and the guest is notified only when
 * VIRTIO_RING_F_EVENT_IDX says it asked to be.
 */
#ifndef VSXU_VQ_H
#define VSXU_VQ_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define VSXU_MEM_MAX_REGIONS 8
/* Longest chain we accept (direct or indirect): a guest chain longer than
 * this, or with a loop, breaks the queue. */
#define VSXU_VQ_MAX_IOV 64
#define VSXU_VQ_MAX_SIZE 32768

struct vsxu_mem_region {
	uint64_t gpa;        /* guest physical address */
	uint64_t size;
	uint64_t uva;        /* QEMU's virtual address (for ring addresses) */
	void *host;          /* where gpa maps here */
	void *map;           /* mmap'ed base (host - mmap_offset) */
	uint64_t map_len;
	int guard;           /* its memguard.h slot, 0: none */
};

struct vsxu_mem {
	unsigned n;
	struct vsxu_mem_region r[VSXU_MEM_MAX_REGIONS];
};

/* Host pointer for [gpa, gpa+len) if it lies inside one region, else NULL. */
void *vsxu_mem_gpa(const struct vsxu_mem *m, uint64_t gpa, uint64_t len);
/* Same for QEMU virtual addresses (vring addresses are given as those). */
void *vsxu_mem_uva(const struct vsxu_mem *m, uint64_t uva, uint64_t len);
/* Unmap every region; the table becomes empty. */
void vsxu_mem_unmap(struct vsxu_mem *m);
/* A region's file shrank under us (memguard.h): its pages are zeros now. */
bool vsxu_mem_faulted(const struct vsxu_mem *m);

struct vring_desc;
struct vring_avail;
struct vring_used;

struct vsxu_vq {
	/* Set by vhost-user messages */
	unsigned num;                 /* ring size, power of two */
	struct vring_desc *desc;      /* host pointers into guest memory */
	struct vring_avail *avail;
	struct vring_used *used;
	uint16_t last_avail;          /* next avail entry we will pop */
	uint16_t used_idx;            /* our shadow of used->idx */
	int kick_fd, call_fd, err_fd; /* -1 when absent */
	bool enabled;                 /* SET_VRING_ENABLE */
	bool started;                 /* kick fd received, not stopped */
	bool event_idx;               /* VIRTIO_RING_F_EVENT_IDX negotiated */
	bool indirect;                /* VIRTIO_RING_F_INDIRECT_DESC negotiated */
	bool notify_on_empty;         /* VIRTIO_F_NOTIFY_ON_EMPTY negotiated */
	bool notify_off;              /* vsxu_vq_set_notify(false) in force */
	bool broken;                  /* the guest broke a rule: ignore it */
	uint16_t signalled_used;      /* used idx at our last notification */
	bool signalled_valid;
	unsigned pending;             /* used entries pushed but not flushed */
	const struct vsxu_mem *mem;
};

struct vsxu_vq_elem {
	uint16_t head;
	unsigned out_num, in_num;            /* iov[0..out_num) then in */
	uint32_t out_len, in_len;            /* total bytes each way */
	struct iovec iov[VSXU_VQ_MAX_IOV];
};

/* The queue can be used: started, enabled, rings mapped, not broken. */
bool vsxu_vq_ready(const struct vsxu_vq *vq);

/*
 * Take the next available chain. Returns 1 and fills @e, 0 when the ring is
 * empty, or -EFAULT / -EINVAL when the guest broke a rule (bad address or
 * length, loop, chain too long, bad index); the queue is then marked broken
 * (its err fd, if any, is signalled) and returns -EIO from then on. A queue
 * that is not ready returns 0.
 *
 * When it finds the ring empty and notifications are on (the default, see
 * vsxu_vq_set_notify), pop re-arms them (avail_event with EVENT_IDX) and
 * looks again, so a caller that pops until 0 is always kicked for the next
 * buffer; it need not call vsxu_vq_set_notify at all.
 */
int vsxu_vq_pop(struct vsxu_vq *vq, struct vsxu_vq_elem *e);

/* Give back the last @n popped chains without using them. */
void vsxu_vq_unpop(struct vsxu_vq *vq, unsigned n);

/* Queue a used entry for @e with @written bytes; visible after flush. */
void vsxu_vq_push(struct vsxu_vq *vq, const struct vsxu_vq_elem *e, uint32_t written);

/* Publish pushed entries and notify the guest (call fd) if it wants it. */
void vsxu_vq_flush(struct vsxu_vq *vq);

/* Number of chains the guest has made available and we have not popped. */
unsigned vsxu_vq_avail(const struct vsxu_vq *vq);

/*
 * Ask the guest to kick (true) or not (false) when it adds buffers; with
 * EVENT_IDX this writes avail_event = last_avail, without it the used ring's
 * VRING_USED_F_NO_NOTIFY flag. After enabling, callers re-check
 * vsxu_vq_avail() to close the race with a buffer added meanwhile. While off,
 * pop does not re-arm notifications.
 */
void vsxu_vq_set_notify(struct vsxu_vq *vq, bool on);

/* Reset to the just-created state (keeps nothing; closes no fds). */
void vsxu_vq_reset(struct vsxu_vq *vq);

#endif
