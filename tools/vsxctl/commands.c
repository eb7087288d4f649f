/* The subcommand table: drives both dispatch and --help. */
#include <stddef.h>

#include "vsxctl.h"

const struct vsxctl_command vsxctl_commands[] = {
	{ "status", status_main, "", "daemon version, uptime, VMs, connections" },
	{ "vms", vms_main, "", "VMs: CID, thread, state, connections" },
	{ "list", list_main, "[--vm NAME]", "connections with their credit state" },
	{ "show", show_main, "ID", "everything known about one connection" },
	{ "set-buffer", set_buffer_main,
	  "ID|--vm NAME|--pid PID --fd FD --rx BYTES", "change a buffer (credit) live" },
	{ "close", close_main, "ID [--reset]", "close (or reset) a connection" },
	{ "upgrade", upgrade_main, "[--exec PATH]",
	  "hand every VM to a new vsxd process (live handoff)" },
	{ "libvirt-xml", libvirt_xml_main, "VM",
	  "the libvirt domain XML that gives VM its vsock device" },
	{ "probe", probe_main, "", "vsock transports on this machine" },
	{ "guid", guid_main, "PORT|GUID", "Hyper-V service GUID of a port, and back" },
	{ "ss", ss_main, "[-p] [-l|-a|--state S] [--port P]", "the kernel's vsock sockets (vsock_diag)" },
	{ NULL, NULL, NULL, NULL },
};
