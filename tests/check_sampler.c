/*
 * check_sampler.c - the sampling chain on constructed logits.  Expected
 * probabilities and log-probabilities are computed here from the formulas
 * in sampler.h (softmax, log-softmax, the truncation rules) in double
 * precision; the fixed-seed id sequences come from an independent Python
 * model of the documented generator and draw (splitmix64, xoshiro256**,
 * a 53-bit uniform, a walk over the cumulative weights).
 */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/suite.h"
#include "sampler.h"


#define TOL 1e-6

/* Filters off, temperature 1, fixed seed: the plain softmax. */
static struct sampler_params
plain(void)
{
	struct sampler_params p = sampler_params_default();

	p.temp = 1.0f;
	p.top_k = 0;
	p.top_p = 1.0f;
	p.min_p = 0.0f;
	p.seed = 42;
	return p;
}

static struct sampler *
mk(const struct sampler_params *p, int n_vocab)
{
	struct cp_err e = { 0 };
	struct sampler *s = sampler_new(p, n_vocab, &e);

	ck_assert_msg(s != NULL, "%s", e.msg);
	return s;
}

/* softmax(l[i] / t) over the ids in keep[0..n), into prob[0..n). */
static void
softmax_over(const float *l, const int *keep, int n, double t, double *prob)
{
	double m = -INFINITY, z = 0;
	int i;

	for (i = 0; i < n; i++)
		if (l[keep[i]] / t > m)
			m = l[keep[i]] / t;
	for (i = 0; i < n; i++)
		z += exp(l[keep[i]] / t - m);
	for (i = 0; i < n; i++)
		prob[i] = exp(l[keep[i]] / t - m) / z;
}

static double
log_softmax(const float *l, int n, int id)
{
	double m = -INFINITY, z = 0;
	int i;

	for (i = 0; i < n; i++)
		if (l[i] > m)
			m = l[i];
	for (i = 0; i < n; i++)
		z += exp(l[i] - m);
	ck_assert_double_ge(z, 1.0);
	return l[id] - m - log(z);
}

/* Sample once and check the candidates are exactly keep[0..n) with the
 * probabilities softmax(l / t) over them, in that order. */
static void
expect_cands(struct sampler *s, const float *l, const int *keep, int n,
    double t)
{
	struct sampler_out out;
	int32_t ids[64];
	float probs[64];
	double want[64];
	int i, got;

	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	got = sampler_candidates(s, ids, probs, 64);
	ck_assert_int_eq(got, n);
	softmax_over(l, keep, n, t, want);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(ids[i], keep[i]);
		ck_assert_double_eq_tol(probs[i], want[i], TOL);
	}
	for (i = 0; i < n; i++)
		if (out.id == keep[i])
			return;
	ck_abort_msg("sampled id %d is not a candidate", out.id);
}

/* expect_cands() on a fresh sampler of p over n_vocab ids. */
static void
expect_kept(const struct sampler_params *p, int n_vocab, const float *l,
    const int *keep, int n, double t)
{
	struct sampler *s = mk(p, n_vocab);

	expect_cands(s, l, keep, n, t);
	sampler_free(s);
}

/* Deterministic test logits. */
static uint64_t lcg = 987654321;

static float
rnd_logit(void)
{
	lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((double)(lcg >> 11) * 0x1.0p-53 * 20.0 - 10.0);
}

START_TEST(test_defaults)
{
	struct sampler_params p = sampler_params_default();

	ck_assert_float_eq(p.temp, 0.8f);
	ck_assert_int_eq(p.top_k, 40);
	ck_assert_float_eq(p.top_p, 0.95f);
	ck_assert_float_eq(p.min_p, 0.05f);
	ck_assert_float_eq(p.repeat_penalty, 1.0f);
	ck_assert_int_eq(p.repeat_last_n, 64);
	ck_assert_uint_eq(p.seed, SAMPLER_SEED_RANDOM);
	ck_assert_int_eq(p.n_logprobs, 0);
	ck_assert_int_eq(p.max_tokens, -1);
	ck_assert(!p.ignore_eos);
	ck_assert_int_eq(sampler_params_check(&p, NULL), 0);
}
END_TEST
SUITE_TEST("core", test_defaults);

static void
expect_bad(const struct sampler_params *p, const char *field)
{
	struct cp_err e = { 0 };

	ck_assert_int_eq(sampler_params_check(p, &e), -EINVAL);
	ck_assert_int_eq(e.code, -EINVAL);
	ck_assert_msg(strstr(e.msg, field) != NULL, "'%s' lacks '%s'", e.msg,
	    field);
	ck_assert_ptr_null(sampler_new(p, 10, NULL));
}

START_TEST(test_params_check)
{
	struct sampler_params p, q;

	p = plain();
	q = p; q.temp = -0.1f; expect_bad(&q, "temp");
	q = p; q.temp = NAN; expect_bad(&q, "temp");
	q = p; q.temp = INFINITY; expect_bad(&q, "temp");
	q = p; q.top_k = -1; expect_bad(&q, "top_k");
	q = p; q.top_p = 1.01f; expect_bad(&q, "top_p");
	q = p; q.top_p = -0.01f; expect_bad(&q, "top_p");
	q = p; q.top_p = NAN; expect_bad(&q, "top_p");
	q = p; q.min_p = 1.5f; expect_bad(&q, "min_p");
	q = p; q.min_p = NAN; expect_bad(&q, "min_p");
	q = p; q.repeat_penalty = 0; expect_bad(&q, "repeat_penalty");
	q = p; q.repeat_penalty = -1; expect_bad(&q, "repeat_penalty");
	q = p; q.repeat_penalty = INFINITY; expect_bad(&q, "repeat_penalty");
	q = p; q.repeat_last_n = -1; expect_bad(&q, "repeat_last_n");
	q = p; q.repeat_last_n = SAMPLER_MAX_LAST_N + 1;
	expect_bad(&q, "repeat_last_n");
	q = p; q.n_logprobs = -1; expect_bad(&q, "n_logprobs");
	q = p; q.n_logprobs = SAMPLER_MAX_LOGPROBS + 1;
	expect_bad(&q, "n_logprobs");
	q = p; q.max_tokens = -2; expect_bad(&q, "max_tokens");
	ck_assert_int_eq(sampler_params_check(NULL, NULL), -EINVAL);

	/* the edges of every range are accepted */
	q = p;
	q.temp = 0; q.top_k = 0; q.top_p = 0; q.min_p = 1;
	q.repeat_last_n = SAMPLER_MAX_LAST_N;
	q.n_logprobs = SAMPLER_MAX_LOGPROBS; q.max_tokens = 0;
	ck_assert_int_eq(sampler_params_check(&q, NULL), 0);
	q.top_p = 1; q.min_p = 0; q.repeat_last_n = 0; q.n_logprobs = 0;
	q.max_tokens = -1; q.repeat_penalty = 1e-3f;
	ck_assert_int_eq(sampler_params_check(&q, NULL), 0);
}
END_TEST
SUITE_TEST("core", test_params_check);

START_TEST(test_new_rejects_vocab)
{
	struct sampler_params p = plain();
	struct cp_err e = { 0 };

	ck_assert_ptr_null(sampler_new(&p, 0, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "n_vocab"));
	ck_assert_ptr_null(sampler_new(&p, -5, NULL));
	ck_assert_ptr_null(sampler_new(&p, SAMPLER_MAX_VOCAB + 1, NULL));
	ck_assert_ptr_null(sampler_new(NULL, 10, NULL));
	sampler_free(NULL);
}
END_TEST
SUITE_TEST("core", test_new_rejects_vocab);

START_TEST(test_greedy)
{
	struct sampler_params p = sampler_params_default();
	const float l[6] = { 0.5f, 2.0f, -1.0f, 3.0f, 3.0f, 2.9f };
	struct sampler_out out;
	struct sampler *s;
	int32_t id;
	float pr;

	p.temp = 0;
	p.seed = 1;
	s = mk(&p, 6);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	/* the argmax, ties to the lowest id */
	ck_assert_int_eq(out.id, 3);
	ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
	ck_assert_int_eq(sampler_candidates(s, &id, &pr, 1), 1);
	ck_assert_int_eq(id, 3);
	ck_assert_float_eq(pr, 1.0f);
	ck_assert_double_eq_tol(out.logprob, log_softmax(l, 6, 3), TOL);
	ck_assert_int_eq(sampler_n_sampled(s), 1);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_greedy);

START_TEST(test_temperature_exact)
{
	const float l[6] = { 1.5f, -0.25f, 0.75f, 2.0f, -3.0f, 0.0f };
	const int all[6] = { 0, 1, 2, 3, 4, 5 };
	const float temps[4] = { 1.0f, 0.5f, 2.0f, 0.1f };
	struct sampler_params p = plain();
	int i;

	for (i = 0; i < 4; i++) {
		p.temp = temps[i];
		/* no filter ranks them: id order */
		expect_kept(&p, 6, l, all, 6, temps[i]);
	}
}
END_TEST
SUITE_TEST("core", test_temperature_exact);

START_TEST(test_top_k)
{
	/* ids 2 and 7 tie at the boundary of the top 3 */
	const float l[10] = { 0.1f, 3.0f, 1.0f, -2.0f, 0.5f,
	    4.0f, -1.0f, 1.0f, 0.9f, 0.0f };
	const int keep3[3] = { 5, 1, 2 };
	const int keep4[4] = { 5, 1, 2, 7 };
	const int keep1[1] = { 5 };
	struct sampler_params p = plain();
	struct sampler *s;

	p.top_k = 3;
	expect_kept(&p, 10, l, keep3, 3, 1.0);
	p.top_k = 4;
	p.temp = 0.5f;
	expect_kept(&p, 10, l, keep4, 4, 0.5);
	p.top_k = 1;
	expect_kept(&p, 10, l, keep1, 1, 0.5);
	/* k >= n_vocab keeps everything, unranked */
	p.top_k = 10;
	p.temp = 1.0f;
	s = mk(&p, 10);
	ck_assert_int_eq(sampler_sample(s, l, &(struct sampler_out){ 0 }), 0);
	ck_assert_int_eq(sampler_candidates(s, NULL, NULL, 0), 10);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_top_k);

/* Probabilities 0.1, 0.4, 0.2, 0.3 (ids 0..3) as logits. */
static void
four_probs(float *l)
{
	l[0] = logf(0.1f);
	l[1] = logf(0.4f);
	l[2] = logf(0.2f);
	l[3] = logf(0.3f);
}

START_TEST(test_top_p)
{
	const int keep1[1] = { 1 }, keep2[2] = { 1, 3 }, keep3[3] = { 1, 3, 2 };
	const int keep4[4] = { 1, 3, 2, 0 };
	struct sampler_params p = plain();
	float l[4];

	four_probs(l);
	/* cumulative in rank order: 0.4, 0.7, 0.9, 1.0 */
	p.top_p = 0.65f;
	expect_kept(&p, 4, l, keep2, 2, 1.0);
	p.top_p = 0.75f;
	expect_kept(&p, 4, l, keep3, 3, 1.0);
	p.top_p = 0.95f;
	expect_kept(&p, 4, l, keep4, 4, 1.0);
	p.top_p = 0.3f;
	expect_kept(&p, 4, l, keep1, 1, 1.0);
	p.top_p = 0.0f;
	expect_kept(&p, 4, l, keep1, 1, 1.0);
	/* the nucleus is chosen at temperature 1, then tempered */
	p.top_p = 0.65f;
	p.temp = 3.0f;
	expect_kept(&p, 4, l, keep2, 2, 3.0);
}
END_TEST
SUITE_TEST("core", test_top_p);

START_TEST(test_top_p_after_top_k)
{
	const int keep1[1] = { 1 }, keep2[2] = { 1, 3 };
	struct sampler_params p = plain();
	float l[4];

	four_probs(l);
	/* alone, 0.5 needs 0.4 + 0.3 */
	p.top_p = 0.5f;
	expect_kept(&p, 4, l, keep2, 2, 1.0);
	/* after top-2 the renormalised 4/7 >= 0.5 already */
	p.top_k = 2;
	expect_kept(&p, 4, l, keep1, 1, 1.0);
	p.top_p = 0.6f;
	expect_kept(&p, 4, l, keep2, 2, 1.0);
}
END_TEST
SUITE_TEST("core", test_top_p_after_top_k);

static const float *sort_l;

static int
by_rank(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (sort_l[x] != sort_l[y])
		return sort_l[x] > sort_l[y] ? -1 : 1;
	return x < y ? -1 : 1;
}

/* Large vocabularies: top-p alone and top-k alone against a full sort. */
START_TEST(test_large_vocab_against_sort)
{
	enum { NV = 150000 };
	struct sampler_params p = plain();
	struct sampler_out out;
	static float l[NV];
	static int rank[NV], ids[NV];
	static float probs[NV];
	struct sampler *s;
	double z = 0, cum = 0, m;
	int i, n, want;

	for (i = 0; i < NV; i++) {
		l[i] = rnd_logit();
		rank[i] = i;
	}
	l[777] = l[778] = 11.0f;	/* a tie at the top */
	sort_l = l;
	qsort(rank, NV, sizeof(rank[0]), by_rank);
	m = l[rank[0]];
	for (i = 0; i < NV; i++)
		z += exp(l[i] - m);

	p.top_p = 0.9f;
	s = mk(&p, NV);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	for (want = 0; want < NV; want++) {
		cum += exp(l[rank[want]] - m) / z;
		if (cum >= 0.9f)
			break;
	}
	want++;
	n = sampler_candidates(s, ids, probs, NV);
	ck_assert_int_eq(n, want);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], rank[i]);
	sampler_free(s);

	p.top_p = 1.0f;
	p.top_k = 40;
	s = mk(&p, NV);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	n = sampler_candidates(s, ids, probs, NV);
	ck_assert_int_eq(n, 40);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], rank[i]);
	ck_assert_int_eq(ids[0], 777);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_large_vocab_against_sort);

START_TEST(test_min_p)
{
	/* probabilities 0.5, 0.2, 0.04, 0.03, 0.23 */
	const float l[5] = { logf(0.5f), logf(0.2f), logf(0.04f), logf(0.03f),
	    logf(0.23f) };
	const int keep_a[3] = { 0, 1, 4 }, keep_b[2] = { 0, 4 };
	const int keep_c[2] = { 0, 4 };
	struct sampler_params p = plain();

	/* threshold 0.1 * 0.5 = 0.05: unranked, so id order */
	p.min_p = 0.1f;
	expect_kept(&p, 5, l, keep_a, 3, 1.0);
	/* 0.45 * 0.5 = 0.225 keeps 0.23 but not 0.2 */
	p.min_p = 0.45f;
	p.temp = 0.8f;
	expect_kept(&p, 5, l, keep_b, 2, 0.8);
	/* with top-p 0.96 (which alone keeps all but 0.03) the order is
	 * by rank and min-p still cuts at 0.225 */
	p.top_p = 0.96f;
	expect_kept(&p, 5, l, keep_c, 2, 0.8);
}
END_TEST
SUITE_TEST("core", test_min_p);

START_TEST(test_min_p_one)
{
	const float l[4] = { 1.0f, 2.0f, 2.0f, 1.999f };
	const int keep[2] = { 1, 2 };
	struct sampler_params p = plain();

	p.min_p = 1.0f;
	expect_kept(&p, 4, l, keep, 2, 1.0);
}
END_TEST
SUITE_TEST("core", test_min_p_one);

START_TEST(test_repeat_penalty)
{
	const float l[5] = { 2.0f, -1.0f, 0.5f, 3.0f, -2.0f };
	/* ids 0 and 1 are in the last 3 tokens (0, 1, 1); 4 fell out */
	const float pen[5] = { 1.0f, -2.0f, 0.5f, 3.0f, -2.0f };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	int i, j;

	p.repeat_penalty = 2.0f;
	p.repeat_last_n = 3;
	p.n_logprobs = 5;
	s = mk(&p, 5);
	ck_assert_int_eq(sampler_accept(s, 4), 0);
	ck_assert_int_eq(sampler_accept(s, 0), 0);
	ck_assert_int_eq(sampler_accept(s, 1), 0);
	ck_assert_int_eq(sampler_accept(s, 1), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.n_top, 5);
	for (i = 0; i < 5; i++) {
		j = out.top[i].id;
		ck_assert_double_eq_tol(out.top[i].logprob,
		    log_softmax(pen, 5, j), TOL);
	}
	/* ranked by the penalised logits: 3, 0, 2, then the -2 tie */
	ck_assert_int_eq(out.top[0].id, 3);
	ck_assert_int_eq(out.top[1].id, 0);
	ck_assert_int_eq(out.top[2].id, 2);
	ck_assert_int_eq(out.top[3].id, 1);
	ck_assert_int_eq(out.top[4].id, 4);
	ck_assert_double_eq_tol(out.logprob, log_softmax(pen, 5, out.id), TOL);
	sampler_free(s);

	/* the same through the prompt path, oldest ids beyond the window */
	s = mk(&p, 5);
	ck_assert_int_eq(sampler_accept_prompt(s, (const int32_t[]){ 4, 4, 4,
	    0, 1, 1 }, 6), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	for (i = 0; i < 5; i++)
		ck_assert_double_eq_tol(out.top[i].logprob,
		    log_softmax(pen, 5, out.top[i].id), TOL);
	/* reset forgets the history */
	sampler_reset(s);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	for (i = 0; i < 5; i++)
		ck_assert_double_eq_tol(out.top[i].logprob,
		    log_softmax(l, 5, out.top[i].id), TOL);
	sampler_free(s);

	/* a window of 0 turns the penalty off */
	p.repeat_last_n = 0;
	s = mk(&p, 5);
	ck_assert_int_eq(sampler_accept(s, 3), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_double_eq_tol(out.top[0].logprob, log_softmax(l, 5, 3), TOL);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_repeat_penalty);

START_TEST(test_repeat_penalty_changes_greedy)
{
	const float l[3] = { 3.0f, 2.0f, -1.0f };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;

	p.temp = 0;
	p.repeat_penalty = 2.0f;
	s = mk(&p, 3);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.id, 0);
	ck_assert_int_eq(sampler_accept(s, 0), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.id, 1);		/* 3 / 2 < 2 */
	ck_assert_int_eq(sampler_accept(s, 1), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.id, 0);		/* 1.5 > 1 */
	sampler_free(s);

	/* a penalty below 1 boosts; overflow saturates instead of inf */
	p.repeat_penalty = 1e-3f;
	s = mk(&p, 3);
	ck_assert_int_eq(sampler_accept(s, 1), 0);
	ck_assert_int_eq(sampler_sample(s, (const float[]){ 3e37f, 3.4e37f,
	    0.0f }, &out), 0);
	ck_assert_int_eq(out.id, 1);
	ck_assert(isfinite(out.logprob));
	ck_assert_double_eq_tol(out.logprob, 0.0, TOL);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_repeat_penalty_changes_greedy);

START_TEST(test_logprobs)
{
	enum { NV = 50 };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	float l[NV];
	int rank[NV], i, r;

	for (i = 0; i < NV; i++) {
		l[i] = rnd_logit();
		rank[i] = i;
	}
	l[10] = l[20] = 12.0f;		/* equal best: lower id first */
	sort_l = l;
	qsort(rank, NV, sizeof(rank[0]), by_rank);
	p.n_logprobs = 7;
	p.temp = 1.3f;
	p.top_k = 20;
	s = mk(&p, NV);
	for (r = 0; r < 10; r++) {
		ck_assert_int_eq(sampler_sample(s, l, &out), 0);
		ck_assert_int_eq(out.n_top, 7);
		ck_assert_int_eq(out.top[0].id, 10);
		ck_assert_int_eq(out.top[1].id, 20);
		for (i = 0; i < 7; i++) {
			ck_assert_int_eq(out.top[i].id, rank[i]);
			ck_assert_double_eq_tol(out.top[i].logprob,
			    log_softmax(l, NV, rank[i]), 1e-5);
		}
		/* the model's distribution, not the tempered one */
		ck_assert_double_eq_tol(out.logprob,
		    log_softmax(l, NV, out.id), 1e-5);
	}
	sampler_free(s);

	/* fewer finite logits than requested entries */
	p.n_logprobs = SAMPLER_MAX_LOGPROBS;
	s = mk(&p, 4);
	ck_assert_int_eq(sampler_sample(s, (const float[]){ -INFINITY, 1.0f,
	    -INFINITY, 0.0f }, &out), 0);
	ck_assert_int_eq(out.n_top, 2);
	ck_assert_int_eq(out.top[0].id, 1);
	ck_assert_double_eq_tol(out.top[0].logprob, -log1p(exp(-1.0)), TOL);
	ck_assert_int_eq(out.top[1].id, 3);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_logprobs);

/*
 * logprob off (and no top entries): the same ids from the same seed, greedy
 * and drawn, the logprob reported as 0, and an all -inf row still refused.
 */
START_TEST(test_logprob_off)
{
	enum { NV = 300 };
	struct sampler_params p = plain(), q;
	struct sampler_out a, b;
	struct sampler *sa, *sb;
	float l[NV];
	int i, r, t;

	for (t = 0; t < 2; t++) {
		p.temp = t == 0 ? 0.0f : 0.9f;
		p.top_k = t == 0 ? 0 : 30;
		q = p;
		q.logprob = false;
		sa = mk(&p, NV);
		sb = mk(&q, NV);
		for (r = 0; r < 40; r++) {
			for (i = 0; i < NV; i++)
				l[i] = rnd_logit();
			ck_assert_int_eq(sampler_sample(sa, l, &a), 0);
			ck_assert_int_eq(sampler_sample(sb, l, &b), 0);
			ck_assert_int_eq(a.id, b.id);
			ck_assert_double_eq_tol(a.logprob,
			    log_softmax(l, NV, a.id), 1e-5);
			ck_assert(a.logprob < 0);
			ck_assert(b.logprob == 0);
			ck_assert_int_eq(b.n_top, 0);
		}
		for (i = 0; i < NV; i++)
			l[i] = -INFINITY;
		ck_assert_int_eq(sampler_sample(sb, l, &b), -EDOM);
		ck_assert_int_eq(b.id, -1);
		sampler_free(sa);
		sampler_free(sb);
	}
}
END_TEST
SUITE_TEST("core", test_logprob_off);

/*
 * Three samplers sharing one draw scratch, their draws interleaved (with a
 * repetition penalty, top-k and top-p at work): each draws the ids and
 * logprobs of a sampler of its own fed the same rows.
 */
START_TEST(test_shared_scratch)
{
	enum { NV = 400, NS = 3 };
	struct sampler_params p = plain();
	struct sampler *own[NS], *shared[NS];
	struct sampler_ws *ws = sampler_ws_new(NV);
	struct sampler_out a, b;
	struct cp_err e = { 0 };
	float l[NV];

	ck_assert_ptr_nonnull(ws);
	ck_assert_ptr_null(sampler_new_ws(&p, NV + 1, ws, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	p.repeat_penalty = 1.3f;
	p.top_k = 50;
	p.top_p = 0.9f;
	p.n_logprobs = 3;
	for (int k = 0; k < NS; k++) {
		p.seed = 100 + (uint64_t)k;
		p.temp = k == 0 ? 0.0f : 0.7f;
		own[k] = mk(&p, NV);
		shared[k] = sampler_new_ws(&p, NV, ws, &e);
		ck_assert_msg(shared[k] != NULL, "%s", e.msg);
	}
	for (int r = 0; r < 30; r++)
		for (int k = 0; k < NS; k++) {
			for (int i = 0; i < NV; i++)
				l[i] = rnd_logit();
			ck_assert_int_eq(sampler_sample(own[k], l, &a), 0);
			ck_assert_int_eq(sampler_sample(shared[k], l, &b), 0);
			ck_assert_int_eq(a.id, b.id);
			ck_assert(a.logprob == b.logprob);
			ck_assert_int_eq(a.n_top, b.n_top);
			ck_assert_mem_eq(a.top, b.top, sizeof(a.top[0]) *
			    (size_t)a.n_top);
			ck_assert_int_eq(sampler_accept(own[k], a.id), 0);
			ck_assert_int_eq(sampler_accept(shared[k], b.id), 0);
		}
	for (int k = 0; k < NS; k++) {
		sampler_free(own[k]);
		sampler_free(shared[k]);
	}
	sampler_ws_free(ws);
}
END_TEST
SUITE_TEST("core", test_shared_scratch);

/* Ids from 24 draws with seed 42 over logits6; from the Python model. */
static const float logits6[6] = { -1.2f, 0.3f, 1.1f, -0.4f, 0.8f, 0.05f };

START_TEST(test_golden_sequence)
{
	static const int full[24] = { 1, 2, 4, 5, 5, 4, 4, 4, 4, 3, 4, 2, 4,
	    2, 4, 4, 3, 4, 4, 4, 1, 1, 2, 3 };
	static const int topk[24] = { 2, 2, 4, 1, 1, 4, 4, 1, 4, 4, 4, 2, 4,
	    2, 4, 1, 4, 1, 4, 4, 2, 2, 2, 4 };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	int i;

	s = mk(&p, 6);
	for (i = 0; i < 24; i++) {
		ck_assert_int_eq(sampler_sample(s, logits6, &out), 0);
		ck_assert_int_eq(out.id, full[i]);
	}
	sampler_free(s);
	p.top_k = 3;
	p.temp = 0.7f;
	s = mk(&p, 6);
	for (i = 0; i < 24; i++) {
		ck_assert_int_eq(sampler_sample(s, logits6, &out), 0);
		ck_assert_int_eq(out.id, topk[i]);
	}
	/* reset restarts the stream */
	sampler_reset(s);
	for (i = 0; i < 24; i++) {
		ck_assert_int_eq(sampler_sample(s, logits6, &out), 0);
		ck_assert_int_eq(out.id, topk[i]);
	}
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_golden_sequence);

static void
draw_many(uint64_t seed, int n, int *ids)
{
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	int i;

	p.seed = seed;
	s = mk(&p, 6);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(sampler_sample(s, logits6, &out), 0);
		ids[i] = out.id;
	}
	sampler_free(s);
}

START_TEST(test_seeds)
{
	int a[200], b[200], c[200];
	struct sampler_params p = plain();
	struct sampler *s;

	draw_many(7, 200, a);
	draw_many(7, 200, b);
	draw_many(8, 200, c);
	ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
	ck_assert_int_ne(memcmp(a, c, sizeof(a)), 0);
	s = mk(&p, 6);
	ck_assert_uint_eq(sampler_seed(s), 42);
	sampler_free(s);
	p.seed = SAMPLER_SEED_RANDOM;
	s = mk(&p, 6);
	ck_assert_uint_ne(sampler_seed(s), SAMPLER_SEED_RANDOM);
	ck_assert_uint_eq(sampler_get_params(s)->seed, sampler_seed(s));
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_seeds);

/* Chi-square of observed counts against probabilities; df = n - 1. */
static double
chi_square(const int *count, const double *prob, int n, int draws)
{
	double x = 0, e;
	int i;

	for (i = 0; i < n; i++) {
		e = prob[i] * draws;
		x += (count[i] - e) * (count[i] - e) / e;
	}
	return x;
}

START_TEST(test_frequencies)
{
	enum { DRAWS = 40000 };
	const float l[8] = { 0.0f, 1.0f, -0.5f, 0.7f, 2.0f, -1.0f, 0.3f,
	    1.5f };
	const int all[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	const int top5[5] = { 4, 7, 1, 3, 6 };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	int count[8] = { 0 }, cnt5[5] = { 0 }, i, j;
	double prob[8];

	/* all 8 at temperature 1: chi-square, 7 df, 0.1% point 24.32 */
	s = mk(&p, 8);
	for (i = 0; i < DRAWS; i++) {
		ck_assert_int_eq(sampler_sample(s, l, &out), 0);
		count[out.id]++;
	}
	sampler_free(s);
	softmax_over(l, all, 8, 1.0, prob);
	ck_assert_double_lt(chi_square(count, prob, 8, DRAWS), 24.32);

	/* top-5 at temperature 0.6: 4 df, 0.1% point 18.47 */
	p.top_k = 5;
	p.temp = 0.6f;
	p.seed = 99;
	s = mk(&p, 8);
	for (i = 0; i < DRAWS; i++) {
		ck_assert_int_eq(sampler_sample(s, l, &out), 0);
		for (j = 0; j < 5 && top5[j] != out.id; j++)
			;
		ck_assert_int_lt(j, 5);
		cnt5[j < 5 ? j : 4]++;
	}
	sampler_free(s);
	softmax_over(l, top5, 5, 0.6, prob);
	ck_assert_double_lt(chi_square(cnt5, prob, 5, DRAWS), 18.47);
}
END_TEST
SUITE_TEST("core", test_frequencies);

START_TEST(test_nonfinite)
{
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	float l[4] = { 1.0f, 2.0f, 0.5f, 0.0f };
	int i;

	s = mk(&p, 4);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_gt(sampler_candidates(s, NULL, NULL, 0), 0);
	l[2] = NAN;
	ck_assert_int_eq(sampler_sample(s, l, &out), -EDOM);
	ck_assert_int_eq(out.id, -1);
	ck_assert_int_eq(out.n_top, 0);
	ck_assert_int_eq(sampler_candidates(s, NULL, NULL, 0), 0);
	l[2] = INFINITY;
	ck_assert_int_eq(sampler_sample(s, l, &out), -EDOM);
	for (i = 0; i < 4; i++)
		l[i] = -INFINITY;
	ck_assert_int_eq(sampler_sample(s, l, &out), -EDOM);
	ck_assert_int_eq(sampler_n_sampled(s), 1);
	/* -inf is an impossible token, never drawn */
	l[1] = 0.0f;
	l[3] = 0.1f;
	for (i = 0; i < 200; i++) {
		ck_assert_int_eq(sampler_sample(s, l, &out), 0);
		ck_assert(out.id == 1 || out.id == 3);
	}
	sampler_free(s);
	p.temp = 0;
	s = mk(&p, 4);
	l[1] = l[3] = -INFINITY;
	ck_assert_int_eq(sampler_sample(s, l, &out), -EDOM);
	l[2] = -FLT_MAX;
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.id, 2);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_nonfinite);

START_TEST(test_eog)
{
	const float l[4] = { 0.0f, 1.0f, 5.0f, 0.5f };
	const int32_t eog[2] = { 2, 3 };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;
	int i;

	p.temp = 0;
	p.n_logprobs = 1;
	s = mk(&p, 4);
	ck_assert_int_eq(sampler_set_eog(s, (const int32_t[]){ 4 }, 1),
	    -EINVAL);
	ck_assert_int_eq(sampler_set_eog(s, eog, -1), -EINVAL);
	ck_assert_int_eq(sampler_set_eog(s, eog, 2), 0);
	ck_assert(sampler_is_eog(s, 2));
	ck_assert(sampler_is_eog(s, 3));
	ck_assert(!sampler_is_eog(s, 1));
	ck_assert(!sampler_is_eog(s, -1));
	ck_assert(!sampler_is_eog(s, 4));
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.id, 2);
	ck_assert_int_eq(out.finish, SAMPLER_FINISH_EOG);
	/* replacing the set drops the old ids */
	ck_assert_int_eq(sampler_set_eog(s, eog + 1, 1), 0);
	ck_assert(!sampler_is_eog(s, 2));
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
	sampler_free(s);

	/* ignore_eos masks them, but top-n still shows the model's view */
	p.ignore_eos = true;
	p.temp = 1.0f;
	s = mk(&p, 4);
	ck_assert_int_eq(sampler_set_eog(s, eog, 2), 0);
	for (i = 0; i < 100; i++) {
		ck_assert_int_eq(sampler_sample(s, l, &out), 0);
		ck_assert(out.id == 0 || out.id == 1);
		ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
		ck_assert_int_eq(out.top[0].id, 2);
		ck_assert_double_eq_tol(out.logprob,
		    log_softmax(l, 4, out.id), TOL);
	}
	/* min-p is relative to the best token that can still be drawn:
	 * exp(l - 1) >= 0.5 keeps ids 1 and 3 */
	sampler_free(s);
	p.min_p = 0.5f;
	s = mk(&p, 4);
	ck_assert_int_eq(sampler_set_eog(s, eog, 1), 0);
	expect_cands(s, l, (const int[]){ 1, 3 }, 2, 1.0);
	/* nothing but end-of-generation left */
	ck_assert_int_eq(sampler_set_eog(s, eog, 2), 0);
	ck_assert_int_eq(sampler_sample(s, (const float[]){ -INFINITY,
	    -INFINITY, 1.0f, 2.0f }, &out), -EDOM);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_eog);

/*
 * The workspace's end-of-generation set serves every sampler on it that
 * sets none of its own, including ignore_eos; a sampler's own set wins.
 */
START_TEST(test_eog_shared)
{
	const float l[4] = { 0.0f, 1.0f, 5.0f, 0.5f };
	const int32_t eog[2] = { 2, 3 };
	struct sampler_params p = plain();
	struct sampler_ws *ws = sampler_ws_new(4);
	struct sampler_out out;
	struct sampler *a, *b, *c;
	struct cp_err e = { 0 };

	ck_assert_ptr_nonnull(ws);
	ck_assert_int_eq(sampler_ws_set_eog(ws, (const int32_t[]){ 4 }, 1),
	    -EINVAL);
	ck_assert_int_eq(sampler_ws_set_eog(ws, eog, 2), 0);
	p.temp = 0;
	a = sampler_new_ws(&p, 4, ws, &e);
	p.ignore_eos = true;
	b = sampler_new_ws(&p, 4, ws, &e);
	p.ignore_eos = false;
	c = sampler_new_ws(&p, 4, ws, &e);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(sampler_set_eog(c, (const int32_t[]){ 1 }, 1), 0);
	ck_assert(sampler_is_eog(a, 2) && sampler_is_eog(a, 3));
	ck_assert(!sampler_is_eog(a, 1));
	ck_assert(sampler_is_eog(c, 1) && !sampler_is_eog(c, 2));
	ck_assert_int_eq(sampler_sample(a, l, &out), 0);
	ck_assert_int_eq(out.id, 2);
	ck_assert_int_eq(out.finish, SAMPLER_FINISH_EOG);
	ck_assert_int_eq(sampler_sample(b, l, &out), 0);
	ck_assert_int_eq(out.id, 1);
	ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
	ck_assert_int_eq(sampler_sample(c, l, &out), 0);
	ck_assert_int_eq(out.id, 2);
	ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
	sampler_free(c);
	sampler_free(b);
	sampler_free(a);
	sampler_ws_free(ws);
}
END_TEST
SUITE_TEST("core", test_eog_shared);

START_TEST(test_max_tokens)
{
	const float l[3] = { 0.0f, 1.0f, 2.0f };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;

	p.max_tokens = 3;
	s = mk(&p, 3);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.finish, SAMPLER_CONTINUE);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.finish, SAMPLER_FINISH_LENGTH);
	ck_assert_int_eq(sampler_sample(s, l, &out), -ERANGE);
	ck_assert_int_eq(out.id, -1);
	ck_assert_int_eq(sampler_n_sampled(s), 3);
	sampler_reset(s);
	ck_assert_int_eq(sampler_n_sampled(s), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	sampler_free(s);

	p.max_tokens = 0;
	s = mk(&p, 3);
	ck_assert_int_eq(sampler_sample(s, l, &out), -ERANGE);
	sampler_free(s);

	/* end-of-generation on the last allowed token reports EOG */
	p.max_tokens = 1;
	p.temp = 0;
	s = mk(&p, 3);
	ck_assert_int_eq(sampler_set_eog(s, (const int32_t[]){ 2 }, 1), 0);
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.id, 2);
	ck_assert_int_eq(out.finish, SAMPLER_FINISH_EOG);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_max_tokens);

START_TEST(test_accept_errors)
{
	const float l[3] = { 1.0f, 2.0f, 3.0f };
	struct sampler_params p = plain();
	struct sampler_out out;
	struct sampler *s;

	p.repeat_penalty = 4.0f;
	p.n_logprobs = 1;
	s = mk(&p, 3);
	ck_assert_int_eq(sampler_accept(s, -1), -EINVAL);
	ck_assert_int_eq(sampler_accept(s, 3), -EINVAL);
	ck_assert_int_eq(sampler_accept_prompt(s, (const int32_t[]){ 2, 7 }, 2),
	    -EINVAL);
	ck_assert_int_eq(sampler_accept_prompt(s, NULL, 1), -EINVAL);
	ck_assert_int_eq(sampler_accept_prompt(s, NULL, -1), -EINVAL);
	ck_assert_int_eq(sampler_accept_prompt(s, NULL, 0), 0);
	/* nothing was recorded: id 2 is unpenalised and still the best */
	ck_assert_int_eq(sampler_sample(s, l, &out), 0);
	ck_assert_int_eq(out.top[0].id, 2);
	ck_assert_double_eq_tol(out.top[0].logprob, log_softmax(l, 3, 2), TOL);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_accept_errors);

START_TEST(test_candidates_cap)
{
	const int all[6] = { 0, 1, 2, 3, 4, 5 };
	struct sampler_params p = plain();
	struct sampler *s;
	int32_t ids[2] = { -7, -7 };
	float probs[2];
	double want[6];

	s = mk(&p, 6);
	ck_assert_int_eq(sampler_candidates(s, ids, probs, 2), 0);
	expect_cands(s, logits6, all, 6, 1.0);
	ck_assert_int_eq(sampler_candidates(s, ids, probs, 1), 6);
	softmax_over(logits6, all, 6, 1.0, want);
	ck_assert_int_eq(ids[0], 0);
	ck_assert_int_eq(ids[1], -7);
	ck_assert_double_eq_tol(probs[0], want[0], TOL);
	sampler_free(s);
}
END_TEST
SUITE_TEST("core", test_candidates_cap);

SUITE_CASE("core", 60);

int
main(void)
{
	return suite_main(suite_registered("sampler"));
}
