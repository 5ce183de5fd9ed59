/*
 * json_read.c - the strict JSON reader of json_read.h.
 *
 * Values live in one array (d->v); a container's children are the run
 * d->kids[first, first + n) of value indices, filled after the parse (the
 * parse links siblings, then each container's list is laid out once), so
 * jval_at() is O(1).  Decoded strings and keys live in one byte arena,
 * referred to by offset while it grows.
 */
#include "json_read.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jval {
	struct jdoc *doc;
	enum jtype type;
	bool b;
	double num;
	size_t str, len;	/* string: offset in doc->bytes, length;
				   number: offset in the text, length */
	size_t key;		/* offset of the key in bytes, or SIZE_MAX */
	uint32_t first;		/* children: kids[first, first + n) */
	uint32_t n;
	uint32_t next;		/* next sibling during the parse, or 0 */
	uint32_t last;		/* last child during the parse, or 0 */
};

struct jdoc {
	struct jval *v;
	uint32_t n_v, cap_v;
	uint32_t *kids;
	char *bytes;
	size_t n_bytes, cap_bytes;
	const char *text;	/* source, for numbers' text */
	char *text_copy;
};

struct jparse {
	const char *s;
	size_t len, pos;
	struct jdoc *d;
	struct cp_err *e;
	int depth;
};

__attribute__((format(printf, 2, 3)))
static int
jerr(struct jparse *p, const char *fmt, ...)
{
	char msg[CP_ERR_MSG];
	size_t i;
	int line = 1, col = 1;
	va_list ap;

	for (i = 0; i < p->pos && i < p->len; i++) {
		if (p->s[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cp_err_set(p->e, -EINVAL, "JSON line %d col %d: %s", line,
	    col, msg);
}

static int
new_value(struct jparse *p, enum jtype t, uint32_t *id)
{
	struct jdoc *d = p->d;
	struct jval *nv;
	uint32_t nc;

	if (d->n_v >= JDOC_MAX_VALUES)
		return cp_err_set(p->e, -E2BIG, "JSON: more than %d values",
		    JDOC_MAX_VALUES);
	if (d->n_v == d->cap_v) {
		nc = d->cap_v ? d->cap_v * 2 : 64;
		if ((nv = realloc(d->v, nc * sizeof(*nv))) == NULL)
			return cp_err_set(p->e, -ENOMEM, "JSON: out of memory");
		d->v = nv;
		d->cap_v = nc;
	}
	*id = d->n_v++;
	memset(&d->v[*id], 0, sizeof(d->v[*id]));
	d->v[*id].type = t;
	d->v[*id].key = SIZE_MAX;
	return 0;
}

static int
put_bytes(struct jparse *p, const void *b, size_t n)
{
	struct jdoc *d = p->d;
	size_t nc;
	char *nb;

	if (d->n_bytes + n + 1 > d->cap_bytes) {
		nc = (d->n_bytes + n + 1) * 2;
		if ((nb = realloc(d->bytes, nc)) == NULL)
			return cp_err_set(p->e, -ENOMEM, "JSON: out of memory");
		d->bytes = nb;
		d->cap_bytes = nc;
	}
	memcpy(d->bytes + d->n_bytes, b, n);
	d->n_bytes += n;
	return 0;
}

static void
skip_ws(struct jparse *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' ||
	    p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
	    p->s[p->pos] == '\r'))
		p->pos++;
}

static int
hex4(struct jparse *p, uint32_t *v)
{
	int i, c;

	*v = 0;
	for (i = 0; i < 4; i++) {
		if (p->pos >= p->len)
			return jerr(p, "unterminated \\u escape");
		c = (uint8_t)p->s[p->pos];
		if (c >= '0' && c <= '9')
			c -= '0';
		else if (c >= 'a' && c <= 'f')
			c -= 'a' - 10;
		else if (c >= 'A' && c <= 'F')
			c -= 'A' - 10;
		else
			return jerr(p, "bad hex digit in \\u escape");
		*v = *v << 4 | (uint32_t)c;
		p->pos++;
	}
	return 0;
}

static int
put_utf8(struct jparse *p, uint32_t cp)
{
	uint8_t b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (uint8_t)cp, n = 1;
	} else if (cp < 0x800) {
		b[0] = (uint8_t)(0xc0 | cp >> 6);
		b[1] = (uint8_t)(0x80 | (cp & 0x3f)), n = 2;
	} else if (cp < 0x10000) {
		b[0] = (uint8_t)(0xe0 | cp >> 12);
		b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		b[2] = (uint8_t)(0x80 | (cp & 0x3f)), n = 3;
	} else {
		b[0] = (uint8_t)(0xf0 | cp >> 18);
		b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
		b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		b[3] = (uint8_t)(0x80 | (cp & 0x3f)), n = 4;
	}
	return put_bytes(p, b, n);
}

/* Length of the valid UTF-8 sequence at s[0..left), 0 when invalid. */
static size_t
utf8_valid(const uint8_t *s, size_t left)
{
	size_t n, i;
	uint8_t lo = 0x80, hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (left < n || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* A string at p->pos (the opening quote), decoded into the arena. */
static int
parse_string(struct jparse *p, size_t *off, size_t *len)
{
	uint32_t cp, lo;
	size_t n;
	int rc, c;

	p->pos++;
	*off = p->d->n_bytes;
	for (;;) {
		if (p->pos >= p->len)
			return jerr(p, "unterminated string");
		c = (uint8_t)p->s[p->pos];
		if (c == '"')
			break;
		if (c < 0x20)
			return jerr(p, "control character in a string");
		if (c != '\\') {
			n = utf8_valid((const uint8_t *)p->s + p->pos,
			    p->len - p->pos);
			if (n == 0)
				return jerr(p, "invalid UTF-8 in a string");
			if ((rc = put_bytes(p, p->s + p->pos, n)) < 0)
				return rc;
			p->pos += n;
			continue;
		}
		p->pos++;
		c = p->pos < p->len ? (uint8_t)p->s[p->pos] : -1;
		p->pos++;
		switch (c) {
		case '"': case '\\': case '/':
			cp = (uint32_t)c;
			break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if ((rc = hex4(p, &cp)) < 0)
				return rc;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return jerr(p, "lone low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (p->pos + 2 > p->len ||
				    p->s[p->pos] != '\\' ||
				    p->s[p->pos + 1] != 'u')
					return jerr(p, "lone high surrogate");
				p->pos += 2;
				if ((rc = hex4(p, &lo)) < 0)
					return rc;
				if (lo < 0xdc00 || lo > 0xdfff)
					return jerr(p, "bad surrogate pair");
				cp = 0x10000 + ((cp - 0xd800) << 10) +
				    (lo - 0xdc00);
			}
			break;
		default:
			p->pos--;
			return jerr(p, "bad escape");
		}
		if ((rc = put_utf8(p, cp)) < 0)
			return rc;
	}
	p->pos++;
	*len = p->d->n_bytes - *off;
	return put_bytes(p, "", 1) < 0 ? -ENOMEM : 0;
}

static bool
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static int
parse_number(struct jparse *p, uint32_t id)
{
	size_t start = p->pos;
	const char *s = p->s;
	char buf[64];

#define AT(i)	((i) < p->len ? (uint8_t)s[i] : -1)
	if (AT(p->pos) == '-')
		p->pos++;
	if (AT(p->pos) == '0') {
		p->pos++;
	} else if (is_digit(AT(p->pos))) {
		while (is_digit(AT(p->pos)))
			p->pos++;
	} else {
		return jerr(p, "bad number");
	}
	if (AT(p->pos) == '.') {
		p->pos++;
		if (!is_digit(AT(p->pos)))
			return jerr(p, "bad number: digits expected after '.'");
		while (is_digit(AT(p->pos)))
			p->pos++;
	}
	if (AT(p->pos) == 'e' || AT(p->pos) == 'E') {
		p->pos++;
		if (AT(p->pos) == '+' || AT(p->pos) == '-')
			p->pos++;
		if (!is_digit(AT(p->pos)))
			return jerr(p, "bad number: digits expected in the "
			    "exponent");
		while (is_digit(AT(p->pos)))
			p->pos++;
	}
#undef AT
	p->d->v[id].str = start;
	p->d->v[id].len = p->pos - start;
	if (p->pos - start < sizeof(buf)) {
		memcpy(buf, s + start, p->pos - start);
		buf[p->pos - start] = '\0';
		p->d->v[id].num = strtod(buf, NULL);
	} else {
		p->d->v[id].num = strtod(s + start, NULL);
	}
	return 0;
}

static int parse_value(struct jparse *p, uint32_t *id);

static void
add_child(struct jdoc *d, uint32_t parent, uint32_t child)
{
	if (d->v[parent].n == 0)
		d->v[parent].first = child;
	else
		d->v[d->v[parent].last].next = child;
	d->v[parent].last = child;
	d->v[parent].n++;
}

static int
parse_container(struct jparse *p, uint32_t id, bool obj)
{
	size_t koff = 0, klen;
	uint32_t kid;
	int rc;

	if (++p->depth > JDOC_MAX_DEPTH)
		return cp_err_set(p->e, -E2BIG, "JSON nested deeper than %d",
		    JDOC_MAX_DEPTH);
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']')) {
		p->pos++;
		p->depth--;
		return 0;
	}
	for (;;) {
		if (obj) {
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return jerr(p, "expected a key string");
			if ((rc = parse_string(p, &koff, &klen)) < 0)
				return rc;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':')
				return jerr(p, "expected ':'");
			p->pos++;
		}
		if ((rc = parse_value(p, &kid)) < 0)
			return rc;
		if (obj)
			p->d->v[kid].key = koff;
		add_child(p->d, id, kid);
		skip_ws(p);
		if (p->pos < p->len && p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']'))
			break;
		return jerr(p, obj ? "expected ',' or '}'" :
		    "expected ',' or ']'");
	}
	p->pos++;
	p->depth--;
	return 0;
}

static int
parse_value(struct jparse *p, uint32_t *id)
{
	static const struct {
		const char *w;
		enum jtype t;
		bool b;
	} words[] = {
		{ "null", JT_NULL, false },
		{ "true", JT_BOOL, true },
		{ "false", JT_BOOL, false },
	};
	size_t i, n;
	int rc, c;

	skip_ws(p);
	if (p->pos >= p->len)
		return jerr(p, "expected a value");
	c = (uint8_t)p->s[p->pos];
	if (c == '{' || c == '[') {
		if ((rc = new_value(p, c == '{' ? JT_OBJ : JT_ARR, id)) < 0)
			return rc;
		return parse_container(p, *id, c == '{');
	}
	if (c == '"') {
		if ((rc = new_value(p, JT_STR, id)) < 0)
			return rc;
		return parse_string(p, &p->d->v[*id].str, &p->d->v[*id].len);
	}
	if (c == '-' || is_digit(c)) {
		if ((rc = new_value(p, JT_NUM, id)) < 0)
			return rc;
		return parse_number(p, *id);
	}
	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		n = strlen(words[i].w);
		if (p->len - p->pos >= n &&
		    memcmp(p->s + p->pos, words[i].w, n) == 0) {
			if ((rc = new_value(p, words[i].t, id)) < 0)
				return rc;
			p->d->v[*id].b = words[i].b;
			p->pos += n;
			return 0;
		}
	}
	return jerr(p, "unexpected '%c'", c);
}

int
jdoc_parse(const char *text, size_t len, struct jdoc **out,
    struct cp_err *e)
{
	struct jparse p = { text, len, 0, NULL, e, 0 };
	struct jdoc *d;
	uint32_t root, i, at = 0, k, c;
	int rc;

	*out = NULL;
	if ((d = calloc(1, sizeof(*d))) == NULL)
		return cp_err_set(e, -ENOMEM, "JSON: out of memory");
	p.d = d;
	if ((d->text_copy = malloc(len + 1)) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "JSON: out of memory");
		goto err;
	}
	memcpy(d->text_copy, text, len);
	d->text_copy[len] = '\0';
	d->text = d->text_copy;
	p.s = d->text;
	if ((rc = parse_value(&p, &root)) < 0)
		goto err;
	skip_ws(&p);
	if (p.pos != len) {
		rc = jerr(&p, "text after the value");
		goto err;
	}
	if ((d->kids = calloc((size_t)d->n_v + 1, sizeof(*d->kids))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "JSON: out of memory");
		goto err;
	}
	for (i = 0; i < d->n_v; i++) {
		if (d->v[i].n == 0)
			continue;
		c = d->v[i].first;
		d->v[i].first = at;
		for (k = 0; k < d->v[i].n; k++) {
			d->kids[at++] = c;
			c = d->v[c].next;
		}
	}
	for (i = 0; i < d->n_v; i++)
		d->v[i].doc = d;
	*out = d;
	return 0;
err:
	jdoc_free(d);
	return rc;
}

void
jdoc_free(struct jdoc *d)
{
	if (d == NULL)
		return;
	free(d->v);
	free(d->kids);
	free(d->bytes);
	free(d->text_copy);
	free(d);
}

const struct jval *
jdoc_root(const struct jdoc *d)
{
	return &d->v[0];
}

enum jtype
jval_type(const struct jval *v)
{
	return v->type;
}

size_t
jval_len(const struct jval *v)
{
	return v->type == JT_ARR || v->type == JT_OBJ ? v->n : 0;
}

const struct jval *
jval_at(const struct jval *v, size_t i)
{
	if (i >= jval_len(v))
		return NULL;
	return &v->doc->v[v->doc->kids[v->first + i]];
}

const char *
jval_key(const struct jval *v)
{
	return v->key == SIZE_MAX ? NULL : v->doc->bytes + v->key;
}

const struct jval *
jval_get(const struct jval *v, const char *key)
{
	const struct jval *c;
	size_t i;

	if (v->type != JT_OBJ)
		return NULL;
	for (i = 0; i < v->n; i++) {
		c = jval_at(v, i);
		if (strcmp(jval_key(c), key) == 0)
			return c;
	}
	return NULL;
}

const char *
jval_str(const struct jval *v, size_t *len)
{
	if (v->type != JT_STR)
		return NULL;
	if (len != NULL)
		*len = v->len;
	return v->doc->bytes + v->str;
}

double
jval_num(const struct jval *v)
{
	return v->type == JT_NUM ? v->num : 0;
}

const char *
jval_num_text(const struct jval *v, size_t *len)
{
	if (v->type != JT_NUM)
		return NULL;
	*len = v->len;
	return v->doc->text + v->str;
}

bool
jval_bool(const struct jval *v)
{
	return v->type == JT_BOOL && v->b;
}

bool
jval_equal(const struct jval *a, const struct jval *b)
{
	size_t i;

	if (a->type != b->type)
		return false;
	switch (a->type) {
	case JT_NULL:
		return true;
	case JT_BOOL:
		return a->b == b->b;
	case JT_NUM:
		return a->num == b->num;
	case JT_STR:
		return a->len == b->len && memcmp(jval_str(a, NULL),
		    jval_str(b, NULL), a->len) == 0;
	case JT_ARR:
	case JT_OBJ:
		if (a->n != b->n)
			return false;
		for (i = 0; i < a->n; i++) {
			if (a->type == JT_OBJ && strcmp(jval_key(jval_at(a, i)),
			    jval_key(jval_at(b, i))) != 0)
				return false;
			if (!jval_equal(jval_at(a, i), jval_at(b, i)))
				return false;
		}
		return true;
	}
	return false;
}

/* Appends to out[*n..cap) what fits, counting everything in *n. */
static void
w_bytes(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++, (*n)++)
		if (*n + 1 < cap)
			out[*n] = s[i];
}

static void
w_string(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
	char esc[8];
	size_t i;
	uint8_t c;

	w_bytes(out, cap, n, "\"", 1);
	for (i = 0; i < len; i++) {
		c = (uint8_t)s[i];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			w_bytes(out, cap, n, esc, 2);
		} else if (c < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			w_bytes(out, cap, n, esc, 6);
		} else {
			w_bytes(out, cap, n, s + i, 1);
		}
	}
	w_bytes(out, cap, n, "\"", 1);
}

static void
w_value(const struct jval *v, char *out, size_t cap, size_t *n)
{
	const struct jval *c;
	const char *k;
	size_t i, l;

	switch (v->type) {
	case JT_NULL:
		w_bytes(out, cap, n, "null", 4);
		break;
	case JT_BOOL:
		w_bytes(out, cap, n, v->b ? "true" : "false", v->b ? 4 : 5);
		break;
	case JT_NUM:
		k = jval_num_text(v, &l);
		w_bytes(out, cap, n, k, l);
		break;
	case JT_STR:
		k = jval_str(v, &l);
		w_string(out, cap, n, k, l);
		break;
	case JT_ARR:
	case JT_OBJ:
		w_bytes(out, cap, n, v->type == JT_ARR ? "[" : "{", 1);
		for (i = 0; i < v->n; i++) {
			c = jval_at(v, i);
			if (i > 0)
				w_bytes(out, cap, n, ",", 1);
			if (v->type == JT_OBJ) {
				k = jval_key(c);
				w_string(out, cap, n, k, strlen(k));
				w_bytes(out, cap, n, ":", 1);
			}
			w_value(c, out, cap, n);
		}
		w_bytes(out, cap, n, v->type == JT_ARR ? "]" : "}", 1);
		break;
	}
}

size_t
jval_write(const struct jval *v, char *out, size_t cap)
{
	size_t n = 0;

	w_value(v, out, cap, &n);
	if (cap > 0)
		out[n < cap ? n : cap - 1] = '\0';
	return n;
}
