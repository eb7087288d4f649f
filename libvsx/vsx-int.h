/*
 * libvsx internals: the socket object and the transport interface.
 *
 * Symbols here carry the double prefix vsx__ and are hidden from the shared
 * library's ABI (-fvisibility=hidden; only VSX_EXPORT is exported).
 */
#ifndef VSX_INT_H
#define VSX_INT_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>

#include <vsx/vsx.h>

#include "util.h"

struct vsx_transport;

struct vsx_sock {
	const struct vsx_transport *t;
	void *trans;              /* owned by t: created in connect/listen/accept,
				     freed in destruct */
	int fd;                   /* pollable descriptor, owned by the socket */
	int type;                 /* SOCK_STREAM / SOCK_SEQPACKET */
	int state;                /* enum vsx_state */
	unsigned shut_local;      /* VSX_SHUT_RD | VSX_SHUT_WR done by us */
	int peer_eof;             /* a recv returned 0 */
	unsigned flags;           /* VSX_O_* */
	int connect_timeout_ms;
	int linger_ms;            /* <0: do not wait in vsx_close */
	int backlog;
	size_t rx_buffer, tx_buffer; /* as asked in opts (0: default) */
	struct vsx_addr local;
	struct vsx_addr peer;
	uint64_t bytes_sent;
	uint64_t bytes_received;
	struct vsx__auth *auth;   /* pre-shared key, owned by auth.c (auth.h);
				     NULL: none, or no longer needed */
	unsigned info_flags;      /* VSX_INFO_* the core reports (VSX_INFO_AUTH) */
};

/*
 * A transport: a static const table registered in registry.c. Hooks marked
 * optional may be NULL; the core then works on s->fd directly.
 *
 * Ops return 0/a count or a negative errno, and report details with
 * vsx__err(). They never free @s; the core calls destruct exactly once for
 * every socket whose connect/listen/accept hook was called, whatever it
 * returned.
 */
struct vsx_transport {
	const char *name;
	unsigned addr_kinds;  /* 1u << enum vsx_addr_kind it serves */

	/* Connections */
	int (*connect)(vsx_sock *s, const struct vsx_addr *a,
		       const struct vsx_opts *o);
	int (*listen)(vsx_sock *s, const struct vsx_addr *a,
		      const struct vsx_opts *o);
	int (*accept)(vsx_sock *listener, vsx_sock *s);
	void (*destruct)(vsx_sock *s);                        /* optional */

	/* STREAM: one step each; the core loops and counts. */
	ssize_t (*send)(vsx_sock *s, const void *buf, size_t len); /* optional */
	ssize_t (*recv)(vsx_sock *s, void *buf, size_t len);       /* optional */
	int (*shutdown)(vsx_sock *s, int how);                     /* optional */

	/* The buffer knob */
	int (*set_buffer)(vsx_sock *s, int which, size_t bytes);   /* optional */
	int (*get_buffer)(const vsx_sock *s, int which, size_t *bytes); /* optional */

	/* Inspection: fill what the core cannot know (credit). optional */
	int (*info)(const vsx_sock *s, struct vsx_info *out);
};

/* registry.c */
const struct vsx_transport *vsx__transport_by_name(const char *name);
const struct vsx_transport *vsx__transport_for(const struct vsx_addr *a,
					       const char *name);

/* error.c: record the detail of a failure; returns @err (negative errno). */
int vsx__err(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* vsx__err(-errno, "@what: strerror(errno)"), errno read first. */
int vsx__errno(const char *what);
void vsx__err_clear(void);

extern const struct vsx_transport vsx__virtio_kernel;
extern const struct vsx_transport vsx__hybrid;
extern const struct vsx_transport vsx__vm;
extern const struct vsx_transport vsx__vmbus;

/* libvsx/guid.c: @guid is of the hv_sock service template. */
int vsx__guid_is_service(const uint8_t guid[16]);

#endif /* VSX_INT_H */
