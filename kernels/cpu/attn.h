/*
 * attn.h - causal attention of a tile of query rows over one sequence's
 * paged KV cache, for one KV head and the query heads that share it.
 *
 * The cache is a pool of blocks of block_tokens slots; the sequence's
 * block table maps its position p to slot p % block_tokens of pool block
 * blocks[p / block_tokens].  K and V rows are kv_type (F16 or F32).
 *
 * Row r of the tile sits at position pos0 + r and attends to positions
 * 0..pos0 + r.  For each row and query head:
 *
 *	s_j = scale * dot(q, K_j)		(the dot kernel of kv_type:
 *						 dot.h's order, q as given)
 *	m   = max_j s_j
 *	l   = sum_j (double)exp(s_j - m)	(in position order)
 *	w_j = exp(s_j - m) * (float)(1 / l)	(rounded to F16 when kv_type
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
 * the tile, the tile's size or where the tile starts.  exp() is libm's
 * expf.  The SIMD and scalar paths give the same bits.
 */
#ifndef CP_ATTN_H
#define CP_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct attn_args {
	int head_dim;
	int group;		/* query heads sharing the KV head, >= 1 */
	int n_rows;		/* rows of the tile, >= 1 */
	int pos0;		/* position of row 0 */
	const float *q;		/* row r, head h: q + r * ldq + h * head_dim */
	size_t ldq;		/* floats between rows of q */
	float *out;		/* row r, head h: out + r * ldo + h * hd */
	size_t ldo;
	uint32_t kv_type;	/* CP_T_F16 or CP_T_F32 */
	const unsigned char *k;	/* the KV head's K in pool block 0, slot 0 */
	const unsigned char *v;	/* the same for V */
	size_t block_bytes;	/* bytes from one pool block to the next */
	size_t slot_bytes;	/* bytes from one slot to the next */
	const int32_t *blocks;	/* the sequence's block table */
	int block_tokens;
	float scale;		/* usually 1 / sqrt(head_dim) */
	int score_cap;		/* positions whose scores the scratch keeps */
};

/*
 * Bytes of scratch attn_rows() needs for tiles of at most n_rows rows that
 * keep the scores of up to score_cap positions (0 or more), or 0 when a
 * size is not positive.
 */
size_t attn_scratch_bytes(int head_dim, int group, int n_rows,
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
 * Pieces with a scalar and an AVX2 version (attn.c, attn_avx2.c), the same
 * bits either way; attn_rows() picks one set per process (cpu_use_simd()).
 */
struct attn_ops {
	/* vt[j * hd + i] = V row j element i as float, j < n, i < hd. */
	void (*v_load)(uint32_t type, const unsigned char *v, size_t slot_bytes,
	    int n, int hd, float *vt);
	/* s[j] *= scale for j < n; max(mx, s[0..n)) ("s > max" order). */
	float (*scale_max)(float *s, int n, float scale, float mx);
	/* w[j] *= inv, then if round, w[j] = fp16(w[j]) as float (RNE). */
	void (*weights)(float *w, int n, float inv, bool round);
	/* acc[i] = acc[i] + w[j] * vt[j * hd + i] for j = 0..n-1 in order. */
	void (*accum)(float *acc, const float *w, const float *vt, int n,
	    int hd);
};

extern const struct attn_ops attn_ops_scalar;
extern const struct attn_ops attn_ops_avx2;	/* only when cpu_has_avx2() */

#endif
