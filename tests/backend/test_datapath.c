/*
 * The backend end to end (the harness and helpers of suite.h): the data-
 * path rules: batching, direct packets, bounded memory, splitting.
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

TestSuite(datapath, .init = setup1, .fini = teardown, .timeout = 120);

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
	vsxb_hdr_swap(&h);
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

Test(datapath, control_packets_sent_in_their_round)
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
	cr_assert_eq(b.ctrl_sent - a.ctrl_sent, 10);
	cr_assert_eq(b.rx_short - a.rx_short, 0);
	close(fd);
	close(lfd);
}

/* A kick's worth of packets for nobody (two TX batches, in one round):
 * each gets its RST, none dropped; the RSTs of one batch go out before the
 * next batch is read (device.c), so the orphans' room is never short. */
Test(datapath, every_orphan_of_a_round_gets_its_rst)
{
	enum { N = 2 * VSXB_TX_BATCH }; /* the driver's 256 TX buffers */
	struct drv_opts o = { .queue_size = 1024 };
	struct vsxb_engine_stats a, b;
	struct gc x[N];
	struct pkt *p;
	int i;

	hx_close_drv(&H, 0);
	hx_open(&H, 0, &o);
	hx_stats(&H, 0, &a);
	hx_pause(&H);
	for (i = 0; i < N; i++) {
		gc_init(&x[i], G(0), STREAM, 46000 + (uint32_t)i, 2, 1299);
		cr_assert_geq(g_send(&x[i], OP_RW, 0, "q", 1), 0, "packet %d not sent", i);
	}
	hx_unpause(&H);
	for (i = 0; i < N; i++) {
		p = g_next(G(0), &x[i], TMO);
		cr_assert_not_null(p, "no RST for packet %d", i);
		cr_assert_eq(p->h.op, OP_RST, "packet %d: op %u", i, p->h.op);
		free(p);
	}
	hx_sync(&H);
	hx_stats(&H, 0, &b);
	cr_assert_eq(b.orphans_dropped - a.orphans_dropped, 0);
	cr_assert_eq(b.resets - a.resets, N);
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
	/* and more packets for nobody: at most VSXB_ORPHAN_MAX RSTs are kept */
	for (i = 0; i < VSXB_ORPHAN_MAX + 36; i++) {
		gc_init(&x, G(0), STREAM, 45000 + (uint32_t)i, 2, 1283);
		cr_assert_geq(g_send(&x, OP_RW, 0, "q", 1), 0);
	}
	hx_sync(&H);
	hx_stats(&H, 0, &st);
	cr_assert_eq(st.orphans_dropped, 36);
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
	cr_assert_geq(st.rx_short, 1, "the RX schedule never found the ring empty");
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
