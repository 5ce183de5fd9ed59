/*
 * bench_grammar.c - `cpbench grammar`: what a grammar costs per token.
 *
 *   cpbench grammar -m FILE (-g GBNF | -s SCHEMA | -j) -i IDS [-r N]
 *
 * Replays the token ids in the file IDS (as `cpmodel generate --ids`
 * prints them, from a run with the same grammar) through a matcher over
 * FILE's vocabulary: at each token the mask the sampler would ask for,
 * then the token accepted.  Prints, in CPU time of this thread (so that
 * other processes on a busy machine do not count): the vocabulary's
 * set-up, and per token the mask and the accept, on the first pass (every
 * state new: what a request pays) and on N - 1 more passes over the same
 * matcher (its caches warm), with the worst single mask of the first.
 */
#include "cpbench.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "grammar.h"
#include "tokenizer.h"

#define MAX_IDS 65536

static double
cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The whole file, malloc'd; NULL (said) on failure. */
static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	if (f == NULL) {
		fprintf(stderr, "cpbench grammar: %s: %s\n", path,
		    strerror(errno));
		return NULL;
	}
	buf = malloc(GRAMMAR_MAX_TEXT + 1);
	*len = buf != NULL ? fread(buf, 1, GRAMMAR_MAX_TEXT, f) : 0;
	fclose(f);
	if (buf == NULL)
		fprintf(stderr, "cpbench grammar: out of memory\n");
	return buf;
}

static int
read_ids(const char *path, int32_t *ids, int *n)
{
	FILE *f = fopen(path, "r");
	int id;

	if (f == NULL) {
		fprintf(stderr, "cpbench grammar: %s: %s\n", path,
		    strerror(errno));
		return -1;
	}
	*n = 0;
	while (*n < MAX_IDS && fscanf(f, "%d", &id) == 1)
		ids[(*n)++] = id;
	fclose(f);
	return 0;
}

/* One pass of ids through m: summed mask and accept CPU ms, worst mask. */
static int
replay(struct gmatch *m, const int32_t *ids, int n, double *mask,
    double *acc, double *worst)
{
	const uint8_t *bits;
	double t0, t1, t2;
	int i;

	gmatch_reset(m);
	*mask = *acc = *worst = 0;
	for (i = 0; i < n; i++) {
		t0 = cpu_ms();
		if (gmatch_mask(m, &bits) < 0)
			goto refused;
		t1 = cpu_ms();
		if (gmatch_accept_token(m, ids[i]) < 0)
			goto refused;
		t2 = cpu_ms();
		*mask += t1 - t0;
		*acc += t2 - t1;
		if (t1 - t0 > *worst)
			*worst = t1 - t0;
	}
	return 0;
refused:
	fprintf(stderr, "cpbench grammar: token %d (id %d): %s\n", i, ids[i],
	    gmatch_error(m));
	return -1;
}

int
bench_grammar(int argc, char **argv)
{
	const char *model = NULL, *gbnf = NULL, *schema = NULL, *idf = NULL;
	struct cp_err e = { 0 };
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	struct gvocab *v = NULL;
	struct grammar *g = NULL;
	struct gmatch *m = NULL;
	double t0, t_vocab, mask, acc, worst, wmask = 0, w2, a2, x2;
	int32_t *ids = NULL;
	char *text = NULL;
	size_t len = 0;
	int c, n = 0, reps = 5, r, rc = 1;
	bool json = false;

	optind = 1;
	while ((c = getopt(argc, argv, "m:g:s:ji:r:")) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'g': gbnf = optarg; break;
		case 's': schema = optarg; break;
		case 'j': json = true; break;
		case 'i': idf = optarg; break;
		case 'r':
			if (bench_int_arg("grammar", "-r", optarg, 1, 1000,
			    &reps) < 0)
				return 2;
			break;
		default:
			return 2;
		}
	}
	if (model == NULL || idf == NULL ||
	    (gbnf != NULL) + (schema != NULL) + json != 1) {
		fputs(bench_grammar_usage, stderr);
		return 2;
	}
	if ((ids = malloc(MAX_IDS * sizeof(*ids))) == NULL ||
	    read_ids(idf, ids, &n) < 0)
		goto out;
	if (gguf_open(model, &f, &e) < 0 || tok_load(f, &t, &e) < 0)
		goto err;
	t0 = cpu_ms();
	if (gvocab_new(t, &v, &e) < 0)
		goto err;
	t_vocab = cpu_ms() - t0;
	if ((gbnf != NULL || schema != NULL) &&
	    (text = slurp(gbnf != NULL ? gbnf : schema, &len)) == NULL)
		goto out;
	if ((gbnf != NULL ? grammar_from_gbnf(text, len, &g, &e) :
	    schema != NULL ? grammar_from_schema(text, len, &g, &e) :
	    grammar_any_json(&g, &e)) < 0 ||
	    (m = gmatch_new(g, v, &e)) == NULL)
		goto err;
	if (replay(m, ids, n, &mask, &acc, &worst) < 0)
		goto out;
	for (r = 1; r < reps; r++) {
		if (replay(m, ids, n, &w2, &a2, &x2) < 0)
			goto out;
		wmask += w2;
	}
	printf("| vocabulary | tokens | set-up ms | first pass: mask ms/token "
	    "| worst mask ms | accept ms/token | warm: mask ms/token |\n"
	    "| --- | --- | --- | --- | --- | --- | --- |\n"
	    "| %d | %d | %.1f | %.4f | %.3f | %.4f | %.4f |\n",
	    tok_n_vocab(t), n, t_vocab, n ? mask / n : 0, worst,
	    n ? acc / n : 0, reps > 1 && n ? wmask / n / (reps - 1) : 0);
	rc = 0;
	goto out;
err:
	fprintf(stderr, "cpbench grammar: %s\n", e.msg);
out:
	gmatch_free(m);
	grammar_free(g);
	free(text);
	gvocab_free(v);
	tok_free(t);
	gguf_close(f);
	free(ids);
	return rc;
}
