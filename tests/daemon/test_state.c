/*
 * vsxd's restart state record (daemon/state.c, format in state.h): a
 * record read back is the one written; every truncation, every flipped
 * byte, another version, a bad name or count is refused by value with a
 * reason, never read as something else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../daemon/state.h"

static struct vsxd_state_conn conns[3] = {
	{ .id = 7, .guest_cid = 3, .peer_cid = 2, .guest_port = 1234,
	  .peer_port = 5000, .type = 1 },
	{ .id = 9, .guest_cid = 3, .peer_cid = 4, .guest_port = 40000,
	  .peer_port = 22, .type = 2 },
	{ .id = 1ull << 40, .guest_cid = 3, .peer_cid = 2, .guest_port = 1,
	  .peer_port = 0xffffffffu, .type = 1 },
};

/* Two VMs: one with three connections and two regions, one with none. */
static void sample(struct vsxd_state *s, struct vsxd_state_vm vms[2])
{
	memset(vms, 0, 2 * sizeof(vms[0]));
	strcpy(vms[0].name, "web-1");
	strcpy(vms[0].conn, "vm.web-1.conn");
	vms[0].cid = 3;
	vms[0].features = 0x130000000ull;
	vms[0].protocol_features = 0x203;
	vms[0].nregions = 2;
	vms[0].region[0] = (struct vsxd_state_region){ 0, 0xa0000, 0x7f0000000000ull, 0,
						       "vm.web-1.mem0" };
	vms[0].region[1] = (struct vsxd_state_region){ 0xc0000, 0x7ff40000, 0x7f00000c0000ull,
						       0xc0000, "vm.web-1.mem1" };
	vms[0].nqueues = 2;
	vms[0].queue[0] = (struct vsxd_state_queue){ 0, true, 128, 0x1000, 0x1800, 0x2000,
						     "vm.web-1.kick0", "vm.web-1.call0" };
	vms[0].queue[1] = (struct vsxd_state_queue){ 1, false, 32768, 0x10000, 0x90000,
						     0xa0000, "vm.web-1.kick1", "" };
	vms[0].nconns = 3;
	vms[0].conns = conns;
	strcpy(vms[1].name, "cid5");
	strcpy(vms[1].conn, "c");
	vms[1].cid = 0xfffffffeull;
	vms[1].nregions = 1;
	vms[1].region[0] = (struct vsxd_state_region){ 0, 4096, 4096, 0, "m" };
	vms[1].nqueues = 1;
	vms[1].queue[0] = (struct vsxd_state_queue){ 2, true, 1, 0, 16, 32, "k", "c" };
	s->generation = 42;
	s->nvms = 2;
	s->vms = vms;
}

static uint8_t *encode(const struct vsxd_state *s, size_t *len)
{
	size_t n = vsxd_state_size(s);
	uint8_t *buf = malloc(n);
	long r;

	cr_assert(buf);
	r = vsxd_state_encode(s, buf, n);
	cr_assert_eq(r, (long)n, "encode: %ld, size %zu", r, n);
	*len = n;
	return buf;
}

static void same_vm(const struct vsxd_state_vm *a, const struct vsxd_state_vm *b)
{
	cr_assert_str_eq(a->name, b->name);
	cr_assert_str_eq(a->conn, b->conn);
	cr_assert_eq(a->cid, b->cid);
	cr_assert_eq(a->features, b->features);
	cr_assert_eq(a->protocol_features, b->protocol_features);
	cr_assert_eq(a->nregions, b->nregions);
	cr_assert_eq(memcmp(a->region, b->region, a->nregions * sizeof(a->region[0])), 0);
	cr_assert_eq(a->nqueues, b->nqueues);
	for (unsigned i = 0; i < a->nqueues; i++) {
		cr_assert_eq(a->queue[i].index, b->queue[i].index);
		cr_assert_eq(a->queue[i].enabled, b->queue[i].enabled);
		cr_assert_eq(a->queue[i].num, b->queue[i].num);
		cr_assert_eq(a->queue[i].desc, b->queue[i].desc);
		cr_assert_eq(a->queue[i].avail, b->queue[i].avail);
		cr_assert_eq(a->queue[i].used, b->queue[i].used);
		cr_assert_str_eq(a->queue[i].kick, b->queue[i].kick);
		cr_assert_str_eq(a->queue[i].call, b->queue[i].call);
	}
	cr_assert_eq(a->nconns, b->nconns);
	if (a->nconns)
		cr_assert_eq(memcmp(a->conns, b->conns, a->nconns * sizeof(a->conns[0])), 0);
}

/* Recompute length and crc after editing an encoded record. */
static void reseal(uint8_t *buf, size_t len)
{
	uint32_t crc = vsxd_crc32(buf + VSXD_STATE_HDR, len - VSXD_STATE_HDR);

	for (unsigned i = 0; i < 4; i++) {
		buf[12 + i] = (uint8_t)(len >> (8 * i));
		buf[16 + i] = (uint8_t)(crc >> (8 * i));
	}
}

static int decode(const uint8_t *buf, size_t len, char *why, size_t whylen)
{
	struct vsxd_state d;
	int r = vsxd_state_decode(buf, len, &d, why, whylen);

	if (r == 0)
		vsxd_state_clear(&d);
	else
		cr_assert(d.nvms == 0 && d.vms == NULL && d.generation == 0);
	return r;
}

Test(state, crc32_is_zlibs)
{
	/* the check value of CRC-32/ISO-HDLC */
	cr_assert_eq(vsxd_crc32("123456789", 9), 0xcbf43926u);
	cr_assert_eq(vsxd_crc32("", 0), 0);
}

Test(state, round_trip)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	buf = encode(&s, &len);
	cr_assert_eq(memcmp(buf, "VSXDSTAT", 8), 0);
	cr_assert_eq(buf[8], 1); /* version */
	cr_assert_eq(vsxd_state_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.generation, 42);
	cr_assert_eq(d.nvms, 2);
	same_vm(&vms[0], &d.vms[0]);
	same_vm(&vms[1], &d.vms[1]);
	vsxd_state_clear(&d);
	cr_assert_eq(d.nvms, 0);
	cr_assert_null(d.vms);
	free(buf);
}

Test(state, empty_record)
{
	struct vsxd_state s = { .generation = 1 }, d;
	uint8_t *buf;
	size_t len;

	buf = encode(&s, &len);
	cr_assert_eq(len, VSXD_STATE_HDR);
	cr_assert_eq(vsxd_state_decode(buf, len, &d, NULL, 0), 0);
	cr_assert_eq(d.generation, 1);
	cr_assert_eq(d.nvms, 0);
	free(buf);
}

Test(state, small_buffer_is_enospc_and_untouched)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	size_t n;
	uint8_t *buf;

	sample(&s, vms);
	n = vsxd_state_size(&s);
	buf = malloc(n);
	memset(buf, 0xa5, n);
	cr_assert_eq(vsxd_state_encode(&s, buf, n - 1), -ENOSPC);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(buf[i], 0xa5);
	free(buf);
}

Test(state, encode_refuses_what_decode_would)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char big[64];

	sample(&s, vms);
	strcpy(vms[0].region[1].fd, "a:b");           /* ':' is not an FDNAME */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	sample(&s, vms);
	vms[1].queue[0].num = 3;                       /* not a power of two */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	sample(&s, vms);
	strcpy(vms[1].name, "a b");
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	sample(&s, vms);
	vms[0].queue[1].index = 0;                     /* twice */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	sample(&s, vms);
	vms[0].nregions = 0;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
}

Test(state, every_truncation_is_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	buf = encode(&s, &len);
	for (size_t n = 0; n < len; n++) {
		char why[128] = "";
		int r = decode(buf, n, why, sizeof(why));

		cr_assert_eq(r, -EBADMSG, "%zu of %zu bytes: %d", n, len, r);
		cr_assert(why[0], "no reason for %zu bytes", n);
	}
	free(buf);
}

Test(state, every_flipped_byte_is_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	buf = encode(&s, &len);
	for (size_t i = 0; i < len; i++) {
		int r;

		/* the generation is not under the crc: any value reads */
		if (i >= 24 && i < 32)
			continue;
		buf[i] ^= 0x10;
		r = decode(buf, len, NULL, 0);
		cr_assert(r == -EBADMSG || r == -EPROTONOSUPPORT,
			  "byte %zu flipped: %d", i, r);
		buf[i] ^= 0x10;
	}
	cr_assert_eq(decode(buf, len, NULL, 0), 0);
	free(buf);
}

Test(state, other_version_is_named)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	buf = encode(&s, &len);
	buf[8] = 2;
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EPROTONOSUPPORT);
	cr_assert(strstr(why, "version 2"), "%s", why);
	free(buf);
}

Test(state, trailing_bytes_are_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf, *big;
	size_t len;

	sample(&s, vms);
	buf = encode(&s, &len);
	big = calloc(1, len + 5);
	memcpy(big, buf, len);
	/* bytes beyond the record's length are not its own: ignored */
	cr_assert_eq(decode(big, len + 5, why, sizeof(why)), 0, "%s", why);
	/* inside its length, they are an error */
	reseal(big, len + 5);
	cr_assert_eq(decode(big, len + 5, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "5 bytes after"), "%s", why);
	free(big);
	free(buf);
}

/* An edit that keeps the crc right is still checked value by value. */
Test(state, resealed_bad_values_are_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char why[128];
	uint8_t *buf;
	size_t len, off;

	sample(&s, vms);
	vms[0].nconns = 0;
	vms[1].nconns = 0;
	buf = encode(&s, &len);
	/* VM 0: name "web-1" at 32 (length byte, 5 bytes) */
	cr_assert_eq(buf[32], 5);
	buf[34] = ':';
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "VM 0: bad VM name"), "%s", why);
	buf[34] = 'e';
	/* nconns of VM 0: after name (6), conn (14), cid (8), features (16),
	 * counts (4) */
	off = 32 + 6 + 14 + 8 + 16 + 4;
	buf[off + 3] = 0x7f;  /* two billion connections in a few bytes */
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "connection count"), "%s", why);
	buf[off + 3] = 0;
	buf[off] = 200;       /* more than the bytes left can hold */
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "truncated"), "%s", why);
	buf[off] = 0;
	buf[32 + 6 + 14 + 8 + 16] = 9;  /* nine regions */
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "region count"), "%s", why);
	buf[32 + 6 + 14 + 8 + 16] = 2;
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), 0, "%s", why);
	free(buf);
}

Test(state, same_vm_twice_is_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char why[128];
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	strcpy(vms[1].name, "web-1");
	buf = encode(&s, &len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "twice"), "%s", why);
	free(buf);
}

Test(state, fdname_rules)
{
	char longest[VSXD_FDNAME_MAX + 2];

	cr_assert(vsxd_fdname_ok("vm.web-1.mem0"));
	cr_assert(vsxd_fdname_ok("a b"));            /* printable, space included */
	cr_assert_not(vsxd_fdname_ok(""));
	cr_assert_not(vsxd_fdname_ok("a:b"));
	cr_assert_not(vsxd_fdname_ok("a\nb"));
	cr_assert_not(vsxd_fdname_ok("\x7f"));
	memset(longest, 'x', sizeof(longest));
	longest[VSXD_FDNAME_MAX] = '\0';
	cr_assert(vsxd_fdname_ok(longest));
	longest[VSXD_FDNAME_MAX] = 'x';
	longest[VSXD_FDNAME_MAX + 1] = '\0';
	cr_assert_not(vsxd_fdname_ok(longest));
}
