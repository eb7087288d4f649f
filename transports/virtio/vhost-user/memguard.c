/* The guest-memory guard: see memguard.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "memguard.h"

#define SLOTS 4096   /* 8 regions per device: 512 devices */

struct slot {
	uintptr_t start;             /* 0: free */
	size_t len;
	volatile sig_atomic_t faulted;
	bool claimed;                /* taken (add), before start is set */
};

static struct slot slots[SLOTS];
unsigned vsxu_memguard_hits;
static struct sigaction old_bus;
static pthread_mutex_t install_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	(void)uc;
	/* sent (kill, raise) rather than raised by an access: si_addr means
	 * nothing then */
	for (unsigned i = 0; si->si_code > 0 && i < SLOTS; i++) {
		struct slot *s = &slots[i];
		uintptr_t start = __atomic_load_n(&s->start, __ATOMIC_ACQUIRE);

		if (!start || a < start || a - start >= s->len)
			continue;
		/* zero pages where the file's pages were: the access restarts */
		if (mmap((void *)start, s->len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
		    MAP_FAILED)
			break;
		s->faulted = 1;
		/* after the mark: a reader that sees the count sees the mark */
		__atomic_add_fetch(&vsxu_memguard_hits, 1, __ATOMIC_RELEASE);
		return;
	}
	/* not guest memory: what would have happened without us (an access
	 * runs again and faults again; a sent signal is sent again) */
	sigaction(sig, &old_bus, NULL);
	if (si->si_code <= 0)
		raise(sig);
}

/* Our handler in force for SIGBUS, even if someone replaced it since (a
 * library, a sanitizer's runtime): what it replaces is where a SIGBUS
 * outside guest memory goes. Never our own, or such a SIGBUS would come
 * back to us for ever. */
static int install(void)
{
	struct sigaction sa, cur;
	int err = 0;

	pthread_mutex_lock(&install_mu);
	if (sigaction(SIGBUS, NULL, &cur) < 0) {
		err = -errno;
	} else if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_sigbus) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		old_bus = cur;
		if (sigaction(SIGBUS, &sa, NULL) < 0)
			err = -errno;
	}
	pthread_mutex_unlock(&install_mu);
	return err;
}

int vsxu_memguard_thread(void)
{
	sigset_t bus;
	int err = install(), rc;

	/* A SIGBUS the faulting thread blocks is not held for later: the
	 * kernel delivers it with its default action, which kills the
	 * process, handler or not (force_sig_fault). */
	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	rc = pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
	return err ? err : -rc;
}

int vsxu_memguard_add(void *map, size_t len)
{
	/* this thread is the one that touches the mapping */
	vsxu_memguard_thread();
	for (unsigned i = 0; i < SLOTS; i++) {
		bool free_slot = false;

		/* several worker threads may add at once: claim, then fill; the
		 * handler looks only at slots whose start is set */
		if (slots[i].start || !__atomic_compare_exchange_n(&slots[i].claimed, &free_slot,
								   true, false, __ATOMIC_ACQUIRE,
								   __ATOMIC_RELAXED))
			continue;
		slots[i].len = len;
		slots[i].faulted = 0;
		__atomic_store_n(&slots[i].start, (uintptr_t)map, __ATOMIC_RELEASE);
		return (int)i + 1;
	}
	return 0;
}

void vsxu_memguard_del(int slot)
{
	if (slot < 1 || slot > SLOTS)
		return;
	__atomic_store_n(&slots[slot - 1].start, 0, __ATOMIC_RELEASE);
	slots[slot - 1].faulted = 0;
	__atomic_store_n(&slots[slot - 1].claimed, false, __ATOMIC_RELEASE);
}

bool vsxu_memguard_faulted(int slot)
{
	return slot >= 1 && slot <= SLOTS && slots[slot - 1].faulted;
}
