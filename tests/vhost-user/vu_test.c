/*
 * The harness of the vhost-user server's tests: vu_test.h.
 */
#include "vu_test.h"

/* ---- The echo device, living on the loop thread ---- */



struct tdev *T;
static 
int dev_get_config(void *dev, uint32_t off, void *buf, uint32_t len)
{
	uint64_t cid = htole64(TEST_CID);

	if (off > sizeof(cid) || len > sizeof(cid) - off)
		return -EINVAL;
	memcpy(buf, (char *)&cid + off, len);
	return 0;
}
static 
void q_append(struct pkt ***tail, struct pkt *p)
{
	p->next = NULL;
	**tail = p;
	*tail = &p->next;
}

void free_list(struct pkt **head, struct pkt ***tail)
{
	while (*head) {
		struct pkt *p = *head;

		*head = p->next;
		free(p);
	}
	*tail = head;
}
static 
void drain_out(struct tdev *t)
{
	struct vsxu_vq *vq = vsxu_vu_queue(t->vu, VSOCK_VQ_RX);
	struct vsxu_vq_elem e;
	int r;

	while (t->out) {
		struct pkt *p = t->out;

		r = vsxu_vq_pop(vq, &e);
		if (r < 0)
			t->pop_err = r;
		if (r <= 0)
			break;
		cr_assert_geq(e.in_len, p->len);
		vsxu_iov_from_buf(e.iov + e.out_num, e.in_num, 0, p->data, p->len);
		vsxu_vq_push(vq, &e, (uint32_t)p->len);
		t->out = p->next;
		if (!t->out)
			t->out_tail = &t->out;
		free(p);
	}
	vsxu_vq_flush(vq);
}
static 
void handle_tx(struct tdev *t)
{
	struct vsxu_vq *vq = vsxu_vu_queue(t->vu, VSOCK_VQ_TX);
	struct vsxu_vq_elem e;
	int r;

	while ((r = vsxu_vq_pop(vq, &e)) > 0) {
		struct pkt *p = malloc(sizeof(*p) + e.out_len);

		cr_assert(p);
		p->len = vsxu_iov_to_buf(e.iov, e.out_num, 0, p->data, e.out_len);
		t->tx_pkts++;
		if (p->len == HDR + 4) {
			uint32_t seq;

			memcpy(&seq, p->data + HDR, 4);
			if (seq != t->next_seq)
				t->seq_bad = true;
			t->next_seq = seq + 1;
		}
		vsxu_vq_push(vq, &e, 0);
		if (t->echo) {
			struct virtio_vsock_hdr h;

			memcpy(&h, p->data, HDR);
			h.dst_cid = h.src_cid;
			h.src_cid = htole64(VSOCK_CID_HOST);
			memcpy(p->data, &h, HDR);
			q_append(&t->out_tail, p);
		} else if (t->record) {
			q_append(&t->log_tail, p);
		} else {
			free(p);
		}
	}
	if (r < 0)
		t->pop_err = r;
	vsxu_vq_flush(vq);
}
static 
void dev_kick(void *dev, unsigned q)
{
	struct tdev *t = dev;

	if (q == VSOCK_VQ_TX)
		handle_tx(t);
	drain_out(t);
}
static 
void dev_start(void *dev, enum vsxu_vu_start how)
{
	struct tdev *t = dev;

	t->starts++;
	t->last_how = how;
}
static 
void dev_stop(void *dev, bool resumable)
{
	struct tdev *t = dev;

	/* stops: sessions ended; resumable_stops: rings stopped (pauses) */
	if (resumable)
		t->resumable_stops++;
	else
		t->stops++;
	free_list(&t->out, &t->out_tail);
}
static 
void dev_log(void *dev, const char *msg)
{
	((struct tdev *)dev)->logs++;
	if (getenv("VSX_TEST_VERBOSE"))
		fprintf(stderr, "[vu] %s\n", msg);
}
static 
void do_new(void *arg)
{
	struct tdev *t = arg;

	cr_assert_eq(vsxu_vu_new(t->path, 0, VSX__GID_KEEP, t->loop, &t->ops, t, &t->vu), 0);
}
static 
void do_free(void *arg)
{
	struct tdev *t = arg;

	vsxu_vu_free(t->vu);
	t->vu = NULL;
	free_list(&t->out, &t->out_tail);
	free_list(&t->log, &t->log_tail);
}

struct tdev *tdev_new(unsigned min_queues)
{
	struct tdev *t = calloc(1, sizeof(*t));

	cr_assert(t);
	strcpy(t->dir, "/tmp/vsx-vu-XXXXXX");
	cr_assert(mkdtemp(t->dir));
	snprintf(t->path, sizeof(t->path), "%s/vhost.sock", t->dir);
	t->ops = (struct vsxu_vu_ops){
		.features = (1ull << VIRTIO_VSOCK_F_STREAM) | (1ull << VIRTIO_VSOCK_F_SEQPACKET),
		.nqueues = VSOCK_NUM_QUEUES,
		.min_queues = min_queues,
		.get_config = dev_get_config,
		.kick = dev_kick,
		.start = dev_start,
		.stop = dev_stop,
		.log = dev_log,
	};
	t->echo = true;
	t->out_tail = &t->out;
	t->log_tail = &t->log;
	cr_assert_eq(vsx_test_loop_new(&t->tl), 0);
	t->loop = vsx_test_loop_get(t->tl);
	vsx_test_loop_call(t->tl, do_new, t);
	return t;
}

void tdev_free(struct tdev *t)
{
	vsx_test_loop_call(t->tl, do_free, t);
	vsx_test_loop_free(t->tl);
	cr_assert_eq(access(t->path, F_OK), -1, "socket unlinked on free");
	rmdir(t->dir);
	free(t);
}

void setup(void)
{
	T = tdev_new(0);
}

void teardown(void)
{
	tdev_free(T);
}


struct snap S;
static 
void do_snap(void *arg)
{
	struct tdev *t = arg;

	S.starts = t->starts;
	S.stops = t->stops;
	S.resumable_stops = t->resumable_stops;
	S.last_how = t->last_how;
	S.logs = t->logs;
	S.pop_err = t->pop_err;
	S.tx_pkts = t->tx_pkts;
	S.seq_bad = t->seq_bad;
	S.connected = vsxu_vu_connected(t->vu);
	S.features = vsxu_vu_features(t->vu);
	for (unsigned i = 0; i < 3; i++) {
		struct vsxu_vq *vq = vsxu_vu_queue(t->vu, i);

		S.broken[i] = vq->broken;
		S.ready[i] = vsxu_vq_ready(vq);
		S.last_avail[i] = vq->last_avail;
	}
}

struct snap snap(void)
{
	vsx_test_loop_call(T->tl, do_snap, T);
	return S;
}

void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}
static 

void set_echo(void *arg)
{
	T->echo = *(bool *)arg;
	T->record = !T->echo;
}

void record_mode(void)
{
	bool no = false;

	vsx_test_loop_call(T->tl, set_echo, &no);
}

/* Queue a device-made packet for the guest and push what fits. */

void do_inject(void *arg)
{
	struct inject *in = arg;
	struct pkt *p = malloc(sizeof(*p) + in->len);

	cr_assert(p);
	p->len = in->len;
	memcpy(p->data, in->data, in->len);
	q_append(&T->out_tail, p);
	drain_out(T);
}
static 
struct pkt *take_log(void)
{
	struct pkt *p = T->log;

	if (p) {
		T->log = p->next;
		if (!T->log)
			T->log_tail = &T->log;
	}
	return p;
}

void do_take(void *arg)
{
	*(struct pkt **)arg = take_log();
}

struct virtio_vsock_hdr mkhdr(uint32_t port, uint16_t op, uint32_t len)
{
	return (struct virtio_vsock_hdr){
		.src_cid = htole64(TEST_CID),
		.dst_cid = htole64(VSOCK_CID_HOST),
		.src_port = htole32(port),
		.dst_port = htole32(1234),
		.len = htole32(len),
		.type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
		.op = htole16(op),
		.buf_alloc = htole32(262144),
		.fwd_cnt = htole32(port * 7),
	};
}

void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 8));
}

struct drv *open_drv(const struct drv_opts *o)
{
	struct drv *d = NULL;
	int r = drv_open(T->path, o, &d);

	cr_assert_eq(r, 0, "drv_open: %s", strerror(-r));
	return d;
}

/* One echo round trip of @len payload bytes. */
void echo_once(struct drv *d, unsigned seed, size_t len)
{
	static unsigned char out[4096], in[4096];
	struct virtio_vsock_hdr h = mkhdr(seed, VIRTIO_VSOCK_OP_RW, (uint32_t)len), r;
	int n;

	fill(out, len, seed);
	cr_assert_eq(drv_send(d, &h, out, len, TMO), 0);
	n = drv_recv(d, &r, in, sizeof(in), TMO);
	cr_assert_eq(n, (int)len, "recv %d", n);
	cr_assert_eq(le64toh(r.src_cid), VSOCK_CID_HOST);
	cr_assert_eq(le64toh(r.dst_cid), TEST_CID);
	cr_assert_eq(r.src_port, h.src_port);
	cr_assert_eq(r.fwd_cnt, h.fwd_cnt);
	cr_assert_eq(memcmp(in, out, len), 0);
}

/* The server still serves: a fresh front-end gets through. */
void assert_serves(void)
{
	struct drv *d = open_drv(NULL);

	echo_once(d, 77, 100);
	drv_close(d);
}

int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	strcpy(sa.sun_path, T->path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* EOF on @fd within the timeout (the server closed it). */
bool sees_eof(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, TMO) != 1)
		return false;
	return read(fd, &c, 1) == 0;
}

/* A pipe whose write end we hand over; EOF on the read end proves the
 * server closed its copy (no fd leaked). */

struct pipefd mkpipe(void)
{
	int p[2];

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	return (struct pipefd){ p[0], p[1] };
}

void assert_closed_by_server(struct pipefd *p)
{
	close(p->w);
	cr_assert(sees_eof(p->r), "the server kept a passed fd open");
	close(p->r);
}
