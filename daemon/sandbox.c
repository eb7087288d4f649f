/*
 * The sandbox (sandbox.h; vsxd(8) SECURITY). vsxd parses guest memory and
 * every message QEMU and the host programs send it; what a bug there can
 * reach is bounded here, once the start-up is done (every socket bound,
 * every inherited descriptor taken, the launcher forked: launcher.c):
 *
 * 1. The user (user=): a vsxd started as root drops to it, supplementary
 *    groups, gid and uid, so no capability is left. Under systemd the
 *    units start it as that user in the first place.
 * 2. The filesystem view (Landlock, unprivileged, so it holds for a vsxd
 *    that is not root too): sockets may be made and removed only in the
 *    directories of the configured ones; the configuration file, the
 *    forwards' key files and (with tcp endpoints) the resolver's files may
 *    be read, and /etc/group for group names; nothing else may be
 *    opened, made or removed anywhere. The rules bind inodes: a file
 *    replaced by a rename since cannot be read (a reload says so), but
 *    for the configuration file, which a reload has the launcher open by
 *    its path (launcher.c).
 *    Landlock restricts a thread and what it makes, so each worker that
 *    exists restricts itself (vsxd_workers_each); /proc/self/fd, which a
 *    handoff and a SIGTERM under the store read, is opened before
 *    (vsx__listeners_keep). Connecting to a Unix socket is not a file
 *    access Landlock restricts: QEMU's and host programs' sockets stay
 *    reachable, as the allowlist's AF_UNIX does.
 * 3. The syscall allowlist, installed by vsxd itself with libseccomp, so
 *    it holds with or without a service manager, on every thread at once
 *    (SECCOMP_FILTER_FLAG_TSYNC; threads made later inherit it). In the
 *    manner of crosvm's and Firecracker's device policies, arguments are
 *    filtered where they open something new: socket() only for the
 *    families the configuration needs (a reload that would need another
 *    is refused with a clear error: vsxd_sandbox_reload);
 *    socketpair() AF_UNIX only; mmap/mprotect never PROT_EXEC; clone only
 *    for threads, clone3 ENOSYS (its flags are behind a pointer, so glibc
 *    falls back to clone); ioctl only FIONREAD (libevent's reads) and
 *    TCGETS (isatty); prctl only PR_SET_NAME/PR_GET_NAME and the
 *    no-new-privs query; tgkill to this process only (raise, abort).
 *    Not listed, so refused: execve/execveat (a live handoff's new process
 *    is started, and if need be killed, by the launcher, forked before the
 *    filter), fork, kill, ptrace,
 *    setuid and friends, mount, bpf, module loading, keyctl, io_uring,
 *    userfaultfd, perf_event_open, process_vm_*, and the rest.
 *
 *    kill (the default): a refused call raises SIGSYS (SECCOMP_RET_TRAP);
 *    the handler writes one line naming the call to stderr (the journal,
 *    under systemd) and the process dies of SIGSYS, which a service
 *    manager treats as any crash (under the fd store: recovered).
 *    log: the call is let through and the kernel logs it
 *    (SECCOMP_RET_LOG: an audit line "syscall=NR" in the kernel log).
 *    off: nothing is installed.
 *
 * Sanitizer builds also allow what their runtimes need at exit or on a
 * report (LeakSanitizer stops the world with clone, prctl and ptrace and
 * reads /proc/self/maps; the symbolizer is forked and executed): not a
 * release configuration.
 * Under valgrind the filter cannot be installed (valgrind's own code
 * generation maps executable memory at any time): vsxd says so and runs
 * without it, and without the filesystem view.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <syslog.h>
#include <termios.h>
#include <unistd.h>

#include <linux/landlock.h>
#include <linux/netlink.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#include "forward.h"
#include "logging.h"
#include "sandbox.h"
#include "workers.h"

static int mode_now = VSXD_SECCOMP_OFF;
static uint64_t families_now;   /* what socket() may open, with a filter */

int vsxd_sandbox_mode(void)
{
	return mode_now;
}

/* @fn(path, @arg) for every socket path @cfg makes vsxd bind: the
 * control socket, each VM's vhost-user and uds-path sockets, each
 * forward's Unix listener. Stops at, and returns, @fn's first nonzero. */
static int each_socket(const struct vsxd_config *cfg, int (*fn)(const char *, void *),
		       void *arg)
{
	int r = fn(cfg->control_path ? cfg->control_path : VSX_CONTROL_PATH, arg);
	size_t i;

	for (i = 0; i < cfg->n_vms && r == 0; i++) {
		r = fn(cfg->vms[i].socket_path, arg);
		if (r == 0 && cfg->vms[i].uds_path)
			r = fn(cfg->vms[i].uds_path, arg);
	}
	for (i = 0; i < cfg->n_fwds && r == 0; i++)
		if (cfg->fwds[i].listen.kind == VSXD_EP_UNIX ||
		    cfg->fwds[i].listen.kind == VSXD_EP_HYBRID)
			r = fn(cfg->fwds[i].listen.host, arg);
	return r;
}

/* ---- The user ---- */

/* The socket file becomes *@arg's (a uid), as if it had made it: so that
 * vsxd can still set its mode (a reload), and a new process of a
 * handoff, that user as well, can too. Its directory stays as it is. */
static int give_socket(const char *path, void *arg)
{
	(void)lchown(path, *(const uid_t *)arg, (gid_t)-1);
	return 0;
}

int vsxd_sandbox_user(const char *u, uid_t *uid, gid_t *gid, struct vsxd_err *err)
{
	struct passwd *pw = getpwnam(u);
	char *end;

	if (!pw) {
		unsigned long v = strtoul(u, &end, 10);

		if (*u < '0' || *u > '9' || *end || v >= (uid_t)-1)
			return vsxd_err_set(err, "user %s: no such user", u);
		pw = getpwuid((uid_t)v);
		if (!pw)
			return vsxd_err_set(err, "user %s: no such uid", u);
	}
	if (pw->pw_uid == 0)
		return vsxd_err_set(err, "user %s: is root; name an unprivileged user", u);
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return 0;
}

int vsxd_sandbox_drop(const struct vsxd_config *cfg, bool sockets, struct vsxd_err *err)
{
	const char *u = cfg->user;
	struct passwd *pw;
	uid_t uid;
	gid_t gid;
	int r;

	if (!u)
		return 0;
	r = vsxd_sandbox_user(u, &uid, &gid, err);
	if (r < 0)
		return r;
	if (getuid() == uid && geteuid() == uid)
		return 0;            /* already it (the units; a handoff's new process) */
	if (geteuid() != 0)
		return vsxd_err_set(err, "user %s: only root can become another user "
				    "(vsxd runs as uid %u)", u, (unsigned)geteuid()), -EPERM;
	if (sockets)
		each_socket(cfg, give_socket, &uid);
	pw = getpwuid(uid);
	if (!pw || initgroups(pw->pw_name, gid) < 0 || setresgid(gid, gid, gid) < 0 ||
	    setresuid(uid, uid, uid) < 0) {
		int e = errno;

		vsxd_err_set(err, "user %s: cannot drop to uid %u gid %u: %s", u,
			     (unsigned)uid, (unsigned)gid, strerror(e));
		return -e;
	}
	/* a uid change from root clears the effective and permitted sets;
	 * make sure nothing can win them back */
	if (setuid(0) == 0)
		return vsxd_err_set(err, "user %s: the drop did not hold", u), -EPERM;
	return 0;
}

/* ---- The allowlist ---- */

uint64_t vsxd_sandbox_families(const struct vsxd_config *cfg)
{
	uint64_t f = 1ull << AF_UNIX;
	bool inet = cfg->metrics != NULL, vsock = false;
	size_t i;

	for (i = 0; i < cfg->n_fwds; i++) {
		const struct vsxd_endpoint *e[2] = { &cfg->fwds[i].listen, &cfg->fwds[i].connect };

		for (int k = 0; k < 2; k++) {
			inet |= e[k]->kind == VSXD_EP_TCP;
			vsock |= e[k]->kind == VSXD_EP_VSOCK || e[k]->kind == VSXD_EP_HVSOCK;
		}
	}
	for (i = 0; i < cfg->n_vms; i++)
		vsock |= cfg->vms[i].forward_cid || cfg->vms[i].n_forward_listen;
	if (inet)
		f |= 1ull << AF_INET | 1ull << AF_INET6 | 1ull << AF_NETLINK;
	if (vsock)
		f |= 1ull << AF_VSOCK;
	return f;
}

/* Calls allowed with any arguments. */
static const int plain[] = {
	/* descriptors and files (what paths may be reached is not a
	 * syscall's question: vsxd(8) SECURITY) */
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
	SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(preadv), SCMP_SYS(pwritev),
	SCMP_SYS(close), SCMP_SYS(lseek), SCMP_SYS(fstat), SCMP_SYS(newfstatat),
	SCMP_SYS(statx), SCMP_SYS(stat), SCMP_SYS(lstat), SCMP_SYS(fcntl), SCMP_SYS(dup),
	SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(pipe2), SCMP_SYS(openat),
	SCMP_SYS(open), SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(mkdir),
	SCMP_SYS(mkdirat), SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat),
	SCMP_SYS(fchown), SCMP_SYS(fchownat), SCMP_SYS(lchown), SCMP_SYS(chown),
	SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(getdents64),
	SCMP_SYS(access), SCMP_SYS(faccessat), SCMP_SYS(faccessat2), SCMP_SYS(fstatfs),
	SCMP_SYS(ftruncate), SCMP_SYS(memfd_create), SCMP_SYS(fsync), SCMP_SYS(fdatasync),
	SCMP_SYS(umask), SCMP_SYS(getcwd), SCMP_SYS(close_range),
	/* waiting */
	SCMP_SYS(eventfd2), SCMP_SYS(epoll_create1), SCMP_SYS(epoll_ctl),
	SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_pwait2), SCMP_SYS(poll),
	SCMP_SYS(ppoll), SCMP_SYS(select), SCMP_SYS(pselect6), SCMP_SYS(timerfd_create),
	SCMP_SYS(timerfd_settime), SCMP_SYS(timerfd_gettime), SCMP_SYS(nanosleep),
	SCMP_SYS(clock_nanosleep), SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres),
	SCMP_SYS(gettimeofday), SCMP_SYS(time), SCMP_SYS(futex), SCMP_SYS(sched_yield),
	SCMP_SYS(restart_syscall),
	/* sockets (socket and socketpair: below) */
	SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(accept), SCMP_SYS(accept4),
	SCMP_SYS(connect), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
	SCMP_SYS(getsockopt), SCMP_SYS(setsockopt), SCMP_SYS(sendmsg), SCMP_SYS(recvmsg),
	SCMP_SYS(sendto), SCMP_SYS(recvfrom), SCMP_SYS(sendmmsg), SCMP_SYS(recvmmsg),
	SCMP_SYS(shutdown),
	/* memory (mmap and mprotect: below) */
	SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise), SCMP_SYS(brk),
	/* the process and its threads (clone: below) */
	SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(getppid), SCMP_SYS(getuid),
	SCMP_SYS(geteuid), SCMP_SYS(getgid), SCMP_SYS(getegid), SCMP_SYS(getgroups),
	SCMP_SYS(getresuid), SCMP_SYS(getresgid), SCMP_SYS(getrandom),
	SCMP_SYS(set_robust_list), SCMP_SYS(get_robust_list), SCMP_SYS(rseq),
	SCMP_SYS(set_tid_address), SCMP_SYS(sched_getaffinity), SCMP_SYS(getrlimit),
	SCMP_SYS(prlimit64), SCMP_SYS(getrusage), SCMP_SYS(uname), SCMP_SYS(sysinfo),
	SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
	SCMP_SYS(sigaltstack), SCMP_SYS(rt_sigtimedwait), SCMP_SYS(wait4),
	SCMP_SYS(waitid), SCMP_SYS(exit), SCMP_SYS(exit_group),
};

/* What a sanitizer's runtime does (sanitizer builds only). */
static const int sanitizer[] = {
	SCMP_SYS(ptrace), SCMP_SYS(execve), SCMP_SYS(vfork), SCMP_SYS(fork),
	SCMP_SYS(process_vm_readv), SCMP_SYS(sched_setaffinity),
	SCMP_SYS(getdents),     /* LeakSanitizer's thread list (found in log mode) */
};

static int add(scmp_filter_ctx ctx, int nr, unsigned n, const struct scmp_arg_cmp *a)
{
	int r = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, n, a);

	/* a call this kernel's table does not have (libseccomp resolves
	 * names per architecture): nothing to allow */
	return r == -EDOM || r == -EFAULT ? 0 : r;
}

static int build(scmp_filter_ctx ctx, uint64_t families)
{
	int r = 0;
	size_t i;

	for (i = 0; i < sizeof(plain) / sizeof(plain[0]) && r == 0; i++)
		r = add(ctx, plain[i], 0, NULL);
	for (i = 0; SANITIZED && i < sizeof(sanitizer) / sizeof(sanitizer[0]) && r == 0; i++)
		r = add(ctx, sanitizer[i], 0, NULL);
	/* socket(): the families the configuration needs (a reload that
	 * needs another is refused first: vsxd_sandbox_reload) */
	for (int f = 0; f < 64 && r == 0; f++) {
		if (!(families & 1ull << f))
			continue;
		if (f == AF_NETLINK) {
			/* getaddrinfo's AI_ADDRCONFIG asks NETLINK_ROUTE */
			struct scmp_arg_cmp a[2] = { SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)f),
						     SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE) };

			r = add(ctx, SCMP_SYS(socket), 2, a);
		} else {
			struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)f);

			r = add(ctx, SCMP_SYS(socket), 1, &a);
		}
	}
	if (r == 0) {
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);

		r = add(ctx, SCMP_SYS(socketpair), 1, &a);
	}
	/* memory: never executable */
	if (r == 0) {
		struct scmp_arg_cmp a = SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0);

		r = add(ctx, SCMP_SYS(mmap), 1, &a);
		if (r == 0)
			r = add(ctx, SCMP_SYS(mprotect), 1, &a);
	}
	/* clone: threads only; clone3 hides its flags, so glibc is told it
	 * does not exist and falls back to clone */
	if (r == 0) {
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD);

		r = add(ctx, SCMP_SYS(clone), SANITIZED ? 0 : 1, &a);
	}
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* ioctl: FIONREAD (libevent sizes its reads), TCGETS (isatty) */
	if (r == 0) {
		struct scmp_arg_cmp a = SCMP_A1(SCMP_CMP_EQ, FIONREAD);

		r = add(ctx, SCMP_SYS(ioctl), 1, &a);
	}
	if (r == 0) {
		struct scmp_arg_cmp a = SCMP_A1(SCMP_CMP_EQ, TCGETS);

		r = add(ctx, SCMP_SYS(ioctl), 1, &a);
	}
	/* prctl: thread names, and reading no_new_privs (a sanitizer's
	 * LeakSanitizer names its tracer, PR_SET_PTRACER) */
	if (r == 0 && SANITIZED)
		r = add(ctx, SCMP_SYS(prctl), 0, NULL);
	for (i = 0; i < 3 && r == 0 && !SANITIZED; i++) {
		static const int ops[] = { PR_SET_NAME, PR_GET_NAME, PR_GET_NO_NEW_PRIVS };
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)ops[i]);

		r = add(ctx, SCMP_SYS(prctl), 1, &a);
	}
	/* signals: tgkill to this process only (raise, abort) */
	if (r == 0) {
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid());

		r = add(ctx, SCMP_SYS(tgkill), 1, &a);
	}
	return r;
}

/* ---- The filesystem view (Landlock) ---- */

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

/* What a rule on a file (not a directory) may grant. */
#define FILE_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | \
		     LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | \
		     LANDLOCK_ACCESS_FS_IOCTL_DEV)
/* A socket directory: make and remove vsxd's sockets there. */
#define SOCK_DIR (LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_REMOVE_FILE)

#define MAX_VIEW 256

/* The view in force: the directories sockets may be made in, the files
 * that may be read (what a reload may still use). */
static struct {
	bool on;
	size_t ndirs, nfiles;
	char *dirs[MAX_VIEW];
	char *files[MAX_VIEW];
} view;

struct ll {
	int fd;                    /* the ruleset */
	uint64_t handled;
	int err;                   /* the first errno of a thread's restriction */
};

static bool listed(char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i], s))
			return true;
	return false;
}

static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

static int ll_rule(struct ll *l, const char *path, uint64_t access)
{
	struct landlock_path_beneath_attr pb = { 0 };
	struct stat st;
	int fd = open(path, O_PATH | O_CLOEXEC), r = 0;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;   /* (a file that may come later: not ours) */
	if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
		access &= FILE_RIGHTS;
	pb.allowed_access = access & l->handled;
	pb.parent_fd = fd;
	if (pb.allowed_access &&
	    syscall(SYS_landlock_add_rule, l->fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
		r = -errno;
	close(fd);
	return r;
}

static int view_dir(const char *socket_path, void *arg)
{
	struct ll *l = arg;
	char *d;
	int r;

	if (!socket_path)
		return 0;
	d = dir_of(socket_path);
	if (!d)
		return -ENOMEM;
	if (listed(view.dirs, view.ndirs, d) || view.ndirs == MAX_VIEW) {
		free(d);
		return view.ndirs == MAX_VIEW ? -E2BIG : 0;
	}
	r = ll_rule(l, d, SOCK_DIR);
	if (r < 0) {
		free(d);
		return r;
	}
	view.dirs[view.ndirs++] = d;
	return 0;
}

static int view_file(struct ll *l, const char *path)
{
	char *f;
	int r;

	if (!path || listed(view.files, view.nfiles, path))
		return 0;
	if (view.nfiles == MAX_VIEW || !(f = strdup(path)))
		return view.nfiles == MAX_VIEW ? -E2BIG : -ENOMEM;
	r = ll_rule(l, f, LANDLOCK_ACCESS_FS_READ_FILE);
	if (r < 0) {
		free(f);
		return r;
	}
	view.files[view.nfiles++] = f;
	return 0;
}

static int view_rules(struct ll *l, const struct vsxd_config *cfg, const char *config)
{
	static const char *const resolver[] = {
		"/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/host.conf",
		"/etc/gai.conf",
	};
	int r = each_socket(cfg, view_dir, l);
	size_t i;

	for (i = 0; i < cfg->n_fwds && r == 0; i++)
		r = view_file(l, cfg->fwds[i].auth_key);
	/* the configuration file: the inode read at start-up (a reload has
	 * the launcher open the path); group names: socket-group, control-group */
	if (r == 0)
		r = view_file(l, config);
	if (r == 0)
		r = view_file(l, "/etc/group");
	if (r == 0)
		r = view_file(l, "/etc/nsswitch.conf");
	/* getaddrinfo's files, for tcp endpoints named by host name */
	for (i = 0; r == 0 && (vsxd_sandbox_families(cfg) & 1ull << AF_INET) &&
		    i < sizeof(resolver) / sizeof(resolver[0]); i++)
		r = view_file(l, resolver[i]);
	/* a sanitizer's runtime reads /proc/self/maps and runs its symbolizer */
	if (r == 0 && SANITIZED)
		r = ll_rule(l, "/", LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
				    LANDLOCK_ACCESS_FS_EXECUTE);
	return r;
}

static void restrict_here(void *arg)
{
	struct ll *l = arg;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    syscall(SYS_landlock_restrict_self, l->fd, 0) < 0) {
		if (!l->err)
			l->err = errno;
	}
}

int vsxd_sandbox_fs(const struct vsxd_config *cfg, const char *config,
		    const struct vsxd_workers *ws, struct vsxd_err *err)
{
	struct landlock_ruleset_attr ra = { 0 };
	struct ll l = { .fd = -1 };
	long abi;
	int r;

	if (cfg->seccomp == VSXD_SECCOMP_OFF || RUNNING_ON_VALGRIND)
		return 0;
	abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi < 1) {
		vsxd_vlog(LOG_WARNING, "sandbox: no Landlock here (%s%s): the filesystem "
			  "is not restricted", strerror(errno),
			  errno == EPERM ? ", refused by a filter around vsxd" : "");
		return 0;
	}
	/* every right this kernel knows is handled: what no rule grants is refused */
	l.handled = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;
	if (abi >= 2)
		l.handled |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		l.handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		l.handled |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	ra.handled_access_fs = l.handled;
	/* read from now on through a descriptor opened here (handoff, SIGTERM) */
	r = vsx__listeners_keep();
	if (r < 0)
		return vsxd_err_set(err, "sandbox: /proc/self/fd: %s", strerror(-r)), r;
	l.fd = (int)syscall(SYS_landlock_create_ruleset, &ra, sizeof(ra), 0);
	if (l.fd < 0) {
		r = -errno;
		return vsxd_err_set(err, "sandbox: landlock_create_ruleset: %s", strerror(-r)), r;
	}
	r = view_rules(&l, cfg, config);
	if (r < 0) {
		close(l.fd);
		return vsxd_err_set(err, "sandbox: the filesystem view: %s", strerror(-r)), r;
	}
	restrict_here(&l);
	if (!l.err)
		r = vsxd_workers_each(ws, restrict_here, &l);
	close(l.fd);
	if (l.err || r < 0) {
		r = l.err ? -l.err : r;
		return vsxd_err_set(err, "sandbox: landlock_restrict_self: %s", strerror(-r)), r;
	}
	view.on = true;
	vsxd_vlog(LOG_INFO, "sandbox: filesystem view (Landlock ABI %ld): sockets in %zu "
		  "director%s, %zu file%s read", abi, view.ndirs, view.ndirs == 1 ? "y" : "ies",
		  view.nfiles, view.nfiles == 1 ? "" : "s");
	return 0;
}

/* A reload may make sockets only where the view lets vsxd (@arg: the
 * error): -EPERM naming the first socket outside it. */
static int in_view(const char *path, void *arg)
{
	char *d = dir_of(path);
	bool ok = d && listed(view.dirs, view.ndirs, d);

	if (!ok)
		vsxd_err_set(arg, "%s: its directory %s is outside the filesystem view vsxd "
			     "started with: restart vsxd to use it", path, d ? d : "?");
	free(d);
	return ok ? 0 : -EPERM;
}

/* ... and read only the key files it read at start-up. */
static int view_reload(const struct vsxd_config *nc, struct vsxd_err *err)
{
	for (size_t i = 0; i < nc->n_fwds; i++) {
		const struct vsxd_forward *f = &nc->fwds[i];

		if (f->auth_key && !listed(view.files, view.nfiles, f->auth_key))
			return vsxd_err_set(err, "forward %s: its key file %s is outside the "
					    "filesystem view vsxd started with: restart vsxd "
					    "to use it", f->name, f->auth_key), -EPERM;
	}
	return each_socket(nc, in_view, err);
}

bool vsxd_sandbox_fs_on(void)
{
	return view.on;
}

/* ---- kill mode's report ---- */

/* The names of the calls, resolved before the filter: the handler may
 * not allocate. */
#define NAMES 512
static const char *names[NAMES];

static void put(char *buf, size_t *at, size_t cap, const char *s)
{
	while (*s && *at < cap)
		buf[(*at)++] = *s++;
}

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
	char buf[160], num[12];
	size_t at = 0;
	int nr = si->si_syscall, k = 0;
	unsigned v = (unsigned)nr;

	(void)uc;
	do {
		num[k++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && k < 11);
	put(buf, &at, sizeof(buf), "vsxd: sandbox: the syscall allowlist refused ");
	put(buf, &at, sizeof(buf), nr >= 0 && nr < NAMES && names[nr] ? names[nr] : "syscall");
	put(buf, &at, sizeof(buf), " (");
	while (k && at < sizeof(buf))
		buf[at++] = num[--k];
	put(buf, &at, sizeof(buf), "): killed\n");
	if (write(STDERR_FILENO, buf, at) < 0) {
		/* nothing more to say it with */
	}
	raise(sig);          /* SA_RESETHAND: the default now, a core */
}

static void names_load(void)
{
	for (int nr = 0; nr < NAMES; nr++)
		if (!names[nr])
			names[nr] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
}

int vsxd_sandbox_seccomp(const struct vsxd_config *cfg, struct vsxd_err *err)
{
	int mode = cfg->seccomp == VSXD_UNSET ? VSXD_SECCOMP_KILL : cfg->seccomp;
	scmp_filter_ctx ctx;
	int r;

	if (mode == VSXD_SECCOMP_OFF)
		return 0;
	if (RUNNING_ON_VALGRIND) {
		fprintf(stderr, "vsxd: sandbox: under valgrind: no filesystem view, no "
			"syscall allowlist\n");
		return 0;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		r = -errno;
		return vsxd_err_set(err, "sandbox: no_new_privs: %s", strerror(-r)), r;
	}
	ctx = seccomp_init(mode == VSXD_SECCOMP_LOG ? SCMP_ACT_LOG : SCMP_ACT_TRAP);
	if (!ctx)
		return vsxd_err_set(err, "sandbox: seccomp_init failed"), -ENOMEM;
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	if (r == 0)
		r = build(ctx, vsxd_sandbox_families(cfg));
	if (r == 0 && mode == VSXD_SECCOMP_KILL) {
		struct sigaction sa = { .sa_sigaction = on_sigsys,
					.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER };

		names_load();
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGSYS, &sa, NULL) < 0)
			r = -errno;
	}
	if (r == 0)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	if (r < 0)
		return vsxd_err_set(err, "sandbox: cannot install the syscall allowlist: %s",
				    strerror(-r)), r;
	mode_now = mode;
	families_now = vsxd_sandbox_families(cfg);
	return 0;
}

static const char *family_name(int f)
{
	return f == AF_INET || f == AF_INET6 ? "tcp (AF_INET, AF_INET6)"
	       : f == AF_VSOCK ? "kernel vsock (AF_VSOCK)" : f == AF_NETLINK ? "AF_NETLINK"
							  : "AF_UNIX";
}

int vsxd_sandbox_reload(const struct vsxd_config *oc, const struct vsxd_config *nc,
			struct vsxd_err *err)
{
	uint64_t extra = vsxd_sandbox_families(nc) & ~families_now;

	if ((oc->seccomp != nc->seccomp) || !oc->user != !nc->user ||
	    (oc->user && strcmp(oc->user, nc->user)))
		vsxd_vlog(LOG_WARNING, "reload: user= and seccomp= take effect at the next "
			  "start, not at a reload");
	if (view.on && view_reload(nc, err) < 0)
		return -EPERM;
	if (mode_now == VSXD_SECCOMP_OFF || !extra)
		return 0;
	return vsxd_err_set(err, "the new configuration needs %s sockets, which the syscall "
			    "allowlist installed at start-up refuses: restart vsxd to use them",
			    family_name(__builtin_ctzll(extra))), -EPERM;
}
