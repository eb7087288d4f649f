/*
 * What the backend's end-to-end test files share (suite.h): the test VMs,
 * their set-up, and the helpers that open and inspect connections.
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

struct hx H;

void setup1(void)
{
	hx_init(&H);
	cr_assert_eq(hx_vm(&H, 0, NULL), 0);
	hx_open(&H, 0, NULL);
}

void setup_bare(void)
{
	hx_init(&H);
}

void teardown(void)
{
	hx_fini(&H);
}

int listen_port(unsigned vm, uint32_t port, int type)
{
	char path[128];

	snprintf(path, sizeof(path), "%s_%u", H.v[vm].uds, port);
	return h_listen(path, type);
}

/* Guest port @lport connects to host port @hport (a listener made here). */
void g2h_open(struct gc *c, unsigned vm, uint16_t type, uint32_t lport,
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
uint32_t h2g_open(struct gc *c, unsigned vm, uint32_t gport, int *hfd,
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

struct vsxb_conn_info conn_of(const struct gc *c, unsigned vm)
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

bool conn_gone(const struct gc *c, unsigned vm, int timeout_ms)
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
void still_works(struct gc *c, int fd)
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
