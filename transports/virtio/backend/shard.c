/*
 * Shards and world stops (struct vsxb_shard in backend-int.h says what is
 * shared between threads and how).
 *
 * A world stop parks every foreign shard: a park callback is posted to
 * each one's loop, and the control thread waits until all have arrived.
 * A parked thread sits in that callback, blocked on the park mutex, until
 * the stop ends; it holds no VM state then (it was between two events of
 * its loop), so the control thread may read and change any VM, and its
 * loop's watches and timers, as if it were that thread. The mutex hand-off
 * at both ends orders everything done before and after.
 *
 * Only shards that serve a VM are parked: a host program may stop a loop
 * once its last VM is freed (vsxd does at exit), and the router outlives it.
 *
 * The control thread touches guest memory in a stop as the VM's own
 * thread would, so the memory guard is made to hold on it
 * (vhost-user/memguard.h, vsxu_memguard_thread) before it does.
 *
 * Rooms: a shard's thread may also work in another shard's room while
 * that thread is idle (loop.h's borrow; what it may do there is struct
 * vsxb_shard's to say); this file keeps which rooms a round holds, and
 * the round's end (conn.c) gives them back. A parked thread holds its
 * room, so nobody borrows in a stop.
 *
 * Stops nest (a backend.h call made inside a walk's callback): only the
 * outermost one parks and releases. A stop costs a post and a wake-up per
 * worker thread, microseconds each: they are for control (vsxctl, reload,
 * metrics scrapes), never for the data path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "backend-int.h"

struct vsxb_park {
	pthread_mutex_t mu;
	pthread_cond_t cv;           /* a shard arrived; a stop ended */
	uint64_t begun, ended;       /* stops, under mu */
	unsigned arrived;            /* shards parked in the stop begun last */
	unsigned inside;             /* threads in park() */
};

/* A borrower's wake-up (vsxb__shard_wake), on @arg's thread in its room:
 * cleared first, so that a borrower from now on owes another. */
static void shard_wake_cb(void *arg)
{
	struct vsxb_shard *sh = arg;

	__atomic_store_n(&sh->wake_owed, false, __ATOMIC_SEQ_CST);
	sh->r->round(sh);
}

static struct vsxb_shard *shard_new(struct vsxb_router *r, const struct vsxu_loop *loop)
{
	struct vsxb_shard *sh = calloc(1, sizeof(*sh));

	if (!sh)
		return NULL;
	sh->r = r;
	sh->loop = loop;
	sh->foreign = loop != r->loop;
	vsxu_work_init(&sh->round, r->round, sh);
	sh->wake = (struct vsxb_later){ .loop = loop, .fn = shard_wake_cb, .arg = sh };
	vsxb_list_init(&sh->dirty);
	vsxb_list_init(&sh->later);
	vsxb_list_add_tail(&r->shards, &sh->node);
	return sh;
}

int vsxb__shards_init(struct vsxb_router *r)
{
	r->control = pthread_self();
	vsxb_list_init(&r->shards);
	r->park = calloc(1, sizeof(*r->park));
	if (!r->park)
		return -ENOMEM;
	pthread_mutex_init(&r->park->mu, NULL);
	pthread_cond_init(&r->park->cv, NULL);
	r->home = shard_new(r, r->loop);
	if (!r->home) {
		vsxb__shards_free(r);
		return -ENOMEM;
	}
	return 0;
}

void vsxb__shards_free(struct vsxb_router *r)
{
	while (!vsxb_list_empty(&r->shards)) {
		struct vsxb_shard *sh = vsxb_container_of(r->shards.next, struct vsxb_shard,
							 node);

		vsxb_list_del(&sh->node);
		/* (a post still owed here failed at the last VM's round:
		 * the loops it was for may be gone, its owner goes unposted) */
		free(sh);
	}
	if (r->park) {
		pthread_cond_destroy(&r->park->cv);
		pthread_mutex_destroy(&r->park->mu);
		free(r->park);
		r->park = NULL;
	}
}

struct vsxb_shard *vsxb__shard_get(struct vsxb_router *r, const struct vsxu_loop *loop)
{
	struct vsxb_list *n;

	if (!loop || loop == r->loop)
		return r->home;
	for (n = r->shards.next; n != &r->shards; n = n->next) {
		struct vsxb_shard *sh = vsxb_container_of(n, struct vsxb_shard, node);

		if (sh->loop == loop)
			return sh;
	}
	/* a loop of another thread must let us park it */
	if (!loop->post)
		return NULL;
	return shard_new(r, loop);
}

/* Posted to a foreign shard's loop: wait there until the stop ends. */
static void park(void *arg)
{
	struct vsxb_park *p = arg;
	uint64_t mine;

	pthread_mutex_lock(&p->mu);
	mine = p->begun;
	p->arrived++;
	p->inside++;
	pthread_cond_broadcast(&p->cv);
	while (p->ended < mine)
		pthread_cond_wait(&p->cv, &p->mu);
	if (!--p->inside)
		pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void vsxb__world_stop(struct vsxb_router *r)
{
	struct vsxb_park *p = r->park;
	const struct timespec ms = { 0, 1000000 };
	unsigned want = 0;
	struct vsxb_list *n;

	if (r->stop_depth++)
		return;
	/* this thread may now touch any VM's guest memory, as the VM's own
	 * thread does: the memory guard must hold here too */
	vsxu_memguard_thread();
	pthread_mutex_lock(&p->mu);
	p->begun++;
	p->arrived = 0;
	pthread_mutex_unlock(&p->mu);
	for (n = r->shards.next; n != &r->shards; n = n->next) {
		struct vsxb_shard *sh = vsxb_container_of(n, struct vsxb_shard, node);

		/* a shard with no VM (none yet: vsxb_vm_new counts the one
		 * it makes first) has nothing to stop; its loop may be gone */
		if (!sh->foreign || !sh->nvms)
			continue;
		/* a post fails only when malloc does: wait for memory, since
		 * going on with that thread running is not an option */
		while (sh->loop->post(sh->loop->ctx, park, p) < 0)
			nanosleep(&ms, NULL);
		want++;
	}
	pthread_mutex_lock(&p->mu);
	while (p->arrived < want)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void vsxb__world_start(struct vsxb_router *r)
{
	struct vsxb_park *p = r->park;
	struct vsxb_list *n;

	if (!r->stop_depth || r->stop_depth > 1) {
		if (r->stop_depth)
			r->stop_depth--;
		return;
	}
	/* the rounds of the shards the stop's work touched (r->round: the
	 * rounds are above this file), in the stop still */
	for (n = r->shards.next; n != &r->shards; n = n->next) {
		struct vsxb_shard *sh = vsxb_container_of(n, struct vsxb_shard, node);

		if (!vsxb_list_empty(&sh->dirty))
			r->round(sh);
	}
	r->stop_depth = 0;
	/* what the stop owes other loops, posted while the shards' own
	 * threads, which own their lists, are still parked */
	for (n = r->shards.next; n != &r->shards; n = n->next)
		vsxb__shard_posts(vsxb_container_of(n, struct vsxb_shard, node));
	pthread_mutex_lock(&p->mu);
	p->ended = p->begun;
	pthread_cond_broadcast(&p->cv);
	/* every parked thread out before the next stop, or the park's
	 * memory going with the router */
	while (p->inside)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

bool vsxb__shard_borrow(struct vsxb_shard *sh, struct vsxb_shard *to)
{
	const struct vsxu_loop *l = to->loop;
	unsigned i;

	if (to == sh || !to->foreign || !l->borrow)
		return false;
	for (i = 0; i < sh->nlent; i++)
		if (sh->lent[i] == to)
			return true;
	if (sh->nlent == VSXB_LENT_MAX || !l->borrow(l->ctx))
		return false;
	to->borrowed = true;
	sh->lent[sh->nlent++] = to;
	return true;
}

void vsxb__shard_post_later(struct vsxb_shard *sh, struct vsxb_later *w)
{
	vsxb_list_add_tail(&sh->later, &w->node);
}

void vsxb__shard_wake(struct vsxb_shard *sh, struct vsxb_shard *to)
{
	if (__atomic_exchange_n(&to->wake_owed, true, __ATOMIC_SEQ_CST))
		return;
	vsxb__shard_post_later(sh, &to->wake);
}

void vsxb__shard_posts(struct vsxb_shard *sh)
{
	struct vsxb_list failed, *n;

	vsxb_list_init(&failed);
	while (!vsxb_list_empty(&sh->later)) {
		struct vsxb_later *w = vsxb_container_of(sh->later.next, struct vsxb_later, node);

		/* off the list before the post: once posted, @fn may run on its
		 * thread at once and free what holds @w */
		vsxb_list_del(&w->node);
		/* (another thread's loop has post: vsxb__shard_get) */
		if (!w->loop->post || w->loop->post(w->loop->ctx, w->fn, w->arg) < 0)
			vsxb_list_add_tail(&failed, &w->node);
	}
	/* still owed: tried again at the next round or stop */
	while ((n = failed.next) != &failed) {
		vsxb_list_del(n);
		vsxb_list_add_tail(&sh->later, n);
	}
}
