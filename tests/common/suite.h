/*
 * The transport-independent libvsx suite: the same cases, from this one
 * source, over every transport.
 *
 * A transport brings an environment (struct vsx_suite_env): how to give the
 * socket under test a peer, and what that transport promises where
 * transports legitimately differ (which error an unserved address gives,
 * what the buffer knob reads back). The peer is a plain stream fd the suite
 * reads and writes itself: the host end of the hv_sock simulator for vmbus
 * (tests/vmbus/test_vmbus_suite.c), a raw kernel AF_VSOCK socket in the lab
 * guest for virtio (suite-virtio.c, run only inside QEMU).
 *
 * Cases return 0 or -1 and print why they failed on stderr. No criterion:
 * the guest has no test framework, and the criterion test wraps each case.
 */
#ifndef VSX_TESTS_SUITE_H
#define VSX_TESTS_SUITE_H

#include <stddef.h>
#include <stdint.h>

#include <vsx/vsx.h>

enum vsx_suite_role {
	VSX_SUITE_CLIENT = 1,   /* made by vsx_connect() */
	VSX_SUITE_ACCEPTED,     /* made by vsx_accept() */
	VSX_SUITE_LISTENER,     /* made by vsx_listen() */
};

struct vsx_suite_env {
	const char *name;         /* printed with failures */
	const char *transport;    /* vsx_opts.transport (NULL: automatic) */
	const char *expect_name;  /* what vsx_info() must report */
	void *ctx;

	/* A peer service the socket under test connects to: fills @addr with
	 * the address text, returns a handle >= 0 or -errno. */
	int (*serve)(void *ctx, char *addr, size_t len);
	/* The next connection to service @h: a stream fd the suite owns. */
	int (*serve_accept)(void *ctx, int h, int timeout_ms);
	/* Address text for vsx_listen() (a fresh port each call). */
	int (*listen_addr)(void *ctx, char *addr, size_t len);
	/* Connect the peer to the listener under test on @port: an fd. */
	int (*dial)(void *ctx, uint32_t port);
	/* An address nobody serves. */
	int (*unserved)(void *ctx, char *addr, size_t len);

	/* What the transport promises. */
	int unserved_err;          /* -ECONNREFUSED, -ETIMEDOUT, or 0 for either */
	int set_connected_err;     /* vsx_set_buffer on a connected socket */
	int one_buffer;            /* RX and TX are one size: ask both alike */
	/* vsx_get_buffer(@which) for @role after asking @rx and @tx (0: not
	 * asked); 0 and *out, or the error the call must return. */
	int (*expect_buffer)(void *ctx, int role, int which, size_t rx, size_t tx,
			     size_t *out);
	int close_settle_ms;       /* how long the peer may wait, after a
				      vsx_close that timed out, to see the end */
};

struct vsx_suite_case {
	const char *name;
	int (*run)(const struct vsx_suite_env *env);
};

/* Every case, NULL-terminated. */
extern const struct vsx_suite_case vsx_suite_cases[];

/* Run one case by name: 0, -1 (failed), or -2 (no such case). */
int vsx_suite_run_case(const struct vsx_suite_env *env, const char *name);

/* Run every case, printing "ok - NAME" / "not ok - NAME" lines; returns the
 * number of failures. */
int vsx_suite_run_all(const struct vsx_suite_env *env);

#endif /* VSX_TESTS_SUITE_H */
