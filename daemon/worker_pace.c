/*
 * worker_pace.c - the engine thread's side of the latency target
 * (pacer.h): the scheduler's pace hooks, each step's measured time into
 * the model, the model's state into the stats and, once a minute, the
 * debug log.
 */
#include <stdint.h>

#include "log.h"
#include "pacer.h"
#include "sched.h"
#include "stats.h"
#include "worker_int.h"

#define PACE_LOG_NS	(60ull * 1000000000ull)

/*
 * The pacer of the steps now: the threads they run on make another
 * machine, so steps beside the prefill lane have a model of their own.
 */
static struct pacer *
pacer_now(struct worker *w)
{
	return &w->pacer[w->threads_now != w->threads_all];
}

static void
pace_begin(void *arg, int n, int64_t pos_sum)
{
	pacer_begin(pacer_now(arg), n, pos_sum);
}

static int
pace_rows(void *arg, int pos, int n)
{
	return pacer_rows(pacer_now(arg), pos, n);
}

static void
pace_take(void *arg, int pos, int n)
{
	pacer_take(pacer_now(arg), pos, n);
}

/*
 * The hooks are set with the target off too: a pacer that is off lets
 * every row through, and a reload may turn it on (wk_pace_retarget()).
 */
void
wk_pace_setup(struct worker *w, const struct worker_params *p,
    struct sched_config *sc)
{
	double t = p->max_inter_token_ms < 0 ? -1.0 :
	    (double)p->max_inter_token_ms;

	pacer_init(&w->pacer[0], t);
	pacer_init(&w->pacer[1], t);
	sc->pace_begin = pace_begin;
	sc->pace_rows = pace_rows;
	sc->pace_take = pace_take;
	sc->pace_arg = w;
}

/*
 * Whether a long prompt may go to the prefill lane under the target: the
 * decode steps beside it, on the threads the lane leaves, must have kept
 * under the target (their recent median).  Before any ran, the lane is
 * tried: on two cores it gave the streams smaller gaps than paced chunks
 * at every target measured (BENCHMARKS-serve.md, "A latency target").
 */
bool
wk_pace_lane_ok(struct worker *w)
{
	struct pacer_stats ps;
	double beside = pacer_decode_ms(&w->pacer[1]);

	if (!pacer_on(&w->pacer[0]) || beside == 0)
		return true;
	pacer_stats(&w->pacer[0], &ps);
	return ps.target_ms == 0 || beside <= ps.target_ms;
}

static uint64_t
us(double ms)
{
	return ms > 0 ? (uint64_t)(ms * 1000.0 + 0.5) : 0;
}

static void
pace_log(const char *which, const struct pacer_stats *ps)
{
	log_debug("pacer%s: target %.1f ms (aimed at %.2f of it); step ms = "
	    "%.2f + %.4f rows + %.4f prompt kpos + %.4f decode kpos; last step "
	    "%.1f ms for %.1f estimated, mean error %.1f ms; %llu of %llu "
	    "steps over the target, by %.0f ms in all", which, ps->target_ms,
	    ps->aim, ps->coef[0], ps->coef[1], ps->coef[2], ps->coef[3],
	    ps->meas_ms, ps->est_ms, ps->err_ms,
	    (unsigned long long)ps->missed, (unsigned long long)ps->steps,
	    ps->missed_ms);
}

void
wk_pace_retarget(struct worker *w, int max_inter_token_ms)
{
	double t = max_inter_token_ms < 0 ? -1.0 : (double)max_inter_token_ms;
	struct pacer_stats ps;

	pacer_retarget(&w->pacer[0], t);
	pacer_retarget(&w->pacer[1], t);
	pacer_stats(&w->pacer[0], &ps);
	w->es.pace_target_us = us(ps.target_ms);
}

/*
 * The step of plan ran its n_ent entries (w->bitem) from t0 to
 * w->t_step_ns: its time goes into the model.  t0 is when it was planned,
 * or, when it followed the previous step at once, when that one's batch
 * came back: the gap a stream sees between two tokens holds the events
 * and the planning between the batches too.
 */
void
wk_pace_step(struct worker *w, const struct sched_plan *plan, int n_ent,
    uint64_t t0)
{
	struct pacer *pc = pacer_now(w);
	struct pacer_load ld = { 0 };
	struct pacer_stats ps, other;

	if (!pacer_on(pc) || n_ent <= 0 || w->t_step_ns < t0)
		return;
	for (int k = 0; k < n_ent; k++) {
		const struct sched_item *it = &plan->items[w->bitem[k]];

		pacer_load_add(&ld, it->pos, it->n, w->bitem[k] >=
		    plan->n_decode);
	}
	pacer_observe(pc, &ld, (double)(w->t_step_ns - t0) / 1e6);
	/* a derived target follows the streams' steps on every thread */
	pacer_stats(&w->pacer[0], &ps);
	pacer_set_target(&w->pacer[1], ps.target_ms);
	pacer_stats(pc, &ps);
	pacer_stats(&w->pacer[pc == &w->pacer[0]], &other);
	ps.steps += other.steps;
	ps.missed += other.missed;
	ps.missed_ms += other.missed_ms;
	w->es.pace_target_us = us(ps.target_ms);
	w->es.pace_est_us = us(ps.est_ms);
	w->es.pace_meas_us = us(ps.meas_ms);
	w->es.pace_err_us = us(ps.err_ms);
	w->es.pace_steps = ps.steps;
	w->es.pace_missed = ps.missed;
	w->es.pace_missed_us = us(ps.missed_ms);
	if (w->t_step_ns - w->t_pace_log_ns >= PACE_LOG_NS) {
		w->t_pace_log_ns = w->t_step_ns;
		pace_log(pc == &w->pacer[0] ? "" : " (beside the lane)", &ps);
	}
}
