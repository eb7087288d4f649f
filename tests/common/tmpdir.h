/*
 * A per-test temporary directory for the criterion tests that make files
 * and sockets (test_hybrid, test_auth, test_probe). The caller owns the
 * buffer that holds the directory's path; these only fill and use it.
 * Failures assert, so call them from the test's own thread.
 */
#ifndef VSX_TESTS_TMPDIR_H
#define VSX_TESTS_TMPDIR_H

#include <stddef.h>

/* Create a fresh directory from the mkdtemp(3) template @tmpl (ending in
 * XXXXXX) and write its path into @dir (@len bytes). */
void tmpdir_make(char *dir, size_t len, const char *tmpl);

/* Remove @dir and everything below it (without following links); nothing
 * when @dir is empty (never made). */
void tmpdir_remove(const char *dir);

/* "@dir/@name" into @buf (@len bytes), which it must fit. */
void tmpdir_path(char *buf, size_t len, const char *dir, const char *name);

#endif /* VSX_TESTS_TMPDIR_H */
