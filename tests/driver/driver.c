/*
 * The in-process test driver (see driver.h): a vhost-user front-end that
 * behaves as QEMU 7.2's vhost-user-vsock does, and a guest virtio-vsock
 * driver that lays out and uses split virtqueues as Linux 6.1 does.
 *
 * Message order, as QEMU sends it (hw/virtio/vhost.c vhost_dev_init and
 * vhost_dev_start, vhost-user.c, vhost-user-vsock.c):
 *   GET_FEATURES, GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES,
 *   [GET_QUEUE_NUM if MQ], SET_OWNER, GET_FEATURES, SET_VRING_CALL and
 *   SET_VRING_ERR per queue, GET_CONFIG (the CID);
 *   then, as the guest driver starts the device: SET_FEATURES,
 *   SET_MEM_TABLE, per queue SET_VRING_NUM, SET_VRING_BASE, SET_VRING_ADDR,
 *   SET_VRING_KICK; SET_VRING_ENABLE 1 per queue (with protocol features),
 *   SET_VRING_CALL per queue again;
 *   on close: SET_VRING_ENABLE 0 and GET_VRING_BASE per queue.
 * When REPLY_ACK is negotiated every message without a reply of its own
 * asks for one, so setup errors are caught where they happen.
 *
 * The guest side keeps its own copy of every chain it made (the device may
 * scribble on the rings) and takes nothing from used entries on trust.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "driver.h"
#include "vhost-user/vhost_user_proto.h"
#include "util.h"

/* ---- vhost-user, front-end side (vhost_user_proto.h) ---- */

#define VU_REPLY_TIMEOUT_MS 5000

/* ---- Guest side ---- */

#define NQ_MAX 3
#define EVENT_BUFS 8             /* Linux: vsock->event_list[8] */
#define TX_SLOT_HDR 64           /* slot: indirect table, header, payload */
#define TX_SLOT_DATA 128
#define TX_MAX_PAYLOAD VSOCK_MAX_PKT_PAYLOAD
#define SCRATCH_SIZE (1u << 20)

struct drv_ring {
	unsigned num;
	uint64_t desc_gpa, avail_gpa, used_gpa;
	struct vring_desc *desc;
	struct vring_avail *avail;
	struct vring_used *used;
	uint16_t avail_idx;      /* our shadow of avail->idx */
	uint16_t last_used;
	uint16_t *free;          /* stack of free descriptor indices */
	unsigned nfree;
	uint16_t *priv_next;     /* our copy of the chain links */
	uint16_t *chain_n;       /* descriptors in the chain headed here; 0: none */
	int *slot;               /* buffer slot of the chain headed here, -1: none */
	int kick_fd, call_fd, err_fd;
	/* buffer slots */
	uint64_t slot_gpa;
	size_t slot_size;
	unsigned nslots;
	unsigned *free_slot;
	unsigned nfree_slot;
	uint16_t base;           /* SET_VRING_BASE at the next start */
};

struct drv {
	int sock;
	int memfd;
	char *mem;
	uint64_t mem_size;
	uint64_t half;
	uint64_t features;       /* negotiated */
	uint64_t dev_features;
	uint64_t protocol;
	uint64_t cid;
	bool reply_ack;
	unsigned nq;
	unsigned rx_buf_size;
	bool rx_one_desc;
	uint32_t rx_pay_off;     /* where an RX buffer's payload starts in its slot */
	bool indirect, event_idx;
	uint64_t bump;           /* next free offset in the lower half */
	uint64_t bump_hi;        /* and in the upper half */
	uint64_t top;            /* the upper half ends here (desc_top) */
	bool desc_top;
	struct drv_ring q[NQ_MAX];
};


static int remaining(uint64_t deadline)
{
	uint64_t t = vsx__now_ms();

	return t >= deadline ? 0 : (int)(deadline - t);
}

static int vu_write(struct drv *d, uint32_t req, uint32_t flags, const void *payload,
		    uint32_t size, const int *fds, unsigned nfds)
{
	struct vu_hdr h = { .request = req, .flags = flags, .size = size };
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = (void *)payload, .iov_len = payload ? size : 0 },
	};
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	size_t total = sizeof(h) + iov[1].iov_len;
	ssize_t n;

	if (nfds > 8)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	do
		n = sendmsg(d->sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* the fds went with the first byte; push out whatever is left */
	while ((size_t)n < total) {
		ssize_t k;
		const char *p;
		size_t left;

		if ((size_t)n < sizeof(h)) {
			p = (const char *)&h + n;
			left = sizeof(h) - (size_t)n;
		} else {
			p = (const char *)payload + ((size_t)n - sizeof(h));
			left = total - (size_t)n;
		}
		k = send(d->sock, p, left, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		n += k;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len, uint64_t deadline)
{
	size_t got = 0;

	while (got < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int r = poll(&p, 1, remaining(deadline));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		n = recv(fd, (char *)buf + got, len - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

/* Read the reply to @req; returns its payload size (copied up to @max). */
static int vu_read_reply(struct drv *d, uint32_t req, void *buf, uint32_t max)
{
	uint64_t deadline = vsx__now_ms() + VU_REPLY_TIMEOUT_MS;
	char payload[VU_MAX_PAYLOAD];
	struct vu_hdr h;
	int r;

	r = read_full(d->sock, &h, sizeof(h), deadline);
	if (r)
		return r;
	if (h.request != req || h.flags != (VU_VERSION | VU_FLAG_REPLY) ||
	    h.size > sizeof(payload))
		return -EPROTO;
	r = read_full(d->sock, payload, h.size, deadline);
	if (r)
		return r;
	if (buf)
		memcpy(buf, payload, h.size < max ? h.size : max);
	return (int)h.size;
}

static int vu_get_u64(struct drv *d, uint32_t req, uint64_t *v)
{
	int r = vu_write(d, req, VU_VERSION, NULL, 0, NULL, 0);

	if (r)
		return r;
	r = vu_read_reply(d, req, v, sizeof(*v));
	if (r < 0)
		return r;
	return r == sizeof(*v) ? 0 : -EPROTO;
}

/* A message without a reply of its own: acked when REPLY_ACK is on. */
static int vu_set(struct drv *d, uint32_t req, const void *payload, uint32_t size,
		  const int *fds, unsigned nfds)
{
	uint32_t flags = VU_VERSION | (d->reply_ack ? VU_FLAG_NEED_REPLY : 0);
	uint64_t ack;
	int r;

	r = vu_write(d, req, flags, payload, size, fds, nfds);
	if (r || !d->reply_ack)
		return r;
	r = vu_read_reply(d, req, &ack, sizeof(ack));
	if (r < 0)
		return r;
	if (r != sizeof(ack))
		return -EPROTO;
	return ack ? -EIO : 0;
}

static int vu_set_u64(struct drv *d, uint32_t req, uint64_t v)
{
	return vu_set(d, req, &v, sizeof(v), NULL, 0);
}

static int vu_set_state(struct drv *d, uint32_t req, uint32_t index, uint32_t num)
{
	struct vu_state s = { .index = index, .num = num };

	return vu_set(d, req, &s, sizeof(s), NULL, 0);
}

static int vu_set_fd(struct drv *d, uint32_t req, unsigned q, int fd)
{
	uint64_t v = q;

	return vu_set(d, req, &v, sizeof(v), &fd, 1);
}

int drv_vhost_msg(struct drv *d, uint32_t req, uint32_t flags, const void *payload,
		  uint32_t size, const int *fds, unsigned nfds, void *reply,
		  uint32_t reply_max)
{
	int r = vu_write(d, req, flags, payload, size, fds, nfds);

	if (r || !reply)
		return r;
	return vu_read_reply(d, req, reply, reply_max);
}

/* ---- Guest memory ---- */

void *drv_mem(struct drv *d, uint64_t gpa, size_t len)
{
	if (gpa < DRV_GPA_BASE || gpa - DRV_GPA_BASE > d->mem_size ||
	    len > d->mem_size - (gpa - DRV_GPA_BASE))
		return NULL;
	return d->mem + (gpa - DRV_GPA_BASE);
}

uint64_t drv_scratch(struct drv *d, size_t *len)
{
	if (len)
		*len = SCRATCH_SIZE;
	return DRV_GPA_BASE + d->half - SCRATCH_SIZE / 2;
}

/* Allocate guest memory (lower half below the scratch area, else upper
 * half above it); returns the offset or UINT64_MAX. */
static uint64_t galloc(struct drv *d, uint64_t size, uint64_t align)
{
	uint64_t lo_end = d->half - SCRATCH_SIZE / 2, off;

	off = (d->bump + align - 1) & ~(align - 1);
	if (off + size <= lo_end) {
		d->bump = off + size;
		return off;
	}
	off = (d->bump_hi + align - 1) & ~(align - 1);
	if (off + size <= d->top) {
		d->bump_hi = off + size;
		return off;
	}
	return UINT64_MAX;
}

/* ---- Rings, guest side ---- */

static inline uint16_t ld16(const __virtio16 *p)
{
	return le16toh(__atomic_load_n((const uint16_t *)p, __ATOMIC_RELAXED));
}

static inline void st16(__virtio16 *p, uint16_t v)
{
	__atomic_store_n((uint16_t *)p, htole16(v), __ATOMIC_RELAXED);
}

static void kick(struct drv_ring *r)
{
	uint64_t one = 1;

	while (write(r->kick_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/* Put @head on the avail ring (no kick). */
static void avail_add(struct drv_ring *r, uint16_t head)
{
	st16(&r->avail->ring[r->avail_idx & (r->num - 1)], head);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	st16(&r->avail->idx, ++r->avail_idx);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Publish @head and kick if the device asked for it (Linux
 * virtqueue_kick_prepare). */
static void publish(struct drv *d, struct drv_ring *r, uint16_t head, bool force_kick)
{
	uint16_t old = r->avail_idx, new = old + 1;
	bool need;

	avail_add(r, head);
	if (d->event_idx)
		need = vring_need_event(ld16((__virtio16 *)&r->used->ring[r->num]), new, old);
	else
		need = !(ld16(&r->used->flags) & VRING_USED_F_NO_NOTIFY);
	if (need || force_kick)
		kick(r);
}

static int desc_alloc(struct drv_ring *r, unsigned n, uint16_t *out)
{
	if (r->nfree < n)
		return -ENOSPC;
	for (unsigned i = 0; i < n; i++)
		out[i] = r->free[--r->nfree];
	return 0;
}

static void chain_free(struct drv_ring *r, uint16_t head)
{
	uint16_t i = head;
	unsigned n = r->chain_n[head];

	for (unsigned k = 0; k < n; k++) {
		r->free[r->nfree++] = i;
		i = r->priv_next[i];
	}
	r->chain_n[head] = 0;
	if (r->slot[head] >= 0)
		r->free_slot[r->nfree_slot++] = (unsigned)r->slot[head];
	r->slot[head] = -1;
}

static void set_desc(struct vring_desc *t, uint16_t i, uint64_t addr, uint32_t len,
		     uint16_t flags, uint16_t next)
{
	struct vring_desc v = {
		.addr = htole64(addr),
		.len = htole32(len),
		.flags = htole16(flags),
		.next = htole16(next),
	};

	memcpy(&t[i], &v, sizeof(v));
}

static char *slot_ptr(struct drv *d, struct drv_ring *r, unsigned s)
{
	return d->mem + (r->slot_gpa - DRV_GPA_BASE) + (uint64_t)s * r->slot_size;
}

static uint64_t slot_gpa(struct drv_ring *r, unsigned s)
{
	return r->slot_gpa + (uint64_t)s * r->slot_size;
}

/*
 * Add a chain of @nseg segments in slot @s: segment k at slot offset
 * off[k], len[k], device-writable if @write. Indirect when negotiated and
 * more than one segment (Linux virtqueue_add_split).
 */
static int add_chain(struct drv *d, struct drv_ring *r, unsigned s, unsigned nseg,
		     const uint32_t *off, const uint32_t *len, bool write,
		     bool force_kick)
{
	uint16_t wflag = write ? VRING_DESC_F_WRITE : 0;
	uint16_t idx[4];
	int err;

	if (d->indirect && nseg > 1) {
		struct vring_desc *t = (struct vring_desc *)slot_ptr(d, r, s);

		err = desc_alloc(r, 1, idx);
		if (err)
			return err;
		for (unsigned k = 0; k < nseg; k++)
			set_desc(t, (uint16_t)k, slot_gpa(r, s) + off[k], len[k],
				 (uint16_t)(wflag | (k + 1 < nseg ? VRING_DESC_F_NEXT : 0)),
				 (uint16_t)(k + 1 < nseg ? k + 1 : 0));
		set_desc(r->desc, idx[0], slot_gpa(r, s),
			 (uint32_t)(nseg * sizeof(struct vring_desc)),
			 VRING_DESC_F_INDIRECT, 0);
		r->chain_n[idx[0]] = 1;
	} else {
		err = desc_alloc(r, nseg, idx);
		if (err)
			return err;
		for (unsigned k = 0; k < nseg; k++) {
			bool more = k + 1 < nseg;

			set_desc(r->desc, idx[k], slot_gpa(r, s) + off[k], len[k],
				 (uint16_t)(wflag | (more ? VRING_DESC_F_NEXT : 0)),
				 more ? idx[k + 1] : 0);
			r->priv_next[idx[k]] = more ? idx[k + 1] : 0;
		}
		r->chain_n[idx[0]] = (uint16_t)nseg;
	}
	r->slot[idx[0]] = (int)s;
	publish(d, r, idx[0], force_kick);
	return 0;
}

/* Take one used entry, if any: returns 1 with *@head and *@len. */
static int used_pop(struct drv_ring *r, uint16_t *head, uint32_t *len)
{
	struct vring_used_elem e;
	uint16_t idx = ld16(&r->used->idx);

	if (idx == r->last_used)
		return 0;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	memcpy(&e, &r->used->ring[r->last_used & (r->num - 1)], sizeof(e));
	r->last_used++;
	e.id = le32toh(e.id);
	if (e.id >= r->num || !r->chain_n[e.id])
		return -EPROTO;
	*head = (uint16_t)e.id;
	*len = le32toh(e.len);
	return 1;
}

/* Wait until the used ring moves or @deadline: the Linux
 * virtqueue_enable_cb dance (used_event = last_used, re-check, sleep until
 * notified). Like a guest, it does not look again without a notification:
 * a device that forgets to notify makes this time out. */
static int used_wait(struct drv *d, struct drv_ring *r, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = r->call_fd, .events = POLLIN };
		uint64_t v;
		int n;

		if (d->event_idx)
			st16(&r->avail->ring[r->num], r->last_used);
		else
			st16(&r->avail->flags, 0);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (ld16(&r->used->idx) != r->last_used)
			return 0;
		n = poll(&p, 1, remaining(deadline));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ETIMEDOUT; /* a guest only looks when notified */
		if (read(r->call_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -errno;
	}
}

static void reclaim(struct drv_ring *r)
{
	uint16_t head;
	uint32_t len;

	while (used_pop(r, &head, &len) == 1)
		chain_free(r, head);
}

/* ---- Bring-up ---- */

static int ring_layout(struct drv *d, struct drv_ring *r, unsigned num)
{
	uint64_t desc, avail, used;

	r->num = num;
	if (!d->desc_top) {
		desc = galloc(d, 16ull * num, 4096);
	} else if (d->top - d->bump_hi >= 16ull * num + 4096) {
		d->top = (d->top - 16ull * num) & ~4095ull;
		desc = d->top;
	} else {
		return -ENOMEM;
	}
	avail = galloc(d, 6 + 2ull * num, 4096);
	used = galloc(d, 6 + 8ull * num, 4096);
	if (desc == UINT64_MAX || avail == UINT64_MAX || used == UINT64_MAX)
		return -ENOMEM;
	r->desc_gpa = DRV_GPA_BASE + desc;
	r->avail_gpa = DRV_GPA_BASE + avail;
	r->used_gpa = DRV_GPA_BASE + used;
	r->desc = (struct vring_desc *)(d->mem + desc);
	r->avail = (struct vring_avail *)(d->mem + avail);
	r->used = (struct vring_used *)(d->mem + used);
	r->free = calloc(num, sizeof(*r->free));
	r->priv_next = calloc(num, sizeof(*r->priv_next));
	r->chain_n = calloc(num, sizeof(*r->chain_n));
	r->slot = calloc(num, sizeof(*r->slot));
	if (!r->free || !r->priv_next || !r->chain_n || !r->slot)
		return -ENOMEM;
	for (unsigned i = 0; i < num; i++) {
		r->free[i] = (uint16_t)(num - 1 - i);
		r->slot[i] = -1;
	}
	r->nfree = num;
	r->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->call_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->err_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->kick_fd < 0 || r->call_fd < 0 || r->err_fd < 0)
		return -errno;
	return 0;
}

static int slots_layout(struct drv *d, struct drv_ring *r, unsigned want, size_t size)
{
	uint64_t off;

	size = (size + 63) & ~(size_t)63;
	while (want) {
		off = galloc(d, (uint64_t)want * size, 4096);
		if (off != UINT64_MAX)
			break;
		want /= 2;
	}
	if (!want)
		return -ENOMEM;
	r->slot_gpa = DRV_GPA_BASE + off;
	r->slot_size = size;
	r->nslots = want;
	r->free_slot = calloc(want, sizeof(*r->free_slot));
	if (!r->free_slot)
		return -ENOMEM;
	for (unsigned i = 0; i < want; i++)
		r->free_slot[i] = want - 1 - i;
	r->nfree_slot = want;
	return 0;
}

static int post_rx(struct drv *d, unsigned s, bool force_kick)
{
	struct drv_ring *r = &d->q[VSOCK_VQ_RX];
	uint32_t off[2] = { TX_SLOT_HDR, TX_SLOT_DATA };
	uint32_t len[2] = { sizeof(struct virtio_vsock_hdr), d->rx_buf_size };

	if (d->rx_one_desc) {
		len[0] += d->rx_buf_size;
		return add_chain(d, r, s, 1, off, len, true, force_kick);
	}
	return add_chain(d, r, s, 2, off, len, true, force_kick);
}

static int post_event(struct drv *d, unsigned s, bool force_kick)
{
	struct drv_ring *r = &d->q[VSOCK_VQ_EVENT];
	uint32_t off = 0, len = 4;

	return add_chain(d, r, s, 1, &off, &len, true, force_kick);
}

static int negotiate(struct drv *d, const struct drv_opts *o)
{
	uint64_t pf = 0, want;
	int r;

	r = vu_get_u64(d, VU_GET_FEATURES, &d->dev_features);
	if (r)
		return r;
	if (d->dev_features & (1ull << VU_F_PROTOCOL_FEATURES)) {
		r = vu_get_u64(d, VU_GET_PROTOCOL_FEATURES, &pf);
		if (r)
			return r;
		d->protocol = pf & ((1ull << VU_PF_MQ) | (1ull << VU_PF_REPLY_ACK) |
				    (1ull << VU_PF_CONFIG));
		r = vu_set_u64(d, VU_SET_PROTOCOL_FEATURES, d->protocol);
		if (r)
			return r;
		d->reply_ack = d->protocol & (1ull << VU_PF_REPLY_ACK);
	}
	if (d->protocol & (1ull << VU_PF_MQ)) {
		uint64_t nq;

		r = vu_get_u64(d, VU_GET_QUEUE_NUM, &nq);
		if (r)
			return r;
		/* a back-end serving rx and tx only gets just those, as from
		 * QEMU; fewer than that cannot be a vsock device */
		if (nq < 2)
			return -EPROTO;
		if (nq < d->nq)
			d->nq = (unsigned)nq;
	}
	r = vu_set(d, VU_SET_OWNER, NULL, 0, NULL, 0);
	if (r)
		return r;
	r = vu_get_u64(d, VU_GET_FEATURES, &d->dev_features);
	if (r)
		return r;
	for (unsigned i = 0; i < d->nq; i++) {
		r = vu_set_fd(d, VU_SET_VRING_CALL, i, d->q[i].call_fd);
		if (!r)
			r = vu_set_fd(d, VU_SET_VRING_ERR, i, d->q[i].err_fd);
		if (r)
			return r;
	}
	if (!(d->protocol & (1ull << VU_PF_CONFIG)))
		return -EPROTO; /* no way to learn the CID */
	{
		/* As QEMU asks: the header and the 8 bytes of guest_cid. */
		struct vu_config c = { .offset = 0, .size = 8 };
		int n;

		r = vu_write(d, VU_GET_CONFIG, VU_VERSION, &c, VU_CONFIG_HDR + 8, NULL, 0);
		if (r)
			return r;
		n = vu_read_reply(d, VU_GET_CONFIG, &c, sizeof(c));
		if (n < 0)
			return n;
		if (n != VU_CONFIG_HDR + 8)
			return -EPROTO;
		memcpy(&d->cid, c.region, sizeof(d->cid));
		d->cid = le64toh(d->cid);
	}

	want = (1ull << VIRTIO_F_VERSION_1) | (1ull << VU_F_PROTOCOL_FEATURES);
	if (!o->no_event_idx)
		want |= 1ull << VIRTIO_RING_F_EVENT_IDX;
	if (!o->no_indirect)
		want |= 1ull << VIRTIO_RING_F_INDIRECT_DESC;
	if (!o->no_seqpacket)
		want |= 1ull << VIRTIO_VSOCK_F_SEQPACKET;
	d->features = d->dev_features & want;
	if (!(d->features & (1ull << VIRTIO_F_VERSION_1)))
		return -EPROTO;
	d->event_idx = d->features & (1ull << VIRTIO_RING_F_EVENT_IDX);
	d->indirect = d->features & (1ull << VIRTIO_RING_F_INDIRECT_DESC);
	return vu_set_u64(d, VU_SET_FEATURES, d->features);
}

static int start_device(struct drv *d)
{
	struct vu_memory m = { .nregions = 2 };
	int fds[2] = { d->memfd, d->memfd };
	int r;

	m.r[0] = (struct vu_region){
		.gpa = DRV_GPA_BASE, .size = d->half,
		.uva = (uint64_t)(uintptr_t)d->mem, .mmap_offset = 0,
	};
	m.r[1] = (struct vu_region){
		.gpa = DRV_GPA_BASE + d->half, .size = d->mem_size - d->half,
		.uva = (uint64_t)(uintptr_t)d->mem + d->half, .mmap_offset = d->half,
	};
	r = vu_set(d, VU_SET_MEM_TABLE, &m, VU_MEM_HDR + 2 * sizeof(m.r[0]), fds, 2);
	if (r)
		return r;
	for (unsigned i = 0; i < d->nq; i++) {
		struct drv_ring *q = &d->q[i];
		struct vu_addr a = {
			.index = i,
			.desc = (uint64_t)(uintptr_t)q->desc,
			.used = (uint64_t)(uintptr_t)q->used,
			.avail = (uint64_t)(uintptr_t)q->avail,
			.log = q->used_gpa,
		};

		r = vu_set_state(d, VU_SET_VRING_NUM, i, q->num);
		if (!r)
			r = vu_set_state(d, VU_SET_VRING_BASE, i, q->base);
		if (!r)
			r = vu_set(d, VU_SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
		if (!r)
			r = vu_set_fd(d, VU_SET_VRING_KICK, i, q->kick_fd);
		if (r)
			return r;
	}
	if (d->features & (1ull << VU_F_PROTOCOL_FEATURES)) {
		for (unsigned i = 0; i < d->nq; i++) {
			r = vu_set_state(d, VU_SET_VRING_ENABLE, i, 1);
			if (r)
				return r;
		}
	}
	for (unsigned i = 0; i < d->nq; i++) {
		r = vu_set_fd(d, VU_SET_VRING_CALL, i, d->q[i].call_fd);
		if (r)
			return r;
	}
	return 0;
}

/* Linux fills the rx and event queues once the device is live. */
static int fill_queues(struct drv *d)
{
	int r;

	for (unsigned s = 0; s < d->q[VSOCK_VQ_RX].nslots; s++) {
		d->q[VSOCK_VQ_RX].nfree_slot--;
		r = post_rx(d, d->q[VSOCK_VQ_RX].free_slot[d->q[VSOCK_VQ_RX].nfree_slot],
			    false);
		if (r)
			return r;
	}
	kick(&d->q[VSOCK_VQ_RX]);
	if (d->nq > VSOCK_VQ_EVENT) {
		struct drv_ring *e = &d->q[VSOCK_VQ_EVENT];

		for (unsigned s = 0; s < e->nslots; s++) {
			e->nfree_slot--;
			r = post_event(d, e->free_slot[e->nfree_slot], false);
			if (r)
				return r;
		}
		kick(e);
	}
	return 0;
}

/* QEMU's vhost_dev_stop: disable the rings, then stop each
 * (GET_VRING_BASE); the bases are what the next start gives back. */
static int stop_rings(struct drv *d)
{
	int r;

	if (d->features & (1ull << VU_F_PROTOCOL_FEATURES)) {
		for (unsigned i = 0; i < d->nq; i++) {
			r = vu_set_state(d, VU_SET_VRING_ENABLE, i, 0);
			if (r)
				return r;
		}
	}
	for (unsigned i = 0; i < d->nq; i++) {
		struct vu_state st = { .index = i };

		r = drv_vhost_msg(d, VU_GET_VRING_BASE, VU_VERSION, &st, sizeof(st), NULL, 0,
				  &st, sizeof(st));
		if (r != sizeof(st))
			return r < 0 ? r : -EPROTO;
		d->q[i].base = (uint16_t)st.num;
	}
	return 0;
}

int drv_truncate_mem(struct drv *d, uint64_t size)
{
	return ftruncate(d->memfd, (off_t)size) < 0 ? -errno : 0;
}

int drv_pause(struct drv *d)
{
	return stop_rings(d);
}

int drv_resume(struct drv *d, int skew)
{
	for (unsigned i = 0; i < d->nq; i++)
		d->q[i].base = (uint16_t)(d->q[i].base + skew);
	return start_device(d);
}

int drv_reset(struct drv *d)
{
	int r = stop_rings(d);

	if (r)
		return r;
	/* the driver's probe again: fresh rings at index 0, every buffer ours */
	for (unsigned i = 0; i < d->nq; i++) {
		struct drv_ring *q = &d->q[i];

		memset(q->desc, 0, 16ull * q->num);
		memset(q->avail, 0, 6 + 2ull * q->num);
		memset(q->used, 0, 6 + 8ull * q->num);
		q->avail_idx = q->last_used = 0;
		for (unsigned k = 0; k < q->num; k++) {
			q->free[k] = (uint16_t)(q->num - 1 - k);
			q->chain_n[k] = 0;
			q->slot[k] = -1;
		}
		q->nfree = q->num;
		for (unsigned k = 0; k < q->nslots; k++)
			q->free_slot[k] = q->nslots - 1 - k;
		q->nfree_slot = q->nslots;
		q->base = 0;
	}
	r = vu_set_u64(d, VU_SET_FEATURES, d->features);
	if (!r)
		r = start_device(d);
	if (!r)
		r = fill_queues(d);
	return r;
}

int drv_open(const char *vhost_socket, const struct drv_opts *opts, struct drv **out)
{
	struct drv_opts o = opts ? *opts : (struct drv_opts){ 0 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct drv *d;
	unsigned rx_cap, tx_cap;
	int r;

	if (!o.queue_size)
		o.queue_size = 256;
	if (!o.mem_size)
		o.mem_size = 64ull << 20;
	if (!o.rx_buf_size)
		o.rx_buf_size = 4096;
	if (o.queue_size > 32768 || (o.queue_size & (o.queue_size - 1)) ||
	    o.queue_size < 2 || o.mem_size < 4 * SCRATCH_SIZE || o.mem_size % (2 << 20) ||
	    o.rx_buf_size > (1u << 20) || strlen(vhost_socket) >= sizeof(sa.sun_path))
		return -EINVAL;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->sock = d->memfd = -1;
	for (unsigned i = 0; i < NQ_MAX; i++)
		d->q[i].kick_fd = d->q[i].call_fd = d->q[i].err_fd = -1;
	d->nq = o.no_event_queue ? 2 : 3;
	d->rx_buf_size = o.rx_buf_size;
	d->rx_one_desc = o.rx_one_desc;
	d->rx_pay_off = o.rx_one_desc ? TX_SLOT_HDR + sizeof(struct virtio_vsock_hdr) :
					TX_SLOT_DATA;
	d->mem_size = o.mem_size;
	d->half = o.mem_size / 2;
	d->bump_hi = d->half + SCRATCH_SIZE / 2;
	d->top = d->mem_size;
	d->desc_top = o.desc_top;

	d->memfd = memfd_create("vsx-drv-guest", MFD_CLOEXEC);
	if (d->memfd < 0 || ftruncate(d->memfd, (off_t)d->mem_size) < 0) {
		r = -errno;
		goto fail;
	}
	d->mem = mmap(NULL, d->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED, d->memfd, 0);
	if (d->mem == MAP_FAILED) {
		d->mem = NULL;
		r = -errno;
		goto fail;
	}
	for (unsigned i = 0; i < d->nq; i++) {
		r = ring_layout(d, &d->q[i], o.queue_size);
		if (r)
			goto fail;
	}

	d->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (d->sock < 0) {
		r = -errno;
		goto fail;
	}
	strcpy(sa.sun_path, vhost_socket);
	if (connect(d->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto fail;
	}
	r = negotiate(d, &o);
	if (r)
		goto fail;

	/* buffers: as many chains as the ring holds, as far as memory goes */
	rx_cap = d->indirect ? o.queue_size : o.queue_size / 2;
	tx_cap = rx_cap < 256 ? rx_cap : 256;
	r = slots_layout(d, &d->q[VSOCK_VQ_TX], tx_cap, TX_SLOT_DATA + TX_MAX_PAYLOAD);
	if (!r)
		r = slots_layout(d, &d->q[VSOCK_VQ_RX], rx_cap, TX_SLOT_DATA + d->rx_buf_size);
	if (!r && d->nq > VSOCK_VQ_EVENT)
		r = slots_layout(d, &d->q[VSOCK_VQ_EVENT], EVENT_BUFS, 64);
	if (r)
		goto fail;

	r = start_device(d);
	if (!r)
		r = fill_queues(d);
	if (r)
		goto fail;
	*out = d;
	return 0;

fail:
	drv_close(d);
	return r;
}

void drv_close(struct drv *d)
{
	if (!d)
		return;
	if (d->sock >= 0) {
		if (d->features)
			stop_rings(d);
		close(d->sock);
	}
	for (unsigned i = 0; i < NQ_MAX; i++) {
		struct drv_ring *r = &d->q[i];

		if (r->kick_fd >= 0)
			close(r->kick_fd);
		if (r->call_fd >= 0)
			close(r->call_fd);
		if (r->err_fd >= 0)
			close(r->err_fd);
		free(r->free);
		free(r->priv_next);
		free(r->chain_n);
		free(r->slot);
		free(r->free_slot);
	}
	if (d->mem)
		munmap(d->mem, d->mem_size);
	if (d->memfd >= 0)
		close(d->memfd);
	free(d);
}

uint64_t drv_cid(const struct drv *d)
{
	return d->cid;
}

uint64_t drv_features(const struct drv *d)
{
	return d->features;
}

/* ---- Data path ---- */

int drv_send(struct drv *d, const struct virtio_vsock_hdr *h, const void *payload,
	     size_t len, int timeout_ms)
{
	struct drv_ring *r = &d->q[VSOCK_VQ_TX];
	uint64_t deadline = vsx__now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	unsigned nseg = len ? 2 : 1, need = d->indirect ? 1 : nseg;
	uint32_t off[2] = { TX_SLOT_HDR, TX_SLOT_DATA };
	uint32_t sz[2] = { sizeof(*h), (uint32_t)len };
	unsigned s;
	char *p;
	int err;

	if (len > TX_MAX_PAYLOAD)
		return -EMSGSIZE;
	for (;;) {
		reclaim(r);
		if (r->nfree >= need && r->nfree_slot)
			break;
		err = used_wait(d, r, deadline);
		if (err)
			return err;
	}
	s = r->free_slot[--r->nfree_slot];
	p = slot_ptr(d, r, s);
	memcpy(p + TX_SLOT_HDR, h, sizeof(*h));
	if (len)
		memcpy(p + TX_SLOT_DATA, payload, len);
	err = add_chain(d, r, s, nseg, off, sz, false, false);
	if (err)
		r->free_slot[r->nfree_slot++] = s;
	return err;
}

int drv_recv(struct drv *d, struct virtio_vsock_hdr *h, void *payload, size_t max,
	     int timeout_ms)
{
	struct drv_ring *r = &d->q[VSOCK_VQ_RX];
	uint64_t deadline = vsx__now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	uint16_t head;
	uint32_t len;
	size_t plen;
	char *p;
	int s, n;

	for (;;) {
		n = used_pop(r, &head, &len);
		if (n < 0)
			return n;
		if (n)
			break;
		n = used_wait(d, r, deadline);
		if (n)
			return n;
	}
	s = r->slot[head];
	p = slot_ptr(d, r, (unsigned)s);
	chain_free(r, head);
	if (len < sizeof(*h) || len > sizeof(*h) + d->rx_buf_size) {
		r->nfree_slot--;
		post_rx(d, (unsigned)s, false);
		return -EPROTO;
	}
	memcpy(h, p + TX_SLOT_HDR, sizeof(*h));
	plen = len - sizeof(*h);
	if (payload)
		memcpy(payload, p + d->rx_pay_off, plen < max ? plen : max);
	/* the same buffer goes back, as virtio_vsock_rx_fill would post one */
	r->nfree_slot--;
	n = post_rx(d, (unsigned)s, false);
	if (n)
		return n;
	return (int)plen;
}

int drv_recv_event(struct drv *d, uint32_t *id, int timeout_ms)
{
	struct drv_ring *r = &d->q[VSOCK_VQ_EVENT];
	uint64_t deadline = vsx__now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	uint16_t head;
	uint32_t len, v;
	int s, n;

	if (d->nq <= VSOCK_VQ_EVENT)
		return -ENOTSUP;
	for (;;) {
		n = used_pop(r, &head, &len);
		if (n < 0)
			return n;
		if (n)
			break;
		n = used_wait(d, r, deadline);
		if (n)
			return n;
	}
	s = r->slot[head];
	memcpy(&v, slot_ptr(d, r, (unsigned)s), sizeof(v));
	chain_free(r, head);
	r->nfree_slot--;
	n = post_event(d, (unsigned)s, false);
	if (n)
		return n;
	if (len < sizeof(v))
		return -EPROTO;
	if (id)
		*id = le32toh(v);
	return (int)le32toh(v);
}

/* Write a raw chain on the TX queue; kick it if @kick_it. */
static int tx_raw(struct drv *d, const uint64_t *addr, const uint32_t *len,
		  const uint16_t *flags, const uint16_t *next, unsigned n, bool kick_it)
{
	struct drv_ring *r = &d->q[VSOCK_VQ_TX];
	uint16_t idx[256];

	if (!n || n > 256)
		return -EINVAL;
	reclaim(r);
	if (desc_alloc(r, n, idx))
		return -ENOSPC;
	for (unsigned i = 0; i < n; i++) {
		uint16_t nx = next ? next[i] : 0;

		set_desc(r->desc, idx[i], addr[i], len[i], flags[i], nx < n ? idx[nx] : nx);
		r->priv_next[idx[i]] = i + 1 < n ? idx[i + 1] : 0;
	}
	r->chain_n[idx[0]] = (uint16_t)n;
	r->slot[idx[0]] = -1;
	if (kick_it)
		publish(d, r, idx[0], true);
	else
		avail_add(r, idx[0]);
	return 0;
}

int drv_send_raw(struct drv *d, const uint64_t *addr, const uint32_t *len,
		 const uint16_t *flags, const uint16_t *next, unsigned n)
{
	return tx_raw(d, addr, len, flags, next, n, true);
}

int drv_post_raw(struct drv *d, const uint64_t *addr, const uint32_t *len,
		 const uint16_t *flags, const uint16_t *next, unsigned n)
{
	return tx_raw(d, addr, len, flags, next, n, false);
}

int drv_kick(struct drv *d, unsigned q)
{
	if (q >= d->nq)
		return -EINVAL;
	kick(&d->q[q]);
	return 0;
}

int drv_set_avail_idx(struct drv *d, unsigned q, uint16_t idx)
{
	struct drv_ring *r;

	if (q >= d->nq)
		return -EINVAL;
	r = &d->q[q];
	__atomic_thread_fence(__ATOMIC_RELEASE);
	st16(&r->avail->idx, idx);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	kick(r);
	return 0;
}

int drv_ring_error(struct drv *d, unsigned q)
{
	uint64_t v;

	if (q >= d->nq)
		return -EINVAL;
	if (read(d->q[q].err_fd, &v, sizeof(v)) == sizeof(v))
		return 1;
	return errno == EAGAIN ? 0 : -errno;
}
