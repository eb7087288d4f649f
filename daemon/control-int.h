/*
 * What control.c (the socket, its clients and their framing) and
 * control_cmds.c (the commands) share. Not for callers, who use
 * control.h.
 */
#ifndef VSXD_CONTROL_INT_H
#define VSXD_CONTROL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "control.h"
#include "vhost-user/loop-event.h"

#define CTL_ERR_MAX 512

struct bufferevent;
struct event;

struct ctl_client {
	struct ctl_client *next, *prev;
	struct vsxd_control *c;
	struct bufferevent *bev;    /* owns the fd (BEV_OPT_CLOSE_ON_FREE) */
	struct event *timer;
	uint64_t serial;            /* for the log */
	uint32_t uid;
	int32_t pid;
	bool denied;                /* a refusal is queued: discard input */
	bool closing;               /* free once the output is out */
	bool paused;                /* output above CTL_OUT_HIGH: not reading */
	bool eof;                   /* the client shut down its sending side */
};

struct vsxd_control {
	struct event_base *base;
	struct vsxb_router *r;
	char *path;
	dev_t dev;                  /* of the socket we bound, for the unlink */
	ino_t ino;
	int lfd;
	struct vsxu_evloop acc_loop; /* the listener's adapter over @base */
	struct vsxu_acceptor *acc;   /* on lfd (vhost-user/acceptor.h) */
	uint32_t *allow;
	size_t nallow;
	bool has_gid;               /* members of gid are admitted too */
	uint32_t gid;
	unsigned mode;              /* the socket file's */
	uint32_t self;              /* geteuid() */
	unsigned timeout_ms, max_clients;
	unsigned nclients;          /* served (allowed, not refused) */
	unsigned nall;              /* every client, refused ones too */
	uint64_t next_serial;
	struct ctl_client clients;  /* list head */
	struct timespec started;    /* CLOCK_MONOTONIC */
	vsxb_log_fn log;
	void *log_arg;
	struct vsxd_fwds *fwds;     /* relayed connections (forward.h), or NULL */
	const struct vsxu_evloop *evloop; /* the loop's polling, or NULL */
	const struct vsxd_workers *workers; /* or NULL */
	struct vsxd_start_info start;
	bool has_start;
	int (*upgrade)(void *arg, const char *exec, struct vsxd_handoff_report *rep,
		       char *why, size_t whylen);
	void (*upgraded)(void *arg);
	void *upgrade_arg;
	bool handed_over;           /* an upgrade committed: answer and go */
};

/* The control socket's log, if any (control_reply.c). */
__attribute__((format(printf, 3, 4)))
void vsxd__ctl_log(struct vsxd_control *c, int prio, const char *fmt, ...);

/* control_reply.c: one "key=value" line; bytes outside printable ASCII
 * become \xNN, and the value is cut at VSX_CTL_VALUE_MAX bytes. */
void vsxd__ctl_put_str(struct evbuffer *b, const char *key, const char *v);
/* The end of a reply: "error=@msg" when @e is not 0 and @msg is given,
 * then "errno=@e" and the empty line. */
void vsxd__ctl_end(struct evbuffer *b, int e, const char *msg);

#endif /* VSXD_CONTROL_INT_H */
