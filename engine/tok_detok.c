/*
 * tok_detok.c - what tokens render to, and the streaming detokenizer.
 *
 * Every token's rendering is computed once at load time into one pool, so
 * decoding only copies bytes.  The detokenizer passes those bytes through a
 * UTF-8 validator: a sequence cut between two tokens is held back until
 * its last byte arrives, and ill-formed input becomes U+FFFD, one per
 * maximal ill-formed subpart (the Unicode "best practice" that Python's
 * errors="replace" follows), so the output is valid UTF-8 at every step.
 */
#include "tok_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Rendering of token te into out (room for te->len bytes); returns its length or -1. */
static long
render(const struct tokenizer *t, const struct tok_entry *te, char *out)
{
	const char *s = t->text + te->off;
	size_t n = te->len, i = 0, k = 0;

	switch (te->type) {
	case TOK_TYPE_CONTROL:
	case TOK_TYPE_UNKNOWN:
	case TOK_TYPE_USER_DEFINED:
		memcpy(out, s, n);
		return (long)n;
	case TOK_TYPE_BYTE:
		if (t->kind != TOK_KIND_SPM)
			return 0;
		if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' ||
		    hexval(s[3]) < 0 || hexval(s[4]) < 0)
			return -1;
		out[0] = (char)(hexval(s[3]) * 16 + hexval(s[4]));
		return 1;
	case TOK_TYPE_NORMAL:
		break;
	default:
		return 0;	/* unused, undefined */
	}
	if (t->kind == TOK_KIND_SPM) {
		while (i < n) {
			if (n - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
				out[k++] = ' ';
				i += 3;
			} else {
				out[k++] = s[i++];
			}
		}
		return (long)k;
	}
	while (i < n) {
		size_t adv;
		uint32_t cp = uni_decode((const uint8_t *)s + i, n - i, &adv);
		int b = uni_cp_to_byte(cp);

		if (b >= 0) {
			out[k++] = (char)b;
		} else {
			/* Not a stand-in: keep the bytes as they are. */
			memcpy(out + k, s + i, adv);
			k += adv;
		}
		i += adv;
	}
	return (long)k;
}

int
tok_build_pieces(struct tokenizer *t, struct cp_err *e, const char *path)
{
	size_t total = 0, pos = 0;
	int32_t i;

	for (i = 0; i < t->n_vocab; i++)
		total += t->tok[i].len;
	if ((t->pieces = malloc(total ? total : 1)) == NULL)
		return cp_err_set(e, -ENOMEM, "%s: out of memory", path);
	t->max_piece = 0;
	for (i = 0; i < t->n_vocab; i++) {
		struct tok_entry *te = &t->tok[i];
		long n = render(t, te, t->pieces + pos);

		if (n < 0)
			return cp_err_set(e, -EINVAL, "%s: byte token %d has text "
			    "\"%.*s\", expected <0xNN>", path, i,
			    (int)(te->len > 40 ? 40 : te->len),
			    t->text + te->off);
		te->piece_off = (uint32_t)pos;
		te->piece_len = (uint32_t)n;
		pos += (size_t)n;
		if ((size_t)n > t->max_piece)
			t->max_piece = (size_t)n;
	}
	return 0;
}

const char *
tok_piece(const struct tokenizer *t, int32_t id, bool special, size_t *len)
{
	const struct tok_entry *te;

	if (id < 0 || id >= t->n_vocab)
		return NULL;
	te = &t->tok[id];
	if (!special && (te->type == TOK_TYPE_CONTROL ||
	    te->type == TOK_TYPE_UNKNOWN)) {
		*len = 0;
		return t->pieces + te->piece_off;
	}
	*len = te->piece_len;
	return t->pieces + te->piece_off;
}

size_t
tok_max_piece(const struct tokenizer *t)
{
	return t->max_piece;
}

/* Output cursor: writes what fits, counts everything. */
struct sink {
	char *buf;
	size_t cap, len;
};

static void
put(struct sink *o, const void *p, size_t n)
{
	if (o->len < o->cap) {
		size_t room = o->cap - o->len;

		memcpy(o->buf + o->len, p, n < room ? n : room);
	}
	o->len += n;
}

static void
put_fffd(struct sink *o)
{
	put(o, "\xef\xbf\xbd", 3);
}

/* Start a sequence with lead byte b, or emit it / U+FFFD. */
static void
utf8_start(struct detok *d, uint8_t b, struct sink *o)
{
	d->lo = 0x80;
	d->hi = 0xBF;
	if (b < 0x80) {
		put(o, &b, 1);
		return;
	}
	if (b >= 0xC2 && b <= 0xDF)
		d->n_need = 1;
	else if (b >= 0xE0 && b <= 0xEF)
		d->n_need = 2;
	else if (b >= 0xF0 && b <= 0xF4)
		d->n_need = 3;
	else {
		put_fffd(o);	/* 80..C1 and F5..FF never start a sequence */
		return;
	}
	if (b == 0xE0)
		d->lo = 0xA0;	/* no overlong 3-byte forms */
	else if (b == 0xED)
		d->hi = 0x9F;	/* no surrogates */
	else if (b == 0xF0)
		d->lo = 0x90;	/* no overlong 4-byte forms */
	else if (b == 0xF4)
		d->hi = 0x8F;	/* nothing above U+10FFFF */
	d->pend[0] = b;
	d->n_pend = 1;
}

static void
utf8_byte(struct detok *d, uint8_t b, struct sink *o)
{
	if (d->n_need > 0) {
		if (b >= d->lo && b <= d->hi) {
			d->pend[d->n_pend++] = b;
			d->lo = 0x80;
			d->hi = 0xBF;
			if (--d->n_need == 0) {
				put(o, d->pend, d->n_pend);
				d->n_pend = 0;
			}
			return;
		}
		/* The held bytes are a maximal ill-formed subpart. */
		put_fffd(o);
		d->n_pend = 0;
		d->n_need = 0;
	}
	utf8_start(d, b, o);
}

void
detok_init(struct detok *d, const struct tokenizer *t, unsigned flags)
{
	memset(d, 0, sizeof(*d));
	d->t = t;
	d->flags = flags;
}

size_t
detok_max_out(const struct tokenizer *t)
{
	/* Every byte may become U+FFFD (3 bytes), plus a held sequence's. */
	return 3 * (t->max_piece + 4);
}

static int
feed(struct detok *d, int32_t id, struct sink *o)
{
	const char *p;
	size_t n, i;

	if ((p = tok_piece(d->t, id, (d->flags & DETOK_SPECIAL) != 0, &n)) ==
	    NULL)
		return -EINVAL;
	if (!d->started) {
		d->started = true;
		if ((d->flags & DETOK_STRIP_SPACE) && d->t->add_space_prefix &&
		    n > 0 && p[0] == ' ') {
			p++;
			n--;
		}
	}
	for (i = 0; i < n; i++)
		utf8_byte(d, (uint8_t)p[i], o);
	return 0;
}

int
detok_feed(struct detok *d, int32_t id, char *out, size_t cap)
{
	struct sink o = { out, cap, 0 };
	int rc;

	if (cap < detok_max_out(d->t))
		return -ENOSPC;
	if ((rc = feed(d, id, &o)) != 0)
		return rc;
	return (int)o.len;
}

static void
flush(struct detok *d, struct sink *o)
{
	if (d->n_pend > 0)
		put_fffd(o);
	d->n_pend = 0;
	d->n_need = 0;
}

int
detok_flush(struct detok *d, char *out, size_t cap)
{
	struct sink o = { out, cap, 0 };

	if (cap < 3)
		return -ENOSPC;
	flush(d, &o);
	return (int)o.len;
}

long
tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
    unsigned flags, char *out, size_t cap)
{
	struct detok d;
	struct sink o = { out, cap, 0 };
	size_t i;

	detok_init(&d, t, flags);
	for (i = 0; i < n; i++)
		if (feed(&d, ids[i], &o) != 0)
			return -EINVAL;
	flush(&d, &o);
	return (long)o.len;
}
