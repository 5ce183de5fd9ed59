/*
 * attn.h - causal attention of a tile of query rows over one sequence's
 * paged KV cache, for n_kv consecutive KV heads and the query heads that
 * share them (group per KV head).
 *
 * The cache is a pool of blocks of block_tokens slots; the sequence's
 * block table maps its position p to slot p % block_tokens of pool block
 * blocks[p / block_tokens].  K and V rows are kv_type (F16 or F32).  The
 * walks go over the blocks in the outer loop and the KV heads in the
 * inner one, so that where a block holds its heads' rows one after the
 * other (kv_head_bytes = block_tokens * slot_bytes) each block is read as
 * one run: on the machines we measured, short runs of one head at a time
 * read the pool at about half the bandwidth.
 *
 * Row r of the tile sits at position pos0 + r and attends to positions
 * lo..pos0 + r, where lo is 0, or with a window W, pos0 + r - W + 1 when
 * that is above 0.  For each row and query head:
 *
 *	s_j = scale * dot(q, K_j)		(the dot kernel of kv_type:
 *						 dot.h's order, q as given)
 *	s_j = tanh(s_j * (1 / cap)) * cap	(with soft-capping only)
 *	s_j = -inf for j < lo
 *	m   = max_j s_j
 *	e_j = attn_expf(s_j - m)
 *	l   = sum_j (double)e_j			(see attn_lanes_sum())
 *	w_j = e_j * (float)(1 / l)		(rounded to F16 when kv_type
 *						 is F16)
 *	out = sum_j w_j V_j			(position order; each term a
 *						 product then a sum, never
 *						 fused)
 *
 * When the tile's last position is below score_cap, every score is
 * computed once and kept in the scratch (O(rows x score_cap)); otherwise
 * the scores are computed again in each of three walks over the blocks in
 * position order (the maximum, the sum, the weighted V rows), with O(rows x
 * block) scratch.  Both give the same bits.  A row's result depends only
 * on its query, its position and the cache: never on the other rows of
 * the tile, the tile's size or where the tile starts.  The SIMD and
 * scalar paths give the same bits.  Blocks below every row's window are
 * not read: their weights would be 0, and leaving them out changes no
 * bit of the sum or the output.
 */
#ifndef CP_ATTN_H
#define CP_ATTN_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * exp(x) for the softmax, x <= 0 (a score minus the row's maximum), the
 * same bits in every lane of attn_avx2.c: x = n ln2 + r with n = rint(x
 * log2 e) and |r| <= ln2 / 2 (ln2 in two parts), e^r by its Taylor
 * polynomial of degree 7 (Horner, fused), times 2^n.  Within 1 ulp of
 * exp(); 0 below -87 (where exp() is below 2^-125) and for -inf; NaN
 * stays NaN.  Compile without -ffast-math: the fmaf()s are the only
 * fused operations.
 */
#define ATTN_EXP_MIN	(-87.0f)
#define ATTN_LOG2E	1.44269504088896341f
#define ATTN_LN2_HI	0.693359375f		/* 8 bits: n * hi is exact */
#define ATTN_LN2_LO	(-2.12194440e-4f)	/* ln 2 - hi */
#define ATTN_EXP_C(X)	/* coefficients 1/7! .. 1/0! */		\
	X(1.98412698e-4f) X(1.38888889e-3f) X(8.33333333e-3f)		\
	X(4.16666667e-2f) X(1.66666667e-1f) X(0.5f) X(1.0f) X(1.0f)

static inline float
attn_expf(float x)
{
	float n, r, p = 0.0f, two_n;
	uint32_t bits;

	if (!(x >= ATTN_EXP_MIN))
		return x != x ? x : 0.0f;
	n = rintf(x * ATTN_LOG2E);
	r = fmaf(n, -ATTN_LN2_HI, x);
	r = fmaf(n, -ATTN_LN2_LO, r);
#define ATTN_HORNER(c) p = fmaf(p, r, c);
	ATTN_EXP_C(ATTN_HORNER)
#undef ATTN_HORNER
	bits = (uint32_t)((int32_t)n + 127) << 23;
	memcpy(&two_n, &bits, sizeof(two_n));
	return p * two_n;
}

/*
 * The softmax sum: element j of a row (position j) is added, as a double,
 * into lane j % 8 in position order; the lanes are then added pairwise,
 * ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).  Position-order lanes make
 * the stored and the three-walk paths agree however blocks cut the row.
 */
static inline double
attn_lanes_sum(const double acc[8])
{
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
	    ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

struct attn_args {
	int head_dim;
	int group;		/* query heads sharing a KV head, >= 1 */
	int n_kv;		/* KV heads of the call, >= 1; query head h
				   (h < n_kv * group) uses KV head h / group */
	int n_rows;		/* rows of the tile, >= 1 */
	int pos0;		/* position of row 0 */
	const float *q;		/* row r, head h: q + r * ldq + h * head_dim */
	size_t ldq;		/* floats between rows of q */
	float *out;		/* row r, head h: out + r * ldo + h * hd */
	size_t ldo;
	uint32_t kv_type;	/* CP_T_F16 or CP_T_F32 */
	const unsigned char *k;	/* KV head 0's K in pool block 0, slot 0 */
	const unsigned char *v;	/* the same for V */
	size_t kv_head_bytes;	/* bytes from one KV head's rows to the
				   next's in a block */
	size_t block_bytes;	/* bytes from one pool block to the next */
	size_t slot_bytes;	/* bytes from one slot to the next */
	const int32_t *blocks;	/* the sequence's block table */
	int block_tokens;
	float scale;		/* usually 1 / sqrt(head_dim) */
	int window;		/* 0: none; else positions seen by each row */
	float softcap;		/* 0: none; else the cap */
	int score_cap;		/* positions whose scores the scratch keeps */
};

/*
 * Bytes of scratch attn_rows() needs for tiles of at most n_rows rows and
 * heads query heads (group * n_kv) that keep the scores of up to
 * score_cap positions (0 or more), or 0 when a size is not positive.
 */
size_t attn_scratch_bytes(int head_dim, int heads, int n_rows,
    int block_tokens, int score_cap);

/*
 * Write out for every row and head of the tile (the formulas above).
 * scratch: attn_scratch_bytes() bytes for at least a->n_rows rows, any
 * alignment, owned by the caller; the caller guarantees every index is in
 * range (the table covers pos0 + n_rows - 1).  Returns 0, or -EINVAL when
 * kv_type has no kernel.
 */
int attn_rows(const struct attn_args *a, void *scratch);

struct attn_ops;
struct dot_kernel;

/*
 * attn_rows() with the given pieces and K dot kernel (kdot->wtype must be
 * a->kv_type): tests run the scalar and SIMD paths side by side.
 */
int attn_rows_with(const struct attn_args *a, void *scratch,
    const struct attn_ops *ops, const struct dot_kernel *kdot);

/*
 * Pieces with a scalar, an AVX2 and an AVX-512 version (attn.c,
 * attn_avx2.c, attn_avx512.c), the same bits either way; attn_rows()
 * picks one set per process (cpu_use_simd(), cpu_use_avx512()).
 */
struct attn_ops {
	/* s[j] *= scale for j < n; max(mx, s[0..n)) ("s > max" order). */
	float (*scale_max)(float *s, int n, float scale, float mx);
	/* w[j] *= inv, then if round, w[j] = fp16(w[j]) as float (RNE). */
	void (*weights)(float *w, int n, float inv, bool round);
	/* acc[i] = acc[i] + w[j] * vt[j * hd + i] for j = 0..n-1 in order. */
	void (*accum)(float *acc, const float *w, const float *vt, int n,
	    int hd);
	/*
	 * dst[j] = attn_expf(src[j] - mx) for j < n (dst may be src); unless
	 * lanes is NULL, lanes[(lane0 + j) % 8] += (double)dst[j] in order.
	 */
	void (*exp_sum)(float *dst, const float *src, int n, float mx,
	    double *lanes, int lane0);
	/*
	 * Optional, both or neither (NULL: the dot kernel and dequant_row()
	 * + accum() serve); F16 rows with hd a multiple of 8 only, for one
	 * query row and head.
	 * kscores1: s[j] = dot(q, K row j) for j < n, the dot kernel's bits
	 * (rows slot_bytes apart from k).  accum_f16: accum() of the n V rows
	 * at v (slot_bytes apart) without converting them into a buffer.
	 */
	void (*kscores1)(const unsigned char *k, size_t slot_bytes, int n,
	    int hd, const float *q, float *s);
	void (*accum_f16)(float *acc, const float *w, const unsigned char *v,
	    size_t slot_bytes, int n, int hd);
	/*
	 * accum() for rows output rows at once over the same vt: row k's
	 * acc at acc + k * lda, its weights at w + k * ldw.  Each row's bits
	 * are accum()'s; several rows together only overlap their chains.
	 */
	void (*accum_rows)(float *acc, size_t lda, const float *w, size_t ldw,
	    const float *vt, int n, int hd, int rows);
	/*
	 * Optional (NULL: the dot kernel serves): F16 K rows, hd a multiple
	 * of 8 up to ATTN_KT_MAX_HD.  s[r * lds + j] = dot(q + r * ldq, K row
	 * j) for j < n and r < nq, the dot kernel's bits (rows slot_bytes
	 * apart from k).
	 */
	void (*kscores_rows)(const unsigned char *k, size_t slot_bytes, int n,
	    int hd, const float *q, size_t ldq, int nq, float *s, size_t lds);
};

#define ATTN_KT_MAX_HD 256

extern const struct attn_ops attn_ops_scalar;
extern const struct attn_ops attn_ops_avx2;	/* only when cpu_has_avx2() */
/* attn_ops_avx2 with the pieces of attn_avx512.c: only when cpu_use_avx512() */
extern const struct attn_ops attn_ops_avx512;

/* attn_avx512.c's pieces (attn_ops_avx512's kscores_rows, accum_rows). */
void attn_kscores_rows_avx512(const unsigned char *k, size_t slot_bytes,
    int n, int hd, const float *q, size_t ldq, int nq, float *s, size_t lds);
void attn_accum_rows_avx512(float *acc, size_t lda, const float *w,
    size_t ldw, const float *vt, int n, int hd, int rows);

#endif
