/*
 * sampler.c - the sampling chain described in sampler.h.
 *
 * Scratch layout: cand[] holds (id, logit) pairs.  sampler_sample() fills
 * it in id order (cand[i].id == i) so that the penalty and the eog mask can
 * index it directly, then compacts, selects and sorts it in place; at the
 * end cand[0..n_cand) are the candidates of the draw and w[0..n_cand) their
 * unnormalised probabilities, summing to w_sum.
 *
 * Ranking is a strict total order: larger logit first, then lower id, so
 * every selection and sort below has exactly one correct result whatever
 * the algorithm, and the result does not depend on the machine.
 */
#include "sampler.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "grammar.h"

struct cand {
	int32_t id;
	float logit;
};

/* A set of end-of-generation ids: the list, and its bits for lookups. */
struct eog_set {
	int32_t *ids;		/* (n) */
	int n;
	uint8_t *bits;		/* (n_vocab bits), NULL while never set */
};

struct sampler {
	struct sampler_params p;	/* p.seed is the seed in use */
	int n_vocab;
	uint64_t rng[4];		/* xoshiro256** state */
	int n_sampled;

	int32_t *hist;		/* (hist_cap) ring of the last accepted ids */
	int hist_cap;		/* max(repeat_last_n, 1) */
	int hist_len;		/* valid entries, <= repeat_last_n */
	int hist_pos;		/* next slot written */
	uint8_t *seen;		/* ws->seen: (n_vocab bits) all clear outside
				   the penalty */

	const struct eog_set *eog;	/* &own_eog, or the workspace's */
	struct eog_set own_eog;		/* sampler_set_eog()'s */

	struct gmatch *gm;		/* grammar constraint (owned) or NULL */

	struct sampler_ws *own_ws;	/* scratch of its own, or NULL */
	struct cand *cand;	/* ws->cand: (n_vocab) scratch, see above */
	float *w;		/* ws->w: unnormalised final probabilities */
	int n_cand;		/* candidates of the last draw, 0 after a failure */
	double w_sum;		/* sum of w[0..n_cand) */
};

/* ---- random stream ---- */

static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t z;

	z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t
rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static void
rng_seed(uint64_t st[4], uint64_t seed)
{
	int i;

	for (i = 0; i < 4; i++)
		st[i] = splitmix64(&seed);
}

/* xoshiro256**: the next 64 random bits. */
static uint64_t
rng_next(uint64_t st[4])
{
	uint64_t r, t;

	r = rotl64(st[1] * 5, 7) * 9;
	t = st[1] << 17;
	st[2] ^= st[0];
	st[3] ^= st[1];
	st[1] ^= st[2];
	st[0] ^= st[3];
	st[2] ^= t;
	st[3] = rotl64(st[3], 45);
	return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double
rng_uniform(uint64_t st[4])
{
	return (double)(rng_next(st) >> 11) * 0x1.0p-53;
}

static uint64_t
seed_from_os(void)
{
	struct timespec ts;
	uint64_t seed, x;

	if (getrandom(&seed, sizeof(seed), 0) == (ssize_t)sizeof(seed) &&
	    seed != SAMPLER_SEED_RANDOM)
		return seed;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	x ^= (uint64_t)getpid() << 32;
	seed = splitmix64(&x);
	return seed == SAMPLER_SEED_RANDOM ? 0 : seed;
}

/* ---- bit sets over the vocabulary ---- */

static bool
bit_get(const uint8_t *b, int32_t i)
{
	return (b[(uint32_t)i >> 3] >> (i & 7)) & 1;
}

static void
bit_put(uint8_t *b, int32_t i, bool v)
{
	if (v)
		b[(uint32_t)i >> 3] |= (uint8_t)(1u << (i & 7));
	else
		b[(uint32_t)i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* ---- end-of-generation sets ---- */

/*
 * Replaces set by ids[0..n) of a vocabulary of n_vocab: 0, -EINVAL (set
 * unchanged) for an id out of range or n < 0, -ENOMEM.
 */
static int
eog_set_put(struct eog_set *set, int n_vocab, const int32_t *ids, int n)
{
	int32_t *copy = NULL;
	uint8_t *bits;
	int i;

	if (n < 0 || (n > 0 && ids == NULL))
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= n_vocab)
			return -EINVAL;
	if ((bits = set->bits) == NULL &&
	    (bits = calloc(((size_t)n_vocab + 7) / 8, 1)) == NULL)
		return -ENOMEM;
	set->bits = bits;
	if (n > 0) {
		if ((copy = malloc((size_t)n * sizeof(*copy))) == NULL)
			return -ENOMEM;
		memcpy(copy, ids, (size_t)n * sizeof(*copy));
	}
	for (i = 0; i < set->n; i++)
		bit_put(bits, set->ids[i], false);
	free(set->ids);
	set->ids = copy;
	set->n = n;
	for (i = 0; i < n; i++)
		bit_put(bits, copy[i], true);
	return 0;
}

static bool
eog_set_has(const struct eog_set *set, int32_t id)
{
	return set->n > 0 && bit_get(set->bits, id);
}

static void
eog_set_free(struct eog_set *set)
{
	free(set->ids);
	free(set->bits);
	memset(set, 0, sizeof(*set));
}

/* ---- ranking: selection and sorting without allocation ---- */

/* True when a ranks before b: larger logit, then lower id. */
static bool
cand_before(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/*
 * Heap whose root ranks last among h[0..n): restore it below node i.
 */
static void
heap_sift(struct cand *h, size_t n, size_t i)
{
	struct cand t;
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && cand_before(&h[c], &h[c + 1]))
			c++;
		if (!cand_before(&h[i], &h[c]))
			break;
		t = h[i];
		h[i] = h[c];
		h[c] = t;
		i = c;
	}
}

static void
heap_build(struct cand *h, size_t n)
{
	size_t i;

	for (i = n / 2; i-- > 0;)
		heap_sift(h, n, i);
}

/* Sort a heap (root ranking last) into ranking order, best first. */
static void
heap_sort_best_first(struct cand *h, size_t n)
{
	struct cand t;

	while (n > 1) {
		n--;
		t = h[0];
		h[0] = h[n];
		h[n] = t;
		heap_sift(h, n, 0);
	}
}

/* Sort c[0..n) into ranking order; O(n log n) in the worst case. */
static void
cand_sort(struct cand *c, size_t n)
{
	heap_build(c, n);
	heap_sort_best_first(c, n);
}

/*
 * Move the k best of c[0..n) (0 < k < n) to c[0..k), in ranking order.
 * A bounded heap: O(n log k), and near O(n) when most entries lose to the
 * heap's worst at first comparison, as they do for real logits.
 */
static void
cand_top_k(struct cand *c, size_t n, size_t k)
{
	size_t i;

	heap_build(c, k);
	for (i = k; i < n; i++) {
		if (cand_before(&c[i], &c[0])) {
			c[0] = c[i];
			heap_sift(c, k, 0);
		}
	}
	heap_sort_best_first(c, k);
}

/* ---- parameters ---- */

struct sampler_params
sampler_params_default(void)
{
	struct sampler_params p = {
		.temp = 0.8f,
		.top_k = 40,
		.top_p = 0.95f,
		.min_p = 0.05f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.seed = SAMPLER_SEED_RANDOM,
		.n_logprobs = 0,
		.logprob = true,
		.max_tokens = -1,
		.ignore_eos = false,
	};

	return p;
}

int
sampler_params_check(const struct sampler_params *p, struct cp_err *e)
{
	if (p == NULL)
		return cp_err_set(e, -EINVAL, "sampler: no parameters");
	if (!(p->temp >= 0 && p->temp <= FLT_MAX))
		return cp_err_set(e, -EINVAL, "sampler: temp = %g, expected "
		    "a finite value >= 0 (0 = greedy)", (double)p->temp);
	if (p->top_k < 0)
		return cp_err_set(e, -EINVAL, "sampler: top_k = %d, expected "
		    ">= 0 (0 = off)", p->top_k);
	if (!(p->top_p >= 0 && p->top_p <= 1))
		return cp_err_set(e, -EINVAL, "sampler: top_p = %g, expected "
		    "0 <= top_p <= 1 (1 = off)", (double)p->top_p);
	if (!(p->min_p >= 0 && p->min_p <= 1))
		return cp_err_set(e, -EINVAL, "sampler: min_p = %g, expected "
		    "0 <= min_p <= 1 (0 = off)", (double)p->min_p);
	if (!(p->repeat_penalty > 0 && p->repeat_penalty <= FLT_MAX))
		return cp_err_set(e, -EINVAL, "sampler: repeat_penalty = %g, "
		    "expected a finite value > 0 (1 = off)",
		    (double)p->repeat_penalty);
	if (p->repeat_last_n < 0 || p->repeat_last_n > SAMPLER_MAX_LAST_N)
		return cp_err_set(e, -EINVAL, "sampler: repeat_last_n = %d, "
		    "expected 0 <= repeat_last_n <= %d (0 = off)",
		    p->repeat_last_n, SAMPLER_MAX_LAST_N);
	if (p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS)
		return cp_err_set(e, -EINVAL, "sampler: n_logprobs = %d, "
		    "expected 0 <= n_logprobs <= %d", p->n_logprobs,
		    SAMPLER_MAX_LOGPROBS);
	if (p->max_tokens < -1)
		return cp_err_set(e, -EINVAL, "sampler: max_tokens = %d, "
		    "expected -1 (no limit) or >= 0", p->max_tokens);
	return 0;
}

/* ---- life cycle ---- */

struct sampler_ws {
	int n_vocab;
	struct cand *cand;
	float *w;
	uint8_t *seen;
	struct eog_set eog;	/* sampler_ws_set_eog() */
};

struct sampler_ws *
sampler_ws_new(int n_vocab)
{
	struct sampler_ws *ws;
	size_t nv = (size_t)n_vocab;

	if (n_vocab < 1 || n_vocab > SAMPLER_MAX_VOCAB ||
	    (ws = calloc(1, sizeof(*ws))) == NULL)
		return NULL;
	ws->n_vocab = n_vocab;
	ws->cand = calloc(nv, sizeof(*ws->cand));
	ws->w = calloc(nv, sizeof(*ws->w));
	ws->seen = calloc((nv + 7) / 8, 1);
	if (ws->cand == NULL || ws->w == NULL || ws->seen == NULL) {
		sampler_ws_free(ws);
		return NULL;
	}
	return ws;
}

void
sampler_ws_free(struct sampler_ws *ws)
{
	if (ws == NULL)
		return;
	eog_set_free(&ws->eog);
	free(ws->seen);
	free(ws->w);
	free(ws->cand);
	free(ws);
}

struct sampler *
sampler_new(const struct sampler_params *p, int n_vocab, struct cp_err *e)
{
	return sampler_new_ws(p, n_vocab, NULL, e);
}

struct sampler *
sampler_new_ws(const struct sampler_params *p, int n_vocab,
    struct sampler_ws *ws, struct cp_err *e)
{
	struct sampler *s;

	if (sampler_params_check(p, e) < 0)
		return NULL;
	if (n_vocab < 1 || n_vocab > SAMPLER_MAX_VOCAB ||
	    (ws != NULL && n_vocab > ws->n_vocab)) {
		cp_err_set(e, -EINVAL, "sampler: n_vocab = %d, expected "
		    "1 <= n_vocab <= %d", n_vocab, ws != NULL ? ws->n_vocab :
		    SAMPLER_MAX_VOCAB);
		return NULL;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL)
		goto nomem;
	s->p = *p;
	s->n_vocab = n_vocab;
	if (ws == NULL && (ws = s->own_ws = sampler_ws_new(n_vocab)) == NULL)
		goto nomem;
	s->cand = ws->cand;
	s->w = ws->w;
	s->seen = ws->seen;
	s->hist_cap = p->repeat_last_n > 0 ? p->repeat_last_n : 1;
	s->hist = calloc((size_t)s->hist_cap, sizeof(*s->hist));
	if (s->hist == NULL)
		goto nomem;
	s->eog = &ws->eog;
	if (s->p.seed == SAMPLER_SEED_RANDOM)
		s->p.seed = seed_from_os();
	sampler_reset(s);
	return s;
nomem:
	sampler_free(s);
	cp_err_set(e, -ENOMEM, "sampler: out of memory for a vocabulary "
	    "of %d", n_vocab);
	return NULL;
}

void
sampler_free(struct sampler *s)
{
	if (s == NULL)
		return;
	gmatch_free(s->gm);
	sampler_ws_free(s->own_ws);
	eog_set_free(&s->own_eog);
	free(s->hist);
	free(s);
}

const struct sampler_params *
sampler_get_params(const struct sampler *s)
{
	return &s->p;
}

uint64_t
sampler_seed(const struct sampler *s)
{
	return s->p.seed;
}

void
sampler_reset(struct sampler *s)
{
	rng_seed(s->rng, s->p.seed);
	s->n_sampled = 0;
	s->hist_len = 0;
	s->hist_pos = 0;
	s->n_cand = 0;
	s->w_sum = 0;
	if (s->gm != NULL)
		gmatch_reset(s->gm);
}

int
sampler_set_grammar(struct sampler *s, struct gmatch *m)
{
	if (m != NULL && gmatch_n_vocab(m) != s->n_vocab)
		return -EINVAL;
	gmatch_free(s->gm);
	s->gm = m;
	return 0;
}

struct gmatch *
sampler_grammar(const struct sampler *s)
{
	return s->gm;
}

int
sampler_n_sampled(const struct sampler *s)
{
	return s->n_sampled;
}

/* ---- end-of-generation ids and history ---- */

int
sampler_ws_set_eog(struct sampler_ws *ws, const int32_t *ids, int n)
{
	return eog_set_put(&ws->eog, ws->n_vocab, ids, n);
}

int
sampler_set_eog(struct sampler *s, const int32_t *ids, int n)
{
	int rc;

	if ((rc = eog_set_put(&s->own_eog, s->n_vocab, ids, n)) == 0)
		s->eog = &s->own_eog;
	return rc;
}

bool
sampler_is_eog(const struct sampler *s, int32_t id)
{
	if (id < 0 || id >= s->n_vocab)
		return false;
	return eog_set_has(s->eog, id);
}

static void
hist_push(struct sampler *s, int32_t id)
{
	if (s->p.repeat_last_n == 0)
		return;
	s->hist[s->hist_pos] = id;
	s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
	if (s->hist_len < s->hist_cap)
		s->hist_len++;
}

int
sampler_accept(struct sampler *s, int32_t id)
{
	int rc;

	if (id < 0 || id >= s->n_vocab)
		return -EINVAL;
	if (s->gm != NULL && (rc = gmatch_accept_token(s->gm, id)) < 0)
		return rc;
	hist_push(s, id);
	return 0;
}

int
sampler_accept_prompt(struct sampler *s, const int32_t *ids, int n)
{
	int i;

	if (n < 0 || (n > 0 && ids == NULL))
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->n_vocab)
			return -EINVAL;
	i = n > s->hist_cap ? n - s->hist_cap : 0;
	for (; i < n; i++)
		hist_push(s, ids[i]);
	return 0;
}

/* ---- one draw ---- */

/*
 * Copy logits into cand in id order and apply the repetition penalty; *m
 * is then the largest logit.  -EDOM on a NaN or +inf logit.
 */
static int
load_logits(struct sampler *s, const float *logits, float *m)
{
	struct cand *c = s->cand;
	float l, mx = -INFINITY, pen = s->p.repeat_penalty;
	int32_t i, id;
	int j, bad = 0;

	/* branch-free body: one pass at memory speed */
	for (i = 0; i < s->n_vocab; i++) {
		l = logits[i];
		bad |= !(l < INFINITY);
		mx = l > mx ? l : mx;
		c[i].id = i;
		c[i].logit = l;
	}
	if (bad)
		return -EDOM;
	*m = mx;
	if (pen == 1.0f || s->hist_len == 0)
		return 0;
	for (j = 0; j < s->hist_len; j++) {
		id = s->hist[j];
		if (bit_get(s->seen, id))
			continue;
		bit_put(s->seen, id, true);
		l = c[id].logit;
		l = l > 0 ? l / pen : l * pen;
		if (l > FLT_MAX)
			l = FLT_MAX;
		else if (l < -FLT_MAX && c[id].logit > -INFINITY)
			l = -FLT_MAX;
		c[id].logit = l;
	}
	for (j = 0; j < s->hist_len; j++)
		bit_put(s->seen, s->hist[j], false);
	/* the penalty may have moved the maximum either way */
	mx = -INFINITY;
	for (i = 0; i < s->n_vocab; i++)
		mx = c[i].logit > mx ? c[i].logit : mx;
	*m = mx;
	return 0;
}

/*
 * Log-softmax of cand (in id order) whose largest logit is m: *lse_off is
 * the log of sum(exp(logit - m)), so logprob(l) = (l - m) - lse_off; the
 * n_logprobs best go to out->top.  -EDOM when every logit is -inf.
 */
static int
log_softmax_stats(struct sampler *s, float m, struct sampler_out *out,
    double *lse_off)
{
	const struct cand *c = s->cand;
	struct sampler_logprob *top = out->top;
	int nt = s->p.n_logprobs, k = 0, j;
	double sum = 0;
	float l;
	int32_t i;

	if (m == -INFINITY)
		return -EDOM;
	for (i = 0; i < s->n_vocab; i++) {
		l = c[i].logit;
		sum += expf(l - m);
		if (nt == 0 || (k == nt && !(l > top[k - 1].logprob)) ||
		    l == -INFINITY)
			continue;
		/* ids ascend, so an equal logit never displaces an earlier id */
		j = k < nt ? k++ : k - 1;
		for (; j > 0 && l > top[j - 1].logprob; j--)
			top[j] = top[j - 1];
		top[j].id = i;
		top[j].logprob = l;
	}
	*lse_off = log(sum);
	for (j = 0; j < k; j++)
		top[j].logprob = (float)((double)(top[j].logprob - m) -
		    *lse_off);
	out->n_top = k;
	return 0;
}

/*
 * The grammar's mask over cand (in id order): refused tokens get -inf.
 * Whole bytes of allowed tokens are skipped, so the cost is one pass over
 * n_vocab / 8 bytes plus one store per refused token.
 */
static int
apply_grammar(struct sampler *s)
{
	struct cand *c = s->cand;
	const uint8_t *bits;
	int32_t i, b, nb = (s->n_vocab + 7) / 8, base;
	uint8_t m;
	int rc;

	if ((rc = gmatch_mask(s->gm, &bits)) < 0)
		return rc;
	for (b = 0; b < nb; b++) {
		if ((m = bits[b]) == 0xff)
			continue;
		base = b * 8;
		for (i = 0; i < 8 && base + i < s->n_vocab; i++)
			if (!(m >> i & 1))
				c[base + i].logit = -INFINITY;
	}
	return 0;
}

/* Greedy: the lowest id whose logit is the maximum m becomes the only
 * candidate. */
static void
pick_greedy(struct sampler *s, float m)
{
	struct cand *c = s->cand;
	int32_t i;

	for (i = 0; i < s->n_vocab - 1; i++)
		if (c[i].logit == m)
			break;
	c[0] = c[i];
	s->w[0] = 1.0f;
	s->w_sum = 1.0;
	s->n_cand = 1;
}

/*
 * Top-p bucketing: d = m - logit (>= 0) falls in bucket floor(d * 16) for
 * d < 16 and in bucket TOPP_BUCKETS - 1 beyond.  Buckets are ordered like
 * the ranking, so summing bucket masses finds a bucket by which the
 * nucleus is certainly complete, and only the logits up to it need
 * sorting.
 */
#define TOPP_BUCKETS	257

static int
topp_bucket(float d)
{
	return d < 16.0f ? (int)(d * 16.0f) : TOPP_BUCKETS - 1;
}

/*
 * Top-k, top-p and min-p over cand, whose finite logits have maximum m;
 * leaves the survivors in cand[0..n) and returns n (> 0).
 */
static int
truncate_cands(struct sampler *s, float m)
{
	struct cand *c = s->cand;
	const struct sampler_params *p = &s->p;
	size_t n = 0, i, k;
	double z = 0, cum, mass[TOPP_BUCKETS];
	float lmin = -INFINITY, d, w;
	int b, bcut = TOPP_BUCKETS - 1;
	bool sorted = false;

	for (i = 0; i < (size_t)s->n_vocab; i++)
		if (c[i].logit != -INFINITY)
			c[n++] = c[i];
	if (p->top_k > 0 && (size_t)p->top_k < n) {
		cand_top_k(c, n, (size_t)p->top_k);
		n = (size_t)p->top_k;
		sorted = true;
	}
	if (p->top_p >= 1 && p->min_p <= 0)
		return (int)n;

	/*
	 * z normalises over what top-k kept.  min-p is relative to the
	 * maximum, which every stage keeps, so applying it before the top-p
	 * cut changes nothing: both keep a prefix of the ranking and the
	 * result is the shorter one.
	 */
	if (p->top_p < 1) {
		if (!sorted)
			memset(mass, 0, sizeof(mass));
		for (i = 0; i < n; i++) {
			d = m - c[i].logit;
			w = expf(-d);
			z += w;
			if (!sorted)
				mass[topp_bucket(d)] += w;
		}
		if (!sorted) {
			/* one bucket of slack absorbs summation order */
			cum = 0;
			for (b = 0; b < TOPP_BUCKETS - 1; b++) {
				cum += mass[b];
				if (cum >= (double)p->top_p * z) {
					bcut = b + 1;
					break;
				}
			}
		}
	}
	if (p->min_p > 0)
		lmin = logf(p->min_p);
	k = 0;
	for (i = 0; i < n; i++) {
		d = m - c[i].logit;
		if (-d < lmin || topp_bucket(d) > bcut)
			continue;
		c[k++] = c[i];
	}
	n = k;
	if (n == 0)		/* unreachable: the maximum always survives */
		return -EDOM;
	if (p->top_p < 1) {
		if (!sorted)
			cand_sort(c, n);
		cum = 0;
		for (i = 0; i < n; i++) {
			cum += expf(c[i].logit - m);
			if (cum >= (double)p->top_p * z) {
				n = i + 1;
				break;
			}
		}
	}
	return (int)n;
}

/* Temperature over cand[0..n) and one draw; returns the chosen index. */
static size_t
draw(struct sampler *s, size_t n, float m)
{
	const struct cand *c = s->cand;
	float *w = s->w, t = s->p.temp;
	double sum = 0, target, cum;
	size_t i, last = 0;

	for (i = 0; i < n; i++) {
		w[i] = expf((c[i].logit - m) / t);
		if (w[i] > 0)
			last = i;
		sum += w[i];
	}
	s->w_sum = sum;
	s->n_cand = (int)n;
	target = rng_uniform(s->rng) * sum;
	cum = 0;
	for (i = 0; i < n; i++) {
		cum += w[i];
		if (cum > target)
			return i;
	}
	return last;
}

int
sampler_sample(struct sampler *s, const float *logits,
    struct sampler_out *out)
{
	struct cand *c = s->cand;
	bool want_lse = s->p.logprob || s->p.n_logprobs > 0;
	double lse_off;
	float m_all, m;
	size_t pick = 0;
	bool remax = false;
	int32_t id, i;
	int n, rc;

	out->id = -1;
	out->logprob = 0;
	out->n_top = 0;
	out->finish = SAMPLER_CONTINUE;
	s->n_cand = 0;
	if (s->p.max_tokens >= 0 && s->n_sampled >= s->p.max_tokens)
		return -ERANGE;
	if ((rc = load_logits(s, logits, &m_all)) < 0)
		goto err;
	lse_off = 0;
	if (want_lse && (rc = log_softmax_stats(s, m_all, out, &lse_off)) < 0)
		goto err;
	m = m_all;		/* all -inf: refused below, as m can only drop */
	if (s->p.ignore_eos) {
		for (i = 0; i < s->eog->n; i++) {
			remax |= c[s->eog->ids[i]].logit == m;
			c[s->eog->ids[i]].logit = -INFINITY;
		}
	}
	if (s->gm != NULL) {
		if ((rc = apply_grammar(s)) < 0)
			goto err;
		remax = true;
	}
	if (remax) {
		m = -INFINITY;
		for (i = 0; i < s->n_vocab; i++)
			m = c[i].logit > m ? c[i].logit : m;
	}
	rc = -EDOM;
	if (m == -INFINITY)
		goto err;
	if (s->p.temp <= 0) {
		pick_greedy(s, m);
	} else {
		if ((rc = n = truncate_cands(s, m)) < 0)
			goto err;
		pick = draw(s, (size_t)n, m);
	}
	id = c[pick].id;
	out->id = id;
	if (want_lse)
		out->logprob = (float)((double)(c[pick].logit - m_all) -
		    lse_off);
	s->n_sampled++;
	if (eog_set_has(s->eog, id))
		out->finish = SAMPLER_FINISH_EOG;
	else if (s->p.max_tokens >= 0 && s->n_sampled >= s->p.max_tokens)
		out->finish = SAMPLER_FINISH_LENGTH;
	return 0;
err:
	s->n_cand = 0;
	out->n_top = 0;
	return rc;
}

int
sampler_candidates(const struct sampler *s, int32_t *ids, float *probs,
    int cap)
{
	int i, n = s->n_cand;

	for (i = 0; i < n && i < cap; i++) {
		if (ids != NULL)
			ids[i] = s->cand[i].id;
		if (probs != NULL)
			probs[i] = (float)(s->w[i] / s->w_sum);
	}
	return n;
}
