/*
 * vhost-device-vsock's YAML configuration file (daemon/conffile_yaml.c),
 * through vsxd_config_parse, which chooses it by content: the README's
 * example read back key by key, both spellings, and every refusal with the
 * line it names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../daemon/config.h"
#include "../../daemon/config-int.h"

/* vhost-device-vsock 0.3.0's README example, verbatim. */
static const char readme[] =
	"vms:\n"
	"    - guest_cid: 3\n"
	"      socket: /tmp/vhost3.socket\n"
	"      uds_path: /tmp/vm3.vsock\n"
	"      tx_buffer_size: 65536\n"
	"      queue_size: 1024\n"
	"      groups: group1+groupA\n"
	"    - guest_cid: 4\n"
	"      socket: /tmp/vhost4.socket\n"
	"      uds_path: /tmp/vm4.vsock\n"
	"      tx_buffer_size: 32768\n"
	"      queue_size: 256\n"
	"      groups: group2+groupB\n"
	"    - guest_cid: 5\n"
	"      socket: /tmp/vhost5.socket\n"
	"      forward-cid: 1\n"
	"      forward-listen: 9001+9002\n"
	"      tx_buffer_size: 32768\n"
	"      queue_size: 1024\n";

static int yaml(const char *text, struct vsxd_config *cfg, struct vsxd_err *err)
{
	vsxd_config_init(cfg);
	memset(err, 0, sizeof(*err));
	return vsxd_config_parse(text, strlen(text), "t.yaml", cfg, err);
}

/* @text is refused with -EINVAL and a message holding @part. */
static void expect_yaml_err(const char *text, const char *part)
{
	struct vsxd_config cfg;
	struct vsxd_err err;
	int r = yaml(text, &cfg, &err);

	cr_assert_eq(r, -EINVAL, "text \"%s\": expected -EINVAL, got %d", text, r);
	cr_assert(strstr(err.msg, part), "text \"%s\": message \"%s\" lacks \"%s\"",
		  text, err.msg, part);
	vsxd_config_free(&cfg);
}

/* One VM of socket /s and uds_path /u plus @extra (lines of 4 spaces). */
static char *one_vm(const char *extra)
{
	char *t;

	cr_assert_geq(asprintf(&t, "vms:\n  - socket: /s\n    uds_path: /u\n%s", extra), 0);
	return t;
}

static void expect_vm_err(const char *extra, const char *part)
{
	char *t = one_vm(extra);

	expect_yaml_err(t, part);
	free(t);
}

Test(yaml, readme_example)
{
	struct vsxd_config cfg;
	struct vsxd_err err;
	const struct vsxd_vm *v;

	cr_assert_eq(yaml(readme, &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.n_vms, 3);
	v = &cfg.vms[0];
	cr_assert_eq(v->guest_cid, 3);
	cr_assert_str_eq(v->socket_path, "/tmp/vhost3.socket");
	cr_assert_str_eq(v->uds_path, "/tmp/vm3.vsock");
	cr_assert_eq(v->tx_buffer_size, 65536);
	cr_assert_eq(v->queue_size, 1024);
	cr_assert_str_eq(v->groups, "group1+groupA");
	cr_assert_str_eq(v->origin, "t.yaml:2");
	cr_assert_null(v->name);
	v = &cfg.vms[1];
	cr_assert_eq(v->guest_cid, 4);
	cr_assert_str_eq(v->uds_path, "/tmp/vm4.vsock");
	cr_assert_eq(v->tx_buffer_size, 32768);
	cr_assert_eq(v->queue_size, 256);
	cr_assert_str_eq(v->groups, "group2+groupB");
	cr_assert_str_eq(v->origin, "t.yaml:8");
	v = &cfg.vms[2];
	cr_assert_eq(v->guest_cid, 5);
	cr_assert_null(v->uds_path);
	cr_assert(v->set & VSXD_VM_FWD_CID);
	cr_assert_eq(v->forward_cid, 1);
	cr_assert_eq(v->n_forward_listen, 2);
	cr_assert_eq(v->forward_listen[0], 9001);
	cr_assert_eq(v->forward_listen[1], 9002);
	cr_assert_null(v->groups);
	cr_assert_eq(vsxd_config_check(&cfg, &err), 0, "%s", err.msg);
	vsxd_config_free(&cfg);
}

/* The same VM in '_' and '-' spellings, block and flow style, quoted
 * strings (trimmed, as vhost-device-vsock trims), comments, a BOM, "---". */
Test(yaml, spellings_and_styles)
{
	static const char *const texts[] = {
		"vms:\n  - guest_cid: 7\n    socket: /s\n    uds_path: /u\n"
		"    tx_buffer_size: 4096\n    queue_size: 64\n    groups: a+b\n",
		"# vsock\n---\nvms:\n- guest-cid: 7\n  socket: \" /s \"\n  uds-path: '/u'\n"
		"  tx-buffer-size: 4096   # bytes\n  queue-size: 64\n  groups: a+b\n...\n",
		"\xef\xbb\xbfvms: [ { guest_cid: 7, socket: /s, uds_path: /u, "
		"tx_buffer_size: 4096, queue_size: 64, groups: \"a+b\" } ]\n",
		"{\"vms\": [{\"guest_cid\": 7, \"socket\": \"/s\", \"uds_path\": \"/u\", "
		"\"tx_buffer_size\": 4096, \"queue_size\": 64, \"groups\": \"a+b\"}]}",
	};
	struct vsxd_config cfg;
	struct vsxd_err err;
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		cr_assert_eq(yaml(texts[i], &cfg, &err), 0, "text %zu: %s", i, err.msg);
		cr_assert_eq(cfg.n_vms, 1, "text %zu", i);
		cr_assert_eq(cfg.vms[0].guest_cid, 7, "text %zu", i);
		cr_assert_str_eq(cfg.vms[0].socket_path, "/s", "text %zu", i);
		cr_assert_str_eq(cfg.vms[0].uds_path, "/u", "text %zu", i);
		cr_assert_eq(cfg.vms[0].tx_buffer_size, 4096, "text %zu", i);
		cr_assert_eq(cfg.vms[0].queue_size, 64, "text %zu", i);
		cr_assert_str_eq(cfg.vms[0].groups, "a+b", "text %zu", i);
		vsxd_config_free(&cfg);
	}
}

/* Null values are keys not given (serde's Option): the defaults. */
Test(yaml, nulls_and_defaults)
{
	struct vsxd_config cfg;
	struct vsxd_err err;

	cr_assert_eq(yaml("vms:\n  - socket: /s\n    uds_path: /u\n    guest_cid: ~\n"
			  "    tx_buffer_size: null\n    groups:\n", &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.vms[0].guest_cid, VSXD_CID_DEFAULT);
	cr_assert_eq(cfg.vms[0].tx_buffer_size, 0);
	cr_assert_null(cfg.vms[0].groups);
	vsxd_config_free(&cfg);
}

Test(yaml, unknown_keys_name_their_line)
{
	expect_vm_err("    colour: red\n", "t.yaml:4: unknown key 'colour' (known keys: guest_cid,");
	/* vsxd's own --vm key is not one of vhost-device-vsock's */
	expect_vm_err("    name: web\n", "t.yaml:4: unknown key 'name'");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /u\nvm:\n  - socket: /t\n",
			"t.yaml:4: unknown key 'vm' (the file has one key, vms)");
	expect_yaml_err("daemon:\n  log: syslog\n", "t.yaml:1: unknown key 'daemon'");
}

Test(yaml, syntax_errors_name_their_line)
{
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /u: x\n",
			"t.yaml:3: YAML syntax error: mapping values are not allowed");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: \"/u\n",
			"t.yaml:4: YAML syntax error: found unexpected end of stream "
			"(while scanning a quoted scalar on line 3)");
	expect_yaml_err("vms:\n\t- socket: /s\n", "t.yaml:2: YAML syntax error: found character "
			"that cannot start any token");
	expect_yaml_err("vms:\n  - socket: /s\n   uds_path: /u\n", "t.yaml:3: YAML syntax error");
	expect_yaml_err("vms: [ { socket: /s }\n", "t.yaml:2: YAML syntax error");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /\xff\n", "t.yaml:3: not a YAML text");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: *a\n",
			"t.yaml:3: YAML aliases (*NAME) are not supported");
	expect_yaml_err("vms:\n  - &a socket: /s\n    uds_path: /u\n  - *a\n",
			"t.yaml:4: YAML aliases (*NAME) are not supported");
}

Test(yaml, wrong_types)
{
	expect_vm_err("    guest_cid: four\n", "t.yaml:4: guest_cid: 'four' is not an integer");
	expect_vm_err("    guest_cid: -4\n", "t.yaml:4: guest_cid: '-4' is not an integer");
	expect_vm_err("    guest_cid: \"4\"\n", "t.yaml:4: guest_cid: expected an integer, "
		      "not a quoted string");
	expect_vm_err("    tx_buffer_size: 64K\n", "t.yaml:4: tx_buffer_size: '64K' is not an "
		      "integer");
	expect_vm_err("    queue_size: [1]\n", "t.yaml:4: queue_size: expected an integer, "
		      "not a list");
	expect_vm_err("    groups: {a: b}\n", "t.yaml:4: groups: expected a string, not a mapping");
	expect_vm_err("    guest_cid: 2\n", "t.yaml:4: guest-cid 2 is out of range");
	expect_vm_err("    queue_size: 100\n", "t.yaml:4: queue-size 100 is not a power of two");
	expect_vm_err("    groups: a++b\n", "t.yaml:4: groups 'a++b' has an empty group name");
	expect_yaml_err("vms:\n  - socket: \"\"\n    uds_path: /u\n",
			"t.yaml:2: empty value for 'socket'");
	expect_yaml_err("vms: /s\n", "t.yaml:1: vms: expected a list of VMs");
	expect_yaml_err("vms:\n", "t.yaml:1: vms: expected a list of VMs ('- guest_cid: ...' "
			"entries), not nothing");
	expect_yaml_err("vms:\n  - /s\n", "t.yaml:2: vms entry 1: expected a mapping");
	expect_yaml_err("vms: []\n", "t.yaml:1: vms is an empty list");
	expect_yaml_err("- socket: /s\n", "t.yaml:1: expected a mapping with a 'vms:' list, "
			"not a list");
	expect_yaml_err("vms:\n  - ? [a]\n    : b\n", "t.yaml:2: expected a key, not a list");
}

Test(yaml, duplicates)
{
	expect_vm_err("    uds_path: /v\n", "t.yaml:4: 'uds_path' given twice (first on line 3)");
	/* the other spelling is the same key */
	expect_vm_err("    uds-path: /v\n", "t.yaml:4: 'uds-path' given twice (first on line 3)");
	/* a null counts as given */
	expect_vm_err("    groups: ~\n    groups: a\n", "t.yaml:5: 'groups' given twice");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /u\nvms:\n  - socket: /t\n",
			"t.yaml:4: 'vms' given twice (first on line 1)");
	/* whole-config checks see YAML VMs as any others */
	{
		struct vsxd_config cfg;
		struct vsxd_err err;

		cr_assert_eq(yaml("vms:\n  - socket: /s\n    uds_path: /u\n"
				  "  - socket: /t\n    uds_path: /v\n", &cfg, &err), 0, "%s", err.msg);
		cr_assert_eq(vsxd_config_check(&cfg, &err), -EINVAL);
		cr_assert(strstr(err.msg, "t.yaml:4: guest-cid 3 is already used by t.yaml:2"),
			  "%s", err.msg);
		vsxd_config_free(&cfg);
	}
}

Test(yaml, incomplete_vms)
{
	expect_yaml_err("vms:\n  - guest_cid: 4\n    uds_path: /u\n",
			"t.yaml:2: vms entry 1: missing 'socket'");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /u\n  - socket: /t\n",
			"t.yaml:4: vms entry 2: missing 'uds-path' (or 'forward-cid')");
	expect_vm_err("    forward_cid: 1\n", "uds-path and forward-cid exclude each other");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /u\n    forward_listen: 9000\n",
			"forward-listen needs forward-cid");
	expect_yaml_err("vms:\n  - socket: /s\n    forward_cid: 1\n    forward_listen: 9000+x\n",
			"t.yaml:4: forward-listen '9000+x': 'x' is not a port number");
}

Test(yaml, empty_and_odd_files)
{
	struct vsxd_config cfg;
	struct vsxd_err err;

	/* an empty file, or one of comments, is an empty vsxd.conf, as before */
	cr_assert_eq(yaml("", &cfg, &err), 0, "%s", err.msg);
	cr_assert_eq(cfg.n_vms, 0);
	vsxd_config_free(&cfg);
	cr_assert_eq(yaml("# nothing\n\n", &cfg, &err), 0, "%s", err.msg);
	vsxd_config_free(&cfg);
	/* a YAML document with nothing in it is not */
	expect_yaml_err("---\n", "t.yaml:2: expected a mapping with a 'vms:' list, not nothing");
	expect_yaml_err("---\n# c\n...\n", "expected a mapping with a 'vms:' list, not nothing");
	expect_yaml_err("{}\n", "t.yaml:1: no 'vms:' list");
	expect_yaml_err("vms:\n  - socket: /s\n    uds_path: /u\n---\nvms: []\n",
			"t.yaml:4: a second YAML document");
}

Test(yaml, chosen_by_content)
{
	cr_assert(vsxd__config_is_yaml("vms:\n", 5));
	cr_assert(vsxd__config_is_yaml("# c\n\n  \nvms:\n", 13));
	cr_assert(vsxd__config_is_yaml("---\n", 4));
	cr_assert(vsxd__config_is_yaml("%YAML 1.1\n---\n", 14));
	cr_assert(vsxd__config_is_yaml("{vms: []}", 9));
	cr_assert(vsxd__config_is_yaml("vms:", 4));
	cr_assert(!vsxd__config_is_yaml("", 0));
	cr_assert(!vsxd__config_is_yaml("[vm a]\n", 7));
	cr_assert(!vsxd__config_is_yaml("; c\nvms:\n", 9));
	cr_assert(!vsxd__config_is_yaml("  vms:\n", 7));
	cr_assert(!vsxd__config_is_yaml("key = a:b\n", 10));
	cr_assert(!vsxd__config_is_yaml("vms:x\n", 6));
	cr_assert(!vsxd__config_is_yaml("# only\n", 7));
}

/* Every prefix of the README file: 0 or -EINVAL with a one-line message
 * naming the file, never a crash or a leak (run under valgrind by CI). */
Test(yaml, every_prefix)
{
	struct vsxd_config cfg;
	struct vsxd_err err;
	const char *p;
	size_t n;
	int r;

	for (n = 0; n <= sizeof(readme) - 1; n++) {
		vsxd_config_init(&cfg);
		err.msg[0] = '\0';
		r = vsxd_config_parse(readme, n, "t.yaml", &cfg, &err);
		cr_assert(r == 0 || r == -EINVAL, "prefix %zu: %d", n, r);
		if (r < 0) {
			cr_assert(!strncmp(err.msg, "t.yaml:", 7), "prefix %zu: %s", n, err.msg);
			for (p = err.msg; *p; p++)
				cr_assert(*p >= 0x20 && *p < 0x7f, "prefix %zu: %s", n, err.msg);
		}
		vsxd_config_free(&cfg);
	}
}
