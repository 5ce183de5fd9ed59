/*
 * grammar_match.c - where a sequence stands in its grammar, and which
 * tokens may come next.
 *
 * Stacks.  A parse in progress is a stack of grammar positions: the top
 * is a GE_CLASS element (the character expected next), each entry below
 * it the position to continue at when the rule above it ends.  Stacks
 * are stored as interned nodes (pos, parent): equal stacks are one node
 * id and share their tails, so a stack is one int and pushing is O(1).
 * Node 0 is the empty stack: the root rule has ended (the text so far is
 * a sentence).
 *
 * States.  The text so far leaves a set of stacks (more than one when the
 * grammar is ambiguous so far) plus, mid-character, the UTF-8 bytes of
 * the character begun.  A state is that set (sorted node ids) and the
 * partial character, interned too, so that the walk of a state becomes
 * an automaton built lazily:
 *
 *   1. succ(n), the stacks after node n's character, is computed once per
 *      node: pop the class, then expand (below) the position after it.
 *   2. next[b], the state after byte b, is computed once per state and
 *      byte: UTF-8 is decoded here (a lead byte makes a partial state,
 *      kept only if some top's class meets the code points it may
 *      become), and a whole code point c gives the union of succ(n) over
 *      the nodes whose class holds c.
 *   3. mask, the tokens allowed in a state, is computed once per state by
 *      walking the sorted vocabulary (a depth-first walk of its byte
 *      trie, grammar_vocab.c) through next[]: a shared prefix is walked
 *      once, and a dead prefix skips every token that begins with it.
 *
 * Expansion of position p over parent stack P: GE_CLASS gives the node
 * (p, P); GE_END pops P (P empty: node 0); GE_REF r expands every
 * alternative of r over the return node (p + 1, P), or over P itself when
 * p + 1 ends the alternative (a tail call, so right recursion does not
 * grow the stack).  The grammar has no left recursion (grammar_int.h
 * invariant 3), so this ends; a visited set of (p, P) makes it linear.
 * Stacks deeper than GMATCH_MAX_DEPTH are dropped (the text may not nest
 * deeper); a state of more than GMATCH_MAX_STACKS stacks is an error.
 *
 * Memory.  Nodes, states, transition tables and masks only grow.  At the
 * start of each public call, past GMATCH_MAX_STATES / 2 states or the
 * mask budget, the caches are dropped and the current state re-interned
 * from its stacks; a single call that needs more than GMATCH_MAX_STATES
 * fails with -E2BIG.
 */
#include "grammar.h"
#include "grammar_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL		(-1)		/* no parent: bottom of a stack */
#define ACCEPT		0		/* node id of the empty stack */
#define T_UNKNOWN	(-2)		/* next[] not computed */
#define T_DEAD		(-1)
#define T_ERR		(-3)
#define ACC_ANY		UINT32_MAX	/* gstate.acc: see partial() */
#define MASK_BUDGET	(32u << 20)	/* bytes of cached masks */
#define MAX_NODES	(1u << 20)
#define MAX_POOL	(1u << 22)	/* node ids in succ and state lists */
#define EXPAND_MAX_RECURSION 20000

struct gnode {
	uint32_t pos;		/* element index; UINT32_MAX for ACCEPT */
	int32_t parent;		/* node id or NIL */
	uint32_t depth;		/* entries in the stack */
	uint32_t succ_off;	/* into succ pool, valid when succ_n >= 0 */
	int32_t succ_n;		/* -1 until computed */
};

struct gstate {
	uint32_t off, n;	/* node ids pool[off, off + n), ascending */
	uint32_t acc;		/* partial character: bits so far, or
				   ACC_ANY */
	uint8_t need;		/* continuation bytes still needed */
	uint8_t lo, hi;		/* range of the next continuation byte */
	bool accepting;		/* need == 0 and node ACCEPT present */
	int32_t *next;		/* (256) or NULL */
	uint8_t *mask;		/* (n_vocab bits) or NULL */
	uint32_t hash;
};

/* A growable array of u32. */
struct u32v {
	uint32_t *a;
	uint32_t n, cap;
};

/* Open-addressing table of int32 ids (-1 empty), keyed by the caller. */
struct itab {
	int32_t *slot;
	uint32_t cap;		/* power of two */
	uint32_t n;
};

struct gmatch {
	const struct grammar *g;
	const struct gvocab *v;

	struct gnode *nodes;
	uint32_t n_nodes, cap_nodes;
	struct itab node_tab;
	struct u32v succ;	/* succ lists */

	struct gstate *states;
	uint32_t n_states, cap_states;
	struct itab state_tab;
	struct u32v spool;	/* state node lists */
	size_t mask_bytes;
	size_t next_bytes;	/* of the states' transition tables */

	int32_t cur;		/* current state */
	int32_t start;		/* state at the start of the grammar */

	/* scratch */
	struct u32v set;	/* nodes being collected */
	uint64_t *seen;		/* visited (pos, parent) keys, 0 = empty */
	uint32_t seen_cap, seen_n;
	int recursion;
	int32_t *walk;		/* (v->max_len + 1) states of a mask walk */

	int err;
	char msg[CP_ERR_MSG];
	bool dead;		/* a flush failed half way: every call fails */
};

/* ---- errors ---- */

__attribute__((format(printf, 3, 4)))
static int
merr(struct gmatch *m, int code, const char *fmt, ...)
{
	va_list ap;

	if (m->err == 0) {
		va_start(ap, fmt);
		vsnprintf(m->msg, sizeof(m->msg), fmt, ap);
		va_end(ap);
		m->err = code;
	}
	return m->err;
}

static int
nomem(struct gmatch *m)
{
	return merr(m, -ENOMEM, "grammar matcher: out of memory");
}

const char *
gmatch_error(const struct gmatch *m)
{
	return m->msg;
}

/* ---- small containers ---- */

static int
u32v_push(struct gmatch *m, struct u32v *v, uint32_t x)
{
	uint32_t *na, nc;

	if (v->n == v->cap) {
		if (v->cap >= MAX_POOL)
			return merr(m, -E2BIG, "grammar matcher: more than %u "
			    "stack entries", MAX_POOL);
		nc = v->cap ? v->cap * 2 : 64;
		if ((na = realloc(v->a, (size_t)nc * sizeof(*na))) == NULL)
			return nomem(m);
		v->a = na;
		v->cap = nc;
	}
	v->a[v->n++] = x;
	return 0;
}

static uint32_t
mix32(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (uint32_t)x;
}

static int
itab_init(struct itab *t, uint32_t cap)
{
	t->cap = cap;
	t->n = 0;
	if ((t->slot = malloc((size_t)cap * sizeof(*t->slot))) == NULL)
		return -ENOMEM;
	memset(t->slot, 0xff, (size_t)cap * sizeof(*t->slot));
	return 0;
}

/* ---- nodes ---- */

static uint32_t
node_hash(uint32_t pos, int32_t parent)
{
	return mix32((uint64_t)pos << 32 | (uint32_t)parent);
}

/*
 * Rebuild table *t at twice its size over ids [0, n), the slot of id i
 * found from hash(m, i).
 */
static int
itab_grow(struct gmatch *m, struct itab *t, uint32_t n,
    uint32_t (*hash)(const struct gmatch *, uint32_t))
{
	struct itab nt;
	uint32_t i, h;

	if (itab_init(&nt, t->cap * 2) < 0)
		return nomem(m);
	for (i = 0; i < n; i++) {
		h = hash(m, i) & (nt.cap - 1);
		while (nt.slot[h] >= 0)
			h = (h + 1) & (nt.cap - 1);
		nt.slot[h] = (int32_t)i;
	}
	nt.n = n;
	free(t->slot);
	*t = nt;
	return 0;
}

static uint32_t
node_hash_of(const struct gmatch *m, uint32_t i)
{
	return node_hash(m->nodes[i].pos, m->nodes[i].parent);
}

static uint32_t
state_hash_of(const struct gmatch *m, uint32_t i)
{
	return m->states[i].hash;
}

/* The node (pos, parent); -1 when its stack would be too deep, < -1 on
 * error (m->err). */
static int32_t
node_get(struct gmatch *m, uint32_t pos, int32_t parent)
{
	struct gnode *nn;
	uint32_t h, depth;
	int32_t id;

	h = node_hash(pos, parent) & (m->node_tab.cap - 1);
	while ((id = m->node_tab.slot[h]) >= 0) {
		if (m->nodes[id].pos == pos && m->nodes[id].parent == parent)
			return id;
		h = (h + 1) & (m->node_tab.cap - 1);
	}
	depth = parent == NIL ? 1 : m->nodes[parent].depth + 1;
	if (depth > GMATCH_MAX_DEPTH)
		return -1;
	if (m->n_nodes >= MAX_NODES) {
		merr(m, -E2BIG, "grammar matcher: more than %u stack nodes",
		    MAX_NODES);
		return -2;
	}
	if (m->n_nodes == m->cap_nodes) {
		nn = realloc(m->nodes, (size_t)m->cap_nodes * 2 *
		    sizeof(*nn));
		if (nn == NULL) {
			nomem(m);
			return -2;
		}
		m->nodes = nn;
		m->cap_nodes *= 2;
	}
	id = (int32_t)m->n_nodes++;
	m->nodes[id] = (struct gnode){ pos, parent, depth, 0, -1 };
	m->node_tab.slot[h] = id;
	if (++m->node_tab.n * 2 > m->node_tab.cap &&
	    itab_grow(m, &m->node_tab, m->n_nodes, node_hash_of) < 0)
		return -2;
	return id;
}

/* Whether (pos, parent) was expanded already in this closure; marks it. */
static int
seen_test_set(struct gmatch *m, uint32_t pos, int32_t parent, bool *was)
{
	uint64_t key = ((uint64_t)pos << 32 | (uint32_t)(parent + 1)) + 1;
	uint64_t *ns;
	uint32_t h, i, nc;

	if ((m->seen_n + 1) * 2 > m->seen_cap) {
		nc = m->seen_cap ? m->seen_cap * 2 : 256;
		if ((ns = calloc(nc, sizeof(*ns))) == NULL)
			return nomem(m);
		for (i = 0; i < m->seen_cap; i++) {
			if (m->seen[i] == 0)
				continue;
			h = mix32(m->seen[i]) & (nc - 1);
			while (ns[h] != 0)
				h = (h + 1) & (nc - 1);
			ns[h] = m->seen[i];
		}
		free(m->seen);
		m->seen = ns;
		m->seen_cap = nc;
	}
	h = mix32(key) & (m->seen_cap - 1);
	while (m->seen[h] != 0) {
		if (m->seen[h] == key) {
			*was = true;
			return 0;
		}
		h = (h + 1) & (m->seen_cap - 1);
	}
	m->seen[h] = key;
	m->seen_n++;
	*was = false;
	return 0;
}

static void
seen_clear(struct gmatch *m)
{
	if (m->seen_n > 0)
		memset(m->seen, 0, (size_t)m->seen_cap * sizeof(*m->seen));
	m->seen_n = 0;
}

/* Add to m->set the stacks of position pos over parent (header). */
static int
expand(struct gmatch *m, uint32_t pos, int32_t parent)
{
	const struct grammar *g = m->g;
	const struct grule *r;
	struct gelem el = g->elems[pos];
	int32_t ret;
	uint32_t a;
	bool was;
	int rc = 0;

	if (el.type == GE_CLASS) {
		if ((ret = node_get(m, pos, parent)) == -1)
			return 0;
		return ret < 0 ? m->err : u32v_push(m, &m->set, (uint32_t)ret);
	}
	if (seen_test_set(m, pos, parent, &was) < 0)
		return m->err;
	if (was)
		return 0;
	if (++m->recursion > EXPAND_MAX_RECURSION) {
		rc = merr(m, -E2BIG, "grammar matcher: expansion deeper than "
		    "%d", EXPAND_MAX_RECURSION);
		goto out;
	}
	if (el.type == GE_END) {
		if (parent == NIL)
			rc = u32v_push(m, &m->set, ACCEPT);
		else
			rc = expand(m, m->nodes[parent].pos,
			    m->nodes[parent].parent);
		goto out;
	}
	/* GE_REF */
	ret = parent;
	if (g->elems[pos + 1].type != GE_END) {
		if ((ret = node_get(m, pos + 1, parent)) == -1)
			goto out;
		if (ret < 0) {
			rc = m->err;
			goto out;
		}
	}
	r = &g->rules[el.arg];
	for (a = 0; a < r->n_alts && rc == 0; a++)
		rc = expand(m, g->alts[r->first_alt + a], ret);
out:
	m->recursion--;
	return rc;
}

static int
u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Sort and deduplicate m->set; -E2BIG past GMATCH_MAX_STACKS. */
static int
set_finish(struct gmatch *m)
{
	uint32_t i, n = 0;

	if (m->set.n > 1)
		qsort(m->set.a, m->set.n, sizeof(*m->set.a), u32_cmp);
	for (i = 0; i < m->set.n; i++)
		if (n == 0 || m->set.a[i] != m->set.a[n - 1])
			m->set.a[n++] = m->set.a[i];
	m->set.n = n;
	if (n > GMATCH_MAX_STACKS)
		return merr(m, -E2BIG, "grammar too ambiguous: more than %d "
		    "parses at once", GMATCH_MAX_STACKS);
	return 0;
}

/* Node id's successors (its class consumed), computed once. */
static int
node_succ(struct gmatch *m, int32_t id, const uint32_t **s, uint32_t *n)
{
	struct u32v saved = m->set;
	uint32_t i, off;
	int rc;

	if (m->nodes[id].succ_n < 0) {
		m->set = (struct u32v){ NULL, 0, 0 };
		seen_clear(m);
		rc = expand(m, m->nodes[id].pos + 1, m->nodes[id].parent);
		if (rc == 0)
			rc = set_finish(m);
		off = m->succ.n;
		for (i = 0; rc == 0 && i < m->set.n; i++)
			rc = u32v_push(m, &m->succ, m->set.a[i]);
		free(m->set.a);
		m->set = saved;
		if (rc < 0)
			return rc;
		m->nodes[id].succ_off = off;
		m->nodes[id].succ_n = (int32_t)(m->succ.n - off);
	}
	*s = m->succ.a + m->nodes[id].succ_off;
	*n = (uint32_t)m->nodes[id].succ_n;
	return 0;
}

/* ---- states ---- */

static uint32_t
state_hash(const uint32_t *ids, uint32_t n, uint32_t acc, uint8_t need,
    uint8_t lo, uint8_t hi)
{
	uint64_t h = ((uint64_t)acc << 24) ^ ((uint64_t)need << 16) ^
	    ((uint64_t)lo << 8) ^ hi;
	uint32_t i;

	for (i = 0; i < n; i++)
		h = (h ^ ids[i]) * 0x100000001b3ULL;
	return mix32(h ^ n);
}

/* The state of stacks m->set (sorted, unique) and the partial character
 * (acc, need, lo, hi); its id, T_DEAD for an empty set, T_ERR. */
static int32_t
state_get(struct gmatch *m, uint32_t acc, uint8_t need, uint8_t lo,
    uint8_t hi)
{
	const uint32_t *ids = m->set.a;
	uint32_t n = m->set.n, h, hash, i;
	struct gstate *st, *ns;
	int32_t id;

	if (n == 0)
		return T_DEAD;
	hash = state_hash(ids, n, acc, need, lo, hi);
	h = hash & (m->state_tab.cap - 1);
	while ((id = m->state_tab.slot[h]) >= 0) {
		st = &m->states[id];
		if (st->hash == hash && st->n == n && st->acc == acc &&
		    st->need == need && st->lo == lo && st->hi == hi &&
		    memcmp(m->spool.a + st->off, ids, n * sizeof(*ids)) == 0)
			return id;
		h = (h + 1) & (m->state_tab.cap - 1);
	}
	if (m->n_states >= GMATCH_MAX_STATES) {
		merr(m, -E2BIG, "grammar matcher: more than %d states",
		    GMATCH_MAX_STATES);
		return T_ERR;
	}
	if (m->n_states == m->cap_states) {
		ns = realloc(m->states, (size_t)m->cap_states * 2 *
		    sizeof(*ns));
		if (ns == NULL) {
			nomem(m);
			return T_ERR;
		}
		m->states = ns;
		m->cap_states *= 2;
	}
	id = (int32_t)m->n_states;
	st = &m->states[id];
	memset(st, 0, sizeof(*st));
	st->off = m->spool.n;
	for (i = 0; i < n; i++)
		if (u32v_push(m, &m->spool, ids[i]) < 0)
			return T_ERR;
	st->n = n;
	st->acc = acc;
	st->need = need;
	st->lo = lo;
	st->hi = hi;
	st->accepting = need == 0 && ids[0] == ACCEPT;
	st->hash = hash;
	m->n_states++;
	m->state_tab.slot[h] = id;
	if (++m->state_tab.n * 2 > m->state_tab.cap &&
	    itab_grow(m, &m->state_tab, m->n_states, state_hash_of) < 0)
		return T_ERR;
	return id;
}

/*
 * State sid with a partial character (acc, need, lo, hi): the tops whose
 * class meets the code points it may become (none: T_DEAD).  When each of
 * them holds all of those code points, which ones they are no longer
 * matters: the state keeps ACC_ANY instead of acc, so that the many
 * partial characters a vocabulary holds (every lead and continuation byte
 * of CJK text inside a JSON string) share one state per stack set.
 */
static int32_t
partial(struct gmatch *m, int32_t sid, uint32_t acc, uint8_t need,
    uint8_t lo, uint8_t hi)
{
	/* the code points it may become: the next byte in [lo, hi], any
	 * continuation bytes after it */
	uint32_t rest = 6u * (need - 1u);
	uint32_t min = (acc << 6 | (lo & 0x3fu)) << rest;
	uint32_t max = (acc << 6 | (hi & 0x3fu)) << rest | ((1u << rest) - 1);
	uint32_t i, id, off = m->states[sid].off, n = m->states[sid].n;
	enum gspan span;
	bool exact = false;

	m->set.n = 0;
	for (i = 0; i < n; i++) {
		id = m->spool.a[off + i];
		if (id == ACCEPT)
			continue;
		span = gclass_span(m->g, m->g->elems[m->nodes[id].pos].arg,
		    min, max);
		if (span == GSPAN_NONE)
			continue;
		exact |= span == GSPAN_SOME;
		if (u32v_push(m, &m->set, id) < 0)
			return T_ERR;
	}
	return state_get(m, exact ? acc : ACC_ANY, need, lo, hi);
}

/* State sid after code point cp (any: each top matches, see partial()). */
static int32_t
advance_cp(struct gmatch *m, int32_t sid, uint32_t cp, bool any)
{
	const uint32_t *s;
	uint32_t i, j, k, id, n;

	n = m->states[sid].n;
	m->set.n = 0;
	for (i = 0; i < n; i++) {
		id = m->spool.a[m->states[sid].off + i];
		if (id == ACCEPT || (!any &&
		    !gclass_has(m->g, m->g->elems[m->nodes[id].pos].arg, cp)))
			continue;
		/* node_succ keeps m->set */
		if (node_succ(m, (int32_t)id, &s, &k) < 0)
			return T_ERR;
		for (j = 0; j < k; j++)
			if (u32v_push(m, &m->set, s[j]) < 0)
				return T_ERR;
	}
	if (set_finish(m) < 0)
		return T_ERR;
	return state_get(m, 0, 0, 0, 0);
}

/* State sid after byte b, uncached. */
static int32_t
step_byte(struct gmatch *m, int32_t sid, uint8_t b)
{
	struct gstate st = m->states[sid];
	uint32_t acc;

	if (st.need > 0) {
		if (b < st.lo || b > st.hi)
			return T_DEAD;
		if (st.acc == ACC_ANY) {
			if (st.need == 1)
				return advance_cp(m, sid, 0, true);
			/* every top still holds every completion */
			m->set.n = 0;
			for (acc = 0; acc < st.n; acc++)
				if (u32v_push(m, &m->set,
				    m->spool.a[st.off + acc]) < 0)
					return T_ERR;
			return state_get(m, ACC_ANY, (uint8_t)(st.need - 1),
			    0x80, 0xbf);
		}
		acc = st.acc << 6 | (b & 0x3fu);
		if (st.need == 1)
			return advance_cp(m, sid, acc, false);
		return partial(m, sid, acc, (uint8_t)(st.need - 1), 0x80,
		    0xbf);
	}
	if (b < 0x80)
		return advance_cp(m, sid, b, false);
	if (b >= 0xc2 && b <= 0xdf)
		return partial(m, sid, b & 0x1fu, 1, 0x80, 0xbf);
	if (b >= 0xe0 && b <= 0xef)
		return partial(m, sid, b & 0x0fu, 2, b == 0xe0 ? 0xa0 : 0x80,
		    b == 0xed ? 0x9f : 0xbf);
	if (b >= 0xf0 && b <= 0xf4)
		return partial(m, sid, b & 0x07u, 3, b == 0xf0 ? 0x90 : 0x80,
		    b == 0xf4 ? 0x8f : 0xbf);
	return T_DEAD;
}

/* State sid after byte b, through the state's transition table. */
static int32_t
next_state(struct gmatch *m, int32_t sid, uint8_t b)
{
	int32_t *next = m->states[sid].next, to;
	int i;

	if (next == NULL) {
		if ((next = malloc(256 * sizeof(*next))) == NULL) {
			nomem(m);
			return T_ERR;
		}
		for (i = 0; i < 256; i++)
			next[i] = T_UNKNOWN;
		m->states[sid].next = next;
		m->next_bytes += 256 * sizeof(*next);
	}
	if (next[b] != T_UNKNOWN)
		return next[b];
	to = step_byte(m, sid, b);
	if (to == T_ERR)
		return T_ERR;
	m->states[sid].next[b] = to;
	return to;
}

/* ---- life cycle ---- */

/* The start state: the root rule over an empty stack. */
static int32_t
start_state(struct gmatch *m)
{
	const struct grule *r = &m->g->rules[m->g->root];
	uint32_t a;

	m->set.n = 0;
	seen_clear(m);
	for (a = 0; a < r->n_alts; a++)
		if (expand(m, m->g->alts[r->first_alt + a], NIL) < 0)
			return T_ERR;
	if (set_finish(m) < 0)
		return T_ERR;
	return state_get(m, 0, 0, 0, 0);
}

static void
caches_free(struct gmatch *m)
{
	uint32_t i;

	for (i = 0; i < m->n_states; i++) {
		free(m->states[i].next);
		free(m->states[i].mask);
	}
	m->n_states = 0;
	m->n_nodes = 0;
	m->succ.n = 0;
	m->spool.n = 0;
	m->mask_bytes = 0;
	m->next_bytes = 0;
}

/* Give the emptied caches' arrays back, down to gmatch_new()'s sizes. */
static int
caches_shrink(struct gmatch *m)
{
	struct gnode *nn;
	struct gstate *ns;

	free(m->succ.a);
	free(m->spool.a);
	free(m->set.a);
	free(m->seen);
	memset(&m->succ, 0, sizeof(m->succ));
	memset(&m->spool, 0, sizeof(m->spool));
	memset(&m->set, 0, sizeof(m->set));
	m->seen = NULL;
	m->seen_cap = m->seen_n = 0;
	if (m->cap_nodes > 1024) {
		if ((nn = realloc(m->nodes, 1024 * sizeof(*nn))) == NULL)
			return nomem(m);
		m->nodes = nn;
		m->cap_nodes = 1024;
	}
	if (m->cap_states > 256) {
		if ((ns = realloc(m->states, 256 * sizeof(*ns))) == NULL)
			return nomem(m);
		m->states = ns;
		m->cap_states = 256;
	}
	return 0;
}

/* Empty node and state tables with node ACCEPT; 0 or -ENOMEM. */
static int
tables_init(struct gmatch *m)
{
	free(m->node_tab.slot);
	free(m->state_tab.slot);
	m->node_tab.slot = m->state_tab.slot = NULL;
	if (itab_init(&m->node_tab, 1024) < 0 ||
	    itab_init(&m->state_tab, 256) < 0)
		return nomem(m);
	m->nodes[0] = (struct gnode){ UINT32_MAX, NIL, 0, 0, 0 };
	m->n_nodes = 1;
	return 0;
}

/*
 * The stacks of m's current state as position lists: *out holds, for
 * each stack, its depth then its positions bottom up (malloc'd).
 */
static int
export_stacks(struct gmatch *m, uint32_t **out)
{
	const struct gstate *cur = &m->states[m->cur];
	uint32_t *stk, i, d, total = 0;
	int32_t id, p;

	for (i = 0; i < cur->n; i++)
		total += m->nodes[m->spool.a[cur->off + i]].depth + 1;
	if ((stk = malloc(((size_t)total + 1) * sizeof(*stk))) == NULL)
		return nomem(m);
	total = 0;
	for (i = 0; i < cur->n; i++) {
		id = (int32_t)m->spool.a[cur->off + i];
		d = m->nodes[id].depth;
		stk[total] = d;
		for (p = id; p > ACCEPT; p = m->nodes[p].parent)
			stk[total + d--] = m->nodes[p].pos;
		total += m->nodes[id].depth + 1;
	}
	*out = stk;
	return 0;
}

/* Make the state of n stacks stk (export_stacks()) and the partial
 * character of st m's current state, in m's (empty) tables. */
static int
import_stacks(struct gmatch *m, const uint32_t *stk, uint32_t n,
    const struct gstate *st)
{
	uint32_t i, d, at = 0;
	int32_t p;

	m->set.n = 0;
	for (i = 0; i < n; i++) {
		p = stk[at] == 0 ? ACCEPT : NIL;
		for (d = 1; d <= stk[at]; d++)
			if ((p = node_get(m, stk[at + d], p)) < 0)
				return m->err ? m->err : nomem(m);
		if (u32v_push(m, &m->set, (uint32_t)p) < 0)
			return m->err;
		at += stk[at] + 1;
	}
	if (set_finish(m) < 0)
		return m->err;
	if ((m->cur = state_get(m, st->acc, st->need, st->lo, st->hi)) < 0)
		return m->err;
	m->start = -1;
	return 0;
}

/* Drop every cache, keeping the current state; shrink: and give their
 * memory back. */
static int
flush(struct gmatch *m, bool shrink)
{
	struct gstate cur = m->states[m->cur];
	uint32_t *stk;
	int rc;

	if ((rc = export_stacks(m, &stk)) < 0)
		return rc;
	caches_free(m);
	if ((!shrink || (rc = caches_shrink(m)) == 0) &&
	    (rc = tables_init(m)) == 0)
		rc = import_stacks(m, stk, cur.n, &cur);
	free(stk);
	m->dead = rc < 0;
	return rc;
}

/* Start of each public call: clear the last error, bound the caches. */
static int
begin(struct gmatch *m)
{
	m->err = 0;
	m->msg[0] = '\0';
	if (m->dead)
		return merr(m, -ENOMEM, "grammar matcher: lost its state to "
		    "an earlier failure");
	if (m->n_states > GMATCH_MAX_STATES / 2 ||
	    m->n_nodes > MAX_NODES / 2 || m->succ.n > MAX_POOL / 2 ||
	    m->spool.n > MAX_POOL / 2 || m->mask_bytes > MASK_BUDGET)
		return flush(m, false);
	return 0;
}

size_t
gmatch_bytes(const struct gmatch *m)
{
	return sizeof(*m) + (size_t)m->cap_nodes * sizeof(*m->nodes) +
	    (size_t)m->cap_states * sizeof(*m->states) +
	    ((size_t)m->succ.cap + m->spool.cap + m->set.cap) *
	    sizeof(uint32_t) +
	    ((size_t)m->node_tab.cap + m->state_tab.cap) * sizeof(int32_t) +
	    (size_t)m->seen_cap * sizeof(*m->seen) +
	    ((size_t)m->v->max_len + 1) * sizeof(*m->walk) +
	    m->mask_bytes + m->next_bytes;
}

int
gmatch_trim(struct gmatch *m)
{
	m->err = 0;
	m->msg[0] = '\0';
	return m->dead ? -ENOMEM : flush(m, true);
}

struct gmatch *
gmatch_new(const struct grammar *g, const struct gvocab *v, struct cp_err *e)
{
	struct gmatch *m;

	if ((m = calloc(1, sizeof(*m))) == NULL)
		goto nomem;
	m->g = g;
	m->v = v;
	m->cap_nodes = 1024;
	m->cap_states = 256;
	m->nodes = malloc(m->cap_nodes * sizeof(*m->nodes));
	m->states = malloc(m->cap_states * sizeof(*m->states));
	m->walk = malloc(((size_t)v->max_len + 1) * sizeof(*m->walk));
	if (m->nodes == NULL || m->states == NULL || m->walk == NULL ||
	    tables_init(m) < 0)
		goto nomem;
	if ((m->start = m->cur = start_state(m)) < 0) {
		cp_err_set(e, m->err ? m->err : -EINVAL, "%s", m->err ? m->msg :
		    "grammar: the root rule matches nothing");
		gmatch_free(m);
		return NULL;
	}
	return m;
nomem:
	gmatch_free(m);
	cp_err_set(e, -ENOMEM, "grammar matcher: out of memory");
	return NULL;
}

void
gmatch_free(struct gmatch *m)
{
	if (m == NULL)
		return;
	if (m->states != NULL)
		caches_free(m);
	free(m->nodes);
	free(m->states);
	free(m->node_tab.slot);
	free(m->state_tab.slot);
	free(m->succ.a);
	free(m->spool.a);
	free(m->set.a);
	free(m->seen);
	free(m->walk);
	free(m);
}

struct gmatch *
gmatch_clone(const struct gmatch *m)
{
	struct gmatch *c, *mm = (struct gmatch *)m;
	struct gstate cur;
	uint32_t *stk;

	/* export_stacks() only reads m; it writes m->msg on failure */
	if (m->dead || (c = gmatch_new(m->g, m->v, NULL)) == NULL)
		return NULL;
	cur = m->states[m->cur];
	if (export_stacks(mm, &stk) < 0) {
		gmatch_free(c);
		return NULL;
	}
	caches_free(c);
	if (tables_init(c) < 0 || import_stacks(c, stk, cur.n, &cur) < 0) {
		free(stk);
		gmatch_free(c);
		return NULL;
	}
	free(stk);
	return c;
}

int
gmatch_n_vocab(const struct gmatch *m)
{
	return m->v->n_vocab;
}

void
gmatch_reset(struct gmatch *m)
{
	int32_t s;

	m->err = 0;
	m->msg[0] = '\0';
	if (m->dead)
		return;
	if (m->start >= 0) {
		m->cur = m->start;
		return;
	}
	if ((s = start_state(m)) >= 0)
		m->cur = m->start = s;
}

/* ---- matching ---- */

bool
gmatch_accepting(const struct gmatch *m)
{
	return !m->dead && m->states[m->cur].accepting;
}

bool
gmatch_done(const struct gmatch *m)
{
	const struct gstate *st = &m->states[m->cur];

	return !m->dead && st->accepting && st->n == 1;
}

/* The state after bytes p[0..n) from sid: >= 0, T_DEAD or T_ERR. */
static int32_t
walk_bytes(struct gmatch *m, int32_t sid, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n && sid >= 0; i++)
		sid = next_state(m, sid, p[i]);
	return sid;
}

int
gmatch_accept_bytes(struct gmatch *m, const char *p, size_t n)
{
	int32_t to;

	if (begin(m) < 0)
		return m->err;
	to = walk_bytes(m, m->cur, (const uint8_t *)p, n);
	if (to == T_ERR)
		return m->err;
	if (to < 0)
		return merr(m, -EINVAL, "grammar: text not allowed here");
	m->cur = to;
	return 0;
}

static bool
is_eog(const struct gvocab *v, int32_t id)
{
	return v->eog_bits[id >> 3] >> (id & 7) & 1;
}

int
gmatch_accept_token(struct gmatch *m, int32_t id)
{
	const struct gvocab *v = m->v;
	uint32_t len;

	if (id < 0 || id >= v->n_vocab)
		return merr(m, -EINVAL, "grammar: token %d out of range", id);
	if (is_eog(v, id)) {
		m->err = 0;
		if (!gmatch_accepting(m))
			return merr(m, -EINVAL, "grammar: end of generation "
			    "before the grammar is complete");
		return 0;
	}
	len = v->off[id + 1] - v->off[id];
	if (len == 0)
		return merr(m, -EINVAL, "grammar: token %d has no text", id);
	return gmatch_accept_bytes(m, v->bytes + v->off[id], len);
}

bool
gmatch_allows(struct gmatch *m, int32_t id)
{
	const struct gvocab *v = m->v;
	uint32_t len;

	if (id < 0 || id >= v->n_vocab)
		return false;
	if (is_eog(v, id))
		return gmatch_accepting(m);
	len = v->off[id + 1] - v->off[id];
	if (len == 0 || begin(m) < 0)
		return false;
	return walk_bytes(m, m->cur, (const uint8_t *)v->bytes + v->off[id],
	    len) >= 0;
}

/*
 * The mask of state sid: the sorted vocabulary walked through next[],
 * walk[d] the state after the first d bytes of the current token.
 */
static int
mask_walk(struct gmatch *m, int32_t sid, uint8_t *bits)
{
	const struct gvocab *v = m->v;
	const uint8_t *b;
	const int32_t *nx;
	int32_t *walk = m->walk, id, to = T_DEAD;
	uint32_t len, d, lcp;
	int k, j;

	/*
	 * At each token, walk[0..lcp] holds the states of its prefix shared
	 * with the previous token: the previous one either got past lcp, or
	 * died at depth <= lcp and every token sharing its dead prefix was
	 * skipped.  So only the token's own tail is walked.
	 */
	walk[0] = sid;
	for (k = 0; k < v->n_sorted; k++) {
		lcp = v->lcp[k];
		len = v->len[k];
		b = v->tails + v->tail_off[k] - lcp;
		for (d = lcp; d < len; d++) {
			/* the cached transition inline; next_state() else */
			nx = m->states[walk[d]].next;
			if (nx == NULL || (to = nx[b[d]]) == T_UNKNOWN)
				to = next_state(m, walk[d], b[d]);
			if (to < 0)
				break;
			walk[d + 1] = to;
		}
		if (d == len) {
			id = v->sorted[k];
			bits[id >> 3] |= (uint8_t)(1u << (id & 7));
			continue;
		}
		if (to == T_ERR)
			return m->err;
		/* the first d + 1 bytes are dead: skip every token sharing
		 * them */
		for (j = k + 1; j < v->n_sorted && v->lcp[j] > d; j++)
			;
		k = j - 1;
	}
	return 0;
}

int
gmatch_mask(struct gmatch *m, const uint8_t **bits)
{
	const struct gvocab *v = m->v;
	size_t nb = ((size_t)v->n_vocab + 7) / 8;
	uint8_t *mask;
	int32_t sid;
	int i, rc;

	*bits = NULL;
	if (begin(m) < 0)
		return m->err;
	sid = m->cur;
	if (m->states[sid].mask != NULL) {
		*bits = m->states[sid].mask;
		return 0;
	}
	if ((mask = calloc(nb, 1)) == NULL)
		return nomem(m);
	if ((rc = mask_walk(m, sid, mask)) < 0) {
		free(mask);
		return rc;
	}
	if (m->states[sid].accepting)
		for (i = 0; i < v->n_eog; i++)
			mask[v->eog[i] >> 3] |= (uint8_t)(1u << (v->eog[i] & 7));
	m->states[sid].mask = mask;
	m->mask_bytes += nb;
	*bits = mask;
	return 0;
}
