/*
 * dot.c - kernel tables and the scalar float kernels (F32, F16 and BF16
 * weights times F32 activations).
 */
#include "dot.h"

#include <math.h>

#include "cpu_features.h"
#include "quant.h"
#include "ttype.h"

/*
 * The fixed order for float rows, the one of ggml's x86 float GEMM
 * (llamafile's tinyBLAS, which llama.cpp runs for F32, F16 and BF16
 * weights): element j is fused-multiply-added into lane j % 8, the lanes
 * are reduced once as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
 * A last partial group of 8 adds exact zeros to the lanes it does not
 * reach, as the AVX2 kernel's masked loads do.
 */
static inline float
lanes_sum(float s[8])
{
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static inline void
lanes_tail(float s[8], int from)
{
	for (int l = from; l < 8; l++)
		s[l] = fmaf(0.0f, 0.0f, s[l]);
}

static float
row_f32(int k, const float *w, const float *x)
{
	float s[8] = { 0 };

	for (int j = 0; j < k; j++)
		s[j & 7] = fmaf(w[j], x[j], s[j & 7]);
	lanes_tail(s, k & 7 ? k & 7 : 8);
	return lanes_sum(s);
}

/* Weight rows are read by bytes: F16/BF16 rows need no alignment. */
static float
row_f16(int k, const uint8_t *w, const float *x)
{
	float s[8] = { 0 };

	for (int j = 0; j < k; j++)
		s[j & 7] = fmaf(quant_f16(w + 2 * j), x[j], s[j & 7]);
	lanes_tail(s, k & 7 ? k & 7 : 8);
	return lanes_sum(s);
}

static float
row_bf16(int k, const uint8_t *w, const float *x)
{
	float s[8] = { 0 };

	for (int j = 0; j < k; j++)
		s[j & 7] = fmaf(bf16_to_fp32((uint16_t)(w[2 * j] |
		    w[2 * j + 1] << 8)), x[j], s[j & 7]);
	lanes_tail(s, k & 7 ? k & 7 : 8);
	return lanes_sum(s);
}

void
dot_f32_f32(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++) {
		const float *wr = (const void *)((const char *)w + o * bw);

		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_f32(k, wr,
			    (const void *)((const char *)x + r * bx));
	}
}

void
dot_f16_f32(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++) {
		const uint8_t *wr = (const uint8_t *)w + o * bw;

		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_f16(k, wr,
			    (const void *)((const char *)x + r * bx));
	}
}

void
dot_bf16_f32(int k, const void *w, size_t bw, int nw, const void *x,
    size_t bx, int nx, float *y, size_t ldy)
{
	for (int o = 0; o < nw; o++) {
		const uint8_t *wr = (const uint8_t *)w + o * bw;

		for (int r = 0; r < nx; r++)
			y[r * ldy + o] = row_bf16(k, wr,
			    (const void *)((const char *)x + r * bx));
	}
}

void
dot_round_row(uint32_t to, const float *src, float *dst, int n)
{
#if defined(__x86_64__) || defined(__i386__)
	if (to == CP_T_F16 && cpu_use_simd()) {
		dot_round_f16_avx2(src, dst, n);
		return;
	}
#endif
	for (int j = 0; j < n; j++) {
		if (to == CP_T_F16)
			dst[j] = fp16_to_fp32(fp32_to_fp16(src[j]));
		else if (to == CP_T_BF16)
			dst[j] = bf16_to_fp32(fp32_to_bf16(src[j]));
		else
			dst[j] = src[j];
	}
}

void
dot_widen(uint32_t from, const void *src, float *dst, size_t n)
{
	const uint8_t *s = src;

#if defined(__x86_64__) || defined(__i386__)
	if (cpu_use_simd()) {
		dot_widen_avx2(from, src, dst, n);
		return;
	}
#endif
	for (size_t j = 0; j < n; j++)
		dst[j] = from == CP_T_F16 ? quant_f16(s + 2 * j) :
		    bf16_to_fp32((uint16_t)(s[2 * j] | s[2 * j + 1] << 8));
}

/* ---- tables ------------------------------------------------------------ */

#define K(w, x, r, f, n) { CP_T_##w, CP_T_##x, CP_T_##r, f, n }

static const struct dot_kernel scalar_kernels[] = {
	K(F32, F32, F32, dot_f32_f32, "f32.f32"),
	K(F16, F32, F16, dot_f16_f32, "f16.f32"),
	K(BF16, F32, BF16, dot_bf16_f32, "bf16.f32"),
	K(Q4_0, Q8_0, F32, dot_q4_0_q8_0, "q4_0.q8_0"),
	K(Q4_1, Q8_1, F32, dot_q4_1_q8_1, "q4_1.q8_1"),
	K(Q5_0, Q8_0, F32, dot_q5_0_q8_0, "q5_0.q8_0"),
	K(Q5_1, Q8_1, F32, dot_q5_1_q8_1, "q5_1.q8_1"),
	K(Q8_0, Q8_0, F32, dot_q8_0_q8_0, "q8_0.q8_0"),
	K(Q2_K, Q8_K, F32, dot_q2_K_q8_K, "q2_K.q8_K"),
	K(Q3_K, Q8_K, F32, dot_q3_K_q8_K, "q3_K.q8_K"),
	K(Q4_K, Q8_K, F32, dot_q4_K_q8_K, "q4_K.q8_K"),
	K(Q5_K, Q8_K, F32, dot_q5_K_q8_K, "q5_K.q8_K"),
	K(Q6_K, Q8_K, F32, dot_q6_K_q8_K, "q6_K.q8_K"),
};

#if defined(__x86_64__) || defined(__i386__)
static const struct dot_kernel avx2_kernels[] = {
	K(F32, F32, F32, dot_f32_f32_avx2, "f32.f32/avx2"),
	K(F16, F32, F16, dot_f16_f32_avx2, "f16.f32/avx2"),
	K(BF16, F32, BF16, dot_bf16_f32_avx2, "bf16.f32/avx2"),
	K(Q4_0, Q8_0, F32, dot_q4_0_q8_0_avx2, "q4_0.q8_0/avx2"),
	K(Q4_1, Q8_1, F32, dot_q4_1_q8_1_avx2, "q4_1.q8_1/avx2"),
	K(Q5_0, Q8_0, F32, dot_q5_0_q8_0_avx2, "q5_0.q8_0/avx2"),
	K(Q5_1, Q8_1, F32, dot_q5_1_q8_1_avx2, "q5_1.q8_1/avx2"),
	K(Q8_0, Q8_0, F32, dot_q8_0_q8_0_avx2, "q8_0.q8_0/avx2"),
	K(Q2_K, Q8_K, F32, dot_q2_K_q8_K_avx2, "q2_K.q8_K/avx2"),
	K(Q3_K, Q8_K, F32, dot_q3_K_q8_K_avx2, "q3_K.q8_K/avx2"),
	K(Q4_K, Q8_K, F32, dot_q4_K_q8_K_avx2, "q4_K.q8_K/avx2"),
	K(Q5_K, Q8_K, F32, dot_q5_K_q8_K_avx2, "q5_K.q8_K/avx2"),
	K(Q6_K, Q8_K, F32, dot_q6_K_q8_K_avx2, "q6_K.q8_K/avx2"),
};

static const struct dot_kernel avx512_kernels[] = {
	K(F32, F32, F32, dot_f32_f32_avx512, "f32.f32/avx512"),
	K(F16, F32, F16, dot_f16_f32_avx512, "f16.f32/avx512"),
	K(Q8_0, Q8_0, F32, dot_q8_0_q8_0_avx512, "q8_0.q8_0/avx512"),
	K(Q4_K, Q8_K, F32, dot_q4_K_q8_K_avx512, "q4_K.q8_K/avx512"),
	K(Q6_K, Q8_K, F32, dot_q6_K_q8_K_avx512, "q6_K.q8_K/avx512"),
};
#endif

#undef K

static const struct dot_kernel *
find(const struct dot_kernel *tab, size_t n, uint32_t wtype)
{
	for (size_t i = 0; i < n; i++)
		if (tab[i].wtype == wtype)
			return &tab[i];
	return NULL;
}

const struct dot_kernel *
dot_kernel_scalar(uint32_t wtype)
{
	return find(scalar_kernels,
	    sizeof(scalar_kernels) / sizeof(scalar_kernels[0]), wtype);
}

const struct dot_kernel *
dot_kernel_avx2(uint32_t wtype)
{
#if defined(__x86_64__) || defined(__i386__)
	if (!cpu_has_avx2())
		return NULL;
	return find(avx2_kernels,
	    sizeof(avx2_kernels) / sizeof(avx2_kernels[0]), wtype);
#else
	(void)wtype;
	return NULL;
#endif
}

const struct dot_kernel *
dot_kernel_avx512(uint32_t wtype)
{
#if defined(__x86_64__) || defined(__i386__)
	if (!cpu_has_avx512vnni())
		return NULL;
	return find(avx512_kernels,
	    sizeof(avx512_kernels) / sizeof(avx512_kernels[0]), wtype);
#else
	(void)wtype;
	return NULL;
#endif
}

const struct dot_kernel *
dot_kernel(uint32_t wtype)
{
	const struct dot_kernel *kern = NULL;

	if (cpu_use_avx512())
		kern = dot_kernel_avx512(wtype);
	if (kern == NULL && cpu_use_simd())
		kern = dot_kernel_avx2(wtype);
	return kern != NULL ? kern : dot_kernel_scalar(wtype);
}
