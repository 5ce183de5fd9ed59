/*
 * quantize_k.c - F32 rows to the weight formats Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K and Q6_K (layouts in quant.h).
 *
 * The 32-value formats round the way llama-quantize does without an
 * importance matrix, with the same float operations, so they give its bytes:
 * Q4_1 and Q5_1 spread 2^bits levels over the block's [min, max]; Q5_0 uses
 * d = -max / 16 with max the value of largest magnitude, which lands on
 * level 0.
 *
 * The K-quants work in two stages, as llama-quantize's reference path does.
 * First each sub-block (16 or 32 values) gets its own float scale, and for
 * the affine types (Q2_K, Q4_K, Q5_K) a min, from a weighted least-squares
 * fit: for each of a sweep of candidate grid spacings the values are rounded
 * onto the grid, the best scale (and min) for those levels is solved in
 * closed form, and the candidate with the least weighted error wins.  The
 * weights favour large values: x^2 (Q3_K, Q6_K), |x| (Q2_K) or rms + |x|
 * (Q4_K, Q5_K).  Then the sub-block scales and mins are themselves quantized
 * (4, 6 or 8 bits) against f16 super-block factors, and every value is
 * rounded again with the scale it will be decoded with.  The float
 * operations follow that path's order too: on the synth-tiny fixtures every
 * type gives llama-quantize's bytes (tests/check_synth_types.c).
 *
 * Rounding to integers is total: NaN gives 0 (then clamped into range) and
 * every result is clamped to its field, so hostile input cannot trap.
 */
#include "quantize_k.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "quant_bytes.h"

/* A sub-block whose largest magnitude is below this is all zeros. */
#define QK_ZERO_EPS 1e-15f

/* Store f as the f16 at p; returns the value the f16 holds. */
static inline float
put_f16(uint8_t *p, float f)
{
	uint16_t h = fp32_to_fp16(f);

	st16(p, h);
	return fp16_to_fp32(h);
}

/* ---- Q4_1, Q5_0, Q5_1 ------------------------------------------------- */

/*
 * Levels q[0..32) in [0, nmax] for x = m + d * q: m = the block's min,
 * d = (max - min) / nmax, q = trunc((x - m) / d + 0.5).  Stores the f16 d
 * and m at d16, m16.
 */
static void
affine_levels(const float *x, int nmax, uint8_t *d16, uint8_t *m16, int *q)
{
	float lo = FLT_MAX, hi = -FLT_MAX, d, id;

	for (int j = 0; j < QUANT_QK; j++) {
		if (x[j] < lo)
			lo = x[j];
		if (x[j] > hi)
			hi = x[j];
	}
	d = (hi - lo) / (float)nmax;
	id = d != 0.0f ? 1.0f / d : 0.0f;
	put_f16(d16, d);
	put_f16(m16, lo);
	for (int j = 0; j < QUANT_QK; j++)
		q[j] = trunc_clamp((x[j] - lo) * id + 0.5f, nmax);
}

/* Element j < 16 in the low nibble of qs[j], element j + 16 in the high one. */
static void
pack_nibbles(const int *q, uint8_t *qs)
{
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

/* Bit 4 of element j as bit j of the little-endian u32 at qh. */
static void
pack_high_bits(const int *q, uint8_t *qh)
{
	uint32_t h = 0;

	for (int j = 0; j < QUANT_QK; j++)
		h |= (uint32_t)(q[j] >> 4 & 1) << j;
	for (int k = 0; k < 4; k++)
		qh[k] = (uint8_t)(h >> 8 * k);
}

void
quantize_k_q4_1(const float *x, void *dst, size_t nb)
{
	struct blk_q4_1 *b = dst;
	int q[QUANT_QK];

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK) {
		affine_levels(x, 15, b->d, b->m, q);
		pack_nibbles(q, b->qs);
	}
}

void
quantize_k_q5_1(const float *x, void *dst, size_t nb)
{
	struct blk_q5_1 *b = dst;
	int q[QUANT_QK];

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK) {
		affine_levels(x, 31, b->d, b->m, q);
		pack_nibbles(q, b->qs);
		pack_high_bits(q, b->qh);
	}
}

/* d = max / -16 puts max on level 0; q = min(31, trunc(x / d + 16.5)). */
void
quantize_k_q5_0(const float *x, void *dst, size_t nb)
{
	struct blk_q5_0 *b = dst;
	int q[QUANT_QK];

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK) {
		float max, d, id;

		signed_max(x, QUANT_QK, &max);
		d = max / -16.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		put_f16(b->d, d);
		for (int j = 0; j < QUANT_QK; j++)
			q[j] = trunc_clamp(x[j] * id + 16.5f, 31);
		pack_nibbles(q, b->qs);
		pack_high_bits(q, b->qh);
	}
}

/* ---- sub-block fits for the K-quants ---------------------------------- */

/*
 * Symmetric fit of n values to s * l, l in [-nmax, nmax - 1], weights x^2:
 * grids that put the largest magnitude on -(nmax + k / 10) (k = 0, then
 * -9..9) are tried, each scored by the least-squares error of its levels,
 * whose optimal scale is sum(w x l) / sum(w l^2); that error falls as
 * sum(w x l)^2 / sum(w l^2) rises.  Returns the best scale.
 */
static float
fit_symmetric(const float *x, int n, int nmax)
{
	float max, best = 0.0f, scale = 0.0f;

	if (!(signed_max(x, n, &max) >= QK_ZERO_EPS))
		return 0.0f;
	for (int k = 0; k <= 18; k++) {
		int step = k == 0 ? 0 : k <= 9 ? k - 10 : k - 9;
		float iscale = -((float)nmax + 0.1f * (float)step) / max;
		float sumlx = 0.0f, suml2 = 0.0f;

		for (int i = 0; i < n; i++) {
			int l = round_clamp(iscale * x[i], -nmax, nmax - 1);
			float w = x[i] * x[i];

			sumlx += w * x[i] * (float)l;
			suml2 += w * (float)l * (float)l;
		}
		if (k == 0) {
			scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
			best = scale * sumlx;
		} else if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/*
 * Symmetric fit of n values to s * L[i], L[i] in [-nmax, nmax - 1], weights
 * x^2, by coordinate descent: start from the grid that puts the largest
 * magnitude on -nmax, then (at most 5 passes) move each level to the one
 * its value would take under the scale fitted to the others, keeping the
 * move when sum(w x l)^2 / sum(w l^2) grows.  L[] gets the levels plus
 * nmax; returns the scale.
 */
static float
fit_symmetric_refine(const float *x, int n, int nmax, int8_t *L)
{
	float max, iscale, sumlx = 0.0f, suml2 = 0.0f;

	if (!(signed_max(x, n, &max) >= QK_ZERO_EPS)) {
		memset(L, 0, (size_t)n);
		return 0.0f;
	}
	iscale = -(float)nmax / max;
	for (int i = 0; i < n; i++) {
		int l = round_clamp(iscale * x[i], -nmax, nmax - 1);
		float w = x[i] * x[i];

		L[i] = (int8_t)l;
		sumlx += w * x[i] * (float)l;
		suml2 += w * (float)l * (float)l;
	}
	for (int pass = 0; pass < 5; pass++) {
		int moved = 0;

		for (int i = 0; i < n; i++) {
			float w = x[i] * x[i];
			float slx = sumlx - w * x[i] * (float)L[i];
			float sl2;
			int l;

			if (!(slx > 0.0f))
				continue;
			sl2 = suml2 - w * (float)L[i] * (float)L[i];
			l = round_clamp(x[i] * sl2 / slx, -nmax, nmax - 1);
			if (l == L[i])
				continue;
			slx += w * x[i] * (float)l;
			sl2 += w * (float)l * (float)l;
			if (sl2 > 0.0f &&
			    slx * slx * suml2 > sumlx * sumlx * sl2) {
				L[i] = (int8_t)l;
				sumlx = slx;
				suml2 = sl2;
				moved++;
			}
		}
		if (moved == 0)
			break;
	}
	for (int i = 0; i < n; i++)
		L[i] = (int8_t)(L[i] + nmax);
	return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Parameters of fit_affine()'s sweep. */
struct affine_sweep {
	int nmax;		/* levels 0..nmax */
	float rmin;		/* candidate k puts nmax + rmin + k * rdelta */
	float rdelta;		/* grid steps over [min(x, 0), max(x)] */
	int nstep;		/* candidates k = 0..nstep */
	bool abs_err;		/* score by weighted |error|, else error^2 */
};

/* Weighted error of x ~ scale * L + min: |error| if abs_err, else error^2. */
static float
affine_error(const float *x, const float *w, int n, const uint8_t *L,
    float scale, float min, bool abs_err)
{
	float err = 0.0f;

	for (int i = 0; i < n; i++) {
		float diff = scale * (float)L[i] + min - x[i];

		err += w[i] * (abs_err ? fabsf(diff) : diff * diff);
	}
	return err;
}

/*
 * Affine fit of n values (n <= 32) to scale * L[i] - *neg_min with L[i] in
 * [0, nmax] and weights w: the first grid spans [min(x, 0), max(x)] with
 * nmax steps; each sweep candidate re-rounds onto a grid of a slightly
 * different spacing from that low end, then solves the weighted least-
 * squares scale and offset for its levels (offset capped at 0, the scale
 * refitted alone then), and is kept when its error is lower.  Returns the
 * scale; *neg_min >= 0 is minus the offset.
 */
static float
fit_affine(const float *x, const float *w, int n,
    const struct affine_sweep *p, uint8_t *L, float *neg_min)
{
	float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
	float iscale, scale, best;
	uint8_t cand[32];

	for (int i = 1; i < n; i++) {
		if (x[i] < lo)
			lo = x[i];
		if (x[i] > hi)
			hi = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (lo > 0.0f)
		lo = 0.0f;
	if (hi == lo) {
		memset(L, 0, (size_t)n);
		*neg_min = -lo;
		return 0.0f;
	}
	iscale = (float)p->nmax / (hi - lo);
	scale = 1.0f / iscale;
	for (int i = 0; i < n; i++)
		L[i] = (uint8_t)round_clamp(iscale * (x[i] - lo), 0, p->nmax);
	best = affine_error(x, w, n, L, scale, lo, p->abs_err);
	for (int k = 0; k <= p->nstep; k++) {
		float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f, det;
		float s, m, err;

		iscale = (p->rmin + p->rdelta * (float)k + (float)p->nmax) /
		    (hi - lo);
		for (int i = 0; i < n; i++) {
			int l = round_clamp(iscale * (x[i] - lo), 0, p->nmax);

			cand[i] = (uint8_t)l;
			sum_l += w[i] * (float)l;
			sum_l2 += w[i] * (float)l * (float)l;
			sum_xl += w[i] * (float)l * x[i];
		}
		det = sum_w * sum_l2 - sum_l * sum_l;
		if (!(det > 0.0f))
			continue;
		s = (sum_w * sum_xl - sum_x * sum_l) / det;
		m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
		if (m > 0.0f) {
			m = 0.0f;
			s = sum_xl / sum_l2;
		}
		err = affine_error(x, w, n, cand, s, m, p->abs_err);
		if (err < best) {
			memcpy(L, cand, (size_t)n);
			best = err;
			scale = s;
			lo = m;
		}
	}
	*neg_min = -lo;
	return scale;
}

/* ---- Q2_K ------------------------------------------------------------- */

/* Element 128h + 32c + l (L[] in element order) at bits 2c of qs[32h + l]. */
static void
pack_2bit(const uint8_t *L, uint8_t *qs)
{
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 32; l++) {
			const uint8_t *e = L + 128 * h + l;

			qs[32 * h + l] = (uint8_t)((e[0] & 3) |
			    (e[32] & 3) << 2 | (e[64] & 3) << 4 |
			    (e[96] & 3) << 6);
		}
}

static void
q2_K_block(const float *x, struct blk_q2_K *b)
{
	static const struct affine_sweep sw = { 3, -0.5f, 0.1f, 15, true };
	uint8_t L[QUANT_QK_K];
	float scale[16], min[16], w[16], max_scale = 0.0f, max_min = 0.0f;
	float d, dmin;

	for (int s = 0; s < 16; s++) {
		for (int l = 0; l < 16; l++)
			w[l] = fabsf(x[16 * s + l]);
		scale[s] = fit_affine(x + 16 * s, w, 16, &sw, L + 16 * s,
		    &min[s]);
		if (scale[s] > max_scale)
			max_scale = scale[s];
		if (min[s] > max_min)
			max_min = min[s];
	}
	memset(b->scales, 0, sizeof(b->scales));
	if (max_scale > 0.0f) {
		float is = 15.0f / max_scale;

		for (int s = 0; s < 16; s++)
			b->scales[s] = (uint8_t)round_clamp(is * scale[s], 0,
			    15);
		d = put_f16(b->d, max_scale / 15.0f);
	} else {
		d = put_f16(b->d, 0.0f);
	}
	if (max_min > 0.0f) {
		float is = 15.0f / max_min;

		for (int s = 0; s < 16; s++)
			b->scales[s] |= (uint8_t)(round_clamp(is * min[s], 0,
			    15) << 4);
		dmin = put_f16(b->dmin, max_min / 15.0f);
	} else {
		dmin = put_f16(b->dmin, 0.0f);
	}
	for (int s = 0; s < 16; s++) {
		float ds = d * (float)(b->scales[s] & 15);
		float ms = dmin * (float)(b->scales[s] >> 4);

		if (ds == 0.0f)
			continue;
		for (int l = 0; l < 16; l++)
			L[16 * s + l] = (uint8_t)round_clamp((x[16 * s + l] +
			    ms) / ds, 0, 3);
	}
	pack_2bit(L, b->qs);
}

void
quantize_k_q2_K(const float *x, void *dst, size_t nb)
{
	struct blk_q2_K *b = dst;

	for (size_t i = 0; i < nb; i++)
		q2_K_block(x + i * QUANT_QK_K, b + i);
}

/* ---- Q3_K ------------------------------------------------------------- */

/* Sub-block s's 6-bit scale v (stored biased by 32) into the 12 bytes sc. */
static void
q3_K_put_scale(uint8_t *sc, int s, int v)
{
	sc[s % 8] |= (uint8_t)((v & 15) << 4 * (s / 8));
	sc[8 + s % 4] |= (uint8_t)((v >> 4 & 3) << 2 * (s / 4));
}

static void
q3_K_block(const float *x, struct blk_q3_K *b)
{
	int8_t L[QUANT_QK_K];
	uint8_t L2[QUANT_QK_K];
	float scale[16], amax = 0.0f, max = 0.0f, d;
	int sc[16] = { 0 };

	for (int s = 0; s < 16; s++) {
		scale[s] = fit_symmetric_refine(x + 16 * s, 16, 4, L + 16 * s);
		if (fabsf(scale[s]) > amax) {
			amax = fabsf(scale[s]);
			max = scale[s];
		}
	}
	memset(b->scales, 0, sizeof(b->scales));
	if (max != 0.0f) {
		float is = -32.0f / max;

		for (int s = 0; s < 16; s++) {
			sc[s] = round_clamp(is * scale[s], -32, 31);
			q3_K_put_scale(b->scales, s, sc[s] + 32);
		}
		d = put_f16(b->d, 1.0f / is);
	} else {
		d = put_f16(b->d, 0.0f);
	}
	for (int s = 0; s < 16; s++) {
		float ds = d * (float)sc[s];

		if (ds == 0.0f)
			continue;
		for (int l = 0; l < 16; l++)
			L[16 * s + l] = (int8_t)(round_clamp(x[16 * s + l] / ds,
			    -4, 3) + 4);
	}
	/* Levels 0..7: bit 2 of element j as bit j / 32 of hmask[j % 32]. */
	memset(b->hmask, 0, sizeof(b->hmask));
	for (int j = 0; j < QUANT_QK_K; j++) {
		if (L[j] > 3)
			b->hmask[j % 32] |= (uint8_t)(1u << j / 32);
		L2[j] = (uint8_t)(L[j] & 3);
	}
	pack_2bit(L2, b->qs);
}

void
quantize_k_q3_K(const float *x, void *dst, size_t nb)
{
	struct blk_q3_K *b = dst;

	for (size_t i = 0; i < nb; i++)
		q3_K_block(x + i * QUANT_QK_K, b + i);
}

/* ---- Q4_K, Q5_K ------------------------------------------------------- */

/*
 * Sub-block j's 6-bit scale and min into the 12 bytes q (as read back by
 * quant_k_scale_min()).
 */
static void
k4_put_scale_min(uint8_t *q, int j, int sc, int mn)
{
	if (j < 4) {
		q[j] = (uint8_t)sc;
		q[j + 4] = (uint8_t)mn;
	} else {
		q[j + 4] = (uint8_t)((sc & 15) | (mn & 15) << 4);
		q[j - 4] |= (uint8_t)((sc >> 4) << 6);
		q[j] |= (uint8_t)((mn >> 4) << 6);
	}
}

/*
 * The shared part of Q4_K and Q5_K: 8 sub-blocks of 32 fitted (levels
 * 0..nmax, weights rms + |x|), 6-bit scales and mins against f16 d and
 * dmin (stored at d16, dmin16, scales12), levels requantized into L.
 */
static void
k4_levels(const float *x, const struct affine_sweep *sw, uint8_t *d16,
    uint8_t *dmin16, uint8_t *scales12, uint8_t *L)
{
	float scale[8], min[8], w[32], max_scale = 0.0f, max_min = 0.0f;
	float is_scale, is_min, d, dmin;
	int sc[8], mn[8];

	for (int s = 0; s < 8; s++) {
		const float *xs = x + 32 * s;
		float sum_x2 = 0.0f, rms;

		for (int l = 0; l < 32; l++)
			sum_x2 += xs[l] * xs[l];
		rms = sqrtf(sum_x2 / 32.0f);
		for (int l = 0; l < 32; l++)
			w[l] = rms + fabsf(xs[l]);
		scale[s] = fit_affine(xs, w, 32, sw, L + 32 * s, &min[s]);
		if (scale[s] > max_scale)
			max_scale = scale[s];
		if (min[s] > max_min)
			max_min = min[s];
	}
	is_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
	is_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
	memset(scales12, 0, 12);
	for (int s = 0; s < 8; s++) {
		sc[s] = round_clamp(is_scale * scale[s], 0, 63);
		mn[s] = round_clamp(is_min * min[s], 0, 63);
		k4_put_scale_min(scales12, s, sc[s], mn[s]);
	}
	d = put_f16(d16, max_scale / 63.0f);
	dmin = put_f16(dmin16, max_min / 63.0f);
	for (int s = 0; s < 8; s++) {
		float ds = d * (float)sc[s], ms = dmin * (float)mn[s];

		if (ds == 0.0f)
			continue;
		for (int l = 0; l < 32; l++)
			L[32 * s + l] = (uint8_t)round_clamp(
			    (x[32 * s + l] + ms) / ds, 0, sw->nmax);
	}
}

void
quantize_k_q4_K(const float *x, void *dst, size_t nb)
{
	static const struct affine_sweep sw = { 15, -1.0f, 0.1f, 20, false };
	struct blk_q4_K *b = dst;
	uint8_t L[QUANT_QK_K];

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK_K) {
		k4_levels(x, &sw, b->d, b->dmin, b->scales, L);
		/* Elements 64c + l and 64c + 32 + l share qs[32c + l]. */
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] |
				    L[64 * c + 32 + l] << 4);
	}
}

void
quantize_k_q5_K(const float *x, void *dst, size_t nb)
{
	static const struct affine_sweep sw = { 31, -0.5f, 0.1f, 15, false };
	struct blk_q5_K *b = dst;
	uint8_t L[QUANT_QK_K];

	for (size_t i = 0; i < nb; i++, b++, x += QUANT_QK_K) {
		k4_levels(x, &sw, b->d, b->dmin, b->scales, L);
		/* As Q4_K, bit 4 of element 32s + l as bit s of qh[l]. */
		memset(b->qh, 0, sizeof(b->qh));
		for (int c = 0; c < 4; c++) {
			for (int l = 0; l < 32; l++) {
				int lo = L[64 * c + l], hi = L[64 * c + 32 + l];

				b->qs[32 * c + l] = (uint8_t)((lo & 15) |
				    (hi & 15) << 4);
				b->qh[l] |= (uint8_t)((lo >> 4) << 2 * c |
				    (hi >> 4) << (2 * c + 1));
			}
		}
	}
}

/* ---- Q6_K ------------------------------------------------------------- */

static void
q6_K_block(const float *x, struct blk_q6_K *b)
{
	uint8_t L[QUANT_QK_K];
	float scale[16], amax = 0.0f, max = 0.0f, is, d;

	for (int s = 0; s < 16; s++) {
		scale[s] = fit_symmetric(x + 16 * s, 16, 32);
		if (fabsf(scale[s]) > amax) {
			amax = fabsf(scale[s]);
			max = scale[s];
		}
	}
	memset(b, 0, sizeof(*b));
	if (!(amax >= QK_ZERO_EPS))
		return;		/* all zero: d = 0 */
	is = -128.0f / max;
	d = put_f16(b->d, 1.0f / is);
	memset(L, 32, sizeof(L));
	for (int s = 0; s < 16; s++) {
		float ds;

		b->scales[s] = (int8_t)round_clamp(is * scale[s], -128, 127);
		ds = d * (float)b->scales[s];
		if (ds == 0.0f)
			continue;
		for (int l = 0; l < 16; l++)
			L[16 * s + l] = (uint8_t)(round_clamp(
			    x[16 * s + l] / ds, -32, 31) + 32);
	}
	/*
	 * Element 128h + 32c + l: low nibble in ql[64h + 32(c & 1) + l]
	 * (c >= 2: high nibble), top two bits at bits 2c of qh[32h + l].
	 */
	for (int h = 0; h < 2; h++) {
		for (int l = 0; l < 32; l++) {
			const uint8_t *e = L + 128 * h + l;

			b->ql[64 * h + l] = (uint8_t)((e[0] & 15) |
			    (e[64] & 15) << 4);
			b->ql[64 * h + 32 + l] = (uint8_t)((e[32] & 15) |
			    (e[96] & 15) << 4);
			b->qh[32 * h + l] = (uint8_t)(e[0] >> 4 |
			    (e[32] >> 4) << 2 | (e[64] >> 4) << 4 |
			    (e[96] >> 4) << 6);
		}
	}
}

void
quantize_k_q6_K(const float *x, void *dst, size_t nb)
{
	struct blk_q6_K *b = dst;

	for (size_t i = 0; i < nb; i++)
		q6_K_block(x + i * QUANT_QK_K, b + i);
}
