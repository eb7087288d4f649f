/*
 * libvsx — one stream-socket API across vsock transports.
 *
 * virtio-vsock (KVM/QEMU guests, vhost-vsock hosts, loopback), hybrid vsock
 * over Unix sockets (Firecracker, Cloud Hypervisor, vhost-device-vsock,
 * vsxd) and, later, Hyper-V hv_sock, behind one opaque socket type.
 *
 * Conventions, for every call in this header:
 *  - the return value is 0 (or a byte count) on success and a negative errno
 *    on failure; nothing prints, nothing aborts;
 *  - vsx_strerror() turns a returned error into a message; right after a
 *    failed call it names the detail of that failure (which field of an
 *    address was wrong, which transport refused and why);
 *  - pointers passed in are borrowed for the duration of the call only;
 *    a vsx_sock returned through an out-parameter belongs to the caller and
 *    is released with vsx_close().
 *
 * A vsx_sock is not thread-safe: one thread at a time per socket.
 * Bump VSX_VERSION_* with the library; the ABI is versioned by libtool.
 */
#ifndef VSX_VSX_H
#define VSX_VSX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VSX_EXPORT __attribute__((visibility("default")))

/* ---- Addresses ---------------------------------------------------------- */

#define VSX_CID_LOCAL 1u          /* vsock loopback */
#define VSX_CID_HOST 2u           /* the host, seen from a guest */
#define VSX_CID_ANY 0xFFFFFFFFu   /* bind to any CID / "any" */
#define VSX_PORT_ANY 0xFFFFFFFFu  /* let the kernel pick a port */

/* Longest Unix socket path, including its NUL (sizeof sun_path). */
#define VSX_PATH_MAX 108
/* Longest VM name accepted in vm:NAME:PORT, including its NUL. */
#define VSX_NAME_MAX 64
/* Buffer size that always holds vsx_addr_format() output. */
#define VSX_ADDR_STRLEN (VSX_PATH_MAX + 32)

enum vsx_addr_kind {
	VSX_ADDR_VSOCK = 1,  /* vsock:CID:PORT         kernel AF_VSOCK */
	VSX_ADDR_HVSOCK = 2, /* hvsock:SERVICE-GUID    Hyper-V service id */
	VSX_ADDR_UNIX = 3,   /* unix:PATH:PORT         hybrid vsock */
	VSX_ADDR_VM = 4,     /* vm:NAME:PORT           a VM of the local vsxd */
};

struct vsx_addr {
	int kind;               /* enum vsx_addr_kind */
	uint32_t cid;           /* VSX_ADDR_VSOCK */
	uint32_t port;          /* every kind; for hvsock, the GUID's first field */
	uint8_t guid[16];       /* VSX_ADDR_HVSOCK, in RFC 4122 byte order */
	char path[VSX_PATH_MAX]; /* VSX_ADDR_UNIX path, VSX_ADDR_VM name */
};

/*
 * Parse "vsock:CID:PORT", "hvsock:GUID", "unix:PATH:PORT" or "vm:NAME:PORT".
 * CID is a decimal number or host, local, any; PORT is decimal (0..2^32-1,
 * "any" for VSX_PORT_ANY). A GUID may be braced and in any case. PATH may
 * itself contain ':'; the last ':' separates the port.
 * Returns 0, or -EINVAL for anything else (vsx_strerror says what).
 */
VSX_EXPORT int vsx_addr_parse(const char *text, struct vsx_addr *out);

/*
 * Write the canonical text of @a into @buf (@len bytes, NUL-terminated).
 * Returns the length written (without the NUL), -EINVAL for a bad address,
 * -ENOSPC when @len is too small (VSX_ADDR_STRLEN always suffices).
 */
VSX_EXPORT int vsx_addr_format(const struct vsx_addr *a, char *buf, size_t len);

/* ---- Options ------------------------------------------------------------ */

#define VSX_O_NONBLOCK 0x1    /* sends and receives never block */
#define VSX_O_SEQPACKET 0x2   /* SOCK_SEQPACKET where the transport has it */

#define VSX_DEFAULT_CONNECT_TIMEOUT_MS 2000
#define VSX_DEFAULT_LINGER_MS 8000

/*
 * Options for vsx_connect() and vsx_listen(). All-zero means defaults: a
 * blocking stream socket, 2 s connect timeout, 8 s linger, transport chosen
 * from the address and the machine. The struct is copied; nothing in it is
 * kept after the call.
 */
struct vsx_opts {
	int flags;                  /* VSX_O_* */
	int connect_timeout_ms;     /* 0: default; <0: -EINVAL */
	int linger_ms;              /* 0: default; <0: vsx_close() does not wait */
	int backlog;                /* vsx_listen(); 0: default (128) */
	size_t rx_buffer;           /* 0: transport default; else as vsx_set_buffer */
	size_t tx_buffer;           /* applied before connect/listen */
	const char *transport;      /* NULL: automatic; else a transport name */
	const char *control_path;   /* vm: addresses; NULL: VSX_CONTROL_PATH */
	uintptr_t reserved[8];      /* must be zero */
};

/* Default vsxd control socket (overridden by $VSXD_CONTROL). */
#define VSX_CONTROL_PATH "/run/vsxd/control"

/* ---- Connections -------------------------------------------------------- */

typedef struct vsx_sock vsx_sock;

/*
 * Connect to @addr. On success *@out is a connected socket owned by the
 * caller (release with vsx_close()). Connecting takes at most the connect
 * timeout; the errors are -ETIMEDOUT, -ECONNREFUSED (nobody listens, or the
 * peer refused: a vsock RST maps here on every transport), -ENETUNREACH,
 * -ENODEV (no transport for this address on this machine), -EINVAL, -ENOMEM.
 */
VSX_EXPORT int vsx_connect(const char *addr, const struct vsx_opts *opts,
			   vsx_sock **out);

/*
 * Listen on @addr ("vsock:any:PORT", "unix:PATH:PORT" binds PATH_PORT, the
 * hybrid convention for host-side listeners). *@out is owned by the caller.
 */
VSX_EXPORT int vsx_listen(const char *addr, const struct vsx_opts *opts,
			  vsx_sock **out);

/*
 * Accept one connection. Blocks unless the listener is non-blocking, in
 * which case -EAGAIN means none is pending. The new socket inherits the
 * listener's options and buffer settings and is owned by the caller.
 */
VSX_EXPORT int vsx_accept(vsx_sock *listener, vsx_sock **out);

/*
 * Send @len bytes. Loops until everything is written, the socket would
 * block (non-blocking sockets: returns what was written, or -EAGAIN when
 * nothing was), or an error occurs (returns what was written if anything
 * was, else the error). Never raises SIGPIPE: a closed peer is -EPIPE.
 */
VSX_EXPORT ssize_t vsx_send(vsx_sock *s, const void *buf, size_t len);

/* Receive up to @len bytes. 0 means the peer shut down its sending side. */
VSX_EXPORT ssize_t vsx_recv(vsx_sock *s, void *buf, size_t len);

/* Shut down one or both directions: SHUT_RD, SHUT_WR or SHUT_RDWR. */
VSX_EXPORT int vsx_shutdown(vsx_sock *s, int how);

/*
 * Bounded graceful close, and release of @s in every case: shut down
 * sending, wait for the peer to finish (its EOF) for at most the linger
 * time, discarding what it still sends, then release the socket. If the
 * peer did not finish in time the connection is reset (on kernel vsock the
 * kernel sends the RST; see libvsx(3)). Returns 0 when the peer finished,
 * -ETIMEDOUT when the linger time ran out; @s is freed either way.
 * vsx_close(NULL) returns 0.
 */
VSX_EXPORT int vsx_close(vsx_sock *s);

/*
 * The socket's file descriptor, for poll/epoll/libevent: readable when
 * vsx_recv() or vsx_accept() has something, writable when vsx_send() can
 * move bytes. Owned by @s: do not close it, do not read from it directly.
 */
VSX_EXPORT int vsx_fd(const vsx_sock *s);

/* ---- The buffer knob ---------------------------------------------------- */

#define VSX_RX 0x1
#define VSX_TX 0x2

/*
 * Set the receive and/or transmit buffer (@which: VSX_RX, VSX_TX or both)
 * the way the transport needs it (see libvsx(3) for the table): on kernel
 * virtio-vsock, RX is the credit advertised to the peer (buf_alloc). Returns
 * 0, -EINVAL (zero or unrepresentable size), -EOPNOTSUPP when the transport
 * has no such buffer, or a transport error.
 */
VSX_EXPORT int vsx_set_buffer(vsx_sock *s, int which, size_t bytes);

/*
 * Read back what is really in force for @which (exactly one of VSX_RX or
 * VSX_TX) into *@bytes.
 */
VSX_EXPORT int vsx_get_buffer(const vsx_sock *s, int which, size_t *bytes);

/* ---- Inspection --------------------------------------------------------- */

enum vsx_state {
	VSX_STATE_NONE = 0,
	VSX_STATE_LISTENING,
	VSX_STATE_CONNECTING,
	VSX_STATE_CONNECTED,
	VSX_STATE_CLOSING, /* a side has shut down; see shut_* */
	VSX_STATE_CLOSED,
};

#define VSX_INFO_CREDIT 0x1 /* the credit fields are valid */

struct vsx_info {
	char transport[16];            /* "virtio", "hybrid", "vmbus", ... */
	char local[VSX_ADDR_STRLEN];   /* canonical address text, or "" */
	char peer[VSX_ADDR_STRLEN];
	int type;                      /* SOCK_STREAM or SOCK_SEQPACKET */
	int state;                     /* enum vsx_state */
	int shut_local;                /* SHUT_* bits we shut down (1 rd, 2 wr) */
	uint64_t bytes_sent;           /* through this vsx_sock */
	uint64_t bytes_received;
	size_t rx_buffer;              /* as vsx_get_buffer(); 0 when unknown */
	size_t tx_buffer;
	unsigned flags;                /* VSX_INFO_* */
	uint32_t buf_alloc;            /* credit state, when VSX_INFO_CREDIT */
	uint32_t fwd_cnt;
	uint32_t peer_buf_alloc;
	uint32_t peer_fwd_cnt;
	uint32_t tx_free;              /* what we may still send */
	uint32_t rx_free;              /* what the peer may still send */
};

VSX_EXPORT int vsx_info(const vsx_sock *s, struct vsx_info *out);

/* ---- Probing ------------------------------------------------------------ */

#define VSX_HAVE_VIRTIO_GUEST 0x01 /* a virtio-vsock device (virtio id 19) */
#define VSX_HAVE_VHOST_HOST 0x02   /* /dev/vhost-vsock: a vhost-vsock host */
#define VSX_HAVE_LOOPBACK 0x04     /* the vsock_loopback transport */
#define VSX_HAVE_VMBUS 0x08        /* VMBus: a Hyper-V (or WSL2) guest */
#define VSX_HAVE_AF_VSOCK 0x10     /* the kernel's vsock core is loaded */

struct vsx_probe {
	unsigned have;        /* VSX_HAVE_* */
	uint32_t local_cid;   /* VSX_CID_ANY when it cannot be known */
	char transport[16];   /* what vsx_connect() picks for vsock: addresses */
};

/*
 * Which vsock transports this machine has. Reads sysfs (and, in a guest
 * with a transport, asks /dev/vsock for the local CID). $VSX_SYSROOT, when
 * set, is prefixed to every path read, so tests can use a fake tree.
 */
VSX_EXPORT int vsx_probe(struct vsx_probe *out);

/* ---- Errors and version ------------------------------------------------- */

/*
 * A message for @err (a negative errno returned by libvsx). If the calling
 * thread's last failing libvsx call returned @err, the message carries that
 * failure's detail. The string is valid until the thread's next libvsx call.
 */
VSX_EXPORT const char *vsx_strerror(int err);

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
VSX_EXPORT const char *vsx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* VSX_VSX_H */
