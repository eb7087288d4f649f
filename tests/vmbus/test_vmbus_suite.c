/*
 * The shared transport suite (tests/common/suite.c) over the vmbus
 * transport, once with vsock:host:PORT addresses and once with
 * hvsock:SERVICE-GUID addresses.
 *
 * NO HYPER-V HOST IS INVOLVED: the vmbus transport runs against the hv_sock
 * simulator (tests/vmbus/sim.c), which enforces the documented hv_sock
 * rules over real AF_UNIX sockets in this process; the peer is the
 * simulator's host end. Nothing here opens AF_VSOCK. The same cases run
 * over the virtio transport in the lab guest (tests/common/suite-virtio.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "sim.h"
#include "suite.h"

#define CLOSE_TIMEOUT_MS 1000
#define PAGE 4096u

struct simctx {
	uint32_t next_port;
	int hvsock;
};

static void addr_of(const struct simctx *c, const char *cid, uint32_t port, char *addr,
		    size_t len)
{
	char g[VSX_GUID_STRLEN];
	uint8_t guid[16];

	if (c->hvsock) {
		vsx_guid_from_port(port, guid);
		/* braces and upper case on purpose: any form must do */
		vsx_guid_format(guid, VSX_GUID_BRACES | VSX_GUID_UPPER, g, sizeof(g));
		snprintf(addr, len, "hvsock:%s", g);
	} else {
		snprintf(addr, len, "vsock:%s:%u", cid, port);
	}
}

static int s_serve(void *ctx, char *addr, size_t len)
{
	struct simctx *c = ctx;
	uint32_t port = c->next_port++;

	addr_of(c, "host", port, addr, len);
	return vmbus_sim_host_listen(port);
}

static int s_serve_accept(void *ctx, int h, int timeout_ms)
{
	return vmbus_sim_host_accept(h, timeout_ms);
}

static int s_listen_addr(void *ctx, char *addr, size_t len)
{
	struct simctx *c = ctx;

	addr_of(c, "any", c->next_port++, addr, len);
	return 0;
}

static int s_dial(void *ctx, uint32_t port)
{
	return vmbus_sim_host_connect(port, 60000);
}

static int s_unserved(void *ctx, char *addr, size_t len)
{
	struct simctx *c = ctx;

	addr_of(c, "host", c->next_port++, addr, len);
	return 0;
}

/*
 * What vsx_get_buffer must say on the simulated Linux 6.1 (hv_sock rules,
 * written out independently of libvsx): rings are the socket buffer the
 * kernel holds at channel open, clamped to 6..64 pages and page-rounded; a
 * client's buffers are reset to 6 pages by connect(); a listener keeps what
 * it was given (default net.core.wmem_default = 212992).
 */
static size_t ring(size_t v)
{
	if (v < 6 * PAGE)
		v = 6 * PAGE;
	if (v > 64 * PAGE)
		v = 64 * PAGE;
	return (v + PAGE - 1) / PAGE * PAGE;
}

static int s_expect_buffer(void *ctx, int role, int which, size_t rx, size_t tx,
			   size_t *out)
{
	size_t asked = which == VSX_RX ? rx : tx;

	if (role == VSX_SUITE_CLIENT)
		*out = 6 * PAGE;
	else
		*out = ring(asked ? asked : 212992);
	return 0;
}

static struct simctx ctx_vsock = { .next_port = 5000 };
static struct simctx ctx_hvsock = { .next_port = 7000, .hvsock = 1 };

static const struct vsx_suite_env env_vsock = {
	.name = "vmbus-sim vsock:",
	.transport = VSX_TRANSPORT_VMBUS,
	.expect_name = VSX_TRANSPORT_VMBUS,
	.ctx = &ctx_vsock,
	.serve = s_serve,
	.serve_accept = s_serve_accept,
	.listen_addr = s_listen_addr,
	.dial = s_dial,
	.unserved = s_unserved,
	.unserved_err = -ETIMEDOUT,      /* Hyper-V does not refuse: no answer */
	.set_connected_err = -EISCONN,   /* rings are fixed at channel open */
	.expect_buffer = s_expect_buffer,
	.close_settle_ms = CLOSE_TIMEOUT_MS,
};

static struct vsx_suite_env env_hvsock;

static void setup(void)
{
	const struct vmbus_sim_conf conf = { .close_timeout_ms = CLOSE_TIMEOUT_MS };

	/* Never let probing see the build machine's own vsock device. */
	setenv("VSX_SYSROOT", "/nonexistent-vsx-test-sysroot", 1);
	vmbus_sim_start(&conf);
	env_hvsock = env_vsock;
	env_hvsock.name = "vmbus-sim hvsock:";
	env_hvsock.ctx = &ctx_hvsock;
}

TestSuite(vmbus_suite, .init = setup, .timeout = 120);

#define SUITE_CASE(name)                                                         \
	Test(vmbus_suite, name)                                                  \
	{                                                                        \
		cr_assert_eq(vsx_suite_run_case(&env_vsock, #name), 0,           \
			     "suite case %s failed over vsock: addresses (see stderr)", #name); \
	}                                                                        \
	Test(vmbus_suite, name##_hvsock)                                         \
	{                                                                        \
		cr_assert_eq(vsx_suite_run_case(&env_hvsock, #name), 0,          \
			     "suite case %s failed over hvsock: addresses (see stderr)", #name); \
	}

/* One line per case of suite.c; covers_every_case keeps this list complete. */
#define ALL_CASES(X)                                                             \
	X(transfer_client)                                                       \
	X(transfer_accepted)                                                     \
	X(half_close)                                                            \
	X(close_graceful)                                                        \
	X(close_linger_timeout)                                                  \
	X(close_no_linger)                                                       \
	X(connect_unserved)                                                      \
	X(nonblock_recv)                                                         \
	X(nonblock_send)                                                         \
	X(peer_gone)                                                             \
	X(buffer_knob)                                                           \
	X(info)

ALL_CASES(SUITE_CASE)

#define CASE_NAME(name) #name,

Test(vmbus_suite, covers_every_case)
{
	static const char *const here[] = { ALL_CASES(CASE_NAME) NULL };
	const struct vsx_suite_case *c;
	size_t i;
	int found;

	for (c = vsx_suite_cases; c->name; c++) {
		found = 0;
		for (i = 0; here[i]; i++)
			found |= strcmp(here[i], c->name) == 0;
		cr_assert(found, "suite case %s is not run over vmbus: add it to ALL_CASES",
			  c->name);
	}
}

/* The simulator really was the kernel, and libvsx never peeked. */
Test(vmbus_suite, whole_suite_never_peeks)
{
	const struct vsx_suite_case *c;
	struct vmbus_sim_stats st;

	for (c = vsx_suite_cases; c->name; c++) {
		if (!strcmp(c->name, "close_linger_timeout") || !strcmp(c->name, "connect_unserved"))
			continue; /* the slow ones; they run on their own above */
		cr_assert_eq(vsx_suite_run_case(&env_vsock, c->name), 0, "case %s", c->name);
	}
	vmbus_sim_stats(&st);
	cr_assert_gt(st.sockets, 10, "only %lu sockets went through the simulator",
		     st.sockets);
	cr_assert_eq(st.peek_refused, 0, "libvsx used MSG_PEEK %lu times on hv_sock",
		     st.peek_refused);
	cr_assert_eq(st.vsock_bufsize, 0, "libvsx set SO_VM_SOCKETS_BUFFER_* %lu times: "
		     "hv_sock ignores it", st.vsock_bufsize);
	cr_assert_eq(st.buf_after_open, 0, "libvsx set SO_*BUF %lu times on open "
		     "channels, where it has no effect", st.buf_after_open);
	cr_assert_leq(st.max_send, 16384, "one send moved %zu bytes: more than the MTU",
		      st.max_send);
}
