/*
 * The launcher (launcher.c): the one process that may start a program
 * for vsxd once the syscall allowlist forbids vsxd to (sandbox.c). A live
 * handoff (handoff.c) asks it to start the new vsxd. Main thread only.
 */
#ifndef VSXD_LAUNCHER_H
#define VSXD_LAUNCHER_H

#include <stddef.h>
#include <sys/types.h>

#include "config.h"

/*
 * Fork the launcher, before any guest memory is mapped and before the
 * sandbox: it keeps @argv and the environment as they are now, drops to
 * cfg's user= as vsxd will, closes every descriptor but its end of the
 * socket to vsxd and waits there; it exits when vsxd closes it (vsxd
 * exits) or dies. @config_file: the path it opens for
 * vsxd_launcher_open_config. 0, or -errno.
 */
int vsxd_launcher_start(const struct vsxd_config *cfg, char *const *argv,
			const char *config_file);

/* @config_file (--config) opened read-only by the launcher, for a reload
 * (the filesystem view lets vsxd read only the inode it started with;
 * the launcher opens the path as it is now): the descriptor, or -errno. */
int vsxd_launcher_open_config(void);

/*
 * Start @exec, run by the launcher as its child with vsxd's argv: @fds
 * (@n) at 3, 4, ... named @names (LISTEN_FDNAMES, ':'-separated) as
 * systemd passes its store, @ack at 3 + @n ($VSXD_HANDOFF_FD), the
 * environment the launcher kept. The program must be a regular file
 * owned by root that no group or other user may write (a compromised
 * vsxd could write a program of its own anywhere it may write): the
 * launcher checks. Its pid, or -errno with @why.
 */
pid_t vsxd_launcher_spawn(const char *exec, const int *fds, const char *names, unsigned n,
			  int ack, char *why, size_t whylen);

/* SIGKILL a child @pid of the launcher. */
void vsxd_launcher_kill(pid_t pid);

/* The wait status of the launcher's child @pid: 0 with *@status when it
 * has exited (waiting for it unless @nohang), 1 when @nohang and it has
 * not, -errno. */
int vsxd_launcher_wait(pid_t pid, int *status, int nohang);

#endif
