/*
 * json_read.h - a strict JSON reader (RFC 8259) for the engine's client
 * input (JSON schemas).
 *
 * The text is read into an immutable tree of values owned by a struct
 * jdoc.  Strict: no comments, no trailing commas, no leading zeros, no
 * NaN; strings must be valid UTF-8 and their escapes valid (a lone
 * surrogate is an error); one value, only whitespace around it.  Limits:
 * JDOC_MAX_DEPTH nesting, JDOC_MAX_VALUES values.  Errors give line and
 * column.
 */
#ifndef CP_JSON_READ_H
#define CP_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define JDOC_MAX_DEPTH	64
#define JDOC_MAX_VALUES	(1 << 20)

enum jtype {
	JT_NULL,
	JT_BOOL,
	JT_NUM,
	JT_STR,
	JT_ARR,
	JT_OBJ,
};

struct jdoc;
struct jval;

/* Read text[0..len) into *out (free with jdoc_free); 0, -EINVAL with e
 * giving line, column and what was expected, -E2BIG, -ENOMEM. */
int jdoc_parse(const char *text, size_t len, struct jdoc **out,
    struct cp_err *e);

/* Free d; NULL is accepted.  Every value of d goes with it. */
void jdoc_free(struct jdoc *d);

/* The top value; borrowed, valid until jdoc_free. */
const struct jval *jdoc_root(const struct jdoc *d);

enum jtype jval_type(const struct jval *v);

/* Members of an object or elements of an array; 0 for other types. */
size_t jval_len(const struct jval *v);

/* Element or member i (< jval_len) of an array or object. */
const struct jval *jval_at(const struct jval *v, size_t i);

/* Key of a value that is an object's member, NUL-terminated; NULL
 * otherwise. */
const char *jval_key(const struct jval *v);

/* The first member of object v named key, or NULL. */
const struct jval *jval_get(const struct jval *v, const char *key);

/* A string's decoded bytes (NUL-terminated, may hold NULs: *len) or NULL
 * when v is not a string; len may be NULL. */
const char *jval_str(const struct jval *v, size_t *len);

/* A number's value (0 for other types). */
double jval_num(const struct jval *v);

/* A number's source text (a valid JSON number), *len its length; NULL for
 * other types. */
const char *jval_num_text(const struct jval *v, size_t *len);

/* A boolean's value (false for other types). */
bool jval_bool(const struct jval *v);

/* Whether a and b are the same JSON value (numbers by value; object
 * members in order). */
bool jval_equal(const struct jval *a, const struct jval *b);

/*
 * Write v as compact JSON to out[0..cap) (NUL-terminated when cap > 0);
 * returns the length of the whole text, like snprintf.
 */
size_t jval_write(const struct jval *v, char *out, size_t cap);

#endif
