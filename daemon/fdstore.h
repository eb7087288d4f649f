/*
 * vsxd's restarts through systemd's file descriptor store (vsxd(8)
 * RESTARTS; fdstore.c says how).
 *
 * Threads: vsxd_fdstore_device and vsxd_fdstore_conn run on the VMs'
 * worker threads (backend hooks); everything else on the main thread.
 */
#ifndef VSXD_FDSTORE_H
#define VSXD_FDSTORE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "backend/backend.h"
#include "control.h"

struct vsxd_fdstore;
struct vsxu_vu_state;

typedef void (*vsxd_fdstore_log_fn)(void *arg, int prio, const char *msg);

/*
 * At start: read $LISTEN_FDS / $LISTEN_FDNAMES (sd_listen_fds_with_names)
 * for what an earlier process left, and decide whether to keep
 * descriptors in the store ($NOTIFY_SOCKET set and $FDSTORE above 0:
 * systemd 254 and later set it to FileDescriptorStoreMax=, vsxd's units
 * set it for older ones). Never
 * fails for bad input (a log line, a fresh start); -ENOMEM.
 */
int vsxd_fdstore_open(vsxd_fdstore_log_fn log, void *log_arg, struct vsxd_fdstore **out);

/* VM @name (guest CID @cid) was just created: take over its device if the
 * earlier process left it (vsxb_vm_adopt) for the same CID, with one log
 * line saying what happened. */
void vsxd_fdstore_adopt(struct vsxd_fdstore *fs, struct vsxb_vm *vm, const char *name,
			uint64_t cid);

/* Every configured VM was adopted: the sibling pairs the adoptions kept
 * are made again between the two devices (vsxb_router_pair_kept), with a
 * log line for those; the halves whose twin did not come end (RST). */
void vsxd_fdstore_pair(struct vsxd_fdstore *fs, struct vsxb_router *r);

/* Every configured VM was created: close what no VM took, drop from the
 * store what is nobody's now, write the state record. */
void vsxd_fdstore_ready(struct vsxd_fdstore *fs);

/* The backend's hooks (arg: the store). */
void vsxd_fdstore_device(void *arg, struct vsxb_vm *vm, const char *name,
			 uint64_t guest_cid, const struct vsxu_vu_state *st, bool held);
void vsxd_fdstore_conn(struct vsxd_fdstore *fs, const struct vsxb_conn_event *ev);

/* The highest connection id the earlier process's state names (0: none). */
uint64_t vsxd_fdstore_max_conn_id(struct vsxd_fdstore *fs);

/* VM @name goes away (reload): its descriptors leave the store. */
void vsxd_fdstore_forget(struct vsxd_fdstore *fs, const char *name);

void vsxd_fdstore_info(struct vsxd_fdstore *fs, struct vsxd_start_info *out);

/* The relays of forwards an earlier process handed over: @kept went on,
 * @ended did not; counted with the connections (vsxd_start_info). */
void vsxd_fdstore_relays(struct vsxd_fdstore *fs, unsigned kept, unsigned ended);

/* Started by a live handoff (handoff.c) and a device could not be taken:
 * why (the handoff is refused, the old process serves on); else NULL. */
const char *vsxd_fdstore_refusal(struct vsxd_fdstore *fs);

/* SIGTERM under a store (systemctl stop or restart): the record brought
 * up to date, the connections of @vms (@n_vms, NULL entries skipped)
 * written whole with the host socket of each that can go on stored
 * (conn.ID.host), and every listening socket of the process stored too
 * (listen.K), so that a restart takes each device and listener back and
 * a program connecting meanwhile waits in a backlog; the caller exits
 * without cleaning up (a stop: systemd closes what the store holds, and
 * QEMU sees its back-end go). The listeners stored, or -ENOTCONN: no
 * store. */
int vsxd_fdstore_keep(struct vsxd_fdstore *fs, struct vsxb_vm *const *vms, size_t n_vms);

/* Store @fd (still the caller's) under @name, for the next start: 0, or a
 * negative errno (-ENOTCONN: no store). */
int vsxd_fdstore_put(struct vsxd_fdstore *fs, const char *name, int fd);

/* The descriptor passed under @name at this start (from the store or a
 * handoff), now the caller's; -1: none. Before vsxd_fdstore_ready, which
 * closes what nobody took; its name leaves the store then. */
int vsxd_fdstore_take(struct vsxd_fdstore *fs, const char *name);

/* A clean exit: everything leaves the store (the front-ends then see
 * their back-end go, as without one), and @fs is freed. */
void vsxd_fdstore_free(struct vsxd_fdstore *fs);

#endif
