/*
 * vsxd's control socket (libvsx/ctl-proto.h; documented in vsxd(8)).
 *
 * The listener is a Unix stream socket with the mode and group of
 * control-mode and control-group (0600 and vsxd's group unless set;
 * vsxd_control_perm). Each accepted client is checked with SO_PEERCRED
 * and SO_PEERGROUPS before anything it sends is read: root, vsxd's own
 * effective uid, the control-allow-uid list and members of control-group
 * may talk; any other client gets one reply (errno=13, EACCES) and is
 * closed once it has sent its request (so its send does not fail with
 * EPIPE first) or after a second.
 *
 * Clients are bufferevents. Requests are read as blocks ended by an empty
 * line, at most VSX_CTL_REQ_MAX bytes each, and answered in order, several
 * per connection. A request that does not end within VSX_CTL_REQ_MAX
 * bytes loses the framing: it gets E2BIG and the connection is closed
 * once the reply is out. Anything wrong inside a well-framed block is
 * answered (EINVAL, EPROTONOSUPPORT, ...) and the connection stays.
 *
 * Bounds. At most max_clients clients are served (more get EBUSY); each
 * holds at most one request of input beyond what it already sent and is
 * not reading while its unsent output exceeds CTL_OUT_HIGH (replies are
 * produced only as the client reads them); a client must complete each
 * request, and read each reply, within timeout_ms of the previous one,
 * or it is told ETIMEDOUT (when its output is empty) and closed. Nothing
 * a client does blocks the loop: sockets are non-blocking and every
 * request is answered from memory.
 *
 * What a complete block asks is answered by control_cmds.c
 * (vsxd_control_answer); every reply ends with "errno=N" (0: success),
 * preceded by "error=TEXT" when N is not 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "ctl-proto.h"
#include "control.h"
#include "control-int.h"
#include "vhost-user/acceptor.h"
#include "vhost-user/loop-event.h"
#include "forward.h"
#include "util.h"

#define CTL_OUT_HIGH (256u * 1024)  /* stop reading while more is unsent */
#define CTL_LINGER_MS 2000          /* a closing client's last chance */

/* ---- Clients ---- */

static void client_free(struct ctl_client *cl)
{
	struct vsxd_control *c = cl->c;

	cl->prev->next = cl->next;
	cl->next->prev = cl->prev;
	if (!cl->denied)
		c->nclients--;
	c->nall--;
	if (cl->timer)
		event_free(cl->timer);
	bufferevent_free(cl->bev);
	free(cl);
}

static void client_arm(struct ctl_client *cl, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	evtimer_add(cl->timer, &tv);
}

/* Stop reading; free once the output is out (or after CTL_LINGER_MS). */
static void client_close(struct ctl_client *cl)
{
	cl->closing = true;
	bufferevent_disable(cl->bev, EV_READ);
	client_arm(cl, CTL_LINGER_MS);
}

/* One refusal reply, then close. */
static void client_refuse(struct ctl_client *cl, int e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void client_refuse(struct ctl_client *cl, int e, const char *fmt, ...)
{
	struct evbuffer *out = bufferevent_get_output(cl->bev);
	char msg[CTL_ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vsxd__ctl_end(out, e, msg);
}

/*
 * An upgrade handed everything to a new process (control_cmds.c): the
 * reply goes out now, on this thread, and the process ends (upgraded):
 * its loop must not run again, the new process serves what it served.
 */
static void handed_over(struct ctl_client *cl)
{
	struct evbuffer *out = bufferevent_get_output(cl->bev);
	int fd = bufferevent_getfd(cl->bev);
	int64_t deadline = vsx__now_ms() + 2000;
	size_t len = evbuffer_get_length(out), off = 0;
	/* (the bufferevent alone may drain its output: a copy is written) */
	const unsigned char *p = evbuffer_pullup(out, -1);

	while (p && off < len && vsx__wait_fd(fd, POLLOUT, deadline) > 0) {
		ssize_t n = write(fd, p + off, len - off);

		if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;
		off += n > 0 ? (size_t)n : 0;
	}
	cl->c->upgraded(cl->c->upgrade_arg);
}

/* Answer what complete requests the input holds. false: @cl was freed. */
static bool client_process(struct ctl_client *cl)
{
	struct evbuffer *in = bufferevent_get_input(cl->bev);
	struct evbuffer *out = bufferevent_get_output(cl->bev);
	char req[VSX_CTL_REQ_MAX];
	size_t len, n, end;
	unsigned char *p;

	while (!cl->closing && !cl->paused) {
		len = evbuffer_get_length(in);
		if (!len)
			break;
		n = len < VSX_CTL_REQ_MAX ? len : VSX_CTL_REQ_MAX;
		p = evbuffer_pullup(in, (ev_ssize_t)n);
		if (!p) {
			client_free(cl);
			return false;
		}
		end = vsx__ctl_block_end((const char *)p, n);
		if (cl->denied) {
			/* the refusal is queued: wait for the request, drop it */
			evbuffer_drain(in, len);
			if (end || len >= VSX_CTL_REQ_MAX)
				client_close(cl);
			break;
		}
		if (!end) {
			if (len < VSX_CTL_REQ_MAX)
				break;  /* wait for the rest */
			vsxd__ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: request larger "
				      "than %d bytes: closed", (unsigned long long)cl->serial,
				      VSX_CTL_REQ_MAX);
			client_refuse(cl, E2BIG, "request larger than %d bytes (or not "
				      "ended by an empty line): connection closed",
				      VSX_CTL_REQ_MAX);
			client_close(cl);
			break;
		}
		memcpy(req, p, end);
		evbuffer_drain(in, end);
		vsxd_control_answer(cl->c, req, end, cl->uid, out);
		if (cl->c->handed_over)
			handed_over(cl);
		client_arm(cl, cl->c->timeout_ms);
		if (evbuffer_get_length(out) > CTL_OUT_HIGH) {
			vsxd__ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: more than %u "
				      "bytes of replies unread: not reading",
				      (unsigned long long)cl->serial, CTL_OUT_HIGH);
			cl->paused = true;
			bufferevent_disable(cl->bev, EV_READ);
		}
	}
	if (cl->eof && !cl->paused && !cl->closing)
		client_close(cl);
	if (cl->closing && !evbuffer_get_length(out)) {
		client_free(cl);
		return false;
	}
	return true;
}

static void on_read(struct bufferevent *bev, void *arg)
{
	client_process(arg);
}

/* The output drained completely (the low watermark is 0). */
static void on_write(struct bufferevent *bev, void *arg)
{
	struct ctl_client *cl = arg;

	if (cl->closing) {
		client_free(cl);
		return;
	}
	if (cl->paused) {
		cl->paused = false;
		if (!cl->eof)
			bufferevent_enable(cl->bev, EV_READ);
		client_process(cl);
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct ctl_client *cl = arg;

	if ((what & BEV_EVENT_ERROR) || !(what & BEV_EVENT_EOF)) {
		client_free(cl);
		return;
	}
	/* EOF: answer what was sent, flush, close. */
	cl->eof = true;
	bufferevent_disable(cl->bev, EV_READ);
	if (!evbuffer_get_length(bufferevent_get_output(cl->bev)) && !cl->paused) {
		client_free(cl);
		return;
	}
	if (!cl->paused)
		client_close(cl);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct ctl_client *cl = arg;
	struct evbuffer *out = bufferevent_get_output(cl->bev);

	if (cl->closing || cl->denied || evbuffer_get_length(out)) {
		vsxd__ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: %s: closed",
			      (unsigned long long)cl->serial,
			      cl->closing ? "did not read its last reply" : "too slow");
		client_free(cl);
		return;
	}
	vsxd__ctl_log(cl->c, VSXB_LOG_DEBUG, "control: client %llu: no request in %u ms: closed",
		      (unsigned long long)cl->serial, cl->c->timeout_ms);
	client_refuse(cl, ETIMEDOUT, "no complete request in %u ms: connection closed",
		      cl->c->timeout_ms);
	client_close(cl);
}

/* Whether the peer on @fd had @gid among its supplementary groups when it
 * connected (SO_PEERGROUPS). */
static bool peer_has_group(struct vsxd_control *c, int fd, gid_t gid)
{
	gid_t small[64], *g = small;
	socklen_t len = sizeof(small);
	bool found = false;
	size_t i;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
		if (errno != ERANGE || !(g = malloc(len)) ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
			vsxd__ctl_log(c, VSXB_LOG_WARNING, "control: SO_PEERGROUPS: %s",
				      strerror(errno));
			if (g != small)
				free(g);
			return false;
		}
	}
	for (i = 0; i < len / sizeof(gid_t); i++)
		if (g[i] == gid)
			found = true;
	if (g != small)
		free(g);
	return found;
}

static bool peer_allowed(struct vsxd_control *c, int fd, const struct ucred *cred)
{
	size_t i;

	if (cred->uid == 0 || cred->uid == c->self)
		return true;
	for (i = 0; i < c->nallow; i++)
		if (c->allow[i] == cred->uid)
			return true;
	return c->has_gid && (cred->gid == (gid_t)c->gid || peer_has_group(c, fd, c->gid));
}

static void on_accept(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
	struct vsxd_control *c = arg;
	struct ucred cred;
	socklen_t cl_len = sizeof(cred);
	struct ctl_client *cl;

	(void)sa;
	(void)len;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl_len) < 0) {
		vsxd__ctl_log(c, VSXB_LOG_WARNING, "control: SO_PEERCRED: %s", strerror(errno));
		close(fd);
		return;
	}
	/* Refused clients do not count, but their number is bounded too. */
	if (c->nall >= 2 * c->max_clients + 16) {
		close(fd);
		return;
	}
	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		close(fd);
		return;
	}
	cl->c = c;
	cl->uid = cred.uid;
	cl->pid = cred.pid;
	cl->serial = ++c->next_serial;
	cl->bev = bufferevent_socket_new(c->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!cl->bev) {
		close(fd);
		free(cl);
		return;
	}
	cl->timer = evtimer_new(c->base, on_timeout, cl);
	if (!cl->timer) {
		bufferevent_free(cl->bev);
		free(cl);
		return;
	}
	c->nall++;
	cl->next = &c->clients;
	cl->prev = c->clients.prev;
	c->clients.prev->next = cl;
	c->clients.prev = cl;
	bufferevent_setcb(cl->bev, on_read, on_write, on_event, cl);
	/* At most one request beyond what is being answered is read in. */
	bufferevent_setwatermark(cl->bev, EV_READ, 0, VSX_CTL_REQ_MAX);

	if (!peer_allowed(c, fd, &cred)) {
		char grp[48] = "";

		if (c->has_gid)
			snprintf(grp, sizeof(grp), ", members of group %u", c->gid);
		vsxd__ctl_log(c, VSXB_LOG_WARNING, "control: uid %u (pid %d) refused: not root, "
			      "vsxd's uid, a control-allow-uid or in control-group", cl->uid,
			      (int)cl->pid);
		cl->denied = true;
		client_refuse(cl, EACCES, "permission denied: uid %u may not use this "
			      "control socket (allowed: root, uid %u%s%s)", cl->uid, c->self,
			      c->nallow ? ", control-allow-uid" : "", grp);
		bufferevent_enable(cl->bev, EV_READ);
		client_arm(cl, CTL_LINGER_MS);
		return;
	}
	c->nclients++;
	if (c->nclients > c->max_clients) {
		vsxd__ctl_log(c, VSXB_LOG_WARNING, "control: more than %u clients: uid %u (pid %d) "
			      "refused", c->max_clients, cl->uid, (int)cl->pid);
		c->nclients--;
		cl->denied = true;
		client_refuse(cl, EBUSY, "vsxd is serving %u control clients already; "
			      "try again", c->max_clients);
		bufferevent_enable(cl->bev, EV_READ);
		client_arm(cl, CTL_LINGER_MS);
		return;
	}
	vsxd__ctl_log(c, VSXB_LOG_DEBUG, "control: client %llu: uid %u pid %d",
		      (unsigned long long)cl->serial, cl->uid, (int)cl->pid);
	bufferevent_enable(cl->bev, EV_READ);
	client_arm(cl, c->timeout_ms);
}

/* ---- The socket ---- */

/* Bind the listener (its mode and group set before anyone can connect),
 * replacing only a stale socket; note which file is ours
 * (vsxd_control_free unlinks it, vsxd_control_set_access changes it, only
 * if it is still that one). */
static int bind_socket(struct vsxd_control *c)
{
	struct stat st;
	bool replaced;
	int r;

	/* vsxd's group without a control group, also on a socket inherited
	 * from a process that had one */
	r = vsx__unix_bind(c->lfd, c->path, c->mode, c->has_gid ? (gid_t)c->gid : getegid(),
			   &replaced);
	if (r < 0)
		return r;
	if (replaced)
		vsxd__ctl_log(c, VSXB_LOG_INFO, "control: replacing the stale socket %s", c->path);
	if (lstat(c->path, &st) == 0) {
		c->dev = st.st_dev;
		c->ino = st.st_ino;
	}
	return 0;
}

static int set_allowed(struct vsxd_control *c, const struct vsxd_control_access *a)
{
	uint32_t *u = NULL;

	if (a->n_allow_uids) {
		u = malloc(a->n_allow_uids * sizeof(*u));
		if (!u)
			return -ENOMEM;
		memcpy(u, a->allow_uids, a->n_allow_uids * sizeof(*u));
	}
	free(c->allow);
	c->allow = u;
	c->nallow = a->n_allow_uids;
	c->has_gid = a->has_gid;
	c->gid = a->gid;
	c->mode = a->mode & 0777u;
	return 0;
}

int vsxd_control_set_access(struct vsxd_control *c, const struct vsxd_control_access *a)
{
	struct stat st;
	gid_t gid;
	int r;

	r = set_allowed(c, a);
	if (r < 0)
		return r;
	gid = c->has_gid ? (gid_t)c->gid : getegid();

	if (lstat(c->path, &st) < 0 || st.st_dev != c->dev || st.st_ino != c->ino)
		return 0;       /* not ours any more: another vsxd's, or gone */
	if ((st.st_mode & 0777u) == c->mode && st.st_gid == gid)
		return 0;
	if (lchown(c->path, (uid_t)-1, gid) < 0 || chmod(c->path, c->mode) < 0)
		return -errno;
	return 1;
}

int vsxd_control_new(struct event_base *base, struct vsxb_router *r,
		     const struct vsxd_control_opts *o, struct vsxd_control **out)
{
	struct vsxu_acceptor_conf ac = { .cb = on_accept };
	char name[sizeof(((struct sockaddr_un *)0)->sun_path) + 32];
	struct sockaddr_un un;
	struct vsxd_control *c;
	int rc;

	if (!base || !r || !o || !o->path || !*o->path || !out)
		return -EINVAL;
	rc = vsx__unix_addr(&un, o->path);
	if (rc < 0)
		return rc;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base = base;
	c->r = r;
	c->lfd = -1;
	c->self = (uint32_t)geteuid();
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : VSXD_CONTROL_TIMEOUT_MS;
	c->max_clients = o->max_clients ? o->max_clients : VSXD_CONTROL_MAX_CLIENTS;
	c->log = o->log;
	c->fwds = o->fwds;
	c->evloop = o->evloop;
	c->workers = o->workers;
	c->upgrade = o->upgrade;
	c->upgraded = o->upgraded;
	c->upgrade_arg = o->upgrade_arg;
	if (o->start) {
		c->start = *o->start;
		c->has_start = true;
	}
	c->log_arg = o->log_arg;
	c->clients.next = c->clients.prev = &c->clients;
	ac.arg = c;
	ac.log = o->log;
	ac.log_arg = o->log_arg;
	clock_gettime(CLOCK_MONOTONIC, &c->started);
	rc = -ENOMEM;
	c->path = strdup(o->path);
	if (!c->path || set_allowed(c, &o->access) < 0)
		goto err_free;

	/* the directories vsxd creates are 0755: the socket's own mode and
	 * peer check keep others out */
	rc = vsx__mkdir_parents(c->path, 0755, VSX__GID_KEEP);
	if (rc < 0)
		goto err_free;
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->lfd < 0) {
		rc = -errno;
		goto err_free;
	}
	rc = bind_socket(c);
	if (rc < 0)
		goto err_close;
	if (listen(c->lfd, 64) < 0) {
		rc = -errno;
		goto err_unlink;
	}
	/* control traffic: an adapter of its own, outside the loop's
	 * polling counts (loop-event.h) */
	vsxu_evloop_init(&c->acc_loop, base);
	snprintf(name, sizeof(name), "the control socket %s", c->path);
	ac.loop = &c->acc_loop.loop;
	ac.fd = c->lfd;
	ac.name = name;
	rc = vsxu_acceptor_new(&ac, &c->acc);
	if (rc < 0)
		goto err_unlink;
	*out = c;
	return 0;

err_unlink:
	unlink(c->path);
err_close:
	close(c->lfd);
err_free:
	free(c->allow);
	free(c->path);
	free(c);
	return rc;
}

void vsxd_control_free(struct vsxd_control *c)
{
	struct stat st;

	if (!c)
		return;
	while (c->clients.next != &c->clients)
		client_free(c->clients.next);
	vsxu_acceptor_free(c->acc);
	close(c->lfd);
	/* Only our own socket: another vsxd may have replaced it. */
	if (lstat(c->path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
		unlink(c->path);
	free(c->allow);
	free(c->path);
	free(c);
}

