/*
 * The restart state's connection slots (state_slots.h says the layout and
 * why each update leaves the file readable). The area's lock guards the
 * directory and which regions are taken (device events); each VM's lock
 * its region, free list and id->slot hash (its worker's connection
 * events, and the device path when it binds or unbinds the region). VMs
 * are found by name through buckets whose chains only grow while the area
 * is open (published with release stores, walked with acquire loads).
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"
#include "state-int.h"
#include "state_slots.h"

#define BUCKETS 256u
#define CHUNK_SLOTS 128u   /* slots read at once */

struct vsxd_slots_vm {
	struct vsxd_slots_vm *next;     /* in its bucket */
	char name[VSXD_STATE_NAME_MAX + 1];
	pthread_mutex_t lock;
	int region;                     /* -1: none */
	uint8_t *map;                   /* the region, mapped */
	uint32_t hwm;                   /* slots ever used: 0 .. hwm-1 */
	uint32_t *free;                 /* free slots below hwm */
	unsigned nfree, free_cap;
	struct ht_ent {
		uint64_t id;            /* 0: empty (ids start at 1) */
		uint32_t slot;
	} *ht;
	unsigned ht_cap, ht_n;          /* ht_cap a power of two, or 0 */
};

struct vsxd_slots {
	int fd;
	pthread_mutex_t lock;
	uint8_t *dir;                   /* the directory, mapped */
	bool taken[VSXD_STATE_MAX_VMS];
	struct vsxd_slots_vm *bucket[BUCKETS];
};

static unsigned name_hash(const char *s)
{
	unsigned h = 2166136261u;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h % BUCKETS;
}

static void le_put(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_get(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static uint64_t region_off(unsigned r)
{
	return VSXD_SLOTS_BASE + VSXD_SLOTS_DIR_BYTES + (uint64_t)r * VSXD_SLOTS_REGION_BYTES;
}

/* ---- The area ---- */

int vsxd_slots_wipe(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size > VSXD_SLOTS_BASE && ftruncate(fd, (off_t)VSXD_SLOTS_BASE) < 0)
		return -errno;
	return 0;
}

/* Make @fd at least @len bytes long (sparse). */
static int grow(int fd, uint64_t len)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < len && ftruncate(fd, (off_t)len) < 0)
		return -errno;
	return 0;
}

int vsxd_slots_open(int fd, struct vsxd_slots **out)
{
	struct vsxd_slots *sl;
	int r;

	*out = NULL;
	r = grow(fd, VSXD_SLOTS_BASE + VSXD_SLOTS_DIR_BYTES);
	if (r < 0)
		return r;
	sl = calloc(1, sizeof(*sl));
	if (!sl)
		return -ENOMEM;
	sl->dir = mmap(NULL, VSXD_SLOTS_DIR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       (off_t)VSXD_SLOTS_BASE);
	if (sl->dir == MAP_FAILED) {
		r = -errno;
		free(sl);
		return r;
	}
	sl->fd = fd;
	pthread_mutex_init(&sl->lock, NULL);
	*out = sl;
	return 0;
}

static void vm_reset(struct vsxd_slots_vm *v)
{
	if (v->map)
		munmap(v->map, VSXD_SLOTS_REGION_BYTES);   /* (its pages stay in the file) */
	v->map = NULL;
	v->region = -1;
	v->hwm = 0;
	v->nfree = 0;
	v->ht_n = 0;
	if (v->ht)
		memset(v->ht, 0, v->ht_cap * sizeof(*v->ht));
}

void vsxd_slots_free(struct vsxd_slots *sl)
{
	if (!sl)
		return;
	for (unsigned b = 0; b < BUCKETS; b++) {
		struct vsxd_slots_vm *v = sl->bucket[b], *next;

		for (; v; v = next) {
			next = v->next;
			vm_reset(v);
			free(v->free);
			free(v->ht);
			pthread_mutex_destroy(&v->lock);
			free(v);
		}
	}
	munmap(sl->dir, VSXD_SLOTS_DIR_BYTES);
	pthread_mutex_destroy(&sl->lock);
	free(sl);
}

struct vsxd_slots_vm *vsxd_slots_vm(struct vsxd_slots *sl, const char *name)
{
	struct vsxd_slots_vm *v;

	if (!sl || !name)
		return NULL;
	v = __atomic_load_n(&sl->bucket[name_hash(name)], __ATOMIC_ACQUIRE);
	for (; v; v = __atomic_load_n(&v->next, __ATOMIC_ACQUIRE))
		if (!strcmp(v->name, name))
			return v;
	return NULL;
}

int vsxd_slots_bind(struct vsxd_slots *sl, const char *name)
{
	struct vsxd_slots_vm *v;
	uint8_t *e, *map;
	size_t nl = strlen(name);
	unsigned r;
	int err;

	if (!sl)
		return -ENOENT;
	if (!nl || nl > VSXD_STATE_NAME_MAX)
		return -EINVAL;
	pthread_mutex_lock(&sl->lock);
	v = vsxd_slots_vm(sl, name);
	if (v && v->region >= 0) {
		pthread_mutex_unlock(&sl->lock);
		return 0;
	}
	for (r = 0; r < VSXD_STATE_MAX_VMS && sl->taken[r]; r++)
		;
	if (r == VSXD_STATE_MAX_VMS) {
		err = -ENOSPC;
		goto out;
	}
	err = grow(sl->fd, region_off(r) + VSXD_SLOTS_REGION_BYTES);
	if (err < 0)
		goto out;
	map = mmap(NULL, VSXD_SLOTS_REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, sl->fd,
		   (off_t)region_off(r));
	if (map == MAP_FAILED) {
		err = -errno;
		goto out;
	}
	/* empty, whatever an earlier VM left there (MADV_REMOVE punches the
	 * file's pages: madvise, which the sandbox allows, not fallocate) */
	if (madvise(map, VSXD_SLOTS_REGION_BYTES, MADV_REMOVE) < 0) {
		err = -errno;
		munmap(map, VSXD_SLOTS_REGION_BYTES);
		goto out;
	}
	if (!v) {
		unsigned b = name_hash(name);

		v = calloc(1, sizeof(*v));
		if (!v) {
			munmap(map, VSXD_SLOTS_REGION_BYTES);
			err = -ENOMEM;
			goto out;
		}
		memcpy(v->name, name, nl + 1);
		v->region = -1;
		pthread_mutex_init(&v->lock, NULL);
		v->next = sl->bucket[b];
		__atomic_store_n(&sl->bucket[b], v, __ATOMIC_RELEASE);
	}
	pthread_mutex_lock(&v->lock);
	v->map = map;
	v->hwm = 0;
	v->nfree = 0;
	v->region = (int)r;
	pthread_mutex_unlock(&v->lock);
	sl->taken[r] = true;
	/* the directory entry, its mark last */
	e = sl->dir + (size_t)r * VSXD_SLOTS_DIR_ENTRY;
	e[8] = (uint8_t)nl;
	memcpy(e + 9, name, nl);
	le_put(e + 4, vsxd_crc32(e + 8, 1 + nl), 4);
	__atomic_store_n((uint32_t *)e, htole32(VSXD_SLOTS_DIR_MARK), __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&sl->lock);
	return err;
}

void vsxd_slots_unbind(struct vsxd_slots *sl, const char *name)
{
	struct vsxd_slots_vm *v;
	int r;

	if (!sl)
		return;
	pthread_mutex_lock(&sl->lock);
	v = vsxd_slots_vm(sl, name);
	if (!v || v->region < 0) {
		pthread_mutex_unlock(&sl->lock);
		return;
	}
	r = v->region;
	/* out of the directory first: the region's slots no longer count */
	__atomic_store_n((uint32_t *)(sl->dir + (size_t)r * VSXD_SLOTS_DIR_ENTRY), 0,
			 __ATOMIC_RELEASE);
	pthread_mutex_lock(&v->lock);
	/* its pages leave the file (the memory they took) */
	(void)madvise(v->map, VSXD_SLOTS_REGION_BYTES, MADV_REMOVE);
	vm_reset(v);
	pthread_mutex_unlock(&v->lock);
	sl->taken[r] = false;
	pthread_mutex_unlock(&sl->lock);
}

/* ---- A VM's connections ---- */

static unsigned ht_pos(const struct vsxd_slots_vm *v, uint64_t id)
{
	uint64_t h = id * 0x9e3779b97f4a7c15ull;

	return (unsigned)(h >> 32) & (v->ht_cap - 1);
}

static int ht_grow(struct vsxd_slots_vm *v)
{
	unsigned cap = v->ht_cap ? 2 * v->ht_cap : 64;
	struct ht_ent *old = v->ht, *nt = calloc(cap, sizeof(*nt));
	unsigned ocap = v->ht_cap;

	if (!nt)
		return -ENOMEM;
	v->ht = nt;
	v->ht_cap = cap;
	for (unsigned i = 0; i < ocap; i++) {
		unsigned p;

		if (!old[i].id)
			continue;
		for (p = ht_pos(v, old[i].id); nt[p].id; p = (p + 1) & (cap - 1))
			;
		nt[p] = old[i];
	}
	free(old);
	return 0;
}

/* @id's entry, or -1 */
static int ht_find(const struct vsxd_slots_vm *v, uint64_t id)
{
	if (!v->ht_cap)
		return -1;
	for (unsigned p = ht_pos(v, id); v->ht[p].id; p = (p + 1) & (v->ht_cap - 1))
		if (v->ht[p].id == id)
			return (int)p;
	return -1;
}

/* Entry @p leaves: the entries after it in its run move back (no
 * tombstones: lookups stay short however many opens and closes) */
static void ht_del(struct vsxd_slots_vm *v, unsigned p)
{
	unsigned mask = v->ht_cap - 1, q = p;

	for (;;) {
		unsigned home;

		v->ht[p].id = 0;
		for (;;) {
			q = (q + 1) & mask;
			if (!v->ht[q].id) {
				v->ht_n--;
				return;
			}
			home = ht_pos(v, v->ht[q].id);
			/* q's entry may fill p unless its home lies in (p, q] */
			if (p <= q ? (home <= p || home > q) : (home <= p && home > q))
				break;
		}
		v->ht[p] = v->ht[q];
		p = q;
	}
}

#define U(member, wire) VSXD_FIELD(VSXD_F_UINT, member, wire, 0)

/* A slot's body (state_slots.h), on the records' field walker */
static const struct vsxd_field body_fields[] = {
	U(id, 8), U(guest_cid, 8), U(peer_cid, 8), U(guest_port, 4), U(peer_port, 4),
	U(type, 1), U(state, 1), U(flags, 1), U(guest_shut, 1), U(host_shut, 1), U(peer, 1),
	VSXD_FIELD_ZERO(2),
	U(cr.buf_alloc, 4), U(cr.fwd_cnt, 4), U(cr.peer_buf_alloc, 4), U(cr.peer_fwd_cnt, 4),
	U(to_guest, 8), U(from_guest, 8),
	VSXD_FIELD(VSXD_F_STR, tag, 0, 0),
};
#define BODY_NFIELDS (sizeof(body_fields) / sizeof(body_fields[0]))

#undef U

/* (the VSXD_SLOT_SIZE - 12 bytes after a slot's header hold the longest
 * body, VSXD_SLOT_BODY + a 255-byte tag) */
static size_t put_body(uint8_t *b, const struct vsxd_state_conn *c)
{
	struct wr w = { .p = b, .cap = VSXD_SLOT_BODY + 255 };
	struct vsxd_state_conn k;

	if (c->flags & ~VSXD_CONN_GUEST_INITIATED) {
		k = *c;           /* a slot keeps that flag alone */
		k.flags &= VSXD_CONN_GUEST_INITIATED;
		c = &k;
	}
	vsxd__put_fields(&w, body_fields, BODY_NFIELDS, c);
	return w.n;
}

/* @c from a slot's body of @len bytes; false: not a connection */
static bool get_body(const uint8_t *b, size_t len, struct vsxd_state_conn *c)
{
	struct rd r = { .p = b, .n = len };

	memset(c, 0, sizeof(*c));
	if (len < VSXD_SLOT_BODY)
		return false;
	vsxd__get_fields(&r, body_fields, BODY_NFIELDS, 0, c);
	if (r.err || r.off != len)
		return false;
	for (const char *t = c->tag; *t; t++)
		if (*t < 0x20 || *t > 0x7e)
			return false;
	return c->id && (c->type == 1 || c->type == 2) &&
	       c->state >= VSXB_CONN_CONNECTING && c->state <= VSXB_CONN_CLOSING &&
	       !(c->flags & ~VSXD_CONN_GUEST_INITIATED) && c->guest_shut <= 3 &&
	       c->host_shut <= 3 && c->peer >= VSXD_PEER_HOST && c->peer <= VSXD_PEER_VSOCK;
}

int vsxd_slots_add(struct vsxd_slots_vm *v, const struct vsxd_state_conn *c)
{
	uint8_t *s;
	uint32_t slot;
	size_t len;
	int err = 0;

	if (!v || !c->id)
		return -ENOENT;
	pthread_mutex_lock(&v->lock);
	if (v->region < 0) {
		err = -ENOENT;
		goto out;
	}
	if (ht_find(v, c->id) >= 0)
		goto out;  /* (named already) */
	if (2 * (v->ht_n + 1) > v->ht_cap && (err = ht_grow(v)) < 0)
		goto out;
	if (v->nfree) {
		slot = v->free[--v->nfree];
	} else if (v->hwm < VSXD_STATE_MAX_CONNS) {
		/* room for its free-list entry, so that a close cannot fail */
		if (v->free_cap <= v->hwm) {
			unsigned cap = v->free_cap ? 2 * v->free_cap : 64;
			uint32_t *nf = realloc(v->free, cap * sizeof(*nf));

			if (!nf) {
				err = -ENOMEM;
				goto out;
			}
			v->free = nf;
			v->free_cap = cap;
		}
		slot = v->hwm++;
	} else {
		err = -ENOSPC;
		goto out;
	}
	s = v->map + (size_t)slot * VSXD_SLOT_SIZE;
	/* body, length and crc under the old mark (FREE, or 0: the end),
	 * then the USED mark */
	len = put_body(s + 12, c);
	le_put(s + 8, len, 4);
	le_put(s + 4, vsxd_crc32(s + 8, 4 + len), 4);
	__atomic_store_n((uint32_t *)s, htole32(VSXD_SLOT_USED), __ATOMIC_RELEASE);
	{
		unsigned p;

		for (p = ht_pos(v, c->id); v->ht[p].id; p = (p + 1) & (v->ht_cap - 1))
			;
		v->ht[p] = (struct ht_ent){ c->id, slot };
		v->ht_n++;
	}
out:
	pthread_mutex_unlock(&v->lock);
	return err;
}

int vsxd_slots_del(struct vsxd_slots_vm *v, uint64_t id)
{
	uint32_t slot;
	int p, err = 0;

	if (!v)
		return -ENOENT;
	pthread_mutex_lock(&v->lock);
	p = v->region < 0 ? -1 : ht_find(v, id);
	if (p < 0) {
		err = -ENOENT;
		goto out;
	}
	slot = v->ht[p].slot;
	ht_del(v, (unsigned)p);
	__atomic_store_n((uint32_t *)(v->map + (size_t)slot * VSXD_SLOT_SIZE),
			 htole32(VSXD_SLOT_FREE), __ATOMIC_RELEASE);
	v->free[v->nfree++] = slot;
out:
	pthread_mutex_unlock(&v->lock);
	return err;
}

unsigned vsxd_slots_count(struct vsxd_slots_vm *v)
{
	unsigned n;

	if (!v)
		return 0;
	pthread_mutex_lock(&v->lock);
	n = v->ht_n;
	pthread_mutex_unlock(&v->lock);
	return n;
}

/* ---- Reading ---- */

static int append(struct vsxd_state_vm *v, const struct vsxd_state_conn *c, unsigned *cap)
{
	if (v->nconns == *cap) {
		unsigned ncap = *cap ? 2 * *cap : 16;
		struct vsxd_state_conn *nc = realloc(v->conns, ncap * sizeof(*nc));

		if (!nc)
			return -ENOMEM;
		v->conns = nc;
		*cap = ncap;
	}
	v->conns[v->nconns++] = *c;
	return 0;
}

/* Region @r's connections into @v */
static int read_region(int fd, uint64_t size, unsigned r, struct vsxd_state_vm *v,
		       char *why, size_t whylen)
{
	uint8_t *buf = malloc(CHUNK_SLOTS * VSXD_SLOT_SIZE);
	uint64_t off = region_off(r);
	unsigned cap = 0;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	for (unsigned base = 0; base < VSXD_STATE_MAX_CONNS && off < size && !err;
	     base += CHUNK_SLOTS, off += CHUNK_SLOTS * VSXD_SLOT_SIZE) {
		ssize_t n = pread(fd, buf, CHUNK_SLOTS * VSXD_SLOT_SIZE, (off_t)off);

		if (n < 0) {
			vsxd__why_set(why, whylen, "reading the connection slots: %s",
				      strerror(errno));
			err = -EIO;
			break;
		}
		for (unsigned i = 0; i < (unsigned)n / VSXD_SLOT_SIZE; i++) {
			const uint8_t *s = buf + (size_t)i * VSXD_SLOT_SIZE;
			uint32_t mark = (uint32_t)le_get(s, 4), len = (uint32_t)le_get(s + 8, 4);
			struct vsxd_state_conn c;

			if (!mark)
				goto done;     /* the region's end */
			if (mark != VSXD_SLOT_USED || len > VSXD_SLOT_SIZE - 12 ||
			    vsxd_crc32(s + 8, 4 + len) != le_get(s + 4, 4) ||
			    !get_body(s + 12, len, &c))
				continue;      /* free, or not a connection */
			err = append(v, &c, &cap);
			if (err) {
				vsxd__why_set(why, whylen, "out of memory");
				break;
			}
		}
		if ((size_t)n < CHUNK_SLOTS * VSXD_SLOT_SIZE)
			break;
	}
done:
	free(buf);
	return err;
}

int vsxd_slots_read(int fd, struct vsxd_state *s, char *why, size_t whylen)
{
	bool seen[VSXD_STATE_MAX_VMS] = { false };
	struct stat st;
	uint8_t *dir;
	ssize_t n;
	int err = 0;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < VSXD_SLOTS_BASE + VSXD_SLOTS_DIR_BYTES || !s->nvms)
		return 0;  /* no slots */
	dir = malloc(VSXD_SLOTS_DIR_BYTES);
	if (!dir)
		return -ENOMEM;
	n = pread(fd, dir, VSXD_SLOTS_DIR_BYTES, (off_t)VSXD_SLOTS_BASE);
	if (n != (ssize_t)VSXD_SLOTS_DIR_BYTES) {
		vsxd__why_set(why, whylen, "reading the connection slots' directory: %s",
			      n < 0 ? strerror(errno) : "short");
		free(dir);
		return -EIO;
	}
	for (unsigned r = 0; r < VSXD_STATE_MAX_VMS && !err; r++) {
		const uint8_t *e = dir + (size_t)r * VSXD_SLOTS_DIR_ENTRY;
		char name[VSXD_STATE_NAME_MAX + 1];
		unsigned nl = e[8];

		if (le_get(e, 4) != VSXD_SLOTS_DIR_MARK || !nl || nl > VSXD_STATE_NAME_MAX ||
		    vsxd_crc32(e + 8, 1 + nl) != le_get(e + 4, 4))
			continue;
		memcpy(name, e + 9, nl);
		name[nl] = '\0';
		for (unsigned i = 0; i < s->nvms; i++) {
			if (strcmp(s->vms[i].name, name) || s->vms[i].nconns || seen[i])
				continue;
			seen[i] = true;   /* (one region per VM) */
			err = read_region(fd, (uint64_t)st.st_size, r, &s->vms[i], why, whylen);
			break;
		}
	}
	free(dir);
	return err;
}
