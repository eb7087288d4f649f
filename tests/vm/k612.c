/*
 * k612: behaviours of the newer guest virtio-vsock driver (Debian's 6.12),
 * each one run twice in the same guest with the same assertions: against
 * the guest kernel's own loopback transport (the peer is a child process in
 * the guest, vsock CID 1) and against vsxd (the peer is this program on the
 * host, through vsxd's hybrid socket). tests/vm/kernel612.test compares the
 * two verdicts of every case: a difference between vsxd and the kernel is
 * a test failure.
 *
 *   k612 guest loop|host CASE...|all   the guest side (lab guest only)
 *   k612 peer unix:PATH CASE...|all    the host side of "guest host"
 *
 * In "guest loop" the guest side forks the peer itself. The guest side
 * listens on vsock:any:PORT (6100 + case index for loop, 6120 + index for
 * host); the peer connects there (unix:PATH:PORT for vsxd, retried until
 * the guest listens: 4 tries a second). Cases:
 *
 *   split     the guest writes 64 KiB, 256 KiB and odd sizes (1, 4095,
 *             4097, 32769, 100003, 65537, 44 bytes) from an odd address in
 *             one write() each; the 6.12 driver puts a packet above 32 KiB
 *             in a nonlinear skb (header, linear part, pages: a chain of
 *             several descriptors). The peer checks every byte.
 *   outq      the guest writes 128 KiB (within the credit) in one send to
 *             a peer that reads nothing for 2 s, then reads slowly:
 *             SIOCOUTQ (bytes the driver has not seen consumed) must fall
 *             to 0 while the peer still reads nothing: the TX buffers come
 *             back at once, whatever the peer's pace.
 *   zerocopy  SO_ZEROCOPY, then 8 sends of 64 KiB with MSG_ZEROCOPY from
 *             an unaligned buffer, each sent once the peer took the one
 *             before (so each is one packet, one notification): every
 *             notification (ids 0..7) must come back on MSG_ERRQUEUE,
 *             SO_EE_ORIGIN_ZEROCOPY, no error; the peer checks every byte.
 *   flood     the peer writes 200000 bytes as messages of 1..64 bytes, one
 *             write() each, to a guest that reads nothing until the peer
 *             shut down; then the guest reads: every byte, then EOF, no
 *             reset (the driver's per-skb overhead check must not trip).
 *   flood_mid the same with messages of 129..512 bytes: above the size the
 *             guest appends to the last queued skb, so one skb per packet.
 *   rcvlowat  (A) SO_RCVLOWAT 64 KiB, the peer sends 16 KiB every 200 ms:
 *             poll() wakes only with >= 64 KiB available, twice for 128 KiB;
 *             (B) the peer fills the credit (256 KiB) and has 128 KiB more;
 *             the guest reads 100 KiB (not enough for a credit update of
 *             its own), then sets SO_RCVLOWAT 200 KiB, above the 156 KiB
 *             it holds: the kernel sends a CREDIT_UPDATE on that
 *             setsockopt, the sender must act on it and poll() wake with
 *             >= 200 KiB; without it the connection stalls (5 s: failure).
 *
 * Output: "k612[CASE/MODE]: ..." observation lines, and per case one line
 * "VSX-K612 CASE MODE ok|FAIL VERDICT" (the guest side) or "k612-peer
 * CASE ok|FAIL ..." (the host side). Exit status 0 when every case passed,
 * 1 otherwise, 2 usage, 77 outside the lab guest.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <time.h>
#include <linux/errqueue.h>
#include <linux/sockios.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "pattern.h"
#include "util.h"

#define KIB 1024u
#define SEED_G 612           /* what the guest side sends */
#define SEED_P 1612          /* what the peer sends */
#define NONE UINT64_MAX
#define CASE_SECS 120        /* a case that takes longer is killed (SIGALRM) */

#define OUTQ_LEN (128 * KIB)
#define OUTQ_IDLE_MS 2000    /* the peer reads nothing that long */
#define ZC_CHUNK (64 * KIB)
#define ZC_N 8
#define FLOOD_LEN 200000u
#define LOWAT_A (64 * KIB)
#define LOWAT_A_LEN (128 * KIB)
#define LOWAT_B_LEN (384 * KIB)
#define LOWAT_B_READ (100 * KIB)
#define LOWAT_B (200 * KIB)

static const size_t split_sizes[] = { 64 * KIB, 256 * KIB, 1, 4095, 4097, 32769,
				      100003, 65537, 44 };

/* What a case's guest side says: its verdict, the same both ways. */
struct verdict {
	bool ok;
	char text[256];
};

static const char *g_case, *g_mode;

static void obs(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void obs(const char *fmt, ...)
{
	va_list ap;

	printf("k612[%s/%s]: ", g_case, g_mode);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void say(struct verdict *v, bool ok, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(struct verdict *v, bool ok, const char *fmt, ...)
{
	va_list ap;

	if (!v->ok && v->text[0])
		return; /* the first failure is the verdict */
	v->ok = ok;
	va_start(ap, fmt);
	vsnprintf(v->text, sizeof(v->text), fmt, ap);
	va_end(ap);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read up to @n bytes, stopping at EOF: the count, or -errno. */
static ssize_t read_full(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Read @n bytes of stream @seed from offset *@off; returns the first wrong
 * offset (NONE: all right), *@got the count (short at EOF), -errno in *@err. */
static uint64_t recv_checked(int fd, uint64_t seed, uint64_t *off, size_t n, size_t *got,
			     int *err)
{
	static uint8_t buf[64 * KIB], want[64 * KIB];
	uint64_t bad = NONE;

	*got = 0;
	*err = 0;
	while (*got < n) {
		size_t k = n - *got < sizeof(buf) ? n - *got : sizeof(buf);
		ssize_t r = read(fd, buf, k);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*err = -errno;
			break;
		}
		if (r == 0)
			break;
		if (bad == NONE)
			bad = pattern_mismatch(seed, *off, buf, (size_t)r, want);
		*off += (uint64_t)r;
		*got += (size_t)r;
	}
	return bad;
}

/* ---- The peer's report to the guest side: bytes got, first bad offset ---- */

static int report_send(int fd, uint64_t got, uint64_t bad)
{
	uint64_t m[2] = { htole64(got), htole64(bad) };

	return write_all(fd, m, sizeof(m));
}

static void report_check(int fd, struct verdict *v, uint64_t want)
{
	uint64_t m[2];
	ssize_t r = read_full(fd, m, sizeof(m));

	if (r != (ssize_t)sizeof(m)) {
		say(v, false, "no report from the peer (%zd)", r);
		return;
	}
	m[0] = le64toh(m[0]);
	m[1] = le64toh(m[1]);
	if (m[1] != NONE)
		say(v, false, "the peer got a wrong byte at %" PRIu64, m[1]);
	else if (m[0] != want)
		say(v, false, "the peer got %" PRIu64 " of %" PRIu64 " bytes", m[0], want);
}

/* Receive everything up to EOF, checked, and report it. */
static int peer_sink(int fd)
{
	uint64_t off = 0, bad;
	size_t got;
	int err;

	bad = recv_checked(fd, SEED_G, &off, SIZE_MAX, &got, &err);
	if (report_send(fd, off, bad) < 0 || err || bad != NONE)
		return -1;
	return 0;
}

static int ack_wait(int fd)
{
	char b;

	return read_full(fd, &b, 1) == 1 ? 0 : -1;
}

static int ack_send(int fd)
{
	return write_all(fd, "k", 1);
}

/* ---- split --------------------------------------------------------------- */

static void split_guest(int fd, struct verdict *v)
{
	size_t i, total = 0, max = 0;
	uint8_t *buf;

	for (i = 0; i < sizeof(split_sizes) / sizeof(split_sizes[0]); i++)
		max = split_sizes[i] > max ? split_sizes[i] : max;
	buf = malloc(max + 1);
	if (!buf) {
		say(v, false, "out of memory");
		return;
	}
	for (i = 0; i < sizeof(split_sizes) / sizeof(split_sizes[0]); i++) {
		size_t n = split_sizes[i];
		int rc;

		pattern_fill(SEED_G, total, buf + 1, n);
		rc = write_all(fd, buf + 1, n);
		if (rc < 0) {
			say(v, false, "write of %zu bytes: %s", n, strerror(-rc));
			free(buf);
			return;
		}
		total += n;
	}
	free(buf);
	shutdown(fd, SHUT_WR);
	obs("wrote %zu bytes in %zu writes from an odd address", total,
	    sizeof(split_sizes) / sizeof(split_sizes[0]));
	say(v, true, "%zu bytes in writes of 64K, 256K, 1, 4095, 4097, 32769, 100003, "
	    "65537, 44: all intact at the peer", total);
	report_check(fd, v, total);
}

static int split_peer(int fd)
{
	return peer_sink(fd);
}

/* ---- outq ------------------------------------------------------------------- */

static int outq(int fd)
{
	int n = -1;

	return ioctl(fd, SIOCOUTQ, &n) < 0 ? -errno : n;
}

static void outq_guest(int fd, struct verdict *v)
{
	uint8_t *buf = malloc(OUTQ_LEN);
	int64_t t0, zero_ms = -1;
	int first, q, samples = 0, maxq = 0;
	ssize_t w;

	if (!buf) {
		say(v, false, "out of memory");
		return;
	}
	pattern_fill(SEED_G, 0, buf, OUTQ_LEN);
	first = outq(fd);
	if (first < 0) {
		say(v, false, "ioctl(SIOCOUTQ): %s", strerror(-first));
		free(buf);
		return;
	}
	t0 = vsx__now_ms();
	w = send(fd, buf, OUTQ_LEN, MSG_DONTWAIT);
	q = outq(fd);
	obs("SIOCOUTQ %d before; send(%u, MSG_DONTWAIT) = %zd; SIOCOUTQ %d right after",
	    first, OUTQ_LEN, w, q);
	if (w != (ssize_t)OUTQ_LEN) {
		say(v, false, "send within the credit took %zd of %u bytes", w, OUTQ_LEN);
		free(buf);
		return;
	}
	/* The peer reads nothing for OUTQ_IDLE_MS: the bytes must leave the
	 * driver before that. */
	while (vsx__now_ms() - t0 < OUTQ_IDLE_MS - 500) {
		q = outq(fd);
		samples++;
		if (q > maxq)
			maxq = q;
		if (q == 0) {
			zero_ms = vsx__now_ms() - t0;
			break;
		}
		sleep_ms(2);
	}
	obs("SIOCOUTQ: max %d over %d samples, 0 after %" PRId64 " ms (the peer read "
	    "nothing for %d ms)", maxq, samples, zero_ms, OUTQ_IDLE_MS);
	if (zero_ms < 0)
		say(v, false, "SIOCOUTQ still %d after %d ms while the peer was idle", q,
		    OUTQ_IDLE_MS - 500);
	else
		say(v, true, "send took all %u bytes; SIOCOUTQ fell to 0 while the peer "
		    "read nothing; 0 after the peer read it all", OUTQ_LEN);
	shutdown(fd, SHUT_WR);
	report_check(fd, v, OUTQ_LEN);
	q = outq(fd);
	obs("SIOCOUTQ %d after the peer read everything", q);
	if (q != 0)
		say(v, false, "SIOCOUTQ %d after the peer read everything", q);
	free(buf);
}

static int outq_peer(int fd)
{
	static uint8_t buf[8 * KIB], want[8 * KIB];
	uint64_t off = 0, bad = NONE;
	ssize_t r;

	sleep_ms(OUTQ_IDLE_MS);
	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		if (bad == NONE)
			bad = pattern_mismatch(SEED_G, off, buf, (size_t)r, want);
		off += (uint64_t)r;
		sleep_ms(10);    /* slow: 8 KiB per 10 ms */
	}
	return report_send(fd, off, bad) < 0 || r < 0 || bad != NONE ? -1 : 0;
}

/* ---- zerocopy ------------------------------------------------------------- */

/* Take the notifications queued on @fd: *@next is the id expected next,
 * *@copied counts those the kernel copied; -1 on a bad one (said in @v). */
static int zc_reap(int fd, struct verdict *v, unsigned *next, unsigned *copied)
{
	char ctl[CMSG_SPACE(sizeof(struct sock_extended_err)) + 64];

	for (;;) {
		struct msghdr mh = { .msg_control = ctl, .msg_controllen = sizeof(ctl) };
		struct sock_extended_err *ee;
		struct cmsghdr *cm;

		if (recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return errno == EAGAIN ? 0 : (say(v, false, "MSG_ERRQUEUE: %s",
							 strerror(errno)), -1);
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level != SOL_VSOCK || cm->cmsg_type != VSOCK_RECVERR) {
				say(v, false, "MSG_ERRQUEUE: cmsg level %d type %d, not "
				    "SOL_VSOCK/VSOCK_RECVERR", cm->cmsg_level, cm->cmsg_type);
				return -1;
			}
			ee = (struct sock_extended_err *)CMSG_DATA(cm);
			if (ee->ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee->ee_errno) {
				say(v, false, "MSG_ERRQUEUE: origin %u errno %u", ee->ee_origin,
				    ee->ee_errno);
				return -1;
			}
			if (ee->ee_info != *next || ee->ee_data < ee->ee_info) {
				say(v, false, "completion ids %u..%u, expected %u next",
				    ee->ee_info, ee->ee_data, *next);
				return -1;
			}
			obs("completion ids %u..%u%s", ee->ee_info, ee->ee_data,
			    ee->ee_code & SO_EE_CODE_ZEROCOPY_COPIED ? " (copied)" : "");
			if (ee->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
				*copied += ee->ee_data - ee->ee_info + 1;
			*next = ee->ee_data + 1;
		}
	}
}

static void zerocopy_guest(int fd, struct verdict *v)
{
	size_t map = ZC_N * ZC_CHUNK + 4096;
	unsigned i, next = 0, copied = 0;
	int one = 1, rc = 0;
	int64_t dl;
	uint8_t *m, *p;

	if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) < 0) {
		say(v, false, "setsockopt(SO_ZEROCOPY): %s", strerror(errno));
		return;
	}
	m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		say(v, false, "mmap: %s", strerror(errno));
		return;
	}
	p = m + 100; /* not page-aligned: the pages split the payload unevenly */
	pattern_fill(SEED_G, 0, p, ZC_N * ZC_CHUNK);
	for (i = 0; i < ZC_N && rc == 0; i++) {
		ssize_t w = send(fd, p + (size_t)i * ZC_CHUNK, ZC_CHUNK, MSG_ZEROCOPY);

		if (w != (ssize_t)ZC_CHUNK) {
			say(v, false, "send %u (MSG_ZEROCOPY) = %zd: %s", i, w, strerror(errno));
			rc = -1;
			break;
		}
		if (ack_wait(fd) < 0) {
			say(v, false, "no ack from the peer after chunk %u", i);
			rc = -1;
			break;
		}
		rc = zc_reap(fd, v, &next, &copied);
	}
	dl = vsx__now_ms() + 10000;
	while (rc == 0 && next < ZC_N && vsx__now_ms() < dl) {
		vsx__wait_fd(fd, POLLERR, dl);
		rc = zc_reap(fd, v, &next, &copied);
	}
	obs("%u sends of %u bytes: %u notifications, %u of them copied", ZC_N, ZC_CHUNK,
	    next, copied);
	if (rc == 0) {
		if (next != ZC_N)
			say(v, false, "%u of %u zerocopy notifications in 10 s", next, ZC_N);
		else
			say(v, true, "SO_ZEROCOPY on; %u MSG_ZEROCOPY sends of 64 KiB: "
			    "notifications 0..%u, none with an error, %u copied; "
			    "all intact at the peer", ZC_N, ZC_N - 1, copied);
	}
	shutdown(fd, SHUT_WR);
	report_check(fd, v, (uint64_t)ZC_N * ZC_CHUNK);
	munmap(m, map);
}

static int zerocopy_peer(int fd)
{
	uint64_t off = 0, bad = NONE, b;
	unsigned i;
	size_t got;
	int err;

	for (i = 0; i < ZC_N; i++) {
		b = recv_checked(fd, SEED_G, &off, ZC_CHUNK, &got, &err);
		if (bad == NONE)
			bad = b;
		if (got != ZC_CHUNK || ack_send(fd) < 0)
			break;
	}
	/* then EOF: nothing more may come */
	b = recv_checked(fd, SEED_G, &off, SIZE_MAX, &got, &err);
	if (bad == NONE)
		bad = b;
	if (report_send(fd, off, bad) < 0 || err)
		return -1;
	return bad == NONE && i == ZC_N ? 0 : -1;
}

/* ---- flood ------------------------------------------------------------------ */

static void flood_check(int fd, struct verdict *v, unsigned lo, unsigned hi)
{
	uint64_t off = 0, bad;
	size_t got;
	char x;
	int ev, err;

	/* Read nothing until the peer is done: its SHUTDOWN comes after its
	 * last byte. */
	ev = vsx__wait_fd(fd, POLLRDHUP, vsx__now_ms() + 60000);
	obs("poll(POLLRDHUP) = %#x before reading anything", ev);
	if (ev <= 0 || !(ev & POLLRDHUP)) {
		say(v, false, "the peer's shutdown did not arrive (poll %d)", ev);
		return;
	}
	bad = recv_checked(fd, SEED_P, &off, FLOOD_LEN, &got, &err);
	obs("read %zu bytes (%s), first bad offset %" PRId64, got,
	    err ? strerror(-err) : "no error", bad == NONE ? (int64_t)-1 : (int64_t)bad);
	if (err)
		say(v, false, "read after %zu of %u bytes: %s", got, FLOOD_LEN, strerror(-err));
	else if (got != FLOOD_LEN)
		say(v, false, "%zu of %u bytes, then EOF", got, FLOOD_LEN);
	else if (bad != NONE)
		say(v, false, "wrong byte at %" PRIu64, bad);
	else if (read(fd, &x, 1) != 0)
		say(v, false, "no EOF after the %u bytes", FLOOD_LEN);
	else
		say(v, true, "%u bytes in messages of %u..%u bytes to a guest not "
		    "reading: all intact, then EOF, no reset", FLOOD_LEN, lo, hi);
	ack_send(fd);
}

static int flood_send(int fd, unsigned lo, unsigned hi)
{
	uint8_t msg[1024];
	uint64_t off = 0;
	unsigned n, count = 0;

	while (off < FLOOD_LEN) {
		n = lo + count % (hi - lo + 1);
		if (n > FLOOD_LEN - off)
			n = (unsigned)(FLOOD_LEN - off);
		pattern_fill(SEED_P, off, msg, n);
		if (write_all(fd, msg, n) < 0)
			return -1;
		off += n;
		count++;
	}
	shutdown(fd, SHUT_WR);
	printf("k612-peer flood: %u writes of %u..%u bytes, %" PRIu64 " bytes\n", count, lo,
	       hi, off);
	return ack_wait(fd);
}

static void flood_guest(int fd, struct verdict *v)
{
	flood_check(fd, v, 1, 64);
}

static int flood_peer(int fd)
{
	return flood_send(fd, 1, 64);
}

static void flood_mid_guest(int fd, struct verdict *v)
{
	flood_check(fd, v, 129, 512);
}

static int flood_mid_peer(int fd)
{
	return flood_send(fd, 129, 512);
}

/* ---- rcvlowat ----------------------------------------------------------------- */

static int set_lowat(int fd, int v)
{
	return setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) < 0 ? -errno : 0;
}

/* Bytes ready to read (MSG_PEEK), or -errno. */
static ssize_t avail(int fd)
{
	static uint8_t peek[LOWAT_B_LEN];
	ssize_t r = recv(fd, peek, sizeof(peek), MSG_PEEK | MSG_DONTWAIT);

	return r < 0 ? (errno == EAGAIN ? 0 : -errno) : r;
}

static void rcvlowat_guest(int fd, struct verdict *v)
{
	uint64_t off = 0, bad = NONE, b;
	unsigned wakes = 0;
	ssize_t a, min_a = -1;
	size_t got;
	int ev, err, rc;

	/* A: wake-ups only at the mark. */
	if ((rc = set_lowat(fd, LOWAT_A)) < 0) {
		say(v, false, "setsockopt(SO_RCVLOWAT): %s", strerror(-rc));
		return;
	}
	while (off < LOWAT_A_LEN) {
		ev = vsx__wait_fd(fd, POLLIN, vsx__now_ms() + 10000);
		a = avail(fd);
		if (ev <= 0 || a < 0) {
			say(v, false, "A: poll %d, available %zd after %" PRIu64 " bytes", ev, a,
			    off);
			return;
		}
		wakes++;
		if (min_a < 0 || a < min_a)
			min_a = a;
		b = recv_checked(fd, SEED_P, &off, LOWAT_A, &got, &err);
		if (bad == NONE)
			bad = b;
		if (got != LOWAT_A) {
			say(v, false, "A: read %zu of %u", got, LOWAT_A);
			return;
		}
	}
	obs("A: SO_RCVLOWAT %u, 16 KiB every 200 ms: %u wake-ups, at least %zd bytes "
	    "available at each", LOWAT_A, wakes, min_a);
	if (min_a < (ssize_t)LOWAT_A)
		say(v, false, "A: poll woke with %zd bytes available, below SO_RCVLOWAT %u",
		    min_a, LOWAT_A);
	else if (wakes != LOWAT_A_LEN / LOWAT_A)
		say(v, false, "A: %u wake-ups for %u bytes", wakes, LOWAT_A_LEN);
	ack_send(fd);

	/* B: wait until the sender used the whole credit (256 KiB queued). */
	set_lowat(fd, 256 * KIB);
	ev = vsx__wait_fd(fd, POLLIN, vsx__now_ms() + 10000);
	/* (a receive with SO_RCVLOWAT at the buffer size is -ENOMEM: the
	 * kernel refuses a target it could never reach) */
	set_lowat(fd, 1);
	a = avail(fd);
	obs("B: %zd bytes queued (poll %#x): the sender is out of credit", a, ev);
	if (a != 256 * KIB) {
		say(v, false, "B: the sender filled %zd bytes of the 256 KiB credit", a);
		return;
	}
	b = recv_checked(fd, SEED_P, &off, LOWAT_B_READ, &got, &err);
	if (bad == NONE)
		bad = b;
	a = avail(fd);
	if ((rc = set_lowat(fd, LOWAT_B)) < 0) {
		say(v, false, "setsockopt(SO_RCVLOWAT %u): %s", LOWAT_B, strerror(-rc));
		return;
	}
	if (a != 256 * KIB - LOWAT_B_READ) {
		say(v, false, "B: %zd bytes queued after reading %u of 256 KiB", a,
		    LOWAT_B_READ);
		return;
	}
	ev = vsx__wait_fd(fd, POLLIN, vsx__now_ms() + 5000);
	obs("B: read %zu, %zd left queued; SO_RCVLOWAT %u: poll %#x, %zd available", got, a,
	    LOWAT_B, ev, avail(fd));
	if (ev <= 0) {
		say(v, false, "B: SO_RCVLOWAT %u above the %zd bytes queued: no wake-up in "
		    "5 s (the sender stalled: no credit update acted on)", LOWAT_B, a);
		return;
	}
	if (avail(fd) < (ssize_t)LOWAT_B)
		say(v, false, "B: woke with %zd available, below %u", avail(fd), LOWAT_B);
	set_lowat(fd, 1);
	b = recv_checked(fd, SEED_P, &off, LOWAT_A_LEN + LOWAT_B_LEN - off, &got, &err);
	if (bad == NONE)
		bad = b;
	if (off != LOWAT_A_LEN + LOWAT_B_LEN)
		say(v, false, "%" PRIu64 " of %u bytes", off, LOWAT_A_LEN + LOWAT_B_LEN);
	else if (bad != NONE)
		say(v, false, "wrong byte at %" PRIu64, bad);
	else
		say(v, true, "A: woke only with >= 64 KiB (twice for 128 KiB); B: "
		    "the sender filled the 256 KiB credit; SO_RCVLOWAT 200 KiB above "
		    "the 156 KiB queued woke with >= 200 KiB (credit update on "
		    "setsockopt); all bytes intact");
	ack_send(fd);
}

static int rcvlowat_peer(int fd)
{
	static uint8_t buf[LOWAT_B_LEN];
	unsigned i;

	for (i = 0; i < LOWAT_A_LEN / (16 * KIB); i++) {
		pattern_fill(SEED_P, i * 16 * KIB, buf, 16 * KIB);
		if (write_all(fd, buf, 16 * KIB) < 0)
			return -1;
		sleep_ms(200);
	}
	if (ack_wait(fd) < 0)
		return -1;
	pattern_fill(SEED_P, LOWAT_A_LEN, buf, LOWAT_B_LEN);
	if (write_all(fd, buf, LOWAT_B_LEN) < 0)
		return -1;
	return ack_wait(fd);
}

/* ---- The cases, both sides -------------------------------------------------- */

static const struct kcase {
	const char *name;
	void (*guest)(int fd, struct verdict *v);
	int (*peer)(int fd);
} cases[] = {
	{ "split", split_guest, split_peer },
	{ "outq", outq_guest, outq_peer },
	{ "zerocopy", zerocopy_guest, zerocopy_peer },
	{ "flood", flood_guest, flood_peer },
	{ "flood_mid", flood_mid_guest, flood_mid_peer },
	{ "rcvlowat", rcvlowat_guest, rcvlowat_peer },
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* Connect to @base:@port through libvsx, retrying while nobody listens;
 * the fd, blocking, in *@fd. */
static int peer_connect(const char *base, unsigned port, vsx_sock **s, int *fd)
{
	char addr[512];
	int64_t dl = vsx__now_ms() + 600000; /* the guest boots, runs loopback first */
	int rc;

	snprintf(addr, sizeof(addr), "%s:%u", base, port);
	do {
		rc = vsx_connect(addr, NULL, s);
		if (rc == 0) {
			*fd = vsx_fd(*s);
			return vsx__set_nonblock(*fd, false);
		}
		sleep_ms(250);
	} while (vsx__now_ms() < dl);
	fprintf(stderr, "k612: vsx_connect(%s): %s\n", addr, strerror(-rc));
	return rc;
}

static int peer_run(const char *base, unsigned port, const struct kcase *k)
{
	vsx_sock *s;
	int fd, rc;

	rc = peer_connect(base, port, &s, &fd);
	if (rc == 0) {
		alarm(CASE_SECS);
		rc = k->peer(fd);
		vsx_close(s);
	}
	alarm(0);
	printf("k612-peer %s %s\n", k->name, rc == 0 ? "ok" : "FAIL");
	fflush(stdout);
	return rc == 0 ? 0 : 1;
}

static int guest_listen(unsigned port)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY,
				 .svm_port = port };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0) {
		fprintf(stderr, "k612: listen on vsock port %u: %s\n", port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int guest_case(bool loop, const struct kcase *k, unsigned idx)
{
	unsigned port = (loop ? 6100 : 6120) + idx;
	struct verdict v = { .ok = true };
	int lfd, fd, st = 0;
	pid_t pid = -1;

	g_case = k->name;
	alarm(CASE_SECS);
	lfd = guest_listen(port);
	if (lfd < 0)
		return 1;
	if (loop) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			close(lfd);
			_exit(peer_run("vsock:1", port, k));
		}
	}
	if (vsx__wait_fd(lfd, POLLIN, vsx__now_ms() + 300000) <= 0 ||
	    (fd = accept(lfd, NULL, NULL)) < 0) {
		say(&v, false, "no connection on port %u", port);
		fd = -1;
	} else {
		k->guest(fd, &v);
		close(fd);
	}
	close(lfd);
	if (pid > 0 && (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)))
		say(&v, false, "the loopback peer failed (wait status %#x)", st);
	alarm(0);
	printf("VSX-K612 %s %s %s %s\n", k->name, g_mode, v.ok ? "ok" : "FAIL", v.text);
	fflush(stdout);
	return v.ok ? 0 : 1;
}

static int usage(void)
{
	fprintf(stderr, "usage: k612 guest loop|host CASE...|all\n"
		"       k612 peer unix:PATH CASE...|all\n");
	return 2;
}

int main(int argc, char **argv)
{
	bool guest, loop = false;
	unsigned i, ran = 0;
	int a, fail = 0;

	if (argc < 4)
		return usage();
	guest = strcmp(argv[1], "guest") == 0;
	if (!guest && strcmp(argv[1], "peer") != 0)
		return usage();
	if (guest) {
		loop = strcmp(argv[2], "loop") == 0;
		if (!loop && strcmp(argv[2], "host") != 0)
			return usage();
		g_mode = loop ? "loopback" : "vsxd";
	} else if (strncmp(argv[2], "unix:", 5) != 0) {
		fprintf(stderr, "k612: peer: %s: a unix:PATH address (vsxd's hybrid "
			"socket)\n", argv[2]);
		return 2;
	}
	if (guest && !getenv("VSX_LAB_GUEST")) {
		fprintf(stderr, "k612: opens AF_VSOCK sockets; the guest side runs only "
			"inside the lab guest (its /init sets VSX_LAB_GUEST)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	for (a = 3; a < argc; a++) {
		bool all = strcmp(argv[a], "all") == 0, found = false;

		for (i = 0; i < N_CASES; i++) {
			if (!all && strcmp(argv[a], cases[i].name) != 0)
				continue;
			found = true;
			ran++;
			if (guest)
				fail |= guest_case(loop, &cases[i], i);
			else
				fail |= peer_run(argv[2], 6120 + i, &cases[i]);
		}
		if (!found) {
			fprintf(stderr, "k612: no case %s\n", argv[a]);
			return 2;
		}
	}
	return fail || !ran ? 1 : 0;
}
