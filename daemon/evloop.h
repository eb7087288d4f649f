/*
 * The libevent adapter for struct vsx_loop (transports/virtio/loop.h).
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

#include "../transports/virtio/loop.h"

struct event_base;

/*
 * Fill @loop with the libevent adapter over @base. @base stays the
 * caller's: it must outlive @loop and every watch and timer made through
 * it. Nothing is allocated here, so there is nothing to free; watches and
 * timers are freed by unwatch / timer_free.
 */
void vsx_evloop_init(struct vsx_loop *loop, struct event_base *base);

#endif /* VSXD_EVLOOP_H */
