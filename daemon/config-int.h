/*
 * What the pieces of vsxd's settings share (settings.c, the model;
 * conffile.c, vsxd.conf; conffile_yaml.c, vhost-device-vsock's YAML;
 * cmdline.c, the command line): not for callers, who use config.h.
 */
#ifndef VSXD_CONFIG_INT_H
#define VSXD_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/un.h>

#include "config.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* The [daemon] limit keys, for messages (the names of vsxd_limit_name). */
#define LIMIT_KEYS "max-conns, max-conns-per-vm, max-conn-memory, handshake-timeout, " \
	"connect-timeout, linger-timeout, poll-us, threads"

/* Put "PREFIX: " in front of the message already in @err. */
__attribute__((format(printf, 2, 3)))
void vsxd__err_prefix(struct vsxd_err *err, const char *fmt, ...);

/* @key (@keylen bytes) is @name, '_' standing for any '-'. */
bool vsxd__key_is(const char *key, size_t keylen, const char *name);
/* Two optional strings are equal: both NULL, or both set and the same. */
bool vsxd__str_eq(const char *a, const char *b);

/* Replace *@dst with a copy of @val (@len bytes, NUL-terminated copy);
 * 0 or -ENOMEM (*@dst unchanged). */
int vsxd__set_str(char **dst, const char *val, size_t len);

/* A new zeroed VM at the end of @cfg->vms, or NULL. */
struct vsxd_vm *vsxd__config_add_vm(struct vsxd_config *cfg);
/* A new zeroed forward at the end of @cfg->fwds, or NULL. */
struct vsxd_forward *vsxd__config_add_fwd(struct vsxd_config *cfg);

/* Whether @buf (@len bytes) is a YAML file rather than vsxd.conf: its first
 * line that is not blank or a '#' comment is "---", a %directive, '{' or
 * "KEY:" at the start of the line. */
bool vsxd__config_is_yaml(const char *buf, size_t len);
/* vsxd_config_parse for vhost-device-vsock's YAML file (conffile_yaml.c). */
int vsxd__config_parse_yaml(const char *buf, size_t len, const char *fname,
			    struct vsxd_config *cfg, struct vsxd_err *err);

#endif /* VSXD_CONFIG_INT_H */
