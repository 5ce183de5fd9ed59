/*
 * tok_internal.h - the tokenizer's private structures, shared by
 * tokenizer.c (load, specials, encode driver), tok_spm.c, tok_bpe.c,
 * tok_pretok.c and tok_detok.c.  Not part of the engine's API.
 */
#ifndef CP_TOK_INTERNAL_H
#define CP_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* Pre-tokenizers: which split rules a BPE vocabulary uses (tokenizer.ggml.pre). */
enum tok_pre {
	TOK_PRE_DEFAULT,	/* "default" or missing */
	TOK_PRE_GPT2,		/* gpt-2, mpt, olmo, jais, phi-2, jina-*, roberta-bpe */
	TOK_PRE_LLAMA3,		/* llama3, llama-bpe, falcon3, dbrx, smaug-bpe, chatglm-bpe */
	TOK_PRE_QWEN2,		/* qwen2, deepseek-r1-qwen, stablelm2, megrez */
	TOK_PRE_DEEPSEEK_LLM,
	TOK_PRE_DEEPSEEK_CODER,
	TOK_PRE_FALCON,
	TOK_PRE_STARCODER,	/* starcoder, refact, command-r, smollm, codeshell, exaone, minerva-7b */
	TOK_PRE_BLOOM,		/* bloom, poro-chat, gpt3-finnish */
	TOK_PRE_VIKING,
};

/* tok_entry.flags */
#define TOKF_LSTRIP	0x1	/* eat white space before it when matched in text */
#define TOKF_RSTRIP	0x2	/* eat white space after it when matched in text */
#define TOKF_EOG	0x4	/* ends generation */

struct tok_entry {
	uint32_t off, len;		/* text in tokenizer.text */
	uint32_t piece_off, piece_len;	/* rendering in tokenizer.pieces */
	float score;			/* SPM merge priority (higher first) */
	uint8_t type;			/* enum tok_type */
	uint8_t flags;			/* TOKF_* */
};

/* A BPE merge: left then right text, adjacent in tokenizer.mtext; rank = index. */
struct tok_merge {
	uint32_t off;
	uint32_t llen, rlen;
};

struct tokenizer {
	enum tok_kind kind;
	enum tok_pre pre;
	char pre_name[24];

	int32_t n_vocab;
	struct tok_entry *tok;		/* [n_vocab] */
	char *text;			/* all token texts */
	char *pieces;			/* all token renderings */
	uint32_t *map;			/* open addressing text -> id + 1; 0 empty */
	uint32_t map_mask;

	struct tok_merge *merges;	/* [n_merges] */
	uint32_t n_merges;
	char *mtext;
	uint32_t *mmap;			/* open addressing pair -> rank + 1 */
	uint32_t mmap_mask;

	int32_t byte_tok[256];		/* SPM byte fallback: <0xNN>, else the 1-byte text */
	int32_t char_tok[256];		/* token whose text is exactly that one byte */

	int32_t *special;		/* control, unknown, user-defined: longest text first */
	int32_t n_special;
	int32_t *eog;			/* the ids flagged TOKF_EOG, ascending */
	int n_eog;

	int32_t bos, eos, eot, eom, unk, pad;
	bool add_bos, add_eos, add_space_prefix, ignore_merges;
	size_t max_piece;
};

/* A growing id array owned by one encode call. */
struct tok_ids {
	int32_t *v;
	size_t n, cap;
};

/* Append id; 0 or -ENOMEM. */
int tok_ids_push(struct tok_ids *a, int32_t id);

/* Id of the token whose text is s[0..n), or TOK_NONE. */
int32_t tok_lookup(const struct tokenizer *t, const char *s, size_t n);

/* Rank of the merge (l, r), or -1. */
int32_t tok_merge_rank(const struct tokenizer *t, const char *l, size_t ln,
    const char *r, size_t rn);

/* 64-bit FNV-1a of s[0..n), continuing from h (start with TOK_HASH_INIT). */
#define TOK_HASH_INIT 0xcbf29ce484222325ull
uint64_t tok_hash(uint64_t h, const char *s, size_t n);

/* SentencePiece over s[0..n) (spaces already written as U+2581); 0 or -ENOMEM. */
int spm_encode(const struct tokenizer *t, const char *s, size_t n,
    struct tok_ids *out);

/* Byte-level BPE over raw text s[0..n); 0 or -ENOMEM. */
int bpe_encode(const struct tokenizer *t, const char *s, size_t n,
    struct tok_ids *out);

/*
 * Build every token's rendering (tokenizer.pieces, piece_off/piece_len,
 * max_piece) once the types are final.  0, or -ENOMEM / -EINVAL (a byte
 * token whose text is not <0xNN>) with e set.
 */
int tok_build_pieces(struct tokenizer *t, struct cp_err *e, const char *path);

/* The pre-tokenizer named name[0..len) (BPE), or -1 when unknown. */
int pretok_from_name(const char *name, size_t len);

/*
 * Split the code points cp[0..n) (with their uni_flags() in fl) the way
 * pre's regex list does: each rule in turn cuts every current piece into its
 * matches and the gaps between them.  lens and tmp each hold n entries;
 * lens gets the piece lengths in code points.  Returns the piece count.
 */
size_t pretok_split(enum tok_pre pre, const uint32_t *cp, const uint16_t *fl,
    size_t n, size_t *lens, size_t *tmp);

/*
 * TOK_HEAP(T, BEFORE) defines static heap_push() and heap_pop() over a
 * binary heap of T in h[0..*n) (the caller sizes h), for the merge queues
 * of tok_bpe.c and tok_spm.c.  BEFORE(a, b) (pointers to T) is true when a
 * leaves the heap before b; heap_pop() takes the first, *n > 0.
 */
#define TOK_HEAP(T, BEFORE)						\
static void								\
heap_push(T *h, size_t *n, T p)						\
{									\
	size_t i = (*n)++;						\
									\
	while (i > 0) {							\
		size_t up = (i - 1) / 2;				\
									\
		if (!BEFORE(&p, &h[up]))				\
			break;						\
		h[i] = h[up];						\
		i = up;							\
	}								\
	h[i] = p;							\
}									\
									\
static T								\
heap_pop(T *h, size_t *n)						\
{									\
	T top = h[0], last = h[--(*n)];					\
	size_t i = 0;							\
									\
	for (;;) {							\
		size_t c = 2 * i + 1;					\
									\
		if (c >= *n)						\
			break;						\
		if (c + 1 < *n && BEFORE(&h[c + 1], &h[c]))		\
			c++;						\
		if (!BEFORE(&h[c], &last))				\
			break;						\
		h[i] = h[c];						\
		i = c;							\
	}								\
	if (*n > 0)							\
		h[i] = last;						\
	return top;							\
}

#endif
