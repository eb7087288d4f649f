/*
 * vsxd's control socket: the server side of libvsx/ctl-proto.h, on vsxd's
 * libevent loop, over the backend's introspection and control calls
 * (transports/virtio/backend/backend.h). The protocol is documented in vsxd(8),
 * CONTROL SOCKET, at the top of control.c (the socket and its clients)
 * and control_cmds.c (the commands), and in libvsx/ctl-proto.h (the keys).
 *
 * Ownership: struct vsxd_control is created and freed here; the event
 * base and the router stay the caller's and must outlive it. Strings and
 * arrays passed in are copied.
 */
#ifndef VSXD_CONTROL_H
#define VSXD_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "backend/backend.h"

#define VSXD_CONTROL_TIMEOUT_MS 10000   /* a request must arrive (and its
					   reply leave) within this */
#define VSXD_CONTROL_MAX_CLIENTS 64     /* served at once */

struct event_base;
struct evbuffer;
struct vsxd_control;
struct vsxd_fwds;
struct vsxu_evloop;

struct vsxd_workers;
struct vsxd_handoff_report;

/* How this process started (vsxd(8) RESTARTING VSXD; fdstore.c). */
struct vsxd_start_info {
	const char *mode;          /* "fresh", "recovered" (after a crash),
				      "restarted" (SIGTERM under a store) or
				      "handed-over" (vsxctl upgrade) */
	bool store;                /* descriptors go to the service manager's store */
	uint64_t generation;       /* 1, +1 per recovery */
	time_t started;            /* wall clock */
	unsigned vms_recovered;    /* devices resumed from the store */
	unsigned vms_failed;       /* named by the state, started fresh */
	unsigned conns_ended;      /* connections the state named, RST */
	unsigned conns_kept;       /* connections a handoff kept going */
	unsigned listeners;        /* listening sockets a handoff or a
				      restart passed */
};

/* Who may use the control socket besides root and vsxd's effective uid,
 * and the socket file's mode and group (control-allow-uid, control-group,
 * control-mode; vsxd_control_perm). */
struct vsxd_control_access {
	const uint32_t *allow_uids;   /* these uids; copied */
	size_t n_allow_uids;
	bool has_gid;                 /* members of @gid (a peer whose effective
					 or supplementary groups hold it); the
					 socket's group. false: no group is
					 admitted, the socket keeps vsxd's */
	uint32_t gid;
	unsigned mode;                /* the socket's permission bits */
};

struct vsxd_control_opts {
	const char *path;             /* the socket path (required) */
	struct vsxd_control_access access;
	unsigned timeout_ms;          /* 0: VSXD_CONTROL_TIMEOUT_MS */
	unsigned max_clients;         /* 0: VSXD_CONTROL_MAX_CLIENTS */
	vsxb_log_fn log;               /* may be NULL */
	void *log_arg;
	struct vsxd_fwds *fwds;       /* forward.h: relayed connections are
					 listed too; NULL: none */
	const struct vsxu_evloop *evloop; /* loop-event.h: its polling is reported
					    by status; NULL: none */
	const struct vsxd_workers *workers; /* workers.h: status and vms say
					       which thread serves a VM; NULL */
	const struct vsxd_start_info *start; /* status says it; NULL: not */
	/* upgrade (vsxctl upgrade; handoff.h): hand over to @exec (NULL:
	 * the program vsxd was started as): 0 once the new process serves,
	 * else a negative errno and @why; NULL: refused (EOPNOTSUPP). Once
	 * the reply is out, upgraded is called (it does not return). */
	int (*upgrade)(void *arg, const char *exec, struct vsxd_handoff_report *rep,
		       char *why, size_t whylen);
	void (*upgraded)(void *arg);
	void *upgrade_arg;
};

/*
 * Create the socket at @o->path (its parent directory is created, mode
 * 0755, when missing; the socket gets @o->access's mode and group before
 * anyone can connect; a stale socket left by a dead vsxd is replaced,
 * anything else is not touched) and serve it on
 * @base. Errors: -EADDRINUSE (a live socket: another vsxd), -EEXIST (a
 * file that is not a socket), -ENAMETOOLONG, -ENOMEM, or the errno of
 * mkdir/socket/bind/listen. *@out is freed with vsxd_control_free, which
 * closes every client and removes the socket path if it is still ours.
 */
int vsxd_control_new(struct event_base *base, struct vsxb_router *r,
		     const struct vsxd_control_opts *o, struct vsxd_control **out);
void vsxd_control_free(struct vsxd_control *c);

/*
 * Replace who is admitted, and the socket file's mode and group, with
 * @a's (SIGHUP). The file is changed in place if it is still the one
 * vsxd bound. Clients already accepted keep their connection. 1 if the
 * file's mode or group changed, 0 if not (or the file is not ours any
 * more); -ENOMEM (nothing changed); or the errno of chown/chmod (who is
 * admitted has changed, the file has not, or only in part).
 */
int vsxd_control_set_access(struct vsxd_control *c, const struct vsxd_control_access *a);

/*
 * Answer one request: @req is a complete block of @len bytes, ending with
 * its empty line ("...\n\n", or just "\n"); it is modified. The reply
 * block is appended to @out. @uid is the client's, for the log. Exposed
 * for fuzzing: any bytes are acceptable input.
 */
void vsxd_control_answer(struct vsxd_control *c, char *req, size_t len, uint32_t uid,
			 struct evbuffer *out);

#endif /* VSXD_CONTROL_H */
