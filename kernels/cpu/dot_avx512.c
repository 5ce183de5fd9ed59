/*
 * dot_avx512.c - kernels for CPUs with AVX-512 VL, BW and VNNI (called
 * only when cpu_has_avx512vnni()), compiled for that target by the pragma
 * below, so the build needs no extra flags.
 *
 * They use 256-bit vectors only: the lanes, and so the summation order of
 * dot.h, are those of the AVX2 kernels and the scalar references, bit for
 * bit.  What AVX-512 adds is VPDPBUSD (four byte products summed into a
 * 32-bit lane in one instruction, exactly) and 32 vector registers, which
 * allow 4 x 4 tiles.
 *
 * Q8_0 x Q8_0: VPDPBUSD multiplies unsigned by signed bytes, so weight
 * bytes w are offset to w + 128 (xor 0x80) and each lane starts from
 * -128 (x0 + x1 + x2 + x3) of its four activation bytes: the lane then
 * holds sum(w x) exactly, the value the AVX2 kernel gets with
 * sign/maddubs/madd.
 */
#include "dot.h"

#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target( \
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni"))), \
    apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq," \
    "avx512vnni")
#endif

#include <immintrin.h>
#include <string.h>

#include "quant.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as dot_avx2.c */
static ALWAYS_INLINE float
hsum_f32(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
	    _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* The f16 at p as a float (exact). */
static ALWAYS_INLINE float
f16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return _cvtsh_ss(v);
}

/* ---- Q8_0 ------------------------------------------------------------- */

#define Q8B sizeof(struct blk_q8_0)

/*
 * NW <= 4 weight rows (bw bytes apart) times NX <= 4 activation rows;
 * weight row o's results go to y[r * ldy + o * yo].  Per block and pair:
 * lanes = sum of four products, then acc = fma(d_w d_x, lanes, acc).
 */
static ALWAYS_INLINE void
tile_q8_0(int nb, const char *w, size_t bw, int NW, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	const __m256i off = _mm256_set1_epi8((char)0x80);
	__m256 acc[4][4];

#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[o][r] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++) {
		__m256i wq[4];
		__m256 dw[4];

#pragma GCC unroll 4
		for (int o = 0; o < NW; o++) {
			const uint8_t *p = (const uint8_t *)w + (size_t)o * bw +
			    (size_t)b * Q8B;

			wq[o] = _mm256_xor_si256(_mm256_loadu_si256(
			    (const __m256i *)(p + 2)), off);
			dw[o] = _mm256_set1_ps(f16(p));
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const uint8_t *p = (const uint8_t *)x + (size_t)r * bx +
			    (size_t)b * Q8B;
			const __m256i zero = _mm256_setzero_si256();
			__m256i xv = _mm256_loadu_si256((const __m256i *)
			    (p + 2));
			__m256i nc = _mm256_sub_epi32(zero,
			    _mm256_dpbusd_epi32(zero, off, xv));
			__m256 dx = _mm256_set1_ps(f16(p));

#pragma GCC unroll 4
			for (int o = 0; o < NW; o++) {
				__m256i lanes = _mm256_dpbusd_epi32(nc, wq[o],
				    xv);

				acc[o][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw[o],
				    dx), _mm256_cvtepi32_ps(lanes), acc[o][r]);
			}
		}
	}
#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			y[(size_t)r * ldy + (size_t)o * yo] =
			    hsum_f32(acc[o][r]);
}

/* Tiles of 4 x 4 (one activation row: 4 weight rows q apart, as dot_avx2.c). */
void
dot_q8_0_q8_0_avx512(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;
	int nb = k / QUANT_QK, o = 0, r, q;

	if (nx == 1) {
		q = nw / 4;
		for (; o < q; o++)
			tile_q8_0(nb, wc + (size_t)o * bw, (size_t)q * bw, 4,
			    xc, bx, 1, y + o, ldy, (size_t)q);
		for (o = 4 * q; o < nw; o++)
			tile_q8_0(nb, wc + (size_t)o * bw, bw, 1, xc, bx, 1,
			    y + o, ldy, 1);
		return;
	}
#define T(NW, NX) tile_q8_0(nb, wc + (size_t)o * bw, bw, NW, \
	xc + (size_t)r * bx, bx, NX, y + (size_t)r * ldy + o, ldy, 1)
#define ROWS(NW)							\
	do {								\
		for (r = 0; r + 4 <= nx; r += 4)			\
			T(NW, 4);					\
		switch (nx - r) {					\
		case 3: T(NW, 3); break;				\
		case 2: T(NW, 2); break;				\
		case 1: T(NW, 1); break;				\
		}							\
	} while (0)
	for (; o + 4 <= nw; o += 4)
		ROWS(4);
	switch (nw - o) {
	case 3: ROWS(3); break;
	case 2: ROWS(2); break;
	case 1: ROWS(1); break;
	}
#undef ROWS
#undef T
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
