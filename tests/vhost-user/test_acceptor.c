/*
 * The listener that survives running out of descriptors
 * (transports/virtio/vhost-user/acceptor.h): the back-off and its
 * rate-limited log read back step by step with a clock the test gives,
 * the errors sorted, and a real listener on the libevent adapter in a
 * process out of descriptors (RLIMIT_NOFILE lowered in criterion's
 * child): its loop wakes a bounded number of times, it logs one line,
 * and it serves the waiting connection once a descriptor is free.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <event2/event.h>

#include "vhost-user/acceptor.h"
#include "vhost-user/loop-event.h"

/* ---- The policy ---- */

Test(backoff, doubles_from_10_ms_to_a_1_s_cap_and_resets_on_success)
{
	static const unsigned want[] = { 10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000 };
	struct vsxu_backoff b = { 0 };
	unsigned i, more;
	bool say;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_assert_eq(vsxu_backoff_fail(&b, 0, &say, &more), want[i], "failure %u", i + 1);
	cr_assert_eq(vsxu_backoff_ok(&b, &say), 10);
	cr_assert(say);
	cr_assert_eq(vsxu_backoff_fail(&b, 0, &say, &more), 10);
	cr_assert_eq(vsxu_backoff_ok(&b, &say), 1);
	cr_assert_eq(vsxu_backoff_ok(&b, &say), 0);
	cr_assert_not(say);
}

Test(backoff, says_one_line_per_interval_with_the_count_of_the_rest)
{
	struct vsxu_backoff b = { 0 };
	unsigned more, i;
	int64_t t = 0;    /* 0 is a time like any other */
	bool say;

	vsxu_backoff_fail(&b, t, &say, &more);
	cr_assert(say);
	cr_assert_eq(more, 0);
	for (i = 0; i < 9; i++) {
		t += 1000;
		vsxu_backoff_fail(&b, t, &say, &more);
		cr_assert_not(say, "failure at %lld ms", (long long)t);
	}
	t = VSXU_BACKOFF_LOG_MS - 1;
	vsxu_backoff_fail(&b, t, &say, &more);
	cr_assert_not(say);
	t = VSXU_BACKOFF_LOG_MS;
	vsxu_backoff_fail(&b, t, &say, &more);
	cr_assert(say);
	cr_assert_eq(more, 10);
	/* the run ends: that is said, since this run said something */
	vsxu_backoff_ok(&b, &say);
	cr_assert(say);
	/* a new run within the interval: counted, not said, nor its end */
	vsxu_backoff_fail(&b, t + 500, &say, &more);
	cr_assert_not(say);
	vsxu_backoff_ok(&b, &say);
	cr_assert_not(say);
	vsxu_backoff_fail(&b, t + VSXU_BACKOFF_LOG_MS, &say, &more);
	cr_assert(say);
	cr_assert_eq(more, 1);
}

Test(backoff, errors_sorted)
{
	static const int none[] = { EAGAIN, EWOULDBLOCK };
	static const int skip[] = { EINTR, ECONNABORTED, EPROTO, ENETDOWN, EHOSTUNREACH };
	static const int back[] = { EMFILE, ENFILE, ENOBUFS, ENOMEM, EBADF, EINVAL };
	size_t i;

	for (i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		cr_assert_eq(vsxu_acceptor_err_kind(none[i]), VSXU_ACCEPTOR_NONE, "%s", strerror(none[i]));
	for (i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		cr_assert_eq(vsxu_acceptor_err_kind(skip[i]), VSXU_ACCEPTOR_SKIP, "%s", strerror(skip[i]));
	for (i = 0; i < sizeof(back) / sizeof(back[0]); i++)
		cr_assert_eq(vsxu_acceptor_err_kind(back[i]), VSXU_ACCEPTOR_BACKOFF, "%s",
			     strerror(back[i]));
}

/* ---- On a loop, out of descriptors ---- */

static char lines[16][512];
static int prios[16];
static unsigned nlines;

static void log_line(void *arg, int prio, const char *msg)
{
	(void)arg;
	if (nlines < 16) {
		prios[nlines] = prio;
		snprintf(lines[nlines], sizeof(lines[0]), "%s", msg);
	}
	nlines++;
}

static int got = -1;            /* the fd accepted */
static unsigned accepted;

static void on_conn(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
	(void)arg;
	(void)sa;
	(void)len;
	got = fd;
	accepted++;
	event_base_loopbreak(arg);
}

/* Run @base for @ms (or until a connection comes). */
static void run_for(struct event_base *base, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

Test(acceptor, out_of_descriptors_backs_off_logs_once_and_serves_later)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	struct event_base *base;
	struct vsxu_evloop ev;
	struct vsxu_acceptor *a;
	struct vsxu_acceptor_conf c = {
		.name = "the test's listener",
		.cb = on_conn,
		.log = log_line,
	};
	int lfd, cfd, fill[64], nfill = 0, fd;
	uint64_t fired;
	char buf[8];

	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
	base = event_base_new();
	cr_assert_not_null(base);
	vsxu_evloop_init(&ev, base);
	/* an abstract address: nothing to clean up */
	snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "vsx-acceptor-%d", (int)getpid());
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	cr_assert_geq(lfd, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&un, sizeof(un)), 0);
	cr_assert_eq(listen(lfd, 8), 0);
	cfd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(connect(cfd, (struct sockaddr *)&un, sizeof(un)), 0);
	c.loop = &ev.loop;
	c.fd = lfd;
	c.arg = base;
	cr_assert_eq(vsxu_acceptor_new(&c, &a), 0);

	/* every descriptor taken: the waiting connection cannot be accepted */
	while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		fill[nfill++] = fd;
	cr_assert_eq(errno, EMFILE);
	run_for(base, 1500);
	fired = ev.fired;
	cr_assert_eq(accepted, 0);
	/* 10+20+...+640 ms, then 1 s: 8 tries, not thousands */
	cr_assert_leq(fired, 12, "the listener woke the loop %llu times in 1.5 s",
		      (unsigned long long)fired);
	cr_assert_geq(fired, 2);
	cr_assert_eq(nlines, 1, "%u lines, the first: %s", nlines, lines[0]);
	cr_assert_eq(prios[0], LOG_WARNING);
	cr_assert_str_eq(lines[0], "accept on the test's listener: Too many open files; "
			 "paused 10 ms (0 more since last said)");

	/* one descriptor free: the connection is served, and that is said */
	close(fill[--nfill]);
	run_for(base, 5000);
	cr_assert_eq(accepted, 1);
	cr_assert_eq(nlines, 2);
	cr_assert_eq(prios[1], LOG_INFO);
	cr_assert(strstr(lines[1], "accept on the test's listener: accepting again after "),
		  "%s", lines[1]);
	cr_assert_eq(write(cfd, "ping", 4), 4);
	cr_assert_eq(read(got, buf, sizeof(buf)), 4);
	cr_assert_eq(memcmp(buf, "ping", 4), 0);

	vsxu_acceptor_free(a);
	while (nfill)
		close(fill[--nfill]);
	close(got);
	close(cfd);
	close(lfd);
	event_base_free(base);
}

Test(acceptor, held_listener_is_not_watched_until_released)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	struct event_base *base = event_base_new();
	struct vsxu_evloop ev;
	struct vsxu_acceptor *a;
	struct vsxu_acceptor_conf c = { .name = "held", .cb = on_conn, .log = log_line };
	int lfd, cfd;

	cr_assert_not_null(base);
	vsxu_evloop_init(&ev, base);
	snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "vsx-acceptor-h%d", (int)getpid());
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&un, sizeof(un)), 0);
	cr_assert_eq(listen(lfd, 8), 0);
	c.loop = &ev.loop;
	c.fd = lfd;
	c.arg = base;
	cr_assert_eq(vsxu_acceptor_new(&c, &a), 0);
	vsxu_acceptor_hold(a, true);
	cfd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(connect(cfd, (struct sockaddr *)&un, sizeof(un)), 0);
	run_for(base, 200);
	cr_assert_eq(accepted, 0);
	cr_assert_eq(ev.fired, 0);
	/* an accept that failed elsewhere backs off as our own would */
	vsxu_acceptor_result(a, -EMFILE);
	vsxu_acceptor_hold(a, false);
	cr_assert_eq(nlines, 1);
	cr_assert(strstr(lines[0], "accept on held: Too many open files; paused 10 ms"), "%s",
		  lines[0]);
	run_for(base, 5000);
	cr_assert_eq(accepted, 1);
	cr_assert_eq(nlines, 2, "the end of the back-off said");
	vsxu_acceptor_free(a);
	close(got);
	close(cfd);
	close(lfd);
	event_base_free(base);
}
