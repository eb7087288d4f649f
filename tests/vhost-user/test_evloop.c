/*
 * The libevent adapter (transports/virtio/vhost-user/loop-event.c) as the
 * backend uses it: real socketpairs watched, interest changed on the fly,
 * watches and timers freed from inside their own callbacks, timers firing
 * in deadline order, vsxu_evloop_run's adaptive polling (its window read
 * back as it grows and shrinks), posts, and the room another thread may
 * borrow between callbacks.
 *
 * libevent runs in debug mode here (event_enable_debug_mode), so any
 * misuse of an event (re-assigning a pending event, freeing one twice,
 * adding one not set up) aborts the test.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <event2/event.h>

#include "vhost-user/loop-event.h"

static struct event_base *base;
static struct vsxu_evloop ev;
static struct vsxu_loop loop;        /* a copy of ev.loop */
static int sp[2] = { -1, -1 };      /* sp[0] watched, sp[1] the peer */
static int sq[2] = { -1, -1 };

static void setup(void)
{
	static bool debug_on;

	/* once per process, before any base (criterion forks per test) */
	if (!debug_on) {
		event_enable_debug_mode();
		debug_on = true;
	}
	base = event_base_new();
	cr_assert_not_null(base);
	vsxu_evloop_init(&ev, base);
	cr_assert_eq(ev.base, base);
	cr_assert_eq(ev.loop.ctx, &ev);
	cr_assert_eq(ev.poll_max_ns, 0);
	loop = ev.loop;
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sq), 0);
}

static void teardown(void)
{
	int i;

	for (i = 0; i < 2; i++) {
		close(sp[i]);
		close(sq[i]);
	}
	event_base_free(base);
}

TestSuite(evloop, .init = setup, .fini = teardown, .timeout = 20);

/* Run the loop until nothing happens any more (without blocking). */
static void spin(void)
{
	int i;

	for (i = 0; i < 8; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

struct rec {
	int calls;
	int last_fd;
	int last_events;
	int reads, writes;
	char data[64];
	size_t len;
	struct vsxu_watch *self;
	struct vsxu_watch *other;
	bool unwatch_self;
	bool unwatch_other;
};

static void on_event(int fd, int events, void *arg)
{
	struct rec *r = arg;
	ssize_t n;

	r->calls++;
	r->last_fd = fd;
	r->last_events = events;
	if (events & VSXU_EV_READ) {
		r->reads++;
		n = read(fd, r->data + r->len, sizeof(r->data) - r->len);
		if (n > 0)
			r->len += (size_t)n;
	}
	if (events & VSXU_EV_WRITE)
		r->writes++;
	if (r->unwatch_other && r->other) {
		loop.unwatch(r->other);
		r->other = NULL;
	}
	if (r->unwatch_self) {
		loop.unwatch(r->self);
		r->self = NULL;
	}
}

Test(evloop, read_on_a_socketpair)
{
	struct rec r = { 0 };
	struct vsxu_watch *w;

	w = loop.watch(loop.ctx, sp[0], VSXU_EV_READ, on_event, &r);
	cr_assert_not_null(w);
	spin();
	cr_assert_eq(r.calls, 0, "nothing to read yet");

	cr_assert_eq(write(sp[1], "hello", 5), 5);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_eq(r.calls, 1);
	cr_assert_eq(r.last_fd, sp[0]);
	cr_assert_eq(r.last_events, VSXU_EV_READ);
	cr_assert_eq(r.len, 5);
	cr_assert_eq(memcmp(r.data, "hello", 5), 0);

	/* persistent: a second message fires again */
	cr_assert_eq(write(sp[1], " world", 6), 6);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_eq(r.calls, 2);
	cr_assert_eq(r.len, 11);
	cr_assert_eq(memcmp(r.data, "hello world", 11), 0);

	loop.unwatch(w);
	cr_assert_eq(write(sp[1], "!", 1), 1);
	spin();
	cr_assert_eq(r.calls, 2, "no call after unwatch");
}

Test(evloop, idle_watch_and_watch_set)
{
	struct rec r = { 0 };
	struct vsxu_watch *w;
	int before;

	/* registered but idle: nothing fires */
	w = loop.watch(loop.ctx, sp[0], 0, on_event, &r);
	cr_assert_not_null(w);
	cr_assert_eq(write(sp[1], "abc", 3), 3);
	spin();
	cr_assert_eq(r.calls, 0);

	/* read interest: the same callback and argument fire */
	loop.watch_set(w, VSXU_EV_READ);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_eq(r.calls, 1);
	cr_assert_eq(r.last_events, VSXU_EV_READ);
	cr_assert_eq(memcmp(r.data, "abc", 3), 0);
	cr_assert_eq(r.writes, 0, "the socket is writable, but nobody asked");

	/* add write interest: writable fires at once, with the same callback */
	loop.watch_set(w, VSXU_EV_READ | VSXU_EV_WRITE);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_geq(r.writes, 1);
	cr_assert_eq(r.last_events, VSXU_EV_WRITE);
	cr_assert_eq(r.last_fd, sp[0]);

	/* both at once */
	cr_assert_eq(write(sp[1], "d", 1), 1);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_eq(r.last_events, VSXU_EV_READ | VSXU_EV_WRITE);
	cr_assert_eq(r.len, 4);

	/* drop write interest: no more write calls */
	loop.watch_set(w, VSXU_EV_READ);
	before = r.writes;
	spin();
	cr_assert_eq(r.writes, before);

	/* setting the same mask again changes nothing */
	loop.watch_set(w, VSXU_EV_READ);
	cr_assert_eq(write(sp[1], "e", 1), 1);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_eq(r.len, 5);
	cr_assert_eq(memcmp(r.data, "abcde", 5), 0);

	/* back to idle */
	loop.watch_set(w, 0);
	before = r.calls;
	cr_assert_eq(write(sp[1], "f", 1), 1);
	spin();
	cr_assert_eq(r.calls, before);
	loop.unwatch(w);
}

/* A callback that flips its own interest from inside the callback. */
struct flip {
	struct vsxu_watch *w;
	int writes;
};

static void on_flip(int fd, int events, void *arg)
{
	struct flip *f = arg;

	cr_assert_eq(events, VSXU_EV_WRITE);
	f->writes++;
	loop.watch_set(f->w, 0);        /* one write wake-up is enough */
}

Test(evloop, watch_set_inside_callback)
{
	struct flip f = { 0 };

	f.w = loop.watch(loop.ctx, sp[0], VSXU_EV_WRITE, on_flip, &f);
	cr_assert_not_null(f.w);
	spin();
	cr_assert_eq(f.writes, 1);
	loop.watch_set(f.w, VSXU_EV_WRITE);
	spin();
	cr_assert_eq(f.writes, 2);
	loop.unwatch(f.w);
}

Test(evloop, unwatch_self_inside_callback)
{
	struct rec r = { .unwatch_self = true };

	r.self = loop.watch(loop.ctx, sp[0], VSXU_EV_READ, on_event, &r);
	cr_assert_not_null(r.self);
	cr_assert_eq(write(sp[1], "xy", 2), 2);
	event_base_loop(base, EVLOOP_ONCE);
	cr_assert_eq(r.calls, 1);
	cr_assert_null(r.self);
	cr_assert_eq(write(sp[1], "z", 1), 1);
	spin();
	cr_assert_eq(r.calls, 1, "freed watch stays silent");
}

/*
 * Two watches ready in the same iteration; whichever runs first frees the
 * other, which must then not run (it was already on libevent's active
 * queue).
 */
Test(evloop, unwatch_other_active_watch)
{
	struct rec a = { .unwatch_other = true }, b = { .unwatch_other = true };
	struct vsxu_watch *wa, *wb;

	wa = loop.watch(loop.ctx, sp[0], VSXU_EV_READ, on_event, &a);
	wb = loop.watch(loop.ctx, sq[0], VSXU_EV_READ, on_event, &b);
	cr_assert(wa && wb);
	a.other = wb;
	b.other = wa;
	cr_assert_eq(write(sp[1], "1", 1), 1);
	cr_assert_eq(write(sq[1], "2", 1), 1);
	event_base_loop(base, EVLOOP_ONCE);
	spin();
	cr_assert_eq(a.calls + b.calls, 1, "a=%d b=%d", a.calls, b.calls);
	if (a.calls)
		loop.unwatch(wa);
	else
		loop.unwatch(wb);
}

Test(evloop, bad_watch_arguments)
{
	struct rec r = { 0 };

	cr_assert_null(loop.watch(loop.ctx, -1, VSXU_EV_READ, on_event, &r));
	cr_assert_null(loop.watch(loop.ctx, sp[0], VSXU_EV_READ, NULL, &r));
	cr_assert_null(loop.watch(loop.ctx, sp[0], 0x10, on_event, &r));
	/* NULL is accepted by the release calls */
	loop.unwatch(NULL);
	loop.timer_free(NULL);
}

/* ---- timers ---- */

struct order {
	int seq[8];
	int n;
};

struct tmr {
	struct vsxu_timer *t;
	struct order *o;
	int id;
	int fired;
	int rearm;              /* re-arm this many more times from the callback */
	bool free_self;
};

static void on_timer(void *arg)
{
	struct tmr *t = arg;

	t->fired++;
	if (t->o->n < 8)
		t->o->seq[t->o->n++] = t->id;
	if (t->rearm > 0) {
		t->rearm--;
		loop.timer_arm(t->t, 1);
	} else if (t->free_self) {
		loop.timer_free(t->t);
		t->t = NULL;
	}
}

static void make_timer(struct tmr *t, struct order *o, int id)
{
	t->o = o;
	t->id = id;
	t->t = loop.timer(loop.ctx, on_timer, t);
	cr_assert_not_null(t->t);
}

Test(evloop, timers_fire_in_deadline_order)
{
	struct order o = { 0 };
	struct tmr t[3] = { 0 };
	int i;

	make_timer(&t[0], &o, 30);
	make_timer(&t[1], &o, 10);
	make_timer(&t[2], &o, 20);
	/* created disarmed: nothing pending, dispatch returns at once */
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(o.n, 0);

	loop.timer_arm(t[0].t, 60);
	loop.timer_arm(t[1].t, 20);
	loop.timer_arm(t[2].t, 40);
	/* returns when no event is pending any more */
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(o.n, 3);
	cr_assert_eq(o.seq[0], 10);
	cr_assert_eq(o.seq[1], 20);
	cr_assert_eq(o.seq[2], 30);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(t[i].fired, 1, "one-shot");
		loop.timer_free(t[i].t);
	}
}

Test(evloop, rearm_replaces_and_disarm)
{
	struct order o = { 0 };
	struct tmr a = { 0 }, b = { 0 }, c = { 0 };

	make_timer(&a, &o, 1);
	make_timer(&b, &o, 2);
	make_timer(&c, &o, 3);
	loop.timer_arm(a.t, 10);
	loop.timer_arm(b.t, 40);
	loop.timer_arm(a.t, 80);        /* replaces the 10 ms deadline */
	loop.timer_arm(c.t, 5);
	loop.timer_disarm(c.t);         /* never fires */
	loop.timer_disarm(c.t);         /* disarming twice is harmless */
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(o.n, 2);
	cr_assert_eq(o.seq[0], 2);
	cr_assert_eq(o.seq[1], 1);
	cr_assert_eq(a.fired, 1, "re-arming does not add a second shot");
	cr_assert_eq(c.fired, 0);
	loop.timer_free(a.t);
	loop.timer_free(b.t);
	loop.timer_free(c.t);
}

Test(evloop, rearm_and_free_inside_callback)
{
	struct order o = { 0 };
	struct tmr t = { .rearm = 2, .free_self = true };

	make_timer(&t, &o, 7);
	loop.timer_arm(t.t, 0);
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(t.fired, 3);
	cr_assert_null(t.t, "freed from its own callback");
}

/* A pending timer freed while armed: it must never call back. */
Test(evloop, free_armed_timer)
{
	struct order o = { 0 };
	struct tmr t = { 0 };

	make_timer(&t, &o, 1);
	loop.timer_arm(t.t, 1);
	loop.timer_free(t.t);
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(t.fired, 0);
}

/* A timer and a watch together: the data path's usual mix. */
struct mix {
	struct vsxu_timer *t;
	struct vsxu_watch *w;
	int peer;
	int got;
};

static void mix_timer(void *arg)
{
	struct mix *m = arg;

	cr_assert_eq(write(m->peer, "t", 1), 1);
}

static void mix_watch(int fd, int events, void *arg)
{
	struct mix *m = arg;
	char c;

	cr_assert_eq(read(fd, &c, 1), 1);
	cr_assert_eq(c, 't');
	m->got++;
	loop.unwatch(m->w);
	m->w = NULL;
	loop.timer_free(m->t);
	m->t = NULL;
}

/* loop.h's queue: work runs once the callback that queued it returns,
 * before any other callback; queued twice, it runs once; work queued by
 * work runs in the same turn. */
struct wk {
	struct order o;
	struct vsxu_work w[3];       /* 0 and 1: queued by the timer; 2: by 0 */
	struct tmr t[2];
};
static struct wk *wk_now;

static void wk_run(void *arg)
{
	struct vsxu_work *w = arg;
	int id = 100 + (int)(w - wk_now->w);

	if (wk_now->o.n < 8)
		wk_now->o.seq[wk_now->o.n++] = id;
	if (id == 100)
		loop.queue(loop.ctx, &wk_now->w[2]);
}

static void wk_timer(void *arg)
{
	struct tmr *t = arg;

	on_timer(t);
	if (t->id == 1) {
		loop.queue(loop.ctx, &wk_now->w[0]);
		loop.queue(loop.ctx, &wk_now->w[1]);
		loop.queue(loop.ctx, &wk_now->w[0]);
		/* nothing runs inside the callback */
		cr_assert_eq(t->o->n, 1);
	}
}

Test(evloop, queued_work_runs_after_its_callback)
{
	static struct wk k;

	memset(&k, 0, sizeof(k));
	wk_now = &k;
	for (int i = 0; i < 3; i++)
		vsxu_work_init(&k.w[i], wk_run, &k.w[i]);
	for (int i = 0; i < 2; i++) {
		k.t[i] = (struct tmr){ .o = &k.o, .id = i + 1 };
		k.t[i].t = loop.timer(loop.ctx, wk_timer, &k.t[i]);
		cr_assert_not_null(k.t[i].t);
	}
	loop.timer_arm(k.t[0].t, 5);
	loop.timer_arm(k.t[1].t, 10);
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(k.o.n, 5, "ran %d", k.o.n);
	int want[] = { 1, 100, 101, 102, 2 };
	for (int i = 0; i < 5; i++)
		cr_assert_eq(k.o.seq[i], want[i], "step %d: %d", i, k.o.seq[i]);
	for (int i = 0; i < 3; i++)
		cr_assert(!k.w[i].queued);
	for (int i = 0; i < 2; i++)
		loop.timer_free(k.t[i].t);
}

Test(evloop, timer_wakes_a_watch)
{
	struct mix m = { .peer = sp[1] };

	m.t = loop.timer(loop.ctx, mix_timer, &m);
	m.w = loop.watch(loop.ctx, sp[0], VSXU_EV_READ, mix_watch, &m);
	cr_assert(m.t && m.w);
	loop.timer_arm(m.t, 5);
	cr_assert_eq(event_base_dispatch(base), 1);
	cr_assert_eq(m.got, 1);
	cr_assert_null(m.w);
	cr_assert_null(m.t);
}

/* ---- vsxu_evloop_run and polling ----
 *
 * A ping-pong inside one loop: a timer writes a byte into sp[1] (the data
 * arriving), the watch on sp[0] reads it (the data path) and arms the timer
 * again; after @rounds the watch breaks the loop. How the polling window
 * moves depends only on how long the gap is against the window and its
 * maximum, so the gaps are chosen far from either side.
 */
struct pp {
	struct vsxu_timer *t;
	struct vsxu_watch *w;
	unsigned gap_ms;        /* timer delay between a read and the next byte */
	int rounds, reads;
	unsigned max_window;    /* the largest ev.poll_ns seen */
	unsigned min_window;    /* the smallest after the first round */
	bool use_exit;          /* stop with loopexit rather than loopbreak */
};

static void pp_timer(void *arg)
{
	(void)arg;
	cr_assert_eq(write(sp[1], "x", 1), 1);
}

static void pp_read(int fd, int events, void *arg)
{
	struct pp *p = arg;
	char c;

	cr_assert_eq(events, VSXU_EV_READ);
	cr_assert_eq(read(fd, &c, 1), 1);
	cr_assert_eq(c, 'x');
	p->reads++;
	if (ev.poll_ns > p->max_window)
		p->max_window = ev.poll_ns;
	if (p->reads > 1 && ev.poll_ns < p->min_window)
		p->min_window = ev.poll_ns;
	if (p->reads == p->rounds) {
		if (p->use_exit)
			event_base_loopexit(base, NULL);
		else
			event_base_loopbreak(base);
		return;
	}
	loop.timer_arm(p->t, p->gap_ms);
}

static int pp_run(struct pp *p)
{
	int r;

	p->min_window = ~0u;
	p->t = loop.timer(loop.ctx, pp_timer, p);
	p->w = loop.watch(loop.ctx, sp[0], VSXU_EV_READ, pp_read, p);
	cr_assert(p->t && p->w);
	cr_assert_eq(write(sp[1], "x", 1), 1);
	r = vsxu_evloop_run(&ev);
	loop.unwatch(p->w);
	loop.timer_free(p->t);
	return r;
}

/* Runs of @p until a read came while the loop polled (at most 3): a
 * hit needs the timer to fire inside the window, and on a machine loaded
 * enough that each wake-up of a run came late, none does. Each run reads
 * all its rounds. Returns how many runs it took. */
static int pp_until_hit(struct pp *p)
{
	int i;

	for (i = 1; i <= 3; i++) {
		p->reads = 0;
		cr_assert_eq(pp_run(p), 0);
		cr_assert_eq(p->reads, p->rounds);
		if (ev.poll_hits)
			return i;
	}
	cr_assert_fail("no read in a polling window in 3 runs");
	return 0;
}

Test(evloop, run_without_polling)
{
	struct pp p = { .gap_ms = 1, .rounds = 5 };

	/* nothing pending: returns 1 at once, as event_base_dispatch does */
	cr_assert_eq(vsxu_evloop_run(&ev), 1);
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_eq(p.reads, 5);
	cr_assert_eq(ev.fired, 5);
	cr_assert_eq(ev.poll_ns, 0);
	cr_assert_eq(ev.poll_hits + ev.poll_misses, 0);
}

Test(evloop, poll_window_grows_to_cover_short_gaps)
{
	/* 1 ms gaps against the 10 ms maximum. Each window that runs out
	 * before the byte is a miss, and the sleep that follows ends within
	 * the maximum (a 1 ms libevent timer wakes a sleeping loop after
	 * 1-5 ms on a busy virtual machine), so the window doubles: 4 µs,
	 * 8 µs, ... until the timer fires while the loop is still polling; from
	 * then on the bytes are hits and the window stays. */
	struct pp p = { .gap_ms = 1, .rounds = 40 };

	vsxu_evloop_set_poll(&ev, 10000);
	cr_assert_eq(ev.poll_max_ns, 10000000u);
	pp_until_hit(&p);
	cr_assert_geq(ev.poll_ns, 1024000u, "window %u ns", ev.poll_ns);
	cr_assert_leq(ev.poll_ns, 10000000u);
	cr_assert_geq(ev.poll_misses, 8);   /* 4 µs .. 512 µs ran out */
}

Test(evloop, poll_window_shrinks_on_long_gaps)
{
	/* Grow first, then gaps of 40 ms, far beyond the maximum: each one
	 * halves the window, and below 4 µs it closes. */
	struct pp p = { .gap_ms = 1, .rounds = 30 };
	struct pp q = { .gap_ms = 40, .rounds = 15 };

	vsxu_evloop_set_poll(&ev, 10000);
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_geq(p.max_window, 1024000u, "window %u ns", p.max_window);
	cr_assert_eq(pp_run(&q), 0);
	cr_assert_eq(q.reads, 15);
	cr_assert_eq(ev.poll_ns, 0, "window %u ns", ev.poll_ns);
	cr_assert_lt(q.min_window, p.max_window);
}

Test(evloop, poll_maximum_is_bounded_and_can_be_turned_off)
{
	/* Bytes back to back (a 0 ms timer): a wake-up from a sleep comes
	 * well within the 100 µs maximum unless this thread is preempted just
	 * then, so over 200 rounds the window opens, and it never exceeds the
	 * maximum. (With 1 ms gaps only the first wake-up could open it, and
	 * on a loaded CI machine that one came late.) */
	struct pp p = { .gap_ms = 0, .rounds = 200 };

	vsxu_evloop_set_poll(&ev, VSXU_EVLOOP_POLL_MAX_US + 1);
	cr_assert_eq(ev.poll_max_ns, VSXU_EVLOOP_POLL_MAX_US * 1000u);
	vsxu_evloop_set_poll(&ev, 100);
	cr_assert_eq(ev.poll_max_ns, 100000u);
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_eq(p.reads, 200);
	cr_assert_gt(p.max_window, 0);
	cr_assert_leq(p.max_window, 100000u, "window %u ns", p.max_window);
	cr_assert_leq(ev.poll_ns, 100000u);
	cr_assert_gt(ev.poll_hits, 0);
	/* a lower maximum applies to the open window at once */
	vsxu_evloop_set_poll(&ev, 3);
	cr_assert_leq(ev.poll_ns, 3000u);
	vsxu_evloop_set_poll(&ev, 0);
	cr_assert_eq(ev.poll_ns, 0);
	p = (struct pp){ .gap_ms = 1, .rounds = 3 };
	ev.poll_hits = ev.poll_misses = 0;
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_eq(p.reads, 3);
	cr_assert_eq(ev.poll_hits + ev.poll_misses, 0);
}

Test(evloop, run_returns_on_loopexit_while_polling)
{
	/* the last reads come while a window is open (as in the test above):
	 * loopexit from there ends vsxu_evloop_run, once */
	struct pp p = { .gap_ms = 1, .rounds = 30, .use_exit = true };
	int runs;

	vsxu_evloop_set_poll(&ev, 10000);
	runs = pp_until_hit(&p);
	/* each run's loopexit ended its vsxu_evloop_run once: 30 each */
	cr_assert_eq(ev.fired, 30 * runs);
}

/* A poller (vsxu_evloop_set_poller): asked on every polling round, told
 * once before each sleep, and what it finds counts as activity. Here it
 * plays the guest's ring: a byte "posted" by the timer without a kick. */
struct fake_ring {
	int posted, taken;      /* bytes put on the ring / taken by the poller */
	int polls, sleeps;      /* calls with sleeping false / true */
	bool kicks_off;         /* between a polling call and a sleeping one */
	int rounds;
	struct vsxu_timer *t;
};

static bool ring_poll(void *arg, bool sleeping)
{
	struct fake_ring *f = arg;
	bool found = f->taken < f->posted;

	if (sleeping)
		f->sleeps++;
	else
		f->polls++;
	f->kicks_off = !sleeping;
	if (!found)
		return false;
	f->taken = f->posted;
	if (f->taken == f->rounds)
		event_base_loopbreak(base);
	else
		loop.timer_arm(f->t, 1);
	return true;
}

static void ring_post(void *arg)
{
	struct fake_ring *f = arg;

	f->posted++;
	/* with the kicks off, nothing else tells the loop */
	if (!f->kicks_off)
		cr_assert_eq(write(sp[1], "k", 1), 1);
}

static void ring_kick(int fd, int events, void *arg)
{
	char c;

	(void)events;
	(void)arg;
	cr_assert_eq(read(fd, &c, 1), 1);
}

Test(evloop, poller_takes_work_while_polling_and_hears_of_every_sleep)
{
	struct fake_ring f = { .rounds = 30 };
	struct vsxu_watch *w;

	f.t = loop.timer(loop.ctx, ring_post, &f);
	w = loop.watch(loop.ctx, sp[0], VSXU_EV_READ, ring_kick, &f);
	cr_assert(f.t && w);
	vsxu_evloop_set_poll(&ev, 10000);
	vsxu_evloop_set_poller(&ev, ring_poll, &f);
	cr_assert_eq(write(sp[1], "k", 1), 1);  /* the first kick */
	f.posted = 1;
	cr_assert_eq(vsxu_evloop_run(&ev), 0);
	cr_assert_eq(f.taken, 30);
	cr_assert_gt(f.polls, 0);
	/* bytes posted while the loop polled came without a kick: only the
	 * poller found them, and they count as the loop's hits */
	cr_assert_geq(ev.poll_hits, 1);
	/* removing the poller while its kicks are off tells it to sleep */
	vsxu_evloop_set_poller(&ev, NULL, NULL);
	cr_assert_not(f.kicks_off);
	cr_assert_geq(f.sleeps, 1);
	loop.unwatch(w);
	loop.timer_free(f.t);
}

static bool never(void *arg, bool sleeping)
{
	int *calls = arg;

	calls[sleeping]++;
	return false;
}

Test(evloop, poller_is_told_before_the_loop_sleeps)
{
	/* 1 ms gaps: windows open (polling calls), run out, and before each
	 * sleep that follows the poller hears of it, once per sleep */
	struct pp p = { .gap_ms = 1, .rounds = 20 };
	int calls[2] = { 0, 0 };

	vsxu_evloop_set_poll(&ev, 10000);
	vsxu_evloop_set_poller(&ev, never, calls);
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_gt(calls[0], 0);
	cr_assert_eq((uint64_t)calls[1], ev.poll_misses, "%d sleeping calls, %llu misses",
		     calls[1], (unsigned long long)ev.poll_misses);
	/* polling off: never asked at all */
	vsxu_evloop_set_poller(&ev, never, calls);
	vsxu_evloop_set_poll(&ev, 0);
	calls[0] = calls[1] = 0;
	p = (struct pp){ .gap_ms = 1, .rounds = 3 };
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_eq(calls[0] + calls[1], 0);
}

/* ---- posting (vsxu_evloop_enable_post) ----
 *
 * A post is control traffic (vsxd: a world stop, a status request's
 * counters, a pair set up across threads), not the data path: a loop woken
 * only by posts leaves @fired and its polling as they were. Each post here
 * is made from the one before it, so each runs at a wake-up of its own.
 */
struct chain {
	int left, runs;
};

static void chain_run(void *arg)
{
	struct chain *ch = arg;

	ch->runs++;
	if (--ch->left > 0)
		cr_assert_eq(ev.loop.post(ev.loop.ctx, chain_run, ch), 0);
	else
		event_base_loopbreak(base);
}

Test(evloop, posts_are_not_activity)
{
	struct chain ch = { .left = 20 };
	struct pp p = { .gap_ms = 1, .rounds = 5 };

	cr_assert_null(ev.loop.post, "no post before vsxu_evloop_enable_post");
	cr_assert_eq(vsxu_evloop_enable_post(&ev), 0);
	cr_assert_not_null(ev.loop.post);
	vsxu_evloop_set_poll(&ev, 10000);
	cr_assert_eq(ev.loop.post(ev.loop.ctx, chain_run, &ch), 0);
	cr_assert_eq(vsxu_evloop_run(&ev), 0);
	cr_assert_eq(ch.runs, 20);
	cr_assert_eq(ev.fired, 0, "fired %llu", (unsigned long long)ev.fired);
	cr_assert_eq(ev.poll_ns, 0, "window %u ns", ev.poll_ns);
	cr_assert_eq(ev.poll_hits + ev.poll_misses, 0, "%llu hits, %llu misses",
		     (unsigned long long)ev.poll_hits, (unsigned long long)ev.poll_misses);
	/* the watches still count, with the mailbox there */
	cr_assert_eq(pp_run(&p), 0);
	cr_assert_eq(ev.fired, 5);
	cr_assert_gt(ev.poll_ns, 0);
	vsxu_evloop_fini(&ev);
	cr_assert_null(ev.loop.post);
}

/* ---- the room (loop.h's borrow and give_back, with post) ----
 *
 * The loop's thread holds its room around every callback it runs (a
 * watch's, a timer's, a posted one): another thread's borrow fails then,
 * and succeeds between callbacks; a callback that comes while the room
 * is lent waits until it is given back. */
static void *borrow_once(void *arg)
{
	bool *got = arg;

	*got = ev.loop.borrow(ev.loop.ctx);
	if (*got)
		ev.loop.give_back(ev.loop.ctx);
	return NULL;
}

/* Another thread's borrow, now: did it get the room? */
static bool borrowed_elsewhere(void)
{
	pthread_t t;
	bool got = true;

	cr_assert_eq(pthread_create(&t, NULL, borrow_once, &got), 0);
	pthread_join(t, NULL);
	return got;
}

struct room_seen {
	int in_watch, in_timer, in_post;   /* 1: borrowed elsewhere, 0: not */
};

static void room_watch(int fd, int events, void *arg)
{
	struct room_seen *s = arg;
	char c;

	(void)events;
	cr_assert_eq(read(fd, &c, 1), 1);
	s->in_watch = borrowed_elsewhere();
}

static void room_timer(void *arg)
{
	struct room_seen *s = arg;

	s->in_timer = borrowed_elsewhere();
}

static void room_post(void *arg)
{
	struct room_seen *s = arg;

	s->in_post = borrowed_elsewhere();
	event_base_loopbreak(base);
}

Test(evloop, the_room_is_held_in_every_callback_and_lent_between)
{
	struct room_seen s = { -1, -1, -1 };
	struct vsxu_watch *w;
	struct vsxu_timer *t;

	cr_assert_null(ev.loop.borrow, "no room before vsxu_evloop_enable_post");
	cr_assert_eq(vsxu_evloop_enable_post(&ev), 0);
	cr_assert(borrowed_elsewhere(), "the room was not lent while the loop was idle");
	w = ev.loop.watch(ev.loop.ctx, sp[0], VSXU_EV_READ, room_watch, &s);
	t = ev.loop.timer(ev.loop.ctx, room_timer, &s);
	cr_assert(w && t);
	cr_assert_eq(write(sp[1], "x", 1), 1);
	ev.loop.timer_arm(t, 1);
	usleep(5000);
	event_base_loop(base, EVLOOP_ONCE);
	event_base_loop(base, EVLOOP_NONBLOCK);
	cr_assert_eq(ev.loop.post(ev.loop.ctx, room_post, &s), 0);
	event_base_dispatch(base);
	cr_assert_eq(s.in_watch, 0, "lent during a watch's callback");
	cr_assert_eq(s.in_timer, 0, "lent during a timer's callback");
	cr_assert_eq(s.in_post, 0, "lent during a posted callback");
	cr_assert(borrowed_elsewhere(), "not lent again after the callbacks");
	ev.loop.unwatch(w);
	ev.loop.timer_free(t);
	vsxu_evloop_fini(&ev);
	cr_assert_null(ev.loop.borrow);
}

struct room_wait {
	uint64_t ran_ns;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void room_ran(void *arg)
{
	struct room_wait *rw = arg;

	rw->ran_ns = mono_ns();
	event_base_loopbreak(base);
}

static void *run_loop(void *arg)
{
	(void)arg;
	event_base_dispatch(base);
	return NULL;
}

Test(evloop, a_callback_waits_while_the_room_is_lent)
{
	struct room_wait rw = { 0 };
	uint64_t given;
	pthread_t th;

	cr_assert_eq(vsxu_evloop_enable_post(&ev), 0);
	cr_assert(ev.loop.borrow(ev.loop.ctx));
	cr_assert_eq(ev.loop.post(ev.loop.ctx, room_ran, &rw), 0);
	cr_assert_eq(pthread_create(&th, NULL, run_loop, NULL), 0);
	usleep(50 * 1000);
	given = mono_ns();
	cr_assert_eq(rw.ran_ns, 0, "the callback ran in a lent room");
	ev.loop.give_back(ev.loop.ctx);
	pthread_join(th, NULL);
	cr_assert_geq(rw.ran_ns, given, "the callback ran before the room came back");
	vsxu_evloop_fini(&ev);
}
