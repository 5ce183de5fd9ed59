/*
 * grammar_int.h - the compiled form of a grammar, shared by the parser
 * (grammar_parse.c) and the matcher (grammar_match.c).
 *
 * A grammar is a flat array of elements.  Each rule has alternatives;
 * each alternative is a run of elements in elems[] ending with GE_END.
 * Elements are GE_CLASS (one code point from a class: a set of ranges,
 * maybe negated) or GE_REF (the whole of another rule).  Repetitions and
 * groups were rewritten into helper rules by the parser, so a position in
 * the grammar is just an index into elems[].
 *
 * Invariants the parser guarantees and the matcher relies on:
 *   1. every GE_REF names a rule in [0, n_rules) with >= 1 alternative;
 *   2. every alternative ends with GE_END inside elems[];
 *   3. no rule reaches itself through references at the start of an
 *      alternative (after any prefix of rules that may match nothing), so
 *      expanding a position to the classes it may match next terminates.
 */
#ifndef CP_GRAMMAR_INT_H
#define CP_GRAMMAR_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar.h"

enum gelem_type {
	GE_END = 0,		/* end of an alternative */
	GE_REF,			/* arg: rule index */
	GE_CLASS,		/* arg: class index */
};

struct gelem {
	uint32_t type;		/* enum gelem_type */
	uint32_t arg;
};

struct gclass {
	uint32_t first;		/* index of its first range in ranges[] */
	uint32_t n;		/* ranges */
	bool neg;		/* matches what no range holds */
};

struct grange {
	uint32_t lo, hi;	/* code points, inclusive, lo <= hi */
};

struct grule {
	uint32_t name;		/* offset of its NUL-terminated name in names */
	uint32_t first_alt;	/* index into alts[] */
	uint32_t n_alts;
};

struct grammar {
	struct gelem *elems;	/* (n_elems) */
	uint32_t n_elems;
	struct grange *ranges;	/* (n_ranges) */
	uint32_t n_ranges;
	struct gclass *classes;	/* (n_classes) */
	uint32_t n_classes;
	uint32_t *alts;		/* (n_alts) index of each alternative's first
				   element */
	uint32_t n_alts;
	struct grule *rules;	/* (n_rules) */
	uint32_t n_rules;
	char *names;		/* rule names, NUL-terminated, back to back */
	uint32_t root;		/* the start rule */
};

/*
 * A vocabulary for matching: every token's bytes, and the ids of the
 * tokens that can be matched (non-empty pieces, not end of generation)
 * sorted by their bytes, with lcp[k] the length of the prefix that
 * sorted[k] shares with sorted[k - 1] (lcp[0] = 0).  A walk over sorted[]
 * in order is a depth-first walk of the vocabulary's byte trie, and the
 * bytes it reads (tails) are one per trie node, in the order read.
 */
struct gvocab {
	int n_vocab;
	char *bytes;		/* every piece, back to back */
	uint32_t *off;		/* (n_vocab + 1) piece i is bytes[off[i],
				   off[i + 1]) */
	int32_t *sorted;	/* (n_sorted) */
	uint32_t *lcp;		/* (n_sorted) */
	uint32_t *len;		/* (n_sorted) piece length of sorted[k] */
	uint8_t *tails;		/* piece of sorted[k] from byte lcp[k] on, */
	uint32_t *tail_off;	/* at tails + tail_off[k], back to back in
				   walk order (n_sorted) */
	int n_sorted;
	uint8_t *eog_bits;	/* (n_vocab bits) */
	int32_t *eog;		/* (n_eog) */
	int n_eog;
	uint32_t max_len;	/* longest piece */
};

/* Whether class c holds code point cp. */
bool gclass_has(const struct grammar *g, uint32_t c, uint32_t cp);

/* How much of [lo, hi] class c holds. */
enum gspan {
	GSPAN_NONE,
	GSPAN_SOME,
	GSPAN_ALL,
};
enum gspan gclass_span(const struct grammar *g, uint32_t c, uint32_t lo,
    uint32_t hi);

#endif
