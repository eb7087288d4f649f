/* vsxctl status: daemon version, uptime, VMs and connection counts. */
#include <stdlib.h>

#include "vsxctl.h"

int status_main(int argc, char **argv)
{
	struct vsx_ctl_req req;
	struct vsx_kvs kvs;
	char *buf = NULL;
	int rc;

	if (argc != 1)
		die_usage(argv[0]);
	vsx__ctl_req_init(&req, VSX_CTL_STATUS);
	rc = ctl_request(argv[0], &req, &buf, &kvs);
	if (rc)
		return rc;
	out_pairs(&kvs);
	vsx__ctl_kvs_free(&kvs);
	free(buf);
	return 0;
}
