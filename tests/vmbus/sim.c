/*
 * hv_sock simulator, FOR TESTS ONLY (see sim.h for the rules it enforces).
 *
 * Each simulated AF_VSOCK socket is a real AF_UNIX stream socket in this
 * process, so poll(2), the core's direct reads and the fd numbers all
 * behave; the simulator keeps what the hv_sock kernel would keep beside it
 * (state, ports, sk_sndbuf/sk_rcvbuf, the rings fixed at channel open, the
 * host's end). A guest connect swaps the socket under the same fd number for
 * one end of a socketpair (dup3), whose other end goes to the host service;
 * a guest listener is a listening AF_UNIX socket in the abstract namespace
 * that the host API connects to. Ring limits are enforced from the bytes
 * unread at the other end (SIOCINQ). Nothing here opens AF_VSOCK.
 *
 * One mutex guards everything; it is dropped while a call waits. A timer
 * thread runs the delayed-close deadlines, as the kernel's workqueue would.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <linux/vm_sockets.h>

#include "vsx-int.h"
#include "vmbus-sys.h"
#include "sim.h"
#include "util.h"

/* The kernel's numbers (hyperv_transport.c, sock.h), written out again
 * here rather than shared with vmbus.c: the simulator is the reference. */
#define SIM_PAGE 4096
#define SIM_RING_MIN (6 * SIM_PAGE)
#define SIM_RING_MAX (64 * SIM_PAGE)
#define SIM_MTU (16 * 1024)
#define SIM_SOCK_MIN_BUF 4608
#define SIM_CONNECT_TIMEOUT_MS 2000
#define SIM_CARRIER_BUF (4 << 20) /* AF_UNIX buffers: room for any ring */

enum sim_state { S_NEW, S_BOUND, S_LISTEN, S_OPEN, S_LINGER };

struct pending {
	struct pending *next;
	uint32_t host_port;
	size_t ring_rx, ring_tx;
	int host_fd;
	ino_t host_ino;
	size_t sent;               /* host bytes sent before the guest accepted */
};

struct ssock {
	struct ssock *next;
	int fd;                    /* the app's fd; -1 once it closed it */
	int priv_fd;               /* S_LINGER: ours, until the kernel lets go */
	int type;
	enum sim_state state;
	uint32_t port, peer_port;
	int sndbuf, rcvbuf;        /* sk_sndbuf / sk_rcvbuf */
	size_t ring_rx, ring_tx;   /* S_OPEN: fixed at channel open */
	int host_fd;               /* S_OPEN: the host end, owned by the host */
	ino_t host_ino;
	int rd_shut;
	int timeout_ms;
	int64_t deadline;          /* S_LINGER */
	struct sockaddr_un name;   /* S_LISTEN: abstract AF_UNIX name */
	socklen_t name_len;
	struct pending *pending;   /* S_LISTEN: opened by the host, not accepted */
};

struct service {
	struct service *next;
	int id;
	uint32_t port;
	struct pending *queue;     /* guest connections not yet accepted */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmbus_sim_conf conf;
static struct {
	int close_blocks, fixed_rings, init_at_create;
} kern;
static struct ssock *socks;
static struct service *services;
static struct vmbus_sim_stats st;
static uint32_t next_port;
static int next_id;
static unsigned listen_seq;


static void nap(void)
{
	usleep(1000);
}

static int fail(int err)
{
	errno = err;
	return -1;
}

static struct ssock *find(int fd)
{
	struct ssock *s;

	for (s = socks; s; s = s->next)
		if (s->fd == fd && fd >= 0)
			return s;
	return NULL;
}

static void unlink_sock(struct ssock *x)
{
	struct ssock **pp;
	struct pending *p;

	for (pp = &socks; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	while ((p = x->pending)) {
		x->pending = p->next;
		free(p);
	}
	st.open--;
	st.released++;
	free(x);
}

static ino_t ino_of(int fd)
{
	struct stat sb;

	return fstat(fd, &sb) == 0 ? sb.st_ino : 0;
}

/* The host has closed its end (its fd is gone or is something else now). */
static int host_gone(int fd, ino_t ino)
{
	return fd < 0 || ino_of(fd) != ino;
}

static int inq(int fd)
{
	int n = 0;

	return ioctl(fd, SIOCINQ, &n) == 0 ? n : 0;
}

static int is_nonblock(int fd, int flags)
{
	return (flags & MSG_DONTWAIT) || (fcntl(fd, F_GETFL) & O_NONBLOCK);
}

static void carrier_bufs(int fd)
{
	int v = SIM_CARRIER_BUF;

	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* hvs_open_connection: the ring from the buffer the kernel reads. */
static size_t ring_at_open(int sk_buf)
{
	size_t v;

	if (kern.fixed_rings)
		return SIM_RING_MIN;
	v = sk_buf < SIM_RING_MIN ? SIM_RING_MIN : (size_t)sk_buf;
	if (v > SIM_RING_MAX)
		v = SIM_RING_MAX;
	return (v + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE;
}

/* hvs_sock_init: 6 pages each way (since 5.3). */
static void transport_init(struct ssock *s)
{
	if (kern.fixed_rings) {
		s->sndbuf = conf.wmem_default;
		s->rcvbuf = conf.rmem_default;
	} else {
		s->sndbuf = SIM_RING_MIN;
		s->rcvbuf = SIM_RING_MIN;
	}
}

/* Delayed close: let go of channels whose host closed or whose time is up. */
static void reap_locked(void)
{
	struct ssock *s, *next;
	int64_t now = vsx__now_ms();

	for (s = socks; s; s = next) {
		next = s->next;
		if (s->state != S_LINGER)
			continue;
		if (host_gone(s->host_fd, s->host_ino) || now >= s->deadline) {
			close(s->priv_fd);
			st.lingering--;
			unlink_sock(s);
		}
	}
}

static void enter(void)
{
	pthread_mutex_lock(&lock);
	st.calls++;
	reap_locked();
}

static int leave(int rc)
{
	int e = errno;

	pthread_mutex_unlock(&lock);
	errno = e;
	return rc;
}

static ssize_t leave_n(ssize_t rc)
{
	int e = errno;

	pthread_mutex_unlock(&lock);
	errno = e;
	return rc;
}

/* Wait a little with the lock dropped. */
static void wait_unlocked(void)
{
	pthread_mutex_unlock(&lock);
	nap();
	pthread_mutex_lock(&lock);
}

/* ---- The sys table ------------------------------------------------------ */

static int sim_socket(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK), fd;
	struct ssock *s;

	enter();
	st.sockets++;
	if (domain != AF_VSOCK)
		return leave(fail(EAFNOSUPPORT));
	if (base != SOCK_STREAM && base != SOCK_SEQPACKET)
		return leave(fail(ESOCKTNOSUPPORT));
	s = calloc(1, sizeof(*s));
	if (!s)
		return leave(fail(ENOMEM));
	fd = socket(AF_UNIX, SOCK_STREAM | (type & (SOCK_CLOEXEC | SOCK_NONBLOCK)), 0);
	if (fd < 0) {
		free(s);
		return leave(-1);
	}
	s->fd = fd;
	s->priv_fd = -1;
	s->host_fd = -1;
	s->type = base;
	s->state = S_NEW;
	s->port = VMADDR_PORT_ANY;
	s->timeout_ms = SIM_CONNECT_TIMEOUT_MS;
	s->sndbuf = conf.wmem_default;
	s->rcvbuf = conf.rmem_default;
	if (kern.init_at_create)
		transport_init(s);
	s->next = socks;
	socks = s;
	st.open++;
	return leave(fd);
}

static int set_buf(int *field, int val, int max)
{
	if (val < 0)
		val = 0;
	if (val > max)
		val = max;
	*field = val * 2 < SIM_SOCK_MIN_BUF ? SIM_SOCK_MIN_BUF : val * 2;
	return 0;
}

static int sim_setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
	const struct timeval *tv = val;
	struct ssock *s;
	int v;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	if (level == SOL_SOCKET && (opt == SO_SNDBUF || opt == SO_RCVBUF)) {
		if (len < sizeof(int))
			return leave(fail(EINVAL));
		memcpy(&v, val, sizeof(v));
		if (s->state == S_OPEN)
			st.buf_after_open++;
		if (opt == SO_SNDBUF)
			return leave(set_buf(&s->sndbuf, v, conf.wmem_max));
		return leave(set_buf(&s->rcvbuf, v, conf.rmem_max));
	}
	if (level == AF_VSOCK && opt == SO_VM_SOCKETS_CONNECT_TIMEOUT) {
		if (len < sizeof(*tv))
			return leave(fail(EINVAL));
		s->timeout_ms = (int)(tv->tv_sec * 1000 + tv->tv_usec / 1000);
		return leave(0);
	}
	if (level == AF_VSOCK && (opt == SO_VM_SOCKETS_BUFFER_SIZE ||
				  opt == SO_VM_SOCKETS_BUFFER_MIN_SIZE ||
				  opt == SO_VM_SOCKETS_BUFFER_MAX_SIZE)) {
		st.vsock_bufsize++;
		return leave(0);
	}
	return leave(fail(ENOPROTOOPT));
}

static int sim_getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
	struct ssock *s;
	int v;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	if (level != SOL_SOCKET || *len < sizeof(int))
		return leave(fail(ENOPROTOOPT));
	switch (opt) {
	case SO_SNDBUF:
		v = s->sndbuf;
		break;
	case SO_RCVBUF:
		v = s->rcvbuf;
		break;
	case SO_ERROR:
		v = 0;
		break;
	case SO_TYPE:
		v = s->type;
		break;
	default:
		return leave(fail(ENOPROTOOPT));
	}
	memcpy(val, &v, sizeof(v));
	*len = sizeof(v);
	return leave(0);
}

static int sim_getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct sockaddr_vm vm = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY };
	struct ssock *s;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	vm.svm_port = s->port;
	memcpy(sa, &vm, *len < sizeof(vm) ? *len : sizeof(vm));
	*len = sizeof(vm);
	return leave(0);
}

static int vm_addr(const struct sockaddr *sa, socklen_t len, struct sockaddr_vm *vm)
{
	if (len < sizeof(*vm))
		return -1;
	memcpy(vm, sa, sizeof(*vm));
	return vm->svm_family == AF_VSOCK ? 0 : -1;
}

static int port_in_use(uint32_t port)
{
	struct ssock *s;

	for (s = socks; s; s = s->next)
		if (s->port == port && (s->state == S_BOUND || s->state == S_LISTEN))
			return 1;
	return 0;
}

static void autobind(struct ssock *s)
{
	if (s->port != VMADDR_PORT_ANY)
		return;
	do
		s->port = next_port++;
	while (port_in_use(s->port));
}

static int sim_bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_vm vm;
	struct ssock *s;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	if (vm_addr(sa, len, &vm) < 0 || s->state != S_NEW)
		return leave(fail(EINVAL));
	if (vm.svm_cid != VMADDR_CID_ANY)
		return leave(fail(EADDRNOTAVAIL)); /* hv_sock: the guest has no CID */
	if (vm.svm_port != VMADDR_PORT_ANY && port_in_use(vm.svm_port))
		return leave(fail(EADDRINUSE));
	s->port = vm.svm_port;
	autobind(s);
	s->state = S_BOUND;
	return leave(0);
}

static int sim_listen(int fd, int backlog)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	struct ssock *s;
	int n;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	if (s->state == S_LISTEN)
		return leave(0);
	if (s->state != S_BOUND)
		return leave(fail(EINVAL));
	n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "vsx-hvsim.%d.%u",
		     (int)getpid(), ++listen_seq);
	s->name = un;
	s->name_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	if (bind(fd, (struct sockaddr *)&un, s->name_len) < 0 || listen(fd, backlog) < 0)
		return leave(-1);
	s->state = S_LISTEN;
	return leave(0);
}

static struct service *service_for(uint32_t port)
{
	struct service *v;

	for (v = services; v; v = v->next)
		if (v->port == port)
			return v;
	return NULL;
}

/* A guest connect: the host service must exist, else the host never answers. */
static int sim_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_vm vm;
	struct pending *p;
	struct service *v;
	struct ssock *s;
	int64_t deadline;
	int sp[2], fl, cloexec;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	if (vm_addr(sa, len, &vm) < 0)
		return leave(fail(EINVAL));
	if (s->state == S_OPEN)
		return leave(fail(EISCONN));
	if (s->state != S_NEW && s->state != S_BOUND)
		return leave(fail(EINVAL));
	if (s->type == SOCK_SEQPACKET)
		return leave(fail(ESOCKTNOSUPPORT)); /* no seqpacket_allow */
	if (vm.svm_cid != VMADDR_CID_HOST)
		return leave(fail(ENETUNREACH));     /* hvs_stream_allow */
	if (!kern.init_at_create)
		transport_init(s);  /* 5.5+: the transport is assigned now */
	deadline = vsx__now_ms() + s->timeout_ms;
	while (!(v = service_for(vm.svm_port))) {
		if (vsx__now_ms() >= deadline)
			return leave(fail(ETIMEDOUT));
		wait_unlocked();
		s = find(fd);
		if (!s)
			return leave(fail(EBADF));
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return leave(fail(ENOMEM));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
		free(p);
		return leave(-1);
	}
	carrier_bufs(sp[0]);
	carrier_bufs(sp[1]);
	fl = fcntl(fd, F_GETFL);
	cloexec = fcntl(fd, F_GETFD) & FD_CLOEXEC;
	fcntl(sp[0], F_SETFL, fl);
	if (dup3(sp[0], fd, cloexec ? O_CLOEXEC : 0) < 0) {
		close(sp[0]);
		close(sp[1]);
		free(p);
		return leave(-1);
	}
	close(sp[0]);
	autobind(s);
	s->state = S_OPEN;
	s->peer_port = vm.svm_port;
	s->ring_rx = ring_at_open(s->rcvbuf);
	s->ring_tx = ring_at_open(s->sndbuf);
	s->host_fd = sp[1];
	s->host_ino = ino_of(sp[1]);
	p->host_fd = sp[1];
	p->host_ino = s->host_ino;
	p->host_port = s->port;
	p->next = NULL;
	if (!v->queue) {
		v->queue = p;
	} else {
		struct pending *q = v->queue;

		while (q->next)
			q = q->next;
		q->next = p;
	}
	return leave(0);
}

static int sim_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct sockaddr_vm vm = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_HOST };
	struct ssock *l, *s;
	struct pending *p;
	int nfd;

	enter();
	l = find(fd);
	if (!l)
		return leave(fail(EBADF));
	if (l->state != S_LISTEN)
		return leave(fail(EINVAL));
	pthread_mutex_unlock(&lock);
	nfd = accept4(fd, NULL, NULL, flags);
	pthread_mutex_lock(&lock);
	if (nfd < 0)
		return leave(-1);
	l = find(fd);
	p = l ? l->pending : NULL;
	s = calloc(1, sizeof(*s));
	if (!p || !s) {
		free(s);
		close(nfd);
		return leave(fail(p ? ENOMEM : ECONNABORTED));
	}
	l->pending = p->next;
	carrier_bufs(nfd);
	s->fd = nfd;
	s->priv_fd = -1;
	s->type = l->type;
	s->state = S_OPEN;
	s->port = l->port;
	s->peer_port = p->host_port;
	s->sndbuf = conf.wmem_default;
	s->rcvbuf = conf.rmem_default;
	transport_init(s); /* the child always gets hvs_sock_init */
	s->ring_rx = p->ring_rx;
	s->ring_tx = p->ring_tx;
	s->host_fd = p->host_fd;
	s->host_ino = p->host_ino;
	s->timeout_ms = SIM_CONNECT_TIMEOUT_MS;
	s->next = socks;
	socks = s;
	st.open++;
	free(p);
	vm.svm_port = s->peer_port;
	if (sa && len) {
		memcpy(sa, &vm, *len < sizeof(vm) ? *len : sizeof(vm));
		*len = sizeof(vm);
	}
	return leave(nfd);
}

static int sim_shutdown(int fd, int how)
{
	struct ssock *s;

	enter();
	s = find(fd);
	if (!s)
		return leave(fail(EBADF));
	if (s->state != S_OPEN)
		return leave(fail(ENOTCONN));
	if (how == SHUT_RD || how == SHUT_RDWR)
		s->rd_shut = 1; /* local only: hv_sock tells the host nothing */
	if (how == SHUT_WR || how == SHUT_RDWR)
		return leave(shutdown(fd, SHUT_WR)); /* the FIN */
	return leave(0);
}

static int sim_close(int fd)
{
	struct ssock *s;
	int priv;

	enter();
	s = find(fd);
	if (!s)
		return leave(close(fd));
	if (s->state != S_OPEN) {
		close(fd);
		unlink_sock(s);
		return leave(0);
	}
	shutdown(fd, SHUT_WR); /* hvs_close_lock_held: the FIN */
	if (host_gone(s->host_fd, s->host_ino)) {
		close(fd);
		unlink_sock(s);
		return leave(0);
	}
	if (kern.close_blocks) {
		/* Before 5.1: wait for the host, however long it takes. */
		st.blocked_closes++;
		while (s && !host_gone(s->host_fd, s->host_ino)) {
			wait_unlocked();
			s = find(fd);
		}
		st.blocked_closes--;
		close(fd);
		if (s)
			unlink_sock(s);
		return leave(0);
	}
	/* 5.1 and later: the fd goes now, the channel within the timeout. */
	priv = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	close(fd);
	if (priv < 0) {
		unlink_sock(s);
		return leave(0);
	}
	s->fd = -1;
	s->priv_fd = priv;
	s->state = S_LINGER;
	s->deadline = vsx__now_ms() + conf.close_timeout_ms;
	st.lingering++;
	return leave(0);
}

/* At most one MTU, at most what the ring has room for. The carrier is
 * never written in a way that blocks with the lock held. */
static ssize_t sim_send(int fd, const void *buf, size_t len, int flags)
{
	struct ssock *s;
	ssize_t r;
	size_t n;
	long room;

	enter();
	for (;;) {
		s = find(fd);
		if (!s)
			return leave_n(fail(EBADF));
		if (s->state != S_OPEN)
			return leave_n(fail(ENOTCONN));
		n = len < SIM_MTU ? len : SIM_MTU;
		if (!host_gone(s->host_fd, s->host_ino)) {
			room = (long)s->ring_tx - inq(s->host_fd);
			if (room <= 0)
				n = 0;
			else if ((long)n > room)
				n = (size_t)room;
		} /* else: the carrier reports EPIPE */
		r = n ? send(fd, buf, n, flags | MSG_DONTWAIT) : -1;
		if (r >= 0)
			break;
		if (n && errno != EAGAIN)
			return leave_n(-1);
		if (is_nonblock(fd, flags))
			return leave_n(fail(EAGAIN));
		wait_unlocked();
	}
	st.sends++;
	if ((size_t)r < len)
		st.short_sends++;
	if ((size_t)r > st.max_send)
		st.max_send = (size_t)r;
	return leave_n(r);
}

static ssize_t sim_recv(int fd, void *buf, size_t len, int flags)
{
	struct ssock *s;
	ssize_t r;

	enter();
	s = find(fd);
	if (!s)
		return leave_n(fail(EBADF));
	if (flags & MSG_PEEK) {
		st.peek_refused++;
		return leave_n(fail(EOPNOTSUPP)); /* hvs_stream_dequeue */
	}
	if (s->state != S_OPEN)
		return leave_n(fail(ENOTCONN));
	if (s->rd_shut)
		return leave_n(0);
	pthread_mutex_unlock(&lock);
	r = recv(fd, buf, len < SIM_MTU ? len : SIM_MTU, flags);
	pthread_mutex_lock(&lock);
	if (r > 0 && (size_t)r > st.max_recv)
		st.max_recv = (size_t)r;
	return leave_n(r);
}

static int sim_kernel_release(char *buf, size_t len)
{
	enter();
	snprintf(buf, len, "%s", conf.kernel_release);
	return leave(0);
}

static const struct vmbus_sys sim_sys = {
	.name = "hv_sock simulator",
	/* Sockets */
	.socket = sim_socket,
	.setsockopt = sim_setsockopt,
	.getsockopt = sim_getsockopt,
	.getsockname = sim_getsockname,
	/* Connections */
	.connect = sim_connect,
	.bind = sim_bind,
	.listen = sim_listen,
	.accept4 = sim_accept4,
	.shutdown = sim_shutdown,
	.close = sim_close,
	/* STREAM */
	.send = sim_send,
	.recv = sim_recv,
	.kernel_release = sim_kernel_release,
};

/* ---- Setup and the host side -------------------------------------------- */

/* The kernel's timers run on their own: so does the delayed close here. */
static void *timer_main(void *arg)
{
	for (;;) {
		usleep(5000);
		pthread_mutex_lock(&lock);
		reap_locked();
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

void vmbus_sim_start(const struct vmbus_sim_conf *c)
{
	static const struct vmbus_sim_conf none;
	static int timer_running;
	unsigned maj = 0, min = 0, ver;
	pthread_t th;

	pthread_mutex_lock(&lock);
	if (!timer_running && pthread_create(&th, NULL, timer_main, NULL) == 0) {
		pthread_detach(th);
		timer_running = 1;
	}
	conf = c ? *c : none;
	if (!conf.kernel_release)
		conf.kernel_release = "6.1.0-sim";
	if (!conf.close_timeout_ms)
		conf.close_timeout_ms = 8000;
	if (!conf.wmem_max)
		conf.wmem_max = 212992;
	if (!conf.rmem_max)
		conf.rmem_max = 212992;
	if (!conf.wmem_default)
		conf.wmem_default = 212992;
	if (!conf.rmem_default)
		conf.rmem_default = 212992;
	if (sscanf(conf.kernel_release, "%u.%u", &maj, &min) != 2)
		maj = 6, min = 1;
	ver = maj * 1000 + min;
	kern.close_blocks = ver < 5001;
	kern.fixed_rings = ver < 5003;
	kern.init_at_create = ver < 5005;
	memset(&st, 0, sizeof(st));
	next_port = 49152;
	vsx__vmbus_sys = &sim_sys;
	pthread_mutex_unlock(&lock);
}

int vmbus_sim_host_listen(uint32_t port)
{
	struct service *v;
	int id;

	pthread_mutex_lock(&lock);
	if (service_for(port)) {
		pthread_mutex_unlock(&lock);
		return -EADDRINUSE;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	v->id = id = next_id++;
	v->port = port;
	v->next = services;
	services = v;
	pthread_mutex_unlock(&lock);
	return id;
}

int vmbus_sim_host_accept(int id, int timeout_ms)
{
	int64_t deadline = vsx__now_ms() + timeout_ms;
	struct service *v;
	struct pending *p;
	int fd;

	pthread_mutex_lock(&lock);
	for (;;) {
		reap_locked();
		for (v = services; v && v->id != id; v = v->next)
			;
		if (!v) {
			pthread_mutex_unlock(&lock);
			return -EINVAL;
		}
		if (v->queue)
			break;
		if (vsx__now_ms() >= deadline) {
			pthread_mutex_unlock(&lock);
			return -ETIMEDOUT;
		}
		pthread_mutex_unlock(&lock);
		nap();
		pthread_mutex_lock(&lock);
	}
	p = v->queue;
	v->queue = p->next;
	fd = p->host_fd;
	free(p);
	pthread_mutex_unlock(&lock);
	return fd;
}

int vmbus_sim_host_connect(uint32_t guest_port, uint32_t host_port)
{
	struct pending *p, **pp;
	struct ssock *l;
	int fd;

	pthread_mutex_lock(&lock);
	reap_locked();
	for (l = socks; l; l = l->next)
		if (l->state == S_LISTEN && l->port == guest_port)
			break;
	if (!l || l->type != SOCK_STREAM) {
		pthread_mutex_unlock(&lock);
		return -ECONNREFUSED;
	}
	p = calloc(1, sizeof(*p));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!p || fd < 0 || connect(fd, (struct sockaddr *)&l->name, l->name_len) < 0) {
		int e = fd < 0 || !p ? ENOMEM : errno;

		free(p);
		if (fd >= 0)
			close(fd);
		pthread_mutex_unlock(&lock);
		return -e;
	}
	carrier_bufs(fd);
	/* The channel opens now, with the listener's buffers. */
	p->host_port = host_port;
	p->ring_rx = ring_at_open(l->rcvbuf);
	p->ring_tx = ring_at_open(l->sndbuf);
	p->host_fd = fd;
	p->host_ino = ino_of(fd);
	for (pp = &l->pending; *pp; pp = &(*pp)->next)
		;
	*pp = p;
	pthread_mutex_unlock(&lock);
	return fd;
}

/* The guest socket (open or still queued on its listener) behind @hfd. */
static int guest_room(int hfd, ino_t ino, long *room)
{
	struct ssock *s;
	struct pending *p;

	for (s = socks; s; s = s->next) {
		if (s->state == S_OPEN && s->host_fd == hfd && s->host_ino == ino) {
			*room = (long)s->ring_rx - inq(s->fd);
			return 0;
		}
		if (s->state == S_LISTEN)
			for (p = s->pending; p; p = p->next)
				if (p->host_fd == hfd && p->host_ino == ino) {
					*room = (long)p->ring_rx - (long)p->sent;
					return 0;
				}
	}
	return -1;
}

ssize_t vmbus_sim_host_send(int hfd, const void *buf, size_t len, int flags)
{
	ino_t ino = ino_of(hfd);
	struct pending *p;
	struct ssock *s;
	long room = 0;
	ssize_t r;
	size_t n;

	pthread_mutex_lock(&lock);
	for (;;) {
		reap_locked();
		if (guest_room(hfd, ino, &room) < 0)
			room = SIM_MTU; /* the guest is gone: let the carrier say so */
		n = len < SIM_MTU ? len : SIM_MTU;
		if ((long)n > room)
			n = room > 0 ? (size_t)room : 0;
		r = n ? send(hfd, buf, n, flags | MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
		if (r >= 0)
			break;
		if (n && errno != EAGAIN) {
			r = -errno;
			pthread_mutex_unlock(&lock);
			return r;
		}
		if (flags & MSG_DONTWAIT) {
			pthread_mutex_unlock(&lock);
			return -EAGAIN;
		}
		wait_unlocked();
	}
	{
		for (s = socks; s; s = s->next)
			if (s->state == S_LISTEN)
				for (p = s->pending; p; p = p->next)
					if (p->host_fd == hfd && p->host_ino == ino)
						p->sent += (size_t)r;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

void vmbus_sim_stats(struct vmbus_sim_stats *out)
{
	pthread_mutex_lock(&lock);
	reap_locked();
	*out = st;
	pthread_mutex_unlock(&lock);
}

int vmbus_sim_rings(int fd, size_t *rx, size_t *tx)
{
	struct ssock *s;
	int rc = -ENOTCONN;

	pthread_mutex_lock(&lock);
	s = find(fd);
	if (s && s->state == S_OPEN) {
		*rx = s->ring_rx;
		*tx = s->ring_tx;
		rc = 0;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

void vmbus_sim_reap(void)
{
	pthread_mutex_lock(&lock);
	reap_locked();
	pthread_mutex_unlock(&lock);
}
