/* vsxctl list / show: connections of vsxd's VMs with their credit state. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

static const struct out_col conn_cols[] = {
	{ VSX_CTL_K_CONN, "ID", true },
	{ VSX_CTL_K_VM, "VM", false },
	{ VSX_CTL_K_TYPE, "TYPE", false },
	{ VSX_CTL_K_STATE, "STATE", false },
	{ VSX_CTL_K_VM_STATE, "VM_STATE", false },
	{ VSX_CTL_K_GUEST, "GUEST", false },
	{ VSX_CTL_K_PEER, "PEER", false },
	{ VSX_CTL_K_PEER_KIND, "KIND", false },
	{ VSX_CTL_K_TO_GUEST, "TO_GUEST", true },
	{ VSX_CTL_K_FROM_GUEST, "FROM_GUEST", true },
	{ VSX_CTL_K_BUF_ALLOC, "BUF_ALLOC", true },
	{ VSX_CTL_K_FWD_CNT, "FWD_CNT", true },
	{ VSX_CTL_K_PEER_BUF_ALLOC, "PEER_BUF", true },
	{ VSX_CTL_K_PEER_FWD_CNT, "PEER_FWD", true },
	{ VSX_CTL_K_TX_FREE, "TX_FREE", true },
	{ VSX_CTL_K_RX_FREE, "RX_FREE", true },
	{ VSX_CTL_K_FORWARD, "FORWARD", false },  /* vsxd forwards: the forward's name */
	{ VSX_CTL_K_AUTH, "AUTH", false },        /* yes: peer authenticated (psk) */
};

static void print_list(const struct vsx_kvs *kvs)
{
	out_records(kvs, VSX_CTL_K_CONN, conn_cols, sizeof(conn_cols) / sizeof(conn_cols[0]));
}

static void print_show(const struct vsx_kvs *kvs)
{
	out_record_detail(kvs, VSX_CTL_K_CONN);
}

int list_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "vm", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	const char *vm = NULL;
	struct vsx_ctl_req req;
	int ch;

	while ((ch = getopt_long(argc, argv, "v:", longopts, NULL)) != -1) {
		if (ch != 'v')
			die_usage("list");
		vm = optarg;
	}
	if (optind != argc)
		die_usage("list");
	vsx__ctl_req_init(&req, VSX_CTL_LIST);
	if (vm)
		vsx__ctl_req_add(&req, VSX_CTL_K_VM, vm);
	return ctl_run("list", &req, print_list);
}

int show_main(int argc, char **argv)
{
	struct vsx_ctl_req req;
	uint64_t id;

	if (argc != 2)
		die_usage("show");
	if (parse_u64(argv[1], &id) < 0)
		return err_msg("show", "'%s' is not a connection id", argv[1]);
	vsx__ctl_req_init(&req, VSX_CTL_SHOW);
	vsx__ctl_req_addf(&req, VSX_CTL_K_ID, "%llu", (unsigned long long)id);
	return ctl_run("show", &req, print_show);
}
