/* The vsxd control protocol: the request builder, parsing and the client
 * call (ctl-proto.h). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "vsx-int.h"

static int key_ok(const char *k, size_t n)
{
	size_t i;

	if (n == 0 || n > VSX_CTL_KEY_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') ||
		      k[i] == '_' || k[i] == '-'))
			return 0;
	return 1;
}

static int value_ok(const char *v, size_t n)
{
	size_t i;

	if (n > VSX_CTL_VALUE_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
			return 0;
	return 1;
}

/* ---- The request builder ---- */

/* Append @n bytes; -E2BIG when the block would not fit. */
static void req_put(struct vsx_ctl_req *r, const char *p, size_t n)
{
	if (r->err)
		return;
	if (n > VSX_CTL_REQ_MAX - r->len) {
		r->err = -E2BIG;
		return;
	}
	memcpy(r->buf + r->len, p, n);
	r->len += n;
}

/* Has the block a line "KEY=" already? */
static bool req_has(const struct vsx_ctl_req *r, const char *key, size_t n)
{
	const char *p = r->buf, *end = r->buf + r->len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		if ((size_t)(end - p) > n && !memcmp(p, key, n) && p[n] == '=')
			return true;
		if (!nl)
			break;
		p = nl + 1;
	}
	return false;
}

static void req_line(struct vsx_ctl_req *r, const char *key, const char *value)
{
	size_t kn = strlen(key), vn = strlen(value);

	if (r->err)
		return;
	if (!key_ok(key, kn) || !value_ok(value, vn) || req_has(r, key, kn)) {
		r->err = -EINVAL;
		return;
	}
	if (r->lines >= VSX_CTL_MAX_LINES) {
		r->err = -E2BIG;
		return;
	}
	req_put(r, key, kn);
	req_put(r, "=", 1);
	req_put(r, value, vn);
	req_put(r, "\n", 1);
	r->lines++;
}

void vsx__ctl_req_init(struct vsx_ctl_req *r, const char *cmd)
{
	char ver[16];

	r->len = 0;
	r->lines = 0;
	r->err = 0;
	r->buf[0] = '\0';
	snprintf(ver, sizeof(ver), "%d", VSX_CTL_VERSION);
	req_line(r, VSX_CTL_MAGIC, ver);
	req_line(r, VSX_CTL_K_CMD, cmd);
}

int vsx__ctl_req_add(struct vsx_ctl_req *r, const char *key, const char *value)
{
	if (!r->err && (!strcmp(key, VSX_CTL_MAGIC) || !strcmp(key, VSX_CTL_K_CMD)))
		r->err = -EINVAL;
	req_line(r, key, value);
	return r->err;
}

int vsx__ctl_req_addf(struct vsx_ctl_req *r, const char *key, const char *fmt, ...)
{
	char v[VSX_CTL_VALUE_MAX + 2];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	if (!r->err && (n < 0 || (size_t)n >= sizeof(v)))
		r->err = -EINVAL;       /* longer than any value may be */
	return vsx__ctl_req_add(r, key, v);
}

int vsx__ctl_req_end(struct vsx_ctl_req *r)
{
	req_put(r, "\n", 1);
	if (r->err)
		return r->err;
	r->buf[r->len] = '\0';
	return 0;
}

/* ---- Parsing ---- */

static int kvs_grow(struct vsx_kvs *kvs)
{
	struct vsx_kv *nk;
	unsigned cap = kvs->cap * 2;

	if (kvs->kv == kvs->small) {
		nk = malloc(cap * sizeof(*nk));
		if (nk)
			memcpy(nk, kvs->small, kvs->n * sizeof(*nk));
	} else {
		nk = realloc(kvs->kv, cap * sizeof(*nk));
	}
	if (!nk)
		return -ENOMEM;
	kvs->kv = nk;
	kvs->cap = cap;
	return 0;
}

static int parse_block(char *buf, size_t len, struct vsx_kvs *out, bool grow)
{
	char *p = buf, *end = buf + len, *nl, *eq;
	int rc;

	out->n = 0;
	out->cap = VSX_CTL_MAX_LINES;
	out->kv = out->small;
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		if (nl == p)
			return -EINVAL; /* an empty line inside a block */
		eq = memchr(p, '=', (size_t)(nl - p));
		if (!eq || !key_ok(p, (size_t)(eq - p)) ||
		    !value_ok(eq + 1, (size_t)(nl - eq - 1)))
			return -EINVAL;
		if (out->n == out->cap) {
			if (!grow)
				return -E2BIG;
			rc = kvs_grow(out);
			if (rc < 0)
				return rc;
		}
		*eq = '\0';
		if (nl < end)
			*nl = '\0';
		else if (nl == end)
			return -EINVAL; /* the caller passes whole lines */
		out->kv[out->n].key = p;
		out->kv[out->n].value = eq + 1;
		out->n++;
		p = nl + 1;
	}
	return 0;
}

int vsx__ctl_parse(char *buf, size_t len, struct vsx_kvs *out)
{
	return parse_block(buf, len, out, false);
}

int vsx__ctl_parse_reply(char *buf, size_t len, struct vsx_kvs *out)
{
	return parse_block(buf, len, out, true);
}

void vsx__ctl_kvs_free(struct vsx_kvs *kvs)
{
	if (kvs->kv && kvs->kv != kvs->small)
		free(kvs->kv);
	kvs->kv = kvs->small;
	kvs->cap = VSX_CTL_MAX_LINES;
	kvs->n = 0;
}

const char *vsx__ctl_get(const struct vsx_kvs *kvs, const char *key)
{
	unsigned i;

	for (i = 0; i < kvs->n; i++)
		if (strcmp(kvs->kv[i].key, key) == 0)
			return kvs->kv[i].value;
	return NULL;
}

const char *vsx__ctl_reply_error(char *reply, char *out, size_t n)
{
	struct vsx_kvs kvs;
	const char *e = NULL;
	size_t len = strlen(reply);

	if (n == 0)
		return NULL;
	out[0] = '\0';
	if (len == 0)
		return NULL;
	if (vsx__ctl_parse_reply(reply, len - 1, &kvs) == 0)
		e = vsx__ctl_get(&kvs, VSX_CTL_K_ERROR);
	if (e)
		snprintf(out, n, "%s", e);
	vsx__ctl_kvs_free(&kvs);
	return e ? out : NULL;
}

size_t vsx__ctl_block_end(const char *buf, size_t len)
{
	size_t i;

	if (len >= 1 && buf[0] == '\n')
		return 1; /* an empty block */
	for (i = 1; i < len; i++)
		if (buf[i] == '\n' && buf[i - 1] == '\n')
			return i + 1;
	return 0;
}

static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
	ssize_t w;
	int ev;

	while (n) {
		w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		ev = vsx__wait_fd(fd, POLLOUT, deadline);
		if (ev == 0)
			return -ETIMEDOUT;
		if (ev < 0)
			return ev;
	}
	return 0;
}

static int call_once(const char *path, const char *request, int64_t deadline,
		     char **reply, int *remote_errno)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	size_t cap = 4096, len = 0, end;
	struct vsx_kvs kvs;
	uint64_t e;
	const char *ev_s;
	char *buf = NULL, *nb;
	ssize_t r;
	int fd, rc, ev;

	*reply = NULL;
	if (strlen(path) >= sizeof(un.sun_path))
		return -ENAMETOOLONG;
	memcpy(un.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		rc = -errno;
		goto out_close;
	}
	rc = send_all(fd, request, strlen(request), deadline);
	if (rc < 0)
		goto out_close;
	buf = malloc(cap);
	if (!buf) {
		rc = -ENOMEM;
		goto out_close;
	}
	for (;;) {
		if (len + 1 >= cap) {
			if (cap >= VSX_CTL_REPLY_MAX) {
				rc = -EPROTO;
				goto out_free;
			}
			nb = realloc(buf, cap * 2);
			if (!nb) {
				rc = -ENOMEM;
				goto out_free;
			}
			buf = nb;
			cap *= 2;
		}
		r = recv(fd, buf + len, cap - len - 1, MSG_DONTWAIT);
		if (r > 0) {
			len += (size_t)r;
			end = vsx__ctl_block_end(buf, len);
			if (end)
				break;
			continue;
		}
		if (r == 0) {
			rc = -EPROTO;
			goto out_free;
		}
		if (errno != EAGAIN && errno != EINTR) {
			rc = -errno;
			goto out_free;
		}
		ev = vsx__wait_fd(fd, POLLIN, deadline);
		if (ev == 0) {
			rc = -ETIMEDOUT;
			goto out_free;
		}
		if (ev < 0) {
			rc = ev;
			goto out_free;
		}
	}
	buf[end] = '\0';
	/* Parse a copy to find errno=; the caller gets the untouched text. */
	nb = strndup(buf, end - 1);
	if (!nb) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = vsx__ctl_parse_reply(nb, end - 1, &kvs);
	ev_s = rc == 0 ? vsx__ctl_get(&kvs, VSX_CTL_K_ERRNO) : NULL;
	if (!ev_s || vsx__parse_dec(ev_s, strlen(ev_s), 4095, &e) < 0) {
		vsx__ctl_kvs_free(&kvs);
		free(nb);
		rc = rc == -ENOMEM ? rc : -EPROTO;
		goto out_free;
	}
	vsx__ctl_kvs_free(&kvs);
	free(nb);
	*remote_errno = (int)e;
	*reply = buf;
	close(fd);
	return 0;
out_free:
	free(buf);
out_close:
	close(fd);
	return rc;
}

int vsx__ctl_call(const char *path, const char *request, int timeout_ms,
		  char **reply, int *remote_errno)
{
	int64_t deadline = vsx__now_ms() + timeout_ms;
	char head[32], *older;
	size_t hn;
	int rc;

	rc = call_once(path, request, deadline, reply, remote_errno);
	hn = (size_t)snprintf(head, sizeof(head), VSX_CTL_MAGIC "=%d\n", VSX_CTL_VERSION);
	if (rc < 0 || *remote_errno != EPROTONOSUPPORT ||
	    VSX_CTL_VERSION == VSX_CTL_VERSION_MIN || strncmp(request, head, hn))
		return rc;
	/* An older vsxd: the same request as the oldest version (ctl-proto.h). */
	if (asprintf(&older, VSX_CTL_MAGIC "=%d\n%s", VSX_CTL_VERSION_MIN,
		     request + hn) < 0)
		return -ENOMEM;
	free(*reply);
	rc = call_once(path, older, deadline, reply, remote_errno);
	free(older);
	return rc;
}
