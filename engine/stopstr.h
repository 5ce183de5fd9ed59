/*
 * stopstr.h - stop strings matched over a stream of generated text.
 *
 * The detokenised bytes of each token are fed as they arrive.  The matcher
 * holds back the shortest tail of the text that could still begin a stop
 * string and says how much of the rest is safe to send now.  Matching works
 * on bytes, so a stop string may span any number of tokens; the outcome
 * depends only on the byte stream, never on how it was split into feeds.
 *
 * Terms: the pending text of a call is the bytes held back by earlier calls
 * followed by this call's bytes.  emit counts bytes from its front.
 *
 * Match semantics: generation stops at the first byte where some stop
 * string ends.  When several end at that byte (say "abc" and "bc"), the
 * longest wins, i.e. the one that starts earliest.  Text before the winning
 * stop string is emitted; the stop string and anything after it are not.
 * So with stop strings "ab" and "abc", "xabc" stops at "ab" and emits "x".
 *
 * If the stop strings and the text are valid UTF-8, every emit boundary
 * falls between characters: a held tail always starts where the first byte
 * of a stop string matched.
 *
 * Cost: O(n_strings * bytes fed) amortised, plus O(longest stop string) per
 * call; no allocation after stopstr_new().
 */
#ifndef CP_STOPSTR_H
#define CP_STOPSTR_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define STOPSTR_MAX_N	32	/* most stop strings */
#define STOPSTR_MAX_LEN	512	/* longest stop string, in bytes */

struct stopstr_res {
	size_t emit;	/* bytes at the front of the pending text safe to send */
	size_t held;	/* bytes held back after this call; 0 after a match */
	int match;	/* index of the stop string that matched, or -1 */
};

struct stopstr;

/* A matcher for the n (0..STOPSTR_MAX_N) stop strings strs[i], each
 * lens[i] bytes long (any bytes), or NUL-terminated when lens is NULL;
 * copied.  Each must be 1..STOPSTR_MAX_LEN bytes.  NULL on bad input
 * (-EINVAL, e names the string) or no memory (-ENOMEM).  Free with
 * stopstr_free. */
struct stopstr *stopstr_new(const char *const *strs, const size_t *lens,
    int n, struct cp_err *e);

/* Free ss; NULL is accepted. */
void stopstr_free(struct stopstr *ss);

/* The most bytes ever held back: the longest stop string's length - 1. */
size_t stopstr_max_held(const struct stopstr *ss);

/* Bytes held back now. */
size_t stopstr_held(const struct stopstr *ss);

/* True once a stop string has matched (until stopstr_reset). */
bool stopstr_matched(const struct stopstr *ss);

/*
 * Feed the next len bytes of text (buf, borrowed).  Fills r; when out is
 * not NULL also copies the r->emit safe bytes there (the held ones first,
 * then buf's), and then cap must be >= stopstr_held(ss) + len
 * (stopstr_max_held(ss) + len always is) and out must not overlap buf.
 * 0; -EINVAL (buf NULL with len > 0), -ENOBUFS (cap too small), or
 * -EALREADY after a match; on error nothing changes and r is zeroed with
 * match -1.
 */
int stopstr_feed(struct stopstr *ss, const void *buf, size_t len, char *out,
    size_t cap, struct stopstr_res *r);

/*
 * End of text (end-of-generation, length limit): release every held byte.
 * r->emit is the number released (0 after a match), r->match the index of
 * the stop string that matched or -1; the bytes are copied to out when out
 * is not NULL (cap >= stopstr_held(ss), else -ENOBUFS and nothing
 * changes).  Afterwards nothing is held and, unless a stop string had
 * matched, matching starts afresh.
 */
int stopstr_flush(struct stopstr *ss, char *out, size_t cap,
    struct stopstr_res *r);

/* Forget all text and any match, ready for a new generation. */
void stopstr_reset(struct stopstr *ss);

#endif
