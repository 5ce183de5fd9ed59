/*
 * grammar_vocab.c - a tokenizer's pieces sorted by bytes for the matcher's
 * token masks (struct gvocab in grammar_int.h).
 *
 * Sorting the pieces lays the byte trie of the vocabulary out in
 * depth-first order: tokens sharing a prefix are neighbours, and lcp[k]
 * says how much of the walk for sorted[k - 1] sorted[k] can keep.  This
 * costs 8 bytes per token beyond the pieces, and no pointers.
 */
#include "grammar.h"
#include "grammar_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

/* qsort_r context: the vocabulary being sorted. */
static int
piece_cmp(const void *a, const void *b, void *arg)
{
	const struct gvocab *v = arg;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
	int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y],
	    lx < ly ? lx : ly);

	if (c != 0)
		return c;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return x < y ? -1 : x > y;
}

void
gvocab_free(struct gvocab *v)
{
	if (v == NULL)
		return;
	free(v->bytes);
	free(v->off);
	free(v->sorted);
	free(v->lcp);
	free(v->len);
	free(v->tails);
	free(v->tail_off);
	free(v->eog_bits);
	free(v->eog);
	free(v);
}

int
gvocab_n_vocab(const struct gvocab *v)
{
	return v->n_vocab;
}

int
gvocab_new_pieces(const char *const *pieces, const size_t *lens, int n,
    const int32_t *eog, int n_eog, struct gvocab **out, struct cp_err *e)
{
	struct gvocab *v;
	size_t total = 0, nt;
	uint32_t l, lx, ly;
	int32_t i, k, x, y;

	*out = NULL;
	if (n < 1 || n > (1 << 24) || n_eog < 0)
		return cp_err_set(e, -EINVAL, "grammar vocabulary: %d tokens, "
		    "expected 1..%d", n, 1 << 24);
	for (i = 0; i < n; i++) {
		total += lens[i];
		if (total > UINT32_MAX / 2)
			return cp_err_set(e, -E2BIG, "grammar vocabulary: "
			    "pieces too long");
	}
	for (i = 0; i < n_eog; i++)
		if (eog[i] < 0 || eog[i] >= n)
			return cp_err_set(e, -EINVAL, "grammar vocabulary: "
			    "end-of-generation id %d out of range", eog[i]);
	if ((v = calloc(1, sizeof(*v))) == NULL)
		goto nomem;
	v->n_vocab = n;
	v->bytes = malloc(total + 1);
	v->off = calloc((size_t)n + 1, sizeof(*v->off));
	v->sorted = calloc((size_t)n, sizeof(*v->sorted));
	v->lcp = calloc((size_t)n, sizeof(*v->lcp));
	v->eog_bits = calloc(((size_t)n + 7) / 8, 1);
	v->eog = calloc((size_t)n_eog + 1, sizeof(*v->eog));
	if (!v->bytes || !v->off || !v->sorted || !v->lcp || !v->eog_bits ||
	    !v->eog)
		goto nomem;
	total = 0;
	for (i = 0; i < n; i++) {
		v->off[i] = (uint32_t)total;
		if (lens[i] > 0)
			memcpy(v->bytes + total, pieces[i], lens[i]);
		total += lens[i];
		if (lens[i] > v->max_len)
			v->max_len = (uint32_t)lens[i];
	}
	v->off[n] = (uint32_t)total;
	for (i = 0; i < n_eog; i++) {
		v->eog_bits[eog[i] >> 3] |= (uint8_t)(1u << (eog[i] & 7));
		v->eog[i] = eog[i];
	}
	v->n_eog = n_eog;
	for (i = 0; i < n; i++)
		if (lens[i] > 0 && !(v->eog_bits[i >> 3] >> (i & 7) & 1))
			v->sorted[v->n_sorted++] = i;
	qsort_r(v->sorted, (size_t)v->n_sorted, sizeof(*v->sorted),
	    piece_cmp, v);
	for (k = 1; k < v->n_sorted; k++) {
		x = v->sorted[k - 1];
		y = v->sorted[k];
		lx = v->off[x + 1] - v->off[x];
		ly = v->off[y + 1] - v->off[y];
		for (l = 0; l < lx && l < ly &&
		    v->bytes[v->off[x] + l] == v->bytes[v->off[y] + l]; l++)
			;
		v->lcp[k] = l;
	}
	v->len = calloc((size_t)v->n_sorted + 1, sizeof(*v->len));
	v->tail_off = calloc((size_t)v->n_sorted + 1, sizeof(*v->tail_off));
	v->tails = malloc(total + 1);
	if (v->len == NULL || v->tail_off == NULL || v->tails == NULL)
		goto nomem;
	for (k = 0, nt = 0; k < v->n_sorted; k++) {
		y = v->sorted[k];
		ly = v->off[y + 1] - v->off[y];
		v->len[k] = ly;
		v->tail_off[k] = (uint32_t)nt;
		memcpy(v->tails + nt, v->bytes + v->off[y] + v->lcp[k],
		    ly - v->lcp[k]);
		nt += ly - v->lcp[k];
	}
	*out = v;
	return 0;
nomem:
	gvocab_free(v);
	return cp_err_set(e, -ENOMEM, "grammar vocabulary: out of memory");
}

int
gvocab_new(const struct tokenizer *t, struct gvocab **out, struct cp_err *e)
{
	const char **pieces;
	size_t *lens;
	const int32_t *eog;
	int32_t i, n = tok_n_vocab(t);
	int n_eog, rc;

	pieces = calloc((size_t)n, sizeof(*pieces));
	lens = calloc((size_t)n, sizeof(*lens));
	if (pieces == NULL || lens == NULL) {
		rc = cp_err_set(e, -ENOMEM, "grammar vocabulary: out of "
		    "memory");
		goto out;
	}
	for (i = 0; i < n; i++)
		if ((pieces[i] = tok_piece(t, i, false, &lens[i])) == NULL)
			lens[i] = 0;
	eog = tok_eog_ids(t, &n_eog);
	rc = gvocab_new_pieces(pieces, lens, n, eog, n_eog, out, e);
out:
	free(lens);
	free(pieces);
	return rc;
}
