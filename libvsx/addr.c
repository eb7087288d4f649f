/*
 * Address text: vsock:CID:PORT, hvsock:GUID, unix:PATH:PORT, vm:NAME:PORT.
 *
 * Numbers are strict decimal (no sign, no spaces, no hex) and range-checked;
 * every rejection says which part was wrong through vsx__err().
 */
#include <stdio.h>
#include <string.h>

#include "vsx-int.h"

static int parse_u32(const char *s, size_t n, uint32_t *out)
{
	uint64_t v;

	if (n > 10 || vsx__parse_dec(s, n, UINT32_MAX, &v) < 0)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int word_is(const char *s, size_t n, const char *w)
{
	return strlen(w) == n && memcmp(s, w, n) == 0;
}

static int parse_port(const char *what, const char *s, size_t n, uint32_t *out)
{
	if (word_is(s, n, "any")) {
		*out = VSX_PORT_ANY;
		return 0;
	}
	if (parse_u32(s, n, out) < 0)
		return vsx__err(-EINVAL, "%s: port '%.*s' is not a decimal number "
				"from 0 to 4294967295", what, (int)(n > 32 ? 32 : n), s);
	return 0;
}

VSX_EXPORT int vsx_addr_parse(const char *text, struct vsx_addr *out)
{
	const char *rest, *colon;
	struct vsx_addr a;

	vsx__err_clear();
	if (!text || !out)
		return vsx__err(-EINVAL, "address: NULL argument");
	memset(&a, 0, sizeof(a));

	if (strncmp(text, "vsock:", 6) == 0) {
		rest = text + 6;
		colon = strchr(rest, ':');
		if (!colon)
			return vsx__err(-EINVAL, "vsock address '%.64s': expected vsock:CID:PORT", text);
		a.kind = VSX_ADDR_VSOCK;
		if (word_is(rest, (size_t)(colon - rest), "host"))
			a.cid = VSX_CID_HOST;
		else if (word_is(rest, (size_t)(colon - rest), "local"))
			a.cid = VSX_CID_LOCAL;
		else if (word_is(rest, (size_t)(colon - rest), "any"))
			a.cid = VSX_CID_ANY;
		else if (parse_u32(rest, (size_t)(colon - rest), &a.cid) < 0)
			return vsx__err(-EINVAL, "vsock address '%.64s': CID must be host, local, any "
					"or a decimal number from 0 to 4294967295", text);
		if (parse_port("vsock address", colon + 1, strlen(colon + 1), &a.port) < 0)
			return -EINVAL;
	} else if (strncmp(text, "hvsock:", 7) == 0) {
		a.kind = VSX_ADDR_HVSOCK;
		if (vsx_guid_parse(text + 7, a.guid) < 0)
			return vsx__err(-EINVAL, "hvsock address '%.64s': expected a service GUID "
					"like 00000808-facb-11e6-bd58-64006a7986d3", text);
		if (vsx_guid_to_port(a.guid, &a.port) < 0)
			a.port = VSX_PORT_ANY; /* not of the template: no port */
		vsx__err_clear();
		a.cid = VSX_CID_HOST;
	} else if (strncmp(text, "unix:", 5) == 0 || strncmp(text, "vm:", 3) == 0) {
		int is_unix = text[0] == 'u';
		const char *what = is_unix ? "unix address" : "vm address";
		size_t plen;

		rest = text + (is_unix ? 5 : 3);
		colon = strrchr(rest, ':');
		if (!colon)
			return vsx__err(-EINVAL, "%s '%.64s': expected %s", what, text,
					is_unix ? "unix:PATH:PORT" : "vm:NAME:PORT");
		plen = (size_t)(colon - rest);
		if (plen == 0)
			return vsx__err(-EINVAL, "%s '%.64s': empty %s", what, text,
					is_unix ? "path" : "name");
		if (is_unix && plen >= VSX_PATH_MAX)
			return vsx__err(-EINVAL, "unix address: path is %zu bytes, the limit is %d",
					plen, VSX_PATH_MAX - 1);
		if (is_unix && memchr(rest, '\0', plen))
			return vsx__err(-EINVAL, "unix address: bad path");
		if (!is_unix && !vsx__name_ok(rest, plen))
			return vsx__err(-EINVAL, "vm address '%.64s': a name is 1 to %d of "
					"[A-Za-z0-9._-]", text, VSX_NAME_MAX);
		if (parse_port(what, colon + 1, strlen(colon + 1), &a.port) < 0)
			return -EINVAL;
		a.kind = is_unix ? VSX_ADDR_UNIX : VSX_ADDR_VM;
		memcpy(a.path, rest, plen);
		a.path[plen] = '\0';
	} else {
		return vsx__err(-EINVAL, "address '%.64s': unknown kind; expected vsock:, "
				"hvsock:, unix: or vm:", text);
	}
	*out = a;
	return 0;
}

static int fmt_port(char *buf, size_t len, uint32_t port)
{
	return port == VSX_PORT_ANY ? snprintf(buf, len, "any")
				    : snprintf(buf, len, "%u", port);
}

VSX_EXPORT int vsx_addr_format(const struct vsx_addr *a, char *buf, size_t len)
{
	char tmp[VSX_ADDR_STRLEN], p[16];
	int n;

	vsx__err_clear();
	if (!a || !buf)
		return vsx__err(-EINVAL, "address: NULL argument");
	switch (a->kind) {
	case VSX_ADDR_VSOCK:
		fmt_port(p, sizeof(p), a->port);
		if (a->cid == VSX_CID_ANY)
			n = snprintf(tmp, sizeof(tmp), "vsock:any:%s", p);
		else
			n = snprintf(tmp, sizeof(tmp), "vsock:%u:%s", a->cid, p);
		break;
	case VSX_ADDR_HVSOCK:
		memcpy(tmp, "hvsock:", 7);
		n = vsx_guid_format(a->guid, 0, tmp + 7, sizeof(tmp) - 7);
		if (n < 0)
			return n;
		n += 7;
		break;
	case VSX_ADDR_UNIX:
	case VSX_ADDR_VM:
		if (!memchr(a->path, '\0', sizeof(a->path)) || !a->path[0] ||
		    (a->kind == VSX_ADDR_VM && !vsx__name_ok(a->path, strlen(a->path))))
			return vsx__err(-EINVAL, "address: bad path or name");
		fmt_port(p, sizeof(p), a->port);
		n = snprintf(tmp, sizeof(tmp), "%s:%s:%s",
			     a->kind == VSX_ADDR_UNIX ? "unix" : "vm", a->path, p);
		break;
	default:
		return vsx__err(-EINVAL, "address: unknown kind %d", a->kind);
	}
	if (n < 0 || (size_t)n >= len)
		return vsx__err(-ENOSPC, "address: %d bytes do not fit in %zu", n, len);
	memcpy(buf, tmp, (size_t)n + 1);
	return n;
}
