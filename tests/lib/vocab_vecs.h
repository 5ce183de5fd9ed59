/*
 * vocab_vecs.h - the tokenizer test vectors of ../shared/models/vocab:
 * llama.cpp's test strings (X.gguf.inp) and the ids it gave them
 * (X.gguf.out, without BOS, special tokens not parsed).  The functions
 * assert with Check: call them from a test.
 */
#ifndef CP_TEST_VOCAB_VECS_H
#define CP_TEST_VOCAB_VECS_H

#include <stddef.h>
#include <stdint.h>

/* One test string and the ids llama.cpp gave it. */
struct vocab_vec {
	const char *s;
	size_t len;
	int32_t ids[256];
	int n;
};

struct vocab_vecs {
	char *inp, *out;
	struct vocab_vec v[64];
	int n;
};

/*
 * Read X.gguf.inp (strings separated by "\n__ggml_vocab_test__\n", as
 * llama.cpp's test-tokenizer-0 splits them) and X.gguf.out (one line of
 * ids per string) for the fixture rel ("vocab/X.gguf").  Release with
 * vv_free().
 */
void vv_read(const char *rel, struct vocab_vecs *vs);

/* Release what vv_read() read. */
void vv_free(struct vocab_vecs *vs);

#endif
