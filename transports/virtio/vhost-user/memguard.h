/*
 * The guest-memory guard: a VMM may shrink the file behind guest memory
 * after SET_MEM_TABLE (a memfd without F_SEAL_SHRINK, a memory-backend-file
 * truncated under us). The next access to a page past the new end raises
 * SIGBUS, which would kill the whole daemon and every other VM with it.
 *
 * Every guest-memory mapping is registered here. A SIGBUS inside a
 * registered mapping replaces that mapping in place with anonymous zero
 * pages (mmap MAP_FIXED: async-signal-safe) and marks it faulted; the
 * access restarts and succeeds (it reads zeros, its writes go nowhere), and
 * the mapping's owner sees the mark at its next check (vsxu_memguard_faulted)
 * and drops that one device. A SIGBUS anywhere else gets the action that
 * was there before (the default: the process dies, as without the guard).
 * Kernel copies from or to such pages (readv, sendmsg on guest iovecs)
 * fail with EFAULT instead of raising the signal: their callers treat
 * EFAULT the same way.
 *
 * The signal comes to the thread that touched the page, and that thread
 * must not block SIGBUS: a blocked SIGBUS raised by an access is delivered
 * with its default action (the process dies) and no handler runs. So every
 * thread that touches guest memory calls vsxu_memguard_thread once it may
 * (vsxu_memguard_add does, for the thread that maps: the device's loop);
 * the guard is process-wide, the mask is each thread's.
 *
 * Registration and the check run on one thread (the loop's); the handler
 * runs on the thread that faulted, reading slots that are written before a
 * mapping is used and cleared after it is unmapped.
 */
#ifndef VSXU_VU_MEMGUARD_H
#define VSXU_VU_MEMGUARD_H

#include <stdbool.h>
#include <stddef.h>

/* Make the guard hold on the calling thread: the handler in force for
 * SIGBUS (installed, or installed again if something replaced it, which
 * then gets the SIGBUSes outside guest memory) and SIGBUS unblocked in
 * this thread's mask. 0 or a negative errno. */
int vsxu_memguard_thread(void);
/* A slot for [@map, @map + @len), numbered from 1; 0 when every slot is
 * taken (the mapping is then unguarded; the caller logs it). Makes the
 * guard hold on the calling thread (vsxu_memguard_thread). */
int vsxu_memguard_add(void *map, size_t len);
/* Forget slot @slot (0: nothing) before the mapping goes. */
void vsxu_memguard_del(int slot);
/* Did a SIGBUS hit slot @slot's mapping? */
bool vsxu_memguard_faulted(int slot);

/* SIGBUSes absorbed so far, in any slot (never goes down). */
extern unsigned vsxu_memguard_hits;

/* False when no mapping ever faulted: the data path asks every round, and
 * a fault is rare, so the common answer is one load, not a walk of the
 * regions (an atomic load: the handler may run on another thread). */
static inline bool vsxu_memguard_any(void)
{
	return __atomic_load_n(&vsxu_memguard_hits, __ATOMIC_ACQUIRE) != 0;
}

#endif
