/*
 * The helpers with one job each (libvsx/util.h): numbers, sizes, and the
 * stale-socket-aware Unix bind every listener of vsx uses. Real sockets in
 * a private temporary directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "util.h"

Test(util, numbers_and_sizes)
{
	uint64_t v;

	cr_assert_eq(vsx__parse_uint("42", 2, 100, &v), 0);
	cr_assert_eq(v, 42);
	cr_assert_eq(vsx__parse_uint("0xfffffffe", 10, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 0xfffffffeull);
	cr_assert_eq(vsx__parse_uint("101", 3, 100, &v), -ERANGE);
	cr_assert_eq(vsx__parse_uint("18446744073709551616", 20, UINT64_MAX, &v), -ERANGE);
	cr_assert_eq(vsx__parse_uint("18446744073709551616x", 21, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_uint("", 0, 100, &v), -EINVAL);
	cr_assert_eq(vsx__parse_uint("0x", 2, 100, &v), -EINVAL);
	cr_assert_eq(vsx__parse_uint("-1", 2, 100, &v), -EINVAL);
	cr_assert_eq(vsx__parse_uint(" 1", 2, 100, &v), -EINVAL);
	cr_assert_eq(vsx__parse_uint("1x", 2, 100, &v), -EINVAL);

	cr_assert_eq(vsx__parse_size("64K", 3, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(vsx__parse_size("64k", 3, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(vsx__parse_size("2MiB", 4, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 2u << 20);
	cr_assert_eq(vsx__parse_size("1G", 2, 1u << 30, &v), 0);
	cr_assert_eq(v, 1u << 30);
	cr_assert_eq(vsx__parse_size("2G", 2, 1u << 30, &v), -ERANGE);
	cr_assert_eq(vsx__parse_size("4096", 4, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(vsx__parse_size("0x1000", 6, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(vsx__parse_size("K", 1, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_size("1T", 2, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_size("1KB", 3, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_size("1 K", 3, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_size("99999999999999999G", 18, UINT64_MAX, &v), -ERANGE);

	/* every spelling the size grammar documents */
	cr_assert_eq(vsx__parse_size("2M", 2, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 2u << 20);
	cr_assert_eq(vsx__parse_size("3g", 2, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 3ull << 30);
	cr_assert_eq(vsx__parse_size("1GiB", 4, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 1ull << 30);
	cr_assert_eq(vsx__parse_size("8KiB", 4, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 8192);
	cr_assert_eq(vsx__parse_size("0x10K", 5, UINT64_MAX, &v), -EINVAL);

	/* strict decimal: no hex, no sign */
	cr_assert_eq(vsx__parse_dec("18446744073709551615", 20, UINT64_MAX, &v), 0);
	cr_assert_eq(v, UINT64_MAX);
	cr_assert_eq(vsx__parse_dec("18446744073709551616", 20, UINT64_MAX, &v), -ERANGE);
	cr_assert_eq(vsx__parse_dec("4294967296", 10, UINT32_MAX, &v), -ERANGE);
	cr_assert_eq(vsx__parse_dec("0x10", 4, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_dec("+1", 2, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_dec("1 ", 2, UINT64_MAX, &v), -EINVAL);
	cr_assert_eq(vsx__parse_dec("", 0, UINT64_MAX, &v), -EINVAL);
	/* only the @n bytes given count */
	cr_assert_eq(vsx__parse_dec("12junk", 2, UINT64_MAX, &v), 0);
	cr_assert_eq(v, 12);
}

static char dir[64];

static void mkdir_tmp(void)
{
	snprintf(dir, sizeof(dir), "/tmp/vsx-util.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void rm_tmp(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static int new_sock(int type)
{
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	return fd;
}

TestSuite(unix_bind, .init = mkdir_tmp, .fini = rm_tmp);

Test(unix_bind, fresh_path_gets_mode)
{
	char path[128];
	struct stat st;
	bool replaced = true;
	int fd = new_sock(SOCK_STREAM);

	snprintf(path, sizeof(path), "%s/a.sock", dir);
	cr_assert_eq(vsx__unix_bind(fd, path, 0600, VSX__GID_KEEP, &replaced), 0);
	cr_assert_eq(replaced, false);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600);
	close(fd);
}

/* A group and a mode given: both on the file, whatever the umask. */
Test(unix_bind, group_and_mode)
{
	char path[128];
	struct stat st;
	gid_t g = getegid() == 0 ? 4242 : getegid();    /* root may give any */
	mode_t old = umask(0077);
	int fd = new_sock(SOCK_STREAM);

	snprintf(path, sizeof(path), "%s/g.sock", dir);
	cr_assert_eq(vsx__unix_bind(fd, path, 0660, g, NULL), 0);
	umask(old);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0660);
	cr_assert_eq(st.st_gid, g);
	close(fd);
}

Test(unix_bind, mkdir_parents)
{
	char path[128], d[128];
	struct stat st;
	mode_t old = umask(0077);
	gid_t g = getegid() == 0 ? 4242 : VSX__GID_KEEP;

	snprintf(path, sizeof(path), "%s/p/q/s.sock", dir);
	cr_assert_eq(vsx__mkdir_parents(path, 0750, g), 0);
	umask(old);
	snprintf(d, sizeof(d), "%s/p/q", dir);
	cr_assert_eq(stat(d, &st), 0);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0750, "the mode asked for, not the umask's");
	if (g != VSX__GID_KEEP)
		cr_assert_eq(st.st_gid, g);
	/* existing directories are left alone */
	cr_assert_eq(chmod(d, 0700), 0);
	cr_assert_eq(vsx__mkdir_parents(path, 0755, VSX__GID_KEEP), 0);
	cr_assert_eq(stat(d, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	/* a file in the way */
	snprintf(d, sizeof(d), "%s/p/f", dir);
	cr_assert_eq(close(open(d, O_CREAT | O_WRONLY, 0600)), 0);
	snprintf(path, sizeof(path), "%s/p/f/s.sock", dir);
	cr_assert_eq(vsx__mkdir_parents(path, 0755, VSX__GID_KEEP), -ENOTDIR);
	cr_assert_eq(vsx__mkdir_parents("plain.sock", 0755, VSX__GID_KEEP), 0);
}

Test(unix_bind, stale_replaced_live_kept)
{
	struct sockaddr_un un;
	char path[128];
	bool replaced = false;
	int a = new_sock(SOCK_STREAM), b = new_sock(SOCK_STREAM), c;

	snprintf(path, sizeof(path), "%s/b.sock", dir);
	cr_assert_eq(vsx__unix_bind(a, path, VSX__MODE_UMASK, VSX__GID_KEEP, NULL), 0);
	cr_assert_eq(listen(a, 1), 0);
	/* live: someone accepts there */
	cr_assert_eq(vsx__unix_bind(b, path, VSX__MODE_UMASK, VSX__GID_KEEP, &replaced), -EADDRINUSE);
	cr_assert_eq(replaced, false);
	close(a);
	/* stale now: the file is left, nobody listens */
	cr_assert_eq(access(path, F_OK), 0);
	cr_assert_eq(vsx__unix_bind(b, path, VSX__MODE_UMASK, VSX__GID_KEEP, &replaced), 0);
	cr_assert_eq(replaced, true);
	cr_assert_eq(listen(b, 1), 0);
	c = new_sock(SOCK_STREAM);
	cr_assert_eq(vsx__unix_addr(&un, path), 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&un, sizeof(un)), 0);
	close(c);
	close(b);
}

Test(unix_bind, seqpacket_listener_is_live)
{
	char path[128];
	int a = new_sock(SOCK_SEQPACKET), b = new_sock(SOCK_SEQPACKET);

	snprintf(path, sizeof(path), "%s/c.sock", dir);
	cr_assert_eq(vsx__unix_bind(a, path, VSX__MODE_UMASK, VSX__GID_KEEP, NULL), 0);
	cr_assert_eq(listen(a, 1), 0);
	cr_assert_eq(vsx__unix_bind(b, path, VSX__MODE_UMASK, VSX__GID_KEEP, NULL), -EADDRINUSE);
	close(a);
	close(b);
}

Test(unix_bind, other_files_never_replaced)
{
	char path[128], big[200];
	FILE *f;
	int fd = new_sock(SOCK_STREAM);

	snprintf(path, sizeof(path), "%s/file", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("keep me\n", f);
	fclose(f);
	cr_assert_eq(vsx__unix_bind(fd, path, 0600, VSX__GID_KEEP, NULL), -ENOTSOCK);
	cr_assert_eq(access(path, F_OK), 0);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(vsx__unix_bind(fd, big, 0600, VSX__GID_KEEP, NULL), -ENAMETOOLONG);
	cr_assert_eq(vsx__unix_bind(fd, "", 0600, VSX__GID_KEEP, NULL), -ENAMETOOLONG);
	close(fd);
}

/*
 * Inherited listeners (inherit.c): a live socket passed by a handoff is
 * taken where its address is bound again, its backlog kept; another
 * address, or another type, binds a new socket; what nobody took closes.
 */
Test(unix_bind, inherited_listener_taken_with_its_backlog)
{
	struct sockaddr_un un;
	char path[128], other[128], buf[4];
	int old = new_sock(SOCK_STREAM), c = new_sock(SOCK_STREAM);
	int nw = new_sock(SOCK_STREAM), ot = new_sock(SOCK_STREAM);
	int sp = new_sock(SOCK_SEQPACKET), a, fds[64], n;
	bool found = false;

	snprintf(path, sizeof(path), "%s/h.sock", dir);
	snprintf(other, sizeof(other), "%s/o.sock", dir);
	cr_assert_eq(vsx__unix_bind(old, path, 0600, VSX__GID_KEEP, NULL), 0);
	cr_assert_eq(listen(old, 4), 0);
	/* this process's listeners, as a handoff lists them */
	n = vsx__listeners(fds, 64);
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++)
		found |= fds[i] == old;
	cr_assert(found, "vsx__listeners does not name the listener");
	/* a client waits in the backlog during the handoff */
	cr_assert_eq(vsx__unix_addr(&un, path), 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&un, sizeof(un)), 0);
	cr_assert_eq(write(c, "hi", 2), 2);
	cr_assert_eq(vsx__inherit_add(nw), -ENOTSOCK);   /* not listening */
	cr_assert_eq(vsx__inherit_add(old), 0);
	cr_assert(vsx__inherit_pending());
	/* a SEQPACKET socket at the same path is not that one: live, refused */
	cr_assert_eq(vsx__unix_bind(sp, path, 0600, VSX__GID_KEEP, NULL), -EADDRINUSE);
	/* another path: a new socket */
	cr_assert_eq(vsx__unix_bind(ot, other, 0600, VSX__GID_KEEP, NULL), 0);
	cr_assert(vsx__inherit_pending());
	/* the same path: the inherited socket, listening, the client queued */
	cr_assert_eq(vsx__unix_bind(nw, path, 0600, VSX__GID_KEEP, NULL), 0);
	cr_assert_eq(listen(nw, 128), 0);
	cr_assert(fcntl(nw, F_GETFD) & FD_CLOEXEC, "the taken socket is not close-on-exec");
	a = accept(nw, NULL, NULL);
	cr_assert_geq(a, 0);
	cr_assert_eq(read(a, buf, 2), 2);
	cr_assert_eq(memcmp(buf, "hi", 2), 0);
	cr_assert_eq(vsx__inherit_taken(), 1);
	cr_assert(!vsx__inherit_pending());
	cr_assert_eq(vsx__inherit_close_unused(), 0);
	close(a);
	close(c);
	close(nw);
	close(ot);
	close(sp);
}

Test(unix_bind, inherited_listener_unused_closed)
{
	char path[128];
	int old = new_sock(SOCK_STREAM), keep;

	snprintf(path, sizeof(path), "%s/u.sock", dir);
	cr_assert_eq(vsx__unix_bind(old, path, 0600, VSX__GID_KEEP, NULL), 0);
	cr_assert_eq(listen(old, 4), 0);
	keep = dup(old);
	cr_assert_eq(vsx__inherit_add(old), 0);
	cr_assert_eq(vsx__inherit_close_unused(), 1);
	cr_assert_eq(fcntl(old, F_GETFD), -1, "the unused inherited socket is still open");
	cr_assert_eq(errno, EBADF);
	close(keep);
}
