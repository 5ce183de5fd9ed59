#include "forward.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "dot.h"
#include "matmul.h"
#include "quant.h"
#include "ttype.h"

#define FWD_ATT_TILE 32		/* rows of one attention task */
#define FWD_MM_SPLIT 4		/* matmul tasks per thread */
#define FWD_ALIGN 64

/* One attention task: rows [r0, r1) of batch entry `entry`, KV head g. */
struct fwd_att_task {
	int entry;
	int g;
	int r0, r1;		/* rows relative to the entry's first row */
};

/*
 * Scratch, T = max_batch_tokens rows, S = max_seqs logits rows:
 *	x	[T, n_embd]	residual stream
 *	xn	[T, n_embd]	normed input of a matrix product
 *	q	[T, n_head * head_dim]
 *	k, v	[T, n_head_kv * head_dim]
 *	att	[T, n_head * head_dim]	attention output
 *	gate, up [T, n_ff]
 *	tmp	[T, n_embd]	output of wo and w_down before the residual add
 *	rope	[T, n_rot]	cos, sin pairs of each row's position
 *	row_pos, row_entry [T]
 *	logit_rows [S]		row whose logits an entry asked for
 *	mm_scratch		activations prepared for a matrix product
 *	att_scratch [threads]	attn_rows() scratch of one task each
 */
struct fwd {
	const struct model *m;
	struct kv_cache *kv;
	unsigned char *kv_mem;
	struct fwd_params p;
	int n_threads;
	int bt;			/* tokens per KV block */
	int qd, kvd;		/* query and key/value widths */
	float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp;
	float *rope;
	int *row_pos, *row_entry, *logit_rows;
	void *mm_scratch;
	size_t mm_scratch_bytes;
	unsigned char *att_scratch;
	size_t att_scratch_bytes;	/* per thread, FWD_ALIGN multiple */
	struct fwd_att_task *tasks;
	int max_tasks;
	/* What mm_scratch holds prepared: x, weight type and rows. */
	const float *prep_x;
	uint32_t prep_type;
	int prep_m;
	/* The step being run (valid during fwd_step()). */
	const struct step_batch *b;
	int *entry_row0;	/* [max_seqs] first row of each entry */
	int layer;
};

static void *
fwd_alloc(size_t n)
{
	void *p;

	n = (n + FWD_ALIGN - 1) / FWD_ALIGN * FWD_ALIGN;
	if (n == 0)
		n = FWD_ALIGN;
	if ((p = aligned_alloc(FWD_ALIGN, n)) != NULL)
		memset(p, 0, n);
	return p;
}

static size_t
fwd_mm_need(const struct model_tensor *w, int m)
{
	return mm_scratch_bytes(w->type, w->cols, m);
}

static size_t
fwd_max(size_t a, size_t b)
{
	return a > b ? a : b;
}

int
fwd_new(const struct model *m, struct kv_cache *kv, void *kv_mem,
    const struct fwd_params *p, struct fwd **out, struct cp_err *e)
{
	const struct model_hparams *hp = &m->hp;
	const struct kv_params *kp = kv_params(kv);
	struct fwd *f;
	size_t T, S, need = 0, nt;
	int il;

	*out = NULL;
	if (p->max_batch_tokens < 1 || p->max_batch_tokens > (1 << 20))
		return cp_err_set(e, -EINVAL, "forward: max_batch_tokens %d "
		    "not in 1..%d", p->max_batch_tokens, 1 << 20);
	if (p->max_seqs < 1 || p->max_seqs > KV_MAX_SEQS)
		return cp_err_set(e, -EINVAL, "forward: max_seqs %d not in "
		    "1..%d", p->max_seqs, KV_MAX_SEQS);
	if (kp->n_layer != hp->n_layer ||
	    kp->kv_dim != hp->n_head_kv * hp->head_dim)
		return cp_err_set(e, -EINVAL, "forward: kv cache shape "
		    "(%d layers, kv_dim %d) does not fit the model (%d, %d)",
		    kp->n_layer, kp->kv_dim, hp->n_layer,
		    hp->n_head_kv * hp->head_dim);
	if (dot_kernel(kp->type) == NULL)
		return cp_err_set(e, -EINVAL, "forward: no dot kernel for a "
		    "%s kv cache", ttype_name(kp->type));
	if ((f = calloc(1, sizeof(*f))) == NULL)
		return cp_err_set(e, -ENOMEM, "forward: out of memory");
	f->m = m;
	f->kv = kv;
	f->kv_mem = kv_mem;
	f->p = *p;
	f->n_threads = p->tp != NULL ? tp_threads(p->tp) : 1;
	f->bt = kp->block_tokens;
	f->qd = hp->n_head * hp->head_dim;
	f->kvd = hp->n_head_kv * hp->head_dim;
	T = (size_t)p->max_batch_tokens;
	S = (size_t)p->max_seqs;
	nt = (size_t)f->n_threads;

	for (il = 0; il < hp->n_layer; il++) {
		const struct model_layer *l = &m->layers[il];

		need = fwd_max(need, fwd_mm_need(&l->wq, (int)T));
		need = fwd_max(need, fwd_mm_need(&l->wk, (int)T));
		need = fwd_max(need, fwd_mm_need(&l->wv, (int)T));
		need = fwd_max(need, fwd_mm_need(&l->wo, (int)T));
		need = fwd_max(need, fwd_mm_need(&l->w_gate, (int)T));
		need = fwd_max(need, fwd_mm_need(&l->w_up, (int)T));
		need = fwd_max(need, fwd_mm_need(&l->w_down, (int)T));
	}
	need = fwd_max(need, fwd_mm_need(&m->output, (int)S));
	f->mm_scratch_bytes = need;
	f->max_tasks = hp->n_head_kv *
	    (p->max_batch_tokens / FWD_ATT_TILE + p->max_seqs + 1);

	f->x = fwd_alloc(T * (size_t)hp->n_embd * sizeof(float));
	f->xn = fwd_alloc(fwd_max(T, S) * (size_t)hp->n_embd * sizeof(float));
	f->q = fwd_alloc(T * (size_t)f->qd * sizeof(float));
	f->k = fwd_alloc(T * (size_t)f->kvd * sizeof(float));
	f->v = fwd_alloc(T * (size_t)f->kvd * sizeof(float));
	f->att = fwd_alloc(T * (size_t)f->qd * sizeof(float));
	f->gate = fwd_alloc(T * (size_t)hp->n_ff * sizeof(float));
	f->up = fwd_alloc(T * (size_t)hp->n_ff * sizeof(float));
	f->tmp = fwd_alloc(T * (size_t)hp->n_embd * sizeof(float));
	f->rope = fwd_alloc(T * (size_t)(hp->n_rot ? hp->n_rot : 1) *
	    sizeof(float));
	f->row_pos = fwd_alloc(T * sizeof(int));
	f->row_entry = fwd_alloc(T * sizeof(int));
	f->logit_rows = fwd_alloc(S * sizeof(int));
	f->entry_row0 = fwd_alloc(S * sizeof(int));
	f->mm_scratch = fwd_alloc(need);
	f->att_scratch_bytes = (attn_scratch_bytes(hp->head_dim,
	    hp->n_head / hp->n_head_kv, FWD_ATT_TILE, f->bt) + FWD_ALIGN -
	    1) / FWD_ALIGN * FWD_ALIGN;
	f->att_scratch = fwd_alloc(nt * f->att_scratch_bytes);
	f->tasks = fwd_alloc((size_t)f->max_tasks * sizeof(*f->tasks));
	if (f->x == NULL || f->xn == NULL || f->q == NULL || f->k == NULL ||
	    f->v == NULL || f->att == NULL || f->gate == NULL ||
	    f->up == NULL || f->tmp == NULL || f->rope == NULL ||
	    f->row_pos == NULL || f->row_entry == NULL ||
	    f->logit_rows == NULL || f->entry_row0 == NULL ||
	    f->mm_scratch == NULL || f->att_scratch == NULL ||
	    f->tasks == NULL) {
		fwd_free(f);
		return cp_err_set(e, -ENOMEM, "forward: out of memory for "
		    "%d batch tokens", p->max_batch_tokens);
	}
	*out = f;
	return 0;
}

void
fwd_free(struct fwd *f)
{
	if (f == NULL)
		return;
	free(f->tasks);
	free(f->att_scratch);
	free(f->mm_scratch);
	free(f->entry_row0);
	free(f->logit_rows);
	free(f->row_entry);
	free(f->row_pos);
	free(f->rope);
	free(f->tmp);
	free(f->up);
	free(f->gate);
	free(f->att);
	free(f->v);
	free(f->k);
	free(f->q);
	free(f->xn);
	free(f->x);
	free(f);
}

/* ---- matrix products ------------------------------------------------- */

struct fwd_mm_job {
	struct mm_args a;
	const void *scratch;
	int chunk;
};

static void
fwd_mm_task(void *arg, int task, int thread)
{
	struct fwd_mm_job *j = arg;
	int o0 = task * j->chunk, o1 = o0 + j->chunk;

	(void)thread;
	if (o1 > j->a.n_out)
		o1 = j->a.n_out;
	mm_rows(&j->a, j->scratch, o0, o1);
}

/*
 * y[r] = w x[r] for r < m.  x must not change between calls that reuse its
 * prepared form: the preparation is skipped when x, w's type and m match
 * the previous call's (f->prep_x is reset wherever x is rewritten).
 */
static void
fwd_mm(struct fwd *f, const struct model_tensor *w, const float *x, int m,
    float *y)
{
	struct fwd_mm_job j;
	int n_tasks;

	j.a.wtype = w->type;
	j.a.w = w->data;
	j.a.w_stride = w->row_bytes;
	j.a.n_out = w->rows;
	j.a.k = w->cols;
	j.a.x = x;
	j.a.ldx = (size_t)w->cols;
	j.a.m = m;
	j.a.y = y;
	j.a.ldy = (size_t)w->rows;
	j.scratch = f->mm_scratch;
	if (f->prep_x != x || f->prep_type != w->type || f->prep_m != m) {
		mm_prepare(&j.a, f->mm_scratch);
		f->prep_x = x;
		f->prep_type = w->type;
		f->prep_m = m;
	}
	n_tasks = f->n_threads * FWD_MM_SPLIT;
	if (n_tasks > w->rows)
		n_tasks = w->rows;
	j.chunk = (w->rows + n_tasks - 1) / n_tasks;
	n_tasks = (w->rows + j.chunk - 1) / j.chunk;
	if (f->p.tp != NULL) {
		tp_run(f->p.tp, fwd_mm_task, &j, n_tasks);
	} else {
		j.chunk = w->rows;
		fwd_mm_task(&j, 0, 0);
	}
}

/* ---- element-wise pieces --------------------------------------------- */

/* out = x / sqrt(mean(x^2) + eps) * w; the sum of squares in double. */
static void
fwd_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	double ss = 0;
	float mean, scale;
	int i;

	for (i = 0; i < n; i++)
		ss += (double)(x[i] * x[i]);
	mean = (float)(ss / n);
	scale = 1.0f / sqrtf(mean + eps);
	for (i = 0; i < n; i++)
		out[i] = (x[i] * scale) * w[i];
}

/*
 * cos and sin of each rotated pair of position pos:
 * theta_i = pos * scale * base^(-2i / n_rot), the power built by repeated
 * multiplication in float.
 */
static void
fwd_rope_row(float *cs, int pos, const struct model_hparams *hp)
{
	float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
	float t = (float)pos, theta;
	int i;

	for (i = 0; i < hp->n_rot / 2; i++) {
		theta = hp->rope_scale * t;
		cs[2 * i] = cosf(theta);
		cs[2 * i + 1] = sinf(theta);
		t *= theta_scale;
	}
}

/* Rotate adjacent pairs (2i, 2i+1) of the first n_rot dims of each head. */
static void
fwd_rope_apply(float *v, int n_heads, int head_dim, int n_rot,
    const float *cs)
{
	float x0, x1, c, s;
	int h, i;

	for (h = 0; h < n_heads; h++) {
		float *p = v + (size_t)h * (size_t)head_dim;

		for (i = 0; i < n_rot / 2; i++) {
			c = cs[2 * i];
			s = cs[2 * i + 1];
			x0 = p[2 * i];
			x1 = p[2 * i + 1];
			p[2 * i] = x0 * c - x1 * s;
			p[2 * i + 1] = x0 * s + x1 * c;
		}
	}
}

/* ---- attention ------------------------------------------------------- */

/* Store rows' K and V (kvd floats each) at their positions in the cache. */
static void
fwd_kv_store(struct fwd *f, int layer)
{
	const struct step_batch *b = f->b;
	size_t es = kv_elem_bytes(f->kv), rowb = (size_t)f->kvd * es;
	uint32_t kv_type = kv_params(f->kv)->type;
	int r;

	for (r = 0; r < b->n_tokens; r++) {
		const struct batch_seq *bs = &b->seqs[f->row_entry[r]];
		const int32_t *tab = kv_seq_blocks(f->kv, bs->seq);
		int pos = f->row_pos[r];
		int blk = tab[pos / f->bt], slot = pos % f->bt;
		unsigned char *kd = f->kv_mem + kv_block_offset(f->kv, blk,
		    layer, KV_K) + (size_t)slot * rowb;
		unsigned char *vd = f->kv_mem + kv_block_offset(f->kv, blk,
		    layer, KV_V) + (size_t)slot * rowb;
		const float *ks = f->k + (size_t)r * (size_t)f->kvd;
		const float *vs = f->v + (size_t)r * (size_t)f->kvd;

		(void)quant_row(kv_type, ks, kd, (size_t)f->kvd);
		(void)quant_row(kv_type, vs, vd, (size_t)f->kvd);
	}
}

/*
 * One task: rows [r0, r1) of an entry and the query heads that share KV
 * head g, attending over the entry's cached positions (attn.h).  With an
 * F16 cache, q was rounded to F16 (as K is stored), as the reference
 * implementation rounds it.
 */
static void
fwd_att_task(void *arg, int task, int thread)
{
	struct fwd *f = arg;
	const struct model_hparams *hp = &f->m->hp;
	const struct fwd_att_task *t = &f->tasks[task];
	const struct batch_seq *bs = &f->b->seqs[t->entry];
	int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
	size_t es = kv_elem_bytes(f->kv), q0;
	struct attn_args a;

	q0 = (size_t)(f->entry_row0[t->entry] + t->r0) * (size_t)f->qd +
	    (size_t)t->g * (size_t)group * (size_t)hd;
	a.head_dim = hd;
	a.group = group;
	a.n_rows = t->r1 - t->r0;
	a.pos0 = bs->pos + t->r0;
	a.q = f->q + q0;
	a.ldq = (size_t)f->qd;
	a.out = f->att + q0;
	a.ldo = (size_t)f->qd;
	a.kv_type = kv_params(f->kv)->type;
	a.k = f->kv_mem + kv_block_offset(f->kv, 0, f->layer, KV_K) +
	    (size_t)t->g * (size_t)hd * es;
	a.v = f->kv_mem + kv_block_offset(f->kv, 0, f->layer, KV_V) +
	    (size_t)t->g * (size_t)hd * es;
	a.block_bytes = kv_block_bytes(f->kv);
	a.slot_bytes = (size_t)f->kvd * es;
	a.blocks = kv_seq_blocks(f->kv, bs->seq);
	a.block_tokens = f->bt;
	a.scale = 1.0f / sqrtf((float)hd);
	(void)attn_rows(&a, f->att_scratch + (size_t)thread *
	    f->att_scratch_bytes);
}

static void
fwd_attention(struct fwd *f, int layer)
{
	const struct step_batch *b = f->b;
	int n = 0, e, g, r0;

	f->layer = layer;
	for (e = 0; e < b->n_seqs; e++)
		for (g = 0; g < f->m->hp.n_head_kv; g++)
			for (r0 = 0; r0 < b->seqs[e].n_tokens;
			    r0 += FWD_ATT_TILE) {
				struct fwd_att_task *t = &f->tasks[n++];

				t->entry = e;
				t->g = g;
				t->r0 = r0;
				t->r1 = r0 + FWD_ATT_TILE;
				if (t->r1 > b->seqs[e].n_tokens)
					t->r1 = b->seqs[e].n_tokens;
			}
	if (f->p.tp != NULL)
		tp_run(f->p.tp, fwd_att_task, f, n);
	else
		for (e = 0; e < n; e++)
			fwd_att_task(f, e, 0);
}

/* ---- the step -------------------------------------------------------- */

static void
fwd_layer(struct fwd *f, int il)
{
	const struct model_hparams *hp = &f->m->hp;
	const struct model_layer *l = &f->m->layers[il];
	int T = f->b->n_tokens, r;
	size_t i, nf;
	bool round_q = kv_elem_bytes(f->kv) == 2;

	for (r = 0; r < T; r++)
		fwd_rmsnorm(f->xn + (size_t)r * (size_t)hp->n_embd,
		    f->x + (size_t)r * (size_t)hp->n_embd, l->attn_norm,
		    hp->n_embd, hp->rms_eps);
	f->prep_x = NULL;
	fwd_mm(f, &l->wq, f->xn, T, f->q);
	fwd_mm(f, &l->wk, f->xn, T, f->k);
	fwd_mm(f, &l->wv, f->xn, T, f->v);
	for (r = 0; r < T; r++) {
		float *q = f->q + (size_t)r * (size_t)f->qd;
		const float *cs = f->rope + (size_t)r * (size_t)hp->n_rot;

		fwd_rope_apply(q, hp->n_head, hp->head_dim, hp->n_rot, cs);
		fwd_rope_apply(f->k + (size_t)r * (size_t)f->kvd,
		    hp->n_head_kv, hp->head_dim, hp->n_rot, cs);
		/* With an F16 cache, Q meets K in F16 precision. */
		if (round_q)
			dot_round_row(CP_T_F16, q, q, f->qd);
	}
	fwd_kv_store(f, il);
	fwd_attention(f, il);
	fwd_mm(f, &l->wo, f->att, T, f->tmp);
	for (i = 0; i < (size_t)T * (size_t)hp->n_embd; i++)
		f->x[i] += f->tmp[i];

	for (r = 0; r < T; r++)
		fwd_rmsnorm(f->xn + (size_t)r * (size_t)hp->n_embd,
		    f->x + (size_t)r * (size_t)hp->n_embd, l->ffn_norm,
		    hp->n_embd, hp->rms_eps);
	f->prep_x = NULL;
	fwd_mm(f, &l->w_gate, f->xn, T, f->gate);
	fwd_mm(f, &l->w_up, f->xn, T, f->up);
	nf = (size_t)T * (size_t)hp->n_ff;
	for (i = 0; i < nf; i++) {
		float g = f->gate[i];

		f->gate[i] = g / (1.0f + expf(-g)) * f->up[i];
	}
	fwd_mm(f, &l->w_down, f->gate, T, f->tmp);
	for (i = 0; i < (size_t)T * (size_t)hp->n_embd; i++)
		f->x[i] += f->tmp[i];
}

int
fwd_step(struct fwd *f, const struct step_batch *b, float *logits)
{
	const struct model *m = f->m;
	const struct model_hparams *hp = &m->hp;
	int e, r, j, row = 0, n_out = 0, il;

	if (b->n_tokens < 1 || b->n_tokens > f->p.max_batch_tokens ||
	    b->n_seqs < 1 || b->n_seqs > f->p.max_seqs)
		return -EINVAL;
	f->b = b;
	for (e = 0; e < b->n_seqs; e++) {
		const struct batch_seq *bs = &b->seqs[e];

		if (bs->n_tokens < 1 || bs->n_tokens > b->n_tokens - row)
			return -EINVAL;
		f->entry_row0[e] = row;
		for (j = 0; j < bs->n_tokens; j++, row++) {
			f->row_pos[row] = bs->pos + j;
			f->row_entry[row] = e;
		}
		if (bs->logits)
			f->logit_rows[n_out++] = row - 1;
	}
	if (row != b->n_tokens)
		return -EINVAL;

	for (r = 0; r < b->n_tokens; r++) {
		const struct model_tensor *te = &m->tok_embd;

		if (dequant_row(te->type, (const unsigned char *)te->data +
		    (size_t)b->tokens[r] * te->row_bytes,
		    f->x + (size_t)r * (size_t)hp->n_embd,
		    (size_t)hp->n_embd) != 0)
			return -EINVAL;
		fwd_rope_row(f->rope + (size_t)r * (size_t)hp->n_rot,
		    f->row_pos[r], hp);
	}
	for (il = 0; il < hp->n_layer; il++)
		fwd_layer(f, il);
	f->b = NULL;
	if (n_out == 0)
		return 0;
	for (j = 0; j < n_out; j++)
		fwd_rmsnorm(f->xn + (size_t)j * (size_t)hp->n_embd,
		    f->x + (size_t)f->logit_rows[j] * (size_t)hp->n_embd,
		    m->out_norm, hp->n_embd, hp->rms_eps);
	f->prep_x = NULL;
	fwd_mm(f, &m->output, f->xn, n_out, logits);
	return 0;
}
