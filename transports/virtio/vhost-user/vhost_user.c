/*
 * vhost-user device side (see vhost_user.h and QEMU's
 * docs/interop/vhost-user.rst).
 *
 * One front-end at a time: the listener stays watched, and a connection
 * that arrives while one is live is accepted and closed at once. Messages
 * are read without blocking as they arrive: a 12-byte header (request,
 * flags, size), then size bytes of payload, with up to 8 fds passed by
 * SCM_RIGHTS alongside. Framing errors (bad version, a payload larger than
 * any message we know, more fds than a message can carry, EOF inside a
 * message, a reply that cannot be written) close the connection; the
 * device then behaves as on any disconnect. Everything else is judged per
 * message:
 *
 *  - a message the protocol answers (GET_*) always gets its answer; a
 *    GET_CONFIG we cannot serve gets an empty one (the protocol's error);
 *  - any other message that fails (bad index, size, value, fds) changes
 *    nothing and, when the front-end set need_reply (REPLY_ACK), is answered
 *    with a non-zero u64; success is answered with 0;
 *  - fds on a message that takes none are closed, the message handled as
 *    usual; a message that takes fds but got the wrong number fails, and its
 *    fds are closed;
 *  - an unknown request fails (logged once per request code).
 *
 * Device lifecycle as QEMU 7.2 drives vhost-user-vsock-pci (seen on the
 * wire with Debian's 7.2 and a 6.1 guest): at realize GET_FEATURES,
 * GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES, SET_OWNER, GET_FEATURES,
 * SET_VRING_CALL and SET_VRING_ERR per vhost queue, GET_CONFIG; when the
 * guest driver starts the device, SET_FEATURES, SET_MEM_TABLE (need_reply),
 * per queue SET_VRING_NUM/BASE/ADDR/KICK, then SET_VRING_ENABLE 1 per queue
 * and SET_VRING_CALL again; on guest reset, VM stop or shutdown,
 * SET_VRING_ENABLE 0 and GET_VRING_BASE per queue. Only rx and tx are vhost
 * queues (the event queue stays in QEMU); MQ, STATUS and mem slots are not
 * offered, so GET_QUEUE_NUM, SET_STATUS and ADD_MEM_REG never come. A ring
 * is started by SET_VRING_KICK and stopped by GET_VRING_BASE; it starts
 * disabled when VHOST_USER_F_PROTOCOL_FEATURES was negotiated
 * (SET_VRING_ENABLE turns it on), enabled otherwise.
 *
 * QEMU's stop/cont and a guest reset look the same until the restart:
 * both disable and stop the rings (GET_VRING_BASE) while the memory table
 * stays. A stop by GET_VRING_BASE is therefore resumable (ops->stop's
 * @resumable), and the next start says what it was (vu_start_how, in
 * vhost_user_queues.c): every ring back at the base we returned, at the
 * same size and addresses, with the same features, is the VM going on; rings back at 0 (or new
 * features) are a reset; anything else is neither, and logged. A
 * disconnect or RESET_OWNER/RESET_DEVICE ends the session, paused or not.
 *
 * A session can also begin without a message: a new process adopts a live
 * device from the descriptors an earlier one left (vsxu_vu_adopt, in
 * vhost_user_state.c, over the state shared through vhost_user-int.h).
 * While live, a message that changes what such a process would need
 * (vu_changes_state) is reported through ops->changed.
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

/* ---- Protocol (vhost_user_proto.h) ---- */

_Static_assert(VU_MEM_MAX_REGIONS <= VSXU_MEM_MAX_REGIONS, "memory table");

/* ---- Connection ---- */

static void vu_rx_reset(struct vsxu_vu *vu)
{
	for (unsigned i = 0; i < vu->rx.nfds; i++)
		vsxu_vu__close_fd(&vu->rx.fds[i]);
	vu->rx.nfds = 0;
	vu->rx.have = 0;
}

void vsxu_vu__disconnect(struct vsxu_vu *vu)
{
	if (vu->conn_fd < 0)
		return;
	if (vu->conn_w) {
		vu->loop->unwatch(vu->conn_w);
		vu->conn_w = NULL;
	}
	vsxu_vu__close_fd(&vu->conn_fd);
	vu_rx_reset(vu);
	vsxu_vu__reset_device(vu);
	vu->features = 0;
	vu->protocol_features = 0;
	vu->owner = false;
	for (unsigned i = 0; i < vu->nq; i++)
		vsxu_vu__apply_features(vu, &vu->q[i].vq);
}

static int vu_send(struct vsxu_vu *vu, uint32_t req, const void *payload, uint32_t size)
{
	struct vu_hdr h = {
		.request = req,
		.flags = VU_VERSION | VU_FLAG_REPLY,
		.size = size,
	};
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = (void *)payload, .iov_len = size },
	};
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = size ? 2 : 1 };
	ssize_t n;

	do
		n = sendmsg(vu->conn_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)(sizeof(h) + size)) {
		/* a front-end that does not read its replies is gone */
		vsxu_vu__log(vu, "vhost-user: cannot write reply to request %u: %s", req,
		       n < 0 ? strerror(errno) : "short write");
		return -EIO;
	}
	return 0;
}

static int vu_reply_u64(struct vsxu_vu *vu, uint64_t v)
{
	return vu_send(vu, vu->rx.hdr.request, &v, sizeof(v)) ? VU_CLOSE : VU_REPLIED;
}

/* Take the message's only fd (ownership passes to the caller). */
static int vu_take_fd(struct vsxu_vu *vu, unsigned i)
{
	int fd = vu->rx.fds[i];

	vu->rx.fds[i] = -1;
	return fd;
}

/* ---- Message handlers ---- */

static struct vu_queue *vu_queue_of(struct vsxu_vu *vu, uint32_t index)
{
	return index < vu->nq ? &vu->q[index] : NULL;
}

static int vu_set_features(struct vsxu_vu *vu, uint64_t v)
{
	uint64_t offered = VU_FEATURES | vu->ops->features;

	if (v & ~offered) {
		vsxu_vu__log(vu, "vhost-user: SET_FEATURES with bits not offered: %#llx",
		       (unsigned long long)(v & ~offered));
		return -EINVAL;
	}
	vu->features = v;
	for (unsigned i = 0; i < vu->nq; i++)
		vsxu_vu__apply_features(vu, &vu->q[i].vq);
	return 0;
}

static bool vu_same_region(const struct vsxu_mem_region *a, const struct vu_region_id *aid,
			   const struct vu_region *b, const struct stat *st)
{
	return a->gpa == b->gpa && a->size == b->size && a->uva == b->uva &&
	       (char *)a->host - (char *)a->map ==
		       (ptrdiff_t)(b->mmap_offset % (uint64_t)sysconf(_SC_PAGESIZE)) &&
	       aid->dev == st->st_dev && aid->ino == st->st_ino &&
	       a->map_len == b->size + b->mmap_offset % (uint64_t)sysconf(_SC_PAGESIZE);
}

static bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

/* Can the file behind a region not shrink (a memfd with F_SEAL_SHRINK)? */
static bool file_sealed(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);

	return seals >= 0 && (seals & F_SEAL_SHRINK);
}

/*
 * Map region @i of a memory table (@what names the request in log lines)
 * from @fd into *@out; the caller has checked that @fd is a file covering
 * it. 0, or a negative errno (logged).
 */
int vsxu_vu__map_region(struct vsxu_vu *vu, const char *what, unsigned i, int fd,
		       const struct vu_region *r, struct vsxu_mem_region *out)
{
	uint64_t delta = r->mmap_offset % (uint64_t)sysconf(_SC_PAGESIZE);
	int err;

	out->map_len = r->size + delta;
	out->map = mmap(NULL, out->map_len, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_NORESERVE, fd, (off_t)(r->mmap_offset - delta));
	if (out->map == MAP_FAILED) {
		err = -errno;
		out->map = NULL;
		vsxu_vu__log(vu, "vhost-user: %s: mmap region %u: %s", what, i, strerror(-err));
		return err;
	}
	out->guard = vsxu_memguard_add(out->map, out->map_len);
	if (!out->guard)
		vsxu_vu__log(vu, "vhost-user: %s region %u: no memory-guard slot "
			    "left: a VMM that shrinks its file will crash vsxd", what, i);
	if (!file_sealed(fd))
		vsxu_vu__log(vu, "vhost-user: %s region %u: its file is not "
			    "sealed against shrinking; accesses are guarded", what, i);
	out->gpa = r->gpa;
	out->size = r->size;
	out->uva = r->uva;
	out->host = (char *)out->map + delta;
	return 0;
}

static int vu_set_mem_table(struct vsxu_vu *vu)
{
	const struct vu_memory *m = &vu->rx.p.mem;
	struct vsxu_mem nm = { 0 };
	struct vu_region_id nid[VSXU_MEM_MAX_REGIONS];
	bool reused[VSXU_MEM_MAX_REGIONS] = { false };
	struct stat st[VSXU_MEM_MAX_REGIONS];
	unsigned n;
	int err = 0;

	if (vu->rx.hdr.size < offsetof(struct vu_memory, r))
		return -EINVAL;
	n = m->nregions;
	if (n < 1 || n > VSXU_MEM_MAX_REGIONS ||
	    vu->rx.hdr.size != offsetof(struct vu_memory, r) + n * sizeof(struct vu_region) ||
	    vu->rx.nfds != n) {
		vsxu_vu__log(vu, "vhost-user: SET_MEM_TABLE with %u regions, %u bytes, %u fds",
		       n, vu->rx.hdr.size, vu->rx.nfds);
		return -EINVAL;
	}

	for (unsigned i = 0; i < VSXU_MEM_MAX_REGIONS; i++)
		nid[i] = (struct vu_region_id){ .fd = -1 };
	/* Validate everything before touching the current table. */
	for (unsigned i = 0; i < n; i++) {
		const struct vu_region *r = &m->r[i];

		if (!r->size || r->gpa + r->size < r->gpa || r->uva + r->size < r->uva ||
		    r->mmap_offset + r->size < r->mmap_offset || r->size > SIZE_MAX / 2)
			return -EINVAL;
		if (fstat(vu->rx.fds[i], &st[i]) < 0 || !S_ISREG(st[i].st_mode) ||
		    (uint64_t)st[i].st_size < r->mmap_offset + r->size) {
			vsxu_vu__log(vu, "vhost-user: SET_MEM_TABLE region %u: fd is not a file "
			       "covering the region", i);
			return -EINVAL;
		}
		for (unsigned j = 0; j < i; j++) {
			if (ranges_overlap(r->gpa, r->size, m->r[j].gpa, m->r[j].size) ||
			    ranges_overlap(r->uva, r->size, m->r[j].uva, m->r[j].size))
				return -EINVAL;
		}
	}

	/* Keep mappings the front-end sends again unchanged (QEMU re-sends the
	 * whole table on every change), so buffers in use stay valid. */
	for (unsigned i = 0; i < n; i++) {
		const struct vu_region *r = &m->r[i];

		for (unsigned j = 0; j < vu->mem.n; j++) {
			/* (not one a SIGBUS turned into zero pages: map it again) */
			if (vu->mem.r[j].map && !vsxu_memguard_faulted(vu->mem.r[j].guard) &&
			    vu_same_region(&vu->mem.r[j], &vu->mem_id[j], r, &st[i])) {
				nm.r[i] = vu->mem.r[j];
				nid[i] = vu->mem_id[j];
				vu->mem.r[j].map = NULL; /* moved */
				vu->mem_id[j].fd = -1;
				reused[i] = true;
				break;
			}
		}
		if (reused[i])
			continue;
		err = vsxu_vu__map_region(vu, "SET_MEM_TABLE", i, vu->rx.fds[i], r, &nm.r[i]);
		if (err)
			goto fail;
		nid[i].dev = st[i].st_dev;
		nid[i].ino = st[i].st_ino;
		nid[i].mmap_offset = r->mmap_offset;
		nid[i].fd = vu_take_fd(vu, i);
	}
	nm.n = n;

	/* Used entries pushed so far are published while the old rings are
	 * still mapped. */
	vsxu_vu__flush_all(vu);
	vsxu_vu__mem_clear(vu);
	vu->mem = nm;
	memcpy(vu->mem_id, nid, sizeof(nid));
	for (unsigned i = 0; i < vu->nq; i++) {
		struct vu_queue *q = &vu->q[i];

		if (q->addr_set && vsxu_vu__map_ring(vu, q))
			vsxu_vu__log(vu, "vhost-user: ring %u is outside the new memory table", i);
	}
	vsxu_vu__update(vu, -1);
	return 0;

fail:
	for (unsigned i = 0; i < n; i++) {
		if (reused[i]) {
			/* give it back to the current table */
			for (unsigned j = 0; j < vu->mem.n; j++) {
				if (!vu->mem.r[j].map && vu->mem.r[j].host == nm.r[i].host) {
					vu->mem.r[j].map = nm.r[i].map;
					vu->mem_id[j].fd = nid[i].fd;
					break;
				}
			}
		} else if (nm.r[i].map) {
			vsxu_memguard_del(nm.r[i].guard);
			munmap(nm.r[i].map, nm.r[i].map_len);
			vsxu_vu__close_fd(&nid[i].fd);
		}
	}
	return err;
}

static int vu_set_vring_num(struct vsxu_vu *vu)
{
	const struct vu_state *s = &vu->rx.p.state;
	struct vu_queue *q = vu_queue_of(vu, s->index);

	if (!q || q->vq.started)
		return -EINVAL;
	if (!s->num || s->num > vu->queue_max || (s->num & (s->num - 1))) {
		vsxu_vu__log(vu, "vhost-user: SET_VRING_NUM %u for ring %u refused (max %u)",
		       s->num, s->index, vu->queue_max);
		return -EINVAL;
	}
	q->vq.num = s->num;
	if (q->addr_set)
		vsxu_vu__map_ring(vu, q);
	return 0;
}

static int vu_set_vring_addr(struct vsxu_vu *vu)
{
	const struct vu_addr *a = &vu->rx.p.addr;
	struct vu_queue *q = vu_queue_of(vu, a->index);
	struct vu_queue old;
	int err;

	if (!q || q->vq.started || !q->vq.num)
		return -EINVAL;
	old = *q;
	err = vsxu_vu__place_ring(vu, q, a->desc, a->avail, a->used);
	if (err) {
		vsxu_vu__log(vu, "vhost-user: SET_VRING_ADDR for ring %u outside guest memory",
		       a->index);
		*q = old;
		return err;
	}
	return 0;
}

static int vu_set_vring_base(struct vsxu_vu *vu)
{
	const struct vu_state *s = &vu->rx.p.state;
	struct vu_queue *q = vu_queue_of(vu, s->index);

	if (!q || q->vq.started || s->num > 0xffff)
		return -EINVAL;
	q->vq.last_avail = s->num;
	return 0;
}

static int vu_get_vring_base(struct vsxu_vu *vu)
{
	struct vu_state s = vu->rx.p.state;
	struct vu_queue *q = vu_queue_of(vu, s.index);

	if (vu->rx.hdr.size != sizeof(s) || !q) {
		vsxu_vu__log(vu, "vhost-user: bad GET_VRING_BASE");
		return VU_CLOSE; /* there is no failure answer to give */
	}
	vsxu_vu__stop(vu, true);
	if (q->vq.started) {
		q->stop_valid = true;
		q->stop_base = q->vq.last_avail;
		q->stop_num = q->vq.num;
		q->stop_desc = q->desc_uva;
		q->stop_avail = q->avail_uva;
		q->stop_used = q->used_uva;
	}
	vsxu_vu__unwatch_kick(vu, q);
	vsxu_vu__close_fd(&q->vq.kick_fd);
	q->vq.started = false;
	/* a ring restarts as a new one would: disabled when protocol
	 * features were negotiated (SET_VRING_ENABLE follows), and not
	 * broken */
	if (vu->features & (1ull << VU_F_PROTOCOL_FEATURES))
		q->vq.enabled = false;
	q->vq.broken = false;
	q->vq.notify_off = false;
	q->vq.signalled_valid = false;
	s.num = q->vq.last_avail;
	return vu_send(vu, VU_GET_VRING_BASE, &s, sizeof(s)) ? VU_CLOSE : VU_REPLIED;
}

static int vu_set_vring_fd(struct vsxu_vu *vu)
{
	uint32_t req = vu->rx.hdr.request;
	uint64_t v = vu->rx.p.u64;
	struct vu_queue *q = vu_queue_of(vu, v & VU_VRING_IDX_MASK);
	bool nofd = v & VU_VRING_NOFD;
	int fd, *slot;

	if (!q || (v & ~(VU_VRING_IDX_MASK | VU_VRING_NOFD)) ||
	    vu->rx.nfds != (nofd ? 0u : 1u)) {
		vsxu_vu__log(vu, "vhost-user: request %u for ring %llu with %u fds refused", req,
		       (unsigned long long)(v & VU_VRING_IDX_MASK), vu->rx.nfds);
		return -EINVAL;
	}
	fd = nofd ? -1 : vu_take_fd(vu, 0);

	switch (req) {
	case VU_SET_VRING_CALL:
		slot = &q->vq.call_fd;
		break;
	case VU_SET_VRING_ERR:
		slot = &q->vq.err_fd;
		break;
	default:
		slot = &q->vq.kick_fd;
		vsxu_vu__unwatch_kick(vu, q);
		break;
	}
	vsxu_vu__close_fd(slot);
	*slot = fd;
	if (req != VU_SET_VRING_KICK)
		return 0;

	if (fd >= 0) {
		int fl = fcntl(fd, F_GETFL);

		if (fl >= 0 && !(fl & O_NONBLOCK))
			fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		q->kick_w = vu->loop->watch(vu->loop->ctx, fd, VSXU_EV_READ, vsxu_vu__kick_cb, vu);
		if (!q->kick_w) {
			vsxu_vu__close_fd(slot);
			return -ENOMEM;
		}
	}
	/* The ring (re)starts; its indices are the guest's from here on. */
	vsxu_vq_flush(&q->vq);
	q->vq.started = true;
	q->vq.signalled_valid = false;
	q->vq.pending = 0;
	if (q->vq.used)
		q->vq.used_idx = le16toh(__atomic_load_n((uint16_t *)&q->vq.used->idx,
							 __ATOMIC_RELAXED));
	if (!(vu->features & (1ull << VU_F_PROTOCOL_FEATURES)))
		q->vq.enabled = true;
	vsxu_vu__update(vu, (int)(q - vu->q));
	return 0;
}

static int vu_set_vring_enable(struct vsxu_vu *vu)
{
	const struct vu_state *s = &vu->rx.p.state;
	struct vu_queue *q = vu_queue_of(vu, s->index);

	if (!q || s->num > 1)
		return -EINVAL;
	q->vq.enabled = s->num;
	if (s->num)
		vsxu_vu__update(vu, (int)s->index);
	return 0;
}

static int vu_get_config(struct vsxu_vu *vu)
{
	struct vu_config *c = &vu->rx.p.config;
	uint32_t size = vu->rx.hdr.size;

	if (size < VU_CONFIG_HDR || c->size > VU_CONFIG_MAX ||
	    size != VU_CONFIG_HDR + c->size || c->offset > VU_CONFIG_MAX ||
	    c->offset + c->size > VU_CONFIG_MAX || !vu->ops->get_config ||
	    vu->ops->get_config(vu->dev, c->offset, c->region, c->size) < 0) {
		vsxu_vu__log(vu, "vhost-user: GET_CONFIG refused");
		return vu_send(vu, VU_GET_CONFIG, NULL, 0) ? VU_CLOSE : VU_REPLIED;
	}
	return vu_send(vu, VU_GET_CONFIG, c, size) ? VU_CLOSE : VU_REPLIED;
}

/* Payload size each request must carry; -1: checked by its handler. */
static long vu_payload_size(uint32_t req)
{
	switch (req) {
	case VU_GET_FEATURES:
	case VU_GET_PROTOCOL_FEATURES:
	case VU_GET_QUEUE_NUM:
	case VU_SET_OWNER:
	case VU_RESET_OWNER:
	case VU_RESET_DEVICE:
		return 0;
	case VU_SET_FEATURES:
	case VU_SET_PROTOCOL_FEATURES:
	case VU_SET_VRING_KICK:
	case VU_SET_VRING_CALL:
	case VU_SET_VRING_ERR:
		return sizeof(uint64_t);
	case VU_SET_VRING_NUM:
	case VU_SET_VRING_BASE:
	case VU_SET_VRING_ENABLE:
		return sizeof(struct vu_state);
	case VU_SET_VRING_ADDR:
		return sizeof(struct vu_addr);
	default:
		return -1;
	}
}

static bool vu_takes_fds(uint32_t req)
{
	return req == VU_SET_MEM_TABLE || req == VU_SET_VRING_KICK ||
	       req == VU_SET_VRING_CALL || req == VU_SET_VRING_ERR;
}

static int vu_unknown(struct vsxu_vu *vu, uint32_t req)
{
	unsigned bit = req < 127 ? req : 127;

	if (!(vu->logged[bit / 64] & (1ull << (bit % 64)))) {
		vu->logged[bit / 64] |= 1ull << (bit % 64);
		vsxu_vu__log(vu, "vhost-user: unsupported request %u", req);
	}
	return -EOPNOTSUPP;
}

static int vu_handle(struct vsxu_vu *vu)
{
	const struct vu_hdr *h = &vu->rx.hdr;
	const union vu_payload *p = &vu->rx.p;
	uint32_t req = h->request;
	long want = vu_payload_size(req);

	if (vu->rx.nfds && !vu_takes_fds(req)) {
		vsxu_vu__log(vu, "vhost-user: closing %u fds sent with request %u",
		       vu->rx.nfds, req);
		for (unsigned i = 0; i < vu->rx.nfds; i++)
			vsxu_vu__close_fd(&vu->rx.fds[i]);
		vu->rx.nfds = 0;
	}
	if (want >= 0 && h->size != (uint32_t)want) {
		vsxu_vu__log(vu, "vhost-user: request %u with a %u-byte payload", req, h->size);
		switch (req) {
		case VU_GET_FEATURES:
		case VU_GET_PROTOCOL_FEATURES:
		case VU_GET_QUEUE_NUM:
			return VU_CLOSE; /* must answer, cannot */
		}
		return -EINVAL;
	}

	switch (req) {
	case VU_GET_FEATURES:
		return vu_reply_u64(vu, VU_FEATURES | vu->ops->features);
	case VU_SET_FEATURES:
		return vu_set_features(vu, p->u64);
	case VU_GET_PROTOCOL_FEATURES:
		return vu_reply_u64(vu, VU_PROTOCOL_FEATURES);
	case VU_SET_PROTOCOL_FEATURES:
		if (p->u64 & ~VU_PROTOCOL_FEATURES)
			return -EINVAL;
		vu->protocol_features = p->u64;
		return 0;
	case VU_GET_QUEUE_NUM:
		return vu_reply_u64(vu, vu->nq);
	case VU_SET_OWNER:
		vu->owner = true;
		return 0;
	case VU_RESET_DEVICE:
		if (!(vu->protocol_features & (1ull << VU_PF_RESET_DEVICE)))
			return vu_unknown(vu, req);
		/* fall through */
	case VU_RESET_OWNER:
		vsxu_vu__reset_device(vu);
		vu->features = 0;
		for (unsigned i = 0; i < vu->nq; i++)
			vsxu_vu__apply_features(vu, &vu->q[i].vq);
		if (req == VU_RESET_OWNER)
			vu->owner = false;
		return 0;
	case VU_SET_MEM_TABLE:
		return vu_set_mem_table(vu);
	case VU_SET_VRING_NUM:
		return vu_set_vring_num(vu);
	case VU_SET_VRING_ADDR:
		return vu_set_vring_addr(vu);
	case VU_SET_VRING_BASE:
		return vu_set_vring_base(vu);
	case VU_GET_VRING_BASE:
		return vu_get_vring_base(vu);
	case VU_SET_VRING_KICK:
	case VU_SET_VRING_CALL:
	case VU_SET_VRING_ERR:
		return vu_set_vring_fd(vu);
	case VU_SET_VRING_ENABLE:
		return vu_set_vring_enable(vu);
	case VU_GET_CONFIG:
		return vu_get_config(vu);
	case VU_SET_CONFIG:
		return -EPERM; /* the config space (the CID) is read-only */
	default:
		return vu_unknown(vu, req);
	}
}

/* Can request @req change what vsxu_vu_get_state reports of a live
 * device without stopping it? */
static bool vu_changes_state(uint32_t req)
{
	return req == VU_SET_MEM_TABLE || req == VU_SET_VRING_KICK ||
	       req == VU_SET_VRING_CALL || req == VU_SET_VRING_ENABLE ||
	       req == VU_SET_FEATURES || req == VU_SET_PROTOCOL_FEATURES;
}

/* Can request @req change what vsxu_vu_get_state reports of a paused
 * device? */
static bool vu_changes_paused(uint32_t req)
{
	return vu_changes_state(req) || req == VU_GET_VRING_BASE ||
	       req == VU_SET_VRING_NUM || req == VU_SET_VRING_ADDR ||
	       req == VU_SET_VRING_BASE;
}

static void vu_dispatch(struct vsxu_vu *vu)
{
	bool need_reply = vu->rx.hdr.flags & VU_FLAG_NEED_REPLY;
	bool was_live = vu->live;
	int r = vu_handle(vu);

	vu_rx_reset(vu); /* closes any fd no handler took */
	if (r == VU_CLOSE) {
		vsxu_vu__disconnect(vu);
		return;
	}
	if (was_live && vu->live && r == 0 && vu->ops->changed &&
	    vu_changes_state(vu->rx.hdr.request))
		vu->ops->changed(vu->dev);
	/* Paused, any message but a question may change what
	 * vsxu_vu_get_state says: the stop of the next ring completes it,
	 * the front-end's setting the rings up again makes it a restart
	 * under way. (The start itself goes through ops->start.) */
	else if (!was_live && !vu->live && vu->paused && vu->conn_fd >= 0 &&
		 vu->ops->changed && vu_changes_paused(vu->rx.hdr.request))
		vu->ops->changed(vu->dev);
	if (r != VU_REPLIED && need_reply) {
		uint64_t v = r ? 1 : 0;

		if (vu_send(vu, vu->rx.hdr.request, &v, sizeof(v)))
			vsxu_vu__disconnect(vu);
	}
}

void vsxu_vu__conn_cb(int fd, int events, void *arg)
{
	struct vsxu_vu *vu = arg;
	unsigned budget = 64; /* messages per wakeup; the watch fires again */

	while (budget && vu->conn_fd >= 0) {
		union {
			char buf[CMSG_SPACE(VU_MAX_FDS * sizeof(int))];
			struct cmsghdr align;
		} ctl;
		size_t want = vu->rx.have < sizeof(struct vu_hdr) ?
			sizeof(struct vu_hdr) - vu->rx.have :
			sizeof(struct vu_hdr) + vu->rx.hdr.size - vu->rx.have;
		struct iovec iov = {
			.iov_base = vu->rx.have < sizeof(struct vu_hdr) ?
				(char *)&vu->rx.hdr + vu->rx.have :
				(char *)&vu->rx.p + (vu->rx.have - sizeof(struct vu_hdr)),
			.iov_len = want,
		};
		struct msghdr mh = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = ctl.buf,
			.msg_controllen = sizeof(ctl.buf),
		};
		bool too_many = false;
		ssize_t n;

		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			size_t k;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int rfd;

				memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (vu->rx.nfds < VU_MAX_FDS) {
					vu->rx.fds[vu->rx.nfds++] = rfd;
				} else {
					close(rfd);
					too_many = true;
				}
			}
		}
		if (n <= 0) {
			if (n < 0 || vu->rx.have)
				vsxu_vu__log(vu, "vhost-user: front-end connection %s",
				       n < 0 ? strerror(errno) : "closed inside a message");
			vsxu_vu__disconnect(vu);
			return;
		}
		if (too_many || (mh.msg_flags & MSG_CTRUNC)) {
			vsxu_vu__log(vu, "vhost-user: more than %d fds on one message", VU_MAX_FDS);
			vsxu_vu__disconnect(vu);
			return;
		}
		vu->rx.have += (size_t)n;
		if (vu->rx.have == sizeof(struct vu_hdr)) {
			const struct vu_hdr *h = &vu->rx.hdr;

			if ((h->flags & VU_VERSION_MASK) != VU_VERSION ||
			    h->size > VU_MAX_PAYLOAD) {
				vsxu_vu__log(vu, "vhost-user: bad message header (request %u, "
				       "flags %#x, size %u)", h->request, h->flags, h->size);
				vsxu_vu__disconnect(vu);
				return;
			}
		}
		if (vu->rx.have >= sizeof(struct vu_hdr) &&
		    vu->rx.have == sizeof(struct vu_hdr) + vu->rx.hdr.size) {
			vu_dispatch(vu);
			budget--;
		}
	}
}

/*
 * A front-end that closed and reconnected at once: its EOF may not have
 * been seen yet when the new connection is accepted. Read what the current
 * connection has pending first, so the new one is refused only while the
 * old one is really alive.
 */
static void vu_drain_conn(struct vsxu_vu *vu)
{
	for (unsigned i = 0; i < 16 && vu->conn_fd >= 0; i++) {
		struct pollfd p = { .fd = vu->conn_fd, .events = POLLIN };

		if (poll(&p, 1, 0) != 1)
			return;
		vsxu_vu__conn_cb(vu->conn_fd, VSXU_EV_READ, vu);
	}
}

/* A front-end connects (acceptor.h: a listener out of descriptors backs off). */
static void vu_accept_cb(void *arg, int c, const struct sockaddr *sa, socklen_t len)
{
	struct vsxu_vu *vu = arg;

	(void)sa;
	(void)len;
	if (vu->conn_fd >= 0)
		vu_drain_conn(vu);
	if (vu->conn_fd >= 0) {
		vsxu_vu__log(vu, "vhost-user: refusing a second front-end on %s", vu->path);
		close(c);
		return;
	}
	vu->conn_w = vu->loop->watch(vu->loop->ctx, c, VSXU_EV_READ, vsxu_vu__conn_cb, vu);
	if (!vu->conn_w) {
		close(c);
		return;
	}
	vu->conn_fd = c;
	vu->rx.have = 0;
	vu->rx.nfds = 0;
}

/* The acceptor's lines go to the device's log (which has no levels). */
static void vu_acceptor_log(void *arg, int prio, const char *msg)
{
	(void)prio;
	vsxu_vu__log(arg, "%s", msg);
}

void vsxu_vu__kick_cb(int fd, int events, void *arg)
{
	struct vsxu_vu *vu = arg;
	struct vu_queue *q = NULL;
	uint64_t v;
	ssize_t n;

	for (unsigned i = 0; i < vu->nq; i++) {
		if (vu->q[i].vq.kick_fd == fd && vu->q[i].kick_w) {
			q = &vu->q[i];
			break;
		}
	}
	if (!q)
		return;
	do
		n = read(fd, &v, sizeof(v));
	while (n < 0 && errno == EINTR);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
		/* not an eventfd we can drain: stop watching it */
		vsxu_vu__log(vu, "vhost-user: kick fd of ring %u unusable", (unsigned)(q - vu->q));
		vsxu_vu__unwatch_kick(vu, q);
		return;
	}
	if (vu->live && vsxu_vq_ready(&q->vq) && vu->ops->kick)
		vu->ops->kick(vu->dev, (unsigned)(q - vu->q));
}

/* ---- Listener ---- */

static int vu_listen(struct vsxu_vu *vu, const char *path, mode_t mode, gid_t gid)
{
	struct stat st;
	int fd, err;

	if (!path || !*path)
		return -EINVAL;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* a stale socket is replaced, never a file or a live one; the mode
	 * and group are in force before anyone can connect */
	err = vsx__unix_bind(fd, path, mode ? mode : 0600, gid, NULL);
	if (err < 0)
		goto fail;
	if (stat(path, &st) < 0 || listen(fd, 4) < 0) {
		err = -errno;
		unlink(path);
		goto fail;
	}
	vu->path_dev = st.st_dev;
	vu->path_ino = st.st_ino;
	vu->listen_fd = fd;
	return 0;

fail:
	close(fd);
	return err;
}

/* ---- API ---- */

int vsxu_vu_new(const char *path, mode_t mode, gid_t gid, const struct vsxu_loop *loop,
	       const struct vsxu_vu_ops *ops, void *dev, struct vsxu_vu **out)
{
	struct vsxu_acceptor_conf ac = {
		.loop = loop,
		.cb = vu_accept_cb,
		.log = vu_acceptor_log,
	};
	char name[sizeof(((struct sockaddr_un *)0)->sun_path) + 32];
	struct vsxu_vu *vu;
	int err;

	if (!loop || !ops || !out || !ops->nqueues || ops->nqueues > VSXU_VU_MAX_QUEUES ||
	    ops->min_queues > ops->nqueues)
		return -EINVAL;
	vu = calloc(1, sizeof(*vu));
	if (!vu)
		return -ENOMEM;
	vu->loop = loop;
	vu->ops = ops;
	vu->dev = dev;
	vu->nq = ops->nqueues;
	vu->queue_max = VSXU_VQ_MAX_SIZE;
	vu->listen_fd = vu->conn_fd = -1;
	for (unsigned i = 0; i < VSXU_VU_MAX_QUEUES; i++) {
		vsxu_vq_reset(&vu->q[i].vq);
		vu->q[i].vq.mem = &vu->mem;
	}
	for (unsigned i = 0; i < VSXU_MEM_MAX_REGIONS; i++)
		vu->mem_id[i].fd = -1;
	vu->path = strdup(path ? path : "");
	if (!vu->path) {
		err = -ENOMEM;
		goto err_free;
	}
	err = vu_listen(vu, path, mode, gid);
	if (err)
		goto err_path;
	snprintf(name, sizeof(name), "the vhost-user socket %s", vu->path);
	ac.fd = vu->listen_fd;
	ac.name = name;
	ac.arg = vu;
	ac.log_arg = vu;
	err = vsxu_acceptor_new(&ac, &vu->acc);
	if (err)
		goto err_listen;
	*out = vu;
	return 0;

err_listen:
	close(vu->listen_fd);
	unlink(vu->path);
err_path:
	free(vu->path);
err_free:
	free(vu);
	return err;
}

void vsxu_vu_free(struct vsxu_vu *vu)
{
	struct stat st;

	if (!vu)
		return;
	/* no op is called from here: the device is being torn down */
	vu->live = false;
	vsxu_vu__disconnect(vu);
	for (unsigned i = 0; i < vu->nq; i++)
		vsxu_vu__queue_reset(vu, &vu->q[i]);
	vsxu_vu__mem_clear(vu);
	vsxu_acceptor_free(vu->acc);
	vsxu_vu__close_fd(&vu->listen_fd);
	/* unlink the path only while it is still our socket */
	if (lstat(vu->path, &st) == 0 && st.st_dev == vu->path_dev &&
	    st.st_ino == vu->path_ino)
		unlink(vu->path);
	free(vu->path);
	free(vu);
}

int vsxu_vu_set_queue_max(struct vsxu_vu *vu, unsigned max)
{
	if (!max || max > VSXU_VQ_MAX_SIZE || (max & (max - 1)))
		return -EINVAL;
	vu->queue_max = max;
	return 0;
}

bool vsxu_vu__mem_faulted(const struct vsxu_vu *vu)
{
	return vsxu_mem_faulted(&vu->mem);
}

struct vsxu_vq *vsxu_vu_queue(struct vsxu_vu *vu, unsigned q)
{
	return q < vu->nq ? &vu->q[q].vq : NULL;
}

uint64_t vsxu_vu_features(const struct vsxu_vu *vu)
{
	return vu->features;
}

int vsxu_vu_connected(const struct vsxu_vu *vu)
{
	return vu->conn_fd >= 0;
}
