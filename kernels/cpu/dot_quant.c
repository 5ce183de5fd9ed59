/*
 * dot_quant.c - scalar kernels for quantized weights times quantized
 * activations.  These define the summation order the SIMD kernels must
 * reproduce bit for bit (see dot.h): integer sums inside each block, one
 * float scaling per block, partial sums in a fixed order along k.
 */
#include "dot.h"

#include <string.h>

#include "quant.h"

/* ---- 32-element blocks: partial sum b % 4, then (p0 + p1) + (p2 + p3) ---- */

static inline float
p4_sum(const float p[4])
{
	return (p[0] + p[1]) + (p[2] + p[3]);
}

static float
row_q4_0(int nb, const void *wv, const void *xv)
{
	const struct blk_q4_0 *w = wv;
	const struct blk_q8_0 *x = xv;
	float p[4] = { 0 };

	for (int b = 0; b < nb; b++) {
		int isum = 0;

		for (int j = 0; j < 16; j++) {
			isum += ((w[b].qs[j] & 15) - 8) * x[b].qs[j];
			isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
		}
		p[b & 3] += (float)isum * (quant_f16(w[b].d) * quant_f16(x[b].d));
	}
	return p4_sum(p);
}

/* sum(w * x) = d_w d_x sum(q_w q_x) + m_w s_x, s_x = d_x sum(q_x). */
static float
row_q4_1(int nb, const void *wv, const void *xv)
{
	const struct blk_q4_1 *w = wv;
	const struct blk_q8_1 *x = xv;
	float p[4] = { 0 };

	for (int b = 0; b < nb; b++) {
		int isum = 0;
		float t;

		for (int j = 0; j < 16; j++) {
			isum += (w[b].qs[j] & 15) * x[b].qs[j];
			isum += (w[b].qs[j] >> 4) * x[b].qs[j + 16];
		}
		t = (float)isum * (quant_f16(w[b].d) * quant_f16(x[b].d));
		p[b & 3] += t + quant_f16(w[b].m) * quant_f16(x[b].s);
	}
	return p4_sum(p);
}

static inline uint32_t
ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static float
row_q5_0(int nb, const void *wv, const void *xv)
{
	const struct blk_q5_0 *w = wv;
	const struct blk_q8_0 *x = xv;
	float p[4] = { 0 };

	for (int b = 0; b < nb; b++) {
		uint32_t qh = ld32(w[b].qh);
		int isum = 0;

		for (int j = 0; j < 16; j++) {
			int lo = (w[b].qs[j] & 15) | (int)(qh >> j & 1) << 4;
			int hi = (w[b].qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;

			isum += (lo - 16) * x[b].qs[j];
			isum += (hi - 16) * x[b].qs[j + 16];
		}
		p[b & 3] += (float)isum * (quant_f16(w[b].d) * quant_f16(x[b].d));
	}
	return p4_sum(p);
}

static float
row_q5_1(int nb, const void *wv, const void *xv)
{
	const struct blk_q5_1 *w = wv;
	const struct blk_q8_1 *x = xv;
	float p[4] = { 0 };

	for (int b = 0; b < nb; b++) {
		uint32_t qh = ld32(w[b].qh);
		int isum = 0;
		float t;

		for (int j = 0; j < 16; j++) {
			int lo = (w[b].qs[j] & 15) | (int)(qh >> j & 1) << 4;
			int hi = (w[b].qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;

			isum += lo * x[b].qs[j];
			isum += hi * x[b].qs[j + 16];
		}
		t = (float)isum * (quant_f16(w[b].d) * quant_f16(x[b].d));
		p[b & 3] += t + quant_f16(w[b].m) * quant_f16(x[b].s);
	}
	return p4_sum(p);
}

static float
row_q8_0(int nb, const void *wv, const void *xv)
{
	const struct blk_q8_0 *w = wv;
	const struct blk_q8_0 *x = xv;
	float p[4] = { 0 };

	for (int b = 0; b < nb; b++) {
		int isum = 0;

		for (int j = 0; j < 32; j++)
			isum += w[b].qs[j] * x[b].qs[j];
		p[b & 3] += (float)isum * (quant_f16(w[b].d) * quant_f16(x[b].d));
	}
	return p4_sum(p);
}

/* ---- K-quants: acc += d * isum (- dmin * msum) per super-block ---------- */

static float
row_q2_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q2_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		const int8_t *q8 = x[b].qs;
		int isum = 0, msum = 0;

		for (int s = 0; s < 16; s++)
			msum += (w[b].scales[s] >> 4) * x[b].bsums[s];
		for (int h = 0; h < 2; h++) {
			const uint8_t *q = w[b].qs + 32 * h;

			for (int c = 0; c < 4; c++) {
				int s = 8 * h + 2 * c, lo = 0, hi = 0;

				for (int l = 0; l < 16; l++) {
					lo += (q[l] >> 2 * c & 3) * q8[l];
					hi += (q[l + 16] >> 2 * c & 3) * q8[l + 16];
				}
				isum += (w[b].scales[s] & 15) * lo +
				    (w[b].scales[s + 1] & 15) * hi;
				q8 += 32;
			}
		}
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum -
		    (quant_f16(w[b].dmin) * x[b].d) * (float)msum;
	}
	return acc;
}

static float
row_q3_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q3_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		const uint8_t *sp = w[b].scales;
		const int8_t *q8 = x[b].qs;
		int isum = 0;

		for (int h = 0; h < 2; h++) {
			const uint8_t *q = w[b].qs + 32 * h;

			for (int c = 0; c < 4; c++) {
				int bit = 4 * h + c;

				for (int half = 0; half < 2; half++) {
					int s = 8 * h + 2 * c + half;
					int lo4 = s < 8 ? sp[s] & 15 : sp[s - 8] >> 4;
					int hi2 = sp[8 + s % 4] >> 2 * (s / 4) & 3;
					int sum = 0;

					for (int l = 16 * half; l < 16 * half + 16; l++) {
						int v = (q[l] >> 2 * c & 3) -
						    ((w[b].hmask[l] >> bit & 1) ? 0 : 4);

						sum += v * q8[l];
					}
					isum += ((lo4 | hi2 << 4) - 32) * sum;
				}
				q8 += 32;
			}
		}
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum;
	}
	return acc;
}

static float
row_q4_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q4_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		const int8_t *q8 = x[b].qs;
		int isum = 0, msum = 0;

		for (int c = 0; c < 4; c++) {
			const uint8_t *q = w[b].qs + 32 * c;
			uint8_t sc1, mn1, sc2, mn2;
			int lo = 0, hi = 0;

			quant_k_scale_min(2 * c, w[b].scales, &sc1, &mn1);
			quant_k_scale_min(2 * c + 1, w[b].scales, &sc2, &mn2);
			for (int l = 0; l < 32; l++) {
				lo += (q[l] & 15) * q8[l];
				hi += (q[l] >> 4) * q8[l + 32];
			}
			isum += sc1 * lo + sc2 * hi;
			msum += mn1 * (x[b].bsums[4 * c] + x[b].bsums[4 * c + 1]) +
			    mn2 * (x[b].bsums[4 * c + 2] + x[b].bsums[4 * c + 3]);
			q8 += 64;
		}
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum -
		    (quant_f16(w[b].dmin) * x[b].d) * (float)msum;
	}
	return acc;
}

static float
row_q5_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q5_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		const int8_t *q8 = x[b].qs;
		const uint8_t *qh = w[b].qh;
		int isum = 0, msum = 0;

		for (int c = 0; c < 4; c++) {
			const uint8_t *q = w[b].qs + 32 * c;
			int s1 = 2 * c, s2 = 2 * c + 1;
			uint8_t sc1, mn1, sc2, mn2;
			int lo = 0, hi = 0;

			quant_k_scale_min(s1, w[b].scales, &sc1, &mn1);
			quant_k_scale_min(s2, w[b].scales, &sc2, &mn2);
			for (int l = 0; l < 32; l++) {
				lo += ((q[l] & 15) | (qh[l] >> s1 & 1) << 4) * q8[l];
				hi += ((q[l] >> 4) | (qh[l] >> s2 & 1) << 4) * q8[l + 32];
			}
			isum += sc1 * lo + sc2 * hi;
			msum += mn1 * (x[b].bsums[4 * c] + x[b].bsums[4 * c + 1]) +
			    mn2 * (x[b].bsums[4 * c + 2] + x[b].bsums[4 * c + 3]);
			q8 += 64;
		}
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum -
		    (quant_f16(w[b].dmin) * x[b].d) * (float)msum;
	}
	return acc;
}

static float
row_q6_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q6_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		const int8_t *q8 = x[b].qs;
		int isum = 0;

		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = w[b].ql + 64 * h;
			const uint8_t *qh = w[b].qh + 32 * h;

			for (int c = 0; c < 4; c++) {
				const uint8_t *qn = ql + 32 * (c & 1);
				int shift = c < 2 ? 0 : 4;

				for (int half = 0; half < 2; half++) {
					int s = 8 * h + 2 * c + half, sum = 0;

					for (int l = 16 * half; l < 16 * half + 16; l++) {
						int v = ((qn[l] >> shift & 15) |
						    (qh[l] >> 2 * c & 3) << 4) - 32;

						sum += v * q8[l];
					}
					isum += w[b].scales[s] * sum;
				}
				q8 += 32;
			}
		}
		acc += (quant_f16(w[b].d) * x[b].d) * (float)isum;
	}
	return acc;
}

typedef float row_fn(int nb, const void *w, const void *x);

/*
 * Weight row outer, activation rows inner; each output element comes from
 * one row function call.
 */
static void
dot_loop(row_fn *row, int nb, const void *w, size_t bw, int nw,
    const void *x, size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++) {
		const char *wr = (const char *)w + o * bw;

		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row(nb, wr, (const char *)x + r * bx);
	}
}

void
dot_q4_0_q8_0(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q4_0, k / QUANT_QK, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q4_1_q8_1(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q4_1, k / QUANT_QK, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q5_0_q8_0(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q5_0, k / QUANT_QK, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q5_1_q8_1(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q5_1, k / QUANT_QK, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q8_0_q8_0(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q8_0, k / QUANT_QK, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q2_K_q8_K(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q2_K, k / QUANT_QK_K, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q3_K_q8_K(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q3_K, k / QUANT_QK_K, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q4_K_q8_K(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q4_K, k / QUANT_QK_K, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q5_K_q8_K(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q5_K, k / QUANT_QK_K, w, bw, nw, x, bx, nx, y, ldy);
}

void
dot_q6_K_q8_K(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	dot_loop(row_q6_K, k / QUANT_QK_K, w, bw, nw, x, bx, nx, y, ldy);
}
