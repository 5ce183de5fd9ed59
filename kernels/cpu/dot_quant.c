/*
 * dot_quant.c - scalar kernels for quantized weights times quantized
 * activations.  They define the summation order the AVX2 kernels reproduce
 * bit for bit (dot.h).
 *
 * The order is the one ggml's x86 AVX2 CPU backend used in llama.cpp
 * c392e509 (the build behind the fixtures' references), so that results
 * track llama.cpp's as closely as rounding allows: every block (or super-block)
 * yields 8 exact integer lane sums, lane l covering bytes 4l..4l+3 of each
 * 32-value chunk; each lane sum is converted to float and fused-multiply-
 * added with the block's combined scale into float lane l; the 8 float lanes
 * are reduced once, at the end, as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
 * (l3 + l7)).  Min terms (Q4_1, Q5_1, Q4_K, Q5_K) are accumulated apart as
 * each type's comment says.  fmaf() is exact fused multiply-add on every
 * CPU (a library call where the compiler has no FMA instruction).
 */
#include "dot.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "quant_bytes.h"

static inline float
hsum8(const float a[8])
{
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* acc[l] = fma(d, sum over p in [4l, 4l + 4) of w[p] x[p], acc[l]) */
static inline void
lanes32(const int8_t *w, const int8_t *x, float d, float acc[8])
{
	for (int l = 0; l < 8; l++) {
		int s = 0;

		for (int i = 4 * l; i < 4 * l + 4; i++)
			s += w[i] * x[i];
		acc[l] = fmaf(d, (float)s, acc[l]);
	}
}

/* The 32 values of a Q4_0 / Q5_0 block (signed) or Q4_1 / Q5_1 (unsigned). */
static inline void
nibbles(const uint8_t *qs, int8_t v[32], int off)
{
	for (int j = 0; j < 16; j++) {
		v[j] = (int8_t)((qs[j] & 15) - off);
		v[j + 16] = (int8_t)((qs[j] >> 4) - off);
	}
}

static inline void
nibbles5(const uint8_t *qs, const uint8_t *qhp, int8_t v[32], int off)
{
	uint32_t qh = ld32(qhp);

	for (int j = 0; j < 16; j++) {
		v[j] = (int8_t)(((qs[j] & 15) | (int)(qh >> j & 1) << 4) - off);
		v[j + 16] = (int8_t)(((qs[j] >> 4) |
		    (int)(qh >> (j + 16) & 1) << 4) - off);
	}
}

/* ---- 32-value blocks ------------------------------------------------------ */

/*
 * Q4_0 follows ggml's interleaved (repacked) x86 kernel instead, which
 * llama.cpp's CPU backend uses for Q4_0: the exact sum of each block, fused-
 * multiply-added with the block's combined scale into one float.
 */
static float
row_q4_0(int nb, const void *wv, const void *xv)
{
	const struct blk_q4_0 *w = wv;
	const struct blk_q8_0 *x = xv;
	float acc = 0.0f;

	for (int b = 0; b < nb; b++) {
		int isum = 0;

		for (int j = 0; j < 16; j++) {
			isum += ((w[b].qs[j] & 15) - 8) * x[b].qs[j];
			isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
		}
		acc = fmaf((float)isum, quant_f16(w[b].d) * quant_f16(x[b].d),
		    acc);
	}
	return acc;
}

static float
row_q5_0(int nb, const void *wv, const void *xv)
{
	const struct blk_q5_0 *w = wv;
	const struct blk_q8_0 *x = xv;
	float acc[8] = { 0 };
	int8_t v[32];

	for (int b = 0; b < nb; b++) {
		nibbles5(w[b].qs, w[b].qh, v, 16);
		lanes32(v, x[b].qs, quant_f16(w[b].d) * quant_f16(x[b].d), acc);
	}
	return hsum8(acc);
}

static float
row_q8_0(int nb, const void *wv, const void *xv)
{
	const struct blk_q8_0 *w = wv;
	const struct blk_q8_0 *x = xv;
	float acc[8] = { 0 };

	for (int b = 0; b < nb; b++)
		lanes32(w[b].qs, x[b].qs, quant_f16(w[b].d) * quant_f16(x[b].d),
		    acc);
	return hsum8(acc);
}

/*
 * sum(w x) = d_w d_x sum(q_w q_x) + m_w s_x (s_x = d_x sum(q_x)): the first
 * term in the lanes, the second in one float fused-multiply-added block by
 * block, added after the lane reduction.
 */
static float
row_q4_1(int nb, const void *wv, const void *xv)
{
	const struct blk_q4_1 *w = wv;
	const struct blk_q8_1 *x = xv;
	float acc[8] = { 0 }, summs = 0.0f;
	int8_t v[32];

	for (int b = 0; b < nb; b++) {
		summs = fmaf(quant_f16(w[b].m), quant_f16(x[b].s), summs);
		nibbles(w[b].qs, v, 0);
		lanes32(v, x[b].qs, quant_f16(w[b].d) * quant_f16(x[b].d), acc);
	}
	return hsum8(acc) + summs;
}

static float
row_q5_1(int nb, const void *wv, const void *xv)
{
	const struct blk_q5_1 *w = wv;
	const struct blk_q8_1 *x = xv;
	float acc[8] = { 0 }, summs = 0.0f;
	int8_t v[32];

	for (int b = 0; b < nb; b++) {
		summs = fmaf(quant_f16(w[b].m), quant_f16(x[b].s), summs);
		nibbles5(w[b].qs, w[b].qh, v, 0);
		lanes32(v, x[b].qs, quant_f16(w[b].d) * quant_f16(x[b].d), acc);
	}
	return hsum8(acc) + summs;
}

/* ---- K-quants -------------------------------------------------------------- */

/*
 * Lane sums of one 32-value chunk whose first 16 values have scale s0 and
 * last 16 scale s1 (lanes 0-3 and 4-7): isum[l] += s * sum of 4 products.
 */
static inline void
chunk_lanes(const int8_t *v, const int8_t *x, int s0, int s1, int isum[8])
{
	for (int l = 0; l < 8; l++) {
		int s = 0;

		for (int i = 4 * l; i < 4 * l + 4; i++)
			s += v[i] * x[i];
		isum[l] += (l < 4 ? s0 : s1) * s;
	}
}

static inline void
lanes_fma(float d, const int isum[8], float acc[8])
{
	for (int l = 0; l < 8; l++)
		acc[l] = fmaf(d, (float)isum[l], acc[l]);
}

/*
 * Q2_K: per super-block, first the mins, lane l getting
 * -d_x dmin (mn[2l] bsums[2l] + mn[2l + 1] bsums[2l + 1]), then the scaled
 * quants, both into the same lanes.
 */
static float
row_q2_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q2_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc[8] = { 0 };
	int8_t v[32];

	for (int b = 0; b < nb; b++) {
		float d = x[b].d * quant_f16(w[b].d);
		float dmin = -x[b].d * quant_f16(w[b].dmin);
		int isum[8] = { 0 }, prod[8];

		for (int l = 0; l < 8; l++)
			prod[l] = (w[b].scales[2 * l] >> 4) * x[b].bsums[2 * l] +
			    (w[b].scales[2 * l + 1] >> 4) * x[b].bsums[2 * l + 1];
		lanes_fma(dmin, prod, acc);
		for (int h = 0; h < 2; h++) {
			for (int c = 0; c < 4; c++) {
				int s = 8 * h + 2 * c;

				for (int p = 0; p < 32; p++)
					v[p] = (int8_t)(w[b].qs[32 * h + p] >> 2 * c & 3);
				chunk_lanes(v, x[b].qs + 128 * h + 32 * c,
				    w[b].scales[s] & 15, w[b].scales[s + 1] & 15,
				    isum);
			}
		}
		lanes_fma(d, isum, acc);
	}
	return hsum8(acc);
}

static float
row_q3_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q3_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc[8] = { 0 };
	int8_t v[32];
	int sc[16];

	for (int b = 0; b < nb; b++) {
		const uint8_t *sp = w[b].scales;
		float d = x[b].d * quant_f16(w[b].d);
		int isum[8] = { 0 };

		for (int s = 0; s < 16; s++) {
			int lo4 = s < 8 ? sp[s] & 15 : sp[s - 8] >> 4;
			int hi2 = sp[8 + s % 4] >> 2 * (s / 4) & 3;

			sc[s] = (lo4 | hi2 << 4) - 32;
		}
		for (int h = 0; h < 2; h++) {
			for (int c = 0; c < 4; c++) {
				int bit = 4 * h + c, s = 8 * h + 2 * c;

				for (int p = 0; p < 32; p++)
					v[p] = (int8_t)((w[b].qs[32 * h + p] >> 2 * c & 3) -
					    ((w[b].hmask[p] >> bit & 1) ? 0 : 4));
				chunk_lanes(v, x[b].qs + 128 * h + 32 * c, sc[s],
				    sc[s + 1], isum);
			}
		}
		lanes_fma(d, isum, acc);
	}
	return hsum8(acc);
}

/*
 * Q4_K/Q5_K mins: four lanes, lane i getting mn[2i] (bsums[4i] +
 * bsums[4i + 1]) + mn[2i + 1] (bsums[4i + 2] + bsums[4i + 3]).
 */
static inline void
k_min_lanes(const uint8_t *mn, const int16_t *bsums, int prod[4])
{
	for (int i = 0; i < 4; i++)
		prod[i] = mn[2 * i] * (bsums[4 * i] + bsums[4 * i + 1]) +
		    mn[2 * i + 1] * (bsums[4 * i + 2] + bsums[4 * i + 3]);
}

/*
 * Q4_K: the mins go to four float lanes of their own, reduced as
 * (m0 + m2) + (m1 + m3) and added after the main lanes.
 */
static float
row_q4_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q4_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc[8] = { 0 }, accm[4] = { 0 };
	int8_t lo[32], hi[32];

	for (int b = 0; b < nb; b++) {
		float d = x[b].d * quant_f16(w[b].d);
		float dmin = -x[b].d * quant_f16(w[b].dmin);
		uint8_t sc[8], mn[8];
		int isum[8] = { 0 }, prod[4];

		for (int s = 0; s < 8; s++)
			quant_k_scale_min(s, w[b].scales, &sc[s], &mn[s]);
		k_min_lanes(mn, x[b].bsums, prod);
		for (int i = 0; i < 4; i++)
			accm[i] = fmaf(dmin, (float)prod[i], accm[i]);
		for (int c = 0; c < 4; c++) {
			for (int p = 0; p < 32; p++) {
				lo[p] = (int8_t)(w[b].qs[32 * c + p] & 15);
				hi[p] = (int8_t)(w[b].qs[32 * c + p] >> 4);
			}
			chunk_lanes(lo, x[b].qs + 64 * c, sc[2 * c], sc[2 * c],
			    isum);
			chunk_lanes(hi, x[b].qs + 64 * c + 32, sc[2 * c + 1],
			    sc[2 * c + 1], isum);
		}
		lanes_fma(d, isum, acc);
	}
	return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

/* Q5_K: the mins of each super-block summed exactly, fused into one float. */
static float
row_q5_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q5_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc[8] = { 0 }, summs = 0.0f;
	int8_t lo[32], hi[32];

	for (int b = 0; b < nb; b++) {
		float d = x[b].d * quant_f16(w[b].d);
		float dmin = -x[b].d * quant_f16(w[b].dmin);
		uint8_t sc[8], mn[8];
		int isum[8] = { 0 }, prod[4];

		for (int s = 0; s < 8; s++)
			quant_k_scale_min(s, w[b].scales, &sc[s], &mn[s]);
		k_min_lanes(mn, x[b].bsums, prod);
		summs = fmaf(dmin, (float)((prod[0] + prod[1]) +
		    (prod[2] + prod[3])), summs);
		for (int c = 0; c < 4; c++) {
			for (int p = 0; p < 32; p++) {
				uint8_t q = w[b].qs[32 * c + p], h = w[b].qh[p];

				lo[p] = (int8_t)((q & 15) | (h >> 2 * c & 1) << 4);
				hi[p] = (int8_t)((q >> 4) | (h >> (2 * c + 1) & 1) << 4);
			}
			chunk_lanes(lo, x[b].qs + 64 * c, sc[2 * c], sc[2 * c],
			    isum);
			chunk_lanes(hi, x[b].qs + 64 * c + 32, sc[2 * c + 1],
			    sc[2 * c + 1], isum);
		}
		lanes_fma(d, isum, acc);
	}
	return hsum8(acc) + summs;
}

/* Q6_K: quants q - 32 in [-32, 31], scaled per 16 values. */
static float
row_q6_K(int nb, const void *wv, const void *xv)
{
	const struct blk_q6_K *w = wv;
	const struct blk_q8_K *x = xv;
	float acc[8] = { 0 };
	int8_t v[32];

	for (int b = 0; b < nb; b++) {
		const int8_t *sc = w[b].scales;
		float d = x[b].d * quant_f16(w[b].d);
		int isum[8] = { 0 };

		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = w[b].ql + 64 * h;
			const uint8_t *qh = w[b].qh + 32 * h;

			for (int c = 0; c < 4; c++) {
				const uint8_t *qn = ql + 32 * (c & 1);
				int shift = c < 2 ? 0 : 4, s = 8 * h + 2 * c;

				for (int p = 0; p < 32; p++)
					v[p] = (int8_t)(((qn[p] >> shift & 15) |
					    (qh[p] >> 2 * c & 3) << 4) - 32);
				chunk_lanes(v, x[b].qs + 128 * h + 32 * c, sc[s],
				    sc[s + 1], isum);
			}
		}
		lanes_fma(d, isum, acc);
	}
	return hsum8(acc);
}

/* ---- kernel loops ---------------------------------------------------------- */

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
