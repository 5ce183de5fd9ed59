/*
 * slicer.h - the prefill lane in time slices: how long the lane may have
 * every core before the decoding streams' next step takes them back.
 *
 * Beside the streams, the lane can run in one of two ways.  Split: it
 * keeps some cores (lane.h) and the steps run on the rest, each side all
 * the time.  Sliced: the lane runs on every core and stops at its next
 * job boundary whenever a step of the streams is due (lane_hold()), so
 * the streams' steps run on every core too, at the pace the latency
 * target allows, and the prompt gets the time in between.  Split is the
 * default: on a shared two-vCPU VM it gave the prompt its first token as
 * soon as slices did, or sooner when the host took time from the vCPUs
 * (the lane's one thread never waits for another at a barrier), and the
 * streams half the gaps (BENCHMARKS-serve.md).  A lane is sliced when the
 * streams' steps beside a split lane, on fewer cores, miss the target:
 * slices are then what keeps their gaps under it.
 *
 * A stream's gap between two tokens, sliced, is the slice the lane got
 * plus d: the time from the step's due time to its end (the lane's way
 * to its next job boundary, the step itself, the turn's own work).  The
 * slicer keeps the d of the last SLICER_STEPS steps and gives the lane
 * the target less the SLICER_RANK-th largest of them, so that about one
 * gap in fifty passes the target however the machine's speed varies.
 * Before any step was measured, d is guessed from the streams' unloaded
 * step (SLICER_GUESS times it).  A slice never falls under SLICER_MIN of
 * the target: the prompt always advances.
 *
 * Pure computation: no clock, no I/O; one thread.
 */
#ifndef CP_SLICER_H
#define CP_SLICER_H

#include <stdbool.h>

#define SLICER_STEPS	100
#define SLICER_RANK	2
#define SLICER_GUESS	1.5
#define SLICER_MIN	0.1

struct slicer {
	double d[SLICER_STEPS];	/* ms, the last steps' */
	int n, next;
};

void slicer_init(struct slicer *s);

/* A step due at t ended d_ms later. */
void slicer_observe(struct slicer *s, double d_ms);

/*
 * The d a slice has to leave room for: the SLICER_RANK-th largest
 * measured, or while fewer were, the largest of them and step_ms (the
 * streams' unloaded step, 0 when unknown) times SLICER_GUESS; 0 when
 * none is known.
 */
double slicer_d(const struct slicer *s, double step_ms);

/*
 * The lane's slice before the next step, ms: target_ms less slicer_d(),
 * at least SLICER_MIN of the target; 0 when the target (or d) is unknown.
 */
double slicer_slice(const struct slicer *s, double target_ms, double step_ms);

/*
 * Whether a prefill lane starting now should be sliced: target_ms > 0 and
 * known, d known, and the steps beside a split lane (beside_ms, their
 * recent median or an estimate; 0 when unknown) over the target.
 */
bool slicer_prefer(const struct slicer *s, double target_ms, double step_ms,
    double beside_ms);

#endif
