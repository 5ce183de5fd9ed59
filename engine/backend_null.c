/*
 * backend_null.c - a backend that runs no model: every valid batch is
 * accepted and each requested logits row is made up from the row's
 * position alone.  It lets the daemon's rings, scheduler, sampler and
 * detokenizer be measured without compute (cpbench ipc) and gives tests a
 * token stream known in advance.  It is chosen only by name ("null"),
 * never by "auto".
 *
 * THE STREAM.  cand[0..n_cand) are the ids of the model's vocabulary whose
 * type is NORMAL and that do not end generation, in id order (when the
 * vocabulary has no such id: every id that does not end generation).  The
 * logits row of the row at position q is -inf everywhere except 0 at
 * cand[q % n_cand].  Greedy sampling therefore continues a prompt of P
 * tokens with cand[(P - 1) % n_cand], cand[P % n_cand], ... whatever the
 * prompt holds, and never ends a request by itself.
 *
 * The KV storage is allocated (the generic layer asks for it) but never
 * read or written by a step; its anonymous pages stay untouched until
 * be_kv_write() writes some.
 */
#include "backend.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_host.h"
#include "tokenizer.h"

struct null_ctx {
	int32_t *cand;		/* (n_cand) ids the stream is drawn from */
	int n_cand;
	int n_vocab;
	float *logits;		/* [max_seqs, n_vocab], -inf but for hot[] */
	int *hot;		/* (max_seqs) id set to 0 in each row, or -1 */
};

static void
null_fini(struct backend *be)
{
	struct null_ctx *c = be->ctx;

	if (c == NULL)
		return;
	free(c->cand);
	free(c->logits);
	free(c->hot);
	free(c);
	be->ctx = NULL;
}

/* cand[]: NORMAL ids that do not end generation, else any that do not. */
static int
null_pick(struct null_ctx *c, const struct model *m, struct cp_err *e)
{
	struct tokenizer *tok = NULL;
	int id, pass, rc;

	if ((rc = tok_load(m->gf, &tok, e)) < 0)
		return rc;
	if (tok_n_vocab(tok) != c->n_vocab) {
		rc = cp_err_set(e, -EINVAL, "null backend: the vocabulary has "
		    "%d tokens, the model %d", (int)tok_n_vocab(tok),
		    c->n_vocab);
		goto out;
	}
	if ((c->cand = calloc((size_t)c->n_vocab, sizeof(*c->cand))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "null backend: out of memory");
		goto out;
	}
	for (pass = 0; pass < 2 && c->n_cand == 0; pass++)
		for (id = 0; id < c->n_vocab; id++)
			if (!tok_is_eog(tok, id) && (pass == 1 ||
			    tok_type(tok, id) == TOK_TYPE_NORMAL))
				c->cand[c->n_cand++] = id;
	if (c->n_cand == 0)
		rc = cp_err_set(e, -EINVAL, "null backend: every token of the "
		    "vocabulary ends generation");
out:
	tok_free(tok);
	return rc;
}

static int
null_init(struct backend *be, struct cp_err *e)
{
	const struct be_params *p = &be->params;
	struct null_ctx *c;
	size_t i, n;
	int rc;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return cp_err_set(e, -ENOMEM, "null backend: out of memory");
	be->ctx = c;
	c->n_vocab = be->model->hp.n_vocab;
	if ((rc = null_pick(c, be->model, e)) < 0)
		goto err;
	n = (size_t)p->max_seqs * (size_t)c->n_vocab;
	c->logits = malloc(n * sizeof(*c->logits));
	c->hot = malloc((size_t)p->max_seqs * sizeof(*c->hot));
	if (c->logits == NULL || c->hot == NULL) {
		rc = cp_err_set(e, -ENOMEM, "null backend: out of memory for "
		    "logits");
		goto err;
	}
	for (i = 0; i < n; i++)
		c->logits[i] = -INFINITY;
	for (i = 0; i < (size_t)p->max_seqs; i++)
		c->hot[i] = -1;
	return 0;
err:
	null_fini(be);
	return rc;
}

/* Each row is reset and set one entry at a time: O(entries), not O(vocab). */
static int
null_step_submit(struct backend *be, const struct step_batch *b,
    struct cp_err *e)
{
	struct null_ctx *c = be->ctx;
	float *row;
	int i, q, r = 0;

	(void)e;
	for (i = 0; i < b->n_seqs; i++) {
		if (!b->seqs[i].logits)
			continue;
		q = b->seqs[i].pos + b->seqs[i].n_tokens - 1;
		row = c->logits + (size_t)r * (size_t)c->n_vocab;
		if (c->hot[r] >= 0)
			row[c->hot[r]] = -INFINITY;
		c->hot[r] = c->cand[q % c->n_cand];
		row[c->hot[r]] = 0.0f;
		r++;
	}
	return 0;
}

static int
null_step_wait(struct backend *be, const float **logits, struct cp_err *e)
{
	struct null_ctx *c = be->ctx;

	(void)e;
	*logits = c->logits;
	return 0;
}

const struct be_ops be_null_ops = {
	.name = "null",
	.probe = NULL,
	.init = null_init,
	.fini = null_fini,
	.buf_alloc = host_buf_alloc,
	.buf_prefault = host_buf_prefault,
	.buf_free = host_buf_free,
	.buf_set = host_buf_set,
	.buf_get = host_buf_get,
	.buf_host = host_buf_host,
	.step_submit = null_step_submit,
	.step_wait = null_step_wait,
};
