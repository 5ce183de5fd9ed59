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
 * F16 keeps each row's float lanes as dot_avx512.c's float tiles do; the
 * layout gives it one stream per group instead of one per row.
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
#define PTW 6		/* activation rows per widened F16 tile (24
		   accumulators); every tile's accumulators are sized
		   for it */
/*
 * Bytes ahead in a group's stream to prefetch.  A one-row product of a
 * matrix larger than the L3 (`cpbench kernels -m 1 -k 2048 -n 131072 -t
 * 1`, 150-270 MB) streamed at 21-24 (Q8_0), 20-22 (Q4_K) GB/s without
 * prefetching, 27-31, 29-31 with it 4 KiB ahead (2 KiB: 25-28, 26-32;
 * 1 KiB less), on an AMD EPYC VM.
 */
#define PF_DIST 4096

/* Ask for the n cache lines PF_DIST bytes past p (weights stream once). */
static ALWAYS_INLINE void
prefetch_ahead(const uint8_t *p, int n)
{
#pragma GCC unroll 16
	for (int i = 0; i < n; i++)
		__builtin_prefetch(p + PF_DIST + 64 * i, 0,
		    WEIGHT_PF_HINT);
}

/* y[r * ldy + i] for the two rows of a: i = 0 the low half, 1 the high. */
static ALWAYS_INLINE void
store_pair(__m512 a, float *y)
{
	y[0] = hsum_f32(_mm512_castps512_ps256(a));
	y[1] = hsum_f32(_mm512_extractf32x8_ps(a, 1));
}

/* A tile's accumulators (group g, pair h, activation row r), zeroed. */
static ALWAYS_INLINE void
tile_zero(__m512 acc[2][2][PTW], int NG, int NX)
{
#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
#pragma GCC unroll 6
		for (int r = 0; r < NX; r++)
			acc[g][0][r] = acc[g][1][r] = _mm512_setzero_ps();
}

/* Their results: group g's row 2h + i times activation row r at
 * y[r * ldy + g * yo + 2h + i]. */
static ALWAYS_INLINE void
tile_store(__m512 acc[2][2][PTW], int NG, int NX, float *y, size_t ldy,
    size_t yo)
{
#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
#pragma GCC unroll 6
		for (int r = 0; r < NX; r++) {
			float *yr = y + (size_t)r * ldy + (size_t)g * yo;

			store_pair(acc[g][0][r], yr);
			store_pair(acc[g][1][r], yr + 2);
		}
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

/*
 * The F16 and Q8_0 kernels: the groups (gb bytes each) in two runs, tiles
 * of one group of each run times up to PT activation rows (dot_tiles.h's
 * walk over groups), then the group left over.  PAIR_TILE, defined around
 * each use, names the tile: PAIR_TILE(nb, w, gs, NG, x, bx, NX, y, ldy,
 * yo) runs NG groups gs bytes apart over nb blocks of ELEMS elements.
 */
#define PAIR_CALL(NG, NX, g, gs, r, yo) PAIR_TILE(nb, wc + (size_t)(g) * \
	gb, gs, NG, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + \
	(size_t)(g) * REPACK_ROWS, ldy, yo)
#define PAIR_KERNEL_NX(NAME, ELEMS, NXT)				\
void									\
NAME(int k, const void *w, size_t bw, int nw, const void *x,		\
    size_t bx, int nx, float *y, size_t ldy)				\
{									\
	const uint8_t *wc = w;						\
	const char *xc = x;						\
	int nb = k / (ELEMS), ng = nw / REPACK_ROWS, q = ng / 2;	\
	size_t gb = bw * REPACK_ROWS;					\
									\
	for (int g = 0; g < q; g++)					\
		DOT_TILES_NX(NXT, PAIR_CALL, 2, g, (size_t)q * gb,	\
		    (size_t)q * REPACK_ROWS);				\
	for (int g = 2 * q; g < ng; g++)				\
		DOT_TILES_NX(NXT, PAIR_CALL, 1, g, gb,		\
		    (size_t)REPACK_ROWS);				\
}
#define PAIR_KERNEL(NAME, ELEMS) PAIR_KERNEL_NX(NAME, ELEMS, PT)

/* ---- F16 -------------------------------------------------------------- */

#define F16G (REPACK_ROWS * 16)		/* group block: 8 elements of 4 rows */
#define F32G (REPACK_ROWS * 32)		/* the same widened to floats */

/*
 * NG <= 2 groups (gs bytes apart) times NX <= PTW activation rows, nb
 * blocks of 8 elements.  Per block, pair and row: lanes = fma(w, x, lanes)
 * with x the row's 8 values in both halves, which is what each row's
 * accumulator in the float tiles (dot_avx2.c, dot_avx512.c) does, lane for
 * lane.  F16 (wide false): one 64-byte line is a group's block, so each
 * group is a single stream, asked for PF_DIST ahead.  Widened (dot_widen()
 * element for element): the same multiply-adds on the same values, two
 * loads where F16 loads and converts.  The conversion costs about as much
 * as three multiply-adds on the AVX-512 machines we measured, and the F16
 * tiles do it again for every tile of activation rows; a prompt-sized
 * product widens each weight tile once instead (matmul.c), and its tile
 * then sits in L2, so nothing is prefetched.
 */
static ALWAYS_INLINE void
tile_fp(bool wide, int nb, const uint8_t *w, size_t gs, int NG,
    const char *x, size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	__m512 acc[2][2][PTW];

	tile_zero(acc, NG, NX);
	for (int b = 0; b < nb; b++) {
		__m512 xv[PTW];

#pragma GCC unroll 6
		for (int r = 0; r < NX; r++)
			xv[r] = _mm512_broadcast_f32x8(_mm256_loadu_ps(
			    (const float *)(const void *)(x + (size_t)r * bx) +
			    8 * b));
#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			const uint8_t *p = w + (size_t)g * gs + (size_t)b *
			    (wide ? F32G : F16G);
			__m512 w01, w23;

			if (wide) {
				w01 = _mm512_loadu_ps(p);
				w23 = _mm512_loadu_ps(p + 64);
			} else {
				prefetch_ahead(p, 1);
				w01 = _mm512_cvtph_ps(_mm256_loadu_si256(
				    (const __m256i *)p));
				w23 = _mm512_cvtph_ps(_mm256_loadu_si256(
				    (const __m256i *)(p + 32)));
			}
#pragma GCC unroll 6
			for (int r = 0; r < NX; r++) {
				acc[g][0][r] = _mm512_fmadd_ps(w01, xv[r],
				    acc[g][0][r]);
				acc[g][1][r] = _mm512_fmadd_ps(w23, xv[r],
				    acc[g][1][r]);
			}
		}
	}
	tile_store(acc, NG, NX, y, ldy, yo);
}

#define PAIR_TILE(...) tile_fp(false, __VA_ARGS__)
PAIR_KERNEL(dot_f16_f32_packed, 8)
#undef PAIR_TILE

#define PAIR_TILE(...) tile_fp(true, __VA_ARGS__)
PAIR_KERNEL_NX(dot_f32_f32_packed, 8, PTW)
#undef PAIR_TILE

/* ---- Q4_0 ------------------------------------------------------------- */

#define Q40G (REPACK_ROWS * sizeof(struct blk_q4_0))	/* group block */

/* An activation block's 32 values as VPDPBUSD's signed operand. */
struct q4_0x {
	__m512i lo, hi;		/* values 0..15, 16..31, in every 128 bits */
	__m512i nc;		/* -8 x the sum of each lane's four values */
};

static ALWAYS_INLINE struct q4_0x
q4_0_x(const uint8_t *xp)
{
	const __m512i e8 = _mm512_set1_epi8(8);
	struct q4_0x v;

	v.lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)
	    (xp + 2)));
	v.hi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)
	    (xp + 18)));
	v.nc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(
	    _mm512_dpbusd_epi32(_mm512_setzero_si512(), e8, v.lo), e8, v.hi));
	return v;
}

/*
 * Group block p's rows times activation block x: in row i's 128 bits,
 * four partial sums of sum((q - 8) x) over the block (q the unsigned
 * nibbles, the -8 from x.nc), exact.
 */
static ALWAYS_INLINE __m512i
q4_0_part(const uint8_t *p, const struct q4_0x *x)
{
	const __m512i m = _mm512_set1_epi8(0x0f);
	__m512i v = _mm512_loadu_si512(p + 8);

	return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(x->nc,
	    _mm512_and_si512(v, m), x->lo), _mm512_and_si512(
	    _mm512_srli_epi16(v, 4), m), x->hi);
}

/* v[i] in lanes 4i..4i + 3. */
static ALWAYS_INLINE __m512
quads(__m128 v)
{
	const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
	    2, 3, 3, 3, 3);

	return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/*
 * Four q4_0_part() results s[j] summed: lane 4i + j holds row i's whole
 * sum for s[j].
 */
static ALWAYS_INLINE __m512i
q4_0_sums(const __m512i s[4])
{
	__m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]),
	    _mm512_unpackhi_epi32(s[0], s[1]));
	__m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]),
	    _mm512_unpackhi_epi32(s[2], s[3]));

	return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b),
	    _mm512_unpackhi_epi64(a, b));
}

/*
 * One activation row (a decode step), four blocks a pass: each row's
 * float steps acc = fma(sum, d_w d_x, acc) in block order, as tile_b32()
 * in dot_avx2.c, the four rows of a group in the lanes of one 128-bit
 * accumulator.
 */
static ALWAYS_INLINE void
tile_q4_0p1(int nb, const uint8_t *w, size_t gs, int NG, const char *x,
    float *y, size_t yo)
{
	const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
	    10, 14, 3, 7, 11, 15);
	__m128 acc[2] = { _mm_setzero_ps(), _mm_setzero_ps() };

	for (int b = 0; b < nb; b += 4) {
		int n = nb - b < 4 ? nb - b : 4;
		struct q4_0x xv[4];
		float dxs[4] = { 0 };
		__m512 dx;

#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			if (i < n) {
				const uint8_t *xp = (const uint8_t *)x +
				    (size_t)(b + i) * sizeof(struct blk_q8_0);

				xv[i] = q4_0_x(xp);
				dxs[i] = f16(xp);
			}
		/* built in registers: four stores then one wide load
		   would stall on store forwarding */
		dx = quads(_mm_setr_ps(dxs[0], dxs[1], dxs[2], dxs[3]));
#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			const uint8_t *p = w + (size_t)g * gs + (size_t)b * Q40G;
			__m128i dh[4];
			__m512i s[4];
			__m512 v, d;

			/* 4.5 lines a pass */
			prefetch_ahead(p, 4 + (b % 8 == 0));
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++) {
				s[i] = _mm512_setzero_si512();
				dh[i] = _mm_setzero_si128();
				if (i < n) {
					s[i] = q4_0_part(p + i * Q40G, &xv[i]);
					dh[i] = _mm_loadl_epi64((const __m128i *)
					    (p + i * Q40G));
				}
			}
			/* lane 4i + r: row r, block b + i */
			v = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(tr,
			    q4_0_sums(s)));
			d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_inserti128_si256(
			    _mm256_castsi128_si256(_mm_unpacklo_epi64(dh[0],
			    dh[1])), _mm_unpacklo_epi64(dh[2], dh[3]), 1)), dx);
			acc[g] = _mm_fmadd_ps(_mm512_castps512_ps128(v),
			    _mm512_castps512_ps128(d), acc[g]);
			if (n > 1)
				acc[g] = _mm_fmadd_ps(_mm512_extractf32x4_ps(v,
				    1), _mm512_extractf32x4_ps(d, 1), acc[g]);
			if (n > 2)
				acc[g] = _mm_fmadd_ps(_mm512_extractf32x4_ps(v,
				    2), _mm512_extractf32x4_ps(d, 2), acc[g]);
			if (n > 3)
				acc[g] = _mm_fmadd_ps(_mm512_extractf32x4_ps(v,
				    3), _mm512_extractf32x4_ps(d, 3), acc[g]);
		}
	}
#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
		_mm_storeu_ps(y + (size_t)g * yo, acc[g]);
}

/*
 * NX <= PT activation rows, one block a pass: lane 4i + r of a group's
 * accumulator is row i times activation row r, the same float steps.
 */
static ALWAYS_INLINE void
tile_q4_0pn(int nb, const uint8_t *w, size_t gs, int NG, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	__m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };

	for (int b = 0; b < nb; b++) {
		struct q4_0x xv[PT];
		float dxs[4] = { 0 };
		__m512 dx;

#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const uint8_t *xp = (const uint8_t *)x + (size_t)r * bx +
			    (size_t)b * sizeof(struct blk_q8_0);

			xv[r] = q4_0_x(xp);
			dxs[r] = f16(xp);
		}
		dx = _mm512_broadcast_f32x4(_mm_setr_ps(dxs[0], dxs[1], dxs[2],
		    dxs[3]));
#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			const uint8_t *p = w + (size_t)g * gs + (size_t)b * Q40G;
			__m512i s[4];
			__m512 dw;

			prefetch_ahead(p, 1 + (b % 8 == 0));
#pragma GCC unroll 4
			for (int r = 0; r < 4; r++)
				s[r] = r < NX ? q4_0_part(p, &xv[r]) :
				    _mm512_setzero_si512();
			dw = quads(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)
			    p)));
			acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q4_0_sums(s)),
			    _mm512_mul_ps(dw, dx), acc[g]);
		}
	}
#pragma GCC unroll 2
	for (int g = 0; g < NG; g++) {
		float t[16];

		_mm512_storeu_ps(t, acc[g]);
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++)
				y[(size_t)r * ldy + (size_t)g * yo + (size_t)i] =
				    t[4 * i + r];
	}
}

/*
 * Q4_0 x Q8_0: one float per output, each block's exact sum fused-
 * multiply-added with d_w d_x in block order, as tile_b32() in
 * dot_avx2.c.  The sums come from VPDPBUSD over the unsigned nibbles
 * (the -8 folded into the lanes' start) and a transpose-and-add that
 * leaves four (row, block) or (row, activation row) sums per 128 bits.
 */
static ALWAYS_INLINE void
tile_q4_0p(int nb, const uint8_t *w, size_t gs, int NG, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	if (NX == 1)
		tile_q4_0p1(nb, w, gs, NG, x, y, yo);
	else
		tile_q4_0pn(nb, w, gs, NG, x, bx, NX, y, ldy, yo);
}

#define PAIR_TILE tile_q4_0p
PAIR_KERNEL(dot_q4_0_q8_0_packed, QUANT_QK)
#undef PAIR_TILE

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
	__m512 acc[2][2][PTW];

	tile_zero(acc, NG, NX);
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
			__m512i w01;

			prefetch_ahead(p, 2 + (b & 1));
			w01 = _mm512_loadu_si512(p + 8);
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
	tile_store(acc, NG, NX, y, ldy, yo);
}

#define PAIR_TILE tile_q8_0p
PAIR_KERNEL(dot_q8_0_q8_0_packed, QUANT_QK)
#undef PAIR_TILE

/* ---- Q4_K ------------------------------------------------------------- */

#define Q4G (REPACK_ROWS * sizeof(struct blk_q4_K))	/* group block */

/*
 * The scales and mins of a group block's four rows, as tile_q4_K() in
 * dot_avx512.c has them per row (k_scales_mins()): sc[h] holds sc[0..7] of
 * rows 2h and 2h + 1 as int16, each row's eight repeated in both 128-bit
 * lanes of its 256-bit half; mn[h] holds mn[0..7] of the two rows (rows 2h
 * and 2h + 1 in the low and high 128 bits).
 */
static ALWAYS_INLINE void
q4_scales(const uint8_t *g, __m512i sc[2], __m256i mn[2])
{
	const __m128i m6 = _mm_set1_epi8(0x3f), m4 = _mm_set1_epi8(0x0f);
	const __m128i m2 = _mm_set1_epi8(0x03);
	__m128i u0 = _mm_loadu_si128((const __m128i *)(g + 16));
	__m128i u1 = _mm_loadu_si128((const __m128i *)(g + 32));
	__m128i u2 = _mm_loadu_si128((const __m128i *)(g + 48));
	__m128i sc_lo = _mm_and_si128(u0, m6), mn_lo = _mm_and_si128(u1, m6);
	__m128i sc_hi = _mm_or_si128(_mm_and_si128(u2, m4), _mm_slli_epi32(
	    _mm_and_si128(_mm_srli_epi32(u0, 6), m2), 4));
	__m128i mn_hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(u2, 4), m4),
	    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u1, 6), m2), 4));
	__m128i s01 = _mm_unpacklo_epi32(sc_lo, sc_hi);
	__m128i s23 = _mm_unpackhi_epi32(sc_lo, sc_hi);
	__m512i w01 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(s01));
	__m512i w23 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(s23));

	sc[0] = _mm512_shuffle_i64x2(w01, w01, 0x50);
	sc[1] = _mm512_shuffle_i64x2(w23, w23, 0x50);
	mn[0] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi32(mn_lo, mn_hi));
	mn[1] = _mm256_cvtepu8_epi16(_mm_unpackhi_epi32(mn_lo, mn_hi));
}

/*
 * The two rows' halves of the 4-lane min accumulator m (rows 2h, 2h + 1 in
 * the low and high 128 bits) reduced as tile_q4_K() reduces each, added to
 * the halves of a reduced with hsum_f32().
 */
static ALWAYS_INLINE void
store_pair_min(__m512 a, __m256 m, float *y)
{
	__m128 lo = _mm256_castps256_ps128(m), hi = _mm256_extractf128_ps(m,
	    1);

	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	hi = _mm_add_ps(hi, _mm_movehl_ps(hi, hi));
	hi = _mm_add_ss(hi, _mm_movehdup_ps(hi));
	y[0] = hsum_f32(_mm512_castps512_ps256(a)) + _mm_cvtss_f32(lo);
	y[1] = hsum_f32(_mm512_extractf32x8_ps(a, 1)) + _mm_cvtss_f32(hi);
}

/*
 * The end of K-quant block b: acc = fma(d_x d_w, sumi, acc) for every
 * group g, pair h and activation row r (the float step of the K-quant
 * kernels in dot_avx512.c).
 */
static ALWAYS_INLINE void
k_block_end(__m512 acc[2][2][PTW], __m512i sumi[2][2][PT], const __m128 dw[2],
    const char *x, size_t bx, int b, int NG, int NX)
{
#pragma GCC unroll 4
	for (int r = 0; r < NX; r++) {
		__m128 dx = _mm_set1_ps(xblk(x, bx, r, b)->d);

#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			__m128 s = _mm_mul_ps(dx, dw[g]);

#pragma GCC unroll 2
			for (int h = 0; h < 2; h++)
				acc[g][h][r] = _mm512_fmadd_ps(spread(s, h),
				    _mm512_cvtepi32_ps(sumi[g][h][r]),
				    acc[g][h][r]);
		}
	}
}

/*
 * NG <= 2 groups times NX <= PT activation rows (NG * NX <= 4), as
 * dot_q8_0_q8_0_packed()'s tiles.  Per block and row the integer sums,
 * the min term and the float steps are tile_q4_K()'s in dot_avx512.c,
 * lane for lane.
 */
static ALWAYS_INLINE void
tile_q4_Kp(int nb, const uint8_t *w, size_t gs, int NG, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	const __m512i m4 = _mm512_set1_epi8(15);
	const __m256i half = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
	__m512 acc[2][2][PTW];
	__m256 accm[2][2][PT];

#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				acc[g][h][r] = _mm512_setzero_ps();
				accm[g][h][r] = _mm256_setzero_ps();
			}
	for (int b = 0; b < nb; b++) {
		__m512i sc[2][2], sumi[2][2][PT];
		__m256i mn[2][2], pairs[PT];
		__m128 dw[2], dmw[2];

#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			const uint8_t *p = w + (size_t)g * gs + (size_t)b * Q4G;

			prefetch_ahead(p, 9);
			dw[g] = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)
			    p));
			dmw[g] = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)
			    (p + 8)));
			q4_scales(p, sc[g], mn[g]);
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const struct blk_q8_K *xb = xblk(x, bx, r, b);
			__m256i bs = _mm256_loadu_si256((const __m256i *)
			    xb->bsums);
			__m128 ndx = _mm_set1_ps(-xb->d);

			pairs[r] = _mm256_broadcastsi128_si256(_mm_hadd_epi16(
			    _mm256_castsi256_si128(bs),
			    _mm256_extracti128_si256(bs, 1)));
#pragma GCC unroll 2
			for (int g = 0; g < NG; g++) {
				__m256 f = _mm256_castps128_ps256(_mm_mul_ps(
				    ndx, dmw[g]));

#pragma GCC unroll 2
				for (int h = 0; h < 2; h++) {
					__m256 fh = _mm256_permutevar8x32_ps(f,
					    _mm256_add_epi32(half,
					    _mm256_set1_epi32(2 * h)));

					accm[g][h][r] = _mm256_fmadd_ps(fh,
					    _mm256_cvtepi32_ps(
					    _mm256_madd_epi16(mn[g][h],
					    pairs[r])), accm[g][h][r]);
					sumi[g][h][r] = _mm512_setzero_si512();
				}
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m512i lo[2][2], hi[2][2], s0[2][2], s1[2][2];

#pragma GCC unroll 2
			for (int g = 0; g < NG; g++)
#pragma GCC unroll 2
				for (int h = 0; h < 2; h++) {
					const uint8_t *p = w + (size_t)g * gs +
					    (size_t)b * Q4G + 64 + 128 * c +
					    64 * h;
					__m512i qb = _mm512_loadu_si512(p);

					lo[g][h] = _mm512_and_si512(qb, m4);
					hi[g][h] = _mm512_and_si512(
					    _mm512_srli_epi16(qb, 4), m4);
					s0[g][h] = _mm512_shuffle_epi8(sc[g][h],
					    _mm512_set1_epi16((short)(0x0100 +
					    0x0404 * c)));
					s1[g][h] = _mm512_shuffle_epi8(sc[g][h],
					    _mm512_set1_epi16((short)(0x0302 +
					    0x0404 * c)));
				}
#pragma GCC unroll 4
			for (int r = 0; r < NX; r++) {
				const int8_t *q8 = xblk(x, bx, r, b)->qs +
				    64 * c;
				__m512i x0 = _mm512_broadcast_i64x4(
				    _mm256_loadu_si256((const __m256i *)q8));
				__m512i x1 = _mm512_broadcast_i64x4(
				    _mm256_loadu_si256((const __m256i *)
				    (q8 + 32)));

#pragma GCC unroll 2
				for (int g = 0; g < NG; g++)
#pragma GCC unroll 2
					for (int h = 0; h < 2; h++) {
						sumi[g][h][r] =
						    _mm512_dpwssd_epi32(
						    sumi[g][h][r], s0[g][h],
						    _mm512_maddubs_epi16(
						    lo[g][h], x0));
						sumi[g][h][r] =
						    _mm512_dpwssd_epi32(
						    sumi[g][h][r], s1[g][h],
						    _mm512_maddubs_epi16(
						    hi[g][h], x1));
					}
			}
		}
		k_block_end(acc, sumi, dw, x, bx, b, NG, NX);
	}
#pragma GCC unroll 2
	for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			float *yr = y + (size_t)r * ldy + (size_t)g * yo;

			store_pair_min(acc[g][0][r], accm[g][0][r], yr);
			store_pair_min(acc[g][1][r], accm[g][1][r], yr + 2);
		}
}

/*
 * Tiles of two groups times two activation rows for one or two rows (a
 * decode step: two streams), else of one group times PT rows.
 */
/* ---- Q6_K ------------------------------------------------------------- */

#define Q6G (REPACK_ROWS * sizeof(struct blk_q6_K))	/* group block */

/*
 * Chunk c of half hf of the rows 2h, 2h + 1 of a group block p: their
 * 6-bit values (row 2h in the low 256 bits) and each row's scales 8hf +
 * 2c (low 128 bits of its half) and 8hf + 2c + 1 (high); s16 holds the
 * two rows' 16 scales as int16.  q6_chunk() of dot_avx512.c, two rows at
 * once.
 */
static ALWAYS_INLINE void
q6_pair(const uint8_t *p, __m512i s16, int h, int hf, int c, __m512i *q,
    __m512i *sv)
{
	const __m512i m4 = _mm512_set1_epi8(15);
	const short a = (short)(0x0100 + 0x0404 * c), b = (short)(a + 0x0202);
	__m512i nib = _mm512_loadu_si512(p + 72 + 128 * (2 * hf + (c & 1)) +
	    64 * h);
	__m512i qh = _mm512_loadu_si512(p + 72 + 512 + 128 * hf + 64 * h);
	__m512i hs = hf ? _mm512_shuffle_i64x2(s16, s16, 0xf5) :
	    _mm512_shuffle_i64x2(s16, s16, 0xa0);

	if (c >= 2)
		nib = _mm512_srli_epi16(nib, 4);
	if (c == 0)
		qh = _mm512_slli_epi16(qh, 4);
	else if (c == 1)
		qh = _mm512_slli_epi16(qh, 2);
	else if (c == 3)
		qh = _mm512_srli_epi16(qh, 2);
	qh = _mm512_and_si512(qh, _mm512_set1_epi8(0x30));
	*q = _mm512_ternarylogic_epi32(nib, m4, qh, 0xea);
	*sv = _mm512_shuffle_epi8(hs, _mm512_broadcast_i64x4(
	    _mm256_setr_epi16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b,
	    b)));
}

/*
 * NG <= 2 groups times NX <= PT activation rows (NG * NX <= 4); per block
 * and row tile_q6_K()'s sums and float steps, lane for lane.
 */
static ALWAYS_INLINE void
tile_q6_Kp(int nb, const uint8_t *w, size_t gs, int NG, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	const __m512i m32 = _mm512_set1_epi8(32);
	__m512 acc[2][2][PTW];

	tile_zero(acc, NG, NX);
	for (int b = 0; b < nb; b++) {
		__m512i s16[2][2], sumi[2][2][PT];
		__m128 dw[2];

#pragma GCC unroll 2
		for (int g = 0; g < NG; g++) {
			const uint8_t *p = w + (size_t)g * gs + (size_t)b * Q6G;

			prefetch_ahead(p, 14);
			dw[g] = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)
			    p));
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				s16[g][h] = _mm512_cvtepi8_epi16(
				    _mm256_loadu_si256((const __m256i *)(p +
				    8 + 32 * h)));
#pragma GCC unroll 4
				for (int r = 0; r < NX; r++)
					sumi[g][h][r] = _mm512_setzero_si512();
			}
		}
#pragma GCC unroll 2
		for (int hf = 0; hf < 2; hf++) {
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				__m512i q[2][2], sv[2][2];

#pragma GCC unroll 2
				for (int g = 0; g < NG; g++)
#pragma GCC unroll 2
					for (int h = 0; h < 2; h++)
						q6_pair(w + (size_t)g * gs +
						    (size_t)b * Q6G, s16[g][h],
						    h, hf, c, &q[g][h],
						    &sv[g][h]);
#pragma GCC unroll 4
				for (int r = 0; r < NX; r++) {
					__m512i xv = _mm512_broadcast_i64x4(
					    _mm256_loadu_si256((const __m256i *)
					    (xblk(x, bx, r, b)->qs + 128 * hf +
					    32 * c)));
					__m512i q8s = _mm512_maddubs_epi16(m32,
					    xv);

#pragma GCC unroll 2
					for (int g = 0; g < NG; g++)
#pragma GCC unroll 2
						for (int h = 0; h < 2; h++)
							sumi[g][h][r] =
							    _mm512_dpwssd_epi32(
							    sumi[g][h][r],
							    sv[g][h],
							    _mm512_sub_epi16(
							    _mm512_maddubs_epi16(
							    q[g][h], xv), q8s));
				}
			}
		}
		k_block_end(acc, sumi, dw, x, bx, b, NG, NX);
	}
	tile_store(acc, NG, NX, y, ldy, yo);
}

/*
 * The K-quant walk: with PAIRS, tiles of two groups times two activation
 * rows for one or two rows (a decode step: two streams); otherwise, and
 * for more rows, one group times PT rows.  Q6_K takes no pairs: its
 * one-row product measured 10-20% slower with them (`cpbench kernels -w
 * q6_K -m 1,2 -k 2048 -n 16384 -t 1`).
 */
#define K_WALK(PAIRS)							\
	do {								\
		const uint8_t *wc = w;					\
		const char *xc = x;					\
		int nb = k / QUANT_QK_K, ng = nw / REPACK_ROWS;		\
		int q = ng / 2;						\
		size_t gb = bw * REPACK_ROWS;				\
									\
		if ((PAIRS) && nx <= 2) {				\
			for (int g = 0; g < q; g++)			\
				DOT_TILES_NX(2, K_CALL, 2, g,		\
				    (size_t)q * gb, (size_t)q *		\
				    REPACK_ROWS);			\
			q = 2 * q;					\
		} else {						\
			q = 0;						\
		}							\
		for (int g = q; g < ng; g++)				\
			DOT_TILES_NX(PT, K_CALL, 1, g, gb,		\
			    (size_t)REPACK_ROWS);			\
	} while (0)

void
dot_q6_K_q8_K_packed(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
#define K_CALL(NG, NX, g, gs, r, yo) tile_q6_Kp(nb, wc + (size_t)(g) * gb, \
	gs, NG, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + \
	(size_t)(g) * REPACK_ROWS, ldy, yo)
	K_WALK(false);
#undef K_CALL
}

void
dot_q4_K_q8_K_packed(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
#define K_CALL(NG, NX, g, gs, r, yo) tile_q4_Kp(nb, wc + (size_t)(g) * gb, \
	gs, NG, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + \
	(size_t)(g) * REPACK_ROWS, ldy, yo)
	K_WALK(true);
#undef K_CALL
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
