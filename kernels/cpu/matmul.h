/*
 * matmul.h - the one place where matrix products with model weights happen.
 *
 * W is a GGUF weight: n_out rows of k elements of type wtype, rows
 * w_stride bytes apart (ttype_nbytes(wtype, k)).  X is m rows of k floats,
 * ldx floats apart.  Y gets m rows of n_out floats, ldy floats apart:
 *
 *	Y[r][o] = sum_j W[o][j] * X[r][j]
 *
 * The product runs in two phases so a thread pool can split it by output
 * rows: mm_prepare() converts X once into the activation format the weight
 * type wants (scratch, mm_scratch_bytes() bytes), then mm_rows() computes
 * output rows [o0, o1) for all m activation rows.  The inner (k) sum of each
 * output element is done in the same order whatever m, o0 and o1 are, so a
 * row's result never depends on what else shares the product.
 */
#ifndef CP_MATMUL_H
#define CP_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mm_args {
	uint32_t wtype;		/* enum cp_ttype of W */
	const void *w;		/* W row 0 */
	size_t w_stride;	/* bytes between W rows */
	int n_out;		/* rows of W = columns of Y */
	int k;			/* row length of W and X */
	const float *x;		/* m x k activations */
	size_t ldx;
	int m;
	float *y;		/* m x n_out results */
	size_t ldy;
	bool packed;		/* W repacked (repack.h): n_out a multiple
				   of REPACK_ROWS, read by repack_kernel() */
};

/* wtype has a matrix-product kernel. */
bool mm_supported(uint32_t wtype);

/* Bytes of scratch mm_prepare() needs for m rows of k activations. */
size_t mm_scratch_bytes(uint32_t wtype, int k, int m);

/* Convert a->x into scratch for a->wtype (no-op for types that read F32). */
void mm_prepare(const struct mm_args *a, void *scratch);

/*
 * mm_prepare() for activation rows [r0, r1) only (0 <= r0 <= r1 <= m):
 * rows are independent, so threads may prepare disjoint ranges.
 */
void mm_prepare_rows(const struct mm_args *a, void *scratch, int r0, int r1);

/*
 * Y[r][o] for every r < m and o0 <= o < o1, reading the prepared scratch.
 * A packed W takes o0 and o1 multiples of REPACK_ROWS (mm_rows_align()).
 */
void mm_rows(const struct mm_args *a, const void *scratch, int o0, int o1);

/*
 * Activation rows from which mm_rows_wide() widens weight tiles.  The
 * F16 kernels convert a weight block once per tile of 4-6 activation
 * rows, and on the AVX-512 machines we measured a conversion costs about
 * three multiply-adds; widening costs one conversion per weight for the
 * whole product.
 */
#define MM_WIDE_ROWS 32

/*
 * Bytes of scratch mm_rows_wide() widens a tile of weights of type wtype
 * (k elements a row, repacked or not) into; 0 when such weights never
 * widen (types other than F16 and BF16).
 */
size_t mm_wide_bytes(uint32_t wtype, int k, bool packed);

/*
 * mm_rows() with the weights widened to F32 one tile at a time into wide
 * (mm_wide_bytes() bytes, the calling thread's own) when the product has
 * enough activation rows to gain from it; the same bits as mm_rows()
 * (conversions are exact and the float kernels share one order).  wide
 * NULL, or weights that do not widen: mm_rows().
 */
void mm_rows_wide(const struct mm_args *a, const void *scratch, void *wide,
    int o0, int o1);

/* The multiple of rows mm_rows() cuts a's product at: 1, or REPACK_ROWS. */
int mm_rows_align(const struct mm_args *a);

#endif
