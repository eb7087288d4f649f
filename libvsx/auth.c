/*
 * Peer authentication with a pre-shared key, over OpenSSL's libcrypto: the
 * handshake of vsx_auth(7), which the core runs right after a transport
 * connected (vsx_connect: we are the initiator, I) or accepted (vsx_accept:
 * the responder, R), before the caller gets the socket.
 *
 * Four messages of 40 bytes each, strictly alternating, so that neither side
 * ever reads past the handshake and the first application byte is left for
 * vsx_recv:
 *
 *     I -> R  HELLO      Ni      32 fresh random bytes
 *     R -> I  CHALLENGE  Nr      32 fresh random bytes
 *     I -> R  PROOF_I    HMAC-SHA256(K, mac_input('I'))
 *     R -> I  PROOF_R    HMAC-SHA256(K, mac_input('R'))
 *
 * Each message is "VSXA", version 1, its type, two zero bytes, then its 32
 * byte body. mac_input(role) = "vsx-auth-psk-v1" || role || le32 port ||
 * HELLO || CHALLENGE, the last two as they went over the wire.
 *
 * What this buys: both nonces are fresh, so a recorded handshake replayed
 * fails against the other side's new nonce; the role byte makes I's proof
 * useless as R's (a reflected message fails), and the message types make a
 * peer playing the wrong role fail at once; R proves nothing before I has
 * proven the key, so an unauthenticated connector learns no MAC at all; a
 * side that rejects says nothing and closes.
 *
 * Why the port and no other address: each side must put the same bytes in
 * the MAC, and across the paths vsock takes the two ends rarely see the same
 * addresses. A host program connecting through a hybrid backend sees
 * unix:PATH:N while the guest sees vsock:2:N; a guest connecting to the host
 * through a backend reaches a host listener that only knows unix:PATH:P and
 * no peer at all; CIDs are per-VM views. The one value both ends hold on
 * every transport is the service port: the port the initiator connected to
 * (vsx_connect's address) is the port the responder accepted on (its local
 * port). So the port is bound, and a handshake meant for one service cannot
 * pass for another that shares the key.
 *
 * Errors: anything wrong in the handshake (bad magic, version, type or
 * reserved bytes, a proof that does not match, EOF or a reset from the peer)
 * is -EACCES; a deadline that passes is -ETIMEDOUT; local failures keep
 * their own errno. The detail says which step failed.
 *
 * The key: loaded once into struct vsx__auth (from a file checked for type,
 * size and mode, or copied from the caller's bytes); a connecting socket
 * wipes it right after its handshake, a listener keeps it until closed; it
 * is wiped with OPENSSL_cleanse before every free.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "auth.h"

#define LABEL "vsx-auth-psk-v1"
#define LABEL_LEN (sizeof(LABEL) - 1)
#define MAGIC "VSXA"
#define PROTO_VERSION 1
#define HDR_LEN 8
#define BODY_LEN 32 /* a nonce, or an HMAC-SHA256 */
#define MSG_LEN (HDR_LEN + BODY_LEN)
#define MAC_INPUT_LEN (LABEL_LEN + 1 + 4 + 2 * MSG_LEN)

enum { HELLO = 1, CHALLENGE = 2, PROOF_I = 3, PROOF_R = 4 };

struct vsx__auth {
	size_t len;            /* bytes of key in use */
	size_t cap;            /* bytes allocated at key, all wiped on free */
	unsigned char key[];
};

/* One handshake in progress. */
struct hs {
	vsx_sock *s;
	const struct vsx__auth *k;
	uint32_t port;         /* the service port, see the top */
	int64_t deadline;
	uint8_t m[4][MSG_LEN]; /* the messages in wire order, m[0] is HELLO */
};

static const char *msg_name(unsigned type)
{
	static const char *const names[] = {
		[HELLO] = "HELLO", [CHALLENGE] = "CHALLENGE",
		[PROOF_I] = "PROOF_I", [PROOF_R] = "PROOF_R",
	};

	return type < sizeof(names) / sizeof(names[0]) && names[type] ? names[type]
								      : "unknown";
}

/* ---- Keys ---------------------------------------------------------------- */

static struct vsx__auth *key_new(size_t cap)
{
	struct vsx__auth *k = malloc(sizeof(*k) + cap);

	if (k) {
		k->len = 0;
		k->cap = cap;
	}
	return k;
}

static void key_free(struct vsx__auth *k)
{
	if (!k)
		return;
	OPENSSL_cleanse(k->key, k->cap);
	free(k);
}

static int key_size_ok(size_t n, const char *what, const char *name)
{
	if (n == 0)
		return vsx__err(-EINVAL, "auth: %s%s is empty", what, name);
	if (n < VSX_AUTH_KEY_MIN)
		return vsx__err(-EINVAL, "auth: %s%s holds %zu bytes; a key is at least %d "
				"bytes (e.g. head -c 32 /dev/urandom)", what, name, n,
				VSX_AUTH_KEY_MIN);
	if (n > VSX_AUTH_KEY_MAX)
		return vsx__err(-EINVAL, "auth: %s%s holds more than %d bytes, the most a key "
				"may have", what, name, VSX_AUTH_KEY_MAX);
	return 0;
}

static int key_from_bytes(const void *bytes, size_t len, struct vsx__auth **out)
{
	struct vsx__auth *k;
	int rc;

	if (!bytes)
		return vsx__err(-EINVAL, "auth: auth_key_len is %zu but auth_key is NULL", len);
	rc = key_size_ok(len, "auth_key", "");
	if (rc < 0)
		return rc;
	k = key_new(len);
	if (!k)
		return vsx__err(-ENOMEM, "out of memory");
	memcpy(k->key, bytes, len);
	k->len = len;
	*out = k;
	return 0;
}

/*
 * The key is the file's content, byte for byte. The file must be a regular
 * file closed to group and others; that is checked on the open descriptor,
 * before a byte is read. O_NONBLOCK: a FIFO in its place must not hang us.
 */
static int key_from_file(const char *path, struct vsx__auth **out)
{
	struct vsx__auth *k = NULL;
	struct stat st;
	ssize_t r;
	int fd, rc, e;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		e = errno;
		return vsx__err(-e, "auth: key file %s: %s", path, strerror(e));
	}
	if (fstat(fd, &st) < 0) {
		rc = vsx__errno("auth: key file: fstat");
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = vsx__err(-EINVAL, "auth: key file %s is not a regular file", path);
		goto out_close;
	}
	if (st.st_mode & 077) {
		rc = vsx__err(-EACCES, "auth: key file %s is open to group or others (mode "
			      "%04o); a key file must be mode 0600 or stricter (chmod "
			      "600)", path, (unsigned)(st.st_mode & 07777));
		goto out_close;
	}
	rc = key_size_ok((size_t)st.st_size, "key file ", path);
	if (rc < 0)
		goto out_close;
	/* One byte more than the most allowed: a file that grew is seen. */
	k = key_new(VSX_AUTH_KEY_MAX + 1);
	if (!k) {
		rc = vsx__err(-ENOMEM, "out of memory");
		goto out_close;
	}
	while (k->len < k->cap) {
		r = read(fd, k->key + k->len, k->cap - k->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = vsx__errno("auth: key file: read");
			goto out_free;
		}
		if (r == 0)
			break;
		k->len += (size_t)r;
	}
	rc = key_size_ok(k->len, "key file ", path);
	if (rc < 0)
		goto out_free;
	close(fd);
	*out = k;
	return 0;

out_free:
	key_free(k);
out_close:
	close(fd);
	return rc;
}

int vsx__auth_setup(vsx_sock *s, const struct vsx_opts *o)
{
	struct vsx__auth *k = NULL;
	int rc;

	if (!o->auth_key_file && !o->auth_key && !o->auth_key_len)
		return 0;
	if (!s)
		return vsx__err(-EINVAL, "adopt: an adopted socket cannot authenticate: the "
				"handshake runs in vsx_connect and vsx_accept, which know "
				"the roles and the port");
	if (o->auth_key_file && (o->auth_key || o->auth_key_len))
		return vsx__err(-EINVAL, "auth: give auth_key_file or auth_key, not both");
	if (o->auth_key_file)
		rc = key_from_file(o->auth_key_file, &k);
	else
		rc = key_from_bytes(o->auth_key, o->auth_key_len, &k);
	if (rc < 0)
		return rc;
	vsx__auth_free(s);
	s->auth = k;
	/* A listener shows it: its connections will be authenticated. */
	s->info_flags |= VSX_INFO_AUTH;
	return 0;
}

void vsx__auth_free(vsx_sock *s)
{
	key_free(s->auth);
	s->auth = NULL;
}

/* ---- Messages ------------------------------------------------------------ */

static void msg_make(uint8_t m[MSG_LEN], unsigned type, const uint8_t body[BODY_LEN])
{
	memcpy(m, MAGIC, 4);
	m[4] = PROTO_VERSION;
	m[5] = (uint8_t)type;
	m[6] = m[7] = 0;
	memcpy(m + HDR_LEN, body, BODY_LEN);
}

static int msg_check(const uint8_t m[MSG_LEN], unsigned want)
{
	if (memcmp(m, MAGIC, 4) != 0)
		return vsx__err(-EACCES, "auth: the peer sent something else than a "
				"vsx-auth %s (does it authenticate, with libvsx's "
				"protocol?)", msg_name(want));
	if (m[4] != PROTO_VERSION)
		return vsx__err(-EACCES, "auth: the peer speaks vsx-auth version %u; this "
				"libvsx speaks version %u", m[4], PROTO_VERSION);
	if (m[5] != want)
		return vsx__err(-EACCES, "auth: the peer sent a message of type %u (%s) "
				"where its %s was due: a reflected message, or both "
				"sides in the same role", m[5], msg_name(m[5]),
				msg_name(want));
	if (m[6] || m[7])
		return vsx__err(-EACCES, "auth: the peer's %s has non-zero reserved bytes",
				msg_name(want));
	return 0;
}

/* The transport's single steps, as the core takes them; never blocking. */
static ssize_t step_send(vsx_sock *s, const void *p, size_t n)
{
	ssize_t r;

	if (s->t->send)
		return s->t->send(s, p, n);
	r = send(s->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

static ssize_t step_recv(vsx_sock *s, void *p, size_t n)
{
	ssize_t r;

	if (s->t->recv)
		return s->t->recv(s, p, n);
	r = recv(s->fd, p, n, MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

static int timed_out(const struct hs *h, const char *what, unsigned type)
{
	return vsx__err(-ETIMEDOUT, "auth: %s the %s within the connect timeout (%d ms)",
			what, msg_name(type), h->s->connect_timeout_ms);
}

/* Move message @i of the handshake, whole, by the deadline: send it
 * (@out), or receive it, which must then be of @type. A receive reads
 * exactly one message: what follows it stays in the socket. */
static int msg_move(struct hs *h, int i, unsigned type, bool out)
{
	size_t done = 0;
	ssize_t r;
	int ev;

	while (done < MSG_LEN) {
		r = out ? step_send(h->s, h->m[i] + done, MSG_LEN - done)
			: step_recv(h->s, h->m[i] + done, MSG_LEN - done);
		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (r == -EINTR)
			continue;
		if (r == -EAGAIN || r == -EWOULDBLOCK) {
			ev = vsx__wait_fd(h->s->fd, out ? POLLOUT : POLLIN, h->deadline);
			if (ev == 0)
				return timed_out(h, out ? "could not send" : done ?
						 "the peer stopped in the middle of" :
						 "the peer did not send", type);
			if (ev < 0)
				return vsx__err(ev, "auth: poll: %s", strerror(-ev));
			continue;
		}
		if ((r == 0 || r == -EPIPE || r == -ECONNRESET) && out)
			return vsx__err(-EACCES, "auth: the peer closed the connection before "
					"our %s: it refused the handshake", msg_name(type));
		if (r == 0 || r == -EPIPE || r == -ECONNRESET)
			return vsx__err(-EACCES, "auth: the peer closed the connection %s its "
					"%s (%zu of %d bytes): it refused the handshake, or "
					"does not authenticate", done ? "in the middle of" :
					"instead of sending", msg_name(type), done, MSG_LEN);
		return vsx__err((int)r, "auth: %s the %s: %s", out ? "sending" : "receiving",
				msg_name(type), strerror((int)-r));
	}
	return out ? 0 : msg_check(h->m[i], type);
}

static int msg_send(struct hs *h, int i)
{
	return msg_move(h, i, h->m[i][5], true);
}

static int msg_recv(struct hs *h, int i, unsigned type)
{
	return msg_move(h, i, type, false);
}

static int nonce(uint8_t out[BODY_LEN])
{
	if (RAND_bytes(out, BODY_LEN) != 1)
		return vsx__err(-EIO, "auth: OpenSSL gave no random bytes (RAND_bytes)");
	return 0;
}

/* HMAC-SHA256(K, label || role || le32 port || HELLO || CHALLENGE). */
static int proof(const struct hs *h, uint8_t role, uint8_t out[BODY_LEN])
{
	uint8_t in[MAC_INPUT_LEN], *p = in;
	unsigned int len = 0;

	memcpy(p, LABEL, LABEL_LEN);
	p += LABEL_LEN;
	*p++ = role;
	*p++ = (uint8_t)h->port;
	*p++ = (uint8_t)(h->port >> 8);
	*p++ = (uint8_t)(h->port >> 16);
	*p++ = (uint8_t)(h->port >> 24);
	memcpy(p, h->m[0], MSG_LEN);
	memcpy(p + MSG_LEN, h->m[1], MSG_LEN);
	if (!HMAC(EVP_sha256(), h->k->key, (int)h->k->len, in, sizeof(in), out, &len) ||
	    len != BODY_LEN)
		return vsx__err(-EIO, "auth: HMAC-SHA256 failed in OpenSSL");
	return 0;
}

/* Check the peer's proof in message @i against our own computation. */
static int proof_check(const struct hs *h, int i, uint8_t role)
{
	uint8_t want[BODY_LEN];
	int rc;

	rc = proof(h, role, want);
	if (rc < 0)
		return rc;
	if (CRYPTO_memcmp(want, h->m[i] + HDR_LEN, BODY_LEN) != 0)
		return vsx__err(-EACCES, "auth: the peer's proof does not match: it holds "
				"another key, uses another port, or replayed or altered "
				"the handshake");
	return 0;
}

/* ---- The two roles ------------------------------------------------------- */

static int initiate(struct hs *h)
{
	uint8_t body[BODY_LEN];
	int rc;

	rc = nonce(body);
	if (rc < 0)
		return rc;
	msg_make(h->m[0], HELLO, body);
	rc = msg_send(h, 0);
	if (!rc)
		rc = msg_recv(h, 1, CHALLENGE);
	if (!rc)
		rc = proof(h, 'I', body);
	if (rc < 0)
		return rc;
	msg_make(h->m[2], PROOF_I, body);
	rc = msg_send(h, 2);
	if (!rc)
		rc = msg_recv(h, 3, PROOF_R);
	if (!rc)
		rc = proof_check(h, 3, 'R');
	return rc;
}

static int respond(struct hs *h)
{
	uint8_t body[BODY_LEN];
	int rc;

	rc = msg_recv(h, 0, HELLO);
	if (!rc)
		rc = nonce(body);
	if (rc < 0)
		return rc;
	msg_make(h->m[1], CHALLENGE, body);
	rc = msg_send(h, 1);
	if (!rc)
		rc = msg_recv(h, 2, PROOF_I);
	if (!rc)
		rc = proof_check(h, 2, 'I');
	if (!rc)
		rc = proof(h, 'R', body);
	if (rc < 0)
		return rc;
	msg_make(h->m[3], PROOF_R, body);
	return msg_send(h, 3);
}

/* Run one role with the descriptor non-blocking, then restore the mode the
 * socket's flags ask for. */
static int run(struct hs *h, int (*role)(struct hs *))
{
	vsx_sock *s = h->s;
	int rc, rc2;

	rc = vsx__set_nonblock(s->fd, 1);
	if (rc < 0)
		return vsx__err(rc, "auth: fcntl: %s", strerror(-rc));
	rc = role(h);
	rc2 = vsx__set_nonblock(s->fd, !!(s->flags & VSX_O_NONBLOCK));
	if (!rc && rc2 < 0)
		rc = vsx__err(rc2, "auth: fcntl: %s", strerror(-rc2));
	OPENSSL_cleanse(h->m, sizeof(h->m));
	return rc;
}

int vsx__auth_connect(vsx_sock *s, int64_t deadline_ms)
{
	struct hs h = { .s = s, .k = s->auth, .port = s->peer.port,
			.deadline = deadline_ms };
	int rc;

	if (!s->auth)
		return 0;
	s->info_flags &= ~VSX_INFO_AUTH;
	rc = run(&h, initiate);
	vsx__auth_free(s);
	if (!rc)
		s->info_flags |= VSX_INFO_AUTH;
	return rc;
}

int vsx__auth_accept(const vsx_sock *l, vsx_sock *s)
{
	struct hs h = { .s = s, .k = l->auth, .port = s->local.port,
			.deadline = vsx__now_ms() + s->connect_timeout_ms };
	int rc;

	char peer[VSX_ADDR_STRLEN], why[200];

	if (!l->auth)
		return 0;
	rc = run(&h, respond);
	if (!rc) {
		s->info_flags |= VSX_INFO_AUTH;
		return 0;
	}
	/* The socket dies with the failure: its peer goes into the message,
	 * for the caller's log. (Hybrid peers have no address.) */
	if (s->peer.kind && vsx_addr_format(&s->peer, peer, sizeof(peer)) == 0) {
		snprintf(why, sizeof(why), "%s", vsx_strerror(rc));
		rc = vsx__err(rc, "%s (peer %s)", why, peer);
	}
	return rc;
}
