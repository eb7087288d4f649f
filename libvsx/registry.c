/*
 * The transport registry: every transport libvsx has, and the choice of one
 * for an address. An explicit name in vsx_opts wins; otherwise the address
 * kind decides, and for vsock: addresses the machine does (vsx_probe). In a
 * Hyper-V guest that is also a vhost-vsock host or has vsock loopback
 * (nested virtualization), hv_sock reaches only the host, so other CIDs go
 * to the kernel transport, as the kernel routes them.
 */
#include <string.h>

#include "vsx-int.h"

static const struct vsx_transport *const transports[] = {
	&vsx__virtio_kernel,
	&vsx__hybrid,
	&vsx__vm,
	&vsx__vmbus,
};

#define N_TRANSPORTS (sizeof(transports) / sizeof(transports[0]))

const struct vsx_transport *vsx__transport_by_name(const char *name)
{
	size_t i;

	for (i = 0; i < N_TRANSPORTS; i++)
		if (strcmp(transports[i]->name, name) == 0)
			return transports[i];
	return NULL;
}

static int serves(const struct vsx_transport *t, const struct vsx_addr *a)
{
	return (t->addr_kinds & (1u << a->kind)) != 0;
}

const struct vsx_transport *vsx__transport_for(const struct vsx_addr *a,
					       const char *name)
{
	const struct vsx_transport *t;
	struct vsx_probe p;
	size_t i;

	if (name) {
		t = vsx__transport_by_name(name);
		return t && serves(t, a) ? t : NULL;
	}
	if (a->kind == VSX_ADDR_VSOCK && vsx_probe(&p) == 0 && p.transport[0]) {
		t = vsx__transport_by_name(p.transport);
		if (t == &vsx__vmbus && a->cid != VSX_CID_HOST && a->cid != VSX_CID_ANY &&
		    (p.have & (VSX_HAVE_VHOST_HOST | VSX_HAVE_LOOPBACK)))
			t = &vsx__virtio_kernel;
		if (t && serves(t, a))
			return t;
	}
	for (i = 0; i < N_TRANSPORTS; i++)
		if (serves(transports[i], a))
			return transports[i];
	return NULL;
}
