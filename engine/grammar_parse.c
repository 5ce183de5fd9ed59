/*
 * grammar_parse.c - GBNF text to the compiled form of grammar_int.h.
 *
 * A recursive-descent parser over the text.  A rule's body is collected
 * in temporary sequences (one per alternative being parsed, one level per
 * open group) and copied into the grammar's arrays when the rule or group
 * closes, so each rule's alternatives are contiguous.  Groups and
 * repetitions become helper rules named after the rule they occur in
 * ("value_3"):
 *
 *   X*      R ::= X R | ""
 *   X+      X R, with R for X*
 *   X?      R ::= X | ""
 *   X{m,n}  m copies of X, then n - m nested optionals
 *           R1 ::= X | "", Rk ::= X R(k-1) | "" (never ambiguous)
 *   X{m,}   m copies of X, then R for X*
 *
 * A multi-element X (a literal) is first made a rule of its own so that
 * every copy is one element.  After the text: every referenced rule must
 * be defined, `root` must exist, and no rule may be left-recursive
 * (invariant 3 of grammar_int.h), found with the nullable rules.
 */
#include "grammar.h"
#include "grammar_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN	128
#define CLASS_MAX_RANGES	1024

/* A growable run of elements: one alternative being parsed. */
struct seq {
	struct gelem *e;
	uint32_t n, cap;
};

struct ruledef {
	uint32_t name;		/* offset in names */
	uint32_t parent;	/* user rule a helper belongs to (itself else) */
	bool defined;
	size_t ref_pos;		/* text offset of the first reference */
	uint32_t first_alt, n_alts;
	uint32_t n_helpers;	/* helpers named after it so far */
};

struct parser {
	const char *s;
	size_t len, pos;
	struct cp_err *e;
	int err;
	uint32_t cur;		/* rule being defined (for messages) */
	bool in_rule;
	int depth;

	struct gelem *elems;
	uint32_t n_elems, cap_elems;
	struct grange *ranges;
	uint32_t n_ranges, cap_ranges;
	struct gclass *classes;
	uint32_t n_classes, cap_classes;
	uint32_t *alts;
	uint32_t n_alts, cap_alts;
	struct ruledef *rules;
	uint32_t n_rules, cap_rules;
	char *names;
	uint32_t n_names, cap_names;
	int32_t *hash;		/* (HASH_SIZE) rule index + 1, open addressing */
};

#define HASH_SIZE	(2 * GRAMMAR_MAX_RULES)

/* ---- errors ---- */

static void
line_col(const struct parser *p, size_t pos, int *line, int *col)
{
	size_t i;

	*line = 1;
	*col = 1;
	for (i = 0; i < pos && i < p->len; i++) {
		if (p->s[i] == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

__attribute__((format(printf, 4, 5)))
static int
perr_at(struct parser *p, int code, size_t pos, const char *fmt, ...)
{
	char msg[CP_ERR_MSG];
	va_list ap;
	int line, col;

	if (p->err != 0)
		return p->err;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	line_col(p, pos, &line, &col);
	if (p->in_rule)
		cp_err_set(p->e, code, "rule '%s', line %d col %d: %s",
		    p->names + p->rules[p->rules[p->cur].parent].name, line,
		    col, msg);
	else
		cp_err_set(p->e, code, "line %d col %d: %s", line, col, msg);
	p->err = code;
	return code;
}

#define perr(p, ...)	perr_at((p), -EINVAL, (p)->pos, __VA_ARGS__)

static int
nomem(struct parser *p)
{
	if (p->err == 0) {
		cp_err_set(p->e, -ENOMEM, "grammar: out of memory");
		p->err = -ENOMEM;
	}
	return p->err;
}

/* Room for one more item of size sz in *a (count n, capacity *cap), at
 * most max items. */
static int
grow(struct parser *p, void **a, uint32_t n, uint32_t *cap, size_t sz,
    uint32_t max, const char *what)
{
	uint32_t nc;
	void *na;

	if (n < *cap)
		return 0;
	if (n >= max)
		return perr_at(p, -E2BIG, p->pos, "grammar too large: more "
		    "than %u %s", max, what);
	nc = *cap < 16 ? 16 : *cap * 2;
	if (nc > max)
		nc = max;
	if ((na = realloc(*a, (size_t)nc * sz)) == NULL)
		return nomem(p);
	*a = na;
	*cap = nc;
	return 0;
}

/* ---- building ---- */

static int
seq_push(struct parser *p, struct seq *q, uint32_t type, uint32_t arg)
{
	if (grow(p, (void **)&q->e, q->n, &q->cap, sizeof(*q->e),
	    GRAMMAR_MAX_ELEMS, "elements") < 0)
		return p->err;
	q->e[q->n].type = type;
	q->e[q->n].arg = arg;
	q->n++;
	return 0;
}

static uint32_t
name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

static int
add_name(struct parser *p, const char *s, size_t n, uint32_t *off)
{
	while (p->n_names + n + 1 > p->cap_names) {
		if (grow(p, (void **)&p->names, p->cap_names, &p->cap_names, 1,
		    UINT32_MAX / 2, "name bytes") < 0)
			return p->err;
	}
	memcpy(p->names + p->n_names, s, n);
	p->names[p->n_names + n] = '\0';
	*off = p->n_names;
	p->n_names += (uint32_t)(n + 1);
	return 0;
}

/* A new rule named s[0..n) (not looked up); its index in *r. */
static int
new_rule(struct parser *p, const char *s, size_t n, uint32_t parent,
    uint32_t *r)
{
	struct ruledef *d;
	uint32_t h;

	if (grow(p, (void **)&p->rules, p->n_rules, &p->cap_rules,
	    sizeof(*p->rules), GRAMMAR_MAX_RULES, "rules") < 0)
		return p->err;
	d = &p->rules[p->n_rules];
	memset(d, 0, sizeof(*d));
	if (add_name(p, s, n, &d->name) < 0)
		return p->err;
	d->parent = parent == UINT32_MAX ? p->n_rules : parent;
	*r = p->n_rules++;
	h = name_hash(s, n) % HASH_SIZE;
	while (p->hash[h] != 0)
		h = (h + 1) % HASH_SIZE;
	p->hash[h] = (int32_t)*r + 1;
	return 0;
}

/* The rule named s[0..n), made (undefined) when new. */
static int
rule_lookup(struct parser *p, const char *s, size_t n, uint32_t *r)
{
	uint32_t h = name_hash(s, n) % HASH_SIZE;
	const char *nm;
	int32_t v;

	while ((v = p->hash[h]) != 0) {
		nm = p->names + p->rules[v - 1].name;
		if (strlen(nm) == n && memcmp(nm, s, n) == 0) {
			*r = (uint32_t)v - 1;
			return 0;
		}
		h = (h + 1) % HASH_SIZE;
	}
	if (new_rule(p, s, n, UINT32_MAX, r) < 0)
		return p->err;
	p->rules[*r].ref_pos = p->pos - n;
	return 0;
}

/* A helper rule of the rule being defined. */
static int
helper_rule(struct parser *p, uint32_t *r)
{
	struct ruledef *par = &p->rules[p->rules[p->cur].parent];
	char nm[NAME_MAX_LEN + 16];
	int n;

	n = snprintf(nm, sizeof(nm), "%s_%u", p->names + par->name,
	    ++par->n_helpers);
	if (new_rule(p, nm, (size_t)n, p->rules[p->cur].parent, r) < 0)
		return p->err;
	p->rules[*r].defined = true;
	return 0;
}

/* Copy alternatives q[0..n) into the grammar as rule r's. */
static int
define_rule(struct parser *p, uint32_t r, struct seq *q, uint32_t n)
{
	uint32_t i, j;

	p->rules[r].first_alt = p->n_alts;
	p->rules[r].n_alts = n;
	for (i = 0; i < n; i++) {
		if (grow(p, (void **)&p->alts, p->n_alts, &p->cap_alts,
		    sizeof(*p->alts), GRAMMAR_MAX_ELEMS, "alternatives") < 0)
			return p->err;
		p->alts[p->n_alts++] = p->n_elems;
		for (j = 0; j <= q[i].n; j++) {
			if (grow(p, (void **)&p->elems, p->n_elems,
			    &p->cap_elems, sizeof(*p->elems),
			    GRAMMAR_MAX_ELEMS, "elements") < 0)
				return p->err;
			if (j < q[i].n)
				p->elems[p->n_elems++] = q[i].e[j];
			else
				p->elems[p->n_elems++] =
				    (struct gelem){ GE_END, 0 };
		}
	}
	return 0;
}

/* A class of one range [lo, hi], or negated; its index in *c. */
static int
class_begin(struct parser *p, bool neg, uint32_t *c)
{
	if (grow(p, (void **)&p->classes, p->n_classes, &p->cap_classes,
	    sizeof(*p->classes), GRAMMAR_MAX_ELEMS, "character classes") < 0)
		return p->err;
	*c = p->n_classes++;
	p->classes[*c] = (struct gclass){ p->n_ranges, 0, neg };
	return 0;
}

static int
class_range(struct parser *p, uint32_t c, uint32_t lo, uint32_t hi)
{
	if (p->classes[c].n >= CLASS_MAX_RANGES)
		return perr_at(p, -E2BIG, p->pos, "character class of more "
		    "than %d ranges", CLASS_MAX_RANGES);
	if (grow(p, (void **)&p->ranges, p->n_ranges, &p->cap_ranges,
	    sizeof(*p->ranges), GRAMMAR_MAX_ELEMS, "character ranges") < 0)
		return p->err;
	p->ranges[p->n_ranges++] = (struct grange){ lo, hi };
	p->classes[c].n++;
	return 0;
}

static int
range_cmp(const void *a, const void *b)
{
	const struct grange *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sort class c's ranges (the last ones of ranges[]) and merge those that
 * overlap or touch, so that lookups can stop early. */
static void
class_normalize(struct parser *p, uint32_t c)
{
	struct gclass *k = &p->classes[c];
	struct grange *r = p->ranges + k->first;
	uint32_t i, n = 0;

	if (k->n == 0)
		return;
	qsort(r, k->n, sizeof(*r), range_cmp);
	for (i = 1; i < k->n; i++) {
		if (r[i].lo <= r[n].hi || r[i].lo - 1 == r[n].hi) {
			if (r[i].hi > r[n].hi)
				r[n].hi = r[i].hi;
		} else {
			r[++n] = r[i];
		}
	}
	p->n_ranges -= k->n - (n + 1);
	k->n = n + 1;
}

static int
push_char(struct parser *p, struct seq *q, uint32_t cp)
{
	uint32_t c;

	if (class_begin(p, false, &c) < 0 || class_range(p, c, cp, cp) < 0)
		return p->err;
	return seq_push(p, q, GE_CLASS, c);
}

/* ---- lexing ---- */

static int
peek(const struct parser *p)
{
	return p->pos < p->len ? (uint8_t)p->s[p->pos] : -1;
}

static bool
name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skip blanks and comments; newlines too when nl. */
static void
skip_space(struct parser *p, bool nl)
{
	int c;

	while ((c = peek(p)) != -1) {
		if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) {
			p->pos++;
		} else if (c == '#') {
			while ((c = peek(p)) != -1 && c != '\n' && c != '\r')
				p->pos++;
		} else {
			break;
		}
	}
}

/* One UTF-8 character of the text into *cp. */
static int
utf8_char(struct parser *p, uint32_t *cp)
{
	const uint8_t *s = (const uint8_t *)p->s + p->pos;
	size_t left = p->len - p->pos, n, i;
	uint32_t v, min;

	if (s[0] < 0x80) {
		*cp = s[0];
		p->pos++;
		return 0;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2, v = s[0] & 0x1f, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3, v = s[0] & 0x0f, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4, v = s[0] & 0x07, min = 0x10000;
	} else {
		return perr(p, "invalid UTF-8");
	}
	if (left < n)
		return perr(p, "invalid UTF-8");
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return perr(p, "invalid UTF-8");
		v = v << 6 | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return perr(p, "invalid UTF-8");
	*cp = v;
	p->pos += n;
	return 0;
}

static int
hex_digits(struct parser *p, int n, uint32_t *cp)
{
	uint32_t v = 0;
	int i, c;

	for (i = 0; i < n; i++) {
		c = peek(p);
		if (c >= '0' && c <= '9')
			v = v << 4 | (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v = v << 4 | (uint32_t)(c - 'A' + 10);
		else
			return perr(p, "expected %d hex digits", n);
		p->pos++;
	}
	if (v > 0x10ffff)
		return perr(p, "code point U+%X beyond U+10FFFF", v);
	*cp = v;
	return 0;
}

/* One character of a literal or class (an escape or UTF-8). */
static int
char_lit(struct parser *p, uint32_t *cp)
{
	int c;

	if (peek(p) != '\\')
		return utf8_char(p, cp);
	p->pos++;
	c = peek(p);
	p->pos++;
	switch (c) {
	case 'n': *cp = '\n'; return 0;
	case 'r': *cp = '\r'; return 0;
	case 't': *cp = '\t'; return 0;
	case 'x': return hex_digits(p, 2, cp);
	case 'u': return hex_digits(p, 4, cp);
	case 'U': return hex_digits(p, 8, cp);
	case '\\': case '"': case '\'': case '[': case ']': case '-':
	case '^': case '/':
		*cp = (uint32_t)c;
		return 0;
	case -1:
		p->pos--;
		return perr(p, "escape at the end of the text");
	default:
		p->pos--;
		return perr(p, "unknown escape '\\%c'", c);
	}
}

/* ---- grammar ---- */

static int parse_alternates(struct parser *p, uint32_t r, bool nested);

static int
parse_literal(struct parser *p, struct seq *q)
{
	size_t start = p->pos;
	uint32_t cp;

	p->pos++;	/* '"' */
	for (;;) {
		if (peek(p) == -1 || peek(p) == '\n' || peek(p) == '\r')
			return perr_at(p, -EINVAL, start,
			    "unterminated string literal");
		if (peek(p) == '"')
			break;
		if (char_lit(p, &cp) < 0 || push_char(p, q, cp) < 0)
			return p->err;
	}
	p->pos++;
	return 0;
}

static int
parse_class(struct parser *p, struct seq *q)
{
	size_t start = p->pos;
	uint32_t c, lo, hi;
	bool neg = false;

	p->pos++;	/* '[' */
	if (peek(p) == '^') {
		neg = true;
		p->pos++;
	}
	if (class_begin(p, neg, &c) < 0)
		return p->err;
	for (;;) {
		if (peek(p) == -1 || peek(p) == '\n' || peek(p) == '\r')
			return perr_at(p, -EINVAL, start,
			    "unterminated character class");
		if (peek(p) == ']')
			break;
		if (char_lit(p, &lo) < 0)
			return p->err;
		hi = lo;
		if (peek(p) == '-' && p->pos + 1 < p->len &&
		    p->s[p->pos + 1] != ']') {
			p->pos++;
			if (char_lit(p, &hi) < 0)
				return p->err;
			if (hi < lo)
				return perr(p, "range U+%04X-U+%04X is "
				    "backwards", lo, hi);
		}
		if (class_range(p, c, lo, hi) < 0)
			return p->err;
	}
	if (p->classes[c].n == 0 && !neg)
		return perr_at(p, -EINVAL, start, "empty character class");
	class_normalize(p, c);
	p->pos++;
	return seq_push(p, q, GE_CLASS, c);
}

static int
parse_uint(struct parser *p, uint32_t *v)
{
	uint32_t x = 0;
	int c;

	if ((c = peek(p)) < '0' || c > '9')
		return perr(p, "expected a number");
	while ((c = peek(p)) >= '0' && c <= '9') {
		x = x * 10 + (uint32_t)(c - '0');
		if (x > GRAMMAR_MAX_REPEAT)
			return perr_at(p, -E2BIG, p->pos, "repetition count "
			    "above %d", GRAMMAR_MAX_REPEAT);
		p->pos++;
	}
	*v = x;
	return 0;
}

/* Make q->e[from..n) a single element: a reference to a new rule. */
static int
wrap(struct parser *p, struct seq *q, uint32_t from)
{
	struct seq one = { q->e + from, q->n - from, 0 };
	uint32_t r;

	if (q->n - from == 1)
		return 0;
	if (helper_rule(p, &r) < 0 || define_rule(p, r, &one, 1) < 0)
		return p->err;
	q->n = from;
	return seq_push(p, q, GE_REF, r);
}

/*
 * Apply a repetition of [min, max] (max UINT32_MAX: unbounded) to the one
 * element x at the end of q.
 */
static int
repeat(struct parser *p, struct seq *q, uint32_t min, uint32_t max)
{
	struct gelem x = q->e[q->n - 1];
	struct gelem two[2];
	struct seq alt[2];
	uint32_t i, r, prev = UINT32_MAX;

	q->n--;
	for (i = 0; i < min; i++)
		if (seq_push(p, q, x.type, x.arg) < 0)
			return p->err;
	alt[1] = (struct seq){ NULL, 0, 0 };	/* "" */
	if (max == UINT32_MAX) {
		/* R ::= x R | "" */
		if (helper_rule(p, &r) < 0)
			return p->err;
		two[0] = x;
		two[1] = (struct gelem){ GE_REF, r };
		alt[0] = (struct seq){ two, 2, 0 };
		if (define_rule(p, r, alt, 2) < 0)
			return p->err;
		return seq_push(p, q, GE_REF, r);
	}
	for (i = min; i < max; i++) {
		/* R1 ::= x | "";  Rk ::= x R(k-1) | "" */
		if (helper_rule(p, &r) < 0)
			return p->err;
		two[0] = x;
		two[1] = (struct gelem){ GE_REF, prev };
		alt[0] = (struct seq){ two, prev == UINT32_MAX ? 1 : 2, 0 };
		if (define_rule(p, r, alt, 2) < 0)
			return p->err;
		prev = r;
	}
	if (prev != UINT32_MAX)
		return seq_push(p, q, GE_REF, prev);
	return 0;
}

static int
parse_repeat(struct parser *p, struct seq *q, uint32_t from)
{
	uint32_t min, max;
	int c = peek(p);

	if (c != '*' && c != '+' && c != '?' && c != '{')
		return 0;
	if (q->n == from)
		return perr(p, "'%c' repeats nothing", c);
	if (wrap(p, q, from) < 0)
		return p->err;
	p->pos++;
	if (c == '*')
		return repeat(p, q, 0, UINT32_MAX);
	if (c == '+')
		return repeat(p, q, 1, UINT32_MAX);
	if (c == '?')
		return repeat(p, q, 0, 1);
	skip_space(p, false);
	if (parse_uint(p, &min) < 0)
		return p->err;
	skip_space(p, false);
	max = min;
	if (peek(p) == ',') {
		p->pos++;
		skip_space(p, false);
		max = UINT32_MAX;
		if (peek(p) != '}' && parse_uint(p, &max) < 0)
			return p->err;
		skip_space(p, false);
	}
	if (peek(p) != '}')
		return perr(p, "expected '}' to close the repetition");
	p->pos++;
	if (max < min)
		return perr(p, "repetition {%u,%u}: the maximum is below the "
		    "minimum", min, max);
	return repeat(p, q, min, max);
}

static int
parse_group(struct parser *p, struct seq *q)
{
	size_t start = p->pos;
	uint32_t r;

	if (p->depth >= GRAMMAR_MAX_NEST)
		return perr_at(p, -E2BIG, p->pos, "groups nested deeper than "
		    "%d", GRAMMAR_MAX_NEST);
	p->pos++;	/* '(' */
	skip_space(p, true);
	if (helper_rule(p, &r) < 0)
		return p->err;
	p->depth++;
	if (parse_alternates(p, r, true) < 0)
		return p->err;
	p->depth--;
	skip_space(p, true);
	if (peek(p) != ')')
		return perr_at(p, -EINVAL, start, "unclosed '('");
	p->pos++;
	return seq_push(p, q, GE_REF, r);
}

/* One alternative into q; stops before '|', ')', a newline (top level)
 * or the end. */
static int
parse_sequence(struct parser *p, struct seq *q, bool nested)
{
	uint32_t from, r;
	size_t start;
	int c;

	while ((c = peek(p)) != -1) {
		from = q->n;
		if (c == '"') {
			if (parse_literal(p, q) < 0)
				return p->err;
		} else if (c == '[') {
			if (parse_class(p, q) < 0)
				return p->err;
		} else if (c == '.') {
			if (class_begin(p, true, &r) < 0 ||
			    seq_push(p, q, GE_CLASS, r) < 0)
				return p->err;
			p->pos++;
		} else if (c == '(') {
			if (parse_group(p, q) < 0)
				return p->err;
		} else if (name_char(c)) {
			start = p->pos;
			while (name_char(peek(p)))
				p->pos++;
			if (p->pos - start > NAME_MAX_LEN)
				return perr_at(p, -EINVAL, start, "rule name "
				    "longer than %d", NAME_MAX_LEN);
			if (rule_lookup(p, p->s + start, p->pos - start,
			    &r) < 0)
				return p->err;
			if (seq_push(p, q, GE_REF, r) < 0)
				return p->err;
		} else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
			break;
		} else {
			return perr(p, "unexpected '%c'", c);
		}
		if (parse_repeat(p, q, from) < 0)
			return p->err;
		skip_space(p, nested);
	}
	return 0;
}

/* The alternatives of rule r, up to the end of its line (or of the group
 * when nested). */
static int
parse_alternates(struct parser *p, uint32_t r, bool nested)
{
	struct seq *alts = NULL, *na;
	uint32_t n = 0, cap = 0, i;
	int rc = 0;

	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4;
			if (cap > GRAMMAR_MAX_ELEMS ||
			    (na = realloc(alts, cap * sizeof(*alts))) == NULL) {
				rc = nomem(p);
				break;
			}
			alts = na;
		}
		alts[n] = (struct seq){ NULL, 0, 0 };
		n++;
		if ((rc = parse_sequence(p, &alts[n - 1], nested)) < 0)
			break;
		if (peek(p) != '|')
			break;
		p->pos++;
		skip_space(p, true);
	}
	if (rc == 0)
		rc = define_rule(p, r, alts, n);
	for (i = 0; i < n; i++)
		free(alts[i].e);
	free(alts);
	return rc;
}

static int
parse_rule(struct parser *p)
{
	size_t start = p->pos;
	uint32_t r;

	while (name_char(peek(p)))
		p->pos++;
	if (p->pos == start)
		return perr(p, "expected a rule name");
	if (p->pos - start > NAME_MAX_LEN)
		return perr_at(p, -EINVAL, start, "rule name longer than %d",
		    NAME_MAX_LEN);
	if (rule_lookup(p, p->s + start, p->pos - start, &r) < 0)
		return p->err;
	p->cur = r;
	p->in_rule = true;
	if (p->rules[r].defined)
		return perr_at(p, -EINVAL, start, "defined twice");
	p->rules[r].defined = true;
	skip_space(p, false);
	if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
		return perr(p, "expected '::='");
	p->pos += 3;
	skip_space(p, true);
	if (parse_alternates(p, r, false) < 0)
		return p->err;
	if (peek(p) == ')')
		return perr(p, "unmatched ')'");
	p->in_rule = false;
	return 0;
}

/* ---- checks after parsing ---- */

/* nullable[r]: rule r can match the empty string (a worklist over the
 * references, linear in the grammar's size). */
static int
find_nullable(const struct parser *p, bool *nullable)
{
	uint32_t *pending, *alt_rule, *occ_start, *occ, *queue, *fill;
	uint32_t a, r, i, k, qh = 0, qt = 0;
	int rc = -ENOMEM;

	pending = calloc(p->n_alts + 1, sizeof(*pending));
	alt_rule = calloc(p->n_alts + 1, sizeof(*alt_rule));
	occ_start = calloc(p->n_rules + 1, sizeof(*occ_start));
	fill = calloc(p->n_rules + 1, sizeof(*fill));
	occ = calloc(p->n_elems + 1, sizeof(*occ));
	queue = calloc(p->n_rules + 1, sizeof(*queue));
	if (!pending || !alt_rule || !occ_start || !fill || !occ || !queue)
		goto out;
	for (r = 0; r < p->n_rules; r++)
		for (a = 0; a < p->rules[r].n_alts; a++)
			alt_rule[p->rules[r].first_alt + a] = r;
	/* pending[a]: references not yet known nullable, or UINT32_MAX when
	 * a class makes the alternative non-empty */
	for (a = 0; a < p->n_alts; a++) {
		for (i = p->alts[a]; p->elems[i].type != GE_END; i++) {
			if (p->elems[i].type == GE_CLASS) {
				pending[a] = UINT32_MAX;
				break;
			}
			pending[a]++;
			occ_start[p->elems[i].arg + 1]++;
		}
	}
	for (r = 0; r < p->n_rules; r++)
		occ_start[r + 1] += occ_start[r];
	for (a = 0; a < p->n_alts; a++) {
		if (pending[a] == UINT32_MAX)
			continue;
		for (i = p->alts[a]; p->elems[i].type != GE_END; i++) {
			r = p->elems[i].arg;
			occ[occ_start[r] + fill[r]++] = a;
		}
	}
	for (a = 0; a < p->n_alts; a++) {
		r = alt_rule[a];
		if (pending[a] == 0 && !nullable[r]) {
			nullable[r] = true;
			queue[qt++] = r;
		}
	}
	while (qh < qt) {
		r = queue[qh++];
		for (k = occ_start[r]; k < occ_start[r + 1]; k++) {
			a = occ[k];
			if (--pending[a] == 0 && !nullable[alt_rule[a]]) {
				nullable[alt_rule[a]] = true;
				queue[qt++] = alt_rule[a];
			}
		}
	}
	rc = 0;
out:
	free(queue);
	free(occ);
	free(fill);
	free(occ_start);
	free(alt_rule);
	free(pending);
	return rc;
}

/*
 * Depth-first search over "r may begin with s" edges; color 0 unseen, 1 on
 * the path, 2 done.  Returns the rule closing a cycle, or UINT32_MAX.
 */
static uint32_t
left_cycle(const struct parser *p, const bool *nullable, uint8_t *color,
    uint32_t r)
{
	uint32_t a, i, s, hit;

	color[r] = 1;
	for (a = 0; a < p->rules[r].n_alts; a++) {
		for (i = p->alts[p->rules[r].first_alt + a];
		    p->elems[i].type == GE_REF; i++) {
			s = p->elems[i].arg;
			if (color[s] == 1)
				return s;
			if (color[s] == 0 &&
			    (hit = left_cycle(p, nullable, color, s)) !=
			    UINT32_MAX)
				return hit;
			if (!nullable[s])
				break;
		}
	}
	color[r] = 2;
	return UINT32_MAX;
}

static int
check_grammar(struct parser *p, uint32_t *root)
{
	uint8_t *color = NULL;
	bool *nullable = NULL;
	uint32_t r, hit;
	int rc = 0;

	p->in_rule = false;
	for (r = 0; r < p->n_rules; r++) {
		if (!p->rules[r].defined)
			return perr_at(p, -EINVAL, p->rules[r].ref_pos,
			    "rule '%s' is used but never defined",
			    p->names + p->rules[r].name);
	}
	for (r = 0; r < p->n_rules; r++)
		if (strcmp(p->names + p->rules[r].name, "root") == 0)
			break;
	if (r == p->n_rules) {
		cp_err_set(p->e, -EINVAL, "grammar has no rule 'root'");
		return p->err = -EINVAL;
	}
	*root = r;
	nullable = calloc(p->n_rules, sizeof(*nullable));
	color = calloc(p->n_rules, 1);
	if (nullable == NULL || color == NULL ||
	    find_nullable(p, nullable) < 0) {
		rc = nomem(p);
		goto out;
	}
	for (r = 0; r < p->n_rules; r++) {
		if (color[r] != 0)
			continue;
		if ((hit = left_cycle(p, nullable, color, r)) != UINT32_MAX) {
			cp_err_set(p->e, -EINVAL, "rule '%s' is left-recursive "
			    "(it can reach itself before matching a "
			    "character)", p->names +
			    p->rules[p->rules[hit].parent].name);
			rc = p->err = -EINVAL;
			goto out;
		}
	}
out:
	free(color);
	free(nullable);
	return rc;
}

/* ---- entry points ---- */

static void
parser_free(struct parser *p)
{
	free(p->elems);
	free(p->ranges);
	free(p->classes);
	free(p->alts);
	free(p->rules);
	free(p->names);
	free(p->hash);
}

int
grammar_from_gbnf(const char *text, size_t len, struct grammar **out,
    struct cp_err *e)
{
	struct parser p;
	struct grammar *g = NULL;
	uint32_t r, root = 0;
	int rc;

	*out = NULL;
	memset(&p, 0, sizeof(p));
	p.s = text;
	p.len = len;
	p.e = e;
	if (len > GRAMMAR_MAX_TEXT)
		return cp_err_set(e, -E2BIG, "grammar of %zu bytes, at most "
		    "%d", len, GRAMMAR_MAX_TEXT);
	if ((p.hash = calloc(HASH_SIZE, sizeof(*p.hash))) == NULL)
		return cp_err_set(e, -ENOMEM, "grammar: out of memory");
	for (;;) {
		skip_space(&p, true);
		if (peek(&p) == -1)
			break;
		if (parse_rule(&p) < 0)
			break;
	}
	if ((rc = p.err) < 0 || (rc = check_grammar(&p, &root)) < 0)
		goto out;
	if ((g = calloc(1, sizeof(*g))) == NULL ||
	    (g->rules = calloc(p.n_rules, sizeof(*g->rules))) == NULL) {
		rc = nomem(&p);
		goto out;
	}
	for (r = 0; r < p.n_rules; r++)
		g->rules[r] = (struct grule){ p.rules[r].name,
		    p.rules[r].first_alt, p.rules[r].n_alts };
	g->elems = p.elems, p.elems = NULL;
	g->n_elems = p.n_elems;
	g->ranges = p.ranges, p.ranges = NULL;
	g->n_ranges = p.n_ranges;
	g->classes = p.classes, p.classes = NULL;
	g->n_classes = p.n_classes;
	g->alts = p.alts, p.alts = NULL;
	g->n_alts = p.n_alts;
	g->n_rules = p.n_rules;
	g->names = p.names, p.names = NULL;
	g->root = root;
	*out = g;
	g = NULL;
out:
	grammar_free(g);
	parser_free(&p);
	return rc;
}

void
grammar_free(struct grammar *g)
{
	if (g == NULL)
		return;
	free(g->elems);
	free(g->ranges);
	free(g->classes);
	free(g->alts);
	free(g->rules);
	free(g->names);
	free(g);
}

int
grammar_n_rules(const struct grammar *g)
{
	return (int)g->n_rules;
}

/* Classes' ranges are sorted, disjoint and not adjacent
 * (class_normalize()). */
bool
gclass_has(const struct grammar *g, uint32_t c, uint32_t cp)
{
	const struct gclass *k = &g->classes[c];
	const struct grange *r = g->ranges + k->first;
	uint32_t i;

	for (i = 0; i < k->n && r[i].lo <= cp; i++)
		if (cp <= r[i].hi)
			return !k->neg;
	return k->neg;
}

enum gspan
gclass_span(const struct grammar *g, uint32_t c, uint32_t lo, uint32_t hi)
{
	const struct gclass *k = &g->classes[c];
	const struct grange *r = g->ranges + k->first;
	uint32_t i;

	for (i = 0; i < k->n && r[i].lo <= hi; i++) {
		if (r[i].hi < lo)
			continue;
		/* r[i] meets [lo, hi]: does it cover it? */
		if (r[i].lo <= lo && r[i].hi >= hi)
			return k->neg ? GSPAN_NONE : GSPAN_ALL;
		return GSPAN_SOME;
	}
	return k->neg ? GSPAN_ALL : GSPAN_NONE;
}
