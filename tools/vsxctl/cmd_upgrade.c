/* vsxctl upgrade [--exec PATH]: the running vsxd hands every VM, every
 * listening socket and the control socket to a new vsxd process (PATH, or
 * the program it was started as) and exits once that one serves
 * (vsxd(8) UPGRADING VSXD). Exits 0 only then; otherwise vsxd says why
 * and the running one serves on. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

/* vsxd waits VSXD_HANDOFF_TIMEOUT_MS (10 s) for the new process */
#define UPGRADE_TIMEOUT_MS 20000

static void print_upgrade(const struct vsx_kvs *kvs)
{
	const char *pid = vsx__ctl_get(kvs, VSX_CTL_K_PID);
	const char *vms = vsx__ctl_get(kvs, VSX_CTL_K_VMS);
	const char *ls = vsx__ctl_get(kvs, VSX_CTL_K_LISTENERS);
	const char *ce = vsx__ctl_get(kvs, VSX_CTL_K_CONNS_ENDED);
	const char *ck = vsx__ctl_get(kvs, VSX_CTL_K_CONNS_KEPT);
	const char *fds = vsx__ctl_get(kvs, VSX_CTL_K_FDS);

	if (opt_json) {
		out_pairs(kvs);
		return;
	}
	printf("handed over to vsxd pid %s: %s VM device%s, %s listening socket%s, "
	       "%s descriptor%s in all; %s connection%s kept, %s connection%s ended\n",
	       pid ? pid : "?", vms ? vms : "?", vms && !strcmp(vms, "1") ? "" : "s",
	       ls ? ls : "?", ls && !strcmp(ls, "1") ? "" : "s",
	       fds ? fds : "?", fds && !strcmp(fds, "1") ? "" : "s",
	       ck ? ck : "0", ck && !strcmp(ck, "1") ? "" : "s",
	       ce ? ce : "?", ce && !strcmp(ce, "1") ? "" : "s");
}

int upgrade_main(int argc, char **argv)
{
	char path[PATH_MAX];
	struct vsx_ctl_req req;

	if (argc != 1 && !(argc == 3 && !strcmp(argv[1], "--exec")))
		die_usage("upgrade");
	vsx__ctl_req_init(&req, VSX_CTL_UPGRADE);
	if (argc == 3) {
		/* vsxd runs it from its own directory: an absolute path */
		if (!realpath(argv[2], path))
			return err_msg("upgrade", "%s: no such program", argv[2]);
		vsx__ctl_req_add(&req, VSX_CTL_K_EXEC, path);
	}
	return ctl_run_timeout("upgrade", &req, print_upgrade, UPGRADE_TIMEOUT_MS);
}
