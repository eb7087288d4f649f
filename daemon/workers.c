/*
 * vsxd's worker threads (--threads, threads =).
 *
 * Each worker is a thread with its own libevent base and loop adapter,
 * with post and its room enabled (loop-event.h; another worker may work
 * in the room while this one idles: sibling pairs, backend-int.h's struct
 * vsxb_shard): the backend runs the VMs placed on it
 * there (vsxb_vm_config.loop), their devices, host sockets and
 * connections, and parks it while the main thread's backend calls look
 * at VM state (backend-int.h, struct vsxb_shard). The main thread keeps
 * everything else: the control socket, signals and reload, forwards'
 * listeners, metrics and logging.
 *
 * Placement: a new VM goes to the worker with the fewest VMs, a new
 * worker while fewer than the limit run (the default limit is the number
 * of CPUs, so by default each VM has a thread of its own until there are
 * more VMs than CPUs). A VM stays on its worker until it is removed.
 * Workers are made on demand and stopped only at exit.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "workers.h"

struct vsxd_worker {
	struct vsxd_workers *ws;
	unsigned idx;
	pthread_t th;
	struct event_base *base;
	struct vsxu_evloop ev;
	unsigned nvms;                 /* placed here (main thread's count) */
};

struct vsxd_workers {
	struct vsxb_router *r;
	unsigned max;                  /* 0 until set: the CPUs */
	unsigned n;
	struct vsxd_worker *w[VSXD_THREADS_MAX];
	unsigned poll_us;
};

static unsigned ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > VSXD_THREADS_MAX ? VSXD_THREADS_MAX : (unsigned)n;
}

static bool poll_rings(void *arg, bool sleeping)
{
	struct vsxd_worker *w = arg;

	return vsxb_router_poll_loop(w->ws->r, &w->ev.loop, sleeping);
}

static void *worker_main(void *arg)
{
	struct vsxd_worker *w = arg;
	char name[16];

	snprintf(name, sizeof(name), "vsxd-w%u", w->idx);
	pthread_setname_np(pthread_self(), name);
	vsxu_evloop_run(&w->ev);
	return NULL;
}

/* Posted: the loop ends (at exit, once it serves no VM). */
static void worker_stop(void *arg)
{
	struct vsxd_worker *w = arg;

	event_base_loopbreak(w->base);
}

/*
 * What a worker blocks: every signal but those an instruction raises on
 * the thread that ran it. Signals are the main thread's (libevent's signal
 * pipe is there); but a SIGBUS from a guest mapping whose file shrank
 * (vhost-user/memguard.h) or a SIGSEGV is the worker's own, and blocked it
 * is not held for the main thread: the kernel delivers it with its default
 * action, and the whole daemon dies instead of that VM's device.
 */
static void worker_sigmask(sigset_t *set)
{
	static const int sync_sigs[] = { SIGBUS, SIGSEGV, SIGFPE, SIGILL };

	sigfillset(set);
	for (size_t i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
		sigdelset(set, sync_sigs[i]);
}

static struct vsxd_worker *worker_new(struct vsxd_workers *ws)
{
	struct vsxd_worker *w = calloc(1, sizeof(*w));
	sigset_t mask, old;
	int r;

	if (!w)
		return NULL;
	w->ws = ws;
	w->idx = ws->n;
	w->base = event_base_new();
	if (!w->base)
		goto err;
	vsxu_evloop_init(&w->ev, w->base);
	/* (its mailbox's event also keeps a loop with no VM waiting) */
	if (vsxu_evloop_enable_post(&w->ev) < 0)
		goto err;
	vsxu_evloop_set_poll(&w->ev, ws->poll_us);
	vsxu_evloop_set_poller(&w->ev, poll_rings, w);
	/* the thread starts with the mask in force here */
	worker_sigmask(&mask);
	pthread_sigmask(SIG_SETMASK, &mask, &old);
	r = pthread_create(&w->th, NULL, worker_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0)
		goto err;
	ws->w[ws->n++] = w;
	return w;
err:
	vsxu_evloop_fini(&w->ev);
	if (w->base)
		event_base_free(w->base);
	free(w);
	return NULL;
}

struct run {
	struct vsxd_worker *w;
	void (*fn)(void *);
	void *arg;
};

static void run_there(void *arg)
{
	struct run *r = arg;

	vsxu_evloop_set_poll(&r->w->ev, r->w->ws->poll_us);
	if (r->fn)
		r->fn(r->arg);
}

/* Run @fn(@arg) (may be NULL) on worker @w, in its loop (vsxu_evloop_call),
 * and wait for it; the worker takes the current --poll-us on the way. */
static int run_on(struct vsxd_worker *w, void (*fn)(void *), void *arg)
{
	struct run r = { .w = w, .fn = fn, .arg = arg };

	return vsxu_evloop_call(&w->ev, run_there, &r);
}

int vsxd_workers_each(const struct vsxd_workers *ws, void (*fn)(void *), void *arg)
{
	for (unsigned i = 0; ws && i < ws->n; i++) {
		int r = run_on(ws->w[i], fn, arg);

		if (r < 0)
			return r;
	}
	return 0;
}

int vsxd_workers_new(struct vsxb_router *r, struct vsxd_workers **out)
{
	struct vsxd_workers *ws = calloc(1, sizeof(*ws));

	if (!ws)
		return -ENOMEM;
	ws->r = r;
	ws->max = ncpus();
	*out = ws;
	return 0;
}

void vsxd_workers_set_max(struct vsxd_workers *ws, unsigned max)
{
	ws->max = max ? (max > VSXD_THREADS_MAX ? VSXD_THREADS_MAX : max) : ncpus();
}

unsigned vsxd_workers_max(const struct vsxd_workers *ws)
{
	return ws->max;
}

void vsxd_workers_set_poll(struct vsxd_workers *ws, unsigned us)
{
	unsigned i;

	ws->poll_us = us;
	/* the adapter's polling state is its thread's: set it there, parked */
	for (i = 0; i < ws->n; i++)
		run_on(ws->w[i], NULL, NULL);
}

const struct vsxu_loop *vsxd_workers_place(struct vsxd_workers *ws)
{
	struct vsxd_worker *best = NULL;
	unsigned i;

	for (i = 0; i < ws->n; i++)
		if (!best || ws->w[i]->nvms < best->nvms)
			best = ws->w[i];
	if ((!best || best->nvms) && ws->n < ws->max) {
		struct vsxd_worker *w = worker_new(ws);

		if (w)
			best = w;
	}
	if (!best)
		return NULL;
	best->nvms++;
	return &best->ev.loop;
}

static struct vsxd_worker *by_loop(const struct vsxd_workers *ws,
				   const struct vsxu_loop *l)
{
	unsigned i;

	for (i = 0; i < ws->n; i++)
		if (&ws->w[i]->ev.loop == l)
			return ws->w[i];
	return NULL;
}

void vsxd_workers_unplace(struct vsxd_workers *ws, const struct vsxu_loop *l)
{
	struct vsxd_worker *w = by_loop(ws, l);

	if (w && w->nvms)
		w->nvms--;
}

int vsxd_workers_index(const struct vsxd_workers *ws, const struct vsxu_loop *l)
{
	struct vsxd_worker *w = by_loop(ws, l);

	return w ? (int)w->idx : -1;
}

static void poll_copy(void *arg)
{
	struct vsxd_worker_info *out = arg;
	struct vsxd_worker *w = out->w;

	out->poll_ns = w->ev.poll_ns;
	out->poll_hits = w->ev.poll_hits;
	out->poll_misses = w->ev.poll_misses;
}

int vsxd_worker_info(const struct vsxd_workers *ws, unsigned i,
		     struct vsxd_worker_info *out)
{
	struct vsxd_worker *w;
	struct timespec ts;
	clockid_t cid;

	if (i >= ws->n)
		return -ENOENT;
	w = ws->w[i];
	out->index = w->idx;
	out->vms = w->nvms;
	out->cpu_ns = 0;
	if (pthread_getcpuclockid(w->th, &cid) == 0 && clock_gettime(cid, &ts) == 0)
		out->cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	out->w = w;
	if (run_on(w, poll_copy, out) < 0)
		out->poll_ns = 0, out->poll_hits = out->poll_misses = 0;
	return 0;
}

void vsxd_workers_poll_parked(const struct vsxd_workers *ws, uint64_t *hits,
			      uint64_t *misses)
{
	for (unsigned i = 0; ws && i < ws->n; i++) {
		struct vsxd_worker_info wi = { .w = ws->w[i] };

		if (ws->w[i]->nvms)
			poll_copy(&wi);   /* parked: its park orders this read */
		else if (run_on(ws->w[i], poll_copy, &wi) < 0)
			continue;
		*hits += wi.poll_hits;
		*misses += wi.poll_misses;
	}
}

void vsxd_workers_info(const struct vsxd_workers *ws, struct vsxd_workers_info *out)
{
	out->n = 0;
	while (ws && out->n < VSXD_THREADS_MAX &&
	       vsxd_worker_info(ws, out->n, &out->wi[out->n]) == 0)
		out->n++;
}

void vsxd_workers_free(struct vsxd_workers *ws)
{
	unsigned i;

	if (!ws)
		return;
	for (i = 0; i < ws->n; i++) {
		struct vsxd_worker *w = ws->w[i];

		while (w->ev.loop.post(w->ev.loop.ctx, worker_stop, w) < 0)
			usleep(1000);
		pthread_join(w->th, NULL);
		vsxu_evloop_fini(&w->ev);
		event_base_free(w->base);
		free(w);
	}
	free(ws);
}
