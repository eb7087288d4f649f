/*
 * The virtio-vsock engine (transports/virtio/{vsock,host,router,txbuf}.c)
 * end to end: the backend on a loop thread, the in-process driver playing
 * QEMU and the guest, host programs on real Unix sockets. Every op, credit
 * edge cases, half-close both ways, SEQPACKET boundaries, hybrid handshakes
 * good and bad, hostile guests, the data-path rules (batching, direct
 * control packets, bounded memory), sibling routing, control calls.
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

#include <criterion/criterion.h>

#include "harness.h"

#define STREAM VIRTIO_VSOCK_TYPE_STREAM
#define SEQ VIRTIO_VSOCK_TYPE_SEQPACKET
#define OP_REQUEST VIRTIO_VSOCK_OP_REQUEST
#define OP_RESPONSE VIRTIO_VSOCK_OP_RESPONSE
#define OP_RST VIRTIO_VSOCK_OP_RST
#define OP_SHUTDOWN VIRTIO_VSOCK_OP_SHUTDOWN
#define OP_RW VIRTIO_VSOCK_OP_RW
#define OP_CREDIT_UPDATE VIRTIO_VSOCK_OP_CREDIT_UPDATE
#define OP_CREDIT_REQUEST VIRTIO_VSOCK_OP_CREDIT_REQUEST
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)

static struct hx H;
#define G(i) (&H.v[i].g)

static void setup1(void)
{
	hx_init(&H);
	cr_assert_eq(hx_vm(&H, 0, NULL), 0);
	hx_open(&H, 0, NULL);
}

static void setup_bare(void)
{
	hx_init(&H);
}

static void teardown(void)
{
	hx_fini(&H);
}

TestSuite(engine, .init = setup1, .fini = teardown, .timeout = 60);
TestSuite(hybrid, .init = setup1, .fini = teardown, .timeout = 60);
TestSuite(credit, .init = setup1, .fini = teardown, .timeout = 60);
TestSuite(hostile, .init = setup1, .fini = teardown, .timeout = 60);
TestSuite(datapath, .init = setup1, .fini = teardown, .timeout = 120);
TestSuite(sibling, .init = setup_bare, .fini = teardown, .timeout = 60);
TestSuite(threads, .init = setup_bare, .fini = teardown, .timeout = 60);
TestSuite(control, .init = setup1, .fini = teardown, .timeout = 60);
TestSuite(config, .init = setup_bare, .fini = teardown, .timeout = 60);

/* ---- helpers ---- */

static int listen_port(unsigned vm, uint32_t port, int type)
{
	char path[128];

	snprintf(path, sizeof(path), "%s_%u", H.v[vm].uds, port);
	return h_listen(path, type);
}

/* Guest port @lport connects to host port @hport (a listener made here). */
static void g2h_open(struct gc *c, unsigned vm, uint16_t type, uint32_t lport,
		     uint32_t hport, int *lfd, int *afd)
{
	*lfd = listen_port(vm, hport, type == SEQ ? SOCK_SEQPACKET : SOCK_STREAM);
	gc_init(c, G(vm), type, lport, VSOCK_CID_HOST, hport);
	cr_assert_eq(g_connect(c), 0, "guest connect to host port %u refused", hport);
	*afd = h_accept(*lfd, TMO);
	cr_assert_geq(*afd, 0);
}

/* A host program connects to guest port @gport through the hybrid socket;
 * the guest accepts. Returns the host port from "OK <port>". */
static uint32_t h2g_open(struct gc *c, unsigned vm, uint32_t gport, int *hfd,
			 const char *extra)
{
	char line[64], want[32];
	struct pkt *p;

	snprintf(line, sizeof(line), "CONNECT %u\n%s", gport, extra ? extra : "");
	*hfd = h_dial(H.v[vm].uds, line);
	p = g_next(G(vm), NULL, TMO);
	cr_assert_not_null(p, "no REQUEST for CONNECT %u", gport);
	cr_assert_eq(p->h.op, OP_REQUEST);
	cr_assert_eq(p->h.src_cid, VSOCK_CID_HOST);
	cr_assert_eq(p->h.dst_cid, H.v[vm].cid);
	cr_assert_eq(p->h.dst_port, gport);
	cr_assert_eq(p->h.type, STREAM);
	gc_init(c, G(vm), STREAM, gport, VSOCK_CID_HOST, p->h.src_port);
	c->peer_buf = p->h.buf_alloc;
	c->peer_fwd = p->h.fwd_cnt;
	free(p);
	cr_assert_geq(g_send(c, OP_RESPONSE, 0, NULL, 0), 0);
	cr_assert_gt(h_read_line(*hfd, line, sizeof(line), TMO), 0);
	snprintf(want, sizeof(want), "OK %u\n", c->pport);
	cr_assert_str_eq(line, want);
	return c->pport;
}

static struct vsxb_conn_info conn_of(const struct gc *c, unsigned vm)
{
	struct vsxb_conn_info all[64];
	unsigned n = hx_conns(&H, (int)vm, all, 64), i;

	for (i = 0; i < n && i < 64; i++)
		if (all[i].guest_port == c->lport && all[i].peer_port == c->pport &&
		    all[i].peer_cid == c->pcid)
			return all[i];
	cr_assert_fail("connection %u -> %llu:%u not found", c->lport,
		       (unsigned long long)c->pcid, c->pport);
	return all[0];
}

static bool conn_gone(const struct gc *c, unsigned vm, int timeout_ms)
{
	int64_t deadline = vsx__now_ms() + timeout_ms;
	struct vsxb_conn_info all[64];
	unsigned n, i;
	bool found;

	do {
		n = hx_conns(&H, (int)vm, all, 64);
		found = false;
		for (i = 0; i < n && i < 64; i++)
			if (all[i].guest_port == c->lport && all[i].peer_port == c->pport &&
			    all[i].peer_cid == c->pcid)
				found = true;
		if (!found)
			return true;
		usleep(5000);
	} while (vsx__now_ms() < deadline);
	return false;
}

/* A quick echo check that connection @c (guest side) and @fd (host side)
 * still work both ways. */
static void still_works(struct gc *c, int fd)
{
	char buf[64], back[64];

	fill_pattern(buf, sizeof(buf), c->lport);
	g_write(c, buf, sizeof(buf), sizeof(buf));
	cr_assert_eq(h_read_full(fd, back, sizeof(back), TMO), 0);
	cr_assert_arr_eq(back, buf, sizeof(buf));
	cr_assert_eq(h_write_full(fd, buf, sizeof(buf), TMO), 0);
	g_read(c, back, sizeof(back));
	cr_assert_arr_eq(back, buf, sizeof(buf));
}

/* ---- engine: device, connections, every op ---- */

Test(engine, device_config)
{
	uint64_t f = drv_features(G(0)->d);

	cr_assert_eq(drv_cid(G(0)->d), 3);
	cr_assert(f & (1ull << VIRTIO_VSOCK_F_SEQPACKET), "SEQPACKET not offered");
}

Test(engine, guest_to_host_stream_bytes)
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

Test(engine, guest_to_missing_host_port_is_reset)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 40001, VSOCK_CID_HOST, 4444);
	cr_assert_eq(g_connect(&c), OP_RST);
	cr_assert_eq(hx_conns(&H, 0, NULL, 0), 0);
}

Test(engine, guest_to_unknown_cid_is_reset)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 40002, 77, 1234);
	cr_assert_eq(g_connect(&c), OP_RST);
	gc_init(&c, G(0), STREAM, 40002, 1, 1234);   /* local */
	cr_assert_eq(g_connect(&c), OP_RST);
	gc_init(&c, G(0), STREAM, 40002, 3, 1234);   /* itself */
	cr_assert_eq(g_connect(&c), OP_RST);
}

Test(engine, rst_is_never_answered)
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

Test(engine, guest_rst_closes_host_socket)
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

Test(engine, guest_shutdown_send_half_close)
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

Test(engine, host_shutdown_write_half_close)
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

Test(engine, guest_shutdown_rcv_stops_host_writes)
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

Test(engine, clean_close_after_data_in_flight)
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

Test(engine, seqpacket_boundaries_guest_to_host_and_back)
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

Test(engine, seqpacket_to_stream_listener_is_reset)
{
	struct gc c;
	int lfd;

	lfd = listen_port(0, 1241, SOCK_STREAM);
	gc_init(&c, G(0), SEQ, 40011, VSOCK_CID_HOST, 1241);
	cr_assert_eq(g_connect(&c), OP_RST);
	close(lfd);
}

Test(engine, seqpacket_unnegotiated_is_refused)
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

Test(engine, connection_ids_unique_never_reused)
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

Test(engine, request_on_existing_connection_resets_it)
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

/* ---- hybrid: host programs through uds_path ---- */

Test(hybrid, connect_ok_and_data_after_line)
{
	char buf[64];
	struct gc c;
	uint32_t port;
	int fd;

	/* the program writes data right behind its CONNECT line */
	port = h2g_open(&c, 0, 5000, &fd, "early bytes");
	cr_assert_geq(port, 1024);
	g_read(&c, buf, 11);
	cr_assert_arr_eq(buf, "early bytes", 11);
	still_works(&c, fd);
	cr_assert(!conn_of(&c, 0).guest_initiated);
	close(fd);
}

Test(hybrid, host_ports_allocated_and_distinct)
{
	struct gc c1, c2, c3;
	int f1, f2, f3;

	cr_assert_eq(h2g_open(&c1, 0, 5000, &f1, NULL), 1024);
	cr_assert_eq(h2g_open(&c2, 0, 5000, &f2, NULL), 1025);
	cr_assert_eq(h2g_open(&c3, 0, 5001, &f3, NULL), 1026);
	still_works(&c1, f1);
	still_works(&c2, f2);
	still_works(&c3, f3);
	close(f1);
	close(f2);
	close(f3);
}

Test(hybrid, guest_refuses)
{
	struct pkt *p;
	struct gc c;
	int fd;

	fd = h_dial(H.v[0].uds, "CONNECT 5002\n");
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_REQUEST);
	gc_init(&c, G(0), STREAM, 5002, VSOCK_CID_HOST, p->h.src_port);
	free(p);
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	cr_assert_eq(h_eof(fd, TMO), 0, "socket not closed without reply");
	cr_assert(conn_gone(&c, 0, TMO));
	close(fd);
}

Test(hybrid, guest_never_answers)
{
	struct pkt *p;
	struct gc c;
	uint64_t t0;
	int fd;

	hx_timeouts(&H, 0, 300, 0);
	fd = h_dial(H.v[0].uds, "CONNECT 5003\n");
	t0 = vsx__now_ms();
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_REQUEST);
	gc_init(&c, G(0), STREAM, 5003, VSOCK_CID_HOST, p->h.src_port);
	free(p);
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert_geq(vsx__now_ms() - t0, 250);
	/* and the guest is told to forget the half-open connection */
	free(g_expect(&c, OP_RST, TMO));
	close(fd);
}

/* The program gives up before the guest answers: the guest is told at once,
 * not when the (here 60 s) connect timeout fires. */
Test(hybrid, program_gives_up_before_guest_answers)
{
	struct vsxb_conn_info ci[4];
	struct pkt *p;
	struct gc c;
	int fd;

	hx_timeouts(&H, 0, 60000, 0);
	fd = h_dial(H.v[0].uds, "CONNECT 5004\n");
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_REQUEST);
	gc_init(&c, G(0), STREAM, 5004, VSOCK_CID_HOST, p->h.src_port);
	free(p);
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 1);
	close(fd);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert(conn_gone(&c, 0, TMO));
	/* a RESPONSE that crossed the RST meets another RST, nothing else */
	cr_assert_geq(g_send(&c, OP_RESPONSE, 0, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 0);
}

Test(hybrid, bad_lines_closed_without_reply)
{
	static const char *bad[] = {
		"CONNECT\n", "CONNECT \n", "CONNECT x\n", "CONNECT  5\n", "CONNECT 5 \n",
		"CONNECT +5\n", "CONNECT -5\n", "CONNECT 5\r\n", "connect 5\n",
		"CONNECT 4294967295\n", "CONNECT 4294967296\n",
		"CONNECT 99999999999999999999\n", "CONNECT 0x10\n",
		"CONNECT 12345678901234567890123456789012345\n",
		"0123456789012345678901234567890123456789", "\n", "OK 5\n",
	};
	char buf[8];
	unsigned i;
	int fd;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc;

		fd = h_dial(H.v[0].uds, bad[i]);
		rc = h_eof(fd, TMO);
		/* closed with our bytes unread is a reset: also no reply */
		cr_assert(rc == 0 || rc == -ECONNRESET, "line %u not refused (%d)", i, rc);
		close(fd);
	}
	cr_assert(g_quiet(G(0), NULL, QUIET), "a bad line reached the guest");
	/* still serving */
	{
		struct gc c;

		h2g_open(&c, 0, 5004, &fd, NULL);
		still_works(&c, fd);
		close(fd);
	}
	(void)buf;
}

Test(hybrid, slowloris_timed_out)
{
	uint64_t t0;
	int fd, fd2;
	struct gc c;

	hx_timeouts(&H, 300, 0, 0);
	fd = h_dial(H.v[0].uds, "CONN");
	t0 = vsx__now_ms();
	/* a line delivered byte by byte within the time is fine */
	fd2 = h_dial(H.v[0].uds, NULL);
	cr_assert_eq(write(fd2, "CONNECT ", 8), 8);
	usleep(50000);
	cr_assert_eq(write(fd2, "50", 2), 2);
	usleep(50000);
	cr_assert_eq(write(fd2, "05\n", 3), 3);
	{
		struct pkt *p = g_next(G(0), NULL, TMO);

		cr_assert_not_null(p);
		cr_assert_eq(p->h.op, OP_REQUEST);
		cr_assert_eq(p->h.dst_port, 5005);
		gc_init(&c, G(0), STREAM, 5005, VSOCK_CID_HOST, p->h.src_port);
		free(p);
		cr_assert_geq(g_send(&c, OP_RESPONSE, 0, NULL, 0), 0);
	}
	cr_assert_eq(h_eof(fd, TMO), 0, "slow client kept");
	cr_assert_geq(vsx__now_ms() - t0, 250);
	{
		char line[32];

		cr_assert_gt(h_read_line(fd2, line, sizeof(line), TMO), 0);
		cr_assert_eq(strncmp(line, "OK ", 3), 0);
	}
	close(fd);
	close(fd2);
}

Test(hybrid, many_clients_bounded)
{
	int fds[80], i, n = 0;

	/* More half-open clients than the handshake limit: the extra ones are
	 * closed at once, the others by the timeout; the guest sees nothing. */
	hx_timeouts(&H, 400, 0, 0);
	for (i = 0; i < 80; i++)
		fds[i] = h_dial(H.v[0].uds, "CONNECT 1");
	for (i = 0; i < 80; i++) {
		int rc = h_eof(fds[i], 2 * TMO);

		if (rc == 0 || rc == -ECONNRESET)
			n++;
		close(fds[i]);
	}
	cr_assert_eq(n, 80);
	cr_assert(g_quiet(G(0), NULL, QUIET));
}

Test(hybrid, uds_path_mode_0600)
{
	struct stat st;

	cr_assert_eq(stat(H.v[0].uds, &st), 0);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600);
}

/* ---- credit ---- */

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

/* ---- hostile guests ---- */

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

/* ---- data path rules ---- */

Test(datapath, small_packets_batched_into_one_write)
{
	struct vsxb_engine_stats a, b;
	char buf[100 * 64], back[100 * 64];
	struct gc c;
	int lfd, fd, i;

	g2h_open(&c, 0, STREAM, 43000, 1280, &lfd, &fd);
	fill_pattern(buf, sizeof(buf), 30);
	hx_stats(&H, 0, &a);
	hx_pause(&H);
	for (i = 0; i < 100; i++)
		cr_assert_geq(g_send(&c, OP_RW, 0, buf + 64 * i, 64), 0);
	hx_unpause(&H);
	cr_assert_eq(h_read_full(fd, back, sizeof(back), TMO), 0);
	cr_assert_arr_eq(back, buf, sizeof(buf));
	hx_sync(&H);
	hx_stats(&H, 0, &b);
	cr_assert_eq(b.tx_pkts - a.tx_pkts, 100);
	cr_assert_eq(b.host_writes - a.host_writes, 1,
		     "%llu writes for 100 packets popped in one kick",
		     (unsigned long long)(b.host_writes - a.host_writes));
	cr_assert_eq(b.tx_rounds - a.tx_rounds, 1);
	close(fd);
	close(lfd);
}

/*
 * One RW packet of @c whose header and payload, contiguous in the scratch
 * area at @at, are cut into descriptors of the @nseg lengths in @seg (they
 * sum to 44 + @plen): the boundaries a guest driver may choose.
 */
static void chain_packet(struct gc *c, const void *payload, uint32_t plen,
			 const uint32_t *seg, unsigned nseg, uint64_t at)
{
	struct virtio_vsock_hdr h = {
		.src_cid = c->g->cid,
		.dst_cid = c->pcid,
		.src_port = c->lport,
		.dst_port = c->pport,
		.len = plen,
		.type = c->type,
		.op = OP_RW,
		.buf_alloc = c->buf_alloc,
		.fwd_cnt = c->fwd_cnt,
	};
	uint64_t scratch, addr[64], pos;
	uint32_t len[64], sum = 0;
	uint16_t flags[64], next[64];
	size_t slen;
	uint8_t *p;
	unsigned i;

	cr_assert_leq(nseg, 64);
	scratch = drv_scratch(c->g->d, &slen);
	cr_assert_leq(at + sizeof(h) + plen, slen / 2, "keep to the lower region");
	p = drv_mem(c->g->d, scratch + at, sizeof(h) + plen);
	eng_hdr_swap(&h);
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), payload, plen);
	for (i = 0, pos = scratch + at; i < nseg; pos += seg[i], i++) {
		addr[i] = pos;
		len[i] = seg[i];
		flags[i] = i + 1 < nseg ? 1 : 0; /* VRING_DESC_F_NEXT */
		next[i] = (uint16_t)(i + 1);
		sum += seg[i];
	}
	cr_assert_eq(sum, sizeof(h) + plen);
	cr_assert_geq(drv_send_raw(c->g->d, addr, len, flags, next, nseg), 0);
	c->last_fwd_sent = c->fwd_cnt;
	c->tx_cnt += plen;
}

/* A TX packet split across descriptors at any boundary is the same packet:
 * the header alone, the header with part of the payload, the header itself
 * cut (even inside a field), many small descriptors, and a 64 KiB payload in
 * pages after a short linear part (the 6.12 driver's nonlinear skbs). */
Test(datapath, tx_chain_split_at_any_boundary)
{
	static const uint32_t s_alone[] = { 44, 1000 };
	static const uint32_t s_part[] = { 44 + 300, 700 };
	static const uint32_t s_hdr[] = { 20, 24, 1000 };
	static const uint32_t s_field[] = { 1, 43 + 10, 990 };
	static const uint32_t s_three[] = { 30, 14 + 1, 998 };
	uint32_t s_many[60], s_pages[18];
	struct {
		const uint32_t *seg;
		unsigned n;
		uint32_t plen;
	} t[] = {
		{ s_alone, 2, 1000 }, { s_part, 2, 1000 }, { s_hdr, 3, 1000 },
		{ s_field, 3, 1000 }, { s_three, 3, 999 }, { s_many, 60, 0 },
		{ s_pages, 18, 65536 },
	};
	struct vsxb_engine_stats a, b;
	uint8_t *out, *in;
	size_t total = 0, off = 0;
	unsigned i;
	struct gc c;
	int lfd, fd;

	/* 44 bytes of header in 4 descriptors of 11, then 56 of 37 bytes */
	for (i = 0; i < 60; i++)
		s_many[i] = i < 4 ? 11 : 37;
	t[5].plen = 56 * 37;
	/* header alone, 100 bytes of linear part, 16 pages and what is left */
	s_pages[0] = 44;
	s_pages[1] = 100;
	for (i = 2; i < 18; i++)
		s_pages[i] = 4096;
	s_pages[17] = 65536 - 100 - 15 * 4096;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		total += t[i].plen;
	out = malloc(total);
	in = malloc(total);
	fill_pattern(out, total, 612);
	g2h_open(&c, 0, STREAM, 43100, 1290, &lfd, &fd);
	hx_stats(&H, 0, &a);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		chain_packet(&c, out + off, t[i].plen, t[i].seg, t[i].n, 0);
		/* read back before the next one reuses the scratch area */
		cr_assert_eq(h_read_full(fd, in + off, t[i].plen, TMO), 0, "chain %u", i);
		cr_assert_arr_eq(in + off, out + off, t[i].plen, "chain %u", i);
		off += t[i].plen;
	}
	hx_sync(&H);
	hx_stats(&H, 0, &b);
	cr_assert_eq(b.tx_pkts - a.tx_pkts, sizeof(t) / sizeof(t[0]));
	cr_assert_eq(b.dropped, a.dropped, "a split chain was dropped");
	cr_assert_eq(conn_of(&c, 0).from_guest_bytes, total);
	still_works(&c, fd);
	close(fd);
	close(lfd);
	free(out);
	free(in);
}

Test(datapath, host_data_read_straight_into_rx_buffers)
{
	size_t len = 64 * 1024;
	char *buf = malloc(len), *back = malloc(len);
	struct vsxb_engine_stats a, b;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 43001, 1281, &lfd, &fd);
	fill_pattern(buf, len, 31);
	hx_stats(&H, 0, &a);
	hx_pause(&H);
	cr_assert_eq(h_write_full(fd, buf, len, TMO), 0);
	hx_unpause(&H);
	g_read(&c, back, len);
	cr_assert_arr_eq(back, buf, len);
	hx_sync(&H);
	hx_stats(&H, 0, &b);
	/* 64 KiB available at once: one readv into 16 RX buffers (a second
	 * read may find the socket empty), one flush */
	cr_assert_leq(b.host_reads - a.host_reads, 2);
	cr_assert_eq(b.rx_pkts - a.rx_pkts, 16);
	cr_assert_leq(b.rx_flushes - a.rx_flushes, 2);
	close(fd);
	close(lfd);
	free(buf);
	free(back);
}

/* Small host writes that piled up while the guest took nothing go out
 * merged, as full RX buffers: 60 writes of 1..60 bytes, one packet (a
 * guest kernel that queues one skb per packet must not be handed a skb per
 * write: Linux 6.12 bounds a socket's skb overhead by its buffer). */
Test(datapath, small_host_writes_merged_into_rx_buffers)
{
	uint8_t out[4096], in[4096];
	struct vsxb_engine_stats a, b;
	size_t total = 0;
	unsigned i;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 43002, 1282, &lfd, &fd);
	fill_pattern(out, sizeof(out), 32);
	hx_stats(&H, 0, &a);
	hx_pause(&H);
	for (i = 0; i < 60; i++) {
		size_t n = 1 + i;

		cr_assert_eq(h_write_full(fd, out + total, n, TMO), 0);
		total += n;
	}
	hx_unpause(&H);
	g_read(&c, in, total);
	cr_assert_arr_eq(in, out, total);
	hx_sync(&H);
	hx_stats(&H, 0, &b);
	cr_assert_eq(b.rx_pkts - a.rx_pkts, 1, "%llu packets for 60 writes (%zu bytes)",
		     (unsigned long long)(b.rx_pkts - a.rx_pkts), total);
	close(fd);
	close(lfd);
}

Test(datapath, control_packets_go_straight_into_rx)
{
	struct vsxb_engine_stats a, b;
	struct gc c;
	int lfd, fd, i;

	g2h_open(&c, 0, STREAM, 43002, 1282, &lfd, &fd);
	hx_stats(&H, 0, &a);
	for (i = 0; i < 10; i++) {
		cr_assert_geq(g_send(&c, OP_CREDIT_REQUEST, 0, NULL, 0), 0);
		free(g_expect(&c, OP_CREDIT_UPDATE, TMO));
	}
	hx_stats(&H, 0, &b);
	cr_assert_eq(b.ctrl_direct - a.ctrl_direct, 10);
	cr_assert_eq(b.ctrl_queued - a.ctrl_queued, 0);
	close(fd);
	close(lfd);
}

Test(datapath, guest_without_rx_buffers_bounded)
{
	struct drv_opts o = { .queue_size = 64 };
	struct gc c[80], x;
	struct vsxb_engine_stats st;
	int lfd, fds[80], i, resp = 0;
	struct pkt *p;

	hx_close_drv(&H, 0);
	hx_open(&H, 0, &o);
	lfd = listen_port(0, 1283, SOCK_STREAM);
	/* 80 connections, answers never read: the RX ring (64) runs dry */
	for (i = 0; i < 80; i++) {
		gc_init(&c[i], G(0), STREAM, 44000 + (uint32_t)i, 2, 1283);
		cr_assert_geq(g_send(&c[i], OP_REQUEST, 0, NULL, 0), 0);
		fds[i] = h_accept(lfd, TMO);
		cr_assert_geq(fds[i], 0);
	}
	/* and 100 packets for nobody: at most ENG_ORPHAN_MAX RSTs are kept */
	for (i = 0; i < 100; i++) {
		gc_init(&x, G(0), STREAM, 45000 + (uint32_t)i, 2, 1283);
		cr_assert_geq(g_send(&x, OP_RW, 0, "q", 1), 0);
	}
	hx_sync(&H);
	hx_stats(&H, 0, &st);
	cr_assert_eq(st.orphans_dropped, 100 - ENG_ORPHAN_MAX);
	/* reading now: every connection gets exactly one RESPONSE */
	for (i = 0; i < 80; i++) {
		p = g_next(G(0), &c[i], TMO);
		cr_assert_not_null(p, "no RESPONSE for connection %d", i);
		resp += p->h.op == OP_RESPONSE;
		free(p);
		cr_assert(g_quiet(G(0), &c[i], 0));
	}
	cr_assert_eq(resp, 80);
	hx_stats(&H, 0, &st);
	cr_assert_geq(st.ctrl_queued, 16, "%llu control packets waited",
		      (unsigned long long)st.ctrl_queued);
	for (i = 0; i < 80; i++)
		close(fds[i]);
	close(lfd);
}

static void flood(uint32_t buf_alloc)
{
	struct vsxb_conn_info ci;
	size_t mem = 0, sent = 0;
	struct gc c;
	int lfd, fd;
	char b = 'f';

	cr_assert_eq(hx_default_buffer(&H, 0, buf_alloc), 0);
	g2h_open(&c, 0, STREAM, 43003, 1284, &lfd, &fd);
	cr_assert_eq(c.peer_buf, buf_alloc);
	/* the host reader never reads: 1-byte packets until no credit is left
	 * (the host socket's own buffer takes some first) */
	for (;;) {
		if (!g_credit(&c)) {
			struct pkt *p = g_next(G(0), &c, 100);

			if (!p)
				break;
			cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
			free(p);
			continue;
		}
		cr_assert_geq(g_send(&c, OP_RW, 0, &b, 1), 0);
		sent++;
	}
	hx_sync(&H);
	ci = conn_of(&c, 0);
	cr_assert_eq(hx_conn_mem(&H, ci.id, &mem), 0);
	fprintf(stderr, "flood: %zu bytes sent, %u queued, %zu bytes of memory (buf_alloc %u)\n",
		sent, ci.queued, mem, buf_alloc);
	cr_assert_gt(ci.queued, 0);
	cr_assert_leq(ci.queued, buf_alloc);
	cr_assert_leq(mem, (size_t)buf_alloc * 5 / 4, "memory %zu above 1.25 x %u", mem,
		      buf_alloc);
	cr_assert_eq(ci.rx_free, 0);
	/* one more byte is beyond the credit: reset */
	cr_assert_geq(g_send(&c, OP_RW, 0, &b, 1), 0);
	free(g_expect(&c, OP_RST, TMO));
	close(fd);
	close(lfd);
}

Test(datapath, one_byte_flood_memory_bounded)
{
	flood(64 * 1024);
}

Test(datapath, one_byte_flood_memory_bounded_small_buffer)
{
	flood(3000);
}

Test(datapath, many_connections_interleaved)
{
	enum { N = 8 };
	size_t len = 256 * 1024;
	uint8_t *out[N], *in[N];
	struct hio io[N];
	struct gc c[N];
	int lfd[N], fd[N], i;
	size_t off;

	for (i = 0; i < N; i++) {
		g2h_open(&c[i], 0, STREAM, 46000 + (uint32_t)i, 1290 + (uint32_t)i,
			 &lfd[i], &fd[i]);
		out[i] = malloc(len);
		in[i] = malloc(len);
		fill_pattern(out[i], len, 100 + (uint32_t)i);
	}
	/* host -> guest on all at once, the guest reading round robin */
	for (i = 0; i < N; i++)
		hio_start(&io[i], fd[i], out[i], len, true);
	for (off = 0; off < len; off += 8192)
		for (i = 0; i < N; i++)
			g_read(&c[i], in[i] + off, 8192);
	for (i = 0; i < N; i++) {
		cr_assert_eq(hio_join(&io[i]), 0);
		cr_assert_arr_eq(in[i], out[i], len);
		close(fd[i]);
		close(lfd[i]);
		free(out[i]);
		free(in[i]);
	}
}

/* ---- device lifetime ---- */

Test(control, front_end_gone_resets_and_next_start_says_so)
{
	struct vsxb_conn_info ci[4];
	struct gc c;
	uint32_t id = 7;
	int lfd, fd, hfd;

	g2h_open(&c, 0, STREAM, 47000, 1300, &lfd, &fd);
	{
		struct gc h;

		h2g_open(&h, 0, 7000, &hfd, NULL);
	}
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 2);
	hx_close_drv(&H, 0);      /* QEMU gone */
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert_eq(h_eof(hfd, TMO), 0);
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 0);
	hx_open(&H, 0, NULL);     /* QEMU back */
	cr_assert_eq(drv_recv_event(G(0)->d, &id, TMO), 0);
	cr_assert_eq(id, VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	close(fd);
	g2h_open(&c, 0, STREAM, 47000, 1300, &lfd, &fd);
	still_works(&c, fd);
	close(fd);
	close(hfd);
	close(lfd);
}

/* Every device start resets the transport, the first one included: the
 * front-end may be reconnecting a running guest to a restarted vsxd, whose
 * sockets this process never saw. Exactly one event per start. */
Test(control, every_start_sends_one_reset_event)
{
	uint32_t id = 7;

	cr_assert_eq(drv_recv_event(G(0)->d, &id, TMO), 0);
	cr_assert_eq(id, VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	cr_assert_eq(drv_recv_event(G(0)->d, &id, QUIET), -ETIMEDOUT);
}

Test(control, close_graceful_then_reset_after_linger)
{
	struct vsxb_conn_info ci;
	struct pkt *p;
	struct gc c;
	uint64_t t0;
	int lfd, fd;

	hx_timeouts(&H, 0, 0, 400);
	g2h_open(&c, 0, STREAM, 47001, 1301, &lfd, &fd);
	ci = conn_of(&c, 0);
	t0 = vsx__now_ms();
	cr_assert_eq(hx_close_conn(&H, ci.id, false), 0);
	p = g_expect(&c, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, SHUT_BOTH);
	free(p);
	cr_assert_eq(conn_of(&c, 0).host_shut, SHUT_BOTH);
	/* the guest does not finish: RST after the linger time */
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_geq(vsx__now_ms() - t0, 350);
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	close(fd);
	close(lfd);
}

Test(control, close_graceful_guest_answers)
{
	struct vsxb_conn_info ci;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 47002, 1302, &lfd, &fd);
	ci = conn_of(&c, 0);
	cr_assert_eq(hx_close_conn(&H, ci.id, false), 0);
	free(g_expect(&c, OP_SHUTDOWN, TMO));
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert(g_quiet(G(0), &c, QUIET));
	close(fd);
	close(lfd);
}

Test(control, reset_now)
{
	struct vsxb_conn_info ci;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 47003, 1303, &lfd, &fd);
	ci = conn_of(&c, 0);
	cr_assert_eq(hx_close_conn(&H, ci.id, true), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	cr_assert_eq(hx_close_conn(&H, ci.id, true), -ENOENT);
	close(fd);
	close(lfd);
}

/* What the host socket can hold: vsxd raises a Unix host socket's SO_SNDBUF
 * to the connection's buffer, so a whole window of guest data goes into
 * the kernel while the program is not reading, nothing stays queued in
 * vsxd. W is the largest window net.core.wmem_max lets us check. */
static long wmem_max(void)
{
	FILE *f = fopen("/proc/sys/net/core/wmem_max", "r");
	long max = 0;

	if (f) {
		if (fscanf(f, "%ld", &max) != 1)
			max = 0;
		fclose(f);
	}
	return max;
}

static uint32_t sndbuf_window(void)
{
	long max = wmem_max();

	if (max > 1024 * 1024)
		max = 1024 * 1024;
	return (uint32_t)max & ~0xffffu;
}

static void window_lands_in_kernel(struct gc *c, int fd, uint32_t w, uint32_t seed)
{
	uint8_t *out = malloc(w), *in = malloc(w);
	struct vsxb_conn_info ci;
	int64_t end = vsx__now_ms() + TMO;
	int inq = 0;

	cr_assert(out && in);
	fill_pattern(out, w, seed);
	g_write(c, out, w, 65536);
	/* everything vsxd took from the guest is in the socket, none held */
	do {
		ci = conn_of(c, 0);
		cr_assert_eq(ioctl(fd, FIONREAD, &inq), 0);
		if (ci.from_guest_bytes == w && ci.queued == 0 && (uint32_t)inq == w)
			break;
		usleep(10000);
	} while (vsx__now_ms() < end);
	cr_assert_eq(ci.from_guest_bytes, w);
	cr_assert_eq(ci.queued, 0, "%u bytes queued in vsxd, %d in the socket", ci.queued, inq);
	cr_assert_eq((uint32_t)inq, w);
	cr_assert_eq(h_read_full(fd, in, w, TMO), 0);
	cr_assert_arr_eq(in, out, w);
	free(out);
	free(in);
}

Test(datapath, host_socket_holds_a_whole_window)
{
	uint32_t w = sndbuf_window();
	struct pkt *p;
	struct gc c, d;
	int lfd, fd, lfd2, fd2;

	if (w <= VSXB_DEFAULT_BUF_ALLOC)
		cr_skip_test("net.core.wmem_max allows no send buffer above %u bytes",
			     VSXB_DEFAULT_BUF_ALLOC);
	/* a new connection with the larger default */
	cr_assert_eq(hx_default_buffer(&H, 0, w), 0);
	g2h_open(&c, 0, STREAM, 47010, 1310, &lfd, &fd);
	cr_assert_eq(c.peer_buf, w);
	window_lands_in_kernel(&c, fd, w, 10);

	/* a connection made at the old default and raised later */
	cr_assert_eq(hx_default_buffer(&H, 0, VSXB_DEFAULT_BUF_ALLOC), 0);
	g2h_open(&d, 0, STREAM, 47011, 1311, &lfd2, &fd2);
	cr_assert_eq(hx_set_buffer(&H, conn_of(&d, 0).id, w), 0);
	p = g_expect(&d, OP_CREDIT_UPDATE, TMO);
	cr_assert_eq(p->h.buf_alloc, w);
	d.peer_buf = w;
	free(p);
	window_lands_in_kernel(&d, fd2, w, 11);
	close(fd);
	close(lfd);
	close(fd2);
	close(lfd2);
}

/* The default window too: a Unix socket's default send buffer
 * (net.core.wmem_default, 208 KiB) is less than 256 KiB, so without the
 * raise vsxd would hold the rest of every window itself. */
Test(datapath, host_socket_holds_a_default_window)
{
	long max = wmem_max();
	struct gc c;
	int lfd, fd;

	/* the kernel doubles SO_SNDBUF; a window needs a little more than
	 * itself for the socket buffers' overhead */
	if (2 * max < VSXB_DEFAULT_BUF_ALLOC + VSXB_DEFAULT_BUF_ALLOC / 4)
		cr_skip_test("net.core.wmem_max (%ld) cannot hold a %u-byte window", max,
			     VSXB_DEFAULT_BUF_ALLOC);
	cr_assert_eq(hx_default_buffer(&H, 0, VSXB_DEFAULT_BUF_ALLOC), 0);
	g2h_open(&c, 0, STREAM, 47012, 1312, &lfd, &fd);
	cr_assert_eq(c.peer_buf, VSXB_DEFAULT_BUF_ALLOC);
	window_lands_in_kernel(&c, fd, VSXB_DEFAULT_BUF_ALLOC, 12);
	close(fd);
	close(lfd);
}

Test(control, default_buffer_per_vm)
{
	struct gc c;
	int lfd, fd;

	cr_assert_eq(hx_default_buffer(&H, 0, 0), -EINVAL);
	cr_assert_eq(hx_default_buffer(&H, 0, 100000), 0);
	g2h_open(&c, 0, STREAM, 47004, 1304, &lfd, &fd);
	cr_assert_eq(c.peer_buf, 100000);
	cr_assert_eq(conn_of(&c, 0).buf_alloc, 100000);
	close(fd);
	close(lfd);
}

Test(control, conn_info_fields)
{
	struct vsxb_conn_info ci;
	char buf[1000];
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 47005, 1305, &lfd, &fd);
	c.buf_alloc = 50000;
	fill_pattern(buf, sizeof(buf), 5);
	g_write(&c, buf, 300, 300);
	cr_assert_eq(h_write_full(fd, buf, 700, TMO), 0);
	{
		char back[700];

		c.auto_credit = false;
		g_read(&c, back, 700);
	}
	cr_assert_eq(h_read_full(fd, buf, 300, TMO), 0);
	hx_sync(&H);
	ci = conn_of(&c, 0);
	cr_assert_str_eq(ci.vm, "cid3");
	cr_assert_eq(ci.guest_cid, 3);
	cr_assert_eq(ci.guest_port, 47005);
	cr_assert_eq(ci.peer_cid, 2);
	cr_assert_eq(ci.peer_port, 1305);
	cr_assert_eq(ci.from_guest_bytes, 300);
	cr_assert_eq(ci.to_guest_bytes, 700);
	cr_assert_eq(ci.fwd_cnt, 300);
	cr_assert_eq(ci.rx_free, VSXB_DEFAULT_BUF_ALLOC);
	cr_assert_eq(ci.peer_buf_alloc, 50000);
	cr_assert_eq(ci.peer_fwd_cnt, 0);   /* the guest has not told us yet */
	cr_assert_eq(ci.tx_free, 50000 - 700);
	cr_assert_eq(ci.queued, 0);
	cr_assert_eq(ci.guest_shut, 0);
	cr_assert_eq(ci.host_shut, 0);
	close(fd);
	close(lfd);
}

/* ---- siblings ---- */

/* The sibling tests run twice: as sibling::NAME with both VMs on the
 * test's loop (peer_sibling.c), and as threads::sibling_NAME with each on
 * a loop thread of its own (peer_xsib.c); both guests must see the same. */
static bool sib_threads;

#define SIB_TEST(name) \
	static void sib_##name(void); \
	Test(sibling, name) { sib_##name(); } \
	Test(threads, sibling_##name) { sib_threads = true; sib_##name(); } \
	static void sib_##name(void)

static void two_vms_opts(const char *ga, const char *gb, const struct drv_opts *ob)
{
	struct vsxb_vm_config a = { .groups = ga }, b = { .groups = gb };

	if (sib_threads) {
		a.loop = hx_worker(&H, 0);
		b.loop = hx_worker(&H, 1);
	}

	cr_assert_eq(hx_vm(&H, 0, &a), 0);
	cr_assert_eq(hx_vm(&H, 1, &b), 0);
	hx_open(&H, 0, NULL);
	hx_open(&H, 1, ob);
}

static void two_vms(const char *ga, const char *gb)
{
	two_vms_opts(ga, gb, NULL);
}

/* A (vm0, cid 3) port @pa connects to B (vm1, cid 4) port @pb. */
static void sib_open(struct gc *a, struct gc *b, uint16_t type, uint32_t pa,
		     uint32_t pb, uint32_t b_buf)
{
	struct pkt *p;

	gc_init(a, G(0), type, pa, 4, pb);
	cr_assert_geq(g_send(a, OP_REQUEST, 0, NULL, 0), 0);
	gc_init(b, G(1), type, pb, 3, pa);
	b->buf_alloc = b_buf;
	p = g_expect(b, OP_REQUEST, TMO);
	cr_assert_eq(p->h.buf_alloc, a->buf_alloc);
	free(p);
	cr_assert_geq(g_send(b, OP_RESPONSE, 0, NULL, 0), 0);
	p = g_expect(a, OP_RESPONSE, TMO);
	cr_assert_eq(p->h.buf_alloc, b_buf < VSXB_SIBLING_WINDOW_MAX ? b_buf
							       : VSXB_SIBLING_WINDOW_MAX);
	free(p);
}

SIB_TEST(window_is_the_receivers_whatever_tx_buffer_size)
{
	static uint8_t chunk[32768];
	struct gc a, b, a2, b2, a3, b3;
	struct pkt *p;
	uint32_t sent = 0;

	two_vms(NULL, NULL);
	/* B's 8 MiB, not vsxd's 256 KiB tx-buffer-size */
	sib_open(&a, &b, STREAM, 50010, 6010, 8u << 20);
	cr_assert_eq(a.peer_buf, 8u << 20);
	/* what vsxd would hold for the pair is capped */
	sib_open(&a2, &b2, SEQ, 50011, 6011, 256u << 20);
	cr_assert_eq(a2.peer_buf, VSXB_SIBLING_WINDOW_MAX);

	/* B raises its buffer mid-connection: A hears of it before it runs
	 * out of the old window */
	sib_open(&a3, &b3, STREAM, 50012, 6012, 65536);
	b3.buf_alloc = 4u << 20;
	cr_assert_geq(g_send(&b3, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	while (sent < 65536 && a3.peer_buf == 65536) {
		cr_assert_gt(g_credit(&a3), 0, "A stalled at the old window");
		cr_assert_geq(g_send(&a3, OP_RW, 0, chunk, sizeof(chunk)), 0);
		sent += sizeof(chunk);
		while ((p = g_next(G(0), &a3, 50)))
			free(p);
	}
	cr_assert_eq(a3.peer_buf, 4u << 20);
	cr_assert_gt(g_credit(&a3), (4u << 20) - 65536);
}

/*
 * backend.test 8f's STREAM case as two Linux guests play it: A raises its
 * own buffer to 2 MiB after connecting, B after accepting, and B's program
 * never reads (its kernel takes every packet off the RX ring into the
 * socket, so B's fwd_cnt stays). A's credit is the smaller of B's window as
 * it heard it and its own buffer ("vsock/virtio: cap TX credit to local
 * buffer size"). Whatever the order of the two raises against A's first
 * writes, A fills B's whole 2 MiB with 64 KiB packets without stalling.
 */
static void sib_raise_and_fill(unsigned order, uint32_t pa, uint32_t pb)
{
	static uint8_t chunk[65536];
	const uint32_t big = 2u << 20;
	struct gc a, b;
	struct pkt *p;
	uint32_t sent = 0, got = 0, cr;
	bool a_up = false, b_up = false;
	uint64_t idle = 0;

	sib_open(&a, &b, STREAM, pa, pb, 256u << 10);
	b.auto_credit = false;
	while (sent < big) {
		/* order 0: A then B before any data; 1: B then A; 2: A, then B
		 * after 128 KiB; 3: A, then B once A has run out of 256 KiB */
		if (!a_up && (order != 1 || b_up)) {
			a.buf_alloc = big;
			cr_assert_geq(g_send(&a, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
			a_up = true;
		}
		if (!b_up && (order == 0 ? a_up : order == 1 ? true :
			      order == 2 ? sent >= (128u << 10) : sent >= (256u << 10))) {
			b.buf_alloc = big;
			cr_assert_geq(g_send(&b, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
			b_up = true;
		}
		cr = g_credit(&a);
		if (a.buf_alloc - (a.tx_cnt - a.peer_fwd) < cr)
			cr = a.buf_alloc - (a.tx_cnt - a.peer_fwd);
		if (cr) {
			cr = cr < sizeof(chunk) ? cr : sizeof(chunk);
			if (cr > big - sent)
				cr = big - sent;
			cr_assert_geq(g_send(&a, OP_RW, 0, chunk, cr), 0);
			sent += cr;
			idle = 0;
		}
		/* B's kernel drains its RX ring; A's takes its credit news */
		while ((p = g_next(G(1), &b, 0))) {
			cr_assert_eq(p->h.op, OP_RW);
			got += p->len;
			free(p);
		}
		while ((p = g_next(G(0), &a, cr ? 0 : 20))) {
			cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
			free(p);
		}
		if (!cr)
			cr_assert_lt(++idle, 500, "order %u: A stalled after %u of %u bytes "
				     "(heard %u, fwd %u)", order, sent, big, a.peer_buf,
				     a.peer_fwd);
	}
	while (got < big && (p = g_next(G(1), &b, TMO))) {
		got += p->len;
		free(p);
	}
	cr_assert_eq(got, big);
	cr_assert_eq(b.fwd_cnt, 0);
}

SIB_TEST(window_raised_by_both_guests_is_filled_in_any_order)
{
	unsigned order;

	two_vms(NULL, NULL);
	for (order = 0; order < 4; order++)
		sib_raise_and_fill(order, 50020 + order, 6020 + order);
}

/*
 * A's own buffer is part of the window vsxd judges its credit news by (a
 * Linux sender caps its credit at it). B's credit update comes while A has
 * plenty of room, so vsxd holds it back; then A lowers its own buffer below
 * what it has in flight and stops sending, and B, with a large buffer,
 * has no reason to say more. vsxd must pass B's news on when A's buffer
 * changes, or the pair waits for ever.
 */
static void own_buffer_lowered(uint32_t pa, uint32_t pb)
{
	static uint8_t chunk[65536];
	struct gc a, b;
	struct pkt *p;
	uint32_t got = 0;
	int i;

	sib_open(&a, &b, STREAM, pa, pb, 1u << 20);
	b.auto_credit = false;
	a.buf_alloc = 1u << 20;
	cr_assert_geq(g_send(&a, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	for (i = 0; i < 8; i++)
		cr_assert_geq(g_send(&a, OP_RW, 0, chunk, sizeof(chunk)), 0);
	while (got < (512u << 10) && (p = g_next(G(1), &b, TMO))) {
		if (p->h.op == OP_RW)   /* (across threads, credit news too) */
			got += p->len;
		free(p);
	}
	cr_assert_eq(got, 512u << 10);
	/* B read it all: its update is news A does not need yet */
	g_consumed(&b, got);
	cr_assert_geq(g_send(&b, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	cr_assert(g_quiet(G(0), &a, 200), "held back while A has 512 KiB of room");
	cr_assert_eq(a.peer_fwd, 0);
	/* A lowers its buffer to 256 KiB: its credit is 0 now */
	a.buf_alloc = 256u << 10;
	cr_assert_geq(g_send(&a, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	p = g_expect(&a, OP_CREDIT_UPDATE, TMO);
	free(p);
	cr_assert_eq(a.peer_fwd, 512u << 10);
	cr_assert_eq(a.peer_buf, 1u << 20);
}

SIB_TEST(own_buffer_lowered_releases_held_credit_news)
{
	two_vms(NULL, NULL);
	own_buffer_lowered(50030, 6030);
}

SIB_TEST(stream_both_ways_credit_end_to_end)
{
	size_t len = 1 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct gc a, b;
	size_t sent = 0, got = 0;

	two_vms(NULL, NULL);
	sib_open(&a, &b, STREAM, 50000, 6000, 32768);
	cr_assert_eq(a.peer_buf, 32768);
	fill_pattern(out, len, 40);
	/* A writes within B's window; B reads; interleaved in one thread */
	while (got < len) {
		uint32_t cr = g_credit(&a);
		size_t n = len - sent < 4096 ? len - sent : 4096;

		if (sent < len && cr) {
			if (n > cr)
				n = cr;
			cr_assert_geq(g_send(&a, OP_RW, 0, out + sent, (uint32_t)n), 0);
			sent += n;
			continue;
		}
		{
			struct pkt *p = g_next(G(1), &b, 20);

			if (p) {
				if (p->h.op == OP_RW) {
					memcpy(in + got, p->data, p->len);
					got += p->len;
					g_consumed(&b, p->len);
				}
				free(p);
			}
			while ((p = g_next(G(0), &a, 0))) {
				cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
				free(p);
			}
		}
		/* never more in flight than B's window */
		cr_assert_leq(a.tx_cnt - b.fwd_cnt, 32768);
	}
	cr_assert_arr_eq(in, out, len);

	/* and back */
	fill_pattern(out, len, 41);
	sent = got = 0;
	while (got < len) {
		uint32_t cr = g_credit(&b);
		size_t n = len - sent < 4096 ? len - sent : 4096;
		struct pkt *p;

		if (sent < len && cr) {
			if (n > cr)
				n = cr;
			cr_assert_geq(g_send(&b, OP_RW, 0, out + sent, (uint32_t)n), 0);
			sent += n;
			continue;
		}
		p = g_next(G(0), &a, 20);
		if (p) {
			if (p->h.op == OP_RW) {
				memcpy(in + got, p->data, p->len);
				got += p->len;
				g_consumed(&a, p->len);
			}
			free(p);
		}
		while ((p = g_next(G(1), &b, 0))) {
			cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
			free(p);
		}
	}
	cr_assert_arr_eq(in, out, len);

	/* close: A shuts down both ways, B answers RST, A gets it */
	cr_assert_geq(g_send(&a, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	{
		struct pkt *p = g_expect(&b, OP_SHUTDOWN, TMO);

		cr_assert_eq(p->h.flags, SHUT_BOTH);
		free(p);
	}
	cr_assert_geq(g_send(&b, OP_RST, 0, NULL, 0), 0);
	free(g_expect(&a, OP_RST, TMO));
	cr_assert(conn_gone(&a, 0, TMO));
	cr_assert(conn_gone(&b, 1, TMO));
	free(out);
	free(in);
}

SIB_TEST(queued_when_receiver_lacks_buffers)
{
	/* B reads nothing for a while: A's data waits in the B-side queue
	 * (bounded by B's window) and arrives intact later. */
	size_t len = 200000;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct drv_opts ob = { .queue_size = 16 };   /* 64 KiB of RX buffers */
	struct vsxb_conn_info ci[4];
	size_t mem = 0;
	struct gc a, b;

	two_vms_opts(NULL, NULL, &ob);
	sib_open(&a, &b, STREAM, 50001, 6001, 256 * 1024);
	fill_pattern(out, len, 42);
	g_write(&a, out, len, 65536);     /* 200000 < 256 KiB: no waiting */
	hx_sync(&H);
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 1);
	cr_assert_gt(ci[0].queued, 0, "nothing queued while B had 16 buffers");
	cr_assert_leq(ci[0].queued, 256 * 1024);
	cr_assert_eq(hx_conn_mem(&H, ci[0].id, &mem), 0);
	cr_assert_leq(mem, (size_t)ci[0].queued * 5 / 4 + 4096);
	g_read(&b, in, len);
	cr_assert_arr_eq(in, out, len);
	free(out);
	free(in);
}

SIB_TEST(seqpacket_boundaries)
{
	uint8_t msg[9000], rec[9000];
	struct gc a, b;
	struct pkt *p;
	size_t got;

	two_vms(NULL, NULL);
	sib_open(&a, &b, SEQ, 50002, 6002, 256 * 1024);
	fill_pattern(msg, sizeof(msg), 43);
	cr_assert_geq(g_send(&a, OP_RW, 0, msg, 5000), 0);
	cr_assert_geq(g_send(&a, OP_RW, VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR,
			     msg + 5000, 4000), 0);
	cr_assert_geq(g_send(&a, OP_RW, VIRTIO_VSOCK_SEQ_EOM, "hi", 2), 0);
	for (got = 0; got < sizeof(msg);) {
		p = g_expect(&b, OP_RW, TMO);
		memcpy(rec + got, p->data, p->len);
		got += p->len;
		if (got < sizeof(msg))
			cr_assert_eq(p->h.flags, 0);
		else
			cr_assert_eq(p->h.flags, VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR);
		g_consumed(&b, p->len);
		free(p);
	}
	cr_assert_arr_eq(rec, msg, sizeof(msg));
	p = g_expect(&b, OP_RW, TMO);
	cr_assert_eq(p->len, 2);
	cr_assert_eq(p->h.flags, VIRTIO_VSOCK_SEQ_EOM);
	free(p);
}

SIB_TEST(groups_isolate)
{
	struct gc a;

	two_vms("red", "blue");
	gc_init(&a, G(0), STREAM, 50003, 4, 6003);
	cr_assert_eq(g_connect(&a), OP_RST);
	cr_assert(g_quiet(G(1), NULL, QUIET));
}

SIB_TEST(groups_overlap)
{
	struct gc a, b;

	two_vms("red+green", "blue+green");
	sib_open(&a, &b, STREAM, 50004, 6004, 65536);
}

SIB_TEST(refused_and_unanswered)
{
	struct gc a, b;
	struct pkt *p;

	two_vms(NULL, NULL);
	hx_timeouts(&H, 0, 300, 0);
	gc_init(&a, G(0), STREAM, 50005, 4, 6005);
	cr_assert_geq(g_send(&a, OP_REQUEST, 0, NULL, 0), 0);
	gc_init(&b, G(1), STREAM, 6005, 3, 50005);
	free(g_expect(&b, OP_REQUEST, TMO));
	cr_assert_geq(g_send(&b, OP_RST, 0, NULL, 0), 0);
	free(g_expect(&a, OP_RST, TMO));

	/* B never answers: both sides reset after the connect timeout */
	cr_assert_geq(g_send(&a, OP_REQUEST, 0, NULL, 0), 0);
	p = g_expect(&b, OP_REQUEST, TMO);
	free(p);
	free(g_expect(&a, OP_RST, TMO));
	free(g_expect(&b, OP_RST, TMO));
}

SIB_TEST(peer_vm_gone)
{
	struct gc a, b;

	two_vms(NULL, NULL);
	sib_open(&a, &b, STREAM, 50006, 6006, 65536);
	hx_close_drv(&H, 1);
	free(g_expect(&a, OP_RST, TMO));
	cr_assert(conn_gone(&a, 0, TMO));
}

/* ---- configuration ---- */

Test(config, validation)
{
	struct vsxb_vm_config c = { 0 };
	char path[200];
	int fd;

	c.guest_cid = 2;
	cr_assert_eq(hx_vm(&H, 0, &c), -EINVAL);
	c.guest_cid = 0xFFFFFFFFull;
	cr_assert_eq(hx_vm(&H, 0, &c), -EINVAL);
	c.guest_cid = 5;
	c.queue_size = 100;
	cr_assert_eq(hx_vm(&H, 0, &c), -EINVAL);
	c.queue_size = 0;
	c.groups = "a++b";
	cr_assert_eq(hx_vm(&H, 0, &c), -EINVAL);
	c.groups = NULL;
	c.name = "bad name";
	cr_assert_eq(hx_vm(&H, 0, &c), -EINVAL);
	c.name = "good";
	c.tx_buffer_size = (1u << 30) + 1;
	cr_assert_eq(hx_vm(&H, 0, &c), -EINVAL);
	c.tx_buffer_size = 0;
	cr_assert_eq(hx_vm(&H, 0, &c), 0);
	cr_assert(hx_log_has(&H, "vm config:"));

	/* same CID or name: -EEXIST */
	c.name = "other";
	cr_assert_eq(hx_vm(&H, 1, &c), -EEXIST);
	c.guest_cid = 6;
	c.name = "good";
	cr_assert_eq(hx_vm(&H, 1, &c), -EEXIST);

	/* a stale uds socket is replaced; a live one or a file is not */
	c.name = NULL;
	snprintf(path, sizeof(path), "%s/stale.vsock", H.dir);
	fd = h_listen(path, SOCK_STREAM);
	close(fd);    /* the file stays, nobody listens */
	c.uds_path = path;
	cr_assert_eq(hx_vm(&H, 1, &c), 0);
	c.guest_cid = 7;
	snprintf(path + strlen(path), 20, "2");
	fd = h_listen(path, SOCK_STREAM);
	cr_assert_eq(hx_vm(&H, 2, &c), -EADDRINUSE);
	close(fd);
	snprintf(path, sizeof(path), "%s/plain", H.dir);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	close(fd);
	cr_assert_eq(hx_vm(&H, 2, &c), -ENOTSOCK);
	cr_assert_eq(access(path, F_OK), 0, "the plain file was removed");
}

/* ---- more: SEQPACKET queueing and credit, host errors, lifetimes ---- */

Test(engine, seqpacket_queued_when_host_blocked)
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

Test(engine, seqpacket_host_message_beyond_guest_buffer_resets)
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

Test(engine, host_stops_reading_guest_told)
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

static void c_vm_free(void *arg)
{
	struct hx *h = arg;

	vsxb_vm_free(h->v[0].vm);
	h->v[0].vm = NULL;
}

Test(control, vm_free_with_live_connections)
{
	struct gc c, d;
	struct stat st;
	int lfd, fd, hfd;

	g2h_open(&c, 0, STREAM, 47010, 1320, &lfd, &fd);
	h2g_open(&d, 0, 7010, &hfd, NULL);
	vsx_test_loop_call(H.tl, c_vm_free, &H);
	/* the guest was told while its queues were still there */
	free(g_expect(&c, OP_RST, TMO));
	free(g_expect(&d, OP_RST, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	cr_assert_eq(h_eof(hfd, TMO), 0);
	cr_assert_neq(stat(H.v[0].uds, &st), 0, "uds path left behind");
	cr_assert_neq(stat(H.v[0].vhost, &st), 0, "vhost-user path left behind");
	close(fd);
	close(hfd);
	close(lfd);
}

Test(engine, plain_rings_without_event_queue)
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

Test(hybrid, device_down_closes_clients)
{
	int fd;

	hx_close_drv(&H, 0);
	fd = h_dial(H.v[0].uds, "CONNECT 5010\n");
	cr_assert(h_eof(fd, TMO) == 0 || errno == ECONNRESET);
	close(fd);
}

Test(datapath, seqpacket_one_byte_messages_bounded)
{
	struct vsxb_conn_info ci;
	size_t mem = 0;
	struct gc c;
	int lfd, fd;

	cr_assert_eq(hx_default_buffer(&H, 0, 65536), 0);
	g2h_open(&c, 0, SEQ, 43010, 1330, &lfd, &fd);
	for (;;) {
		if (!g_credit(&c)) {
			struct pkt *p = g_next(G(0), &c, 100);

			if (!p)
				break;
			free(p);
			continue;
		}
		cr_assert_geq(g_send(&c, OP_RW, VIRTIO_VSOCK_SEQ_EOM, "m", 1), 0);
	}
	hx_sync(&H);
	ci = conn_of(&c, 0);
	cr_assert_eq(hx_conn_mem(&H, ci.id, &mem), 0);
	fprintf(stderr, "seq flood: %u queued, %zu bytes of memory\n", ci.queued, mem);
	cr_assert_leq(ci.queued, 65536);
	cr_assert_leq(mem, 65536 * 5 / 4);
	close(fd);
	close(lfd);
}

SIB_TEST(half_close_both_ways)
{
	char buf[3000];
	struct pkt *p;
	struct gc a, b;

	two_vms(NULL, NULL);
	sib_open(&a, &b, STREAM, 50010, 6010, 65536);
	fill_pattern(buf, sizeof(buf), 60);
	g_write(&a, buf, sizeof(buf), 1000);
	cr_assert_geq(g_send(&a, OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0), 0);
	{
		char back[3000];

		g_read(&b, back, sizeof(back));
		cr_assert_arr_eq(back, buf, sizeof(buf));
	}
	p = g_expect(&b, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, VIRTIO_VSOCK_SHUTDOWN_SEND);
	free(p);
	/* B -> A still flows */
	g_write(&b, buf, 500, 500);
	{
		char back[500];

		g_read(&a, back, sizeof(back));
		cr_assert_arr_eq(back, buf, sizeof(back));
	}
	cr_assert_geq(g_send(&b, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	p = g_expect(&a, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, SHUT_BOTH);
	free(p);
	cr_assert_geq(g_send(&a, OP_RST, 0, NULL, 0), 0);
	free(g_expect(&b, OP_RST, TMO));
	cr_assert(conn_gone(&a, 0, TMO));
	cr_assert(conn_gone(&b, 1, TMO));
}

SIB_TEST(rst_after_queued_data)
{
	struct drv_opts ob = { .queue_size = 8 };   /* 32 KiB of RX buffers */
	size_t len = 100000;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct gc a, b;

	two_vms_opts(NULL, NULL, &ob);
	sib_open(&a, &b, STREAM, 50011, 6011, 256 * 1024);
	fill_pattern(out, len, 61);
	g_write(&a, out, len, 65536);
	cr_assert_geq(g_send(&a, OP_RST, 0, NULL, 0), 0);
	cr_assert(conn_gone(&a, 0, TMO));
	/* B still gets every byte A sent before its RST, then the RST */
	g_read(&b, in, len);
	cr_assert_arr_eq(in, out, len);
	free(g_expect(&b, OP_RST, TMO));
	cr_assert(conn_gone(&b, 1, TMO));
	free(out);
	free(in);
}

SIB_TEST(counters_wrap_end_to_end)
{
	size_t len = 512 * 1024;
	uint8_t *out = malloc(len), *in = malloc(len);
	uint32_t base = 0xFFFFFFFFu - 70000;
	size_t sent = 0, got = 0;
	struct gc a, b;
	struct pkt *p;

	two_vms(NULL, NULL);
	hx_counter_base(&H, base);
	gc_init(&a, G(0), STREAM, 50012, 4, 6012);
	a.tx_cnt = a.fwd_cnt = a.last_fwd_sent = base;
	cr_assert_geq(g_send(&a, OP_REQUEST, 0, NULL, 0), 0);
	gc_init(&b, G(1), STREAM, 6012, 3, 50012);
	b.tx_cnt = b.fwd_cnt = b.last_fwd_sent = base;
	free(g_expect(&b, OP_REQUEST, TMO));
	cr_assert_geq(g_send(&b, OP_RESPONSE, 0, NULL, 0), 0);
	free(g_expect(&a, OP_RESPONSE, TMO));
	fill_pattern(out, len, 62);
	while (got < len) {
		uint32_t cr = g_credit(&a);
		size_t n = len - sent < 4096 ? len - sent : 4096;

		if (sent < len && cr) {
			if (n > cr)
				n = cr;
			cr_assert_geq(g_send(&a, OP_RW, 0, out + sent, (uint32_t)n), 0);
			sent += n;
			continue;
		}
		p = g_next(G(1), &b, 20);
		if (p) {
			if (p->h.op == OP_RW) {
				memcpy(in + got, p->data, p->len);
				got += p->len;
				g_consumed(&b, p->len);
			}
			free(p);
		}
		while ((p = g_next(G(0), &a, 0))) {
			cr_assert_eq(p->h.op, OP_CREDIT_UPDATE);
			free(p);
		}
	}
	cr_assert_arr_eq(in, out, len);
	cr_assert_lt(b.fwd_cnt, base, "did not wrap");
	free(out);
	free(in);
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

/* A hybrid client's REQUEST to the guest, which has not answered yet. */
static int hybrid_requested(struct gc *c, uint32_t port)
{
	char line[32];
	struct pkt *p;
	int fd;

	snprintf(line, sizeof(line), "CONNECT %u\n", port);
	fd = h_dial(H.v[0].uds, line);
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_REQUEST);
	gc_init(c, G(0), STREAM, port, VSOCK_CID_HOST, p->h.src_port);
	free(p);
	return fd;
}

/* The two orders in which a program can be gone when the guest accepts,
 * each made certain. First: vsxd sees the hang-up while it waits, resets
 * the guest at once (its RST arrives before the guest answers), and the
 * late RESPONSE, for a connection that no longer exists, gets an RST. */
Test(hybrid, program_gone_before_guest_accepts)
{
	struct gc c;
	int fd = hybrid_requested(&c, 5020);

	close(fd);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert(conn_gone(&c, 0, TMO));
	cr_assert_geq(g_send(&c, OP_RESPONSE, 0, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
}

/* Second: nothing tells vsxd before the guest answers (the program only
 * stopped reading: no hang-up to see), so the RESPONSE finds the "OK" line
 * unwritable: the guest gets the RST then, once, and the host socket is
 * closed. */
Test(hybrid, program_unwritable_when_guest_accepts)
{
	struct pollfd pf;
	struct pkt *p;
	struct gc c;
	int fd = hybrid_requested(&c, 5021);

	cr_assert_eq(shutdown(fd, SHUT_RD), 0);
	hx_sync(&H);
	cr_assert_eq(conn_of(&c, 0).state, VSXB_CONN_CONNECTING, "no reset before the answer");
	cr_assert_geq(g_send(&c, OP_RESPONSE, 0, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert(conn_gone(&c, 0, TMO));
	/* vsxd closed its end: both directions of ours are shut now */
	pf = (struct pollfd){ .fd = fd, .events = POLLOUT };
	cr_assert_eq(poll(&pf, 1, TMO), 1);
	cr_assert(pf.revents & POLLHUP, "revents 0x%x", pf.revents);
	hx_sync(&H);
	p = g_next(G(0), NULL, 0);
	cr_assert_null(p, "a second packet (op %u) after the RST", p ? p->h.op : 0);
	close(fd);
}

Test(engine, drain_bounded_by_linger)
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

static int stop_at_second(const struct vsxb_conn_info *ci, void *arg)
{
	int *n = arg;

	(void)ci;
	return ++*n == 2 ? 42 : 0;
}

static void c_foreach_stop(void *arg)
{
	int *n = arg;

	n[1] = vsxb_router_foreach_conn(H.r, NULL, stop_at_second, n);
}

Test(control, foreach_all_vms_and_early_stop)
{
	struct vsxb_conn_info ci[8];
	struct gc a, b;
	int lfd, fd, lfd1, fd1, n[2] = { 0, 0 };

	cr_assert_eq(hx_vm(&H, 1, NULL), 0);
	hx_open(&H, 1, NULL);
	g2h_open(&a, 0, STREAM, 47020, 1360, &lfd, &fd);
	g2h_open(&b, 1, STREAM, 47021, 1361, &lfd1, &fd1);
	g2h_open(&b, 1, STREAM, 47022, 1362, &lfd1, &fd1);
	cr_assert_eq(hx_conns(&H, -1, ci, 8), 3);
	cr_assert_eq(hx_conns(&H, 0, ci, 8), 1);
	cr_assert_str_eq(ci[0].vm, "cid3");
	cr_assert_eq(hx_conns(&H, 1, ci, 8), 2);
	cr_assert_str_eq(ci[0].vm, "cid4");
	vsx_test_loop_call(H.tl, c_foreach_stop, n);
	cr_assert_eq(n[0], 2);
	cr_assert_eq(n[1], 42);
	close(fd);
	close(fd1);
	close(lfd);
	close(lfd1);
}

/* ---- lifecycle: pause (QEMU stop/cont), guest reset, bad restarts ---- */

TestSuite(lifecycle, .init = setup1, .fini = teardown, .timeout = 60);

/* After the old one ended: a new guest connection works on VM @vm. */
static void new_conn_works(unsigned vm, uint32_t lport, uint32_t hport)
{
	struct gc d;
	int lfd, fd;

	g2h_open(&d, vm, STREAM, lport, hport, &lfd, &fd);
	still_works(&d, fd);
	close(fd);
	close(lfd);
}

Test(lifecycle, pause_resume_keeps_connections)
{
	static uint8_t out[100000], in[100000];
	struct gc c, h;
	int lfd, fd, hfd;
	char line[64];
	struct pkt *p;

	hx_timeouts(&H, 0, 300, 0);
	g2h_open(&c, 0, STREAM, 45000, 1450, &lfd, &fd);
	fill_pattern(out, sizeof(out), 7);
	g_write(&c, out, 60000, 4096);
	cr_assert_eq(drv_pause(G(0)->d), 0);
	cr_assert(hx_log_has(&H, "connection(s) kept"));
	/* the host reads what came before; writes while the guest sleeps */
	cr_assert_eq(h_read_full(fd, in, 60000, TMO), 0);
	cr_assert_arr_eq(in, out, 60000);
	cr_assert_eq(h_write_full(fd, out, 5000, TMO), 0);
	/* a host program connects to the paused guest: its REQUEST waits,
	 * and the connect timeout does not run out while paused */
	snprintf(line, sizeof(line), "CONNECT 45001\n");
	hfd = h_dial(H.v[0].uds, line);
	cr_assert_geq(hfd, 0);
	usleep(800 * 1000);
	cr_assert(!h_readable(hfd, 0), "the hybrid connect ended during the pause");
	cr_assert_eq(drv_resume(G(0)->d, 0), 0);
	cr_assert(hx_log_has(&H, "device resumed after"));
	/* the host's bytes, then the REQUEST: nothing lost, nothing twice */
	g_read(&c, in, 5000);
	cr_assert_arr_eq(in, out, 5000);
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p);
	cr_assert_eq(p->h.op, OP_REQUEST);
	cr_assert_eq(p->h.dst_port, 45001);
	gc_init(&h, G(0), STREAM, 45001, VSOCK_CID_HOST, p->h.src_port);
	h.peer_buf = p->h.buf_alloc;
	h.peer_fwd = p->h.fwd_cnt;
	free(p);
	cr_assert_geq(g_send(&h, OP_RESPONSE, 0, NULL, 0), 0);
	cr_assert_gt(h_read_line(hfd, line, sizeof(line), TMO), 0);
	cr_assert_eq(strncmp(line, "OK ", 3), 0);
	still_works(&c, fd);
	still_works(&h, hfd);
	cr_assert_eq(hx_log_count(&H, "conn reset"), 0);
	close(hfd);
	close(fd);
	close(lfd);
}

Test(lifecycle, guest_reset_ends_connections)
{
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 45010, 1451, &lfd, &fd);
	cr_assert_eq(drv_reset(G(0)->d), 0);
	cr_assert(hx_log_has(&H, "restarted as new"));
	cr_assert_geq(h_eof(fd, 1000), -ECONNRESET, "the host peer did not see the end");
	g_forget(G(0));
	new_conn_works(0, 45011, 1452);
	close(fd);
	close(lfd);
}

Test(lifecycle, restart_elsewhere_breaks_the_device)
{
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 45020, 1453, &lfd, &fd);
	cr_assert_eq(drv_pause(G(0)->d), 0);
	cr_assert_eq(drv_resume(G(0)->d, 5), 0);    /* not where it stopped */
	cr_assert(hx_log_has(&H, "neither a resume nor a reset"));
	cr_assert(hx_log_has(&H, "rings restarted where they did not stop"));
	cr_assert_geq(h_eof(fd, TMO), -ECONNRESET);
	/* a guest reset brings it back */
	cr_assert_eq(drv_reset(G(0)->d), 0);
	g_forget(G(0));
	new_conn_works(0, 45021, 1454);
	close(fd);
	close(lfd);
}

Test(lifecycle, front_end_gone_while_paused)
{
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 0, STREAM, 45030, 1455, &lfd, &fd);
	cr_assert_eq(drv_pause(G(0)->d), 0);
	hx_close_drv(&H, 0);
	cr_assert_geq(h_eof(fd, TMO), -ECONNRESET);
	cr_assert(hx_log_has(&H, "for good while paused"));
	hx_open(&H, 0, NULL);               /* a new front-end is served */
	new_conn_works(0, 45031, 1456);
	close(fd);
	close(lfd);
}

/* ---- a VMM that shrinks the file behind guest memory ---- */

TestSuite(memfault, .init = setup_bare, .fini = teardown, .timeout = 120);

static bool wait_log(const char *needle, int ms)
{
	for (; ms > 0; ms -= 20) {
		if (hx_log_has(&H, needle))
			return true;
		usleep(20 * 1000);
	}
	return hx_log_has(&H, needle);
}

Test(memfault, shrunk_memory_breaks_that_vm_only)
{
	static uint8_t out[128 * 1024], in[128 * 1024];
	struct gc a, b;
	int lfd, fd, lfd1, fd1;
	uint64_t moved;

	cr_assert_eq(hx_vm(&H, 0, NULL), 0);
	cr_assert_eq(hx_vm(&H, 1, NULL), 0);
	hx_open(&H, 0, NULL);
	hx_open(&H, 1, NULL);
	g2h_open(&a, 0, STREAM, 46000, 1460, &lfd, &fd);
	g2h_open(&b, 1, STREAM, 46001, 1461, &lfd1, &fd1);
	fill_pattern(out, sizeof(out), 9);

	/* VM 0's front-end truncates its memfd; its host peer keeps writing,
	 * so vsxd goes on filling VM 0's RX buffers from it */
	cr_assert_eq(drv_truncate_mem(G(0)->d, 0), 0);
	cr_assert_eq(h_write_full(fd, out, sizeof(out), TMO), 0);
	cr_assert(wait_log("guest memory fault", TMO), "no memory fault logged");
	cr_assert_geq(h_eof(fd, TMO), -ECONNRESET, "VM 0's host peer did not see the end");

	/* VM 1 goes on: 64 MiB each way, every byte checked */
	for (moved = 0; moved < (64u << 20); moved += sizeof(out)) {
		fill_pattern(out, sizeof(out), (unsigned)(moved >> 17));
		g_write(&b, out, sizeof(out), 65536);
		cr_assert_eq(h_read_full(fd1, in, sizeof(in), TMO), 0);
		cr_assert_arr_eq(in, out, sizeof(in));
		cr_assert_eq(h_write_full(fd1, out, sizeof(out), TMO), 0);
		g_read(&b, in, sizeof(in));
		cr_assert_arr_eq(in, out, sizeof(in));
	}
	cr_assert_eq(hx_log_count(&H, "guest memory fault"), 1, "logged once");

	/* the VMM grows its memory back and the guest resets the device: VM 0
	 * is mapped afresh (not the zero pages) and works again */
	cr_assert_eq(drv_truncate_mem(G(0)->d, 64ull << 20), 0);
	cr_assert_eq(drv_reset(G(0)->d), 0);
	g_forget(G(0));
	new_conn_works(0, 46002, 1462);
	close(fd);
	close(lfd);
	close(fd1);
	close(lfd1);
}

/* ---- fwdcid: forward-cid, the host kernel's vsock as the far end ---- */

/* The test's forward connect (AF_VSOCK is not for the build machine): a
 * Unix socket at <dir>/fwd_<cid>_<port>, except port 1 (a TCP connect to
 * a closed port: refused through SO_ERROR or at once). */
static unsigned fwd_calls;
static uint32_t fwd_cid_seen, fwd_port_seen;

static int test_forward_connect(void *arg, uint32_t cid, uint32_t port)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int fd;

	(void)arg;
	fwd_calls++;
	fwd_cid_seen = cid;
	fwd_port_seen = port;
	if (port == 1) {
		struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(1),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0 &&
		    errno != EINPROGRESS) {
			close(fd);
			return -ECONNREFUSED;
		}
		return fd;
	}
	snprintf(un.sun_path, sizeof(un.sun_path), "%s/fwd_%u_%u", H.dir, cid, port);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

static int fwd_listen(uint32_t cid, uint32_t port)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/fwd_%u_%u", H.dir, cid, port);
	return h_listen(path, SOCK_STREAM);
}

static void setup_fwd(void)
{
	struct vsxb_vm_config c = {
		.forward = true,
		.forward_cid = 1,
		.forward_connect = test_forward_connect,
	};

	hx_init(&H);
	fwd_calls = 0;
	cr_assert_eq(hx_vm(&H, 0, &c), 0);
	hx_open(&H, 0, NULL);
}

TestSuite(fwdcid, .init = setup_fwd, .fini = teardown, .timeout = 60);

static void check_same(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i;

	for (i = 0; i < len && a[i] == b[i]; i++)
		;
	cr_assert_eq(i, len, "first difference at %zu", i);
}

Test(fwdcid, stream_both_ways_half_close_kind_vsock)
{
	size_t len = 2 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct vsxb_conn_info ci;
	char buf[100], back[100];
	struct hio io;
	struct pkt *p;
	struct gc c;
	int lfd, fd;

	lfd = fwd_listen(1, 5000);
	/* the uds_path_5000 listener would take it without forward-cid */
	close(listen_port(0, 5000, SOCK_STREAM));
	gc_init(&c, G(0), STREAM, 41000, VSOCK_CID_HOST, 5000);
	cr_assert_eq(g_connect(&c), 0, "guest connect refused");
	cr_assert_eq(fwd_calls, 1);
	cr_assert_eq(fwd_cid_seen, 1);
	cr_assert_eq(fwd_port_seen, 5000);
	fd = h_accept(lfd, TMO);
	cr_assert_geq(fd, 0);
	ci = conn_of(&c, 0);
	cr_assert_eq(ci.state, VSXB_CONN_ESTABLISHED);
	cr_assert(ci.guest_initiated);
	cr_assert_str_eq(ci.peer_kind, "vsock");
	cr_assert_eq(ci.peer_cid, 2);

	fill_pattern(out, len, 11);
	hio_start(&io, fd, in, len, false);
	g_write(&c, out, len, 4096);
	cr_assert_eq(hio_join(&io), 0);
	check_same(in, out, len);
	fill_pattern(out, len, 12);
	hio_start(&io, fd, out, len, true);
	g_read(&c, in, len);
	cr_assert_eq(hio_join(&io), 0);
	check_same(in, out, len);
	ci = conn_of(&c, 0);
	cr_assert_eq(ci.from_guest_bytes, len);
	cr_assert_eq(ci.to_guest_bytes, len);

	/* half-close as for a host socket: the guest's SHUTDOWN(send) is EOF
	 * on the vsock side, the other way still flows */
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0), 0);
	cr_assert_eq(h_eof(fd, TMO), 0, "the forward target did not see EOF");
	fill_pattern(buf, sizeof(buf), 13);
	cr_assert_eq(h_write_full(fd, buf, sizeof(buf), TMO), 0);
	g_read(&c, back, sizeof(back));
	cr_assert_arr_eq(back, buf, sizeof(buf));
	close(fd);
	p = g_expect(&c, OP_SHUTDOWN, TMO);
	cr_assert_eq(p->h.flags, SHUT_BOTH);
	free(p);
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	cr_assert(conn_gone(&c, 0, TMO));
	close(lfd);
	free(out);
	free(in);
}

Test(fwdcid, nobody_listening_is_reset)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 41001, VSOCK_CID_HOST, 5001);
	cr_assert_eq(g_connect(&c), OP_RST);
	cr_assert_eq(fwd_calls, 1);
	cr_assert_eq(hx_conns(&H, 0, NULL, 0), 0);
	cr_assert_eq(hx_log_count(&H, "vsock 1:5001"), 1);
}

Test(fwdcid, refused_after_connect_in_progress_is_reset)
{
	struct gc c;

	gc_init(&c, G(0), STREAM, 41002, VSOCK_CID_HOST, 1);
	cr_assert_eq(g_connect(&c), OP_RST);
	cr_assert_eq(fwd_calls, 1);
	cr_assert(conn_gone(&c, 0, TMO));
}

Test(fwdcid, seqpacket_refused_without_connect)
{
	struct gc c;
	int lfd = fwd_listen(1, 5003);

	gc_init(&c, G(0), SEQ, 41003, VSOCK_CID_HOST, 5003);
	cr_assert_eq(g_connect(&c), OP_RST);
	cr_assert_eq(fwd_calls, 0);
	cr_assert_eq(hx_conns(&H, 0, NULL, 0), 0);
	close(lfd);
}

Test(engine, host_socket_kind_is_host)
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

SIB_TEST(receiver_paused_and_resumed)
{
	/* B's VM pauses (QEMU stop) while A sends within B's window: the bytes
	 * wait in vsxd, nothing is reset, and all arrive after cont */
	size_t len = 200000;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct gc a, b;

	two_vms(NULL, NULL);
	sib_open(&a, &b, STREAM, 50020, 6020, 256 * 1024);
	fill_pattern(out, len, 44);
	cr_assert_eq(drv_pause(G(1)->d), 0);
	g_write(&a, out, len, 65536);
	hx_sync(&H);
	cr_assert(hx_log_has(&H, "connection(s) kept"));
	cr_assert_eq(drv_resume(G(1)->d, 0), 0);
	cr_assert(hx_log_has(&H, "device resumed after"));
	g_read(&b, in, len);
	cr_assert_arr_eq(in, out, len);
	cr_assert_eq(hx_log_count(&H, "conn reset"), 0);
	free(out);
	free(in);
}

/*
 * backend.test 8f's STREAM stall: the receiving guest had no RX buffers
 * when the sender's 16-byte hello and its first data came, and vsxd's
 * queue put them into one RX packet. A Linux receiver credits fwd_cnt a
 * whole packet at a time, so the 16 bytes its program read stayed
 * uncredited, and the sender, needing exactly its 2 MiB window, waited 20
 * s for the reader. No RX packet may span two of the sender's packets,
 * as a direct copy (and the guest kernel's loopback) never does.
 */
SIB_TEST(queued_stream_keeps_packet_bounds)
{
	static const uint32_t lens[] = { 16, 5000, 3, 60000 };
	uint8_t out[70000];
	uint32_t end = 0, total = 0, want, i;
	bool bound[4] = { false };
	struct gc a, b;
	struct pkt *p;

	two_vms(NULL, NULL);
	sib_open(&a, &b, STREAM, 50040, 6040, 256 * 1024);
	fill_pattern(out, sizeof(out), 45);
	cr_assert_eq(drv_pause(G(1)->d), 0);
	for (i = 0; i < 4; i++) {
		cr_assert_geq(g_send(&a, OP_RW, 0, out + total, lens[i]), 0);
		total += lens[i];
	}
	hx_sync(&H);
	cr_assert_eq(drv_resume(G(1)->d, 0), 0);
	while (end < total) {
		p = g_expect(&b, OP_RW, TMO);
		cr_assert_eq(p->h.flags, 0, "STREAM RW with flags %u", p->h.flags);
		cr_assert_arr_eq(p->data, out + end, p->len);
		end += p->len;
		for (i = 0, want = 0; i < 4; i++) {
			want += lens[i];
			if (end == want)
				bound[i] = true;
			/* no packet from before this end to after it */
			cr_assert(!(end > want && end - p->len < want),
				  "an RX packet of %u bytes spans the sender's packet "
				  "end at byte %u", p->len, want);
		}
		g_consumed(&b, p->len);
		free(p);
	}
	for (i = 0; i < 4; i++)
		cr_assert(bound[i], "no RX packet ended with the sender's packet %u", i);
}

/* ---- threads: VMs on loops of their own (vsxd's workers) ---- */

/* VM0 and VM1 in one group, each served by a thread of its own. */
static void two_vms_two_threads(void)
{
	struct vsxb_vm_config a = { .loop = hx_worker(&H, 0) };
	struct vsxb_vm_config b = { .loop = hx_worker(&H, 1) };

	cr_assert_eq(hx_vm(&H, 0, &a), 0);
	cr_assert_eq(hx_vm(&H, 1, &b), 0);
	hx_open(&H, 0, NULL);
	hx_open(&H, 1, NULL);
}

/* @len bytes from @from to @to, 64 KiB at a time, compared. */
static void sib_move(struct gc *from, struct gc *to, size_t len, uint32_t seed)
{
	uint8_t *out = malloc(len), *in = malloc(len);
	size_t off, n;

	cr_assert(out && in);
	fill_pattern(out, len, seed);
	for (off = 0; off < len; off += n) {
		n = len - off < 65536 ? len - off : 65536;
		g_write(from, out + off, n, 4096);
		g_read(to, in + off, n);
	}
	cr_assert_arr_eq(in, out, len);
	free(out);
	free(in);
}

Test(threads, sibling_pair_across_threads_both_ways)
{
	static uint8_t chunk[32768], back[8 * 32768];
	struct vsxb_conn_info ci[8];
	struct gc a, b;
	unsigned n, i, sib = 0;

	two_vms_two_threads();
	/* the REQUEST crosses to B's thread, the answer back to A's; A's
	 * window is B's buffer, as between siblings of one thread */
	sib_open(&a, &b, STREAM, 50100, 6100, 131072);
	cr_assert_eq(a.peer_buf, 131072);
	sib_move(&a, &b, 4u << 20, 70);
	sib_move(&b, &a, 4u << 20, 71);
	/* the control thread sees both halves, each on its VM */
	n = hx_conns(&H, -1, ci, 8);
	for (i = 0; i < n; i++)
		if (!strcmp(ci[i].peer_kind, "sibling") &&
		    ci[i].state == VSXB_CONN_ESTABLISHED)
			sib++;
	cr_assert_eq(sib, 2, "%u sibling halves established, want 2", sib);
	/* B's guest raises its buffer: A's window follows across, heard
	 * (as on one thread) before A runs out of the old one */
	b.buf_alloc = 1u << 20;
	cr_assert_geq(g_send(&b, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	for (i = 0; i < 8 && a.peer_buf != 1u << 20; i++) {
		struct pkt *p;

		cr_assert_gt(g_credit(&a), 0, "A stalled at the old window");
		cr_assert_geq(g_send(&a, OP_RW, 0, chunk, sizeof(chunk)), 0);
		while ((p = g_next(G(0), &a, 50)))
			free(p);
	}
	cr_assert_eq(a.peer_buf, 1u << 20);
	g_read(&b, back, i * sizeof(chunk));
	sib_move(&a, &b, 1u << 20, 72);
	/* A's guest resets: B's guest gets the RST, as on one thread */
	cr_assert_geq(g_send(&a, OP_RST, 0, NULL, 0), 0);
	free(g_expect(&b, OP_RST, TMO));
}

Test(threads, sibling_refused_across_threads)
{
	struct gc a, b;
	struct pkt *p;

	two_vms_two_threads();
	gc_init(&a, G(0), STREAM, 50200, 4, 6200);
	cr_assert_geq(g_send(&a, OP_REQUEST, 0, NULL, 0), 0);
	gc_init(&b, G(1), STREAM, 6200, 3, 50200);
	free(g_expect(&b, OP_REQUEST, TMO));
	cr_assert_geq(g_send(&b, OP_RST, 0, NULL, 0), 0);
	p = g_expect(&a, OP_RST, TMO);
	free(p);
	/* and a VM with no such guest at all: refused at once */
	gc_init(&a, G(0), STREAM, 50201, 9, 6201);
	cr_assert_eq(g_connect(&a), OP_RST);
}

Test(threads, host_traffic_on_two_threads_and_control)
{
	struct vsxb_vm_config c0 = { .loop = hx_worker(&H, 0) };
	struct vsxb_vm_config c1 = { .loop = hx_worker(&H, 1) };
	struct vsxb_conn_info ci[4];
	size_t len = 2u << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	int lfd[2], fd[2];
	struct gc g[2];
	struct hio io;
	char path[128];
	unsigned i;

	cr_assert_eq(hx_vm(&H, 0, &c0), 0);
	cr_assert_eq(hx_vm(&H, 1, &c1), 0);
	for (i = 0; i < 2; i++) {
		hx_open(&H, i, NULL);
		snprintf(path, sizeof(path), "%s_%u", H.v[i].uds, 7000 + i);
		lfd[i] = h_listen(path, SOCK_STREAM);
		gc_init(&g[i], G(i), STREAM, 51000 + i, 2, 7000 + i);
		cr_assert_eq(g_connect(&g[i]), 0);
		fd[i] = h_accept(lfd[i], TMO);
		cr_assert_geq(fd[i], 0);
	}
	/* both VMs' guests write to their host programs, each thread its own */
	for (i = 0; i < 2; i++) {
		fill_pattern(out, len, 80 + i);
		hio_start(&io, fd[i], in, len, false);
		g_write(&g[i], out, len, 32768);
		cr_assert_eq(hio_join(&io), 0);
		cr_assert_arr_eq(in, out, len);
	}
	/* control reaches connections of either thread */
	cr_assert_eq(hx_conns(&H, 1, ci, 4), 1);
	cr_assert_eq(hx_set_buffer(&H, ci[0].id, 65536), 0);
	cr_assert(hx_conn(&H, ci[0].id, &ci[1]));
	cr_assert_eq(ci[1].buf_alloc, 65536);
	cr_assert_eq(hx_close_conn(&H, ci[0].id, true), 0);
	free(g_expect(&g[1], OP_RST, TMO));
	cr_assert_eq(h_eof(fd[1], TMO), 0);
	for (i = 0; i < 2; i++) {
		close(fd[i]);
		close(lfd[i]);
	}
	free(out);
	free(in);
}

Test(threads, vm_freed_under_a_pair_across_threads)
{
	struct gc a, b;
	struct pkt *p;
	int i;

	two_vms_two_threads();
	sib_open(&a, &b, STREAM, 50300, 6300, 262144);
	sib_move(&a, &b, 1u << 20, 73);
	/* B's VM goes (a reload removing it) with A's guest still sending:
	 * A's half ends, nothing of B's is touched again */
	hx_vm_free(&H, 1);
	for (i = 0; i < 8; i++)
		g_send(&a, OP_RW, 0, "x", 1);
	p = g_next(G(0), &a, TMO);
	while (p && p->h.op == OP_CREDIT_UPDATE) {
		free(p);
		p = g_next(G(0), &a, TMO);
	}
	cr_assert_not_null(p, "A's guest never heard its peer went");
	cr_assert(p->h.op == OP_SHUTDOWN || p->h.op == OP_RST, "op %u", p->h.op);
	free(p);
	/* and A's VM still serves a new pair to a VM that comes back */
	struct vsxb_vm_config c = { .loop = hx_worker(&H, 1) };

	hx_close_drv(&H, 1);
	cr_assert_eq(hx_vm(&H, 1, &c), 0);
	hx_open(&H, 1, NULL);
	sib_open(&a, &b, STREAM, 50301, 6301, 262144);
	sib_move(&b, &a, 1u << 20, 74);
}
