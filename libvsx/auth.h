/*
 * Peer authentication with a pre-shared key: the hooks the core calls.
 *
 * Two implementations, chosen by the build (libvsx/Makefile.inc), never by
 * #ifdef in the core: auth.c with OpenSSL (the handshake of vsx_auth(7)),
 * auth-none.c without, where every authentication option fails with
 * -ENOTSUP so that nothing silently runs unauthenticated.
 *
 * The key lives in s->auth (struct vsx__auth, private to auth.c): loaded by
 * vsx__auth_setup() before the transport connects or listens, kept by a
 * listener for its whole life, dropped by a connecting socket as soon as its
 * handshake is over, and always wiped before it is freed.
 */
#ifndef VSX_AUTH_H
#define VSX_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "vsx-int.h"

/* The authentication fields took three words of vsx_opts.reserved: the
 * struct keeps its size, so programs built before them still work. */
_Static_assert(sizeof(struct vsx_opts) ==
	       offsetof(struct vsx_opts, auth_key_file) + 8 * sizeof(uintptr_t),
	       "struct vsx_opts changed size");

/*
 * Check @o's authentication options and load the key they name into @s
 * (nothing when @o names none). Called for vsx_connect and vsx_listen
 * before the transport runs, so that a bad key fails before any peer sees
 * a connection. @s NULL (vsx_adopt): any authentication option is refused.
 * Returns 0 or a negative errno with its detail recorded.
 */
int vsx__auth_setup(vsx_sock *s, const struct vsx_opts *o);

/*
 * The initiator's handshake on the connected socket @s, finished by
 * @deadline_ms (vsx__now_ms clock). Without a key, 0 at once. The key is
 * wiped and released whatever the outcome. On success VSX_INFO_AUTH is set
 * in s->info_flags; on failure the caller closes @s.
 */
int vsx__auth_connect(vsx_sock *s, int64_t deadline_ms);

/*
 * The responder's handshake on @s, just accepted from the listener @l,
 * within the connect timeout. Without a key on @l, 0 at once.
 */
int vsx__auth_accept(const vsx_sock *l, vsx_sock *s);

/* Wipe and free what s->auth holds; safe on a socket without a key. */
void vsx__auth_free(vsx_sock *s);

#endif /* VSX_AUTH_H */
