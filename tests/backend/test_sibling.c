/*
 * The backend end to end (the harness and helpers of suite.h): siblings:
 * VMs of one group talking guest to guest, on one thread and on two.
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

TestSuite(sibling, .init = setup_bare, .fini = teardown, .timeout = 60);
TestSuite(threads, .init = setup_bare, .fini = teardown, .timeout = 60);
TestSuite(records, .init = setup_bare, .fini = teardown, .timeout = 60);

/* The sibling tests run three times: as sibling::NAME with both VMs on
 * the test's loop (peer_sibling.c), as threads::sibling_NAME with each on
 * a loop thread of its own (peer_xsib.c: straight into the other's room
 * while its thread idles, records when not), and as records::NAME on two
 * threads that lend no room (every packet by record); the guests must see
 * the same. */
static bool sib_threads;

#define SIB_TEST(name) \
	static void sib_##name(void); \
	Test(sibling, name) { sib_##name(); } \
	Test(threads, sibling_##name) { sib_threads = true; sib_##name(); } \
	Test(records, name) { sib_threads = true; H.no_room = true; sib_##name(); } \
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

/* Wait (1 ms steps, at most 5 s) until @cond holds; else fail, saying
 * @what never happened. What a test on two threads waits for instead of
 * a fixed sleep: hx_sync syncs with neither worker. */
#define UNTIL(cond, what)                                               \
	do {                                                            \
		int t_;                                                 \
		for (t_ = 0; !(cond); t_++) {                           \
			cr_assert_lt(t_, 5000, "never: %s", what);      \
			usleep(1000);                                   \
		}                                                       \
	} while (0)

/* A's one connection once it has taken @len bytes from its guest: *@ci. */
static void taken(struct vsxb_conn_info *ci, uint64_t len)
{
	UNTIL(hx_conns(&H, 0, ci, 1) == 1 && ci->from_guest_bytes == len,
	      "A took all its guest's bytes");
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
	taken(ci, len);
	cr_assert_gt(ci[0].queued, 0, "nothing queued while B had 16 buffers");
	cr_assert_leq(ci[0].queued, 256 * 1024);
	cr_assert_eq(hx_conn_mem(&H, ci[0].id, &mem), 0);
	cr_assert_leq(mem, (size_t)ci[0].queued * 5 / 4 + 4096);
	g_read(&b, in, len);
	cr_assert_arr_eq(in, out, len);
	/* all of it delivered: nothing shown as waiting any more (across
	 * threads: what A's thread sent, less what B's took, plus B's queue) */
	hx_sync(&H);
	cr_assert_eq(hx_conns(&H, 0, ci, 4), 1);
	cr_assert_eq(ci[0].queued, 0);
	cr_assert_eq(hx_conn_mem(&H, ci[0].id, &mem), 0);
	cr_assert_eq(mem, 0);
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

SIB_TEST(receiver_paused_and_resumed)
{
	/* B's VM pauses (QEMU stop) while A sends within B's window: the bytes
	 * wait in vsxd, nothing is reset, and all arrive after cont */
	size_t len = 200000;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct vsxb_conn_info ci;
	struct gc a, b;

	two_vms(NULL, NULL);
	sib_open(&a, &b, STREAM, 50020, 6020, 256 * 1024);
	fill_pattern(out, len, 44);
	cr_assert_eq(drv_pause(G(1)->d), 0);
	g_write(&a, out, len, 65536);
	taken(&ci, len);
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
	struct vsxb_conn_info ci;
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
	taken(&ci, total);
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

/* @a's guest hears its peer went: a SHUTDOWN or an RST, past any
 * CREDIT_UPDATE before it. */
static void peer_went(struct gc *a)
{
	struct pkt *p = g_next(a->g, a, TMO);

	while (p && p->h.op == OP_CREDIT_UPDATE) {
		free(p);
		p = g_next(a->g, a, TMO);
	}
	cr_assert_not_null(p, "A's guest never heard its peer went");
	cr_assert(p->h.op == OP_SHUTDOWN || p->h.op == OP_RST, "op %u", p->h.op);
	free(p);
}

Test(threads, vm_freed_under_a_pair_across_threads)
{
	struct vsxb_engine_stats s0, s1;
	struct gc a, b;
	int i;

	H.no_room = true;    /* records, to see them given back */
	two_vms_two_threads();
	sib_open(&a, &b, STREAM, 50300, 6300, 262144);
	hx_stats(&H, 0, &s0);
	sib_move(&a, &b, 1u << 20, 73);
	/* (the records B's thread took went back to carry A's next ones) */
	hx_stats(&H, 0, &s1);
	cr_assert_gt(s1.sib_reused, s0.sib_reused, "no record given back was used again");
	/* B's VM goes (a reload removing it) with A's guest still sending:
	 * A's half ends, nothing of B's is touched again */
	hx_vm_free(&H, 1);
	for (i = 0; i < 8; i++)
		g_send(&a, OP_RW, 0, "x", 1);
	peer_went(&a);
	/* and A's VM still serves a new pair to a VM that comes back */
	struct vsxb_vm_config c = { .loop = hx_worker(&H, 1) };

	hx_close_drv(&H, 1);
	cr_assert_eq(hx_vm(&H, 1, &c), 0);
	hx_open(&H, 1, NULL);
	sib_open(&a, &b, STREAM, 50301, 6301, 262144);
	sib_move(&b, &a, 1u << 20, 74);
}

/* @n RW packets of @len bytes (byte i of packet k: k + i) on A's TX ring
 * with one kick, as a guest's burst: one descriptor each, in scratch. */
static void burst(struct gc *c, unsigned n, uint32_t len)
{
	uint64_t scratch, addr;
	uint32_t dlen;
	uint16_t flags = 0, next = 0;
	size_t slen;
	unsigned k, i;

	scratch = drv_scratch(c->g->d, &slen);
	cr_assert_leq(n * (sizeof(struct virtio_vsock_hdr) + len), slen / 2);
	for (k = 0; k < n; k++) {
		struct virtio_vsock_hdr h = {
			.src_cid = c->g->cid, .dst_cid = c->pcid,
			.src_port = c->lport, .dst_port = c->pport,
			.len = len, .type = c->type, .op = OP_RW,
			.buf_alloc = c->buf_alloc, .fwd_cnt = c->fwd_cnt,
		};
		uint8_t *p;

		addr = scratch + k * (sizeof(h) + len);
		dlen = sizeof(h) + len;
		p = drv_mem(c->g->d, addr, dlen);
		vsxb_hdr_swap(&h);
		memcpy(p, &h, sizeof(h));
		for (i = 0; i < len; i++)
			p[sizeof(h) + i] = (uint8_t)(k + i);
		cr_assert_geq(drv_post_raw(c->g->d, &addr, &dlen, &flags, &next, 1), 0);
	}
	cr_assert_geq(drv_kick(c->g->d, VSOCK_VQ_TX), 0);
	c->tx_cnt += n * len;
}

/* @n packets of @len bytes of burst() at @b's guest, whole, in order,
 * every byte checked, consumed. */
static void burst_check(struct gc *b, unsigned n, uint32_t len)
{
	unsigned k, i, got = 0;
	struct pkt *p;

	while (got < n && (p = g_next(b->g, b, TMO))) {
		if (p->h.op != OP_RW) {
			free(p);
			continue;
		}
		k = got++;
		cr_assert_eq(p->len, len, "packet %u: %u bytes", k, p->len);
		for (i = 0; i < len; i++)
			cr_assert_eq(p->data[i], (uint8_t)(k + i), "packet %u byte %u", k, i);
		g_consumed(b, p->len);
		free(p);
	}
	cr_assert_eq(got, n);
}

/* With records (the other thread lends no room, or is busy): a guest's
 * burst of packets, taken from its ring in one round, wakes the other
 * half's thread once (the wake-up is posted as the round ends), not once
 * for every record that found the other queue drained meanwhile; and
 * every packet arrives whole and in order. */
Test(threads, a_burst_wakes_the_other_thread_once)
{
	struct vsxb_engine_stats s0, s1;
	struct gc a, b;

	H.no_room = true;
	two_vms_two_threads();
	sib_open(&a, &b, STREAM, 50400, 6400, 262144);
	hx_stats(&H, 0, &s0);
	burst(&a, 64, 4096);
	burst_check(&b, 64, 4096);
	hx_stats(&H, 0, &s1);
	cr_assert_eq(s1.tx_rounds - s0.tx_rounds, 1, "the burst took %llu rounds",
		     (unsigned long long)(s1.tx_rounds - s0.tx_rounds));
	cr_assert_eq(s1.sib_wakes - s0.sib_wakes, 1, "%llu wake-ups for one round",
		     (unsigned long long)(s1.sib_wakes - s0.sib_wakes));
}

/* Time for both loop threads to finish what the last steps woke them for
 * (the tests below want the other thread idle when a burst comes). */
static void settle(void)
{
	usleep(100 * 1000);
}

/* Worker @i in none of its loop's callbacks: its room taken here once
 * and given back. A world stop (hx_stats) leaves each worker still to
 * come out of the callback that parked it, which on a loaded machine
 * takes a while; a packet sent meanwhile rightly goes by record. */
static void idle(unsigned i)
{
	const struct vsxu_loop *l = hx_worker(&H, i);

	UNTIL(l->borrow(l->ctx), "the worker idle");
	l->give_back(l->ctx);
}

/* The other thread idle: a burst goes straight into its guest's RX
 * buffers in the sender's round (one copy, in the other thread's room),
 * with no record and no wake-up; and the receiver's credit comes back to
 * the sender's guest the same way. */
Test(threads, a_burst_goes_into_the_idle_threads_guest)
{
	struct vsxb_engine_stats a0, a1, b0, b1;
	struct gc a, b;
	struct pkt *p;
	uint32_t fwd;

	two_vms_two_threads();
	sib_open(&a, &b, STREAM, 50500, 6500, 262144);
	settle();
	hx_stats(&H, 0, &a0);
	hx_stats(&H, 1, &b0);
	idle(1);
	burst(&a, 64, 4096);
	/* B's guest reads it all and tells its fwd_cnt only below */
	b.auto_credit = false;
	burst_check(&b, 64, 4096);
	hx_stats(&H, 0, &a1);
	cr_assert_eq(a1.sib_lent - a0.sib_lent, 64, "%llu of 64 packets in the room",
		     (unsigned long long)(a1.sib_lent - a0.sib_lent));
	cr_assert_eq(a1.sib_wakes - a0.sib_wakes, 0, "%llu wake-ups",
		     (unsigned long long)(a1.sib_wakes - a0.sib_wakes));
	/* A's guest sent all of B's 256 KiB window; B's guest, having read
	 * it, tells its fwd_cnt (g_consumed's CREDIT_UPDATE: its free space
	 * is below 64 KiB): A's guest hears it from B's thread, in A's room */
	idle(0);
	b.auto_credit = true;
	g_consumed(&b, 0);
	p = g_expect(&a, OP_CREDIT_UPDATE, TMO);
	fwd = p->h.fwd_cnt;
	free(p);
	cr_assert_eq(fwd, b.last_fwd_sent, "fwd_cnt %u, B's guest told %u", fwd,
		     b.last_fwd_sent);
	hx_stats(&H, 1, &b1);
	cr_assert_geq(b1.sib_lent - b0.sib_lent, 1, "B's credit went by record");
	cr_assert_eq(b1.sib_wakes - b0.sib_wakes, 0, "%llu wake-ups",
		     (unsigned long long)(b1.sib_wakes - b0.sib_wakes));
	g_write(&a, "after", 5, 5);
	p = g_expect(&b, OP_RW, TMO);
	cr_assert_eq(p->len, 5);
	cr_assert_eq(memcmp(p->data, "after", 5), 0);
	free(p);
}

/* Holds a loop's thread in a callback (so its room) until released. */
struct hold {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool in, out;
};

static void hold_cb(void *arg)
{
	struct hold *h = arg;

	pthread_mutex_lock(&h->mu);
	h->in = true;
	pthread_cond_broadcast(&h->cv);
	while (!h->out)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
}

struct own_stats {
	struct vsxb_vm *vm;
	struct vsxb_engine_stats st;
};

static void own_stats_cb(void *arg)
{
	struct own_stats *k = arg;

	k->st = k->vm->st;
}

/* VM @i's stats read on its own worker's thread: no world stop, which a
 * thread held in a callback would never join. */
static void own_stats(unsigned i, struct vsxb_engine_stats *st)
{
	struct own_stats k = { .vm = H.v[i].vm };

	vsx_test_loop_call(H.wl[i], own_stats_cb, &k);
	*st = k.st;
}

/* The other thread busy in a callback: the sender's round goes by records
 * and wakes it once; the packets after them, once it idles again, go
 * straight in, never before the records: every byte in order. */
Test(threads, a_busy_thread_gets_records_then_its_room)
{
	struct hold h = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false };
	struct vsxb_engine_stats s0, s1, s2;
	const struct vsxu_loop *l;
	struct gc a, b;

	two_vms_two_threads();
	sib_open(&a, &b, STREAM, 50600, 6600, 262144);
	l = hx_worker(&H, 1);
	cr_assert_eq(l->post(l->ctx, hold_cb, &h), 0);
	pthread_mutex_lock(&h.mu);
	while (!h.in)
		pthread_cond_wait(&h.cv, &h.mu);
	pthread_mutex_unlock(&h.mu);
	own_stats(0, &s0);
	burst(&a, 32, 4096);
	/* A's round is over once its 32 packets are counted */
	UNTIL((own_stats(0, &s1), s1.tx_pkts - s0.tx_pkts == 32), "A's 32 packets counted");
	cr_assert_eq(s1.sib_lent - s0.sib_lent, 0, "%llu packets in a busy room",
		     (unsigned long long)(s1.sib_lent - s0.sib_lent));
	cr_assert_eq(s1.sib_wakes - s0.sib_wakes, 1);
	pthread_mutex_lock(&h.mu);
	h.out = true;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.mu);
	burst_check(&b, 32, 4096);
	idle(1);
	burst(&a, 32, 4096);
	burst_check(&b, 32, 4096);
	hx_stats(&H, 0, &s2);
	cr_assert_eq(s2.sib_lent - s1.sib_lent, 32, "%llu of 32 packets in the idle room",
		     (unsigned long long)(s2.sib_lent - s1.sib_lent));
}

/* A ring found broken in the other thread's room (B's RX avail index run
 * past its size: the pop fails there) is not broken by the borrower,
 * which may not reset B's connections: B's own thread breaks B's device,
 * once, and A's guest hears its peer went; A's VM serves on. */
Test(threads, a_ring_broken_in_the_room_breaks_on_its_own_thread)
{
	struct gc a, b, a2, b2;

	two_vms_two_threads();
	sib_open(&a, &b, STREAM, 50700, 6700, 262144);
	settle();
	cr_assert_eq(drv_set_avail_idx(G(1)->d, VSOCK_VQ_RX, 0x8000), 0);
	settle();
	cr_assert_eq(hx_log_count(&H, "device stopped until"), 0, "B broken before A sent");
	g_write(&a, "x", 1, 1);
	UNTIL(hx_log_count(&H, "device stopped until"), "B's device stopped");
	cr_assert_eq(hx_log_count(&H, "vm cid4: RX queue: invalid descriptor chain: device "
				  "stopped until"), 1);
	peer_went(&a);
	/* B's front-end resets the device: a new pair works both ways */
	hx_close_drv(&H, 1);
	hx_open(&H, 1, NULL);
	sib_open(&a2, &b2, STREAM, 50701, 6701, 262144);
	sib_move(&a2, &b2, 1u << 20, 75);
	sib_move(&b2, &a2, 1u << 20, 76);
	cr_assert_eq(hx_log_count(&H, "device stopped until"), 1);
}
