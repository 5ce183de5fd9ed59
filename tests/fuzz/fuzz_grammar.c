/*
 * fuzz_grammar.c - libFuzzer harness for the GBNF parser and the matcher:
 * the input is grammar text, then (after the first NUL byte, if any) text
 * to feed.  A grammar that compiles is run over a vocabulary of the 256
 * single bytes: the mask of each state must agree with gmatch_allows(),
 * and feeding stops at the first byte refused.  Every failure must leave a
 * message; nothing may crash, leak or run long (the limits of grammar.h).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gvocab *
bytes_vocab(void)
{
	static char ch[256];
	const char *pieces[256];
	size_t lens[256];
	int32_t eog = 0;
	struct gvocab *v = NULL;
	int i;

	for (i = 0; i < 256; i++) {
		ch[i] = (char)i;
		pieces[i] = &ch[i];
		lens[i] = i == 0 ? 0 : 1;
	}
	if (gvocab_new_pieces(pieces, lens, 256, &eog, 1, &v, NULL) < 0)
		abort();
	return v;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct gvocab *v;
	const uint8_t *nul = memchr(data, 0, size), *bits;
	size_t glen = nul != NULL ? (size_t)(nul - data) : size, i;
	struct cp_err e = { 0 };
	struct grammar *g;
	struct gmatch *m;
	int id;

	if (v == NULL)
		v = bytes_vocab();
	if (grammar_from_gbnf((const char *)data, glen, &g, &e) < 0) {
		if (e.msg[0] == '\0')
			abort();	/* every error names what was wrong */
		return 0;
	}
	if ((m = gmatch_new(g, v, &e)) == NULL) {
		if (e.msg[0] == '\0')
			abort();
		grammar_free(g);
		return 0;
	}
	for (i = glen + 1; i <= size; i++) {
		if (gmatch_mask(m, &bits) < 0)
			break;
		for (id = 0; id < 256; id++)
			if ((bits[id >> 3] >> (id & 7) & 1) !=
			    gmatch_allows(m, id))
				abort();
		if (i == size || gmatch_accept_token(m, data[i]) < 0)
			break;
	}
	gmatch_free(m);
	grammar_free(g);
	return 0;
}
