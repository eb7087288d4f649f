/*
 * The vhost-user-vsock backend as vsxd (and tests, and benchmarks) use it:
 * VMs, each a vhost-user device on its own socket with its own guest CID,
 * exposed to host programs through hybrid Unix sockets, and a router that
 * lets VMs of a common group reach each other by CID.
 *
 * No event loop is owned here: everything runs on the vsx_loop given.
 * Single-threaded: call these from the loop's thread only.
 */
#ifndef VSX_BACKEND_H
#define VSX_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "loop.h"

#define VSX_DEFAULT_BUF_ALLOC (256u * 1024)   /* tx-buffer-size default */
#define VSX_DEFAULT_QUEUE_SIZE 1024           /* largest ring accepted */
#define VSX_GROUP_DEFAULT "default"

/* Log priorities (syslog's values). */
#define VSX_LOG_ERR 3
#define VSX_LOG_WARNING 4
#define VSX_LOG_INFO 6
#define VSX_LOG_DEBUG 7

typedef void (*vsx_log_fn)(void *arg, int prio, const char *msg);

struct vsx_vm_config {
	const char *name;          /* vm:NAME and vsxctl; NULL: "cid<N>" */
	uint64_t guest_cid;        /* 3 .. 0xFFFFFFFE */
	const char *socket_path;   /* vhost-user socket QEMU connects to */
	const char *uds_path;      /* hybrid: host programs connect here;
				      guests reach host port P at uds_path_P */
	uint32_t tx_buffer_size;   /* buf_alloc per connection; 0: default */
	unsigned queue_size;       /* largest ring size accepted; 0: default */
	const char *groups;        /* "a+b"; NULL: "default" */
};

struct vsx_router;
struct vsx_vm;

/* A router: the VMs of one process, for sibling routing and lookup.
 * @log may be NULL (silence). */
int vsx_router_new(const struct vsx_loop *loop, vsx_log_fn log, void *log_arg,
		   struct vsx_router **out);
/* Frees every VM still attached, then the router. */
void vsx_router_free(struct vsx_router *r);

/* Validate @cfg, bind its sockets, attach the VM to @r. Errors: -EINVAL
 * (bad config, with a log line saying why), -EEXIST (CID or name taken),
 * -EADDRINUSE (a socket path in use), other negative errno. */
int vsx_vm_new(struct vsx_router *r, const struct vsx_vm_config *cfg,
	       struct vsx_vm **out);
/* Reset every connection, notify host peers, close sockets, unlink paths. */
void vsx_vm_free(struct vsx_vm *vm);

struct vsx_vm *vsx_router_vm_by_name(struct vsx_router *r, const char *name);
struct vsx_vm *vsx_router_vm_by_cid(struct vsx_router *r, uint64_t cid);
const char *vsx_vm_name(const struct vsx_vm *vm);

/* ---- Introspection and control (vsxctl) ---- */

enum vsx_conn_state {
	VSX_CONN_CONNECTING = 1, /* REQUEST sent or received, no RESPONSE yet */
	VSX_CONN_ESTABLISHED,
	VSX_CONN_CLOSING,        /* a SHUTDOWN seen or sent; see shut flags */
};

struct vsx_conn_info {
	uint64_t id;               /* unique in the process, never reused */
	const char *vm;            /* VM name (valid during the callback) */
	int type;                  /* 1 stream, 2 seqpacket (wire values) */
	int state;                 /* enum vsx_conn_state */
	uint64_t guest_cid;
	uint32_t guest_port;
	uint64_t peer_cid;         /* 2 for host programs, a sibling's CID */
	uint32_t peer_port;
	bool guest_initiated;
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
};

typedef int (*vsx_conn_cb)(const struct vsx_conn_info *ci, void *arg);

/* Call @cb for each connection of @vm (every VM when @vm is NULL); a
 * non-zero return stops the walk and is returned. */
int vsx_router_foreach_conn(struct vsx_router *r, struct vsx_vm *vm,
			    vsx_conn_cb cb, void *arg);
/* Set buf_alloc of connection @id (a CREDIT_UPDATE tells the guest).
 * -ENOENT: no such connection; -EINVAL: @bytes is 0 or above 1 GiB. */
int vsx_router_conn_set_buffer(struct vsx_router *r, uint64_t id, uint32_t bytes);
/* Close (SHUTDOWN both ways, RST after 8 s) or reset (RST now) @id. */
int vsx_router_conn_close(struct vsx_router *r, uint64_t id, bool reset);
/* buf_alloc for @vm's new connections. */
int vsx_vm_set_default_buffer(struct vsx_vm *vm, uint32_t bytes);

/* What vsxctl shows of a VM. The strings are the VM's: valid until it is
 * freed. */
struct vsx_vm_info {
	const char *name;
	uint64_t guest_cid;
	const char *socket_path;   /* vhost-user socket */
	const char *uds_path;      /* NULL: no hybrid exposure */
	uint32_t buf_default;      /* buf_alloc of new connections */
	bool connected;            /* the front-end (QEMU) has the device running */
	bool broken;               /* stopped after a bad guest, until it resets */
	unsigned conns;            /* live connections */
};

void vsx_vm_get_info(const struct vsx_vm *vm, struct vsx_vm_info *out);

typedef int (*vsx_vm_cb)(struct vsx_vm *vm, void *arg);

/* Call @cb for each VM, oldest first; a non-zero return stops the walk and
 * is returned. @cb must not free VMs. */
int vsx_router_foreach_vm(struct vsx_router *r, vsx_vm_cb cb, void *arg);

#endif
