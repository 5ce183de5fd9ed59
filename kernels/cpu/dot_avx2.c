/*
 * dot_avx2.c - AVX2/FMA/F16C kernels (compiled with -mavx2 -mfma -mf16c,
 * called only when cpu_has_avx2()).
 *
 * Every kernel performs, per output element, exactly the operations of its
 * scalar reference (dot.c, dot_quant.c): the same exact integer lane sums,
 * the same fused multiply-adds in the same order, the same reduction, so
 * the two match bit for bit.  The float kernels keep one 8-lane
 * accumulator per output element (the k % 8 tail through a masked load).
 * Tiles of several weight and activation rows only interleave independent
 * accumulators, so no result depends on its neighbours.
 */
#include "dot.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "dot_tiles.h"
#include "dot_x86.h"
#include "quant.h"
#include "ttype.h"

/* Lane mask selecting the first n < 8 lanes. */
static ALWAYS_INLINE __m256i
tail_mask(int n)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
	    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---- float weights --------------------------------------------------------- */

enum wfmt { W_F32, W_F16, W_BF16 };

/* 8 weights from j as floats; n < 8 loads only the first n (rest 0). */
static ALWAYS_INLINE __m256
load_w(enum wfmt f, const void *w, int j, int n)
{
	uint16_t tmp[8] = { 0 };
	const uint16_t *h = (const uint16_t *)w + j;

	switch (f) {
	case W_F32:
		if (n == 8)
			return _mm256_loadu_ps((const float *)w + j);
		return _mm256_maskload_ps((const float *)w + j, tail_mask(n));
	case W_F16:
		if (n < 8) {
			memcpy(tmp, h, (size_t)n * 2);
			h = tmp;
		}
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
	default:
		if (n < 8) {
			memcpy(tmp, h, (size_t)n * 2);
			h = tmp;
		}
		return _mm256_castsi256_ps(_mm256_slli_epi32(
		    _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)),
		    16));
	}
}

/*
 * A tile of NW <= 4 weight rows (bw bytes apart) times NX <= 3 activation
 * rows; weight row o's results go to y[r * ldy + o * yo].  Each (o, r)
 * pair owns one accumulator and sees the same operations whatever NW and
 * NX are.
 */
static ALWAYS_INLINE void
float_tile(enum wfmt f, int k, const char *w, size_t bw, int NW,
    const char *x, size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	__m256 acc[4][3], xv[3], wv;
	int j = 0, n;

#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 3
		for (int r = 0; r < NX; r++)
			acc[o][r] = _mm256_setzero_ps();
	for (; j + 8 <= k; j += 8) {
		/* each run's stream, 4 KiB ahead: with one or two activation
		   rows the tile streams its weights from memory */
		if (NX < 3 && j % (f == W_F32 ? 16 : 32) == 0)
#pragma GCC unroll 4
			for (int o = 0; o < NW; o++)
				__builtin_prefetch(w + o * bw + (size_t)j *
				    (f == W_F32 ? 4 : 2) + 4096, 0,
				    WEIGHT_PF_HINT);
#pragma GCC unroll 3
		for (int r = 0; r < NX; r++)
			xv[r] = _mm256_loadu_ps((const float *)(x + r * bx) + j);
#pragma GCC unroll 4
		for (int o = 0; o < NW; o++) {
			wv = load_w(f, w + o * bw, j, 8);
#pragma GCC unroll 3
			for (int r = 0; r < NX; r++)
				acc[o][r] = _mm256_fmadd_ps(wv, xv[r], acc[o][r]);
		}
	}
	if (j < k) {
		n = k - j;
#pragma GCC unroll 3
		for (int r = 0; r < NX; r++)
			xv[r] = _mm256_maskload_ps((const float *)(x + r * bx) + j,
			    tail_mask(n));
#pragma GCC unroll 4
		for (int o = 0; o < NW; o++) {
			wv = load_w(f, w + o * bw, j, n);
#pragma GCC unroll 3
			for (int r = 0; r < NX; r++)
				acc[o][r] = _mm256_fmadd_ps(wv, xv[r], acc[o][r]);
		}
	}
#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 3
		for (int r = 0; r < NX; r++)
			y[r * ldy + o * yo] = hsum_f32(acc[o][r]);
}

/* Tiles of 4 x 3 (dot_tiles.h). */
static ALWAYS_INLINE void
float_dot(enum wfmt f, int k, const void *w, size_t bw, int nw,
    const void *x, size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;

#define CALL(NW, NX, o, bws, r, yo) float_tile(f, k, wc + (size_t)(o) * bw, \
	bws, NW, xc + (size_t)(r) * bx, bx, NX, y + (size_t)(r) * ldy + (o), \
	ldy, yo)
	DOT_TILES(4, 3, CALL);
#undef CALL
}

void
dot_f32_f32_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	float_dot(W_F32, k, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_f16_f32_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	float_dot(W_F16, k, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_bf16_f32_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	float_dot(W_BF16, k, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_round_f16_avx2(const float *src, float *dst, int n)
{
	int j = 0;

	for (; j + 8 <= n; j += 8)
		_mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm256_cvtps_ph(
		    _mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT)));
	for (; j < n; j++)
		dst[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(
		    _mm_set_ss(src[j]), _MM_FROUND_TO_NEAREST_INT)));
}

void
dot_widen_avx2(uint32_t from, const void *src, float *dst, size_t n)
{
	const uint8_t *s = src;
	size_t j = 0;

	if (from == CP_T_F16) {
		for (; j + 8 <= n; j += 8)
			_mm256_storeu_ps(dst + j, _mm256_cvtph_ps(
			    _mm_loadu_si128((const __m128i *)(const void *)
			    (s + 2 * j))));
		for (; j < n; j++)
			dst[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
			    s[2 * j] | s[2 * j + 1] << 8)));
		return;
	}
	/* BF16: the upper half of the float's bits */
	for (; j + 8 <= n; j += 8)
		_mm256_storeu_si256((__m256i *)(void *)(dst + j),
		    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(
		    (const __m128i *)(const void *)(s + 2 * j))), 16));
	for (; j < n; j++)
		dst[j] = bf16_to_fp32((uint16_t)(s[2 * j] | s[2 * j + 1] << 8));
}

/* ---- quantized weights ----------------------------------------------------- */

/*
 * Every quantized kernel walks one weight row against a tile of NX <= QT
 * activation rows, unpacking each weight block once for the whole tile;
 * each activation row keeps its own accumulators and sees exactly the
 * operations of dot_quant.c.
 */
#define QT 4

/* Per-lane sums of 4 products of unsigned a and signed b bytes. */
static ALWAYS_INLINE __m256i
lanes_us(__m256i a, __m256i b)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b),
	    _mm256_set1_epi16(1));
}

/*
 * Per-lane sums of 4 products of signed bytes: |a| times b with a's sign;
 * a may be -128, b is never (activations lie in [-127, 127]).
 */
static ALWAYS_INLINE __m256i
lanes_ss(__m256i a_abs, __m256i a, __m256i b)
{
	return lanes_us(a_abs, _mm256_sign_epi8(b, a));
}

/* Nibbles of 16 bytes: element j < 16 the low nibble of byte j, j >= 16 the high one of j - 16. */
static ALWAYS_INLINE __m256i
nibbles_32(const uint8_t *qs)
{
	__m128i q = _mm_loadu_si128((const __m128i *)qs);

	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q),
	    _mm256_set1_epi8(15));
}

/* 32 bits to 32 bytes: byte j is 0x10 when bit j of the u32 at p is set. */
static ALWAYS_INLINE __m256i
bits_32(const uint8_t *p)
{
	uint32_t v;
	const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101ll,
	    0x0202020202020202ll, 0x0303030303030303ll);
	const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
	__m256i b;

	memcpy(&v, p, sizeof(v));
	b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
	b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
	return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

/* The five 32-value block kinds; _0 kinds hold signed values. */
enum b32 { B_Q4_0, B_Q5_0, B_Q8_0, B_Q4_1, B_Q5_1 };

static ALWAYS_INLINE size_t
b32_bytes(enum b32 k)
{
	switch (k) {
	case B_Q4_0: return sizeof(struct blk_q4_0);
	case B_Q5_0: return sizeof(struct blk_q5_0);
	case B_Q8_0: return sizeof(struct blk_q8_0);
	case B_Q4_1: return sizeof(struct blk_q4_1);
	default: return sizeof(struct blk_q5_1);
	}
}

/* The 32 values of block p as bytes: q - 8, q - 16, q, or unsigned q. */
static ALWAYS_INLINE __m256i
b32_values(enum b32 k, const uint8_t *p)
{
	switch (k) {
	case B_Q4_0:
		return _mm256_sub_epi8(nibbles_32(p + 2), _mm256_set1_epi8(8));
	case B_Q5_0:
		return _mm256_sub_epi8(_mm256_or_si256(nibbles_32(p + 6),
		    bits_32(p + 2)), _mm256_set1_epi8(16));
	case B_Q8_0:
		return _mm256_loadu_si256((const __m256i *)(p + 2));
	case B_Q4_1:
		return nibbles_32(p + 4);
	default:
		return _mm256_or_si256(nibbles_32(p + 8), bits_32(p + 4));
	}
}

/*
 * A tile of NW <= 2 weight rows times NX <= QT activation rows of 32-value
 * blocks (the activations Q8_0, or Q8_1 for the _1 kinds).  Q4_0: one float
 * per output, each block's exact sum fused-multiply-added in block order
 * (blocks in fours so one horizontal-add tree yields four sums).  The
 * others: 8 float lanes per output, one fused multiply-add per block, and
 * for Q4_1/Q5_1 the m_w s_x terms fused into one float per output.
 */
static ALWAYS_INLINE void
tile_b32(enum b32 k, int nb, const char *w, size_t bw, int NW,
    const char *x, size_t bx, int NX, float *y, size_t ldy, size_t yo)
{
	const size_t wb = b32_bytes(k);
	const size_t xb = k >= B_Q4_1 ? sizeof(struct blk_q8_1) :
	    sizeof(struct blk_q8_0);
	const size_t xq = k >= B_Q4_1 ? 4 : 2;		/* qs offset */
	const bool one = k >= B_Q4_1;
	__m256 acc[2][QT];
	float accs[2][QT];
	int b = 0;

#pragma GCC unroll 2
	for (int o = 0; o < NW; o++) {
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			acc[o][r] = _mm256_setzero_ps();
			accs[o][r] = 0.0f;
		}
	}
	if (k == B_Q4_0) {
		for (; b + 4 <= nb; b += 4) {
#pragma GCC unroll 2
			for (int o = 0; o < NW; o++) {
				const uint8_t *wp = (const uint8_t *)w +
				    (size_t)o * bw + (size_t)b * wb;
				__m256i q[4], qa[4];
				__m128 dw = _mm_cvtph_ps(_mm_setr_epi16(
				    (short)(wp[0] | wp[1] << 8),
				    (short)(wp[wb] | wp[wb + 1] << 8),
				    (short)(wp[2 * wb] | wp[2 * wb + 1] << 8),
				    (short)(wp[3 * wb] | wp[3 * wb + 1] << 8),
				    0, 0, 0, 0));

#pragma GCC unroll 4
				for (int i = 0; i < 4; i++) {
					q[i] = b32_values(k, wp + i * wb);
					qa[i] = _mm256_sign_epi8(q[i], q[i]);
				}
#pragma GCC unroll 4
				for (int r = 0; r < NX; r++) {
					const uint8_t *xp = (const uint8_t *)x +
					    (size_t)r * bx + (size_t)b * xb;
					__m256i s[4], h;
					__m128i is;
					__m128 d;
					float v[4], dv[4];

#pragma GCC unroll 4
					for (int i = 0; i < 4; i++)
						s[i] = lanes_ss(qa[i], q[i],
						    _mm256_loadu_si256((const __m256i *)
						    (xp + i * xb + xq)));
					h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0],
					    s[1]), _mm256_hadd_epi32(s[2], s[3]));
					is = _mm_add_epi32(_mm256_castsi256_si128(h),
					    _mm256_extracti128_si256(h, 1));
					d = _mm_mul_ps(dw, _mm_cvtph_ps(_mm_setr_epi16(
					    (short)(xp[0] | xp[1] << 8),
					    (short)(xp[xb] | xp[xb + 1] << 8),
					    (short)(xp[2 * xb] | xp[2 * xb + 1] << 8),
					    (short)(xp[3 * xb] | xp[3 * xb + 1] << 8),
					    0, 0, 0, 0)));
					_mm_storeu_ps(v, _mm_cvtepi32_ps(is));
					_mm_storeu_ps(dv, d);
#pragma GCC unroll 4
					for (int i = 0; i < 4; i++)
						accs[o][r] = fmaf(v[i], dv[i],
						    accs[o][r]);
				}
			}
		}
	}
	for (; b < nb; b++) {
#pragma GCC unroll 2
		for (int o = 0; o < NW; o++) {
			const uint8_t *wp = (const uint8_t *)w + (size_t)o * bw +
			    (size_t)b * wb;
			__m256i q = b32_values(k, wp);
			__m256i qa = _mm256_sign_epi8(q, q);
			float dw = f16(wp), mw = one ? f16(wp + 2) : 0.0f;

#pragma GCC unroll 4
			for (int r = 0; r < NX; r++) {
				const uint8_t *xp = (const uint8_t *)x +
				    (size_t)r * bx + (size_t)b * xb;
				__m256i xv = _mm256_loadu_si256((const __m256i *)
				    (xp + xq));
				__m256i s = one ? lanes_us(q, xv) :
				    lanes_ss(qa, q, xv);

				if (k == B_Q4_0) {
					accs[o][r] = fmaf((float)hsum_i32(s),
					    dw * f16(xp), accs[o][r]);
					continue;
				}
				if (one)
					accs[o][r] = fmaf(mw, f16(xp + 2),
					    accs[o][r]);
				acc[o][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw *
				    f16(xp)), _mm256_cvtepi32_ps(s), acc[o][r]);
			}
		}
	}
#pragma GCC unroll 2
	for (int o = 0; o < NW; o++) {
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			float *out = &y[(size_t)r * ldy + (size_t)o * yo];

			if (k == B_Q4_0)
				*out = accs[o][r];
			else if (one)
				*out = hsum_f32(acc[o][r]) + accs[o][r];
			else
				*out = hsum_f32(acc[o][r]);
		}
	}
}

/* ---- K-quants -------------------------------------------------------------- */

/*
 * Scales s0..s15 (int16, sub-blocks of 16 values) spread per 32-value
 * chunk: out[i] holds s[2i] in its low 8 lanes and s[2i + 1] in its high 8.
 */
static ALWAYS_INLINE void
chunk_scales(__m256i s16, __m256i out[8])
{
	const __m256i lo = _mm256_permute2x128_si256(s16, s16, 0x00);
	const __m256i hi = _mm256_permute2x128_si256(s16, s16, 0x11);

#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		const char a = (char)(4 * c), b = (char)(4 * c + 2);
		__m256i ctl = _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1,
		    a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
		    b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1,
		    b, b + 1, b, b + 1, b, b + 1);

		out[c] = _mm256_shuffle_epi8(lo, ctl);
		out[4 + c] = _mm256_shuffle_epi8(hi, ctl);
	}
}

/*
 * Q2_K: lanes first take -d_x dmin times the min lanes, then d_x d times
 * the scaled quant lanes.
 */
static ALWAYS_INLINE void
tile_q2_K(int nb, const void *wv, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	const struct blk_q2_K *w = wv;
	const __m256i m3 = _mm256_set1_epi8(3);
	__m256 acc[QT];

#pragma GCC unroll 4
	for (int r = 0; r < NX; r++)
		acc[r] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++) {
		__m128i ms = _mm_loadu_si128((const __m128i *)w[b].scales);
		__m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(
		    _mm_srli_epi16(ms, 4), _mm_set1_epi8(15)));
		__m256i sc[8], sumi[QT];
		float dw = f16(w[b].d), dmw = f16(w[b].dmin);

		chunk_scales(_mm256_cvtepu8_epi16(_mm_and_si128(ms,
		    _mm_set1_epi8(15))), sc);
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const struct blk_q8_K *xb = xblk(x, bx, r, b);
			__m256i prod = _mm256_madd_epi16(mins, _mm256_loadu_si256(
			    (const __m256i *)xb->bsums));

			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-xb->d * dmw),
			    _mm256_cvtepi32_ps(prod), acc[r]);
			sumi[r] = _mm256_setzero_si256();
		}
		for (int h = 0; h < 2; h++) {
			__m256i qb = _mm256_loadu_si256((const __m256i *)
			    (w[b].qs + 32 * h));

			for (int c = 0; c < 4; c++) {
				__m256i q = _mm256_and_si256(_mm256_srli_epi16(qb,
				    2 * c), m3);

#pragma GCC unroll 4
				for (int r = 0; r < NX; r++) {
					__m256i xv = _mm256_loadu_si256((const __m256i *)
					    (xblk(x, bx, r, b)->qs + 128 * h + 32 * c));

					sumi[r] = _mm256_add_epi32(sumi[r],
					    _mm256_madd_epi16(sc[4 * h + c],
					    _mm256_maddubs_epi16(q, xv)));
				}
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(
			    xblk(x, bx, r, b)->d * dw),
			    _mm256_cvtepi32_ps(sumi[r]), acc[r]);
	}
#pragma GCC unroll 4
	for (int r = 0; r < NX; r++)
		y[r * ldy] = hsum_f32(acc[r]);
}

/* Q3_K: values low2 - 4 (high bit clear), as maddubs(low2) - maddubs(4 * !high). */
static ALWAYS_INLINE void
tile_q3_K(int nb, const void *wv, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	const struct blk_q3_K *w = wv;
	const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
	__m256 acc[QT];

#pragma GCC unroll 4
	for (int r = 0; r < NX; r++)
		acc[r] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++) {
		const uint8_t *sp = w[b].scales;
		__m256i hb = _mm256_loadu_si256((const __m256i *)w[b].hmask);
		__m256i sc[8], sumi[QT];
		__m128i m15 = _mm_set1_epi8(15), lo8, lo4, hi2;
		uint64_t l8;
		uint32_t h4;
		float dw = f16(w[b].d);

		/*
		 * 6-bit scale s: low nibble of byte s % 8 (high nibble for
		 * s >= 8) and bits 2 (s / 4) of byte 8 + s % 4; lane g of the
		 * shifted copies of bytes 8..11 is shifted by 2g.
		 */
		memcpy(&l8, sp, 8);
		memcpy(&h4, sp + 8, 4);
		lo8 = _mm_cvtsi64_si128((long long)l8);
		lo4 = _mm_unpacklo_epi64(_mm_and_si128(lo8, m15),
		    _mm_and_si128(_mm_srli_epi16(lo8, 4), m15));
		hi2 = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)h4),
		    _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
		chunk_scales(_mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo4,
		    _mm_slli_epi16(hi2, 4)), _mm_set1_epi8(32))), sc);
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			sumi[r] = _mm256_setzero_si256();
		for (int h = 0; h < 2; h++) {
			__m256i qb = _mm256_loadu_si256((const __m256i *)
			    (w[b].qs + 32 * h));

			for (int c = 0; c < 4; c++) {
				int bit = 4 * h + c;
				__m256i lo = _mm256_and_si256(_mm256_srli_epi16(qb,
				    2 * c), m3);
				/* 4 where the high bit is clear, else 0 */
				__m256i hi = _mm256_slli_epi16(_mm256_andnot_si256(
				    _mm256_and_si256(_mm256_srli_epi16(hb, bit), one),
				    one), 2);

#pragma GCC unroll 4
				for (int r = 0; r < NX; r++) {
					__m256i xv = _mm256_loadu_si256((const __m256i *)
					    (xblk(x, bx, r, b)->qs + 128 * h + 32 * c));
					__m256i p = _mm256_sub_epi16(
					    _mm256_maddubs_epi16(lo, xv),
					    _mm256_maddubs_epi16(hi, xv));

					sumi[r] = _mm256_add_epi32(sumi[r],
					    _mm256_madd_epi16(sc[4 * h + c], p));
				}
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(
			    xblk(x, bx, r, b)->d * dw),
			    _mm256_cvtepi32_ps(sumi[r]), acc[r]);
	}
#pragma GCC unroll 4
	for (int r = 0; r < NX; r++)
		y[r * ldy] = hsum_f32(acc[r]);
}

/*
 * Q4_K/Q5_K min lanes: mn[2i] (bsums[4i] + bsums[4i + 1]) + mn[2i + 1]
 * (bsums[4i + 2] + bsums[4i + 3]) for i < 4.
 */
static ALWAYS_INLINE __m128i
k_min_lanes(__m128i mins16, const int16_t *bsums)
{
	__m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
	__m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs),
	    _mm256_extracti128_si256(bs, 1));

	return _mm_madd_epi16(mins16, pairs);
}

/* Q4_K (q5 = 0) or Q5_K (q5 = 1). */
static ALWAYS_INLINE void
tile_k45(int q5, int nb, const void *wv, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	const struct blk_q4_K *w4 = wv;
	const struct blk_q5_K *w5 = wv;
	const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
	__m256 acc[QT];
	__m128 accm[QT];
	float summs[QT];

#pragma GCC unroll 4
	for (int r = 0; r < NX; r++) {
		acc[r] = _mm256_setzero_ps();
		accm[r] = _mm_setzero_ps();
		summs[r] = 0.0f;
	}
	for (int b = 0; b < nb; b++) {
		const uint8_t *sp = q5 ? w5[b].scales : w4[b].scales;
		const uint8_t *qs = q5 ? w5[b].qs : w4[b].qs;
		float dw = f16(q5 ? w5[b].d : w4[b].d);
		float dmw = f16(q5 ? w5[b].dmin : w4[b].dmin);
		__m256i sumi[QT], hb = _mm256_setzero_si256(), scm, scl;
		__m128i mins16;

		/* sc[0..7] then mn[0..7] as int16 (quant_k_scale_min()) */
		scm = k_scales_mins(sp);
		mins16 = _mm256_extracti128_si256(scm, 1);
		scl = _mm256_permute2x128_si256(scm, scm, 0x00);
		if (q5)
			hb = _mm256_loadu_si256((const __m256i *)w5[b].qh);
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++) {
			const struct blk_q8_K *xb = xblk(x, bx, r, b);
			__m128i prod = k_min_lanes(mins16, xb->bsums);
			float dmin = -xb->d * dmw;

			if (q5) {
				int32_t v[4];

				_mm_storeu_si128((__m128i *)v, prod);
				summs[r] = fmaf(dmin, (float)((v[0] + v[1]) +
				    (v[2] + v[3])), summs[r]);
			} else {
				accm[r] = _mm_fmadd_ps(_mm_set1_ps(dmin),
				    _mm_cvtepi32_ps(prod), accm[r]);
			}
			sumi[r] = _mm256_setzero_si256();
		}
		for (int c = 0; c < 4; c++) {
			__m256i qb = _mm256_loadu_si256((const __m256i *)
			    (qs + 32 * c));
			__m256i lo = _mm256_and_si256(qb, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
			__m256i s0 = _mm256_shuffle_epi8(scl,
			    _mm256_set1_epi16((short)(0x0100 + 0x0404 * c)));
			__m256i s1 = _mm256_shuffle_epi8(scl,
			    _mm256_set1_epi16((short)(0x0302 + 0x0404 * c)));

			if (q5) {
				lo = _mm256_or_si256(lo, _mm256_slli_epi16(
				    _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c),
				    one), 4));
				hi = _mm256_or_si256(hi, _mm256_slli_epi16(
				    _mm256_and_si256(_mm256_srli_epi16(hb,
				    2 * c + 1), one), 4));
			}
#pragma GCC unroll 4
			for (int r = 0; r < NX; r++) {
				const int8_t *q8 = xblk(x, bx, r, b)->qs + 64 * c;
				__m256i p0 = _mm256_madd_epi16(s0,
				    _mm256_maddubs_epi16(lo, _mm256_loadu_si256(
				    (const __m256i *)q8)));
				__m256i p1 = _mm256_madd_epi16(s1,
				    _mm256_maddubs_epi16(hi, _mm256_loadu_si256(
				    (const __m256i *)(q8 + 32))));

				sumi[r] = _mm256_add_epi32(sumi[r],
				    _mm256_add_epi32(p0, p1));
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(
			    xblk(x, bx, r, b)->d * dw),
			    _mm256_cvtepi32_ps(sumi[r]), acc[r]);
	}
#pragma GCC unroll 4
	for (int r = 0; r < NX; r++) {
		if (q5) {
			y[r * ldy] = hsum_f32(acc[r]) + summs[r];
		} else {
			__m128 m = _mm_add_ps(accm[r], _mm_movehl_ps(accm[r],
			    accm[r]));

			m = _mm_add_ss(m, _mm_movehdup_ps(m));
			y[r * ldy] = hsum_f32(acc[r]) + _mm_cvtss_f32(m);
		}
	}
}

static ALWAYS_INLINE void
tile_q4_K(int nb, const void *w, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	tile_k45(0, nb, w, x, bx, NX, y, ldy);
}

static ALWAYS_INLINE void
tile_q5_K(int nb, const void *w, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	tile_k45(1, nb, w, x, bx, NX, y, ldy);
}

/* Q6_K: values q - 32, as maddubs(q) - maddubs(32). */
static ALWAYS_INLINE void
tile_q6_K(int nb, const void *wv, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	const struct blk_q6_K *w = wv;
	const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
	const __m256i m32 = _mm256_set1_epi8(32);
	__m256 acc[QT];

#pragma GCC unroll 4
	for (int r = 0; r < NX; r++)
		acc[r] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++) {
		__m256i sumi[QT];
		float dw = f16(w[b].d);
		__m256i sc[8];

		chunk_scales(_mm256_cvtepi8_epi16(_mm_loadu_si128(
		    (const __m128i *)w[b].scales)), sc);

#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			sumi[r] = _mm256_setzero_si256();
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = w[b].ql + 64 * h;
			__m256i qh = _mm256_loadu_si256((const __m256i *)
			    (w[b].qh + 32 * h));
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));

			for (int c = 0; c < 4; c++) {
				__m256i nib = c & 1 ? l1 : l0, q, sv = sc[4 * h + c];

				if (c >= 2)
					nib = _mm256_srli_epi16(nib, 4);
				q = _mm256_or_si256(_mm256_and_si256(nib, m4),
				    _mm256_slli_epi16(_mm256_and_si256(
				    _mm256_srli_epi16(qh, 2 * c), m2), 4));
#pragma GCC unroll 4
				for (int r = 0; r < NX; r++) {
					__m256i xv = _mm256_loadu_si256((const __m256i *)
					    (xblk(x, bx, r, b)->qs + 128 * h + 32 * c));
					__m256i p = _mm256_sub_epi16(
					    _mm256_maddubs_epi16(q, xv),
					    _mm256_maddubs_epi16(m32, xv));

					sumi[r] = _mm256_add_epi32(sumi[r],
					    _mm256_madd_epi16(sv, p));
				}
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < NX; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(
			    xblk(x, bx, r, b)->d * dw),
			    _mm256_cvtepi32_ps(sumi[r]), acc[r]);
	}
#pragma GCC unroll 4
	for (int r = 0; r < NX; r++)
		y[r * ldy] = hsum_f32(acc[r]);
}

/*
 * The exported kernels (dot_tiles.h).  32-value blocks: weight rows in
 * pairs (two independent accumulation chains even for one activation
 * row), activation rows in tiles of QT.  K-quants: one weight row,
 * activation rows in tiles of QT.
 */
static ALWAYS_INLINE void
dot_b32(enum b32 kind, int k, const void *w, size_t bw, int nw,
    const void *x, size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;

#define CALL(NW, NX, o, bws, r, yo) tile_b32(kind, k / QUANT_QK, wc + \
	(size_t)(o) * bw, bws, NW, xc + (size_t)(r) * bx, bx, NX, y + \
	(size_t)(r) * ldy + (o), ldy, yo)
	DOT_TILES(2, QT, CALL);
#undef CALL
}

/* The exported kernel name, on driver drv for block kind. */
#define DOT_EXPORT(name, drv, kind)					\
void									\
name(int k, const void *w, size_t bw, int nw, const void *x, size_t bx,\
    int nx, float *y, size_t ldy)					\
{									\
	drv(kind, k, w, bw, nw, x, bx, nx, y, ldy);			\
}

DOT_EXPORT(dot_q4_0_q8_0_avx2, dot_b32, B_Q4_0)
DOT_EXPORT(dot_q5_0_q8_0_avx2, dot_b32, B_Q5_0)
DOT_EXPORT(dot_q8_0_q8_0_avx2, dot_b32, B_Q8_0)
DOT_EXPORT(dot_q4_1_q8_1_avx2, dot_b32, B_Q4_1)
DOT_EXPORT(dot_q5_1_q8_1_avx2, dot_b32, B_Q5_1)

enum kq { K_Q2, K_Q3, K_Q4, K_Q5, K_Q6 };

static ALWAYS_INLINE void
tile_k(enum kq kind, int nb, const void *w, const char *x, size_t bx, int NX,
    float *y, size_t ldy)
{
	switch (kind) {
	case K_Q2: tile_q2_K(nb, w, x, bx, NX, y, ldy); break;
	case K_Q3: tile_q3_K(nb, w, x, bx, NX, y, ldy); break;
	case K_Q4: tile_q4_K(nb, w, x, bx, NX, y, ldy); break;
	case K_Q5: tile_q5_K(nb, w, x, bx, NX, y, ldy); break;
	case K_Q6: tile_q6_K(nb, w, x, bx, NX, y, ldy); break;
	}
}

static ALWAYS_INLINE void
dot_k(enum kq kind, int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	const char *xc = x;

#define CALL(NW, NX, o, bws, r, yo) tile_k(kind, k / QUANT_QK_K, \
	(const char *)w + (size_t)(o) * bw, xc + (size_t)(r) * bx, bx, NX, \
	y + (size_t)(r) * ldy + (o), ldy)
	DOT_TILES(1, QT, CALL);
#undef CALL
}

DOT_EXPORT(dot_q2_K_q8_K_avx2, dot_k, K_Q2)
DOT_EXPORT(dot_q3_K_q8_K_avx2, dot_k, K_Q3)
DOT_EXPORT(dot_q4_K_q8_K_avx2, dot_k, K_Q4)
DOT_EXPORT(dot_q5_K_q8_K_avx2, dot_k, K_Q5)
DOT_EXPORT(dot_q6_K_q8_K_avx2, dot_k, K_Q6)
#endif
