/*
 * A listening socket that survives running out of descriptors
 * (acceptor.h says the policy).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "acceptor.h"
#include "util.h"

#define BATCH_DEFAULT 16

/* ---- The policy ---- */

enum vsxu_acceptor_err vsxu_acceptor_err_kind(int err)
{
	switch (err) {
	case EAGAIN:
#if EWOULDBLOCK != EAGAIN
	case EWOULDBLOCK:
#endif
		return VSXU_ACCEPTOR_NONE;
	/* the connection's own: Linux passes pending network errors of a
	 * connection that died in the backlog on through accept (accept(2)) */
	case EINTR:
	case ECONNABORTED:
	case EPROTO:
	case ENOPROTOOPT:
	case ENETDOWN:
	case ENETUNREACH:
	case EHOSTDOWN:
	case EHOSTUNREACH:
	case ENONET:
	case EOPNOTSUPP:
	case ETIMEDOUT:
		return VSXU_ACCEPTOR_SKIP;
	default:
		/* EMFILE, ENFILE, ENOBUFS, ENOMEM, and what should not happen
		 * at all (EBADF, EINVAL...): retrying at once would spin */
		return VSXU_ACCEPTOR_BACKOFF;
	}
}

unsigned vsxu_backoff_fail(struct vsxu_backoff *b, int64_t now_ms, bool *say, unsigned *more)
{
	if (!b->fails++ || !b->delay_ms)
		b->delay_ms = VSXU_BACKOFF_MIN_MS;
	else if (b->delay_ms < VSXU_BACKOFF_MAX_MS / 2)
		b->delay_ms *= 2;
	else
		b->delay_ms = VSXU_BACKOFF_MAX_MS;
	*more = 0;
	*say = !b->ever || now_ms - b->said_ms >= (int64_t)VSXU_BACKOFF_LOG_MS;
	if (*say) {
		*more = b->unsaid;
		b->unsaid = 0;
		b->said_ms = now_ms;
		b->ever = true;
		b->said = true;
	} else {
		b->unsaid++;
	}
	return b->delay_ms;
}

unsigned vsxu_backoff_ok(struct vsxu_backoff *b, bool *say)
{
	unsigned n = b->fails;

	*say = b->said;
	b->fails = 0;
	b->delay_ms = 0;
	b->said = false;
	return n;
}

__attribute__((format(printf, 4, 5)))
static void say(vsxu_acceptor_log_fn log, void *arg, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsx__logv(log, arg, prio, fmt, ap);
	va_end(ap);
}

unsigned vsxu_backoff_failed(struct vsxu_backoff *b, const char *name, int err,
			    vsxu_acceptor_log_fn log, void *log_arg)
{
	unsigned ms, more;
	bool due;

	ms = vsxu_backoff_fail(b, vsx__now_ms(), &due, &more);
	if (due)
		say(log, log_arg, LOG_WARNING, "accept on %s: %s; paused %u ms (%u more since "
		    "last said)", name, strerror(err), ms, more);
	return ms;
}

void vsxu_backoff_accepted(struct vsxu_backoff *b, const char *name, vsxu_acceptor_log_fn log,
			  void *log_arg)
{
	unsigned n;
	bool due;

	if (!b->fails)
		return;
	n = vsxu_backoff_ok(b, &due);
	if (due)
		say(log, log_arg, LOG_INFO, "accept on %s: accepting again after %u failed "
		    "attempt(s)", name, n);
}

/* ---- On a loop ---- */

struct vsxu_acceptor {
	struct vsxu_acceptor_conf c;
	char *name;
	struct vsxu_watch *w;
	struct vsxu_timer *t;
	struct vsxu_backoff b;
	bool held;              /* vsxu_acceptor_hold */
	bool paused;            /* backing off: the timer is armed */
};

static void update(struct vsxu_acceptor *a)
{
	a->c.loop->watch_set(a->w, a->held || a->paused ? 0 : VSXU_EV_READ);
}

static void back_off(struct vsxu_acceptor *a, int err)
{
	unsigned ms = vsxu_backoff_failed(&a->b, a->name, err, a->c.log, a->c.log_arg);

	a->paused = true;
	update(a);
	a->c.loop->timer_arm(a->t, ms);
}

static void resume_cb(void *arg)
{
	struct vsxu_acceptor *a = arg;

	a->paused = false;
	update(a);
}

static void accept_cb(int lfd, int events, void *arg)
{
	struct vsxu_acceptor *a = arg;
	struct sockaddr_storage ss;
	socklen_t len = 0;
	unsigned i;
	int fd, err;

	(void)events;
	for (i = 0; i < a->c.batch && !a->held && !a->paused; i++) {
		if (a->c.accept) {
			fd = a->c.accept(a->c.arg);
			err = fd < 0 ? -fd : 0;
		} else {
			len = sizeof(ss);
			fd = accept4(lfd, (struct sockaddr *)&ss, &len,
				     SOCK_NONBLOCK | SOCK_CLOEXEC);
			err = fd < 0 ? errno : 0;
		}
		if (err) {
			switch (vsxu_acceptor_err_kind(err)) {
			case VSXU_ACCEPTOR_NONE:
				return;
			case VSXU_ACCEPTOR_SKIP:
				continue;
			case VSXU_ACCEPTOR_BACKOFF:
				back_off(a, err);
				return;
			}
		}
		vsxu_backoff_accepted(&a->b, a->name, a->c.log, a->c.log_arg);
		if (!a->c.accept)
			a->c.cb(a->c.arg, fd, (struct sockaddr *)&ss, len);
	}
}

int vsxu_acceptor_new(const struct vsxu_acceptor_conf *c, struct vsxu_acceptor **out)
{
	const struct vsxu_loop *l = c->loop;
	struct vsxu_acceptor *a;

	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->c = *c;
	if (!a->c.batch)
		a->c.batch = BATCH_DEFAULT;
	a->name = strdup(c->name ? c->name : "?");
	a->c.name = a->name;
	a->w = a->name ? l->watch(l->ctx, c->fd, VSXU_EV_READ, accept_cb, a) : NULL;
	a->t = a->w ? l->timer(l->ctx, resume_cb, a) : NULL;
	if (!a->t) {
		vsxu_acceptor_free(a);
		return -ENOMEM;
	}
	*out = a;
	return 0;
}

void vsxu_acceptor_free(struct vsxu_acceptor *a)
{
	if (!a)
		return;
	if (a->t)
		a->c.loop->timer_free(a->t);
	if (a->w)
		a->c.loop->unwatch(a->w);
	free(a->name);
	free(a);
}

void vsxu_acceptor_hold(struct vsxu_acceptor *a, bool hold)
{
	a->held = hold;
	update(a);
}

void vsxu_acceptor_result(struct vsxu_acceptor *a, int rc)
{
	if (rc >= 0)
		vsxu_backoff_accepted(&a->b, a->name, a->c.log, a->c.log_arg);
	else if (vsxu_acceptor_err_kind(-rc) == VSXU_ACCEPTOR_BACKOFF)
		back_off(a, -rc);
}
