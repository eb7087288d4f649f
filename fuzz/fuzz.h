/*
 * Shared pieces of the fuzz harnesses (fuzz/README.md): an input reader,
 * a synchronous fake event loop (struct vsxu_loop) that runs watches and
 * timers only when the harness says so, and a minimal vhost-user
 * front-end (QEMU's side) for the harnesses that drive a device.
 *
 * Every harness defines LLVMFuzzerTestOneInput; built with libFuzzer
 * (make fuzz) or with fuzz/replay.c's main() (make check).
 */
#ifndef VSX_FUZZ_H
#define VSX_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vhost-user/loop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- Input ---- */
struct fin {
	const uint8_t *p;
	size_t n;
};

static inline bool fin_left(const struct fin *f)
{
	return f->n > 0;
}

/* Missing bytes read as zero. */
static inline uint64_t fin_uint(struct fin *f, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++) {
		uint64_t b = 0;

		if (f->n) {
			b = *f->p++;
			f->n--;
		}
		v |= b << (8 * i);
	}
	return v;
}

static inline uint8_t fin_u8(struct fin *f)
{
	return (uint8_t)fin_uint(f, 1);
}

static inline uint16_t fin_u16(struct fin *f)
{
	return (uint16_t)fin_uint(f, 2);
}

static inline uint32_t fin_u32(struct fin *f)
{
	return (uint32_t)fin_uint(f, 4);
}

/* Copy up to @len bytes into @dst (the rest zeroed); returns bytes taken. */
size_t fin_bytes(struct fin *f, void *dst, size_t len);

/* ---- Fake loop ---- */
/* The loop every harness uses; fl_reset() frees everything left over
 * (leaks of the code under test still show: the loop only owns its own
 * records, and complains about watches the code forgot to remove). */
extern const struct vsxu_loop fl_loop;
/* Run the callbacks of watched fds that are ready now (poll, timeout 0),
 * up to @rounds passes. Returns callbacks run. */
unsigned fl_run(unsigned rounds);
/* Fire every armed timer once (in creation order). */
unsigned fl_fire_timers(void);
/* Live watches/timers (a harness checks they all went away). */
unsigned fl_watches(void);
unsigned fl_timers(void);

/* ---- Scratch directory (one per process) ---- */
const char *fz_dir(void);

/* ---- Minimal vhost-user front-end ---- */
int fe_connect(const char *path);
/* Send header + @size payload bytes (@plen of them given; the rest of
 * @size is not sent) with @nfds fds. 0 or -errno. */
int fe_send_raw(int fd, uint32_t req, uint32_t flags, uint32_t size,
		const void *payload, size_t plen, const int *fds, unsigned nfds);
int fe_send(int fd, uint32_t req, const void *payload, uint32_t size,
	    const int *fds, unsigned nfds);
/* Read what the back-end wrote (discarded) without blocking. */
void fe_drain(int fd);
/* Read one reply's u64 payload (after the back-end ran): 0 or -errno. */
int fe_reply_u64(int fd, uint64_t *v);

#endif
