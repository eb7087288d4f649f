/* vsxd's worker threads: see workers.c. Main thread only. */
#ifndef VSXD_WORKERS_H
#define VSXD_WORKERS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config.h"   /* VSXD_THREADS_MAX */
#include "vhost-user/loop-event.h"

struct vsxd_workers;
struct vsxd_worker;

int vsxd_workers_new(struct vsxb_router *r, struct vsxd_workers **out);
/* Stops and joins every worker: after the router has freed their VMs. */
void vsxd_workers_free(struct vsxd_workers *ws);
/* At most @max workers (0: one per CPU); workers already running stay. */
void vsxd_workers_set_max(struct vsxd_workers *ws, unsigned max);
unsigned vsxd_workers_max(const struct vsxd_workers *ws);
/* Run @fn(@arg) on each worker's thread in turn and wait for it (not
 * while the router's world is stopped: a parked worker runs nothing):
 * 0, or the first error. @ws may be NULL. */
int vsxd_workers_each(const struct vsxd_workers *ws, void (*fn)(void *), void *arg);
/* --poll-us for every worker's loop. */
void vsxd_workers_set_poll(struct vsxd_workers *ws, unsigned us);
/* The loop of the worker a new VM goes to (vsxb_vm_config.loop), made if
 * need be; NULL: no worker could be made. unplace: that VM is gone. */
const struct vsxu_loop *vsxd_workers_place(struct vsxd_workers *ws);
void vsxd_workers_unplace(struct vsxd_workers *ws, const struct vsxu_loop *l);
/* The worker of loop @l (vsxb_vm_info.loop): its index, or -1. */
int vsxd_workers_index(const struct vsxd_workers *ws, const struct vsxu_loop *l);

struct vsxd_worker_info {
	unsigned index;
	unsigned vms;
	uint64_t cpu_ns;            /* the thread's CPU time */
	/* its loop's polling (vsxu_evloop), read on its thread */
	unsigned poll_ns;
	uint64_t poll_hits, poll_misses;
	struct vsxd_worker *w;      /* (internal) */
};
int vsxd_worker_info(const struct vsxd_workers *ws, unsigned i,
		     struct vsxd_worker_info *out);
/* Every worker's polling counters, summed into *@hits and *@misses,
 * while the router's world is stopped (a freeze: vsxd_workers_info would
 * wait for ever on a parked worker): a parked worker's are read here,
 * after its park, a worker with no VM (not parked) answers as usual. */
void vsxd_workers_poll_parked(const struct vsxd_workers *ws, uint64_t *hits,
			      uint64_t *misses);
/* Every worker's info at once, for a reply or a page that shows several
 * things of each: each vsxd_worker_info posts to the worker's thread and
 * waits for it, so read them once. 12 KiB with 256 workers. */
struct vsxd_workers_info {
	unsigned n;
	struct vsxd_worker_info wi[VSXD_THREADS_MAX];
};
/* @ws may be NULL (no workers: n = 0). */
void vsxd_workers_info(const struct vsxd_workers *ws, struct vsxd_workers_info *out);

#endif
