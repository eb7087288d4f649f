/*
 * The backend end to end (the harness and helpers of suite.h): credit:
 * windows, updates, stalls, buffer changes.
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

TestSuite(credit, .init = setup1, .fini = teardown, .timeout = 60);

Test(credit, zero_credit_until_update)
{
	char buf[100000], back[100000];
	struct pkt *p;
	struct gc c;
	int lfd, fd;

	lfd = listen_port(0, 1250, SOCK_STREAM);
	gc_init(&c, G(0), STREAM, 40020, VSOCK_CID_HOST, 1250);
	c.buf_alloc = 0;
	c.auto_credit = false;
	cr_assert_eq(g_connect(&c), 0);
	fd = h_accept(lfd, TMO);
	fill_pattern(buf, sizeof(buf), 20);
	cr_assert_eq(h_write_full(fd, buf, sizeof(buf), TMO), 0);
	cr_assert(g_quiet(G(0), &c, QUIET), "data sent without credit");
	cr_assert_eq(conn_of(&c, 0).tx_free, 0);

	/* 10000 bytes of room: exactly that much comes */
	c.buf_alloc = 10000;
	cr_assert_geq(g_send(&c, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	g_read(&c, back, 10000);
	cr_assert_arr_eq(back, buf, 10000);
	cr_assert(g_quiet(G(0), &c, QUIET), "data beyond the credit");

	/* consumed and a bigger window: the rest */
	c.buf_alloc = 256 * 1024;
	c.auto_credit = true;
	cr_assert_geq(g_send(&c, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	g_read(&c, back + 10000, sizeof(buf) - 10000);
	cr_assert_arr_eq(back, buf, sizeof(buf));
	p = g_next(G(0), &c, QUIET);
	cr_assert_null(p);
	close(fd);
	close(lfd);
}

Test(credit, credit_request_answered)
{
	struct pkt *p;
	struct gc c;
	int lfd, fd, i;

	g2h_open(&c, 0, STREAM, 40021, 1251, &lfd, &fd);
	for (i = 0; i < 3; i++) {
		cr_assert_geq(g_send(&c, OP_CREDIT_REQUEST, 0, NULL, 0), 0);
		p = g_next(G(0), &c, TMO);
		cr_assert_not_null(p);
		cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
		cr_assert_eq(p->h.buf_alloc, VSXB_DEFAULT_BUF_ALLOC);
		cr_assert_eq(p->h.fwd_cnt, 0);
		free(p);
	}
	close(fd);
	close(lfd);
}

static void wrap_transfer(uint32_t base)
{
	size_t len = 1 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct vsxb_conn_info ci;
	struct hio io;
	struct gc c;
	int lfd, fd;

	hx_counter_base(&H, base);
	lfd = listen_port(0, 1252, SOCK_STREAM);
	gc_init(&c, G(0), STREAM, 40022, VSOCK_CID_HOST, 1252);
	c.tx_cnt = c.fwd_cnt = c.last_fwd_sent = base;
	cr_assert_eq(g_connect(&c), 0);
	cr_assert_eq(c.peer_fwd, base);
	fd = h_accept(lfd, TMO);

	fill_pattern(out, len, 22);
	hio_start(&io, fd, in, len, false);
	g_write(&c, out, len, 4096);
	cr_assert_eq(hio_join(&io), 0);
	cr_assert_arr_eq(in, out, len);

	fill_pattern(out, len, 23);
	hio_start(&io, fd, out, len, true);
	g_read(&c, in, len);
	cr_assert_eq(hio_join(&io), 0);
	cr_assert_arr_eq(in, out, len);

	ci = conn_of(&c, 0);
	cr_assert_eq(ci.fwd_cnt, base + (uint32_t)len);
	cr_assert_lt(ci.fwd_cnt, base, "counter did not wrap");
	cr_assert_eq(ci.tx_free, g_credit(&c) == 0 ? 0 : ci.tx_free);
	close(fd);
	close(lfd);
	free(out);
	free(in);
}

Test(credit, counters_wrap_u32)
{
	wrap_transfer(0xFFFFFFFFu - 100000);
}

Test(credit, rw_beyond_credit_resets_only_that_connection)
{
	static char big[65536];
	struct gc c, d;
	int lfd, fd, lfd2, fd2;

	g2h_open(&d, 0, STREAM, 40024, 1254, &lfd2, &fd2);
	cr_assert_eq(hx_default_buffer(&H, 0, 4096), 0);
	g2h_open(&c, 0, STREAM, 40023, 1253, &lfd, &fd);
	cr_assert_eq(g_credit(&c), 4096);
	/* 4096 bytes may be consumed (and announced) at most before the next
	 * packet: 4096 + 8192 is beyond anything we could have allowed */
	cr_assert_geq(g_send(&c, OP_RW, 0, big, 4096), 0);
	cr_assert_geq(g_send(&c, OP_RW, 0, big, 8192), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert(conn_gone(&c, 0, TMO));
	still_works(&d, fd2);
	close(fd);
	close(fd2);
	close(lfd);
	close(lfd2);
}

Test(credit, credit_update_only_when_peer_could_stall)
{
	size_t len = 4 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct vsxb_engine_stats st;
	struct hio io;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40025, 1255, &lfd, &fd);
	fill_pattern(out, len, 25);
	hio_start(&io, fd, in, len, false);
	g_write(&c, out, len, 4096);
	cr_assert_eq(hio_join(&io), 0);
	cr_assert_arr_eq(in, out, len);
	hx_sync(&H);
	{
		struct pkt *p;

		while ((p = g_next(G(0), &c, 100))) {
			cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
			free(p);
		}
	}
	hx_stats(&H, 0, &st);
	/* one update per (buf_alloc - 64 KiB) consumed at most, plus slack;
	 * certainly not one per packet (1024 packets) */
	cr_assert_leq(c.updates_seen, len / (VSXB_DEFAULT_BUF_ALLOC - 65536) + 2,
		      "%u credit updates for %zu bytes", c.updates_seen, len);
	cr_assert_geq(c.updates_seen, 1);
	cr_assert_eq(st.credit_updates, c.updates_seen);
	close(fd);
	close(lfd);
	free(out);
	free(in);
}

Test(credit, set_buffer_sends_update)
{
	size_t len = 600 * 1024;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct vsxb_conn_info ci;
	struct hio io;
	struct pkt *p;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 40026, 1256, &lfd, &fd);
	ci = conn_of(&c, 0);

	/* growing: announced as is */
	cr_assert_eq(hx_set_buffer(&H, ci.id, 512 * 1024), 0);
	p = g_expect(&c, OP_CREDIT_UPDATE, TMO);
	cr_assert_eq(p->h.buf_alloc, 512 * 1024);
	free(p);
	cr_assert_eq(conn_of(&c, 0).buf_alloc, 512 * 1024);

	/* shrinking: an update goes out, but the window's right edge does not
	 * move back; the smaller size takes effect as bytes are consumed */
	cr_assert_eq(hx_set_buffer(&H, ci.id, 128 * 1024), 0);
	p = g_expect(&c, OP_CREDIT_UPDATE, TMO);
	cr_assert_eq(p->h.fwd_cnt + p->h.buf_alloc, 512 * 1024);
	free(p);
	ci = conn_of(&c, 0);
	cr_assert_eq(ci.buf_alloc, 128 * 1024);
	cr_assert_eq(ci.rx_free, 128 * 1024);

	fill_pattern(out, len, 26);
	hio_start(&io, fd, in, len, false);
	g_write(&c, out, len, 16384);
	cr_assert_eq(hio_join(&io), 0);
	cr_assert_arr_eq(in, out, len);
	while ((p = g_next(G(0), &c, 100)))   /* updates still in flight */
		free(p);
	cr_assert_geq(g_send(&c, OP_CREDIT_REQUEST, 0, NULL, 0), 0);
	p = g_expect(&c, OP_CREDIT_UPDATE, TMO);
	cr_assert_eq(p->h.buf_alloc, 128 * 1024);
	cr_assert_eq(p->h.fwd_cnt, (uint32_t)len);
	free(p);

	cr_assert_eq(hx_set_buffer(&H, ci.id, 0), -EINVAL);
	cr_assert_eq(hx_set_buffer(&H, ci.id, (1u << 30) + 1), -EINVAL);
	cr_assert_eq(hx_set_buffer(&H, 999999, 4096), -ENOENT);
	close(fd);
	close(lfd);
	free(out);
	free(in);
}

Test(credit, seqpacket_message_waits_and_asks_for_credit)
{
	uint8_t m[5000], rec[5000];
	struct pkt *p;
	struct gc c;
	int lfd, fd, k;
	size_t got;

	lfd = listen_port(0, 1312, SOCK_SEQPACKET);
	gc_init(&c, G(0), SEQ, 40032, VSOCK_CID_HOST, 1312);
	c.buf_alloc = 8192;
	c.auto_credit = false;
	cr_assert_eq(g_connect(&c), 0);
	fd = h_accept(lfd, TMO);
	for (k = 0; k < 2; k++) {
		fill_pattern(m, sizeof(m), 50 + (uint32_t)k);
		cr_assert_eq(send(fd, m, sizeof(m), 0), (ssize_t)sizeof(m));
	}
	/* the first fits */
	for (got = 0; got < sizeof(m); got += p->len, free(p)) {
		p = g_expect(&c, OP_RW, TMO);
		memcpy(rec + got, p->data, p->len);
	}
	fill_pattern(m, sizeof(m), 50);
	cr_assert_arr_eq(rec, m, sizeof(m));
	/* the second needs 5000, 3192 are free: it is not split across the
	 * window, the guest is asked for credit instead */
	p = g_next(G(0), &c, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_CREDIT_REQUEST);
	free(p);
	cr_assert(g_quiet(G(0), &c, QUIET));
	c.fwd_cnt += sizeof(m);
	cr_assert_geq(g_send(&c, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	for (got = 0; got < sizeof(m); got += p->len, free(p)) {
		p = g_expect(&c, OP_RW, TMO);
		memcpy(rec + got, p->data, p->len);
	}
	fill_pattern(m, sizeof(m), 51);
	cr_assert_arr_eq(rec, m, sizeof(m));
	close(fd);
	close(lfd);
}
