/*
 * The vhost-user-vsock backend as vsxd (and tests, and benchmarks) use it:
 * VMs, each a vhost-user device on its own socket with its own guest CID,
 * exposed to host programs through hybrid Unix sockets, and a router that
 * lets VMs of a common group reach each other by CID.
 *
 * No event loop is owned here: everything runs on the vsxu_loop given.
 * Threads: call these from the router's loop's thread only (the control
 * thread). A VM may run on a loop of its own (vsxb_vm_config.loop), on
 * another thread: its device, host sockets and connections are then
 * served there, and every call below that reads or changes VM state parks
 * those threads for its duration (a world stop), so it sees one
 * consistent state across VMs. A loop that serves no VM is never touched:
 * free a loop's VMs, then stop its thread, then free the router. The log, event and forward-connect
 * callbacks run on the VM's thread; host-port handlers (vsxb_port_cb) on
 * the control thread.
 */
#ifndef VSXB_BACKEND_H
#define VSXB_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include <vsx/vsx.h>

#include "vhost-user/loop.h"

#define VSXB_DEFAULT_BUF_ALLOC (256u * 1024)   /* tx-buffer-size default */
#define VSXB_MAX_BUF_ALLOC (1u << 30)          /* largest buf_alloc / tx-buffer-size */
/* Between sibling VMs the window is the receiving guest's own buffer, up
 * to this (or tx-buffer-size when larger; half of max_conn_memory when
 * that is set): vsxd queues a sibling's bytes only while the receiving
 * guest has no RX buffers posted, and never more than the window. */
#define VSXB_SIBLING_WINDOW_MAX (64u << 20)
#define VSXB_DEFAULT_QUEUE_SIZE 1024           /* largest ring accepted */
#define VSXB_GROUP_DEFAULT "default"

/* Log priorities (syslog's values). */
#define VSXB_LOG_ERR 3
#define VSXB_LOG_WARNING 4
#define VSXB_LOG_INFO 6
#define VSXB_LOG_DEBUG 7

typedef void (*vsxb_log_fn)(void *arg, int prio, const char *msg);

/* Opens a non-blocking stream socket to vsock (@cid, @port) for a forward
 * (vsxb_vm_config.forward): returns the descriptor, connected or with its
 * connect in progress (it turns writable and SO_ERROR says how it went;
 * the backend owns and closes it), or a negative errno. The default opens
 * an AF_VSOCK socket; tests give one of their own. */
typedef int (*vsxb_forward_connect_fn)(void *arg, uint32_t cid, uint32_t port);

struct vsxb_vm_config {
	const char *name;          /* vm:NAME and vsxctl; NULL: "cid<N>" */
	uint64_t guest_cid;        /* 3 .. 0xFFFFFFFE */
	const char *socket_path;   /* vhost-user socket QEMU connects to */
	const char *uds_path;      /* hybrid: host programs connect here;
				      guests reach host port P at uds_path_P */
	uint32_t tx_buffer_size;   /* buf_alloc per connection; 0: default */
	unsigned queue_size;       /* largest ring size accepted; 0: default */
	const char *groups;        /* "a+b"; NULL: "default" */
	/* Who may connect to socket_path and uds_path (the VMM, host
	 * programs): the files' permission bits (0: 0600) and, when
	 * socket_group is set, their group socket_gid (else the process's);
	 * both in force before the sockets listen. */
	unsigned socket_mode;
	bool socket_group;
	uint32_t socket_gid;
	/* The loop (thread) that serves the VM; NULL: the router's. A loop
	 * of another thread must have post (loop.h). Siblings may be on
	 * different loops (their pairs then cross through in-memory queues,
	 * and the loops' post wakes the other thread). */
	const struct vsxu_loop *loop;
	/* vhost-device-vsock's forward-cid: the guest's STREAM connections
	 * to the host (CID 2) go to the host kernel's vsock CID forward_cid,
	 * same port (a port with a handler, vsxb_router_listen_port, keeps
	 * it). SEQPACKET ones are refused. Their peer kind is "vsock", as is
	 * that of an AF_VSOCK descriptor given to vsxb_vm_connect_fd (vsxd's
	 * forward-listen). */
	bool forward;
	uint32_t forward_cid;
	vsxb_forward_connect_fn forward_connect; /* NULL: AF_VSOCK */
	void *forward_arg;
	/* The uds_path listener accepts nothing until vsxb_vm_accept_start:
	 * a live handoff's inherited listener keeps its backlog until the
	 * device is adopted (a client accepted before would be turned away,
	 * the device not running yet). */
	bool hold_accept;
};

struct vsxb_router;
struct vsxb_vm;

/* A router: the VMs of one process, for sibling routing and lookup.
 * @loop needs its queue entry (loop.h): -EINVAL without. @log may be
 * NULL (silence). */
int vsxb_router_new(const struct vsxu_loop *loop, vsxb_log_fn log, void *log_arg,
		   struct vsxb_router **out);
/* Frees every VM still attached, then the router. */
void vsxb_router_free(struct vsxb_router *r);

/* Validate @cfg, bind its sockets, attach the VM to @r. Errors: -EINVAL
 * (bad config, with a log line saying why), -EEXIST (CID or name taken),
 * -EADDRINUSE (a socket path in use), -ENOTSOCK (a path is a file of
 * another kind: only stale sockets are replaced), other negative errno. */
int vsxb_vm_new(struct vsxb_router *r, const struct vsxb_vm_config *cfg,
	       struct vsxb_vm **out);
/* Reset every connection, notify host peers, close sockets, unlink paths. */
void vsxb_vm_free(struct vsxb_vm *vm);

struct vsxb_vm *vsxb_router_vm_by_name(struct vsxb_router *r, const char *name);
struct vsxb_vm *vsxb_router_vm_by_cid(struct vsxb_router *r, uint64_t cid);
const char *vsxb_vm_name(const struct vsxb_vm *vm);

/* ---- Introspection and control (vsxctl) ---- */

enum vsxb_conn_state {
	VSXB_CONN_CONNECTING = 1, /* REQUEST sent or received, no RESPONSE yet */
	VSXB_CONN_ESTABLISHED,
	VSXB_CONN_CLOSING,        /* a SHUTDOWN seen or sent; see shut flags */
};

struct vsxb_conn_info {
	uint64_t id;               /* unique in the process, never reused */
	const char *vm;            /* VM name (valid during the callback) */
	int type;                  /* 1 stream, 2 seqpacket (wire values) */
	int state;                 /* enum vsxb_conn_state */
	uint64_t guest_cid;
	uint32_t guest_port;
	uint64_t peer_cid;         /* 2 for host programs, a sibling's CID */
	uint32_t peer_port;
	bool guest_initiated;
	const char *peer_kind;     /* "host" (a socket), "sibling", "vsock" (a
				      host kernel vsock socket: forward-cid,
				      forward-listen) */
	unsigned guest_shut;       /* SHUTDOWN flags the guest sent (1 rcv, 2 send) */
	unsigned host_shut;        /* SHUTDOWN flags we sent */
	uint64_t to_guest_bytes;   /* payload bytes delivered into the guest */
	uint64_t from_guest_bytes; /* payload bytes taken from the guest */
	uint32_t buf_alloc;        /* ours, advertised to the guest */
	uint32_t fwd_cnt;          /* ours: bytes we consumed (sent on host) */
	uint32_t peer_buf_alloc;   /* the guest's */
	uint32_t peer_fwd_cnt;
	uint32_t tx_free;          /* what we may still send to the guest */
	uint32_t rx_free;          /* what the guest may still send us */
	uint32_t queued;           /* bytes held for a slow host peer */
	const char *tag;           /* who made it (vsxd: the forward's name),
				      "" for none; valid during the callback */
	bool vm_paused;            /* its VM is paused (vsxb_vm_info.paused) */
};

typedef int (*vsxb_conn_cb)(const struct vsxb_conn_info *ci, void *arg);

/* Call @cb for each connection of @vm (every VM when @vm is NULL); a
 * non-zero return stops the walk and is returned. */
int vsxb_router_foreach_conn(struct vsxb_router *r, struct vsxb_vm *vm,
			    vsxb_conn_cb cb, void *arg);
/* Set buf_alloc of connection @id (a CREDIT_UPDATE tells the guest).
 * -ENOENT: no such connection; -EINVAL: @bytes is 0, above 1 GiB, or
 * above half of max_conn_memory (vsxb_router_set_limits). */
int vsxb_router_conn_set_buffer(struct vsxb_router *r, uint64_t id, uint32_t bytes);
/* Close (SHUTDOWN both ways, RST after 8 s) or reset (RST now) @id. */
int vsxb_router_conn_close(struct vsxb_router *r, uint64_t id, bool reset);
/* buf_alloc for @vm's new connections; -EINVAL as set_buffer. (New
 * connections never get more than half of max_conn_memory.) */
int vsxb_vm_set_default_buffer(struct vsxb_vm *vm, uint32_t bytes);

/* What vsxctl shows of a VM. The strings are the VM's: valid until it is
 * freed. */
struct vsxb_vm_info {
	const char *name;
	uint64_t guest_cid;
	const char *socket_path;   /* vhost-user socket */
	const char *uds_path;      /* NULL: no hybrid exposure */
	uint32_t buf_default;      /* buf_alloc of new connections */
	bool connected;            /* the front-end (QEMU) has the device running */
	bool broken;               /* stopped after a bad guest, until it resets */
	bool paused;               /* rings stopped by the front-end (QEMU stop),
				    connections kept for the restart */
	unsigned conns;            /* live connections */
	const struct vsxu_loop *loop; /* the loop serving it (vsxb_vm_config.loop;
				      the router's when none was given) */
};

void vsxb_vm_get_info(const struct vsxb_vm *vm, struct vsxb_vm_info *out);

/* ---- Host connections handed over as descriptors (vsxd forwards) ---- */

#define VSXB_TAG_MAX 72             /* vsxb_conn_info.tag, NUL included */

/*
 * Hand the connected stream socket @fd (Unix, TCP: anything readv and
 * sendmsg work on; made non-blocking here) to @vm as a host-initiated
 * connection to guest port @guest_port, as if a hybrid client had sent
 * "CONNECT <guest_port>". The engine owns @fd from the call on, whatever
 * the result: it is closed when the guest refuses (RST), does not answer
 * within the connect timeout, or the connection ends. @tag (NULL: none;
 * cut at VSXB_TAG_MAX - 1 bytes) labels the connection in vsxb_conn_info;
 * *@id (@id may be NULL) gets its id. Errors (@fd closed): -EHOSTDOWN (the
 * guest's device is not running), -EBUSY (connection limit), -ENOMEM.
 */
int vsxb_vm_connect_fd(struct vsxb_vm *vm, int fd, uint32_t guest_port, const char *tag,
		      uint64_t *id);

struct vsxb_port;

/*
 * A guest of VM @vm sent a STREAM REQUEST to host port @port, which a
 * vsxb_router_listen_port handler serves. Connection @id exists, CONNECTING
 * (the guest waits for its RESPONSE), until vsxb_router_conn_attach_fd gives
 * it a socket, vsxb_router_conn_close refuses it (reset: RST), or the
 * connect timeout resets it. Return 0 to let it wait, a negative errno to
 * refuse it at once (RST). Runs inside the engine: do not call back into
 * the router from here (attach or refuse later, from the loop).
 */
typedef int (*vsxb_port_cb)(void *arg, struct vsxb_vm *vm, uint64_t id,
			   uint32_t guest_port, uint32_t port);

/*
 * Serve guest connections to host port @port of the VM named @vm_name (a
 * VM that may come and go: the name is looked up at each REQUEST). Such
 * REQUESTs go to @cb instead of "<uds-path>_<port>"; SEQPACKET ones are
 * refused. @tag as for vsxb_vm_connect_fd. *@out is freed with
 * vsxb_port_free (vsxb_router_free frees what is left). -EADDRINUSE: that
 * name and port already have a handler; -EINVAL; -ENOMEM.
 */
int vsxb_router_listen_port(struct vsxb_router *r, const char *vm_name, uint32_t port,
			   const char *tag, vsxb_port_cb cb, void *arg,
			   struct vsxb_port **out);
/* No more calls to the handler; connections already made are not touched. */
void vsxb_port_free(struct vsxb_port *p);

/*
 * Give the waiting connection @id (see vsxb_port_cb) its host socket @fd:
 * the guest gets its RESPONSE and data flows. 0: @fd is the engine's now
 * (as for vsxb_vm_connect_fd). -ENOENT: no such connection waiting (the
 * guest gave up, or it timed out): @fd stays the caller's. -ENOMEM.
 */
int vsxb_router_conn_attach_fd(struct vsxb_router *r, uint64_t id, int fd);

/* Close (or reset) every connection whose tag is @tag; returns how many. */
int vsxb_router_close_tagged(struct vsxb_router *r, const char *tag, bool reset);

/* A fresh connection id, never given to an engine connection: vsxd numbers
 * its relayed connections from the same sequence. */
uint64_t vsxb_router_new_id(struct vsxb_router *r);

typedef int (*vsxb_vm_cb)(struct vsxb_vm *vm, void *arg);

/* Call @cb for each VM, oldest first; a non-zero return stops the walk and
 * is returned. @cb must not free VMs. */
int vsxb_router_foreach_vm(struct vsxb_router *r, vsxb_vm_cb cb, void *arg);

/* ---- Connection events (structured logs) ---- */

/*
 * Every connection that reaches ESTABLISHED reports OPEN once, then exactly
 * one CLOSE (a graceful end: both sides shut down) or RESET (anything
 * else), when the engine frees it (after its bounded drain or linger).
 * An attempt that never got established (no host listener, the guest or a
 * sibling refused or never answered, a limit, an error) reports one
 * REFUSE instead; guest-initiated attempts refused before any connection
 * existed have id 0.
 */
enum vsxb_conn_event_type {
	VSXB_CONN_EV_OPEN = 1,
	VSXB_CONN_EV_CLOSE,
	VSXB_CONN_EV_RESET,
	VSXB_CONN_EV_REFUSE,
};

/* Why a connection ended (or was refused); vsxb_conn_reason_name() gives
 * the stable log string. The first decisive cause wins; a guest RST after
 * a graceful close does not turn it into a reset. */
enum vsxb_conn_reason {
	VSXB_REASON_NONE = 0,       /* "none" (OPEN) */
	VSXB_REASON_GUEST_SHUTDOWN, /* "guest-shutdown": the guest shut down first */
	VSXB_REASON_HOST_EOF,       /* "host-eof": the host program shut its writing side */
	VSXB_REASON_HOST_CLOSED,    /* "host-closed": the host program closed its socket */
	VSXB_REASON_PEER_SHUTDOWN,  /* "peer-shutdown": the sibling's guest shut down */
	VSXB_REASON_GUEST_RST,      /* "guest-rst" */
	VSXB_REASON_PEER_RST,       /* "peer-rst": the sibling half went away */
	VSXB_REASON_REFUSED,        /* "refused": no listener, or the guest refused */
	VSXB_REASON_CONNECT_TIMEOUT,/* "connect-timeout": no RESPONSE in time */
	VSXB_REASON_HANDSHAKE_TIMEOUT, /* "handshake-timeout": no CONNECT line in time */
	VSXB_REASON_LINGER_TIMEOUT, /* "linger-timeout": no RST after our close */
	VSXB_REASON_CONTROL_CLOSE,  /* "control-close": vsxb_router_conn_close */
	VSXB_REASON_CONTROL_RESET,  /* "control-reset" */
	VSXB_REASON_VM_GONE,        /* "vm-gone": device stopped or broken, VM removed */
	VSXB_REASON_LIMIT,          /* "limit": a connection or memory limit */
	VSXB_REASON_PROTOCOL,       /* "protocol": the guest broke the protocol */
	VSXB_REASON_ERROR,          /* "error": see err */
	/* (new reasons go last: the numbers are in the restart records) */
	VSXB_REASON_VM_NOT_RUNNING, /* "vm-not-running": a hybrid CONNECT while the
				      device does not run (no QEMU, no guest
				      driver yet, broken) */
	VSXB_REASON_BAD_HANDSHAKE,  /* "bad-handshake": not a CONNECT line */
	VSXB_REASON_COUNT           /* not a reason: how many there are */
};

const char *vsxb_conn_reason_name(int reason);
const char *vsxb_conn_event_name(int type);

/* Which limit refused a connection (REFUSE with VSXB_REASON_LIMIT). */
enum vsxb_limit_kind {
	VSXB_LIMIT_NONE = 0,
	VSXB_LIMIT_VM_CONNS,        /* "conns-per-vm" */
	VSXB_LIMIT_CONNS,           /* "conns": the router's total */
	VSXB_LIMIT_MEMORY,          /* "conn-memory" (RESET) */
	VSXB_LIMIT_HANDSHAKES,      /* "handshakes": VSXB_MAX_HANDSHAKES hybrid
				      clients of the VM still sending CONNECT */
};

const char *vsxb_limit_name(int kind);

#define VSXB_PORT_UNKNOWN 0xFFFFFFFFu   /* a port not known (yet) in an event */

struct vsxb_conn_event {
	int type;                  /* enum vsxb_conn_event_type */
	struct vsxb_conn_info ci;   /* at the event; id 0 for refusals without a
				      connection; strings valid during the call */
	const char *origin;        /* "guest", "host" or "sibling" */
	int reason;                /* enum vsxb_conn_reason */
	int err;                   /* positive errno for VSXB_REASON_ERROR and
				      some refusals (ECONNREFUSED, ENOENT), or 0 */
	int limit;                 /* enum vsxb_limit_kind for VSXB_REASON_LIMIT */
	uint64_t duration_ms;      /* since OPEN (CLOSE, RESET), else 0 */
	/* REFUSE only: refusals are rate limited per VM for logging (a burst of
	 * 20, then one a second); @log_suppressed says this one falls beyond
	 * the rate, @suppressed how many were not to be logged before it. The
	 * hook still sees every event. */
	bool log_suppressed;
	uint64_t suppressed;
};

typedef void (*vsxb_conn_event_fn)(void *arg, const struct vsxb_conn_event *ev);

/* Report connection events to @fn (NULL: none). @fn runs on the loop
 * thread in the middle of engine work: it must not call back into the
 * router. */
void vsxb_router_set_conn_events(struct vsxb_router *r, vsxb_conn_event_fn fn, void *arg);

/* ---- Limits ---- */

#define VSXB_DEFAULT_MAX_CONNS_PER_VM 4096
#define VSXB_DEFAULT_HANDSHAKE_MS 5000
#define VSXB_DEFAULT_CONNECT_MS 5000
/* The bounded close of libvsx (vsx_close), as Linux's VSOCK_CLOSE_TIMEOUT. */
#define VSXB_DEFAULT_LINGER_MS VSX_DEFAULT_LINGER_MS

struct vsxb_router_limits {
	unsigned max_conns;          /* all VMs together; 0: no limit */
	unsigned max_conns_per_vm;   /* 0: VSXB_DEFAULT_MAX_CONNS_PER_VM */
	/* Memory one connection may hold for a slow peer (its queue): 0, no
	 * cap beyond its credit window. Otherwise a connection's buf_alloc
	 * (tx-buffer-size, set_buffer) is at most half of it, so a guest that
	 * keeps to its credit stays below; a queue that still outgrows it is
	 * reset (VSXB_REASON_LIMIT, VSXB_LIMIT_MEMORY). At least 8 KiB. */
	uint64_t max_conn_memory;
	unsigned handshake_ms;       /* hybrid CONNECT line; 0: default */
	unsigned connect_ms;         /* RESPONSE to our REQUEST; 0: default */
	unsigned linger_ms;          /* RST after our close; 0: default */
};
#define VSXB_MIN_CONN_MEMORY 8192u      /* smallest max_conn_memory but 0 */
#define VSXB_MAX_TIMEOUT_MS 3600000u    /* longest timeout: an hour */

/* Apply to new connections (and new handshakes, timers armed from now
 * on); existing connections keep what they have. -EINVAL: memory cap
 * below VSXB_MIN_CONN_MEMORY, or a timeout above VSXB_MAX_TIMEOUT_MS. */
int vsxb_router_set_limits(struct vsxb_router *r, const struct vsxb_router_limits *l);
/* What is in force (defaults filled in). */
void vsxb_router_get_limits(const struct vsxb_router *r, struct vsxb_router_limits *out);

/*
 * For a host program whose event loop busy-polls (vsxd --poll-us): call
 * with @sleeping false on every polling round, and with true before the
 * loop sleeps again. While polling, every VM's TX queue is served from its
 * ring and the guests' TX kicks stay off, so a guest sending while vsxd
 * polls skips the notification (and vsxd the eventfd); before sleeping
 * the kicks are turned back on and the rings looked at once more. Returns
 * true when it found packets (and served them). A loop that never calls
 * it keeps every kick. Must not be called from inside a backend callback.
 */
bool vsxb_router_poll(struct vsxb_router *r, bool sleeping);
/* The same for the VMs served by @loop (vsxb_vm_config.loop), on that
 * loop's thread. */
bool vsxb_router_poll_loop(struct vsxb_router *r, const struct vsxu_loop *loop,
			   bool sleeping);

/* Counters since the router was created (vsxctl status). */
struct vsxb_router_stats {
	unsigned conns;                 /* live connections, all VMs */
	uint64_t opened;                /* OPEN events */
	uint64_t refused;               /* REFUSE events, every reason */
	uint64_t refused_limit_vm;      /* refused: max_conns_per_vm */
	uint64_t refused_limit_conns;   /* refused: max_conns */
	uint64_t reset_limit_memory;    /* reset: max_conn_memory */
};

void vsxb_router_get_stats(const struct vsxb_router *r, struct vsxb_router_stats *out);
/* Add @add's totals (not conns) to @r's, as vsxb_vm_add_counters. */
void vsxb_router_add_stats(struct vsxb_router *r, const struct vsxb_router_stats *add);

/* ---- Restarts (vsxd(8) RESTARTS) ---- */

struct vsxu_vu_state;

/*
 * A VM's device started, changed what a restart needs (vhost_user.h's
 * ops->changed), or stopped. A paused device (QEMU stop) is kept for a
 * restart too: its state (@st->paused) comes once the front-end stopped
 * every ring; while it is between states (half stopped, or set up again
 * at cont until it starts) @st is NULL and @held true: nothing of the
 * device can be kept now, but the VM and its connections go on. @st: the
 * device's state, its descriptors the device's own, valid during the call
 * only; NULL (@held false) when it stopped. Runs on the VM's
 * thread in the middle of engine work: it must not call back into the
 * router.
 */
typedef void (*vsxb_device_event_fn)(void *arg, struct vsxb_vm *vm, const char *vm_name,
				     uint64_t guest_cid, const struct vsxu_vu_state *st,
				     bool held);

void vsxb_router_set_device_events(struct vsxb_router *r, vsxb_device_event_fn fn,
				   void *arg);

/* A connection of an earlier process, as its guest knows it. */
struct vsxb_conn_addr {
	uint64_t guest_cid, peer_cid;
	uint32_t guest_port, peer_port;
	int type;                  /* 1 stream, 2 seqpacket */
};

/*
 * @vm (just created, no front-end yet) takes over the device an earlier
 * process served, whose front-end is still connected (vsxu_vu_adopt: @vm
 * takes every descriptor of @st whatever the result), and sends its guest
 * an RST for each of the @n connections @conns that process had. A paused
 * device (@st->paused) is taken paused, as QEMU's stop left it: its
 * connections wait (the RSTs go out too) until the front-end's cont
 * starts it. 0, or
 * vsxu_vu_adopt's error (the front-end then sees its back-end go), -ENOMEM.
 */
int vsxb_vm_adopt(struct vsxb_vm *vm, const struct vsxu_vu_state *st,
		  const struct vsxb_conn_addr *conns, unsigned n);

/*
 * A live handoff (vsxd's `vsxctl upgrade`). vsxb_router_freeze parks every
 * worker at a clean point (a world stop: no round in progress, every
 * chain taken from a ring completed) and keeps them parked until
 * vsxb_router_thaw; backend.h calls still work in between (they nest).
 * A process that hands its devices over never thaws: it exits.
 * vsxb_vm_device_state: @vm's device as vsxb_vm_adopt takes it in another
 * process (its descriptors still @vm's); -ENOTCONN: no front-end;
 * -EAGAIN: one still setting the device up, or between paused and
 * running (some rings stopped, or being set up again at cont). A paused
 * device's state says so (@st->paused): it is taken paused.
 */
void vsxb_router_freeze(struct vsxb_router *r);
/* The uds_path listener of a VM made with hold_accept accepts from now. */
void vsxb_vm_accept_start(struct vsxb_vm *vm);
void vsxb_router_thaw(struct vsxb_router *r);
int vsxb_vm_device_state(struct vsxb_vm *vm, struct vsxu_vu_state *st);

/*
 * Connections kept across a live handoff (restart.c). At a freeze, each
 * connection of a VM whole: what vsxctl shows (@ci) and the rest of its
 * state. @fd >= 0: a host socket connection that can go on in another
 * process (established or closing with no timer running, or a hybrid
 * program's connection whose "OK" is owed: the guest has its REQUEST,
 * VSXB_KEEP_HOST_HYBRID, its connect timer @timer_ms from its end, or
 * one draining what its guest sent into the socket, VSXB_KEEP_HOST_DRAIN,
 * its drain timer @timer_ms from its end, or one shut down both ways
 * that waits for its guest's RST, VSXB_KEEP_HOST_LINGER, its linger timer
 * @timer_ms from its end, which is kept with @fd -1 when its socket is
 * closed already; vsxb_vm_adopt recreates it from this; what a hybrid
 * program sent before its "OK" waits in its socket); -1 (and no
 * VSXB_KEEP_HOST_LINGER): it cannot (anything else half done: a guest's
 * connect to a forward-cid vsock in progress), the other process ends it
 * with an RST. @fd stays @vm's; @q (@qlen bytes for the host socket, with @nends
 * seqpacket message ends) is valid during the callback only.
 *
 * A half of an established sibling pair has @sibling set (and @fd -1): it
 * names its twin, the other VM's half (@twin_vm, @twin_id), and @q holds
 * the other guest's bytes vsxd keeps for this half's guest, with the end
 * of each of the other guest's packets (a message's end, EOM and EOR, for
 * a seqpacket; a packet's, EOM, for a stream: peer_sib.h), and
 * @eom_pending an empty message end still owed to this guest. The new
 * process makes the pair again once both halves are adopted
 * (vsxb_router_pair_kept).
 */
#define VSXB_KEEP_HOST_EOF     0x1u  /* the host shut its sending side */
#define VSXB_KEEP_HOST_WR_SHUT 0x2u  /* we shut the socket's sending side */
#define VSXB_KEEP_HOST_WR_DEAD 0x4u  /* the host takes no more data */
#define VSXB_KEEP_HOST_HYBRID  0x8u  /* CONNECTING: "OK <port>" owed to the
					program when the guest answers */
#define VSXB_KEEP_HOST_DRAIN   0x10u /* CLOSING, draining: the guest side is
					over (it had its RST), @q still goes
					to the socket within @timer_ms */
#define VSXB_KEEP_HOST_LINGER  0x20u /* CLOSING, shut down both ways by us:
					the guest's RST awaited @timer_ms
					more; @fd may be -1 (the program's
					socket is closed already) */
#define VSXB_KEEP_NAME_MAX 65        /* a VM's name, NUL included */

/* A connection's credit both ways (wrapping u32 counters of payload
 * bytes): the connection holds it (backend-int.h, struct conn), and a kept
 * one and vsxd's state record (daemon/state.h) carry it whole. */
struct vsxb_credit {
	uint32_t buf_alloc;          /* ours (a cap for sibling connections) */
	uint32_t rx_cnt;             /* received from the guest */
	uint32_t fwd_cnt;            /* of those, consumed (given to the host) */
	uint32_t last_fwd_sent;      /* fwd_cnt / buf_alloc the guest last saw */
	uint32_t last_buf_sent;
	uint32_t rx_limit;           /* furthest rx_cnt the guest was allowed */
	uint32_t peer_buf_alloc;     /* the guest's */
	uint32_t peer_fwd_cnt;
	uint32_t tx_cnt;             /* sent to the guest */
};

struct vsxb_conn_keep {
	const struct vsxb_conn_info *ci;  /* NULL in what vsxb_vm_adopt takes */
	uint64_t id;
	int type, state;
	uint32_t guest_port;
	uint64_t peer_cid;
	uint32_t peer_port;
	bool guest_initiated, vsock;
	unsigned guest_shut, host_shut, shut_pending, ctrl, host_flags;
	struct vsxb_credit cr;
	bool advertised, credit_req_sent, msg_open;
	uint64_t to_guest, from_guest;
	int why, why_limit, why_err;      /* why it ends, once known (enum
					     vsxb_conn_reason, vsxb_limit_kind,
					     errno), so that it is counted
					     as the old process would */
	char tag[VSXB_TAG_MAX];
	unsigned timer_ms;                /* CONNECTING: what is left of the
					     connect timeout, draining or
					     lingering: of the linger
					     timeout (0: none) */
	int fd;
	const uint8_t *q;
	uint32_t qlen;
	const struct vsxb_msg_end {
		uint32_t end;             /* just past the message's last byte */
		unsigned flags;           /* VIRTIO_VSOCK_SEQ_EOM (| _EOR) */
	} *ends;
	unsigned nends;
	bool sibling;
	char twin_vm[VSXB_KEEP_NAME_MAX];   /* the twin's VM's name */
	uint64_t twin_id;
	unsigned eom_pending;
};

typedef int (*vsxb_keep_cb)(const struct vsxb_conn_keep *k, void *arg);

/* Connection ids from now on are past @id (a new process starts past
 * every id the earlier one's state names: vsxctl never shows one twice). */
void vsxb_router_ids_past(struct vsxb_router *r, uint64_t id);

/* Call @cb for each connection of @vm, whole (between vsxb_router_freeze
 * and thaw); a non-zero return stops the walk and is returned. -ENOMEM. */
int vsxb_vm_foreach_keep(struct vsxb_vm *vm, vsxb_keep_cb cb, void *arg);

/* Like vsxb_vm_adopt, and recreates the @nkeep connections @keep (each
 * @fd taken, whatever the result) instead of resetting them: no
 * TRANSPORT_RESET goes to the guest when one was kept; the connection ids
 * of the router go on past theirs. A connection that cannot be made again
 * (a limit, no memory, an address taken twice) gets an RST and its socket
 * is closed; *@kept counts those kept, sibling halves included: those
 * wait (copied) for vsxb_router_pair_kept, and the device reads nothing
 * from its guest until then. */
int vsxb_vm_adopt_keep(struct vsxb_vm *vm, const struct vsxu_vu_state *st,
		       const struct vsxb_conn_addr *conns, unsigned n,
		       const struct vsxb_conn_keep *keep, unsigned nkeep,
		       unsigned *kept);

/* Once every device of a handoff is adopted: each sibling half an
 * adoption kept is joined to its twin (same thread or across threads,
 * wherever the two VMs run now), with its counters and queued bytes; a
 * half whose twin is not there (its VM gone or not adopted, a record that
 * does not match) ends with an RST to its guest and a log line. Then the
 * devices that waited read their guests' packets. Returns the pairs made;
 * *@ended counts the halves that ended (may be NULL). */
unsigned vsxb_router_pair_kept(struct vsxb_router *r, unsigned *ended);

/*
 * Counters of one VM since it was created (vsxd's metrics), and what it
 * holds now. Events are counted as they are reported (see "Connection
 * events"): a connection ends in exactly one of closed[] (CLOSE), reset[]
 * (RESET) or refused[] (REFUSE), indexed by its enum vsxb_conn_reason.
 * Bytes are payload, counted as they cross the virtqueues, for live
 * connections too. A credit stall is a connection with data for its guest
 * that found no credit left: counted once, until the guest's credit
 * moves again.
 */
struct vsxb_vm_counters {
	unsigned conns[VSXB_CONN_CLOSING + 1]; /* live, by enum vsxb_conn_state
						   ([0] unused) */
	uint64_t queued_bytes;          /* now: held for slow peers, all connections */
	uint64_t opened;                /* OPEN events */
	uint64_t closed[VSXB_REASON_COUNT];
	uint64_t reset[VSXB_REASON_COUNT];
	uint64_t refused[VSXB_REASON_COUNT];
	uint64_t to_guest_bytes;        /* into the guest's RX buffers */
	uint64_t from_guest_bytes;      /* taken from the guest's TX buffers */
	uint64_t credit_stalls;
};

/* Fill @out for @vm: the counters, and a walk of its connections for the
 * rest (conns, queued_bytes); nothing is allocated. */
void vsxb_vm_get_counters(const struct vsxb_vm *vm, struct vsxb_vm_counters *out);

/* Add @add's running totals (opened, closed, reset, refused, bytes,
 * credit_stalls; not conns or queued_bytes) to @vm's: what an earlier
 * process counted, when a handoff or restart goes on where it stopped. */
void vsxb_vm_add_counters(struct vsxb_vm *vm, const struct vsxb_vm_counters *add);

#endif
