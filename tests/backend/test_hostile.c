/*
 * The backend end to end (the harness and helpers of suite.h): hostile
 * guests: bad headers, descriptors, ops and floods.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "suite.h"

TestSuite(hostile, .init = setup1, .fini = teardown, .timeout = 60);

static void hostile_setup_at(struct gc *c, int *lfd, int *fd, struct gc *d, int *lfd2,
			     int *fd2, uint32_t k)
{
	g2h_open(c, 0, STREAM, 42000 + 2 * k, 1260 + 2 * k, lfd, fd);
	g2h_open(d, 0, STREAM, 42001 + 2 * k, 1261 + 2 * k, lfd2, fd2);
}

static void hostile_setup(struct gc *c, int *lfd, int *fd, struct gc *d, int *lfd2,
			  int *fd2)
{
	hostile_setup_at(c, lfd, fd, d, lfd2, fd2, 0);
}

static void hostile_done(struct gc *d, int lfd, int fd, int lfd2, int fd2)
{
	still_works(d, fd2);
	close(fd);
	close(fd2);
	close(lfd);
	close(lfd2);
}

Test(hostile, wrong_src_cid_dropped)
{
	struct virtio_vsock_hdr h = { 0 };
	struct vsxb_engine_stats st;
	struct gc c, d;
	int lfd, fd, lfd2, fd2;

	hostile_setup(&c, &lfd, &fd, &d, &lfd2, &fd2);
	h.src_cid = 99;   /* spoofed */
	h.dst_cid = VSOCK_CID_HOST;
	h.src_port = c.lport;
	h.dst_port = c.pport;
	h.type = STREAM;
	h.op = OP_RW;
	h.len = 5;
	cr_assert_geq(g_send_hdr(G(0), &h, "spoof", 5), 0);
	h.op = OP_REQUEST;
	h.len = 0;
	cr_assert_geq(g_send_hdr(G(0), &h, NULL, 0), 0);
	cr_assert(g_quiet(G(0), NULL, QUIET));
	cr_assert(!h_readable(fd, 50), "spoofed data delivered");
	hx_stats(&H, 0, &st);
	cr_assert_eq(st.dropped, 2);
	still_works(&c, fd);
	hostile_done(&d, lfd, fd, lfd2, fd2);
}

/* One packet from raw descriptors in the driver's scratch memory (lower
 * half): the header, then @chain_len payload bytes, whatever h.len says. */
static void raw_packet(struct guest *g, const struct virtio_vsock_hdr *hc,
		       uint32_t chain_len)
{
	struct virtio_vsock_hdr h = *hc;
	uint64_t scratch, addr[2];
	uint32_t len[2];
	uint16_t flags[2] = { 1, 0 }, next[2] = { 1, 0 };
	size_t slen;

	scratch = drv_scratch(g->d, &slen);
	h.src_cid = htole64(h.src_cid);
	h.dst_cid = htole64(h.dst_cid);
	h.src_port = htole32(h.src_port);
	h.dst_port = htole32(h.dst_port);
	h.len = htole32(h.len);
	h.type = htole16(h.type);
	h.op = htole16(h.op);
	h.flags = htole32(h.flags);
	h.buf_alloc = htole32(h.buf_alloc);
	h.fwd_cnt = htole32(h.fwd_cnt);
	memcpy(drv_mem(g->d, scratch, sizeof(h)), &h, sizeof(h));
	memset(drv_mem(g->d, scratch + 4096, chain_len), 'r', chain_len);
	addr[0] = scratch;
	len[0] = sizeof(h);
	addr[1] = scratch + 4096;
	len[1] = chain_len;
	cr_assert_geq(drv_send_raw(g->d, addr, len, flags, next, chain_len ? 2 : 1), 0);
}

Test(hostile, bad_type_op_len)
{
	struct virtio_vsock_hdr h;
	static char pay[10];
	struct gc c, d;
	int lfd, fd, lfd2, fd2, k;

	for (k = 0; k < 5; k++) {
		hostile_setup_at(&c, &lfd, &fd, &d, &lfd2, &fd2, 10 + (uint32_t)k);
		memset(&h, 0, sizeof(h));
		h.src_cid = 3;
		h.dst_cid = VSOCK_CID_HOST;
		h.src_port = c.lport;
		h.dst_port = c.pport;
		h.type = STREAM;
		h.op = OP_RW;
		switch (k) {
		case 0:
			h.type = 3;           /* unknown type */
			break;
		case 1:
			h.op = 0;             /* invalid op */
			break;
		case 2:
			h.op = 9;             /* unknown op */
			break;
		case 3:
			h.len = 65537;        /* above 64 KiB */
			break;
		case 4:
			h.len = 1000;         /* beyond the chain (10 bytes follow) */
			break;
		}
		if (k == 3)
			raw_packet(G(0), &h, 65537);   /* the chain does hold it */
		else
			cr_assert_geq(g_send_hdr(G(0), &h, pay, 10), 0);
		/* answered with RST, and the connection with those addresses
		 * is reset: its host socket closed */
		free(g_expect(&c, OP_RST, TMO));
		cr_assert_eq(h_eof(fd, TMO), 0, "case %d: host socket not closed", k);
		hostile_done(&d, lfd, fd, lfd2, fd2);
		cr_assert(conn_gone(&d, 0, 0) == false);
		cr_assert_geq(g_send(&d, OP_RST, 0, NULL, 0), 0);
		cr_assert(conn_gone(&d, 0, TMO));
	}
}

Test(hostile, unknown_type_without_connection)
{
	struct virtio_vsock_hdr h = {
		.src_cid = 3, .dst_cid = 2, .src_port = 7, .dst_port = 8,
		.type = 7, .op = OP_REQUEST,
	};
	struct gc c;

	cr_assert_geq(g_send_hdr(G(0), &h, NULL, 0), 0);
	gc_init(&c, G(0), 7, 7, 2, 8);
	free(g_expect(&c, OP_RST, TMO));
}

Test(hostile, rw_before_response_and_after_shutdown)
{
	struct gc c, d;
	int lfd, fd, lfd2, fd2;
	struct pkt *p;

	/* host connects in; the guest sends data instead of RESPONSE */
	lfd2 = listen_port(0, 1262, SOCK_STREAM);
	g2h_open(&d, 0, STREAM, 42002, 1262, &lfd, &fd2);
	close(lfd);
	fd = h_dial(H.v[0].uds, "CONNECT 6000\n");
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_REQUEST);
	gc_init(&c, G(0), STREAM, 6000, 2, p->h.src_port);
	free(p);
	cr_assert_geq(g_send(&c, OP_RW, 0, "x", 1), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	close(fd);

	/* data after SHUTDOWN(SEND) */
	cr_assert_geq(g_send(&d, OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0), 0);
	cr_assert_geq(g_send(&d, OP_RW, 0, "y", 1), 0);
	free(g_expect(&d, OP_RST, TMO));
	close(fd2);
	close(lfd2);
}

Test(hostile, chain_loop_breaks_device_only)
{
	struct vsxb_conn_info ci[4];
	uint64_t scratch;
	size_t slen;
	uint64_t addr[2];
	uint32_t len[2];
	uint16_t flags[2], next[2];
	struct gc c, e;
	int lfd, fd, lfd1, fd1;
	uint32_t id = 0;

	/* a second VM must not notice */
	cr_assert_eq(hx_vm(&H, 1, NULL), 0);
	hx_open(&H, 1, NULL);
	g2h_open(&c, 0, STREAM, 42010, 1270, &lfd, &fd);
	g2h_open(&e, 1, STREAM, 42011, 1271, &lfd1, &fd1);

	scratch = drv_scratch(G(0)->d, &slen);
	addr[0] = scratch;
	len[0] = 44;
	flags[0] = 1;  /* VRING_DESC_F_NEXT */
	next[0] = 1;
	addr[1] = scratch + 64;
	len[1] = 16;
	flags[1] = 1;
	next[1] = 0;   /* back to the first: a loop */
	cr_assert_geq(drv_send_raw(G(0)->d, addr, len, flags, next, 2), 0);
	cr_assert_eq(h_eof(fd, TMO), 0, "host peer of the broken device not closed");
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 0);
	cr_assert_eq(hx_log_count(&H, "device stopped until"), 1);
	still_works(&e, fd1);

	/* the front-end resets the device: it serves again, and says so */
	hx_close_drv(&H, 0);
	hx_open(&H, 0, NULL);
	cr_assert_eq(drv_recv_event(G(0)->d, &id, TMO), 0);
	cr_assert_eq(id, VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	close(fd);
	g2h_open(&c, 0, STREAM, 42012, 1272, &lfd, &fd);
	still_works(&c, fd);
	close(fd);
	close(fd1);
	close(lfd);
	close(lfd1);
}

Test(hostile, short_header_dropped)
{
	uint64_t scratch;
	size_t slen;
	uint64_t addr[1];
	uint32_t len[1];
	uint16_t flags[1] = { 0 }, next[1] = { 0 };
	struct vsxb_engine_stats st;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 42013, 1273, &lfd, &fd);
	scratch = drv_scratch(G(0)->d, &slen);
	addr[0] = scratch;
	len[0] = 20;
	cr_assert_geq(drv_send_raw(G(0)->d, addr, len, flags, next, 1), 0);
	cr_assert(g_quiet(G(0), NULL, QUIET));
	hx_stats(&H, 0, &st);
	cr_assert_eq(st.dropped, 1);
	still_works(&c, fd);
	close(fd);
	close(lfd);
}

Test(hostile, descriptor_outside_guest_memory)
{
	uint64_t addr[2] = { 0, 0x1000 };   /* below guest memory */
	uint32_t len[2] = { 44, 100 };
	uint16_t flags[2] = { 1, 0 }, next[2] = { 1, 0 };
	struct gc e;
	int lfd1, fd1;

	cr_assert_eq(hx_vm(&H, 1, NULL), 0);
	hx_open(&H, 1, NULL);
	g2h_open(&e, 1, STREAM, 42020, 1340, &lfd1, &fd1);
	addr[0] = drv_scratch(G(0)->d, NULL);
	cr_assert_geq(drv_send_raw(G(0)->d, addr, len, flags, next, 2), 0);
	hx_settle(&H);
	cr_assert(hx_log_has(&H, "vm cid3: TX queue"));
	still_works(&e, fd1);
	close(fd1);
	close(lfd1);
}
