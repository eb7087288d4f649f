/*
 * The restart state's connection slots (daemon/state_slots.c, layout in
 * state_slots.h), on a real memfd: an open is read back, a close is gone
 * from what a new process reads, a closed connection's slot is reused
 * (the region does not grow with churn), a VM that gives up its region
 * leaves nothing, the record's own connections win over the slots, a
 * torn or damaged slot is skipped and the others read, and a writer
 * SIGKILLed at random instants mid-churn always leaves a file that reads,
 * every connection in it one that was open, whole.
 */
#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../daemon/state.h"
#include "../../daemon/state_slots.h"

static uint64_t region0 = VSXD_SLOTS_BASE + VSXD_SLOTS_DIR_BYTES;

/* A connection whose every field derives from @id (checked by same()). */
static struct vsxd_state_conn conn(uint64_t id)
{
	struct vsxd_state_conn c = {
		.id = id, .guest_cid = 3, .peer_cid = 2, .guest_port = (uint32_t)(id * 7),
		.peer_port = (uint32_t)(1024 + id), .type = 1 + (unsigned)(id & 1),
		.state = VSXB_CONN_ESTABLISHED, .flags = id & 2 ? VSXD_CONN_GUEST_INITIATED : 0,
		.guest_shut = (unsigned)(id % 4), .host_shut = (unsigned)((id / 4) % 4),
		.peer = VSXD_PEER_HOST + (unsigned)(id % 3),
		.cr = { .buf_alloc = 262144, .fwd_cnt = (uint32_t)(id * 3),
			.peer_buf_alloc = 65536, .peer_fwd_cnt = (uint32_t)(id * 5) },
		.to_guest = id << 20, .from_guest = id << 10,
	};

	snprintf(c.tag, sizeof(c.tag), "fwd-%llu", (unsigned long long)id);
	return c;
}

static int addc(struct vsxd_slots_vm *v, uint64_t id)
{
	struct vsxd_state_conn c = conn(id);

	return vsxd_slots_add(v, &c);
}

static bool same(const struct vsxd_state_conn *a, uint64_t id)
{
	struct vsxd_state_conn b = conn(id);

	return a->id == b.id && a->guest_cid == b.guest_cid && a->peer_cid == b.peer_cid &&
	       a->guest_port == b.guest_port && a->peer_port == b.peer_port &&
	       a->type == b.type && a->state == b.state && a->flags == b.flags &&
	       a->guest_shut == b.guest_shut && a->host_shut == b.host_shut &&
	       a->peer == b.peer && a->cr.buf_alloc == b.cr.buf_alloc &&
	       a->cr.fwd_cnt == b.cr.fwd_cnt && a->cr.peer_buf_alloc == b.cr.peer_buf_alloc &&
	       a->cr.peer_fwd_cnt == b.cr.peer_fwd_cnt && a->to_guest == b.to_guest &&
	       a->from_guest == b.from_guest && !strcmp(a->tag, b.tag);
}

/* What a new process reads of @fd for VMs "web" and "db" (neither with
 * connections in its record). */
static void read_back(int fd, struct vsxd_state *s, struct vsxd_state_vm vms[2])
{
	char why[128] = "";

	memset(vms, 0, 2 * sizeof(vms[0]));
	strcpy(vms[0].name, "web");
	strcpy(vms[1].name, "db");
	*s = (struct vsxd_state){ .nvms = 2, .vms = vms };
	cr_assert_eq(vsxd_slots_read(fd, s, why, sizeof(why)), 0, "%s", why);
}

static void clear(struct vsxd_state_vm vms[2])
{
	for (unsigned i = 0; i < 2; i++) {
		free(vms[i].conns);
		vms[i].conns = NULL;
		vms[i].nconns = 0;
	}
}

static bool has(const struct vsxd_state_vm *v, uint64_t id)
{
	for (unsigned i = 0; i < v->nconns; i++)
		if (v->conns[i].id == id)
			return same(&v->conns[i], id);
	return false;
}

static int mfd(void)
{
	int fd = memfd_create("test-slots", MFD_CLOEXEC);

	cr_assert_geq(fd, 0);
	return fd;
}

static uint32_t mark_at(int fd, uint64_t off)
{
	uint8_t m[4];

	cr_assert_eq(pread(fd, m, 4, (off_t)off), 4);
	return (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 |
	       (uint32_t)m[3] << 24;
}

Test(slots, open_close_reuse)
{
	struct vsxd_state_vm vms[2];
	struct vsxd_slots *sl;
	struct vsxd_slots_vm *web;
	struct vsxd_state s;
	int fd = mfd();

	cr_assert_eq(vsxd_slots_open(fd, &sl), 0);
	cr_assert_null(vsxd_slots_vm(sl, "web"), "no VM before its first bind");
	cr_assert_eq(vsxd_slots_bind(sl, "web"), 0);
	cr_assert_eq(vsxd_slots_bind(sl, "web"), 0, "bound twice: the same region");
	web = vsxd_slots_vm(sl, "web");
	cr_assert_not_null(web);
	for (uint64_t id = 1; id <= 3; id++)
		cr_assert_eq(addc(web, id), 0);
	cr_assert_eq(vsxd_slots_add(web, &(struct vsxd_state_conn){ .type = 1 }), -ENOENT,
		     "no connection has id 0");
	cr_assert_eq(vsxd_slots_count(web), 3);
	read_back(fd, &s, vms);
	cr_assert_eq(vms[0].nconns, 3);
	cr_assert(has(&vms[0], 1) && has(&vms[0], 2) && has(&vms[0], 3),
		  "every field of each connection read back");
	cr_assert_eq(vms[1].nconns, 0, "another VM's slots are its own");
	clear(vms);

	/* a close: gone from what a new process reads */
	cr_assert_eq(vsxd_slots_del(web, 2), 0);
	cr_assert_eq(vsxd_slots_del(web, 2), -ENOENT, "closed once");
	cr_assert_eq(mark_at(fd, region0 + VSXD_SLOT_SIZE), VSXD_SLOT_FREE);
	read_back(fd, &s, vms);
	cr_assert(vms[0].nconns == 2 && has(&vms[0], 1) && has(&vms[0], 3) && !has(&vms[0], 2),
		  "%u connections read", vms[0].nconns);
	clear(vms);

	/* churn: the freed slot is taken again, the region does not grow */
	for (uint64_t id = 10; id < 10000; id++) {
		cr_assert_eq(addc(web, id), 0);
		cr_assert_eq(vsxd_slots_del(web, id), 0);
	}
	cr_assert_eq(addc(web, 10000), 0);
	cr_assert_eq(mark_at(fd, region0 + VSXD_SLOT_SIZE), VSXD_SLOT_USED,
		     "the first free slot is reused");
	cr_assert_eq(mark_at(fd, region0 + 3 * VSXD_SLOT_SIZE), 0,
		     "no slot past the three ever open at once was used");
	read_back(fd, &s, vms);
	cr_assert(vms[0].nconns == 3 && has(&vms[0], 1) && has(&vms[0], 3) &&
		  has(&vms[0], 10000));
	clear(vms);

	/* a VM that gives its region up leaves nothing; bound again, empty */
	cr_assert_eq(vsxd_slots_bind(sl, "db"), 0);
	cr_assert_eq(addc(vsxd_slots_vm(sl, "db"), 77), 0);
	vsxd_slots_unbind(sl, "web");
	cr_assert_eq(addc(web, 5), -ENOENT);
	read_back(fd, &s, vms);
	cr_assert(vms[0].nconns == 0 && vms[1].nconns == 1 && has(&vms[1], 77));
	clear(vms);
	cr_assert_eq(vsxd_slots_bind(sl, "web"), 0);
	cr_assert_eq(vsxd_slots_count(web), 0);
	read_back(fd, &s, vms);
	cr_assert_eq(vms[0].nconns, 0, "a region bound again starts empty");
	clear(vms);
	vsxd_slots_free(sl);
	close(fd);
}

Test(slots, record_wins_and_reads_around_slots)
{
	struct vsxd_state_conn kept = conn(500);
	struct vsxd_state_vm vm = { .name = "web", .conn = "vm.web.conn", .cid = 3,
				    .nregions = 1, .nqueues = 1, .nconns = 1 };
	struct vsxd_state s = { .generation = 7, .nvms = 1 }, back;
	struct vsxd_slots *sl;
	char why[128] = "";
	uint8_t buf[4096];
	long n;
	int fd = mfd();

	vm.region[0] = (struct vsxd_state_region){ 0, 4096, 4096, 0, "vm.web.mem0" };
	vm.queue[0] = (struct vsxd_state_queue){ 0, true, 128, 0, 16, 32, "vm.web.kick0",
						 "vm.web.call0", 0 };
	kept.flags |= VSXD_CONN_WHOLE;
	vm.conns = &kept;
	s.vms = &vm;
	n = vsxd_state_encode(&s, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_eq(pwrite(fd, buf, (size_t)n, 0), n);
	cr_assert_eq(vsxd_slots_open(fd, &sl), 0);
	cr_assert_eq(vsxd_slots_bind(sl, "web"), 0);
	cr_assert_eq(addc(vsxd_slots_vm(sl, "web"), 1), 0);
	/* the file is longer than a record can be: the record is read by its
	 * header, and names its connection: the slots are not read */
	cr_assert_eq(vsxd_state_read(fd, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(vsxd_slots_read(fd, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert(back.nvms == 1 && back.vms[0].nconns == 1 && back.vms[0].conns[0].id == 500 &&
		  back.generation == 7);
	vsxd_state_clear(&back);
	/* written again without connections: they come from the slots */
	vm.nconns = 0;
	n = vsxd_state_encode(&s, buf, sizeof(buf));
	cr_assert_eq(pwrite(fd, buf, (size_t)n, 0), n);
	cr_assert_eq(vsxd_state_read(fd, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(vsxd_slots_read(fd, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert(back.vms[0].nconns == 1 && same(&back.vms[0].conns[0], 1));
	vsxd_state_clear(&back);
	/* a new process keeping the file in place cuts the slots */
	vsxd_slots_free(sl);
	cr_assert_eq(vsxd_slots_wipe(fd), 0);
	cr_assert_eq(vsxd_state_read(fd, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(vsxd_slots_read(fd, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(back.vms[0].nconns, 0);
	vsxd_state_clear(&back);
	close(fd);
}

Test(slots, torn_and_damaged_slots_are_skipped)
{
	struct vsxd_state_vm vms[2];
	struct vsxd_slots *sl;
	struct vsxd_slots_vm *web;
	struct vsxd_state s;
	uint8_t b;
	int fd = mfd();

	cr_assert_eq(vsxd_slots_open(fd, &sl), 0);
	cr_assert_eq(vsxd_slots_bind(sl, "web"), 0);
	web = vsxd_slots_vm(sl, "web");
	for (uint64_t id = 1; id <= 5; id++)
		cr_assert_eq(addc(web, id), 0);
	/* slot 1: an open caught before its mark (a body under FREE) */
	cr_assert_eq(pwrite(fd, &(uint32_t){ htole32(VSXD_SLOT_FREE) }, 4,
			    (off_t)(region0 + VSXD_SLOT_SIZE)), 4);
	/* slot 2: a byte of its body spoiled (crc) */
	cr_assert_eq(pread(fd, &b, 1, (off_t)(region0 + 2 * VSXD_SLOT_SIZE + 30)), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)(region0 + 2 * VSXD_SLOT_SIZE + 30)), 1);
	/* slot 3: a length past the slot */
	cr_assert_eq(pwrite(fd, &(uint32_t){ htole32(4096) }, 4,
			    (off_t)(region0 + 3 * VSXD_SLOT_SIZE + 8)), 4);
	read_back(fd, &s, vms);
	cr_assert(vms[0].nconns == 2 && has(&vms[0], 1) && has(&vms[0], 5),
		  "%u connections read", vms[0].nconns);
	clear(vms);
	/* a damaged directory entry: its region is nobody's */
	cr_assert_eq(pwrite(fd, "X", 1, (off_t)(VSXD_SLOTS_BASE + 9)), 1);
	read_back(fd, &s, vms);
	cr_assert_eq(vms[0].nconns, 0);
	clear(vms);
	vsxd_slots_free(sl);
	close(fd);
}

Test(slots, region_full_is_enospc)
{
	struct vsxd_slots *sl;
	struct vsxd_slots_vm *v;
	int fd = mfd();

	cr_assert_eq(vsxd_slots_open(fd, &sl), 0);
	cr_assert_eq(vsxd_slots_bind(sl, "web"), 0);
	v = vsxd_slots_vm(sl, "web");
	for (uint64_t id = 1; id <= VSXD_STATE_MAX_CONNS; id++)
		cr_assert_eq(addc(v, id), 0);
	cr_assert_eq(addc(v, VSXD_STATE_MAX_CONNS + 1),
		     -ENOSPC);
	cr_assert_eq(vsxd_slots_del(v, 12345), 0);
	cr_assert_eq(addc(v, VSXD_STATE_MAX_CONNS + 1), 0);
	cr_assert_eq(vsxd_slots_count(v), VSXD_STATE_MAX_CONNS);
	vsxd_slots_free(sl);
	close(fd);
}

/* A writer churning connections, SIGKILLed at a random instant, 40 times:
 * the file always reads, and what it names is a set of connections that
 * were open, each whole, at least the ones never closed. */
Test(slots, sigkill_mid_churn_leaves_a_readable_file)
{
	srand((unsigned)time(NULL));
	for (int round = 0; round < 40; round++) {
		struct vsxd_state_vm vms[2];
		struct vsxd_state s;
		int fd = mfd(), status;
		pid_t pid;

		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			struct vsxd_slots *sl;
			struct vsxd_slots_vm *v;

			if (vsxd_slots_open(fd, &sl) || vsxd_slots_bind(sl, "web"))
				_exit(1);
			v = vsxd_slots_vm(sl, "web");
			/* ids 1-100 stay open; then churn on top of them */
			for (uint64_t id = 1; id <= 100; id++)
				addc(v, id);
			kill(getpid(), SIGSTOP);
			for (uint64_t id = 101;; id++) {
				addc(v, id);
				if (id > 150)
					vsxd_slots_del(v, id - 50);
			}
		}
		cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
		cr_assert(WIFSTOPPED(status), "the writer set up its 100");
		kill(pid, SIGCONT);
		usleep((useconds_t)(rand() % 20000));
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		read_back(fd, &s, vms);
		cr_assert_geq(vms[0].nconns, 100, "round %d: %u connections", round,
			      vms[0].nconns);
		cr_assert_leq(vms[0].nconns, 152, "round %d: %u connections", round,
			      vms[0].nconns);
		for (uint64_t id = 1; id <= 100; id++)
			cr_assert(has(&vms[0], id), "round %d: connection %llu", round,
				  (unsigned long long)id);
		for (unsigned i = 0; i < vms[0].nconns; i++)
			cr_assert(same(&vms[0].conns[i], vms[0].conns[i].id),
				  "round %d: connection %llu read whole", round,
				  (unsigned long long)vms[0].conns[i].id);
		clear(vms);
		close(fd);
	}
}
