/*
 * Unit tests: peer authentication (vsx_auth(7)) over the vmbus transport,
 * against the hv_sock simulator (tests/vmbus/sim.h), whose "host" end
 * is a plain AF_UNIX socket: the host plays the other side of the handshake
 * with the test's own implementation of the wire format. This is the path
 * where the transport has its own send and recv hooks (16 KiB MTU, no
 * MSG_PEEK), and where the service port comes from a GUID.
 *
 * Built with and without OpenSSL: without it, a key is refused before any
 * socket exists. Threads other than the test's never assert.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "common/check.h"
#include "sim.h"

#ifdef HAVE_OPENSSL
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

#define WAIT_MS 10000

static uint8_t key_a[32], key_b[32];

static void start(void)
{
	const struct vmbus_sim_conf conf = { .kernel_release = "6.1.0-57-amd64",
					     .close_timeout_ms = 1000 };
	int i;

	alarm(60);
	setenv("VSX_SYSROOT", "/nonexistent-vsx-test-sysroot", 1);
	vmbus_sim_start(&conf);
	for (i = 0; i < 32; i++) {
		key_a[i] = (uint8_t)(0xa0 ^ i * 7);
		key_b[i] = (uint8_t)(0xb0 ^ i * 7);
	}
}

TestSuite(auth_vmbus, .init = start);

static struct vsx_opts keyed(const uint8_t *key)
{
	struct vsx_opts o = { .transport = VSX_TRANSPORT_VMBUS };

	o.auth_key = key;
	o.auth_key_len = 32;
	return o;
}

#ifndef HAVE_OPENSSL

Test(auth_vmbus, enotsup_before_any_socket)
{
	struct vsx_opts o = keyed(key_a);
	struct vmbus_sim_stats st;
	vsx_sock *s = NULL;

	EQ_INT(vsx_connect("vsock:host:5100", &o, &s), -ENOTSUP, "connect");
	EQ_INT(vsx_listen("vsock:any:5101", &o, &s), -ENOTSUP, "listen");
	vmbus_sim_stats(&st);
	EQ_INT(st.sockets, 0, "sockets the simulated kernel made");
}

#else /* HAVE_OPENSSL */

#define T_MSG 40
enum { T_HELLO = 1, T_CHALLENGE = 2, T_PROOF_I = 3, T_PROOF_R = 4 };

static void t_msg(uint8_t m[T_MSG], unsigned type, const uint8_t body[32])
{
	memcpy(m, "VSXA", 4);
	m[4] = 1;
	m[5] = (uint8_t)type;
	m[6] = m[7] = 0;
	memcpy(m + 8, body, 32);
}

static void t_mac(const uint8_t *key, uint8_t role, uint32_t port, const uint8_t *m1,
		  const uint8_t *m2, uint8_t out[32])
{
	uint8_t in[100];
	unsigned int len = 0;

	memcpy(in, "vsx-auth-psk-v1", 15);
	in[15] = role;
	in[16] = (uint8_t)port;
	in[17] = (uint8_t)(port >> 8);
	in[18] = (uint8_t)(port >> 16);
	in[19] = (uint8_t)(port >> 24);
	memcpy(in + 20, m1, T_MSG);
	memcpy(in + 60, m2, T_MSG);
	HMAC(EVP_sha256(), key, 32, in, sizeof(in), out, &len);
}

static int is_msg(const uint8_t *m, unsigned type)
{
	return memcmp(m, "VSXA", 4) == 0 && m[4] == 1 && m[5] == type && !m[6] && !m[7];
}

static size_t rd(int fd, void *buf, size_t n)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		if (poll(&p, 1, WAIT_MS) != 1)
			break;
		r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* The host's end of one handshake, then what the guest sends until EOF. */
struct host {
	int id;                /* service, when the guest connects */
	int fd;                /* host end, when the host connects */
	int initiator;         /* the host connects: it plays the initiator */
	uint32_t port;
	const uint8_t *key;
	pthread_t th;
	/* results */
	int proof_ok;          /* the guest's proof checked out */
	char app[64];
	size_t app_n;
	char fail[128];
};

static void *host_respond(void *arg)
{
	struct host *h = arg;
	uint8_t hello[T_MSG], ch[T_MSG], pi[T_MSG], pr[T_MSG], nr[32], mac[32];
	ssize_t r;

	h->fd = vmbus_sim_host_accept(h->id, WAIT_MS);
	if (h->fd < 0) {
		snprintf(h->fail, sizeof(h->fail), "host accept: %d", h->fd);
		return NULL;
	}
	memset(nr, 0x5a, sizeof(nr));
	t_msg(ch, T_CHALLENGE, nr);
	if (rd(h->fd, hello, T_MSG) != T_MSG || !is_msg(hello, T_HELLO) ||
	    write(h->fd, ch, T_MSG) != T_MSG || rd(h->fd, pi, T_MSG) != T_MSG ||
	    !is_msg(pi, T_PROOF_I)) {
		snprintf(h->fail, sizeof(h->fail), "handshake messages");
		return NULL;
	}
	t_mac(h->key, 'I', h->port, hello, ch, mac);
	h->proof_ok = memcmp(mac, pi + 8, 32) == 0;
	if (!h->proof_ok) {
		close(h->fd); /* as libvsx does: close without a word */
		h->fd = -1;
		return NULL;
	}
	t_mac(h->key, 'R', h->port, hello, ch, mac);
	t_msg(pr, T_PROOF_R, mac);
	if (write(h->fd, pr, T_MSG) != T_MSG) {
		snprintf(h->fail, sizeof(h->fail), "PROOF_R");
		return NULL;
	}
	while ((r = read(h->fd, h->app + h->app_n, sizeof(h->app) - h->app_n)) > 0)
		h->app_n += (size_t)r;
	return NULL;
}

static void host_finish(struct host *h)
{
	pthread_join(h->th, NULL);
	if (h->fd >= 0)
		close(h->fd);
	cr_assert(!h->fail[0], "host: %s", h->fail);
}

/* The guest connects (vsock:host:PORT or hvsock:GUID) to a host that
 * checks the guest's proof with the port the address names. */
static void guest_connects(const char *addr, uint32_t port)
{
	struct vsx_opts o = keyed(key_a);
	struct host h = { .port = port, .key = key_a, .fd = -1 };
	struct vsx_info in;
	vsx_sock *s = NULL;
	int rc;

	h.id = vmbus_sim_host_listen(port);
	cr_assert_geq(h.id, 0, "host listen: %d", h.id);
	cr_assert_eq(pthread_create(&h.th, NULL, host_respond, &h), 0, "thread");
	rc = vsx_connect(addr, &o, &s);
	cr_assert_eq(rc, 0, "vsx_connect %s: %s", addr, vsx_strerror(rc));
	EQ_INT(vsx_info(s, &in), 0, "info");
	cr_assert(in.flags & VSX_INFO_AUTH, "VSX_INFO_AUTH");
	EQ_INT(vsx_send(s, "hello", 5), 5, "send");
	vsx_shutdown(s, SHUT_WR);
	host_finish(&h);
	vsx_close(s);
	cr_assert(h.proof_ok, "the guest's proof did not check out");
	EQ_INT(h.app_n, 5, "application bytes at the host");
	cr_assert(memcmp(h.app, "hello", 5) == 0, "application bytes");
}

Test(auth_vmbus, guest_connects_to_host_port)
{
	guest_connects("vsock:host:5100", 5100);
}

/* An hvsock: address: the service port is the GUID's first field. */
Test(auth_vmbus, guest_connects_to_service_guid)
{
	guest_connects("hvsock:00000808-facb-11e6-bd58-64006a7986d3", 0x808);
}

Test(auth_vmbus, wrong_key)
{
	struct vsx_opts o = keyed(key_a);
	struct host h = { .port = 5102, .key = key_b, .fd = -1 };
	vsx_sock *s = NULL;
	int rc;

	h.id = vmbus_sim_host_listen(5102);
	cr_assert_geq(h.id, 0, "host listen: %d", h.id);
	cr_assert_eq(pthread_create(&h.th, NULL, host_respond, &h), 0, "thread");
	rc = vsx_connect("vsock:host:5102", &o, &s);
	host_finish(&h);
	EQ_INT(rc, -EACCES, vsx_strerror(rc));
	cr_assert_null(s, "no socket");
	cr_assert(!h.proof_ok, "a proof made with another key checked out");
}

struct acc {
	vsx_sock *l;
	pthread_t th;
	int rc;
	unsigned flags;
	char got[16];
	ssize_t n;
};

static void *acc_main(void *arg)
{
	struct acc *a = arg;
	struct vsx_info in;
	vsx_sock *c = NULL;

	a->rc = vsx_accept(a->l, &c);
	if (a->rc < 0)
		return NULL;
	vsx_info(c, &in);
	a->flags = in.flags;
	a->n = vsx_recv(c, a->got, sizeof(a->got));
	vsx_close(c);
	return NULL;
}

/* The host connects to a keyed guest listener and authenticates as the
 * initiator, with the guest's listening port as the service port. */
Test(auth_vmbus, host_connects_to_guest_listener)
{
	struct vsx_opts o = keyed(key_a);
	uint8_t hello[T_MSG], ch[T_MSG], pi[T_MSG], pr[T_MSG], ni[32], mac[32];
	struct acc a = { 0 };
	vsx_sock *l = NULL;
	int hfd;

	EQ_INT(vsx_listen("vsock:any:5103", &o, &l), 0, "listen");
	a.l = l;
	hfd = vmbus_sim_host_connect(5103, 4000);
	cr_assert_geq(hfd, 0, "host connect: %d", hfd);
	cr_assert_eq(pthread_create(&a.th, NULL, acc_main, &a), 0, "thread");
	memset(ni, 0x3c, sizeof(ni));
	t_msg(hello, T_HELLO, ni);
	EQ_INT(write(hfd, hello, T_MSG), T_MSG, "HELLO");
	EQ_INT(rd(hfd, ch, T_MSG), T_MSG, "CHALLENGE");
	cr_assert(is_msg(ch, T_CHALLENGE), "CHALLENGE");
	t_mac(key_a, 'I', 5103, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	EQ_INT(write(hfd, pi, T_MSG), T_MSG, "PROOF_I");
	EQ_INT(rd(hfd, pr, T_MSG), T_MSG, "PROOF_R");
	cr_assert(is_msg(pr, T_PROOF_R), "PROOF_R");
	t_mac(key_a, 'R', 5103, hello, ch, mac);
	cr_assert(memcmp(mac, pr + 8, 32) == 0, "the guest's proof");
	EQ_INT(write(hfd, "ping", 4), 4, "send");
	shutdown(hfd, SHUT_WR);
	pthread_join(a.th, NULL);
	close(hfd);
	vsx_close(l);
	EQ_INT(a.rc, 0, "accept");
	cr_assert(a.flags & VSX_INFO_AUTH, "VSX_INFO_AUTH");
	EQ_INT(a.n, 4, "recv");
	cr_assert(memcmp(a.got, "ping", 4) == 0, "application bytes");
}

#endif /* HAVE_OPENSSL */
