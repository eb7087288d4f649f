/*
 * vsxd's settings: --vm lists, the single-VM flags, the command line,
 * vsxd.conf(5), merging and whole-config checks (daemon/settings.c,
 * conffile.c, cmdline.c).
 * Every error case checks the return value and the key part of the
 * message the user would read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../daemon/config.h"
#include "../../daemon/forward.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* @r must be -EINVAL and the message must hold @part. */
#define expect_err(r, err, part)                                                  \
	do {                                                                      \
		cr_assert_eq((r), -EINVAL, "expected -EINVAL, got %d (%s)", (r),   \
			     (err).msg);                                          \
		cr_assert(strstr((err).msg, (part)),                              \
			  "message \"%s\" lacks \"%s\"", (err).msg, (part));      \
	} while (0)

static int parse_argv(int argc, char *const argv[], struct vsxd_opts *o,
		      struct vsxd_err *err)
{
	memset(err, 0, sizeof(*err));
	return vsxd_opts_parse(argc, argv, o, err);
}

/* Parse one --vm spec; returns the result, @err filled. */
static int vm_spec(const char *spec, struct vsxd_vm *vm, struct vsxd_err *err)
{
	memset(err, 0, sizeof(*err));
	return vsxd_vm_parse(spec, vm, err);
}

static void expect_vm_err(const char *spec, const char *part)
{
	struct vsxd_vm vm;
	struct vsxd_err err;
	int r = vm_spec(spec, &vm, &err);

	cr_assert_eq(r, -EINVAL, "spec \"%s\": expected -EINVAL, got %d", spec, r);
	cr_assert(strstr(err.msg, part), "spec \"%s\": message \"%s\" lacks \"%s\"",
		  spec, err.msg, part);
	vsxd_vm_free(&vm);
}

/* ---- values ---- */

Test(values, log_levels)
{
	cr_assert_eq(vsxd_parse_log_level("debug", 5), 7);
	cr_assert_eq(vsxd_parse_log_level("warning", 7), 4);
	cr_assert_eq(vsxd_parse_log_level("loud", 4), -EINVAL);
	cr_assert_str_eq(vsxd_log_level_name(6), "info");
}

/* ---- --vm lists ---- */

Test(vm, full_spec_both_spellings)
{
	struct vsxd_vm vm;
	struct vsxd_err err;

	cr_assert_eq(vm_spec("guest-cid=4,socket=/run/vm4.vhost,uds-path=/run/vm4.vsock,"
			     "tx-buffer-size=128K,queue-size=256,groups=a+b,name=web",
			     &vm, &err), 0, "%s", err.msg);
	cr_assert_eq(vm.guest_cid, 4);
	cr_assert_str_eq(vm.socket_path, "/run/vm4.vhost");
	cr_assert_str_eq(vm.uds_path, "/run/vm4.vsock");
	cr_assert_eq(vm.tx_buffer_size, 128 * 1024);
	cr_assert_eq(vm.queue_size, 256);
	cr_assert_str_eq(vm.groups, "a+b");
	cr_assert_str_eq(vm.name, "web");
	vsxd_vm_free(&vm);

	/* vhost-device-vsock's underscore spellings, any order, defaults */
	cr_assert_eq(vm_spec("uds_path=/u,socket=/s,tx_buffer_size=65536", &vm, &err), 0,
		     "%s", err.msg);
	cr_assert_eq(vm.guest_cid, VSXD_CID_DEFAULT);
	cr_assert_eq(vm.tx_buffer_size, 65536);
	cr_assert_eq(vm.queue_size, 0);
	cr_assert_null(vm.groups);
	cr_assert_null(vm.name);
	vsxd_vm_free(&vm);

	/* a value may hold '=' ; the list may be padded */
	cr_assert_eq(vm_spec("  guest_cid=0x10,socket=/a=b,uds-path=/c  ", &vm, &err), 0,
		     "%s", err.msg);
	cr_assert_eq(vm.guest_cid, 16);
	cr_assert_str_eq(vm.socket_path, "/a=b");
	vsxd_vm_free(&vm);
}

Test(vm, cid_range)
{
	struct vsxd_vm vm;
	struct vsxd_err err;

	cr_assert_eq(vm_spec("guest-cid=3,socket=/s,uds-path=/u", &vm, &err), 0);
	vsxd_vm_free(&vm);
	cr_assert_eq(vm_spec("guest-cid=4294967294,socket=/s,uds-path=/u", &vm, &err), 0);
	cr_assert_eq(vm.guest_cid, 0xFFFFFFFEull);
	vsxd_vm_free(&vm);

	expect_vm_err("guest-cid=2,socket=/s,uds-path=/u",
		      "guest-cid 2 is out of range (3 to 4294967294)");
	expect_vm_err("guest-cid=0,socket=/s,uds-path=/u", "guest-cid 0 is out of range");
	expect_vm_err("guest-cid=0xffffffff,socket=/s,uds-path=/u",
		      "guest-cid 0xffffffff is out of range");
	expect_vm_err("guest-cid=99999999999999999999999,socket=/s,uds-path=/u",
		      "is out of range");
	expect_vm_err("guest-cid=x,socket=/s,uds-path=/u", "guest-cid 'x' is not a number");
	expect_vm_err("guest-cid=-3,socket=/s,uds-path=/u", "guest-cid '-3' is not a number");
	expect_vm_err("guest-cid=3 ,socket=/s,uds-path=/u", "guest-cid '3 ' is not a number");
}

Test(vm, bad_lists)
{
	char longpath[200];

	expect_vm_err("socket=/s", "missing 'uds-path'");
	expect_vm_err("uds-path=/u", "missing 'socket'");
	expect_vm_err("guest-cid=3,socket=,uds-path=/u", "empty value for 'socket'");
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/u,color=red",
		      "unknown key 'color' (known keys: guest-cid, socket");
	expect_vm_err("guest-cid=3,socket=/s,socket=/t,uds-path=/u", "'socket' given twice");
	expect_vm_err("guest-cid=3,guest_cid=4,socket=/s,uds-path=/u",
		      "'guest-cid' given twice");
	expect_vm_err("guest-cid=3,,socket=/s,uds-path=/u", "empty item");
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/u,", "empty item");
	expect_vm_err("guest-cid=3,socket,uds-path=/u", "'socket' is not KEY=VALUE");
	expect_vm_err("=3,socket=/s,uds-path=/u", "missing key in '=3'");
	expect_vm_err("", "empty VM description");
	expect_vm_err("   ", "empty VM description");
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/s", "socket and uds-path are the same");
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/u,forward-cid=1",
		      "uds-path and forward-cid exclude each other");
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/u,forward_listen=9000",
		      "forward-listen needs forward-cid");
	expect_vm_err("guest-cid=3,socket=/s", "missing 'uds-path' (or 'forward-cid')");
	expect_vm_err("socket=/s,forward-cid=x", "forward-cid 'x' is not a number");
	expect_vm_err("socket=/s,forward-cid=4294967295", "forward-cid 4294967295 is out of range");
	expect_vm_err("socket=/s,forward-cid=1,forward-listen=9001+",
		      "forward-listen '9001+': '' is not a port number");
	expect_vm_err("socket=/s,forward-cid=1,forward-listen=9001+x",
		      "'x' is not a port number");
	expect_vm_err("socket=/s,forward-cid=1,forward-listen=4294967296",
		      "port 4294967296 is out of range");
	expect_vm_err("socket=/s,forward-cid=1,forward-listen=7+8+7",
		      "port 7 given twice");
	expect_vm_err("socket=/s,forward-cid=1,forward-cid=2", "'forward-cid' given twice");
	expect_vm_err("socket=/s,uds-path=/u,tx-buffer-size=12X",
		      "tx-buffer-size '12X' is not a size");
	expect_vm_err("socket=/s,uds-path=/u,tx-buffer-size=0",
		      "tx-buffer-size 0 is out of range (1 to 1G)");
	expect_vm_err("socket=/s,uds-path=/u,tx-buffer-size=2G", "tx-buffer-size 2G is out of range");
	expect_vm_err("socket=/s,uds-path=/u,queue-size=1000",
		      "queue-size 1000 is not a power of two from 1 to 32768");
	expect_vm_err("socket=/s,uds-path=/u,queue-size=65536", "not a power of two");
	expect_vm_err("socket=/s,uds-path=/u,queue-size=lots", "queue-size 'lots' is not a number");
	expect_vm_err("socket=/s,uds-path=/u,groups=a++b", "groups 'a++b' has an empty group name");
	expect_vm_err("socket=/s,uds-path=/u,groups=+a", "has an empty group name");
	expect_vm_err("socket=/s,uds-path=/u,groups=a b", "group names are printable");
	expect_vm_err("socket=/s,uds-path=/u,name=bad:name", "name 'bad:name' is not valid");
	expect_vm_err("socket=/s,uds-path=/u,name=a/b", "name 'a/b' is not valid");
	expect_vm_err("socket=/s,uds-path=/u,name=01234567890123456789012345678901234567890"
		      "123456789012345678901234", "is not valid (1 to 64 letters");
	{
		struct vsxd_vm vm;
		struct vsxd_err err;

		cr_assert_eq(vm_spec("socket=/s,uds-path=/u,name=0123456789012345678901234"
				     "567890123456789012345678901234567890123", &vm, &err), 0,
			     "%s", err.msg);
		cr_assert_eq(strlen(vm.name), 64);
		vsxd_vm_free(&vm);
	}

	/* sun_path holds 107 bytes and the NUL */
	memset(longpath, 'p', sizeof(longpath));
	longpath[0] = '/';
	{
		char spec[400];
		struct vsxd_vm vm;
		struct vsxd_err err;

		snprintf(spec, sizeof(spec), "socket=%.107s,uds-path=/u", longpath);
		cr_assert_eq(vm_spec(spec, &vm, &err), 0, "%s", err.msg);
		cr_assert_eq(strlen(vm.socket_path), 107);
		vsxd_vm_free(&vm);
		snprintf(spec, sizeof(spec), "socket=%.108s,uds-path=/u", longpath);
		expect_vm_err(spec, "socket is too long (108 bytes, at most 107)");
		/* uds-path leaves room for "_4294967295" */
		snprintf(spec, sizeof(spec), "socket=/s,uds-path=%.96s", longpath);
		cr_assert_eq(vm_spec(spec, &vm, &err), 0, "%s", err.msg);
		cr_assert_eq(strlen(vm.uds_path), 96);
		vsxd_vm_free(&vm);
		snprintf(spec, sizeof(spec), "socket=/s,uds-path=%.97s", longpath);
		expect_vm_err(spec, "uds-path is too long (97 bytes, at most 96, so that "
			      "<uds-path>_<port> fits");
	}
}

Test(vm, junk_is_quoted)
{
	struct vsxd_vm vm;
	struct vsxd_err err;
	const char *p;
	int r;

	r = vm_spec("guest-cid=\x1b[31mred,socket=/s,uds-path=/u", &vm, &err);
	expect_err(r, err, "guest-cid '\\x1b[31mred' is not a number");
	for (p = err.msg; *p; p++)
		cr_assert(*p >= 0x20 && *p < 0x7f, "unprintable byte in \"%s\"", err.msg);
	vsxd_vm_free(&vm);
}

Test(vm, same_device)
{
	struct vsxd_vm a, b;
	struct vsxd_err err;

	cr_assert_eq(vm_spec("guest-cid=3,socket=/s,uds-path=/u,tx-buffer-size=4K", &a, &err), 0);
	cr_assert_eq(vm_spec("guest-cid=3,socket=/s,uds-path=/u,groups=default,"
			     "name=cid3", &b, &err), 0);
	cr_assert(vsxd_vm_same_device(&a, &b), "defaults spelled out are the same device");
	vsxd_vm_free(&b);
	cr_assert_eq(vm_spec("guest-cid=3,socket=/s,uds-path=/v", &b, &err), 0);
	cr_assert_not(vsxd_vm_same_device(&a, &b));
	vsxd_vm_free(&b);
	cr_assert_eq(vm_spec("guest-cid=3,socket=/s,uds-path=/u,queue-size=128", &b, &err), 0);
	cr_assert_not(vsxd_vm_same_device(&a, &b));
	vsxd_vm_free(&b);
	vsxd_vm_free(&a);
}

/* ---- the command line ---- */

Test(cli, two_vms_and_flags)
{
	char *argv[] = {
		"vsxd",
		"--vm", "guest-cid=3,socket=/tmp/vm3.vhost,uds-path=/tmp/vm3.vsock",
		"--vm=guest-cid=4,socket=/tmp/vm4.vhost,uds-path=/tmp/vm4.vsock,groups=g",
		"--control", "/run/vsxd.ctl", "--syslog", "-vv", "--config=/etc/vsxd.conf",
	};
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	cr_assert_eq(o.cfg.n_vms, 2);
	cr_assert_eq(o.cfg.vms[0].guest_cid, 3);
	cr_assert_str_eq(o.cfg.vms[0].origin, "--vm #1");
	cr_assert_eq(o.cfg.vms[1].guest_cid, 4);
	cr_assert_str_eq(o.cfg.vms[1].uds_path, "/tmp/vm4.vsock");
	cr_assert_str_eq(o.cfg.vms[1].groups, "g");
	cr_assert_str_eq(o.cfg.vms[1].origin, "--vm #2");
	cr_assert_str_eq(o.cfg.control_path, "/run/vsxd.ctl");
	cr_assert_eq(o.cfg.log_target, VSXD_LOG_SYSLOG);
	cr_assert_eq(o.cfg.log_level, 7);
	cr_assert_eq(o.verbose, 2);
	cr_assert_str_eq(o.config_file, "/etc/vsxd.conf");
	cr_assert_not(o.help);
	cr_assert_not(o.version);
	cr_assert_eq(vsxd_config_check(&o.cfg, &err), 0, "%s", err.msg);
	vsxd_opts_free(&o);
}

Test(cli, single_vm_flags)
{
	char *argv[] = {
		"vsxd", "--guest-cid", "5", "--socket=/tmp/v.vhost", "--uds-path", "/tmp/v.vsock",
		"--tx-buffer-size", "1M", "--queue-size", "512", "--groups", "x+y",
	};
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	cr_assert_eq(o.cfg.n_vms, 1);
	cr_assert_eq(o.cfg.vms[0].guest_cid, 5);
	cr_assert_str_eq(o.cfg.vms[0].socket_path, "/tmp/v.vhost");
	cr_assert_str_eq(o.cfg.vms[0].uds_path, "/tmp/v.vsock");
	cr_assert_eq(o.cfg.vms[0].tx_buffer_size, 1 << 20);
	cr_assert_eq(o.cfg.vms[0].queue_size, 512);
	cr_assert_str_eq(o.cfg.vms[0].groups, "x+y");
	cr_assert_str_eq(o.cfg.vms[0].origin, "--guest-cid/--socket/--uds-path");
	vsxd_opts_free(&o);
}

Test(cli, help_version_nothing)
{
	char *a1[] = { "vsxd", "--help" };
	char *a2[] = { "vsxd", "-V" };
	char *a3[] = { "vsxd" };
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(parse_argv(ARGC(a1), a1, &o, &err), 0);
	cr_assert(o.help);
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(a2), a2, &o, &err), 0);
	cr_assert(o.version);
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(a3), a3, &o, &err), 0);
	cr_assert_eq(o.cfg.n_vms, 0);
	cr_assert_null(o.config_file);
	cr_assert_eq(o.cfg.log_target, VSXD_UNSET);
	cr_assert_eq(o.cfg.log_level, VSXD_UNSET);
	vsxd_opts_free(&o);
	cr_assert(strstr(vsxd_usage, "--vm guest-cid=CID,socket=PATH,uds-path=PATH"));
}

struct cli_case {
	const char *args[8];
	const char *msg;
};

static const struct cli_case bad_cli[] = {
	{ { "--vm", "guest-cid=3,socket=/a,uds-path=/b", "--vm", "guest-cid=x" },
	  "--vm #2: guest-cid 'x' is not a number" },
	{ { "--vm" }, "option '--vm' needs a value" },
	{ { "--vm=" }, "--vm #1: empty VM description" },
	{ { "--frobnicate" }, "unknown option '--frobnicate'" },
	{ { "--frob=1" }, "unknown option '--frob'" },
	{ { "-x" }, "unknown option '-x'" },
	{ { "-vx" }, "unknown option '-x'" },
	{ { "--help=yes" }, "option '--help' takes no value" },
	{ { "--syslog=1" }, "option '--syslog' takes no value" },
	{ { "extra" }, "unexpected argument 'extra'" },
	{ { "--", "extra" }, "unexpected argument 'extra'" },
	{ { "--config", "a", "--config", "b" }, "--config given twice" },
	{ { "--config=" }, "empty value for --config" },
	{ { "--control=" }, "empty value for --control" },
	{ { "--control", "/x", "--control", "/y" }, "--control given twice" },
	{ { "--socket", "/s" }, "--guest-cid/--socket/--uds-path: missing 'uds-path'" },
	{ { "--guest-cid", "1", "--socket", "/s" }, "--guest-cid: guest-cid 1 is out of range" },
	{ { "--socket", "/s", "--socket", "/t" }, "--socket: 'socket' given twice" },
	{ { "--socket=" }, "--socket: empty value for 'socket'" },
	{ { "--forward-cid", "1" }, "--guest-cid/--socket/--uds-path: missing 'socket'" },
	{ { "--forward-cid", "1", "--socket", "/s", "--uds-path", "/u" },
	  "uds-path and forward-cid exclude each other" },
	{ { "--vm", "socket=/s,uds-path=/u,frob=1" }, "--vm #1: unknown key 'frob'" },
	{ { "--vm", "socket=/s,uds-path=/u,tx-buffer-size=1Q" },
	  "--vm #1: tx-buffer-size '1Q' is not a size" },
};

Test(cli, bad_flags)
{
	size_t i, n;

	for (i = 0; i < sizeof(bad_cli) / sizeof(bad_cli[0]); i++) {
		char *argv[10] = { "vsxd" };
		struct vsxd_opts o;
		struct vsxd_err err;
		int r;

		for (n = 0; bad_cli[i].args[n]; n++)
			argv[n + 1] = (char *)bad_cli[i].args[n];
		r = parse_argv((int)n + 1, argv, &o, &err);
		cr_expect_eq(r, -EINVAL, "case %zu (%s): got %d", i, bad_cli[i].msg, r);
		cr_expect(strstr(err.msg, bad_cli[i].msg), "case %zu: \"%s\" lacks \"%s\"",
			  i, err.msg, bad_cli[i].msg);
		vsxd_opts_free(&o);
	}
}

static void expect_check_err(int argc, char *argv[], const char *part)
{
	struct vsxd_opts o;
	struct vsxd_err err;
	int r;

	cr_assert_eq(parse_argv(argc, argv, &o, &err), 0, "%s", err.msg);
	r = vsxd_config_check(&o.cfg, &err);
	expect_err(r, err, part);
	vsxd_opts_free(&o);
}

Test(cli, uniqueness)
{
	char *dup_cid[] = { "vsxd", "--vm", "guest-cid=3,socket=/a,uds-path=/b",
			    "--vm", "guest-cid=3,socket=/c,uds-path=/d" };
	char *dup_sock[] = { "vsxd", "--vm", "guest-cid=3,socket=/a,uds-path=/b",
			     "--vm", "guest-cid=4,socket=/a,uds-path=/d" };
	char *cross[] = { "vsxd", "--vm", "guest-cid=3,socket=/a,uds-path=/b",
			  "--vm", "guest-cid=4,socket=/b,uds-path=/d" };
	char *dup_name[] = { "vsxd", "--vm", "guest-cid=3,socket=/a,uds-path=/b,name=cid4",
			     "--vm", "guest-cid=4,socket=/c,uds-path=/d" };
	char *ctl[] = { "vsxd", "--control", "/b", "--vm", "guest-cid=3,socket=/a,uds-path=/b" };
	char *single[] = { "vsxd", "--vm", "socket=/a,uds-path=/b",
			   "--socket", "/c", "--uds-path", "/d" };

	expect_check_err(ARGC(dup_cid), dup_cid, "--vm #2: guest-cid 3 is already used by --vm #1");
	expect_check_err(ARGC(dup_sock), dup_sock,
			 "--vm #2: socket '/a' is already the socket of --vm #1");
	expect_check_err(ARGC(cross), cross,
			 "--vm #2: socket '/b' is already the uds-path of --vm #1");
	expect_check_err(ARGC(dup_name), dup_name,
			 "--vm #2: name 'cid4' is already used by --vm #1");
	expect_check_err(ARGC(ctl), ctl, "--vm #1: uds-path '/b' is also the control socket");
	/* both default to CID 3, as with vhost-device-vsock */
	expect_check_err(ARGC(single), single,
			 "--guest-cid/--socket/--uds-path: guest-cid 3 is already used by --vm #1");
}

/* ---- vsxd.conf ---- */

static int conf(const char *text, struct vsxd_config *cfg, struct vsxd_err *err)
{
	vsxd_config_init(cfg);
	memset(err, 0, sizeof(*err));
	return vsxd_config_parse(text, strlen(text), "t.conf", cfg, err);
}

static void expect_conf_err(const char *text, const char *part)
{
	struct vsxd_config cfg;
	struct vsxd_err err;
	int r = conf(text, &cfg, &err);

	cr_assert_eq(r, -EINVAL, "text \"%s\": expected -EINVAL, got %d", text, r);
	cr_assert(strstr(err.msg, part), "message \"%s\" lacks \"%s\"", err.msg, part);
	vsxd_config_free(&cfg);
}

Test(conf, good_file)
{
	static const char text[] =
		"\xef\xbb\xbf# vsxd.conf\n"
		"[daemon]\n"
		"control = /run/vsxd.ctl   # vsxctl talks here\n"
		"log = syslog\r\n"
		"log-level = debug\n"
		"\n"
		"  ; another comment style\n"
		"[ vm\tweb ]\n"
		"guest-cid = 3\n"
		"socket=/run/vm3.vhost\n"
		"\tuds-path =\t/run/vm3#1.vsock\n"
		"tx-buffer-size = 64K\n"
		"\n"
		"[ vm ]   # no name\n"
		"guest_cid = 0x10\n"
		"socket = /run/vm16.vhost\n"
		"uds_path = /run/vm16.vsock\n"
		"groups = a+b\n"
		"queue-size = 256";          /* no final newline */
	struct vsxd_config cfg;
	struct vsxd_err err;

	cr_assert_eq(conf(text, &cfg, &err), 0, "%s", err.msg);
	cr_assert_str_eq(cfg.control_path, "/run/vsxd.ctl");
	cr_assert_eq(cfg.log_target, VSXD_LOG_SYSLOG);
	cr_assert_eq(cfg.log_level, 7);
	cr_assert_eq(cfg.n_vms, 2);
	cr_assert_str_eq(cfg.vms[0].name, "web");
	cr_assert_eq(cfg.vms[0].guest_cid, 3);
	cr_assert_str_eq(cfg.vms[0].socket_path, "/run/vm3.vhost");
	/* '#' only starts a comment after a blank */
	cr_assert_str_eq(cfg.vms[0].uds_path, "/run/vm3#1.vsock");
	cr_assert_eq(cfg.vms[0].tx_buffer_size, 65536);
	cr_assert_str_eq(cfg.vms[0].origin, "t.conf:8");
	cr_assert_null(cfg.vms[1].name);
	cr_assert_eq(cfg.vms[1].guest_cid, 16);
	cr_assert_str_eq(cfg.vms[1].uds_path, "/run/vm16.vsock");
	cr_assert_str_eq(cfg.vms[1].groups, "a+b");
	cr_assert_eq(cfg.vms[1].queue_size, 256);
	cr_assert_str_eq(cfg.vms[1].origin, "t.conf:14");
	cr_assert_eq(vsxd_config_check(&cfg, &err), 0, "%s", err.msg);
	vsxd_config_free(&cfg);
}

Test(conf, empty_and_comments_only)
{
	struct vsxd_config cfg;
	struct vsxd_err err;

	cr_assert_eq(conf("", &cfg, &err), 0);
	cr_assert_eq(cfg.n_vms, 0);
	cr_assert_null(cfg.control_path);
	cr_assert_eq(cfg.log_target, VSXD_UNSET);
	vsxd_config_free(&cfg);
	cr_assert_eq(conf("# nothing\n\n   \n[daemon]\n", &cfg, &err), 0);
	vsxd_config_free(&cfg);
}

Test(conf, errors_name_file_and_line)
{
	expect_conf_err("socket = /s\n", "t.conf:1: 'socket' outside a section");
	expect_conf_err("# c\n\n[vms]\n", "t.conf:3: unknown section '[vms]'");
	expect_conf_err("[vm x\n", "t.conf:1: section header '[vm x' has no closing ']'");
	expect_conf_err("[daemon foo]\n", "t.conf:1: [daemon] takes no name");
	expect_conf_err("[vm a] b\n", "t.conf:1: text after ']' in section header '[vm a] b'");
	expect_conf_err("[]\n", "t.conf:1: unknown section '[]'");
	expect_conf_err("# c\n[vm a b]\n", "t.conf:2: name 'a b' is not valid");
	expect_conf_err("[vm a:b]\n", "t.conf:1: name 'a:b' is not valid");
	expect_conf_err("[daemon]\nlouder = yes\n",
			"t.conf:2: unknown key 'louder' in [daemon] (known keys: control, "
			"control-allow-uid, control-mode, control-group, metrics, log, log-level");
	expect_conf_err("[daemon]\nlog = file\n", "t.conf:2: log 'file' is not 'stderr' or 'syslog'");
	expect_conf_err("[daemon]\nlog-level = loud\n", "t.conf:2: log-level 'loud' is not one of");
	expect_conf_err("[daemon]\ncontrol = /a\n\n[daemon]\ncontrol = /b\n",
			"t.conf:5: 'control' given twice (first on line 2)");
	expect_conf_err("[daemon]\ncontrol =\n", "t.conf:2: empty value for 'control'");
	expect_conf_err("[vm a]\nsocket = /s\n\n[vm b]\n", "t.conf:1: [vm a]: missing 'uds-path'");
	expect_conf_err("[vm a]\nsocket = /s\nuds-path = /u\n[vm b]\nuds-path = /v\n",
			"t.conf:4: [vm b]: missing 'socket'");
	expect_conf_err("[vm]\nguest-cid = 7\n", "t.conf:1: [vm cid7]: missing 'socket'");
	expect_conf_err("[vm a]\nguest-cid = seven\n", "t.conf:2: guest-cid 'seven' is not a number");
	expect_conf_err("[vm a]\nname = b\n", "t.conf:2: 'name' given twice");
	expect_conf_err("[vm a]\ncolour = red\n", "t.conf:2: unknown key 'colour'");
	expect_conf_err("[vm a]\nsocket =\n", "t.conf:2: empty value for 'socket'");
	expect_conf_err("[vm a]\n= 3\n", "t.conf:2: missing key before '='");
	expect_conf_err("[vm a]\njust words\n",
			"t.conf:2: expected 'KEY = VALUE' or a '[section]', not 'just words'");
	/* YAML, by its first line (test_config_yaml.c has the rest) */
	expect_conf_err("vms:\n  - guest_cid: 3\n", "t.conf:2: vms entry 1: missing 'socket'");
}

Test(conf, binary_and_long_input)
{
	struct vsxd_config cfg;
	struct vsxd_err err;
	const size_t big = 1 << 20;
	char *buf;
	const char *p;
	int r;

	/* a NUL byte */
	vsxd_config_init(&cfg);
	r = vsxd_config_parse("[vm a]\nsocket = /s\0x\n", 19, "t.conf", &cfg, &err);
	expect_err(r, err, "t.conf:2: NUL byte in line");
	vsxd_config_free(&cfg);

	/* a huge line of junk: the message is short and printable */
	buf = malloc(big);
	cr_assert_not_null(buf);
	memset(buf, '\x80', big);
	vsxd_config_init(&cfg);
	r = vsxd_config_parse(buf, big, "t.conf", &cfg, &err);
	expect_err(r, err, "t.conf:1: expected 'KEY = VALUE' or a '[section]', not "
		   "'\\x80\\x80");
	cr_assert(strstr(err.msg, "..."), "%s", err.msg);
	for (p = err.msg; *p; p++)
		cr_assert(*p >= 0x20 && *p < 0x7f);
	vsxd_config_free(&cfg);

	/* a huge value */
	memcpy(buf, "[vm a]\nsocket = /", 17);
	memset(buf + 17, 'a', big - 17);
	vsxd_config_init(&cfg);
	r = vsxd_config_parse(buf, big, "t.conf", &cfg, &err);
	expect_err(r, err, "t.conf:2: socket is too long");
	vsxd_config_free(&cfg);
	free(buf);
}

/*
 * Random bytes and random mixes of the grammar's own tokens: the parser
 * returns 0 or -EINVAL, never crashes (ASan/valgrind watch the rest), and
 * every message is one printable line.
 */
Test(conf, random_input)
{
	static const char *const tokens[] = {
		"[vm", "[vm a]", "[daemon]", "]", "[", "=", " = ", "\n", "\r\n", "#", " #",
		"guest-cid", "socket", "uds-path", "tx-buffer-size", "queue-size", "groups",
		"name", "control", "log", "log-level", "3", "0x", "99999999999999999999",
		"/s", "/u", "64K", "1G", "a+b", "+", ",", "\0", "\xff", "syslog", "debug",
		"  ", "\t", ";",
	};
	unsigned seed = 12345;
	char buf[512];
	size_t len, n;
	int i, r;

	for (i = 0; i < 20000; i++) {
		struct vsxd_config cfg;
		struct vsxd_err err;
		const char *p;

		len = 0;
		if (i % 2) {
			n = (size_t)(rand_r(&seed) % sizeof(buf));
			for (len = 0; len < n; len++)
				buf[len] = (char)rand_r(&seed);
		} else {
			n = (size_t)(rand_r(&seed) % 40);
			while (n--) {
				const char *t = tokens[rand_r(&seed) %
						       (sizeof(tokens) / sizeof(tokens[0]))];
				size_t tl = t[0] ? strlen(t) : 1;

				if (len + tl > sizeof(buf))
					break;
				memcpy(buf + len, t, tl);
				len += tl;
			}
		}
		vsxd_config_init(&cfg);
		err.msg[0] = '\0';
		r = vsxd_config_parse(buf, len, "fuzz", &cfg, &err);
		cr_assert(r == 0 || r == -EINVAL, "iteration %d: %d", i, r);
		if (r == 0) {
			vsxd_config_check(&cfg, &err);
		} else {
			cr_assert(!strncmp(err.msg, "fuzz:", 5), "iteration %d: %s", i, err.msg);
			for (p = err.msg; *p; p++)
				cr_assert(*p >= 0x20 && *p < 0x7f, "iteration %d: %s", i, err.msg);
		}
		vsxd_config_free(&cfg);
	}
}

/* ---- files, merging ---- */

static char *write_temp(const char *text, size_t len)
{
	char *path = strdup("/tmp/vsxd-test-XXXXXX");
	int fd;

	cr_assert_not_null(path);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	return path;
}

Test(conf, load_and_merge)
{
	static const char text[] =
		"[daemon]\nlog-level = warning\ncontrol = /run/a.ctl\n"
		"[vm f]\nguest-cid = 5\nsocket = /f.vhost\nuds-path = /f.vsock\n";
	char *argv[] = { "vsxd", "-v", "--vm", "guest-cid=6,socket=/g.vhost,uds-path=/g.vsock" };
	char *argv_dup[] = { "vsxd", "--vm", "guest-cid=5,socket=/g.vhost,uds-path=/g.vsock" };
	struct vsxd_config file, merged;
	struct vsxd_opts o;
	struct vsxd_err err;
	char *path = write_temp(text, sizeof(text) - 1);
	char origin[64];
	int r;

	vsxd_config_init(&file);
	cr_assert_eq(vsxd_config_load(path, &file, &err), 0, "%s", err.msg);
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, &o.cfg), 0);
	cr_assert_eq(merged.n_vms, 2);
	cr_assert_str_eq(merged.vms[0].name, "f");
	snprintf(origin, sizeof(origin), "%s:4", path);
	cr_assert_str_eq(merged.vms[0].origin, origin);
	cr_assert_eq(merged.vms[1].guest_cid, 6);
	cr_assert_str_eq(merged.control_path, "/run/a.ctl");
	cr_assert_eq(merged.log_level, 7, "-v wins over the file");
	cr_assert_eq(vsxd_config_check(&merged, &err), 0, "%s", err.msg);
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);

	/* a flag VM that clashes with a file VM names both places */
	cr_assert_eq(parse_argv(ARGC(argv_dup), argv_dup, &o, &err), 0);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, &o.cfg), 0);
	r = vsxd_config_check(&merged, &err);
	expect_err(r, err, "--vm #1: guest-cid 5 is already used by ");
	cr_assert(strstr(err.msg, origin), "%s", err.msg);
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);
	vsxd_config_free(&file);
	unlink(path);
	free(path);
}

Test(conf, load_errors)
{
	struct vsxd_config cfg;
	struct vsxd_err err;
	char *big, *path;
	int r;

	vsxd_config_init(&cfg);
	r = vsxd_config_load("/nonexistent/vsxd.conf", &cfg, &err);
	cr_assert_eq(r, -ENOENT);
	cr_assert(strstr(err.msg, "/nonexistent/vsxd.conf: No such file or directory"),
		  "%s", err.msg);
	vsxd_config_free(&cfg);

	r = vsxd_config_load("/tmp", &cfg, &err);
	cr_assert_eq(r, -EISDIR);
	cr_assert(strstr(err.msg, "/tmp: Is a directory"), "%s", err.msg);
	vsxd_config_free(&cfg);

	big = malloc(VSXD_CONFIG_FILE_MAX + 1);
	cr_assert_not_null(big);
	memset(big, '#', VSXD_CONFIG_FILE_MAX + 1);
	path = write_temp(big, VSXD_CONFIG_FILE_MAX + 1);
	r = vsxd_config_load(path, &cfg, &err);
	cr_assert_eq(r, -EFBIG);
	cr_assert(strstr(err.msg, "file too large"), "%s", err.msg);
	vsxd_config_free(&cfg);
	unlink(path);
	free(path);

	/* exactly at the limit is fine */
	path = write_temp(big, VSXD_CONFIG_FILE_MAX);
	cr_assert_eq(vsxd_config_load(path, &cfg, &err), 0, "%s", err.msg);
	vsxd_config_free(&cfg);
	unlink(path);
	free(path);
	free(big);
}

/* control-allow-uid (the control socket's extra users): file, flag, merge */
Test(conf, control_allow_uid)
{
	char *argv[] = { "vsxd", "--control-allow-uid", "7,8", "--control-allow-uid", "9" };
	char *argv_bad[] = { "vsxd", "--control-allow-uid", "bob" };
	struct vsxd_config cfg, merged;
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(conf("[daemon]\ncontrol-allow-uid = 1000, 1001 1000\t42\n", &cfg, &err), 0,
		     "%s", err.msg);
	cr_assert(cfg.control_allow_set);
	cr_assert_eq(cfg.n_control_allow_uids, 3, "duplicates dropped");
	cr_assert_eq(cfg.control_allow_uids[0], 1000);
	cr_assert_eq(cfg.control_allow_uids[1], 1001);
	cr_assert_eq(cfg.control_allow_uids[2], 42);

	/* the command line replaces the file's list */
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	cr_assert_eq(o.cfg.n_control_allow_uids, 3);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &cfg, &o.cfg), 0);
	cr_assert_eq(merged.n_control_allow_uids, 3);
	cr_assert_eq(merged.control_allow_uids[0], 7);
	cr_assert_eq(merged.control_allow_uids[2], 9);
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);
	/* without the flag the file's list stays */
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &cfg, NULL), 0);
	cr_assert_eq(merged.n_control_allow_uids, 3);
	cr_assert_eq(merged.control_allow_uids[2], 42);
	vsxd_config_free(&merged);
	vsxd_config_free(&cfg);

	/* an empty list is allowed: nobody else */
	cr_assert_eq(conf("[daemon]\ncontrol-allow-uid =\n", &cfg, &err), 0, "%s", err.msg);
	cr_assert(cfg.control_allow_set);
	cr_assert_eq(cfg.n_control_allow_uids, 0);
	vsxd_config_free(&cfg);

	expect_conf_err("[daemon]\ncontrol-allow-uid = bob\n",
			"t.conf:2: control-allow-uid 'bob' is not a uid");
	expect_conf_err("[daemon]\ncontrol-allow-uid = 4294967295\n",
			"t.conf:2: control-allow-uid 4294967295 is out of range");
	expect_conf_err("[daemon]\ncontrol-allow-uid = 1\ncontrol-allow-uid = 2\n",
			"t.conf:3: 'control-allow-uid' given twice (first on line 2)");
	cr_assert_eq(parse_argv(ARGC(argv_bad), argv_bad, &o, &err), -EINVAL);
	cr_assert(strstr(err.msg, "control-allow-uid 'bob' is not a uid"), "%s", err.msg);
	vsxd_opts_free(&o);
}

Test(conf, metrics)
{
	char *argv[] = { "vsxd", "--metrics", "tcp:127.0.0.1:9200" };
	char *argv_bad[] = { "vsxd", "--metrics", "unix:/m" };
	struct vsxd_endpoint ep = { 0 };
	struct vsxd_config cfg, merged;
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(conf("[daemon]\nmetrics = tcp:[::1]:9100\n", &cfg, &err), 0, "%s", err.msg);
	cr_assert_str_eq(cfg.metrics, "tcp:[::1]:9100");
	cr_assert_eq(vsxd_metrics_check(cfg.metrics, strlen(cfg.metrics), "metrics", &ep, &err), 0);
	cr_assert_eq(ep.kind, VSXD_EP_TCP);
	cr_assert_str_eq(ep.host, "::1");
	cr_assert_eq(ep.port, 9100);
	vsxd_endpoint_free(&ep);

	/* the flag wins over the file; without it the file's stays */
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &cfg, &o.cfg), 0);
	cr_assert_str_eq(merged.metrics, "tcp:127.0.0.1:9200");
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &cfg, NULL), 0);
	cr_assert_str_eq(merged.metrics, "tcp:[::1]:9100");
	vsxd_config_free(&merged);
	vsxd_config_free(&cfg);

	expect_conf_err("[daemon]\nmetrics = unix:/m\n",
			"t.conf:2: metrics: 'unix:/m' is not a TCP address (expected tcp:HOST:PORT");
	expect_conf_err("[daemon]\nmetrics = tcp:h:0\n",
			"t.conf:2: metrics: 'tcp:h:0': the TCP port must be 1 to 65535");
	expect_conf_err("[daemon]\nmetrics = tcp:h\n", "t.conf:2: metrics: 'tcp:h': expected "
			"tcp:HOST:PORT");
	expect_conf_err("[daemon]\nmetrics = tcp:h:1\nmetrics = tcp:h:2\n",
			"t.conf:3: 'metrics' given twice (first on line 2)");
	cr_assert_eq(parse_argv(ARGC(argv_bad), argv_bad, &o, &err), -EINVAL);
	cr_assert(strstr(err.msg, "--metrics: 'unix:/m' is not a TCP address"), "%s", err.msg);
	vsxd_opts_free(&o);
}

/* ---- limits and timeouts ([daemon] keys and flags) ---- */

Test(limits, durations)
{
	uint64_t v;

	cr_assert_eq(vsxd_parse_duration("5", 1, 3600000, &v), 0);
	cr_assert_eq(v, 5000);
	cr_assert_eq(vsxd_parse_duration("250ms", 5, 3600000, &v), 0);
	cr_assert_eq(v, 250);
	cr_assert_eq(vsxd_parse_duration("8s", 2, 3600000, &v), 0);
	cr_assert_eq(v, 8000);
	cr_assert_eq(vsxd_parse_duration("2m", 2, 3600000, &v), 0);
	cr_assert_eq(v, 120000);
	cr_assert_eq(vsxd_parse_duration("61m", 3, 3600000, &v), -ERANGE);
	cr_assert_eq(vsxd_parse_duration("5h", 2, 3600000, &v), -EINVAL);
	cr_assert_eq(vsxd_parse_duration("-5", 2, 3600000, &v), -EINVAL);
	cr_assert_eq(vsxd_parse_duration("ms", 2, 3600000, &v), -EINVAL);
	cr_assert_eq(vsxd_parse_duration("5 s", 3, 3600000, &v), -EINVAL);
	cr_assert_eq(vsxd_parse_duration("99999999999999999999", 20, 3600000, &v), -ERANGE);
	cr_assert_eq(vsxd_limit_key("max_conns_per_vm", 16), VSXD_LIMIT_MAX_CONNS_PER_VM);
	cr_assert_eq(vsxd_limit_key("max-conn", 8), -1);
}

Test(limits, file_keys)
{
	struct vsxd_config cfg;
	struct vsxd_err err;

	cr_assert_eq(conf("[daemon]\nmax-conns = 1000\nmax-conns-per-vm = 0x100\n"
			  "max-conn-memory = 4M\nhandshake-timeout = 2\n"
			  "connect-timeout = 1500ms\nlinger_timeout = 1m\n", &cfg, &err), 0,
		     "%s", err.msg);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_MAX_CONNS], 1000);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_MAX_CONNS_PER_VM], 256);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_MAX_CONN_MEMORY], 4u << 20);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_HANDSHAKE_TIMEOUT], 2000);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_CONNECT_TIMEOUT], 1500);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_LINGER_TIMEOUT], 60000);
	cr_assert_eq(cfg.limit_line[VSXD_LIMIT_LINGER_TIMEOUT], 7);
	vsxd_config_free(&cfg);

	expect_conf_err("[daemon]\nmax-conns = 0\n",
			"t.conf:2: max-conns 0 is out of range (1 to 1048576)");
	expect_conf_err("[daemon]\nmax-conns = -1\n", "t.conf:2: max-conns '-1' is not a number");
	expect_conf_err("[daemon]\nmax-conns = 1048577\n", "max-conns 1048577 is out of range");
	expect_conf_err("[daemon]\nmax-conns = 99999999999999999999999\n", "is out of range");
	expect_conf_err("[daemon]\nmax-conns = 10K\n", "max-conns '10K' is not a number");
	expect_conf_err("[daemon]\nmax-conns-per-vm =\n", "empty value for 'max-conns-per-vm'");
	expect_conf_err("[daemon]\nmax-conn-memory = 4095\n",
			"max-conn-memory 4095 is out of range (8K to 4G)");
	expect_conf_err("[daemon]\nmax-conn-memory = 5G\n", "max-conn-memory 5G is out of range");
	expect_conf_err("[daemon]\nmax-conn-memory = 1T\n", "max-conn-memory '1T' is not a size");
	expect_conf_err("[daemon]\nmax-conn-memory = 0\n", "out of range");
	expect_conf_err("[daemon]\nlinger-timeout = 5ms\n",
			"t.conf:2: linger-timeout 5ms is out of range (10ms to 3600s)");
	expect_conf_err("[daemon]\nlinger-timeout = 0\n", "out of range");
	expect_conf_err("[daemon]\nconnect-timeout = 2h\n", "connect-timeout '2h' is not a duration");
	expect_conf_err("[daemon]\nconnect-timeout = 3601\n", "out of range");
	expect_conf_err("[daemon]\nmax-conns = 5\nmax-conns = 6\n",
			"t.conf:3: 'max-conns' given twice (first on line 2)");
}

Test(limits, poll_us)
{
	char *argv[] = { "vsxd", "--poll-us", "0" };
	char *argv_big[] = { "vsxd", "--poll-us=10001" };
	char *argv_twice[] = { "vsxd", "--poll-us", "0", "--poll-us", "50" };
	struct vsxd_config cfg, file, merged;
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(conf("[daemon]\npoll-us = 50\n", &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_POLL_US], 50);
	cr_assert(cfg.limit_set[VSXD_LIMIT_POLL_US]);
	vsxd_config_free(&cfg);
	cr_assert_eq(conf("[daemon]\npoll_us = 10000\n", &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.limits[VSXD_LIMIT_POLL_US], 10000);
	vsxd_config_free(&cfg);
	expect_conf_err("[daemon]\npoll-us = 10001\n",
			"t.conf:2: poll-us 10001 is out of range (0 to 10000)");
	expect_conf_err("[daemon]\npoll-us = 50us\n",
			"t.conf:2: poll-us '50us' is not a number (of microseconds)");
	expect_conf_err("[daemon]\npoll-us = -1\n", "poll-us '-1' is not a number");
	expect_conf_err("[daemon]\npoll-us =\n", "empty value for 'poll-us'");

	/* an explicit 0 on the command line turns off the file's polling */
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	cr_assert(o.cfg.limit_set[VSXD_LIMIT_POLL_US]);
	cr_assert_eq(conf("[daemon]\npoll-us = 50\n", &file, &err), 0);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, &o.cfg), 0);
	cr_assert_eq(merged.limits[VSXD_LIMIT_POLL_US], 0);
	vsxd_config_free(&merged);
	/* and without the flag the file's value stays */
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, NULL), 0);
	cr_assert_eq(merged.limits[VSXD_LIMIT_POLL_US], 50);
	vsxd_config_free(&merged);
	vsxd_config_free(&file);
	vsxd_opts_free(&o);

	cr_assert_eq(parse_argv(ARGC(argv_big), argv_big, &o, &err), -EINVAL);
	cr_assert(strstr(err.msg, "--poll-us: poll-us 10001 is out of range (0 to 10000)"),
		  "%s", err.msg);
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(argv_twice), argv_twice, &o, &err), -EINVAL);
	cr_assert(strstr(err.msg, "--poll-us given twice"), "%s", err.msg);
	vsxd_opts_free(&o);
}

Test(limits, flags_merge_and_check)
{
	char *argv[] = {
		"vsxd", "--vm", "socket=/s,uds-path=/u,tx-buffer-size=64K",
		"--max-conns", "10", "--max-conns-per-vm=5", "--max-conn-memory", "128K",
		"--linger-timeout", "500ms",
	};
	char *argv_tx[] = {
		"vsxd", "--vm", "socket=/s,uds-path=/u", "--max-conn-memory", "256K",
	};
	char *argv_twice[] = { "vsxd", "--max-conns", "1", "--max-conns", "2" };
	char *argv_bad[] = { "vsxd", "--connect-timeout", "soon" };
	struct vsxd_config file, merged;
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	cr_assert_eq(o.cfg.limits[VSXD_LIMIT_MAX_CONNS], 10);
	cr_assert_eq(o.cfg.limits[VSXD_LIMIT_MAX_CONNS_PER_VM], 5);
	cr_assert_eq(o.cfg.limits[VSXD_LIMIT_MAX_CONN_MEMORY], 128 * 1024);
	cr_assert_eq(o.cfg.limits[VSXD_LIMIT_LINGER_TIMEOUT], 500);
	cr_assert_eq(vsxd_config_check(&o.cfg, &err), 0, "%s", err.msg);

	/* the flags win over the file, the file fills the rest */
	cr_assert_eq(conf("[daemon]\nmax-conns = 99\nconnect-timeout = 3\n", &file, &err), 0);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, &o.cfg), 0);
	cr_assert_eq(merged.limits[VSXD_LIMIT_MAX_CONNS], 10);
	cr_assert_eq(merged.limits[VSXD_LIMIT_CONNECT_TIMEOUT], 3000);
	cr_assert_eq(merged.limits[VSXD_LIMIT_HANDSHAKE_TIMEOUT], 0);
	vsxd_config_free(&merged);
	vsxd_config_free(&file);
	vsxd_opts_free(&o);

	/* the default tx-buffer-size (256K) does not fit half of 256K */
	expect_check_err(ARGC(argv_tx), argv_tx,
			 "tx-buffer-size 262144 (the default) is above half of max-conn-memory");

	cr_assert_eq(parse_argv(ARGC(argv_twice), argv_twice, &o, &err), -EINVAL);
	cr_assert(strstr(err.msg, "--max-conns given twice"), "%s", err.msg);
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(argv_bad), argv_bad, &o, &err), -EINVAL);
	cr_assert(strstr(err.msg, "--connect-timeout: connect-timeout 'soon' is not a duration"),
		  "%s", err.msg);
	vsxd_opts_free(&o);
}

/* ---- forward specs (daemon/fwdspec.c) ---- */

/* allow= takes CIDs as every other vsxd number (decimal or 0x hex); ports
 * and the CIDs of addresses handed to libvsx stay decimal, as libvsx reads
 * them; keys match as vsxd.conf's ('_' for '-'). */
Test(fwdspec, numbers_as_everywhere_else)
{
	struct vsxd_forward f;
	struct vsxd_err err;

	memset(&err, 0, sizeof(err));
	cr_assert_eq(vsxd_fwd_parse("listen=vm:web:5000,connect=tcp:127.0.0.1:7000,allow=0x3+4+0X1f",
				    &f, &err), 0, "%s", err.msg);
	cr_assert_eq(f.n_allow, 3);
	cr_assert_eq(f.allow[0], 3);
	cr_assert_eq(f.allow[1], 4);
	cr_assert_eq(f.allow[2], 31);
	cr_assert_eq(f.listen.port, 5000);
	cr_assert_eq(f.connect.port, 7000);
	vsxd_fwd_free(&f);

	expect_err(vsxd_fwd_parse("listen=vm:web:5000,connect=tcp:127.0.0.1:7000,allow=0xg",
				  &f, &err), err, "allow: '0xg' is not a CID");
	vsxd_fwd_free(&f);
	expect_err(vsxd_fwd_parse("listen=tcp:127.0.0.1:0x10,connect=vm:web:5000", &f, &err),
		   err, "the TCP port must be 1 to 65535");
	vsxd_fwd_free(&f);
	expect_err(vsxd_fwd_parse("listen=tcp:127.0.0.1:7000,connect=vm:web:0x10", &f, &err),
		   err, "the port must be a number");
	vsxd_fwd_free(&f);
}

/* ---- socket-mode, socket-group ---- */

Test(perm, values)
{
	struct vsxd_err err;
	unsigned m = 1;
	char big[40];

	cr_assert_eq(vsxd_parse_socket_mode("socket-mode", "0660", 4, &m, &err), 0);
	cr_assert_eq(m, 0660);
	cr_assert_eq(vsxd_parse_socket_mode("socket-mode", "640", 3, &m, &err), 0);
	cr_assert_eq(m, 0640);
	cr_assert_eq(vsxd_parse_socket_mode("socket-mode", "0", 1, &m, &err), 0);
	cr_assert_eq(m, 0);
	cr_assert_eq(vsxd_parse_socket_mode("socket-mode", "00777", 5, &m, &err), 0);
	cr_assert_eq(m, 0777);
	expect_err(vsxd_parse_socket_mode("socket-mode", "1000", 4, &m, &err), err,
		   "socket-mode 1000 is out of range (0 to 0777");
	expect_err(vsxd_parse_socket_mode("socket-mode", "04660", 5, &m, &err), err,
		   "out of range");
	expect_err(vsxd_parse_socket_mode("socket-mode", "0x1b6", 5, &m, &err), err,
		   "socket-mode '0x1b6' is not an octal mode");
	expect_err(vsxd_parse_socket_mode("socket-mode", "0680", 4, &m, &err), err,
		   "is not an octal mode");
	expect_err(vsxd_parse_socket_mode("control-mode", "", 0, &m, &err), err,
		   "empty value for 'control-mode'");
	cr_assert_eq(m, 0777, "a refused value changes nothing");

	cr_assert_eq(vsxd_check_socket_group("socket-group", "kvm", 3, &err), 0);
	cr_assert_eq(vsxd_check_socket_group("socket-group", "libvirt-qemu", 12, &err), 0);
	cr_assert_eq(vsxd_check_socket_group("socket-group", "_vsx.1", 6, &err), 0);
	cr_assert_eq(vsxd_check_socket_group("socket-group", "host$", 5, &err), 0);
	cr_assert_eq(vsxd_check_socket_group("socket-group", "0", 1, &err), 0);
	cr_assert_eq(vsxd_check_socket_group("socket-group", "4294967294", 10, &err), 0);
	expect_err(vsxd_check_socket_group("socket-group", "4294967295", 10, &err), err,
		   "socket-group 4294967295 is out of range (a gid");
	expect_err(vsxd_check_socket_group("socket-group", "-kvm", 4, &err), err,
		   "socket-group '-kvm' is not a group name or gid");
	expect_err(vsxd_check_socket_group("socket-group", "k vm", 4, &err), err,
		   "is not a group name");
	expect_err(vsxd_check_socket_group("socket-group", "a$b", 3, &err), err,
		   "is not a group name");
	expect_err(vsxd_check_socket_group("control-group", "1x", 2, &err), err,
		   "control-group '1x' is not a group name");
	expect_err(vsxd_check_socket_group("socket-group", "", 0, &err), err,
		   "empty value for 'socket-group'");
	memset(big, 'g', sizeof(big));
	expect_err(vsxd_check_socket_group("socket-group", big, 33, &err), err, "is too long (at most 32");
	cr_assert_eq(vsxd_check_socket_group("socket-group", big, 32, &err), 0);
}

/* The mode and group of @cfg's VM @i (groups resolved first). */
static void vm_perm_of(struct vsxd_config *cfg, size_t i, unsigned *mode, bool *has_gid,
		       uint32_t *gid)
{
	struct vsxd_err err;

	cr_assert_eq(vsxd_config_resolve(cfg, &err), 0, "%s", err.msg);
	vsxd_vm_perm(cfg, &cfg->vms[i], mode, has_gid, gid);
}

Test(perm, file_keys_and_precedence)
{
	static const char text[] =
		"[daemon]\nsocket-group = 4242\n"
		"[vm a]\nguest-cid = 3\nsocket = /a.vhost\nuds-path = /a.vsock\n"
		"[vm b]\nguest-cid = 4\nsocket = /b.vhost\nuds-path = /b.vsock\n"
		"socket-mode = 0640\n"
		"[vm c]\nguest-cid = 5\nsocket = /c.vhost\nuds-path = /c.vsock\n"
		"socket_group = root\nsocket-mode = 0600\n";
	static const char plain[] =
		"[vm a]\nguest-cid = 3\nsocket = /a.vhost\nuds-path = /a.vsock\n";
	struct vsxd_config cfg;
	struct vsxd_err err;
	unsigned mode;
	bool has;
	uint32_t gid;

	cr_assert_eq(conf(text, &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.socket_group_line, 2);
	cr_assert_str_eq(cfg.perm.group, "4242");
	cr_assert_not(cfg.perm.mode_set);
	/* a: the [daemon] group, no mode given: 0660 */
	vm_perm_of(&cfg, 0, &mode, &has, &gid);
	cr_assert(has);
	cr_assert_eq(gid, 4242);
	cr_assert_eq(mode, 0660);
	/* b: its own mode, the [daemon] group */
	vm_perm_of(&cfg, 1, &mode, &has, &gid);
	cr_assert_eq(mode, 0640);
	cr_assert(has && gid == 4242);
	/* c: its own group, by name, and mode */
	vm_perm_of(&cfg, 2, &mode, &has, &gid);
	cr_assert_eq(mode, 0600);
	cr_assert(has);
	cr_assert_eq(gid, 0, "root's gid");
	vsxd_config_free(&cfg);

	/* nothing given: 0600, vsxd's own group */
	cr_assert_eq(conf(plain, &cfg, &err), 0, "%s", err.msg);
	vm_perm_of(&cfg, 0, &mode, &has, &gid);
	cr_assert_eq(mode, 0600);
	cr_assert_not(has);
	vsxd_config_free(&cfg);
}

Test(perm, file_errors)
{
	expect_conf_err("[daemon]\nsocket-mode = 0660\nsocket-mode = 0600\n",
			"t.conf:3: 'socket-mode' given twice (first on line 2)");
	expect_conf_err("[daemon]\nsocket-group = kvm\n\nsocket-group = kvm\n",
			"t.conf:4: 'socket-group' given twice (first on line 2)");
	expect_conf_err("[daemon]\nsocket-mode = rw-rw----\n",
			"t.conf:2: socket-mode 'rw-rw----' is not an octal mode");
	expect_conf_err("[daemon]\nsocket-group = qemu users\n",
			"t.conf:2: socket-group 'qemu users' is not a group name or gid");
	expect_conf_err("[vm a]\nsocket-mode = 2660\n",
			"t.conf:2: socket-mode 2660 is out of range");
	expect_conf_err("[vm a]\nsocket-group = kvm\nsocket-group = kvm\n",
			"t.conf:3: 'socket-group' given twice");
	expect_conf_err("[daemon]\nsocket-perm = 0660\n", "socket-mode, socket-group");
}

Test(perm, flags_merge_and_resolve)
{
	static const char text[] =
		"[daemon]\nsocket-group = root\nsocket-mode = 0600\n"
		"[vm f]\nguest-cid = 5\nsocket = /f.vhost\nuds-path = /f.vsock\n";
	char *argv[] = { "vsxd", "--socket-mode", "0660", "--vm",
			 "guest-cid=6,socket=/g.vhost,uds-path=/g.vsock,socket-group=77,"
			 "socket-mode=0606" };
	char *argv_nogroup[] = { "vsxd", "--socket-group=no-such-group-vsx", "--vm",
				 "guest-cid=6,socket=/g.vhost,uds-path=/g.vsock" };
	char *twice[] = { "vsxd", "--socket-group", "a", "--socket-group", "b" };
	char *bad[] = { "vsxd", "--socket-mode", "rw" };
	struct vsxd_config file, merged;
	struct vsxd_opts o;
	struct vsxd_err err;
	unsigned mode;
	bool has;
	uint32_t gid;

	cr_assert_eq(conf(text, &file, &err), 0, "%s", err.msg);
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	cr_assert(o.cfg.perm.mode_set);
	cr_assert_eq(o.cfg.perm.mode, 0660);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, &o.cfg), 0);
	/* the flag's mode wins over the file's; the file's group stays */
	cr_assert_eq(merged.perm.mode, 0660);
	cr_assert_str_eq(merged.perm.group, "root");
	vm_perm_of(&merged, 0, &mode, &has, &gid);
	cr_assert_eq(mode, 0660);
	cr_assert(has && gid == 0);
	/* the --vm's own keys win over both */
	vm_perm_of(&merged, 1, &mode, &has, &gid);
	cr_assert_eq(mode, 0606);
	cr_assert(has);
	cr_assert_eq(gid, 77);
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);
	vsxd_config_free(&file);

	/* an unknown group name: an error naming it and where it was given */
	cr_assert_eq(parse_argv(ARGC(argv_nogroup), argv_nogroup, &o, &err), 0, "%s", err.msg);
	expect_err(vsxd_config_resolve(&o.cfg, &err), err,
		   "[daemon] socket-group or --socket-group: socket-group "
		   "'no-such-group-vsx': no such group");
	vsxd_opts_free(&o);
	/* one of a VM: names the VM's place */
	cr_assert_eq(conf("[vm a]\nsocket = /a\nuds-path = /b\nsocket-group = no-such-group-vsx\n",
			  &file, &err), 0, "%s", err.msg);
	expect_err(vsxd_config_resolve(&file, &err), err,
		   "t.conf:1: socket-group 'no-such-group-vsx': no such group");
	vsxd_config_free(&file);

	expect_err(parse_argv(ARGC(twice), twice, &o, &err), err, "--socket-group given twice");
	vsxd_opts_free(&o);
	expect_err(parse_argv(ARGC(bad), bad, &o, &err), err,
		   "--socket-mode: socket-mode 'rw' is not an octal mode");
	vsxd_opts_free(&o);
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/u,socket-mode=9", "socket-mode '9'");
	expect_vm_err("guest-cid=3,socket=/s,uds-path=/u,socket-group=a,socket-group=b",
		      "'socket-group' given twice");
}

/* ---- control-mode, control-group ---- */

/* The control socket's mode and group in @cfg (groups resolved first). */
static void control_perm_of(struct vsxd_config *cfg, unsigned *mode, bool *has_gid,
			    uint32_t *gid)
{
	struct vsxd_err err;

	cr_assert_eq(vsxd_config_resolve(cfg, &err), 0, "%s", err.msg);
	vsxd_control_perm(cfg, mode, has_gid, gid);
}

Test(control_perm, defaults_file_flags_and_merge)
{
	static const char group_only[] = "[daemon]\ncontrol-group = 4343\nsocket-group = 77\n";
	static const char both[] = "[daemon]\ncontrol_group = root\ncontrol-mode = 0640\n";
	static const char allow[] = "[daemon]\ncontrol-allow-uid = 1000\n";
	char *argv[] = { "vsxd", "--control-mode", "0606", "--control-group=55" };
	struct vsxd_config cfg, merged;
	struct vsxd_opts o;
	struct vsxd_err err;
	unsigned mode;
	bool has;
	uint32_t gid;

	/* nothing given: 0600, vsxd's own group; socket-group does not count */
	cr_assert_eq(conf("[daemon]\nsocket-group = 77\n", &cfg, &err), 0, "%s", err.msg);
	control_perm_of(&cfg, &mode, &has, &gid);
	cr_assert_eq(mode, 0600);
	cr_assert_not(has);
	vsxd_config_free(&cfg);
	/* a group, no mode: 0660 */
	cr_assert_eq(conf(group_only, &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.control_group_line, 2);
	control_perm_of(&cfg, &mode, &has, &gid);
	cr_assert_eq(mode, 0660);
	cr_assert(has);
	cr_assert_eq(gid, 4343);
	vsxd_config_free(&cfg);
	/* both, the group by name */
	cr_assert_eq(conf(both, &cfg, &err), 0, "%s", err.msg);
	control_perm_of(&cfg, &mode, &has, &gid);
	cr_assert_eq(mode, 0640);
	cr_assert(has);
	cr_assert_eq(gid, 0, "root's gid");
	/* flags win, each on its own */
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &cfg, &o.cfg), 0);
	control_perm_of(&merged, &mode, &has, &gid);
	cr_assert_eq(mode, 0606);
	cr_assert(has);
	cr_assert_eq(gid, 55);
	cr_assert_str_eq(merged.control_perm.group, "55");
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);
	vsxd_config_free(&cfg);
	/* control-allow-uid without a mode: 0666, the peer check admits */
	cr_assert_eq(conf(allow, &cfg, &err), 0, "%s", err.msg);
	control_perm_of(&cfg, &mode, &has, &gid);
	cr_assert_eq(mode, 0666);
	cr_assert_not(has);
	vsxd_config_free(&cfg);
}

Test(control_perm, errors)
{
	char *twice[] = { "vsxd", "--control-group", "a", "--control-group", "b" };
	char *bad[] = { "vsxd", "--control-mode", "rw" };
	char *nogroup[] = { "vsxd", "--control-group", "no-such-group-vsx" };
	struct vsxd_opts o;
	struct vsxd_err err;

	expect_conf_err("[daemon]\ncontrol-mode = 0660\ncontrol-mode = 0600\n",
			"t.conf:3: 'control-mode' given twice (first on line 2)");
	expect_conf_err("[daemon]\ncontrol-group = kvm\ncontrol-group = kvm\n",
			"t.conf:3: 'control-group' given twice (first on line 2)");
	expect_conf_err("[daemon]\ncontrol-mode = 4770\n",
			"t.conf:2: control-mode 4770 is out of range");
	expect_conf_err("[daemon]\ncontrol-group = -x\n",
			"t.conf:2: control-group '-x' is not a group name or gid");
	expect_conf_err("[vm a]\ncontrol-mode = 0660\n", "control-mode");
	expect_conf_err("[daemon]\ncontrol-perm = 0660\n", "control-mode, control-group");
	expect_err(parse_argv(ARGC(twice), twice, &o, &err), err, "--control-group given twice");
	vsxd_opts_free(&o);
	expect_err(parse_argv(ARGC(bad), bad, &o, &err), err,
		   "--control-mode: control-mode 'rw' is not an octal mode");
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(nogroup), nogroup, &o, &err), 0, "%s", err.msg);
	expect_err(vsxd_config_resolve(&o.cfg, &err), err,
		   "[daemon] control-group or --control-group: control-group "
		   "'no-such-group-vsx': no such group");
	vsxd_opts_free(&o);
}

/* ---- The sandbox's settings (sandbox.c) ---- */

Test(values, seccomp_modes)
{
	cr_assert_eq(vsxd_parse_seccomp("kill", 4), VSXD_SECCOMP_KILL);
	cr_assert_eq(vsxd_parse_seccomp("log", 3), VSXD_SECCOMP_LOG);
	cr_assert_eq(vsxd_parse_seccomp("off", 3), VSXD_SECCOMP_OFF);
	cr_assert_eq(vsxd_parse_seccomp("of", 2), -EINVAL);
	cr_assert_eq(vsxd_parse_seccomp("trap", 4), -EINVAL);
	cr_assert_str_eq(vsxd_seccomp_name(VSXD_SECCOMP_LOG), "log");
	cr_assert_str_eq(vsxd_seccomp_name(VSXD_SECCOMP_OFF), "off");
	cr_assert_str_eq(vsxd_seccomp_name(VSXD_SECCOMP_KILL), "kill");
}

Test(conf, user_and_seccomp)
{
	struct vsxd_config cfg;
	struct vsxd_err err;

	cr_assert_eq(conf("[daemon]\nuser = vsxd\nseccomp = log\n", &cfg, &err), 0, "%s",
		     err.msg);
	cr_assert_str_eq(cfg.user, "vsxd");
	cr_assert_eq(cfg.seccomp, VSXD_SECCOMP_LOG);
	vsxd_config_free(&cfg);
	cr_assert_eq(conf("[daemon]\nuser = 999\n", &cfg, &err), 0, "%s", err.msg);
	cr_assert_str_eq(cfg.user, "999");
	cr_assert_eq(cfg.seccomp, VSXD_UNSET);
	vsxd_config_free(&cfg);
	expect_conf_err("[daemon]\nseccomp = trap\n",
			"t.conf:2: seccomp 'trap' is not one of kill, log, off");
	expect_conf_err("[daemon]\nseccomp = off\nseccomp = kill\n",
			"t.conf:3: 'seccomp' given twice (first on line 2)");
	expect_conf_err("[daemon]\nuser = a b\n", "t.conf:2: user 'a b' is not a user name or a uid");
	expect_conf_err("[daemon]\nuser = -x\n", "t.conf:2: user '-x' is not a user name or a uid");
	expect_conf_err("[daemon]\nuser = a\nuser = b\n",
			"t.conf:3: 'user' given twice (first on line 2)");
	expect_conf_err("[daemon]\nuser = 0123456789012345678901234567890123\n",
			"give a user name (at most 32 bytes) or a uid");
}

Test(cli, user_and_seccomp)
{
	char *good[] = { "vsxd", "--user", "nobody", "--seccomp", "off" };
	char *twice[] = { "vsxd", "--seccomp", "log", "--seccomp=kill" };
	char *bad[] = { "vsxd", "--seccomp", "loud" };
	char *baduser[] = { "vsxd", "--user", "a:b" };
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(parse_argv(ARGC(good), good, &o, &err), 0, "%s", err.msg);
	cr_assert_str_eq(o.cfg.user, "nobody");
	cr_assert_eq(o.cfg.seccomp, VSXD_SECCOMP_OFF);
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(twice), twice, &o, &err), -EINVAL);
	cr_assert_str_eq(err.msg, "--seccomp given twice");
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(bad), bad, &o, &err), -EINVAL);
	cr_assert_str_eq(err.msg, "--seccomp 'loud' is not one of kill, log, off");
	vsxd_opts_free(&o);
	cr_assert_eq(parse_argv(ARGC(baduser), baduser, &o, &err), -EINVAL);
	cr_assert_str_eq(err.msg, "--user 'a:b' is not a user name or a uid");
	vsxd_opts_free(&o);
}

Test(merge, user_and_seccomp_flags_win)
{
	char *argv[] = { "vsxd", "--seccomp", "off", "--user", "b" };
	struct vsxd_config file, merged;
	struct vsxd_opts o;
	struct vsxd_err err;

	cr_assert_eq(conf("[daemon]\nuser = a\nseccomp = log\n", &file, &err), 0, "%s", err.msg);
	cr_assert_eq(parse_argv(ARGC(argv), argv, &o, &err), 0, "%s", err.msg);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, &o.cfg), 0);
	cr_assert_str_eq(merged.user, "b");
	cr_assert_eq(merged.seccomp, VSXD_SECCOMP_OFF);
	vsxd_config_free(&merged);
	vsxd_config_init(&merged);
	cr_assert_eq(vsxd_config_merge(&merged, &file, NULL), 0);
	cr_assert_str_eq(merged.user, "a");
	cr_assert_eq(merged.seccomp, VSXD_SECCOMP_LOG);
	vsxd_config_free(&merged);
	vsxd_opts_free(&o);
	vsxd_config_free(&file);
}
