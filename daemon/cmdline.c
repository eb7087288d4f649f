/*
 * vsxd's command line: the option table, vsxd_opts_parse and the --help
 * text (config.h, "The command line").
 *
 * --vm lists and the single-VM flags of vhost-device-vsock (--guest-cid,
 * --socket, --uds-path, ...) go through the same key table as vsxd.conf's
 * [vm] sections (vsxd_vm_set, settings.c); --forward through
 * vsxd_fwd_parse (fwdspec.c); limits through vsxd_limit_set.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config-int.h"
#include "forward.h"

const char vsxd_usage[] =
"Usage: vsxd [OPTIONS]\n"
"\n"
"Host vhost-user-vsock devices for QEMU guests (a drop-in for vhost-device-vsock).\n"
"\n"
"  --vm guest-cid=CID,socket=PATH,uds-path=PATH[,tx-buffer-size=SIZE]\n"
"       [,queue-size=N][,groups=G1+G2][,name=NAME][,socket-group=GROUP]\n"
"       [,socket-mode=MODE]\n"
"       (forward-cid=CID[,forward-listen=PORT+PORT] in place of uds-path:\n"
"       guest connections to the host go to vsock CID, host vsock clients\n"
"       of the listen ports reach the guest)\n"
"                        serve one VM; repeat for several VMs\n"
"  --guest-cid CID --socket PATH --uds-path PATH [--tx-buffer-size SIZE]\n"
"       [--queue-size N] [--groups G1+G2] [--name NAME]\n"
"       (--forward-cid CID [--forward-listen PORT+PORT] in place of --uds-path)\n"
"                        one more VM, with vhost-device-vsock's single-VM flags\n"
"  --forward listen=ADDR,connect=ADDR[,allow=CID+CID][,auth=psk:PATH][,name=NAME]\n"
"                        relay connections from ADDR to ADDR (tcp:HOST:PORT,\n"
"                        unix:PATH, unix:PATH:PORT, vsock:CID:PORT, vm:NAME:PORT,\n"
"                        ...); repeatable; see vsxd(8) FORWARDS\n"
"  --config FILE         read settings and VMs from FILE: vsxd.conf(5), or\n"
"                        vhost-device-vsock's YAML file (chosen by content)\n"
"  -t, --check           check the command line and the --config file, print\n"
"                        what would be served and exit (0: valid, 1: not)\n"
"  --control PATH        control socket path (for vsxctl; default /run/vsxd/control)\n"
"  --metrics tcp:HOST:PORT\n"
"                        serve Prometheus metrics at http://HOST:PORT/metrics\n"
"                        (HOST an address or [IPv6]); see vsxd(8) METRICS\n"
"  --socket-group GROUP  group of every VM's vhost-user and uds-path sockets\n"
"                        (a name or gid; default: vsxd's own); with it the\n"
"                        sockets are 0660 unless --socket-mode says otherwise\n"
"  --socket-mode MODE    their permission bits, octal (default 0600); a VM's\n"
"                        socket-group=, socket-mode= keys win. Missing parent\n"
"                        directories of every socket are created (0755; 0750\n"
"                        and GROUP's with a socket group)\n"
"  --control-allow-uid UID[,UID...]\n"
"                        more users (besides root and vsxd's own) allowed on\n"
"                        the control socket; repeatable\n"
"  --control-group GROUP members may use the control socket too (a name or\n"
"                        gid); it is then 0660 unless --control-mode says\n"
"                        otherwise\n"
"  --control-mode MODE   the control socket's permission bits, octal (default\n"
"                        0600; 0666 with --control-allow-uid: its peer check\n"
"                        admits only those users)\n"
"  --max-conns N         connections in all VMs together (default: no limit)\n"
"  --max-conns-per-vm N  connections per VM (default 4096)\n"
"  --max-conn-memory SIZE\n"
"                        memory one connection may hold for a slow peer\n"
"                        (default: bounded by its credit window only)\n"
"  --handshake-timeout T, --connect-timeout T, --linger-timeout T\n"
"                        hybrid CONNECT line (5s), answer to a REQUEST (5s),\n"
"                        RST after a close (8s); T: seconds, or 500ms, 1m\n"
"  --poll-us N           busy-poll the event loop up to N microseconds (0 to\n"
"                        10000) after guest or host traffic before sleeping:\n"
"                        lower latency for more CPU (default 0: off)\n"
"  --threads N           worker threads serving the VMs (1 to 256; default:\n"
"                        one per VM, up to the number of CPUs)\n"
"  --user USER           once its sockets exist, drop from root to USER (a name\n"
"                        or uid): its groups, no capability left\n"
"  --seccomp MODE        the syscall allowlist vsxd puts itself under once it\n"
"                        serves: kill (default: a refused call is logged and\n"
"                        kills vsxd), log (let through, the kernel logs it) or\n"
"                        off; see vsxd(8) SECURITY\n"
"  --syslog              log to syslog instead of stderr\n"
"  -v, --verbose         log debug messages too\n"
"  -h, --help            print this help and exit\n"
"  -V, --version         print the version and exit\n"
"\n"
"SIZE is a number of bytes with an optional K, M or G suffix (powers of 1024).\n"
"Signals: SIGTERM/SIGINT exit cleanly, SIGHUP reloads the configuration file.\n"
"See vsxd(8) and vsxd.conf(5).\n";

/* ---- The command line ---- */

enum opt_id {
	OPT_VM, OPT_FORWARD, OPT_CONFIG, OPT_CONTROL, OPT_CONTROL_ALLOW, OPT_METRICS, OPT_SYSLOG,
	OPT_VERBOSE, OPT_CHECK, OPT_HELP, OPT_VERSION, OPT_SOCK_MODE, OPT_SOCK_GROUP,
	OPT_CTL_MODE, OPT_CTL_GROUP, OPT_USER, OPT_SECCOMP,
	OPT_VMKEY,      /* a single-VM flag: --guest-cid, --socket, ... */
	OPT_LIMIT,      /* --max-conns, --linger-timeout, ... */
};

static const struct opt {
	const char *name;
	char short_name;
	bool arg;
	enum opt_id id;
} options[] = {
	{ "vm", 0, true, OPT_VM },
	{ "forward", 0, true, OPT_FORWARD },
	{ "config", 0, true, OPT_CONFIG },
	{ "control", 0, true, OPT_CONTROL },
	{ "control-allow-uid", 0, true, OPT_CONTROL_ALLOW },
	{ "control-mode", 0, true, OPT_CTL_MODE },
	{ "control-group", 0, true, OPT_CTL_GROUP },
	{ "metrics", 0, true, OPT_METRICS },
	{ "socket-mode", 0, true, OPT_SOCK_MODE },
	{ "socket-group", 0, true, OPT_SOCK_GROUP },
	{ "user", 0, true, OPT_USER },
	{ "seccomp", 0, true, OPT_SECCOMP },
	{ "syslog", 0, false, OPT_SYSLOG },
	{ "verbose", 'v', false, OPT_VERBOSE },
	{ "check", 't', false, OPT_CHECK },
	{ "help", 'h', false, OPT_HELP },
	{ "version", 'V', false, OPT_VERSION },
	{ "guest-cid", 0, true, OPT_VMKEY },
	{ "socket", 0, true, OPT_VMKEY },
	{ "uds-path", 0, true, OPT_VMKEY },
	{ "tx-buffer-size", 0, true, OPT_VMKEY },
	{ "queue-size", 0, true, OPT_VMKEY },
	{ "groups", 0, true, OPT_VMKEY },
	{ "name", 0, true, OPT_VMKEY },
	{ "forward-cid", 0, true, OPT_VMKEY },
	{ "forward-listen", 0, true, OPT_VMKEY },
	{ "max-conns", 0, true, OPT_LIMIT },
	{ "max-conns-per-vm", 0, true, OPT_LIMIT },
	{ "max-conn-memory", 0, true, OPT_LIMIT },
	{ "handshake-timeout", 0, true, OPT_LIMIT },
	{ "connect-timeout", 0, true, OPT_LIMIT },
	{ "linger-timeout", 0, true, OPT_LIMIT },
	{ "poll-us", 0, true, OPT_LIMIT },
	{ "threads", 0, true, OPT_LIMIT },
};

/* --socket-mode/--socket-group (the VMs' sockets) and --control-mode/
 * --control-group (the control socket's); errors name @op. */
static int perm_option(struct vsxd_opts *o, const struct opt *op, const char *val,
		       struct vsxd_err *err)
{
	bool ctl = op->id == OPT_CTL_MODE || op->id == OPT_CTL_GROUP;
	bool mode = op->id == OPT_SOCK_MODE || op->id == OPT_CTL_MODE;
	struct vsxd_sock_perm *p = ctl ? &o->cfg.control_perm : &o->cfg.perm;
	int r;

	if (mode ? p->mode_set : p->group != NULL)
		return vsxd_err_set(err, "--%s given twice", op->name);
	r = mode ? vsxd_perm_set_mode(p, op->name, val, strlen(val), err)
		 : vsxd_perm_set_group(p, op->name, val, strlen(val), err);
	if (r == -EINVAL)
		vsxd__err_prefix(err, "--%s", op->name);
	return r;
}

#define NOPTS (sizeof(options) / sizeof(options[0]))
#define SINGLE_VM_ORIGIN "--guest-cid/--socket/--uds-path"

void vsxd_opts_free(struct vsxd_opts *o)
{
	vsxd_config_free(&o->cfg);
	free(o->config_file);
	memset(o, 0, sizeof(*o));
	vsxd_config_init(&o->cfg);
}

static int opt_value(const struct opt *op, const char *val, struct vsxd_opts *o,
		     struct vsxd_vm *single, unsigned *n_vm, struct vsxd_err *err)
{
	struct vsxd_vm *vm;
	char q[VSXD_QBUF];
	int r;

	switch (op->id) {
	case OPT_VM:
		(*n_vm)++;
		vm = vsxd__config_add_vm(&o->cfg);
		if (!vm)
			return -ENOMEM;
		r = vsxd_vm_parse(val, vm, err);
		if (r == -EINVAL)
			vsxd__err_prefix(err, "--vm #%u", *n_vm);
		if (r < 0)
			return r;
		if (asprintf(&vm->origin, "--vm #%u", *n_vm) < 0) {
			vm->origin = NULL;
			return -ENOMEM;
		}
		return 0;
	case OPT_FORWARD: {
		struct vsxd_forward *f = vsxd__config_add_fwd(&o->cfg);

		if (!f)
			return -ENOMEM;
		r = vsxd_fwd_parse(val, f, err);
		if (r == -EINVAL)
			vsxd__err_prefix(err, "--forward #%zu", o->cfg.n_fwds);
		if (r < 0)
			return r;
		if (asprintf(&f->origin, "--forward #%zu", o->cfg.n_fwds) < 0) {
			f->origin = NULL;
			return -ENOMEM;
		}
		return 0;
	}
	case OPT_CONFIG:
		if (o->config_file)
			return vsxd_err_set(err, "--config given twice");
		if (!*val)
			return vsxd_err_set(err, "empty value for --config");
		return vsxd__set_str(&o->config_file, val, strlen(val));
	case OPT_CONTROL:
		if (o->cfg.control_path)
			return vsxd_err_set(err, "--control given twice");
		if (!*val)
			return vsxd_err_set(err, "empty value for --control");
		if (strlen(val) > SUN_PATH_MAX)
			return vsxd_err_set(err, "--control: the path is too long "
				       "(%zu bytes, at most %zu)", strlen(val),
				       (size_t)SUN_PATH_MAX);
		return vsxd__set_str(&o->cfg.control_path, val, strlen(val));
	case OPT_CONTROL_ALLOW:
		/* messages name the key already */
		return vsxd_parse_uid_list(val, strlen(val), &o->cfg, err);
	case OPT_METRICS:
		if (o->cfg.metrics)
			return vsxd_err_set(err, "--metrics given twice");
		r = vsxd_metrics_check(val, strlen(val), "--metrics", NULL, err);
		if (r < 0)
			return r;
		return vsxd__set_str(&o->cfg.metrics, val, strlen(val));
	case OPT_SOCK_MODE:
	case OPT_CTL_MODE:
	case OPT_SOCK_GROUP:
	case OPT_CTL_GROUP:
		return perm_option(o, op, val, err);
	case OPT_USER:
		if (o->cfg.user)
			return vsxd_err_set(err, "--user given twice");
		return vsxd_set_user(&o->cfg, "--user", val, strlen(val), err);
	case OPT_SECCOMP:
		if (o->cfg.seccomp != VSXD_UNSET)
			return vsxd_err_set(err, "--seccomp given twice");
		r = vsxd_parse_seccomp(val, strlen(val));
		if (r < 0)
			return vsxd_err_set(err, "--seccomp '%s' is not one of kill, log, off",
					    vsxd_quote(q, val, strlen(val)));
		o->cfg.seccomp = r;
		return 0;
	case OPT_SYSLOG:
		o->cfg.log_target = VSXD_LOG_SYSLOG;
		return 0;
	case OPT_VERBOSE:
		o->verbose++;
		o->cfg.log_level = 7;
		return 0;
	case OPT_CHECK:
		o->check = true;
		return 0;
	case OPT_HELP:
		o->help = true;
		return 0;
	case OPT_VERSION:
		o->version = true;
		return 0;
	case OPT_VMKEY:
		r = vsxd_vm_set(single, op->name, strlen(op->name), val, strlen(val),
				err);
		if (r == -EINVAL)
			vsxd__err_prefix(err, "--%s", vsxd_quote(q, op->name, strlen(op->name)));
		return r;
	case OPT_LIMIT:
		r = vsxd_limit_key(op->name, strlen(op->name));
		if (o->cfg.limit_set[r])
			return vsxd_err_set(err, "--%s given twice", op->name);
		r = vsxd_limit_set(&o->cfg, r, val, strlen(val), err);
		if (r == -EINVAL)
			vsxd__err_prefix(err, "--%s", op->name);
		return r;
	}
	return 0;
}

int vsxd_opts_parse(int argc, char *const argv[], struct vsxd_opts *o,
		    struct vsxd_err *err)
{
	struct vsxd_vm single = { 0 }, *vm;
	const struct opt *op;
	const char *a, *val, *eq;
	unsigned n_vm = 0;
	char q[VSXD_QBUF];
	size_t nl, k;
	int i, r = 0;

	memset(o, 0, sizeof(*o));
	vsxd_config_init(&o->cfg);

	for (i = 1; i < argc && r == 0; i++) {
		a = argv[i];
		if (a[0] != '-' || a[1] == '\0') {
			r = vsxd_err_set(err, "unexpected argument '%s'",
				    vsxd_quote(q, a, strlen(a)));
			break;
		}
		if (a[1] != '-') {
			/* short flags, possibly bundled: -vv */
			for (k = 1; a[k] && r == 0; k++) {
				for (op = options; op < options + NOPTS; op++)
					if (op->short_name && op->short_name == a[k])
						break;
				if (op == options + NOPTS) {
					r = vsxd_err_set(err, "unknown option '-%s'",
						    vsxd_quote(q, a + k, 1));
					break;
				}
				r = opt_value(op, NULL, o, &single, &n_vm, err);
			}
			continue;
		}
		if (a[2] == '\0') {
			if (i + 1 < argc)
				r = vsxd_err_set(err, "unexpected argument '%s'",
					    vsxd_quote(q, argv[i + 1], strlen(argv[i + 1])));
			break;
		}
		eq = strchr(a + 2, '=');
		nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		for (op = options; op < options + NOPTS; op++)
			if (strlen(op->name) == nl && !memcmp(op->name, a + 2, nl))
				break;
		if (op == options + NOPTS) {
			r = vsxd_err_set(err, "unknown option '--%s'", vsxd_quote(q, a + 2, nl));
			break;
		}
		if (!op->arg) {
			if (eq)
				r = vsxd_err_set(err, "option '--%s' takes no value", op->name);
			else
				r = opt_value(op, NULL, o, &single, &n_vm, err);
			continue;
		}
		if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			r = vsxd_err_set(err, "option '--%s' needs a value", op->name);
			break;
		}
		r = opt_value(op, val, o, &single, &n_vm, err);
	}

	/* a refused command line is still checked: exit 1, not 2 */
	for (; r < 0 && i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--check") || !strcmp(argv[i], "-t"))
			o->check = true;

	if (r == 0 && single.set) {
		r = vsxd_vm_finish(&single, err);
		if (r == -EINVAL)
			vsxd__err_prefix(err, SINGLE_VM_ORIGIN);
		if (r == 0) {
			vm = vsxd__config_add_vm(&o->cfg);
			if (!vm) {
				r = -ENOMEM;
			} else {
				*vm = single;
				memset(&single, 0, sizeof(single));
				vm->origin = strdup(SINGLE_VM_ORIGIN);
				if (!vm->origin)
					r = -ENOMEM;
			}
		}
	}
	vsxd_vm_free(&single);
	if (r == -ENOMEM)
		vsxd_err_set(err, "out of memory");
	return r;
}
