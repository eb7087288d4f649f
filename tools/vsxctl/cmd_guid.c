/*
 * vsxctl guid PORT|GUID: the Hyper-V service GUID a Windows host registers
 * for a vsock port, or the port of such a GUID.
 *
 *   vsxctl guid 2056                                    -> 00000808-facb-11e6-bd58-64006a7986d3
 *   vsxctl guid {00000808-FACB-11E6-BD58-64006A7986D3}  -> 2056
 *
 * Ports are decimal (0 to 4294967295); the GUID's first field is the port in
 * hex. A GUID may be braced and in any case; one outside the template
 * XXXXXXXX-facb-11e6-bd58-64006a7986d3 has no port (exit 1).
 *
 * With -j, either way: {"port": 2056, "guid": "00000808-facb-..."}.
 *
 * Exit status: 0, 1 for an argument that is neither, 2 for usage.
 * The command needs no vsxd: it is pure libvsx (vsx_guid_*).
 */
#include <stdio.h>
#include <string.h>

#include <vsx/vsx.h>

#include "vsxctl.h"

static int usage(FILE *f)
{
	fprintf(f, "usage: vsxctl guid PORT|GUID\n"
		"  PORT  a decimal vsock port: prints its Hyper-V service GUID\n"
		"  GUID  a service GUID (braces and case optional): prints its port\n");
	return f == stdout ? 0 : 2;
}

int guid_main(int argc, char **argv)
{
	char text[VSX_GUID_STRLEN];
	uint8_t guid[16];
	uint64_t dec;
	uint32_t port;
	bool to_guid;
	int rc;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return usage(stdout);
	if (argc != 2)
		return usage(stderr);
	to_guid = vsx__parse_dec(argv[1], strlen(argv[1]), UINT32_MAX, &dec) == 0;
	if (to_guid) {
		port = (uint32_t)dec;
		vsx_guid_from_port(port, guid);
	} else if (vsx_guid_parse(argv[1], guid) < 0) {
		fprintf(stderr, "vsxctl guid: '%.64s' is neither a decimal port "
			"(0 to 4294967295) nor a GUID\n", argv[1]);
		return 1;
	} else if ((rc = vsx_guid_to_port(guid, &port)) < 0) {
		fprintf(stderr, "vsxctl guid: %s\n", vsx_strerror(rc));
		return 1;
	}
	vsx_guid_format(guid, 0, text, sizeof(text));
	if (opt_json)
		printf("{\"port\": %u, \"guid\": \"%s\"}\n", port, text);
	else if (to_guid)
		printf("%s\n", text);
	else
		printf("%u\n", port);
	return 0;
}
