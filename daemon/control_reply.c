/*
 * The control protocol's replies as vsxd writes them (ctl-proto.h): a
 * "key=value" line, the trailer that ends every reply, and the control
 * socket's log. Below both control.c (the socket, its clients, refusals)
 * and control_cmds.c (the commands), which write replies.
 */
#include <stdarg.h>
#include <stdio.h>

#include <event2/buffer.h>

#include "ctl-proto.h"
#include "control-int.h"
#include "util.h"

/* ---- Logging ---- */

void vsxd__ctl_log(struct vsxd_control *c, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsx__logv(c->log, c->log_arg, prio, fmt, ap);
	va_end(ap);
}

/* ---- Replies ---- */

void vsxd__ctl_put_str(struct evbuffer *b, const char *key, const char *v)
{
	static const char hex[] = "0123456789abcdef";
	char out[VSX_CTL_VALUE_MAX + 1];
	size_t o = 0;

	for (; *v; v++) {
		unsigned char ch = (unsigned char)*v;

		if (ch >= 0x20 && ch <= 0x7e) {
			if (o + 1 > VSX_CTL_VALUE_MAX)
				break;
			out[o++] = (char)ch;
		} else {
			if (o + 4 > VSX_CTL_VALUE_MAX)
				break;
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = '\0';
	evbuffer_add_printf(b, "%s=%s\n", key, out);
}

void vsxd__ctl_end(struct evbuffer *b, int e, const char *msg)
{
	if (e && msg)
		vsxd__ctl_put_str(b, VSX_CTL_K_ERROR, msg);
	evbuffer_add_printf(b, VSX_CTL_K_ERRNO "=%d\n\n", e);
}
