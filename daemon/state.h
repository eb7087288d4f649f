/*
 * vsxd's restart state record (vsxd(8) RESTARTS): what a new vsxd needs,
 * besides the descriptors systemd's file descriptor store kept, to go on
 * serving each VM's device after the old process died: what the device
 * negotiated, its memory table, its rings, and which connections existed
 * (they end: the new process resets each one).
 *
 * The descriptors are named, not numbered: the record refers to each one
 * by the FDNAME it was stored under (sd_pid_notify_with_fds(3)), and the
 * new process gets them back with those names in $LISTEN_FDNAMES.
 *
 * Format, version 1; every integer little-endian, a "str" is a u8 length
 * then that many bytes (no NUL):
 *
 *   header, 32 bytes
 *     0  magic       8 bytes "VSXDSTAT"
 *     8  version     u32, VSXD_STATE_VERSION
 *    12  length      u32, the whole record, header included
 *    16  crc         u32, CRC-32 (IEEE 802.3, zlib's crc32) of bytes
 *                    32 .. length
 *    20  nvms        u32, at most VSXD_STATE_MAX_VMS
 *    24  generation  u64, the writer's: 1 for a fresh start, +1 per restart
 *   nvms VM records, each
 *     str name       the VM's name (1-64 of [A-Za-z0-9._-])
 *     str conn       FDNAME of the vhost-user connection to the front-end
 *     u64 cid        the guest's CID (the guest read it from the device's
 *                    config space: a VM configured with another one now
 *                    must not take the device back)
 *     u64 features, u64 protocol_features   as negotiated
 *     u8 nregions (1-8), u8 nqueues (1-3), u16 reserved (0), u32 nconns
 *     nregions times: u64 gpa, u64 size, u64 uva, u64 mmap_offset, str fd
 *     nqueues times:  u8 index (< 3, each once), u8 flags (bit 0: enabled,
 *                     others 0), u16 num (a power of two up to 32768),
 *                     u64 desc, u64 avail, u64 used (front-end addresses),
 *                     str kick, str call (empty: none)
 *     nconns times:   u64 id, u64 guest_cid, u64 peer_cid, u32 guest_port,
 *                     u32 peer_port, u8 type (1 stream, 2 seqpacket)
 *   and nothing after the last one.
 *
 * FDNAMEs follow systemd's rule (1-255 printable ASCII bytes, no ':').
 * The decoder trusts nothing: a short, long, corrupted (crc) record, an
 * unknown version, a count or value out of range is an error with a
 * message saying which; what the descriptors themselves are (their kind,
 * their size) is checked by whoever uses them.
 */
#ifndef VSXD_STATE_H
#define VSXD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VSXD_STATE_MAGIC "VSXDSTAT"
#define VSXD_STATE_VERSION 1u
#define VSXD_STATE_HDR 32u
#define VSXD_STATE_MAX_LEN (64u << 20)
#define VSXD_STATE_MAX_VMS 4096u
#define VSXD_STATE_MAX_CONNS 65536u
#define VSXD_STATE_MAX_REGIONS 8u
#define VSXD_STATE_MAX_QUEUES 3u
#define VSXD_FDNAME_MAX 255u
#define VSXD_STATE_NAME_MAX 64u

struct vsxd_state_region {
	uint64_t gpa, size, uva, mmap_offset;
	char fd[VSXD_FDNAME_MAX + 1];
};

struct vsxd_state_queue {
	unsigned index;
	bool enabled;
	unsigned num;
	uint64_t desc, avail, used;
	char kick[VSXD_FDNAME_MAX + 1];
	char call[VSXD_FDNAME_MAX + 1];   /* "" : none */
};

struct vsxd_state_conn {
	uint64_t id, guest_cid, peer_cid;
	uint32_t guest_port, peer_port;
	unsigned type;                    /* 1 stream, 2 seqpacket */
};

struct vsxd_state_vm {
	char name[VSXD_STATE_NAME_MAX + 1];
	char conn[VSXD_FDNAME_MAX + 1];
	uint64_t cid;
	uint64_t features, protocol_features;
	unsigned nregions;
	struct vsxd_state_region region[VSXD_STATE_MAX_REGIONS];
	unsigned nqueues;
	struct vsxd_state_queue queue[VSXD_STATE_MAX_QUEUES];
	unsigned nconns;
	struct vsxd_state_conn *conns;    /* nconns of them (malloc'ed) */
};

struct vsxd_state {
	uint64_t generation;
	unsigned nvms;
	struct vsxd_state_vm *vms;        /* nvms of them (malloc'ed) */
};

/* Is @s a name systemd's file descriptor store takes (FDNAME=)? */
bool vsxd_fdname_ok(const char *s);

/* Bytes vsxd_state_encode writes for @s. */
size_t vsxd_state_size(const struct vsxd_state *s);

/* Write @s into @buf (@cap bytes). Returns the length written, -ENOSPC
 * when @cap is too small (nothing is written), -EINVAL when @s breaks one
 * of the format's limits (the decoder would refuse it). */
long vsxd_state_encode(const struct vsxd_state *s, void *buf, size_t cap);

/* Read a record of @len bytes. 0 and *@out (free with vsxd_state_clear),
 * or -EBADMSG (truncated, corrupted, inconsistent), -EPROTONOSUPPORT
 * (another version), -ENOMEM, with a one-line reason in @why (@whylen
 * bytes, may be 0). *@out is empty after a failure. */
int vsxd_state_decode(const void *buf, size_t len, struct vsxd_state *out,
		      char *why, size_t whylen);

/* Free what a decode allocated (and the caller's vms/conns arrays when it
 * built @s itself with malloc); @s becomes empty. */
void vsxd_state_clear(struct vsxd_state *s);

/* CRC-32 (IEEE, reflected, as zlib's crc32(0, buf, len)). */
uint32_t vsxd_crc32(const void *buf, size_t len);

#endif
