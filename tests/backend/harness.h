/*
 * Test harness for the vsock engine: a router with up to four VMs on a
 * libevent loop thread (tests/driver/loop_thread.h), the in-process driver
 * playing QEMU and each guest in the test thread, a tiny "guest socket
 * layer" on top of the driver (connections, credit kept as a Linux guest
 * keeps it), and host programs on real Unix sockets.
 *
 * Everything here asserts with criterion on failure; functions that may
 * legitimately fail return a value the test checks.
 */
#ifndef VSX_TEST_BACKEND_HARNESS_H
#define VSX_TEST_BACKEND_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend-int.h"
#include "../driver/driver.h"
#include "../driver/loop_thread.h"
#include "util.h"

#define TMO 5000      /* ms: "should happen" */
#define QUIET 300     /* ms: "should not happen" */
#define HX_VMS 4

/* A packet the test guest received (header in CPU order). */
struct pkt {
	struct pkt *next;
	struct virtio_vsock_hdr h;
	uint32_t len;
	uint8_t data[];
};

struct guest {
	struct drv *d;
	uint64_t cid;
	struct pkt *stash, **stash_tail;  /* received, not yet claimed */
	unsigned credit_updates;          /* CREDIT_UPDATEs absorbed */
};

/* One connection as the test guest sees it. */
struct gc {
	struct guest *g;
	uint16_t type;
	uint32_t lport;           /* the guest's port */
	uint64_t pcid;
	uint32_t pport;
	uint32_t buf_alloc;       /* ours (the guest's) */
	uint32_t fwd_cnt;
	uint32_t last_fwd_sent;
	uint32_t tx_cnt;
	uint32_t peer_buf;        /* the backend's, last seen */
	uint32_t peer_fwd;
	bool auto_credit;         /* send CREDIT_UPDATE as Linux would */
	unsigned updates_seen;    /* CREDIT_UPDATEs received on this connection */
};

struct hx_vm {
	struct vsxb_vm *vm;
	uint64_t cid;
	char vhost[108];
	char uds[108];
	struct guest g;
};

struct hx {
	char dir[64];
	struct vsx_test_loop *tl;
	const struct vsxu_loop *loop;
	struct vsx_test_loop *wl[HX_VMS]; /* hx_worker: loops of their own */
	bool no_room;                 /* hx_worker's loops lend no room (loop.h's
					 borrow): siblings across them go by records */
	struct vsxb_router *r;
	struct hx_vm v[HX_VMS];
	char *logbuf;
	size_t loglen;
	unsigned log_errs;
};

/* World */
void hx_init(struct hx *h);
/* Add VM @i (cid 3+i unless cfg says): @cfg may be NULL; its paths are
 * filled in. Returns vsxb_vm_new's result. */
int hx_vm(struct hx *h, unsigned i, const struct vsxb_vm_config *cfg);
void hx_open(struct hx *h, unsigned i, const struct drv_opts *o);
/* Loop @k of its own, a thread of its own (made on first use), for
 * vsxb_vm_config.loop: the VMs on it run there, as on vsxd's workers
 * (with a room another thread may borrow, as theirs, unless @no_room). */
const struct vsxu_loop *hx_worker(struct hx *h, unsigned k);
void hx_close_drv(struct hx *h, unsigned i);
/* vsxb_vm_free of VM @i (its driver stays open, talking to nobody). */
void hx_vm_free(struct hx *h, unsigned i);
void hx_fini(struct hx *h);
void hx_timeouts(struct hx *h, unsigned handshake_ms, unsigned connect_ms,
		 unsigned linger_ms);
bool hx_log_has(struct hx *h, const char *needle);
unsigned hx_log_count(struct hx *h, const char *needle);

/* Control, run on the loop thread */
unsigned hx_conns(struct hx *h, int vm, struct vsxb_conn_info *out, unsigned max);
bool hx_conn(struct hx *h, uint64_t id, struct vsxb_conn_info *out);
int hx_set_buffer(struct hx *h, uint64_t id, uint32_t bytes);
int hx_close_conn(struct hx *h, uint64_t id, bool reset);
void hx_stats(struct hx *h, unsigned vm, struct vsxb_engine_stats *st);
int hx_conn_mem(struct hx *h, uint64_t id, size_t *mem);
int hx_default_buffer(struct hx *h, unsigned vm, uint32_t bytes);
/* Block the loop thread until hx_unpause (so packets pile up). */
void hx_pause(struct hx *h);
void hx_unpause(struct hx *h);
/* Wait until the loop thread went through its queue once: the test's
 * loop, not hx_worker's (a VM on a worker of its own is synced with by
 * waiting for what the test wants to see, e.g. a connection's bytes). */
void hx_sync(struct hx *h);
/* Wait until whatever was ready for the loop thread when this was called
 * (a kick, a host socket, a post) has been handled: two trips through its
 * queue, since a post and a ready descriptor may run in either order
 * within one. The condition a test waits for instead of a pause. */
void hx_settle(struct hx *h);

/* Guest */
void gc_init(struct gc *c, struct guest *g, uint16_t type, uint32_t lport,
	     uint64_t pcid, uint32_t pport);
int g_send(struct gc *c, uint16_t op, uint32_t flags, const void *data, uint32_t len);
/* Raw header (CPU order) from the guest. */
int g_send_hdr(struct guest *g, const struct virtio_vsock_hdr *h, const void *data,
	       uint32_t len);
/* Next packet for @c (or any with @c NULL); credit fields absorbed. NULL on
 * timeout. Caller frees. */
struct pkt *g_next(struct guest *g, struct gc *c, int timeout_ms);
/* Next packet for @c that is not a CREDIT_UPDATE; asserts its op. */
struct pkt *g_expect(struct gc *c, uint16_t op, int timeout_ms);
/* No packet at all for @c (any with NULL) within @ms. */
bool g_quiet(struct guest *g, struct gc *c, int ms);
uint32_t g_credit(const struct gc *c);
/* Drop every packet received and not claimed (a guest that reset). */
void g_forget(struct guest *g);
/* Connect to peer (REQUEST, wait RESPONSE): 0, or the op that came. */
int g_connect(struct gc *c);
/* Send @len bytes within credit, in packets of @pkt bytes. */
void g_write(struct gc *c, const void *data, size_t len, size_t pkt);
/* Read exactly @len payload bytes (RW only), consuming as Linux does. */
void g_read(struct gc *c, void *buf, size_t len);
/* The guest consumed bytes: maybe CREDIT_UPDATE (Linux's rule). */
void g_consumed(struct gc *c, uint32_t n);

/* Host programs */
int h_listen(const char *path, int type);
int h_accept(int lfd, int timeout_ms);
/* Connect to a hybrid socket and send @line (may be anything). */
int h_dial(const char *uds, const char *line);
/* Read one line up to '\n' (at most @max-1 bytes); returns its length, 0 on
 * EOF before anything, -ETIMEDOUT. */
int h_read_line(int fd, char *buf, size_t max, int timeout_ms);
int h_read_full(int fd, void *buf, size_t len, int timeout_ms);
int h_write_full(int fd, const void *buf, size_t len, int timeout_ms);
/* Wait for EOF (0), -ECONNRESET, or -ETIMEDOUT (data is an error: -EPROTO). */
int h_eof(int fd, int timeout_ms);
bool h_readable(int fd, int timeout_ms);

/* A host program's bulk read or write in its own thread. */
struct hio {
	unsigned long t;
	int fd;
	void *buf;
	size_t len;
	bool write;
	int rc;
};
void hio_start(struct hio *io, int fd, void *buf, size_t len, bool write);
int hio_join(struct hio *io);

void hx_counter_base(struct hx *h, uint32_t base);

/* Data */
void fill_pattern(void *buf, size_t len, uint32_t seed);

#endif
