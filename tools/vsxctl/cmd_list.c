/* vsxctl list / show: connections of vsxd's VMs with their credit state. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

static const struct out_col conn_cols[] = {
	{ "conn", "ID", true },
	{ "vm", "VM", false },
	{ "type", "TYPE", false },
	{ "state", "STATE", false },
	{ "guest", "GUEST", false },
	{ "peer", "PEER", false },
	{ "to-guest", "TO_GUEST", true },
	{ "from-guest", "FROM_GUEST", true },
	{ "buf-alloc", "BUF_ALLOC", true },
	{ "fwd-cnt", "FWD_CNT", true },
	{ "peer-buf-alloc", "PEER_BUF", true },
	{ "peer-fwd-cnt", "PEER_FWD", true },
	{ "tx-free", "TX_FREE", true },
	{ "rx-free", "RX_FREE", true },
	{ "forward", "FORWARD", false },  /* vsxd forwards: the forward's name */
	{ "auth", "AUTH", false },        /* yes: peer authenticated (psk) */
};

int list_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "vm", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	const char *args[2] = { "cmd=" VSX_CTL_LIST };
	char vmarg[VSX_CTL_VALUE_MAX + 8];
	struct vsx_kvs kvs;
	unsigned nargs = 1;
	char *buf = NULL;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "v:", longopts, NULL)) != -1) {
		if (ch != 'v')
			die_usage("list");
		snprintf(vmarg, sizeof(vmarg), "vm=%s", optarg);
		args[nargs++] = vmarg;
	}
	if (optind != argc)
		die_usage("list");
	rc = ctl_request("list", args, nargs, &buf, &kvs);
	if (rc)
		return rc;
	out_records(&kvs, "conn", conn_cols, sizeof(conn_cols) / sizeof(conn_cols[0]));
	vsx__ctl_kvs_free(&kvs);
	free(buf);
	return 0;
}

int show_main(int argc, char **argv)
{
	const char *args[2] = { "cmd=" VSX_CTL_SHOW };
	char idarg[40];
	struct vsx_kvs kvs;
	char *buf = NULL;
	uint64_t id;
	int rc;

	if (argc != 2)
		die_usage("show");
	if (parse_u64(argv[1], &id) < 0)
		return err_msg("show", "'%s' is not a connection id", argv[1]);
	snprintf(idarg, sizeof(idarg), "id=%llu", (unsigned long long)id);
	args[1] = idarg;
	rc = ctl_request("show", args, 2, &buf, &kvs);
	if (rc)
		return rc;
	out_record_detail(&kvs, "conn");
	vsx__ctl_kvs_free(&kvs);
	free(buf);
	return 0;
}
