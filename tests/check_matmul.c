/*
 * check_matmul.c - matmul.h and the dot kernels of dot.h.
 *
 * References are computed here: W dequantized to F32 (dequant_row()) times
 * the unquantized X in double precision.  The kernels see X rounded or
 * quantized to their activation format, so the tolerance is the sum over j
 * of |W[j]| times the largest error that format's rounding allows for X[j]
 * (derived from the format: half a quantization step plus the rounding of
 * the stored scale), plus float summation error.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "cpu_features.h"
#include "dot.h"
#include "lib/suite.h"
#include "matmul.h"
#include "quant.h"
#include "repack.h"
#include "ttype.h"

static const uint32_t all_types[] = {
	CP_T_F32, CP_T_F16, CP_T_BF16, CP_T_Q4_0, CP_T_Q4_1, CP_T_Q5_0,
	CP_T_Q5_1, CP_T_Q8_0, CP_T_Q2_K, CP_T_Q3_K, CP_T_Q4_K, CP_T_Q5_K,
	CP_T_Q6_K,
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

/* xorshift64*: deterministic test data. */
static uint64_t rng_state;

static void
rng_seed(uint64_t s)
{
	rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

static uint32_t
rng_u32(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* Uniform in [-1, 1). */
static float
rng_f(void)
{
	return (float)rng_u32() / 2147483648.0f - 1.0f;
}

static void
put_f16(uint8_t *p, float v)
{
	uint16_t h = fp32_to_fp16(v);

	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

static size_t
row_bytes(uint32_t t, int k)
{
	uint64_t n;

	ck_assert_int_eq(ttype_nbytes(t, (uint64_t)k, &n), 0);
	return (size_t)n;
}

/* A small positive f16 scale in [lo, 2 lo). */
static float
rng_scale(float lo)
{
	return lo * (1.5f + 0.5f * rng_f());
}

/*
 * n_out random weight rows of type t: float types from uniform values,
 * quantized types from random quant bytes with sane f16 scales written in.
 */
static uint8_t *
make_weights(uint32_t t, int n_out, int k, size_t *stride)
{
	const struct ttype_info *ti = ttype_info(t);
	size_t rb = row_bytes(t, k), nb = (size_t)k / ti->block;
	uint8_t *w = malloc(rb * (size_t)n_out + 1);

	ck_assert_ptr_nonnull(w);
	*stride = rb;
	for (size_t i = 0; i < rb * (size_t)n_out; i++)
		w[i] = (uint8_t)rng_u32();
	for (int o = 0; o < n_out; o++) {
		uint8_t *row = w + (size_t)o * rb;

		for (size_t b = 0; b < nb; b++) {
			uint8_t *blk = row + b * ti->bytes;

			switch (t) {
			case CP_T_F32:
				{
					float v = rng_f();

					memcpy(blk, &v, 4);
				}
				break;
			case CP_T_F16:
				put_f16(blk, rng_f());
				break;
			case CP_T_BF16:
				{
					uint16_t h = fp32_to_bf16(rng_f());

					blk[0] = (uint8_t)h;
					blk[1] = (uint8_t)(h >> 8);
				}
				break;
			case CP_T_Q4_0: case CP_T_Q5_0: case CP_T_Q8_0:
				put_f16(blk, rng_scale(0.01f));
				break;
			case CP_T_Q4_1: case CP_T_Q5_1:
				put_f16(blk, rng_scale(0.01f));
				put_f16(blk + 2, -rng_scale(0.05f));
				break;
			case CP_T_Q2_K:
				put_f16(blk + 80, rng_scale(0.01f));
				put_f16(blk + 82, rng_scale(0.005f));
				break;
			case CP_T_Q3_K:
				put_f16(blk + 108, rng_scale(0.001f));
				break;
			case CP_T_Q4_K: case CP_T_Q5_K:
				put_f16(blk, rng_scale(0.001f));
				put_f16(blk + 2, rng_scale(0.001f));
				break;
			case CP_T_Q6_K:
				put_f16(blk + 208, rng_scale(0.0005f));
				break;
			default:
				ck_abort_msg("no generator for type %u", t);
			}
		}
	}
	return w;
}

static float *
make_x(int m, int ldx)
{
	float *x = malloc(sizeof(float) * (size_t)m * (size_t)ldx);

	ck_assert_ptr_nonnull(x);
	for (int i = 0; i < m * ldx; i++)
		x[i] = rng_f() * (i % 7 == 0 ? 4.0f : 1.0f);
	return x;
}

/*
 * Largest error the activation format of weight type t may add to each of
 * the k values of row x: xerr[j].
 */
static void
act_error(uint32_t t, const float *x, int k, double *xerr)
{
	int blk = 0;
	double div = 0;

	switch (t) {
	case CP_T_F32:
		for (int j = 0; j < k; j++)
			xerr[j] = 0;
		return;
	case CP_T_F16:
		/* half an ulp of 11 significant bits, or of the subnormal step */
		for (int j = 0; j < k; j++)
			xerr[j] = fabs(x[j]) * ldexp(1, -11) + ldexp(1, -25);
		return;
	case CP_T_BF16:
		for (int j = 0; j < k; j++)
			xerr[j] = fabs(x[j]) * ldexp(1, -8);
		return;
	case CP_T_Q2_K: case CP_T_Q3_K: case CP_T_Q4_K: case CP_T_Q5_K:
	case CP_T_Q6_K:
		blk = 256;
		div = 127;
		break;
	default:
		blk = 32;
		div = 127;
		break;
	}
	for (int b = 0; b < k / blk; b++) {
		double amax = 0;

		for (int j = 0; j < blk; j++)
			amax = fmax(amax, fabs(x[b * blk + j]));
		/*
		 * Half a step of amax / 127, plus 127 times the f16 rounding of
		 * the step (Q8_0/Q8_1 store it as f16: relative 2^-11).
		 */
		for (int j = 0; j < blk; j++)
			xerr[b * blk + j] = amax / div * (0.5 + (blk == 32 ?
			    127 * ldexp(1, -11) : 1e-6));
	}
}

/*
 * Q4_1/Q5_1 times Q8_1: the min term m * s reads s = f16(d * sum(q)), which
 * adds |m| (|s| 2^-11 + |d - f16(d)| |sum q|) <= |m| 64 amax 2^-11 per block.
 */
static double
min_term_error(uint32_t t, const uint8_t *w, const float *x, int k)
{
	size_t bytes = t == CP_T_Q4_1 ? sizeof(struct blk_q4_1) :
	    sizeof(struct blk_q5_1);
	double e = 0;

	if (t != CP_T_Q4_1 && t != CP_T_Q5_1)
		return 0;
	for (int b = 0; b < k / 32; b++) {
		double amax = 0;

		for (int j = 0; j < 32; j++)
			amax = fmax(amax, fabs(x[32 * b + j]));
		e += fabs(quant_f16(w + b * bytes + 2)) * 64 * amax *
		    ldexp(1, -11);
	}
	return e;
}

/*
 * Y (m x n_out, ldy) against the double-precision reference; every output
 * element within its own error bound.
 */
static void
check_against_reference(uint32_t t, const uint8_t *w, size_t ws, int n_out,
    int k, const float *x, int ldx, int m, const float *y, int ldy)
{
	float *wf = malloc(sizeof(float) * (size_t)k);
	double *xerr = malloc(sizeof(double) * (size_t)k);

	ck_assert_ptr_nonnull(wf);
	ck_assert_ptr_nonnull(xerr);
	for (int r = 0; r < m; r++) {
		const float *xr = x + (size_t)r * ldx;

		act_error(t, xr, k, xerr);
		for (int o = 0; o < n_out; o++) {
			double ref = 0, bound = 0, mag = 0, got;

			ck_assert_int_eq(dequant_row(t, w + (size_t)o * ws, wf,
			    (size_t)k), 0);
			for (int j = 0; j < k; j++) {
				ref += (double)wf[j] * xr[j];
				bound += fabs(wf[j]) * xerr[j];
				mag += fabs(wf[j]) * (fabs(xr[j]) + xerr[j]);
			}
			bound += min_term_error(t, w + (size_t)o * ws, xr, k);
			/* float rounding: products, block scaling, k additions */
			bound += mag * (k + 8) * ldexp(1, -23);
			got = y[(size_t)r * ldy + o];
			ck_assert_msg(fabs(got - ref) <= bound,
			    "%s k=%d row %d out %d: got %.9g want %.9g (bound %.3g)",
			    ttype_name(t), k, r, o, got, ref, bound);
		}
	}
	free(xerr);
	free(wf);
}

/* Y = X W^T through matmul.h in one call covering all rows and outputs. */
static void
run_mm(uint32_t t, const uint8_t *w, size_t ws, int n_out, int k,
    const float *x, int ldx, int m, float *y, int ldy, int o0, int o1)
{
	struct mm_args a = {
		.wtype = t, .w = w, .w_stride = ws, .n_out = n_out, .k = k,
		.x = x, .ldx = (size_t)ldx, .m = m, .y = y, .ldy = (size_t)ldy,
	};
	size_t sb = mm_scratch_bytes(t, k, m);
	void *scratch = sb != 0 ? malloc(sb) : NULL;

	if (t != CP_T_F32)
		ck_assert_ptr_nonnull(scratch);
	mm_prepare(&a, scratch);
	mm_rows(&a, scratch, o0, o1);
	free(scratch);
}

static int
min_k(uint32_t t)
{
	const struct ttype_info *ti = ttype_info(t);

	return ti->block == 1 ? 1 : (int)ti->block;
}

/* Shapes: awkward on purpose (single rows, odd m, n_out not a multiple of 8). */
static const struct { int m, n_out, kmul; } shapes[] = {
	{ 1, 1, 1 }, { 1, 13, 1 }, { 3, 5, 1 }, { 7, 9, 2 }, { 2, 3, 5 },
	{ 5, 4, 9 },
};

START_TEST(test_reference)
{
	uint32_t t = all_types[_i];

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int kb = min_k(t), k = kb * shapes[s].kmul;
		int m = shapes[s].m, n = shapes[s].n_out;
		int ldx = k + 3, ldy = n + 2;
		size_t ws;
		uint8_t *w;
		float *x, *y;

		if (kb == 1)
			k = 37 * shapes[s].kmul;	/* not a multiple of 8 */
		ldx = k + 3;
		rng_seed(1000 * t + s);
		w = make_weights(t, n, k, &ws);
		x = make_x(m, ldx);
		y = malloc(sizeof(float) * (size_t)m * (size_t)ldy);
		ck_assert_ptr_nonnull(y);
		for (int i = 0; i < m * ldy; i++)
			y[i] = -12345.0f;
		run_mm(t, w, ws, n, k, x, ldx, m, y, ldy, 0, n);
		check_against_reference(t, w, ws, n, k, x, ldx, m, y, ldy);
		/* columns past n_out are left alone */
		for (int r = 0; r < m; r++)
			for (int c = n; c < ldy; c++)
				ck_assert_float_eq(y[r * ldy + c], -12345.0f);
		free(y);
		free(x);
		free(w);
	}
}
END_TEST
SUITE_LOOP("kernels", test_reference, 0, N_TYPES);

/*
 * Batch invariance: row r of Y is bit-identical whether computed with
 * m = 7, alone (m = 1), or with the outputs split into several [o0, o1).
 */
START_TEST(test_batch_invariance)
{
	uint32_t t = all_types[_i];
	int k = min_k(t) == 1 ? 301 : min_k(t) * 9, n = 19, m = 7;
	size_t ws;
	uint8_t *w;
	float *x, *yall, *yone, *ysplit;

	rng_seed(77 + t);
	w = make_weights(t, n, k, &ws);
	x = make_x(m, k);
	yall = calloc((size_t)m * n, sizeof(float));
	yone = calloc((size_t)m * n, sizeof(float));
	ysplit = calloc((size_t)m * n, sizeof(float));
	ck_assert_ptr_nonnull(yall);
	ck_assert_ptr_nonnull(yone);
	ck_assert_ptr_nonnull(ysplit);
	run_mm(t, w, ws, n, k, x, k, m, yall, n, 0, n);
	for (int r = 0; r < m; r++)
		run_mm(t, w, ws, n, k, x + (size_t)r * k, k, 1,
		    yone + (size_t)r * n, n, 0, n);
	run_mm(t, w, ws, n, k, x, k, m, ysplit, n, 0, 1);
	run_mm(t, w, ws, n, k, x, k, m, ysplit, n, 1, 6);
	run_mm(t, w, ws, n, k, x, k, m, ysplit, n, 6, 6);
	run_mm(t, w, ws, n, k, x, k, m, ysplit, n, 6, n);
	for (int i = 0; i < m * n; i++) {
		ck_assert_msg(memcmp(&yall[i], &yone[i], sizeof(float)) == 0,
		    "%s: element %d differs between m=7 and m=1: %.9g vs %.9g",
		    ttype_name(t), i, yall[i], yone[i]);
		ck_assert_msg(memcmp(&yall[i], &ysplit[i], sizeof(float)) == 0,
		    "%s: element %d differs between o splits", ttype_name(t), i);
	}
	free(ysplit);
	free(yone);
	free(yall);
	free(x);
	free(w);
}
END_TEST
SUITE_LOOP("kernels", test_batch_invariance, 0, N_TYPES);

/*
 * Y of mm_rows_wide() over the n x k weights w (type t, packed or not),
 * m rows, the outputs cut at cut, against mm_rows() over the same: the
 * same bits.  The widening scratch is exactly mm_wide_bytes() long, so a
 * sanitizer sees any write past it.
 */
static void
check_wide(uint32_t t, const uint8_t *w, size_t ws, bool packed, int n,
    int k, int m, int cut)
{
	struct mm_args a = {
		.wtype = t, .w = w, .w_stride = ws, .n_out = n, .k = k,
		.ldx = (size_t)k, .m = m, .ldy = (size_t)n, .packed = packed,
	};
	size_t wb = mm_wide_bytes(t, k, packed);
	float *x = make_x(m, k), *y0, *y1;
	void *scr = malloc(mm_scratch_bytes(t, k, m)), *wide = malloc(wb);

	y0 = calloc((size_t)m * (size_t)n, sizeof(float));
	y1 = calloc((size_t)m * (size_t)n, sizeof(float));
	ck_assert(wb > 0 && scr != NULL && wide != NULL && y0 != NULL &&
	    y1 != NULL);
	a.x = x;
	mm_prepare(&a, scr);
	a.y = y0;
	mm_rows(&a, scr, 0, n);
	a.y = y1;
	mm_rows_wide(&a, scr, wide, 0, cut);
	mm_rows_wide(&a, scr, wide, cut, n);
	for (size_t i = 0; i < (size_t)m * (size_t)n; i++)
		ck_assert_msg(memcmp(&y0[i], &y1[i], sizeof(float)) == 0,
		    "%s%s k %d n %d m %d: output %zu: %a, widened %a",
		    ttype_name(t), packed ? " packed" : "", k, n, m, i, y0[i],
		    y1[i]);
	free(y1);
	free(y0);
	free(wide);
	free(scr);
	free(x);
}

/*
 * Widened weight tiles (mm_rows_wide()) give mm_rows()'s bits: F16 and
 * BF16 rows, F16 repacked where this CPU has the repacked kernels; row
 * counts on both sides of MM_WIDE_ROWS, k off the 8 lanes (plain rows)
 * and long enough that a product spans several widened tiles, F16
 * weights with subnormal, largest and signed-zero values.  Other types
 * never widen.
 */
START_TEST(test_wide)
{
	static const uint32_t wt[] = { CP_T_F16, CP_T_BF16, CP_T_F16 };
	static const uint16_t extreme[] = { 0x0001, 0x83ff, 0x7bff, 0xfbff,
	    0x8000, 0x0400 };
	static const int ms[] = { MM_WIDE_ROWS - 1, MM_WIDE_ROWS,
	    MM_WIDE_ROWS + 13, 70 };
	uint32_t t = wt[_i];
	bool packed = _i == 2;
	int k = packed ? 2056 : 2051, n = packed ? 152 : 150;
	size_t ws;
	uint8_t *w, *pw;

	if (packed && repack_kernel(t) == NULL)
		return;
	ck_assert_uint_eq(mm_wide_bytes(CP_T_F32, 64, false), 0);
	ck_assert_uint_eq(mm_wide_bytes(CP_T_Q8_0, 64, false), 0);
	rng_seed(91 + (uint64_t)_i);
	w = make_weights(t, n, k, &ws);
	if (t == CP_T_F16)
		for (int i = 0; i < 64; i++)
			put_f16(w + 2 * (rng_u32() % ((size_t)n * (size_t)k)),
			    fp16_to_fp32(extreme[i % 6]));
	if (packed) {
		ck_assert_ptr_nonnull(pw = malloc(ws * (size_t)n));
		ck_assert_int_eq(repack_rows(t, w, ws, n, k, pw), 0);
		free(w);
		w = pw;
	}
	for (int i = 0; i < 4; i++)
		check_wide(t, w, ws, packed, n, k, ms[i],
		    packed ? REPACK_ROWS * (1 + i) : 1 + 7 * i);
	free(w);
}
END_TEST
SUITE_LOOP("kernels", test_wide, 0, 3);

/*
 * Each AVX2 (loop index < N_TYPES) and AVX-512 kernel against its scalar
 * reference on the same prepared rows: bit-identical (all follow one
 * summation order); and each SIMD element identical whatever tile it fell
 * in.
 */
START_TEST(test_simd_vs_scalar)
{
	uint32_t t = all_types[_i % N_TYPES];
	const struct dot_kernel *ks = dot_kernel_scalar(t);
	const struct dot_kernel *kv = _i < (int)N_TYPES ? dot_kernel_avx2(t) :
	    dot_kernel_avx512(t);
	/* float rows: a k % 8 tail for AVX2, whole tiles for AVX-512 */
	int k = min_k(t) == 1 ? (_i < (int)N_TYPES ? 333 : 344) :
	    min_k(t) * 11, n = 13, m = 7;
	size_t ws, sb;
	uint8_t *w;
	float *x, *ys, *yv, *y1;
	void *scratch;
	const void *xp;
	size_t bx;
	struct mm_args a;

	ck_assert_ptr_nonnull(ks);
	if (!cpu_has_avx2())
		return;
	if (kv == NULL)
		return;		/* no kernel for this type and CPU */
	ck_assert_uint_eq(kv->xtype, ks->xtype);
	ck_assert_uint_eq(kv->xround, ks->xround);
	rng_seed(4242 + t);
	w = make_weights(t, n, k, &ws);
	x = make_x(m, k);
	memset(&a, 0, sizeof(a));
	a.wtype = t;
	a.k = k;
	a.x = x;
	a.ldx = (size_t)k;
	a.m = m;
	sb = mm_scratch_bytes(t, k, m);
	scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
	if (t == CP_T_F32) {
		xp = x;
		bx = (size_t)k * sizeof(float);
	} else {
		ck_assert_ptr_nonnull(scratch);
		mm_prepare(&a, scratch);
		xp = scratch;	/* 64-aligned: rows start at the base */
		bx = (sb - 64) / (size_t)m;
	}
	ys = calloc((size_t)m * n, sizeof(float));
	yv = calloc((size_t)m * n, sizeof(float));
	y1 = calloc((size_t)m * n, sizeof(float));
	ck_assert_ptr_nonnull(ys);
	ck_assert_ptr_nonnull(yv);
	ck_assert_ptr_nonnull(y1);
	ks->fn(k, w, ws, n, xp, bx, m, ys, (size_t)n);
	kv->fn(k, w, ws, n, xp, bx, m, yv, (size_t)n);
	for (int o = 0; o < n; o++)
		for (int r = 0; r < m; r++)
			kv->fn(k, w + (size_t)o * ws, ws, 1,
			    (const char *)xp + (size_t)r * bx, bx, 1,
			    &y1[r * n + o], (size_t)n);
	for (int i = 0; i < m * n; i++) {
		ck_assert_msg(memcmp(&yv[i], &y1[i], sizeof(float)) == 0,
		    "%s: SIMD element %d depends on its tile", kv->name, i);
		ck_assert_msg(memcmp(&ys[i], &yv[i], sizeof(float)) == 0,
		    "%s: element %d: scalar %.9g simd %.9g", kv->name, i,
		    ys[i], yv[i]);
	}
	/* every count of activation rows from every start: each tiling */
	for (int r = 0; r < m; r++) {
		for (int nx = 1; r + nx <= m; nx++) {
			memset(y1, 0, sizeof(float) * (size_t)m * n);
			kv->fn(k, w, ws, n, (const char *)xp + (size_t)r * bx,
			    bx, nx, y1 + (size_t)r * n, (size_t)n);
			for (int i = r * n; i < (r + nx) * n; i++)
				ck_assert_msg(memcmp(&ys[i], &y1[i],
				    sizeof(float)) == 0, "%s: %d-row product, "
				    "element %d: scalar %.9g simd %.9g",
				    kv->name, nx, i, ys[i], y1[i]);
		}
	}
	free(y1);
	free(yv);
	free(ys);
	free(scratch);
	free(x);
	free(w);
}
END_TEST
SUITE_LOOP("kernels", test_simd_vs_scalar, 0, 2 * N_TYPES);

START_TEST(test_supported)
{
	for (size_t i = 0; i < N_TYPES; i++) {
		ck_assert(mm_supported(all_types[i]));
		ck_assert_ptr_nonnull(dot_kernel(all_types[i]));
	}
	ck_assert(!mm_supported(CP_T_Q8_K));
	ck_assert(!mm_supported(CP_T_Q8_1));
	ck_assert(!mm_supported(CP_T_IQ2_XXS));
	ck_assert(!mm_supported(CP_T_I32));
	ck_assert(!mm_supported(CP_T_COUNT));
	ck_assert(!mm_supported(1000));
	ck_assert_ptr_null(dot_kernel(CP_T_IQ4_NL));
	/* scratch: none for F32, none for bad k or m, else the rows */
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_F32, 64, 4), 0);
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_Q4_0, 48, 4), 0);
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_Q4_K, 128, 4), 0);
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_Q4_0, 64, 0), 0);
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_Q4_0, 0, 1), 0);
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_Q4_0, -32, 1), 0);
	ck_assert_uint_eq(mm_scratch_bytes(CP_T_IQ2_XXS, 256, 1), 0);
	ck_assert_uint_ge(mm_scratch_bytes(CP_T_Q4_0, 64, 3), 3 * 68);
	ck_assert_uint_ge(mm_scratch_bytes(CP_T_Q6_K, 512, 2), 2 * 584);
	ck_assert_uint_ge(mm_scratch_bytes(CP_T_F16, 10, 2), 2 * 40);
}
END_TEST
SUITE_TEST("kernels", test_supported);

/* The activation format each weight type gets, as llama.cpp's CPU backend. */
START_TEST(test_activation_formats)
{
	static const struct { uint32_t w, x, round; } want[] = {
		{ CP_T_F32, CP_T_F32, CP_T_F32 },
		{ CP_T_F16, CP_T_F32, CP_T_F16 },
		{ CP_T_BF16, CP_T_F32, CP_T_BF16 },
		{ CP_T_Q4_0, CP_T_Q8_0, CP_T_F32 },
		{ CP_T_Q5_0, CP_T_Q8_0, CP_T_F32 },
		{ CP_T_Q8_0, CP_T_Q8_0, CP_T_F32 },
		{ CP_T_Q4_1, CP_T_Q8_1, CP_T_F32 },
		{ CP_T_Q5_1, CP_T_Q8_1, CP_T_F32 },
		{ CP_T_Q2_K, CP_T_Q8_K, CP_T_F32 },
		{ CP_T_Q3_K, CP_T_Q8_K, CP_T_F32 },
		{ CP_T_Q4_K, CP_T_Q8_K, CP_T_F32 },
		{ CP_T_Q5_K, CP_T_Q8_K, CP_T_F32 },
		{ CP_T_Q6_K, CP_T_Q8_K, CP_T_F32 },
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct dot_kernel *ks = dot_kernel_scalar(want[i].w);
		const struct dot_kernel *kv = dot_kernel_avx2(want[i].w);

		ck_assert_ptr_nonnull(ks);
		ck_assert_uint_eq(ks->wtype, want[i].w);
		ck_assert_uint_eq(ks->xtype, want[i].x);
		ck_assert_uint_eq(ks->xround, want[i].round);
		if (kv != NULL) {
			ck_assert_uint_eq(kv->xtype, want[i].x);
			ck_assert_uint_eq(kv->xround, want[i].round);
		}
	}
}
END_TEST
SUITE_TEST("kernels", test_activation_formats);

/* F16 activations really are rounded: x = 1 + 2^-12 reads as 1. */
START_TEST(test_f16_rounds_activations)
{
	uint8_t w[2 * 32];
	float x[32], y = 0;

	for (int j = 0; j < 32; j++) {
		put_f16(w + 2 * j, j == 0 ? 1.0f : 0.0f);
		x[j] = j == 0 ? 1.0f + 0x1p-12f : 5.0f;
	}
	run_mm(CP_T_F16, w, sizeof(w), 1, 32, x, 32, 1, &y, 1, 0, 1);
	ck_assert_float_eq(y, 1.0f);
	run_mm(CP_T_F32, (const uint8_t *)x, sizeof(x), 1, 32, x, 32, 1, &y, 1,
	    0, 1);
	ck_assert_float_eq(y, (1.0f + 0x1p-12f) * (1.0f + 0x1p-12f) +
	    31 * 25.0f);
}
END_TEST
SUITE_TEST("kernels", test_f16_rounds_activations);

/*
 * dot_round_row(): F16 / BF16 rounding of activations, the same bits on
 * the scalar and the F16C path, equal to the conversions of quant.h (which
 * check_quant holds to IEEE 754) on special values, ties and subnormals.
 */
START_TEST(test_round_row)
{
	static const float v[] = {
		0.0f, -0.0f, 1.0f, -2.5f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
		65504.0f, 65520.0f, 1e6f, -1e6f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f,
		1e-30f, 0x1p-14f, 0.1f, -0.3f, 1.0f + 0x1p-8f, 3.0e38f,
	};
	enum { N = sizeof(v) / sizeof(v[0]) + 3 };
	float x[N], a[N], b[N];

	for (size_t i = 0; i < N - 3; i++)
		x[i] = v[i];
	x[N - 3] = INFINITY;
	x[N - 2] = -INFINITY;
	x[N - 1] = NAN;
	dot_round_row(CP_T_F16, x, a, N);
	for (int i = 0; i < N; i++) {
		float want = fp16_to_fp32(fp32_to_fp16(x[i]));

		if (isnan(want))
			ck_assert(isnan(a[i]));
		else
			ck_assert_msg(memcmp(&a[i], &want, 4) == 0,
			    "f16 %d: %a -> %a, want %a", i, (double)x[i],
			    (double)a[i], (double)want);
	}
	if (cpu_has_avx2()) {
		dot_round_f16_avx2(x, b, N);
		for (int i = 0; i < N; i++)
			ck_assert(isnan(a[i]) ? isnan(b[i]) :
			    memcmp(&a[i], &b[i], 4) == 0);
	}
	dot_round_row(CP_T_BF16, x, a, N);
	for (int i = 0; i < N - 1; i++) {
		float want = bf16_to_fp32(fp32_to_bf16(x[i]));

		ck_assert(memcmp(&a[i], &want, 4) == 0);
	}
	ck_assert(isnan(a[N - 1]));
	dot_round_row(CP_T_F32, x, a, N);
	ck_assert_int_eq(memcmp(a, x, sizeof(a)), 0);
	/* in place */
	memcpy(a, x, sizeof(a));
	dot_round_row(CP_T_F16, a, a, N);
	ck_assert(a[4] == 1.0f && a[5] == 1.0f + 0x1p-9f);
}
END_TEST
SUITE_TEST("kernels", test_round_row);

/*
 * Alignment: any scratch address (mm_prepare() aligns inside the bytes it
 * asked for) and weight rows at odd addresses give the same bits.
 */
START_TEST(test_alignment)
{
	uint32_t t = all_types[_i];
	int k = min_k(t) == 1 ? 72 : min_k(t) * 3, n = 6, m = 5;
	size_t ws, sb = mm_scratch_bytes(t, k, m);
	uint8_t *w, *wodd, *scr;
	float *x, *y0, *y1;
	struct mm_args a;

	rng_seed(99 + t);
	w = make_weights(t, n, k, &ws);
	x = make_x(m, k);
	y0 = calloc((size_t)m * n, sizeof(float));
	y1 = calloc((size_t)m * n, sizeof(float));
	scr = malloc(sb + 64);
	wodd = malloc(ws * (size_t)n + 1);
	ck_assert(y0 != NULL && y1 != NULL && scr != NULL && wodd != NULL);
	run_mm(t, w, ws, n, k, x, k, m, y0, n, 0, n);
	/* F32 rows must hold floats: only the block and 16-bit types move */
	memcpy(wodd + (t == CP_T_F32 ? 0 : 1), w, ws * (size_t)n);
	memset(&a, 0, sizeof(a));
	a.wtype = t;
	a.w = wodd + (t == CP_T_F32 ? 0 : 1);
	a.w_stride = ws;
	a.n_out = n;
	a.k = k;
	a.x = x;
	a.ldx = (size_t)k;
	a.m = m;
	a.y = y1;
	a.ldy = (size_t)n;
	for (int off = 0; off < 64; off += 13) {
		memset(y1, 0, sizeof(float) * (size_t)m * n);
		mm_prepare(&a, scr + off);
		mm_rows(&a, scr + off, 0, n);
		ck_assert_msg(memcmp(y0, y1, sizeof(float) * (size_t)m * n) == 0,
		    "%s: scratch offset %d changes the result", ttype_name(t),
		    off);
	}
	free(wodd);
	free(scr);
	free(y1);
	free(y0);
	free(x);
	free(w);
}
END_TEST
SUITE_LOOP("kernels", test_alignment, 0, N_TYPES);

/* CP_NO_SIMD=1 selects the scalar kernels (decided on first use). */
START_TEST(test_no_simd_env)
{
	ck_assert_int_eq(setenv("CP_NO_SIMD", "1", 1), 0);
	ck_assert(!cpu_use_simd());
	for (size_t i = 0; i < N_TYPES; i++)
		ck_assert_ptr_eq(dot_kernel(all_types[i]),
		    dot_kernel_scalar(all_types[i]));
}
END_TEST
SUITE_TEST("kernels", test_no_simd_env);

START_TEST(test_simd_default)
{
	ck_assert_int_eq(unsetenv("CP_NO_SIMD"), 0);
	ck_assert(cpu_use_simd() == cpu_has_avx2());
	if (cpu_has_avx2())
		ck_assert_ptr_eq(dot_kernel(CP_T_Q4_0),
		    dot_kernel_avx2(CP_T_Q4_0));
}
END_TEST
SUITE_TEST("kernels", test_simd_default);

/* ---- attention over a paged cache (attn.h) ------------------------------ */

/*
 * A paged cache for one KV head: n_pos positions of hd elements in blocks
 * of bt slots, pool blocks in a shuffled order, other heads' columns
 * (kvd = 3 hd wide slots) filled with noise.
 */
struct att_fx {
	uint32_t type;
	int hd, group, bt, n_pos, kvd;
	size_t es, slot, blk;
	unsigned char *pool;	/* K block, then V block, per pool block */
	int32_t tab[64];
	float *q;		/* [n_pos][group * hd], rounded for the kernel */
};

static void
att_fx_make(struct att_fx *f, uint32_t type, int hd, int group, int bt,
    int n_pos)
{
	int nb = (n_pos + bt - 1) / bt;

	ck_assert_int_le(nb, 64);
	f->type = type;
	f->hd = hd;
	f->group = group;
	f->bt = bt;
	f->n_pos = n_pos;
	f->kvd = 3 * hd;
	f->es = type == CP_T_F16 ? 2 : 4;
	f->slot = (size_t)f->kvd * f->es;
	f->blk = 2 * (size_t)bt * f->slot;
	f->pool = malloc(f->blk * (size_t)nb);
	ck_assert_ptr_nonnull(f->pool);
	for (int b = 0; b < nb; b++)
		f->tab[b] = b;
	for (int b = nb - 1; b > 0; b--) {
		int j = (int)(rng_u32() % (uint32_t)(b + 1));
		int32_t t = f->tab[b];

		f->tab[b] = f->tab[j];
		f->tab[j] = t;
	}
	for (size_t i = 0; i < f->blk * (size_t)nb / f->es; i++) {
		float v = rng_f() * 2.0f;

		if (type == CP_T_F16)
			put_f16(f->pool + 2 * i, v);
		else
			memcpy(f->pool + 4 * i, &v, 4);
	}
	f->q = malloc(sizeof(float) * (size_t)n_pos * (size_t)(group * hd));
	ck_assert_ptr_nonnull(f->q);
	for (int i = 0; i < n_pos * group * hd; i++)
		f->q[i] = rng_f() * 3.0f;
	dot_round_row(dot_kernel_scalar(type)->xround, f->q, f->q,
	    n_pos * group * hd);
}

static void
att_fx_free(struct att_fx *f)
{
	free(f->q);
	free(f->pool);
}

/* Element i of K (kind 0) or V (1) at position p, head column 1. */
static double
att_fx_elem(const struct att_fx *f, int kind, int p, int i)
{
	const unsigned char *e = f->pool + (size_t)f->tab[p / f->bt] * f->blk +
	    (size_t)kind * (size_t)f->bt * f->slot + (size_t)(p % f->bt) *
	    f->slot + ((size_t)f->hd + (size_t)i) * f->es;
	float v;

	if (f->type == CP_T_F16)
		return quant_f16(e);
	memcpy(&v, e, 4);
	return v;
}

/*
 * Rows [r0, r0 + n) of the fixture through attn_rows_with() into out
 * (rows of ld floats), for KV heads [g0, g0 + n_kv) of the pool's three
 * and their queries in q (rows of ld floats from KV head g0's first query
 * head), keeping the scores of cap positions.
 */
static void
att_fx_run_heads(const struct att_fx *f, const float *q, size_t ld, int g0,
    int n_kv, int r0, int n, float *out, const struct attn_ops *ops,
    const struct dot_kernel *kdot, int cap)
{
	struct attn_args a;
	size_t sb = attn_scratch_bytes(f->hd, f->group * n_kv, n, f->bt, cap);
	void *scr = malloc(sb);

	ck_assert_ptr_nonnull(scr);
	a.head_dim = f->hd;
	a.group = f->group;
	a.n_kv = n_kv;
	a.n_rows = n;
	a.pos0 = r0;
	a.q = q + (size_t)r0 * ld;
	a.ldq = ld;
	a.out = out + (size_t)r0 * ld;
	a.ldo = ld;
	a.kv_type = f->type;
	a.k = f->pool + (size_t)g0 * (size_t)f->hd * f->es;
	a.v = a.k + (size_t)f->bt * f->slot;
	a.kv_head_bytes = (size_t)f->hd * f->es;
	a.block_bytes = f->blk;
	a.slot_bytes = f->slot;
	a.blocks = f->tab;
	a.block_tokens = f->bt;
	a.scale = 1.0f / sqrtf((float)f->hd);
	a.window = 0;
	a.softcap = 0.0f;
	a.score_cap = cap;
	ck_assert_int_eq(attn_rows_with(&a, scr, ops, kdot), 0);
	free(scr);
}

/* att_fx_run_heads() for KV head 1 and the fixture's queries. */
static void
att_fx_run(const struct att_fx *f, int r0, int n, float *out,
    const struct attn_ops *ops, const struct dot_kernel *kdot, int cap)
{
	att_fx_run_heads(f, f->q, (size_t)(f->group * f->hd), 1, 1, r0, n, out,
	    ops, kdot, cap);
}

/* The pieces attn_rows() uses on this CPU. */
static const struct attn_ops *
att_simd_ops(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (cpu_use_avx512())
		return &attn_ops_avx512;
	return cpu_has_avx2() ? &attn_ops_avx2 : &attn_ops_scalar;
#else
	return &attn_ops_scalar;
#endif
}

/* Shapes: head size, query heads per KV head, block tokens, positions. */
static const struct {
	uint32_t type;
	int hd, group, bt, n_pos;
} att_shapes[] = {
	{ CP_T_F16, 64, 1, 16, 70 }, { CP_T_F16, 37, 3, 4, 23 },
	{ CP_T_F32, 80, 2, 8, 41 }, { CP_T_F32, 8, 1, 1, 9 },
};
#define N_ATT (sizeof(att_shapes) / sizeof(att_shapes[0]))

/*
 * Every row against a double-precision softmax over its positions 0..p:
 * within the F16 rounding of the weights (2^-11 relative each) plus float
 * sums.
 */
START_TEST(test_attn_reference)
{
	struct att_fx f;
	int hd, G, n;
	float *out;
	double *s;

	rng_seed(9000 + _i);
	att_fx_make(&f, att_shapes[_i].type, att_shapes[_i].hd,
	    att_shapes[_i].group, att_shapes[_i].bt, att_shapes[_i].n_pos);
	hd = f.hd, G = f.group, n = f.n_pos;
	out = calloc((size_t)n * (size_t)(G * hd), sizeof(float));
	s = calloc((size_t)n, sizeof(double));
	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(s);
	att_fx_run(&f, 0, n, out, att_simd_ops(), dot_kernel(f.type), n);
	for (int p = 0; p < n; p++) {
		for (int h = 0; h < G; h++) {
			const float *q = f.q + (size_t)p * (size_t)(G * hd) +
			    (size_t)h * (size_t)hd;
			double mx = -INFINITY, l = 0;

			for (int j = 0; j <= p; j++) {
				s[j] = 0;
				for (int i = 0; i < hd; i++)
					s[j] += q[i] * att_fx_elem(&f, 0, j, i);
				s[j] /= sqrt((double)hd);
				mx = fmax(mx, s[j]);
			}
			for (int j = 0; j <= p; j++)
				l += exp(s[j] - mx);
			for (int i = 0; i < hd; i++) {
				double want = 0, mag = 0, got;

				for (int j = 0; j <= p; j++) {
					double w = exp(s[j] - mx) / l;
					double v = att_fx_elem(&f, 1, j, i);

					want += w * v;
					mag += w * fabs(v);
				}
				got = out[(size_t)p * (size_t)(G * hd) +
				    (size_t)h * (size_t)hd + (size_t)i];
				ck_assert_msg(fabs(got - want) <= mag * 2e-3 +
				    1e-6, "attn pos %d head %d elem %d: %.9g, "
				    "want %.9g", p, h, i, got, want);
			}
		}
	}
	free(s);
	free(out);
	att_fx_free(&f);
}
END_TEST
SUITE_LOOP("attention", test_attn_reference, 0, N_ATT);

/*
 * The same bits for every row whether its tile is all rows, the row alone
 * or a tile starting elsewhere (batch and chunk invariance), whether the
 * scores are kept or computed in three walks (or kept for some tiles
 * only), and on the scalar and SIMD paths.
 */
START_TEST(test_attn_invariance)
{
	struct att_fx f;
	int n, ld;
	float *all, *one, *split, *scal, *walk;

	rng_seed(9100 + _i);
	att_fx_make(&f, att_shapes[_i].type, att_shapes[_i].hd,
	    att_shapes[_i].group, att_shapes[_i].bt, att_shapes[_i].n_pos);
	n = f.n_pos;
	ld = f.group * f.hd;
	all = calloc((size_t)n * (size_t)ld, sizeof(float));
	one = calloc((size_t)n * (size_t)ld, sizeof(float));
	split = calloc((size_t)n * (size_t)ld, sizeof(float));
	scal = calloc((size_t)n * (size_t)ld, sizeof(float));
	walk = calloc((size_t)n * (size_t)ld, sizeof(float));
	ck_assert_ptr_nonnull(walk);
	ck_assert_ptr_nonnull(all);
	ck_assert_ptr_nonnull(one);
	ck_assert_ptr_nonnull(split);
	ck_assert_ptr_nonnull(scal);
	att_fx_run(&f, 0, n, all, att_simd_ops(), dot_kernel(f.type), n);
	/* kept scores for the first rows, three walks after */
	for (int r = 0; r < n; r++)
		att_fx_run(&f, r, 1, one, att_simd_ops(), dot_kernel(f.type),
		    n / 2);
	att_fx_run(&f, 0, 5, split, att_simd_ops(), dot_kernel(f.type), n);
	att_fx_run(&f, 5, n - 5, split, att_simd_ops(), dot_kernel(f.type), n);
	att_fx_run(&f, 0, n, scal, &attn_ops_scalar, dot_kernel_scalar(f.type),
	    n);
	att_fx_run(&f, 0, n, walk, att_simd_ops(), dot_kernel(f.type), 0);
#if defined(__x86_64__) || defined(__i386__)
	/* the AVX2 pieces too where the AVX-512 ones are in use */
	if (att_simd_ops() == &attn_ops_avx512) {
		float *avx2 = calloc((size_t)n * (size_t)ld, sizeof(float));

		ck_assert_ptr_nonnull(avx2);
		att_fx_run(&f, 0, n, avx2, &attn_ops_avx2, dot_kernel(f.type),
		    n);
		ck_assert_mem_eq(all, avx2, (size_t)n * (size_t)ld *
		    sizeof(float));
		free(avx2);
	}
#endif
	for (int i = 0; i < n * ld; i++) {
		ck_assert_msg(memcmp(&all[i], &walk[i], 4) == 0,
		    "attn element %d: kept scores %.9g, three walks %.9g", i,
		    all[i], walk[i]);
		ck_assert_msg(memcmp(&all[i], &one[i], 4) == 0,
		    "attn element %d: tile %.9g, alone %.9g", i, all[i],
		    one[i]);
		ck_assert_msg(memcmp(&all[i], &split[i], 4) == 0,
		    "attn element %d differs with another tile split", i);
		if (cpu_has_avx2())
			ck_assert_msg(memcmp(&all[i], &scal[i], 4) == 0,
			    "attn element %d: simd %.9g, scalar %.9g", i,
			    all[i], scal[i]);
	}
	free(walk);
	free(scal);
	free(split);
	free(one);
	free(all);
	att_fx_free(&f);
}
END_TEST
SUITE_LOOP("attention", test_attn_invariance, 0, N_ATT);

/*
 * One call over the pool's three KV heads gives, bit for bit, what a call
 * per head gives: tiles of all rows and of one row, with the scores kept
 * and in three walks.
 */
START_TEST(test_attn_heads)
{
	struct att_fx f;
	size_t ld;
	float *q, *one, *all;
	int n, cap;

	rng_seed(9300 + _i);
	att_fx_make(&f, att_shapes[_i].type, att_shapes[_i].hd,
	    att_shapes[_i].group, att_shapes[_i].bt, att_shapes[_i].n_pos);
	n = f.n_pos;
	ld = (size_t)(3 * f.group * f.hd);
	q = malloc(sizeof(float) * (size_t)n * ld);
	one = calloc((size_t)n * ld, sizeof(float));
	all = calloc((size_t)n * ld, sizeof(float));
	ck_assert_ptr_nonnull(q);
	ck_assert_ptr_nonnull(one);
	ck_assert_ptr_nonnull(all);
	for (size_t i = 0; i < (size_t)n * ld; i++)
		q[i] = rng_f() * 3.0f;
	dot_round_row(dot_kernel_scalar(f.type)->xround, q, q, n * (int)ld);
	for (int walk = 0; walk < 2; walk++) {
		cap = walk ? 0 : n;
		for (int g = 0; g < 3; g++)
			att_fx_run_heads(&f, q + (size_t)(g * f.group * f.hd),
			    ld, g, 1, 0, n, one + (size_t)(g * f.group * f.hd),
			    att_simd_ops(), dot_kernel(f.type), cap);
		att_fx_run_heads(&f, q, ld, 0, 3, 0, 3, all, att_simd_ops(),
		    dot_kernel(f.type), cap);
		for (int r = 3; r < n; r++)
			att_fx_run_heads(&f, q, ld, 0, 3, r, 1, all,
			    att_simd_ops(), dot_kernel(f.type), cap);
		for (size_t i = 0; i < (size_t)n * ld; i++)
			ck_assert_msg(memcmp(&all[i], &one[i], 4) == 0,
			    "attn element %zu (%s): 3 heads %.9g, one head "
			    "%.9g", i, walk ? "three walks" : "kept", all[i],
			    one[i]);
	}
	free(all);
	free(one);
	free(q);
	att_fx_free(&f);
}
END_TEST
SUITE_LOOP("attention", test_attn_heads, 0, N_ATT);

/* Units in the last place between a float and the exact value e > 0. */
static double
ulps(float got, double e)
{
	int ex;

	(void)frexp(e, &ex);
	if (ex < -125)
		ex = -125;	/* subnormal spacing */
	return fabs((double)got - e) / ldexp(1.0, ex - 24);
}

/* attn_expf() against exp() over its range, and its special values. */
START_TEST(test_attn_exp)
{
	double worst = 0;

	ck_assert(attn_expf(0.0f) == 1.0f);
	ck_assert(attn_expf(-0.0f) == 1.0f);
	ck_assert(attn_expf(-INFINITY) == 0.0f);
	ck_assert(attn_expf(-87.5f) == 0.0f);
	ck_assert(attn_expf(-1e30f) == 0.0f);
	ck_assert(isnan(attn_expf(NAN)));
	for (float x = -87.0f; x <= 0.0f; x += 0.0007f) {
		double u = ulps(attn_expf(x), exp((double)x));

		worst = u > worst ? u : worst;
	}
	ck_assert_msg(worst <= 1.0, "attn_expf: %.2f ulp", worst);
}
END_TEST
SUITE_TEST("attention", test_attn_exp);

/* The SIMD pieces against the scalar ones, bit for bit, awkward sizes. */
START_TEST(test_attn_ops)
{
	const struct attn_ops *v = att_simd_ops(), *sc = &attn_ops_scalar;
	static const int hds[] = { 1, 7, 8, 37, 64, 80, 128 };
	float w0[40], w1[40], *vt0, *vt1, *a0, *a1;

	if (!cpu_has_avx2())
		return;
	rng_seed(9200);
	/* weights near 1, tiny (F16 subnormals) and exactly halfway cases */
	for (int j = 0; j < 40; j++)
		w0[j] = w1[j] = j % 3 == 0 ? rng_f() : j % 3 == 1 ?
		    rng_f() * 1e-6f : 1.0f + (float)(2 * j + 1) * 0x1p-11f;
	sc->weights(w0, 37, 1.0f, true);
	v->weights(w1, 37, 1.0f, true);
	ck_assert_mem_eq(w0, w1, sizeof(w0));
	for (int j = 0; j < 40; j++)
		w0[j] = w1[j] = rng_f() * 7.0f;
	w0[3] = w1[3] = 0.0f;
	w0[9] = w1[9] = -0.0f;
	for (int n = 0; n <= 40; n += 3) {
		float m0 = sc->scale_max(w0, n, 0.125f, -INFINITY);
		float m1 = v->scale_max(w1, n, 0.125f, -INFINITY);

		ck_assert_mem_eq(w0, w1, sizeof(w0));
		ck_assert_float_eq(m0, m1);
		sc->weights(w0, n, 1.5f, false);
		v->weights(w1, n, 1.5f, false);
		ck_assert_mem_eq(w0, w1, sizeof(w0));
	}
	/* exp_sum: every start lane, lengths across the vector width, the
	 * special values, one lane set left alone (NULL) */
	for (int j = 0; j < 40; j++)
		w0[j] = -rng_f() * 30.0f;
	w0[5] = -INFINITY;
	w0[11] = NAN;
	w0[17] = 0.0f;
	w0[23] = -90.0f;
	w0[29] = 2.5f;		/* above the maximum: still e^2.5 */
	for (int n = 0; n <= 37; n += 3)
		for (int lane0 = 0; lane0 < 8; lane0++) {
			double l0[8], l1[8];
			float e0[40];

			for (int i = 0; i < 8; i++)
				l0[i] = l1[i] = (double)i * 0.25;
			sc->exp_sum(w1, w0, n, 0.5f, l0, lane0);
			memcpy(e0, w1, (size_t)n * sizeof(float));
			v->exp_sum(w1, w0, n, 0.5f, l1, lane0);
			ck_assert_mem_eq(e0, w1, (size_t)n * sizeof(float));
			ck_assert_mem_eq(l0, l1, sizeof(l0));
			v->exp_sum(w1, w0, n, 0.5f, NULL, lane0);
			ck_assert_mem_eq(e0, w1, (size_t)n * sizeof(float));
		}
	vt0 = malloc(40 * 128 * sizeof(float));
	vt1 = malloc(40 * 128 * sizeof(float));
	a0 = malloc(128 * sizeof(float));
	a1 = malloc(128 * sizeof(float));
	ck_assert(vt0 && vt1 && a0 && a1);
	for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
		int hd = hds[h];

		for (int i = 0; i < 13 * hd; i++)
			vt0[i] = vt1[i] = rng_f();
		for (int i = 0; i < hd; i++)
			a0[i] = a1[i] = rng_f();
		sc->accum(a0, w0, vt0, 13, hd);
		v->accum(a1, w0, vt1, 13, hd);
		ck_assert_mem_eq(a0, a1, (size_t)hd * 4);
	}
	free(a1);
	free(a0);
	free(vt1);
	free(vt0);
}
END_TEST
SUITE_TEST("attention", test_attn_ops);

/*
 * n K rows of hd + 8 random F16 values, slot bytes apart; wide: every
 * fifth row large (to 3e4), the next tiny (to 1e-5).
 */
static void
fill_k_rows(uint8_t *rows, int n, int hd, size_t slot, bool wide)
{
	for (int j = 0; j < n; j++) {
		float mag = !wide || j % 5 > 1 ? 4.0f : j % 5 == 0 ? 3e4f :
		    1e-5f;

		for (int i = 0; i < hd + 8; i++)
			put_f16(rows + (size_t)j * slot + 2 * (size_t)i,
			    rng_f() * mag);
	}
}

/*
 * The one-row pieces (attn_ops.kscores1, accum_f16) against the scalar
 * F16 dot kernel and dequant_row() + the scalar accum(), bit for bit: head
 * sizes of one to 32 vectors, row counts around the 4-row groups, rows
 * with a gap between them.
 */
START_TEST(test_attn_one_row)
{
	const struct attn_ops *v = att_simd_ops(), *sc = &attn_ops_scalar;
	const struct dot_kernel *kd = dot_kernel_scalar(CP_T_F16);
	static const int hds[] = { 8, 24, 64, 80, 128, 256 };
	enum { N = 19 };
	float q[256], w[N], s0[N], s1[N], a0[256], a1[256], vt[N * 256];
	uint8_t rows[N * (256 * 2 + 16)];

	if (v->kscores1 == NULL || v->accum_f16 == NULL)
		return;
	ck_assert_ptr_null(sc->kscores1);
	ck_assert_ptr_null(sc->accum_f16);
	rng_seed(9400);
	for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
		int hd = hds[h];
		size_t slot = (size_t)hd * 2 + 16;

		fill_k_rows(rows, N, hd, slot, false);
		for (int i = 0; i < hd; i++)
			q[i] = rng_f() * 3.0f;
		for (int j = 0; j < N; j++)
			w[j] = rng_f();
		for (int n = 1; n <= N; n += n < 9 ? 1 : 5) {
			kd->fn(hd, rows, slot, n, q, 0, 1, s0, (size_t)n);
			v->kscores1(rows, slot, n, hd, q, s1);
			ck_assert_mem_eq(s0, s1, (size_t)n * sizeof(float));
			for (int i = 0; i < hd; i++)
				a0[i] = a1[i] = rng_f();
			for (int j = 0; j < n; j++)
				ck_assert_int_eq(dequant_row(CP_T_F16, rows +
				    (size_t)j * slot, vt + (size_t)j * (size_t)hd,
				    (size_t)hd), 0);
			sc->accum(a0, w, vt, n, hd);
			v->accum_f16(a1, w, rows, slot, n, hd);
			ck_assert_mem_eq(a0, a1, (size_t)hd * sizeof(float));
		}
	}
}
END_TEST
SUITE_TEST("attention", test_attn_one_row);

/*
 * attn_ops.kscores_rows against the scalar F16 dot kernel, bit for bit:
 * one to 40 K rows (over and under the sixteen of a pass), head sizes of
 * one to 32 groups of eight, one to seven query rows apart by a stride of
 * their own, values from tiny to large, one of them -0.
 */
START_TEST(test_attn_kscores_rows)
{
	const struct attn_ops *v = att_simd_ops();
	const struct dot_kernel *kd = dot_kernel_scalar(CP_T_F16);
	static const int hds[] = { 8, 24, 64, 80, 128, 256 };
	enum { N = 40, NQ = 7, LDQ = 300, LDS = 48 };
	static float q[NQ * LDQ], s0[NQ * LDS], s1[NQ * LDS];
	static uint8_t rows[N * (256 * 2 + 16)];

	if (v->kscores_rows == NULL)
		return;
	ck_assert_ptr_null(attn_ops_scalar.kscores_rows);
	rng_seed(9600);
	for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
		int hd = hds[h];
		size_t slot = (size_t)hd * 2 + 16;

		fill_k_rows(rows, N, hd, slot, true);
		for (int i = 0; i < NQ * LDQ; i++)
			q[i] = rng_f() * 3.0f;
		q[5] = -0.0f;
		dot_round_row(CP_T_F16, q, q, NQ * LDQ);
		for (int n = 1; n <= N; n += n < 17 ? 1 : 7)
			for (int nq = 1; nq <= NQ; nq += 3) {
				for (int i = 0; i < NQ * LDS; i++)
					s0[i] = s1[i] = rng_f();
				for (int r = 0; r < nq; r++)
					kd->fn(hd, rows, slot, n, q + (size_t)r *
					    LDQ, 0, 1, s0 + (size_t)r * LDS,
					    (size_t)n);
				v->kscores_rows(rows, slot, n, hd, q, LDQ, nq,
				    s1, LDS);
				ck_assert_mem_eq(s0, s1, sizeof(s0));
			}
	}
}
END_TEST
SUITE_TEST("attention", test_attn_kscores_rows);

/*
 * attn_ops.accum_rows, SIMD and scalar, against accum() row by row, bit
 * for bit: one to four rows, head sizes with and without a tail past the
 * sixteen-element groups, rows and weights apart by strides of their own.
 */
START_TEST(test_attn_accum_rows)
{
	const struct attn_ops *ops[2] = { att_simd_ops(), &attn_ops_scalar };
	static const int hds[] = { 8, 24, 64, 80, 128 };
	enum { N = 16, LDA = 300, LDW = 40 };
	static float vt[N * 128], w[4 * LDW], a0[4 * LDA], a1[4 * LDA];

	rng_seed(9500);
	for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
		int hd = hds[h];

		for (int j = 0; j < N * hd; j++)
			vt[j] = rng_f() * 2.0f;
		for (int j = 0; j < 4 * LDW; j++)
			w[j] = rng_f();
		for (int o = 0; o < 2; o++) {
			for (int rows = 1; rows <= 4; rows++) {
				for (int n = 1; n <= N; n += 5) {
					for (int i = 0; i < 4 * LDA; i++)
						a0[i] = a1[i] = rng_f();
					for (int k = 0; k < rows; k++)
						attn_ops_scalar.accum(a0 + k *
						    LDA, w + k * LDW, vt, n, hd);
					ops[o]->accum_rows(a1, LDA, w, LDW,
					    vt, n, hd, rows);
					ck_assert_mem_eq(a0, a1,
					    sizeof(a0));
				}
			}
		}
	}
}
END_TEST
SUITE_TEST("attention", test_attn_accum_rows);

SUITE_CASE("kernels", 60);
SUITE_CASE("attention", 60);

int
main(void)
{
	return suite_main(suite_registered("matmul"));
}
