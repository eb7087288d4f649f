/*
 * Hyper-V service GUIDs and vsock ports.
 *
 * A Linux guest's hv_sock maps an AF_VSOCK port to the service GUID whose
 * first field is the port, written in hex, and whose other fields are the
 * fixed template facb-11e6-bd58-64006a7986d3 (Linux
 * net/vmw_vsock/hyperv_transport.c, srv_id_template): port 2056 = 0x808 is
 * 00000808-facb-11e6-bd58-64006a7986d3. A GUID outside the template has no
 * port and cannot be reached from a Linux guest at all.
 *
 * GUIDs are kept as 16 bytes in text order (RFC 4122), which is also
 * struct vsx_addr's guid; the Windows in-memory GUID (little-endian first
 * three fields) is never used here.
 */
#include <stdio.h>
#include <string.h>

#include "vsx-int.h"

static const uint8_t template_tail[12] = {
	0xfa, 0xcb, 0x11, 0xe6, 0xbd, 0x58, 0x64, 0x00, 0x6a, 0x79, 0x86, 0xd3,
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

VSX_EXPORT int vsx_guid_parse(const char *text, uint8_t guid[16])
{
	uint8_t g[16];
	const char *s = text;
	size_t n, i, b = 0;

	vsx__err_clear();
	if (!text || !guid)
		return vsx__err(-EINVAL, "guid: NULL argument");
	n = strlen(s);
	if (n == 38 && s[0] == '{' && s[37] == '}') {
		s++;
		n = 36;
	}
	if (n != 36)
		goto bad;
	for (i = 0; i < 36;) {
		int hi, lo;

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				goto bad;
			i++;
			continue;
		}
		hi = hexval(s[i]);
		lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			goto bad;
		g[b++] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	memcpy(guid, g, sizeof(g));
	return 0;
bad:
	return vsx__err(-EINVAL, "guid '%.48s': expected 8-4-4-4-12 hex digits, "
			"optionally in braces, like 00000808-facb-11e6-bd58-64006a7986d3",
			text);
}

VSX_EXPORT int vsx_guid_format(const uint8_t guid[16], unsigned flags, char *buf,
			       size_t len)
{
	const char *fmt = (flags & VSX_GUID_UPPER)
		? "%s%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X%s"
		: "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x%s";
	const int braces = (flags & VSX_GUID_BRACES) != 0;
	char tmp[VSX_GUID_STRLEN];
	const uint8_t *g = guid;
	int n;

	vsx__err_clear();
	if (!guid || !buf)
		return vsx__err(-EINVAL, "guid: NULL argument");
	if (flags & ~(unsigned)(VSX_GUID_BRACES | VSX_GUID_UPPER))
		return vsx__err(-EINVAL, "guid: unknown flags 0x%x", flags);
	n = snprintf(tmp, sizeof(tmp), fmt, braces ? "{" : "", g[0], g[1], g[2], g[3],
		     g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
		     g[14], g[15], braces ? "}" : "");
	if (n < 0 || (size_t)n >= len)
		return vsx__err(-ENOSPC, "guid: %d bytes do not fit in %zu", n, len);
	memcpy(buf, tmp, (size_t)n + 1);
	return n;
}

VSX_EXPORT int vsx_guid_from_port(uint32_t port, uint8_t guid[16])
{
	vsx__err_clear();
	if (!guid)
		return vsx__err(-EINVAL, "guid: NULL argument");
	guid[0] = (uint8_t)(port >> 24);
	guid[1] = (uint8_t)(port >> 16);
	guid[2] = (uint8_t)(port >> 8);
	guid[3] = (uint8_t)port;
	memcpy(guid + 4, template_tail, sizeof(template_tail));
	return 0;
}

int vsx__guid_is_service(const uint8_t guid[16])
{
	return memcmp(guid + 4, template_tail, sizeof(template_tail)) == 0;
}

VSX_EXPORT int vsx_guid_to_port(const uint8_t guid[16], uint32_t *port)
{
	char text[VSX_GUID_STRLEN];

	vsx__err_clear();
	if (!guid || !port)
		return vsx__err(-EINVAL, "guid: NULL argument");
	if (!vsx__guid_is_service(guid)) {
		vsx_guid_format(guid, 0, text, sizeof(text));
		return vsx__err(-EINVAL, "guid %s is not a vsock service GUID: only "
				"XXXXXXXX-facb-11e6-bd58-64006a7986d3 carries a port", text);
	}
	*port = (uint32_t)guid[0] << 24 | (uint32_t)guid[1] << 16 |
		(uint32_t)guid[2] << 8 | guid[3];
	return 0;
}
