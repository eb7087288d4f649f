/* vsxctl close ID [--reset]: close a connection gracefully, or reset it.
 * Silent on success; -j prints vsxd's answer (conn, vm or forward, action). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

int close_main(int argc, char **argv)
{
	struct vsx_ctl_req req;
	uint64_t id;

	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--reset") != 0))
		die_usage("close");
	if (parse_u64(argv[1], &id) < 0)
		return err_msg("close", "'%s' is not a connection id", argv[1]);
	vsx__ctl_req_init(&req, VSX_CTL_CLOSE);
	vsx__ctl_req_addf(&req, VSX_CTL_K_ID, "%llu", (unsigned long long)id);
	if (argc == 3)
		vsx__ctl_req_add(&req, VSX_CTL_K_RESET, "1");
	return ctl_run("close", &req, opt_json ? out_pairs : NULL);
}
