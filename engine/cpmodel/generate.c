/*
 * generate.c - `cpmodel generate FILE PROMPT [options]`: load a model and
 * generate in this process, no daemon.
 *
 * The prompt is tokenized as llama.cpp does (BOS/EOS as the metadata asks,
 * special-token text matched), run through the engine in steps of at most
 * --chunk tokens (default: the whole prompt in one step), then one token
 * per step is sampled until -n tokens, an end-of-generation token (unless
 * --ignore-eos) or the end of the context.  Only the generated text is
 * printed, like llama-server's "content" (not the prompt, unlike
 * llama-cli), streamed through the detokenizer and flushed per token, with
 * a newline at the end; an end-of-generation token is not printed.  --ids
 * prints the generated ids instead, space-separated on one line.
 * --grammar FILE (GBNF), --json-schema FILE or --json (any JSON value)
 * constrain the output (grammar.h): the sampler draws only tokens the
 * grammar allows, and end of generation only where it is complete.
 * Diagnostics go to stderr; the exit status is 0, or 1 on any error.
 */
#include "cpmodel.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "grammar.h"
#include "kvcache.h"
#include "model.h"
#include "sampler.h"
#include "threadpool.h"
#include "tokenizer.h"

#define GEN_DEFAULT_N 64

struct gen_opts {
	const char *path;
	const char *prompt;
	int n_predict;
	int chunk;		/* 0: whole prompt */
	int threads;		/* 0: physical cores */
	bool ids;
	bool kv_f32;
	const char *backend;	/* be_open() name: auto, cpu, cuda */
	const char *grammar;	/* GBNF file, or NULL */
	const char *schema;	/* JSON schema file, or NULL */
	bool json;		/* any JSON value */
	bool timings;		/* decode speed on stderr */
	struct sampler_params sp;
};

/* Everything a run holds, released by gen_free(). */
struct gen {
	struct model *m;
	struct tokenizer *tok;
	struct backend *be;
	struct sampler *smp;
	struct grammar *gram;	/* constraint, or NULL */
	struct gvocab *gvocab;
	int32_t *toks;		/* prompt then generated ids */
	char *out;		/* detokenizer output buffer */
	size_t out_cap;
};

void
gen_usage(FILE *fp)
{
	fputs("usage: cpmodel generate FILE PROMPT [-n N] [--temp T] "
	    "[--top-k K] [--top-p P]\n"
	    "           [--min-p M] [--repeat-penalty R] [--seed S] "
	    "[--ignore-eos] [--ids]\n"
	    "           [--chunk N] [--threads N] [--kv-f32] "
	    "[--backend NAME]\n"
	    "           [--grammar FILE | --json-schema FILE | --json] "
	    "[--timings]\n", fp);
}

static int
gen_int(const char *opt, const char *s, long min, long max, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (s[0] == '\0' || *end != '\0' || errno != 0 || v < min ||
	    v > max) {
		fprintf(stderr, "cpmodel generate: %s '%s': expected an "
		    "integer in %ld..%ld\n", opt, s, min, max);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

static int
gen_float(const char *opt, const char *s, double min, double max,
    float *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (s[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v) ||
	    v < min || v > max) {
		fprintf(stderr, "cpmodel generate: %s '%s': expected a number "
		    "in %g..%g\n", opt, s, min, max);
		return -EINVAL;
	}
	*out = (float)v;
	return 0;
}

static int
gen_seed(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0) {
		fprintf(stderr, "cpmodel generate: --seed '%s': expected an "
		    "unsigned integer\n", s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

enum {
	OPT_TEMP = 256, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT, OPT_SEED,
	OPT_IDS, OPT_CHUNK, OPT_THREADS, OPT_IGNORE_EOS, OPT_KV_F32,
	OPT_BACKEND, OPT_GRAMMAR, OPT_SCHEMA, OPT_JSON, OPT_TIMINGS,
};

static int
gen_parse(int argc, char **argv, struct gen_opts *o)
{
	static const struct option longopts[] = {
		{ "temp", required_argument, NULL, OPT_TEMP },
		{ "top-k", required_argument, NULL, OPT_TOP_K },
		{ "top-p", required_argument, NULL, OPT_TOP_P },
		{ "min-p", required_argument, NULL, OPT_MIN_P },
		{ "repeat-penalty", required_argument, NULL, OPT_REPEAT },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "ids", no_argument, NULL, OPT_IDS },
		{ "chunk", required_argument, NULL, OPT_CHUNK },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
		{ "kv-f32", no_argument, NULL, OPT_KV_F32 },
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "grammar", required_argument, NULL, OPT_GRAMMAR },
		{ "json-schema", required_argument, NULL, OPT_SCHEMA },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "timings", no_argument, NULL, OPT_TIMINGS },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc = 0;

	memset(o, 0, sizeof(*o));
	o->n_predict = GEN_DEFAULT_N;
	o->backend = "auto";
	o->sp = sampler_params_default();
	opterr = 0;
	optind = 1;
	while (rc == 0 && (c = getopt_long(argc, argv, "n:", longopts,
	    NULL)) != -1) {
		switch (c) {
		case 'n':
			rc = gen_int("-n", optarg, 0, INT_MAX, &o->n_predict);
			break;
		case OPT_TEMP:
			rc = gen_float("--temp", optarg, 0, 1e6, &o->sp.temp);
			break;
		case OPT_TOP_K:
			rc = gen_int("--top-k", optarg, 0, INT_MAX,
			    &o->sp.top_k);
			break;
		case OPT_TOP_P:
			rc = gen_float("--top-p", optarg, 0, 1, &o->sp.top_p);
			break;
		case OPT_MIN_P:
			rc = gen_float("--min-p", optarg, 0, 1, &o->sp.min_p);
			break;
		case OPT_REPEAT:
			rc = gen_float("--repeat-penalty", optarg, 1e-6, 1e6,
			    &o->sp.repeat_penalty);
			break;
		case OPT_SEED:
			rc = gen_seed(optarg, &o->sp.seed);
			break;
		case OPT_IDS:
			o->ids = true;
			break;
		case OPT_CHUNK:
			rc = gen_int("--chunk", optarg, 1, 1 << 20, &o->chunk);
			break;
		case OPT_THREADS:
			rc = gen_int("--threads", optarg, 1, TP_MAX_THREADS,
			    &o->threads);
			break;
		case OPT_IGNORE_EOS:
			o->sp.ignore_eos = true;
			break;
		case OPT_KV_F32:
			o->kv_f32 = true;
			break;
		case OPT_BACKEND:
			o->backend = optarg;	/* be_open() names what is wrong */
			break;
		case OPT_GRAMMAR:
			o->grammar = optarg;
			break;
		case OPT_SCHEMA:
			o->schema = optarg;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_TIMINGS:
			o->timings = true;
			break;
		default:
			fprintf(stderr, "cpmodel generate: option '%s' unknown "
			    "or missing its value\n", argv[optind - 1]);
			rc = -EINVAL;
			break;
		}
	}
	if (rc != 0)
		return rc;
	if ((o->grammar != NULL) + (o->schema != NULL) + o->json > 1) {
		fprintf(stderr, "cpmodel generate: --grammar, --json-schema "
		    "and --json exclude each other\n");
		return -EINVAL;
	}
	if (argc - optind != 2) {
		fprintf(stderr, "cpmodel generate: expected FILE and PROMPT, "
		    "got %d argument%s\n", argc - optind,
		    argc - optind == 1 ? "" : "s");
		return -EINVAL;
	}
	o->path = argv[optind];
	o->prompt = argv[optind + 1];
	o->sp.max_tokens = o->n_predict;
	return 0;
}

static void
gen_free(struct gen *g)
{
	free(g->out);
	free(g->toks);
	sampler_free(g->smp);
	gvocab_free(g->gvocab);
	grammar_free(g->gram);
	be_close(g->be);
	tok_free(g->tok);
	model_free(g->m);
}

/* Tokenize the prompt into g->toks (room for n_more ids after it). */
static int
gen_tokenize(struct gen *g, const struct gen_opts *o, int n_more,
    int *n_prompt)
{
	size_t len = strlen(o->prompt);
	int n, n2;

	n = tok_encode(g->tok, o->prompt, len, true, true, NULL, 0);
	if (n < 0) {
		fprintf(stderr, "cpmodel generate: cannot tokenize the prompt: "
		    "%s\n", strerror(-n));
		return -1;
	}
	if (n == 0) {
		fprintf(stderr, "cpmodel generate: the prompt has no tokens\n");
		return -1;
	}
	if (n > INT_MAX - n_more ||
	    (g->toks = calloc((size_t)n + (size_t)n_more,
	    sizeof(*g->toks))) == NULL) {
		fprintf(stderr, "cpmodel generate: out of memory\n");
		return -1;
	}
	n2 = tok_encode(g->tok, o->prompt, len, true, true, g->toks, n);
	if (n2 != n) {
		fprintf(stderr, "cpmodel generate: tokenizer disagrees with "
		    "itself (%d then %d tokens)\n", n, n2);
		return -1;
	}
	*n_prompt = n;
	return 0;
}

/* The whole of file path (at most GRAMMAR_MAX_TEXT bytes), malloc'd. */
static char *
gen_read(const char *path, size_t *len)
{
	FILE *f;
	char *buf;
	size_t n;

	if ((f = fopen(path, "rb")) == NULL) {
		fprintf(stderr, "cpmodel generate: %s: %s\n", path,
		    strerror(errno));
		return NULL;
	}
	if ((buf = malloc(GRAMMAR_MAX_TEXT + 1)) == NULL) {
		fclose(f);
		fprintf(stderr, "cpmodel generate: out of memory\n");
		return NULL;
	}
	n = fread(buf, 1, GRAMMAR_MAX_TEXT + 1, f);
	if (ferror(f) || n > GRAMMAR_MAX_TEXT) {
		fprintf(stderr, "cpmodel generate: %s: %s\n", path,
		    ferror(f) ? "read error" : "larger than the grammar limit");
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	*len = n;
	return buf;
}

/* The constraint the options ask for on g->smp, if any. */
static int
gen_grammar(struct gen *g, const struct gen_opts *o)
{
	struct cp_err e = { 0 };
	struct gmatch *m;
	const char *path = o->grammar != NULL ? o->grammar : o->schema;
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (path == NULL && !o->json)
		return 0;
	if (path != NULL && (text = gen_read(path, &len)) == NULL)
		return -1;
	if (o->grammar != NULL)
		rc = grammar_from_gbnf(text, len, &g->gram, &e);
	else if (o->schema != NULL)
		rc = grammar_from_schema(text, len, &g->gram, &e);
	else
		rc = grammar_any_json(&g->gram, &e);
	free(text);
	if (rc < 0) {
		fprintf(stderr, "cpmodel generate: %s%s%s\n", path ? path : "",
		    path ? ": " : "", e.msg);
		return -1;
	}
	if (gvocab_new(g->tok, &g->gvocab, &e) < 0 ||
	    (m = gmatch_new(g->gram, g->gvocab, &e)) == NULL) {
		fprintf(stderr, "cpmodel generate: %s\n", e.msg);
		return -1;
	}
	if (sampler_set_grammar(g->smp, m) < 0) {
		gmatch_free(m);
		fprintf(stderr, "cpmodel generate: the grammar's vocabulary "
		    "differs from the model's\n");
		return -1;
	}
	return 0;
}

static int
gen_sampler(struct gen *g, const struct gen_opts *o, int n_vocab)
{
	struct cp_err e = { 0 };
	const int32_t *eog;
	int n;

	if ((g->smp = sampler_new(&o->sp, n_vocab, &e)) == NULL) {
		fprintf(stderr, "cpmodel generate: %s\n", e.msg);
		return -1;
	}
	eog = tok_eog_ids(g->tok, &n);
	if (sampler_set_eog(g->smp, eog, n) != 0) {
		fprintf(stderr, "cpmodel generate: out of memory\n");
		return -1;
	}
	return gen_grammar(g, o);
}

/*
 * One step of seq over toks[pos, pos + n), logits for its last row.
 * Returns 0, 1 when the context is full, -1 on error (reported).
 */
static int
gen_step(struct gen *g, int seq, const int32_t *toks, int pos, int n,
    const float **logits)
{
	struct cp_err e = { 0 };
	struct batch_seq bs = { seq, pos, n, true };
	struct step_batch b = { toks + pos, n, &bs, 1 };
	int rc;

	if ((rc = kv_seq_append(be_kv(g->be), seq, n)) == -E2BIG)
		return 1;
	if (rc < 0) {
		fprintf(stderr, "cpmodel generate: KV cache: %s\n",
		    strerror(-rc));
		return -1;
	}
	if (be_step(g->be, &b, logits, NULL, &e) < 0) {
		fprintf(stderr, "cpmodel generate: %s\n", e.msg);
		return -1;
	}
	return 0;
}

/* Print id's text (or the id); -1 when stdout fails. */
static int
gen_emit(struct gen *g, const struct gen_opts *o, struct detok *d,
    int32_t id, int index)
{
	int n;

	if (o->ids) {
		if (printf("%s%d", index ? " " : "", (int)id) < 0)
			return -1;
	} else {
		if ((n = detok_feed(d, id, g->out, g->out_cap)) < 0) {
			fprintf(stderr, "cpmodel generate: detokenizer: %s\n",
			    strerror(-n));
			return -1;
		}
		if (n > 0 && fwrite(g->out, 1, (size_t)n, stdout) != (size_t)n)
			return -1;
	}
	return fflush(stdout) == 0 ? 0 : -1;
}

static double
gen_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
gen_run(struct gen *g, const struct gen_opts *o)
{
	struct cp_err e = { 0 };
	struct be_params bp = { 0 };
	struct sampler_out so;
	struct detok d;
	const float *logits = NULL;
	double t0, t1;
	int n_prompt, n_ctx, seq, done, take, rc, i, n, n_gen = 0;

	if (model_load(o->path, &g->m, &e) < 0) {
		fprintf(stderr, "cpmodel generate: %s\n", e.msg);
		return -1;
	}
	if (tok_load(g->m->gf, &g->tok, &e) < 0) {
		fprintf(stderr, "cpmodel generate: %s\n", e.msg);
		return -1;
	}
	if (tok_n_vocab(g->tok) != g->m->hp.n_vocab) {
		fprintf(stderr, "cpmodel generate: %s: tokenizer has %d "
		    "tokens, the model %d\n", o->path,
		    (int)tok_n_vocab(g->tok), g->m->hp.n_vocab);
		return -1;
	}
	n_ctx = g->m->hp.n_ctx_train;
	if (gen_tokenize(g, o, o->n_predict < n_ctx ? o->n_predict : n_ctx,
	    &n_prompt) < 0)
		return -1;
	if (n_prompt >= n_ctx) {
		fprintf(stderr, "cpmodel generate: the prompt has %d tokens, "
		    "the context holds %d\n", n_prompt, n_ctx);
		return -1;
	}
	if (gen_sampler(g, o, g->m->hp.n_vocab) < 0 ||
	    sampler_accept_prompt(g->smp, g->toks, n_prompt) < 0)
		return -1;
	g->out_cap = detok_max_out(g->tok);
	if ((g->out = malloc(g->out_cap)) == NULL) {
		fprintf(stderr, "cpmodel generate: out of memory\n");
		return -1;
	}
	detok_init(&d, g->tok, 0);

	bp.n_threads = o->threads;
	bp.max_batch_tokens = o->chunk > 0 ? o->chunk : n_prompt;
	bp.max_seqs = 1;
	bp.kv_f32 = o->kv_f32;
	n = n_prompt + (o->n_predict < n_ctx - n_prompt ? o->n_predict :
	    n_ctx - n_prompt);
	bp.n_ctx = n;
	bp.kv_tokens = n;
	if (be_open(o->backend, g->m, &bp, &g->be, &e) < 0) {
		fprintf(stderr, "cpmodel generate: %s\n", e.msg);
		return -1;
	}
	if ((seq = kv_seq_new(be_kv(g->be))) < 0) {
		fprintf(stderr, "cpmodel generate: no KV sequence\n");
		return -1;
	}
	for (done = 0; done < n_prompt; done += take) {
		take = n_prompt - done;
		if (take > bp.max_batch_tokens)
			take = bp.max_batch_tokens;
		if (gen_step(g, seq, g->toks, done, take, &logits) != 0)
			return -1;
	}
	t0 = gen_now();
	for (i = 0; i < o->n_predict; i++) {
		if ((rc = sampler_sample(g->smp, logits, &so)) < 0) {
			fprintf(stderr, "cpmodel generate: token %d: %s\n", i,
			    sampler_grammar(g->smp) != NULL ? (rc == -EDOM ?
			    "no token the grammar allows has a finite logit" :
			    gmatch_error(sampler_grammar(g->smp))) :
			    rc == -EDOM ? "the model produced NaN or infinite "
			    "logits" : strerror(-rc));
			return -1;
		}
		if (so.finish == SAMPLER_FINISH_EOG)
			break;
		if ((rc = sampler_accept(g->smp, so.id)) < 0) {
			fprintf(stderr, "cpmodel generate: token %d: %s\n", i,
			    sampler_grammar(g->smp) != NULL ?
			    gmatch_error(sampler_grammar(g->smp)) :
			    strerror(-rc));
			return -1;
		}
		g->toks[n_prompt + i] = so.id;
		n_gen++;
		if (gen_emit(g, o, &d, so.id, i) < 0) {
			fprintf(stderr, "cpmodel generate: cannot write the "
			    "output\n");
			return -1;
		}
		if (i + 1 == o->n_predict)
			break;
		if ((rc = gen_step(g, seq, g->toks, n_prompt + i, 1,
		    &logits)) < 0)
			return -1;
		if (rc == 1) {
			fprintf(stderr, "cpmodel generate: context of %d "
			    "tokens is full\n", n_ctx);
			break;
		}
	}
	t1 = gen_now();
	if (o->timings)
		fprintf(stderr, "cpmodel generate: %d tokens in %.1f ms after "
		    "the prompt: %.2f t/s (sampling, grammar and %d steps)\n",
		    n_gen, (t1 - t0) * 1e3, n_gen / (t1 - t0),
		    n_gen > 0 ? n_gen - 1 : 0);
	if (sampler_grammar(g->smp) != NULL &&
	    !gmatch_accepting(sampler_grammar(g->smp)))
		fprintf(stderr, "cpmodel generate: the output is not complete "
		    "in the grammar (stopped after %d tokens)\n", n_gen);
	if (!o->ids && (n = detok_flush(&d, g->out, g->out_cap)) > 0)
		fwrite(g->out, 1, (size_t)n, stdout);
	if (putchar('\n') == EOF || fflush(stdout) != 0) {
		fprintf(stderr, "cpmodel generate: cannot write the output\n");
		return -1;
	}
	return 0;
}

int
cmd_generate(int argc, char **argv)
{
	struct gen_opts o;
	struct gen g;
	int rc;

	if (gen_parse(argc, argv, &o) < 0) {
		gen_usage(stderr);
		return 1;
	}
	memset(&g, 0, sizeof(g));
	rc = gen_run(&g, &o);
	gen_free(&g);
	return rc < 0 ? 1 : 0;
}
