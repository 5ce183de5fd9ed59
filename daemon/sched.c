/*
 * sched.c - the step scheduler (see sched.h for the API).
 *
 * STATES OF A REQUEST
 *
 * A request's sequence is its prompt (n_prompt tokens) followed by the
 * n_gen tokens generated so far: n_seq = n_prompt + n_gen positions.
 * n_computed counts the leading positions whose KV the engine holds.
 * n_cached counts those whose KV the caller holds outside the engine's
 * cache (computed by the prefill lane, set by sched_unhold) and puts in
 * the cache when the request is admitted.
 *
 *   WAITING     on its client's waiting queue; holds no KV; n_computed 0,
 *               n_cached 0 or, once its hold is cleared, what
 *               sched_unhold said.
 *   PREFILLING  on the running list; holds KV; n_computed < n_seq and the
 *               positions [n_computed, n_seq) are still to be computed,
 *               in chunks, the last of which yields logits.
 *   DECODING    on the running list; n_computed == n_seq - 1: the last
 *               generated token is the one to feed next (1 token a step).
 *   (free)      an unused slot: the request finished or was cancelled and
 *               its handle is dead.
 *
 * "Running" means PREFILLING or DECODING.  Transitions:
 *
 *   (free)     -> WAITING     sched_add(), held or not
 *   WAITING    -> PREFILLING  sched_step(), admission (step_admit) of a
 *                             request neither held nor paused:
 *                             n_computed takes n_cached, which returns
 *                             to 0
 *   PREFILLING -> DECODING    sched_commit(), a logits row sampled a token
 *   running    -> WAITING     sched_step(), preemption by recompute
 *                             (preempt): its KV is dropped, its generated
 *                             tokens kept, so its next prefill covers
 *                             prompt + generated tokens from position 0
 *   PREFILLING -> WAITING     sched_hold() between steps, before any
 *                             token: held, its KV dropped (the caller
 *                             moves it elsewhere), no release listed
 *   running    -> (free)      sched_commit(): EOS, STOP, LENGTH, ERROR
 *   any        -> (free)      sched_step() after sched_cancel(): released
 *                             as cancelled before anything is planned
 *
 * Flags orthogonal to the state: paused (sched_pause: never planned, KV
 * kept) and cancel (sched_cancel: released at the next sched_step).  The
 * held flag is set by sched_add or sched_hold: a held request stays
 * WAITING, never admitted, until sched_unhold clears the flag and sets
 * n_cached.  Held and paused are independent; a request is admitted only
 * when neither is set.
 *
 * A STEP (sched_step) runs these phases in order:
 *   1. release every request whose cancel flag is set;
 *   2. decode: each unpaused DECODING request, oldest arrival first,
 *      gets 1 token;
 *   3. continue prefills: each unpaused PREFILLING request, oldest first,
 *      gets min(rest of its sequence, max_prefill_chunk, budget left),
 *      less what the pacer (pace_rows) refuses;
 *   4. admit: while budget and max_seqs allow and nothing was preempted
 *      in this step, take the next client in round-robin order and admit
 *      its oldest waiting request that is neither paused nor held, if the
 *      blocks for its whole sequence fit in the free blocks above the
 *      watermark (any request fits an empty pool); its first chunk starts
 *      at pos = n_cached, or when that is 0 at what the caller's
 *      admit_cached() says it holds (the prefix cache), and is
 *      min(n_seq - pos, max_prefill_chunk, budget left) tokens, less what
 *      the pacer refuses (when it refuses even one row at the request's
 *      n_cached, the phase ends).  The
 *      blocks are counted as if the request held all of them alone: a
 *      shared cached block is counted once per request holding it, so
 *      the engine's pool always has what the plan counts, and the cache
 *      never changes who is admitted, waits or is preempted.  A request that does not fit ends the phase:
 *      nobody overtakes it, its client keeps the turn.
 * The budget is max_batch_tokens.  It, max_prefill_chunk and
 * attention_cost_tokens may change between two steps
 * (sched_set_budgets(), a reload), never within one: a plan is made and
 * committed under one set, and invariants 2, 9 and 10 hold for the set
 * in use when the plan was made.  A decode token costs 1 of it; a
 * prompt token at position p costs 1, or 1 + p / attention_cost_tokens
 * when that is set (a chunk of n tokens from pos costs n plus the sum of
 * their positions over attention_cost_tokens, rounded up): a prompt
 * token's attention grows with its context, so chunks shrink as a long
 * prompt goes on and the steps it shares with decoding streams stay about
 * as long from its start to its end, instead of growing by the end to
 * set the streams' worst inter-token time.  A chunk gets at least one
 * token when any budget is left (its cost then takes the rest).
 *
 * The pacer (pace_begin, pace_rows, pace_take: a latency target) only
 * lowers the prompt rows of a step: it sees the step's decodes, then
 * every prompt chunk before it is planned, and may cut it; the step's
 * first prompt chunk keeps at least one row, and a later one cut to 0
 * ends phases 3 and 4.
 *
 * A decode that needs a block when none is free takes blocks from the
 * newest running request (largest arrival), preempting it, and is itself
 * preempted when it is the newest.  A prefill chunk that does not fit
 * preempts newer requests, newest first (unplanning a decode that phase 2
 * planned); when the request is itself the newest, its chunk shrinks to
 * the tokens that fit, and it is preempted only when none fits.
 *
 * INVARIANTS (sched_check verifies 1-7 between calls)
 *
 *  1. Every live request is in exactly one of: its client's waiting queue
 *     (WAITING) or the running list (PREFILLING, DECODING).  Both are
 *     sorted by arrival, oldest first.  A client is on the round-robin
 *     ring exactly when its waiting queue is not empty.
 *  2. n_running <= max_seqs <= max_batch_tokens.
 *  3. A WAITING request holds no blocks and n_computed == 0.  Outside a
 *     step, a running request holds exactly ceil(n_computed /
 *     kv_block_tokens) blocks; between sched_step and sched_commit, it
 *     holds ceil((pos + n) / kv_block_tokens) for its planned item (for
 *     an admission at pos = n_cached, the blocks of the cached positions
 *     too).  The blocks held plus kv_free equal kv_total_blocks.  Only a
 *     WAITING request is held, or has n_cached != 0; a held one has
 *     n_cached 0, and n_cached < n_seq.
 *  4. n_computed < n_seq for PREFILLING, == n_seq - 1 for DECODING;
 *     n_gen < max_tokens for every live request.
 *  5. n_prompt + max_tokens <= n_ctx, and ceil((n_prompt + max_tokens) /
 *     kv_block_tokens) <= kv_total_blocks (sched_add refuses the rest), so
 *     every position is below n_ctx and any request alone fits the pool:
 *     the oldest running request can always get its blocks by preempting
 *     newer ones, hence no deadlock.  max_tokens here is what the caller
 *     made of the client's: the worker lowers it to the room the context
 *     and the pool leave after the prompt (a cap, ending in CONTEXT
 *     there) and refuses a prompt that leaves none, so only a strict
 *     request, which it passes on unlowered, meets sched_add's refusal.
 *  6. A handle names one slot and one generation: a dead handle is
 *     refused, never aliased to a newer request.
 *  7. The cancel flag count equals the requests carrying it.
 *
 * and for every plan:
 *
 *  8. Each planned item starts at its request's n_computed (for an
 *     admission, at its n_cached) and covers [pos, pos + n), n >= 1,
 *     pos + n <= n_seq; logits iff pos + n == n_seq.  So between two
 *     preemptions each position of a request is planned exactly once, in
 *     order, but for the n_cached leading positions of its first
 *     admission, computed by the caller; after a preemption planning
 *     starts again at 0 and covers prompt + generated tokens.
 *  9. sum(n) <= sum(cost) <= max_batch_tokens; n_items <= n_running <=
 *     max_seqs; a
 *     request appears at most once, in rel[] or in items[], not both.
 * 10. Decode first: every unpaused DECODING request that is not
 *     preempted is planned, before any prefill chunk; each prefill chunk
 *     is <= max_prefill_chunk.
 * 11. Preemption takes the newest running request.  Hence the oldest
 *     running request is never preempted while another runs, and when
 *     unpaused it progresses every step: its decode token, or a chunk of
 *     at least one token (min(rest of its sequence, max_prefill_chunk,
 *     max_batch_tokens - max_seqs + 1) tokens without
 *     attention_cost_tokens and a pacer; with a pacer, at least one: the
 *     oldest prefilling request's chunk is the step's first).  With invariant 5 this rules out deadlock, and
 *     since arrival order is total, every request eventually becomes the
 *     oldest (pauses and holds aside).
 * 12. Admission is round-robin across clients with waiting requests, one
 *     admission per turn, FCFS within a client (paused and held requests
 *     skipped: they keep no later request of their client waiting).
 *     A client that starts waiting joins the rotation at its end, after
 *     every client already waiting, so it holds the turn after at most
 *     that many admissions, and keeps it until its request fits: nobody
 *     overtakes a request for lack of blocks.  An admitted request's whole
 *     sequence fits in the blocks free before it, less the watermark,
 *     unless the pool was entirely free (so a request needing nearly the
 *     whole pool still runs).  No admission follows a preemption in the
 *     same step.
 * 13. A request whose cancel flag is set when sched_step starts is listed
 *     in rel[] as cancelled and in no item; its blocks are free.
 * 14. A paused request is never planned; it keeps its blocks unless a
 *     preemption (phases 2 and 3 above) takes them, as from any running
 *     request.  A held request is never planned either, and holds no
 *     blocks.
 * 15. Every request ends visibly: finished through a nonzero items[].finish
 *     or cancelled through rel[]; none is dropped.
 * 16. admit_cached() (the prefix cache) is asked only at an admission with
 *     n_cached 0, after the admission was decided on the blocks of the
 *     request's whole sequence as if it shared none: what the caller
 *     supplies moves the first chunk's start, never who is admitted, who
 *     waits or who is preempted, and every shared block stays counted for
 *     each request holding it, so the plan never counts fewer blocks than
 *     the engine's pool holds for it.
 * 17. The pacer changes only how many prompt rows a step takes (phases 3
 *     and 4), never the decodes, the order of the chunks or who is
 *     admitted before whom; every step that plans
 *     prompt work plans at least one prompt row, so no prompt waits
 *     forever for the target.
 *
 * COST: nothing is allocated after sched_new.  A step is O(running +
 * clients on the ring + waiting requests skipped for being paused or
 * held), plus O(max_requests) when a cancel flag is pending; inserting a
 * preempted or admitted request into its sorted list walks from the tail.
 */
#include "sched.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_BITS	16
#define SLOT_MASK	((1 << SLOT_BITS) - 1)
#define GEN_MASK	0x7fff
#define NIL		(-1)

#define DEF_BATCH	512
#define DEF_SEQS	64
#define DEF_REQUESTS	1024
#define DEF_CLIENTS	256
#define DEF_BLOCK	16

struct sreq {
	uint64_t arrival;
	uint64_t req_id;
	int client;
	int state;		/* enum sched_state, 0 when the slot is free */
	int n_prompt;
	int max_tokens;
	int n_gen;
	int n_computed;
	int n_cached;		/* KV the caller holds, for admission */
	int n_blocks;
	int n_preempt;
	int prev, next;		/* waiting queue, running list or free list */
	int item;		/* index in the open plan's items, or NIL */
	int cost;		/* budget its planned item took */
	int gen;		/* handle generation, 0..GEN_MASK */
	bool held;
	bool paused;
	bool cancel;
};

struct sclient {
	int wait_head, wait_tail;	/* waiting queue, by arrival */
	int n_wait;
	int ring_prev, ring_next;	/* round-robin ring, NIL when off it */
};

struct sched {
	struct sched_config cfg;
	struct sreq *req;		/* [max_requests] */
	struct sclient *cl;		/* [max_clients] */
	struct sched_item *items;	/* [max_seqs] */
	struct sched_release *rel;	/* [max_requests] */
	struct sched_plan plan;
	int free_head;
	int n_live;
	int n_waiting;
	int run_head, run_tail;
	int n_running;
	int cursor;			/* next client to admit from, or NIL */
	int n_ring;
	int kv_free;
	int n_cancel;
	int budget;			/* tokens left in the step planned */
	bool preempted;			/* a preemption happened in this step */
	bool prompt_planned;		/* a prompt chunk is planned in it */
	bool open;			/* plan awaits sched_commit */
	uint64_t arrival_next;
	struct sched_stats st;
};

static int
blocks_for(const struct sched *s, int tokens)
{
	int bt = s->cfg.kv_block_tokens;

	return (int)(((int64_t)tokens + bt - 1) / bt);
}

static int
handle_of(const struct sched *s, int slot)
{
	return (s->req[slot].gen << SLOT_BITS) | slot;
}

static struct sreq *
lookup(const struct sched *s, int h)
{
	struct sreq *r;
	int slot;

	if (h < 0)
		return NULL;
	slot = h & SLOT_MASK;
	if (slot >= s->cfg.max_requests)
		return NULL;
	r = &s->req[slot];
	if (r->state == 0 || r->gen != (h >> SLOT_BITS))
		return NULL;
	return r;
}

/* ---- configuration ------------------------------------------------------- */

static int
check_range(struct cp_err *e, const char *name, int v, int lo, int hi)
{
	if (v < lo || v > hi)
		return cp_err_set(e, -EINVAL,
		    "sched: %s is %d, expected %d..%d", name, v, lo, hi);
	return 0;
}

static int
config_resolve(const struct sched_config *in, struct sched_config *c,
    struct cp_err *e)
{
	int rc;

	*c = *in;
	if (c->max_batch_tokens == 0)
		c->max_batch_tokens = DEF_BATCH;
	if (c->max_prefill_chunk == 0)
		c->max_prefill_chunk = c->max_batch_tokens;
	if (c->max_seqs == 0)
		c->max_seqs = DEF_SEQS < c->max_batch_tokens ?
		    DEF_SEQS : c->max_batch_tokens;
	if (c->max_requests == 0)
		c->max_requests = DEF_REQUESTS;
	if (c->max_clients == 0)
		c->max_clients = DEF_CLIENTS;
	if (c->kv_block_tokens == 0)
		c->kv_block_tokens = DEF_BLOCK;

	if ((rc = check_range(e, "max_batch_tokens", c->max_batch_tokens,
	    1, SCHED_MAX_BATCH)) != 0)
		return rc;
	if ((rc = check_range(e, "max_prefill_chunk (<= max_batch_tokens)",
	    c->max_prefill_chunk, 1, c->max_batch_tokens)) != 0)
		return rc;
	if ((rc = check_range(e, "max_seqs (<= max_batch_tokens)",
	    c->max_seqs, 1, c->max_batch_tokens)) != 0)
		return rc;
	if ((rc = check_range(e, "max_requests", c->max_requests,
	    1, SCHED_MAX_REQUESTS)) != 0)
		return rc;
	if ((rc = check_range(e, "max_clients", c->max_clients,
	    1, SCHED_MAX_CLIENTS)) != 0)
		return rc;
	if ((rc = check_range(e, "kv_block_tokens", c->kv_block_tokens,
	    1, SCHED_MAX_BLOCK_TOKENS)) != 0)
		return rc;
	if ((rc = check_range(e, "kv_total_blocks (times kv_block_tokens "
	    "<= 2^30)", c->kv_total_blocks, 1,
	    SCHED_MAX_KV_TOKENS / c->kv_block_tokens)) != 0)
		return rc;
	if ((rc = check_range(e, "n_ctx", c->n_ctx, 2, SCHED_MAX_CTX)) != 0)
		return rc;
	if ((rc = check_range(e, "attention_cost_tokens",
	    c->attention_cost_tokens, 0, SCHED_MAX_CTX)) != 0)
		return rc;
	if ((c->pace_begin == NULL) != (c->pace_rows == NULL) ||
	    (c->pace_rows == NULL) != (c->pace_take == NULL))
		return cp_err_set(e, -EINVAL, "sched: pace_begin, pace_rows "
		    "and pace_take go together");
	if (c->kv_watermark_blocks == 0) {
		c->kv_watermark_blocks = c->kv_total_blocks / 100;
		if (c->kv_watermark_blocks < 1)
			c->kv_watermark_blocks = 1;
		if (c->kv_watermark_blocks >= c->kv_total_blocks)
			c->kv_watermark_blocks = c->kv_total_blocks - 1;
	} else if (c->kv_watermark_blocks == SCHED_NO_WATERMARK) {
		c->kv_watermark_blocks = 0;
	} else if ((rc = check_range(e, "kv_watermark_blocks "
	    "(< kv_total_blocks, or -1 for none)", c->kv_watermark_blocks,
	    1, c->kv_total_blocks - 1)) != 0)
		return rc;
	return 0;
}

int
sched_new(const struct sched_config *cfg, struct sched **out,
    struct cp_err *e)
{
	struct sched *s = NULL;
	struct sched_config c;
	int i, rc;

	*out = NULL;
	if ((rc = config_resolve(cfg, &c, e)) != 0)
		return rc;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		goto nomem;
	s->cfg = c;
	s->req = calloc((size_t)c.max_requests, sizeof(*s->req));
	s->cl = calloc((size_t)c.max_clients, sizeof(*s->cl));
	s->items = calloc((size_t)c.max_seqs, sizeof(*s->items));
	s->rel = calloc((size_t)c.max_requests, sizeof(*s->rel));
	if (s->req == NULL || s->cl == NULL || s->items == NULL ||
	    s->rel == NULL)
		goto nomem;
	for (i = 0; i < c.max_requests; i++) {
		s->req[i].next = i + 1 < c.max_requests ? i + 1 : NIL;
		s->req[i].item = NIL;
	}
	for (i = 0; i < c.max_clients; i++) {
		s->cl[i].wait_head = s->cl[i].wait_tail = NIL;
		s->cl[i].ring_prev = s->cl[i].ring_next = NIL;
	}
	s->free_head = 0;
	s->run_head = s->run_tail = NIL;
	s->cursor = NIL;
	s->kv_free = c.kv_total_blocks;
	s->arrival_next = 1;
	s->plan.rel = s->rel;
	s->plan.items = s->items;
	*out = s;
	return 0;
nomem:
	sched_free(s);
	return cp_err_set(e, -ENOMEM, "sched: out of memory for %d requests",
	    c.max_requests);
}

void
sched_free(struct sched *s)
{
	if (s == NULL)
		return;
	free(s->rel);
	free(s->items);
	free(s->cl);
	free(s->req);
	free(s);
}

const struct sched_config *
sched_config(const struct sched *s)
{
	return &s->cfg;
}

int
sched_set_budgets(struct sched *s, const struct sched_budgets *b,
    struct cp_err *e)
{
	struct sched_config in = s->cfg, c;
	int rc;

	if (s->open)
		return cp_err_set(e, -EBUSY, "sched: budgets change between "
		    "steps, not within one");
	in.max_batch_tokens = b->max_batch_tokens;
	in.max_prefill_chunk = b->max_prefill_chunk;
	in.attention_cost_tokens = b->attention_cost_tokens;
	if (in.kv_watermark_blocks == 0)	/* resolved from "none" */
		in.kv_watermark_blocks = SCHED_NO_WATERMARK;
	if (b->max_batch_tokens <= 0)
		return cp_err_set(e, -EINVAL, "sched: max_batch_tokens %d is "
		    "out of range (1..%d)", b->max_batch_tokens,
		    SCHED_MAX_BATCH);
	if ((rc = config_resolve(&in, &c, e)) != 0)
		return rc;
	s->cfg = c;
	return 0;
}

/* ---- lists --------------------------------------------------------------- */

/* Put client c on the ring just before the cursor: the end of this round. */
static void
ring_insert(struct sched *s, int c)
{
	struct sclient *x = &s->cl[c];
	int nx, pv;

	if (s->cursor == NIL) {
		x->ring_prev = x->ring_next = c;
		s->cursor = c;
	} else {
		nx = s->cursor;
		pv = s->cl[nx].ring_prev;
		x->ring_prev = pv;
		x->ring_next = nx;
		s->cl[pv].ring_next = c;
		s->cl[nx].ring_prev = c;
	}
	s->n_ring++;
}

static void
ring_remove(struct sched *s, int c)
{
	struct sclient *x = &s->cl[c];

	if (x->ring_next == c) {
		s->cursor = NIL;
	} else {
		if (s->cursor == c)
			s->cursor = x->ring_next;
		s->cl[x->ring_prev].ring_next = x->ring_next;
		s->cl[x->ring_next].ring_prev = x->ring_prev;
	}
	x->ring_prev = x->ring_next = NIL;
	s->n_ring--;
}

/* Insert slot i between a and b (NIL at the ends) of a list. */
static void
link_between(struct sched *s, int i, int a, int b, int *head, int *tail)
{
	s->req[i].prev = a;
	s->req[i].next = b;
	if (a == NIL)
		*head = i;
	else
		s->req[a].next = i;
	if (b == NIL)
		*tail = i;
	else
		s->req[b].prev = i;
}

static void
unlink_from(struct sched *s, int i, int *head, int *tail)
{
	struct sreq *r = &s->req[i];

	if (r->prev == NIL)
		*head = r->next;
	else
		s->req[r->prev].next = r->next;
	if (r->next == NIL)
		*tail = r->prev;
	else
		s->req[r->next].prev = r->prev;
	r->prev = r->next = NIL;
}

/* Insert slot i into a list sorted by arrival, walking from the tail. */
static void
link_sorted(struct sched *s, int i, int *head, int *tail)
{
	int a = *tail;

	while (a != NIL && s->req[a].arrival > s->req[i].arrival)
		a = s->req[a].prev;
	link_between(s, i, a, a == NIL ? *head : s->req[a].next, head, tail);
}

static void
wait_push(struct sched *s, int i)
{
	struct sclient *c = &s->cl[s->req[i].client];

	link_sorted(s, i, &c->wait_head, &c->wait_tail);
	if (c->n_wait++ == 0)
		ring_insert(s, s->req[i].client);
	s->n_waiting++;
	s->req[i].state = SCHED_WAITING;
}

static void
wait_pop(struct sched *s, int i)
{
	struct sclient *c = &s->cl[s->req[i].client];

	unlink_from(s, i, &c->wait_head, &c->wait_tail);
	if (--c->n_wait == 0)
		ring_remove(s, s->req[i].client);
	s->n_waiting--;
}

static void
run_push(struct sched *s, int i)
{
	link_sorted(s, i, &s->run_head, &s->run_tail);
	s->n_running++;
}

static void
run_pop(struct sched *s, int i)
{
	unlink_from(s, i, &s->run_head, &s->run_tail);
	s->n_running--;
}

/* Drop slot i from every list, return its blocks, free the slot. */
static void
req_end(struct sched *s, int i)
{
	struct sreq *r = &s->req[i];

	if (r->state == SCHED_WAITING)
		wait_pop(s, i);
	else
		run_pop(s, i);
	s->kv_free += r->n_blocks;
	if (r->cancel)
		s->n_cancel--;
	s->n_live--;
	r->state = 0;
	r->n_blocks = 0;
	r->cancel = false;
	r->item = NIL;
	r->gen = (r->gen + 1) & GEN_MASK;
	r->prev = NIL;
	r->next = s->free_head;
	s->free_head = i;
}

/* ---- requests ------------------------------------------------------------ */

int
sched_add(struct sched *s, const struct sched_request *q, struct cp_err *e)
{
	const struct sched_config *c = &s->cfg;
	struct sreq *r;
	int i;

	if (q->client < 0 || q->client >= c->max_clients)
		return cp_err_set(e, -EINVAL, "sched: client %d out of range "
		    "0..%d", q->client, c->max_clients - 1);
	if (q->n_prompt < 1)
		return cp_err_set(e, -EINVAL, "sched: empty prompt (%d tokens)",
		    q->n_prompt);
	if (q->max_tokens < 1)
		return cp_err_set(e, -EINVAL, "sched: max_tokens is %d, "
		    "expected >= 1", q->max_tokens);
	if ((int64_t)q->n_prompt + q->max_tokens > c->n_ctx)
		return cp_err_set(e, -E2BIG, "sched: prompt of %d tokens plus "
		    "max_tokens %d exceeds the context of %d tokens",
		    q->n_prompt, q->max_tokens, c->n_ctx);
	if (blocks_for(s, q->n_prompt + q->max_tokens) > c->kv_total_blocks)
		return cp_err_set(e, -E2BIG, "sched: prompt of %d tokens plus "
		    "max_tokens %d needs %d KV blocks, the pool has %d",
		    q->n_prompt, q->max_tokens,
		    blocks_for(s, q->n_prompt + q->max_tokens),
		    c->kv_total_blocks);
	if ((i = s->free_head) == NIL)
		return cp_err_set(e, -ENOSPC, "sched: %d requests already "
		    "queued or running", c->max_requests);

	r = &s->req[i];
	s->free_head = r->next;
	r->arrival = s->arrival_next++;
	r->req_id = q->req_id;
	r->client = q->client;
	r->n_prompt = q->n_prompt;
	r->max_tokens = q->max_tokens;
	r->n_gen = 0;
	r->n_computed = 0;
	r->n_cached = 0;
	r->n_blocks = 0;
	r->n_preempt = 0;
	r->held = q->held;
	r->paused = false;
	r->cancel = false;
	r->item = NIL;
	s->n_live++;
	wait_push(s, i);
	return handle_of(s, i);
}

int
sched_cancel(struct sched *s, int req)
{
	struct sreq *r;

	if ((r = lookup(s, req)) == NULL)
		return -ENOENT;
	if (!r->cancel) {
		r->cancel = true;
		s->n_cancel++;
	}
	return 0;
}

int
sched_unhold(struct sched *s, int req, int n_cached)
{
	struct sreq *r;

	if ((r = lookup(s, req)) == NULL)
		return -ENOENT;
	if (!r->held || r->state != SCHED_WAITING || n_cached < 0 ||
	    n_cached >= r->n_prompt + r->n_gen)
		return -EINVAL;
	r->held = false;
	r->n_cached = n_cached;
	return 0;
}

int
sched_hold(struct sched *s, int req)
{
	struct sreq *r;
	int i;

	if ((r = lookup(s, req)) == NULL)
		return -ENOENT;
	if (s->open || r->state != SCHED_PREFILLING || r->n_gen != 0 ||
	    r->held)
		return -EINVAL;
	i = (int)(r - s->req);
	run_pop(s, i);
	s->kv_free += r->n_blocks;
	r->n_blocks = 0;
	r->n_computed = 0;
	r->held = true;
	wait_push(s, i);
	return 0;
}

int
sched_pause(struct sched *s, int req, bool on)
{
	struct sreq *r;

	if ((r = lookup(s, req)) == NULL)
		return -ENOENT;
	r->paused = on;
	return 0;
}

/* ---- planning ------------------------------------------------------------ */

static void
plan_release(struct sched *s, int i, int why)
{
	struct sched_release *x = &s->rel[s->plan.n_rel++];
	struct sreq *r = &s->req[i];

	x->req = handle_of(s, i);
	x->client = r->client;
	x->req_id = r->req_id;
	x->why = why;
	x->n_gen = r->n_gen;
}

/*
 * Budget that n prompt tokens from position pos cost (see the top), at
 * most INT_MAX.
 */
static int
chunk_cost(const struct sched *s, int pos, int n)
{
	int64_t c = s->cfg.attention_cost_tokens, sum;

	if (c <= 0)
		return n;
	/* positions pos .. pos + n - 1 */
	sum = (int64_t)n * pos + (int64_t)n * (n - 1) / 2;
	sum = n + (sum + c - 1) / c;
	return sum > INT_MAX ? INT_MAX : (int)sum;
}

/*
 * The most of n prompt tokens from position pos whose cost fits the
 * budget left, at least 1.
 */
static int
chunk_fit(const struct sched *s, int pos, int n)
{
	int lo = 1, hi = n;

	if (n > s->budget)
		hi = n = s->budget > 1 ? s->budget : 1;
	if (chunk_cost(s, pos, n) <= s->budget)
		return n;
	while (lo < hi) {	/* cost(lo) fits or lo == 1; cost(hi) not */
		int mid = lo + (hi - lo) / 2;

		if (mid == lo)
			break;
		if (chunk_cost(s, pos, mid) <= s->budget)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The rows of n prompt tokens from pos that the pacer lets the step take:
 * all without one, at least one for the step's first prompt chunk, else
 * 0..n.
 */
static int
pace(const struct sched *s, int pos, int n)
{
	const struct sched_config *c = &s->cfg;
	int m;

	if (c->pace_rows == NULL)
		return n;
	m = c->pace_rows(c->pace_arg, pos, n);
	if (m > n)
		m = n;
	if (m < 1)
		m = s->prompt_planned ? 0 : 1;
	return m;
}

static void
plan_item(struct sched *s, int i, int n)
{
	struct sreq *r = &s->req[i];
	struct sched_item *x = &s->items[s->plan.n_items];
	int need = blocks_for(s, r->n_computed + n) - r->n_blocks;
	int cost = r->state == SCHED_DECODING ? n : chunk_cost(s,
	    r->n_computed, n);

	r->item = s->plan.n_items++;
	r->n_blocks += need;
	s->kv_free -= need;
	r->cost = cost < s->budget ? cost : s->budget;
	s->budget -= r->cost;
	x->req = handle_of(s, i);
	x->client = r->client;
	x->req_id = r->req_id;
	x->pos = r->n_computed;
	x->n = n;
	x->logits = r->n_computed + n == r->n_prompt + r->n_gen;
	x->finish = SCHED_RUN;
	if (r->state == SCHED_DECODING)
		return;
	s->prompt_planned = true;
	if (s->cfg.pace_take != NULL)
		s->cfg.pace_take(s->cfg.pace_arg, x->pos, n);
}

/*
 * Preempt running slot i by recompute: drop its KV (and its item, if this
 * step planned one), keep its generated tokens, queue it again in arrival
 * order on its client's queue.
 */
static void
preempt(struct sched *s, int i)
{
	struct sreq *r = &s->req[i];
	struct sched_item *x;

	if (r->item != NIL) {
		x = &s->items[r->item];
		s->budget += r->cost;
		x->n = 0;
		r->item = NIL;
	}
	run_pop(s, i);
	s->kv_free += r->n_blocks;
	r->n_blocks = 0;
	r->n_computed = 0;
	r->n_preempt++;
	wait_push(s, i);
	plan_release(s, i, SCHED_REL_PREEMPT);
	s->preempted = true;
	s->st.preempted++;
}

static void
step_cancel(struct sched *s)
{
	int i;

	for (i = 0; i < s->cfg.max_requests && s->n_cancel > 0; i++) {
		if (s->req[i].state == 0 || !s->req[i].cancel)
			continue;
		plan_release(s, i, SCHED_REL_CANCEL);
		req_end(s, i);
		s->st.cancelled++;
	}
}

/* Phase 2: one token for each unpaused decoding request, oldest first. */
static void
step_decode(struct sched *s)
{
	struct sreq *r;
	int i, v;

	for (i = s->run_head; i != NIL && s->budget > 0; i = r->next) {
		r = &s->req[i];
		if (r->paused || r->state != SCHED_DECODING)
			continue;
		while (blocks_for(s, r->n_computed + 1) - r->n_blocks >
		    s->kv_free) {
			v = s->run_tail;
			preempt(s, v);
			if (v == i)
				return;	/* it was the newest: none follow */
		}
		plan_item(s, i, 1);
	}
}

/*
 * Phase 3: continue partial prefills, oldest first.  A chunk that does not
 * fit the free blocks preempts newer requests, newest first; a request
 * that is itself the newest shrinks its chunk to what fits instead, and
 * is preempted only when not one token fits.
 */
static void
step_prefill(struct sched *s)
{
	const int bt = s->cfg.kv_block_tokens;
	struct sreq *r;
	int i, n, fit;

	for (i = s->run_head; i != NIL && s->budget > 0; i = r->next) {
		r = &s->req[i];
		if (r->paused || r->state != SCHED_PREFILLING)
			continue;
		n = r->n_prompt + r->n_gen - r->n_computed;
		if (n > s->cfg.max_prefill_chunk)
			n = s->cfg.max_prefill_chunk;
		n = chunk_fit(s, r->n_computed, n);
		if ((n = pace(s, r->n_computed, n)) == 0) {
			s->budget = 0;	/* the step's time is spent */
			return;
		}
		while (blocks_for(s, r->n_computed + n) - r->n_blocks >
		    s->kv_free && s->run_tail != i)
			preempt(s, s->run_tail);
		fit = (r->n_blocks + s->kv_free) * bt - r->n_computed;
		if (fit < 1) {
			preempt(s, i);
			return;	/* it was the newest: none follow */
		}
		plan_item(s, i, n < fit ? n : fit);
	}
}

/* The first request neither paused nor held on c's waiting queue, or NIL. */
static int
first_ready(const struct sched *s, int c)
{
	int i;

	for (i = s->cl[c].wait_head; i != NIL; i = s->req[i].next)
		if (!s->req[i].paused && !s->req[i].held)
			return i;
	return NIL;
}

/* Phase 4: admission, round-robin across clients, FCFS within one. */
static void
step_admit(struct sched *s)
{
	const struct sched_config *c = &s->cfg;
	struct sreq *r;
	int i, cl, n, pos, room, skipped = 0;

	while (s->budget > 0 && s->n_running < c->max_seqs &&
	    s->cursor != NIL && skipped < s->n_ring) {
		cl = s->cursor;
		if ((i = first_ready(s, cl)) == NIL) {
			s->cursor = s->cl[cl].ring_next;
			skipped++;
			continue;
		}
		/*
		 * Admit only when the blocks of the whole sequence to prefill
		 * fit above the watermark, so that an admitted prompt seldom
		 * has to preempt; an empty pool takes any request (inv. 5).
		 */
		r = &s->req[i];
		n = r->n_prompt + r->n_gen;
		room = s->kv_free == c->kv_total_blocks ? s->kv_free :
		    s->kv_free - c->kv_watermark_blocks;
		if (blocks_for(s, n) > room || pace(s, r->n_cached, 1) == 0)
			return;
		/* the first chunk follows the positions the caller holds */
		pos = r->n_cached;
		if (pos == 0 && c->admit_cached != NULL) {
			pos = c->admit_cached(c->admit_arg, handle_of(s, i),
			    r->req_id, n);
			if (pos < 0 || pos >= n)
				pos = 0;
		}
		n -= pos;
		if (n > c->max_prefill_chunk)
			n = c->max_prefill_chunk;
		n = chunk_fit(s, pos, n);
		if ((n = pace(s, pos, n)) == 0)
			n = 1;	/* one row fit above, before the cache moved pos */
		s->cursor = s->cl[cl].ring_next;
		wait_pop(s, i);
		run_push(s, i);
		r->state = SCHED_PREFILLING;
		r->n_computed = pos;
		r->n_cached = 0;
		plan_item(s, i, n);
		s->st.admitted++;
		skipped = 0;
	}
}

int
sched_step(struct sched *s, struct sched_plan *plan)
{
	struct sched_plan *p = &s->plan;
	int k, j, n_decode;

	if (s->open)
		return -EBUSY;
	p->step = ++s->st.steps;
	p->n_rel = 0;
	p->n_items = 0;
	s->budget = s->cfg.max_batch_tokens;
	s->preempted = false;
	s->prompt_planned = false;

	step_cancel(s);
	step_decode(s);
	p->n_decode = p->n_items;
	if (s->cfg.pace_begin != NULL) {
		int64_t pos_sum = 0;

		for (k = j = 0; k < p->n_items; k++)
			if (s->items[k].n > 0) {
				pos_sum += s->items[k].pos;
				j++;
			}
		s->cfg.pace_begin(s->cfg.pace_arg, j, pos_sum);
	}
	step_prefill(s);
	if (!s->preempted)
		step_admit(s);

	/* drop the items of requests preempted after being planned */
	p->n_tokens = 0;
	n_decode = p->n_decode;
	for (k = j = 0; k < p->n_items; k++) {
		if (s->items[k].n == 0) {
			if (k < n_decode)
				p->n_decode--;
			continue;
		}
		s->req[s->items[k].req & SLOT_MASK].item = NIL;
		p->n_tokens += s->items[k].n;
		s->items[j++] = s->items[k];
	}
	p->n_items = j;
	s->st.tokens += (uint64_t)p->n_tokens;
	s->open = true;
	*plan = *p;
	return 0;
}

int
sched_commit(struct sched *s, struct sched_plan *plan)
{
	struct sched_item *x;
	struct sreq *r;
	int k, slot;

	if (!s->open || plan == NULL || plan->items != s->items ||
	    plan->step != s->plan.step || plan->n_items != s->plan.n_items)
		return -EINVAL;
	for (k = 0; k < plan->n_items; k++) {
		x = &s->items[k];
		if (lookup(s, x->req) == NULL)
			return -EINVAL;
		switch (x->finish) {
		case SCHED_RUN:
		case SCHED_FIN_ERROR:
			break;
		case SCHED_FIN_EOS:
		case SCHED_FIN_STOP:
			if (!x->logits)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
	}
	for (k = 0; k < plan->n_items; k++) {
		x = &s->items[k];
		slot = x->req & SLOT_MASK;
		r = &s->req[slot];
		if (x->finish == SCHED_FIN_ERROR) {
			req_end(s, slot);
			s->st.finished++;
			continue;
		}
		r->n_computed = x->pos + x->n;
		if (x->logits) {
			r->n_gen++;
			r->state = SCHED_DECODING;
			if (x->finish == SCHED_RUN && r->n_gen >= r->max_tokens)
				x->finish = SCHED_FIN_LENGTH;
		}
		if (x->finish != SCHED_RUN) {
			req_end(s, slot);
			s->st.finished++;
		}
	}
	s->open = false;
	return 0;
}

/* ---- inspection ---------------------------------------------------------- */

int
sched_req_info(const struct sched *s, int req, struct sched_req_info *out)
{
	const struct sreq *r;

	if ((r = lookup(s, req)) == NULL)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->state = r->state;
	out->client = r->client;
	out->req_id = r->req_id;
	out->arrival = r->arrival;
	out->n_prompt = r->n_prompt;
	out->max_tokens = r->max_tokens;
	out->n_gen = r->n_gen;
	out->n_computed = r->n_computed;
	out->n_cached = r->n_cached;
	out->n_blocks = r->n_blocks;
	out->n_preempt = r->n_preempt;
	out->held = r->held;
	out->paused = r->paused;
	out->cancelled = r->cancel;
	return 0;
}

void
sched_stats(const struct sched *s, struct sched_stats *out)
{
	*out = s->st;
	out->n_live = s->n_live;
	out->n_waiting = s->n_waiting;
	out->n_running = s->n_running;
	out->kv_free = s->kv_free;
	out->kv_total = s->cfg.kv_total_blocks;
}

static int
broken(struct cp_err *e, const char *what, int slot)
{
	return cp_err_set(e, -EFAULT, "sched: invariant broken: %s (slot %d)",
	    what, slot);
}

/* Walk one list of requests: sorted by arrival, links consistent. */
static int
check_list(const struct sched *s, int head, int tail, int *count,
    struct cp_err *e)
{
	int i, prev = NIL, n = 0;

	for (i = head; i != NIL; prev = i, i = s->req[i].next) {
		if (i < 0 || i >= s->cfg.max_requests ||
		    n > s->cfg.max_requests)
			return broken(e, "list link out of range", i);
		if (s->req[i].prev != prev)
			return broken(e, "list back link", i);
		if (prev != NIL && s->req[prev].arrival >= s->req[i].arrival)
			return broken(e, "list not in arrival order", i);
		n++;
	}
	if (prev != tail)
		return broken(e, "list tail", tail);
	*count = n;
	return 0;
}

int
sched_check(const struct sched *s, struct cp_err *e)
{
	const struct sched_config *c = &s->cfg;
	const struct sreq *r;
	int i, k, n, n_wait = 0, n_ring = 0, n_live = 0, n_cancel = 0;
	int blocks = 0, want, rc;

	if (c->max_seqs > c->max_batch_tokens || s->n_running > c->max_seqs)
		return broken(e, "more running than max_seqs", NIL);
	if ((rc = check_list(s, s->run_head, s->run_tail, &n, e)) != 0)
		return rc;
	if (n != s->n_running)
		return broken(e, "running count", NIL);
	for (i = s->run_head; i != NIL; i = s->req[i].next) {
		r = &s->req[i];
		if (r->state != SCHED_PREFILLING && r->state != SCHED_DECODING)
			return broken(e, "running list holds a non-running "
			    "request", i);
		want = blocks_for(s, r->n_computed);
		if (r->item != NIL)
			return broken(e, "stale item index", i);
		if (!s->open && r->n_blocks != want)
			return broken(e, "blocks held != ceil(computed / "
			    "block_tokens)", i);
		if (r->n_blocks < want)
			return broken(e, "fewer blocks than computed tokens",
			    i);
		if (r->state == SCHED_DECODING && !s->open &&
		    r->n_computed != r->n_prompt + r->n_gen - 1)
			return broken(e, "decoding request not at its last "
			    "token", i);
		if (r->state == SCHED_PREFILLING && !s->open &&
		    r->n_computed >= r->n_prompt + r->n_gen)
			return broken(e, "prefilling request has nothing "
			    "left", i);
		blocks += r->n_blocks;
	}
	for (k = 0; k < c->max_clients; k++) {
		const struct sclient *x = &s->cl[k];

		if ((rc = check_list(s, x->wait_head, x->wait_tail, &n, e))
		    != 0)
			return rc;
		if (n != x->n_wait)
			return broken(e, "client waiting count", k);
		if ((x->ring_next != NIL) != (n > 0))
			return broken(e, "client on the ring iff waiting", k);
		n_wait += n;
		n_ring += n > 0;
		for (i = x->wait_head; i != NIL; i = s->req[i].next) {
			r = &s->req[i];
			if (r->state != SCHED_WAITING || r->client != k)
				return broken(e, "waiting queue holds a "
				    "foreign request", i);
			if (r->n_blocks != 0 || r->n_computed != 0)
				return broken(e, "waiting request holds KV",
				    i);
		}
	}
	if (n_wait != s->n_waiting || n_ring != s->n_ring)
		return broken(e, "waiting or ring count", NIL);
	if ((s->cursor == NIL) != (n_ring == 0) ||
	    (s->cursor != NIL && s->cl[s->cursor].ring_next == NIL))
		return broken(e, "round-robin cursor", s->cursor);
	for (i = 0; i < c->max_requests; i++) {
		r = &s->req[i];
		if (r->state == 0)
			continue;
		n_live++;
		n_cancel += r->cancel;
		if (r->n_gen >= r->max_tokens ||
		    (int64_t)r->n_prompt + r->max_tokens > c->n_ctx)
			return broken(e, "request past max_tokens or n_ctx", i);
		if (r->held && (r->state != SCHED_WAITING || r->n_cached != 0))
			return broken(e, "held request not waiting, or with "
			    "cached positions", i);
		if (r->n_cached != 0 && r->state != SCHED_WAITING)
			return broken(e, "cached positions on a running "
			    "request", i);
		if (r->n_cached < 0 || r->n_cached >= r->n_prompt + r->n_gen)
			return broken(e, "cached positions past the sequence",
			    i);
	}
	if (n_live != s->n_live || n_live != s->n_waiting + s->n_running)
		return broken(e, "live count", NIL);
	if (n_cancel != s->n_cancel)
		return broken(e, "cancel count", NIL);
	if (blocks + s->kv_free != c->kv_total_blocks || s->kv_free < 0)
		return broken(e, "blocks held + free != total", NIL);
	return 0;
}
