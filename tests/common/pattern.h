/*
 * Position-dependent test data: byte i of a stream is a fixed function of
 * (seed, i), so a receiver checks every byte it gets, whatever the sizes of
 * its reads and writes. Plain C, no criterion: the guest programs of
 * tests/vm/ link pattern.c too (it goes into their _SOURCES).
 *
 * Two patterns, which must not be mixed up:
 *  - pattern_*: the conversation pattern of the lab programs (guest_tests,
 *    vsx_peer, tcp_peer). The two ends of a conversation may be different
 *    programs, in the guest and on the host, so they share this one
 *    definition; changing it changes what every one of them expects.
 *  - pat32*: the data of the criterion tests over hybrid sockets
 *    (test_hybrid, test_auth).
 */
#ifndef VSX_TESTS_PATTERN_H
#define VSX_TESTS_PATTERN_H

#include <stddef.h>
#include <stdint.h>

/*
 * Byte i of stream @seed is byte (i % 8) of mix64(key ^ i / 8), key =
 * mix64(@seed). Fills @b with the @n bytes from stream offset @off.
 */
void pattern_fill(uint64_t seed, uint64_t off, uint8_t *b, size_t n);

/*
 * The stream offset of the first of the @n bytes at @got (stream offset
 * @off) that is off the pattern, or UINT64_MAX when all are right.
 * @scratch (n bytes, the caller's) receives the expected bytes.
 */
uint64_t pattern_mismatch(uint64_t seed, uint64_t off, const uint8_t *got, size_t n,
			  uint8_t *scratch);

/* Byte @i of stream @seed. */
uint8_t pat32(uint32_t seed, size_t i);

/* Fill @p with the @n bytes of stream @seed from offset @off. */
void pat32_fill(uint8_t *p, size_t n, uint32_t seed, size_t off);

/* The stream offset of the first of the @n bytes at @p (stream offset @off)
 * that is off the pattern, or SIZE_MAX. */
size_t pat32_mismatch(const uint8_t *p, size_t n, uint32_t seed, size_t off);

#endif /* VSX_TESTS_PATTERN_H */
