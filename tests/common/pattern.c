/*
 * Position-dependent test data (see pattern.h).
 */
#include <string.h>

#include "pattern.h"

/* ---- The conversation pattern of the lab programs ----------------------- */

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void pattern_fill(uint64_t seed, uint64_t off, uint8_t *b, size_t n)
{
	uint64_t key = mix64(seed), w;
	unsigned sh;

	while (n) {
		w = mix64(key ^ (off >> 3));
		sh = off & 7;
		if (!sh && n >= 8) {
			b[0] = (uint8_t)w;
			b[1] = (uint8_t)(w >> 8);
			b[2] = (uint8_t)(w >> 16);
			b[3] = (uint8_t)(w >> 24);
			b[4] = (uint8_t)(w >> 32);
			b[5] = (uint8_t)(w >> 40);
			b[6] = (uint8_t)(w >> 48);
			b[7] = (uint8_t)(w >> 56);
			b += 8, off += 8, n -= 8;
			continue;
		}
		for (; sh < 8 && n; sh++, n--, off++)
			*b++ = (uint8_t)(w >> (8 * sh));
	}
}

uint64_t pattern_mismatch(uint64_t seed, uint64_t off, const uint8_t *got, size_t n,
			  uint8_t *scratch)
{
	size_t i;

	pattern_fill(seed, off, scratch, n);
	if (memcmp(got, scratch, n) == 0)
		return UINT64_MAX;
	for (i = 0; got[i] == scratch[i]; i++)
		;
	return off + i;
}

/* ---- The criterion tests' pattern --------------------------------------- */

uint8_t pat32(uint32_t seed, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ seed;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return (uint8_t)x;
}

void pat32_fill(uint8_t *p, size_t n, uint32_t seed, size_t off)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = pat32(seed, off + i);
}

size_t pat32_mismatch(const uint8_t *p, size_t n, uint32_t seed, size_t off)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != pat32(seed, off + i))
			return off + i;
	return SIZE_MAX;
}
