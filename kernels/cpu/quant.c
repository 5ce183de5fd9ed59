/*
 * quant.c - scalar element conversions and block (de)quantization.
 *
 * Dequantization follows ggml's formulas operation for operation, in float,
 * so every value comes out bit-identical to ggml's dequantize_row_*().
 * Quantization covers what cpd writes or feeds to the dot kernels: F32, F16,
 * BF16, the Q8_0 and Q4_0 weight formats (ggml's reference rounding, as
 * llama-quantize uses), the other weight formats through quantize_k.c, and
 * the activation formats Q8_0, Q8_1 and Q8_K (quant_row_act(): rounded as
 * ggml's x86 CPU backend rounds activations).
 */
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "cpu_features.h"
#include "quant_bytes.h"
#include "quantize_k.h"
#include "ttype.h"

_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(struct blk_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(struct blk_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(struct blk_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(struct blk_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(struct blk_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(struct blk_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(struct blk_q8_K) == 292, "q8_K block");

static inline uint32_t
f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float
bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * Half to float.  Shifting the 15 magnitude bits up by 13 lines the half's
 * exponent and fraction up with a float's; the float then reads 2^-112 times
 * the half's value (subnormal halves become subnormal floats), and scaling by
 * 2^112 is exact.  Infinity and NaN (exponent 31) need the float's exponent
 * 255 instead; a NaN comes out quiet, keeping its payload, as F16C gives it
 * (dequant_row_avx2()).
 */
float
fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t mag = h & 0x7fff;
	float f;

	if (mag > 0x7c00)
		return bits_f32(sign | 0x7fc00000 | (mag & 0x3ff) << 13);
	if (mag == 0x7c00)
		return bits_f32(sign | 0x7f800000);
	f = bits_f32(mag << 13) * 0x1p112f;
	return bits_f32(sign | f32_bits(f));
}

/*
 * Float to half, round to nearest even.  Magnitudes from 65520 up (half way
 * between 65504, the largest half, and 2^16) become infinity; below 2^-14
 * the result is subnormal, counted in units of 2^-24.  NaN stays NaN (quiet,
 * keeping the top fraction bits, as F16C does).
 */
uint16_t
fp32_to_fp16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
	uint32_t x = u & 0x7fffffff;
	uint32_t e, mant, shift, q, rem, half;

	if (x > 0x7f800000)
		return (uint16_t)(sign | 0x7e00 | (x >> 13 & 0x3ff));
	if (x >= 0x477ff000)
		return (uint16_t)(sign | 0x7c00);
	e = x >> 23;
	if (e >= 113) {
		/* Normal: rebias the exponent (127 - 15 = 112), round 13 bits. */
		q = (x >> 13) - (112u << 10);
		rem = x & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
			q++;
		return (uint16_t)(sign | q);
	}
	if (e < 102)
		return sign;	/* below 2^-25: rounds to zero */
	/* value = mant * 2^(e - 150); in units of 2^-24: mant >> (126 - e). */
	mant = (x & 0x7fffff) | 0x800000;
	shift = 126 - e;
	q = mant >> shift;
	rem = mant & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return (uint16_t)(sign | q);
}

float
bf16_to_fp32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t
fp32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(u >> 16 | 0x40);
	return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

/*
 * Float to int, ties away from zero (ggml's roundf()), made total: NaN
 * gives 0 and out-of-range values saturate, so hostile input never
 * converts out of range.  Inputs from sane data are already within
 * [-128, 127].  The other way ggml rounds, ties to even, is round_clamp()
 * (quant_bytes.h).
 */
static inline int
round_away(float v)
{
	if (!(v > -128.0f))
		return v != v ? 0 : -128;
	if (v > 127.0f)
		return 127;
	return (int)roundf(v);
}

/* ---- dequantization ---------------------------------------------------- */

static void
dq_f16(const void *src, float *dst, size_t n)
{
	const uint8_t *p = src;

	for (size_t i = 0; i < n; i++)
		dst[i] = fp16_to_fp32(ld16(p + 2 * i));
}

static void
dq_bf16(const void *src, float *dst, size_t n)
{
	const uint8_t *p = src;

	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_to_fp32(ld16(p + 2 * i));
}

static void
dq_q4_0(const void *src, float *y, size_t nb)
{
	const struct blk_q4_0 *b = src;

	for (size_t i = 0; i < nb; i++, b++, y += QUANT_QK) {
		float d = quant_f16(b->d);

		for (int j = 0; j < 16; j++) {
			y[j] = (float)((b->qs[j] & 15) - 8) * d;
			y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
		}
	}
}

static void
dq_q4_1(const void *src, float *y, size_t nb)
{
	const struct blk_q4_1 *b = src;

	for (size_t i = 0; i < nb; i++, b++, y += QUANT_QK) {
		float d = quant_f16(b->d), m = quant_f16(b->m);

		for (int j = 0; j < 16; j++) {
			y[j] = (float)(b->qs[j] & 15) * d + m;
			y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
		}
	}
}

static void
dq_q5_0(const void *src, float *y, size_t nb)
{
	const struct blk_q5_0 *b = src;

	for (size_t i = 0; i < nb; i++, b++, y += QUANT_QK) {
		float d = quant_f16(b->d);
		uint32_t qh = ld32(b->qh);

		for (int j = 0; j < 16; j++) {
			int lo = (b->qs[j] & 15) | (int)(qh >> j & 1) << 4;
			int hi = (b->qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;

			y[j] = (float)(lo - 16) * d;
			y[j + 16] = (float)(hi - 16) * d;
		}
	}
}

static void
dq_q5_1(const void *src, float *y, size_t nb)
{
	const struct blk_q5_1 *b = src;

	for (size_t i = 0; i < nb; i++, b++, y += QUANT_QK) {
		float d = quant_f16(b->d), m = quant_f16(b->m);
		uint32_t qh = ld32(b->qh);

		for (int j = 0; j < 16; j++) {
			int lo = (b->qs[j] & 15) | (int)(qh >> j & 1) << 4;
			int hi = (b->qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;

			y[j] = (float)lo * d + m;
			y[j + 16] = (float)hi * d + m;
		}
	}
}

static void
dq_q8_0(const void *src, float *y, size_t nb)
{
	const struct blk_q8_0 *b = src;

	for (size_t i = 0; i < nb; i++, b++, y += QUANT_QK) {
		float d = quant_f16(b->d);

		for (int j = 0; j < QUANT_QK; j++)
			y[j] = (float)b->qs[j] * d;
	}
}

static void
dq_q8_1(const void *src, float *y, size_t nb)
{
	const struct blk_q8_1 *b = src;

	for (size_t i = 0; i < nb; i++, b++, y += QUANT_QK) {
		float d = quant_f16(b->d);

		for (int j = 0; j < QUANT_QK; j++)
			y[j] = (float)b->qs[j] * d;
	}
}

static void
dq_q2_K(const void *src, float *y, size_t nb)
{
	const struct blk_q2_K *b = src;

	for (size_t i = 0; i < nb; i++, b++) {
		float d = quant_f16(b->d), dmin = quant_f16(b->dmin);
		int s = 0;

		for (int h = 0; h < 2; h++) {
			const uint8_t *q = b->qs + 32 * h;

			for (int c = 0; c < 4; c++) {
				for (int half = 0; half < 2; half++, s++) {
					float dl = d * (float)(b->scales[s] & 15);
					float ml = dmin * (float)(b->scales[s] >> 4);

					for (int l = 16 * half; l < 16 * half + 16; l++)
						*y++ = dl * (float)(q[l] >> 2 * c & 3) - ml;
				}
			}
		}
	}
}

/* The 16 signed 6-bit scales of a Q3_K block, unpacked. */
static void
q3_K_scales(const uint8_t *p, int sc[16])
{
	for (int s = 0; s < 16; s++) {
		int lo = s < 8 ? p[s] & 15 : p[s - 8] >> 4;
		int hi = p[8 + s % 4] >> 2 * (s / 4) & 3;

		sc[s] = (lo | hi << 4) - 32;
	}
}

static void
dq_q3_K(const void *src, float *y, size_t nb)
{
	const struct blk_q3_K *b = src;
	int sc[16];

	for (size_t i = 0; i < nb; i++, b++) {
		float d = quant_f16(b->d);
		int s = 0;

		q3_K_scales(b->scales, sc);
		for (int h = 0; h < 2; h++) {
			const uint8_t *q = b->qs + 32 * h;

			for (int c = 0; c < 4; c++) {
				int bit = 4 * h + c;

				for (int half = 0; half < 2; half++, s++) {
					float dl = d * (float)sc[s];

					for (int l = 16 * half; l < 16 * half + 16; l++) {
						int v = (q[l] >> 2 * c & 3) -
						    ((b->hmask[l] >> bit & 1) ? 0 : 4);

						*y++ = dl * (float)v;
					}
				}
			}
		}
	}
}

static void
dq_q4_K(const void *src, float *y, size_t nb)
{
	const struct blk_q4_K *b = src;

	for (size_t i = 0; i < nb; i++, b++) {
		float d = quant_f16(b->d), dmin = quant_f16(b->dmin);

		for (int c = 0; c < 4; c++) {
			const uint8_t *q = b->qs + 32 * c;
			uint8_t sc, mn;
			float d1, m1, d2, m2;

			quant_k_scale_min(2 * c, b->scales, &sc, &mn);
			d1 = d * (float)sc;
			m1 = dmin * (float)mn;
			quant_k_scale_min(2 * c + 1, b->scales, &sc, &mn);
			d2 = d * (float)sc;
			m2 = dmin * (float)mn;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (float)(q[l] & 15) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (float)(q[l] >> 4) - m2;
		}
	}
}

static void
dq_q5_K(const void *src, float *y, size_t nb)
{
	const struct blk_q5_K *b = src;

	for (size_t i = 0; i < nb; i++, b++) {
		float d = quant_f16(b->d), dmin = quant_f16(b->dmin);

		for (int c = 0; c < 4; c++) {
			const uint8_t *q = b->qs + 32 * c;
			int s1 = 2 * c, s2 = 2 * c + 1;
			uint8_t sc, mn;
			float d1, m1, d2, m2;

			quant_k_scale_min(s1, b->scales, &sc, &mn);
			d1 = d * (float)sc;
			m1 = dmin * (float)mn;
			quant_k_scale_min(s2, b->scales, &sc, &mn);
			d2 = d * (float)sc;
			m2 = dmin * (float)mn;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (float)((q[l] & 15) |
				    (b->qh[l] >> s1 & 1) << 4) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (float)((q[l] >> 4) |
				    (b->qh[l] >> s2 & 1) << 4) - m2;
		}
	}
}

static void
dq_q6_K(const void *src, float *y, size_t nb)
{
	const struct blk_q6_K *b = src;

	for (size_t i = 0; i < nb; i++, b++) {
		float d = quant_f16(b->d);

		for (int h = 0; h < 2; h++, y += 128) {
			const uint8_t *ql = b->ql + 64 * h;
			const uint8_t *qh = b->qh + 32 * h;
			const int8_t *sc = b->scales + 8 * h;

			for (int l = 0; l < 32; l++) {
				int s = l / 16;
				int q1 = ((ql[l] & 15) | (qh[l] & 3) << 4) - 32;
				int q2 = ((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32;
				int q3 = ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32;
				int q4 = ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32;

				y[l] = d * (float)sc[s] * (float)q1;
				y[l + 32] = d * (float)sc[s + 2] * (float)q2;
				y[l + 64] = d * (float)sc[s + 4] * (float)q3;
				y[l + 96] = d * (float)sc[s + 6] * (float)q4;
			}
		}
	}
}

static void
dq_q8_K(const void *src, float *y, size_t nb)
{
	const uint8_t *p = src;

	for (size_t i = 0; i < nb; i++, p += sizeof(struct blk_q8_K)) {
		const int8_t *qs = (const int8_t *)(p +
		    offsetof(struct blk_q8_K, qs));
		float d;

		memcpy(&d, p + offsetof(struct blk_q8_K, d), sizeof(d));
		for (int j = 0; j < QUANT_QK_K; j++)
			*y++ = d * (float)qs[j];
	}
}

/* ---- quantization ------------------------------------------------------ */

static void
q_f16(const float *x, void *dst, size_t n)
{
	uint8_t *p = dst;

	for (size_t i = 0; i < n; i++)
		st16(p + 2 * i, fp32_to_fp16(x[i]));
}

static void
q_bf16(const float *x, void *dst, size_t n)
{
	uint8_t *p = dst;

	for (size_t i = 0; i < n; i++)
		st16(p + 2 * i, fp32_to_bf16(x[i]));
}

/* Q8_0: d = amax / 127 (stored as f16), q = round(x * (1 / d)), ties away. */
static void
q_q8_0(const float *x, void *dst, size_t nb)
{
	struct blk_q8_0 *b = dst;

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK) {
		float max, d = signed_max(x, QUANT_QK, &max) / 127.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;

		st16(b->d, fp32_to_fp16(d));
		for (int j = 0; j < QUANT_QK; j++)
			b->qs[j] = (int8_t)round_away(x[j] * id);
	}
}

/*
 * Q8_0 for activations: d = amax / 127 as above, but q = round-half-even(x *
 * (127 / amax)).
 */
static void
q_q8_0_act(const float *x, void *dst, size_t nb)
{
	struct blk_q8_0 *b = dst;

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK) {
		float max, amax = signed_max(x, QUANT_QK, &max);
		float id = amax != 0.0f ? 127.0f / amax : 0.0f;

		st16(b->d, fp32_to_fp16(amax / 127.0f));
		for (int j = 0; j < QUANT_QK; j++)
			b->qs[j] = (int8_t)round_clamp(x[j] * id, -128, 127);
	}
}

/*
 * Q8_1: quants as Q8_0 (act: as q_q8_0_act()), plus s = f16(d * sum(q))
 * with the float d.
 */
static void
q8_1_block(const float *x, struct blk_q8_1 *b, bool act)
{
	float max, amax = signed_max(x, QUANT_QK, &max);
	float d = amax / 127.0f;
	float id = act ? (amax != 0.0f ? 127.0f / amax : 0.0f) :
	    (d != 0.0f ? 1.0f / d : 0.0f);
	int sum = 0;

	st16(b->d, fp32_to_fp16(d));
	for (int j = 0; j < QUANT_QK; j++) {
		b->qs[j] = (int8_t)(act ? round_clamp(x[j] * id, -128, 127) :
		    round_away(x[j] * id));
		sum += b->qs[j];
	}
	st16(b->s, fp32_to_fp16((float)sum * d));
}

static void
q_q8_1(const float *x, void *dst, size_t nb)
{
	struct blk_q8_1 *b = dst;

	for (size_t i = 0; i < nb; i++)
		q8_1_block(x + i * QUANT_QK, b + i, false);
}

static void
q_q8_1_act(const float *x, void *dst, size_t nb)
{
	struct blk_q8_1 *b = dst;

	for (size_t i = 0; i < nb; i++)
		q8_1_block(x + i * QUANT_QK, b + i, true);
}

/*
 * Q4_0: d = -max / 8 where max is the first value of largest magnitude, so
 * that value maps to q = 0; q = min(15, trunc(x / d + 8.5)).
 */
static void
q_q4_0(const float *x, void *dst, size_t nb)
{
	struct blk_q4_0 *b = dst;

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK) {
		float max, d, id;

		signed_max(x, QUANT_QK, &max);
		d = max / -8.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		st16(b->d, fp32_to_fp16(d));
		for (int j = 0; j < 16; j++) {
			int q0 = trunc_clamp(x[j] * id + 8.5f, 15);
			int q1 = trunc_clamp(x[j + 16] * id + 8.5f, 15);

			b->qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

/*
 * Q8_K: iscale = -127 / max (max: the first value of largest magnitude),
 * q = min(127, round-half-even(iscale * x)), d = 1 / iscale; an all-zero
 * block gets d = 0.  bsums hold the sums of each 16 quants.
 */
static void
q_q8_K(const float *x, void *dst, size_t nb)
{
	uint8_t *p = dst;
	struct blk_q8_K b;

	for (size_t i = 0; i < nb; i++, p += sizeof(b), x += QUANT_QK_K) {
		float max, iscale;

		memset(&b, 0, sizeof(b));
		if (signed_max(x, QUANT_QK_K, &max) != 0.0f) {
			iscale = -127.0f / max;
			for (int j = 0; j < QUANT_QK_K; j++)
				b.qs[j] = (int8_t)round_clamp(iscale * x[j], -128, 127);
			for (int g = 0; g < 16; g++) {
				int sum = 0;

				for (int l = 0; l < 16; l++)
					sum += b.qs[16 * g + l];
				b.bsums[g] = (int16_t)sum;
			}
			b.d = 1.0f / iscale;
		}
		memcpy(p, &b, sizeof(b));
	}
}

/* ---- dispatch ---------------------------------------------------------- */

typedef void dq_fn(const void *src, float *dst, size_t nb);
typedef void q_fn(const float *src, void *dst, size_t nb);

static dq_fn *const dq_table[CP_T_COUNT] = {
	[CP_T_F16] = dq_f16,
	[CP_T_BF16] = dq_bf16,
	[CP_T_Q4_0] = dq_q4_0,
	[CP_T_Q4_1] = dq_q4_1,
	[CP_T_Q5_0] = dq_q5_0,
	[CP_T_Q5_1] = dq_q5_1,
	[CP_T_Q8_0] = dq_q8_0,
	[CP_T_Q8_1] = dq_q8_1,
	[CP_T_Q2_K] = dq_q2_K,
	[CP_T_Q3_K] = dq_q3_K,
	[CP_T_Q4_K] = dq_q4_K,
	[CP_T_Q5_K] = dq_q5_K,
	[CP_T_Q6_K] = dq_q6_K,
	[CP_T_Q8_K] = dq_q8_K,
};

static q_fn *const q_table[CP_T_COUNT] = {
	[CP_T_F16] = q_f16,
	[CP_T_BF16] = q_bf16,
	[CP_T_Q4_0] = q_q4_0,
	[CP_T_Q4_1] = quantize_k_q4_1,
	[CP_T_Q5_0] = quantize_k_q5_0,
	[CP_T_Q5_1] = quantize_k_q5_1,
	[CP_T_Q8_0] = q_q8_0,
	[CP_T_Q8_1] = q_q8_1,
	[CP_T_Q2_K] = quantize_k_q2_K,
	[CP_T_Q3_K] = quantize_k_q3_K,
	[CP_T_Q4_K] = quantize_k_q4_K,
	[CP_T_Q5_K] = quantize_k_q5_K,
	[CP_T_Q6_K] = quantize_k_q6_K,
	[CP_T_Q8_K] = q_q8_K,
};

bool
quant_can_dequant(uint32_t t)
{
	return t == CP_T_F32 || (t < CP_T_COUNT && dq_table[t] != NULL);
}

bool
quant_can_quant(uint32_t t)
{
	return t == CP_T_F32 || (t < CP_T_COUNT && q_table[t] != NULL);
}

int
dequant_row(uint32_t t, const void *src, float *dst, size_t n)
{
	const struct ttype_info *ti = ttype_info(t);

	if (ti == NULL || !quant_can_dequant(t) || n % ti->block != 0)
		return -EINVAL;
#if defined(__x86_64__) || defined(__i386__)
	if (t == CP_T_F16 && cpu_use_simd())
		return dequant_row_avx2(t, src, dst, n);
#endif
	if (t == CP_T_F32)
		memmove(dst, src, n * sizeof(float));
	else
		dq_table[t](src, dst, n / ti->block);
	return 0;
}

int
quant_row_act(uint32_t t, const float *src, void *dst, size_t n)
{
	const struct ttype_info *ti = ttype_info(t);

#if defined(__x86_64__) || defined(__i386__)
	if ((t == CP_T_Q8_0 || t == CP_T_Q8_1 || t == CP_T_Q8_K) &&
	    cpu_use_simd())
		return quant_row_act_avx2(t, src, dst, n);
#endif
	if (t != CP_T_Q8_0 && t != CP_T_Q8_1)
		return quant_row(t, src, dst, n);
	if (n % ti->block != 0)
		return -EINVAL;
	if (t == CP_T_Q8_0)
		q_q8_0_act(src, dst, n / ti->block);
	else
		q_q8_1_act(src, dst, n / ti->block);
	return 0;
}

int
quant_row(uint32_t t, const float *src, void *dst, size_t n)
{
	const struct ttype_info *ti = ttype_info(t);

	if (ti == NULL || !quant_can_quant(t) || n % ti->block != 0)
		return -EINVAL;
#if defined(__x86_64__) || defined(__i386__)
	if (t == CP_T_F16 && cpu_use_simd())
		return quant_row_act_avx2(t, src, dst, n);
#endif
	if (t == CP_T_F32)
		memmove(dst, src, n * sizeof(float));
	else
		q_table[t](src, dst, n / ti->block);
	return 0;
}
