/*
 * worker_slice.c - the engine thread's side of a sliced prefill lane
 * (slicer.h): whether a lane job is sliced, when the streams' next step is
 * due, and the lane held while a step has the cores.
 *
 * Sliced, each step with decode rows ends at some time t and sets the
 * next step's due time to t plus the slice; worker_run() waits for that
 * time (taking commands meanwhile), and the step holds the lane from
 * planning to the batch's return.  The time from the due time to the
 * batch's return goes into the slicer.
 */
#include <stdint.h>

#include "lane.h"
#include "log.h"
#include "pacer.h"
#include "slicer.h"
#include "stats.h"
#include "worker_int.h"

/*
 * The target, the streams' unloaded step and their step beside a split
 * lane.  Before a step beside the lane was measured, that step is taken
 * to slow down in proportion to the threads it loses (an upper bound:
 * decode steps stream their weights and gain less from threads).
 */
static void
slice_inputs(struct worker *w, double *target, double *step, double *beside)
{
	struct pacer_stats ps;

	pacer_stats(&w->pacer[0], &ps);
	*target = ps.target_ms;
	*step = pacer_decode_ms(&w->pacer[0]);
	*beside = pacer_decode_ms(&w->pacer[1]);
	if (*beside == 0)
		*beside = *step * w->threads_all /
		    (w->threads_all - w->threads_lane);
}

bool
wk_slice_possible(struct worker *w)
{
	double target, step, beside;

	slice_inputs(w, &target, &step, &beside);
	if (w->lane_slice_always)
		return slicer_slice(&w->slicer, target, step) > 0;
	return slicer_prefer(&w->slicer, target, step, beside);
}

void
wk_slice_choose(struct worker *w)
{
	double target, step, beside;

	w->lane_sliced = wk_slice_possible(w);
	w->t_due_ns = 0;
	slice_inputs(w, &target, &step, &beside);
	if (w->lane_sliced)
		log_debug("worker: prefill lane sliced: %.1f ms of a %.1f ms "
		    "target (streams' step %.1f ms)", slicer_slice(&w->slicer,
		    target, step), target, step);
	else
		log_debug("worker: prefill lane on %d of %d threads (the "
		    "streams' step beside it %.1f ms, target %.1f ms)",
		    w->threads_lane, w->threads_all, beside, target);
}

/* Whether the lane is sliced and has a job RUNNING. */
static bool
slice_running(struct worker *w)
{
	struct lane_status st;

	if (!w->lane_sliced || w->lane_slot < 0)
		return false;
	lane_status(w->lane, &st);
	return st.state == LANE_RUNNING;
}

uint64_t
wk_slice_due(struct worker *w)
{
	if (w->t_due_ns == 0 || stats_now_ns() >= w->t_due_ns ||
	    !slice_running(w))
		return 0;
	return w->t_due_ns;
}

bool
wk_slice_hold(struct worker *w)
{
	if (!slice_running(w))
		return false;
	lane_hold(w->lane);
	return true;
}

void
wk_slice_end(struct worker *w, bool held, int n_dec)
{
	double target, step, beside, sl;

	if (!held) {
		w->t_due_ns = 0;
		return;
	}
	lane_release(w->lane);
	if (w->t_due_ns != 0 && w->t_step_ns > w->t_due_ns)
		slicer_observe(&w->slicer,
		    (double)(w->t_step_ns - w->t_due_ns) / 1e6);
	w->t_due_ns = 0;
	if (n_dec == 0)
		return;
	slice_inputs(w, &target, &step, &beside);
	if ((sl = slicer_slice(&w->slicer, target, step)) > 0)
		w->t_due_ns = w->t_step_ns + (uint64_t)(sl * 1e6);
	w->st.lane_slices++;
}
