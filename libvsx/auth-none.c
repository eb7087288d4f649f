/*
 * Peer authentication in a libvsx built without OpenSSL: there is none, and
 * asking for it is an error (-ENOTSUP), never a connection that silently
 * runs unauthenticated. The hooks of auth.h otherwise do nothing: no socket
 * ever holds a key here.
 */
#include "auth.h"

int vsx__auth_setup(vsx_sock *s, const struct vsx_opts *o)
{
	(void)s;
	if (!o->auth_key_file && !o->auth_key && !o->auth_key_len)
		return 0;
	return vsx__err(-ENOTSUP, "auth: this libvsx was built without OpenSSL and "
			"cannot authenticate peers; rebuild it with --with-openssl, or "
			"give no key");
}

int vsx__auth_connect(vsx_sock *s, int64_t deadline_ms)
{
	(void)s;
	(void)deadline_ms;
	return 0;
}

int vsx__auth_accept(const vsx_sock *l, vsx_sock *s)
{
	(void)l;
	(void)s;
	return 0;
}

void vsx__auth_free(vsx_sock *s)
{
	(void)s;
}
