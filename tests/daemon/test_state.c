/*
 * vsxd's restart state record (daemon/state.c, format in state.h): a
 * record read back is the one written; every truncation, every flipped
 * byte, another version, a bad name or count is refused by value with a
 * reason, never read as something else; the records of the releases
 * before (versions 1 to 3, and 4, as state_fixtures.h keeps them) read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../daemon/state.h"
#include "../../daemon/state-int.h"
#include "state_fixtures.h"

static uint8_t held[] = "bytes for a slow host program";
static uint8_t msgs[] = "onetwothree";
static struct vsxd_state_end msg_ends[] = { { 3, 1 }, { 6, 3 }, { 11, 1 } };

static struct vsxd_state_conn conns[3] = {
	/* a busy host connection, half closed, with bytes for the host */
	{ .id = 7, .guest_cid = 3, .peer_cid = 2, .guest_port = 1234,
	  .peer_port = 5000, .type = 1, .state = 3,
	  .flags = VSXD_CONN_WHOLE | VSXD_CONN_ADVERTISED, .guest_shut = 2,
	  .host_shut = 0, .shut_pending = 0, .ctrl = 4, .peer = VSXD_PEER_HOST,
	  .cr = { .buf_alloc = 262144, .rx_cnt = 0xfffffff0u, .fwd_cnt = 0xfffffff0u - 29,
		  .last_fwd_sent = 100, .last_buf_sent = 262144, .rx_limit = 0x3fff0,
		  .peer_buf_alloc = 65536, .peer_fwd_cnt = 17, .tx_cnt = 4000 },
	  .to_guest = 4000, .from_guest = 1ull << 33, .host_fd = "conn.7.host",
	  .tag = "ssh-in", .to_host_q = { sizeof(held) - 1, held, 0, NULL },
	  .why = VSXB_REASON_GUEST_SHUTDOWN },
	/* a seqpacket sibling connection with messages for the guest, its
	 * twin connection 11 of VM db-2 */
	{ .id = 9, .guest_cid = 3, .peer_cid = 4, .guest_port = 40000,
	  .peer_port = 22, .type = 2, .state = 2,
	  .flags = VSXD_CONN_WHOLE | VSXD_CONN_MSG_OPEN | VSXD_CONN_GUEST_INITIATED,
	  .peer = VSXD_PEER_SIBLING, .cr = { .buf_alloc = 4096, .peer_buf_alloc = 4096 },
	  .to_guest_q = { sizeof(msgs) - 1, msgs, 3, msg_ends },
	  .twin_vm = "db-2", .twin_id = 11, .eom_pending = 3 },
	/* still connecting, its timer running */
	{ .id = 1ull << 40, .guest_cid = 3, .peer_cid = 2, .guest_port = 1,
	  .peer_port = 0xffffffffu, .type = 1, .state = 1, .ctrl = 1,
	  .peer = VSXD_PEER_VSOCK, .timer = VSXD_TIMER_CONNECT, .timer_ms = 1234 },
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
						     "vm.web-1.kick0", "vm.web-1.call0", 0 };
	vms[0].queue[1] = (struct vsxd_state_queue){ 1, false, 32768, 0x10000, 0x90000,
						     0xa0000, "vm.web-1.kick1", "", 0 };
	vms[0].nconns = 3;
	vms[0].conns = conns;
	strcpy(vms[1].name, "cid5");
	strcpy(vms[1].conn, "c");
	vms[1].cid = 0xfffffffeull;
	vms[1].nregions = 1;
	vms[1].region[0] = (struct vsxd_state_region){ 0, 4096, 4096, 0, "m" };
	vms[1].nqueues = 1;
	vms[1].queue[0] = (struct vsxd_state_queue){ 2, true, 1, 0, 16, 32, "k", "c", 0 };
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

static void same_bytes(const struct vsxd_state_bytes *a, const struct vsxd_state_bytes *b)
{
	cr_assert_eq(a->len, b->len);
	if (a->len)
		cr_assert_eq(memcmp(a->data, b->data, a->len), 0);
	cr_assert_eq(a->nends, b->nends);
	for (unsigned i = 0; i < a->nends; i++) {
		cr_assert_eq(a->ends[i].end, b->ends[i].end);
		cr_assert_eq(a->ends[i].flags, b->ends[i].flags);
	}
}

/* @b read back as @version from @a. */
static void same_conn(const struct vsxd_state_conn *a, const struct vsxd_state_conn *b,
		      unsigned version)
{
	static const struct vsxd_state_bytes none;

	cr_assert_eq(a->id, b->id);
	cr_assert_eq(a->guest_cid, b->guest_cid);
	cr_assert_eq(a->peer_cid, b->peer_cid);
	cr_assert_eq(a->guest_port, b->guest_port);
	cr_assert_eq(a->peer_port, b->peer_port);
	cr_assert_eq(a->type, b->type);
	if (version < 2) {
		/* version 1 knows the addresses only */
		cr_assert_eq(b->state, 0);
		cr_assert_eq(b->flags, 0);
		cr_assert_eq(b->peer, 0);
		cr_assert_eq(b->cr.rx_cnt, 0);
		cr_assert_str_empty(b->host_fd);
		same_bytes(&none, &b->to_host_q);
		same_bytes(&none, &b->to_guest_q);
		return;
	}
	cr_assert_eq(a->state, b->state);
	cr_assert_eq(a->flags, b->flags);
	cr_assert_eq(a->guest_shut, b->guest_shut);
	cr_assert_eq(a->host_shut, b->host_shut);
	cr_assert_eq(a->shut_pending, b->shut_pending);
	cr_assert_eq(a->ctrl, b->ctrl);
	cr_assert_eq(a->peer, b->peer);
	cr_assert_eq(a->timer, b->timer);
	cr_assert_eq(a->timer_ms, b->timer_ms);
	cr_assert_eq(a->cr.buf_alloc, b->cr.buf_alloc);
	cr_assert_eq(a->cr.rx_cnt, b->cr.rx_cnt);
	cr_assert_eq(a->cr.fwd_cnt, b->cr.fwd_cnt);
	cr_assert_eq(a->cr.last_fwd_sent, b->cr.last_fwd_sent);
	cr_assert_eq(a->cr.last_buf_sent, b->cr.last_buf_sent);
	cr_assert_eq(a->cr.rx_limit, b->cr.rx_limit);
	cr_assert_eq(a->cr.peer_buf_alloc, b->cr.peer_buf_alloc);
	cr_assert_eq(a->cr.peer_fwd_cnt, b->cr.peer_fwd_cnt);
	cr_assert_eq(a->cr.tx_cnt, b->cr.tx_cnt);
	cr_assert_eq(a->to_guest, b->to_guest);
	cr_assert_eq(a->from_guest, b->from_guest);
	cr_assert_str_eq(a->host_fd, b->host_fd);
	cr_assert_str_eq(a->tag, b->tag);
	same_bytes(&a->to_host_q, &b->to_host_q);
	same_bytes(&a->to_guest_q, &b->to_guest_q);
	if (version < 3) {
		/* version 2 names no twin */
		cr_assert_str_empty(b->twin_vm);
		cr_assert_eq(b->twin_id, 0);
		cr_assert_eq(b->eom_pending, 0);
		return;
	}
	cr_assert_str_eq(a->twin_vm, b->twin_vm);
	cr_assert_eq(a->twin_id, b->twin_id);
	cr_assert_eq(a->eom_pending, b->eom_pending);
	if (version < 4) {
		/* version 3 holds no end reason */
		cr_assert_eq(b->why, 0);
		cr_assert_eq(b->why_limit, 0);
		cr_assert_eq(b->why_err, 0);
		return;
	}
	cr_assert_eq(a->why, b->why);
	cr_assert_eq(a->why_limit, b->why_limit);
	cr_assert_eq(a->why_err, b->why_err);
}

/* @b read from a record of @version */
static void same_vm_as(const struct vsxd_state_vm *a, const struct vsxd_state_vm *b,
		       unsigned version)
{

	cr_assert_str_eq(a->name, b->name);
	cr_assert_str_eq(a->conn, b->conn);
	cr_assert_eq(a->cid, b->cid);
	cr_assert_eq(a->features, b->features);
	cr_assert_eq(a->protocol_features, b->protocol_features);
	cr_assert_eq(a->paused, b->paused);
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
		cr_assert_eq(a->queue[i].base, b->queue[i].base);
	}
	cr_assert_eq(a->nconns, b->nconns);
	for (unsigned i = 0; i < a->nconns; i++)
		same_conn(&a->conns[i], &b->conns[i], version);
}

static void same_vm(const struct vsxd_state_vm *a, const struct vsxd_state_vm *b)
{
	same_vm_as(a, b, VSXD_STATE_VERSION);
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

/* The layouts state.h states are what the field table makes (the decoder's
 * bound on a record's connection count is taken from it) */
Test(state, field_table_sizes_are_the_formats)
{
	static const size_t want[] = { 0, VSXD_STATE_V1_CONN, VSXD_STATE_V2_CONN,
				       VSXD_STATE_V3_CONN, VSXD_STATE_V4_CONN };

	for (unsigned v = 1; v <= VSXD_STATE_VERSION; v++)
		cr_assert_eq(vsxd__fields_min(vsxd__conn_fields, vsxd__conn_nfields, v), want[v],
			     "version %u: %zu bytes, state.h says %zu", v,
			     vsxd__fields_min(vsxd__conn_fields, vsxd__conn_nfields, v), want[v]);
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
	cr_assert_eq(buf[8], VSXD_STATE_VERSION);
	cr_assert_eq(vsxd_state_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.version, VSXD_STATE_VERSION);
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
	buf[8] = 5;
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EPROTONOSUPPORT);
	cr_assert(strstr(why, "version 5"), "%s", why);
	cr_assert(strstr(why, "reads 1 to 4"), "%s", why);
	buf[8] = 0;
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EPROTONOSUPPORT);
	cr_assert(strstr(why, "version 0"), "%s", why);
	free(buf);
}

/* A copy of fixture @fx (state_fixtures.h), to edit and reseal. */
static uint8_t *fixture(const uint8_t *fx, size_t len)
{
	uint8_t *buf = malloc(len);

	cr_assert(buf);
	memcpy(buf, fx, len);
	return buf;
}

/* @d, read from an older record, written now: the current version, and
 * read back the same. */
static void writes_current(struct vsxd_state *d, unsigned version)
{
	struct vsxd_state e;
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	buf = encode(d, &len);
	cr_assert_eq(buf[8], VSXD_STATE_VERSION);
	cr_assert_eq(vsxd_state_decode(buf, len, &e, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(e.version, VSXD_STATE_VERSION);
	cr_assert_eq(e.nvms, d->nvms);
	for (unsigned i = 0; i < d->nvms; i++) {
		cr_assert_eq(e.vms[i].nconns, d->vms[i].nconns);
		for (unsigned j = 0; j < d->vms[i].nconns; j++)
			same_conn(&d->vms[i].conns[j], &e.vms[i].conns[j], version);
	}
	vsxd_state_clear(&e);
	free(buf);
}

/* The record the release before wrote (version 1: connections by their
 * addresses) reads, with nothing of version 2 made up; the encoder
 * writes the current version only. */
Test(state, version_1_reads)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf2;
	size_t len = sizeof(state_v1_sample), len2;

	sample(&s, vms);
	cr_assert_eq(state_v1_sample[8], 1);
	cr_assert_eq(vsxd_state_decode(state_v1_sample, len, &d, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(d.version, 1);
	cr_assert_eq(d.nvms, 2);
	cr_assert_eq(d.generation, 42);
	cr_assert_eq(d.vms[0].nconns, 3);
	for (unsigned i = 0; i < 3; i++)
		same_conn(&conns[i], &d.vms[0].conns[i], 1);
	/* (not written again: its connections have no state, which a
	 * current record must; vsxd resets them) */
	cr_assert_eq(vsxd_state_encode(&d, why, sizeof(why)), -EINVAL);
	/* 33 bytes per connection in version 1 */
	s.version = 1;                 /* ignored by the encoder */
	buf2 = encode(&s, &len2);
	cr_assert_eq(buf2[8], VSXD_STATE_VERSION);
	cr_assert_gt(len2, len + 3 * (VSXD_STATE_V2_CONN - VSXD_STATE_V1_CONN));
	vsxd_state_clear(&d);
	free(buf2);
}

/* The record the release before wrote (version 2: no sibling twins)
 * reads, and its sibling ends as it did (no twin); a stream sibling's
 * packet ends are version 3's. */
Test(state, version_2_reads)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	struct vsxd_state_conn c[3];
	char why[128] = "";
	uint8_t *buf;
	size_t len, len3;

	sample(&s, vms);
	len = sizeof(state_v2_sample);
	cr_assert_eq(state_v2_sample[8], 2);
	cr_assert_eq(vsxd_state_decode(state_v2_sample, len, &d, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(d.version, 2);
	cr_assert_eq(d.vms[0].nconns, 3);
	for (unsigned i = 0; i < 3; i++)
		same_conn(&conns[i], &d.vms[0].conns[i], 2);
	writes_current(&d, 2);
	vsxd_state_clear(&d);
	len3 = sizeof(state_v3_sample);
	/* 10 bytes more per connection, the twin's name, 2 per ring */
	cr_assert_eq(len3, len + 3 * (VSXD_STATE_V3_CONN - VSXD_STATE_V2_CONN) + 4 + 2 * 3);
	/* a stream sibling's queue keeps its packet ends from version 3 on */
	memcpy(c, conns, sizeof(c));
	vms[0].conns = c;
	c[1].type = 1;
	c[1].eom_pending = 0;
	c[1].flags &= ~VSXD_CONN_MSG_OPEN;
	c[1].to_guest_q.nends = 1;          /* { 3, EOM } */
	buf = encode(&s, &len);
	cr_assert_eq(vsxd_state_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	same_conn(&c[1], &d.vms[0].conns[1], VSXD_STATE_VERSION);
	vsxd_state_clear(&d);
	free(buf);
}

/* A sibling's twin: a VM name, on a sibling only; a pending message end
 * on a seqpacket sibling only. */
Test(state, sibling_twin_values)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	struct vsxd_state_conn c[3];
	char big[64];

	memcpy(c, conns, sizeof(c));
	sample(&s, vms);
	vms[0].conns = c;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -ENOSPC);
	strcpy(c[1].twin_vm, "db:2");
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	strcpy(c[1].twin_vm, "");                /* an id without its VM */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[1].twin_id = 0;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -ENOSPC);
	strcpy(c[0].twin_vm, "db-2");            /* a host connection's twin */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	strcpy(c[0].twin_vm, "");
	c[1].eom_pending = 2;                    /* EOR without EOM */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[1].eom_pending = 1;
	c[1].type = 1;                           /* on a stream */
	c[1].to_guest_q.nends = 0;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[1].eom_pending = 0;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -ENOSPC);
	c[1].to_guest_q.nends = 2;               /* { 6, EOM and EOR } */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
}

/* A version 1 record written by hand, as the release before wrote it:
 * the bytes, not this encoder's idea of them. */
Test(state, version_1_bytes)
{
	static const uint8_t vm[] = {
		3, 'w', 'e', 'b', 1, 'c',                      /* name, conn */
		3, 0, 0, 0, 0, 0, 0, 0,                        /* cid */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* features */
		1, 1, 0, 0, 1, 0, 0, 0,                        /* counts */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'm',
		0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'k', 0,
		5, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, /* conn 5 */
		2, 0, 0, 0, 0, 0, 0, 0, 0xd2, 0x04, 0, 0, 0x88, 0x13, 0, 0, 1,
	};
	uint8_t buf[VSXD_STATE_HDR + sizeof(vm)] = "VSXDSTAT\x01\0\0\0";
	struct vsxd_state d;
	char why[128] = "";

	buf[20] = 1;   /* nvms */
	buf[24] = 9;   /* generation */
	memcpy(buf + VSXD_STATE_HDR, vm, sizeof(vm));
	reseal(buf, sizeof(buf));
	cr_assert_eq(vsxd_state_decode(buf, sizeof(buf), &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.version, 1);
	cr_assert_eq(d.generation, 9);
	cr_assert_eq(d.vms[0].nconns, 1);
	cr_assert_eq(d.vms[0].conns[0].id, 5);
	cr_assert_eq(d.vms[0].conns[0].guest_port, 1234);
	cr_assert_eq(d.vms[0].conns[0].peer_port, 5000);
	cr_assert_eq(d.vms[0].conns[0].state, 0);
	vsxd_state_clear(&d);
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

/* What version 2 adds is checked both ways, value by value. */
Test(state, bad_connections_are_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	struct vsxd_state_conn c[3];
	struct vsxd_state_end ends[2];
	char big[64];

	memcpy(c, conns, sizeof(c));
	sample(&s, vms);
	vms[0].conns = c;
	c[0].state = 0;                                /* none in version 2 */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	/* checked as the current version whatever s.version says: no
	 * version 1 record (which had no state) is written */
	s.version = 1;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	s.version = 0;
	c[0].state = 2;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -ENOSPC);
	c[0].flags = 0x100;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].flags = 0;
	c[0].host_shut = 4;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].host_shut = 0;
	c[0].ctrl = 0x40;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].ctrl = 0;
	c[0].peer = VSXD_PEER_SIBLING;                 /* with a host socket */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].peer = 4;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].peer = VSXD_PEER_HOST;
	strcpy(c[0].host_fd, "conn:7");
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	strcpy(c[0].host_fd, "conn.7.host");
	c[0].timer_ms = 5;                             /* no timer */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].timer_ms = 0;
	strcpy(c[0].tag, "a\tb");
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	strcpy(c[0].tag, "");
	/* message ends: only in a seqpacket queue, increasing, inside it */
	ends[0] = (struct vsxd_state_end){ 2, 1 };
	c[0].to_host_q.nends = 1;
	c[0].to_host_q.ends = ends;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	c[0].to_host_q.nends = 0;
	c[1].to_guest_q.ends = ends;
	c[1].to_guest_q.nends = 2;
	ends[1] = (struct vsxd_state_end){ 2, 1 };     /* twice */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	ends[1] = (struct vsxd_state_end){ 12, 1 };    /* past the 11 bytes */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	ends[1] = (struct vsxd_state_end){ 11, 2 };    /* EOR without EOM */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	ends[1] = (struct vsxd_state_end){ 11, 3 };
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -ENOSPC);
}

/* The same, edited into a record with its crc made right again. */
Test(state, resealed_bad_connections_are_refused)
{
	static const struct { size_t at; uint8_t v; const char *why; } edit[] = {
		{ 33, 0, "bad connection state" },
		{ 33, 4, "bad connection state" },
		{ 35, 3 | 4, "bad shutdown bits" },
		{ 37, 8, "bad shutdown bits" },
		{ 38, 0x41, "bad pending control bits" },
		{ 39, 0, "bad peer kind" },
		{ 39, 2, "bad host socket FDNAME" },  /* a sibling with a socket */
		{ 40, 4, "bad connection timer" },
		{ 41, 1, "bad connection timer" },    /* time left, no timer */
		{ 97 + 5, ':', "bad host socket FDNAME" },
		{ 97 + 12 + 1, 0x7f, "bad connection tag" },
		{ 97 + 19 + 3, 0x7f, "truncated" },   /* 2 GiB queued */
	};
	static const uint8_t id7[16] = { 7, 0, 0, 0, 0, 0, 0, 0, 3 };
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char why[128];
	uint8_t *buf, *p;
	size_t len, off;

	sample(&s, vms);
	vms[0].nconns = 1;          /* connection 7 alone, at the end of VM 0 */
	buf = encode(&s, &len);
	p = memmem(buf, len, id7, sizeof(id7));
	cr_assert(p);
	off = (size_t)(p - buf);
	/* host_fd "conn.7.host" (12 bytes with its length) and tag "ssh-in" at 97 */
	cr_assert_eq(buf[off + 97], 11);
	cr_assert_eq(buf[off + 97 + 12], 6);
	for (size_t i = 0; i < sizeof(edit) / sizeof(edit[0]); i++) {
		uint8_t was = buf[off + edit[i].at];

		buf[off + edit[i].at] = edit[i].v;
		reseal(buf, len);
		cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG,
			     "edit %zu read", i);
		cr_assert(strstr(why, edit[i].why), "edit %zu: %s", i, why);
		buf[off + edit[i].at] = was;
	}
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), 0, "%s", why);
	free(buf);
}

/* VM web-1 of sample() as QEMU's stop leaves it: rings stopped where
 * GET_VRING_BASE left them, no kick, disabled; the call eventfds kept. */
static void pause_vm(struct vsxd_state_vm *v)
{
	v->paused = true;
	for (unsigned i = 0; i < v->nqueues; i++) {
		v->queue[i].enabled = false;
		v->queue[i].kick[0] = '\0';
		v->queue[i].base = 0xfff0u + i;
	}
}

/* Version 3: a paused VM reads back as written, next to a running one. */
Test(state, paused_vm_round_trip)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	pause_vm(&vms[0]);
	buf = encode(&s, &len);
	cr_assert_eq(vsxd_state_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.version, VSXD_STATE_VERSION);
	cr_assert(d.vms[0].paused);
	cr_assert_not(d.vms[1].paused);
	cr_assert_eq(d.vms[0].queue[1].base, 0xfff1u);
	cr_assert_str_empty(d.vms[0].queue[0].kick);
	same_vm(&vms[0], &d.vms[0]);
	same_vm(&vms[1], &d.vms[1]);
	vsxd_state_clear(&d);
	free(buf);
}

/* A paused VM's record says what QEMU's stop leaves, and nothing else;
 * versions 1 and 2 cannot say it. */
Test(state, bad_paused_vms_are_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char big[64];

	sample(&s, vms);
	vms[0].nconns = 0;
	pause_vm(&vms[0]);
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -ENOSPC);
	strcpy(vms[0].queue[1].kick, "vm.web-1.kick1");   /* a started ring */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	vms[0].queue[1].kick[0] = '\0';
	vms[0].queue[0].enabled = true;
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	vms[0].queue[0].enabled = false;
	vms[0].queue[0].base = 0x10000;                    /* past a u16 */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	vms[0].queue[0].base = 7;
	vms[1].queue[0].base = 1;                          /* a running VM's */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
	vms[1].queue[0].base = 0;
	vms[1].queue[0].kick[0] = '\0';                    /* no kick, running */
	cr_assert_eq(vsxd_state_encode(&s, big, sizeof(big)), -EINVAL);
}

/* The VM flags edited into records with their crc made right: a running
 * VM's record (kicks) that claims paused, an unknown flag, and any flag
 * in version 2, where they were reserved. */
Test(state, resealed_vm_flags_are_refused)
{
	struct vsxd_state s;
	struct vsxd_state_vm vms[2];
	char why[128];
	uint8_t *buf;
	size_t len, flags = 32 + 6 + 14 + 8 + 16 + 2;

	sample(&s, vms);
	vms[0].nconns = 0;
	vms[1].nconns = 0;
	buf = encode(&s, &len);
	buf[flags] = 1;
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "VM 0: a paused VM with a started ring"), "%s", why);
	buf[flags] = 2;
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "unknown VM flags"), "%s", why);
	buf[flags] = 0;
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), 0, "%s", why);
	free(buf);

	len = sizeof(state_v2_noconns);
	buf = fixture(state_v2_noconns, len);
	cr_assert_eq(buf[8], 2);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), 0, "%s", why);
	buf[flags] = 1;
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "reserved bits set"), "%s", why);
	free(buf);
}

/* Version 4 adds each connection's end reason (6 bytes): a version 3
 * record reads as "not known yet", and a reason the backend does not have,
 * or an errno out of range, is refused by name. */
Test(state, version_4_end_reasons)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf;
	size_t len, len3 = sizeof(state_v3_sample);

	sample(&s, vms);
	conns[2].why = VSXB_REASON_ERROR;
	conns[2].why_err = ENOMEM;
	buf = encode(&s, &len);
	cr_assert_eq(vsxd_state_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.vms[0].conns[0].why, VSXB_REASON_GUEST_SHUTDOWN);
	cr_assert_eq(d.vms[0].conns[2].why, VSXB_REASON_ERROR);
	cr_assert_eq(d.vms[0].conns[2].why_err, ENOMEM);
	vsxd_state_clear(&d);
	cr_assert_eq(len, len3 + 3 * (VSXD_STATE_V4_CONN - VSXD_STATE_V3_CONN));
	cr_assert_eq(vsxd_state_decode(state_v3_sample, len3, &d, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(d.version, 3);
	for (unsigned i = 0; i < 3; i++)
		same_conn(&conns[i], &d.vms[0].conns[i], 3);
	writes_current(&d, 3);
	vsxd_state_clear(&d);
	/* out of range: a reason past the last, an errno past 4095 */
	conns[2].why = VSXB_REASON_COUNT;
	cr_assert_eq(vsxd_state_encode(&s, buf, len), -EINVAL);
	free(buf);
	conns[2].why = VSXB_REASON_ERROR;
	s.nvms = 1;
	buf = encode(&s, &len);
	/* the last connection's why_err is the record's last 4 bytes */
	buf[len - 2] = 0x10;   /* 12 + 0x100000 */
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "end reason"), "%s", why);
	buf[len - 2] = 0;
	buf[len - 6] = VSXB_REASON_COUNT;  /* its why */
	reseal(buf, len);
	cr_assert_eq(decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "end reason"), "%s", why);
	conns[2].why = 0;
	conns[2].why_err = 0;
	free(buf);
}

/* The record the release before wrote (version 2: no VM flags, no ring
 * bases) reads its VMs whole. */
Test(state, version_2_vms_read)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	size_t len = sizeof(state_v2_sample), len3 = sizeof(state_v3_sample);

	sample(&s, vms);
	cr_assert_eq(vsxd_state_decode(state_v2_sample, len, &d, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(d.version, 2);
	same_vm_as(&vms[0], &d.vms[0], 2);
	same_vm_as(&vms[1], &d.vms[1], 2);
	vsxd_state_clear(&d);
	/* version 3 adds 2 bytes per ring, and to each connection its twin */
	cr_assert_eq(len3, len + 2 * 3 + 3 * (VSXD_STATE_V3_CONN - VSXD_STATE_V2_CONN) + 4);
	cr_assert_eq(vsxd_state_decode(state_v3_sample, len3, &d, why, sizeof(why)), 0, "%s",
		     why);
	same_vm_as(&vms[0], &d.vms[0], 3);
	same_vm_as(&vms[1], &d.vms[1], 3);
	vsxd_state_clear(&d);
}

/* The record this release's vsxd writes (version 4) as state_fixtures.h
 * keeps it: the encoder still writes those very bytes, and a vsxd of
 * any later version must go on reading them. */
Test(state, version_4_fixture)
{
	struct vsxd_state s, d;
	struct vsxd_state_vm vms[2];
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	sample(&s, vms);
	cr_assert_eq(vsxd_state_decode(state_v4_sample, sizeof(state_v4_sample), &d, why,
				       sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.version, 4);
	same_vm_as(&vms[0], &d.vms[0], 4);
	same_vm_as(&vms[1], &d.vms[1], 4);
	for (unsigned i = 0; i < 3; i++)
		same_conn(&conns[i], &d.vms[0].conns[i], 4);
	vsxd_state_clear(&d);
	if (VSXD_STATE_VERSION == 4) {
		buf = encode(&s, &len);
		cr_assert_eq(len, sizeof(state_v4_sample));
		cr_assert_eq(memcmp(buf, state_v4_sample, len), 0);
		free(buf);
	}
}

/* ---- The counters record ---- */

static void counters_sample(struct vsxd_counters *c, struct vsxd_counters_vm vms[2])
{
	memset(c, 0, sizeof(*c));
	memset(vms, 0, 2 * sizeof(vms[0]));
	for (unsigned i = 0; i < VSXD_CNT_COUNT; i++)
		c->c[i] = 1000 + i;
	c->c[VSXD_CNT_POLL_HITS] = 1ull << 40;
	strcpy(vms[0].name, "web-1");
	vms[0].opened = 12;
	vms[0].to_guest = 1ull << 35;
	vms[0].from_guest = 77;
	vms[0].credit_stalls = 3;
	vms[0].closed[1] = 5;
	vms[0].reset[2] = 6;
	vms[0].refused[15] = 7;
	strcpy(vms[1].name, "db");
	vms[1].opened = 1;
	c->nreasons = 16;
	c->nvms = 2;
	c->vms = vms;
}

static uint8_t *counters_encode(const struct vsxd_counters *c, size_t *len)
{
	size_t n = vsxd_counters_size(c);
	uint8_t *buf = malloc(n);
	long r;

	cr_assert(buf);
	r = vsxd_counters_encode(c, buf, n);
	cr_assert_eq(r, (long)n, "encode: %ld, size %zu", r, n);
	*len = n;
	return buf;
}

/* Put a right length and crc on @buf (@len bytes). */
static void counters_seal(uint8_t *buf, size_t len)
{
	uint32_t crc = vsxd_crc32(buf + 20, len - 20);

	for (unsigned i = 0; i < 4; i++) {
		buf[12 + i] = (uint8_t)(len >> (8 * i));
		buf[16 + i] = (uint8_t)(crc >> (8 * i));
	}
}

static int counters_decode(const uint8_t *buf, size_t len, char *why, size_t whylen)
{
	struct vsxd_counters d;
	int r = vsxd_counters_decode(buf, len, &d, why, whylen);

	if (r == 0)
		vsxd_counters_clear(&d);
	else
		cr_assert(d.nvms == 0 && d.vms == NULL && d.c[0] == 0);
	return r;
}

Test(counters, round_trip)
{
	struct vsxd_counters c, d;
	struct vsxd_counters_vm vms[2];
	char why[128] = "";
	uint8_t *buf;
	size_t len;

	counters_sample(&c, vms);
	buf = counters_encode(&c, &len);
	cr_assert_eq(len, 32 + 8 * VSXD_CNT_COUNT + 2 * (1 + 4 * 8 + 3 * 16 * 8) + 5 + 2,
		     "%zu bytes", len);
	cr_assert_eq(vsxd_counters_decode(buf, len, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(memcmp(d.c, c.c, sizeof(c.c)), 0);
	cr_assert_eq(d.nreasons, 16);
	cr_assert_eq(d.nvms, 2);
	cr_assert_str_eq(d.vms[0].name, "web-1");
	cr_assert_str_eq(d.vms[1].name, "db");
	cr_assert_eq(d.vms[0].to_guest, 1ull << 35);
	cr_assert_eq(d.vms[0].from_guest, 77);
	cr_assert_eq(d.vms[0].credit_stalls, 3);
	cr_assert_eq(d.vms[0].closed[1], 5);
	cr_assert_eq(d.vms[0].reset[2], 6);
	cr_assert_eq(d.vms[0].refused[15], 7);
	cr_assert_eq(d.vms[1].opened, 1);
	vsxd_counters_clear(&d);
	free(buf);
}

Test(counters, through_a_memfd)
{
	struct vsxd_counters c, d;
	struct vsxd_counters_vm vms[2];
	char why[128] = "";
	int fd, p[2];

	counters_sample(&c, vms);
	fd = vsxd_counters_memfd(&c);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	/* read from offset 0, wherever the file's offset is */
	cr_assert_eq(vsxd_counters_read(fd, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(d.vms[0].to_guest, 1ull << 35);
	vsxd_counters_clear(&d);
	close(fd);
	/* not a file: refused by value, with a reason */
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(vsxd_counters_read(p[0], &d, why, sizeof(why)), -EINVAL);
	cr_assert(strstr(why, "not a file"), "%s", why);
	close(p[0]);
	close(p[1]);
}

Test(counters, every_truncation_and_flipped_byte_is_refused)
{
	struct vsxd_counters c;
	struct vsxd_counters_vm vms[2];
	uint8_t *buf;
	size_t len;

	counters_sample(&c, vms);
	buf = counters_encode(&c, &len);
	for (size_t n = 0; n < len; n++) {
		char why[128] = "";

		cr_assert_eq(counters_decode(buf, n, why, sizeof(why)), -EBADMSG, "%zu", n);
		cr_assert(why[0], "no reason for %zu bytes", n);
	}
	for (size_t i = 0; i < len; i++) {
		int r;

		buf[i] ^= 0x10;
		r = counters_decode(buf, len, NULL, 0);
		cr_assert(r == -EBADMSG || r == -EPROTONOSUPPORT, "byte %zu flipped: %d", i, r);
		buf[i] ^= 0x10;
	}
	cr_assert_eq(counters_decode(buf, len, NULL, 0), 0);
	free(buf);
}

Test(counters, later_releases_counters_are_read_as_far_as_known)
{
	struct vsxd_counters c, d;
	struct vsxd_counters_vm vms[2];
	uint8_t *buf, *big;
	size_t len, off = 32 + 8 * VSXD_CNT_COUNT;
	char why[128] = "";

	/* a writer that knows two more counters: they sit after ours */
	counters_sample(&c, vms);
	c.nvms = 0;
	buf = counters_encode(&c, &len);
	big = calloc(1, len + 16);
	cr_assert(big);
	memcpy(big, buf, off);
	memset(big + off, 0xee, 16);
	memcpy(big + off + 16, buf + off, len - off);
	big[24] = (uint8_t)(VSXD_CNT_COUNT + 2);
	counters_seal(big, len + 16);
	cr_assert_eq(vsxd_counters_decode(big, len + 16, &d, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(memcmp(d.c, c.c, sizeof(c.c)), 0);
	vsxd_counters_clear(&d);
	free(big);
	free(buf);
}

Test(counters, bad_values_are_refused_by_value)
{
	struct vsxd_counters c;
	struct vsxd_counters_vm vms[2];
	uint8_t *buf;
	size_t len;
	char why[128] = "";

	counters_sample(&c, vms);
	strcpy(vms[1].name, "web-1");
	buf = counters_encode(&c, &len);
	cr_assert_eq(counters_decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "a VM named twice"), "%s", why);
	free(buf);

	counters_sample(&c, vms);
	buf = counters_encode(&c, &len);
	buf[8] = 2;              /* version 2 */
	counters_seal(buf, len);
	cr_assert_eq(counters_decode(buf, len, why, sizeof(why)), -EPROTONOSUPPORT);
	cr_assert(strstr(why, "version 2"), "%s", why);
	buf[8] = 1;
	buf[28] = 1;             /* reserved */
	counters_seal(buf, len);
	cr_assert_eq(counters_decode(buf, len, why, sizeof(why)), -EBADMSG);
	buf[28] = 0;
	buf[26] = 65;            /* nreasons over the limit */
	counters_seal(buf, len);
	cr_assert_eq(counters_decode(buf, len, why, sizeof(why)), -EBADMSG);
	cr_assert(strstr(why, "65 reasons"), "%s", why);
	free(buf);

	/* what the decoder would refuse is not written */
	counters_sample(&c, vms);
	strcpy(vms[0].name, "a b");
	cr_assert_eq(vsxd_counters_encode(&c, NULL, 0), -EINVAL);
	counters_sample(&c, vms);
	c.nreasons = VSXD_COUNTERS_MAX + 1;
	cr_assert_eq(vsxd_counters_encode(&c, NULL, 0), -EINVAL);
}
