/*
 * Guest memory and split virtqueues, device side (see vq.h).
 *
 * Everything in guest memory is written by an untrusted guest, concurrently
 * with us: each descriptor is copied out once and only the copy is checked
 * and used; ring indices are read once per decision. Byte order is
 * little-endian (VIRTIO_F_VERSION_1), converted wherever guest memory is read
 * or written.
 *
 * Ordering follows Linux vhost: read avail->idx, then an acquire fence
 * before the ring entries and descriptors it covers; the used entries are
 * written, then a release fence, then used->idx; a full fence separates
 * publishing used->idx from reading the guest's used_event / flags (and
 * publishing avail_event from re-reading avail->idx), because each side
 * writes one index and reads the other's.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/virtio_ring.h>

#include "memguard.h"
#include "vq.h"

/* ---- Guest memory ---- */

static const struct vsxu_mem_region *mem_find_gpa(const struct vsxu_mem *m, uint64_t gpa)
{
	for (unsigned i = 0; i < m->n; i++) {
		const struct vsxu_mem_region *r = &m->r[i];

		if (gpa >= r->gpa && gpa - r->gpa < r->size)
			return r;
	}
	return NULL;
}

void *vsxu_mem_gpa(const struct vsxu_mem *m, uint64_t gpa, uint64_t len)
{
	const struct vsxu_mem_region *r;
	uint64_t off;

	if (!m)
		return NULL;
	r = mem_find_gpa(m, gpa);
	if (!r)
		return NULL;
	off = gpa - r->gpa;
	if (len > r->size - off)
		return NULL;
	return (char *)r->host + off;
}

void *vsxu_mem_uva(const struct vsxu_mem *m, uint64_t uva, uint64_t len)
{
	if (!m)
		return NULL;
	for (unsigned i = 0; i < m->n; i++) {
		const struct vsxu_mem_region *r = &m->r[i];
		uint64_t off;

		if (uva < r->uva || uva - r->uva >= r->size)
			continue;
		off = uva - r->uva;
		if (len > r->size - off)
			return NULL;
		return (char *)r->host + off;
	}
	return NULL;
}

void vsxu_mem_unmap(struct vsxu_mem *m)
{
	for (unsigned i = 0; i < m->n; i++) {
		if (!m->r[i].map)
			continue;
		vsxu_memguard_del(m->r[i].guard);
		munmap(m->r[i].map, m->r[i].map_len);
	}
	memset(m, 0, sizeof(*m));
}

bool vsxu_mem_faulted(const struct vsxu_mem *m)
{
	if (!vsxu_memguard_any())
		return false;
	for (unsigned i = 0; i < m->n; i++) {
		if (m->r[i].map && vsxu_memguard_faulted(m->r[i].guard))
			return true;
	}
	return false;
}

/* ---- Ring access ---- */

static inline uint16_t ld16(const __virtio16 *p)
{
	return le16toh(__atomic_load_n((const uint16_t *)p, __ATOMIC_RELAXED));
}

static inline void st16(__virtio16 *p, uint16_t v)
{
	__atomic_store_n((uint16_t *)p, htole16(v), __ATOMIC_RELAXED);
}

static inline uint16_t avail_idx(const struct vsxu_vq *vq)
{
	return ld16(&vq->avail->idx);
}

/* used_event lives after the avail ring, avail_event after the used ring */
static inline __virtio16 *used_event_p(const struct vsxu_vq *vq)
{
	return &vq->avail->ring[vq->num];
}

static inline __virtio16 *avail_event_p(const struct vsxu_vq *vq)
{
	return (__virtio16 *)&vq->used->ring[vq->num];
}

bool vsxu_vq_ready(const struct vsxu_vq *vq)
{
	return vq->started && vq->enabled && !vq->broken && vq->num &&
	       vq->desc && vq->avail && vq->used && vq->mem;
}

static void vq_signal(int fd)
{
	uint64_t one = 1;
	ssize_t n;

	if (fd < 0)
		return;
	/* An eventfd only fails a write when its counter would overflow,
	 * and then the other side has a notification pending anyway. */
	do
		n = write(fd, &one, sizeof(one));
	while (n < 0 && errno == EINTR);
}

static int vq_break(struct vsxu_vq *vq, int err)
{
	if (!vq->broken) {
		vq->broken = true;
		vq_signal(vq->err_fd);
	}
	return err;
}

/* ---- Popping chains ---- */

struct walk {
	struct vsxu_vq_elem *e;
	unsigned niov;     /* iovecs filled */
	bool seen_write;   /* a device-writable descriptor was seen */
	uint64_t out_len, in_len;
};

/* Add [addr, addr+len) to the element, split at region boundaries. */
static int walk_add(const struct vsxu_mem *m, struct walk *w, uint64_t addr,
		    uint32_t len, bool write)
{
	uint64_t *total = write ? &w->in_len : &w->out_len;

	if (write)
		w->seen_write = true;
	else if (w->seen_write)
		return -EINVAL; /* readable after writable */
	*total += len;
	if (*total > UINT32_MAX)
		return -EINVAL;
	while (len) {
		const struct vsxu_mem_region *r = mem_find_gpa(m, addr);
		uint64_t off, n;

		if (!r)
			return -EFAULT;
		if (w->niov >= VSXU_VQ_MAX_IOV)
			return -EINVAL;
		off = addr - r->gpa;
		n = r->size - off;
		if (n > len)
			n = len;
		w->e->iov[w->niov].iov_base = (char *)r->host + off;
		w->e->iov[w->niov].iov_len = n;
		w->niov++;
		if (write)
			w->e->in_num++;
		else
			w->e->out_num++;
		addr += n;
		len -= n;
	}
	return 0;
}

static void desc_read(struct vring_desc *d, const struct vring_desc *src)
{
	memcpy(d, src, sizeof(*d));
	d->addr = le64toh(d->addr);
	d->len = le32toh(d->len);
	d->flags = le16toh(d->flags);
	d->next = le16toh(d->next);
}

/*
 * Walk the chain starting at @head. A chain may hold at most
 * VSXU_VQ_MAX_IOV descriptors; an indirect table (which must be the only
 * descriptor of the chain, as QEMU requires) at most VSXU_VQ_MAX_IOV
 * entries of at most VSXU_VQ_MAX_SIZE. Any loop is cut by those limits.
 */
static int walk_chain(struct vsxu_vq *vq, uint16_t head, struct vsxu_vq_elem *e)
{
	const struct vring_desc *table = vq->desc;
	unsigned table_num = vq->num, count = 0;
	bool indirect = false;
	struct walk w = { .e = e };
	struct vring_desc d;
	uint16_t i = head;
	int err;

	e->head = head;
	e->out_num = e->in_num = 0;
	for (;;) {
		if (i >= table_num)
			return -EINVAL;
		if (++count > VSXU_VQ_MAX_IOV)
			return -EINVAL; /* loop or chain too long */
		desc_read(&d, &table[i]);

		if (d.flags & VRING_DESC_F_INDIRECT) {
			uint64_t n = d.len / sizeof(struct vring_desc);

			if (!vq->indirect || indirect || count != 1 ||
			    (d.flags & VRING_DESC_F_NEXT))
				return -EINVAL;
			if (!d.len || d.len % sizeof(struct vring_desc) ||
			    n > VSXU_VQ_MAX_SIZE)
				return -EINVAL;
			table = vsxu_mem_gpa(vq->mem, d.addr, d.len);
			if (!table)
				return -EFAULT;
			table_num = n;
			indirect = true;
			count = 0;
			i = 0;
			continue;
		}

		err = walk_add(vq->mem, &w, d.addr, d.len,
			       d.flags & VRING_DESC_F_WRITE);
		if (err)
			return err;
		if (!(d.flags & VRING_DESC_F_NEXT))
			break;
		i = d.next;
	}
	e->out_len = w.out_len;
	e->in_len = w.in_len;
	return 0;
}

int vsxu_vq_pop(struct vsxu_vq *vq, struct vsxu_vq_elem *e)
{
	uint16_t idx, head;
	int err;

	if (vq->broken)
		return -EIO;
	if (!vsxu_vq_ready(vq))
		return 0;

	idx = avail_idx(vq);
	if (idx == vq->last_avail) {
		if (vq->notify_off)
			return 0;
		if (vq->event_idx) {
			/* re-arm, then look again (see vsxu_vq_set_notify) */
			st16(avail_event_p(vq), vq->last_avail);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			idx = avail_idx(vq);
		}
		if (idx == vq->last_avail)
			return 0;
	}
	if ((uint16_t)(idx - vq->last_avail) > vq->num)
		return vq_break(vq, -EINVAL);
	/* the ring entries and descriptors after the index that covers them */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);

	head = ld16(&vq->avail->ring[vq->last_avail & (vq->num - 1)]);
	err = walk_chain(vq, head, e);
	if (err)
		return vq_break(vq, err);
	vq->last_avail++;
	return 1;
}

void vsxu_vq_unpop(struct vsxu_vq *vq, unsigned n)
{
	vq->last_avail -= n;
}

unsigned vsxu_vq_avail(const struct vsxu_vq *vq)
{
	uint16_t n;

	if (!vsxu_vq_ready(vq))
		return 0;
	n = avail_idx(vq) - vq->last_avail;
	/* a bogus index still reads as work, so that pop reports it */
	return n > vq->num ? vq->num : n;
}

/* ---- Used ring and notification ---- */

void vsxu_vq_push(struct vsxu_vq *vq, const struct vsxu_vq_elem *e, uint32_t written)
{
	struct vring_used_elem *u;

	if (!vq->used || !vq->num)
		return;
	if (written > e->in_len)
		written = e->in_len;
	u = &vq->used->ring[vq->used_idx & (vq->num - 1)];
	__atomic_store_n(&u->id, htole32(e->head), __ATOMIC_RELAXED);
	__atomic_store_n(&u->len, htole32(written), __ATOMIC_RELAXED);
	vq->used_idx++;
	vq->pending++;
}

static bool vq_should_notify(struct vsxu_vq *vq)
{
	uint16_t old, new;
	bool valid;

	/* used->idx is visible before we read what the guest asked for */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (vq->notify_on_empty && avail_idx(vq) == vq->last_avail)
		return true;
	if (!vq->event_idx)
		return !(ld16(&vq->avail->flags) & VRING_AVAIL_F_NO_INTERRUPT);

	old = vq->signalled_used;
	valid = vq->signalled_valid;
	new = vq->signalled_used = vq->used_idx;
	vq->signalled_valid = true;
	if (!valid)
		return true;
	return vring_need_event(ld16(used_event_p(vq)), new, old);
}

void vsxu_vq_flush(struct vsxu_vq *vq)
{
	if (!vq->pending || !vq->used)
		return;
	/* entries before the index that publishes them */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	st16(&vq->used->idx, vq->used_idx);
	vq->pending = 0;
	if (vq->avail && vq_should_notify(vq))
		vq_signal(vq->call_fd);
}

void vsxu_vq_set_notify(struct vsxu_vq *vq, bool on)
{
	vq->notify_off = !on;
	if (!vq->used || !vq->num)
		return;
	if (vq->event_idx) {
		/* Without EVENT_IDX's flag, the guest kicks past avail_event;
		 * leaving it where it is lets at most one more kick through. */
		if (on)
			st16(avail_event_p(vq), vq->last_avail);
	} else {
		uint16_t f = ld16(&vq->used->flags);

		if (on)
			f &= ~VRING_USED_F_NO_NOTIFY;
		else
			f |= VRING_USED_F_NO_NOTIFY;
		st16(&vq->used->flags, f);
	}
	if (on)
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void vsxu_vq_reset(struct vsxu_vq *vq)
{
	memset(vq, 0, sizeof(*vq));
	vq->kick_fd = vq->call_fd = vq->err_fd = -1;
}
