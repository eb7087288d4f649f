/* vsxctl status: daemon version, uptime, VMs and connection counts, and
 * the worker threads: the VMs each serves, and its CPU time. */
#include <stdlib.h>

#include "vsxctl.h"

static const struct out_col thread_cols[] = {
	{ VSX_CTL_K_THREAD, "THREAD", false },
	{ VSX_CTL_K_CPU_MS, "CPU_MS", true },
	{ VSX_CTL_K_THREAD_VMS, "VMS", false },
};

static void out_status(const struct vsx_kvs *kvs)
{
	out_pairs_records(kvs, VSX_CTL_K_THREAD, "workers", thread_cols,
			  sizeof(thread_cols) / sizeof(thread_cols[0]));
}

int status_main(int argc, char **argv)
{
	struct vsx_ctl_req req;

	if (argc != 1)
		die_usage(argv[0]);
	vsx__ctl_req_init(&req, VSX_CTL_STATUS);
	return ctl_run(argv[0], &req, out_status);
}
