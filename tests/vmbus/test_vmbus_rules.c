/*
 * The vmbus transport against each hv_sock rule, one or more tests per
 * rule; each fails if libvsx ignores the rule.
 *
 * NO HYPER-V HOST IS INVOLVED: the transport runs against the hv_sock
 * simulator (tests/vmbus/sim.c), which enforces the documented hv_sock
 * behaviour (hyperv_transport.c) over AF_UNIX sockets in this process, and
 * can play several kernel generations. Nothing here opens AF_VSOCK.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "check.h"
#include "sim.h"
#include "vmbus-sys.h"
#include "util.h"

#define PAGE 4096u
#define RING_MIN (6 * PAGE)
#define RING_MAX (64 * PAGE)
#define MTU 16384
#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static void start(const char *kernel, int close_timeout_ms)
{
	const struct vmbus_sim_conf conf = {
		.kernel_release = kernel,
		.close_timeout_ms = close_timeout_ms,
	};

	setenv("VSX_SYSROOT", "/nonexistent-vsx-test-sysroot", 1);
	vmbus_sim_start(&conf);
}

static void start_61(void)
{
	start("6.1.0-57-amd64", 1000);
}

static struct vsx_opts vmbus_opts(void)
{
	struct vsx_opts o;

	memset(&o, 0, sizeof(o));
	o.transport = VSX_TRANSPORT_VMBUS;
	return o;
}

static struct vmbus_sim_stats stats(void)
{
	struct vmbus_sim_stats st;

	vmbus_sim_stats(&st);
	return st;
}


/* Connect to host service @port; the host end into *hfd. */
static vsx_sock *dial_host(uint32_t port, const struct vsx_opts *o, int *hfd)
{
	char addr[64];
	vsx_sock *s = NULL;
	int id, rc;

	id = vmbus_sim_host_listen(port);
	cr_assert_geq(id, 0, "host listen %u: %d", port, id);
	snprintf(addr, sizeof(addr), "vsock:host:%u", port);
	rc = vsx_connect(addr, o, &s);
	cr_assert_eq(rc, 0, "vsx_connect(%s) = %d: %s", addr, rc, vsx_strerror(rc));
	*hfd = vmbus_sim_host_accept(id, 5000);
	cr_assert_geq(*hfd, 0, "host accept: %d", *hfd);
	return s;
}

/* A guest listener on @port, the host connected, and the accepted socket. */
static vsx_sock *host_dials(vsx_sock *l, uint32_t port, int *hfd)
{
	vsx_sock *a = NULL;
	int rc;

	*hfd = vmbus_sim_host_connect(port, 4000);
	cr_assert_geq(*hfd, 0, "host connect to %u: %d", port, *hfd);
	rc = vsx_accept(l, &a);
	cr_assert_eq(rc, 0, "vsx_accept = %d: %s", rc, vsx_strerror(rc));
	return a;
}

static size_t get_buf(const vsx_sock *s, int which)
{
	size_t v = 0;
	int rc = vsx_get_buffer(s, which, &v);

	cr_assert_eq(rc, 0, "vsx_get_buffer = %d: %s", rc, vsx_strerror(rc));
	return v;
}

/* vsx_get_buffer must be exactly what the simulated kernel opened. */
static void rings_match(const vsx_sock *s, size_t want_rx, size_t want_tx)
{
	size_t rx = 0, tx = 0;

	EQ(vmbus_sim_rings(vsx_fd(s), &rx, &tx), 0);
	EQ(rx, want_rx);
	EQ(tx, want_tx);
	EQ(get_buf(s, VSX_RX), rx);
	EQ(get_buf(s, VSX_TX), tx);
}

static uint8_t pat(uint64_t off)
{
	return (uint8_t)(off * 131 + (off >> 11) * 7 + 3);
}

/* ---- Peers: the host only ------------------------------------------------ */

Test(host_only, other_cids_refused_before_any_syscall, .init = start_61)
{
	const char *addrs[] = { "vsock:3:5000", "vsock:1:5000", "vsock:local:5000",
				"vsock:4294967294:5000" };
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s = NULL;
	size_t i;
	int rc;

	for (i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
		rc = vsx_connect(addrs[i], &o, &s);
		EQ(rc, -ENETUNREACH);
		cr_assert_null(s);
		HAS(vsx_strerror(rc), "host");
		HAS(vsx_strerror(rc), "hv_sock");
	}
	EQ(stats().calls, 0); /* refused before any syscall */
}

Test(host_only, cid_any_refused, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s = NULL;

	EQ(vsx_connect("vsock:any:5000", &o, &s), -EINVAL);
	HAS(vsx_strerror(-EINVAL), "host");
	EQ(stats().calls, 0);
}

Test(host_only, guest_listens_on_any_only, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *l = NULL;

	EQ(vsx_listen("vsock:3:5000", &o, &l), -EADDRNOTAVAIL);
	HAS(vsx_strerror(-EADDRNOTAVAIL), "vsock:any:PORT");
	EQ(stats().calls, 0);
	EQ(vsx_listen("vsock:any:5000", &o, &l), 0);
	vsx_close(l);
}

Test(host_only, host_cid_connects, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	struct vsx_info info;
	vsx_sock *s;
	int hfd;

	s = dial_host(5001, &o, &hfd);
	EQ(vsx_info(s, &info), 0);
	cr_assert_str_eq(info.transport, "vmbus");
	cr_assert_str_eq(info.peer, "vsock:2:5001");
	EQ(vsx_send(s, "hi", 2), 2);
	close(hfd);
	vsx_close(s);
}

/* ---- Stream only --------------------------------------------------------- */

Test(stream_only, seqpacket_refused_before_any_syscall, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s = NULL;
	int rc;

	o.flags = VSX_O_SEQPACKET;
	rc = vsx_connect("vsock:host:5000", &o, &s);
	EQ(rc, -ESOCKTNOSUPPORT);
	HAS(vsx_strerror(rc), "SEQPACKET");
	rc = vsx_listen("vsock:any:5000", &o, &s);
	EQ(rc, -ESOCKTNOSUPPORT);
	rc = vsx_connect("hvsock:00000808-facb-11e6-bd58-64006a7986d3", &o, &s);
	EQ(rc, -ESOCKTNOSUPPORT);
	cr_assert_null(s);
	EQ(stats().calls, 0);
}

/* ---- Service GUIDs ------------------------------------------------------- */

Test(guid, connect_by_service_guid, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	struct vsx_info info;
	vsx_sock *s = NULL;
	char buf[8];
	int id, hfd;

	id = vmbus_sim_host_listen(2056);
	EQ(vsx_connect("hvsock:{00000808-FACB-11E6-BD58-64006A7986D3}", &o, &s), 0);
	hfd = vmbus_sim_host_accept(id, 5000);
	cr_assert_geq(hfd, 0);
	EQ(vsx_send(s, "ping", 4), 4);
	EQ(recv(hfd, buf, sizeof(buf), 0), 4);
	cr_assert(memcmp(buf, "ping", 4) == 0);
	EQ(vsx_info(s, &info), 0);
	cr_assert_str_eq(info.peer, "hvsock:00000808-facb-11e6-bd58-64006a7986d3");
	cr_assert(strncmp(info.local, "hvsock:", 7) == 0 &&
		  strstr(info.local, "-facb-11e6-bd58-64006a7986d3"),
		  "local %s is not a service GUID", info.local);
	close(hfd);
	vsx_close(s);
}

Test(guid, listen_on_service_guid, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	struct vsx_info info;
	vsx_sock *l = NULL, *a;
	int hfd;

	EQ(vsx_listen("hvsock:00000809-facb-11e6-bd58-64006a7986d3", &o, &l), 0);
	EQ(vsx_info(l, &info), 0);
	cr_assert_str_eq(info.local, "hvsock:00000809-facb-11e6-bd58-64006a7986d3");
	a = host_dials(l, 2057, &hfd);
	EQ(vsx_info(a, &info), 0);
	/* the host's end is a service GUID too (its port 4000 = 0xfa0) */
	cr_assert_str_eq(info.peer, "hvsock:00000fa0-facb-11e6-bd58-64006a7986d3");
	EQ(send(hfd, "x", 1, 0), 1);
	close(hfd);
	vsx_close(a);
	vsx_close(l);
}

Test(guid, non_template_guid_refused_before_any_syscall, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s = NULL;
	int rc;

	rc = vsx_connect("hvsock:99999999-1234-5678-9abc-def001234567", &o, &s);
	EQ(rc, -EINVAL);
	HAS(vsx_strerror(rc), "facb-11e6-bd58-64006a7986d3");
	rc = vsx_listen("hvsock:00000808-facb-11e6-bd58-64006a7986d4", &o, &s);
	EQ(rc, -EINVAL);
	/* the template with port ffffffff is port 'any': nothing to connect to */
	rc = vsx_connect("hvsock:ffffffff-facb-11e6-bd58-64006a7986d3", &o, &s);
	EQ(rc, -EINVAL);
	cr_assert_null(s);
	EQ(stats().calls, 0);
}

/* ---- Rings fixed at open, page-rounded and clamped ----------------------- */

/* Linux 5.5+: connect() resets a client's buffers to 6 pages; libvsx must
 * report that, not what it asked for. */
Test(rings, client_on_current_kernel_gets_six_pages, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	int hfd;

	o.rx_buffer = 128 * KiB;
	o.tx_buffer = 200 * KiB;
	s = dial_host(5100, &o, &hfd);
	rings_match(s, RING_MIN, RING_MIN);
	close(hfd);
	vsx_close(s);
}

/* Linux 5.3/5.4: what is set before connect is what the ring gets, within
 * 6..64 pages, page-rounded. */
Test(rings, client_rounding_and_clamping)
{
	static const struct { size_t ask, ring; } cases[] = {
		{ 100000, 102400 },        /* rounded up to 25 pages */
		{ 1, RING_MIN },           /* clamped up to 6 pages */
		{ 24577, 28672 },          /* one byte over 6 pages: 7 */
		{ 262144, RING_MAX },      /* exactly 64 pages */
		{ 10 * MiB, RING_MAX },    /* clamped down to 64 pages */
	};
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	size_t i;
	int hfd;

	start("5.4.0-1089-azure", 1000);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		o.rx_buffer = cases[i].ask;
		o.tx_buffer = cases[i].ask;
		s = dial_host(5200 + (uint32_t)i, &o, &hfd);
		rings_match(s, cases[i].ring, cases[i].ring);
		close(hfd);
		vsx_close(s);
	}
	EQ(stats().vsock_bufsize, 0); /* hv_sock ignores SO_VM_SOCKETS_BUFFER_SIZE */
}

/* Before 5.3 the kernel used 6 pages whatever it was told. */
Test(rings, old_kernel_fixed_six_pages)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s, *l = NULL, *a;
	int hfd, hfd2;

	start("4.19.0-26-amd64", 1000);
	o.rx_buffer = 200000;
	o.tx_buffer = 200000;
	s = dial_host(5300, &o, &hfd);
	rings_match(s, RING_MIN, RING_MIN);
	EQ(vsx_listen("vsock:any:5301", &o, &l), 0);
	EQ(get_buf(l, VSX_RX), RING_MIN);
	a = host_dials(l, 5301, &hfd2);
	rings_match(a, RING_MIN, RING_MIN);
	close(hfd);
	close(hfd2);
	vsx_close(s);
	vsx_close(a);
	vsx_close(l);
}

/* A listener's buffers size the rings of what it accepts. */
Test(rings, listener_passes_sizes_to_accepted, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *l = NULL, *a, *l2 = NULL, *a2;
	int hfd, hfd2;

	o.rx_buffer = 150000;   /* 37 pages: 151552 */
	o.tx_buffer = 70000;    /* 18 pages: 73728 */
	EQ(vsx_listen("vsock:any:5400", &o, &l), 0);
	EQ(get_buf(l, VSX_RX), 151552);
	EQ(get_buf(l, VSX_TX), 73728);
	a = host_dials(l, 5400, &hfd);
	rings_match(a, 151552, 73728);

	/* Default listener on 5.5+: never initialised by hv_sock, so its
	 * buffers are net.core.[rw]mem_default (212992): 52 pages. */
	o.rx_buffer = o.tx_buffer = 0;
	EQ(vsx_listen("vsock:any:5401", &o, &l2), 0);
	a2 = host_dials(l2, 5401, &hfd2);
	rings_match(a2, 212992, 212992);
	close(hfd);
	close(hfd2);
	vsx_close(a);
	vsx_close(a2);
	vsx_close(l);
	vsx_close(l2);
}

/* The kernel caps SO_*BUF at net.core.[rw]mem_max and starts a listener
 * at net.core.[rw]mem_default: what it holds then need not be a page
 * multiple or within 6..64 pages, and the ring is still the rule's. */
Test(rings, kernel_caps_and_defaults)
{
	const struct vmbus_sim_conf conf = {
		.kernel_release = "6.1.0-57-amd64",
		.rmem_max = 50000,          /* SO_RCVBUF holds at most 100000 */
		.wmem_max = 20000,          /* SO_SNDBUF holds at most 40000 */
		.rmem_default = 300000,     /* above 64 pages */
		.wmem_default = 10000,      /* below 6 pages */
	};
	struct vsx_opts o = vmbus_opts();
	vsx_sock *l = NULL, *a, *l2 = NULL, *a2;
	int hfd, hfd2;

	setenv("VSX_SYSROOT", "/nonexistent-vsx-test-sysroot", 1);
	vmbus_sim_start(&conf);
	o.rx_buffer = 200000;
	o.tx_buffer = 200000;
	EQ(vsx_listen("vsock:any:5450", &o, &l), 0);
	a = host_dials(l, 5450, &hfd);
	rings_match(a, 102400, 40960);     /* 100000 and 40000, page-rounded */
	EQ(get_buf(l, VSX_RX), 102400);

	o.rx_buffer = o.tx_buffer = 0;
	EQ(vsx_listen("vsock:any:5451", &o, &l2), 0);
	a2 = host_dials(l2, 5451, &hfd2);
	rings_match(a2, RING_MAX, RING_MIN);
	close(hfd);
	close(hfd2);
	vsx_close(a);
	vsx_close(a2);
	vsx_close(l);
	vsx_close(l2);
}

/* What vsx_get_buffer reports is what really fits in flight. */
Test(rings, reported_ring_is_what_fits)
{
	struct vsx_opts o = vmbus_opts();
	uint8_t *buf = calloc(1, MiB);
	size_t sent = 0, hsent = 0;
	vsx_sock *s;
	ssize_t r;
	int hfd;

	start("5.4.0-1089-azure", 1000);
	cr_assert_not_null(buf);
	o.flags = VSX_O_NONBLOCK;
	o.rx_buffer = 40 * KiB;
	o.tx_buffer = 64 * KiB;
	s = dial_host(5500, &o, &hfd);
	/* guest -> host: the host does not read */
	while ((r = vsx_send(s, buf, MiB)) > 0)
		sent += (size_t)r;
	EQ(r, -EAGAIN);
	EQ(sent, get_buf(s, VSX_TX));
	EQ(sent, 64 * KiB);
	/* host -> guest: the guest does not read */
	while ((r = vmbus_sim_host_send(hfd, buf, MiB, MSG_DONTWAIT)) > 0)
		hsent += (size_t)r;
	EQ(r, -EAGAIN);
	EQ(hsent, get_buf(s, VSX_RX));
	EQ(hsent, 40 * KiB);
	close(hfd);
	vsx_close(s);
	free(buf);
}

/* ---- Changes on a connected socket --------------------------------------- */

Test(rings, change_when_connected_is_eisconn, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s, *l = NULL, *a;
	int hfd, hfd2, rc;

	s = dial_host(5600, &o, &hfd);
	rc = vsx_set_buffer(s, VSX_RX, 200000);
	EQ(rc, -EISCONN);
	HAS(vsx_strerror(rc), "VSX_O_BUFFER_NEXT");
	HAS(vsx_strerror(rc), "cannot change");
	EQ(vsx_set_buffer(s, VSX_TX, 200000), -EISCONN);
	rings_match(s, RING_MIN, RING_MIN);

	EQ(vsx_listen("vsock:any:5601", &o, &l), 0);
	a = host_dials(l, 5601, &hfd2);
	EQ(vsx_set_buffer(a, VSX_RX | VSX_TX, 100000), -EISCONN);
	rings_match(a, 212992, 212992);
	/* libvsx did not even try: the kernel would have accepted, uselessly */
	EQ(stats().buf_after_open, 0);
	close(hfd);
	close(hfd2);
	vsx_close(s);
	vsx_close(a);
	vsx_close(l);
}

Test(rings, change_on_listener_applies_to_next_accepted, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *l = NULL, *a1, *a2;
	int h1, h2;

	EQ(vsx_listen("vsock:any:5700", &o, &l), 0);
	a1 = host_dials(l, 5700, &h1);
	EQ(vsx_set_buffer(l, VSX_RX, 100000), 0);
	EQ(get_buf(l, VSX_RX), 102400);
	a2 = host_dials(l, 5700, &h2);
	rings_match(a1, 212992, 212992);   /* opened before: unchanged */
	rings_match(a2, 102400, 212992);
	close(h1);
	close(h2);
	vsx_close(a1);
	vsx_close(a2);
	vsx_close(l);
}

/* VSX_O_BUFFER_NEXT on an accepted socket: the listener's next connection. */
Test(rings, deferred_change_reaches_next_accepted, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *l = NULL, *a1, *a2;
	int h1, h2;

	o.flags = VSX_O_BUFFER_NEXT;
	EQ(vsx_listen("vsock:any:5800", &o, &l), 0);
	a1 = host_dials(l, 5800, &h1);
	EQ(vsx_set_buffer(a1, VSX_RX | VSX_TX, 200000), 0);
	rings_match(a1, 212992, 212992);   /* this one cannot change */
	EQ(get_buf(l, VSX_RX), 200704);     /* the listener has it now */
	a2 = host_dials(l, 5800, &h2);
	rings_match(a2, 200704, 200704);
	EQ(stats().buf_after_open, 0);
	close(h1);
	close(h2);
	vsx_close(a1);
	vsx_close(a2);
	vsx_close(l);
}

/* VSX_O_BUFFER_NEXT on a client: the next vsx_connect (once). 5.4 kernel,
 * where a client's own sizes are honoured. */
Test(rings, deferred_change_reaches_next_connect)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s1, *s2, *s3;
	int h1, h2, h3;

	start("5.4.0-1089-azure", 1000);
	o.flags = VSX_O_BUFFER_NEXT;
	s1 = dial_host(5900, &o, &h1);
	EQ(vsx_set_buffer(s1, VSX_RX, 100000), 0);
	rings_match(s1, RING_MIN, RING_MIN);
	s2 = dial_host(5901, &o, &h2);
	rings_match(s2, 102400, RING_MIN);
	s3 = dial_host(5902, &o, &h3);
	rings_match(s3, RING_MIN, RING_MIN); /* taken once */
	close(h1);
	close(h2);
	close(h3);
	vsx_close(s1);
	vsx_close(s2);
	vsx_close(s3);
}

/* ---- MTU ---------------------------------------------------------------- */

struct drain {
	int fd;
	size_t want, got;
	long long bad;
};

static void *drain_main(void *arg)
{
	struct drain *d = arg;
	uint8_t buf[65536];
	size_t i;
	ssize_t n;

	d->bad = -1;
	while (d->got < d->want) {
		n = recv(d->fd, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		for (i = 0; i < (size_t)n && d->bad < 0; i++)
			if (buf[i] != pat(d->got + i))
				d->bad = (long long)(d->got + i);
		d->got += (size_t)n;
	}
	return NULL;
}

Test(mtu, big_send_is_chunked_and_completes, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	const size_t n = 3 * MiB + 77;
	uint8_t *buf = malloc(n);
	struct drain d = { .want = n };
	struct vmbus_sim_stats st;
	pthread_t th;
	vsx_sock *s;
	size_t i;

	cr_assert_not_null(buf);
	for (i = 0; i < n; i++)
		buf[i] = pat(i);
	s = dial_host(6000, &o, &d.fd);
	cr_assert_eq(pthread_create(&th, NULL, drain_main, &d), 0);
	EQ(vsx_send(s, buf, n), n);   /* one call, everything */
	pthread_join(th, NULL);
	EQ(d.got, n);
	EQ(d.bad, -1);
	st = stats();
	cr_assert_leq(st.max_send, MTU, "a send moved %zu bytes", st.max_send);
	cr_assert_geq(st.sends, n / MTU, "only %lu sends for %zu bytes", st.sends, n);
	close(d.fd);
	vsx_close(s);
	free(buf);
}

Test(mtu, receive_comes_in_mtu_pieces, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	const size_t n = 256 * KiB;
	uint8_t *out = malloc(n), *in = malloc(n);
	size_t got = 0, i;
	vsx_sock *s;
	ssize_t r;
	int hfd;

	cr_assert(out && in);
	for (i = 0; i < n; i++)
		out[i] = pat(i);
	s = dial_host(6100, &o, &hfd);
	EQ(send(hfd, out, n, 0), n);  /* the host writes it all at once */
	while (got < n) {
		r = vsx_recv(s, in + got, n - got);
		cr_assert_gt(r, 0, "vsx_recv = %zd", r);
		cr_assert_leq(r, MTU, "one receive returned %zd bytes", r);
		got += (size_t)r;
	}
	cr_assert(memcmp(in, out, n) == 0, "bytes differ");
	cr_assert_leq(stats().max_recv, MTU);
	close(hfd);
	vsx_close(s);
	free(out);
	free(in);
}

/* ---- No MSG_PEEK --------------------------------------------------------- */

/* The simulated kernel has no MSG_PEEK, as hv_sock (hvs_stream_dequeue). */
Test(no_peek, simulator_refuses_peek, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	char c;
	int hfd;

	s = dial_host(6200, &o, &hfd);
	EQ(send(hfd, "z", 1, 0), 1);
	errno = 0;
	EQ(vsx__vmbus_sys->recv(vsx_fd(s), &c, 1, MSG_PEEK), -1);
	EQ(errno, EOPNOTSUPP);
	EQ(stats().peek_refused, 1);
	EQ(vsx_recv(s, &c, 1), 1); /* the byte is still there */
	EQ(c, 'z');
	close(hfd);
	vsx_close(s);
}

Test(no_peek, libvsx_never_peeks, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s, *l = NULL, *a;
	char buf[16];
	int hfd, hfd2;

	s = dial_host(6300, &o, &hfd);
	EQ(send(hfd, "abc", 3, 0), 3);
	EQ(vsx_recv(s, buf, sizeof(buf)), 3);
	EQ(vsx_send(s, "def", 3), 3);
	EQ(vsx_shutdown(s, SHUT_WR), 0);
	close(hfd);
	EQ(vsx_close(s), 0);
	EQ(vsx_listen("vsock:any:6301", &o, &l), 0);
	a = host_dials(l, 6301, &hfd2);
	EQ(send(hfd2, "ghi", 3, 0), 3);
	EQ(vsx_recv(a, buf, sizeof(buf)), 3);
	close(hfd2);
	EQ(vsx_close(a), 0);
	vsx_close(l);
	EQ(stats().peek_refused, 0);
}

/* ---- Close: bounded, delayed, never a hang ------------------------------- */

/* Wait (up to 10 s) until the simulated kernel has @n close(2) calls parked
 * on other threads: the condition, not a pause. */
static void wait_blocked_closes(int n)
{
	int64_t until = vsx__now_ms() + 10000;

	while (stats().blocked_closes != n) {
		cr_assert_lt(vsx__now_ms(), until, "%d blocked closes, want %d",
			     stats().blocked_closes, n);
		usleep(1000);
	}
}

static void wait_released(int want_open)
{
	int64_t until = vsx__now_ms() + 10000;
	struct vmbus_sim_stats st;

	do {
		vmbus_sim_reap();
		st = stats();
		if (st.open == want_open && st.lingering == 0 && st.blocked_closes == 0)
			return;
		usleep(5000);
	} while (vsx__now_ms() < until);
	cr_assert_fail("simulated kernel still holds %d sockets (%d lingering, %d "
		       "blocked closes), want %d", st.open, st.lingering,
		       st.blocked_closes, want_open);
}

/* 5.1+: close() returns; the kernel lets go within HVS_CLOSE_TIMEOUT. */
Test(close, delayed_close_when_host_never_closes)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	char buf[8];
	int hfd, rc;

	start("6.1.0-57-amd64", 500);
	o.linger_ms = 200;
	s = dial_host(6400, &o, &hfd);
	rc = vsx_close(s);
	EQ(rc, -ETIMEDOUT);
	HAS(vsx_strerror(rc), "200 ms");
	EQ(stats().lingering, 1);      /* the kernel's delayed close took over */
	EQ(recv(hfd, buf, sizeof(buf), 0), 0); /* the host saw our FIN */
	wait_released(0);              /* ... and the channel went away */
	close(hfd);
}

Test(close, graceful_when_host_closes, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	char buf[8];
	int hfd;

	s = dial_host(6500, &o, &hfd);
	EQ(vsx_send(s, "end", 3), 3);
	EQ(recv(hfd, buf, sizeof(buf), 0), 3);
	close(hfd);
	EQ(vsx_close(s), 0);
	wait_released(0);
	EQ(stats().lingering, 0);
}

/* Before 5.1, close(2) waited for the host however long it took: vsx_close
 * must still return on time (this test's own time limit catches a hang). */
Test(close, old_kernel_close_does_not_hang, .timeout = 30)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	int64_t t0;
	int hfd, rc;

	start("4.19.0-26-amd64", 500);
	o.linger_ms = 200;
	s = dial_host(6600, &o, &hfd);
	t0 = vsx__now_ms();
	rc = vsx_close(s);
	EQ(rc, -ETIMEDOUT);
	cr_assert_lt(vsx__now_ms() - t0, 5000, "vsx_close took %lld ms",
		     (long long)(vsx__now_ms() - t0));
	/* the blocking close(2) is parked on another thread */
	wait_blocked_closes(1);
	close(hfd);             /* the host finally closes ... */
	wait_released(0);       /* ... and the parked close completes */
}

Test(close, old_kernel_no_linger_does_not_hang, .timeout = 30)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	int hfd;

	start("4.19.0-26-amd64", 500);
	o.linger_ms = -1;
	s = dial_host(6700, &o, &hfd);
	EQ(vsx_close(s), 0);
	wait_blocked_closes(1);
	close(hfd);
	wait_released(0);
}

/* ---- Connecting ----------------------------------------------------------- */

Test(connect, unregistered_service_times_out, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s = NULL;
	int64_t t0;
	int rc;

	o.connect_timeout_ms = 300;
	t0 = vsx__now_ms();
	rc = vsx_connect("vsock:host:6800", &o, &s);
	EQ(rc, -ETIMEDOUT);
	/* the kernel was given our timeout (its own default is 2 s) */
	cr_assert_lt(vsx__now_ms() - t0, 1500, "gave up after %lld ms with a 300 ms timeout",
		     (long long)(vsx__now_ms() - t0));
	cr_assert_null(s);
	HAS(vsx_strerror(rc), "00001a90-facb-11e6-bd58-64006a7986d3");
	HAS(vsx_strerror(rc), "300 ms");
	wait_released(0); /* the failed socket was closed */
}

Test(connect, nonblocking_flag_applies_after_connect, .init = start_61)
{
	struct vsx_opts o = vmbus_opts();
	vsx_sock *s;
	char c;
	int hfd;

	o.flags = VSX_O_NONBLOCK;
	s = dial_host(6900, &o, &hfd);
	EQ(vsx_recv(s, &c, 1), -EAGAIN);
	close(hfd);
	vsx_close(s);
}

/* ---- Automatic choice ----------------------------------------------------- */

static char tree[256];

static void mkpath(const char *rel)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/%s'", tree, rel);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void fake_hyperv(void)
{
	snprintf(tree, sizeof(tree), "/tmp/vsx-vmbus-rules.%d", (int)getpid());
	mkpath("sys/bus/vmbus/devices/f8b3781a-1e82-4818-a1c3-63d806ec15bb");
	mkpath("sys/module/vsock");
	mkpath("sys/module/hv_sock");
	start("6.1.0-57-amd64", 1000);
	setenv("VSX_SYSROOT", tree, 1);
}

static void rm_tree(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tree);
}

Test(automatic, hyperv_guest_picks_vmbus, .init = fake_hyperv, .fini = rm_tree)
{
	struct vsx_probe p;
	vsx_sock *s = NULL;
	int id, hfd, rc;

	EQ(vsx_probe(&p), 0);
	cr_assert_str_eq(p.transport, "vmbus");
	/* no transport named: vmbus's rules apply, before any syscall */
	rc = vsx_connect("vsock:7:80", NULL, &s);
	EQ(rc, -ENETUNREACH);
	HAS(vsx_strerror(rc), "hv_sock");
	EQ(stats().calls, 0);
	/* and the host is reached through the (simulated) hv_sock */
	id = vmbus_sim_host_listen(7000);
	EQ(vsx_connect("vsock:host:7000", NULL, &s), 0);
	hfd = vmbus_sim_host_accept(id, 5000);
	cr_assert_geq(hfd, 0);
	close(hfd);
	vsx_close(s);
}

static void fake_kvm(void)
{
	snprintf(tree, sizeof(tree), "/tmp/vsx-vmbus-rules.%d", (int)getpid());
	mkpath("sys/bus/virtio/devices/virtio0");
	mkpath("sys/module/vsock");
	start("6.1.0-57-amd64", 1000);
	setenv("VSX_SYSROOT", tree, 1);
}

/* hvsock: addresses are Hyper-V's: elsewhere they are refused, not mapped
 * onto another transport's ports. */
Test(automatic, hvsock_needs_hyperv, .init = fake_kvm, .fini = rm_tree)
{
	vsx_sock *s = NULL;
	int rc;

	rc = vsx_connect("hvsock:00000808-facb-11e6-bd58-64006a7986d3", NULL, &s);
	EQ(rc, -ENODEV);
	HAS(vsx_strerror(rc), "not a Hyper-V guest");
	EQ(stats().calls, 0);
}
