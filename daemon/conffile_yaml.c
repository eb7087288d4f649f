/*
 * vhost-device-vsock's YAML configuration file, read with libyaml
 * (config.h, "The configuration"; vsxd_config_parse chooses it by content,
 * vsxd__config_is_yaml).
 *
 * The file is what vhost-device-vsock 0.3.0 reads: a mapping whose one key,
 * vms, is a list of mappings, one per VM, of the keys guest_cid, socket,
 * uds_path, forward_cid, forward_listen, tx_buffer_size, queue_size and
 * groups ('-' may stand for '_'). Values are scalars: the numbers plain
 * decimal integers, the strings any scalar (trimmed, as vhost-device-vsock
 * does); a null value is a key not given. Anything else (an unknown key, a
 * key twice, a list where a value goes, a second document, an alias) is
 * refused with its line, as serde would refuse it.
 *
 * Each value goes through vsxd_vm_set and each VM through vsxd_vm_finish
 * (settings.c), so a YAML VM is the very struct vsxd_vm a --vm list makes.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config.h"
#include "config-int.h"

/* The keys of a VM, as vsxd_vm_set spells them. */
static const struct yaml_key {
	const char *name;
	bool number;    /* an integer (u32/u64 in vhost-device-vsock), else a string */
} yaml_keys[] = {
	{ "guest-cid", true },
	{ "socket", false },
	{ "uds-path", false },
	{ "forward-cid", true },
	{ "forward-listen", false },
	{ "tx-buffer-size", true },
	{ "queue-size", true },
	{ "groups", false },
};

#define NKEYS (sizeof(yaml_keys) / sizeof(yaml_keys[0]))
#define YAML_KEYS_KNOWN "guest_cid, socket, uds_path, forward_cid, forward_listen, " \
	"tx_buffer_size, queue_size, groups"

struct yp {
	yaml_parser_t parser;
	yaml_event_t ev;        /* the current event */
	bool have_ev;           /* @ev is to be deleted */
	const char *buf;
	size_t len;
	const char *fname;
	struct vsxd_config *cfg;
	struct vsxd_err *err;
};

static unsigned ev_line(const struct yp *y)
{
	return (unsigned)y->ev.start_mark.line + 1;
}

__attribute__((format(printf, 3, 4)))
static int yerr(struct yp *y, unsigned line, const char *fmt, ...)
{
	char msg[VSXD_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return vsxd_err_set(y->err, "%s:%u: %s", y->fname, line, msg);
}

/* libyaml's own message, with its line. */
static int syntax_error(struct yp *y)
{
	const yaml_parser_t *p = &y->parser;
	const char *problem = p->problem ? p->problem : "unknown error";
	unsigned line;
	size_t i;

	if (p->error == YAML_MEMORY_ERROR)
		return -ENOMEM;
	if (p->error == YAML_READER_ERROR) {
		/* the reader knows an offset, not a line */
		line = 1;
		for (i = 0; i < p->problem_offset && i < y->len; i++)
			line += y->buf[i] == '\n';
		return yerr(y, line, "not a YAML text: %s", problem);
	}
	line = (unsigned)p->problem_mark.line + 1;
	if (p->context)
		return yerr(y, line, "YAML syntax error: %s (%s on line %u)", problem,
			    p->context, (unsigned)p->context_mark.line + 1);
	return yerr(y, line, "YAML syntax error: %s", problem);
}

/* The next event into y->ev. */
static int next(struct yp *y)
{
	if (y->have_ev)
		yaml_event_delete(&y->ev);
	y->have_ev = false;
	if (!yaml_parser_parse(&y->parser, &y->ev))
		return syntax_error(y);
	y->have_ev = true;
	if (y->ev.type == YAML_ALIAS_EVENT)
		return yerr(y, ev_line(y), "YAML aliases (*NAME) are not supported");
	return 0;
}

/* The next event of a mapping or list: 1 and the event for its next item,
 * 0 at its @end event, or the error. */
static int next_item(struct yp *y, yaml_event_type_t end)
{
	int r = next(y);

	if (r < 0)
		return r;
	return y->ev.type != end;
}

static const char *scalar(const struct yp *y, size_t *len)
{
	*len = y->ev.data.scalar.length;
	return (const char *)y->ev.data.scalar.value;
}

/* What the current event starts, for messages. */
static const char *node_kind(const struct yp *y)
{
	switch (y->ev.type) {
	case YAML_MAPPING_START_EVENT:
		return "a mapping";
	case YAML_SEQUENCE_START_EVENT:
		return "a list";
	case YAML_SCALAR_EVENT:
		return y->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? "a value"
									   : "a quoted string";
	default:
		return "nothing";
	}
}

/* A plain ~, null, Null, NULL or nothing: YAML's null. */
static bool is_null(const struct yp *y)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	size_t i, len;
	const char *s;

	if (y->ev.type != YAML_SCALAR_EVENT ||
	    y->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	s = scalar(y, &len);
	for (i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
		if (strlen(nulls[i]) == len && !memcmp(s, nulls[i], len))
			return true;
	return false;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The value of key @k (its event is y->ev) into @vm. */
static int vm_value(struct yp *y, struct vsxd_vm *vm, const struct yaml_key *k,
		    const char *kname)
{
	char q[VSXD_QBUF];
	const char *v;
	size_t vl, i;
	int r;

	if (y->ev.type != YAML_SCALAR_EVENT)
		return yerr(y, ev_line(y), "%s: expected %s, not %s", kname,
			    k->number ? "an integer" : "a string", node_kind(y));
	if (is_null(y))
		return 0;       /* Option<T>: not given */
	v = scalar(y, &vl);
	if (k->number) {
		if (y->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
			return yerr(y, ev_line(y), "%s: expected an integer, not a quoted string",
				    kname);
		for (i = 0; i < vl; i++)
			if (v[i] < '0' || v[i] > '9')
				return yerr(y, ev_line(y), "%s: '%s' is not an integer", kname,
					    vsxd_quote(q, v, vl));
	} else {
		while (vl && is_blank(*v)) {
			v++;
			vl--;
		}
		while (vl && is_blank(v[vl - 1]))
			vl--;
	}
	r = vsxd_vm_set(vm, k->name, strlen(k->name), v, vl, y->err);
	if (r == -EINVAL)
		vsxd__err_prefix(y->err, "%s:%u", y->fname, ev_line(y));
	return r;
}

/* One entry of vms (its MAPPING_START is y->ev), the @nth. */
static int parse_vm(struct yp *y, size_t nth)
{
	unsigned seen[NKEYS] = { 0 };   /* line of each key given */
	unsigned vm_line = ev_line(y), line;
	const struct yaml_key *k;
	struct vsxd_vm *vm;
	char q[VSXD_QBUF], kname[32];
	const char *key;
	size_t kl, i;
	int r;

	vm = vsxd__config_add_vm(y->cfg);
	if (!vm)
		return -ENOMEM;
	if (asprintf(&vm->origin, "%s:%u", y->fname, vm_line) < 0) {
		vm->origin = NULL;
		return -ENOMEM;
	}
	while ((r = next_item(y, YAML_MAPPING_END_EVENT)) > 0) {
		line = ev_line(y);
		if (y->ev.type != YAML_SCALAR_EVENT)
			return yerr(y, line, "expected a key, not %s", node_kind(y));
		key = scalar(y, &kl);
		for (i = 0, k = NULL; i < NKEYS && !k; i++)
			if (vsxd__key_is(key, kl, yaml_keys[i].name))
				k = &yaml_keys[i];
		if (!k)
			return yerr(y, line, "unknown key '%s' (known keys: " YAML_KEYS_KNOWN ")",
				    vsxd_quote(q, key, kl));
		i = (size_t)(k - yaml_keys);
		snprintf(kname, sizeof(kname), "%.*s", (int)kl, key);
		if (seen[i])
			return yerr(y, line, "'%s' given twice (first on line %u)", kname,
				    seen[i]);
		seen[i] = line;
		r = next(y);
		if (r < 0)
			return r;
		r = vm_value(y, vm, k, kname);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	r = vsxd_vm_finish(vm, y->err);
	if (r == -EINVAL)
		vsxd__err_prefix(y->err, "%s:%u: vms entry %zu", y->fname, vm_line, nth);
	return r;
}

/* The value of vms (y->ev). */
static int parse_vms(struct yp *y)
{
	unsigned line = ev_line(y);
	size_t n = 0;
	int r;

	if (y->ev.type != YAML_SEQUENCE_START_EVENT)
		return yerr(y, line, "vms: expected a list of VMs ('- guest_cid: ...' "
			    "entries), not %s", is_null(y) ? "nothing" : node_kind(y));
	while ((r = next_item(y, YAML_SEQUENCE_END_EVENT)) > 0) {
		if (y->ev.type != YAML_MAPPING_START_EVENT)
			return yerr(y, ev_line(y), "vms entry %zu: expected a mapping of "
				    "KEY: VALUE, not %s", n + 1, node_kind(y));
		r = parse_vm(y, ++n);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	if (n == 0)
		return yerr(y, line, "vms is an empty list");
	return 0;
}

static int parse_document(struct yp *y)
{
	unsigned vms_line = 0;
	char q[VSXD_QBUF];
	const char *key;
	size_t kl;
	int r;

	r = next(y);            /* STREAM_START */
	if (r == 0)
		r = next(y);
	if (r < 0)
		return r;
	if (y->ev.type != YAML_DOCUMENT_START_EVENT)
		return yerr(y, ev_line(y), "empty YAML file (expected a 'vms:' list)");
	r = next(y);
	if (r < 0)
		return r;
	if (y->ev.type != YAML_MAPPING_START_EVENT)
		return yerr(y, ev_line(y), "expected a mapping with a 'vms:' list, not %s",
			    is_null(y) ? "nothing" : node_kind(y));
	while ((r = next_item(y, YAML_MAPPING_END_EVENT)) > 0) {
		if (y->ev.type != YAML_SCALAR_EVENT)
			return yerr(y, ev_line(y), "expected a key, not %s", node_kind(y));
		key = scalar(y, &kl);
		if (kl != 3 || memcmp(key, "vms", 3))
			return yerr(y, ev_line(y), "unknown key '%s' (the file has one key, "
				    "vms)", vsxd_quote(q, key, kl));
		if (vms_line)
			return yerr(y, ev_line(y), "'vms' given twice (first on line %u)",
				    vms_line);
		vms_line = ev_line(y);
		r = next(y);
		if (r == 0)
			r = parse_vms(y);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	if (!vms_line)
		return yerr(y, ev_line(y), "no 'vms:' list");
	r = next(y);            /* DOCUMENT_END */
	if (r == 0)
		r = next(y);
	if (r < 0)
		return r;
	if (y->ev.type != YAML_STREAM_END_EVENT)
		return yerr(y, ev_line(y), "a second YAML document (a file holds one)");
	return 0;
}

/* The whole text through libyaml first, so that a syntax error is what is
 * reported even when what comes before it is incomplete (a key indented
 * too little ends its VM early: "missing 'uds-path'" would hide it). */
static int syntax_check(struct yp *y)
{
	int r;

	do {
		r = next(y);
	} while (r == 0 && y->ev.type != YAML_STREAM_END_EVENT);
	return r;
}

int vsxd__config_parse_yaml(const char *buf, size_t len, const char *fname,
			    struct vsxd_config *cfg, struct vsxd_err *err)
{
	struct yp y = {
		.buf = buf,
		.len = len,
		.fname = fname,
		.cfg = cfg,
		.err = err,
	};
	int pass, r;

	for (pass = 0; pass < 2; pass++) {
		if (!yaml_parser_initialize(&y.parser))
			return -ENOMEM;
		yaml_parser_set_input_string(&y.parser, (const unsigned char *)buf, len);
		r = pass == 0 ? syntax_check(&y) : parse_document(&y);
		if (y.have_ev)
			yaml_event_delete(&y.ev);
		y.have_ev = false;
		yaml_parser_delete(&y.parser);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * vsxd.conf's first line that counts is a [section] or a KEY = VALUE (or,
 * broken, anything but "WORD:"); a YAML file's is "---", a %directive, a
 * '{', a "- " list item or "KEY:" ('#' comments and blank lines skipped in
 * both).
 */
bool vsxd__config_is_yaml(const char *buf, size_t len)
{
	const char *s = buf, *end = buf + len, *e, *w;

	if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
		s += 3;
	for (; s < end; s = e + 1) {
		e = memchr(s, '\n', (size_t)(end - s));
		if (!e)
			e = end;
		for (w = s; w < e && is_blank(*w); w++)
			;
		if (w == e || *w == '#')
			continue;
		if (w != s)
			return false;   /* vsxd.conf allows indentation; YAML's top level has none */
		if ((e - s >= 3 && !memcmp(s, "---", 3)) || *s == '%' || *s == '{' ||
		    (*s == '-' && (s + 1 == e || is_blank(s[1]))))
			return true;
		while (w < e && ((*w >= 'a' && *w <= 'z') || (*w >= 'A' && *w <= 'Z') ||
				 (*w >= '0' && *w <= '9') || *w == '_' || *w == '-'))
			w++;
		return w > s && w < e && *w == ':' && (w + 1 == e || is_blank(w[1]));
	}
	return false;
}
