/*
 * A per-test temporary directory (see tmpdir.h).
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "tmpdir.h"

void tmpdir_make(char *dir, size_t len, const char *tmpl)
{
	int n = snprintf(dir, len, "%s", tmpl);

	cr_assert(n > 0 && (size_t)n < len, "template %s does not fit", tmpl);
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(p);
}

void tmpdir_remove(const char *dir)
{
	if (dir[0])
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void tmpdir_path(char *buf, size_t len, const char *dir, const char *name)
{
	int n = snprintf(buf, len, "%s/%s", dir, name);

	cr_assert(n > 0 && (size_t)n < len, "path %s/%s does not fit", dir, name);
}
