/*
 * Listening sockets inherited from an earlier vsxd (util.h, "Inherited
 * listeners"): a live handoff (vsxd's `vsxctl upgrade`) passes every
 * listening socket of the old process to the new one, which takes each
 * one back where it would bind the same address. A program that connects
 * during the handoff waits in the socket's backlog: the socket never
 * closes, and its path is never unlinked and bound again.
 *
 * The sockets are matched by what they are, not by a name: the address
 * getsockname() reports and the socket type. Whatever the new process's
 * configuration no longer names is closed by vsx__inherit_close_unused.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"

#define INHERIT_MAX 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct inherited {
	int fd;
	int type;
	socklen_t len;
	struct sockaddr_storage ss;
} held[INHERIT_MAX];
static unsigned nheld, ntaken;

static bool is_listener(int fd, int *type)
{
	socklen_t l = sizeof(int);
	int on = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &l) < 0 || !on)
		return false;
	l = sizeof(int);
	return getsockopt(fd, SOL_SOCKET, SO_TYPE, type, &l) == 0;
}

int vsx__inherit_add(int fd)
{
	struct inherited *h;
	int type;

	if (!is_listener(fd, &type))
		return -ENOTSOCK;
	pthread_mutex_lock(&lock);
	if (nheld == INHERIT_MAX) {
		pthread_mutex_unlock(&lock);
		return -ENOSPC;
	}
	h = &held[nheld];
	h->len = sizeof(h->ss);
	if (getsockname(fd, (struct sockaddr *)&h->ss, &h->len) < 0) {
		pthread_mutex_unlock(&lock);
		return -errno;
	}
	h->fd = fd;
	h->type = type;
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	nheld++;
	pthread_mutex_unlock(&lock);
	return 0;
}

/* Same address? Unix sockets by path (the length getsockname reports
 * may count a NUL or not). */
static bool same_addr(const struct inherited *h, const struct sockaddr *sa, socklen_t len)
{
	if (h->ss.ss_family != sa->sa_family)
		return false;
	if (sa->sa_family == AF_UNIX) {
		const struct sockaddr_un *a = (const void *)&h->ss, *b = (const void *)sa;
		size_t off = offsetof(struct sockaddr_un, sun_path);

		if (h->len <= off || len <= off)
			return false;
		return strncmp(a->sun_path, b->sun_path, sizeof(a->sun_path)) == 0 &&
		       a->sun_path[0] != '\0';
	}
	return h->len == len && memcmp(&h->ss, sa, len) == 0;
}

int vsx__inherit_find(const struct sockaddr *sa, socklen_t len, int type)
{
	int fd = -1;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nheld && fd < 0; i++) {
		struct inherited *h = &held[i];

		if (h->fd >= 0 && h->type == type && same_addr(h, sa, len)) {
			fd = h->fd;
			h->fd = -1;
			ntaken++;
		}
	}
	pthread_mutex_unlock(&lock);
	return fd;
}

int vsx__inherit_take(int fd, const struct sockaddr *sa, socklen_t len)
{
	socklen_t tl = sizeof(int);
	int type = 0, flags, got;

	if (!__atomic_load_n(&nheld, __ATOMIC_RELAXED))
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0)
		return -errno;
	got = vsx__inherit_find(sa, len, type);
	if (got < 0)
		return 0;
	/* the caller's descriptor number now names the inherited socket,
	 * with the caller's O_NONBLOCK (shared by every process holding it,
	 * as it was in the old one) */
	flags = fcntl(fd, F_GETFL);
	if (dup3(got, fd, O_CLOEXEC) < 0) {
		int e = -errno;

		close(got);
		return e;
	}
	close(got);
	if (flags >= 0)
		(void)fcntl(fd, F_SETFL, flags);
	return 1;
}

unsigned vsx__inherit_close_unused(void)
{
	unsigned n = 0;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nheld; i++) {
		if (held[i].fd >= 0) {
			close(held[i].fd);
			held[i].fd = -1;
			n++;
		}
	}
	nheld = 0;
	pthread_mutex_unlock(&lock);
	return n;
}

bool vsx__inherit_pending(void)
{
	bool any = false;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nheld && !any; i++)
		any = held[i].fd >= 0;
	pthread_mutex_unlock(&lock);
	return any;
}

unsigned vsx__inherit_taken(void)
{
	return __atomic_load_n(&ntaken, __ATOMIC_RELAXED);
}

/* /proc/self/fd, opened by vsx__listeners_keep (-1: opened each time).
 * Reading it again from the start lists the descriptors open then: procfs
 * makes a directory's entries as it is read. */
static int fd_dir = -1;

int vsx__listeners_keep(void)
{
	if (fd_dir < 0)
		fd_dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd_dir < 0 ? -errno : 0;
}

int vsx__listeners(int *fds, unsigned max)
{
	int dup_fd = fd_dir < 0 ? -1 : fcntl(fd_dir, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd_dir < 0 ? opendir("/proc/self/fd") : dup_fd < 0 ? NULL : fdopendir(dup_fd);
	struct dirent *e;
	unsigned n = 0;
	int type;

	if (!d) {
		int r = -errno;

		if (dup_fd >= 0)
			close(dup_fd);
		return r;
	}
	rewinddir(d);
	while ((e = readdir(d))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		if (*end || end == e->d_name || fd < 0 || fd == dirfd(d) || fd == fd_dir)
			continue;
		if (!is_listener((int)fd, &type))
			continue;
		if (n == max) {
			closedir(d);
			return -ENOSPC;
		}
		fds[n++] = (int)fd;
	}
	closedir(d);
	return (int)n;
}
