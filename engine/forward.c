#include "forward.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "dot.h"
#include "matmul.h"
#include "quant.h"
#include "repack.h"
#include "ttype.h"

#define FWD_ATT_TILE 32		/* rows of one attention task */
#define FWD_SCORE_CAP 2048	/* positions whose scores a task keeps */
#define FWD_ATT_PARTS 4		/* attention tasks a thread, at least */
#define FWD_ATT_ROW0 4		/* a tile's work: positions x (rows + this) */
#define FWD_MM_SPLIT 4		/* matmul tasks per thread */
#define FWD_MV_SPLIT 2		/* the same below FWD_ROWS_PAR rows */
#define FWD_MAX_MATS 3		/* products in one job */
#define FWD_ROWS_PAR 16		/* rows from which row-wise work is split */
#define FWD_ALIGN 64

/* One attention task: rows [r0, r1) of batch entry `entry`, KV heads g0.. */
struct fwd_att_task {
	int entry;
	int g0, g1;		/* KV heads [g0, g1) */
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
 *	rope	[n_rope][T, n_rot]	cos, sin pairs of each row's position,
 *				for each RoPE variant of the model
 *	row_pos, row_entry [T]
 *	logit_rows [S]		row whose logits an entry asked for
 *	mm_scratch		activations prepared for the products
 *				of one job: slot i at mm_slot[i], sized
 *				for the widest i-th product of any job
 *	mm_wide [threads]	mm_rows_wide() scratch of one task each
 *	att_scratch [threads]	attn_rows() scratch of one task each
 */
struct fwd {
	const struct model *m;
	const struct model_layer *layers;	/* p.layers or m's */
	const struct model_tensor *output;	/* p.output or m's */
	unsigned char *embd_row;	/* a GGUF row of the embedding when
					   it is read from the repacked output
					   (tied), else NULL */
	struct kv_cache *kv;
	unsigned char *kv_mem;
	struct fwd_params p;
	int n_threads;		/* threads in this step's jobs */
	int bt;			/* tokens per KV block */
	int qd, kvd;		/* query and key/value widths */
	float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp;
	float *rope;
	struct model_rope ropes[MODEL_ROPES];	/* for the cache's context */
	int *row_pos, *row_entry, *logit_rows;
	void *mm_scratch;
	size_t mm_slot[FWD_MAX_MATS];	/* byte offsets, FWD_ALIGN multiples */
	unsigned char *mm_wide;
	size_t mm_wide_bytes;	/* per thread, FWD_ALIGN multiple; 0: none */
	unsigned char *att_scratch;
	size_t att_scratch_bytes;	/* per thread, FWD_ALIGN multiple */
	int score_cap;		/* attn_args.score_cap of a full tile */
	struct fwd_att_task *tasks;
	int max_tasks;
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

static size_t
fwd_wide_need(const struct model_tensor *w)
{
	return mm_wide_bytes(w->type, w->cols, w->packed);
}

/*
 * The tanh GELU of every F16 value, rounded to F16: the reference
 * evaluates GELU through such a table (input rounded to F16, the result
 * read back as F16), and gemma's logits are sensitive enough to show the
 * difference from an exact GELU.
 */
static float fwd_gelu_tab[1 << 16];
static pthread_once_t fwd_gelu_once = PTHREAD_ONCE_INIT;

static void
fwd_gelu_init(void)
{
	for (uint32_t h = 0; h < (1u << 16); h++) {
		float x = fp16_to_fp32((uint16_t)h);
		float g = 0.5f * x * (1.0f + tanhf(0.797884560802865356f * x *
		    (1.0f + 0.044715f * x * x)));

		fwd_gelu_tab[h] = fp16_to_fp32(fp32_to_fp16(g));
	}
}

static inline float
fwd_gelu(float x)
{
	if (x <= -10.0f)
		return 0.0f;
	if (x >= 10.0f)
		return x;
	return fwd_gelu_tab[fp32_to_fp16(x)];
}

int
fwd_new(const struct model *m, struct kv_cache *kv, void *kv_mem,
    const struct fwd_params *p, struct fwd **out, struct cp_err *e)
{
	const struct model_hparams *hp = &m->hp;
	const struct kv_params *kp = kv_params(kv);
	struct fwd *f;
	size_t T, S, need[FWD_MAX_MATS] = { 0 }, nt;
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
	if (hp->act == ACT_GELU)
		(void)pthread_once(&fwd_gelu_once, fwd_gelu_init);
	f->m = m;
	f->layers = p->layers != NULL ? p->layers : m->layers;
	f->output = p->output != NULL ? p->output : &m->output;
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

	/* the jobs: (wq, wk, wv), (wo), (gate, up), (down), (output) */
	for (il = 0; il < hp->n_layer; il++) {
		const struct model_layer *l = &f->layers[il];
		const struct model_tensor *jobs[4][FWD_MAX_MATS] = {
			{ &l->wq, &l->wk, &l->wv }, { &l->wo },
			{ &l->w_gate, &l->w_up }, { &l->w_down } };

		for (int jb = 0; jb < 4; jb++)
			for (int i = 0; i < FWD_MAX_MATS && jobs[jb][i];
			    i++) {
				need[i] = fwd_max(need[i],
				    fwd_mm_need(jobs[jb][i], (int)T));
				f->mm_wide_bytes = fwd_max(f->mm_wide_bytes,
				    fwd_wide_need(jobs[jb][i]));
			}
	}
	need[0] = fwd_max(need[0], fwd_mm_need(f->output, (int)S));
	f->mm_wide_bytes = fwd_max(f->mm_wide_bytes,
	    fwd_wide_need(f->output));
	f->mm_wide_bytes = fwd_max(T, S) < MM_WIDE_ROWS ? 0 :
	    (f->mm_wide_bytes + FWD_ALIGN - 1) / FWD_ALIGN * FWD_ALIGN;
	for (il = 0; il < FWD_MAX_MATS; il++)
		need[il] = (need[il] + FWD_ALIGN - 1) / FWD_ALIGN * FWD_ALIGN;
	for (il = 1; il < FWD_MAX_MATS; il++)
		f->mm_slot[il] = f->mm_slot[il - 1] + need[il - 1];
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
	f->rope = fwd_alloc((size_t)hp->n_rope * T *
	    (size_t)(hp->n_rot ? hp->n_rot : 1) * sizeof(float));
	for (il = 0; il < hp->n_rope; il++)
		f->ropes[il] = model_rope_for_ctx(m, il, kp->n_ctx);
	f->row_pos = fwd_alloc(T * sizeof(int));
	f->row_entry = fwd_alloc(T * sizeof(int));
	f->logit_rows = fwd_alloc(S * sizeof(int));
	f->entry_row0 = fwd_alloc(S * sizeof(int));
	f->mm_scratch = fwd_alloc(f->mm_slot[FWD_MAX_MATS - 1] +
	    need[FWD_MAX_MATS - 1]);
	f->mm_wide = fwd_alloc(nt * f->mm_wide_bytes);
	f->score_cap = kp->n_ctx < FWD_SCORE_CAP ? kp->n_ctx : FWD_SCORE_CAP;
	f->att_scratch_bytes = (attn_scratch_bytes(hp->head_dim, hp->n_head,
	    FWD_ATT_TILE, f->bt, f->score_cap) +
	    FWD_ALIGN - 1) / FWD_ALIGN * FWD_ALIGN;
	f->att_scratch = fwd_alloc(nt * f->att_scratch_bytes);
	f->tasks = fwd_alloc((size_t)f->max_tasks * sizeof(*f->tasks));
	/* a tied embedding is read from the repacked copy, so that the
	   file's pages the copy released stay out of memory */
	if (m->tied && f->output->packed &&
	    (f->embd_row = fwd_alloc(f->output->row_bytes)) == NULL) {
		fwd_free(f);
		return cp_err_set(e, -ENOMEM, "forward: out of memory");
	}
	if (f->x == NULL || f->xn == NULL || f->q == NULL || f->k == NULL ||
	    f->v == NULL || f->att == NULL || f->gate == NULL ||
	    f->up == NULL || f->tmp == NULL || f->rope == NULL ||
	    f->row_pos == NULL || f->row_entry == NULL ||
	    f->logit_rows == NULL || f->entry_row0 == NULL ||
	    f->mm_scratch == NULL || f->mm_wide == NULL ||
	    f->att_scratch == NULL ||
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
	free(f->embd_row);
	free(f->tasks);
	free(f->att_scratch);
	free(f->mm_scratch);
	free(f->mm_wide);
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

/*
 * One parallel job of up to FWD_MAX_MATS products that read the same x
 * (q, k and v; gate and up), so a step pays one start and one wait for
 * them.  Task t computes output rows [o0, o1) of one matrix for every
 * activation row.  A gated job (SwiGLU or GeGLU) is gate (a[0]) and up
 * (a[1]) with equal shapes: each task computes both on its rows, then
 * gate = act(gate) * up on them, while they are in cache.
 */
struct fwd_mm_job {
	int n_mat;
	bool gated;		/* a[0] = act(a[0]) * a[1] */
	enum model_act act;
	struct mm_args a[FWD_MAX_MATS];
	const void *scratch[FWD_MAX_MATS];
	unsigned char *wide;	/* the fwd's mm_wide */
	size_t wide_bytes;
	int chunk[FWD_MAX_MATS];	/* output rows per task */
	int first[FWD_MAX_MATS + 1];	/* first task of each matrix */
};

/* gate[r][o] = act(gate[r][o]) * up[r][o] for r < m, o0 <= o < o1. */
static void
fwd_glu(const struct mm_args *g, const struct mm_args *u, int o0, int o1,
    enum model_act act)
{
	for (int r = 0; r < g->m; r++) {
		float *gr = g->y + (size_t)r * g->ldy;
		const float *ur = u->y + (size_t)r * u->ldy;

		if (act == ACT_GELU) {
			for (int o = o0; o < o1; o++)
				gr[o] = fwd_gelu(gr[o]) * ur[o];
			continue;
		}
		for (int o = o0; o < o1; o++) {
			float x = gr[o];

			gr[o] = x / (1.0f + expf(-x)) * ur[o];
		}
	}
}

static void
fwd_mm_task(void *arg, int task, int thread)
{
	struct fwd_mm_job *j = arg;
	int i = 0, o0, o1;
	void *wide = j->wide_bytes > 0 ? j->wide + (size_t)thread *
	    j->wide_bytes : NULL;

	while (task >= j->first[i + 1])
		i++;
	o0 = (task - j->first[i]) * j->chunk[i];
	o1 = o0 + j->chunk[i];
	if (o1 > j->a[i].n_out)
		o1 = j->a[i].n_out;
	mm_rows_wide(&j->a[i], j->scratch[i], wide, o0, o1);
	if (j->gated) {
		mm_rows_wide(&j->a[1], j->scratch[1], wide, o0, o1);
		fwd_glu(&j->a[0], &j->a[1], o0, o1, j->act);
	}
}

/* Product i of a job: y = w x[r] for r < m. */
static void
fwd_mm_add(struct fwd_mm_job *j, const struct model_tensor *w,
    const float *x, int m, float *y)
{
	struct mm_args *a = &j->a[j->n_mat++];

	a->wtype = w->type;
	a->w = w->data;
	a->w_stride = w->row_bytes;
	a->n_out = w->rows;
	a->k = w->cols;
	a->x = x;
	a->ldx = (size_t)w->cols;
	a->m = m;
	a->y = y;
	a->ldy = (size_t)w->rows;
	a->packed = w->packed;
}

/* Preparation of a job's activations: tasks of rows of each product. */
struct fwd_prep_job {
	struct fwd_mm_job *j;
	int prep[FWD_MAX_MATS];	/* products whose scratch to fill */
	int n_prep;
	int chunk;		/* rows per task */
	int tasks_per;		/* tasks per product */
};

static void
fwd_prep_task(void *arg, int task, int thread)
{
	struct fwd_prep_job *p = arg;
	const struct mm_args *a = &p->j->a[p->prep[task / p->tasks_per]];
	int r0 = task % p->tasks_per * p->chunk, r1 = r0 + p->chunk;

	(void)thread;
	if (r1 > a->m)
		r1 = a->m;
	if (r0 < r1)
		mm_prepare_rows(a, (void *)p->j->scratch[p->prep[task /
		    p->tasks_per]], r0, r1);
}

/*
 * Run job j: prepare each product's activations (once per distinct x and
 * activation format; split over the pool by rows when there are
 * FWD_ROWS_PAR rows or more), split every product's outputs into about
 * FWD_MM_SPLIT tasks per thread (FWD_MV_SPLIT with fewer rows: the
 * products then stream their weights from memory, and longer runs of
 * rows per task stream faster), run them.
 */
static void
fwd_mm_run(struct fwd *f, struct fwd_mm_job *j)
{
	int n_task_mats = j->gated ? 1 : j->n_mat, n_tasks = 0, i, k;
	struct fwd_prep_job pj = { .j = j, .n_prep = 0 };

	j->wide = f->mm_wide;
	j->wide_bytes = f->mm_wide_bytes;

	for (i = 0; i < j->n_mat; i++) {
		const struct dot_kernel *ki = dot_kernel(j->a[i].wtype);

		j->scratch[i] = NULL;
		for (k = 0; k < i; k++) {
			const struct dot_kernel *kk = dot_kernel(j->a[k].wtype);

			if (j->a[k].x == j->a[i].x &&
			    j->a[k].k == j->a[i].k && kk->xtype == ki->xtype &&
			    kk->xround == ki->xround) {
				j->scratch[i] = j->scratch[k];
				break;
			}
		}
		if (j->scratch[i] == NULL) {
			j->scratch[i] = (char *)f->mm_scratch +
			    f->mm_slot[i];
			pj.prep[pj.n_prep++] = i;
		}
	}
	pj.tasks_per = 1;
	pj.chunk = j->a[0].m;
	if (f->p.tp != NULL && j->a[0].m >= FWD_ROWS_PAR) {
		pj.tasks_per = f->n_threads * 2;
		pj.chunk = (j->a[0].m + pj.tasks_per - 1) / pj.tasks_per;
		tp_run(f->p.tp, fwd_prep_task, &pj, pj.n_prep * pj.tasks_per);
	} else {
		for (i = 0; i < pj.n_prep; i++)
			fwd_prep_task(&pj, i, 0);
	}
	for (i = 0; i < n_task_mats; i++) {
		int rows = j->a[i].n_out, nt = 1, al = mm_rows_align(&j->a[i]);

		if (j->gated && mm_rows_align(&j->a[1]) > al)
			al = mm_rows_align(&j->a[1]);
		if (f->p.tp != NULL)
			nt = f->n_threads * (j->a[0].m < FWD_ROWS_PAR ?
			    FWD_MV_SPLIT : FWD_MM_SPLIT);
		if (nt > rows)
			nt = rows;
		/* cut only where a repacked matrix's groups allow */
		j->chunk[i] = ((rows + nt - 1) / nt + al - 1) / al * al;
		j->first[i] = n_tasks;
		n_tasks += (rows + j->chunk[i] - 1) / j->chunk[i];
	}
	j->first[n_task_mats] = n_tasks;
	if (f->p.tp != NULL)
		tp_run(f->p.tp, fwd_mm_task, j, n_tasks);
	else
		for (i = 0; i < n_tasks; i++)
			fwd_mm_task(j, i, 0);
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
 * Rotate the pairs of the first n_rot dims of each head: adjacent (2i,
 * 2i+1), or with neox (i, i + n_rot/2).
 */
static void
fwd_rope_apply(float *v, int n_heads, int head_dim, int n_rot, bool neox,
    const float *cs)
{
	float x0, x1, c, s;
	int h, i, a, b;

	for (h = 0; h < n_heads; h++) {
		float *p = v + (size_t)h * (size_t)head_dim;

		for (i = 0; i < n_rot / 2; i++) {
			a = neox ? i : 2 * i;
			b = neox ? i + n_rot / 2 : 2 * i + 1;
			c = cs[2 * i];
			s = cs[2 * i + 1];
			x0 = p[a];
			x1 = p[b];
			p[a] = x0 * c - x1 * s;
			p[b] = x0 * s + x1 * c;
		}
	}
}

/* v[i] += b[i] for i < n (no-op without b). */
static void
fwd_add(float *v, const float *b, int n)
{
	if (b != NULL)
		for (int i = 0; i < n; i++)
			v[i] += b[i];
}

/* Each of the n heads of v normed with w (no-op without w). */
static void
fwd_head_norm(float *v, const float *w, int n_heads, int head_dim,
    float eps)
{
	if (w == NULL)
		return;
	for (int h = 0; h < n_heads; h++)
		fwd_rmsnorm(v + (size_t)h * (size_t)head_dim, v + (size_t)h *
		    (size_t)head_dim, w, head_dim, eps);
}

/* v[i] *= s for i < n (no-op for s = 0). */
static void
fwd_scale(float *v, float s, int n)
{
	if (s != 0.0f)
		for (int i = 0; i < n; i++)
			v[i] *= s;
}

/* v[i] = cap * tanh(v[i] / cap) for i < n (no-op for cap = 0). */
static void
fwd_softcap(float *v, float cap, int n)
{
	if (cap == 0.0f)
		return;
	for (int i = 0; i < n; i++)
		v[i] = tanhf(v[i] * (1.0f / cap)) * cap;
}

/* ---- attention ------------------------------------------------------- */

/*
 * The CPU backend's layout inside a block's K (or V) rows of one layer:
 * head-major, [head][slot][head_dim], so that attention, which walks one
 * KV head, reads each block's rows of that head as one run of bytes
 * (slot-major rows put a head's 2 lines in each slot's kv_dim and made
 * those reads the slowest of a step).  Byte offset of head g, slot s.
 */
static size_t
fwd_kv_head(const struct fwd *f, int g, int s)
{
	size_t hd = (size_t)f->m->hp.head_dim;

	return ((size_t)g * (size_t)f->bt + (size_t)s) * hd *
	    kv_elem_bytes(f->kv);
}

/*
 * One task: rows [r0, r1) of an entry and the query heads of KV heads
 * [g0, g1), attending over the entry's cached positions (attn.h).  With an
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
	    (size_t)t->g0 * (size_t)group * (size_t)hd;
	a.head_dim = hd;
	a.group = group;
	a.n_kv = t->g1 - t->g0;
	a.n_rows = t->r1 - t->r0;
	a.pos0 = bs->pos + t->r0;
	a.q = f->q + q0;
	a.ldq = (size_t)f->qd;
	a.out = f->att + q0;
	a.ldo = (size_t)f->qd;
	a.kv_type = kv_params(f->kv)->type;
	a.k = f->kv_mem + kv_block_offset(f->kv, 0, f->layer, KV_K) +
	    fwd_kv_head(f, t->g0, 0);
	a.v = f->kv_mem + kv_block_offset(f->kv, 0, f->layer, KV_V) +
	    fwd_kv_head(f, t->g0, 0);
	a.kv_head_bytes = fwd_kv_head(f, 1, 0);
	a.block_bytes = kv_block_bytes(f->kv);
	a.slot_bytes = (size_t)hd * es;
	a.blocks = kv_seq_blocks(f->kv, bs->seq);
	a.block_tokens = f->bt;
	a.scale = hp->kq_scale;
	a.window = f->m->layers[f->layer].window;
	a.softcap = hp->attn_softcap;
	/* The scratch holds FWD_ATT_TILE rows of score_cap scores for every
	 * query head: fewer rows (a decode tile has one) or heads keep that
	 * many more positions. */
	a.score_cap = f->score_cap * (FWD_ATT_TILE / a.n_rows) *
	    (hp->n_head_kv / a.n_kv);
	(void)attn_rows(&a, f->att_scratch + (size_t)thread *
	    f->att_scratch_bytes);
}

/*
 * The tasks of a layer's attention: each entry in tiles of FWD_ATT_TILE
 * rows, each tile's KV heads in parts.  A part walks its heads block by
 * block (attn.h), so the fewer parts the longer its runs of KV bytes; a
 * tile is cut into as many parts as its share of the layer's work asks
 * for, at least FWD_ATT_PARTS tasks a thread in all.  A tile's work is
 * taken as its positions times (rows + FWD_ATT_ROW0): a decode row streams
 * its positions from memory, which costs about what a few more rows of
 * arithmetic do.  Tiles of many rows first, so the largest tasks start
 * first.
 */
/* End row (exclusive) of the tile at r0 of entry bs, and its work. */
static double
fwd_att_tile(const struct batch_seq *bs, int r0, int *r1)
{
	*r1 = r0 + FWD_ATT_TILE < bs->n_tokens ? r0 + FWD_ATT_TILE :
	    bs->n_tokens;
	return (double)(bs->pos + *r1) * (*r1 - r0 + FWD_ATT_ROW0);
}

static int
fwd_att_tasks(struct fwd *f)
{
	const struct step_batch *b = f->b;
	int nkv = f->m->hp.n_head_kv, n = 0, r1;
	double total = 0, part;

	for (int e = 0; e < b->n_seqs; e++)
		for (int r0 = 0; r0 < b->seqs[e].n_tokens; r0 += FWD_ATT_TILE)
			total += fwd_att_tile(&b->seqs[e], r0, &r1);
	part = total / (FWD_ATT_PARTS * f->n_threads);
	for (int big = 1; big >= 0; big--)
		for (int e = 0; e < b->n_seqs; e++)
			for (int r0 = 0; r0 < b->seqs[e].n_tokens;
			    r0 += FWD_ATT_TILE) {
				double w = fwd_att_tile(&b->seqs[e], r0, &r1);
				int parts, g = 0;

				if ((r1 - r0 > 1) != big)
					continue;
				parts = part > 0 ? (int)(w / part + 0.999) : 1;
				parts = parts < 1 ? 1 : parts > nkv ? nkv :
				    parts;
				for (int i = 0; i < parts; i++) {
					struct fwd_att_task *t = &f->tasks[n++];

					t->entry = e;
					t->r0 = r0;
					t->r1 = r1;
					t->g0 = g;
					g = nkv * (i + 1) / parts;
					t->g1 = g;
				}
			}
	return n;
}

static void
fwd_attention(struct fwd *f, int layer)
{
	int n = fwd_att_tasks(f);

	f->layer = layer;
	if (f->p.tp != NULL)
		tp_run(f->p.tp, fwd_att_task, f, n);
	else
		for (int e = 0; e < n; e++)
			fwd_att_task(f, e, 0);
}

/* ---- the step -------------------------------------------------------- */

/*
 * Row-wise work between the products, split into tasks of rows when a
 * step has FWD_ROWS_PAR rows or more (a decode step does it inline).
 */
typedef void fwd_row_fn(struct fwd *f, int r);

struct fwd_rows_job {
	struct fwd *f;
	fwd_row_fn *fn;
	int n, chunk;
};

static void
fwd_rows_task(void *arg, int task, int thread)
{
	struct fwd_rows_job *j = arg;
	int r1 = (task + 1) * j->chunk;

	(void)thread;
	for (int r = task * j->chunk; r < r1 && r < j->n; r++)
		j->fn(j->f, r);
}

static void
fwd_rows(struct fwd *f, fwd_row_fn *fn, int n)
{
	struct fwd_rows_job j = { f, fn, n, n };
	int nt = f->n_threads * 2;

	if (f->p.tp == NULL || n < FWD_ROWS_PAR) {
		fwd_rows_task(&j, 0, 0);
		return;
	}
	j.chunk = (n + nt - 1) / nt;
	tp_run(f->p.tp, fwd_rows_task, &j, (n + j.chunk - 1) / j.chunk);
}

/*
 * x[r] += tmp[r], the previous product's output, normed first with post
 * where the layer has such a norm (gemma2, gemma3).
 */
static void
fwd_row_residual(struct fwd *f, int r, const float *post)
{
	const struct model_hparams *hp = &f->m->hp;
	size_t ne = (size_t)hp->n_embd;
	float *x = f->x + (size_t)r * ne;
	float *t = f->tmp + (size_t)r * ne;

	if (post != NULL)
		fwd_rmsnorm(t, t, post, hp->n_embd, hp->rms_eps);
	for (size_t i = 0; i < ne; i++)
		x[i] += t[i];
}

/*
 * The residual (the previous layer's last product; none before layer 0),
 * then xn[r] = the attention norm of x[r].
 */
static void
fwd_row_attn_norm(struct fwd *f, int r)
{
	const struct model_hparams *hp = &f->m->hp;
	size_t ne = (size_t)hp->n_embd;

	if (f->layer > 0)
		fwd_row_residual(f, r,
		    f->m->layers[f->layer - 1].post_ffn_norm);
	fwd_rmsnorm(f->xn + (size_t)r * ne, f->x + (size_t)r * ne,
	    f->m->layers[f->layer].attn_norm, hp->n_embd, hp->rms_eps);
}

/* The residual, then xn[r] = the feed-forward norm of x[r]. */
static void
fwd_row_ffn_norm(struct fwd *f, int r)
{
	const struct model_hparams *hp = &f->m->hp;
	const struct model_layer *l = &f->m->layers[f->layer];
	size_t ne = (size_t)hp->n_embd;

	fwd_row_residual(f, r, l->post_attn_norm);
	fwd_rmsnorm(f->xn + (size_t)r * ne, f->x + (size_t)r * ne,
	    l->ffn_norm, hp->n_embd, hp->rms_eps);
}

/*
 * Row r's q, k and v as the layer asks: biases added, q and k normed per
 * head, RoPE on q and k, q scaled; with an F16 cache q is rounded to F16
 * (it meets K in F16 precision); then k and v go into the cache at the
 * row's position.
 */
static void
fwd_row_rope_store(struct fwd *f, int r)
{
	const struct model_hparams *hp = &f->m->hp;
	const struct batch_seq *bs = &f->b->seqs[f->row_entry[r]];
	uint32_t kv_type = kv_params(f->kv)->type;
	size_t es = kv_elem_bytes(f->kv), hd = (size_t)hp->head_dim;
	const struct model_layer *l = &f->m->layers[f->layer];
	float *q = f->q + (size_t)r * (size_t)f->qd;
	float *k = f->k + (size_t)r * (size_t)f->kvd;
	float *v = f->v + (size_t)r * (size_t)f->kvd;
	const float *cs = f->rope + ((size_t)l->rope * (size_t)f->p.
	    max_batch_tokens + (size_t)r) * (size_t)hp->n_rot;
	int pos = f->row_pos[r];
	int blk = kv_seq_blocks(f->kv, bs->seq)[pos / f->bt];
	unsigned char *kb = f->kv_mem + kv_block_offset(f->kv, blk, f->layer,
	    KV_K);
	unsigned char *vb = f->kv_mem + kv_block_offset(f->kv, blk, f->layer,
	    KV_V);

	fwd_add(q, l->bq, f->qd);
	fwd_add(k, l->bk, f->kvd);
	fwd_add(v, l->bv, f->kvd);
	fwd_head_norm(q, l->q_norm, hp->n_head, hp->head_dim, hp->rms_eps);
	fwd_head_norm(k, l->k_norm, hp->n_head_kv, hp->head_dim, hp->rms_eps);
	fwd_rope_apply(q, hp->n_head, hp->head_dim, hp->n_rot, hp->rope_neox,
	    cs);
	fwd_rope_apply(k, hp->n_head_kv, hp->head_dim, hp->n_rot,
	    hp->rope_neox, cs);
	fwd_scale(q, hp->q_scale, f->qd);
	if (es == 2)
		dot_round_row(CP_T_F16, q, q, f->qd);
	for (int g = 0; g < hp->n_head_kv; g++) {
		size_t at = fwd_kv_head(f, g, pos % f->bt);

		(void)quant_row(kv_type, k + (size_t)g * hd, kb + at, hd);
		(void)quant_row(kv_type, v + (size_t)g * hd, vb + at, hd);
	}
}

/*
 * Layer il.  On entry x holds the residual stream less tmp, the previous
 * layer's last product (added while normalizing), from layer 1 on; on
 * return the same holds for this layer's.
 */
static void
fwd_layer(struct fwd *f, int il)
{
	const struct model_layer *l = &f->layers[il];
	int T = f->b->n_tokens;
	struct fwd_mm_job j;

	f->layer = il;
	fwd_rows(f, fwd_row_attn_norm, T);
	j.n_mat = 0;
	j.gated = false;
	fwd_mm_add(&j, &l->wq, f->xn, T, f->q);
	fwd_mm_add(&j, &l->wk, f->xn, T, f->k);
	fwd_mm_add(&j, &l->wv, f->xn, T, f->v);
	fwd_mm_run(f, &j);
	fwd_rows(f, fwd_row_rope_store, T);
	fwd_attention(f, il);
	j.n_mat = 0;
	fwd_mm_add(&j, &l->wo, f->att, T, f->tmp);
	fwd_mm_run(f, &j);
	fwd_rows(f, fwd_row_ffn_norm, T);
	j.n_mat = 0;
	j.gated = true;
	j.act = f->m->hp.act;
	fwd_mm_add(&j, &l->w_gate, f->xn, T, f->gate);
	fwd_mm_add(&j, &l->w_up, f->xn, T, f->up);
	fwd_mm_run(f, &j);
	j.n_mat = 0;
	j.gated = false;
	fwd_mm_add(&j, &l->w_down, f->gate, T, f->tmp);
	fwd_mm_run(f, &j);
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
	/* Tasks are split for the threads taking part now (tp_set_active). */
	if (f->p.tp != NULL)
		f->n_threads = tp_active(f->p.tp);
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
		const unsigned char *erow = (const unsigned char *)te->data +
		    (size_t)b->tokens[r] * te->row_bytes;
		float *x = f->x + (size_t)r * (size_t)hp->n_embd;

		if (f->embd_row != NULL) {
			repack_row_unpack(te->type, f->output->data,
			    b->tokens[r], hp->n_embd, f->embd_row);
			erow = f->embd_row;
		}
		if (dequant_row(te->type, erow, x, (size_t)hp->n_embd) != 0)
			return -EINVAL;
		if (hp->embd_scale != 1.0f)
			fwd_scale(x, hp->embd_scale, hp->n_embd);
		for (j = 0; j < hp->n_rope; j++)
			model_rope_cs(f->rope + ((size_t)j *
			    (size_t)f->p.max_batch_tokens + (size_t)r) *
			    (size_t)hp->n_rot, f->row_pos[r], &f->ropes[j],
			    hp->n_rot);
	}
	for (il = 0; il < hp->n_layer; il++)
		fwd_layer(f, il);
	/* only the rows that give logits need the last residual */
	for (j = 0; j < n_out; j++) {
		fwd_row_residual(f, f->logit_rows[j],
		    m->layers[hp->n_layer - 1].post_ffn_norm);
		fwd_rmsnorm(f->xn + (size_t)j * (size_t)hp->n_embd,
		    f->x + (size_t)f->logit_rows[j] * (size_t)hp->n_embd,
		    m->out_norm, hp->n_embd, hp->rms_eps);
	}
	f->b = NULL;
	if (n_out > 0) {
		struct fwd_mm_job mj = { .n_mat = 0, .gated = false };

		fwd_mm_add(&mj, f->output, f->xn, n_out, logits);
		fwd_mm_run(f, &mj);
		fwd_softcap(logits, hp->final_softcap, n_out * hp->n_vocab);
	}
	return 0;
}
