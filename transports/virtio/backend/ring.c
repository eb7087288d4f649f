/*
 * The rings: a VM's three virtqueues as vsock packets. This room alone
 * calls vq.c (vhost-user/vq.h): it pops the guest's RX buffers and lays
 * packets into them (header, then payload), gives back the ones a packet
 * did not need, publishes used entries (RX once per round, TX once per
 * batch of chains), pops the guest's TX chains, and holds the TX batch's
 * storage. What goes into the buffers, and when, is the connection API's
 * (conn.c) and the device's (device.c), which call this file; it calls
 * nothing of the backend.
 */
#include <errno.h>

#include "ring.h"

/* vm->ring: seen by nobody but this file. */
struct vsxb_ring {
	struct vsxu_vq *rxq, *txq, *evq;          /* while live */
	bool rx_pushed;                           /* RX used entries await a flush */
	struct vsxu_vq_elem txe[VSXB_TX_BATCH];   /* the TX chains popped */
	struct vsxu_vq_elem rxe[VSXB_RX_BATCH];   /* the RX chains popped */
	struct iovec riov[VSXB_IOV_MAX];          /* their payload slices */
};

struct vsxb_ring *vsxb__ring_new(void)
{
	return calloc(1, sizeof(struct vsxb_ring));
}

void vsxb__ring_free(struct vsxb_ring *g)
{
	free(g);
}

void vsxb__ring_take(struct vsxb_vm *vm)
{
	struct vsxb_ring *g = vm->ring;

	g->rxq = vsxu_vu_queue(vm->vu, VSOCK_VQ_RX);
	g->txq = vsxu_vu_queue(vm->vu, VSOCK_VQ_TX);
	g->evq = vsxu_vu_queue(vm->vu, VSOCK_VQ_EVENT);
	g->rx_pushed = false;
}

void vsxb__ring_release(struct vsxb_vm *vm)
{
	struct vsxb_ring *g = vm->ring;

	g->rxq = g->txq = g->evq = NULL;
	g->rx_pushed = false;
}

/* ---- RX ---- */

static int rx_pop(struct vsxb_vm *vm, struct vsxu_vq_elem *e, const char **why)
{
	int rc;

	*why = NULL;
	if (!vm->live || vm->broken)
		return -EIO;
	if (vm->paused)
		return 0; /* as a guest that posts no buffers, until it resumes */
	rc = vsxu_vq_pop(vm->ring->rxq, e);
	if (rc < 0) {
		*why = "RX queue: invalid descriptor chain";
		return -EIO;
	}
	if (rc == 0)
		return 0;
	if (e->in_len <= VSXB_HDR_LEN) {
		vsxu_vq_push(vm->ring->rxq, e, 0);
		*why = "RX queue: buffer without room for a payload";
		return -EIO;
	}
	return 1;
}

int vsxb__ring_rx_pop(struct vsxb_vm *vm, const char **why)
{
	VSXB_OWNED(vm, "ring_rx_pop");
	return rx_pop(vm, &vm->ring->rxe[0], why);
}

int vsxb__ring_rx_gather(struct vsxb_vm *vm, size_t want, unsigned max, bool whole,
			 uint32_t *cap, struct iovec **iov, unsigned *niov, size_t *room,
			 const char **why)
{
	struct vsxb_ring *g = vm->ring;
	unsigned n = 0;
	int rc;

	VSXB_OWNED(vm, "ring_rx_gather");
	*iov = g->riov;
	*niov = 0;
	*room = 0;
	*why = NULL;
	if (max > VSXB_RX_BATCH)
		max = VSXB_RX_BATCH;
	while (*room < want && n < max && *niov < VSXB_IOV_MAX) {
		struct vsxu_vq_elem *e = &g->rxe[n];
		size_t k;
		unsigned s;

		rc = rx_pop(vm, e, why);
		if (rc < 0)
			return rc;
		if (rc == 0)
			break;
		k = e->in_len - VSXB_HDR_LEN;
		if (k > VSOCK_MAX_PKT_PAYLOAD)
			k = VSOCK_MAX_PKT_PAYLOAD; /* a packet's limit, whatever the buffer */
		if (k > want - *room)
			k = want - *room;
		s = vsxu_iov_slice(g->riov + *niov, VSXB_IOV_MAX - *niov,
				   e->iov + e->out_num, e->in_num, VSXB_HDR_LEN, k);
		cap[n] = (uint32_t)vsxu_iov_size(g->riov + *niov, s);
		*niov += s;
		*room += cap[n];
		n++;
	}
	if (whole && *room < want) {
		bool never = n == max || *niov >= VSXB_IOV_MAX || n >= g->rxq->num;

		if (n)
			vsxu_vq_unpop(g->rxq, n);
		return never ? -EMSGSIZE : -ENOBUFS;
	}
	return (int)n;
}

void vsxb__ring_rx_push(struct vsxb_vm *vm, unsigned i, struct virtio_vsock_hdr *h)
{
	struct vsxu_vq_elem *e = &vm->ring->rxe[i];
	uint32_t len = h->len;

	VSXB_OWNED(vm, "ring_rx_push");
	vsxb_hdr_swap(h);
	vsxu_iov_from_buf(e->iov + e->out_num, e->in_num, 0, h, VSXB_HDR_LEN);
	vsxu_vq_push(vm->ring->rxq, e, VSXB_HDR_LEN + len);
	vm->st.rx_pkts++;
	vm->ring->rx_pushed = true;
}

void vsxb__ring_rx_unpop(struct vsxb_vm *vm, unsigned n)
{
	VSXB_OWNED(vm, "ring_rx_unpop");
	if (n)
		vsxu_vq_unpop(vm->ring->rxq, n);
}

void vsxb__ring_rx_publish(struct vsxb_vm *vm)
{
	struct vsxb_ring *g = vm->ring;

	VSXB_OWNED(vm, "ring_rx_publish");
	if (g->rx_pushed && vm->live && g->rxq) {
		vsxu_vq_flush(g->rxq);
		vm->st.rx_flushes++;
	}
	g->rx_pushed = false;
}

/* ---- TX ---- */

int vsxb__ring_tx_pop(struct vsxb_vm *vm, const char **why)
{
	struct vsxb_ring *g = vm->ring;
	int n, rc;

	VSXB_OWNED(vm, "ring_tx_pop");
	*why = NULL;
	vsxu_vq_set_notify(g->txq, false);
	for (n = 0; n < VSXB_TX_BATCH; n++) {
		rc = vsxu_vq_pop(g->txq, &g->txe[n]);
		if (rc < 0) {
			*why = "TX queue: invalid descriptor chain";
			return -EIO;
		}
		if (rc == 0)
			break;
	}
	return n;
}

void vsxb__ring_tx_chain(const struct vsxb_vm *vm, unsigned i, struct vsxb_chain *c)
{
	const struct vsxu_vq_elem *e = &vm->ring->txe[i];

	c->iov = e->iov;
	c->n = e->out_num;
	c->len = e->out_len;
}

void vsxb__ring_tx_done(struct vsxb_vm *vm, unsigned n)
{
	struct vsxb_ring *g = vm->ring;
	unsigned i;

	VSXB_OWNED(vm, "ring_tx_done");
	for (i = 0; i < n; i++)
		vsxu_vq_push(g->txq, &g->txe[i], 0);
	if (n) {
		vsxu_vq_flush(g->txq);
		vm->st.tx_rounds++;
	}
}

bool vsxb__ring_tx_rearm(struct vsxb_vm *vm)
{
	VSXB_OWNED(vm, "ring_tx_rearm");
	vsxu_vq_set_notify(vm->ring->txq, true);
	return vsxu_vq_avail(vm->ring->txq) != 0;
}

bool vsxb__ring_tx_ready(struct vsxb_vm *vm, bool sleeping)
{
	struct vsxu_vq *q = vm->ring->txq;

	VSXB_OWNED(vm, "ring_tx_ready");
	if (!q || !vsxu_vq_ready(q))
		return false;
	if (sleeping)
		vsxu_vq_set_notify(q, true);   /* fences, then look */
	return vsxu_vq_avail(q) != 0;
}

void vsxb__batch_drop(struct vsxb_vm *vm)
{
	VSXB_OWNED(vm, "batch_drop");
	vm->batch = NULL;
	vm->batch_niov = 0;
	vm->batch_len = 0;
	vm->batch_flags = 0;
}

/* ---- Event queue ---- */

int vsxb__ring_event(struct vsxb_vm *vm, uint32_t id, const char **why)
{
	struct vsxu_vq_elem *e = &vm->ring->rxe[0];
	struct vsxu_vq *q = vm->ring->evq;
	uint32_t le = htole32(id);
	int rc;

	VSXB_OWNED(vm, "ring_event");
	*why = NULL;
	if (!q || !vsxu_vq_ready(q))
		return 0; /* QEMU keeps the event queue itself */
	rc = vsxu_vq_pop(q, e);
	if (rc < 0) {
		*why = "event queue: invalid descriptor chain";
		return -EIO;
	}
	if (rc == 0)
		return 0; /* no buffer yet: the next event-queue kick */
	if (e->in_len < sizeof(le)) {
		vsxu_vq_push(q, e, 0);
		vsxu_vq_flush(q);
		*why = "event queue: buffer too small";
		return -EIO;
	}
	vsxu_iov_from_buf(e->iov + e->out_num, e->in_num, 0, &le, sizeof(le));
	vsxu_vq_push(q, e, sizeof(le));
	vsxu_vq_flush(q);
	return 1;
}
