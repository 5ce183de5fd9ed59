/*
 * quant_avx2.c - activation quantization (quant_row_act()) with AVX2,
 * producing the same bytes as the scalar code in quant.c: the same largest
 * magnitude (NaN ignored), the same scale arithmetic in scalar floats, the
 * same products rounded to nearest even, NaN to 0, out-of-range values
 * saturated; and F16 rows to floats with F16C (dequant_row()), exact.
 */
#include "quant.h"

#if defined(__x86_64__) || defined(__i386__)

#include <errno.h>
#include <immintrin.h>
#include <string.h>

#include "dot_x86.h"
#include "quant_bytes.h"
#include "ttype.h"

/* max(|v|, acc): NaN lanes of v leave acc as it was. */
static inline __m256
amax_step(__m256 acc, __m256 v)
{
	return _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), acc);
}

/* 8 lanes of round-half-even(v * s) as int32, NaN to 0 (saturation later). */
static inline __m256i
round8(__m256 v, __m256 s)
{
	__m256 p = _mm256_mul_ps(v, s);

	p = _mm256_and_ps(p, _mm256_cmp_ps(p, p, _CMP_ORD_Q));
	p = _mm256_min_ps(_mm256_max_ps(p, _mm256_set1_ps(-128.0f)),
	    _mm256_set1_ps(127.0f));
	return _mm256_cvtps_epi32(_mm256_round_ps(p,
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 32 int32 lanes (4 vectors, in order) to 32 saturated bytes at q. */
static inline void
pack32(__m256i a, __m256i b, __m256i c, __m256i d, int8_t *q)
{
	__m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
	__m256i r = _mm256_packs_epi16(ab, cd);

	/* packs work per 128-bit lane: restore the element order */
	r = _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2,
	    6, 3, 7));
	_mm256_storeu_si256((__m256i *)q, r);
}

/*
 * One Q8_0 or Q8_1 block of 32 values: f16 d at dp, quants at q; returns
 * sum(q) and the float d in *d.
 */
static inline int
block32(const float *x, uint8_t *dp, int8_t *q, float *d)
{
	__m256 v[4], acc = _mm256_setzero_ps(), s;
	__m256i r[4];
	float amax;

	for (int i = 0; i < 4; i++) {
		v[i] = _mm256_loadu_ps(x + 8 * i);
		acc = amax_step(acc, v[i]);
	}
	amax = hmax_f32(acc);
	*d = amax / 127.0f;
	st16(dp, fp32_to_fp16(*d));
	s = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
	for (int i = 0; i < 4; i++)
		r[i] = round8(v[i], s);
	pack32(r[0], r[1], r[2], r[3], q);
	return hsum_i32(_mm256_add_epi32(_mm256_add_epi32(r[0], r[1]),
	    _mm256_add_epi32(r[2], r[3])));
}

/*
 * One Q8_K super-block: iscale = -127 / max, max the first value of largest
 * magnitude; q = min(127, round-half-even(iscale x)); d = 1 / iscale.
 */
static void
block256(const float *x, struct blk_q8_K *b)
{
	__m256 acc = _mm256_setzero_ps(), s;
	__m256i r[4];
	float amax, max = 0.0f, iscale;
	int j;

	for (j = 0; j < 256; j += 8)
		acc = amax_step(acc, _mm256_loadu_ps(x + j));
	amax = hmax_f32(acc);
	memset(b, 0, sizeof(*b));
	if (amax == 0.0f)
		return;
	for (j = 0; j < 256; j++) {
		float a = x[j] < 0 ? -x[j] : x[j];

		if (a == amax) {
			max = x[j];
			break;
		}
	}
	iscale = -127.0f / max;
	s = _mm256_set1_ps(iscale);
	for (j = 0; j < 256; j += 32) {
		for (int i = 0; i < 4; i++)
			r[i] = round8(_mm256_loadu_ps(x + j + 8 * i), s);
		pack32(r[0], r[1], r[2], r[3], b->qs + j);
	}
	for (int g = 0; g < 16; g++) {
		__m128i q = _mm_loadu_si128((const __m128i *)(b->qs + 16 * g));
		__m256i w = _mm256_madd_epi16(_mm256_cvtepi8_epi16(q),
		    _mm256_set1_epi16(1));

		b->bsums[g] = (int16_t)hsum_i32(w);
	}
	b->d = 1.0f / iscale;
}

int
quant_row_act_avx2(uint32_t t, const float *src, void *dst, size_t n)
{
	uint8_t *p = dst;
	struct blk_q8_K kb;
	float d;

	switch (t) {
	case CP_T_Q8_0:
		if (n % QUANT_QK != 0)
			return -EINVAL;
		for (size_t i = 0; i < n / QUANT_QK; i++, p += 34)
			(void)block32(src + i * QUANT_QK, p, (int8_t *)(p + 2),
			    &d);
		return 0;
	case CP_T_Q8_1:
		if (n % QUANT_QK != 0)
			return -EINVAL;
		for (size_t i = 0; i < n / QUANT_QK; i++, p += 36) {
			int sum = block32(src + i * QUANT_QK, p,
			    (int8_t *)(p + 4), &d);

			st16(p + 2, fp32_to_fp16((float)sum * d));
		}
		return 0;
	case CP_T_Q8_K:
		if (n % QUANT_QK_K != 0)
			return -EINVAL;
		for (size_t i = 0; i < n / QUANT_QK_K; i++) {
			block256(src + i * QUANT_QK_K, &kb);
			memcpy(p + i * sizeof(kb), &kb, sizeof(kb));
		}
		return 0;
	case CP_T_F16:
		for (size_t i = 0; i + 8 <= n; i += 8)
			_mm_storeu_si128((__m128i *)(p + 2 * i),
			    _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
			    _MM_FROUND_TO_NEAREST_INT));
		for (size_t i = n / 8 * 8; i < n; i++)
			st16(p + 2 * i, _cvtss_sh(src[i],
			    _MM_FROUND_TO_NEAREST_INT));
		return 0;
	default:
		return quant_row_act(t, src, dst, n);
	}
}

int
dequant_row_avx2(uint32_t t, const void *src, float *dst, size_t n)
{
	const uint8_t *p = src;
	size_t i = 0;

	if (t != CP_T_F16)
		return dequant_row(t, src, dst, n);
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
		    (const __m128i *)(p + 2 * i))));
	for (; i < n; i++)
		dst[i] = f16(p + 2 * i);
	return 0;
}

#endif
