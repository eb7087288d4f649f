/* vsxctl status: daemon version, uptime, VMs and connection counts. */
#include <stdlib.h>

#include "vsxctl.h"

int status_main(int argc, char **argv)
{
	struct vsx_ctl_req req;

	if (argc != 1)
		die_usage(argv[0]);
	vsx__ctl_req_init(&req, VSX_CTL_STATUS);
	return ctl_run(argv[0], &req, out_pairs);
}
