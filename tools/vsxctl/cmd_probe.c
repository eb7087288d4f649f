/* vsxctl probe: which vsock transports this machine has (vsx_probe). */
#include <stdio.h>

#include <vsx/vsx.h>

#include "vsxctl.h"

static const struct {
	unsigned bit;
	const char *name;
} haves[] = {
	{ VSX_HAVE_VIRTIO_GUEST, "virtio-guest" },
	{ VSX_HAVE_VHOST_HOST, "vhost-host" },
	{ VSX_HAVE_LOOPBACK, "loopback" },
	{ VSX_HAVE_VMBUS, "vmbus" },
	{ VSX_HAVE_AF_VSOCK, "af-vsock" },
};

int probe_main(int argc, char **argv)
{
	struct vsx_probe p;
	unsigned i, n = 0;
	int rc;

	if (argc != 1)
		die_usage(argv[0]);
	rc = vsx_probe(&p);
	if (rc < 0)
		return err_msg("probe", "%s", vsx_strerror(rc));
	if (opt_json) {
		printf("{\"transports\": [");
		for (i = 0; i < sizeof(haves) / sizeof(haves[0]); i++)
			if (p.have & haves[i].bit)
				printf("%s\"%s\"", n++ ? ", " : "", haves[i].name);
		printf("], \"default\": \"%s\", \"local_cid\": ", p.transport);
		if (p.local_cid == VSX_CID_ANY)
			printf("null}\n");
		else
			printf("%u}\n", p.local_cid);
		return 0;
	}
	printf("transports:");
	for (i = 0; i < sizeof(haves) / sizeof(haves[0]); i++)
		if (p.have & haves[i].bit)
			printf(" %s", haves[i].name), n++;
	printf("%s\ndefault:    %s\nlocal cid:  ", n ? "" : " none",
	       p.transport[0] ? p.transport : "none");
	if (p.local_cid == VSX_CID_ANY)
		printf("unknown\n");
	else
		printf("%u\n", p.local_cid);
	return 0;
}
