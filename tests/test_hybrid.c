/*
 * Unit tests: the hybrid transport (unix:PATH:PORT), client and listener,
 * against small hybrid servers run in threads of the test over real Unix
 * sockets in a per-test temp dir.
 *
 * Server threads never assert (criterion asserts only in the test's own
 * thread): they record what they saw and any failure, and the test checks
 * that after joining them. Every blocking wait in a server is bounded.
 * Time bounds below are correctness bounds (a timeout must fire, and not
 * much later than asked), never performance assertions.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

#define MiB (1024 * 1024)
#define SERVER_WAIT_MS 10000 /* no server wait is longer than this */
#define SLACK_MS 1000        /* how late a timeout may fire */
#define TEST_ALARM_S 60      /* a test still running after this has hung */

static char dir[64]; /* /tmp/vsx-hy-XXXXXX */

static void dir_init(void)
{
	/*
	 * A hang fails the test (SIGALRM kills it), without Criterion's
	 * .timeout, whose watchdog leaks a request now and then and makes
	 * LeakSanitizer fail the whole binary in sanitizer builds.
	 */
	alarm(TEST_ALARM_S);
	/* a SIGPIPE must kill the test, so leave it at its default */
	signal(SIGPIPE, SIG_DFL);
	tmpdir_make(dir, sizeof(dir), "/tmp/vsx-hy-XXXXXX");
}

static void dir_fini(void)
{
	tmpdir_remove(dir);
}

TestSuite(hybrid, .init = dir_init, .fini = dir_fini);
TestSuite(hybrid_listen, .init = dir_init, .fini = dir_fini);


static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void path_in_dir(char *buf, size_t len, const char *name)
{
	tmpdir_path(buf, len, dir, name);
}

static int file_kind(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return 0;
	return st.st_mode & S_IFMT;
}

static int unix_socket_at(const char *path, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	cr_assert(strlen(path) < sizeof(un->sun_path), "path too long for a test socket");
	strcpy(un->sun_path, path);
	return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

/* A raw AF_UNIX client connected to @path. */
static int raw_connect(const char *path)
{
	struct sockaddr_un un;
	int fd = unix_socket_at(path, &un);

	cr_assert(fd >= 0, "socket: %s", strerror(errno));
	cr_assert_eq(connect(fd, (struct sockaddr *)&un, sizeof(un)), 0,
		     "raw connect %s: %s", path, strerror(errno));
	return fd;
}

/* A raw AF_UNIX listener at @path. */
static int raw_listen(const char *path)
{
	struct sockaddr_un un;
	int fd = unix_socket_at(path, &un);

	cr_assert(fd >= 0, "socket: %s", strerror(errno));
	cr_assert_eq(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0, "bind %s: %s",
		     path, strerror(errno));
	cr_assert_eq(listen(fd, 16), 0, "listen: %s", strerror(errno));
	return fd;
}

static void raw_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		cr_assert(r > 0, "raw send: %s", strerror(errno));
		p += r;
		n -= (size_t)r;
	}
}

static void raw_read_exact(int fd, void *buf, size_t n)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char *p = buf;
	ssize_t r;

	while (n) {
		cr_assert_eq(poll(&pfd, 1, SERVER_WAIT_MS), 1,
			     "raw read: nothing for %d ms", SERVER_WAIT_MS);
		r = read(fd, p, n);
		cr_assert(r > 0, "raw read = %zd (%s), %zu bytes missing", r,
			  r < 0 ? strerror(errno) : "EOF", n);
		p += r;
		n -= (size_t)r;
	}
}

/* vsx_recv until @n bytes, EOF or an error; returns the count or the error. */
static ssize_t recv_exact(vsx_sock *s, void *buf, size_t n, size_t chunk)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = vsx_recv(s, (char *)buf + got, n - got < chunk ? n - got : chunk);
		if (r < 0)
			return got ? (ssize_t)got : r;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* ---- a hybrid server in a thread ----------------------------------------- */

struct server;
typedef void (*play_fn)(struct server *sv, int fd);

struct server {
	/* set by the test */
	play_fn play;           /* after the CONNECT line; NULL: close at once */
	int skip_line;          /* do not read the CONNECT line */
	int never_accept;       /* close the listener with the client pending */
	const char *reply;      /* what play_reply and friends send */
	size_t reply_len;
	uint32_t seed_in;       /* pattern expected from the client */
	uint32_t seed_out;      /* pattern sent to the client */
	size_t bulk;            /* bytes play_bulk sends */

	/* the server's own */
	char path[VSX_PATH_MAX];
	int lfd;
	int cfd;                /* the accepted connection (play_bulk's writer) */
	int release[2];         /* the test writes here to let the server go on */
	pthread_t th, writer;

	/* results, read after server_finish */
	char line[128];         /* what the client sent up to and with '\n' */
	size_t line_len;
	char data[256];         /* the first data bytes after the line */
	size_t rx_bytes;
	size_t rx_bad;          /* offset of a pattern mismatch, SIZE_MAX if none */
	size_t tx_bytes;
	int saw_eof;
	int reset;              /* reads ended with ECONNRESET */
	char fail[160];         /* an unexpected failure inside the server */
};

static void srv_fail(struct server *sv, const char *what)
{
	if (!sv->fail[0])
		snprintf(sv->fail, sizeof(sv->fail), "%s: %s", what, strerror(errno));
}

static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n;

	do
		n = poll(&p, 1, ms);
	while (n < 0 && errno == EINTR);
	return n > 0;
}

static void srv_read_line(struct server *sv, int fd)
{
	char c;

	while (sv->line_len < sizeof(sv->line) - 1) {
		if (!wait_in(fd, SERVER_WAIT_MS)) {
			errno = ETIMEDOUT;
			srv_fail(sv, "waiting for the CONNECT line");
			return;
		}
		if (read(fd, &c, 1) != 1)
			return; /* the client left: the test says if that is fine */
		sv->line[sv->line_len++] = c;
		if (c == '\n')
			return;
	}
}

static int srv_send(struct server *sv, int fd, const void *buf, size_t n)
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

/* Read until EOF, counting, keeping the first bytes, checking seed_in. */
static void srv_drain(struct server *sv, int fd, int verify)
{
	static __thread uint8_t buf[65536];
	size_t at;
	ssize_t r;

	for (;;) {
		if (!wait_in(fd, SERVER_WAIT_MS)) {
			errno = ETIMEDOUT;
			srv_fail(sv, "waiting for the client's EOF");
			return;
		}
		r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == ECONNRESET) {
			sv->reset = 1;
			return;
		}
		if (r < 0) {
			srv_fail(sv, "read");
			return;
		}
		if (r == 0) {
			sv->saw_eof = 1;
			return;
		}
		if (sv->rx_bytes < sizeof(sv->data)) {
			at = sizeof(sv->data) - sv->rx_bytes;
			memcpy(sv->data + sv->rx_bytes, buf,
			       (size_t)r < at ? (size_t)r : at);
		}
		if (verify && sv->rx_bad == SIZE_MAX)
			sv->rx_bad = pat32_mismatch(buf, (size_t)r, sv->seed_in, sv->rx_bytes);
		sv->rx_bytes += (size_t)r;
	}
}

static void srv_await_release(struct server *sv)
{
	char c;

	if (!wait_in(sv->release[0], SERVER_WAIT_MS)) {
		errno = ETIMEDOUT;
		srv_fail(sv, "waiting for the test");
		return;
	}
	(void)!read(sv->release[0], &c, 1);
}

static void *serve(void *arg)
{
	struct server *sv = arg;
	int fd;

	if (!wait_in(sv->lfd, SERVER_WAIT_MS)) {
		errno = ETIMEDOUT;
		srv_fail(sv, "waiting for a client");
		return NULL;
	}
	if (sv->never_accept) {
		close(sv->lfd);
		sv->lfd = -1;
		return NULL;
	}
	fd = accept4(sv->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		srv_fail(sv, "accept");
		return NULL;
	}
	if (!sv->skip_line)
		srv_read_line(sv, fd);
	if (sv->play)
		sv->play(sv, fd);
	close(fd);
	return NULL;
}

static void server_start(struct server *sv, const char *name)
{
	struct sockaddr_un un;

	path_in_dir(sv->path, sizeof(sv->path), name);
	sv->rx_bad = SIZE_MAX;
	sv->lfd = unix_socket_at(sv->path, &un);
	cr_assert(sv->lfd >= 0, "socket: %s", strerror(errno));
	cr_assert_eq(bind(sv->lfd, (struct sockaddr *)&un, sizeof(un)), 0, "bind %s: %s",
		     sv->path, strerror(errno));
	cr_assert_eq(listen(sv->lfd, 16), 0, "listen: %s", strerror(errno));
	cr_assert_eq(pipe2(sv->release, O_CLOEXEC), 0, "pipe: %s", strerror(errno));
	cr_assert_eq(pthread_create(&sv->th, NULL, serve, sv), 0, "pthread_create");
}

static void server_release(struct server *sv)
{
	cr_assert_eq(write(sv->release[1], "g", 1), 1, "release: %s", strerror(errno));
}

/* Join the server and check it saw nothing unexpected. */
static void server_finish(struct server *sv)
{
	server_release(sv); /* in case it still waits */
	pthread_join(sv->th, NULL);
	if (sv->lfd >= 0)
		close(sv->lfd);
	unlink(sv->path);
	close(sv->release[0]);
	close(sv->release[1]);
	cr_assert(!sv->fail[0], "server: %s", sv->fail);
}

static void expect_line(const struct server *sv, const char *want)
{
	char got[sizeof(sv->line) + 1];

	memcpy(got, sv->line, sv->line_len);
	got[sv->line_len] = '\0';
	cr_assert(sv->line_len == strlen(want) &&
		  memcmp(sv->line, want, sv->line_len) == 0,
		  "server received \"%s\" (%zu bytes), want \"%s\"", got, sv->line_len,
		  want);
}

static const char *addr_of(const struct server *sv, uint32_t port)
{
	static char buf[VSX_ADDR_STRLEN];

	snprintf(buf, sizeof(buf), "unix:%s:%u", sv->path, port);
	return buf;
}

/* ---- plays ---------------------------------------------------------------- */

/* Send the reply (one write), then read until the client's EOF. */
static void play_reply(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0)
		return; /* the client may already be gone (a test's point) */
	srv_drain(sv, fd, 0);
}

/* Send the reply and close at once. */
static void play_reply_close(struct server *sv, int fd)
{
	(void)srv_send(sv, fd, sv->reply, sv->reply_len);
}

/* Say nothing; wait for the client to give up (its EOF). */
static void play_silent(struct server *sv, int fd)
{
	srv_drain(sv, fd, 0);
}

/* The reply in pieces split at '|' in sv->reply, 30 ms apart. */
static void play_split(struct server *sv, int fd)
{
	const char *p = sv->reply, *bar;

	while (*p) {
		bar = strchr(p, '|');
		if (srv_send(sv, fd, p, bar ? (size_t)(bar - p) : strlen(p)) < 0) {
			srv_fail(sv, "split send");
			return;
		}
		if (!bar)
			break;
		sleep_ms(30);
		p = bar + 1;
	}
	srv_drain(sv, fd, 0);
}

static void *bulk_writer(void *arg)
{
	struct server *sv = arg;
	static __thread uint8_t buf[65536];
	size_t off = 0, n;

	while (off < sv->bulk) {
		n = sv->bulk - off < sizeof(buf) ? sv->bulk - off : sizeof(buf);
		pat32_fill(buf, n, sv->seed_out, off);
		if (srv_send(sv, sv->cfd, buf, n) < 0) {
			srv_fail(sv, "bulk send");
			break;
		}
		off += n;
	}
	sv->tx_bytes = off;
	return NULL;
}

/* OK, then bulk both ways at once: a writer thread while this one reads. */
static void play_bulk(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	sv->cfd = fd;
	if (pthread_create(&sv->writer, NULL, bulk_writer, sv) != 0) {
		srv_fail(sv, "pthread_create");
		return;
	}
	srv_drain(sv, fd, 1);
	pthread_join(sv->writer, NULL);
}

/* OK; read until EOF; hold the connection open until released. */
static void play_hold(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	srv_drain(sv, fd, 0);
	srv_await_release(sv);
}

/* OK; wait until released; then read everything (checking seed_in). */
static void play_sink_later(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	srv_await_release(sv);
	srv_drain(sv, fd, 1);
}

/* OK; wait until released; send "ping"; read until EOF. */
static void play_ping_later(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	srv_await_release(sv);
	if (srv_send(sv, fd, "ping", 4) < 0)
		srv_fail(sv, "ping");
	srv_drain(sv, fd, 0);
}

/* OK; read until EOF; then answer on the still-open direction and close. */
static void play_after_eof(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	srv_drain(sv, fd, 0);
	if (sv->saw_eof && srv_send(sv, fd, "after-eof", 9) < 0)
		srv_fail(sv, "send after EOF");
}

/*
 * OK; then send without pause (blocking writes, faster than a reader that
 * discards) until the client is gone.
 */
static void play_flood(struct server *sv, int fd)
{
	static __thread uint8_t buf[65536];
	ssize_t r;

	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	/* a deep queue, so the reader never catches up (root may force it) */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &(int){ 8 * MiB },
		       sizeof(int)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){ 8 * MiB }, sizeof(int));
	memset(buf, 'f', sizeof(buf));
	for (;;) {
		r = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return; /* EPIPE / ECONNRESET: the client closed */
		sv->tx_bytes += (size_t)r;
	}
}

/* OK; wait until released; close without reading what the client sent. */
static void play_reply_release_close(struct server *sv, int fd)
{
	if (srv_send(sv, fd, sv->reply, sv->reply_len) < 0) {
		srv_fail(sv, "reply");
		return;
	}
	srv_await_release(sv);
}

#define OK_5678 "OK 5678\n"
#define REPLY(s) .reply = (s), .reply_len = sizeof(s) - 1

/* ---- the handshake -------------------------------------------------------- */

Test(hybrid, handshake_and_info)
{
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	char want_local[VSX_ADDR_STRLEN], want_peer[VSX_ADDR_STRLEN];
	struct vsx_info info;
	vsx_sock *s = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	cr_assert_not_null(s, "connect returned 0 but no socket");
	cr_assert(vsx_fd(s) >= 0, "vsx_fd = %d", vsx_fd(s));

	RC_OK(vsx_info(s, &info), "info");
	snprintf(want_local, sizeof(want_local), "unix:%s:5678", sv.path);
	snprintf(want_peer, sizeof(want_peer), "unix:%s:1234", sv.path);
	EQ_STR(info.transport, "hybrid", "info");
	EQ_STR(info.local, want_local, "info (the OK port)");
	EQ_STR(info.peer, want_peer, "info");
	EQ_INT(info.state, VSX_STATE_CONNECTED, "info");
	EQ_INT(info.type, SOCK_STREAM, "info");
	EQ_INT(info.shut_local, 0, "info");
	EQ_INT(info.bytes_sent, 0, "info");
	EQ_INT(info.bytes_received, 0, "info");

	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
	expect_line(&sv, "CONNECT 1234\n");
	cr_assert(sv.saw_eof, "server did not see the client's EOF");
	EQ_INT(sv.rx_bytes, 0, "bytes after the CONNECT line");
}

/* A hybrid server that is not vsxd (a Firecracker's), and no vsxd at the
 * control path: the credit fields stay empty, VSX_INFO_CREDIT clear, and
 * vsx_info still succeeds. (With a vsxd: tests/daemon/control.test.) */
Test(hybrid, info_no_credit_without_vsxd)
{
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	struct vsx_opts o = { 0 };
	struct vsx_info info;
	char ctl[128];
	vsx_sock *s = NULL;

	snprintf(ctl, sizeof(ctl), "%s/no-vsxd-control", dir);
	o.control_path = ctl;
	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	memset(&info, 0xa5, sizeof(info));
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.flags & VSX_INFO_CREDIT, 0, "VSX_INFO_CREDIT");
	EQ_INT(info.buf_alloc, 0, "buf_alloc");
	EQ_INT(info.fwd_cnt, 0, "fwd_cnt");
	EQ_INT(info.peer_buf_alloc, 0, "peer_buf_alloc");
	EQ_INT(info.peer_fwd_cnt, 0, "peer_fwd_cnt");
	EQ_INT(info.tx_free, 0, "tx_free");
	EQ_INT(info.rx_free, 0, "rx_free");
	EQ_INT(info.rx_buffer, 0, "rx_buffer");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
}

Test(hybrid, connect_line_ports)
{
	static const uint32_t ports[] = { 0, 1, 1024, 4294967294u };
	char want[64], ctx[64];
	size_t i;

	for (i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		struct server sv = { .play = play_reply, REPLY("OK 1\n") };
		char name[16];
		vsx_sock *s = NULL;

		snprintf(name, sizeof(name), "vm%zu.sock", i);
		snprintf(ctx, sizeof(ctx), "port %u", ports[i]);
		server_start(&sv, name);
		RC_OK(vsx_connect(addr_of(&sv, ports[i]), NULL, &s), ctx);
		EQ_INT(vsx_close(s), 0, ctx);
		server_finish(&sv);
		snprintf(want, sizeof(want), "CONNECT %u\n", ports[i]);
		expect_line(&sv, want);
	}
}

Test(hybrid, ok_port_edges)
{
	static const struct { const char *reply; const char *port; } cases[] = {
		{ "OK 0\n", "0" },
		{ "OK 4294967294\n", "4294967294" },
		{ "OK 1024\n", "1024" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct server sv = { .play = play_reply, .reply = cases[i].reply,
				     .reply_len = strlen(cases[i].reply) };
		char want[VSX_ADDR_STRLEN], name[16];
		struct vsx_info info;
		vsx_sock *s = NULL;

		snprintf(name, sizeof(name), "vm%zu.sock", i);
		server_start(&sv, name);
		RC_OK(vsx_connect(addr_of(&sv, 9), NULL, &s), cases[i].reply);
		RC_OK(vsx_info(s, &info), "info");
		snprintf(want, sizeof(want), "unix:%s:%s", sv.path, cases[i].port);
		EQ_STR(info.local, want, cases[i].reply);
		EQ_INT(vsx_close(s), 0, "close");
		server_finish(&sv);
	}
}

Test(hybrid, bulk_4mib_each_way)
{
	const size_t n = 4 * MiB;
	struct server sv = { .play = play_bulk, REPLY(OK_5678), .seed_in = 0x1111,
			     .seed_out = 0x2222, .bulk = n };
	struct vsx_info info;
	uint8_t *out, *in;
	vsx_sock *s = NULL;
	ssize_t r;
	size_t bad;

	out = malloc(n);
	in = malloc(n);
	cr_assert(out && in, "malloc");
	pat32_fill(out, n, 0x1111, 0);
	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");

	r = vsx_send(s, out, n);
	EQ_INT(r, n, "send 4 MiB");
	/* odd chunk sizes on the way back */
	r = recv_exact(s, in, n, 7777);
	EQ_INT(r, n, "recv 4 MiB");
	bad = pat32_mismatch(in, n, 0x2222, 0);
	cr_assert_eq(bad, SIZE_MAX, "client: byte %zu differs (0x%02x, want 0x%02x)",
		     bad, bad == SIZE_MAX ? 0 : in[bad],
		     bad == SIZE_MAX ? 0 : pat32(0x2222, bad));

	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.bytes_sent, n, "info");
	EQ_INT(info.bytes_received, n, "info");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);

	expect_line(&sv, "CONNECT 1234\n");
	EQ_INT(sv.rx_bytes, n, "server received");
	cr_assert_eq(sv.rx_bad, SIZE_MAX, "server: byte %zu differs", sv.rx_bad);
	EQ_INT(sv.tx_bytes, n, "server sent");
	cr_assert(sv.saw_eof, "server did not see EOF");
	free(out);
	free(in);
}

/* "OK 5678\n" and data in the same write: the data reaches vsx_recv. */
static void ok_with_data(size_t datalen)
{
	size_t replylen = strlen(OK_5678) + datalen;
	char *reply = malloc(replylen);
	uint8_t *in = malloc(datalen + 1);
	struct server sv = { .play = play_reply, .reply = reply, .reply_len = replylen };
	char ctx[64], want[VSX_ADDR_STRLEN];
	struct vsx_info info;
	vsx_sock *s = NULL;
	ssize_t r;
	size_t bad;

	cr_assert(reply && in, "malloc");
	snprintf(ctx, sizeof(ctx), "OK + %zu data bytes in one write", datalen);
	memcpy(reply, OK_5678, strlen(OK_5678));
	pat32_fill((uint8_t *)reply + strlen(OK_5678), datalen, 0x3333, 0);
	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), ctx);
	RC_OK(vsx_info(s, &info), ctx);
	snprintf(want, sizeof(want), "unix:%s:5678", sv.path);
	EQ_STR(info.local, want, ctx);
	r = recv_exact(s, in, datalen, 1000);
	EQ_INT(r, datalen, ctx);
	bad = pat32_mismatch(in, datalen, 0x3333, 0);
	cr_assert_eq(bad, SIZE_MAX, "%s: byte %zu differs", ctx, bad);
	EQ_INT(vsx_close(s), 0, ctx);
	server_finish(&sv);
	free(reply);
	free(in);
}

Test(hybrid, ok_and_data_in_one_write)
{
	ok_with_data(1);
	ok_with_data(5);
	ok_with_data(16);  /* OK line + data = exactly the peek window */
	ok_with_data(17);
	ok_with_data(100);
	ok_with_data(200000);
}

Test(hybrid, ok_and_text_in_one_write)
{
	struct server sv = { .play = play_reply, REPLY("OK 5678\nhello\nworld\n") };
	char buf[64] = { 0 };
	vsx_sock *s = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(recv_exact(s, buf, 12, 64), 12, "recv");
	EQ_STR(buf, "hello\nworld\n", "data after OK");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
}

static void split_reply(const char *pieces, const char *tail)
{
	struct server sv = { .play = play_split, .reply = pieces };
	char buf[64] = { 0 }, want[VSX_ADDR_STRLEN];
	struct vsx_info info;
	vsx_sock *s = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), pieces);
	RC_OK(vsx_info(s, &info), pieces);
	snprintf(want, sizeof(want), "unix:%s:5678", sv.path);
	EQ_STR(info.local, want, pieces);
	if (tail[0]) {
		EQ_INT(recv_exact(s, buf, strlen(tail), 64), strlen(tail), pieces);
		EQ_STR(buf, tail, pieces);
	}
	EQ_INT(vsx_close(s), 0, pieces);
	server_finish(&sv);
	expect_line(&sv, "CONNECT 1234\n");
}

Test(hybrid, reply_split_across_writes)
{
	split_reply("O|K| 56|78|\n", "");
	split_reply("OK 5678|\n", "");
	split_reply("O|K| |5|6|7|8|\n", "");
	split_reply("OK |5678\nta|il", "tail");
	split_reply("OK 56|78\ndata", "data");
}

/* The reply must make connect fail with @want, the message naming @why. */
static void reply_fails(const char *reply, size_t len, int want, const char *why)
{
	struct server sv = { .play = play_reply, .reply = reply, .reply_len = len };
	struct vsx_opts o = { .connect_timeout_ms = 3000 };
	vsx_sock *s = (vsx_sock *)&s;
	char ctx[160];
	int rc;

	snprintf(ctx, sizeof(ctx), "reply \"%.*s\" (%zu bytes)",
		 (int)(len > 40 ? 40 : len), reply, len);
	server_start(&sv, "vm.sock");
	rc = vsx_connect(addr_of(&sv, 1234), &o, &s);
	EQ_INT(rc, want, ctx);
	cr_assert_null(s, "%s: *out not NULL after a failure", ctx);
	HAS_STR(vsx_strerror(rc), why, ctx);
	server_finish(&sv);
	expect_line(&sv, "CONNECT 1234\n");
}

#define BAD(s, why) reply_fails((s), sizeof(s) - 1, -EPROTO, (why))

Test(hybrid, malformed_replies)
{
	const char *m = "malformed reply";

	BAD("NO\n", m);
	BAD("OK\n", m);
	BAD("OK \n", m);
	BAD("OK abc\n", m);
	BAD("OK 99999999999\n", m);
	BAD("OK 4294967296\n", m);
	BAD("ok 1\n", m);
	BAD("Ok 1\n", m);
	BAD("OK -1\n", m);
	BAD("OK +1\n", m);
	BAD("OK 0x10\n", m);
	BAD("OK 12 \n", m);
	BAD("OK  12\n", m);
	BAD("OK 12\r\n", m);
	BAD(" OK 12\n", m);
	BAD("OK 1 2\n", m);
	BAD("OK 12x\n", m);
	BAD("\n", m);
	BAD("CONNECT 1234\n", m);
	BAD("OK 0000000000000000005\n", m);
	BAD("OK 56\0" "78\n", m);
	BAD("\x00\xff\x01\x02\n", m);
}

Test(hybrid, overlong_and_binary_replies)
{
	char line[100], junk[64];
	size_t i;

	/* a 100-byte line */
	memset(line, 'x', sizeof(line));
	line[sizeof(line) - 1] = '\n';
	reply_fails(line, sizeof(line), -EPROTO, "too long");
	/* a 100-byte OK line (leading zeros) */
	memcpy(line, "OK ", 3);
	memset(line + 3, '0', sizeof(line) - 4);
	line[sizeof(line) - 2] = '7';
	reply_fails(line, sizeof(line), -EPROTO, "too long");
	/* binary junk without a newline */
	for (i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(pat32(0x4444, i) == '\n' ? 0 : pat32(0x4444, i));
	reply_fails(junk, sizeof(junk), -EPROTO, "too long");
	/* exactly the 24-byte peek window, no newline */
	memset(line, 'x', 24);
	memcpy(line, "OK 5678", 7);
	reply_fails(line, 24, -EPROTO, "too long");
}

Test(hybrid, reply_cut_short_then_close)
{
	/* a partial line, then the server closes: nothing more can come */
	static const char *cuts[] = { "O", "OK", "OK 56", "OK 5678" };
	size_t i;

	for (i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		struct server sv = { .play = play_reply_close, .reply = cuts[i],
				     .reply_len = strlen(cuts[i]) };
		struct vsx_opts o = { .connect_timeout_ms = 5000 };
		vsx_sock *s = NULL;
		int64_t t0;
		int rc;

		server_start(&sv, "vm.sock");
		t0 = vsx__now_ms();
		rc = vsx_connect(addr_of(&sv, 1234), &o, &s);
		EQ_INT(rc, -EPROTO, cuts[i]);
		HAS_STR(vsx_strerror(rc), "reply", cuts[i]);
		/* it knows at once: the peer is gone, the line cannot complete */
		cr_assert(vsx__now_ms() - t0 < o.connect_timeout_ms,
			  "\"%s\": took %lld ms, the whole connect timeout", cuts[i],
			  (long long)(vsx__now_ms() - t0));
		server_finish(&sv);
	}
}

/* ---- refusals and timeouts ------------------------------------------------ */

Test(hybrid, closed_without_reply)
{
	struct server sv = { .play = NULL }; /* reads the line, closes */
	vsx_sock *s = NULL;
	int rc;

	server_start(&sv, "vm.sock");
	rc = vsx_connect(addr_of(&sv, 1234), NULL, &s);
	EQ_INT(rc, -ECONNREFUSED, "closed after the CONNECT line");
	HAS_STR(vsx_strerror(rc), "refused", "closed");
	cr_assert_null(s, "socket after a failure");
	server_finish(&sv);
	expect_line(&sv, "CONNECT 1234\n");
}

Test(hybrid, closed_without_reading)
{
	struct server sv = { .play = NULL, .skip_line = 1 };
	vsx_sock *s = NULL;
	int rc;

	server_start(&sv, "vm.sock");
	rc = vsx_connect(addr_of(&sv, 1234), NULL, &s);
	EQ_INT(rc, -ECONNREFUSED, "closed with the CONNECT line unread");
	server_finish(&sv);
}

Test(hybrid, listener_closed_before_accept)
{
	struct server sv = { .never_accept = 1 };
	vsx_sock *s = NULL;
	int rc;

	server_start(&sv, "vm.sock");
	rc = vsx_connect(addr_of(&sv, 1234), NULL, &s);
	EQ_INT(rc, -ECONNREFUSED, "listener closed with the client pending");
	server_finish(&sv);
}

Test(hybrid, never_replies_times_out)
{
	struct server sv = { .play = play_silent };
	struct vsx_opts o = { .connect_timeout_ms = 300 };
	vsx_sock *s = NULL;
	int64_t t0, dt;
	int rc;

	server_start(&sv, "vm.sock");
	t0 = vsx__now_ms();
	rc = vsx_connect(addr_of(&sv, 1234), &o, &s);
	dt = vsx__now_ms() - t0;
	EQ_INT(rc, -ETIMEDOUT, "silent server");
	HAS_STR(vsx_strerror(rc), "no reply to CONNECT within 300 ms", "silent server");
	cr_assert_null(s, "socket after a failure");
	cr_assert(dt >= 300 - 10 && dt <= 300 + SLACK_MS,
		  "timed out after %lld ms, want about 300", (long long)dt);
	server_finish(&sv);
	expect_line(&sv, "CONNECT 1234\n");
	cr_assert(sv.saw_eof, "server did not see the client give up");
}

Test(hybrid, partial_reply_times_out)
{
	struct server sv = { .play = play_hold, REPLY("OK 56") };
	struct vsx_opts o = { .connect_timeout_ms = 300 };
	vsx_sock *s = NULL;
	int64_t t0, dt;
	int rc;

	server_start(&sv, "vm.sock");
	t0 = vsx__now_ms();
	rc = vsx_connect(addr_of(&sv, 1234), &o, &s);
	dt = vsx__now_ms() - t0;
	EQ_INT(rc, -ETIMEDOUT, "partial reply");
	cr_assert(dt >= 300 - 10 && dt <= 300 + SLACK_MS,
		  "timed out after %lld ms, want about 300", (long long)dt);
	server_finish(&sv);
}

Test(hybrid, default_timeout_applies)
{
	/* connect_timeout_ms 0 means the default, 2 s */
	struct server sv = { .play = play_silent };
	vsx_sock *s = NULL;
	int64_t t0, dt;
	int rc;

	server_start(&sv, "vm.sock");
	t0 = vsx__now_ms();
	rc = vsx_connect(addr_of(&sv, 1234), NULL, &s);
	dt = vsx__now_ms() - t0;
	EQ_INT(rc, -ETIMEDOUT, "default timeout");
	cr_assert(dt >= VSX_DEFAULT_CONNECT_TIMEOUT_MS - 10 &&
		  dt <= VSX_DEFAULT_CONNECT_TIMEOUT_MS + SLACK_MS,
		  "timed out after %lld ms, want about %d", (long long)dt,
		  VSX_DEFAULT_CONNECT_TIMEOUT_MS);
	server_finish(&sv);
}

Test(hybrid, nothing_at_the_path)
{
	char path[PATH_MAX], addr[PATH_MAX + 32];
	struct sockaddr_un un;
	vsx_sock *s = NULL;
	int rc, fd;

	/* no file */
	path_in_dir(path, sizeof(path), "missing.sock");
	snprintf(addr, sizeof(addr), "unix:%s:1234", path);
	rc = vsx_connect(addr, NULL, &s);
	EQ_INT(rc, -ECONNREFUSED, "no socket file");
	HAS_STR(vsx_strerror(rc), path, "no socket file");
	cr_assert_null(s, "socket after a failure");

	/* no directory */
	snprintf(addr, sizeof(addr), "unix:%s/nodir/x.sock:1234", dir);
	EQ_INT(vsx_connect(addr, NULL, &s), -ECONNREFUSED, "no directory");

	/* a stale socket file: nobody listens */
	path_in_dir(path, sizeof(path), "stale.sock");
	fd = unix_socket_at(path, &un);
	cr_assert_eq(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0, "bind");
	close(fd);
	snprintf(addr, sizeof(addr), "unix:%s:1234", path);
	EQ_INT(vsx_connect(addr, NULL, &s), -ECONNREFUSED, "stale socket file");

	/* a regular file */
	path_in_dir(path, sizeof(path), "plain");
	fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	cr_assert(fd >= 0, "create %s", path);
	close(fd);
	snprintf(addr, sizeof(addr), "unix:%s:1234", path);
	EQ_INT(vsx_connect(addr, NULL, &s), -ECONNREFUSED, "regular file");
	cr_assert_eq(file_kind(path), S_IFREG, "the file was touched");
}

Test(hybrid, path_length_edge)
{
	char name[VSX_PATH_MAX], addr[VSX_PATH_MAX + 32];
	size_t dl = strlen(dir) + 1, n;
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	vsx_sock *s = NULL;
	int rc;

	/* a 107-byte path: the longest sun_path takes; it works */
	n = VSX_PATH_MAX - 1 - dl;
	cr_assert(n > 0 && n < sizeof(name), "temp dir path too long");
	memset(name, 'L', n);
	name[n] = '\0';
	server_start(&sv, name);
	EQ_INT(strlen(sv.path), VSX_PATH_MAX - 1, "server path length");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "107-byte path");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
	expect_line(&sv, "CONNECT 1234\n");

	/* 108 bytes: refused before any socket */
	snprintf(addr, sizeof(addr), "unix:%sX:1234", sv.path);
	rc = vsx_connect(addr, NULL, &s);
	EQ_INT(rc, -EINVAL, "108-byte path");
	HAS_STR(vsx_strerror(rc), "limit", "108-byte path");
}

Test(hybrid, options_refused)
{
	struct vsx_opts o;
	vsx_sock *s = NULL;
	char addr[PATH_MAX + 32];
	int rc;

	snprintf(addr, sizeof(addr), "unix:%s/vm.sock:1234", dir);
	memset(&o, 0, sizeof(o));
	o.flags = VSX_O_SEQPACKET;
	rc = vsx_connect(addr, &o, &s);
	EQ_INT(rc, -ESOCKTNOSUPPORT, "seqpacket");
	HAS_STR(vsx_strerror(rc), "stream", "seqpacket");
	snprintf(addr, sizeof(addr), "unix:%s/vm.sock:any", dir);
	rc = vsx_connect(addr, NULL, &s);
	EQ_INT(rc, -EINVAL, "port any");
	HAS_STR(vsx_strerror(rc), "any", "port any");
	cr_assert_null(s, "socket after a failure");
}

/* ---- data-path semantics -------------------------------------------------- */

Test(hybrid, shutdown_wr)
{
	struct server sv = { .play = play_after_eof, REPLY(OK_5678) };
	struct vsx_info info;
	char buf[32] = { 0 };
	vsx_sock *s = NULL;
	ssize_t r;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_send(s, "abc", 3), 3, "send");
	EQ_INT(vsx_shutdown(s, SHUT_WR), 0, "shutdown");
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.shut_local, VSX_SHUT_WR, "info after SHUT_WR");
	cr_assert(info.shut_local & SHUT_WR, "shut_local & SHUT_WR after SHUT_WR");
	EQ_INT(info.state, VSX_STATE_CLOSING, "info after SHUT_WR");
	EQ_INT(vsx_send(s, "x", 1), -EPIPE, "send after SHUT_WR");
	/* the server answers only after it saw our EOF */
	r = recv_exact(s, buf, sizeof(buf) - 1, 64);
	EQ_INT(r, 9, "recv after SHUT_WR");
	EQ_STR(buf, "after-eof", "recv after SHUT_WR");
	EQ_INT(vsx_recv(s, buf, sizeof(buf)), 0, "EOF");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
	cr_assert(sv.saw_eof, "server saw no EOF");
	EQ_INT(sv.rx_bytes, 3, "server received");
	cr_assert(memcmp(sv.data, "abc", 3) == 0, "server received \"%.3s\"", sv.data);
}

/*
 * shut_local is read in the terms a caller passes: "shut_local & SHUT_WR"
 * is the sending side (libvsx 0.1 had it the receiving side's bit), and
 * vsx_shutdown takes the bits it reports (0.1 read VSX_SHUT_WR, 2, as
 * SHUT_RDWR and shut both sides).
 */
Test(hybrid, shut_local_against_shut_wr)
{
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	struct vsx_info info;
	char buf[32] = { 0 };
	vsx_sock *s = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_shutdown(s, SHUT_RD), 0, "shutdown(SHUT_RD)");
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.shut_local & SHUT_WR, 0, "shut_local & SHUT_WR after SHUT_RD");
	EQ_INT(info.shut_local, VSX_SHUT_RD, "shut_local after SHUT_RD");
	EQ_INT(vsx_send(s, "abc", 3), 3, "send after SHUT_RD");
	EQ_INT(vsx_shutdown(s, SHUT_WR), 0, "shutdown(SHUT_WR)");
	RC_OK(vsx_info(s, &info), "info");
	cr_assert(info.shut_local & SHUT_WR, "shut_local & SHUT_WR after SHUT_WR: %u",
		  info.shut_local);
	EQ_INT(info.shut_local, VSX_SHUT_RDWR, "shut_local after both");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);

	/* VSX_SHUT_WR shuts the sending side only: the server's answer to our
	 * EOF still arrives */
	sv = (struct server){ .play = play_after_eof, REPLY(OK_5678) };
	server_start(&sv, "vm2.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_shutdown(s, VSX_SHUT_WR), 0, "shutdown(VSX_SHUT_WR)");
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.shut_local, VSX_SHUT_WR, "shut_local after VSX_SHUT_WR");
	EQ_INT(recv_exact(s, buf, sizeof(buf) - 1, 64), 9, "recv after VSX_SHUT_WR");
	EQ_STR(buf, "after-eof", "recv after VSX_SHUT_WR");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);

	/* VSX_SHUT_RD and VSX_SHUT_RDWR are taken too */
	sv = (struct server){ .play = play_reply, REPLY(OK_5678) };
	server_start(&sv, "vm3.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_shutdown(s, VSX_SHUT_RD), 0, "shutdown(VSX_SHUT_RD)");
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.shut_local, VSX_SHUT_RD, "shut_local after VSX_SHUT_RD");
	EQ_INT(vsx_shutdown(s, VSX_SHUT_RDWR), 0, "shutdown(VSX_SHUT_RDWR)");
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.shut_local, VSX_SHUT_RDWR, "shut_local after VSX_SHUT_RDWR");
	EQ_INT(vsx_send(s, "x", 1), -EPIPE, "send after VSX_SHUT_RDWR");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
}

Test(hybrid, shutdown_bad_how)
{
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	vsx_sock *s = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_shutdown(s, 3), -EINVAL, "shutdown(3)");
	EQ_INT(vsx_shutdown(s, 6), -EINVAL, "shutdown(6)");
	EQ_INT(vsx_shutdown(s, 7), -EINVAL, "shutdown(7)");
	EQ_INT(vsx_shutdown(s, -1), -EINVAL, "shutdown(-1)");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
}

Test(hybrid, close_times_out_when_peer_holds)
{
	struct server sv = { .play = play_hold, REPLY(OK_5678) };
	struct vsx_opts o = { .linger_ms = 500 };
	vsx_sock *s = NULL;
	int64_t t0, dt;
	int rc;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	t0 = vsx__now_ms();
	rc = vsx_close(s);
	dt = vsx__now_ms() - t0;
	EQ_INT(rc, -ETIMEDOUT, "close against a server that never closes");
	HAS_STR(vsx_strerror(rc), "within 500 ms", "close");
	cr_assert(dt >= 500 - 10 && dt <= 500 + SLACK_MS,
		  "close took %lld ms, linger 500", (long long)dt);
	server_finish(&sv);
	cr_assert(sv.saw_eof, "close did not shut down sending first");
}

Test(hybrid, close_times_out_when_peer_floods)
{
	/* the peer keeps sending and never finishes: the linger still ends */
	struct server sv = { .play = play_flood, REPLY(OK_5678) };
	struct vsx_opts o = { .linger_ms = 500 };
	vsx_sock *s = NULL;
	int64_t t0, dt;
	int rc;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	sleep_ms(50); /* let the flood fill the socket */
	t0 = vsx__now_ms();
	rc = vsx_close(s);
	dt = vsx__now_ms() - t0;
	EQ_INT(rc, -ETIMEDOUT, "close against a flooding server");
	cr_assert(dt >= 500 - 10 && dt <= 500 + SLACK_MS,
		  "close took %lld ms, linger 500", (long long)dt);
	server_finish(&sv);
	cr_assert(sv.tx_bytes > 0, "the server sent nothing");
}

Test(hybrid, close_when_peer_closes)
{
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	struct vsx_opts o = { .linger_ms = 5000 };
	vsx_sock *s = NULL;
	int64_t t0;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	t0 = vsx__now_ms();
	EQ_INT(vsx_close(s), 0, "close against a server that closes");
	cr_assert(vsx__now_ms() - t0 < 5000, "close waited the whole linger");
	server_finish(&sv);
	cr_assert(sv.saw_eof, "server saw no EOF");
}

Test(hybrid, close_after_peer_eof_is_immediate)
{
	struct server sv = { .play = play_reply_close, REPLY(OK_5678) };
	struct vsx_opts o = { .linger_ms = 5000 };
	vsx_sock *s = NULL;
	char c;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	EQ_INT(vsx_recv(s, &c, 1), 0, "EOF");
	EQ_INT(vsx_close(s), 0, "close after EOF");
	server_finish(&sv);
}

Test(hybrid, close_without_linger)
{
	struct server sv = { .play = play_hold, REPLY(OK_5678) };
	struct vsx_opts o = { .linger_ms = -1 };
	vsx_sock *s = NULL;
	int64_t t0;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	t0 = vsx__now_ms();
	EQ_INT(vsx_close(s), 0, "close with linger < 0");
	cr_assert(vsx__now_ms() - t0 < SLACK_MS, "close with linger < 0 waited %lld ms",
		  (long long)(vsx__now_ms() - t0));
	server_finish(&sv);
	cr_assert(sv.saw_eof, "server saw no EOF");
}

Test(hybrid, nonblocking_recv)
{
	struct server sv = { .play = play_ping_later, REPLY(OK_5678) };
	struct vsx_opts o = { .flags = VSX_O_NONBLOCK };
	struct pollfd p;
	char buf[8] = { 0 };
	vsx_sock *s = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");
	EQ_INT(vsx_recv(s, buf, sizeof(buf)), -EAGAIN, "recv with nothing there");
	EQ_INT(vsx_recv(s, buf, sizeof(buf)), -EAGAIN, "recv again");
	server_release(&sv);
	p = (struct pollfd){ .fd = vsx_fd(s), .events = POLLIN };
	cr_assert_eq(poll(&p, 1, SERVER_WAIT_MS), 1, "vsx_fd never became readable");
	EQ_INT(vsx_recv(s, buf, sizeof(buf)), 4, "recv ping");
	EQ_STR(buf, "ping", "recv");
	EQ_INT(vsx_recv(s, buf, sizeof(buf)), -EAGAIN, "recv after ping");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
}

Test(hybrid, nonblocking_send_partial)
{
	const size_t n = 8 * MiB;
	struct server sv = { .play = play_sink_later, REPLY(OK_5678), .seed_in = 0x5555 };
	struct vsx_opts o = { .flags = VSX_O_NONBLOCK };
	struct vsx_info info;
	struct pollfd p;
	size_t done;
	uint8_t *out;
	vsx_sock *s = NULL;
	ssize_t r;

	out = malloc(n);
	cr_assert_not_null(out, "malloc");
	pat32_fill(out, n, 0x5555, 0);
	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), &o, &s), "connect");

	/* the server does not read: only what the socket buffers goes */
	r = vsx_send(s, out, n);
	cr_assert(r > 0 && (size_t)r < n,
		  "nonblocking send of %zu = %zd (%s), want partial", n, r,
		  r < 0 ? vsx_strerror((int)r) : "");
	done = (size_t)r;
	r = vsx_send(s, out + done, n - done);
	EQ_INT(r, -EAGAIN, "send into a full socket");
	RC_OK(vsx_info(s, &info), "info");
	EQ_INT(info.bytes_sent, done, "info.bytes_sent after a partial send");

	/* let the server read, and finish the job */
	server_release(&sv);
	while (done < n) {
		p = (struct pollfd){ .fd = vsx_fd(s), .events = POLLOUT };
		cr_assert_eq(poll(&p, 1, SERVER_WAIT_MS), 1, "never writable again");
		r = vsx_send(s, out + done, n - done);
		cr_assert(r > 0 || r == -EAGAIN, "send = %zd (%s)", r,
			  vsx_strerror((int)r));
		if (r > 0)
			done += (size_t)r;
	}
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
	EQ_INT(sv.rx_bytes, n, "server received");
	cr_assert_eq(sv.rx_bad, SIZE_MAX, "server: byte %zu differs", sv.rx_bad);
	free(out);
}

Test(hybrid, send_to_closed_peer_is_epipe)
{
	struct server sv = { .play = play_reply_close, REPLY(OK_5678) };
	static char big[MiB];
	vsx_sock *s = NULL;
	char c;
	ssize_t r;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_recv(s, &c, 1), 0, "the server's EOF");
	server_finish(&sv);
	/* no SIGPIPE (it would kill this test): -EPIPE */
	r = vsx_send(s, "x", 1);
	EQ_INT(r, -EPIPE, "send to a closed peer");
	HAS_STR(vsx_strerror((int)r), "send", "send to a closed peer");
	EQ_INT(vsx_send(s, big, sizeof(big)), -EPIPE, "big send to a closed peer");
	EQ_INT(vsx_close(s), 0, "close");
}

Test(hybrid, send_to_reset_peer)
{
	/* the peer closes with our bytes unread: a reset on a Unix socket */
	struct server sv = { .play = play_reply_release_close, REPLY(OK_5678) };
	struct pollfd p;
	vsx_sock *s = NULL;
	ssize_t r;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_send(s, "unread", 6), 6, "send");
	server_release(&sv);
	server_finish(&sv);
	p = (struct pollfd){ .fd = vsx_fd(s), .events = POLLIN };
	cr_assert_eq(poll(&p, 1, SERVER_WAIT_MS), 1, "no hangup seen");
	r = vsx_send(s, "x", 1);
	cr_assert(r == -EPIPE || r == -ECONNRESET,
		  "send to a reset peer = %zd (%s), want -EPIPE or -ECONNRESET", r,
		  vsx_strerror((int)r));
	r = vsx_send(s, "x", 1);
	EQ_INT(r, -EPIPE, "second send to a reset peer");
	vsx_close(s);
}

/* ---- listening ------------------------------------------------------------ */

static void listen_addr(char *buf, size_t len, const char *name, uint32_t port)
{
	snprintf(buf, len, "unix:%s/%s:%u", dir, name, port);
}

Test(hybrid_listen, binds_path_port_and_serves)
{
	char addr[PATH_MAX + 32], path[PATH_MAX], want[VSX_ADDR_STRLEN];
	static uint8_t up[65536], down[65536], got[65536];
	struct vsx_info info;
	vsx_sock *l = NULL, *a = NULL;
	int fd;

	listen_addr(addr, sizeof(addr), "s", 1234);
	path_in_dir(path, sizeof(path), "s_1234");
	RC_OK(vsx_listen(addr, NULL, &l), "listen");
	cr_assert_eq(file_kind(path), S_IFSOCK, "%s is not a socket (kind 0%o)", path,
		     file_kind(path));
	cr_assert_eq(file_kind(dir), S_IFDIR, "dir");
	RC_OK(vsx_info(l, &info), "listener info");
	EQ_STR(info.transport, "hybrid", "listener info");
	EQ_INT(info.state, VSX_STATE_LISTENING, "listener info");
	snprintf(want, sizeof(want), "unix:%s/s:1234", dir);
	EQ_STR(info.local, want, "listener info");

	/* a guest connection delivered as a plain stream */
	fd = raw_connect(path);
	RC_OK(vsx_accept(l, &a), "accept");
	cr_assert_not_null(a, "accept gave no socket");
	RC_OK(vsx_info(a, &info), "accepted info");
	EQ_STR(info.transport, "hybrid", "accepted info");
	EQ_INT(info.state, VSX_STATE_CONNECTED, "accepted info");

	pat32_fill(up, sizeof(up), 0x6666, 0);
	pat32_fill(down, sizeof(down), 0x7777, 0);
	raw_write_all(fd, up, sizeof(up));
	EQ_INT(recv_exact(a, got, sizeof(got), 4096), sizeof(got), "vsx_recv");
	cr_assert(memcmp(got, up, sizeof(up)) == 0, "accepted side got other bytes");
	EQ_INT(vsx_send(a, down, sizeof(down)), sizeof(down), "vsx_send");
	raw_read_exact(fd, got, sizeof(got));
	cr_assert(memcmp(got, down, sizeof(down)) == 0, "raw client got other bytes");
	RC_OK(vsx_info(a, &info), "accepted info");
	EQ_INT(info.bytes_sent, sizeof(down), "accepted info");
	EQ_INT(info.bytes_received, sizeof(up), "accepted info");

	/* closing the accepted connection leaves the listener's file */
	close(fd);
	EQ_INT(vsx_close(a), 0, "close accepted");
	cr_assert_eq(file_kind(path), S_IFSOCK, "closing a connection removed %s", path);
	/* the listener still accepts */
	fd = raw_connect(path);
	RC_OK(vsx_accept(l, &a), "second accept");
	close(fd);
	EQ_INT(vsx_close(a), 0, "close second accepted");
	/* closing the listener removes it */
	EQ_INT(vsx_close(l), 0, "close listener");
	cr_assert_eq(file_kind(path), 0, "%s still exists after closing the listener",
		     path);
}

Test(hybrid_listen, accept_inherits_nonblock)
{
	struct vsx_opts o = { .flags = VSX_O_NONBLOCK, .linger_ms = -1 };
	char addr[PATH_MAX + 32], path[PATH_MAX], c;
	vsx_sock *l = NULL, *a = (vsx_sock *)&a;
	int fd;

	listen_addr(addr, sizeof(addr), "nb", 7);
	path_in_dir(path, sizeof(path), "nb_7");
	RC_OK(vsx_listen(addr, &o, &l), "listen");
	EQ_INT(vsx_accept(l, &a), -EAGAIN, "accept with nobody pending");
	cr_assert_null(a, "accept failure left *out set");
	fd = raw_connect(path);
	RC_OK(vsx_accept(l, &a), "accept");
	EQ_INT(vsx_recv(a, &c, 1), -EAGAIN, "recv on the accepted socket");
	close(fd);
	EQ_INT(vsx_close(a), 0, "close accepted");
	EQ_INT(vsx_close(l), 0, "close listener");
}

Test(hybrid_listen, stale_socket_replaced)
{
	char addr[PATH_MAX + 32], path[PATH_MAX];
	struct sockaddr_un un;
	vsx_sock *l = NULL, *a = NULL;
	int fd;

	path_in_dir(path, sizeof(path), "s_1234");
	fd = unix_socket_at(path, &un);
	cr_assert_eq(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0, "bind");
	close(fd); /* the file stays: stale */
	cr_assert_eq(file_kind(path), S_IFSOCK, "no stale socket to start with");

	listen_addr(addr, sizeof(addr), "s", 1234);
	RC_OK(vsx_listen(addr, NULL, &l), "listen over a stale socket");
	fd = raw_connect(path);
	RC_OK(vsx_accept(l, &a), "accept");
	close(fd);
	EQ_INT(vsx_close(a), 0, "close accepted");
	EQ_INT(vsx_close(l), 0, "close listener");
	cr_assert_eq(file_kind(path), 0, "file left behind");
}

Test(hybrid_listen, live_socket_in_use)
{
	char addr[PATH_MAX + 32], path[PATH_MAX];
	vsx_sock *l = (vsx_sock *)&l;
	int lfd, fd, afd, rc;

	path_in_dir(path, sizeof(path), "s_1234");
	lfd = raw_listen(path);
	listen_addr(addr, sizeof(addr), "s", 1234);
	rc = vsx_listen(addr, NULL, &l);
	EQ_INT(rc, -EADDRINUSE, "listen over a live socket");
	HAS_STR(vsx_strerror(rc), "in use", "listen over a live socket");
	cr_assert_null(l, "*out after a failure");
	/* the live listener is untouched and still works */
	cr_assert_eq(file_kind(path), S_IFSOCK, "the live socket file is gone");
	fd = raw_connect(path);
	raw_write_all(fd, "hi", 2);
	/* (vsx_listen's liveness probe may have left one empty connection) */
	for (;;) {
		char buf[4];
		ssize_t r;

		afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		cr_assert(afd >= 0, "accept on the live listener: %s", strerror(errno));
		r = read(afd, buf, sizeof(buf));
		close(afd);
		if (r == 2 && memcmp(buf, "hi", 2) == 0)
			break;
		cr_assert_eq(r, 0, "unexpected read %zd on the live listener", r);
	}
	close(fd);
	close(lfd);
}

Test(hybrid_listen, regular_file_not_deleted)
{
	char addr[PATH_MAX + 32], path[PATH_MAX], buf[32] = { 0 };
	vsx_sock *l = NULL;
	int fd, rc;

	path_in_dir(path, sizeof(path), "s_1234");
	fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	cr_assert(fd >= 0, "create");
	cr_assert_eq(write(fd, "precious", 8), 8, "write");
	close(fd);
	listen_addr(addr, sizeof(addr), "s", 1234);
	rc = vsx_listen(addr, NULL, &l);
	EQ_INT(rc, -EADDRINUSE, "listen over a regular file");
	HAS_STR(vsx_strerror(rc), path, "listen over a regular file");
	cr_assert_eq(file_kind(path), S_IFREG, "the regular file is gone");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "reopen");
	cr_assert_eq(read(fd, buf, sizeof(buf) - 1), 8, "read back");
	close(fd);
	EQ_STR(buf, "precious", "file content");

	/* a directory there is in use too, and left alone */
	listen_addr(addr, sizeof(addr), "d", 1);
	path_in_dir(path, sizeof(path), "d_1");
	cr_assert_eq(mkdir(path, 0700), 0, "mkdir");
	EQ_INT(vsx_listen(addr, NULL, &l), -EADDRINUSE, "listen over a directory");
	cr_assert_eq(file_kind(path), S_IFDIR, "the directory is gone");
}

Test(hybrid_listen, ports_are_separate_files)
{
	char addr[PATH_MAX + 32], p1[PATH_MAX], p2[PATH_MAX];
	vsx_sock *l1 = NULL, *l2 = NULL, *l3 = NULL;

	listen_addr(addr, sizeof(addr), "vm.sock", 1);
	RC_OK(vsx_listen(addr, NULL, &l1), "listen port 1");
	listen_addr(addr, sizeof(addr), "vm.sock", 4294967294u);
	RC_OK(vsx_listen(addr, NULL, &l2), "listen port 4294967294");
	path_in_dir(p1, sizeof(p1), "vm.sock_1");
	path_in_dir(p2, sizeof(p2), "vm.sock_4294967294");
	cr_assert_eq(file_kind(p1), S_IFSOCK, "%s", p1);
	cr_assert_eq(file_kind(p2), S_IFSOCK, "%s", p2);
	/* the same port twice: in use */
	listen_addr(addr, sizeof(addr), "vm.sock", 1);
	EQ_INT(vsx_listen(addr, NULL, &l3), -EADDRINUSE, "same port twice");
	cr_assert_eq(file_kind(p1), S_IFSOCK, "the first listener's file is gone");
	EQ_INT(vsx_close(l1), 0, "close 1");
	cr_assert_eq(file_kind(p1), 0, "%s left behind", p1);
	cr_assert_eq(file_kind(p2), S_IFSOCK, "closing one removed the other");
	EQ_INT(vsx_close(l2), 0, "close 2");
	cr_assert_eq(file_kind(p2), 0, "%s left behind", p2);
}

Test(hybrid_listen, bad_listen_addresses)
{
	char addr[PATH_MAX + 200], name[VSX_PATH_MAX];
	size_t n;
	vsx_sock *l = NULL;
	int rc;

	listen_addr(addr, sizeof(addr), "s", VSX_PORT_ANY);
	EQ_INT(vsx_listen(addr, NULL, &l), -EINVAL, "listen on port any");
	snprintf(addr, sizeof(addr), "unix:%s/nodir/s:1", dir);
	EQ_INT(vsx_listen(addr, NULL, &l), -ENOENT, "listen in a missing dir");

	/* PATH fits, PATH_PORT does not */
	n = VSX_PATH_MAX - 1 - (strlen(dir) + 1) - 2;
	memset(name, 'L', n);
	name[n] = '\0';
	listen_addr(addr, sizeof(addr), name, 1234);
	rc = vsx_listen(addr, NULL, &l);
	EQ_INT(rc, -ENAMETOOLONG, "listen with PATH_PORT too long");
	HAS_STR(vsx_strerror(rc), "longer than 107", "listen path too long");
	cr_assert_null(l, "*out after a failure");
	/* ... and exactly at the edge it works */
	n = VSX_PATH_MAX - 1 - (strlen(dir) + 1) - 5;
	name[n] = '\0';
	listen_addr(addr, sizeof(addr), name, 1234);
	RC_OK(vsx_listen(addr, NULL, &l), "listen with a 107-byte PATH_PORT");
	EQ_INT(vsx_close(l), 0, "close");
}

Test(hybrid_listen, accept_on_a_connection_is_einval)
{
	struct server sv = { .play = play_reply, REPLY(OK_5678) };
	vsx_sock *s = NULL, *a = NULL;

	server_start(&sv, "vm.sock");
	RC_OK(vsx_connect(addr_of(&sv, 1234), NULL, &s), "connect");
	EQ_INT(vsx_accept(s, &a), -EINVAL, "accept on a connected socket");
	EQ_INT(vsx_close(s), 0, "close");
	server_finish(&sv);
}

Test(hybrid_listen, client_meets_listener)
{
	/* vsx_connect to a vsx_listen socket: the listener is no hybrid server,
	 * so it sees the CONNECT line as data and we answer by hand */
	char addr[PATH_MAX + 32], path[PATH_MAX], line[32] = { 0 }, caddr[PATH_MAX + 32];
	vsx_sock *l = NULL, *a = NULL, *c = NULL;
	struct vsx_opts o = { .connect_timeout_ms = 300 };

	listen_addr(addr, sizeof(addr), "h", 5);
	path_in_dir(path, sizeof(path), "h_5");
	RC_OK(vsx_listen(addr, NULL, &l), "listen");
	/* no server answers: the client times out, the listener got the line */
	snprintf(caddr, sizeof(caddr), "unix:%s:77", path);
	EQ_INT(vsx_connect(caddr, &o, &c), -ETIMEDOUT, "connect to a plain listener");
	RC_OK(vsx_accept(l, &a), "accept");
	EQ_INT(recv_exact(a, line, 11, 64), 11, "recv the CONNECT line");
	EQ_STR(line, "CONNECT 77\n", "the line as data");
	EQ_INT(vsx_close(a), 0, "close accepted");
	EQ_INT(vsx_close(l), 0, "close listener");
}

/* VSX_O_SEQPACKET: PATH_PORT is a SOCK_SEQPACKET socket, as vsxd connects
 * for guest SEQPACKET sockets; each record arrives as one message. */
Test(hybrid_listen, seqpacket_keeps_records)
{
	struct vsx_opts o = { .flags = VSX_O_SEQPACKET };
	char addr[PATH_MAX + 32], path[PATH_MAX];
	static uint8_t msg[3][5000], got[8192];
	static const size_t len[3] = { 1, 5000, 4096 };
	struct sockaddr_un un;
	vsx_sock *l = NULL, *a = NULL;
	int fd, i;

	listen_addr(addr, sizeof(addr), "sq", 77);
	path_in_dir(path, sizeof(path), "sq_77");
	RC_OK(vsx_listen(addr, &o, &l), "seqpacket listen");
	/* a stream client is refused by type: no silent stream fallback */
	fd = unix_socket_at(path, &un);
	cr_assert_eq(connect(fd, (struct sockaddr *)&un, sizeof(un)), -1, "stream connect");
	EQ_INT(errno, EPROTOTYPE, "stream connect to a seqpacket listener");
	close(fd);

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0, "socket");
	cr_assert_eq(connect(fd, (struct sockaddr *)&un, sizeof(un)), 0, "seqpacket connect");
	for (i = 0; i < 3; i++) {
		pat32_fill(msg[i], len[i], 0x1000u * (unsigned)(i + 1), 0);
		cr_assert_eq(send(fd, msg[i], len[i], 0), (ssize_t)len[i], "send %d", i);
	}
	RC_OK(vsx_accept(l, &a), "accept");
	for (i = 0; i < 3; i++) {
		EQ_INT(vsx_recv(a, got, sizeof(got)), (long)len[i], "record whole");
		cr_assert(memcmp(got, msg[i], len[i]) == 0, "record %d bytes", i);
	}
	EQ_INT(vsx_send(a, msg[1], 3000), 3000, "reply record");
	cr_assert_eq(recv(fd, got, sizeof(got), 0), 3000, "reply arrives as one record");
	cr_assert(memcmp(got, msg[1], 3000) == 0, "reply bytes");
	close(fd);
	EQ_INT(vsx_close(a), 0, "close accepted");
	EQ_INT(vsx_close(l), 0, "close listener");
	cr_assert_eq(file_kind(path), 0, "file left behind");

	/* connecting stays stream only */
	{
		vsx_sock *c = NULL;
		int rc = vsx_connect(addr, &o, &c);

		EQ_INT(rc, -ESOCKTNOSUPPORT, "seqpacket connect over hybrid");
		cr_assert_null(c, "socket after a failure");
	}
}
