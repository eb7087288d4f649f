/* Helpers with one job each (util.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "util.h"

int64_t vsx__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vsx__wait_fd(int fd, short events, int64_t deadline_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int64_t left;
	int n;

	for (;;) {
		left = deadline_ms < 0 ? -1 : deadline_ms - vsx__now_ms();
		if (deadline_ms >= 0 && left < 0)
			left = 0;
		n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (n > 0)
			return p.revents;
		if (n == 0) {
			if (deadline_ms >= 0 && vsx__now_ms() >= deadline_ms)
				return 0;
			continue;
		}
		if (errno != EINTR)
			return -errno;
	}
}

int vsx__set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

void vsx__logv(void (*fn)(void *arg, int prio, const char *msg), void *arg, int prio,
	       const char *fmt, va_list ap)
{
	char msg[768];

	if (!fn)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	fn(arg, prio, msg);
}

/* ---- Numbers and sizes ---- */

static int digit(char c, unsigned base)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (base == 16 && c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (base == 16 && c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Digits of @base only; an overflow is -ERANGE once the rest are digits. */
static int parse_base(const char *s, size_t n, unsigned base, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	bool over = false;
	size_t i;
	int d;

	if (n == 0)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		d = digit(s[i], base);
		if (d < 0)
			return -EINVAL;
		if (v > (UINT64_MAX - (unsigned)d) / base)
			over = true;
		else
			v = v * base + (unsigned)d;
	}
	if (over || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

bool vsx__name_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > VSX_NAME_MAX)
		return false;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

int vsx__parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	return parse_base(s, n, 10, max, out);
}

int vsx__parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		return parse_base(s + 2, n - 2, 16, max, out);
	return parse_base(s, n, 10, max, out);
}

int vsx__parse_size(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} suffixes[] = {
		{ "K", 10 }, { "k", 10 }, { "KiB", 10 }, { "kiB", 10 },
		{ "M", 20 }, { "m", 20 }, { "MiB", 20 }, { "miB", 20 },
		{ "G", 30 }, { "g", 30 }, { "GiB", 30 }, { "giB", 30 },
	};
	size_t digits = 0, i, sl;
	uint64_t v;
	int r;

	if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		return vsx__parse_uint(s, n, max, out);
	while (digits < n && s[digits] >= '0' && s[digits] <= '9')
		digits++;
	if (digits == 0)
		return -EINVAL;
	if (digits == n)
		return vsx__parse_dec(s, n, max, out);
	for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		sl = strlen(suffixes[i].suffix);
		if (n - digits != sl || memcmp(s + digits, suffixes[i].suffix, sl))
			continue;
		r = vsx__parse_dec(s, digits, UINT64_MAX >> suffixes[i].shift, &v);
		if (r < 0)
			return r;
		v <<= suffixes[i].shift;
		if (v > max)
			return -ERANGE;
		*out = v;
		return 0;
	}
	return -EINVAL;
}

/* ---- Unix sockets ---- */

int vsx__unix_addr(struct sockaddr_un *un, const char *path)
{
	size_t n = path ? strlen(path) : 0;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (!n || n >= sizeof(un->sun_path))
		return -ENAMETOOLONG;
	memcpy(un->sun_path, path, n + 1);
	return 0;
}

/* A socket file at @un that nobody accepts on (a probe of @type is refused). */
static bool stale_socket(const struct sockaddr_un *un, int type)
{
	struct stat st;
	bool stale = false;
	int fd;

	if (lstat(un->sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	if (connect(fd, (const struct sockaddr *)un, sizeof(*un)) < 0 && errno == ECONNREFUSED)
		stale = true;
	close(fd);
	return stale;
}

int vsx__unix_bind(int fd, const char *path, mode_t mode, gid_t gid, bool *replaced)
{
	struct sockaddr_un un;
	socklen_t tl = sizeof(int);
	struct stat st;
	int rc, type = SOCK_STREAM;
	bool inherited;

	if (replaced)
		*replaced = false;
	rc = vsx__unix_addr(&un, path);
	if (rc < 0)
		return rc;
	rc = vsx__inherit_take(fd, (struct sockaddr *)&un, sizeof(un));
	if (rc < 0)
		return rc;
	inherited = rc > 0;
	if (inherited)
		goto perm;
	/* The file takes the socket inode's mode (minus the umask) at bind. */
	if (mode != VSX__MODE_UMASK)
		(void)fchmod(fd, mode);
	if (bind(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		rc = -errno;
		if (rc != -EADDRINUSE)
			return rc;
		if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
			return -ENOTSOCK;      /* a file of another kind: never replaced */
		(void)getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl);
		if (!stale_socket(&un, type))
			return -EADDRINUSE;
		if (unlink(path) < 0 && errno != ENOENT)
			return -EADDRINUSE;
		if (bind(fd, (struct sockaddr *)&un, sizeof(un)) < 0)
			return -errno;
		if (replaced)
			*replaced = true;
	}
perm:
	/* an inherited file another user owns (the old process was root, this
	 * one is not: an upgrade to a contained vsxd) that already has the
	 * mode and group asked for is left as it is */
	if (inherited && lstat(path, &st) == 0 && st.st_uid != geteuid() &&
	    (gid == VSX__GID_KEEP || st.st_gid == gid) &&
	    (mode == VSX__MODE_UMASK || (st.st_mode & 07777) == mode))
		return 0;
	/* the group first: chown may clear mode bits, chmod never the group;
	 * lchown, so that a symlink swapped in cannot redirect it */
	if ((gid != VSX__GID_KEEP && lchown(path, (uid_t)-1, gid) < 0) ||
	    (mode != VSX__MODE_UMASK && chmod(path, mode) < 0)) {
		rc = -errno;
		if (!inherited)   /* (an inherited file is the old process's too) */
			unlink(path);
		return rc;
	}
	return 0;
}

int vsx__mkdir_parents(const char *path, mode_t mode, gid_t gid)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *p, *slash, save;
	struct stat st;
	int n;

	n = snprintf(dir, sizeof(dir), "%s", path);
	if (n < 0 || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (p = dir + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		save = *p;
		*p = '\0';
		if (mkdir(dir, mode) == 0) {
			/* ours: the mode asked for (mkdir's is cut by the
			 * umask), then the group */
			if (chmod(dir, mode) < 0 ||
			    (gid != VSX__GID_KEEP && lchown(dir, (uid_t)-1, gid) < 0))
				return -errno;
		} else if (errno != EEXIST) {
			return -errno;
		} else if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
			return -ENOTDIR;        /* a file in the way */
		}
		*p = save;
		if (!save)
			break;
	}
	return 0;
}
