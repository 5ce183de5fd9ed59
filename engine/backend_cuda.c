/*
 * backend_cuda.c - the CUDA backend: weights uploaded once at init, the
 * paged KV cache and all scratch in device memory, a step enqueued on one
 * stream and collected in step_wait.  The device work lives in
 * kernels/cuda (cuda_ops.h); this file plans memory, uploads the weights
 * and orders the kernels of a step.  It is compiled only when nvcc is
 * present and includes no CUDA header.
 *
 * Weights on the device.  A matrix keeps its file's float type (F32, F16,
 * BF16 bit for bit); every quantized type is dequantized at load, on the
 * host with dequant_row() (so bit-exact with the CPU backend's reading of
 * the blocks), and stored as F16, or as BF16 when one of its values is
 * beyond the F16 range.  Rows are padded to a multiple of CU_LD_ALIGN
 * elements.  Memory cost: 2 bytes per weight for quantized files, i.e.
 * about 3.6x the file's bytes for Q4_0, 1.9x for Q8_0, 1x for F16 and
 * BF16; F32 files take their own size.  The products go through cuBLAS
 * with F32 accumulation (gemm.cu); quantized files thus run as "dequantize,
 * multiply in F16", which moves logits by about the tolerances that
 * synth/README.md measures for that ("B"), since the CPU backend quantizes
 * activations to 8 bits instead.
 *
 * A step: token ids, positions and block tables are packed into one
 * page-locked buffer and copied in; the embedding, the layers and the
 * logits run as kernels and cuBLAS calls on the stream; the requested
 * logits are copied out into page-locked memory.  Nothing synchronizes
 * until step_wait.  Batch invariance holds kernel by kernel: per-row
 * kernels use one block per row, matrix products are cuBLAS calls of one
 * fixed shape per weight (gemm.cu), and attention walks positions in a
 * fixed order (attention.cu).
 *
 * Errors: every CUDA call is checked (logged with file:line by the
 * kernels' wrappers).  A failed step fails only its own requests (the
 * caller gets -EIO); when the device itself is left in an error state
 * (a kernel fault is sticky), every later step fails with -EIO too, and
 * the backend has to be closed and opened again.
 */
#include "backend.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "cuda_probe.h"
#include "quant.h"
#include "threadpool.h"
#include "ttype.h"

#define CUDA_DEV 0			/* the first visible device */
#define CUDA_ALIGN 256			/* device sub-buffer alignment */
#define CUDA_GEMM_WS (32u << 20)	/* cuBLAS workspace bytes */
#define CUDA_STAGE_BYTES (32u << 20)	/* pinned staging for uploads */
#define CUDA_PROGRESS_MIN (256u << 20)	/* log upload progress above this */

struct be_buf {
	void *d;		/* device memory */
	size_t size;
};

/*
 * A weight matrix on the device: rows x ld elements of dt, row-major,
 * columns [cols, ld) zero; it starts off bytes into the weight arena.
 */
struct cuda_mat {
	void *d;
	size_t off;
	enum cu_dtype dt;
	int rows, cols, ld;
};

/* A layer on the device; the optional vectors are NULL as in the model. */
struct cuda_layer {
	float *attn_norm;		/* [n_embd] */
	float *ffn_norm;		/* [n_embd] */
	float *bq, *bk, *bv;		/* [qd], [kvd], [kvd] */
	float *q_norm, *k_norm;		/* [head_dim] */
	float *post_attn_norm;		/* [n_embd] */
	float *post_ffn_norm;		/* [n_embd] */
	struct cuda_mat wq;		/* [n_head * head_dim, n_embd] */
	struct cuda_mat wk, wv;		/* [n_head_kv * head_dim, n_embd] */
	struct cuda_mat wo;		/* [n_embd, n_head * head_dim] */
	struct cuda_mat w_gate, w_up;	/* [n_ff, n_embd] */
	struct cuda_mat w_down;		/* [n_embd, n_ff] */
};

/*
 * The layer's matrices, each once: the model's and the device's member,
 * for the plan, the upload and the widest product input.
 */
#define CUDA_N_MATS 7
static const struct {
	size_t host, dev;
} cuda_mats[CUDA_N_MATS] = {
#define CUDA_MAT(f) { offsetof(struct model_layer, f), \
	offsetof(struct cuda_layer, f) }
	CUDA_MAT(wq), CUDA_MAT(wk), CUDA_MAT(wv), CUDA_MAT(wo),
	CUDA_MAT(w_gate), CUDA_MAT(w_up), CUDA_MAT(w_down),
#undef CUDA_MAT
};

/* Matrix i of cuda_mats in the model's layer l and in the device's cl. */
static const struct model_tensor *
cuda_host_mat(const struct model_layer *l, int i)
{
	return (const struct model_tensor *)(const void *)
	    ((const char *)l + cuda_mats[i].host);
}

static struct cuda_mat *
cuda_dev_mat(struct cuda_layer *cl, int i)
{
	return (struct cuda_mat *)(void *)((char *)cl + cuda_mats[i].dev);
}

/*
 * Step metadata, int32, in page-locked memory (h_meta) and on the device
 * (d_meta) at the same offsets, tc = max_batch_tokens and sc = max_seqs
 * each rounded up to 4:
 *	tokens	[tc]	token ids of the rows
 *	pos	[tc]	position of each row
 *	blk	[tc]	where the row's block table starts in blocks
 *	lrows	[sc]	rows whose logits are asked for, in entry order
 *	blocks	[blocks_cap]	block tables of the entries, concatenated
 *
 * Device scratch, T = max_batch_tokens, S = max_seqs, Tp and Sp rounded up
 * to CU_GEMM_ROWS (outputs of matrix products):
 *	x	[T, n_embd]		residual stream
 *	xn	[max(T, S), n_embd]	normed rows
 *	xh	[max(Tp, Sp), ld_max]	input of a product, in its type
 *	q	[Tp, n_head * head_dim]
 *	k, v	[Tp, n_head_kv * head_dim]
 *	att	[T, n_head * head_dim]	attention output
 *	gate, up [Tp, n_ff]
 *	tmp	[Tp, n_embd]		output of wo and w_down
 *	logits	[Sp, n_vocab]
 *	rope	[n_rope][n_ctx, n_rot]	cos, sin of every position's pairs,
 *					for each RoPE variant
 */
struct cuda_ctx {
	struct cu_stream *st;
	struct cu_gemm *gemm;
	struct threadpool *tp;		/* during the upload only */
	void *arena;			/* weights and norms */
	size_t arena_bytes;
	void *scratch;
	size_t scratch_bytes;
	struct cuda_mat tok_embd, output;
	float *out_norm;
	struct cuda_layer *layers;	/* [n_layer] */
	float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp, *logits, *rope;
	void *xh;
	int32_t *d_meta, *h_meta;
	size_t meta_ints;
	int tc, sc, blocks_cap;
	float *h_logits;		/* [S, n_vocab], page-locked */
	struct cu_kv kv;		/* the cache; k_off, v_off per layer */
	float att_scale;
	bool round_q;			/* F16 cache: Q meets K in F16 */
	/* What xh holds: the conversion of prep_x for a product. */
	const float *prep_x;
	enum cu_dtype prep_dt;
	int prep_m, prep_ld;
	bool broken;			/* the device is in an error state */
};

static void
cuda_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
cuda_log(const char *fmt, ...)
{
	va_list ap;

	/* "cpd: cuda: ...": the program's name first, as its own lines */
	fprintf(stderr, "%s: cuda: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double
cuda_mib(size_t n)
{
	return (double)n / (1024.0 * 1024.0);
}

static size_t
cuda_round(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/* ---- buffers ---------------------------------------------------------- */

static int
cuda_buf_alloc(struct backend *be, size_t size, struct be_buf **out)
{
	struct be_buf *b;
	int rc;

	(void)be;
	*out = NULL;
	if ((b = calloc(1, sizeof(*b))) == NULL)
		return -ENOMEM;
	if ((rc = cu_set_device(CUDA_DEV)) < 0 ||
	    (rc = cu_malloc(size, &b->d)) < 0) {
		free(b);
		return rc;
	}
	if ((rc = cu_memset_sync(b->d, 0, size)) < 0) {
		cu_free(b->d);
		free(b);
		return rc;
	}
	b->size = size;
	*out = b;
	return 0;
}

static void
cuda_buf_free(struct backend *be, struct be_buf *b)
{
	(void)be;
	if (b == NULL)
		return;
	(void)cu_set_device(CUDA_DEV);
	cu_free(b->d);
	free(b);
}

static int
cuda_buf_set(struct backend *be, struct be_buf *b, size_t off,
    const void *src, size_t n)
{
	int rc;

	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	if (n == 0)
		return 0;
	if ((rc = cu_set_device(CUDA_DEV)) < 0)
		return rc;
	return cu_memcpy_htod_sync((char *)b->d + off, src, n);
}

static int
cuda_buf_get(struct backend *be, const struct be_buf *b, size_t off,
    void *dst, size_t n)
{
	int rc;

	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	if (n == 0)
		return 0;
	if ((rc = cu_set_device(CUDA_DEV)) < 0)
		return rc;
	return cu_memcpy_dtoh_sync(dst, (const char *)b->d + off, n);
}

/* ---- probe ------------------------------------------------------------ */

/*
 * Usable: the runtime finds a device and a kernel of this build runs on
 * it.  Without a driver or a device this fails quietly with the runtime's
 * reason; with e NULL ("auto" asking) the reason is logged.
 */
static int
cuda_probe(struct cp_err *e)
{
	char why[256] = "";

	if (cuda_probe_count(why, sizeof(why)) < 1) {
		if (e == NULL)
			cuda_log("no usable device (%s); trying the next "
			    "backend", why);
		return cp_err_set(e, -ENODEV, "cuda backend: no usable "
		    "device: %s", why);
	}
	if (cuda_probe_selftest(CUDA_DEV) != 0) {
		if (e == NULL)
			cuda_log("device %d failed the self-test (no kernel "
			    "for its architecture?); trying the next backend",
			    CUDA_DEV);
		return cp_err_set(e, -ENODEV, "cuda backend: device %d "
		    "cannot run this build's kernels (built for sm_80 and "
		    "newer)", CUDA_DEV);
	}
	return 0;
}

/*
 * Every family's layer runs here; attention keeps a query head in shared
 * memory, up to CU_ATT_MAX_HEAD_DIM values.  With e NULL ("auto" asking)
 * the reason is logged.
 */
static int
cuda_supports(const struct model *m, struct cp_err *e)
{
	if (m->hp.head_dim <= CU_ATT_MAX_HEAD_DIM)
		return 0;
	if (e == NULL)
		cuda_log("head size %d is above this backend's %d; trying the "
		    "next backend", m->hp.head_dim, CU_ATT_MAX_HEAD_DIM);
	return cp_err_set(e, -ENOTSUP, "cuda backend: head size %d is above "
	    "its %d", m->hp.head_dim, CU_ATT_MAX_HEAD_DIM);
}

/* ---- memory plan ------------------------------------------------------ */

/* A quantized matrix becomes F16 (BF16 if it overflows, see upload). */
static enum cu_dtype
cuda_mat_type(uint32_t t)
{
	if (t == CP_T_F32)
		return CU_F32;
	if (t == CP_T_BF16)
		return CU_BF16;
	return CU_F16;
}

static size_t
cuda_mat_bytes(const struct cuda_mat *mt)
{
	return (size_t)mt->rows * (size_t)mt->ld * cu_dtype_size(mt->dt);
}

/* Give mt its shape and type and the next place in the arena. */
static void
cuda_mat_plan(struct cuda_mat *mt, const struct model_tensor *t,
    size_t *arena)
{
	memset(mt, 0, sizeof(*mt));
	mt->dt = cuda_mat_type(t->type);
	mt->rows = t->rows;
	mt->cols = t->cols;
	mt->ld = (int)cuda_round((size_t)t->cols, CU_LD_ALIGN);
	mt->off = *arena;
	*arena += cuda_round(cuda_mat_bytes(mt), CUDA_ALIGN);
}

/* The next place of n bytes in a buffer being laid out. */
static size_t
cuda_carve(size_t *used, size_t n)
{
	size_t off = *used;

	*used += cuda_round(n ? n : 1, CUDA_ALIGN);
	return off;
}

struct cuda_plan {
	size_t vec_off;		/* the model's F32 vectors (n_vec_floats) */
	size_t x, xn, xh, q, k, v, att, gate, up, tmp, logits, meta, rope;
};

static void
cuda_plan(struct backend *be, struct cuda_plan *pl)
{
	struct cuda_ctx *c = be->ctx;
	const struct model *m = be->model;
	const struct model_hparams *hp = &m->hp;
	const struct be_params *p = &be->params;
	size_t T = (size_t)p->max_batch_tokens, S = (size_t)p->max_seqs;
	size_t Tp = cuda_round(T, CU_GEMM_ROWS), Sp = cuda_round(S, CU_GEMM_ROWS);
	size_t D = (size_t)hp->n_embd, V = (size_t)hp->n_vocab;
	size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim;
	size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
	size_t F = (size_t)hp->n_ff, arena = 0, used = 0, xh_ld = 0, es = 2;
	size_t per_seq, cap;
	int il, i;

	memset(pl, 0, sizeof(*pl));
	cuda_mat_plan(&c->tok_embd, &m->tok_embd, &arena);
	if (m->tied || m->output.data == m->tok_embd.data)
		c->output = c->tok_embd;
	else
		cuda_mat_plan(&c->output, &m->output, &arena);
	for (il = 0; il < hp->n_layer; il++) {
		const struct model_layer *l = &m->layers[il];
		struct cuda_layer *cl = &c->layers[il];

		for (i = 0; i < CUDA_N_MATS; i++) {
			struct cuda_mat *mt = cuda_dev_mat(cl, i);

			cuda_mat_plan(mt, cuda_host_mat(l, i), &arena);
			if ((size_t)mt->ld > xh_ld)
				xh_ld = (size_t)mt->ld;
			if (mt->dt == CU_F32)
				es = 4;
		}
	}
	if ((size_t)c->output.ld > xh_ld)
		xh_ld = (size_t)c->output.ld;
	if (c->output.dt == CU_F32)
		es = 4;
	pl->vec_off = arena;
	arena += cuda_round(m->n_vec_floats * sizeof(float), CUDA_ALIGN);
	c->arena_bytes = arena;

	c->tc = (int)cuda_round(T, 4);
	c->sc = (int)cuda_round(S, 4);
	per_seq = ((size_t)p->n_ctx + (size_t)p->block_tokens - 1) /
	    (size_t)p->block_tokens;
	cap = (size_t)kv_blocks_total(be->kv);
	if (per_seq * S < cap)
		cap = per_seq * S;
	c->blocks_cap = (int)cap;
	c->meta_ints = 3 * (size_t)c->tc + (size_t)c->sc + cap;

	pl->x = cuda_carve(&used, T * D * 4);
	pl->xn = cuda_carve(&used, (T > S ? T : S) * D * 4);
	pl->xh = cuda_carve(&used, (Tp > Sp ? Tp : Sp) * xh_ld * es);
	pl->q = cuda_carve(&used, Tp * qd * 4);
	pl->k = cuda_carve(&used, Tp * kvd * 4);
	pl->v = cuda_carve(&used, Tp * kvd * 4);
	pl->att = cuda_carve(&used, T * qd * 4);
	pl->gate = cuda_carve(&used, Tp * F * 4);
	pl->up = cuda_carve(&used, Tp * F * 4);
	pl->tmp = cuda_carve(&used, Tp * D * 4);
	pl->logits = cuda_carve(&used, Sp * V * 4);
	pl->meta = cuda_carve(&used, c->meta_ints * 4);
	pl->rope = cuda_carve(&used, (size_t)hp->n_rope * (size_t)p->n_ctx *
	    (size_t)hp->n_rot * 4);
	c->scratch_bytes = used;
}

/* Fail with how much the plan needs and what the device has free. */
static int
cuda_check_fit(struct backend *be, struct cp_err *e)
{
	struct cuda_ctx *c = be->ctx;
	size_t free_b, total_b, need;
	int rc;

	if ((rc = cu_mem_info(&free_b, &total_b)) < 0)
		return cp_err_set(e, rc, "cuda backend: cannot read the "
		    "device's free memory");
	need = c->arena_bytes + c->scratch_bytes + CUDA_GEMM_WS;
	if (need > free_b)
		return cp_err_set(e, -ENOMEM, "cuda backend: out of device "
		    "memory: the model needs %.1f MiB (weights %.1f, scratch "
		    "%.1f for %d batch tokens, cuBLAS %.1f) besides the %.1f "
		    "MiB KV cache, and the device has %.1f MiB free of %.1f",
		    cuda_mib(need), cuda_mib(c->arena_bytes),
		    cuda_mib(c->scratch_bytes), be->params.max_batch_tokens,
		    cuda_mib(CUDA_GEMM_WS), cuda_mib(kv_storage_bytes(be->kv)),
		    cuda_mib(free_b), cuda_mib(total_b));
	return 0;
}

/* ---- weight upload ---------------------------------------------------- */

/* One chunk of rows converted on the host by the thread pool. */
struct cuda_up {
	const struct model_tensor *t;
	const struct cuda_mat *mt;
	unsigned char *stage;		/* rows [r0, r0 + n) of mt, packed */
	float *rowbuf;			/* [threads][cols] */
	int r0, n, per_task;
	int bad[TP_MAX_THREADS];	/* per task: 1 overflow, -1 error */
};

/*
 * Row r of t into dst as mt stores it.  Returns 0, 1 when a finite value
 * does not fit F16, or -EINVAL when the row cannot be read.
 */
static int
cuda_row_convert(const struct model_tensor *t, int r,
    const struct cuda_mat *mt, void *dst, float *tmp)
{
	const unsigned char *src = (const unsigned char *)t->data +
	    (size_t)r * t->row_bytes;
	size_t cols = (size_t)t->cols, ld = (size_t)mt->ld, i;
	uint16_t *h = dst;
	int over = 0;

	if (mt->dt == CU_F32) {
		if (dequant_row(t->type, src, dst, cols) != 0)
			return -EINVAL;
		memset((float *)dst + cols, 0, (ld - cols) * sizeof(float));
		return 0;
	}
	memset(h + cols, 0, (ld - cols) * sizeof(uint16_t));
	if ((mt->dt == CU_F16 && t->type == CP_T_F16) ||
	    (mt->dt == CU_BF16 && t->type == CP_T_BF16)) {
		memcpy(h, src, cols * sizeof(uint16_t));
		return 0;
	}
	if (dequant_row(t->type, src, tmp, cols) != 0)
		return -EINVAL;
	if (mt->dt == CU_BF16) {
		for (i = 0; i < cols; i++)
			h[i] = fp32_to_bf16(tmp[i]);
		return 0;
	}
	for (i = 0; i < cols; i++) {
		h[i] = fp32_to_fp16(tmp[i]);
		if ((h[i] & 0x7fff) == 0x7c00 && isfinite(tmp[i]))
			over = 1;
	}
	return over;
}

static void
cuda_up_task(void *arg, int task, int thread)
{
	struct cuda_up *u = arg;
	size_t row_bytes = (size_t)u->mt->ld * cu_dtype_size(u->mt->dt);
	float *tmp = u->rowbuf + (size_t)thread * (size_t)u->mt->cols;
	int i0 = task * u->per_task, i1 = i0 + u->per_task, i, rc;

	u->bad[task] = 0;
	if (i1 > u->n)
		i1 = u->n;
	for (i = i0; i < i1; i++) {
		rc = cuda_row_convert(u->t, u->r0 + i, u->mt,
		    u->stage + (size_t)i * row_bytes, tmp);
		if (rc < 0) {
			u->bad[task] = -1;
			return;
		}
		if (rc > 0)
			u->bad[task] = 1;
	}
}

struct cuda_upload {
	unsigned char *stage;		/* CUDA_STAGE_BYTES, page-locked */
	float *rowbuf;
	size_t done, total, next_log;	/* bytes, for progress */
};

/*
 * Convert tensor t into mt's place in the arena, through the staging
 * buffer, a chunk of rows at a time.  A quantized tensor that overflows
 * F16 is redone as BF16 (mt->dt changes).
 */
static int
cuda_upload_mat(struct backend *be, struct cuda_upload *up,
    const struct model_tensor *t, struct cuda_mat *mt, struct cp_err *e)
{
	struct cuda_ctx *c = be->ctx;
	struct cuda_up u;
	size_t row_bytes, chunk;
	int n_threads = tp_threads(c->tp), n_tasks, i, rc, over;

again:
	row_bytes = (size_t)mt->ld * cu_dtype_size(mt->dt);
	chunk = CUDA_STAGE_BYTES / row_bytes;
	mt->d = (char *)c->arena + mt->off;
	over = 0;
	memset(&u, 0, sizeof(u));
	u.t = t;
	u.mt = mt;
	u.stage = up->stage;
	u.rowbuf = up->rowbuf;
	for (u.r0 = 0; u.r0 < mt->rows; u.r0 += u.n) {
		u.n = mt->rows - u.r0;
		if ((size_t)u.n > chunk)
			u.n = (int)chunk;
		n_tasks = n_threads < u.n ? n_threads : u.n;
		u.per_task = (u.n + n_tasks - 1) / n_tasks;
		n_tasks = (u.n + u.per_task - 1) / u.per_task;
		tp_run(c->tp, cuda_up_task, &u, n_tasks);
		for (i = 0; i < n_tasks; i++) {
			if (u.bad[i] < 0)
				return cp_err_set(e, -EINVAL, "cuda backend: "
				    "cannot convert tensor '%s' (%s) rows "
				    "%d..%d", t->name, ttype_name(t->type),
				    u.r0, u.r0 + u.n - 1);
			if (u.bad[i] > 0)
				over = 1;
		}
		if (over && mt->dt == CU_F16)
			break;
		if ((rc = cu_memcpy_htod(c->st, (char *)mt->d +
		    (size_t)u.r0 * row_bytes, up->stage,
		    (size_t)u.n * row_bytes)) < 0 ||
		    (rc = cu_stream_sync(c->st)) < 0)
			return cp_err_set(e, rc, "cuda backend: upload of "
			    "tensor '%s' failed", t->name);
		up->done += (size_t)u.n * row_bytes;
		if (up->total >= CUDA_PROGRESS_MIN && up->done >= up->next_log) {
			cuda_log("weights %3.0f%% (%.0f of %.0f MiB)",
			    100.0 * (double)up->done / (double)up->total,
			    cuda_mib(up->done), cuda_mib(up->total));
			up->next_log += up->total / 10;
		}
	}
	if (over) {
		cuda_log("tensor '%s' (%s) has values beyond the F16 range: "
		    "stored as BF16", t->name, ttype_name(t->type));
		mt->dt = CU_BF16;
		up->done -= (size_t)u.r0 * row_bytes;
		goto again;
	}
	return 0;
}

/*
 * n floats of host vector h (NULL: none, *out NULL) to the next place at
 * *next in the arena's vector part.
 */
static int
cuda_vec(float **next, const float *h, size_t n, float **out)
{
	int rc;

	*out = NULL;
	if (h == NULL)
		return 0;
	if ((rc = cu_memcpy_htod_sync(*next, h, n * sizeof(float))) < 0)
		return rc;
	*out = *next;
	*next += n;
	return 0;
}

/* Layer l's norms, biases and head norms (part of m->n_vec_floats). */
static int
cuda_upload_layer_vecs(const struct model *m, const struct model_layer *l,
    struct cuda_layer *cl, float **next)
{
	const struct model_hparams *hp = &m->hp;
	size_t D = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
	size_t qd = (size_t)hp->n_head * hd, kvd = (size_t)hp->n_head_kv * hd;
	int rc;

	if ((rc = cuda_vec(next, l->attn_norm, D, &cl->attn_norm)) < 0 ||
	    (rc = cuda_vec(next, l->ffn_norm, D, &cl->ffn_norm)) < 0 ||
	    (rc = cuda_vec(next, l->bq, qd, &cl->bq)) < 0 ||
	    (rc = cuda_vec(next, l->bk, kvd, &cl->bk)) < 0 ||
	    (rc = cuda_vec(next, l->bv, kvd, &cl->bv)) < 0 ||
	    (rc = cuda_vec(next, l->q_norm, hd, &cl->q_norm)) < 0 ||
	    (rc = cuda_vec(next, l->k_norm, hd, &cl->k_norm)) < 0 ||
	    (rc = cuda_vec(next, l->post_attn_norm, D,
	    &cl->post_attn_norm)) < 0)
		return rc;
	return cuda_vec(next, l->post_ffn_norm, D, &cl->post_ffn_norm);
}

static int
cuda_upload_weights(struct backend *be, struct cuda_plan *pl,
    struct cp_err *e)
{
	struct cuda_ctx *c = be->ctx;
	const struct model *m = be->model;
	const struct model_hparams *hp = &m->hp;
	struct cuda_upload up;
	float *vecs = (void *)((char *)c->arena + pl->vec_off);
	int il, i, rc, max_cols = hp->n_embd;

	memset(&up, 0, sizeof(up));
	if (hp->n_ff > max_cols)
		max_cols = hp->n_ff;
	if (hp->n_head * hp->head_dim > max_cols)
		max_cols = hp->n_head * hp->head_dim;
	if ((rc = tp_new(be->params.n_threads, &c->tp)) < 0)
		return cp_err_set(e, rc, "cuda backend: cannot start %d "
		    "threads", be->params.n_threads);
	if ((rc = cu_host_alloc(CUDA_STAGE_BYTES, (void **)&up.stage)) < 0) {
		cp_err_set(e, rc, "cuda backend: cannot allocate %u MiB of "
		    "page-locked host memory", CUDA_STAGE_BYTES >> 20);
		goto out;
	}
	if ((up.rowbuf = calloc((size_t)tp_threads(c->tp) *
	    (size_t)max_cols, sizeof(float))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "cuda backend: out of memory");
		goto out;
	}
	up.total = c->arena_bytes;
	up.next_log = up.total / 10;
	if (up.total >= CUDA_PROGRESS_MIN)
		cuda_log("uploading %.0f MiB of weights", cuda_mib(up.total));
	if ((rc = cuda_upload_mat(be, &up, &m->tok_embd, &c->tok_embd, e)) < 0)
		goto out;
	if (c->output.off == c->tok_embd.off)
		c->output = c->tok_embd;
	else if ((rc = cuda_upload_mat(be, &up, &m->output, &c->output,
	    e)) < 0)
		goto out;
	for (il = 0; il < hp->n_layer; il++) {
		const struct model_layer *l = &m->layers[il];
		struct cuda_layer *cl = &c->layers[il];

		for (i = 0; i < CUDA_N_MATS; i++)
			if ((rc = cuda_upload_mat(be, &up, cuda_host_mat(l, i),
			    cuda_dev_mat(cl, i), e)) < 0)
				goto out;
		if ((rc = cuda_upload_layer_vecs(m, l, cl, &vecs)) < 0) {
			cp_err_set(e, rc, "cuda backend: upload of the vectors "
			    "of layer %d failed", il);
			goto out;
		}
	}
	if ((rc = cuda_vec(&vecs, m->out_norm, (size_t)hp->n_embd,
	    &c->out_norm)) < 0) {
		cp_err_set(e, rc, "cuda backend: upload of output_norm failed");
		goto out;
	}
	rc = 0;
out:
	free(up.rowbuf);
	cu_host_free(up.stage);
	tp_free(c->tp);
	c->tp = NULL;
	return rc;
}

/* The RoPE tables [n_ctx, n_rot] of each variant, computed on the host. */
static int
cuda_upload_rope(struct backend *be, struct cp_err *e)
{
	struct cuda_ctx *c = be->ctx;
	const struct model_hparams *hp = &be->model->hp;
	size_t row = (size_t)hp->n_rot * sizeof(float), per, at;
	int n_ctx = be->params.n_ctx, p0, p, n, rc = 0, r;
	struct model_rope v;
	float *stage;

	if (hp->n_rot == 0)
		return 0;
	if ((rc = cu_host_alloc(CUDA_STAGE_BYTES, (void **)&stage)) < 0)
		return cp_err_set(e, rc, "cuda backend: cannot allocate %u MiB "
		    "of page-locked host memory", CUDA_STAGE_BYTES >> 20);
	per = CUDA_STAGE_BYTES / row;
	for (r = 0; r < hp->n_rope && rc == 0; r++) {
		v = model_rope_for_ctx(be->model, r, n_ctx);
		at = (size_t)r * (size_t)n_ctx * row;
		for (p0 = 0; p0 < n_ctx; p0 += n) {
			n = n_ctx - p0;
			if ((size_t)n > per)
				n = (int)per;
			for (p = 0; p < n; p++)
				model_rope_cs(stage + (size_t)p *
				    (size_t)hp->n_rot, p0 + p, &v, hp->n_rot);
			if ((rc = cu_memcpy_htod(c->st, (char *)c->rope + at +
			    (size_t)p0 * row, stage, (size_t)n * row)) < 0 ||
			    (rc = cu_stream_sync(c->st)) < 0)
				break;
		}
	}
	cu_host_free(stage);
	if (rc < 0)
		return cp_err_set(e, rc, "cuda backend: upload of the RoPE "
		    "table failed");
	return 0;
}

/* ---- init, fini ------------------------------------------------------- */

static void
cuda_fini(struct backend *be)
{
	struct cuda_ctx *c = be->ctx;

	if (c == NULL)
		return;
	(void)cu_set_device(CUDA_DEV);
	if (c->st != NULL)
		(void)cu_stream_sync(c->st);
	cu_host_free(c->h_logits);
	cu_host_free(c->h_meta);
	cu_free(c->scratch);
	cu_free(c->arena);
	cu_gemm_free(c->gemm);
	cu_stream_free(c->st);
	tp_free(c->tp);
	free(c->layers);
	free(c);
	be->ctx = NULL;
}

/* The model fits what the kernels handle. */
static int
cuda_check_model(const struct backend *be, struct cp_err *e)
{
	const struct model_hparams *hp = &be->model->hp;
	const struct kv_params *kp = kv_params(be->kv);
	size_t kv_k0 = kv_block_offset(be->kv, 0, 0, KV_K);

	if (hp->head_dim > CU_ATT_MAX_HEAD_DIM)
		return cp_err_set(e, -EINVAL, "cuda backend: head_dim %d "
		    "exceeds the %d the attention kernel handles",
		    hp->head_dim, CU_ATT_MAX_HEAD_DIM);
	if (kp->type != CP_T_F16 && kp->type != CP_T_F32)
		return cp_err_set(e, -EINVAL, "cuda backend: no kernels for a "
		    "%s KV cache", ttype_name(kp->type));
	if (kv_blocks_total(be->kv) > 1 &&
	    kv_block_offset(be->kv, 1, 0, KV_K) - kv_k0 !=
	    kv_block_bytes(be->kv))
		return cp_err_set(e, -EINVAL, "cuda backend: KV block layout "
		    "is not block-major");
	return 0;
}

/* Matrices on the device by element type (tied output counted once). */
static void
cuda_count_types(const struct cuda_ctx *c, int n_layer, int n_dt[3])
{
	const struct cuda_layer *l;
	int il;

	n_dt[CU_F32] = n_dt[CU_F16] = n_dt[CU_BF16] = 0;
	n_dt[c->tok_embd.dt]++;
	if (c->output.off != c->tok_embd.off)
		n_dt[c->output.dt]++;
	for (il = 0; il < n_layer; il++) {
		l = &c->layers[il];
		n_dt[l->wq.dt]++;
		n_dt[l->wk.dt]++;
		n_dt[l->wv.dt]++;
		n_dt[l->wo.dt]++;
		n_dt[l->w_gate.dt]++;
		n_dt[l->w_up.dt]++;
		n_dt[l->w_down.dt]++;
	}
}

static int
cuda_init(struct backend *be, struct cp_err *e)
{
	const struct model_hparams *hp = &be->model->hp;
	const struct kv_params *kp = kv_params(be->kv);
	struct cuda_plan pl;
	struct cuda_ctx *c;
	char name[256] = "?";
	size_t free_b, total_b;
	int rc, major = 0, minor = 0, n_dt[3];

	if ((rc = cuda_check_model(be, e)) < 0)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return cp_err_set(e, -ENOMEM, "cuda backend: out of memory");
	be->ctx = c;
	if ((c->layers = calloc((size_t)hp->n_layer,
	    sizeof(*c->layers))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "cuda backend: out of memory");
		goto err;
	}
	if ((rc = cu_set_device(CUDA_DEV)) < 0 ||
	    (rc = cu_device_name(CUDA_DEV, name, sizeof(name), &major,
	    &minor)) < 0) {
		cp_err_set(e, rc, "cuda backend: device %d not usable",
		    CUDA_DEV);
		goto err;
	}
	cuda_plan(be, &pl);
	if ((rc = cuda_check_fit(be, e)) < 0)
		goto err;
	if ((rc = cu_stream_new(&c->st)) < 0 ||
	    (rc = cu_gemm_new(c->st, CUDA_GEMM_WS, &c->gemm)) < 0) {
		cp_err_set(e, rc, "cuda backend: cannot set up a stream and "
		    "cuBLAS");
		goto err;
	}
	if ((rc = cu_malloc(c->arena_bytes, &c->arena)) < 0 ||
	    (rc = cu_malloc(c->scratch_bytes, &c->scratch)) < 0) {
		(void)cu_mem_info(&free_b, &total_b);
		cp_err_set(e, rc, "cuda backend: cannot allocate %.1f MiB of "
		    "weights and %.1f MiB of scratch: %.1f MiB free of %.1f",
		    cuda_mib(c->arena_bytes), cuda_mib(c->scratch_bytes),
		    cuda_mib(free_b), cuda_mib(total_b));
		goto err;
	}
	if ((rc = cu_host_alloc(c->meta_ints * sizeof(int32_t),
	    (void **)&c->h_meta)) < 0 ||
	    (rc = cu_host_alloc((size_t)be->params.max_seqs *
	    (size_t)hp->n_vocab * sizeof(float), (void **)&c->h_logits)) < 0) {
		cp_err_set(e, rc, "cuda backend: cannot allocate page-locked "
		    "host memory for %d sequences' logits",
		    be->params.max_seqs);
		goto err;
	}
#define CUDA_AT(field) ((void *)((char *)c->scratch + pl.field))
	c->x = CUDA_AT(x);
	c->xn = CUDA_AT(xn);
	c->xh = CUDA_AT(xh);
	c->q = CUDA_AT(q);
	c->k = CUDA_AT(k);
	c->v = CUDA_AT(v);
	c->att = CUDA_AT(att);
	c->gate = CUDA_AT(gate);
	c->up = CUDA_AT(up);
	c->tmp = CUDA_AT(tmp);
	c->logits = CUDA_AT(logits);
	c->d_meta = CUDA_AT(meta);
	c->rope = CUDA_AT(rope);
#undef CUDA_AT
	if ((rc = cuda_upload_weights(be, &pl, e)) < 0 ||
	    (rc = cuda_upload_rope(be, e)) < 0)
		goto err;

	c->kv.base = be->kv_buf->d;
	c->kv.dt = kp->type == CP_T_F32 ? CU_F32 : CU_F16;
	c->kv.block_bytes = kv_block_bytes(be->kv);
	c->kv.block_tokens = kp->block_tokens;
	c->kv.kv_dim = kp->kv_dim;
	c->round_q = kv_elem_bytes(be->kv) == 2;
	c->att_scale = hp->kq_scale;
	cuda_count_types(c, hp->n_layer, n_dt);
	(void)cu_mem_info(&free_b, &total_b);
	cuda_log("%s (sm_%d%d): weights %.1f MiB (matrices: %d F32, %d F16, "
	    "%d BF16), KV cache %.1f MiB (%lld tokens, %s), scratch %.1f MiB; "
	    "%.1f MiB left free", name, major, minor, cuda_mib(c->arena_bytes),
	    n_dt[CU_F32], n_dt[CU_F16], n_dt[CU_BF16],
	    cuda_mib(kv_storage_bytes(be->kv)),
	    (long long)kv_blocks_total(be->kv) * kp->block_tokens,
	    ttype_name(kp->type), cuda_mib(c->scratch_bytes + CUDA_GEMM_WS),
	    cuda_mib(free_b));
	return 0;
err:
	cuda_fini(be);
	return rc;
}

/* ---- the step --------------------------------------------------------- */

/*
 * Pack b into h_meta; *n_out gets the rows asking for logits, *bytes the
 * prefix of h_meta to copy.  -EINVAL when a table is missing or the block
 * tables exceed what init sized for (cannot happen for a checked batch).
 */
static int
cuda_meta_fill(struct backend *be, const struct step_batch *b, int *n_out,
    size_t *bytes)
{
	struct cuda_ctx *c = be->ctx;
	int32_t *tok = c->h_meta, *pos = tok + c->tc, *blk = pos + c->tc;
	int32_t *lrows = blk + c->tc, *blocks = lrows + c->sc;
	int bt = be->params.block_tokens, e, j, row = 0, nb = 0, no = 0, need;

	if (b->n_tokens > be->params.max_batch_tokens ||
	    b->n_seqs > be->params.max_seqs)
		return -EINVAL;
	for (e = 0; e < b->n_seqs; e++) {
		const struct batch_seq *bs = &b->seqs[e];
		const int32_t *tab = kv_seq_blocks(be->kv, bs->seq);

		need = (bs->pos + bs->n_tokens + bt - 1) / bt;
		if (tab == NULL || need > c->blocks_cap - nb ||
		    bs->n_tokens > b->n_tokens - row)
			return -EINVAL;
		memcpy(blocks + nb, tab, (size_t)need * sizeof(int32_t));
		for (j = 0; j < bs->n_tokens; j++, row++) {
			tok[row] = b->tokens[row];
			pos[row] = bs->pos + j;
			blk[row] = nb;
		}
		nb += need;
		if (bs->logits)
			lrows[no++] = row - 1;
	}
	if (row != b->n_tokens)
		return -EINVAL;
	*n_out = no;
	*bytes = ((size_t)(blocks - c->h_meta) + (size_t)nb) * sizeof(int32_t);
	return 0;
}

/* y = w x for m rows of x; x is converted only when it changed. */
static int
cuda_mm(struct cuda_ctx *c, const struct cuda_mat *w, const float *x, int m,
    float *y)
{
	int rc, mp = (int)cuda_round((size_t)m, CU_GEMM_ROWS);

	if (c->prep_x != x || c->prep_dt != w->dt || c->prep_m != m ||
	    c->prep_ld != w->ld) {
		if ((rc = cu_convert(c->st, x, w->cols, m, w->cols, w->dt,
		    c->xh, w->ld, mp)) < 0)
			return rc;
		c->prep_x = x;
		c->prep_dt = w->dt;
		c->prep_m = m;
		c->prep_ld = w->ld;
	}
	return cu_gemm(c->gemm, w->d, w->dt, w->rows, w->cols, w->ld, c->xh,
	    w->ld, m, y);
}

/*
 * y = x + rmsnorm(t) with post (into xn first), or x + t without: the
 * residual add after a product, with gemma's post norm where it has one.
 */
static int
cuda_residual(struct cuda_ctx *c, const struct model_hparams *hp, int T,
    const float *post)
{
	size_t nx = (size_t)T * (size_t)hp->n_embd;
	int rc;

	if (post == NULL)
		return cu_add(c->st, c->x, c->tmp, nx);
	if ((rc = cu_rmsnorm(c->st, c->tmp, NULL, T, hp->n_embd, post,
	    hp->rms_eps, c->xn)) < 0)
		return rc;
	return cu_add(c->st, c->x, c->xn, nx);
}

static int
cuda_layer(struct backend *be, const struct cu_step *st, int il)
{
	struct cuda_ctx *c = be->ctx;
	const struct model_hparams *hp = &be->model->hp;
	const struct model_layer *ml = &be->model->layers[il];
	const struct cuda_layer *l = &c->layers[il];
	const float *rope = c->rope + (size_t)ml->rope *
	    (size_t)be->params.n_ctx * (size_t)hp->n_rot;
	struct cu_kv kv = c->kv;
	int T = st->n_tokens, rc;
	size_t nf = (size_t)T * (size_t)hp->n_ff;

	kv.k_off = kv_block_offset(be->kv, 0, il, KV_K);
	kv.v_off = kv_block_offset(be->kv, 0, il, KV_V);
	c->prep_x = NULL;
	if ((rc = cu_rmsnorm(c->st, c->x, NULL, T, hp->n_embd, l->attn_norm,
	    hp->rms_eps, c->xn)) < 0 ||
	    (rc = cuda_mm(c, &l->wq, c->xn, T, c->q)) < 0 ||
	    (rc = cuda_mm(c, &l->wk, c->xn, T, c->k)) < 0 ||
	    (rc = cuda_mm(c, &l->wv, c->xn, T, c->v)) < 0 ||
	    (rc = cu_qkv_prep(c->st, T, c->q, c->k, c->v, l->bq, l->bk, l->bv,
	    l->q_norm, l->k_norm, hp->n_head, hp->n_head_kv, hp->head_dim,
	    hp->rms_eps)) < 0 ||
	    (rc = cu_rope_store(c->st, st, &kv, c->q, c->k, c->v, hp->n_head,
	    hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_neox, rope,
	    hp->q_scale, c->round_q)) < 0 ||
	    (rc = cu_attention(c->st, st, &kv, c->q, hp->n_head,
	    hp->n_head_kv, hp->head_dim, c->att_scale, ml->window,
	    hp->attn_softcap, c->att)) < 0 ||
	    (rc = cuda_mm(c, &l->wo, c->att, T, c->tmp)) < 0 ||
	    (rc = cuda_residual(c, hp, T, l->post_attn_norm)) < 0)
		return rc;
	c->prep_x = NULL;
	if ((rc = cu_rmsnorm(c->st, c->x, NULL, T, hp->n_embd, l->ffn_norm,
	    hp->rms_eps, c->xn)) < 0 ||
	    (rc = cuda_mm(c, &l->w_gate, c->xn, T, c->gate)) < 0 ||
	    (rc = cuda_mm(c, &l->w_up, c->xn, T, c->up)) < 0 ||
	    (rc = hp->act == ACT_GELU ? cu_geglu(c->st, c->gate, c->up, nf) :
	    cu_swiglu(c->st, c->gate, c->up, nf)) < 0 ||
	    (rc = cuda_mm(c, &l->w_down, c->gate, T, c->tmp)) < 0 ||
	    (rc = cuda_residual(c, hp, T, l->post_ffn_norm)) < 0)
		return rc;
	c->prep_x = NULL;
	return 0;
}

/* Everything of step b after the metadata is packed, on the stream. */
static int
cuda_enqueue(struct backend *be, const struct step_batch *b, int n_out,
    size_t meta_bytes)
{
	struct cuda_ctx *c = be->ctx;
	const struct model_hparams *hp = &be->model->hp;
	const int32_t *d_tok = c->d_meta, *d_pos = d_tok + c->tc;
	const int32_t *d_blk = d_pos + c->tc, *d_lrows = d_blk + c->tc;
	struct cu_step st;
	int il, rc;

	st.n_tokens = b->n_tokens;
	st.pos = d_pos;
	st.blk = d_blk;
	st.blocks = d_lrows + c->sc;
	if ((rc = cu_memcpy_htod(c->st, c->d_meta, c->h_meta,
	    meta_bytes)) < 0 ||
	    (rc = cu_embed(c->st, c->tok_embd.d, c->tok_embd.dt,
	    c->tok_embd.ld, hp->n_embd, d_tok, b->n_tokens, c->x)) < 0 ||
	    (hp->embd_scale != 1.0f && (rc = cu_scale(c->st, c->x,
	    hp->embd_scale, (size_t)b->n_tokens * (size_t)hp->n_embd)) < 0))
		return rc;
	for (il = 0; il < hp->n_layer; il++)
		if ((rc = cuda_layer(be, &st, il)) < 0)
			return rc;
	if (n_out == 0)
		return 0;
	if ((rc = cu_rmsnorm(c->st, c->x, d_lrows, n_out, hp->n_embd,
	    c->out_norm, hp->rms_eps, c->xn)) < 0 ||
	    (rc = cuda_mm(c, &c->output, c->xn, n_out, c->logits)) < 0 ||
	    (rc = cu_softcap(c->st, c->logits, hp->final_softcap,
	    (size_t)n_out * (size_t)hp->n_vocab)) < 0 ||
	    (rc = cu_memcpy_dtoh(c->st, c->h_logits, c->logits,
	    (size_t)n_out * (size_t)hp->n_vocab * sizeof(float))) < 0)
		return rc;
	c->prep_x = NULL;
	return 0;
}

/*
 * After a failed step: wait for what was enqueued (the page-locked
 * buffers are reused by the next step), and mark the backend broken when
 * the device is in an error state.
 */
static int
cuda_step_failed(struct cuda_ctx *c, int rc, const char *what,
    struct cp_err *e)
{
	/* A failure a second sync still reports is sticky: the context is
	 * lost.  (The first returns, and clears, a one-off error.) */
	if (cu_stream_sync(c->st) < 0 && cu_stream_sync(c->st) < 0)
		c->broken = true;
	c->prep_x = NULL;
	return cp_err_set(e, rc == -EINVAL ? -EINVAL : -EIO, "cuda backend: "
	    "%s failed%s (see the log)", what, c->broken ? " and the device "
	    "is in an error state: reopen the backend" : "");
}

static int
cuda_step_submit(struct backend *be, const struct step_batch *b,
    struct cp_err *e)
{
	struct cuda_ctx *c = be->ctx;
	size_t meta_bytes;
	int rc, n_out;

	if (c->broken)
		return cp_err_set(e, -EIO, "cuda backend: the device is in an "
		    "error state since an earlier step: reopen the backend");
	if ((rc = cu_set_device(CUDA_DEV)) < 0)
		return cp_err_set(e, rc, "cuda backend: cannot select device "
		    "%d", CUDA_DEV);
	if ((rc = cuda_meta_fill(be, b, &n_out, &meta_bytes)) < 0)
		return cp_err_set(e, rc, "cuda backend: batch does not fit "
		    "the step buffers");
	if ((rc = cuda_enqueue(be, b, n_out, meta_bytes)) < 0)
		return cuda_step_failed(c, rc, "step submission", e);
	return 0;
}

static int
cuda_step_wait(struct backend *be, const float **logits, struct cp_err *e)
{
	struct cuda_ctx *c = be->ctx;
	int rc;

	if ((rc = cu_set_device(CUDA_DEV)) < 0 ||
	    (rc = cu_stream_sync(c->st)) < 0)
		return cuda_step_failed(c, rc, "step", e);
	*logits = c->h_logits;
	return 0;
}

const struct be_ops be_cuda_ops = {
	.name = "cuda",
	.probe = cuda_probe,
	.supports = cuda_supports,
	.init = cuda_init,
	.fini = cuda_fini,
	.buf_alloc = cuda_buf_alloc,
	.buf_free = cuda_buf_free,
	.buf_set = cuda_buf_set,
	.buf_get = cuda_buf_get,
	.buf_host = NULL,
	.step_submit = cuda_step_submit,
	.step_wait = cuda_step_wait,
};
