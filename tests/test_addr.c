/*
 * Unit tests: address text (vsx_addr_parse / vsx_addr_format), error
 * messages (vsx_strerror), and the argument checks of the socket calls that
 * fail before any socket exists.
 *
 * Host-safe: no AF_VSOCK socket is ever opened here. vsx_connect/vsx_listen
 * are only given malformed addresses, bad options, or unix: addresses whose
 * path does not exist.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "common/check.h"

static const char *kind_name(int k)
{
	switch (k) {
	case VSX_ADDR_VSOCK: return "vsock";
	case VSX_ADDR_HVSOCK: return "hvsock";
	case VSX_ADDR_UNIX: return "unix";
	case VSX_ADDR_VM: return "vm";
	default: return "?";
	}
}

static void guid_text(const uint8_t g[16], char out[33])
{
	int i;

	for (i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g[i]);
}

/* Field-by-field equality with both sides printed. */
static void addr_eq(const struct vsx_addr *got, const struct vsx_addr *want,
		    const char *ctx)
{
	char gg[33], wg[33];

	cr_assert_eq(got->kind, want->kind, "%s: kind %d (%s), want %d (%s)", ctx,
		     got->kind, kind_name(got->kind), want->kind, kind_name(want->kind));
	cr_assert_eq(got->cid, want->cid, "%s: cid %u, want %u", ctx, got->cid,
		     want->cid);
	cr_assert_eq(got->port, want->port, "%s: port %u, want %u", ctx, got->port,
		     want->port);
	guid_text(got->guid, gg);
	guid_text(want->guid, wg);
	cr_assert_str_eq(gg, wg, "%s: guid %s, want %s", ctx, gg, wg);
	cr_assert_str_eq(got->path, want->path, "%s: path \"%s\", want \"%s\"", ctx,
			 got->path, want->path);
}

/* Parse @text, which must succeed; returns the address. */
static struct vsx_addr parse_ok(const char *text)
{
	struct vsx_addr a;
	int rc;

	memset(&a, 0x5a, sizeof(a));
	rc = vsx_addr_parse(text, &a);
	cr_assert_eq(rc, 0, "vsx_addr_parse(\"%s\") = %d (%s), want 0", text, rc,
		     vsx_strerror(rc));
	return a;
}

/* Format @a, which must succeed; checks the length and the NUL. */
static void format_ok(const struct vsx_addr *a, char *buf, size_t len, const char *ctx)
{
	int n;

	memset(buf, 0x7f, len);
	n = vsx_addr_format(a, buf, len);
	cr_assert(n >= 0, "%s: vsx_addr_format = %d (%s), want >= 0", ctx, n,
		  vsx_strerror(n));
	cr_assert((size_t)n < len, "%s: returned %d for a %zu-byte buffer", ctx, n, len);
	cr_assert_eq(buf[n], '\0', "%s: no NUL at buf[%d] (0x%02x)", ctx, n,
		     (unsigned char)buf[n]);
	cr_assert_eq(strlen(buf), (size_t)n, "%s: strlen %zu, returned %d", ctx,
		     strlen(buf), n);
}

/*
 * parse(text) gives @want, format gives @canon, and parse(canon) gives @want
 * again: the round trip.
 */
static void check_addr(const char *text, const struct vsx_addr *want, const char *canon)
{
	char buf[VSX_ADDR_STRLEN], ctx[300];
	struct vsx_addr a, b;

	snprintf(ctx, sizeof(ctx), "parse(\"%.200s\")", text);
	a = parse_ok(text);
	addr_eq(&a, want, ctx);
	format_ok(&a, buf, sizeof(buf), ctx);
	EQ_STR(buf, canon, ctx);
	b = parse_ok(buf);
	snprintf(ctx, sizeof(ctx), "round trip of \"%.200s\"", text);
	addr_eq(&b, &a, ctx);
}

static struct vsx_addr mk_vsock(uint32_t cid, uint32_t port)
{
	struct vsx_addr a;

	memset(&a, 0, sizeof(a));
	a.kind = VSX_ADDR_VSOCK;
	a.cid = cid;
	a.port = port;
	return a;
}

static struct vsx_addr mk_path(int kind, const char *path, uint32_t port)
{
	struct vsx_addr a;

	memset(&a, 0, sizeof(a));
	a.kind = kind;
	a.port = port;
	snprintf(a.path, sizeof(a.path), "%s", path);
	return a;
}

static struct vsx_addr mk_hv(const uint8_t g[16], uint32_t port)
{
	struct vsx_addr a;

	memset(&a, 0, sizeof(a));
	a.kind = VSX_ADDR_HVSOCK;
	a.cid = VSX_CID_HOST;
	a.port = port;
	memcpy(a.guid, g, 16);
	return a;
}

/* Parse must fail with -EINVAL, leave *out alone, and name the problem. */
static void check_bad(const char *text, const char *why)
{
	struct vsx_addr a, orig;
	char ctx[300];
	int rc;

	snprintf(ctx, sizeof(ctx), "parse(\"%.200s\")", text ? text : "(NULL)");
	memset(&a, 0xa5, sizeof(a));
	orig = a;
	rc = vsx_addr_parse(text, &a);
	EQ_INT(rc, -EINVAL, ctx);
	HAS_STR(vsx_strerror(rc), why, ctx);
	cr_assert(memcmp(&a, &orig, sizeof(a)) == 0, "%s: *out was modified on failure",
		  ctx);
}

/* ---- vsock: ------------------------------------------------------------ */

Test(addr_vsock, named_cids)
{
	struct vsx_addr w;

	w = mk_vsock(VSX_CID_HOST, 1234);
	check_addr("vsock:host:1234", &w, "vsock:2:1234");
	w = mk_vsock(VSX_CID_LOCAL, 1234);
	check_addr("vsock:local:1234", &w, "vsock:1:1234");
	w = mk_vsock(VSX_CID_ANY, 1234);
	check_addr("vsock:any:1234", &w, "vsock:any:1234");
	w = mk_vsock(VSX_CID_ANY, VSX_PORT_ANY);
	check_addr("vsock:any:any", &w, "vsock:any:any");
}

Test(addr_vsock, numbers)
{
	struct vsx_addr w;

	w = mk_vsock(0, 0);
	check_addr("vsock:0:0", &w, "vsock:0:0");
	w = mk_vsock(3, 5000);
	check_addr("vsock:3:5000", &w, "vsock:3:5000");
	w = mk_vsock(2, 1);
	check_addr("vsock:2:1", &w, "vsock:2:1");
	/* 4294967295 is VSX_CID_ANY / VSX_PORT_ANY, written back as "any". */
	w = mk_vsock(4294967295u, 4294967295u);
	check_addr("vsock:4294967295:4294967295", &w, "vsock:any:any");
	w = mk_vsock(4294967294u, 4294967294u);
	check_addr("vsock:4294967294:4294967294", &w, "vsock:4294967294:4294967294");
	w = mk_vsock(7, VSX_PORT_ANY);
	check_addr("vsock:7:any", &w, "vsock:7:any");
	/* Leading zeros are still decimal (not octal), within 10 digits. */
	w = mk_vsock(8, 10);
	check_addr("vsock:0000000008:010", &w, "vsock:8:10");
}

Test(addr_vsock, bad)
{
	check_bad("vsock:", "expected vsock:CID:PORT");
	check_bad("vsock:2", "expected vsock:CID:PORT");
	check_bad("vsock:host", "expected vsock:CID:PORT");
	check_bad("vsock::1", "CID");
	check_bad("vsock:2:", "port");
	check_bad("vsock::", "CID");
	/* out of range */
	check_bad("vsock:4294967296:1", "CID");
	check_bad("vsock:2:4294967296", "port");
	check_bad("vsock:99999999999:1", "CID");
	check_bad("vsock:2:99999999999", "port");
	check_bad("vsock:00000000001:1", "CID"); /* 11 digits */
	check_bad("vsock:18446744073709551617:1", "CID"); /* wraps a u64 */
	check_bad("vsock:2:18446744073709551617", "port");
	/* signs, spaces, hex, junk */
	check_bad("vsock:+2:1", "CID");
	check_bad("vsock:-1:1", "CID");
	check_bad("vsock:2:+1", "port");
	check_bad("vsock:2:-1", "port");
	check_bad("vsock: 2:1", "CID");
	check_bad("vsock:2 :1", "CID");
	check_bad("vsock:2: 1", "port");
	check_bad("vsock:2:1 ", "port");
	check_bad("vsock:2:1\n", "port");
	check_bad("vsock:0x2:1", "CID");
	check_bad("vsock:2:0x10", "port");
	check_bad("vsock:2:1x", "port");
	check_bad("vsock:2:1:", "port");
	check_bad("vsock:2:1:3", "port");
	check_bad("vsock:Host:1", "CID");
	check_bad("vsock:hosts:1", "CID");
	check_bad("vsock:HOST:1", "CID");
	check_bad("vsock:2:ANY", "port");
	check_bad("vsock:2:anyx", "port");
	check_bad("vsock:2.0:1", "CID");
	check_bad("vsock:1e3:1", "CID");
	/* the port error names the port text */
	check_bad("vsock:2:12ab", "'12ab'");
}

/* ---- hvsock: ----------------------------------------------------------- */

static const uint8_t g808[16] = {
	0x00, 0x00, 0x08, 0x08, 0xfa, 0xcb, 0x11, 0xe6,
	0xbd, 0x58, 0x64, 0x00, 0x6a, 0x79, 0x86, 0xd3,
};

Test(addr_hvsock, template_port)
{
	const char *canon = "hvsock:00000808-facb-11e6-bd58-64006a7986d3";
	struct vsx_addr w = mk_hv(g808, 2056);

	check_addr("hvsock:00000808-facb-11e6-bd58-64006a7986d3", &w, canon);
	check_addr("hvsock:{00000808-facb-11e6-bd58-64006a7986d3}", &w, canon);
	check_addr("hvsock:00000808-FACB-11E6-BD58-64006A7986D3", &w, canon);
	check_addr("hvsock:{00000808-FaCb-11e6-Bd58-64006a7986D3}", &w, canon);
}

Test(addr_hvsock, template_edges)
{
	uint8_t g[16];
	struct vsx_addr w;

	memcpy(g, g808, 16);
	memset(g, 0, 4);
	w = mk_hv(g, 0);
	check_addr("hvsock:00000000-facb-11e6-bd58-64006a7986d3", &w,
		   "hvsock:00000000-facb-11e6-bd58-64006a7986d3");
	memset(g, 0xff, 4);
	w = mk_hv(g, 0xffffffffu);
	check_addr("hvsock:FFFFFFFF-facb-11e6-bd58-64006a7986d3", &w,
		   "hvsock:ffffffff-facb-11e6-bd58-64006a7986d3");
	g[0] = 0x12; g[1] = 0x34; g[2] = 0xab; g[3] = 0xcd;
	w = mk_hv(g, 0x1234abcdu);
	check_addr("hvsock:1234abcd-facb-11e6-bd58-64006a7986d3", &w,
		   "hvsock:1234abcd-facb-11e6-bd58-64006a7986d3");
	/* 22 = 0x16: the port is the hex first field, decimal elsewhere */
	g[0] = 0; g[1] = 0; g[2] = 0; g[3] = 0x16;
	w = mk_hv(g, 22);
	check_addr("hvsock:00000016-facb-11e6-bd58-64006a7986d3", &w,
		   "hvsock:00000016-facb-11e6-bd58-64006a7986d3");
}

Test(addr_hvsock, non_template)
{
	static const uint8_t other[16] = {
		0x99, 0x99, 0x99, 0x99, 0x12, 0x34, 0x56, 0x78,
		0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67,
	};
	uint8_t g[16];
	struct vsx_addr w;

	w = mk_hv(other, VSX_PORT_ANY);
	check_addr("hvsock:99999999-1234-5678-9ABC-DEF001234567", &w,
		   "hvsock:99999999-1234-5678-9abc-def001234567");
	/* one byte off the template anywhere in the tail: not a port */
	memcpy(g, g808, 16);
	g[15] = 0xd4;
	w = mk_hv(g, VSX_PORT_ANY);
	check_addr("hvsock:00000808-facb-11e6-bd58-64006a7986d4", &w,
		   "hvsock:00000808-facb-11e6-bd58-64006a7986d4");
	memcpy(g, g808, 16);
	g[4] = 0xfb;
	w = mk_hv(g, VSX_PORT_ANY);
	check_addr("hvsock:00000808-fbcb-11e6-bd58-64006a7986d3", &w,
		   "hvsock:00000808-fbcb-11e6-bd58-64006a7986d3");
}

Test(addr_hvsock, bad)
{
	const char *why = "GUID";

	check_bad("hvsock:", why);
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986d", why);    /* 35 */
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986d33", why);  /* 37 */
	check_bad("hvsock:00000808facb11e6bd5864006a7986d3", why);       /* no dashes */
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986dg", why);   /* bad hex */
	check_bad("hvsock:0000080z-facb-11e6-bd58-64006a7986d3", why);
	check_bad("hvsock:00000808-facb-11e6-bd58 64006a7986d3", why);   /* space */
	check_bad("hvsock:0000080-8facb-11e6-bd58-64006a7986d3", why);   /* dash moved */
	check_bad("hvsock:00000808-fac-b11e6-bd58-64006a7986d3", why);
	check_bad("hvsock:00000808-facb-11e-6bd58-64006a7986d3", why);
	check_bad("hvsock:00000808-facb-11e6-bd5-864006a7986d3", why);
	check_bad("hvsock:00000808_facb_11e6_bd58_64006a7986d3", why);
	check_bad("hvsock:-00000808-facb-11e6-bd58-64006a7986d", why);
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986d3-", why);
	check_bad("hvsock:{00000808-facb-11e6-bd58-64006a7986d3", why);  /* one brace */
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986d3}", why);
	check_bad("hvsock:(00000808-facb-11e6-bd58-64006a7986d3)", why);
	check_bad("hvsock:}00000808-facb-11e6-bd58-64006a7986d3{", why);
	check_bad("hvsock:{{00000808-facb-11e6-bd58-64006a7986d3}}", why);
	check_bad("hvsock:{00000808-facb-11e6-bd58-64006a7986d3}x", why);
	check_bad("hvsock: 00000808-facb-11e6-bd58-64006a7986d3", why);
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986d3 ", why);
	check_bad("hvsock:0x000808-facb-11e6-bd58-64006a7986d3", why);
	check_bad("hvsock:2056", why);
	check_bad("hvsock:00000808-facb-11e6-bd58-64006a7986d3:1", why);
	check_bad("hvsock:------------------------------------", why);
}

/* ---- unix: ------------------------------------------------------------- */

Test(addr_unix, basic)
{
	struct vsx_addr w;

	w = mk_path(VSX_ADDR_UNIX, "/run/vm3.vsock", 1234);
	check_addr("unix:/run/vm3.vsock:1234", &w, "unix:/run/vm3.vsock:1234");
	w = mk_path(VSX_ADDR_UNIX, "rel/path", 0);
	check_addr("unix:rel/path:0", &w, "unix:rel/path:0");
	w = mk_path(VSX_ADDR_UNIX, "/s", 4294967294u);
	check_addr("unix:/s:4294967294", &w, "unix:/s:4294967294");
	w = mk_path(VSX_ADDR_UNIX, "/s", VSX_PORT_ANY);
	check_addr("unix:/s:any", &w, "unix:/s:any");
	check_addr("unix:/s:4294967295", &w, "unix:/s:any");
	w = mk_path(VSX_ADDR_UNIX, "/with space/and\ttab", 5);
	check_addr("unix:/with space/and\ttab:5", &w, "unix:/with space/and\ttab:5");
}

Test(addr_unix, colon_in_path)
{
	struct vsx_addr w;

	w = mk_path(VSX_ADDR_UNIX, "/tmp/a:b", 5);
	check_addr("unix:/tmp/a:b:5", &w, "unix:/tmp/a:b:5");
	w = mk_path(VSX_ADDR_UNIX, "/tmp/a:1:2", 3);
	check_addr("unix:/tmp/a:1:2:3", &w, "unix:/tmp/a:1:2:3");
	w = mk_path(VSX_ADDR_UNIX, ":", 7);
	check_addr("unix:::7", &w, "unix:::7");
	w = mk_path(VSX_ADDR_UNIX, "unix:/x", 9);
	check_addr("unix:unix:/x:9", &w, "unix:unix:/x:9");
	w = mk_path(VSX_ADDR_UNIX, "/p:", 1);
	check_addr("unix:/p::1", &w, "unix:/p::1");
}

static void fill_path(char *buf, size_t n, char c)
{
	memset(buf, c, n);
	buf[0] = '/';
	buf[n] = '\0';
}

Test(addr_unix, path_limit)
{
	char path[200], text[300];
	struct vsx_addr w;

	/* 107 bytes: the longest that fits sun_path with its NUL */
	fill_path(path, VSX_PATH_MAX - 1, 'p');
	snprintf(text, sizeof(text), "unix:%s:42", path);
	w = mk_path(VSX_ADDR_UNIX, path, 42);
	check_addr(text, &w, text);
	/* 107 bytes with colons inside, and the largest port */
	memcpy(path + 10, ":x:", 3);
	snprintf(text, sizeof(text), "unix:%s:4294967294", path);
	w = mk_path(VSX_ADDR_UNIX, path, 4294967294u);
	check_addr(text, &w, text);

	/* 108 bytes: one too many */
	fill_path(path, VSX_PATH_MAX, 'p');
	snprintf(text, sizeof(text), "unix:%s:42", path);
	check_bad(text, "limit is 107");
	fill_path(path, 150, 'q');
	snprintf(text, sizeof(text), "unix:%s:42", path);
	check_bad(text, "path is 150 bytes");
}

Test(addr_unix, bad)
{
	check_bad("unix:", "expected unix:PATH:PORT");
	check_bad("unix:/tmp/sock", "expected unix:PATH:PORT");
	check_bad("unix::1", "empty path");
	check_bad("unix::", "empty path");
	check_bad("unix:/tmp/s:", "port");
	check_bad("unix:/tmp/s:x", "port");
	check_bad("unix:/tmp/s:-1", "port");
	check_bad("unix:/tmp/s:+1", "port");
	check_bad("unix:/tmp/s: 1", "port");
	check_bad("unix:/tmp/s:1 ", "port");
	check_bad("unix:/tmp/s:0x1", "port");
	check_bad("unix:/tmp/s:4294967296", "port");
	check_bad("unix:/tmp/s:99999999999", "port");
	check_bad("unix:/tmp/a:b", "port");   /* the last ':' is the port */
	check_bad("unix:/tmp/s:1:", "port");
}

/* ---- vm: --------------------------------------------------------------- */

Test(addr_vm, names)
{
	char name[VSX_NAME_MAX + 8], text[200];
	struct vsx_addr w;

	w = mk_path(VSX_ADDR_VM, "guest1", 22);
	check_addr("vm:guest1:22", &w, "vm:guest1:22");
	w = mk_path(VSX_ADDR_VM, "A-z_0.9", 0);
	check_addr("vm:A-z_0.9:0", &w, "vm:A-z_0.9:0");
	w = mk_path(VSX_ADDR_VM, "x", VSX_PORT_ANY);
	check_addr("vm:x:any", &w, "vm:x:any");
	w = mk_path(VSX_ADDR_VM, "..", 1);
	check_addr("vm:..:1", &w, "vm:..:1");
	/* 64 characters: the longest name (VSX_NAME_MAX, the NUL not counted) */
	memset(name, 'n', VSX_NAME_MAX);
	name[VSX_NAME_MAX] = '\0';
	snprintf(text, sizeof(text), "vm:%s:4294967294", name);
	w = mk_path(VSX_ADDR_VM, name, 4294967294u);
	check_addr(text, &w, text);
}

Test(addr_vm, bad)
{
	char name[VSX_NAME_MAX + 8], text[200];
	const char *why = "a name is 1 to 64 of [A-Za-z0-9._-]";

	check_bad("vm:", "expected vm:NAME:PORT");
	check_bad("vm:guest", "expected vm:NAME:PORT");
	check_bad("vm::1", "empty name");
	check_bad("vm:guest:", "port");
	check_bad("vm:guest:x", "port");
	check_bad("vm:guest:-1", "port");
	check_bad("vm:guest:4294967296", "port");
	check_bad("vm:a b:1", why);
	check_bad("vm:a/b:1", why);
	check_bad("vm:a:b:1", why);
	check_bad("vm:a\\b:1", why);
	check_bad("vm:a\tb:1", why);
	check_bad("vm:a\nb:1", why);
	check_bad("vm:gu\xc3\xa9st:1", why);
	check_bad("vm:a+b:1", why);
	check_bad("vm:a@b:1", why);
	check_bad("vm:*:1", why);
	check_bad("vm: guest:1", why);
	/* 65 characters: one too many */
	memset(name, 'n', VSX_NAME_MAX + 1);
	name[VSX_NAME_MAX + 1] = '\0';
	snprintf(text, sizeof(text), "vm:%s:1", name);
	check_bad(text, why);
}

/* ---- kinds and junk ------------------------------------------------------ */

Test(addr_any, bad_kinds_and_junk)
{
	char big[10000];

	check_bad(NULL, "NULL");
	check_bad("", "unknown kind");
	check_bad("junk", "unknown kind");
	check_bad(":", "unknown kind");
	check_bad("vsock", "unknown kind");
	check_bad("VSOCK:2:1", "unknown kind");
	check_bad("Unix:/s:1", "unknown kind");
	check_bad(" vsock:2:1", "unknown kind");
	check_bad("vsockx:2:1", "unknown kind");
	check_bad("tcp:127.0.0.1:80", "unknown kind");
	check_bad("hv:00000808-facb-11e6-bd58-64006a7986d3", "unknown kind");
	check_bad("vsock\n:2:1", "unknown kind");
	check_bad("\xff\xfe:1:2", "unknown kind");
	/* a very long text is rejected with a bounded message */
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	check_bad(big, "unknown kind");
	cr_assert(strlen(vsx_strerror(-EINVAL)) < 400, "message of %zu bytes",
		  strlen(vsx_strerror(-EINVAL)));
	memcpy(big, "vsock:", 6);
	check_bad(big, "expected vsock:CID:PORT");
	memcpy(big, "unix:", 5);
	big[100] = ':';
	check_bad(big, "port");
}

Test(addr_any, null_out)
{
	int rc = vsx_addr_parse("vsock:2:1", NULL);

	EQ_INT(rc, -EINVAL, "parse(text, NULL)");
	HAS_STR(vsx_strerror(rc), "NULL", "parse(text, NULL)");
}

/* ---- vsx_addr_format ----------------------------------------------------- */

Test(addr_format, short_buffer)
{
	struct vsx_addr a = mk_vsock(3, 5000);
	const char *text = "vsock:3:5000";
	size_t n = strlen(text), len;
	char buf[64];
	int rc;

	/* exactly enough: text plus NUL */
	format_ok(&a, buf, n + 1, "len = strlen + 1");
	EQ_STR(buf, text, "len = strlen + 1");
	for (len = 0; len <= n; len++) {
		char ctx[64];

		snprintf(ctx, sizeof(ctx), "format into %zu bytes", len);
		memset(buf, 0x7f, sizeof(buf));
		rc = vsx_addr_format(&a, buf, len);
		EQ_INT(rc, -ENOSPC, ctx);
		HAS_STR(vsx_strerror(rc), "do not fit", ctx);
		/* nothing beyond @len is ever touched */
		cr_assert_eq((unsigned char)buf[len], 0x7f, "%s: wrote past the buffer",
			     ctx);
		/* what is left is either untouched or a terminated string */
		if (len && (unsigned char)buf[0] != 0x7f)
			cr_assert(memchr(buf, '\0', len), "%s: unterminated output", ctx);
	}
}

Test(addr_format, strlen_always_enough)
{
	char path[VSX_PATH_MAX], name[VSX_NAME_MAX + 1], buf[VSX_ADDR_STRLEN];
	struct vsx_addr worst[5];
	size_t i;

	fill_path(path, VSX_PATH_MAX - 1, 'w');
	memset(name, 'n', VSX_NAME_MAX);
	name[VSX_NAME_MAX] = '\0';
	worst[0] = mk_vsock(4294967294u, 4294967294u);
	worst[1] = mk_hv(g808, 2056);
	worst[2] = mk_path(VSX_ADDR_UNIX, path, 4294967294u);
	worst[3] = mk_path(VSX_ADDR_VM, name, 4294967294u);
	worst[4] = mk_path(VSX_ADDR_UNIX, path, 0);
	for (i = 0; i < sizeof(worst) / sizeof(worst[0]); i++) {
		char ctx[32];
		struct vsx_addr b;

		snprintf(ctx, sizeof(ctx), "worst case %zu", i);
		format_ok(&worst[i], buf, sizeof(buf), ctx);
		b = parse_ok(buf);
		addr_eq(&b, &worst[i], ctx);
	}
	/* the 107-byte path with the longest port: exact text */
	format_ok(&worst[2], buf, sizeof(buf), "unix worst");
	EQ_INT(strlen(buf), 5 + (VSX_PATH_MAX - 1) + 1 + 10, "unix worst");
}

/* Built structs, not from parse: parse(format(x)) == x. */
Test(addr_format, round_trip_structs)
{
	static const uint32_t nums[] = { 0, 1, 2, 3, 1024, 65535, 65536,
					 2147483647u, 2147483648u, 4294967294u,
					 4294967295u };
	char buf[VSX_ADDR_STRLEN], ctx[64];
	struct vsx_addr x, y;
	size_t i, j;
	uint8_t g[16];

	for (i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		for (j = 0; j < sizeof(nums) / sizeof(nums[0]); j++) {
			snprintf(ctx, sizeof(ctx), "vsock %u:%u", nums[i], nums[j]);
			x = mk_vsock(nums[i], nums[j]);
			format_ok(&x, buf, sizeof(buf), ctx);
			y = parse_ok(buf);
			addr_eq(&y, &x, ctx);
		}
		snprintf(ctx, sizeof(ctx), "unix port %u", nums[i]);
		x = mk_path(VSX_ADDR_UNIX, "/a:b/c", nums[i]);
		format_ok(&x, buf, sizeof(buf), ctx);
		y = parse_ok(buf);
		addr_eq(&y, &x, ctx);
		snprintf(ctx, sizeof(ctx), "vm port %u", nums[i]);
		x = mk_path(VSX_ADDR_VM, "vm-1", nums[i]);
		format_ok(&x, buf, sizeof(buf), ctx);
		y = parse_ok(buf);
		addr_eq(&y, &x, ctx);
		snprintf(ctx, sizeof(ctx), "hvsock port %u", nums[i]);
		memcpy(g, g808, 16);
		g[0] = (uint8_t)(nums[i] >> 24);
		g[1] = (uint8_t)(nums[i] >> 16);
		g[2] = (uint8_t)(nums[i] >> 8);
		g[3] = (uint8_t)nums[i];
		x = mk_hv(g, nums[i]);
		format_ok(&x, buf, sizeof(buf), ctx);
		y = parse_ok(buf);
		addr_eq(&y, &x, ctx);
	}
	/* every GUID byte value survives */
	for (i = 0; i < 256; i++) {
		for (j = 0; j < 16; j++)
			g[j] = (uint8_t)(i + j * 17);
		snprintf(ctx, sizeof(ctx), "guid seed %zu", i);
		x = mk_hv(g, VSX_PORT_ANY);
		format_ok(&x, buf, sizeof(buf), ctx);
		y = parse_ok(buf);
		addr_eq(&y, &x, ctx);
	}
}

Test(addr_format, bad_addresses)
{
	char buf[VSX_ADDR_STRLEN];
	struct vsx_addr a;
	int rc;

	a = mk_vsock(2, 1);
	rc = vsx_addr_format(NULL, buf, sizeof(buf));
	EQ_INT(rc, -EINVAL, "format(NULL)");
	HAS_STR(vsx_strerror(rc), "NULL", "format(NULL)");
	rc = vsx_addr_format(&a, NULL, 10);
	EQ_INT(rc, -EINVAL, "format(a, NULL)");

	a.kind = 0;
	rc = vsx_addr_format(&a, buf, sizeof(buf));
	EQ_INT(rc, -EINVAL, "kind 0");
	HAS_STR(vsx_strerror(rc), "unknown kind 0", "kind 0");
	a.kind = 5;
	EQ_INT(vsx_addr_format(&a, buf, sizeof(buf)), -EINVAL, "kind 5");
	a.kind = -1;
	EQ_INT(vsx_addr_format(&a, buf, sizeof(buf)), -EINVAL, "kind -1");

	a = mk_path(VSX_ADDR_UNIX, "", 1);
	rc = vsx_addr_format(&a, buf, sizeof(buf));
	EQ_INT(rc, -EINVAL, "unix, empty path");
	HAS_STR(vsx_strerror(rc), "bad path", "unix, empty path");
	a = mk_path(VSX_ADDR_VM, "", 1);
	EQ_INT(vsx_addr_format(&a, buf, sizeof(buf)), -EINVAL, "vm, empty name");
	/* a path with no NUL in it */
	a = mk_path(VSX_ADDR_UNIX, "/x", 1);
	memset(a.path, 'p', sizeof(a.path));
	EQ_INT(vsx_addr_format(&a, buf, sizeof(buf)), -EINVAL, "unix, unterminated path");
	/* names parse would refuse are refused here too (round trip) */
	a = mk_path(VSX_ADDR_VM, "a b", 1);
	rc = vsx_addr_format(&a, buf, sizeof(buf));
	EQ_INT(rc, -EINVAL, "vm, name with a space");
	a = mk_path(VSX_ADDR_VM, "a:b", 1);
	EQ_INT(vsx_addr_format(&a, buf, sizeof(buf)), -EINVAL, "vm, name with ':'");
	a = mk_path(VSX_ADDR_VM, "x", 1);
	memset(a.path, 'n', VSX_NAME_MAX + 1);
	a.path[VSX_NAME_MAX + 1] = '\0';
	EQ_INT(vsx_addr_format(&a, buf, sizeof(buf)), -EINVAL, "vm, 65-char name");
}

/* ---- vsx_strerror -------------------------------------------------------- */

Test(strerror, plain_errnos)
{
	static const int errs[] = { EPERM, ENOENT, EINTR, EINVAL, EPIPE, EAGAIN,
				    ENOSPC, ENODEV, EPROTO, ETIMEDOUT, ECONNREFUSED,
				    ECONNRESET, EADDRINUSE, ENETUNREACH, EOPNOTSUPP,
				    ENAMETOOLONG, ESOCKTNOSUPPORT, ENOMEM };
	char ctx[64];
	size_t i;

	vsx_addr_parse("vsock:2:1", &(struct vsx_addr){ 0 }); /* clears any detail */
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		char want[256];

		snprintf(want, sizeof(want), "%s", strerror(errs[i]));
		snprintf(ctx, sizeof(ctx), "vsx_strerror(-%d)", errs[i]);
		EQ_STR(vsx_strerror(-errs[i]), want, ctx);
		snprintf(ctx, sizeof(ctx), "vsx_strerror(+%d)", errs[i]);
		EQ_STR(vsx_strerror(errs[i]), want, ctx);
	}
	EQ_STR(vsx_strerror(0), "Success", "vsx_strerror(0)");
	EQ_STR(vsx_strerror(-9999), "Unknown error 9999", "vsx_strerror(-9999)");
	EQ_STR(vsx_strerror(9999), "Unknown error 9999", "vsx_strerror(9999)");
	/* out of contract, but must not crash (or trip UBSan) */
	cr_assert(vsx_strerror(INT_MIN) != NULL, "vsx_strerror(INT_MIN) is NULL");
	cr_assert(vsx_strerror(INT_MAX) != NULL, "vsx_strerror(INT_MAX) is NULL");
}

Test(strerror, detail_belongs_to_the_last_failure)
{
	struct vsx_addr a;
	int rc;

	rc = vsx_addr_parse("vsock:2:nope", &a);
	EQ_INT(rc, -EINVAL, "bad parse");
	HAS_STR(vsx_strerror(-EINVAL), "'nope'", "detail after the failure");
	/* asked twice: still there */
	HAS_STR(vsx_strerror(-EINVAL), "'nope'", "detail asked twice");
	/* another errno: the plain message, not this failure's detail */
	EQ_STR(vsx_strerror(-ENOENT), strerror(ENOENT), "other errno");
	/* a successful call clears the detail */
	rc = vsx_addr_parse("vsock:2:1", &a);
	EQ_INT(rc, 0, "good parse");
	EQ_STR(vsx_strerror(-EINVAL), strerror(EINVAL), "after a success");
	/* a new failure replaces the old detail */
	vsx_addr_parse("vsock:2:nope", &a);
	vsx_addr_parse("vm:a b:1", &a);
	HAS_STR(vsx_strerror(-EINVAL), "vm address", "latest failure");
	cr_assert(!strstr(vsx_strerror(-EINVAL), "nope"), "old detail kept: %s",
		  vsx_strerror(-EINVAL));
}

static void *other_thread(void *arg)
{
	char *out = arg;

	/* no failure in this thread: the generic text */
	snprintf(out, 256, "%s", vsx_strerror(-EINVAL));
	return NULL;
}

Test(strerror, detail_is_per_thread)
{
	char other[256];
	struct vsx_addr a;
	pthread_t th;

	EQ_INT(vsx_addr_parse("junk", &a), -EINVAL, "bad parse");
	EQ_INT(pthread_create(&th, NULL, other_thread, other), 0, "pthread_create");
	pthread_join(th, NULL);
	EQ_STR(other, strerror(EINVAL), "other thread");
	HAS_STR(vsx_strerror(-EINVAL), "unknown kind", "this thread");
}

/* ---- argument checks of the socket calls --------------------------------- */

/* A unix: address whose path cannot exist: nothing can be reached. */
#define NOWHERE "unix:/nonexistent-vsx-test-dir/sock:5"

typedef int (*open_fn)(const char *, const struct vsx_opts *, vsx_sock **);

static void check_open_fails(open_fn fn, const char *fname, const char *addr,
			     const struct vsx_opts *o, int want, const char *why)
{
	vsx_sock *s = (vsx_sock *)&s; /* must be reset to NULL */
	char ctx[300];
	int rc;

	snprintf(ctx, sizeof(ctx), "%s(\"%.200s\")", fname, addr ? addr : "(NULL)");
	rc = fn(addr, o, &s);
	EQ_INT(rc, want, ctx);
	cr_assert_null(s, "%s: *out = %p, want NULL", ctx, (void *)s);
	if (why)
		HAS_STR(vsx_strerror(rc), why, ctx);
}

static void check_both(const char *addr, const struct vsx_opts *o, int want,
		       const char *why)
{
	check_open_fails(vsx_connect, "vsx_connect", addr, o, want, why);
	check_open_fails(vsx_listen, "vsx_listen", addr, o, want, why);
}

Test(api, malformed_addresses)
{
	check_both(NULL, NULL, -EINVAL, "NULL");
	check_both("", NULL, -EINVAL, "unknown kind");
	check_both("junk", NULL, -EINVAL, "unknown kind");
	/* malformed vsock: text fails in parse, before any socket or probe */
	check_both("vsock:2", NULL, -EINVAL, "expected vsock:CID:PORT");
	check_both("vsock:host:99999999999", NULL, -EINVAL, "port");
	check_both("vsock:-1:1", NULL, -EINVAL, "CID");
	check_both("vsock:2:1x", NULL, -EINVAL, "port");
	check_both("hvsock:nope", NULL, -EINVAL, "GUID");
	check_both("unix::1", NULL, -EINVAL, "empty path");
	check_both("vm:a b:1", NULL, -EINVAL, "name");
	EQ_INT(vsx_connect(NOWHERE, NULL, NULL), -EINVAL, "vsx_connect(out NULL)");
	EQ_INT(vsx_listen(NOWHERE, NULL, NULL), -EINVAL, "vsx_listen(out NULL)");
}

Test(api, bad_options)
{
	struct vsx_opts o;

	memset(&o, 0, sizeof(o));
	o.connect_timeout_ms = -1;
	check_both(NOWHERE, &o, -EINVAL, "negative connect timeout");
	memset(&o, 0, sizeof(o));
	o.connect_timeout_ms = INT_MIN;
	check_both(NOWHERE, &o, -EINVAL, "timeout");
	memset(&o, 0, sizeof(o));
	o.backlog = -1;
	check_both(NOWHERE, &o, -EINVAL, "backlog");
	memset(&o, 0, sizeof(o));
	o.flags = 0x40000000;
	check_both(NOWHERE, &o, -EINVAL, "unknown flags 0x40000000");
	o.flags = VSX_O_NONBLOCK | 0x100;
	check_both(NOWHERE, &o, -EINVAL, "unknown flags");
	o.flags = -1;
	check_both(NOWHERE, &o, -EINVAL, "unknown flags");
	memset(&o, 0, sizeof(o));
	o.reserved[0] = 1;
	check_both(NOWHERE, &o, -EINVAL, "reserved");
	memset(&o, 0, sizeof(o));
	o.reserved[sizeof(o.reserved) / sizeof(o.reserved[0]) - 1] = 0xdead;
	check_both(NOWHERE, &o, -EINVAL, "reserved");
	/* bad options are refused even for a malformed vsock: address */
	memset(&o, 0, sizeof(o));
	o.connect_timeout_ms = -5;
	check_both("vsock:2", &o, -EINVAL, NULL);
}

Test(api, transport_names)
{
	struct vsx_opts o;

	memset(&o, 0, sizeof(o));
	o.transport = "no-such-transport";
	check_both(NOWHERE, &o, -EINVAL, "no transport named 'no-such-transport'");
	o.transport = "";
	check_both(NOWHERE, &o, -EINVAL, "no transport named");
	o.transport = "HYBRID";
	check_both(NOWHERE, &o, -EINVAL, "no transport named");
	/* a real transport that does not serve unix: addresses */
	o.transport = "virtio";
	check_both(NOWHERE, &o, -ENODEV, "no transport");
	/* the right one, explicitly: reaches the (missing) path */
	o.transport = "hybrid";
	check_open_fails(vsx_connect, "vsx_connect", NOWHERE, &o, -ECONNREFUSED,
			 "/nonexistent-vsx-test-dir/sock");
}

Test(api, null_sockets)
{
	struct vsx_info info;
	vsx_sock *s = NULL;
	size_t n;
	char c;

	EQ_INT(vsx_accept(NULL, &s), -EINVAL, "vsx_accept(NULL)");
	EQ_INT(vsx_send(NULL, "x", 1), -EINVAL, "vsx_send(NULL)");
	EQ_INT(vsx_recv(NULL, &c, 1), -EINVAL, "vsx_recv(NULL)");
	EQ_INT(vsx_shutdown(NULL, 1), -EINVAL, "vsx_shutdown(NULL)");
	EQ_INT(vsx_close(NULL), 0, "vsx_close(NULL)");
	EQ_INT(vsx_fd(NULL), -EINVAL, "vsx_fd(NULL)");
	EQ_INT(vsx_set_buffer(NULL, VSX_RX, 4096), -EINVAL, "vsx_set_buffer(NULL)");
	EQ_INT(vsx_get_buffer(NULL, VSX_RX, &n), -EINVAL, "vsx_get_buffer(NULL)");
	EQ_INT(vsx_info(NULL, &info), -EINVAL, "vsx_info(NULL)");
}

Test(api, version)
{
	const char *v = vsx_version();
	unsigned a, b, c;
	char tail;

	cr_assert_not_null(v, "vsx_version() is NULL");
	cr_assert_eq(sscanf(v, "%u.%u.%u%c", &a, &b, &c, &tail), 3,
		     "vsx_version() = \"%s\", want MAJOR.MINOR.PATCH", v);
	EQ_STR(v, PACKAGE_VERSION, "vsx_version");
}
