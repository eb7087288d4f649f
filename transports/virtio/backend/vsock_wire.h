/*
 * virtio-vsock on the wire (virtio spec, "Socket Device"): the packet
 * header, ops, flags, features. Little-endian, packed, 44 bytes.
 */
#ifndef VSXB_VSOCK_WIRE_H
#define VSXB_VSOCK_WIRE_H

#include <stdint.h>

struct virtio_vsock_hdr {
	uint64_t src_cid;
	uint64_t dst_cid;
	uint32_t src_port;
	uint32_t dst_port;
	uint32_t len;
	uint16_t type;
	uint16_t op;
	uint32_t flags;
	uint32_t buf_alloc;
	uint32_t fwd_cnt;
} __attribute__((packed));

_Static_assert(sizeof(struct virtio_vsock_hdr) == 44, "virtio_vsock_hdr is 44 bytes");

#define VIRTIO_ID_VSOCK 19
#define VSOCK_VQ_RX 0
#define VSOCK_VQ_TX 1
#define VSOCK_VQ_EVENT 2
#define VSOCK_NUM_QUEUES 3

#define VIRTIO_VSOCK_TYPE_STREAM 1
#define VIRTIO_VSOCK_TYPE_SEQPACKET 2

enum {
	VIRTIO_VSOCK_OP_INVALID = 0,
	VIRTIO_VSOCK_OP_REQUEST = 1,
	VIRTIO_VSOCK_OP_RESPONSE = 2,
	VIRTIO_VSOCK_OP_RST = 3,
	VIRTIO_VSOCK_OP_SHUTDOWN = 4,
	VIRTIO_VSOCK_OP_RW = 5,
	VIRTIO_VSOCK_OP_CREDIT_UPDATE = 6,
	VIRTIO_VSOCK_OP_CREDIT_REQUEST = 7,
};

#define VIRTIO_VSOCK_SHUTDOWN_RCV 1
#define VIRTIO_VSOCK_SHUTDOWN_SEND 2
#define VIRTIO_VSOCK_SEQ_EOM 1
#define VIRTIO_VSOCK_SEQ_EOR 2

#define VIRTIO_VSOCK_F_STREAM 0
#define VIRTIO_VSOCK_F_SEQPACKET 1
#define VIRTIO_VSOCK_F_NO_IMPLIED_STREAM 2

#define VIRTIO_VSOCK_EVENT_TRANSPORT_RESET 0

#define VSOCK_CID_HOST 2
#define VSOCK_MAX_PKT_PAYLOAD (64 * 1024)

#endif
