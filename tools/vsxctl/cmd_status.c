/* vsxctl status: daemon version, uptime, VMs and connection counts. */
#include <stdlib.h>

#include "vsxctl.h"

int status_main(int argc, char **argv)
{
	static const char *const args[] = { "cmd=" VSX_CTL_STATUS };
	struct vsx_kvs kvs;
	char *buf = NULL;
	int rc;

	if (argc != 1)
		die_usage(argv[0]);
	rc = ctl_request(argv[0], args, 1, &buf, &kvs);
	if (rc)
		return rc;
	out_pairs(&kvs);
	vsx__ctl_kvs_free(&kvs);
	free(buf);
	return 0;
}
