/*
 * A main() for the fuzz harnesses without libFuzzer: every file named on
 * the command line (or found in a directory named there) is passed to
 * LLVMFuzzerTestOneInput once. With no argument it replays
 * $srcdir/fuzz/corpus/NAME and $srcdir/fuzz/regress/NAME (make check),
 * NAME being the harness's (FUZZ_NAME). Exits non-zero when nothing was
 * found; a crash is the harness's (ASan, abort).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_NAME
#error "FUZZ_NAME must name the harness"
#endif

static unsigned replayed;

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL, *exact;
	size_t len = 0, cap = 0, n;

	if (!f) {
		fprintf(stderr, "replay %s: %s: %s\n", FUZZ_NAME, path, strerror(errno));
		return -1;
	}
	for (;;) {
		if (len == cap) {
			cap = cap ? 2 * cap : 65536;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		n = fread(buf + len, 1, cap - len, f);
		if (!n)
			break;
		len += n;
	}
	fclose(f);
	/* exactly @len bytes, so that a read past the end is caught */
	exact = malloc(len ? len : 1);
	if (!exact)
		abort();
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	replayed++;
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_path(const char *path, int must_exist)
{
	struct stat st;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	int rc = 0;
	DIR *d;

	if (stat(path, &st) < 0) {
		if (!must_exist && errno == ENOENT)
			return 0;
		fprintf(stderr, "replay %s: %s: %s\n", FUZZ_NAME, path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path);
	d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		if (!names || asprintf(&names[n], "%s/%s", path, de->d_name) < 0)
			abort();
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp);
	for (size_t i = 0; i < n; i++) {
		if (replay_file(names[i]) < 0)
			rc = -1;
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = 0;

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			if (replay_path(argv[i], 1) < 0)
				rc = 1;
	} else {
		const char *top = getenv("srcdir");
		char *corpus, *regress;

		if (!top)
			top = ".";
		if (asprintf(&corpus, "%s/fuzz/corpus/%s", top, FUZZ_NAME) < 0 ||
		    asprintf(&regress, "%s/fuzz/regress/%s", top, FUZZ_NAME) < 0)
			abort();
		if (replay_path(corpus, 1) < 0 || replay_path(regress, 0) < 0)
			rc = 1;
		free(corpus);
		free(regress);
	}
	printf("replay %s: %u inputs, no crash\n", FUZZ_NAME, replayed);
	if (!replayed)
		rc = 1;
	return rc;
}
