/*
 * vsxd's relays record (daemon/state_relays.c, format in state.h): a
 * record read back is the one written; every truncation, every flipped
 * byte, another version and every bad value is refused by value with a
 * reason; fields a later release adds to an entry are skipped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../daemon/state.h"

static uint8_t to_target[] = "bytes the target did not take yet";
static uint8_t big[VSXD_RELAY_HELD_MAX];

/* Two relays: one holding bytes each way, its client half-closed, one
 * with a libvsx target whose EOF was passed on. */
static void sample(struct vsxd_relays *rs, struct vsxd_state_relay r[2])
{
	memset(r, 0, 2 * sizeof(*r));
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	r[0] = (struct vsxd_state_relay){
		.id = 41, .forward = "web-in", .client = "tcp:127.0.0.1:40000",
		.kind = { VSXD_RELAY_PLAIN, VSXD_RELAY_PLAIN },
		.fd = { "relay.41.0", "relay.41.1" },
		.dir = {
			{ .eof = true, .bytes = 1ull << 33, .len = sizeof(to_target) - 1,
			  .data = to_target },
			{ .bytes = 5, .len = sizeof(big), .data = big },
		},
	};
	r[1] = (struct vsxd_state_relay){
		.id = 43, .forward = "tcp:[::1]:5000", .client = "", .auth = true,
		.kind = { VSXD_RELAY_PLAIN, VSXD_RELAY_LIBVSX },
		.fd = { "relay.43.0", "relay.43.1" },
		.dir = { { .bytes = 9 }, { .eof = true, .shut = true, .bytes = 12 } },
	};
	*rs = (struct vsxd_relays){ .nended = 3, .nrelays = 2, .relays = r };
}

static uint8_t *encode(const struct vsxd_relays *rs, size_t *len)
{
	size_t n = vsxd_relays_size(rs);
	uint8_t *buf = malloc(n);
	long r;

	cr_assert(buf);
	r = vsxd_relays_encode(rs, buf, n);
	cr_assert_eq(r, (long)n, "encode: %ld, size %zu", r, n);
	*len = n;
	return buf;
}

static void reseal(uint8_t *buf, size_t len)
{
	uint32_t crc = vsxd_crc32(buf + 20, len - 20);

	for (unsigned i = 0; i < 4; i++) {
		buf[12 + i] = (uint8_t)(len >> (8 * i));
		buf[16 + i] = (uint8_t)(crc >> (8 * i));
	}
}

static int decode(const uint8_t *buf, size_t len, char *why, size_t whylen)
{
	struct vsxd_relays d;
	int r = vsxd_relays_decode(buf, len, &d, why, whylen);

	if (r == 0)
		vsxd_relays_clear(&d);
	else
		cr_assert(d.nrelays == 0 && d.relays == NULL && d.nended == 0);
	return r;
}

Test(relays, round_trip)
{
	struct vsxd_state_relay r[2];
	struct vsxd_relays rs, d;
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	sample(&rs, r);
	buf = encode(&rs, &len);
	cr_assert_eq(vsxd_relays_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.nrelays, 2);
	cr_assert_eq(d.nended, 3);
	cr_assert_eq(d.relays[0].id, 41);
	cr_assert_str_eq(d.relays[0].forward, "web-in");
	cr_assert_str_eq(d.relays[0].client, "tcp:127.0.0.1:40000");
	cr_assert_str_eq(d.relays[0].fd[1], "relay.41.1");
	cr_assert(d.relays[0].dir[0].eof && !d.relays[0].dir[0].shut);
	cr_assert_eq(d.relays[0].dir[0].bytes, 1ull << 33);
	cr_assert_eq(d.relays[0].dir[0].len, sizeof(to_target) - 1);
	cr_assert_eq(memcmp(d.relays[0].dir[0].data, to_target, sizeof(to_target) - 1), 0);
	cr_assert_eq(d.relays[0].dir[1].len, sizeof(big));
	cr_assert_eq(memcmp(d.relays[0].dir[1].data, big, sizeof(big)), 0);
	cr_assert(!d.relays[0].auth && d.relays[1].auth);
	cr_assert_eq(d.relays[1].kind[1], VSXD_RELAY_LIBVSX);
	cr_assert_str_eq(d.relays[1].client, "");
	cr_assert(d.relays[1].dir[1].shut && d.relays[1].dir[1].eof);
	cr_assert_eq(d.relays[1].dir[1].bytes, 12);
	cr_assert_eq(d.relays[1].dir[0].len, 0);
	vsxd_relays_clear(&d);
	free(buf);
}

Test(relays, through_a_memfd)
{
	struct vsxd_state_relay r[2];
	struct vsxd_relays rs, d;
	char why[128] = "";
	int fd;

	sample(&rs, r);
	fd = vsxd_relays_memfd(&rs);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(vsxd_relays_read(fd, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.relays[1].id, 43);
	vsxd_relays_clear(&d);
	close(fd);
}

Test(relays, every_truncation_and_flipped_byte_is_refused)
{
	struct vsxd_state_relay r[2];
	struct vsxd_relays rs;
	uint8_t *buf;
	size_t len;

	sample(&rs, r);
	r[0].dir[1].len = 100;   /* (a shorter record: every byte flipped below) */
	buf = encode(&rs, &len);
	for (size_t n = 0; n < len; n++) {
		char why[128] = "";

		cr_assert_eq(decode(buf, n, why, sizeof(why)), -EBADMSG, "%zu", n);
		cr_assert(why[0], "no reason for %zu bytes", n);
	}
	for (size_t i = 0; i < len; i++) {
		int d;

		buf[i] ^= 0x10;
		d = decode(buf, len, NULL, 0);
		cr_assert(d == -EBADMSG || d == -EPROTONOSUPPORT, "byte %zu flipped: %d", i, d);
		buf[i] ^= 0x10;
	}
	cr_assert_eq(decode(buf, len, NULL, 0), 0);
	buf[8] = 2;   /* another version */
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, NULL, 0), -EPROTONOSUPPORT);
	free(buf);
}

Test(relays, later_releases_fields_are_skipped)
{
	struct vsxd_state_relay r[2];
	struct vsxd_relays rs, d;
	char why[128] = "";
	uint8_t *buf, *more;
	size_t len, e0;
	uint32_t elen;

	sample(&rs, r);
	rs.nrelays = 1;
	r[0].dir[1].len = 0;
	buf = encode(&rs, &len);
	/* the one entry gains 6 bytes at its end */
	more = calloc(1, len + 6);
	cr_assert(more);
	memcpy(more, buf, len);
	memset(more + len, 0xee, 6);
	e0 = 32;
	memcpy(&elen, more + e0, 4);
	elen += 6;
	memcpy(more + e0, &elen, 4);
	reseal(more, len + 6);
	cr_assert_eq(vsxd_relays_decode(more, len + 6, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.relays[0].dir[0].len, sizeof(to_target) - 1);
	vsxd_relays_clear(&d);
	/* an entry shorter than its fields is not */
	elen -= 7;
	memcpy(more + e0, &elen, 4);
	reseal(more, len + 6);
	cr_assert_eq(decode(more, len + 6, why, sizeof(why)), -EBADMSG);
	free(more);
	free(buf);
}

/* The offset of @what in @buf (@len bytes). */
static size_t at(const uint8_t *buf, size_t len, const char *what)
{
	const uint8_t *p = memmem(buf, len, what, strlen(what));

	cr_assert(p, "%s not in the record", what);
	return (size_t)(p - buf);
}

Test(relays, bad_values_are_refused_by_value)
{
	/* each: a string of the sample record, an offset from it, a byte
	 * written there, and the reason the decoder gives */
	static const struct {
		const char *near;
		long off;
		uint8_t byte;
		const char *why;
	} cases[] = {
		{ "web-in", -9, 0, "id 0" },             /* relay 41's id, low byte */
		{ "tcp:[::1]", -9, 41, "id twice" },     /* relay 43's id */
		{ "web-in", 3, '\t', "forward name" },
		{ "relay.41.0", -2, 3, "unknown kind" },
		{ "relay.41.0", 5, ':', "descriptor name" },
		{ "relay.41.1", 9, '0', "named twice" },
		{ "relay.43.0", 7, '1', "named twice" },
		{ "relay.43.1", 23, 2, "EOF passed on" }, /* shut, no eof */
		{ "relay.41.1", 10, 3, "EOF passed on" }, /* shut, bytes held */
		{ "relay.41.1", 10, 4, "direction flags" },
	};
	struct vsxd_state_relay r[2];
	struct vsxd_relays rs;
	uint8_t *buf;
	size_t len;

	sample(&rs, r);
	r[0].dir[1].len = 10;
	buf = encode(&rs, &len);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t o = (size_t)((long)at(buf, len, cases[i].near) + cases[i].off);
		uint8_t was = buf[o];
		char why[128] = "";

		buf[o] = cases[i].byte;
		reseal(buf, len);
		cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG, "case %zu", i);
		cr_assert(strstr(why, cases[i].why), "case %zu: %s", i, why);
		buf[o] = was;
	}
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, NULL, 0), 0);
	/* and the encoder refuses the same values */
	r[1].id = 41;
	cr_assert_eq(vsxd_relays_encode(&rs, buf, len), -EINVAL);
	r[1].id = 43;
	r[1].dir[1].eof = false;
	cr_assert_eq(vsxd_relays_encode(&rs, buf, len), -EINVAL);
	r[1].dir[1].eof = true;
	r[0].dir[0].len = VSXD_RELAY_HELD_MAX + 1;
	cr_assert_eq(vsxd_relays_encode(&rs, buf, len), -EINVAL);
	free(buf);
}
