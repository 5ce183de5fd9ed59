/*
 * attn.c - attention over the paged KV cache (attn.h): the three walks and
 * the scalar pieces.
 */
#include "attn.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_features.h"
#include "dot.h"
#include "quant.h"
#include "ttype.h"

#define ATTN_ALIGN 64

/* Scratch layout, each part ATTN_ALIGN-aligned from an aligned base. */
struct attn_scratch {
	float *st;		/* [heads][n_rows][score_cap] score store */
	float *sc;		/* [heads][n_rows][bt] scores of one block */
	float *vt;		/* [bt][hd] V rows of one block as float */
	float *w;		/* [bt] weights of one row */
	float *m;		/* [n_rows * heads] running maxima */
	double *l;		/* [n_rows * heads][8] sum lanes */
};

static size_t
attn_round(size_t n)
{
	return (n + ATTN_ALIGN - 1) / ATTN_ALIGN * ATTN_ALIGN;
}

size_t
attn_scratch_bytes(int head_dim, int heads, int n_rows, int block_tokens,
    int score_cap)
{
	size_t hd = (size_t)head_dim, g = (size_t)heads, r = (size_t)n_rows;
	size_t bt = (size_t)block_tokens, cap = (size_t)score_cap;

	if (head_dim <= 0 || heads <= 0 || n_rows <= 0 || block_tokens <= 0 ||
	    score_cap < 0)
		return 0;
	return ATTN_ALIGN + attn_round(g * r * cap * sizeof(float)) +
	    attn_round(g * r * bt * sizeof(float)) +
	    attn_round(bt * hd * sizeof(float)) +
	    attn_round(bt * sizeof(float)) +
	    attn_round(r * g * sizeof(float)) +
	    attn_round(r * g * 8 * sizeof(double));
}

static void
attn_carve(const struct attn_args *a, void *scratch, struct attn_scratch *s)
{
	uintptr_t p = (uintptr_t)scratch;
	size_t hd = (size_t)a->head_dim, g = (size_t)(a->group * a->n_kv);
	size_t r = (size_t)a->n_rows, bt = (size_t)a->block_tokens;
	size_t cap = (size_t)a->score_cap;

	p = (p + ATTN_ALIGN - 1) / ATTN_ALIGN * ATTN_ALIGN;
	s->st = (float *)p;
	p += attn_round(g * r * cap * sizeof(float));
	s->sc = (float *)p;
	p += attn_round(g * r * bt * sizeof(float));
	s->vt = (float *)p;
	p += attn_round(bt * hd * sizeof(float));
	s->w = (float *)p;
	p += attn_round(bt * sizeof(float));
	s->m = (float *)p;
	p += attn_round(r * g * sizeof(float));
	s->l = (double *)p;
}

/* ---- scalar pieces ----------------------------------------------------- */

static void
accum_scalar(float *acc, const float *w, const float *vt, int n, int hd)
{
	for (int j = 0; j < n; j++) {
		const float *vr = vt + (size_t)j * (size_t)hd;
		float wj = w[j];

		for (int i = 0; i < hd; i++)
			acc[i] += wj * vr[i];
	}
}

static void
accum_rows_scalar(float *acc, size_t lda, const float *w, size_t ldw,
    const float *vt, int n, int hd, int rows)
{
	for (int k = 0; k < rows; k++)
		accum_scalar(acc + (size_t)k * lda, w + (size_t)k * ldw, vt, n,
		    hd);
}

static float
scale_max_scalar(float *s, int n, float scale, float mx)
{
	for (int j = 0; j < n; j++) {
		s[j] *= scale;
		if (s[j] > mx)
			mx = s[j];
	}
	return mx;
}

static void
weights_scalar(float *w, int n, float inv, bool round)
{
	for (int j = 0; j < n; j++)
		w[j] *= inv;
	if (round)
		dot_round_row(CP_T_F16, w, w, n);
}

static void
exp_sum_scalar(float *dst, const float *src, int n, float mx, double *lanes,
    int lane0)
{
	for (int j = 0; j < n; j++) {
		dst[j] = attn_expf(src[j] - mx);
		if (lanes != NULL)
			lanes[(lane0 + j) % 8] += (double)dst[j];
	}
}

const struct attn_ops attn_ops_scalar = {
	scale_max_scalar, weights_scalar, accum_scalar, exp_sum_scalar,
	NULL, NULL, accum_rows_scalar, NULL,
};

static const struct attn_ops *
attn_ops(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (cpu_use_avx512())
		return &attn_ops_avx512;
	if (cpu_use_simd())
		return &attn_ops_avx2;
#endif
	return &attn_ops_scalar;
}

/* ---- the walks --------------------------------------------------------- */

int
attn_rows(const struct attn_args *a, void *scratch)
{
	return attn_rows_with(a, scratch, attn_ops(), dot_kernel(a->kv_type));
}

/* ops' one-row pieces (attn_ops.kscores1, accum_f16) serve this call. */
static bool
attn_one_row(const struct attn_args *a, const struct attn_ops *ops)
{
	return ops->kscores1 != NULL && ops->accum_f16 != NULL &&
	    a->kv_type == CP_T_F16 && a->head_dim % 8 == 0;
}

/* KV head g's rows (K at base, or V) in block b. */
static const unsigned char *
attn_rows_at(const struct attn_args *a, const unsigned char *base, int b,
    int g)
{
	return base + (size_t)a->blocks[b] * a->block_bytes + (size_t)g *
	    a->kv_head_bytes;
}

/*
 * A one-row tile (a decode step's row, pos0 its position) asks for KV
 * head g's rows (K at base, or V) of block b + 1 into L2 while it reads
 * those of block b.  The blocks lie apart in the pool, so the hardware
 * prefetchers start afresh in each.  With the one-row pieces
 * (kscores1, accum_f16) this took the attention of 48 row-layers at
 * position 400 from 5.5-5.9 to 2.9-3.4 ms, and at 1500 from 19.7-20.5 to
 * 11.0-12.1 ms (one thread, the 110M model's 12 heads of 64, blocks
 * scattered as in the pool; BENCHMARKS.md); into L1 it was slower than
 * none.  Always inlined: GCC drops the calls of a function whose only
 * effect is a prefetch.
 */
static inline __attribute__((always_inline)) void
attn_ask_next(const struct attn_args *a, const unsigned char *base, int b,
    int g)
{
	const unsigned char *p;
	size_t len = (size_t)a->block_tokens * a->slot_bytes;

	if (a->n_rows != 1 || b >= a->pos0 / a->block_tokens)
		return;
	p = attn_rows_at(a, base, b + 1, g);
	for (size_t o = 0; o < len; o += 64)
		__builtin_prefetch(p + o, 0, 2);
}

/*
 * kdot over the n K rows at k (slot_bytes apart), 4 rows per call.  A
 * call's tiles take rows i, i + n / 4, ... (dot_tiles.h's runs, made for
 * long weight matrices); over a block's 16 rows that order read the
 * scattered blocks at about two thirds of the speed of adjacent rows
 * (a throwaway benchmark of the scores of 4512 blocks: 15-18 ms against
 * 12-13 ms).  The results are the same bits either way.
 */
static void
attn_kdot(const struct attn_args *a, const struct dot_kernel *kdot,
    const unsigned char *k, int n, const float *x, size_t bx, int nx,
    float *y, size_t ldy)
{
	for (int o = 0; o < n; o += 4)
		kdot->fn(a->head_dim, k + (size_t)o * a->slot_bytes,
		    a->slot_bytes, n - o < 4 ? n - o : 4, x, bx, nx, y + o,
		    ldy);
}

/*
 * Scores of the tile's rows r1.. for the n positions of block b, query
 * head h, into sc + (r - r1) * ld (sc[j] for position p0 + j), unscaled.
 * One row (a decode step's) goes to ops->kscores1 where it serves: the
 * same bits, in about two thirds of the time of kdot 4 rows per call.
 */
static void
attn_scores(const struct attn_args *a, const struct attn_ops *ops,
    const struct dot_kernel *kdot, int b, int n, int r1, int h, float *sc,
    size_t ld)
{
	const unsigned char *k = attn_rows_at(a, a->k, b, h / a->group);
	const float *q = a->q + (size_t)r1 * a->ldq + (size_t)h *
	    (size_t)a->head_dim;

	attn_ask_next(a, a->k, b, h / a->group);
	if (a->n_rows - r1 == 1 && attn_one_row(a, ops))
		ops->kscores1(k, a->slot_bytes, n, a->head_dim, q, sc);
	else if (ops->kscores_rows != NULL && a->kv_type == CP_T_F16 &&
	    a->head_dim % 8 == 0 && a->head_dim <= ATTN_KT_MAX_HD)
		ops->kscores_rows(k, a->slot_bytes, n, a->head_dim, q, a->ldq,
		    a->n_rows - r1, sc, ld);
	else
		attn_kdot(a, kdot, k, n, q, a->ldq * sizeof(float),
		    a->n_rows - r1, sc, ld);
}

/*
 * A one-row tile's scores for the n positions of block b, all query heads
 * of KV head g at once: the group's queries lie one after the other in the
 * row, so they go to the dot kernel as its activation rows, and each K row
 * is read and converted once for the group instead of once per head (the
 * same bits: a tile's shape never changes how an element is summed).
 * Head g * group + i goes to sc + i * ld.
 */
static void
attn_scores_group(const struct attn_args *a, const struct dot_kernel *kdot,
    int b, int n, int g, float *sc, size_t ld)
{
	attn_ask_next(a, a->k, b, g);
	attn_kdot(a, kdot, attn_rows_at(a, a->k, b, g), n,
	    a->q + (size_t)g * (size_t)a->group * (size_t)a->head_dim,
	    (size_t)a->head_dim * sizeof(float), a->group, sc, ld);
}

/*
 * Every query head's scores for the n positions of block b: head h's
 * rows r1.. from base + h * head_stride, ld apart.  A one-row tile with
 * GQA scores each KV head's group in one call (head_stride is then also
 * the distance between the group's heads).
 */
static void
attn_block_scores(const struct attn_args *a, const struct attn_ops *ops,
    const struct dot_kernel *kdot, int b, int n, int r1, float *base,
    size_t head_stride, size_t ld)
{
	if (a->n_rows == 1 && a->group > 1) {
		for (int g = 0; g < a->n_kv; g++)
			attn_scores_group(a, kdot, b, n, g, base +
			    (size_t)(g * a->group) * head_stride, head_stride);
		return;
	}
	for (int h = 0; h < a->group * a->n_kv; h++)
		attn_scores(a, ops, kdot, b, n, r1, h, base + (size_t)h *
		    head_stride, ld);
}

/* The lowest position row r of the tile attends to. */
static int
attn_row_lo(const struct attn_args *a, int r)
{
	int lo = a->pos0 + r - a->window + 1;

	return a->window > 0 && lo > 0 ? lo : 0;
}

/*
 * ops->scale_max() of the n scores at sc (positions p0..) of a row that
 * attends from position lo, with soft-capping and the window's -inf where
 * the call asks for them.
 */
static float
attn_scale_max(const struct attn_args *a, const struct attn_ops *ops,
    float *sc, int n, int p0, int lo, float mx)
{
	float inv;

	if (a->softcap == 0.0f && lo <= p0)
		return ops->scale_max(sc, n, a->scale, mx);
	inv = a->softcap != 0.0f ? 1.0f / a->softcap : 0.0f;
	for (int j = 0; j < n; j++) {
		float s = sc[j] * a->scale;

		if (a->softcap != 0.0f)
			s = tanhf(s * inv) * a->softcap;
		if (p0 + j < lo)
			s = -INFINITY;
		sc[j] = s;
		if (s > mx)
			mx = s;
	}
	return mx;
}

/* Positions of block p0.. (n of them) that row r attends to. */
static int
attn_row_len(const struct attn_args *a, int r, int p0, int n)
{
	int nv = a->pos0 + r - p0 + 1;

	return nv < n ? nv : n;
}

/* Row r, head h of the output. */
static float *
attn_out(const struct attn_args *a, int r, int h)
{
	return a->out + (size_t)r * a->ldo + (size_t)h * (size_t)a->head_dim;
}

/*
 * vt[j * hd + i] = V row j element i as float, j < n, from the rows at v
 * (slot_bytes apart): one dequant_row() call when they are packed (the
 * cache's layout), which converts a block's 16 rows of 64 or 128 in
 * 40-50 % of the time of a call per row.
 */
static void
attn_v_load(const struct attn_args *a, const unsigned char *v, int n,
    float *vt)
{
	size_t hd = (size_t)a->head_dim;
	uint64_t row;

	if (ttype_nbytes(a->kv_type, hd, &row) == 0 && row == a->slot_bytes)
		(void)dequant_row(a->kv_type, v, vt, (size_t)n * hd);
	else
		for (int j = 0; j < n; j++)
			(void)dequant_row(a->kv_type, v + (size_t)j *
			    a->slot_bytes, vt + (size_t)j * hd, hd);
}

/*
 * KV head g's V rows in block b (n of them) for the tile's rows r1..,
 * with the next block's asked for: returned as they lie when one row and
 * query head take them (ops->accum_f16 reads them there), else converted
 * into s->vt for the rows and heads that share them, and NULL returned.
 */
static const unsigned char *
attn_v_rows(const struct attn_args *a, const struct attn_scratch *s,
    const struct attn_ops *ops, int b, int g, int r1, int n)
{
	const unsigned char *v = attn_rows_at(a, a->v, b, g);

	attn_ask_next(a, a->v, b, g);
	if ((a->n_rows - r1) * a->group == 1 && attn_one_row(a, ops))
		return v;
	attn_v_load(a, v, n, s->vt);
	return NULL;
}

/* out += the n weights w times the V rows attn_v_rows() gave (v or vt). */
static void
attn_accum(const struct attn_args *a, const struct attn_scratch *s,
    const struct attn_ops *ops, float *out, const float *w,
    const unsigned char *v, int n)
{
	if (v != NULL)
		ops->accum_f16(out, w, v, a->slot_bytes, n, a->head_dim);
	else
		ops->accum(out, w, s->vt, n, a->head_dim);
}

/*
 * The V rows of block b (n of them, from attn_v_rows(): v or s->vt) into
 * query head h's outputs of rows r1.. with the stored weights ([h][r][cap]
 * from position 0): rows that see the whole block four at a time through
 * ops->accum_rows, the diagonal's shorter rows one by one.
 */
static void
attn_stored_v(const struct attn_args *a, const struct attn_scratch *s,
    const struct attn_ops *ops, int b, int h, int r1, size_t cap,
    const unsigned char *v, int n)
{
	int R = a->n_rows, p0 = b * a->block_tokens, r;
	/* rows from full on attend to all n positions of the block */
	int full = p0 + n - 1 - a->pos0;
	const float *w = s->st + (size_t)h * (size_t)R * cap + (size_t)p0;

	if (full < r1)
		full = r1;
	if (full > R)
		full = R;
	for (r = r1; r < full; r++)
		attn_accum(a, s, ops, attn_out(a, r, h), w + (size_t)r * cap, v,
		    attn_row_len(a, r, p0, n));
	for (; v == NULL && r + 4 <= R; r += 4)
		ops->accum_rows(attn_out(a, r, h), a->ldo, w + (size_t)r * cap,
		    cap, s->vt, n, a->head_dim, 4);
	for (; r < R; r++)
		attn_accum(a, s, ops, attn_out(a, r, h), w + (size_t)r * cap, v,
		    n);
}

/*
 * The tile's whole context fits in the score store: every score is
 * computed once and kept ([G][R][cap], positions 0..pos of row r, cap
 * the tile's context rounded up to 16 and at most score_cap), then
 * replaced by exp(s - m), then by its weight.
 */
static void
attn_stored(const struct attn_args *a, const struct attn_scratch *s,
    const struct attn_ops *ops, const struct dot_kernel *kdot)
{
	int G = a->group * a->n_kv, R = a->n_rows;
	int bt = a->block_tokens, pmax = a->pos0 + R - 1;
	int nb = pmax / bt + 1, b0 = attn_row_lo(a, 0) / bt, P0 = b0 * bt;
	size_t cap = ((size_t)pmax + 16) / 16 * 16;
	bool round_w = a->kv_type == CP_T_F16;

	if (cap > (size_t)a->score_cap)
		cap = (size_t)a->score_cap;

	for (int b = b0; b < nb; b++) {
		int p0 = b * bt, n = pmax - p0 + 1;
		int r1 = p0 > a->pos0 ? p0 - a->pos0 : 0;

		if (n > bt)
			n = bt;
		attn_block_scores(a, ops, kdot, b, n, r1, s->st + (size_t)r1 *
		    cap + (size_t)p0, (size_t)R * cap, cap);
	}
	for (int r = 0; r < R; r++) {
		for (int h = 0; h < G; h++) {
			float *sc = s->st + ((size_t)h * (size_t)R +
			    (size_t)r) * cap + (size_t)P0, mx;
			int nv = a->pos0 + r + 1 - P0;
			double lanes[8] = { 0 };

			mx = attn_scale_max(a, ops, sc, nv, P0,
			    attn_row_lo(a, r), -INFINITY);
			ops->exp_sum(sc, sc, nv, mx, lanes, P0 % 8);
			ops->weights(sc, nv, (float)(1.0 /
			    attn_lanes_sum(lanes)), round_w);
		}
	}
	for (int b = b0; b < nb; b++) {
		int p0 = b * bt, n = pmax - p0 + 1;
		int r1 = p0 > a->pos0 ? p0 - a->pos0 : 0;

		if (n > bt)
			n = bt;
		for (int g = 0; g < a->n_kv; g++) {
			const unsigned char *v = attn_v_rows(a, s, ops, b, g,
			    r1, n);

			for (int h = g * a->group; h < (g + 1) * a->group; h++)
				attn_stored_v(a, s, ops, b, h, r1, cap, v, n);
		}
	}
}

/*
 * One row and query head of one block in a walk of attn_walk3(): pass 0
 * folds the scores into the running maximum, pass 1 their exponentials
 * into the sum lanes, pass 2 the weighted V rows (attn_v_rows()'s v, or
 * vt) into the output.
 */
static void
attn_walk_row(const struct attn_args *a, const struct attn_scratch *s,
    const struct attn_ops *ops, int pass, int p0, int r, int h, float *sc,
    int nv, const unsigned char *v)
{
	int G = a->group * a->n_kv;
	float *mp = &s->m[r * G + h], mx;
	double *lp = &s->l[(size_t)(r * G + h) * 8];

	mx = attn_scale_max(a, ops, sc, nv, p0, attn_row_lo(a, r), *mp);
	if (pass == 0) {
		*mp = mx;
		return;
	}
	mx = *mp;
	if (pass == 1) {
		ops->exp_sum(sc, sc, nv, mx, lp, p0 % 8);
		return;
	}
	ops->exp_sum(s->w, sc, nv, mx, NULL, 0);
	ops->weights(s->w, nv, (float)(1.0 / attn_lanes_sum(lp)),
	    a->kv_type == CP_T_F16);
	attn_accum(a, s, ops, attn_out(a, r, h), s->w, v, nv);
}

/*
 * A longer context: three walks over the blocks, computing each block's
 * scores again in each (O(rows x block) state).
 */
static void
attn_walk3(const struct attn_args *a, const struct attn_scratch *s,
    const struct attn_ops *ops, const struct dot_kernel *kdot)
{
	int R = a->n_rows;
	int bt = a->block_tokens;
	int pmax = a->pos0 + R - 1, nb = pmax / bt + 1;
	int b0 = attn_row_lo(a, 0) / bt;

	for (int pass = 0; pass < 3; pass++) {
		for (int b = b0; b < nb; b++) {
			int p0 = b * bt, n = pmax - p0 + 1;
			/* rows before r1 sit at positions below p0 */
			int r1 = p0 > a->pos0 ? p0 - a->pos0 : 0;

			if (n > bt)
				n = bt;
			attn_block_scores(a, ops, kdot, b, n, r1, s->sc,
			    (size_t)R * (size_t)bt, (size_t)bt);
			for (int g = 0; g < a->n_kv; g++) {
				const unsigned char *v = NULL;

				if (pass == 2)
					v = attn_v_rows(a, s, ops, b, g, r1, n);
				for (int r = r1; r < R; r++)
					for (int h = g * a->group; h < (g + 1) *
					    a->group; h++)
						attn_walk_row(a, s, ops, pass,
						    p0, r, h, s->sc + ((size_t)h
						    * (size_t)R + (size_t)(r -
						    r1)) * (size_t)bt,
						    attn_row_len(a, r, p0, n),
						    v);
			}
		}
	}
}

int
attn_rows_with(const struct attn_args *a, void *scratch,
    const struct attn_ops *ops, const struct dot_kernel *kdot)
{
	struct attn_scratch s;
	int G = a->group * a->n_kv, R = a->n_rows;

	if (a->n_kv < 1 || a->group < 1 || kdot == NULL ||
	    kdot->wtype != a->kv_type ||
	    (a->kv_type != CP_T_F16 && a->kv_type != CP_T_F32))
		return -EINVAL;
	attn_carve(a, scratch, &s);
	for (int r = 0; r < R; r++) {
		for (int h = 0; h < G; h++) {
			s.m[r * G + h] = -INFINITY;
			memset(&s.l[(size_t)(r * G + h) * 8], 0,
			    8 * sizeof(double));
			memset(attn_out(a, r, h), 0,
			    (size_t)a->head_dim * sizeof(float));
		}
	}
	if (a->pos0 + R <= a->score_cap)
		attn_stored(a, &s, ops, kdot);
	else
		attn_walk3(a, &s, ops, kdot);
	return 0;
}
