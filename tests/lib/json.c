/*
 * json.c - recursive-descent JSON parser for tests (see json.h).
 */
#include "json.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	const char *s;
	size_t n, pos;
	char *err;
	size_t errlen;
	int failed;
};

static void
jp_fail(struct jp *p, const char *what)
{
	if (!p->failed && p->errlen > 0)
		snprintf(p->err, p->errlen, "json: %s at byte %zu", what,
		    p->pos);
	p->failed = 1;
}

static void
skip_ws(struct jp *p)
{
	while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
	    p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int
lit(struct jp *p, const char *w)
{
	size_t k = strlen(w);

	if (p->n - p->pos < k || memcmp(p->s + p->pos, w, k) != 0) {
		jp_fail(p, "bad literal");
		return -1;
	}
	p->pos += k;
	return 0;
}

static int
hex4(struct jp *p, unsigned *out)
{
	unsigned v = 0;
	int i;

	if (p->n - p->pos < 4) {
		jp_fail(p, "short \\u escape");
		return -1;
	}
	for (i = 0; i < 4; i++) {
		char c = p->s[p->pos++];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else {
			jp_fail(p, "bad \\u escape");
			return -1;
		}
	}
	*out = v;
	return 0;
}

static size_t
put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Parse a string at p->pos (on the quote) into a malloc'd buffer. */
static char *
parse_str(struct jp *p, size_t *len)
{
	size_t start = ++p->pos, k = 0, end;
	char *o;

	/* The decoded string is never longer than its source. */
	for (end = start; end < p->n && p->s[end] != '"'; end++)
		if (p->s[end] == '\\')
			end++;
	if (end >= p->n) {
		jp_fail(p, "unterminated string");
		return NULL;
	}
	if ((o = malloc(end - start + 1)) == NULL) {
		jp_fail(p, "out of memory");
		return NULL;
	}
	while (p->s[p->pos] != '"') {
		char c = p->s[p->pos++];
		unsigned cp, lo;

		if ((unsigned char)c < 0x20) {
			jp_fail(p, "control character in string");
			goto bad;
		}
		if (c != '\\') {
			o[k++] = c;
			continue;
		}
		c = p->s[p->pos++];
		switch (c) {
		case '"': case '\\': case '/':
			o[k++] = c;
			break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'u':
			if (hex4(p, &cp) != 0)
				goto bad;
			if (cp >= 0xD800 && cp <= 0xDBFF && p->n - p->pos >= 6 &&
			    p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
				size_t save = p->pos;

				p->pos += 2;
				if (hex4(p, &lo) != 0)
					goto bad;
				if (lo >= 0xDC00 && lo <= 0xDFFF)
					cp = 0x10000 + ((cp - 0xD800) << 10) +
					    (lo - 0xDC00);
				else
					p->pos = save;
			}
			k += put_utf8(o + k, cp);
			break;
		default:
			jp_fail(p, "bad escape");
			goto bad;
		}
	}
	p->pos++;
	o[k] = '\0';
	*len = k;
	return o;
bad:
	free(o);
	return NULL;
}

static int parse_value(struct jp *p, struct json *v, int depth);

/* Append a slot to v's items (and keys for objects); returns it or NULL. */
static struct json *
grow(struct jp *p, struct json *v, size_t *cap)
{
	if (v->n == *cap) {
		size_t c = *cap ? 2 * *cap : 4;
		struct json *it = realloc(v->items, c * sizeof(*it));

		if (it == NULL) {
			jp_fail(p, "out of memory");
			return NULL;
		}
		v->items = it;
		if (v->type == JSON_OBJECT) {
			char **k = realloc(v->keys, c * sizeof(*k));

			if (k == NULL) {
				jp_fail(p, "out of memory");
				return NULL;
			}
			v->keys = k;
		}
		*cap = c;
	}
	memset(&v->items[v->n], 0, sizeof(v->items[0]));
	if (v->type == JSON_OBJECT)
		v->keys[v->n] = NULL;
	return &v->items[v->n++];
}

static int
parse_container(struct jp *p, struct json *v, int depth)
{
	char close = v->type == JSON_ARRAY ? ']' : '}';
	size_t cap = 0;

	p->pos++;
	skip_ws(p);
	if (p->pos < p->n && p->s[p->pos] == close) {
		p->pos++;
		return 0;
	}
	for (;;) {
		struct json *it;
		char *key = NULL;
		size_t klen;

		skip_ws(p);
		if (v->type == JSON_OBJECT) {
			if (p->pos >= p->n || p->s[p->pos] != '"') {
				jp_fail(p, "expected a key");
				return -1;
			}
			if ((key = parse_str(p, &klen)) == NULL)
				return -1;
			skip_ws(p);
			if (p->pos >= p->n || p->s[p->pos] != ':') {
				free(key);
				jp_fail(p, "expected ':'");
				return -1;
			}
			p->pos++;
		}
		if ((it = grow(p, v, &cap)) == NULL) {
			free(key);
			return -1;
		}
		if (v->type == JSON_OBJECT)
			v->keys[v->n - 1] = key;
		if (parse_value(p, it, depth + 1) != 0)
			return -1;
		skip_ws(p);
		if (p->pos < p->n && p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->pos < p->n && p->s[p->pos] == close) {
			p->pos++;
			return 0;
		}
		jp_fail(p, "expected ',' or a closing bracket");
		return -1;
	}
}

static int
parse_value(struct jp *p, struct json *v, int depth)
{
	char c;

	memset(v, 0, sizeof(*v));
	if (depth > JSON_MAX_DEPTH) {
		jp_fail(p, "nested too deeply");
		return -1;
	}
	skip_ws(p);
	if (p->pos >= p->n) {
		jp_fail(p, "unexpected end");
		return -1;
	}
	c = p->s[p->pos];
	switch (c) {
	case '{':
		v->type = JSON_OBJECT;
		return parse_container(p, v, depth);
	case '[':
		v->type = JSON_ARRAY;
		return parse_container(p, v, depth);
	case '"':
		v->type = JSON_STRING;
		return (v->str = parse_str(p, &v->len)) ? 0 : -1;
	case 't':
		v->type = JSON_BOOL;
		v->b = true;
		return lit(p, "true");
	case 'f':
		v->type = JSON_BOOL;
		return lit(p, "false");
	case 'n':
		v->type = JSON_NULL;
		return lit(p, "null");
	default: {
		char buf[64], *end;
		size_t k = 0;

		while (p->pos + k < p->n && k < sizeof(buf) - 1 &&
		    strchr("+-0123456789.eE", p->s[p->pos + k]) != NULL) {
			buf[k] = p->s[p->pos + k];
			k++;
		}
		buf[k] = '\0';
		if (k == 0) {
			jp_fail(p, "unexpected character");
			return -1;
		}
		v->type = JSON_NUMBER;
		v->num = strtod(buf, &end);
		if (*end != '\0') {
			jp_fail(p, "bad number");
			return -1;
		}
		p->pos += k;
		return 0;
	}
	}
}

static void
free_value(struct json *v)
{
	size_t i;

	free(v->str);
	for (i = 0; i < v->n; i++) {
		free_value(&v->items[i]);
		if (v->keys != NULL)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
}

struct json *
json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct jp p = { text, len, 0, err, errlen, 0 };
	struct json *j = malloc(sizeof(*j));

	if (j == NULL) {
		jp_fail(&p, "out of memory");
		return NULL;
	}
	if (parse_value(&p, j, 0) == 0) {
		skip_ws(&p);
		if (p.pos == p.n)
			return j;
		jp_fail(&p, "trailing characters");
	}
	free_value(j);
	free(j);
	return NULL;
}

struct json *
json_parse_file(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	struct json *j = NULL;
	char *buf = NULL;
	long size;

	if (f == NULL) {
		if (errlen > 0)
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 ||
	    (buf = malloc((size_t)size + 1)) == NULL ||
	    fread(buf, 1, (size_t)size, f) != (size_t)size) {
		if (errlen > 0)
			snprintf(err, errlen, "%s: cannot read", path);
	} else {
		j = json_parse(buf, (size_t)size, err, errlen);
	}
	free(buf);
	fclose(f);
	return j;
}

void
json_free(struct json *j)
{
	if (j == NULL)
		return;
	free_value(j);
	free(j);
}

const struct json *
json_get(const struct json *j, const char *key)
{
	size_t i;

	if (j == NULL || j->type != JSON_OBJECT)
		return NULL;
	for (i = 0; i < j->n; i++)
		if (strcmp(j->keys[i], key) == 0)
			return &j->items[i];
	return NULL;
}

const struct json *
json_at(const struct json *j, size_t i)
{
	if (j == NULL || j->type != JSON_ARRAY || i >= j->n)
		return NULL;
	return &j->items[i];
}
