/*
 * The host peer's data path (peer_host.c), for a peer kind built on it:
 * a connection whose other end is a socket, with its own table but these
 * hooks. Included by peer_host.c and any peer file built on it, which would sit
 * above peer_host.c in the call graph: peer_host.c knows nothing of it.
 */
#ifndef VSXB_PEER_HOST_H
#define VSXB_PEER_HOST_H

#include "peer.h"

/* c->priv of a connection to a host socket; a kind built on the host
 * peer puts it first in its own (hp() works on both). */
struct host_peer {
	int fd;                      /* -1: none (yet, or any more) */
	struct vsxu_watch *w;
	int wev;                     /* events watched */
	bool hybrid;                 /* host-initiated: "OK <port>" owed on RESPONSE */
	bool readable;               /* the socket had data last we looked */
	bool early;                  /* data came before the guest answered */
	bool eof;                    /* the host shut its sending side */
	bool wr_shut;                /* we shut down our sending side */
	bool wr_dead;                /* the host no longer takes data */
	bool pending;                /* a forward's connect is in progress */
	bool close_refuses;          /* closed while CONNECTING: the other end
					refused (reason refused, not host-closed) */
};

static inline struct host_peer *hp(const struct conn *c)
{
	return c->priv;
}

/* @c's socket is @fd (non-blocking), watched from now on. -ENOMEM: no
 * watch; @fd is left in hp(c)->fd, closed with @c unless taken back. */
int vsxb__host_attach(struct conn *c, int fd);
/* The other end accepted the connection @c's guest asked for:
 * ESTABLISHED, OPEN reported, RESPONSE to the guest, the socket watched. */
void vsxb__host_accept(struct conn *c);

/* A live handoff (restart.c): @c's socket if @c can go on in another
 * process (k->host_flags: VSXB_KEEP_HOST_*, k->vsock: an AF_VSOCK one),
 * else -1 (-1 too, with VSXB_KEEP_HOST_LINGER, for one that lingers
 * without a socket); a connection of a host socket made again from
 * @k in the new process (its socket still to attach), or NULL. */
int vsxb__host_keepable(const struct conn *c, struct vsxb_conn_keep *k);
struct conn *vsxb__host_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k);

/* The hooks (struct vsxb_peer_ops, backend-int.h) of host_ops */
/* Guest payload (a batch the engine gathered) to the socket with one
 * sendmsg; what it does not take, queued. */
void vsxb__host_rw(struct conn *c, struct iovec *iov, unsigned n, uint32_t len,
		   unsigned flags);
/* The socket takes data: the engine may gather packets for it. */
bool vsxb__host_gather(const struct conn *c);
/* The guest shut a direction: so does the socket (sending once the queue
 * is out); both: RST to the guest, as Linux answers. */
void vsxb__host_guest_shutdown(struct conn *c, unsigned flags);
/* Socket to guest: readv straight into the guest's RX buffers, which
 * vsxb__rx_reserve hands over (EMIT_*). */
int vsxb__host_emit(struct conn *c);
/* Schedule @c if the socket has data the guest may take; set the watch. */
void vsxb__host_sync(struct conn *c);
/* buf_alloc changed: a Unix socket's SO_SNDBUF grows to hold the window. */
void vsxb__host_size_sndbuf(struct conn *c);
/* Unwatch and close the socket. */
void vsxb__host_close(struct conn *c);
/* The guest side is over: what it sent still goes to the socket, or @c ends. */
void vsxb__host_gone(struct conn *c);
/* The guest accepted: a hybrid socket's "OK <port>", the socket watched;
 * -EIO: the program left. */
int vsxb__host_established(struct conn *c);

#endif
