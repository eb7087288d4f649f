/*
 * vsxd's restart state record: the format is described in state.h.
 *
 * The writer is vsxd itself, the reader a later vsxd: but the record sits
 * in a memfd that outlived a crash, so the reader treats it as outside
 * input (fuzz/fuzz_state.c). Every read is bounds-checked through one
 * cursor (state-int.h, shared with the relays record of state_relays.c);
 * the first failure sticks and names what was wrong.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"
#include "state-int.h"

/* ---- CRC-32 ---- */

uint32_t vsxd_crc32(const void *buf, size_t len)
{
	static uint32_t table[256];
	static bool ready;
	const uint8_t *p = buf;
	uint32_t c = 0xffffffffu;

	if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t v = i;

			for (int k = 0; k < 8; k++)
				v = v & 1 ? 0xedb88320u ^ (v >> 1) : v >> 1;
			table[i] = v;
		}
		__atomic_store_n(&ready, true, __ATOMIC_RELEASE);
	}
	while (len--)
		c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

/* ---- Names ---- */

bool vsxd_fdname_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > VSXD_FDNAME_MAX)
		return false;
	for (; *s; s++) {
		if (*s < 0x20 || *s > 0x7e || *s == ':')
			return false;
	}
	return true;
}

static bool vm_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > VSXD_STATE_NAME_MAX)
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		      "0123456789._-") == n;
}

static bool pow2_num(unsigned n)
{
	return n && n <= 32768 && !(n & (n - 1));
}

static bool printable(const char *s)
{
	for (; *s; s++) {
		if (*s < 0x20 || *s > 0x7e)
			return false;
	}
	return true;
}

/* The message ends of a queue: seqpacket only (and a sibling stream's
 * packet ends: @packets), increasing, inside it. */
static const char *bytes_bad(const struct vsxd_state_bytes *b, unsigned type, bool packets)
{
	uint32_t prev = 0;

	if (b->len > VSXD_STATE_MAX_LEN || (b->len && !b->data))
		return "queued byte count out of range";
	if (b->nends && ((type != 2 && !packets) || !b->ends))
		return "message ends in a stream's queue";
	if (b->nends > b->len)
		return "more message ends than queued bytes";
	for (unsigned i = 0; i < b->nends; i++) {
		if (b->ends[i].end <= prev || b->ends[i].end > b->len)
			return "message end out of order or past the queue";
		if ((b->ends[i].flags != 1 && b->ends[i].flags != 3) ||
		    (type != 2 && b->ends[i].flags != 1))
			return "bad message end flags";
		prev = b->ends[i].end;
	}
	return NULL;
}

/* What version 2 and 3 add to a connection (version 1: the type alone). */
static const char *conn_bad(const struct vsxd_state_conn *c, unsigned version)
{
	bool sib = c->peer == VSXD_PEER_SIBLING;
	const char *bad;

	if (c->type != 1 && c->type != 2)
		return "bad connection type";
	if (version < 2)
		return NULL;
	if (c->state < 1 || c->state > 3)
		return "bad connection state";
	if (c->flags & ~0xffu)
		return "unknown connection flags";
	if (c->guest_shut > 3 || c->host_shut > 3 || c->shut_pending > 3)
		return "bad shutdown bits";
	if (c->ctrl > 0x3f)
		return "bad pending control bits";
	if (c->peer < VSXD_PEER_HOST || c->peer > VSXD_PEER_VSOCK)
		return "bad peer kind";
	if (c->timer > VSXD_TIMER_DRAIN || (c->timer == VSXD_TIMER_NONE && c->timer_ms))
		return "bad connection timer";
	if (*c->host_fd && (c->peer == VSXD_PEER_SIBLING || !vsxd_fdname_ok(c->host_fd)))
		return "bad host socket FDNAME";
	if (!printable(c->tag))
		return "bad connection tag";
	bad = bytes_bad(&c->to_host_q, c->type, false);
	if (!bad)
		bad = bytes_bad(&c->to_guest_q, c->type, sib && version >= 3);
	if (bad || version < 3)
		return bad;
	if (*c->twin_vm && (!sib || !vm_name_ok(c->twin_vm)))
		return "bad sibling twin";
	if (!*c->twin_vm && c->twin_id)
		return "bad sibling twin";
	if (c->eom_pending && ((c->eom_pending != 1 && c->eom_pending != 3) ||
			       !sib || c->type != 2))
		return "bad pending message end";
	if (version >= 4 && (c->why >= VSXB_REASON_COUNT || c->why_limit > 255 ||
			     c->why_err > 4095))
		return "an end reason out of range";
	return NULL;
}

/* ---- Checks shared by both directions ---- */

static const char *vm_bad(const struct vsxd_state_vm *v, unsigned version)
{
	bool seen[VSXD_STATE_MAX_QUEUES] = { false };

	if (!vm_name_ok(v->name))
		return "bad VM name";
	if (v->paused && version < 3)
		return "a paused VM in a record of version 1 or 2";
	if (!vsxd_fdname_ok(v->conn))
		return "bad connection FDNAME";
	if (!v->nregions || v->nregions > VSXD_STATE_MAX_REGIONS)
		return "region count out of range";
	if (!v->nqueues || v->nqueues > VSXD_STATE_MAX_QUEUES)
		return "queue count out of range";
	if (v->nconns > VSXD_STATE_MAX_CONNS || (v->nconns && !v->conns))
		return "connection count out of range";
	for (unsigned i = 0; i < v->nregions; i++) {
		const struct vsxd_state_region *r = &v->region[i];

		if (!r->size || r->gpa + r->size < r->gpa || r->uva + r->size < r->uva ||
		    r->mmap_offset + r->size < r->mmap_offset)
			return "bad memory region";
		if (!vsxd_fdname_ok(r->fd))
			return "bad memory region FDNAME";
	}
	for (unsigned i = 0; i < v->nqueues; i++) {
		const struct vsxd_state_queue *q = &v->queue[i];

		if (q->index >= VSXD_STATE_MAX_QUEUES || seen[q->index])
			return "bad or repeated queue index";
		seen[q->index] = true;
		if (!pow2_num(q->num))
			return "bad queue size";
		if (v->paused && (*q->kick || q->enabled))
			return "a paused VM with a started ring";
		if (q->base > 0xffff || (!v->paused && q->base))
			return "a ring's stop index in a running VM, or out of range";
		if ((!v->paused && !vsxd_fdname_ok(q->kick)) ||
		    (*q->call && !vsxd_fdname_ok(q->call)))
			return "bad queue FDNAME";
	}
	for (unsigned i = 0; i < v->nconns; i++) {
		const char *bad = conn_bad(&v->conns[i], version);

		if (bad)
			return bad;
	}
	return NULL;
}

/* ---- A connection's fields ---- */

#define U(member, wire, since) VSXD_FIELD(VSXD_F_UINT, member, wire, since)

/* The state record's connection (state.h: the versions' layouts) */
const struct vsxd_field vsxd__conn_fields[] = {
	U(id, 8, 1), U(guest_cid, 8, 1), U(peer_cid, 8, 1),
	U(guest_port, 4, 1), U(peer_port, 4, 1), U(type, 1, 1),
	U(state, 1, 2), U(flags, 1, 2), U(guest_shut, 1, 2), U(host_shut, 1, 2),
	U(shut_pending, 1, 2), U(ctrl, 1, 2), U(peer, 1, 2), U(timer, 1, 2),
	U(timer_ms, 4, 2),
	U(cr.buf_alloc, 4, 2), U(cr.rx_cnt, 4, 2), U(cr.fwd_cnt, 4, 2),
	U(cr.last_fwd_sent, 4, 2), U(cr.last_buf_sent, 4, 2), U(cr.rx_limit, 4, 2),
	U(cr.peer_buf_alloc, 4, 2), U(cr.peer_fwd_cnt, 4, 2), U(cr.tx_cnt, 4, 2),
	U(to_guest, 8, 2), U(from_guest, 8, 2),
	VSXD_FIELD(VSXD_F_STR, host_fd, 0, 2), VSXD_FIELD(VSXD_F_STR, tag, 0, 2),
	VSXD_FIELD(VSXD_F_BYTES, to_host_q, 0, 2), VSXD_FIELD(VSXD_F_BYTES, to_guest_q, 0, 2),
	VSXD_FIELD(VSXD_F_STR, twin_vm, 0, 3), U(twin_id, 8, 3), U(eom_pending, 1, 3),
	U(why, 1, 4), U(why_limit, 1, 4), U(why_err, 4, 4),
};
const size_t vsxd__conn_nfields = sizeof(vsxd__conn_fields) / sizeof(vsxd__conn_fields[0]);

#undef U

static uint64_t field_load(const void *p, unsigned mem)
{
	uint64_t v8;
	uint32_t v4;
	uint16_t v2;
	uint8_t v1;

	switch (mem) {
	case 8: memcpy(&v8, p, 8); return v8;
	case 4: memcpy(&v4, p, 4); return v4;
	case 2: memcpy(&v2, p, 2); return v2;
	default: memcpy(&v1, p, 1); return v1;
	}
}

static void field_store(void *p, unsigned mem, uint64_t v)
{
	uint32_t v4 = (uint32_t)v;
	uint16_t v2 = (uint16_t)v;
	uint8_t v1 = (uint8_t)v;

	switch (mem) {
	case 8: memcpy(p, &v, 8); break;
	case 4: memcpy(p, &v4, 4); break;
	case 2: memcpy(p, &v2, 2); break;
	default: memcpy(p, &v1, 1); break;
	}
}

static void put_bytes(struct wr *w, const struct vsxd_state_bytes *b)
{
	put_le(w, b->len, 4);
	put(w, b->data, b->len);
	put_le(w, b->nends, 4);
	for (unsigned i = 0; i < b->nends; i++) {
		put_le(w, b->ends[i].end, 4);
		put_le(w, b->ends[i].flags, 1);
	}
}

static void get_bytes(struct rd *r, struct vsxd_state_bytes *b)
{
	b->len = (uint32_t)get_le(r, 4);
	b->data = get_raw(r, b->len);
	b->nends = (unsigned)get_le(r, 4);
	if (r->err)
		return;
	/* each end takes 5 bytes */
	if (b->nends > (r->n - r->off) / 5) {
		r->err = "record truncated";
		return;
	}
	if (b->nends) {
		b->ends = calloc(b->nends, sizeof(*b->ends));
		if (!b->ends) {
			r->err = "out of memory";
			return;
		}
	}
	for (unsigned i = 0; i < b->nends; i++) {
		b->ends[i].end = (uint32_t)get_le(r, 4);
		b->ends[i].flags = (unsigned)get_le(r, 1);
	}
}

void vsxd__put_fields(struct wr *w, const struct vsxd_field *f, size_t n,
		      const struct vsxd_state_conn *c)
{
	const char *base = (const char *)c;

	for (size_t i = 0; i < n; i++) {
		switch (f[i].kind) {
		case VSXD_F_UINT:
			put_le(w, field_load(base + f[i].off, f[i].mem), f[i].wire);
			break;
		case VSXD_F_STR:
			put_str(w, base + f[i].off);
			break;
		case VSXD_F_BYTES:
			put_bytes(w, (const struct vsxd_state_bytes *)(const void *)(base + f[i].off));
			break;
		case VSXD_F_ZERO:
			put_le(w, 0, f[i].wire);
			break;
		}
	}
}

void vsxd__get_fields(struct rd *r, const struct vsxd_field *f, size_t n, unsigned version,
		      struct vsxd_state_conn *c)
{
	char *base = (char *)c;

	for (size_t i = 0; i < n && !r->err; i++) {
		if (f[i].since > version)
			continue;
		switch (f[i].kind) {
		case VSXD_F_UINT:
			field_store(base + f[i].off, f[i].mem, get_le(r, f[i].wire));
			break;
		case VSXD_F_STR:
			get_str(r, base + f[i].off, f[i].mem);
			break;
		case VSXD_F_BYTES:
			get_bytes(r, (struct vsxd_state_bytes *)(void *)(base + f[i].off));
			break;
		case VSXD_F_ZERO:
			if (get_le(r, f[i].wire) && !r->err)
				r->err = "reserved bytes set";
			break;
		}
	}
}

size_t vsxd__fields_min(const struct vsxd_field *f, size_t n, unsigned version)
{
	size_t len = 0;

	for (size_t i = 0; i < n; i++) {
		if (f[i].since > version)
			continue;
		len += f[i].kind == VSXD_F_STR ? 1 : f[i].kind == VSXD_F_BYTES ? 8 : f[i].wire;
	}
	return len;
}

/* ---- Encoding ---- */

/* Always the current version: older records are read (get_vm), never
 * written. */
static void put_vm(struct wr *w, const struct vsxd_state_vm *v)
{
	put_str(w, v->name);
	put_str(w, v->conn);
	put_le(w, v->cid, 8);
	put_le(w, v->features, 8);
	put_le(w, v->protocol_features, 8);
	put_le(w, v->nregions, 1);
	put_le(w, v->nqueues, 1);
	put_le(w, v->paused ? 1 : 0, 2);
	put_le(w, v->nconns, 4);
	for (unsigned i = 0; i < v->nregions; i++) {
		const struct vsxd_state_region *r = &v->region[i];

		put_le(w, r->gpa, 8);
		put_le(w, r->size, 8);
		put_le(w, r->uva, 8);
		put_le(w, r->mmap_offset, 8);
		put_str(w, r->fd);
	}
	for (unsigned i = 0; i < v->nqueues; i++) {
		const struct vsxd_state_queue *q = &v->queue[i];

		put_le(w, q->index, 1);
		put_le(w, q->enabled ? 1 : 0, 1);
		put_le(w, q->num, 2);
		put_le(w, q->desc, 8);
		put_le(w, q->avail, 8);
		put_le(w, q->used, 8);
		put_str(w, q->kick);
		put_str(w, q->call);
		put_le(w, q->base, 2);
	}
	for (unsigned i = 0; i < v->nconns; i++)
		vsxd__put_fields(w, vsxd__conn_fields, vsxd__conn_nfields, &v->conns[i]);
}

static void put_all(struct wr *w, const struct vsxd_state *s)
{
	put(w, VSXD_STATE_MAGIC, 8);
	put_le(w, VSXD_STATE_VERSION, 4);
	put_le(w, 0, 4);  /* length, filled in */
	put_le(w, 0, 4);  /* crc, filled in */
	put_le(w, s->nvms, 4);
	put_le(w, s->generation, 8);
	for (unsigned i = 0; i < s->nvms; i++)
		put_vm(w, &s->vms[i]);
}

void vsxd__seal(uint8_t *p, size_t len, size_t from)
{
	uint32_t crc = vsxd_crc32(p + from, len - from);

	for (unsigned i = 0; i < 4; i++) {
		p[12 + i] = (uint8_t)(len >> (8 * i));
		p[16 + i] = (uint8_t)(crc >> (8 * i));
	}
}

int vsxd__record_open(struct rd *r, const void *buf, size_t len, const char *magic,
		      const char *what, unsigned vmin, unsigned vmax, size_t crc_from,
		      uint32_t *version, char *why, size_t whylen)
{
	uint32_t length, crc;

	*r = (struct rd){ .p = buf, .n = len };
	if (len < VSXD_STATE_HDR || memcmp(buf, magic, 8)) {
		vsxd__why_set(why, whylen, "not a %s record (%zu bytes, no magic)", what, len);
		return -EBADMSG;
	}
	r->off = 8;
	*version = get_le(r, 4);
	length = get_le(r, 4);
	crc = get_le(r, 4);
	if (*version < vmin || *version > vmax) {
		if (vmin == vmax)
			vsxd__why_set(why, whylen, "%s record version %u, this vsxd reads %u",
				      what, *version, vmax);
		else
			vsxd__why_set(why, whylen, "%s record version %u, this vsxd reads %u to %u",
				      what, *version, vmin, vmax);
		return -EPROTONOSUPPORT;
	}
	if (length < VSXD_STATE_HDR || length > len || length > VSXD_STATE_MAX_LEN) {
		vsxd__why_set(why, whylen, "%s record length %u, %zu bytes present", what,
			      length, len);
		return -EBADMSG;
	}
	r->n = length;
	if (vsxd_crc32(r->p + crc_from, length - crc_from) != crc) {
		vsxd__why_set(why, whylen, "%s record checksum mismatch", what);
		return -EBADMSG;
	}
	return 0;
}

size_t vsxd_state_size(const struct vsxd_state *s)
{
	struct wr w = { 0 };

	put_all(&w, s);
	return w.n;
}

long vsxd_state_encode(const struct vsxd_state *s, void *buf, size_t cap)
{
	size_t len = vsxd_state_size(s);
	struct wr w = { .p = buf, .cap = cap };

	if (s->nvms > VSXD_STATE_MAX_VMS || (s->nvms && !s->vms) ||
	    len > VSXD_STATE_MAX_LEN)
		return -EINVAL;
	for (unsigned i = 0; i < s->nvms; i++) {
		if (vm_bad(&s->vms[i], VSXD_STATE_VERSION))
			return -EINVAL;
	}
	if (len > cap)
		return -ENOSPC;
	put_all(&w, s);
	vsxd__seal(buf, len, VSXD_STATE_HDR);
	return (long)len;
}

/* ---- Decoding ---- */

static int get_vm(struct rd *r, struct vsxd_state_vm *v, unsigned version)
{
	size_t conn_min = vsxd__fields_min(vsxd__conn_fields, vsxd__conn_nfields, version);
	unsigned vflags;
	const char *bad;

	get_str(r, v->name, sizeof(v->name));
	get_str(r, v->conn, sizeof(v->conn));
	v->cid = get_le(r, 8);
	v->features = get_le(r, 8);
	v->protocol_features = get_le(r, 8);
	v->nregions = get_le(r, 1);
	v->nqueues = get_le(r, 1);
	vflags = (unsigned)get_le(r, 2);
	if (vflags & ~(version >= 3 ? 1u : 0u) && !r->err)
		r->err = version >= 3 ? "unknown VM flags" : "reserved bits set";
	v->paused = vflags & 1;
	v->nconns = get_le(r, 4);
	if (r->err)
		return -EBADMSG;
	if (!v->nregions || v->nregions > VSXD_STATE_MAX_REGIONS)
		r->err = "region count out of range";
	else if (!v->nqueues || v->nqueues > VSXD_STATE_MAX_QUEUES)
		r->err = "queue count out of range";
	else if (v->nconns > VSXD_STATE_MAX_CONNS)
		r->err = "connection count out of range";
	/* no allocation beyond what the record's bytes can hold */
	else if (v->nconns > (r->n - r->off) / conn_min)
		r->err = "record truncated";
	if (r->err)
		return -EBADMSG;
	for (unsigned i = 0; i < v->nregions; i++) {
		struct vsxd_state_region *g = &v->region[i];

		g->gpa = get_le(r, 8);
		g->size = get_le(r, 8);
		g->uva = get_le(r, 8);
		g->mmap_offset = get_le(r, 8);
		get_str(r, g->fd, sizeof(g->fd));
	}
	for (unsigned i = 0; i < v->nqueues; i++) {
		struct vsxd_state_queue *q = &v->queue[i];
		unsigned flags;

		q->index = get_le(r, 1);
		flags = get_le(r, 1);
		if (flags & ~1u && !r->err)
			r->err = "unknown queue flags";
		q->enabled = flags & 1;
		q->num = get_le(r, 2);
		q->desc = get_le(r, 8);
		q->avail = get_le(r, 8);
		q->used = get_le(r, 8);
		get_str(r, q->kick, sizeof(q->kick));
		get_str(r, q->call, sizeof(q->call));
		if (version >= 3)
			q->base = get_le(r, 2);
	}
	if (r->err)
		return -EBADMSG;
	if (v->nconns) {
		v->conns = calloc(v->nconns, sizeof(*v->conns));
		if (!v->conns) {
			r->err = "out of memory";
			return -ENOMEM;
		}
	}
	for (unsigned i = 0; i < v->nconns && !r->err; i++)
		vsxd__get_fields(r, vsxd__conn_fields, vsxd__conn_nfields, version, &v->conns[i]);
	if (r->err)
		return -EBADMSG;
	bad = vm_bad(v, version);
	if (bad) {
		r->err = bad;
		return -EBADMSG;
	}
	return 0;
}

void vsxd__why_set(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (!whylen)
		return;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
}

int vsxd_state_decode(const void *buf, size_t len, struct vsxd_state *out,
		      char *why, size_t whylen)
{
	uint32_t version, nvms;
	struct rd r;
	int err;

	memset(out, 0, sizeof(*out));
	err = vsxd__record_open(&r, buf, len, VSXD_STATE_MAGIC, "state", 1,
				VSXD_STATE_VERSION, VSXD_STATE_HDR, &version, why, whylen);
	if (err)
		return err;
	nvms = get_le(&r, 4);
	out->generation = get_le(&r, 8);
	if (nvms > VSXD_STATE_MAX_VMS || nvms > (r.n - VSXD_STATE_HDR) / 40) {
		vsxd__why_set(why, whylen, "state record names %u VMs", nvms);
		out->generation = 0;
		return -EBADMSG;
	}
	if (nvms) {
		out->vms = calloc(nvms, sizeof(*out->vms));
		if (!out->vms) {
			vsxd__why_set(why, whylen, "out of memory");
			out->generation = 0;
			return -ENOMEM;
		}
	}
	for (unsigned i = 0; i < nvms; i++) {
		out->nvms = i + 1;
		err = get_vm(&r, &out->vms[i], version);
		if (err) {
			vsxd__why_set(why, whylen, "state record VM %u: %s", i, r.err);
			goto fail;
		}
		for (unsigned j = 0; j < i; j++) {
			if (!strcmp(out->vms[j].name, out->vms[i].name)) {
				vsxd__why_set(why, whylen, "state record names VM %s twice",
					out->vms[i].name);
				err = -EBADMSG;
				goto fail;
			}
		}
	}
	if (r.off != r.n) {
		vsxd__why_set(why, whylen, "state record has %zu bytes after its last VM",
			r.n - r.off);
		err = -EBADMSG;
		goto fail;
	}
	out->version = version;
	return 0;

fail:
	vsxd_state_clear(out);
	return err;
}

static void bytes_free(struct vsxd_state_bytes *b)
{
	free(b->data);
	free(b->ends);
	memset(b, 0, sizeof(*b));
}

void vsxd_state_clear(struct vsxd_state *s)
{
	for (unsigned i = 0; i < s->nvms && s->vms; i++) {
		struct vsxd_state_vm *v = &s->vms[i];

		for (unsigned j = 0; j < v->nconns && v->conns; j++) {
			bytes_free(&v->conns[j].to_host_q);
			bytes_free(&v->conns[j].to_guest_q);
		}
		free(v->conns);
	}
	free(s->vms);
	memset(s, 0, sizeof(*s));
}

/* ---- The counters record (state.h) ---- */

static void put_counters(struct wr *w, const struct vsxd_counters *c)
{
	/* (a record over the limits is measured as if it had none: the
	 * encoder refuses it anyway) */
	unsigned nr = c->nreasons > VSXD_COUNTERS_MAX ? 0 : c->nreasons;

	put(w, VSXD_COUNTERS_MAGIC, 8);
	put_le(w, VSXD_COUNTERS_VERSION, 4);
	put_le(w, 0, 4);  /* length, filled in */
	put_le(w, 0, 4);  /* crc, filled in */
	put_le(w, c->nvms, 4);
	put_le(w, VSXD_CNT_COUNT, 2);
	put_le(w, nr, 2);
	put_le(w, 0, 4);
	for (unsigned i = 0; i < VSXD_CNT_COUNT; i++)
		put_le(w, c->c[i], 8);
	for (unsigned i = 0; i < c->nvms; i++) {
		const struct vsxd_counters_vm *v = &c->vms[i];

		put_str(w, v->name);
		put_le(w, v->opened, 8);
		put_le(w, v->to_guest, 8);
		put_le(w, v->from_guest, 8);
		put_le(w, v->credit_stalls, 8);
		for (unsigned k = 0; k < nr; k++)
			put_le(w, v->closed[k], 8);
		for (unsigned k = 0; k < nr; k++)
			put_le(w, v->reset[k], 8);
		for (unsigned k = 0; k < nr; k++)
			put_le(w, v->refused[k], 8);
	}
}

size_t vsxd_counters_size(const struct vsxd_counters *c)
{
	struct wr w = { 0 };

	put_counters(&w, c);
	return w.n;
}

long vsxd_counters_encode(const struct vsxd_counters *c, void *buf, size_t cap)
{
	struct wr w = { .p = buf, .cap = cap };
	size_t len;

	if (c->nvms > VSXD_STATE_MAX_VMS || (c->nvms && !c->vms) ||
	    c->nreasons > VSXD_COUNTERS_MAX)
		return -EINVAL;
	len = vsxd_counters_size(c);
	if (len > VSXD_STATE_MAX_LEN)
		return -EINVAL;
	for (unsigned i = 0; i < c->nvms; i++)
		if (!vm_name_ok(c->vms[i].name))
			return -EINVAL;
	if (len > cap)
		return -ENOSPC;
	put_counters(&w, c);
	vsxd__seal(buf, len, 20);
	return (long)len;
}

int vsxd_counters_decode(const void *buf, size_t len, struct vsxd_counters *out,
			 char *why, size_t whylen)
{
	uint32_t version, nvms, reserved;
	unsigned nglobals, nreasons;
	struct rd r;
	int err;

	memset(out, 0, sizeof(*out));
	err = vsxd__record_open(&r, buf, len, VSXD_COUNTERS_MAGIC, "counters",
				VSXD_COUNTERS_VERSION, VSXD_COUNTERS_VERSION, 20, &version,
				why, whylen);
	if (err)
		return err;
	nvms = get_le(&r, 4);
	nglobals = get_le(&r, 2);
	nreasons = get_le(&r, 2);
	reserved = get_le(&r, 4);
	/* each VM takes at least 34 bytes (a name, four counters) */
	if (reserved || nglobals > VSXD_COUNTERS_MAX || nreasons > VSXD_COUNTERS_MAX ||
	    nvms > VSXD_STATE_MAX_VMS || nvms > (r.n - VSXD_STATE_HDR) / 34) {
		vsxd__why_set(why, whylen, "counters record counts out of range (%u globals, "
			"%u reasons, %u VMs)", nglobals, nreasons, nvms);
		return -EBADMSG;
	}
	for (unsigned i = 0; i < nglobals; i++) {
		uint64_t v = get_le(&r, 8);

		if (i < VSXD_CNT_COUNT)
			out->c[i] = v;
	}
	out->nreasons = nreasons;
	if (nvms && !(out->vms = calloc(nvms, sizeof(*out->vms)))) {
		vsxd__why_set(why, whylen, "out of memory");
		memset(out, 0, sizeof(*out));
		return -ENOMEM;
	}
	out->nvms = nvms;
	for (unsigned i = 0; i < nvms && !r.err; i++) {
		struct vsxd_counters_vm *v = &out->vms[i];

		get_str(&r, v->name, sizeof(v->name));
		if (!r.err && !vm_name_ok(v->name))
			r.err = "a bad VM name";
		for (unsigned j = 0; j < i && !r.err; j++)
			if (!strcmp(out->vms[j].name, v->name))
				r.err = "a VM named twice";
		v->opened = get_le(&r, 8);
		v->to_guest = get_le(&r, 8);
		v->from_guest = get_le(&r, 8);
		v->credit_stalls = get_le(&r, 8);
		for (unsigned k = 0; k < nreasons; k++)
			v->closed[k] = get_le(&r, 8);
		for (unsigned k = 0; k < nreasons; k++)
			v->reset[k] = get_le(&r, 8);
		for (unsigned k = 0; k < nreasons; k++)
			v->refused[k] = get_le(&r, 8);
		if (r.err)
			vsxd__why_set(why, whylen, "counters record VM %u: %s", i, r.err);
	}
	if (r.err)
		goto fail;
	if (r.off != r.n) {
		vsxd__why_set(why, whylen, "counters record has %zu bytes after its last VM",
			r.n - r.off);
		goto fail;
	}
	return 0;

fail:
	vsxd_counters_clear(out);
	return -EBADMSG;
}

void vsxd_counters_clear(struct vsxd_counters *c)
{
	free(c->vms);
	memset(c, 0, sizeof(*c));
}

/* ---- Records in memfds ---- */

/* @len bytes of @buf in a new memfd (close-on-exec), or a negative errno. */
static int bytes_memfd(const char *name, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int fd = memfd_create(name, MFD_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	while (len && r == 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? -errno : -EIO;
		else
			p += n, len -= (size_t)n;
	}
	if (r < 0)
		close(fd);
	return r < 0 ? r : fd;
}

long vsxd__record_slurp(int fd, const char *what, uint8_t **out, char *why, size_t whylen)
{
	struct stat st;
	uint8_t *buf;
	ssize_t n;

	*out = NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		vsxd__why_set(why, whylen, "the descriptor of the %s is not a file", what);
		return -EINVAL;
	}
	if (st.st_size > (off_t)VSXD_STATE_MAX_LEN) {
		vsxd__why_set(why, whylen, "the %s takes %lld bytes, more than a record can",
			what, (long long)st.st_size);
		return -EFBIG;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		vsxd__why_set(why, whylen, "out of memory");
		return -ENOMEM;
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n < 0) {
		vsxd__why_set(why, whylen, "reading the %s: %s", what, strerror(errno));
		free(buf);
		return -EIO;
	}
	*out = buf;
	return (long)n;
}

int vsxd__record_memfd(const char *name, uint8_t *buf, long n)
{
	int fd = n < 0 ? (int)n : bytes_memfd(name, buf, (size_t)n);

	free(buf);
	return fd;
}

int vsxd_state_memfd(const struct vsxd_state *s)
{
	size_t len = vsxd_state_size(s);
	uint8_t *buf = malloc(len);

	return vsxd__record_memfd("vsxd-state", buf, buf ? vsxd_state_encode(s, buf, len) : -ENOMEM);
}

/* The record at the start of the state memfd when the connection slots
 * follow it (state_slots.h): as many bytes as its header says. */
static long slurp_head(int fd, uint8_t **out, char *why, size_t whylen)
{
	uint8_t hdr[VSXD_STATE_HDR], *buf;
	uint32_t len;
	ssize_t n;

	*out = NULL;
	n = pread(fd, hdr, sizeof(hdr), 0);
	if (n != (ssize_t)sizeof(hdr)) {
		vsxd__why_set(why, whylen, "reading the state record: %s",
			      n < 0 ? strerror(errno) : "short");
		return -EIO;
	}
	len = (uint32_t)hdr[12] | (uint32_t)hdr[13] << 8 | (uint32_t)hdr[14] << 16 |
	      (uint32_t)hdr[15] << 24;
	if (len < VSXD_STATE_HDR || len > VSXD_STATE_MAX_LEN)
		len = VSXD_STATE_HDR;   /* (the decoder says what is wrong) */
	buf = malloc(len);
	if (!buf) {
		vsxd__why_set(why, whylen, "out of memory");
		return -ENOMEM;
	}
	n = pread(fd, buf, len, 0);
	if (n < 0) {
		vsxd__why_set(why, whylen, "reading the state record: %s", strerror(errno));
		free(buf);
		return -EIO;
	}
	*out = buf;
	return (long)n;
}

int vsxd_state_read(int fd, struct vsxd_state *out, char *why, size_t whylen)
{
	struct stat st;
	uint8_t *buf;
	long n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		 (uint64_t)st.st_size > VSXD_STATE_MAX_LEN
		 ? slurp_head(fd, &buf, why, whylen)
		 : vsxd__record_slurp(fd, "state record", &buf, why, whylen);
	int r;

	memset(out, 0, sizeof(*out));
	r = n < 0 ? (int)n : vsxd_state_decode(buf, (size_t)n, out, why, whylen);
	free(buf);
	return r;
}

int vsxd_counters_memfd(const struct vsxd_counters *c)
{
	size_t len = vsxd_counters_size(c);
	uint8_t *buf = malloc(len);

	return vsxd__record_memfd("vsxd-counters", buf,
			     buf ? vsxd_counters_encode(c, buf, len) : -ENOMEM);
}

int vsxd_counters_read(int fd, struct vsxd_counters *out, char *why, size_t whylen)
{
	uint8_t *buf;
	long n = vsxd__record_slurp(fd, "counters record", &buf, why, whylen);
	int r;

	memset(out, 0, sizeof(*out));
	r = n < 0 ? (int)n : vsxd_counters_decode(buf, (size_t)n, out, why, whylen);
	free(buf);
	return r;
}
