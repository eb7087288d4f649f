/* vsxctl: entry point, global options and the subcommand dispatch. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vsx/vsx.h>

#include "vsxctl.h"

bool opt_json;
const char *opt_control;

static void usage(FILE *f)
{
	const struct vsxctl_command *c;

	fprintf(f, "usage: vsxctl [-j] [-c CONTROL] COMMAND [ARGS]\n\n"
		   "  -j, --json           print JSON\n"
		   "  -c, --control PATH   vsxd control socket (default $VSXD_CONTROL or %s)\n"
		   "  -h, --help           this text\n"
		   "  -V, --version        print the version\n\ncommands:\n",
		VSX_CONTROL_PATH);
	for (c = vsxctl_commands; c->name; c++)
		fprintf(f, "  %-11s %-38s %s\n", c->name, c->usage, c->help);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "control", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const struct vsxctl_command *c;
	int ch;

	opt_control = getenv("VSXD_CONTROL");
	if (!opt_control || !*opt_control)
		opt_control = VSX_CONTROL_PATH;
	/* '+': stop at the subcommand; its own options are its business. */
	while ((ch = getopt_long(argc, argv, "+jc:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			opt_json = true;
			break;
		case 'c':
			opt_control = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("vsxctl %s\n", vsx_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (c = vsxctl_commands; c->name; c++) {
		if (strcmp(c->name, argv[optind]) == 0) {
			char **sub = argv + optind;
			int n = argc - optind;

			optind = 0; /* reinitialise getopt for the subcommand */
			return c->main(n, sub);
		}
	}
	fprintf(stderr, "vsxctl: unknown command '%s'; see vsxctl --help\n", argv[optind]);
	return 2;
}
