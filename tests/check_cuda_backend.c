/*
 * check_cuda_backend.c - the CUDA backend against the CPU backend and
 * against itself.
 *
 * Golden values: the greedy ids of aidreams260K come from llama.cpp
 * (REFERENCE.md).  Everything else compares the CUDA backend with the CPU
 * backend (itself checked against llama.cpp in check_forward) within the
 * tolerances that synth/README.md measured for engines that differ from
 * llama.cpp's CPU numerics, or with itself where the design demands
 * bit-identical results: a sequence alone or sharing its steps, a prompt
 * whole or in chunks, any KV block size or step budget.
 *
 * Needs a usable CUDA device.  Without one the registry checks that do
 * not need a device run, then the program prints why and exits 77.
 * Without aidreams260K.gguf it exits 77 too; a case whose other fixture
 * is absent says so and passes, so that a device machine can run the
 * suite with the subset of fixtures it was given.  The
 * device is probed in a child process: CUDA cannot be used in a process
 * forked after the parent initialized it, and every test runs in a fork.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_probe.h"
#include "lib/child.h"
#include "kvcache.h"
#include "lib/fixtures.h"
#include "lib/rig.h"
#include "lib/suite.h"
#include "model.h"
#include "quant.h"
#include "ttype.h"


#define MAX_IDS 704

/* ---- a model on a backend --------------------------------------------- */

/*
 * Load fixture rel into *m.  Returns false, saying so, when the file is
 * absent, so that a device run can carry a subset of the fixtures
 * (aidreams260K.gguf is always required, see main()).
 */
static bool
load(struct model **m, const char *rel)
{
	char *path = fx_path(rel);
	struct cp_err e = { 0 };

	if (path == NULL) {
		printf("fixture %s missing in %s: case skipped\n", rel,
		    fx_dir());
		return false;
	}
	ck_assert_msg(model_load(path, m, &e) == 0, "%s", e.msg);
	free(path);
	return true;
}

/* Open backend name on m (borrowed). */
static void
rig_on(struct rig *r, struct model *m, const char *name,
    const struct be_params *p)
{
	struct cp_err e = { 0 };

	memset(r, 0, sizeof(*r));
	r->m = m;
	r->n_vocab = m->hp.n_vocab;
	ck_assert_msg(be_open(name, m, p, &r->be, &e) == 0, "%s: %s", name,
	    e.msg);
	if (strcmp(name, "auto") != 0)
		ck_assert_str_eq(be_name(r->be), name);
}

/* A deterministic prompt of n ids in [3, n_vocab), BOS first. */
static void
make_prompt(int32_t *ids, int n, int n_vocab, unsigned seed)
{
	int i;

	ids[0] = 1;
	for (i = 1; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		ids[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(n_vocab - 3));
	}
}

/* Largest |a[i] - b[i]| of n floats. */
static double
max_abs_diff(const float *a, const float *b, int n)
{
	double d = 0;
	int i;

	for (i = 0; i < n; i++)
		if (fabs((double)a[i] - (double)b[i]) > d)
			d = fabs((double)a[i] - (double)b[i]);
	return d;
}

/* ---- CUDA against the CPU backend ------------------------------------- */

struct vs_case {
	const char *file;
	double tol;		/* logprob tolerance */
	bool exact;		/* the argmax must be the CPU's */
	int n_prompt;		/* prompt length, 0: 100 */
};

/*
 * Tolerances from synth/README.md, "Tolerances for synth-tiny": 1e-2 for
 * F32, 2e-2 for F16, 0.1 for BF16, and 0.35 for quantized files run by an
 * engine that dequantizes the weights and multiplies without quantizing
 * the activations (its "B"), which is what this backend does while the
 * CPU backend quantizes activations as llama.cpp does.  The 260K models
 * are F32 files.
 */
static const struct vs_case vs_cases[] = {
	{ "aidreams260K.gguf", 1e-2, true, 0 },
	{ "stories260K-plctlab.gguf", 2e-2, true, 0 },
	{ "synth/synth-tiny-F32.gguf", 1e-2, true, 0 },
	{ "synth/synth-tiny-F16.gguf", 2e-2, false, 0 },
	{ "synth/synth-tiny-BF16.gguf", 0.1, false, 0 },
	{ "synth/synth-tiny-Q8_0.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q4_0.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q4_1.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q5_0.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q5_1.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q2_K.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q3_K_M.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q4_K_M.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q5_K_M.gguf", 0.35, false, 0 },
	{ "synth/synth-tiny-Q6_K.gguf", 0.35, false, 0 },
	{ "synth/synth-gqa-F16.gguf", 2e-2, false, 0 },
	{ "synth/synth-gqa-Q8_0.gguf", 0.35, false, 0 },
	{ "synth/synth-gqa-Q4_0.gguf", 0.35, false, 0 },
	/*
	 * Every family, the prompt past the sliding windows (256, 400);
	 * tests/gpu/run.sh carries the Q8_0 files.
	 */
	{ "arch/arch-llama31-Q8_0.gguf", 0.35, false, 640 },
	{ "arch/arch-qwen2-Q8_0.gguf", 0.35, false, 640 },
	{ "arch/arch-qwen3-Q8_0.gguf", 0.35, false, 640 },
	{ "arch/arch-phi3-Q8_0.gguf", 0.35, false, 640 },
	{ "arch/arch-gemma-Q8_0.gguf", 0.35, false, 640 },
	{ "arch/arch-gemma2-Q8_0.gguf", 0.35, false, 640 },
	{ "arch/arch-gemma3-Q8_0.gguf", 0.35, false, 640 },
};

/*
 * One comparison of a step's logits: the log-probabilities of the CPU's
 * ten most likely tokens agree within tol, and the CUDA argmax is the
 * CPU's, or (unless exact) one whose CPU log-probability is within tol of
 * the best (the max-gap form of synth/README.md's greedy check).
 */
static void
compare_step(const struct vs_case *vc, const float *cpu, const float *gpu,
    int n, int step, double *lc, double *lg)
{
	int top[10], i, j, k, gc, gg;
	double d;

	vec_logsoftmax(cpu, n, lc);
	vec_logsoftmax(gpu, n, lg);
	for (k = 0; k < 10 && k < n; k++) {
		top[k] = -1;
		for (i = 0; i < n; i++) {
			for (j = 0; j < k; j++)
				if (top[j] == i)
					break;
			if (j == k && (top[k] < 0 || lc[i] > lc[top[k]]))
				top[k] = i;
		}
		d = fabs(lc[top[k]] - lg[top[k]]);
		ck_assert_msg(d <= vc->tol, "%s step %d: token %d logprob "
		    "cpu %.5f cuda %.5f (tolerance %g)", vc->file, step, top[k],
		    lc[top[k]], lg[top[k]], vc->tol);
	}
	gc = vec_argmax(cpu, n);
	gg = vec_argmax(gpu, n);
	if (vc->exact)
		ck_assert_msg(gg == gc, "%s step %d: argmax cuda %d, cpu %d",
		    vc->file, step, gg, gc);
	else
		ck_assert_msg(lc[gc] - lc[gg] <= vc->tol, "%s step %d: cuda's "
		    "argmax %d is %.4f below the cpu's %d", vc->file, step, gg,
		    lc[gc] - lc[gg], gc);
}

/*
 * A prompt in chunks of 48 rows, then 8 decode steps fed with the CPU's
 * argmax, on both backends; every step's logits compared.
 */
START_TEST(test_vs_cpu)
{
	const struct vs_case *vc = &vs_cases[_i];
	struct be_params p = rig_params(2, 64, 1);
	struct model *m;
	struct rig rc, rg;
	int32_t ids[MAX_IDS];
	float *lc, *lg;
	double *dc, *dg;
	int np, step, seq_c, seq_g, nv;

	if (!load(&m, vc->file))
		return;
	if (vc->n_prompt > 0)
		p.n_ctx = 1024;
	rig_on(&rc, m, "cpu", &p);
	rig_on(&rg, m, "cuda", &p);
	nv = rc.n_vocab;
	np = vc->n_prompt > 0 ? vc->n_prompt : 100;
	if (np > m->hp.n_ctx_train - 16)
		np = m->hp.n_ctx_train - 16;
	ck_assert_int_gt(np, 8);
	make_prompt(ids, np, nv, 1234u + (unsigned)_i);
	lc = malloc((size_t)nv * sizeof(float));
	lg = malloc((size_t)nv * sizeof(float));
	dc = malloc((size_t)nv * sizeof(double));
	dg = malloc((size_t)nv * sizeof(double));
	ck_assert(lc != NULL && lg != NULL && dc != NULL && dg != NULL);
	seq_c = kv_seq_new(be_kv(rc.be));
	seq_g = kv_seq_new(be_kv(rg.be));
	ck_assert(seq_c >= 0 && seq_g >= 0);
	rig_feed(&rc, seq_c, 0, ids, np, 48, lc);
	rig_feed(&rg, seq_g, 0, ids, np, 48, lg);
	for (step = 0; step <= 8; step++) {
		compare_step(vc, lc, lg, nv, step, dc, dg);
		if (step == 8)
			break;
		ids[np + step] = vec_argmax(lc, nv);
		rig_feed(&rc, seq_c, np + step, &ids[np + step], 1, 0, lc);
		rig_feed(&rg, seq_g, np + step, &ids[np + step], 1, 0, lg);
	}
	free(dg);
	free(dc);
	free(lg);
	free(lc);
	be_close(rg.be);
	be_close(rc.be);
	model_free(m);
}
END_TEST
SUITE_LOOP("vs_cpu", test_vs_cpu, 0, (int)(sizeof(vs_cases) / sizeof(vs_cases[0])));

/*
 * Element index in the F16 storage of K or V (kind) at block, layer, slot,
 * head h, element d: the CPU lays a block's rows head-major
 * ([head][slot][head_dim]), the GPU slot-major ([slot][kv_dim]); see
 * kv_block_offset().
 */
static size_t
kv_elem(const struct kv_cache *kv, bool gpu, int head_dim, int block,
    int layer, enum kv_kind kind, int slot, int h, int d)
{
	const struct kv_params *kp = kv_params(kv);
	size_t base = kv_block_offset(kv, block, layer, kind) / 2;

	if (gpu)
		return base + (size_t)slot * (size_t)kp->kv_dim +
		    (size_t)h * (size_t)head_dim + (size_t)d;
	return base + ((size_t)h * (size_t)kp->block_tokens + (size_t)slot) *
	    (size_t)head_dim + (size_t)d;
}

static float
kv_at(const unsigned char *buf, size_t i)
{
	return fp16_to_fp32((uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8));
}

/*
 * The K/V a prompt leaves in the cache: the same blocks hold the same
 * values, each backend in its own layout inside a block.
 */
START_TEST(test_kv_vs_cpu)
{
	static const char *const files[] = {
		"aidreams260K.gguf", "synth/synth-tiny-F16.gguf"
	};
	struct be_params p = rig_params(2, 64, 2);
	struct model *m;
	struct rig rc, rg;
	int32_t ids[MAX_IDS];
	unsigned char *bc, *bg;
	const struct kv_params *kp;
	float *lg, a, b;
	size_t size, i, n_el, nz = 0;
	int seq, k, hd;

	p.kv_tokens = 256;
	if (!load(&m, files[_i]))
		return;
	rig_on(&rc, m, "cpu", &p);
	rig_on(&rg, m, "cuda", &p);
	size = kv_storage_bytes(be_kv(rc.be));
	ck_assert_uint_eq(size, kv_storage_bytes(be_kv(rg.be)));
	make_prompt(ids, 90, rc.n_vocab, 77u);
	lg = malloc((size_t)rc.n_vocab * sizeof(float));
	bc = malloc(size);
	bg = malloc(size);
	ck_assert(lg != NULL && bc != NULL && bg != NULL);
	for (k = 0; k < 2; k++) {
		struct rig *r = k ? &rg : &rc;

		/* a first sequence of 20 so the second's blocks are not 0.. */
		seq = kv_seq_new(be_kv(r->be));
		rig_feed(r, seq, 0, ids + 60, 20, 0, lg);
		seq = kv_seq_new(be_kv(r->be));
		rig_feed(r, seq, 0, ids, 90, 32, lg);
		ck_assert_int_eq(be_kv_read(r->be, 0, k ? bg : bc, size), 0);
	}
	kp = kv_params(be_kv(rc.be));
	hd = m->hp.head_dim;
	n_el = size / 2;
	for (i = 0; i < n_el; i++) {
		size_t t = i, ic, ig;
		int d = (int)(t % (size_t)hd), h, slot, kind, layer, block;

		t /= (size_t)hd;
		h = (int)(t % (size_t)(kp->kv_dim / hd));
		t /= (size_t)(kp->kv_dim / hd);
		slot = (int)(t % (size_t)kp->block_tokens);
		t /= (size_t)kp->block_tokens;
		kind = (int)(t % 2);
		t /= 2;
		layer = (int)(t % (size_t)kp->n_layer);
		block = (int)(t / (size_t)kp->n_layer);
		ic = kv_elem(be_kv(rc.be), false, hd, block, layer,
		    (enum kv_kind)kind, slot, h, d);
		ig = kv_elem(be_kv(rg.be), true, hd, block, layer,
		    (enum kv_kind)kind, slot, h, d);
		ck_assert(ic < n_el && ig < n_el);
		a = kv_at(bc, ic);
		b = kv_at(bg, ig);
		ck_assert_msg(fabsf(a - b) <= 1e-2f * fmaxf(1.0f, fabsf(a)),
		    "%s: block %d layer %d %c slot %d head %d [%d]: cpu %g "
		    "cuda %g", files[_i], block, layer, kind ? 'V' : 'K',
		    slot, h, d, (double)a, (double)b);
		nz += a != 0.0f;
	}
	ck_assert_uint_gt(nz, n_el / 4);
	free(bg);
	free(bc);
	free(lg);
	be_close(rg.be);
	be_close(rc.be);
	model_free(m);
}
END_TEST
SUITE_LOOP("vs_cpu", test_kv_vs_cpu, 0, 2);

/* An F32 cache on both backends. */
START_TEST(test_kv_f32_vs_cpu)
{
	static const struct vs_case vc = { "synth/synth-tiny-F16.gguf", 2e-2,
	    false, 0 };
	struct be_params p = rig_params(2, 64, 1);
	struct model *m;
	struct rig rc, rg;
	int32_t ids[MAX_IDS];
	float *lc, *lg;
	double *dc, *dg;
	int seq;

	p.kv_f32 = true;
	if (!load(&m, vc.file))
		return;
	rig_on(&rc, m, "cpu", &p);
	rig_on(&rg, m, "cuda", &p);
	make_prompt(ids, 150, rc.n_vocab, 5u);
	lc = malloc((size_t)rc.n_vocab * sizeof(float));
	lg = malloc((size_t)rc.n_vocab * sizeof(float));
	dc = malloc((size_t)rc.n_vocab * sizeof(double));
	dg = malloc((size_t)rc.n_vocab * sizeof(double));
	ck_assert(lc != NULL && lg != NULL && dc != NULL && dg != NULL);
	seq = kv_seq_new(be_kv(rc.be));
	rig_feed(&rc, seq, 0, ids, 150, 64, lc);
	seq = kv_seq_new(be_kv(rg.be));
	rig_feed(&rg, seq, 0, ids, 150, 64, lg);
	compare_step(&vc, lc, lg, rc.n_vocab, 0, dc, dg);
	free(dg);
	free(dc);
	free(lg);
	free(lc);
	be_close(rg.be);
	be_close(rc.be);
	model_free(m);
}
END_TEST
SUITE_TEST("vs_cpu", test_kv_f32_vs_cpu);

/* ---- llama.cpp's greedy ids (REFERENCE.md) ---------------------------- */

static const int32_t aid_prompt[] = {
	1, 429, 491, 433, 295, 429, 444, 445, 265, 262, 263, 342, 430
};
static const int32_t aid_gen[64] = {
	446, 280, 432, 458, 375, 431, 422, 314, 280, 323, 290, 431, 448, 429,
	465, 438, 340, 431, 338, 353, 341, 431, 327, 446, 262, 429, 453, 435,
	285, 361, 437, 431, 440, 437, 445, 430, 275, 280, 302, 450, 405, 403,
	399, 306, 339, 290, 264, 309, 361, 441, 267, 395, 448, 429, 465, 438,
	340, 431, 338, 353, 341, 325, 266, 386
};

/* Greedy generation on CUDA, prompt whole (_i 0) or in chunks of 5. */
START_TEST(test_aidreams_greedy)
{
	struct be_params p = rig_params(2, 16, 1);
	struct model *m;
	struct rig r;
	int32_t ids[13 + 64];
	float *lg;
	int seq, i;

	if (!load(&m, "aidreams260K.gguf"))
		return;
	rig_on(&r, m, "cuda", &p);
	lg = malloc((size_t)r.n_vocab * sizeof(float));
	ck_assert_ptr_nonnull(lg);
	memcpy(ids, aid_prompt, sizeof(aid_prompt));
	seq = kv_seq_new(be_kv(r.be));
	rig_feed(&r, seq, 0, ids, 13, _i == 0 ? 0 : 5, lg);
	for (i = 0; i < 64; i++) {
		ids[13 + i] = vec_argmax(lg, r.n_vocab);
		ck_assert_msg(ids[13 + i] == aid_gen[i], "id %d: got %d, "
		    "want %d", i, (int)ids[13 + i], (int)aid_gen[i]);
		if (i < 63)
			rig_feed(&r, seq, 13 + i, &ids[13 + i], 1, 0, lg);
	}
	free(lg);
	be_close(r.be);
	model_free(m);
}
END_TEST
SUITE_LOOP("vs_cpu", test_aidreams_greedy, 0, 2);

/* ---- batch invariance on the device ----------------------------------- */

static const char *const inv_models[] = {
	"aidreams260K.gguf",
	"synth/synth-tiny-Q4_0.gguf",
	"synth/synth-gqa-F16.gguf",
};

/*
 * The logits after a prompt of up to 150 ids are bit-identical whether it
 * is fed whole or in chunks of 1, 7, 64 or 100 rows, with KV blocks of 16
 * or 5 tokens, and with a step budget of 256 or 128 rows.
 */
START_TEST(test_chunked_equals_unchunked)
{
	static const int chunks[] = { 1, 7, 64, 100 };
	struct be_params p = rig_params(2, 256, 1);
	struct model *m;
	struct rig r;
	int32_t ids[MAX_IDS];
	float *lg0, *lg;
	int np, c, v, seq;

	if (!load(&m, inv_models[_i]))
		return;
	np = m->hp.n_ctx_train - 1 < 150 ? m->hp.n_ctx_train - 1 : 150;
	lg0 = malloc((size_t)m->hp.n_vocab * sizeof(float));
	lg = malloc((size_t)m->hp.n_vocab * sizeof(float));
	ck_assert(lg0 != NULL && lg != NULL);
	make_prompt(ids, np, m->hp.n_vocab, 7u);
	for (v = 0; v < 3; v++) {
		p.block_tokens = v == 1 ? 5 : 0;
		p.max_batch_tokens = v == 2 ? 128 : 256;
		rig_on(&r, m, "cuda", &p);
		seq = kv_seq_new(be_kv(r.be));
		if (v == 0)
			rig_feed(&r, seq, 0, ids, np, 0, lg0);
		else
			rig_feed(&r, seq, 0, ids, np, 128, lg);
		if (v > 0)
			ck_assert_msg(memcmp(lg, lg0, (size_t)r.n_vocab *
			    sizeof(float)) == 0, "%s: variant %d changes the "
			    "logits (max diff %g)", inv_models[_i], v,
			    max_abs_diff(lg, lg0, r.n_vocab));
		ck_assert_int_eq(kv_seq_free(be_kv(r.be), seq), 0);
		for (c = 0; v == 0 && c < 4; c++) {
			seq = kv_seq_new(be_kv(r.be));
			rig_feed(&r, seq, 0, ids, np, chunks[c], lg);
			ck_assert_msg(memcmp(lg, lg0, (size_t)r.n_vocab *
			    sizeof(float)) == 0, "%s: chunks of %d change the "
			    "logits (max diff %g)", inv_models[_i], chunks[c],
			    max_abs_diff(lg, lg0, r.n_vocab));
			ck_assert_int_eq(kv_seq_free(be_kv(r.be), seq), 0);
		}
		be_close(r.be);
	}
	free(lg);
	free(lg0);
	model_free(m);
}
END_TEST
SUITE_LOOP("invariance", test_chunked_equals_unchunked, 0, (int)(sizeof(inv_models) / sizeof(inv_models[0])));

#define NSEQ 4
#define NDEC 6

/* One sequence of the mixed-step test: a prompt, then fixed decode ids. */
struct mseq {
	int32_t ids[MAX_IDS];	/* prompt then decode ids */
	int np;			/* prompt length */
	int chunk;		/* prefill rows per step when mixed */
	int fed;		/* tokens fed so far */
	int seq;		/* KV sequence */
	float *want;		/* [NDEC + 1, n_vocab] logits alone */
	int got;		/* logits rows compared so far */
};

/*
 * All sequences together under a budget of `budget` rows per step, the
 * entry order rotating every step; each step's logits compared with the
 * sequence's logits alone, bit for bit.  Event 0 is the end of the
 * prompt, event d + 1 the d-th decode id.
 */
static void
run_mixed(struct rig *r, struct mseq *s, int budget, const char *file)
{
	struct kv_cache *kv = be_kv(r->be);
	struct batch_seq bs[NSEQ];
	int32_t toks[512];
	struct cp_err e = { 0 };
	const float *lg;
	int idx[NSEQ], live = NSEQ, steps = 0, i, k, ne, nt, left, take, nl;
	int ev;

	while (live > 0) {
		ck_assert_int_lt(++steps, 1000);
		ne = nt = 0;
		left = budget;
		for (k = 0; k < NSEQ && left > 0; k++) {
			struct mseq *q = &s[(k + steps) % NSEQ];

			if (q->fed == q->np + NDEC)
				continue;
			take = q->fed < q->np ? q->np - q->fed : 1;
			if (take > q->chunk)
				take = q->chunk;
			if (take > left)
				take = left;
			ck_assert_int_eq(kv_seq_append(kv, q->seq, take), 0);
			bs[ne].seq = q->seq;
			bs[ne].pos = q->fed;
			bs[ne].n_tokens = take;
			bs[ne].logits = q->fed + take >= q->np;
			memcpy(toks + nt, q->ids + q->fed,
			    (size_t)take * sizeof(int32_t));
			idx[ne++] = (k + steps) % NSEQ;
			nt += take;
			left -= take;
		}
		{
			struct step_batch b = { toks, nt, bs, ne };

			ck_assert_msg(be_step(r->be, &b, &lg, &nl, &e) == 0,
			    "%s", e.msg);
		}
		for (k = 0; k < ne; k++) {
			struct mseq *q = &s[idx[k]];

			q->fed += bs[k].n_tokens;
			if (!bs[k].logits)
				continue;
			ev = q->fed - q->np;
			ck_assert_int_eq(ev, q->got);
			ck_assert_msg(memcmp(lg, q->want + (size_t)ev *
			    (size_t)r->n_vocab, (size_t)r->n_vocab *
			    sizeof(float)) == 0, "%s: sequence %d event %d "
			    "differs with others in its step (max diff %g)",
			    file, idx[k], ev, max_abs_diff(lg, q->want +
			    (size_t)ev * (size_t)r->n_vocab, r->n_vocab));
			q->got++;
			lg += r->n_vocab;
			if (q->fed == q->np + NDEC)
				live--;
		}
	}
	for (i = 0; i < NSEQ; i++)
		ck_assert_int_eq(s[i].got, NDEC + 1);
}

/*
 * Each sequence alone (prompt in chunks of 32, then its decode ids one
 * step each), then all four together in mixed steps of prefill chunks and
 * decode tokens under a budget of 48 rows: every logits row bit-identical.
 */
START_TEST(test_batched_equals_alone)
{
	static const int plen[NSEQ] = { 150, 37, 90, 5 };
	static const int chunk[NSEQ] = { 29, 13, 48, 7 };
	struct be_params p = rig_params(2, 256, NSEQ);
	struct model *m;
	struct mseq s[NSEQ];
	struct rig r;
	size_t row;
	int i, d, seq, cap;

	if (!load(&m, inv_models[_i]))
		return;
	cap = m->hp.n_ctx_train - NDEC - 1;
	p.kv_tokens = 1024;
	rig_on(&r, m, "cuda", &p);
	row = (size_t)r.n_vocab * sizeof(float);
	for (i = 0; i < NSEQ; i++) {
		memset(&s[i], 0, sizeof(s[i]));
		s[i].np = plen[i] < cap ? plen[i] : cap;
		s[i].chunk = chunk[i];
		make_prompt(s[i].ids, s[i].np + NDEC, r.n_vocab,
		    300u + (unsigned)i);
		s[i].want = malloc((NDEC + 1) * row);
		ck_assert_ptr_nonnull(s[i].want);
		seq = kv_seq_new(be_kv(r.be));
		rig_feed(&r, seq, 0, s[i].ids, s[i].np, 32, s[i].want);
		for (d = 0; d < NDEC; d++)
			rig_feed(&r, seq, s[i].np + d, &s[i].ids[s[i].np + d], 1,
			    0, s[i].want + (size_t)(d + 1) * (size_t)r.n_vocab);
		ck_assert_int_eq(kv_seq_free(be_kv(r.be), seq), 0);
	}
	be_close(r.be);

	p.max_batch_tokens = 48;
	rig_on(&r, m, "cuda", &p);
	for (i = 0; i < NSEQ; i++) {
		s[i].seq = kv_seq_new(be_kv(r.be));
		ck_assert_int_ge(s[i].seq, 0);
	}
	run_mixed(&r, s, 48, inv_models[_i]);
	for (i = 0; i < NSEQ; i++)
		free(s[i].want);
	be_close(r.be);
	model_free(m);
}
END_TEST
SUITE_LOOP("invariance", test_batched_equals_alone, 0, (int)(sizeof(inv_models) / sizeof(inv_models[0])));

/* ---- buffers, registry, errors ----------------------------------------- */

/* The KV buffer on the device: copies in and out at offsets. */
START_TEST(test_kv_buffer_copies)
{
	struct be_params p = rig_params(2, 16, 1);
	struct model *m;
	struct rig r;
	unsigned char in[1000], out[1000];
	size_t size;
	int i;

	if (!load(&m, "synth/synth-tiny-F16.gguf"))
		return;
	rig_on(&r, m, "cuda", &p);
	size = kv_storage_bytes(be_kv(r.be));
	ck_assert_uint_gt(size, 2 * sizeof(in));
	for (i = 0; i < (int)sizeof(in); i++)
		in[i] = (unsigned char)(i * 7 + 3);
	ck_assert_int_eq(be_kv_read(r.be, size - sizeof(out), out,
	    sizeof(out)), 0);
	for (i = 0; i < (int)sizeof(out); i++)
		ck_assert_int_eq(out[i], 0);	/* zeroed at allocation */
	ck_assert_int_eq(be_kv_write(r.be, 333, in, sizeof(in)), 0);
	memset(out, 0, sizeof(out));
	ck_assert_int_eq(be_kv_read(r.be, 333, out, sizeof(out)), 0);
	ck_assert_int_eq(memcmp(in, out, sizeof(in)), 0);
	ck_assert_int_eq(be_kv_read(r.be, 332, out, 1), 0);
	ck_assert_int_eq(out[0], 0);
	ck_assert_int_eq(be_kv_read(r.be, size, out, 1), -EINVAL);
	ck_assert_int_eq(be_kv_write(r.be, size - 1, in, 2), -EINVAL);
	be_close(r.be);
	model_free(m);
}
END_TEST
SUITE_TEST("misc", test_kv_buffer_copies);

/* "auto" picks CUDA when a device is usable. */
START_TEST(test_auto_picks_cuda)
{
	const char *const *names = be_names();
	struct be_params p = rig_params(2, 16, 1);
	struct model *m;
	struct rig r;

	ck_assert_str_eq(names[0], "cuda");
	ck_assert_str_eq(names[1], "cpu");
	if (!load(&m, "aidreams260K.gguf"))
		return;
	rig_on(&r, m, "auto", &p);
	ck_assert_str_eq(be_name(r.be), "cuda");
	be_close(r.be);
	model_free(m);
}
END_TEST
SUITE_TEST("misc", test_auto_picks_cuda);

/*
 * A KV cache twice the device's memory: a clear -ENOMEM naming the size,
 * and the device still usable afterwards.
 */
START_TEST(test_oom_kv)
{
	struct be_params p = rig_params(2, 16, 1);
	struct cuda_device_info info;
	struct kv_params kp = { 0 };
	struct cp_err e = { 0 };
	struct backend *be = NULL;
	struct model *m;
	struct rig r;
	uint64_t tokens;
	int rc;

	if (!load(&m, "synth/synth-tiny-F16.gguf"))
		return;
	ck_assert_int_eq(cuda_probe_device(0, &info), 0);
	kp.n_layer = m->hp.n_layer;
	kp.kv_dim = m->hp.n_head_kv * m->hp.head_dim;
	kp.type = CP_T_F16;
	ck_assert_uint_gt(kv_token_bytes(&kp), 0);
	tokens = 2 * info.total_mem / kv_token_bytes(&kp) + 1;
	ck_assert_uint_lt(tokens, INT_MAX);
	p.kv_tokens = (int)tokens;
	rc = be_open("cuda", m, &p, &be, &e);
	ck_assert_int_eq(rc, -ENOMEM);
	ck_assert_ptr_null(be);
	ck_assert_msg(strstr(e.msg, "KV cache") != NULL, "%s", e.msg);
	ck_assert_msg(strstr(e.msg, "bytes") != NULL, "%s", e.msg);
	p.kv_tokens = 0;
	rig_on(&r, m, "cuda", &p);
	be_close(r.be);
	model_free(m);
}
END_TEST
SUITE_TEST("misc", test_oom_kv);

/* Without a device: "cuda" says so, "auto" falls back to the CPU. */
START_TEST(test_nodev_fallback)
{
	const char *const *names = be_names();
	struct be_params p = rig_params(2, 16, 1);
	struct cp_err e = { 0 };
	struct backend *be = NULL;
	struct model *m;
	struct rig r;

	/* CUDA first, then the CPU that auto falls back to (then "null",
	 * which auto never picks). */
	ck_assert_str_eq(names[0], "cuda");
	ck_assert_str_eq(names[1], "cpu");
	if (!load(&m, "aidreams260K.gguf"))
		return;
	ck_assert_int_eq(be_open("cuda", m, &p, &be, &e), -ENODEV);
	ck_assert_ptr_null(be);
	ck_assert_msg(strstr(e.msg, "cuda backend: no usable device") != NULL,
	    "%s", e.msg);
	rig_on(&r, m, "auto", &p);
	ck_assert_str_eq(be_name(r.be), "cpu");
	be_close(r.be);
	r.be = NULL;
	memset(&e, 0, sizeof(e));
	ck_assert_int_eq(be_open("nosuch", m, &p, &be, &e), -ENOENT);
	model_free(m);
}
END_TEST
SUITE_TEST("registry", test_nodev_fallback);

SUITE_CASE("vs_cpu", 120);
SUITE_CASE("invariance", 120);
SUITE_CASE("misc", 120);
SUITE_CASE("registry", 60);

int
main(void)
{
	char why[256], *p = fx_path("aidreams260K.gguf");
	int n_dev;

	if (p == NULL) {
		printf("check_cuda_backend: skipped, fixtures not found in "
		    "%s\n", fx_dir());
		return 77;
	}
	free(p);
	n_dev = child_probe(cuda_probe_usable, why, sizeof(why));
	if (n_dev > 0) {
		suite_case_skip("registry");
	} else {
		suite_case_skip("vs_cpu");
		suite_case_skip("invariance");
		suite_case_skip("misc");
	}
	return suite_main_some(suite_registered("cuda_backend"), n_dev > 0,
	    "check_cuda_backend: GPU tests skipped, no usable CUDA device: "
	    "%s\n", why);
}
