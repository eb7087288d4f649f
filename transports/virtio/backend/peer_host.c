/*
 * The host socket peer: a guest connection whose other end is a host
 * program on a socket (struct host_peer in c->priv, host_ops below).
 * Compatible with Firecracker / Cloud Hypervisor / vhost-device-vsock
 * hybrid vsock.
 *
 * Host -> guest connections: uds.c hands over a socket whose program
 * wrote "CONNECT <port>\n" (vsxb__host_hybrid), or vsxd a descriptor of one
 * of its forwards (vsxb_vm_connect_fd). We send REQUEST; the guest's
 * RESPONSE gets "OK <host port>\n" on a hybrid socket, its RST (or no
 * answer within the router's connect timeout) closes the socket. A
 * program that gives up while the guest has not answered (its socket
 * reads EOF) ends the connection at once: the guest gets RST, nothing
 * waits for the timeout. Host ports come from a per-VM counter starting
 * at VSXB_HOST_PORT_FIRST, skipping ports a connection to the same guest
 * port still uses (after a wrap, any port a connection uses).
 *
 * Guest -> host connections: a REQUEST to CID 2 port P connects
 * (non-blocking) to "<uds_path>_<P>"; success answers RESPONSE, any failure
 * RST. A SEQPACKET guest socket connects with SOCK_SEQPACKET: each guest
 * message (packets up to EOM) becomes one Unix record, each record read
 * from the host one guest message (packets split as the guest's RX buffers
 * require, EOM on the last). A host listening with SOCK_STREAM refuses a
 * SEQPACKET connect (EPROTOTYPE) and the guest gets RST. Host -> guest
 * connections through uds_path are always STREAM, as in the other VMMs.
 * A port with a handler (a vsxd forward, vsxb_router_listen_port) instead
 * waits, CONNECTING, for the handler's descriptor (attach_fd).
 *
 * Forwards to the host kernel's vsock (forward-cid): a VM with
 * vm->forward connects a guest's STREAM REQUEST to (forward_cid, port)
 * through vm->forward_connect (peer_vsock.c's AF_VSOCK by default) and
 * waits, CONNECTING, for the socket to turn writable: SO_ERROR 0 answers
 * RESPONSE, anything else (or the connect timer) RST. SEQPACKET is refused,
 * as vhost-device-vsock does. From there the connection is a host socket's
 * like any other, with the peer kind "vsock" that vsxctl shows (c->peer_kind);
 * an AF_VSOCK descriptor handed over by vsxb_vm_connect_fd (vsxd's
 * forward-listen) gets it too.
 *
 * Data: guest payload is written with sendmsg (MSG_NOSIGNAL) from iovecs
 * that point into guest memory, consecutive packets of one connection in one
 * call (the VM's TX batch, which device.c gathers while vsxb__host_gather
 * says the socket takes data); the rest is queued (txbuf.c). Host data is
 * read with one readv (recvmsg for a record, host_read) straight into the
 * guest's RX buffers that vsxb__rx_reserve hands over as iovecs; the
 * engine then sends what was read (vsxb__rx_commit).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "peer_host.h"
#include "util.h"

static const struct vsxb_peer_ops host_ops;

static const struct vsxu_loop *vm_loop(const struct vsxb_vm *vm)
{
	return vm->sh->loop;
}

/* ---- Host socket of a connection ---- */

static bool host_can_read(const struct conn *c)
{
	return hp(c)->fd >= 0 && !c->dead && !c->draining &&
	       c->state != VSXB_CONN_CONNECTING && !hp(c)->eof &&
	       !(c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV) &&
	       !((c->host_shut | c->shut_pending) & VIRTIO_VSOCK_SHUTDOWN_SEND) &&
	       !(c->ctrl & C_RST);
}

static bool host_wants_write(const struct conn *c)
{
	if (!c->q.bytes || hp(c)->wr_dead || hp(c)->fd < 0)
		return false;
	return !c->q.seq || vsxb__txq_msg_len(&c->q) > 0;
}

/* Set the watch mask from the state; no scheduling. */
static void host_watch(struct conn *c)
{
	int ev = 0;

	if (c->dead || hp(c)->fd < 0 || !hp(c)->w)
		return;
	if (host_can_read(c) && !hp(c)->readable && vsxb__conn_peer_free(c) > 0)
		ev |= VSXU_EV_READ;
	/* Still connecting: watch for the program hanging up (host_cb peeks),
	 * unless it already sent data, which waits for the guest. */
	if (c->state == VSXB_CONN_CONNECTING && !hp(c)->early)
		ev |= VSXU_EV_READ;
	if (host_wants_write(c))
		ev |= VSXU_EV_WRITE;
	if (hp(c)->pending)
		ev = VSXU_EV_WRITE;   /* the connect's outcome, nothing else */
	if (ev != hp(c)->wev) {
		vm_loop(c->vm)->watch_set(hp(c)->w, ev);
		hp(c)->wev = ev;
	}
}

void vsxb__host_sync(struct conn *c)
{
	/* Emit first, then set the mask from where that left us: a read
	 * that empties the socket leaves the read watch as it was, so a
	 * request-response exchange changes no watch (no epoll_ctl). */
	if (!c->dead && hp(c)->readable && host_can_read(c) &&
	    vsxb__conn_peer_free(c) > 0)
		vsxb__conn_schedule(c);
	host_watch(c);
}

void vsxb__host_close(struct conn *c)
{
	if (hp(c)->w) {
		vm_loop(c->vm)->unwatch(hp(c)->w);
		hp(c)->w = NULL;
	}
	if (hp(c)->fd >= 0) {
		close(hp(c)->fd);
		hp(c)->fd = -1;
	}
	hp(c)->wev = 0;
	hp(c)->readable = false;
}

/* The host no longer takes data: tell the guest, drop what is queued (it
 * still counts as consumed, so credit keeps flowing). */
static void host_wr_gone(struct conn *c)
{
	hp(c)->wr_dead = true;
	c->cr.fwd_cnt += (uint32_t)c->q.bytes;
	vsxb__txq_clear(&c->q);
	vsxb__conn_shutdown(c, VIRTIO_VSOCK_SHUTDOWN_RCV);
	vsxb__host_sync(c);
	vsxb__conn_credit_check(c);
}

/* EFAULT: the kernel could not copy from or to guest memory, whose file
 * shrank (vhost-user/memguard.h): that VM's device goes, not just @c. */
static bool host_mem_fault(struct conn *c, int err)
{
	if (err != EFAULT)
		return false;
	vsxb__vm_broken(c->vm, "guest memory fault (EFAULT: the file behind guest "
			"memory shrank)");
	return true;
}

static void host_write_error(struct conn *c, int err)
{
	if (host_mem_fault(c, err))
		return;
	if (c->draining) {
		vsxb__conn_kill(c);   /* nobody left to tell */
		return;
	}
	if (err == EPIPE) {
		vsxb__conn_why(c, VSXB_REASON_HOST_CLOSED, 0);
		host_wr_gone(c);
		return;
	}
	vsxb__log(c->vm->r, VSXB_LOG_INFO, "vm %s: connection %llu: host socket: %s",
		 c->vm->name, (unsigned long long)c->id, strerror(err));
	vsxb__conn_why(c, VSXB_REASON_ERROR, err);
	vsxb__conn_reset(c, false);
}

static void iov_advance(struct iovec **iov, unsigned *n, size_t k)
{
	while (k && *n) {
		if (k < (*iov)->iov_len) {
			(*iov)->iov_base = (char *)(*iov)->iov_base + k;
			(*iov)->iov_len -= k;
			return;
		}
		k -= (*iov)->iov_len;
		(*iov)++;
		(*n)--;
	}
	while (*n && !(*iov)->iov_len) {
		(*iov)++;
		(*n)--;
	}
}

/* Stream: write as much of *@iov as the socket takes; *@iov and *@n are
 * advanced past what was written (entries are modified in place). Returns
 * the bytes written; after a fatal error (handled: the connection is reset
 * or host_wr_dead) the caller finds out from the connection. */
static size_t host_send(struct conn *c, struct iovec **iov, unsigned *n, size_t len)
{
	size_t done = 0;
	ssize_t w;

	while (done < len && *n) {
		struct msghdr mh = { .msg_iov = *iov, .msg_iovlen = *n };

		w = sendmsg(hp(c)->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		c->vm->st.host_writes++;
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				host_write_error(c, errno);
			break;
		}
		done += (size_t)w;
		iov_advance(iov, n, (size_t)w);
		if (done < len)
			break; /* short: the socket is full, another call would
				  only say EAGAIN (the write watch resumes us) */
	}
	return done;
}

/* SEQPACKET: one message in one record. 1 sent, 0 would block, -1 fatal. */
static int host_send_msg(struct conn *c, struct iovec *iov, unsigned n)
{
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n };
	ssize_t w;

	do {
		w = sendmsg(hp(c)->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		c->vm->st.host_writes++;
	} while (w < 0 && errno == EINTR);
	if (w >= 0)
		return 1;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return 0;
	if (errno == EMSGSIZE)
		vsxb__vm_warn(c->vm, "connection %llu: message too large for the host "
			     "socket", (unsigned long long)c->id);
	host_write_error(c, errno == EMSGSIZE ? EIO : errno);
	return -1;
}

static void host_after_flush(struct conn *c)
{
	if (c->dead)
		return;
	/* An unfinished message the guest will never finish is dropped. */
	if (c->q.seq && c->q.bytes && c->q.bytes == c->q.open &&
	    (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND || c->draining)) {
		c->cr.fwd_cnt += (uint32_t)c->q.bytes;
		vsxb__txq_clear(&c->q);
	}
	if (!c->q.bytes) {
		if ((c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && !hp(c)->wr_shut &&
		    hp(c)->fd >= 0) {
			shutdown(hp(c)->fd, SHUT_WR);
			hp(c)->wr_shut = true;
		}
		if (c->draining) {
			vsxb__conn_kill(c);
			return;
		}
	}
	vsxb__conn_credit_check(c);
	host_watch(c);
}

static void host_flush(struct conn *c)
{
	struct vsxb_vm *vm = c->vm;
	uint32_t total = 0;
	unsigned niov, fl;
	size_t n, m;
	ssize_t w;

	if (c->dead)
		return;
	if (hp(c)->fd < 0 || hp(c)->wr_dead) {
		c->cr.fwd_cnt += (uint32_t)c->q.bytes;
		vsxb__txq_clear(&c->q);
		host_after_flush(c);
		return;
	}
	while (c->q.bytes && !c->dead) {
		if (c->q.seq) {
			m = vsxb__txq_msg_len(&c->q);
			if (!m)
				break;
			n = vsxb__txq_peek(&c->q, vm->fiov, VSXB_IOV_MAX, &niov, m, &fl);
			if (n < m) {
				vsxb__vm_warn(vm, "connection %llu: message in too many "
					     "pieces", (unsigned long long)c->id);
				vsxb__conn_why(c, VSXB_REASON_ERROR, EMSGSIZE);
				vsxb__conn_reset(c, false);
				return;
			}
			if (host_send_msg(c, vm->fiov, niov) <= 0)
				break;
			vsxb__txq_consume(&c->q, m);
			total += (uint32_t)m;
		} else {
			struct iovec *fiov = vm->fiov;

			n = vsxb__txq_peek(&c->q, fiov, VSXB_IOV_MAX, &niov, SIZE_MAX, &fl);
			w = (ssize_t)host_send(c, &fiov, &niov, n);
			if (c->dead || hp(c)->wr_dead || w <= 0)
				break;
			vsxb__txq_consume(&c->q, (size_t)w);
			total += (uint32_t)w;
			if ((size_t)w < n)
				break;
		}
	}
	if (c->dead)
		return;
	c->cr.fwd_cnt += total;
	host_after_flush(c);
}

/* Queue the unwritten part of guest payload (copied out of guest memory). */
static void host_queue(struct conn *c, const struct iovec *iov, unsigned n,
		       size_t len, unsigned flags)
{
	struct vsxb_vm *vm = c->vm;
	int32_t room = (int32_t)(c->cr.rx_limit - c->cr.rx_cnt);

	if (vsxb__conn_enqueue(c, iov, n, len, room > 0 ? (size_t)room : 0,
			       flags) == -ENOMEM) {
		vsxb__log(vm->r, VSXB_LOG_ERR, "vm %s: connection %llu: out of memory "
			 "queueing %zu bytes", vm->name, (unsigned long long)c->id, len);
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
	}
}

/* Guest payload (one packet, or a batch the engine gathered: @flags end
 * it) to the socket; what it does not take is queued. */
void vsxb__host_rw(struct conn *c, struct iovec *iov, unsigned niov, uint32_t len,
		   unsigned flags)
{
	bool queued = c->q.bytes;
	size_t w = 0;

	if (hp(c)->fd < 0 || hp(c)->wr_dead || hp(c)->wr_shut) {
		/* Nobody will read it: consumed on arrival, credit flows. */
		c->cr.fwd_cnt += len;
		vsxb__conn_credit_check(c);
		return;
	}
	if (c->type == VIRTIO_VSOCK_TYPE_SEQPACKET) {
		if (!len && (flags & VIRTIO_VSOCK_SEQ_EOM) && !c->q.open && !c->msg_open)
			return; /* an empty message: nothing to deliver on a Unix socket */
		if (!queued && (flags & VIRTIO_VSOCK_SEQ_EOM) && len) {
			/* A whole message, straight from guest memory. */
			int rc = host_send_msg(c, iov, niov);

			if (c->dead)
				return;
			if (rc < 0) {
				/* the host stopped reading: dropped, consumed */
				c->cr.fwd_cnt += (uint32_t)len;
				vsxb__conn_credit_check(c);
				return;
			}
			if (rc == 1) {
				c->cr.fwd_cnt += (uint32_t)len;
				host_after_flush(c);
				return;
			}
		}
		if (len)
			host_queue(c, iov, niov, len, flags);
		else if (flags & VIRTIO_VSOCK_SEQ_EOM)
			vsxb__txq_end_msg(&c->q, flags); /* empty messages vanish */
		/* While the write watch is armed the socket is full: append
		 * only, the writable callback flushes (no EAGAIN per packet). */
		if (!c->dead && !(hp(c)->wev & VSXU_EV_WRITE))
			host_flush(c);
		return;
	}

	if (!queued) {
		w = host_send(c, &iov, &niov, len);
		if (c->dead)
			return;
		if (hp(c)->wr_dead) {
			/* the host stopped reading: dropped, consumed */
			c->cr.fwd_cnt += (uint32_t)len;
			vsxb__conn_credit_check(c);
			return;
		}
		c->cr.fwd_cnt += (uint32_t)w;
	}
	if (w < len)
		host_queue(c, iov, niov, len - w, 0);
	if (!queued)
		host_after_flush(c);
	else if (!c->dead && !(hp(c)->wev & VSXU_EV_WRITE))
		host_flush(c); /* else the writable callback will */
}

bool vsxb__host_gather(const struct conn *c)
{
	return hp(c)->fd >= 0 && !hp(c)->wr_dead && !hp(c)->wr_shut;
}

static void host_guest_shut(struct conn *c)
{
	if (hp(c)->fd < 0)
		return;
	if (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV)
		shutdown(hp(c)->fd, SHUT_RD);
	if ((c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && !hp(c)->wr_shut)
		host_after_flush(c);
	else
		host_watch(c);
}

static void host_drain(struct conn *c)
{
	vsxb__conn_unhash(c);
	vsxb_list_del(&c->pnode);
	c->draining = true;
	c->state = VSXB_CONN_CLOSING;
	c->ctrl = 0;
	c->shut_pending = 0;
	if (hp(c)->fd < 0 || hp(c)->wr_dead || !c->q.bytes) {
		vsxb__conn_kill(c);
		return;
	}
	vsxb__conn_timer(c, T_DRAIN, c->vm->r->lim.linger_ms);
	host_flush(c);
}

/* The host shut its sending side (read returned 0). */
static void host_eof(struct conn *c)
{
	struct pollfd p = { .fd = hp(c)->fd, .events = POLLOUT };

	hp(c)->eof = true;
	hp(c)->readable = false;
	if (poll(&p, 1, 0) == 1 && (p.revents & POLLHUP)) {
		/* Fully gone: nothing we queue will ever be read. */
		vsxb__conn_why(c, VSXB_REASON_HOST_CLOSED, 0);
		hp(c)->wr_dead = true;
		c->cr.fwd_cnt += (uint32_t)c->q.bytes;
		vsxb__txq_clear(&c->q);
		vsxb__host_close(c);
		vsxb__conn_shutdown(c, VSXB_SHUT_BOTH);
		return;
	}
	vsxb__conn_why(c, VSXB_REASON_HOST_EOF, 0);
	vsxb__conn_shutdown(c, VIRTIO_VSOCK_SHUTDOWN_SEND);
	host_watch(c);
}

/*
 * One read of the host socket into the guest RX buffers @rx reserved
 * (vsxb__rx_reserve): @msg, a SEQPACKET record's size (0: stream). The
 * bytes read (0: EOF), or -1 with *@err the read's errno (0: a record
 * that did not arrive whole); *@flags the record's end.
 */
static ssize_t host_read(struct conn *c, const struct vsxb_rx *rx, ssize_t msg,
			 int *err, unsigned *flags)
{
	struct msghdr mh = { .msg_iov = rx->iov, .msg_iovlen = rx->niov };
	ssize_t r;

	do {
		if (msg)
			r = recvmsg(hp(c)->fd, &mh, MSG_DONTWAIT);
		else
			r = readv(hp(c)->fd, rx->iov, (int)rx->niov);
	} while (r < 0 && errno == EINTR);
	c->vm->st.host_reads++;
	*flags = 0;
	if (r < 0) {
		*err = errno;
		return -1;
	}
	if (msg) {
		if (r != msg || (mh.msg_flags & MSG_TRUNC)) {
			*err = 0;
			return -1;
		}
		*flags = VIRTIO_VSOCK_SEQ_EOM;
	}
	return r;
}

static int host_read_error(struct conn *c, int err)
{
	if (err == EAGAIN || err == EWOULDBLOCK) {
		hp(c)->readable = false;
		host_watch(c);
		return EMIT_DONE;
	}
	if (err == EINTR)
		return EMIT_MORE;
	if (host_mem_fault(c, err))
		return EMIT_DONE;
	vsxb__log(c->vm->r, VSXB_LOG_INFO, "vm %s: connection %llu: host socket: %s",
		 c->vm->name, (unsigned long long)c->id, strerror(err));
	vsxb__conn_why(c, VSXB_REASON_ERROR, err);
	vsxb__conn_reset(c, false);
	return EMIT_DONE;
}

static int host_emit_seq(struct conn *c, uint32_t credit)
{
	struct vsxb_vm *vm = c->vm;
	struct vsxb_rx rx;
	unsigned flags;
	int rc, err;
	ssize_t m, r;
	char x;

	m = recv(hp(c)->fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	if (m < 0)
		return host_read_error(c, errno);
	if (m == 0) {
		struct pollfd p = { .fd = hp(c)->fd, .events = POLLIN | POLLRDHUP };

		if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP))) {
			host_eof(c);
			return EMIT_DONE;
		}
		/* An empty record: nothing a guest message can carry. */
		if (recv(hp(c)->fd, &x, sizeof(x), MSG_DONTWAIT) < 0)
			return host_read_error(c, errno);
		return EMIT_MORE;
	}
	if ((size_t)m > c->cr.peer_buf_alloc) {
		vsxb__vm_warn(vm, "connection %llu: host message of %zd bytes exceeds the "
			     "guest's buffer (%u): reset", (unsigned long long)c->id, m,
			     c->cr.peer_buf_alloc);
		vsxb__conn_why(c, VSXB_REASON_ERROR, EMSGSIZE);
		vsxb__conn_reset(c, false);
		return EMIT_DONE;
	}
	if ((size_t)m > credit) {
		/* A message goes whole; ask for the room rather than stall. */
		vsxb__conn_stall(c);
		if (!c->credit_req_sent) {
			c->credit_req_sent = true;
			vsxb__conn_ctrl(c, C_CREDIT_REQUEST);
		}
		return EMIT_DONE;
	}
	rc = vsxb__rx_reserve(c, (size_t)m, VSXB_RX_BATCH, true, &rx);
	if (rc == -ENOBUFS)
		return EMIT_NOBUF;
	if (rc == -EMSGSIZE) {
		vsxb__vm_warn(vm, "connection %llu: host message of %zd bytes does not "
			     "fit the guest's RX buffers: reset",
			     (unsigned long long)c->id, m);
		vsxb__conn_why(c, VSXB_REASON_ERROR, EMSGSIZE);
		vsxb__conn_reset(c, false);
		return EMIT_DONE;
	}
	r = host_read(c, &rx, m, &err, &flags);
	vsxb__rx_commit(c, &rx, r > 0 ? (size_t)r : 0, flags);
	if (r < 0) {
		if (err)
			return host_read_error(c, err);
		vsxb__conn_why(c, VSXB_REASON_ERROR, EIO);
		vsxb__conn_reset(c, false);
		return EMIT_DONE;
	}
	return EMIT_MORE;
}

int vsxb__host_emit(struct conn *c)
{
	struct vsxb_rx rx;
	unsigned flags;
	uint32_t credit;
	size_t want;
	ssize_t r;
	int err = 0;

	if (!hp(c)->readable || !host_can_read(c))
		return EMIT_DONE;
	credit = vsxb__conn_peer_free(c);
	if (!credit) {
		vsxb__conn_stall(c);
		return EMIT_DONE; /* the guest's next credit update resumes us */
	}
	if (c->type == VIRTIO_VSOCK_TYPE_SEQPACKET)
		return host_emit_seq(c, credit);

	/* More than one packet's worth per read: a host program writing 64 KiB
	 * at a time is then emptied by one readv (a short read), not one full
	 * read and one more that finds nothing. Straight from the socket into
	 * the guest's buffers. */
	want = credit < VSXB_RX_READ ? credit : VSXB_RX_READ;
	if (vsxb__rx_reserve(c, want, VSXB_RX_BATCH, false, &rx) < 0)
		return EMIT_NOBUF;
	r = host_read(c, &rx, 0, &err, &flags);
	vsxb__rx_commit(c, &rx, r > 0 ? (size_t)r : 0, flags);
	if (r < 0)
		return host_read_error(c, err);
	if (r == 0) {
		host_eof(c);
		return EMIT_DONE;
	}
	if ((size_t)r < rx.room) {
		/* A short read emptied the socket: wait for it again. */
		hp(c)->readable = false;
		host_watch(c);
		return EMIT_DONE;
	}
	return EMIT_MORE;
}

/* The socket of a connection the guest has not answered yet is readable:
 * either the program left (EOF, reset: give up on the guest now) or it sent
 * data early (keep it for later; stop watching until established). */
static void connecting_readable(struct conn *c)
{
	char b;
	ssize_t r = recv(hp(c)->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (r > 0) {
		hp(c)->early = true;
		host_watch(c);
		return;
	}
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	/* the other end of a socketpair may close it to refuse */
	vsxb__conn_why(c, hp(c)->close_refuses ? VSXB_REASON_REFUSED :
		       VSXB_REASON_HOST_CLOSED, 0);
	vsxb__conn_reset(c, false);
}

/* The other end accepted the connection the guest asked for (a forward's
 * connect, a handler's descriptor): ESTABLISHED, OPEN
 * reported, RESPONSE to the guest, the socket watched for data. */
void vsxb__host_accept(struct conn *c)
{
	vsxb__conn_timer(c, T_NONE, 0);
	c->state = VSXB_CONN_ESTABLISHED;
	vsxb__conn_opened(c);
	vsxb__conn_ctrl(c, C_RESPONSE);
	host_watch(c);
}

/* A forward's socket turned writable: connected, or refused. */
static void forward_connected(struct conn *c)
{
	socklen_t len = sizeof(int);
	int err = 0;

	if (getsockopt(hp(c)->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		vsxb__log(c->vm->r, VSXB_LOG_DEBUG, "vm %s: guest port %u -> vsock %u:%u: %s",
			 c->vm->name, c->guest_port, c->vm->forward_cid, c->peer_port,
			 strerror(err));
		vsxb__conn_why(c, VSXB_REASON_REFUSED, err);
		vsxb__conn_reset(c, false);
		return;
	}
	hp(c)->pending = false;
	vsxb__host_accept(c);
}

static void host_cb(int fd, int events, void *arg)
{
	struct conn *c = arg;
	struct vsxb_shard *sh = c->vm->sh;

	(void)fd;
	if (!c->dead && hp(c)->pending) {
		forward_connected(c);
		vsxb__round_owe(sh);
		return;
	}
	if (!c->dead && c->state == VSXB_CONN_CONNECTING && (events & VSXU_EV_READ)) {
		connecting_readable(c);
		vsxb__round_owe(sh);
		return;
	}
	if (events & VSXU_EV_WRITE)
		host_flush(c);
	if (!c->dead && (events & VSXU_EV_READ)) {
		hp(c)->readable = true;
		vsxb__host_sync(c);
	}
	vsxb__round_owe(sh);
}

/*
 * Let the kernel hold a whole credit window of guest data for the host
 * program. A Unix stream socket's send buffer is net.core.wmem_default
 * (about 208 KiB) unless raised: less than even the default 256 KiB
 * window, so vsxd would queue the rest of each window itself (a copy),
 * arm the write watch and wait for the program to drain the socket before
 * it can write again (at 64 KiB writes and 256 KiB windows that was 2.2
 * epoll_ctl per MiB, 18 % more sendmsg and 10 % more CPU per GiB than
 * with the window in the kernel; bench/README.md), and a 1 MiB window
 * would move less than a 256 KiB one. So the Unix socket of every
 * connection gets SO_SNDBUF = buf_alloc: only raised, never lowered, and
 * capped by net.core.wmem_max like any SO_SNDBUF (the kernel doubles what
 * it is given, so wmem_max's default 208 KiB still holds a 256 KiB
 * window). Other sockets (TCP, handed over by forwards) keep theirs: TCP
 * sizes its own buffer and setting SO_SNDBUF would switch that off. Best
 * effort: a failure leaves the buffer as it was, only slower.
 */
void vsxb__host_size_sndbuf(struct conn *c)
{
	int domain, cur, want;
	socklen_t len = sizeof(domain);

	if (hp(c)->fd < 0 ||
	    c->cr.buf_alloc > INT32_MAX / 2 ||
	    getsockopt(hp(c)->fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
	    domain != AF_UNIX)
		return;
	len = sizeof(cur);
	want = (int)c->cr.buf_alloc;
	/* the kernel doubles what it is given (for its bookkeeping) and
	 * reports the doubled figure */
	if (getsockopt(hp(c)->fd, SOL_SOCKET, SO_SNDBUF, &cur, &len) < 0 || cur >= 2 * want)
		return;
	setsockopt(hp(c)->fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
}

int vsxb__host_attach(struct conn *c, int fd)
{
	const struct vsxu_loop *l = vm_loop(c->vm);

	hp(c)->fd = fd;
	vsxb__host_size_sndbuf(c);
	hp(c)->w = l->watch(l->ctx, fd, 0, host_cb, c);
	if (!hp(c)->w)
		return -ENOMEM;
	hp(c)->wev = 0;
	host_watch(c);
	return 0;
}

int vsxb__host_established(struct conn *c)
{
	char line[VSX_HYBRID_OK_MAX];
	int n;
	ssize_t w;

	if (hp(c)->hybrid) {
		n = snprintf(line, sizeof(line), "OK %u\n", c->peer_port);
		w = send(hp(c)->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w != n) {
			/* the program went away before the guest accepted (or
			 * a full new socket) */
			vsxb__conn_why(c, VSXB_REASON_HOST_CLOSED, 0);
			return -EIO;
		}
		hp(c)->hybrid = false;
	}
	host_watch(c);
	return 0;
}

void vsxb__host_guest_shutdown(struct conn *c, unsigned flags)
{
	(void)flags;
	host_guest_shut(c);
	/* The guest is done: RST (as Linux answers), the host side drains. */
	if (c->guest_shut == VSXB_SHUT_BOTH)
		vsxb__conn_answer_rst(c);
}

/* The guest side is over: what the guest sent before still goes to the
 * host, unless it never got that far. */
void vsxb__host_gone(struct conn *c)
{
	if (hp(c)->fd >= 0 && c->q.bytes && !hp(c)->wr_dead &&
	    c->state != VSXB_CONN_CONNECTING)
		host_drain(c);
	else
		vsxb__conn_kill(c);
}

/* A connection to a host socket (@vsock: an AF_VSOCK one, peer kind
 * "vsock"); its socket comes with vsxb__host_attach. */
static struct conn *host_new(struct vsxb_vm *vm, bool vsock, uint16_t type,
			     uint32_t guest_port, uint32_t host_port)
{
	struct conn *c = vsxb__conn_new(vm, &host_ops, type, guest_port,
					VSOCK_CID_HOST, host_port);

	if (!c)
		return NULL;
	hp(c)->fd = -1;
	if (vsock)
		c->peer_kind = "vsock";
	return c;
}

/* The connection of the guest's REQUEST @h, to be served on @fd (taken:
 * closed when no connection could be made; NULL then). */
static struct conn *host_guest_new(struct vsxb_vm *vm, bool vsock,
				   const struct virtio_vsock_hdr *h, int fd)
{
	struct conn *c = host_new(vm, vsock, h->type, h->src_port, h->dst_port);

	if (!c) {
		close(fd);
		return NULL;
	}
	c->guest_initiated = true;
	c->cr.peer_buf_alloc = h->buf_alloc;
	c->cr.peer_fwd_cnt = h->fwd_cnt;
	return c;
}

/* No connection for the guest's REQUEST @h (errno @err): refused, RST. */
static void host_guest_refuse(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h, int err)
{
	vsxb__refuse(vm, h->type, h->src_port, VSOCK_CID_HOST, h->dst_port, true,
		    err == ENOMEM ? VSXB_REASON_ERROR : VSXB_REASON_REFUSED, err, 0);
	vsxb__orphan_rst(vm, h);
}

void vsxb__host_connect(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h)
{
	bool seq = h->type == VIRTIO_VSOCK_TYPE_SEQPACKET;
	struct sockaddr_un un;
	char path[sizeof(un.sun_path) + 16];
	struct conn *c;
	int fd, err = ENOENT;

	if (!vm->uds_path)
		goto refuse;
	snprintf(path, sizeof(path), "%s_%u", vm->uds_path, h->dst_port);
	if (vsx__unix_addr(&un, path) < 0) {
		err = ENAMETOOLONG;
		goto refuse;
	}
	fd = socket(AF_UNIX, (seq ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = errno;
		vsxb__vm_warn(vm, "connect to host port %u: socket: %s", h->dst_port,
			     strerror(errno));
		goto refuse;
	}
	if (connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		err = errno;
		vsxb__log(vm->r, VSXB_LOG_DEBUG, "vm %s: guest port %u -> host port %u: "
			 "%s: %s", vm->name, h->src_port, h->dst_port, path,
			 strerror(errno));
		close(fd);
		goto refuse;
	}
	c = host_guest_new(vm, false, h, fd);
	if (!c) {
		err = ENOMEM;
		goto refuse;
	}
	c->state = VSXB_CONN_ESTABLISHED;
	if (vsxb__host_attach(c, fd) < 0) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
		return;
	}
	vsxb__conn_opened(c);
	vsxb__conn_ctrl(c, C_RESPONSE);
	host_watch(c);
	return;
refuse:
	host_guest_refuse(vm, h, err);
}

/* ---- Forwards to the host kernel's vsock (forward-cid) ---- */

void vsxb__host_forward(struct vsxb_vm *vm, const struct virtio_vsock_hdr *h)
{
	struct conn *c;
	int fd, err;

	if (h->type != VIRTIO_VSOCK_TYPE_STREAM) {
		err = EPROTOTYPE;
		goto refuse;
	}
	fd = vm->forward_connect(vm->forward_arg, vm->forward_cid, h->dst_port);
	if (fd < 0) {
		err = -fd;
		vsxb__log(vm->r, VSXB_LOG_DEBUG, "vm %s: guest port %u -> vsock %u:%u: %s",
			 vm->name, h->src_port, vm->forward_cid, h->dst_port,
			 strerror(err));
		goto refuse;
	}
	c = host_guest_new(vm, true, h, fd);
	if (!c) {
		err = ENOMEM;
		goto refuse;
	}
	hp(c)->pending = true;
	if (vsxb__host_attach(c, fd) < 0) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_reset(c, false);
		return;
	}
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	return;
refuse:
	host_guest_refuse(vm, h, err);
}

/* ---- Host ports ---- */

static bool host_port_used(struct vsxb_vm *vm, uint32_t gport, uint32_t p)
{
	struct vsxb_list *n;

	if (vsxb__conn_find(vm, gport, VSOCK_CID_HOST, p))
		return true;
	if (!vm->host_port_wrapped)
		return false;
	for (n = vm->conns.next; n != &vm->conns; n = n->next) {
		struct conn *c = vsxb_container_of(n, struct conn, node);

		if (!c->dead && c->peer_cid == VSOCK_CID_HOST && c->peer_port == p)
			return true;
	}
	return false;
}

static uint32_t host_port_alloc(struct vsxb_vm *vm, uint32_t gport)
{
	uint32_t p;

	for (;;) {
		p = vm->next_host_port++;
		if (vm->next_host_port >= UINT32_MAX ||
		    vm->next_host_port < VSXB_HOST_PORT_FIRST) {
			vm->next_host_port = VSXB_HOST_PORT_FIRST;
			vm->host_port_wrapped = true;
		}
		if (p >= VSXB_HOST_PORT_FIRST && !host_port_used(vm, gport, p))
			return p; /* at most VSXB_DEFAULT_MAX_CONNS_PER_VM ports are in use */
	}
}

/* A guest REQUEST to a port with a handler: the connection waits,
 * CONNECTING, for the handler's descriptor (attach_fd, through
 * vsxb_router_conn_attach_fd) or the connect timer's RST. */
void vsxb__host_port_request(struct vsxb_vm *vm, struct vsxb_port *p,
			    const struct virtio_vsock_hdr *h)
{
	struct conn *c;
	int rc;

	if (h->type != VIRTIO_VSOCK_TYPE_STREAM) {
		vsxb__orphan_rst(vm, h);
		return;
	}
	c = host_new(vm, false, h->type, h->src_port, h->dst_port);
	if (!c) {
		vsxb__orphan_rst(vm, h);
		return;
	}
	c->guest_initiated = true;
	c->cr.peer_buf_alloc = h->buf_alloc;
	c->cr.peer_fwd_cnt = h->fwd_cnt;
	memcpy(c->tag, p->tag, sizeof(c->tag));
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	if (vm->sh->foreign) {
		/* the handler is the host program's: on its (control) thread */
		vsxb__port_post(vm, p, c, h);
		return;
	}
	rc = p->cb(p->arg, vm, c->id, h->src_port, h->dst_port);
	if (rc < 0 && !c->dead) {
		vsxb__conn_why(c, VSXB_REASON_REFUSED, -rc);
		vsxb__conn_reset(c, false);
	}
}

/* ---- Descriptors handed over (vsxd forwards, backend.h) ---- */

static int host_attach_fd(struct conn *c, int fd)
{
	if (c->dead || !c->guest_initiated ||
	    c->state != VSXB_CONN_CONNECTING || hp(c)->fd >= 0)
		return -ENOENT;
	if (vsx__set_nonblock(fd, true) < 0 || vsxb__host_attach(c, fd) < 0) {
		hp(c)->fd = -1;
		return -ENOMEM;
	}
	vsxb__host_accept(c);
	return 0;
}

static bool is_vsock(int fd)
{
	socklen_t len = sizeof(int);
	int domain;

	return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
	       domain == AF_VSOCK;
}

int vsxb__host_connect_fd(struct vsxb_vm *vm, int fd, uint32_t port, const char *tag,
			 uint64_t *id)
{
	struct conn *c;

	if (!vm->live || vm->broken || vm->freeing) {
		close(fd);
		return -EHOSTDOWN;
	}
	if (vsx__set_nonblock(fd, true) < 0) {
		close(fd);
		return -EINVAL;
	}
	c = host_new(vm, is_vsock(fd), VIRTIO_VSOCK_TYPE_STREAM,
		     port, host_port_alloc(vm, port));
	if (!c) {
		close(fd);
		return -EBUSY;
	}
	vsxb__set_tag(c->tag, tag);
	if (vsxb__host_attach(c, fd) < 0) {
		vsxb__conn_kill(c);   /* closes @fd */
		return -ENOMEM;
	}
	if (id)
		*id = c->id;
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	vsxb__conn_ctrl(c, C_REQUEST);
	return 0;
}

/* ---- Hybrid connections (uds.c hands them over) ---- */

void vsxb__host_hybrid(struct vsxb_vm *vm, int fd, uint32_t port)
{
	struct conn *c;
	int lim = vsxb__conn_limit(vm, 1);

	if (lim) {
		/* closed without "OK": the program sees a refusal */
		vsxb__refuse(vm, VIRTIO_VSOCK_TYPE_STREAM, port, VSOCK_CID_HOST,
			    VSXB_PORT_UNKNOWN, false, VSXB_REASON_LIMIT, 0, lim);
		close(fd);
		return;
	}
	c = host_new(vm, false, VIRTIO_VSOCK_TYPE_STREAM, port,
		     host_port_alloc(vm, port));
	if (!c) {
		vsxb__refuse(vm, VIRTIO_VSOCK_TYPE_STREAM, port, VSOCK_CID_HOST,
			    VSXB_PORT_UNKNOWN, false, VSXB_REASON_ERROR, ENOMEM, 0);
		close(fd);
		return;
	}
	hp(c)->hybrid = true;
	if (vsxb__host_attach(c, fd) < 0) {
		vsxb__conn_why(c, VSXB_REASON_ERROR, ENOMEM);
		vsxb__conn_kill(c);
		return;
	}
	vsxb__conn_timer(c, T_CONNECT, vm->r->lim.connect_ms);
	vsxb__conn_ctrl(c, C_REQUEST);
}

/* ---- Kept across a live handoff (restart.c) ---- */

int vsxb__host_keepable(const struct conn *c, struct vsxb_conn_keep *k)
{
	const struct host_peer *h;

	if (c->ops != &host_ops)
		return -1;
	h = hp(c);
	k->vsock = !strcmp(c->peer_kind, "vsock");
	if (c->dead || h->pending || c->peer_cid != VSOCK_CID_HOST)
		return -1;
	/* lingering: vsxd shut it down both ways (the program closed, or
	 * vsxctl close) and waits for the guest's RST, its SHUTDOWN perhaps
	 * still owed; the socket may be closed already (the program's
	 * end went): kept without one then */
	if (c->tkind == T_LINGER && c->state == VSXB_CONN_CLOSING && !c->draining &&
	    !h->hybrid && !h->early && !(c->ctrl & C_RST) &&
	    (c->host_shut | c->shut_pending) == VSXB_SHUT_BOTH) {
		k->host_flags = VSXB_KEEP_HOST_LINGER | (h->eof ? VSXB_KEEP_HOST_EOF : 0) |
			 (h->wr_shut ? VSXB_KEEP_HOST_WR_SHUT : 0) |
			 (h->wr_dead ? VSXB_KEEP_HOST_WR_DEAD : 0);
		return h->fd;
	}
	if (h->fd < 0)
		return -1;
	/* draining: the guest side is over (it had its RST), what it sent
	 * still goes to the socket for what is left of the linger time */
	if (c->draining) {
		if (c->tkind != T_DRAIN || !c->q.bytes || h->wr_dead)
			return -1;
		k->host_flags = VSXB_KEEP_HOST_DRAIN | (h->eof ? VSXB_KEEP_HOST_EOF : 0) |
			 (h->wr_shut ? VSXB_KEEP_HOST_WR_SHUT : 0);
		return h->fd;
	}
	/* a hybrid program waiting for its "OK": the guest has the REQUEST
	 * (or gets it from the next process), its answer goes there. What
	 * the program sent after its CONNECT line (early) is still in the
	 * socket (connecting_readable only peeks): it goes along, and the
	 * next process finds it there as this one did */
	if (c->state == VSXB_CONN_CONNECTING && h->hybrid && c->tkind == T_CONNECT &&
	    !c->guest_initiated && strcmp(c->peer_kind, "vsock")) {
		k->host_flags = VSXB_KEEP_HOST_HYBRID;
		return h->fd;
	}
	/* what else is half done (a connect, a timer) is not carried
	 * over: it ends */
	if (c->tkind != T_NONE || h->hybrid || h->early ||
	    c->state == VSXB_CONN_CONNECTING)
		return -1;
	k->host_flags = (h->eof ? VSXB_KEEP_HOST_EOF : 0) |
		 (h->wr_shut ? VSXB_KEEP_HOST_WR_SHUT : 0) |
		 (h->wr_dead ? VSXB_KEEP_HOST_WR_DEAD : 0);
	return h->fd;
}

struct conn *vsxb__host_restore(struct vsxb_vm *vm, const struct vsxb_conn_keep *k)
{
	struct conn *c = host_new(vm, k->vsock, (uint16_t)k->type,
				  k->guest_port, k->peer_port);

	if (!c)
		return NULL;
	hp(c)->eof = k->host_flags & VSXB_KEEP_HOST_EOF;
	hp(c)->wr_shut = k->host_flags & VSXB_KEEP_HOST_WR_SHUT;
	hp(c)->wr_dead = k->host_flags & VSXB_KEEP_HOST_WR_DEAD;
	hp(c)->hybrid = k->host_flags & VSXB_KEEP_HOST_HYBRID;
	/* (a lingering one without its socket: as host_eof's close left
	 * it, fd -1) */
	if (k->host_flags & VSXB_KEEP_HOST_DRAIN) {
		/* as host_drain left it: packets on its address are a
		 * stranger's (RST), whatever a new connection of the guest
		 * on the same one does */
		vsxb__conn_unhash(c);
		c->draining = true;
	}
	return c;
}

/* A control close is the engine's (its SHUTDOWNs; the socket follows
 * through sync); a reset or a kill closes the socket. */
static bool host_end(struct conn *c, enum vsxb_end how)
{
	switch (how) {
	case VSXB_END_CLOSE:
		return false;
	case VSXB_END_GONE:
		vsxb__host_gone(c);
		return true;
	case VSXB_END_RESET:
	case VSXB_END_RELEASE:
		vsxb__host_close(c);
		return true;
	}
	return false;
}

static const struct vsxb_peer_ops host_ops = {
	.name = "host",
	.priv_size = sizeof(struct host_peer),
	/* Guest -> peer */
	.rw = vsxb__host_rw,
	.gather = vsxb__host_gather,
	.guest_shutdown = vsxb__host_guest_shutdown,
	.credit_changed = vsxb__host_sync,
	.established = vsxb__host_established,
	/* Peer -> guest */
	.emit = vsxb__host_emit,
	.sync = vsxb__host_sync,
	/* Credit */
	.set_buffer = vsxb__host_size_sndbuf,
	/* End */
	.end = host_end,
	/* Control */
	.attach_fd = host_attach_fd,
};
