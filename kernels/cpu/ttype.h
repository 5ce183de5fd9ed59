/*
 * ttype.h - GGUF tensor types: the one table of block sizes and byte sizes,
 * shared by the reader, the writer and the kernels.
 *
 * Values are ggml's type ids as stored in a GGUF tensor info.  A block of
 * type t holds ttype_info(t)->block elements in ttype_info(t)->bytes bytes;
 * a row of n elements needs n % block == 0.
 */
#ifndef CP_TTYPE_H
#define CP_TTYPE_H

#include <stdbool.h>
#include <stdint.h>

enum cp_ttype {
	CP_T_F32 = 0,
	CP_T_F16 = 1,
	CP_T_Q4_0 = 2,
	CP_T_Q4_1 = 3,
	CP_T_Q5_0 = 6,
	CP_T_Q5_1 = 7,
	CP_T_Q8_0 = 8,
	CP_T_Q8_1 = 9,
	CP_T_Q2_K = 10,
	CP_T_Q3_K = 11,
	CP_T_Q4_K = 12,
	CP_T_Q5_K = 13,
	CP_T_Q6_K = 14,
	CP_T_Q8_K = 15,
	CP_T_IQ2_XXS = 16,
	CP_T_IQ2_XS = 17,
	CP_T_IQ3_XXS = 18,
	CP_T_IQ1_S = 19,
	CP_T_IQ4_NL = 20,
	CP_T_IQ3_S = 21,
	CP_T_IQ2_S = 22,
	CP_T_IQ4_XS = 23,
	CP_T_I8 = 24,
	CP_T_I16 = 25,
	CP_T_I32 = 26,
	CP_T_I64 = 27,
	CP_T_F64 = 28,
	CP_T_IQ1_M = 29,
	CP_T_BF16 = 30,
	CP_T_TQ1_0 = 34,
	CP_T_TQ2_0 = 35,
	CP_T_MXFP4 = 39,
	CP_T_COUNT = 40		/* one past the largest id in the table */
};

struct ttype_info {
	const char *name;	/* ggml's name, e.g. "q4_K" */
	uint32_t block;		/* elements per block */
	uint32_t bytes;		/* bytes per block */
};

/* Table entry for type id t, or NULL when t is not a known ggml type. */
const struct ttype_info *ttype_info(uint32_t t);

/* Name of type t ("f16"), or "unknown" for an unknown id; static storage. */
const char *ttype_name(uint32_t t);

/* Type id named name (case-insensitive, "q4_k" or "Q4_K"), or -1. */
int ttype_from_name(const char *name);

/*
 * Bytes of n elements of type t in *out.  Returns 0, -EINVAL for an unknown
 * type or n not a multiple of the block size, -EOVERFLOW on overflow.
 */
int ttype_nbytes(uint32_t t, uint64_t n, uint64_t *out);

#endif
