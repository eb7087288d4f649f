/*
 * The metrics endpoint (metrics.h; vsxd(8), METRICS).
 *
 * One evhttp server on vsxd's own loop: it never blocks, so neither a slow
 * client nor a flood of requests can hold up the data path, which runs on
 * the same loop between the server's callbacks. What it serves is one page,
 * built in memory at each request from counters the backend keeps anyway
 * (an increment on the data path each): per VM a fixed set of series, the
 * reason-labelled ones bounded by the enum of reasons, and never one per
 * connection. The page is then written out by libevent as the client
 * reads it; a client that stops reading is dropped at the timeout.
 *
 * Bounds on what a client can cost: request headers up to 8 KiB, a body up
 * to 1 KiB (none is needed), VSXD_METRICS_TIMEOUT_S to send a request and
 * read the answer. libevent 2.1 (Debian 12) has no cap on evhttp's
 * connections (evhttp_set_max_connections is 2.2's), so new connections
 * are counted instead, as evhttp asks for each one's bufferevent: after
 * VSXD_METRICS_MAX_NEW in one timeout window the listener pauses until
 * the window ends, which bounds the descriptors a flood can take from
 * the data path. An accept that fails (no descriptor left) pauses the
 * listener as every listener of vsxd pauses (vhost-user/acceptor.h's
 * back-off and rate-limited log line), through evconnlistener's error
 * callback: without one, libevent leaves the listener enabled, and a
 * listener it cannot accept on wakes the loop at once, forever.
 *
 * Methods: GET and HEAD; any other gets 405 with "Allow: GET, HEAD". Any
 * path but /metrics gets 404; a malformed request, evhttp's 400.
 */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "util.h"
#include "metrics.h"
#include "workers.h"
#include "forward.h"
#include "vhost-user/acceptor.h"
#include "vhost-user/loop-event.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define MAX_HEADERS 8192
#define MAX_BODY 1024

struct vsxd_metrics {
	struct vsxb_router *r;
	struct vsxd_fwds *fwds;
	const struct vsxu_evloop *evloop;
	const struct vsxd_workers *workers;
	const uint64_t *handoffs_failed;
	vsxb_log_fn log;
	void *log_arg;
	char *addr;
	struct evhttp *http;
	struct evhttp_bound_socket *sock;
	struct event *resume;        /* the listener paused: window end */
	bool window_full;            /* ...until @resume */
	struct vsxu_backoff bo;       /* accept failures (acceptor.h) */
	struct event *bo_resume;     /* the listener paused: back-off end */
	bool backing_off;            /* ...until @bo_resume */
	char name[NI_MAXHOST + 32];  /* "metrics HOST:PORT", in the log */
	struct vsxd_metrics *next;   /* live_metrics */
	unsigned accepted;           /* in the current window */
	struct timespec window;      /* when it began */
	time_t started;              /* vsxd_start_time_seconds */
	struct vsxd_start_info start;
	bool has_start;
};

__attribute__((format(printf, 3, 4)))
static void mlog(struct vsxd_metrics *m, int prio, const char *fmt, ...)
{
	va_list ap;

	if (!m->log)
		return;
	va_start(ap, fmt);
	vsx__logv(m->log, m->log_arg, prio, fmt, ap);
	va_end(ap);
}

/* ---- The page ---- */

/* The label values of enum vsxb_conn_reason: the only table. */
static const char *const reason_label[VSXB_REASON_COUNT] = {
	[VSXB_REASON_NONE] = "none",
	[VSXB_REASON_GUEST_SHUTDOWN] = "guest_shutdown",
	[VSXB_REASON_HOST_EOF] = "host_eof",
	[VSXB_REASON_HOST_CLOSED] = "host_closed",
	[VSXB_REASON_PEER_SHUTDOWN] = "peer_shutdown",
	[VSXB_REASON_GUEST_RST] = "guest_rst",
	[VSXB_REASON_PEER_RST] = "peer_rst",
	[VSXB_REASON_REFUSED] = "refused",
	[VSXB_REASON_CONNECT_TIMEOUT] = "connect_timeout",
	[VSXB_REASON_HANDSHAKE_TIMEOUT] = "handshake_timeout",
	[VSXB_REASON_LINGER_TIMEOUT] = "linger_timeout",
	[VSXB_REASON_CONTROL_CLOSE] = "control_close",
	[VSXB_REASON_CONTROL_RESET] = "control_reset",
	[VSXB_REASON_VM_GONE] = "vm_gone",
	[VSXB_REASON_LIMIT] = "limit",
	[VSXB_REASON_PROTOCOL] = "protocol",
	[VSXB_REASON_ERROR] = "error",
	[VSXB_REASON_VM_NOT_RUNNING] = "vm_not_running",
	[VSXB_REASON_BAD_HANDSHAKE] = "bad_handshake",
};

static const char *const state_label[] = {
	[VSXB_CONN_CONNECTING] = "connecting",
	[VSXB_CONN_ESTABLISHED] = "established",
	[VSXB_CONN_CLOSING] = "closing",
};

struct vm_row {
	struct vsxb_vm_info info;
	struct vsxb_vm_counters ct;
	char label[160];             /* vm="..." escaped, or "" when too long */
};

struct page {
	struct evbuffer *b;
	struct vm_row *vms;
	size_t n, max;
	int err;
};

__attribute__((format(printf, 2, 3)))
static void out(struct page *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (!p->err && evbuffer_add_vprintf(p->b, fmt, ap) < 0)
		p->err = -ENOMEM;
	va_end(ap);
}

static void family(struct page *p, const char *name, const char *type, const char *help)
{
	out(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value escaped as the text format wants (\\, \", \n); false when
 * it does not fit. */
static bool escape(char *dst, size_t len, const char *s)
{
	size_t o = 0;

	for (; *s; s++) {
		const char *e = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
		size_t k = e ? 2 : 1;

		if (o + k >= len)
			return false;
		if (e)
			memcpy(dst + o, e, 2);
		else
			dst[o] = *s;
		o += k;
	}
	dst[o] = '\0';
	return true;
}

static int vm_row_cb(struct vsxb_vm *vm, void *arg)
{
	struct page *p = arg;
	struct vm_row *row;
	char v[128];

	if (p->n == p->max) {
		size_t max = p->max ? p->max * 2 : 8;
		struct vm_row *a = realloc(p->vms, max * sizeof(*a));

		if (!a) {
			p->err = -ENOMEM;
			return 1;
		}
		p->vms = a;
		p->max = max;
	}
	row = &p->vms[p->n++];
	vsxb_vm_get_info(vm, &row->info);
	vsxb_vm_get_counters(vm, &row->ct);
	if (!escape(v, sizeof(v), row->info.name))
		snprintf(v, sizeof(v), "cid%llu", (unsigned long long)row->info.guest_cid);
	snprintf(row->label, sizeof(row->label), "vm=\"%s\"", v);
	return 0;
}

static void per_vm(struct page *p, const char *name, const char *type, const char *help,
		   uint64_t (*get)(const struct vm_row *))
{
	size_t i;

	family(p, name, type, help);
	for (i = 0; i < p->n; i++)
		out(p, "%s{%s} %llu\n", name, p->vms[i].label,
		    (unsigned long long)get(&p->vms[i]));
}

static uint64_t get_up(const struct vm_row *v) { return v->info.connected; }
static uint64_t get_broken(const struct vm_row *v) { return v->info.broken; }
static uint64_t get_opened(const struct vm_row *v) { return v->ct.opened; }
static uint64_t get_stalls(const struct vm_row *v) { return v->ct.credit_stalls; }
static uint64_t get_queued(const struct vm_row *v) { return v->ct.queued_bytes; }

/* A family of reason-labelled counters: only the reasons seen so far. */
static void by_reason(struct page *p, const char *name, const char *help, size_t off)
{
	size_t i, k;

	family(p, name, "counter", help);
	for (i = 0; i < p->n; i++) {
		const uint64_t *c = (const uint64_t *)((const char *)&p->vms[i].ct + off);

		for (k = 0; k < VSXB_REASON_COUNT; k++)
			if (c[k])
				out(p, "%s{%s,reason=\"%s\"} %llu\n", name, p->vms[i].label,
				    reason_label[k], (unsigned long long)c[k]);
	}
}

static void vm_families(struct page *p)
{
	size_t i, s;

	family(p, "vsxd_vms", "gauge", "VMs served.");
	out(p, "vsxd_vms %zu\n", p->n);
	per_vm(p, "vsxd_vm_up", "gauge",
	       "1 when the VM's front-end (QEMU) has its device running.", get_up);
	per_vm(p, "vsxd_vm_broken", "gauge",
	       "1 when the device stopped after a bad guest, until it resets.", get_broken);
	family(p, "vsxd_connections", "gauge", "Live connections by state.");
	for (i = 0; i < p->n; i++)
		for (s = VSXB_CONN_CONNECTING; s <= VSXB_CONN_CLOSING; s++)
			out(p, "vsxd_connections{%s,state=\"%s\"} %u\n", p->vms[i].label,
			    state_label[s], p->vms[i].ct.conns[s]);
	per_vm(p, "vsxd_connections_opened_total", "counter",
	       "Connections established.", get_opened);
	by_reason(p, "vsxd_connections_closed_total",
		  "Established connections that ended gracefully, by reason.",
		  offsetof(struct vsxb_vm_counters, closed));
	by_reason(p, "vsxd_connections_reset_total",
		  "Established connections that were reset, by reason.",
		  offsetof(struct vsxb_vm_counters, reset));
	by_reason(p, "vsxd_connections_refused_total",
		  "Connection attempts that never got established, by reason.",
		  offsetof(struct vsxb_vm_counters, refused));
	family(p, "vsxd_bytes_total", "counter", "Payload bytes moved through the guest's "
	       "virtqueues.");
	for (i = 0; i < p->n; i++) {
		out(p, "vsxd_bytes_total{%s,direction=\"guest_to_host\"} %llu\n",
		    p->vms[i].label, (unsigned long long)p->vms[i].ct.from_guest_bytes);
		out(p, "vsxd_bytes_total{%s,direction=\"host_to_guest\"} %llu\n",
		    p->vms[i].label, (unsigned long long)p->vms[i].ct.to_guest_bytes);
	}
	per_vm(p, "vsxd_credit_stalls_total", "counter",
	       "Times a connection had data for its guest and no credit left.", get_stalls);
	per_vm(p, "vsxd_queued_bytes", "gauge",
	       "Bytes held for slow peers now, all connections.", get_queued);
}

static void daemon_families(struct vsxd_metrics *m, struct page *p)
{
	struct vsxb_router_stats rs;
	struct vsxd_fwd_stats fs = { 0 };
	struct vsxd_workers_info wsi;   /* once per scrape: every family below */
	uint64_t hits, misses;
	unsigned i;

	family(p, "vsxd_build_info", "gauge", "Always 1; the version of vsxd.");
	out(p, "vsxd_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	family(p, "vsxd_start_time_seconds", "gauge", "When vsxd started, in seconds "
	       "since the epoch.");
	out(p, "vsxd_start_time_seconds %lld\n", (long long)m->started);
	if (m->has_start) {
		family(p, "vsxd_generation", "gauge", "1 for a fresh start, +1 per "
		       "recovery after a crash or live handoff.");
		out(p, "vsxd_generation %llu\n", (unsigned long long)m->start.generation);
		family(p, "vsxd_start_mode", "gauge", "How this process started: 1 for "
		       "its mode (fresh, recovered, handed-over).");
		out(p, "vsxd_start_mode{mode=\"%s\"} 1\n", m->start.mode);
		family(p, "vsxd_handoff_listeners", "gauge", "Listening sockets this "
		       "process took over in a live handoff.");
		out(p, "vsxd_handoff_listeners %u\n", m->start.listeners);
		family(p, "vsxd_fd_store", "gauge", "1 when the VMs' devices are kept in "
		       "the service manager's file descriptor store.");
		out(p, "vsxd_fd_store %d\n", m->start.store ? 1 : 0);
		family(p, "vsxd_recovery_vms", "gauge", "VMs named by the state at this "
		       "start, by result.");
		out(p, "vsxd_recovery_vms{result=\"recovered\"} %u\n",
		    m->start.vms_recovered);
		out(p, "vsxd_recovery_vms{result=\"fresh\"} %u\n", m->start.vms_failed);
		family(p, "vsxd_recovery_connections_ended", "gauge", "Connections the "
		       "state named at this start, ended (RST to the guest).");
		out(p, "vsxd_recovery_connections_ended %u\n", m->start.conns_ended);
		family(p, "vsxd_recovery_connections_kept", "gauge", "Connections the "
		       "state named at this start, kept going (a live handoff).");
		out(p, "vsxd_recovery_connections_kept %u\n", m->start.conns_kept);
	}

	if (m->handoffs_failed) {
		family(p, "vsxd_handoffs_failed_total", "counter", "Live handoffs "
		       "(vsxctl upgrade) that failed: this process served on.");
		out(p, "vsxd_handoffs_failed_total %llu\n",
		    (unsigned long long)__atomic_load_n(m->handoffs_failed, __ATOMIC_RELAXED));
	}

	vsxb_router_get_stats(m->r, &rs);
	family(p, "vsxd_limit_hits_total", "counter", "Connections refused (max_conns, "
	       "max_conns_per_vm) or reset (max_conn_memory) by a limit.");
	out(p, "vsxd_limit_hits_total{limit=\"max_conns\"} %llu\n",
	    (unsigned long long)rs.refused_limit_conns);
	out(p, "vsxd_limit_hits_total{limit=\"max_conns_per_vm\"} %llu\n",
	    (unsigned long long)rs.refused_limit_vm);
	out(p, "vsxd_limit_hits_total{limit=\"max_conn_memory\"} %llu\n",
	    (unsigned long long)rs.reset_limit_memory);

	if (m->fwds)
		vsxd_fwds_stats(m->fwds, &fs);
	family(p, "vsxd_forwards", "gauge", "Forwards running.");
	out(p, "vsxd_forwards %u\n", fs.forwards);
	family(p, "vsxd_relays", "gauge", "Live relayed connections of forwards.");
	out(p, "vsxd_relays %u\n", fs.relays);
	family(p, "vsxd_forward_connections_total", "counter", "Connections on the listen "
	       "sides of forwards, by result.");
	out(p, "vsxd_forward_connections_total{result=\"accepted\"} %llu\n",
	    (unsigned long long)fs.accepted);
	out(p, "vsxd_forward_connections_total{result=\"denied\"} %llu\n",
	    (unsigned long long)fs.denied);
	out(p, "vsxd_forward_connections_total{result=\"failed\"} %llu\n",
	    (unsigned long long)fs.failed);
	family(p, "vsxd_auth_failures_total", "counter", "Peer authentications (auth=psk) "
	       "that failed.");
	out(p, "vsxd_auth_failures_total %llu\n", (unsigned long long)fs.auth_failures);

	hits = m->evloop ? m->evloop->poll_hits : 0;
	misses = m->evloop ? m->evloop->poll_misses : 0;
	vsxd_workers_info(m->workers, &wsi);
	for (i = 0; i < wsi.n; i++) {
		hits += wsi.wi[i].poll_hits;
		misses += wsi.wi[i].poll_misses;
	}
	family(p, "vsxd_poll_hits_total", "counter", "Events that came while a loop "
	       "busy-polled (--poll-us), all threads.");
	out(p, "vsxd_poll_hits_total %llu\n", (unsigned long long)hits);
	family(p, "vsxd_poll_misses_total", "counter", "Polling windows that ran out "
	       "without an event, all threads.");
	out(p, "vsxd_poll_misses_total %llu\n", (unsigned long long)misses);
	if (!m->workers)
		return;
	family(p, "vsxd_worker_cpu_seconds_total", "counter", "CPU time of each worker "
	       "thread (vsxd-wN), which serves its VMs' data path.");
	for (i = 0; i < wsi.n; i++)
		out(p, "vsxd_worker_cpu_seconds_total{thread=\"w%u\"} %.3f\n",
		    wsi.wi[i].index, (double)wsi.wi[i].cpu_ns / 1e9);
	family(p, "vsxd_worker_vms", "gauge", "VMs each worker thread serves.");
	for (i = 0; i < wsi.n; i++)
		out(p, "vsxd_worker_vms{thread=\"w%u\"} %u\n", wsi.wi[i].index,
		    wsi.wi[i].vms);
}

int vsxd_metrics_render(struct vsxd_metrics *m, struct evbuffer *b)
{
	struct page p = { .b = b };

	vsxb_router_foreach_vm(m->r, vm_row_cb, &p);
	daemon_families(m, &p);
	if (!p.err)
		vm_families(&p);
	free(p.vms);
	return p.err;
}

/* ---- The server ---- */

static void on_request(struct evhttp_request *req, void *arg)
{
	struct vsxd_metrics *m = arg;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	struct evbuffer *b;

	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		/* not evhttp_send_error: it drops the headers set */
		evhttp_add_header(h, "Allow", "GET, HEAD");
		evhttp_add_header(h, "Content-Type", "text/plain");
		b = evbuffer_new();
		if (b)
			evbuffer_add_printf(b, "405 Method Not Allowed: GET or HEAD /metrics\n");
		evhttp_send_reply(req, 405, "Method Not Allowed", b);
		if (b)
			evbuffer_free(b);
		return;
	}
	if (!path || strcmp(path, "/metrics")) {
		evhttp_send_error(req, HTTP_NOTFOUND, NULL);
		return;
	}
	b = evbuffer_new();
	if (!b || vsxd_metrics_render(m, b) < 0) {
		mlog(m, VSXB_LOG_WARNING, "metrics: out of memory for a page");
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		if (b)
			evbuffer_free(b);
		return;
	}
	evhttp_add_header(h, "Content-Type", CONTENT_TYPE);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply(req, HTTP_OK, "OK", b);
	evbuffer_free(b);
}

/*
 * evconnlistener calls its error callback with its own argument, which
 * evhttp set to the struct evhttp: the endpoints alive are listed here to
 * find ours. Only the main thread makes and frees them.
 */
static struct vsxd_metrics *live_metrics;

/* The listener accepts unless a window is full or a back-off runs. */
static void listener_update(struct vsxd_metrics *m)
{
	struct evconnlistener *lev = evhttp_bound_socket_get_listener(m->sock);

	if (m->window_full || m->backing_off)
		evconnlistener_disable(lev);
	else
		evconnlistener_enable(lev);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct vsxd_metrics *m = arg;

	(void)fd;
	(void)what;
	m->accepted = 0;
	clock_gettime(CLOCK_MONOTONIC, &m->window);
	m->window_full = false;
	listener_update(m);
	mlog(m, VSXB_LOG_INFO, "metrics: accepting connections again");
}

static void on_backoff_end(evutil_socket_t fd, short what, void *arg)
{
	struct vsxd_metrics *m = arg;

	(void)fd;
	(void)what;
	m->backing_off = false;
	listener_update(m);
}

/* An accept failed (libevent skipped EAGAIN, EINTR, ECONNABORTED). */
static void on_accept_error(struct evconnlistener *lev, void *http)
{
	int err = EVUTIL_SOCKET_ERROR();
	struct vsxd_metrics *m;
	struct timeval tv;
	unsigned ms;

	(void)lev;
	for (m = live_metrics; m && m->http != http; m = m->next)
		;
	if (!m || vsxu_acceptor_err_kind(err) != VSXU_ACCEPTOR_BACKOFF)
		return;
	ms = vsxu_backoff_failed(&m->bo, m->name, err, m->log, m->log_arg);
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	m->backing_off = true;
	listener_update(m);
	evtimer_add(m->bo_resume, &tv);
}

/* evhttp asks for each new connection's bufferevent: count it. */
static struct bufferevent *on_new_conn(struct event_base *base, void *arg)
{
	struct vsxd_metrics *m = arg;
	struct timespec now;

	vsxu_backoff_accepted(&m->bo, m->name, m->log, m->log_arg);
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - m->window.tv_sec >= VSXD_METRICS_TIMEOUT_S) {
		m->window = now;
		m->accepted = 0;
	}
	if (++m->accepted >= VSXD_METRICS_MAX_NEW && m->sock && m->resume) {
		struct timeval tv = {
			.tv_sec = VSXD_METRICS_TIMEOUT_S - (now.tv_sec - m->window.tv_sec),
		};

		m->window_full = true;
		listener_update(m);
		evtimer_add(m->resume, &tv);
		mlog(m, VSXB_LOG_WARNING, "metrics: %u connections in %d s: not accepting "
		     "more for %lld s", m->accepted, VSXD_METRICS_TIMEOUT_S,
		     (long long)tv.tv_sec);
	}
	return bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
}

/* "HOST:PORT" of the socket bound, for the log. */
static void bound_name(const struct vsxd_metrics *m, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	evutil_socket_t fd = evhttp_bound_socket_get_fd(m->sock);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "?");
		return;
	}
	snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

/* The listener a live handoff passed for @host:@port (util.h, inherited
 * listeners), served by @http; NULL when there is none. */
static struct evhttp_bound_socket *inherited_socket(struct evhttp *http, const char *host,
						    unsigned port)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
	};
	struct evhttp_bound_socket *bs = NULL;
	struct addrinfo *ai, *a;
	char ps[16];
	int fd = -1;

	if (!vsx__inherit_pending())
		return NULL;
	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &ai) != 0)
		return NULL;
	for (a = ai; a && fd < 0; a = a->ai_next)
		fd = vsx__inherit_find(a->ai_addr, a->ai_addrlen, SOCK_STREAM);
	freeaddrinfo(ai);
	if (fd >= 0) {
		evutil_make_socket_nonblocking(fd);
		bs = evhttp_accept_socket_with_handle(http, fd);
		if (!bs)
			close(fd);
	}
	return bs;
}

int vsxd_metrics_new(struct event_base *base, struct vsxb_router *r,
		     const struct vsxd_metrics_opts *o, struct vsxd_metrics **out,
		     struct vsxd_err *err)
{
	struct vsxd_endpoint ep = { 0 };
	struct vsxd_metrics *m;
	char name[NI_MAXHOST + 16];
	int rc;

	*out = NULL;
	rc = vsxd_metrics_check(o->addr, strlen(o->addr), "metrics", &ep, err);
	if (rc < 0) {
		vsxd_endpoint_free(&ep);
		return rc;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		rc = -ENOMEM;
		goto fail;
	}
	m->r = r;
	m->fwds = o->fwds;
	m->evloop = o->evloop;
	m->workers = o->workers;
	m->log = o->log;
	m->log_arg = o->log_arg;
	m->started = time(NULL);
	if (o->start) {
		m->start = *o->start;
		m->has_start = true;
		m->started = o->start->started;
	}
	m->handoffs_failed = o->handoffs_failed;
	clock_gettime(CLOCK_MONOTONIC, &m->window);
	m->addr = strdup(o->addr);
	m->http = evhttp_new(base);
	m->resume = evtimer_new(base, on_resume, m);
	m->bo_resume = evtimer_new(base, on_backoff_end, m);
	if (!m->addr || !m->http || !m->resume || !m->bo_resume) {
		rc = -ENOMEM;
		goto fail;
	}
	evhttp_set_max_headers_size(m->http, MAX_HEADERS);
	evhttp_set_max_body_size(m->http, MAX_BODY);
	evhttp_set_timeout(m->http, VSXD_METRICS_TIMEOUT_S);
	/* Every method reaches on_request, which answers 405 itself (evhttp
	 * would say 501 for a method it is told to refuse). */
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
				   EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
				   EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(m->http, on_request, m);
	evhttp_set_bevcb(m->http, on_new_conn, m);
	errno = 0;
	m->sock = inherited_socket(m->http, ep.host, ep.port);
	if (!m->sock)
		m->sock = evhttp_bind_socket_with_handle(m->http, ep.host,
							 (ev_uint16_t)ep.port);
	if (!m->sock) {
		rc = errno ? -errno : -EADDRNOTAVAIL;
		vsxd_err_set(err, "metrics %s: cannot listen: %s%s", o->addr,
			     errno ? strerror(errno) : "the host does not resolve",
			     rc == -EADDRINUSE ? " (another program has that port: give "
			     "metrics one that is free)" : "");
		goto fail;
	}
	bound_name(m, name, sizeof(name));
	snprintf(m->name, sizeof(m->name), "metrics %s", name);
	evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(m->sock), on_accept_error);
	m->next = live_metrics;
	live_metrics = m;
	mlog(m, VSXB_LOG_INFO, "metrics on http://%s/metrics", name);
	vsxd_endpoint_free(&ep);
	*out = m;
	return 0;
fail:
	if (rc == -ENOMEM)
		vsxd_err_set(err, "metrics: out of memory");
	vsxd_endpoint_free(&ep);
	vsxd_metrics_free(m);
	return rc;
}

void vsxd_metrics_free(struct vsxd_metrics *m)
{
	struct vsxd_metrics **pp;

	if (!m)
		return;
	for (pp = &live_metrics; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	}
	if (m->http)
		evhttp_free(m->http);  /* the socket and every connection */
	if (m->resume)
		event_free(m->resume);
	if (m->bo_resume)
		event_free(m->bo_resume);
	free(m->addr);
	free(m);
}

const char *vsxd_metrics_addr(const struct vsxd_metrics *m)
{
	return m->addr;
}
