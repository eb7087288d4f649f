/*
 * The sandbox vsxd puts itself in once its start-up is done (sandbox.c;
 * vsxd(8) SECURITY): the user it drops to, and the syscall allowlist.
 */
#ifndef VSXD_SANDBOX_H
#define VSXD_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

/*
 * Drop to cfg's user (user= / --user), when one is set and this process
 * is not already that user: its supplementary groups (initgroups), then
 * its group and uid, real, effective and saved; no capability is left.
 * With @sockets, the socket files of cfg's VMs, forwards and control
 * socket are made the user's first (vsxd's: the launcher's are none).
 * The name is looked up before the sandbox (the NSS modules are loaded
 * then). 0, or -errno with the reason in @err.
 */
int vsxd_sandbox_drop(const struct vsxd_config *cfg, bool sockets, struct vsxd_err *err);
/* The user= @u names (a name, or a uid the password database knows): its
 * uid and primary group. 0, or -EINVAL with the reason in @err (no such
 * user; root). vsxd_sandbox_drop's lookup, and --check's. */
int vsxd_sandbox_user(const char *u, uid_t *uid, gid_t *gid, struct vsxd_err *err);

/* --check's output (check.c): what @cfg, checked and resolved, would
 * serve; @uid and @gid are its user='s (vsxd_sandbox_user), when set. */
void vsxd_check_print(const struct vsxd_opts *opts, const struct vsxd_config *cfg, uid_t uid,
		      gid_t gid);

struct vsxd_workers;

/*
 * The filesystem view (Landlock), unless cfg's seccomp is off: from now
 * on vsxd may make and remove sockets only in the directories of cfg's
 * sockets (the VMs' vhost-user and uds-path sockets, the forwards' Unix
 * listeners, the control socket) and read only @config (SIGHUP), the
 * forwards' key files and, with tcp endpoints, getaddrinfo's files:
 * nothing else is opened, made or removed. Landlock restricts a thread
 * and those it makes: this thread, and each worker of @ws in its own.
 * A kernel without Landlock: a warning, 0. 0, or -errno with @err.
 */
int vsxd_sandbox_fs(const struct vsxd_config *cfg, const char *config,
		    const struct vsxd_workers *ws, struct vsxd_err *err);

/*
 * Install the syscall allowlist on every thread of the process (now and
 * later: threads inherit it), in cfg's seccomp mode (kill, the default;
 * log; off: nothing is installed). Sets no_new_privs. The socket
 * families allowed are those @cfg needs (vsxd_sandbox_families). 0, or
 * -errno with the reason in @err; nothing is installed then.
 */
int vsxd_sandbox_seccomp(const struct vsxd_config *cfg, struct vsxd_err *err);

/* Is the filesystem view in force? */
bool vsxd_sandbox_fs_on(void);

/* The seccomp mode in force: VSXD_SECCOMP_OFF until vsxd_sandbox_seccomp
 * installed one. */
int vsxd_sandbox_mode(void);

/* A reload to @nc from @oc: -EPERM with @err when @nc needs a socket
 * family the installed allowlist refuses, a socket directory or a key
 * file outside the filesystem view (a restart gives them); a change of
 * user= or seccomp= is logged as taking effect at the next start. */
int vsxd_sandbox_reload(const struct vsxd_config *oc, const struct vsxd_config *nc,
			struct vsxd_err *err);

/* The address families @cfg makes vsxd open sockets of, as a bit mask of
 * 1ull << AF_*: AF_UNIX always; AF_INET and AF_INET6 (and AF_NETLINK, for
 * getaddrinfo's address check) for tcp forwards and the metrics endpoint;
 * AF_VSOCK for kernel-vsock forwards and forward-listen. */
uint64_t vsxd_sandbox_families(const struct vsxd_config *cfg);

#endif
