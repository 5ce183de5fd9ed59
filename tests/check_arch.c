/*
 * check_arch.c - the model families beyond plain llama (arch/ fixtures:
 * Llama 3.1 RoPE, qwen2, qwen3, phi3, gemma, gemma2, gemma3) against
 * llama.cpp's recorded outputs in arch/REFERENCE.json, and the invariances
 * the engine promises for every family: chunked prefill equals one step,
 * and a sequence batched with others equals the sequence alone, with the
 * long prompt (702 tokens) crossing the sliding windows (256, 400).
 *
 * Tolerances, from arch/README.md: F16 files 2e-2 on the top-10 and on
 * every teacher-forced greedy step, and exact free-running greedy ids
 * (except gemma, whose greedy run llama.cpp itself flips under an F32
 * cache: teacher-forced only); Q8_0 files 0.2, teacher-forced.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/refcheck.h"
#include "lib/rig.h"
#include "lib/suite.h"
#include "model.h"
#include "tokenizer.h"


#define REF "arch/REFERENCE.json"
#define MAX_IDS 1024

static const struct ref_case cases[] = {
	{ "arch-llama31-F16.gguf", 2e-2, true, false },
	{ "arch-llama31-Q8_0.gguf", 0.2, false, false },
	{ "arch-qwen2-F16.gguf", 2e-2, true, false },
	{ "arch-qwen2-Q8_0.gguf", 0.2, false, false },
	{ "arch-qwen3-F16.gguf", 2e-2, true, false },
	{ "arch-qwen3-Q8_0.gguf", 0.2, false, false },
	{ "arch-phi3-F16.gguf", 2e-2, true, false },
	{ "arch-phi3-Q8_0.gguf", 0.2, false, false },
	{ "arch-gemma-F16.gguf", 2e-2, false, false },
	{ "arch-gemma-Q8_0.gguf", 0.2, false, false },
	{ "arch-gemma2-F16.gguf", 2e-2, true, false },
	{ "arch-gemma2-Q8_0.gguf", 0.2, false, false },
	{ "arch-gemma3-F16.gguf", 2e-2, true, false },
	{ "arch-gemma3-Q8_0.gguf", 0.2, false, false },
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

static struct be_params
params(int batch, int max_seqs)
{
	struct be_params p = rig_params(2, batch, max_seqs);

	p.n_ctx = 1024;
	return p;
}

static const char *
rel_of(const char *file, char *buf, size_t cap)
{
	snprintf(buf, cap, "arch/%s", file);
	return buf;
}

/* The text of prompt key in the reference. */
static const char *
prompt_text(const struct json *ref, const char *key)
{
	const struct json *ps = json_get(ref, "prompts");

	for (size_t i = 0; ps != NULL && i < ps->n; i++)
		if (strcmp(json_get(json_at(ps, i), "key")->str, key) == 0)
			return json_get(json_at(ps, i), "text")->str;
	ck_abort_msg("prompt %s missing", key);
	return NULL;
}

/* The file's tokenizer gives llama.cpp's prompt ids. */
static void
check_prompt_ids(const struct rig *r, const struct json *ref,
    const struct json *res, const char *file)
{
	const char *text = prompt_text(ref, json_get(res, "prompt")->str);
	int32_t want[MAX_IDS], got[MAX_IDS];
	struct tokenizer *t;
	struct cp_err e = { 0 };
	int nw, ng;

	ck_assert_msg(tok_load(r->m->gf, &t, &e) == 0, "%s", e.msg);
	nw = ref_ids(json_get(res, "prompt_ids"), want, MAX_IDS);
	ng = tok_encode(t, text, strlen(text), true, false, got, MAX_IDS);
	ck_assert_msg(ng == nw && memcmp(got, want, (size_t)nw *
	    sizeof(int32_t)) == 0, "%s %s: prompt ids differ (%d ids, want "
	    "%d)", file, json_get(res, "prompt")->str, ng, nw);
	tok_free(t);
}

START_TEST(test_reference)
{
	const struct ref_case *c = &cases[_i];
	struct json *ref = ref_load(REF);
	const struct json *res;
	struct be_params p = params(1024, 1);
	struct rig r;
	char rel[128];

	res = json_get(json_get(json_get(ref, "files"), c->file), "results");
	ck_assert_msg(res != NULL && res->n == 2, "%s: results", c->file);
	rig_init(&r, rel_of(c->file, rel, sizeof(rel)), "cpu", &p);
	for (size_t i = 0; i < res->n; i++) {
		check_prompt_ids(&r, ref, json_at(res, i), c->file);
		ref_check_result(&r, c, json_at(res, i), false);
	}
	ck_assert_int_eq(kv_blocks_free(be_kv(r.be)),
	    kv_blocks_total(be_kv(r.be)));
	rig_fini(&r);
	json_free(ref);
}
END_TEST
SUITE_LOOP("reference", test_reference, 0, N_CASES);

/* The long prompt's ids of file (702, or 619/637 with the GPT-2 vocab). */
static int
long_prompt(const char *file, int32_t *ids)
{
	struct json *ref = ref_load(REF);
	const struct json *res = ref_result(ref, file, "pub_long");
	int n;

	ck_assert_ptr_nonnull(res);
	n = ref_ids(json_get(res, "prompt_ids"), ids, MAX_IDS);
	json_free(ref);
	ck_assert_int_gt(n, 600);
	return n;
}

/*
 * The long prompt in chunks of 1, 7, 64 and 512 gives the logits of the
 * prompt in one step, after the prompt and for three decode steps: the
 * windows are exact whatever a chunk's start.
 */
START_TEST(test_chunked_equals_unchunked)
{
	static const int chunks[] = { 1, 7, 64, 512 };
	const struct ref_case *c = &cases[2 * _i];
	struct be_params p = params(1024, 1);
	int32_t prompt[MAX_IDS], ids0[4], ids[4];
	float *lg0, *lg;
	char rel[128];
	struct rig r;
	size_t nb;
	int np = long_prompt(c->file, prompt);

	rig_init(&r, rel_of(c->file, rel, sizeof(rel)), "cpu", &p);
	nb = 4 * (size_t)r.n_vocab * sizeof(float);
	lg0 = malloc(nb);
	lg = malloc(nb);
	ck_assert(lg0 != NULL && lg != NULL);
	ref_greedy(&r, prompt, np, 0, 4, ids0, lg0);
	for (int k = 0; k < 4; k++) {
		memset(lg, 0, nb);
		ref_greedy(&r, prompt, np, chunks[k], 4, ids, lg);
		ck_assert_msg(memcmp(lg, lg0, nb) == 0, "%s: chunks of %d "
		    "change the logits", c->file, chunks[k]);
		ck_assert_int_eq(memcmp(ids, ids0, sizeof(ids)), 0);
	}
	free(lg);
	free(lg0);
	rig_fini(&r);
}
END_TEST
SUITE_LOOP("invariance", test_chunked_equals_unchunked, 0, N_CASES / 2);

/* One sequence of the batched test: its prompt, then greedy decode. */
struct bseq {
	int32_t toks[MAX_IDS + 8];
	int np, fed, n_gen, seq;
	float *lg;		/* [NGEN][n_vocab] */
};

#define NGEN 4
#define NBSEQ 3
#define BCHUNK 96		/* prompt tokens a sequence adds per step */

/*
 * Steps of up to BCHUNK prompt tokens of each sequence plus one decode
 * token of each sequence past its prompt, until every one has its NGEN
 * logits rows: the sequences share every step.
 */
static void
run_together(struct rig *r, struct bseq *s, int n)
{
	struct kv_cache *kv = be_kv(r->be);
	int32_t toks[NBSEQ * BCHUNK];
	struct batch_seq bs[NBSEQ];
	struct cp_err e = { 0 };
	const float *lg;
	int nl, left = n;

	while (left > 0) {
		struct step_batch b = { .tokens = toks, .seqs = bs };
		int nt = 0, k = 0, take;

		for (int i = 0; i < n; i++) {
			struct bseq *q = &s[i];

			if (q->n_gen == NGEN)
				continue;
			take = q->fed < q->np ? q->np - q->fed : 1;
			take = take > BCHUNK ? BCHUNK : take;
			ck_assert_int_eq(kv_seq_append(kv, q->seq, take), 0);
			memcpy(toks + nt, q->toks + q->fed,
			    (size_t)take * sizeof(int32_t));
			bs[k] = (struct batch_seq){ .seq = q->seq,
			    .pos = q->fed, .n_tokens = take,
			    .logits = q->fed + take >= q->np };
			nt += take;
			k++;
		}
		b.n_tokens = nt;
		b.n_seqs = k;
		ck_assert_msg(be_step(r->be, &b, &lg, &nl, &e) == 0, "%s",
		    e.msg);
		for (int i = 0, j = 0, o = 0; i < n; i++) {
			struct bseq *q = &s[i];
			const float *row;

			if (q->n_gen == NGEN)
				continue;
			q->fed += bs[j].n_tokens;
			if (bs[j++].logits) {
				row = lg + (size_t)o++ * (size_t)r->n_vocab;
				memcpy(q->lg + (size_t)q->n_gen *
				    (size_t)r->n_vocab, row,
				    (size_t)r->n_vocab * sizeof(float));
				q->toks[q->fed] = vec_argmax(row, r->n_vocab);
				if (++q->n_gen == NGEN) {
					ck_assert_int_eq(kv_seq_free(kv,
					    q->seq), 0);
					left--;
				}
			}
		}
	}
}

/*
 * The long prompt, its first 300 ids and its first 20 ids, each alone and
 * then the three sharing steps: the same ids and the same logits bits.
 */
START_TEST(test_batched_equals_alone)
{
	static const int lens[NBSEQ] = { 0, 300, 20 };
	const struct ref_case *c = &cases[2 * _i];
	struct be_params p = params(3 * BCHUNK, NBSEQ);
	int32_t prompt[MAX_IDS], ids[NGEN];
	struct bseq *s = calloc(NBSEQ, sizeof(*s));
	float *alone[NBSEQ];
	char rel[128];
	struct rig r;
	size_t row;
	int np = long_prompt(c->file, prompt);

	ck_assert_ptr_nonnull(s);
	p.kv_tokens = 2048;
	rig_init(&r, rel_of(c->file, rel, sizeof(rel)), "cpu", &p);
	row = (size_t)r.n_vocab * sizeof(float);
	for (int i = 0; i < NBSEQ; i++) {
		s[i].np = lens[i] ? lens[i] : np;
		memcpy(s[i].toks, prompt, (size_t)s[i].np * sizeof(int32_t));
		s[i].lg = calloc(NGEN, row);
		alone[i] = calloc(NGEN, row);
		ck_assert(s[i].lg != NULL && alone[i] != NULL);
		ref_greedy(&r, prompt, s[i].np, BCHUNK, NGEN, ids, alone[i]);
		s[i].seq = kv_seq_new(be_kv(r.be));
		ck_assert_int_ge(s[i].seq, 0);
	}
	run_together(&r, s, NBSEQ);
	for (int i = 0; i < NBSEQ; i++) {
		ck_assert_msg(memcmp(s[i].lg, alone[i], NGEN * row) == 0,
		    "%s: sequence %d: logits differ together and alone",
		    c->file, i);
		free(s[i].lg);
		free(alone[i]);
	}
	ck_assert_int_eq(kv_blocks_free(be_kv(r.be)),
	    kv_blocks_total(be_kv(r.be)));
	rig_fini(&r);
	free(s);
}
END_TEST
SUITE_LOOP("invariance", test_batched_equals_alone, 0, N_CASES / 2);

/*
 * What each family's file makes of its layers (arch/README.md, llama.cpp
 * c392e509 and ec98e2002 semantics).
 */
START_TEST(test_layer_description)
{
	struct be_params p = params(64, 1);
	const struct model_hparams *hp;
	struct rig r;

	rig_init(&r, "arch/arch-gemma3-F16.gguf", "cpu", &p);
	hp = &r.m->hp;
	ck_assert_int_eq(hp->arch, ARCH_GEMMA3);
	ck_assert(hp->rope_neox && hp->act == ACT_GELU);
	ck_assert_int_eq(hp->n_rope, 2);
	ck_assert_float_eq(hp->rope[0].base, 1e6f);
	ck_assert_float_eq(hp->rope[0].scale, 0.125f);
	ck_assert_float_eq(hp->rope[1].base, 10000.0f);
	ck_assert_float_eq(hp->rope[1].scale, 1.0f);
	for (int il = 0; il < 6; il++) {
		ck_assert_int_eq(r.m->layers[il].window, il < 5 ? 256 : 0);
		ck_assert_int_eq(r.m->layers[il].rope, il < 5 ? 1 : 0);
		ck_assert(r.m->layers[il].q_norm != NULL &&
		    r.m->layers[il].post_ffn_norm != NULL);
	}
	ck_assert_float_eq(hp->final_softcap, 0.0f);
	ck_assert_float_eq(hp->attn_softcap, 0.0f);
	ck_assert_float_eq(hp->embd_scale, sqrtf(64.0f));
	ck_assert_float_eq(hp->q_scale, 0.125f);
	rig_fini(&r);

	rig_init(&r, "arch/arch-gemma2-F16.gguf", "cpu", &p);
	hp = &r.m->hp;
	for (int il = 0; il < 26; il++)
		ck_assert_int_eq(r.m->layers[il].window, il % 2 ? 0 : 256);
	ck_assert_float_eq(hp->attn_softcap, 4.0f);
	ck_assert_float_eq(hp->final_softcap, 10.0f);
	ck_assert_int_eq(hp->head_dim, 48);
	rig_fini(&r);

	rig_init(&r, "arch/arch-phi3-F16.gguf", "cpu", &p);
	for (int il = 0; il < 2; il++) {
		const struct model_layer *l = &r.m->layers[il];

		ck_assert_int_eq(l->window, 400);
		/* the fused tensors' rows: Q, K, V and gate, up */
		ck_assert_ptr_eq((const char *)l->wk.data, (const char *)
		    l->wq.data + (size_t)l->wq.rows * l->wq.row_bytes);
		ck_assert_ptr_eq((const char *)l->w_up.data, (const char *)
		    l->w_gate.data + (size_t)l->w_gate.rows *
		    l->w_gate.row_bytes);
	}
	rig_fini(&r);

	rig_init(&r, "arch/arch-llama31-F16.gguf", "cpu", &p);
	hp = &r.m->hp;
	ck_assert(!hp->rope_neox && hp->rope[0].freqs != NULL);
	ck_assert_float_eq(hp->rope[0].freqs[0], 1.0f);
	ck_assert_float_eq(hp->rope[0].freqs[31], 8.0f);
	rig_fini(&r);

	rig_init(&r, "arch/arch-qwen2-F16.gguf", "cpu", &p);
	ck_assert(r.m->layers[0].bq != NULL && r.m->hp.rope_neox);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("reference", test_layer_description);

SUITE_CASE("reference", 600);
SUITE_CASE("invariance", 900);

int
main(void)
{
	return fx_main("arch", REF);
}
