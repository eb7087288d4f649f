/*
 * Fuzz target: vsxd's settings parsers (daemon/settings.c, conffile.c,
 * conffile_yaml.c, cmdline.c). The first byte picks the parser, the rest
 * is its input:
 *   0: a --config file, vsxd.conf(5) or YAML (vsxd_config_parse chooses;
 *      seeds file03, file04 are YAML), then vsxd_config_check and
 *      vsxd_config_merge with itself;
 *   1: a --vm spec (vsxd_vm_parse), then copy and compare;
 *   2: a command line, arguments separated by NUL bytes (vsxd_opts_parse);
 *   3: values: vsxd_parse_size, vsxd_parse_uint, vsxd_parse_uid_list,
 *      vsxd_parse_log_level over the same bytes.
 * Every error message must be a NUL-terminated string of the buffer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/config.h"
#include "fuzz.h"

static void check_err(const struct vsxd_err *err)
{
	if (!memchr(err->msg, '\0', sizeof(err->msg)))
		abort();
}

static void fz_file(const uint8_t *p, size_t n)
{
	struct vsxd_config cfg, merged;
	struct vsxd_err err = { { 0 } };
	char *buf = malloc(n ? n : 1); /* not NUL-terminated: the API's promise */

	if (!buf)
		return;
	memcpy(buf, p, n);
	vsxd_config_init(&cfg);
	if (vsxd_config_parse(buf, n, "fuzz.conf", &cfg, &err) == 0) {
		vsxd_config_check(&cfg, &err);
		vsxd_config_init(&merged);
		vsxd_config_merge(&merged, &cfg, &cfg);
		vsxd_config_check(&merged, &err);
		vsxd_config_free(&merged);
	}
	check_err(&err);
	vsxd_config_free(&cfg);
	free(buf);
}

static void fz_vm(const uint8_t *p, size_t n)
{
	struct vsxd_err err = { { 0 } };
	struct vsxd_vm vm, copy;
	char *s = malloc(n + 1), name[VSXD_NAME_MAX + 16];

	if (!s)
		return;
	memcpy(s, p, n);
	s[n] = '\0';
	if (vsxd_vm_parse(s, &vm, &err) == 0) {
		vsxd_vm_name(&vm, name, sizeof(name));
		if (vsxd_vm_copy(&copy, &vm) == 0) {
			if (!vsxd_vm_same_device(&copy, &vm))
				abort();
			vsxd_vm_free(&copy);
		}
	}
	check_err(&err);
	vsxd_vm_free(&vm);
	free(s);
}

static void fz_argv(const uint8_t *p, size_t n)
{
	struct vsxd_err err = { { 0 } };
	struct vsxd_opts o;
	char *buf = malloc(n + 1), *argv[66];
	int argc = 1;
	size_t i = 0;

	if (!buf)
		return;
	memcpy(buf, p, n);
	buf[n] = '\0';
	argv[0] = "vsxd";
	while (i <= n && argc < 65) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	if (n == 0)
		argc = 1;
	argv[argc] = NULL;
	if (vsxd_opts_parse(argc, argv, &o, &err) == 0)
		vsxd_config_check(&o.cfg, &err);
	check_err(&err);
	vsxd_opts_free(&o);
	free(buf);
}

static void fz_values(const uint8_t *p, size_t n)
{
	struct vsxd_err err = { { 0 } };
	struct vsxd_config cfg;
	char *s = malloc(n ? n : 1);
	uint64_t v;
	int lv;

	if (!s)
		return;
	memcpy(s, p, n);
	if (vsx__parse_size(s, n, VSXB_MAX_BUF_ALLOC, &v) == 0 && v > VSXB_MAX_BUF_ALLOC)
		abort();
	if (vsx__parse_uint(s, n, VSXD_CID_MAX, &v) == 0 && v > VSXD_CID_MAX)
		abort();
	lv = vsxd_parse_log_level(s, n);
	if (lv >= 0 && !vsxd_log_level_name(lv))
		abort();
	vsxd_config_init(&cfg);
	vsxd_parse_uid_list(s, n, &cfg, &err);
	check_err(&err);
	vsxd_config_free(&cfg);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] & 3) {
	case 0:
		fz_file(data + 1, size - 1);
		break;
	case 1:
		fz_vm(data + 1, size - 1);
		break;
	case 2:
		fz_argv(data + 1, size - 1);
		break;
	default:
		fz_values(data + 1, size - 1);
		break;
	}
	return 0;
}
