/*
 * check_gguf_fixtures.c - the GGUF reader on the shared fixtures: metadata,
 * tensor shapes and types, against their SOURCES.md and
 * synth/REFERENCE.json.  Exits 77 when the fixtures are absent.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gguf.h"
#include "lib/fixtures.h"
#include "lib/suite.h"
#include "ttype.h"

static struct gguf_file *
fx_open(const char *rel)
{
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };
	char *path = fx_path(rel);
	int ret;

	ck_assert_msg(path != NULL, "fixture %s missing under %s", rel,
	    fx_dir());
	ret = gguf_open(path, &f, &e);
	ck_assert_msg(ret == 0, "%s: %d %s", rel, ret, e.msg);
	free(path);
	return f;
}

static uint32_t
get_u32(const struct gguf_file *f, const char *key)
{
	struct cp_err e = { 0, "" };
	uint32_t v = 0;

	ck_assert_msg(gguf_get_u32(f, key, &v, &e) == 0, "%s", e.msg);
	return v;
}

static float
get_f32(const struct gguf_file *f, const char *key)
{
	struct cp_err e = { 0, "" };
	float v = 0;

	ck_assert_msg(gguf_get_f32(f, key, &v, &e) == 0, "%s", e.msg);
	return v;
}

/* The llama.* hyperparameters of a fixture (0: not checked). */
struct llama_hp {
	uint32_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx, n_rot;
};

/* The value under key is want; want 0 checks nothing. */
static void
check_u32(const struct gguf_file *f, const char *key, uint32_t want)
{
	uint32_t v;

	if (want == 0)
		return;
	v = get_u32(f, key);
	ck_assert_msg(v == want, "%s: %u, want %u", key, v, want);
}

static void
check_hp(const struct gguf_file *f, const struct llama_hp *hp)
{
	check_u32(f, "llama.block_count", hp->n_layer);
	check_u32(f, "llama.embedding_length", hp->n_embd);
	check_u32(f, "llama.attention.head_count", hp->n_head);
	check_u32(f, "llama.attention.head_count_kv", hp->n_head_kv);
	check_u32(f, "llama.feed_forward_length", hp->n_ff);
	check_u32(f, "llama.context_length", hp->n_ctx);
	check_u32(f, "llama.rope.dimension_count", hp->n_rot);
}

static uint64_t
n_tokens(const struct gguf_file *f)
{
	const struct gguf_array *a;

	ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens",
	    GGUF_VT_STRING, &a, NULL), 0);
	return a->n;
}

static void
check_str(const struct gguf_file *f, const char *key, const char *want)
{
	struct gguf_str s;

	ck_assert_int_eq(gguf_get_str(f, key, &s, NULL), 0);
	ck_assert_msg(gguf_str_eq(s, want), "%s: '%.*s' != '%s'", key,
	    (int)s.len, s.ptr, want);
}

/* Shape and type of one tensor. */
static void
check_tensor(const struct gguf_file *f, const char *name, uint32_t type,
    uint64_t ne0, uint64_t ne1)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);

	ck_assert_msg(t != NULL, "no tensor %s", name);
	ck_assert_msg(t->type == type, "%s: type %s, want %s", name,
	    ttype_name(t->type), ttype_name(type));
	ck_assert_uint_eq(t->ne[0], ne0);
	ck_assert_uint_eq(t->ne[1], ne1);
	ck_assert_uint_eq(t->n_dims, ne1 == 1 ? 1 : 2);
}

/* An F32 tensor whose every element is 1.0 (RMS-norm weights). */
static void
check_ones(const struct gguf_file *f, const char *name)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);
	float v;

	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t->type, CP_T_F32);
	for (uint64_t i = 0; i < t->n_elems; i++) {
		memcpy(&v, (const char *)t->data + i * 4, 4);
		ck_assert_float_eq(v, 1.0f);
	}
}

static const struct llama_hp aid_hp = {
	.n_layer = 4, .n_embd = 64, .n_head = 4, .n_head_kv = 4, .n_ff = 172,
	.n_ctx = 128, .n_rot = 16,
};

START_TEST(test_fx_aidreams)
{
	struct gguf_file *f = fx_open("aidreams260K.gguf");
	uint64_t bytes = 0;

	ck_assert_uint_eq(gguf_version(f), 3);
	check_str(f, "general.architecture", "llama");
	check_str(f, "tokenizer.ggml.model", "llama");
	check_hp(f, &aid_hp);
	ck_assert_float_eq(get_f32(f,
	    "llama.attention.layer_norm_rms_epsilon"), 1e-5f);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.bos_token_id"), 1);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.eos_token_id"), 2);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.unknown_token_id"), 0);
	ck_assert_uint_eq(n_tokens(f), 512);
	ck_assert_uint_eq(gguf_n_tensors(f), 39);
	check_tensor(f, "token_embd.weight", CP_T_F32, 64, 512);
	check_tensor(f, "output.weight", CP_T_F32, 64, 512);
	check_tensor(f, "blk.3.ffn_down.weight", CP_T_F32, 172, 64);
	check_tensor(f, "blk.0.attn_norm.weight", CP_T_F32, 64, 1);
	/* output.weight is a copy of token_embd (SOURCES.md) */
	ck_assert_mem_eq(gguf_find_tensor(f, "output.weight")->data,
	    gguf_find_tensor(f, "token_embd.weight")->data, 64 * 512 * 4);
	for (size_t i = 0; i < gguf_n_tensors(f); i++)
		bytes += gguf_tensor_at(f, i)->nbytes;
	ck_assert_uint_le(gguf_data_offset(f) + bytes, gguf_file_size(f));
	gguf_close(f);
}
END_TEST
SUITE_TEST("fixtures", test_fx_aidreams);

static const struct llama_hp plc_hp = {
	.n_layer = 5, .n_embd = 64, .n_head = 8, .n_head_kv = 4, .n_ctx = 128,
	.n_rot = 8,
};

START_TEST(test_fx_stories)
{
	struct gguf_file *f = fx_open("stories260K-plctlab.gguf");

	ck_assert_uint_eq(gguf_version(f), 3);
	check_str(f, "general.architecture", "llama");
	ck_assert_uint_eq(gguf_n_tensors(f), 48);
	check_hp(f, &plc_hp);
	ck_assert_uint_eq(n_tokens(f), 512);
	ck_assert_uint_eq(gguf_file_size(f), 1185376);
	/* GQA 8/4 with head_dim 8: attn_k is [64, 32] */
	check_tensor(f, "blk.4.attn_k.weight", CP_T_F32, 64, 32);
	check_tensor(f, "blk.4.attn_q.weight", CP_T_F32, 64, 64);
	gguf_close(f);
}
END_TEST
SUITE_TEST("fixtures", test_fx_stories);

struct synth_case {
	const char *file;
	uint32_t file_type;	/* general.file_type */
	uint32_t embd_type;	/* token_embd.weight */
	uint32_t out_type;	/* output.weight */
	uint32_t v1_type;	/* blk.1.attn_v.weight */
	uint32_t down1_type;	/* blk.1.ffn_down.weight */
};

/* From synth/README.md and REFERENCE.json (tensor_types). */
static const struct llama_hp tiny_hp = {
	.n_layer = 2, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .n_ff = 768,
	.n_ctx = 2048, .n_rot = 64,
};

static const struct synth_case synth_tiny[] = {
	{ "synth-tiny-F32.gguf", 0, CP_T_F32, CP_T_F32, CP_T_F32, CP_T_F32 },
	{ "synth-tiny-F16.gguf", 1, CP_T_F16, CP_T_F16, CP_T_F16, CP_T_F16 },
	{ "synth-tiny-BF16.gguf", 32, CP_T_BF16, CP_T_BF16, CP_T_BF16,
	    CP_T_BF16 },
	{ "synth-tiny-Q8_0.gguf", 7, CP_T_Q8_0, CP_T_Q8_0, CP_T_Q8_0,
	    CP_T_Q8_0 },
	{ "synth-tiny-Q4_0.gguf", 2, CP_T_Q4_0, CP_T_Q6_K, CP_T_Q4_0,
	    CP_T_Q4_0 },
	{ "synth-tiny-Q4_1.gguf", 3, CP_T_Q4_1, CP_T_Q6_K, CP_T_Q4_1,
	    CP_T_Q4_1 },
	{ "synth-tiny-Q5_0.gguf", 8, CP_T_Q5_0, CP_T_Q6_K, CP_T_Q5_0,
	    CP_T_Q5_0 },
	{ "synth-tiny-Q5_1.gguf", 9, CP_T_Q5_1, CP_T_Q6_K, CP_T_Q5_1,
	    CP_T_Q5_1 },
	{ "synth-tiny-Q2_K.gguf", 10, CP_T_Q2_K, CP_T_Q6_K, CP_T_Q3_K,
	    CP_T_Q3_K },
	{ "synth-tiny-Q3_K_M.gguf", 12, CP_T_Q3_K, CP_T_Q6_K, CP_T_Q5_K,
	    CP_T_Q4_K },
	{ "synth-tiny-Q4_K_M.gguf", 15, CP_T_Q4_K, CP_T_Q6_K, CP_T_Q6_K,
	    CP_T_Q6_K },
	{ "synth-tiny-Q5_K_M.gguf", 17, CP_T_Q5_K, CP_T_Q6_K, CP_T_Q6_K,
	    CP_T_Q6_K },
	{ "synth-tiny-Q6_K.gguf", 18, CP_T_Q6_K, CP_T_Q6_K, CP_T_Q6_K,
	    CP_T_Q6_K },
};

START_TEST(test_fx_synth_tiny)
{
	const struct synth_case *c = &synth_tiny[_i];
	char rel[128];
	struct gguf_file *f;

	snprintf(rel, sizeof(rel), "synth/%s", c->file);
	f = fx_open(rel);
	check_str(f, "general.architecture", "llama");
	ck_assert_uint_eq(get_u32(f, "general.file_type"), c->file_type);
	check_hp(f, &tiny_hp);
	ck_assert_float_eq(get_f32(f, "llama.rope.freq_base"), 10000.0f);
	ck_assert_uint_eq(n_tokens(f), 512);
	ck_assert_uint_eq(gguf_n_tensors(f), 21);
	check_tensor(f, "token_embd.weight", c->embd_type, 256, 512);
	check_tensor(f, "output.weight", c->out_type, 256, 512);
	check_tensor(f, "blk.1.attn_v.weight", c->v1_type, 256, 128);
	check_tensor(f, "blk.1.ffn_down.weight", c->down1_type, 768, 256);
	check_tensor(f, "blk.0.ffn_gate.weight", c->embd_type, 256, 768);
	check_ones(f, "output_norm.weight");
	check_ones(f, "blk.1.ffn_norm.weight");
	gguf_close(f);
}
END_TEST
SUITE_LOOP("fixtures", test_fx_synth_tiny, 0, (int)(sizeof(synth_tiny) / sizeof(synth_tiny[0])));

static const struct llama_hp gqa_hp = {
	.n_layer = 2, .n_embd = 256, .n_head = 8, .n_head_kv = 2, .n_ff = 768,
	.n_ctx = 4096, .n_rot = 32,
};

static const struct synth_case synth_gqa[] = {
	{ "synth-gqa-F16.gguf", 1, CP_T_F16, CP_T_F16, CP_T_F16, CP_T_F16 },
	{ "synth-gqa-Q8_0.gguf", 7, CP_T_Q8_0, CP_T_Q8_0, CP_T_Q8_0,
	    CP_T_Q8_0 },
	{ "synth-gqa-Q4_0.gguf", 2, CP_T_Q4_0, CP_T_Q6_K, CP_T_Q4_0,
	    CP_T_Q4_0 },
	{ "synth-gqa-Q4_K_M.gguf", 15, CP_T_Q4_K, CP_T_Q6_K, CP_T_Q6_K,
	    CP_T_Q6_K },
};

/* The "model" block of synth/REFERENCE.json. */
START_TEST(test_fx_synth_gqa)
{
	const struct synth_case *c = &synth_gqa[_i];
	char rel[128];
	struct gguf_file *f;

	snprintf(rel, sizeof(rel), "synth/%s", c->file);
	f = fx_open(rel);
	check_str(f, "general.architecture", "llama");
	check_str(f, "tokenizer.ggml.model", "llama");
	ck_assert_uint_eq(get_u32(f, "general.file_type"), c->file_type);
	check_hp(f, &gqa_hp);
	ck_assert_float_eq(get_f32(f, "llama.rope.freq_base"), 10000.0f);
	ck_assert_float_eq(get_f32(f,
	    "llama.attention.layer_norm_rms_epsilon"), 1e-5f);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.bos_token_id"), 1);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.eos_token_id"), 2);
	ck_assert_uint_eq(n_tokens(f), 32000);
	ck_assert_uint_eq(gguf_n_tensors(f), 21);
	check_tensor(f, "token_embd.weight", c->embd_type, 256, 32000);
	check_tensor(f, "output.weight", c->out_type, 256, 32000);
	/* 2 KV heads of 32: attn_k [256, 64] */
	check_tensor(f, "blk.0.attn_k.weight", c->embd_type, 256, 64);
	check_tensor(f, "blk.1.attn_v.weight", c->v1_type, 256, 64);
	check_tensor(f, "blk.1.ffn_down.weight", c->down1_type, 768, 256);
	check_ones(f, "output_norm.weight");
	check_ones(f, "blk.0.attn_norm.weight");
	gguf_close(f);
}
END_TEST
SUITE_LOOP("fixtures", test_fx_synth_gqa, 0, (int)(sizeof(synth_gqa) / sizeof(synth_gqa[0])));

struct vocab_case {
	const char *file;
	const char *model;	/* tokenizer.ggml.model */
	uint64_t n_tokens;
};

/* SOURCES.md: "What each vocab is". */
static const struct vocab_case vocabs[] = {
	{ "ggml-vocab-llama-spm.gguf", "llama", 32000 },
	{ "ggml-vocab-phi-3.gguf", "llama", 32064 },
	{ "ggml-vocab-baichuan.gguf", "llama", 64000 },
	{ "ggml-vocab-gpt-2.gguf", "gpt2", 50257 },
	{ "ggml-vocab-gpt-neox.gguf", "gpt2", 50432 },
	{ "ggml-vocab-mpt.gguf", "gpt2", 50432 },
	{ "ggml-vocab-falcon.gguf", "gpt2", 65024 },
	{ "ggml-vocab-starcoder.gguf", "gpt2", 49152 },
	{ "ggml-vocab-refact.gguf", "gpt2", 49216 },
	{ "ggml-vocab-deepseek-coder.gguf", "gpt2", 32256 },
	{ "ggml-vocab-deepseek-llm.gguf", "gpt2", 102400 },
	{ "ggml-vocab-bert-bge.gguf", "bert", 30522 },
};

START_TEST(test_fx_vocab)
{
	const struct vocab_case *c = &vocabs[_i];
	char rel[128];
	struct gguf_file *f;

	snprintf(rel, sizeof(rel), "vocab/%s", c->file);
	f = fx_open(rel);
	ck_assert_uint_eq(gguf_n_tensors(f), 0);
	check_str(f, "tokenizer.ggml.model", c->model);
	ck_assert_uint_eq(n_tokens(f), c->n_tokens);
	gguf_close(f);
}
END_TEST
SUITE_LOOP("fixtures", test_fx_vocab, 0, (int)(sizeof(vocabs) / sizeof(vocabs[0])));

static bool
fixtures_present(void)
{
	char *p = fx_path("aidreams260K.gguf");

	free(p);
	return p != NULL;
}


SUITE_CASE("fixtures", 60);

int
main(void)
{
	if (!fixtures_present()) {
		printf("fixtures not found in %s (set CP_FIXTURES): fixture "
		    "tests skipped\n", fx_dir());
		return 77;
	}
	return suite_main(suite_registered("gguf_fixtures"));
}
