/*
 * vsxd's counters across a live handoff and a restart under a store
 * (vsxd(8) UPGRADING VSXD): what vsxctl status and the metrics count
 * (connections opened, closed, reset and refused, bytes, credit stalls,
 * limit hits, forwards, polling, failed upgrades) is collected into the
 * counters record of state.h when the old process stops, and added to
 * the new process's own before it serves, so that they continue. A crash
 * leaves no record: the new process counts from 0.
 */
#ifndef VSXD_COUNTERS_H
#define VSXD_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

struct vsxb_router;
struct vsxb_vm;
struct vsxd_fwds;
struct vsxd_workers;
struct vsxu_evloop;

/* Where the counters live in a vsxd process. */
struct vsxd_counted {
	struct vsxb_router *router;
	struct vsxb_vm *const *vms;      /* n_vms, NULL entries skipped */
	size_t n_vms;
	struct vsxd_fwds *fwds;          /* may be NULL */
	struct vsxu_evloop *evloop;      /* vsxd's loop; may be NULL */
	const struct vsxd_workers *workers; /* may be NULL */
	uint64_t *handoffs_failed;       /* may be NULL */
};

/* A memfd holding every counter of @w as a counters record, or a negative
 * errno. Only with the router's world stopped (vsxb_router_freeze): the
 * totals are exact then, and the parked workers are read in place. */
int vsxd_counters_save(const struct vsxd_counted *w);

/* Add what the counters record @c holds to @w's counters: the VMs by
 * name (one the record does not name counts from 0; one the
 * configuration no longer has is left out). Before the loops run. */
void vsxd_counters_add(const struct vsxd_counted *w, const struct vsxd_counters *c);

#endif /* VSXD_COUNTERS_H */
