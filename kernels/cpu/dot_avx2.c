/*
 * dot_avx2.c - AVX2/FMA/F16C kernels (compiled with -mavx2 -mfma -mf16c,
 * called only when cpu_has_avx2()).
 *
 * The quantized kernels compute each block's integer sum exactly with
 * vector instructions and then scale and add exactly as the scalar kernels
 * in dot_quant.c do, so they match them bit for bit.  The float kernels keep
 * one 8-lane fused multiply-add accumulator per output element (element j
 * to lane j % 8, the k % 8 tail through a masked load), reduced in a fixed
 * order; tiles of several weight and activation rows only interleave
 * independent accumulators, so no result depends on its neighbours.
 */
#include "dot.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "quant.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
static ALWAYS_INLINE float
hsum_f32(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
	    _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static ALWAYS_INLINE int
hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
	    _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

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
 * A tile of NW <= 4 weight rows times NX <= 3 activation rows.  Each (o, r)
 * pair owns one accumulator and sees the same operations whatever NW and NX
 * are.
 */
static ALWAYS_INLINE void
float_tile(enum wfmt f, int k, const char *w, size_t bw, int NW,
    const char *x, size_t bx, int NX, float *y, size_t ldy)
{
	__m256 acc[4][3], xv[3], wv;
	int j = 0, n;

#pragma GCC unroll 4
	for (int o = 0; o < NW; o++)
#pragma GCC unroll 3
		for (int r = 0; r < NX; r++)
			acc[o][r] = _mm256_setzero_ps();
	for (; j + 8 <= k; j += 8) {
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
			y[r * ldy + o] = hsum_f32(acc[o][r]);
}

/* Weight rows in groups of 4, activation rows in groups of 3, then singles. */
static ALWAYS_INLINE void
float_dot(enum wfmt f, int k, const void *w, size_t bw, int nw,
    const void *x, size_t bx, int nx, float *y, size_t ldy)
{
	const char *wc = w, *xc = x;
	int o = 0, r;

	for (; o + 4 <= nw; o += 4) {
		for (r = 0; r + 3 <= nx; r += 3)
			float_tile(f, k, wc + o * bw, bw, 4, xc + r * bx, bx, 3,
			    y + r * ldy + o, ldy);
		for (; r < nx; r++)
			float_tile(f, k, wc + o * bw, bw, 4, xc + r * bx, bx, 1,
			    y + r * ldy + o, ldy);
	}
	for (; o < nw; o++) {
		for (r = 0; r + 3 <= nx; r += 3)
			float_tile(f, k, wc + o * bw, bw, 1, xc + r * bx, bx, 3,
			    y + r * ldy + o, ldy);
		for (; r < nx; r++)
			float_tile(f, k, wc + o * bw, bw, 1, xc + r * bx, bx, 1,
			    y + r * ldy + o, ldy);
	}
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

/* ---- 32-element blocks --------------------------------------------------- */

static ALWAYS_INLINE uint16_t
ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Four f16 values as floats (exact). */
static ALWAYS_INLINE __m128
f16x4(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d)
{
	return _mm_cvtph_ps(_mm_setr_epi16((short)ld16(a), (short)ld16(b),
	    (short)ld16(c), (short)ld16(d), 0, 0, 0, 0));
}

/*
 * Per-lane int32 partial sums of a[i] * b[i] over 32 signed bytes; a may be
 * -128, b never is (activations are within [-127, 127]), so no pair
 * saturates.
 */
static ALWAYS_INLINE __m256i
dot_i8(__m256i a, __m256i b)
{
	__m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a),
	    _mm256_sign_epi8(b, a));

	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* The 32 weights of a Q4_0 block as signed bytes q - 8, in element order. */
static ALWAYS_INLINE __m256i
unpack_q4_0(const struct blk_q4_0 *b)
{
	__m128i q = _mm_loadu_si128((const __m128i *)b->qs);
	__m128i m = _mm_set1_epi8(15);
	__m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
	    _mm_and_si128(q, m));

	return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

static ALWAYS_INLINE __m256i
load_q8_0(const struct blk_q8_0 *b)
{
	return _mm256_loadu_si256((const __m256i *)b->qs);
}

/*
 * One Q4_0 or Q8_0 weight row times one Q8_0 activation row: blocks in
 * fours, their exact sums in lanes 0..3 of one vector, lane i scaled and
 * added to partial sum i; leftover blocks continue the same partial sums.
 */
static ALWAYS_INLINE float
row_q8_0x(int q4, int nb, const void *wv, const struct blk_q8_0 *x)
{
	const struct blk_q4_0 *w4 = wv;
	const struct blk_q8_0 *w8 = wv;
	__m128 acc = _mm_setzero_ps();
	float p[4];
	int b = 0;

	for (; b + 4 <= nb; b += 4) {
		__m256i s[4], h;
		__m128i is;
		__m128 dw, dx;

#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			s[i] = dot_i8(q4 ? unpack_q4_0(&w4[b + i]) :
			    load_q8_0(&w8[b + i]), load_q8_0(&x[b + i]));
		h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]),
		    _mm256_hadd_epi32(s[2], s[3]));
		is = _mm_add_epi32(_mm256_castsi256_si128(h),
		    _mm256_extracti128_si256(h, 1));
		if (q4)
			dw = f16x4(w4[b].d, w4[b + 1].d, w4[b + 2].d, w4[b + 3].d);
		else
			dw = f16x4(w8[b].d, w8[b + 1].d, w8[b + 2].d, w8[b + 3].d);
		dx = f16x4(x[b].d, x[b + 1].d, x[b + 2].d, x[b + 3].d);
		acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(is),
		    _mm_mul_ps(dw, dx)));
	}
	_mm_storeu_ps(p, acc);
	for (; b < nb; b++) {
		int isum = hsum_i32(dot_i8(q4 ? unpack_q4_0(&w4[b]) :
		    load_q8_0(&w8[b]), load_q8_0(&x[b])));
		float d = quant_f16(q4 ? w4[b].d : w8[b].d) * quant_f16(x[b].d);

		p[b & 3] += (float)isum * d;
	}
	return (p[0] + p[1]) + (p[2] + p[3]);
}

void
dot_q4_0_q8_0_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++)
		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_q8_0x(1, k / QUANT_QK,
			    (const char *)w + o * bw,
			    (const void *)((const char *)x + r * bx));
}

void
dot_q8_0_q8_0_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++)
		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_q8_0x(0, k / QUANT_QK,
			    (const char *)w + o * bw,
			    (const void *)((const char *)x + r * bx));
}

/* ---- K-quants ------------------------------------------------------------ */

static ALWAYS_INLINE float
row_q4_K(int nb, const struct blk_q4_K *w, const struct blk_q8_K *x)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		uint8_t sc[8], mn[8];
		__m256i sum = _mm256_setzero_si256(), mins;
		int isum, msum;

		for (int s = 0; s < 8; s++)
			quant_k_scale_min(s, w[b].scales, &sc[s], &mn[s]);
		/* msum = sum over sub-blocks s of mn[s] * (bsums[2s] + bsums[2s + 1]) */
		mins = _mm256_setr_epi16(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2],
		    mn[3], mn[3], mn[4], mn[4], mn[5], mn[5], mn[6], mn[6], mn[7],
		    mn[7]);
		msum = hsum_i32(_mm256_madd_epi16(mins,
		    _mm256_loadu_si256((const __m256i *)x[b].bsums)));
		for (int c = 0; c < 4; c++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)
			    (w[b].qs + 32 * c));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			__m256i x0 = _mm256_loadu_si256((const __m256i *)
			    (x[b].qs + 64 * c));
			__m256i x1 = _mm256_loadu_si256((const __m256i *)
			    (x[b].qs + 64 * c + 32));
			__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0),
			    _mm256_set1_epi16(sc[2 * c]));
			__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1),
			    _mm256_set1_epi16(sc[2 * c + 1]));

			sum = _mm256_add_epi32(sum, _mm256_add_epi32(p0, p1));
		}
		isum = hsum_i32(sum);
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum -
		    (quant_f16(w[b].dmin) * x[b].d) * (float)msum;
	}
	return acc;
}

static ALWAYS_INLINE float
row_q6_K(int nb, const struct blk_q6_K *w, const struct blk_q8_K *x)
{
	const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		__m256i sum = _mm256_setzero_si256();
		__m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(
		    (const __m128i *)w[b].scales));
		int corr, isum;

		/* sum over s of scales[s] * bsums[s], for the -32 offset */
		corr = hsum_i32(_mm256_madd_epi16(scales,
		    _mm256_loadu_si256((const __m256i *)x[b].bsums)));
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = w[b].ql + 64 * h;
			__m256i qh = _mm256_loadu_si256((const __m256i *)
			    (w[b].qh + 32 * h));
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));

			for (int c = 0; c < 4; c++) {
				__m256i nib = c & 1 ? l1 : l0;
				__m256i q, xv, p;
				int s = 8 * h + 2 * c;

				if (c >= 2)
					nib = _mm256_srli_epi16(nib, 4);
				q = _mm256_or_si256(_mm256_and_si256(nib, m4),
				    _mm256_slli_epi16(_mm256_and_si256(
				    _mm256_srli_epi16(qh, 2 * c), m2), 4));
				xv = _mm256_loadu_si256((const __m256i *)
				    (x[b].qs + 128 * h + 32 * c));
				p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv),
				    _mm256_set_m128i(
				    _mm_set1_epi16(w[b].scales[s + 1]),
				    _mm_set1_epi16(w[b].scales[s])));
				sum = _mm256_add_epi32(sum, p);
			}
		}
		isum = hsum_i32(sum) - 32 * corr;
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum;
	}
	return acc;
}

void
dot_q4_K_q8_K_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++)
		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_q4_K(k / QUANT_QK_K,
			    (const void *)((const char *)w + o * bw),
			    (const void *)((const char *)x + r * bx));
}

void
dot_q6_K_q8_K_avx2(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++)
		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_q6_K(k / QUANT_QK_K,
			    (const void *)((const char *)w + o * bw),
			    (const void *)((const char *)x + r * bx));
}

#endif
