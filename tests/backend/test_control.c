/*
 * The backend end to end (the harness and helpers of suite.h): the control
 * calls (list, show, set-buffer, close) and the router's configuration.
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

TestSuite(control, .init = setup1, .fini = teardown, .timeout = 60);
TestSuite(config, .init = setup_bare, .fini = teardown, .timeout = 60);

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
