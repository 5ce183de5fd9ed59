#include "backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "threadpool.h"
#include "ttype.h"

/*
 * The registry: every backend compiled in, in "auto" preference order
 * (a device backend before the CPU).  A CUDA build adds its table here,
 * under CP_HAVE_CUDA, once backend_cuda.c provides be_cuda_ops.
 */
#ifdef CP_HAVE_CUDA
extern const struct be_ops be_cuda_ops;	/* backend_cuda.c */
#endif
extern const struct be_ops be_null_ops;	/* backend_null.c */
static const struct be_ops *const be_table[] = {
#ifdef CP_HAVE_CUDA
	&be_cuda_ops,
#endif
	&be_cpu_ops,
	&be_null_ops,	/* by name only: "auto" stops at the CPU */
};
#define BE_N (sizeof(be_table) / sizeof(be_table[0]))

static const char *be_name_list[BE_N + 1];

const char *const *
be_names(void)
{
	size_t i;

	for (i = 0; i < BE_N; i++)
		be_name_list[i] = be_table[i]->name;
	be_name_list[BE_N] = NULL;
	return be_name_list;
}

static int
be_fill_params(const struct model *m, const struct be_params *in,
    struct be_params *p, struct cp_err *e)
{
	int n_ctx_train = m->hp.n_ctx_train;

	if (in != NULL)
		*p = *in;
	else
		memset(p, 0, sizeof(*p));
	if (p->n_threads == 0)
		p->n_threads = tp_physical_cores();
	if (p->n_threads > TP_MAX_THREADS)
		p->n_threads = TP_MAX_THREADS;
	if (p->max_batch_tokens == 0)
		p->max_batch_tokens = BE_DEFAULT_BATCH_TOKENS;
	if (p->max_seqs == 0)
		p->max_seqs = BE_DEFAULT_MAX_SEQS;
	if (p->n_ctx == 0)
		p->n_ctx = n_ctx_train;
	if (p->block_tokens == 0)
		p->block_tokens = KV_BLOCK_TOKENS;
	if (p->n_threads < 1)
		return cp_err_set(e, -EINVAL, "backend: threads %d not in "
		    "1..%d", p->n_threads, TP_MAX_THREADS);
	if (p->max_batch_tokens < 1 || p->max_batch_tokens > (1 << 20))
		return cp_err_set(e, -EINVAL, "backend: max_batch_tokens %d "
		    "not in 1..%d", p->max_batch_tokens, 1 << 20);
	if (p->max_seqs < 1 || p->max_seqs > KV_MAX_SEQS)
		return cp_err_set(e, -EINVAL, "backend: max_seqs %d not in "
		    "1..%d", p->max_seqs, KV_MAX_SEQS);
	if (p->n_ctx < 1 || p->n_ctx > n_ctx_train)
		return cp_err_set(e, -EINVAL, "backend: context length %d not "
		    "in 1..%d (the model's context_length)", p->n_ctx,
		    n_ctx_train);
	if (p->block_tokens < 1 || p->block_tokens > KV_MAX_BLOCK_TOKENS)
		return cp_err_set(e, -EINVAL, "backend: block_tokens %d not "
		    "in 1..%d", p->block_tokens, KV_MAX_BLOCK_TOKENS);
	if (p->kv_tokens < 0)
		return cp_err_set(e, -EINVAL, "backend: kv_tokens %d "
		    "negative", p->kv_tokens);
	return 0;
}

static int
be_kv_new(struct backend *be, struct cp_err *e)
{
	const struct model_hparams *hp = &be->model->hp;
	const struct be_params *p = &be->params;
	struct kv_params kp = {
		.n_layer = hp->n_layer,
		.kv_dim = hp->n_head_kv * hp->head_dim,
		.type = p->kv_f32 ? CP_T_F32 : CP_T_F16,
		.block_tokens = p->block_tokens,
		.max_seqs = p->max_seqs,
		.n_ctx = p->n_ctx,
	};

	if (p->kv_tokens > 0)
		kp.n_blocks = kv_blocks_for_tokens(&kp,
		    (uint64_t)p->kv_tokens);
	else if (p->kv_mib > 0)
		kp.n_blocks = kv_blocks_for_mib(&kp, p->kv_mib);
	else
		kp.n_blocks = kv_blocks_for_tokens(&kp, (uint64_t)p->n_ctx);
	if (kp.n_blocks < 1)
		return cp_err_set(e, -EINVAL, "backend: KV cache of %llu MiB "
		    "holds no block of %d tokens (%zu bytes each)",
		    (unsigned long long)p->kv_mib, p->block_tokens,
		    kv_token_bytes(&kp) * (size_t)p->block_tokens);
	return kv_new(&kp, &be->kv, e);
}

int
be_open(const char *name, const struct model *m, const struct be_params *p,
    struct backend **out, struct cp_err *e)
{
	const struct be_ops *ops = NULL;
	struct backend *be;
	size_t i;
	int rc;

	*out = NULL;
	for (i = 0; i < BE_N; i++) {
		if (strcmp(name, "auto") == 0) {
			if ((be_table[i]->supports == NULL ||
			    be_table[i]->supports(m, NULL) == 0) &&
			    (be_table[i]->probe == NULL ||
			    be_table[i]->probe(NULL) == 0)) {
				ops = be_table[i];
				break;
			}
		} else if (strcmp(name, be_table[i]->name) == 0) {
			ops = be_table[i];
			break;
		}
	}
	if (ops == NULL && strcmp(name, "auto") == 0)
		return cp_err_set(e, -ENODEV, "backend: none usable here");
	if (ops == NULL)
		return cp_err_set(e, -ENOENT, "backend '%s' unknown or not "
		    "compiled in", name);
	if ((ops->supports != NULL && (rc = ops->supports(m, e)) < 0) ||
	    (ops->probe != NULL && (rc = ops->probe(e)) < 0))
		return rc;
	if ((be = calloc(1, sizeof(*be))) == NULL)
		return cp_err_set(e, -ENOMEM, "backend: out of memory");
	be->ops = ops;
	be->model = m;
	if ((rc = be_fill_params(m, p, &be->params, e)) < 0 ||
	    (rc = be_kv_new(be, e)) < 0)
		goto err;
	if ((rc = ops->buf_alloc(be, kv_storage_bytes(be->kv),
	    &be->kv_buf)) < 0) {
		cp_err_set(e, rc, "backend %s: cannot allocate %zu bytes of "
		    "KV cache", ops->name, kv_storage_bytes(be->kv));
		goto err;
	}
	if ((rc = ops->init(be, e)) < 0)
		goto err;
	*out = be;
	return 0;
err:
	if (be->kv_buf != NULL)
		ops->buf_free(be, be->kv_buf);
	kv_free(be->kv);
	free(be);
	return rc;
}

void
be_close(struct backend *be)
{
	const float *lg;

	if (be == NULL)
		return;
	if (be->inflight != NULL)
		(void)be->ops->step_wait(be, &lg, NULL);
	be->ops->fini(be);
	be->ops->buf_free(be, be->kv_buf);
	kv_free(be->kv);
	free(be);
}

const char *
be_name(const struct backend *be)
{
	return be->ops->name;
}

const struct be_params *
be_params(const struct backend *be)
{
	return &be->params;
}

struct kv_cache *
be_kv(struct backend *be)
{
	return be->kv;
}

int
be_batch_check(const struct backend *be, const struct step_batch *b,
    struct cp_err *e)
{
	const struct be_params *p = &be->params;
	int i, j, sum = 0, len, written, n_vocab = be->model->hp.n_vocab;

	if (b->n_seqs < 1 || b->n_seqs > p->max_seqs)
		return cp_err_set(e, -EINVAL, "batch: %d sequences, expected "
		    "1..%d", b->n_seqs, p->max_seqs);
	if (b->n_tokens < 1 || b->n_tokens > p->max_batch_tokens)
		return cp_err_set(e, -EINVAL, "batch: %d tokens, expected "
		    "1..%d", b->n_tokens, p->max_batch_tokens);
	if (b->tokens == NULL || b->seqs == NULL)
		return cp_err_set(e, -EINVAL, "batch: no tokens or entries");
	for (i = 0; i < b->n_seqs; i++) {
		const struct batch_seq *s = &b->seqs[i];

		if ((len = kv_seq_len(be->kv, s->seq)) < 0)
			return cp_err_set(e, -EINVAL, "batch entry %d: "
			    "sequence %d is not live", i, s->seq);
		written = kv_seq_written(be->kv, s->seq);
		if (s->n_tokens < 1 || s->n_tokens > b->n_tokens - sum)
			return cp_err_set(e, -EINVAL, "batch entry %d: %d "
			    "tokens, %d left in the batch", i, s->n_tokens,
			    b->n_tokens - sum);
		if (s->pos < 0 || s->pos > written)
			return cp_err_set(e, -EINVAL, "batch entry %d: "
			    "position %d, sequence %d has %d written", i,
			    s->pos, s->seq, written);
		if (s->n_tokens > len - s->pos)
			return cp_err_set(e, -EINVAL, "batch entry %d: "
			    "positions %d..%d past the %d reserved", i,
			    s->pos, s->pos + s->n_tokens - 1, len);
		for (j = 0; j < i; j++)
			if (b->seqs[j].seq == s->seq)
				return cp_err_set(e, -EINVAL, "batch entries "
				    "%d and %d share sequence %d", j, i,
				    s->seq);
		sum += s->n_tokens;
	}
	if (sum != b->n_tokens)
		return cp_err_set(e, -EINVAL, "batch: entries hold %d tokens, "
		    "n_tokens is %d", sum, b->n_tokens);
	for (i = 0; i < b->n_tokens; i++)
		if (b->tokens[i] < 0 || b->tokens[i] >= n_vocab)
			return cp_err_set(e, -EINVAL, "batch: token %d is id "
			    "%d, expected 0..%d", i, (int)b->tokens[i],
			    n_vocab - 1);
	return 0;
}

/* A failed step may have overwritten its ranges: they hold nothing valid. */
static void
be_step_failed(struct backend *be, const struct step_batch *b)
{
	int i, w;

	for (i = 0; i < b->n_seqs; i++) {
		w = kv_seq_written(be->kv, b->seqs[i].seq);
		if (w > b->seqs[i].pos)
			(void)kv_seq_set_written(be->kv, b->seqs[i].seq,
			    b->seqs[i].pos);
	}
}

int
be_step_submit(struct backend *be, const struct step_batch *b,
    struct cp_err *e)
{
	int rc, i;

	if (be->inflight != NULL)
		return cp_err_set(e, -EBUSY, "backend: a step is in flight");
	if ((rc = be_batch_check(be, b, e)) < 0)
		return rc;
	if ((rc = be->ops->step_submit(be, b, e)) < 0) {
		be_step_failed(be, b);
		return rc;
	}
	be->inflight = b;
	be->n_logits = 0;
	for (i = 0; i < b->n_seqs; i++)
		be->n_logits += b->seqs[i].logits;
	return 0;
}

int
be_step_wait(struct backend *be, const float **logits, int *n_logits,
    struct cp_err *e)
{
	const struct step_batch *b = be->inflight;
	int rc, i;

	if (b == NULL)
		return cp_err_set(e, -EINVAL, "backend: no step in flight");
	rc = be->ops->step_wait(be, logits, e);
	be->inflight = NULL;
	if (rc < 0) {
		be_step_failed(be, b);
		return rc;
	}
	/* Positions past the range, if any, were computed from other K/V. */
	for (i = 0; i < b->n_seqs; i++)
		(void)kv_seq_set_written(be->kv, b->seqs[i].seq,
		    b->seqs[i].pos + b->seqs[i].n_tokens);
	if (n_logits != NULL)
		*n_logits = be->n_logits;
	return 0;
}

int
be_step(struct backend *be, const struct step_batch *b,
    const float **logits, int *n_logits, struct cp_err *e)
{
	int rc;

	if ((rc = be_step_submit(be, b, e)) < 0)
		return rc;
	return be_step_wait(be, logits, n_logits, e);
}

int
be_kv_read(struct backend *be, size_t off, void *dst, size_t n)
{
	size_t size = kv_storage_bytes(be->kv);

	if (off > size || n > size - off)
		return -EINVAL;
	return be->ops->buf_get(be, be->kv_buf, off, dst, n);
}

int
be_kv_write(struct backend *be, size_t off, const void *src, size_t n)
{
	size_t size = kv_storage_bytes(be->kv);

	if (off > size || n > size - off)
		return -EINVAL;
	return be->ops->buf_set(be, be->kv_buf, off, src, n);
}

int
be_kv_release(struct backend *be)
{
	if (be->ops->buf_release == NULL)
		return -ENOTSUP;
	if (be->inflight != NULL || kv_seqs_live(be->kv) > 0)
		return -EBUSY;
	return be->ops->buf_release(be, be->kv_buf);
}

int
be_kv_prefault(struct backend *be, const int32_t *blocks, int n)
{
	size_t bb = kv_block_bytes(be->kv), off, len;
	int nb = kv_blocks_total(be->kv), i, j, rc;

	if (be->ops->buf_prefault == NULL)
		return -ENOTSUP;
	for (i = 0; i < n; i++)
		if (blocks[i] < 0 || blocks[i] >= nb)
			return -EINVAL;
	/* Runs of consecutive blocks in one call each. */
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && blocks[j] == blocks[j - 1] + 1; j++)
			;
		off = (size_t)blocks[i] * bb;
		len = (size_t)(j - i) * bb;
		if ((rc = be->ops->buf_prefault(be, be->kv_buf, off, len)) < 0)
			return rc;
	}
	return 0;
}

/* One warm-up step: rows copies of toks[0] at pos of seq, with logits. */
static int
warm_step(struct backend *be, const int32_t *toks, int seq, int pos,
    int rows, struct cp_err *e)
{
	struct batch_seq bs = { seq, pos, rows, true };
	struct step_batch b = { toks, rows, &bs, 1 };
	const float *lg;
	int rc;

	if ((rc = kv_seq_append(be->kv, seq, rows)) < 0)
		return cp_err_set(e, rc, "backend: no KV blocks to warm up");
	return be_step(be, &b, &lg, NULL, e);
}

int
be_warmup(struct backend *be, int32_t tok, struct cp_err *e)
{
	int32_t toks[8];
	int64_t pool = (int64_t)kv_blocks_total(be->kv) *
	    kv_params(be->kv)->block_tokens;
	int n = be->params.n_ctx - 1, seq, rc;

	if (tok < 0 || tok >= be->model->hp.n_vocab)
		return cp_err_set(e, -EINVAL, "backend: warm-up token %d is "
		    "not in the vocabulary", (int)tok);
	/* 8 rows at most, and room left for the decode row */
	if (n > pool - 1)
		n = (int)(pool - 1);
	n = n < 1 ? 1 : n > 8 ? 8 : n;
	for (int i = 0; i < n; i++)
		toks[i] = tok;
	if ((seq = kv_seq_new(be->kv)) < 0)
		return cp_err_set(e, seq, "backend: no sequence to warm up");
	/* the prompt, then one decode row when the context has room */
	rc = warm_step(be, toks, seq, 0, n, e);
	if (rc == 0 && n < be->params.n_ctx && n < pool)
		rc = warm_step(be, toks, seq, n, 1, e);
	(void)kv_seq_free(be->kv, seq);
	return rc < 0 ? rc : 0;
}

int
be_set_threads(struct backend *be, int n, struct cp_err *e)
{
	if (be->ops->set_threads == NULL)
		return cp_err_set(e, -ENOTSUP, "%s backend: the thread count "
		    "is fixed", be->ops->name);
	if (be->inflight != NULL)
		return cp_err_set(e, -EBUSY, "backend: a step is in flight");
	if (n < 1 || n > be->params.n_threads)
		return cp_err_set(e, -EINVAL, "backend: %d threads, not in "
		    "1..%d", n, be->params.n_threads);
	return be->ops->set_threads(be, n);
}

/* Same block layout: same backend, model shape, storage type, block size. */
static bool
be_kv_compatible(const struct backend *a, const struct backend *b)
{
	const struct kv_params *pa = kv_params(a->kv), *pb = kv_params(b->kv);

	return a->ops == b->ops && pa->n_layer == pb->n_layer &&
	    pa->kv_dim == pb->kv_dim && pa->type == pb->type &&
	    pa->block_tokens == pb->block_tokens;
}

int
be_kv_import(struct backend *dst, int dst_seq, struct backend *src,
    int src_seq, int n, struct cp_err *e)
{
	const int32_t *tb_dst, *tb_src;
	size_t bb = kv_block_bytes(dst->kv);
	unsigned char *d_mem, *s_mem;
	int bt, nb, i;

	if (dst == src || !be_kv_compatible(dst, src))
		return cp_err_set(e, -EINVAL, "backend: KV import between "
		    "caches of different layouts");
	if (dst->ops->buf_host == NULL)
		return cp_err_set(e, -ENOTSUP, "%s backend: no KV import",
		    dst->ops->name);
	if (dst->inflight != NULL || src->inflight != NULL)
		return cp_err_set(e, -EBUSY, "backend: a step is in flight");
	if (n < 0 || kv_seq_written(src->kv, src_seq) < n ||
	    kv_seq_len(dst->kv, dst_seq) < n)
		return cp_err_set(e, -EINVAL, "backend: KV import of %d "
		    "positions: source sequence %d holds %d, target %d "
		    "reserves %d", n, src_seq, kv_seq_written(src->kv,
		    src_seq), dst_seq, kv_seq_len(dst->kv, dst_seq));
	bt = kv_params(dst->kv)->block_tokens;
	nb = (n + bt - 1) / bt;
	tb_dst = kv_seq_blocks(dst->kv, dst_seq);
	tb_src = kv_seq_blocks(src->kv, src_seq);
	d_mem = dst->ops->buf_host(dst->kv_buf);
	s_mem = src->ops->buf_host(src->kv_buf);
	/* A block holds every layer's K and V of its positions. */
	for (i = 0; i < nb; i++)
		memcpy(d_mem + (size_t)tb_dst[i] * bb,
		    s_mem + (size_t)tb_src[i] * bb, bb);
	if (kv_seq_written(dst->kv, dst_seq) < n)
		(void)kv_seq_set_written(dst->kv, dst_seq, n);
	return 0;
}
