/*
 * The vsxd control protocol: one header for the daemon, vsxctl and libvsx.
 * Bump VSX_CTL_VERSION when anything here changes meaning.
 *
 * Transport: a Unix stream socket (default VSX_CONTROL_PATH, mode 0600);
 * vsxd checks the client's uid with SO_PEERCRED before it reads anything.
 *
 * A request is a block of "key=value" lines ended by an empty line:
 *
 *     vsx-control=1          the version, always first
 *     cmd=list               the command
 *     vm=web                 arguments
 *     (empty line)
 *
 * A reply is a block of the same form whose last line before the empty one
 * is "errno=N" (0 = success; else a positive errno value), preceded by
 * "error=TEXT" when N is not 0. Records in a reply start with their key
 * ("conn=ID", "vm=NAME") and run until the next record's key.
 *
 * Keys are [a-z0-9_-]{1,32}; values are printable ASCII without newline,
 * at most VSX_CTL_VALUE_MAX bytes. A request has at most VSX_CTL_MAX_LINES
 * lines and VSX_CTL_REQ_MAX bytes; anything else is refused with EINVAL
 * (E2BIG when too large) and the connection stays usable unless the framing
 * itself is lost. Several requests may be sent on one connection in turn.
 */
#ifndef VSX_CTL_PROTO_H
#define VSX_CTL_PROTO_H

#include <stddef.h>

#define VSX_CTL_VERSION 1
#define VSX_CTL_MAGIC "vsx-control"
#define VSX_CTL_REQ_MAX 4096
#define VSX_CTL_REPLY_MAX (16u << 20)
#define VSX_CTL_MAX_LINES 64
#define VSX_CTL_KEY_MAX 32
#define VSX_CTL_VALUE_MAX 1024

/* Commands (cmd=) */
#define VSX_CTL_STATUS "status"         /* -> version, uptime, vms, conns */
#define VSX_CTL_LIST "list"             /* [vm=NAME] -> conn=ID records: the
					   engine's, then (without vm=NAME)
					   those vsxd forwards relay */
#define VSX_CTL_SHOW "show"             /* id=ID -> one conn record */
#define VSX_CTL_SET_BUFFER "set-buffer" /* id=ID | vm=NAME [host-port=P], rx=BYTES */
#define VSX_CTL_CLOSE "close"           /* id=ID [reset=1] */
#define VSX_CTL_RESOLVE "resolve"       /* vm=NAME -> uds-path=, cid= */
#define VSX_CTL_VMS "vms"               /* -> vm=NAME records */

struct vsx_kv {
	const char *key;
	const char *value;
};

/*
 * Parsed pairs. A request never has more than VSX_CTL_MAX_LINES lines and
 * fits @small; a reply (one record per connection) has no line bound but
 * its byte bound, and grows @kv on the heap: release it with
 * vsx__ctl_kvs_free. Do not copy the struct (@kv may point into it).
 */
struct vsx_kvs {
	unsigned n;
	unsigned cap;              /* entries at @kv */
	struct vsx_kv *kv;         /* @small, or heap (replies only) */
	struct vsx_kv small[VSX_CTL_MAX_LINES];
};

/*
 * Split the request block @buf (@len bytes, not including the terminating
 * empty line) in place into key/value pairs. Returns 0, -EINVAL for a
 * malformed line (bad key, no '=', control characters, too long), -E2BIG
 * for more than VSX_CTL_MAX_LINES lines. The pairs point into @buf; nothing
 * to free.
 */
int vsx__ctl_parse(char *buf, size_t len, struct vsx_kvs *out);

/*
 * The same for a reply block: any number of lines (-ENOMEM if memory runs
 * out). Call vsx__ctl_kvs_free afterwards, whatever the result.
 */
int vsx__ctl_parse_reply(char *buf, size_t len, struct vsx_kvs *out);
void vsx__ctl_kvs_free(struct vsx_kvs *kvs);

/* The value of the first @key, or NULL. */
const char *vsx__ctl_get(const struct vsx_kvs *kvs, const char *key);

/* Find the end of a block in @buf: the offset just past "\n\n", or 0 if
 * none is complete yet. */
size_t vsx__ctl_block_end(const char *buf, size_t len);


/*
 * Client: send @request (a complete block, version line included) to the
 * control socket @path and wait up to @timeout_ms for the reply block.
 * Returns 0 with *@reply (malloc'ed, NUL-terminated, freed by the caller)
 * and the remote errno in *@remote_errno, or a negative errno for a local
 * failure (-ECONNREFUSED/-ENOENT: no vsxd; -ETIMEDOUT; -EPROTO).
 */
int vsx__ctl_call(const char *path, const char *request, int timeout_ms,
		  char **reply, int *remote_errno);

#endif
