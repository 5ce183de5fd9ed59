/*
 * tok_spm.c - SentencePiece (tokenizer.ggml.model "llama") encoding.
 *
 * The text (spaces already written as U+2581) starts as one symbol per UTF-8
 * character (a stray byte is a character of its own; a sequence cut by the
 * end of the text is shortened).  Every adjacent pair whose concatenation is
 * a token is a candidate; the candidate with the highest token score wins,
 * ties going to the leftmost pair, and the two symbols merge.  New pairs
 * with the merged symbol's neighbours become candidates, stale ones are
 * dropped when popped.  At the end each symbol is a token, or a single
 * character that is not: that one is written as its bytes' byte tokens.
 */
#include "tok_internal.h"

#include <errno.h>
#include <stdlib.h>

#include "unicode.h"

struct spm_sym {
	uint32_t off, len;	/* bytes of the text; len 0 once merged away */
	int32_t prev, next;	/* neighbours, -1 at the ends */
};

struct spm_pair {
	float score;
	int32_t left, right;
	uint32_t len;		/* combined length when queued; stale if it changed */
};

/* Heap order: higher score first, then the leftmost pair. */
static int
pair_before(const struct spm_pair *a, const struct spm_pair *b)
{
	if (a->score != b->score)
		return a->score > b->score;
	return a->left < b->left;
}

TOK_HEAP(struct spm_pair, pair_before)

static void
try_pair(const struct tokenizer *t, const char *s, const struct spm_sym *sym,
    int32_t l, int32_t r, struct spm_pair *h, size_t *nh)
{
	struct spm_pair p;
	int32_t id;

	if (l < 0 || r < 0)
		return;
	p.len = sym[l].len + sym[r].len;
	id = tok_lookup(t, s + sym[l].off, p.len);
	if (id == TOK_NONE)
		return;
	p.score = t->tok[id].score;
	p.left = l;
	p.right = r;
	heap_push(h, nh, p);
}

static int
emit_symbol(const struct tokenizer *t, const char *s, const struct spm_sym *y,
    struct tok_ids *out)
{
	int32_t id = tok_lookup(t, s + y->off, y->len);
	uint32_t i;

	if (id != TOK_NONE)
		return tok_ids_push(out, id);
	/* Byte fallback; a vocabulary without the byte's token gets <unk>. */
	for (i = 0; i < y->len; i++) {
		id = t->byte_tok[(uint8_t)s[y->off + i]];
		if (id == TOK_NONE)
			id = t->unk;
		if (id != TOK_NONE && tok_ids_push(out, id) != 0)
			return -ENOMEM;
	}
	return 0;
}

int
spm_encode(const struct tokenizer *t, const char *s, size_t n,
    struct tok_ids *out)
{
	struct spm_sym *sym = NULL;
	struct spm_pair *heap = NULL;
	size_t n_sym = 0, nh = 0, off = 0;
	int32_t i;
	int rc = -ENOMEM;

	if (n == 0)
		return 0;
	if (n > INT32_MAX / 4)
		return -E2BIG;
	sym = malloc(n * sizeof(*sym));
	/* n_sym - 1 initial pairs plus at most 2 per merge. */
	heap = malloc(3 * n * sizeof(*heap));
	if (sym == NULL || heap == NULL)
		goto out;
	while (off < n) {
		size_t len = uni_seq_len((uint8_t)s[off]);

		if (len > n - off)
			len = n - off;
		sym[n_sym].off = (uint32_t)off;
		sym[n_sym].len = (uint32_t)len;
		sym[n_sym].prev = (int32_t)n_sym - 1;
		off += len;
		sym[n_sym].next = off == n ? -1 : (int32_t)n_sym + 1;
		n_sym++;
	}
	for (i = 1; i < (int32_t)n_sym; i++)
		try_pair(t, s, sym, i - 1, i, heap, &nh);
	while (nh > 0) {
		struct spm_pair p = heap_pop(heap, &nh);
		struct spm_sym *l = &sym[p.left], *r = &sym[p.right];

		if (l->len == 0 || r->len == 0 || l->len + r->len != p.len)
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			sym[r->next].prev = p.left;
		try_pair(t, s, sym, l->prev, p.left, heap, &nh);
		try_pair(t, s, sym, p.left, l->next, heap, &nh);
	}
	for (i = 0; i != -1; i = sym[i].next)
		if ((rc = emit_symbol(t, s, &sym[i], out)) != 0)
			goto out;
	rc = 0;
out:
	free(heap);
	free(sym);
	return rc;
}
