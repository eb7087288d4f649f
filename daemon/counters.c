/*
 * vsxd's counters across a handoff or a restart: counters.h. The record
 * itself (its format, its checks) is state.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "forward.h"
#include "workers.h"
#include "backend/backend.h"
#include "vhost-user/loop-event.h"

_Static_assert(VSXB_REASON_COUNT <= VSXD_COUNTERS_MAX,
	       "the counters record holds every close reason");

static void vm_save(struct vsxd_counters_vm *v, const char *name,
		    const struct vsxb_vm_counters *ct)
{
	snprintf(v->name, sizeof(v->name), "%s", name);
	v->opened = ct->opened;
	v->to_guest = ct->to_guest_bytes;
	v->from_guest = ct->from_guest_bytes;
	v->credit_stalls = ct->credit_stalls;
	memcpy(v->closed, ct->closed, sizeof(ct->closed));
	memcpy(v->reset, ct->reset, sizeof(ct->reset));
	memcpy(v->refused, ct->refused, sizeof(ct->refused));
}

int vsxd_counters_save(const struct vsxd_counted *w)
{
	struct vsxd_counters c = { .nreasons = VSXB_REASON_COUNT };
	struct vsxb_router_stats rs;
	struct vsxd_fwd_stats fs;
	int fd;

	c.vms = calloc(w->n_vms ? w->n_vms : 1, sizeof(*c.vms));
	if (!c.vms)
		return -ENOMEM;
	for (size_t i = 0; i < w->n_vms; i++) {
		struct vsxb_vm_counters ct;

		if (!w->vms[i])
			continue;
		vsxb_vm_get_counters(w->vms[i], &ct);
		vm_save(&c.vms[c.nvms++], vsxb_vm_name(w->vms[i]), &ct);
	}
	vsxb_router_get_stats(w->router, &rs);
	c.c[VSXD_CNT_OPENED] = rs.opened;
	c.c[VSXD_CNT_REFUSED] = rs.refused;
	c.c[VSXD_CNT_REFUSED_LIMIT_VM] = rs.refused_limit_vm;
	c.c[VSXD_CNT_REFUSED_LIMIT_CONNS] = rs.refused_limit_conns;
	c.c[VSXD_CNT_RESET_LIMIT_MEMORY] = rs.reset_limit_memory;
	vsxd_fwds_stats(w->fwds, &fs);
	c.c[VSXD_CNT_FWD_ACCEPTED] = fs.accepted;
	c.c[VSXD_CNT_FWD_DENIED] = fs.denied;
	c.c[VSXD_CNT_FWD_FAILED] = fs.failed;
	c.c[VSXD_CNT_AUTH_FAILURES] = fs.auth_failures;
	if (w->evloop) {
		c.c[VSXD_CNT_POLL_HITS] = w->evloop->poll_hits;
		c.c[VSXD_CNT_POLL_MISSES] = w->evloop->poll_misses;
	}
	vsxd_workers_poll_parked(w->workers, &c.c[VSXD_CNT_POLL_HITS],
				 &c.c[VSXD_CNT_POLL_MISSES]);
	if (w->handoffs_failed)
		c.c[VSXD_CNT_HANDOFFS_FAILED] =
			__atomic_load_n(w->handoffs_failed, __ATOMIC_RELAXED);
	fd = vsxd_counters_memfd(&c);
	vsxd_counters_clear(&c);
	return fd;
}

void vsxd_counters_add(const struct vsxd_counted *w, const struct vsxd_counters *c)
{
	unsigned nr = c->nreasons < VSXB_REASON_COUNT ? c->nreasons : VSXB_REASON_COUNT;
	const struct vsxb_router_stats rs = {
		.opened = c->c[VSXD_CNT_OPENED],
		.refused = c->c[VSXD_CNT_REFUSED],
		.refused_limit_vm = c->c[VSXD_CNT_REFUSED_LIMIT_VM],
		.refused_limit_conns = c->c[VSXD_CNT_REFUSED_LIMIT_CONNS],
		.reset_limit_memory = c->c[VSXD_CNT_RESET_LIMIT_MEMORY],
	};
	const struct vsxd_fwd_stats fs = {
		.accepted = c->c[VSXD_CNT_FWD_ACCEPTED],
		.denied = c->c[VSXD_CNT_FWD_DENIED],
		.failed = c->c[VSXD_CNT_FWD_FAILED],
		.auth_failures = c->c[VSXD_CNT_AUTH_FAILURES],
	};

	for (size_t i = 0; i < w->n_vms; i++) {
		const char *name = w->vms[i] ? vsxb_vm_name(w->vms[i]) : NULL;

		for (unsigned j = 0; name && j < c->nvms; j++) {
			const struct vsxd_counters_vm *v = &c->vms[j];
			struct vsxb_vm_counters ct = {
				.opened = v->opened,
				.to_guest_bytes = v->to_guest,
				.from_guest_bytes = v->from_guest,
				.credit_stalls = v->credit_stalls,
			};

			if (strcmp(v->name, name))
				continue;
			memcpy(ct.closed, v->closed, nr * sizeof(ct.closed[0]));
			memcpy(ct.reset, v->reset, nr * sizeof(ct.reset[0]));
			memcpy(ct.refused, v->refused, nr * sizeof(ct.refused[0]));
			vsxb_vm_add_counters(w->vms[i], &ct);
			break;
		}
	}
	vsxb_router_add_stats(w->router, &rs);
	if (w->fwds)
		vsxd_fwds_add_stats(w->fwds, &fs);
	if (w->evloop) {
		w->evloop->poll_hits += c->c[VSXD_CNT_POLL_HITS];
		w->evloop->poll_misses += c->c[VSXD_CNT_POLL_MISSES];
	}
	if (w->handoffs_failed)
		__atomic_add_fetch(w->handoffs_failed, c->c[VSXD_CNT_HANDOFFS_FAILED],
				   __ATOMIC_RELAXED);
}
