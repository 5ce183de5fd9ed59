#include "refcheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fixtures.h"
#include "json.h"
#include "kvcache.h"
#include "model.h"
#include "rig.h"

#define REF_MAX_IDS 1024

struct json *
ref_load(const char *rel)
{
	char *path = fx_path(rel);
	char err[256];
	struct json *j;

	ck_assert_msg(path != NULL, "%s missing", rel);
	j = json_parse_file(path, err, sizeof(err));
	ck_assert_msg(j != NULL, "%s", err);
	free(path);
	return j;
}

int
ref_ids(const struct json *a, int32_t *ids, int cap)
{
	size_t i;

	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(a->type, JSON_ARRAY);
	ck_assert_int_le((int)a->n, cap);
	for (i = 0; i < a->n; i++)
		ids[i] = (int32_t)a->items[i].num;
	return (int)a->n;
}

const struct json *
ref_result(const struct json *ref, const char *file, const char *key)
{
	const struct json *f = json_get(json_get(json_get(ref, "files"),
	    file), "results");

	for (size_t i = 0; f != NULL && i < f->n; i++)
		if (strcmp(json_get(json_at(f, i), "prompt")->str, key) == 0)
			return json_at(f, i);
	return NULL;
}

void
ref_greedy(struct rig *r, const int32_t *prompt, int np, int chunk,
    int n_gen, int32_t *ids, float *lg)
{
	struct kv_cache *kv = be_kv(r->be);
	float *cur = malloc((size_t)r->n_vocab * sizeof(float));
	int seq, i;

	ck_assert_ptr_nonnull(cur);
	seq = kv_seq_new(kv);
	ck_assert_int_ge(seq, 0);
	rig_feed(r, seq, 0, prompt, np, chunk, cur);
	for (i = 0; i < n_gen; i++) {
		ids[i] = vec_argmax(cur, r->n_vocab);
		if (lg != NULL)
			memcpy(lg + (size_t)i * (size_t)r->n_vocab, cur,
			    (size_t)r->n_vocab * sizeof(float));
		if (i + 1 < n_gen)
			rig_feed(r, seq, np + i, &ids[i], 1, 0, cur);
	}
	ck_assert_int_eq(kv_seq_free(kv, seq), 0);
	free(cur);
}

/* Logit gap between the best and the second best token. */
static double
ref_top_gap(const float *v, int n)
{
	int i, best = vec_argmax(v, n);
	double second = -INFINITY;

	for (i = 0; i < n; i++)
		if (i != best && v[i] > second)
			second = v[i];
	return (double)v[best] - second;
}

/* |our logprob - reference| over the reference's top-10 tokens. */
static double
ref_top10_err(const struct json *top10, const double *lp)
{
	double worst = 0, d;
	size_t i;

	ck_assert_ptr_nonnull(top10);
	ck_assert_int_eq((int)top10->n, 10);
	for (i = 0; i < top10->n; i++) {
		const struct json *pair = &top10->items[i];
		int id = (int)pair->items[0].num;

		d = fabs(lp[id] - log(pair->items[1].num));
		if (d > worst)
			worst = d;
	}
	return worst;
}

/* The teacher-forced steps; returns the worst top-1/top-2 error. */
static double
ref_steps(struct rig *r, const struct ref_case *c, const struct json *res,
    const int32_t *gen, int ng, const float *lg, double *lp)
{
	const struct json *steps = json_get(res, "greedy_step_top2");
	double worst = 0;

	for (int i = 0; i < ng; i++) {
		const struct json *st = json_at(steps, (size_t)i);
		const float *y = lg + (size_t)i * (size_t)r->n_vocab;
		int t1 = (int)st->items[0].num, t2 = (int)st->items[2].num;
		double e1, e2, gap;

		ck_assert_int_eq(t1, gen[i]);
		vec_logsoftmax(y, r->n_vocab, lp);
		gap = lp[vec_argmax(y, r->n_vocab)] - lp[t1];
		e1 = fabs(lp[t1] - st->items[1].num);
		e2 = fabs(lp[t2] - st->items[3].num);
		ck_assert_msg(gap <= c->tol && e1 <= c->tol && e2 <= c->tol,
		    "%s %s step %d: gap %g, top1 error %g, top2 error %g, "
		    "tolerance %g", c->file, json_get(res, "prompt")->str, i,
		    gap, e1, e2, c->tol);
		if (getenv("CF_DEBUG"))
			printf("step %d: t1 %d %g (%g) t2 %d %g (%g)\n", i, t1,
			    lp[t1], st->items[1].num, t2, lp[t2],
			    st->items[3].num);
		worst = fmax(worst, fmax(e1, e2));
	}
	return worst;
}

void
ref_check_result(struct rig *r, const struct ref_case *c,
    const struct json *res, bool kv_f32)
{
	const struct json *ref = kv_f32 ? json_get(res, "kv_f32") : res;
	int32_t prompt[REF_MAX_IDS], gen[64], ids[64];
	int np, ng, i, seq;
	struct kv_cache *kv = be_kv(r->be);
	double *lp, err, worst = 0;
	float *lg;

	np = ref_ids(json_get(res, "prompt_ids"), prompt, REF_MAX_IDS);
	ng = ref_ids(json_get(ref, "generated_ids"), gen, 64);
	lg = malloc((size_t)ng * (size_t)r->n_vocab * sizeof(float));
	lp = malloc((size_t)r->n_vocab * sizeof(double));
	ck_assert(lg != NULL && lp != NULL);

	/* Teacher-forced: the reference ids fed back. */
	seq = kv_seq_new(kv);
	rig_feed(r, seq, 0, prompt, np, 0, lg);
	for (i = 1; i < ng; i++)
		rig_feed(r, seq, np + i - 1, &gen[i - 1], 1, 0,
		    lg + (size_t)i * (size_t)r->n_vocab);
	ck_assert_int_eq(kv_seq_free(kv, seq), 0);
	vec_logsoftmax(lg, r->n_vocab, lp);
	err = ref_top10_err(json_get(ref, "top10"), lp);
	ck_assert_msg(err <= c->tol, "%s %s%s: top-10 logprob error %g > %g",
	    c->file, json_get(res, "prompt")->str, kv_f32 ? " kv_f32" : "",
	    err, c->tol);
	if (!kv_f32)
		worst = ref_steps(r, c, res, gen, ng, lg, lp);
	if (c->exact) {
		ref_greedy(r, prompt, np, 0, ng, ids, lg);
		for (i = 0; i < ng; i++) {
			if (kv_f32 && ref_top_gap(lg + (size_t)i *
			    (size_t)r->n_vocab, r->n_vocab) < REF_NEAR_TIE)
				break;
			ck_assert_msg(ids[i] == gen[i], "%s %s%s: greedy id %d "
			    "is %d, want %d", c->file,
			    json_get(res, "prompt")->str,
			    kv_f32 ? " kv_f32" : "", i, (int)ids[i],
			    (int)gen[i]);
		}
	}
	printf("%s %s%s: top-10 error %.2e, step error %.2e\n", c->file,
	    json_get(res, "prompt")->str, kv_f32 ? " kv_f32" : "", err, worst);
	free(lp);
	free(lg);
}
