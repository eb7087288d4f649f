/*
 * Host-port handlers of VMs on other threads. A handler (vsxb_port_cb,
 * backend.h: vsxd's forwards) belongs to the host program, so it runs on
 * the control thread: a guest REQUEST to such a port on a worker's VM is
 * posted there (struct port_call), and runs in a world stop, after
 * checking that the port, the VM (by pointer and serial) and the
 * connection are all still there; the stop's end runs the rounds.
 * Called by peer_host.c; calls conn.c and shard.c only.
 */
#include <errno.h>
#include <stdlib.h>

#include "peer.h"

struct port_call {
	struct vsxb_router *r;
	struct vsxb_port *p;         /* checked again: it may be gone */
	struct vsxb_vm *vm;          /* likewise */
	uint64_t serial;             /* ... and be another VM at that address */
	uint64_t id;
	uint32_t guest_port, port;
};

static bool port_listed(struct vsxb_router *r, const struct vsxb_port *p)
{
	struct vsxb_list *n;

	for (n = r->ports.next; n != &r->ports; n = n->next)
		if (vsxb_container_of(n, struct vsxb_port, node) == p)
			return true;
	return false;
}

/* The connection the call is for, if its VM and it are still there. */
static struct conn *port_conn(const struct port_call *pc)
{
	if (!vsxb__vm_listed(pc->r, pc->vm, pc->serial))
		return NULL;
	return vsxb__vm_conn(pc->vm, pc->id);
}

/* On the control thread, in a world stop: the handler, as if called at
 * once; a connection that went away meanwhile is not offered. */
static void port_run(void *arg)
{
	struct port_call *pc = arg;
	struct vsxb_router *r = pc->r;
	struct conn *c;
	int rc;

	vsxb__world_stop(r);
	c = port_conn(pc);
	if (c && port_listed(r, pc->p) && c->state == VSXB_CONN_CONNECTING) {
		rc = pc->p->cb(pc->p->arg, pc->vm, pc->id, pc->guest_port, pc->port);
		c = port_conn(pc);
		if (rc < 0 && c) {
			vsxb__conn_why(c, VSXB_REASON_REFUSED, -rc);
			vsxb__conn_reset(c, false);
		}
	} else if (c) {
		vsxb__conn_why(c, VSXB_REASON_REFUSED, ECONNREFUSED);
		vsxb__conn_reset(c, false);
	}
	vsxb__world_start(r);   /* (which runs the rounds it owes) */
	free(pc);
}

void vsxb__port_post(struct vsxb_vm *vm, struct vsxb_port *p, struct conn *c,
		      const struct virtio_vsock_hdr *h)
{
	const struct vsxu_loop *l = vm->r->loop;
	struct port_call *pc = malloc(sizeof(*pc));
	int rc = -ENOMEM;

	if (pc) {
		*pc = (struct port_call){ .r = vm->r, .p = p, .vm = vm,
					  .serial = vm->serial, .id = c->id,
					  .guest_port = h->src_port, .port = h->dst_port };
		rc = l->post ? l->post(l->ctx, port_run, pc) : -ENOSYS;
		if (!rc)
			return;
		free(pc);
	}
	vsxb__conn_why(c, VSXB_REASON_ERROR, -rc);
	vsxb__conn_reset(c, false);
}
