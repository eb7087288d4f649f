/*
 * Restarts (backend.h, "Restarts"): what a VM's device tells whoever keeps
 * it for a new process (device events), and a new process's adoption of a
 * device whose descriptors it inherited.
 *
 * An adopted device starts with no connection: those of the old process
 * are gone with its host sockets (host programs saw EOF when it died). The
 * guest still has them, and one that only waits to read would wait for
 * ever: each one the old process's state named gets an RST. They go out
 * through the VM's queue of RSTs for packets without a connection, refilled
 * from a timer as it drains, so the data path does not change.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vhost-user/acceptor.h"
#include "router.h"

void vsxb_router_set_device_events(struct vsxb_router *r, vsxb_device_event_fn fn,
				   void *arg)
{
	vsxb__world_stop(r);
	r->dev_fn = fn;
	r->dev_arg = arg;
	vsxb__world_start(r);
}

void vsxb__device_event(struct vsxb_vm *vm, bool live)
{
	struct vsxb_router *r = vm->r;
	struct vsxu_vu_state st;

	if (!r->dev_fn || vm->freeing)
		return;
	if (live && vsxu_vu_get_state(vm->vu, &st) == 0)
		r->dev_fn(r->dev_arg, vm, vm->name, vm->cid, &st);
	else
		r->dev_fn(r->dev_arg, vm, vm->name, vm->cid, NULL);
}

/* Move what fits of the RSTs still to send into the VM's RST queue. */
static void rst_cb(void *arg)
{
	struct vsxb_vm *vm = arg;

	if (!vm->live || vm->broken) {
		vm->rst_n = vm->rst_next = 0;
		return;
	}
	while (vm->rst_next < vm->rst_n && vm->orphan_n < VSXB_ORPHAN_MAX) {
		const struct vsxb_conn_addr *a = &vm->rst[vm->rst_next++];
		/* as if the guest had sent a packet on it: the answer is an RST */
		struct virtio_vsock_hdr h = {
			.src_cid = a->guest_cid,
			.dst_cid = a->peer_cid,
			.src_port = a->guest_port,
			.dst_port = a->peer_port,
			.type = (uint16_t)a->type,
			.op = VIRTIO_VSOCK_OP_RW,
		};

		vsxb__orphan_rst(vm, &h);
	}
	vsxb__vm_touch(vm);
	vsxb__round(vm->sh);
	if (vm->rst_next < vm->rst_n)
		vm->sh->loop->timer_arm(vm->rst_timer, 1);
}

int vsxb_vm_adopt(struct vsxb_vm *vm, const struct vsxu_vu_state *st,
		  const struct vsxb_conn_addr *conns, unsigned n)
{
	struct vsxb_router *r = vm->r;
	const struct vsxu_loop *l = vm->sh->loop;
	struct vsxb_conn_addr *copy = NULL;
	int err;

	if (n) {
		copy = calloc(n, sizeof(*copy));
		if (!copy) {
			/* the descriptors are taken whatever the result */
			vsxu_vu_state_close(st);
			return -ENOMEM;
		}
		memcpy(copy, conns, n * sizeof(*copy));
	}
	vsxb__world_stop(r);
	if (!vm->rst_timer)
		vm->rst_timer = l->timer(l->ctx, rst_cb, vm);
	err = vsxu_vu_adopt(vm->vu, st);
	if (!err && n && vm->rst_timer) {
		free(vm->rst);
		vm->rst = copy;
		vm->rst_n = n;
		vm->rst_next = 0;
		copy = NULL;
		l->timer_arm(vm->rst_timer, 0);
	} else if (!err && n) {
		err = -ENOMEM;
	}
	vsxb__world_start(r);
	free(copy);
	return err;
}

void vsxb__restart_free(struct vsxb_vm *vm)
{
	if (vm->rst_timer)
		vm->sh->loop->timer_free(vm->rst_timer);
	vm->rst_timer = NULL;
	free(vm->rst);
	vm->rst = NULL;
	vm->rst_n = vm->rst_next = 0;
}

/* ---- Live handoff ---- */

void vsxb_vm_accept_start(struct vsxb_vm *vm)
{
	vsxb__world_stop(vm->r);
	if (vm->acc)
		vsxu_acceptor_hold(vm->acc, false);
	vsxb__world_start(vm->r);
}

int vsxb_vm_device_state(struct vsxb_vm *vm, struct vsxu_vu_state *st)
{
	int err;

	vsxb__world_stop(vm->r);
	if (vm->paused)
		err = -EBUSY;
	else
		err = vsxu_vu_get_state(vm->vu, st);
	/* a front-end still setting the device up would lose it */
	if (err == -ENOTCONN && vsxu_vu_connected(vm->vu))
		err = -EAGAIN;
	vsxb__world_start(vm->r);
	return err;
}
