/*
 * vsxd's log (vsxd(8), LOGGING): stderr or syslog at the configured
 * level, the backend's and libevent's lines, fatal start-up errors, and
 * one structured line per connection event. The worker threads log
 * through it too.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include <event2/event.h>

#include "fdstore.h"
#include "logging.h"

/* Read by the worker threads too (their backend's log lines): atomics,
 * changed only by log_setup at start and reload. */
static struct {
	int target;     /* enum vsxd_log_target */
	int level;      /* highest priority logged */
} logst = { VSXD_LOG_STDERR, VSXD_DEFAULT_LOG_LEVEL };

#define LOGST(f) __atomic_load_n(&logst.f, __ATOMIC_RELAXED)

static const char *prio_prefix(int prio)
{
	switch (prio) {
	case LOG_EMERG:
	case LOG_ALERT:
	case LOG_CRIT:
	case LOG_ERR:
		return "error: ";
	case LOG_WARNING:
		return "warning: ";
	case LOG_DEBUG:
		return "debug: ";
	default:
		return "";
	}
}

void vsxd_log_msg(int prio, const char *msg)
{
	if (prio > LOGST(level))
		return;
	if (LOGST(target) == VSXD_LOG_SYSLOG)
		syslog(prio, "%s", msg);
	else
		fprintf(stderr, "vsxd: %s%s\n", prio_prefix(prio), msg);
}

void vsxd_vlog(int prio, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (prio > LOGST(level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vsxd_log_msg(prio, msg);
}

/* A fatal start-up error: always on stderr (the caller is waiting for our
 * exit status there), and in syslog too when logging goes there. */
static char fatal_msg[256];   /* the last one: a refused handoff says it */

void vsxd_fatal(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(fatal_msg, sizeof(fatal_msg), "%.255s", msg);
	fprintf(stderr, "vsxd: %s\n", msg);
	if (logst.target == VSXD_LOG_SYSLOG)
		syslog(LOG_ERR, "%s", msg);
}

void vsxd_log_setup(const struct vsxd_config *cfg)
{
	int target = cfg->log_target == VSXD_UNSET ? VSXD_LOG_STDERR : cfg->log_target;

	if (target == VSXD_LOG_SYSLOG && logst.target != VSXD_LOG_SYSLOG)
		openlog("vsxd", LOG_PID, LOG_DAEMON);
	else if (target != VSXD_LOG_SYSLOG && logst.target == VSXD_LOG_SYSLOG)
		closelog();
	__atomic_store_n(&logst.target, target, __ATOMIC_RELAXED);
	__atomic_store_n(&logst.level, cfg->log_level == VSXD_UNSET ? VSXD_DEFAULT_LOG_LEVEL
								  : cfg->log_level,
			 __ATOMIC_RELAXED);
}

void vsxd_backend_log(void *arg, int prio, const char *msg)
{
	vsxd_log_msg(prio, msg);
}

/* ---- Connection events: one structured line each (vsxd(8), LOGGING) ---- */

static const char *port_str(uint32_t port, char *buf, size_t len)
{
	if (port == VSXB_PORT_UNKNOWN)
		return "-";
	snprintf(buf, len, "%u", port);
	return buf;
}

void vsxd_conn_event_log(void *arg, const struct vsxb_conn_event *ev)
{
	const struct vsxb_conn_info *ci = &ev->ci;
	char msg[512], gp[16], pp[16];
	int prio = LOG_INFO, n;

	/* the restart state names the connections a crash would end */
	vsxd_fdstore_conn(arg, ev);
	if (ev->log_suppressed)
		return;
	if (ev->reason == VSXB_REASON_LIMIT)
		prio = LOG_WARNING;
	if (prio > LOGST(level))
		return;
	n = snprintf(msg, sizeof(msg), "conn %s id=%llu vm=%s type=%s guest=%llu:%s "
		     "peer=%llu:%s origin=%s", vsxb_conn_event_name(ev->type),
		     (unsigned long long)ci->id, ci->vm ? ci->vm : "-",
		     ci->type == 2 ? "seqpacket" : "stream",
		     (unsigned long long)ci->guest_cid, port_str(ci->guest_port, gp, sizeof(gp)),
		     (unsigned long long)ci->peer_cid, port_str(ci->peer_port, pp, sizeof(pp)),
		     ev->origin ? ev->origin : "-");
	if (ev->type != VSXB_CONN_EV_OPEN && n > 0 && (size_t)n < sizeof(msg))
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, " reason=%s",
			      vsxb_conn_reason_name(ev->reason));
	if (ev->err && n > 0 && (size_t)n < sizeof(msg))
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, " errno=%d", ev->err);
	if (ev->limit && n > 0 && (size_t)n < sizeof(msg))
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, " limit=%s",
			      vsxb_limit_name(ev->limit));
	if ((ev->type == VSXB_CONN_EV_CLOSE || ev->type == VSXB_CONN_EV_RESET) && n > 0 &&
	    (size_t)n < sizeof(msg))
		n += snprintf(msg + n, sizeof(msg) - (size_t)n, " to-guest=%llu "
			      "from-guest=%llu duration-ms=%llu",
			      (unsigned long long)ci->to_guest_bytes,
			      (unsigned long long)ci->from_guest_bytes,
			      (unsigned long long)ev->duration_ms);
	if (ev->suppressed && n > 0 && (size_t)n < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - (size_t)n, " suppressed=%llu",
			 (unsigned long long)ev->suppressed);
	vsxd_log_msg(prio, msg);
}

/* libevent's own warnings */
void vsxd_libevent_log(int severity, const char *msg)
{
	switch (severity) {
	case EVENT_LOG_DEBUG:
		vsxd_log_msg(LOG_DEBUG, msg);
		break;
	case EVENT_LOG_MSG:
		vsxd_log_msg(LOG_INFO, msg);
		break;
	case EVENT_LOG_WARN:
		vsxd_log_msg(LOG_WARNING, msg);
		break;
	default:
		vsxd_log_msg(LOG_ERR, msg);
		break;
	}
}

const char *vsxd_fatal_msg(void)
{
	return fatal_msg;
}

bool vsxd_log_to_syslog(void)
{
	return LOGST(target) == VSXD_LOG_SYSLOG;
}
