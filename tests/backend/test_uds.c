/*
 * The backend end to end (the harness and helpers of suite.h): host
 * programs through a VM's uds-path: the CONNECT handshake, good and bad.
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

TestSuite(uds, .init = setup1, .fini = teardown, .timeout = 60);

Test(uds, connect_ok_and_data_after_line)
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

Test(uds, host_ports_allocated_and_distinct)
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

Test(uds, guest_refuses)
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

Test(uds, guest_never_answers)
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
Test(uds, program_gives_up_before_guest_answers)
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

Test(uds, bad_lines_closed_without_reply)
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

Test(uds, slowloris_timed_out)
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

Test(uds, many_clients_bounded)
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

Test(uds, uds_path_mode_0600)
{
	struct stat st;

	cr_assert_eq(stat(H.v[0].uds, &st), 0);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600);
}

Test(uds, device_down_closes_clients)
{
	int fd;

	hx_close_drv(&H, 0);
	fd = h_dial(H.v[0].uds, "CONNECT 5010\n");
	cr_assert(h_eof(fd, TMO) == 0 || errno == ECONNRESET);
	close(fd);
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
Test(uds, program_gone_before_guest_accepts)
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
Test(uds, program_unwritable_when_guest_accepts)
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
