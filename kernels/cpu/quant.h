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

/*
 * Convert n activations at src into type t at dst the way ggml's x86 CPU
 * backend quantizes the input of a matrix product: Q8_0 and Q8_1 with the
 * scale 127 / amax and ties to even (quant_row() rounds as llama-quantize
 * does: x * (1 / d), ties away from zero); every other type as quant_row().
 * Returns 0 or -EINVAL.
 */
int quant_row_act(uint32_t t, const float *src, void *dst, size_t n);

/*
 * quant_row_act() with AVX2 for Q8_0, Q8_1, Q8_K and F16 (the same bytes;
 * other types go to quant_row_act()).  Call only when cpu_has_avx2(); 0 or
 * -EINVAL.
 */
int quant_row_act_avx2(uint32_t t, const float *src, void *dst, size_t n);

/*
 * dequant_row() with F16C for F16 (the same bits, NaN included; other
 * types go to dequant_row()).  Call only when cpu_has_avx2(); 0 or -EINVAL.
 */
int dequant_row_avx2(uint32_t t, const void *src, float *dst, size_t n);

/*
 * Block layouts, byte for byte as ggml stores them.  Multi-byte fields are
 * little-endian; "f16" fields hold IEEE half bit patterns (read them with
 * quant_f16()).  Weight blocks are byte arrays only, so a block may start at
 * any address.  Element j of a block is written x[j] below.
 */
#define QUANT_QK 32		/* elements in a Q4_0..Q8_1 block */
#define QUANT_QK_K 256		/* elements in a K-quant super-block */

/* x[j] = d * (q[j] - 8); q[j] is the low nibble of qs[j] (j < 16), the high nibble of qs[j-16]. */
struct blk_q4_0 { uint8_t d[2]; uint8_t qs[16]; };
/* x[j] = d * q[j] + m; q[j] as in Q4_0. */
struct blk_q4_1 { uint8_t d[2]; uint8_t m[2]; uint8_t qs[16]; };
/* x[j] = d * (q[j] - 16); q[j] = nibble as in Q4_0 | bit j of qh (u32) << 4. */
struct blk_q5_0 { uint8_t d[2]; uint8_t qh[4]; uint8_t qs[16]; };
/* x[j] = d * q[j] + m; q[j] as in Q5_0. */
struct blk_q5_1 { uint8_t d[2]; uint8_t m[2]; uint8_t qh[4]; uint8_t qs[16]; };
/* x[j] = d * qs[j]. */
struct blk_q8_0 { uint8_t d[2]; int8_t qs[32]; };
/* x[j] = d * qs[j]; s = f16(d * sum(qs)). */
struct blk_q8_1 { uint8_t d[2]; uint8_t s[2]; int8_t qs[32]; };
/*
 * 16 sub-blocks of 16: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4),
 * q 2 bits: element 128h + 32c + l (h < 2, c < 4, l < 32) is bits 2c..2c+1
 * of qs[32h + l]; its sub-block s = 8h + 2c + l / 16.
 */
struct blk_q2_K { uint8_t scales[16]; uint8_t qs[64]; uint8_t d[2]; uint8_t dmin[2]; };
/*
 * 16 sub-blocks of 16: x = d * (sc[s] - 32) * (q - (hmask bit clear ? 4 : 0)),
 * q the 2 bits placed as in Q2_K, the high bit of element 32i + l (i < 8)
 * is bit i of hmask[l]; sc[s] 6 bits: low 4 in scales[s % 8] (nibble s / 8),
 * high 2 in scales[8 + s % 4] bits 2 * (s / 4).
 */
struct blk_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint8_t d[2]; };
/*
 * 8 sub-blocks of 32: x = d * sc[s] * q - dmin * mn[s]; element 64i + l is
 * the low (l < 32) or high (l >= 32) nibble of qs[32i + l % 32]; sc, mn are
 * 6-bit values packed in scales[12] (see quant_k_scale_min()).
 */
struct blk_q4_K { uint8_t d[2]; uint8_t dmin[2]; uint8_t scales[12]; uint8_t qs[128]; };
/* As Q4_K with a fifth bit: element 32s + l has bit s of qh[l] as value 16. */
struct blk_q5_K { uint8_t d[2]; uint8_t dmin[2]; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
/*
 * 16 sub-blocks of 16: x = d * scales[s] * (q - 32), q 6 bits: element
 * 128h + 32c + l (h < 2, c < 4, l < 32) takes the low (c < 2) or high
 * nibble of ql[64h + 32(c & 1) + l] and bits 2c..2c+1 of qh[32h + l] as
 * its top two bits; its sub-block s = 8h + 2c + l / 16.
 */
struct blk_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint8_t d[2]; };
/*
 * Activation super-block (never stored in files): x[j] = d * qs[j];
 * bsums[g] = sum of qs[16g .. 16g + 15].  Needs 4-byte alignment.
 */
struct blk_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

/* Scale and min of sub-block j < 8 of a Q4_K/Q5_K block's 12 scale bytes q. */
static inline void
quant_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 15) | (q[j - 4] >> 6) << 4);
		*mn = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
	}
}

/* The f16 at p (2 bytes, little-endian, any alignment) as a float. */
static inline float
quant_f16(const uint8_t *p)
{
	return fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

#endif
