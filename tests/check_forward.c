/*
 * check_forward.c - the CPU forward pass over the paged KV cache.
 *
 * Golden values come from llama.cpp (REFERENCE.md, synth/REFERENCE.json):
 * greedy ids of the two 260K models, and for the synthetic models the
 * top-10 log-probabilities after each prompt and a teacher-forced check of
 * every greedy step (synth/README.md, "Tolerances for synth-tiny").  The
 * invariance tests compare the engine with itself where the design demands
 * bit-identical results: chunked against unchunked prefill, one thread
 * against several, a sequence alone against the same sequence sharing its
 * steps with others, and a sequence recomputed after preemption.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "gguf.h"
#include "gguf_write.h"
#include "kvcache.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/prog.h"
#include "lib/refcheck.h"
#include "lib/resident.h"
#include "lib/rig.h"
#include "lib/suite.h"
#include "lib/tfile.h"
#include "lib/tmpdir.h"
#include "model.h"
#include "tokenizer.h"
#include "ttype.h"


extern char **environ;

#define MAX_IDS 1024

/* ---- a model on the CPU backend -------------------------------------- */

static void
rig_open_model(struct rig *r, const struct be_params *p)
{
	struct cp_err e = { 0 };

	r->n_vocab = r->m->hp.n_vocab;
	ck_assert_msg(be_open("cpu", r->m, p, &r->be, &e) == 0, "%s", e.msg);
}

/* ---- llama.cpp greedy references (REFERENCE.md) ----------------------- */

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
static const char aid_text[] = ", pixels unfolding like petals. "
    "Classifications unfold, a kaleidoscope of probability revealing hidden "
    "patterns. Classification whispers sec";
static const int32_t plc_prompt[] = { 1, 403, 407, 261, 378 };
static const int32_t plc_gen[64] = {
	473, 473, 473, 473, 473, 473, 473, 483, 339, 260, 403, 305, 299, 302,
	310, 1, 407, 465, 465, 465, 465, 465, 465, 465, 465, 465, 465, 465, 465,
	465, 465, 465, 465, 465, 466, 465, 465, 465, 465, 482, 482, 462, 458,
	465, 465, 465, 466, 473, 473, 473, 473, 473, 473, 473, 473, 473, 473,
	483, 473, 473, 473, 472, 465, 466
};

static void
assert_ids(const int32_t *got, const int32_t *want, int n)
{
	int i;

	for (i = 0; i < n; i++)
		ck_assert_msg(got[i] == want[i], "id %d: got %d, want %d", i,
		    (int)got[i], (int)want[i]);
}

/* Fixtures whose 64 greedy ids on the CPU after a prompt llama.cpp gave. */
static const struct greedy_ref {
	const char *rel;
	const int32_t *prompt;
	int np;
	const int32_t *gen;
} greedy_refs[] = {
	{ "aidreams260K.gguf", aid_prompt, 13, aid_gen },
	{ "stories260K-plctlab.gguf", plc_prompt, 5, plc_gen },
};

START_TEST(test_greedy_ids)
{
	const struct greedy_ref *g = &greedy_refs[_i];
	struct be_params p = rig_params(2, 0, 0);
	struct rig r;
	int32_t ids[64];

	rig_init(&r, g->rel, "cpu", &p);
	ref_greedy(&r, g->prompt, g->np, 0, 64, ids, NULL);
	assert_ids(ids, g->gen, 64);
	rig_fini(&r);
}
END_TEST
SUITE_LOOP("reference", test_greedy_ids, 0, (int)(sizeof(greedy_refs) / sizeof(greedy_refs[0])));

/* The prompt ids and the text through the tokenizer, as llama-server. */
START_TEST(test_aidreams_text)
{
	struct be_params p = rig_params(2, 0, 0);
	struct cp_err e = { 0 };
	struct tokenizer *tok;
	struct rig r;
	int32_t pr[32], ids[64];
	char text[1024];
	long n;
	int np;

	rig_init(&r, "aidreams260K.gguf", "cpu", &p);
	ck_assert_msg(tok_load(r.m->gf, &tok, &e) == 0, "%s", e.msg);
	np = tok_encode(tok, "Once upon a time", 16, true, false, pr, 32);
	ck_assert_int_eq(np, 13);
	assert_ids(pr, aid_prompt, 13);
	ref_greedy(&r, pr, np, 0, 64, ids, NULL);
	n = tok_decode(tok, ids, 64, 0, text, sizeof(text) - 1);
	ck_assert_int_gt(n, 0);
	ck_assert_int_lt(n, (long)sizeof(text));
	text[n] = '\0';
	ck_assert_str_eq(text, aid_text);
	tok_free(tok);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("reference", test_aidreams_text);

/* ---- synthetic models against REFERENCE.json -------------------------- */

/*
 * Tolerances: synth/README.md suggests 1e-2 (F32), 2e-2 (F16), 0.1
 * (BF16), 0.2 (quantized, activations quantized as llama.cpp does; the
 * K-quant files too, though the task asks only for F32 to Q4_0).  The
 * F32 and F16 files are held to 5e-3, which this engine meets with margin
 * (it rounds like llama.cpp: F16 cache, Q and softmax probabilities in F16).
 */
static const struct ref_case synth_cases[] = {
	{ "synth-tiny-F32.gguf", 5e-3, true, false },
	{ "synth-tiny-F16.gguf", 5e-3, true, true },
	{ "synth-tiny-BF16.gguf", 0.1, false, false },
	{ "synth-tiny-Q8_0.gguf", 0.2, false, false },
	{ "synth-tiny-Q4_0.gguf", 0.2, false, false },
	{ "synth-tiny-Q4_1.gguf", 0.2, false, false },
	{ "synth-tiny-Q5_0.gguf", 0.2, false, false },
	{ "synth-tiny-Q5_1.gguf", 0.2, false, false },
	{ "synth-tiny-Q2_K.gguf", 0.2, false, false },
	{ "synth-tiny-Q3_K_M.gguf", 0.2, false, false },
	{ "synth-tiny-Q4_K_M.gguf", 0.2, false, false },
	{ "synth-tiny-Q5_K_M.gguf", 0.2, false, false },
	{ "synth-tiny-Q6_K.gguf", 0.2, false, false },
	{ "synth-gqa-F16.gguf", 5e-3, true, true },
	{ "synth-gqa-Q8_0.gguf", 0.2, false, false },
	{ "synth-gqa-Q4_0.gguf", 0.2, false, false },
	{ "synth-gqa-Q4_K_M.gguf", 0.2, false, false },
};

START_TEST(test_synth)
{
	const struct ref_case *c = &synth_cases[_i];
	struct json *ref = ref_load("synth/REFERENCE.json");
	const struct json *file, *results;
	char rel[128];
	struct be_params p = rig_params(2, 1024, 1);
	struct rig r;
	size_t i;
	int pass;

	snprintf(rel, sizeof(rel), "synth/%s", c->file);
	file = json_get(json_get(ref, "files"), c->file);
	ck_assert_ptr_nonnull(file);
	results = json_get(file, "results");
	ck_assert_ptr_nonnull(results);
	ck_assert_int_eq((int)results->n, 3);
	for (pass = 0; pass < (c->kv_f32 ? 2 : 1); pass++) {
		p.kv_f32 = pass == 1;
		p.n_ctx = 1024;
		rig_init(&r, rel, "cpu", &p);
		for (i = 0; i < results->n; i++)
			ref_check_result(&r, c, &results->items[i], pass == 1);
		ck_assert_int_eq(kv_blocks_free(be_kv(r.be)),
		    kv_blocks_total(be_kv(r.be)));
		rig_fini(&r);
	}
	json_free(ref);
}
END_TEST
SUITE_LOOP("reference", test_synth, 0, (int)(sizeof(synth_cases) / sizeof(synth_cases[0])));

/* ---- batch invariance ------------------------------------------------- */

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

static const char *const invariance_models[] = {
	"aidreams260K.gguf",
	"synth/synth-tiny-F16.gguf",
	"synth/synth-tiny-Q4_0.gguf",
};

/* Models whose chunked prefill is checked too (the GQA ones, K-quants). */
static const char *const chunk_models[] = {
	"aidreams260K.gguf",
	"stories260K-plctlab.gguf",
	"synth/synth-tiny-F16.gguf",
	"synth/synth-tiny-Q4_0.gguf",
	"synth/synth-tiny-Q6_K.gguf",
	"synth/synth-gqa-F16.gguf",
	"synth/synth-gqa-Q8_0.gguf",
	"synth/synth-gqa-Q4_K_M.gguf",
};

/*
 * Prefill of prompt[0..np) in chunks of 1, 7, 16 and 64, then n_gen - 1
 * decode steps: the logits of every step and the greedy ids are those of
 * the prompt in one step.  name is the model's, for the message.
 */
static void
assert_chunk_invariant(struct rig *r, const char *name,
    const int32_t *prompt, int np, int n_gen)
{
	static const int chunks[] = { 1, 7, 16, 64 };
	size_t nb = (size_t)n_gen * (size_t)r->n_vocab * sizeof(float);
	int32_t ids0[8], ids[8];
	float *lg0, *lg;
	int c;

	ck_assert_int_le(n_gen, 8);
	lg0 = malloc(nb);
	lg = malloc(nb);
	ck_assert(lg0 != NULL && lg != NULL);
	ref_greedy(r, prompt, np, 0, n_gen, ids0, lg0);
	for (c = 0; c < 4; c++) {
		memset(lg, 0, nb);
		ref_greedy(r, prompt, np, chunks[c], n_gen, ids, lg);
		ck_assert_msg(memcmp(lg, lg0, nb) == 0, "%s: chunks of %d "
		    "change the logits", name, chunks[c]);
		assert_ids(ids, ids0, n_gen);
	}
	free(lg);
	free(lg0);
}

/* Prefill in chunks of 1, 7, 16, 64 gives the logits of one step. */
START_TEST(test_chunked_equals_unchunked)
{
	struct be_params p = rig_params(2, 128, 1);
	int32_t prompt[100];
	struct rig r;

	rig_init(&r, chunk_models[_i], "cpu", &p);
	make_prompt(prompt, 100, r.n_vocab, 7);
	assert_chunk_invariant(&r, chunk_models[_i], prompt, 100, 4);
	rig_fini(&r);
}
END_TEST
SUITE_LOOP("invariance", test_chunked_equals_unchunked, 0, (int)(sizeof(chunk_models) / sizeof(chunk_models[0])));

/*
 * The 609-token prompt of synth/REFERENCE.json (llama.cpp's ids) through
 * chunks of 1, 7, 16 and 64: the logits after the prompt and of two decode
 * steps are those of the prompt in one step.
 */
START_TEST(test_chunked_long609)
{
	static const char *const files[] = { "synth-gqa-F16.gguf",
	    "synth-gqa-Q4_K_M.gguf" };
	struct be_params p = rig_params(2, 640, 1);
	const struct json *res = NULL, *f;
	struct json *ref = ref_load("synth/REFERENCE.json");
	int32_t prompt[640];
	char rel[128];
	struct rig r;
	int np = 0;

	f = json_get(json_get(ref, "files"), files[_i]);
	ck_assert_ptr_nonnull(f);
	f = json_get(f, "results");
	for (size_t i = 0; f != NULL && i < f->n; i++)
		if (strcmp(json_get(json_at(f, i), "prompt")->str,
		    "long609") == 0)
			res = json_at(f, i);
	ck_assert_ptr_nonnull(res);
	np = ref_ids(json_get(res, "prompt_ids"), prompt, 640);
	ck_assert_int_eq(np, 609);
	snprintf(rel, sizeof(rel), "synth/%s", files[_i]);
	rig_init(&r, rel, "cpu", &p);
	assert_chunk_invariant(&r, files[_i], prompt, np, 3);
	rig_fini(&r);
	json_free(ref);
}
END_TEST
SUITE_LOOP("invariance", test_chunked_long609, 0, 2);

/* Threads and KV block size change nothing either. */
START_TEST(test_threads_blocks_invariant)
{
	struct be_params p;
	int32_t prompt[60], ids[3];
	float *lg0 = NULL, *lg = NULL;
	struct rig r;
	size_t nb;
	int v;

	for (v = 0; v < 4; v++) {
		p = rig_params(v == 0 ? 1 : v == 1 ? 2 : 3, 64, 2);
		p.block_tokens = v == 3 ? 5 : 0;
		rig_init(&r, invariance_models[_i], "cpu", &p);
		nb = 3 * (size_t)r.n_vocab * sizeof(float);
		if (v == 0) {
			lg0 = malloc(nb);
			lg = malloc(nb);
			ck_assert(lg0 != NULL && lg != NULL);
			make_prompt(prompt, 60, r.n_vocab, 11);
		}
		ref_greedy(&r, prompt, 60, 0, 3, ids, v == 0 ? lg0 : lg);
		if (v > 0)
			ck_assert_msg(memcmp(lg, lg0, nb) == 0, "%s: variant "
			    "%d changes the logits", invariance_models[_i], v);
		rig_fini(&r);
	}
	free(lg);
	free(lg0);
}
END_TEST
SUITE_LOOP("invariance", test_threads_blocks_invariant, 0, (int)(sizeof(invariance_models) / sizeof(invariance_models[0])));

/*
 * A prompt prefilled on one backend and imported into another continues
 * there with the logits of a prefill on that backend itself: the import
 * copies the K/V bit for bit (the engine is invariant to threads, chunks
 * and block placement).  The source runs on 1 thread, the target on 2 and
 * then, through be_set_threads(), on 1 of its 2.
 */
START_TEST(test_kv_import)
{
	struct be_params p = rig_params(2, 64, 2), p1 = rig_params(1, 16, 1);
	struct cp_err e = { 0 };
	struct rig a, b;
	struct kv_cache *ka, *kb;
	int32_t prompt[60], ids[4], ids0[4];
	float *lg0, *lg;
	size_t nb;
	int sa, sb, i, pad;

	rig_init(&b, invariance_models[_i], "cpu", &p);
	a = b;
	a.be = NULL;
	rig_open_model(&a, &p1);
	nb = 4 * (size_t)b.n_vocab * sizeof(float);
	lg0 = malloc(nb);
	lg = malloc(nb);
	ck_assert(lg0 != NULL && lg != NULL);
	make_prompt(prompt, 60, b.n_vocab, 5);
	ref_greedy(&b, prompt, 60, 0, 4, ids0, lg0);

	ka = be_kv(a.be);
	kb = be_kv(b.be);
	for (pad = 0; pad < 2; pad++) {
		/* pad: the target's blocks are not the source's. */
		int sp = pad ? kv_seq_new(kb) : -1;

		if (pad)
			ck_assert_int_eq(kv_seq_append(kb, sp, 37), 0);
		ck_assert_int_eq(be_set_threads(b.be, pad ? 1 : 2, &e), 0);
		sa = kv_seq_new(ka);
		ck_assert_int_ge(sa, 0);
		rig_feed(&a, sa, 0, prompt, 59, 16, lg);
		sb = kv_seq_new(kb);
		ck_assert_int_ge(sb, 0);
		ck_assert_int_eq(kv_seq_append(kb, sb, 59), 0);
		ck_assert_int_eq(be_kv_import(b.be, sb, a.be, sa, 59, &e), 0);
		ck_assert_int_eq(kv_seq_written(kb, sb), 59);
		rig_feed(&b, sb, 59, prompt + 59, 1, 0, lg);
		for (i = 0; i < 4; i++) {
			ids[i] = vec_argmax(lg + (size_t)i * (size_t)b.n_vocab,
			    b.n_vocab);
			if (i + 1 < 4)
				rig_feed(&b, sb, 60 + i, &ids[i], 1, 0,
				    lg + (size_t)(i + 1) * (size_t)b.n_vocab);
		}
		ck_assert_msg(memcmp(lg, lg0, nb) == 0, "%s: imported K/V "
		    "changes the logits (pad %d)", invariance_models[_i],
		    pad);
		assert_ids(ids, ids0, 4);
		ck_assert_int_eq(kv_seq_free(ka, sa), 0);
		ck_assert_int_eq(kv_seq_free(kb, sb), 0);
		if (pad)
			ck_assert_int_eq(kv_seq_free(kb, sp), 0);
	}
	free(lg);
	free(lg0);
	be_close(a.be);
	rig_fini(&b);
}
END_TEST
SUITE_LOOP("invariance", test_kv_import, 0, (int)(sizeof(invariance_models) / sizeof(invariance_models[0])));

/* be_kv_import() and be_set_threads() refuse what they cannot do. */
START_TEST(test_kv_import_errors)
{
	struct be_params p = rig_params(2, 64, 2), pf = rig_params(1, 64, 2);
	struct cp_err e = { 0 };
	struct rig a, b, f;
	int32_t prompt[20];
	float *lg;
	int sa, sb;

	rig_init(&b, "aidreams260K.gguf", "cpu", &p);
	a = b;
	a.be = NULL;
	rig_open_model(&a, &p);
	f = b;
	f.be = NULL;
	pf.kv_f32 = true;
	rig_open_model(&f, &pf);
	lg = malloc((size_t)b.n_vocab * sizeof(float));
	ck_assert_ptr_nonnull(lg);
	make_prompt(prompt, 20, b.n_vocab, 3);
	sa = kv_seq_new(be_kv(a.be));
	rig_feed(&a, sa, 0, prompt, 20, 0, lg);
	sb = kv_seq_new(be_kv(b.be));
	ck_assert_int_eq(kv_seq_append(be_kv(b.be), sb, 10), 0);
	/* more than the target reserved, more than the source computed */
	ck_assert_int_eq(be_kv_import(b.be, sb, a.be, sa, 11, &e), -EINVAL);
	ck_assert_msg(strstr(e.msg, "reserves 10") != NULL, "%s", e.msg);
	ck_assert_int_eq(kv_seq_append(be_kv(b.be), sb, 20), 0);
	ck_assert_int_eq(be_kv_import(b.be, sb, a.be, sa, 21, &e), -EINVAL);
	ck_assert_int_eq(be_kv_import(b.be, sb, b.be, sb, 5, &e), -EINVAL);
	/* F32 storage does not take F16 blocks */
	ck_assert_int_eq(be_kv_import(f.be, 0, a.be, sa, 5, &e), -EINVAL);
	ck_assert_msg(strstr(e.msg, "layouts") != NULL, "%s", e.msg);
	ck_assert_int_eq(kv_seq_written(be_kv(b.be), sb), 0);
	ck_assert_int_eq(be_kv_import(b.be, sb, a.be, sa, 20, &e), 0);
	ck_assert_int_eq(kv_seq_written(be_kv(b.be), sb), 20);
	/* Released storage reads as zeros; not while a sequence lives. */
	{
		size_t bb = kv_block_bytes(be_kv(a.be)), k;
		unsigned char *blk = malloc(bb);
		int b0 = kv_seq_blocks(be_kv(a.be), sa)[0];

		ck_assert_ptr_nonnull(blk);
		ck_assert_int_eq(be_kv_release(a.be), -EBUSY);
		ck_assert_int_eq(kv_seq_free(be_kv(a.be), sa), 0);
		ck_assert_int_eq(be_kv_read(a.be, (size_t)b0 * bb, blk, bb),
		    0);
		for (k = 0; k < bb && blk[k] == 0; k++)
			;
		ck_assert_msg(k < bb, "a computed block reads as zeros");
		ck_assert_int_eq(be_kv_release(a.be), 0);
		ck_assert_int_eq(be_kv_read(a.be, (size_t)b0 * bb, blk, bb),
		    0);
		for (k = 0; k < bb; k++)
			ck_assert_int_eq(blk[k], 0);
		free(blk);
	}
	ck_assert_int_eq(be_set_threads(b.be, 3, &e), -EINVAL);
	ck_assert_int_eq(be_set_threads(b.be, 0, &e), -EINVAL);
	ck_assert_int_eq(be_set_threads(b.be, 1, &e), 0);
	free(lg);
	be_close(a.be);
	be_close(f.be);
	rig_fini(&b);
}
END_TEST
SUITE_TEST("errors", test_kv_import_errors);

/*
 * be_kv_prefault() maps fresh blocks without changing any block: computed
 * K/V stays, fresh blocks read as zeros.
 */
START_TEST(test_kv_prefault)
{
	struct be_params p = rig_params(1, 64, 2);
	struct rig r;
	struct kv_cache *kv;
	int32_t prompt[20], blocks[65];
	unsigned char *mem, *before;
	size_t bb, k;
	float *lg;
	int s, b0, i, rc;

	p.kv_tokens = 32768;
	rig_init(&r, "aidreams260K.gguf", "cpu", &p);
	kv = be_kv(r.be);
	bb = kv_block_bytes(kv);
	ck_assert_int_ge(kv_blocks_total(kv), 1200);
	mem = r.be->ops->buf_host(r.be->kv_buf);
	lg = malloc((size_t)r.n_vocab * sizeof(float));
	ck_assert_ptr_nonnull(lg);
	make_prompt(prompt, 20, r.n_vocab, 5);
	s = kv_seq_new(kv);
	rig_feed(&r, s, 0, prompt, 20, 0, lg);
	b0 = kv_seq_blocks(kv, s)[0];
	before = malloc(bb);
	ck_assert_ptr_nonnull(before);
	memcpy(before, mem + (size_t)b0 * bb, bb);
	/* blocks 1024..1087, far from the written ones (huge pages) */
	for (i = 0; i < 64; i++)
		blocks[i] = 1024 + i;
	blocks[64] = b0;
	ck_assert(!resident(mem + 1024 * bb, 64 * bb));
	rc = be_kv_prefault(r.be, blocks, 65);
	if (rc == -ENOTSUP) {
		fprintf(stderr, "check_forward: test_kv_prefault: the kernel "
		    "cannot prefault (MADV_POPULATE_WRITE, Linux 5.14)\n");
	} else {
		ck_assert_int_eq(rc, 0);
		ck_assert(resident(mem + 1024 * bb, 64 * bb));
	}
	ck_assert_mem_eq(mem + (size_t)b0 * bb, before, bb);
	for (k = 0; k < 64 * bb; k++)
		ck_assert_int_eq(mem[1024 * bb + k], 0);
	blocks[0] = kv_blocks_total(kv);
	ck_assert_int_eq(be_kv_prefault(r.be, blocks, 1), -EINVAL);
	blocks[0] = -1;
	ck_assert_int_eq(be_kv_prefault(r.be, blocks, 1), -EINVAL);
	ck_assert_int_eq(be_kv_prefault(r.be, blocks, 0), 0);
	free(before);
	free(lg);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("errors", test_kv_prefault);

/* This process's resident pages of mapped files, in KiB. */
static long
rss_file_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "RssFile: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/*
 * be_warmup() reads the model's weights (their file pages become this
 * process's: RssFile) and leaves the cache as it found it.  The weights
 * stay in the file's layout (CP_NO_REPACK), as on a CPU without repacked
 * kernels: a repacked copy is made, and so resident, at open.
 */
START_TEST(test_warmup)
{
	struct be_params p = rig_params(2, 64, 2);
	struct cp_err e = { 0 };
	struct rig r;
	struct kv_cache *kv;
	long before, after;
	char *path = fx_path("synth/synth-gqa-F16.gguf");
	FILE *f;
	long file_kib;

	ck_assert_ptr_nonnull(path);
	ck_assert_ptr_nonnull(f = fopen(path, "rb"));
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	file_kib = ftell(f) / 1024;
	fclose(f);
	free(path);
	setenv("CP_NO_REPACK", "1", 1);
	rig_init(&r, "synth/synth-gqa-F16.gguf", "cpu", &p);
	unsetenv("CP_NO_REPACK");
	kv = be_kv(r.be);
	before = rss_file_kib();
	ck_assert_int_ge(before, 0);
	ck_assert_msg(be_warmup(r.be, 1, &e) == 0, "%s", e.msg);
	after = rss_file_kib();
	/*
	 * Every matrix but token_embd (a row per token; 16 of the 36 MB) is
	 * read whole: 19 MB of the file came in, against none without it.
	 */
	ck_assert_msg(after - before > file_kib / 3, "RssFile %ld -> %ld KiB, "
	    "the file %ld KiB", before, after, file_kib);
	ck_assert_int_eq(kv_seqs_live(kv), 0);
	ck_assert_int_eq(kv_blocks_free(kv), kv_blocks_total(kv));
	ck_assert_int_eq(be_warmup(r.be, r.n_vocab, &e), -EINVAL);
	ck_assert_int_eq(be_warmup(r.be, -1, &e), -EINVAL);
	ck_assert_msg(be_warmup(r.be, 0, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(kv_seqs_live(kv), 0);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("errors", test_warmup);

#define NSEQ 5
#define NGEN 8

/* One sequence of the mixed-step test. */
struct mseq {
	int32_t toks[128];	/* prompt then generated ids */
	int np;			/* prompt length */
	int ng;			/* generated so far */
	int want;		/* ids to generate */
	int fed;		/* tokens whose K/V are in the cache */
	int seq;		/* KV sequence, -1 when freed */
	int preempt_at;		/* drop the cache at this ng (0: never) */
	float *lg;		/* [want, n_vocab] logits of sampled steps */
};

/*
 * Run all sequences together under a budget of `budget` rows per step:
 * decoding sequences first, then prompt chunks in order.  A sequence asks
 * for logits when a step feeds its last known token.  One whose
 * preempt_at is reached loses its whole cache (truncate to 0, as the
 * scheduler preempts by recompute) and feeds its prompt and generated ids
 * again in chunks.
 */
static void
run_mixed(struct rig *r, struct mseq *s, int n, int budget)
{
	struct kv_cache *kv = be_kv(r->be);
	struct batch_seq bs[NSEQ];
	int32_t toks[256];
	int order[NSEQ], idx[NSEQ];
	struct cp_err e = { 0 };
	const float *lg;
	int live = n, i, k, no, nt, ne, left, take, nl, steps = 0;

	while (live > 0) {
		ck_assert_int_lt(++steps, 1000);
		/* decoding sequences first, then prefills (and recomputes) */
		no = 0;
		for (i = 0; i < n; i++)
			if (s[i].seq >= 0 && s[i].np + s[i].ng - s[i].fed == 1)
				order[no++] = i;
		for (i = 0; i < n; i++)
			if (s[i].seq >= 0 && s[i].np + s[i].ng - s[i].fed > 1)
				order[no++] = i;
		nt = ne = 0;
		left = budget;
		for (k = 0; k < no && left > 0; k++) {
			struct mseq *q = &s[order[k]];

			take = q->np + q->ng - q->fed;
			if (take > left)
				take = left;
			ck_assert_int_gt(take, 0);
			ck_assert_int_eq(kv_seq_append(kv, q->seq, take), 0);
			bs[ne].seq = q->seq;
			bs[ne].pos = q->fed;
			bs[ne].n_tokens = take;
			bs[ne].logits = q->fed + take == q->np + q->ng;
			memcpy(toks + nt, q->toks + q->fed,
			    (size_t)take * sizeof(int32_t));
			idx[ne++] = order[k];
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
			memcpy(q->lg + (size_t)q->ng * (size_t)r->n_vocab, lg,
			    (size_t)r->n_vocab * sizeof(float));
			q->toks[q->np + q->ng] = vec_argmax(lg, r->n_vocab);
			q->ng++;
			lg += r->n_vocab;
			if (q->ng == q->want) {
				ck_assert_int_eq(kv_seq_free(kv, q->seq), 0);
				q->seq = -1;
				live--;
			} else if (q->ng == q->preempt_at) {
				/* recompute prompt and generated ids */
				ck_assert_int_eq(kv_seq_truncate(kv, q->seq,
				    0), 0);
				q->fed = 0;
				q->preempt_at = 0;
			}
		}
		for (k = 0, i = 0; k < ne; k++)
			i += bs[k].logits;
		ck_assert_int_eq(nl, i);
		ck_assert_msg(kv_check(kv, &e) == 0, "%s", e.msg);
	}
}

START_TEST(test_batched_equals_alone)
{
	static const int plen[NSEQ] = { 5, 23, 40, 70, 17 };
	static const int want[NSEQ] = { NGEN, NGEN, 3, NGEN, NGEN };
	static const int preempt[NSEQ] = { 0, 4, 0, 0, 2 };
	struct be_params p = rig_params(2, 24, NSEQ);
	struct mseq s[NSEQ];
	int32_t alone[NSEQ][NGEN];
	float *alone_lg[NSEQ];
	struct rig r;
	size_t row;
	int i, j;

	p.kv_tokens = 512;
	rig_init(&r, invariance_models[_i], "cpu", &p);
	row = (size_t)r.n_vocab * sizeof(float);
	for (i = 0; i < NSEQ; i++) {
		memset(&s[i], 0, sizeof(s[i]));
		make_prompt(s[i].toks, plen[i], r.n_vocab, 100u + (unsigned)i);
		s[i].np = plen[i];
		s[i].want = want[i];
		s[i].preempt_at = preempt[i];
		s[i].lg = calloc(NGEN, row);
		alone_lg[i] = calloc(NGEN, row);
		ck_assert(s[i].lg != NULL && alone_lg[i] != NULL);
		/* alone: whole prompt in chunks of the budget */
		ref_greedy(&r, s[i].toks, plen[i], 24, want[i], alone[i],
		    alone_lg[i]);
	}
	ck_assert_int_eq(kv_blocks_free(be_kv(r.be)),
	    kv_blocks_total(be_kv(r.be)));
	for (i = 0; i < NSEQ; i++) {
		s[i].seq = kv_seq_new(be_kv(r.be));
		ck_assert_int_ge(s[i].seq, 0);
	}
	run_mixed(&r, s, NSEQ, 24);
	for (i = 0; i < NSEQ; i++) {
		for (j = 0; j < want[i]; j++)
			ck_assert_msg(s[i].toks[plen[i] + j] == alone[i][j],
			    "%s: seq %d id %d: %d together, %d alone",
			    invariance_models[_i], i, j,
			    (int)s[i].toks[plen[i] + j], (int)alone[i][j]);
		ck_assert_msg(memcmp(s[i].lg, alone_lg[i],
		    (size_t)want[i] * row) == 0,
		    "%s: seq %d logits differ together and alone",
		    invariance_models[_i], i);
		free(s[i].lg);
		free(alone_lg[i]);
	}
	ck_assert_int_eq(kv_seqs_live(be_kv(r.be)), 0);
	ck_assert_int_eq(kv_blocks_free(be_kv(r.be)),
	    kv_blocks_total(be_kv(r.be)));
	rig_fini(&r);
}
END_TEST
SUITE_LOOP("invariance", test_batched_equals_alone, 0, (int)(sizeof(invariance_models) / sizeof(invariance_models[0])));


/* ---- the llama equations, from a model written here ------------------ */

/*
 * A small model with random weights written with gguf_write.h, run by the
 * engine and by the plain double-precision forward pass below, written
 * from the llama equations (RMSNorm, RoPE on adjacent pairs of the first
 * n_rot dims of each head at position / scaling factor, causal softmax
 * attention with KV heads shared by n_head / n_head_kv query heads, SwiGLU,
 * tied or separate output).  The two must agree to float rounding.
 */
struct spec {
	int n_embd, n_head, n_kv, n_rot, n_ff, n_vocab, n_layer;
	float base, factor;
	bool tied;
};

static const struct spec specs[] = {
	/* MQA, partial rotation, linear rope scaling, tied output */
	{ 48, 6, 1, 4, 80, 50, 2, 500.0f, 4.0f, true },
	/* GQA (3 query heads per KV head), full rotation, separate output */
	{ 48, 6, 2, 8, 64, 40, 3, 10000.0f, 1.0f, false },
};

#define SPEC_CTX 64
#define SPEC_EPS 1e-5f

struct spec_w {
	float *embd, *out, *onorm;
	float *anorm[4], *wq[4], *wk[4], *wv[4], *wo[4];
	float *fnorm[4], *wg[4], *wu[4], *wd[4];
};

static float *
spec_rand(int n, unsigned *seed, float scale, float offset)
{
	float *v = malloc((size_t)n * sizeof(float));
	int i;

	ck_assert_ptr_nonnull(v);
	for (i = 0; i < n; i++) {
		*seed = *seed * 1664525u + 1013904223u;
		v[i] = offset + scale * ((float)(*seed >> 8) / 16777216.0f -
		    0.5f);
	}
	return v;
}

static void
spec_add(struct gguf_writer *w, const char *name, int cols, int rows,
    const float *data)
{
	uint64_t ne[2] = { (uint64_t)cols, (uint64_t)rows };

	ck_assert_int_eq(gguf_writer_add_tensor(w, name, CP_T_F32,
	    rows ? 2 : 1, ne, data), 0);
}

static void
spec_write(const struct spec *sp, struct spec_w *W, const char *path)
{
	struct gguf_writer *w = gguf_writer_new();
	struct cp_err e = { 0 };
	int hd = sp->n_embd / sp->n_head, qd = sp->n_head * hd;
	int kvd = sp->n_kv * hd, l;
	unsigned seed = 99;
	char name[64];

	ck_assert_ptr_nonnull(w);
	gguf_writer_set_str(w, "general.architecture", "llama");
	gguf_writer_set_u32(w, "llama.context_length", SPEC_CTX);
	gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)sp->n_embd);
	gguf_writer_set_u32(w, "llama.block_count", (uint32_t)sp->n_layer);
	gguf_writer_set_u32(w, "llama.feed_forward_length",
	    (uint32_t)sp->n_ff);
	gguf_writer_set_u32(w, "llama.attention.head_count",
	    (uint32_t)sp->n_head);
	gguf_writer_set_u32(w, "llama.attention.head_count_kv",
	    (uint32_t)sp->n_kv);
	gguf_writer_set_u32(w, "llama.rope.dimension_count",
	    (uint32_t)sp->n_rot);
	gguf_writer_set_f32(w, "llama.rope.freq_base", sp->base);
	gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon",
	    SPEC_EPS);
	if (sp->factor != 1.0f) {
		gguf_writer_set_str(w, "llama.rope.scaling.type", "linear");
		gguf_writer_set_f32(w, "llama.rope.scaling.factor", sp->factor);
	}
	W->embd = spec_rand(sp->n_vocab * sp->n_embd, &seed, 2.0f, 0);
	spec_add(w, "token_embd.weight", sp->n_embd, sp->n_vocab, W->embd);
	for (l = 0; l < sp->n_layer; l++) {
#define T(field, nm, cols, rows, scale, off) \
		W->field[l] = spec_rand((cols) * ((rows) ? (rows) : 1), &seed, \
		    scale, off); \
		snprintf(name, sizeof(name), "blk.%d." nm, l); \
		spec_add(w, name, cols, rows, W->field[l])
		T(anorm, "attn_norm.weight", sp->n_embd, 0, 0.5f, 1.0f);
		T(wq, "attn_q.weight", sp->n_embd, qd, 0.6f, 0);
		T(wk, "attn_k.weight", sp->n_embd, kvd, 0.6f, 0);
		T(wv, "attn_v.weight", sp->n_embd, kvd, 0.6f, 0);
		T(wo, "attn_output.weight", qd, sp->n_embd, 0.3f, 0);
		T(fnorm, "ffn_norm.weight", sp->n_embd, 0, 0.5f, 1.0f);
		T(wg, "ffn_gate.weight", sp->n_embd, sp->n_ff, 0.5f, 0);
		T(wu, "ffn_up.weight", sp->n_embd, sp->n_ff, 0.5f, 0);
		T(wd, "ffn_down.weight", sp->n_ff, sp->n_embd, 0.3f, 0);
#undef T
	}
	W->onorm = spec_rand(sp->n_embd, &seed, 0.5f, 1.0f);
	spec_add(w, "output_norm.weight", sp->n_embd, 0, W->onorm);
	if (sp->tied) {
		W->out = W->embd;
	} else {
		W->out = spec_rand(sp->n_vocab * sp->n_embd, &seed, 1.0f, 0);
		spec_add(w, "output.weight", sp->n_embd, sp->n_vocab, W->out);
	}
	ck_assert_msg(gguf_writer_write(w, path, &e) == 0, "%s", e.msg);
	gguf_writer_free(w);
}

static void
spec_free(const struct spec *sp, struct spec_w *W)
{
	int l;

	for (l = 0; l < sp->n_layer; l++) {
		free(W->anorm[l]); free(W->wq[l]); free(W->wk[l]);
		free(W->wv[l]); free(W->wo[l]); free(W->fnorm[l]);
		free(W->wg[l]); free(W->wu[l]); free(W->wd[l]);
	}
	if (!sp->tied)
		free(W->out);
	free(W->embd);
	free(W->onorm);
}

/* y[n] = W[n x k] x[k] */
static void
ref_mv(const float *W, const double *x, int n, int k, double *y)
{
	int i, j;

	for (i = 0; i < n; i++) {
		y[i] = 0;
		for (j = 0; j < k; j++)
			y[i] += (double)W[(size_t)i * (size_t)k + (size_t)j] *
			    x[j];
	}
}

static void
ref_norm(const double *x, const float *w, int n, double *y)
{
	double ss = 0;
	int i;

	for (i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0 / sqrt(ss / n + SPEC_EPS);
	for (i = 0; i < n; i++)
		y[i] = x[i] * ss * w[i];
}

static void
ref_rope(double *v, int heads, int hd, int n_rot, int pos, double base,
    double factor)
{
	int h, i;

	for (h = 0; h < heads; h++)
		for (i = 0; i < n_rot / 2; i++) {
			double th = pos / factor * pow(base, -2.0 * i / n_rot);
			double *p = v + h * hd + 2 * i, a = p[0], b = p[1];

			p[0] = a * cos(th) - b * sin(th);
			p[1] = a * sin(th) + b * cos(th);
		}
}

/* Logits after each of toks[0..n), n <= SPEC_CTX, into lg[n][n_vocab]. */
static void
ref_forward(const struct spec *sp, const struct spec_w *W,
    const int32_t *toks, int n, double *lg)
{
	int d = sp->n_embd, hd = d / sp->n_head, qd = sp->n_head * hd;
	int kvd = sp->n_kv * hd, F = sp->n_ff, l, p, h, j, i;
	double *x = calloc((size_t)n * (size_t)d, sizeof(double));
	double *K = calloc((size_t)n * (size_t)kvd, sizeof(double));
	double *V = calloc((size_t)n * (size_t)kvd, sizeof(double));
	double xn[256], q[256], att[256], o[256], g[256], u[256], sc[SPEC_CTX];

	for (p = 0; p < n; p++)
		for (i = 0; i < d; i++)
			x[p * d + i] = W->embd[(size_t)toks[p] * (size_t)d +
			    (size_t)i];
	for (l = 0; l < sp->n_layer; l++) {
		for (p = 0; p < n; p++) {
			ref_norm(x + p * d, W->anorm[l], d, xn);
			ref_mv(W->wk[l], xn, kvd, d, K + p * kvd);
			ref_mv(W->wv[l], xn, kvd, d, V + p * kvd);
			ref_rope(K + p * kvd, sp->n_kv, hd, sp->n_rot, p,
			    sp->base, sp->factor);
		}
		for (p = 0; p < n; p++) {
			ref_norm(x + p * d, W->anorm[l], d, xn);
			ref_mv(W->wq[l], xn, qd, d, q);
			ref_rope(q, sp->n_head, hd, sp->n_rot, p, sp->base,
			    sp->factor);
			for (h = 0; h < sp->n_head; h++) {
				int g_kv = h / (sp->n_head / sp->n_kv);
				double mx = -INFINITY, sum = 0;

				for (j = 0; j <= p; j++) {
					sc[j] = 0;
					for (i = 0; i < hd; i++)
						sc[j] += q[h * hd + i] *
						    K[j * kvd + g_kv * hd + i];
					sc[j] /= sqrt((double)hd);
					if (sc[j] > mx)
						mx = sc[j];
				}
				for (j = 0; j <= p; j++)
					sum += sc[j] = exp(sc[j] - mx);
				for (i = 0; i < hd; i++) {
					att[h * hd + i] = 0;
					for (j = 0; j <= p; j++)
						att[h * hd + i] += sc[j] / sum *
						    V[j * kvd + g_kv * hd + i];
				}
			}
			ref_mv(W->wo[l], att, d, qd, o);
			for (i = 0; i < d; i++)
				o[i] += x[p * d + i];
			/* the residual of row p is needed by rows > p only
			 * through K/V, already computed for this layer */
			ref_norm(o, W->fnorm[l], d, xn);
			ref_mv(W->wg[l], xn, F, d, g);
			ref_mv(W->wu[l], xn, F, d, u);
			for (i = 0; i < F; i++)
				g[i] = g[i] / (1 + exp(-g[i])) * u[i];
			ref_mv(W->wd[l], g, d, F, xn);
			for (i = 0; i < d; i++)
				x[p * d + i] = o[i] + xn[i];
		}
	}
	for (p = 0; p < n; p++) {
		ref_norm(x + p * d, W->onorm, d, xn);
		ref_mv(W->out, xn, sp->n_vocab, d, lg + p * sp->n_vocab);
	}
	free(V);
	free(K);
	free(x);
}

START_TEST(test_spec_equations)
{
	const struct spec *sp = &specs[_i];
	struct be_params p = rig_params(2, 16, 1);
	const char *tmp = tmp_dir();
	struct cp_err e = { 0 };
	struct spec_w W;
	struct rig r;
	char path[512];
	int32_t toks[40];
	double *ref, worst = 0, d;
	float *lg;
	int pos, i, seq;

	snprintf(path, sizeof(path), "%s/check_forward-%ld-spec%d.gguf",
	    tmp, (long)getpid(), _i);
	spec_write(sp, &W, path);
	make_prompt(toks, 40, sp->n_vocab, 5u + (unsigned)_i);
	ref = malloc(40 * (size_t)sp->n_vocab * sizeof(double));
	lg = malloc((size_t)sp->n_vocab * sizeof(float));
	ck_assert(ref != NULL && lg != NULL);
	ref_forward(sp, &W, toks, 40, ref);

	memset(&r, 0, sizeof(r));
	ck_assert_msg(model_load(path, &r.m, &e) == 0, "%s", e.msg);
	unlink(path);
	ck_assert(r.m->tied == sp->tied);
	ck_assert_int_eq(r.m->hp.n_head_kv, sp->n_kv);
	ck_assert_int_eq(r.m->hp.n_rot, sp->n_rot);
	ck_assert_float_eq(r.m->hp.rope[0].scale, 1.0f / sp->factor);
	p.kv_f32 = true;
	rig_open_model(&r, &p);
	seq = kv_seq_new(be_kv(r.be));
	/* one row per step: the logits of every position */
	for (pos = 0; pos < 40; pos++) {
		rig_feed(&r, seq, pos, &toks[pos], 1, 0, lg);
		for (i = 0; i < sp->n_vocab; i++) {
			d = fabs((double)lg[i] - ref[pos * sp->n_vocab + i]);
			if (d > worst)
				worst = d;
		}
	}
	printf("spec %d: largest logit error %.2e\n", _i, worst);
	ck_assert_msg(worst < 1e-4, "spec %d: logits differ from the "
	    "equations by %g", _i, worst);
	rig_fini(&r);
	free(lg);
	free(ref);
	spec_free(sp, &W);
}
END_TEST
SUITE_LOOP("reference", test_spec_equations, 0, (int)(sizeof(specs) / sizeof(specs[0])));


/* ---- cpmodel generate ------------------------------------------------- */

/* $CPMODEL, else $BUILD/bin/cpmodel, else build/bin/cpmodel; "" if absent. */
static const char *
cpmodel_path(void)
{
	static char path[1024];

	return prog_find(path, sizeof(path), "cpmodel", "CPMODEL") == 0 ?
	    path : "";
}

/*
 * Run cpmodel generate with argv[] (NULL-terminated, after "generate");
 * stdout into out (malloc'd, NUL-terminated), stderr into err (same).
 * Returns the exit status.
 */
static int
run_generate(const char *const *args, char **out, char **err)
{
	const char *tmp = tmp_dir();
	char po[512], pe[512];
	char *argv[32];
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int n = 0, st, k;

	snprintf(po, sizeof(po), "%s/check_forward-%ld.out", tmp,
	    (long)getpid());
	snprintf(pe, sizeof(pe), "%s/check_forward-%ld.err", tmp,
	    (long)getpid());
	argv[n++] = (char *)cpmodel_path();
	argv[n++] = (char *)"generate";
	while (n < 31 && *args != NULL)
		argv[n++] = (char *)*args++;
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, po, O_WRONLY | O_CREAT |
	    O_TRUNC, 0644);
	posix_spawn_file_actions_addopen(&fa, 2, pe, O_WRONLY | O_CREAT |
	    O_TRUNC, 0644);
	ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ),
	    0);
	posix_spawn_file_actions_destroy(&fa);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "cpmodel died (signal %d)",
	    WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	for (k = 0; k < 2; k++) {
		FILE *fp = fopen(k ? pe : po, "rb");
		char *buf = calloc(1, 65536);
		size_t got;

		ck_assert(fp != NULL && buf != NULL);
		got = fread(buf, 1, 65535, fp);
		buf[got] = '\0';
		fclose(fp);
		unlink(k ? pe : po);
		*(k ? err : out) = buf;
	}
	return WEXITSTATUS(st);
}

/* The text and ids of REFERENCE.md, whole prompt or in chunks. */
START_TEST(test_cli_generate)
{
	char *model = fx_path("aidreams260K.gguf");
	char want[512], ids[1024], *out, *err;
	const char *chunk = _i == 0 ? "0" : "5";
	size_t n = 0;
	int i;

	if (cpmodel_path()[0] == '\0') {
		printf("cpmodel not built: test_cli_generate skipped\n");
		free(model);
		return;
	}
	snprintf(want, sizeof(want), "%s\n", aid_text);
	{
		const char *a[] = { model, "Once upon a time", "--temp", "0",
		    "--threads", "2", _i ? "--chunk" : "-n", _i ? chunk : "64",
		    NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 0);
		ck_assert_str_eq(out, want);
		free(out);
		free(err);
	}
	for (i = 0; i < 64; i++)
		n += (size_t)snprintf(ids + n, sizeof(ids) - n, "%s%d",
		    i ? " " : "", (int)aid_gen[i]);
	snprintf(ids + n, sizeof(ids) - n, "\n");
	{
		const char *a[] = { model, "Once upon a time", "--temp", "0",
		    "--ids", "--chunk", _i ? "3" : "13", NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 0);
		ck_assert_str_eq(out, ids);
		free(out);
		free(err);
	}
	free(model);
}
END_TEST
SUITE_LOOP("errors", test_cli_generate, 0, 2);

START_TEST(test_cli_errors)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *tmp = tmp_dir();
	char *out, *err, path[512];
	unsigned char *buf;
	size_t size;

	if (cpmodel_path()[0] == '\0') {
		printf("cpmodel not built: test_cli_errors skipped\n");
		free(model);
		return;
	}
	{
		const char *a[] = { model, NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 1);
		ck_assert_ptr_nonnull(strstr(err, "usage:"));
		free(out);
		free(err);
	}
	{
		const char *a[] = { model, "hi", "-n", "x", NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 1);
		ck_assert_ptr_nonnull(strstr(err, "-n 'x'"));
		free(out);
		free(err);
	}
	{
		const char *a[] = { model, "hi", "--backend", "bogus", NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 1);
		ck_assert_ptr_nonnull(strstr(err, "backend 'bogus'"));
		ck_assert_str_eq(out, "");
		free(out);
		free(err);
	}
	{
		const char *a[] = { "/nonexistent.gguf", "hi", NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 1);
		ck_assert_ptr_nonnull(strstr(err, "/nonexistent.gguf"));
		ck_assert_str_eq(out, "");
		free(out);
		free(err);
	}
	/* a model whose weights are NaN from layer 1 on */
	buf = (unsigned char *)tfile_read(model, &size);
	memset(buf + size - 300000, 0xff, 100000);
	snprintf(path, sizeof(path), "%s/check_forward-%ld-nan.gguf",
	    tmp, (long)getpid());
	tfile_write(path, buf, size);
	{
		const char *a[] = { path, "Once upon a time", NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 1);
		ck_assert_msg(strstr(err, "NaN or infinite logits") != NULL,
		    "%s", err);
		free(out);
		free(err);
	}
	/* the same file cut short */
	tfile_write(path, buf, size / 2);
	{
		const char *a[] = { path, "Once upon a time", NULL };

		ck_assert_int_eq(run_generate(a, &out, &err), 1);
		ck_assert_msg(strstr(err, "past end of file") != NULL, "%s",
		    err);
		free(out);
		free(err);
	}
	unlink(path);
	free(buf);
	free(model);
}
END_TEST
SUITE_TEST("errors", test_cli_errors);

/* ---- limits and errors ------------------------------------------------ */

START_TEST(test_batch_errors)
{
	struct be_params p = rig_params(1, 16, 2);
	struct cp_err e = { 0 };
	struct kv_cache *kv;
	struct rig r;
	int32_t toks[20] = { 1, 2, 3, 4 };
	struct batch_seq bs[3];
	struct step_batch b = { toks, 2, bs, 1 };
	const float *lg;
	int a, c;

	rig_init(&r, "aidreams260K.gguf", "cpu", &p);
	kv = be_kv(r.be);
	a = kv_seq_new(kv);
	c = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_new(kv), -ENOSPC);
	ck_assert_int_eq(kv_seq_append(kv, a, 2), 0);
	bs[0] = (struct batch_seq){ a, 0, 2, true };
	/* dead sequence */
	bs[0].seq = 7;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "sequence 7 is not live"));
	bs[0].seq = a;
	/* past the reserved positions */
	bs[0].n_tokens = 3;
	b.n_tokens = 3;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "past the 2 reserved"));
	/* a gap: position 1 with nothing written */
	bs[0] = (struct batch_seq){ a, 1, 1, true };
	b.n_tokens = 1;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "position 1, sequence"));
	/* token out of range */
	bs[0] = (struct batch_seq){ a, 0, 2, true };
	b.n_tokens = 2;
	toks[1] = 512;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "id 512, expected 0..511"));
	toks[1] = -1;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	toks[1] = 2;
	/* entries and n_tokens disagree */
	b.n_tokens = 3;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	b.n_tokens = 1;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	b.n_tokens = 2;
	/* one sequence twice */
	ck_assert_int_eq(kv_seq_append(kv, c, 1), 0);
	bs[1] = bs[0];
	bs[0].n_tokens = 1;
	bs[1].n_tokens = 1;
	b.n_seqs = 2;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "share sequence"));
	/* too many entries and tokens */
	b.n_seqs = 3;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	b.n_seqs = 0;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	b.n_seqs = 1;
	b.n_tokens = 17;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	/* nothing was written by the failed steps */
	ck_assert_int_eq(kv_seq_written(kv, a), 0);
	/* a valid step; then wait without submit, submit twice */
	bs[0] = (struct batch_seq){ a, 0, 2, false };
	bs[1] = (struct batch_seq){ c, 0, 1, true };
	b.n_tokens = 3;
	b.n_seqs = 2;
	toks[2] = 5;
	ck_assert_int_eq(be_step_wait(r.be, &lg, NULL, &e), -EINVAL);
	ck_assert_int_eq(be_step_submit(r.be, &b, &e), 0);
	ck_assert_int_eq(be_step_submit(r.be, &b, &e), -EBUSY);
	{
		int nl = -1;

		ck_assert_int_eq(be_step_wait(r.be, &lg, &nl, &e), 0);
		ck_assert_int_eq(nl, 1);
	}
	ck_assert(isfinite(lg[0]) && isfinite(lg[511]));
	ck_assert_int_eq(kv_seq_written(kv, a), 2);
	ck_assert_int_eq(kv_seq_written(kv, c), 1);
	/* a step may rewrite from an earlier position (recompute) */
	bs[0] = (struct batch_seq){ a, 1, 1, true };
	b.n_seqs = 1;
	b.n_tokens = 1;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), 0);
	ck_assert_int_eq(kv_seq_written(kv, a), 2);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("errors", test_batch_errors);

START_TEST(test_open_errors)
{
	struct be_params p = rig_params(1, 0, 0);
	struct cp_err e = { 0 };
	struct backend *be = (struct backend *)1;
	struct rig r;

	rig_init(&r, "aidreams260K.gguf", "cpu", &p);
	ck_assert_str_eq(be_name(r.be), "cpu");
	ck_assert_int_eq(be_params(r.be)->n_ctx, 128);
	ck_assert_int_eq(be_params(r.be)->max_batch_tokens,
	    BE_DEFAULT_BATCH_TOKENS);
	/* default pool: one context of 16-token blocks */
	ck_assert_int_eq(kv_blocks_total(be_kv(r.be)), 8);
	/* The CPU backend is always compiled in: auto falls back to it. */
	{
		const char *const *nm = be_names();
		int i = 0;

		while (nm[i] != NULL && strcmp(nm[i], "cpu") != 0)
			i++;
		ck_assert_ptr_nonnull(nm[i]);
	}
	ck_assert_int_eq(be_open("nosuch", r.m, &p, &be, &e), -ENOENT);
	ck_assert_ptr_null(be);
	ck_assert_ptr_nonnull(strstr(e.msg, "nosuch"));
	p.n_ctx = 129;
	ck_assert_int_eq(be_open("cpu", r.m, &p, &be, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "context length 129"));
	p.n_ctx = 0;
	p.max_batch_tokens = -1;
	ck_assert_int_eq(be_open("auto", r.m, &p, &be, &e), -EINVAL);
	p.max_batch_tokens = 0;
	p.block_tokens = KV_MAX_BLOCK_TOKENS + 1;
	ck_assert_int_eq(be_open("cpu", r.m, &p, &be, &e), -EINVAL);
	p.block_tokens = 0;
	p.kv_tokens = 1000;
	ck_assert_int_eq(be_open("auto", r.m, &p, &be, &e), 0);
	ck_assert_int_eq(kv_blocks_total(be_kv(be)), 63);
	be_close(be);
	be_close(NULL);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("errors", test_open_errors);

/* A prompt of the whole context runs in chunks of the scratch budget. */
START_TEST(test_context_in_chunks)
{
	struct be_params p = rig_params(2, 8, 1);
	struct kv_cache *kv;
	int32_t prompt[128];
	float *lg;
	struct rig r;
	int seq;

	rig_init(&r, "aidreams260K.gguf", "cpu", &p);
	kv = be_kv(r.be);
	lg = malloc((size_t)r.n_vocab * sizeof(float));
	make_prompt(prompt, 128, r.n_vocab, 3);
	seq = kv_seq_new(kv);
	rig_feed(&r, seq, 0, prompt, 128, 8, lg);
	ck_assert(isfinite(lg[vec_argmax(lg, r.n_vocab)]));
	ck_assert_int_eq(kv_seq_append(kv, seq, 1), -E2BIG);
	ck_assert_int_eq(kv_blocks_free(kv), 0);
	ck_assert_int_eq(kv_seq_free(kv, seq), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 8);
	free(lg);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("errors", test_context_in_chunks);

/* NaN weights: the step completes, the logits say so, nothing crashes. */
START_TEST(test_damaged_weights)
{
	struct be_params p = rig_params(2, 0, 0);
	struct cp_err e = { 0 };
	char *path = fx_path("aidreams260K.gguf");
	unsigned char *buf;
	const struct gguf_tensor *t;
	struct rig r;
	float *lg;
	size_t size;
	int seq;

	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(path);
	buf = (unsigned char *)tfile_read(path, &size);
	ck_assert_int_eq(gguf_open_mem(buf, size, &r.f, &e), 0);
	t = gguf_find_tensor(r.f, "blk.1.attn_q.weight");
	ck_assert_ptr_nonnull(t);
	memset(buf + ((const unsigned char *)t->data - buf), 0xff, 256);
	ck_assert_int_eq(model_from_gguf(r.f, &r.m, &e), 0);
	rig_open_model(&r, &p);
	lg = malloc((size_t)r.n_vocab * sizeof(float));
	seq = kv_seq_new(be_kv(r.be));
	rig_feed(&r, seq, 0, aid_prompt, 13, 0, lg);
	ck_assert(isnan(lg[0]));
	rig_fini(&r);
	free(lg);
	free(buf);
	free(path);
}
END_TEST
SUITE_TEST("errors", test_damaged_weights);

SUITE_CASE("reference", 120);
SUITE_CASE("invariance", 120);
SUITE_CASE("errors", 60);

int
main(void)
{
	return fx_main("forward", "aidreams260K.gguf");
}
