/*
 * attn_avx2.c - AVX2/F16C pieces of attn.c (compiled with -mavx2 -mfma
 * -mf16c; used only when cpu_has_avx2()).  Each does exactly the scalar
 * piece's operations: F16C conversions are exact (to float) or round to
 * nearest even (to half), and the V accumulation multiplies then adds,
 * lane i of the vectors being element i.
 */
#include "attn.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdbool.h>

#include "dot.h"
#include "dot_x86.h"

/* acc[0..32) over all n rows, kept in registers. */
static void
accum32(float *acc, const float *w, const float *vt, int n, int hd)
{
	__m256 a0 = _mm256_loadu_ps(acc), a1 = _mm256_loadu_ps(acc + 8);
	__m256 a2 = _mm256_loadu_ps(acc + 16), a3 = _mm256_loadu_ps(acc + 24);

	for (int j = 0; j < n; j++) {
		const float *vr = vt + (size_t)j * (size_t)hd;
		__m256 wj = _mm256_set1_ps(w[j]);

		a0 = _mm256_add_ps(a0, _mm256_mul_ps(wj, _mm256_loadu_ps(vr)));
		a1 = _mm256_add_ps(a1, _mm256_mul_ps(wj,
		    _mm256_loadu_ps(vr + 8)));
		a2 = _mm256_add_ps(a2, _mm256_mul_ps(wj,
		    _mm256_loadu_ps(vr + 16)));
		a3 = _mm256_add_ps(a3, _mm256_mul_ps(wj,
		    _mm256_loadu_ps(vr + 24)));
	}
	_mm256_storeu_ps(acc, a0);
	_mm256_storeu_ps(acc + 8, a1);
	_mm256_storeu_ps(acc + 16, a2);
	_mm256_storeu_ps(acc + 24, a3);
}

/*
 * acc[0..m) over the n rows of vt (hd apart): eight elements at a time,
 * then one by one.
 */
static void
accum_tail(float *acc, const float *w, const float *vt, int n, int hd, int m)
{
	int i = 0;

	for (; i + 8 <= m; i += 8) {
		__m256 a = _mm256_loadu_ps(acc + i);

		for (int j = 0; j < n; j++)
			a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(w[j]),
			    _mm256_loadu_ps(vt + (size_t)j * (size_t)hd + i)));
		_mm256_storeu_ps(acc + i, a);
	}
	for (; i < m; i++)
		for (int j = 0; j < n; j++)
			acc[i] += w[j] * vt[(size_t)j * (size_t)hd + i];
}

static void
accum_avx2(float *acc, const float *w, const float *vt, int n, int hd)
{
	int i = 0;

	for (; i + 32 <= hd; i += 32)
		accum32(acc + i, w, vt + i, n, hd);
	accum_tail(acc + i, w, vt + i, n, hd, hd - i);
}

/*
 * accum_avx2() for four rows over the same V rows: sixteen elements of
 * each row at a time, eight independent sums, each vt row loaded once
 * for the four.  Per element the same multiply then add, in j order.
 */
static void
accum_rows_avx2(float *acc, size_t lda, const float *w, size_t ldw,
    const float *vt, int n, int hd, int rows)
{
	int i = 0;

	if (rows != 4) {
		for (int k = 0; k < rows; k++)
			accum_avx2(acc + (size_t)k * lda, w + (size_t)k * ldw,
			    vt, n, hd);
		return;
	}
	for (; i + 16 <= hd; i += 16) {
		float *o0 = acc + i, *o1 = o0 + lda, *o2 = o1 + lda,
		    *o3 = o2 + lda;
		const float *w0 = w, *w1 = w + ldw, *w2 = w1 + ldw,
		    *w3 = w2 + ldw;
		__m256 a0 = _mm256_loadu_ps(o0), b0 = _mm256_loadu_ps(o0 + 8);
		__m256 a1 = _mm256_loadu_ps(o1), b1 = _mm256_loadu_ps(o1 + 8);
		__m256 a2 = _mm256_loadu_ps(o2), b2 = _mm256_loadu_ps(o2 + 8);
		__m256 a3 = _mm256_loadu_ps(o3), b3 = _mm256_loadu_ps(o3 + 8);

		for (int j = 0; j < n; j++) {
			const float *vr = vt + (size_t)j * (size_t)hd + i;
			__m256 lo = _mm256_loadu_ps(vr);
			__m256 hi = _mm256_loadu_ps(vr + 8);
			__m256 x;

			x = _mm256_set1_ps(w0[j]);
			a0 = _mm256_add_ps(a0, _mm256_mul_ps(x, lo));
			b0 = _mm256_add_ps(b0, _mm256_mul_ps(x, hi));
			x = _mm256_set1_ps(w1[j]);
			a1 = _mm256_add_ps(a1, _mm256_mul_ps(x, lo));
			b1 = _mm256_add_ps(b1, _mm256_mul_ps(x, hi));
			x = _mm256_set1_ps(w2[j]);
			a2 = _mm256_add_ps(a2, _mm256_mul_ps(x, lo));
			b2 = _mm256_add_ps(b2, _mm256_mul_ps(x, hi));
			x = _mm256_set1_ps(w3[j]);
			a3 = _mm256_add_ps(a3, _mm256_mul_ps(x, lo));
			b3 = _mm256_add_ps(b3, _mm256_mul_ps(x, hi));
		}
		_mm256_storeu_ps(o0, a0);
		_mm256_storeu_ps(o0 + 8, b0);
		_mm256_storeu_ps(o1, a1);
		_mm256_storeu_ps(o1 + 8, b1);
		_mm256_storeu_ps(o2, a2);
		_mm256_storeu_ps(o2 + 8, b2);
		_mm256_storeu_ps(o3, a3);
		_mm256_storeu_ps(o3 + 8, b3);
	}
	if (i < hd)
		for (int k = 0; k < 4; k++)
			accum_tail(acc + (size_t)k * lda + i, w + (size_t)k *
			    ldw, vt + i, n, hd, hd - i);
}

/*
 * The maximum is exact whatever the order: only a zero's sign can differ
 * from the scalar walk's, and exp(s - m) is the same for m = +0 and -0.
 * A NaN score is skipped by both (max_ps returns its second operand).
 */
static float
scale_max_avx2(float *s, int n, float scale, float mx)
{
	__m256 sv = _mm256_set1_ps(scale), m = _mm256_set1_ps(mx);
	int j = 0;

	for (; j + 8 <= n; j += 8) {
		__m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), sv);

		_mm256_storeu_ps(s + j, v);
		m = _mm256_max_ps(v, m);
	}
	mx = hmax_f32(m);
	for (; j < n; j++) {
		s[j] *= scale;
		if (s[j] > mx)
			mx = s[j];
	}
	return mx;
}

static void
weights_avx2(float *w, int n, float inv, bool round)
{
	__m256 iv = _mm256_set1_ps(inv);
	int j = 0;

	for (; j + 8 <= n; j += 8) {
		__m256 v = _mm256_mul_ps(_mm256_loadu_ps(w + j), iv);

		if (round)
			v = _mm256_cvtph_ps(_mm256_cvtps_ph(v,
			    _MM_FROUND_TO_NEAREST_INT));
		_mm256_storeu_ps(w + j, v);
	}
	for (; j < n; j++)
		w[j] *= inv;
	if (round)
		dot_round_f16_avx2(w + n / 8 * 8, w + n / 8 * 8, n % 8);
}

/* attn_expf() of 8 lanes: the same operations, lane by lane. */
static __m256
expf8(__m256 x)
{
	__m256 n, r, p = _mm256_setzero_ps(), two_n, ok;
	__m256i bits;

	ok = _mm256_cmp_ps(x, _mm256_set1_ps(ATTN_EXP_MIN), _CMP_GE_OQ);
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(ATTN_LOG2E)),
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	/* lanes out of range compute garbage, replaced below */
	n = _mm256_and_ps(n, ok);
	r = _mm256_fmadd_ps(n, _mm256_set1_ps(-ATTN_LN2_HI), x);
	r = _mm256_fmadd_ps(n, _mm256_set1_ps(-ATTN_LN2_LO), r);
#define ATTN_HORNER(c) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
	ATTN_EXP_C(ATTN_HORNER)
#undef ATTN_HORNER
	bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
	    _mm256_set1_epi32(127)), 23);
	two_n = _mm256_castsi256_ps(bits);
	p = _mm256_and_ps(_mm256_mul_ps(p, two_n), ok);
	/* NaN stays NaN (the same NaN); below the range and -inf give 0 */
	return _mm256_blendv_ps(p, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static void
exp_sum_avx2(float *dst, const float *src, int n, float mx, double *lanes,
    int lane0)
{
	__m256 m = _mm256_set1_ps(mx);
	__m256d lo, hi;
	int j = 0;

	/* up to the first element of lane 0, one at a time */
	for (; j < n && (lane0 + j) % 8 != 0; j++) {
		dst[j] = attn_expf(src[j] - mx);
		if (lanes != NULL)
			lanes[(lane0 + j) % 8] += (double)dst[j];
	}
	if (lanes != NULL) {
		lo = _mm256_loadu_pd(lanes);
		hi = _mm256_loadu_pd(lanes + 4);
		for (; j + 8 <= n; j += 8) {
			__m256 e = expf8(_mm256_sub_ps(_mm256_loadu_ps(src + j),
			    m));

			_mm256_storeu_ps(dst + j, e);
			lo = _mm256_add_pd(lo, _mm256_cvtps_pd(
			    _mm256_castps256_ps128(e)));
			hi = _mm256_add_pd(hi, _mm256_cvtps_pd(
			    _mm256_extractf128_ps(e, 1)));
		}
		_mm256_storeu_pd(lanes, lo);
		_mm256_storeu_pd(lanes + 4, hi);
	} else {
		for (; j + 8 <= n; j += 8)
			_mm256_storeu_ps(dst + j, expf8(_mm256_sub_ps(
			    _mm256_loadu_ps(src + j), m)));
	}
	for (; j < n; j++) {
		dst[j] = attn_expf(src[j] - mx);
		if (lanes != NULL)
			lanes[(lane0 + j) % 8] += (double)dst[j];
	}
}

/*
 * The F16 K rows' scores for one query, the dot kernels' operations: per
 * row one accumulator, element i fused-multiply-added into lane i % 8 in
 * order from zero, then hsum_f32().  Four rows at a time, in order, so
 * that a block's rows are read front to back.
 */

/* F16 elements i..i + 7 of the row at p as floats. */
static ALWAYS_INLINE __m256
f16x8(const unsigned char *p, int i)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)
	    (p + 2 * (size_t)i)));
}

static void
kscores1_avx2(const unsigned char *k, size_t slot_bytes, int n, int hd,
    const float *q, float *s)
{
	int j = 0;

	for (; j + 4 <= n; j += 4) {
		const unsigned char *k0 = k + (size_t)j * slot_bytes;
		const unsigned char *k1 = k0 + slot_bytes;
		const unsigned char *k2 = k1 + slot_bytes;
		const unsigned char *k3 = k2 + slot_bytes;
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;

		for (int i = 0; i < hd; i += 8) {
			__m256 qv = _mm256_loadu_ps(q + i);

			a0 = _mm256_fmadd_ps(f16x8(k0, i), qv, a0);
			a1 = _mm256_fmadd_ps(f16x8(k1, i), qv, a1);
			a2 = _mm256_fmadd_ps(f16x8(k2, i), qv, a2);
			a3 = _mm256_fmadd_ps(f16x8(k3, i), qv, a3);
		}
		s[j] = hsum_f32(a0);
		s[j + 1] = hsum_f32(a1);
		s[j + 2] = hsum_f32(a2);
		s[j + 3] = hsum_f32(a3);
	}
	for (; j < n; j++) {
		const unsigned char *k0 = k + (size_t)j * slot_bytes;
		__m256 a0 = _mm256_setzero_ps();

		for (int i = 0; i < hd; i += 8)
			a0 = _mm256_fmadd_ps(f16x8(k0, i),
			    _mm256_loadu_ps(q + i), a0);
		s[j] = hsum_f32(a0);
	}
}

/* accum_avx2() over the F16 V rows themselves (hd a multiple of 8). */
static void
accum_f16_avx2(float *acc, const float *w, const unsigned char *v,
    size_t slot_bytes, int n, int hd)
{
	int i = 0;

	for (; i + 32 <= hd; i += 32) {
		__m256 a0 = _mm256_loadu_ps(acc + i);
		__m256 a1 = _mm256_loadu_ps(acc + i + 8);
		__m256 a2 = _mm256_loadu_ps(acc + i + 16);
		__m256 a3 = _mm256_loadu_ps(acc + i + 24);

		for (int j = 0; j < n; j++) {
			const unsigned char *vr = v + (size_t)j * slot_bytes;
			__m256 wj = _mm256_set1_ps(w[j]);

			a0 = _mm256_add_ps(a0, _mm256_mul_ps(wj, f16x8(vr, i)));
			a1 = _mm256_add_ps(a1, _mm256_mul_ps(wj,
			    f16x8(vr, i + 8)));
			a2 = _mm256_add_ps(a2, _mm256_mul_ps(wj,
			    f16x8(vr, i + 16)));
			a3 = _mm256_add_ps(a3, _mm256_mul_ps(wj,
			    f16x8(vr, i + 24)));
		}
		_mm256_storeu_ps(acc + i, a0);
		_mm256_storeu_ps(acc + i + 8, a1);
		_mm256_storeu_ps(acc + i + 16, a2);
		_mm256_storeu_ps(acc + i + 24, a3);
	}
	for (; i < hd; i += 8) {
		__m256 a = _mm256_loadu_ps(acc + i);

		for (int j = 0; j < n; j++)
			a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(w[j]),
			    f16x8(v + (size_t)j * slot_bytes, i)));
		_mm256_storeu_ps(acc + i, a);
	}
}

const struct attn_ops attn_ops_avx2 = {
	scale_max_avx2, weights_avx2, accum_avx2, exp_sum_avx2, kscores1_avx2,
	accum_f16_avx2, accum_rows_avx2, NULL,
};

const struct attn_ops attn_ops_avx512 = {
	scale_max_avx2, weights_avx2, accum_avx2, exp_sum_avx2, kscores1_avx2,
	accum_f16_avx2, attn_accum_rows_avx512, attn_kscores_rows_avx512,
};

#endif
