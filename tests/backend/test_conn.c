/*
 * The backend end to end (the harness and helpers of suite.h):
 * connections: the device, every op, half-close, SEQPACKET, host errors,
 * lifetimes.
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

TestSuite(conn, .init = setup1, .fini = teardown, .timeout = 60);

Test(conn, device_config)
{
	uint64_t f = drv_features(G(0)->d);

	cr_assert_eq(drv_cid(G(0)->d), 3);
	cr_assert(f & (1ull << VIRTIO_VSOCK_F_SEQPACKET), "SEQPACKET not offered");
}

Test(conn, guest_to_host_stream_bytes)
{
	size_t len = 3 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct vsxb_conn_info ci;
	struct hio io;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40000, 1234, &lfd, &fd);
	ci = conn_of(&c, 0);
	cr_assert_eq(ci.state, VSXB_CONN_ESTABLISHED);
	cr_assert(ci.guest_initiated);
	cr_assert_eq(ci.type, STREAM);
	cr_assert_eq(ci.peer_cid, 2);
	cr_assert_eq(ci.buf_alloc, VSXB_DEFAULT_BUF_ALLOC);

	/* guest -> host */
	fill_pattern(out, len, 1);
	hio_start(&io, fd, in, len, false);
	g_write(&c, out, len, 4096);
	cr_assert_eq(hio_join(&io), 0);
	{
		size_t i;

		for (i = 0; i < len && in[i] == out[i]; i++)
			;
		cr_assert_eq(i, len, "first difference at %zu", i);
	}

	/* host -> guest */
	fill_pattern(out, len, 2);
	hio_start(&io, fd, out, len, true);
	g_read(&c, in, len);
	cr_assert_eq(hio_join(&io), 0);
	{
		size_t i;

		for (i = 0; i < len && in[i] == out[i]; i++)
			;
		cr_assert_eq(i, len, "first difference at %zu", i);
	}

	ci = conn_of(&c, 0);
	cr_assert_eq(ci.from_guest_bytes, len);
	cr_assert_eq(ci.to_guest_bytes, len);
	cr_assert_eq(ci.fwd_cnt, (uint32_t)len);
	cr_assert_eq(ci.queued, 0);
	cr_assert_eq(ci.peer_buf_alloc, c.buf_alloc);
	close(fd);
	close(lfd);
	free(out);
	free(in);
}

Test(conn, guest_to_missing_host_port_is_reset)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 40001, VSOCK_CID_HOST, 4444);
	cr_assert_eq(g_connect(&c), OP_RST);
	cr_assert_eq(hx_conns(&H, 0, NULL, 0), 0);
}

Test(conn, guest_to_unknown_cid_is_reset)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 40002, 77, 1234);
	cr_assert_eq(g_connect(&c), OP_RST);
	gc_init(&c, G(0), STREAM, 40002, 1, 1234);   /* local */
	cr_assert_eq(g_connect(&c), OP_RST);
	gc_init(&c, G(0), STREAM, 40002, 3, 1234);   /* itself */
	cr_assert_eq(g_connect(&c), OP_RST);
}

Test(conn, rst_is_never_answered)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 40003, VSOCK_CID_HOST, 999);
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	cr_assert(g_quiet(G(0), NULL, QUIET));
	/* packets other than RST without a connection get one */
	cr_assert_geq(g_send(&c, OP_RW, 0, "x", 1), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_geq(g_send(&c, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
}

Test(conn, guest_rst_closes_host_socket)
{
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40004, 1235, &lfd, &fd);
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	cr_assert(g_quiet(G(0), &c, QUIET), "RST answered");
	close(fd);
	close(lfd);
}

Test(conn, guest_shutdown_send_half_close)
{
	char buf[100], back[100];
	struct vsxb_conn_info ci;
	struct pkt *p;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40005, 1236, &lfd, &fd);
	fill_pattern(buf, sizeof(buf), 5);
	g_write(&c, buf, sizeof(buf), 100);
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0), 0);
	cr_assert_eq(h_read_full(fd, back, sizeof(back), TMO), 0);
	cr_assert_arr_eq(back, buf, sizeof(buf));
	cr_assert_eq(h_eof(fd, TMO), 0, "host did not see EOF");
	ci = conn_of(&c, 0);
	cr_assert_eq(ci.state, VSXB_CONN_CLOSING);
	cr_assert_eq(ci.guest_shut, VIRTIO_VSOCK_SHUTDOWN_SEND);

	/* the other direction still flows */
	cr_assert_eq(h_write_full(fd, buf, sizeof(buf), TMO), 0);
	g_read(&c, back, sizeof(back));
	cr_assert_arr_eq(back, buf, sizeof(buf));

	/* host closes: SHUTDOWN both ways, guest RSTs, all gone */
	close(fd);
	p = g_expect(&c, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, SHUT_BOTH);
	free(p);
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	close(lfd);
}

Test(conn, host_shutdown_write_half_close)
{
	char buf[300], back[300];
	struct pkt *p;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40006, 1237, &lfd, &fd);
	fill_pattern(buf, sizeof(buf), 6);
	cr_assert_eq(h_write_full(fd, buf, sizeof(buf), TMO), 0);
	shutdown(fd, SHUT_WR);
	g_read(&c, back, sizeof(back));
	cr_assert_arr_eq(back, buf, sizeof(buf));
	p = g_expect(&c, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, VIRTIO_VSOCK_SHUTDOWN_SEND);
	free(p);
	cr_assert_eq(conn_of(&c, 0).host_shut, VIRTIO_VSOCK_SHUTDOWN_SEND);

	/* guest -> host still flows */
	g_write(&c, buf, sizeof(buf), 128);
	cr_assert_eq(h_read_full(fd, back, sizeof(back), TMO), 0);
	cr_assert_arr_eq(back, buf, sizeof(buf));

	/* guest closes (SHUTDOWN both): answered by RST, host sees EOF */
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	close(fd);
	close(lfd);
}

Test(conn, guest_shutdown_rcv_stops_host_writes)
{
	struct gc c;
	int lfd, fd;
	ssize_t w;

	g2h_open(&c, 0, STREAM, 40007, 1238, &lfd, &fd);
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_RCV, NULL, 0), 0);
	hx_settle(&H);
	w = send(fd, "abc", 3, MSG_NOSIGNAL);
	cr_assert_eq(w, -1, "host write after guest SHUTDOWN(RCV) succeeded");
	cr_assert_eq(errno, EPIPE);
	cr_assert(g_quiet(G(0), &c, QUIET));
	close(fd);
	close(lfd);
}

Test(conn, clean_close_after_data_in_flight)
{
	/* Data the guest sent before closing reaches the host even if the
	 * host reads it only after the guest's close. */
	size_t len = 200000;
	uint8_t *buf = malloc(len), *back = malloc(len);
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40008, 1239, &lfd, &fd);
	fill_pattern(buf, len, 8);
	g_write(&c, buf, len, 65536);
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(h_read_full(fd, back, len, TMO), 0);
	cr_assert_arr_eq(back, buf, len);
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	close(fd);
	close(lfd);
	free(buf);
	free(back);
}

Test(conn, seqpacket_boundaries_guest_to_host_and_back)
{
	uint8_t big[10000], rec[20000], small[100];
	struct pkt *p;
	struct gc c;
	int lfd, fd, i;
	ssize_t r;
	size_t got;

	g2h_open(&c, 0, SEQ, 40010, 1240, &lfd, &fd);
	fill_pattern(big, sizeof(big), 10);
	fill_pattern(small, sizeof(small), 11);

	/* one packet, one message */
	cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM, small, sizeof(small)), 0);
	/* one message in three packets */
	cr_assert_geq(g_send(&c, OP_RW, 0, big, 4000), 0);
	cr_assert_geq(g_send(&c, OP_RW, 0, big + 4000, 4000), 0);
	cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR,
			     big + 8000, 2000), 0);
	/* an empty message vanishes; then a 1-byte one */
	cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM, NULL, 0), 0);
	cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM, "z", 1), 0);

	cr_assert(h_readable(fd, TMO));
	r = recv(fd, rec, sizeof(rec), 0);
	cr_assert_eq(r, (ssize_t)sizeof(small));
	cr_assert_arr_eq(rec, small, sizeof(small));
	cr_assert(h_readable(fd, TMO));
	r = recv(fd, rec, sizeof(rec), 0);
	cr_assert_eq(r, (ssize_t)sizeof(big));
	cr_assert_arr_eq(rec, big, sizeof(big));
	cr_assert(h_readable(fd, TMO));
	r = recv(fd, rec, sizeof(rec), 0);
	cr_assert_eq(r, 1);
	cr_assert_eq(rec[0], 'z');

	/* host records -> guest messages, split as RX buffers need */
	cr_assert_eq(send(fd, small, sizeof(small), 0), (ssize_t)sizeof(small));
	cr_assert_eq(send(fd, big, sizeof(big), 0), (ssize_t)sizeof(big));
	p = g_expect(&c, OP_RW, TMO);
	cr_assert_eq(p->len, sizeof(small));
	cr_assert_eq(p->h.flags & VIRTIO_VSOCK_SEQ_EOM, VIRTIO_VSOCK_SEQ_EOM);
	cr_assert_arr_eq(p->data, small, sizeof(small));
	g_consumed(&c, p->len);
	free(p);
	for (got = 0, i = 0; got < sizeof(big); i++) {
		p = g_expect(&c, OP_RW, TMO);
		cr_assert_leq(got + p->len, sizeof(big));
		memcpy(rec + got, p->data, p->len);
		got += p->len;
		cr_assert_eq(!!(p->h.flags & VIRTIO_VSOCK_SEQ_EOM), got == sizeof(big),
			     "EOM on packet %d (at %zu of %zu)", i, got, sizeof(big));
		g_consumed(&c, p->len);
		free(p);
	}
	cr_assert_eq(i, 3);
	cr_assert_arr_eq(rec, big, sizeof(big));
	close(fd);
	close(lfd);
}

Test(conn, seqpacket_to_stream_listener_is_reset)
{
	struct gc c;
	int lfd;

	lfd = listen_port(0, 1241, SOCK_STREAM);
	gc_init(&c, G(0), SEQ, 40011, VSOCK_CID_HOST, 1241);
	cr_assert_eq(g_connect(&c), OP_RST);
	close(lfd);
}

Test(conn, seqpacket_unnegotiated_is_refused)
{
	struct drv_opts o = { .no_seqpacket = true };
	struct gc c;
	int lfd;

	hx_close_drv(&H, 0);
	hx_open(&H, 0, &o);
	cr_assert_eq(drv_features(G(0)->d) & (1ull << VIRTIO_VSOCK_F_SEQPACKET), 0);
	lfd = listen_port(0, 1242, SOCK_SEQPACKET);
	gc_init(&c, G(0), SEQ, 40012, VSOCK_CID_HOST, 1242);
	cr_assert_eq(g_connect(&c), OP_RST);
	close(lfd);
}

Test(conn, connection_ids_unique_never_reused)
{
	uint64_t ids[6];
	struct gc c;
	int lfd, fd, i;

	lfd = listen_port(0, 1243, SOCK_STREAM);
	for (i = 0; i < 6; i++) {
		gc_init(&c, G(0), STREAM, 41000, VSOCK_CID_HOST, 1243);  /* same tuple */
		cr_assert_eq(g_connect(&c), 0);
		fd = h_accept(lfd, TMO);
		cr_assert_geq(fd, 0);
		ids[i] = conn_of(&c, 0).id;
		if (i)
			cr_assert_gt(ids[i], ids[i - 1]);
		cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
		cr_assert_eq(h_eof(fd, TMO), 0);
		cr_assert(conn_gone(&c, 0, TMO));
		close(fd);
	}
	close(lfd);
}

Test(conn, request_on_existing_connection_resets_it)
{
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40013, 1244, &lfd, &fd);
	cr_assert_geq(g_send(&c, OP_REQUEST, 0, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	close(fd);
	close(lfd);
}

Test(conn, seqpacket_queued_when_host_blocked)
{
	/* N messages: more than the Unix socket holds (vsxd sets its SO_SNDBUF
	 * to the 256 KiB window, doubled by the kernel: 200 to 350 records of
	 * this size), less than that and the window together */
	enum { N = 400, M = 1000 };
	uint8_t msg[M], rec[2 * M];
	struct vsxb_conn_info ci;
	struct pkt *p;
	struct gc c;
	int lfd, fd, i;
	ssize_t r;

	g2h_open(&c, 0, SEQ, 40030, 1310, &lfd, &fd);
	/* the host does not read: the Unix socket fills, the rest is queued
	 * (message boundaries kept), all within the guest's credit */
	for (i = 0; i < N; i++) {
		while (g_credit(&c) < M) {
			p = g_next(c.g, &c, TMO);
			cr_assert_not_null(p, "no credit for message %d", i);
			cr_assert_eq(p->h.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
			free(p);
		}
		fill_pattern(msg, M, 1000 + (uint32_t)i);
		if (i % 2) {
			cr_assert_geq(g_send(&c, OP_RW, 0, msg, 300), 0);
			cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM, msg + 300,
					     M - 300), 0);
		} else {
			cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM, msg, M), 0);
		}
	}
	hx_sync(&H);
	ci = conn_of(&c, 0);
	cr_assert_gt(ci.queued, 0, "nothing queued: the host socket took %d messages", N);
	cr_assert_eq(ci.queued % M, 0, "queued %u: not whole messages", ci.queued);
	for (i = 0; i < N; i++) {
		fill_pattern(msg, M, 1000 + (uint32_t)i);
		cr_assert(h_readable(fd, TMO));
		r = recv(fd, rec, sizeof(rec), 0);
		cr_assert_eq(r, M, "record %d: %zd bytes", i, r);
		cr_assert_arr_eq(rec, msg, M);
	}
	cr_assert(!h_readable(fd, 50));
	close(fd);
	close(lfd);
}

Test(conn, seqpacket_host_message_beyond_guest_buffer_resets)
{
	uint8_t big[10000] = { 0 };
	struct gc c;
	int lfd, fd;

	lfd = listen_port(0, 1311, SOCK_SEQPACKET);
	gc_init(&c, G(0), SEQ, 40031, VSOCK_CID_HOST, 1311);
	c.buf_alloc = 8192;
	cr_assert_eq(g_connect(&c), 0);
	fd = h_accept(lfd, TMO);
	cr_assert_eq(send(fd, big, sizeof(big), 0), (ssize_t)sizeof(big));
	free(g_expect(&c, OP_RST, TMO));
	cr_assert(hx_log_has(&H, "exceeds the guest's buffer"));
	close(fd);
	close(lfd);
}

Test(conn, host_stops_reading_guest_told)
{
	char buf[1000] = { 0 };
	struct pkt *p;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40033, 1313, &lfd, &fd);
	shutdown(fd, SHUT_RD);
	cr_assert_geq(g_send(&c, OP_RW, 0, buf, sizeof(buf)), 0);
	p = g_expect(&c, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, VIRTIO_VSOCK_SHUTDOWN_RCV);
	free(p);
	/* host -> guest still works */
	cr_assert_eq(h_write_full(fd, "still", 5, TMO), 0);
	g_read(&c, buf, 5);
	cr_assert_arr_eq(buf, "still", 5);
	close(fd);
	close(lfd);
}

Test(conn, plain_rings_without_event_queue)
{
	struct drv_opts o = { .no_event_idx = true, .no_indirect = true,
			      .no_event_queue = true };
	size_t len = 1 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct hio io;
	struct gc c;
	uint32_t id;
	int lfd, fd;

	hx_close_drv(&H, 0);
	hx_open(&H, 0, &o);
	g2h_open(&c, 0, STREAM, 40034, 1314, &lfd, &fd);
	fill_pattern(out, len, 34);
	hio_start(&io, fd, in, len, false);
	g_write(&c, out, len, 4096);
	cr_assert_eq(hio_join(&io), 0);
	cr_assert_arr_eq(in, out, len);
	hio_start(&io, fd, out, len, true);
	g_read(&c, in, len);
	cr_assert_eq(hio_join(&io), 0);
	cr_assert_arr_eq(in, out, len);
	close(fd);
	/* a restart without an event queue (QEMU keeps it): the device
	 * starts and serves; the event is QEMU's to send */
	hx_close_drv(&H, 0);
	hx_open(&H, 0, &o);
	cr_assert_eq(drv_recv_event(G(0)->d, &id, QUIET), -ENOTSUP);
	g2h_open(&c, 0, STREAM, 40034, 1314, &lfd, &fd);
	still_works(&c, fd);
	close(fd);
	close(lfd);
	free(out);
	free(in);
}

Test(conn, drain_bounded_by_linger)
{
	/* more than the socket takes (vsxd sets its SO_SNDBUF to the 256 KiB
	 * window, which the kernel doubles), less than that and the window */
	size_t len = 640000;
	uint8_t *buf = malloc(len + 1);
	struct vsxb_conn_info ci[4];
	struct gc c;
	int lfd, fd, rc;

	hx_timeouts(&H, 0, 0, 300);
	g2h_open(&c, 0, STREAM, 40040, 1350, &lfd, &fd);
	fill_pattern(buf, len, 40);
	g_write(&c, buf, len, 65536);
	hx_sync(&H);
	cr_assert_gt(conn_of(&c, 0).queued, 0);
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	/* the host side drains, but the host never reads: cut after linger */
	hx_sync(&H);
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 1);
	cr_assert_eq(ci[0].state, VSXB_CONN_CLOSING);
	cr_assert(conn_gone(&c, 0, TMO));
	/* what was queued for the socket is lost; what it took is there */
	rc = h_read_full(fd, buf, len + 1, 500);
	cr_assert(rc == -EPIPE || rc == -ECONNRESET, "rc %d", rc);
	close(fd);
	close(lfd);
	free(buf);
}

Test(conn, host_socket_kind_is_host)
{
	struct vsxb_conn_info ci;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 41004, 5004, &lfd, &fd);
	ci = conn_of(&c, 0);
	cr_assert_str_eq(ci.peer_kind, "host");
	close(fd);
	close(lfd);
}
