/*
 * Fuzz target: the split-virtqueue walker (transports/virtio/vhost-user/vq.c).
 *
 * The input lays out guest memory and a ring, then plays guest and device:
 *
 *   flags      u8: bit0 EVENT_IDX, bit1 INDIRECT_DESC, bit2 NOTIFY_ON_EMPTY,
 *              bits 4-7: log2 of the ring size (0..8, larger wraps)
 *   nregions   u8: 1 + n % 4 memory regions
 *   regions    per region: gpa low u32, high u16 (0xff00 and up: near
 *              2^64), size u16 (+1)
 *   last_avail u16, used_idx u16
 *   desc table 16 * num bytes, avail ring 6 + 2 * num bytes (the guest's)
 *   ops        until the input ends: pop, push, flush, unpop, notify on/off,
 *              and guest writes into a region (indirect tables, new
 *              descriptors, a moving avail->idx).
 *
 * Each region, the descriptor table and both rings are separate heap
 * blocks of their exact size, so ASan sees any access beyond them; on top
 * of that every iovec a popped element holds must lie inside one region
 * and add up to the element's lengths.
 */
#include <linux/virtio_ring.h>
#include <stdlib.h>
#include <string.h>

#include "vhost-user/iov.h"
#include "vhost-user/vq.h"
#include "fuzz.h"

#define MAX_OUT 16

struct world {
	struct vsxu_mem mem;
	void *desc, *avail, *used;
	size_t desc_len, avail_len, used_len;
};

static void check_elem(const struct world *w, const struct vsxu_vq_elem *e)
{
	uint64_t out = 0, in = 0;

	if (e->out_num + e->in_num > VSXU_VQ_MAX_IOV)
		abort();
	for (unsigned i = 0; i < e->out_num + e->in_num; i++) {
		const char *b = e->iov[i].iov_base;
		size_t l = e->iov[i].iov_len;
		bool inside = false;

		for (unsigned r = 0; r < w->mem.n && !inside; r++) {
			const char *h = w->mem.r[r].host;

			inside = b >= h && l <= w->mem.r[r].size &&
				 (size_t)(b - h) <= w->mem.r[r].size - l;
		}
		if (!inside || !l)
			abort();
		if (i < e->out_num)
			out += l;
		else
			in += l;
	}
	if (out != e->out_len || in != e->in_len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fin f = { data, size };
	struct world w;
	struct vsxu_vq vq;
	struct vsxu_vq_elem *e = malloc(sizeof(*e));
	uint16_t heads[MAX_OUT];
	uint32_t ins[MAX_OUT];
	unsigned nout = 0, num, steps = 0;
	bool just_popped = false;
	uint8_t fl, nr;
	char scratch[512];

	if (!e)
		return 0;
	memset(&w, 0, sizeof(w));
	fl = fin_u8(&f);
	nr = 1 + fin_u8(&f) % 4;
	num = 1u << ((fl >> 4) % 9);
	for (unsigned i = 0; i < nr; i++) {
		struct vsxu_mem_region *r = &w.mem.r[i];
		uint64_t lo = fin_u32(&f), hi = fin_u16(&f);

		/* hi selects far-away (and wrapping) guest addresses */
		r->gpa = hi >= 0xff00 ? ~0ull - lo : (hi << 32) | lo;
		r->size = 1 + (uint64_t)fin_u16(&f);
		/* vhost_user.c refuses regions that wrap past 2^64 */
		if (r->gpa > ~0ull - 65537)
			r->gpa = ~0ull - 65537;
		r->host = calloc(1, r->size);
		r->uva = r->gpa;
		if (!r->host)
			goto out;
		w.mem.n++;
	}
	vsxu_vq_reset(&vq);
	vq.last_avail = fin_u16(&f);
	vq.used_idx = fin_u16(&f);
	w.desc_len = 16 * num;
	w.avail_len = 6 + 2 * num;
	w.used_len = 6 + 8 * num;
	w.desc = malloc(w.desc_len);
	w.avail = malloc(w.avail_len);
	w.used = calloc(1, w.used_len);
	if (!w.desc || !w.avail || !w.used)
		goto out;
	fin_bytes(&f, w.desc, w.desc_len);
	fin_bytes(&f, w.avail, w.avail_len);
	vq.num = num;
	vq.desc = w.desc;
	vq.avail = w.avail;
	vq.used = w.used;
	vq.mem = &w.mem;
	vq.started = vq.enabled = true;
	vq.event_idx = fl & 1;
	vq.indirect = fl & 2;
	vq.notify_on_empty = fl & 4;

	while (fin_left(&f) && steps++ < 4096) {
		uint8_t op = fin_u8(&f);
		int r;

		switch (op % 8) {
		case 0:
		case 1: /* pop */
			if (nout == MAX_OUT)
				break;
			r = vsxu_vq_pop(&vq, e);
			if (r < 0 && !vq.broken)
				abort(); /* an error always breaks the queue */
			if (vsxu_vq_avail(&vq) > num)
				abort();
			just_popped = r == 1;
			if (r != 1)
				break;
			check_elem(&w, e);
			/* the device reads what the guest wrote, writes back */
			vsxu_iov_to_buf(e->iov, e->out_num, op >> 3, scratch, sizeof(scratch));
			memset(scratch, op, sizeof(scratch));
			vsxu_iov_from_buf(e->iov + e->out_num, e->in_num, op >> 4, scratch,
					 sizeof(scratch));
			{
				struct iovec sl[8];

				vsxu_iov_slice(sl, 8, e->iov, e->out_num + e->in_num, op >> 3,
					      op);
			}
			heads[nout] = e->head;
			ins[nout++] = e->in_len;
			continue;
		case 2: /* push the oldest */
			if (!nout)
				break;
			e->head = heads[0];
			e->in_len = ins[0];
			vsxu_vq_push(&vq, e, fin_u32(&f));
			memmove(heads, heads + 1, (nout - 1) * sizeof(heads[0]));
			memmove(ins, ins + 1, (nout - 1) * sizeof(ins[0]));
			nout--;
			break;
		case 3:
			vsxu_vq_flush(&vq);
			break;
		case 4: /* give the last pop back */
			if (just_popped && nout) {
				vsxu_vq_unpop(&vq, 1);
				nout--;
			}
			break;
		case 5:
			vsxu_vq_set_notify(&vq, op & 8);
			break;
		case 6: { /* guest writes into a region */
			struct vsxu_mem_region *rg = &w.mem.r[(op >> 3) % w.mem.n];
			uint64_t off = fin_u16(&f) % rg->size;
			size_t len = fin_u8(&f);

			if (len > rg->size - off)
				len = rg->size - off;
			fin_bytes(&f, (char *)rg->host + off, len);
			break;
		}
		default: { /* guest writes the ring: avail entries, idx, flags */
			size_t off = fin_u16(&f) % w.avail_len;
			size_t len = 1 + (op >> 3) % 8;

			if ((op >> 6) == 3) { /* or a descriptor */
				off = fin_u16(&f) % w.desc_len;
				if (len > w.desc_len - off)
					len = w.desc_len - off;
				fin_bytes(&f, (char *)w.desc + off, len);
				break;
			}
			if (len > w.avail_len - off)
				len = w.avail_len - off;
			fin_bytes(&f, (char *)w.avail + off, len);
			break;
		}
		}
		just_popped = false;
	}
	/* the device hands everything back, as vhost_user.c's stop does */
	while (nout) {
		e->head = heads[--nout];
		e->in_len = ins[nout];
		vsxu_vq_push(&vq, e, 0);
	}
	vsxu_vq_flush(&vq);
out:
	for (unsigned i = 0; i < w.mem.n; i++)
		free(w.mem.r[i].host);
	free(w.desc);
	free(w.avail);
	free(w.used);
	free(e);
	return 0;
}
