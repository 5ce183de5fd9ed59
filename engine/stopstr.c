/*
 * stopstr.c - stop strings over streamed bytes (see stopstr.h).
 *
 * One Knuth-Morris-Pratt automaton per stop string.  Invariant between
 * calls (no match yet): stop i's state is the length of the longest suffix
 * of all text fed so far that is a proper prefix of stop i, and the held
 * bytes are the last max(state) bytes of that text.  A suffix that could
 * still grow into a stop string is at most max(state) long, so everything
 * before it is safe to send.
 */
#include "stopstr.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct stop {
	const uint8_t *s;	/* (len) the string, in stopstr.pool */
	const uint32_t *fail;	/* (len) longest proper border of s[0..i] */
	uint32_t len;
	uint32_t state;		/* matched prefix length, < len */
};

struct stopstr {
	int n;
	struct stop *st;	/* (n) */
	uint8_t *pool;		/* all strings back to back */
	uint32_t *fails;	/* all failure tables back to back */
	uint8_t *held;		/* (max_held) the held tail of the text */
	size_t n_held;
	size_t max_held;
	int match;		/* index of the matched string, -1 before */
};

static void
build_fail(const uint8_t *s, uint32_t len, uint32_t *fail)
{
	uint32_t i, k = 0;

	fail[0] = 0;
	for (i = 1; i < len; i++) {
		while (k > 0 && s[i] != s[k])
			k = fail[k - 1];
		if (s[i] == s[k])
			k++;
		fail[i] = k;
	}
}

struct stopstr *
stopstr_new(const char *const *strs, const size_t *lens, int n,
    struct cp_err *e)
{
	struct stopstr *ss = NULL;
	size_t total = 0, off = 0, len, maxlen = 0;
	int i;

	if (n < 0 || n > STOPSTR_MAX_N || (n > 0 && strs == NULL)) {
		cp_err_set(e, -EINVAL, "stop strings: %d given, expected "
		    "0..%d", n, STOPSTR_MAX_N);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (strs[i] == NULL) {
			cp_err_set(e, -EINVAL, "stop string %d: missing", i);
			return NULL;
		}
		len = lens != NULL ? lens[i] :
		    strnlen(strs[i], STOPSTR_MAX_LEN + 1);
		if (len < 1 || len > STOPSTR_MAX_LEN) {
			cp_err_set(e, -EINVAL, "stop string %d: %zu bytes, "
			    "expected 1..%d", i, len, STOPSTR_MAX_LEN);
			return NULL;
		}
		total += len;
		if (len > maxlen)
			maxlen = len;
	}
	if ((ss = calloc(1, sizeof(*ss))) == NULL)
		goto nomem;
	ss->n = n;
	ss->max_held = maxlen > 0 ? maxlen - 1 : 0;
	ss->st = calloc((size_t)n + 1, sizeof(*ss->st));
	ss->pool = malloc(total + 1);
	ss->fails = malloc((total + 1) * sizeof(*ss->fails));
	ss->held = malloc(ss->max_held + 1);
	if (ss->st == NULL || ss->pool == NULL || ss->fails == NULL ||
	    ss->held == NULL)
		goto nomem;
	for (i = 0; i < n; i++) {
		len = lens != NULL ? lens[i] : strlen(strs[i]);
		memcpy(ss->pool + off, strs[i], len);
		build_fail(ss->pool + off, (uint32_t)len, ss->fails + off);
		ss->st[i].s = ss->pool + off;
		ss->st[i].fail = ss->fails + off;
		ss->st[i].len = (uint32_t)len;
		off += len;
	}
	stopstr_reset(ss);
	return ss;
nomem:
	stopstr_free(ss);
	cp_err_set(e, -ENOMEM, "stop strings: out of memory");
	return NULL;
}

void
stopstr_free(struct stopstr *ss)
{
	if (ss == NULL)
		return;
	free(ss->held);
	free(ss->fails);
	free(ss->pool);
	free(ss->st);
	free(ss);
}

size_t
stopstr_max_held(const struct stopstr *ss)
{
	return ss->max_held;
}

size_t
stopstr_held(const struct stopstr *ss)
{
	return ss->n_held;
}

bool
stopstr_matched(const struct stopstr *ss)
{
	return ss->match >= 0;
}

void
stopstr_reset(struct stopstr *ss)
{
	int i;

	for (i = 0; i < ss->n; i++)
		ss->st[i].state = 0;
	ss->n_held = 0;
	ss->match = -1;
}

/* Copy the first emit bytes of held + buf to out. */
static void
copy_pending(const struct stopstr *ss, const uint8_t *buf, size_t emit,
    char *out)
{
	size_t h = emit < ss->n_held ? emit : ss->n_held;

	if (out == NULL)
		return;
	if (h > 0)
		memcpy(out, ss->held, h);
	if (emit > h)
		memcpy(out + h, buf, emit - h);
}

/* Advance every automaton by byte c; the index of the longest stop string
 * ending here (lowest index among equals), or -1. */
static int
step(struct stopstr *ss, uint8_t c)
{
	struct stop *t;
	uint32_t st;
	int i, best = -1;

	for (i = 0; i < ss->n; i++) {
		t = &ss->st[i];
		st = t->state;
		while (st > 0 && t->s[st] != c)
			st = t->fail[st - 1];
		if (t->s[st] == c)
			st++;
		t->state = st;
		if (st == t->len && (best < 0 || t->len > ss->st[best].len))
			best = i;
	}
	return best;
}

int
stopstr_feed(struct stopstr *ss, const void *buf, size_t len, char *out,
    size_t cap, struct stopstr_res *r)
{
	const uint8_t *b = buf;
	size_t j, hold = 0, emit, keep;
	int i, m = -1;

	r->emit = 0;
	r->held = 0;
	r->match = -1;
	if (ss->match >= 0)
		return -EALREADY;
	if (len > 0 && buf == NULL)
		return -EINVAL;
	if (out != NULL && (cap < ss->n_held || cap - ss->n_held < len))
		return -ENOBUFS;
	for (j = 0; j < len; j++)
		if ((m = step(ss, b[j])) >= 0)
			break;
	if (m >= 0) {
		/* the match lies within the pending text: its bytes before
		 * b[j] were all held, as a prefix of stop m */
		emit = ss->n_held + j + 1 - ss->st[m].len;
		copy_pending(ss, b, emit, out);
		ss->n_held = 0;
		ss->match = m;
		r->emit = emit;
		r->match = m;
		return 0;
	}
	for (i = 0; i < ss->n; i++)
		if (ss->st[i].state > hold)
			hold = ss->st[i].state;
	emit = ss->n_held + len - hold;
	copy_pending(ss, b, emit, out);
	if (hold <= len) {
		if (hold > 0)
			memcpy(ss->held, b + len - hold, hold);
	} else {
		keep = hold - len;
		memmove(ss->held, ss->held + ss->n_held - keep, keep);
		if (len > 0)
			memcpy(ss->held + keep, b, len);
	}
	ss->n_held = hold;
	r->emit = emit;
	r->held = hold;
	return 0;
}

int
stopstr_flush(struct stopstr *ss, char *out, size_t cap,
    struct stopstr_res *r)
{
	int i;

	r->emit = 0;
	r->held = 0;
	r->match = ss->match;
	if (out != NULL && cap < ss->n_held)
		return -ENOBUFS;
	if (out != NULL && ss->n_held > 0)
		memcpy(out, ss->held, ss->n_held);
	r->emit = ss->n_held;
	ss->n_held = 0;
	for (i = 0; i < ss->n; i++)
		ss->st[i].state = 0;
	return 0;
}
