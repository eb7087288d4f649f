/* vsxctl close ID [--reset]: close a connection gracefully, or reset it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

int close_main(int argc, char **argv)
{
	const char *args[3] = { "cmd=" VSX_CTL_CLOSE };
	struct vsx_kvs kvs;
	char idarg[40];
	char *buf = NULL;
	unsigned nargs = 2;
	uint64_t id;
	int rc;

	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--reset") != 0))
		die_usage("close");
	if (parse_u64(argv[1], &id) < 0)
		return err_msg("close", "'%s' is not a connection id", argv[1]);
	snprintf(idarg, sizeof(idarg), "id=%llu", (unsigned long long)id);
	args[1] = idarg;
	if (argc == 3)
		args[nargs++] = "reset=1";
	rc = ctl_request("close", args, nargs, &buf, &kvs);
	vsx__ctl_kvs_free(&kvs);
	free(buf);
	return rc;
}
