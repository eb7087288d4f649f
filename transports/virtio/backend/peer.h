/*
 * The peers' entry points (peer_host.c, uds.c, peer_sibling.c,
 * peer_xsib.c): how the router and the lifecycle create connections of
 * each kind. Peers include this header and call only the connection API
 * (conn.h), never the rings (ring.h): guest payload comes to them as
 * iovecs (ops->rw), and they fill the guest's RX buffers the engine
 * reserves for them (vsxb__rx_reserve, then vsxb__rx_commit);
 * peer_xsib.c also calls the sibling peer's receiving half (peer_sib.h).
 */
#ifndef VSXB_PEER_H
#define VSXB_PEER_H

#include "conn.h"

/* ---- Peers: peer_host.c, uds.c, peer_sibling.c, peer_xsib.c ---- */

/* Handlers of host ports (backend.h: vsxb_router_listen_port). */
struct vsxb_port {
	struct vsxb_list node;        /* r->ports */
	struct vsxb_router *r;
	char vm[VSXB_NAME_LEN];
	uint32_t port;
	char tag[VSXB_TAG_MAX];
	vsxb_port_cb cb;
	void *arg;
};

/* peer_host.c: a guest REQUEST to host port: connect to uds_path_<port>. */
void vsxb__host_connect(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h);
/* peer_host.c: a guest REQUEST for @p's port (REFUSE or a waiting
 * connection, attached later by vsxb_router_conn_attach_fd). */
void vsxb__host_port_request(struct vsxb_vm *vm, struct vsxb_port *p,
			    const struct virtio_vsock_hdr *h);
/* port_post.c: @c, CONNECTING on @vm's worker thread for host port @p,
 * is offered to @p's handler on the control thread (reset on failure). */
void vsxb__port_post(struct vsxb_vm *vm, struct vsxb_port *p, struct conn *c,
		     const struct virtio_vsock_hdr *h);
/* peer_host.c: a guest REQUEST to the host of a forward-cid VM: connect
 * to vm->forward_cid, RESPONSE once connected, RST if not. */
void vsxb__host_forward(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h);
/* peer_vsock.c: the default vsxb_forward_connect_fn (AF_VSOCK). */
int vsxb__vsock_connect(void *arg, uint32_t cid, uint32_t port);
/* peer_host.c: backend.h's vsxb_vm_connect_fd. */
int vsxb__host_connect_fd(struct vsxb_vm *vm, int fd, uint32_t port, const char *tag,
			 uint64_t *id);
/* peer_host.c: a hybrid client asked for guest port @port: REQUEST to the
 * guest; "OK <host port>" once it answers. Takes @fd. */
void vsxb__host_hybrid(struct vsxb_vm *vm, int fd, uint32_t port);

/* uds.c: the VM's uds_path listener and CONNECT handshakes. */
int vsxb__host_listen(struct vsxb_vm *vm);
void vsxb__host_unlisten(struct vsxb_vm *vm);
/* (vsxb__host_parse_connect, the CONNECT line's parser: backend-int.h) */

/* peer_xsib.c: a REQUEST to a sibling VM that another thread serves. */
void vsxb__xsib_request(struct vsxb_vm *vm, struct vsxb_vm *to,
		       const struct virtio_vsock_hdr *h);
/* peer_sibling.c: a guest of @vm asks for @to (a sibling VM on its
 * thread): a pair of connections, REQUEST to @to's guest. */
void vsxb__sib_request(struct vsxb_vm *vm, struct vsxb_vm *to,
		      const struct virtio_vsock_hdr *h);

/* A sibling pair kept across a live handoff (restart.c): each half made
 * again on its VM (NULL: no memory), the counters and queue restart.c's,
 * then the two joined: on one thread (peer_sibling.c, @eom_*: the empty
 * message ends still owed to each guest) or across two (peer_xsib.c: 0,
 * or -ENOMEM). */
struct conn *vsxb__sib_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k);
void vsxb__sib_join(struct conn *a, struct conn *b, unsigned eom_a, unsigned eom_b);
struct conn *vsxb__xsib_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k);
int vsxb__xsib_join(struct conn *a, struct conn *b, unsigned eom_a, unsigned eom_b);

#endif
