/*
 * grammar.h - structured output: grammars that constrain which tokens the
 * sampler may choose.
 *
 * Three objects, from the longest-lived to the shortest:
 *
 *   struct grammar  a compiled grammar (GBNF text, a JSON schema, or "any
 *                   JSON value").  Immutable once made: any number of
 *                   matchers on any threads may share one.
 *   struct gvocab   the byte pieces of a tokenizer's vocabulary, sorted so
 *                   that tokens sharing a prefix are matched once.  Built
 *                   once per tokenizer; immutable; shared.
 *   struct gmatch   one generating sequence's position in a grammar: the
 *                   set of parse stacks its text so far leaves open, and
 *                   caches (transitions and masks per state).  Not
 *                   thread-safe; one per sequence.
 *
 * The dialect is llama.cpp's GBNF: `name ::= alternatives`, `|`, `( )`,
 * `*` `+` `?` `{m}` `{m,}` `{m,n}`, "literals", [classes] with ranges and
 * negation, `.` (any character), escapes \n \r \t \\ \" \' \[ \] \- \^
 * \/ \xHH \uHHHH \UHHHHHHHH, `#` comments; `root` is the start rule.
 * (Not supported: llama.cpp's token references <[id]> and !<...>.)  Inside a
 * rule a newline ends the rule except after `::=`, after `|` and inside
 * parentheses.  Characters are Unicode code points; the text a matcher
 * accepts is UTF-8.
 *
 * Limits (client input; every one is an error, never a crash or a long
 * loop): GRAMMAR_MAX_TEXT bytes of text, GRAMMAR_MAX_RULES rules,
 * GRAMMAR_MAX_ELEMS elements after expanding repetitions, group nesting
 * GRAMMAR_MAX_NEST, repetition counts up to GRAMMAR_MAX_REPEAT; left
 * recursion (a rule that can reach itself before consuming a character) is
 * refused.  A matcher holds at most GMATCH_MAX_STACKS stacks at once
 * (more: the grammar is too ambiguous, -E2BIG), stacks at most
 * GMATCH_MAX_DEPTH deep (deeper nesting is not allowed: those paths are
 * dropped).  Its caches are dropped and rebuilt at the start of a call
 * once they pass half their bounds (GMATCH_MAX_STATES states, 1M stack
 * nodes, 4M stack entries, 32 MiB of masks); one call that needs more
 * than the bounds fails with -E2BIG.  So a matcher never holds more than
 * about 100 MiB, whatever the grammar; a JSON schema's holds kilobytes to
 * a few megabytes.
 *
 * Use, in a server: gvocab_new() once per tokenizer; per request, a
 * grammar (grammar_from_gbnf(), grammar_from_schema(), grammar_any_json())
 * and gmatch_new() given to sampler_set_grammar() (sampler.h), which
 * masks each draw with gmatch_mask() and advances with
 * gmatch_accept_token() in sampler_accept(); gmatch_accepting() says
 * whether the text so far is complete, gmatch_done() whether nothing but
 * the end may follow.
 */
#ifndef CP_GRAMMAR_H
#define CP_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define GRAMMAR_MAX_TEXT	(256 * 1024)	/* bytes of GBNF or schema */
#define GRAMMAR_MAX_RULES	4096
#define GRAMMAR_MAX_ELEMS	(1 << 18)	/* after expansion */
#define GRAMMAR_MAX_NEST	64		/* ( ) nesting */
#define GRAMMAR_MAX_REPEAT	1000		/* m and n of {m,n} */
#define GMATCH_MAX_STACKS	1024
#define GMATCH_MAX_DEPTH	512
#define GMATCH_MAX_STATES	16384

struct grammar;
struct gvocab;
struct gmatch;
struct tokenizer;

/*
 * Compile GBNF text[0..len) into *out (free with grammar_free).  0, or
 * -EINVAL with e naming the rule, line and column ("rule 'value', line 3
 * col 7: unterminated character class"), -E2BIG past a limit, -ENOMEM.
 */
int grammar_from_gbnf(const char *text, size_t len, struct grammar **out,
    struct cp_err *e);

/*
 * Compile a JSON schema (JSON text[0..len)) into *out, through
 * schema_to_gbnf().  Errors name the schema path ("#/properties/age/type:
 * unknown type \"int\"").
 */
int grammar_from_schema(const char *text, size_t len, struct grammar **out,
    struct cp_err *e);

/* A grammar of any JSON value (the `json: true` request). */
int grammar_any_json(struct grammar **out, struct cp_err *e);

/*
 * The GBNF text a JSON schema becomes: *gbnf (malloc'd, NUL-terminated,
 * the caller frees) and its length.  0, -EINVAL with e naming the schema
 * path, -E2BIG, -ENOMEM.
 */
int schema_to_gbnf(const char *text, size_t len, char **gbnf,
    size_t *gbnf_len, struct cp_err *e);

/* Free g; NULL is accepted.  No matcher may use it afterwards. */
void grammar_free(struct grammar *g);

/* Number of rules of g, repetitions' helper rules included. */
int grammar_n_rules(const struct grammar *g);

/*
 * The pieces of t's vocabulary for matching (tok_piece() without special
 * text) and its end-of-generation ids.  Control, unknown, unused tokens
 * (empty pieces) are never allowed by a grammar; end-of-generation ids are
 * allowed exactly where the grammar accepts.  t may be freed afterwards.
 */
int gvocab_new(const struct tokenizer *t, struct gvocab **out,
    struct cp_err *e);

/* The same from pieces[i][0..lens[i]) for i < n (copied) and eog[0..n_eog). */
int gvocab_new_pieces(const char *const *pieces, const size_t *lens, int n,
    const int32_t *eog, int n_eog, struct gvocab **out, struct cp_err *e);

void gvocab_free(struct gvocab *v);

int gvocab_n_vocab(const struct gvocab *v);

/*
 * A matcher at the start of g over v (both borrowed: they must outlive
 * it); NULL with e set (-ENOMEM, -E2BIG when the start is too ambiguous).
 */
struct gmatch *gmatch_new(const struct grammar *g, const struct gvocab *v,
    struct cp_err *e);

/* A matcher at m's position (sharing m's grammar and vocabulary, not its
 * caches); NULL when out of memory. */
struct gmatch *gmatch_clone(const struct gmatch *m);

/* Tokens in m's vocabulary. */
int gmatch_n_vocab(const struct gmatch *m);

/* Back to the start of the grammar. */
void gmatch_reset(struct gmatch *m);

/* Free m; NULL is accepted. */
void gmatch_free(struct gmatch *m);

/*
 * The tokens allowed next: a bit set of n_vocab bits (bit i of byte i/8)
 * in *bits, borrowed: valid until the next call on m.  A token is allowed
 * when its bytes extend the text to a prefix of some sentence of the
 * grammar (a token may end inside a UTF-8 character); an end-of-generation
 * id when the text so far is a whole sentence.  0, or -E2BIG (too
 * ambiguous or too many states), -ENOMEM; then *bits is NULL.
 */
int gmatch_mask(struct gmatch *m, const uint8_t **bits);

/* Whether token id is allowed next (what gmatch_mask() would say). */
bool gmatch_allows(struct gmatch *m, int32_t id);

/*
 * Advance over token id's bytes.  0; -EINVAL (m unchanged) when the
 * grammar does not allow it (an end-of-generation id is allowed only where
 * the grammar accepts, and leaves m where it was); -E2BIG, -ENOMEM.
 */
int gmatch_accept_token(struct gmatch *m, int32_t id);

/* Advance over bytes p[0..n); 0 or -EINVAL (m unchanged) as above. */
int gmatch_accept_bytes(struct gmatch *m, const char *p, size_t n);

/* Whether the text so far is a whole sentence of the grammar (no partial
 * UTF-8 character pending). */
bool gmatch_accepting(const struct gmatch *m);

/* Whether no token but end of generation can follow (the grammar accepts
 * and nothing longer is allowed). */
bool gmatch_done(const struct gmatch *m);

/*
 * Bytes m holds: its caches (states, transitions, masks) and their
 * arrays, at most about 100 MiB (see Limits).
 */
size_t gmatch_bytes(const struct gmatch *m);

/*
 * Drop m's caches and give their memory back, keeping its position (the
 * next calls rebuild what they need, at the cost of first passes); a mask
 * from gmatch_mask() is no longer valid.  For a server that bounds the
 * memory of all its matchers together.  0, or -ENOMEM / -E2BIG (m is then
 * unusable, as after a failed call).
 */
int gmatch_trim(struct gmatch *m);

/* The error of the last failed call, as text (borrowed, valid until the
 * next call); "" when none. */
const char *gmatch_error(const struct gmatch *m);

#endif
