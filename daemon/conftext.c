/*
 * The text helpers of vsxd's configuration readers, below both the
 * settings model (settings.c) and the forward specs (fwdspec.c), which
 * use them: error messages (config.h's vsxd_err_set, config-int.h's
 * vsxd__err_prefix), quoting what the user wrote (vsxd_quote), matching a
 * key and comparing optional strings (config-int.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config-int.h"

/* ---- Messages ---- */

int vsxd_err_set(struct vsxd_err *err, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (err) {
		va_start(ap, fmt);
		n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		if (n >= (int)sizeof(err->msg))         /* cut: say so */
			memcpy(err->msg + sizeof(err->msg) - 4, "...", 4);
		va_end(ap);
	}
	return -EINVAL;
}

void vsxd__err_prefix(struct vsxd_err *err, const char *fmt, ...)
{
	char pre[VSXD_ERR_LEN], old[VSXD_ERR_LEN];
	va_list ap;
	int n;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	n = snprintf(err->msg, sizeof(err->msg), "%s: %s", pre, old);
	if (n >= (int)sizeof(err->msg))
		memcpy(err->msg + sizeof(err->msg) - 4, "...", 4);
}

const char *vsxd_quote(char *buf, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, o = 0;

	for (i = 0; i < len && i < VSXD_QUOTE_MAX; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
			buf[o++] = (char)c;
		} else {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		}
	}
	if (i < len) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
	return buf;
}

/* ---- Keys and strings ---- */

bool vsxd__key_is(const char *key, size_t keylen, const char *name)
{
	size_t i;

	if (strlen(name) != keylen)
		return false;
	for (i = 0; i < keylen; i++)
		if (key[i] != name[i] && !(key[i] == '_' && name[i] == '-'))
			return false;
	return true;
}

bool vsxd__str_eq(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return !strcmp(a, b);
}
