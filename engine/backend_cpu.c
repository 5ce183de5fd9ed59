/*
 * backend_cpu.c - the CPU backend: weights read in place from the mapped
 * file, buffers in anonymous host memory, the step run by forward.c on a
 * persistent thread pool.  The step runs to completion in step_submit;
 * step_wait only hands out the logits.
 */
#include "backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "forward.h"
#include "threadpool.h"

struct be_buf {
	void *p;		/* mmap'd, page aligned, zero-filled */
	size_t size;
};

struct cpu_ctx {
	struct threadpool *tp;
	struct fwd *fwd;
	float *logits;		/* [max_seqs, n_vocab] */
	int rc;			/* result of the submitted step */
};

static int
cpu_buf_alloc(struct backend *be, size_t size, struct be_buf **out)
{
	struct be_buf *b;
	void *p;

	(void)be;
	*out = NULL;
	if ((b = calloc(1, sizeof(*b))) == NULL)
		return -ENOMEM;
	p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(b);
		return -ENOMEM;
	}
	b->p = p;
	b->size = size;
	*out = b;
	return 0;
}

static void
cpu_buf_free(struct backend *be, struct be_buf *b)
{
	(void)be;
	if (b == NULL)
		return;
	munmap(b->p, b->size ? b->size : 1);
	free(b);
}

static int
cpu_buf_set(struct backend *be, struct be_buf *b, size_t off,
    const void *src, size_t n)
{
	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	memcpy((char *)b->p + off, src, n);
	return 0;
}

static int
cpu_buf_get(struct backend *be, const struct be_buf *b, size_t off,
    void *dst, size_t n)
{
	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	memcpy(dst, (const char *)b->p + off, n);
	return 0;
}

static void *
cpu_buf_host(struct be_buf *b)
{
	return b->p;
}

static void
cpu_fini(struct backend *be)
{
	struct cpu_ctx *c = be->ctx;

	if (c == NULL)
		return;
	fwd_free(c->fwd);
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
	fp.max_batch_tokens = p->max_batch_tokens;
	fp.max_seqs = p->max_seqs;
	fp.tp = c->tp;
	if ((rc = fwd_new(be->model, be->kv, be->kv_buf->p, &fp, &c->fwd,
	    e)) < 0)
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

const struct be_ops be_cpu_ops = {
	.name = "cpu",
	.probe = NULL,
	.init = cpu_init,
	.fini = cpu_fini,
	.buf_alloc = cpu_buf_alloc,
	.buf_free = cpu_buf_free,
	.buf_set = cpu_buf_set,
	.buf_get = cpu_buf_get,
	.buf_host = cpu_buf_host,
	.step_submit = cpu_step_submit,
	.step_wait = cpu_step_wait,
};
