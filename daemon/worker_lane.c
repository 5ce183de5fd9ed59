/*
 * worker_lane.c - the engine thread's side of the prefill lane (lane.h):
 * which prompts go to it, its results into the scheduler and the cache,
 * the steps' share of the threads.  worker.c calls these at the points
 * its opening comment names.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "lane.h"
#include "log.h"
#include "sched.h"
#include "worker_int.h"

/*
 * A prompt of n tokens goes to the lane: long enough, the lane free, and
 * other requests live (the new one has no slot yet).  Alone, a prompt
 * prefills faster in the steps, which use every thread and compute its
 * last token in the same pass (the lane: 6-20 % slower on the 110M F16
 * model at 300 and 1800 tokens, measured in BENCHMARKS-serve.md).
 */
bool
wk_lane_wants(struct worker *w, int n)
{
	struct lane_status st;

	if (w->lane == NULL || n - 1 < w->lane_min || w->lane_slot >= 0 ||
	    w->n_free == w->max_requests || !wk_pace_lane_ok(w))
		return false;
	lane_status(w->lane, &st);
	return st.state == LANE_IDLE;
}

/*
 * Hands r's prompt, all but its last token, to the lane, from the end of
 * its blocks in the prefix cache (worker_prefix.c); r was added held.
 * When the lane refuses, r is released for an ordinary prefill.
 */
void
wk_lane_give(struct worker *w, struct wreq *r, int slot)
{
	if (wk_prefix_lane(w, r) == 0 && lane_start(w->lane, r->toks,
	    r->n_prompt - 1, r->progress) < 0) {
		(void)sched_unhold(w->sched, r->handle, 0);
		return;
	}
	w->lane_slot = slot;
	r->lane_pf = false;
	w->st.lane_prompts++;
	log_debug("worker: request %llu: %d prompt tokens to the prefill lane",
	    (unsigned long long)r->id, r->n_prompt - 1);
}

void
wk_lane_note(struct worker *w, const struct sched_plan *plan, int k)
{
	const struct sched_item *it = &plan->items[k];
	const struct wreq *r = &w->req[it->req_id];

	if (w->lane != NULL && k >= plan->n_decode && r->n_gen == 0 &&
	    r->n_prompt - 1 - (it->pos + it->n) >= w->lane_min &&
	    wk_pace_lane_ok(w))
		w->move_slot = (int)it->req_id;
}

/*
 * A prompt that the steps prefill while other requests are live (it
 * arrived alone, or the lane was busy) moves to a free lane with the
 * positions computed so far: the scheduler takes it back (sched_hold), its
 * K/V goes to the lane's cache, and the lane goes on from there, so the
 * others stop sharing their steps with its chunks.
 */
static void
lane_move(struct worker *w)
{
	struct cp_err e = { 0 };
	struct sched_req_info si;
	struct wreq *r;
	int slot = w->move_slot, k;

	w->move_slot = -1;
	if (slot < 0 || w->max_requests - w->n_free < 2)
		return;
	r = &w->req[slot];
	if (r->handle < 0 || r->seq < 0 || r->n_gen != 0 || r->paused ||
	    sched_req_info(w->sched, r->handle, &si) < 0 ||
	    si.state != SCHED_PREFILLING || si.cancelled ||
	    (k = kv_seq_written(w->kv, r->seq)) != si.n_computed || k < 1 ||
	    r->n_prompt - 1 - k < w->lane_min)
		return;
	if (lane_resume(w->lane, r->toks, r->n_prompt - 1,
	    r->progress, w->be, r->seq, k, &e) < 0) {
		log_warnx("worker: cannot move a prompt to the lane: %s",
		    e.msg);
		return;
	}
	if (sched_hold(w->sched, r->handle) < 0) {
		lane_cancel(w->lane);
		return;
	}
	(void)kv_seq_free(w->kv, r->seq);
	r->seq = -1;
	r->lane_from = k;
	r->lane_shown = k;
	r->lane_pf = false;
	w->lane_slot = slot;
	w->st.lane_prompts++;
	log_debug("worker: request %llu: prompt moved to the prefill lane at "
	    "%d of %d tokens", (unsigned long long)r->id, k, r->n_prompt);
}

/*
 * Near the end of the lane's prefill: the blocks its import will write
 * (those the free stack gives next, with room for the growth of the
 * requests running meanwhile) are mapped by the lane's thread, so that the
 * copy on this thread does not stop for page faults.  Into fresh blocks
 * they took 70-86 ms for an 1800-token prompt's 66 MB, every stream
 * waiting.
 */
static void
lane_prefault_ask(struct worker *w, struct wreq *r)
{
	int bt = kv_params(w->kv)->block_tokens;
	int live = w->max_requests - w->n_free;
	int n = (r->n_prompt - 1 + bt - 1) / bt + 4 * live + 8;
	int32_t *blocks;

	r->lane_pf = true;
	if ((blocks = malloc((size_t)n * sizeof(*blocks))) == NULL)
		return;
	n = kv_free_peek(w->kv, blocks, n);
	lane_prefault(w->lane, w->be, blocks, n);
}

/*
 * Once a turn, before planning: a finished prefill releases its request
 * to the scheduler with the positions computed (or none, when it failed);
 * the lane's progress goes to a request that asked for it; the steps get
 * the threads the lane leaves them.  Returns true when it sent PROGRESS:
 * the turn then counts as a step (promise 4), even if it plans nothing.
 */
bool
wk_lane_poll(struct worker *w)
{
	struct lane_status st;
	struct cp_err e = { 0 };
	struct wreq *r;
	bool sent = false;
	int want;

	if (w->lane == NULL)
		return false;
	lane_status(w->lane, &st);
	if (w->lane_slot < 0 && st.state == LANE_IDLE && w->move_slot >= 0) {
		lane_move(w);
		lane_status(w->lane, &st);
	}
	if (w->lane_slot >= 0) {
		r = &w->req[w->lane_slot];
		if (r->progress && r->n_gen == 0 && st.n_done > r->lane_shown &&
		    st.state != LANE_IDLE) {
			wk_emit_progress(w, r, st.n_done);
			r->lane_shown = st.n_done;
			sent = true;
		}
		if (st.state == LANE_RUNNING && !r->lane_pf &&
		    r->n_prompt - 1 - st.n_done <= 2 * st.chunk)
			lane_prefault_ask(w, r);
		if (st.state == LANE_DONE && !r->lane_ready) {
			if (st.rc == 0 && sched_unhold(w->sched, r->handle,
			    st.n_done) == 0) {
				r->lane_ready = true;
			} else {
				log_warnx("worker: prefill lane failed (%s); "
				    "the prompt is prefilled in the steps",
				    strerror(st.rc < 0 ? -st.rc : EFAULT));
				lane_cancel(w->lane);
				w->lane_slot = -1;
				(void)sched_unhold(w->sched, r->handle, 0);
			}
		}
	}
	want = st.state == LANE_RUNNING ? w->threads_all - w->threads_lane :
	    w->threads_all;
	if (want != w->threads_now && be_set_threads(w->be, want, &e) == 0)
		w->threads_now = want;
	return sent;
}

/* r's first item after the lane: its KV comes from the lane's cache. */
int
wk_lane_take(struct worker *w, struct wreq *r, int pos)
{
	struct cp_err e = { 0 };
	struct lane_status st;
	int rc;

	lane_status(w->lane, &st);
	if (st.n_done != pos) {
		wk_fail(w, r, -EFAULT, "engine: the plan starts at %d, the lane "
		    "computed %d positions", pos, st.n_done);
		return -EFAULT;
	}
	if ((rc = kv_seq_append(w->kv, r->seq, pos)) < 0 ||
	    (rc = lane_import(w->lane, w->be, r->seq, &e)) < 0) {
		wk_fail(w, r, rc, "engine: cannot take the prefilled prompt: %s",
		    e.msg[0] != '\0' ? e.msg : strerror(-rc));
		return rc;
	}
	w->es.tokens_prompt += (uint64_t)(pos - r->lane_from);
	r->lane_ready = false;
	w->lane_slot = -1;
	return 0;
}

static void
wake_engine(void *arg)
{
	ep_wake_engine(arg);
}

/*
 * The prefill lane, when asked for and the backend can share its cores.
 * A latency target paces the prompt chunks of the steps beside it; a long
 * prompt still goes to the lane, which on two cores gave the streams half
 * the worst gap of paced chunks at the same first-token time
 * (BENCHMARKS-serve.md, "A latency target").
 */
int
wk_lane_setup(struct worker *w, const struct worker_params *p,
    struct cp_err *e)
{
	struct lane_params lp;

	if (p->prefill_lane_tokens <= 0 || strcmp(be_name(w->be), "cpu") != 0 ||
	    w->threads_all < 2)
		return 0;
	memset(&lp, 0, sizeof(lp));
	lp.model = w->model;
	lp.be = be_params(w->be);
	lp.threads = w->threads_all / 2;
	lp.chunk = p->prefill_lane_chunk;
	lp.wake = wake_engine;
	lp.wake_arg = w->port;
	w->threads_lane = lp.threads;
	w->lane_min = p->prefill_lane_tokens;
	return lane_new(&lp, &w->lane, e);
}

