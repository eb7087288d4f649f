/*
 * A libevent loop in a thread of its own, with the vsxu_loop adapter for
 * libevent that vsxd uses (transports/virtio/vhost-user/loop-event.c), for
 * tests and benchmarks: the backend lives on the loop thread, the test (or
 * the driver) on its own.
 */
#ifndef VSX_TEST_LOOP_THREAD_H
#define VSX_TEST_LOOP_THREAD_H

#include "vhost-user/loop.h"

struct vsx_test_loop;

/* A new event base, its adapter, and a thread running it. Returns 0 and
 * *@out (freed with vsx_test_loop_free) or a negative errno. */
int vsx_test_loop_new(struct vsx_test_loop **out);
/* The adapter; valid until vsx_test_loop_free. */
const struct vsxu_loop *vsx_test_loop_get(struct vsx_test_loop *tl);
/* The loop lends no room (loop.h's borrow): another thread never works
 * in it. Before the backend uses the loop. */
void vsx_test_loop_no_room(struct vsx_test_loop *tl);
/* Run @fn(@arg) on the loop thread and wait until it returns. Safe from any
 * thread but the loop's own. */
void vsx_test_loop_call(struct vsx_test_loop *tl, void (*fn)(void *), void *arg);
/* Stop the thread and free the base. Free what lives on the loop first
 * (through vsx_test_loop_call). */
void vsx_test_loop_free(struct vsx_test_loop *tl);

#endif
