/*
 * quant_bytes.h - little-endian loads and stores of block fields, and the
 * quantizers' rounding, shared by the kernels' C files (not installed).
 */
#ifndef CP_QUANT_BYTES_H
#define CP_QUANT_BYTES_H

#include <stdint.h>

static inline uint16_t
ld16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline void
st16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline uint32_t
ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

/*
 * v rounded to the nearest integer, ties to even (ggml's nearest_int()),
 * clamped to [lo, hi] (|lo|, |hi| < 2^22), made total: NaN counts as 0, so
 * hostile input never converts out of range.  Adding and removing
 * 1.5 * 2^23 rounds a float below 2^22 in magnitude in the default
 * rounding mode, without a library call.
 */
static inline int
round_clamp(float v, int lo, int hi)
{
	float t;

	if (v != v)
		v = 0.0f;
	if (v <= (float)lo)
		return lo;
	if (v >= (float)hi)
		return hi;
	t = v + 12582912.0f;
	return (int)(t - 12582912.0f);
}

#endif
