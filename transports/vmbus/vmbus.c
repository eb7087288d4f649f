/*
 * The Hyper-V transport ("vmbus"): hv_sock, the Linux kernel's AF_VSOCK
 * transport in a Hyper-V or WSL2 guest, with every difference from
 * virtio-vsock either hidden or refused with a reason.
 *
 * What hv_sock does differently, read in Linux net/vmw_vsock/
 * hyperv_transport.c and af_vsock.c, and what this file does about it:
 *
 *  - Peers: the host only (hvs_stream_allow accepts VMADDR_CID_HOST and
 *    nothing else). A connect to any other CID is refused here, before any
 *    socket exists, with -ENETUNREACH and a message saying why. A guest
 *    listens on vsock:any:PORT: its own CID means nothing to hv_sock.
 *  - Addresses: the host sees service GUIDs, PORT-facb-11e6-bd58-64006a7986d3
 *    (srv_id_template); hvsock:GUID addresses are turned into that port
 *    (guid.c). A GUID outside the template cannot be reached from Linux:
 *    -EINVAL.
 *  - Types: stream only. There is no seqpacket_allow, so SEQPACKET is
 *    refused here, before any socket exists, with -ESOCKTNOSUPPORT.
 *  - No MSG_PEEK (hvs_stream_dequeue returns -EOPNOTSUPP): nothing in the
 *    vmbus path peeks; receives are plain reads.
 *  - MTU: a VMBus packet carries at most HVS_MTU_SIZE (16 KiB) of payload
 *    and a send moves what the ring has room for, so a send returns short.
 *    vmb_send hands the kernel at most 16 KiB per call and loops until all
 *    is written or the socket would block.
 *  - Buffers: the rings are sized once, when the VMBus channel opens
 *    (hvs_open_connection), from the socket's sk_sndbuf/sk_rcvbuf:
 *        ring = PAGE_ALIGN(clamp(sk_buf, RINGBUFFER_HVS_{SND,RCV}_SIZE,
 *                                RINGBUFFER_HVS_MAX_SIZE))
 *    with the minimum 6 pages (24 KiB) and the maximum 64 pages (256 KiB).
 *    SO_VM_SOCKETS_BUFFER_SIZE is ignored by hv_sock. The knob is therefore
 *    SO_RCVBUF (VSX_RX) and SO_SNDBUF (VSX_TX), set before connect or on a
 *    listener; the kernel doubles the value it is given (sock_setsockopt), so
 *    half the wanted ring is asked for. For an accepted connection the
 *    kernel reads the listener's buffers, so accepted sockets inherit them.
 *    What vsx_get_buffer reports is computed with the kernel's own rule from
 *    the buffer value the kernel itself holds (read back with getsockopt):
 *    after connect from the socket, for an accepted socket from its
 *    listener, for a listener from the listener (the next connection's).
 *    Kernels before 5.3 used 6 pages whatever was asked; this is taken
 *    from the running kernel's release. Two limits libvsx cannot lift:
 *    since 5.5, connect() resets a client socket's buffers to 6 pages
 *    (hvs_sock_init runs when connect assigns the transport), so
 *    guest-initiated connections get 24 KiB rings whatever is asked (the
 *    read-back shows it); and on hosts older than VMBus protocol 5.0 the
 *    kernel uses 6 pages, which user space cannot see.
 *    A connected socket's rings never change: vsx_set_buffer returns
 *    -EISCONN, or, with VSX_O_BUFFER_NEXT, keeps the size for the next
 *    connection (see vmb_defer).
 *  - Close: since 5.1 close(2) returns at once and the kernel waits
 *    HVS_CLOSE_TIMEOUT (8 s) for the host in the background; before, it
 *    could block until the host closed. The core's bounded close (shut down
 *    sending, wait for the peer up to the linger time) runs as everywhere;
 *    on the old kernels the final close(2) of a connected socket is done on
 *    a detached thread, so vsx_close never hangs.
 *
 * Every socket call goes through vsx__vmbus_sys (vmbus-sys.h): the kernel
 * in libvsx, the hv_sock simulator in the tests.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "vsx-int.h"
#include "vmbus-sys.h"

#define HVS_PAGE 4096u                         /* HV_HYP_PAGE_SIZE */
#define HVS_RING_DEFAULT (6 * HVS_PAGE)        /* RINGBUFFER_HVS_{SND,RCV}_SIZE */
#define HVS_RING_MAX (64 * HVS_PAGE)           /* RINGBUFFER_HVS_MAX_SIZE */
#define HVS_MTU (16 * 1024)                    /* HVS_MTU_SIZE */

const struct vmbus_sys *vsx__vmbus_sys = &vsx__vmbus_sys_kernel;

/* What the running kernel's hv_sock does, from its release. */
struct vmb_kernel {
	int fixed_rings;    /* before 5.3: 6 pages each way, whatever is asked */
	int close_blocks;   /* before 5.1: close(2) waits for the host */
};

/* A listener and the sockets it accepted share this, so that a deferred
 * buffer change on an accepted socket can reach the listener. */
struct vmb_share {
	pthread_mutex_t lock;
	int refs;
	int lfd;                        /* the listener's fd; -1 once closed */
	const struct vmbus_sys *sys;
};

/* Per-socket state (s->trans), owned here. */
struct vmb {
	const struct vmbus_sys *sys;    /* the table the socket was opened with */
	struct vmb_kernel k;
	int listener;
	int open;                       /* the channel is open: rings fixed */
	size_t ring_rx, ring_tx;        /* valid when open */
	int hvsock;                     /* addressed by GUID: show GUIDs */
	struct vmb_share *share;        /* listener, or the one we came from */
};

/* VSX_O_BUFFER_NEXT on a socket whose listener is gone (or that never had
 * one): the size waits here for the next vsx_connect() through vmbus that
 * does not ask for a size itself. */
static struct {
	pthread_mutex_t lock;
	size_t rx, tx;
} next_conn = { PTHREAD_MUTEX_INITIALIZER, 0, 0 };

/* ---- The ring rule ------------------------------------------------------ */

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : HVS_PAGE;
}

static size_t page_align(size_t v)
{
	size_t p = page_size();

	return (v + p - 1) / p * p;
}

static size_t clamp_ring(size_t v)
{
	if (v < HVS_RING_DEFAULT)
		v = HVS_RING_DEFAULT;
	if (v > HVS_RING_MAX)
		v = HVS_RING_MAX;
	return page_align(v);
}

/* The ring the kernel opens a channel with, from the socket buffer it reads. */
static size_t ring_for(const struct vmb_kernel *k, int sk_buf)
{
	if (k->fixed_rings)
		return HVS_RING_DEFAULT;
	return clamp_ring(sk_buf > 0 ? (size_t)sk_buf : 0);
}

static void kernel_rules(const struct vmbus_sys *sys, struct vmb_kernel *k)
{
	unsigned maj = 0, min = 0, ver;
	char rel[128];

	memset(k, 0, sizeof(*k));
	if (sys->kernel_release(rel, sizeof(rel)) < 0 ||
	    sscanf(rel, "%u.%u", &maj, &min) != 2)
		return; /* unknown: a current kernel */
	ver = maj * 1000 + min;
	k->close_blocks = ver < 5001;
	k->fixed_rings = ver < 5003;
}

static int buf_opt(int which)
{
	return which == VSX_RX ? SO_RCVBUF : SO_SNDBUF;
}

static int read_buf(const struct vmb *v, int fd, int which, int *val)
{
	socklen_t len = sizeof(*val);

	if (v->sys->getsockopt(fd, SOL_SOCKET, buf_opt(which), val, &len) < 0)
		return vsx__errno(which == VSX_RX ? "vmbus: SO_RCVBUF" : "vmbus: SO_SNDBUF");
	return 0;
}

/* Ask for the ring that holds @bytes: the kernel doubles what it is given. */
static int write_buf(const struct vmb *v, int fd, int which, size_t bytes)
{
	int val = (int)(clamp_ring(bytes) / 2);

	if (v->sys->setsockopt(fd, SOL_SOCKET, buf_opt(which), &val, sizeof(val)) < 0)
		return vsx__errno(which == VSX_RX ? "vmbus: SO_RCVBUF" : "vmbus: SO_SNDBUF");
	return 0;
}

static int write_bufs(const struct vmb *v, int fd, size_t rx, size_t tx)
{
	int rc = 0;

	if (rx)
		rc = write_buf(v, fd, VSX_RX, rx);
	if (!rc && tx)
		rc = write_buf(v, fd, VSX_TX, tx);
	return rc;
}

/* The channel opened with the buffers of @fd (the socket, or its listener). */
static int fix_rings(struct vmb *v, int fd)
{
	int rx, tx, rc;

	rc = read_buf(v, fd, VSX_RX, &rx);
	if (!rc)
		rc = read_buf(v, fd, VSX_TX, &tx);
	if (rc)
		return rc;
	v->ring_rx = ring_for(&v->k, rx);
	v->ring_tx = ring_for(&v->k, tx);
	v->open = 1;
	return 0;
}

/* ---- State -------------------------------------------------------------- */

static struct vmb *vmb_new(vsx_sock *s)
{
	struct vmb *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	v->sys = vsx__vmbus_sys;
	kernel_rules(v->sys, &v->k);
	s->trans = v;
	return v;
}

static void share_put(struct vmb_share *sh)
{
	int last;

	pthread_mutex_lock(&sh->lock);
	last = --sh->refs == 0;
	pthread_mutex_unlock(&sh->lock);
	if (last) {
		pthread_mutex_destroy(&sh->lock);
		free(sh);
	}
}

struct closer {
	const struct vmbus_sys *sys;
	int fd;
};

static void *closer_main(void *arg)
{
	struct closer c = *(struct closer *)arg;

	free(arg);
	c.sys->close(c.fd);
	return NULL;
}

/* close(2) on a kernel where it may wait for the host: not on our time. */
static void close_detached(const struct vmbus_sys *sys, int fd)
{
	struct closer *c = malloc(sizeof(*c));
	pthread_attr_t attr;
	pthread_t th;
	int rc = -1;

	if (c && pthread_attr_init(&attr) == 0) {
		c->sys = sys;
		c->fd = fd;
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&th, &attr, closer_main, c);
		pthread_attr_destroy(&attr);
	}
	if (rc != 0) {
		free(c);
		sys->close(fd); /* no thread to be had: this may wait */
	}
}

static void vmb_destruct(vsx_sock *s)
{
	struct vmb *v = s->trans;

	if (!v)
		return;
	if (v->share) {
		if (v->listener) {
			pthread_mutex_lock(&v->share->lock);
			v->share->lfd = -1;
			pthread_mutex_unlock(&v->share->lock);
		}
		share_put(v->share);
	}
	if (s->fd >= 0) {
		if (v->open && v->k.close_blocks)
			close_detached(v->sys, s->fd);
		else
			v->sys->close(s->fd);
		s->fd = -1;
	}
	free(v);
	s->trans = NULL;
}

/* ---- Addresses ---------------------------------------------------------- */

static void to_addr(const struct sockaddr_vm *sa, int hvsock, struct vsx_addr *a)
{
	memset(a, 0, sizeof(*a));
	a->port = sa->svm_port;
	if (hvsock) {
		a->kind = VSX_ADDR_HVSOCK;
		a->cid = VSX_CID_HOST;
		vsx_guid_from_port(sa->svm_port, a->guid);
	} else {
		a->kind = VSX_ADDR_VSOCK;
		a->cid = sa->svm_cid;
	}
}

/* The port an hvsock: address names, or why there is none. */
static int guid_port(const struct vsx_addr *a, uint32_t *port)
{
	char text[VSX_GUID_STRLEN];

	if (!vsx__guid_is_service(a->guid)) {
		vsx_guid_format(a->guid, 0, text, sizeof(text));
		return vsx__err(-EINVAL, "vmbus: service GUID %s is not of the hv_sock form "
				"XXXXXXXX-facb-11e6-bd58-64006a7986d3; a Linux guest can only "
				"use services whose GUID carries a port", text);
	}
	*port = a->port;
	return 0;
}

/* Everything that can be refused without a socket. */
static int check_common(vsx_sock *s, const struct vsx_addr *a,
			const struct vsx_opts *o, const char *what)
{
	struct vsx_probe p;

	if (s->type != SOCK_STREAM)
		return vsx__err(-ESOCKTNOSUPPORT, "vmbus: Hyper-V sockets are stream "
				"sockets only; hv_sock has no SEQPACKET");
	if (a->kind == VSX_ADDR_HVSOCK && !o->transport && vsx_probe(&p) == 0 &&
	    !(p.have & VSX_HAVE_VMBUS))
		return vsx__err(-ENODEV, "vmbus: cannot %s an hvsock: address: this machine "
				"is not a Hyper-V guest (no VMBus devices in sysfs)", what);
	return 0;
}

static int check_peer(vsx_sock *s, const struct vsx_addr *a,
		      const struct vsx_opts *o, uint32_t *port)
{
	int rc = check_common(s, a, o, "connect to");

	if (rc < 0)
		return rc;
	if (a->kind == VSX_ADDR_HVSOCK) {
		rc = guid_port(a, port);
		if (rc < 0)
			return rc;
	} else {
		if (a->cid == VSX_CID_ANY)
			return vsx__err(-EINVAL, "vmbus: cannot connect to CID 'any'; the "
					"peer of a Hyper-V guest is the host, vsock:host:PORT");
		if (a->cid != VSX_CID_HOST)
			return vsx__err(-ENETUNREACH, "vmbus: CID %u is not the host: Hyper-V "
					"sockets (hv_sock) connect a guest to its host only, "
					"never to another VM or to this machine (vsock:host:PORT "
					"or hvsock:GUID)", a->cid);
		*port = a->port;
	}
	if (*port == VSX_PORT_ANY)
		return vsx__err(-EINVAL, "vmbus: cannot connect to port 'any'");
	return 0;
}

/* ---- Connections -------------------------------------------------------- */

static int open_socket(vsx_sock *s, struct vmb *v)
{
	s->fd = v->sys->socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd >= 0)
		return 0;
	if (errno == EAFNOSUPPORT)
		return vsx__err(-ENODEV, "vmbus: this kernel has no AF_VSOCK "
				"(load the vsock and hv_sock modules)");
	return vsx__errno("vmbus: socket");
}

/* The size for one direction: the caller's, else one deferred earlier. */
static size_t take_next(size_t asked, size_t *next)
{
	size_t v = asked;

	if (!v) {
		v = *next;
		*next = 0;
	}
	return v;
}

/* Blocking connect bounded by the kernel's SO_VM_SOCKETS_CONNECT_TIMEOUT;
 * interrupted attempts restart with what is left. Returns 0 or an errno. */
static int connect_until(vsx_sock *s, struct vmb *v, const struct sockaddr_vm *sa)
{
	int64_t deadline = vsx__now_ms() + s->connect_timeout_ms, left;
	struct timeval tv;

	for (;;) {
		left = deadline - vsx__now_ms();
		if (left <= 0)
			return ETIMEDOUT;
		tv.tv_sec = (time_t)(left / 1000);
		tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
		v->sys->setsockopt(s->fd, AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv,
				   sizeof(tv));
		if (v->sys->connect(s->fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
			return 0;
		if (errno == EISCONN)
			return 0;
		if (errno != EINTR)
			return errno;
	}
}

static int vmb_connect(vsx_sock *s, const struct vsx_addr *a,
		       const struct vsx_opts *o)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = VSX_CID_HOST };
	socklen_t len = sizeof(sa);
	size_t rx, tx;
	struct vmb *v;
	uint32_t port = 0;
	int rc, err;

	rc = check_peer(s, a, o, &port);
	if (rc < 0)
		return rc;
	v = vmb_new(s);
	if (!v)
		return vsx__err(-ENOMEM, "out of memory");
	v->hvsock = a->kind == VSX_ADDR_HVSOCK;
	rc = open_socket(s, v);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&next_conn.lock);
	rx = take_next(s->rx_buffer, &next_conn.rx);
	tx = take_next(s->tx_buffer, &next_conn.tx);
	pthread_mutex_unlock(&next_conn.lock);
	rc = write_bufs(v, s->fd, rx, tx);
	if (rc < 0)
		return rc;

	sa.svm_port = port;
	err = connect_until(s, v, &sa);
	if (err == ETIMEDOUT)
		return vsx__err(-ETIMEDOUT, "vmbus: the host did not answer for port %u "
				"(service %08x-facb-11e6-bd58-64006a7986d3) within %d ms: no "
				"service registered or listening there", port, port,
				s->connect_timeout_ms);
	if (err == ECONNRESET || err == ECONNREFUSED)
		return vsx__err(-ECONNREFUSED, "vmbus: the host refused port %u", port);
	if (err == ENETUNREACH || err == ENODEV || err == EHOSTUNREACH)
		return vsx__err(-ENETUNREACH, "vmbus: the kernel has no hv_sock transport "
				"to the host (%s)", strerror(err));
	if (err == ESOCKTNOSUPPORT)
		return vsx__err(-ESOCKTNOSUPPORT, "vmbus: socket type not supported");
	if (err)
		return vsx__err(-err, "vmbus: connect to port %u: %s", port, strerror(err));
	rc = fix_rings(v, s->fd);
	if (rc < 0)
		return rc;
	if (s->flags & VSX_O_NONBLOCK)
		vsx__set_nonblock(s->fd, 1);
	if (v->sys->getsockname(s->fd, (struct sockaddr *)&sa, &len) == 0)
		to_addr(&sa, v->hvsock, &s->local);
	return 0;
}

static int vmb_listen(vsx_sock *s, const struct vsx_addr *a,
		      const struct vsx_opts *o)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = VSX_CID_ANY };
	socklen_t len = sizeof(sa);
	struct vmb_share *sh;
	struct vmb *v;
	int rc;

	rc = check_common(s, a, o, "listen on");
	if (rc < 0)
		return rc;
	if (a->kind == VSX_ADDR_HVSOCK) {
		rc = guid_port(a, &sa.svm_port);
		if (rc < 0)
			return rc;
	} else {
		if (a->cid != VSX_CID_ANY)
			return vsx__err(-EADDRNOTAVAIL, "vmbus: a Hyper-V guest listens on "
					"vsock:any:PORT; hv_sock gives the guest no CID of its "
					"own to bind (CID %u)", a->cid);
		sa.svm_port = a->port;
	}
	v = vmb_new(s);
	if (!v)
		return vsx__err(-ENOMEM, "out of memory");
	v->listener = 1;
	v->hvsock = a->kind == VSX_ADDR_HVSOCK;
	rc = open_socket(s, v);
	if (rc < 0)
		return rc;
	sh = calloc(1, sizeof(*sh));
	if (!sh)
		return vsx__err(-ENOMEM, "out of memory");
	pthread_mutex_init(&sh->lock, NULL);
	sh->refs = 1;
	sh->lfd = s->fd;
	sh->sys = v->sys;
	v->share = sh;
	rc = write_bufs(v, s->fd, s->rx_buffer, s->tx_buffer);
	if (rc < 0)
		return rc;
	if (v->sys->bind(s->fd, (const struct sockaddr *)&sa, sizeof(sa)) < 0)
		return vsx__errno("vmbus: bind");
	if (v->sys->listen(s->fd, s->backlog) < 0)
		return vsx__errno("vmbus: listen");
	if (s->flags & VSX_O_NONBLOCK)
		vsx__set_nonblock(s->fd, 1);
	if (v->sys->getsockname(s->fd, (struct sockaddr *)&sa, &len) == 0)
		to_addr(&sa, v->hvsock, &s->local);
	return 0;
}

static int vmb_accept(vsx_sock *l, vsx_sock *s)
{
	const struct vmb *lv = l->trans;
	int fl = SOCK_CLOEXEC | ((l->flags & VSX_O_NONBLOCK) ? SOCK_NONBLOCK : 0);
	struct sockaddr_vm sa;
	socklen_t len = sizeof(sa);
	struct vmb *v;
	int rc;

	v = vmb_new(s);
	if (!v)
		return vsx__err(-ENOMEM, "out of memory");
	v->sys = lv->sys;
	v->k = lv->k;
	v->hvsock = lv->hvsock;
	do
		s->fd = v->sys->accept4(l->fd, (struct sockaddr *)&sa, &len, fl);
	while (s->fd < 0 && errno == EINTR);
	if (s->fd < 0)
		return errno == EAGAIN ? -EAGAIN : vsx__errno("vmbus: accept");
	pthread_mutex_lock(&lv->share->lock);
	lv->share->refs++;
	pthread_mutex_unlock(&lv->share->lock);
	v->share = lv->share;
	/* The channel was opened with the listener's buffers. */
	rc = fix_rings(v, l->fd);
	if (rc < 0)
		return rc;
	to_addr(&sa, v->hvsock, &s->peer);
	len = sizeof(sa);
	if (v->sys->getsockname(s->fd, (struct sockaddr *)&sa, &len) == 0)
		to_addr(&sa, v->hvsock, &s->local);
	return 0;
}

/* ---- STREAM ------------------------------------------------------------- */

/* At most one MTU per call, looping until done or the socket would block. */
static ssize_t vmb_send(vsx_sock *s, const void *buf, size_t len)
{
	const struct vmb *v = s->trans;
	const char *p = buf;
	size_t done = 0, n;
	ssize_t r;

	while (done < len) {
		n = len - done < HVS_MTU ? len - done : HVS_MTU;
		r = v->sys->send(s->fd, p + done, n, MSG_NOSIGNAL);
		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (done)
			break;
		return r < 0 ? -errno : -EPIPE;
	}
	return (ssize_t)done;
}

/* Plain reads: hv_sock has no MSG_PEEK. */
static ssize_t vmb_recv(vsx_sock *s, void *buf, size_t len)
{
	const struct vmb *v = s->trans;
	ssize_t r = v->sys->recv(s->fd, buf, len, 0);

	return r < 0 ? -errno : r;
}

static int vmb_shutdown(vsx_sock *s, int how)
{
	const struct vmb *v = s->trans;

	return v->sys->shutdown(s->fd, how) < 0 ? vsx__errno("vmbus: shutdown") : 0;
}

/* ---- The buffer knob ---------------------------------------------------- */

/*
 * VSX_O_BUFFER_NEXT: the size is for the next connection. An accepted
 * socket hands it to its listener, so the host's next connection gets it;
 * any other socket (or one whose listener is closed) leaves it for the next
 * vsx_connect() through vmbus in this process that asks for no size itself.
 */
static int vmb_defer(vsx_sock *s, struct vmb *v, int which, size_t bytes)
{
	struct vmb_share *sh = v->share;
	int rc = 0, done = 0, w;

	if (sh && !v->listener) {
		pthread_mutex_lock(&sh->lock);
		if (sh->lfd >= 0) {
			for (w = VSX_RX; w <= VSX_TX && !rc; w <<= 1)
				if (which & w)
					rc = write_buf(v, sh->lfd, w, bytes);
			done = 1;
		}
		pthread_mutex_unlock(&sh->lock);
	}
	if (!done) {
		pthread_mutex_lock(&next_conn.lock);
		if (which & VSX_RX)
			next_conn.rx = bytes;
		if (which & VSX_TX)
			next_conn.tx = bytes;
		pthread_mutex_unlock(&next_conn.lock);
	}
	return rc;
}

static int vmb_set_buffer(vsx_sock *s, int which, size_t bytes)
{
	struct vmb *v = s->trans;
	int rc = 0, w;

	if (!v || s->fd < 0)
		return vsx__err(-ENOTCONN, "vmbus: no socket");
	if (v->open) {
		if (s->flags & VSX_O_BUFFER_NEXT)
			return vmb_defer(s, v, which, bytes);
		return vsx__err(-EISCONN, "vmbus: the VMBus rings of a connected hv_sock "
				"were sized when its channel opened (rx %zu, tx %zu bytes) "
				"and cannot change; set the size in vsx_opts before "
				"connecting or on the listener, or pass VSX_O_BUFFER_NEXT to "
				"apply it to the next connection", v->ring_rx, v->ring_tx);
	}
	for (w = VSX_RX; w <= VSX_TX && !rc; w <<= 1)
		if (which & w)
			rc = write_buf(v, s->fd, w, bytes);
	return rc;
}

static int vmb_get_buffer(const vsx_sock *s, int which, size_t *bytes)
{
	const struct vmb *v = s->trans;
	int val, rc;

	if (!v || s->fd < 0)
		return vsx__err(-ENOTCONN, "vmbus: no socket");
	if (v->open) {
		*bytes = which == VSX_RX ? v->ring_rx : v->ring_tx;
		return 0;
	}
	rc = read_buf(v, s->fd, which, &val);
	if (rc < 0)
		return rc;
	*bytes = ring_for(&v->k, val);
	return 0;
}

const struct vsx_transport vsx__vmbus = {
	.name = "vmbus",
	.addr_kinds = 1u << VSX_ADDR_VSOCK | 1u << VSX_ADDR_HVSOCK,
	/* Connections */
	.connect = vmb_connect,
	.listen = vmb_listen,
	.accept = vmb_accept,
	.destruct = vmb_destruct,
	/* STREAM */
	.send = vmb_send,
	.recv = vmb_recv,
	.shutdown = vmb_shutdown,
	/* Buffer knob */
	.set_buffer = vmb_set_buffer,
	.get_buffer = vmb_get_buffer,
};
