/*
 * vsxd.conf(5): the file parser (config.h, "The configuration"), and the
 * choice between it and vhost-device-vsock's YAML (conffile_yaml.c), by
 * the file's content.
 *
 * The parser reads a buffer of any bytes: no line-length limit, NUL
 * bytes and junk are reported with their line, and quoted text in messages
 * is escaped and shortened, so a message is always one printable line.
 * [vm NAME] keys go through vsxd_vm_set, [forward NAME] keys through
 * vsxd_fwd_set and [daemon] limits through vsxd_limit_set (settings.c,
 * fwdspec.c), so a key means the same here as on the command line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config-int.h"
#include "forward.h"

/* ---- vsxd.conf ---- */

enum section { SEC_NONE, SEC_DAEMON, SEC_VM, SEC_FWD };

struct parser {
	const char *fname;
	struct vsxd_config *cfg;
	struct vsxd_err *err;
	unsigned line;
	enum section sec;
	size_t vm;              /* index of the open [vm] in cfg->vms */
	unsigned vm_line;       /* its header's line */
	size_t fwd;             /* index of the open [forward] in cfg->fwds */
	unsigned fwd_line;
};

__attribute__((format(printf, 2, 3)))
static int perr(struct parser *p, const char *fmt, ...)
{
	char msg[VSXD_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return vsxd_err_set(p->err, "%s:%u: %s", p->fname, p->line, msg);
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

static void trim(const char **s, const char **e)
{
	while (*s < *e && is_blank(**s))
		(*s)++;
	while (*e > *s && is_blank((*e)[-1]))
		(*e)--;
}

/* Close the open [vm] section: it must be complete. */
static int close_section(struct parser *p)
{
	struct vsxd_vm *vm;
	char n[32];
	int r;

	if (p->sec == SEC_FWD) {
		p->sec = SEC_NONE;
		r = vsxd_fwd_finish(&p->cfg->fwds[p->fwd], p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u: [forward]", p->fname, p->fwd_line);
		return r;
	}
	if (p->sec != SEC_VM)
		return 0;
	p->sec = SEC_NONE;
	vm = &p->cfg->vms[p->vm];
	r = vsxd_vm_finish(vm, p->err);
	if (r < 0)
		vsxd__err_prefix(p->err, "%s:%u: [vm %s]", p->fname, p->vm_line,
				 vm->name ? vm->name : vsxd_vm_name(vm, n, sizeof(n)));
	return r;
}

static int open_section(struct parser *p, const char *s, const char *e)
{
	const char *w, *name;
	struct vsxd_vm *vm;
	char q[VSXD_QBUF];
	int r;

	r = close_section(p);
	if (r < 0)
		return r;
	if (e[-1] != ']') {
		if (memchr(s, ']', (size_t)(e - s)))
			return perr(p, "text after ']' in section header '%s'",
				    vsxd_quote(q, s, (size_t)(e - s)));
		return perr(p, "section header '%s' has no closing ']'",
			    vsxd_quote(q, s, (size_t)(e - s)));
	}
	s++;            /* '[' */
	e--;            /* ']' */
	trim(&s, &e);
	for (w = s; w < e && !is_blank(*w); w++)
		;
	name = w;
	trim(&name, &e);

	if ((size_t)(w - s) == 6 && !memcmp(s, "daemon", 6)) {
		if (name != e)
			return perr(p, "[daemon] takes no name");
		p->sec = SEC_DAEMON;
		return 0;
	}
	if ((size_t)(w - s) == 7 && !memcmp(s, "forward", 7)) {
		struct vsxd_forward *f = vsxd__config_add_fwd(p->cfg);

		if (!f)
			return -ENOMEM;
		p->fwd = p->cfg->n_fwds - 1;
		p->fwd_line = p->line;
		p->sec = SEC_FWD;
		if (asprintf(&f->origin, "%s:%u", p->fname, p->line) < 0) {
			f->origin = NULL;
			return -ENOMEM;
		}
		if (name < e) {
			r = vsxd_fwd_set(f, "name", 4, name, (size_t)(e - name), p->err);
			if (r == -EINVAL)
				vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
			return r;
		}
		return 0;
	}
	if ((size_t)(w - s) != 2 || memcmp(s, "vm", 2))
		return perr(p, "unknown section '[%s]' (expected [vm NAME], [vm], "
			    "[forward NAME] or [daemon])", vsxd_quote(q, s, (size_t)(e - s)));

	vm = vsxd__config_add_vm(p->cfg);
	if (!vm)
		return -ENOMEM;
	p->vm = p->cfg->n_vms - 1;
	p->vm_line = p->line;
	p->sec = SEC_VM;
	if (asprintf(&vm->origin, "%s:%u", p->fname, p->line) < 0) {
		vm->origin = NULL;
		return -ENOMEM;
	}
	if (name < e) {
		r = vsxd_vm_set(vm, "name", 4, name, (size_t)(e - name), p->err);
		if (r < 0) {
			if (r == -EINVAL)
				vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
			return r;
		}
	}
	return 0;
}

static int daemon_key(struct parser *p, const char *k, size_t kl,
		      const char *v, size_t vl)
{
	struct vsxd_config *cfg = p->cfg;
	char q[VSXD_QBUF];
	int lvl, r;

	if (vsxd__key_is(k, kl, "control")) {
		if (cfg->control_line)
			return perr(p, "'control' given twice (first on line %u)",
				    cfg->control_line);
		if (vl == 0)
			return perr(p, "empty value for 'control'");
		if (memchr(v, '\0', vl))
			return perr(p, "value of 'control' contains a NUL byte");
		if (vl > SUN_PATH_MAX)
			return perr(p, "control is too long (%zu bytes, at most %zu)",
				    vl, (size_t)SUN_PATH_MAX);
		if (vsxd__set_str(&cfg->control_path, v, vl))
			return -ENOMEM;
		cfg->control_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "control-allow-uid")) {
		if (cfg->control_allow_line)
			return perr(p, "'control-allow-uid' given twice (first on line %u)",
				    cfg->control_allow_line);
		if (memchr(v, '\0', vl))
			return perr(p, "value of 'control-allow-uid' contains a NUL byte");
		r = vsxd_parse_uid_list(v, vl, cfg, p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		if (r < 0)
			return r;
		cfg->control_allow_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "metrics")) {
		if (cfg->metrics_line)
			return perr(p, "'metrics' given twice (first on line %u)",
				    cfg->metrics_line);
		r = vsxd_metrics_check(v, vl, "metrics", NULL, p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		if (r < 0)
			return r;
		if (vsxd__set_str(&cfg->metrics, v, vl))
			return -ENOMEM;
		cfg->metrics_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "log")) {
		if (cfg->log_line)
			return perr(p, "'log' given twice (first on line %u)", cfg->log_line);
		if (vl == 6 && !memcmp(v, "stderr", 6))
			cfg->log_target = VSXD_LOG_STDERR;
		else if (vl == 6 && !memcmp(v, "syslog", 6))
			cfg->log_target = VSXD_LOG_SYSLOG;
		else
			return perr(p, "log '%s' is not 'stderr' or 'syslog'", vsxd_quote(q, v, vl));
		cfg->log_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "seccomp")) {
		if (cfg->seccomp_line)
			return perr(p, "'seccomp' given twice (first on line %u)", cfg->seccomp_line);
		lvl = vsxd_parse_seccomp(v, vl);
		if (lvl < 0)
			return perr(p, "seccomp '%s' is not one of kill, log, off",
				    vsxd_quote(q, v, vl));
		cfg->seccomp = lvl;
		cfg->seccomp_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "user")) {
		if (cfg->user_line)
			return perr(p, "'user' given twice (first on line %u)", cfg->user_line);
		r = vsxd_set_user(cfg, "user", v, vl, p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		if (r < 0)
			return r;
		cfg->user_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "log-level")) {
		if (cfg->log_level_line)
			return perr(p, "'log-level' given twice (first on line %u)",
				    cfg->log_level_line);
		lvl = vsxd_parse_log_level(v, vl);
		if (lvl < 0)
			return perr(p, "log-level '%s' is not one of error, warning, "
				    "notice, info, debug", vsxd_quote(q, v, vl));
		cfg->log_level = lvl;
		cfg->log_level_line = p->line;
		return 0;
	}
	if (vsxd__key_is(k, kl, "socket-mode") || vsxd__key_is(k, kl, "socket-group") ||
	    vsxd__key_is(k, kl, "control-mode") || vsxd__key_is(k, kl, "control-group")) {
		bool ctl = vsxd__key_is(k, kl, "control-mode") ||
			   vsxd__key_is(k, kl, "control-group");
		bool mode = vsxd__key_is(k, kl, ctl ? "control-mode" : "socket-mode");
		const char *key = ctl ? (mode ? "control-mode" : "control-group")
				      : (mode ? "socket-mode" : "socket-group");
		struct vsxd_sock_perm *perm = ctl ? &cfg->control_perm : &cfg->perm;
		unsigned *line = ctl ? (mode ? &cfg->control_mode_line : &cfg->control_group_line)
				     : (mode ? &cfg->socket_mode_line : &cfg->socket_group_line);

		if (*line)
			return perr(p, "'%s' given twice (first on line %u)", key, *line);
		if (memchr(v, '\0', vl))
			return perr(p, "value of '%s' contains a NUL byte", key);
		r = mode ? vsxd_perm_set_mode(perm, key, v, vl, p->err)
			 : vsxd_perm_set_group(perm, key, v, vl, p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		if (r < 0)
			return r;
		*line = p->line;
		return 0;
	}
	lvl = vsxd_limit_key(k, kl);
	if (lvl >= 0) {
		if (cfg->limit_line[lvl])
			return perr(p, "'%s' given twice (first on line %u)",
				    vsxd_limit_name(lvl), cfg->limit_line[lvl]);
		if (memchr(v, '\0', vl))
			return perr(p, "value of '%s' contains a NUL byte",
				    vsxd_limit_name(lvl));
		r = vsxd_limit_set(cfg, lvl, v, vl, p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		if (r < 0)
			return r;
		cfg->limit_line[lvl] = p->line;
		return 0;
	}
	return perr(p, "unknown key '%s' in [daemon] (known keys: control, "
		    "control-allow-uid, control-mode, control-group, metrics, log, log-level, "
		    "socket-mode, socket-group, seccomp, user, "
		    LIMIT_KEYS ")",
		    vsxd_quote(q, k, kl));
}

static int parse_line(struct parser *p, const char *s, const char *e)
{
	const char *eq, *k, *ke, *v, *ve, *c;
	char q[VSXD_QBUF];
	int r;

	if (memchr(s, '\0', (size_t)(e - s)))
		return perr(p, "NUL byte in line (not a text file?)");
	trim(&s, &e);
	if (s == e || *s == '#' || *s == ';')
		return 0;
	/* an inline comment starts at a '#' after a blank */
	for (c = s + 1; c < e; c++) {
		if (*c == '#' && is_blank(c[-1])) {
			e = c;
			trim(&s, &e);
			break;
		}
	}

	if (*s == '[')
		return open_section(p, s, e);

	eq = memchr(s, '=', (size_t)(e - s));
	if (!eq) {
		return perr(p, "expected 'KEY = VALUE' or a '[section]', not '%s'",
			    vsxd_quote(q, s, (size_t)(e - s)));
	}
	k = s;
	ke = eq;
	v = eq + 1;
	ve = e;
	trim(&k, &ke);
	trim(&v, &ve);
	if (k == ke)
		return perr(p, "missing key before '='");

	switch (p->sec) {
	case SEC_NONE:
		return perr(p, "'%s' outside a section (put it under [vm NAME] or [daemon])",
			    vsxd_quote(q, k, (size_t)(ke - k)));
	case SEC_DAEMON:
		return daemon_key(p, k, (size_t)(ke - k), v, (size_t)(ve - v));
	case SEC_VM:
		r = vsxd_vm_set(&p->cfg->vms[p->vm], k, (size_t)(ke - k), v,
				(size_t)(ve - v), p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		return r;
	case SEC_FWD:
		r = vsxd_fwd_set(&p->cfg->fwds[p->fwd], k, (size_t)(ke - k), v,
				 (size_t)(ve - v), p->err);
		if (r == -EINVAL)
			vsxd__err_prefix(p->err, "%s:%u", p->fname, p->line);
		return r;
	}
	return 0;
}

int vsxd_config_parse(const char *buf, size_t len, const char *fname,
		      struct vsxd_config *cfg, struct vsxd_err *err)
{
	struct parser p = {
		.fname = fname ? fname : "(config)",
		.cfg = cfg,
		.err = err,
	};
	const char *s = buf, *end = buf + len, *nl;
	int r;

	if (vsxd__config_is_yaml(buf, len))
		return vsxd__config_parse_yaml(buf, len, p.fname, cfg, err);
	if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
		s += 3;         /* a UTF-8 byte order mark */
	while (s < end) {
		p.line++;
		nl = memchr(s, '\n', (size_t)(end - s));
		if (!nl)
			nl = end;
		r = parse_line(&p, s, nl);
		if (r < 0)
			return r;
		s = nl + 1;
	}
	p.line++;
	return close_section(&p);
}

int vsxd_config_load(const char *path, struct vsxd_config *cfg, struct vsxd_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	if (fd < 0) {
		r = -errno;
		vsxd_err_set(err, "%s: %s", path, strerror(-r));
		return r;
	}
	r = vsxd_config_load_fd(fd, path, cfg, err);
	close(fd);
	return r;
}

int vsxd_config_load_fd(int fd, const char *path, struct vsxd_config *cfg,
			struct vsxd_err *err)
{
	size_t len = 0, cap = 4096;
	char *buf = NULL, *nb;
	ssize_t n;
	int r;

	buf = malloc(cap);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		if (len == cap) {
			if (cap > VSXD_CONFIG_FILE_MAX)
				break;  /* too large: said below */
			nb = realloc(buf, cap * 2);
			if (!nb) {
				r = -ENOMEM;
				goto out;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			vsxd_err_set(err, "%s: %s", path, strerror(-r));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > VSXD_CONFIG_FILE_MAX) {
		vsxd_err_set(err, "%s: file too large (more than %u bytes)", path,
			VSXD_CONFIG_FILE_MAX);
		r = -EFBIG;
		goto out;
	}
	r = vsxd_config_parse(buf, len, path, cfg, err);
out:
	free(buf);
	return r;
}
