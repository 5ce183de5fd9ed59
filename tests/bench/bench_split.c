/*
 * bench_split.c - `cpbench split -m FILE [-d 4] [-D 300] [-P 1800] [-c 512]
 * [-b BACKEND] [-o md|json]`: decoding streams and a long prompt on a core
 * each, at the same time.
 *
 * The question it answers: if the daemon gave the streams one core and a
 * long prompt the other, instead of sharing both in every step, how long
 * would a stream wait for a token while the prompt prefills, and how long
 * would the prompt take?  Two backends on the same model, one thread each:
 * the first runs decode steps of d sequences at position D (truncated back
 * after each step, so every step sees the same positions); the second,
 * from a thread of its own, prefills P tokens in chunks of c.  Reported:
 * the decode steps' p50, p99 and max while the prefill runs, the same
 * steps' p50 alone before it starts (the reference), and the prefill's
 * time.  The two share the machine's memory bandwidth, which is the point
 * of measuring them together.
 */
#include "cpbench.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bench_serve.h"
#include "kvcache.h"
#include "model.h"

#define BS_FILL 256		/* rows per step filling the streams */
#define BS_MAX_STEPS 100000	/* decode steps recorded, at most */
#define BS_ALONE 30		/* decode steps timed before the prefill */

struct bsp_opts {
	const char *path, *backend;
	int d, dpos, ppos, chunk;
	bool json;
};

struct bsp_prefill {
	struct backend *be;
	const int32_t *toks;
	int n, chunk;
	double secs;
	int rc;
	struct cp_err e;
	volatile int done;
};

static int
bsp_parse(int argc, char **argv, struct bsp_opts *o)
{
	int c;

	memset(o, 0, sizeof(*o));
	o->backend = "auto";
	o->d = 4;
	o->dpos = 300;
	o->ppos = 1800;
	o->chunk = 512;
	optind = 1;
	while ((c = getopt(argc, argv, "m:d:D:P:c:b:o:")) != -1) {
		switch (c) {
		case 'm': o->path = optarg; break;
		case 'b': o->backend = optarg; break;
		case 'd':
			if (bench_int_arg("split", "-d", optarg, 1, 256,
			    &o->d) < 0)
				return -EINVAL;
			break;
		case 'D':
			if (bench_int_arg("split", "-D", optarg, 0, 1 << 20,
			    &o->dpos) < 0)
				return -EINVAL;
			break;
		case 'P':
			if (bench_int_arg("split", "-P", optarg, 1, 1 << 20,
			    &o->ppos) < 0)
				return -EINVAL;
			break;
		case 'c':
			if (bench_int_arg("split", "-c", optarg, 1, 1 << 16,
			    &o->chunk) < 0)
				return -EINVAL;
			break;
		case 'o':
			if (bench_format_arg("split", optarg, &o->json) < 0)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
	}
	if (o->path == NULL || optind != argc) {
		fputs(bench_split_usage, stderr);
		return -EINVAL;
	}
	return 0;
}

static void *
bsp_prefill_main(void *arg)
{
	struct bsp_prefill *p = arg;
	int seq = kv_seq_new(be_kv(p->be));
	double t0 = bench_now();

	p->rc = seq < 0 ? cp_err_set(&p->e, seq, "no free sequence") :
	    bench_fill(p->be, seq, p->toks, p->n, p->chunk, &p->e);
	p->secs = bench_now() - t0;
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int
bsp_open(const struct bsp_opts *o, const struct model *m, int seqs,
    int tokens, int batch, struct backend **be, struct cp_err *e)
{
	struct be_params bp = { 0 };

	bp.n_threads = 1;
	bp.max_batch_tokens = batch;
	bp.max_seqs = seqs;
	bp.n_ctx = tokens;
	bp.kv_tokens = seqs * (tokens + KV_MAX_BLOCK_TOKENS);
	return be_open(o->backend, m, &bp, be, e);
}

static int
bsp_run(const struct bsp_opts *o, struct backend *dec, struct backend *pre,
    const int32_t *toks, struct cp_err *e)
{
	struct bsp_prefill p = { pre, toks, o->ppos, o->chunk, 0, 0,
	    { 0 }, 0 };
	struct batch_seq *bs;
	double *t, alone[BS_ALONE], p50a, p50, p99, max;
	pthread_t th;
	int n = 0, rc = 0;

	bs = calloc((size_t)o->d, sizeof(*bs));
	t = calloc(BS_MAX_STEPS, sizeof(*t));
	if (bs == NULL || t == NULL) {
		rc = cp_err_set(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < o->d && rc == 0; i++) {
		if ((bs[i].seq = kv_seq_new(be_kv(dec))) < 0) {
			rc = cp_err_set(e, bs[i].seq, "no free sequence");
			break;
		}
		bs[i] = (struct batch_seq){ bs[i].seq, o->dpos, 1, true };
		rc = bench_fill(dec, bs[i].seq, toks, o->dpos, BS_FILL, e);
	}
	for (int r = -1; r < BS_ALONE && rc == 0; r++)
		rc = bench_step_back(dec, toks, bs, o->d, o->d,
		    &alone[r < 0 ? 0 : r], e);
	if (rc < 0)
		goto out;
	p50a = bench_pct(alone, BS_ALONE, 50);
	if ((rc = -pthread_create(&th, NULL, bsp_prefill_main, &p)) < 0) {
		cp_err_set(e, rc, "cannot start the prefill thread");
		goto out;
	}
	/* At least one step, begun with the prefill just started: a short
	 * prefill on the other thread can end before this loop looks. */
	do
		rc = bench_step_back(dec, toks, bs, o->d, o->d, &t[n++], e);
	while (!__atomic_load_n(&p.done, __ATOMIC_ACQUIRE) && rc == 0 &&
	    n < BS_MAX_STEPS);
	pthread_join(th, NULL);
	if (rc == 0 && p.rc < 0) {
		*e = p.e;
		rc = p.rc;
	}
	if (rc < 0)
		goto out;
	max = 0;
	for (int i = 0; i < n; i++)
		max = t[i] > max ? t[i] : max;
	p50 = bench_pct(t, (size_t)n, 50);
	p99 = bench_pct(t, (size_t)n, 99);
	if (o->json)
		printf("{\"model\": \"%s\", \"backend\": \"%s\", "
		    "\"decode_rows\": %d, \"decode_pos\": %d, "
		    "\"prompt_tokens\": %d, \"chunk\": %d, "
		    "\"decode_alone_p50_ms\": %.3f, \"decode_steps\": %d, "
		    "\"decode_p50_ms\": %.3f, \"decode_p99_ms\": %.3f, "
		    "\"decode_max_ms\": %.3f, \"prefill_s\": %.3f}\n", o->path,
		    be_name(dec), o->d, o->dpos, o->ppos, o->chunk, p50a * 1e3,
		    n, p50 * 1e3, p99 * 1e3, max * 1e3, p.secs);
	else {
		printf("| backend | decode rows @ pos | prompt tokens / chunk "
		    "| decode alone p50 ms | decode during prefill p50 / p99 "
		    "/ max ms | steps | prefill s |\n");
		printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
		printf("| %s, a thread each | %d @ %d | %d / %d | %.2f | %.2f / "
		    "%.2f / %.2f | %d | %.3f |\n", be_name(dec), o->d, o->dpos,
		    o->ppos, o->chunk, p50a * 1e3, p50 * 1e3, p99 * 1e3,
		    max * 1e3, n, p.secs);
	}
out:
	free(t);
	free(bs);
	return rc;
}

int
bench_split(int argc, char **argv)
{
	struct bsp_opts o;
	struct cp_err e = { 0 };
	struct model *m = NULL;
	struct backend *dec = NULL, *pre = NULL;
	int32_t *toks = NULL;
	int rc, n_ctx;

	if (bsp_parse(argc, argv, &o) < 0)
		return 2;
	if ((rc = model_load(o.path, &m, &e)) < 0)
		goto err;
	n_ctx = o.dpos + 1 > o.ppos ? o.dpos + 1 : o.ppos;
	if (n_ctx > m->hp.n_ctx_train) {
		rc = cp_err_set(&e, -EINVAL, "%s: positions up to %d exceed "
		    "the model's context of %d", o.path, n_ctx,
		    m->hp.n_ctx_train);
		goto err;
	}
	if ((rc = bsp_open(&o, m, o.d, o.dpos + 1, BS_FILL > o.d ? BS_FILL :
	    o.d, &dec, &e)) < 0 ||
	    (rc = bsp_open(&o, m, 1, o.ppos, o.chunk, &pre, &e)) < 0)
		goto err;
	if ((toks = malloc((size_t)n_ctx * sizeof(*toks))) == NULL) {
		rc = cp_err_set(&e, -ENOMEM, "out of memory");
		goto err;
	}
	bench_tokens(toks, n_ctx, m->hp.n_vocab);
	if ((rc = bsp_run(&o, dec, pre, toks, &e)) < 0)
		goto err;
	free(toks);
	be_close(pre);
	be_close(dec);
	model_free(m);
	return 0;
err:
	fprintf(stderr, "cpbench split: %s\n", e.msg[0] ? e.msg :
	    strerror(-rc));
	free(toks);
	be_close(pre);
	be_close(dec);
	model_free(m);
	return 1;
}
