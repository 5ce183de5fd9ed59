/*
 * check_model.c - llama model loading: hyperparameters and tensors of the
 * fixture models (values from SOURCES.md and synth/README.md), and the load
 * errors on damaged copies (bytes patched in memory or in a temporary
 * file), each of which must name what is wrong.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "lib/fixtures.h"
#include "lib/suite.h"
#include "lib/tfile.h"
#include "lib/tmpdir.h"
#include "model.h"
#include "ttype.h"


/* Read a whole fixture file into malloc'd memory. */
static unsigned char *
slurp(const char *rel, size_t *size)
{
	char *path = fx_path(rel);
	unsigned char *buf;

	ck_assert_msg(path != NULL, "fixture %s missing", rel);
	buf = (unsigned char *)tfile_read(path, size);
	ck_assert_uint_gt(*size, 0);
	free(path);
	return buf;
}

/* Offset of the only occurrence of pat (n bytes) in buf; fails if not one. */
static size_t
find_once(const unsigned char *buf, size_t size, const void *pat, size_t n)
{
	const unsigned char *p, *q;

	p = memmem(buf, size, pat, n);
	ck_assert_msg(p != NULL, "pattern not found");
	q = memmem(p + 1, size - (size_t)(p + 1 - buf), pat, n);
	ck_assert_msg(q == NULL, "pattern not unique");
	return (size_t)(p - buf);
}

/* Offset just past a GGUF string "u64 len, bytes" equal to s. */
static size_t
find_gguf_str(const unsigned char *buf, size_t size, const char *s)
{
	unsigned char pat[128];
	uint64_t len = strlen(s);

	memcpy(pat, &len, 8);
	memcpy(pat + 8, s, len);
	return find_once(buf, size, pat, 8 + len) + 8 + len;
}

/*
 * Loading a model from bytes fails with err (negative), with a message
 * that contains what.
 */
static void
expect_load_err(const unsigned char *buf, size_t size, int err,
    const char *what)
{
	struct cp_err e = { 0 };
	struct gguf_file *f;
	struct model *m;
	int rc;

	ck_assert_int_lt(err, 0);
	rc = gguf_open_mem(buf, size, &f, &e);
	if (rc == 0) {
		rc = model_from_gguf(f, &m, &e);
		if (rc == 0)
			ck_assert_ptr_nonnull(m);
		else
			ck_assert_ptr_null(m);
		model_free(m);
		gguf_close(f);
	}
	ck_assert_int_eq(rc, err);
	ck_assert_msg(strstr(e.msg, what) != NULL, "%s", e.msg);
}

static struct model *
load_fixture(const char *rel)
{
	char *path = fx_path(rel);
	struct cp_err e = { 0 };
	struct model *m = NULL;

	ck_assert_msg(path != NULL, "fixture %s missing", rel);
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	free(path);
	return m;
}

START_TEST(test_aidreams_hparams)
{
	struct model *m = load_fixture("aidreams260K.gguf");
	const struct model_hparams *hp = &m->hp;
	uint64_t sum = 0;
	size_t i;

	/* SOURCES.md: dim 64, hidden 172, 4 layers, 4 heads, 4 kv heads,
	 * vocab 512, context_length 128, rope dim 16, rms eps 1e-5. */
	ck_assert_int_eq(hp->n_vocab, 512);
	ck_assert_int_eq(hp->n_embd, 64);
	ck_assert_int_eq(hp->n_ff, 172);
	ck_assert_int_eq(hp->n_layer, 4);
	ck_assert_int_eq(hp->n_head, 4);
	ck_assert_int_eq(hp->n_head_kv, 4);
	ck_assert_int_eq(hp->head_dim, 16);
	ck_assert_int_eq(hp->n_rot, 16);
	ck_assert_int_eq(hp->n_ctx_train, 128);
	ck_assert_float_eq_tol(hp->rms_eps, 1e-5f, 1e-12f);
	ck_assert_float_eq(hp->rope[0].base, 10000.0f);
	ck_assert_float_eq(hp->rope[0].scale, 1.0f);
	ck_assert(!m->tied);
	ck_assert_uint_eq(m->tok_embd.type, CP_T_F32);
	ck_assert_int_eq(m->output.rows, 512);
	ck_assert_int_eq(m->output.cols, 64);
	ck_assert_ptr_ne(m->output.data, m->tok_embd.data);
	ck_assert_int_eq(m->layers[3].w_down.rows, 64);
	ck_assert_int_eq(m->layers[3].w_down.cols, 172);
	ck_assert_str_eq(m->layers[3].w_down.name, "blk.3.ffn_down.weight");
	ck_assert_uint_eq(m->layers[0].wq.row_bytes, 64 * 4);
	/* All 39 tensors are used: the weight bytes are their sum. */
	ck_assert_uint_eq(gguf_n_tensors(m->gf), 39);
	for (i = 0; i < gguf_n_tensors(m->gf); i++)
		sum += gguf_tensor_at(m->gf, i)->nbytes;
	ck_assert_uint_eq(model_weight_bytes(m), sum);
	model_free(m);
}
END_TEST
SUITE_TEST("load", test_aidreams_hparams);

START_TEST(test_plctlab_gqa)
{
	struct model *m = load_fixture("stories260K-plctlab.gguf");
	const struct model_hparams *hp = &m->hp;

	/* 5 layers, 8 heads, 4 kv heads, head_dim 8, rope dim 8. */
	ck_assert_int_eq(hp->n_layer, 5);
	ck_assert_int_eq(hp->n_head, 8);
	ck_assert_int_eq(hp->n_head_kv, 4);
	ck_assert_int_eq(hp->head_dim, 8);
	ck_assert_int_eq(hp->n_rot, 8);
	ck_assert_int_eq(m->layers[4].wk.rows, 32);
	ck_assert_int_eq(m->layers[4].wk.cols, 64);
	model_free(m);
}
END_TEST
SUITE_TEST("load", test_plctlab_gqa);

/* synth/README.md: tensor types of each synth-tiny file. */
static const struct {
	const char *file;
	uint32_t main;
	uint32_t output;
} tiny_types[] = {
	{ "synth/synth-tiny-F32.gguf", CP_T_F32, CP_T_F32 },
	{ "synth/synth-tiny-F16.gguf", CP_T_F16, CP_T_F16 },
	{ "synth/synth-tiny-BF16.gguf", CP_T_BF16, CP_T_BF16 },
	{ "synth/synth-tiny-Q8_0.gguf", CP_T_Q8_0, CP_T_Q8_0 },
	{ "synth/synth-tiny-Q4_0.gguf", CP_T_Q4_0, CP_T_Q6_K },
};

START_TEST(test_synth_tiny_types)
{
	struct model *m = load_fixture(tiny_types[_i].file);
	const struct model_hparams *hp = &m->hp;
	int il;

	/* 2 layers, n_embd 256, 4/2 heads (head_dim 64), n_ff 768, vocab
	 * 512, context 2048, untied output. */
	ck_assert_int_eq(hp->n_layer, 2);
	ck_assert_int_eq(hp->n_embd, 256);
	ck_assert_int_eq(hp->n_head, 4);
	ck_assert_int_eq(hp->n_head_kv, 2);
	ck_assert_int_eq(hp->head_dim, 64);
	ck_assert_int_eq(hp->n_rot, 64);
	ck_assert_int_eq(hp->n_ff, 768);
	ck_assert_int_eq(hp->n_vocab, 512);
	ck_assert_int_eq(hp->n_ctx_train, 2048);
	ck_assert(!m->tied);
	ck_assert_uint_eq(m->tok_embd.type, tiny_types[_i].main);
	ck_assert_uint_eq(m->output.type, tiny_types[_i].output);
	for (il = 0; il < 2; il++) {
		ck_assert_uint_eq(m->layers[il].wq.type, tiny_types[_i].main);
		ck_assert_uint_eq(m->layers[il].w_down.type,
		    tiny_types[_i].main);
		/* norms are 1.0 (README) */
		ck_assert_float_eq(m->layers[il].attn_norm[255], 1.0f);
		ck_assert_float_eq(m->layers[il].ffn_norm[0], 1.0f);
	}
	ck_assert_float_eq(m->out_norm[17], 1.0f);
	model_free(m);
}
END_TEST
SUITE_LOOP("load", test_synth_tiny_types, 0, (int)(sizeof(tiny_types) / sizeof(tiny_types[0])));

START_TEST(test_synth_gqa)
{
	struct model *m = load_fixture("synth/synth-gqa-Q4_0.gguf");

	ck_assert_int_eq(m->hp.n_vocab, 32000);
	ck_assert_int_eq(m->hp.n_head, 8);
	ck_assert_int_eq(m->hp.n_head_kv, 2);
	ck_assert_int_eq(m->hp.head_dim, 32);
	ck_assert_int_eq(m->hp.n_ctx_train, 4096);
	ck_assert_uint_eq(m->output.type, CP_T_Q6_K);
	ck_assert_uint_eq(m->layers[1].wv.type, CP_T_Q4_0);
	model_free(m);
}
END_TEST
SUITE_TEST("load", test_synth_gqa);

START_TEST(test_err_architecture)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);

	off = find_gguf_str(buf, size, "general.architecture");
	/* u32 type (string), u64 length 5, "llama" */
	ck_assert_int_eq(memcmp(buf + off + 12, "llama", 5), 0);
	memcpy(buf + off + 12, "mamba", 5);
	expect_load_err(buf, size, -ENOTSUP, "unsupported architecture "
	    "'mamba' (supported: llama, qwen2, qwen3, phi3, gemma, gemma2, "
	    "gemma3)");
	/* a known family whose keys the llama file does not have */
	memcpy(buf + off + 12, "qwen2", 5);
	expect_load_err(buf, size, -EINVAL, "required key "
	    "'qwen2.context_length' missing");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_architecture);

START_TEST(test_err_missing_tensor)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);

	off = find_gguf_str(buf, size, "blk.1.ffn_up.weight");
	buf[off - 1] = 'x';
	expect_load_err(buf, size, -ENOENT, "tensor 'blk.1.ffn_up.weight' "
	    "missing");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_missing_tensor);

START_TEST(test_err_shape)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);
	uint64_t ne[2];
	uint32_t nd;

	/* tensor info: name, u32 n_dims, u64 ne[n_dims]; swap ne0 and ne1 */
	off = find_gguf_str(buf, size, "blk.2.ffn_gate.weight");
	memcpy(&nd, buf + off, 4);
	ck_assert_uint_eq(nd, 2);
	memcpy(ne, buf + off + 4, 16);
	ck_assert_uint_eq(ne[0], 64);
	ck_assert_uint_eq(ne[1], 172);
	ne[0] = 172;
	ne[1] = 64;
	memcpy(buf + off + 4, ne, 16);
	expect_load_err(buf, size, -EINVAL, "tensor 'blk.2.ffn_gate.weight' "
	    "has shape [172, 64, 1, 1], expected [64, 172]");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_shape);

START_TEST(test_err_hparam_disagrees)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);
	uint32_t v;

	/* llama.feed_forward_length: u32 type, u32 value 172 -> 170 */
	off = find_gguf_str(buf, size, "llama.feed_forward_length");
	memcpy(&v, buf + off + 4, 4);
	ck_assert_uint_eq(v, 172);
	v = 170;
	memcpy(buf + off + 4, &v, 4);
	expect_load_err(buf, size, -EINVAL, "tensor 'blk.0.ffn_gate.weight' "
	    "has shape [64, 172, 1, 1], expected [64, 170]");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_hparam_disagrees);

START_TEST(test_err_missing_key)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);

	off = find_gguf_str(buf, size,
	    "llama.attention.layer_norm_rms_epsilon");
	buf[off - 1] = 'x';
	expect_load_err(buf, size, -EINVAL, "required key "
	    "'llama.attention.layer_norm_rms_epsilon' missing");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_missing_key);

START_TEST(test_err_bad_heads)
{
	size_t size, off;
	unsigned char *buf = slurp("stories260K-plctlab.gguf", &size);
	uint32_t v;

	/* head_count_kv 4 -> 3: 8 heads are not a multiple of it */
	off = find_gguf_str(buf, size, "llama.attention.head_count_kv");
	memcpy(&v, buf + off + 4, 4);
	ck_assert_uint_eq(v, 4);
	v = 3;
	memcpy(buf + off + 4, &v, 4);
	expect_load_err(buf, size, -EINVAL, "head_count 8 is not a multiple "
	    "of head_count_kv 3");
	/* 0 is out of range */
	v = 0;
	memcpy(buf + off + 4, &v, 4);
	expect_load_err(buf, size, -EINVAL, "'llama.attention.head_count_kv' "
	    "= 0");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_bad_heads);

START_TEST(test_err_unexpected_tensor)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);

	/* output.weight renamed: the output is then tied to token_embd and
	 * the renamed tensor is left over. */
	off = find_gguf_str(buf, size, "output.weight");
	buf[off - 1] = 'x';
	expect_load_err(buf, size, -ENOTSUP, "unexpected tensor "
	    "'output.weighx'");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_unexpected_tensor);

START_TEST(test_err_vocab_mismatch)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);
	uint64_t n;

	/* tokenizer.ggml.tokens: u32 type (array), u32 elem type, u64 count */
	off = find_gguf_str(buf, size, "tokenizer.ggml.tokens");
	memcpy(&n, buf + off + 8, 8);
	ck_assert_uint_eq(n, 512);
	/* a shorter array still parses: the tail becomes garbage keys, so
	 * instead break the embedding's row count against the tokens */
	off = find_gguf_str(buf, size, "token_embd.weight");
	memcpy(&n, buf + off + 12, 8);
	ck_assert_uint_eq(n, 512);
	n = 256;
	memcpy(buf + off + 12, &n, 8);
	expect_load_err(buf, size, -EINVAL, "'tokenizer.ggml.tokens' has 512 "
	    "tokens but tensor 'token_embd.weight' has 256 rows");
	free(buf);
}
END_TEST
SUITE_TEST("load", test_err_vocab_mismatch);

/* A damaged file on disk: model_load() names the path. */
START_TEST(test_err_file)
{
	size_t size, off;
	unsigned char *buf = slurp("aidreams260K.gguf", &size);
	const char *tmp = tmp_dir();
	char path[512];
	struct model *m = (struct model *)1;
	struct cp_err e = { 0 };

	snprintf(path, sizeof(path), "%s/check_model_%d.gguf",
	    tmp, (int)getpid());
	off = find_gguf_str(buf, size, "blk.3.attn_v.weight");
	buf[off - 1] = 'w';
	tfile_write(path, buf, size);
	ck_assert_int_eq(model_load(path, &m, &e), -ENOENT);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(e.msg, path) != NULL, "%s", e.msg);
	ck_assert_msg(strstr(e.msg, "'blk.3.attn_v.weight' missing") != NULL,
	    "%s", e.msg);
	/* truncated: the reader refuses it */
	tfile_write(path, buf, size / 2);
	ck_assert_int_lt(model_load(path, &m, &e), 0);
	ck_assert_ptr_null(m);
	unlink(path);
	ck_assert_int_lt(model_load(path, &m, &e), 0);
	ck_assert_ptr_null(m);
	free(buf);
	model_free(NULL);
}
END_TEST
SUITE_TEST("load", test_err_file);


/* ---- small models written here ---------------------------------------- */

/* What to change in a minimal valid llama model (all weights zero). */
struct mini {
	const char *arch;		/* NULL: "llama" */
	uint32_t q_type;		/* type of blk.0.attn_q.weight */
	uint32_t embd_type;		/* type of token_embd.weight */
	bool tied;			/* no output.weight */
	const char *rope_scaling;	/* llama.rope.scaling.type, or NULL */
	uint32_t experts;		/* llama.expert_count when nonzero */
	uint32_t key_len, value_len;	/* attention.key/value_length if set */
	uint32_t vocab_size;		/* llama.vocab_size when nonzero */
	const char *extra;		/* one more [MINI_EMBD] F32 tensor */
	float rope_factor;		/* rope.scaling.factor if set */
	uint32_t rope_orig_ctx;		/* ...original_context_length */
};

#define MINI_EMBD 64
#define MINI_FF 96
#define MINI_VOCAB 32

static void
mini_tensor(struct gguf_writer *w, const char *name, uint32_t type,
    int cols, int rows, const void *zeros)
{
	uint64_t ne[2] = { (uint64_t)cols, (uint64_t)rows };

	ck_assert_int_eq(gguf_writer_add_tensor(w, name, type, rows ? 2 : 1,
	    ne, zeros), 0);
}

/* Write the model to a temporary file and load it; returns the error. */
static int
mini_load(const struct mini *mm, struct model **out, struct cp_err *e)
{
	static unsigned char zeros[MINI_FF * MINI_EMBD * 4];
	struct gguf_writer *w = gguf_writer_new();
	const char *tmp = tmp_dir();
	const char *arch = mm->arch != NULL ? mm->arch : "llama";
	char path[512], key[96];
	int rc;

#define KEY(k) (snprintf(key, sizeof(key), "%s." k, arch), key)

	ck_assert_ptr_nonnull(w);
	snprintf(path, sizeof(path), "%s/check_model-%ld-mini.gguf",
	    tmp, (long)getpid());
	gguf_writer_set_str(w, "general.architecture", arch);
	gguf_writer_set_u32(w, KEY("context_length"), 32);
	gguf_writer_set_u32(w, KEY("embedding_length"), MINI_EMBD);
	gguf_writer_set_u32(w, KEY("block_count"), 1);
	gguf_writer_set_u32(w, KEY("feed_forward_length"), MINI_FF);
	gguf_writer_set_u32(w, KEY("attention.head_count"), 2);
	gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"),
	    1e-6f);
	if (mm->rope_scaling != NULL)
		gguf_writer_set_str(w, KEY("rope.scaling.type"),
		    mm->rope_scaling);
	if (mm->experts != 0)
		gguf_writer_set_u32(w, KEY("expert_count"), mm->experts);
	if (mm->rope_factor != 0)
		gguf_writer_set_f32(w, KEY("rope.scaling.factor"),
		    mm->rope_factor);
	if (mm->rope_orig_ctx != 0)
		gguf_writer_set_u32(w, KEY("rope.scaling.original_context_"
		    "length"), mm->rope_orig_ctx);
	if (mm->key_len != 0)
		gguf_writer_set_u32(w, KEY("attention.key_length"),
		    mm->key_len);
	if (mm->value_len != 0)
		gguf_writer_set_u32(w, KEY("attention.value_length"),
		    mm->value_len);
	if (mm->vocab_size != 0)
		gguf_writer_set_u32(w, KEY("vocab_size"), mm->vocab_size);
#undef KEY
	if (mm->extra != NULL)
		mini_tensor(w, mm->extra, CP_T_F32, MINI_EMBD, 0, zeros);
	mini_tensor(w, "token_embd.weight", mm->embd_type, MINI_EMBD,
	    MINI_VOCAB, zeros);
	mini_tensor(w, "blk.0.attn_norm.weight", CP_T_F32, MINI_EMBD, 0,
	    zeros);
	mini_tensor(w, "blk.0.attn_q.weight", mm->q_type, MINI_EMBD,
	    MINI_EMBD, zeros);
	mini_tensor(w, "blk.0.attn_k.weight", CP_T_F32, MINI_EMBD, MINI_EMBD,
	    zeros);
	mini_tensor(w, "blk.0.attn_v.weight", CP_T_F32, MINI_EMBD, MINI_EMBD,
	    zeros);
	mini_tensor(w, "blk.0.attn_output.weight", CP_T_F32, MINI_EMBD,
	    MINI_EMBD, zeros);
	mini_tensor(w, "blk.0.ffn_norm.weight", CP_T_F32, MINI_EMBD, 0, zeros);
	mini_tensor(w, "blk.0.ffn_gate.weight", CP_T_F32, MINI_EMBD, MINI_FF,
	    zeros);
	mini_tensor(w, "blk.0.ffn_up.weight", CP_T_F32, MINI_EMBD, MINI_FF,
	    zeros);
	mini_tensor(w, "blk.0.ffn_down.weight", CP_T_F32, MINI_FF, MINI_EMBD,
	    zeros);
	mini_tensor(w, "output_norm.weight", CP_T_F32, MINI_EMBD, 0, zeros);
	if (!mm->tied)
		mini_tensor(w, "output.weight", CP_T_F32, MINI_EMBD,
		    MINI_VOCAB, zeros);
	ck_assert_msg(gguf_writer_write(w, path, e) == 0, "%s", e->msg);
	gguf_writer_free(w);
	memset(e, 0, sizeof(*e));
	*out = NULL;
	rc = model_load(path, out, e);
	unlink(path);
	return rc;
}

static struct mini
mini_default(void)
{
	struct mini mm = { 0 };

	mm.q_type = CP_T_F32;
	mm.embd_type = CP_T_F32;
	return mm;
}

/*
 * A family's file without a tensor the family has says which; a tensor
 * the family does not have is refused naming the family.
 */
START_TEST(test_family_refusals)
{
	static const struct {
		const char *arch, *extra, *msg;
	} cases[] = {
		{ "qwen2", NULL, "tensor 'blk.0.attn_q.bias' missing" },
		{ "qwen3", NULL, "tensor 'blk.0.attn_q_norm.weight' missing" },
		{ "phi3", NULL, "tensor 'blk.0.attn_qkv.weight' missing" },
		{ "gemma2", NULL,
		    "tensor 'blk.0.post_attention_norm.weight' missing" },
		{ "llama", "blk.0.attn_q_norm.weight", "unexpected tensor "
		    "'blk.0.attn_q_norm.weight' (not part of a llama model)" },
		{ "gemma", "blk.0.post_ffw_norm.weight", "unexpected tensor "
		    "'blk.0.post_ffw_norm.weight' (not part of a gemma model)" },
	};
	struct cp_err e;
	struct model *m;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mini mm = mini_default();
		int rc;

		mm.arch = cases[i].arch;
		mm.extra = cases[i].extra;
		rc = mini_load(&mm, &m, &e);
		ck_assert_msg(rc < 0 && strstr(e.msg, cases[i].msg) != NULL,
		    "%s: %d %s", cases[i].arch, rc, e.msg);
		ck_assert_ptr_null(m);
	}
}
END_TEST
SUITE_TEST("load", test_family_refusals);

/* Variant r's cos and sin pairs at pos are llama.cpp's want (n_rot). */
static void
assert_rope(const struct model_rope *r, int n_rot, int pos,
    const float *want)
{
	float cs[64];

	ck_assert_int_le(n_rot, 64);
	model_rope_cs(cs, pos, r, n_rot);
	for (int i = 0; i < n_rot; i++)
		ck_assert_msg(fabsf(cs[i] - want[i]) <= 2e-6f, "position %d, "
		    "value %d: %.9g, llama.cpp %.9g", pos, i, (double)cs[i],
		    (double)want[i]);
}

/*
 * YaRN (rope.scaling.type yarn, factor 4, original context 4096, base
 * 10000, 32 rotated dims): the cos and sin pairs of three positions as
 * llama.cpp c392e509's ggml_rope_ext() gives them (ext_factor 1,
 * attn_factor 1, beta_fast 32, beta_slow 1: its defaults for such a file),
 * read off its rotation of (1, 0) pairs by a small program against that
 * build's libggml.
 */
START_TEST(test_rope_yarn)
{
	static const int pos[3] = { 1, 100, 30000 };
	static const float want[3][32] = {
	    {
		0.615204096f, 0.958123624f, 0.96329093f, 0.607081294f,
		1.08217084f, 0.354095072f, 1.12067354f, 0.20141466f,
		1.13294101f, 0.11367327f, 1.13682961f, 0.0639960989f,
		1.13817561f, 0.0321445018f, 1.13851821f, 0.0159086362f,
		1.13860321f, 0.00772635546f, 1.13862348f, 0.00365884183f,
		1.13862824f, 0.00167173578f, 1.1386292f, 0.000723143341f,
		1.13862932f, 0.000284657406f, 1.13862944f, 0.000160074618f,
		1.13862944f, 9.0016576e-05f, 1.13862944f, 5.06200413e-05f
	    },
	    {
		0.981861651f, -0.576562822f, 1.08276927f, -0.352260649f,
		1.11435664f, 0.233851075f, 0.54991591f, -0.997030318f,
		-0.95539099f, -0.619439363f, 0.899668097f, -0.69790715f,
		-1.08149529f, 0.35615316f, 0.1966483f, 1.12151968f,
		0.886389017f, 0.714696765f, 1.08034718f, 0.359620541f,
		1.12637925f, 0.166573703f, 1.13633382f, 0.0722657517f,
		1.1382736f, 0.0284627806f, 1.1385169f, 0.0160069373f,
		1.13859391f, 0.00900156517f, 1.13861811f, 0.00506198825f
	    },
	    {
		-0.679112196f, -0.913938463f, 1.13145518f, -0.127616912f,
		0.8120206f, -0.79818517f, 1.04241264f, 0.4580971f,
		-1.11100137f, 0.24930492f, -1.13855946f, 0.0126215117f,
		0.421851546f, -1.05760026f, -0.266998619f, -1.10688245f,
		-0.918646038f, 0.672730565f, -0.626666725f, 0.950665951f,
		1.13631868f, 0.0725038573f, 1.11514747f, 0.230050072f,
		0.394687653f, 1.06803501f, -0.540712893f, -1.00205123f,
		-0.817526162f, 0.792545259f, 0.267431736f, 1.10677791f
	    },
	};
	struct mini mm = mini_default();
	struct cp_err e;
	struct model *m;

	mm.rope_scaling = "yarn";
	mm.rope_factor = 4.0f;
	mm.rope_orig_ctx = 4096;
	ck_assert_msg(mini_load(&mm, &m, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(m->hp.n_rot, 32);
	for (int k = 0; k < 3; k++)
		assert_rope(&m->hp.rope[0], 32, pos[k], want[k]);
	model_free(m);
}
END_TEST
SUITE_TEST("load", test_rope_yarn);

/*
 * phi3's LongRoPE: rope_factors_short up to the original context,
 * rope_factors_long past it, and the magnitude rope.scaling.attn_factor.
 * The cos and sin pairs of three positions with the long factors are
 * llama.cpp c392e509's ggml_rope_ext() (NEOX, freq factors, attn_factor,
 * ext_factor 0: how its phi3 graph calls it), read off its rotation of
 * (1, 0) pairs by a small program against that build's libggml.
 */
START_TEST(test_rope_longrope)
{
	static const float longf[8] = { 1.0f, 1.05f, 1.3f, 2.0f, 3.5f, 6.0f,
	    9.0f, 12.0f };
	static const float shortf[8] = { 1.0f, 1.0f, 1.0f, 1.1f, 1.2f, 1.3f,
	    1.4f, 1.5f };
	static const int pos[3] = { 1, 100, 5000 };
	static const float want[3][16] = {
	    {
		0.643088341f, 1.00155079f, 1.13666582f, 0.353068769f,
		1.18671846f, 0.0914665163f, 1.19008934f, 0.018818533f,
		1.19023335f, 0.00340067595f, 1.190238f, 0.000627310656f,
		1.19023812f, 0.000132248693f, 1.19023812f, 3.13655328e-05f
	    },
	    {
		1.0263648f, -0.602695704f, 0.319537997f, -1.14654362f,
		0.191592976f, 1.17471659f, -0.0123098446f, 1.19017446f,
		1.14198649f, 0.335460126f, 1.1885854f, 0.0627020225f,
		1.19016457f, 0.0132245971f, 1.19023395f, 0.00313654938f
	    },
	    {
		0.184092239f, -1.17591524f, -0.619197071f, -1.01649487f,
		0.271015048f, 1.15897262f, -1.03460932f, -0.588430345f,
		-0.176155895f, 1.17713034f, -1.04088104f, 0.577263653f,
		1.01123536f, 0.62774986f, 1.17992115f, 0.156374231f
	    },
	};
	static unsigned char zeros[192 * 96 * 4];
	struct gguf_writer *w = gguf_writer_new();
	struct cp_err e = { 0 };
	struct model_rope r;
	struct model *m;
	char path[512];

	ck_assert_ptr_nonnull(w);
	snprintf(path, sizeof(path), "%s/check_model-%ld-phi3.gguf",
	    tmp_dir(), (long)getpid());
	gguf_writer_set_str(w, "general.architecture", "phi3");
	gguf_writer_set_u32(w, "phi3.context_length", 131072);
	gguf_writer_set_u32(w, "phi3.embedding_length", 64);
	gguf_writer_set_u32(w, "phi3.block_count", 1);
	gguf_writer_set_u32(w, "phi3.feed_forward_length", 96);
	gguf_writer_set_u32(w, "phi3.attention.head_count", 4);
	gguf_writer_set_u32(w, "phi3.attention.sliding_window", 262144);
	gguf_writer_set_f32(w, "phi3.attention.layer_norm_rms_epsilon", 1e-5f);
	gguf_writer_set_u32(w, "phi3.rope.scaling.original_context_length",
	    4096);
	gguf_writer_set_f32(w, "phi3.rope.scaling.attn_factor",
	    1.1902380714f);
	mini_tensor(w, "token_embd.weight", CP_T_F32, 64, MINI_VOCAB, zeros);
	mini_tensor(w, "blk.0.attn_norm.weight", CP_T_F32, 64, 0, zeros);
	mini_tensor(w, "blk.0.attn_qkv.weight", CP_T_F32, 64, 192, zeros);
	mini_tensor(w, "blk.0.attn_output.weight", CP_T_F32, 64, 64, zeros);
	mini_tensor(w, "blk.0.ffn_norm.weight", CP_T_F32, 64, 0, zeros);
	mini_tensor(w, "blk.0.ffn_up.weight", CP_T_F32, 64, 192, zeros);
	mini_tensor(w, "blk.0.ffn_down.weight", CP_T_F32, 96, 64, zeros);
	mini_tensor(w, "output_norm.weight", CP_T_F32, 64, 0, zeros);
	mini_tensor(w, "output.weight", CP_T_F32, 64, MINI_VOCAB, zeros);
	mini_tensor(w, "rope_factors_long.weight", CP_T_F32, 8, 0, longf);
	mini_tensor(w, "rope_factors_short.weight", CP_T_F32, 8, 0, shortf);
	ck_assert_msg(gguf_writer_write(w, path, &e) == 0, "%s", e.msg);
	gguf_writer_free(w);
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	unlink(path);
	ck_assert(m->hp.rope_neox);
	ck_assert_int_eq(m->layers[0].window, 262144);
	/* the fused tensors' rows: Q, K, V and gate, up */
	ck_assert_int_eq(m->layers[0].wv.rows, 64);
	ck_assert_int_eq(m->layers[0].w_up.rows, 96);
	r = model_rope_for_ctx(m, 0, 4096);
	ck_assert_float_eq(r.freqs[7], 1.5f);		/* short */
	r = model_rope_for_ctx(m, 0, 4097);
	ck_assert_float_eq(r.freqs[7], 12.0f);		/* long */
	ck_assert_float_eq(r.attn_factor, 1.1902380714f);
	for (int k = 0; k < 3; k++)
		assert_rope(&r, 16, pos[k], want[k]);
	model_free(m);
}
END_TEST
SUITE_TEST("load", test_rope_longrope);

START_TEST(test_mini_variants)
{
	struct mini mm = mini_default();
	struct cp_err e;
	struct model *m;

	ck_assert_msg(mini_load(&mm, &m, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(m->hp.n_head_kv, 2);	/* defaults to head_count */
	ck_assert_int_eq(m->hp.head_dim, 32);
	ck_assert_int_eq(m->hp.n_rot, 32);	/* defaults to head_dim */
	ck_assert_float_eq(m->hp.rope[0].base, 10000.0f);
	ck_assert(!m->tied);
	model_free(m);
	/* tied output: the embedding is the output matrix */
	mm.tied = true;
	mm.embd_type = CP_T_Q8_0;
	mm.rope_scaling = "none";
	mm.vocab_size = MINI_VOCAB;
	ck_assert_msg(mini_load(&mm, &m, &e) == 0, "%s", e.msg);
	ck_assert(m->tied);
	ck_assert_ptr_eq(m->output.data, m->tok_embd.data);
	ck_assert_uint_eq(m->output.type, CP_T_Q8_0);
	ck_assert_uint_eq(m->output.row_bytes, 2 * 34);
	model_free(m);
}
END_TEST
SUITE_TEST("load", test_mini_variants);

START_TEST(test_mini_errors)
{
	struct mini mm;
	struct cp_err e;
	struct model *m;

	mm = mini_default();
	mm.arch = "falcon";
	ck_assert_int_eq(mini_load(&mm, &m, &e), -ENOTSUP);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(e.msg, "unsupported architecture 'falcon'") !=
	    NULL, "%s", e.msg);
	mm = mini_default();
	mm.q_type = CP_T_IQ4_NL;
	ck_assert_int_eq(mini_load(&mm, &m, &e), -ENOTSUP);
	ck_assert_msg(strstr(e.msg, "tensor 'blk.0.attn_q.weight' has type "
	    "iq4_nl, unsupported for a matrix product") != NULL, "%s", e.msg);
	mm = mini_default();
	mm.embd_type = CP_T_IQ4_NL;
	ck_assert_int_eq(mini_load(&mm, &m, &e), -ENOTSUP);
	ck_assert_msg(strstr(e.msg, "tensor 'token_embd.weight' has type "
	    "iq4_nl, unsupported for the token embedding") != NULL, "%s",
	    e.msg);
	mm = mini_default();
	mm.rope_scaling = "ntk";
	ck_assert_int_eq(mini_load(&mm, &m, &e), -ENOTSUP);
	ck_assert_msg(strstr(e.msg, "'llama.rope.scaling.type' = 'ntk' "
	    "unsupported") != NULL, "%s", e.msg);
	mm = mini_default();
	mm.experts = 8;
	ck_assert_int_eq(mini_load(&mm, &m, &e), -ENOTSUP);
	ck_assert_msg(strstr(e.msg, "mixture of experts") != NULL, "%s",
	    e.msg);
	mm = mini_default();
	mm.key_len = 32;
	mm.value_len = 16;
	ck_assert_int_eq(mini_load(&mm, &m, &e), -ENOTSUP);
	ck_assert_msg(strstr(e.msg, "key_length 32 != value_length 16") !=
	    NULL, "%s", e.msg);
	mm = mini_default();
	mm.key_len = 16;
	ck_assert_int_eq(mini_load(&mm, &m, &e), -EINVAL);
	ck_assert_msg(strstr(e.msg, "tensor 'blk.0.attn_q.weight' has shape "
	    "[64, 64, 1, 1], expected [64, 32]") != NULL, "%s", e.msg);
	mm = mini_default();
	mm.vocab_size = 33;
	ck_assert_int_eq(mini_load(&mm, &m, &e), -EINVAL);
	ck_assert_msg(strstr(e.msg, "'llama.vocab_size' = 33 but tensor "
	    "'token_embd.weight' has 32 rows") != NULL, "%s", e.msg);
}
END_TEST
SUITE_TEST("load", test_mini_errors);

SUITE_CASE("load", 30);

int
main(void)
{
	return fx_main("model", "aidreams260K.gguf");
}
