/*
 * repack.h - weights rearranged at load for the matrix products: groups
 * of REPACK_ROWS rows whose blocks sit side by side, which the AVX-512
 * kernels read with one wide load per two rows and fewer instructions
 * per byte than the GGUF layout.
 *
 * A repacked matrix has the size of the plain one and its groups start
 * where their first rows did (group g at g * REPACK_ROWS * row bytes), so
 * a product can still be cut at any multiple of REPACK_ROWS rows.  The
 * rearrangement keeps every byte's meaning: repack_row_unpack() gives the
 * GGUF row back bit for bit, and the repacked kernels compute each output
 * in the order dot.h fixes, so their results are the plain kernels', bit
 * for bit.
 *
 * Layouts, group of rows 0..3 (row i, block b), per block in row order:
 *	F16	elements 8b..8b+7 of rows 0..3 (16 bytes each): one 64-byte
 *		line, whose halves the kernel widens to two rows' floats
 *		each.
 *	Q4_0	d[4] (F16, rows 0..3), then qs of rows 0..3 (16 bytes
 *		each): 72 bytes.
 *	Q8_0	d[4] (F16, rows 0..3), then qs of rows 0..3 (32 bytes
 *		each), every byte xor 0x80 (q + 128, the unsigned operand
 *		VPDPBUSD wants): 136 bytes.
 *	Q4_K	d[4], dmin[4] (F16), then scale bytes 0-3 of rows 0..3,
 *		bytes 4-7, bytes 8-11 (so one 16-byte load holds a word of
 *		every row's scales), then for each 32-byte quarter of qs
 *		(values 64c..64c+63) that quarter of rows 0..3: 576 bytes.
 *	Q6_K	d[4] (F16), scales of rows 0..3 (16 bytes each), then for
 *		each 32-byte quarter of ql and each half of qh that piece
 *		of rows 0..3: 840 bytes.
 */
#ifndef CP_REPACK_H
#define CP_REPACK_H

#include <stdbool.h>
#include <stddef.h>

#include "dot.h"

#define REPACK_ROWS 4

/*
 * The kernel over repacked weights of type wtype this process uses, or
 * NULL when there is none for this CPU (then wtype stays in the GGUF
 * layout).  Its dot_fn arguments are dot.h's, with w the first row of a
 * group, bw a plain row's bytes and nw a multiple of REPACK_ROWS.  Static
 * storage.
 */
const struct dot_kernel *repack_kernel(uint32_t wtype);

/* Repacked kernels (dot_packed_avx512.c); call only when cpu_use_avx512(). */
dot_fn dot_f16_f32_packed;
/*
 * F16 repacked rows widened to F32 element for element (dot_widen()):
 * groups of 4 rows x 8 floats per block, bw the widened row's bytes (4k).
 * The results of dot_f16_f32_packed() on the F16 rows, bit for bit.
 */
dot_fn dot_f32_f32_packed;
dot_fn dot_q4_0_q8_0_packed;
dot_fn dot_q8_0_q8_0_packed;
dot_fn dot_q4_K_q8_K_packed;
dot_fn dot_q6_K_q8_K_packed;

/*
 * Elements of one row's block in wtype's layout, whatever the CPU (rows
 * of k elements repack when k is a multiple of it), or 0 when wtype has
 * no layout.
 */
int repack_block(uint32_t wtype);

/*
 * Repack rows (a multiple of REPACK_ROWS) GGUF rows of k elements of
 * wtype, row_bytes apart from src, into dst (rows * ttype row bytes, not
 * overlapping src).  0, or -EINVAL when wtype has no layout or rows or k
 * do not fit it.
 */
int repack_rows(uint32_t wtype, const void *src, size_t row_bytes, int rows,
    int k, void *dst);

/* Row r of the repacked matrix at w (k elements) in the GGUF layout. */
void repack_row_unpack(uint32_t wtype, const void *w, int r, int k,
    void *dst);

#endif
