/*
 * What the backend's end-to-end test files share (tests/backend/test_*.c):
 * the test VMs (H, set up and torn down per test), the op and type names,
 * and the helpers that open and inspect connections. Built into each of
 * their programs, with the harness (harness.c).
 */
#ifndef VSXB_TEST_SUITE_H
#define VSXB_TEST_SUITE_H

#include <stdbool.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "harness.h"

#define STREAM VIRTIO_VSOCK_TYPE_STREAM
#define SEQ VIRTIO_VSOCK_TYPE_SEQPACKET
#define OP_REQUEST VIRTIO_VSOCK_OP_REQUEST
#define OP_RESPONSE VIRTIO_VSOCK_OP_RESPONSE
#define OP_RST VIRTIO_VSOCK_OP_RST
#define OP_SHUTDOWN VIRTIO_VSOCK_OP_SHUTDOWN
#define OP_RW VIRTIO_VSOCK_OP_RW
#define OP_CREDIT_UPDATE VIRTIO_VSOCK_OP_CREDIT_UPDATE
#define OP_CREDIT_REQUEST VIRTIO_VSOCK_OP_CREDIT_REQUEST
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)

/* The test VMs: one per test (set up by setup1 or setup_bare). */
extern struct hx H;
#define G(i) (&H.v[i].g)

/* One VM, its device open (setup1); none yet (setup_bare); teardown. */
void setup1(void);
void setup_bare(void);
void teardown(void);

int listen_port(unsigned vm, uint32_t port, int type);

/* Guest port @lport connects to host port @hport (a listener made here). */
void g2h_open(struct gc *c, unsigned vm, uint16_t type, uint32_t lport,
		     uint32_t hport, int *lfd, int *afd);

/* A host program connects to guest port @gport through the hybrid socket;
 * the guest accepts. Returns the host port from "OK <port>". */
uint32_t h2g_open(struct gc *c, unsigned vm, uint32_t gport, int *hfd,
			 const char *extra);

struct vsxb_conn_info conn_of(const struct gc *c, unsigned vm);

bool conn_gone(const struct gc *c, unsigned vm, int timeout_ms);

/* A quick echo check that connection @c (guest side) and @fd (host side)
 * still work both ways. */
void still_works(struct gc *c, int fd);

#endif
