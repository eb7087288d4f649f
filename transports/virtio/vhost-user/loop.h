/*
 * The event loop, as the backend sees it.
 *
 * The vhost-user backend and the vsock engine own no event loop (like QEMU's
 * libvhost-user): they ask their host program to watch descriptors and run
 * timers through this table. vsxd adapts it to libevent (transports/virtio/vhost-user/loop-event.c);
 * tests and benchmarks use the same adapter.
 *
 * A host program may run VMs on several loops, each on its own thread
 * (vsxd's worker threads): every entry but post, borrow, give_back and
 * owns is then called only on the loop's own thread, or on another while
 * that thread is parked (blocked in a callback posted to it, which orders
 * the two).
 *
 * Work (struct vsxu_work, queue) is how the backend's round runs after
 * the event that made it: a callback queues it, and the loop runs it
 * once that callback has returned, the way the kernel's vhost worker
 * runs the work a socket's wake-up queued (vhost_poll_queue).
 */
#ifndef VSXU_LOOP_H
#define VSXU_LOOP_H

#include <stdbool.h>

#define VSXU_EV_READ 0x1
#define VSXU_EV_WRITE 0x2

struct vsxu_watch;
struct vsxu_timer;

typedef void (*vsxu_watch_cb)(int fd, int events, void *arg);
typedef void (*vsxu_timer_cb)(void *arg);
typedef void (*vsxu_post_cb)(void *arg);

/* Work for the loop's thread (queue below), in the caller's memory: one
 * is made once with vsxu_work_init and queued as often as needed. The
 * fields are the loop's while it is queued. */
struct vsxu_work {
	struct vsxu_work *next;        /* the loop's queue */
	vsxu_post_cb cb;
	void *arg;
	bool queued;
};

static inline void vsxu_work_init(struct vsxu_work *w, vsxu_post_cb cb, void *arg)
{
	*w = (struct vsxu_work){ .cb = cb, .arg = arg };
}

struct vsxu_loop {
	void *ctx; /* the adapter's own state (e.g. a struct event_base) */
	/* Watch @fd for @events (VSXU_EV_*; 0 = registered but idle), calling
	 * @cb with the events that fired. Returns NULL on failure. The watch
	 * is freed by unwatch, which the owner calls before closing @fd. */
	struct vsxu_watch *(*watch)(void *ctx, int fd, int events,
				   vsxu_watch_cb cb, void *arg);
	void (*watch_set)(struct vsxu_watch *w, int events);
	void (*unwatch)(struct vsxu_watch *w);
	/* A one-shot timer, disarmed when created. */
	struct vsxu_timer *(*timer)(void *ctx, vsxu_timer_cb cb, void *arg);
	void (*timer_arm)(struct vsxu_timer *t, unsigned ms); /* re-arm replaces */
	void (*timer_disarm)(struct vsxu_timer *t);
	void (*timer_free)(struct vsxu_timer *t);
	/* Queue @w: the loop runs @w->cb(@w->arg) on its thread as soon as
	 * the callback that queued it returns (a watch's, a timer's, a
	 * post's, the poller's), before it waits again or runs any other;
	 * work queued by work runs in the same turn. A queued @w queued
	 * again runs once. From inside one of the loop's callbacks, on its
	 * thread (anywhere else: @w waits for the end of the next
	 * callback); @w's memory stays valid until it has run. */
	void (*queue)(void *ctx, struct vsxu_work *w);
	/* Optional (NULL: a loop only its own thread ever touches). Run
	 * @cb(@arg) on the loop's thread, soon, never before returning; the
	 * one entry that may be called from any thread. 0, or -errno (the
	 * callback will not run). This is how the backend parks a worker
	 * thread's loop while the control thread works on its VMs. */
	int (*post)(void *ctx, vsxu_post_cb cb, void *arg);
	/* Optional (NULL: nothing the loop's callbacks own is ever touched
	 * by another thread outside a post). The loop's room: its thread
	 * holds it while it runs any of the loop's callbacks (watches,
	 * timers, posts), and not while it sleeps or between two. borrow,
	 * from another thread, takes the room if it is free and never
	 * waits: true, and
	 * until give_back the caller may touch what the loop's callbacks
	 * own (a backend's VMs) as the loop's thread would, while that
	 * thread waits at its next callback, if it wakes for one. The
	 * borrower calls none of this table's other entries for the loop
	 * meanwhile (the loop's own structures stay its thread's), and
	 * holds the room for a short while (vsxd: until its round ends). */
	bool (*borrow)(void *ctx);
	void (*give_back)(void *ctx);
	/* Optional, with borrow (NULL: cannot tell). True when the calling
	 * thread holds the room: it runs one of the loop's callbacks, or
	 * borrowed it. For checks (the backend's VSXB_OWNER_CHECKS), never
	 * for deciding what to do. */
	bool (*owns)(void *ctx);
};

#endif
