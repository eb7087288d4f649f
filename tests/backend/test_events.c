/*
 * Connection events and limits (backend.h: vsxb_router_set_conn_events,
 * vsxb_router_set_limits, vsxb_router_get_stats) through the engine harness:
 * every event and reason checked by value, connection limits per VM and
 * per router (the refused attempt gets an RST, or its hybrid socket is
 * closed without "OK"), the per-connection memory cap, configurable
 * timeouts, and the rate limit on logging refusals.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "util.h"

#define STREAM VIRTIO_VSOCK_TYPE_STREAM
#define OP_REQUEST VIRTIO_VSOCK_OP_REQUEST
#define OP_RESPONSE VIRTIO_VSOCK_OP_RESPONSE
#define OP_RST VIRTIO_VSOCK_OP_RST
#define OP_SHUTDOWN VIRTIO_VSOCK_OP_SHUTDOWN
#define OP_RW VIRTIO_VSOCK_OP_RW
#define OP_CREDIT_UPDATE VIRTIO_VSOCK_OP_CREDIT_UPDATE
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)

static struct hx H;
#define G(i) (&H.v[i].g)

/* ---- Event capture (the loop thread writes, the test reads) ---- */

#define EV_MAX 256

struct ev {
	int type, reason, err, limit;
	uint64_t id, guest_cid, peer_cid, to_guest, from_guest, duration_ms, suppressed;
	uint32_t guest_port, peer_port;
	char vm[32], origin[16];
	bool log_suppressed;
};

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ev evs[EV_MAX];
static unsigned nev;

static void on_event(void *arg, const struct vsxb_conn_event *e)
{
	struct ev *x;

	(void)arg;
	pthread_mutex_lock(&ev_lock);
	if (nev < EV_MAX) {
		x = &evs[nev++];
		memset(x, 0, sizeof(*x));
		x->type = e->type;
		x->reason = e->reason;
		x->err = e->err;
		x->limit = e->limit;
		x->id = e->ci.id;
		x->guest_cid = e->ci.guest_cid;
		x->guest_port = e->ci.guest_port;
		x->peer_cid = e->ci.peer_cid;
		x->peer_port = e->ci.peer_port;
		x->to_guest = e->ci.to_guest_bytes;
		x->from_guest = e->ci.from_guest_bytes;
		x->duration_ms = e->duration_ms;
		x->suppressed = e->suppressed;
		x->log_suppressed = e->log_suppressed;
		snprintf(x->vm, sizeof(x->vm), "%s", e->ci.vm ? e->ci.vm : "");
		snprintf(x->origin, sizeof(x->origin), "%s", e->origin ? e->origin : "");
	}
	pthread_mutex_unlock(&ev_lock);
}

static void c_hook(void *arg)
{
	(void)arg;
	vsxb_router_set_conn_events(H.r, on_event, NULL);
}

struct lim_call {
	struct vsxb_router_limits l;
	struct vsxb_router_stats st;
	int rc;
};

static void c_limits(void *arg)
{
	struct lim_call *k = arg;

	k->rc = vsxb_router_set_limits(H.r, &k->l);
}

static void c_get(void *arg)
{
	struct lim_call *k = arg;

	vsxb_router_get_limits(H.r, &k->l);
	vsxb_router_get_stats(H.r, &k->st);
}

static int set_limits(const struct vsxb_router_limits *l)
{
	struct lim_call k = { .l = *l };

	vsx_test_loop_call(H.tl, c_limits, &k);
	return k.rc;
}

static struct vsxb_router_stats stats(void)
{
	struct lim_call k;

	vsx_test_loop_call(H.tl, c_get, &k);
	return k.st;
}

/* Wait for the @nth (from 0) event of @type; returns a copy. */
static struct ev wait_event(int type, unsigned nth)
{
	int64_t deadline = vsx__now_ms() + TMO;
	struct ev out;
	unsigned i, seen;

	do {
		pthread_mutex_lock(&ev_lock);
		for (i = 0, seen = 0; i < nev; i++) {
			if (evs[i].type != type)
				continue;
			if (seen++ == nth) {
				out = evs[i];
				pthread_mutex_unlock(&ev_lock);
				return out;
			}
		}
		pthread_mutex_unlock(&ev_lock);
		usleep(5000);
	} while (vsx__now_ms() < deadline);
	cr_assert_fail("no %s event #%u", vsxb_conn_event_name(type), nth);
	return out;
}

static unsigned count_events(int type)
{
	unsigned i, n = 0;

	pthread_mutex_lock(&ev_lock);
	for (i = 0; i < nev; i++)
		n += evs[i].type == type;
	pthread_mutex_unlock(&ev_lock);
	return n;
}

static void setup(void)
{
	pthread_mutex_lock(&ev_lock);
	nev = 0;
	pthread_mutex_unlock(&ev_lock);
	hx_init(&H);
	vsx_test_loop_call(H.tl, c_hook, NULL);
	cr_assert_eq(hx_vm(&H, 0, NULL), 0);
	hx_open(&H, 0, NULL);
}

static void teardown(void)
{
	hx_fini(&H);
}

TestSuite(events, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(limits, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ---- */

static int listen_port(unsigned vm, uint32_t port)
{
	char path[128];

	snprintf(path, sizeof(path), "%s_%u", H.v[vm].uds, port);
	return h_listen(path, SOCK_STREAM);
}

static void g2h_open(struct gc *c, uint32_t lport, uint32_t hport, int *lfd, int *afd)
{
	*lfd = listen_port(0, hport);
	gc_init(c, G(0), STREAM, lport, VSOCK_CID_HOST, hport);
	cr_assert_eq(g_connect(c), 0, "guest connect to host port %u refused", hport);
	*afd = h_accept(*lfd, TMO);
	cr_assert_geq(*afd, 0);
}

/* A hybrid client asks for guest port @gport; the REQUEST is returned in
 * @c (the guest has not answered). */
static int h2g_request(struct gc *c, uint32_t gport)
{
	char line[32];
	struct pkt *p;
	int fd;

	snprintf(line, sizeof(line), "CONNECT %u\n", gport);
	fd = h_dial(H.v[0].uds, line);
	p = g_next(G(0), NULL, TMO);
	cr_assert_not_null(p, "no REQUEST for CONNECT %u", gport);
	cr_assert_eq(p->h.op, OP_REQUEST);
	gc_init(c, G(0), STREAM, gport, VSOCK_CID_HOST, p->h.src_port);
	c->peer_buf = p->h.buf_alloc;
	c->peer_fwd = p->h.fwd_cnt;
	free(p);
	return fd;
}

static uint64_t conn_id(const struct gc *c)
{
	struct vsxb_conn_info all[64];
	unsigned n = hx_conns(&H, 0, all, 64), i;

	for (i = 0; i < n && i < 64; i++)
		if (all[i].guest_port == c->lport && all[i].peer_port == c->pport)
			return all[i].id;
	cr_assert_fail("connection %u -> %u not found", c->lport, c->pport);
	return 0;
}

/* ---- events ---- */

Test(events, guest_to_host_open_then_close_guest_shutdown)
{
	char buf[100], back[100];
	struct ev o, e;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 40001, 1201, &lfd, &fd);
	o = wait_event(VSXB_CONN_EV_OPEN, 0);
	cr_assert_eq(o.id, conn_id(&c));
	cr_assert_str_eq(o.vm, "cid3");
	cr_assert_str_eq(o.origin, "guest");
	cr_assert_eq(o.guest_cid, 3);
	cr_assert_eq(o.guest_port, 40001);
	cr_assert_eq(o.peer_cid, 2);
	cr_assert_eq(o.peer_port, 1201);
	cr_assert_eq(o.reason, VSXB_REASON_NONE);

	fill_pattern(buf, sizeof(buf), 1);
	g_write(&c, buf, 100, 100);
	cr_assert_eq(h_read_full(fd, back, 100, TMO), 0);
	cr_assert_eq(h_write_full(fd, buf, 40, TMO), 0);
	g_read(&c, back, 40);
	usleep(20000);
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	cr_assert_eq(h_eof(fd, TMO), 0);
	e = wait_event(VSXB_CONN_EV_CLOSE, 0);
	cr_assert_eq(e.id, o.id);
	cr_assert_eq(e.reason, VSXB_REASON_GUEST_SHUTDOWN);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "guest-shutdown");
	cr_assert_eq(e.from_guest, 100);
	cr_assert_eq(e.to_guest, 40);
	cr_assert_geq(e.duration_ms, 20);
	cr_assert_eq(count_events(VSXB_CONN_EV_RESET), 0);
	cr_assert_eq(stats().opened, 1);
	close(fd);
	close(lfd);
}

Test(events, host_eof_then_guest_close_is_close_host_eof)
{
	struct ev e;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 40002, 1202, &lfd, &fd);
	shutdown(fd, SHUT_WR);
	{
		struct pkt *p = g_expect(&c, OP_SHUTDOWN, TMO);

		cr_assert_eq(p->h.flags, VIRTIO_VSOCK_SHUTDOWN_SEND);
		free(p);
	}
	/* the guest closes too, then its RST: still a graceful close */
	cr_assert_geq(g_send(&c, OP_SHUTDOWN, SHUT_BOTH, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	e = wait_event(VSXB_CONN_EV_CLOSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_HOST_EOF);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "host-eof");
	close(fd);
	close(lfd);
}

Test(events, host_closed)
{
	struct ev e;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 40003, 1203, &lfd, &fd);
	close(fd);
	free(g_expect(&c, OP_SHUTDOWN, TMO));
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	e = wait_event(VSXB_CONN_EV_CLOSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_HOST_CLOSED);
	close(lfd);
}

Test(events, guest_rst_is_reset)
{
	struct ev e;
	struct gc c;
	int lfd, fd;

	g2h_open(&c, 40004, 1204, &lfd, &fd);
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	e = wait_event(VSXB_CONN_EV_RESET, 0);
	cr_assert_eq(e.reason, VSXB_REASON_GUEST_RST);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "guest-rst");
	cr_assert_eq(count_events(VSXB_CONN_EV_CLOSE), 0);
	close(fd);
	close(lfd);
}

Test(events, guest_to_missing_port_refused_without_id)
{
	struct ev e;
	struct gc c;

	gc_init(&c, G(0), STREAM, 40005, VSOCK_CID_HOST, 4444);
	cr_assert_eq(g_connect(&c), OP_RST);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_eq(e.id, 0);
	cr_assert_eq(e.reason, VSXB_REASON_REFUSED);
	cr_assert_eq(e.err, ENOENT);
	cr_assert_str_eq(e.origin, "guest");
	cr_assert_eq(e.guest_port, 40005);
	cr_assert_eq(e.peer_port, 4444);
	cr_assert(!e.log_suppressed);
	cr_assert_eq(count_events(VSXB_CONN_EV_OPEN), 0);
	cr_assert_eq(stats().refused, 1);
}

Test(events, hybrid_open_and_guest_refusal)
{
	char line[32];
	struct ev o, e;
	struct gc c, d;
	int fd, fd2;

	fd = h2g_request(&c, 5000);
	cr_assert_geq(g_send(&c, OP_RESPONSE, 0, NULL, 0), 0);
	cr_assert_gt(h_read_line(fd, line, sizeof(line), TMO), 0);
	o = wait_event(VSXB_CONN_EV_OPEN, 0);
	cr_assert_str_eq(o.origin, "host");
	cr_assert_eq(o.guest_port, 5000);
	cr_assert_eq(o.peer_port, c.pport);

	fd2 = h2g_request(&d, 5001);
	cr_assert_geq(g_send(&d, OP_RST, 0, NULL, 0), 0);
	cr_assert_eq(h_eof(fd2, TMO), 0);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_neq(e.id, 0);
	cr_assert_eq(e.reason, VSXB_REASON_REFUSED);
	cr_assert_str_eq(e.origin, "host");
	cr_assert_eq(e.guest_port, 5001);
	cr_assert_eq(count_events(VSXB_CONN_EV_OPEN), 1);
	close(fd);
	close(fd2);
}

Test(events, connect_and_handshake_timeouts)
{
	struct ev e;
	struct gc c;
	int fd, fd2;

	hx_timeouts(&H, 200, 200, 0);
	fd = h2g_request(&c, 5002);     /* the guest never answers */
	cr_assert_eq(h_eof(fd, TMO), 0);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_CONNECT_TIMEOUT);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "connect-timeout");

	fd2 = h_dial(H.v[0].uds, "CONN");   /* never finishes its line */
	cr_assert_eq(h_eof(fd2, TMO), 0);
	e = wait_event(VSXB_CONN_EV_REFUSE, 1);
	cr_assert_eq(e.reason, VSXB_REASON_HANDSHAKE_TIMEOUT);
	cr_assert_eq(e.id, 0);
	cr_assert_eq(e.guest_port, VSXB_PORT_UNKNOWN);
	close(fd);
	close(fd2);
}

/* Every hybrid attempt that goes no further is one REFUSE, with its own
 * reason: a bad line, the handshake limit, a device that does not run
 * (with the port asked for); a client that closes before sending a byte
 * (a liveness probe) is none. */
Test(events, hybrid_refusals_bad_line_limit_and_vm_not_running)
{
	int fds[VSXB_MAX_HANDSHAKES], fd, i;
	struct ev e;

	hx_timeouts(&H, 20000, 0, 0);
	fd = h_dial(H.v[0].uds, NULL);  /* a probe: connects, closes */
	close(fd);
	fd = h_dial(H.v[0].uds, "CONNECT x\n");
	cr_assert_eq(h_eof(fd, TMO), 0);
	close(fd);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_BAD_HANDSHAKE);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "bad-handshake");
	cr_assert_str_eq(e.origin, "host");
	cr_assert_eq(e.id, 0);
	cr_assert_eq(e.guest_port, VSXB_PORT_UNKNOWN);
	cr_assert_eq(count_events(VSXB_CONN_EV_REFUSE), 1, "the probe was counted");

	/* the handshake limit: one more is refused at once */
	for (i = 0; i < VSXB_MAX_HANDSHAKES; i++)
		fds[i] = h_dial(H.v[0].uds, "CONN");
	fd = h_dial(H.v[0].uds, "CONNECT 5000\n");
	cr_assert_eq(h_eof(fd, TMO) == 0 || errno == ECONNRESET, 1);
	close(fd);
	e = wait_event(VSXB_CONN_EV_REFUSE, 1);
	cr_assert_eq(e.reason, VSXB_REASON_LIMIT);
	cr_assert_eq(e.limit, VSXB_LIMIT_HANDSHAKES);
	cr_assert_str_eq(vsxb_limit_name(e.limit), "handshakes");
	/* closed in the middle of their line: bad handshakes */
	for (i = 0; i < VSXB_MAX_HANDSHAKES; i++)
		close(fds[i]);
	e = wait_event(VSXB_CONN_EV_REFUSE, 1 + VSXB_MAX_HANDSHAKES);
	cr_assert_eq(e.reason, VSXB_REASON_BAD_HANDSHAKE);

	/* the guest's driver goes away: a complete line is refused, port kept */
	hx_close_drv(&H, 0);
	fd = h_dial(H.v[0].uds, "CONNECT 5010\n");
	cr_assert(h_eof(fd, TMO) == 0 || errno == ECONNRESET);
	close(fd);
	e = wait_event(VSXB_CONN_EV_REFUSE, 2 + VSXB_MAX_HANDSHAKES);
	cr_assert_eq(e.reason, VSXB_REASON_VM_NOT_RUNNING);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "vm-not-running");
	cr_assert_eq(e.guest_port, 5010);
	cr_assert_eq(e.peer_cid, VSOCK_CID_HOST);
	cr_assert_eq(count_events(VSXB_CONN_EV_REFUSE), 3 + VSXB_MAX_HANDSHAKES);
	cr_assert_eq(stats().refused, 3 + VSXB_MAX_HANDSHAKES);
}

Test(events, control_reset_close_and_linger)
{
	struct ev e;
	struct gc c, d, f;
	int lfd, fd, lfd2, fd2, lfd3, fd3;

	hx_timeouts(&H, 0, 0, 300);
	g2h_open(&c, 40006, 1206, &lfd, &fd);
	cr_assert_eq(hx_close_conn(&H, conn_id(&c), true), 0);
	free(g_expect(&c, OP_RST, TMO));
	e = wait_event(VSXB_CONN_EV_RESET, 0);
	cr_assert_eq(e.reason, VSXB_REASON_CONTROL_RESET);

	/* close, the guest answers: a graceful close */
	g2h_open(&d, 40007, 1207, &lfd2, &fd2);
	cr_assert_eq(hx_close_conn(&H, conn_id(&d), false), 0);
	free(g_expect(&d, OP_SHUTDOWN, TMO));
	cr_assert_geq(g_send(&d, OP_RST, 0, NULL, 0), 0);
	e = wait_event(VSXB_CONN_EV_CLOSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_CONTROL_CLOSE);

	/* close, the guest does not answer: reset after the linger time */
	g2h_open(&f, 40008, 1208, &lfd3, &fd3);
	cr_assert_eq(hx_close_conn(&H, conn_id(&f), false), 0);
	free(g_expect(&f, OP_SHUTDOWN, TMO));
	free(g_expect(&f, OP_RST, TMO));
	e = wait_event(VSXB_CONN_EV_RESET, 1);
	cr_assert_eq(e.reason, VSXB_REASON_LINGER_TIMEOUT);
	close(fd);
	close(lfd);
	close(fd2);
	close(lfd2);
	close(fd3);
	close(lfd3);
}

Test(events, protocol_error_and_vm_gone)
{
	struct ev e;
	struct gc c, d;
	int lfd, fd, lfd2, fd2;

	g2h_open(&c, 40009, 1209, &lfd, &fd);
	/* a second REQUEST on a live connection */
	cr_assert_geq(g_send(&c, OP_REQUEST, 0, NULL, 0), 0);
	free(g_expect(&c, OP_RST, TMO));
	e = wait_event(VSXB_CONN_EV_RESET, 0);
	cr_assert_eq(e.reason, VSXB_REASON_PROTOCOL);

	g2h_open(&d, 40010, 1210, &lfd2, &fd2);
	hx_close_drv(&H, 0);    /* QEMU goes away */
	e = wait_event(VSXB_CONN_EV_RESET, 1);
	cr_assert_eq(e.reason, VSXB_REASON_VM_GONE);
	cr_assert_str_eq(vsxb_conn_reason_name(e.reason), "vm-gone");
	cr_assert_eq(h_eof(fd2, TMO), 0);
	close(fd);
	close(lfd);
	close(fd2);
	close(lfd2);
}

Test(events, every_open_ends_once)
{
	struct gc c[6];
	int lfd[6], fd[6], i;

	for (i = 0; i < 6; i++)
		g2h_open(&c[i], 40100 + (uint32_t)i, 1300 + (uint32_t)i, &lfd[i], &fd[i]);
	cr_assert_eq(hx_close_conn(&H, conn_id(&c[0]), true), 0);
	cr_assert_geq(g_send(&c[1], OP_RST, 0, NULL, 0), 0);
	close(fd[2]);
	hx_close_drv(&H, 0);
	wait_event(VSXB_CONN_EV_RESET, 5);
	/* not a pause: whatever was ready when the sixth end was reported has
	 * been handled after this, so a seventh event would be counted below */
	hx_settle(&H);
	cr_assert_eq(count_events(VSXB_CONN_EV_OPEN), 6);
	cr_assert_eq(count_events(VSXB_CONN_EV_RESET) + count_events(VSXB_CONN_EV_CLOSE), 6);
	cr_assert_eq(stats().conns, 0);
	for (i = 0; i < 6; i++) {
		close(fd[i]);
		close(lfd[i]);
	}
}

Test(events, refusals_rate_limited_for_logging)
{
	struct ev e;
	struct gc c;
	unsigned i, logged = 0, quiet = 0;

	for (i = 0; i < 30; i++) {
		gc_init(&c, G(0), STREAM, 41000 + i, VSOCK_CID_HOST, 4445);
		cr_assert_eq(g_connect(&c), OP_RST);
	}
	wait_event(VSXB_CONN_EV_REFUSE, 29);
	for (i = 0; i < 30; i++) {
		e = wait_event(VSXB_CONN_EV_REFUSE, i);
		if (e.log_suppressed)
			quiet++;
		else
			logged++;
	}
	/* the burst is 20, plus what a second of refill may add */
	cr_assert_geq(logged, 20);
	cr_assert_leq(logged, 22);
	cr_assert_eq(logged + quiet, 30);
	/* refused until one is logged again (the bucket refills with time: a
	 * condition, waited for up to 4 s, not a fixed pause); that one says
	 * how many went unsaid since the last logged */
	for (i = 30;; i++) {
		cr_assert_lt(i, 30 + 200, "no refusal logged again within 4 s");
		gc_init(&c, G(0), STREAM, 41100 + i, VSOCK_CID_HOST, 4445);
		cr_assert_eq(g_connect(&c), OP_RST);
		e = wait_event(VSXB_CONN_EV_REFUSE, i);
		if (!e.log_suppressed)
			break;
		quiet++;
		usleep(20000);
	}
	cr_assert_eq(e.suppressed, quiet);
	cr_assert_eq(stats().refused, i + 1);
}

/* ---- per-VM counters (vsxb_vm_get_counters) ---- */

static void c_counters(void *arg)
{
	vsxb_vm_get_counters(H.v[0].vm, arg);
}

static struct vsxb_vm_counters counters(void)
{
	struct vsxb_vm_counters ct;

	vsx_test_loop_call(H.tl, c_counters, &ct);
	return ct;
}

Test(events, vm_counters_bytes_stalls_and_reasons)
{
	static char buf[100000], back[100000];
	struct vsxb_vm_counters ct;
	struct gc c, d;
	int lfd, fd, lfd2, fd2;

	g2h_open(&c, 40200, 1210, &lfd, &fd);
	ct = counters();
	cr_assert_eq(ct.opened, 1);
	cr_assert_eq(ct.conns[VSXB_CONN_ESTABLISHED], 1);
	cr_assert_eq(ct.credit_stalls, 0);

	/* guest -> host: 3000 bytes */
	fill_pattern(buf, sizeof(buf), 7);
	g_write(&c, buf, 3000, 1000);
	cr_assert_eq(h_read_full(fd, back, 3000, TMO), 0);
	cr_assert_eq(counters().from_guest_bytes, 3000);

	/* host -> guest with a 10000-byte window: one stall per window used up */
	c.buf_alloc = 10000;
	c.auto_credit = false;
	cr_assert_geq(g_send(&c, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	cr_assert_eq(h_write_full(fd, buf, sizeof(buf), TMO), 0);
	g_read(&c, back, 10000);
	cr_assert(g_quiet(G(0), &c, QUIET), "data beyond the credit");
	ct = counters();
	cr_assert_eq(ct.to_guest_bytes, 10000);
	cr_assert_eq(ct.credit_stalls, 1, "stalls %llu", (unsigned long long)ct.credit_stalls);
	/* what the guest consumed is credit again: 10000 more, one more stall */
	cr_assert_geq(g_send(&c, OP_CREDIT_UPDATE, 0, NULL, 0), 0);
	g_read(&c, back + 10000, 10000);
	cr_assert(g_quiet(G(0), &c, QUIET), "data beyond the credit");
	ct = counters();
	cr_assert_eq(ct.to_guest_bytes, 20000);
	cr_assert_eq(ct.credit_stalls, 2);
	cr_assert_arr_eq(back, buf, 20000);

	/* ends by reason: a reset, a graceful close, a refusal */
	cr_assert_geq(g_send(&c, OP_RST, 0, NULL, 0), 0);
	wait_event(VSXB_CONN_EV_RESET, 0);
	g2h_open(&d, 40201, 1211, &lfd2, &fd2);
	close(fd2);
	free(g_expect(&d, OP_SHUTDOWN, TMO));
	cr_assert_geq(g_send(&d, OP_RST, 0, NULL, 0), 0);
	wait_event(VSXB_CONN_EV_CLOSE, 0);
	gc_init(&d, G(0), STREAM, 40202, VSOCK_CID_HOST, 4446);
	cr_assert_eq(g_connect(&d), OP_RST);
	wait_event(VSXB_CONN_EV_REFUSE, 0);
	ct = counters();
	cr_assert_eq(ct.opened, 2);
	cr_assert_eq(ct.reset[VSXB_REASON_GUEST_RST], 1);
	cr_assert_eq(ct.closed[VSXB_REASON_HOST_CLOSED], 1);
	cr_assert_eq(ct.refused[VSXB_REASON_REFUSED], 1);
	cr_assert_eq(ct.conns[VSXB_CONN_ESTABLISHED] + ct.conns[VSXB_CONN_CLOSING] +
		     ct.conns[VSXB_CONN_CONNECTING], 0);
	cr_assert_eq(ct.to_guest_bytes, 20000);
	cr_assert_eq(ct.from_guest_bytes, 3000);
	close(fd);
	close(lfd);
	close(lfd2);
}

/* ---- limits ---- */

Test(limits, per_vm_limit_refuses_with_rst_and_counts)
{
	struct vsxb_router_limits l = { .max_conns_per_vm = 2 };
	struct gc c[3];
	struct ev e;
	int lfd[2], fd[2], lfd3;

	cr_assert_eq(set_limits(&l), 0);
	g2h_open(&c[0], 42001, 1401, &lfd[0], &fd[0]);
	g2h_open(&c[1], 42002, 1402, &lfd[1], &fd[1]);
	lfd3 = listen_port(0, 1403);
	gc_init(&c[2], G(0), STREAM, 42003, VSOCK_CID_HOST, 1403);
	cr_assert_eq(g_connect(&c[2]), OP_RST);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_LIMIT);
	cr_assert_eq(e.limit, VSXB_LIMIT_VM_CONNS);
	cr_assert_str_eq(vsxb_limit_name(e.limit), "conns-per-vm");
	cr_assert_eq(e.guest_port, 42003);
	cr_assert(!h_readable(lfd3, QUIET), "the host listener saw a connection");
	cr_assert_eq(stats().refused_limit_vm, 1);
	cr_assert_eq(stats().refused_limit_conns, 0);
	cr_assert_eq(stats().conns, 2);

	/* one goes, the next one fits */
	cr_assert_geq(g_send(&c[0], OP_RST, 0, NULL, 0), 0);
	wait_event(VSXB_CONN_EV_RESET, 0);
	cr_assert_eq(g_connect(&c[2]), 0);
	close(fd[0]);
	close(fd[1]);
	close(lfd[0]);
	close(lfd[1]);
	close(lfd3);
}

Test(limits, router_limit_and_hybrid_refused_without_ok)
{
	struct vsxb_router_limits l = { .max_conns = 1 };
	struct vsxb_router_limits got;
	char line[32];
	struct gc c, d;
	struct ev e;
	int lfd, fd, hfd;
	struct lim_call k;

	cr_assert_eq(set_limits(&l), 0);
	vsx_test_loop_call(H.tl, c_get, &k);
	got = k.l;
	cr_assert_eq(got.max_conns, 1);
	cr_assert_eq(got.max_conns_per_vm, VSXB_DEFAULT_MAX_CONNS_PER_VM);
	cr_assert_eq(got.linger_ms, VSXB_DEFAULT_LINGER_MS);

	g2h_open(&c, 42010, 1410, &lfd, &fd);
	gc_init(&d, G(0), STREAM, 42011, VSOCK_CID_HOST, 1410);
	cr_assert_eq(g_connect(&d), OP_RST);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_eq(e.limit, VSXB_LIMIT_CONNS);

	/* a host program: its socket closes without "OK", no REQUEST */
	hfd = h_dial(H.v[0].uds, "CONNECT 5000\n");
	cr_assert_eq(h_read_line(hfd, line, sizeof(line), TMO), 0, "got '%s'", line);
	e = wait_event(VSXB_CONN_EV_REFUSE, 1);
	cr_assert_eq(e.reason, VSXB_REASON_LIMIT);
	cr_assert_str_eq(e.origin, "host");
	cr_assert_eq(e.guest_port, 5000);
	cr_assert(g_quiet(G(0), NULL, QUIET), "a REQUEST reached the guest");
	cr_assert_eq(stats().refused_limit_conns, 2);
	close(hfd);
	close(fd);
	close(lfd);
}

Test(limits, bad_limits_rejected)
{
	struct vsxb_router_limits l = { .max_conn_memory = 4096 };

	cr_assert_eq(set_limits(&l), -EINVAL);
	l.max_conn_memory = 0;
	l.linger_ms = 3600001;
	cr_assert_eq(set_limits(&l), -EINVAL);
	l.linger_ms = 0;
	cr_assert_eq(set_limits(&l), 0);
}

Test(limits, memory_cap_clamps_buffers_and_resets_a_growing_queue)
{
	struct vsxb_router_limits l = { .max_conn_memory = 16384 };
	char b[1024];
	struct gc c, d;
	struct ev e;
	size_t sent = 0;
	int lfd, fd, lfd2, fd2;

	/* a connection made before the cap, with a 64 KiB window */
	cr_assert_eq(hx_default_buffer(&H, 0, 65536), 0);
	g2h_open(&c, 42020, 1420, &lfd, &fd);
	cr_assert_eq(c.peer_buf, 65536);
	cr_assert_eq(set_limits(&l), 0);
	/* new connections get at most half the cap; set_buffer beyond fails */
	g2h_open(&d, 42021, 1421, &lfd2, &fd2);
	cr_assert_eq(d.peer_buf, 8192);
	cr_assert_eq(hx_set_buffer(&H, conn_id(&d), 8193), -EINVAL);
	cr_assert_eq(hx_set_buffer(&H, conn_id(&d), 8192), 0);
	cr_assert_eq(hx_default_buffer(&H, 0, 65536), -EINVAL);

	/* the old one's host never reads: once its socket is full, the queue
	 * passes the cap -> reset */
	memset(b, 'm', sizeof(b));
	for (;;) {
		uint32_t n = g_credit(&c);
		struct pkt *p = g_next(G(0), &c, n ? 0 : TMO);

		if (p) {
			uint16_t op = p->h.op;

			free(p);
			if (op == OP_RST)
				break;
			cr_assert_eq(op, OP_CREDIT_UPDATE);
			continue;
		}
		cr_assert_gt(n, 0, "no credit and no RST");
		if (n > sizeof(b))
			n = sizeof(b);
		cr_assert_geq(g_send(&c, OP_RW, 0, b, n), 0);
		sent += n;
		cr_assert_lt(sent, 16u << 20, "no reset after %zu bytes", sent);
	}
	e = wait_event(VSXB_CONN_EV_RESET, 0);
	cr_assert_eq(e.reason, VSXB_REASON_LIMIT);
	cr_assert_eq(e.limit, VSXB_LIMIT_MEMORY);
	cr_assert_eq(stats().reset_limit_memory, 1);
	close(fd);
	close(lfd);
	close(fd2);
	close(lfd2);
}

/* ---- siblings: one connection in each VM ---- */

static void second_vm(void)
{
	cr_assert_eq(hx_vm(&H, 1, NULL), 0);
	hx_open(&H, 1, NULL);
}

Test(events, sibling_open_reset_and_refusal)
{
	struct ev o1, o2, e1, e2;
	struct gc a, b;
	struct pkt *p;

	second_vm();
	gc_init(&a, G(0), STREAM, 43001, 4, 7000);
	cr_assert_geq(g_send(&a, OP_REQUEST, 0, NULL, 0), 0);
	gc_init(&b, G(1), STREAM, 7000, 3, 43001);
	free(g_expect(&b, OP_REQUEST, TMO));
	cr_assert_geq(g_send(&b, OP_RESPONSE, 0, NULL, 0), 0);
	free(g_expect(&a, OP_RESPONSE, TMO));
	o1 = wait_event(VSXB_CONN_EV_OPEN, 0);
	o2 = wait_event(VSXB_CONN_EV_OPEN, 1);
	if (o1.guest_cid != 3) {
		struct ev t = o1;

		o1 = o2;
		o2 = t;
	}
	cr_assert_str_eq(o1.origin, "guest");
	cr_assert_eq(o1.peer_cid, 4);
	cr_assert_eq(o1.peer_port, 7000);
	cr_assert_str_eq(o2.vm, "cid4");
	cr_assert_str_eq(o2.origin, "sibling");
	cr_assert_eq(o2.guest_port, 7000);
	cr_assert_eq(o2.peer_cid, 3);

	cr_assert_geq(g_send(&a, OP_RST, 0, NULL, 0), 0);
	free(g_expect(&b, OP_RST, TMO));
	e1 = wait_event(VSXB_CONN_EV_RESET, 0);
	e2 = wait_event(VSXB_CONN_EV_RESET, 1);
	if (e1.id != o1.id) {   /* either half may go first */
		struct ev t = e1;

		e1 = e2;
		e2 = t;
	}
	cr_assert_eq(e1.id, o1.id);
	cr_assert_eq(e1.reason, VSXB_REASON_GUEST_RST);
	cr_assert_eq(e2.id, o2.id);
	cr_assert_eq(e2.reason, VSXB_REASON_PEER_RST);

	/* B's guest refuses: both halves report a refusal */
	gc_init(&a, G(0), STREAM, 43002, 4, 7001);
	cr_assert_geq(g_send(&a, OP_REQUEST, 0, NULL, 0), 0);
	gc_init(&b, G(1), STREAM, 7001, 3, 43002);
	free(g_expect(&b, OP_REQUEST, TMO));
	cr_assert_geq(g_send(&b, OP_RST, 0, NULL, 0), 0);
	p = g_expect(&a, OP_RST, TMO);
	free(p);
	e1 = wait_event(VSXB_CONN_EV_REFUSE, 0);
	e2 = wait_event(VSXB_CONN_EV_REFUSE, 1);
	cr_assert_eq(e1.reason, VSXB_REASON_REFUSED);
	cr_assert_eq(e2.reason, VSXB_REASON_REFUSED);
	cr_assert_neq(e1.id, 0);
	cr_assert_neq(e2.id, 0);
	cr_assert_eq(count_events(VSXB_CONN_EV_OPEN), 2);
}

Test(limits, sibling_needs_room_for_two)
{
	struct vsxb_router_limits l = { .max_conns = 1 };
	struct gc a;
	struct ev e;

	second_vm();
	cr_assert_eq(set_limits(&l), 0);
	gc_init(&a, G(0), STREAM, 43010, 4, 7010);
	cr_assert_eq(g_connect(&a), OP_RST);
	e = wait_event(VSXB_CONN_EV_REFUSE, 0);
	cr_assert_eq(e.reason, VSXB_REASON_LIMIT);
	cr_assert_eq(e.limit, VSXB_LIMIT_CONNS);
	cr_assert(g_quiet(G(1), NULL, QUIET), "the other VM saw a REQUEST");
	cr_assert_eq(stats().refused_limit_conns, 1);
	cr_assert_eq(stats().conns, 0);
}
