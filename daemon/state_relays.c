/*
 * The relays record (state.h): the relays of vsxd's forwards that go on
 * across a handoff or a restart under a store. As the state record, it
 * comes from a memfd the reader did not write itself: every value is
 * checked (fuzz/fuzz_state.c decodes it too).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "state-int.h"

/* The fewest bytes of an entry after its elen: the id, the forward's and
 * the client's str lengths, the flags, each side's kind and str length,
 * each direction's flags, bytes and len. */
#define ENTRY_MIN (8u + 1 + 1 + 1 + 2 * (1 + 1) + 2 * (1 + 8 + 4))

static bool forward_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > VSXD_STATE_NAME_MAX)
		return false;
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			return false;
	return true;
}

/* Why @r (entry @i of @rs) cannot be in a record, or NULL. */
static const char *relay_bad(const struct vsxd_relays *rs, unsigned i)
{
	const struct vsxd_state_relay *r = &rs->relays[i];

	if (!r->id)
		return "a relay id 0";
	if (!forward_ok(r->forward))
		return "a bad forward name";
	if (strlen(r->client) > VSXD_FDNAME_MAX)
		return "a client address too long";
	for (unsigned k = 0; k < 2; k++) {
		const struct vsxd_relay_dir *d = &r->dir[k];

		if (r->kind[k] != VSXD_RELAY_PLAIN && r->kind[k] != VSXD_RELAY_LIBVSX)
			return "a side of an unknown kind";
		if (!vsxd_fdname_ok(r->fd[k]))
			return "a bad descriptor name";
		if (d->len > VSXD_RELAY_HELD_MAX || (d->len && !d->data))
			return "more bytes held than a relay holds";
		if (d->shut && (!d->eof || d->len))
			return "an EOF passed on before the bytes ahead of it";
	}
	if (!strcmp(r->fd[0], r->fd[1]))
		return "a descriptor named twice";
	for (unsigned j = 0; j < i; j++) {
		const struct vsxd_state_relay *o = &rs->relays[j];

		if (o->id == r->id)
			return "a relay id twice";
		for (unsigned k = 0; k < 2; k++)
			if (!strcmp(o->fd[k], r->fd[0]) || !strcmp(o->fd[k], r->fd[1]))
				return "a descriptor named twice";
	}
	return NULL;
}

static void put_relay(struct wr *w, const struct vsxd_state_relay *r)
{
	size_t at = w->n;

	put_le(w, 0, 4);  /* elen, filled in */
	put_le(w, r->id, 8);
	put_str(w, r->forward);
	put_str(w, r->client);
	put_le(w, r->auth ? 1 : 0, 1);
	for (unsigned k = 0; k < 2; k++) {
		put_le(w, r->kind[k], 1);
		put_str(w, r->fd[k]);
	}
	for (unsigned k = 0; k < 2; k++) {
		const struct vsxd_relay_dir *d = &r->dir[k];

		put_le(w, (d->eof ? 1 : 0) | (d->shut ? 2 : 0), 1);
		put_le(w, d->bytes, 8);
		put_le(w, d->len, 4);
		put(w, d->data, d->len);
	}
	if (w->p && w->n <= w->cap) {
		size_t elen = w->n - at - 4;

		for (unsigned i = 0; i < 4; i++)
			w->p[at + i] = (uint8_t)(elen >> (8 * i));
	}
}

static void put_relays(struct wr *w, const struct vsxd_relays *rs)
{
	put(w, VSXD_RELAYS_MAGIC, 8);
	put_le(w, VSXD_RELAYS_VERSION, 4);
	put_le(w, 0, 4);  /* length, filled in */
	put_le(w, 0, 4);  /* crc, filled in */
	put_le(w, rs->nrelays, 4);
	put_le(w, rs->nended, 4);
	put_le(w, 0, 4);
	for (unsigned i = 0; i < rs->nrelays; i++)
		put_relay(w, &rs->relays[i]);
}

size_t vsxd_relays_size(const struct vsxd_relays *rs)
{
	struct wr w = { 0 };

	put_relays(&w, rs);
	return w.n;
}

long vsxd_relays_encode(const struct vsxd_relays *rs, void *buf, size_t cap)
{
	struct wr w = { .p = buf, .cap = cap };
	size_t len;

	if (rs->nrelays > VSXD_RELAYS_MAX || (rs->nrelays && !rs->relays))
		return -EINVAL;
	for (unsigned i = 0; i < rs->nrelays; i++)
		if (relay_bad(rs, i))
			return -EINVAL;
	len = vsxd_relays_size(rs);
	if (len > VSXD_STATE_MAX_LEN)
		return -EINVAL;
	if (len > cap)
		return -ENOSPC;
	put_relays(&w, rs);
	vsxd__seal(buf, len, 20);
	return (long)len;
}

static void get_relay(struct rd *r, struct vsxd_state_relay *e)
{
	size_t elen = get_le(r, 4), end;
	unsigned flags;

	if (r->err)
		return;
	if (elen < ENTRY_MIN || elen > r->n - r->off) {
		r->err = "an entry's length out of range";
		return;
	}
	end = r->off + elen;
	e->id = get_le(r, 8);
	get_str(r, e->forward, sizeof(e->forward));
	get_str(r, e->client, sizeof(e->client));
	flags = get_le(r, 1);
	if (flags & ~1u)
		r->err = "unknown relay flags";
	e->auth = flags & 1;
	for (unsigned k = 0; k < 2; k++) {
		e->kind[k] = get_le(r, 1);
		get_str(r, e->fd[k], sizeof(e->fd[k]));
	}
	for (unsigned k = 0; k < 2; k++) {
		struct vsxd_relay_dir *d = &e->dir[k];

		flags = get_le(r, 1);
		if (flags & ~3u)
			r->err = r->err ? r->err : "unknown direction flags";
		d->eof = flags & 1;
		d->shut = flags & 2;
		d->bytes = get_le(r, 8);
		d->len = (uint32_t)get_le(r, 4);
		if (d->len > VSXD_RELAY_HELD_MAX && !r->err)
			r->err = "more bytes held than a relay holds";
		d->data = get_raw(r, d->len);
	}
	if (!r->err && r->off > end)
		r->err = "an entry longer than its length";
	if (!r->err)
		r->off = end;  /* a later release's fields, skipped */
}

int vsxd_relays_decode(const void *buf, size_t len, struct vsxd_relays *out,
		       char *why, size_t whylen)
{
	uint32_t version, n, nended, reserved;
	const char *bad;
	struct rd r;
	int err;

	memset(out, 0, sizeof(*out));
	err = vsxd__record_open(&r, buf, len, VSXD_RELAYS_MAGIC, "relays",
				VSXD_RELAYS_VERSION, VSXD_RELAYS_VERSION, 20, &version,
				why, whylen);
	if (err)
		return err;
	n = get_le(&r, 4);
	nended = get_le(&r, 4);
	reserved = get_le(&r, 4);
	if (reserved || n > VSXD_RELAYS_MAX ||
	    n > (r.n - VSXD_STATE_HDR) / (4 + ENTRY_MIN)) {
		vsxd__why_set(why, whylen, "relays record counts out of range (%u relays)", n);
		return -EBADMSG;
	}
	out->nended = nended;
	if (n && !(out->relays = calloc(n, sizeof(*out->relays)))) {
		vsxd__why_set(why, whylen, "out of memory");
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		out->nrelays++;
		get_relay(&r, &out->relays[i]);
		bad = r.err ? r.err : relay_bad(out, i);
		if (bad) {
			vsxd__why_set(why, whylen, "relays record relay %u: %s", i, bad);
			goto fail;
		}
	}
	if (r.off != r.n) {
		vsxd__why_set(why, whylen, "relays record has %zu bytes after its last relay",
			      r.n - r.off);
		goto fail;
	}
	return 0;

fail:
	vsxd_relays_clear(out);
	return -EBADMSG;
}

void vsxd_relays_clear(struct vsxd_relays *rs)
{
	for (unsigned i = 0; i < rs->nrelays; i++)
		for (unsigned k = 0; k < 2; k++)
			free(rs->relays[i].dir[k].data);
	free(rs->relays);
	memset(rs, 0, sizeof(*rs));
}

int vsxd_relays_memfd(const struct vsxd_relays *rs)
{
	size_t len = vsxd_relays_size(rs);
	uint8_t *buf = malloc(len);

	return vsxd__record_memfd("vsxd-relays", buf,
				  buf ? vsxd_relays_encode(rs, buf, len) : -ENOMEM);
}

int vsxd_relays_read(int fd, struct vsxd_relays *out, char *why, size_t whylen)
{
	uint8_t *buf;
	long n = vsxd__record_slurp(fd, "relays record", &buf, why, whylen);
	int r;

	memset(out, 0, sizeof(*out));
	r = n < 0 ? (int)n : vsxd_relays_decode(buf, (size_t)n, out, why, whylen);
	free(buf);
	return r;
}
