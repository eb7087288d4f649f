/*
 * What the backend tells the program hosting it: log lines (vsxb_log_fn,
 * guest-caused warnings rate limited per VM session), connection events
 * (backend.h: OPEN when a connection is established, CLOSE / RESET /
 * REFUSE when it ends, with the first decisive cause), refusals of
 * attempts that never had a connection, the connection limits, and what
 * vsxctl shows of a connection. Pure bookkeeping: it changes no
 * connection's state and calls no other room.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "conn.h"

/* ---- Logging ---- */

static void vlog(struct vsxb_router *r, int prio, const char *fmt, va_list ap)
{
	char msg[512];

	if (!r->log)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	r->log(r->log_arg, prio, msg);
}

void vsxb__log(struct vsxb_router *r, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(r, prio, fmt, ap);
	va_end(ap);
}

void vsxb__vm_warn(struct vsxb_vm *vm, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	if (!vm->log_budget)
		return;
	vm->log_budget--;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vsxb__log(vm->r, VSXB_LOG_WARNING, "vm %s: guest: %s%s", vm->name, msg,
		 vm->log_budget ? "" : " (further guest errors not logged until "
		 "the device restarts)");
}

/* ---- Connection events and limits ---- */

static const char *const reason_names[] = {
	[VSXB_REASON_NONE] = "none",
	[VSXB_REASON_GUEST_SHUTDOWN] = "guest-shutdown",
	[VSXB_REASON_HOST_EOF] = "host-eof",
	[VSXB_REASON_HOST_CLOSED] = "host-closed",
	[VSXB_REASON_PEER_SHUTDOWN] = "peer-shutdown",
	[VSXB_REASON_GUEST_RST] = "guest-rst",
	[VSXB_REASON_PEER_RST] = "peer-rst",
	[VSXB_REASON_REFUSED] = "refused",
	[VSXB_REASON_CONNECT_TIMEOUT] = "connect-timeout",
	[VSXB_REASON_HANDSHAKE_TIMEOUT] = "handshake-timeout",
	[VSXB_REASON_LINGER_TIMEOUT] = "linger-timeout",
	[VSXB_REASON_CONTROL_CLOSE] = "control-close",
	[VSXB_REASON_CONTROL_RESET] = "control-reset",
	[VSXB_REASON_VM_GONE] = "vm-gone",
	[VSXB_REASON_LIMIT] = "limit",
	[VSXB_REASON_PROTOCOL] = "protocol",
	[VSXB_REASON_ERROR] = "error",
	[VSXB_REASON_VM_NOT_RUNNING] = "vm-not-running",
	[VSXB_REASON_BAD_HANDSHAKE] = "bad-handshake",
};
_Static_assert(sizeof(reason_names) / sizeof(reason_names[0]) == VSXB_REASON_COUNT,
	       "a reason without a name");

/* @names[@i], or @other when @i has no name. */
static const char *name_of(const char *const *names, size_t n, int i, const char *other)
{
	return i >= 0 && (size_t)i < n && names[i] ? names[i] : other;
}

#define NAME_OF(names, i, other) name_of(names, sizeof(names) / sizeof(names[0]), i, other)

const char *vsxb_conn_reason_name(int reason)
{
	return NAME_OF(reason_names, reason, "?");
}

const char *vsxb_conn_event_name(int type)
{
	static const char *const names[] = {
		[VSXB_CONN_EV_OPEN] = "open", [VSXB_CONN_EV_CLOSE] = "close",
		[VSXB_CONN_EV_RESET] = "reset", [VSXB_CONN_EV_REFUSE] = "refuse",
	};

	return NAME_OF(names, type, "?");
}

const char *vsxb_limit_name(int kind)
{
	static const char *const names[] = {
		[VSXB_LIMIT_VM_CONNS] = "conns-per-vm", [VSXB_LIMIT_CONNS] = "conns",
		[VSXB_LIMIT_MEMORY] = "conn-memory", [VSXB_LIMIT_HANDSHAKES] = "handshakes",
	};

	return NAME_OF(names, kind, "none");
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool reason_graceful(int why)
{
	return why == VSXB_REASON_GUEST_SHUTDOWN || why == VSXB_REASON_HOST_EOF ||
	       why == VSXB_REASON_HOST_CLOSED || why == VSXB_REASON_PEER_SHUTDOWN ||
	       why == VSXB_REASON_CONTROL_CLOSE;
}

void vsxb__conn_why(struct conn *c, int reason, int err)
{
	if (c->dead)
		return;
	if (c->why && (!reason_graceful(c->why) || reason_graceful(reason) ||
		       reason == VSXB_REASON_GUEST_RST || reason == VSXB_REASON_PEER_RST))
		return;
	c->why = reason;
	c->why_err = err;
}

static const char *conn_origin(const struct conn *c)
{
	if (c->guest_initiated)
		return "guest";
	return c->peer_kind;
}

/* The rate limit for logging refusals: a burst, then one per VSXB_REFUSE_MS. */
static void refuse_rate(struct vsxb_vm *vm, struct vsxb_conn_event *ev)
{
	uint64_t now = mono_ms();

	if (!vm->refuse_ms || now - vm->refuse_ms >= (uint64_t)VSXB_REFUSE_MS *
						      VSXB_REFUSE_BURST) {
		vm->refuse_tokens = VSXB_REFUSE_BURST;
		vm->refuse_ms = now;
	} else {
		uint64_t add = (now - vm->refuse_ms) / VSXB_REFUSE_MS;

		if (add) {
			vm->refuse_tokens += (unsigned)add;
			if (vm->refuse_tokens > VSXB_REFUSE_BURST)
				vm->refuse_tokens = VSXB_REFUSE_BURST;
			vm->refuse_ms += add * VSXB_REFUSE_MS;
		}
	}
	if (!vm->refuse_tokens) {
		ev->log_suppressed = true;
		vm->refuse_suppressed++;
		return;
	}
	vm->refuse_tokens--;
	ev->suppressed = vm->refuse_suppressed;
	vm->refuse_suppressed = 0;
}

/* The router's totals and the VM's counters (backend.h) of one event. */
static void count_event(struct vsxb_vm *vm, int type, int why)
{
	struct vsxb_router *r = vm->r;
	unsigned i = why > 0 && why < VSXB_REASON_COUNT ? (unsigned)why : VSXB_REASON_NONE;

	switch (type) {
	case VSXB_CONN_EV_OPEN:
		vsxb_add(&r->st.opened, 1);
		vm->ct.opened++;
		break;
	case VSXB_CONN_EV_CLOSE:
		vm->ct.closed[i]++;
		break;
	case VSXB_CONN_EV_RESET:
		vm->ct.reset[i]++;
		break;
	case VSXB_CONN_EV_REFUSE:
		vsxb_add(&r->st.refused, 1);
		vm->ct.refused[i]++;
		break;
	}
}

static void conn_event_as(struct conn *c, int type, bool count)
{
	struct vsxb_router *r = c->vm->r;
	struct vsxb_conn_event ev = { .type = type };

	if (count)
		count_event(c->vm, type, c->why);
	if (!r->ev_fn)
		return;
	vsxb__conn_info(c, &ev.ci);
	ev.origin = conn_origin(c);
	if (type != VSXB_CONN_EV_OPEN) {
		ev.reason = c->why;
		ev.err = c->why_err;
		ev.limit = c->why_limit;
	}
	if (c->opened && type != VSXB_CONN_EV_OPEN)
		ev.duration_ms = mono_ms() - c->opened_ms;
	if (type == VSXB_CONN_EV_REFUSE)
		refuse_rate(c->vm, &ev);
	r->ev_fn(r->ev_arg, &ev);
}

static void conn_event(struct conn *c, int type)
{
	conn_event_as(c, type, true);
}

void vsxb__conn_opened(struct conn *c)
{
	if (c->opened || c->dead)
		return;
	c->opened = true;
	c->opened_ms = mono_ms();
	conn_event(c, VSXB_CONN_EV_OPEN);
}

void vsxb__conn_reopened(struct conn *c)
{
	if (c->opened || c->dead)
		return;
	c->opened = true;
	c->opened_ms = mono_ms();
	conn_event_as(c, VSXB_CONN_EV_OPEN, false);
}

void vsxb__refuse(struct vsxb_vm *vm, uint16_t type, uint32_t guest_port,
		 uint64_t peer_cid, uint32_t peer_port, bool guest_initiated,
		 int reason, int err, int limit)
{
	struct vsxb_router *r = vm->r;
	struct vsxb_conn_event ev = {
		.type = VSXB_CONN_EV_REFUSE,
		.reason = reason,
		.err = err,
		.limit = limit,
	};

	count_event(vm, VSXB_CONN_EV_REFUSE, reason);
	if (!r->ev_fn)
		return;
	ev.ci.vm = vm->name;
	ev.ci.type = type;
	ev.ci.state = VSXB_CONN_CONNECTING;
	ev.ci.guest_cid = vm->cid;
	ev.ci.guest_port = guest_port;
	ev.ci.peer_cid = peer_cid;
	ev.ci.peer_port = peer_port;
	ev.ci.guest_initiated = guest_initiated;
	ev.origin = guest_initiated ? "guest" : peer_cid == VSOCK_CID_HOST ? "host"
									  : "sibling";
	refuse_rate(vm, &ev);
	r->ev_fn(r->ev_arg, &ev);
}

int vsxb__conn_limit(struct vsxb_vm *vm, unsigned n)
{
	struct vsxb_router *r = vm->r;

	if (vm->nconns + n > r->lim.max_conns_per_vm) {
		vsxb_add(&r->st.refused_limit_vm, 1);
		vsxb__log(r, VSXB_LOG_DEBUG, "vm %s: connection refused: max-conns-per-vm "
			 "(%u) reached", vm->name, r->lim.max_conns_per_vm);
		return VSXB_LIMIT_VM_CONNS;
	}
	if (r->lim.max_conns && vsxb_load(&r->nconns) + n > r->lim.max_conns) {
		vsxb_add(&r->st.refused_limit_conns, 1);
		vsxb__log(r, VSXB_LOG_DEBUG, "vm %s: connection refused: max-conns (%u) "
			 "reached", vm->name, r->lim.max_conns);
		return VSXB_LIMIT_CONNS;
	}
	return VSXB_LIMIT_NONE;
}

uint32_t vsxb__sib_cap(const struct vsxb_vm *vm)
{
	uint32_t cap = vm->buf_default > VSXB_SIBLING_WINDOW_MAX ? vm->buf_default
								 : VSXB_SIBLING_WINDOW_MAX;

	return vsxb__buf_cap(vm->r, cap);
}

uint32_t vsxb__buf_cap(const struct vsxb_router *r, uint32_t bytes)
{
	if (r->lim.max_conn_memory && bytes > r->lim.max_conn_memory / 2)
		return (uint32_t)(r->lim.max_conn_memory / 2);
	return bytes;
}

void vsxb__conn_ended(struct conn *c)
{
	if (c->opened)
		conn_event(c, reason_graceful(c->why) ? VSXB_CONN_EV_CLOSE
						      : VSXB_CONN_EV_RESET);
	else
		conn_event(c, VSXB_CONN_EV_REFUSE);
}

/* ---- Introspection ---- */

void vsxb__conn_info(const struct conn *c, struct vsxb_conn_info *ci)
{
	const struct txq *q = c->ops->queue ? c->ops->queue(c) : &c->q;
	uint32_t fwd, buf, held;

	vsxb__conn_window(c, &fwd, &buf);
	held = c->cr.rx_cnt - fwd;

	memset(ci, 0, sizeof(*ci));
	ci->id = c->id;
	ci->vm = c->vm->name;
	ci->type = c->type;
	ci->state = c->state;
	ci->peer_kind = c->peer_kind;
	ci->guest_cid = c->vm->cid;
	ci->guest_port = c->guest_port;
	ci->peer_cid = c->peer_cid;
	ci->peer_port = c->peer_port;
	ci->guest_initiated = c->guest_initiated;
	ci->guest_shut = c->guest_shut;
	ci->host_shut = c->host_shut;
	ci->to_guest_bytes = c->to_guest;
	ci->from_guest_bytes = c->from_guest;
	ci->buf_alloc = buf;
	ci->fwd_cnt = fwd;
	ci->peer_buf_alloc = c->cr.peer_buf_alloc;
	ci->peer_fwd_cnt = c->cr.peer_fwd_cnt;
	ci->tx_free = vsxb__conn_peer_free(c);
	ci->rx_free = held < buf ? buf - held : 0;
	ci->queued = q ? (uint32_t)q->bytes : 0;
	ci->tag = c->tag;
	ci->vm_paused = c->vm->paused;
}
