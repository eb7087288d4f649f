/* vsxctl vms: the VMs vsxd serves, each with its device's state. */
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

static const struct out_col vm_cols[] = {
	{ VSX_CTL_K_VM, "VM", false },
	{ VSX_CTL_K_CID, "CID", true },
	{ VSX_CTL_K_THREAD, "THREAD", false },
	{ VSX_CTL_K_STATE, "STATE", false },
	{ VSX_CTL_K_CONNS, "CONNS", true },
	{ VSX_CTL_K_SOCKET, "SOCKET", false },
	{ VSX_CTL_K_UDS_PATH, "UDS_PATH", false },
};

static bool flag(const struct vsx_kvs *kvs, unsigned b, unsigned e, const char *key)
{
	for (; b < e; b++)
		if (strcmp(kvs->kv[b].key, key) == 0)
			return strcmp(kvs->kv[b].value, "1") == 0;
	return false;
}

/*
 * One word for the flags of the vm= record [@b, @e): broken (stopped after
 * a bad guest, until it resets) before paused (rings stopped by the
 * front-end, connections kept) before connected (a front-end runs the
 * device); none of them: the VM waits for its front-end.
 */
static const char *vm_state(const struct vsx_kvs *kvs, unsigned b, unsigned e)
{
	if (flag(kvs, b, e, VSX_CTL_K_BROKEN))
		return "broken";
	if (flag(kvs, b, e, VSX_CTL_K_PAUSED))
		return "paused";
	if (flag(kvs, b, e, VSX_CTL_K_CONNECTED))
		return "connected";
	return "waiting";
}

/* The reply with a state= pair added at the end of every vm= record, then
 * printed as out_records prints records. */
static void print_vms(const struct vsx_kvs *kvs)
{
	struct vsx_kvs out = { 0 };
	unsigned i, b = 0, nvm = 0;

	for (i = 0; i < kvs->n; i++)
		nvm += strcmp(kvs->kv[i].key, VSX_CTL_K_VM) == 0;
	out.kv = calloc(kvs->n + nvm, sizeof(*out.kv));
	if (!out.kv) {
		err_msg("vms", "out of memory");
		return;
	}
	for (i = 0; i <= kvs->n; i++) {
		const char *key = i < kvs->n ? kvs->kv[i].key : VSX_CTL_K_ERRNO;

		/* a record ends where the next one, errno or the reply does */
		if (strcmp(key, VSX_CTL_K_VM) == 0 || strcmp(key, VSX_CTL_K_ERRNO) == 0) {
			if (b < i && strcmp(kvs->kv[b].key, VSX_CTL_K_VM) == 0)
				out.kv[out.n++] = (struct vsx_kv){ VSX_CTL_K_STATE,
								   vm_state(kvs, b, i) };
			b = i;
		}
		if (i < kvs->n)
			out.kv[out.n++] = kvs->kv[i];
	}
	out.cap = out.n;
	out_records(&out, VSX_CTL_K_VM, vm_cols, sizeof(vm_cols) / sizeof(vm_cols[0]));
	free(out.kv);
}

int vms_main(int argc, char **argv)
{
	struct vsx_ctl_req req;

	if (argc != 1)
		die_usage(argv[0]);
	vsx__ctl_req_init(&req, VSX_CTL_VMS);
	return ctl_run(argv[0], &req, print_vms);
}
