/*
 * vsxd's metrics endpoint: GET /metrics in the Prometheus text format
 * (version 0.0.4) with libevent's evhttp, on vsxd's loop, over the
 * backend's counters (backend.h: vsxb_router_get_stats,
 * vsxb_vm_get_counters), the forwards' and the event loop's. Every metric
 * is documented in vsxd(8), METRICS; the design is at the top of
 * metrics.c.
 *
 * Ownership: struct vsxd_metrics is created and freed here; the event
 * base, the router, the forwards and the loop adapter stay the caller's
 * and must outlive it. Strings passed in are copied.
 */
#ifndef VSXD_METRICS_H
#define VSXD_METRICS_H

#include "backend/backend.h"
#include "config.h"
#include "control.h"

#define VSXD_METRICS_TIMEOUT_S 10        /* a request must arrive (and its
					    answer leave) within this */
#define VSXD_METRICS_MAX_NEW 64          /* connections accepted per timeout
					    window; then the listener pauses */

struct event_base;
struct evbuffer;
struct vsxd_fwds;
struct vsxu_evloop;
struct vsxd_metrics;

struct vsxd_workers;

struct vsxd_metrics_opts {
	const char *addr;                /* tcp:HOST:PORT (vsxd_metrics_check) */
	struct vsxd_fwds *fwds;          /* forward.h; NULL: none */
	const struct vsxu_evloop *evloop; /* its polling counters; NULL: none */
	const struct vsxd_workers *workers; /* workers.h: theirs too, and their
					       CPU; NULL: none */
	const struct vsxd_start_info *start; /* how vsxd started (copied);
						NULL: not said */
	const uint64_t *handoffs_failed; /* vsxctl upgrades that failed (read
					    at each scrape); NULL: none */
	vsxb_log_fn log;                 /* may be NULL */
	void *log_arg;
};

/*
 * Listen on @o->addr and serve it on @base. -EINVAL: a bad address (said in
 * @err); other errors (the address in use, a host that does not resolve)
 * are said in @err too, with a negative errno. *@out is freed with
 * vsxd_metrics_free, which closes the socket and every client.
 */
int vsxd_metrics_new(struct event_base *base, struct vsxb_router *r,
		     const struct vsxd_metrics_opts *o, struct vsxd_metrics **out,
		     struct vsxd_err *err);
void vsxd_metrics_free(struct vsxd_metrics *m);

/* The address served, as given (tcp:HOST:PORT). */
const char *vsxd_metrics_addr(const struct vsxd_metrics *m);

/* Append the whole page to @b: 0 or -ENOMEM. */
int vsxd_metrics_render(struct vsxd_metrics *m, struct evbuffer *b);

#endif /* VSXD_METRICS_H */
