/*
 * A listening socket that survives running out of descriptors.
 *
 * A listener whose accept() fails with EMFILE (or ENFILE, ENOBUFS,
 * ENOMEM) stays readable: watched level-triggered, it wakes its loop at
 * once, forever, and whoever logs each failure floods the log. Every
 * listener of vsxd and the backend (the control socket, forwards, metrics,
 * forward-listen's vsock ports; a VM's vhost-user socket and hybrid
 * uds-path) goes through this one policy instead:
 *
 *  - accepts are accept4(SOCK_NONBLOCK | SOCK_CLOEXEC), up to a batch per
 *    wake-up;
 *  - EAGAIN ends the batch; EINTR, ECONNABORTED and the network errors
 *    Linux passes on from a dead connection (accept(2): EPROTO,
 *    ENETDOWN, ...) are that connection's, and skipped quietly;
 *  - any other error stops watching the listener for a back-off that
 *    starts at VSXU_BACKOFF_MIN_MS and doubles at each failure in a row up
 *    to VSXU_BACKOFF_MAX_MS; the first accept that works ends it. The
 *    connections meanwhile wait in the listen backlog;
 *  - a failure is logged (warning) at most once per VSXU_BACKOFF_LOG_MS
 *    per listener, with the count of those not said since the last line:
 *    "accept on NAME: Too many open files; paused 10 ms (0 more since
 *    last said)"; the end of a back-off whose failures were said is
 *    logged once (info).
 *
 * struct vsxu_backoff is the policy alone (vsxu_backoff_fail/_ok: no loop,
 * no clock, the caller says the time; vsxu_backoff_failed/_accepted add
 * the monotonic clock and the log lines), for a listener that another
 * library drives (vsxd's metrics: evhttp's evconnlistener); struct
 * vsxu_acceptor is the policy on a struct vsxu_loop (loop.h). Like the
 * loop, both belong to one thread.
 */
#ifndef VSXU_ACCEPTOR_H
#define VSXU_ACCEPTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "loop.h"

#define VSXU_BACKOFF_MIN_MS 10u
#define VSXU_BACKOFF_MAX_MS 1000u
#define VSXU_BACKOFF_LOG_MS 10000u

/* ---- The policy ---- */

enum vsxu_acceptor_err {
	VSXU_ACCEPTOR_NONE,        /* EAGAIN: nothing waits (the batch ends) */
	VSXU_ACCEPTOR_SKIP,        /* that connection's: try the next one */
	VSXU_ACCEPTOR_BACKOFF,     /* the listener's or the process's: back off */
};

/* What the failed accept's @err (a positive errno) means. */
enum vsxu_acceptor_err vsxu_acceptor_err_kind(int err);

struct vsxu_backoff {
	unsigned fails;         /* failures in a row: backing off when > 0 */
	unsigned delay_ms;      /* the last pause */
	unsigned unsaid;        /* failures since the last line */
	bool said;              /* a line went out in this run of failures */
	bool ever;              /* ... and at @said_ms (0 is a time, too) */
	int64_t said_ms;
};

/*
 * An accept failed at @now_ms (any monotonic milliseconds): the pause
 * before the next try. *@say: log this one; *@more is then the number of
 * failures not logged since the last line.
 */
unsigned vsxu_backoff_fail(struct vsxu_backoff *b, int64_t now_ms, bool *say, unsigned *more);

/* An accept worked: the failures in a row it ends (0: none), the
 * back-off reset; *@say: log that it ended (its failures were said). */
unsigned vsxu_backoff_ok(struct vsxu_backoff *b, bool *say);

typedef void (*vsxu_acceptor_log_fn)(void *arg, int prio, const char *msg);

/*
 * The policy with its log lines, for a listener driven elsewhere: @err
 * (positive errno) failed an accept on the listener called @name; returns
 * the pause in ms, having logged (or counted) the failure through @log
 * (may be NULL).
 */
unsigned vsxu_backoff_failed(struct vsxu_backoff *b, const char *name, int err,
			    vsxu_acceptor_log_fn log, void *log_arg);
/* ...and an accept on it worked. */
void vsxu_backoff_accepted(struct vsxu_backoff *b, const char *name, vsxu_acceptor_log_fn log,
			  void *log_arg);

/* ---- On a loop ---- */

struct vsxu_acceptor;

/* A new connection: @fd is the callee's (non-blocking, close-on-exec),
 * @sa its peer's address. The callback may hold or resume its acceptor,
 * not free it. */
typedef void (*vsxu_acceptor_cb)(void *arg, int fd, const struct sockaddr *sa, socklen_t len);

struct vsxu_acceptor_conf {
	const struct vsxu_loop *loop;
	int fd;                 /* the listening socket: stays the caller's */
	const char *name;       /* in the log: "accept on NAME: ..." (copied) */
	unsigned batch;         /* accepts per wake-up; 0: 16 */
	vsxu_acceptor_cb cb;     /* each connection accepted on @fd */
	/* Optional: accept one connection through this instead of accept4
	 * on @fd (a libvsx listener, whose fd @fd is): 0 when it took one
	 * (and handed it on itself), or a negative errno (-EAGAIN: none
	 * waits); @cb is then unused. */
	int (*accept)(void *arg);
	void *arg;              /* for @cb and @accept */
	vsxu_acceptor_log_fn log;  /* may be NULL */
	void *log_arg;
};

/* Watch @c->fd and accept on it: 0 and *@out (freed by
 * vsxu_acceptor_free), or -ENOMEM. */
int vsxu_acceptor_new(const struct vsxu_acceptor_conf *c, struct vsxu_acceptor **out);
/* Stop watching and free @a (NULL: nothing); the socket is not closed. */
void vsxu_acceptor_free(struct vsxu_acceptor *a);
/* Stop watching the listener while @hold (another thread has it), and
 * watch it again when not, unless a back-off still runs. */
void vsxu_acceptor_hold(struct vsxu_acceptor *a, bool hold);
/* An accept made elsewhere (that thread's) ended: 0, or a negative errno,
 * which counts and backs off as the acceptor's own accepts do. */
void vsxu_acceptor_result(struct vsxu_acceptor *a, int rc);

#endif /* VSXU_ACCEPTOR_H */
