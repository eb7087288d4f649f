/*
 * vsxd's restart state record (vsxd(8) RESTARTS): what a new vsxd needs,
 * besides the descriptors systemd's file descriptor store kept, to go on
 * serving each VM's device after the old process died: what the device
 * negotiated, its memory table, its rings, and its connections: their
 * addresses (version 1 and 2) and, from version 2, everything a new
 * process needs to go on with them (state, credit counters, shutdown
 * bits, the bytes vsxd held for either side, the host socket's FDNAME);
 * from version 3, a device its VM paused (QEMU stop): its rings stopped,
 * each where GET_VRING_BASE left it, and a sibling connection's twin (the
 * other VM's half of the pair), so that a pair goes on too; from version
 * 4, why a connection ends once that is known (one kept draining or
 * lingering), so that the next process counts its end as this one would.
 *
 * In the file descriptor store's memfd the record is followed by the
 * connection slots (state_slots.h): there, the connections of the record
 * kept up to date for a crash are in the slots, one per connection, and
 * its VM records name none (a SIGTERM's record holds them whole).
 *
 * The descriptors are named, not numbered: the record refers to each one
 * by the FDNAME it was stored under (sd_pid_notify_with_fds(3)), and the
 * new process gets them back with those names in $LISTEN_FDNAMES.
 *
 * Format, version 4 (version 3 is the same but for the connection record,
 * which stops after its eom_pending; version 2 is version 3 but for the VM
 * flags, 0 there, each ring's base, absent there, and the connection
 * record, which stops after its queues; version 1 is version 2 but for
 * the connection record, which stops after its type byte; all four are
 * read, VSXD_STATE_VERSION is written); every integer little-endian, a "str" is a u8 length then
 * that many bytes (no NUL). A connection's layout below is a table in the
 * code, each field with the version that added it (state.c's
 * vsxd__conn_fields, walked by vsxd__put_fields and vsxd__get_fields,
 * which also write and read the fd store's connection slots:
 * state_slots.h):
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
 *     u8 nregions (1-8), u8 nqueues (1-3), u16 flags, u32 nconns
 *                     flags (version 3; 0 before): bit 0 paused: the
 *                     front-end stopped every ring (GET_VRING_BASE: QEMU
 *                     stop) and has not started them again; the queues
 *                     below are the stopped rings, none started; others 0
 *     nregions times: u64 gpa, u64 size, u64 uva, u64 mmap_offset, str fd
 *     nqueues times:  u8 index (< 3, each once), u8 flags (bit 0: enabled,
 *                     others 0; 0 in a paused VM), u16 num (a power of
 *                     two up to 32768), u64 desc, u64 avail, u64 used
 *                     (front-end addresses), str kick (empty in a paused
 *                     VM, and only there), str call (empty: none), then
 *                     (version 3) u16 base: where GET_VRING_BASE left the
 *                     ring in a paused VM, 0 in a running one
 *     nconns times:   u64 id, u64 guest_cid, u64 peer_cid, u32 guest_port,
 *                     u32 peer_port, u8 type (1 stream, 2 seqpacket)
 *                     (version 1 stops here), then
 *       u8 state       1 connecting, 2 established, 3 closing
 *       u8 flags       bit 0 guest-initiated, 1 advertised (rx_limit is
 *                      valid), 2 a CREDIT_REQUEST sent, 3 a seqpacket
 *                      message from the guest is open, 4 whole: the
 *                      record was written at a freeze and holds all of
 *                      the connection (without it, as in the record
 *                      kept up to date for a crash, only addresses,
 *                      state and what vsxctl shows are right: such a
 *                      connection ends), 5-7 its host socket's state
 *                      (5 the host shut its sending side, 6 vsxd shut
 *                      the socket's sending side, 7 the host takes no
 *                      more data); others 0
 *       u8 guest_shut  SHUTDOWN bits the guest sent (1 rcv, 2 send)
 *       u8 host_shut   SHUTDOWN bits vsxd sent
 *       u8 shut_pending  SHUTDOWN bits still to send to the guest
 *       u8 ctrl        control packets waiting for an RX buffer (bits: 1
 *                      request, 2 response, 4 credit update, 8 credit
 *                      reply, 16 credit request, 32 rst)
 *       u8 peer        1 host socket, 2 sibling VM, 3 host kernel vsock
 *       u8 timer       0 none, 1 connect, 2 linger, 3 drain
 *       u32 timer_ms   what was left of the timer (0 with timer 0); a
 *                      connection held whole while connecting (state 1,
 *                      timer 1, not guest-initiated, peer 1) is a hybrid
 *                      program's waiting for its "OK": it goes on; one
 *                      held whole closing with timer 3 (peer 1 or 3,
 *                      to_host not empty) drains: its guest side is
 *                      over (the guest had its RST), what the guest sent
 *                      still goes to the host socket, and the connection
 *                      ends once it is written or the timer runs out (the
 *                      guest gets no RST for it if it cannot go on); one
 *                      held whole closing with timer 2 (peer 1 or 3, shut
 *                      down both ways: host_shut | shut_pending 3, no RST
 *                      in ctrl) lingers: it waits for the guest's RST,
 *                      and goes on, with its host socket or, host_fd
 *                      empty, without one (the program's end was gone)
 *       u32 buf_alloc, rx_cnt, fwd_cnt, last_fwd_sent, last_buf_sent,
 *           rx_limit, peer_buf_alloc, peer_fwd_cnt, tx_cnt
 *                      the credit counters both ways (backend.h,
 *                      struct vsxb_credit): ours, what the guest last
 *                      saw of them, the guest's, what we sent it
 *       u64 to_guest, u64 from_guest   payload bytes moved so far
 *       str host_fd    FDNAME of the host socket handed over with the
 *                      record (peer 1 and 3 only; empty: none, the
 *                      connection cannot go on, but for one that
 *                      lingers, above); each name once
 *       str tag        who made it (a forward's name), may be empty
 *       2 byte queues, to_host then to_guest: the payload vsxd held for
 *                      that side (to_host: written to no socket yet;
 *                      to_guest: waiting for the guest's RX buffers; a
 *                      sibling's are the other guest's bytes, in its
 *                      twin's to_host, and its to_host is empty),
 *                      each u32 len, len bytes, u32 nends, nends times
 *                      u32 end (the offset just past a message's last
 *                      byte, increasing, at most len), u8 flags (1 EOM,
 *                      3 EOM and EOR); nends is 0 for a stream, but for
 *                      a sibling's to_guest from version 3, where each
 *                      end (flags 1) is where one of the other guest's
 *                      packets ended (version 2 stops here), then
 *       str twin_vm    peer 2, held whole: the VM of the twin, the other
 *                      half of the pair (empty: none, it ends)
 *       u64 twin_id    the twin's connection id in that VM (0 with none)
 *       u8 eom_pending a seqpacket sibling: an empty message end still
 *                      owed to the guest (0 none, 1 EOM, 3 EOM and EOR)
 *                      (version 3 stops here), then
 *       u8 why         why it ends, once known (the backend's enum
 *                      vsxb_conn_reason, numbered as the counters record's
 *                      reasons; 0: not yet), below VSXB_REASON_COUNT
 *       u8 why_limit   with why "limit": which (enum vsxb_limit_kind)
 *       u32 why_err    with why "error": the errno, at most 4095
 *   and nothing after the last one. A pair goes on when both halves are
 *   held whole and name each other, their addresses mirrored (each one's
 *   peer_cid the other VM's cid, the ports crossed, one type).
 *
 * FDNAMEs follow systemd's rule (1-255 printable ASCII bytes, no ':').
 * The decoder trusts nothing: a short, long, corrupted (crc) record, an
 * unknown version, a count or value out of range is an error with a
 * message saying which; what the descriptors themselves are (their kind,
 * their size) and that a host_fd names one that was handed over is
 * checked by whoever uses them.
 */
#ifndef VSXD_STATE_H
#define VSXD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define VSXD_STATE_MAGIC "VSXDSTAT"
#define VSXD_STATE_VERSION 4u     /* written; 1 to 3 are read too */
#define VSXD_STATE_V1_CONN 33u     /* bytes of a version 1 connection */
#define VSXD_STATE_V2_CONN 115u    /* at least, in version 2 */
#define VSXD_STATE_V3_CONN 125u    /* at least, in version 3 */
#define VSXD_STATE_V4_CONN 131u    /* at least, in version 4 */
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
	char kick[VSXD_FDNAME_MAX + 1];   /* "": none (a paused VM's) */
	char call[VSXD_FDNAME_MAX + 1];   /* "" : none */
	unsigned base;                    /* a paused VM's: its stop index */
};

/* Bytes vsxd held for one side of a connection. */
struct vsxd_state_bytes {
	uint32_t len;
	uint8_t *data;                    /* len bytes (malloc'ed) */
	unsigned nends;
	struct vsxd_state_end {
		uint32_t end;             /* just past the message's last byte */
		unsigned flags;           /* 1 EOM, 3 EOM and EOR */
	} *ends;                          /* nends (malloc'ed); seqpacket only */
};

enum vsxd_state_peer {
	VSXD_PEER_HOST = 1,
	VSXD_PEER_SIBLING,
	VSXD_PEER_VSOCK,
};

enum vsxd_state_timer {
	VSXD_TIMER_NONE,
	VSXD_TIMER_CONNECT,
	VSXD_TIMER_LINGER,
	VSXD_TIMER_DRAIN,
};

#define VSXD_CONN_GUEST_INITIATED 0x1u
#define VSXD_CONN_ADVERTISED      0x2u
#define VSXD_CONN_CREDIT_REQ_SENT 0x4u
#define VSXD_CONN_MSG_OPEN        0x8u
#define VSXD_CONN_WHOLE           0x10u
#define VSXD_CONN_HOST_EOF        0x20u
#define VSXD_CONN_HOST_WR_SHUT    0x40u
#define VSXD_CONN_HOST_WR_DEAD    0x80u

struct vsxd_state_conn {
	uint64_t id, guest_cid, peer_cid;
	uint32_t guest_port, peer_port;
	unsigned type;                    /* 1 stream, 2 seqpacket */
	/* Version 2; all 0 in a connection read from version 1 (state 0:
	 * only its addresses are known). */
	unsigned state;                   /* enum vsxb_conn_state, 1-3 */
	unsigned flags;                   /* VSXD_CONN_* */
	unsigned guest_shut, host_shut, shut_pending, ctrl;
	unsigned peer;                    /* enum vsxd_state_peer */
	unsigned timer;                   /* enum vsxd_state_timer */
	uint32_t timer_ms;
	struct vsxb_credit cr;            /* the backend's, as it was */
	uint64_t to_guest, from_guest;
	char host_fd[VSXD_FDNAME_MAX + 1];  /* "": none */
	char tag[VSXD_FDNAME_MAX + 1];
	struct vsxd_state_bytes to_host_q, to_guest_q;
	/* Version 3; "", 0, 0 in a connection of an earlier one */
	char twin_vm[VSXD_STATE_NAME_MAX + 1];  /* "": no twin */
	uint64_t twin_id;
	unsigned eom_pending;             /* 0, 1 EOM, 3 EOM and EOR */
	/* Version 4; 0 in a connection of an earlier one */
	unsigned why;                     /* enum vsxb_conn_reason: why it
					     ends, once known (0: not yet) */
	unsigned why_limit;               /* enum vsxb_limit_kind (limit) */
	uint32_t why_err;                 /* positive errno (error) */
};

struct vsxd_state_vm {
	char name[VSXD_STATE_NAME_MAX + 1];
	char conn[VSXD_FDNAME_MAX + 1];
	uint64_t cid;
	uint64_t features, protocol_features;
	bool paused;                      /* version 3: its rings stopped */
	unsigned nregions;
	struct vsxd_state_region region[VSXD_STATE_MAX_REGIONS];
	unsigned nqueues;
	struct vsxd_state_queue queue[VSXD_STATE_MAX_QUEUES];
	unsigned nconns;
	struct vsxd_state_conn *conns;    /* nconns of them (malloc'ed) */
};

struct vsxd_state {
	unsigned version;                 /* read: the record's (the encoder
					     writes VSXD_STATE_VERSION alone) */
	uint64_t generation;
	unsigned nvms;
	struct vsxd_state_vm *vms;        /* nvms of them (malloc'ed) */
};

/* Is @s a name systemd's file descriptor store takes (FDNAME=)? */
bool vsxd_fdname_ok(const char *s);

/* Bytes vsxd_state_encode writes for @s. */
size_t vsxd_state_size(const struct vsxd_state *s);

/* Write @s into @buf (@cap bytes), as VSXD_STATE_VERSION whatever
 * @s->version says (older versions are read, never written: the tests
 * keep records of each, tests/daemon/state_fixtures.h). Returns the
 * length written, -ENOSPC
 * when @cap is too small (nothing is written), -EINVAL when @s breaks one
 * of the format's limits (the decoder would refuse it). */
long vsxd_state_encode(const struct vsxd_state *s, void *buf, size_t cap);

/* Read a record of @len bytes. 0 and *@out (free with vsxd_state_clear),
 * or -EBADMSG (truncated, corrupted, inconsistent), -EPROTONOSUPPORT
 * (another version), -ENOMEM, with a one-line reason in @why (@whylen
 * bytes, may be 0). *@out is empty after a failure. */
int vsxd_state_decode(const void *buf, size_t len, struct vsxd_state *out,
		      char *why, size_t whylen);

/* Free what a decode allocated (and the caller's vms/conns arrays and
 * queued bytes when it built @s itself with malloc); @s becomes empty. */
void vsxd_state_clear(struct vsxd_state *s);

/* CRC-32 (IEEE, reflected, as zlib's crc32(0, buf, len)). */
uint32_t vsxd_crc32(const void *buf, size_t len);

/*
 * ---- The counters record ----
 *
 * What a live handoff and a SIGTERM under a store pass on besides the
 * state (descriptor "counters", a memfd of its own): the counters vsxd
 * shows (vsxctl status, the metrics), so that they continue in the new
 * process instead of starting at 0 again. A crash passes none (the new
 * process counts from 0). Integers little-endian, a "str" as above:
 *
 *   header, 32 bytes
 *     0  magic       8 bytes "VSXDCNTS"
 *     8  version     u32, VSXD_COUNTERS_VERSION
 *    12  length      u32, the whole record, header included
 *    16  crc         u32, CRC-32 of bytes 20 .. length (all that
 *                    follows it)
 *    20  nvms        u32, at most VSXD_STATE_MAX_VMS
 *    24  nglobals    u16, at most VSXD_COUNTERS_MAX (enum
 *                    vsxd_counter: a later release only adds at the end;
 *                    a reader takes those it knows)
 *    26  nreasons    u16, at most VSXD_COUNTERS_MAX (the backend's close
 *                    reasons by number, which only grow the same way)
 *    28  reserved    u32, 0
 *   nglobals times u64
 *   nvms VM entries, each
 *     str name       the VM's name (1-64 of [A-Za-z0-9._-]), each once
 *     u64 opened, u64 to_guest, u64 from_guest, u64 credit_stalls
 *     nreasons times u64 closed, then reset, then refused
 *   and nothing after the last one.
 */
#define VSXD_COUNTERS_MAGIC "VSXDCNTS"
#define VSXD_COUNTERS_VERSION 1u
#define VSXD_COUNTERS_MAX 64u

enum vsxd_counter {
	VSXD_CNT_OPENED,              /* connections established */
	VSXD_CNT_REFUSED,             /* connection attempts refused */
	VSXD_CNT_REFUSED_LIMIT_VM,    /* refused: max_conns_per_vm */
	VSXD_CNT_REFUSED_LIMIT_CONNS, /* refused: max_conns */
	VSXD_CNT_RESET_LIMIT_MEMORY,  /* reset: max_conn_memory */
	VSXD_CNT_FWD_ACCEPTED,        /* forwards' listen sides */
	VSXD_CNT_FWD_DENIED,
	VSXD_CNT_FWD_FAILED,
	VSXD_CNT_AUTH_FAILURES,
	VSXD_CNT_POLL_HITS,           /* all loops */
	VSXD_CNT_POLL_MISSES,
	VSXD_CNT_HANDOFFS_FAILED,     /* vsxctl upgrades that failed */
	VSXD_CNT_COUNT
};

struct vsxd_counters_vm {
	char name[VSXD_STATE_NAME_MAX + 1];
	uint64_t opened, to_guest, from_guest, credit_stalls;
	uint64_t closed[VSXD_COUNTERS_MAX], reset[VSXD_COUNTERS_MAX],
		 refused[VSXD_COUNTERS_MAX];   /* nreasons of each valid */
};

struct vsxd_counters {
	uint64_t c[VSXD_CNT_COUNT];       /* by enum vsxd_counter */
	unsigned nreasons;                /* per-VM reason entries valid */
	unsigned nvms;
	struct vsxd_counters_vm *vms;     /* nvms of them (malloc'ed) */
};

/* Bytes vsxd_counters_encode writes for @c. */
size_t vsxd_counters_size(const struct vsxd_counters *c);

/* Write @c into @buf (@cap bytes): its length, -ENOSPC (nothing written),
 * -EINVAL (a bad name, a count over its limit). */
long vsxd_counters_encode(const struct vsxd_counters *c, void *buf, size_t cap);

/* Read a record of @len bytes: 0 and *@out (free with
 * vsxd_counters_clear), or -EBADMSG, -EPROTONOSUPPORT, -ENOMEM with a
 * one-line reason in @why. *@out is empty after a failure. */
int vsxd_counters_decode(const void *buf, size_t len, struct vsxd_counters *out,
			 char *why, size_t whylen);

void vsxd_counters_clear(struct vsxd_counters *c);

/*
 * ---- The relays record ----
 *
 * What a live handoff and a SIGTERM under a store pass on of the relays
 * of vsxd's own forwards (forward-int.h, struct relay; vsxd(8) UPGRADING
 * VSXD) besides the state (descriptor "relays", a memfd of its own, so
 * that the state record's format stays as it is): each relay established
 * at the freeze, with the bytes it held each way, its two sockets passed
 * as relay.ID.0 (the client's) and relay.ID.1 (the target's). A crash
 * passes none. Integers little-endian, a "str" as above:
 *
 *   header, 32 bytes
 *     0  magic       8 bytes "VSXDRLYS"
 *     8  version     u32, VSXD_RELAYS_VERSION
 *    12  length      u32, the whole record, header included
 *    16  crc         u32, CRC-32 of bytes 20 .. length (all that
 *                    follows it)
 *    20  nrelays     u32, at most VSXD_RELAYS_MAX
 *    24  nended      u32, the writer's relays that end (not held: still
 *                    connecting, or a side that cannot go on), for the
 *                    reader's counts
 *    28  reserved    u32, 0
 *   nrelays relay entries, each
 *     u32 elen       bytes of the entry after this field; a later
 *                    release may add fields at the end of an entry
 *                    (keeping the version): a reader skips what follows
 *                    the fields it knows
 *     u64 id         the relay's connection id (not 0), each once
 *     str forward    its forward's name (1-64 printable bytes)
 *     str client     the listen side's client as vsxctl list shows it
 *                    (no NUL)
 *     u8 flags       bit 0: the libvsx side was authenticated; others 0
 *     2 sides, the client's then the target's, each
 *       u8 kind      1 a plain socket (TCP, Unix, a socketpair to an
 *                    engine connection), 2 a libvsx socket the reader
 *                    wraps again (vsx_adopt: kernel vsock, hybrid)
 *       str fd       FDNAME of its socket, handed over with the record;
 *                    each name once
 *     2 directions, client to target then target to client, each
 *       u8 flags     bit 0 eof: the source sent EOF; bit 1 shut: passed
 *                    on (only after eof, with nothing held); others 0
 *       u64 bytes    written to the destination so far
 *       u32 len      bytes held, read from the source and not yet
 *                    written (at most VSXD_RELAY_HELD_MAX), then them
 *   and nothing after the last one.
 */
#define VSXD_RELAYS_MAGIC "VSXDRLYS"
#define VSXD_RELAYS_VERSION 1u
#define VSXD_RELAYS_MAX 65536u
#define VSXD_RELAY_HELD_MAX (64u << 10)

enum vsxd_relay_side {
	VSXD_RELAY_PLAIN = 1,
	VSXD_RELAY_LIBVSX,
};

struct vsxd_relay_dir {
	bool eof, shut;
	uint64_t bytes;
	uint32_t len;
	uint8_t *data;                    /* len bytes (malloc'ed) */
};

struct vsxd_state_relay {
	uint64_t id;
	char forward[VSXD_STATE_NAME_MAX + 1];
	char client[VSXD_FDNAME_MAX + 1];
	bool auth;
	unsigned kind[2];                 /* enum vsxd_relay_side */
	char fd[2][VSXD_FDNAME_MAX + 1];
	struct vsxd_relay_dir dir[2];
};

struct vsxd_relays {
	unsigned nended;
	unsigned nrelays;
	struct vsxd_state_relay *relays;  /* nrelays of them (malloc'ed) */
};

/* Bytes vsxd_relays_encode writes for @rs. */
size_t vsxd_relays_size(const struct vsxd_relays *rs);

/* Write @rs into @buf (@cap bytes): its length, -ENOSPC (nothing
 * written), -EINVAL (a value the decoder would refuse). */
long vsxd_relays_encode(const struct vsxd_relays *rs, void *buf, size_t cap);

/* Read a record of @len bytes: 0 and *@out (free with vsxd_relays_clear),
 * or -EBADMSG, -EPROTONOSUPPORT, -ENOMEM with a one-line reason in @why.
 * *@out is empty after a failure. */
int vsxd_relays_decode(const void *buf, size_t len, struct vsxd_relays *out,
		       char *why, size_t whylen);

void vsxd_relays_clear(struct vsxd_relays *rs);

/* ---- Records in memfds ---- */

/* @s / @c / @rs encoded into a new memfd (close-on-exec, the offset at its
 * end), or a negative errno. */
int vsxd_state_memfd(const struct vsxd_state *s);
int vsxd_counters_memfd(const struct vsxd_counters *c);
int vsxd_relays_memfd(const struct vsxd_relays *rs);

/* The record the file @fd holds (read from offset 0, whatever its
 * offset), as vsxd_state_decode / vsxd_counters_decode / vsxd_relays_decode;
 * also -EINVAL (not a regular file), -EFBIG (longer than a record can be), -EIO.
 * A state file longer than a record can be is one with connection slots
 * after its record (state_slots.h): the record is as long as its header
 * says (the slots are vsxd_slots_read's). */
int vsxd_state_read(int fd, struct vsxd_state *out, char *why, size_t whylen);
int vsxd_counters_read(int fd, struct vsxd_counters *out, char *why, size_t whylen);
int vsxd_relays_read(int fd, struct vsxd_relays *out, char *why, size_t whylen);

#endif
