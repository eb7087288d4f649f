/*
 * The vsock backend's private header: what its rooms share. Nothing here
 * is part of backend.h's contract; the vsxb__ functions at the end exist
 * for the backend tests (tests/backend/) and the benchmarks.
 *
 * Rooms, and who may call whom. scripts/callgraph checks that the calls
 * between files, those through the ops tables included, form no cycle
 * (tests/callgraph.test), but for the upcalls that test declares: the
 * connection API's calls of the peers' hooks end (a reset, a kill, the
 * guest side's end: conn.c) and queue (conn_events.c), which the peers
 * answer by calling it back. Any other
 * call through a table goes down the graph: round.c's ops->emit and
 * pending (the RX schedule); device.c's ops->rw, gather, guest_shutdown,
 * credit_request, credit_changed, established; router.c's set_buffer,
 * end (a control close), sync.
 *
 *   lifecycle.c     vsxb_router_new/free, vsxb_vm_new/free: puts the rooms
 *                   together; calls any of them, none calls it
 *   device.c        the vhost-user device: callbacks, TX parsing, the TX
 *                   batch (gathered and handed to the peer's ops->rw),
 *                   polling; calls the router, the connection API and
 *                   the rings
 *   router.c        shared state: VMs, groups, routing of REQUESTs to
 *                   peers, control and introspection; calls the peers and
 *                   the connection API
 *   round.c         the rounds: run by the loop after a peer's or a
 *                   timer's callback (conn.c's vsxb__round_owe), and last
 *                   by every other entry point; the RX schedule (the
 *                   peers' ops->emit), used-ring flushes, frees, lent
 *                   rooms given back; calls the peers, the connection API
 *                   and the rings
 *   uds.c           the uds_path listener and CONNECT handshake; calls the
 *                   host peer and the connection API
 *   peer_xsib.c     the sibling on another thread: records through a
 *                   queue each way; calls the sibling peer's receiving
 *                   half (through peer_sib.h) and the connection API
 *   peer_host.c     the host socket peer   } call the connection API and
 *   peer_sibling.c  the sibling VM peer    } the byte queue (peer_host.c
 *                   port_post.c too); one static ops table each
 *                   (peer_host.c has two: "host", and "vsock", a host
 *                   kernel vsock socket of a forward)
 *   peer_vsock.c    the AF_VSOCK connect of forward-cid; calls nothing
 *   restart.c       device events and adoption after a restart; calls
 *                   the connection API
 *   conn.c          the connection API: state machine, credit, what goes
 *                   to the guest and when (control packets, the RX
 *                   schedule, the RX buffers reserved for the peers'
 *                   data and the packets sent of them), timers, what
 *                   the rounds owe; reaches peers only through their
 *                   tables (a reset's or a kill's end)
 *   ring.c          the rings: pops and pushes chains (vq.c), lays
 *                   headers and payload slices, gives back unused RX
 *                   chains, publishes used entries; calls nothing of
 *                   the backend (and is the one room that calls vq.c's
 *                   vsxu_vq_*)
 *   conn_events.c   logging, connection events, refusals, limits
 *   txbuf.c         the byte queue
 *   shard.c         shards (a loop's VMs, one thread) and world stops;
 *                   calls nothing
 *
 * Headers follow the same order: backend-int.h (this one: the types every
 * room shares, the credit arithmetic, and what tests and benchmarks call),
 * ring.h (the rings), conn.h (the connection API, which includes ring.h
 * for conn.c), peer.h (the peers' entry points), router.h
 * (router, device, lifecycle); peer_host.h, beside them, is the host
 * peer's data path for a kind built on it, peer_sib.h the sibling peer's
 * receiving half for peer_xsib.c. A room includes the header of its own
 * level, so it does not even see the declarations of the rooms above it.
 *
 * The design is written once, at the top of conn.c; each file's own
 * comment says what that room does.
 */
#ifndef VSXB_BACKEND_INT_H
#define VSXB_BACKEND_INT_H

#include <endian.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "backend.h"
#include "hybrid-proto.h"
#include "vhost-user/iov.h"
#include "vhost-user/loop.h"
#include "vhost-user/vhost_user.h"
#include "vsock_wire.h"

/* ---- Limits ---- */
#define VSXB_TX_BATCH 128          /* TX chains popped per round */
#define VSXB_TX_BUDGET 1024        /* TX chains per kick before yielding */
#define VSXB_RX_BATCH 128          /* RX chains one host read may fill (QEMU's ring) */
#define VSXB_LENT_MAX 8            /* other shards' rooms one round may hold */
#define VSXB_RX_READ (512u << 10)  /* bytes one host read may take (stream) */
#define VSXB_IOV_MAX 1024          /* iovecs per readv/sendmsg (IOV_MAX) */
#define VSXB_SMALL_PKT 128         /* payloads always appended to the tail chunk */
#define VSXB_CHUNK_MIN 4096        /* smallest queue chunk (unless credit is less) */
#define VSXB_CHUNK_MAX 65536       /* largest: below malloc's mmap threshold */
#define VSXB_POOL_MAX (1u << 20)   /* spare queue chunks kept per VM, bytes ... */
#define VSXB_POOL_CHUNKS 32        /* ... and chunks */
#define VSXB_POOL_SWEEP_MS 1000    /* an idle pool is freed after this */
#define VSXB_TRIM_MIN (256u << 10) /* malloc_trim after freeing this much */
#define VSXB_TRIM_THRESHOLD (4u << 20) /* free heap top malloc keeps */
#define VSXB_MMAP_THRESHOLD (1u << 20) /* malloc's mmap threshold */
#define VSXB_ORPHAN_MAX 128        /* RSTs for packets without a connection:
					one TX batch's (device.c sends them
					after each batch, vsxb__vm_rx_run) */
/* why a device breaks when its memory faulted (vhost-user/memguard.h) */
#define VSXB_MEM_FAULT "guest memory fault (SIGBUS: the file behind guest memory shrank)"
#define VSXB_MAX_HANDSHAKES 64     /* hybrid clients still sending CONNECT */
#define VSXB_HOST_PORT_FIRST 1024  /* host ports of hybrid connections */
#define VSXB_NAME_LEN (VSX_NAME_MAX + 1) /* VM names: VSX_NAME_MAX (64) bytes and a NUL */
#define VSXB_LOG_BUDGET 20         /* guest-caused warnings per VM session */
#define VSXB_REFUSE_BURST 20       /* refusals logged at once per VM ... */
#define VSXB_REFUSE_MS 1000        /* ... then one per this */

/* A packet's header, in front of its payload in every chain */
#define VSXB_HDR_LEN ((uint32_t)sizeof(struct virtio_vsock_hdr))

#define VSXB_SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)

/* ---- A tiny intrusive list ---- */
struct vsxb_list {
	struct vsxb_list *next, *prev;
};

#define vsxb_container_of(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))

static inline void vsxb_list_init(struct vsxb_list *l)
{
	l->next = l->prev = l;
}

static inline bool vsxb_list_empty(const struct vsxb_list *l)
{
	return l->next == l;
}

static inline void vsxb_list_add_tail(struct vsxb_list *l, struct vsxb_list *n)
{
	n->prev = l->prev;
	n->next = l;
	l->prev->next = n;
	l->prev = n;
}

static inline void vsxb_list_add_head(struct vsxb_list *l, struct vsxb_list *n)
{
	n->next = l->next;
	n->prev = l;
	l->next->prev = n;
	l->next = n;
}

static inline void vsxb_list_del(struct vsxb_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	vsxb_list_init(n);
}

/* ---- txbuf.c: a connection's byte queue ---- */

/*
 * Bytes waiting for a slow receiver, copied out of guest memory. Data is
 * appended to the tail chunk while it has room (small payloads never take a
 * chunk of their own), and new chunks are sized by what the sender may
 * still send, so the memory held stays close to the bytes held, which the
 * credit window bounds. With @seq, message ends (EOM, EOR) are kept as one
 * bit per byte (EOR bits only once an EOR is seen).
 */
struct txq_chunk;

/* Spare chunks of one VM's queues (stream queues, chunks of whole pages). */
struct txq_pool {
	struct txq_chunk *head;
	size_t bytes;      /* held here */
	unsigned n;
	bool used;         /* taken from or given to since the last sweep */
	size_t freed;      /* chunk bytes given back to malloc since a trim */
};

struct txq {
	struct txq_chunk *head, *tail;
	size_t bytes;      /* queued payload bytes */
	size_t mem;        /* bytes allocated to hold them (all chunk memory) */
	size_t open;       /* seq: bytes after the last message end */
	bool seq;
	struct txq_pool *pool; /* NULL: every chunk is malloc'd and freed */
};

void vsxb__txq_init(struct txq *q, bool seq);
/* Copy @len bytes of @iov into the queue; @room is how many more bytes may
 * follow (sizes a new chunk). With @eom_flags (VIRTIO_VSOCK_SEQ_*), the
 * last byte ends a message. 0 or -ENOMEM (nothing queued). */
int vsxb__txq_append(struct txq *q, const struct iovec *iov, unsigned n,
		    size_t len, size_t room, unsigned eom_flags);
/* seq: end the open message at its last byte; false if none is open. */
bool vsxb__txq_end_msg(struct txq *q, unsigned eom_flags);
/* iovecs over at most @max bytes from the head, stopping after the first
 * message end (seq); *@flags gets the end's flags if the range ends one.
 * Returns the bytes covered. */
size_t vsxb__txq_peek(const struct txq *q, struct iovec *iov, unsigned max_iov,
		     unsigned *niov, size_t max, unsigned *flags);
/* seq: length of the first complete message, 0 if there is none. */
size_t vsxb__txq_msg_len(const struct txq *q);
void vsxb__txq_consume(struct txq *q, size_t n);
void vsxb__txq_clear(struct txq *q);
/* Copy the queue into @buf (q->bytes) and, seq, each message end into
 * @ends (room for q->bytes; *@nends of them). Returns the bytes copied. */
size_t vsxb__txq_copy(const struct txq *q, uint8_t *buf, struct vsxb_msg_end *ends,
		     unsigned *nends);
/* Free the pool's chunks unless it was used since the last sweep; then
 * true when queues gave enough memory back to malloc since the previous
 * quiet sweep that a malloc_trim is worth it. */
bool vsxb__txq_pool_sweep(struct txq_pool *p);
/* Free every chunk of the pool now. */
void vsxb__txq_pool_drain(struct txq_pool *p);

/* ---- Connections ---- */

/* Control packets waiting for an RX buffer: at most one of each. */
#define C_REQUEST        0x01
#define C_RESPONSE       0x02
#define C_CREDIT_UPDATE  0x04  /* only if the guest has not seen our values */
#define C_CREDIT_REPLY   0x08  /* answer to CREDIT_REQUEST / set_buffer: always */
#define C_CREDIT_REQUEST 0x10
#define C_RST            0x20  /* last: the connection ends once it is out */

enum conn_timer_kind {
	T_NONE,
	T_CONNECT,   /* waiting for the guest's (or sibling's) RESPONSE */
	T_LINGER,    /* we shut down both ways; RST if the guest does not */
	T_DRAIN,     /* guest side gone; give the host reader this long */
};

struct vsxb_vm;
struct conn;
struct vsxb_conn_info;

/*
 * A peer kind: what is at the other end of a guest's connection (a host
 * program on a Unix socket, a connection of a sibling VM, ...). One
 * static const table per kind, in the kind's own file, which also creates
 * its connections (vsxb__conn_new with its table) and alone touches
 * c->priv. The engine calls through the table and never asks which kind
 * it holds. Hooks marked optional may be NULL: the engine then does what
 * the comment says.
 */
/* How a connection ends, for its peer (ops->end), and what the engine
 * does when the peer leaves it to it (the hook returns false). */
enum vsxb_end {
	/* A control close: shut @c down gracefully both ways and whatever is
	 * behind it (engine: vsxb__conn_shutdown both ways, then ops->sync). */
	VSXB_END_CLOSE,
	/* @c is aborted (vsxb__conn_reset): drop the peer side, and tell it if
	 * it has someone to tell (engine: nothing more). */
	VSXB_END_RESET,
	/* The guest side is over (its RST, or ours went out): deliver what is
	 * queued for the peer, then vsxb__conn_kill (engine: kill now). */
	VSXB_END_GONE,
	/* @c is being killed: release what the peer holds, telling nobody;
	 * c->priv stays valid until @c is freed at the end of the round
	 * (engine: nothing). */
	VSXB_END_RELEASE,
};

struct vsxb_peer_ops {
	const char *name;            /* the peer kind: c->peer_kind, unless the peer names its own */
	size_t priv_size;            /* c->priv, allocated zeroed with the connection */

	/* Guest -> peer */
	/* Take these guest bytes: @len payload bytes of @c's guest (@flags:
	 * SEQ_EOM/EOR of the last packet), as iovecs into guest memory valid
	 * until the TX round ends (the entries are the engine's copies: the
	 * peer may advance them); credit was checked. One RW packet, or,
	 * while ops->gather says so, consecutive RW packets of @c that the
	 * engine gathered in the VM's TX batch (device.c): they come at a
	 * message end, before any other packet of @c, when the batch is full,
	 * and at the end of every TX round. */
	void (*rw)(struct conn *c, struct iovec *iov, unsigned n,
		   uint32_t len, unsigned flags);
	/* Optional: true while @c's peer takes consecutive packets in one
	 * rw call (NULL: one call per packet). */
	bool (*gather)(const struct conn *c);
	/* Optional: the guest sent SHUTDOWN (@flags new, c->guest_shut all). */
	void (*guest_shutdown)(struct conn *c, unsigned flags);
	/* Optional: the guest sent CREDIT_REQUEST (answered by the engine). */
	void (*credit_request)(struct conn *c);
	/* Optional: the guest's buf_alloc or fwd_cnt changed. */
	void (*credit_changed)(struct conn *c);
	/* Optional: the guest answered our REQUEST (@c is ESTABLISHED now).
	 * <0: the peer cannot go on (its reason recorded): @c is reset. */
	int (*established)(struct conn *c);

	/* Peer -> guest */
	/* Data for the guest while it has RX buffers and credit (EMIT_*);
	 * called for connections past CONNECTING on the VM's RX schedule.
	 * The peer asks for the guest's buffers (vsxb__rx_reserve, conn.h),
	 * reads or copies its data into their iovecs and hands them back
	 * (vsxb__rx_commit), which lays the headers and gives back what it
	 * did not fill: the peer sees iovecs, never a chain. */
	int (*emit)(struct conn *c);
	/* Optional: data still owed to the guest, which a SHUTDOWN(SEND) or an
	 * RST must wait for (NULL: none). */
	bool (*pending)(const struct conn *c);
	/* Optional: a control close queued a SHUTDOWN for the guest (router.c;
	 * the peer's own shutdowns it follows itself): re-evaluate what to
	 * read. */
	void (*sync)(struct conn *c);

	/* Credit */
	/* Optional: the fwd_cnt and buf_alloc to announce (NULL: ours). */
	void (*window)(const struct conn *c, uint32_t *fwd, uint32_t *buf);
	/* Optional: c->cr.buf_alloc was set (vsxb_router_conn_set_buffer). */
	void (*set_buffer)(struct conn *c);

	/* End */
	/* Optional: @c ends as @how says (enum vsxb_end); false (or NULL):
	 * the engine does what it does for a peer with nothing behind it. */
	bool (*end)(struct conn *c, enum vsxb_end how);

	/* Control */
	/* Optional: the queue vsxctl shows as @c's queued bytes (NULL: c->q;
	 * the hook may return NULL: none). */
	const struct txq *(*queue)(const struct conn *c);
	/* Optional: take over @fd for a guest-initiated connection still
	 * CONNECTING (vsxb_router_conn_attach_fd; NULL: -ENOENT). */
	int (*attach_fd)(struct conn *c, int fd);
	/* Optional: at a freeze (vsxb_vm_foreach_keep), what the peer keeps
	 * of @c for another process: a sibling half fills @k's twin, sets
	 * k->sibling and puts the bytes for its guest into k->q and k->ends
	 * (malloc'ed: the caller frees them). 0 (k->sibling false: it ends),
	 * or -ENOMEM. */
	int (*keep)(const struct conn *c, struct vsxb_conn_keep *k);
};

struct conn {
	uint64_t id;
	struct vsxb_vm *vm;
	struct vsxb_list node;        /* vm->conns (until freed) */
	struct vsxb_list pnode;       /* vm->pending while it waits for RX;
					 vm->dead once killed */
	struct conn *hnext;          /* hash chain */
	bool hashed, dead, draining;

	uint16_t type;               /* VIRTIO_VSOCK_TYPE_* */
	int state;                   /* enum vsxb_conn_state */
	bool guest_initiated;
	uint32_t guest_port;
	uint64_t peer_cid;
	uint32_t peer_port;

	unsigned guest_shut;         /* SHUTDOWN flags received from the guest */
	unsigned host_shut;          /* SHUTDOWN flags sent to the guest */
	unsigned shut_pending;       /* SHUTDOWN flags still to send */
	unsigned ctrl;               /* C_* waiting for an RX buffer */

	struct vsxb_credit cr;       /* (backend.h) */
	bool advertised;             /* cr.rx_limit is valid */
	bool credit_req_sent;        /* asked once; cleared when credit moves */
	bool credit_stalled;         /* counted in credit_stalls; cleared when credit moves */
	bool msg_open;               /* seq: the guest's current message has bytes */
	uint64_t to_guest, from_guest;

	/* The peer: its table, and its private state (ops->priv_size bytes
	 * allocated with the connection), which only the peer's file touches. */
	const struct vsxb_peer_ops *ops;
	void *priv;
	/* The peer kind vsxctl shows and the origin of the connections the
	 * peer opens: ops->name, or the host peer's "vsock" for an AF_VSOCK
	 * socket. */
	const char *peer_kind;

	/* Bytes in flight through us, copied out of guest memory: the host
	 * peer queues here guest payload its socket has not taken yet; the
	 * sibling peer the other guest's payload waiting for this guest's RX
	 * buffers (bounded by the credit the other guest was given). */
	struct txq q;

	struct vsxu_timer *timer;
	enum conn_timer_kind tkind;
	bool theld;                  /* tkind waits for the VM's resume */
	uint64_t tdue_ms;            /* when tkind fires (vsx__now_ms; 0: held) */
	char tag[VSXB_TAG_MAX];       /* vsxb_conn_info.tag ("": none) */

	/* Events (backend.h): OPEN reported, the first decisive end cause. */
	bool opened;
	uint64_t opened_ms;          /* CLOCK_MONOTONIC */
	int why;                     /* enum vsxb_conn_reason, 0: none yet */
	int why_err;                 /* errno for VSXB_REASON_ERROR */
	int why_limit;               /* enum vsxb_limit_kind */
};

/* ---- VMs (per VM) ---- */

struct vsxb_engine_stats {
	uint64_t tx_pkts;         /* packets taken from the TX queue */
	uint64_t rx_pkts;         /* packets put into the RX queue */
	uint64_t tx_rounds;       /* TX processing rounds (one used flush each) */
	uint64_t rx_flushes;      /* RX used-ring flushes */
	uint64_t host_writes;     /* sendmsg calls on host sockets */
	uint64_t host_reads;      /* readv/recvmsg calls moving data from hosts */
	uint64_t ctrl_sent;       /* control packets put into RX */
	uint64_t rx_short;        /* rounds whose RX schedule found no buffer */
	uint64_t credit_updates;  /* CREDIT_UPDATE sent */
	uint64_t credit_requests; /* CREDIT_REQUEST sent */
	uint64_t resets;          /* RST sent */
	uint64_t dropped;         /* guest packets dropped (bad header) */
	uint64_t orphans_dropped; /* RST replies lost for lack of RX buffers */
	uint64_t queued_bytes;    /* guest payload bytes that had to be copied */
	uint64_t sib_wakes;       /* wake-ups owed to siblings' threads (peer_xsib.c, and
				     round.c for a lent room's VM) */
	uint64_t sib_reused;      /* ... records to them made of one given back */
	uint64_t sib_lent;        /* ... what went in their room instead (peer_xsib.c:
				     a packet straight into the other guest's RX
				     buffers, a credit change applied) */
};

/*
 * One VM: its device, connections, queues, hash, chunk pool and stats.
 * Everything here belongs to the VM and is touched only from the VM's
 * loop, so from its shard's thread (struct vsxb_shard). The exceptions,
 * named where they are: @r and the fields the router reads under its own
 * rules (name, cid, groups, live/broken/freeing for sibling lookup, node),
 * the other half of a sibling pair on the same shard (peer_sibling.c),
 * which reaches this VM only through vsxb__conn_* calls on its own half's
 * peer, and another shard's thread in this shard's room (struct
 * vsxb_shard: peer_xsib.c), which does only what a lent room allows.
 */
struct vsxb_vm {
	struct vsxb_router *r;       /* shared: see struct vsxb_shard */
	struct vsxb_list node;        /* r->vms (the router's) */
	char *name;
	uint64_t cid;
	char *socket_path;
	char *uds_path;              /* NULL: no hybrid exposure */
	mode_t sock_mode;            /* both sockets' mode (0: 0600) and */
	gid_t sock_gid;              /* group (VSX__GID_KEEP: ours) */
	bool forward;                /* guest -> host: vsock forward_cid */
	uint32_t forward_cid;
	vsxb_forward_connect_fn forward_connect;
	void *forward_arg;
	uint32_t buf_default;
	unsigned queue_size;
	char **groups;
	unsigned ngroups;

	/* The device (device.c) */
	struct vsxu_vu *vu;
	struct vsxb_ring *ring;       /* ring.c's own: the queues, the chains popped */
	bool live, broken, event_pending, seqpacket, freeing;
	/* The front-end stopped the rings resumably (QEMU stop, or a guest
	 * reset the next start reveals): connections kept, guest memory not
	 * touched, guest-bound timers held (lifecycle.c). live stays true. */
	bool paused;
	uint64_t paused_ms;          /* since when (CLOCK_MONOTONIC) */
	/* The last round's RX schedule stopped short (no RX buffer, or its
	 * budget ran out): what waits has the guest's next buffers, before
	 * any sibling's direct copy (vsxb__conn_rx_direct_ok). */
	bool rx_behind;
	const char *break_owed;      /* a ring broke in a lent room (struct
					vsxb_shard): its own round breaks it */
	bool tx_more, rx_more;       /* budget ran out: resume timer armed */
	bool dirty;                  /* needs end-of-round work */
	struct vsxb_list dnode;       /* sh->dirty */
	struct vsxb_shard *sh;       /* the loop (thread) it runs on */
	uint64_t serial;             /* unique in the router: names it in posted
					messages, whatever reuses its memory */

	/* Connections (conn.c) */
	struct vsxb_list conns;       /* every connection, by age */
	struct vsxb_list pending;     /* connections waiting for RX buffers */
	struct vsxb_list dead;        /* killed ones (by pnode), freed at the
					 end of the round */
	unsigned nconns;             /* live ones */
	unsigned ndead;              /* killed, freed at the end of the round */
	struct conn **hash;
	unsigned hash_size, hashed;
	uint64_t hash_seed;

	struct virtio_vsock_hdr orphan[VSXB_ORPHAN_MAX];
	unsigned orphan_head, orphan_n;
	/* adopted with connections kept (restart.c): the device starts
	 * without a TRANSPORT_RESET (device.c) */
	bool keep_conns;
	/* RSTs an adoption still has to send (restart.c), fed into orphan[]
	 * by rst_timer as it drains */
	struct vsxb_conn_addr *rst;
	unsigned rst_n, rst_next;
	struct vsxu_timer *rst_timer;
	/* adopted with sibling halves waiting for their twins: the guest's
	 * TX is not read until vsxb_router_pair_kept made them (device.c) */
	bool tx_hold;

	/* The hybrid listener (uds.c) and host ports (peer_host.c) */
	int lfd;
	struct vsxu_acceptor *acc;    /* on lfd (vhost-user/acceptor.h) */
	struct vsxb_list handshakes;
	unsigned nhandshakes;
	uint32_t next_host_port;
	bool host_port_wrapped;

	/* TX processing (device.c) */
	struct vsxu_timer *resume;    /* a budget ran out: continue at once */
	unsigned tx_pieces_max;      /* most iovecs of one TX packet (logged) */
	struct iovec *fiov;          /* VSXB_IOV_MAX: a peer's queue peeks */
	/* The TX batch (device.c gathers and delivers it, ring.c drops it):
	 * guest payload of consecutive RW packets of one connection whose
	 * peer takes them at once (ops->gather, ops->rw). */
	struct iovec *iov;           /* VSXB_IOV_MAX */
	struct conn *batch;          /* connection the TX batch is for */
	unsigned batch_niov;
	size_t batch_len;
	unsigned batch_flags;        /* EOM/EOR closing the batch (seq) */

	unsigned log_budget;
	struct vsxb_engine_stats st;
	struct vsxb_vm_counters ct;  /* backend.h (conns, queued_bytes unused here) */

	/* spare queue chunks (txbuf.c), swept by ptimer (conn.c) */
	struct txq_pool pool;
	struct vsxu_timer *ptimer;
	bool ptimer_armed;

	/* refusal events: a token bucket for logging (backend.h) */
	unsigned refuse_tokens;
	uint64_t refuse_ms;          /* last refill */
	uint64_t refuse_suppressed;  /* since the last one to log */
};

/* ring.c: the VM's rings from its front-end (every chain returned, nothing
 * to publish); none again (a device stopped). Here for the inline below:
 * the rest of the rings' calls are in ring.h. */
void vsxb__ring_take(struct vsxb_vm *vm);
void vsxb__ring_release(struct vsxb_vm *vm);

/* @vm's device runs its front-end's rings from now on (op_start; an
 * adoption of a paused device, restart.c): its queues, what was
 * negotiated, a fresh session's budgets. */
static inline void vsxb__vm_rings_taken(struct vsxb_vm *vm)
{
	vsxb__ring_take(vm);
	vm->seqpacket = vsxu_vu_features(vm->vu) & (1ull << VIRTIO_VSOCK_F_SEQPACKET);
	vm->live = true;
	vm->broken = false;
	vm->log_budget = VSXB_LOG_BUDGET;
	vm->orphan_n = 0;
	vm->orphan_head = 0;
}

/* ---- Shards and the router ---- */

/* A callback owed to another thread's loop, posted (loop.h's post) when
 * the round of the shard that owes it ends, or a world stop does; one
 * post for whatever the round did meanwhile. Its owner keeps it alive
 * until @fn ran. */
struct vsxb_later {
	struct vsxb_list node;        /* sh->later while owed */
	const struct vsxu_loop *loop; /* where @fn runs */
	void (*fn)(void *arg);
	void *arg;
};

/*
 * Threads. A host program may run its VMs on several loops, each on a
 * thread of its own (vsxd's worker threads: vsxb_vm_config.loop); the
 * router's own loop is the control thread's, the one thread that calls
 * backend.h. A shard is the VMs of one loop. A VM's state (struct
 * vsxb_vm, its connections, queues, device and descriptors) is touched
 * only on its shard's thread, or on the control thread while every other
 * shard is parked: a world stop (shard.c), which every backend.h call that
 * reads or changes VM state makes, so it sees and changes a consistent
 * world, as on one thread. Parking is a callback posted to the shard's loop
 * (loop.h's post) that blocks on the router's park mutex until the stop
 * ends; the mutex orders the two threads' accesses.
 *
 * What a shard's thread touches beyond its own VMs, and how:
 * - the router's VM list, groups and host-port handlers: read; only the
 *   control thread changes them, and only during a world stop;
 * - the limits and timeouts (lim, counter_base): read; changed only
 *   during a world stop;
 * - next_id, nconns and the stats (st): atomics (vsxb_add, vsxb_load);
 * - the log and event callbacks: called on the shard's thread (the host
 *   program's callbacks must be thread-safe: vsxd's are);
 * - a host-port handler (vsxb_port_cb) is not called on the shard's
 *   thread: the request is posted to the control thread (port_post.c).
 * - siblings: a pair within one shard is peer_sibling.c's (guest to guest,
 *   one copy); a pair across shards is two halves joined by a link of two
 *   single-producer single-consumer queues of records, one each way,
 *   counted and freed by whichever thread lets go last; a record pushed
 *   to an idle queue owes the other loop a wake-up, which the sending
 *   shard posts once its round ends (struct vsxb_later; peer_xsib.c,
 *   xsib_ops), so a round that pushes many records wakes it once;
 * - another shard's VMs, in its room (loop.h's borrow): a shard's thread
 *   may take a foreign shard's room when that shard's thread is in none
 *   of its callbacks (asleep, or between two), never waiting for it, and
 *   hold it until its own round ends (vsxb__shard_borrow, given back by
 *   vsxb__round). Meanwhile it works on that shard's VMs as their thread
 *   would, within what a lent round may do: straight into a guest's RX
 *   buffers, the control packets its work scheduled (sent as the round
 *   ends, before the room goes back: round.c, round_lent), counters; no
 *   loop entry of that shard's (its timers and watches stay its
 *   thread's), no connection killed, no device broken (break_owed
 *   instead). The round's end publishes the RX used entries of the VMs it
 *   touched there; a VM left needing more (vsxb__vm_lent_owed) stays
 *   dirty, and the borrower's round wakes that shard's thread for it
 *   (vsxb__shard_wake). peer_xsib.c lends a
 *   pair's data and credit this way when the other thread is idle: one
 *   copy and no wake-up, as on one thread.
 */
struct vsxb_shard {
	struct vsxb_router *r;
	const struct vsxu_loop *loop;
	struct vsxb_list node;        /* r->shards */
	unsigned nvms;               /* VMs on it (and one being made) */
	bool foreign;                /* not the router's loop: parked by stops
					while it serves a VM */

	/* Rounds (round.c): one shard's VMs at a time */
	struct vsxb_list dirty;       /* VMs touched this round */
	struct vsxb_list later;       /* struct vsxb_later: posted as the round
					 ends (vsxb__shard_posts) */
	int in_round;
	struct vsxu_work round;      /* loop.h's queue: vsxb__round_owe */
	struct vsxb_later wake;      /* a borrower's: vsxb__shard_wake */
	bool wake_owed;              /* @wake on its way (atomic) */
	bool polling;                /* vsxb_router_poll: the loop polls, TX kicks off */

	/* Rooms (loop.h's borrow): what this shard's thread holds of other
	 * shards until its round ends, and whether another holds this one's */
	struct vsxb_shard *lent[VSXB_LENT_MAX];
	unsigned nlent;
	bool borrowed;               /* set and read in the room only */
};

/*
 * Who may touch a VM, checked (configure --enable-owner-checks, which
 * defines VSXB_OWNER_CHECKS; nothing is checked otherwise): the thread
 * in its shard's room (loop.h's owns: one of the loop's callbacks, or the
 * borrower of that room), the control thread for the VMs of its own
 * loop, or the control thread in a world stop. Anything else prints what
 * was touched and aborts. A shard whose loop cannot tell (no owns) is
 * not checked. At the entry points that change a VM's state: its timers,
 * a connection's kill and schedule, each ring access (ring.c).
 */
#ifdef VSXB_OWNER_CHECKS
#define VSXB_OWNED(vm, what) vsxb__owner_check((vm), (what))
#else
#define VSXB_OWNED(vm, what) ((void)(vm))
#endif

/* Counters shared by the shards' threads. */
#define vsxb_add(p, n) __atomic_add_fetch((p), (n), __ATOMIC_RELAXED)
#define vsxb_load(p) __atomic_load_n((p), __ATOMIC_RELAXED)

struct vsxb_router {
	const struct vsxu_loop *loop; /* the control thread's */
	vsxu_post_cb round;          /* a shard's round, as its loop runs it
					(vsxb__round_owe; set by
					vsxb_router_new) */
	vsxb_log_fn log;
	void *log_arg;
	struct vsxb_list vms;
	uint64_t next_id;            /* vsxb_add */
	uint32_t counter_base;       /* tests: new connections' counters start here */
	struct vsxb_list ports;       /* struct vsxb_port: vsxb_router_listen_port */

	/* Limits and events (backend.h) */
	struct vsxb_router_limits lim; /* in force, defaults filled in */
	unsigned nconns;             /* live connections, all VMs (vsxb_add) */
	vsxb_conn_event_fn ev_fn;
	void *ev_arg;
	vsxb_device_event_fn dev_fn; /* restart.c */
	void *dev_arg;
	struct vsxb_router_stats st;  /* vsxb_add; conns unused here (nconns) */

	/* Shards and world stops (shard.c) */
	struct vsxb_list shards;
	struct vsxb_shard *home;     /* the router's loop's */
	uint64_t next_serial;        /* vsxb_vm.serial (control thread) */
	struct vsxb_park *park;
	unsigned stop_depth;         /* control thread only */
	pthread_t control;           /* the control thread (vsxb_router_new's) */

	/* Sibling halves adopted, waiting for their twins (restart.c) */
	struct vsxb_sibkeep *sibkeep;
};

#ifdef VSXB_OWNER_CHECKS
/* VSXB_OWNED's check (its comment follows struct vsxb_shard), inline:
 * no room gains a call for it. */
static inline void vsxb__owner_check(const struct vsxb_vm *vm, const char *what)
{
	const struct vsxb_router *r = vm->r;
	const struct vsxu_loop *l = vm->sh->loop;
	bool control = pthread_equal(pthread_self(), r->control);

	/* the control thread first: stop_depth is its alone */
	if (control && (vm->sh == r->home || r->stop_depth))
		return;
	if (!l->owns || l->owns(l->ctx))
		return;
	fprintf(stderr, "vsxb: owner check: %s of VM %s on a thread that does not own it "
		"(%s)\n", what, vm->name,
		control ? "the control thread outside a world stop" : "not in its room");
	abort();
}
#endif

/* ---- Credit arithmetic and wire order (every room) ---- */

static inline uint32_t vsxb_u32min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/* Wire (little-endian) <-> CPU order, in place; the same operation. */
static inline void vsxb_hdr_swap(struct virtio_vsock_hdr *h)
{
	h->src_cid = le64toh(h->src_cid);
	h->dst_cid = le64toh(h->dst_cid);
	h->src_port = le32toh(h->src_port);
	h->dst_port = le32toh(h->dst_port);
	h->len = le32toh(h->len);
	h->type = le16toh(h->type);
	h->op = le16toh(h->op);
	h->flags = le32toh(h->flags);
	h->buf_alloc = le32toh(h->buf_alloc);
	h->fwd_cnt = le32toh(h->fwd_cnt);
}

/* The fwd_cnt and buf_alloc @c's peer would announce now (ops->window). */
static inline void vsxb__conn_window(const struct conn *c, uint32_t *fwd,
				     uint32_t *buf)
{
	if (c->ops->window) {
		c->ops->window(c, fwd, buf);
		return;
	}
	*fwd = c->cr.fwd_cnt;
	*buf = c->cr.buf_alloc;
}

/* What we may still send to the guest. */
static inline uint32_t vsxb__conn_peer_free(const struct conn *c)
{
	uint32_t inflight = c->cr.tx_cnt - c->cr.peer_fwd_cnt;

	return inflight >= c->cr.peer_buf_alloc ? 0 : c->cr.peer_buf_alloc - inflight;
}

/* What the guest may still send us, by the furthest limit we announced. */
static inline uint32_t vsxb__conn_rx_room(const struct conn *c)
{
	int32_t room = (int32_t)(c->cr.rx_limit - c->cr.rx_cnt);

	return c->advertised && room > 0 ? (uint32_t)room : 0;
}

/* @c has data for its guest and no credit to send it: one stall, counted
 * once until the guest's credit moves (device.c: credit_moved). */
static inline void vsxb__conn_stall(struct conn *c)
{
	if (!c->credit_stalled) {
		c->credit_stalled = true;
		c->vm->ct.credit_stalls++;
	}
}

/* Emission results */
#define EMIT_DONE 0   /* nothing more to send now */
#define EMIT_MORE 1   /* sent some, more is ready */
#define EMIT_NOBUF 2  /* RX buffers ran out */

/* ---- shard.c: shards and world stops (calls nothing) ---- */

int vsxb__shards_init(struct vsxb_router *r);
void vsxb__shards_free(struct vsxb_router *r);
/* The shard of @loop (NULL: the router's), made on first use; NULL: out
 * of memory, or a foreign loop without post. */
struct vsxb_shard *vsxb__shard_get(struct vsxb_router *r, const struct vsxu_loop *loop);
/* Park every foreign shard until the matching world_start; nests. On the
 * control thread only. The outermost world_start runs the round of
 * every shard the stop's work touched, then lets them go. */
void vsxb__world_stop(struct vsxb_router *r);
void vsxb__world_start(struct vsxb_router *r);
/* @w is owed by @sh (it is not owed yet: its owner knows), posted by
 * vsxb__shard_posts. On @sh's thread, or the control thread in a stop. */
void vsxb__shard_post_later(struct vsxb_shard *sh, struct vsxb_later *w);
/* @to, whose room @sh's round borrowed, owes its own thread a round (a VM
 * left needing more: vsxb__vm_lent_owed): posted when @sh's round ends,
 * once however many borrowers owe it meanwhile. In @to's room. */
void vsxb__shard_wake(struct vsxb_shard *sh, struct vsxb_shard *to);
/* Post what @sh owes; one whose post fails (out of memory) stays owed
 * until the next round or stop. Called as a round ends. */
void vsxb__shard_posts(struct vsxb_shard *sh);
/* @to's room for the rest of @sh's round (struct vsxb_shard: given back
 * by vsxb__round), on @sh's thread inside one of its callbacks, which
 * ends with a round: true if this thread holds it (already, or now);
 * false if @to's thread is in a callback, @to is @sh or not foreign, or
 * its loop has no room. Never waits. */
bool vsxb__shard_borrow(struct vsxb_shard *sh, struct vsxb_shard *to);

/* ---- for tests and benchmarks ---- */
void vsxb__router_set_timeouts(struct vsxb_router *r, unsigned handshake_ms,
			      unsigned connect_ms, unsigned linger_ms);
/* New connections start their byte counters (rx_cnt, fwd_cnt, tx_cnt) at
 * @base, so a test guest starting its own there crosses 2^32 quickly. */
void vsxb__router_set_counter_base(struct vsxb_router *r, uint32_t base);
void vsxb__vm_stats(const struct vsxb_vm *vm, struct vsxb_engine_stats *st);
/* Memory held for connection @id's queued data (chunk accounting). */
int vsxb__conn_mem(struct vsxb_router *r, uint64_t id, size_t *mem);
/* uds.c: "CONNECT <decimal port>\n" (exactly @n bytes): 0 and *@port,
 * or -1. Pure; also fuzz/fuzz_connect.c's target. */
int vsxb__host_parse_connect(const char *s, size_t n, uint32_t *port);

#endif
