/*
 * vsxd's control socket (libvsx/ctl-proto.h; documented in vsxd(8)).
 *
 * The listener is a Unix stream socket, mode 0600. Each accepted client
 * is checked with SO_PEERCRED before anything it sends is read: root,
 * vsxd's own effective uid and the control-allow-uid list may talk; any
 * other uid gets one reply (errno=13, EACCES) and is closed once it has
 * sent its request (so its send does not fail with EPIPE first) or after
 * a second.
 *
 * Clients are bufferevents. Requests are read as blocks ended by an empty
 * line, at most VSX_CTL_REQ_MAX bytes each, and answered in order, several
 * per connection. A request that does not end within VSX_CTL_REQ_MAX
 * bytes loses the framing: it gets E2BIG and the connection is closed
 * once the reply is out. Anything wrong inside a well-framed block is
 * answered (EINVAL, EPROTONOSUPPORT, ...) and the connection stays.
 *
 * Bounds. At most max_clients clients are served (more get EBUSY); each
 * holds at most one request of input beyond what it already sent and is
 * not reading while its unsent output exceeds CTL_OUT_HIGH (replies are
 * produced only as the client reads them); a client must complete each
 * request, and read each reply, within timeout_ms of the previous one,
 * or it is told ETIMEDOUT (when its output is empty) and closed. Nothing
 * a client does blocks the loop: sockets are non-blocking and every
 * request is answered from memory.
 *
 * Every reply ends with "errno=N" (0: success), preceded by "error=TEXT"
 * when N is not 0; values are printable ASCII (other bytes appear as
 * \xNN).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "ctl-proto.h"
#include "control.h"
#include "vhost-user/loop-event.h"
#include "forward.h"
#include "util.h"

#define CTL_OUT_HIGH (256u * 1024)  /* stop reading while more is unsent */
#define CTL_LINGER_MS 2000          /* a closing client's last chance */
#define CTL_PAUSE_MS 1000           /* accept paused after EMFILE */
#define CTL_ERR_MAX 512
#define ONE_GIB (1u << 30)
#define HOST_CID 2

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
	struct event *lev;
	struct event *pause;        /* accept paused (EMFILE) */
	uint32_t *allow;
	size_t nallow;
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
	const struct vsx_evloop *evloop; /* the loop's polling, or NULL */
};

/* ---- Logging ---- */

__attribute__((format(printf, 3, 4)))
static void ctl_log(struct vsxd_control *c, int prio, const char *fmt, ...)
{
	char msg[600];
	va_list ap;

	if (!c->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->log(c->log_arg, prio, msg);
}

/* ---- Replies ---- */

/* One "key=value" line; bytes outside printable ASCII become \xNN, and
 * the value is cut at VSX_CTL_VALUE_MAX bytes. */
static void put_str(struct evbuffer *b, const char *key, const char *v)
{
	static const char hex[] = "0123456789abcdef";
	char out[VSX_CTL_VALUE_MAX + 1];
	size_t o = 0;

	for (; *v; v++) {
		unsigned char ch = (unsigned char)*v;

		if (ch >= 0x20 && ch <= 0x7e) {
			if (o + 1 > VSX_CTL_VALUE_MAX)
				break;
			out[o++] = (char)ch;
		} else {
			if (o + 4 > VSX_CTL_VALUE_MAX)
				break;
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = '\0';
	evbuffer_add_printf(b, "%s=%s\n", key, out);
}

__attribute__((format(printf, 3, 4)))
static void put(struct evbuffer *b, const char *key, const char *fmt, ...)
{
	char v[VSX_CTL_VALUE_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	put_str(b, key, v);
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
	return ci->peer_cid == HOST_CID ? "host" : "sibling";
}

static void put_conn(struct evbuffer *b, const struct vsxb_conn_info *ci)
{
	put(b, "conn", "%llu", (unsigned long long)ci->id);
	put_str(b, "vm", ci->vm);
	put_str(b, "type", type_name(ci->type));
	put_str(b, "state", state_name(ci->state));
	put_str(b, "origin", origin_name(ci));
	put(b, "guest", "%llu:%u", (unsigned long long)ci->guest_cid, ci->guest_port);
	put(b, "peer", "%llu:%u", (unsigned long long)ci->peer_cid, ci->peer_port);
	put(b, "to-guest", "%llu", (unsigned long long)ci->to_guest_bytes);
	put(b, "from-guest", "%llu", (unsigned long long)ci->from_guest_bytes);
	put(b, "buf-alloc", "%u", ci->buf_alloc);
	put(b, "fwd-cnt", "%u", ci->fwd_cnt);
	put(b, "peer-buf-alloc", "%u", ci->peer_buf_alloc);
	put(b, "peer-fwd-cnt", "%u", ci->peer_fwd_cnt);
	put(b, "tx-free", "%u", ci->tx_free);
	put(b, "rx-free", "%u", ci->rx_free);
	put_str(b, "guest-shut", shut_name(ci->guest_shut));
	put_str(b, "host-shut", shut_name(ci->host_shut));
	put(b, "queued", "%u", ci->queued);
	if (ci->tag && *ci->tag)
		put_str(b, "forward", ci->tag);
	/* no auth= here: the engine authenticates nobody (vsxctl shows "-") */
}

/* A relayed connection of a forward (forward.c): "guest" is the client
 * that connected to the forward's listen side, "peer" its connect side;
 * to-guest/from-guest count bytes to and from that client. */
static void put_relay(struct evbuffer *b, const struct vsxd_relay_info *ri)
{
	put(b, "conn", "%llu", (unsigned long long)ri->id);
	put_str(b, "vm", "-");
	put_str(b, "type", "stream");
	put_str(b, "state", ri->state);
	put_str(b, "origin", "relay");
	put_str(b, "guest", ri->client);
	put_str(b, "peer", ri->target);
	put(b, "to-guest", "%llu", (unsigned long long)ri->to_client);
	put(b, "from-guest", "%llu", (unsigned long long)ri->from_client);
	put(b, "queued", "%zu", ri->queued_from_client + ri->queued_to_client);
	put_str(b, "forward", ri->forward);
	put_str(b, "auth", ri->auth ? "yes" : "no");
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
	const char *s = arg(q, "id");
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

static int cmd_status(struct req *q, struct evbuffer *b)
{
	struct vsxd_control *c = q->c;
	struct count n = { 0 };
	struct vsxb_router_stats rs;
	struct vsxd_fwd_stats fst;
	struct vsxb_router_limits rl;
	struct timespec now;
	long long up;

	vsxb_router_foreach_vm(c->r, count_cb, &n);
	clock_gettime(CLOCK_MONOTONIC, &now);
	up = (long long)(now.tv_sec - c->started.tv_sec);
	if (now.tv_nsec < c->started.tv_nsec)
		up--;
	put_str(b, "version", PACKAGE_VERSION);
	put(b, "protocol", "%d", VSX_CTL_VERSION);
	put(b, "pid", "%ld", (long)getpid());
	put(b, "uptime", "%lld", up < 0 ? 0 : up);
	put(b, "vms", "%u", n.vms);
	put(b, "vms-connected", "%u", n.connected);
	put(b, "conns", "%u", n.conns);
	vsxb_router_get_stats(c->r, &rs);
	vsxb_router_get_limits(c->r, &rl);
	put(b, "conns-opened", "%llu", (unsigned long long)rs.opened);
	put(b, "conns-refused", "%llu", (unsigned long long)rs.refused);
	put(b, "refused-max-conns", "%llu", (unsigned long long)rs.refused_limit_conns);
	put(b, "refused-max-conns-per-vm", "%llu",
	    (unsigned long long)rs.refused_limit_vm);
	put(b, "reset-max-conn-memory", "%llu", (unsigned long long)rs.reset_limit_memory);
	put(b, "max-conns", "%u", rl.max_conns);
	put(b, "max-conns-per-vm", "%u", rl.max_conns_per_vm);
	put(b, "max-conn-memory", "%llu", (unsigned long long)rl.max_conn_memory);
	put(b, "handshake-timeout-ms", "%u", rl.handshake_ms);
	put(b, "connect-timeout-ms", "%u", rl.connect_ms);
	put(b, "linger-timeout-ms", "%u", rl.linger_ms);
	if (c->evloop) {
		put(b, "poll-us", "%u", c->evloop->poll_max_ns / 1000);
		put(b, "poll-window-ns", "%u", c->evloop->poll_ns);
		put(b, "poll-hits", "%llu", (unsigned long long)c->evloop->poll_hits);
		put(b, "poll-misses", "%llu", (unsigned long long)c->evloop->poll_misses);
	}
	vsxd_fwds_stats(c->fwds, &fst);
	put(b, "forwards", "%u", fst.forwards);
	put(b, "relays", "%u", fst.relays);
	put(b, "fwd-accepted", "%llu", (unsigned long long)fst.accepted);
	put(b, "fwd-denied", "%llu", (unsigned long long)fst.denied);
	put(b, "fwd-failed", "%llu", (unsigned long long)fst.failed);
	put(b, "auth-failures", "%llu", (unsigned long long)fst.auth_failures);
	put(b, "clients", "%u", count_clients(c));
	put_str(b, "control", c->path);
	return 0;
}

static void put_vm(struct evbuffer *b, struct vsxb_vm *vm)
{
	struct vsxb_vm_info vi;

	vsxb_vm_get_info(vm, &vi);
	put_str(b, "vm", vi.name);
	put(b, "cid", "%llu", (unsigned long long)vi.guest_cid);
	put_str(b, "socket", vi.socket_path);
	if (vi.uds_path)
		put_str(b, "uds-path", vi.uds_path);
	put(b, "connected", "%d", vi.connected);
	put(b, "broken", "%d", vi.broken);
	put(b, "conns", "%u", vi.conns);
	put(b, "tx-buffer-size", "%u", vi.buf_default);
}

static int vm_put_cb(struct vsxb_vm *vm, void *arg)
{
	put_vm(arg, vm);
	return 0;
}

static int cmd_vms(struct req *q, struct evbuffer *b)
{
	vsxb_router_foreach_vm(q->c->r, vm_put_cb, b);
	return 0;
}

static int cmd_list(struct req *q, struct evbuffer *b)
{
	const char *name = arg(q, "vm");
	struct vsxb_vm *vm = NULL;
	int e = 0;

	if (name && !(vm = need_vm(q, name, &e)))
		return e;
	vsxb_router_foreach_conn(q->c->r, vm, conn_put_cb, b);
	if (!vm)
		vsxd_fwds_foreach(q->c->fwds, relay_put_cb, b);
	return 0;
}

static int cmd_show(struct req *q, struct evbuffer *b)
{
	struct find_relay fr = { .b = b };
	struct find_conn f;
	uint64_t id;
	int e;

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

static int cmd_set_buffer(struct req *q, struct evbuffer *b)
{
	const char *id_s = arg(q, "id"), *vm_s = arg(q, "vm"), *uds = arg(q, "uds-path");
	const char *port_s = arg(q, "host-port"), *rx_s = arg(q, "rx");
	struct vsxd_control *c = q->c;
	uint64_t rx;
	struct find_conn f;
	struct vsxb_vm *vm;
	uint64_t id = 0;
	int e = 0, r;

	if (arg(q, "tx"))
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
	if (r < 0 || rx == 0 || rx > ONE_GIB)
		return fail(q, EINVAL, "rx %s is out of range (1 to %u bytes)", rx_s, ONE_GIB);

	if (vm_s && !port_s) {
		vm = need_vm(q, vm_s, &e);
		if (!vm)
			return e;
		r = vsxb_vm_set_default_buffer(vm, (uint32_t)rx);
		if (r < 0)
			return fail(q, -r, "VM %s: %s", vm_s, strerror(-r));
		ctl_log(c, VSXB_LOG_INFO, "control: set-buffer vm=%s rx=%llu scope=new-connections "
			"uid=%u", vm_s, (unsigned long long)rx, q->uid);
		put_str(b, "vm", vm_s);
		put(b, "rx", "%llu", (unsigned long long)rx);
		put_str(b, "scope", "new-connections");
		return 0;
	}
	if (id_s) {
		e = parse_id(q, &id);
		if (e)
			return e;
	} else {
		if (vm_s) {
			vm = need_vm(q, vm_s, &e);
			if (!vm)
				return e;
		} else {
			struct by_uds u = { .path = uds };

			u.have_st = stat(uds, &u.st) == 0;
			vsxb_router_foreach_vm(c->r, by_uds_cb, &u);
			vm = u.vm;
			if (!vm)
				return fail(q, ENOENT, "no VM of this vsxd has uds-path %s", uds);
		}
		e = conn_by_port(q, vm, port_s, &id);
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
	ctl_log(c, VSXB_LOG_INFO, "control: set-buffer conn=%llu vm=%s rx=%llu uid=%u",
		(unsigned long long)id, f.vm, (unsigned long long)rx, q->uid);
	put(b, "conn", "%llu", (unsigned long long)id);
	put_str(b, "vm", f.vm);
	put(b, "rx", "%llu", (unsigned long long)rx);
	put(b, "buf-alloc", "%u", f.ci.buf_alloc);
	put_str(b, "scope", "connection");
	return 0;
}

static int cmd_close(struct req *q, struct evbuffer *b)
{
	const char *reset_s = arg(q, "reset");
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
		ctl_log(q->c, VSXB_LOG_INFO, "control: close conn=%llu forward=%s uid=%u",
			(unsigned long long)id, fr.forward, q->uid);
		put(b, "conn", "%llu", (unsigned long long)id);
		put_str(b, "forward", fr.forward);
		put_str(b, "action", "close");
		return 0;
	}
	r = vsxb_router_conn_close(q->c->r, id, reset);
	if (r == -ENOENT)
		return fail(q, ENOENT, "no connection %llu", (unsigned long long)id);
	if (r < 0)
		return fail(q, -r, "connection %llu: %s", (unsigned long long)id, strerror(-r));
	ctl_log(q->c, VSXB_LOG_INFO, "control: %s conn=%llu vm=%s uid=%u",
		reset ? "reset" : "close", (unsigned long long)id, f.vm, q->uid);
	put(b, "conn", "%llu", (unsigned long long)id);
	put_str(b, "vm", f.vm);
	put_str(b, "action", reset ? "reset" : "close");
	return 0;
}

static int cmd_resolve(struct req *q, struct evbuffer *b)
{
	const char *name = arg(q, "vm");
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
	put_str(b, "vm", vi.name);
	put_str(b, "uds-path", vi.uds_path);
	put(b, "cid", "%llu", (unsigned long long)vi.guest_cid);
	return 0;
}

static const struct ctl_cmd {
	const char *name;
	int (*fn)(struct req *q, struct evbuffer *b);
	const char *keys[7];        /* its argument keys, NULL-terminated */
} commands[] = {
	{ VSX_CTL_STATUS, cmd_status, { NULL } },
	{ VSX_CTL_VMS, cmd_vms, { NULL } },
	{ VSX_CTL_LIST, cmd_list, { "vm", NULL } },
	{ VSX_CTL_SHOW, cmd_show, { "id", NULL } },
	{ VSX_CTL_SET_BUFFER, cmd_set_buffer,
	  { "id", "vm", "uds-path", "host-port", "rx", "tx", NULL } },
	{ VSX_CTL_CLOSE, cmd_close, { "id", "reset", NULL } },
	{ VSX_CTL_RESOLVE, cmd_resolve, { "vm", NULL } },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))
#define COMMAND_NAMES "status, vms, list, show, set-buffer, close, resolve"

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
	if (ver != VSX_CTL_VERSION)
		return fail(q, EPROTONOSUPPORT, "protocol version %s is not supported: this "
			    "vsxd speaks " VSX_CTL_MAGIC "=%d", kvs.kv[0].value,
			    VSX_CTL_VERSION);
	for (i = 1; i < kvs.n; i++)
		for (j = 0; j < i; j++)
			if (!strcmp(kvs.kv[i].key, kvs.kv[j].key))
				return fail(q, EINVAL, "key '%s' given twice", kvs.kv[i].key);
	name = vsx__ctl_get(&kvs, "cmd");
	if (!name)
		return fail(q, EINVAL, "missing cmd= (one of " COMMAND_NAMES ")");
	for (i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			cmd = &commands[i];
	if (!cmd)
		return fail(q, EINVAL, "unknown command '%s' (one of " COMMAND_NAMES ")", name);
	for (i = 1; i < kvs.n; i++) {
		const char *key = kvs.kv[i].key;

		if (!strcmp(key, "cmd"))
			continue;
		for (k = 0; cmd->keys[k]; k++)
			if (!strcmp(cmd->keys[k], key))
				break;
		if (!cmd->keys[k])
			return fail(q, EINVAL, "cmd=%s takes no '%s'", name, key);
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
		evbuffer_add_printf(out, "error=out of memory\nerrno=%d\n\n", ENOMEM);
		return;
	}
	e = len ? run(&q, req, len, b) : fail(&q, EINVAL, "empty request");
	if (e) {
		ctl_log(c, VSXB_LOG_DEBUG, "control: uid %u: errno=%d: %s", uid, e, q.err);
		put_str(out, "error", q.err);
		evbuffer_add_printf(out, "errno=%d\n\n", e);
	} else {
		evbuffer_add_buffer(out, b);
		evbuffer_add_printf(out, "errno=0\n\n");
	}
	evbuffer_free(b);
}

/* ---- Clients ---- */

static void client_free(struct ctl_client *cl)
{
	struct vsxd_control *c = cl->c;

	cl->prev->next = cl->next;
	cl->next->prev = cl->prev;
	if (!cl->denied)
		c->nclients--;
	c->nall--;
	if (cl->timer)
		event_free(cl->timer);
	bufferevent_free(cl->bev);
	free(cl);
}

static void client_arm(struct ctl_client *cl, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	evtimer_add(cl->timer, &tv);
}

/* Stop reading; free once the output is out (or after CTL_LINGER_MS). */
static void client_close(struct ctl_client *cl)
{
	cl->closing = true;
	bufferevent_disable(cl->bev, EV_READ);
	client_arm(cl, CTL_LINGER_MS);
}

/* One refusal reply, then close. */
static void client_refuse(struct ctl_client *cl, int e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void client_refuse(struct ctl_client *cl, int e, const char *fmt, ...)
{
	struct evbuffer *out = bufferevent_get_output(cl->bev);
	char msg[CTL_ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	put_str(out, "error", msg);
	evbuffer_add_printf(out, "errno=%d\n\n", e);
}

/* Answer what complete requests the input holds. false: @cl was freed. */
static bool client_process(struct ctl_client *cl)
{
	struct evbuffer *in = bufferevent_get_input(cl->bev);
	struct evbuffer *out = bufferevent_get_output(cl->bev);
	char req[VSX_CTL_REQ_MAX];
	size_t len, n, end;
	unsigned char *p;

	while (!cl->closing && !cl->paused) {
		len = evbuffer_get_length(in);
		if (!len)
			break;
		n = len < VSX_CTL_REQ_MAX ? len : VSX_CTL_REQ_MAX;
		p = evbuffer_pullup(in, (ev_ssize_t)n);
		if (!p) {
			client_free(cl);
			return false;
		}
		end = vsx__ctl_block_end((const char *)p, n);
		if (cl->denied) {
			/* the refusal is queued: wait for the request, drop it */
			evbuffer_drain(in, len);
			if (end || len >= VSX_CTL_REQ_MAX)
				client_close(cl);
			break;
		}
		if (!end) {
			if (len < VSX_CTL_REQ_MAX)
				break;  /* wait for the rest */
			ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: request larger "
				"than %d bytes: closed", (unsigned long long)cl->serial,
				VSX_CTL_REQ_MAX);
			client_refuse(cl, E2BIG, "request larger than %d bytes (or not "
				      "ended by an empty line): connection closed",
				      VSX_CTL_REQ_MAX);
			client_close(cl);
			break;
		}
		memcpy(req, p, end);
		evbuffer_drain(in, end);
		vsxd_control_answer(cl->c, req, end, cl->uid, out);
		client_arm(cl, cl->c->timeout_ms);
		if (evbuffer_get_length(out) > CTL_OUT_HIGH) {
			ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: more than %u "
				"bytes of replies unread: not reading",
				(unsigned long long)cl->serial, CTL_OUT_HIGH);
			cl->paused = true;
			bufferevent_disable(cl->bev, EV_READ);
		}
	}
	if (cl->eof && !cl->paused && !cl->closing)
		client_close(cl);
	if (cl->closing && !evbuffer_get_length(out)) {
		client_free(cl);
		return false;
	}
	return true;
}

static void on_read(struct bufferevent *bev, void *arg)
{
	client_process(arg);
}

/* The output drained completely (the low watermark is 0). */
static void on_write(struct bufferevent *bev, void *arg)
{
	struct ctl_client *cl = arg;

	if (cl->closing) {
		client_free(cl);
		return;
	}
	if (cl->paused) {
		cl->paused = false;
		if (!cl->eof)
			bufferevent_enable(cl->bev, EV_READ);
		client_process(cl);
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct ctl_client *cl = arg;

	if ((what & BEV_EVENT_ERROR) || !(what & BEV_EVENT_EOF)) {
		client_free(cl);
		return;
	}
	/* EOF: answer what was sent, flush, close. */
	cl->eof = true;
	bufferevent_disable(cl->bev, EV_READ);
	if (!evbuffer_get_length(bufferevent_get_output(cl->bev)) && !cl->paused) {
		client_free(cl);
		return;
	}
	if (!cl->paused)
		client_close(cl);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct ctl_client *cl = arg;
	struct evbuffer *out = bufferevent_get_output(cl->bev);

	if (cl->closing || cl->denied || evbuffer_get_length(out)) {
		ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: %s: closed",
			(unsigned long long)cl->serial,
			cl->closing ? "did not read its last reply" : "too slow");
		client_free(cl);
		return;
	}
	ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: no request in %u ms: closed",
		(unsigned long long)cl->serial, cl->c->timeout_ms);
	client_refuse(cl, ETIMEDOUT, "no complete request in %u ms: connection closed",
		      cl->c->timeout_ms);
	client_close(cl);
}

static bool uid_allowed(const struct vsxd_control *c, uint32_t uid)
{
	size_t i;

	if (uid == 0 || uid == c->self)
		return true;
	for (i = 0; i < c->nallow; i++)
		if (c->allow[i] == uid)
			return true;
	return false;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct vsxd_control *c = arg;
	struct timeval tv = { .tv_sec = CTL_PAUSE_MS / 1000 };
	struct ucred cred;
	socklen_t cl_len = sizeof(cred);
	struct ctl_client *cl;
	int fd;

	fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM) {
			ctl_log(c, VSXB_LOG_WARNING, "control: accept: %s: pausing for %d ms",
				strerror(errno), CTL_PAUSE_MS);
			event_del(c->lev);
			evtimer_add(c->pause, &tv);
		}
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl_len) < 0) {
		ctl_log(c, VSXB_LOG_WARNING, "control: SO_PEERCRED: %s", strerror(errno));
		close(fd);
		return;
	}
	/* Refused clients do not count, but their number is bounded too. */
	if (c->nall >= 2 * c->max_clients + 16) {
		close(fd);
		return;
	}
	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		close(fd);
		return;
	}
	cl->c = c;
	cl->uid = cred.uid;
	cl->pid = cred.pid;
	cl->serial = ++c->next_serial;
	cl->bev = bufferevent_socket_new(c->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!cl->bev) {
		close(fd);
		free(cl);
		return;
	}
	cl->timer = evtimer_new(c->base, on_timeout, cl);
	if (!cl->timer) {
		bufferevent_free(cl->bev);
		free(cl);
		return;
	}
	c->nall++;
	cl->next = &c->clients;
	cl->prev = c->clients.prev;
	c->clients.prev->next = cl;
	c->clients.prev = cl;
	bufferevent_setcb(cl->bev, on_read, on_write, on_event, cl);
	/* At most one request beyond what is being answered is read in. */
	bufferevent_setwatermark(cl->bev, EV_READ, 0, VSX_CTL_REQ_MAX);

	if (!uid_allowed(c, cl->uid)) {
		ctl_log(c, VSXB_LOG_WARNING, "control: uid %u (pid %d) refused: not root, "
			"vsxd's uid or a control-allow-uid", cl->uid, (int)cl->pid);
		cl->denied = true;
		client_refuse(cl, EACCES, "permission denied: uid %u may not use this "
			      "control socket (allowed: root, uid %u%s)", cl->uid, c->self,
			      c->nallow ? " and control-allow-uid" : "");
		bufferevent_enable(cl->bev, EV_READ);
		client_arm(cl, CTL_LINGER_MS);
		return;
	}
	c->nclients++;
	if (c->nclients > c->max_clients) {
		ctl_log(c, VSXB_LOG_WARNING, "control: more than %u clients: uid %u (pid %d) "
			"refused", c->max_clients, cl->uid, (int)cl->pid);
		c->nclients--;
		cl->denied = true;
		client_refuse(cl, EBUSY, "vsxd is serving %u control clients already; "
			      "try again", c->max_clients);
		bufferevent_enable(cl->bev, EV_READ);
		client_arm(cl, CTL_LINGER_MS);
		return;
	}
	ctl_log(c, VSXB_LOG_DEBUG, "control: client %llu: uid %u pid %d",
		(unsigned long long)cl->serial, cl->uid, (int)cl->pid);
	bufferevent_enable(cl->bev, EV_READ);
	client_arm(cl, c->timeout_ms);
}

static void on_unpause(evutil_socket_t fd, short what, void *arg)
{
	struct vsxd_control *c = arg;

	event_add(c->lev, NULL);
}

/* ---- The socket ---- */

/* mkdir -p of @path's parent, mode 0755 for what is created. */
static int make_parent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *p, *slash, save;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (p = dir + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		save = *p;
		*p = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = save;
		if (!save)
			break;
	}
	return 0;
}

/* Bind the listener (mode 0600 before anyone can connect), replacing only
 * a stale socket; note which file is ours (vsxd_control_free unlinks it
 * only if it is still that one). */
static int bind_socket(struct vsxd_control *c)
{
	struct stat st;
	bool replaced;
	int r;

	r = vsx__unix_bind(c->lfd, c->path, 0600, &replaced);
	if (r < 0)
		return r;
	if (replaced)
		ctl_log(c, VSXB_LOG_INFO, "control: replacing the stale socket %s", c->path);
	if (lstat(c->path, &st) == 0) {
		c->dev = st.st_dev;
		c->ino = st.st_ino;
	}
	return 0;
}

int vsxd_control_set_allowed(struct vsxd_control *c, const uint32_t *uids, size_t n)
{
	uint32_t *a = NULL;

	if (n) {
		a = malloc(n * sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, uids, n * sizeof(*a));
	}
	free(c->allow);
	c->allow = a;
	c->nallow = n;
	return 0;
}

int vsxd_control_new(struct event_base *base, struct vsxb_router *r,
		     const struct vsxd_control_opts *o, struct vsxd_control **out)
{
	struct sockaddr_un un;
	struct vsxd_control *c;
	int rc;

	if (!base || !r || !o || !o->path || !*o->path || !out)
		return -EINVAL;
	rc = vsx__unix_addr(&un, o->path);
	if (rc < 0)
		return rc;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base = base;
	c->r = r;
	c->lfd = -1;
	c->self = (uint32_t)geteuid();
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : VSXD_CONTROL_TIMEOUT_MS;
	c->max_clients = o->max_clients ? o->max_clients : VSXD_CONTROL_MAX_CLIENTS;
	c->log = o->log;
	c->fwds = o->fwds;
	c->evloop = o->evloop;
	c->log_arg = o->log_arg;
	c->clients.next = c->clients.prev = &c->clients;
	clock_gettime(CLOCK_MONOTONIC, &c->started);
	rc = -ENOMEM;
	c->path = strdup(o->path);
	if (!c->path || vsxd_control_set_allowed(c, o->allow_uids, o->n_allow_uids) < 0)
		goto err_free;

	rc = make_parent(c->path);
	if (rc < 0)
		goto err_free;
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->lfd < 0) {
		rc = -errno;
		goto err_free;
	}
	rc = bind_socket(c);
	if (rc < 0)
		goto err_close;
	if (listen(c->lfd, 64) < 0) {
		rc = -errno;
		goto err_unlink;
	}
	rc = -ENOMEM;
	c->lev = event_new(base, c->lfd, EV_READ | EV_PERSIST, on_accept, c);
	c->pause = evtimer_new(base, on_unpause, c);
	if (!c->lev || !c->pause || event_add(c->lev, NULL) < 0)
		goto err_events;
	*out = c;
	return 0;

err_events:
	if (c->lev)
		event_free(c->lev);
	if (c->pause)
		event_free(c->pause);
err_unlink:
	unlink(c->path);
err_close:
	close(c->lfd);
err_free:
	free(c->allow);
	free(c->path);
	free(c);
	return rc;
}

void vsxd_control_free(struct vsxd_control *c)
{
	struct stat st;

	if (!c)
		return;
	while (c->clients.next != &c->clients)
		client_free(c->clients.next);
	event_free(c->lev);
	event_free(c->pause);
	close(c->lfd);
	/* Only our own socket: another vsxd may have replaced it. */
	if (lstat(c->path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
		unlink(c->path);
	free(c->allow);
	free(c->path);
	free(c);
}
