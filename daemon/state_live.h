/*
 * The state record's entries (state.h) made from the live objects: what
 * the file descriptor store (fdstore.c) and the live handoff (handoff.c)
 * both write. Each descriptor is named as in the store (vm.NAME.*,
 * conn.ID.host).
 */
#ifndef VSXD_STATE_LIVE_H
#define VSXD_STATE_LIVE_H

#include "backend/backend.h"

struct vsxu_vu_state;

/* Fill @v (its name set) from the device state @st, naming each
 * descriptor vm.NAME.* and giving it with its name to
 * @store, which returns 0 or a negative errno (the first one stops the
 * fill and is returned). Regions that share a file share its name. */
struct vsxd_state_vm;
int vsxd_state_vm_fill(struct vsxd_state_vm *v, const struct vsxu_vu_state *st,
		       int (*store)(void *arg, const char *name, int fd), void *arg);

/* @sc from what the backend shows of a connection: its addresses, state,
 * shutdown bits, peer kind and the counters vsxctl shows (not
 * VSXD_CONN_WHOLE: vsxd_handoff's freeze adds the rest). */
struct vsxd_state_conn;
void vsxd_state_conn_from_info(struct vsxd_state_conn *sc,
			       const struct vsxb_conn_info *ci);
/* @sc whole from a connection at a freeze (VSXD_CONN_WHOLE, its host
 * socket named conn.ID.host) when @k->fd says it can go on, else as
 * vsxd_state_conn_from_info. 0 or -ENOMEM (the queued bytes are copied). */
int vsxd_state_conn_whole(struct vsxd_state_conn *sc, const struct vsxb_conn_keep *k);

#endif /* VSXD_STATE_LIVE_H */
