/*
 * The owner checks (configure --enable-owner-checks: backend-int.h's
 * VSXB_OWNED). A VM on a loop thread of its own, as on vsxd's workers:
 * its rings, a connection's timer, kill and schedule, touched from its
 * own loop (a call posted there) or by the control thread in a world
 * stop, pass; touched from the test's thread, which is neither, abort
 * with a line naming what was touched. Without the checks there is
 * nothing to show: the cases are skipped.
 */
#include <signal.h>
#include <string.h>

#include "suite.h"
#include "backend/conn.h"
#include "backend/ring.h"

TestSuite(owner, .init = setup_bare, .fini = teardown, .timeout = 30);

#ifdef VSXB_OWNER_CHECKS
#define NEEDS_CHECKS() ((void)0)
#define ABORTS .signal = SIGABRT
#else
#define NEEDS_CHECKS() cr_skip_test("built without --enable-owner-checks")
#define ABORTS .disabled = true
#endif

/* VM 0 on worker loop 0; its device open, so that its rings exist. */
static struct vsxb_vm *on_worker(void)
{
	struct vsxb_vm_config cfg = { .loop = hx_worker(&H, 0) };

	cr_assert_eq(hx_vm(&H, 0, &cfg), 0);
	hx_open(&H, 0, NULL);
	return H.v[0].vm;
}

/* A connection of @vm that is over already: each checked entry point
 * returns at once after its check. */
static void dead_conn(struct vsxb_vm *vm, struct conn *c)
{
	memset(c, 0, sizeof(*c));
	c->vm = vm;
	c->dead = true;
}

static void touch(void *arg)
{
	struct vsxb_vm *vm = arg;
	struct conn c;

	dead_conn(vm, &c);
	vsxb__conn_timer(&c, T_NONE, 0);
	vsxb__conn_kill(&c);
	vsxb__conn_schedule(&c);
	(void)vsxb__ring_tx_ready(vm, false);
	vsxb__ring_rx_unpop(vm, 0);
}

/* The control thread (the harness's loop, where the router was made) in
 * a world stop. */
static void touch_in_stop(void *arg)
{
	struct vsxb_vm *vm = arg;

	vsxb__world_stop(vm->r);
	touch(vm);
	vsxb__world_start(vm->r);
}

Test(owner, own_loop_and_stops_pass)
{
	struct vsxb_vm *vm;

	NEEDS_CHECKS();
	vm = on_worker();
	vsx_test_loop_call(H.wl[0], touch, vm);
	vsx_test_loop_call(H.tl, touch_in_stop, vm);
	cr_assert(true, "no check fired");
}

Test(owner, ring_from_another_thread_aborts, ABORTS)
{
	struct vsxb_vm *vm;

	NEEDS_CHECKS();
	vm = on_worker();
	(void)vsxb__ring_tx_ready(vm, false);
}

Test(owner, timer_from_another_thread_aborts, ABORTS)
{
	struct vsxb_vm *vm;
	struct conn c;

	NEEDS_CHECKS();
	vm = on_worker();
	dead_conn(vm, &c);
	vsxb__conn_timer(&c, T_NONE, 0);
}

Test(owner, kill_from_another_thread_aborts, ABORTS)
{
	struct vsxb_vm *vm;
	struct conn c;

	NEEDS_CHECKS();
	vm = on_worker();
	dead_conn(vm, &c);
	vsxb__conn_kill(&c);
}

/* The control thread outside a stop is not the worker's VM's owner. */
static void touch_no_stop(void *arg)
{
	(void)vsxb__ring_tx_ready(arg, false);
}

Test(owner, control_thread_outside_a_stop_aborts, ABORTS)
{
	struct vsxb_vm *vm;

	NEEDS_CHECKS();
	vm = on_worker();
	vsx_test_loop_call(H.tl, touch_no_stop, vm);
}
