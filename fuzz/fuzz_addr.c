/*
 * Fuzz target: address text (libvsx/addr.c, vsx_addr_parse). Parse only,
 * never connect. A parsed address must format, and the text it formats to
 * must parse back to the same address.
 */
#include <stdlib.h>
#include <string.h>

#include <vsx/vsx.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	char buf[VSX_ADDR_STRLEN];
	struct vsx_addr a, b;
	int n;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (vsx_addr_parse(text, &a) == 0) {
		n = vsx_addr_format(&a, buf, sizeof(buf));
		if (n < 0 || (size_t)n >= sizeof(buf))
			abort(); /* every parsed address formats */
		if (vsx_addr_parse(buf, &b) != 0 || memcmp(&a, &b, sizeof(a)) != 0)
			abort(); /* and parses back the same */
		/* a short buffer is refused, not overrun */
		vsx_addr_format(&a, buf, (size_t)n);
	}
	free(text);
	return 0;
}
