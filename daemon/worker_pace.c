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

void
wk_pace_setup(struct worker *w, const struct worker_params *p,
    struct sched_config *sc)
{
	pacer_init(&w->pacer, p->max_inter_token_ms < 0 ? -1.0 :
	    (double)p->max_inter_token_ms);
	if (pacer_on(&w->pacer))
		pacer_attach(&w->pacer, sc);
}

static uint64_t
us(double ms)
{
	return ms > 0 ? (uint64_t)(ms * 1000.0 + 0.5) : 0;
}

static void
pace_log(const struct pacer_stats *ps)
{
	log_debug("pacer: target %.1f ms (aimed at %.2f of it); step ms = "
	    "%.2f + %.4f rows + %.4f prompt kpos + %.4f decode kpos; last step "
	    "%.1f ms for %.1f estimated, mean error %.1f ms; %llu of %llu "
	    "steps over the target, by %.0f ms in all", ps->target_ms,
	    ps->aim, ps->coef[0], ps->coef[1], ps->coef[2], ps->coef[3],
	    ps->meas_ms, ps->est_ms, ps->err_ms,
	    (unsigned long long)ps->missed, (unsigned long long)ps->steps,
	    ps->missed_ms);
}

/*
 * The step of plan ran its n_ent entries (w->bitem) from t0 (before it was
 * planned) to w->t_step_ns: its time goes into the model.
 */
void
wk_pace_step(struct worker *w, const struct sched_plan *plan, int n_ent,
    uint64_t t0)
{
	struct pacer_load ld = { 0 };
	struct pacer_stats ps;

	if (!pacer_on(&w->pacer) || n_ent <= 0 || w->t_step_ns < t0)
		return;
	for (int k = 0; k < n_ent; k++) {
		const struct sched_item *it = &plan->items[w->bitem[k]];

		pacer_load_add(&ld, it->pos, it->n, w->bitem[k] >=
		    plan->n_decode);
	}
	pacer_observe(&w->pacer, &ld, (double)(w->t_step_ns - t0) / 1e6);
	pacer_stats(&w->pacer, &ps);
	w->es.pace_target_us = us(ps.target_ms);
	w->es.pace_est_us = us(ps.est_ms);
	w->es.pace_meas_us = us(ps.meas_ms);
	w->es.pace_err_us = us(ps.err_ms);
	w->es.pace_steps = ps.steps;
	w->es.pace_missed = ps.missed;
	w->es.pace_missed_us = us(ps.missed_ms);
	if (w->t_step_ns - w->t_pace_log_ns >= PACE_LOG_NS) {
		w->t_pace_log_ns = w->t_step_ns;
		pace_log(&ps);
	}
}
