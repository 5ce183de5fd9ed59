/*
 * tokenizer.h - text <-> token ids from a GGUF file's tokenizer.* metadata.
 *
 * Two vocabulary kinds are supported, with the behaviour of llama.cpp's:
 * "llama" (SentencePiece: best-score bigram merges over UTF-8 characters,
 * spaces written as U+2581, an optional leading space, byte fallback to
 * <0xNN> tokens) and "gpt2" (byte-level BPE: the text is split by the
 * pre-tokenizer that tokenizer.ggml.pre names, each byte is written as a
 * printable stand-in, then merges apply by rank).  Control, unknown and
 * user-defined tokens are matched literally in the text before that:
 * user-defined ones always, control and unknown ones only when the caller
 * asks for it (parse_special).
 *
 * After tok_load() a tokenizer is immutable: any number of threads may
 * encode and decode with it at once.  Decoding never allocates.
 */
#ifndef CP_TOKENIZER_H
#define CP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct gguf_file;
struct tokenizer;

/* tokenizer.ggml.token_type values. */
enum tok_type {
	TOK_TYPE_UNDEFINED = 0,
	TOK_TYPE_NORMAL = 1,
	TOK_TYPE_UNKNOWN = 2,
	TOK_TYPE_CONTROL = 3,
	TOK_TYPE_USER_DEFINED = 4,
	TOK_TYPE_UNUSED = 5,
	TOK_TYPE_BYTE = 6,
};

/* Vocabulary kinds (tokenizer.ggml.model). */
enum tok_kind {
	TOK_KIND_SPM,		/* "llama" */
	TOK_KIND_BPE,		/* "gpt2" */
};

#define TOK_NONE (-1)		/* "no such token" for the special ids */

/*
 * Build a tokenizer from f's tokenizer.* keys.  Every array, id and flag is
 * checked; an unsupported model or pre-tokenizer, a missing or malformed
 * key, or an id out of range gives -EINVAL (-ENOMEM on allocation failure)
 * with e naming the key.  On success *out owns copies of everything it needs:
 * f may be closed afterwards.  Release with tok_free().
 */
int tok_load(const struct gguf_file *f, struct tokenizer **out,
    struct cp_err *e);

/* Free t; accepts NULL. */
void tok_free(struct tokenizer *t);

/*
 * Tokenize text[0..len) (any bytes; NUL is an ordinary byte).  add_special
 * adds BOS and/or EOS as the metadata asks; parse_special lets control and
 * unknown tokens written in the text become those tokens.  Writes at most
 * max_ids ids and returns how many the whole text needs (like snprintf: a
 * result above max_ids means ids was too small; ids may be NULL when
 * max_ids is 0), or -ENOMEM, or -E2BIG when the count would not fit an int.
 */
int tok_encode(const struct tokenizer *t, const char *text, size_t len,
    bool add_special, bool parse_special, int32_t *ids, int max_ids);

/* Number of tokens in the vocabulary. */
int32_t tok_n_vocab(const struct tokenizer *t);
/* Kind of vocabulary. */
enum tok_kind tok_kind(const struct tokenizer *t);
/* tokenizer.ggml.model and the pre-tokenizer in use ("default" for SPM). */
const char *tok_model_name(const struct tokenizer *t);
const char *tok_pre_name(const struct tokenizer *t);

/* Special ids, or TOK_NONE. */
int32_t tok_bos(const struct tokenizer *t);
int32_t tok_eos(const struct tokenizer *t);
int32_t tok_eot(const struct tokenizer *t);
int32_t tok_unk(const struct tokenizer *t);
int32_t tok_pad(const struct tokenizer *t);

/* Whether tok_encode(add_special = true) adds BOS / EOS. */
bool tok_add_bos(const struct tokenizer *t);
bool tok_add_eos(const struct tokenizer *t);
/* Whether SPM text gets a leading space (tokenizer.ggml.add_space_prefix). */
bool tok_add_space_prefix(const struct tokenizer *t);

/* Whether id ends generation (EOS, EOT, EOM, <|im_end|>-like); false if out of range. */
bool tok_is_eog(const struct tokenizer *t, int32_t id);
/*
 * Every id that ends generation, ascending, *n of them (built at load, for
 * sampler_ws_set_eog()); borrowed, valid until tok_free().
 */
const int32_t *tok_eog_ids(const struct tokenizer *t, int *n);
/* Token type of id (after the fix-ups llama.cpp applies), or -EINVAL. */
int tok_type(const struct tokenizer *t, int32_t id);

/*
 * The vocabulary text of id (as stored: U+2581 for spaces in SPM, stand-in
 * characters in BPE), *len its length; NULL if id is out of range.  Borrowed:
 * valid until tok_free().  Not NUL-terminated.
 */
const char *tok_text(const struct tokenizer *t, int32_t id, size_t *len);

/*
 * The bytes id renders to: a normal token's text with U+2581 as space (SPM)
 * or its stand-ins turned back into bytes (BPE); a byte token's byte; a
 * user-defined token's text; a control or unknown token's text when special
 * is true, nothing otherwise; unused and undefined tokens render nothing.
 * *len gets the length.  NULL if id is out of range.  Borrowed like
 * tok_text().  Pieces may end inside a UTF-8 character.
 */
const char *tok_piece(const struct tokenizer *t, int32_t id, bool special,
    size_t *len);

/* Longest piece of any token, in bytes. */
size_t tok_max_piece(const struct tokenizer *t);

/* Detokenizer flags. */
#define DETOK_SPECIAL	 0x1u	/* render control and unknown tokens' text */
#define DETOK_STRIP_SPACE 0x2u	/* drop one leading space of the first token's
				 * piece when the vocabulary adds a space prefix
				 * (llama_detokenize does this: decode(encode(s))
				 * gives s back without BOS) */

/*
 * Streaming detokenizer: fed one id at a time, it appends the token's bytes
 * to the caller's buffer, holding back an incomplete UTF-8 sequence until
 * it completes; ill-formed bytes become U+FFFD (one per maximal ill-formed
 * subpart, as Python's "replace" does).  Output is always valid UTF-8.
 * Caller-allocated; holds no resources.
 */
struct detok {
	const struct tokenizer *t;
	unsigned flags;
	bool started;		/* a token has been fed */
	uint8_t n_pend;		/* bytes held back in pend */
	uint8_t n_need;		/* bytes the held sequence still needs */
	uint8_t lo, hi;		/* allowed range of the next continuation byte */
	uint8_t pend[4];
};

/* Start a stream over t with DETOK_* flags. */
void detok_init(struct detok *d, const struct tokenizer *t, unsigned flags);

/* Bytes that one detok_feed() or detok_flush() may write at most. */
size_t detok_max_out(const struct tokenizer *t);

/*
 * Append the text of id to out[0..cap).  Returns the bytes written (maybe
 * 0), -EINVAL if id is out of range (nothing written, the stream goes on),
 * or -ENOSPC if cap < detok_max_out(t).
 */
int detok_feed(struct detok *d, int32_t id, char *out, size_t cap);

/* End the stream: a held incomplete sequence becomes U+FFFD.  Returns bytes written or -ENOSPC. */
int detok_flush(struct detok *d, char *out, size_t cap);

/*
 * Decode ids[0..n) in one go with DETOK_* flags, flushed.  Writes at most cap
 * bytes (no NUL) and returns the length of the whole text (like snprintf),
 * or -EINVAL for an id out of range.  The text is the concatenated pieces
 * (what a stream gives); spaces before punctuation are not "cleaned up".
 */
long tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
    unsigned flags, char *out, size_t cap);

#endif
