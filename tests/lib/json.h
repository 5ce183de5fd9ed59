/*
 * json.h - a small JSON reader for tests: parses a whole document into a
 * tree (RFC 8259; nesting limited to JSON_MAX_DEPTH).  Strings are decoded
 * (escapes, \uXXXX with surrogate pairs) into NUL-terminated UTF-8 that may
 * contain NUL bytes (see .len).  Objects keep their members in file order.
 */
#ifndef CP_TEST_JSON_H
#define CP_TEST_JSON_H

#include <stdbool.h>
#include <stddef.h>

#define JSON_MAX_DEPTH 64

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json {
	enum json_type type;
	bool b;			/* JSON_BOOL */
	double num;		/* JSON_NUMBER */
	char *str;		/* JSON_STRING: decoded, NUL-terminated */
	size_t len;		/* JSON_STRING: bytes in str */
	struct json *items;	/* JSON_ARRAY elements, JSON_OBJECT values */
	char **keys;		/* JSON_OBJECT: keys[i] names items[i] */
	size_t n;		/* elements or members */
};

/*
 * Parse text[0..len) (one value, surrounding white space allowed).  Returns
 * the tree (free with json_free()) or NULL, with a message naming the byte
 * offset in err (errlen bytes, may be 0).
 */
struct json *json_parse(const char *text, size_t len, char *err,
    size_t errlen);

/* Read and parse the file at path; NULL with err set on any failure. */
struct json *json_parse_file(const char *path, char *err, size_t errlen);

/* Free a tree from json_parse(); accepts NULL. */
void json_free(struct json *j);

/* Member key of object j (first one if repeated), or NULL (also when j is not an object). */
const struct json *json_get(const struct json *j, const char *key);

/* Element i of array j, or NULL. */
const struct json *json_at(const struct json *j, size_t i);

#endif
