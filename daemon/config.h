/*
 * vsxd's settings: the command line, the --vm KEY=VALUE lists and the
 * --config file, vsxd.conf(5) or vhost-device-vsock's YAML. The model
 * (values, VMs, the configuration: defaults, checks, merge, free) is
 * settings.c; the file parsers conffile.c and conffile_yaml.c; the
 * command line cmdline.c (config-int.h: what they share).
 *
 * Everything here is pure: parsers read a buffer or an argv, fill a struct,
 * and on failure write one message into a struct vsxd_err and return a
 * negative errno. Nothing prints, exits or touches global state (the file
 * parser can be fuzzed as is: vsxd_config_parse over any bytes).
 *
 * Ownership: every char * inside these structs is heap memory owned by the
 * struct that holds it; vsxd_config_free / vsxd_vm_free release it.
 */
#ifndef VSXD_CONFIG_H
#define VSXD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vsx/vsx.h>

#include "backend/backend.h"
#include "util.h"

#define VSXD_ERR_LEN 512

/* One error message, without the "vsxd: " prefix. */
struct vsxd_err {
	char msg[VSXD_ERR_LEN];
};

/* Write one message into @err (cut with "..." when too long); returns
 * -EINVAL, so a parser can `return vsxd_err_set(err, ...)`. @err may be
 * NULL. */
__attribute__((format(printf, 2, 3)))
int vsxd_err_set(struct vsxd_err *err, const char *fmt, ...);

#define VSXD_QUOTE_MAX 48                       /* input bytes shown */
#define VSXD_QBUF (VSXD_QUOTE_MAX * 4 + 8)      /* room vsxd_quote needs */

/* @s (@len bytes, any bytes) as printable text for a message: control and
 * non-ASCII bytes, quote and backslash as \xNN, at most VSXD_QUOTE_MAX
 * input bytes then "...". Returns @buf (VSXD_QBUF bytes). */
const char *vsxd_quote(char *buf, const char *s, size_t len);

#define VSXD_CID_MIN 3u
#define VSXD_CID_MAX 0xFFFFFFFEu
#define VSXD_CID_DEFAULT 3u                  /* as vhost-device-vsock */
#define VSXD_QUEUE_SIZE_MAX 32768u           /* the virtio split-ring limit */
/*
 * VM and forward names: at most VSXD_NAME_MAX bytes, the NUL not counted.
 * It is libvsx's public VSX_NAME_MAX (vsx.h, 64, the NUL not counted
 * either), the limit of vm:NAME:PORT (libvsx/addr.c), so every VM vsxd
 * takes can be reached by name; the backend's VSXB_NAME_LEN is 64 bytes
 * and a NUL.
 */
#define VSXD_NAME_MAX VSX_NAME_MAX
#define VSXD_UDS_PATH_MAX 96                 /* "<uds-path>_4294967295" fits sun_path */
#define VSXD_CONFIG_FILE_MAX (1u << 20)      /* vsxd_config_load refuses more */
#define VSXD_ALLOW_UIDS_MAX 64               /* control-allow-uid entries */

/* Bits of struct vsxd_vm.set: which keys were given. */
enum {
	VSXD_VM_CID = 1u << 0,
	VSXD_VM_SOCKET = 1u << 1,
	VSXD_VM_UDS = 1u << 2,
	VSXD_VM_TX = 1u << 3,
	VSXD_VM_QUEUE = 1u << 4,
	VSXD_VM_GROUPS = 1u << 5,
	VSXD_VM_NAME = 1u << 6,
	VSXD_VM_FWD_CID = 1u << 7,
	VSXD_VM_FWD_LISTEN = 1u << 8,
	VSXD_VM_SOCK_MODE = 1u << 9,
	VSXD_VM_SOCK_GROUP = 1u << 10,
};

/*
 * Who may connect to the sockets a VMM or a host program must reach (a
 * VM's vhost-user socket and uds-path listener): socket-mode and
 * socket-group, in [daemon] (every VM), in a [vm] (that VM, winning over
 * [daemon]) and as flags. Unset: mode 0600, vsxd's own group. A group
 * without a mode means 0660. The control socket has its own pair,
 * control-mode and control-group ([daemon] and flags; vsxd_control_perm).
 */
#define VSXD_SOCKET_MODE_DEFAULT 0600u
#define VSXD_SOCKET_MODE_GROUP 0660u         /* with socket-group, no socket-mode */
#define VSXD_CONTROL_MODE_ALLOW 0666u        /* control socket: control-allow-uid
						given, no control-mode (the peer
						check keeps others out) */
#define VSXD_GROUP_NAME_MAX 32               /* as useradd's */

/* Zeroed: nothing set. */
struct vsxd_sock_perm {
	bool mode_set;
	unsigned mode;            /* 0 to 0777, when mode_set */
	char *group;              /* as given (name or number); NULL: none */
	bool gid_known;           /* gid is resolved (vsxd_config_resolve) */
	uint32_t gid;
};

#define VSXD_FWD_LISTEN_MAX 64               /* forward-listen ports */

/* One VM as configured (see struct vsxb_vm_config in backend.h). */
struct vsxd_vm {
	char *name;               /* NULL: the backend's default, "cid<N>" */
	uint64_t guest_cid;       /* VSXD_CID_DEFAULT when not given */
	char *socket_path;
	char *uds_path;           /* NULL with forward-cid */
	uint32_t forward_cid;     /* vsock-to-vsock forwarding (forward-cid, */
	uint32_t *forward_listen; /* forward-listen: n_forward_listen ports, */
	size_t n_forward_listen;  /* owned; vsock_listen.c) */
	uint32_t tx_buffer_size;  /* 0: the backend's default */
	unsigned queue_size;      /* 0: the backend's default */
	char *groups;             /* "a+b"; NULL: "default" */
	struct vsxd_sock_perm perm; /* socket-mode, socket-group (VSXD_VM_SOCK_*) */
	char *origin;             /* where it came from, for messages:
				     "--vm #2", "FILE:LINE", ... */
	unsigned set;             /* VSXD_VM_* keys given */
};

#define VSXD_UNSET (-1)

enum vsxd_log_target {
	VSXD_LOG_STDERR = 0,
	VSXD_LOG_SYSLOG = 1,
};

/* seccomp ([daemon] seccomp, --seccomp; sandbox.c): what a call outside
 * the allowlist does. */
enum vsxd_seccomp {
	VSXD_SECCOMP_KILL = 0,   /* the default: one log line, then SIGSYS */
	VSXD_SECCOMP_LOG = 1,    /* let through, the kernel logs it */
	VSXD_SECCOMP_OFF = 2,    /* no allowlist */
};

struct vsxd_forward;           /* forward.h */

/* Limits, timeouts and tuning ([daemon] keys and flags of the same names). */
enum vsxd_limit {
	VSXD_LIMIT_MAX_CONNS,          /* max-conns: connections, all VMs */
	VSXD_LIMIT_MAX_CONNS_PER_VM,   /* max-conns-per-vm */
	VSXD_LIMIT_MAX_CONN_MEMORY,    /* max-conn-memory: bytes */
	VSXD_LIMIT_HANDSHAKE_TIMEOUT,  /* handshake-timeout: ms */
	VSXD_LIMIT_CONNECT_TIMEOUT,    /* connect-timeout: ms */
	VSXD_LIMIT_LINGER_TIMEOUT,     /* linger-timeout: ms */
	VSXD_LIMIT_POLL_US,            /* poll-us: µs of event-loop polling, 0: off */
	VSXD_LIMIT_THREADS,            /* threads: worker threads; unset: the CPUs */
	VSXD_LIMIT_N
};

#define VSXD_CONNS_MAX (1u << 20)            /* max-conns, max-conns-per-vm */
/* max-conn-memory: at least the backend's VSXB_MIN_CONN_MEMORY (but 0);
 * timeouts: at most its VSXB_MAX_TIMEOUT_MS; poll-us: at most the loop's
 * VSXU_EVLOOP_POLL_MAX_US (vhost-user/loop-event.h) */
#define VSXD_CONN_MEMORY_MAX (4ull << 30)
#define VSXD_TIMEOUT_MIN_MS 10u
#define VSXD_THREADS_MAX 256u                /* threads: workers (workers.c) */

struct vsxd_config {
	struct vsxd_vm *vms;      /* n_vms entries, owned */
	size_t n_vms;
	struct vsxd_forward *fwds; /* n_fwds entries, owned (forward.h) */
	size_t n_fwds;
	char *control_path;       /* NULL: none given (vsxd uses its default) */
	char *metrics;            /* tcp:HOST:PORT of the metrics endpoint
				     (checked by vsxd_metrics_check); NULL: none */
	uint32_t *control_allow_uids; /* n_control_allow_uids entries, owned:
					 uids besides root and vsxd's own that
					 may use the control socket */
	size_t n_control_allow_uids;
	bool control_allow_set;   /* control-allow-uid given (even empty) */
	int log_target;           /* enum vsxd_log_target, or VSXD_UNSET */
	int log_level;            /* syslog priority (3..7), or VSXD_UNSET */
	struct vsxd_sock_perm perm; /* [daemon] socket-mode, socket-group */
	struct vsxd_sock_perm control_perm; /* control-mode, control-group */
	char *user;               /* user: a name or a uid to drop to, NULL: none */
	int seccomp;              /* enum vsxd_seccomp, or VSXD_UNSET (kill) */
	unsigned control_line;    /* for file configs: lines where the */
	unsigned metrics_line;
	unsigned control_allow_line;
	unsigned log_line;        /* [daemon] keys were set (0: not set) */
	unsigned log_level_line;
	unsigned socket_mode_line;
	unsigned socket_group_line;
	unsigned control_mode_line;
	unsigned control_group_line;
	unsigned user_line;
	unsigned seccomp_line;
	uint64_t limits[VSXD_LIMIT_N];   /* [daemon] limits; meaningful when
					    limit_set (else the default) */
	bool limit_set[VSXD_LIMIT_N];
	unsigned limit_line[VSXD_LIMIT_N];
};

/* The command line. */
struct vsxd_opts {
	struct vsxd_config cfg;   /* --vm's, the single-VM flags, --control,
				     --syslog, -v */
	char *config_file;        /* --config, NULL: none */
	int verbose;              /* how many -v */
	bool check;               /* --check (-t): validate, print, exit; set
				     even when the parse fails */
	bool help;
	bool version;
};

/* ---- Values ---- */

/* Numbers and sizes: vsx__parse_uint and vsx__parse_size (libvsx/util.h). */
/* A list of uids (decimal, 0 to 4294967294) separated by commas and/or
 * blanks, appended to @cfg->control_allow_uids (duplicates dropped), and
 * control_allow_set set. An empty list is allowed (it only sets the flag).
 * -EINVAL with @err ("control-allow-uid 'x' is not a uid"), -ENOMEM. */
int vsxd_parse_uid_list(const char *s, size_t len, struct vsxd_config *cfg,
			struct vsxd_err *err);
/* A duration: a number with an optional unit, ms, s or m (no unit:
 * seconds), in milliseconds. Errors as vsx__parse_uint (-ERANGE above
 * @max_ms). */
int vsxd_parse_duration(const char *s, size_t len, uint64_t max_ms, uint64_t *out);
/* The enum vsxd_limit of a key (either spelling), or -1. */
int vsxd_limit_key(const char *key, size_t keylen);
const char *vsxd_limit_name(int limit);
/* Check @val for limit @limit and store it in @cfg (the caller checks
 * for duplicates). -EINVAL with @err naming the key and the range. */
int vsxd_limit_set(struct vsxd_config *cfg, int limit, const char *val, size_t vallen,
		   struct vsxd_err *err);

/* socket-mode: an octal number, 0 to 0777 (a leading 0 optional). 0 or
 * -EINVAL with @err naming the value. */
int vsxd_parse_socket_mode(const char *key, const char *s, size_t len, unsigned *out,
			   struct vsxd_err *err);
/* socket-group: a group name (letters, digits, '.', '_', '-', not first,
 * at most VSXD_GROUP_NAME_MAX bytes, an optional final '$') or a gid
 * (decimal, 0 to 4294967294). Checks the spelling only:
 * vsxd_config_resolve looks names up. 0 or -EINVAL with @err. */
int vsxd_check_socket_group(const char *key, const char *s, size_t len, struct vsxd_err *err);
/* Store a checked mode / group value in @p (the caller checks for
 * duplicates); -EINVAL with @err, -ENOMEM. @key (socket-mode,
 * control-group, ...) names the setting in the errors of these three
 * and of vsxd_parse_socket_mode. */
int vsxd_perm_set_mode(struct vsxd_sock_perm *p, const char *key, const char *s, size_t len,
		       struct vsxd_err *err);
int vsxd_perm_set_group(struct vsxd_sock_perm *p, const char *key, const char *s, size_t len,
			struct vsxd_err *err);
/*
 * What @vm's sockets get: its own socket-mode and socket-group where set,
 * else @cfg's [daemon] ones, else 0600 and no group (*@has_gid false);
 * a group with no mode means 0660. Groups must be resolved
 * (vsxd_config_resolve).
 */
void vsxd_vm_perm(const struct vsxd_config *cfg, const struct vsxd_vm *vm,
		  unsigned *mode, bool *has_gid, uint32_t *gid);
/*
 * What the control socket gets: control-mode where set, else 0666 when
 * control-allow-uid lists a uid (its peer check is what admits them),
 * else 0660 with control-group, else 0600; the group is control-group
 * (*@has_gid false: vsxd's own). Its members may use the socket as a
 * control-allow-uid may. Groups must be resolved (vsxd_config_resolve).
 */
void vsxd_control_perm(const struct vsxd_config *cfg, unsigned *mode, bool *has_gid,
		       uint32_t *gid);

/* A log priority name (error, warning, notice, info, debug) or -EINVAL. */
int vsxd_parse_log_level(const char *s, size_t len);
const char *vsxd_log_level_name(int level);

/* A seccomp mode name (kill, log, off) or -EINVAL; and back. */
int vsxd_parse_seccomp(const char *s, size_t len);
const char *vsxd_seccomp_name(int mode);

/* user = @v (@len bytes): a user name or a uid, checked for its form
 * (whether it exists is asked when vsxd drops to it: sandbox.c); @key
 * names the setting in the error. */
int vsxd_set_user(struct vsxd_config *cfg, const char *key, const char *v, size_t len,
		  struct vsxd_err *err);

/* ---- VMs ---- */

/*
 * Set @key (either spelling: guest-cid or guest_cid, ...) to @val in @vm.
 * Checks the value (number, range, path length, name characters) and that
 * the key was not given before. -EINVAL with @err filled on any problem;
 * -ENOMEM. Messages name the key: "guest-cid 'x' is not a number".
 */
int vsxd_vm_set(struct vsxd_vm *vm, const char *key, size_t keylen,
		const char *val, size_t vallen, struct vsxd_err *err);
/* Check that a VM has what it needs (socket, and uds-path or forward-cid
 * but not both) and defaults the rest. -EINVAL with @err. */
int vsxd_vm_finish(struct vsxd_vm *vm, struct vsxd_err *err);
/* Parse "guest-cid=3,socket=PATH,uds-path=PATH[,...]" into @vm (zeroed
 * first), finishing it. @vm must be freed with vsxd_vm_free even on
 * error. */
int vsxd_vm_parse(const char *spec, struct vsxd_vm *vm, struct vsxd_err *err);
/* Free what @vm holds (not @vm itself) and zero it. */
void vsxd_vm_free(struct vsxd_vm *vm);
/* Deep copy; -ENOMEM. */
int vsxd_vm_copy(struct vsxd_vm *dst, const struct vsxd_vm *src);
/* The name the backend will use: @vm->name or "cid<N>" written in @buf. */
const char *vsxd_vm_name(const struct vsxd_vm *vm, char *buf, size_t len);
/* Same device: everything equal but tx-buffer-size (which can be changed
 * on a running VM). */
bool vsxd_vm_same_device(const struct vsxd_vm *a, const struct vsxd_vm *b);

/* ---- The configuration ---- */

void vsxd_config_init(struct vsxd_config *cfg);
/* Free what @cfg holds and re-init it. */
void vsxd_config_free(struct vsxd_config *cfg);

/*
 * Parse a --config text of @len bytes (not NUL-terminated; any bytes at
 * all) into @cfg: vhost-device-vsock's YAML when its first line that
 * counts says so (vsxd__config_is_yaml, config-int.h), else vsxd.conf(5).
 * @cfg must be initialised (vsxd_config_init) and is filled even on error
 * (free it either way). @fname only names the file in messages:
 * "FILE:LINE: what". Checks each VM, not uniqueness across VMs
 * (vsxd_config_check does).
 */
int vsxd_config_parse(const char *buf, size_t len, const char *fname,
		      struct vsxd_config *cfg, struct vsxd_err *err);
/* Read @path (at most VSXD_CONFIG_FILE_MAX bytes) and parse it; _fd:
 * read @fd (open on @path, which names it in messages) instead. */
int vsxd_config_load(const char *path, struct vsxd_config *cfg,
		     struct vsxd_err *err);
int vsxd_config_load_fd(int fd, const char *path, struct vsxd_config *cfg,
			struct vsxd_err *err);

/*
 * @out = @file's VMs then @cli's VMs (copied); [daemon] settings from
 * @cli where set, else from @file. @file may be NULL. @out must be
 * initialised; free it either way. -ENOMEM.
 */
int vsxd_config_merge(struct vsxd_config *out, const struct vsxd_config *file,
		      const struct vsxd_config *cli);
/* Whole-config checks: CIDs, names and socket paths unique (a socket
 * path may not be used twice in any role, nor be the control socket).
 * -EINVAL with @err naming both places. */
int vsxd_config_check(const struct vsxd_config *cfg, struct vsxd_err *err);

/*
 * Look up every socket-group name of @cfg ([daemon] and each VM) in the
 * group database (getgrnam_r: /etc/group, or what NSS says); a number is
 * taken as is. Unlike the parsers this reads the system's state, so it is
 * kept apart: vsxd calls it after vsxd_config_check, for --check too.
 * -EINVAL with @err ("socket-group 'x': no such group", naming where it
 * was given), -ENOMEM, or the lookup's error.
 */
int vsxd_config_resolve(struct vsxd_config *cfg, struct vsxd_err *err);

/* ---- The command line ---- */

/*
 * Parse argv (argv[0] is skipped) into @o (zeroed and initialised
 * here; free with vsxd_opts_free either way). Usage errors return
 * -EINVAL with @err filled ("--vm #2: guest-cid 'x' is not a number").
 * --help, --version and --check only set their flags (--check even when
 * another argument is refused, wherever it is).
 */
int vsxd_opts_parse(int argc, char *const argv[], struct vsxd_opts *o,
		    struct vsxd_err *err);
void vsxd_opts_free(struct vsxd_opts *o);

/* The --help text. */
extern const char vsxd_usage[];

#endif /* VSXD_CONFIG_H */
