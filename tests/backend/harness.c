/*
 * Test harness for the vsock engine (see harness.h).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "util.h"

#define HDR_LEN sizeof(struct virtio_vsock_hdr)
#define PKT_MAX 65536


void fill_pattern(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

/* ---- Log capture (loop thread writes, test thread reads) ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void hx_log(void *arg, int prio, const char *msg)
{
	struct hx *h = arg;
	size_t n = strlen(msg);

	fprintf(stderr, "  [vsx %d] %s\n", prio, msg);
	pthread_mutex_lock(&log_lock);
	h->logbuf = realloc(h->logbuf, h->loglen + n + 2);
	memcpy(h->logbuf + h->loglen, msg, n);
	h->logbuf[h->loglen + n] = '\n';
	h->loglen += n + 1;
	h->logbuf[h->loglen] = '\0';
	if (prio <= VSXB_LOG_ERR)
		h->log_errs++;
	pthread_mutex_unlock(&log_lock);
}

unsigned hx_log_count(struct hx *h, const char *needle)
{
	unsigned n = 0;
	const char *p;

	pthread_mutex_lock(&log_lock);
	for (p = h->logbuf; p && (p = strstr(p, needle)); p++)
		n++;
	pthread_mutex_unlock(&log_lock);
	return n;
}

bool hx_log_has(struct hx *h, const char *needle)
{
	return hx_log_count(h, needle) > 0;
}

/* ---- World ---- */

struct call {
	struct hx *h;
	unsigned i;
	const struct vsxb_vm_config *cfg;
	int rc;
	uint64_t id;
	uint32_t bytes;
	bool reset;
	int vm;
	struct vsxb_conn_info *out;
	unsigned max, n;
	struct vsxb_engine_stats *st;
	size_t *mem;
	unsigned a, b, c;
};

static void c_router_new(void *arg)
{
	struct call *k = arg;

	k->rc = vsxb_router_new(k->h->loop, hx_log, k->h, &k->h->r);
}

void hx_init(struct hx *h)
{
	struct call k = { .h = h };

	memset(h, 0, sizeof(*h));
	snprintf(h->dir, sizeof(h->dir), "/tmp/vsxeng.XXXXXX");
	cr_assert_not_null(mkdtemp(h->dir));
	cr_assert_eq(vsx_test_loop_new(&h->tl), 0);
	h->loop = vsx_test_loop_get(h->tl);
	vsx_test_loop_call(h->tl, c_router_new, &k);
	cr_assert_eq(k.rc, 0);
}

static void c_vm_new(void *arg)
{
	struct call *k = arg;

	k->rc = vsxb_vm_new(k->h->r, k->cfg, &k->h->v[k->i].vm);
}

int hx_vm(struct hx *h, unsigned i, const struct vsxb_vm_config *tmpl)
{
	struct vsxb_vm_config cfg = { 0 };
	struct hx_vm *v = &h->v[i];
	struct call k = { .h = h, .i = i, .cfg = &cfg };

	if (tmpl)
		cfg = *tmpl;
	if (!cfg.guest_cid)
		cfg.guest_cid = 3 + i;
	char dir[sizeof(h->dir)];

	memcpy(dir, h->dir, sizeof(dir));
	snprintf(v->vhost, sizeof(v->vhost), "%s/vm%u.vhost", dir, i);
	snprintf(v->uds, sizeof(v->uds), "%s/vm%u.vsock", dir, i);
	if (!cfg.socket_path)
		cfg.socket_path = v->vhost;
	if (!cfg.uds_path)
		cfg.uds_path = v->uds;
	v->cid = cfg.guest_cid;
	vsx_test_loop_call(h->tl, c_vm_new, &k);
	return k.rc;
}

const struct vsxu_loop *hx_worker(struct hx *h, unsigned k)
{
	cr_assert_lt(k, HX_VMS);
	if (!h->wl[k]) {
		cr_assert_eq(vsx_test_loop_new(&h->wl[k]), 0);
		if (h->no_room)
			vsx_test_loop_no_room(h->wl[k]);
	}
	return vsx_test_loop_get(h->wl[k]);
}

void hx_open(struct hx *h, unsigned i, const struct drv_opts *o)
{
	struct hx_vm *v = &h->v[i];

	cr_assert_eq(drv_open(v->vhost, o, &v->g.d), 0, "drv_open vm%u", i);
	v->g.cid = drv_cid(v->g.d);
	cr_assert_eq(v->g.cid, v->cid);
	v->g.stash = NULL;
	v->g.stash_tail = &v->g.stash;
}

static void stash_free(struct guest *g)
{
	struct pkt *p, *n;

	for (p = g->stash; p; p = n) {
		n = p->next;
		free(p);
	}
	g->stash = NULL;
	g->stash_tail = &g->stash;
}

void g_forget(struct guest *g)
{
	stash_free(g);
}

void hx_close_drv(struct hx *h, unsigned i)
{
	struct hx_vm *v = &h->v[i];

	if (v->g.d)
		drv_close(v->g.d);
	v->g.d = NULL;
	stash_free(&v->g);
}

static void c_vm_free(void *arg)
{
	struct call *k = arg;

	vsxb_vm_free(k->h->v[k->i].vm);
	k->h->v[k->i].vm = NULL;
}

void hx_vm_free(struct hx *h, unsigned i)
{
	struct call k = { .h = h, .i = i };

	vsx_test_loop_call(h->tl, c_vm_free, &k);
}

static void c_fini(void *arg)
{
	struct call *k = arg;

	vsxb_router_free(k->h->r);
	k->h->r = NULL;
}

void hx_fini(struct hx *h)
{
	struct call k = { .h = h };
	char cmd[128];
	unsigned i;

	for (i = 0; i < HX_VMS; i++)
		hx_close_drv(h, i);
	/* as vsxd does: the VMs, then their loops, then the router */
	for (i = 0; i < HX_VMS; i++)
		if (h->v[i].vm)
			hx_vm_free(h, i);
	for (i = 0; i < HX_VMS; i++)
		vsx_test_loop_free(h->wl[i]);
	vsx_test_loop_call(h->tl, c_fini, &k);
	vsx_test_loop_free(h->tl);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", h->dir);
	free(h->logbuf);
}

static void c_timeouts(void *arg)
{
	struct call *k = arg;

	vsxb__router_set_timeouts(k->h->r, k->a, k->b, k->c);
}

void hx_timeouts(struct hx *h, unsigned handshake_ms, unsigned connect_ms,
		 unsigned linger_ms)
{
	struct call k = { .h = h, .a = handshake_ms, .b = connect_ms, .c = linger_ms };

	vsx_test_loop_call(h->tl, c_timeouts, &k);
}

static int collect(const struct vsxb_conn_info *ci, void *arg)
{
	struct call *k = arg;

	if (k->n < k->max)
		k->out[k->n] = *ci;
	k->n++;
	return 0;
}

static void c_conns(void *arg)
{
	struct call *k = arg;
	struct vsxb_vm *vm = k->vm >= 0 ? k->h->v[k->vm].vm : NULL;

	k->rc = vsxb_router_foreach_conn(k->h->r, vm, collect, k);
}

unsigned hx_conns(struct hx *h, int vm, struct vsxb_conn_info *out, unsigned max)
{
	struct call k = { .h = h, .vm = vm, .out = out, .max = max };

	vsx_test_loop_call(h->tl, c_conns, &k);
	cr_assert_eq(k.rc, 0);
	return k.n;
}

bool hx_conn(struct hx *h, uint64_t id, struct vsxb_conn_info *out)
{
	struct vsxb_conn_info all[64];
	unsigned n = hx_conns(h, -1, all, 64), i;

	for (i = 0; i < n && i < 64; i++) {
		if (all[i].id == id) {
			*out = all[i];
			return true;
		}
	}
	return false;
}

static void c_set_buffer(void *arg)
{
	struct call *k = arg;

	k->rc = vsxb_router_conn_set_buffer(k->h->r, k->id, k->bytes);
}

int hx_set_buffer(struct hx *h, uint64_t id, uint32_t bytes)
{
	struct call k = { .h = h, .id = id, .bytes = bytes };

	vsx_test_loop_call(h->tl, c_set_buffer, &k);
	return k.rc;
}

static void c_close(void *arg)
{
	struct call *k = arg;

	k->rc = vsxb_router_conn_close(k->h->r, k->id, k->reset);
}

int hx_close_conn(struct hx *h, uint64_t id, bool reset)
{
	struct call k = { .h = h, .id = id, .reset = reset };

	vsx_test_loop_call(h->tl, c_close, &k);
	return k.rc;
}

static void c_stats(void *arg)
{
	struct call *k = arg;

	vsxb__vm_stats(k->h->v[k->i].vm, k->st);
}

void hx_stats(struct hx *h, unsigned vm, struct vsxb_engine_stats *st)
{
	struct call k = { .h = h, .i = vm, .st = st };

	vsx_test_loop_call(h->tl, c_stats, &k);
}

static void c_mem(void *arg)
{
	struct call *k = arg;

	k->rc = vsxb__conn_mem(k->h->r, k->id, k->mem);
}

int hx_conn_mem(struct hx *h, uint64_t id, size_t *mem)
{
	struct call k = { .h = h, .id = id, .mem = mem };

	vsx_test_loop_call(h->tl, c_mem, &k);
	return k.rc;
}

static void c_default_buffer(void *arg)
{
	struct call *k = arg;

	k->rc = vsxb_vm_set_default_buffer(k->h->v[k->i].vm, k->bytes);
}

int hx_default_buffer(struct hx *h, unsigned vm, uint32_t bytes)
{
	struct call k = { .h = h, .i = vm, .bytes = bytes };

	vsx_test_loop_call(h->tl, c_default_buffer, &k);
	return k.rc;
}

static void c_nothing(void *arg)
{
	(void)arg;
}

void hx_sync(struct hx *h)
{
	vsx_test_loop_call(h->tl, c_nothing, NULL);
}

void hx_settle(struct hx *h)
{
	hx_sync(h);
	hx_sync(h);
}

static struct {
	sem_t started, release;
	pthread_t t;
	struct hx *h;
} pause_st;

static void c_block(void *arg)
{
	(void)arg;
	sem_post(&pause_st.started);
	sem_wait(&pause_st.release);
}

static void *pause_thread(void *arg)
{
	(void)arg;
	vsx_test_loop_call(pause_st.h->tl, c_block, NULL);
	return NULL;
}

void hx_pause(struct hx *h)
{
	sem_init(&pause_st.started, 0, 0);
	sem_init(&pause_st.release, 0, 0);
	pause_st.h = h;
	cr_assert_eq(pthread_create(&pause_st.t, NULL, pause_thread, NULL), 0);
	sem_wait(&pause_st.started);
}

void hx_unpause(struct hx *h)
{
	(void)h;
	sem_post(&pause_st.release);
	pthread_join(pause_st.t, NULL);
}

/* ---- Guest ---- */

void gc_init(struct gc *c, struct guest *g, uint16_t type, uint32_t lport,
	     uint64_t pcid, uint32_t pport)
{
	memset(c, 0, sizeof(*c));
	c->g = g;
	c->type = type;
	c->lport = lport;
	c->pcid = pcid;
	c->pport = pport;
	c->buf_alloc = 256 * 1024;
	c->auto_credit = true;
}

int g_send_hdr(struct guest *g, const struct virtio_vsock_hdr *h, const void *data,
	       uint32_t len)
{
	struct virtio_vsock_hdr w = *h;

	vsxb_hdr_swap(&w);
	return drv_send(g->d, &w, data, len, TMO);
}

int g_send(struct gc *c, uint16_t op, uint32_t flags, const void *data, uint32_t len)
{
	struct virtio_vsock_hdr h = {
		.src_cid = c->g->cid,
		.dst_cid = c->pcid,
		.src_port = c->lport,
		.dst_port = c->pport,
		.len = len,
		.type = c->type,
		.op = op,
		.flags = flags,
		.buf_alloc = c->buf_alloc,
		.fwd_cnt = c->fwd_cnt,
	};
	int rc;

	rc = g_send_hdr(c->g, &h, data, len);
	if (rc >= 0) {
		c->last_fwd_sent = c->fwd_cnt;
		if (op == VIRTIO_VSOCK_OP_RW)
			c->tx_cnt += len;
	}
	return rc;
}

static bool matches(const struct guest *g, const struct gc *c, const struct pkt *p)
{
	return !c || (p->h.src_cid == c->pcid && p->h.src_port == c->pport &&
		      p->h.dst_port == c->lport && p->h.dst_cid == g->cid);
}

static void absorb(struct gc *c, const struct pkt *p)
{
	if (!c)
		return;
	if (p->h.op == VIRTIO_VSOCK_OP_RST)
		return;
	c->peer_buf = p->h.buf_alloc;
	c->peer_fwd = p->h.fwd_cnt;
	if (p->h.op == VIRTIO_VSOCK_OP_CREDIT_UPDATE) {
		c->updates_seen++;
		c->g->credit_updates++;
	}
	if (p->h.op == VIRTIO_VSOCK_OP_CREDIT_REQUEST && c->auto_credit)
		cr_assert_geq(g_send(c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0), 0);
}

struct pkt *g_next(struct guest *g, struct gc *c, int timeout_ms)
{
	uint64_t deadline = vsx__now_ms() + (uint64_t)timeout_ms;
	struct pkt **pp, *p;
	struct virtio_vsock_hdr wh;
	int rc;

	for (pp = &g->stash; (p = *pp); pp = &p->next) {
		if (!matches(g, c, p))
			continue;
		*pp = p->next;
		if (g->stash_tail == &p->next)
			g->stash_tail = pp;
		p->next = NULL;
		absorb(c, p);
		return p;
	}
	for (;;) {
		int64_t left = (int64_t)(deadline - vsx__now_ms());

		if (left < 0)
			left = 0;
		p = malloc(sizeof(*p) + PKT_MAX);
		cr_assert_not_null(p);
		rc = drv_recv(g->d, &wh, p->data, PKT_MAX, (int)left);
		if (rc == -ETIMEDOUT) {
			free(p);
			return NULL;
		}
		cr_assert_geq(rc, 0, "drv_recv: %s", strerror(-rc));
		vsxb_hdr_swap(&wh);
		p->h = wh;
		p->len = (uint32_t)rc;
		p->next = NULL;
		cr_assert_eq(p->len, p->h.len, "payload %u, header says %u", p->len, p->h.len);
		if (matches(g, c, p)) {
			absorb(c, p);
			return p;
		}
		*g->stash_tail = p;
		g->stash_tail = &p->next;
	}
}

bool g_quiet(struct guest *g, struct gc *c, int ms)
{
	struct pkt *p = g_next(g, c, ms);

	if (!p)
		return true;
	fprintf(stderr, "unexpected packet: op %u len %u flags %u %llu:%u -> %u\n",
		p->h.op, p->h.len, p->h.flags, (unsigned long long)p->h.src_cid,
		p->h.src_port, p->h.dst_port);
	free(p);
	return false;
}

struct pkt *g_expect(struct gc *c, uint16_t op, int timeout_ms)
{
	struct pkt *p;

	for (;;) {
		p = g_next(c->g, c, timeout_ms);
		cr_assert_not_null(p, "no packet (op %u expected) for port %u", op, c->lport);
		if (p->h.op == VIRTIO_VSOCK_OP_CREDIT_UPDATE && op != p->h.op) {
			free(p);
			continue;
		}
		cr_assert_eq(p->h.op, op, "op %u, expected %u (port %u)", p->h.op, op,
			     c->lport);
		cr_assert_eq(p->h.type, c->type);
		return p;
	}
}

uint32_t g_credit(const struct gc *c)
{
	uint32_t inflight = c->tx_cnt - c->peer_fwd;

	return inflight >= c->peer_buf ? 0 : c->peer_buf - inflight;
}

int g_connect(struct gc *c)
{
	struct pkt *p;
	int op;

	cr_assert_geq(g_send(c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0), 0);
	p = g_next(c->g, c, TMO);
	cr_assert_not_null(p, "no answer to REQUEST");
	op = p->h.op == VIRTIO_VSOCK_OP_RESPONSE ? 0 : p->h.op;
	free(p);
	return op;
}

void g_consumed(struct gc *c, uint32_t n)
{
	c->fwd_cnt += n;
	if (c->auto_credit &&
	    c->buf_alloc - (c->fwd_cnt - c->last_fwd_sent) < VSOCK_MAX_PKT_PAYLOAD)
		cr_assert_geq(g_send(c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0), 0);
}

void g_write(struct gc *c, const void *data, size_t len, size_t pkt)
{
	const uint8_t *b = data;
	struct pkt *keep = NULL, **kt = &keep, *p;
	size_t off = 0, n;

	while (off < len) {
		uint32_t cr = g_credit(c);

		if (!cr) {
			p = g_next(c->g, c, TMO);
			cr_assert_not_null(p, "stalled: no credit after %zu of %zu bytes",
					   off, len);
			if (p->h.op == VIRTIO_VSOCK_OP_CREDIT_UPDATE) {
				free(p);
			} else {
				cr_assert_neq(p->h.op, VIRTIO_VSOCK_OP_RST, "RST while writing");
				*kt = p;
				kt = &p->next;
			}
			continue;
		}
		n = len - off;
		if (n > pkt)
			n = pkt;
		if (n > cr)
			n = cr;
		cr_assert_geq(g_send(c, VIRTIO_VSOCK_OP_RW, 0, b + off, (uint32_t)n), 0);
		off += n;
	}
	if (keep) {
		/* Back in front of the stash, in order. */
		*kt = c->g->stash;
		if (!c->g->stash)
			c->g->stash_tail = kt;
		c->g->stash = keep;
	}
}

void g_read(struct gc *c, void *buf, size_t len)
{
	uint8_t *b = buf;
	size_t got = 0, k;
	struct pkt *p, *rest;

	while (got < len) {
		p = g_expect(c, VIRTIO_VSOCK_OP_RW, TMO);
		k = p->len < len - got ? p->len : len - got;
		memcpy(b + got, p->data, k);
		got += k;
		g_consumed(c, (uint32_t)k);
		if (k < p->len) {
			/* The rest stays first in line for the next read. */
			rest = malloc(sizeof(*rest) + p->len - k);
			cr_assert_not_null(rest);
			rest->h = p->h;
			rest->len = rest->h.len = p->len - (uint32_t)k;
			memcpy(rest->data, p->data + k, rest->len);
			rest->next = c->g->stash;
			if (!c->g->stash)
				c->g->stash_tail = &rest->next;
			c->g->stash = rest;
		}
		free(p);
	}
}

/* ---- Host programs ---- */

static int unix_path(struct sockaddr_un *un, const char *path)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(un->sun_path))
		return -ENAMETOOLONG;
	strcpy(un->sun_path, path);
	return 0;
}

int h_listen(const char *path, int type)
{
	struct sockaddr_un un;
	int fd;

	cr_assert_eq(unix_path(&un, path), 0);
	unlink(path);
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0, "bind %s: %s", path,
		     strerror(errno));
	cr_assert_eq(listen(fd, 16), 0);
	return fd;
}

int h_accept(int lfd, int timeout_ms)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	if (poll(&p, 1, timeout_ms) != 1)
		return -ETIMEDOUT;
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

int h_dial(const char *uds, const char *line)
{
	struct sockaddr_un un;
	int fd;

	cr_assert_eq(unix_path(&un, uds), 0);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&un, sizeof(un)), 0, "connect %s: %s",
		     uds, strerror(errno));
	if (line && *line) {
		/* the server may already have closed on us (a limit): fine */
		ssize_t w = send(fd, line, strlen(line), MSG_NOSIGNAL);

		cr_assert(w == (ssize_t)strlen(line) || errno == EPIPE ||
			  errno == ECONNRESET, "send: %s", strerror(errno));
	}
	return fd;
}

bool h_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1;
}

int h_read_line(int fd, char *buf, size_t max, int timeout_ms)
{
	uint64_t deadline = vsx__now_ms() + (uint64_t)timeout_ms;
	size_t n = 0;
	ssize_t r;

	while (n + 1 < max) {
		int64_t left = (int64_t)(deadline - vsx__now_ms());

		if (left <= 0 || !h_readable(fd, (int)left))
			return -ETIMEDOUT;
		r = read(fd, buf + n, 1);
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		n++;
		if (buf[n - 1] == '\n')
			break;
	}
	buf[n] = '\0';
	return (int)n;
}

int h_read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = vsx__now_ms() + (uint64_t)timeout_ms;
	size_t n = 0;
	ssize_t r;

	while (n < len) {
		int64_t left = (int64_t)(deadline - vsx__now_ms());

		if (left <= 0 || !h_readable(fd, (int)left))
			return -ETIMEDOUT;
		r = read(fd, (char *)buf + n, len - n);
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EPIPE;
		n += (size_t)r;
	}
	return 0;
}

int h_write_full(int fd, const void *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = vsx__now_ms() + (uint64_t)timeout_ms;
	size_t n = 0;
	ssize_t w;

	while (n < len) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int64_t left = (int64_t)(deadline - vsx__now_ms());

		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			return -ETIMEDOUT;
		w = send(fd, (const char *)buf + n, len - n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EAGAIN)
			continue;
		if (w < 0)
			return -errno;
		n += (size_t)w;
	}
	return 0;
}

int h_eof(int fd, int timeout_ms)
{
	char b[256];
	ssize_t r;

	if (!h_readable(fd, timeout_ms))
		return -ETIMEDOUT;
	r = read(fd, b, sizeof(b));
	if (r == 0)
		return 0;
	if (r < 0)
		return -errno;
	return -EPROTO;
}

static void *hio_main(void *arg)
{
	struct hio *io = arg;

	io->rc = io->write ? h_write_full(io->fd, io->buf, io->len, 4 * TMO)
			   : h_read_full(io->fd, io->buf, io->len, 4 * TMO);
	return NULL;
}

void hio_start(struct hio *io, int fd, void *buf, size_t len, bool write)
{
	pthread_t t;

	io->fd = fd;
	io->buf = buf;
	io->len = len;
	io->write = write;
	io->rc = -EINPROGRESS;
	cr_assert_eq(pthread_create(&t, NULL, hio_main, io), 0);
	io->t = (unsigned long)t;
}

int hio_join(struct hio *io)
{
	pthread_join((pthread_t)io->t, NULL);
	return io->rc;
}

static void c_counter_base(void *arg)
{
	struct call *k = arg;

	vsxb__router_set_counter_base(k->h->r, k->bytes);
}

void hx_counter_base(struct hx *h, uint32_t base)
{
	struct call k = { .h = h, .bytes = base };

	vsx_test_loop_call(h->tl, c_counter_base, &k);
}
