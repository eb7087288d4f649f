/*
 * A libevent loop thread for tests and benchmarks, with vsxd's own vsxu_loop
 * adapter (transports/virtio/vhost-user/loop-event.c); the test reaches the
 * loop thread through the adapter's synchronous call (vsxu_evloop_call), so
 * libevent itself needs no locking: only the loop thread ever touches the
 * base.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>

#include "vhost-user/loop-event.h"
#include "loop_thread.h"

/* ---- The loop thread ---- */

struct vsx_test_loop {
	struct event_base *base;
	struct vsxu_evloop ev;       /* the adapter: ev.loop is the backend's */
	pthread_t thread;
};

static void *loop_thread(void *arg)
{
	struct vsx_test_loop *tl = arg;

	event_base_loop(tl->base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

int vsx_test_loop_new(struct vsx_test_loop **out)
{
	struct vsx_test_loop *tl = calloc(1, sizeof(*tl));
	int err = -ENOMEM;

	if (!tl)
		return -ENOMEM;
	tl->base = event_base_new();
	if (!tl->base)
		goto err_free;
	vsxu_evloop_init(&tl->ev, tl->base);
	/* post: the test's calls, and the backend may park this loop (a VM's
	 * loop of its own) */
	err = vsxu_evloop_enable_post(&tl->ev);
	if (err)
		goto err_base;
	err = -pthread_create(&tl->thread, NULL, loop_thread, tl);
	if (err)
		goto err_base;
	*out = tl;
	return 0;

err_base:
	vsxu_evloop_fini(&tl->ev);
	event_base_free(tl->base);
err_free:
	free(tl);
	return err;
}

const struct vsxu_loop *vsx_test_loop_get(struct vsx_test_loop *tl)
{
	return &tl->ev.loop;
}

void vsx_test_loop_no_room(struct vsx_test_loop *tl)
{
	tl->ev.loop.borrow = NULL;
	tl->ev.loop.give_back = NULL;
}

void vsx_test_loop_call(struct vsx_test_loop *tl, void (*fn)(void *), void *arg)
{
	/* a post fails only when malloc does; a test cannot go on then */
	if (vsxu_evloop_call(&tl->ev, fn, arg) < 0)
		abort();
}

static void loop_break(void *arg)
{
	struct vsx_test_loop *tl = arg;

	event_base_loopbreak(tl->base);
}

void vsx_test_loop_free(struct vsx_test_loop *tl)
{
	if (!tl)
		return;
	vsx_test_loop_call(tl, loop_break, tl);
	pthread_join(tl->thread, NULL);
	vsxu_evloop_fini(&tl->ev);
	event_base_free(tl->base);
	free(tl);
}
