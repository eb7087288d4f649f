/*
 * The vhost-user server (transports/virtio/vhost-user/vhost_user.c) with a tiny echo
 * device behind it, on a real libevent loop in its own thread, driven by the
 * in-process driver (tests/driver) over a real Unix socket: negotiation,
 * config, data both ways, EVENT_IDX and indirect on and off, ring
 * wrap-around, reconnects, a refused second front-end, hostile guests and
 * hostile front-ends. After every hostile case the server must still serve.
 */
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

/* ---- The echo device, living on the loop thread ---- */

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

static struct tdev *T;

static int dev_get_config(void *dev, uint32_t off, void *buf, uint32_t len)
{
	uint64_t cid = htole64(TEST_CID);

	if (off > sizeof(cid) || len > sizeof(cid) - off)
		return -EINVAL;
	memcpy(buf, (char *)&cid + off, len);
	return 0;
}

static void q_append(struct pkt ***tail, struct pkt *p)
{
	p->next = NULL;
	**tail = p;
	*tail = &p->next;
}

static void free_list(struct pkt **head, struct pkt ***tail)
{
	while (*head) {
		struct pkt *p = *head;

		*head = p->next;
		free(p);
	}
	*tail = head;
}

static void drain_out(struct tdev *t)
{
	struct vsxu_vq *vq = vsxu_vu_queue(t->vu, VSOCK_VQ_RX);
	struct vsxu_vq_elem e;
	int r;

	while (t->out) {
		struct pkt *p = t->out;

		r = vsxu_vq_pop(vq, &e);
		if (r < 0)
			t->pop_err = r;
		if (r <= 0)
			break;
		cr_assert_geq(e.in_len, p->len);
		vsxu_iov_from_buf(e.iov + e.out_num, e.in_num, 0, p->data, p->len);
		vsxu_vq_push(vq, &e, (uint32_t)p->len);
		t->out = p->next;
		if (!t->out)
			t->out_tail = &t->out;
		free(p);
	}
	vsxu_vq_flush(vq);
}

static void handle_tx(struct tdev *t)
{
	struct vsxu_vq *vq = vsxu_vu_queue(t->vu, VSOCK_VQ_TX);
	struct vsxu_vq_elem e;
	int r;

	while ((r = vsxu_vq_pop(vq, &e)) > 0) {
		struct pkt *p = malloc(sizeof(*p) + e.out_len);

		cr_assert(p);
		p->len = vsxu_iov_to_buf(e.iov, e.out_num, 0, p->data, e.out_len);
		t->tx_pkts++;
		if (p->len == HDR + 4) {
			uint32_t seq;

			memcpy(&seq, p->data + HDR, 4);
			if (seq != t->next_seq)
				t->seq_bad = true;
			t->next_seq = seq + 1;
		}
		vsxu_vq_push(vq, &e, 0);
		if (t->echo) {
			struct virtio_vsock_hdr h;

			memcpy(&h, p->data, HDR);
			h.dst_cid = h.src_cid;
			h.src_cid = htole64(VSOCK_CID_HOST);
			memcpy(p->data, &h, HDR);
			q_append(&t->out_tail, p);
		} else if (t->record) {
			q_append(&t->log_tail, p);
		} else {
			free(p);
		}
	}
	if (r < 0)
		t->pop_err = r;
	vsxu_vq_flush(vq);
}

static void dev_kick(void *dev, unsigned q)
{
	struct tdev *t = dev;

	if (q == VSOCK_VQ_TX)
		handle_tx(t);
	drain_out(t);
}

static void dev_start(void *dev, enum vsxu_vu_start how)
{
	struct tdev *t = dev;

	t->starts++;
	t->last_how = how;
}

static void dev_stop(void *dev, bool resumable)
{
	struct tdev *t = dev;

	/* stops: sessions ended; resumable_stops: rings stopped (pauses) */
	if (resumable)
		t->resumable_stops++;
	else
		t->stops++;
	free_list(&t->out, &t->out_tail);
}

static void dev_log(void *dev, const char *msg)
{
	((struct tdev *)dev)->logs++;
	if (getenv("VSX_TEST_VERBOSE"))
		fprintf(stderr, "[vu] %s\n", msg);
}

static void do_new(void *arg)
{
	struct tdev *t = arg;

	cr_assert_eq(vsxu_vu_new(t->path, 0, VSX__GID_KEEP, t->loop, &t->ops, t, &t->vu), 0);
}

static void do_free(void *arg)
{
	struct tdev *t = arg;

	vsxu_vu_free(t->vu);
	t->vu = NULL;
	free_list(&t->out, &t->out_tail);
	free_list(&t->log, &t->log_tail);
}

static struct tdev *tdev_new(unsigned min_queues)
{
	struct tdev *t = calloc(1, sizeof(*t));

	cr_assert(t);
	strcpy(t->dir, "/tmp/vsx-vu-XXXXXX");
	cr_assert(mkdtemp(t->dir));
	snprintf(t->path, sizeof(t->path), "%s/vhost.sock", t->dir);
	t->ops = (struct vsxu_vu_ops){
		.features = (1ull << VIRTIO_VSOCK_F_STREAM) | (1ull << VIRTIO_VSOCK_F_SEQPACKET),
		.nqueues = VSOCK_NUM_QUEUES,
		.min_queues = min_queues,
		.get_config = dev_get_config,
		.kick = dev_kick,
		.start = dev_start,
		.stop = dev_stop,
		.log = dev_log,
	};
	t->echo = true;
	t->out_tail = &t->out;
	t->log_tail = &t->log;
	cr_assert_eq(vsx_test_loop_new(&t->tl), 0);
	t->loop = vsx_test_loop_get(t->tl);
	vsx_test_loop_call(t->tl, do_new, t);
	return t;
}

static void tdev_free(struct tdev *t)
{
	vsx_test_loop_call(t->tl, do_free, t);
	vsx_test_loop_free(t->tl);
	cr_assert_eq(access(t->path, F_OK), -1, "socket unlinked on free");
	rmdir(t->dir);
	free(t);
}

static void setup(void)
{
	T = tdev_new(0);
}

static void teardown(void)
{
	tdev_free(T);
}

/* Reading device state: on the loop thread. */
struct snap {
	int starts, stops, logs, pop_err, connected;
	int resumable_stops, last_how;
	uint64_t tx_pkts, features;
	bool seq_bad, broken[3], ready[3];
	uint16_t last_avail[3];
};

static struct snap S;

static void do_snap(void *arg)
{
	struct tdev *t = arg;

	S.starts = t->starts;
	S.stops = t->stops;
	S.resumable_stops = t->resumable_stops;
	S.last_how = t->last_how;
	S.logs = t->logs;
	S.pop_err = t->pop_err;
	S.tx_pkts = t->tx_pkts;
	S.seq_bad = t->seq_bad;
	S.connected = vsxu_vu_connected(t->vu);
	S.features = vsxu_vu_features(t->vu);
	for (unsigned i = 0; i < 3; i++) {
		struct vsxu_vq *vq = vsxu_vu_queue(t->vu, i);

		S.broken[i] = vq->broken;
		S.ready[i] = vsxu_vq_ready(vq);
		S.last_avail[i] = vq->last_avail;
	}
}

static struct snap snap(void)
{
	vsx_test_loop_call(T->tl, do_snap, T);
	return S;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

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

static void set_echo(void *arg)
{
	T->echo = *(bool *)arg;
	T->record = !T->echo;
}

static void record_mode(void)
{
	bool no = false;

	vsx_test_loop_call(T->tl, set_echo, &no);
}

/* Queue a device-made packet for the guest and push what fits. */
struct inject {
	const void *data;
	size_t len;
};

static void do_inject(void *arg)
{
	struct inject *in = arg;
	struct pkt *p = malloc(sizeof(*p) + in->len);

	cr_assert(p);
	p->len = in->len;
	memcpy(p->data, in->data, in->len);
	q_append(&T->out_tail, p);
	drain_out(T);
}

static struct pkt *take_log(void)
{
	struct pkt *p = T->log;

	if (p) {
		T->log = p->next;
		if (!T->log)
			T->log_tail = &T->log;
	}
	return p;
}

static void do_take(void *arg)
{
	*(struct pkt **)arg = take_log();
}

static struct virtio_vsock_hdr mkhdr(uint32_t port, uint16_t op, uint32_t len)
{
	return (struct virtio_vsock_hdr){
		.src_cid = htole64(TEST_CID),
		.dst_cid = htole64(VSOCK_CID_HOST),
		.src_port = htole32(port),
		.dst_port = htole32(1234),
		.len = htole32(len),
		.type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
		.op = htole16(op),
		.buf_alloc = htole32(262144),
		.fwd_cnt = htole32(port * 7),
	};
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 8));
}

static struct drv *open_drv(const struct drv_opts *o)
{
	struct drv *d = NULL;
	int r = drv_open(T->path, o, &d);

	cr_assert_eq(r, 0, "drv_open: %s", strerror(-r));
	return d;
}

/* One echo round trip of @len payload bytes. */
static void echo_once(struct drv *d, unsigned seed, size_t len)
{
	static unsigned char out[4096], in[4096];
	struct virtio_vsock_hdr h = mkhdr(seed, VIRTIO_VSOCK_OP_RW, (uint32_t)len), r;
	int n;

	fill(out, len, seed);
	cr_assert_eq(drv_send(d, &h, out, len, TMO), 0);
	n = drv_recv(d, &r, in, sizeof(in), TMO);
	cr_assert_eq(n, (int)len, "recv %d", n);
	cr_assert_eq(le64toh(r.src_cid), VSOCK_CID_HOST);
	cr_assert_eq(le64toh(r.dst_cid), TEST_CID);
	cr_assert_eq(r.src_port, h.src_port);
	cr_assert_eq(r.fwd_cnt, h.fwd_cnt);
	cr_assert_eq(memcmp(in, out, len), 0);
}

/* The server still serves: a fresh front-end gets through. */
static void assert_serves(void)
{
	struct drv *d = open_drv(NULL);

	echo_once(d, 77, 100);
	drv_close(d);
}

static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	strcpy(sa.sun_path, T->path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* EOF on @fd within the timeout (the server closed it). */
static bool sees_eof(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, TMO) != 1)
		return false;
	return read(fd, &c, 1) == 0;
}

/* A pipe whose write end we hand over; EOF on the read end proves the
 * server closed its copy (no fd leaked). */
struct pipefd {
	int r, w;
};

static struct pipefd mkpipe(void)
{
	int p[2];

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	return (struct pipefd){ p[0], p[1] };
}

static void assert_closed_by_server(struct pipefd *p)
{
	close(p->w);
	cr_assert(sees_eof(p->r), "the server kept a passed fd open");
	close(p->r);
}

/* ---- Negotiation and config ---- */

Test(vu, negotiation_and_config, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint64_t f = drv_features(d), v = 0;
	struct snap s;

	cr_assert(f & (1ull << VIRTIO_F_VERSION_1));
	cr_assert(f & (1ull << VIRTIO_RING_F_EVENT_IDX));
	cr_assert(f & (1ull << VIRTIO_RING_F_INDIRECT_DESC));
	cr_assert(f & (1ull << 30), "VHOST_USER_F_PROTOCOL_FEATURES");
	cr_assert(f & (1ull << VIRTIO_VSOCK_F_SEQPACKET));
	cr_assert_eq(drv_cid(d), TEST_CID);
	WAIT_FOR(s_.starts == 1);
	s = snap();
	cr_assert_eq(s.features, f, "both sides agree on the features");
	cr_assert(s.connected);
	cr_assert(s.ready[0] && s.ready[1] && s.ready[2]);

	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert_eq(v, (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_EVENT_IDX) |
			     (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
			     (1ull << VIRTIO_F_NOTIFY_ON_EMPTY) | (1ull << 30) |
			     (1ull << VIRTIO_VSOCK_F_STREAM) | (1ull << VIRTIO_VSOCK_F_SEQPACKET));
	cr_assert_eq(drv_vhost_msg(d, GET_PROTOCOL_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert_eq(v, (1ull << 3) | (1ull << 9) | (1ull << 13),
		     "REPLY_ACK, CONFIG, RESET_DEVICE");
	cr_assert_eq(drv_vhost_msg(d, GET_QUEUE_NUM, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert_eq(v, 3);
	drv_close(d);
	WAIT_FOR(s_.stops == 1 && !s_.connected);
}

Test(vu, get_config_bounds, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	struct {
		uint32_t off, size, flags;
		uint8_t b[256];
	} c = { .off = 4, .size = 4 };

	cr_assert_eq(drv_vhost_msg(d, GET_CONFIG, V1, &c, 16, NULL, 0, &c, sizeof(c)), 16);
	cr_assert_eq(c.b[0], 0, "upper half of the CID");
	c = (typeof(c)){ .off = 0, .size = 8 };
	cr_assert_eq(drv_vhost_msg(d, GET_CONFIG, V1, &c, 20, NULL, 0, &c, sizeof(c)), 20);
	cr_assert_eq(c.b[0], TEST_CID);
	c = (typeof(c)){ .off = 4, .size = 8 };
	cr_assert_eq(drv_vhost_msg(d, GET_CONFIG, V1, &c, 20, NULL, 0, &c, sizeof(c)), 0,
		     "past the device's config: empty reply");
	c = (typeof(c)){ .off = 0xfffffff0u, .size = 32 };
	cr_assert_eq(drv_vhost_msg(d, GET_CONFIG, V1, &c, 44, NULL, 0, &c, sizeof(c)), 0);
	c = (typeof(c)){ .off = 0, .size = 8 };
	cr_assert_eq(drv_vhost_msg(d, GET_CONFIG, V1, &c, 16, NULL, 0, &c, sizeof(c)), 0,
		     "size disagrees with the message");
	c = (typeof(c)){ .off = 0, .size = 8 };
	{
		uint64_t v = 0;

		cr_assert_eq(drv_vhost_msg(d, SET_CONFIG, V1 | NEED_REPLY, &c, 20, NULL, 0,
					   &v, 8), 8);
		cr_assert_neq(v, 0, "SET_CONFIG is refused");
	}
	echo_once(d, 1, 10);
	drv_close(d);
}

/* ---- Data ---- */

Test(vu, tx_bytes_exact, .init = setup, .fini = teardown)
{
	static const size_t sizes[] = { 0, 1, 44, 100, 4096, 65536 };
	static unsigned char buf[65536];
	struct drv *d;

	record_mode();
	d = open_drv(NULL);
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct virtio_vsock_hdr h = mkhdr(i, VIRTIO_VSOCK_OP_RW, (uint32_t)sizes[i]);

		fill(buf, sizes[i], i);
		cr_assert_eq(drv_send(d, &h, buf, sizes[i], TMO), 0);
	}
	WAIT_FOR(s_.tx_pkts == 6);
	for (unsigned i = 0; i < 6; i++) {
		struct virtio_vsock_hdr h = mkhdr(i, VIRTIO_VSOCK_OP_RW, (uint32_t)sizes[i]);
		struct pkt *p;

		vsx_test_loop_call(T->tl, do_take, &p);
		cr_assert(p);
		cr_assert_eq(p->len, HDR + sizes[i]);
		cr_assert_eq(memcmp(p->data, &h, HDR), 0, "header %u", i);
		fill(buf, sizes[i], i);
		cr_assert_eq(memcmp(p->data + HDR, buf, sizes[i]), 0, "payload %u", i);
		free(p);
	}
	drv_close(d);
}

Test(vu, rx_bytes_exact, .init = setup, .fini = teardown)
{
	static const size_t sizes[] = { 0, 1, 44, 1000, 4096 };
	unsigned char pkt[HDR + 4096], in[4096];
	struct drv *d = open_drv(NULL);

	WAIT_FOR(s_.starts == 1);
	for (unsigned i = 0; i < 5; i++) {
		struct virtio_vsock_hdr h = mkhdr(100 + i, VIRTIO_VSOCK_OP_RW, (uint32_t)sizes[i]), r;
		struct inject in_ = { pkt, HDR + sizes[i] };
		int n;

		memcpy(pkt, &h, HDR);
		fill(pkt + HDR, sizes[i], 100 + i);
		vsx_test_loop_call(T->tl, do_inject, &in_);
		n = drv_recv(d, &r, in, sizeof(in), TMO);
		cr_assert_eq(n, (int)sizes[i]);
		cr_assert_eq(memcmp(&r, &h, HDR), 0);
		cr_assert_eq(memcmp(in, pkt + HDR, sizes[i]), 0);
	}
	drv_close(d);
}

static void do_event(void *arg)
{
	struct vsxu_vq *vq = vsxu_vu_queue(T->vu, VSOCK_VQ_EVENT);
	struct vsxu_vq_elem e;
	uint32_t id = htole32(VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);

	cr_assert_eq(vsxu_vq_pop(vq, &e), 1);
	cr_assert_eq(e.in_len, 4);
	vsxu_iov_from_buf(e.iov + e.out_num, e.in_num, 0, &id, sizeof(id));
	vsxu_vq_push(vq, &e, sizeof(id));
	vsxu_vq_flush(vq);
}

Test(vu, event_queue, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint32_t id = 99;

	WAIT_FOR(s_.starts == 1);
	vsx_test_loop_call(T->tl, do_event, NULL);
	cr_assert_eq(drv_recv_event(d, &id, TMO), 0);
	cr_assert_eq(id, VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	drv_close(d);
}

static void echo_many(const struct drv_opts *o, unsigned n)
{
	struct drv *d = open_drv(o);
	unsigned max = o && o->rx_buf_size ? o->rx_buf_size : 4096;

	for (unsigned i = 0; i < n; i++)
		echo_once(d, i, (i * 37) % (max + 1));
	drv_close(d);
}

Test(vu, echo_event_idx_indirect, .init = setup, .fini = teardown)
{
	echo_many(NULL, 500);
}

Test(vu, echo_no_event_idx, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_event_idx = true };
	struct drv *d = open_drv(&o);

	cr_assert_eq(drv_features(d) & (1ull << VIRTIO_RING_F_EVENT_IDX), 0);
	drv_close(d);
	echo_many(&o, 500);
}

Test(vu, echo_no_indirect, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_indirect = true };
	struct drv *d = open_drv(&o);

	cr_assert_eq(drv_features(d) & (1ull << VIRTIO_RING_F_INDIRECT_DESC), 0);
	drv_close(d);
	echo_many(&o, 500);
}

Test(vu, echo_neither, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_indirect = true, .no_event_idx = true, .no_seqpacket = true };
	struct drv *d = open_drv(&o);

	cr_assert_eq(drv_features(d) & (1ull << VIRTIO_VSOCK_F_SEQPACKET), 0);
	drv_close(d);
	echo_many(&o, 300);
}

Test(vu, echo_rx_one_descriptor, .init = setup, .fini = teardown)
{
	/* the Debian 6.1.0-57 guest's RX buffers: one 3776-byte descriptor */
	struct drv_opts o = { .rx_one_desc = true, .rx_buf_size = 3732 };

	echo_many(&o, 300);
	o.no_indirect = true;
	o.no_event_idx = true;
	echo_many(&o, 300);
}

Test(vu, qemu_like_two_queues)
{
	/* QEMU's vhost-user-vsock sets up rx and tx only */
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d;
	uint32_t id;

	T = tdev_new(2);
	d = open_drv(&o);
	WAIT_FOR(s_.starts == 1);
	cr_assert(!snap().ready[VSOCK_VQ_EVENT]);
	cr_assert_eq(drv_recv_event(d, &id, 10), -ENOTSUP);
	for (unsigned i = 0; i < 200; i++)
		echo_once(d, i, i * 13 % 3000);
	drv_close(d);
	WAIT_FOR(s_.stops == 1);
	tdev_free(T);
}

Test(vu, min_queues_holds_start)
{
	/* a device that needs all three queues never starts with two */
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d;

	uint64_t v;

	T = tdev_new(3);
	d = open_drv(&o);
	/* a barrier, not a pause: the back-end answers messages in order and
	 * starts a device while it handles the one that completes it, so once
	 * this reply is here every set-up message was handled */
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert_eq(snap().starts, 0);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	cr_assert_eq(snap().stops, 0, "stop only follows a start");
	tdev_free(T);
}

static void wrap(struct drv_opts *o)
{
	/* 66000 packets through 8-entry rings: every index wraps */
	struct drv *d;
	unsigned n = 66000;
	struct vu_state_ {
		uint32_t index, num;
	} st = { VSOCK_VQ_TX, 0 };

	o->queue_size = 8;
	d = open_drv(o);
	for (uint32_t i = 0; i < n; i++) {
		struct virtio_vsock_hdr h = mkhdr(i, VIRTIO_VSOCK_OP_RW, 4), r;
		uint32_t v;

		cr_assert_eq(drv_send(d, &h, &i, 4, TMO), 0);
		cr_assert_eq(drv_recv(d, &r, &v, 4, TMO), 4);
		cr_assert_eq(v, i);
	}
	WAIT_FOR(s_.tx_pkts == n);
	cr_assert(!snap().seq_bad);
	/* QEMU's stop: GET_VRING_BASE tells where the rings are */
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, &st, 8, NULL, 0, &st, 8), 8);
	cr_assert_eq(st.num, n & 0xffff);
	st = (struct vu_state_){ VSOCK_VQ_RX, 0 };
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, &st, 8, NULL, 0, &st, 8), 8);
	cr_assert_eq(st.num, n & 0xffff);
	drv_close(d);
	WAIT_FOR(s_.stops == 1 && !s_.connected);
}

Test(vu, wrap_around_event_idx, .init = setup, .fini = teardown, .timeout = 300)
{
	struct drv_opts o = { 0 };

	wrap(&o);
}

Test(vu, wrap_around_no_event_idx, .init = setup, .fini = teardown, .timeout = 300)
{
	struct drv_opts o = { .no_event_idx = true, .no_indirect = true };

	wrap(&o);
}

Test(vu, buffer_across_regions, .init = setup, .fini = teardown)
{
	/* a header straddling the boundary of the two memory regions */
	struct drv *d;
	size_t slen;
	uint64_t sc;
	struct virtio_vsock_hdr h = mkhdr(5, VIRTIO_VSOCK_OP_REQUEST, 0);
	uint64_t addr[1];
	uint32_t len[1] = { HDR };
	uint16_t flags[1] = { 0 };
	struct pkt *p;

	record_mode();
	d = open_drv(NULL);
	sc = drv_scratch(d, &slen);
	addr[0] = sc + slen / 2 - 20;
	memcpy(drv_mem(d, addr[0], HDR), &h, HDR);
	cr_assert_eq(drv_send_raw(d, addr, len, flags, NULL, 1), 0);
	WAIT_FOR(s_.tx_pkts == 1);
	vsx_test_loop_call(T->tl, do_take, &p);
	cr_assert(p);
	cr_assert_eq(p->len, HDR);
	cr_assert_eq(memcmp(p->data, &h, HDR), 0);
	free(p);
	cr_assert(!snap().broken[VSOCK_VQ_TX]);
	drv_close(d);
}

/* ---- Front-end lifecycle ---- */

Test(vu, disconnect_and_reconnect, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);

	echo_once(d, 1, 10);
	drv_close(d);
	WAIT_FOR(s_.stops == 1 && !s_.connected);
	cr_assert_eq(snap().starts, 1);

	d = open_drv(NULL);
	WAIT_FOR(s_.starts == 2);
	echo_once(d, 2, 20);
	/* an abrupt end this time: a broken header drops the front-end */
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, 0x2, NULL, 0, NULL, 0, NULL, 0), 0);
	WAIT_FOR(!s_.connected);
	cr_assert_eq(snap().stops, 2, "stop exactly once per session");
	drv_close(d);

	d = open_drv(NULL);
	WAIT_FOR(s_.starts == 3);
	echo_once(d, 3, 30);
	drv_close(d);
	WAIT_FOR(s_.stops == 3);
}

Test(vu, ring_stop_in_session, .init = setup, .fini = teardown)
{
	/* VM stop or guest reset: rings disabled, then GET_VRING_BASE */
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct {
		uint32_t index, num;
	} st;

	echo_once(d, 1, 10);
	for (uint32_t q = 0; q < 2; q++) {
		st.index = q;
		st.num = 0;
		cr_assert_eq(drv_vhost_msg(d, SET_VRING_ENABLE, V1, &st, 8, NULL, 0, NULL, 0), 0);
	}
	st.index = 0;
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, &st, 8, NULL, 0, &st, 8), 8);
	cr_assert_eq(st.num, 1, "one rx buffer used");
	st.index = 1;
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, &st, 8, NULL, 0, &st, 8), 8);
	cr_assert_eq(st.num, 1, "one tx chain used");
	WAIT_FOR(s_.resumable_stops == 1);
	cr_assert_eq(snap().stops, 0, "GET_VRING_BASE: a resumable stop");
	cr_assert(!snap().ready[0] && !snap().ready[1]);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	/* the paused session ends for good with the front-end */
	cr_assert_eq(snap().stops, 1);
	cr_assert_eq(snap().resumable_stops, 1);
}

/* ---- Restarts: a device adopted by a new server (vhost_user_state.c) ---- */

enum crash_bad { CRASH_OK, CRASH_REGION_PIPE, CRASH_REGION_SHORT, CRASH_KICK_FILE,
		 CRASH_NO_CALL_DUP, CRASH_FEATURES, CRASH_PAUSED_KICK };

struct crash {
	enum crash_bad bad;
	int adopt;                    /* vsxu_vu_adopt's result */
	int get;                      /* vsxu_vu_get_state's result */
	struct vsxu_vu_state st;
};

static int dup_cloexec(int fd)
{
	return fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

/*
 * What a crash under a file descriptor store is, in one process: the
 * device's state and a copy of each descriptor (the store's) are taken,
 * the server goes away without a word to the front-end (its own copies
 * close, the store's keep everything alive), and a new server on the same
 * path adopts the copies.
 */
static void do_crash(void *arg)
{
	struct crash *c = arg;
	struct vsxu_vu_state st;
	int fd;

	c->get = vsxu_vu_get_state(T->vu, &st);
	if (c->get)
		return;
	st.conn_fd = dup_cloexec(st.conn_fd);
	for (unsigned i = 0; i < st.nregions; i++)
		st.region[i].fd = dup_cloexec(st.region[i].fd);
	for (unsigned i = 0; i < st.nqueues; i++) {
		st.queue[i].kick_fd = dup_cloexec(st.queue[i].kick_fd);
		st.queue[i].call_fd = dup_cloexec(st.queue[i].call_fd);
	}
	vsxu_vu_free(T->vu);
	free_list(&T->out, &T->out_tail);
	cr_assert_eq(vsxu_vu_new(T->path, 0, VSX__GID_KEEP, T->loop, &T->ops, T, &T->vu), 0);
	switch (c->bad) {
	case CRASH_OK:
		break;
	case CRASH_REGION_PIPE: {
		struct pipefd p = mkpipe();

		close(st.region[0].fd);
		close(p.w);
		st.region[0].fd = p.r;
		break;
	}
	case CRASH_REGION_SHORT:
		close(st.region[st.nregions - 1].fd);
		fd = memfd_create("short", MFD_CLOEXEC);
		cr_assert(fd >= 0);
		cr_assert_eq(ftruncate(fd, 4096), 0);
		st.region[st.nregions - 1].fd = fd;
		break;
	case CRASH_KICK_FILE:
		close(st.queue[0].kick_fd);
		st.queue[0].kick_fd = memfd_create("kick", MFD_CLOEXEC);
		break;
	case CRASH_NO_CALL_DUP:
		close(st.queue[1].kick_fd);
		st.queue[1].kick_fd = st.queue[0].kick_fd;
		break;
	case CRASH_FEATURES:
		st.features |= 1ull << 60;
		break;
	case CRASH_PAUSED_KICK:
		/* a paused device with a started ring: no such thing */
		st.queue[0].kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		break;
	}
	c->st = st;
	c->adopt = vsxu_vu_adopt(T->vu, &st);
}

Test(vu_restart, adopted_device_goes_on, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct crash c = { .bad = CRASH_OK };
	struct snap before;

	for (unsigned i = 0; i < 5; i++)
		echo_once(d, i, 100 + i);
	before = snap();
	vsx_test_loop_call(T->tl, do_crash, &c);
	cr_assert_eq(c.get, 0);
	cr_assert_eq(c.st.nqueues, 2, "rx and tx, as QEMU hands them over");
	cr_assert_eq(c.st.nregions, 2);
	cr_assert_eq(c.adopt, 0);
	WAIT_FOR(s_.starts == before.starts + 1);
	cr_assert_eq(snap().last_how, VSXU_VU_START_NEW);
	cr_assert(snap().connected);
	cr_assert_eq(snap().features, before.features);
	cr_assert_eq(snap().last_avail[VSOCK_VQ_TX], before.last_avail[VSOCK_VQ_TX],
		     "the ring goes on from its used index");
	/* the same front-end, nothing resent: data both ways */
	for (unsigned i = 0; i < 5; i++)
		echo_once(d, 10 + i, 2000 + i);
	cr_assert_eq(snap().tx_pkts, before.tx_pkts + 5, "no chain taken twice");
	/* and it ends as any session does */
	drv_close(d);
	WAIT_FOR(!s_.connected);
	assert_serves();
}

/* A chain the old server took and never gave back is taken again. */
static void do_pop_hold(void *arg)
{
	struct vsxu_vq_elem *e = arg;

	T->echo = false;
	T->record = false;
	cr_assert_eq(vsxu_vq_pop(vsxu_vu_queue(T->vu, VSOCK_VQ_RX), e), 1);
	T->echo = true;
}

Test(vu_restart, chains_held_are_taken_again, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct crash c = { .bad = CRASH_OK };
	struct vsxu_vq_elem *e = calloc(1, sizeof(*e));
	struct snap before;

	echo_once(d, 1, 10);
	before = snap();
	/* an RX buffer popped, never pushed: the guest still owns it */
	vsx_test_loop_call(T->tl, do_pop_hold, e);
	cr_assert_eq(snap().last_avail[VSOCK_VQ_RX],
		     (uint16_t)(before.last_avail[VSOCK_VQ_RX] + 1));
	vsx_test_loop_call(T->tl, do_crash, &c);
	cr_assert_eq(c.adopt, 0);
	cr_assert_eq(snap().last_avail[VSOCK_VQ_RX], before.last_avail[VSOCK_VQ_RX],
		     "the held buffer is the next one taken");
	for (unsigned i = 0; i < 300; i++)
		echo_once(d, 20 + i, 64);
	cr_assert_eq(snap().pop_err, 0);
	cr_assert(!snap().broken[VSOCK_VQ_RX] && !snap().broken[VSOCK_VQ_TX]);
	free(e);
	drv_close(d);
}

static void bad_state(enum crash_bad bad)
{
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct crash c = { .bad = bad };
	struct snap before;
	uint64_t v;

	echo_once(d, 1, 10);
	if (bad == CRASH_PAUSED_KICK) {
		cr_assert_eq(drv_pause(d), 0);
		WAIT_FOR(s_.resumable_stops == 1);
	}
	before = snap();
	vsx_test_loop_call(T->tl, do_crash, &c);
	cr_assert_eq(c.adopt, -EINVAL, "adopt: %d", c.adopt);
	cr_assert_gt(snap().logs, before.logs, "a log line says why");
	cr_assert(!snap().connected);
	cr_assert_eq(snap().starts, before.starts, "nothing served from it");
	/* the front-end sees its back-end go (the descriptors were closed),
	 * and the server serves a new one */
	cr_assert_lt(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, sizeof(v)), 0,
		     "the front-end's connection is closed");
	drv_close(d);
	assert_serves();
}

Test(vu_restart, region_not_a_file, .init = setup, .fini = teardown)
{
	bad_state(CRASH_REGION_PIPE);
}

Test(vu_restart, region_file_too_small, .init = setup, .fini = teardown)
{
	bad_state(CRASH_REGION_SHORT);
}

Test(vu_restart, kick_not_an_eventfd, .init = setup, .fini = teardown)
{
	bad_state(CRASH_KICK_FILE);
}

Test(vu_restart, one_descriptor_for_two, .init = setup, .fini = teardown)
{
	bad_state(CRASH_NO_CALL_DUP);
}

Test(vu_restart, features_not_offered, .init = setup, .fini = teardown)
{
	bad_state(CRASH_FEATURES);
}

/* ---- Restarts of a paused device (QEMU stop, then cont) ---- */

Test(vu_restart, paused_device_adopted_paused, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct crash c = { .bad = CRASH_OK };
	struct snap before;

	for (unsigned i = 0; i < 3; i++)
		echo_once(d, i, 100 + i);
	cr_assert_eq(drv_pause(d), 0);
	WAIT_FOR(s_.resumable_stops == 1);
	before = snap();
	vsx_test_loop_call(T->tl, do_crash, &c);
	cr_assert_eq(c.get, 0, "get: %d", c.get);
	cr_assert(c.st.paused);
	cr_assert_eq(c.st.nqueues, 2, "the two rings QEMU stopped");
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_eq(c.st.queue[i].kick_fd, -1, "a stopped ring has no kick");
		cr_assert_eq(c.st.queue[i].base, before.last_avail[c.st.queue[i].index]);
	}
	cr_assert_eq(c.adopt, 0);
	cr_assert(snap().connected);
	cr_assert_eq(snap().starts, before.starts, "adopted paused: no start");
	cr_assert(!snap().ready[0] && !snap().ready[1]);
	/* cont: the rings set up again where they stopped */
	cr_assert_eq(drv_resume(d, 0), 0);
	WAIT_FOR(s_.starts == before.starts + 1);
	cr_assert_eq(snap().last_how, VSXU_VU_START_RESUMED, "the same session goes on");
	for (unsigned i = 0; i < 3; i++)
		echo_once(d, 10 + i, 2000 + i);
	cr_assert_eq(snap().tx_pkts, before.tx_pkts + 3, "no chain taken twice");
	drv_close(d);
	WAIT_FOR(!s_.connected);
	assert_serves();
}

Test(vu_restart, paused_device_adopted_then_reset, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct crash c = { .bad = CRASH_OK };
	int starts;

	echo_once(d, 1, 10);
	cr_assert_eq(drv_pause(d), 0);
	WAIT_FOR(s_.resumable_stops == 1);
	starts = snap().starts;
	vsx_test_loop_call(T->tl, do_crash, &c);
	cr_assert_eq(c.adopt, 0);
	/* the guest reset the device instead: rings back at 0 */
	cr_assert_eq(drv_reset(d), 0);
	WAIT_FOR(s_.starts == starts + 1);
	cr_assert_eq(snap().last_how, VSXU_VU_START_NEW, "a reset, as without a restart");
	echo_once(d, 2, 20);
	drv_close(d);
}

Test(vu_restart, paused_with_a_kick_refused, .init = setup, .fini = teardown)
{
	bad_state(CRASH_PAUSED_KICK);
}

static void do_half_stopped(void *arg)
{
	struct crash *c = arg;

	c->get = vsxu_vu_get_state(T->vu, &c->st);
}

/* Between running and paused (one ring stopped), or set up again after a
 * pause: no state a new process could go on from. */
Test(vu_restart, half_stopped_is_eagain, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .no_event_queue = true };
	struct drv *d = open_drv(&o);
	struct crash c;
	struct {
		uint32_t index, num;
	} st = { 0, 0 };

	echo_once(d, 1, 10);
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, &st, 8, NULL, 0, &st, 8), 8);
	WAIT_FOR(s_.resumable_stops == 1);
	vsx_test_loop_call(T->tl, do_half_stopped, &c);
	cr_assert_eq(c.get, -EAGAIN, "one ring stopped: %d", c.get);
	st.index = 1;
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, &st, 8, NULL, 0, &st, 8), 8);
	vsx_test_loop_call(T->tl, do_half_stopped, &c);
	cr_assert_eq(c.get, 0, "both stopped: %d", c.get);
	cr_assert(c.st.paused);
	/* a ring set up again at another base (a guest reset under way) */
	st.index = 0;
	st.num = 0;
	cr_assert_eq(drv_vhost_msg(d, SET_VRING_BASE, V1, &st, 8, NULL, 0, NULL, 0), 0);
	vsx_test_loop_call(T->tl, do_half_stopped, &c);
	cr_assert_eq(c.get, -EAGAIN, "a restart under way: %d", c.get);
	drv_close(d);
}

static void do_get(void *arg)
{
	struct crash *c = arg;

	c->get = vsxu_vu_get_state(T->vu, &c->st);
	c->adopt = vsxu_vu_adopt(T->vu, &(struct vsxu_vu_state){
		.conn_fd = -1, .nregions = 1, .nqueues = 1,
		.region[0].fd = -1, .queue[0] = { .kick_fd = -1, .call_fd = -1 } });
}

Test(vu_restart, no_state_without_a_device, .init = setup, .fini = teardown)
{
	struct crash c;

	vsx_test_loop_call(T->tl, do_get, &c);
	cr_assert_eq(c.get, -ENOTCONN);
	cr_assert_eq(c.adopt, -EINVAL, "missing descriptors are refused");
	assert_serves();
}

Test(vu, second_frontend_refused, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	int fd;

	echo_once(d, 1, 10);
	fd = raw_connect();
	cr_assert(sees_eof(fd), "the second front-end is closed");
	close(fd);
	echo_once(d, 2, 2000);
	cr_assert(snap().connected);
	cr_assert_eq(snap().stops, 0, "the first front-end is untouched");
	drv_close(d);
}

static void do_listener(void *arg)
{
	struct tdev t = { 0 };
	struct vsxu_vu *vu2;
	int fd;

	/* a live socket is not replaced */
	cr_assert_eq(vsxu_vu_new(T->path, 0, VSX__GID_KEEP, T->loop, &T->ops, &t, &vu2), -EADDRINUSE);
	/* nor is a regular file */
	snprintf(t.path, sizeof(t.path), "%s/file", T->dir);
	fd = open(t.path, O_CREAT | O_WRONLY, 0600);
	cr_assert(fd >= 0);
	close(fd);
	cr_assert_eq(vsxu_vu_new(t.path, 0, VSX__GID_KEEP, T->loop, &T->ops, &t, &vu2), -ENOTSOCK);
	cr_assert_eq(access(t.path, F_OK), 0, "the regular file was removed");
	unlink(t.path);
	/* a stale socket is */
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/stale", T->dir);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		close(fd);
		cr_assert_eq(vsxu_vu_new(sa.sun_path, 0, VSX__GID_KEEP, T->loop, &T->ops, &t, &vu2), 0);
		vsxu_vu_free(vu2);
		cr_assert_eq(access(sa.sun_path, F_OK), -1);
	}
	cr_assert_eq(vsxu_vu_new("", 0, VSX__GID_KEEP, T->loop, &T->ops, &t, &vu2), -EINVAL);
}

Test(vu, listener_path)
{
	struct stat st;

	T = tdev_new(0);
	cr_assert_eq(stat(T->path, &st), 0);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600);
	vsx_test_loop_call(T->tl, do_listener, NULL);
	tdev_free(T);
}

/* ---- Hostile guests ---- */

static void hostile_chain(const uint64_t *addr, const uint32_t *len, const uint16_t *flags,
			  const uint16_t *next, unsigned n, int err)
{
	struct drv *d = open_drv(NULL);
	uint64_t v = 0;

	WAIT_FOR(s_.starts == 1);
	cr_assert_eq(drv_send_raw(d, addr, len, flags, next, n), 0);
	WAIT_FOR(s_.pop_err != 0);
	cr_assert_eq(snap().pop_err, err, "pop error %d, expected %d", snap().pop_err, err);
	cr_assert(snap().broken[VSOCK_VQ_TX]);
	cr_assert(!snap().broken[VSOCK_VQ_RX], "only that queue");
	cr_assert_eq(drv_ring_error(d, VSOCK_VQ_TX), 1, "the err fd was signalled");
	cr_assert_eq(drv_ring_error(d, VSOCK_VQ_RX), 0);
	/* the front-end connection still works */
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert_neq(v, 0);
	drv_close(d);
	WAIT_FOR(s_.stops == 1 && !s_.connected);
	assert_serves();
}

Test(vu_guest, descriptor_outside_memory, .init = setup, .fini = teardown)
{
	uint64_t a[] = { 0x1000 };
	uint32_t l[] = { HDR };
	uint16_t f[] = { 0 };

	hostile_chain(a, l, f, NULL, 1, -EFAULT);
}

Test(vu_guest, descriptor_length_overflows, .init = setup, .fini = teardown)
{
	uint64_t a[] = { DRV_GPA_BASE + 4096 };
	uint32_t l[] = { 0xffffffffu };
	uint16_t f[] = { 0 };

	hostile_chain(a, l, f, NULL, 1, -EFAULT);
}

Test(vu_guest, descriptor_address_wraps, .init = setup, .fini = teardown)
{
	uint64_t a[] = { DRV_GPA_BASE, UINT64_MAX - 10 };
	uint32_t l[] = { HDR, 100 };
	uint16_t f[] = { VRING_DESC_F_NEXT, 0 };
	uint16_t nx[] = { 1, 0 };

	hostile_chain(a, l, f, nx, 2, -EFAULT);
}

Test(vu_guest, chain_loop, .init = setup, .fini = teardown)
{
	uint64_t a[] = { DRV_GPA_BASE, DRV_GPA_BASE, DRV_GPA_BASE };
	uint32_t l[] = { 16, 16, 16 };
	uint16_t f[] = { VRING_DESC_F_NEXT, VRING_DESC_F_NEXT, VRING_DESC_F_NEXT };
	uint16_t nx[] = { 1, 2, 1 };

	hostile_chain(a, l, f, nx, 3, -EINVAL);
}

Test(vu_guest, chain_too_long, .init = setup, .fini = teardown)
{
	enum { N = VSXU_VQ_MAX_IOV + 1 };
	uint64_t a[N];
	uint32_t l[N];
	uint16_t f[N], nx[N];

	for (unsigned i = 0; i < N; i++) {
		a[i] = DRV_GPA_BASE + i;
		l[i] = 1;
		f[i] = i + 1 < N ? VRING_DESC_F_NEXT : 0;
		nx[i] = (uint16_t)(i + 1);
	}
	hostile_chain(a, l, f, nx, N, -EINVAL);
}

Test(vu_guest, next_out_of_ring, .init = setup, .fini = teardown)
{
	uint64_t a[] = { DRV_GPA_BASE };
	uint32_t l[] = { HDR };
	uint16_t f[] = { VRING_DESC_F_NEXT };
	uint16_t nx[] = { 0xffff };

	hostile_chain(a, l, f, nx, 1, -EINVAL);
}

Test(vu_guest, readable_after_writable, .init = setup, .fini = teardown)
{
	uint64_t a[] = { DRV_GPA_BASE, DRV_GPA_BASE + 64 };
	uint32_t l[] = { 16, 16 };
	uint16_t f[] = { VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 0 };
	uint16_t nx[] = { 1, 0 };

	hostile_chain(a, l, f, nx, 2, -EINVAL);
}

/* An indirect table written in the scratch area. */
static void bad_indirect(int kind)
{
	struct drv *d = open_drv(NULL);
	size_t slen;
	uint64_t sc = drv_scratch(d, &slen), a[1];
	struct vring_desc *t = drv_mem(d, sc, 64);
	uint32_t l[1] = { 32 };
	uint16_t f[1] = { VRING_DESC_F_INDIRECT };
	uint64_t v;
	int err = -EINVAL;

	WAIT_FOR(s_.starts == 1);
	t[0] = (struct vring_desc){ htole64(sc + 256), htole32(HDR),
				    htole16(VRING_DESC_F_NEXT), htole16(1) };
	t[1] = (struct vring_desc){ htole64(sc + 512), htole32(16),
				    htole16(VRING_DESC_F_INDIRECT), 0 };
	a[0] = sc;
	switch (kind) {
	case 0: /* an indirect table inside an indirect table */
		break;
	case 1: /* length not a multiple of 16 */
		l[0] = 24;
		break;
	case 2: /* table outside guest memory */
		a[0] = 0x2000;
		err = -EFAULT;
		break;
	case 3: /* a loop inside the table */
		t[1] = (struct vring_desc){ htole64(sc + 512), htole32(16),
					    htole16(VRING_DESC_F_NEXT), 0 };
		break;
	}
	cr_assert_eq(drv_send_raw(d, a, l, f, NULL, 1), 0);
	WAIT_FOR(s_.pop_err != 0);
	cr_assert_eq(snap().pop_err, err);
	cr_assert(snap().broken[VSOCK_VQ_TX]);
	cr_assert_eq(drv_ring_error(d, VSOCK_VQ_TX), 1);
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	assert_serves();
}

Test(vu_guest, indirect_nested, .init = setup, .fini = teardown)
{
	bad_indirect(0);
}

Test(vu_guest, indirect_bad_length, .init = setup, .fini = teardown)
{
	bad_indirect(1);
}

Test(vu_guest, indirect_outside_memory, .init = setup, .fini = teardown)
{
	bad_indirect(2);
}

Test(vu_guest, indirect_loop, .init = setup, .fini = teardown)
{
	bad_indirect(3);
}

Test(vu_guest, avail_idx_jumps, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);

	WAIT_FOR(s_.starts == 1);
	cr_assert_eq(drv_set_avail_idx(d, VSOCK_VQ_TX, 257), 0, "num is 256");
	WAIT_FOR(s_.pop_err != 0);
	cr_assert_eq(snap().pop_err, -EINVAL);
	cr_assert(snap().broken[VSOCK_VQ_TX]);
	cr_assert_eq(drv_ring_error(d, VSOCK_VQ_TX), 1);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	assert_serves();
}

Test(vu_guest, broken_queue_recovers_on_ring_restart, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);

	WAIT_FOR(s_.starts == 1);
	cr_assert_eq(drv_set_avail_idx(d, VSOCK_VQ_TX, 1000), 0);
	WAIT_FOR(s_.broken[VSOCK_VQ_TX]);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	cr_assert(!snap().broken[VSOCK_VQ_TX], "a new front-end starts clean");
}

/* ---- Hostile front-ends ---- */

static uint64_t ack(struct drv *d, uint32_t req, const void *p, uint32_t size,
		    const int *fds, unsigned nfds)
{
	uint64_t v = 12345;

	cr_assert_eq(drv_vhost_msg(d, req, V1 | NEED_REPLY, p, size, fds, nfds, &v, 8), 8,
		     "request %u gets an ack", req);
	return v;
}

static void assert_alive(struct drv *d)
{
	uint64_t v = 0;

	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert(v & (1ull << VIRTIO_F_VERSION_1));
	cr_assert(snap().connected);
}

Test(vu_frontend, oversized_message_closes, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint64_t v;

	WAIT_FOR(s_.starts == 1);
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 100000, NULL, 0, &v, 8),
		     -ECONNRESET);
	WAIT_FOR(!s_.connected);
	cr_assert_eq(snap().stops, 1);
	drv_close(d);
	assert_serves();
}

Test(vu_frontend, unknown_request, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint64_t v = 0, p = 7;
	int logs;

	cr_assert_neq(ack(d, 99, &p, 8, NULL, 0), 0, "need_reply: a failure ack");
	logs = snap().logs;
	cr_assert_eq(drv_vhost_msg(d, 99, V1, &p, 8, NULL, 0, NULL, 0), 0);
	cr_assert_eq(drv_vhost_msg(d, 99, V1, NULL, 0, NULL, 0, NULL, 0), 0);
	/* no stray reply came before this one */
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &v, 8), 8);
	cr_assert_eq(snap().logs, logs, "logged once");
	cr_assert_neq(ack(d, 200, NULL, 0, NULL, 0), 0);
	echo_once(d, 1, 10);
	drv_close(d);
}

Test(vu_frontend, bad_vring_num, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint32_t st[2];

	st[0] = 0; st[1] = 100;
	cr_assert_neq(ack(d, SET_VRING_NUM, st, 8, NULL, 0), 0, "started ring");
	/* stop ring 0 so the size is what is judged */
	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, st, 8, NULL, 0, st, 8), 8);
	st[0] = 0; st[1] = 100;
	cr_assert_neq(ack(d, SET_VRING_NUM, st, 8, NULL, 0), 0, "not a power of two");
	st[1] = 65536;
	cr_assert_neq(ack(d, SET_VRING_NUM, st, 8, NULL, 0), 0, "too big");
	st[1] = 0;
	cr_assert_neq(ack(d, SET_VRING_NUM, st, 8, NULL, 0), 0, "zero");
	st[0] = 3; st[1] = 64;
	cr_assert_neq(ack(d, SET_VRING_NUM, st, 8, NULL, 0), 0, "no such ring");
	st[0] = 0; st[1] = 64;
	cr_assert_eq(ack(d, SET_VRING_NUM, st, 8, NULL, 0), 0, "a good one passes");
	cr_assert_neq(ack(d, SET_VRING_NUM, st, 4, NULL, 0), 0, "short payload");
	assert_alive(d);
	drv_close(d);
	assert_serves();
}

static void do_qmax(void *arg)
{
	cr_assert_eq(vsxu_vu_set_queue_max(T->vu, 100), -EINVAL);
	cr_assert_eq(vsxu_vu_set_queue_max(T->vu, 0), -EINVAL);
	cr_assert_eq(vsxu_vu_set_queue_max(T->vu, 128), 0);
}

Test(vu_frontend, queue_max, .init = setup, .fini = teardown)
{
	struct drv_opts o = { .queue_size = 256 };
	struct drv *d;

	vsx_test_loop_call(T->tl, do_qmax, NULL);
	cr_assert_eq(drv_open(T->path, &o, &d), -EIO, "256 > 128 is refused");
	o.queue_size = 128;
	d = open_drv(&o);
	echo_once(d, 1, 10);
	drv_close(d);
}

Test(vu_frontend, bad_vring_addr, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint32_t st[2] = { 0, 0 };
	struct {
		uint32_t index, flags;
		uint64_t desc, used, avail, log;
	} a = { 0 };

	cr_assert_eq(drv_vhost_msg(d, GET_VRING_BASE, V1, st, 8, NULL, 0, st, 8), 8);
	a.desc = 0xdead0000;
	a.used = 0xdeae0000;
	a.avail = 0xdeaf0000;
	cr_assert_neq(ack(d, SET_VRING_ADDR, &a, sizeof(a), NULL, 0), 0);
	a.index = 7;
	cr_assert_neq(ack(d, SET_VRING_ADDR, &a, sizeof(a), NULL, 0), 0);
	assert_alive(d);
	drv_close(d);
	assert_serves();
}

Test(vu_frontend, bad_mem_table, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	struct {
		uint32_t n, pad;
		struct {
			uint64_t gpa, size, uva, off;
		} r[9];
	} m = { 0 };
	struct pipefd p = mkpipe();
	int memfd = memfd_create("t", MFD_CLOEXEC), fds[9];

	cr_assert(memfd >= 0);
	cr_assert_eq(ftruncate(memfd, 1 << 20), 0);
	m.r[0].gpa = 0x1000000;
	m.r[0].size = 1 << 20;
	m.r[0].uva = 0x1000000;

	m.n = 0;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8, NULL, 0), 0, "zero regions");
	m.n = 9;
	for (unsigned i = 0; i < 8; i++)
		fds[i] = memfd;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 8 * 32, fds, 8), 0, "too many regions");
	m.n = 1;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 32, NULL, 0), 0, "no fd");
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 32, &p.w, 1), 0, "a pipe");
	assert_closed_by_server(&p);
	m.r[0].size = 2 << 20;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 32, &memfd, 1), 0, "beyond the file");
	m.r[0].size = 1 << 20;
	m.r[0].gpa = UINT64_MAX - 100;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 32, &memfd, 1), 0, "gpa wraps");
	m.r[0].gpa = 0x1000000;
	m.n = 2;
	m.r[1] = m.r[0];
	m.r[1].uva += 1 << 20;
	fds[0] = fds[1] = memfd;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 64, fds, 2), 0, "overlapping regions");
	m.n = 1;
	cr_assert_neq(ack(d, SET_MEM_TABLE, &m, 8 + 64, &memfd, 1), 0, "size disagrees");
	/* after all that, the old table still holds: traffic flows */
	echo_once(d, 1, 100);
	assert_alive(d);
	drv_close(d);
	close(memfd);
	assert_serves();
}

Test(vu_frontend, mem_table_replaced_while_live, .init = setup, .fini = teardown)
{
	/* a valid but different table: the rings are now outside memory */
	struct drv *d = open_drv(NULL);
	struct {
		uint32_t n, pad;
		uint64_t gpa, size, uva, off;
	} m = { 1, 0, 0x1000000, 1 << 20, 0x1000000, 0 };
	int memfd = memfd_create("t", MFD_CLOEXEC);

	cr_assert_eq(ftruncate(memfd, 1 << 20), 0);
	echo_once(d, 1, 10);
	cr_assert_eq(ack(d, SET_MEM_TABLE, &m, sizeof(m), &memfd, 1), 0);
	close(memfd);
	cr_assert(!snap().ready[VSOCK_VQ_TX]);
	assert_alive(d);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	assert_serves();
}

Test(vu_frontend, fds_on_a_message_that_takes_none, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	struct pipefd p = mkpipe();
	uint64_t v = 0;

	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, &p.w, 1, &v, 8), 8);
	cr_assert(v & (1ull << VIRTIO_F_VERSION_1), "answered as usual");
	assert_closed_by_server(&p);
	p = mkpipe();
	v = 7;
	cr_assert_eq(drv_vhost_msg(d, SET_LOG_FD, V1 | NEED_REPLY, NULL, 0, &p.w, 1, &v, 8), 8);
	cr_assert_neq(v, 0, "unsupported");
	assert_closed_by_server(&p);
	echo_once(d, 1, 10);
	drv_close(d);
}

Test(vu_frontend, wrong_fd_count_on_vring_fd, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	struct pipefd p = mkpipe();
	uint64_t v = 1 | NOFD;
	int efd = eventfd(0, EFD_CLOEXEC), two[2];

	cr_assert_neq(ack(d, SET_VRING_CALL, &v, 8, &p.w, 1), 0, "NOFD with an fd");
	assert_closed_by_server(&p);
	v = 1;
	cr_assert_neq(ack(d, SET_VRING_CALL, &v, 8, NULL, 0), 0, "no fd");
	p = mkpipe();
	two[0] = p.w;
	two[1] = efd;
	cr_assert_neq(ack(d, SET_VRING_KICK, &v, 8, two, 2), 0, "two fds");
	assert_closed_by_server(&p);
	v = 5;
	p = mkpipe();
	cr_assert_neq(ack(d, SET_VRING_CALL, &v, 8, &p.w, 1), 0, "no such ring");
	assert_closed_by_server(&p);
	v = 1 | (1ull << 20);
	cr_assert_neq(ack(d, SET_VRING_ERR, &v, 8, &efd, 1), 0, "unknown flag bits");
	close(efd);
	echo_once(d, 1, 10);
	drv_close(d);
}

Test(vu_frontend, replaced_and_dropped_fds_are_closed, .init = setup, .fini = teardown)
{
	/* the previous call/err fd goes when a new one comes, and every fd
	 * goes with the front-end */
	struct drv *d = open_drv(NULL);
	struct pipefd a = mkpipe(), b = mkpipe(), c = mkpipe();
	uint64_t v = VSOCK_VQ_EVENT;
	int efd = eventfd(0, EFD_CLOEXEC);

	cr_assert_eq(ack(d, SET_VRING_CALL, &v, 8, &a.w, 1), 0);
	cr_assert_eq(ack(d, SET_VRING_CALL, &v, 8, &b.w, 1), 0);
	assert_closed_by_server(&a);
	cr_assert_eq(ack(d, SET_VRING_ERR, &v, 8, &c.w, 1), 0);
	v = VSOCK_VQ_EVENT | NOFD;
	cr_assert_eq(ack(d, SET_VRING_ERR, &v, 8, NULL, 0), 0, "no fd: err fd dropped");
	assert_closed_by_server(&c);
	a = mkpipe();
	v = VSOCK_VQ_EVENT;
	cr_assert_eq(ack(d, SET_VRING_ERR, &v, 8, &a.w, 1), 0);
	echo_once(d, 1, 10);
	drv_close(d);
	assert_closed_by_server(&b);
	assert_closed_by_server(&a);
	close(efd);
}

Test(vu_frontend, too_many_fds_closes, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	struct pipefd p[9];
	int fd = raw_connect(); /* refused; only used to get EOF right */
	struct {
		uint32_t req, flags, size;
	} __attribute__((packed)) h = { GET_FEATURES, V1, 0 };
	union {
		char buf[CMSG_SPACE(9 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { &h, sizeof(h) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	cr_assert(sees_eof(fd));
	close(fd);
	drv_close(d);
	WAIT_FOR(!s_.connected);

	fd = raw_connect();
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(9 * sizeof(int));
	for (unsigned i = 0; i < 9; i++) {
		p[i] = mkpipe();
		memcpy(CMSG_DATA(c) + i * sizeof(int), &p[i].w, sizeof(int));
	}
	cr_assert_eq(sendmsg(fd, &mh, 0), (ssize_t)sizeof(h));
	cr_assert(sees_eof(fd), "nine fds: the front-end is dropped");
	close(fd);
	for (unsigned i = 0; i < 9; i++)
		assert_closed_by_server(&p[i]);
	assert_serves();
}

Test(vu_frontend, truncated_messages, .init = setup, .fini = teardown)
{
	struct {
		uint32_t req, flags, size;
		uint64_t v;
	} __attribute__((packed)) m = { SET_FEATURES, V1, 8, 1ull << 32 };
	int fd;

	/* half a header */
	fd = raw_connect();
	cr_assert_eq(write(fd, &m, 6), 6);
	WAIT_FOR(s_.connected);
	close(fd);
	WAIT_FOR(!s_.connected);
	/* a header and half its payload */
	fd = raw_connect();
	cr_assert_eq(write(fd, &m, 16), 16);
	close(fd);
	WAIT_FOR(!s_.connected);
	/* a message byte by byte is fine */
	fd = raw_connect();
	for (unsigned i = 0; i < sizeof(m); i++) {
		cr_assert_eq(write(fd, (char *)&m + i, 1), 1);
		sleep_ms(1);
	}
	m.req = GET_FEATURES;
	m.size = 0;
	cr_assert_eq(write(fd, &m, 12), 12);
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char buf[20];

		cr_assert_eq(poll(&p, 1, TMO), 1);
		cr_assert_eq(read(fd, buf, sizeof(buf)), 20, "GET_FEATURES answered");
	}
	close(fd);
	WAIT_FOR(!s_.connected);
	assert_serves();
}

Test(vu_frontend, bad_features, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);
	uint64_t v = (1ull << VIRTIO_F_VERSION_1) | (1ull << 50);

	cr_assert_neq(ack(d, SET_FEATURES, &v, 8, NULL, 0), 0, "a bit not offered");
	v = 1ull << 40;
	cr_assert_neq(ack(d, 16 /* SET_PROTOCOL_FEATURES */, &v, 8, NULL, 0), 0);
	cr_assert_eq(snap().features, drv_features(d), "unchanged");
	echo_once(d, 1, 10);
	drv_close(d);
}

Test(vu_frontend, reset_owner_stops, .init = setup, .fini = teardown)
{
	struct drv *d = open_drv(NULL);

	echo_once(d, 1, 10);
	cr_assert_eq(ack(d, 4 /* RESET_OWNER */, NULL, 0, NULL, 0), 0);
	WAIT_FOR(s_.stops == 1);
	cr_assert(!snap().ready[0]);
	assert_alive(d);
	drv_close(d);
	WAIT_FOR(!s_.connected);
	cr_assert_eq(snap().stops, 1);
	assert_serves();
}
