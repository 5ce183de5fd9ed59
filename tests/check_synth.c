/*
 * check_synth.c - `cpmodel synth` and `cpmodel info`, run as the built
 * program ($CPMODEL, else $BUILD/bin/cpmodel, else build/bin/cpmodel):
 * synthetic files read back with the GGUF reader (keys, shapes, types,
 * weight statistics, the tokenizer), determinism, the same weights across
 * types, --vocab-from against the fixture it copies, bad arguments; info on
 * the fixtures.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf.h"
#include "lib/fixtures.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tfile.h"
#include "lib/tgguf.h"
#include "lib/tmpdir.h"
#include "model.h"
#include "quant.h"
#include "ttype.h"


/* Ends run()'s argument list (a null pointer of the type va_arg reads). */
#define END ((char *)NULL)

static char cpmodel[1024];

/* cpmodel with the arguments, output to a file (prog.h). */
#define run(...) prog_run(cpmodel, __VA_ARGS__)
static void
tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/check_synth-%ld-%s", tmp_dir(), (long)getpid(),
	    name);
}

static uint32_t
u32_of(const struct gguf_file *f, const char *key)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	ck_assert_msg(kv != NULL, "no key %s", key);
	ck_assert_msg(kv->val.type == GGUF_VT_UINT32, "%s is %s", key,
	    gguf_vtype_name(kv->val.type));
	return (uint32_t)kv->val.v.u64;
}

static float
f32_of(const struct gguf_file *f, const char *key)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	ck_assert_msg(kv != NULL, "no key %s", key);
	ck_assert_msg(kv->val.type == GGUF_VT_FLOAT32, "%s is %s", key,
	    gguf_vtype_name(kv->val.type));
	return (float)kv->val.v.f64;
}

static void
str_is(const struct gguf_str s, const char *want)
{
	ck_assert_msg(gguf_str_eq(s, want), "'%.*s' != '%s'", (int)s.len,
	    s.ptr, want);
}

static const struct gguf_tensor *
tensor(const struct gguf_file *f, const char *name, uint32_t type,
    uint32_t n_dims, uint64_t ne0, uint64_t ne1)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);

	ck_assert_msg(t != NULL, "no tensor %s", name);
	ck_assert_msg(t->type == type, "%s: %s, want %s", name,
	    ttype_name(t->type), ttype_name(type));
	ck_assert_uint_eq(t->n_dims, n_dims);
	ck_assert_uint_eq(t->ne[0], ne0);
	ck_assert_uint_eq(t->ne[1], ne1);
	return t;
}

/* Shape of the files below: 2 layers, embd 64, 4/2 heads, ff 96. */
#define S_ARGS "--layers", "2", "--embd", "64", "--heads", "4", \
	"--kv-heads", "2", "--ff", "96", "--ctx", "512"

START_TEST(test_synth_f32)
{
	char path[512];
	struct gguf_file *f;
	const struct gguf_tensor *t;
	const struct gguf_array *a;
	struct gguf_str s;
	double sum = 0, sq = 0;
	float *v;
	int32_t tt;

	tmp_path(path, sizeof(path), "f32.gguf");
	ck_assert_int_eq(run(NULL, "synth", "-o", path, S_ARGS, "--vocab",
	    "1000", "--seed", "7", "--rope-base", "500000", END), 0);
	f = tgguf_open(path);
	ck_assert_uint_eq(gguf_version(f), 3);
	ck_assert_int_eq(gguf_get_str(f, "general.architecture", &s, NULL), 0);
	str_is(s, "llama");
	ck_assert_uint_eq(u32_of(f, "general.file_type"), 0);
	ck_assert_uint_eq(u32_of(f, "llama.context_length"), 512);
	ck_assert_uint_eq(u32_of(f, "llama.embedding_length"), 64);
	ck_assert_uint_eq(u32_of(f, "llama.block_count"), 2);
	ck_assert_uint_eq(u32_of(f, "llama.feed_forward_length"), 96);
	ck_assert_uint_eq(u32_of(f, "llama.attention.head_count"), 4);
	ck_assert_uint_eq(u32_of(f, "llama.attention.head_count_kv"), 2);
	ck_assert_uint_eq(u32_of(f, "llama.rope.dimension_count"), 16);
	ck_assert_float_eq(f32_of(f, "llama.rope.freq_base"), 500000.0f);
	ck_assert_float_eq(f32_of(f, "llama.attention.layer_norm_rms_epsilon"),
	    1e-5f);
	ck_assert_uint_eq(u32_of(f, "tokenizer.ggml.bos_token_id"), 1);
	ck_assert_uint_eq(u32_of(f, "tokenizer.ggml.eos_token_id"), 2);
	ck_assert_uint_eq(u32_of(f, "tokenizer.ggml.unknown_token_id"), 0);

	/* the built-in SentencePiece vocabulary */
	ck_assert_int_eq(gguf_get_str(f, "tokenizer.ggml.model", &s, NULL), 0);
	str_is(s, "llama");
	ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens",
	    GGUF_VT_STRING, &a, NULL), 0);
	ck_assert_uint_eq(a->n, 1000);
	str_is(a->strs[0], "<unk>");
	str_is(a->strs[1], "<s>");
	str_is(a->strs[2], "</s>");
	str_is(a->strs[3], "<0x00>");
	str_is(a->strs[3 + 0x41], "<0x41>");
	str_is(a->strs[258], "<0xFF>");
	str_is(a->strs[259], "\xe2\x96\x81");
	str_is(a->strs[260], "a");
	str_is(a->strs[261], "\xe2\x96\x81" "a");
	str_is(a->strs[260 + 2 * 26], "aa");
	for (uint64_t i = 0; i < a->n; i++)
		for (uint64_t j = i + 1; j < a->n && j < i + 60; j++)
			ck_assert(a->strs[i].len != a->strs[j].len ||
			    memcmp(a->strs[i].ptr, a->strs[j].ptr,
			    a->strs[i].len) != 0);
	ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.token_type",
	    GGUF_VT_INT32, &a, NULL), 0);
	ck_assert_uint_eq(a->n, 1000);
	ck_assert_int_eq(gguf_arr_i64(a, 0), 2);	/* UNKNOWN */
	ck_assert_int_eq(gguf_arr_i64(a, 1), 3);	/* CONTROL */
	ck_assert_int_eq(gguf_arr_i64(a, 2), 3);
	for (uint64_t i = 3; i < 259; i++) {
		tt = (int32_t)gguf_arr_i64(a, i);
		ck_assert_int_eq(tt, 6);		/* BYTE */
	}
	ck_assert_int_eq(gguf_arr_i64(a, 999), 1);	/* NORMAL */
	ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.scores",
	    GGUF_VT_FLOAT32, &a, NULL), 0);
	ck_assert_uint_eq(a->n, 1000);
	ck_assert(gguf_arr_f64(a, 300) > gguf_arr_f64(a, 301));

	/* 1 + 2 x 9 + output_norm + output */
	ck_assert_uint_eq(gguf_n_tensors(f), 21);
	t = tensor(f, "token_embd.weight", CP_T_F32, 2, 64, 1000);
	tensor(f, "output.weight", CP_T_F32, 2, 64, 1000);
	tensor(f, "output_norm.weight", CP_T_F32, 1, 64, 1);
	for (int l = 0; l < 2; l++) {
		char n[64];

		snprintf(n, sizeof(n), "blk.%d.attn_norm.weight", l);
		tensor(f, n, CP_T_F32, 1, 64, 1);
		snprintf(n, sizeof(n), "blk.%d.attn_q.weight", l);
		tensor(f, n, CP_T_F32, 2, 64, 64);
		snprintf(n, sizeof(n), "blk.%d.attn_k.weight", l);
		tensor(f, n, CP_T_F32, 2, 64, 32);
		snprintf(n, sizeof(n), "blk.%d.attn_v.weight", l);
		tensor(f, n, CP_T_F32, 2, 64, 32);
		snprintf(n, sizeof(n), "blk.%d.attn_output.weight", l);
		tensor(f, n, CP_T_F32, 2, 64, 64);
		snprintf(n, sizeof(n), "blk.%d.ffn_norm.weight", l);
		tensor(f, n, CP_T_F32, 1, 64, 1);
		snprintf(n, sizeof(n), "blk.%d.ffn_gate.weight", l);
		tensor(f, n, CP_T_F32, 2, 64, 96);
		snprintf(n, sizeof(n), "blk.%d.ffn_up.weight", l);
		tensor(f, n, CP_T_F32, 2, 64, 96);
		snprintf(n, sizeof(n), "blk.%d.ffn_down.weight", l);
		tensor(f, n, CP_T_F32, 2, 96, 64);
	}
	/* N(0, 0.02^2): 64000 samples */
	v = tgguf_floats(t);
	for (uint64_t i = 0; i < t->n_elems; i++) {
		sum += v[i];
		sq += (double)v[i] * v[i];
	}
	ck_assert_double_le(fabs(sum / (double)t->n_elems), 0.0005);
	ck_assert_double_eq_tol(sqrt(sq / (double)t->n_elems), 0.02, 0.0006);
	free(v);
	v = tgguf_floats(gguf_find_tensor(f, "blk.1.ffn_norm.weight"));
	for (int i = 0; i < 64; i++)
		ck_assert_float_eq(v[i], 1.0f);
	free(v);
	/* different tensors, different streams */
	ck_assert_int_ne(memcmp(gguf_find_tensor(f, "blk.0.attn_q.weight")->data,
	    gguf_find_tensor(f, "blk.1.attn_q.weight")->data, 64 * 4), 0);
	gguf_close(f);
	unlink(path);
}
END_TEST
SUITE_TEST("synth", test_synth_f32);

START_TEST(test_synth_deterministic)
{
	char p1[512], p2[512], p3[512];
	char *a, *b, *c;
	size_t na, nb, nc;

	tmp_path(p1, sizeof(p1), "d1.gguf");
	tmp_path(p2, sizeof(p2), "d2.gguf");
	tmp_path(p3, sizeof(p3), "d3.gguf");
	ck_assert_int_eq(run(NULL, "synth", "-o", p1, S_ARGS, "--vocab", "300",
	    "--seed", "42", "--type", "q4_0", END), 0);
	ck_assert_int_eq(run(NULL, "synth", "-o", p2, S_ARGS, "--vocab", "300",
	    "--seed", "42", "--type", "q4_0", END), 0);
	ck_assert_int_eq(run(NULL, "synth", "-o", p3, S_ARGS, "--vocab", "300",
	    "--seed", "43", "--type", "q4_0", END), 0);
	a = tfile_read(p1, &na);
	b = tfile_read(p2, &nb);
	c = tfile_read(p3, &nc);
	ck_assert_uint_eq(na, nb);
	ck_assert_int_eq(memcmp(a, b, na), 0);
	ck_assert_uint_eq(na, nc);
	ck_assert_int_ne(memcmp(a, c, na), 0);
	free(a);
	free(b);
	free(c);
	unlink(p1);
	unlink(p2);
	unlink(p3);
}
END_TEST
SUITE_TEST("synth", test_synth_deterministic);

/* Each type holds the F32 file's weights up to its rounding. */
static const struct {
	const char *name;
	uint32_t type;
	uint32_t file_type;
} types[] = {
	{ "f16", CP_T_F16, 1 },
	{ "bf16", CP_T_BF16, 32 },
	{ "q8_0", CP_T_Q8_0, 7 },
	{ "q4_0", CP_T_Q4_0, 2 },
};

START_TEST(test_synth_types)
{
	char pf[512], pq[512];
	struct gguf_file *ff, *fq;
	const char *tname[] = { "token_embd.weight", "blk.1.ffn_down.weight",
	    "output.weight" };

	tmp_path(pf, sizeof(pf), "t-f32.gguf");
	tmp_path(pq, sizeof(pq), "t-q.gguf");
	ck_assert_int_eq(run(NULL, "synth", "-o", pf, S_ARGS, "--vocab", "300",
	    "--seed", "3", END), 0);
	ck_assert_int_eq(run(NULL, "synth", "-o", pq, S_ARGS, "--vocab", "300",
	    "--seed", "3", "--type", types[_i].name, END), 0);
	ff = tgguf_open(pf);
	fq = tgguf_open(pq);
	ck_assert_uint_eq(u32_of(fq, "general.file_type"), types[_i].file_type);
	tensor(fq, "blk.0.attn_norm.weight", CP_T_F32, 1, 64, 1);
	for (size_t k = 0; k < 3; k++) {
		const struct gguf_tensor *tf = gguf_find_tensor(ff, tname[k]);
		const struct gguf_tensor *tq = tensor(fq, tname[k],
		    types[_i].type, 2, tf->ne[0], tf->ne[1]);
		float *x = tgguf_floats(tf), *y = tgguf_floats(tq);

		for (uint64_t b = 0; b < tf->n_elems; b += 32) {
			float amax = 0, tol;

			for (int j = 0; j < 32; j++)
				amax = fmaxf(amax, fabsf(x[b + j]));
			switch (types[_i].type) {
			case CP_T_F16:
				tol = amax * 1e-3f + 1e-7f;
				break;
			case CP_T_BF16:
				tol = amax * 8e-3f;
				break;
			case CP_T_Q8_0:
				/* half a step, plus the f16 scale's rounding */
				tol = amax / 127 * 0.6f + 1e-6f;
				break;
			default:
				/*
				 * q4_0: steps of amax/8; the end opposite the
				 * largest magnitude is clamped a whole step.
				 */
				tol = amax / 8 * 1.05f + 1e-6f;
				break;
			}
			for (int j = 0; j < 32; j++)
				ck_assert_msg(fabsf(x[b + j] - y[b + j]) <= tol,
				    "%s[%lu]: %g vs %g (tol %g)", tname[k],
				    (unsigned long)(b + j), x[b + j], y[b + j],
				    tol);
		}
		free(x);
		free(y);
	}
	gguf_close(ff);
	gguf_close(fq);
	unlink(pf);
	unlink(pq);
}
END_TEST
SUITE_LOOP("synth", test_synth_types, 0, (int)(sizeof(types) / sizeof(types[0])));

START_TEST(test_synth_tied_vocab_from)
{
	char path[512];
	char *src = fx_path("stories260K-plctlab.gguf");
	struct gguf_file *f, *s;
	size_t n_tok = 0;

	if (src == NULL) {
		printf("stories260K-plctlab.gguf not under %s: skipped\n",
		    fx_dir());
		return;
	}
	tmp_path(path, sizeof(path), "vf.gguf");
	ck_assert_int_eq(run(NULL, "synth", "-o", path, S_ARGS, "--tied",
	    "--vocab-from", src, "--type", "f16", END), 0);
	f = tgguf_open(path);
	s = tgguf_open(src);
	ck_assert_uint_eq(gguf_n_tensors(f), 20);
	ck_assert_ptr_null(gguf_find_tensor(f, "output.weight"));
	tensor(f, "token_embd.weight", CP_T_F16, 2, 64, 512);
	/* every tokenizer.* key of the source, byte for byte */
	for (size_t i = 0; i < gguf_n_kv(s); i++) {
		const struct gguf_kv *a = gguf_kv_at(s, i), *b;
		char key[128];

		if (a->key.len < 10 || memcmp(a->key.ptr, "tokenizer.", 10))
			continue;
		snprintf(key, sizeof(key), "%.*s", (int)a->key.len,
		    a->key.ptr);
		b = gguf_find_kv(f, key);
		ck_assert_msg(b != NULL, "%s not copied", key);
		ck_assert_int_eq(b->val.type, a->val.type);
		if (a->val.type == GGUF_VT_ARRAY) {
			const struct gguf_array *x = &a->val.v.arr;
			const struct gguf_array *y = &b->val.v.arr;

			ck_assert_int_eq(x->type, y->type);
			ck_assert_uint_eq(x->n, y->n);
			if (x->type == GGUF_VT_STRING) {
				for (uint64_t j = 0; j < x->n; j++) {
					ck_assert_uint_eq(x->strs[j].len,
					    y->strs[j].len);
					ck_assert_mem_eq(x->strs[j].ptr,
					    y->strs[j].ptr, x->strs[j].len);
				}
			} else {
				ck_assert_mem_eq(x->data, y->data,
				    x->n * gguf_vtype_size(x->type));
			}
		} else if (a->val.type == GGUF_VT_STRING) {
			ck_assert_uint_eq(a->val.v.str.len, b->val.v.str.len);
			ck_assert_mem_eq(a->val.v.str.ptr, b->val.v.str.ptr,
			    a->val.v.str.len);
		} else {
			ck_assert_uint_eq(a->val.v.u64, b->val.v.u64);
		}
		n_tok++;
	}
	ck_assert_uint_ge(n_tok, 5);
	ck_assert_uint_eq(u32_of(f, "llama.vocab_size"), 512);
	gguf_close(s);
	gguf_close(f);
	unlink(path);

	/* a --vocab that disagrees with the copied vocabulary */
	ck_assert_int_eq(run(NULL, "synth", "-o", path, S_ARGS, "--vocab",
	    "600", "--vocab-from", src, END), 1);
	ck_assert_int_ne(access(path, F_OK), 0);
	free(src);
}
END_TEST
SUITE_TEST("synth", test_synth_tied_vocab_from);

START_TEST(test_synth_bad_args)
{
	char path[512], log[512];
	char *msg;

	tmp_path(path, sizeof(path), "bad.gguf");
	tmp_path(log, sizeof(log), "bad.log");
	ck_assert_int_eq(run(log, "synth", "-o", path, "--layers", "2",
	    "--embd", "64", "--heads", "3", "--kv-heads", "1", "--ff", "96",
	    "--ctx", "64", "--vocab", "300", END), 2);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "--embd 64 must be --heads 3"));
	free(msg);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab", "300",
	    "--type", "iq2_xxs", END), 2);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "--type 'iq2_xxs'"));
	free(msg);
	/* a K-quant needs rows that are a multiple of 256 elements */
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab", "300",
	    "--type", "q4_k", END), 2);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "must be multiples of 256"));
	free(msg);
	ck_assert_int_eq(run(log, "synth", "-o", path, "--layers", "1",
	    "--embd", "48", "--heads", "3", "--kv-heads", "1", "--ff", "64",
	    "--ctx", "64", "--vocab", "300", "--type", "q8_0", END), 2);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "multiples of 32"));
	free(msg);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab", "100",
	    END), 2);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "at least 260 tokens"));
	free(msg);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab",
	    "300", "--kv-heads", "3", END), 2);
	ck_assert_int_eq(run(log, "synth", S_ARGS, "--vocab", "300", END), 2);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab",
	    "-5", END), 2);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab",
	    "300x", END), 2);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab",
	    "300", "--rope-base", "nan", END), 2);
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS, "--vocab",
	    "300", "--bogus", END), 2);
	ck_assert_int_eq(access(path, F_OK), -1);
	/* failures past argument checking exit 1 */
	ck_assert_int_eq(run(log, "synth", "-o", path, S_ARGS,
	    "--vocab-from", "/nonexistent.gguf", END), 1);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "/nonexistent.gguf"));
	free(msg);
	ck_assert_int_eq(run(log, "synth", "-o", "/nonexistent/dir/x.gguf",
	    S_ARGS, "--vocab", "300", END), 1);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "/nonexistent/dir/x.gguf"));
	free(msg);
	unlink(log);
}
END_TEST
SUITE_TEST("synth", test_synth_bad_args);

/* info on a fixture: the values of SOURCES.md in its table. */
START_TEST(test_info_fixtures)
{
	char log[512];
	char *src = fx_path("aidreams260K.gguf");
	char *msg;

	if (src == NULL) {
		printf("fixtures not under %s: skipped\n", fx_dir());
		return;
	}
	tmp_path(log, sizeof(log), "info.log");
	ck_assert_int_eq(run(log, "info", src, END), 0);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "GGUF version     3"));
	ck_assert_ptr_nonnull(strstr(msg, "architecture     llama\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  layers         4\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  embedding      64\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  head dim       16\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  tokens         512\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  bos id         1\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  eos id         2\n"));
	ck_assert_ptr_nonnull(strstr(msg, "tensors          39,"));
	ck_assert_ptr_nonnull(strstr(msg, "  f32          39 "));
	free(msg);
	free(src);

	src = fx_path("vocab/ggml-vocab-gpt-2.gguf");
	ck_assert_ptr_nonnull(src);
	ck_assert_int_eq(run(log, "info", "-k", src, END), 0);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "  model          gpt2\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  tokens         50257\n"));
	ck_assert_ptr_nonnull(strstr(msg, "tensors          0 "));
	ck_assert_ptr_nonnull(strstr(msg, "tokenizer.ggml.merges (array) = "
	    "array[50000] of string"));
	free(msg);
	free(src);

	src = fx_path("synth/synth-tiny-Q4_K_M.gguf");
	ck_assert_ptr_nonnull(src);
	ck_assert_int_eq(run(log, "info", "-t", src, END), 0);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "file type        15 (Q4_K_M)"));
	ck_assert_ptr_nonnull(strstr(msg, "  q6_K          3 "));
	ck_assert_ptr_nonnull(strstr(msg, "  q4_K         13 "));
	ck_assert_ptr_nonnull(strstr(msg, "  f32           5 "));
	ck_assert_ptr_nonnull(strstr(msg, "blk.1.ffn_down.weight"));
	free(msg);
	free(src);

	/* the layer description (arch/README.md: gemma2's windows) */
	src = fx_path("arch/arch-gemma2-Q8_0.gguf");
	ck_assert_ptr_nonnull(src);
	ck_assert_int_eq(run(log, "info", src, END), 0);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "model            gemma2: neox "
	    "RoPE, GeGLU FFN"));
	ck_assert_ptr_nonnull(strstr(msg, "  soft-capping   scores 4, logits "
	    "10\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  layers         0, 2, ..., 24: "
	    "window 256, rope 0, post norms\n"));
	ck_assert_ptr_nonnull(strstr(msg, "  layers         1, 3, ..., 25: "
	    "full attention, rope 0, post norms\n"));
	free(msg);
	free(src);
	unlink(log);
}
END_TEST
SUITE_TEST("info", test_info_fixtures);

/*
 * --rope-freqs writes the divisors llama.cpp's converter writes for Llama
 * 3.1's rope scaling: those of arch/arch-llama31 (head size 64, base
 * 500000); --arch qwen2 writes a file that loads as qwen2 with random
 * Q/K/V biases.
 */
START_TEST(test_synth_families)
{
	char path[512];
	char *ref = fx_path("arch/arch-llama31-F16.gguf");
	struct cp_err e = { 0 };
	struct model *m, *want;

	if (ref == NULL) {
		printf("fixtures not under %s: skipped\n", fx_dir());
		return;
	}
	tmp_path(path, sizeof(path), "l31.gguf");
	ck_assert_int_eq(run(NULL, "synth", "-o", path, "--layers", "1",
	    "--embd", "128", "--heads", "2", "--kv-heads", "1", "--ff", "64",
	    "--vocab", "300", "--ctx", "256", "--rope-base", "500000",
	    "--rope-freqs", END), 0);
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	ck_assert_msg(model_load(ref, &want, &e) == 0, "%s", e.msg);
	ck_assert_ptr_nonnull(m->hp.rope[0].freqs);
	for (int i = 0; i < 32; i++)
		ck_assert_msg(fabsf(m->hp.rope[0].freqs[i] -
		    want->hp.rope[0].freqs[i]) <= 1e-6f *
		    want->hp.rope[0].freqs[i], "pair %d: %g, llama.cpp %g", i,
		    (double)m->hp.rope[0].freqs[i],
		    (double)want->hp.rope[0].freqs[i]);
	model_free(want);
	model_free(m);
	unlink(path);

	tmp_path(path, sizeof(path), "q2.gguf");
	ck_assert_int_eq(run(NULL, "synth", "-o", path, "--arch", "qwen2",
	    "--layers", "2", "--embd", "64", "--heads", "4", "--kv-heads", "2",
	    "--ff", "96", "--vocab", "300", "--ctx", "256", "--tied", END), 0);
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(m->hp.arch, ARCH_QWEN2);
	ck_assert(m->layers[1].bq != NULL && m->layers[1].bk != NULL &&
	    m->layers[1].bv != NULL);
	ck_assert(m->layers[1].bq[0] != m->layers[1].bq[1]);
	model_free(m);
	unlink(path);
	free(ref);
}
END_TEST
SUITE_TEST("synth", test_synth_families);

START_TEST(test_info_bad)
{
	char path[512], log[512];
	char *msg;

	tmp_path(path, sizeof(path), "junk.gguf");
	tmp_path(log, sizeof(log), "junk.log");
	tfile_write(path, "GGUF\x03\0\0\0 truncated", 18);
	ck_assert_int_eq(run(log, "info", path, END), 1);
	msg = tfile_read(log, NULL);
	ck_assert_ptr_nonnull(strstr(msg, "cpmodel info: "));
	ck_assert_ptr_nonnull(strstr(msg, path));
	ck_assert_ptr_nonnull(strstr(msg, "smaller than the 24-byte header"));
	free(msg);
	ck_assert_int_eq(run(log, "info", "/nonexistent.gguf", END), 1);
	ck_assert_int_eq(run(log, "info", END), 2);
	unlink(path);
	unlink(log);
}
END_TEST
SUITE_TEST("info", test_info_bad);


SUITE_CASE("synth", 60);
SUITE_CASE("info", 60);

int
main(void)
{
	if (prog_find(cpmodel, sizeof(cpmodel), "cpmodel", "CPMODEL") != 0) {
		printf("%s not built (make it, or set CPMODEL): skipped\n",
		    cpmodel);
		return 77;
	}
	return suite_main(suite_registered("synth"));
}
