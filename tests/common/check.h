/*
 * Assertions for the criterion tests that print both sides: what the
 * expression gave and what was wanted, with the caller's context string.
 * Header only. RC_OK and RC_ERR print vsx_strerror() of the result, so the
 * test links libvsx (or a copy of it, such as tests/vmbus/libvsxsim.la).
 */
#ifndef VSX_TESTS_CHECK_H
#define VSX_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

/* @got == @want, as integers; EQ without a context (anything after @want
 * is ignored). */
#define EQ(got, want, ...)                                                       \
	do {                                                                     \
		long long g_ = (long long)(got), w_ = (long long)(want);         \
		cr_assert_eq(g_, w_, "%s = %lld, want %s = %lld", #got, g_, #want, w_); \
	} while (0)
/* @hay is not NULL and contains @needle; HAS without a context. */
#define HAS(hay, needle)                                                         \
	do {                                                                     \
		const char *h_ = (hay);                                          \
		cr_assert(h_ && strstr(h_, (needle)), "\"%s\" lacks \"%s\"", h_, (needle)); \
	} while (0)
/* @got == @want, as integers. */
#define EQ_INT(got, want, ctx)                                                   \
	do {                                                                     \
		long long g_ = (long long)(got), w_ = (long long)(want);         \
		cr_assert_eq(g_, w_, "%s: %s = %lld, want %s = %lld", (ctx), #got, \
			     g_, #want, w_);                                     \
	} while (0)
/* @got and @want are equal strings. */
#define EQ_STR(got, want, ctx)                                                   \
	do {                                                                     \
		const char *g_ = (got), *w_ = (want);                            \
		cr_assert_str_eq(g_, w_, "%s: %s = \"%s\", want \"%s\"", (ctx), #got, \
				 g_, w_);                                        \
	} while (0)
/* @hay is not NULL and contains @needle. */
#define HAS_STR(hay, needle, ctx)                                                \
	do {                                                                     \
		const char *h_ = (hay), *n_ = (needle);                          \
		cr_assert(h_ && strstr(h_, n_), "%s: \"%s\" does not contain \"%s\"", \
			  (ctx), h_ ? h_ : "(null)", n_);                        \
	} while (0)
/* A call that must succeed (return >= 0). */
#define RC_OK(expr, ctx)                                                         \
	do {                                                                     \
		long long r_ = (long long)(expr);                                \
		cr_assert(r_ >= 0, "%s: %s = %lld (%s)", (ctx), #expr, r_,       \
			  vsx_strerror((int)r_));                                \
	} while (0)
/* A call that must fail with @err; its vsx_strerror detail into @msg (a
 * char array). */
#define RC_ERR(expr, err, msg, ctx)                                              \
	do {                                                                     \
		long long r_ = (long long)(expr);                                \
		snprintf((msg), sizeof(msg), "%s", vsx_strerror((int)r_));       \
		cr_assert_eq(r_, (long long)(err), "%s: %s = %lld (%s), want %s", \
			     (ctx), #expr, r_, (msg), #err);                     \
	} while (0)

#endif /* VSX_TESTS_CHECK_H */
