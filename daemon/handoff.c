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
 * 3. The new process gets them as systemd passes its store
 *    (sd_listen_fds_with_names(3): $LISTEN_FDS descriptors from 3 on,
 *    $LISTEN_FDNAMES, $LISTEN_PID), and $VSXD_HANDOFF_FD, the write end
 *    of a pipe. It starts as after a crash (fdstore.c: each VM adopts its
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
#include "state.h"
#include "state_live.h"
#include "util.h"
#include "vhost-user/vhost_user.h"

extern char **environ;

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

static bool env_ours(const char *e)
{
	static const char *const ours[] = {
		"LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=", VSXD_HANDOFF_ENV "=",
	};

	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (!strncmp(e, ours[i], strlen(ours[i])))
			return true;
	return false;
}

/* The new process's environment: ours, and what says what it inherits.
 * *@pid_slot: the digits of $LISTEN_PID, which the child fills in. */
static char **child_env(const struct fdl *l, char **pid_slot)
{
	size_t ne = 0, k = 0, nlen = 16;
	char **env, *names, *p;

	while (environ[ne])
		ne++;
	for (unsigned i = 0; i < l->n; i++)
		nlen += strlen(l->name[i]) + 1;
	env = calloc(ne + 5, sizeof(*env));
	names = malloc(nlen);
	if (!env || !names)
		goto fail;
	for (size_t i = 0; i < ne; i++)
		if (!env_ours(environ[i]))
			env[k++] = environ[i];
	p = names + sprintf(names, "LISTEN_FDNAMES=");
	for (unsigned i = 0; i < l->n; i++)
		p += sprintf(p, "%s%s", i ? ":" : "", l->name[i]);
	env[k++] = names;
	if (asprintf(&env[k++], "LISTEN_FDS=%u", l->n) < 0 ||
	    asprintf(&env[k++], "LISTEN_PID=%-20s", "") < 0 ||
	    asprintf(&env[k++], VSXD_HANDOFF_ENV "=%u", 3 + l->n) < 0)
		goto fail_env;
	*pid_slot = env[k - 2] + strlen("LISTEN_PID=");
	env[k] = NULL;
	return env;

fail_env:
	/* (what asprintf left is freed with the lot below) */
fail:
	free(names);
	free(env);
	return NULL;
}

static void child_env_free(char **env, const struct fdl *l)
{
	size_t k = 0;

	(void)l;
	if (!env)
		return;
	while (env[k] && strncmp(env[k], "LISTEN_FDNAMES=", 15))
		k++;
	for (; env[k]; k++)
		free(env[k]);
	free(env);
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void put_pid(char *slot)
{
	char d[20];
	unsigned long v = (unsigned long)getpid();
	int n = 0;

	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (int i = 0; i < n; i++)
		slot[i] = d[n - 1 - i];
	slot[n] = '\0';
}

static pid_t spawn(const char *exec, char *const *argv, char **env, char *pid_slot,
		   const int *copies, unsigned n, int ack)
{
	static const char msg[] = "refused cannot execute the program\n";
	sigset_t all;
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	for (unsigned i = 0; i < n; i++)
		if (dup2(copies[i], 3 + (int)i) < 0)
			_exit(127);
	if (dup2(ack, 3 + (int)n) < 0)
		_exit(127);
	close_range(4 + n, ~0u, 0);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	put_pid(pid_slot);
	execve(exec, argv, env);
	if (write(3 + (int)n, msg, sizeof(msg) - 1) < 0)
		_exit(126);
	_exit(127);
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
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
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
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		if (!strncmp(line, "refused ", 8))
			why_set(why, whylen, "the new process refused: %s", line + 8);
		else
			why_set(why, whylen, "the new process said '%.200s'", line);
		return -EPROTO;
	}
	/* the pipe closed without a word: it exited, or closed it and will */
	for (r = 0; r < 100 && waitpid(pid, &status, WNOHANG) == 0; r++)
		usleep(10000);
	if (r == 100) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
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
	int lfds[MAX_LISTENERS], *copies = NULL, pfd[2] = { -1, -1 }, ack = -1;
	int state = -1, cnt = -1, rly = -1, nl, r;
	unsigned rkept, rended;
	struct fdl l = { 0 };
	char **env = NULL, *pid_slot = NULL, name[32];
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
	if (r == 0 && !(env = child_env(&l, &pid_slot)))
		r = -ENOMEM;
	if (r == 0 && !(copies = calloc(l.n + 1, sizeof(*copies))))
		r = -ENOMEM;
	if (r < 0) {
		why_set(why, whylen, "cannot prepare the handoff: %s", strerror(-r));
		goto fail;
	}
	/* copies above where the child puts them, so no dup2 there clobbers
	 * one still to come */
	for (unsigned i = 0; i < l.n; i++)
		copies[i] = -1;
	for (unsigned i = 0; i < l.n && r == 0; i++) {
		copies[i] = fcntl(l.fd[i], F_DUPFD_CLOEXEC, 4 + (int)l.n);
		if (copies[i] < 0)
			r = -errno;
	}
	if (r == 0) {
		ack = fcntl(pfd[1], F_DUPFD_CLOEXEC, 4 + (int)l.n);
		if (ack < 0)
			r = -errno;
	}
	if (r < 0) {
		why_set(why, whylen, "cannot prepare the handoff: %s", strerror(-r));
		goto fail;
	}
	rep->fds = l.n;
	pid = spawn(o->exec, o->argv, env, pid_slot, copies, l.n, ack);
	if (pid < 0) {
		r = -errno;
		why_set(why, whylen, "fork: %s", strerror(errno));
		goto fail;
	}
	rep->pid = (int)pid;
	close(pfd[1]);
	pfd[1] = -1;
	close(ack);
	ack = -1;
	for (unsigned i = 0; i < l.n; i++)
		close(copies[i]);
	free(copies);
	copies = NULL;
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
	child_env_free(env, &l);
	fdl_free(&l);
	vsxd_state_clear(&s);
	return 0;

fail:
	for (unsigned i = 0; copies && i < l.n; i++)
		if (copies[i] >= 0)
			close(copies[i]);
	free(copies);
	if (ack >= 0)
		close(ack);
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
	child_env_free(env, &l);
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
