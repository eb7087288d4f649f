/*
 * Unit tests: peer authentication with a pre-shared key (vsx_auth(7)), over
 * the hybrid transport with real Unix sockets in a per-test temp dir.
 *
 * The full path: a keyed vsx_listen("unix:DIR/vm.sock:5000") (which binds
 * DIR/vm.sock_5000) and a keyed vsx_connect("unix:DIR/vm.sock:5000") through
 * a small hybrid backend in a thread of the test (the relay) that answers
 * CONNECT, connects to DIR/vm.sock_5000 and splices the two streams,
 * recording what passes each way. The attacks use the test's own
 * implementation of the wire format of vsx_auth(7) (with OpenSSL's HMAC):
 * as a raw initiator connected straight to the listener's socket, or as a
 * raw responder behind a hybrid server of the test.
 *
 * Built with and without OpenSSL (HAVE_OPENSSL from config.h): without it,
 * every key option must fail with -ENOTSUP and connect nowhere.
 *
 * Threads other than the test's own never assert: they record, and the test
 * checks after joining them. Every blocking wait is bounded. Time bounds are
 * correctness bounds (a timeout fires, and not much later than asked).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "common/check.h"
#include "common/pattern.h"
#include "common/tmpdir.h"
#include "util.h"

#ifdef HAVE_OPENSSL
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

#define MiB (1024 * 1024)
#define SERVER_WAIT_MS 10000 /* no helper thread waits longer than this */
#define SLACK_MS 1000        /* how late a timeout may fire */
#define TEST_ALARM_S 60      /* a test still running after this has hung */
#define PORT 5000
#define SHORT_TIMEOUT_MS 400 /* for the tests where a timeout must fire */

static char dir[64]; /* /tmp/vsx-auth-XXXXXX */

static void dir_init(void)
{
	/* A hang fails the test (SIGALRM), without Criterion's .timeout. */
	alarm(TEST_ALARM_S);
	signal(SIGPIPE, SIG_DFL); /* a SIGPIPE from libvsx must kill the test */
	tmpdir_make(dir, sizeof(dir), "/tmp/vsx-auth-XXXXXX");
}

static void dir_fini(void)
{
	tmpdir_remove(dir);
}

TestSuite(auth, .init = dir_init, .fini = dir_fini);


static void path_in_dir(char *buf, size_t len, const char *name)
{
	tmpdir_path(buf, len, dir, name);
}

static int exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* A key file of @n bytes of @key at DIR/@name with @mode. */
static void key_file(char *path, size_t len, const char *name, const void *key, size_t n,
		     mode_t mode)
{
	int fd;

	path_in_dir(path, len, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	cr_assert(fd >= 0, "create %s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, key, n), (ssize_t)n, "write %s: %s", path, strerror(errno));
	cr_assert_eq(fchmod(fd, mode), 0, "fchmod: %s", strerror(errno));
	close(fd);
}

static uint8_t key_a[64], key_b[64];

static void keys_init(void)
{
	pat32_fill(key_a, sizeof(key_a), 0xa, 0);
	pat32_fill(key_b, sizeof(key_b), 0xb, 0);
}

/* ---- raw sockets (never asserting: usable from any thread) ---------------- */

static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n;

	do
		n = poll(&p, 1, ms);
	while (n < 0 && errno == EINTR);
	return n > 0;
}

static int unix_fd(const char *path, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(un->sun_path))
		return -1;
	strcpy(un->sun_path, path);
	return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int raw_connect(const char *path)
{
	struct sockaddr_un un;
	int fd = unix_fd(path, &un);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int raw_listen(const char *path)
{
	struct sockaddr_un un;
	int fd = unix_fd(path, &un);

	if (fd >= 0 && (bind(fd, (struct sockaddr *)&un, sizeof(un)) < 0 ||
			listen(fd, 16) < 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int wr_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

enum end { END_NONE, END_EOF, END_RESET, END_TIMEOUT, END_ERROR };

/* Read a "CONNECT <port>\n" line; the port, or -1. */
static long read_connect_line(int fd)
{
	char line[32];
	size_t n = 0;
	char c;

	while (n < sizeof(line) - 1) {
		if (!wait_in(fd, SERVER_WAIT_MS) || read(fd, &c, 1) != 1)
			return -1;
		line[n++] = c;
		if (c == '\n')
			break;
	}
	line[n] = '\0';
	if (strncmp(line, "CONNECT ", 8) != 0 || line[n - 1] != '\n')
		return -1;
	return strtol(line + 8, NULL, 10);
}

/* ---- the relay: a hybrid backend that splices to the listener ------------ */

struct dir {
	int from, to;
	uint8_t rec[128];      /* the first bytes that passed */
	size_t n;              /* all that passed */
	int end;               /* enum end, of the reading side */
};

struct relay {
	char path[VSX_PATH_MAX];
	int lfd;
	int pair;              /* join two clients with each other instead */
	pthread_t th;
	struct dir d[2];       /* d[0]: client -> listener, d[1]: back */
	long port;             /* from CONNECT */
	char fail[160];
};

static void *relay_dir(void *arg)
{
	struct dir *d = arg;
	static __thread uint8_t buf[65536];
	ssize_t r;

	for (;;) {
		if (!wait_in(d->from, SERVER_WAIT_MS)) {
			d->end = END_TIMEOUT;
			break;
		}
		r = read(d->from, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			d->end = r == 0 ? END_EOF : END_RESET;
			shutdown(d->to, r == 0 ? SHUT_WR : SHUT_RDWR);
			break;
		}
		if (d->n < sizeof(d->rec))
			memcpy(d->rec + d->n, buf,
			       (size_t)r < sizeof(d->rec) - d->n ? (size_t)r
								 : sizeof(d->rec) - d->n);
		d->n += (size_t)r;
		if (wr_all(d->to, buf, (size_t)r) < 0) {
			d->end = END_ERROR;
			shutdown(d->from, SHUT_RDWR);
			break;
		}
	}
	return NULL;
}

static void relay_fail(struct relay *rl, const char *what)
{
	if (!rl->fail[0])
		snprintf(rl->fail, sizeof(rl->fail), "%s: %s", what, strerror(errno));
}

/* Accept a client and read its CONNECT line; the fd or -1. */
static int relay_client(struct relay *rl)
{
	int fd;

	if (!wait_in(rl->lfd, SERVER_WAIT_MS)) {
		errno = ETIMEDOUT;
		relay_fail(rl, "waiting for a client");
		return -1;
	}
	fd = accept4(rl->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		relay_fail(rl, "accept");
		return -1;
	}
	rl->port = read_connect_line(fd);
	if (rl->port < 0) {
		errno = EPROTO;
		relay_fail(rl, "CONNECT line");
		close(fd);
		return -1;
	}
	return fd;
}

static void *relay_main(void *arg)
{
	struct relay *rl = arg;
	char target[VSX_PATH_MAX + 16];
	pthread_t back;
	int a, b;

	a = relay_client(rl);
	if (a < 0)
		return NULL;
	if (rl->pair) {
		b = relay_client(rl);
	} else {
		snprintf(target, sizeof(target), "%s_%ld", rl->path, rl->port);
		b = raw_connect(target);
	}
	if (b < 0) {
		relay_fail(rl, "second end");
		close(a);
		return NULL;
	}
	if (wr_all(a, "OK 1234\n", 8) < 0 || (rl->pair && wr_all(b, "OK 1235\n", 8) < 0)) {
		relay_fail(rl, "OK");
		goto out;
	}
	rl->d[0] = (struct dir){ .from = a, .to = b };
	rl->d[1] = (struct dir){ .from = b, .to = a };
	if (pthread_create(&back, NULL, relay_dir, &rl->d[1]) != 0) {
		relay_fail(rl, "pthread_create");
		goto out;
	}
	relay_dir(&rl->d[0]);
	pthread_join(back, NULL);
out:
	close(a);
	close(b);
	return NULL;
}

static void relay_start(struct relay *rl, int pair)
{
	memset(rl, 0, sizeof(*rl));
	path_in_dir(rl->path, sizeof(rl->path), "vm.sock");
	rl->pair = pair;
	rl->lfd = raw_listen(rl->path);
	cr_assert(rl->lfd >= 0, "relay listen %s: %s", rl->path, strerror(errno));
	cr_assert_eq(pthread_create(&rl->th, NULL, relay_main, rl), 0, "pthread_create");
}

static void relay_finish(struct relay *rl)
{
	pthread_join(rl->th, NULL);
	close(rl->lfd);
	unlink(rl->path);
	cr_assert(!rl->fail[0], "relay: %s", rl->fail);
}

/* The hybrid address of the relay (and of the listener behind it). */
static const char *vm_addr(void)
{
	static char buf[VSX_ADDR_STRLEN];

	snprintf(buf, sizeof(buf), "unix:%s/vm.sock:%d", dir, PORT);
	return buf;
}

/* The socket path a listener on vm_addr() binds. */
static const char *listener_path(void)
{
	static char buf[VSX_PATH_MAX];

	snprintf(buf, sizeof(buf), "%s/vm.sock_%d", dir, PORT);
	return buf;
}

/* ---- the accepting side, in a thread --------------------------------------- */

struct acc;
typedef void (*acc_play)(struct acc *a, vsx_sock *c);

struct acc {
	vsx_sock *l;
	acc_play play;         /* after a successful accept; NULL: close */
	pthread_t th;
	/* results */
	int rc;
	char err[256];
	int64_t ms;            /* how long vsx_accept took */
	struct vsx_info info;  /* after play */
	size_t got;            /* play: application bytes received */
	size_t bad;            /* play: offset of a pattern mismatch */
	ssize_t send_rc;
	uint8_t first[64];     /* play: the first bytes received */
};

static void *acc_main(void *arg)
{
	struct acc *a = arg;
	vsx_sock *c = NULL;
	int64_t t0 = vsx__now_ms();

	a->bad = SIZE_MAX;
	a->rc = vsx_accept(a->l, &c);
	a->ms = vsx__now_ms() - t0;
	if (a->rc < 0) {
		snprintf(a->err, sizeof(a->err), "%s", vsx_strerror(a->rc));
		return NULL;
	}
	if (a->play)
		a->play(a, c);
	vsx_info(c, &a->info);
	vsx_close(c);
	return NULL;
}

static void acc_start(struct acc *a, vsx_sock *l, acc_play play)
{
	memset(a, 0, sizeof(*a));
	a->l = l;
	a->play = play;
	cr_assert_eq(pthread_create(&a->th, NULL, acc_main, a), 0, "pthread_create");
}

static void acc_join(struct acc *a)
{
	pthread_join(a->th, NULL);
}

/* Receive until EOF, checking the pattern of @seed; the count. */
static size_t recv_verify(vsx_sock *s, uint32_t seed, size_t *bad, uint8_t *first,
			  size_t first_len)
{
	static __thread uint8_t buf[65536];
	size_t got = 0;
	ssize_t r;

	*bad = SIZE_MAX;
	for (;;) {
		r = vsx_recv(s, buf, sizeof(buf));
		if (r <= 0)
			break;
		if (got < first_len)
			memcpy(first + got, buf,
			       (size_t)r < first_len - got ? (size_t)r : first_len - got);
		if (*bad == SIZE_MAX)
			*bad = pat32_mismatch(buf, (size_t)r, seed, got);
		got += (size_t)r;
	}
	return got;
}

/* Record the application bytes that arrive, until EOF. */
static void play_sink(struct acc *a, vsx_sock *c)
{
	a->got = recv_verify(c, 0, &a->bad, a->first, sizeof(a->first));
}

static vsx_sock *listen_with(const struct vsx_opts *o)
{
	vsx_sock *l;
	int rc;

	rc = vsx_listen(vm_addr(), o, &l);
	cr_assert_eq(rc, 0, "vsx_listen %s: %s", vm_addr(), vsx_strerror(rc));
	return l;
}

/* No connection is pending at the raw listener @lfd. */
static void no_connection(int lfd, const char *ctx)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	cr_assert_eq(poll(&p, 1, 50), 0, "%s: a connection reached the server", ctx);
}

/* ---- both builds ----------------------------------------------------------- */

/* The key fields came out of reserved: same size, and what is left of
 * reserved is still checked. */
Test(auth, opts_layout_and_reserved)
{
	struct vsx_opts o = { 0 };
	vsx_sock *s = (vsx_sock *)&o;
	char msg[256];
	size_t i;

	EQ_INT(sizeof(struct vsx_opts),
	       offsetof(struct vsx_opts, auth_key_file) + 8 * sizeof(uintptr_t), "size");
	EQ_INT(sizeof(o.reserved) / sizeof(o.reserved[0]), 5, "reserved words");
	for (i = 0; i < 5; i++) {
		memset(&o, 0, sizeof(o));
		o.reserved[i] = 1;
		RC_ERR(vsx_connect(vm_addr(), &o, &s), -EINVAL, msg, "reserved");
		HAS_STR(msg, "reserved", "detail");
		cr_assert_null(s, "no socket on failure");
	}
}

/* Without a key nothing changes, and vsx_info does not claim authentication. */
Test(auth, no_key_no_flag)
{
	struct relay rl;
	struct acc a;
	struct vsx_info in;
	vsx_sock *l, *c;

	l = listen_with(NULL);
	RC_OK(vsx_info(l, &in), "info");
	cr_assert(!(in.flags & VSX_INFO_AUTH), "unkeyed listener shows VSX_INFO_AUTH");
	relay_start(&rl, 0);
	acc_start(&a, l, play_sink);
	RC_OK(vsx_connect(vm_addr(), NULL, &c), "connect");
	RC_OK(vsx_send(c, "plain", 5), "send");
	RC_OK(vsx_info(c, &in), "info");
	cr_assert(!(in.flags & VSX_INFO_AUTH), "unkeyed connection shows VSX_INFO_AUTH");
	vsx_close(c);
	acc_join(&a);
	relay_finish(&rl);
	EQ_INT(a.rc, 0, "accept");
	EQ_INT(a.got, 5, "bytes");
	cr_assert(!(a.info.flags & VSX_INFO_AUTH), "unkeyed accepted socket shows it");
	vsx_close(l);
}

#ifndef HAVE_OPENSSL

/* ---- without OpenSSL: every key option is refused -------------------------- */

Test(auth, enotsup_everywhere)
{
	struct vsx_opts file = { 0 }, bytes = { 0 }, len_only = { 0 };
	char kpath[VSX_PATH_MAX], lpath[VSX_PATH_MAX], msg[256];
	const struct vsx_opts *all[3] = { &file, &bytes, &len_only };
	vsx_sock *s;
	int lfd, sv[2], i;

	keys_init();
	key_file(kpath, sizeof(kpath), "key", key_a, 32, 0600);
	file.auth_key_file = kpath;
	bytes.auth_key = key_a;
	bytes.auth_key_len = 32;
	len_only.auth_key_len = 32;
	path_in_dir(lpath, sizeof(lpath), "vm.sock");
	lfd = raw_listen(lpath);
	cr_assert(lfd >= 0, "listen: %s", strerror(errno));
	for (i = 0; i < 3; i++) {
		s = (vsx_sock *)&s;
		RC_ERR(vsx_connect(vm_addr(), all[i], &s), -ENOTSUP, msg, "connect");
		HAS_STR(msg, "without OpenSSL", "detail");
		cr_assert_null(s, "no socket on failure");
		no_connection(lfd, "connect with a key, no OpenSSL");
		RC_ERR(vsx_listen(vm_addr(), all[i], &s), -ENOTSUP, msg, "listen");
		HAS_STR(msg, "without OpenSSL", "detail");
		cr_assert(!exists(listener_path()), "listen left %s behind", listener_path());
	}
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0, "socketpair");
	RC_ERR(vsx_adopt(sv[0], &file, &s), -ENOTSUP, msg, "adopt");
	HAS_STR(msg, "without OpenSSL", "detail");
	cr_assert_eq(fcntl(sv[0], F_GETFD), FD_CLOEXEC, "adopt closed the fd it refused");
	close(sv[0]);
	close(sv[1]);
	close(lfd);
}

#else /* HAVE_OPENSSL */

/* ---- helpers only the OpenSSL tests use ---------------------------------- */

static ssize_t send_pattern(vsx_sock *s, uint32_t seed, size_t n)
{
	static __thread uint8_t buf[65536];
	size_t off = 0, k;
	ssize_t r;

	while (off < n) {
		k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		pat32_fill(buf, k, seed, off);
		r = vsx_send(s, buf, k);
		if (r < 0)
			return r;
		off += (size_t)r;
	}
	return (ssize_t)off;
}

/* Read exactly @n bytes; returns how many came before EOF, error or
 * SERVER_WAIT_MS of silence. */
static size_t rd_exact(int fd, void *buf, size_t n)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		if (!wait_in(fd, SERVER_WAIT_MS))
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

/* Read until the peer is gone, keeping the first @cap bytes in @buf;
 * returns the count, and how it ended in *@how. */
static size_t rd_all(int fd, uint8_t *buf, size_t cap, int *how)
{
	uint8_t tmp[4096];
	size_t got = 0;
	ssize_t r;

	for (;;) {
		if (!wait_in(fd, SERVER_WAIT_MS)) {
			*how = END_TIMEOUT;
			return got;
		}
		r = read(fd, tmp, sizeof(tmp));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*how = r == 0 ? END_EOF : errno == ECONNRESET ? END_RESET : END_ERROR;
			return got;
		}
		if (got < cap)
			memcpy(buf + got, tmp, (size_t)r < cap - got ? (size_t)r : cap - got);
		got += (size_t)r;
	}
}

/* Read what the peer sends until its EOF, then send 16 MiB back. */
static void play_sink_then_send(struct acc *a, vsx_sock *c)
{
	a->got = recv_verify(c, 1, &a->bad, a->first, sizeof(a->first));
	a->send_rc = send_pattern(c, 2, 16 * MiB);
	vsx_shutdown(c, SHUT_WR);
}

/* Echo what arrives (an application that does not authenticate). */
static void play_echo(struct acc *a, vsx_sock *c)
{
	char buf[256];
	ssize_t r;

	while ((r = vsx_recv(c, buf, sizeof(buf))) > 0) {
		if (a->got + (size_t)r <= sizeof(a->first))
			memcpy(a->first + a->got, buf, (size_t)r);
		a->got += (size_t)r;
		if (vsx_send(c, buf, (size_t)r) < 0)
			break;
	}
}

/* ---- the wire format, as the test implements it from vsx_auth(7) --------- */

#define T_HDR 8
#define T_MSG 40
#define T_LABEL "vsx-auth-psk-v1"
enum { T_HELLO = 1, T_CHALLENGE = 2, T_PROOF_I = 3, T_PROOF_R = 4 };

static void t_msg(uint8_t m[T_MSG], unsigned type, const uint8_t body[32])
{
	memcpy(m, "VSXA", 4);
	m[4] = 1;
	m[5] = (uint8_t)type;
	m[6] = m[7] = 0;
	memcpy(m + T_HDR, body, 32);
}

static void t_mac(const uint8_t *key, size_t klen, uint8_t role, uint32_t port,
		  const uint8_t m1[T_MSG], const uint8_t m2[T_MSG], uint8_t out[32])
{
	uint8_t in[15 + 1 + 4 + 2 * T_MSG];
	unsigned int len = 0;

	memcpy(in, T_LABEL, 15);
	in[15] = role;
	in[16] = (uint8_t)port;
	in[17] = (uint8_t)(port >> 8);
	in[18] = (uint8_t)(port >> 16);
	in[19] = (uint8_t)(port >> 24);
	memcpy(in + 20, m1, T_MSG);
	memcpy(in + 20 + T_MSG, m2, T_MSG);
	HMAC(EVP_sha256(), key, (int)klen, in, sizeof(in), out, &len);
}

static int is_msg(const uint8_t *m, unsigned type)
{
	return memcmp(m, "VSXA", 4) == 0 && m[4] == 1 && m[5] == type && !m[6] && !m[7];
}

static void hex(const uint8_t *p, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

/* The worked example of vsx_auth(7), EXAMPLES: key 00..1f, Ni 20..3f,
 * Nr 40..5f, port 5000 (computed there with Python's hmac module). */
#define MAN_PROOF_I "d48c8c0f252df3177448b13d44c64bd1566e4cd6a4350c89f7d0105dee481c22"
#define MAN_PROOF_R "07733438ed074b168246aea36ad26101a506be2f9d7bfb169ab2e8839aa43b64"
Test(auth, man_page_vector)
{
	uint8_t key[32], ni[32], nr[32], m1[T_MSG], m2[T_MSG], mac[32];
	char text[65];
	int i;

	for (i = 0; i < 32; i++) {
		key[i] = (uint8_t)i;
		ni[i] = (uint8_t)(0x20 + i);
		nr[i] = (uint8_t)(0x40 + i);
	}
	t_msg(m1, T_HELLO, ni);
	t_msg(m2, T_CHALLENGE, nr);
	t_mac(key, 32, 'I', 5000, m1, m2, mac);
	hex(mac, 32, text);
	cr_assert_str_eq(text, MAN_PROOF_I, "initiator's proof %s, man page says %s", text,
			 MAN_PROOF_I);
	t_mac(key, 32, 'R', 5000, m1, m2, mac);
	hex(mac, 32, text);
	cr_assert_str_eq(text, MAN_PROOF_R, "responder's proof %s, man page says %s", text,
			 MAN_PROOF_R);
}

/* ---- the full path --------------------------------------------------------- */

/*
 * Matching keys (a key file on the listener, the same key as bytes on the
 * connector): 16 MiB each way, byte for byte. The relay's record shows the
 * handshake on the wire exactly as vsx_auth(7) has it, both proofs recomputed
 * by the test, and the first application byte right after it.
 */
Test(auth, matching_keys_16mib)
{
	struct vsx_opts lo = { 0 }, co = { .auth_key = key_a, .auth_key_len = 32 };
	char kpath[VSX_PATH_MAX];
	uint8_t want[32], first[64];
	struct vsx_info in;
	struct relay rl;
	struct acc a;
	vsx_sock *l, *c;
	size_t got, bad;
	int rc;

	keys_init();
	key_file(kpath, sizeof(kpath), "key", key_a, 32, 0600);
	lo.auth_key_file = kpath;
	l = listen_with(&lo);
	RC_OK(vsx_info(l, &in), "listener info");
	cr_assert(in.flags & VSX_INFO_AUTH, "a keyed listener shows VSX_INFO_AUTH");
	relay_start(&rl, 0);
	acc_start(&a, l, play_sink_then_send);

	rc = vsx_connect(vm_addr(), &co, &c);
	cr_assert_eq(rc, 0, "connect: %s", vsx_strerror(rc));
	RC_OK(vsx_info(c, &in), "info");
	cr_assert(in.flags & VSX_INFO_AUTH, "connection lacks VSX_INFO_AUTH (flags 0x%x)",
		  in.flags);
	EQ_INT(in.bytes_sent, 0, "handshake bytes are not application bytes");
	EQ_INT(send_pattern(c, 1, 16 * MiB), 16 * MiB, "send");
	RC_OK(vsx_shutdown(c, SHUT_WR), "shutdown");
	got = recv_verify(c, 2, &bad, first, sizeof(first));
	RC_OK(vsx_info(c, &in), "info");
	EQ_INT(vsx_close(c), 0, "close");
	acc_join(&a);
	relay_finish(&rl);
	vsx_close(l);

	EQ_INT(got, 16 * MiB, "initiator received");
	cr_assert_eq(bad, SIZE_MAX, "initiator: pattern broken at byte %zu", bad);
	EQ_INT(in.bytes_sent, 16 * MiB, "initiator's bytes_sent");
	EQ_INT(in.bytes_received, 16 * MiB, "initiator's bytes_received");
	cr_assert_eq(a.rc, 0, "accept: %s", a.err);
	EQ_INT(a.got, 16 * MiB, "responder received");
	cr_assert_eq(a.bad, SIZE_MAX, "responder: pattern broken at byte %zu", a.bad);
	EQ_INT(a.send_rc, 16 * MiB, "responder sent");
	cr_assert(a.info.flags & VSX_INFO_AUTH, "accepted socket lacks VSX_INFO_AUTH");
	EQ_INT(a.info.bytes_received, 16 * MiB, "responder's bytes_received");

	/* The wire: 80 bytes of handshake each way, then the application. */
	EQ_INT(rl.port, PORT, "CONNECT port");
	EQ_INT(rl.d[0].n, 80 + 16 * MiB, "bytes client -> listener");
	EQ_INT(rl.d[1].n, 80 + 16 * MiB, "bytes listener -> client");
	cr_assert(is_msg(rl.d[0].rec, T_HELLO), "first message is not a HELLO");
	cr_assert(is_msg(rl.d[1].rec, T_CHALLENGE), "second message is not a CHALLENGE");
	cr_assert(is_msg(rl.d[0].rec + 40, T_PROOF_I), "third message is not PROOF_I");
	cr_assert(is_msg(rl.d[1].rec + 40, T_PROOF_R), "fourth message is not PROOF_R");
	cr_assert(memcmp(rl.d[0].rec + 8, rl.d[1].rec + 8, 32) != 0, "Ni == Nr");
	t_mac(key_a, 32, 'I', PORT, rl.d[0].rec, rl.d[1].rec, want);
	cr_assert(memcmp(want, rl.d[0].rec + 48, 32) == 0,
		  "PROOF_I is not HMAC(K, label 'I' port HELLO CHALLENGE)");
	t_mac(key_a, 32, 'R', PORT, rl.d[0].rec, rl.d[1].rec, want);
	cr_assert(memcmp(want, rl.d[1].rec + 48, 32) == 0,
		  "PROOF_R is not HMAC(K, label 'R' port HELLO CHALLENGE)");
	EQ_INT(pat32_mismatch(rl.d[0].rec + 80, 48, 1, 0), SIZE_MAX, "application after PROOF_I");
	EQ_INT(pat32_mismatch(rl.d[1].rec + 80, 48, 2, 0), SIZE_MAX, "application after PROOF_R");
}

/* Another key: both sides fail with -EACCES; the responder sends no proof,
 * and not a byte of application data passes. */
Test(auth, wrong_key)
{
	struct vsx_opts lo = { .auth_key = key_a, .auth_key_len = 32 };
	struct vsx_opts co = { .auth_key = key_b, .auth_key_len = 32 };
	char msg[256];
	struct relay rl;
	struct acc a;
	vsx_sock *l, *c = NULL;

	keys_init();
	l = listen_with(&lo);
	relay_start(&rl, 0);
	acc_start(&a, l, play_sink);
	RC_ERR(vsx_connect(vm_addr(), &co, &c), -EACCES, msg, "connect");
	HAS_STR(msg, "auth:", "detail");
	cr_assert_null(c, "no socket on failure");
	acc_join(&a);
	relay_finish(&rl);
	vsx_close(l);
	EQ_INT(a.rc, -EACCES, "accept");
	HAS_STR(a.err, "proof does not match", "accept detail");
	EQ_INT(rl.d[0].n, 80, "client sent HELLO and its proof, nothing more");
	EQ_INT(rl.d[1].n, 40, "listener sent its CHALLENGE, no proof");
	EQ_INT(rl.d[1].end, END_EOF, "the listener closed");
}

/* An unkeyed client at a keyed listener: its bytes never reach the
 * application; the listener times out, the client sees the close. */
Test(auth, unkeyed_client_keyed_listener)
{
	struct vsx_opts lo = { .auth_key = key_a, .auth_key_len = 32,
			       .connect_timeout_ms = SHORT_TIMEOUT_MS };
	struct relay rl;
	struct acc a;
	vsx_sock *l, *c;
	char buf[16];

	keys_init();
	l = listen_with(&lo);
	relay_start(&rl, 0);
	acc_start(&a, l, play_sink);
	RC_OK(vsx_connect(vm_addr(), NULL, &c), "connect without a key");
	RC_OK(vsx_send(c, "secret", 6), "send");
	EQ_INT(vsx_recv(c, buf, sizeof(buf)), 0, "the client sees EOF, no data");
	vsx_close(c);
	acc_join(&a);
	relay_finish(&rl);
	vsx_close(l);
	EQ_INT(a.rc, -ETIMEDOUT, "accept");
	EQ_INT(a.got, 0, "application bytes at the listener");
}

/* A keyed client at an unkeyed echo server: its HELLO comes back where a
 * CHALLENGE is due, a reflection: -EACCES. */
Test(auth, keyed_client_echo_server)
{
	struct vsx_opts co = { .auth_key = key_a, .auth_key_len = 32 };
	char msg[256];
	struct relay rl;
	struct acc a;
	vsx_sock *l, *c;

	keys_init();
	l = listen_with(NULL);
	relay_start(&rl, 0);
	acc_start(&a, l, play_echo);
	RC_ERR(vsx_connect(vm_addr(), &co, &c), -EACCES, msg, "connect");
	HAS_STR(msg, "HELLO", "detail names the message");
	acc_join(&a);
	relay_finish(&rl);
	vsx_close(l);
	EQ_INT(a.got, 40, "the echo server got the HELLO only");
}

/* ---- a connecting side, in a thread ---------------------------------------- */

struct conn {
	char addr[VSX_ADDR_STRLEN];
	struct vsx_opts o;
	pthread_t th;
	int rc;
	char err[256];
	vsx_sock *c;           /* on success; the test closes it */
};

static void *conn_main(void *arg)
{
	struct conn *k = arg;

	k->rc = vsx_connect(k->addr, &k->o, &k->c);
	if (k->rc < 0)
		snprintf(k->err, sizeof(k->err), "%s", vsx_strerror(k->rc));
	return NULL;
}

static void conn_start(struct conn *k, const struct vsx_opts *o)
{
	memset(k, 0, sizeof(*k));
	snprintf(k->addr, sizeof(k->addr), "%s", vm_addr());
	k->o = *o;
	cr_assert_eq(pthread_create(&k->th, NULL, conn_main, k), 0, "pthread_create");
}

/* Two initiators joined by the backend: each gets a HELLO where a
 * CHALLENGE is due, and says so. */
Test(auth, two_initiators)
{
	struct vsx_opts co = { .auth_key = key_a, .auth_key_len = 32 };
	struct conn k1, k2;
	struct relay rl;

	keys_init();
	relay_start(&rl, 1);
	conn_start(&k1, &co);
	conn_start(&k2, &co);
	pthread_join(k1.th, NULL);
	pthread_join(k2.th, NULL);
	relay_finish(&rl);
	EQ_INT(k1.rc, -EACCES, "first initiator");
	EQ_INT(k2.rc, -EACCES, "second initiator");
	HAS_STR(k1.err, "same role", "detail");
	HAS_STR(k2.err, "same role", "detail");
	EQ_INT(rl.d[0].n, 40, "one HELLO each way, nothing else");
	EQ_INT(rl.d[1].n, 40, "one HELLO each way, nothing else");
}

/* Two responders joined: nobody speaks first. The one with the shorter
 * timeout gives up (-ETIMEDOUT); the other sees it close (-EACCES). */
Test(auth, two_responders)
{
	struct vsx_opts lo = { .auth_key = key_a, .auth_key_len = 32,
			       .connect_timeout_ms = SHORT_TIMEOUT_MS };
	char addr2[VSX_ADDR_STRLEN], path2[VSX_PATH_MAX];
	struct dir d[2];
	pthread_t th[2];
	struct acc a1, a2;
	vsx_sock *l1, *l2;
	int f1, f2, i;

	keys_init();
	l1 = listen_with(&lo);
	snprintf(addr2, sizeof(addr2), "unix:%s/vm.sock:%d", dir, PORT + 1);
	snprintf(path2, sizeof(path2), "%s/vm.sock_%d", dir, PORT + 1);
	lo.connect_timeout_ms = SERVER_WAIT_MS / 2;
	RC_OK(vsx_listen(addr2, &lo, &l2), "second listener");
	f1 = raw_connect(listener_path());
	f2 = raw_connect(path2);
	cr_assert(f1 >= 0 && f2 >= 0, "raw connect: %s", strerror(errno));
	d[0] = (struct dir){ .from = f1, .to = f2 };
	d[1] = (struct dir){ .from = f2, .to = f1 };
	for (i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, relay_dir, &d[i]), 0, "thread");
	acc_start(&a1, l1, play_sink);
	acc_start(&a2, l2, play_sink);
	acc_join(&a1);
	acc_join(&a2);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	close(f1);
	close(f2);
	vsx_close(l1);
	vsx_close(l2);
	EQ_INT(a1.rc, -ETIMEDOUT, "first responder");
	HAS_STR(a1.err, "did not send the HELLO", "detail");
	EQ_INT(a2.rc, -EACCES, "second responder");
	HAS_STR(a2.err, "closed the connection instead of sending its HELLO", "detail");
	EQ_INT(d[0].n + d[1].n, 0, "bytes between two responders");
}

/* ---- a raw responder behind a hybrid server -------------------------------- */

enum rmode {
	R_HONEST,        /* by the book */
	R_ROLE_SWAP,     /* its proof computed with the initiator's role byte */
	R_REFLECT,       /* the initiator's proof sent back as it is */
	R_REFLECT_TYPED, /* the initiator's proof sent back, typed as PROOF_R */
	R_WRONG_PORT,    /* its proof for another port */
	R_HELLO_BACK,    /* a HELLO of its own instead of a CHALLENGE */
	R_VERSION2,      /* a CHALLENGE of version 2 */
	R_GARBAGE,       /* 40 bytes that are no message */
	R_SILENT,        /* reads the HELLO, then says nothing */
	R_TRUNCATE,      /* CHALLENGE, then half its proof, then closes */
	R_SCRIPT,        /* sends rs->script after the HELLO */
};

struct rawsrv {
	char path[VSX_PATH_MAX];
	int lfd;
	pthread_t th;
	int mode;
	const uint8_t *script;
	size_t script_len;
	/* results */
	uint8_t hello[T_MSG];
	uint8_t proof_i[T_MSG];
	uint8_t in[256];       /* what came after the handshake messages it read */
	size_t in_n;
	int in_end;
	char fail[160];
};

static void rs_fail(struct rawsrv *rs, const char *what)
{
	if (!rs->fail[0])
		snprintf(rs->fail, sizeof(rs->fail), "%s: %s", what, strerror(errno));
}

static void rs_send(struct rawsrv *rs, int fd, const void *p, size_t n)
{
	int e = wr_all(fd, p, n);

	if (e < 0 && e != -EPIPE && e != -ECONNRESET) {
		errno = -e;
		rs_fail(rs, "send");
	}
}

static void *rawsrv_main(void *arg)
{
	struct rawsrv *rs = arg;
	uint8_t nr[32], mac[32], ch[T_MSG], pr[T_MSG];
	const uint8_t *garbage = (const uint8_t *)"this is not a vsx-auth message at all!!";
	int fd;

	if (!wait_in(rs->lfd, SERVER_WAIT_MS)) {
		errno = ETIMEDOUT;
		rs_fail(rs, "waiting for a client");
		return NULL;
	}
	fd = accept4(rs->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		rs_fail(rs, "accept");
		return NULL;
	}
	if (read_connect_line(fd) != PORT || wr_all(fd, "OK 77\n", 6) < 0 ||
	    rd_exact(fd, rs->hello, T_MSG) != T_MSG) {
		errno = EPROTO;
		rs_fail(rs, "CONNECT, OK and HELLO");
		goto out;
	}
	pat32_fill(nr, sizeof(nr), 0x77, 0);
	t_msg(ch, T_CHALLENGE, nr);
	switch (rs->mode) {
	case R_SILENT:
		break;
	case R_GARBAGE:
		rs_send(rs, fd, garbage, T_MSG);
		break;
	case R_HELLO_BACK:
		t_msg(ch, T_HELLO, nr);
		rs_send(rs, fd, ch, T_MSG);
		break;
	case R_VERSION2:
		ch[4] = 2;
		rs_send(rs, fd, ch, T_MSG);
		break;
	case R_SCRIPT:
		rs_send(rs, fd, rs->script, rs->script_len);
		break;
	default:
		rs_send(rs, fd, ch, T_MSG);
		if (rd_exact(fd, rs->proof_i, T_MSG) != T_MSG) {
			errno = EPROTO;
			rs_fail(rs, "PROOF_I");
			goto out;
		}
		t_mac(key_a, 32, rs->mode == R_ROLE_SWAP ? 'I' : 'R',
		      rs->mode == R_WRONG_PORT ? PORT + 1 : PORT, rs->hello, ch, mac);
		t_msg(pr, T_PROOF_R, mac);
		if (rs->mode == R_REFLECT)
			memcpy(pr, rs->proof_i, T_MSG);
		if (rs->mode == R_REFLECT_TYPED) {
			memcpy(pr, rs->proof_i, T_MSG);
			pr[5] = T_PROOF_R;
		}
		if (rs->mode == R_TRUNCATE) {
			rs_send(rs, fd, pr, 20);
			goto out;
		}
		rs_send(rs, fd, pr, T_MSG);
	}
	rs->in_n = rd_all(fd, rs->in, sizeof(rs->in), &rs->in_end);
out:
	close(fd);
	return NULL;
}

static void rawsrv_start(struct rawsrv *rs, int mode)
{
	memset(rs, 0, sizeof(*rs));
	rs->mode = mode;
	path_in_dir(rs->path, sizeof(rs->path), "peer.sock");
	rs->lfd = raw_listen(rs->path);
	cr_assert(rs->lfd >= 0, "listen %s: %s", rs->path, strerror(errno));
}

static void rawsrv_run(struct rawsrv *rs)
{
	cr_assert_eq(pthread_create(&rs->th, NULL, rawsrv_main, rs), 0, "pthread_create");
}

static void rawsrv_finish(struct rawsrv *rs)
{
	pthread_join(rs->th, NULL);
	close(rs->lfd);
	unlink(rs->path);
	cr_assert(!rs->fail[0], "raw responder: %s", rs->fail);
}

static const char *peer_addr(const struct rawsrv *rs)
{
	static char buf[VSX_ADDR_STRLEN];

	snprintf(buf, sizeof(buf), "unix:%s:%d", rs->path, PORT);
	return buf;
}

/* vsx_connect with key A to a raw responder in @mode; its result. */
static int connect_raw(struct rawsrv *rs, int mode, int timeout_ms, char *msg, size_t len,
		       int64_t *ms)
{
	struct vsx_opts co = { .auth_key = key_a, .auth_key_len = 32,
			       .connect_timeout_ms = timeout_ms };
	vsx_sock *c = NULL;
	int64_t t0;
	int rc;

	keys_init();
	rawsrv_start(rs, mode);
	rawsrv_run(rs);
	t0 = vsx__now_ms();
	rc = vsx_connect(peer_addr(rs), &co, &c);
	if (ms)
		*ms = vsx__now_ms() - t0;
	snprintf(msg, len, "%s", vsx_strerror(rc));
	if (rc == 0) {
		vsx_send(c, "app", 3);
		vsx_close(c);
	} else {
		cr_assert_null(c, "no socket on failure");
	}
	rawsrv_finish(rs);
	return rc;
}

/* The responder side as the test implements vsx_auth(7): libvsx agrees. */
Test(auth, raw_responder_interop)
{
	struct rawsrv rs;
	uint8_t want[32];
	char msg[256];

	EQ_INT(connect_raw(&rs, R_HONEST, 0, msg, sizeof(msg), NULL), 0, msg);
	cr_assert(is_msg(rs.hello, T_HELLO), "HELLO");
	cr_assert(is_msg(rs.proof_i, T_PROOF_I), "PROOF_I");
	{
		uint8_t nr[32], ch[T_MSG];

		pat32_fill(nr, sizeof(nr), 0x77, 0);
		t_msg(ch, T_CHALLENGE, nr);
		t_mac(key_a, 32, 'I', PORT, rs.hello, ch, want);
	}
	cr_assert(memcmp(want, rs.proof_i + T_HDR, 32) == 0, "PROOF_I body");
	EQ_INT(rs.in_n, 3, "application bytes after the handshake");
	cr_assert(memcmp(rs.in, "app", 3) == 0, "application bytes");
	EQ_INT(rs.in_end, END_EOF, "end");
}

/* Responders that cheat or break: -EACCES, and the initiator sends nothing
 * after its proof (or after the HELLO, when it saw no CHALLENGE). */
Test(auth, raw_responder_failures)
{
	static const struct {
		int mode;
		const char *detail;
	} cases[] = {
		{ R_ROLE_SWAP, "proof does not match" },
		{ R_REFLECT, "where its PROOF_R was due" },
		{ R_REFLECT_TYPED, "proof does not match" },
		{ R_WRONG_PORT, "proof does not match" },
		{ R_HELLO_BACK, "same role" },
		{ R_VERSION2, "version 2" },
		{ R_GARBAGE, "something else" },
		{ R_TRUNCATE, "in the middle of its PROOF_R" },
	};
	struct rawsrv rs;
	char msg[256], ctx[64];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(ctx, sizeof(ctx), "responder mode %d", cases[i].mode);
		EQ_INT(connect_raw(&rs, cases[i].mode, 0, msg, sizeof(msg), NULL), -EACCES,
		       ctx);
		HAS_STR(msg, cases[i].detail, ctx);
		if (cases[i].mode != R_TRUNCATE) {
			EQ_INT(rs.in_n, 0, ctx);
			cr_assert(rs.in_end == END_EOF || rs.in_end == END_RESET,
				  "%s: the initiator did not close (end %d)", ctx, rs.in_end);
		}
	}
}

/* A responder that stops after the HELLO: -ETIMEDOUT within the connect
 * timeout, and the connection is closed. */
Test(auth, silent_responder_times_out)
{
	struct rawsrv rs;
	char msg[256];
	int64_t ms;

	EQ_INT(connect_raw(&rs, R_SILENT, SHORT_TIMEOUT_MS, msg, sizeof(msg), &ms),
	       -ETIMEDOUT, msg);
	HAS_STR(msg, "CHALLENGE", "detail");
	cr_assert(ms >= SHORT_TIMEOUT_MS - 1 && ms <= SHORT_TIMEOUT_MS + SLACK_MS,
		  "timed out after %lld ms, asked %d", (long long)ms, SHORT_TIMEOUT_MS);
	EQ_INT(rs.in_n, 0, "bytes after the HELLO");
	EQ_INT(rs.in_end, END_EOF, "the initiator closed");
}

/* ---- a raw initiator at the listener ---------------------------------------- */

/* Connect raw to the listener, send a HELLO (Ni from @seed), read the
 * CHALLENGE into @ch; the fd. */
static int raw_hello(uint8_t hello[T_MSG], uint8_t ch[T_MSG], uint32_t seed)
{
	uint8_t ni[32];
	int fd;

	pat32_fill(ni, sizeof(ni), seed, 0);
	t_msg(hello, T_HELLO, ni);
	fd = raw_connect(listener_path());
	cr_assert(fd >= 0, "raw connect %s: %s", listener_path(), strerror(errno));
	EQ_INT(wr_all(fd, hello, T_MSG), 0, "send HELLO");
	EQ_INT(rd_exact(fd, ch, T_MSG), T_MSG, "read CHALLENGE");
	cr_assert(is_msg(ch, T_CHALLENGE), "the listener's answer is not a CHALLENGE");
	return fd;
}

static vsx_sock *keyed_listener(int timeout_ms)
{
	struct vsx_opts lo = { .auth_key = key_a, .auth_key_len = 32,
			       .connect_timeout_ms = timeout_ms };

	keys_init();
	return listen_with(&lo);
}

/* The initiator side as the test implements it: libvsx accepts it. */
Test(auth, raw_initiator_interop)
{
	uint8_t hello[T_MSG], ch[T_MSG], pi[T_MSG], pr[T_MSG], mac[32], rest[8];
	struct vsx_info in;
	struct acc a;
	vsx_sock *l;
	int fd, how;

	l = keyed_listener(0);
	acc_start(&a, l, play_sink);
	fd = raw_hello(hello, ch, 0x11);
	t_mac(key_a, 32, 'I', PORT, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	EQ_INT(wr_all(fd, pi, T_MSG), 0, "send PROOF_I");
	EQ_INT(rd_exact(fd, pr, T_MSG), T_MSG, "read PROOF_R");
	cr_assert(is_msg(pr, T_PROOF_R), "not a PROOF_R");
	t_mac(key_a, 32, 'R', PORT, hello, ch, mac);
	cr_assert(memcmp(mac, pr + T_HDR, 32) == 0, "PROOF_R body");
	EQ_INT(wr_all(fd, "ping", 4), 0, "send");
	shutdown(fd, SHUT_WR);
	EQ_INT(rd_all(fd, rest, sizeof(rest), &how), 0, "nothing more from the listener");
	close(fd);
	acc_join(&a);
	EQ_INT(a.rc, 0, a.err);
	EQ_INT(a.got, 4, "application bytes");
	cr_assert(memcmp(a.first, "ping", 4) == 0, "application bytes");
	cr_assert(a.info.flags & VSX_INFO_AUTH, "VSX_INFO_AUTH");
	RC_OK(vsx_info(l, &in), "listener info");
	vsx_close(l);
}

/* A raw initiator's attempt; the listener's result in @a, and whatever the
 * listener sent after the CHALLENGE in @after (count returned). */
static size_t raw_attempt(struct acc *a, void (*attack)(int fd, const uint8_t *hello,
							 const uint8_t *ch),
			  int timeout_ms, uint8_t *after, size_t cap, int *how)
{
	uint8_t hello[T_MSG], ch[T_MSG];
	vsx_sock *l;
	size_t n;
	int fd;

	l = keyed_listener(timeout_ms);
	acc_start(a, l, play_sink);
	fd = raw_hello(hello, ch, 0x22);
	attack(fd, hello, ch);
	n = rd_all(fd, after, cap, how);
	close(fd);
	acc_join(a);
	vsx_close(l);
	return n;
}

static void atk_role_swap(int fd, const uint8_t *hello, const uint8_t *ch)
{
	uint8_t mac[32], pi[T_MSG];

	t_mac(key_a, 32, 'R', PORT, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	wr_all(fd, pi, T_MSG);
}

static void atk_wrong_port(int fd, const uint8_t *hello, const uint8_t *ch)
{
	uint8_t mac[32], pi[T_MSG];

	t_mac(key_a, 32, 'I', PORT + 1, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	wr_all(fd, pi, T_MSG);
}

static void atk_wrong_key(int fd, const uint8_t *hello, const uint8_t *ch)
{
	uint8_t mac[32], pi[T_MSG];

	t_mac(key_b, 32, 'I', PORT, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	wr_all(fd, pi, T_MSG);
}

/* The listener's own CHALLENGE sent back as the proof. */
static void atk_reflect(int fd, const uint8_t *hello, const uint8_t *ch)
{
	(void)hello;
	wr_all(fd, ch, T_MSG);
}

static void atk_half_proof_close(int fd, const uint8_t *hello, const uint8_t *ch)
{
	uint8_t mac[32], pi[T_MSG];

	t_mac(key_a, 32, 'I', PORT, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	wr_all(fd, pi, 20);
	shutdown(fd, SHUT_WR);
}

static void atk_half_proof_stall(int fd, const uint8_t *hello, const uint8_t *ch)
{
	uint8_t mac[32], pi[T_MSG];

	t_mac(key_a, 32, 'I', PORT, hello, ch, mac);
	t_msg(pi, T_PROOF_I, mac);
	wr_all(fd, pi, 20);
}

static void atk_stall(int fd, const uint8_t *hello, const uint8_t *ch)
{
	(void)fd;
	(void)hello;
	(void)ch;
}

/* Initiators that cheat or break after the HELLO: -EACCES, the listener
 * sends no proof and closes, no application byte reaches it. */
Test(auth, raw_initiator_failures)
{
	static const struct {
		void (*attack)(int, const uint8_t *, const uint8_t *);
		const char *name, *detail;
	} cases[] = {
		{ atk_role_swap, "role swap", "proof does not match" },
		{ atk_wrong_port, "wrong port", "proof does not match" },
		{ atk_wrong_key, "wrong key", "proof does not match" },
		{ atk_reflect, "reflected CHALLENGE", "where its PROOF_I was due" },
		{ atk_half_proof_close, "half a proof, then EOF", "in the middle of" },
	};
	uint8_t after[64];
	struct acc a;
	size_t i, n;
	int how;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = raw_attempt(&a, cases[i].attack, 0, after, sizeof(after), &how);
		EQ_INT(a.rc, -EACCES, cases[i].name);
		HAS_STR(a.err, cases[i].detail, cases[i].name);
		EQ_INT(n, 0, cases[i].name);
		cr_assert(how == END_EOF || how == END_RESET, "%s: listener did not close (%d)",
			  cases[i].name, how);
		EQ_INT(a.got, 0, cases[i].name);
	}
}

/* Initiators that stop: -ETIMEDOUT within the listener's connect timeout. */
Test(auth, raw_initiator_stalls)
{
	static const struct {
		void (*attack)(int, const uint8_t *, const uint8_t *);
		const char *name, *detail;
	} cases[] = {
		{ atk_stall, "silent after HELLO", "did not send the PROOF_I" },
		{ atk_half_proof_stall, "half a proof", "stopped in the middle of" },
	};
	uint8_t after[64];
	struct acc a;
	size_t i, n;
	int how;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = raw_attempt(&a, cases[i].attack, SHORT_TIMEOUT_MS, after, sizeof(after),
				&how);
		EQ_INT(a.rc, -ETIMEDOUT, cases[i].name);
		HAS_STR(a.err, cases[i].detail, cases[i].name);
		cr_assert(a.ms >= SHORT_TIMEOUT_MS - 1 && a.ms <= SHORT_TIMEOUT_MS + SLACK_MS,
			  "%s: accept took %lld ms, timeout %d", cases[i].name,
			  (long long)a.ms, SHORT_TIMEOUT_MS);
		EQ_INT(n, 0, cases[i].name);
		EQ_INT(how, END_EOF, cases[i].name);
	}
}

/* Before the HELLO: silence, a cut-short HELLO, garbage. */
Test(auth, raw_initiator_bad_hello)
{
	static const char http[] = "GET / HTTP/1.1\r\nHost: vsx\r\nAccept: */*\r\n\r\n";
	uint8_t hello[T_MSG], after[64], ni[32];
	struct acc a;
	vsx_sock *l;
	int fd, how;
	size_t n;

	pat32_fill(ni, sizeof(ni), 0x33, 0);
	t_msg(hello, T_HELLO, ni);

	/* garbage: rejected at once, nothing sent back */
	l = keyed_listener(0);
	acc_start(&a, l, play_sink);
	fd = raw_connect(listener_path());
	cr_assert(fd >= 0, "connect");
	EQ_INT(wr_all(fd, http, sizeof(http) - 1), 0, "send");
	n = rd_all(fd, after, sizeof(after), &how);
	close(fd);
	acc_join(&a);
	vsx_close(l);
	EQ_INT(a.rc, -EACCES, "garbage");
	HAS_STR(a.err, "something else than a vsx-auth HELLO", "garbage");
	EQ_INT(n, 0, "the listener answered garbage");
	EQ_INT(a.got, 0, "application bytes");

	/* half a HELLO, then EOF */
	l = keyed_listener(0);
	acc_start(&a, l, play_sink);
	fd = raw_connect(listener_path());
	EQ_INT(wr_all(fd, hello, 20), 0, "send");
	shutdown(fd, SHUT_WR);
	n = rd_all(fd, after, sizeof(after), &how);
	close(fd);
	acc_join(&a);
	vsx_close(l);
	EQ_INT(a.rc, -EACCES, "half a HELLO");
	HAS_STR(a.err, "in the middle of its HELLO (20 of 40 bytes)", "half a HELLO");
	EQ_INT(n, 0, "answer to half a HELLO");

	/* connected, silent */
	l = keyed_listener(SHORT_TIMEOUT_MS);
	acc_start(&a, l, play_sink);
	fd = raw_connect(listener_path());
	n = rd_all(fd, after, sizeof(after), &how);
	close(fd);
	acc_join(&a);
	vsx_close(l);
	EQ_INT(a.rc, -ETIMEDOUT, "silence");
	HAS_STR(a.err, "did not send the HELLO", "silence");
	EQ_INT(n, 0, "answer to silence");
	EQ_INT(how, END_EOF, "the listener closed");
}

/* ---- replay ------------------------------------------------------------------ */

/* Record an honest handshake through the relay, then replay either side of
 * it to a fresh peer: the fresh nonce defeats it. */
Test(auth, replay)
{
	struct vsx_opts co = { .auth_key = key_a, .auth_key_len = 32 };
	uint8_t rec_i[80], rec_r[80], ch[T_MSG], after[64];
	struct rawsrv rs;
	struct relay rl;
	struct acc a;
	vsx_sock *l, *c = NULL;
	char msg[256];
	size_t n;
	int fd, how;

	/* the honest session, recorded */
	l = keyed_listener(0);
	relay_start(&rl, 0);
	acc_start(&a, l, play_sink);
	RC_OK(vsx_connect(vm_addr(), &co, &c), "honest connect");
	RC_OK(vsx_send(c, "honest", 6), "send");
	vsx_close(c);
	acc_join(&a);
	relay_finish(&rl);
	EQ_INT(a.rc, 0, a.err);
	EQ_INT(a.got, 6, "honest bytes");
	memcpy(rec_i, rl.d[0].rec, 80); /* HELLO, PROOF_I */
	memcpy(rec_r, rl.d[1].rec, 80); /* CHALLENGE, PROOF_R */

	/* the initiator's half, replayed to the same listener in one go */
	acc_start(&a, l, play_sink);
	fd = raw_connect(listener_path());
	cr_assert(fd >= 0, "connect");
	EQ_INT(wr_all(fd, rec_i, 80), 0, "replay");
	EQ_INT(rd_exact(fd, ch, T_MSG), T_MSG, "a new CHALLENGE");
	cr_assert(is_msg(ch, T_CHALLENGE), "CHALLENGE");
	cr_assert(memcmp(ch + T_HDR, rec_r + T_HDR, 32) != 0, "the listener reused Nr");
	n = rd_all(fd, after, sizeof(after), &how);
	close(fd);
	acc_join(&a);
	vsx_close(l);
	EQ_INT(a.rc, -EACCES, "replayed initiator");
	HAS_STR(a.err, "proof does not match", "detail");
	EQ_INT(n, 0, "bytes after the CHALLENGE");
	EQ_INT(a.got, 0, "application bytes");

	/* the responder's half, replayed to a fresh initiator */
	rawsrv_start(&rs, R_SCRIPT);
	rs.script = rec_r;
	rs.script_len = 80;
	rawsrv_run(&rs);
	c = NULL;
	RC_ERR(vsx_connect(peer_addr(&rs), &co, &c), -EACCES, msg, "replayed responder");
	HAS_STR(msg, "proof does not match", "detail");
	cr_assert_null(c, "no socket");
	rawsrv_finish(&rs);
	EQ_INT(rs.in_n, 40, "the initiator sent its proof and nothing else");
	cr_assert(is_msg(rs.in, T_PROOF_I), "PROOF_I");
	EQ_INT(rs.in_end, END_EOF, "closed");
}

/* ---- keys ---------------------------------------------------------------- */

/* Bad key files fail before any connection is made or any listener bound. */
Test(auth, key_file_checks)
{
	static const struct {
		const char *name;
		size_t len;       /* SIZE_MAX: no file; SIZE_MAX - 1: a directory */
		mode_t mode;
		int err;
		const char *detail;
	} cases[] = {
		{ "missing", SIZE_MAX, 0, -ENOENT, "No such file" },
		{ "empty", 0, 0600, -EINVAL, "is empty" },
		{ "short", 31, 0600, -EINVAL, "holds 31 bytes" },
		{ "mode0644", 32, 0644, -EACCES, "mode 0644" },
		{ "mode0640", 32, 0640, -EACCES, "mode 0640" },
		{ "mode0604", 32, 0604, -EACCES, "mode 0604" },
		{ "mode0620", 32, 0620, -EACCES, "group or others" },
		{ "long", 1025, 0600, -EINVAL, "more than 1024" },
		{ "dir", SIZE_MAX - 1, 0700, -EINVAL, "not a regular file" },
	};
	static uint8_t big[2048];
	char kpath[VSX_PATH_MAX], rpath[VSX_PATH_MAX], msg[256];
	struct vsx_opts o;
	vsx_sock *s;
	size_t i;
	int lfd;

	pat32_fill(big, sizeof(big), 0xc, 0);
	path_in_dir(rpath, sizeof(rpath), "vm.sock");
	lfd = raw_listen(rpath);
	cr_assert(lfd >= 0, "listen");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (cases[i].len == SIZE_MAX) {
			path_in_dir(kpath, sizeof(kpath), cases[i].name);
		} else if (cases[i].len == SIZE_MAX - 1) {
			path_in_dir(kpath, sizeof(kpath), cases[i].name);
			cr_assert_eq(mkdir(kpath, cases[i].mode), 0, "mkdir");
		} else {
			key_file(kpath, sizeof(kpath), cases[i].name, big, cases[i].len,
				 cases[i].mode);
		}
		o = (struct vsx_opts){ .auth_key_file = kpath };
		s = (vsx_sock *)&o;
		RC_ERR(vsx_connect(vm_addr(), &o, &s), cases[i].err, msg, cases[i].name);
		HAS_STR(msg, cases[i].detail, cases[i].name);
		HAS_STR(msg, kpath, cases[i].name);
		cr_assert_null(s, "%s: no socket on failure", cases[i].name);
		no_connection(lfd, cases[i].name);
		RC_ERR(vsx_listen(vm_addr(), &o, &s), cases[i].err, msg, cases[i].name);
		cr_assert(!exists(listener_path()), "%s: listen bound %s", cases[i].name,
			  listener_path());
	}
	close(lfd);
}

/* The limits themselves are fine, as is a 0400 file behind a symlink. */
Test(auth, key_file_accepted)
{
	static uint8_t big[1024];
	char k32[VSX_PATH_MAX], k1024[VSX_PATH_MAX], link[VSX_PATH_MAX];
	struct vsx_opts o = { 0 };
	vsx_sock *l;

	pat32_fill(big, sizeof(big), 0xd, 0);
	key_file(k32, sizeof(k32), "k32", big, 32, 0400);
	key_file(k1024, sizeof(k1024), "k1024", big, 1024, 0600);
	path_in_dir(link, sizeof(link), "link");
	cr_assert_eq(symlink(k32, link), 0, "symlink");
	o.auth_key_file = k32;
	RC_OK(vsx_listen(vm_addr(), &o, &l), "32 bytes, mode 0400");
	vsx_close(l);
	o.auth_key_file = k1024;
	RC_OK(vsx_listen(vm_addr(), &o, &l), "1024 bytes");
	vsx_close(l);
	o.auth_key_file = link;
	RC_OK(vsx_listen(vm_addr(), &o, &l), "through a symlink");
	vsx_close(l);
}

Test(auth, key_bytes_checks)
{
	static uint8_t big[1100];
	char kpath[VSX_PATH_MAX], rpath[VSX_PATH_MAX], msg[256];
	const struct {
		const char *name;
		struct vsx_opts o;
		const char *detail;
	} cases[] = {
		{ "NULL key with a length", { .auth_key_len = 32 }, "auth_key is NULL" },
		{ "empty key", { .auth_key = big }, "is empty" },
		{ "31 bytes", { .auth_key = big, .auth_key_len = 31 }, "holds 31 bytes" },
		{ "1025 bytes", { .auth_key = big, .auth_key_len = 1025 }, "more than 1024" },
		{ "file and bytes", { .auth_key_file = kpath, .auth_key = big,
				      .auth_key_len = 32 }, "not both" },
	};
	vsx_sock *s;
	size_t i;
	int lfd;

	key_file(kpath, sizeof(kpath), "key", big, 32, 0600);
	path_in_dir(rpath, sizeof(rpath), "vm.sock");
	lfd = raw_listen(rpath);
	cr_assert(lfd >= 0, "listen");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		s = (vsx_sock *)&s;
		RC_ERR(vsx_connect(vm_addr(), &cases[i].o, &s), -EINVAL, msg, cases[i].name);
		HAS_STR(msg, cases[i].detail, cases[i].name);
		cr_assert_null(s, "%s: no socket", cases[i].name);
		no_connection(lfd, cases[i].name);
	}
	close(lfd);
}

/* vsx_adopt cannot authenticate (no roles, no port): -EINVAL, fd kept. */
Test(auth, adopt_refuses_key)
{
	struct vsx_opts o = { .auth_key = key_a, .auth_key_len = 32 };
	char msg[256];
	vsx_sock *s;
	int sv[2];

	keys_init();
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0, "socketpair");
	RC_ERR(vsx_adopt(sv[0], &o, &s), -EINVAL, msg, "adopt");
	HAS_STR(msg, "adopt", "detail");
	cr_assert_eq(fcntl(sv[0], F_GETFD), FD_CLOEXEC, "adopt closed the fd it refused");
	close(sv[0]);
	close(sv[1]);
}

/* A non-blocking keyed listener: -EAGAIN while none is pending, then the
 * handshake inside vsx_accept, and the new socket stays non-blocking. */
Test(auth, nonblocking_listener)
{
	struct vsx_opts lo = { .flags = VSX_O_NONBLOCK, .auth_key = key_a,
			       .auth_key_len = 32 };
	struct vsx_opts co = { .auth_key = key_a, .auth_key_len = 32 };
	struct pollfd p;
	struct vsx_info in;
	struct relay rl;
	struct conn k;
	vsx_sock *l, *c = NULL;
	char buf[8];
	ssize_t r;

	keys_init();
	l = listen_with(&lo);
	EQ_INT(vsx_accept(l, &c), -EAGAIN, "nothing pending");
	relay_start(&rl, 0);
	conn_start(&k, &co);
	p = (struct pollfd){ .fd = vsx_fd(l), .events = POLLIN };
	cr_assert_eq(poll(&p, 1, SERVER_WAIT_MS), 1, "the listener never became readable");
	RC_OK(vsx_accept(l, &c), "accept");
	pthread_join(k.th, NULL);
	EQ_INT(k.rc, 0, k.err);
	RC_OK(vsx_info(c, &in), "info");
	cr_assert(in.flags & VSX_INFO_AUTH, "VSX_INFO_AUTH");
	EQ_INT(vsx_recv(c, buf, sizeof(buf)), -EAGAIN, "accepted socket is non-blocking");
	RC_OK(vsx_send(k.c, "x", 1), "send");
	p = (struct pollfd){ .fd = vsx_fd(c), .events = POLLIN };
	cr_assert_eq(poll(&p, 1, SERVER_WAIT_MS), 1, "no data");
	r = vsx_recv(c, buf, sizeof(buf));
	EQ_INT(r, 1, "recv");
	EQ_INT(buf[0], 'x', "byte");
	RC_OK(vsx_shutdown(c, SHUT_WR), "shutdown");
	EQ_INT(vsx_close(k.c), 0, "close");
	vsx_close(c);
	relay_finish(&rl);
	vsx_close(l);
}

#endif /* HAVE_OPENSSL */
