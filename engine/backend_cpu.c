/*
 * backend_cpu.c - the CPU backend: weights read in place from the mapped
 * file, or from a repacked copy where this CPU has a kernel for one
 * (packed.h, shared by the CPU backends on a model), buffers in anonymous
 * host memory, the step run by forward.c on a
 * persistent thread pool.  The step runs to completion in step_submit;
 * step_wait only hands out the logits.
 */
#include "backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_host.h"
#include "forward.h"
#include "packed.h"
#include "threadpool.h"

struct cpu_ctx {
	struct threadpool *tp;
	struct packed *packed;	/* repacked weights, or NULL */
	struct fwd *fwd;
	float *logits;		/* [max_seqs, n_vocab] */
	int rc;			/* result of the submitted step */
};

static void
cpu_fini(struct backend *be)
{
	struct cpu_ctx *c = be->ctx;

	if (c == NULL)
		return;
	fwd_free(c->fwd);
	packed_put(c->packed);
	tp_free(c->tp);
	free(c->logits);
	free(c);
	be->ctx = NULL;
}

static int
cpu_init(struct backend *be, struct cp_err *e)
{
	const struct be_params *p = &be->params;
	struct fwd_params fp;
	struct cpu_ctx *c;
	int rc;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return cp_err_set(e, -ENOMEM, "cpu backend: out of memory");
	be->ctx = c;
	if ((rc = tp_new(p->n_threads, &c->tp)) < 0) {
		cp_err_set(e, rc, "cpu backend: cannot start %d threads",
		    p->n_threads);
		goto err;
	}
	if ((rc = packed_get(be->model, c->tp, &c->packed, e)) < 0)
		goto err;
	fp.max_batch_tokens = p->max_batch_tokens;
	fp.max_seqs = p->max_seqs;
	fp.tp = c->tp;
	fp.layers = c->packed != NULL ? packed_layers(c->packed) : NULL;
	fp.output = c->packed != NULL ? packed_output(c->packed) : NULL;
	if ((rc = fwd_new(be->model, be->kv, host_buf_host(be->kv_buf), &fp,
	    &c->fwd, e)) < 0)
		goto err;
	if ((c->logits = calloc((size_t)p->max_seqs *
	    (size_t)be->model->hp.n_vocab, sizeof(float))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "cpu backend: out of memory for "
		    "logits");
		goto err;
	}
	return 0;
err:
	cpu_fini(be);
	return rc;
}

static int
cpu_step_submit(struct backend *be, const struct step_batch *b,
    struct cp_err *e)
{
	struct cpu_ctx *c = be->ctx;

	c->rc = fwd_step(c->fwd, b, c->logits);
	if (c->rc < 0)
		return cp_err_set(e, c->rc, "cpu backend: step failed");
	return 0;
}

static int
cpu_step_wait(struct backend *be, const float **logits, struct cp_err *e)
{
	struct cpu_ctx *c = be->ctx;

	if (c->rc < 0)
		return cp_err_set(e, c->rc, "cpu backend: step failed");
	*logits = c->logits;
	return 0;
}

static int
cpu_set_threads(struct backend *be, int n)
{
	struct cpu_ctx *c = be->ctx;

	return tp_set_active(c->tp, n);
}

const struct be_ops be_cpu_ops = {
	.name = "cpu",
	.probe = NULL,
	.init = cpu_init,
	.fini = cpu_fini,
	.buf_alloc = host_buf_alloc,
	.buf_prefault = host_buf_prefault,
	.buf_free = host_buf_free,
	.buf_set = host_buf_set,
	.buf_get = host_buf_get,
	.buf_host = host_buf_host,
	.step_submit = cpu_step_submit,
	.step_wait = cpu_step_wait,
	.buf_release = host_buf_release,
	.set_threads = cpu_set_threads,
};
