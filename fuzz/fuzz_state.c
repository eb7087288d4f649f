/*
 * Fuzz target: vsxd's restart state record (daemon/state.c), read from a
 * memfd that outlived a crash. The first input byte picks the mode: odd,
 * the rest is a record as found; even, the harness first writes a right
 * length and crc into the rest's header, so the fuzzer gets past the
 * checksum to the fields. A current record that decodes must encode to
 * exactly its own bytes (one meaning per record), and decode again; an
 * older one (versions 1 to 3 are read, never written) that decodes must
 * encode as a current record that decodes to the same VMs, unless it is
 * version 1's, whose connections have no state to write. With bit 1 of the first byte set, the
 * rest is a counters record (state.h) instead, sealed the same way when
 * even (its crc covers bytes 20 on); one that decodes must encode and
 * decode again to the same counters. With bit 2 set, the rest is a
 * relays record (state.h), sealed the same way when even; one that
 * decodes must encode to exactly its own bytes (but for an entry's
 * fields a later release would add, which it skips) and decode again.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/state.h"
#include "fuzz.h"

/* A right length and crc (of the bytes from @from on) into the header of
 * the record @buf (@n bytes), as every record has them. */
static void reseal(uint8_t *buf, size_t n, size_t from)
{
	uint32_t crc;

	if (n < VSXD_STATE_HDR)
		return;
	crc = vsxd_crc32(buf + from, n - from);
	for (unsigned i = 0; i < 4; i++) {
		buf[12 + i] = (uint8_t)(n >> (8 * i));
		buf[16 + i] = (uint8_t)(crc >> (8 * i));
	}
}

static void counters(uint8_t *buf, size_t n, bool seal)
{
	struct vsxd_counters c, d;
	uint8_t *out;
	long len;

	if (seal)
		reseal(buf, n, 20);
	if (vsxd_counters_decode(buf, n, &c, NULL, 0) != 0)
		return;
	len = (long)vsxd_counters_size(&c);
	out = malloc((size_t)len);
	if (!out || vsxd_counters_encode(&c, out, (size_t)len) != len)
		abort(); /* a decoded record is a valid one */
	if (vsxd_counters_decode(out, (size_t)len, &d, NULL, 0) != 0 ||
	    d.nvms != c.nvms || d.nreasons != c.nreasons || memcmp(d.c, c.c, sizeof(c.c)))
		abort();
	for (unsigned i = 0; i < c.nvms; i++)
		if (strcmp(d.vms[i].name, c.vms[i].name) ||
		    d.vms[i].to_guest != c.vms[i].to_guest)
			abort();
	vsxd_counters_clear(&d);
	vsxd_counters_clear(&c);
	free(out);
}

static void relays(uint8_t *buf, size_t n, bool seal)
{
	struct vsxd_relays c, d;
	uint8_t *out;
	long len;

	if (seal)
		reseal(buf, n, 20);
	if (vsxd_relays_decode(buf, n, &c, NULL, 0) != 0)
		return;
	len = (long)vsxd_relays_size(&c);
	out = malloc((size_t)len);
	if (!out || vsxd_relays_encode(&c, out, (size_t)len) != len)
		abort(); /* a decoded record is a valid one */
	if (vsxd_relays_decode(out, (size_t)len, &d, NULL, 0) != 0 ||
	    d.nrelays != c.nrelays || d.nended != c.nended)
		abort();
	for (unsigned i = 0; i < c.nrelays; i++) {
		const struct vsxd_state_relay *a = &c.relays[i], *b = &d.relays[i];

		if (a->id != b->id || strcmp(a->forward, b->forward) ||
		    strcmp(a->fd[1], b->fd[1]) || a->dir[0].len != b->dir[0].len ||
		    a->dir[1].bytes != b->dir[1].bytes ||
		    (a->dir[1].len && memcmp(a->dir[1].data, b->dir[1].data, a->dir[1].len)))
			abort();
	}
	vsxd_relays_clear(&d);
	vsxd_relays_clear(&c);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vsxd_state s, t;
	uint8_t *buf, *out;
	size_t n;
	long len;

	if (!size)
		return 0;
	n = size - 1;
	buf = malloc(n ? n : 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, n);
	if (data[0] & 4) {
		relays(buf, n, !(data[0] & 1));
		free(buf);
		return 0;
	}
	if (data[0] & 2) {
		counters(buf, n, !(data[0] & 1));
		free(buf);
		return 0;
	}
	if (!(data[0] & 1))
		reseal(buf, n, VSXD_STATE_HDR);
	if (vsxd_state_decode(buf, n, &s, NULL, 0) == 0) {
		bool current = s.version == VSXD_STATE_VERSION;

		len = vsxd_state_encode(&s, NULL, 0);
		if (len == -EINVAL && s.version == 1) {
			vsxd_state_clear(&s);
			free(buf);
			return 0;
		}
		if (len != -ENOSPC)
			abort(); /* a decoded record is a valid one */
		len = (long)vsxd_state_size(&s);
		out = malloc((size_t)len);
		if (!out || vsxd_state_encode(&s, out, (size_t)len) != len)
			abort();
		/* the same bytes: nothing read was ignored or reinterpreted */
		if (current && ((size_t)len > n || memcmp(out, buf, (size_t)len)))
			abort();
		if (vsxd_state_decode(out, (size_t)len, &t, NULL, 0) != 0 ||
		    t.nvms != s.nvms || t.generation != s.generation ||
		    t.version != VSXD_STATE_VERSION)
			abort();
		for (unsigned i = 0; i < s.nvms; i++)
			if (t.vms[i].nconns != s.vms[i].nconns || t.vms[i].cid != s.vms[i].cid ||
			    strcmp(t.vms[i].name, s.vms[i].name))
				abort();
		vsxd_state_clear(&t);
		free(out);
		vsxd_state_clear(&s);
	}
	free(buf);
	return 0;
}
