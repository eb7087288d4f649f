/*
 * The connections of the restart state, one fixed-size slot each, in the
 * state memfd beside the record (state.h): what the file descriptor store
 * (fdstore.c) keeps up to date for a crash at every connection open and
 * close, at a cost that does not depend on how many connections are open,
 * and without a lock shared by the VMs' worker threads.
 *
 * The memfd: the state record from offset 0 (its header says its length;
 * bytes after it up to VSXD_SLOTS_BASE are not the record's), then, from
 * VSXD_SLOTS_BASE (the largest record's length), the slot area:
 *
 *   directory     VSXD_STATE_MAX_VMS entries of VSXD_SLOTS_DIR_ENTRY
 *                 bytes, entry R for region R:
 *                   u32 mark     VSXD_SLOTS_DIR_MARK: region R is the
 *                                VM's below; anything else: unused
 *                   u32 crc      CRC-32 of bytes 8 .. 9 + namelen
 *                   u8 namelen, namelen bytes of the VM's name
 *   regions       from VSXD_SLOTS_BASE + VSXD_SLOTS_DIR_BYTES, region R
 *                 at R * VSXD_SLOTS_REGION_BYTES: VSXD_STATE_MAX_CONNS
 *                 slots of VSXD_SLOT_SIZE bytes (a slot never crosses a
 *                 page), each
 *                   u32 mark     0: never used (no slot after it is
 *                                either: the region ends), VSXD_SLOT_USED:
 *                                a connection, VSXD_SLOT_FREE: free
 *                   u32 crc      CRC-32 of bytes 8 .. 12 + len
 *                   u32 len      of the body, VSXD_SLOT_BODY + its tag
 *                   body         u64 id, u64 guest_cid, u64 peer_cid,
 *                                u32 guest_port, u32 peer_port, u8 type,
 *                                u8 state, u8 flags (only bit 0,
 *                                guest-initiated), u8 guest_shut,
 *                                u8 host_shut, u8 peer, u16 0,
 *                                u32 buf_alloc, fwd_cnt, peer_buf_alloc,
 *                                peer_fwd_cnt, u64 to_guest,
 *                                u64 from_guest, str tag: the fields of
 *                                vsxd_state_conn_from_info (state_live.h),
 *                                numbered as in the record
 * (integers little-endian; the area is sparse: only pages written take
 * memory).
 *
 * Each VM with a stored device has a region of its own (bound at its
 * first device event, on the device path, under the area's lock), and
 * only that VM's worker writes it, under the VM's own lock: an open takes
 * a free slot (the VM's free list, else the next never-used one), a close
 * frees it, through a mapping of the region (no system call). An id->slot
 * hash per VM finds a connection's slot. Updates are ordered so that a
 * crash at any instant leaves every slot readable: an open writes the
 * body, its length and crc, and then, last (a release store), the USED
 * mark; a close stores the FREE mark alone (one aligned 4-byte store). A
 * slot caught mid-open still holds its FREE (or 0: the region's end)
 * mark: the connection is not named, as if the crash came just before
 * it; a USED slot whose crc does not match is skipped (a torn slot cannot
 * be one, but a damaged file can).
 *
 * Reading (a new process): each directory entry whose VM the record names
 * with no connections of its own gives that VM its region's USED slots as
 * connections (not VSXD_CONN_WHOLE: they end). A VM the record names with
 * connections (a SIGTERM's, whole) ignores its slots. A file without the
 * area (a release before this one, a handoff's record) has none.
 */
#ifndef VSXD_STATE_SLOTS_H
#define VSXD_STATE_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define VSXD_SLOTS_BASE ((uint64_t)VSXD_STATE_MAX_LEN)
#define VSXD_SLOTS_DIR_ENTRY 128u
#define VSXD_SLOTS_DIR_BYTES ((uint64_t)VSXD_STATE_MAX_VMS * VSXD_SLOTS_DIR_ENTRY)
#define VSXD_SLOT_SIZE 512u
#define VSXD_SLOTS_REGION_BYTES ((uint64_t)VSXD_STATE_MAX_CONNS * VSXD_SLOT_SIZE)
#define VSXD_SLOTS_DIR_MARK 0x52585356u  /* "VSXR" */
#define VSXD_SLOT_USED 0x55585356u       /* "VSXU" */
#define VSXD_SLOT_FREE 0x46585356u       /* "VSXF" */
#define VSXD_SLOT_BODY 73u               /* body bytes with an empty tag */

struct vsxd_slots;
struct vsxd_slots_vm;

/* The slot area of the state memfd @fd (which it grows to hold the
 * directory; @fd stays the caller's): 0 and *@out, or a negative errno. */
int vsxd_slots_open(int fd, struct vsxd_slots **out);
void vsxd_slots_free(struct vsxd_slots *sl);

/* Cut the slot area from @fd (a record kept in place by a new process:
 * the old one's slots were read). 0 or a negative errno. Before
 * vsxd_slots_open on that file. */
int vsxd_slots_wipe(int fd);

/* Give VM @name a region, empty, if it has none: 0, or a negative errno
 * (-ENOSPC: every region taken). Device path; any thread. */
int vsxd_slots_bind(struct vsxd_slots *sl, const char *name);
/* VM @name's region is given up: its connections leave the area. */
void vsxd_slots_unbind(struct vsxd_slots *sl, const char *name);

/* VM @name's slots, or NULL: found without a lock shared by VMs (a VM
 * once bound keeps its entry until vsxd_slots_free; it may be unbound). */
struct vsxd_slots_vm *vsxd_slots_vm(struct vsxd_slots *sl, const char *name);

/* A connection opens (@c, as vsxd_state_conn_from_info made it) / closes:
 * constant time. 0, -ENOENT (the VM has no region; not there), -ENOSPC
 * (its region is full: the connection is not named), -ENOMEM. */
int vsxd_slots_add(struct vsxd_slots_vm *v, const struct vsxd_state_conn *c);
int vsxd_slots_del(struct vsxd_slots_vm *v, uint64_t id);

/* Connections VM @v has in its slots now. */
unsigned vsxd_slots_count(struct vsxd_slots_vm *v);

/* Append to each VM of @s that names no connections the USED slots of its
 * region in the file @fd (from offset 0, whatever its offset). 0, or a
 * negative errno with a one-line reason in @why (what was appended stays,
 * vsxd_state_clear frees it). */
int vsxd_slots_read(int fd, struct vsxd_state *s, char *why, size_t whylen);

#endif /* VSXD_STATE_SLOTS_H */
