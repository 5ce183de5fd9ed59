/*
 * dot_avx512.c - kernels for CPUs with AVX-512 VL, BW and VNNI (called
 * only when cpu_has_avx512vnni()), compiled for that target by the pragma
 * below, so the build needs no extra flags.
 *
 * They use 256-bit vectors only: the lanes, and so the summation order of
 * dot.h, are those of the AVX2 kernels and the scalar references, bit for
 * bit.  What AVX-512 adds is VPDPBUSD (four byte products summed into a
 * 32-bit lane in one instruction, exactly) and 32 vector registers, which
 * allow tiles of 4 x 4 (Q8_0) and 4 x 6 (F16, F32).
 *
 * Q8_0 x Q8_0: VPDPBUSD multiplies unsigned by signed bytes, so weight
 * bytes w are offset to w + 128 (xor 0x80) and each lane starts from
 * -128 (x0 + x1 + x2 + x3) of its four activation bytes: the lane then
 * holds sum(w x) exactly, the value the AVX2 kernel gets with
 * sign/maddubs/madd.
 */
#include "dot.h"
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


/* ---- F16 and F32 ------------------------------------------------------ */

/*
 * NW <= 4 weight rows (F16, or F32 when f32) times NX <= 6 activation
 * rows, one 8-lane accumulator per pair, element j fused-multiply-added
 * into lane j % 8 (dot.c's order; k a multiple of 8 here, the caller
 * handles the rest).  The rows two on from the tile's rows (2k elements
 * on, where the rows are packed: weights, and K rows of a KV head) are
 * asked for into L2 as the tile goes: the walk's tile after next reads
 * them.  Without the hint a product of 12-16 rows from memory ran about
 * 15 % slower (`cpbench kernels -w f16 -m 16 -n 32000`: 88 against 101
 * GMAC/s); asking for the next row only, into L1, left a decode step of
 * 4 rows on one core 11 % slower (`cpbench mixed -d 4 -D 16 -t 1`: 13.8
 * against 12.3 ms, medians of 7 alternating runs).
 */
static ALWAYS_INLINE void
tile_float(bool f32, int k, const char *w, size_t bw, int NW, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	__m256 acc[4][6], xv[6];

#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 6
		for (int r = 0; r < NX; r++)
			acc[o][r] = _mm256_setzero_ps();
	for (int j = 0; j < k; j += 8) {
		/* the tile after next reads the row two on in each run */
		if (j % (f32 ? 16 : 32) == 0)
#pragma GCC unroll 4
			for (int o = 0; o < NW; o++)
				__builtin_prefetch(w + (size_t)o * bw +
				    (2 * (size_t)k + (size_t)j) * (f32 ? 4 :
				    2), 0, 2);
#pragma GCC unroll 6
		for (int r = 0; r < NX; r++)
			xv[r] = _mm256_loadu_ps((const float *)(const void *)
			    (x + (size_t)r * bx) + j);
#pragma GCC unroll 4
		for (int o = 0; o < NW; o++) {
			const char *wr = w + (size_t)o * bw;
			__m256 wv = f32 ? _mm256_loadu_ps((const float *)
			    (const void *)wr + j) : _mm256_cvtph_ps(
			    _mm_loadu_si128((const __m128i *)wr + j / 8));

#pragma GCC unroll 6
			for (int r = 0; r < NX; r++)
				acc[o][r] = _mm256_fmadd_ps(wv, xv[r],
				    acc[o][r]);
		}
	}
#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 6
		for (int r = 0; r < NX; r++)
			y[(size_t)r * ldy + (size_t)o * yo] =
			    hsum_f32(acc[o][r]);
}

/* Three or more activation rows, k a multiple of 8: 4 x 6 tiles
 * (dot_tiles.h). */
static ALWAYS_INLINE void
dot_float(bool f32, int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;

#define CALL(NW, NX, o, bws, r, yo) tile_float(f32, k, wc + (size_t)(o) * \
	bw, bws, NW, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + \
	(o), ldy, yo)
	DOT_TILES(4, 6, CALL);
#undef CALL
}

/* Fewer than three activation rows or k % 8 != 0: the AVX2 kernels. */
void
dot_f16_f32_avx512(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	if (nx < 3 || k % 8 != 0)
		dot_f16_f32_avx2(k, w, bw, nw, x, bx, nx, y, ldy);
	else
		dot_float(false, k, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_f32_f32_avx512(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	if (nx < 3 || k % 8 != 0)
		dot_f32_f32_avx2(k, w, bw, nw, x, bx, nx, y, ldy);
	else
		dot_float(true, k, w, bw, nw, x, bx, nx, y, ldy);
}

/* ---- Q8_0 ------------------------------------------------------------- */

/*
 * v, hidden from the optimizer: the products of two broadcast scales stay
 * one vector multiply each instead of a scalar multiply and a broadcast.
 */
static ALWAYS_INLINE __m256
opaque(__m256 v)
{
	__asm__("" : "+v"(v));
	return v;
}

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
			dw[o] = opaque(_mm256_set1_ps(f16(p)));
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
			__m256 dx = opaque(_mm256_set1_ps(f16(p)));

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

/* Tiles of 4 x 4 (dot_tiles.h). */
void
dot_q8_0_q8_0_avx512(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;
	int nb = k / QUANT_QK;

#define CALL(NW, NX, o, bws, r, yo) tile_q8_0(nb, wc + (size_t)(o) * bw, \
	bws, NW, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + (o), \
	ldy, yo)
	DOT_TILES(4, 4, CALL);
#undef CALL
}

/* ---- K-quants ----------------------------------------------------------- */

/*
 * The K-quant kernels follow dot_avx2.c's tile_k45() (Q4_K) and
 * tile_q6_K(): per 32-value chunk the pair sums of maddubs are multiplied
 * by the sub-block scale and added into 8 int32 lanes, here by one
 * VPDPWSSD instead of madd + add (the same integers); the float side is
 * unchanged.  Tiles of NW <= 2 weight rows share the activation loads
 * (and, for Q6_K, the maddubs(32, x) term); one activation row takes two
 * weight rows q apart, as the other matrix-vector kernels do.
 */
#define KT 4		/* activation rows per tile */

/*
 * Chunk c (values 64c..64c+63) of a Q4_K block: its low and high nibbles
 * and their scales sc[2c], sc[2c + 1] in every int16 lane (scl holds
 * sc[0..7] in both halves).
 */
static ALWAYS_INLINE void
q4_chunk(const struct blk_q4_K *wb, __m256i scl, int c, __m256i *lo,
    __m256i *hi, __m256i *s0, __m256i *s1)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256i qb = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));

	*lo = _mm256_and_si256(qb, m4);
	*hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
	*s0 = _mm256_shuffle_epi8(scl, _mm256_set1_epi16((short)(0x0100 +
	    0x0404 * c)));
	*s1 = _mm256_shuffle_epi8(scl, _mm256_set1_epi16((short)(0x0302 +
	    0x0404 * c)));
}

/*
 * Chunk c of half h of a Q6_K block: its 6-bit values and the scales
 * 8h + 2c (low 8 int16 lanes) and 8h + 2c + 1 (high 8); s16 holds the 16
 * scales as int16.
 */
static ALWAYS_INLINE void
q6_chunk(const struct blk_q6_K *wb, __m256i s16, int h, int c, __m256i *q,
    __m256i *sv)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	const short a = (short)(0x0100 + 0x0404 * c), b = (short)(a + 0x0202);
	__m256i nib = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h +
	    32 * (c & 1)));
	__m256i qh = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
	__m256i hs = _mm256_permute2x128_si256(s16, s16, h ? 0x11 : 0x00);

	if (c >= 2)
		nib = _mm256_srli_epi16(nib, 4);
	/* bits 2c, 2c + 1 of each qh byte to bits 4, 5 (16-bit shifts: what
	 * crosses into the neighbouring byte is masked off) */
	if (c == 0)
		qh = _mm256_slli_epi16(qh, 4);
	else if (c == 1)
		qh = _mm256_slli_epi16(qh, 2);
	else if (c == 3)
		qh = _mm256_srli_epi16(qh, 2);
	qh = _mm256_and_si256(qh, _mm256_set1_epi8(0x30));
	/* (nib & 15) | qh */
	*q = _mm256_ternarylogic_epi32(nib, m4, qh, 0xea);
	*sv = _mm256_shuffle_epi8(hs, _mm256_setr_epi16(a, a, a, a, a, a, a,
	    a, b, b, b, b, b, b, b, b));
}

static ALWAYS_INLINE void
tile_q4_K(int nb, const char *w, size_t bw, int NW, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	__m256 acc[2][KT];
	__m128 accm[2][KT];

#pragma GCC unroll 2
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			acc[o][r] = _mm256_setzero_ps();
			accm[o][r] = _mm_setzero_ps();
		}
	for (int b = 0; b < nb; b++) {
		const struct blk_q4_K *wb[2];
		__m256i scl[2], sumi[2][KT];
		__m128i mins16[2], pairs[KT];
		float dw[2], dmw[2];

#pragma GCC unroll 2
		for (int o = 0; o < NW; o++) {
			__m256i scm;

			wb[o] = (const struct blk_q4_K *)(w + (size_t)o * bw) +
			    b;
			scm = k_scales_mins(wb[o]->scales);
			mins16[o] = _mm256_extracti128_si256(scm, 1);
			scl[o] = _mm256_permute2x128_si256(scm, scm, 0x00);
			dw[o] = f16(wb[o]->d);
			dmw[o] = f16(wb[o]->dmin);
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const struct blk_q8_K *xb = xblk(x, bx, r, b);
			__m256i bs = _mm256_loadu_si256((const __m256i *)
			    xb->bsums);

			pairs[r] = _mm_hadd_epi16(_mm256_castsi256_si128(bs),
			    _mm256_extracti128_si256(bs, 1));
#pragma GCC unroll 2
			for (int o = 0; o < NW; o++) {
				accm[o][r] = _mm_fmadd_ps(_mm_set1_ps(-xb->d *
				    dmw[o]), _mm_cvtepi32_ps(_mm_madd_epi16(
				    mins16[o], pairs[r])), accm[o][r]);
				sumi[o][r] = _mm256_setzero_si256();
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m256i lo[2], hi[2], s0[2], s1[2];

#pragma GCC unroll 2
			for (int o = 0; o < NW; o++)
				q4_chunk(wb[o], scl[o], c, &lo[o], &hi[o],
				    &s0[o], &s1[o]);
#pragma GCC unroll 4
			for (int r = 0; r < NX; r++) {
				const int8_t *q8 = xblk(x, bx, r, b)->qs +
				    64 * c;
				__m256i x0 = _mm256_loadu_si256(
				    (const __m256i *)q8);
				__m256i x1 = _mm256_loadu_si256(
				    (const __m256i *)(q8 + 32));

#pragma GCC unroll 2
				for (int o = 0; o < NW; o++) {
					sumi[o][r] = _mm256_dpwssd_epi32(
					    sumi[o][r], s0[o],
					    _mm256_maddubs_epi16(lo[o], x0));
					sumi[o][r] = _mm256_dpwssd_epi32(
					    sumi[o][r], s1[o],
					    _mm256_maddubs_epi16(hi[o], x1));
				}
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			float dx = xblk(x, bx, r, b)->d;

#pragma GCC unroll 2
			for (int o = 0; o < NW; o++)
				acc[o][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx *
				    dw[o]), _mm256_cvtepi32_ps(sumi[o][r]),
				    acc[o][r]);
		}
	}
#pragma GCC unroll 2
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			__m128 m = _mm_add_ps(accm[o][r],
			    _mm_movehl_ps(accm[o][r], accm[o][r]));

			m = _mm_add_ss(m, _mm_movehdup_ps(m));
			y[(size_t)r * ldy + (size_t)o * yo] =
			    hsum_f32(acc[o][r]) + _mm_cvtss_f32(m);
		}
}

static ALWAYS_INLINE void
tile_q6_K(int nb, const char *w, size_t bw, int NW, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	const __m256i m32 = _mm256_set1_epi8(32);
	__m256 acc[2][KT];

#pragma GCC unroll 2
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[o][r] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++) {
		const struct blk_q6_K *wb[2];
		__m256i s16[2], sumi[2][KT];

#pragma GCC unroll 2
		for (int o = 0; o < NW; o++) {
			wb[o] = (const struct blk_q6_K *)(w + (size_t)o * bw) +
			    b;
			s16[o] = _mm256_cvtepi8_epi16(_mm_loadu_si128(
			    (const __m128i *)wb[o]->scales));
#pragma GCC unroll 4
			for (int r = 0; r < NX; r++)
				sumi[o][r] = _mm256_setzero_si256();
		}
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				__m256i q[2], sv[2];

#pragma GCC unroll 2
				for (int o = 0; o < NW; o++)
					q6_chunk(wb[o], s16[o], h, c, &q[o],
					    &sv[o]);
#pragma GCC unroll 4
				for (int r = 0; r < NX; r++) {
					__m256i xv = _mm256_loadu_si256(
					    (const __m256i *)(xblk(x, bx, r,
					    b)->qs + 128 * h + 32 * c));
					__m256i q8s = _mm256_maddubs_epi16(m32,
					    xv);

#pragma GCC unroll 2
					for (int o = 0; o < NW; o++) {
						__m256i p = _mm256_sub_epi16(
						    _mm256_maddubs_epi16(q[o],
						    xv), q8s);

						sumi[o][r] =
						    _mm256_dpwssd_epi32(
						    sumi[o][r], sv[o], p);
					}
				}
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			float dx = xblk(x, bx, r, b)->d;

#pragma GCC unroll 2
			for (int o = 0; o < NW; o++)
				acc[o][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx *
				    f16(wb[o]->d)), _mm256_cvtepi32_ps(
				    sumi[o][r]), acc[o][r]);
		}
	}
#pragma GCC unroll 2
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			y[(size_t)r * ldy + (size_t)o * yo] =
			    hsum_f32(acc[o][r]);
}

static ALWAYS_INLINE void
tile_k(bool q6, int nb, const char *w, size_t bw, int NW, const char *x,
    size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	if (q6)
		tile_q6_K(nb, w, bw, NW, x, bx, NX, y, ldy, yo);
	else
		tile_q4_K(nb, w, bw, NW, x, bx, NX, y, ldy, yo);
}

/* Tiles of 2 x KT (dot_tiles.h). */
static ALWAYS_INLINE void
dot_k(bool q6, int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;
	int nb = k / QUANT_QK_K;

#define CALL(NW, NX, o, bws, r, yo) tile_k(q6, nb, wc + (size_t)(o) * bw, \
	bws, NW, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + (o), \
	ldy, yo)
	DOT_TILES(2, KT, CALL);
#undef CALL
}

void
dot_q4_K_q8_K_avx512(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_k(false, k, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q6_K_q8_K_avx512(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_k(true, k, w, bw, nw, x, bx, nx, y, ldy);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
