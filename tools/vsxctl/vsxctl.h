/*
 * vsxctl: the admin CLI. Subcommands live in a table (commands.c), one file
 * each, as NAME_main(argc, argv) with argv[0] the subcommand's name. They
 * print to stdout, errors to stderr as "vsxctl NAME: ...", and return the
 * process exit status: 0 ok, 1 failure, 2 usage.
 */
#ifndef VSXCTL_H
#define VSXCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl-proto.h"
#include "util.h"

struct vsxctl_command {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *usage;   /* arguments after the name */
	const char *help;    /* one line */
};

extern const struct vsxctl_command vsxctl_commands[];

/* Global options (main.c) */
extern bool opt_json;
extern const char *opt_control;

int status_main(int argc, char **argv);
int vms_main(int argc, char **argv);
int list_main(int argc, char **argv);
int show_main(int argc, char **argv);
int set_buffer_main(int argc, char **argv);
int close_main(int argc, char **argv);
int probe_main(int argc, char **argv);
int guid_main(int argc, char **argv);
int ss_main(int argc, char **argv);
int upgrade_main(int argc, char **argv);
int libvirt_xml_main(int argc, char **argv);

/* util.c */
void die_usage(const char *cmd) __attribute__((noreturn));
int err_msg(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "64K", "1M", "1G", "4096" -> bytes; -EINVAL / -ERANGE. */
int parse_size(const char *s, uint64_t *out);
int parse_u64(const char *s, uint64_t *out);

/*
 * End @req (vsx__ctl_req_init/add, ctl-proto.h), send it to vsxd and give
 * the reply's pairs to @print (NULL: print nothing; the pairs are valid
 * during the call). Prints the error and returns 1 when the request cannot
 * be built, vsxd cannot be reached or says no; 0 on success.
 */
int ctl_run(const char *cmd, struct vsx_ctl_req *req,
	    void (*print)(const struct vsx_kvs *kvs));
/* The same, waiting @timeout_ms for the reply (ctl_run: 5 s). */
int ctl_run_timeout(const char *cmd, struct vsx_ctl_req *req,
		    void (*print)(const struct vsx_kvs *kvs), int timeout_ms);

/* Output of reply records: a table with @cols columns, or JSON (opt_json):
 * keys snake_case (util.c, json_key), decimal integers as numbers. */
struct out_col {
	const char *key;     /* reply key */
	const char *title;   /* column title */
	bool number;         /* right-aligned (JSON: util.c decides) */
};
/* Print the records of @kvs that start with @rec_key as rows. */
void out_records(const struct vsx_kvs *kvs, const char *rec_key,
		 const struct out_col *cols, unsigned ncols);
/* Print every key of one record (starting at @rec_key) as "key: value"
 * lines, or a JSON object. */
void out_record_detail(const struct vsx_kvs *kvs, const char *rec_key);
/* Print all pairs except errno as a JSON object or "key: value" lines. */
void out_pairs(const struct vsx_kvs *kvs);
/* The pairs before the first @rec_key record as out_pairs does, then the
 * records as out_records does (JSON: one object, the records an array
 * member named @name). */
void out_pairs_records(const struct vsx_kvs *kvs, const char *rec_key, const char *name,
		       const struct out_col *cols, unsigned ncols);
/* @s as a JSON string, quoted and escaped. */
void json_string(const char *s);

#endif
