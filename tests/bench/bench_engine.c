/*
 * bench_engine.c - `cpbench engine -m FILE [-p 512] [-n 128] [-r 5] [-t N]
 * [-b cpu] [-o md|json]`: engine throughput without the daemon.
 *
 * ppN: one step of N prompt tokens into an empty sequence, logits for the
 * last row only (what a prefill does).  tgN: N decode steps of one token
 * each, starting from an empty sequence, logits every step.  Tokens are
 * random ids drawn from a fixed seed.  Each test runs once as a warm-up,
 * then r times; t/s is reported as mean +- sample standard deviation of
 * tokens / seconds per run, like llama-bench.
 */
#include "cpbench.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "kvcache.h"
#include "model.h"
#include "threadpool.h"
#include "ttype.h"

struct eb_opts {
	const char *path;
	const char *backend;
	int n_prompt;
	int n_gen;
	int reps;
	int threads;
	bool json;
};

struct eb_result {
	const char *test;	/* "pp" or "tg" */
	int n;
	double mean, sd;	/* tokens per second */
};

static int
eb_parse(int argc, char **argv, struct eb_opts *o)
{
	int c;

	memset(o, 0, sizeof(*o));
	o->backend = "auto";
	o->n_prompt = 512;
	o->n_gen = 128;
	o->reps = 5;
	optind = 1;
	while ((c = getopt(argc, argv, "m:p:n:r:t:b:o:")) != -1) {
		switch (c) {
		case 'm': o->path = optarg; break;
		case 'b': o->backend = optarg; break;
		case 'p':
			if (bench_int_arg("engine", "-p", optarg, 0, 1 << 16, &o->n_prompt) < 0)
				return -EINVAL;
			break;
		case 'n':
			if (bench_int_arg("engine", "-n", optarg, 0, 1 << 16, &o->n_gen) < 0)
				return -EINVAL;
			break;
		case 'r':
			if (bench_int_arg("engine", "-r", optarg, 1, 1000, &o->reps) < 0)
				return -EINVAL;
			break;
		case 't':
			if (bench_int_arg("engine", "-t", optarg, 1, 1024, &o->threads) < 0)
				return -EINVAL;
			break;
		case 'o':
			if (bench_format_arg("engine", optarg, &o->json) < 0)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
	}
	if (o->path == NULL || optind != argc) {
		fputs(bench_engine_usage, stderr);
		return -EINVAL;
	}
	if (o->threads == 0)
		o->threads = tp_physical_cores();
	return 0;
}

/* Runs n tokens through sequence steps of `chunk` rows; seconds taken. */
static int
eb_run(struct backend *be, const int32_t *toks, int n, int chunk,
    double *secs, struct cp_err *e)
{
	struct kv_cache *kv = be_kv(be);
	const float *logits;
	double t0;
	int seq, rc = 0;

	if ((seq = kv_seq_new(kv)) < 0)
		return cp_err_set(e, seq, "no free sequence");
	t0 = bench_now();
	for (int pos = 0; pos < n; pos += chunk) {
		int len = n - pos < chunk ? n - pos : chunk;
		struct batch_seq bs = { seq, pos, len, true };
		struct step_batch b = { toks + pos, len, &bs, 1 };

		if ((rc = kv_seq_append(kv, seq, len)) < 0) {
			cp_err_set(e, rc, "KV cache full at position %d", pos);
			break;
		}
		if ((rc = be_step(be, &b, &logits, NULL, e)) < 0)
			break;
	}
	*secs = bench_now() - t0;
	kv_seq_free(kv, seq);
	return rc;
}

static int
eb_test(struct backend *be, const int32_t *toks, int n, int chunk, int reps,
    struct eb_result *r, struct cp_err *e)
{
	double *tps, secs;
	int rc;

	if ((tps = calloc((size_t)reps, sizeof(*tps))) == NULL)
		return -ENOMEM;
	rc = eb_run(be, toks, n, chunk, &secs, e);	/* warm-up */
	for (int i = 0; rc == 0 && i < reps; i++) {
		rc = eb_run(be, toks, n, chunk, &secs, e);
		tps[i] = secs > 0 ? n / secs : 0;
	}
	if (rc == 0)
		bench_stats(tps, reps, &r->mean, &r->sd);
	free(tps);
	return rc;
}

/* "synth-110M-F16.gguf" -> the file name without directories. */
static const char *
eb_basename(const char *path)
{
	const char *s = strrchr(path, '/');

	return s != NULL ? s + 1 : path;
}

/* The most common weight type among the 2-D tensors, as llama-bench names files. */
static const char *
eb_main_type(const struct gguf_file *gf)
{
	uint64_t bytes[CP_T_COUNT] = { 0 };
	uint32_t best = 0;

	for (size_t i = 0; i < gguf_n_tensors(gf); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(gf, i);

		if (t->n_dims >= 2 && t->type < CP_T_COUNT)
			bytes[t->type] += t->nbytes;
	}
	for (uint32_t t = 0; t < CP_T_COUNT; t++)
		if (bytes[t] > bytes[best])
			best = t;
	return ttype_name(best);
}

static void
eb_print(const struct eb_opts *o, const struct model *m,
    const struct backend *be, const struct eb_result *res, int nres)
{
	uint64_t params = 0, bytes = 0;
	const char *type = eb_main_type(m->gf);

	for (size_t i = 0; i < gguf_n_tensors(m->gf); i++) {
		params += gguf_tensor_at(m->gf, i)->n_elems;
		bytes += gguf_tensor_at(m->gf, i)->nbytes;
	}
	if (o->json) {
		printf("[\n");
		for (int i = 0; i < nres; i++)
			printf("  {\"model\": \"%s\", \"type\": \"%s\", "
			    "\"size\": %llu, \"params\": %llu, "
			    "\"backend\": \"%s\", \"threads\": %d, "
			    "\"test\": \"%s%d\", \"n_tokens\": %d, "
			    "\"reps\": %d, \"avg_ts\": %.3f, \"stddev_ts\": "
			    "%.3f}%s\n", eb_basename(o->path), type,
			    (unsigned long long)bytes,
			    (unsigned long long)params, be_name(be),
			    o->threads, res[i].test, res[i].n, res[i].n,
			    o->reps, res[i].mean, res[i].sd,
			    i + 1 < nres ? "," : "");
		printf("]\n");
		return;
	}
	printf("| model | size | params | backend | threads | test | t/s |\n");
	printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
	for (int i = 0; i < nres; i++)
		printf("| %s %s | %.2f MiB | %.2f M | %s | %d | %s%d | "
		    "%.2f ± %.2f |\n", eb_basename(o->path), type,
		    (double)bytes / (1024.0 * 1024.0), (double)params / 1e6,
		    be_name(be), o->threads, res[i].test, res[i].n,
		    res[i].mean, res[i].sd);
}

/* VmRSS, RssAnon and RssFile of this process in MiB (0 where unknown). */
static void
eb_rss(double mib[3])
{
	static const char *const keys[3] = { "VmRSS:", "RssAnon:",
	    "RssFile:" };
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	mib[0] = mib[1] = mib[2] = 0;
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL)
		for (int i = 0; i < 3; i++)
			if (strncmp(line, keys[i], strlen(keys[i])) == 0)
				mib[i] = strtod(line + strlen(keys[i]), NULL) /
				    1024;
	fclose(f);
}

int
bench_engine(int argc, char **argv)
{
	struct eb_opts o;
	struct cp_err e = { 0 };
	struct model *m = NULL;
	struct backend *be = NULL;
	struct be_params bp = { 0 };
	struct eb_result res[2];
	int32_t *toks = NULL;
	int nres = 0, n_max, rc;
	double t_open, rss_open[3], rss_end[3];

	if (eb_parse(argc, argv, &o) < 0)
		return 2;
	if ((rc = model_load(o.path, &m, &e)) < 0)
		goto err;
	n_max = o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen;
	if (n_max < 1)
		n_max = 1;
	bp.n_threads = o.threads;
	bp.max_batch_tokens = o.n_prompt > 1 ? o.n_prompt : 1;
	bp.max_seqs = 1;
	bp.n_ctx = n_max;
	bp.kv_tokens = n_max;
	if (n_max > m->hp.n_ctx_train) {
		rc = cp_err_set(&e, -EINVAL, "%s: -p/-n %d exceeds the "
		    "model's context of %d", o.path, n_max, m->hp.n_ctx_train);
		goto err;
	}
	t_open = bench_now();
	if ((rc = be_open(o.backend, m, &bp, &be, &e)) < 0)
		goto err;
	t_open = bench_now() - t_open;
	eb_rss(rss_open);
	if ((toks = malloc((size_t)n_max * sizeof(*toks))) == NULL) {
		rc = cp_err_set(&e, -ENOMEM, "out of memory");
		goto err;
	}
	bench_tokens(toks, n_max, m->hp.n_vocab);
	if (o.n_prompt > 0) {
		res[nres] = (struct eb_result){ "pp", o.n_prompt, 0, 0 };
		if ((rc = eb_test(be, toks, o.n_prompt, o.n_prompt, o.reps,
		    &res[nres], &e)) < 0)
			goto err;
		nres++;
	}
	if (o.n_gen > 0) {
		res[nres] = (struct eb_result){ "tg", o.n_gen, 0, 0 };
		if ((rc = eb_test(be, toks, o.n_gen, 1, o.reps, &res[nres],
		    &e)) < 0)
			goto err;
		nres++;
	}
	eb_rss(rss_end);
	eb_print(&o, m, be, res, nres);
	if (!o.json)
		printf("\nbackend open %.3f s; resident MiB (all / anon / "
		    "file) after open %.0f / %.0f / %.0f, after the runs "
		    "%.0f / %.0f / %.0f\n", t_open, rss_open[0], rss_open[1],
		    rss_open[2], rss_end[0], rss_end[1], rss_end[2]);
	free(toks);
	be_close(be);
	model_free(m);
	return 0;
err:
	fprintf(stderr, "cpbench engine: %s\n", e.msg[0] ? e.msg :
	    strerror(-rc));
	free(toks);
	be_close(be);
	model_free(m);
	return 1;
}
