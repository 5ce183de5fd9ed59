/*
 * quantize_k.h - F32 to the Q4_1, Q5_0, Q5_1 and K-quant weight formats
 * (block layouts in quant.h).  Internal to kernels/cpu: callers go through
 * quant_row().
 *
 * Each function converts nb blocks (32 values for Q4_1..Q5_1, 256 for the
 * K-quants) read from x into nb blocks at dst; it never fails, and NaN or
 * infinite input gives some valid block, never a trap.
 */
#ifndef CP_QUANTIZE_K_H
#define CP_QUANTIZE_K_H

#include <stddef.h>

/* Q4_1 / Q5_1: min/max affine rounding, byte for byte as llama-quantize. */
void quantize_k_q4_1(const float *x, void *dst, size_t nb);
void quantize_k_q5_1(const float *x, void *dst, size_t nb);
/* Q5_0: d = -max / 16 (max: largest magnitude, signed), as llama-quantize. */
void quantize_k_q5_0(const float *x, void *dst, size_t nb);

/* K-quants: per-sub-block least-squares scales (and mins), then requantized. */
void quantize_k_q2_K(const float *x, void *dst, size_t nb);
void quantize_k_q3_K(const float *x, void *dst, size_t nb);
void quantize_k_q4_K(const float *x, void *dst, size_t nb);
void quantize_k_q5_K(const float *x, void *dst, size_t nb);
void quantize_k_q6_K(const float *x, void *dst, size_t nb);

#endif
