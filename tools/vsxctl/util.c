/* vsxctl helpers: errors, sizes, the control call, table and JSON output. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsxctl.h"

void die_usage(const char *cmd)
{
	const struct vsxctl_command *c;

	for (c = vsxctl_commands; c->name; c++)
		if (strcmp(c->name, cmd) == 0)
			fprintf(stderr, "usage: vsxctl %s %s\n", c->name, c->usage);
	exit(2);
}

int err_msg(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "vsxctl %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

int parse_u64(const char *s, uint64_t *out)
{
	return vsx__parse_dec(s, strlen(s), UINT64_MAX, out);
}

int parse_size(const char *s, uint64_t *out)
{
	return vsx__parse_size(s, strlen(s), UINT64_MAX, out);
}

int ctl_run(const char *cmd, struct vsx_ctl_req *req,
	    void (*print)(const struct vsx_kvs *kvs))
{
	return ctl_run_timeout(cmd, req, print, 5000);
}

int ctl_run_timeout(const char *cmd, struct vsx_ctl_req *req,
		    void (*print)(const struct vsx_kvs *kvs), int timeout_ms)
{
	struct vsx_kvs kvs;
	const char *err;
	char *buf = NULL;
	int rc, rerr = 0;

	rc = vsx__ctl_req_end(req);
	if (rc == -E2BIG)
		return err_msg(cmd, "request too long");
	if (rc < 0)
		return err_msg(cmd, "cannot send that to vsxd: values are printable ASCII, "
			       "at most %d bytes", VSX_CTL_VALUE_MAX);
	rc = vsx__ctl_call(opt_control, req->buf, timeout_ms, &buf, &rerr);
	if (rc == -ENOENT || rc == -ECONNREFUSED)
		return err_msg(cmd, "no vsxd at %s (is it running? -c PATH)", opt_control);
	if (rc == -EACCES)
		return err_msg(cmd, "%s: permission denied", opt_control);
	if (rc < 0)
		return err_msg(cmd, "%s: %s", opt_control, strerror(-rc));
	rc = vsx__ctl_parse_reply(buf, strlen(buf) - 1, &kvs);
	if (rc < 0) {
		rc = err_msg(cmd, "malformed reply from vsxd");
	} else if (rerr) {
		err = vsx__ctl_get(&kvs, VSX_CTL_K_ERROR);
		rc = err_msg(cmd, "%s", err ? err : strerror(rerr));
	} else if (print) {
		print(&kvs);
	}
	vsx__ctl_kvs_free(&kvs);
	free(buf);
	return rc;
}

void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/*
 * JSON keys are the control protocol's keys with every '-' made '_'
 * (buf-alloc -> buf_alloc), as ip -j and ss print theirs; the commands that
 * write their own JSON (ss, probe, guid, set-buffer --pid) use such names
 * from the start. vsxctl(8), JSON OUTPUT, says so.
 */
static void json_key(const char *key)
{
	putchar('"');
	for (; *key; key++)
		putchar(*key == '-' ? '_' : *key);
	putchar('"');
}

/* Keys whose values are names or text a user chose: always strings, even
 * when they read as a number (a VM called 42 stays "42"). */
static const char *const text_keys[] = {
	VSX_CTL_K_VM, VSX_CTL_K_FORWARD, VSX_CTL_K_VERSION, VSX_CTL_K_CONTROL,
	VSX_CTL_K_SOCKET, VSX_CTL_K_UDS_PATH, VSX_CTL_K_GUEST, VSX_CTL_K_PEER,
	VSX_CTL_K_THREAD_VMS,
};

/* A decimal integer as JSON writes one: no '+', no leading zeros. */
static bool is_json_int(const char *s)
{
	if (*s == '-')
		s++;
	if (*s < '1' || *s > '9')
		return s[0] == '0' && s[1] == '\0';
	while (*++s)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* "key": value, the value a number when it is a decimal integer and @key
 * is not one of text_keys[], else a string. */
static void json_pair(const char *key, const char *v)
{
	size_t i;

	json_key(key);
	printf(": ");
	for (i = 0; i < sizeof(text_keys) / sizeof(text_keys[0]); i++)
		if (strcmp(key, text_keys[i]) == 0)
			break;
	if (i == sizeof(text_keys) / sizeof(text_keys[0]) && is_json_int(v))
		fputs(v, stdout);
	else
		json_string(v);
}

/* Records: [first, last) index ranges of pairs starting at @rec_key. */
static unsigned next_record(const struct vsx_kvs *kvs, const char *rec_key,
			    unsigned from, unsigned *end)
{
	unsigned i, j;

	for (i = from; i < kvs->n; i++)
		if (strcmp(kvs->kv[i].key, rec_key) == 0)
			break;
	for (j = i + 1; j < kvs->n; j++)
		if (strcmp(kvs->kv[j].key, rec_key) == 0 ||
		    strcmp(kvs->kv[j].key, VSX_CTL_K_ERRNO) == 0)
			break;
	*end = j;
	return i;
}

static const char *rec_get(const struct vsx_kvs *kvs, unsigned b, unsigned e,
			   const char *key)
{
	for (; b < e; b++)
		if (strcmp(kvs->kv[b].key, key) == 0)
			return kvs->kv[b].value;
	return NULL;
}

/* The records of @kvs from pair @from on: a table, or a JSON array. */
static void records(const struct vsx_kvs *kvs, const char *rec_key, unsigned from,
		    const struct out_col *cols, unsigned ncols)
{
	size_t width[32] = { 0 };
	unsigned b, e, c, nrec = 0;
	const char *v;

	if (opt_json) {
		printf("[");
		for (b = next_record(kvs, rec_key, from, &e); b < kvs->n;
		     b = next_record(kvs, rec_key, e, &e)) {
			printf(nrec++ ? ",\n {" : "\n {");
			for (c = b; c < e; c++) {
				printf(c > b ? ", " : "");
				json_pair(kvs->kv[c].key, kvs->kv[c].value);
			}
			printf("}");
		}
		printf(nrec ? "\n]" : "]");
		return;
	}
	for (c = 0; c < ncols && c < 32; c++)
		width[c] = strlen(cols[c].title);
	for (b = next_record(kvs, rec_key, from, &e); b < kvs->n;
	     b = next_record(kvs, rec_key, e, &e))
		for (c = 0; c < ncols && c < 32; c++)
			if ((v = rec_get(kvs, b, e, cols[c].key)) && strlen(v) > width[c])
				width[c] = strlen(v);
	for (c = 0; c < ncols && c < 32; c++)
		printf(cols[c].number ? "%*s%s" : "%-*s%s", (int)width[c], cols[c].title,
		       c + 1 < ncols ? "  " : "\n");
	for (b = next_record(kvs, rec_key, from, &e); b < kvs->n;
	     b = next_record(kvs, rec_key, e, &e))
		for (c = 0; c < ncols && c < 32; c++) {
			v = rec_get(kvs, b, e, cols[c].key);
			printf(cols[c].number ? "%*s%s" : "%-*s%s", (int)width[c],
			       v ? v : "-", c + 1 < ncols ? "  " : "\n");
		}
}

void out_records(const struct vsx_kvs *kvs, const char *rec_key,
		 const struct out_col *cols, unsigned ncols)
{
	records(kvs, rec_key, 0, cols, ncols);
	if (opt_json)
		printf("\n");
}

/* The pairs [@b, @e) of @kvs but errno, as the members of a JSON object
 * (*@n so far) or "key value" lines. */
static void print_members(const struct vsx_kvs *kvs, unsigned b, unsigned e, unsigned *n)
{
	unsigned i;

	for (i = b; i < e && i < kvs->n; i++) {
		if (strcmp(kvs->kv[i].key, VSX_CTL_K_ERRNO) == 0)
			continue;
		if (opt_json) {
			printf((*n)++ ? ", " : "");
			json_pair(kvs->kv[i].key, kvs->kv[i].value);
		} else {
			printf("%-16s %s\n", kvs->kv[i].key, kvs->kv[i].value);
		}
	}
}

void out_pairs_records(const struct vsx_kvs *kvs, const char *rec_key, const char *name,
		       const struct out_col *cols, unsigned ncols)
{
	unsigned e, first = next_record(kvs, rec_key, 0, &e), n = 0;

	if (opt_json)
		printf("{");
	print_members(kvs, 0, first, &n);
	if (opt_json) {
		printf("%s", n ? ", " : "");
		json_key(name);
		printf(": ");
	} else if (first < kvs->n) {
		printf("\n");
	}
	if (opt_json || first < kvs->n)
		records(kvs, rec_key, first, cols, ncols);
	if (opt_json)
		printf("}\n");
}

/* The pairs [@b, @e) of @kvs but errno, as a JSON object or "key value"
 * lines. */
static void print_pairs(const struct vsx_kvs *kvs, unsigned b, unsigned e)
{
	unsigned i, n = 0;

	if (opt_json)
		printf("{");
	for (i = b; i < e && i < kvs->n; i++) {
		if (strcmp(kvs->kv[i].key, VSX_CTL_K_ERRNO) == 0)
			continue;
		if (opt_json) {
			printf(n++ ? ", " : "");
			json_pair(kvs->kv[i].key, kvs->kv[i].value);
		} else {
			printf("%-16s %s\n", kvs->kv[i].key, kvs->kv[i].value);
		}
	}
	if (opt_json)
		printf("}\n");
}

void out_record_detail(const struct vsx_kvs *kvs, const char *rec_key)
{
	unsigned b, e;

	b = next_record(kvs, rec_key, 0, &e);
	print_pairs(kvs, b, e);
}

void out_pairs(const struct vsx_kvs *kvs)
{
	print_pairs(kvs, 0, kvs->n);
}
