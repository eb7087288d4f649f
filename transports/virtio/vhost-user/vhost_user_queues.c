/*
 * The vhost-user server's queues (vhost_user.c, vhost_user-int.h): the
 * negotiated features applied to a ring, a ring's addresses placed in
 * guest memory, when the device starts (and how: new, resumed, reset),
 * stops and is reset, and the memory table cleared; with the layer's
 * log line and descriptor close, which every file of it calls (so this one
 * calls none of the others).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "acceptor.h"
#include "vhost_user-int.h"
#include "memguard.h"
#include "util.h"

/* ---- The layer's helpers ---- */

void vsxu_vu__log(struct vsxu_vu *vu, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	if (!vu->ops->log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	vu->ops->log(vu->dev, buf);
}

void vsxu_vu__close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* ---- Queues ---- */

void vsxu_vu__apply_features(struct vsxu_vu *vu, struct vsxu_vq *vq)
{
	vq->event_idx = vu->features & (1ull << VIRTIO_RING_F_EVENT_IDX);
	vq->indirect = vu->features & (1ull << VIRTIO_RING_F_INDIRECT_DESC);
	vq->notify_on_empty = vu->features & (1ull << VIRTIO_F_NOTIFY_ON_EMPTY);
}

void vsxu_vu__unwatch_kick(struct vsxu_vu *vu, struct vu_queue *q)
{
	if (q->kick_w) {
		vu->loop->unwatch(q->kick_w);
		q->kick_w = NULL;
	}
}

void vsxu_vu__queue_reset(struct vsxu_vu *vu, struct vu_queue *q)
{
	vsxu_vu__unwatch_kick(vu, q);
	vsxu_vu__close_fd(&q->vq.kick_fd);
	vsxu_vu__close_fd(&q->vq.call_fd);
	vsxu_vu__close_fd(&q->vq.err_fd);
	vsxu_vq_reset(&q->vq);
	q->vq.mem = &vu->mem;
	vsxu_vu__apply_features(vu, &q->vq);
	q->addr_set = false;
	q->desc_uva = q->avail_uva = q->used_uva = 0;
}

/* Translate the ring addresses through the memory table; the rings must
 * lie inside one region each and be aligned as the virtio spec says. */
int vsxu_vu__map_ring(struct vsxu_vu *vu, struct vu_queue *q)
{
	uint64_t num = q->vq.num;
	void *desc, *avail, *used;

	q->vq.desc = NULL;
	q->vq.avail = NULL;
	q->vq.used = NULL;
	if (!q->addr_set || !num)
		return -EINVAL;
	desc = vsxu_mem_uva(&vu->mem, q->desc_uva, 16 * num);
	avail = vsxu_mem_uva(&vu->mem, q->avail_uva, 6 + 2 * num);
	used = vsxu_mem_uva(&vu->mem, q->used_uva, 6 + 8 * num);
	if (!desc || !avail || !used)
		return -EFAULT;
	if ((uintptr_t)desc % 16 || (uintptr_t)avail % 2 || (uintptr_t)used % 4)
		return -EINVAL;
	q->vq.desc = desc;
	q->vq.avail = avail;
	q->vq.used = used;
	return 0;
}

/* Give @q its ring addresses (front-end addresses, as SET_VRING_ADDR
 * carries them), map them, and read where the used ring stands. 0, or what
 * vsxu_vu__map_ring says (@q is left with the addresses but no ring). */
int vsxu_vu__place_ring(struct vsxu_vu *vu, struct vu_queue *q, uint64_t desc,
			uint64_t avail, uint64_t used)
{
	int err;

	q->addr_set = true;
	q->desc_uva = desc;
	q->avail_uva = avail;
	q->used_uva = used;
	err = vsxu_vu__map_ring(vu, q);
	if (err)
		return err;
	q->vq.used_idx = le16toh(__atomic_load_n((uint16_t *)&q->vq.used->idx,
						 __ATOMIC_ACQUIRE));
	return 0;
}

static bool vu_can_start(struct vsxu_vu *vu)
{
	unsigned started = 0;

	if (!vu->mem.n)
		return false;
	for (unsigned i = 0; i < vu->nq; i++) {
		struct vsxu_vq *vq = &vu->q[i].vq;

		if (!vq->started) {
			if (i < vu->ops->min_queues)
				return false;
			continue;
		}
		if (!vsxu_vq_ready(vq))
			return false;
		started++;
	}
	return started > 0;
}

/*
 * After a resumable stop: is this start the same device session going on?
 * Every ring that stopped must restart with the base GET_VRING_BASE gave,
 * at the same size and addresses, with the same features: QEMU's stop/cont.
 * A guest reset restarts the rings at 0 (and usually elsewhere), or
 * renegotiates features. Anything else is neither.
 */
static enum vsxu_vu_start vu_start_how(struct vsxu_vu *vu)
{
	enum vsxu_vu_start how = VSXU_VU_START_RESUMED;

	if (!vu->paused)
		return VSXU_VU_START_NEW;
	if (vu->features != vu->stop_features)
		how = VSXU_VU_START_NEW;
	for (unsigned i = 0; i < vu->nq; i++) {
		struct vu_queue *q = &vu->q[i];
		bool same;

		if (!q->stop_valid || !q->vq.started)
			continue;
		same = q->vq.num == q->stop_num && q->desc_uva == q->stop_desc &&
		       q->avail_uva == q->stop_avail && q->used_uva == q->stop_used;
		if (q->vq.last_avail == q->stop_base && same)
			continue;
		if (q->vq.last_avail == 0) {
			if (how == VSXU_VU_START_RESUMED)
				how = VSXU_VU_START_NEW;
			continue;
		}
		vsxu_vu__log(vu, "vhost-user: ring %u restarted at index %u%s, not where it "
		       "stopped (index %u): neither a resume nor a reset", i,
		       q->vq.last_avail, same ? "" : " at other addresses", q->stop_base);
		how = VSXU_VU_START_BAD;
	}
	return how;
}

/* Start the device if it can be; when live, tell it about queue @kq (or
 * every queue if @kq < 0) that became ready. */
void vsxu_vu__update(struct vsxu_vu *vu, int kq)
{
	if (!vu->live) {
		enum vsxu_vu_start how;

		if (!vu_can_start(vu))
			return;
		how = vu_start_how(vu);
		vu->live = true;
		vu->paused = false;
		for (unsigned i = 0; i < vu->nq; i++) {
			vu->q[i].stop_valid = false;
			if (vsxu_vq_ready(&vu->q[i].vq))
				vsxu_vq_set_notify(&vu->q[i].vq, true);
		}
		if (vu->ops->start)
			vu->ops->start(vu->dev, how);
		kq = -1;
	}
	for (unsigned i = 0; i < vu->nq && vu->live; i++) {
		if (kq >= 0 && (unsigned)kq != i)
			continue;
		if (!vsxu_vq_ready(&vu->q[i].vq))
			continue;
		if (kq >= 0) /* a queue that (re)joined a live device */
			vsxu_vq_set_notify(&vu->q[i].vq, true);
		if (vu->ops->kick)
			vu->ops->kick(vu->dev, i);
	}
}

void vsxu_vu__flush_all(struct vsxu_vu *vu)
{
	for (unsigned i = 0; i < vu->nq; i++)
		vsxu_vq_flush(&vu->q[i].vq);
}

/* @resumable: the front-end stopped the rings (GET_VRING_BASE) and may
 * start them again where they were; otherwise the session is over, also
 * for a device stopped resumably before. */
void vsxu_vu__stop(struct vsxu_vu *vu, bool resumable)
{
	if (!vu->live) {
		if (!resumable && vu->paused) {
			vu->paused = false;
			if (vu->ops->stop)
				vu->ops->stop(vu->dev, false);
		}
		return;
	}
	vu->live = false;
	vu->paused = resumable;
	vu->stop_features = vu->features;
	if (vu->ops->stop)
		vu->ops->stop(vu->dev, resumable);
	vsxu_vu__flush_all(vu);
}

void vsxu_vu__mem_clear(struct vsxu_vu *vu)
{
	vsxu_mem_unmap(&vu->mem);
	for (unsigned i = 0; i < VSXU_MEM_MAX_REGIONS; i++) {
		vsxu_vu__close_fd(&vu->mem_id[i].fd);
		vu->mem_id[i] = (struct vu_region_id){ .fd = -1 };
	}
}

/* Back to the state of a fresh connection's device: no rings, no memory. */
void vsxu_vu__reset_device(struct vsxu_vu *vu)
{
	vsxu_vu__stop(vu, false);
	for (unsigned i = 0; i < vu->nq; i++)
		vsxu_vu__queue_reset(vu, &vu->q[i]);
	vsxu_vu__mem_clear(vu);
}
