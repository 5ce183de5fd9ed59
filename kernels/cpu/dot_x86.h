/*
 * dot_x86.h - pieces the AVX2 and the AVX-512 kernels share (dot_avx2.c,
 * dot_avx512.c, attn_avx2.c, quant_avx2.c).  Include it after
 * <immintrin.h> and, in dot_avx512.c, after the target pragma, so that
 * each file compiles them for its own target.
 */
#ifndef CP_DOT_X86_H
#define CP_DOT_X86_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

/*
 * The locality hint of the weight streams' software prefetches: into
 * every cache level (PREFETCHT0).  The non-temporal hint (0), which skips
 * the outer caches, ran these streams at a third of the speed on an Intel
 * Xeon VM with a 480 MiB L3 (`cpbench kernels -w f16,q8_0 -m 1,2 -k 2048
 * -n 65536 -t 1`: 5.3-6.9 GB/s against 16-17.6 with T0, and 14-15 with
 * no prefetch at all); T1 and T2 ran 5-10% below T0 there.
 */
#define WEIGHT_PF_HINT 3

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): dot.h's reduction. */
static ALWAYS_INLINE float
hsum_f32(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
	    _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/*
 * The largest lane of v, ((a0 m a4) m (a2 m a6)) m ((a1 m a5) m (a3 m a7))
 * with a m b = _mm_max_ps(a, b): b where either is NaN.
 */
static ALWAYS_INLINE float
hmax_f32(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v),
	    _mm256_extractf128_ps(v, 1));

	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* The sum of v's lanes, modulo 2^32. */
static ALWAYS_INLINE int
hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
	    _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* The f16 at p as a float (exact; F16C). */
static ALWAYS_INLINE float
f16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return _cvtsh_ss(v);
}

/* Activation row r of x (rows bx bytes apart). */
static ALWAYS_INLINE const void *
xrow(const char *x, size_t bx, int r)
{
	return x + (size_t)r * bx;
}

/* Q8_K block b of activation row r. */
static ALWAYS_INLINE const struct blk_q8_K *
xblk(const char *x, size_t bx, int r, int b)
{
	return (const struct blk_q8_K *)xrow(x, bx, r) + b;
}

/*
 * sc[0..7], mn[0..7] of a Q4_K / Q5_K block's 12 scale bytes, as 16 int16
 * lanes.  Bytes 0-3 hold sc[0..3] (low 6 bits) and bits 4-5 of sc[4..7]
 * (top 2), bytes 4-7 mn[0..3] and bits 4-5 of mn[4..7], bytes 8-11 the low
 * 4 bits of sc[4..7] (low nibbles) and mn[4..7] (high nibbles).
 */
static ALWAYS_INLINE __m256i
k_scales_mins(const uint8_t *q)
{
	uint32_t u[3], sc_lo, sc_hi, mn_lo, mn_hi;

	memcpy(u, q, sizeof(u));
	sc_lo = u[0] & 0x3f3f3f3f;
	mn_lo = u[1] & 0x3f3f3f3f;
	sc_hi = (u[2] & 0x0f0f0f0f) | (u[0] >> 6 & 0x03030303) << 4;
	mn_hi = (u[2] >> 4 & 0x0f0f0f0f) | (u[1] >> 6 & 0x03030303) << 4;
	return _mm256_cvtepu8_epi16(_mm_setr_epi32((int)sc_lo, (int)sc_hi,
	    (int)mn_lo, (int)mn_hi));
}

#endif
