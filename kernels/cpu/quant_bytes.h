/*
 * quant_bytes.h - little-endian loads and stores of block fields, and the
 * quantizers' rounding and largest magnitude, shared by the kernels' C
 * files (not installed).
 */
#ifndef CP_QUANT_BYTES_H
#define CP_QUANT_BYTES_H

#include <math.h>
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

/* trunc(v) clamped to [0, hi]; NaN gives 0. */
static inline int
trunc_clamp(float v, int hi)
{
	if (!(v > 0.0f))
		return 0;
	return v >= (float)hi ? hi : (int)v;
}

/*
 * The value of largest magnitude among x[0..n) (the first one on a tie) in
 * *max, its magnitude returned; NaN is skipped.
 */
static inline float
signed_max(const float *x, int n, float *max)
{
	float amax = 0.0f;

	*max = 0.0f;
	for (int i = 0; i < n; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			*max = x[i];
		}
	}
	return amax;
}

#endif
