/*
 * Hyper-V service GUIDs: vsx_guid_* and `vsxctl guid` (tools/vsxctl/
 * cmd_guid.c, called here through guid_main, -j included).
 * Pure computation: no socket of any kind.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "check.h"

int guid_main(int argc, char **argv);
bool opt_json;   /* vsxctl's -j (tools/vsxctl/main.c), set by the tests */

static const uint8_t g808[16] = {
	0x00, 0x00, 0x08, 0x08, 0xfa, 0xcb, 0x11, 0xe6,
	0xbd, 0x58, 0x64, 0x00, 0x6a, 0x79, 0x86, 0xd3,
};

static const char *fmt(const uint8_t g[16], unsigned flags)
{
	static char buf[VSX_GUID_STRLEN];

	cr_assert_geq(vsx_guid_format(g, flags, buf, sizeof(buf)), 0);
	return buf;
}

Test(guid, port_2056)
{
	uint8_t g[16];
	uint32_t port = 0;

	EQ(vsx_guid_from_port(2056, g), 0);
	cr_assert(memcmp(g, g808, 16) == 0);
	cr_assert_str_eq(fmt(g, 0), "00000808-facb-11e6-bd58-64006a7986d3");
	EQ(vsx_guid_to_port(g, &port), 0);
	EQ(port, 2056);
}

Test(guid, forms_any_case_braces)
{
	static const char *const forms[] = {
		"00000808-facb-11e6-bd58-64006a7986d3",
		"{00000808-facb-11e6-bd58-64006a7986d3}",
		"00000808-FACB-11E6-BD58-64006A7986D3",
		"{00000808-FACB-11E6-BD58-64006A7986D3}",
		"{00000808-FaCb-11e6-bD58-64006a7986D3}",
	};
	uint8_t g[16];
	size_t i;

	for (i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		memset(g, 0xee, sizeof(g));
		EQ(vsx_guid_parse(forms[i], g), 0);
		cr_assert(memcmp(g, g808, 16) == 0, "%s parsed wrong", forms[i]);
	}
	cr_assert_str_eq(fmt(g808, VSX_GUID_BRACES), "{00000808-facb-11e6-bd58-64006a7986d3}");
	cr_assert_str_eq(fmt(g808, VSX_GUID_UPPER), "00000808-FACB-11E6-BD58-64006A7986D3");
	cr_assert_str_eq(fmt(g808, VSX_GUID_BRACES | VSX_GUID_UPPER),
			 "{00000808-FACB-11E6-BD58-64006A7986D3}");
}

/* The first field is the port in hex; ports are decimal everywhere else. */
Test(guid, port_is_the_first_field_in_hex)
{
	static const struct { uint32_t port; const char *text; } cases[] = {
		{ 0, "00000000-facb-11e6-bd58-64006a7986d3" },
		{ 1, "00000001-facb-11e6-bd58-64006a7986d3" },
		{ 22, "00000016-facb-11e6-bd58-64006a7986d3" },
		{ 1024, "00000400-facb-11e6-bd58-64006a7986d3" },
		{ 0x1234abcd, "1234abcd-facb-11e6-bd58-64006a7986d3" },
		{ 4294967295u, "ffffffff-facb-11e6-bd58-64006a7986d3" },
	};
	uint8_t g[16];
	uint32_t port;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		EQ(vsx_guid_from_port(cases[i].port, g), 0);
		cr_assert_str_eq(fmt(g, 0), cases[i].text);
		EQ(vsx_guid_parse(cases[i].text, g), 0);
		EQ(vsx_guid_to_port(g, &port), 0);
		EQ(port, cases[i].port);
	}
}

/* vsx_addr_parse (addr.c) and vsx_guid_* agree on every port form. */
Test(guid, agrees_with_addr_parse)
{
	static const uint32_t ports[] = { 0, 1, 2, 22, 1023, 1024, 2056, 65535, 65536,
					  0x7fffffff, 0x80000000u, 0xfffffffeu };
	char text[VSX_GUID_STRLEN + 16], back[VSX_ADDR_STRLEN];
	struct vsx_addr a;
	uint8_t g[16];
	size_t i;

	for (i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		vsx_guid_from_port(ports[i], g);
		snprintf(text, sizeof(text), "hvsock:%s", fmt(g, VSX_GUID_BRACES | VSX_GUID_UPPER));
		EQ(vsx_addr_parse(text, &a), 0);
		EQ(a.kind, VSX_ADDR_HVSOCK);
		EQ(a.port, ports[i]);
		cr_assert(memcmp(a.guid, g, 16) == 0);
		cr_assert_geq(vsx_addr_format(&a, back, sizeof(back)), 0);
		cr_assert_str_eq(back + 7, fmt(g, 0));
	}
}

Test(guid, bad_text_is_einval)
{
	static const char *const bad[] = {
		"", "2056", "0x808", "00000808-facb-11e6-bd58-64006a7986d",
		"00000808-facb-11e6-bd58-64006a7986d33", "00000808facb11e6bd5864006a7986d3",
		"00000808-facb-11e6-bd58-64006a7986dg", "{00000808-facb-11e6-bd58-64006a7986d3",
		"00000808-facb-11e6-bd58-64006a7986d3}", "{{00000808-facb-11e6-bd58-64006a7986d3}}",
		" 00000808-facb-11e6-bd58-64006a7986d3", "00000808-facb-11e6-bd58-64006a7986d3 ",
		"0000080-8facb-11e6-bd58-64006a7986d3", "00000808_facb_11e6_bd58_64006a7986d3",
		"00000808-facb-11e6-bd58 64006a7986d3", "------------------------------------",
	};
	uint8_t g[16], orig[16];
	size_t i;
	int rc;

	memset(orig, 0x5a, sizeof(orig));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(g, orig, 16);
		rc = vsx_guid_parse(bad[i], g);
		cr_assert_eq(rc, -EINVAL, "parse(\"%s\") = %d", bad[i], rc);
		cr_assert(memcmp(g, orig, 16) == 0, "parse(\"%s\") wrote on failure", bad[i]);
		cr_assert(strstr(vsx_strerror(rc), "8-4-4-4-12"), "%s", vsx_strerror(rc));
	}
	EQ(vsx_guid_parse(NULL, g), -EINVAL);
	EQ(vsx_guid_parse("00000808-facb-11e6-bd58-64006a7986d3", NULL), -EINVAL);
}

Test(guid, non_template_has_no_port)
{
	uint8_t g[16];
	uint32_t port = 77;
	int rc;

	memcpy(g, g808, 16);
	g[15] ^= 1;
	rc = vsx_guid_to_port(g, &port);
	EQ(rc, -EINVAL);
	EQ(port, 77);
	cr_assert(strstr(vsx_strerror(rc), "not a vsock service GUID"), "%s",
		  vsx_strerror(rc));
	memcpy(g, g808, 16);
	g[4] = 0xfb;
	EQ(vsx_guid_to_port(g, &port), -EINVAL);
}

Test(guid, format_errors)
{
	char small[36];

	EQ(vsx_guid_format(g808, 0, small, sizeof(small)), -ENOSPC);
	EQ(vsx_guid_format(g808, 4, small, sizeof(small)), -EINVAL);
	EQ(vsx_guid_format(NULL, 0, small, sizeof(small)), -EINVAL);
	EQ(vsx_guid_format(g808, 0, NULL, 10), -EINVAL);
	{
		char exact[37];

		EQ(vsx_guid_format(g808, 0, exact, sizeof(exact)), 36);
	}
}

Test(guid, well_known_vm_ids)
{
	static const char *const ids[] = {
		VSX_HV_VMID_WILDCARD, VSX_HV_VMID_CHILDREN, VSX_HV_VMID_LOOPBACK,
		VSX_HV_VMID_PARENT,
	};
	uint8_t g[16], t[16];
	uint32_t port;
	size_t i;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		EQ(vsx_guid_parse(ids[i], g), 0);
		cr_assert_str_eq(fmt(g, 0), ids[i]);
		EQ(vsx_guid_to_port(g, &port), -EINVAL); /* VM ids are not services */
	}
	EQ(vsx_guid_parse(VSX_HV_SERVICE_TEMPLATE, t), 0);
	EQ(vsx_guid_to_port(t, &port), 0);
	EQ(port, 0);
}

/* ---- vsxctl guid ---------------------------------------------------------- */

struct run {
	int status;
	char out[256], err[512];
};

static void slurp(int fd, char *buf, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
}

/* Run guid_main in a child with its stdout and stderr captured. */
static struct run vsxctl_guid(const char *arg)
{
	char *argv[] = { "guid", (char *)arg, NULL };
	int out[2], err[2], st;
	struct run r;
	pid_t pid;

	memset(&r, 0, sizeof(r));
	cr_assert_eq(pipe(out), 0);
	cr_assert_eq(pipe(err), 0);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		close(out[0]);
		close(err[0]);
		st = guid_main(arg ? 2 : 1, argv);
		fflush(NULL);
		_exit(st);
	}
	close(out[1]);
	close(err[1]);
	slurp(out[0], r.out, sizeof(r.out));
	slurp(err[0], r.err, sizeof(r.err));
	close(out[0]);
	close(err[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st));
	r.status = WEXITSTATUS(st);
	return r;
}

Test(vsxctl_guid, port_to_guid)
{
	struct run r = vsxctl_guid("2056");

	EQ(r.status, 0);
	cr_assert_str_eq(r.out, "00000808-facb-11e6-bd58-64006a7986d3\n");
	cr_assert_str_eq(r.err, "");
}

Test(vsxctl_guid, guid_to_port)
{
	struct run r = vsxctl_guid("{00000808-FACB-11E6-BD58-64006A7986D3}");

	EQ(r.status, 0);
	cr_assert_str_eq(r.out, "2056\n");
	r = vsxctl_guid("00000808-facb-11e6-bd58-64006a7986d3");
	EQ(r.status, 0);
	cr_assert_str_eq(r.out, "2056\n");
}

Test(vsxctl_guid, json)
{
	struct run r;

	opt_json = true;
	r = vsxctl_guid("2056");
	EQ(r.status, 0);
	cr_assert_str_eq(r.out, "{\"port\": 2056, \"guid\": "
			 "\"00000808-facb-11e6-bd58-64006a7986d3\"}\n");
	r = vsxctl_guid("{00000808-FACB-11E6-BD58-64006A7986D3}");
	EQ(r.status, 0);
	cr_assert_str_eq(r.out, "{\"port\": 2056, \"guid\": "
			 "\"00000808-facb-11e6-bd58-64006a7986d3\"}\n");
	r = vsxctl_guid("2056x");
	EQ(r.status, 1);
	cr_assert_str_eq(r.out, "");
	opt_json = false;
}

Test(vsxctl_guid, edges)
{
	struct run r = vsxctl_guid("0");

	cr_assert_str_eq(r.out, "00000000-facb-11e6-bd58-64006a7986d3\n");
	r = vsxctl_guid("4294967295");
	cr_assert_str_eq(r.out, "ffffffff-facb-11e6-bd58-64006a7986d3\n");
	r = vsxctl_guid("ffffffff-facb-11e6-bd58-64006a7986d3");
	cr_assert_str_eq(r.out, "4294967295\n");
	r = vsxctl_guid("22");
	cr_assert_str_eq(r.out, "00000016-facb-11e6-bd58-64006a7986d3\n");
}

Test(vsxctl_guid, rejects)
{
	static const char *const bad[] = {
		"4294967296", "-1", "0x808", "808h", "", " 2056", "2056 ",
		"00000808-facb-11e6-bd58-64006a7986d", "12345678901",
	};
	struct run r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = vsxctl_guid(bad[i]);
		cr_assert_eq(r.status, 1, "'%s': exit %d", bad[i], r.status);
		cr_assert_str_eq(r.out, "", "'%s' printed %s", bad[i], r.out);
		cr_assert(strstr(r.err, "neither a decimal port"), "'%s': %s", bad[i], r.err);
	}
	r = vsxctl_guid("99999999-1234-5678-9abc-def001234567");
	EQ(r.status, 1);
	cr_assert(strstr(r.err, "not a vsock service GUID"), "%s", r.err);
	r = vsxctl_guid(NULL);
	EQ(r.status, 2);
	cr_assert(strstr(r.err, "usage: vsxctl guid PORT|GUID"), "%s", r.err);
}
