/*
 * check_tokenizer.c - the tokenizer against llama.cpp's reference outputs:
 * the tokenizer conformance vectors of every vocabulary under
 * $CP_FIXTURES/vocab, the prompt ids recorded in REFERENCE.md and
 * synth/REFERENCE.json, and the text llama.cpp printed for aidreams260K.
 * Pre-tokenizer splits and UTF-8 repair are checked against results worked
 * out by hand from the expressions and from the Unicode rules; hostile
 * metadata is built with the GGUF writer.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "lib/clock.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/suite.h"
#include "lib/tfile.h"
#include "lib/tmpdir.h"
#include "lib/vocab_vecs.h"
#include "tok_internal.h"
#include "tokenizer.h"
#include "unicode.h"


#define MAX_IDS 4096

struct loaded {
	struct gguf_file *f;
	struct tokenizer *t;
};

/* Open rel under the fixtures and load its tokenizer; fails the test on error. */
static struct loaded
load_fx(const char *rel)
{
	struct loaded l = { NULL, NULL };
	struct cp_err e = { 0 };
	char *path = fx_path(rel);

	ck_assert_msg(path != NULL, "fixture %s missing", rel);
	ck_assert_msg(gguf_open(path, &l.f, &e) == 0, "%s", e.msg);
	ck_assert_msg(tok_load(l.f, &l.t, &e) == 0, "%s", e.msg);
	free(path);
	return l;
}

static void
unload(struct loaded *l)
{
	tok_free(l->t);
	gguf_close(l->f);
}

static void
check_round_trip(const struct tokenizer *t, const char *s, size_t len,
    const int32_t *ids, int n, const char *what)
{
	char *buf = malloc(4 * len + 64);
	long k;

	ck_assert_ptr_nonnull(buf);
	k = tok_decode(t, ids, (size_t)n, DETOK_STRIP_SPACE, buf, 4 * len + 64);
	ck_assert_msg(k == (long)len && memcmp(buf, s, len) == 0,
	    "%s: decode(encode('%.*s')) = '%.*s'", what, (int)len, s,
	    (int)(k > 0 ? k : 0), buf);
	free(buf);
}

static const char *const conformance[] = {
	"vocab/ggml-vocab-llama-spm.gguf",
	"vocab/ggml-vocab-phi-3.gguf",
	"vocab/ggml-vocab-gpt-2.gguf",
	"vocab/ggml-vocab-deepseek-coder.gguf",
	"vocab/ggml-vocab-deepseek-llm.gguf",
	"vocab/ggml-vocab-falcon.gguf",
	"vocab/ggml-vocab-starcoder.gguf",
	"vocab/ggml-vocab-refact.gguf",
	"vocab/ggml-vocab-mpt.gguf",
};

START_TEST(test_conformance)
{
	const char *rel = conformance[_i];
	struct loaded l = load_fx(rel);
	struct vocab_vecs vs;
	int32_t ids[MAX_IDS];
	int i, j, n, bad = 0;

	vv_read(rel, &vs);
	ck_assert_int_eq(vs.n, 46);
	for (i = 0; i < vs.n; i++) {
		const struct vocab_vec *v = &vs.v[i];

		n = tok_encode(l.t, v->s, v->len, false, false, ids, MAX_IDS);
		ck_assert_int_ge(n, 0);
		ck_assert_int_le(n, MAX_IDS);
		if (n != v->n) {
			bad++;
		} else {
			for (j = 0; j < n; j++)
				if (ids[j] != v->ids[j])
					break;
			if (j < n)
				bad++;
		}
		if (bad > 0) {
			fprintf(stderr, "%s: '%.*s':", rel, (int)v->len, v->s);
			for (j = 0; j < n; j++)
				fprintf(stderr, " %d", ids[j]);
			fprintf(stderr, "\n");
			ck_abort_msg("%s: test string %d differs", rel, i);
		}
		/* Byte-level BPE and SPM with byte fallback lose nothing. */
		check_round_trip(l.t, v->s, v->len, ids, n, rel);
	}
	vv_free(&vs);
	unload(&l);
}
END_TEST
SUITE_LOOP("fixtures", test_conformance, 0, (int)(sizeof(conformance) / sizeof(conformance[0])));

/* Vocabularies without vectors: load, and give every test string back. */
START_TEST(test_load_round_trip)
{
	static const char *const rels[] = {
		"vocab/ggml-vocab-baichuan.gguf",
		"vocab/ggml-vocab-gpt-neox.gguf",
	};
	struct loaded l = load_fx(rels[_i]);
	struct vocab_vecs vs;
	int32_t ids[MAX_IDS];
	int i, n;

	vv_read("vocab/ggml-vocab-llama-spm.gguf", &vs);
	for (i = 0; i < vs.n; i++) {
		n = tok_encode(l.t, vs.v[i].s, vs.v[i].len, false, false, ids,
		    MAX_IDS);
		ck_assert_int_ge(n, 0);
		ck_assert_int_le(n, MAX_IDS);
		check_round_trip(l.t, vs.v[i].s, vs.v[i].len, ids, n, rels[_i]);
	}
	vv_free(&vs);
	unload(&l);
}
END_TEST
SUITE_LOOP("fixtures", test_load_round_trip, 0, 2);

START_TEST(test_bert_unsupported)
{
	struct gguf_file *f;
	struct tokenizer *t = (struct tokenizer *)&t;
	struct cp_err e = { 0 };
	char *path = fx_path("vocab/ggml-vocab-bert-bge.gguf");

	ck_assert_ptr_nonnull(path);
	ck_assert_int_eq(gguf_open(path, &f, &e), 0);
	ck_assert_int_eq(tok_load(f, &t, &e), -EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(e.msg, "'bert'") != NULL &&
	    strstr(e.msg, "not supported") != NULL, "%s", e.msg);
	gguf_close(f);
	free(path);
}
END_TEST
SUITE_TEST("fixtures", test_bert_unsupported);

/* REFERENCE.md: llama-tokenize "Once upon a time" (BOS added). */
START_TEST(test_reference_prompts)
{
	static const int32_t aid[] = { 1, 429, 491, 433, 295, 429, 444, 445,
	    265, 262, 263, 342, 430 };
	static const int32_t sto[] = { 1, 403, 407, 261, 378 };
	struct loaded l = load_fx("aidreams260K.gguf");
	int32_t ids[64];
	int n, i;

	n = tok_encode(l.t, "Once upon a time", 16, true, true, ids, 64);
	ck_assert_int_eq(n, 13);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], aid[i]);
	/* Sizing call: no room, same count. */
	ck_assert_int_eq(tok_encode(l.t, "Once upon a time", 16, true, true,
	    NULL, 0), 13);
	ck_assert_int_eq(tok_encode(l.t, "Once upon a time", 16, true, true,
	    ids, 3), 13);
	ck_assert_int_eq(ids[2], 491);
	unload(&l);

	l = load_fx("stories260K-plctlab.gguf");
	n = tok_encode(l.t, "Once upon a time", 16, true, true, ids, 64);
	ck_assert_int_eq(n, 5);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], sto[i]);
	ck_assert_int_eq(tok_bos(l.t), 1);
	ck_assert_int_eq(tok_eos(l.t), 2);
	ck_assert(tok_is_eog(l.t, 2));
	ck_assert(!tok_is_eog(l.t, 1));
	unload(&l);
}
END_TEST
SUITE_TEST("fixtures", test_reference_prompts);

/* The 64 greedy ids aidreams260K generated after the prompt (REFERENCE.md). */
static const int32_t aid_gen[64] = {
	446, 280, 432, 458, 375, 431, 422, 314, 280, 323, 290, 431, 448, 429,
	465, 438, 340, 431, 338, 353, 341, 431, 327, 446, 262, 429, 453, 435,
	285, 361, 437, 431, 440, 437, 445, 430, 275, 280, 302, 450, 405, 403,
	399, 306, 339, 290, 264, 309, 361, 441, 267, 395, 448, 429, 465, 438,
	340, 431, 338, 353, 341, 325, 266, 386,
};

static const char aid_text[] = ", pixels unfolding like petals. "
    "Classifications unfold, a kaleidoscope of probability revealing hidden "
    "patterns. Classification whispers sec";

START_TEST(test_detok_reference_text)
{
	static const int32_t prompt[] = { 1, 429, 491, 433, 295, 429, 444, 445,
	    265, 262, 263, 342, 430 };
	struct loaded l = load_fx("aidreams260K.gguf");
	size_t cap = detok_max_out(l.t), len = 0;
	char *buf = malloc(cap), all[1024];
	struct detok d;
	int i, k;

	ck_assert_ptr_nonnull(buf);
	/* llama-server's "content": the generated ids alone. */
	detok_init(&d, l.t, 0);
	for (i = 0; i < 64; i++) {
		k = detok_feed(&d, aid_gen[i], buf, cap);
		ck_assert_int_ge(k, 0);
		ck_assert_uint_lt(len + (size_t)k, sizeof(all));
		memcpy(all + len, buf, (size_t)k);
		len += (size_t)k;
	}
	k = detok_flush(&d, buf, cap);
	ck_assert_int_eq(k, 0);
	ck_assert_uint_eq(len, strlen(aid_text));
	ck_assert(memcmp(all, aid_text, len) == 0);

	/* llama-cli's stdout: prompt (BOS renders as nothing) then the rest. */
	detok_init(&d, l.t, 0);
	len = 0;
	for (i = 0; i < 13 + 64; i++) {
		k = detok_feed(&d, i < 13 ? prompt[i] : aid_gen[i - 13], buf,
		    cap);
		ck_assert_int_ge(k, 0);
		memcpy(all + len, buf, (size_t)k);
		len += (size_t)k;
	}
	all[len] = '\0';
	ck_assert_str_eq(all, " Once upon a time, pixels unfolding like petals. "
	    "Classifications unfold, a kaleidoscope of probability revealing "
	    "hidden patterns. Classification whispers sec");

	/* llama-simple's stdout: special tokens rendered, BOS as "<s>". */
	{
		int32_t all_ids[13 + 64];
		const char *want = "<s> Once upon a time, pixels unfolding like "
		    "petals. Classifications unfold, a kaleidoscope of "
		    "probability revealing hidden patterns. Classification "
		    "whispers sec";
		long n;

		memcpy(all_ids, prompt, sizeof(prompt));
		memcpy(all_ids + 13, aid_gen, sizeof(aid_gen));
		n = tok_decode(l.t, all_ids, 13 + 64, DETOK_SPECIAL, all,
		    sizeof(all));
		ck_assert_int_eq(n, (long)strlen(want));
		ck_assert(memcmp(all, want, (size_t)n) == 0);
		/* Too small a buffer: the full length, a truncated copy. */
		ck_assert_int_eq(tok_decode(l.t, all_ids, 13 + 64,
		    DETOK_SPECIAL, all, 5), n);
		ck_assert(memcmp(all, "<s> O", 5) == 0);
	}
	free(buf);
	unload(&l);
}
END_TEST
SUITE_TEST("fixtures", test_detok_reference_text);

/* Byte token of b in the 512-token SPM vocabularies: ids 3..258. */
#define BYTE_TOK(b) (3 + (b))

/* Feed ids one by one; the concatenated output must equal want[0..wlen). */
static void
stream_expect(const struct tokenizer *t, const int32_t *ids, int n,
    const char *want, size_t wlen)
{
	size_t cap = detok_max_out(t), len = 0;
	char *buf = malloc(cap), out[256];
	struct detok d;
	int i, k;

	ck_assert_ptr_nonnull(buf);
	detok_init(&d, t, 0);
	for (i = 0; i < n; i++) {
		k = detok_feed(&d, ids[i], buf, cap);
		ck_assert_int_ge(k, 0);
		memcpy(out + len, buf, (size_t)k);
		len += (size_t)k;
	}
	k = detok_flush(&d, buf, cap);
	ck_assert_int_ge(k, 0);
	memcpy(out + len, buf, (size_t)k);
	len += (size_t)k;
	ck_assert_uint_eq(len, wlen);
	ck_assert(memcmp(out, want, wlen) == 0);
	free(buf);
}

START_TEST(test_detok_utf8)
{
	struct loaded l = load_fx("stories260K-plctlab.gguf");
	size_t cap = detok_max_out(l.t);
	char *buf = malloc(cap);
	struct detok d;
	/* U+00E9 and U+1F600 split across byte tokens come out whole. */
	const int32_t e_acute[] = { BYTE_TOK(0xC3), BYTE_TOK(0xA9) };
	const int32_t grin[] = { BYTE_TOK(0xF0), BYTE_TOK(0x9F),
	    BYTE_TOK(0x98), BYTE_TOK(0x80) };
	/* C3 then 'a': the lead is ill-formed, 'a' survives. */
	const int32_t cut[] = { BYTE_TOK(0xC3), BYTE_TOK('a') };
	/* ED A0 80 (a surrogate): three maximal subparts. */
	const int32_t sur[] = { BYTE_TOK(0xED), BYTE_TOK(0xA0), BYTE_TOK(0x80) };
	/* E2 82 at the end: one U+FFFD at flush. */
	const int32_t tail[] = { BYTE_TOK(0xE2), BYTE_TOK(0x82) };
	/* FF and C0 can never start a sequence. */
	const int32_t never[] = { BYTE_TOK(0xFF), BYTE_TOK(0xC0), BYTE_TOK('b') };
	/* F0 80: 80 is not allowed after F0, so F0 alone, then 80 alone. */
	const int32_t f0[] = { BYTE_TOK(0xF0), BYTE_TOK(0x80) };
	int k;

	ck_assert_ptr_nonnull(buf);
	detok_init(&d, l.t, 0);
	ck_assert_int_eq(detok_feed(&d, BYTE_TOK(0xC3), buf, cap), 0);
	ck_assert_int_eq(detok_feed(&d, BYTE_TOK(0xA9), buf, cap), 2);
	ck_assert(memcmp(buf, "\xc3\xa9", 2) == 0);
	ck_assert_int_eq(detok_feed(&d, tok_n_vocab(l.t), buf, cap), -EINVAL);
	ck_assert_int_eq(detok_feed(&d, -1, buf, cap), -EINVAL);
	ck_assert_int_eq(detok_feed(&d, 1, buf, cap - 1), -ENOSPC);
	k = detok_flush(&d, buf, cap);
	ck_assert_int_eq(k, 0);

	stream_expect(l.t, e_acute, 2, "\xc3\xa9", 2);
	stream_expect(l.t, grin, 4, "\xf0\x9f\x98\x80", 4);
	stream_expect(l.t, cut, 2, "\xef\xbf\xbd" "a", 4);
	stream_expect(l.t, sur, 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9);
	stream_expect(l.t, tail, 2, "\xef\xbf\xbd", 3);
	stream_expect(l.t, never, 3, "\xef\xbf\xbd\xef\xbf\xbd" "b", 7);
	stream_expect(l.t, f0, 2, "\xef\xbf\xbd\xef\xbf\xbd", 6);
	free(buf);
	unload(&l);
}
END_TEST
SUITE_TEST("fixtures", test_detok_utf8);

/* synth/REFERENCE.json: the prompt ids llama-server reported for every file. */
START_TEST(test_synth_reference)
{
	char err[256], *path = fx_path("synth/REFERENCE.json");
	const struct json *prompts, *files;
	struct json *j;
	size_t fi, ri, pi, checked = 0;

	ck_assert_ptr_nonnull(path);
	j = json_parse_file(path, err, sizeof(err));
	ck_assert_msg(j != NULL, "%s", err);
	free(path);
	prompts = json_get(j, "prompts");
	files = json_get(j, "files");
	ck_assert_ptr_nonnull(prompts);
	ck_assert_ptr_nonnull(files);
	ck_assert_int_eq(files->type, JSON_OBJECT);
	for (fi = 0; fi < files->n; fi++) {
		const struct json *res = json_get(&files->items[fi], "results");
		char rel[256];
		struct loaded l;

		snprintf(rel, sizeof(rel), "synth/%s", files->keys[fi]);
		ck_assert_ptr_nonnull(res);
		l = load_fx(rel);
		for (ri = 0; ri < res->n; ri++) {
			const struct json *r = json_at(res, ri);
			const struct json *key = json_get(r, "prompt");
			const struct json *want = json_get(r, "prompt_ids");
			const struct json *text = NULL;
			int32_t ids[MAX_IDS];
			int n;

			ck_assert_ptr_nonnull(key);
			ck_assert_ptr_nonnull(want);
			for (pi = 0; pi < prompts->n; pi++)
				if (strcmp(json_get(json_at(prompts, pi),
				    "key")->str, key->str) == 0)
					text = json_get(json_at(prompts, pi),
					    "text");
			ck_assert_msg(text != NULL, "no prompt %s", key->str);
			n = tok_encode(l.t, text->str, text->len, true, true,
			    ids, MAX_IDS);
			ck_assert_int_eq(n, (int)want->n);
			for (pi = 0; pi < want->n; pi++)
				ck_assert_msg(ids[pi] == (int32_t)want->items[pi].num,
				    "%s %s: id %zu is %d, want %g", rel,
				    key->str, pi, ids[pi], want->items[pi].num);
			checked++;
		}
		unload(&l);
	}
	ck_assert_uint_ge(checked, 40);
	json_free(j);
}
END_TEST
SUITE_TEST("fixtures", test_synth_reference);

/*
 * tok_eog_ids() lists, ascending, exactly the ids tok_is_eog() accepts;
 * want is one of them.
 */
static void
check_eog_ids(const struct tokenizer *t, int32_t want)
{
	const int32_t *eog;
	int32_t id;
	int n, k = 0;
	bool seen = false;

	eog = tok_eog_ids(t, &n);
	ck_assert_int_gt(n, 0);
	for (id = 0; id < tok_n_vocab(t); id++) {
		if (!tok_is_eog(t, id))
			continue;
		ck_assert_int_lt(k, n);
		ck_assert_int_eq(eog[k++], id);
		seen |= id == want;
	}
	ck_assert_int_eq(k, n);
	ck_assert(seen);
}

/* Special tokens in the text: matched only when asked (ids from the vectors). */
START_TEST(test_parse_special)
{
	struct loaded l = load_fx("vocab/ggml-vocab-llama-spm.gguf");
	const char *s = "<s>Hello</s>";
	int32_t ids[64], plain[64];
	int n, np;

	/* " Hello world" -> 15043 3186 in the vectors: 15043 is "▁Hello". */
	n = tok_encode(l.t, s, strlen(s), false, true, ids, 64);
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(ids[0], 1);
	ck_assert_int_eq(ids[1], 15043);	/* space prefix after a special */
	ck_assert_int_eq(ids[2], 2);
	/* add_special puts BOS in front (add_bos_token true, add_eos false). */
	n = tok_encode(l.t, s, strlen(s), true, true, ids, 64);
	ck_assert_int_eq(n, 4);
	ck_assert_int_eq(ids[0], 1);
	ck_assert_int_eq(ids[1], 1);
	/* Without parse_special the markup is ordinary text. */
	np = tok_encode(l.t, s, strlen(s), false, false, plain, 64);
	ck_assert_int_gt(np, 3);
	for (n = 0; n < np; n++)
		ck_assert(plain[n] != 1 && plain[n] != 2);
	check_round_trip(l.t, s, strlen(s), plain, np, "llama-spm markup");
	/* Empty text: nothing, or BOS alone. */
	ck_assert_int_eq(tok_encode(l.t, "", 0, false, false, ids, 64), 0);
	ck_assert_int_eq(tok_encode(l.t, "", 0, true, false, ids, 64), 1);
	ck_assert_int_eq(ids[0], 1);
	ck_assert(tok_is_eog(l.t, 2));
	ck_assert(!tok_is_eog(l.t, 1));
	ck_assert(!tok_is_eog(l.t, 99999));
	check_eog_ids(l.t, 2);
	ck_assert_int_eq(tok_type(l.t, 0), TOK_TYPE_UNKNOWN);
	ck_assert_int_eq(tok_type(l.t, 1), TOK_TYPE_CONTROL);
	ck_assert_int_eq(tok_type(l.t, 3), TOK_TYPE_BYTE);
	ck_assert_int_eq(tok_type(l.t, 32000), -EINVAL);
	unload(&l);

	l = load_fx("vocab/ggml-vocab-gpt-2.gguf");
	s = "a<|endoftext|>b";
	n = tok_encode(l.t, s, strlen(s), true, true, ids, 64);
	ck_assert_int_eq(n, 3);	/* gpt-2 adds no BOS */
	ck_assert_int_eq(ids[1], 50256);
	ck_assert(tok_is_eog(l.t, 50256));
	check_eog_ids(l.t, 50256);
	ck_assert(!tok_add_bos(l.t));
	ck_assert_str_eq(tok_pre_name(l.t), "gpt-2");
	unload(&l);
}
END_TEST
SUITE_TEST("fixtures", test_parse_special);

/*
 * End of generation.  For every id of each vocabulary, what
 * llama_vocab_is_eog() and llama_vocab_eot() of llama.cpp c392e509 say: a
 * throw-away program linked against that commit's libllama loaded each
 * file (vocab_only) and printed them.  name is the text of the format's
 * end-of-turn token (Llama 3, ChatML, Phi-3, Gemma); eot TOK_NONE: the
 * vocabulary has no such token (the gemma fixtures carry the llama-spm
 * stand-in, without <end_of_turn>).  That llama.cpp loads neither gemma3
 * nor qwen3, so their fixtures are not here.
 */
static const struct {
	const char *file;
	const char *name;
	int32_t eot;
	int n_eog;
	int32_t eog[2];		/* ascending */
} eog_refs[] = {
	{ "vocab/ggml-vocab-llama-bpe.gguf", "<|eot_id|>", 128009,
	    2, { 128001, 128009 } },
	{ "vocab/ggml-vocab-qwen2.gguf", "<|im_end|>", 151645,
	    2, { 151643, 151645 } },
	{ "arch/arch-phi3-F16.gguf", "<|end|>", 32007, 2, { 32000, 32007 } },
	{ "vocab/ggml-vocab-phi-3.gguf", "<|end|>", 32007,
	    2, { 32000, 32007 } },
	{ "arch/arch-gemma-F16.gguf", "<end_of_turn>", TOK_NONE, 1, { 2 } },
	{ "arch/arch-gemma2-F16.gguf", "<end_of_turn>", TOK_NONE, 1, { 2 } },
	{ "arch/arch-llama31-F16.gguf", "<|eot_id|>", TOK_NONE, 1, { 2 } },
	{ "arch/arch-qwen2-F16.gguf", "<|endoftext|>", 50256, 1, { 50256 } },
	{ "vocab/ggml-vocab-llama-spm.gguf", "<|eot_id|>", TOK_NONE, 1, { 2 } },
	{ "vocab/ggml-vocab-gpt-2.gguf", "<|endoftext|>", 50256, 1, { 50256 } },
	{ "vocab/ggml-vocab-deepseek-coder.gguf", "<\xef\xbd\x9c" "end"
	    "\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", 32014,
	    1, { 32014 } },
	{ "vocab/ggml-vocab-deepseek-llm.gguf", "<\xef\xbd\x9c" "end"
	    "\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", 100001,
	    1, { 100001 } },
	{ "vocab/ggml-vocab-falcon.gguf", "<|endoftext|>", 11, 1, { 11 } },
	{ "vocab/ggml-vocab-starcoder.gguf", "<|endoftext|>", 0, 1, { 0 } },
	{ "vocab/ggml-vocab-refact.gguf", "<|endoftext|>", 0, 1, { 0 } },
	{ "vocab/ggml-vocab-mpt.gguf", "<|endoftext|>", 0, 1, { 0 } },
	{ "vocab/ggml-vocab-gpt-neox.gguf", "<|endoftext|>", 0, 1, { 0 } },
	{ "vocab/ggml-vocab-baichuan.gguf", "<|eot_id|>", TOK_NONE, 1, { 2 } },
};

START_TEST(test_eog_llamacpp)
{
	const char *name = eog_refs[_i].name;
	struct loaded l = load_fx(eog_refs[_i].file);
	int32_t id, eot = eog_refs[_i].eot;
	int k = 0;

	ck_assert_int_eq(tok_eot(l.t), eot);
	ck_assert_int_eq(tok_lookup(l.t, name, strlen(name)), eot);
	if (eot != TOK_NONE)
		ck_assert_int_eq(tok_type(l.t, eot), TOK_TYPE_CONTROL);
	for (id = 0; id < tok_n_vocab(l.t); id++) {
		if (!tok_is_eog(l.t, id))
			continue;
		ck_assert_msg(k < eog_refs[_i].n_eog &&
		    eog_refs[_i].eog[k] == id, "%s: id %d ends generation",
		    eog_refs[_i].file, id);
		k++;
	}
	ck_assert_int_eq(k, eog_refs[_i].n_eog);
	unload(&l);
}
END_TEST
SUITE_LOOP("fixtures", test_eog_llamacpp, 0, (int)(sizeof(eog_refs) / sizeof(eog_refs[0])));

/* Piece rendering rules. */
START_TEST(test_pieces)
{
	struct loaded l = load_fx("vocab/ggml-vocab-llama-spm.gguf");
	const char *p;
	size_t n;

	p = tok_piece(l.t, 15043, false, &n);	/* "▁Hello" */
	ck_assert_uint_eq(n, 6);
	ck_assert(memcmp(p, " Hello", 6) == 0);
	p = tok_piece(l.t, 3 + 0x0A, false, &n);	/* <0x0A> */
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(p[0], '\n');
	tok_piece(l.t, 1, false, &n);
	ck_assert_uint_eq(n, 0);
	p = tok_piece(l.t, 1, true, &n);
	ck_assert_uint_eq(n, 3);
	ck_assert(memcmp(p, "<s>", 3) == 0);
	ck_assert_ptr_null(tok_piece(l.t, 32000, true, &n));
	ck_assert_uint_ge(tok_max_piece(l.t), 6);
	unload(&l);

	l = load_fx("vocab/ggml-vocab-gpt-2.gguf");
	p = tok_text(l.t, 220, &n);	/* "Ġ", the space stand-in */
	ck_assert_uint_eq(n, 2);
	ck_assert(memcmp(p, "\xc4\xa0", 2) == 0);
	p = tok_piece(l.t, 220, false, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(p[0], ' ');
	unload(&l);
}
END_TEST
SUITE_TEST("fixtures", test_pieces);

struct split_case {
	enum tok_pre pre;
	const char *text;
	const char *pieces[24];	/* NULL-terminated */
};

/*
 * Splits worked out by hand from each expression list (ordered
 * alternation, leftmost matches, gaps kept).
 */
static const struct split_case split_cases[] = {
	{ TOK_PRE_LLAMA3, "Hello, y'all! 1234567\n\n  x",
	    { "Hello", ",", " y", "'all", "!", " ", "123", "456", "7",
	    "\n\n", " ", " x", NULL } },
	{ TOK_PRE_LLAMA3, "I'M   ok\t", { "I", "'M", "  ", " ok", "\t", NULL } },
	{ TOK_PRE_QWEN2, "ab 123 'S", { "ab", " ", "1", "2", "3", " '", "S",
	    NULL } },
	{ TOK_PRE_GPT2, "it's  33 ok!!", { "it", "'s", " ", " 33", " ok",
	    "!!", NULL } },
	{ TOK_PRE_GPT2, "I'M", { "I", "'", "M", NULL } },
	{ TOK_PRE_DEFAULT, "x=1234,5", { "x", "=", "123", "4", ",", "5", NULL } },
	{ TOK_PRE_STARCODER, "a 12", { "a", " ", "1", "2", NULL } },
	{ TOK_PRE_FALCON, "`a` 1234", { "`", "a", "`", " ", "123", "4", NULL } },
	{ TOK_PRE_DEEPSEEK_CODER, "ab\ncd 12 ..", { "ab", "\n", "cd", " ",
	    "1", "2", " ..", NULL } },
	{ TOK_PRE_DEEPSEEK_LLM, "Hi 12 \xe4\xb8\xad\xe6\x96\x87" "ab  ",
	    { "Hi", " ", "12", " ", "\xe4\xb8\xad\xe6\x96\x87", "ab", "  ",
	    NULL } },
	{ TOK_PRE_BLOOM, "Hi there, you.", { "Hi", " there", ",", " you", ".",
	    NULL } },
};

START_TEST(test_pretok_split)
{
	const struct split_case *c = &split_cases[_i];
	size_t len = strlen(c->text), n_cp = 0, off = 0, n, i, pos = 0;
	uint32_t cp[128];
	uint16_t fl[128];
	size_t lens[128], tmp[128];

	while (off < len) {
		size_t adv;

		cp[n_cp] = uni_decode((const uint8_t *)c->text + off, len - off,
		    &adv);
		fl[n_cp] = uni_flags(cp[n_cp]);
		n_cp++;
		off += adv;
	}
	n = pretok_split(c->pre, cp, fl, n_cp, lens, tmp);
	off = 0;
	for (i = 0; i < n; i++) {
		size_t bytes = 0, k;
		uint8_t u[4];

		ck_assert_msg(c->pieces[i] != NULL, "case %d: extra piece %zu",
		    _i, i);
		for (k = 0; k < lens[i]; k++)
			bytes += uni_encode(cp[pos + k], u);
		ck_assert_msg(bytes == strlen(c->pieces[i]) &&
		    memcmp(c->text + off, c->pieces[i], bytes) == 0,
		    "case %d piece %zu: '%.*s', want '%s'", _i, i, (int)bytes,
		    c->text + off, c->pieces[i]);
		off += bytes;
		pos += lens[i];
	}
	ck_assert_msg(c->pieces[n] == NULL, "case %d: missing pieces", _i);
}
END_TEST
SUITE_LOOP("units", test_pretok_split, 0, (int)(sizeof(split_cases) / sizeof(split_cases[0])));

START_TEST(test_unicode)
{
	size_t adv;
	uint8_t u[4];

	ck_assert(uni_flags('a') & UNI_LETTER);
	ck_assert(uni_flags('7') & UNI_NUMBER);
	ck_assert(uni_flags(',') & UNI_PUNCT);
	ck_assert(uni_flags('$') & UNI_SYMBOL);
	ck_assert(uni_flags(' ') & UNI_WSPACE);
	ck_assert(!(uni_flags(0x1C) & UNI_WSPACE));
	ck_assert(uni_flags(0x3000) & UNI_WSPACE);
	ck_assert(uni_flags(0x4E2D) & UNI_LETTER);	/* 中 */
	ck_assert(uni_flags(0x0301) & UNI_MARK);
	ck_assert(uni_flags(0x00BD) & UNI_NUMBER);	/* ½ */
	ck_assert_uint_eq(uni_flags(0x0378), UNI_UNDEF);
	ck_assert_uint_eq(uni_flags(0x110000), UNI_UNDEF);
	ck_assert_uint_eq(uni_decode((const uint8_t *)"\xc3\xa9", 2, &adv),
	    0xE9);
	ck_assert_uint_eq(adv, 2);
	ck_assert_uint_eq(uni_decode((const uint8_t *)"\xc3", 1, &adv),
	    UNI_REPLACEMENT);
	ck_assert_uint_eq(adv, 1);
	ck_assert_uint_eq(uni_decode((const uint8_t *)"\x80", 1, &adv),
	    UNI_REPLACEMENT);
	ck_assert_uint_eq(uni_decode((const uint8_t *)"\xf4\x90\x80\x80", 4,
	    &adv), UNI_REPLACEMENT);
	ck_assert_uint_eq(uni_encode(0x1F600, u), 4);
	ck_assert(memcmp(u, "\xf0\x9f\x98\x80", 4) == 0);
	/* Byte-level stand-ins: ' ' is U+0120 (Ġ), '\n' U+010A, 0xAD U+0143. */
	ck_assert_uint_eq(uni_byte_to_cp(' '), 0x120);
	ck_assert_uint_eq(uni_byte_to_cp('\n'), 0x10A);
	ck_assert_uint_eq(uni_byte_to_cp(0x7F), 0x121);
	ck_assert_uint_eq(uni_byte_to_cp(0xAD), 0x143);
	ck_assert_uint_eq(uni_byte_to_cp('A'), 'A');
	for (int b = 0; b < 256; b++)
		ck_assert_int_eq(uni_cp_to_byte(uni_byte_to_cp((uint8_t)b)), b);
	ck_assert_int_eq(uni_cp_to_byte(0x144), -1);
	ck_assert_int_eq(uni_cp_to_byte(' '), -1);
}
END_TEST
SUITE_TEST("units", test_unicode);

struct enc_job {
	const struct tokenizer *t;
	const struct vocab_vecs *vs;
	int ok;
};

static void *
enc_thread(void *arg)
{
	struct enc_job *j = arg;
	int32_t ids[MAX_IDS];
	int r, i, k, n;

	j->ok = 1;
	for (r = 0; r < 20; r++)
		for (i = 0; i < j->vs->n; i++) {
			const struct vocab_vec *v = &j->vs->v[i];

			n = tok_encode(j->t, v->s, v->len, false, false, ids,
			    MAX_IDS);
			if (n != v->n)
				j->ok = 0;
			for (k = 0; k < n && k < v->n; k++)
				if (ids[k] != v->ids[k])
					j->ok = 0;
		}
	return NULL;
}

START_TEST(test_concurrent_encode)
{
	struct loaded l = load_fx("vocab/ggml-vocab-gpt-2.gguf");
	struct vocab_vecs vs;
	pthread_t th[4];
	struct enc_job jobs[4];
	int i;

	vv_read("vocab/ggml-vocab-gpt-2.gguf", &vs);
	for (i = 0; i < 4; i++) {
		jobs[i].t = l.t;
		jobs[i].vs = &vs;
		ck_assert_int_eq(pthread_create(&th[i], NULL, enc_thread,
		    &jobs[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert(jobs[i].ok);
	}
	vv_free(&vs);
	unload(&l);
}
END_TEST
SUITE_TEST("fixtures", test_concurrent_encode);

/* A few KB of mixed text must encode in milliseconds. */
START_TEST(test_speed)
{
	static const char *const rels[] = {
		"vocab/ggml-vocab-llama-spm.gguf",
		"vocab/ggml-vocab-deepseek-llm.gguf",
	};
	struct loaded l = load_fx(rels[_i]);
	size_t len;
	char *path = fx_path("vocab/ggml-vocab-gpt-2.gguf.inp");
	char *text = tfile_read(path, &len), *big;
	int32_t *ids = malloc(8 * len * sizeof(*ids));
	double t0, ms;
	int n;

	big = malloc(2 * len);
	memcpy(big, text, len);
	memcpy(big + len, text, len);
	t0 = clock_ms_f();
	n = tok_encode(l.t, big, 2 * len, true, false, ids, (int)(8 * len));
	ms = clock_ms_f() - t0;
	ck_assert_int_gt(n, 0);
	ck_assert_msg(ms < 500, "%s: %zu bytes took %.1f ms", rels[_i],
	    2 * len, ms);
	free(ids);
	free(big);
	free(text);
	free(path);
	unload(&l);
}
END_TEST
SUITE_LOOP("fixtures", test_speed, 0, 2);

/*
 * Hostile metadata.  A tiny SPM vocabulary, written with one thing wrong,
 * must be refused with a message naming the key.
 */
enum flaw {
	FLAW_NONE,
	FLAW_NO_TOKENS,
	FLAW_SCORES_SHORT,
	FLAW_BOS_RANGE,
	FLAW_MERGE_NO_SPACE,
	FLAW_NO_MODEL,
	FLAW_BAD_TYPE,
	FLAW_DUP_TOKEN,
	FLAW_BAD_BYTE,
	FLAW_UNKNOWN_PRE,
	FLAW_SCORES_TYPE,
	FLAW_ADD_BOS_NO_BOS,
	FLAW_NONE_IDS,
	FLAW_BPE_OK,
	FLAW_COUNT
};
/* Write the vocabulary with flaw; returns the load result, e filled. */
static int
load_flawed(enum flaw flaw, struct tokenizer **t, struct cp_err *e)
{
	const char *toks[8] = { "<unk>", "<s>", "</s>", "<0x41>", "a", "b",
	    "ab", "\xe2\x96\x81" };
	float scores[8] = { 0, 0, 0, 0, -1, -2, -0.5f, -3 };
	int32_t types[8] = { 2, 3, 3, 6, 1, 1, 1, 1 };
	const char *merges[2] = { "a b", "ab" };
	struct gguf_writer *w = gguf_writer_new();
	struct gguf_file *f;
	char path[512];
	int rc;

	ck_assert_ptr_nonnull(w);
	snprintf(path, sizeof(path), "%s/check_tokenizer-%ld-%d.gguf",
	    tmp_dir(), (long)getpid(), (int)flaw);
	if (flaw == FLAW_DUP_TOKEN)
		toks[5] = "a";
	if (flaw == FLAW_BAD_BYTE)
		toks[3] = "<0xZZ>";
	if (flaw == FLAW_BAD_TYPE)
		types[6] = 9;
	if (flaw != FLAW_NO_MODEL)
		gguf_writer_set_str(w, "tokenizer.ggml.model",
		    flaw == FLAW_MERGE_NO_SPACE || flaw == FLAW_UNKNOWN_PRE ||
		    flaw == FLAW_BPE_OK ? "gpt2" : "llama");
	if (flaw == FLAW_UNKNOWN_PRE)
		gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
	if (flaw == FLAW_BPE_OK)
		gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
	if (flaw != FLAW_NO_TOKENS)
		gguf_writer_set_strs(w, "tokenizer.ggml.tokens", toks, 8);
	if (flaw == FLAW_SCORES_TYPE)
		gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_INT32,
		    types, 8);
	else
		gguf_writer_set_arr(w, "tokenizer.ggml.scores",
		    GGUF_VT_FLOAT32, scores, flaw == FLAW_SCORES_SHORT ? 7 : 8);
	gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32,
	    types, 8);
	if (flaw == FLAW_MERGE_NO_SPACE || flaw == FLAW_UNKNOWN_PRE ||
	    flaw == FLAW_BPE_OK)
		gguf_writer_set_strs(w, "tokenizer.ggml.merges", merges,
		    flaw == FLAW_MERGE_NO_SPACE ? 2 : 1);
	gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id",
	    flaw == FLAW_BOS_RANGE ? 8 : 1);
	if (flaw == FLAW_ADD_BOS_NO_BOS)
		gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", -1);
	if (flaw == FLAW_NONE_IDS) {
		gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id",
		    UINT32_MAX);
		gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id",
		    UINT32_MAX);
		gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
	}
	ck_assert_int_eq(gguf_writer_write(w, path, e), 0);
	gguf_writer_free(w);
	ck_assert_msg(gguf_open(path, &f, e) == 0, "%s", e->msg);
	unlink(path);
	rc = tok_load(f, t, e);
	gguf_close(f);	/* the tokenizer owns copies */
	return rc;
}

static const struct {
	enum flaw flaw;
	const char *needle;	/* in the error message; NULL: loads */
} flaws[] = {
	{ FLAW_NONE, NULL },
	{ FLAW_NO_TOKENS, "tokenizer.ggml.tokens is missing" },
	{ FLAW_SCORES_SHORT, "tokenizer.ggml.scores has 7 entries, expected 8" },
	{ FLAW_BOS_RANGE, "tokenizer.ggml.bos_token_id' = 8 is out of range" },
	{ FLAW_MERGE_NO_SPACE, "tokenizer.ggml.merges[1] \"ab\" has no space" },
	{ FLAW_NO_MODEL, "tokenizer.ggml.model is missing" },
	{ FLAW_BAD_TYPE, "tokenizer.ggml.token_type[6] = 9" },
	{ FLAW_DUP_TOKEN, "tokenizer.ggml.tokens[5] repeats the text of token 4" },
	{ FLAW_BAD_BYTE, "byte token 3" },
	{ FLAW_UNKNOWN_PRE, "'no-such-pre' is not supported" },
	{ FLAW_SCORES_TYPE, "tokenizer.ggml.scores" },
	{ FLAW_ADD_BOS_NO_BOS, "no BOS token" },
	{ FLAW_NONE_IDS, NULL },
	{ FLAW_BPE_OK, NULL },
};

START_TEST(test_hostile_metadata)
{
	struct tokenizer *t = NULL;
	struct cp_err e = { 0 };
	int rc = load_flawed(flaws[_i].flaw, &t, &e);
	int32_t ids[16];

	if (flaws[_i].needle != NULL) {
		ck_assert_int_eq(rc, -EINVAL);
		ck_assert_ptr_null(t);
		ck_assert_msg(strstr(e.msg, flaws[_i].needle) != NULL,
		    "flaw %d: message '%s' lacks '%s'", (int)flaws[_i].flaw,
		    e.msg, flaws[_i].needle);
		return;
	}
	ck_assert_msg(rc == 0, "%s", e.msg);
	switch (flaws[_i].flaw) {
	case FLAW_NONE:
		/* "▁ab" -> ▁ (no merge with it) then "ab"; A via <0x41>. */
		ck_assert_int_eq(tok_encode(t, "abA", 3, true, false, ids, 16),
		    4);
		ck_assert_int_eq(ids[0], 1);
		ck_assert_int_eq(ids[1], 7);
		ck_assert_int_eq(ids[2], 6);
		ck_assert_int_eq(ids[3], 3);
		break;
	case FLAW_NONE_IDS:
		ck_assert_int_eq(tok_eos(t), TOK_NONE);
		ck_assert_int_eq(tok_pad(t), TOK_NONE);
		ck_assert_int_eq(tok_encode(t, "ab", 2, true, false, ids, 16),
		    2);
		break;
	case FLAW_BPE_OK:
		/* One merge "a b": "ab" -> 6; a stray byte with no token is dropped. */
		ck_assert_int_eq(tok_encode(t, "ab", 2, true, false, ids, 16),
		    1);
		ck_assert_int_eq(ids[0], 6);
		ck_assert_int_eq(tok_encode(t, "bz", 2, false, false, ids, 16),
		    1);
		ck_assert_int_eq(ids[0], 5);
		break;
	default:
		break;
	}
	tok_free(t);
}
END_TEST
SUITE_LOOP("units", test_hostile_metadata, 0, (int)(sizeof(flaws) / sizeof(flaws[0])));

static bool
fixtures_present(void)
{
	char *p = fx_path("vocab/ggml-vocab-llama-spm.gguf");
	bool ok = p != NULL;

	free(p);
	return ok;
}

SUITE_CASE("fixtures", 60);

int
main(void)
{
	bool fixtures = fixtures_present();

	if (!fixtures)
		suite_case_skip("fixtures");
	return suite_main_some(suite_registered("tokenizer"), fixtures,
	    "fixtures not found in %s (set CP_FIXTURES): fixture tests skipped\n",
	    fx_dir());
}
