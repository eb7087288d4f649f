/*
 * The live handoff: `vsxctl upgrade [--exec PATH]` makes this vsxd hand
 * every descriptor that keeps a VM's device alive, and every listening
 * socket, to a new vsxd process, which serves on; this one exits once
 * the new one says it serves (vsxd(8) UPGRADING VSXD).
 *
 * 1. Quiesce: every worker is parked at a clean point (a world stop,
 *    vsxb_router_freeze) and stays parked; this thread, the control
 *    thread, serves nothing while it waits below. A vhost-user message
 *    QEMU sends meanwhile waits in its socket, a program connecting to a
 *    listener waits in the backlog.
 * 2. The state: each running or paused device (vsxb_vm_device_state; a
 *    paused one, QEMU's stop, without kick eventfds, its rings where
 *    GET_VRING_BASE left them) goes into the
 *    state record of state.h, its descriptors named as in systemd's file
 *    descriptor store (fdstore.c: vm.NAME.conn, .memK, .kickQ, .callQ),
 *    with the connections each VM has; every listening socket of the
 *    process is named listen.K (the new process matches them by address:
 *    util.h, inherited listeners); the record is a memfd named state,
 *    and the counters vsxd shows go along in one named counters (the
 *    counters record of state.h), so that they continue; the relays of
 *    the forwards established now in one named relays (the relays record
 *    of state.h, relay_keep.c), their sockets as relay.ID.0 and .1.
 * 3. The new process, which the launcher starts (launcher.c: the
 *    syscall allowlist forbids this process fork and execve), gets them
 *    as systemd passes its store (sd_listen_fds_with_names(3):
 *    $LISTEN_FDS descriptors from 3 on, $LISTEN_FDNAMES, $LISTEN_PID),
 *    and $VSXD_HANDOFF_FD, the write end of a pipe. It starts as after a crash (fdstore.c: each VM adopts its
 *    device), but each connection the record holds whole with its host
 *    socket (conn.ID.host: vsxb_vm_foreach_keep says which can go on)
 *    is made again before the device runs, without a TRANSPORT_RESET;
 *    the others end (an RST to the guest, EOF to the host program when
 *    this process exits). It binds nothing that it inherited,
 *    and before its loop runs writes one line: "serving ..." or
 *    "refused WHY". Until then it has not touched a ring or read from a
 *    socket, so whatever becomes of it, this process can go on.
 * 4. "serving": committed; the caller answers vsxctl and exits at once,
 *    without thawing or cleaning up (no socket path unlinked). Anything
 *    else (a refusal, the pipe closed by an exit or a crash, no answer
 *    within the timeout: the new process is killed) leaves this process
 *    serving: the workers are thawed and the caller says why.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forward.h"
#include "handoff.h"
#include "launcher.h"
#include "state.h"
#include "state_live.h"
#include "util.h"
#include "vhost-user/vhost_user.h"

#define MAX_LISTENERS 1024

/* The descriptors handed over, with their names. */
struct fdl {
	int *fd;
	char **name;
	unsigned n, cap;
};

static int fdl_add(void *arg, const char *name, int fd)
{
	struct fdl *l = arg;

	if (l->n == l->cap) {
		unsigned cap = l->cap ? 2 * l->cap : 32;
		int *nf = realloc(l->fd, cap * sizeof(*nf));
		char **nn;

		if (!nf)
			return -ENOMEM;
		l->fd = nf;
		nn = realloc(l->name, cap * sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		l->name = nn;
		l->cap = cap;
	}
	l->name[l->n] = strdup(name);
	if (!l->name[l->n])
		return -ENOMEM;
	l->fd[l->n++] = fd;
	return 0;
}

static void fdl_free(struct fdl *l)
{
	for (unsigned i = 0; i < l->n; i++)
		free(l->name[i]);
	free(l->fd);
	free(l->name);
}

__attribute__((format(printf, 3, 4)))
static void why_set(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

struct conn_walk {
	struct vsxd_state_vm *v;
	struct fdl *l;
};

/* One connection, whole, into the record; its host socket, if it can go
 * on in the new process, handed over as conn.ID.host. */
static int conn_add(const struct vsxb_conn_keep *k, void *arg)
{
	struct conn_walk *w = arg;
	struct vsxd_state_vm *v = w->v;
	struct vsxd_state_conn *nc, *c;
	int r;

	if (v->nconns == VSXD_STATE_MAX_CONNS)
		return 0;  /* (not named: the guest's own timeouts end it) */
	nc = realloc(v->conns, (v->nconns + 1) * sizeof(*nc));
	if (!nc)
		return -ENOMEM;
	v->conns = nc;
	c = &nc[v->nconns++];
	r = vsxd_state_conn_whole(c, k);
	if (r == 0 && *c->host_fd)
		r = fdl_add(w->l, c->host_fd, k->fd);
	return r;
}

static int conn_count(const struct vsxb_conn_info *ci, void *arg)
{
	(void)ci;
	(*(unsigned *)arg)++;
	return 0;
}

/* Every running device into @s and its descriptors into @l. */
static int collect_vms(const struct vsxd_handoff_opts *o, struct vsxd_state *s,
		       struct fdl *l, char *why, size_t whylen)
{
	s->vms = calloc(o->n_vms ? o->n_vms : 1, sizeof(*s->vms));
	if (!s->vms)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_vms; i++) {
		struct vsxd_state_vm *v = &s->vms[s->nvms];
		struct vsxb_vm_info vi;
		struct vsxu_vu_state st;
		int r;

		if (!o->vms[i])
			continue;
		vsxb_vm_get_info(o->vms[i], &vi);
		r = vsxb_vm_device_state(o->vms[i], &st);
		if (r == -ENOTCONN)
			continue;        /* no front-end: its listener is all */
		if (r == -EAGAIN) {
			why_set(why, whylen, "vm %s: its front-end is still setting the "
				"device up, or stopping or restarting its rings; try again",
				vi.name);
			return r;
		}
		if (r < 0) {
			why_set(why, whylen, "vm %s: its device state: %s", vi.name,
				strerror(-r));
			return r;
		}
		snprintf(v->name, sizeof(v->name), "%s", vi.name);
		v->cid = vi.guest_cid;
		r = vsxd_state_vm_fill(v, &st, fdl_add, l);
		if (r == 0) {
			struct conn_walk w = { .v = v, .l = l };

			r = vsxb_vm_foreach_keep(o->vms[i], conn_add, &w);
		}
		s->nvms++;
		if (r < 0) {
			why_set(why, whylen, "vm %s: %s", vi.name, strerror(-r));
			return r;
		}
	}
	return 0;
}

/* LISTEN_FDNAMES's value: @l's names, ':'-separated. */
static char *fd_names(const struct fdl *l)
{
	size_t len = 1;
	char *names, *p;

	for (unsigned i = 0; i < l->n; i++)
		len += strlen(l->name[i]) + 1;
	names = malloc(len);
	if (!names)
		return NULL;
	p = names;
	*p = '\0';
	for (unsigned i = 0; i < l->n; i++)
		p += sprintf(p, "%s%s", i ? ":" : "", l->name[i]);
	return names;
}

/* The new process's answer: 0 ("serving", *@rep filled), or why not. */
static int await(pid_t pid, int rfd, unsigned timeout_ms, struct vsxd_handoff_report *rep,
		 char *why, size_t whylen)
{
	int64_t deadline = vsx__now_ms() + timeout_ms;
	char line[512];
	size_t got = 0;
	int status, r;

	for (;;) {
		char *nl;
		ssize_t n;

		r = vsx__wait_fd(rfd, POLLIN, deadline);
		if (r == 0) {
			vsxd_launcher_kill(pid);
			vsxd_launcher_wait(pid, &status, 0);
			why_set(why, whylen, "the new process did not say it serves within "
				"%u ms: killed", timeout_ms);
			return -ETIMEDOUT;
		}
		n = read(rfd, line + got, sizeof(line) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		line[got] = '\0';
		nl = strchr(line, '\n');
		if (!nl && got < sizeof(line) - 1)
			continue;
		if (nl)
			*nl = '\0';
		/* conns-kept: not said by a vsxd that keeps none */
		rep->conns_kept = 0;
		if (sscanf(line, "serving vms=%u conns-ended=%u listeners=%u conns-kept=%u",
			   &rep->vms, &rep->conns_ended, &rep->listeners,
			   &rep->conns_kept) >= 3)
			return 0;
		vsxd_launcher_kill(pid);
		vsxd_launcher_wait(pid, &status, 0);
		if (!strncmp(line, "refused ", 8))
			why_set(why, whylen, "the new process refused: %s", line + 8);
		else
			why_set(why, whylen, "the new process said '%.200s'", line);
		return -EPROTO;
	}
	/* the pipe closed without a word: it exited, or closed it and will */
	for (r = 0; r < 100 && vsxd_launcher_wait(pid, &status, 1) == 1; r++)
		usleep(10000);
	if (r == 100) {
		vsxd_launcher_kill(pid);
		vsxd_launcher_wait(pid, &status, 0);
		why_set(why, whylen, "the new process closed its answer pipe without a "
			"word: killed");
	} else if (WIFSIGNALED(status)) {
		why_set(why, whylen, "the new process was killed by signal %d (%s)",
			WTERMSIG(status), strsignal(WTERMSIG(status)));
	} else {
		why_set(why, whylen, "the new process exited with status %d before it "
			"served", WEXITSTATUS(status));
	}
	return -ECHILD;
}

int vsxd_handoff_run(const struct vsxd_handoff_opts *o, struct vsxd_handoff_report *rep,
		     char *why, size_t whylen)
{
	struct vsxd_state s = { .generation = o->generation };
	int lfds[MAX_LISTENERS], pfd[2] = { -1, -1 };
	int state = -1, cnt = -1, rly = -1, nl, r;
	unsigned rkept, rended;
	struct fdl l = { 0 };
	char *names = NULL, name[32];
	pid_t pid;

	memset(rep, 0, sizeof(*rep));
	if (access(o->exec, X_OK) < 0) {
		r = -errno;
		why_set(why, whylen, "cannot run %s: %s", o->exec, strerror(errno));
		return r;
	}
	vsxb_router_freeze(o->router);
	r = collect_vms(o, &s, &l, why, whylen);
	if (r < 0)
		goto fail;
	vsxb_router_foreach_conn(o->router, NULL, conn_count, &rep->conns_ended);
	nl = vsx__listeners(lfds, MAX_LISTENERS);
	if (nl < 0) {
		r = nl;
		why_set(why, whylen, "cannot list the listening sockets: %s", strerror(-r));
		goto fail;
	}
	for (int i = 0; i < nl && r == 0; i++) {
		snprintf(name, sizeof(name), "listen.%d", i);
		r = fdl_add(&l, name, lfds[i]);
	}
	if (r == 0 && vsxd_state_size(&s) > VSXD_STATE_MAX_LEN) {
		/* the bytes connections hold go into the record */
		why_set(why, whylen, "the state would take %zu bytes, more than a record "
			"holds (%u): connections hold too many bytes; try again",
			vsxd_state_size(&s), VSXD_STATE_MAX_LEN);
		r = -E2BIG;
		goto fail;
	}
	state = r == 0 ? vsxd_state_memfd(&s) : r;
	if (state >= 0)
		r = fdl_add(&l, "state", state);
	else
		r = state;
	if (r == 0 && o->fwds) {
		/* (the relays' sockets stay this process's until it exits) */
		rly = vsxd_fwds_save(o->fwds, fdl_add, &l, &rkept, &rended);
		if (rly >= 0) {
			r = fdl_add(&l, "relays", rly);
		} else if (rly != -ENOENT && o->log) {
			char msg[128];

			snprintf(msg, sizeof(msg), "upgrade: cannot save the relays of forwards "
				 "(%s): they end", strerror(-rly));
			o->log(NULL, VSXB_LOG_WARNING, msg);
		}
	}
	if (r == 0 && o->counted) {
		cnt = vsxd_counters_save(o->counted);
		if (cnt >= 0)
			r = fdl_add(&l, "counters", cnt);
		else if (o->log) {
			char msg[128];

			snprintf(msg, sizeof(msg), "upgrade: cannot save the counters (%s): "
				 "the new process counts from 0", strerror(-cnt));
			o->log(NULL, VSXB_LOG_WARNING, msg);
		}
	}
	if (r == 0 && pipe2(pfd, O_CLOEXEC) < 0)
		r = -errno;
	if (r == 0 && !(names = fd_names(&l)))
		r = -ENOMEM;
	if (r < 0) {
		why_set(why, whylen, "cannot prepare the handoff: %s", strerror(-r));
		goto fail;
	}
	rep->fds = l.n;
	pid = vsxd_launcher_spawn(o->exec, l.fd, names, l.n, pfd[1], why, whylen);
	if (pid < 0) {
		r = pid;
		goto fail;
	}
	rep->pid = (int)pid;
	close(pfd[1]);
	pfd[1] = -1;
	r = await(pid, pfd[0], o->timeout_ms ? o->timeout_ms : VSXD_HANDOFF_TIMEOUT_MS, rep,
		  why, whylen);
	if (r < 0)
		goto fail;
	/* committed: nothing is thawed, nothing more is touched */
	close(pfd[0]);
	if (cnt >= 0)
		close(cnt);
	if (rly >= 0)
		close(rly);
	free(names);
	fdl_free(&l);
	vsxd_state_clear(&s);
	return 0;

fail:
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	if (state >= 0)
		close(state);
	if (cnt >= 0)
		close(cnt);
	if (rly >= 0)
		close(rly);
	free(names);
	fdl_free(&l);
	vsxd_state_clear(&s);
	vsxb_router_thaw(o->router);
	return r < 0 ? r : -EIO;
}

/* ---- The new process's side ---- */

int vsxd_handoff_fd(void)
{
	const char *e = getenv(VSXD_HANDOFF_ENV);
	uint64_t v;
	int fd;

	if (!e)
		return -1;
	fd = vsx__parse_dec(e, strlen(e), 1 << 20, &v) == 0 ? (int)v : -1;
	unsetenv(VSXD_HANDOFF_ENV);
	if (fd >= 0)
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}

static void say(int fd, const char *line)
{
	size_t n = strlen(line), off = 0;

	while (off < n) {
		ssize_t w = write(fd, line + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	close(fd);
}

void vsxd_handoff_serving(int fd, unsigned vms, unsigned conns_ended, unsigned listeners,
			  unsigned conns_kept)
{
	char line[160];

	snprintf(line, sizeof(line), "serving vms=%u conns-ended=%u listeners=%u "
		 "conns-kept=%u\n", vms, conns_ended, listeners, conns_kept);
	say(fd, line);
}

void vsxd_handoff_refuse(int fd, const char *why)
{
	char line[400];

	snprintf(line, sizeof(line), "refused %s\n", why);
	say(fd, line);
}
