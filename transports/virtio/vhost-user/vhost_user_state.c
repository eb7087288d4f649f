/*
 * A live vhost-user device's state, read out for a restart and adopted by
 * a new process (vhost_user.h, "Restarts").
 *
 * What a front-end set up by messages it will not send again is rebuilt
 * from the record and the inherited descriptors, checked as the messages
 * would have been (SET_FEATURES, SET_MEM_TABLE, SET_VRING_*), plus what a
 * message cannot get wrong but a stale record can: each descriptor's
 * kind. Nothing changes in the device before every check has passed; the
 * steps that can still fail after that (mmap, watches) undo through the
 * ordinary disconnect, as a front-end gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vhost_user-int.h"
#include "util.h"

/*
 * A paused device: every ring GET_VRING_BASE stopped as it stopped it,
 * and nothing of the next start sent yet, or only what restates the stop
 * (QEMU's cont sends the same size, addresses and base first): then the
 * new process, given the stop, takes the rest of the start as this one
 * would. Otherwise -EAGAIN.
 */
static int paused_state(const struct vsxu_vu *vu, struct vsxu_vu_state *out)
{
	if (vu->features != vu->stop_features || !vu->mem.n)
		return -EAGAIN;
	for (unsigned i = 0; i < vu->nq; i++) {
		const struct vu_queue *q = &vu->q[i];

		if (q->vq.started)
			return -EAGAIN; /* still running, or started again */
		if (!q->stop_valid)
			continue;
		if (q->vq.num != q->stop_num || q->vq.last_avail != q->stop_base ||
		    !q->addr_set || q->desc_uva != q->stop_desc ||
		    q->avail_uva != q->stop_avail || q->used_uva != q->stop_used)
			return -EAGAIN;
		out->queue[out->nqueues++] = (struct vsxu_vu_queue_state){
			.index = i, .num = q->stop_num, .base = q->stop_base,
			.desc = q->stop_desc, .avail = q->stop_avail, .used = q->stop_used,
			.kick_fd = -1, .call_fd = q->vq.call_fd,
		};
	}
	if (!out->nqueues)
		return -EAGAIN;
	out->paused = true;
	return 0;
}

int vsxu_vu_get_state(const struct vsxu_vu *vu, struct vsxu_vu_state *out)
{
	int err;

	memset(out, 0, sizeof(*out));
	if (vu->conn_fd < 0 || (!vu->live && !vu->paused))
		return -ENOTCONN;
	out->features = vu->features;
	out->protocol_features = vu->protocol_features;
	out->conn_fd = vu->conn_fd;
	for (unsigned i = 0; i < vu->mem.n; i++) {
		const struct vsxu_mem_region *r = &vu->mem.r[i];

		if (vu->mem_id[i].fd < 0)
			return -ENOTCONN;
		out->region[i] = (struct vsxu_vu_region_state){
			.gpa = r->gpa, .size = r->size, .uva = r->uva,
			.mmap_offset = vu->mem_id[i].mmap_offset, .fd = vu->mem_id[i].fd,
		};
	}
	out->nregions = vu->mem.n;
	if (!vu->live) {
		err = paused_state(vu, out);
		if (err)
			memset(out, 0, sizeof(*out));
		return err;
	}
	for (unsigned i = 0; i < vu->nq; i++) {
		const struct vu_queue *q = &vu->q[i];

		if (!q->vq.started)
			continue;
		if (q->vq.kick_fd < 0)
			return -EOPNOTSUPP; /* a ring without a kick: nothing to hand over */
		out->queue[out->nqueues++] = (struct vsxu_vu_queue_state){
			.index = i, .num = q->vq.num, .enabled = q->vq.enabled,
			.desc = q->desc_uva, .avail = q->avail_uva, .used = q->used_uva,
			.kick_fd = q->vq.kick_fd, .call_fd = q->vq.call_fd,
		};
	}
	return 0;
}

/* ---- Checks ---- */

static bool is_eventfd(int fd)
{
	char link[64], target[64];
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != 0)
		return false; /* anonymous inodes have no file type */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return true; /* no /proc: an anonymous inode is all we can tell */
	target[n] = '\0';
	return !strcmp(target, "anon_inode:[eventfd]");
}

static bool is_unix_stream(int fd)
{
	int domain = -1, type = -1;
	socklen_t len = sizeof(int);
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
		return false;
	len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return false;
	return domain == AF_UNIX && type == SOCK_STREAM;
}

static bool overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

/* Every descriptor of @s, -1 left out: @n of them into @fds. */
static unsigned state_fds(const struct vsxu_vu_state *s, int *fds)
{
	unsigned n = 0;

	fds[n++] = s->conn_fd;
	for (unsigned i = 0; i < s->nregions && i < VSXU_MEM_MAX_REGIONS; i++)
		fds[n++] = s->region[i].fd;
	for (unsigned i = 0; i < s->nqueues && i < VSXU_VU_MAX_QUEUES; i++) {
		fds[n++] = s->queue[i].kick_fd;
		fds[n++] = s->queue[i].call_fd;
	}
	return n;
}

void vsxu_vu_state_close(const struct vsxu_vu_state *s)
{
	int fds[1 + VSXU_MEM_MAX_REGIONS + 2 * VSXU_VU_MAX_QUEUES];
	unsigned n = state_fds(s, fds);

	for (unsigned i = 0; i < n; i++) {
		bool seen = false;

		for (unsigned j = 0; j < i; j++)
			seen |= fds[j] == fds[i];
		if (fds[i] >= 0 && !seen)
			close(fds[i]);
	}
}

/* Why @s cannot be adopted by @vu, or NULL. */
static const char *state_bad(struct vsxu_vu *vu, const struct vsxu_vu_state *s)
{
	int fds[1 + VSXU_MEM_MAX_REGIONS + 2 * VSXU_VU_MAX_QUEUES];
	bool seen[VSXU_VU_MAX_QUEUES] = { false };
	unsigned n;

	if (!s->nregions || s->nregions > VSXU_MEM_MAX_REGIONS)
		return "no memory table, or too many regions";
	if (!s->nqueues || s->nqueues > vu->nq)
		return "no rings, or more than the device has";
	for (unsigned i = 0; i < s->nqueues; i++) {
		if (s->paused && s->queue[i].kick_fd >= 0)
			return "a paused device with a started ring (a kick eventfd)";
		if (s->queue[i].base > 0xffff || (!s->paused && s->queue[i].base))
			return "a ring's stop index out of range";
	}
	n = state_fds(s, fds);
	for (unsigned i = 0; i < n; i++) {
		bool call = i > s->nregions && (i - 1 - s->nregions) % 2 == 1;
		bool kick = i > s->nregions && !call;

		if (fds[i] < 0 && (call || (kick && s->paused)))
			continue; /* a call fd may be absent, a paused ring has no kick */
		if (fds[i] < 0)
			return "a descriptor is missing";
		for (unsigned j = 0; j < i; j++) {
			if (fds[j] == fds[i])
				return "one descriptor given for two";
		}
	}
	if (!is_unix_stream(s->conn_fd))
		return "the front-end connection is not a Unix stream socket";
	if (s->features & ~(VU_FEATURES | vu->ops->features))
		return "features the device does not offer";
	if (s->protocol_features & ~VU_PROTOCOL_FEATURES)
		return "protocol features not offered";
	for (unsigned i = 0; i < s->nregions; i++) {
		const struct vsxu_vu_region_state *r = &s->region[i];
		struct stat st;

		if (!r->size || r->gpa + r->size < r->gpa || r->uva + r->size < r->uva ||
		    r->mmap_offset + r->size < r->mmap_offset || r->size > SIZE_MAX / 2)
			return "a memory region out of range";
		if (fstat(r->fd, &st) < 0 || !S_ISREG(st.st_mode))
			return "a memory region's descriptor is not a file";
		if ((uint64_t)st.st_size < r->mmap_offset + r->size)
			return "a memory region's file is smaller than the region";
		for (unsigned j = 0; j < i; j++) {
			if (overlap(r->gpa, r->size, s->region[j].gpa, s->region[j].size) ||
			    overlap(r->uva, r->size, s->region[j].uva, s->region[j].size))
				return "memory regions overlap";
		}
	}
	for (unsigned i = 0; i < s->nqueues; i++) {
		const struct vsxu_vu_queue_state *q = &s->queue[i];

		if (q->index >= vu->nq || seen[q->index])
			return "a ring index out of range or repeated";
		seen[q->index] = true;
		if (!q->num || q->num > vu->queue_max || (q->num & (q->num - 1)))
			return "a ring size the device does not accept";
		if ((q->kick_fd >= 0 && !is_eventfd(q->kick_fd)) ||
		    (q->call_fd >= 0 && !is_eventfd(q->call_fd)))
			return "a kick or call descriptor is not an eventfd";
	}
	return NULL;
}

/* ---- Adoption ---- */

/* The watch on the front-end's connection. */
static int watch_conn(struct vsxu_vu *vu)
{
	vsx__set_nonblock(vu->conn_fd, true);
	vu->conn_w = vu->loop->watch(vu->loop->ctx, vu->conn_fd, VSXU_EV_READ,
				     vsxu_vu__conn_cb, vu);
	return vu->conn_w ? 0 : -ENOMEM;
}

/*
 * @s paused, its memory mapped: each ring as GET_VRING_BASE left it in the
 * old process (placed, at its base, its stop recorded), stopped; the
 * device paused at the features it stopped with. Nothing starts: the
 * front-end's cont does, compared with the stop as the old process would
 * have compared it (vu_start_how).
 */
static int adopt_paused(struct vsxu_vu *vu, const struct vsxu_vu_state *s)
{
	for (unsigned i = 0; i < s->nqueues; i++) {
		const struct vsxu_vu_queue_state *qs = &s->queue[i];
		struct vu_queue *q = &vu->q[qs->index];

		q->vq.num = qs->num;
		if (vsxu_vu__place_ring(vu, q, qs->desc, qs->avail, qs->used)) {
			vsxu_vu__log(vu, "vhost-user: cannot adopt the paused device on %s: "
				    "ring %u outside guest memory", vu->path, qs->index);
			return -EINVAL;
		}
		q->vq.last_avail = (uint16_t)qs->base;
		q->vq.started = false;
		q->vq.enabled = !(vu->features & (1ull << VU_F_PROTOCOL_FEATURES));
		q->stop_valid = true;
		q->stop_base = (uint16_t)qs->base;
		q->stop_num = qs->num;
		q->stop_desc = qs->desc;
		q->stop_avail = qs->avail;
		q->stop_used = qs->used;
	}
	vu->paused = true;
	vu->stop_features = vu->features;
	return watch_conn(vu);
}

int vsxu_vu_adopt(struct vsxu_vu *vu, const struct vsxu_vu_state *s)
{
	const char *why;
	int err = -EINVAL;

	if (vu->conn_fd >= 0) {
		vsxu_vu__log(vu, "vhost-user: cannot adopt a device on %s: a front-end "
			    "is connected", vu->path);
		vsxu_vu_state_close(s);
		return -EBUSY;
	}
	why = state_bad(vu, s);
	if (why) {
		vsxu_vu__log(vu, "vhost-user: cannot adopt the device on %s: %s", vu->path, why);
		vsxu_vu_state_close(s);
		return -EINVAL;
	}

	/* From here every descriptor is the device's: a failure disconnects. */
	vu->conn_fd = s->conn_fd;
	vu->rx.have = 0;
	vu->rx.nfds = 0;
	vu->owner = true;
	vu->features = s->features;
	vu->protocol_features = s->protocol_features;
	for (unsigned i = 0; i < s->nregions; i++) {
		vu->mem_id[i].fd = s->region[i].fd;
		vu->mem_id[i].mmap_offset = s->region[i].mmap_offset;
	}
	for (unsigned i = 0; i < s->nqueues; i++) {
		struct vu_queue *q = &vu->q[s->queue[i].index];

		q->vq.kick_fd = s->queue[i].kick_fd;
		q->vq.call_fd = s->queue[i].call_fd;
	}

	for (unsigned i = 0; i < s->nregions; i++) {
		const struct vsxu_vu_region_state *r = &s->region[i];
		struct vu_region vr = { r->gpa, r->size, r->uva, r->mmap_offset };
		struct stat st;

		err = vsxu_vu__map_region(vu, "adopt", i, r->fd, &vr, &vu->mem.r[i]);
		if (err)
			goto fail;
		vu->mem.n = i + 1;
		if (fstat(r->fd, &st) == 0) {
			vu->mem_id[i].dev = st.st_dev;
			vu->mem_id[i].ino = st.st_ino;
		}
	}
	for (unsigned i = 0; i < vu->nq; i++)
		vsxu_vu__apply_features(vu, &vu->q[i].vq);
	if (s->paused) {
		err = adopt_paused(vu, s);
		if (err)
			goto fail;
		return 0;
	}
	for (unsigned i = 0; i < s->nqueues; i++) {
		const struct vsxu_vu_queue_state *qs = &s->queue[i];
		struct vu_queue *q = &vu->q[qs->index];
		int fl;

		q->vq.num = qs->num;
		err = vsxu_vu__place_ring(vu, q, qs->desc, qs->avail, qs->used);
		if (err) {
			vsxu_vu__log(vu, "vhost-user: cannot adopt the device on %s: ring %u "
				    "outside guest memory", vu->path, qs->index);
			goto fail;
		}
		/* The ring goes on from what the guest was given back: chains
		 * taken and never returned are taken again. */
		q->vq.last_avail = q->vq.used_idx;
		fl = fcntl(q->vq.kick_fd, F_GETFL);
		if (fl >= 0 && !(fl & O_NONBLOCK))
			fcntl(q->vq.kick_fd, F_SETFL, fl | O_NONBLOCK);
		q->kick_w = vu->loop->watch(vu->loop->ctx, q->vq.kick_fd, VSXU_EV_READ,
					    vsxu_vu__kick_cb, vu);
		if (!q->kick_w) {
			err = -ENOMEM;
			goto fail;
		}
		q->vq.started = true;
		q->vq.enabled = qs->enabled ||
				!(vu->features & (1ull << VU_F_PROTOCOL_FEATURES));
	}
	err = watch_conn(vu);
	if (err)
		goto fail;
	vsxu_vu__update(vu, -1);
	return 0;

fail:
	vsxu_vu__disconnect(vu);
	return err;
}
