/*
 * vsxd's settings model: the values (uids, log levels, limits and
 * durations), the VMs and the configuration as a whole, with their
 * defaults, checks, copies and frees (config.h).
 *
 * The same key table serves the four ways to describe a VM: a --vm list
 * ("guest-cid=3,socket=...,uds-path=..."), the single-VM flags of
 * vhost-device-vsock (--guest-cid, --socket, --uds-path, ...), a
 * [vm NAME] section of vsxd.conf and an entry of vhost-device-vsock's YAML
 * vms: list. Each key is checked once, where it is set (vsxd_vm_set); a
 * VM as a whole (socket, and uds-path or forward-cid) in vsxd_vm_finish;
 * what needs every VM (unique CIDs, names and paths) on the merged
 * configuration (vsxd_config_check). The readers are conffile.c
 * (vsxd.conf), conffile_yaml.c (YAML) and cmdline.c (the command line).
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "config-int.h"
#include "forward.h"
#include "vhost-user/loop-event.h"

/* ---- Values ---- */

int vsxd_parse_uid_list(const char *s, size_t len, struct vsxd_config *cfg,
			struct vsxd_err *err)
{
	const char *p = s, *end = s + len, *w;
	uint32_t *nu;
	uint64_t uid;
	char q[VSXD_QBUF];
	size_t i;
	int r;

	for (;;) {
		while (p < end && (*p == ',' || *p == ' ' || *p == '\t'))
			p++;
		if (p == end)
			break;
		for (w = p; w < end && *w != ',' && *w != ' ' && *w != '\t'; w++)
			;
		r = vsx__parse_uint(p, (size_t)(w - p), 0xFFFFFFFEu, &uid);
		if (r == -EINVAL)
			return vsxd_err_set(err, "control-allow-uid '%s' is not a uid (a number)",
				       vsxd_quote(q, p, (size_t)(w - p)));
		if (r < 0)
			return vsxd_err_set(err, "control-allow-uid %s is out of range (0 to %u)",
				       vsxd_quote(q, p, (size_t)(w - p)), 0xFFFFFFFEu);
		for (i = 0; i < cfg->n_control_allow_uids; i++)
			if (cfg->control_allow_uids[i] == uid)
				break;
		if (i == cfg->n_control_allow_uids) {
			if (i >= VSXD_ALLOW_UIDS_MAX)
				return vsxd_err_set(err, "control-allow-uid: more than %u uids",
					       VSXD_ALLOW_UIDS_MAX);
			nu = realloc(cfg->control_allow_uids, (i + 1) * sizeof(*nu));
			if (!nu)
				return -ENOMEM;
			nu[i] = (uint32_t)uid;
			cfg->control_allow_uids = nu;
			cfg->n_control_allow_uids++;
		}
		p = w;
	}
	cfg->control_allow_set = true;
	return 0;
}

static const struct {
	const char *name;
	int level;
} log_levels[] = {
	{ "error", 3 }, { "err", 3 },
	{ "warning", 4 }, { "warn", 4 },
	{ "notice", 5 },
	{ "info", 6 },
	{ "debug", 7 },
};

int vsxd_parse_log_level(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(log_levels) / sizeof(log_levels[0]); i++)
		if (strlen(log_levels[i].name) == len &&
		    !memcmp(s, log_levels[i].name, len))
			return log_levels[i].level;
	return -EINVAL;
}

static const char *const seccomp_modes[] = {
	[VSXD_SECCOMP_KILL] = "kill",
	[VSXD_SECCOMP_LOG] = "log",
	[VSXD_SECCOMP_OFF] = "off",
};

int vsxd_parse_seccomp(const char *s, size_t len)
{
	for (int m = 0; m < (int)(sizeof(seccomp_modes) / sizeof(seccomp_modes[0])); m++)
		if (strlen(seccomp_modes[m]) == len && !memcmp(s, seccomp_modes[m], len))
			return m;
	return -EINVAL;
}

const char *vsxd_seccomp_name(int mode)
{
	return mode >= 0 && mode <= VSXD_SECCOMP_OFF ? seccomp_modes[mode] : "kill";
}

int vsxd_set_user(struct vsxd_config *cfg, const char *key, const char *v, size_t len,
		  struct vsxd_err *err)
{
	char q[VSXD_QBUF];

	/* a user name as useradd takes it, or a uid */
	if (len == 0 || len > 32)
		return vsxd_err_set(err, "%s '%s': give a user name (at most 32 bytes) or a uid",
				    key, vsxd_quote(q, v, len));
	for (size_t i = 0; i < len; i++)
		if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
		      (v[i] >= '0' && v[i] <= '9') || v[i] == '_' || v[i] == '-' ||
		      v[i] == '.') || (i == 0 && v[i] == '-'))
			return vsxd_err_set(err, "%s '%s' is not a user name or a uid", key,
					    vsxd_quote(q, v, len));
	return vsxd__set_str(&cfg->user, v, len) ? -ENOMEM : 0;
}

const char *vsxd_log_level_name(int level)
{
	size_t i;

	for (i = 0; i < sizeof(log_levels) / sizeof(log_levels[0]); i++)
		if (log_levels[i].level == level)
			return log_levels[i].name;
	return "?";
}

/* ---- Socket permissions ---- */

int vsxd_parse_socket_mode(const char *key, const char *s, size_t len, unsigned *out,
			   struct vsxd_err *err)
{
	char q[VSXD_QBUF];
	unsigned v = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '7')
			return vsxd_err_set(err, "%s '%s' is not an octal mode "
				       "(e.g. 0660)", key, vsxd_quote(q, s, len));
		v = v * 8 + (unsigned)(s[i] - '0');
		if (v > 0777)
			return vsxd_err_set(err, "%s %s is out of range (0 to 0777: "
				       "permission bits only)", key, vsxd_quote(q, s, len));
	}
	if (len == 0)
		return vsxd_err_set(err, "empty value for '%s'", key);
	*out = v;
	return 0;
}

int vsxd_check_socket_group(const char *key, const char *s, size_t len, struct vsxd_err *err)
{
	char q[VSXD_QBUF];
	uint64_t gid;
	size_t i;
	int r;

	if (len == 0)
		return vsxd_err_set(err, "empty value for '%s'", key);
	if (s[0] >= '0' && s[0] <= '9') {
		r = vsx__parse_dec(s, len, 0xFFFFFFFEu, &gid);
		if (r == -ERANGE)
			return vsxd_err_set(err, "%s %s is out of range (a gid: 0 to "
				       "%u)", key, vsxd_quote(q, s, len), 0xFFFFFFFEu);
		if (r == 0)
			return 0;
	}
	for (i = 0; i < len; i++) {
		char c = s[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
		    (i > 0 && ((c >= '0' && c <= '9') || c == '.' || c == '-')) ||
		    (i > 0 && i == len - 1 && c == '$'))
			continue;
		return vsxd_err_set(err, "%s '%s' is not a group name or gid "
			       "(letters, digits, '.', '_', '-', not first; or a number)",
			       key, vsxd_quote(q, s, len));
	}
	if (len > VSXD_GROUP_NAME_MAX)
		return vsxd_err_set(err, "%s '%s' is too long (at most %u bytes)",
			       key, vsxd_quote(q, s, len), VSXD_GROUP_NAME_MAX);
	return 0;
}

int vsxd_perm_set_mode(struct vsxd_sock_perm *p, const char *key, const char *s, size_t len,
		       struct vsxd_err *err)
{
	int r = vsxd_parse_socket_mode(key, s, len, &p->mode, err);

	if (r == 0)
		p->mode_set = true;
	return r;
}

int vsxd_perm_set_group(struct vsxd_sock_perm *p, const char *key, const char *s, size_t len,
			struct vsxd_err *err)
{
	int r = vsxd_check_socket_group(key, s, len, err);

	if (r < 0)
		return r;
	p->gid_known = false;
	return vsxd__set_str(&p->group, s, len);
}

static void perm_free(struct vsxd_sock_perm *p)
{
	free(p->group);
	memset(p, 0, sizeof(*p));
}

static int perm_copy(struct vsxd_sock_perm *dst, const struct vsxd_sock_perm *src)
{
	char *g = NULL;

	if (src->group && !(g = strdup(src->group)))
		return -ENOMEM;
	free(dst->group);
	*dst = *src;
	dst->group = g;
	return 0;
}

/* What @src sets (its mode, its group, each on its own) over @dst. */
static int perm_merge(struct vsxd_sock_perm *dst, const struct vsxd_sock_perm *src)
{
	if (src->mode_set) {
		dst->mode = src->mode;
		dst->mode_set = true;
	}
	if (src->group) {
		free(dst->group);
		dst->group = strdup(src->group);
		if (!dst->group)
			return -ENOMEM;
		dst->gid = src->gid;
		dst->gid_known = src->gid_known;
	}
	return 0;
}

/* @p's group (set by @key) to a gid: a number as is, a name through the
 * group database. */
static int perm_resolve(struct vsxd_sock_perm *p, const char *where, const char *key,
			struct vsxd_err *err)
{
	struct group gr, *res = NULL;
	char buf[16384];
	uint64_t gid;
	int r;

	if (!p->group || p->gid_known)
		return 0;
	if (vsx__parse_dec(p->group, strlen(p->group), 0xFFFFFFFEu, &gid) == 0) {
		p->gid = (uint32_t)gid;
		p->gid_known = true;
		return 0;
	}
	r = getgrnam_r(p->group, &gr, buf, sizeof(buf), &res);
	if (r == 0 && !res)
		return vsxd_err_set(err, "%s: %s '%s': no such group", where, key, p->group);
	if (r != 0)
		return vsxd_err_set(err, "%s: %s '%s': cannot look it up: %s", where, key,
			       p->group, strerror(r));
	p->gid = (uint32_t)res->gr_gid;
	p->gid_known = true;
	return 0;
}

int vsxd_config_resolve(struct vsxd_config *cfg, struct vsxd_err *err)
{
	size_t i;
	int r;

	r = perm_resolve(&cfg->perm, "[daemon] socket-group or --socket-group", "socket-group",
			 err);
	if (r == 0)
		r = perm_resolve(&cfg->control_perm, "[daemon] control-group or --control-group",
				 "control-group", err);
	for (i = 0; r == 0 && i < cfg->n_vms; i++)
		r = perm_resolve(&cfg->vms[i].perm, cfg->vms[i].origin ? cfg->vms[i].origin
									: "a VM", "socket-group", err);
	return r;
}

void vsxd_vm_perm(const struct vsxd_config *cfg, const struct vsxd_vm *vm,
		  unsigned *mode, bool *has_gid, uint32_t *gid)
{
	const struct vsxd_sock_perm *g = vm->perm.group ? &vm->perm : &cfg->perm;
	const struct vsxd_sock_perm *m = vm->perm.mode_set ? &vm->perm : &cfg->perm;

	*has_gid = g->group && g->gid_known;
	*gid = *has_gid ? g->gid : 0;
	if (m->mode_set)
		*mode = m->mode;
	else
		*mode = g->group ? VSXD_SOCKET_MODE_GROUP : VSXD_SOCKET_MODE_DEFAULT;
}

void vsxd_control_perm(const struct vsxd_config *cfg, unsigned *mode, bool *has_gid,
		       uint32_t *gid)
{
	const struct vsxd_sock_perm *p = &cfg->control_perm;

	*has_gid = p->group && p->gid_known;
	*gid = *has_gid ? p->gid : 0;
	if (p->mode_set)
		*mode = p->mode;
	else if (cfg->n_control_allow_uids)
		*mode = VSXD_CONTROL_MODE_ALLOW;
	else
		*mode = p->group ? VSXD_SOCKET_MODE_GROUP : VSXD_SOCKET_MODE_DEFAULT;
}

/* ---- Limits ---- */

static const char *const limit_names[VSXD_LIMIT_N] = {
	[VSXD_LIMIT_MAX_CONNS] = "max-conns",
	[VSXD_LIMIT_MAX_CONNS_PER_VM] = "max-conns-per-vm",
	[VSXD_LIMIT_MAX_CONN_MEMORY] = "max-conn-memory",
	[VSXD_LIMIT_HANDSHAKE_TIMEOUT] = "handshake-timeout",
	[VSXD_LIMIT_CONNECT_TIMEOUT] = "connect-timeout",
	[VSXD_LIMIT_LINGER_TIMEOUT] = "linger-timeout",
	[VSXD_LIMIT_POLL_US] = "poll-us",
	[VSXD_LIMIT_THREADS] = "threads",
};

int vsxd_parse_duration(const char *s, size_t len, uint64_t max_ms, uint64_t *out)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 } };
	size_t n = 0, i;
	uint64_t v;
	int r;

	while (n < len && s[n] >= '0' && s[n] <= '9')
		n++;
	if (n == 0)
		return -EINVAL;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t ul = strlen(units[i].unit);

		if (n == len || (len - n == ul && !memcmp(s + n, units[i].unit, ul)))
			break;
	}
	if (i == sizeof(units) / sizeof(units[0]))
		return -EINVAL;
	if (n == len)
		i = 1;  /* seconds */
	r = vsx__parse_uint(s, n, UINT64_MAX / 60000, &v);
	if (r < 0)
		return r;
	v *= units[i].ms;
	if (v > max_ms)
		return -ERANGE;
	*out = v;
	return 0;
}

int vsxd_limit_key(const char *key, size_t keylen)
{
	int i;

	for (i = 0; i < VSXD_LIMIT_N; i++)
		if (vsxd__key_is(key, keylen, limit_names[i]))
			return i;
	return -1;
}

const char *vsxd_limit_name(int limit)
{
	return limit >= 0 && limit < VSXD_LIMIT_N ? limit_names[limit] : "?";
}

int vsxd_limit_set(struct vsxd_config *cfg, int limit, const char *val, size_t vallen,
		   struct vsxd_err *err)
{
	const char *name = vsxd_limit_name(limit);
	char q[VSXD_QBUF];
	uint64_t v;
	int r;

	if (vallen == 0)
		return vsxd_err_set(err, "empty value for '%s'", name);
	switch (limit) {
	case VSXD_LIMIT_MAX_CONNS:
	case VSXD_LIMIT_MAX_CONNS_PER_VM:
		r = vsx__parse_uint(val, vallen, VSXD_CONNS_MAX, &v);
		if (r == -EINVAL)
			return vsxd_err_set(err, "%s '%s' is not a number", name,
				       vsxd_quote(q, val, vallen));
		if (r < 0 || v == 0)
			return vsxd_err_set(err, "%s %s is out of range (1 to %u)", name,
				       vsxd_quote(q, val, vallen), VSXD_CONNS_MAX);
		break;
	case VSXD_LIMIT_MAX_CONN_MEMORY:
		r = vsx__parse_size(val, vallen, VSXD_CONN_MEMORY_MAX, &v);
		if (r == -EINVAL)
			return vsxd_err_set(err, "%s '%s' is not a size (a number with an "
				       "optional K, M or G suffix)", name,
				       vsxd_quote(q, val, vallen));
		if (r < 0 || v < VSXB_MIN_CONN_MEMORY)
			return vsxd_err_set(err, "%s %s is out of range (8K to 4G)", name,
				       vsxd_quote(q, val, vallen));
		break;
	case VSXD_LIMIT_HANDSHAKE_TIMEOUT:
	case VSXD_LIMIT_CONNECT_TIMEOUT:
	case VSXD_LIMIT_LINGER_TIMEOUT:
		r = vsxd_parse_duration(val, vallen, VSXB_MAX_TIMEOUT_MS, &v);
		if (r == -EINVAL)
			return vsxd_err_set(err, "%s '%s' is not a duration (a number of "
				       "seconds, or with a unit: 500ms, 5s, 1m)", name,
				       vsxd_quote(q, val, vallen));
		if (r < 0 || v < VSXD_TIMEOUT_MIN_MS)
			return vsxd_err_set(err, "%s %s is out of range (10ms to 3600s)", name,
				       vsxd_quote(q, val, vallen));
		break;
	case VSXD_LIMIT_POLL_US:
		r = vsx__parse_uint(val, vallen, VSXU_EVLOOP_POLL_MAX_US, &v);
		if (r == -EINVAL)
			return vsxd_err_set(err, "%s '%s' is not a number (of microseconds)",
				       name, vsxd_quote(q, val, vallen));
		if (r < 0)
			return vsxd_err_set(err, "%s %s is out of range (0 to %u)", name,
				       vsxd_quote(q, val, vallen), VSXU_EVLOOP_POLL_MAX_US);
		break;
	case VSXD_LIMIT_THREADS:
		r = vsx__parse_uint(val, vallen, VSXD_THREADS_MAX, &v);
		if (r == -EINVAL)
			return vsxd_err_set(err, "%s '%s' is not a number (of worker threads)",
				       name, vsxd_quote(q, val, vallen));
		if (r < 0 || v == 0)
			return vsxd_err_set(err, "%s %s is out of range (1 to %u)", name,
				       vsxd_quote(q, val, vallen), VSXD_THREADS_MAX);
		break;
	default:
		return vsxd_err_set(err, "unknown limit");
	}
	cfg->limits[limit] = v;
	cfg->limit_set[limit] = true;
	return 0;
}

/* ---- VMs ---- */

static const struct vm_key {
	const char *name;     /* canonical spelling; '_' may replace '-' */
	unsigned bit;
} vm_keys[] = {
	{ "guest-cid", VSXD_VM_CID },
	{ "socket", VSXD_VM_SOCKET },
	{ "uds-path", VSXD_VM_UDS },
	{ "tx-buffer-size", VSXD_VM_TX },
	{ "queue-size", VSXD_VM_QUEUE },
	{ "groups", VSXD_VM_GROUPS },
	{ "name", VSXD_VM_NAME },
	{ "forward-cid", VSXD_VM_FWD_CID },
	{ "forward-listen", VSXD_VM_FWD_LISTEN },
	{ "socket-mode", VSXD_VM_SOCK_MODE },
	{ "socket-group", VSXD_VM_SOCK_GROUP },
};

#define VM_KEYS_KNOWN "guest-cid, socket, uds-path, tx-buffer-size, queue-size, groups, name, " \
	"forward-cid, forward-listen, socket-mode, socket-group"

static char *dup_n(const char *s, size_t len)
{
	char *p = malloc(len + 1);

	if (p) {
		memcpy(p, s, len);
		p[len] = '\0';
	}
	return p;
}

int vsxd__set_str(char **dst, const char *val, size_t len)
{
	char *p = dup_n(val, len);

	if (!p)
		return -ENOMEM;
	free(*dst);
	*dst = p;
	return 0;
}

static int check_path(const char *what, const char *val, size_t len, struct vsxd_err *err)
{
	if (len > SUN_PATH_MAX)
		return vsxd_err_set(err, "%s is too long (%zu bytes, at most %zu)",
			       what, len, (size_t)SUN_PATH_MAX);
	return 0;
}

/* Guests reach host port P at "<uds-path>_P": that must fit too. */
static int check_uds_path(const char *val, size_t len, struct vsxd_err *err)
{
	if (len > VSXD_UDS_PATH_MAX)
		return vsxd_err_set(err, "uds-path is too long (%zu bytes, at most %u, so that "
			       "<uds-path>_<port> fits a Unix socket address)",
			       len, VSXD_UDS_PATH_MAX);
	return 0;
}

static int check_groups(const char *val, size_t len, struct vsxd_err *err)
{
	char q[VSXD_QBUF];
	size_t i, start = 0;

	for (i = 0; i <= len; i++) {
		if (i == len || val[i] == '+') {
			if (i == start)
				return vsxd_err_set(err, "groups '%s' has an empty group name",
					       vsxd_quote(q, val, len));
			start = i + 1;
			continue;
		}
		if ((unsigned char)val[i] <= 0x20 || (unsigned char)val[i] >= 0x7f ||
		    val[i] == ',')
			return vsxd_err_set(err, "groups '%s': group names are printable "
				       "characters without spaces or ','", vsxd_quote(q, val, len));
	}
	return 0;
}

/* forward-listen: "PORT+PORT...", each a u32, none twice. */
static int parse_ports(struct vsxd_vm *vm, const char *val, size_t len,
		       struct vsxd_err *err)
{
	uint32_t ports[VSXD_FWD_LISTEN_MAX];
	const char *p = val, *end = val + len, *w;
	char q[VSXD_QBUF], q2[VSXD_QBUF];
	size_t n = 0, i;
	uint64_t port;
	int r;

	for (;;) {
		w = memchr(p, '+', (size_t)(end - p));
		if (!w)
			w = end;
		r = vsx__parse_uint(p, (size_t)(w - p), UINT32_MAX, &port);
		if (r == -EINVAL)
			return vsxd_err_set(err, "forward-listen '%s': '%s' is not a port number",
				       vsxd_quote(q, val, len),
				       vsxd_quote(q2, p, (size_t)(w - p)));
		if (r < 0)
			return vsxd_err_set(err, "forward-listen '%s': port %s is out of range "
				       "(0 to %u)", vsxd_quote(q, val, len),
				       vsxd_quote(q2, p, (size_t)(w - p)),
				       UINT32_MAX);
		for (i = 0; i < n; i++)
			if (ports[i] == port)
				return vsxd_err_set(err, "forward-listen '%s': port %llu given twice",
					       vsxd_quote(q, val, len), (unsigned long long)port);
		if (n == VSXD_FWD_LISTEN_MAX)
			return vsxd_err_set(err, "forward-listen: more than %u ports",
				       VSXD_FWD_LISTEN_MAX);
		ports[n++] = (uint32_t)port;
		if (w == end)
			break;
		p = w + 1;
	}
	vm->forward_listen = malloc(n * sizeof(*ports));
	if (!vm->forward_listen)
		return -ENOMEM;
	memcpy(vm->forward_listen, ports, n * sizeof(*ports));
	vm->n_forward_listen = n;
	return 0;
}

int vsxd_vm_set(struct vsxd_vm *vm, const char *key, size_t keylen,
		const char *val, size_t vallen, struct vsxd_err *err)
{
	const struct vm_key *k = NULL;
	char q[VSXD_QBUF];
	uint64_t n;
	size_t i;
	int r;

	for (i = 0; i < sizeof(vm_keys) / sizeof(vm_keys[0]); i++)
		if (vsxd__key_is(key, keylen, vm_keys[i].name))
			k = &vm_keys[i];
	if (!k)
		return vsxd_err_set(err, "unknown key '%s' (known keys: " VM_KEYS_KNOWN ")",
			       vsxd_quote(q, key, keylen));
	if (vm->set & k->bit)
		return vsxd_err_set(err, "'%s' given twice", k->name);
	if (vallen == 0)
		return vsxd_err_set(err, "empty value for '%s'", k->name);
	if (memchr(val, '\0', vallen))
		return vsxd_err_set(err, "value of '%s' contains a NUL byte", k->name);

	switch (k->bit) {
	case VSXD_VM_CID:
		r = vsx__parse_uint(val, vallen, UINT64_MAX, &n);
		if (r == -EINVAL)
			return vsxd_err_set(err, "guest-cid '%s' is not a number",
				       vsxd_quote(q, val, vallen));
		if (r < 0 || n < VSXD_CID_MIN || n > VSXD_CID_MAX)
			return vsxd_err_set(err, "guest-cid %s is out of range (%u to %u)",
				       vsxd_quote(q, val, vallen), VSXD_CID_MIN, VSXD_CID_MAX);
		vm->guest_cid = n;
		break;
	case VSXD_VM_SOCKET:
		r = check_path("socket", val, vallen, err);
		if (r < 0)
			return r;
		if (vsxd__set_str(&vm->socket_path, val, vallen))
			return -ENOMEM;
		break;
	case VSXD_VM_UDS:
		r = check_uds_path(val, vallen, err);
		if (r < 0)
			return r;
		if (vsxd__set_str(&vm->uds_path, val, vallen))
			return -ENOMEM;
		break;
	case VSXD_VM_TX:
		r = vsx__parse_size(val, vallen, VSXB_MAX_BUF_ALLOC, &n);
		if (r == -EINVAL)
			return vsxd_err_set(err, "tx-buffer-size '%s' is not a size (a number with "
				       "an optional K, M or G suffix)", vsxd_quote(q, val, vallen));
		if (r < 0 || n == 0)
			return vsxd_err_set(err, "tx-buffer-size %s is out of range (1 to 1G)",
				       vsxd_quote(q, val, vallen));
		vm->tx_buffer_size = (uint32_t)n;
		break;
	case VSXD_VM_QUEUE:
		r = vsx__parse_size(val, vallen, VSXD_QUEUE_SIZE_MAX, &n);
		if (r == -EINVAL)
			return vsxd_err_set(err, "queue-size '%s' is not a number",
				       vsxd_quote(q, val, vallen));
		if (r < 0 || n == 0 || (n & (n - 1)))
			return vsxd_err_set(err, "queue-size %s is not a power of two from 1 to %u",
				       vsxd_quote(q, val, vallen), VSXD_QUEUE_SIZE_MAX);
		vm->queue_size = (unsigned)n;
		break;
	case VSXD_VM_GROUPS:
		r = check_groups(val, vallen, err);
		if (r < 0)
			return r;
		if (vsxd__set_str(&vm->groups, val, vallen))
			return -ENOMEM;
		break;
	case VSXD_VM_NAME:
		if (!vsx__name_ok(val, vallen))
			return vsxd_err_set(err, "name '%s' is not valid (1 to %u letters, digits, "
				       "'.', '_' or '-')", vsxd_quote(q, val, vallen), VSXD_NAME_MAX);
		if (vsxd__set_str(&vm->name, val, vallen))
			return -ENOMEM;
		break;
	case VSXD_VM_FWD_CID:
		r = vsx__parse_uint(val, vallen, VSXD_CID_MAX, &n);
		if (r == -EINVAL)
			return vsxd_err_set(err, "forward-cid '%s' is not a number",
				       vsxd_quote(q, val, vallen));
		if (r < 0)
			return vsxd_err_set(err, "forward-cid %s is out of range (0 to %u)",
				       vsxd_quote(q, val, vallen), VSXD_CID_MAX);
		vm->forward_cid = (uint32_t)n;
		break;
	case VSXD_VM_FWD_LISTEN:
		r = parse_ports(vm, val, vallen, err);
		if (r < 0)
			return r;
		break;
	case VSXD_VM_SOCK_MODE:
		r = vsxd_perm_set_mode(&vm->perm, "socket-mode", val, vallen, err);
		if (r < 0)
			return r;
		break;
	case VSXD_VM_SOCK_GROUP:
		r = vsxd_perm_set_group(&vm->perm, "socket-group", val, vallen, err);
		if (r < 0)
			return r;
		break;
	}
	vm->set |= k->bit;
	return 0;
}

int vsxd_vm_finish(struct vsxd_vm *vm, struct vsxd_err *err)
{
	if (!(vm->set & VSXD_VM_SOCKET))
		return vsxd_err_set(err, "missing 'socket'");
	if ((vm->set & VSXD_VM_UDS) && (vm->set & VSXD_VM_FWD_CID))
		return vsxd_err_set(err, "uds-path and forward-cid exclude each other "
			       "(give one of them)");
	if (!(vm->set & (VSXD_VM_UDS | VSXD_VM_FWD_CID)))
		return vsxd_err_set(err, "missing 'uds-path' (or 'forward-cid')");
	if ((vm->set & VSXD_VM_FWD_LISTEN) && !(vm->set & VSXD_VM_FWD_CID))
		return vsxd_err_set(err, "forward-listen needs forward-cid");
	if (!(vm->set & VSXD_VM_CID))
		vm->guest_cid = VSXD_CID_DEFAULT;
	if (vm->uds_path && !strcmp(vm->socket_path, vm->uds_path))
		return vsxd_err_set(err, "socket and uds-path are the same path");
	return 0;
}

int vsxd_vm_parse(const char *spec, struct vsxd_vm *vm, struct vsxd_err *err)
{
	const char *p, *end, *item_end, *eq;
	char q[VSXD_QBUF];
	int r;

	memset(vm, 0, sizeof(*vm));
	p = spec;
	end = spec + strlen(spec);
	/* vhost-device-vsock trims the whole list */
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (p == end)
		return vsxd_err_set(err, "empty VM description (expected guest-cid=CID,"
			       "socket=PATH,uds-path=PATH)");

	for (;;) {
		item_end = memchr(p, ',', (size_t)(end - p));
		if (!item_end)
			item_end = end;
		if (item_end == p)
			return vsxd_err_set(err, "empty item in '%s' (a ',' too many?)",
				       vsxd_quote(q, spec, strlen(spec)));
		eq = memchr(p, '=', (size_t)(item_end - p));
		if (!eq)
			return vsxd_err_set(err, "'%s' is not KEY=VALUE",
				       vsxd_quote(q, p, (size_t)(item_end - p)));
		if (eq == p)
			return vsxd_err_set(err, "missing key in '%s'",
				       vsxd_quote(q, p, (size_t)(item_end - p)));
		r = vsxd_vm_set(vm, p, (size_t)(eq - p), eq + 1,
				(size_t)(item_end - eq - 1), err);
		if (r < 0)
			return r;
		if (item_end == end)
			break;
		p = item_end + 1;
	}
	return vsxd_vm_finish(vm, err);
}

void vsxd_vm_free(struct vsxd_vm *vm)
{
	free(vm->name);
	free(vm->socket_path);
	free(vm->uds_path);
	free(vm->groups);
	free(vm->origin);
	free(vm->forward_listen);
	perm_free(&vm->perm);
	memset(vm, 0, sizeof(*vm));
}

static int dup_opt(char **dst, const char *src)
{
	*dst = NULL;
	if (src && !(*dst = strdup(src)))
		return -ENOMEM;
	return 0;
}

int vsxd_vm_copy(struct vsxd_vm *dst, const struct vsxd_vm *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->guest_cid = src->guest_cid;
	dst->tx_buffer_size = src->tx_buffer_size;
	dst->queue_size = src->queue_size;
	dst->forward_cid = src->forward_cid;
	dst->set = src->set;
	if (src->n_forward_listen) {
		dst->forward_listen = malloc(src->n_forward_listen * sizeof(*src->forward_listen));
		if (!dst->forward_listen)
			return -ENOMEM;
		memcpy(dst->forward_listen, src->forward_listen,
		       src->n_forward_listen * sizeof(*src->forward_listen));
		dst->n_forward_listen = src->n_forward_listen;
	}
	if (perm_copy(&dst->perm, &src->perm) ||
	    dup_opt(&dst->name, src->name) ||
	    dup_opt(&dst->socket_path, src->socket_path) ||
	    dup_opt(&dst->uds_path, src->uds_path) ||
	    dup_opt(&dst->groups, src->groups) ||
	    dup_opt(&dst->origin, src->origin)) {
		vsxd_vm_free(dst);      /* only what was copied is set */
		return -ENOMEM;
	}
	return 0;
}

const char *vsxd_vm_name(const struct vsxd_vm *vm, char *buf, size_t len)
{
	if (vm->name)
		return vm->name;
	snprintf(buf, len, "cid%llu", (unsigned long long)vm->guest_cid);
	return buf;
}

bool vsxd_vm_same_device(const struct vsxd_vm *a, const struct vsxd_vm *b)
{
	char na[32], nb[32];

	return a->guest_cid == b->guest_cid &&
	       vsxd__str_eq(vsxd_vm_name(a, na, sizeof(na)), vsxd_vm_name(b, nb, sizeof(nb))) &&
	       vsxd__str_eq(a->socket_path, b->socket_path) &&
	       vsxd__str_eq(a->uds_path, b->uds_path) &&
	       a->queue_size == b->queue_size &&
	       a->forward_cid == b->forward_cid &&
	       a->n_forward_listen == b->n_forward_listen &&
	       (!a->n_forward_listen ||
		!memcmp(a->forward_listen, b->forward_listen,
			a->n_forward_listen * sizeof(*a->forward_listen))) &&
	       vsxd__str_eq(a->groups ? a->groups : "default",
		      b->groups ? b->groups : "default");
}

/* ---- The configuration ---- */

void vsxd_config_init(struct vsxd_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->log_target = VSXD_UNSET;
	cfg->log_level = VSXD_UNSET;
	cfg->seccomp = VSXD_UNSET;
}

void vsxd_config_free(struct vsxd_config *cfg)
{
	size_t i;

	for (i = 0; i < cfg->n_vms; i++)
		vsxd_vm_free(&cfg->vms[i]);
	free(cfg->vms);
	for (i = 0; i < cfg->n_fwds; i++)
		vsxd_fwd_free(&cfg->fwds[i]);
	free(cfg->fwds);
	free(cfg->control_path);
	free(cfg->metrics);
	free(cfg->control_allow_uids);
	free(cfg->user);
	perm_free(&cfg->perm);
	perm_free(&cfg->control_perm);
	vsxd_config_init(cfg);
}

/* @arr (@n elements of @size bytes) with one more, zeroed, at its end
 * (*@item): the new array (the old one is gone), or NULL (@arr kept). */
static void *append_zeroed(void *arr, size_t *n, size_t size, void **item)
{
	char *a;

	if (*n >= SIZE_MAX / size - 1)
		return NULL;
	a = realloc(arr, (*n + 1) * size);
	if (!a)
		return NULL;
	*item = a + *n * size;
	memset(*item, 0, size);
	(*n)++;
	return a;
}

struct vsxd_vm *vsxd__config_add_vm(struct vsxd_config *cfg)
{
	void *a, *v = NULL;

	a = append_zeroed(cfg->vms, &cfg->n_vms, sizeof(*cfg->vms), &v);
	if (a)
		cfg->vms = a;
	return v;
}

struct vsxd_forward *vsxd__config_add_fwd(struct vsxd_config *cfg)
{
	void *a, *f = NULL;

	a = append_zeroed(cfg->fwds, &cfg->n_fwds, sizeof(*cfg->fwds), &f);
	if (a)
		cfg->fwds = a;
	return f;
}

int vsxd_config_merge(struct vsxd_config *out, const struct vsxd_config *file,
		      const struct vsxd_config *cli)
{
	const struct vsxd_config *src[2] = { file, cli };
	struct vsxd_vm *vm;
	size_t s, i;

	for (s = 0; s < 2; s++) {
		if (!src[s])
			continue;
		for (i = 0; i < src[s]->n_vms; i++) {
			vm = vsxd__config_add_vm(out);
			if (!vm || vsxd_vm_copy(vm, &src[s]->vms[i])) {
				if (vm)
					out->n_vms--;
				return -ENOMEM;
			}
		}
		for (i = 0; i < src[s]->n_fwds; i++) {
			struct vsxd_forward *f = vsxd__config_add_fwd(out);

			if (!f)
				return -ENOMEM;
			if (vsxd_fwd_copy(f, &src[s]->fwds[i]))
				return -ENOMEM;     /* freed with @out */
		}
		if (src[s]->control_path) {
			free(out->control_path);
			out->control_path = strdup(src[s]->control_path);
			if (!out->control_path)
				return -ENOMEM;
		}
		if (src[s]->metrics) {
			free(out->metrics);
			out->metrics = strdup(src[s]->metrics);
			if (!out->metrics)
				return -ENOMEM;
		}
		if (src[s]->control_allow_set) {
			/* a list replaces the file's, as other [daemon] keys do */
			free(out->control_allow_uids);
			out->control_allow_uids = NULL;
			out->n_control_allow_uids = 0;
			out->control_allow_set = true;
			if (src[s]->n_control_allow_uids) {
				out->control_allow_uids =
					malloc(src[s]->n_control_allow_uids *
					       sizeof(*out->control_allow_uids));
				if (!out->control_allow_uids)
					return -ENOMEM;
				memcpy(out->control_allow_uids, src[s]->control_allow_uids,
				       src[s]->n_control_allow_uids *
				       sizeof(*out->control_allow_uids));
				out->n_control_allow_uids = src[s]->n_control_allow_uids;
			}
		}
		/* each of the two keys on its own, as other [daemon] keys */
		if (perm_merge(&out->perm, &src[s]->perm) < 0 ||
		    perm_merge(&out->control_perm, &src[s]->control_perm) < 0)
			return -ENOMEM;
		if (src[s]->log_target != VSXD_UNSET)
			out->log_target = src[s]->log_target;
		if (src[s]->log_level != VSXD_UNSET)
			out->log_level = src[s]->log_level;
		if (src[s]->seccomp != VSXD_UNSET)
			out->seccomp = src[s]->seccomp;
		if (src[s]->user && vsxd__set_str(&out->user, src[s]->user, strlen(src[s]->user)))
			return -ENOMEM;
		for (i = 0; i < VSXD_LIMIT_N; i++)
			if (src[s]->limit_set[i]) {
				out->limits[i] = src[s]->limits[i];
				out->limit_set[i] = true;
			}
	}
	return 0;
}

/* Two VMs' paths clash: the same path in any role. */
static int check_paths(const struct vsxd_vm *a, const struct vsxd_vm *b,
		       struct vsxd_err *err)
{
	static const char *const role[2] = { "socket", "uds-path" };
	const char *ap[2] = { a->socket_path, a->uds_path };
	const char *bp[2] = { b->socket_path, b->uds_path };
	size_t x, y;

	for (x = 0; x < 2; x++)
		for (y = 0; y < 2; y++)
			if (ap[x] && bp[y] && !strcmp(ap[x], bp[y]))
				return vsxd_err_set(err, "%s: %s '%s' is already the %s of %s",
					       a->origin, role[x], ap[x], role[y], b->origin);
	return 0;
}

int vsxd_config_check(const struct vsxd_config *cfg, struct vsxd_err *err)
{
	const struct vsxd_vm *a, *b;
	const char *na, *nb;
	char ba[32], bb[32];
	uint64_t mem = cfg->limits[VSXD_LIMIT_MAX_CONN_MEMORY];
	size_t i, j;
	int r;

	for (i = 0; i < cfg->n_vms; i++) {
		a = &cfg->vms[i];
		if (mem && (a->tx_buffer_size ? a->tx_buffer_size : VSXB_DEFAULT_BUF_ALLOC) >
			   mem / 2)
			return vsxd_err_set(err, "%s: tx-buffer-size %u%s is above half of "
				       "max-conn-memory (%llu): lower tx-buffer-size or raise "
				       "max-conn-memory", a->origin,
				       a->tx_buffer_size ? a->tx_buffer_size
							 : VSXB_DEFAULT_BUF_ALLOC,
				       a->tx_buffer_size ? "" : " (the default)",
				       (unsigned long long)mem);
		if (a->uds_path && !strcmp(a->socket_path, a->uds_path))
			return vsxd_err_set(err, "%s: socket and uds-path are the same path",
				       a->origin);
		if (cfg->control_path && !strcmp(a->socket_path, cfg->control_path))
			return vsxd_err_set(err, "%s: socket '%s' is also the control socket",
				       a->origin, a->socket_path);
		if (cfg->control_path && a->uds_path && !strcmp(a->uds_path, cfg->control_path))
			return vsxd_err_set(err, "%s: uds-path '%s' is also the control socket",
				       a->origin, a->uds_path);
		na = vsxd_vm_name(a, ba, sizeof(ba));
		for (j = 0; j < i; j++) {
			b = &cfg->vms[j];
			if (a->guest_cid == b->guest_cid)
				return vsxd_err_set(err, "%s: guest-cid %llu is already used by %s",
					       a->origin, (unsigned long long)a->guest_cid,
					       b->origin);
			nb = vsxd_vm_name(b, bb, sizeof(bb));
			if (!strcmp(na, nb))
				return vsxd_err_set(err, "%s: name '%s' is already used by %s",
					       a->origin, na, b->origin);
			r = check_paths(a, b, err);
			if (r < 0)
				return r;
		}
	}
	return vsxd_fwd_check(cfg, err);
}
