/*
 * bench/coldsrc: what a cold source costs a socketpair writer (bench/README.md,
 * "The cost targets of issue #23 item 4").
 *
 *   coldsrc WRITE_SIZE [AREA ...]      (sizes in bytes; K, M suffixes)
 *
 * For each AREA (default: WRITE_SIZE, 8M, 64M) a writer thread sends 1 GiB
 * over an AF_UNIX socketpair in WRITE_SIZE writes whose source rotates over
 * AREA bytes (AREA = WRITE_SIZE: one buffer, hot in the writer's cache, as
 * vsxbench's socketpair writer; a large AREA: every write from memory the
 * cache no longer holds, as vsxd's copies from guest memory), a reader
 * thread drains it. Prints the writer thread's CPU seconds per GiB
 * (CLOCK_THREAD_CPUTIME_ID) for each.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TOTAL (1ull << 30)
#define RBUF (1u << 20)

static double thread_cpu(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *reader(void *arg)
{
	int fd = *(int *)arg;
	char *b = malloc(RBUF);
	unsigned long long n = 0;
	ssize_t r;

	while (b && n < TOTAL && (r = read(fd, b, RBUF)) > 0)
		n += (unsigned long long)r;
	free(b);
	return NULL;
}

static size_t size_arg(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end) {
		fprintf(stderr, "coldsrc: not a size: %s\n", s);
		exit(2);
	}
	return (size_t)v;
}

static double run(size_t wsize, size_t area)
{
	char *a = aligned_alloc(4096, (area + 4095) & ~(size_t)4095);
	unsigned long long n = 0;
	size_t off = 0;
	pthread_t th;
	double c0;
	int sv[2];

	if (!a || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		fprintf(stderr, "coldsrc: %s\n", strerror(errno));
		exit(1);
	}
	memset(a, 0x5a, area);
	pthread_create(&th, NULL, reader, &sv[1]);
	c0 = thread_cpu();
	while (n < TOTAL) {
		ssize_t r = write(sv[0], a + off, wsize);

		if (r <= 0) {
			fprintf(stderr, "coldsrc: write: %s\n", strerror(errno));
			exit(1);
		}
		n += (unsigned long long)r;
		off += wsize;
		if (off + wsize > area)
			off = 0;
	}
	c0 = thread_cpu() - c0;
	close(sv[0]);
	pthread_join(th, NULL);
	close(sv[1]);
	free(a);
	return c0 * (double)(1ull << 30) / (double)TOTAL;
}

int main(int argc, char **argv)
{
	size_t wsize, areas[16];
	int n = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: coldsrc WRITE_SIZE [AREA ...]\n");
		return 2;
	}
	wsize = size_arg(argv[1]);
	for (int i = 2; i < argc && n < 16; i++)
		areas[n++] = size_arg(argv[i]);
	if (!n) {
		areas[n++] = wsize;
		areas[n++] = 8u << 20;
		areas[n++] = 64u << 20;
	}
	for (int i = 0; i < n; i++) {
		if (areas[i] < wsize || !wsize) {
			fprintf(stderr, "coldsrc: an area smaller than a write\n");
			return 2;
		}
		printf("coldsrc write=%zu area=%zu writer_cpu_s_per_gib=%.3f\n", wsize, areas[i],
		       run(wsize, areas[i]));
		fflush(stdout);
	}
	return 0;
}
