/* Error reporting: negative errno values plus a per-thread detail message. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "vsx-int.h"

static __thread struct {
	int err;             /* the error the detail belongs to, 0 if none */
	char detail[256];
	char out[384];       /* vsx_strerror's returned text */
} tls;

int vsx__err(int err, const char *fmt, ...)
{
	va_list ap;

	tls.err = err;
	va_start(ap, fmt);
	vsnprintf(tls.detail, sizeof(tls.detail), fmt, ap);
	va_end(ap);
	return err;
}

int vsx__errno(const char *what)
{
	int e = errno;

	return vsx__err(-e, "%s: %s", what, strerror(e));
}

void vsx__err_clear(void)
{
	tls.err = 0;
	tls.detail[0] = '\0';
}

VSX_EXPORT const char *vsx_strerror(int err)
{
	const char *base;

	if (err > 0)
		err = -err;
	if (err == 0)
		return "Success";
	base = strerror(err == INT_MIN ? err : -err); /* -INT_MIN overflows */
	if (tls.err == err && tls.detail[0]) {
		snprintf(tls.out, sizeof(tls.out), "%s", tls.detail);
		return tls.out;
	}
	snprintf(tls.out, sizeof(tls.out), "%s", base);
	return tls.out;
}
