/*
 * vsxd's log (logging.c; vsxd(8), LOGGING). Safe from any thread; the
 * target and level change only at start and reload (vsxd_log_setup, on
 * vsxd's loop).
 */
#ifndef VSXD_LOGGING_H
#define VSXD_LOGGING_H

#include <stdbool.h>

#include "config.h"
#include "backend/backend.h"

#include <syslog.h>

#define VSXD_DEFAULT_LOG_LEVEL LOG_INFO   /* log-level when unset */

/* The target and level of @cfg (stderr, info when unset). */
void vsxd_log_setup(const struct vsxd_config *cfg);

/* One line at syslog priority @prio, when the level lets it through. */
void vsxd_log_msg(int prio, const char *msg);
__attribute__((format(printf, 2, 3)))
void vsxd_vlog(int prio, const char *fmt, ...);

/* A fatal start-up error: on stderr always (the caller waits for the exit
 * status there), in syslog too when logging goes there; the last one is
 * vsxd_fatal_msg (a refused handoff says it). */
__attribute__((format(printf, 1, 2)))
void vsxd_fatal(const char *fmt, ...);
const char *vsxd_fatal_msg(void);

/* Logging goes to syslog (closelog before an _exit). */
bool vsxd_log_to_syslog(void);

/* The backend's log lines (vsxb_log_fn; @arg unused). */
void vsxd_backend_log(void *arg, int prio, const char *msg);
/* A connection event: the store's record of it (@arg: the store), then
 * its structured line. */
void vsxd_conn_event_log(void *arg, const struct vsxb_conn_event *ev);
/* libevent's own warnings (event_set_log_callback). */
void vsxd_libevent_log(int severity, const char *msg);

#endif /* VSXD_LOGGING_H */
