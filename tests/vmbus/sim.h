/*
 * hv_sock simulator, FOR TESTS ONLY: never part of libvsx.
 *
 * No Hyper-V host can run on the build machine, and AF_VSOCK must not be
 * opened there, so the vmbus transport is tested against this simulator. It
 * is a struct vmbus_sys (vmbus-sys.h) that behaves the way Linux hv_sock
 * does in a Hyper-V guest (net/vmw_vsock/hyperv_transport.c, af_vsock.c),
 * plus a "host" API for the Windows side, and it carries the data over real
 * AF_UNIX sockets in the test process. It never opens AF_VSOCK.
 *
 * The rules it enforces, each of which a test relies on:
 *  - peers: connect() to any CID but the host (2) fails with ENETUNREACH;
 *    a guest binds only CID any (EADDRNOTAVAIL otherwise);
 *  - stream only: connect() of a SEQPACKET socket fails with
 *    ESOCKTNOSUPPORT, and a SEQPACKET listener never gets a connection;
 *  - no MSG_PEEK: recv() with it fails with EOPNOTSUPP (and is counted);
 *  - MTU: one send() or recv() moves at most 16 KiB;
 *  - rings fixed at open: the channel's rings are computed when it opens
 *    (guest connect, or host connect to a guest listener) from the socket's
 *    (or the listener's) SO_SNDBUF/SO_RCVBUF: clamped to 6..64 pages and
 *    page-rounded; later changes are accepted and have no effect (counted);
 *    the data in flight each way never exceeds the ring (a blocking send
 *    waits, a non-blocking one gets EAGAIN); SO_VM_SOCKETS_BUFFER_SIZE is
 *    accepted and ignored (counted). The kernel's doubling of SO_*BUF and
 *    the {w,r}mem_max caps are modelled;
 *  - kernel generations, from conf.kernel_release: before 5.1 close() waits
 *    until the host closes; before 5.3 rings are 6 pages whatever is asked;
 *    5.3 and 5.4 initialise a socket's buffers to 6 pages when it is created;
 *    5.5 and later when the transport is assigned: at connect() for a
 *    client (resetting what was set before), never for a listener;
 *  - delayed close (5.1 and later): close() sends the FIN and returns; the
 *    "kernel" keeps the channel until the host closes its end or
 *    conf.close_timeout_ms (HVS_CLOSE_TIMEOUT, 8 s) runs out;
 *  - a guest connect to a port no host service listens on is not refused:
 *    it times out (SO_VM_SOCKETS_CONNECT_TIMEOUT, default 2 s).
 * Connects are always synchronous, even on a non-blocking socket.
 */
#ifndef VSX_VMBUS_SIM_H
#define VSX_VMBUS_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct vmbus_sim_conf {
	const char *kernel_release; /* NULL: "6.1.0-sim" */
	int close_timeout_ms;       /* 0: 8000 (HVS_CLOSE_TIMEOUT) */
	int wmem_max, rmem_max;     /* 0: 212992 (net.core.*mem_max) */
	int wmem_default, rmem_default; /* 0: 212992 (net.core.*mem_default) */
};

/* Reset the simulator and make it the vmbus transport's kernel. */
void vmbus_sim_start(const struct vmbus_sim_conf *conf);

/* ---- The host (Windows) side -------------------------------------------- */

/* Register service PORT-facb-11e6-bd58-64006a7986d3; an id, or -errno. */
int vmbus_sim_host_listen(uint32_t port);
/* The host end (a plain AF_UNIX stream fd the caller owns) of the next guest
 * connection to service @id, or -ETIMEDOUT. */
int vmbus_sim_host_accept(int id, int timeout_ms);
/* Connect the host to a guest listening on @guest_port, from host service
 * @host_port; the host end, or -ECONNREFUSED when no guest listens. */
int vmbus_sim_host_connect(uint32_t guest_port, uint32_t host_port);
/* Send from the host end with the guest's receive ring and the MTU
 * enforced (plain write(2) on the host end skips both). MSG_DONTWAIT in
 * @flags: -EAGAIN when the ring is full. Returns bytes moved or -errno. */
ssize_t vmbus_sim_host_send(int hfd, const void *buf, size_t len, int flags);

/* ---- What the simulated kernel saw --------------------------------------- */

struct vmbus_sim_stats {
	unsigned long calls;           /* every call through the sys table */
	unsigned long sockets;         /* socket() */
	unsigned long peek_refused;    /* recv(MSG_PEEK) */
	unsigned long buf_after_open;  /* SO_*BUF on an open channel: no effect */
	unsigned long vsock_bufsize;   /* SO_VM_SOCKETS_BUFFER_*: ignored */
	unsigned long sends, short_sends;
	size_t max_send, max_recv;     /* the most one send()/recv() moved */
	int open;                      /* sockets the kernel still holds */
	int lingering;                 /* closed, kernel waiting for the host */
	int blocked_closes;            /* close() calls now waiting (pre-5.1) */
	unsigned long released;        /* sockets the kernel let go of */
};

void vmbus_sim_stats(struct vmbus_sim_stats *out);

/* The rings guest socket @fd's channel opened with; -ENOTCONN before. */
int vmbus_sim_rings(int fd, size_t *rx, size_t *tx);

/* Run the delayed-close timers now (they also run on every call). */
void vmbus_sim_reap(void);

#endif /* VSX_VMBUS_SIM_H */
