/*
 * The launcher (launcher.h): how a live handoff starts the new vsxd when
 * the syscall allowlist (sandbox.c) forbids vsxd fork and execve.
 *
 * vsxd forks it early in its start-up, before it maps any guest memory
 * (the launcher would keep it mapped) and before the sandbox; it drops to
 * user= as vsxd does and keeps nothing but its end of a SOCK_SEQPACKET
 * pair. vsxd (handoff.c) sends it a request: the program, the names and
 * the descriptors to pass (SCM_RIGHTS, in batches), and the launcher
 * forks the new process, which places them at 3, 4, ... and executes the
 * program with vsxd's own argv and the environment the launcher kept,
 * plus $LISTEN_FDS, $LISTEN_FDNAMES, $LISTEN_PID and $VSXD_HANDOFF_FD.
 * vsxd then asks it to wait for or kill that child. It also opens the
 * configuration file for a reload (the one path it opens). It exits when vsxd
 * closes the pair, as vsxd's exit does; a new vsxd it started runs on
 * (reparented) and forks a launcher of its own.
 *
 * What a compromised vsxd can make of it is what the request can say:
 * which program, and which descriptors it gets. Not its arguments nor its
 * environment (so no LD_PRELOAD), and only a program owned by root that
 * nobody else may write, not one the compromised process wrote itself;
 * that program runs as vsxd's user, with no_new_privs (set before the
 * sandbox; inherited), and is the new vsxd: it sandboxes itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handoff.h"
#include "launcher.h"
#include "sandbox.h"

extern char **environ;

enum { OP_SPAWN = 1, OP_KILL, OP_WAIT, OP_OPEN_CONFIG };

#define BATCH 250              /* descriptors per message (SCM_MAX_FD 253) */
#define MAX_FDS 65536
#define MAX_TEXT (1u << 22)    /* the program and the names */

struct req {
	uint32_t op;
	int32_t pid;
	uint32_t n;                /* OP_SPAWN: descriptors, @ack not counted */
	uint32_t nohang;           /* OP_WAIT */
};

struct rep {
	int32_t r;                 /* pid, 0/1 (OP_WAIT) or -errno */
	int32_t status;
	char why[240];
};

static int lsock = -1;         /* vsxd's end */
static const char *config;     /* the launcher's: --config, or NULL */

/* ---- Descriptors over the pair ---- */

static int send_fds(int s, const void *buf, size_t len, const int *fds, unsigned n)
{
	char cbuf[CMSG_SPACE(BATCH * sizeof(int))];
	struct iovec iov = { (void *)buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (n) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = CMSG_SPACE(n * sizeof(int));
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	}
	while (sendmsg(s, &m, MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* One message into @buf (@len bytes expected), its descriptors into
 * @fds (at most @max; *@got of them). */
static int recv_fds(int s, void *buf, size_t len, int *fds, unsigned max, unsigned *got)
{
	char cbuf[CMSG_SPACE(BATCH * sizeof(int))];
	struct iovec iov = { buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t r;

	*got = 0;
	do
		r = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		unsigned k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*got < max)
				fds[(*got)++] = fd;
			else
				close(fd);
		}
	}
	if (r == 0)
		return -EPIPE;
	if ((size_t)r != len || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return -EPROTO;
	return 0;
}

/* ---- The launcher's side ---- */

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

/* The new process's environment: the launcher's, and what says what it
 * inherits. *@pid_slot: the digits of $LISTEN_PID, the child fills them. */
static char **child_env(const char *names, unsigned n, char **pid_slot)
{
	size_t ne = 0, k = 0;
	char **env;

	while (environ[ne])
		ne++;
	env = calloc(ne + 5, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < ne; i++)
		if (!env_ours(environ[i]))
			env[k++] = environ[i];
	if (asprintf(&env[k++], "LISTEN_FDNAMES=%s", names) < 0 ||
	    asprintf(&env[k++], "LISTEN_FDS=%u", n) < 0 ||
	    asprintf(&env[k++], "LISTEN_PID=%-20s", "") < 0 ||
	    asprintf(&env[k++], VSXD_HANDOFF_ENV "=%u", 3 + n) < 0)
		return NULL;   /* the launcher's child exits anyway */
	*pid_slot = env[k - 2] + strlen("LISTEN_PID=");
	env[k] = NULL;
	return env;
}

static int why(struct rep *p, int r, const char *fmt, const char *a, const char *b)
{
	snprintf(p->why, sizeof(p->why), fmt, a, b);
	p->r = r;
	return r;
}

/* The program may be started: a regular file owned by root that no
 * group or other user may write, executable by us. */
static int check_program(const char *exec, struct rep *p)
{
	struct stat st;

	if (*exec != '/')
		return why(p, -EINVAL, "%s: not an absolute path%s", exec, "");
	if (stat(exec, &st) < 0 || access(exec, X_OK) < 0)
		return why(p, -errno, "cannot run %s: %s", exec, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return why(p, -EACCES, "cannot run %s: %s", exec, "not a regular file");
	if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return why(p, -EACCES, "will not run %s: %s", exec,
			   "the launcher starts only a program owned by root that no group "
			   "or other user may write (vsxd(8) SECURITY)");
	return 0;
}

static void spawn(int s, const struct req *q, char *const *argv)
{
	struct rep p = { 0 };
	int *fds = NULL, *copies = NULL, memfd = -1;
	unsigned got = 0, k, total = q->n + 1;
	char *text = NULL, *names, **env = NULL, *pid_slot = NULL, b;
	struct stat st;
	pid_t pid;

	fds = calloc(total, sizeof(*fds));
	copies = calloc(total, sizeof(*copies));
	if (!fds || !copies || q->n > MAX_FDS) {
		why(&p, -ENOMEM, "the launcher cannot take %s descriptors%s", "so many", "");
		goto reply;
	}
	/* the memfd with the program and the names came with the request */
	if (recv_fds(s, &b, 1, &memfd, 1, &k) < 0 || k != 1 || fstat(memfd, &st) < 0 ||
	    st.st_size < 2 || st.st_size > MAX_TEXT ||
	    !(text = calloc(1, (size_t)st.st_size + 1)) ||
	    pread(memfd, text, (size_t)st.st_size, 0) != st.st_size) {
		why(&p, -EPROTO, "the launcher got a bad request%s%s", "", "");
		goto reply;
	}
	names = text + strlen(text) + 1;
	if (names > text + st.st_size) {
		why(&p, -EPROTO, "the launcher got a bad request%s%s", "", "");
		goto reply;
	}
	while (got < total) {
		unsigned want = total - got < BATCH ? total - got : BATCH;

		if (recv_fds(s, &b, 1, fds + got, want, &k) < 0 || k != want) {
			got += k;
			why(&p, -EPROTO, "the launcher got too few descriptors%s%s", "", "");
			goto reply;
		}
		got += k;
	}
	if (check_program(text, &p) < 0)
		goto reply;
	env = child_env(names, q->n, &pid_slot);
	if (!env) {
		why(&p, -ENOMEM, "the launcher is out of memory%s%s", "", "");
		goto reply;
	}
	/* copies above where the child puts them, so that no dup2 there
	 * clobbers one still to come */
	for (unsigned i = 0; i < total; i++) {
		copies[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 4 + (int)q->n);
		if (copies[i] < 0) {
			why(&p, -errno, "the launcher: %s%s", strerror(errno), "");
			goto reply;
		}
	}
	pid = fork();
	if (pid == 0) {
		static const char msg[] = "refused cannot execute the program\n";
		sigset_t all;

		for (unsigned i = 0; i < total; i++)
			if (dup2(copies[i], 3 + (int)i) < 0)
				_exit(127);
		close_range(4 + q->n, ~0u, 0);
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		put_pid(pid_slot);
		execve(text, argv, env);
		if (write(3 + (int)q->n, msg, sizeof(msg) - 1) < 0)
			_exit(126);
		_exit(127);
	}
	p.r = pid < 0 ? -errno : pid;
	if (pid < 0)
		why(&p, p.r, "fork: %s%s", strerror(-p.r), "");
reply:
	for (unsigned i = 0; i < got; i++)
		close(fds[i]);
	for (unsigned i = 0; copies && i < total; i++)
		if (copies[i] > 0)
			close(copies[i]);
	if (memfd >= 0)
		close(memfd);
	free(fds);
	free(copies);
	free(text);
	/* (env: the launcher's own strings, or the child's; it is small and
	 * the launcher exits after a handoff that worked) */
	free(env);
	send_fds(s, &p, sizeof(p), NULL, 0);
}

static __attribute__((noreturn)) void launcher_main(int s, char *const *argv)
{
	for (;;) {
		struct req q;
		struct rep p = { 0 };
		unsigned k;
		int st = 0;

		if (recv_fds(s, &q, sizeof(q), NULL, 0, &k) < 0)
			_exit(0);      /* vsxd closed the pair: it exits */
		switch (q.op) {
		case OP_SPAWN:
			spawn(s, &q, argv);
			break;
		case OP_KILL:
			/* our own children only: waitid with WNOWAIT asks */
			if (q.pid > 0 && waitid(P_PID, (id_t)q.pid, &(siginfo_t){ 0 },
						WEXITED | WNOHANG | WNOWAIT) == 0)
				kill(q.pid, SIGKILL);
			break;
		case OP_OPEN_CONFIG: {
			/* the one file it opens: --config, for a reload, so that a
			 * file put in its place by a rename is read (the filesystem
			 * view holds the inode vsxd started with) */
			int fd = config ? open(config, O_RDONLY | O_CLOEXEC) : -1;

			p.r = fd < 0 ? (config ? -errno : -ENOENT) : 0;
			send_fds(s, &p, sizeof(p), &fd, fd < 0 ? 0 : 1);
			if (fd >= 0)
				close(fd);
			break;
		}
		case OP_WAIT:
			p.r = q.pid > 0 ? (int)waitpid(q.pid, &st, q.nohang ? WNOHANG : 0) : -1;
			p.r = p.r < 0 ? -errno : p.r == 0 ? 1 : 0;
			p.status = st;
			send_fds(s, &p, sizeof(p), NULL, 0);
			break;
		default:
			_exit(0);
		}
	}
}

int vsxd_launcher_start(const struct vsxd_config *cfg, char *const *argv,
			const char *config_file)
{
	struct vsxd_err err;
	pid_t parent = getpid(), pid;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(sv[0]);
		close(sv[1]);
		return -e;
	}
	if (pid == 0) {
		/* its end at 3, nothing else; vsxd's signals are not its */
		if (dup2(sv[1], 3) < 0)
			_exit(1);
		close_range(4, ~0u, 0);
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGPIPE && sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		prctl(PR_SET_NAME, "vsxd-launcher");
		config = config_file;
		if (getppid() != parent || vsxd_sandbox_drop(cfg, false, &err) < 0)
			_exit(1);
		launcher_main(3, argv);
	}
	close(sv[1]);
	lsock = sv[0];
	return 0;
}

/* ---- vsxd's side ---- */

static int call(const struct req *q, struct rep *p)
{
	unsigned k;
	int r;

	if (lsock < 0)
		return -ENOTCONN;
	r = send_fds(lsock, q, sizeof(*q), NULL, 0);
	if (r == 0)
		r = recv_fds(lsock, p, sizeof(*p), NULL, 0, &k);
	return r;
}

pid_t vsxd_launcher_spawn(const char *exec, const int *fds, const char *names, unsigned n,
			  int ack, char *whybuf, size_t whylen)
{
	struct req q = { .op = OP_SPAWN, .n = n };
	struct rep p = { 0 };
	size_t el = strlen(exec) + 1, nl = strlen(names) + 1;
	int memfd, r;
	char b = 0;

	if (lsock < 0) {
		snprintf(whybuf, whylen, "no launcher: it exited");
		return -ENOTCONN;
	}
	memfd = memfd_create("launch", MFD_CLOEXEC);
	if (memfd < 0 || pwrite(memfd, exec, el, 0) != (ssize_t)el ||
	    pwrite(memfd, names, nl, (off_t)el) != (ssize_t)nl) {
		r = -errno;
		snprintf(whybuf, whylen, "cannot prepare the handoff: %s", strerror(errno));
		if (memfd >= 0)
			close(memfd);
		return r;
	}
	r = send_fds(lsock, &q, sizeof(q), NULL, 0);
	if (r == 0)
		r = send_fds(lsock, &b, 1, &memfd, 1);
	close(memfd);
	for (unsigned at = 0; r == 0 && at <= n; at += BATCH) {
		int batch[BATCH];
		unsigned k = n + 1 - at < BATCH ? n + 1 - at : BATCH;

		for (unsigned i = 0; i < k; i++)
			batch[i] = at + i < n ? fds[at + i] : ack;
		r = send_fds(lsock, &b, 1, batch, k);
	}
	if (r == 0) {
		unsigned k;

		r = recv_fds(lsock, &p, sizeof(p), NULL, 0, &k);
	}
	if (r < 0) {
		snprintf(whybuf, whylen, "the launcher: %s", strerror(-r));
		close(lsock);  /* out of step with it: no more launches */
		lsock = -1;
		return r;
	}
	if (p.r < 0) {
		p.why[sizeof(p.why) - 1] = '\0';
		snprintf(whybuf, whylen, "%s", p.why);
	}
	return p.r;
}

void vsxd_launcher_kill(pid_t pid)
{
	struct req q = { .op = OP_KILL, .pid = pid };

	if (lsock >= 0)
		send_fds(lsock, &q, sizeof(q), NULL, 0);
}

int vsxd_launcher_open_config(void)
{
	struct req q = { .op = OP_OPEN_CONFIG };
	struct rep p = { 0 };
	unsigned k = 0;
	int fd = -1, r;

	if (lsock < 0)
		return -ENOTCONN;
	r = send_fds(lsock, &q, sizeof(q), NULL, 0);
	if (r == 0)
		r = recv_fds(lsock, &p, sizeof(p), &fd, 1, &k);
	if (r < 0)
		return r;
	if (p.r < 0 || k != 1) {
		if (k)
			close(fd);
		return p.r < 0 ? p.r : -EPROTO;
	}
	return fd;
}

int vsxd_launcher_wait(pid_t pid, int *status, int nohang)
{
	struct req q = { .op = OP_WAIT, .pid = pid, .nohang = (uint32_t)!!nohang };
	struct rep p = { 0 };
	int r = call(&q, &p);

	if (r < 0)
		return r;
	*status = p.status;
	return p.r;
}
