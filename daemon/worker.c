/*
 * worker.c - cpd's engine thread (see worker.h).
 *
 * ONE TURN OF THE LOOP (worker_run)
 *   1. Commands.  When the last turn ran nothing, wait for the port's
 *      command fd (with a timeout, like every wait here).  Take every
 *      queued command and apply it in order: SUBMIT (check the ids, build
 *      the request, sched_add), CANCEL, PAUSE, RESUME (to the scheduler),
 *      SHUTDOWN (drop everything, return).  A SUBMIT of text goes to the
 *      tokenizer thread first (prep.h), and its client's later commands
 *      wait behind it; the loop goes on stepping meanwhile, and applies
 *      them when its ids are ready.  A SUBMIT whose prompt is long enough
 *      for the prefill lane (lane.h), when the lane is free, is added to
 *      the scheduler held and its prompt but the last token goes to the
 *      lane.  A prompt the steps are prefilling when others arrive may
 *      move there later (sched_hold, then the lane resumes it).
 *   2. Plan: first the lane (worker_lane.c): its progress, a finished
 *      prefill unheld with its positions counted, the steps' thread
 *      count; then sched_step().  An item that admits a request from the
 *      lane starts with the copy of the lane's K/V into its sequence.
 *   3. Release: free the KV sequence of each plan.rel[] entry; a cancelled
 *      request gets DONE (CP_FINISH_CANCELLED) and its slot is freed, a
 *      preempted one waits to be re-fed from position 0.
 *   4. Batch: each item's request gets a KV sequence (a new one after
 *      admission or preemption), grown by the item's tokens, and the
 *      item's token range is copied into one step_batch, items in plan
 *      order.
 *   5. Step: be_step().  Per entry, in order: a PROGRESS event when the
 *      entry computed prompt positions of a request that asked for them
 *      and has no token yet; then, for an entry with a logits row: sample,
 *      accept, detokenize (streaming), match stop strings, TOKEN event
 *      with the text that is safe to send.  Steps are numbered from 1
 *      (the count of steps run, es.steps, after them); every event
 *      emitted during a step carries its number, other events (a refused
 *      SUBMIT) 0.
 *   6. Commit: sched_commit(); each item that ended its request gets its
 *      terminal event (DONE with the held-back text; an ERROR was sent
 *      when the failure was found), its KV freed and its slot freed.
 *   7. Publish the counters, then ep_post() the turn's events.  Each
 *      counter lives in one place: steps, prompt and generated tokens,
 *      preemptions and KV blocks in the port's ep_stats (w->es), the
 *      rest in worker_stats (w->st).  Besides counts, ep_stats holds
 *      histograms (stats.h): prompt and decode tokens and sequences of
 *      each step that ran a batch, time to first token from the io
 *      loop's receipt of the SUBMIT (ep_cmd.t_recv_ns) to the step that
 *      sampled it, and the time between the steps that sampled a
 *      request's consecutive tokens.
 *
 * A request lives in a slot of w->req from its SUBMIT to its terminal
 * event; its slot number is the req_id the scheduler carries, so plans
 * lead straight to it.  A request's token array holds its prompt and then
 * every token generated so far: after a preemption the scheduler plans
 * positions from 0 again, and the batch is fed from that array (prompt and
 * generated tokens), while the sampler, detokenizer and stop matcher keep
 * their state, so the output goes on where it stopped.  The engine's batch
 * invariance makes the recomputed logits, hence the tokens, the same.
 *
 * THE PORT'S PROMISES (engine_port.h), AND WHERE THEY ARE KEPT
 *  1. One terminal event per SUBMIT: a SUBMIT that cannot be queued gets
 *     its ERROR in cmd_submit() and never takes a slot; a slot is freed
 *     only by req_end(), which runs right after the one terminal event
 *     (rel_apply for cancels, step_finish after commit, wk_fail() having sent
 *     the ERROR of a failed item); nothing names a freed slot afterwards.
 *  2. CANCEL, PAUSE, RESUME look the id up among live slots and do nothing
 *     when it is absent; the scheduler releases a cancelled request at the
 *     next sched_step(), whatever its state.
 *  3. PAUSE is sched_pause(): never planned, KV kept.
 *  4. Every turn that planned anything ends in ep_post() with a step
 *     boundary, a turn with events only (refused SUBMITs) in one without;
 *     the wait for the io loop is the port's.
 *  5. cmd_submit() checks token ids against n_vocab and the prompt against
 *     the context.  max_tokens is a cap: the room the context (or the
 *     pool, if smaller) leaves after the prompt lowers it, and reaching
 *     that room ends with CP_FINISH_CONTEXT, at the last position;
 *     max_tokens 0 means "until the context is full".  Only with
 *     EP_SUBMIT_STRICT is a prompt plus max_tokens past the context
 *     refused up front.  The scheduler's own check (its invariant 5) then
 *     always holds.
 *  6. Event text is the detokenizer's output filtered by the stop matcher:
 *     an incomplete UTF-8 sequence or a possible stop-string prefix is held
 *     back and sent with a later token or in DONE.
 *  7. SHUTDOWN: worker_run() frees every request and its KV without events
 *     and returns.
 *  8. wk_lane_poll() posts a request's PROGRESS, when it asked, for the
 *     lane's chunks, in a turn that counts as a step (promise 4) even when
 *     it plans nothing; then step_run() does as for any request.
 *     step_run() posts a request's PROGRESS, when it asked, for each of its
 *     entries of a step that ran and covered prompt positions, before that
 *     entry is sampled, and only while n_gen is 0 (no TOKEN sent yet): the
 *     count is the end of the entry's range within the prompt, so the
 *     step completing the prompt reports n_prompt, and a recompute after
 *     a preemption (still before any token) reports its own positions
 *     again from the first chunk.  A failed step posts none.
 *
 * A failed step (the backend refuses or fails a batch) fails the requests
 * of that batch only, each with an ERROR; the worker goes on serving.
 * Nothing on the step path allocates: batch arrays and text buffers are
 * sized in worker_new(), the event buffer keeps its memory between turns.
 */
#include "worker.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "kvcache.h"
#include "lane.h"
#include "log.h"
#include "prep.h"
#include "sampler.h"
#include "sched.h"
#include "stats.h"
#include "stopstr.h"
#include "worker_int.h"

#define WK_DEF_REQUESTS	1024
#define WK_DEF_CLIENTS	256
#define WK_IDLE_WAIT_MS	1000	/* wait for commands, then look again */
/* A step planned this soon after the previous batch follows it at once. */
#define STEP_GAP_NS	(2ull * 1000000ull)

/* ---- events ------------------------------------------------------------ */

/*
 * Queues one event with its top-n list top[0..n_top) (a TOKEN's; else
 * NULL, 0), stamped with the number of the step running (or 0).
 */
static void
emit_top(struct worker *w, const struct ep_event *evp, const void *text,
    size_t len, const struct cp_top *top, uint32_t n_top)
{
	struct ep_event ev = *evp;

	ev.step = w->cur_step;
	if (ep_batch_add_top(&w->out, &ev, text, len, top, n_top) == 0)
		return;
	/*
	 * Out of memory: hand the events built so far to the io loop, which
	 * gives an empty buffer back, and try once more in that one.
	 */
	if (ep_post(w->port, &w->out, 0) == 0 &&
	    ep_batch_add_top(&w->out, &ev, text, len, top, n_top) == 0)
		return;
	/*
	 * The buffer the io loop gives back has room for EP_RESERVE_TEXT
	 * bytes: an event that still does not fit has more text than that.
	 * A request's last event must not be lost (its client would wait for
	 * it forever): it goes without its text.
	 */
	if ((ev.type == EP_EV_DONE || ev.type == EP_EV_ERROR) &&
	    ep_batch_add_top(&w->out, &ev, NULL, 0, NULL, 0) == 0) {
		log_warnx("worker: request %llu: out of memory: its last "
		    "%zu bytes of text dropped", (unsigned long long)ev.id,
		    len);
		return;
	}
	log_warnx("worker: request %llu: event %u lost: out of memory",
	    (unsigned long long)ev.id, ev.type);
}

/* emit_top() of an event without a top-n list. */
static void
emit(struct worker *w, const struct ep_event *evp, const void *text,
    size_t len)
{
	emit_top(w, evp, text, len, NULL, 0);
}

static void
emit_error(struct worker *w, uint64_t id, int n_prompt, int n_gen, int err,
    const char *msg)
{
	struct ep_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.id = id;
	ev.type = EP_EV_ERROR;
	ev.token = -1;
	ev.error = err < 0 ? err : -EIO;
	ev.n_prompt = (uint32_t)(n_prompt > 0 ? n_prompt : 0);
	ev.n_gen = (uint32_t)(n_gen > 0 ? n_gen : 0);
	emit(w, &ev, msg, strlen(msg));
}

/*
 * One line per finished request: its client's process, tokens (prompt,
 * of them cached, generated), time to the first token and the generation
 * rate after it, and why it ended.
 */
static void
log_request(const struct wreq *r, uint32_t finish)
{
	double ttft = r->t_first_ns > r->t_recv_ns ?
	    (double)(r->t_first_ns - r->t_recv_ns) / 1e6 : 0;
	double gen_s = r->t_last_ns > r->t_first_ns ?
	    (double)(r->t_last_ns - r->t_first_ns) / 1e9 : 0;

	log_info("request %llu: pid %d, prompt %d tokens (%d cached), "
	    "generated %d, first token %.1f ms, %.1f tokens/s, %s",
	    (unsigned long long)r->id, (int)r->pid, r->n_prompt, r->n_cached,
	    r->n_gen, ttft, r->n_gen > 1 && gen_s > 0 ?
	    (double)(r->n_gen - 1) / gen_s : 0,
	    cp_finish_name(finish));
}

static void
emit_done(struct worker *w, const struct wreq *r, uint32_t finish,
    const char *text, size_t len)
{
	struct ep_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.id = r->id;
	ev.type = EP_EV_DONE;
	ev.finish = finish;
	ev.token = -1;
	ev.n_prompt = (uint32_t)r->n_prompt;
	ev.n_gen = (uint32_t)r->n_gen;
	ev.n_cached = (uint32_t)r->n_cached;
	emit(w, &ev, text, len);
	log_request(r, finish);
}

/* PROGRESS of r: its prompt computed up to position done (promise 8). */
void
wk_emit_progress(struct worker *w, const struct wreq *r, int done)
{
	struct ep_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.id = r->id;
	ev.type = EP_EV_PROGRESS;
	ev.token = -1;
	ev.n_prompt = (uint32_t)done;
	ev.n_total = (uint32_t)r->n_prompt;
	emit(w, &ev, NULL, 0);
}

/* The ERROR event of live request r (its slot is freed after commit). */
void
wk_fail(struct worker *w, const struct wreq *r, int err, const char *fmt, ...)
{
	char msg[CP_ERR_MSG];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit_error(w, r->id, r->n_prompt, r->n_gen, err, msg);
}

/* ---- requests ---------------------------------------------------------- */

/* Bucket of a port id (ids are the server's slot, generation, number). */
static uint32_t
id_bucket(const struct worker *w, uint64_t id)
{
	id ^= id >> 31;
	id *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(id >> 32) & w->id_mask;
}

/* Live request slot into the id table (a CANCEL or PAUSE finds it). */
static void
id_link(struct worker *w, int slot)
{
	uint32_t b = id_bucket(w, w->req[slot].id);

	w->id_next[slot] = w->id_head[b];
	w->id_head[b] = slot;
}

static void
id_unlink(struct worker *w, int slot)
{
	int *p = &w->id_head[id_bucket(w, w->req[slot].id)];

	while (*p != -1 && *p != slot)
		p = &w->id_next[*p];
	if (*p == slot)
		*p = w->id_next[slot];
}

/* Frees what r holds and marks its slot free (not on the free stack). */
static void
req_clear(struct worker *w, struct wreq *r)
{
	if (r->handle >= 0)
		id_unlink(w, (int)(r - w->req));
	if (r->paused)
		w->n_paused--;
	if (w->lane_slot == (int)(r - w->req)) {
		lane_cancel(w->lane);
		w->lane_slot = -1;
	}
	wk_prefix_retire(w, r);
	sampler_free(r->smp);
	if (r->gram != NULL)
		w->n_gram--;
	grammar_free(r->gram);		/* after its matcher */
	stopstr_free(r->ss);
	free(r->toks);
	memset(r, 0, sizeof(*r));
	r->handle = -1;
	r->seq = -1;
}

/* End live request r after its terminal event: KV, memory, slot. */
static void
req_end(struct worker *w, struct wreq *r)
{
	req_clear(w, r);
	w->free_slot[w->n_free++] = (int)(r - w->req);
}

/* The live request named id, or NULL. */
static struct wreq *
req_find(struct worker *w, uint64_t id)
{
	int i;

	for (i = w->id_head[id_bucket(w, id)]; i != -1; i = w->id_next[i])
		if (w->req[i].id == id)
			return &w->req[i];
	return NULL;
}

/*
 * The prompt of c into w->enc; *n gets its length.  A text prompt comes
 * tokenized in ids (k = what prep_encode() returned, ids NULL when it
 * failed, pe why when k < 0) or, when ids is NULL and k is 0, is
 * tokenized here.  0 or -errno with e.
 */
static int
submit_prompt(struct worker *w, const struct ep_cmd *c, const int32_t *ids,
    int k, const struct cp_err *pe, int *n, struct cp_err *e)
{
	size_t i;

	*n = 0;
	if (c->flags & EP_SUBMIT_TOKENS) {
		if (c->n_tokens == 0)
			return cp_err_set(e, -EINVAL, "empty prompt");
		if (c->tokens == NULL)
			return cp_err_set(e, -EINVAL, "prompt tokens missing");
		if (c->n_tokens > (size_t)w->n_ctx)
			return cp_err_set(e, -E2BIG, "prompt of %zu tokens "
			    "exceeds the context of %d tokens", c->n_tokens,
			    w->n_ctx);
		for (i = 0; i < c->n_tokens; i++) {
			if (c->tokens[i] < 0 || c->tokens[i] >= w->n_vocab)
				return cp_err_set(e, -EINVAL, "prompt token "
				    "%zu is %d, expected 0..%d", i,
				    (int)c->tokens[i], w->n_vocab - 1);
			w->enc[i] = c->tokens[i];
		}
		*n = (int)c->n_tokens;
		return 0;
	}
	if (c->text == NULL && c->text_len > 0)
		return cp_err_set(e, -EINVAL, "prompt text missing");
	if (ids == NULL && k == 0)
		k = prep_encode(w->prep, c, w->enc, w->n_ctx, e);
	else if (k > 0)
		memcpy(w->enc, ids, (size_t)(k < w->n_ctx ? k : w->n_ctx) *
		    sizeof(*ids));
	else if (k < 0 && pe != NULL && pe->msg[0] != '\0')
		*e = *pe;
	if (k < 0 && e->msg[0] != '\0')
		return k;
	if (k < 0)
		return cp_err_set(e, k, "cannot tokenize the prompt: %s",
		    strerror(-k));
	if (k == 0)
		return cp_err_set(e, -EINVAL, "empty prompt: it has no tokens");
	if (k > w->n_ctx)
		return cp_err_set(e, -E2BIG, "prompt of %d tokens exceeds the "
		    "context of %d tokens", k, w->n_ctx);
	*n = k;
	return 0;
}

/*
 * The sampler of request r from c's parameters, taking the matcher and
 * grammar po holds (checked by submit_grammar()); 0 or -errno with e.
 */
static int
submit_sampler(struct worker *w, struct wreq *r, const struct ep_cmd *c,
    struct prep_out *po, struct cp_err *e)
{
	const struct ep_params *q = &c->params;
	struct sampler_params sp = sampler_params_default();
	int rc;

	if (q->repeat_last_n > SAMPLER_MAX_LAST_N)
		return cp_err_set(e, -EINVAL, "repeat_last_n %u out of range "
		    "0..%d", q->repeat_last_n, SAMPLER_MAX_LAST_N);
	sp.temp = q->temperature;
	sp.top_k = q->top_k;
	sp.top_p = q->top_p;
	sp.min_p = q->min_p;
	sp.repeat_penalty = q->repeat_penalty;
	sp.repeat_last_n = (int)q->repeat_last_n;
	/* A client's seed of SAMPLER_SEED_RANDOM (UINT64_MAX) draws one too. */
	sp.seed = (c->flags & EP_SUBMIT_SEED) ? q->seed : SAMPLER_SEED_RANDOM;
	if (q->top_n > CP_TOPN_MAX)
		return cp_err_set(e, -EINVAL, "top_n %u out of range 0..%u",
		    q->top_n, CP_TOPN_MAX);
	/* Both 0 without logprobs: the log-softmax pass is skipped. */
	sp.n_logprobs = (int)q->top_n;
	sp.logprob = r->logprob;
	sp.max_tokens = -1;		/* the scheduler counts */
	sp.ignore_eos = false;
	if ((r->smp = sampler_new_ws(&sp, w->n_vocab, w->smp_ws, e)) == NULL)
		return e->code < 0 ? e->code : -EINVAL;
	if (c->params.grammar != 0) {
		/* the matcher goes to the sampler, the grammar to r */
		if ((rc = sampler_set_grammar(r->smp, po->gm)) < 0)
			return cp_err_set(e, rc, "grammar: vocabulary of %d "
			    "tokens, the model's is %d",
			    gmatch_n_vocab(po->gm), w->n_vocab);
		po->gm = NULL;
		r->gram = po->gram;
		po->gram = NULL;
		w->n_gram++;
	}
	if ((rc = sampler_accept_prompt(r->smp, r->toks, r->n_prompt)) < 0)
		return cp_err_set(e, rc, "sampler: %s", strerror(-rc));
	return 0;
}

/*
 * Whether c's grammar, if it has one, was compiled (po, the thread's
 * work); 0 or -errno with e naming the rule or schema path.
 */
static int
submit_grammar(const struct ep_cmd *c, const struct prep_out *po,
    struct cp_err *e)
{
	if (c->params.grammar == 0)
		return 0;
	if (po != NULL && po->gram_rc < 0)
		return cp_err_set(e, po->gram_rc, "grammar: %s",
		    po->gram_e.msg[0] != '\0' ? po->gram_e.msg :
		    strerror(-po->gram_rc));
	if (po == NULL || po->gm == NULL)
		/* prep_hold() could not hold it: nothing compiled it */
		return cp_err_set(e, -ENOMEM, "grammar: out of memory");
	return 0;
}

/* The stop matcher of request r; 0 or -errno with e. */
static int
submit_stops(struct wreq *r, const struct ep_cmd *c, struct cp_err *e)
{
	uint32_t i;

	if (c->n_stop == 0)
		return 0;
	if (c->n_stop > CP_STOP_MAX)
		return cp_err_set(e, -EINVAL, "%u stop strings, at most %u",
		    c->n_stop, CP_STOP_MAX);
	for (i = 0; i < c->n_stop; i++)
		if (c->stop[i] == NULL)
			return cp_err_set(e, -EINVAL, "stop string %u "
			    "missing", i);
	r->ss = stopstr_new(c->stop, NULL, (int)c->n_stop, e);
	return r->ss != NULL ? 0 : (e->code < 0 ? e->code : -EINVAL);
}

/*
 * Builds request r in its (free) slot from c and what the tokenizer
 * thread made of it (po, NULL when it had nothing to do); 0 or -errno
 * with e.
 */
static int
submit_build(struct worker *w, struct wreq *r, int slot,
    const struct ep_cmd *c, struct prep_out *po, struct cp_err *e)
{
	struct sched_request sr;
	int n, max, room, rc;
	bool strict;

	if ((rc = submit_grammar(c, po, e)) < 0 ||
	    (rc = submit_prompt(w, c, po != NULL ? po->ids : NULL,
	    po != NULL ? po->n : 0, po != NULL ? &po->e : NULL, &n, e)) < 0)
		return rc;
	r->n_prompt = n;
	room = (w->pool_tokens < w->n_ctx ? w->pool_tokens : w->n_ctx) - n;
	if (room < 1)
		return cp_err_set(e, -E2BIG, "prompt of %d tokens leaves no "
		    "room to generate in the context of %d tokens", n,
		    w->n_ctx);
	/* Strict: no cap; past the pool, sched_add() refuses it. */
	strict = (c->flags & EP_SUBMIT_STRICT) && c->params.max_tokens > 0;
	if (strict && (uint64_t)n + c->params.max_tokens > (uint64_t)w->n_ctx)
		return cp_err_set(e, -E2BIG, "prompt of %d tokens plus "
		    "max_tokens %u exceeds the context of %d tokens (strict)",
		    n, c->params.max_tokens, w->n_ctx);
	if (c->params.max_tokens > 0 &&
	    (strict || c->params.max_tokens <= (uint32_t)room)) {
		max = (int)c->params.max_tokens;
	} else {
		max = room;
		r->to_context = true;
	}
	r->cap = n + max;
	if ((r->toks = malloc((size_t)r->cap * sizeof(*r->toks))) == NULL)
		return cp_err_set(e, -ENOMEM, "out of memory for %d tokens",
		    r->cap);
	memcpy(r->toks, w->enc, (size_t)n * sizeof(*r->toks));
	r->uid = c->uid;
	r->pid = c->pid;
	r->logprob = (c->flags & EP_SUBMIT_LOGPROB) != 0;
	r->progress = (c->flags & EP_SUBMIT_PROGRESS) != 0;
	if ((rc = submit_sampler(w, r, c, po, e)) < 0 ||
	    (rc = submit_stops(r, c, e)) < 0)
		return rc;
	detok_init(&r->dt, w->tok, 0);
	memset(&sr, 0, sizeof(sr));
	sr.client = (int)(c->client % (uint32_t)w->max_clients);
	sr.req_id = (uint64_t)slot;
	sr.n_prompt = n;
	sr.max_tokens = max;
	/* the lane is for what the prefix cache does not hold */
	sr.held = wk_lane_wants(w, n) &&
	    wk_lane_wants(w, n - wk_prefix_peek(w, r, n));
	if ((rc = sched_add(w->sched, &sr, e)) < 0)
		return rc;
	r->handle = rc;
	r->id = c->id;
	r->t_recv_ns = c->t_recv_ns != 0 ? c->t_recv_ns : stats_now_ns();
	if (sr.held)
		wk_lane_give(w, r, slot);
	return 0;
}

static void
cmd_submit(struct worker *w, const struct ep_cmd *c, struct prep_out *po)
{
	struct cp_err e = { 0 };
	struct wreq *r;
	int slot, rc;

	if (w->n_free == 0) {
		emit_error(w, c->id, 0, 0, -ENOSPC, "too many requests queued "
		    "or running");
		w->st.rejected++;
		return;
	}
	slot = w->free_slot[w->n_free - 1];
	r = &w->req[slot];
	if ((rc = submit_build(w, r, slot, c, po, &e)) < 0) {
		emit_error(w, c->id, r->n_prompt, 0, rc,
		    e.msg[0] != '\0' ? e.msg : strerror(-rc));
		req_clear(w, r);
		w->st.rejected++;
		return;
	}
	id_link(w, slot);
	w->n_free--;
	w->st.submitted++;
}

/*
 * BUDGETS: the scheduler's budgets from the next step, max_batch_tokens
 * lowered to the rows the step buffers hold (worker_new()'s), the chunk
 * to the budget, as setup_sched() does; and the pacers' target.
 */
static void
cmd_budgets(struct worker *w, const struct ep_budgets *nb)
{
	struct sched_budgets b;
	struct cp_err e = { 0 };
	int rc;

	b.max_batch_tokens = nb->max_batch_tokens > 0 &&
	    nb->max_batch_tokens < w->max_batch ? nb->max_batch_tokens :
	    w->max_batch;
	if (b.max_batch_tokens < w->max_seqs)
		b.max_batch_tokens = w->max_seqs;
	b.max_prefill_chunk = nb->max_prefill_chunk > 0 &&
	    nb->max_prefill_chunk < b.max_batch_tokens ?
	    nb->max_prefill_chunk : b.max_batch_tokens;
	b.attention_cost_tokens = nb->attention_cost_tokens;
	if ((rc = sched_set_budgets(w->sched, &b, &e)) < 0) {
		log_warnx("worker: budgets unchanged: %s", e.msg);
		return;
	}
	wk_pace_retarget(w, nb->max_inter_token_ms);
	log_debug("worker: budgets: max_batch_tokens %d, max_prefill_chunk "
	    "%d, attention_cost_tokens %d, max_inter_token_ms %d",
	    b.max_batch_tokens, b.max_prefill_chunk, b.attention_cost_tokens,
	    nb->max_inter_token_ms);
}

/*
 * Applies one command other than SHUTDOWN; a held SUBMIT comes with what
 * the tokenizer thread made of it (po; NULL when it was not held), whose
 * parts it may take.
 */
static void
command(struct worker *w, const struct ep_cmd *c, struct prep_out *po)
{
	struct wreq *r;

	switch (c->kind) {
	case EP_CMD_SUBMIT:
		cmd_submit(w, c, po);
		break;
	case EP_CMD_CANCEL:
		if ((r = req_find(w, c->id)) != NULL)
			(void)sched_cancel(w->sched, r->handle);
		break;
	case EP_CMD_PAUSE:
	case EP_CMD_RESUME:
		if ((r = req_find(w, c->id)) != NULL &&
		    r->paused != (c->kind == EP_CMD_PAUSE) &&
		    sched_pause(w->sched, r->handle,
		    c->kind == EP_CMD_PAUSE) == 0) {
			r->paused = c->kind == EP_CMD_PAUSE;
			w->n_paused += r->paused ? 1 : -1;
		}
		break;
	case EP_CMD_BUDGETS:
		cmd_budgets(w, &c->budgets);
		break;
	default:
		log_warnx("worker: command kind %u ignored", c->kind);
		break;
	}
	w->dirty = true;
}

/*
 * Takes every queued command: applies it, or hands it to the tokenizer
 * thread's hold (prep.h); then applies what the hold gives back.  1 after
 * a SHUTDOWN, else 0.
 */
static int
commands(struct worker *w)
{
	struct ep_cmd *c, *next;
	struct prep_out po;

	for (c = ep_take_cmds(w->port); c != NULL; c = next) {
		next = c->next;
		if (c->kind == EP_CMD_SHUTDOWN) {
			ep_cmd_free_list(c);
			return 1;
		}
		/* budgets are no client's: nothing holds them back */
		if (c->kind != EP_CMD_BUDGETS && prep_hold(w->prep, c) == 1)
			continue;
		command(w, c, NULL);
		ep_cmd_free(c);
	}
	/* a text SUBMIT comes with ids (or ids NULL and n < 0); any other
	 * command with ids NULL and n 0, which submit_prompt() never reads */
	while ((c = prep_next(w->prep, &po)) != NULL) {
		command(w, c, &po);
		prep_out_free(&po);
		ep_cmd_free(c);
	}
	return 0;
}

/* ---- steps ------------------------------------------------------------- */

static void
rel_apply(struct worker *w, const struct sched_release *rel)
{
	struct wreq *r;

	if (rel->req_id >= (uint64_t)w->max_requests ||
	    w->req[rel->req_id].handle != rel->req) {
		log_warnx("worker: release of unknown request %d", rel->req);
		return;
	}
	r = &w->req[rel->req_id];
	if (r->seq >= 0) {
		(void)kv_seq_free(w->kv, r->seq);
		r->seq = -1;
	}
	if (rel->why == SCHED_REL_CANCEL) {
		emit_done(w, r, CP_FINISH_CANCELLED, NULL, 0);
		req_end(w, r);
		w->st.cancelled++;
	} else {
		w->es.preemptions++;
	}
}

/* Gives r the KV positions of item it; 0 or -errno (r failed, reported). */
static int
item_kv(struct worker *w, struct wreq *r, const struct sched_item *it)
{
	int rc, len;

	if (it->pos < 0 || it->n < 1 || it->pos > r->n_prompt + r->n_gen -
	    it->n) {
		wk_fail(w, r, -EFAULT, "engine: planned positions %d..%d past "
		    "the %d tokens of the request", it->pos,
		    it->pos + it->n - 1, r->n_prompt + r->n_gen);
		return -EFAULT;
	}
	if (r->seq < 0 && (r->seq = kv_seq_new(w->kv)) < 0) {
		rc = r->seq;
		r->seq = -1;
		wk_fail(w, r, rc, "engine: no KV sequence free: %s",
		    strerror(-rc));
		return rc;
	}
	if (r->lane_ready && kv_seq_len(w->kv, r->seq) == 0 && it->pos > 0 &&
	    (rc = wk_lane_take(w, r, it->pos)) < 0)
		return rc;
	if ((len = kv_seq_len(w->kv, r->seq)) != it->pos) {
		wk_fail(w, r, -EFAULT, "engine: KV holds %d positions, the plan "
		    "starts at %d", len, it->pos);
		return -EFAULT;
	}
	if ((rc = kv_seq_append(w->kv, r->seq, it->n)) < 0) {
		wk_fail(w, r, rc, "engine: cannot reserve %d KV positions: %s",
		    it->n, strerror(-rc));
		return rc;
	}
	return 0;
}

/* Time to first token, or since the last one, of r's TOKEN just sent. */
static void
token_times(struct worker *w, struct wreq *r)
{
	uint64_t now = w->t_step_ns;

	if (r->t_last_ns == 0) {
		stats_hist_add(&w->es.ttft_us, STATS_LAT_US,
		    now > r->t_recv_ns ? (now - r->t_recv_ns) / 1000 : 0);
		r->t_first_ns = now;
	}
	else
		stats_hist_add(&w->es.itl_us, STATS_LAT_US,
		    now > r->t_last_ns ? (now - r->t_last_ns) / 1000 : 0);
	r->t_last_ns = now != 0 ? now : 1;
}

_Static_assert(CP_TOPN_MAX <= SAMPLER_MAX_LOGPROBS, "the sampler's top-n");

/* The TOKEN ev of a sampled token so, with so's top-n list if any. */
static void
emit_sampled(struct worker *w, const struct ep_event *ev, const char *text,
    size_t len, const struct sampler_out *so)
{
	struct cp_top top[CP_TOPN_MAX];
	int i, n = so->n_top < (int)CP_TOPN_MAX ? so->n_top : (int)CP_TOPN_MAX;

	for (i = 0; i < n; i++) {
		top[i].id = so->top[i].id;
		/* finite on the wire (TOP-N rule 3), even where a logit
		   far below the maximum overflowed the difference */
		top[i].logprob = so->top[i].logprob >= -FLT_MAX ?
		    so->top[i].logprob : -FLT_MAX;
	}
	emit_top(w, ev, text, len, top, (uint32_t)(n > 0 ? n : 0));
}

/* Fails r after sampler_sample() returned rc. */
static void
sample_fail(struct worker *w, struct wreq *r, int rc)
{
	const char *why = r->gram != NULL ?
	    gmatch_error(sampler_grammar(r->smp)) : "";

	if (why[0] != '\0')
		wk_fail(w, r, rc, "engine: grammar: %s", why);
	else if (rc == -EDOM && r->gram != NULL)
		wk_fail(w, r, rc, "engine: grammar: the model gives no token "
		    "the grammar allows a finite logit");
	else if (rc == -EDOM)
		wk_fail(w, r, rc, "engine: the model produced NaN or infinite "
		    "logits");
	else
		wk_fail(w, r, rc, "engine: sampling failed: %s",
		    strerror(-rc));
}

/* Samples r's next token from row; sets it->finish when r ends. */
static void
item_sample(struct worker *w, struct wreq *r, struct sched_item *it,
    const float *row)
{
	struct sampler_out so;
	struct stopstr_res sres;
	struct ep_event ev;
	const char *text;
	size_t len;
	int rc, n;

	if ((rc = sampler_sample(r->smp, row, &so)) < 0) {
		sample_fail(w, r, rc);
		it->finish = SCHED_FIN_ERROR;
		return;
	}
	if (so.finish == SAMPLER_FINISH_EOG) {
		it->finish = SCHED_FIN_EOS;
		return;
	}
	if (r->n_prompt + r->n_gen >= r->cap ||
	    sampler_accept(r->smp, so.id) < 0) {
		wk_fail(w, r, -EFAULT, "engine: token %d past the request's "
		    "%d positions", (int)so.id, r->cap);
		it->finish = SCHED_FIN_ERROR;
		return;
	}
	r->toks[r->n_prompt + r->n_gen++] = so.id;
	/* nothing but the end can follow: end here, as at an end-of-
	   generation token (the held text goes out with DONE) */
	if (r->gram != NULL && gmatch_done(sampler_grammar(r->smp)))
		it->finish = SCHED_FIN_EOS;
	if ((n = detok_feed(&r->dt, so.id, w->dbuf, w->dcap)) < 0)
		n = 0;
	text = w->dbuf;
	len = (size_t)n;
	if (r->ss != NULL) {
		if (stopstr_feed(r->ss, w->dbuf, len, w->sbuf, w->scap,
		    &sres) < 0)
			sres.emit = 0;
		text = w->sbuf;
		len = sres.emit;
		if (sres.match >= 0)
			it->finish = SCHED_FIN_STOP;
	}
	memset(&ev, 0, sizeof(ev));
	ev.id = r->id;
	ev.type = EP_EV_TOKEN;
	ev.token = so.id;
	ev.logprob = r->logprob ? so.logprob : 0;
	emit_sampled(w, &ev, text, len, &so);
	w->es.tokens_generated++;
	token_times(w, r);
}

/* DONE for r, ended by finish (EOS, STOP, LENGTH), with the held text. */
static void
req_done(struct worker *w, struct wreq *r, int finish)
{
	struct stopstr_res sres = { 0, 0, -1 };
	uint32_t why;
	size_t len = 0;
	int n;

	why = finish == SCHED_FIN_LENGTH ? (r->to_context ? CP_FINISH_CONTEXT :
	    CP_FINISH_LENGTH) : CP_FINISH_STOP;
	if (finish != SCHED_FIN_STOP) {
		if ((n = detok_flush(&r->dt, w->dbuf, w->dcap)) < 0)
			n = 0;
		if (r->ss == NULL) {
			emit_done(w, r, why, w->dbuf, (size_t)n);
			return;
		}
		if (stopstr_feed(r->ss, w->dbuf, (size_t)n, w->sbuf, w->scap,
		    &sres) == 0) {
			len = sres.emit;
			if (sres.match >= 0)
				why = CP_FINISH_STOP;
		}
		if (sres.match < 0 && stopstr_flush(r->ss, w->sbuf + len,
		    w->scap - len, &sres) == 0)
			len += sres.emit;
	}
	emit_done(w, r, why, w->sbuf, len);
}

/*
 * The grammar matchers of the live requests together hold at most
 * w->gram_bytes (worker_params.grammar_bytes): past it, the largest give their caches back
 * (gmatch_trim()), so that no set of grammars makes the daemon grow
 * beyond it for long; each then pays first passes again.  Between steps,
 * where no mask is held.
 */
static void
grammar_bound(struct worker *w)
{
	size_t total = 0, most, b;
	struct gmatch *m;
	int i, big;

	if (w->n_gram == 0)
		return;
	for (i = 0; i < w->max_requests; i++)
		if (w->req[i].handle >= 0 && w->req[i].gram != NULL)
			total += gmatch_bytes(sampler_grammar(w->req[i].smp));
	while (total > w->gram_bytes) {
		for (i = 0, big = -1, most = 0; i < w->max_requests; i++) {
			if (w->req[i].handle < 0 || w->req[i].gram == NULL)
				continue;
			b = gmatch_bytes(sampler_grammar(w->req[i].smp));
			if (b > most) {
				most = b;
				big = i;
			}
		}
		m = sampler_grammar(w->req[big].smp);
		/* a failure leaves m failing its next call: the request
		   ends then, with the error */
		(void)gmatch_trim(m);
		b = gmatch_bytes(m);
		w->st.grammar_trims++;
		if (b >= most)
			break;
		total -= most - b;
	}
}

/* Runs the batch built from plan's items; every entry is sampled or failed. */
static void
step_run(struct worker *w, struct sched_plan *plan, int n_ent, int n_tok)
{
	struct step_batch b = { w->btok, n_tok, w->bseq, n_ent };
	struct cp_err e = { 0 };
	const float *logits = NULL;
	struct sched_item *it;
	struct wreq *r;
	int i, j, want = 0, n_logits = 0, rc, end;

	for (i = 0; i < n_ent; i++)
		want += w->bseq[i].logits;
	rc = be_step(w->be, &b, &logits, &n_logits, &e);
	w->t_step_ns = stats_now_ns();
	if (rc == 0 && n_logits != want)
		rc = cp_err_set(&e, -EFAULT, "backend: %d logits rows for %d "
		    "requests", n_logits, want);
	if (rc < 0) {
		w->st.step_errors++;
		log_warnx("worker: step of %d requests failed: %s", n_ent,
		    e.msg);
		for (i = 0; i < n_ent; i++) {
			it = &plan->items[w->bitem[i]];
			wk_fail(w, &w->req[it->req_id], rc, "engine: %s",
			    e.msg[0] != '\0' ? e.msg : strerror(-rc));
			it->finish = SCHED_FIN_ERROR;
		}
		return;
	}
	for (i = 0, j = 0; i < n_ent; i++) {
		it = &plan->items[w->bitem[i]];
		r = &w->req[it->req_id];
		if (it->pos < r->n_prompt) {
			end = it->pos + it->n < r->n_prompt ? it->pos + it->n :
			    r->n_prompt;
			w->es.tokens_prompt += (uint64_t)(end - it->pos);
			if (r->progress && r->n_gen == 0)
				wk_emit_progress(w, r, end);
		}
		if (!it->logits)
			continue;
		item_sample(w, r, it, logits + (size_t)j * (size_t)w->n_vocab);
		j++;
	}
}

/* One scheduler step; returns 1 when it planned anything, else 0. */
static int
step(struct worker *w)
{
	struct sched_plan plan;
	struct sched_item *it;
	struct wreq *r;
	int k, rc, n_ent = 0, n_tok = 0, n_dec = 0;
	uint64_t t0 = stats_now_ns();
	bool sent;

	/* back to back with the previous batch: the gap starts there */
	if (w->t_step_ns != 0 && t0 - w->t_step_ns < STEP_GAP_NS)
		t0 = w->t_step_ns;

	/* Events of this step carry its number (emit()). */
	w->cur_step = w->es.steps + 1;
	sent = wk_lane_poll(w);
	if ((rc = sched_step(w->sched, &plan)) < 0)
		fatalx("worker: sched_step: %s", strerror(-rc));
	for (k = 0; k < plan.n_rel; k++)
		rel_apply(w, &plan.rel[k]);
	w->move_slot = -1;
	for (k = 0; k < plan.n_items; k++) {
		it = &plan.items[k];
		if (it->req_id >= (uint64_t)w->max_requests ||
		    w->req[it->req_id].handle != it->req)
			fatalx("worker: plan names request %d, not live",
			    it->req);
		r = &w->req[it->req_id];
		if (n_ent >= w->max_seqs || it->n > w->max_batch - n_tok) {
			wk_fail(w, r, -EFAULT, "engine: plan exceeds the batch "
			    "limits");
			it->finish = SCHED_FIN_ERROR;
			continue;
		}
		if (item_kv(w, r, it) < 0) {
			it->finish = SCHED_FIN_ERROR;
			continue;
		}
		memcpy(w->btok + n_tok, r->toks + it->pos,
		    (size_t)it->n * sizeof(*w->btok));
		w->bseq[n_ent].seq = r->seq;
		w->bseq[n_ent].pos = it->pos;
		w->bseq[n_ent].n_tokens = it->n;
		w->bseq[n_ent].logits = it->logits;
		w->bitem[n_ent++] = k;
		wk_lane_note(w, &plan, k);
		n_tok += it->n;
		if (k < plan.n_decode)
			n_dec += it->n;
	}
	if (w->lane != NULL)
		lane_set_busy(w->lane, n_ent > 0);
	if (n_ent > 0) {
		step_run(w, &plan, n_ent, n_tok);
		wk_pace_step(w, &plan, n_ent, t0);
		for (k = 0; k < n_ent; k++) {
			it = &plan.items[w->bitem[k]];
			if (it->finish != SCHED_FIN_ERROR)
				wk_prefix_publish(w, &w->req[it->req_id]);
		}
		stats_hist_add(&w->es.step_prefill, STATS_COUNT,
		    (uint64_t)(n_tok - n_dec));
		stats_hist_add(&w->es.step_decode, STATS_COUNT,
		    (uint64_t)n_dec);
		stats_hist_add(&w->es.step_seqs, STATS_COUNT, (uint64_t)n_ent);
	}
	if ((rc = sched_commit(w->sched, &plan)) < 0)
		fatalx("worker: sched_commit: %s", strerror(-rc));
	for (k = 0; k < plan.n_items; k++) {
		it = &plan.items[k];
		if (it->finish == SCHED_RUN)
			continue;
		r = &w->req[it->req_id];
		if (it->finish != SCHED_FIN_ERROR)
			req_done(w, r, it->finish);
		req_end(w, r);
	}
	w->cur_step = 0;
	if (plan.n_items == 0 && plan.n_rel == 0 && !sent)
		return 0;
	grammar_bound(w);
	w->es.steps++;
	return 1;
}

/* Publishes w->st to worker_stats() and w->es to the port. */
static void
publish(struct worker *w)
{
	struct ep_stats *es = &w->es;
	struct sched_stats ss;

	w->st.requests_live = w->max_requests - w->n_free;
	w->st.kv_seqs_live = kv_seqs_live(w->kv);
	pthread_mutex_lock(&w->pub_lock);
	w->pub = w->st;
	pthread_mutex_unlock(&w->pub_lock);
	sched_stats(w->sched, &ss);
	es->kv_blocks_total = (uint64_t)kv_blocks_total(w->kv);
	es->kv_blocks_used = es->kv_blocks_total -
	    (uint64_t)kv_blocks_free(w->kv);
	es->requests_waiting = (uint64_t)ss.n_waiting;
	es->requests_running = (uint64_t)ss.n_running;
	es->requests_paused = (uint64_t)w->n_paused;
	es->kv_blocks_cached = (uint64_t)kv_blocks_cached(w->kv);
	es->prefix_evictions = kv_evictions(w->kv);
	ep_stats_set(w->port, es);
}

/* SHUTDOWN: every request goes, without events. */
static void
drop_all(struct worker *w)
{
	int i;

	for (i = 0; i < w->max_requests; i++)
		if (w->req[i].handle >= 0) {
			(void)sched_cancel(w->sched, w->req[i].handle);
			req_end(w, &w->req[i]);
		}
	ep_batch_clear(&w->out);
}

int
worker_run(struct worker *w)
{
	bool busy = false;
	int ran;

	publish(w);
	for (;;) {
		if (!busy && w->out.n == 0)
			(void)ep_wait_cmds(w->port, WK_IDLE_WAIT_MS);
		if (commands(w))
			break;
		ran = w->n_free < w->max_requests ? step(w) : 0;
		busy = ran != 0;
		if (!ran && w->out.n == 0) {
			/* Paused, resumed, queued: seen in cp_stats() at once. */
			if (w->dirty)
				publish(w);
			w->dirty = false;
			continue;
		}
		publish(w);
		w->dirty = false;
		if (ep_post(w->port, &w->out, ran) < 0) {
			/* Kept in w->out; try again after a short wait. */
			log_warnx("worker: cannot post events: out of memory");
			(void)ep_wait_cmds(w->port, 10);
		}
	}
	drop_all(w);
	publish(w);
	return 0;
}

static void *
worker_thread(void *arg)
{
	struct worker *w = arg;

	return (void *)(intptr_t)worker_run(w);
}

int
worker_start(struct worker *w)
{
	int rc;

	if (w->started)
		return -EBUSY;
	if ((rc = pthread_create(&w->th, NULL, worker_thread, w)) != 0)
		return -rc;
	w->started = true;
	return 0;
}

int
worker_join(struct worker *w)
{
	void *res = NULL;
	int rc;

	if (!w->started)
		return -EINVAL;
	if ((rc = pthread_join(w->th, &res)) != 0)
		return -rc;
	w->started = false;
	return (int)(intptr_t)res;
}

void
worker_stats(struct worker *w, struct worker_stats *out)
{
	pthread_mutex_lock(&w->pub_lock);
	*out = w->pub;
	pthread_mutex_unlock(&w->pub_lock);
}

struct backend *
worker_backend(struct worker *w)
{
	return w->be;
}

/* ---- set-up ------------------------------------------------------------ */

/*
 * The tokenizer's end-of-generation ids, set once in the samplers' shared
 * workspace (every request's sampler reads them there).
 */
static int
set_eog(struct worker *w)
{
	const int32_t *eog;
	int n;

	eog = tok_eog_ids(w->tok, &n);
	return sampler_ws_set_eog(w->smp_ws, eog, n);
}

static int
setup_sched(struct worker *w, const struct worker_params *p,
    struct cp_err *e)
{
	const struct kv_params *kp = kv_params(w->kv);
	struct sched_config sc;
	int64_t pool;

	memset(&sc, 0, sizeof(sc));
	sc.max_batch_tokens = w->max_batch;
	sc.max_prefill_chunk = p->max_prefill_chunk > 0 &&
	    p->max_prefill_chunk < w->max_batch ? p->max_prefill_chunk :
	    w->max_batch;
	sc.max_seqs = w->max_seqs;
	sc.max_requests = w->max_requests;
	sc.max_clients = w->max_clients;
	sc.kv_block_tokens = kp->block_tokens;
	sc.kv_total_blocks = kv_blocks_total(w->kv);
	sc.kv_watermark_blocks = p->kv_watermark_blocks;
	sc.n_ctx = w->n_ctx;
	sc.attention_cost_tokens = p->attention_cost_tokens;
	sc.admit_cached = wk_prefix_admit;
	sc.admit_arg = w;
	wk_pace_setup(w, p, &sc);
	pool = (int64_t)sc.kv_total_blocks * kp->block_tokens;
	w->pool_tokens = pool > INT_MAX ? INT_MAX : (int)pool;
	return sched_new(&sc, &w->sched, e);
}

/*
 * One prompt step and one decode step on the new backend before cpd
 * serves, as llama-server does: the first request then does not pay for
 * reading the model from its file, faulting in scratch memory or loading
 * a GPU's kernels (in a fresh cpd on the 110M F16 model its TTFT was
 * 86-106 ms with the page cache dropped and 56-62 ms without, against
 * 37-51 ms with the warm-up: BENCHMARKS-serve.md).  cpd.yaml's warmup:
 * false (worker_params.no_warmup) skips it.
 */
static int
warm_up(struct worker *w, struct cp_err *e)
{
	int32_t bos = tok_bos(w->tok);
	uint64_t t0 = stats_now_ns();
	int rc;

	rc = be_warmup(w->be, bos >= 0 && bos < w->n_vocab ? bos : 0, e);
	if (rc == 0)
		log_info("warmed up in %.0f ms",
		    (double)(stats_now_ns() - t0) / 1e6);
	return rc;
}

int
worker_new(const struct worker_params *p, struct engine_port *port,
    struct worker **out, struct cp_err *e)
{
	const struct be_params *bp;
	struct worker *w;
	int i, rc;

	*out = NULL;
	if (p == NULL || p->model == NULL || p->tok == NULL || port == NULL)
		return cp_err_set(e, -EINVAL, "worker: model, tokenizer and "
		    "port are required");
	if (tok_n_vocab(p->tok) != p->model->hp.n_vocab)
		return cp_err_set(e, -EINVAL, "worker: the tokenizer has %d "
		    "tokens, the model %d", (int)tok_n_vocab(p->tok),
		    p->model->hp.n_vocab);
	if (p->max_requests < 0 || p->max_requests > SCHED_MAX_REQUESTS ||
	    p->max_clients < 0 || p->max_clients > SCHED_MAX_CLIENTS ||
	    p->max_prefill_chunk < 0)
		return cp_err_set(e, -EINVAL, "worker: max_requests (0..%d), "
		    "max_clients (0..%d) or max_prefill_chunk (>= 0) out of "
		    "range", SCHED_MAX_REQUESTS, SCHED_MAX_CLIENTS);
	if ((w = calloc(1, sizeof(*w))) == NULL)
		return cp_err_set(e, -ENOMEM, "worker: out of memory");
	pthread_mutex_init(&w->pub_lock, NULL);
	w->port = port;
	w->model = p->model;
	w->tok = p->tok;
	w->n_vocab = p->model->hp.n_vocab;
	if ((rc = be_open(p->backend != NULL ? p->backend : "auto", p->model,
	    &p->be, &w->be, e)) < 0)
		goto err;
	w->kv = be_kv(w->be);
	bp = be_params(w->be);
	if (!p->no_warmup && (rc = warm_up(w, e)) < 0)
		goto err;
	w->n_ctx = bp->n_ctx;
	w->max_batch = bp->max_batch_tokens;
	/* Every running request must be able to decode in every step. */
	w->max_seqs = bp->max_seqs < w->max_batch ? bp->max_seqs :
	    w->max_batch;
	w->max_requests = p->max_requests > 0 ? p->max_requests :
	    WK_DEF_REQUESTS;
	w->max_clients = p->max_clients > 0 ? p->max_clients :
	    WK_DEF_CLIENTS;
	if ((rc = setup_sched(w, p, e)) < 0)
		goto err;
	rc = -ENOMEM;
	w->dcap = detok_max_out(w->tok);
	/* A feed passes held bytes plus one piece; a flush adds one more. */
	w->scap = STOPSTR_MAX_LEN + 2 * w->dcap;
	w->req = calloc((size_t)w->max_requests, sizeof(*w->req));
	w->free_slot = calloc((size_t)w->max_requests, sizeof(*w->free_slot));
	w->enc = calloc((size_t)w->n_ctx, sizeof(*w->enc));
	w->prefix = p->prefix_cache;
	w->gram_bytes = p->grammar_bytes > 0 ? p->grammar_bytes :
	    WK_GRAMMAR_BYTES;
	w->pfx_cap = (w->n_ctx + kv_params(w->kv)->block_tokens - 1) /
	    kv_params(w->kv)->block_tokens;
	w->pfx_blocks = calloc((size_t)w->pfx_cap, sizeof(*w->pfx_blocks));
	w->prep = prep_new(w->tok, w->n_ctx, p->chat, p->model_name, port);
	w->btok = calloc((size_t)w->max_batch, sizeof(*w->btok));
	w->bseq = calloc((size_t)w->max_seqs, sizeof(*w->bseq));
	w->bitem = calloc((size_t)w->max_seqs, sizeof(*w->bitem));
	w->dbuf = malloc(w->dcap);
	w->sbuf = malloc(w->scap);
	w->smp_ws = sampler_ws_new(w->n_vocab);
	for (w->id_mask = 1; w->id_mask < (uint32_t)w->max_requests;)
		w->id_mask <<= 1;
	w->id_head = malloc(w->id_mask * sizeof(*w->id_head));
	w->id_next = malloc((size_t)w->max_requests * sizeof(*w->id_next));
	w->id_mask--;
	if (w->req == NULL || w->free_slot == NULL || w->enc == NULL ||
	    w->pfx_blocks == NULL || w->prep == NULL || w->btok == NULL || w->bseq == NULL ||
	    w->bitem == NULL ||
	    w->dbuf == NULL || w->sbuf == NULL || w->smp_ws == NULL ||
	    w->id_head == NULL || w->id_next == NULL || set_eog(w) < 0) {
		cp_err_set(e, rc, "worker: out of memory");
		goto err;
	}
	for (i = 0; i <= (int)w->id_mask; i++)
		w->id_head[i] = -1;
	for (i = 0; i < w->max_requests; i++) {
		w->req[i].handle = -1;
		w->req[i].seq = -1;
		w->free_slot[i] = w->max_requests - 1 - i;
	}
	w->n_free = w->max_requests;
	w->slots_ready = true;
	w->lane_slot = -1;
	w->move_slot = -1;
	w->threads_all = w->threads_now = bp->n_threads;
	if ((rc = wk_lane_setup(w, p, e)) < 0)
		goto err;
	w->st.kv_block_tokens = kv_params(w->kv)->block_tokens;
	w->st.n_ctx = w->n_ctx;
	w->st.max_batch_tokens = w->max_batch;
	w->st.max_seqs = w->max_seqs;
	publish(w);
	*out = w;
	return 0;
err:
	worker_free(w);
	return rc;
}

void
worker_free(struct worker *w)
{
	int i;

	if (w == NULL)
		return;
	if (w->slots_ready)
		for (i = 0; i < w->max_requests; i++)
			if (w->req[i].handle >= 0)
				req_clear(w, &w->req[i]);
	lane_free(w->lane);
	ep_batch_fini(&w->out);
	free(w->id_next);
	free(w->id_head);
	sampler_ws_free(w->smp_ws);
	free(w->sbuf);
	free(w->dbuf);
	free(w->bitem);
	free(w->bseq);
	free(w->btok);
	prep_free(w->prep);
	free(w->enc);
	free(w->pfx_blocks);
	free(w->pfx_copy);
	free(w->free_slot);
	free(w->req);
	sched_free(w->sched);
	be_close(w->be);
	pthread_mutex_destroy(&w->pub_lock);
	free(w);
}
