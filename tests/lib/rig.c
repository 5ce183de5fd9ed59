/*
 * rig.c - a model on a backend for the engine tests (rig.h).
 */
#include "rig.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "fixtures.h"
#include "gguf.h"
#include "kvcache.h"
#include "model.h"

void
rig_init(struct rig *r, const char *rel, const char *name,
    const struct be_params *p)
{
	char *path = fx_path(rel);
	struct cp_err e = { 0 };

	memset(r, 0, sizeof(*r));
	ck_assert_msg(path != NULL, "fixture %s missing", rel);
	ck_assert_msg(model_load(path, &r->m, &e) == 0, "%s", e.msg);
	free(path);
	r->n_vocab = r->m->hp.n_vocab;
	ck_assert_msg(be_open(name, r->m, p, &r->be, &e) == 0, "%s: %s",
	    name, e.msg);
}

void
rig_fini(struct rig *r)
{
	be_close(r->be);
	model_free(r->m);
	gguf_close(r->f);
	memset(r, 0, sizeof(*r));
}

struct be_params
rig_params(int threads, int batch, int max_seqs)
{
	struct be_params p = { 0 };

	p.n_threads = threads;
	p.max_batch_tokens = batch;
	p.max_seqs = max_seqs;
	return p;
}

void
rig_feed(struct rig *r, int seq, int pos, const int32_t *ids, int n,
    int chunk, float *out)
{
	struct kv_cache *kv = be_kv(r->be);
	struct cp_err e = { 0 };
	const float *lg = NULL;
	int done = 0, take, nl;

	ck_assert_int_gt(n, 0);
	if (chunk <= 0)
		chunk = n;
	while (done < n) {
		struct batch_seq bs;
		struct step_batch b;

		take = n - done < chunk ? n - done : chunk;
		ck_assert_int_eq(kv_seq_append(kv, seq, take), 0);
		bs.seq = seq;
		bs.pos = pos + done;
		bs.n_tokens = take;
		bs.logits = done + take == n;
		b.tokens = ids + done;
		b.n_tokens = take;
		b.seqs = &bs;
		b.n_seqs = 1;
		ck_assert_msg(be_step(r->be, &b, &lg, &nl, &e) == 0, "%s",
		    e.msg);
		ck_assert_int_eq(nl, bs.logits ? 1 : 0);
		done += take;
	}
	ck_assert_ptr_nonnull(lg);
	memcpy(out, lg, (size_t)r->n_vocab * sizeof(float));
}

int
vec_argmax(const float *v, int n)
{
	int i, best = 0;

	for (i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

void
vec_logsoftmax(const float *v, int n, double *lp)
{
	double mx = v[vec_argmax(v, n)], sum = 0;
	int i;

	for (i = 0; i < n; i++)
		sum += exp((double)v[i] - mx);
	for (i = 0; i < n; i++)
		lp[i] = (double)v[i] - mx - log(sum);
}
