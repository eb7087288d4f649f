/*
 * A libevent loop thread for tests and benchmarks, with vsxd's own vsx_loop
 * adapter (transports/virtio/vhost-user/loop-event.c) and a synchronous call channel (an eventfd
 * watched by the loop), so libevent itself needs no locking: only the loop
 * thread ever touches the base.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "vhost-user/loop-event.h"
#include "loop_event.h"

/* ---- The loop thread ---- */

struct vsx_test_loop {
	struct event_base *base;
	struct vsx_evloop ev;       /* the adapter: ev.loop is the backend's */
	pthread_t thread;
	int efd;
	struct event *ctl;
	pthread_mutex_t call_lock;  /* one caller at a time */
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	void (*fn)(void *);
	void *arg;
	bool done, stop;
};

static void ctl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct vsx_test_loop *tl = arg;
	void (*fn)(void *);
	uint64_t v;

	if (read(tl->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&tl->lock);
	fn = tl->fn;
	tl->fn = NULL;
	pthread_mutex_unlock(&tl->lock);
	if (fn) {
		fn(tl->arg);
		pthread_mutex_lock(&tl->lock);
		tl->done = true;
		pthread_cond_broadcast(&tl->done_cond);
		pthread_mutex_unlock(&tl->lock);
	}
	pthread_mutex_lock(&tl->lock);
	if (tl->stop)
		event_base_loopbreak(tl->base);
	pthread_mutex_unlock(&tl->lock);
}

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
	tl->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (tl->efd < 0) {
		err = -errno;
		goto err_free;
	}
	tl->base = event_base_new();
	if (!tl->base)
		goto err_efd;
	tl->ctl = event_new(tl->base, tl->efd, EV_READ | EV_PERSIST, ctl_cb, tl);
	if (!tl->ctl || event_add(tl->ctl, NULL) < 0)
		goto err_base;
	vsx_evloop_init(&tl->ev, tl->base);
	/* post: the backend may park this loop (a VM's loop of its own) */
	err = vsx_evloop_enable_post(&tl->ev);
	if (err)
		goto err_base;
	err = -ENOMEM;
	pthread_mutex_init(&tl->call_lock, NULL);
	pthread_mutex_init(&tl->lock, NULL);
	pthread_cond_init(&tl->done_cond, NULL);
	err = -pthread_create(&tl->thread, NULL, loop_thread, tl);
	if (err)
		goto err_base;
	*out = tl;
	return 0;

err_base:
	vsx_evloop_fini(&tl->ev);
	if (tl->ctl)
		event_free(tl->ctl);
	event_base_free(tl->base);
err_efd:
	close(tl->efd);
err_free:
	free(tl);
	return err;
}

const struct vsx_loop *vsx_test_loop_get(struct vsx_test_loop *tl)
{
	return &tl->ev.loop;
}

static void ctl_poke(struct vsx_test_loop *tl)
{
	uint64_t one = 1;

	while (write(tl->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void vsx_test_loop_call(struct vsx_test_loop *tl, void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&tl->call_lock);
	pthread_mutex_lock(&tl->lock);
	tl->fn = fn;
	tl->arg = arg;
	tl->done = false;
	pthread_mutex_unlock(&tl->lock);
	ctl_poke(tl);
	pthread_mutex_lock(&tl->lock);
	while (!tl->done)
		pthread_cond_wait(&tl->done_cond, &tl->lock);
	pthread_mutex_unlock(&tl->lock);
	pthread_mutex_unlock(&tl->call_lock);
}

void vsx_test_loop_free(struct vsx_test_loop *tl)
{
	if (!tl)
		return;
	pthread_mutex_lock(&tl->lock);
	tl->stop = true;
	pthread_mutex_unlock(&tl->lock);
	ctl_poke(tl);
	pthread_join(tl->thread, NULL);
	vsx_evloop_fini(&tl->ev);
	event_free(tl->ctl);
	event_base_free(tl->base);
	close(tl->efd);
	pthread_mutex_destroy(&tl->call_lock);
	pthread_mutex_destroy(&tl->lock);
	pthread_cond_destroy(&tl->done_cond);
	free(tl);
}
