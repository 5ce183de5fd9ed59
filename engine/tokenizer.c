/*
 * tokenizer.c - loading a tokenizer from GGUF metadata, special tokens, and
 * the encode driver.
 *
 * Loading copies everything out of the file: token texts into one pool with
 * an open-addressing hash (text -> id), BPE merges into another (pair ->
 * rank), and the rendering of every token (tok_detok.c).  Defaults follow
 * llama.cpp: SPM adds BOS and a leading space, BPE adds neither unless the
 * pre-tokenizer or the metadata says so; tokens with well-known end-of-turn
 * texts count as end of generation and are treated as control tokens.
 *
 * Encoding first cuts the text at special tokens (longest text first), then
 * runs SentencePiece or BPE over each remaining stretch of text.
 */
#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_internal.h"

#define TOK_MAX_VOCAB (1 << 24)
#define TOK_MAX_POOL (UINT32_MAX / 2)

uint64_t
tok_hash(uint64_t h, const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (uint8_t)s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* Spread the low bits: FNV's are weak for power-of-two tables. */
static uint32_t
slot_of(uint64_t h, uint32_t mask)
{
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 32;
	return (uint32_t)h & mask;
}

int
tok_ids_push(struct tok_ids *a, int32_t id)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 64;
		int32_t *v;

		if (cap > SIZE_MAX / sizeof(*v))
			return -ENOMEM;
		if ((v = realloc(a->v, cap * sizeof(*v))) == NULL)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = id;
	return 0;
}

int32_t
tok_lookup(const struct tokenizer *t, const char *s, size_t n)
{
	uint32_t i = slot_of(tok_hash(TOK_HASH_INIT, s, n), t->map_mask);

	for (;; i = (i + 1) & t->map_mask) {
		uint32_t v = t->map[i];
		const struct tok_entry *te;

		if (v == 0)
			return TOK_NONE;
		te = &t->tok[v - 1];
		if (te->len == n && memcmp(t->text + te->off, s, n) == 0)
			return (int32_t)(v - 1);
	}
}

static uint64_t
pair_hash(const char *l, size_t ln, const char *r, size_t rn)
{
	uint64_t h = tok_hash(TOK_HASH_INIT, l, ln);

	h ^= ln;
	h *= 0x100000001b3ull;
	return tok_hash(h, r, rn);
}

int32_t
tok_merge_rank(const struct tokenizer *t, const char *l, size_t ln,
    const char *r, size_t rn)
{
	uint32_t i;

	if (t->n_merges == 0)
		return -1;
	i = slot_of(pair_hash(l, ln, r, rn), t->mmap_mask);
	for (;; i = (i + 1) & t->mmap_mask) {
		uint32_t v = t->mmap[i];
		const struct tok_merge *m;

		if (v == 0)
			return -1;
		m = &t->merges[v - 1];
		if (m->llen == ln && m->rlen == rn &&
		    memcmp(t->mtext + m->off, l, ln) == 0 &&
		    memcmp(t->mtext + m->off + ln, r, rn) == 0)
			return (int32_t)(v - 1);
	}
}

/* Smallest power of two >= 2n (at least 16), as a mask. */
static uint32_t
table_mask(size_t n)
{
	uint32_t cap = 16;

	while (cap < 2 * n)
		cap *= 2;
	return cap - 1;
}

/* Context for load errors. */
struct load {
	const struct gguf_file *f;
	struct tokenizer *t;
	struct cp_err *e;
	const char *path;
};

static bool
str_is(struct gguf_str s, const char *c)
{
	return s.ptr != NULL && gguf_str_eq(s, c);
}

/* Optional bool key: leaves *out alone when absent. */
static int
opt_bool(struct load *ld, const char *key, bool *out)
{
	if (gguf_find_kv(ld->f, key) == NULL)
		return 0;
	return gguf_get_bool(ld->f, key, out, ld->e);
}

/*
 * Optional token id key.  Absent, or -1 / 0xFFFFFFFF ("none" as converters
 * write it): *out unchanged / TOK_NONE.  Other out-of-range values are an
 * error when strict, ignored otherwise (the value stays as it was).
 */
static int
opt_id(struct load *ld, const char *key, int32_t *out, bool strict)
{
	const struct gguf_kv *kv = gguf_find_kv(ld->f, key);
	int64_t v;

	if (kv == NULL)
		return 0;
	switch (kv->val.type) {
	case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		v = kv->val.v.u64 > INT64_MAX ? -2 : (int64_t)kv->val.v.u64;
		if (kv->val.v.u64 == UINT32_MAX || kv->val.v.u64 == UINT64_MAX)
			v = -1;
		break;
	case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		v = kv->val.v.i64;
		if (v < -1)
			v = -2;
		break;
	default:
		return cp_err_set(ld->e, -EINVAL, "%s: key '%s' is a %s, wanted "
		    "an integer token id", ld->path, key,
		    gguf_vtype_name(kv->val.type));
	}
	if (v == -1) {
		*out = TOK_NONE;
		return 0;
	}
	if (v < 0 || v >= ld->t->n_vocab) {
		if (!strict)
			return 0;
		return cp_err_set(ld->e, -EINVAL, "%s: key '%s' = %lld is out "
		    "of range (vocabulary of %d tokens)", ld->path, key,
		    (long long)v, ld->t->n_vocab);
	}
	*out = (int32_t)v;
	return 0;
}

/* Copy the token texts, build the text -> id hash. */
static int
load_tokens(struct load *ld, const struct gguf_array *toks)
{
	struct tokenizer *t = ld->t;
	size_t total = 0, pos = 0;
	int32_t i;

	for (i = 0; i < t->n_vocab; i++) {
		size_t len = toks->strs[i].len ? toks->strs[i].len : 24;

		if (len > TOK_MAX_POOL - total)
			return cp_err_set(ld->e, -EINVAL, "%s: "
			    "tokenizer.ggml.tokens: texts too long (over %u "
			    "bytes)", ld->path, TOK_MAX_POOL);
		total += len;
	}
	t->text = malloc(total ? total : 1);
	t->map_mask = table_mask((size_t)t->n_vocab);
	t->map = calloc((size_t)t->map_mask + 1, sizeof(*t->map));
	if (t->text == NULL || t->map == NULL)
		return cp_err_set(ld->e, -ENOMEM, "%s: out of memory for the "
		    "vocabulary", ld->path);
	for (i = 0; i < t->n_vocab; i++) {
		struct tok_entry *te = &t->tok[i];
		uint32_t slot;
		int32_t dup;

		te->off = (uint32_t)pos;
		if (toks->strs[i].len == 0) {
			/* llama.cpp's stand-in for an empty token text */
			int n = snprintf(t->text + pos, 25, "[EMPTY_%d]", i);

			te->len = (uint32_t)n;
		} else {
			te->len = (uint32_t)toks->strs[i].len;
			memcpy(t->text + pos, toks->strs[i].ptr, te->len);
		}
		dup = tok_lookup(t, t->text + pos, te->len);
		if (dup != TOK_NONE)
			return cp_err_set(ld->e, -EINVAL, "%s: "
			    "tokenizer.ggml.tokens[%d] repeats the text of "
			    "token %d", ld->path, i, dup);
		slot = slot_of(tok_hash(TOK_HASH_INIT, t->text + pos, te->len),
		    t->map_mask);
		while (t->map[slot] != 0)
			slot = (slot + 1) & t->map_mask;
		t->map[slot] = (uint32_t)i + 1;
		pos += te->len;
	}
	return 0;
}

/*
 * Optional per-token array key of elem_type (GGUF_VT_COUNT: any type): *a
 * NULL when absent, else an array of n_vocab entries.
 */
static int
opt_vocab_arr(struct load *ld, const char *key, enum gguf_vtype elem_type,
    const struct gguf_array **a)
{
	int rc;

	*a = NULL;
	if (gguf_find_kv(ld->f, key) == NULL)
		return 0;
	if ((rc = gguf_get_arr(ld->f, key, elem_type, a, ld->e)) != 0)
		return rc;
	if ((*a)->n != (uint64_t)ld->t->n_vocab)
		return cp_err_set(ld->e, -EINVAL, "%s: %s has %llu entries, "
		    "expected %d (one per token)", ld->path, key,
		    (unsigned long long)(*a)->n, ld->t->n_vocab);
	return 0;
}

static int
load_scores_types(struct load *ld)
{
	struct tokenizer *t = ld->t;
	const struct gguf_array *a;
	int32_t i;
	int rc;

	if ((rc = opt_vocab_arr(ld, "tokenizer.ggml.scores", GGUF_VT_FLOAT32,
	    &a)) != 0)
		return rc;
	for (i = 0; a != NULL && i < t->n_vocab; i++) {
		double s = gguf_arr_f64(a, (uint64_t)i);

		if (isnan(s))
			return cp_err_set(ld->e, -EINVAL, "%s: "
			    "tokenizer.ggml.scores[%d] is NaN", ld->path, i);
		t->tok[i].score = (float)s;
	}
	for (i = 0; i < t->n_vocab; i++)
		t->tok[i].type = TOK_TYPE_NORMAL;
	if ((rc = opt_vocab_arr(ld, "tokenizer.ggml.token_type",
	    GGUF_VT_COUNT, &a)) != 0)
		return rc;
	if (a != NULL && (gguf_vtype_size(a->type) == 0 ||
	    a->type == GGUF_VT_FLOAT32 || a->type == GGUF_VT_FLOAT64 ||
	    a->type == GGUF_VT_BOOL))
		return cp_err_set(ld->e, -EINVAL, "%s: "
		    "tokenizer.ggml.token_type is an array of %s, wanted "
		    "integers", ld->path, gguf_vtype_name(a->type));
	for (i = 0; a != NULL && i < t->n_vocab; i++) {
		int64_t v = gguf_arr_i64(a, (uint64_t)i);

		if (v < TOK_TYPE_UNDEFINED || v > TOK_TYPE_BYTE)
			return cp_err_set(ld->e, -EINVAL, "%s: "
			    "tokenizer.ggml.token_type[%d] = %lld, expected "
			    "0..6", ld->path, i, (long long)v);
		t->tok[i].type = (uint8_t)v;
	}
	return 0;
}

/* Copy the merges "left right" and build the pair -> rank hash (first rank wins). */
static int
load_merges(struct load *ld)
{
	struct tokenizer *t = ld->t;
	const struct gguf_array *a;
	size_t total = 0, pos = 0;
	uint64_t i;
	int rc;

	if (gguf_find_kv(ld->f, "tokenizer.ggml.merges") == NULL)
		return cp_err_set(ld->e, -EINVAL, "%s: BPE vocabulary without "
		    "tokenizer.ggml.merges", ld->path);
	rc = gguf_get_arr(ld->f, "tokenizer.ggml.merges", GGUF_VT_STRING, &a,
	    ld->e);
	if (rc != 0)
		return rc;
	if (a->n > (uint64_t)INT32_MAX - 1)
		return cp_err_set(ld->e, -EINVAL, "%s: tokenizer.ggml.merges: "
		    "too many merges (%llu)", ld->path,
		    (unsigned long long)a->n);
	for (i = 0; i < a->n; i++) {
		if (a->strs[i].len > TOK_MAX_POOL - total)
			return cp_err_set(ld->e, -EINVAL, "%s: "
			    "tokenizer.ggml.merges: texts too long", ld->path);
		total += a->strs[i].len;
	}
	t->n_merges = (uint32_t)a->n;
	t->merges = calloc(a->n ? a->n : 1, sizeof(*t->merges));
	t->mtext = malloc(total ? total : 1);
	t->mmap_mask = table_mask(a->n);
	t->mmap = calloc((size_t)t->mmap_mask + 1, sizeof(*t->mmap));
	if (t->merges == NULL || t->mtext == NULL || t->mmap == NULL)
		return cp_err_set(ld->e, -ENOMEM, "%s: out of memory for the "
		    "merges", ld->path);
	for (i = 0; i < a->n; i++) {
		const char *s = a->strs[i].ptr, *sp = NULL;
		size_t n = a->strs[i].len;
		struct tok_merge *m = &t->merges[i];
		uint32_t slot;

		if (n > 1)
			sp = memchr(s + 1, ' ', n - 1);
		if (sp == NULL)
			return cp_err_set(ld->e, -EINVAL, "%s: "
			    "tokenizer.ggml.merges[%llu] \"%.*s\" has no "
			    "space between its two parts", ld->path,
			    (unsigned long long)i, (int)(n > 40 ? 40 : n), s);
		m->off = (uint32_t)pos;
		m->llen = (uint32_t)(sp - s);
		m->rlen = (uint32_t)(n - m->llen - 1);
		memcpy(t->mtext + pos, s, m->llen);
		memcpy(t->mtext + pos + m->llen, sp + 1, m->rlen);
		pos += m->llen + m->rlen;
		if (tok_merge_rank(t, s, m->llen, sp + 1, m->rlen) >= 0)
			continue;	/* a repeated pair keeps its first rank */
		slot = slot_of(pair_hash(s, m->llen, sp + 1, m->rlen),
		    t->mmap_mask);
		while (t->mmap[slot] != 0)
			slot = (slot + 1) & t->mmap_mask;
		t->mmap[slot] = (uint32_t)i + 1;
	}
	return 0;
}

/* Lowest id whose text is one of names (NULL-terminated), or TOK_NONE. */
static int32_t
find_any(const struct tokenizer *t, const char *const *names)
{
	int32_t best = TOK_NONE, id;

	for (; *names != NULL; names++) {
		id = tok_lookup(t, *names, strlen(*names));
		if (id != TOK_NONE && (best == TOK_NONE || id < best))
			best = id;
	}
	return best;
}

/*
 * The id of the first of names (NULL-terminated) the vocabulary has, or
 * TOK_NONE.  llama.cpp takes the first name it meets walking its hash map
 * of the vocabulary, an order no file states; the order of the names here
 * gives its answers on the fixtures: the chat's end of turn before the
 * document's end (<|im_end|> before Qwen's <|endoftext|>, <|end|> before
 * Phi-3's).
 */
static int32_t
find_first(const struct tokenizer *t, const char *const *names)
{
	int32_t id;

	for (; *names != NULL; names++)
		if ((id = tok_lookup(t, *names, strlen(*names))) != TOK_NONE)
			return id;
	return TOK_NONE;
}

static void
force_control(struct tokenizer *t, int32_t id)
{
	if (id != TOK_NONE)
		t->tok[id].type = TOK_TYPE_CONTROL;
}

/*
 * End-of-turn, end-of-message and fill-in-the-middle tokens recognised by
 * their text when the metadata does not name them, and the set of tokens
 * that end generation.  Every token found this way is a control token.
 */
static int
load_specials(struct load *ld)
{
	static const char *const eot_names[] = { "<|eot_id|>", "<|im_end|>",
	    "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
	    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
	    NULL };
	static const char *const eom_names[] = { "<|eom_id|>", NULL };
	static const char *const pre_names[] = { "<|fim_prefix|>",
	    "<fim-prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
	    "<PRE>", NULL };
	static const char *const suf_names[] = { "<|fim_suffix|>",
	    "<fim-suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
	    "<SUF>", NULL };
	static const char *const mid_names[] = { "<|fim_middle|>",
	    "<fim-middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
	    "<MID>", NULL };
	static const char *const pad_names[] = { "<|fim_pad|>", "<fim-pad>",
	    "<PAD>", NULL };
	static const char *const rep_names[] = { "<|fim_repo|>",
	    "<|repo_name|>", "<fim-repo>", "<REPO>", NULL };
	static const char *const sep_names[] = { "<|file_sep|>", NULL };
	static const char *const eog_names[] = { "<|eot_id|>", "<|im_end|>",
	    "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
	    "<EOT>", NULL };
	struct tokenizer *t = ld->t;
	int32_t fim[6] = { TOK_NONE, TOK_NONE, TOK_NONE, TOK_NONE, TOK_NONE,
	    TOK_NONE };
	static const char *const fim_keys[6] = {
	    "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
	    "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
	    "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id" };
	static const char *const old_keys[3] = {
	    "tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
	    "tokenizer.ggml.middle_token_id" };
	static const char *const *const fim_names[6] = { pre_names, suf_names,
	    mid_names, pad_names, rep_names, sep_names };
	int32_t i, j, id;
	int rc;

	if ((rc = opt_id(ld, "tokenizer.ggml.eot_token_id", &t->eot, true)) ||
	    (rc = opt_id(ld, "tokenizer.ggml.eom_token_id", &t->eom, true)))
		return rc;
	for (j = 0; j < 6; j++) {
		if ((rc = opt_id(ld, fim_keys[j], &fim[j], false)) != 0)
			return rc;
		if (j < 3 && (rc = opt_id(ld, old_keys[j], &fim[j], false)))
			return rc;
	}
	if (t->eot == TOK_NONE &&
	    (t->eot = find_first(t, eot_names)) != TOK_NONE)
		force_control(t, t->eot);
	if (t->eom == TOK_NONE && (t->eom = find_any(t, eom_names)) != TOK_NONE)
		force_control(t, t->eom);
	for (j = 0; j < 6; j++)
		if (fim[j] == TOK_NONE &&
		    (fim[j] = find_any(t, fim_names[j])) != TOK_NONE)
			force_control(t, fim[j]);
	for (j = 3; j < 6; j++)
		if (fim[j] != TOK_NONE)
			t->tok[fim[j]].flags |= TOKF_EOG;
	for (j = 0; eog_names[j] != NULL; j++) {
		id = tok_lookup(t, eog_names[j], strlen(eog_names[j]));
		if (id != TOK_NONE) {
			t->tok[id].flags |= TOKF_EOG;
			force_control(t, id);
		}
	}
	if (t->eos != TOK_NONE)
		t->tok[t->eos].flags |= TOKF_EOG;
	if (t->eot != TOK_NONE)
		t->tok[t->eot].flags |= TOKF_EOG;
	if (t->eom != TOK_NONE)
		t->tok[t->eom].flags |= TOKF_EOG;
	for (i = 0; i < t->n_vocab; i++)
		t->n_eog += (t->tok[i].flags & TOKF_EOG) != 0;
	if ((t->eog = malloc((size_t)(t->n_eog > 0 ? t->n_eog : 1) *
	    sizeof(*t->eog))) == NULL)
		return cp_err_set(ld->e, -ENOMEM, "%s: out of memory", ld->path);
	for (i = 0, j = 0; i < t->n_vocab; i++)
		if (t->tok[i].flags & TOKF_EOG)
			t->eog[j++] = i;

	/* Tokens matched literally in text: longest first, then by id. */
	t->special = malloc((size_t)t->n_vocab * sizeof(*t->special));
	if (t->special == NULL)
		return cp_err_set(ld->e, -ENOMEM, "%s: out of memory", ld->path);
	for (i = 0; i < t->n_vocab; i++) {
		uint8_t ty = t->tok[i].type;

		if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED ||
		    ty == TOK_TYPE_UNKNOWN)
			t->special[t->n_special++] = i;
	}
	for (i = 1; i < t->n_special; i++) {
		int32_t v = t->special[i];

		for (j = i; j > 0 && t->tok[t->special[j - 1]].len <
		    t->tok[v].len; j--)
			t->special[j] = t->special[j - 1];
		t->special[j] = v;
	}
	return 0;
}

/* Per-model strip flags that llama.cpp sets by model or pre-tokenizer name. */
static void
load_strip_flags(struct load *ld, struct gguf_str pre)
{
	struct tokenizer *t = ld->t;
	struct gguf_str name = { 0, NULL };
	char low[64];
	size_t i, n;
	int32_t id;

	if (pre.ptr != NULL && (str_is(pre, "jina-v2-de") ||
	    str_is(pre, "jina-v2-es") || str_is(pre, "jina-v2-code"))) {
		if ((id = tok_lookup(t, "<mask>", 6)) != TOK_NONE)
			t->tok[id].flags |= TOKF_LSTRIP;
		return;
	}
	if (gguf_find_kv(ld->f, "general.name") == NULL ||
	    gguf_get_str(ld->f, "general.name", &name, NULL) != 0)
		return;
	n = name.len < sizeof(low) - 1 ? name.len : sizeof(low) - 1;
	for (i = 0; i < n; i++)
		low[i] = (char)tolower((unsigned char)name.ptr[i]);
	low[n] = '\0';
	if (strstr(low, "phi-3") == NULL && strstr(low, "phi3") == NULL)
		return;
	for (i = 0; i < (size_t)t->n_special; i++)
		t->tok[t->special[i]].flags |= TOKF_RSTRIP;
	if ((id = tok_lookup(t, "</s>", 4)) != TOK_NONE)
		t->tok[id].flags |= TOKF_RSTRIP;
	if ((id = tok_lookup(t, "<unk>", 5)) != TOK_NONE)
		t->tok[id].flags &= (uint8_t)~TOKF_RSTRIP;
	if ((id = tok_lookup(t, "<s>", 3)) != TOK_NONE)
		t->tok[id].flags &= (uint8_t)~TOKF_RSTRIP;
	if ((id = tok_lookup(t, "<|endoftext|>", 13)) != TOK_NONE)
		t->tok[id].flags &= (uint8_t)~TOKF_RSTRIP;
}

/* Byte fallback tables. */
static void
load_byte_tokens(struct tokenizer *t)
{
	static const char hex[] = "0123456789ABCDEF";
	char buf[6] = { '<', '0', 'x', 0, 0, '>' };
	int b;

	for (b = 0; b < 256; b++) {
		char c = (char)b;

		t->char_tok[b] = tok_lookup(t, &c, 1);
		buf[3] = hex[b >> 4];
		buf[4] = hex[b & 15];
		t->byte_tok[b] = tok_lookup(t, buf, 6);
		if (t->byte_tok[b] == TOK_NONE)
			t->byte_tok[b] = t->char_tok[b];
	}
}

int
tok_load(const struct gguf_file *f, struct tokenizer **out, struct cp_err *e)
{
	struct load ld = { f, NULL, e, gguf_path(f) };
	struct tokenizer *t;
	const struct gguf_array *toks;
	struct gguf_str model, pre = { 0, NULL };
	int rc, p;

	*out = NULL;
	if (gguf_find_kv(f, "tokenizer.ggml.model") == NULL)
		return cp_err_set(e, -EINVAL, "%s: no tokenizer "
		    "(tokenizer.ggml.model is missing)", ld.path);
	if ((rc = gguf_get_str(f, "tokenizer.ggml.model", &model, e)) != 0)
		return rc;
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return cp_err_set(e, -ENOMEM, "%s: out of memory", ld.path);
	ld.t = t;
	t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = TOK_NONE;
	if (str_is(model, "llama")) {
		t->kind = TOK_KIND_SPM;
		t->pre = TOK_PRE_DEFAULT;
		snprintf(t->pre_name, sizeof(t->pre_name), "default");
		t->add_bos = true;
		t->add_space_prefix = true;
	} else if (str_is(model, "gpt2")) {
		t->kind = TOK_KIND_BPE;
		if (gguf_find_kv(f, "tokenizer.ggml.pre") != NULL &&
		    (rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, e)) != 0)
			goto err;
		if (pre.ptr == NULL) {
			t->pre = TOK_PRE_DEFAULT;
			snprintf(t->pre_name, sizeof(t->pre_name), "default");
		} else if ((p = pretok_from_name(pre.ptr, pre.len)) < 0) {
			rc = cp_err_set(e, -EINVAL, "%s: pre-tokenizer "
			    "tokenizer.ggml.pre = '%.*s' is not supported",
			    ld.path, (int)(pre.len > 40 ? 40 : pre.len),
			    pre.ptr);
			goto err;
		} else {
			t->pre = (enum tok_pre)p;
			snprintf(t->pre_name, sizeof(t->pre_name), "%.*s",
			    (int)pre.len, pre.ptr);
		}
		if (t->pre == TOK_PRE_LLAMA3 && !str_is(pre, "dbrx") &&
		    !str_is(pre, "smaug-bpe") && !str_is(pre, "chatglm-bpe")) {
			t->ignore_merges = true;
			t->add_bos = true;
		}
	} else {
		const char *what = str_is(model, "bert") ? " (WordPiece)" :
		    str_is(model, "t5") ? " (Unigram)" :
		    str_is(model, "rwkv") ? " (RWKV)" : "";

		rc = cp_err_set(e, -EINVAL, "%s: tokenizer.ggml.model '%.*s'%s "
		    "is not supported (supported: llama = SentencePiece, gpt2 "
		    "= byte-level BPE)", ld.path,
		    (int)(model.len > 40 ? 40 : model.len), model.ptr, what);
		goto err;
	}

	if (gguf_find_kv(f, "tokenizer.ggml.tokens") == NULL) {
		rc = cp_err_set(e, -EINVAL, "%s: tokenizer.ggml.tokens is "
		    "missing", ld.path);
		goto err;
	}
	if ((rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING,
	    &toks, e)) != 0)
		goto err;
	if (toks->n == 0 || toks->n > TOK_MAX_VOCAB) {
		rc = cp_err_set(e, -EINVAL, "%s: tokenizer.ggml.tokens has %llu "
		    "tokens, expected 1..%d", ld.path,
		    (unsigned long long)toks->n, TOK_MAX_VOCAB);
		goto err;
	}
	t->n_vocab = (int32_t)toks->n;
	if ((t->tok = calloc((size_t)t->n_vocab, sizeof(*t->tok))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "%s: out of memory", ld.path);
		goto err;
	}
	if ((rc = load_tokens(&ld, toks)) != 0 ||
	    (rc = load_scores_types(&ld)) != 0)
		goto err;
	if (t->kind == TOK_KIND_BPE && (rc = load_merges(&ld)) != 0)
		goto err;

	/* Defaults, then the metadata (ids are checked against the vocabulary). */
	if (t->kind == TOK_KIND_SPM) {
		t->bos = 1;
		t->eos = 2;
		t->unk = 0;
	} else if (str_is(pre, "chatglm-bpe")) {
		t->eos = 11;	/* llama.cpp clears BOS for this one */
	} else {
		t->bos = t->eos = 11;
	}
	if (t->bos >= t->n_vocab)
		t->bos = TOK_NONE;
	if (t->eos >= t->n_vocab)
		t->eos = TOK_NONE;
	if (t->unk >= t->n_vocab)
		t->unk = TOK_NONE;
	if ((rc = opt_id(&ld, "tokenizer.ggml.bos_token_id", &t->bos, true)) ||
	    (rc = opt_id(&ld, "tokenizer.ggml.eos_token_id", &t->eos, true)) ||
	    (rc = opt_id(&ld, "tokenizer.ggml.unknown_token_id", &t->unk,
	    true)) ||
	    (rc = opt_id(&ld, "tokenizer.ggml.padding_token_id", &t->pad,
	    false)))
		goto err;
	if ((rc = opt_bool(&ld, "tokenizer.ggml.add_bos_token", &t->add_bos)) ||
	    (rc = opt_bool(&ld, "tokenizer.ggml.add_eos_token", &t->add_eos)) ||
	    (rc = opt_bool(&ld, "tokenizer.ggml.add_space_prefix",
	    &t->add_space_prefix)))
		goto err;
	if (t->add_bos && t->bos == TOK_NONE) {
		rc = cp_err_set(e, -EINVAL, "%s: tokenizer.ggml.add_bos_token is "
		    "set but the vocabulary has no BOS token", ld.path);
		goto err;
	}
	if (t->add_eos && t->eos == TOK_NONE) {
		rc = cp_err_set(e, -EINVAL, "%s: tokenizer.ggml.add_eos_token is "
		    "set but the vocabulary has no EOS token", ld.path);
		goto err;
	}
	if ((rc = load_specials(&ld)) != 0)
		goto err;
	load_strip_flags(&ld, pre);
	load_byte_tokens(t);
	if ((rc = tok_build_pieces(t, e, ld.path)) != 0)
		goto err;
	*out = t;
	return 0;
err:
	tok_free(t);
	return rc;
}

void
tok_free(struct tokenizer *t)
{
	if (t == NULL)
		return;
	free(t->eog);
	free(t->special);
	free(t->mmap);
	free(t->mtext);
	free(t->merges);
	free(t->map);
	free(t->pieces);
	free(t->text);
	free(t->tok);
	free(t);
}

/*
 * Encoding.  A fragment is either a token already decided (id >= 0) or a
 * stretch of the input text still to tokenize.
 */
struct frag {
	int32_t id;		/* TOK_NONE for text */
	size_t off, len;
};

struct frags {
	struct frag *v;
	size_t n, cap;
};

static int
frag_push(struct frags *a, int32_t id, size_t off, size_t len)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		struct frag *v = realloc(a->v, cap * sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n].id = id;
	a->v[a->n].off = off;
	a->v[a->n].len = len;
	a->n++;
	return 0;
}

static int
c_isspace(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Cut the text fragments of *cur at every occurrence of token id into *nxt. */
static int
split_at(const struct tokenizer *t, const char *text, int32_t id,
    const struct frags *cur, struct frags *nxt)
{
	const struct tok_entry *te = &t->tok[id];
	const char *needle = t->text + te->off;
	size_t i;

	nxt->n = 0;
	for (i = 0; i < cur->n; i++) {
		const struct frag *fr = &cur->v[i];
		size_t off = fr->off, end = fr->off + fr->len;

		if (fr->id != TOK_NONE) {
			if (frag_push(nxt, fr->id, 0, 0) != 0)
				return -ENOMEM;
			continue;
		}
		while (off < end) {
			const char *m = memmem(text + off, end - off, needle,
			    te->len);
			size_t at, left;

			if (m == NULL)
				break;
			at = (size_t)(m - text);
			left = at - off;
			if (te->flags & TOKF_LSTRIP)
				while (left > 0 && c_isspace(text[off + left - 1]))
					left--;
			if (left > 0 && frag_push(nxt, TOK_NONE, off, left) != 0)
				return -ENOMEM;
			if (frag_push(nxt, id, 0, 0) != 0)
				return -ENOMEM;
			off = at + te->len;
			if (te->flags & TOKF_RSTRIP)
				while (off < end && c_isspace(text[off]))
					off++;
		}
		if (off < end && frag_push(nxt, TOK_NONE, off, end - off) != 0)
			return -ENOMEM;
	}
	return 0;
}

/* Write s[0..n) with each space as U+2581, after a U+2581 if lead. */
static size_t
spm_escape(const char *s, size_t n, bool lead, char *out)
{
	size_t i, k = 0;

	if (lead) {
		memcpy(out, "\xe2\x96\x81", 3);
		k = 3;
	}
	for (i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(out + k, "\xe2\x96\x81", 3);
			k += 3;
		} else {
			out[k++] = s[i];
		}
	}
	return k;
}

int
tok_encode(const struct tokenizer *t, const char *text, size_t len,
    bool add_special, bool parse_special, int32_t *ids, int max_ids)
{
	struct frags a = { NULL, 0, 0 }, b = { NULL, 0, 0 }, sw;
	struct tok_ids out = { NULL, 0, 0 };
	char *esc = NULL;
	bool prev_special = true;
	size_t i;
	int32_t k;
	int rc = -ENOMEM;

	if (len > (size_t)INT32_MAX / 8)
		return -E2BIG;
	if (len > 0 && frag_push(&a, TOK_NONE, 0, len) != 0)
		goto out;
	for (k = 0; k < t->n_special && a.n > 0; k++) {
		const struct tok_entry *te = &t->tok[t->special[k]];

		if (!parse_special && te->type != TOK_TYPE_USER_DEFINED)
			continue;
		if (memmem(text, len, t->text + te->off, te->len) == NULL)
			continue;	/* cheap common case */
		if ((rc = split_at(t, text, t->special[k], &a, &b)) != 0)
			goto out;
		sw = a;
		a = b;
		b = sw;
	}
	if (add_special && t->add_bos && tok_ids_push(&out, t->bos) != 0)
		goto out;
	if (t->kind == TOK_KIND_SPM &&
	    (esc = malloc(3 * len + 3)) == NULL)
		goto out;
	for (i = 0; i < a.n; i++) {
		const struct frag *fr = &a.v[i];

		if (fr->id != TOK_NONE) {
			rc = tok_ids_push(&out, fr->id);
			prev_special = true;
		} else if (t->kind == TOK_KIND_SPM) {
			size_t n = spm_escape(text + fr->off, fr->len,
			    t->add_space_prefix && prev_special, esc);

			rc = spm_encode(t, esc, n, &out);
			prev_special = false;
		} else {
			rc = bpe_encode(t, text + fr->off, fr->len, &out);
		}
		if (rc != 0)
			goto out;
	}
	rc = -ENOMEM;
	if (add_special && t->add_eos && tok_ids_push(&out, t->eos) != 0)
		goto out;
	if (out.n > INT_MAX) {
		rc = -E2BIG;
		goto out;
	}
	if (ids != NULL && max_ids > 0 && out.n > 0)
		memcpy(ids, out.v, (out.n < (size_t)max_ids ? out.n :
		    (size_t)max_ids) * sizeof(*ids));
	rc = (int)out.n;
out:
	free(esc);
	free(out.v);
	free(b.v);
	free(a.v);
	return rc;
}

int32_t
tok_n_vocab(const struct tokenizer *t)
{
	return t->n_vocab;
}

enum tok_kind
tok_kind(const struct tokenizer *t)
{
	return t->kind;
}

const char *
tok_model_name(const struct tokenizer *t)
{
	return t->kind == TOK_KIND_SPM ? "llama" : "gpt2";
}

const char *
tok_pre_name(const struct tokenizer *t)
{
	return t->pre_name;
}

int32_t tok_bos(const struct tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct tokenizer *t) { return t->eos; }
int32_t tok_eot(const struct tokenizer *t) { return t->eot; }
int32_t tok_unk(const struct tokenizer *t) { return t->unk; }
int32_t tok_pad(const struct tokenizer *t) { return t->pad; }
bool tok_add_bos(const struct tokenizer *t) { return t->add_bos; }
bool tok_add_eos(const struct tokenizer *t) { return t->add_eos; }
bool tok_add_space_prefix(const struct tokenizer *t) { return t->add_space_prefix; }

bool
tok_is_eog(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && (t->tok[id].flags & TOKF_EOG);
}

const int32_t *
tok_eog_ids(const struct tokenizer *t, int *n)
{
	*n = t->n_eog;
	return t->eog;
}

int
tok_type(const struct tokenizer *t, int32_t id)
{
	if (id < 0 || id >= t->n_vocab)
		return -EINVAL;
	return t->tok[id].type;
}

const char *
tok_text(const struct tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_vocab)
		return NULL;
	*len = t->tok[id].len;
	return t->text + t->tok[id].off;
}
