/*
 * grammar_schema.c - JSON schemas to GBNF (then compiled by
 * grammar_parse.c).
 *
 * Each schema becomes one rule; rules are appended to the text as they
 * are made, children before parents, so the text reads bottom-up.  The
 * shared pieces (ws, string, number, value...) are written once, when
 * first used.  Output is JSON with optional whitespace after each token
 * (at most a newline and 20 blanks, so that a model cannot pad forever).
 *
 * Supported: type (one or a list), enum, const, properties, required,
 * additionalProperties (false, true, a schema; absent = true), items,
 * minItems, maxItems, minLength, maxLength, minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (integers: any range whose bounds
 * are below 10^15; numbers: minimum 0 only), anyOf, oneOf (as anyOf),
 * $ref to a local JSON pointer ("#/$defs/x", "#/definitions/x", "#"),
 * and the empty schema or true (any value).  Keywords that would
 * constrain the output in ways this converter cannot enforce (pattern,
 * allOf, not, if, prefixItems, patternProperties, ...) are errors, never
 * silently ignored; annotations (title, description, format, ...) are.
 *
 * Additional members (allowed unless additionalProperties is false) come
 * after the named ones, and their names are not checked against them: a
 * named property may then appear again as an additional one, with any
 * value.
 *
 * Properties come out in the schema's order; required ones always,
 * optional ones maybe.  The commas are kept right with two rules per
 * position i: the members from i on, when one was already written or not.
 * Numbers have at most 16 integer and 16 fraction digits.
 */
#include "grammar.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_read.h"

#define SCHEMA_MAX_RULES	2048
#define SCHEMA_MAX_REFS		256
#define INT_BOUND_MAX		1e15	/* integer bounds must be below */

struct sbuf {
	char *p;
	size_t n, cap;
};

struct sref {
	char *ptr;		/* the $ref text */
	int rule;		/* its rule number */
};

struct conv {
	struct sbuf out;
	const struct jval *root;
	struct cp_err *e;
	int err;
	int n_rules;
	struct sref refs[SCHEMA_MAX_REFS];
	int n_refs;
	unsigned have;		/* shared pieces written (HAVE_*) */
	char path[512];
};

enum {
	HAVE_WS = 1 << 0,
	HAVE_STRING = 1 << 1,
	HAVE_NUMBER = 1 << 2,
	HAVE_INTEGER = 1 << 3,
	HAVE_VALUE = 1 << 4,
	HAVE_CHAR = 1 << 5,
};

/* ---- output ---- */

static int
cnomem(struct conv *c)
{
	if (c->err == 0)
		c->err = cp_err_set(c->e, -ENOMEM, "schema: out of memory");
	return c->err;
}

__attribute__((format(printf, 2, 3)))
static int
emit(struct conv *c, const char *fmt, ...)
{
	va_list ap;
	size_t nc;
	char *np;
	int n;

	if (c->err != 0)
		return c->err;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(c->out.p + c->out.n, c->out.cap - c->out.n, fmt,
		    ap);
		va_end(ap);
		if (n < 0)
			return cnomem(c);
		if ((size_t)n < c->out.cap - c->out.n)
			break;
		nc = (c->out.cap + (size_t)n + 1) * 2;
		if (nc > 4 * (size_t)GRAMMAR_MAX_TEXT) {
			c->err = cp_err_set(c->e, -E2BIG, "schema: the grammar "
			    "would exceed %d bytes", 4 * GRAMMAR_MAX_TEXT);
			return c->err;
		}
		if ((np = realloc(c->out.p, nc)) == NULL)
			return cnomem(c);
		c->out.p = np;
		c->out.cap = nc;
	}
	c->out.n += (size_t)n;
	return 0;
}

/* Write bytes s[0..len) as the inside of a GBNF string literal. */
static int
emit_lit(struct conv *c, const char *s, size_t len)
{
	size_t i;
	uint8_t b;

	for (i = 0; i < len && c->err == 0; i++) {
		b = (uint8_t)s[i];
		if (b == '"' || b == '\\')
			emit(c, "\\%c", b);
		else if (b < 0x20 || b == 0x7f)
			emit(c, "\\x%02X", b);
		else
			emit(c, "%c", b);
	}
	return c->err;
}

__attribute__((format(printf, 3, 4)))
static int
serr(struct conv *c, const char *sub, const char *fmt, ...)
{
	char msg[CP_ERR_MSG];
	va_list ap;

	if (c->err != 0)
		return c->err;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->err = cp_err_set(c->e, -EINVAL, "#%s%s%s: %s", c->path,
	    sub ? "/" : "", sub ? sub : "", msg);
	return c->err;
}

/* A new rule number. */
static int
new_rule(struct conv *c, int *r)
{
	*r = 0;
	if (c->n_rules >= SCHEMA_MAX_RULES) {
		c->err = cp_err_set(c->e, -E2BIG, "#%s: schema needs more "
		    "than %d rules", c->path, SCHEMA_MAX_RULES);
		return c->err;
	}
	*r = c->n_rules++;
	return 0;
}

/* n consecutive rule numbers from *first. */
static int
reserve(struct conv *c, int n, int *first)
{
	*first = 0;
	if (n > SCHEMA_MAX_RULES - c->n_rules) {
		c->err = cp_err_set(c->e, -E2BIG, "#%s: schema needs more "
		    "than %d rules", c->path, SCHEMA_MAX_RULES);
		return c->err;
	}
	*first = c->n_rules;
	c->n_rules += n;
	return 0;
}

/* ---- shared pieces ---- */

static void
need(struct conv *c, unsigned what)
{
	if ((what & HAVE_WS) && !(c->have & HAVE_WS)) {
		c->have |= HAVE_WS;
		emit(c, "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n");
	}
	if ((what & HAVE_CHAR) && !(c->have & HAVE_CHAR)) {
		c->have |= HAVE_CHAR;
		emit(c, "char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" "
		    "([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n");
	}
	if ((what & HAVE_STRING) && !(c->have & HAVE_STRING)) {
		need(c, HAVE_WS | HAVE_CHAR);
		c->have |= HAVE_STRING;
		emit(c, "string ::= \"\\\"\" char* \"\\\"\" ws\n");
	}
	if ((what & HAVE_NUMBER) && !(c->have & HAVE_NUMBER)) {
		need(c, HAVE_WS);
		c->have |= HAVE_NUMBER;
		emit(c, "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) "
		    "(\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n");
	}
	if ((what & HAVE_INTEGER) && !(c->have & HAVE_INTEGER)) {
		need(c, HAVE_WS);
		c->have |= HAVE_INTEGER;
		emit(c, "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) ws\n");
	}
	if ((what & HAVE_VALUE) && !(c->have & HAVE_VALUE)) {
		need(c, HAVE_STRING | HAVE_NUMBER);
		c->have |= HAVE_VALUE;
		emit(c, "value ::= object | array | string | number | "
		    "(\"true\" | \"false\" | \"null\") ws\n"
		    "object ::= \"{\" ws (string \":\" ws value "
		    "(\",\" ws string \":\" ws value)*)? \"}\" ws\n"
		    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n");
	}
}

/* ---- paths ---- */

/* Append "/" and key (JSON-pointer escaped) to c->path; returns the old
 * length, to restore. */
static size_t
path_push(struct conv *c, const char *key)
{
	size_t old = strlen(c->path), n = old;
	const char *k;

	if (n + 1 < sizeof(c->path))
		c->path[n++] = '/';
	for (k = key; *k != '\0' && n + 2 < sizeof(c->path); k++) {
		if (*k == '~' || *k == '/') {
			c->path[n++] = '~';
			c->path[n++] = *k == '~' ? '0' : '1';
		} else {
			c->path[n++] = *k;
		}
	}
	c->path[n] = '\0';
	return old;
}

static void
path_pop(struct conv *c, size_t old)
{
	c->path[old] = '\0';
}

/* ---- integers ---- */

/* Alternatives (no parentheses) of the decimal numbers from a to b, two
 * digit strings of the same length without leading zeros above. */
static void
digits_range(struct conv *c, const char *a, const char *b, size_t len)
{
	size_t i;
	bool a0 = true, b9 = true;

	if (len == 1) {
		emit(c, "[%c-%c]", a[0], b[0]);
		return;
	}
	for (i = 1; i < len; i++) {
		a0 &= a[i] == '0';
		b9 &= b[i] == '9';
	}
	if (a0 && b9) {
		emit(c, "[%c-%c] [0-9]{%zu}", a[0], b[0], len - 1);
		return;
	}
	if (a[0] == b[0]) {
		emit(c, "\"%c\" (", a[0]);
		digits_range(c, a + 1, b + 1, len - 1);
		emit(c, ")");
		return;
	}
	{
		char nines[20], zeros[20];

		memset(nines, '9', len - 1);
		memset(zeros, '0', len - 1);
		emit(c, "\"%c\" (", a[0]);
		digits_range(c, a + 1, nines, len - 1);
		emit(c, ")");
		if (a[0] + 1 <= b[0] - 1)
			emit(c, " | [%c-%c] [0-9]{%zu}", a[0] + 1, b[0] - 1,
			    len - 1);
		emit(c, " | \"%c\" (", b[0]);
		digits_range(c, zeros, b + 1, len - 1);
		emit(c, ")");
	}
}

/* Alternatives of the integers in [lo, hi], 0 <= lo <= hi < 10^15. */
static void
uint_range(struct conv *c, long long lo, long long hi)
{
	char a[24], b[24];
	long long p = 1, from, to;
	size_t len;
	bool first = true;

	for (len = 1; len <= 16; len++, p *= 10) {
		from = len == 1 ? 0 : p;
		to = p * 10 - 1;
		if (from < lo)
			from = lo;
		if (to > hi)
			to = hi;
		if (from > to)
			continue;
		snprintf(a, sizeof(a), "%lld", from);
		snprintf(b, sizeof(b), "%lld", to);
		emit(c, first ? "(" : " | (");
		digits_range(c, a, b, len);
		emit(c, ")");
		first = false;
	}
}

/* Alternatives of integers of more digits than lo has (lo >= 0), up to
 * 16 digits; nothing when lo has 16. */
static void
uint_longer(struct conv *c, long long lo)
{
	char a[24];
	int len = snprintf(a, sizeof(a), "%lld", lo);

	if (len < 16)
		emit(c, " | [1-9] [0-9]{%d,15}", len);
}

/* One integer bound: *v when the keyword is there; exclusive shifts it. */
static int
int_bound(struct conv *c, const struct jval *s, const char *kw,
    const char *xkw, bool upper, bool *has, long long *v)
{
	const struct jval *b = jval_get(s, kw), *x = jval_get(s, xkw);
	double d;

	*has = false;
	if (b != NULL && jval_type(b) != JT_NUM)
		return serr(c, kw, "expected a number");
	if (x != NULL && jval_type(x) != JT_NUM)
		return serr(c, xkw, "expected a number (a boolean "
		    "exclusive bound is not supported)");
	if (b != NULL) {
		d = upper ? floor(jval_num(b)) : ceil(jval_num(b));
		if (fabs(d) >= INT_BOUND_MAX)
			return serr(c, kw, "bound beyond +-10^15");
		*v = (long long)d;
		*has = true;
	}
	if (x != NULL) {
		d = jval_num(x);
		d = upper ? ceil(d) - 1 : floor(d) + 1;
		if (fabs(d) >= INT_BOUND_MAX)
			return serr(c, xkw, "bound beyond +-10^15");
		if (!*has || (upper ? d < *v : d > *v))
			*v = (long long)d;
		*has = true;
	}
	return 0;
}

static int
conv_integer(struct conv *c, const struct jval *s, int r)
{
	long long lo = 0, hi = 0;
	bool hl, hh;

	if (int_bound(c, s, "minimum", "exclusiveMinimum", false, &hl,
	    &lo) < 0 ||
	    int_bound(c, s, "maximum", "exclusiveMaximum", true, &hh,
	    &hi) < 0)
		return c->err;
	if (!hl && !hh) {
		need(c, HAVE_INTEGER);
		return emit(c, "r%d ::= integer\n", r);
	}
	if (hl && hh && lo > hi)
		return serr(c, "minimum", "no integer between the bounds");
	need(c, HAVE_WS);
	emit(c, "r%d ::= (", r);
	if (hl && hh) {
		if (hi < 0) {
			emit(c, "\"-\" (");
			uint_range(c, -hi, -lo);
			emit(c, ")");
		} else if (lo < 0) {
			emit(c, "\"-\" (");
			uint_range(c, 1, -lo);
			emit(c, ") | ");
			uint_range(c, 0, hi);
		} else {
			uint_range(c, lo, hi);
		}
	} else if (hl) {
		if (lo < 0) {
			emit(c, "\"-\" (");
			uint_range(c, 1, -lo);
			emit(c, ") | \"0\" | [1-9] [0-9]{0,15}");
		} else {
			uint_range(c, lo, 999999999999999LL);
			uint_longer(c, 999999999999999LL);
		}
	} else {
		if (hi < 0) {
			emit(c, "\"-\" (");
			uint_range(c, -hi, 999999999999999LL);
			emit(c, ")");
		} else {
			emit(c, "\"-\" [1-9] [0-9]{0,15} | ");
			uint_range(c, 0, hi);
		}
	}
	return emit(c, ") ws\n");
}

/* ---- schemas ---- */

static int conv_schema(struct conv *c, const struct jval *s, int *rule);

/* A sub-schema at s's member key (path extended by key). */
static int
conv_sub(struct conv *c, const struct jval *s, const char *key, int *rule)
{
	size_t old = path_push(c, key);
	int rc = conv_schema(c, s, rule);

	path_pop(c, old);
	return rc;
}

/* The value of a JSON pointer "#/a/b" in the root schema. */
static const struct jval *
resolve(struct conv *c, const char *ptr)
{
	const struct jval *v = c->root;
	char tok[256];
	const char *p = ptr + 1;
	size_t n;
	char *end;
	unsigned long idx;

	while (*p == '/') {
		p++;
		for (n = 0; *p != '\0' && *p != '/' && n + 1 < sizeof(tok);
		    p++) {
			if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
				tok[n++] = p[1] == '0' ? '~' : '/';
				p++;
			} else {
				tok[n++] = *p;
			}
		}
		tok[n] = '\0';
		if (jval_type(v) == JT_OBJ) {
			v = jval_get(v, tok);
		} else if (jval_type(v) == JT_ARR) {
			idx = strtoul(tok, &end, 10);
			v = *end == '\0' && n > 0 ? jval_at(v, idx) : NULL;
		} else {
			v = NULL;
		}
		if (v == NULL)
			return NULL;
	}
	return *p == '\0' ? v : NULL;
}

static int
conv_ref(struct conv *c, const struct jval *ref, int r)
{
	const struct jval *target;
	const char *ptr = jval_str(ref, NULL);
	int i, tr;

	if (ptr == NULL)
		return serr(c, "$ref", "expected a string");
	if (ptr[0] != '#' || (ptr[1] != '\0' && ptr[1] != '/'))
		return serr(c, "$ref", "only local references (\"#/...\") are "
		    "supported, not \"%.64s\"", ptr);
	for (i = 0; i < c->n_refs; i++)
		if (strcmp(c->refs[i].ptr, ptr) == 0)
			return emit(c, "r%d ::= r%d\n", r, c->refs[i].rule);
	if (c->n_refs >= SCHEMA_MAX_REFS)
		return serr(c, "$ref", "more than %d references",
		    SCHEMA_MAX_REFS);
	if ((target = resolve(c, ptr)) == NULL)
		return serr(c, "$ref", "\"%.64s\" names nothing in the schema",
		    ptr);
	if (new_rule(c, &tr) < 0)
		return c->err;
	if ((c->refs[c->n_refs].ptr = strdup(ptr)) == NULL)
		return cnomem(c);
	c->refs[c->n_refs++].rule = tr;
	emit(c, "r%d ::= r%d\n", r, tr);
	/* the target is converted under its own path */
	{
		char saved[sizeof(c->path)];
		int sub;

		memcpy(saved, c->path, sizeof(saved));
		snprintf(c->path, sizeof(c->path), "%s", ptr + 1);
		if (conv_schema(c, target, &sub) == 0)
			emit(c, "r%d ::= r%d\n", tr, sub);
		memcpy(c->path, saved, sizeof(saved));
	}
	return c->err;
}

/* enum or const: the values' compact JSON text as literals. */
static int
conv_values(struct conv *c, const struct jval *const *vals, size_t n, int r)
{
	char small[256], *big = NULL, *t;
	size_t i, len;

	need(c, HAVE_WS);
	emit(c, "r%d ::= (", r);
	for (i = 0; i < n && c->err == 0; i++) {
		len = jval_write(vals[i], small, sizeof(small));
		t = small;
		if (len >= sizeof(small)) {
			if ((big = malloc(len + 1)) == NULL)
				return cnomem(c);
			jval_write(vals[i], big, len + 1);
			t = big;
		}
		emit(c, "%s\"", i ? " | " : "");
		emit_lit(c, t, len);
		emit(c, "\"");
		free(big);
		big = NULL;
	}
	return emit(c, ") ws\n");
}

static int
get_count(struct conv *c, const struct jval *s, const char *kw, long *v)
{
	const struct jval *x = jval_get(s, kw);
	double d;

	if (x == NULL)
		return 0;
	d = jval_num(x);
	if (jval_type(x) != JT_NUM || d < 0 || d != floor(d))
		return serr(c, kw, "expected a non-negative integer");
	if (d > GRAMMAR_MAX_REPEAT)
		return serr(c, kw, "%g is above the limit of %d", d,
		    GRAMMAR_MAX_REPEAT);
	*v = (long)d;
	return 0;
}

static int
conv_string(struct conv *c, const struct jval *s, int r)
{
	long min = 0, max = -1;

	if (get_count(c, s, "minLength", &min) < 0 ||
	    get_count(c, s, "maxLength", &max) < 0)
		return c->err;
	if (max >= 0 && max < min)
		return serr(c, "maxLength", "below minLength");
	if (min == 0 && max < 0) {
		need(c, HAVE_STRING);
		return emit(c, "r%d ::= string\n", r);
	}
	need(c, HAVE_WS | HAVE_CHAR);
	if (max < 0)
		return emit(c, "r%d ::= \"\\\"\" char{%ld,} \"\\\"\" ws\n", r,
		    min);
	return emit(c, "r%d ::= \"\\\"\" char{%ld,%ld} \"\\\"\" ws\n", r, min,
	    max);
}

static int
conv_array(struct conv *c, const struct jval *s, int r)
{
	const struct jval *items = jval_get(s, "items");
	long min = 0, max = -1;
	int item, more;

	if (get_count(c, s, "minItems", &min) < 0 ||
	    get_count(c, s, "maxItems", &max) < 0)
		return c->err;
	if (max >= 0 && max < min)
		return serr(c, "maxItems", "below minItems");
	if (items != NULL) {
		if (conv_sub(c, items, "items", &item) < 0)
			return c->err;
	} else {
		need(c, HAVE_VALUE);
		if (new_rule(c, &item) < 0)
			return c->err;
		emit(c, "r%d ::= value\n", item);
	}
	need(c, HAVE_WS);
	if (max == 0)
		return emit(c, "r%d ::= \"[\" ws \"]\" ws\n", r);
	if (new_rule(c, &more) < 0)
		return c->err;
	emit(c, "r%d ::= \",\" ws r%d\n", more, item);
	emit(c, "r%d ::= \"[\" ws %sr%d r%d", r, min == 0 ? "(" : "", item,
	    more);
	if (max < 0)
		emit(c, "{%ld,}", min > 0 ? min - 1 : 0);
	else
		emit(c, "{%ld,%ld}", min > 0 ? min - 1 : 0, max - 1);
	return emit(c, "%s \"]\" ws\n", min == 0 ? ")?" : "");
}

static int
conv_object(struct conv *c, const struct jval *s, int r)
{
	const struct jval *props = jval_get(s, "properties");
	const struct jval *req = jval_get(s, "required");
	const struct jval *add = jval_get(s, "additionalProperties");
	const struct jval *p;
	size_t n, i, j;
	int base, kv0, extra = -1, val, k;
	bool required;

	if (props != NULL && jval_type(props) != JT_OBJ)
		return serr(c, "properties", "expected an object");
	if (req != NULL && jval_type(req) != JT_ARR)
		return serr(c, "required", "expected an array of names");
	for (i = 0; req != NULL && i < jval_len(req); i++) {
		if (jval_type(jval_at(req, i)) != JT_STR)
			return serr(c, "required", "expected an array of "
			    "names");
		if (props == NULL ||
		    jval_get(props, jval_str(jval_at(req, i), NULL)) == NULL)
			return serr(c, "required", "\"%.64s\" is not among the "
			    "properties", jval_str(jval_at(req, i), NULL));
	}
	n = props != NULL ? jval_len(props) : 0;
	need(c, HAVE_WS);
	/* kv rules kv0 + i, then the extra member rule */
	if (reserve(c, (int)n, &kv0) < 0)
		return c->err;
	for (i = 0; i < n; i++) {
		p = jval_at(props, i);
		{
			size_t old = path_push(c, "properties");

			if (conv_sub(c, p, jval_key(p), &val) < 0) {
				path_pop(c, old);
				return c->err;
			}
			path_pop(c, old);
		}
		emit(c, "r%d ::= \"", kv0 + (int)i);
		{
			char key[300];
			size_t kl;
			const char *kt = jval_key(p);

			/* the key as a JSON string literal */
			kl = strlen(kt);
			if (kl > 200)
				return serr(c, "properties", "a key longer "
				    "than 200 bytes");
			key[0] = '"';
			for (j = 0, k = 1; j < kl; j++) {
				if (kt[j] == '"' || kt[j] == '\\')
					key[k++] = '\\';
				key[k++] = kt[j];
			}
			key[k++] = '"';
			if (strpbrk(kt, "\x01\x02\x03\x04\x05\x06\x07\x08\t\n"
			    "\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16"
			    "\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f") != NULL)
				return serr(c, "properties", "control "
				    "characters in a key are not supported");
			emit_lit(c, key, (size_t)k);
		}
		emit(c, "\" ws \":\" ws r%d\n", val);
	}
	if (add == NULL || (jval_type(add) == JT_BOOL && jval_bool(add))) {
		need(c, HAVE_VALUE);
		if (new_rule(c, &extra) < 0)
			return c->err;
		emit(c, "r%d ::= string \":\" ws value\n", extra);
	} else if (jval_type(add) == JT_OBJ) {
		if (conv_sub(c, add, "additionalProperties", &val) < 0)
			return c->err;
		need(c, HAVE_STRING);
		if (new_rule(c, &extra) < 0)
			return c->err;
		emit(c, "r%d ::= string \":\" ws r%d\n", extra, val);
	} else if (jval_type(add) != JT_BOOL) {
		return serr(c, "additionalProperties", "expected a boolean or "
		    "a schema");
	}
	/* rest rules: base + 2 i + (one already written) */
	if (reserve(c, 2 * (int)n + 2, &base) < 0)
		return c->err;
	if (extra < 0)
		emit(c, "r%d ::= \"\"\nr%d ::= \"\"\n", base + 2 * (int)n,
		    base + 2 * (int)n + 1);
	else
		emit(c, "r%d ::= (r%d (\",\" ws r%d)*)?\n"
		    "r%d ::= (\",\" ws r%d)*\n", base + 2 * (int)n, extra,
		    extra, base + 2 * (int)n + 1, extra);
	for (i = n; i-- > 0;) {
		p = jval_at(props, i);
		required = false;
		for (j = 0; req != NULL && j < jval_len(req); j++)
			if (strcmp(jval_str(jval_at(req, j), NULL),
			    jval_key(p)) == 0)
				required = true;
		for (k = 0; k < 2; k++) {
			emit(c, "r%d ::= %sr%d r%d", base + 2 * (int)i + k,
			    k ? "\",\" ws " : "", kv0 + (int)i,
			    base + 2 * (int)(i + 1) + 1);
			if (!required)
				emit(c, " | r%d", base + 2 * (int)(i + 1) + k);
			emit(c, "\n");
		}
	}
	return emit(c, "r%d ::= \"{\" ws r%d \"}\" ws\n", r, base);
}

/* Keywords that constrain in ways not supported: refuse, never ignore. */
static int
check_unsupported(struct conv *c, const struct jval *s)
{
	static const char *const no[] = {
		"pattern", "allOf", "not", "if", "then", "else",
		"prefixItems", "patternProperties", "contains",
		"uniqueItems", "minProperties", "maxProperties",
		"multipleOf", "propertyNames", "dependentRequired",
		"dependentSchemas", "unevaluatedProperties",
		"unevaluatedItems", "additionalItems",
	};
	size_t i;

	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (jval_get(s, no[i]) != NULL)
			return serr(c, no[i], "keyword not supported");
	return 0;
}

/* One type name's grammar for schema s, as rule r. */
static int
conv_type(struct conv *c, const struct jval *s, const char *t, int r)
{
	const struct jval *mn, *mx;

	if (strcmp(t, "object") == 0)
		return conv_object(c, s, r);
	if (strcmp(t, "array") == 0)
		return conv_array(c, s, r);
	if (strcmp(t, "string") == 0)
		return conv_string(c, s, r);
	if (strcmp(t, "integer") == 0)
		return conv_integer(c, s, r);
	if (strcmp(t, "number") == 0) {
		mn = jval_get(s, "minimum");
		mx = jval_get(s, "maximum");
		if (mx != NULL || jval_get(s, "exclusiveMinimum") != NULL ||
		    jval_get(s, "exclusiveMaximum") != NULL ||
		    (mn != NULL && !(jval_type(mn) == JT_NUM &&
		    jval_num(mn) == 0)))
			return serr(c, mx != NULL ? "maximum" : "minimum",
			    "bounds on a number are supported only as "
			    "minimum 0 (use integer for a range)");
		need(c, HAVE_NUMBER);
		if (mn != NULL)
			return emit(c, "r%d ::= (\"0\" | [1-9] [0-9]{0,15}) "
			    "(\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? "
			    "ws\n", r);
		return emit(c, "r%d ::= number\n", r);
	}
	if (strcmp(t, "boolean") == 0) {
		need(c, HAVE_WS);
		return emit(c, "r%d ::= (\"true\" | \"false\") ws\n", r);
	}
	if (strcmp(t, "null") == 0) {
		need(c, HAVE_WS);
		return emit(c, "r%d ::= \"null\" ws\n", r);
	}
	return serr(c, "type", "unknown type \"%.32s\"", t);
}

/* anyOf / oneOf (kw) list x as rule r: one rule per alternative. */
static int
conv_any_of(struct conv *c, const struct jval *x, const char *kw, int r)
{
	int *subs;
	size_t i, old;

	if (jval_type(x) != JT_ARR || jval_len(x) == 0)
		return serr(c, kw, "expected a non-empty array");
	if ((subs = calloc(jval_len(x), sizeof(*subs))) == NULL)
		return cnomem(c);
	old = path_push(c, kw);
	for (i = 0; i < jval_len(x) && c->err == 0; i++) {
		char idx[24];

		snprintf(idx, sizeof(idx), "%zu", i);
		conv_sub(c, jval_at(x, i), idx, &subs[i]);
	}
	path_pop(c, old);
	emit(c, "r%d ::=", r);
	for (i = 0; i < jval_len(x); i++)
		emit(c, "%s r%d", i ? " |" : "", subs[i]);
	emit(c, "\n");
	free(subs);
	return c->err;
}

/* A list of type names t for schema s as rule r. */
static int
conv_types(struct conv *c, const struct jval *s, const struct jval *t,
    int r)
{
	int first = c->n_rules, sub;
	size_t i;

	if (jval_type(t) != JT_ARR || jval_len(t) == 0)
		return serr(c, "type", "expected a type name or a list of them");
	for (i = 0; i < jval_len(t); i++) {
		if (jval_type(jval_at(t, i)) != JT_STR)
			return serr(c, "type", "expected a type name or a list "
			    "of them");
		if (new_rule(c, &sub) < 0)
			return c->err;
	}
	emit(c, "r%d ::=", r);
	for (i = 0; i < jval_len(t); i++)
		emit(c, "%s r%d", i ? " |" : "", first + (int)i);
	emit(c, "\n");
	for (i = 0; i < jval_len(t) && c->err == 0; i++)
		conv_type(c, s, jval_str(jval_at(t, i), NULL),
		    first + (int)i);
	return c->err;
}

/* Schema s as a new rule, its number in *rule. */
static int
conv_schema(struct conv *c, const struct jval *s, int *rule)
{
	const struct jval *t, *x;
	const struct jval *vals[1];
	const char *kw;
	int r;
	size_t i;

	if (new_rule(c, &r) < 0)
		return c->err;
	*rule = r;
	if (jval_type(s) == JT_BOOL) {
		if (!jval_bool(s))
			return serr(c, NULL, "the schema false allows nothing");
		need(c, HAVE_VALUE);
		return emit(c, "r%d ::= value\n", r);
	}
	if (jval_type(s) != JT_OBJ)
		return serr(c, NULL, "expected a schema (an object or a "
		    "boolean)");
	if (check_unsupported(c, s) < 0)
		return c->err;
	if ((x = jval_get(s, "$ref")) != NULL)
		return conv_ref(c, x, r);
	if ((x = jval_get(s, "const")) != NULL) {
		vals[0] = x;
		return conv_values(c, vals, 1, r);
	}
	if ((x = jval_get(s, "enum")) != NULL) {
		const struct jval **v;

		if (jval_type(x) != JT_ARR || jval_len(x) == 0)
			return serr(c, "enum", "expected a non-empty array");
		if ((v = calloc(jval_len(x), sizeof(*v))) == NULL)
			return cnomem(c);
		for (i = 0; i < jval_len(x); i++)
			v[i] = jval_at(x, i);
		conv_values(c, v, jval_len(x), r);
		free(v);
		return c->err;
	}
	kw = jval_get(s, "anyOf") != NULL ? "anyOf" :
	    jval_get(s, "oneOf") != NULL ? "oneOf" : NULL;
	if (kw != NULL)
		return conv_any_of(c, jval_get(s, kw), kw, r);
	t = jval_get(s, "type");
	if (t == NULL) {
		if (jval_get(s, "properties") != NULL)
			return conv_object(c, s, r);
		if (jval_get(s, "items") != NULL)
			return conv_array(c, s, r);
		need(c, HAVE_VALUE);
		return emit(c, "r%d ::= value\n", r);
	}
	if (jval_type(t) == JT_STR)
		return conv_type(c, s, jval_str(t, NULL), r);
	return conv_types(c, s, t, r);
}

/* ---- entry points ---- */

int
schema_to_gbnf(const char *text, size_t len, char **gbnf, size_t *gbnf_len,
    struct cp_err *e)
{
	struct conv *c;
	struct jdoc *d = NULL;
	int rc, r, i;

	*gbnf = NULL;
	*gbnf_len = 0;
	if (len > GRAMMAR_MAX_TEXT)
		return cp_err_set(e, -E2BIG, "schema of %zu bytes, at most %d",
		    len, GRAMMAR_MAX_TEXT);
	if ((rc = jdoc_parse(text, len, &d, e)) < 0)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		jdoc_free(d);
		return cp_err_set(e, -ENOMEM, "schema: out of memory");
	}
	c->root = jdoc_root(d);
	c->e = e;
	if (conv_schema(c, c->root, &r) == 0)
		emit(c, "root ::= r%d\n", r);
	rc = c->err;
	if (rc == 0) {
		*gbnf = c->out.p;
		*gbnf_len = c->out.n;
		c->out.p = NULL;
	}
	for (i = 0; i < c->n_refs; i++)
		free(c->refs[i].ptr);
	free(c->out.p);
	free(c);
	jdoc_free(d);
	return rc;
}

int
grammar_from_schema(const char *text, size_t len, struct grammar **out,
    struct cp_err *e)
{
	char *g;
	size_t n;
	int rc;

	*out = NULL;
	if ((rc = schema_to_gbnf(text, len, &g, &n, e)) < 0)
		return rc;
	if (n > GRAMMAR_MAX_TEXT) {
		free(g);
		return cp_err_set(e, -E2BIG, "schema: its grammar has %zu "
		    "bytes, at most %d", n, GRAMMAR_MAX_TEXT);
	}
	rc = grammar_from_gbnf(g, n, out, e);
	if (rc < 0)
		cp_err_prefix(e, "schema: ");
	free(g);
	return rc;
}

int
grammar_any_json(struct grammar **out, struct cp_err *e)
{
	return grammar_from_schema("{}", 2, out, e);
}
