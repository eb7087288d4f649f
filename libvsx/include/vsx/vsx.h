/*
 * libvsx — one stream-socket API across vsock transports.
 *
 * virtio-vsock (KVM/QEMU guests, vhost-vsock hosts, loopback), hybrid vsock
 * over Unix sockets (Firecracker, Cloud Hypervisor, vhost-device-vsock,
 * vsxd) and Hyper-V hv_sock (Hyper-V and WSL2 guests), behind one opaque
 * socket type. What differs between them, and what libvsx does about it, is
 * in vsx-transports(7).
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
 * The ABI is versioned by libtool; vsx_version() names the release.
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
/*
 * Longest VM name in vm:NAME:PORT, in bytes, the NUL not counted: one
 * limit for libvsx and vsxd, so every name vsxd accepts can be reached.
 */
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

/* ---- Hyper-V service GUIDs ---------------------------------------------- */

/*
 * A Linux guest's hv_sock maps vsock port P to the service GUID whose first
 * field is P in hex and whose rest is the fixed template below: port 2056
 * (0x808) is 00000808-facb-11e6-bd58-64006a7986d3, the GUID a Windows host
 * registers and connects to. Ports are decimal everywhere else. A GUID
 * outside the template carries no port and a Linux guest cannot reach it.
 *
 * GUIDs are 16 bytes in text order (RFC 4122 byte order, as in struct
 * vsx_addr), not the Windows in-memory GUID layout.
 */
#define VSX_HV_SERVICE_TEMPLATE "00000000-facb-11e6-bd58-64006a7986d3"

/*
 * Well-known Hyper-V VM ids: the VmId half of a Windows SOCKADDR_HV (the
 * ServiceId half is the service GUID above). A Linux guest never uses them:
 * its peer is always the host, and hv_sock does not transmit a VmId.
 *   WILDCARD  host listener: accept from any partition
 *   CHILDREN  host listener: accept from any child VM
 *   LOOPBACK  the same partition
 *   PARENT    from a VM (e.g. a Windows guest): its host
 */
#define VSX_HV_VMID_WILDCARD "00000000-0000-0000-0000-000000000000"
#define VSX_HV_VMID_CHILDREN "90db8b89-0d35-4f79-8ce9-49ea0ac8b7cd"
#define VSX_HV_VMID_LOOPBACK "e0e16197-dd56-4a10-9195-5ee7a155a838"
#define VSX_HV_VMID_PARENT "a42e7cda-d03f-480c-9cc2-a4de20abb878"

/* Buffer size that always holds vsx_guid_format() output, braces and NUL. */
#define VSX_GUID_STRLEN 39

#define VSX_GUID_BRACES 0x1  /* vsx_guid_format: {...} */
#define VSX_GUID_UPPER 0x2   /* vsx_guid_format: upper-case hex */

/*
 * Parse a GUID, 8-4-4-4-12 hex digits, with or without braces, any case,
 * into @guid. Returns 0, or -EINVAL for anything else (@guid untouched).
 */
VSX_EXPORT int vsx_guid_parse(const char *text, uint8_t guid[16]);

/*
 * Write @guid as text into @buf (@len bytes, NUL-terminated): lower case
 * without braces unless @flags (VSX_GUID_*) says otherwise. Returns the
 * length written, -EINVAL (NULL, unknown flags), -ENOSPC (VSX_GUID_STRLEN
 * always suffices).
 */
VSX_EXPORT int vsx_guid_format(const uint8_t guid[16], unsigned flags, char *buf,
			       size_t len);

/* The service GUID for vsock port @port. Returns 0, -EINVAL for NULL. */
VSX_EXPORT int vsx_guid_from_port(uint32_t port, uint8_t guid[16]);

/*
 * The vsock port of service GUID @guid into *@port. Returns 0, or -EINVAL
 * when @guid is not of the template (it has no port).
 */
VSX_EXPORT int vsx_guid_to_port(const uint8_t guid[16], uint32_t *port);

/* ---- Options ------------------------------------------------------------ */

#define VSX_O_NONBLOCK 0x1    /* sends and receives never block */
#define VSX_O_SEQPACKET 0x2   /* SOCK_SEQPACKET where the transport has it */
/*
 * vmbus: vsx_set_buffer() on a connected socket, whose VMBus rings were
 * fixed when it connected, keeps the size for the next connection instead
 * of failing with -EISCONN: an accepted socket passes it to its listener
 * (the host's next connection gets it), any other socket to the next
 * vsx_connect() through vmbus in this process that asks for no size of its
 * own. Other transports apply buffer changes at once and ignore the flag.
 */
#define VSX_O_BUFFER_NEXT 0x4

/* Transport names, for vsx_opts.transport and vsx_info.transport. */
#define VSX_TRANSPORT_VIRTIO "virtio" /* kernel AF_VSOCK: virtio, vhost, loopback */
#define VSX_TRANSPORT_HYBRID "hybrid" /* unix:PATH:PORT */
#define VSX_TRANSPORT_VM "vm"         /* vm:NAME:PORT through vsxd */
#define VSX_TRANSPORT_VMBUS "vmbus"   /* Hyper-V hv_sock: vsock:host:PORT, hvsock:GUID */

#define VSX_DEFAULT_CONNECT_TIMEOUT_MS 2000
#define VSX_DEFAULT_LINGER_MS 8000

/*
 * Peer authentication with a pre-shared key (vsx_auth(7)), when libvsx is
 * built with OpenSSL: give vsx_connect() or vsx_listen() a key, in a file
 * (auth_key_file) or as bytes (auth_key, auth_key_len), never both. After
 * the transport connects, both sides prove they hold the same key with a
 * challenge-response (fresh nonces each side, HMAC-SHA256 bound to the
 * roles and the service port) within the connect timeout; vsx_connect()
 * and vsx_accept() return a socket only when both proofs passed, and fail
 * otherwise with -EACCES (wrong key, replay, malformed or cut-short
 * handshake, the peer closed) or -ETIMEDOUT, the connection closed and no
 * application byte moved. It authenticates the peer once, at connection
 * set-up; it neither encrypts nor protects the bytes that follow.
 *
 * A key is VSX_AUTH_KEY_MIN to VSX_AUTH_KEY_MAX bytes, used as they are. A
 * key file is the key, byte for byte (a trailing newline is part of it):
 * a regular file that group and others can neither read nor write (mode
 * 0600 or stricter), else -EACCES; missing: -ENOENT; empty, too short or
 * too long: -EINVAL. libvsx copies the key and wipes its copy when done
 * (a listener keeps it until vsx_close); the caller's auth_key buffer stays
 * the caller's to wipe. Without OpenSSL, any key option fails with
 * -ENOTSUP. vsx_adopt() takes no key (-EINVAL).
 */
#define VSX_AUTH_KEY_MIN 32
#define VSX_AUTH_KEY_MAX 1024

/*
 * Options for vsx_connect() and vsx_listen(). All-zero means defaults: a
 * blocking stream socket, 2 s connect timeout, 8 s linger, transport chosen
 * from the address and the machine, no authentication. The struct is
 * copied; nothing in it, nor anything it points to, is kept after the call.
 */
struct vsx_opts {
	unsigned flags;             /* VSX_O_* */
	int connect_timeout_ms;     /* 0: default; <0: -EINVAL; also bounds the
				       authentication handshake */
	int linger_ms;              /* 0: default; <0: vsx_close() does not wait */
	int backlog;                /* vsx_listen(); 0: default (128) */
	size_t rx_buffer;           /* 0: transport default; else as vsx_set_buffer */
	size_t tx_buffer;           /* applied before connect/listen */
	const char *transport;      /* NULL: automatic; else a transport name */
	const char *control_path;   /* vm: addresses; NULL: VSX_CONTROL_PATH */
	const char *auth_key_file;  /* pre-shared key file; NULL: see auth_key */
	const void *auth_key;       /* or the key's bytes; NULL: no authentication */
	size_t auth_key_len;        /* bytes at auth_key */
	uintptr_t reserved[5];      /* must be zero */
};

/* Default vsxd control socket (overridden by $VSXD_CONTROL). */
#define VSX_CONTROL_PATH "/run/vsxd/control"

/* ---- Connections -------------------------------------------------------- */

typedef struct vsx_sock vsx_sock;

/*
 * Connect to @addr. On success *@out is a connected socket owned by the
 * caller (release with vsx_close()). Connecting takes at most the connect
 * timeout; the errors are -ETIMEDOUT, -ECONNREFUSED (nobody listens, or the
 * peer refused: a vsock RST maps here on every transport), -ENETUNREACH
 * (also: on vmbus, any peer but the host), -ESOCKTNOSUPPORT (SEQPACKET
 * where the transport has none, e.g. vmbus), -ENODEV (no transport for this
 * address on this machine), -EHOSTUNREACH (vm: a name vsxd does not know),
 * -EPROTO (a malformed hybrid reply or vsxd answer), -EOPNOTSUPP (a buffer
 * option the transport cannot apply), -EACCES (no permission on a socket
 * path; with a key: authentication failed, or the key file is open to
 * group or others), -ENOENT (no such key file), -ENOTSUP (a key, in a
 * build without OpenSSL), -EINVAL, -ENOMEM. On vmbus a host service that
 * is not registered does not refuse: the connect times out. With a key,
 * the transport's connect and the handshake together take at most the
 * connect timeout.
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
 * On a listener with a key, the handshake runs here, blocking for at most
 * the connect timeout even on a non-blocking listener; -EACCES or
 * -ETIMEDOUT then mean that this one connection failed and was closed, not
 * that the listener did: accept again.
 */
VSX_EXPORT int vsx_accept(vsx_sock *listener, vsx_sock **out);

/*
 * Wrap an existing connected or listening socket @fd (AF_VSOCK: the kernel
 * transport; AF_UNIX: a hybrid stream whose handshake is already done) in a
 * vsx_sock, so the buffer knob, vsx_info and the bounded close apply to it.
 * On success the socket owns @fd (vsx_close closes it); on failure @fd is
 * left untouched. With opts->linger_ms < 0, vsx_close neither shuts down
 * nor waits: use that for a duplicate of a descriptor another process owns.
 * Errors: -EBADF, -ENOTSOCK, -EAFNOSUPPORT (another family), -ENOTCONN.
 */
VSX_EXPORT int vsx_adopt(int fd, const struct vsx_opts *opts, vsx_sock **out);

/*
 * Send @len bytes. Loops until everything is written, the socket would
 * block (non-blocking sockets: returns what was written, or -EAGAIN when
 * nothing was), or an error occurs (returns what was written if anything
 * was, else the error). Never raises SIGPIPE: a closed peer is -EPIPE.
 */
VSX_EXPORT ssize_t vsx_send(vsx_sock *s, const void *buf, size_t len);

/* Receive up to @len bytes. 0 means the peer shut down its sending side. */
VSX_EXPORT ssize_t vsx_recv(vsx_sock *s, void *buf, size_t len);

/*
 * Shut down one or both directions: @how is SHUT_RD, SHUT_WR or SHUT_RDWR
 * (0, 1, 2), or VSX_SHUT_RD, VSX_SHUT_WR or VSX_SHUT_RDWR (4, 1, 5), the
 * bits vsx_info reports in shut_local; no value means two things.
 */
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
 * virtio-vsock, RX is the credit advertised to the peer (buf_alloc); on
 * vmbus, RX and TX are the VMBus ring sizes, which are fixed when the
 * connection opens: set them in vsx_opts or on the listener (accepted
 * sockets inherit them). Returns 0, -EINVAL (zero or unrepresentable size),
 * -EOPNOTSUPP when the transport has no such buffer, -EISCONN when it can
 * no longer change (vmbus, connected, without VSX_O_BUFFER_NEXT), or a
 * transport error.
 */
VSX_EXPORT int vsx_set_buffer(vsx_sock *s, int which, size_t bytes);

/*
 * Read back what is really in force for @which (exactly one of VSX_RX or
 * VSX_TX) into *@bytes. On vmbus: the ring the kernel opened the channel
 * with (page-rounded, 24 KiB to 256 KiB; see vsx-transports(7)), and on a
 * listener the ring its next accepted connection will get.
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

#define VSX_INFO_CREDIT 0x1 /* the credit fields are valid: hybrid and vm:
			       connections a vsxd serves (asked of it) */
#define VSX_INFO_AUTH 0x2   /* peer authenticated with the pre-shared key;
			       on a listener: its connections will be */
/*
 * vsx_info.shut_local bits, which vsx_shutdown also takes. VSX_SHUT_WR is
 * SHUT_WR (1), so "shut_local & SHUT_WR" asks what it reads as; SHUT_RD
 * is 0 and cannot be a bit, so the receiving side is VSX_SHUT_RD (4),
 * which is none of POSIX's values. (libvsx 0.1 had RD 1 and WR 2.)
 */
#define VSX_SHUT_WR 0x1
#define VSX_SHUT_RD 0x4
#define VSX_SHUT_RDWR (VSX_SHUT_RD | VSX_SHUT_WR)

struct vsx_info {
	char transport[16];            /* "virtio", "hybrid", "vmbus", ... */
	char local[VSX_ADDR_STRLEN];   /* canonical address text, or "" */
	char peer[VSX_ADDR_STRLEN];
	int type;                      /* SOCK_STREAM or SOCK_SEQPACKET */
	int state;                     /* enum vsx_state */
	unsigned shut_local;           /* VSX_SHUT_RD | VSX_SHUT_WR done by us */
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

/*
 * Describe @s into *@out (vsx_info(3)); every field is set, 0 or "" when
 * unknown. On hybrid and vm: connections it asks vsxd for the credit
 * fields, a control-socket round trip of at most 1 s; other transports
 * ask no one. Returns 0, or -EINVAL for NULL.
 */
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
 * thread's most recent libvsx call failed with @err, the message carries that
 * failure's detail (every call but vsx_fd, vsx_version and vsx_strerror
 * clears the detail when it starts). The string is valid until the thread's next libvsx call.
 */
VSX_EXPORT const char *vsx_strerror(int err);

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
VSX_EXPORT const char *vsx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* VSX_VSX_H */
