/*
 * quant.h - element conversions and block (de)quantization for every GGUF
 * tensor type cpd runs, bit-exact to ggml's block layouts.
 *
 * Rows are n elements, n a multiple of the type's block size (ttype.h).
 */
#ifndef CP_QUANT_H
#define CP_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* IEEE half <-> float, exact (round to nearest even on the way down). */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
/* bfloat16 <-> float (round to nearest even; NaN stays NaN). */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

/* Type t can be dequantized by dequant_row(). */
bool quant_can_dequant(uint32_t t);
/* Type t can be produced by quant_row(). */
bool quant_can_quant(uint32_t t);

/* Convert n elements of type t at src into n floats at dst; 0 or -EINVAL. */
int dequant_row(uint32_t t, const void *src, float *dst, size_t n);

/* Convert n floats at src into type t at dst (ttype_nbytes(t, n) bytes); 0 or -EINVAL. */
int quant_row(uint32_t t, const float *src, void *dst, size_t n);

#endif
