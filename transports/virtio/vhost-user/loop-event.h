/*
 * The libevent adapter for struct vsxu_loop (transports/virtio/vhost-user/loop.h).
 *
 * The backend asks its host program to watch descriptors and run timers;
 * vsxd, the backend tests and the benchmarks all answer through this one
 * file, on an event_base they own.
 *
 * Watches are level-triggered persistent events (EV_PERSIST); timers are
 * one-shot evtimers. Callbacks may call unwatch/timer_free on their own
 * object (or any other) from inside the callback: nothing is touched after
 * a callback returns.
 */
#ifndef VSXD_EVLOOP_H
#define VSXD_EVLOOP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "loop.h"

struct event_base;

/*
 * The adapter and its state. The caller embeds one (vsxd: one per
 * daemon), initialises it with vsxu_evloop_init and hands &ev->loop to the
 * backend. The fields below @loop are read-only for the caller.
 */
struct vsxu_evloop {
	struct vsxu_loop loop;          /* what the backend gets */
	struct event_base *base;       /* the caller's: outlives every watch */
	uint64_t fired;                /* watch callbacks run, and poller finds
					* (not posts: see enable_post) */
	/* Polling (vsxu_evloop_run): see vsxu_evloop_set_poll. */
	unsigned poll_max_ns;          /* 0: never poll */
	unsigned poll_ns;              /* the window now, in [0, poll_max_ns] */
	uint64_t poll_hits;            /* events that came while polling */
	uint64_t poll_misses;          /* windows that ran out */
	/* vsxu_evloop_set_poller: */
	bool (*poller)(void *arg, bool sleeping);
	void *poller_arg;
	bool poller_on;                /* called while polling, not since */
	struct vsxu_evloop_mail *mail;  /* vsxu_evloop_enable_post; NULL: no post */
	pthread_mutex_t room;          /* with @mail: loop.h's borrow */
	pthread_t holder;              /* the room's holder (loop.h's owns), 0: none */
	struct vsxu_work *work;        /* loop.h's queue, run at each callback's
					* end (the loop's thread alone) */
	struct vsxu_work **work_tail;
};

/*
 * Fill @ev with the libevent adapter over @base. @base stays the caller's:
 * it must outlive @ev and every watch and timer made through it. Nothing
 * is allocated here, so there is nothing to free; watches and timers are
 * freed by unwatch / timer_free. Polling is off.
 */
void vsxu_evloop_init(struct vsxu_evloop *ev, struct event_base *base);

/*
 * Give the loop its post entry (loop.h), for a loop that runs on a thread
 * of its own: callbacks posted from other threads are queued under a
 * mutex and the loop is woken through an eventfd it watches; and its
 * room (loop.h's borrow and give_back): from then on each callback runs
 * holding the room's mutex. A post is
 * not activity for the polling (vsxu_evloop_set_poll): it neither opens
 * nor extends a window, nor counts in @fired. Call it before the loop
 * runs, on the thread that made @ev; vsxu_evloop_fini undoes it. 0, or
 * -errno.
 */
int vsxu_evloop_enable_post(struct vsxu_evloop *ev);

/* Free what vsxu_evloop_enable_post made; callbacks still queued are
 * dropped. After the loop has stopped for good. */
void vsxu_evloop_fini(struct vsxu_evloop *ev);

/*
 * Run @fn(@arg) on @ev's loop thread, through a post, and wait until it
 * has returned: how another thread works on what the loop owns (vsxd's
 * control thread on a worker, a test on its loop thread). Never from the
 * loop's own thread, which would wait for itself. 0, or -errno from the
 * post (@fn did not run). The backend's world stop (backend/shard.c) is
 * the other use of post: it parks every loop at once, which a call cannot.
 */
int vsxu_evloop_call(struct vsxu_evloop *ev, void (*fn)(void *arg), void *arg);

/*
 * Busy-poll for up to @max_us microseconds after a watch fired before
 * sleeping in epoll_wait (0: never poll, the default; at most
 * VSXU_EVLOOP_POLL_MAX_US). The window adapts as QEMU's AioContext polling
 * does: it starts small, doubles while events keep arriving shortly after
 * it ran out, and halves when the wait went beyond @max_us, so an idle or
 * bulk-only loop polls little. Polling trades CPU (the loop spins while a
 * window is open) for the latency of a sleep and wake-up on every event;
 * timers and non-watch events are served while polling as usual.
 */
#define VSXU_EVLOOP_POLL_MAX_US 10000u
void vsxu_evloop_set_poll(struct vsxu_evloop *ev, unsigned max_us);

/*
 * Give the polling something to look at besides the descriptors: while a
 * window is open, @poller(@arg, false) runs after every round, and true
 * from it counts as activity (vsxd: vsxb_router_poll, which reads the
 * guests' rings with their kicks off). Before the loop sleeps again it
 * calls @poller(@arg, true), once; true from that keeps it polling
 * instead. NULL removes it (after its sleeping call, if one is due).
 */
void vsxu_evloop_set_poller(struct vsxu_evloop *ev, bool (*poller)(void *arg, bool sleeping),
			   void *arg);

/*
 * Run the loop as event_base_dispatch does, polling as set above: returns
 * 0 after event_base_loopbreak/loopexit, 1 when no event is left, -1 when
 * libevent failed.
 */
int vsxu_evloop_run(struct vsxu_evloop *ev);

#endif /* VSXD_EVLOOP_H */
