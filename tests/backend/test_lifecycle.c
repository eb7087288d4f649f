/*
 * The backend end to end (the harness and helpers of suite.h): the VM
 * lifecycle: pause (QEMU stop/cont), guest reset, bad restarts, a VMM that
 * shrinks guest memory.
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
