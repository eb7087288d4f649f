/* The guest-memory guard: see memguard.h. */
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
unsigned vsx_memguard_hits;
static struct sigaction old_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	(void)uc;
	for (unsigned i = 0; i < SLOTS; i++) {
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
		__atomic_add_fetch(&vsx_memguard_hits, 1, __ATOMIC_RELEASE);
		return;
	}
	/* not guest memory: what would have happened without us */
	sigaction(sig, &old_bus, NULL);
}

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old_bus);
}

int vsx_memguard_add(void *map, size_t len)
{
	pthread_once(&once, install);
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

void vsx_memguard_del(int slot)
{
	if (slot < 1 || slot > SLOTS)
		return;
	__atomic_store_n(&slots[slot - 1].start, 0, __ATOMIC_RELEASE);
	slots[slot - 1].faulted = 0;
	__atomic_store_n(&slots[slot - 1].claimed, false, __ATOMIC_RELEASE);
}

bool vsx_memguard_faulted(int slot)
{
	return slot >= 1 && slot <= SLOTS && slots[slot - 1].faulted;
}
