/*
 * Helpers with one job each, shared by libvsx's internals, the backend,
 * vsxd, vsxctl, the tests and the benchmarks (libvsxcommon.la; hidden from
 * libvsx.so's ABI). Every function returns 0 or a negative errno and
 * prints nothing.
 *
 * Numbers and sizes (the grammar every vsx program accepts, documented
 * once in vsx(7), NUMBERS AND SIZES):
 *   decimal  one or more digits 0-9: no sign, no spaces, no other base;
 *   uint     a decimal, or hex after 0x / 0X;
 *   size     a uint, or a decimal followed by one of K, M, G (also k, m,
 *            g, KiB, MiB, GiB): powers of 1024.
 * Errors: -EINVAL (not of the grammar), -ERANGE (above the maximum given).
 */
#ifndef VSX_UTIL_H
#define VSX_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct sockaddr_un;

int64_t vsx__now_ms(void);
/* Poll @fd for @events until @deadline_ms (vsx__now_ms clock); <0: forever.
 * Returns revents, 0 on timeout, or a negative errno. */
int vsx__wait_fd(int fd, short events, int64_t deadline_ms);
/* O_NONBLOCK on (@on true) or off. */
int vsx__set_nonblock(int fd, bool on);

/* Format one log line (at most 767 bytes, no newline) and give it to @fn
 * with @arg and the syslog priority @prio; nothing when @fn is NULL. The
 * shape of the backend's vsxb_log_fn and of vsxd's rooms' log hooks. */
void vsx__logv(void (*fn)(void *arg, int prio, const char *msg), void *arg, int prio,
	       const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));

/* A name as vsx names things (VMs in vm:NAME:PORT, VM groups, forwards):
 * the @n bytes at @s (not NUL-terminated) are 1 to VSX_NAME_MAX letters,
 * digits, '.', '_' or '-'. */
bool vsx__name_ok(const char *s, size_t n);

/* The @n bytes at @s (not NUL-terminated), at most @max. */
int vsx__parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out);
int vsx__parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out);
int vsx__parse_size(const char *s, size_t n, uint64_t max, uint64_t *out);

/* @un for @path: -ENAMETOOLONG when empty or too long for sun_path. */
int vsx__unix_addr(struct sockaddr_un *un, const char *path);
#define VSX__GID_KEEP ((gid_t)-1)    /* vsx__unix_bind: the process's group */
#define VSX__MODE_UMASK ((mode_t)-1) /* vsx__unix_bind: the umask's mode */

/*
 * Bind the AF_UNIX socket @fd (any type) to @path. A path already taken by
 * a stale socket (a socket file nobody accepts on: connecting to it is
 * refused) is replaced, and *@replaced (may be NULL) says so; a live
 * socket never is (-EADDRINUSE), nor a file of another kind (-ENOTSOCK).
 * @mode (VSX__MODE_UMASK: leave it to the umask; 0 is a mode) is the
 * file's permission bits and @gid (VSX__GID_KEEP: leave it) its group,
 * both in force before anyone can connect: the mode is set on the socket before bind and on the file
 * after it, the group right after bind, and a socket that is not yet
 * listening refuses every connect (listen() is the caller's, after this
 * call). A group that cannot be set (-EPERM: not root and not a member)
 * fails the call, the file removed. A listener a live handoff passed
 * for @path (vsx__inherit_take) is taken instead of binding: its file
 * stays as it is, the mode and group set on it (left as they are when
 * another user owns the file and they are already those asked for: a
 * handoff from a root vsxd to one that is not).
 */
int vsx__unix_bind(int fd, const char *path, mode_t mode, gid_t gid, bool *replaced);

/*
 * mkdir -p of @path's parent directory: each missing directory is created
 * with @mode (not cut by the umask) and, unless @gid is VSX__GID_KEEP,
 * given group @gid. Existing directories are left as they are. 0 or a
 * negative errno (the first mkdir or chown that failed).
 */
int vsx__mkdir_parents(const char *path, mode_t mode, gid_t gid);

/*
 * Inherited listeners (inherit.c): a live handoff passes the old vsxd's
 * listening sockets to the new one, which takes each back where it binds
 * the same address, so the socket (its backlog, its path) never goes.
 * vsx__inherit_add: keep @fd, a listening socket (-ENOTSOCK otherwise);
 * vsx__inherit_take: if a kept socket has @sa (@len bytes) and @fd's
 * type, @fd's number names it from now on (it listens already; the
 * caller's listen() only sets the backlog): 1; 0 when none does; <0;
 * vsx__inherit_find: the kept socket itself (the caller's now), or -1;
 * vsx__inherit_close_unused: close what nobody took, say how many;
 * vsx__inherit_taken: how many were taken; vsx__inherit_pending: are
 * some kept still;
 * vsx__listeners: this process's listening sockets (/proc/self/fd), up
 * to @max into @fds: how many, or a negative errno (-ENOSPC: more);
 * vsx__listeners_keep: open /proc/self/fd now and read it from then on
 * through that descriptor (a sandbox that hides /proc later: vsxd's).
 */
int vsx__inherit_add(int fd);
int vsx__inherit_take(int fd, const struct sockaddr *sa, socklen_t len);
int vsx__inherit_find(const struct sockaddr *sa, socklen_t len, int type);
unsigned vsx__inherit_close_unused(void);
unsigned vsx__inherit_taken(void);
bool vsx__inherit_pending(void);
int vsx__listeners(int *fds, unsigned max);
int vsx__listeners_keep(void);

#endif /* VSX_UTIL_H */
