/*
 * Fuzz target: the vhost-user message handler (transports/virtio/
 * vhost_user.c), through its real socket. The harness is the front-end
 * (QEMU): it connects to the device's socket and sends what the input
 * says, with fds attached by SCM_RIGHTS (dups of one memfd standing for
 * guest RAM, fresh eventfds, pipes, /dev/null), runs the device's watch
 * callbacks (fuzz/common.c's synchronous loop) and reads its replies. The
 * device's kick handler pops every chain, reads and writes its buffers and
 * pushes it back, so a memory table and rings set up by the input reach
 * vq.c too.
 *
 * Input: a list of operations, each an opcode byte then its arguments:
 *   op % 8 in 0..3  a message: fds u8 (count = n % 10, kind = n >> 4 & 3:
 *                   memfd, eventfd, pipe, /dev/null), request u8 (255:
 *                   a u32 follows), flags u8, size u16, then min(size,
 *                   what is left) payload bytes (a short one stays
 *                   incomplete, as a stalled front-end's)
 *   4               guest RAM write: offset u32, length u8, bytes
 *   5               kick: signal every eventfd sent so far
 *   6               disconnect; a new front-end connects
 *   7               raw bytes: length u8, bytes (split messages)
 * The memfd is MEM_SIZE bytes; its guest physical and QEMU virtual
 * addresses are whatever SET_MEM_TABLE says.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vhost-user/iov.h"
#include "vhost-user/vhost_user.h"
#include "fuzz.h"
#include "util.h"

#define MEM_SIZE (256u * 1024)
#define MAX_EFD 32

static int memfd = -1;
static uint8_t *gmem;
static char path[128];

struct dev {
	struct vsxu_vu *vu;
	unsigned starts, stops, kicks;
	bool live, paused;
};

static int get_config(void *arg, uint32_t off, void *buf, uint32_t len)
{
	uint64_t cid = 3;

	if (off > sizeof(cid) || len > sizeof(cid) - off)
		return -EINVAL;
	memcpy(buf, (char *)&cid + off, len);
	return 0;
}

static void kick(void *arg, unsigned q)
{
	struct dev *d = arg;
	struct vsxu_vq *vq = vsxu_vu_queue(d->vu, q);
	struct vsxu_vq_elem *e;
	char buf[256];

	if (!d->live || !vq || !vsxu_vq_ready(vq))
		abort(); /* kick only comes while live, for a ready queue */
	e = malloc(sizeof(*e));
	if (!e)
		return;
	d->kicks++;
	for (unsigned i = 0; i < 64 && vsxu_vq_pop(vq, e) == 1; i++) {
		vsxu_iov_to_buf(e->iov, e->out_num, 0, buf, sizeof(buf));
		memset(buf, 0xa5, sizeof(buf));
		vsxu_iov_from_buf(e->iov + e->out_num, e->in_num, 0, buf, sizeof(buf));
		vsxu_vq_push(vq, e, e->in_len < sizeof(buf) ? e->in_len : sizeof(buf));
	}
	vsxu_vq_flush(vq);
	free(e);
}

static void start(void *arg, enum vsxu_vu_start how)
{
	struct dev *d = arg;

	if (d->live || (how == VSXU_VU_START_RESUMED && !d->paused))
		abort(); /* start twice without stop, or a resume of nothing */
	d->live = true;
	d->paused = false;
	d->starts++;
}

static void stop(void *arg, bool resumable)
{
	struct dev *d = arg;

	if (!d->live && !(d->paused && !resumable))
		abort(); /* a stop without a start (or a paused session's end) */
	d->live = false;
	d->paused = resumable;
	d->stops++;
}

static void logmsg(void *arg, const char *msg)
{
	if (!memchr(msg, '\0', 256))
		abort();
}

static const struct vsxu_vu_ops ops = {
	.features = 1ull << 1, /* VIRTIO_VSOCK_F_SEQPACKET */
	.nqueues = 3,
	.min_queues = 2,
	.get_config = get_config,
	.kick = kick,
	.start = start,
	.stop = stop,
	.log = logmsg,
};

static void setup(void)
{
	memfd = memfd_create("vsxfuzz-ram", MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, MEM_SIZE) < 0)
		abort();
	gmem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (gmem == MAP_FAILED)
		abort();
	snprintf(path, sizeof(path), "%s/vu.sock", fz_dir());
}

static int new_fd(unsigned kind, int *efd, unsigned *nefd)
{
	int p[2], fd;

	switch (kind) {
	case 0:
		return fcntl(memfd, F_DUPFD_CLOEXEC, 0);
	case 1:
		fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (fd >= 0 && *nefd < MAX_EFD) {
			efd[(*nefd)++] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		}
		return fd;
	case 2:
		if (pipe2(p, O_CLOEXEC) < 0)
			return -1;
		close(p[1]);
		return p[0];
	default:
		return open("/dev/null", O_RDWR | O_CLOEXEC);
	}
}

static int reconnect(int c)
{
	if (c >= 0)
		close(c);
	fl_run(8); /* the device sees EOF */
	c = fe_connect(path);
	fl_run(8); /* and accepts */
	return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fin f = { data, size };
	struct dev d = { 0 };
	int efd[MAX_EFD], c, fds[16];
	unsigned nefd = 0, steps = 0;
	uint8_t payload[512];

	if (memfd < 0)
		setup();
	memset(gmem, 0, MEM_SIZE);
	if (vsxu_vu_new(path, 0, VSX__GID_KEEP, &fl_loop, &ops, &d, &d.vu) < 0)
		abort();
	c = reconnect(-1);

	while (fin_left(&f) && steps++ < 512 && c >= 0) {
		uint8_t op = fin_u8(&f);

		switch (op % 8) {
		case 0:
		case 1:
		case 2:
		case 3: {
			uint8_t fc = fin_u8(&f);
			unsigned nfds = fc % 10, kind = (fc >> 4) & 3, n = 0;
			uint32_t req = fin_u8(&f), flags, sz;
			size_t plen;
			int r;

			if (req == 255)
				req = fin_u32(&f);
			flags = fin_u8(&f);
			sz = fin_u16(&f);
			plen = sz < f.n ? sz : f.n;
			if (plen > sizeof(payload))
				plen = sizeof(payload);
			fin_bytes(&f, payload, plen);
			while (n < nfds) {
				fds[n] = new_fd(kind, efd, &nefd);
				if (fds[n] < 0)
					break;
				n++;
			}
			r = fe_send_raw(c, req, flags, sz, payload, plen, fds, n);
			for (unsigned i = 0; i < n; i++)
				close(fds[i]);
			if (r == -EPIPE || r == -ECONNRESET)
				c = reconnect(c);
			fl_run(8);
			fe_drain(c);
			break;
		}
		case 4: {
			uint32_t off = fin_u32(&f) % MEM_SIZE;
			size_t len = fin_u8(&f);

			if (len > MEM_SIZE - off)
				len = MEM_SIZE - off;
			fin_bytes(&f, gmem + off, len);
			break;
		}
		case 5:
			for (unsigned i = 0; i < nefd; i++) {
				uint64_t one = 1;

				if (efd[i] >= 0 && write(efd[i], &one, sizeof(one)) < 0)
					continue;
			}
			fl_run(8);
			fe_drain(c);
			break;
		case 6:
			c = reconnect(c);
			break;
		default: {
			size_t len = fin_u8(&f);

			len = fin_bytes(&f, payload, len < sizeof(payload) ? len : sizeof(payload));
			if (len && send(c, payload, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
			    (errno == EPIPE || errno == ECONNRESET))
				c = reconnect(c);
			fl_run(8);
			fe_drain(c);
			break;
		}
		}
	}
	if (c >= 0)
		close(c);
	fl_run(8);
	if (d.live != (d.starts != d.stops))
		abort();
	if (vsxu_vu_connected(d.vu))
		abort(); /* the front-end's EOF was seen */
	vsxu_vu_free(d.vu);
	for (unsigned i = 0; i < nefd; i++)
		if (efd[i] >= 0)
			close(efd[i]);
	if (fl_watches() || fl_timers())
		abort(); /* the device left a watch or timer behind */
	return 0;
}
