/*
 * The harness of the vhost-user server's tests (test_vhost_user.c,
 * test_vu_hostile.c): a tiny echo device behind vhost_user.c on a real
 * libevent loop in its own thread (vu_test.c), driven by the in-process
 * driver (tests/driver) over a real Unix socket.
 */
#ifndef VSX_VU_TEST_H
#define VSX_VU_TEST_H

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include <criterion/criterion.h>

#include "vhost-user/iov.h"
#include "vhost-user/vhost_user.h"
#include "backend/vsock_wire.h"
#include "driver/driver.h"
#include "driver/loop_thread.h"
#include "util.h"

#define TEST_CID 42
#define TMO 5000
#define HDR sizeof(struct virtio_vsock_hdr)

/* vhost-user requests and flags (docs/interop/vhost-user.rst) */
enum {
	GET_FEATURES = 1, SET_FEATURES = 2, SET_MEM_TABLE = 5, SET_LOG_FD = 7,
	SET_VRING_NUM = 8, SET_VRING_ADDR = 9, SET_VRING_BASE = 10, GET_VRING_BASE = 11,
	SET_VRING_KICK = 12, SET_VRING_CALL = 13, SET_VRING_ERR = 14, GET_PROTOCOL_FEATURES = 15,
	GET_QUEUE_NUM = 17, SET_VRING_ENABLE = 18, GET_CONFIG = 24, SET_CONFIG = 25,
};
#define V1 0x1u
#define NEED_REPLY 0x8u
#define NOFD (1ull << 8)

struct pkt {
	struct pkt *next;
	size_t len;                   /* header + payload */
	unsigned char data[];
};

struct tdev {
	struct vsx_test_loop *tl;
	const struct vsxu_loop *loop;
	struct vsxu_vu *vu;
	struct vsxu_vu_ops ops;
	char dir[64], path[128];
	int starts, stops, logs;
	int resumable_stops, last_how;
	int pop_err;
	bool echo, record;
	uint64_t tx_pkts;
	uint32_t next_seq;            /* wrap test: payload is a counter */
	bool seq_bad;
	struct pkt *log, **log_tail;  /* packets seen on TX (record) */
	struct pkt *out, **out_tail;  /* packets waiting for RX buffers */
};

/* Reading device state: on the loop thread. */
struct snap {
	int starts, stops, logs, pop_err, connected;
	int resumable_stops, last_how;
	uint64_t tx_pkts, features;
	bool seq_bad, broken[3], ready[3];
	uint16_t last_avail[3];
};

#define WAIT_FOR(cond)                                                  \
	do {                                                            \
		struct snap s_;                                         \
		int i_;                                                 \
		for (i_ = 0; i_ < TMO; i_++) {                          \
			s_ = snap();                                    \
			(void)s_;                                       \
			if (cond)                                       \
				break;                                  \
			sleep_ms(1);                                    \
		}                                                       \
		cr_assert(i_ < TMO, "timed out waiting for " #cond);    \
	} while (0)

struct inject {
	const void *data;
	size_t len;
};

struct pipefd {
	int r, w;
};

extern struct tdev *T;
extern struct snap S;

void free_list(struct pkt **head, struct pkt ***tail);
struct tdev *tdev_new(unsigned min_queues);
void tdev_free(struct tdev *t);
void setup(void);
void teardown(void);
struct snap snap(void);
void sleep_ms(unsigned ms);
void record_mode(void);
void do_inject(void *arg);
void do_take(void *arg);
struct virtio_vsock_hdr mkhdr(uint32_t port, uint16_t op, uint32_t len);
void fill(unsigned char *b, size_t n, unsigned seed);
struct drv *open_drv(const struct drv_opts *o);
void echo_once(struct drv *d, unsigned seed, size_t len);
void assert_serves(void);
int raw_connect(void);
bool sees_eof(int fd);
struct pipefd mkpipe(void);
void assert_closed_by_server(struct pipefd *p);

#endif /* VSX_VU_TEST_H */
