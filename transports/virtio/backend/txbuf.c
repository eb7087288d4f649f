/*
 * A connection's byte queue: guest payload copied out of guest memory when
 * its receiver (a host socket that would block, or a sibling guest without
 * RX buffers) cannot take it right away.
 *
 * Memory stays proportional to the bytes held, whatever the packet sizes:
 * every append first fills the tail chunk (so a flood of 1-byte packets
 * packs 4096 bytes per chunk instead of taking a chunk each, and payloads of
 * up to VSXB_SMALL_PKT bytes in particular never take one of their own), and
 * a new chunk holds the rest plus at most what the sender may still send
 * (@room, its credit). Only the tail chunk can have unused space. SEQPACKET
 * queues keep a bit per byte marking message ends (12.5%), and a second one
 * for EOR only in chunks that saw an EOR.
 *
 * Chunks hold at most VSXB_CHUNK_MAX bytes (a larger append takes several),
 * so that none is big enough for malloc to serve it with mmap: a bulk
 * transfer through a slow socket would otherwise map and unmap (and fault
 * in) every chunk. Chunks from VSXB_CHUNK_MIN up are sized in whole pages
 * (when the credit allows), and a queue with a pool (its VM's) gives freed
 * chunks of those sizes to the pool and takes new ones from it first: a
 * steady stream through a queue reuses the same few chunks. The pool is
 * bounded (VSXB_POOL_MAX bytes, VSXB_POOL_CHUNKS chunks) and emptied, with
 * malloc_trim, once it has been idle for a sweep period (conn.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend-int.h"

struct txq_chunk {
	struct txq_chunk *next;
	uint32_t start, end, cap;  /* data[start, end) is queued */
	uint32_t alloc;            /* bytes this chunk accounts for */
	uint8_t *eom;              /* seq: cap bits, inside this allocation */
	uint8_t *eor;              /* seq: cap bits, allocated on first EOR */
	uint8_t data[];
};

static size_t bits_bytes(size_t n)
{
	return (n + 7) / 8;
}

static bool bit_get(const uint8_t *map, size_t i)
{
	return map && (map[i / 8] >> (i % 8)) & 1;
}

static void bit_set(uint8_t *map, size_t i)
{
	map[i / 8] |= (uint8_t)(1u << (i % 8));
}

/* First set bit in [from, to), or @to. */
static size_t bit_find(const uint8_t *map, size_t from, size_t to)
{
	size_t i = from;

	while (i < to) {
		if (i % 8 == 0) {
			/* Skip whole zero bytes. */
			while (i + 8 <= to && map[i / 8] == 0)
				i += 8;
			if (i >= to)
				break;
		}
		if (bit_get(map, i))
			return i;
		i++;
	}
	return to;
}

void vsxb__txq_init(struct txq *q, bool seq)
{
	memset(q, 0, sizeof(*q));
	q->seq = seq;
}

/* ---- The pool ---- */

static bool pool_takes(const struct txq *q, const struct txq_chunk *k)
{
	const struct txq_pool *p = q->pool;

	return p && !q->seq && k->cap >= VSXB_CHUNK_MIN && p->n < VSXB_POOL_CHUNKS &&
	       p->bytes + k->alloc <= VSXB_POOL_MAX;
}

static bool pool_put(struct txq *q, struct txq_chunk *k)
{
	struct txq_pool *p = q->pool;

	if (!pool_takes(q, k))
		return false;
	k->next = p->head;
	p->head = k;
	p->n++;
	p->bytes += k->alloc;
	p->used = true;
	return true;
}

static struct txq_chunk *pool_get(struct txq *q, size_t cap)
{
	struct txq_pool *p = q->pool;
	struct txq_chunk **pp, *k;

	if (!p || q->seq || cap < VSXB_CHUNK_MIN)
		return NULL;
	for (pp = &p->head; (k = *pp); pp = &k->next) {
		if (k->cap != cap)
			continue;
		*pp = k->next;
		p->n--;
		p->bytes -= k->alloc;
		p->used = true;
		k->next = NULL;
		k->start = k->end = 0;
		return k;
	}
	return NULL;
}

bool vsxb__txq_pool_sweep(struct txq_pool *p)
{
	struct txq_chunk *k;
	bool trim;

	if (p->used) {
		p->used = false;
		return false;
	}
	while ((k = p->head)) {
		p->head = k->next;
		p->freed += k->alloc;
		free(k);
	}
	p->n = 0;
	p->bytes = 0;
	/* a quiet period: decide now, and start counting afresh (an idle
	 * VM's pool needs no more sweeps) */
	trim = p->freed >= VSXB_TRIM_MIN;
	p->freed = 0;
	return trim;
}

void vsxb__txq_pool_drain(struct txq_pool *p)
{
	p->used = false;
	vsxb__txq_pool_sweep(p);
	p->freed = 0;
}

/* ---- Chunks ---- */

static struct txq_chunk *chunk_new(struct txq *q, size_t cap)
{
	size_t map = q->seq ? bits_bytes(cap) : 0;
	size_t alloc = sizeof(struct txq_chunk) + cap + map;
	struct txq_chunk *k;

	k = pool_get(q, cap);
	if (k)
		return k;
	k = malloc(alloc);
	if (!k)
		return NULL;
	k->next = NULL;
	k->start = k->end = 0;
	k->cap = (uint32_t)cap;
	k->alloc = (uint32_t)alloc;
	k->eom = NULL;
	k->eor = NULL;
	if (q->seq) {
		k->eom = k->data + cap;
		memset(k->eom, 0, map);
	}
	return k;
}

/* A chunk that never held queued bytes (a failed append). */
static void chunk_drop(struct txq_chunk *k)
{
	free(k->eor);
	free(k);
}

static void chunk_free(struct txq *q, struct txq_chunk *k)
{
	q->mem -= k->alloc;
	if (pool_put(q, k))
		return;
	if (q->pool && k->alloc >= VSXB_CHUNK_MIN)
		q->pool->freed += k->alloc;
	chunk_drop(k);
}

/* Capacity of the next chunk for @left more bytes, @room after them. */
static size_t chunk_cap(size_t left, size_t room)
{
	size_t cap;

	if (left >= VSXB_CHUNK_MAX)
		return VSXB_CHUNK_MAX;
	if (left < VSXB_CHUNK_MIN) {
		cap = left + room;
		return cap > VSXB_CHUNK_MIN ? VSXB_CHUNK_MIN : cap;
	}
	/* whole pages, so that chunks come in a few sizes (the pool) */
	cap = (left + VSXB_CHUNK_MIN - 1) / VSXB_CHUNK_MIN * VSXB_CHUNK_MIN;
	return cap - left > room ? left + room : cap;
}

int vsxb__txq_append(struct txq *q, const struct iovec *iov, unsigned n,
		    size_t len, size_t room, unsigned eom_flags)
{
	struct txq_chunk *t = q->tail, *head = NULL, *last = NULL, *k;
	size_t space = t ? t->cap - t->end : 0;
	size_t first = len < space ? len : space;
	size_t left = len - first, off, take;

	/* Allocate before copying anything: all or nothing. */
	while (left) {
		size_t cap = chunk_cap(left, room);

		if (cap > UINT32_MAX / 2 || !(k = chunk_new(q, cap))) {
			while ((k = head)) {
				head = k->next;
				if (!pool_put(q, k))
					chunk_drop(k);
			}
			return -ENOMEM;
		}
		if (last)
			last->next = k;
		else
			head = k;
		last = k;
		left -= cap < left ? cap : left;
	}
	if (first) {
		vsxu_iov_to_buf(iov, n, 0, t->data + t->end, first);
		t->end += (uint32_t)first;
	}
	for (k = head, off = first; k; k = k->next) {
		take = len - off < k->cap ? len - off : k->cap;
		vsxu_iov_to_buf(iov, n, off, k->data, take);
		k->end = (uint32_t)take;
		off += take;
		q->mem += k->alloc;
	}
	if (head) {
		if (t)
			t->next = head;
		else
			q->head = head;
		q->tail = last;
	}
	q->bytes += len;
	if (q->seq) {
		q->open += len;
		if (eom_flags & VIRTIO_VSOCK_SEQ_EOM)
			vsxb__txq_end_msg(q, eom_flags);
	}
	return 0;
}
bool vsxb__txq_end_msg(struct txq *q, unsigned eom_flags)
{
	struct txq_chunk *t = q->tail;

	if (!q->seq || !q->open || !t || t->end == t->start)
		return false;
	bit_set(t->eom, t->end - 1);
	if (eom_flags & VIRTIO_VSOCK_SEQ_EOR) {
		if (!t->eor) {
			/* Lost EOR under memory pressure is tolerated. */
			t->eor = calloc(1, bits_bytes(t->cap));
			if (t->eor) {
				t->alloc += (uint32_t)bits_bytes(t->cap);
				q->mem += bits_bytes(t->cap);
			}
		}
		if (t->eor)
			bit_set(t->eor, t->end - 1);
	}
	q->open = 0;
	return true;
}

size_t vsxb__txq_peek(const struct txq *q, struct iovec *iov, unsigned max_iov,
		     unsigned *niov, size_t max, unsigned *flags)
{
	const struct txq_chunk *k;
	size_t total = 0;
	unsigned ni = 0;

	*flags = 0;
	for (k = q->head; k && ni < max_iov && total < max; k = k->next) {
		size_t from = k->start, to = k->end, end = to;

		if (to - from > max - total)
			to = from + (max - total);
		if (q->seq) {
			end = bit_find(k->eom, from, to);
			if (end < to) {
				to = end + 1;
				*flags = VIRTIO_VSOCK_SEQ_EOM;
				if (bit_get(k->eor, end))
					*flags |= VIRTIO_VSOCK_SEQ_EOR;
			}
		}
		iov[ni].iov_base = (void *)(k->data + from);
		iov[ni].iov_len = to - from;
		ni++;
		total += to - from;
		if (*flags)
			break;
	}
	*niov = ni;
	return total;
}

size_t vsxb__txq_msg_len(const struct txq *q)
{
	const struct txq_chunk *k;
	size_t total = 0, end;

	if (!q->seq)
		return 0;
	for (k = q->head; k; k = k->next) {
		end = bit_find(k->eom, k->start, k->end);
		if (end < k->end)
			return total + (end + 1 - k->start);
		total += k->end - k->start;
	}
	return 0;
}

void vsxb__txq_consume(struct txq *q, size_t n)
{
	struct txq_chunk *k;

	if (n > q->bytes)
		n = q->bytes;
	q->bytes -= n;
	while (n && (k = q->head)) {
		size_t have = k->end - k->start;
		size_t take = n < have ? n : have;

		k->start += (uint32_t)take;
		n -= take;
		if (k->start == k->end) {
			q->head = k->next;
			if (q->tail == k)
				q->tail = NULL;
			chunk_free(q, k);
		}
	}
	if (q->open > q->bytes)
		q->open = q->bytes;
}

size_t vsxb__txq_copy(const struct txq *q, uint8_t *buf, struct vsxb_msg_end *ends,
		     unsigned *nends)
{
	const struct txq_chunk *k;
	size_t total = 0;

	*nends = 0;
	for (k = q->head; k; k = k->next) {
		memcpy(buf + total, k->data + k->start, k->end - k->start);
		for (size_t i = k->start; q->seq && i < k->end; i++) {
			i = bit_find(k->eom, i, k->end);
			if (i == k->end)
				break;
			ends[*nends].end = (uint32_t)(total + i - k->start + 1);
			ends[(*nends)++].flags = VIRTIO_VSOCK_SEQ_EOM |
				(bit_get(k->eor, i) ? VIRTIO_VSOCK_SEQ_EOR : 0);
		}
		total += k->end - k->start;
	}
	return total;
}

void vsxb__txq_clear(struct txq *q)
{
	struct txq_chunk *k, *next;

	for (k = q->head; k; k = next) {
		next = k->next;
		chunk_free(q, k);
	}
	q->head = q->tail = NULL;
	q->bytes = 0;
	q->open = 0;
}
