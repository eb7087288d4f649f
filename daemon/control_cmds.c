/*
 * vsxd's control commands (libvsx/ctl-proto.h; vsxd(8), CONTROL SOCKET):
 * one request block checked (version, keys, the command's arguments) and
 * answered from the backend's introspection and control calls, the
 * forwards' relays and the loop's counters. The socket, its clients and
 * their framing are control.c's; this file sees one complete block at a
 * time (vsxd_control_answer) and writes one reply block.
 *
 * Every reply ends with "errno=N" (0: success), preceded by "error=TEXT"
 * when N is not 0; values are printable ASCII (other bytes appear as
 * \xNN).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "ctl-proto.h"
#include "control.h"
#include "control-int.h"
#include "vhost-user/loop-event.h"
#include "forward.h"
#include "workers.h"
#include "handoff.h"
#include "util.h"

#define HOST_CID 2

/* ---- Replies ---- */

__attribute__((format(printf, 3, 4)))
static void put(struct evbuffer *b, const char *key, const char *fmt, ...)
{
	char v[VSX_CTL_VALUE_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	vsxd__ctl_put_str(b, key, v);
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

/* The context of one request: its arguments and the error being built. */
struct req {
	struct vsxd_control *c;
	const struct vsx_kvs *kvs;
	uint32_t uid;
	char err[CTL_ERR_MAX];
};

/* Set the error text; returns @e (a positive errno) for "return fail(...)" */
__attribute__((format(printf, 3, 4)))
static int fail(struct req *q, int e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(q->err, sizeof(q->err), fmt, ap);
	va_end(ap);
	return e;
}

static const char *arg(const struct req *q, const char *key)
{
	return vsx__ctl_get(q->kvs, key);
}

/* ---- Connection records ---- */

static const char *type_name(int t)
{
	return t == 1 ? "stream" : t == 2 ? "seqpacket" : "?";
}

static const char *state_name(int s)
{
	switch (s) {
	case VSXB_CONN_CONNECTING:
		return "connecting";
	case VSXB_CONN_ESTABLISHED:
		return "established";
	case VSXB_CONN_CLOSING:
		return "closing";
	default:
		return "?";
	}
}

/* SHUTDOWN flags (1 rcv, 2 send) as a word. */
static const char *shut_name(unsigned f)
{
	static const char *const n[4] = { "none", "rcv", "send", "both" };

	return n[f & 3];
}

static const char *origin_name(const struct vsxb_conn_info *ci)
{
	if (ci->guest_initiated)
		return "guest";
	return ci->peer_kind;
}

static void put_conn(struct evbuffer *b, const struct vsxb_conn_info *ci)
{
	put(b, VSX_CTL_K_CONN, "%llu", (unsigned long long)ci->id);
	vsxd__ctl_put_str(b, VSX_CTL_K_VM, ci->vm);
	vsxd__ctl_put_str(b, VSX_CTL_K_TYPE, type_name(ci->type));
	vsxd__ctl_put_str(b, VSX_CTL_K_STATE, state_name(ci->state));
	vsxd__ctl_put_str(b, VSX_CTL_K_VM_STATE, ci->vm_paused ? "paused" : "running");
	vsxd__ctl_put_str(b, VSX_CTL_K_ORIGIN, origin_name(ci));
	vsxd__ctl_put_str(b, VSX_CTL_K_PEER_KIND, ci->peer_kind);
	put(b, VSX_CTL_K_GUEST, "%llu:%u", (unsigned long long)ci->guest_cid, ci->guest_port);
	put(b, VSX_CTL_K_PEER, "%llu:%u", (unsigned long long)ci->peer_cid, ci->peer_port);
	put(b, VSX_CTL_K_GUEST_CID, "%llu", (unsigned long long)ci->guest_cid);
	put(b, VSX_CTL_K_GUEST_PORT, "%u", ci->guest_port);
	put(b, VSX_CTL_K_PEER_CID, "%llu", (unsigned long long)ci->peer_cid);
	put(b, VSX_CTL_K_PEER_PORT, "%u", ci->peer_port);
	put(b, VSX_CTL_K_TO_GUEST, "%llu", (unsigned long long)ci->to_guest_bytes);
	put(b, VSX_CTL_K_FROM_GUEST, "%llu", (unsigned long long)ci->from_guest_bytes);
	put(b, VSX_CTL_K_BUF_ALLOC, "%u", ci->buf_alloc);
	put(b, VSX_CTL_K_FWD_CNT, "%u", ci->fwd_cnt);
	put(b, VSX_CTL_K_PEER_BUF_ALLOC, "%u", ci->peer_buf_alloc);
	put(b, VSX_CTL_K_PEER_FWD_CNT, "%u", ci->peer_fwd_cnt);
	put(b, VSX_CTL_K_TX_FREE, "%u", ci->tx_free);
	put(b, VSX_CTL_K_RX_FREE, "%u", ci->rx_free);
	vsxd__ctl_put_str(b, VSX_CTL_K_GUEST_SHUT, shut_name(ci->guest_shut));
	vsxd__ctl_put_str(b, VSX_CTL_K_HOST_SHUT, shut_name(ci->host_shut));
	put(b, VSX_CTL_K_QUEUED, "%u", ci->queued);
	if (ci->tag && *ci->tag)
		vsxd__ctl_put_str(b, VSX_CTL_K_FORWARD, ci->tag);
	/* no auth= here: the engine authenticates nobody (vsxctl shows "-") */
}

/* A relayed connection of a forward (forward.c): "guest" is the client
 * that connected to the forward's listen side, "peer" its connect side;
 * to-guest/from-guest count bytes to and from that client. */
static void put_relay(struct evbuffer *b, const struct vsxd_relay_info *ri)
{
	put(b, VSX_CTL_K_CONN, "%llu", (unsigned long long)ri->id);
	vsxd__ctl_put_str(b, VSX_CTL_K_VM, "-");
	vsxd__ctl_put_str(b, VSX_CTL_K_TYPE, "stream");
	vsxd__ctl_put_str(b, VSX_CTL_K_STATE, ri->state);
	vsxd__ctl_put_str(b, VSX_CTL_K_ORIGIN, "relay");
	vsxd__ctl_put_str(b, VSX_CTL_K_PEER_KIND, "relay");
	vsxd__ctl_put_str(b, VSX_CTL_K_GUEST, ri->client);
	vsxd__ctl_put_str(b, VSX_CTL_K_PEER, ri->target);
	put(b, VSX_CTL_K_TO_GUEST, "%llu", (unsigned long long)ri->to_client);
	put(b, VSX_CTL_K_FROM_GUEST, "%llu", (unsigned long long)ri->from_client);
	put(b, VSX_CTL_K_QUEUED, "%zu", ri->queued_from_client + ri->queued_to_client);
	vsxd__ctl_put_str(b, VSX_CTL_K_FORWARD, ri->forward);
	vsxd__ctl_put_str(b, VSX_CTL_K_AUTH, ri->auth ? "yes" : "no");
}

static int relay_put_cb(const struct vsxd_relay_info *ri, void *arg)
{
	put_relay(arg, ri);
	return 0;
}

struct find_relay {
	uint64_t id;
	struct evbuffer *b;
	char forward[VSX_CTL_VALUE_MAX + 1];
};

static int find_relay_cb(const struct vsxd_relay_info *ri, void *arg)
{
	struct find_relay *f = arg;

	if (ri->id != f->id)
		return 0;
	snprintf(f->forward, sizeof(f->forward), "%s", ri->forward);
	if (f->b)
		put_relay(f->b, ri);
	return 1;
}

static int conn_put_cb(const struct vsxb_conn_info *ci, void *arg)
{
	put_conn(arg, ci);
	return 0;
}

struct find_conn {
	uint64_t id;
	struct evbuffer *b;         /* put the record here, or NULL */
	struct vsxb_conn_info ci;    /* its strings are not kept */
	char vm[VSX_CTL_VALUE_MAX + 1];
};

static int find_conn_cb(const struct vsxb_conn_info *ci, void *arg)
{
	struct find_conn *f = arg;

	if (ci->id != f->id)
		return 0;
	f->ci = *ci;
	snprintf(f->vm, sizeof(f->vm), "%s", ci->vm);
	f->ci.vm = f->vm;
	if (f->b)
		put_conn(f->b, ci);
	return 1;
}

/* Look connection @id up; 1 found (in *@f), 0 not. */
static int find_conn(struct vsxd_control *c, uint64_t id, struct evbuffer *b,
		     struct find_conn *f)
{
	memset(f, 0, sizeof(*f));
	f->id = id;
	f->b = b;
	return vsxb_router_foreach_conn(c->r, NULL, find_conn_cb, f) == 1;
}

/* ---- Argument parsing ---- */

static int parse_id(struct req *q, uint64_t *id)
{
	const char *s = arg(q, VSX_CTL_K_ID);
	uint64_t v;

	if (!s)
		return fail(q, EINVAL, "missing id=ID");
	if (vsx__parse_dec(s, strlen(s), UINT64_MAX, &v) < 0)
		return fail(q, EINVAL, "id '%s' is not a connection id (a decimal number)", s);
	*id = v;
	return 0;
}

static struct vsxb_vm *need_vm(struct req *q, const char *name, int *e)
{
	struct vsxb_vm *vm = vsxb_router_vm_by_name(q->c->r, name);

	if (!vm)
		*e = fail(q, ENOENT, "no VM named '%s'", name);
	return vm;
}

/* ---- Commands ---- */

struct count {
	unsigned vms, connected, conns;
};

static int count_cb(struct vsxb_vm *vm, void *arg)
{
	struct count *n = arg;
	struct vsxb_vm_info vi;

	vsxb_vm_get_info(vm, &vi);
	n->vms++;
	n->connected += vi.connected;
	n->conns += vi.conns;
	return 0;
}

static unsigned count_clients(const struct vsxd_control *c)
{
	return c->nclients;
}

/* The VMs of worker @i, joined by ',' ("-" for none). */
struct thread_vms {
	const struct vsxd_workers *ws;
	int index;
	char names[512];
	size_t len;
};

static int thread_vms_cb(struct vsxb_vm *vm, void *arg)
{
	struct thread_vms *t = arg;
	struct vsxb_vm_info vi;
	int n;

	vsxb_vm_get_info(vm, &vi);
	if (vsxd_workers_index(t->ws, vi.loop) != t->index || t->len >= sizeof(t->names))
		return 0;
	n = snprintf(t->names + t->len, sizeof(t->names) - t->len, "%s%s",
		     t->len ? "," : "", vi.name);
	if (n > 0)
		t->len += (size_t)n;
	if (t->len >= sizeof(t->names))
		memcpy(t->names + sizeof(t->names) - 4, "...", 4);
	return 0;
}

static void put_threads(struct vsxd_control *c, struct evbuffer *b,
			const struct vsxd_workers_info *wsi)
{
	unsigned i;

	put(b, VSX_CTL_K_THREADS, "%u", wsi->n);
	put(b, VSX_CTL_K_THREADS_MAX, "%u", vsxd_workers_max(c->workers));
	for (i = 0; i < wsi->n; i++) {
		const struct vsxd_worker_info *wi = &wsi->wi[i];
		struct thread_vms t = { .ws = c->workers, .index = (int)wi->index };

		vsxb_router_foreach_vm(c->r, thread_vms_cb, &t);
		put(b, VSX_CTL_K_THREAD, "w%u", wi->index);
		vsxd__ctl_put_str(b, VSX_CTL_K_THREAD_VMS, t.len ? t.names : "-");
		put(b, VSX_CTL_K_CPU_MS, "%llu", (unsigned long long)(wi->cpu_ns / 1000000));
	}
}

static int cmd_status(struct req *q, struct evbuffer *b)
{
	struct vsxd_control *c = q->c;
	struct count n = { 0 };
	struct vsxb_router_stats rs;
	struct vsxd_fwd_stats fst;
	struct vsxb_router_limits rl;
	struct vsxd_workers_info wsi;   /* once per reply: polling and threads */
	struct timespec now;
	long long up;

	vsxd_workers_info(c->workers, &wsi);
	vsxb_router_foreach_vm(c->r, count_cb, &n);
	clock_gettime(CLOCK_MONOTONIC, &now);
	up = (long long)(now.tv_sec - c->started.tv_sec);
	if (now.tv_nsec < c->started.tv_nsec)
		up--;
	vsxd__ctl_put_str(b, VSX_CTL_K_VERSION, PACKAGE_VERSION);
	put(b, VSX_CTL_K_PROTOCOL, "%d", VSX_CTL_VERSION);
	put(b, VSX_CTL_K_PID, "%ld", (long)getpid());
	put(b, VSX_CTL_K_UPTIME, "%lld", up < 0 ? 0 : up);
	put(b, VSX_CTL_K_VMS, "%u", n.vms);
	put(b, VSX_CTL_K_VMS_CONNECTED, "%u", n.connected);
	put(b, VSX_CTL_K_CONNS, "%u", n.conns);
	vsxb_router_get_stats(c->r, &rs);
	vsxb_router_get_limits(c->r, &rl);
	put(b, VSX_CTL_K_CONNS_OPENED, "%llu", (unsigned long long)rs.opened);
	put(b, VSX_CTL_K_CONNS_REFUSED, "%llu", (unsigned long long)rs.refused);
	put(b, VSX_CTL_K_REFUSED_MAX_CONNS, "%llu", (unsigned long long)rs.refused_limit_conns);
	put(b, VSX_CTL_K_REFUSED_MAX_CONNS_PER_VM, "%llu",
	    (unsigned long long)rs.refused_limit_vm);
	put(b, VSX_CTL_K_RESET_MAX_CONN_MEMORY, "%llu",
	    (unsigned long long)rs.reset_limit_memory);
	put(b, VSX_CTL_K_MAX_CONNS, "%u", rl.max_conns);
	put(b, VSX_CTL_K_MAX_CONNS_PER_VM, "%u", rl.max_conns_per_vm);
	put(b, VSX_CTL_K_MAX_CONN_MEMORY, "%llu", (unsigned long long)rl.max_conn_memory);
	put(b, VSX_CTL_K_HANDSHAKE_TIMEOUT_MS, "%u", rl.handshake_ms);
	put(b, VSX_CTL_K_CONNECT_TIMEOUT_MS, "%u", rl.connect_ms);
	put(b, VSX_CTL_K_LINGER_TIMEOUT_MS, "%u", rl.linger_ms);
	if (c->evloop) {
		/* the data path's loops: the workers', and this one */
		unsigned win = c->evloop->poll_ns, i;
		uint64_t hits = c->evloop->poll_hits, misses = c->evloop->poll_misses;

		for (i = 0; i < wsi.n; i++) {
			win = wsi.wi[i].poll_ns > win ? wsi.wi[i].poll_ns : win;
			hits += wsi.wi[i].poll_hits;
			misses += wsi.wi[i].poll_misses;
		}
		put(b, VSX_CTL_K_POLL_US, "%u", c->evloop->poll_max_ns / 1000);
		put(b, VSX_CTL_K_POLL_WINDOW_NS, "%u", win);
		put(b, VSX_CTL_K_POLL_HITS, "%llu", (unsigned long long)hits);
		put(b, VSX_CTL_K_POLL_MISSES, "%llu", (unsigned long long)misses);
	}
	vsxd_fwds_stats(c->fwds, &fst);
	put(b, VSX_CTL_K_FORWARDS, "%u", fst.forwards);
	put(b, VSX_CTL_K_RELAYS, "%u", fst.relays);
	put(b, VSX_CTL_K_FWD_ACCEPTED, "%llu", (unsigned long long)fst.accepted);
	put(b, VSX_CTL_K_FWD_DENIED, "%llu", (unsigned long long)fst.denied);
	put(b, VSX_CTL_K_FWD_FAILED, "%llu", (unsigned long long)fst.failed);
	put(b, VSX_CTL_K_AUTH_FAILURES, "%llu", (unsigned long long)fst.auth_failures);
	put(b, VSX_CTL_K_CLIENTS, "%u", count_clients(c));
	vsxd__ctl_put_str(b, VSX_CTL_K_CONTROL, c->path);
	if (c->has_start) {
		vsxd__ctl_put_str(b, VSX_CTL_K_START_MODE, c->start.mode);
		put(b, VSX_CTL_K_GENERATION, "%llu", (unsigned long long)c->start.generation);
		put(b, VSX_CTL_K_STARTED, "%lld", (long long)c->start.started);
		put(b, VSX_CTL_K_FD_STORE, "%d", c->start.store ? 1 : 0);
		put(b, VSX_CTL_K_RECOVERED_VMS, "%u", c->start.vms_recovered);
		put(b, VSX_CTL_K_RECOVERY_FAILED_VMS, "%u", c->start.vms_failed);
		put(b, VSX_CTL_K_RECOVERY_CONNS_ENDED, "%u", c->start.conns_ended);
		put(b, VSX_CTL_K_RECOVERY_CONNS_KEPT, "%u", c->start.conns_kept);
		put(b, VSX_CTL_K_HANDED_OVER_LISTENERS, "%u", c->start.listeners);
	}
	if (c->workers)
		put_threads(c, b, &wsi);
	return 0;
}

static void put_vm(struct vsxd_control *c, struct evbuffer *b, struct vsxb_vm *vm)
{
	struct vsxb_vm_info vi;
	int w;

	vsxb_vm_get_info(vm, &vi);
	vsxd__ctl_put_str(b, VSX_CTL_K_VM, vi.name);
	put(b, VSX_CTL_K_CID, "%llu", (unsigned long long)vi.guest_cid);
	vsxd__ctl_put_str(b, VSX_CTL_K_SOCKET, vi.socket_path);
	if (vi.uds_path)
		vsxd__ctl_put_str(b, VSX_CTL_K_UDS_PATH, vi.uds_path);
	put(b, VSX_CTL_K_CONNECTED, "%d", vi.connected);
	put(b, VSX_CTL_K_BROKEN, "%d", vi.broken);
	put(b, VSX_CTL_K_PAUSED, "%d", vi.paused);
	put(b, VSX_CTL_K_CONNS, "%u", vi.conns);
	put(b, VSX_CTL_K_TX_BUFFER_SIZE, "%u", vi.buf_default);
	w = c->workers ? vsxd_workers_index(c->workers, vi.loop) : -1;
	if (w >= 0)
		put(b, VSX_CTL_K_THREAD, "w%d", w);
}

struct vm_put {
	struct vsxd_control *c;
	struct evbuffer *b;
};

static int vm_put_cb(struct vsxb_vm *vm, void *arg)
{
	struct vm_put *p = arg;

	put_vm(p->c, p->b, vm);
	return 0;
}

static int cmd_vms(struct req *q, struct evbuffer *b)
{
	struct vm_put p = { q->c, b };

	vsxb_router_foreach_vm(q->c->r, vm_put_cb, &p);
	return 0;
}

static int cmd_list(struct req *q, struct evbuffer *b)
{
	const char *name = arg(q, VSX_CTL_K_VM);
	struct vsxb_vm *vm = NULL;
	int e = 0;

	if (name && !(vm = need_vm(q, name, &e)))
		return e;
	vsxb_router_foreach_conn(q->c->r, vm, conn_put_cb, b);
	if (!vm)
		vsxd_fwds_foreach(q->c->fwds, relay_put_cb, b);
	return 0;
}

static int conn_by_host_end(struct req *q, const char *vm_s, const char *uds,
			    const char *port_s, uint64_t *id);

/* show id=ID, or a connection by its host end as set-buffer finds it. */
static int cmd_show(struct req *q, struct evbuffer *b)
{
	const char *vm_s = arg(q, VSX_CTL_K_VM), *uds = arg(q, VSX_CTL_K_UDS_PATH);
	const char *port_s = arg(q, VSX_CTL_K_HOST_PORT);
	struct find_relay fr = { .b = b };
	struct find_conn f;
	uint64_t id;
	int e;

	if ((arg(q, VSX_CTL_K_ID) != NULL) + (vm_s != NULL) + (uds != NULL) != 1 ||
	    (!port_s) != (!vm_s && !uds))
		return fail(q, EINVAL, "show takes id=ID, vm=NAME host-port=P or "
			    "uds-path=PATH host-port=P");
	if (port_s) {
		e = conn_by_host_end(q, vm_s, uds, port_s, &id);
		if (e)
			return e;
		if (!find_conn(q->c, id, b, &f))
			return fail(q, ENOENT, "no connection %llu", (unsigned long long)id);
		return 0;
	}
	e = parse_id(q, &id);
	if (e)
		return e;
	fr.id = id;
	if (!find_conn(q->c, id, b, &f) &&
	    vsxd_fwds_foreach(q->c->fwds, find_relay_cb, &fr) != 1)
		return fail(q, ENOENT, "no connection %llu", (unsigned long long)id);
	return 0;
}

/* set-buffer's uds-path=PATH: the VM whose uds-path it is, by name, or
 * else by the file (a client may spell the path differently). */
struct by_uds {
	const char *path;
	struct stat st;
	bool have_st;
	struct vsxb_vm *vm;
};

static int by_uds_cb(struct vsxb_vm *vm, void *arg)
{
	struct by_uds *u = arg;
	struct vsxb_vm_info vi;
	struct stat st;

	vsxb_vm_get_info(vm, &vi);
	if (!vi.uds_path)
		return 0;
	if (!strcmp(vi.uds_path, u->path) ||
	    (u->have_st && stat(vi.uds_path, &st) == 0 && st.st_dev == u->st.st_dev &&
	     st.st_ino == u->st.st_ino)) {
		u->vm = vm;
		return 1;
	}
	return 0;
}

/* A hybrid connection by host port: the host end's port. Connections the
 * host opened have ports vsxd assigned (unique in the VM); a guest's
 * connections to host port P all have P, so they match only when there
 * is one. */
struct by_port {
	uint32_t port;
	uint64_t host_id, guest_id;
	unsigned nhost, nguest;
};

static int by_port_cb(const struct vsxb_conn_info *ci, void *arg)
{
	struct by_port *p = arg;

	if (ci->peer_cid != HOST_CID || ci->peer_port != p->port)
		return 0;
	if (ci->guest_initiated) {
		p->guest_id = ci->id;
		p->nguest++;
	} else {
		p->host_id = ci->id;
		p->nhost++;
	}
	return 0;
}

static int conn_by_port(struct req *q, struct vsxb_vm *vm, const char *port_s,
			uint64_t *id)
{
	struct by_port p = { 0 };
	uint64_t port;

	if (vsx__parse_dec(port_s, strlen(port_s), UINT32_MAX, &port) < 0)
		return fail(q, EINVAL, "host-port '%s' is not a port (0 to 4294967295)",
			    port_s);
	p.port = (uint32_t)port;
	vsxb_router_foreach_conn(q->c->r, vm, by_port_cb, &p);
	if (p.nhost == 1) {
		*id = p.host_id;
		return 0;
	}
	if (p.nhost == 0 && p.nguest == 1) {
		*id = p.guest_id;
		return 0;
	}
	if (p.nhost + p.nguest == 0)
		return fail(q, ENOENT, "VM %s has no connection with host port %llu",
			    vsxb_vm_name(vm), (unsigned long long)port);
	return fail(q, ENOTUNIQ, "VM %s has %u connections with host port %llu; "
		    "give id=ID (vsxctl list)", vsxb_vm_name(vm), p.nhost + p.nguest,
		    (unsigned long long)port);
}

/* vm=NAME or uds-path=PATH (one of them), and host-port=P: the id. */
static int conn_by_host_end(struct req *q, const char *vm_s, const char *uds,
			    const char *port_s, uint64_t *id)
{
	struct vsxb_vm *vm;
	int e = 0;

	if (vm_s) {
		vm = need_vm(q, vm_s, &e);
		if (!vm)
			return e;
	} else {
		struct by_uds u = { .path = uds };

		u.have_st = stat(uds, &u.st) == 0;
		vsxb_router_foreach_vm(q->c->r, by_uds_cb, &u);
		vm = u.vm;
		if (!vm)
			return fail(q, ENOENT, "no VM of this vsxd has uds-path %s", uds);
	}
	return conn_by_port(q, vm, port_s, id);
}

static int cmd_set_buffer(struct req *q, struct evbuffer *b)
{
	const char *id_s = arg(q, VSX_CTL_K_ID), *vm_s = arg(q, VSX_CTL_K_VM);
	const char *uds = arg(q, VSX_CTL_K_UDS_PATH), *port_s = arg(q, VSX_CTL_K_HOST_PORT);
	const char *rx_s = arg(q, VSX_CTL_K_RX);
	struct vsxd_control *c = q->c;
	uint64_t rx;
	struct find_conn f;
	struct vsxb_vm *vm;
	uint64_t id = 0;
	int e = 0, r;

	if (arg(q, VSX_CTL_K_TX))
		return fail(q, EOPNOTSUPP, "no TX buffer to set: what vsxd sends a guest "
			    "is bounded by the guest's own buffer (peer-buf-alloc); set rx, "
			    "the buffer the guest sees");
	if ((id_s != NULL) + (vm_s != NULL) + (uds != NULL) != 1 ||
	    (port_s && !vm_s && !uds) || (uds && !port_s))
		return fail(q, EINVAL, "set-buffer takes id=ID, vm=NAME, vm=NAME host-port=P "
			    "or uds-path=PATH host-port=P, and rx=BYTES");
	if (!rx_s)
		return fail(q, EINVAL, "missing rx=BYTES");
	r = vsx__parse_dec(rx_s, strlen(rx_s), UINT64_MAX, &rx);
	if (r == -EINVAL)
		return fail(q, EINVAL, "rx '%s' is not a number of bytes (decimal)", rx_s);
	if (r < 0 || rx == 0 || rx > VSXB_MAX_BUF_ALLOC)
		return fail(q, EINVAL, "rx %s is out of range (1 to %u bytes)", rx_s,
			    VSXB_MAX_BUF_ALLOC);

	if (vm_s && !port_s) {
		vm = need_vm(q, vm_s, &e);
		if (!vm)
			return e;
		r = vsxb_vm_set_default_buffer(vm, (uint32_t)rx);
		if (r < 0)
			return fail(q, -r, "VM %s: %s", vm_s, strerror(-r));
		vsxd__ctl_log(c, VSXB_LOG_INFO, "control: set-buffer vm=%s rx=%llu "
			      "scope=new-connections uid=%u", vm_s, (unsigned long long)rx,
			      q->uid);
		vsxd__ctl_put_str(b, VSX_CTL_K_VM, vm_s);
		put(b, VSX_CTL_K_RX, "%llu", (unsigned long long)rx);
		vsxd__ctl_put_str(b, VSX_CTL_K_SCOPE, "new-connections");
		return 0;
	}
	if (id_s) {
		e = parse_id(q, &id);
		if (e)
			return e;
	} else {
		e = conn_by_host_end(q, vm_s, uds, port_s, &id);
		if (e)
			return e;
	}
	r = vsxb_router_conn_set_buffer(c->r, id, (uint32_t)rx);
	if (r == -ENOENT)
		return fail(q, ENOENT, "no connection %llu", (unsigned long long)id);
	if (r == -EINVAL)
		return fail(q, EINVAL, "rx %llu is above half of max-conn-memory",
			    (unsigned long long)rx);
	if (r < 0)
		return fail(q, -r, "connection %llu: %s", (unsigned long long)id, strerror(-r));
	if (!find_conn(c, id, NULL, &f))
		return fail(q, ENOENT, "connection %llu went away", (unsigned long long)id);
	vsxd__ctl_log(c, VSXB_LOG_INFO, "control: set-buffer conn=%llu vm=%s rx=%llu uid=%u",
		      (unsigned long long)id, f.vm, (unsigned long long)rx, q->uid);
	put(b, VSX_CTL_K_CONN, "%llu", (unsigned long long)id);
	vsxd__ctl_put_str(b, VSX_CTL_K_VM, f.vm);
	put(b, VSX_CTL_K_RX, "%llu", (unsigned long long)rx);
	put(b, VSX_CTL_K_BUF_ALLOC, "%u", f.ci.buf_alloc);
	vsxd__ctl_put_str(b, VSX_CTL_K_SCOPE, "connection");
	return 0;
}

static int cmd_close(struct req *q, struct evbuffer *b)
{
	const char *reset_s = arg(q, VSX_CTL_K_RESET);
	struct find_conn f;
	bool reset = false;
	uint64_t id;
	int e, r;

	e = parse_id(q, &id);
	if (e)
		return e;
	if (reset_s) {
		if (strcmp(reset_s, "0") && strcmp(reset_s, "1"))
			return fail(q, EINVAL, "reset '%s' is not 0 or 1", reset_s);
		reset = reset_s[0] == '1';
	}
	if (!find_conn(q->c, id, NULL, &f)) {
		struct find_relay fr = { .id = id };

		if (vsxd_fwds_foreach(q->c->fwds, find_relay_cb, &fr) != 1 ||
		    vsxd_fwds_close(q->c->fwds, id) < 0)
			return fail(q, ENOENT, "no connection %llu",
				    (unsigned long long)id);
		vsxd__ctl_log(q->c, VSXB_LOG_INFO, "control: close conn=%llu forward=%s uid=%u",
			      (unsigned long long)id, fr.forward, q->uid);
		put(b, VSX_CTL_K_CONN, "%llu", (unsigned long long)id);
		vsxd__ctl_put_str(b, VSX_CTL_K_FORWARD, fr.forward);
		vsxd__ctl_put_str(b, VSX_CTL_K_ACTION, "close");
		return 0;
	}
	r = vsxb_router_conn_close(q->c->r, id, reset);
	if (r == -ENOENT)
		return fail(q, ENOENT, "no connection %llu", (unsigned long long)id);
	if (r < 0)
		return fail(q, -r, "connection %llu: %s", (unsigned long long)id, strerror(-r));
	vsxd__ctl_log(q->c, VSXB_LOG_INFO, "control: %s conn=%llu vm=%s uid=%u",
		      reset ? "reset" : "close", (unsigned long long)id, f.vm, q->uid);
	put(b, VSX_CTL_K_CONN, "%llu", (unsigned long long)id);
	vsxd__ctl_put_str(b, VSX_CTL_K_VM, f.vm);
	vsxd__ctl_put_str(b, VSX_CTL_K_ACTION, reset ? "reset" : "close");
	return 0;
}

static int cmd_resolve(struct req *q, struct evbuffer *b)
{
	const char *name = arg(q, VSX_CTL_K_VM);
	struct vsxb_vm_info vi;
	struct vsxb_vm *vm;
	int e = 0;

	if (!name)
		return fail(q, EINVAL, "missing vm=NAME");
	vm = need_vm(q, name, &e);
	if (!vm)
		return e;
	vsxb_vm_get_info(vm, &vi);
	if (!vi.uds_path)
		return fail(q, ENXIO, "VM %s has no uds-path", name);
	if (!printable(vi.uds_path))
		return fail(q, EILSEQ, "VM %s: its uds-path is not printable ASCII; "
			    "connect to unix:PATH:PORT instead", name);
	vsxd__ctl_put_str(b, VSX_CTL_K_VM, vi.name);
	vsxd__ctl_put_str(b, VSX_CTL_K_UDS_PATH, vi.uds_path);
	put(b, VSX_CTL_K_CID, "%llu", (unsigned long long)vi.guest_cid);
	return 0;
}

/* The live handoff (handoff.c): on success the reply is the last thing
 * this process does (control.c: handed_over). */
static int cmd_upgrade(struct req *q, struct evbuffer *b)
{
	struct vsxd_control *c = q->c;
	const char *exec = arg(q, VSX_CTL_K_EXEC);
	struct vsxd_handoff_report rep;
	char why[CTL_ERR_MAX - 64];
	int r;

	if (!c->upgrade)
		return fail(q, EOPNOTSUPP, "this vsxd cannot hand over");
	if (exec && *exec != '/')
		return fail(q, EINVAL, "exec=%s: give an absolute path", exec);
	vsxd__ctl_log(c, VSXB_LOG_INFO, "control: upgrade%s%s uid=%u", exec ? " exec=" : "",
		      exec ? exec : "", q->uid);
	why[0] = '\0';
	r = c->upgrade(c->upgrade_arg, exec, &rep, why, sizeof(why));
	if (r < 0)
		return fail(q, -r, "upgrade failed, the running vsxd serves on: %s", why);
	put(b, VSX_CTL_K_PID, "%d", rep.pid);
	put(b, VSX_CTL_K_VMS, "%u", rep.vms);
	put(b, VSX_CTL_K_CONNS_ENDED, "%u", rep.conns_ended);
	put(b, VSX_CTL_K_CONNS_KEPT, "%u", rep.conns_kept);
	put(b, VSX_CTL_K_LISTENERS, "%u", rep.listeners);
	put(b, VSX_CTL_K_FDS, "%u", rep.fds);
	c->handed_over = true;
	return 0;
}

static const struct ctl_cmd {
	const char *name;
	int (*fn)(struct req *q, struct evbuffer *b);
	const char *keys[7];        /* its argument keys, NULL-terminated */
} commands[] = {
	{ VSX_CTL_STATUS, cmd_status, { NULL } },
	{ VSX_CTL_VMS, cmd_vms, { NULL } },
	{ VSX_CTL_LIST, cmd_list, { VSX_CTL_K_VM, NULL } },
	{ VSX_CTL_SHOW, cmd_show,
	  { VSX_CTL_K_ID, VSX_CTL_K_VM, VSX_CTL_K_UDS_PATH, VSX_CTL_K_HOST_PORT, NULL } },
	{ VSX_CTL_SET_BUFFER, cmd_set_buffer,
	  { VSX_CTL_K_ID, VSX_CTL_K_VM, VSX_CTL_K_UDS_PATH, VSX_CTL_K_HOST_PORT,
	    VSX_CTL_K_RX, VSX_CTL_K_TX, NULL } },
	{ VSX_CTL_CLOSE, cmd_close, { VSX_CTL_K_ID, VSX_CTL_K_RESET, NULL } },
	{ VSX_CTL_RESOLVE, cmd_resolve, { VSX_CTL_K_VM, NULL } },
	{ VSX_CTL_UPGRADE, cmd_upgrade, { VSX_CTL_K_EXEC, NULL } },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* "status, vms, ...": the names of commands[], ctl-proto.h's, for errors. */
static const char *command_names(char *buf, size_t len)
{
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < NCOMMANDS && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "",
				      commands[i].name);
	return buf;
}

/* Which line of the block @copy (@len bytes, lines ending in '\n') does
 * vsx__ctl_parse refuse? 1-based; 0 if none (the block has too many). */
static unsigned bad_line(const char *copy, size_t len)
{
	char line[VSX_CTL_REQ_MAX + 1];
	struct vsx_kvs one;
	const char *p = copy, *nl;
	unsigned n = 0;

	while (p < copy + len) {
		nl = memchr(p, '\n', (size_t)(copy + len - p));
		n++;
		if (!nl)
			return n;
		memcpy(line, p, (size_t)(nl - p + 1));
		if (vsx__ctl_parse(line, (size_t)(nl - p + 1), &one) < 0)
			return n;
		p = nl + 1;
	}
	return 0;
}

/* Check the block and run its command: 0 or a positive errno with q->err. */
static int run(struct req *q, char *req, size_t len, struct evbuffer *b)
{
	char copy[VSX_CTL_REQ_MAX];
	const struct ctl_cmd *cmd = NULL;
	char names[128];
	struct vsx_kvs kvs;
	uint64_t ver;
	const char *name;
	unsigned i, j, k;
	int r;

	/* @req ends with the empty line: parse what precedes its '\n'. */
	len--;
	if (len > sizeof(copy))
		return fail(q, E2BIG, "request larger than %d bytes", VSX_CTL_REQ_MAX);
	memcpy(copy, req, len);
	r = vsx__ctl_parse(req, len, &kvs);
	if (r == -E2BIG)
		return fail(q, E2BIG, "request has more than %d lines", VSX_CTL_MAX_LINES);
	if (r < 0)
		return fail(q, EINVAL, "malformed request: line %u is not KEY=VALUE (KEY: "
			    "[a-z0-9_-], at most %d; VALUE: printable ASCII, at most %d bytes)",
			    bad_line(copy, len), VSX_CTL_KEY_MAX, VSX_CTL_VALUE_MAX);
	q->kvs = &kvs;
	if (kvs.n == 0 || strcmp(kvs.kv[0].key, VSX_CTL_MAGIC))
		return fail(q, EINVAL, "a request starts with " VSX_CTL_MAGIC "=%d",
			    VSX_CTL_VERSION);
	if (vsx__parse_dec(kvs.kv[0].value, strlen(kvs.kv[0].value), UINT64_MAX, &ver) < 0)
		return fail(q, EINVAL, VSX_CTL_MAGIC " '%s' is not a version number",
			    kvs.kv[0].value);
	if (ver < VSX_CTL_VERSION_MIN || ver > VSX_CTL_VERSION)
		return fail(q, EPROTONOSUPPORT, "protocol version %s is not supported: this "
			    "vsxd speaks " VSX_CTL_MAGIC "=%d to %d", kvs.kv[0].value,
			    VSX_CTL_VERSION_MIN, VSX_CTL_VERSION);
	for (i = 1; i < kvs.n; i++)
		for (j = 0; j < i; j++)
			if (!strcmp(kvs.kv[i].key, kvs.kv[j].key))
				return fail(q, EINVAL, "key '%s' given twice", kvs.kv[i].key);
	name = vsx__ctl_get(&kvs, VSX_CTL_K_CMD);
	if (!name)
		return fail(q, EINVAL, "missing " VSX_CTL_K_CMD "= (one of %s)",
			    command_names(names, sizeof(names)));
	for (i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			cmd = &commands[i];
	if (!cmd)
		return fail(q, EINVAL, "unknown command '%s' (one of %s)", name,
			    command_names(names, sizeof(names)));
	for (i = 1; i < kvs.n; i++) {
		const char *key = kvs.kv[i].key;

		if (!strcmp(key, VSX_CTL_K_CMD))
			continue;
		for (k = 0; cmd->keys[k]; k++)
			if (!strcmp(cmd->keys[k], key))
				break;
		if (!cmd->keys[k])
			return fail(q, EINVAL, VSX_CTL_K_CMD "=%s takes no '%s'", name, key);
	}
	return cmd->fn(q, b);
}

void vsxd_control_answer(struct vsxd_control *c, char *req, size_t len, uint32_t uid,
			 struct evbuffer *out)
{
	struct req q = { .c = c, .uid = uid };
	struct evbuffer *b = evbuffer_new();
	int e;

	if (!b) {
		vsxd__ctl_end(out, ENOMEM, "out of memory");
		return;
	}
	e = len ? run(&q, req, len, b) : fail(&q, EINVAL, "empty request");
	if (e) {
		vsxd__ctl_log(c, VSXB_LOG_DEBUG, "control: uid %u: errno=%d: %s", uid, e, q.err);
		vsxd__ctl_end(out, e, q.err);
	} else {
		evbuffer_add_buffer(out, b);
		vsxd__ctl_end(out, 0, NULL);
	}
	evbuffer_free(b);
}

