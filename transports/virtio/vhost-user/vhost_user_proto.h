/*
 * The vhost-user wire protocol as far as a vsock device uses it: request
 * numbers, header flags, feature bits and message payloads, laid out as
 * QEMU's docs/interop/vhost-user.rst defines them. One definition for the
 * back-end (vhost_user.c) and the test front-end (tests/driver/driver.c).
 * All fields are little-endian on the wire (x86 here: host order).
 */
#ifndef VSX_VHOST_USER_PROTO_H
#define VSX_VHOST_USER_PROTO_H

#include <stddef.h>
#include <stdint.h>

enum {
	VU_GET_FEATURES = 1,
	VU_SET_FEATURES = 2,
	VU_SET_OWNER = 3,
	VU_RESET_OWNER = 4,
	VU_SET_MEM_TABLE = 5,
	VU_SET_LOG_BASE = 6,
	VU_SET_LOG_FD = 7,
	VU_SET_VRING_NUM = 8,
	VU_SET_VRING_ADDR = 9,
	VU_SET_VRING_BASE = 10,
	VU_GET_VRING_BASE = 11,
	VU_SET_VRING_KICK = 12,
	VU_SET_VRING_CALL = 13,
	VU_SET_VRING_ERR = 14,
	VU_GET_PROTOCOL_FEATURES = 15,
	VU_SET_PROTOCOL_FEATURES = 16,
	VU_GET_QUEUE_NUM = 17,
	VU_SET_VRING_ENABLE = 18,
	VU_GET_CONFIG = 24,
	VU_SET_CONFIG = 25,
	VU_RESET_DEVICE = 34,
};

#define VU_VERSION 0x1u
#define VU_VERSION_MASK 0x3u
#define VU_FLAG_REPLY (1u << 2)
#define VU_FLAG_NEED_REPLY (1u << 3)
#define VU_MAX_FDS 8
#define VU_VRING_IDX_MASK 0xffull
#define VU_VRING_NOFD (1ull << 8)
#define VU_CONFIG_MAX 256         /* VHOST_USER_MAX_CONFIG_SIZE */
#define VU_MEM_MAX_REGIONS 8      /* VHOST_MEMORY_BASELINE_NREGIONS */

/* Feature bits: VHOST_USER_F_PROTOCOL_FEATURES, VHOST_USER_PROTOCOL_F_* */
#define VU_F_PROTOCOL_FEATURES 30
#define VU_PF_MQ 0
#define VU_PF_REPLY_ACK 3
#define VU_PF_CONFIG 9
#define VU_PF_RESET_DEVICE 13

struct vu_hdr {
	uint32_t request;
	uint32_t flags;
	uint32_t size;            /* payload bytes that follow */
} __attribute__((packed));

struct vu_state {                 /* vhost_vring_state */
	uint32_t index;
	uint32_t num;
};

struct vu_addr {                  /* vhost_vring_addr */
	uint32_t index;
	uint32_t flags;
	uint64_t desc;            /* front-end (QEMU) virtual addresses */
	uint64_t used;
	uint64_t avail;
	uint64_t log;             /* guest physical, for dirty logging (unused) */
};

struct vu_region {                /* VhostUserMemoryRegion */
	uint64_t gpa;
	uint64_t size;
	uint64_t uva;
	uint64_t mmap_offset;
};

/* SET_MEM_TABLE: the payload is VU_MEM_HDR + nregions regions, one fd each. */
struct vu_memory {
	uint32_t nregions;
	uint32_t padding;
	struct vu_region r[VU_MEM_MAX_REGIONS];
};

#define VU_MEM_HDR offsetof(struct vu_memory, r)

/* GET_CONFIG / SET_CONFIG: the payload is VU_CONFIG_HDR + size bytes. */
struct vu_config {
	uint32_t offset;
	uint32_t size;
	uint32_t flags;
	uint8_t region[VU_CONFIG_MAX];
};

#define VU_CONFIG_HDR offsetof(struct vu_config, region)

union vu_payload {
	uint64_t u64;
	struct vu_state state;
	struct vu_addr addr;
	struct vu_memory mem;
	struct vu_config config;
};

/* The largest payload of any message we know; anything larger is a
 * framing error. */
#define VU_MAX_PAYLOAD sizeof(union vu_payload)

_Static_assert(sizeof(struct vu_addr) == 40, "vhost_vring_addr");
_Static_assert(sizeof(struct vu_region) == 32, "VhostUserMemoryRegion");
_Static_assert(sizeof(struct vu_hdr) == 12, "VhostUserHeader");

#endif
