/*
 * The vhost-user server (transports/virtio/vhost-user/vhost_user.c) with a tiny echo
 * device behind it, on a real libevent loop in its own thread, driven by the
 * in-process driver (tests/driver) over a real Unix socket (the harness:
 * vu_test.h): negotiation, config, data both ways, EVENT_IDX and indirect
 * on and off, ring wrap-around, reconnects, restarts (a device adopted by
 * a new server, running or paused), a refused second front-end. Hostile
 * guests and front-ends: test_vu_hostile.c.
 */
#include "vu_test.h"

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
	uint64_t f;

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
	/* (it needs no reply: one that does says the server read it) */
	cr_assert_eq(drv_vhost_msg(d, GET_FEATURES, V1, NULL, 0, NULL, 0, &f, sizeof(f)),
		     (int)sizeof(f));
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
