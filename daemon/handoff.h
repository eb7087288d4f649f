/*
 * The live handoff (vsxctl upgrade; vsxd(8) UPGRADING VSXD; handoff.c
 * says how). Main thread only.
 */
#ifndef VSXD_HANDOFF_H
#define VSXD_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "counters.h"

struct vsxd_fwds;

#define VSXD_HANDOFF_TIMEOUT_MS 10000  /* the new process must say it serves */
#define VSXD_HANDOFF_ENV "VSXD_HANDOFF_FD" /* the descriptor it says it on */

struct vsxd_handoff_opts {
	const char *exec;              /* the program to run */
	char *const *argv;             /* its arguments (vsxd's own) */
	struct vsxb_router *router;
	struct vsxb_vm *const *vms;    /* n_vms, NULL entries skipped */
	size_t n_vms;
	uint64_t generation;           /* ours */
	unsigned timeout_ms;           /* 0: VSXD_HANDOFF_TIMEOUT_MS */
	vsxb_log_fn log;
	/* Where the counters are: saved once every worker is parked and
	 * passed as "counters" (counters.h); NULL: not passed (the new
	 * process counts from 0). */
	const struct vsxd_counted *counted;
	/* The forwards, whose established relays go on (relay_keep.c:
	 * "relays" and relay.ID.0/1); NULL: they end. */
	struct vsxd_fwds *fwds;
};

struct vsxd_handoff_report {
	int pid;                       /* the new process */
	unsigned vms;                  /* devices handed over */
	unsigned conns_ended;          /* connections that end (RST, EOF),
					  relays of forwards included */
	unsigned conns_kept;           /* connections that go on, relays too */
	unsigned listeners;            /* listening sockets handed over */
	unsigned fds;                  /* descriptors in all */
};

/*
 * Hand everything to a new process running @o->exec: 0 when it serves
 * (every worker stays parked: the caller answers and exits, touching
 * nothing), or a negative errno with @why (the old process serves on:
 * the new one exited, crashed, refused the state or did not answer in
 * time, and was killed).
 */
int vsxd_handoff_run(const struct vsxd_handoff_opts *o, struct vsxd_handoff_report *rep,
		     char *why, size_t whylen);

/* The new process: the descriptor to answer on ($VSXD_HANDOFF_FD, taken
 * out of the environment), or -1 when no handoff started us. */
int vsxd_handoff_fd(void);
/* The new process serves: say so on @fd (closed), with what it took. */
void vsxd_handoff_serving(int fd, unsigned vms, unsigned conns_ended, unsigned listeners,
			  unsigned conns_kept);
/* The new process refuses: say why on @fd (closed). */
void vsxd_handoff_refuse(int fd, const char *why);

#endif
