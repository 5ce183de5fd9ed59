/*
 * check_grammar_gen.c - grammars on real vocabularies and random-weight
 * models (../shared/models/synth), whose unconstrained text is noise:
 *
 *   - the mask of a state equals a token-by-token check of every token's
 *     bytes, on states reached by random walks, for the 512-token
 *     vocabulary of synth-tiny and the 32000-token SentencePiece one of
 *     synth-gqa;
 *   - 50 seeds x 10 JSON schemas of generation on synth-tiny, up to 200
 *     tokens each: every output parses (tests/lib/json.c, a reader of its
 *     own) and satisfies its schema (checked here, from the schema);
 *   - a "yes" | "no" grammar yields exactly those, then end of generation;
 *   - end of generation is impossible while the grammar is incomplete,
 *     even when its logit dominates;
 *   - a constrained sequence batched beside unconstrained ones leaves
 *     their tokens identical to their runs alone (batch invariance).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "grammar.h"
#include "kvcache.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/jschema.h"
#include "lib/suite.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

#define TINY	"synth/synth-tiny-F32.gguf"
#define GQA	"synth/synth-gqa-F16.gguf"
#define MAX_NEW	200
#define MAX_RUNS 4

/* ---- a model, its tokenizer and a CPU backend ------------------------- */

struct lm {
	struct gguf_file *f;	/* without a backend: the tokenizer only */
	struct model *m;
	struct tokenizer *tok;
	struct backend *be;
	struct gvocab *v;
	int n_vocab;
};

static void
lm_open(struct lm *l, const char *rel, bool backend)
{
	struct be_params bp = { 0 };
	struct cp_err e = { 0 };
	char *path = fx_path(rel);

	memset(l, 0, sizeof(*l));
	ck_assert_msg(path != NULL, "%s missing", rel);
	if (!backend) {
		ck_assert_msg(gguf_open(path, &l->f, &e) == 0, "%s", e.msg);
		free(path);
		ck_assert_msg(tok_load(l->f, &l->tok, &e) == 0, "%s", e.msg);
		ck_assert_msg(gvocab_new(l->tok, &l->v, &e) == 0, "%s", e.msg);
		l->n_vocab = tok_n_vocab(l->tok);
		return;
	}
	ck_assert_msg(model_load(path, &l->m, &e) == 0, "%s", e.msg);
	free(path);
	ck_assert_msg(tok_load(l->m->gf, &l->tok, &e) == 0, "%s", e.msg);
	ck_assert_msg(gvocab_new(l->tok, &l->v, &e) == 0, "%s", e.msg);
	l->n_vocab = l->m->hp.n_vocab;
	bp.n_threads = 1;
	bp.max_seqs = MAX_RUNS;
	bp.max_batch_tokens = 64;
	bp.n_ctx = 256;
	bp.kv_tokens = 256 * MAX_RUNS;
	ck_assert_msg(be_open("cpu", l->m, &bp, &l->be, &e) == 0, "%s", e.msg);
}

static void
lm_close(struct lm *l)
{
	be_close(l->be);
	gvocab_free(l->v);
	tok_free(l->tok);
	model_free(l->m);
	gguf_close(l->f);
}

/* ---- generation, several sequences per step --------------------------- */

struct run {
	struct sampler *s;
	int seq;
	int32_t toks[256];
	int n_prompt, n;	/* prompt ids, then n generated */
	bool done, eog;
};

/* A sampler for a run: seed, temp (0: greedy), grammar g or none. */
static struct sampler *
run_sampler(struct lm *l, uint64_t seed, float temp,
    const struct grammar *g, bool ignore_eos)
{
	struct sampler_params p = sampler_params_default();
	struct cp_err e = { 0 };
	const int32_t *eog;
	struct sampler *s;
	struct gmatch *m;
	int n;

	p.seed = seed;
	p.temp = temp;
	p.top_k = 0;
	p.top_p = 1;
	p.min_p = 0;
	p.logprob = false;
	p.ignore_eos = ignore_eos;
	ck_assert_ptr_nonnull(s = sampler_new(&p, l->n_vocab, &e));
	eog = tok_eog_ids(l->tok, &n);
	ck_assert_int_eq(sampler_set_eog(s, eog, n), 0);
	if (g != NULL) {
		ck_assert_msg((m = gmatch_new(g, l->v, &e)) != NULL, "%s",
		    e.msg);
		ck_assert_int_eq(sampler_set_grammar(s, m), 0);
	}
	return s;
}

/* Prompt the runs with text, then generate up to max_new tokens each, all
 * live runs in one step.  (Bare tests in the loops: each Check assertion
 * costs a write to the parent process.) */
static void
run_batch(struct lm *l, struct run *r, int n_runs, const char *prompt,
    int max_new)
{
	struct kv_cache *kv = be_kv(l->be);
	struct batch_seq bs[MAX_RUNS];
	int32_t toks[MAX_RUNS * 64];
	int slot[MAX_RUNS];
	struct sampler_out so;
	struct cp_err e = { 0 };
	const float *logits;
	int i, k, nb, nt, n, live;

	for (i = 0; i < n_runs; i++) {
		n = tok_encode(l->tok, prompt, strlen(prompt), true, false,
		    r[i].toks, 64);
		ck_assert(n > 0 && n <= 32);
		r[i].n_prompt = n;
		r[i].n = 0;
		r[i].done = r[i].eog = false;
		ck_assert_int_ge(r[i].seq = kv_seq_new(kv), 0);
	}
	for (live = n_runs; live > 0;) {
		nb = nt = 0;
		for (i = 0; i < n_runs; i++) {
			if (r[i].done)
				continue;
			n = r[i].n == 0 ? r[i].n_prompt : 1;
			k = r[i].n_prompt + r[i].n - n;
			if (kv_seq_append(kv, r[i].seq, n) != 0)
				ck_abort_msg("kv_seq_append");
			memcpy(toks + nt, r[i].toks + k, (size_t)n *
			    sizeof(*toks));
			bs[nb] = (struct batch_seq){ r[i].seq, k, n, true };
			slot[nb++] = i;
			nt += n;
		}
		if (be_step(l->be, &(struct step_batch){ toks, nt, bs, nb },
		    &logits, NULL, &e) != 0)
			ck_abort_msg("%s", e.msg);
		for (k = 0; k < nb; k++) {
			struct run *x = &r[slot[k]];

			if (sampler_sample(x->s, logits + (size_t)k *
			    (size_t)l->n_vocab, &so) != 0)
				ck_abort_msg("sampler_sample");
			if (so.finish == SAMPLER_FINISH_EOG) {
				x->done = x->eog = true;
				live--;
				continue;
			}
			if (sampler_accept(x->s, so.id) != 0)
				ck_abort_msg("sampler_accept");
			x->toks[x->n_prompt + x->n++] = so.id;
			if (x->n == max_new) {
				x->done = true;
				live--;
			}
		}
	}
	for (i = 0; i < n_runs; i++)
		ck_assert_int_eq(kv_seq_free(kv, r[i].seq), 0);
}

/* The generated text of run r, NUL-terminated in buf. */
static void
run_text(struct lm *l, const struct run *r, char *buf, size_t cap)
{
	long n = tok_decode(l->tok, r->toks + r->n_prompt, (size_t)r->n, 0,
	    buf, cap - 1);

	ck_assert(n >= 0 && (size_t)n < cap);
	buf[n] = '\0';
}

/* 50 seeds of schema _i, each alone, sampled at temperature 1 from the
 * whole distribution the grammar leaves. */
START_TEST(test_schema_generation)
{
	const char *s = jschema_tests[_i], *why = "";
	struct json *schema, *out;
	struct cp_err e = { 0 };
	struct grammar *g;
	struct run r;
	struct lm l;
	char text[4096], err[128];
	uint64_t seed;

	lm_open(&l, TINY, true);
	ck_assert_ptr_nonnull(schema = json_parse(s, strlen(s), err,
	    sizeof(err)));
	ck_assert_msg(grammar_from_schema(s, strlen(s), &g, &e) == 0, "%s",
	    e.msg);
	for (seed = 1; seed <= 50; seed++) {
		r.s = run_sampler(&l, seed * 7919 + (uint64_t)_i, 1.0f, g,
		    false);
		run_batch(&l, &r, 1, "Answer in JSON:", MAX_NEW);
		run_text(&l, &r, text, sizeof(text));
		ck_assert_msg(r.eog, "schema %d seed %d: no end after %d "
		    "tokens: %s", _i, (int)seed, r.n, text);
		out = json_parse(text, strlen(text), err, sizeof(err));
		ck_assert_msg(out != NULL, "schema %d seed %d: not JSON (%s): "
		    "%s", _i, (int)seed, err, text);
		ck_assert_msg(jschema_valid(schema, schema, out, &why), "schema %d seed "
		    "%d: fails %s: %s", _i, (int)seed, why, text);
		json_free(out);
		sampler_free(r.s);
	}
	grammar_free(g);
	json_free(schema);
	lm_close(&l);
}
END_TEST
SUITE_LOOP("generate", test_schema_generation, 0, 10);

START_TEST(test_yes_no)
{
	static const char yn[] = "root ::= \"yes\" | \"no\"\n";
	struct cp_err e = { 0 };
	struct grammar *g;
	struct run r;
	struct lm l;
	char text[64];
	int seed, yes = 0;

	lm_open(&l, TINY, true);
	ck_assert_int_eq(grammar_from_gbnf(yn, strlen(yn), &g, &e), 0);
	for (seed = 1; seed <= 40; seed++) {
		r.s = run_sampler(&l, (uint64_t)seed, seed % 4 ? 1.5f : 0, g,
		    false);
		run_batch(&l, &r, 1, "Is it?", MAX_NEW);
		run_text(&l, &r, text, sizeof(text));
		ck_assert_msg(strcmp(text, "yes") == 0 || strcmp(text, "no") ==
		    0, "seed %d: \"%s\"", seed, text);
		ck_assert(r.eog);
		yes += text[0] == 'y';
		sampler_free(r.s);
	}
	ck_assert(yes > 0 && yes < 40);	/* the model chose, both ways */
	grammar_free(g);
	lm_close(&l);
}
END_TEST
SUITE_TEST("generate", test_yes_no);

/* End of generation gets the largest logit at every step, yet is drawn
 * only once the object is complete. */
START_TEST(test_no_eos_mid_object)
{
	const char *s = jschema_tests[0];
	struct cp_err e = { 0 };
	struct sampler_out so;
	struct grammar *g;
	struct sampler *smp;
	struct gmatch *m;
	const int32_t *eog;
	const uint8_t *bits;
	float *logits;
	struct lm l;
	int i, k, n_eog, steps = 0;
	uint64_t x = 12345;

	lm_open(&l, TINY, false);
	ck_assert_int_eq(grammar_from_schema(s, strlen(s), &g, &e), 0);
	eog = tok_eog_ids(l.tok, &n_eog);
	ck_assert_int_gt(n_eog, 0);
	ck_assert_ptr_nonnull(logits = malloc((size_t)l.n_vocab *
	    sizeof(*logits)));
	smp = run_sampler(&l, 9, 1.0f, g, false);
	m = sampler_grammar(smp);
	for (;;) {
		for (i = 0; i < l.n_vocab; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			logits[i] = (float)(x >> 40) / (float)(1 << 24) * 4.0f;
		}
		for (k = 0; k < n_eog; k++)
			logits[eog[k]] = 100.0f;
		ck_assert_int_eq(gmatch_mask(m, &bits), 0);
		for (k = 0; k < n_eog; k++)
			ck_assert_int_eq(bits[eog[k] >> 3] >> (eog[k] & 7) & 1,
			    gmatch_accepting(m));
		ck_assert_int_eq(sampler_sample(smp, logits, &so), 0);
		if (so.finish == SAMPLER_FINISH_EOG) {
			ck_assert(gmatch_accepting(m));
			break;
		}
		ck_assert(!gmatch_accepting(m) || !gmatch_done(m));
		ck_assert_int_eq(sampler_accept(smp, so.id), 0);
		ck_assert_int_lt(++steps, 400);
	}
	ck_assert_int_gt(steps, 8);	/* {"name":"","age":0} at least */
	/* a refused token is not accepted, and changes nothing */
	sampler_reset(smp);
	ck_assert_int_eq(sampler_accept(smp, eog[0]), -EINVAL);
	free(logits);
	sampler_free(smp);
	grammar_free(g);
	lm_close(&l);
}
END_TEST
SUITE_TEST("generate", test_no_eos_mid_object);

/* Unconstrained runs beside a constrained one give the tokens they give
 * alone. */
START_TEST(test_batch_invariance)
{
	const char *s = jschema_tests[1];
	struct cp_err e = { 0 };
	struct grammar *g;
	struct run alone[2], mixed[3];
	struct lm l;
	int i;

	lm_open(&l, TINY, true);
	ck_assert_int_eq(grammar_from_schema(s, strlen(s), &g, &e), 0);
	for (i = 0; i < 2; i++) {
		alone[i].s = run_sampler(&l, 100 + (uint64_t)i, 0.9f, NULL,
		    true);
		run_batch(&l, &alone[i], 1, "Once upon a time", 48);
	}
	mixed[0].s = run_sampler(&l, 100, 0.9f, NULL, true);
	mixed[1].s = run_sampler(&l, 7, 0.9f, g, false);
	mixed[2].s = run_sampler(&l, 101, 0.9f, NULL, true);
	run_batch(&l, mixed, 3, "Once upon a time", 48);
	ck_assert(mixed[1].eog);	/* it ended early: the batch shrank */
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(mixed[2 * i].n, 48);
		ck_assert_int_eq(alone[i].n, 48);
		ck_assert_mem_eq(mixed[2 * i].toks, alone[i].toks,
		    sizeof(alone[i].toks[0]) * (size_t)(alone[i].n_prompt + 48));
		sampler_free(alone[i].s);
	}
	for (i = 0; i < 3; i++)
		sampler_free(mixed[i].s);
	grammar_free(g);
	lm_close(&l);
}
END_TEST
SUITE_TEST("generate", test_batch_invariance);

/* ---- masks against a token-by-token check ----------------------------- */

static const char *const walk_grammars[] = {
	NULL,	/* any JSON value */
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
	    "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},"
	    "\"additionalProperties\":false}",
	"root ::= ([\\u3041-\\u309f\\u4e00-\\u9fff] | \" \")+ (\"\\u3002\" | "
	    "\"!\")\n",
	"root ::= (\"- \" [^\\n]+ \"\\n\"){1,3}\n",
};

static struct grammar *
walk_grammar(int i)
{
	const char *t = walk_grammars[i];
	struct cp_err e = { 0 };
	struct grammar *g;
	int rc;

	if (t == NULL)
		rc = grammar_any_json(&g, &e);
	else if (t[0] == '{')
		rc = grammar_from_schema(t, strlen(t), &g, &e);
	else
		rc = grammar_from_gbnf(t, strlen(t), &g, &e);
	ck_assert_msg(rc == 0, "%s", e.msg);
	return g;
}

/*
 * Random walks through grammar gi over l's vocabulary: at each state the
 * mask (trie walk, cached per state) must equal gmatch_allows() of a
 * second matcher fed the same tokens (byte by byte, its own caches), and
 * for a sample of tokens, a fresh matcher fed the whole text.
 */
static void
check_walks(struct lm *l, int gi, int walks, int steps)
{
	struct grammar *g = walk_grammar(gi);
	struct gmatch *m, *ref, *fresh;
	const uint8_t *bits;
	char *text;
	size_t len = 0, plen;
	const char *piece;
	int32_t *allowed, id, n_allowed;
	uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(gi + 1);
	int w, st, k, j;
	bool bit;

	ck_assert_ptr_nonnull(text = malloc(1 << 16));
	ck_assert_ptr_nonnull(allowed = malloc((size_t)l->n_vocab *
	    sizeof(*allowed)));
	for (w = 0; w < walks; w++) {
		m = gmatch_new(g, l->v, NULL);
		ref = gmatch_new(g, l->v, NULL);
		ck_assert(m != NULL && ref != NULL);
		len = 0;
		for (st = 0; st < steps; st++) {
			ck_assert_int_eq(gmatch_mask(m, &bits), 0);
			n_allowed = 0;
			for (id = 0; id < l->n_vocab; id++) {
				bit = bits[id >> 3] >> (id & 7) & 1;
				/* (a bare test: each Check assertion costs a
				 * write to the parent) */
				if (bit != gmatch_allows(ref, id))
					ck_abort_msg("grammar %d walk %d step %d "
					    "token %d: mask %d", gi, w, st, id,
					    bit);
				if (bit && !tok_is_eog(l->tok, id))
					allowed[n_allowed++] = id;
			}
			for (j = 0; j < 16 && n_allowed > 0; j++) {
				x = x * 6364136223846793005ULL + 1;
				id = (int32_t)((x >> 33) % (uint64_t)l->n_vocab);
				piece = tok_piece(l->tok, id, false, &plen);
				if (tok_is_eog(l->tok, id) || plen == 0 ||
				    len + plen > (1 << 16))
					continue;
				fresh = gmatch_new(g, l->v, NULL);
				memcpy(text + len, piece, plen);
				k = gmatch_accept_bytes(fresh, text, len + plen);
				bit = bits[id >> 3] >> (id & 7) & 1;
				ck_assert_msg((k == 0) == bit, "grammar %d: token "
				    "%d after %zu bytes", gi, id, len);
				gmatch_free(fresh);
			}
			if (n_allowed == 0)
				break;
			x = x * 6364136223846793005ULL + 1;
			id = allowed[(x >> 33) % (uint64_t)n_allowed];
			piece = tok_piece(l->tok, id, false, &plen);
			ck_assert_int_eq(gmatch_accept_token(m, id), 0);
			ck_assert_int_eq(gmatch_accept_token(ref, id), 0);
			memcpy(text + len, piece, plen);
			len += plen;
		}
		gmatch_free(ref);
		gmatch_free(m);
	}
	free(allowed);
	free(text);
	grammar_free(g);
}

START_TEST(test_mask_tiny)
{
	struct lm l;

	lm_open(&l, TINY, false);
	check_walks(&l, _i, 20, 60);
	lm_close(&l);
}
END_TEST
SUITE_LOOP("mask", test_mask_tiny, 0, 4);

START_TEST(test_mask_spm32k)
{
	struct lm l;
	char *path = fx_path(GQA);

	if (path == NULL)
		return;		/* the 32000-token fixture is optional */
	free(path);
	lm_open(&l, GQA, false);
	ck_assert_int_eq(l.n_vocab, 32000);
	check_walks(&l, _i, 6, 40);
	lm_close(&l);
}
END_TEST
SUITE_LOOP("mask", test_mask_spm32k, 0, 4);

SUITE_CASE("generate", 120);
SUITE_CASE("mask", 120);

int
main(void)
{
	return fx_main("grammar_gen", TINY);
}
