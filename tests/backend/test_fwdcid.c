/*
 * The backend end to end (the harness and helpers of suite.h): forward-
 * cid: the host kernel's vsock as the far end.
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
