/*
 * Guest memory translation and split virtqueues (transports/virtio/vhost-user/vq.c),
 * device side, against rings laid out by hand in two separately mapped
 * "guest" regions. Every hostile case checks the error value, the broken
 * state and the err fd.
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/virtio_ring.h>

#include <criterion/criterion.h>

#include "vhost-user/iov.h"
#include "vhost-user/memguard.h"
#include "vhost-user/vq.h"

#define R_SIZE (1u << 20)
#define R0_GPA 0x100000ull
#define R1_GPA (R0_GPA + R_SIZE)       /* contiguous in the guest ... */
#define R0_UVA 0x7f0000000000ull
#define R1_UVA (R0_UVA + R_SIZE)
#define DESC_OFF 0x0
#define AVAIL_OFF 0x2000
#define USED_OFF 0x3000
#define DATA_GPA (R0_GPA + 0x10000)

struct fake {
	char *r0, *r1;                 /* ... but not in the host */
	struct vsxu_mem mem;
	struct vsxu_vq vq;
	struct vring_desc *desc;
	struct vring_avail *avail;
	struct vring_used *used;
	uint16_t aidx;
	struct vsxu_vq_elem e;
};

static struct fake F;

static void fake_setup(unsigned num, bool event_idx, bool indirect)
{
	memset(&F, 0, sizeof(F));
	F.r0 = mmap(NULL, R_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	F.r1 = mmap(NULL, R_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(F.r0 != MAP_FAILED && F.r1 != MAP_FAILED);
	F.mem.n = 2;
	F.mem.r[0] = (struct vsxu_mem_region){ .gpa = R0_GPA, .size = R_SIZE, .uva = R0_UVA,
					      .host = F.r0, .map = F.r0, .map_len = R_SIZE };
	F.mem.r[1] = (struct vsxu_mem_region){ .gpa = R1_GPA, .size = R_SIZE, .uva = R1_UVA,
					      .host = F.r1, .map = F.r1, .map_len = R_SIZE };
	F.desc = (struct vring_desc *)(F.r0 + DESC_OFF);
	F.avail = (struct vring_avail *)(F.r0 + AVAIL_OFF);
	F.used = (struct vring_used *)(F.r0 + USED_OFF);

	vsxu_vq_reset(&F.vq);
	F.vq.num = num;
	F.vq.desc = F.desc;
	F.vq.avail = F.avail;
	F.vq.used = F.used;
	F.vq.mem = &F.mem;
	F.vq.started = F.vq.enabled = true;
	F.vq.event_idx = event_idx;
	F.vq.indirect = indirect;
	F.vq.call_fd = eventfd(0, EFD_NONBLOCK);
	F.vq.err_fd = eventfd(0, EFD_NONBLOCK);
	cr_assert(F.vq.call_fd >= 0 && F.vq.err_fd >= 0);
}

static void setup(void)
{
	fake_setup(16, false, true);
}

static void teardown(void)
{
	close(F.vq.call_fd);
	close(F.vq.err_fd);
	vsxu_mem_unmap(&F.mem);
}

static void *host(uint64_t gpa)
{
	if (gpa >= R1_GPA)
		return F.r1 + (gpa - R1_GPA);
	return F.r0 + (gpa - R0_GPA);
}

static void desc(struct vring_desc *t, unsigned i, uint64_t addr, uint32_t len,
		 uint16_t flags, uint16_t next)
{
	t[i].addr = htole64(addr);
	t[i].len = htole32(len);
	t[i].flags = htole16(flags);
	t[i].next = htole16(next);
}

static void avail_add(uint16_t head)
{
	F.avail->ring[F.aidx % F.vq.num] = htole16(head);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	F.aidx++;
	F.avail->idx = htole16(F.aidx);
}

static uint64_t efd_count(int fd)
{
	uint64_t v = 0;

	if (read(fd, &v, sizeof(v)) != sizeof(v))
		return 0;
	return v;
}

static void assert_broken(int r, int err)
{
	cr_assert_eq(r, err, "pop returned %d, expected %d", r, err);
	cr_assert(F.vq.broken);
	cr_assert(!vsxu_vq_ready(&F.vq));
	cr_assert_eq(efd_count(F.vq.err_fd), 1, "err fd signalled once");
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), -EIO);
	cr_assert_eq(efd_count(F.vq.err_fd), 0, "and only once");
}

/* ---- memory translation ---- */

Test(mem, gpa_bounds, .init = setup, .fini = teardown)
{
	cr_assert_eq(vsxu_mem_gpa(&F.mem, R0_GPA, 16), F.r0);
	cr_assert_eq(vsxu_mem_gpa(&F.mem, R0_GPA + R_SIZE - 1, 1), F.r0 + R_SIZE - 1);
	cr_assert_eq(vsxu_mem_gpa(&F.mem, R0_GPA + 100, R_SIZE - 100), F.r0 + 100);
	cr_assert_null(vsxu_mem_gpa(&F.mem, R0_GPA + 100, R_SIZE - 99),
		       "a range across two regions is not contiguous here");
	cr_assert_eq(vsxu_mem_gpa(&F.mem, R1_GPA, R_SIZE), F.r1);
	cr_assert_null(vsxu_mem_gpa(&F.mem, R1_GPA + R_SIZE, 1));
	cr_assert_null(vsxu_mem_gpa(&F.mem, R1_GPA + R_SIZE - 1, 2));
	cr_assert_null(vsxu_mem_gpa(&F.mem, R0_GPA - 1, 1));
	cr_assert_null(vsxu_mem_gpa(&F.mem, 0, 1));
	cr_assert_null(vsxu_mem_gpa(&F.mem, R0_GPA + 8, UINT64_MAX - 4), "len overflow");
	cr_assert_null(vsxu_mem_gpa(&F.mem, UINT64_MAX - 2, 16), "gpa overflow");
	cr_assert_null(vsxu_mem_gpa(&F.mem, R0_GPA, UINT64_MAX));
	cr_assert_eq(vsxu_mem_gpa(&F.mem, R0_GPA + 5, 0), F.r0 + 5);
	cr_assert_null(vsxu_mem_gpa(NULL, R0_GPA, 1));
}

Test(mem, uva_bounds, .init = setup, .fini = teardown)
{
	cr_assert_eq(vsxu_mem_uva(&F.mem, R0_UVA + 64, 64), F.r0 + 64);
	cr_assert_eq(vsxu_mem_uva(&F.mem, R1_UVA + R_SIZE - 8, 8), F.r1 + R_SIZE - 8);
	cr_assert_null(vsxu_mem_uva(&F.mem, R1_UVA + R_SIZE - 8, 9));
	cr_assert_null(vsxu_mem_uva(&F.mem, R0_UVA - 1, 1));
	cr_assert_null(vsxu_mem_uva(&F.mem, R0_UVA + 1, UINT64_MAX));
	cr_assert_null(vsxu_mem_uva(&F.mem, R0_GPA, 1), "a gpa is not a uva");
}

Test(mem, unmap_empties_table)
{
	struct vsxu_mem m = { 0 };
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert(p != MAP_FAILED);
	m.n = 1;
	m.r[0] = (struct vsxu_mem_region){ .gpa = 0, .size = 4096, .host = p, .map = p,
					  .map_len = 4096 };
	cr_assert_eq(vsxu_mem_gpa(&m, 0, 1), p);
	vsxu_mem_unmap(&m);
	cr_assert_eq(m.n, 0);
	cr_assert_null(vsxu_mem_gpa(&m, 0, 1));
}

/* ---- popping chains ---- */

Test(vq, pop_chain_out_then_in, .init = setup, .fini = teardown)
{
	desc(F.desc, 3, DATA_GPA, 44, VRING_DESC_F_NEXT, 7);
	desc(F.desc, 7, DATA_GPA + 4096, 100, VRING_DESC_F_NEXT, 2);
	desc(F.desc, 2, DATA_GPA + 8192, 200, VRING_DESC_F_WRITE, 0);
	avail_add(3);
	cr_assert_eq(vsxu_vq_avail(&F.vq), 1);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(F.e.head, 3);
	cr_assert_eq(F.e.out_num, 2);
	cr_assert_eq(F.e.in_num, 1);
	cr_assert_eq(F.e.out_len, 144);
	cr_assert_eq(F.e.in_len, 200);
	cr_assert_eq(F.e.iov[0].iov_base, host(DATA_GPA));
	cr_assert_eq(F.e.iov[0].iov_len, 44);
	cr_assert_eq(F.e.iov[1].iov_base, host(DATA_GPA + 4096));
	cr_assert_eq(F.e.iov[2].iov_base, host(DATA_GPA + 8192));
	cr_assert_eq(F.e.iov[2].iov_len, 200);
	cr_assert_eq(F.vq.last_avail, 1);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 0, "ring empty");
	cr_assert_eq(vsxu_vq_avail(&F.vq), 0);
}

Test(vq, buffer_across_regions_is_two_iovecs, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, R1_GPA - 10, 30, 0, 0);
	avail_add(0);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(F.e.out_num, 2);
	cr_assert_eq(F.e.iov[0].iov_base, F.r0 + R_SIZE - 10);
	cr_assert_eq(F.e.iov[0].iov_len, 10);
	cr_assert_eq(F.e.iov[1].iov_base, F.r1);
	cr_assert_eq(F.e.iov[1].iov_len, 20);
	cr_assert_eq(F.e.out_len, 30);
}

Test(vq, zero_length_descriptor_adds_nothing, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, 0xdead0000, 0, VRING_DESC_F_NEXT, 1);
	desc(F.desc, 1, DATA_GPA, 8, VRING_DESC_F_WRITE, 0);
	avail_add(0);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(F.e.out_num, 0);
	cr_assert_eq(F.e.in_num, 1);
	cr_assert_eq(F.e.in_len, 8);
}

Test(vq, not_ready_pops_nothing, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, DATA_GPA, 8, 0, 0);
	avail_add(0);
	F.vq.enabled = false;
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 0);
	cr_assert_eq(vsxu_vq_avail(&F.vq), 0);
	F.vq.enabled = true;
	F.vq.started = false;
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 0);
	F.vq.started = true;
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
}

Test(vq, unpop_gives_back, .init = setup, .fini = teardown)
{
	desc(F.desc, 4, DATA_GPA, 8, 0, 0);
	desc(F.desc, 5, DATA_GPA, 8, 0, 0);
	avail_add(4);
	avail_add(5);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(F.e.head, 5);
	vsxu_vq_unpop(&F.vq, 2);
	cr_assert_eq(vsxu_vq_avail(&F.vq), 2);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(F.e.head, 4);
}

Test(vq, indirect_table, .init = setup, .fini = teardown)
{
	struct vring_desc *t = host(DATA_GPA + 0x8000);

	desc(t, 0, DATA_GPA, 44, VRING_DESC_F_NEXT, 2);
	desc(t, 2, DATA_GPA + 100, 10, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 1);
	desc(t, 1, DATA_GPA + 200, 4096, VRING_DESC_F_WRITE, 0);
	desc(F.desc, 9, DATA_GPA + 0x8000, 3 * 16, VRING_DESC_F_INDIRECT, 0);
	avail_add(9);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(F.e.head, 9);
	cr_assert_eq(F.e.out_num, 1);
	cr_assert_eq(F.e.in_num, 2);
	cr_assert_eq(F.e.out_len, 44);
	cr_assert_eq(F.e.in_len, 4106);
	cr_assert_eq(F.e.iov[1].iov_base, host(DATA_GPA + 100));
	cr_assert_eq(F.e.iov[2].iov_base, host(DATA_GPA + 200));
}

static void indirect_case(uint64_t addr, uint32_t len, uint16_t flags, int err)
{
	desc(F.desc, 0, addr, len, flags, 1);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), err);
}

Test(vq, indirect_not_negotiated, .init = setup, .fini = teardown)
{
	F.vq.indirect = false;
	desc(host(DATA_GPA), 0, DATA_GPA + 512, 8, 0, 0);
	indirect_case(DATA_GPA, 16, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, indirect_nested, .init = setup, .fini = teardown)
{
	struct vring_desc *t = host(DATA_GPA);

	desc(t, 0, DATA_GPA + 512, 8, VRING_DESC_F_NEXT, 1);
	desc(t, 1, DATA_GPA + 1024, 16, VRING_DESC_F_INDIRECT, 0);
	indirect_case(DATA_GPA, 32, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, indirect_len_not_multiple_of_16, .init = setup, .fini = teardown)
{
	indirect_case(DATA_GPA, 24, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, indirect_len_zero, .init = setup, .fini = teardown)
{
	indirect_case(DATA_GPA, 0, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, indirect_table_too_big, .init = setup, .fini = teardown)
{
	indirect_case(DATA_GPA, (VSXU_VQ_MAX_SIZE + 1) * 16, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, indirect_table_outside_memory, .init = setup, .fini = teardown)
{
	indirect_case(R1_GPA + R_SIZE - 16, 32, VRING_DESC_F_INDIRECT, -EFAULT);
}

Test(vq, indirect_with_next, .init = setup, .fini = teardown)
{
	desc(host(DATA_GPA), 0, DATA_GPA + 512, 8, 0, 0);
	indirect_case(DATA_GPA, 16, VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, -EINVAL);
}

Test(vq, indirect_after_direct, .init = setup, .fini = teardown)
{
	desc(host(DATA_GPA), 0, DATA_GPA + 512, 8, 0, 0);
	desc(F.desc, 0, DATA_GPA + 512, 8, VRING_DESC_F_NEXT, 1);
	desc(F.desc, 1, DATA_GPA, 16, VRING_DESC_F_INDIRECT, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, indirect_loop, .init = setup, .fini = teardown)
{
	struct vring_desc *t = host(DATA_GPA);

	desc(t, 0, DATA_GPA + 512, 8, VRING_DESC_F_NEXT, 1);
	desc(t, 1, DATA_GPA + 512, 8, VRING_DESC_F_NEXT, 0);
	indirect_case(DATA_GPA, 32, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, indirect_next_out_of_table, .init = setup, .fini = teardown)
{
	struct vring_desc *t = host(DATA_GPA);

	desc(t, 0, DATA_GPA + 512, 8, VRING_DESC_F_NEXT, 2);
	desc(t, 1, DATA_GPA + 512, 8, 0, 0);
	indirect_case(DATA_GPA, 32, VRING_DESC_F_INDIRECT, -EINVAL);
}

Test(vq, chain_loop, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 1);
	desc(F.desc, 1, DATA_GPA, 8, VRING_DESC_F_NEXT, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, chain_longest_and_too_long)
{
	fake_setup(128, false, false);
	for (unsigned i = 0; i < VSXU_VQ_MAX_IOV; i++)
		desc(F.desc, i, DATA_GPA + i, 1,
		     i + 1 < VSXU_VQ_MAX_IOV ? VRING_DESC_F_NEXT : 0, (uint16_t)(i + 1));
	avail_add(0);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1, "%d descriptors are fine", VSXU_VQ_MAX_IOV);
	cr_assert_eq(F.e.out_num, VSXU_VQ_MAX_IOV);
	cr_assert_eq(F.e.out_len, VSXU_VQ_MAX_IOV);

	for (unsigned i = 0; i <= VSXU_VQ_MAX_IOV; i++)
		desc(F.desc, i, DATA_GPA + i, 1,
		     i < VSXU_VQ_MAX_IOV ? VRING_DESC_F_NEXT : 0, (uint16_t)(i + 1));
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
	teardown();
}

Test(vq, too_many_iovecs_across_regions)
{
	/* 40 descriptors, each across the region boundary: 80 iovecs */
	fake_setup(64, false, false);
	for (unsigned i = 0; i < 40; i++)
		desc(F.desc, i, R1_GPA - 1, 2, i + 1 < 40 ? VRING_DESC_F_NEXT : 0,
		     (uint16_t)(i + 1));
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
	teardown();
}

Test(vq, next_out_of_range, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, DATA_GPA, 8, VRING_DESC_F_NEXT, 16);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, head_out_of_range, .init = setup, .fini = teardown)
{
	avail_add(16);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, readable_after_writable, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, DATA_GPA, 8, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	desc(F.desc, 1, DATA_GPA, 8, 0, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, readable_after_empty_writable, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, DATA_GPA, 0, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	desc(F.desc, 1, DATA_GPA, 8, 0, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, address_outside_memory, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, 0x1000, 8, 0, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EFAULT);
}

Test(vq, length_past_memory_end, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, R1_GPA + R_SIZE - 8, 9, 0, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EFAULT);
}

Test(vq, address_wraps, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, UINT64_MAX - 3, 0xffffffff, 0, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EFAULT);
}

Test(vq, total_length_overflows_u32, .init = setup, .fini = teardown)
{
	/* a 12 GiB region that is reserved, never touched: pop only
	 * translates addresses */
	uint64_t big = 12ull << 30;
	void *p = mmap(NULL, big, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	cr_assert(p != MAP_FAILED);
	F.mem.r[2] = (struct vsxu_mem_region){ .gpa = 1ull << 40, .size = big, .uva = 1ull << 46,
					      .host = p, .map = p, .map_len = big };
	F.mem.n = 3;
	desc(F.desc, 0, 1ull << 40, 0xc0000000u, VRING_DESC_F_NEXT, 1);
	desc(F.desc, 1, (1ull << 40) + (4ull << 30), 0xc0000000u, 0, 0);
	avail_add(0);
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, avail_idx_beyond_num, .init = setup, .fini = teardown)
{
	desc(F.desc, 0, DATA_GPA, 8, 0, 0);
	F.avail->idx = htole16(17);
	cr_assert_eq(vsxu_vq_avail(&F.vq), 16, "a bogus index reads as work");
	assert_broken(vsxu_vq_pop(&F.vq, &F.e), -EINVAL);
}

Test(vq, avail_idx_exactly_num_is_fine, .init = setup, .fini = teardown)
{
	for (unsigned i = 0; i < 16; i++) {
		desc(F.desc, i, DATA_GPA, 8, 0, 0);
		avail_add((uint16_t)i);
	}
	for (unsigned i = 0; i < 16; i++)
		cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 0);
	cr_assert(!F.vq.broken);
}

/* ---- used ring and notifications ---- */

Test(vq, push_flush_batches, .init = setup, .fini = teardown)
{
	struct vsxu_vq_elem e[3];

	for (unsigned i = 0; i < 3; i++) {
		desc(F.desc, 10 + i, DATA_GPA, 64, VRING_DESC_F_WRITE, 0);
		avail_add((uint16_t)(10 + i));
	}
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(vsxu_vq_pop(&F.vq, &e[i]), 1);
	vsxu_vq_push(&F.vq, &e[0], 10);
	vsxu_vq_push(&F.vq, &e[1], 20);
	vsxu_vq_push(&F.vq, &e[2], 1000); /* more than the buffer: clamped */
	cr_assert_eq(le16toh(F.used->idx), 0, "nothing visible before flush");
	cr_assert_eq(efd_count(F.vq.call_fd), 0);
	vsxu_vq_flush(&F.vq);
	cr_assert_eq(le16toh(F.used->idx), 3);
	cr_assert_eq(le32toh(F.used->ring[0].id), 10);
	cr_assert_eq(le32toh(F.used->ring[0].len), 10);
	cr_assert_eq(le32toh(F.used->ring[1].id), 11);
	cr_assert_eq(le32toh(F.used->ring[1].len), 20);
	cr_assert_eq(le32toh(F.used->ring[2].id), 12);
	cr_assert_eq(le32toh(F.used->ring[2].len), 64);
	cr_assert_eq(efd_count(F.vq.call_fd), 1, "one notification per flush");
	vsxu_vq_flush(&F.vq);
	cr_assert_eq(efd_count(F.vq.call_fd), 0, "nothing pushed, no notification");
}

static void cycle(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		desc(F.desc, 0, DATA_GPA, 8, VRING_DESC_F_WRITE, 0);
		avail_add(0);
		cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
		vsxu_vq_push(&F.vq, &F.e, 1);
		vsxu_vq_flush(&F.vq);
	}
}

Test(vq, no_interrupt_flag_suppresses, .init = setup, .fini = teardown)
{
	F.avail->flags = htole16(VRING_AVAIL_F_NO_INTERRUPT);
	cycle(1);
	cr_assert_eq(efd_count(F.vq.call_fd), 0);
	F.avail->flags = 0;
	cycle(1);
	cr_assert_eq(efd_count(F.vq.call_fd), 1);
}

Test(vq, notify_on_empty_overrides_flag, .init = setup, .fini = teardown)
{
	F.vq.notify_on_empty = true;
	F.avail->flags = htole16(VRING_AVAIL_F_NO_INTERRUPT);
	desc(F.desc, 0, DATA_GPA, 8, VRING_DESC_F_WRITE, 0);
	avail_add(0);
	avail_add(0);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	vsxu_vq_push(&F.vq, &F.e, 1);
	vsxu_vq_flush(&F.vq);
	cr_assert_eq(efd_count(F.vq.call_fd), 0, "ring not empty: flag honoured");
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	vsxu_vq_push(&F.vq, &F.e, 1);
	vsxu_vq_flush(&F.vq);
	cr_assert_eq(efd_count(F.vq.call_fd), 1, "ring empty: notified anyway");
}

Test(vq, event_idx_used_event)
{
	uint16_t *used_event;

	fake_setup(16, true, true);
	used_event = (uint16_t *)&F.avail->ring[16];
	*used_event = htole16(0);
	cycle(1);
	cr_assert_eq(efd_count(F.vq.call_fd), 1, "first flush always notifies");
	/* the guest wants to hear when entry 5 is used (used idx passes 5) */
	*used_event = htole16(5);
	cycle(4); /* used idx 2..5 */
	cr_assert_eq(efd_count(F.vq.call_fd), 0);
	cycle(1); /* used idx 6: entry 5 used */
	cr_assert_eq(efd_count(F.vq.call_fd), 1);
	cycle(3);
	cr_assert_eq(efd_count(F.vq.call_fd), 0, "no new request, no notification");
	/* batched: one flush covering the event gives one notification */
	*used_event = htole16(10);
	for (unsigned i = 0; i < 4; i++) {
		desc(F.desc, (uint16_t)i, DATA_GPA, 8, VRING_DESC_F_WRITE, 0);
		avail_add((uint16_t)i);
	}
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
		vsxu_vq_push(&F.vq, &F.e, 0);
	}
	vsxu_vq_flush(&F.vq); /* used idx 9 -> 13 */
	cr_assert_eq(le16toh(F.used->idx), 13);
	cr_assert_eq(efd_count(F.vq.call_fd), 1);
	teardown();
}

Test(vq, event_idx_ignores_flags)
{
	fake_setup(16, true, true);
	F.avail->flags = htole16(VRING_AVAIL_F_NO_INTERRUPT);
	cycle(1);
	cr_assert_eq(efd_count(F.vq.call_fd), 1);
	teardown();
}

Test(vq, set_notify_without_event_idx, .init = setup, .fini = teardown)
{
	vsxu_vq_set_notify(&F.vq, false);
	cr_assert_eq(le16toh(F.used->flags), VRING_USED_F_NO_NOTIFY);
	cr_assert(F.vq.notify_off);
	vsxu_vq_set_notify(&F.vq, true);
	cr_assert_eq(le16toh(F.used->flags), 0);
	cr_assert(!F.vq.notify_off);
}

Test(vq, set_notify_event_idx_writes_avail_event)
{
	uint16_t *avail_event;

	fake_setup(16, true, true);
	avail_event = (uint16_t *)&F.used->ring[16];
	for (unsigned i = 0; i < 3; i++) {
		desc(F.desc, (uint16_t)i, DATA_GPA, 8, 0, 0);
		avail_add((uint16_t)i);
	}
	vsxu_vq_set_notify(&F.vq, false);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 0);
	cr_assert_eq(le16toh(*avail_event), 0, "notifications off: pop leaves it");
	cr_assert_eq(le16toh(F.used->flags), 0, "EVENT_IDX: the flag is not used");
	vsxu_vq_set_notify(&F.vq, true);
	cr_assert_eq(le16toh(*avail_event), 3);
	teardown();
}

Test(vq, pop_rearms_when_empty)
{
	uint16_t *avail_event;

	fake_setup(16, true, true);
	avail_event = (uint16_t *)&F.used->ring[16];
	for (unsigned i = 0; i < 5; i++) {
		desc(F.desc, (uint16_t)i, DATA_GPA, 8, 0, 0);
		avail_add((uint16_t)i);
	}
	for (unsigned i = 0; i < 5; i++)
		cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
	cr_assert_eq(le16toh(*avail_event), 0, "not written while there is work");
	cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 0);
	cr_assert_eq(le16toh(*avail_event), 5, "the guest kicks for the next buffer");
	teardown();
}

Test(vq, wrap_around_small_ring)
{
	/* 70000 chains through a 4-entry ring: all 16-bit indices wrap */
	fake_setup(4, true, true);
	for (unsigned i = 0; i < 70000; i++) {
		uint16_t h = (uint16_t)(i % 4);

		desc(F.desc, h, DATA_GPA + h * 64, 64, VRING_DESC_F_WRITE, 0);
		avail_add(h);
		cr_assert_eq(vsxu_vq_pop(&F.vq, &F.e), 1);
		cr_assert_eq(F.e.head, h);
		vsxu_vq_push(&F.vq, &F.e, i % 64);
		if (i % 3 == 2)
			vsxu_vq_flush(&F.vq);
	}
	vsxu_vq_flush(&F.vq);
	cr_assert_eq(F.vq.last_avail, (uint16_t)70000);
	cr_assert_eq(le16toh(F.used->idx), (uint16_t)70000);
	cr_assert_eq(le32toh(F.used->ring[(70000 - 1) % 4].id), (70000 - 1) % 4);
	cr_assert_eq(le32toh(F.used->ring[(70000 - 1) % 4].len), (70000 - 1) % 64);
	cr_assert(!F.vq.broken);
	teardown();
}

Test(vq, reset)
{
	struct vsxu_vq vq;

	memset(&vq, 0x5a, sizeof(vq));
	vsxu_vq_reset(&vq);
	cr_assert_eq(vq.kick_fd, -1);
	cr_assert_eq(vq.call_fd, -1);
	cr_assert_eq(vq.err_fd, -1);
	cr_assert_eq(vq.num, 0);
	cr_assert(!vq.started && !vq.enabled && !vq.broken);
	cr_assert(!vsxu_vq_ready(&vq));
}

/* ---- iovec helpers ---- */

Test(iov, copy_and_slice)
{
	char a[5] = "abcde", b[3] = "fgh", c[4] = "ijkl", out[16] = { 0 };
	struct iovec v[3] = { { a, 5 }, { b, 3 }, { c, 4 } }, s[3];
	unsigned n;

	cr_assert_eq(vsxu_iov_size(v, 3), 12);
	cr_assert_eq(vsxu_iov_to_buf(v, 3, 3, out, 7), 7);
	cr_assert_str_eq(out, "defghij");
	memset(out, 0, sizeof(out));
	cr_assert_eq(vsxu_iov_to_buf(v, 3, 10, out, 16), 2);
	cr_assert_str_eq(out, "kl");
	cr_assert_eq(vsxu_iov_to_buf(v, 3, 12, out, 16), 0);

	cr_assert_eq(vsxu_iov_from_buf(v, 3, 4, "XYZW", 4), 4);
	cr_assert_eq(memcmp(a, "abcdX", 5), 0);
	cr_assert_eq(memcmp(b, "YZW", 3), 0);
	cr_assert_eq(vsxu_iov_from_buf(v, 3, 11, "QR", 2), 1);
	cr_assert_eq(c[3], 'Q');

	n = vsxu_iov_slice(s, 3, v, 3, 2, 8);
	cr_assert_eq(n, 3);
	cr_assert_eq(s[0].iov_base, a + 2);
	cr_assert_eq(s[0].iov_len, 3);
	cr_assert_eq(s[1].iov_base, b);
	cr_assert_eq(s[1].iov_len, 3);
	cr_assert_eq(s[2].iov_base, c);
	cr_assert_eq(s[2].iov_len, 2);
	cr_assert_eq(vsxu_iov_slice(s, 1, v, 3, 2, 8), 1, "bounded by max");
	cr_assert_eq(vsxu_iov_slice(s, 3, v, 3, 5, 3), 1);
	cr_assert_eq(s[0].iov_base, b);
	cr_assert_eq(vsxu_iov_slice(s, 3, v, 3, 12, 3), 0);
}

/* ---- the memory guard (memguard.h) on a thread that blocks signals ---- */

struct guard_job {
	volatile char *map;
	int memfd;
	bool add_here;          /* register the mapping on this thread */
	int slot;
	char seen;
};

/* As a vsxd worker started with every signal blocked (issue #25): the file
 * shrinks under a guest mapping and this thread reads it. A blocked SIGBUS
 * would kill the process (criterion reports a crash). */
static void *guard_reader(void *arg)
{
	struct guard_job *j = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	if (j->add_here)
		j->slot = vsxu_memguard_add((void *)j->map, 2 * 4096);
	else
		cr_assert_eq(vsxu_memguard_thread(), 0);
	cr_assert_eq(ftruncate(j->memfd, 0), 0);
	j->seen = j->map[4096];
	return NULL;
}

static void guard_run(bool add_here)
{
	struct guard_job j = { .add_here = add_here };
	pthread_t t;

	j.memfd = memfd_create("guard", MFD_CLOEXEC);
	cr_assert_geq(j.memfd, 0);
	cr_assert_eq(ftruncate(j.memfd, 2 * 4096), 0);
	j.map = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, j.memfd, 0);
	cr_assert_neq((void *)j.map, MAP_FAILED);
	j.map[4096] = 'x';
	if (!add_here)
		j.slot = vsxu_memguard_add((void *)j.map, 2 * 4096);
	cr_assert_eq(pthread_create(&t, NULL, guard_reader, &j), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_gt(j.slot, 0);
	cr_assert_eq(j.seen, 0, "the read completes with the zero page");
	cr_assert(vsxu_memguard_faulted(j.slot));
	cr_assert(vsxu_memguard_any());
	vsxu_memguard_del(j.slot);
	munmap((void *)j.map, 2 * 4096);
	close(j.memfd);
}

Test(memguard, holds_on_the_thread_that_maps_though_it_blocked_every_signal)
{
	guard_run(true);
}

Test(memguard, vsxu_memguard_thread_makes_it_hold_on_another_thread)
{
	guard_run(false);
}

/* Someone replaced the handler after the guard installed it: the next
 * vsxu_memguard_thread puts it back, and a SIGBUS outside guest memory
 * still goes to what was there (here: the default, death by SIGBUS). */
Test(memguard, handler_replaced_is_installed_again, .signal = SIGBUS)
{
	struct guard_job j = { .add_here = false };
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	volatile char *other;
	pthread_t t;
	int fd;

	sigemptyset(&dfl.sa_mask);
	cr_assert_eq(vsxu_memguard_thread(), 0);
	cr_assert_eq(sigaction(SIGBUS, &dfl, NULL), 0);
	j.memfd = memfd_create("guard", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(j.memfd, 2 * 4096), 0);
	j.map = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, j.memfd, 0);
	j.slot = vsxu_memguard_add((void *)j.map, 2 * 4096);
	cr_assert_eq(pthread_create(&t, NULL, guard_reader, &j), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert(vsxu_memguard_faulted(j.slot), "the guard caught it");
	/* a shrunk mapping that is not guest memory: SIG_DFL's death */
	fd = memfd_create("other", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	other = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_eq(ftruncate(fd, 0), 0);
	j.seen = other[0];
	cr_assert_fail("read past the end of an unguarded file: %d", j.seen);
}

/* A SIGBUS sent (kill) is no access to guest memory: its old action
 * (here the default, not a sanitizer's handler). */
Test(memguard, sent_sigbus_is_not_absorbed, .signal = SIGBUS)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };

	sigemptyset(&dfl.sa_mask);
	cr_assert_eq(sigaction(SIGBUS, &dfl, NULL), 0);
	cr_assert_eq(vsxu_memguard_thread(), 0);
	raise(SIGBUS);
	cr_assert_fail("a sent SIGBUS was absorbed");
}
