/*
 * What the records' files share (state.c: the state and counters records;
 * state_relays.c: the relays record; their formats are state.h's): one
 * write cursor, one bounds-checked read cursor whose first failure sticks,
 * the header's seal, and a record in and out of a memfd. Not for callers,
 * who use state.h.
 */
#ifndef VSXD_STATE_INT_H
#define VSXD_STATE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Writing: measured first (p NULL), then written ---- */

struct wr {
	uint8_t *p;
	size_t n, cap;
};

static inline void put(struct wr *w, const void *v, size_t n)
{
	/* (an empty queue has no buffer: no memcpy from NULL) */
	if (w->p && n && w->n + n <= w->cap)
		memcpy(w->p + w->n, v, n);
	w->n += n;
}

static inline void put_le(struct wr *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];

	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, bytes);
}

static inline void put_str(struct wr *w, const char *s)
{
	size_t n = strlen(s);

	put_le(w, n, 1);
	put(w, s, n);
}

/* ---- Reading ---- */

struct rd {
	const uint8_t *p;
	size_t n, off;
	const char *err;      /* first failure */
};

static inline uint64_t get_le(struct rd *r, unsigned bytes)
{
	uint64_t v = 0;

	if (r->err)
		return 0;
	if (r->n - r->off < bytes) {
		r->err = "record truncated";
		return 0;
	}
	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)r->p[r->off + i] << (8 * i);
	r->off += bytes;
	return v;
}

/* A str into @dst (@max bytes, NUL included). */
static inline void get_str(struct rd *r, char *dst, size_t max)
{
	size_t n = get_le(r, 1);

	dst[0] = '\0';
	if (r->err)
		return;
	if (n >= max) {
		r->err = "string too long";
		return;
	}
	if (r->n - r->off < n) {
		r->err = "record truncated";
		return;
	}
	memcpy(dst, r->p + r->off, n);
	dst[n] = '\0';
	if (memchr(dst, '\0', n))
		r->err = "NUL inside a string";
	r->off += n;
}

/* @n bytes into a new buffer: the length was checked against what is left
 * first, so a count in a short record allocates nothing. */
static inline uint8_t *get_raw(struct rd *r, size_t n)
{
	uint8_t *p;

	if (r->err || !n)
		return NULL;
	if (r->n - r->off < n) {
		r->err = "record truncated";
		return NULL;
	}
	p = malloc(n);
	if (!p) {
		r->err = "out of memory";
		return NULL;
	}
	memcpy(p, r->p + r->off, n);
	r->off += n;
	return p;
}

/* ---- A connection's fields (struct vsxd_state_conn) ---- */

/*
 * Each layout of a connection's bytes is a table of these, in the order
 * the bytes go, as QEMU's VMStateDescription lists a device's fields: the
 * state record's connections (state.c, vsxd__conn_fields) and the fd
 * store's connection slots (state_slots.c). One walker writes, measures
 * and reads them all.
 */
enum vsxd_field_kind {
	VSXD_F_UINT,    /* an unsigned member, @wire bytes little-endian */
	VSXD_F_STR,     /* a char array: a u8 length, the bytes */
	VSXD_F_BYTES,   /* a struct vsxd_state_bytes: u32 len, the bytes,
			   u32 ends, each u32 end and u8 flags */
	VSXD_F_ZERO,    /* @wire reserved bytes: written 0, read as 0 */
};

struct vsxd_field {
	const char *name;
	unsigned short off, mem;      /* in struct vsxd_state_conn */
	unsigned char wire;           /* VSXD_F_UINT, VSXD_F_ZERO: bytes */
	unsigned char since;          /* the record version that added it */
	unsigned char kind;           /* enum vsxd_field_kind */
};

#define VSXD_FIELD(kind, member, wire, since)                                     \
	{ #member, offsetof(struct vsxd_state_conn, member),                    \
	  sizeof(((struct vsxd_state_conn *)0)->member), wire, since, kind }
#define VSXD_FIELD_ZERO(wire) { "reserved", 0, 0, wire, 0, VSXD_F_ZERO }

struct vsxd_state_conn;

/* @c's fields of table @f (@n of them), in order */
void vsxd__put_fields(struct wr *w, const struct vsxd_field *f, size_t n,
		      const struct vsxd_state_conn *c);
/* The fields of a record of @version (those added since skipped, left as
 * they are) into @c; a failure in @r (a reserved byte set: "reserved bytes
 * set"). Bytes are malloc'ed (vsxd_state_clear frees them). */
void vsxd__get_fields(struct rd *r, const struct vsxd_field *f, size_t n, unsigned version,
		      struct vsxd_state_conn *c);
/* The fewest bytes those fields of @version take (empty strings and queues) */
size_t vsxd__fields_min(const struct vsxd_field *f, size_t n, unsigned version);

/* The state record's connection, version by version (state.h) */
extern const struct vsxd_field vsxd__conn_fields[];
extern const size_t vsxd__conn_nfields;

/* A written record's length (@len) and CRC-32 of its bytes from @from on,
 * at offsets 12 and 16 of its header (every record's layout). */
void vsxd__seal(uint8_t *p, size_t len, size_t from);

/* The header every record starts with (state.h): @magic (8 bytes), u32
 * version, u32 length, u32 CRC-32 of the bytes from @crc_from on. 0 with
 * *@version read and @r over @buf up to the record's length, at offset 20
 * (where the record's own header fields go on); or -EBADMSG (no magic, a
 * length out of range, a CRC mismatch) or -EPROTONOSUPPORT (a version
 * outside @vmin..@vmax) with a reason naming the "@what record" in @why. */
int vsxd__record_open(struct rd *r, const void *buf, size_t len, const char *magic,
		      const char *what, unsigned vmin, unsigned vmax, size_t crc_from,
		      uint32_t *version, char *why, size_t whylen);

/* vsnprintf into @why (@whylen bytes, may be 0). */
void vsxd__why_set(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* @buf (malloc'ed, freed here) holding a record of @n bytes, or the
 * encoder's error @n, into a new memfd named @name; or a negative errno. */
int vsxd__record_memfd(const char *name, uint8_t *buf, long n);

/* What the file @fd holds (the @what of the messages), in *@out
 * (malloc'ed): its length, or a negative errno with a reason in @why. */
long vsxd__record_slurp(int fd, const char *what, uint8_t **out, char *why, size_t whylen);

#endif
