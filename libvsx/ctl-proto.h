/*
 * The vsxd control protocol: one header for the daemon, vsxctl and libvsx.
 * Bump VSX_CTL_VERSION when anything here changes meaning (the contract
 * below says what counts), and add a line to the history.
 *
 * Transport: a Unix stream socket (default VSX_CONTROL_PATH, mode 0600);
 * vsxd checks the client's uid with SO_PEERCRED before it reads anything.
 *
 * A request is a block of "key=value" lines ended by an empty line:
 *
 *     vsx-control=1          the version, always first
 *     cmd=list               the command
 *     vm=web                 arguments
 *     (empty line)
 *
 * A reply is a block of the same form whose last line before the empty one
 * is "errno=N" (0 = success; else a positive errno value), preceded by
 * "error=TEXT" when N is not 0. Records in a reply start with their key
 * ("conn=ID", "vm=NAME") and run until the next record's key.
 *
 * Keys are [a-z0-9_-]{1,32}; values are printable ASCII without newline,
 * at most VSX_CTL_VALUE_MAX bytes. A request has at most VSX_CTL_MAX_LINES
 * lines and VSX_CTL_REQ_MAX bytes; anything else is refused with EINVAL
 * (E2BIG when too large) and the connection stays usable unless the framing
 * itself is lost. Several requests may be sent on one connection in turn.
 */
#ifndef VSX_CTL_PROTO_H
#define VSX_CTL_PROTO_H

#include <stddef.h>

/*
 * Versions. vsxd answers every request of version VSX_CTL_VERSION_MIN to
 * VSX_CTL_VERSION the same way, with the replies of VSX_CTL_VERSION: what
 * each version added is what an older client skips (reply keys, records,
 * values it shows as they are) or never sends (request keys); a version
 * that changes what an older request or reply means raises
 * VSX_CTL_VERSION_MIN with it. A client sends VSX_CTL_VERSION; told
 * EPROTONOSUPPORT by an older vsxd, vsx__ctl_call sends the request again
 * as VSX_CTL_VERSION_MIN, which an older vsxd answers unless the request
 * uses what came later (it then refuses that key with EINVAL).
 *
 *   1  the first
 *   2  origin= and peer-kind= take "vsock" (forward-cid, forward-listen);
 *      status carries threads, threads-max and thread= records, vm=
 *      records thread; show takes vm= or uds-path= with host-port=, as
 *      set-buffer does (libvsx's vsx_info on hybrid and vm: sockets);
 *      status says how this vsxd started (start-mode, generation, started,
 *      fd-store and the recovery counts: vsxd(8) RESTARTING VSXD)
 *   3  upgrade (the live handoff: vsxd(8) UPGRADING VSXD); start-mode
 *      takes "handed-over" and "restarted", and status carries
 *      handed-over-listeners
 */
#define VSX_CTL_VERSION 3
#define VSX_CTL_VERSION_MIN 1
#define VSX_CTL_MAGIC "vsx-control"
#define VSX_CTL_REQ_MAX 4096
#define VSX_CTL_REPLY_MAX (16u << 20)
#define VSX_CTL_MAX_LINES 64
#define VSX_CTL_KEY_MAX 32
#define VSX_CTL_VALUE_MAX 1024

/*
 * The contract. Bump VSX_CTL_VERSION when any of these change: a command,
 * a key, what a key means, which keys a command takes or a record
 * carries. (Adding a reply key that old clients ignore is compatible;
 * say so in vsxd(8) all the same.)
 *
 * Commands (cmd=), the keys their requests take (required, [optional])
 * and the keys of their replies. A reply is one record or a run of
 * records, each starting at its first key; keys in [] appear only when
 * they apply. Every reply then ends with [error=TEXT] errno=N.
 *
 *   command     request                   reply
 *   status      -                         one record: version protocol pid
 *                                         uptime vms vms-connected conns
 *                                         conns-opened conns-refused
 *                                         refused-max-conns
 *                                         refused-max-conns-per-vm
 *                                         reset-max-conn-memory max-conns
 *                                         max-conns-per-vm max-conn-memory
 *                                         handshake-timeout-ms
 *                                         connect-timeout-ms
 *                                         linger-timeout-ms [poll-us
 *                                         poll-window-ns poll-hits
 *                                         poll-misses] forwards relays
 *                                         fwd-accepted fwd-denied fwd-failed
 *                                         auth-failures clients control
 *                                         [start-mode generation started
 *                                         fd-store recovered-vms
 *                                         recovery-failed-vms
 *                                         recovery-conns-ended]
 *                                         threads threads-max, then
 *                                         thread= records: thread
 *                                         thread-vms cpu-ms
 *   vms         -                         vm= records: vm cid socket
 *                                         [uds-path] connected broken paused
 *                                         conns tx-buffer-size [thread]
 *   list        [vm]                      conn= records (CONN below): the
 *                                         engine's, then (without vm=) the
 *                                         relays of vsxd's forwards (RELAY)
 *   show        id | vm host-port |       one CONN or RELAY record (by
 *               uds-path host-port        host end: CONN only)
 *   set-buffer  id | vm [host-port] |     with vm= alone (the VM's default
 *               uds-path host-port;       for new connections): vm rx
 *               rx; [tx] (refused:        scope=new-connections; else: conn
 *               EOPNOTSUPP)               vm rx buf-alloc scope=connection
 *   close       id [reset] (0 or 1)       conn, vm (engine) or forward
 *                                         (relay), action=close|reset
 *   resolve     vm                        vm uds-path cid
 *   upgrade     [exec] (a program path;   pid vms conns-kept conns-ended
 *               default: vsxd's own)      listeners fds (the new process
 *                                         serves; this one exits after
 *                                         the reply)
 *
 *   CONN:  conn vm type state vm-state origin guest peer to-guest from-guest
 *          buf-alloc fwd-cnt peer-buf-alloc peer-fwd-cnt tx-free rx-free
 *          guest-shut host-shut queued [forward]
 *   RELAY: conn vm(-) type state origin(relay) guest peer to-guest
 *          from-guest queued forward auth
 */
#define VSX_CTL_K_CMD "cmd"             /* every request, after the version */
#define VSX_CTL_K_ERROR "error"         /* every failed reply */
#define VSX_CTL_K_ERRNO "errno"         /* every reply, last */

#define VSX_CTL_STATUS "status"
#define VSX_CTL_VMS "vms"
#define VSX_CTL_LIST "list"
#define VSX_CTL_SHOW "show"
#define VSX_CTL_SET_BUFFER "set-buffer"
#define VSX_CTL_CLOSE "close"
#define VSX_CTL_RESOLVE "resolve"
#define VSX_CTL_UPGRADE "upgrade"

/* Request keys (and the reply keys of the same name) */
#define VSX_CTL_K_ID "id"               /* a connection id (decimal) */
#define VSX_CTL_K_VM "vm"               /* a VM name; also a vm= record */
#define VSX_CTL_K_UDS_PATH "uds-path"   /* a VM's hybrid socket path */
#define VSX_CTL_K_HOST_PORT "host-port" /* the host end's port (hybrid) */
#define VSX_CTL_K_RX "rx"               /* bytes (decimal) */
#define VSX_CTL_K_TX "tx"
#define VSX_CTL_K_RESET "reset"         /* 0 or 1 */
#define VSX_CTL_K_EXEC "exec"           /* upgrade: the program to run */

/* status */
#define VSX_CTL_K_VERSION "version"     /* vsxd's package version */
#define VSX_CTL_K_PROTOCOL "protocol"   /* VSX_CTL_VERSION */
#define VSX_CTL_K_PID "pid"
#define VSX_CTL_K_UPTIME "uptime"       /* seconds */
#define VSX_CTL_K_VMS "vms"
#define VSX_CTL_K_VMS_CONNECTED "vms-connected"
#define VSX_CTL_K_CONNS "conns"         /* also in vm= records */
#define VSX_CTL_K_CONNS_OPENED "conns-opened"
#define VSX_CTL_K_CONNS_REFUSED "conns-refused"
#define VSX_CTL_K_REFUSED_MAX_CONNS "refused-max-conns"
#define VSX_CTL_K_REFUSED_MAX_CONNS_PER_VM "refused-max-conns-per-vm"
#define VSX_CTL_K_RESET_MAX_CONN_MEMORY "reset-max-conn-memory"
#define VSX_CTL_K_MAX_CONNS "max-conns"
#define VSX_CTL_K_MAX_CONNS_PER_VM "max-conns-per-vm"
#define VSX_CTL_K_MAX_CONN_MEMORY "max-conn-memory"
#define VSX_CTL_K_HANDSHAKE_TIMEOUT_MS "handshake-timeout-ms"
#define VSX_CTL_K_CONNECT_TIMEOUT_MS "connect-timeout-ms"
#define VSX_CTL_K_LINGER_TIMEOUT_MS "linger-timeout-ms"
#define VSX_CTL_K_POLL_US "poll-us"
#define VSX_CTL_K_POLL_WINDOW_NS "poll-window-ns"
#define VSX_CTL_K_POLL_HITS "poll-hits"
#define VSX_CTL_K_POLL_MISSES "poll-misses"
#define VSX_CTL_K_FORWARDS "forwards"
#define VSX_CTL_K_RELAYS "relays"
#define VSX_CTL_K_FWD_ACCEPTED "fwd-accepted"
#define VSX_CTL_K_FWD_DENIED "fwd-denied"
#define VSX_CTL_K_FWD_FAILED "fwd-failed"
#define VSX_CTL_K_AUTH_FAILURES "auth-failures"
#define VSX_CTL_K_CLIENTS "clients"     /* control clients served */
#define VSX_CTL_K_CONTROL "control"     /* the control socket path */
/* how this vsxd started (vsxd(8) RESTARTING VSXD) */
#define VSX_CTL_K_START_MODE "start-mode" /* fresh, recovered (after a crash),
					     restarted (SIGTERM under a store),
					     handed-over (vsxctl upgrade) */
#define VSX_CTL_K_GENERATION "generation" /* 1, +1 per recovery or handoff */
#define VSX_CTL_K_HANDED_OVER_LISTENERS "handed-over-listeners"
#define VSX_CTL_K_STARTED "started"     /* wall clock, seconds since the epoch */
#define VSX_CTL_K_FD_STORE "fd-store"   /* 1: devices are kept in the store */
#define VSX_CTL_K_RECOVERED_VMS "recovered-vms"
#define VSX_CTL_K_RECOVERY_FAILED_VMS "recovery-failed-vms"
#define VSX_CTL_K_RECOVERY_CONNS_ENDED "recovery-conns-ended"
#define VSX_CTL_K_RECOVERY_CONNS_KEPT "recovery-conns-kept"
#define VSX_CTL_K_THREADS "threads"     /* worker threads running */
#define VSX_CTL_K_THREADS_MAX "threads-max" /* --threads, or the CPUs */
#define VSX_CTL_K_THREAD "thread"       /* a worker: w0, w1, ...; a thread=
					   record; in vm= records, its own */
#define VSX_CTL_K_THREAD_VMS "thread-vms" /* names joined by ',', or - */
#define VSX_CTL_K_CPU_MS "cpu-ms"       /* the thread's CPU time so far */

/* vm= records (vms), resolve */
#define VSX_CTL_K_CID "cid"
#define VSX_CTL_K_SOCKET "socket"       /* the vhost-user socket path */
#define VSX_CTL_K_CONNECTED "connected" /* 0 or 1: a front-end is there */
#define VSX_CTL_K_BROKEN "broken"       /* 0 or 1 */
#define VSX_CTL_K_TX_BUFFER_SIZE "tx-buffer-size"

/* conn= records (list, show), set-buffer and close replies */
#define VSX_CTL_K_CONN "conn"           /* the record's id */
#define VSX_CTL_K_TYPE "type"           /* stream, seqpacket */
#define VSX_CTL_K_STATE "state"         /* connecting, established, closing */
#define VSX_CTL_K_VM_STATE "vm-state"   /* running, paused: its VM's device */
#define VSX_CTL_K_PAUSED "paused"       /* 0 or 1: rings stopped, state kept */
#define VSX_CTL_K_ORIGIN "origin"       /* guest, host, sibling, vsock, relay */
#define VSX_CTL_K_PEER_KIND "peer-kind" /* host, sibling, vsock (forward-cid,
					   forward-listen), relay */
#define VSX_CTL_K_GUEST "guest"         /* CID:PORT (relay: the client) */
#define VSX_CTL_K_PEER "peer"           /* CID:PORT (relay: the target) */
#define VSX_CTL_K_GUEST_CID "guest-cid" /* guest's CID and port as numbers */
#define VSX_CTL_K_GUEST_PORT "guest-port" /* (not in relay records) */
#define VSX_CTL_K_PEER_CID "peer-cid"
#define VSX_CTL_K_PEER_PORT "peer-port"
#define VSX_CTL_K_TO_GUEST "to-guest"   /* bytes */
#define VSX_CTL_K_FROM_GUEST "from-guest"
#define VSX_CTL_K_BUF_ALLOC "buf-alloc"
#define VSX_CTL_K_FWD_CNT "fwd-cnt"
#define VSX_CTL_K_PEER_BUF_ALLOC "peer-buf-alloc"
#define VSX_CTL_K_PEER_FWD_CNT "peer-fwd-cnt"
#define VSX_CTL_K_TX_FREE "tx-free"
#define VSX_CTL_K_RX_FREE "rx-free"
#define VSX_CTL_K_GUEST_SHUT "guest-shut"   /* none, rcv, send, both */
#define VSX_CTL_K_HOST_SHUT "host-shut"
#define VSX_CTL_K_QUEUED "queued"       /* bytes held by vsxd */
#define VSX_CTL_K_FORWARD "forward"     /* the forward's name */
#define VSX_CTL_K_AUTH "auth"           /* yes, no */
#define VSX_CTL_K_SCOPE "scope"         /* connection, new-connections */
#define VSX_CTL_K_ACTION "action"       /* close, reset */

/* upgrade's reply (and vms, pid: status's keys) */
#define VSX_CTL_K_CONNS_ENDED "conns-ended" /* connections that ended */
#define VSX_CTL_K_CONNS_KEPT "conns-kept" /* connections that go on */
#define VSX_CTL_K_LISTENERS "listeners" /* listening sockets handed over */
#define VSX_CTL_K_FDS "fds"             /* descriptors handed over in all */

struct vsx_kv {
	const char *key;
	const char *value;
};

/*
 * Parsed pairs. A request never has more than VSX_CTL_MAX_LINES lines and
 * fits @small; a reply (one record per connection) has no line bound but
 * its byte bound, and grows @kv on the heap: release it with
 * vsx__ctl_kvs_free. Do not copy the struct (@kv may point into it).
 */
struct vsx_kvs {
	unsigned n;
	unsigned cap;              /* entries at @kv */
	struct vsx_kv *kv;         /* @small, or heap (replies only) */
	struct vsx_kv small[VSX_CTL_MAX_LINES];
};

/*
 * Split the request block @buf (@len bytes, not including the terminating
 * empty line) in place into key/value pairs. Returns 0, -EINVAL for a
 * malformed line (bad key, no '=', control characters, too long), -E2BIG
 * for more than VSX_CTL_MAX_LINES lines. The pairs point into @buf; nothing
 * to free.
 */
int vsx__ctl_parse(char *buf, size_t len, struct vsx_kvs *out);

/*
 * The same for a reply block: any number of lines (-ENOMEM if memory runs
 * out). Call vsx__ctl_kvs_free afterwards, whatever the result.
 */
int vsx__ctl_parse_reply(char *buf, size_t len, struct vsx_kvs *out);
void vsx__ctl_kvs_free(struct vsx_kvs *kvs);

/* The value of the first @key, or NULL. */
const char *vsx__ctl_get(const struct vsx_kvs *kvs, const char *key);

/* The error= text of @reply (a reply block as vsx__ctl_call returns it;
 * parsed in place, so spent) copied into @out (@n bytes, cut to fit):
 * @out, or NULL when the reply has none (@out then ""). */
const char *vsx__ctl_reply_error(char *reply, char *out, size_t n);

/* Find the end of a block in @buf: the offset just past "\n\n", or 0 if
 * none is complete yet. */
size_t vsx__ctl_block_end(const char *buf, size_t len);


/*
 * The request builder: every request a client sends (vsxctl, libvsx's
 * vm: and hybrid transports, test clients) is made here. It writes
 *
 *     vsx-control=VSX_CTL_VERSION\ncmd=CMD\nKEY=VALUE\n...\n\n
 *
 * into @r->buf and checks what the server would refuse: each key
 * ([a-z0-9_-], 1 to VSX_CTL_KEY_MAX bytes, neither cmd nor the version
 * key, not given twice), each value (printable ASCII, at most
 * VSX_CTL_VALUE_MAX bytes), the block (at most VSX_CTL_MAX_LINES lines
 * and VSX_CTL_REQ_MAX bytes with its empty line). The first error sticks
 * (later adds do nothing) and is what vsx__ctl_req_end returns:
 * -EINVAL (a bad key or value) or -E2BIG (too many lines or bytes).
 * Nothing is allocated; @r may live on the stack.
 */
struct vsx_ctl_req {
	char buf[VSX_CTL_REQ_MAX + 1];  /* the block, NUL-terminated once ended */
	size_t len;                     /* bytes in @buf */
	unsigned lines;
	int err;                        /* 0, or the first error */
};

/* Start a request for command @cmd (checked as a value). */
void vsx__ctl_req_init(struct vsx_ctl_req *r, const char *cmd);
/* Add "KEY=VALUE"; returns @r->err (0 while all is well). */
int vsx__ctl_req_add(struct vsx_ctl_req *r, const char *key, const char *value);
/* The same with a printf-formatted value. */
__attribute__((format(printf, 3, 4)))
int vsx__ctl_req_addf(struct vsx_ctl_req *r, const char *key, const char *fmt, ...);
/* End the block (its empty line): 0 with the request in @r->buf (@r->len
 * bytes, NUL-terminated), or the first error. */
int vsx__ctl_req_end(struct vsx_ctl_req *r);

/*
 * Client: send @request (a complete block, version line included) to the
 * control socket @path and wait up to @timeout_ms for the reply block.
 * Returns 0 with *@reply (malloc'ed, NUL-terminated, freed by the caller)
 * and the remote errno in *@remote_errno, or a negative errno for a local
 * failure (-ECONNREFUSED/-ENOENT: no vsxd; -ETIMEDOUT; -EPROTO). A request
 * of VSX_CTL_VERSION that an older vsxd refuses with EPROTONOSUPPORT is
 * sent again as VSX_CTL_VERSION_MIN (see the versions above), within the
 * same @timeout_ms; the reply is then the second one.
 */
int vsx__ctl_call(const char *path, const char *request, int timeout_ms,
		  char **reply, int *remote_errno);

#endif
