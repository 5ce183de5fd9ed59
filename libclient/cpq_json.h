/*
 * cpq_json.h - the JSON cpq writes (one object per event) and reads (a
 * conversation's earlier turns for --history).
 *
 * The reader takes exactly one shape and nothing around it:
 *
 *	[ { "role": "system" | "user" | "assistant" | "tool",
 *	    "content": "..." }, ... ]
 *
 * (RFC 8259 syntax: whitespace anywhere between tokens, members in any
 * order, each exactly once, no other member, no trailing comma).  A
 * string is UTF-8 with every escape of the RFC; a \u escape of a
 * surrogate must pair a high with a low one.  The file is the user's,
 * so nothing in it is trusted: any other byte is an error that names its
 * line and column and what was expected there.
 */
#ifndef CPQ_JSON_H
#define CPQ_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpclient.h"

/*
 * s[0..n) to f as a JSON string: control characters escaped, valid UTF-8
 * kept, each byte of an invalid sequence written as U+FFFD.
 */
void cpq_json_string(FILE *f, const char *s, size_t n);

/*
 * A TOKEN event's top-n list to f as a member, comma first:
 * ,"top_logprobs":[{"id":ID,"token":"TEXT","logprob":LP,"bytes":[B,...]},
 * ...], most likely first ([] when it has none).  pieces and lens are what
 * cp_detokenize() gave for ev->top_ids (TEXT the piece as
 * cpq_json_string() writes it, bytes its exact bytes); with pieces NULL
 * each entry is only {"id":ID,"logprob":LP}.
 */
void cpq_json_top(FILE *f, const struct cp_event *ev, const char *pieces,
    const uint32_t *lens);

/* Messages read from a history file; free with cpq_history_free(). */
struct cpq_history {
	struct cp_message *msgs;	/* n of them; content points into buf */
	size_t n;
	char *buf;			/* the decoded contents */
};

/*
 * Parses text[0..len) (the shape above, at most max_msgs messages) into
 * *h.  0, -ENOMEM, or -EINVAL with "line L, column C: what" in err (size
 * bytes, always NUL-terminated); on failure *h holds nothing to free.
 */
int cpq_history_parse(const char *text, size_t len, size_t max_msgs,
    struct cpq_history *h, char *err, size_t size);

/* Frees what cpq_history_parse() filled in; a zeroed *h is fine. */
void cpq_history_free(struct cpq_history *h);

#endif
