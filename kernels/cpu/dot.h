/*
 * dot.h - dot-product kernels: rows of one weight type times rows of
 * activations prepared in the format that weight type wants.
 *
 * Every kernel computes
 *
 *	y[r * ldy + o] = dot(W row o, X row r)	for o < nw, r < nx
 *
 * where W row o starts at (const char *)w + o * bw and X row r at
 * (const char *)x + r * bx, both k elements long (k a multiple of the
 * weight type's block).  Each output element is summed in one fixed order
 * that depends on k only, never on nw, nx or the neighbouring rows, so a
 * kernel may tile rows any way it likes and stay batch invariant.
 *
 * Prepared activations (struct dot_kernel.xtype), as llama.cpp's CPU
 * backend prepares them:
 *	F32 weights	F32 rows (the caller's X as is)
 *	F16, BF16	F32 rows whose values were rounded to F16 / BF16
 *			(xround; dot_round_row()), as ggml converts
 *			activations to the weight's type before its dot
 *			product.  Measured on the synth fixtures, rounding
 *			brings the top-10 logprobs within 2e-6 of llama.cpp
 *			on short prompts where unrounded F32 activations
 *			leave them 4e-3 (F16) and 3e-2 (BF16) away.
 *	Q4_0 Q5_0 Q8_0	Q8_0 blocks (quant_row_act())
 *	Q4_1 Q5_1	Q8_1 blocks
 *	Q2_K..Q6_K	Q8_K super-blocks, rows 4-byte aligned
 *
 * Summation order: the one of ggml's x86 AVX2 kernels in llama.cpp
 * c392e509 (the build behind the fixtures' references), written out in
 * dot.c (float rows) and dot_quant.c (quantized rows): exact integer sums
 * per block in 8 lanes (Q4_0: one), fused multiply-adds into float lanes,
 * one fixed reduction at the end.  The scalar kernels define the order
 * with fmaf(); the AVX2 kernels reproduce it bit for bit, so results do not
 * depend on CP_NO_SIMD either.
 */
#ifndef CP_DOT_H
#define CP_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The kernel signature described above. */
typedef void dot_fn(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy);

struct dot_kernel {
	uint32_t wtype;		/* enum cp_ttype of the weight rows */
	uint32_t xtype;		/* type of the prepared activation rows */
	uint32_t xround;	/* F32 rows: values rounded to this type first */
	dot_fn *fn;
	const char *name;	/* "q4_0.q8_0/avx2", for logs and benchmarks */
};

/*
 * The kernel for weights of type wtype that this process uses: the
 * AVX-512 one when cpu_use_avx512() and there is one, else the AVX2 one
 * when cpu_use_simd() (the CPU has AVX2, FMA and F16C and CP_NO_SIMD is
 * not set to a value other than 0), else the scalar one; all give the same
 * bits.  NULL when wtype has no kernel.  Static storage.
 */
const struct dot_kernel *dot_kernel(uint32_t wtype);

/* The scalar (reference) kernel for wtype, or NULL.  Static storage. */
const struct dot_kernel *dot_kernel_scalar(uint32_t wtype);

/*
 * The AVX2 kernel for wtype, or NULL when there is none or this CPU cannot
 * run it (cpu_has_avx2()).  Static storage.
 */
const struct dot_kernel *dot_kernel_avx2(uint32_t wtype);

/*
 * dst[j] = src[j] rounded to type to (F16 or BF16, round to nearest even;
 * F32 copies) for j < n: the F32-row activation formats above.  The same
 * bits on every path.  src == dst is allowed.
 */
void dot_round_row(uint32_t to, const float *src, float *dst, int n);

/*
 * dst[j] = src[j] widened to F32 for j < n, src of type from (F16 or
 * BF16): exact, so an F32 kernel over the widened rows gives the F16 or
 * BF16 kernel's bits (the float kernels share one order).  A product over
 * many activation rows widens its weight tiles once this way instead of
 * converting them again for every tile of activation rows (matmul.c).
 */
void dot_widen(uint32_t from, const void *src, float *dst, size_t n);

/* dot_widen() with AVX2 and F16C. */
void dot_widen_avx2(uint32_t from, const void *src, float *dst, size_t n);

/* Scalar kernels (dot.c, dot_quant.c). */
dot_fn dot_f32_f32;
dot_fn dot_f16_f32;
dot_fn dot_bf16_f32;
dot_fn dot_q4_0_q8_0;
dot_fn dot_q4_1_q8_1;
dot_fn dot_q5_0_q8_0;
dot_fn dot_q5_1_q8_1;
dot_fn dot_q8_0_q8_0;
dot_fn dot_q2_K_q8_K;
dot_fn dot_q3_K_q8_K;
dot_fn dot_q4_K_q8_K;
dot_fn dot_q5_K_q8_K;
dot_fn dot_q6_K_q8_K;

/* AVX2 + FMA + F16C kernels (dot_avx2.c); call only when cpu_has_avx2(). */
dot_fn dot_f32_f32_avx2;
dot_fn dot_f16_f32_avx2;
dot_fn dot_bf16_f32_avx2;
dot_fn dot_q4_0_q8_0_avx2;
dot_fn dot_q4_1_q8_1_avx2;
dot_fn dot_q5_0_q8_0_avx2;
dot_fn dot_q5_1_q8_1_avx2;
dot_fn dot_q8_0_q8_0_avx2;
dot_fn dot_q2_K_q8_K_avx2;
dot_fn dot_q3_K_q8_K_avx2;
dot_fn dot_q4_K_q8_K_avx2;
dot_fn dot_q5_K_q8_K_avx2;
dot_fn dot_q6_K_q8_K_avx2;
/*
 * AVX-512 VL/BW/VNNI kernels (dot_avx512.c, 256-bit vectors: the same bits
 * as the AVX2 ones); call only when cpu_has_avx512vnni().
 */
dot_fn dot_f32_f32_avx512;
dot_fn dot_f16_f32_avx512;
dot_fn dot_q8_0_q8_0_avx512;
dot_fn dot_q4_K_q8_K_avx512;
dot_fn dot_q6_K_q8_K_avx512;

/*
 * The AVX-512 kernel for wtype, or NULL when there is none or this CPU
 * cannot run it.  Static storage.
 */
const struct dot_kernel *dot_kernel_avx512(uint32_t wtype);

/* dot_round_row(CP_T_F16, ...) with F16C. */
void dot_round_f16_avx2(const float *src, float *dst, int n);

#endif
