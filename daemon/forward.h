/*
 * vsxd forwards: a listening endpoint whose connections are relayed to a
 * connecting endpoint, in both directions (vsxd(8), FORWARDS).
 *
 * Two halves. The spec part (fwdspec.c, linked into libvsxdconfig with the
 * other settings parsers) is pure: it parses "listen=ADDR,connect=ADDR
 * [,allow=CIDS][,auth=psk:PATH][,name=NAME]" and [forward NAME] keys into
 * struct vsxd_forward, writing one message into a struct vsxd_err on
 * failure, and touches nothing else. The run-time part (forward.c, with
 * the relay data path in relay.c and the relays that go on across a
 * handoff in relay_keep.c; all in libvsxd) runs forwards on vsxd's
 * libevent loop over the backend's router.
 *
 * Ownership: every char * in these structs is heap memory owned by the
 * struct that holds it (vsxd_fwd_free releases it).
 */
#ifndef VSXD_FORWARD_H
#define VSXD_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* ---- Specs (fwdspec.c: pure) ---- */

enum vsxd_ep_kind {
	VSXD_EP_TCP = 1,     /* tcp:HOST:PORT */
	VSXD_EP_UNIX,        /* unix:PATH, a plain Unix stream socket */
	VSXD_EP_HYBRID,      /* unix:PATH:PORT or hybrid:PATH:PORT (libvsx) */
	VSXD_EP_VSOCK,       /* vsock:CID:PORT (libvsx, kernel AF_VSOCK) */
	VSXD_EP_HVSOCK,      /* hvsock:GUID (libvsx, Hyper-V) */
	VSXD_EP_VM,          /* vm:NAME:PORT, a VM of this vsxd (the engine) */
};

struct vsxd_endpoint {
	int kind;            /* enum vsxd_ep_kind; 0: not set */
	char *text;          /* as given, canonical enough for messages */
	char *host;          /* TCP host (no brackets), Unix or hybrid path, VM name */
	uint32_t port;       /* TCP, hybrid, vsock and vm ports */
	uint32_t cid;        /* vsock: 0xFFFFFFFF for any */
	char *lib;           /* the libvsx address (HYBRID, VSOCK, HVSOCK) */
};

/* Bits of struct vsxd_forward.set */
enum {
	VSXD_FWD_LISTEN = 1u << 0,
	VSXD_FWD_CONNECT = 1u << 1,
	VSXD_FWD_ALLOW = 1u << 2,
	VSXD_FWD_AUTH = 1u << 3,
	VSXD_FWD_NAME = 1u << 4,
};

#define VSXD_FWD_ALLOW_MAX 256

struct vsxd_forward {
	char *name;                   /* given, or the listen address (cut);
					 at most VSXD_NAME_MAX bytes (config.h) */
	struct vsxd_endpoint listen;
	struct vsxd_endpoint connect;
	uint32_t *allow;              /* n_allow peer CIDs; none: everyone */
	size_t n_allow;
	char *auth_key;               /* auth=psk:PATH: the key file; NULL: none */
	char *origin;                 /* "--forward #2", "FILE:LINE" */
	unsigned set;                 /* VSXD_FWD_* */
};

/* Parse one address (@len bytes, any bytes) into @ep (freed first). */
int vsxd_endpoint_parse(const char *s, size_t len, struct vsxd_endpoint *ep,
			struct vsxd_err *err);
/* The metrics endpoint (vsxd(8), METRICS): a tcp:HOST:PORT address, in
 * @ep when @ep is not NULL (freed first; free it with vsxd_endpoint_free
 * either way). -EINVAL with @err naming @what ("--metrics", "metrics"). */
int vsxd_metrics_check(const char *s, size_t len, const char *what,
		       struct vsxd_endpoint *ep, struct vsxd_err *err);
void vsxd_endpoint_free(struct vsxd_endpoint *ep);
/* Set key @key (listen, connect, allow, auth, name) of @f. -EINVAL with
 * @err ("unknown key 'x' ..."), -ENOMEM. */
int vsxd_fwd_set(struct vsxd_forward *f, const char *key, size_t keylen,
		 const char *val, size_t vallen, struct vsxd_err *err);
/* Check that @f is whole and makes sense; names it when it has no name. */
int vsxd_fwd_finish(struct vsxd_forward *f, struct vsxd_err *err);
/* "listen=...,connect=...[,...]" into @f (zeroed first), finished. Free
 * @f with vsxd_fwd_free either way. */
int vsxd_fwd_parse(const char *spec, struct vsxd_forward *f, struct vsxd_err *err);
void vsxd_fwd_free(struct vsxd_forward *f);
int vsxd_fwd_copy(struct vsxd_forward *dst, const struct vsxd_forward *src);
/* Same forward: every setting equal (origin aside). */
bool vsxd_fwd_same(const struct vsxd_forward *a, const struct vsxd_forward *b);
/* An endpoint that libvsx connects or listens on (hybrid, vsock, hvsock):
 * the kinds that can carry auth=. */
bool vsxd_ep_is_lib(int kind);
/* Forwards of @cfg: names and listen addresses unique. */
int vsxd_fwd_check(const struct vsxd_config *cfg, struct vsxd_err *err);

/* ---- Run time (forward.c, relay.c) ---- */

struct event_base;
struct vsxb_router;
struct vsxd_fwds;

typedef vsxb_log_fn vsxd_fwd_log_fn;   /* called with a NULL arg */

/* The set of running forwards. @base and @r must outlive it. */
int vsxd_fwds_new(struct event_base *base, struct vsxb_router *r, vsxd_fwd_log_fn log,
		  struct vsxd_fwds **out);
/* Stop every forward (listeners closed, connections closed). */
void vsxd_fwds_free(struct vsxd_fwds *fs);

/*
 * Make the running forwards those of @cfg: forwards equal to a running one
 * keep their listener and connections, others stop (their connections are
 * closed), new ones start. With @strict (start-up), the first forward that
 * cannot start stops the call: its error is returned with a message in
 * @err, and nothing of @cfg runs. Otherwise failures are logged and the
 * others run; returns how many failed.
 */
int vsxd_fwds_apply(struct vsxd_fwds *fs, const struct vsxd_config *cfg, bool strict,
		    struct vsxd_err *err);

/* A relayed connection, for the control socket. Strings valid during the
 * callback. Bytes: "to_client" went to the peer that connected to the
 * listening side, "from_client" came from it. */
struct vsxd_relay_info {
	uint64_t id;
	const char *forward;
	const char *client;          /* the accepted peer's address */
	const char *target;          /* the connect address */
	const char *state;           /* "connecting", "established", "closing" */
	uint64_t to_client, from_client;
	size_t queued_to_client, queued_from_client;
	bool auth;                   /* the libvsx side was authenticated */
};

typedef int (*vsxd_relay_cb)(const struct vsxd_relay_info *ri, void *arg);

/* Each relayed connection, oldest first; a non-zero return stops. */
int vsxd_fwds_foreach(struct vsxd_fwds *fs, vsxd_relay_cb cb, void *arg);
/* Close (both sockets, at once) relayed connection @id: 0 or -ENOENT. */
int vsxd_fwds_close(struct vsxd_fwds *fs, uint64_t id);

struct vsxd_fwd_stats {
	unsigned forwards;           /* running */
	unsigned relays;             /* live relayed connections */
	uint64_t accepted;           /* connections accepted on listen sides */
	uint64_t denied;             /* refused by allow= */
	uint64_t failed;             /* the connect side failed */
	uint64_t auth_failures;      /* handshakes that failed */
};

void vsxd_fwds_stats(const struct vsxd_fwds *fs, struct vsxd_fwd_stats *out);
/* Add @add's totals (accepted, denied, failed, auth_failures) to @fs's:
 * what an earlier process counted (a handoff, a restart). On vsxd's loop. */
void vsxd_fwds_add_stats(struct vsxd_fwds *fs, const struct vsxd_fwd_stats *add);

/* ---- Relays across a handoff or a restart (relay_keep.c) ---- */

struct vsxd_relays_in;

/* Pass descriptor @fd (still the caller's) on under @name: 0 or a
 * negative errno. */
typedef int (*vsxd_fd_put_fn)(void *arg, const char *name, int fd);
/* The descriptor passed under @name, now the caller's; -1: none. */
typedef int (*vsxd_fd_take_fn)(void *arg, const char *name);

/*
 * vsxd's loop stopped for good (a handoff, SIGTERM under a store): each
 * relay established now into a relays record (state.h), returned as a
 * memfd, its two sockets passed through @put as relay.ID.0 and
 * relay.ID.1 (they stay @fs's); *@kept counts those, *@ended the relays
 * that end (still connecting, a side that cannot go on). -ENOENT: no
 * relay; another negative errno: no record (every relay ends).
 */
int vsxd_fwds_save(struct vsxd_fwds *fs, vsxd_fd_put_fn put, void *arg, unsigned *kept,
		   unsigned *ended);

/* The new process, before any VM runs: the relays record passed as @fd
 * (closed here; -1: none) and each relay's sockets, taken through @take.
 * NULL: none, or a record that cannot be read (logged: they end). */
struct vsxd_relays_in *vsxd_relays_in_take(int fd, vsxd_fd_take_fn take, void *arg,
					   vsxd_fwd_log_fn log);
/* The highest relay id of @in (0: none): new connection ids go past it. */
uint64_t vsxd_relays_in_max_id(const struct vsxd_relays_in *in);
/* The forwards run: each relay of @in goes on in its forward, found by
 * name, with its id and the bytes it held; one that cannot ends with a
 * log line. *@kept and *@ended (the earlier process's included) count
 * them. Frees @in. On vsxd's loop. */
void vsxd_fwds_adopt(struct vsxd_fwds *fs, struct vsxd_relays_in *in, unsigned *kept,
		     unsigned *ended);
/* @in not adopted (start-up failed): its sockets closed, freed. */
void vsxd_relays_in_free(struct vsxd_relays_in *in);

#endif /* VSXD_FORWARD_H */
