/* Small helpers shared by the core and the transports. */
#include <fcntl.h>
#include <poll.h>
#include <time.h>

#include "vsx-int.h"

int64_t vsx__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vsx__wait_fd(int fd, short events, int64_t deadline_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int64_t left;
	int n;

	for (;;) {
		left = deadline_ms < 0 ? -1 : deadline_ms - vsx__now_ms();
		if (deadline_ms >= 0 && left < 0)
			left = 0;
		n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (n > 0)
			return p.revents;
		if (n == 0) {
			if (deadline_ms >= 0 && vsx__now_ms() >= deadline_ms)
				return 0;
			continue;
		}
		if (errno != EINTR)
			return -errno;
	}
}

int vsx__set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}
