/*
 * bench_mixed.c - `cpbench mixed -m FILE [-d 4] [-D 600] [-c 16] [-P 900]
 * [-r 30] [-t N] [-B BLOCK] [-b BACKEND] [-o md|json]`: what a prompt chunk
 * costs the streams it shares a step with.
 *
 * d sequences are filled to position D and a prompt sequence to position P
 * (real prefill steps, so the KV cache holds real rows).  Then two kinds of
 * step are timed, alternating, r times each after one warm-up:
 *
 *	decode	one row of each of the d sequences at position D
 *	mixed	the same rows plus c prompt rows at positions P..P+c-1
 *
 * After each step the sequences are truncated back, so every step sees the
 * same positions.  Reported: the median of each kind in ms, their ratio
 * (what a stream's inter-token time grows by while a prompt is chunked in
 * with c rows a step) and the cost of one prompt row, (mixed - decode) / c.
 * This is the step the daemon runs at max_batch_tokens d + c while a long
 * prompt prefills beside d streams.
 *
 * A third kind of step puts the c prompt rows at positions 0..c-1 instead,
 * for the cost of a prompt row without context, p0.  With pP the cost at
 * P, a row costs about p0 (1 + P / A) where A = P p0 / (pP - p0): the
 * value for cpd.yaml's attention_cost_tokens, reported too (0 when pP is
 * not above p0).
 */
#include "cpbench.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "model.h"
#include "threadpool.h"

#define BM_FILL_CHUNK 256

struct bm_opts {
	const char *path, *backend;
	int d, dpos, c, ppos, reps, threads, block;
	bool json;
};

static int
bm_parse(int argc, char **argv, struct bm_opts *o)
{
	static const struct {
		int ch;
		const char *name;
		int min, max;
		size_t off;
	} ints[] = {
		{ 'd', "-d", 0, 256, offsetof(struct bm_opts, d) },
		{ 'D', "-D", 0, 1 << 20, offsetof(struct bm_opts, dpos) },
		{ 'c', "-c", 1, 1 << 16, offsetof(struct bm_opts, c) },
		{ 'P', "-P", 0, 1 << 20, offsetof(struct bm_opts, ppos) },
		{ 'r', "-r", 1, 10000, offsetof(struct bm_opts, reps) },
		{ 't', "-t", 1, 1024, offsetof(struct bm_opts, threads) },
		{ 'B', "-B", 1, KV_MAX_BLOCK_TOKENS,
		    offsetof(struct bm_opts, block) },
	};
	int ch;

	memset(o, 0, sizeof(*o));
	o->backend = "auto";
	o->d = 4;
	o->dpos = 600;
	o->c = 16;
	o->ppos = 900;
	o->reps = 30;
	optind = 1;
	while ((ch = getopt(argc, argv, "m:d:D:c:P:r:t:B:b:o:")) != -1) {
		size_t i;

		for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
			if (ints[i].ch == ch)
				break;
		if (i < sizeof(ints) / sizeof(ints[0])) {
			if (bench_int_arg("mixed", ints[i].name, optarg,
			    ints[i].min, ints[i].max,
			    (int *)((char *)o + ints[i].off)) < 0)
				return -EINVAL;
			continue;
		}
		switch (ch) {
		case 'm': o->path = optarg; break;
		case 'b': o->backend = optarg; break;
		case 'o':
			if (bench_format_arg("mixed", optarg, &o->json) < 0)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
	}
	if (o->path == NULL || optind != argc) {
		fputs(bench_mixed_usage, stderr);
		return -EINVAL;
	}
	if (o->threads == 0)
		o->threads = tp_physical_cores();
	return 0;
}

void
bench_tokens(int32_t *t, int n, int n_vocab)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	for (int i = 0; i < n; i++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		t[i] = (int32_t)(rng % (uint64_t)n_vocab);
	}
}

int
bench_fill(struct backend *be, int seq, const int32_t *toks, int len,
    int chunk, struct cp_err *e)
{
	const float *logits;
	int rc;

	for (int pos = 0; pos < len; pos += chunk) {
		int n = len - pos < chunk ? len - pos : chunk;
		struct batch_seq bs = { seq, pos, n, pos + n == len };
		struct step_batch b = { toks + pos, n, &bs, 1 };

		if ((rc = kv_seq_append(be_kv(be), seq, n)) < 0)
			return cp_err_set(e, rc, "KV cache full filling "
			    "sequence %d", seq);
		if ((rc = be_step(be, &b, &logits, NULL, e)) < 0)
			return rc;
	}
	return 0;
}

int
bench_step_back(struct backend *be, const int32_t *toks, struct batch_seq *bs,
    int n, int rows, double *secs, struct cp_err *e)
{
	struct kv_cache *kv = be_kv(be);
	struct step_batch b = { toks, rows, bs, n };
	const float *logits;
	double t0;
	int rc, i;

	for (i = 0; i < n; i++)
		if ((rc = kv_seq_append(kv, bs[i].seq, bs[i].n_tokens)) < 0)
			return cp_err_set(e, rc, "KV cache full");
	t0 = bench_now();
	rc = be_step(be, &b, &logits, NULL, e);
	*secs = bench_now() - t0;
	for (i = 0; i < n; i++)
		(void)kv_seq_truncate(kv, bs[i].seq, bs[i].pos);
	return rc;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
bm_median(double *x, int n)
{
	qsort(x, (size_t)n, sizeof(*x), cmp_double);
	return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

static int
bm_run(const struct bm_opts *o, struct backend *be, const int32_t *toks,
    struct cp_err *e)
{
	struct kv_cache *kv = be_kv(be);
	struct batch_seq *bs, *bz;
	double *td, *tm, *tz, dec, mix, zero, p0, pp, cost;
	int d = o->d, rc = 0;

	/* bs: the d decode entries and the prompt at P; bz: the same
	 * decode entries and a prompt at 0 */
	bs = calloc((size_t)d + 1, sizeof(*bs));
	bz = calloc((size_t)d + 1, sizeof(*bz));
	td = calloc((size_t)o->reps, sizeof(*td));
	tm = calloc((size_t)o->reps, sizeof(*tm));
	tz = calloc((size_t)o->reps, sizeof(*tz));
	if (bs == NULL || bz == NULL || td == NULL || tm == NULL ||
	    tz == NULL) {
		rc = cp_err_set(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i <= d && rc == 0; i++) {
		int len = i < d ? o->dpos : o->ppos;

		if ((bs[i].seq = kv_seq_new(kv)) < 0) {
			rc = cp_err_set(e, bs[i].seq, "no free sequence");
			break;
		}
		bs[i].pos = len;
		bs[i].n_tokens = i < d ? 1 : o->c;
		bs[i].logits = i < d;
		rc = bench_fill(be, bs[i].seq, toks, len, BM_FILL_CHUNK, e);
		bz[i] = bs[i];
	}
	if (rc == 0 && (bz[d].seq = kv_seq_new(kv)) < 0)
		rc = cp_err_set(e, bz[d].seq, "no free sequence");
	bz[d].pos = 0;
	for (int r = -1; r < o->reps && rc == 0; r++) {
		double s1, s2, s3;

		if (d > 0 && (rc = bench_step_back(be, toks, bs, d, d, &s1, e)) < 0)
			break;
		if ((rc = bench_step_back(be, toks, bs, d + 1, d + o->c, &s2, e)) < 0)
			break;
		if ((rc = bench_step_back(be, toks, bz, d + 1, d + o->c, &s3, e)) < 0)
			break;
		if (r >= 0) {
			td[r] = d > 0 ? s1 : 0;
			tm[r] = s2;
			tz[r] = s3;
		}
	}
	if (rc < 0)
		goto out;
	dec = bm_median(td, o->reps) * 1e3;
	mix = bm_median(tm, o->reps) * 1e3;
	zero = bm_median(tz, o->reps) * 1e3;
	p0 = (zero - dec) / o->c;
	pp = (mix - dec) / o->c;
	cost = pp > p0 && p0 > 0 ? o->ppos * p0 / (pp - p0) : 0;
	if (o->json) {
		printf("{\"model\": \"%s\", \"backend\": \"%s\", \"threads\": "
		    "%d, \"block_tokens\": %d, \"decode_rows\": %d, "
		    "\"decode_pos\": %d, \"prompt_rows\": %d, "
		    "\"prompt_pos\": %d, \"reps\": %d, \"decode_ms\": %.3f, "
		    "\"mixed_ms\": %.3f, \"ratio\": %.3f, "
		    "\"prompt_row_ms\": %.4f, \"prompt_row_ms_at_0\": %.4f, "
		    "\"attention_cost_tokens\": %.0f}\n", o->path, be_name(be),
		    o->threads, kv_params(kv)->block_tokens, d, o->dpos, o->c,
		    o->ppos, o->reps, dec, mix, dec > 0 ? mix / dec : 0, pp,
		    p0, cost);
	} else {
		printf("| backend | threads | block | decode rows @ pos | "
		    "prompt rows @ pos | decode ms | mixed ms | ratio | "
		    "ms per prompt row | at position 0 | "
		    "attention_cost_tokens |\n");
		printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
		    "| ---: | ---: | ---: |\n");
		printf("| %s | %d | %d | %d @ %d | %d @ %d | %.2f | %.2f | "
		    "%.2f | %.3f | %.3f | %.0f |\n", be_name(be), o->threads,
		    kv_params(kv)->block_tokens, d, o->dpos, o->c, o->ppos,
		    dec, mix, dec > 0 ? mix / dec : 0, pp, p0, cost);
	}
out:
	for (int i = 0; bs != NULL && i <= d; i++)
		if (bs[i].n_tokens > 0 && bs[i].seq >= 0)
			(void)kv_seq_free(kv, bs[i].seq);
	if (bz != NULL && bz[d].n_tokens > 0 && bz[d].seq >= 0)
		(void)kv_seq_free(kv, bz[d].seq);
	free(tz);
	free(bz);
	free(tm);
	free(td);
	free(bs);
	return rc;
}

int
bench_mixed(int argc, char **argv)
{
	struct bm_opts o;
	struct cp_err e = { 0 };
	struct model *m = NULL;
	struct backend *be = NULL;
	struct be_params bp = { 0 };
	int32_t *toks = NULL;
	int rc, n_ctx, n_toks;

	if (bm_parse(argc, argv, &o) < 0)
		return 2;
	if ((rc = model_load(o.path, &m, &e)) < 0)
		goto err;
	n_ctx = o.dpos + 1 > o.ppos + o.c ? o.dpos + 1 : o.ppos + o.c;
	if (n_ctx > m->hp.n_ctx_train) {
		rc = cp_err_set(&e, -EINVAL, "%s: positions up to %d exceed "
		    "the model's context of %d", o.path, n_ctx,
		    m->hp.n_ctx_train);
		goto err;
	}
	bp.n_threads = o.threads;
	bp.max_batch_tokens = o.d + o.c > BM_FILL_CHUNK ? o.d + o.c :
	    BM_FILL_CHUNK;
	bp.max_seqs = o.d + 2;
	bp.n_ctx = n_ctx;
	bp.block_tokens = o.block;
	bp.kv_tokens = (o.d + 2) * (n_ctx + KV_MAX_BLOCK_TOKENS);
	if ((rc = be_open(o.backend, m, &bp, &be, &e)) < 0)
		goto err;
	/* the timed steps read d + c tokens from the start, which can be
	 * more than the positions filled (-D 0) */
	n_toks = n_ctx > o.d + o.c ? n_ctx : o.d + o.c;
	if ((toks = malloc((size_t)n_toks * sizeof(*toks))) == NULL) {
		rc = cp_err_set(&e, -ENOMEM, "out of memory");
		goto err;
	}
	bench_tokens(toks, n_toks, m->hp.n_vocab);
	if ((rc = bm_run(&o, be, toks, &e)) < 0)
		goto err;
	free(toks);
	be_close(be);
	model_free(m);
	return 0;
err:
	fprintf(stderr, "cpbench mixed: %s\n", e.msg[0] ? e.msg :
	    strerror(-rc));
	free(toks);
	be_close(be);
	model_free(m);
	return 1;
}
