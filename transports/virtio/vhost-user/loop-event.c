/*
 * struct vsxu_loop over libevent 2.1.
 *
 * A watch is one heap event (event_new) with EV_PERSIST, level-triggered,
 * whose callback is a trampoline that translates EV_READ/EV_WRITE into
 * VSXU_EV_*. Changing the interest (watch_set) deletes the event, assigns it
 * again with the new mask and the same trampoline and argument, and adds it
 * back when the mask is not empty: the callback is never lost, and an idle
 * watch (mask 0) stays allocated but not pending.
 *
 * A timer is one evtimer; arming a pending (or already fired but not yet
 * run) timer reschedules it, as event_add does for timeouts.
 *
 * Freeing: event_del, then event_free, then our struct. Doing that from
 * inside the object's own callback is safe: libevent has taken the event
 * off its active queue before calling us, and the trampolines touch
 * nothing after the user callback returns.
 *
 * Polling: vsxu_evloop_run counts watch callbacks (@fired) around each
 * round of the loop. After a round that ran one, it keeps going with
 * non-blocking rounds (epoll_wait with a zero timeout) until a window of
 * @poll_ns has passed without one, then sleeps. How long the sleep lasted
 * decides the next window: an event soon after the window ran out means
 * the window was too short (double it), a sleep longer than the maximum
 * means there is nothing to gain (halve it). A poller (set_poller) is
 * asked after each non-blocking round, and told before the loop sleeps.
 *
 * Posting (vsxu_evloop_enable_post): a mailbox, the one part of the adapter
 * other threads touch. A post appends to a list under the mailbox's mutex
 * and, when the list was empty, writes the eventfd; the loop's read event
 * on it takes the whole list under the mutex and runs it outside, in
 * order. A callback posted from inside a posted callback runs at the next
 * wake-up, not in the same batch. That event is a plain libevent one, not
 * a watch, so posts stay out of @fired: they are control traffic (vsxd:
 * world stops, status requests, set-up across threads), and a polling
 * window opened by one would only burn CPU.
 *
 * The room (loop.h's borrow and give_back, made with the mailbox): a
 * mutex the loop's thread holds around each callback it runs (a watch's,
 * a timer's, each posted one, the poller), taken by another thread only
 * with a trylock. The loop's thread takes it with nothing else held,
 * and a borrower never waits for it: no thread ever waits for a room
 * while holding one, so no two wait for each other.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "loop-event.h"

#define VSXU_EV_ALL (VSXU_EV_READ | VSXU_EV_WRITE)

struct vsxu_watch {
	struct event *ev;       /* owned: event_new'd, event_free'd in unwatch */
	struct vsxu_evloop *el;  /* the adapter it was made through */
	vsxu_watch_cb cb;
	void *arg;              /* the caller's */
	int fd;                 /* the caller's; never closed here */
	int events;             /* VSXU_EV_* asked for now */
};

struct vsxu_timer {
	struct event *ev;       /* owned: evtimer_new'd, freed in timer_free */
	struct vsxu_evloop *el;  /* the adapter it was made through */
	vsxu_timer_cb cb;
	void *arg;              /* the caller's */
};

static short to_libevent(int events)
{
	short what = 0;

	if (events & VSXU_EV_READ)
		what |= EV_READ;
	if (events & VSXU_EV_WRITE)
		what |= EV_WRITE;
	return what;
}

/* ---- The room (vsxu_evloop_enable_post) ---- */

/* Who holds the room (loop.h's owns): written by the holder alone, under
 * the room's mutex; 0 (no thread's id on Linux) when nobody does. */
static void room_held(struct vsxu_evloop *el, bool held)
{
	__atomic_store_n(&el->holder, held ? pthread_self() : (pthread_t)0, __ATOMIC_RELAXED);
}

static void room_enter(struct vsxu_evloop *el)
{
	if (el->mail) {
		pthread_mutex_lock(&el->room);
		room_held(el, true);
	}
}

static void room_leave(struct vsxu_evloop *el)
{
	if (el->mail) {
		room_held(el, false);
		pthread_mutex_unlock(&el->room);
	}
}

static bool ev_borrow(void *ctx)
{
	struct vsxu_evloop *el = ctx;

	if (pthread_mutex_trylock(&el->room))
		return false;
	room_held(el, true);
	return true;
}

static void ev_give_back(void *ctx)
{
	struct vsxu_evloop *el = ctx;

	room_held(el, false);
	pthread_mutex_unlock(&el->room);
}

/* Only the holder ever finds its own id here: another thread's read may
 * see a stale value, never its own. */
static bool ev_owns(void *ctx)
{
	struct vsxu_evloop *el = ctx;

	return pthread_equal(__atomic_load_n(&el->holder, __ATOMIC_RELAXED), pthread_self());
}

/* ---- Work (loop.h's queue) ---- */

static void ev_queue(void *ctx, struct vsxu_work *w)
{
	struct vsxu_evloop *el = ctx;

	if (w->queued)
		return;
	w->queued = true;
	w->next = NULL;
	if (!el->work)
		el->work_tail = &el->work;
	*el->work_tail = w;
	el->work_tail = &w->next;
}

/* At the end of each callback, still in the room: what it queued, and
 * what that queues. */
static void work_run(struct vsxu_evloop *el)
{
	struct vsxu_work *w;

	while ((w = el->work)) {
		el->work = w->next;
		w->queued = false;
		w->cb(w->arg);
	}
}

/* ---- Watches ---- */

static void watch_fire(evutil_socket_t fd, short what, void *arg)
{
	struct vsxu_watch *w = arg;
	struct vsxu_evloop *el;
	int events = 0;

	if (what & EV_READ)
		events |= VSXU_EV_READ;
	if (what & EV_WRITE)
		events |= VSXU_EV_WRITE;
	events &= w->events;
	if (!events)
		return;
	el = w->el;
	el->fired++;
	room_enter(el);
	w->cb((int)fd, events, w->arg);
	work_run(el);
	room_leave(el);
	/* @w may have been freed by the callback: do not touch it. */
}

static struct vsxu_watch *ev_watch(void *ctx, int fd, int events,
				  vsxu_watch_cb cb, void *arg)
{
	struct vsxu_evloop *el = ctx;
	struct vsxu_watch *w;

	if (!el || fd < 0 || !cb || (events & ~VSXU_EV_ALL))
		return NULL;

	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->el = el;
	w->cb = cb;
	w->arg = arg;
	w->fd = fd;
	w->events = events;
	w->ev = event_new(el->base, fd, to_libevent(events) | EV_PERSIST, watch_fire, w);
	if (!w->ev)
		goto err_free;
	if (events && event_add(w->ev, NULL) < 0)
		goto err_event;
	return w;

err_event:
	event_free(w->ev);
err_free:
	free(w);
	return NULL;
}

static void ev_watch_set(struct vsxu_watch *w, int events)
{
	struct event_base *base;

	events &= VSXU_EV_ALL;
	if (!w || events == w->events)
		return;

	base = event_get_base(w->ev);
	event_del(w->ev);
	/* Same storage, same trampoline and argument: only the mask changes. */
	event_assign(w->ev, base, w->fd, to_libevent(events) | EV_PERSIST, watch_fire, w);
	w->events = events;
	if (events)
		event_add(w->ev, NULL);
}

static void ev_unwatch(struct vsxu_watch *w)
{
	if (!w)
		return;
	event_del(w->ev);
	event_free(w->ev);
	free(w);
}

/* ---- Timers ---- */

static void timer_fire(evutil_socket_t fd, short what, void *arg)
{
	struct vsxu_timer *t = arg;
	struct vsxu_evloop *el = t->el;

	room_enter(el);
	t->cb(t->arg);
	work_run(el);
	room_leave(el);
	/* @t may have been freed (or re-armed) by the callback. */
}

static struct vsxu_timer *ev_timer(void *ctx, vsxu_timer_cb cb, void *arg)
{
	struct vsxu_evloop *el = ctx;
	struct vsxu_timer *t;

	if (!el || !cb)
		return NULL;

	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->el = el;
	t->cb = cb;
	t->arg = arg;
	t->ev = evtimer_new(el->base, timer_fire, t);
	if (!t->ev) {
		free(t);
		return NULL;
	}
	return t;
}

static void ev_timer_arm(struct vsxu_timer *t, unsigned ms)
{
	struct timeval tv = {
		.tv_sec = ms / 1000,
		.tv_usec = (suseconds_t)(ms % 1000) * 1000,
	};

	if (t)
		evtimer_add(t->ev, &tv);
}

static void ev_timer_disarm(struct vsxu_timer *t)
{
	if (t)
		evtimer_del(t->ev);
}

static void ev_timer_free(struct vsxu_timer *t)
{
	if (!t)
		return;
	evtimer_del(t->ev);
	event_free(t->ev);
	free(t);
}

/* ---- Posting ---- */

struct mail {
	struct mail *next;
	vsxu_post_cb cb;
	void *arg;
};

struct vsxu_evloop_mail {
	struct vsxu_evloop *el;
	pthread_mutex_t mu;
	struct mail *head, **tail;   /* under @mu */
	int efd;
	struct event *ev;            /* the loop's read event on @efd (not a watch) */
};

static void mail_run(evutil_socket_t fd, short what, void *arg)
{
	struct vsxu_evloop_mail *mb = arg;
	struct mail *m, *next;
	uint64_t v;

	(void)what;
	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&mb->mu);
	m = mb->head;
	mb->head = NULL;
	mb->tail = &mb->head;
	pthread_mutex_unlock(&mb->mu);
	for (; m; m = next) {
		next = m->next;
		room_enter(mb->el);
		m->cb(m->arg);
		work_run(mb->el);
		room_leave(mb->el);
		free(m);
	}
}

static int ev_post(void *ctx, vsxu_post_cb cb, void *arg)
{
	struct vsxu_evloop *el = ctx;
	struct vsxu_evloop_mail *mb = el->mail;
	struct mail *m;
	uint64_t one = 1;
	bool wake;

	if (!mb || !cb)
		return -EINVAL;
	m = malloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	*m = (struct mail){ .cb = cb, .arg = arg };
	pthread_mutex_lock(&mb->mu);
	wake = !mb->head;
	*mb->tail = m;
	mb->tail = &m->next;
	pthread_mutex_unlock(&mb->mu);
	/* an eventfd write only fails when the counter would overflow, which
	 * needs 2^64 - 1 unread posts: the loop is awake anyway */
	if (wake && write(mb->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

struct call {
	void (*fn)(void *arg);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
};

static void call_there(void *arg)
{
	struct call *c = arg;

	c->fn(c->arg);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

int vsxu_evloop_call(struct vsxu_evloop *ev, void (*fn)(void *arg), void *arg)
{
	struct call c = { .fn = fn, .arg = arg };
	int rc;

	pthread_mutex_init(&c.mu, NULL);
	pthread_cond_init(&c.cv, NULL);
	rc = ev_post(ev, call_there, &c);
	if (rc == 0) {
		pthread_mutex_lock(&c.mu);
		while (!c.done)
			pthread_cond_wait(&c.cv, &c.mu);
		pthread_mutex_unlock(&c.mu);
	}
	pthread_cond_destroy(&c.cv);
	pthread_mutex_destroy(&c.mu);
	return rc;
}

int vsxu_evloop_enable_post(struct vsxu_evloop *ev)
{
	struct vsxu_evloop_mail *mb;

	if (ev->mail)
		return 0;
	mb = calloc(1, sizeof(*mb));
	if (!mb)
		return -ENOMEM;
	pthread_mutex_init(&mb->mu, NULL);
	mb->el = ev;
	mb->tail = &mb->head;
	mb->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (mb->efd < 0)
		goto err;
	mb->ev = event_new(ev->base, mb->efd, EV_READ | EV_PERSIST, mail_run, mb);
	if (!mb->ev || event_add(mb->ev, NULL) < 0)
		goto err;
	pthread_mutex_init(&ev->room, NULL);
	ev->mail = mb;
	ev->loop.post = ev_post;
	ev->loop.borrow = ev_borrow;
	ev->loop.give_back = ev_give_back;
	ev->loop.owns = ev_owns;
	return 0;
err:
	if (mb->ev)
		event_free(mb->ev);
	if (mb->efd >= 0)
		close(mb->efd);
	pthread_mutex_destroy(&mb->mu);
	free(mb);
	return -ENOMEM;
}

void vsxu_evloop_fini(struct vsxu_evloop *ev)
{
	struct vsxu_evloop_mail *mb = ev->mail;
	struct mail *m, *next;

	if (!mb)
		return;
	ev->loop.post = NULL;
	ev->loop.borrow = NULL;
	ev->loop.give_back = NULL;
	ev->loop.owns = NULL;
	ev->mail = NULL;
	pthread_mutex_destroy(&ev->room);
	event_free(mb->ev);
	close(mb->efd);
	for (m = mb->head; m; m = next) {
		next = m->next;
		free(m);
	}
	pthread_mutex_destroy(&mb->mu);
	free(mb);
}

void vsxu_evloop_init(struct vsxu_evloop *ev, struct event_base *base)
{
	*ev = (struct vsxu_evloop){
		.loop = {
			.ctx = ev,
			.watch = ev_watch,
			.watch_set = ev_watch_set,
			.unwatch = ev_unwatch,
			.timer = ev_timer,
			.timer_arm = ev_timer_arm,
			.timer_disarm = ev_timer_disarm,
			.timer_free = ev_timer_free,
			.queue = ev_queue,
		},
		.base = base,
	};
}

/* ---- Polling ---- */

#define POLL_START_NS 4000u     /* the first window (QEMU's too) */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void vsxu_evloop_set_poll(struct vsxu_evloop *ev, unsigned max_us)
{
	if (max_us > VSXU_EVLOOP_POLL_MAX_US)
		max_us = VSXU_EVLOOP_POLL_MAX_US;
	ev->poll_max_ns = max_us * 1000u;
	if (ev->poll_ns > ev->poll_max_ns)
		ev->poll_ns = ev->poll_max_ns;
}

void vsxu_evloop_set_poller(struct vsxu_evloop *ev, bool (*poller)(void *arg, bool sleeping),
			   void *arg)
{
	if (ev->poller_on && ev->poller)
		ev->poller(ev->poller_arg, true);
	ev->poller_on = false;
	ev->poller = poller;
	ev->poller_arg = arg;
}

/* A watch fired @slept_ns after the loop last went to sleep; @missed: that
 * sleep began when a polling window ran out. */
static void poll_adapt(struct vsxu_evloop *ev, uint64_t slept_ns, bool missed)
{
	if (slept_ns > ev->poll_max_ns) {
		ev->poll_ns /= 2;
		if (ev->poll_ns < POLL_START_NS)
			ev->poll_ns = 0;
	} else if (missed || !ev->poll_ns) {
		ev->poll_ns = ev->poll_ns ? ev->poll_ns * 2 : POLL_START_NS;
		if (ev->poll_ns > ev->poll_max_ns)
			ev->poll_ns = ev->poll_max_ns;
	}
}

/* The poller is one of the loop's callbacks: in the room. */
static bool poller_call(struct vsxu_evloop *ev, bool sleeping)
{
	bool found;

	room_enter(ev);
	found = ev->poller(ev->poller_arg, sleeping);
	work_run(ev);
	room_leave(ev);
	return found;
}

int vsxu_evloop_run(struct vsxu_evloop *ev)
{
	uint64_t deadline = 0;  /* polling until then; 0: not polling */
	uint64_t asleep = 0;    /* when the loop last went to sleep */
	bool missed = false;    /* ... because a window ran out */
	uint64_t before, now;
	bool found;
	int r;

	for (;;) {
		before = ev->fired;
		if (deadline && ev->poll_ns) {
			r = event_base_loop(ev->base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
			if (r)
				return r;
			if (event_base_got_break(ev->base) || event_base_got_exit(ev->base))
				return 0;
			if (ev->poller) {
				ev->poller_on = true;
				if (poller_call(ev, false))
					ev->fired++;
				/* a break asked for by the poller: the next
				 * event_base_loop would forget it */
				if (event_base_got_break(ev->base))
					return 0;
			}
			now = now_ns();
			if (ev->fired != before) {
				ev->poll_hits++;
				deadline = now + ev->poll_ns;
			} else if (now >= deadline) {
				ev->poll_misses++;
				deadline = 0;
				asleep = now;
				missed = true;
			}
			continue;
		}
		if (ev->poller_on) {
			/* the poller turns its notifications back on and looks
			 * once more: what it finds keeps the loop polling */
			ev->poller_on = false;
			found = poller_call(ev, true);
			if (event_base_got_break(ev->base))
				return 0;
			if (found && ev->poll_ns) {
				ev->fired++;
				ev->poll_hits++;
				now = now_ns();
				deadline = now + ev->poll_ns;
				asleep = 0;
				missed = false;
				continue;
			}
		}
		if (ev->poll_max_ns && !asleep)
			asleep = now_ns();
		r = event_base_loop(ev->base, EVLOOP_ONCE);
		if (r)
			return r;
		if (event_base_got_break(ev->base) || event_base_got_exit(ev->base))
			return 0;
		/* Only the data path's watches count: a timer, a signal, a
		 * post or the control socket waking the loop changes nothing. */
		if (!ev->poll_max_ns || ev->fired == before)
			continue;
		now = now_ns();
		poll_adapt(ev, now - asleep, missed);
		missed = false;
		asleep = 0;
		deadline = ev->poll_ns ? now + ev->poll_ns : 0;
	}
}
