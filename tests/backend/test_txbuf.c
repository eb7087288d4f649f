/*
 * The per-connection byte queue (transports/virtio/backend/txbuf.c): bytes in equal
 * bytes out, message boundaries, and memory that stays proportional to what
 * is held whatever the packet sizes.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "backend/backend-int.h"

static void append(struct txq *q, const void *p, size_t n, size_t room, unsigned fl)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };

	cr_assert_eq(vsxb__txq_append(q, &iov, 1, n, room, fl), 0);
}

/* Drain everything through peek/consume; returns the bytes. */
static size_t drain(struct txq *q, uint8_t *out, size_t max, size_t step)
{
	struct iovec iov[64];
	unsigned n, fl, i;
	size_t got = 0, k;

	while (q->bytes) {
		k = vsxb__txq_peek(q, iov, 64, &n, step, &fl);
		cr_assert_gt(k, 0);
		for (i = 0; i < n; i++) {
			cr_assert_leq(got + iov[i].iov_len, max);
			memcpy(out + got, iov[i].iov_base, iov[i].iov_len);
			got += iov[i].iov_len;
		}
		vsxb__txq_consume(q, k);
	}
	return got;
}

Test(txbuf, bytes_in_bytes_out)
{
	static uint8_t in[300000], out[300000];
	struct txq q;
	size_t off = 0, n = 1, i;

	for (i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 7 + 3);
	vsxb__txq_init(&q, false);
	while (off < sizeof(in)) {
		if (n > sizeof(in) - off)
			n = sizeof(in) - off;
		append(&q, in + off, n, sizeof(in) - off - n, 0);
		off += n;
		n = n * 3 % 70001 + 1;
	}
	cr_assert_eq(q.bytes, sizeof(in));
	cr_assert_eq(drain(&q, out, sizeof(out), 12345), sizeof(in));
	cr_assert_arr_eq(out, in, sizeof(in));
	cr_assert_eq(q.bytes, 0);
	cr_assert_eq(q.mem, 0);
}

Test(txbuf, one_byte_packets_pack_into_chunks)
{
	struct txq q;
	size_t i, window = 256 * 1024;
	char b = 'x';

	vsxb__txq_init(&q, false);
	for (i = 0; i < window; i++)
		append(&q, &b, 1, window - i - 1, 0);
	cr_assert_eq(q.bytes, window);
	cr_assert_leq(q.mem, window + window / 50, "mem %zu for %zu bytes", q.mem, window);
	vsxb__txq_clear(&q);
	cr_assert_eq(q.mem, 0);
}

Test(txbuf, small_window_small_chunks)
{
	/* With 100 bytes of credit left, a chunk is not sized 4096. */
	struct txq q;
	char b[10] = { 0 };

	vsxb__txq_init(&q, false);
	append(&q, b, 10, 90, 0);
	cr_assert_leq(q.mem, 100 + 64);
	vsxb__txq_clear(&q);
}

Test(txbuf, message_ends)
{
	uint8_t out[100];
	struct iovec iov[8];
	unsigned n, fl;
	struct txq q;
	size_t k;

	vsxb__txq_init(&q, true);
	append(&q, "abc", 3, 1000, 0);
	cr_assert_eq(vsxb__txq_msg_len(&q), 0);
	append(&q, "de", 2, 1000, VIRTIO_VSOCK_SEQ_EOM);
	append(&q, "f", 1, 1000, VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR);
	append(&q, "gh", 2, 1000, 0);
	cr_assert(vsxb__txq_end_msg(&q, 0), "\"gh\" was open");
	cr_assert(!vsxb__txq_end_msg(&q, 0), "no open message left");
	cr_assert_eq(vsxb__txq_msg_len(&q), 5);

	k = vsxb__txq_peek(&q, iov, 8, &n, 100, &fl);
	cr_assert_eq(k, 5);
	cr_assert_eq(fl, VIRTIO_VSOCK_SEQ_EOM);
	memcpy(out, iov[0].iov_base, k);
	cr_assert_arr_eq(out, "abcde", 5);
	vsxb__txq_consume(&q, k);

	k = vsxb__txq_peek(&q, iov, 8, &n, 100, &fl);
	cr_assert_eq(k, 1);
	cr_assert_eq(fl, VIRTIO_VSOCK_SEQ_EOM | VIRTIO_VSOCK_SEQ_EOR);
	vsxb__txq_consume(&q, k);

	/* a fragment that stops before the end carries no flag */
	k = vsxb__txq_peek(&q, iov, 8, &n, 1, &fl);
	cr_assert_eq(k, 1);
	cr_assert_eq(fl, 0);
	vsxb__txq_consume(&q, 1);
	k = vsxb__txq_peek(&q, iov, 8, &n, 100, &fl);
	cr_assert_eq(k, 1);
	cr_assert_eq(fl, VIRTIO_VSOCK_SEQ_EOM);
	vsxb__txq_consume(&q, 1);
	cr_assert_eq(q.bytes, 0);
	cr_assert_eq(q.mem, 0);
}

Test(txbuf, one_byte_messages_bounded)
{
	struct txq q;
	size_t i, window = 64 * 1024;

	vsxb__txq_init(&q, true);
	for (i = 0; i < window; i++)
		append(&q, "m", 1, window - i - 1, VIRTIO_VSOCK_SEQ_EOM);
	cr_assert_leq(q.mem, window * 5 / 4, "mem %zu for %zu one-byte messages", q.mem,
		      window);
	for (i = 0; i < window; i++) {
		cr_assert_eq(vsxb__txq_msg_len(&q), 1);
		vsxb__txq_consume(&q, 1);
	}
	cr_assert_eq(q.mem, 0);
}
