/*
 * cpq_json.c - JSON strings written, and the --history file read, by cpq
 * (cpq_json.h).
 *
 * The reader is a recursive-descent parser over the one shape cpq_json.h
 * gives, with no recursion: an array of flat objects.  It keeps a cursor
 * into the text and fails at the first byte that does not fit, with the
 * line and column computed from the cursor only then.  Decoded strings
 * are never longer than their JSON form, so every content goes into one
 * buffer of the text's size, allocated once; a key is decoded at the
 * buffer's end and compared there without being kept.
 */
#include "cpq_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cp_proto.h"

void
cpq_json_string(FILE *f, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, len;

	putc('"', f);
	while (i < n) {
		unsigned char c = s[i];

		if (c >= 0x80) {
			if ((len = cp_utf8_seq(s + i, n - i)) == 0) {
				fputs("\\ufffd", f);
				len = 1;
			} else {
				fwrite(s + i, 1, len, f);
			}
			i += len;
			continue;
		}
		switch (c) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (c < 0x20 || c == 0x7f)
				fprintf(f, "\\u%04x", c);
			else
				putc(c, f);
		}
		i++;
	}
	putc('"', f);
}

void
cpq_json_top(FILE *f, const struct cp_event *ev, const char *pieces,
    const uint32_t *lens)
{
	const unsigned char *p = (const unsigned char *)pieces;
	uint32_t i, j;

	fputs(",\"top_logprobs\":[", f);
	for (i = 0; i < ev->n_top; i++) {
		fprintf(f, "%s{\"id\":%d", i ? "," : "", (int)ev->top_ids[i]);
		if (p != NULL) {
			fputs(",\"token\":", f);
			cpq_json_string(f, (const char *)p, lens[i]);
		}
		fprintf(f, ",\"logprob\":%.9g", (double)ev->top_logprobs[i]);
		if (p != NULL) {
			fputs(",\"bytes\":[", f);
			for (j = 0; j < lens[i]; j++)
				fprintf(f, "%s%u", j ? "," : "", p[j]);
			putc(']', f);
			p += lens[i];
		}
		putc('}', f);
	}
	putc(']', f);
}

/* ---- the history reader ------------------------------------------------ */

struct rd {
	const unsigned char *s;
	size_t len, pos;
	char *out;		/* decoded strings (len bytes) */
	size_t out_len;
	char *err;
	size_t err_size;
};

static const char *const role_names[] = {
	[CP_CHAT_SYSTEM] = "system",
	[CP_CHAT_USER] = "user",
	[CP_CHAT_ASSISTANT] = "assistant",
	[CP_CHAT_TOOL] = "tool",
};

#define N_ROLES	(sizeof(role_names) / sizeof(role_names[0]))

/* Sets the error, at byte at, to "line L, column C: fmt..."; -EINVAL. */
static int __attribute__((format(printf, 3, 4)))
fail_at(struct rd *r, size_t at, const char *fmt, ...)
{
	size_t line = 1, col = 1, i, k;
	va_list ap;
	int n;

	for (i = 0; i < at && i < r->len; i++) {
		if (r->s[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	n = snprintf(r->err, r->err_size, "line %zu, column %zu: ", line, col);
	k = n < 0 ? 0 : (size_t)n;
	if (k < r->err_size) {
		va_start(ap, fmt);
		vsnprintf(r->err + k, r->err_size - k, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* What stands at the cursor, for messages: a character or "the end". */
static const char *
here(const struct rd *r, char buf[8])
{
	unsigned char c;

	if (r->pos >= r->len)
		return "the end of the file";
	c = r->s[r->pos];
	if (c >= 0x21 && c < 0x7f)
		snprintf(buf, 8, "'%c'", c);
	else
		snprintf(buf, 8, "0x%02x", c);
	return buf;
}

static void
skip_ws(struct rd *r)
{
	while (r->pos < r->len && (r->s[r->pos] == ' ' ||
	    r->s[r->pos] == '\t' || r->s[r->pos] == '\n' ||
	    r->s[r->pos] == '\r'))
		r->pos++;
}

/* Skips whitespace, then takes c; 0, or -EINVAL naming what. */
static int
expect(struct rd *r, char c, const char *what)
{
	char b[8];

	skip_ws(r);
	if (r->pos < r->len && r->s[r->pos] == (unsigned char)c) {
		r->pos++;
		return 0;
	}
	return fail_at(r, r->pos, "expected %s, found %s", what, here(r, b));
}

/* Four hex digits at the cursor as a number; -1 when they are not. */
static long
hex4(struct rd *r)
{
	long v = 0;
	int i;

	if (r->len - r->pos < 4)
		return -1;
	for (i = 0; i < 4; i++) {
		unsigned char c = r->s[r->pos + (size_t)i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	r->pos += 4;
	return v;
}

/* Appends code point cp (checked by the caller) to out as UTF-8. */
static void
put_utf8(struct rd *r, uint32_t cp)
{
	char *o = r->out + r->out_len;

	if (cp < 0x80) {
		o[0] = (char)cp;
		r->out_len += 1;
	} else if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		r->out_len += 2;
	} else if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		r->out_len += 3;
	} else {
		o[0] = (char)(0xf0 | cp >> 18);
		o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
		o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[3] = (char)(0x80 | (cp & 0x3f));
		r->out_len += 4;
	}
}

/*
 * The escape after a backslash (the cursor past it), decoded into out.
 * A \u escape is at most 6 bytes for at most 3 decoded, a pair 12 for 4:
 * out never overtakes the cursor.
 */
static int
escape(struct rd *r)
{
	size_t at = r->pos - 1;
	long hi, lo;
	char c;

	if (r->pos >= r->len)
		return fail_at(r, at, "a string ends inside an escape");
	c = (char)r->s[r->pos++];
	switch (c) {
	case '"': case '\\': case '/':
		r->out[r->out_len++] = c;
		return 0;
	case 'b':
		r->out[r->out_len++] = '\b';
		return 0;
	case 'f':
		r->out[r->out_len++] = '\f';
		return 0;
	case 'n':
		r->out[r->out_len++] = '\n';
		return 0;
	case 'r':
		r->out[r->out_len++] = '\r';
		return 0;
	case 't':
		r->out[r->out_len++] = '\t';
		return 0;
	case 'u':
		break;
	default:
		return fail_at(r, at, "unknown escape '\\%c' (expected one of "
		    "\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)",
		    c >= 0x21 && c < 0x7f ? c : '?');
	}
	if ((hi = hex4(r)) < 0)
		return fail_at(r, at, "\\u needs four hex digits");
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return fail_at(r, at, "\\u%04lx is a low surrogate without "
		    "a high one before it", hi);
	if (hi < 0xd800 || hi > 0xdbff) {
		put_utf8(r, (uint32_t)hi);
		return 0;
	}
	if (r->len - r->pos < 2 || r->s[r->pos] != '\\' ||
	    r->s[r->pos + 1] != 'u')
		return fail_at(r, at, "\\u%04lx is a high surrogate without "
		    "a \\u escape of a low one after it", hi);
	r->pos += 2;
	if ((lo = hex4(r)) < 0)
		return fail_at(r, r->pos - 2, "\\u needs four hex digits");
	if (lo < 0xdc00 || lo > 0xdfff)
		return fail_at(r, r->pos - 6, "\\u%04lx after the high "
		    "surrogate \\u%04lx is not a low surrogate", lo, hi);
	put_utf8(r, 0x10000 + (uint32_t)((hi - 0xd800) << 10 | (lo - 0xdc00)));
	return 0;
}

/*
 * A string at the cursor (after whitespace), decoded onto the end of out;
 * its decoded bytes start at *start and run to out_len.
 */
static int
string(struct rd *r, const char *what, size_t *start)
{
	size_t k;
	int rc;

	if ((rc = expect(r, '"', what)) < 0)
		return rc;
	*start = r->out_len;
	for (;;) {
		unsigned char c;

		if (r->pos >= r->len)
			return fail_at(r, r->pos, "a string is not closed");
		c = r->s[r->pos];
		if (c == '"') {
			r->pos++;
			return 0;
		}
		if (c == '\\') {
			r->pos++;
			if ((rc = escape(r)) < 0)
				return rc;
			continue;
		}
		if (c < 0x20)
			return fail_at(r, r->pos, "control character 0x%02x "
			    "in a string (write it as an escape)", c);
		if ((k = cp_utf8_seq(r->s + r->pos, r->len - r->pos)) == 0)
			return fail_at(r, r->pos, "bytes that are not UTF-8");
		memcpy(r->out + r->out_len, r->s + r->pos, k);
		r->out_len += k;
		r->pos += k;
	}
}

/*
 * Message idx (counted from 1): its role, and its content's offset in out
 * and length.
 */
static int
message(struct rd *r, size_t idx, int *role, size_t *off, size_t *len)
{
	size_t key, at, start, k;
	int seen_role = 0, seen_content = 0, rc;
	char b[8];

	skip_ws(r);
	at = r->pos;
	if ((rc = expect(r, '{', "'{' opening message object")) < 0)
		return rc;
	for (;;) {
		size_t key_at;

		skip_ws(r);
		key_at = r->pos;
		if ((rc = string(r, "'\"' opening a key (role or content)",
		    &key)) < 0)
			return rc;
		/* The key is not kept: it is compared where it was decoded. */
		k = r->out_len - key;
		r->out_len = key;
		if ((rc = expect(r, ':', "':' after a key")) < 0)
			return rc;
		if (k == 4 && memcmp(r->out + key, "role", 4) == 0) {
			if (seen_role++)
				return fail_at(r, key_at, "message %zu: "
				    "\"role\" given twice", idx);
			if ((rc = string(r, "a string (the role)", &start)) < 0)
				return rc;
			k = r->out_len - start;
			r->out_len = start;
			for (*role = 0; (size_t)*role < N_ROLES; (*role)++)
				if (strlen(role_names[*role]) == k &&
				    memcmp(r->out + start, role_names[*role],
				    k) == 0)
					break;
			if ((size_t)*role == N_ROLES)
				return fail_at(r, key_at, "message %zu: role "
				    "'%.*s', expected system, user, assistant "
				    "or tool", idx, (int)(k > 32 ? 32 : k),
				    r->out + start);
		} else if (k == 7 && memcmp(r->out + key, "content", 7) == 0) {
			if (seen_content++)
				return fail_at(r, key_at, "message %zu: "
				    "\"content\" given twice", idx);
			if ((rc = string(r, "a string (the content)",
			    off)) < 0)
				return rc;
			*len = r->out_len - *off;
		} else {
			return fail_at(r, key_at, "message %zu: unknown key "
			    "(expected \"role\" and \"content\" only)", idx);
		}
		skip_ws(r);
		if (r->pos < r->len && r->s[r->pos] == ',') {
			r->pos++;
			continue;
		}
		if (r->pos < r->len && r->s[r->pos] == '}') {
			r->pos++;
			break;
		}
		return fail_at(r, r->pos, "expected ',' or '}' in message "
		    "%zu, found %s", idx, here(r, b));
	}
	if (!seen_role || !seen_content)
		return fail_at(r, at, "message %zu has no \"%s\"", idx,
		    seen_role ? "content" : "role");
	return 0;
}

int
cpq_history_parse(const char *text, size_t len, size_t max_msgs,
    struct cpq_history *h, char *err, size_t size)
{
	struct rd r = { (const unsigned char *)text, len, 0, NULL, 0, err,
	    size };
	struct cp_message *msgs = NULL, *nm;
	size_t n = 0, cap = 0, i, *offs = NULL, *no;
	char b[8];
	int rc;

	memset(h, 0, sizeof(*h));
	if (size > 0)
		err[0] = '\0';
	if ((r.out = malloc(len + 1)) == NULL)
		return -ENOMEM;
	if ((rc = expect(&r, '[', "'[' opening the array of messages")) < 0)
		goto err;
	skip_ws(&r);
	if (r.pos < r.len && r.s[r.pos] == ']') {
		r.pos++;
		goto end;
	}
	for (;;) {
		int role = 0;
		size_t off = 0, mlen = 0;

		skip_ws(&r);
		if (n == max_msgs) {
			rc = fail_at(&r, r.pos, "more than %zu messages",
			    max_msgs);
			goto err;
		}
		if ((rc = message(&r, n + 1, &role, &off, &mlen)) < 0)
			goto err;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			nm = realloc(msgs, cap * sizeof(*msgs));
			no = nm == NULL ? NULL : realloc(offs, cap *
			    sizeof(*offs));
			if (nm != NULL)
				msgs = nm;
			if (no == NULL) {
				rc = -ENOMEM;
				goto err;
			}
			offs = no;
		}
		msgs[n].role = role;
		msgs[n].len = mlen;
		offs[n++] = off;
		skip_ws(&r);
		if (r.pos < r.len && r.s[r.pos] == ',') {
			r.pos++;
			continue;
		}
		if (r.pos < r.len && r.s[r.pos] == ']') {
			r.pos++;
			break;
		}
		rc = fail_at(&r, r.pos, "expected ',' or ']' after message "
		    "%zu, found %s", n, here(&r, b));
		goto err;
	}
end:
	skip_ws(&r);
	if (r.pos != r.len) {
		rc = fail_at(&r, r.pos, "%s after the array", here(&r, b));
		goto err;
	}
	/* out no longer moves: the contents can be pointed at. */
	for (i = 0; i < n; i++)
		msgs[i].content = msgs[i].len > 0 ? r.out + offs[i] : NULL;
	free(offs);
	h->msgs = msgs;
	h->n = n;
	h->buf = r.out;
	return 0;
err:
	free(offs);
	free(msgs);
	free(r.out);
	return rc;
}

void
cpq_history_free(struct cpq_history *h)
{
	free(h->msgs);
	free(h->buf);
	memset(h, 0, sizeof(*h));
}
