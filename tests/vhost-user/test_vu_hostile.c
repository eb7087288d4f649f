/*
 * The vhost-user server against hostile guests (descriptors outside
 * memory, loops, overflows, bad indirect tables, jumping indexes) and
 * hostile front-ends (bad messages, sizes, descriptors): after every
 * case the server must still serve. The harness: vu_test.h.
 */
#include "vu_test.h"

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
