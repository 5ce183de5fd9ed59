/*
 * tok_bpe.c - byte-level BPE (tokenizer.ggml.model "gpt2") encoding.
 *
 * The text is decoded into code points (a malformed byte becomes U+FFFD),
 * cut into words by the pre-tokenizer, and each word is re-encoded as UTF-8
 * with every byte replaced by its printable stand-in (uni_byte_to_cp), the
 * alphabet the vocabulary and the merges are written in.  Within a word the
 * symbols start as one stand-in per byte; the adjacent pair with the lowest
 * merge rank merges (ties: leftmost), until no pair has a rank.  Each final
 * symbol is looked up as a token; one that is not a token is written as the
 * tokens of its single bytes, skipping bytes that have none.
 */
#include "tok_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

struct bpe_sym {
	uint32_t off, len;	/* bytes of the stand-in word; len 0 once merged away */
	int32_t prev, next;
};

struct bpe_pair {
	int32_t rank;
	int32_t left, right;
	uint32_t llen, rlen;	/* lengths when queued; stale if either changed */
};

/* Scratch for one encode call, sized for the whole text. */
struct bpe_work {
	uint32_t *cp;
	uint16_t *fl;
	size_t *lens, *tmp;
	char *word;		/* one word in stand-ins: at most 6 bytes per input byte */
	struct bpe_sym *sym;	/* one per byte of the re-encoded word */
	struct bpe_pair *heap;
};

static int
pair_before(const struct bpe_pair *a, const struct bpe_pair *b)
{
	if (a->rank != b->rank)
		return a->rank < b->rank;
	return a->left < b->left;
}

TOK_HEAP(struct bpe_pair, pair_before)

static void
try_pair(const struct tokenizer *t, const char *w, const struct bpe_sym *sym,
    int32_t l, int32_t r, struct bpe_pair *h, size_t *nh)
{
	struct bpe_pair p;

	if (l < 0 || r < 0)
		return;
	p.rank = tok_merge_rank(t, w + sym[l].off, sym[l].len,
	    w + sym[r].off, sym[r].len);
	if (p.rank < 0)
		return;
	p.left = l;
	p.right = r;
	p.llen = sym[l].len;
	p.rlen = sym[r].len;
	heap_push(h, nh, p);
}

/* Write the ids of a final symbol w[0..n). */
static int
emit_symbol(const struct tokenizer *t, const char *w, size_t n,
    struct tok_ids *out)
{
	int32_t id = tok_lookup(t, w, n);
	size_t i;

	if (id != TOK_NONE)
		return tok_ids_push(out, id);
	for (i = 0; i < n; i++) {
		id = t->char_tok[(uint8_t)w[i]];
		if (id != TOK_NONE && tok_ids_push(out, id) != 0)
			return -ENOMEM;
	}
	return 0;
}

/* Merge and emit one word of code points cp[0..n). */
static int
bpe_word(const struct tokenizer *t, struct bpe_work *wk, const uint32_t *cp,
    size_t n, struct tok_ids *out)
{
	size_t i, j, wlen = 0, n_sym = 0, nh = 0;
	int32_t k;
	int rc;

	for (i = 0; i < n; i++) {
		uint8_t u[4], v[4];
		size_t nu = uni_encode(cp[i], u);

		for (j = 0; j < nu; j++) {
			size_t nv = uni_encode(uni_byte_to_cp(u[j]), v);

			wk->sym[n_sym].off = (uint32_t)wlen;
			wk->sym[n_sym].len = (uint32_t)nv;
			wk->sym[n_sym].prev = (int32_t)n_sym - 1;
			wk->sym[n_sym].next = (int32_t)n_sym + 1;
			n_sym++;
			memcpy(wk->word + wlen, v, nv);
			wlen += nv;
		}
	}
	if (n_sym == 0)
		return 0;
	wk->sym[n_sym - 1].next = -1;
	if (t->ignore_merges) {
		int32_t id = tok_lookup(t, wk->word, wlen);

		if (id != TOK_NONE)
			return tok_ids_push(out, id);
	}
	for (k = 1; k < (int32_t)n_sym; k++)
		try_pair(t, wk->word, wk->sym, k - 1, k, wk->heap, &nh);
	while (nh > 0) {
		struct bpe_pair p = heap_pop(wk->heap, &nh);
		struct bpe_sym *l = &wk->sym[p.left], *r = &wk->sym[p.right];

		if (l->len != p.llen || r->len != p.rlen || l->next != p.right)
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			wk->sym[r->next].prev = p.left;
		try_pair(t, wk->word, wk->sym, l->prev, p.left, wk->heap, &nh);
		try_pair(t, wk->word, wk->sym, p.left, l->next, wk->heap, &nh);
	}
	for (k = 0; k != -1; k = wk->sym[k].next) {
		rc = emit_symbol(t, wk->word + wk->sym[k].off, wk->sym[k].len,
		    out);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int
bpe_encode(const struct tokenizer *t, const char *s, size_t n,
    struct tok_ids *out)
{
	struct bpe_work wk;
	size_t n_cp = 0, off = 0, n_words, i, start;
	int rc = -ENOMEM;

	if (n == 0)
		return 0;
	if (n > INT32_MAX / 8)
		return -E2BIG;
	memset(&wk, 0, sizeof(wk));
	wk.cp = malloc(n * sizeof(*wk.cp));
	wk.fl = malloc(n * sizeof(*wk.fl));
	wk.lens = malloc(n * sizeof(*wk.lens));
	wk.tmp = malloc(n * sizeof(*wk.tmp));
	/* A byte can become U+FFFD (3 bytes), each byte a 2-byte stand-in. */
	wk.word = malloc(6 * n);
	wk.sym = malloc(3 * n * sizeof(*wk.sym));
	wk.heap = malloc(9 * n * sizeof(*wk.heap));
	if (!wk.cp || !wk.fl || !wk.lens || !wk.tmp || !wk.word || !wk.sym ||
	    !wk.heap)
		goto out;
	while (off < n) {
		size_t adv;

		wk.cp[n_cp] = uni_decode((const uint8_t *)s + off, n - off,
		    &adv);
		wk.fl[n_cp] = uni_flags(wk.cp[n_cp]);
		n_cp++;
		off += adv;
	}
	n_words = pretok_split(t->pre, wk.cp, wk.fl, n_cp, wk.lens, wk.tmp);
	for (i = 0, start = 0; i < n_words; i++) {
		rc = bpe_word(t, &wk, wk.cp + start, wk.lens[i], out);
		if (rc != 0)
			goto out;
		start += wk.lens[i];
	}
	rc = 0;
out:
	free(wk.heap);
	free(wk.sym);
	free(wk.word);
	free(wk.tmp);
	free(wk.lens);
	free(wk.fl);
	free(wk.cp);
	return rc;
}
