/*
 * Shared pieces of the fuzz harnesses (see fuzz.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz.h"

size_t fin_bytes(struct fin *f, void *dst, size_t len)
{
	size_t k = len < f->n ? len : f->n;

	memcpy(dst, f->p, k);
	memset((char *)dst + k, 0, len - k);
	f->p += k;
	f->n -= k;
	return k;
}

/* ---- Fake loop ---- */

#define FL_MAX 512

struct vsxu_watch {
	int fd, events;
	vsxu_watch_cb cb;
	void *arg;
	bool used;
};

struct vsxu_timer {
	vsxu_timer_cb cb;
	void *arg;
	bool used, armed;
};

static struct vsxu_watch watches[FL_MAX];
static struct vsxu_timer timers[FL_MAX];

static struct vsxu_watch *fl_watch(void *ctx, int fd, int events, vsxu_watch_cb cb, void *arg)
{
	for (unsigned i = 0; i < FL_MAX; i++) {
		if (!watches[i].used) {
			watches[i] = (struct vsxu_watch){ fd, events, cb, arg, true };
			return &watches[i];
		}
	}
	return NULL;
}

static void fl_watch_set(struct vsxu_watch *w, int events)
{
	w->events = events;
}

static void fl_unwatch(struct vsxu_watch *w)
{
	memset(w, 0, sizeof(*w));
}

static struct vsxu_timer *fl_timer(void *ctx, vsxu_timer_cb cb, void *arg)
{
	for (unsigned i = 0; i < FL_MAX; i++) {
		if (!timers[i].used) {
			timers[i] = (struct vsxu_timer){ cb, arg, true, false };
			return &timers[i];
		}
	}
	return NULL;
}

static void fl_timer_arm(struct vsxu_timer *t, unsigned ms)
{
	t->armed = true;
}

static void fl_timer_disarm(struct vsxu_timer *t)
{
	t->armed = false;
}

static void fl_timer_free(struct vsxu_timer *t)
{
	memset(t, 0, sizeof(*t));
}

/* loop.h's queue: run at the end of each callback, as loop-event.c does */
static struct vsxu_work *work, **work_tail = &work;

static void fl_queue(void *ctx, struct vsxu_work *w)
{
	(void)ctx;
	if (w->queued)
		return;
	w->queued = true;
	w->next = NULL;
	*work_tail = w;
	work_tail = &w->next;
}

static void fl_work_run(void)
{
	struct vsxu_work *w;

	while ((w = work)) {
		work = w->next;
		if (!work)
			work_tail = &work;
		w->queued = false;
		w->cb(w->arg);
	}
}

const struct vsxu_loop fl_loop = {
	.ctx = NULL,
	.watch = fl_watch,
	.watch_set = fl_watch_set,
	.unwatch = fl_unwatch,
	.timer = fl_timer,
	.timer_arm = fl_timer_arm,
	.timer_disarm = fl_timer_disarm,
	.timer_free = fl_timer_free,
	.queue = fl_queue,
};

unsigned fl_run(unsigned rounds)
{
	unsigned ran = 0;

	while (rounds--) {
		struct pollfd p[FL_MAX];
		unsigned idx[FL_MAX], n = 0, again = 0;

		for (unsigned i = 0; i < FL_MAX; i++) {
			if (!watches[i].used || !watches[i].events)
				continue;
			p[n].fd = watches[i].fd;
			p[n].events = (short)(((watches[i].events & VSXU_EV_READ) ? POLLIN : 0) |
					      ((watches[i].events & VSXU_EV_WRITE) ? POLLOUT : 0));
			p[n].revents = 0;
			idx[n++] = i;
		}
		if (!n || poll(p, n, 0) <= 0)
			break;
		for (unsigned k = 0; k < n; k++) {
			struct vsxu_watch *w = &watches[idx[k]];
			int ev = 0;

			if (!p[k].revents)
				continue;
			/* the watch may have gone (or been reused) meanwhile */
			if (!w->used || w->fd != p[k].fd)
				continue;
			if (p[k].revents & (POLLIN | POLLHUP | POLLERR))
				ev |= w->events & VSXU_EV_READ;
			if (p[k].revents & (POLLOUT | POLLHUP | POLLERR))
				ev |= w->events & VSXU_EV_WRITE;
			if (!ev)
				continue;
			w->cb(w->fd, ev, w->arg);
			fl_work_run();
			ran++;
			again++;
		}
		if (!again)
			break;
	}
	return ran;
}

unsigned fl_fire_timers(void)
{
	bool armed[FL_MAX];
	unsigned n = 0;

	for (unsigned i = 0; i < FL_MAX; i++)
		armed[i] = timers[i].used && timers[i].armed;
	for (unsigned i = 0; i < FL_MAX; i++) {
		if (!armed[i] || !timers[i].used || !timers[i].armed)
			continue;
		timers[i].armed = false;
		timers[i].cb(timers[i].arg);
		fl_work_run();
		n++;
	}
	return n;
}

unsigned fl_watches(void)
{
	unsigned n = 0;

	for (unsigned i = 0; i < FL_MAX; i++)
		n += watches[i].used;
	return n;
}

unsigned fl_timers(void)
{
	unsigned n = 0;

	for (unsigned i = 0; i < FL_MAX; i++)
		n += timers[i].used;
	return n;
}

/* ---- Scratch directory ---- */

static char dir[64];

static void dir_cleanup(void)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz: cannot remove %s\n", dir);
}

const char *fz_dir(void)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/vsxfuzz.XXXXXX");
		if (!mkdtemp(dir)) {
			perror("fuzz: mkdtemp");
			abort();
		}
		atexit(dir_cleanup);
	}
	return dir;
}

/* ---- vhost-user front-end ---- */

int fe_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int fe_send_raw(int fd, uint32_t req, uint32_t flags, uint32_t size,
		const void *payload, size_t plen, const int *fds, unsigned nfds)
{
	uint32_t hdr[3] = { req, flags, size };
	struct iovec iov[2] = {
		{ .iov_base = hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)payload, .iov_len = plen },
	};
	union {
		char buf[CMSG_SPACE(16 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = plen ? 2 : 1 };
	ssize_t n;

	if (nfds > 16)
		nfds = 16;
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
	n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return n == (ssize_t)(sizeof(hdr) + plen) ? 0 : -EAGAIN;
}

int fe_send(int fd, uint32_t req, const void *payload, uint32_t size,
	    const int *fds, unsigned nfds)
{
	return fe_send_raw(fd, req, 0x1, size, payload, size, fds, nfds);
}

void fe_drain(int fd)
{
	char buf[4096];

	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

int fe_reply_u64(int fd, uint64_t *v)
{
	struct {
		uint32_t req, flags, size;
		uint64_t v;
	} __attribute__((packed)) r;
	ssize_t n = recv(fd, &r, sizeof(r), MSG_DONTWAIT);

	if (n != (ssize_t)sizeof(r) || r.size != 8)
		return -EPROTO;
	*v = r.v;
	return 0;
}
