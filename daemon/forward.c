/*
 * vsxd forwards at run time (forward.h; vsxd(8), FORWARDS).
 *
 * A forward listens on one endpoint and, for each connection it accepts,
 * connects its other endpoint and moves bytes both ways until both sides
 * finished. Endpoints of four families meet here:
 *
 *  - vm:NAME:PORT goes through the engine (backend.h) with no extra hop: a
 *    connection accepted elsewhere is handed to the engine as a host-
 *    initiated connection to guest port PORT (vsxb_vm_connect_fd), and a
 *    listening vm: side registers a handler for host port PORT of that VM
 *    (vsxb_router_listen_port), which keeps the guest's connection
 *    CONNECTING until the other side is connected, then attaches it
 *    (vsxb_router_conn_attach_fd) or refuses it (RST). Where the other side
 *    is a plain descriptor (TCP, Unix, another VM through a socketpair) the
 *    engine owns it directly and the connection is one engine connection,
 *    listed with the forward's name as its tag.
 *  - tcp:HOST:PORT and unix:PATH: plain non-blocking sockets; connects are
 *    non-blocking (names are resolved once, when the forward starts).
 *  - libvsx addresses (vsock:, hvsock:, unix:PATH:PORT hybrid): listeners
 *    are non-blocking vsx_socks; libvsx connects block (a hybrid CONNECT
 *    exchange, a handshake with a key) so they run in worker threads, at
 *    most FWD_MAX_JOBS at once, each bounded by FWD_CONNECT_MS, reporting
 *    back through a pipe the loop watches. A listener with a key runs its
 *    accept (and the handshake in it) in one worker at a time, the
 *    listener being a socket of one thread at a time.
 *
 * Relays (relay.c). What is not one engine connection is a relay: two
 * non-blocking sockets and a bounded buffer each way (FWD_BUF). A side is read only
 * while the buffer toward the other has room, so a slow reader holds back
 * a fast writer (the kernel's buffers then fill and TCP / vsock credit
 * push back): memory per relay is 2 * FWD_BUF, whatever the peers do.
 * An EOF is passed on with shutdown(SHUT_WR) once what came before it is
 * written; the relay ends when both directions have ended, or at the first
 * error on either socket, which closes both. Relays have ids from the
 * router's sequence, so vsxctl list/show/close treat them like engine
 * connections. An established relay goes on in the next process across
 * a handoff or a restart under a store (relay_keep.c).
 *
 * Reload (vsxd_fwds_apply): a forward equal to a running one keeps its
 * listener and its connections; a removed one closes its listener, its
 * relays and its tagged engine connections.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <event2/event.h>

#include <vsx/vsx.h>

#include "forward.h"
#include "forward-int.h"
#include "backend/backend.h"
#include "util.h"
#include "vhost-user/acceptor.h"

/* ---- Small socket helpers ---- */

static void sa_text(const struct sockaddr *sa, socklen_t len, char *buf, size_t n)
{
	char host[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, n, "tcp:%s:%u", host, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, n, "tcp:[%s]:%u", host, ntohs(in6->sin6_port));
	} else if (sa->sa_family == AF_UNIX) {
		const struct sockaddr_un *un = (const void *)sa;

		if (len > sizeof(sa_family_t) && un->sun_path[0])
			snprintf(buf, n, "unix:%.*s", (int)(len - sizeof(sa_family_t)),
				 un->sun_path);
		else
			snprintf(buf, n, "unix:(unnamed)");
	} else {
		snprintf(buf, n, "?");
	}
}

static int unix_sa(const char *path, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	*len = (socklen_t)sizeof(struct sockaddr_un);
	return vsx__unix_addr((struct sockaddr_un *)ss, path);
}

static int tcp_sa(const char *host, uint32_t port, bool passive,
		  struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = {
		.ai_socktype = SOCK_STREAM,
		.ai_flags = passive ? AI_PASSIVE : 0,
	}, *res;
	char ps[16];
	int r;

	snprintf(ps, sizeof(ps), "%u", port);
	r = getaddrinfo(host, ps, &hints, &res);
	if (r)
		return -EHOSTUNREACH;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* ---- Workers ---- */

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct vsxd_fwds *fs = j->fs;
	struct vsx_opts o = {
		.flags = VSX_O_NONBLOCK,
		.connect_timeout_ms = FWD_CONNECT_MS,
		.linger_ms = -1,        /* vsx_close must never wait in the loop */
		.auth_key_file = j->key,
	};
	ssize_t w;

	if (j->kind == JOB_CONNECT)
		j->rc = vsx_connect(j->addr, &o, &j->out);
	else
		j->rc = vsx_accept(j->ls, &j->out);
	if (j->rc < 0)
		snprintf(j->msg, sizeof(j->msg), "%s", vsx_strerror(j->rc));
	do {
		w = write(fs->pipe[1], &j, sizeof(j));
	} while (w < 0 && errno == EINTR);
	/* the loop frees @j; njobs drops when it has read it */
	return NULL;
}

static struct job *job_start(struct vsxd_fwds *fs, enum job_kind kind)
{
	struct job *j;

	pthread_mutex_lock(&fs->mu);
	if (fs->njobs >= FWD_MAX_JOBS) {
		pthread_mutex_unlock(&fs->mu);
		return NULL;
	}
	fs->njobs++;
	pthread_mutex_unlock(&fs->mu);
	j = calloc(1, sizeof(*j));
	if (!j)
		goto undo;
	j->kind = kind;
	j->fs = fs;
	return j;
undo:
	pthread_mutex_lock(&fs->mu);
	fs->njobs--;
	pthread_mutex_unlock(&fs->mu);
	return NULL;
}

/* Run @j (from job_start); false: it could not start (freed). */
static bool job_run(struct job *j)
{
	struct vsxd_fwds *fs = j->fs;
	pthread_attr_t at;
	pthread_t t;
	int r;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &at, job_main, j);
	pthread_attr_destroy(&at);
	if (r == 0)
		return true;
	free(j->key);
	free(j);
	pthread_mutex_lock(&fs->mu);
	fs->njobs--;
	pthread_cond_broadcast(&fs->cv);
	pthread_mutex_unlock(&fs->mu);
	return false;
}

/* ---- Joining the two sides ---- */

/* End @rl, whatever of its setup is still running (this file's: a libvsx
 * job, a non-blocking connect, an engine connection waiting for us), then
 * the relay itself (relay.c, which knows nothing of setups). */
static void relay_end(struct relay *rl, const char *why)
{
	struct vsxd_fwds *fs = rl->f->fs;

	if (rl->job)
		rl->job->rl = NULL;     /* the worker's result is dropped */
	if (rl->cev)
		event_free(rl->cev);
	rl->cev = NULL;
	if (rl->cfd >= 0)
		close(rl->cfd);
	rl->cfd = -1;
	if (rl->wait_id && fs->in_port_cb)
		fs->port_failed = true;         /* port_cb refuses it */
	else if (rl->wait_id)
		vsxb_router_conn_close(fs->r, rl->wait_id, true);
	vsxd__relay_free(rl, why);
}

static struct vsxb_vm *target_vm(struct fwd *f)
{
	return vsxb_router_vm_by_name(f->fs->r, f->cfg.connect.host);
}

/* The target (tcp/unix fd or libvsx socket) is connected. */
static void target_ready(struct relay *rl, int fd, vsx_sock *vs)
{
	struct vsxd_fwds *fs = rl->f->fs;
	int sp[2], r;

	if (rl->wait_id && !vs) {
		/* vm: listen side, a plain target: the engine takes it whole */
		r = vsxb_router_conn_attach_fd(fs->r, rl->wait_id, fd);
		if (r < 0)
			close(fd);
		else
			vsxd__flog(fs, LOG_INFO, "forward %s: conn=%llu %s -> %s: open",
				   rl->f->cfg.name, (unsigned long long)rl->wait_id, rl->client,
				   rl->f->cfg.connect.text);
		rl->wait_id = 0;
		rl->state = RL_CONNECTING;      /* no "closed" line for this record */
		relay_end(rl, NULL);
		return;
	}
	rl->s[1].fd = fd;
	rl->s[1].vs = vs;
	if (rl->wait_id) {
		/* vm: listen side, a libvsx target: through a socketpair */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
			relay_end(rl, "socketpair failed");
			return;
		}
		r = vsxb_router_conn_attach_fd(fs->r, rl->wait_id, sp[0]);
		rl->wait_id = 0;
		if (r < 0) {
			close(sp[0]);
			close(sp[1]);
			relay_end(rl, "the guest gave up");
			return;
		}
		vsx__set_nonblock(sp[1], true);
		rl->s[0].fd = sp[1];
	}
	vsxd__relay_start(rl);
}

static void target_fail(struct relay *rl, const char *what)
{
	char why[320];

	rl->f->fs->st.failed++;
	snprintf(why, sizeof(why), "connect %s: %s", rl->f->cfg.connect.text, what);
	vsxd__flog(rl->f->fs, LOG_WARNING, "forward %s: conn=%llu %s: %s", rl->f->cfg.name,
		   (unsigned long long)rl->id, rl->client, why);
	rl->state = RL_CONNECTING;
	relay_end(rl, NULL);           /* resets a waiting guest (wait_id) */
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct relay *rl = arg;
	socklen_t len = sizeof(int);
	int err = 0, cfd = rl->cfd;

	(void)fd;
	event_free(rl->cev);
	rl->cev = NULL;
	if (what & EV_TIMEOUT) {
		target_fail(rl, strerror(ETIMEDOUT));
		return;
	}
	if (getsockopt(cfd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		target_fail(rl, strerror(err));
		return;
	}
	rl->cfd = -1;
	target_ready(rl, cfd, NULL);
}

/* Start connecting the target of @rl (not a vm: one). */
static void target_connect(struct relay *rl)
{
	struct fwd *f = rl->f;
	struct vsxd_fwds *fs = f->fs;
	struct timeval tv = { FWD_CONNECT_MS / 1000, (FWD_CONNECT_MS % 1000) * 1000 };
	struct job *j;
	int fd;

	if (f->cfg.connect.kind == VSXD_EP_TCP || f->cfg.connect.kind == VSXD_EP_UNIX) {
		fd = socket(f->ta.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			target_fail(rl, strerror(errno));
			return;
		}
		rl->cfd = fd;
		if (connect(fd, (struct sockaddr *)&f->ta, f->talen) < 0 &&
		    errno != EINPROGRESS && errno != EAGAIN) {
			target_fail(rl, strerror(errno));
			return;
		}
		/* even an immediate success is taken from the loop: never call
		 * the engine back from inside its port handler */
		rl->cev = event_new(fs->base, fd, EV_WRITE, connect_cb, rl);
		if (!rl->cev || event_add(rl->cev, &tv) < 0) {
			target_fail(rl, "out of memory");
			return;
		}
		return;
	}
	j = job_start(fs, JOB_CONNECT);
	if (!j) {
		target_fail(rl, "too many connections being set up");
		return;
	}
	snprintf(j->addr, sizeof(j->addr), "%s", f->cfg.connect.lib);
	j->rl = rl;
	if (f->cfg.auth_key && !(j->key = strdup(f->cfg.auth_key))) {
		free(j);
		pthread_mutex_lock(&fs->mu);
		fs->njobs--;
		pthread_mutex_unlock(&fs->mu);
		target_fail(rl, "out of memory");
		return;
	}
	rl->job = j;
	if (!job_run(j)) {
		rl->job = NULL;
		target_fail(rl, "cannot start a thread");
	}
}

/* vm: -> vm: (both through the engine): a socketpair, no relay. Run
 * from the loop, after the port handler returned; it keeps copies, not the
 * forward, which a reload may stop meanwhile. */
struct vm2vm {
	struct vsxd_fwds *fs;
	uint64_t wait_id;
	char vm[VSXD_NAME_MAX + 1];
	uint32_t port;
	char name[VSXD_NAME_MAX + 1];
	char target[ADDR_LEN];
};

static void vm2vm_cb(evutil_socket_t fd, short what, void *arg)
{
	struct vm2vm *v = arg;
	struct vsxd_fwds *fs = v->fs;
	struct vsxb_vm *vm = vsxb_router_vm_by_name(fs->r, v->vm);
	int sp[2], r;

	(void)fd;
	(void)what;
	if (!vm || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
		vsxb_router_conn_close(fs->r, v->wait_id, true);
		goto out;
	}
	r = vsxb_router_conn_attach_fd(fs->r, v->wait_id, sp[0]);
	if (r < 0) {
		close(sp[0]);
		close(sp[1]);
		goto out;
	}
	r = vsxb_vm_connect_fd(vm, sp[1], v->port, v->name, NULL);
	if (r < 0)
		vsxd__flog(fs, LOG_WARNING, "forward %s: connect %s: %s", v->name, v->target,
			   strerror(-r));
out:
	free(v);
}

/*
 * A new client on @f's listen side: @fd (tcp/unix), @vs (libvsx) or the
 * engine connection @wait_id (vm:). Takes all of them.
 */
static void client_new(struct fwd *f, int fd, vsx_sock *vs, uint64_t wait_id,
		       const char *client, bool auth)
{
	struct vsxd_fwds *fs = f->fs;
	struct relay *rl;
	struct vsxb_vm *vm;
	int sp[2], r;

	fs->st.accepted++;
	if (f->cfg.connect.kind == VSXD_EP_VM) {
		vm = target_vm(f);
		if (wait_id) {
			struct vm2vm *v = calloc(1, sizeof(*v));

			if (!v || event_base_once(fs->base, -1, EV_TIMEOUT, vm2vm_cb, v,
						  NULL) < 0) {
				free(v);
				fs->port_failed = true;  /* inside port_cb: refused there */
				return;
			}
			v->fs = fs;
			v->wait_id = wait_id;
			snprintf(v->vm, sizeof(v->vm), "%s", f->cfg.connect.host);
			v->port = f->cfg.connect.port;
			snprintf(v->name, sizeof(v->name), "%s", f->cfg.name);
			snprintf(v->target, sizeof(v->target), "%s", f->cfg.connect.text);
			return;
		}
		if (!vm) {
			vsxd__flog(fs, LOG_WARNING, "forward %s: %s: no VM named '%s'", f->cfg.name,
				   client, f->cfg.connect.host);
			fs->st.failed++;
			goto drop;
		}
		if (!vs) {
			uint64_t id = 0;

			r = vsxb_vm_connect_fd(vm, fd, f->cfg.connect.port, f->cfg.name, &id);
			if (r < 0) {
				fs->st.failed++;
				vsxd__flog(fs, LOG_WARNING, "forward %s: %s -> %s: %s", f->cfg.name,
					   client, f->cfg.connect.text, strerror(-r));
			} else {
				vsxd__flog(fs, LOG_INFO, "forward %s: conn=%llu %s -> %s: connecting",
					   f->cfg.name, (unsigned long long)id, client,
					   f->cfg.connect.text);
			}
			return;
		}
		/* a libvsx client: relay it to the engine through a socketpair */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
			goto drop;
		r = vsxb_vm_connect_fd(vm, sp[0], f->cfg.connect.port, f->cfg.name, NULL);
		if (r < 0) {
			close(sp[1]);
			fs->st.failed++;
			goto drop;
		}
		rl = vsxd__relay_new(f, 0, client);
		if (!rl) {
			close(sp[1]);
			goto drop;
		}
		vsx__set_nonblock(sp[1], true);
		rl->s[0].vs = vs;
		rl->s[0].fd = vsx_fd(vs);
		rl->s[1].fd = sp[1];
		rl->auth = auth;
		vsxd__relay_start(rl);
		return;
	}
	rl = vsxd__relay_new(f, 0, client);
	if (!rl) {
		if (wait_id)
			fs->port_failed = true;  /* inside port_cb: refused there */
		goto drop;
	}
	rl->s[0].fd = vs ? vsx_fd(vs) : fd;
	rl->s[0].vs = vs;
	rl->wait_id = wait_id;
	rl->auth = auth;
	target_connect(rl);
	return;
drop:
	if (vs)
		vsx_close(vs);
	else if (fd >= 0)
		close(fd);
}

/* ---- Listen sides ---- */

static bool cid_allowed(const struct fwd *f, uint64_t cid)
{
	size_t i;

	if (!f->cfg.n_allow)
		return true;
	for (i = 0; i < f->cfg.n_allow; i++)
		if (f->cfg.allow[i] == cid)
			return true;
	return false;
}

static void fd_accept_cb(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
	struct fwd *f = arg;
	char client[ADDR_LEN];

	if (f->cfg.listen.kind == VSXD_EP_UNIX)
		snprintf(client, sizeof(client), "%s", f->cfg.listen.text);
	else
		sa_text(sa, len, client, sizeof(client));
	client_new(f, fd, NULL, 0, client, false);
}

/* A libvsx client: its peer CID checked against allow=. */
static void lib_client(struct fwd *f, vsx_sock *vs, bool auth)
{
	struct vsx_info info = { .peer = "" };
	struct vsx_addr a;
	char client[ADDR_LEN] = "?";

	if (vsx_info(vs, &info) == 0)
		snprintf(client, sizeof(client), "%s", info.peer[0] ? info.peer :
			 f->cfg.listen.text);
	if (f->cfg.n_allow) {
		if (vsx_addr_parse(info.peer, &a) < 0 || a.kind != VSX_ADDR_VSOCK ||
		    !cid_allowed(f, a.cid)) {
			f->fs->st.denied++;
			vsxd__flog(f->fs, LOG_WARNING, "forward %s: %s refused: peer CID not in "
				   "allow=", f->cfg.name, client);
			vsx_close(vs);
			return;
		}
	}
	client_new(f, -1, vs, 0, client, auth);
}

static void accept_job(struct fwd *f);

/* One libvsx client for the acceptor: 0, or a negative errno. */
static int lib_accept_one(void *arg)
{
	struct fwd *f = arg;
	vsx_sock *vs;
	int r;

	if (f->cfg.auth_key) {
		accept_job(f);
		return -EAGAIN; /* the listener is the worker's, or busy */
	}
	r = vsx_accept(f->ls, &vs);
	if (r < 0)
		return r;
	lib_client(f, vs, false);
	return 0;
}

/* A listener with a key: one accept (and handshake) in a worker. */
static void accept_job(struct fwd *f)
{
	struct job *j;

	if (f->accepting)
		return;
	j = job_start(f->fs, JOB_ACCEPT);
	if (!j)
		return;         /* tried again at the next event */
	j->f = f;
	j->ls = f->ls;
	f->accepting = true;
	f->ajob = j;
	vsxu_acceptor_hold(f->acc, true);  /* the listener is the worker's for now */
	if (!job_run(j)) {
		f->accepting = false;
		f->ajob = NULL;
		vsxu_acceptor_hold(f->acc, false);
	}
}

static void job_done(struct vsxd_fwds *fs, struct job *j)
{
	struct relay *rl = j->rl;
	struct fwd *f = j->f;

	if (j->kind == JOB_CONNECT) {
		if (!rl) {
			vsx_close(j->out);              /* cancelled */
		} else {
			rl->job = NULL;
			if ((j->rc == -EACCES || j->rc == -ETIMEDOUT) &&
			    rl->f->cfg.auth_key) {
				/* a timeout may be the transport's: counted too, the
				 * peer gave no valid proof in time */
				fs->st.auth_failures++;
				vsxd__flog(fs, LOG_WARNING, "forward %s: conn=%llu %s: authentication "
					   "with %s failed: %s", rl->f->cfg.name,
					   (unsigned long long)rl->id, rl->client,
					   rl->f->cfg.connect.text, j->msg);
			}
			if (j->rc < 0) {
				target_fail(rl, j->msg);
			} else {
				if (rl->f->cfg.auth_key)
					rl->auth = true;
				target_ready(rl, vsx_fd(j->out), j->out);
			}
		}
	} else if (!f) {
		/* the forward stopped meanwhile: it left the listener to us */
		vsx_close(j->out);
		vsx_close(j->ls);
	} else {
		f->accepting = false;
		f->ajob = NULL;
		vsxu_acceptor_hold(f->acc, false);
		/* a failed handshake is the client's, not the listener's */
		vsxu_acceptor_result(f->acc, j->rc == -EACCES || j->rc == -ETIMEDOUT ? 0 : j->rc);
		if (j->rc == -EACCES || j->rc == -ETIMEDOUT) {
			fs->st.auth_failures++;
			vsxd__flog(fs, LOG_WARNING, "forward %s: authentication of a client on %s "
				   "failed: %s", f->cfg.name, f->cfg.listen.text, j->msg);
		} else if (j->rc == 0) {
			lib_client(f, j->out, true);
		}
	}
	free(j->key);
	free(j);
}

static void pipe_cb(evutil_socket_t fd, short what, void *arg)
{
	struct vsxd_fwds *fs = arg;
	struct job *j;
	ssize_t n;

	(void)what;
	for (;;) {
		n = read(fd, &j, sizeof(j));
		if (n != (ssize_t)sizeof(j))
			return;
		job_done(fs, j);
		pthread_mutex_lock(&fs->mu);
		fs->njobs--;
		pthread_cond_broadcast(&fs->cv);
		pthread_mutex_unlock(&fs->mu);
	}
}

/* The engine: a guest connects to a vm: listen side. */
static int port_cb(void *arg, struct vsxb_vm *vm, uint64_t id, uint32_t guest_port,
		   uint32_t port)
{
	struct fwd *f = arg;
	struct vsxb_vm_info vi;
	char client[ADDR_LEN];

	vsxb_vm_get_info(vm, &vi);
	snprintf(client, sizeof(client), "vm:%s:%u (cid %llu)", vi.name, guest_port,
		 (unsigned long long)vi.guest_cid);
	if (!cid_allowed(f, vi.guest_cid)) {
		f->fs->st.denied++;
		vsxd__flog(f->fs, LOG_WARNING, "forward %s: %s -> host port %u refused: CID "
			   "%llu not in allow=", f->cfg.name, client, port,
			   (unsigned long long)vi.guest_cid);
		return -EPERM;
	}
	f->fs->in_port_cb = true;
	f->fs->port_failed = false;
	client_new(f, -1, NULL, id, client, false);
	f->fs->in_port_cb = false;
	return f->fs->port_failed ? -ECONNREFUSED : 0;
}

/* ---- Forwards ---- */

static void fwd_stop(struct fwd *f)
{
	struct vsxd_fwds *fs = f->fs;
	struct relay *rl, *next;

	if (f->port)
		vsxb_port_free(f->port);
	vsxu_acceptor_free(f->acc);
	if (f->lfd >= 0)
		close(f->lfd);
	if (f->unlink_path)
		unlink(f->unlink_path);
	free(f->unlink_path);
	if (f->accepting)
		f->ajob->f = NULL;      /* the worker's job closes the listener */
	else if (f->ls)
		vsx_close(f->ls);
	for (rl = fs->relays.next; rl != &fs->relays; rl = next) {
		next = rl->next;
		if (rl->f == f)
			relay_end(rl, "forward removed");
	}
	vsxb_router_close_tagged(fs->r, f->cfg.name, false);
	vsxd_fwd_free(&f->cfg);
	free(f);
}

static int fwd_listen_fd(struct fwd *f, struct vsxd_err *err)
{
	const struct vsxd_endpoint *ep = &f->cfg.listen;
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1, r;

	r = ep->kind == VSXD_EP_TCP ? tcp_sa(ep->host, ep->port, true, &ss, &len)
				    : unix_sa(ep->host, &ss, &len);
	if (r < 0) {
		snprintf(err->msg, sizeof(err->msg), "cannot resolve %s", ep->text);
		return r;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	if (ep->kind == VSXD_EP_TCP)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ep->kind == VSXD_EP_UNIX) {
		/* a missing directory is made, 0755, as for every socket */
		r = vsx__mkdir_parents(ep->host, 0755, VSX__GID_KEEP);
		if (r == 0)
			r = vsx__unix_bind(fd, ep->host, VSX__MODE_UMASK, VSX__GID_KEEP, NULL);
		if (r < 0) {
			errno = r == -ENOTSOCK ? EADDRINUSE : -r;
			goto fail;
		}
	} else {
		/* a live handoff's listener for this address, or a new one */
		r = vsx__inherit_take(fd, (struct sockaddr *)&ss, len);
		if (r < 0)
			errno = -r;
		if (r < 0 || (r == 0 && bind(fd, (struct sockaddr *)&ss, len) < 0))
			goto fail;
	}
	if (ep->kind == VSXD_EP_UNIX && !(f->unlink_path = strdup(ep->host)))
		goto fail;
	if (listen(fd, 128) < 0)
		goto fail;
	f->lfd = fd;
	return 0;
fail:
	r = -errno;
	if (fd >= 0)
		close(fd);
	snprintf(err->msg, sizeof(err->msg), "cannot listen on %s: %s", ep->text,
		 r == -EADDRINUSE ? "address in use" : strerror(-r));
	return r ? r : -ENOMEM;
}

static int fwd_start(struct vsxd_fwds *fs, const struct vsxd_forward *cfg,
		     struct fwd **out, struct vsxd_err *err)
{
	struct vsx_opts o = {
		.flags = VSX_O_NONBLOCK,
		.connect_timeout_ms = FWD_CONNECT_MS,
		.linger_ms = -1,        /* accepted sockets inherit it */
	};
	struct vsxu_acceptor_conf ac = {
		.loop = &fs->acc_loop.loop,
		.log = fs->log,
	};
	char name[ADDR_LEN + 80];
	struct fwd *f;
	int r;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fs = fs;
	f->lfd = -1;
	r = vsxd_fwd_copy(&f->cfg, cfg);
	if (r < 0) {
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		goto fail;
	}
	/* a key for the connect side is read by each connect: check it now */
	if (cfg->auth_key && !vsxd_ep_is_lib(cfg->listen.kind)) {
		struct stat st;

		if (stat(cfg->auth_key, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (st.st_mode & 077)) {
			r = stat(cfg->auth_key, &st) < 0 ? -errno : -EACCES;
			snprintf(err->msg, sizeof(err->msg), "auth key %s: %s", cfg->auth_key,
				 r == -EACCES ? "not a regular file that only its owner may "
				 "read (chmod 600)" : strerror(-r));
			goto fail;
		}
	}
	/* the connect side first: a name that does not resolve is a config error */
	if (cfg->connect.kind == VSXD_EP_TCP)
		r = tcp_sa(cfg->connect.host, cfg->connect.port, false, &f->ta, &f->talen);
	else if (cfg->connect.kind == VSXD_EP_UNIX)
		r = unix_sa(cfg->connect.host, &f->ta, &f->talen);
	if (r < 0) {
		snprintf(err->msg, sizeof(err->msg), "cannot resolve %s", cfg->connect.text);
		goto fail;
	}
	switch (cfg->listen.kind) {
	case VSXD_EP_TCP:
	case VSXD_EP_UNIX:
		r = fwd_listen_fd(f, err);
		if (r < 0)
			goto fail;
		ac.fd = f->lfd;
		ac.cb = fd_accept_cb;
		break;
	case VSXD_EP_VM:
		r = vsxb_router_listen_port(fs->r, cfg->listen.host, cfg->listen.port,
					   cfg->name, port_cb, f, &f->port);
		if (r < 0) {
			snprintf(err->msg, sizeof(err->msg), "cannot listen on %s: %s",
				 cfg->listen.text, r == -EADDRINUSE ?
				 "another forward serves that port" : strerror(-r));
			goto fail;
		}
		break;
	default:
		o.auth_key_file = cfg->auth_key;
		r = vsx_listen(cfg->listen.lib, &o, &f->ls);
		if (r < 0) {
			snprintf(err->msg, sizeof(err->msg), "cannot listen on %s: %s",
				 cfg->listen.text, vsx_strerror(r));
			f->ls = NULL;
			goto fail;
		}
		ac.fd = vsx_fd(f->ls);
		ac.accept = lib_accept_one;
		break;
	}
	if (cfg->listen.kind != VSXD_EP_VM) {
		snprintf(name, sizeof(name), "forward %s (%s)", cfg->name, cfg->listen.text);
		ac.name = name;
		ac.arg = f;
		r = vsxu_acceptor_new(&ac, &f->acc);
		if (r < 0) {
			snprintf(err->msg, sizeof(err->msg), "out of memory");
			goto fail;
		}
	}
	*out = f;
	return 0;
fail:
	if (!r)
		r = -EINVAL;
	fwd_stop(f);
	return r;
}

int vsxd_fwds_new(struct event_base *base, struct vsxb_router *r, vsxd_fwd_log_fn log,
		  struct vsxd_fwds **out)
{
	struct vsxd_fwds *fs = calloc(1, sizeof(*fs));

	if (!fs)
		return -ENOMEM;
	fs->base = base;
	/* the listeners' watches: an adapter of their own, outside the
	 * loop's polling counts (loop-event.h) */
	vsxu_evloop_init(&fs->acc_loop, base);
	fs->r = r;
	fs->log = log;
	fs->relays.next = fs->relays.prev = &fs->relays;
	pthread_mutex_init(&fs->mu, NULL);
	pthread_cond_init(&fs->cv, NULL);
	if (pipe2(fs->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		pthread_mutex_destroy(&fs->mu);
		pthread_cond_destroy(&fs->cv);
		free(fs);
		return -errno;
	}
	/* workers must never block on a full pipe: at most FWD_MAX_JOBS
	 * pointers are ever in it, far below a pipe's capacity */
	fs->pev = event_new(base, fs->pipe[0], EV_READ | EV_PERSIST, pipe_cb, fs);
	if (!fs->pev || event_add(fs->pev, NULL) < 0) {
		vsxd_fwds_free(fs);
		return -ENOMEM;
	}
	*out = fs;
	return 0;
}

void vsxd_fwds_free(struct vsxd_fwds *fs)
{
	struct fwd *f;
	unsigned n;

	if (!fs)
		return;
	while ((f = fs->fwds)) {
		fs->fwds = f->next;
		fwd_stop(f);
	}
	/* Workers are bounded by FWD_CONNECT_MS: wait for them, and take
	 * their results, so nothing is left behind. */
	for (;;) {
		pthread_mutex_lock(&fs->mu);
		n = fs->njobs;
		pthread_mutex_unlock(&fs->mu);
		if (!n || !fs->pev)
			break;
		struct pollfd p = { .fd = fs->pipe[0], .events = POLLIN };

		poll(&p, 1, 100);
		pipe_cb(fs->pipe[0], EV_READ, fs);
	}
	if (fs->pev)
		event_free(fs->pev);
	close(fs->pipe[0]);
	close(fs->pipe[1]);
	pthread_mutex_destroy(&fs->mu);
	pthread_cond_destroy(&fs->cv);
	free(fs);
}

int vsxd_fwds_apply(struct vsxd_fwds *fs, const struct vsxd_config *cfg, bool strict,
		    struct vsxd_err *err)
{
	struct fwd *f, **pp, *nf = NULL;
	struct vsxd_err e;
	bool *running;
	size_t i;
	int r, failed = 0;

	running = calloc(cfg->n_fwds + 1, sizeof(*running));
	if (!running) {
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		return -ENOMEM;
	}
	/* Keep the unchanged ones... */
	for (f = fs->fwds; f; f = f->next) {
		f->keep = false;
		for (i = 0; i < cfg->n_fwds; i++) {
			if (!running[i] && vsxd_fwd_same(&f->cfg, &cfg->fwds[i])) {
				running[i] = true;
				f->keep = true;
				break;
			}
		}
	}
	/* ...stop the others (their addresses become free)... */
	for (pp = &fs->fwds; (f = *pp);) {
		if (f->keep) {
			pp = &f->next;
			continue;
		}
		*pp = f->next;
		vsxd__flog(fs, LOG_INFO, "forward %s: removed", f->cfg.name);
		fwd_stop(f);
	}
	/* ...and start the new ones, in order. */
	for (i = 0; i < cfg->n_fwds; i++) {
		if (running[i])
			continue;
		r = fwd_start(fs, &cfg->fwds[i], &nf, &e);
		if (r < 0) {
			if (strict) {
				snprintf(err->msg, sizeof(err->msg), "%.100s: forward %.64s: %.300s",
					 cfg->fwds[i].origin ? cfg->fwds[i].origin : "?",
					 cfg->fwds[i].name, e.msg);
				free(running);
				return r;
			}
			vsxd__flog(fs, LOG_ERR, "%s: forward %s: %s", cfg->fwds[i].origin ?
				   cfg->fwds[i].origin : "?", cfg->fwds[i].name, e.msg);
			failed++;
			continue;
		}
		nf->next = NULL;
		for (pp = &fs->fwds; *pp; pp = &(*pp)->next)
			;
		*pp = nf;
		vsxd__flog(fs, LOG_INFO, "forward %s: %s -> %s%s%s", nf->cfg.name,
			   nf->cfg.listen.text, nf->cfg.connect.text,
			   nf->cfg.n_allow ? " (allow list)" : "",
			   nf->cfg.auth_key ? " (auth psk)" : "");
	}
	free(running);
	return failed;
}

int vsxd_fwds_foreach(struct vsxd_fwds *fs, vsxd_relay_cb cb, void *arg)
{
	struct vsxd_relay_info ri;
	struct relay *rl;
	int r;

	if (!fs)
		return 0;
	for (rl = fs->relays.next; rl != &fs->relays; rl = rl->next) {
		memset(&ri, 0, sizeof(ri));
		ri.id = rl->id;
		ri.forward = rl->f->cfg.name;
		ri.client = rl->client;
		ri.target = rl->f->cfg.connect.text;
		ri.state = vsxd__rl_state(rl->state);
		ri.from_client = rl->b[0].bytes;
		ri.to_client = rl->b[1].bytes;
		ri.queued_from_client = rl->b[0].len;
		ri.queued_to_client = rl->b[1].len;
		ri.auth = rl->auth;
		r = cb(&ri, arg);
		if (r)
			return r;
	}
	return 0;
}

int vsxd_fwds_close(struct vsxd_fwds *fs, uint64_t id)
{
	struct relay *rl;

	if (!fs)
		return -ENOENT;
	for (rl = fs->relays.next; rl != &fs->relays; rl = rl->next) {
		if (rl->id == id) {
			relay_end(rl, "closed by the control socket");
			return 0;
		}
	}
	return -ENOENT;
}

void vsxd_fwds_add_stats(struct vsxd_fwds *fs, const struct vsxd_fwd_stats *add)
{
	fs->st.accepted += add->accepted;
	fs->st.denied += add->denied;
	fs->st.failed += add->failed;
	fs->st.auth_failures += add->auth_failures;
}

void vsxd_fwds_stats(const struct vsxd_fwds *fs, struct vsxd_fwd_stats *out)
{
	const struct fwd *f;

	memset(out, 0, sizeof(*out));
	if (!fs)
		return;
	*out = fs->st;
	out->forwards = 0;
	for (f = fs->fwds; f; f = f->next)
		out->forwards++;
	out->relays = fs->nrelays;
}

