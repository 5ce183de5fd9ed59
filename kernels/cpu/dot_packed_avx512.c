/*
 * dot_packed_avx512.c - the kernels over repacked weights (repack.h), for
 * CPUs with AVX-512 VL, BW, DQ and VNNI (called only when
 * cpu_use_avx512()), compiled for that target by the pragma below.
 *
 * A 512-bit register holds two weight rows' 8-lane accumulators side by
 * side (lanes 0-7 row 2i, 8-15 row 2i + 1): each lane sums exactly what
 * the same lane of the 256-bit kernels (dot_avx512.c) sums, in the same
 * order, and each half is reduced with hsum_f32(), so the results are
 * dot.h's, bit for bit.  What the layout saves: one load brings two rows'
 * block, the weight bytes are stored already offset for VPDPBUSD, and the
 * four rows' scales convert and multiply in one instruction each.
 *
 * Tiles are one or two groups (dot_tiles.h's walk, over groups of
 * REPACK_ROWS rows instead of rows) times up to four activation rows.
 */
#include "repack.h"
#include "dot_tiles.h"

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
#include <stdbool.h>
#include <string.h>

#include "dot_x86.h"
#include "quant.h"

#define PT 4		/* activation rows per tile */

/* y[r * ldy + i] for the two rows of a: i = 0 the low half, 1 the high. */
static ALWAYS_INLINE void
store_pair(__m512 a, float *y)
{
	y[0] = hsum_f32(_mm512_castps512_ps256(a));
	y[1] = hsum_f32(_mm512_extractf32x8_ps(a, 1));
}

/*
 * s[i] in lanes 8j..8j+7 of the result, for i = 2 * h + j (j < 2): the
 * scales of rows 2h and 2h + 1 spread over their halves.
 */
static ALWAYS_INLINE __m512
spread(__m128 s, int h)
{
	const __m512i idx = _mm512_setr_epi32(2 * h, 2 * h, 2 * h, 2 * h,
	    2 * h, 2 * h, 2 * h, 2 * h, 2 * h + 1, 2 * h + 1, 2 * h + 1,
	    2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1);

	return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

/* ---- Q8_0 ------------------------------------------------------------- */

#define Q8G (REPACK_ROWS * sizeof(struct blk_q8_0))	/* group block */

/*
 * NG <= 2 groups (gs bytes apart; group i's rows' results at y + i * yo)
 * times NX <= PT activation rows.  Per block and pair: lanes = sum of four
 * products (VPDPBUSD from -128 * sum(x)), acc = fma(d_w d_x, lanes, acc),
 * as tile_q8_0() in dot_avx512.c.
 */
static ALWAYS_INLINE void
tile_q8_0p(int nb, const uint8_t *w, size_t gs, int NG, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	const __m512i off = _mm512_set1_epi8((char)0x80);
	__m512 acc[2][2][PT];

#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[g][0][r] = acc[g][1][r] = _mm512_setzero_ps();
	for (int b = 0; b < nb; b++) {
		__m512i xv[PT], nc[PT];
		__m128 dx[PT];

#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const uint8_t *p = (const uint8_t *)x + (size_t)r * bx +
			    (size_t)b * sizeof(struct blk_q8_0);

			xv[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(
			    (const __m256i *)(p + 2)));
			nc[r] = _mm512_sub_epi32(_mm512_setzero_si512(),
			    _mm512_dpbusd_epi32(_mm512_setzero_si512(), off,
			    xv[r]));
			dx[r] = _mm_set1_ps(f16(p));
		}
#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			const uint8_t *p = w + (size_t)g * gs + (size_t)b * Q8G;
			__m512i w01 = _mm512_loadu_si512(p + 8);
			__m512i w23 = _mm512_loadu_si512(p + 72);
			__m128 dw = _mm_cvtph_ps(_mm_loadl_epi64(
			    (const __m128i *)p));

#pragma GCC unroll 4
			for (int r = 0; r < NX; r++) {
				__m128 s = _mm_mul_ps(dw, dx[r]);

				acc[g][0][r] = _mm512_fmadd_ps(spread(s, 0),
				    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
				    nc[r], w01, xv[r])), acc[g][0][r]);
				acc[g][1][r] = _mm512_fmadd_ps(spread(s, 1),
				    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
				    nc[r], w23, xv[r])), acc[g][1][r]);
			}
		}
	}
#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			float *yr = y + (size_t)r * ldy + (size_t)g * yo;

			store_pair(acc[g][0][r], yr);
			store_pair(acc[g][1][r], yr + 2);
		}
}

void
dot_q8_0_q8_0_packed(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	const uint8_t *wc = w;
	const char *xc = x;
	int nb = k / QUANT_QK, ng = nw / REPACK_ROWS, q = ng / 2;
	size_t gb = bw * REPACK_ROWS;

#define CALL(NG, NX, g, gs, r, yo) tile_q8_0p(nb, wc + (size_t)(g) * gb, \
	gs, NG, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + \
	(size_t)(g) * REPACK_ROWS, ldy, yo)
	for (int g = 0; g < q; g++)
		DOT_TILES_NX(PT, CALL, 2, g, (size_t)q * gb, (size_t)q *
		    REPACK_ROWS);
	for (int g = 2 * q; g < ng; g++)
		DOT_TILES_NX(PT, CALL, 1, g, gb, (size_t)REPACK_ROWS);
#undef CALL
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
