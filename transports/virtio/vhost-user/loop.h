/*
 * The event loop, as the backend sees it.
 *
 * The vhost-user backend and the vsock engine own no event loop (like QEMU's
 * libvhost-user): they ask their host program to watch descriptors and run
 * timers through this table. vsxd adapts it to libevent (transports/virtio/vhost-user/loop-event.c);
 * tests and benchmarks use the same adapter.
 */
#ifndef VSX_LOOP_H
#define VSX_LOOP_H

#define VSX_EV_READ 0x1
#define VSX_EV_WRITE 0x2

struct vsx_watch;
struct vsx_timer;

typedef void (*vsx_watch_cb)(int fd, int events, void *arg);
typedef void (*vsx_timer_cb)(void *arg);

struct vsx_loop {
	void *ctx; /* the adapter's own state (e.g. a struct event_base) */
	/* Watch @fd for @events (VSX_EV_*; 0 = registered but idle), calling
	 * @cb with the events that fired. Returns NULL on failure. The watch
	 * is freed by unwatch, which the owner calls before closing @fd. */
	struct vsx_watch *(*watch)(void *ctx, int fd, int events,
				   vsx_watch_cb cb, void *arg);
	void (*watch_set)(struct vsx_watch *w, int events);
	void (*unwatch)(struct vsx_watch *w);
	/* A one-shot timer, disarmed when created. */
	struct vsx_timer *(*timer)(void *ctx, vsx_timer_cb cb, void *arg);
	void (*timer_arm)(struct vsx_timer *t, unsigned ms); /* re-arm replaces */
	void (*timer_disarm)(struct vsx_timer *t);
	void (*timer_free)(struct vsx_timer *t);
};

#endif
