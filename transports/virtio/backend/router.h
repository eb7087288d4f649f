/*
 * The rooms above the peers: the router (router.c), the device
 * (device.c) and the lifecycle (lifecycle.c).
 */
#ifndef VSXB_ROUTER_H
#define VSXB_ROUTER_H

#include "peer.h"

/* ---- router.c: VMs, groups, routing, control (calls peers and the API) ---- */

/* A guest REQUEST that has no connection: to a host port handler, a host
 * socket, a sibling VM, or refused. */
void vsxb__router_request(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h);
/* The handler of @vm's host port @port, or NULL. */
struct vsxb_port *vsxb__port_find(struct vsxb_router *r, const struct vsxb_vm *vm,
				uint32_t port);
/* @a and @b have a group in common. */
bool vsxb__share_group(const struct vsxb_vm *a, const struct vsxb_vm *b);
/* Fill the zero fields of @l with the defaults (backend.h). */
void vsxb__limits_defaults(struct vsxb_router_limits *l);

/* ---- restart.c: device events, adoption (calls the API) ---- */
/* Tell the router's device-event hook that @vm's device is @live (started
 * or changed) or not (stopped). */
void vsxb__device_event(struct vsxb_vm *vm, bool live);
/* Free what an adoption left (vm_free). */
void vsxb__restart_free(struct vsxb_vm *vm);

/* ---- device.c: the vhost-user device (calls the router and the API) ---- */
extern const struct vsxu_vu_ops vsxb__vsock_ops;
/* A budget ran out: continue the VM's TX and RX work. */
void vsxb__vm_resume(struct vsxb_vm *vm);

/* ---- lifecycle.c: vsxb_router_new/free, vsxb_vm_new/free (calls all) ---- */

#endif
