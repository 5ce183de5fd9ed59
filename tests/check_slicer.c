/*
 * check_slicer.c - the sliced prefill lane's policy (daemon/slicer.c) on
 * synthetic machines: a stream's gap is the lane's slice plus the time
 * from the step's due time to its end (the lane's way to a job boundary
 * and the step), drawn from a formula with noise; no clock, no engine.
 */
#include <check.h>
#include <stdint.h>

#include "lib/suite.h"
#include "slicer.h"

/* d = park + step: park in [0, job), step = step_ms * (1 + noise * u). */
struct machine {
	double step_ms, job_ms, noise;
	uint64_t rng;
};

static double
uniform(struct machine *m)
{
	m->rng = m->rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(m->rng >> 11) / (double)(1ull << 53);
}

static double
machine_d(struct machine *m)
{
	double park = m->job_ms * uniform(m);

	return park + m->step_ms * (1.0 + m->noise * (2.0 * uniform(m) - 1.0));
}

/* Gaps over a run of n steps, after the slicer has seen warm ones. */
struct tally {
	int n, over;
	double lane_ms, all_ms, min_slice;
};

static void
run(struct slicer *s, struct machine *m, double target, int n,
    struct tally *t)
{
	t->n = t->over = 0;
	t->lane_ms = t->all_ms = 0;
	t->min_slice = 1e9;
	for (int i = 0; i < n; i++) {
		double sl = slicer_slice(s, target, m->step_ms);
		double d = machine_d(m);

		ck_assert(sl > 0);
		if (sl < t->min_slice)
			t->min_slice = sl;
		t->n++;
		t->over += sl + d > target;
		t->lane_ms += sl;
		t->all_ms += sl + d;
		slicer_observe(s, d);
	}
}

/*
 * On a machine whose step is 10 ms (+-20 %) and whose lane stops within
 * 3 ms, a 35 ms target: about one gap in fifty over it, and the lane gets
 * nearly all the rest: at least the target less the worst d, 35 - 15.
 */
START_TEST(test_gaps_under_target)
{
	struct machine m = { 10, 3, 0.2, 1 };
	struct slicer s;
	struct tally t;

	slicer_init(&s);
	run(&s, &m, 35, SLICER_STEPS, &t);
	run(&s, &m, 35, 5000, &t);
	ck_assert_msg(t.over <= t.n * 3 / 100, "%d of %d gaps over the target",
	    t.over, t.n);
	ck_assert_msg(t.lane_ms / t.all_ms >= (35.0 - 15.0) / 35.0,
	    "lane share %.3f", t.lane_ms / t.all_ms);
}
END_TEST
SUITE_TEST("policy", test_gaps_under_target);

/*
 * The machine's speed halves mid-run (another load arrives): misses come
 * for at most the slicer's window, then fall back to one in fifty; the
 * slices shrink to what is left and never under SLICER_MIN of the target.
 * Faster again, the slices grow back.
 */
START_TEST(test_speed_halves)
{
	struct machine m = { 10, 3, 0.2, 7 };
	struct slicer s;
	struct tally t;
	double before;

	slicer_init(&s);
	run(&s, &m, 40, 500, &t);
	before = t.lane_ms / t.n;
	m.step_ms = 20;
	m.job_ms = 6;
	run(&s, &m, 40, SLICER_STEPS, &t);
	ck_assert_int_le(t.over, SLICER_STEPS / 4);
	run(&s, &m, 40, 3000, &t);
	ck_assert_msg(t.over <= t.n * 3 / 100, "%d of %d over", t.over, t.n);
	ck_assert(t.lane_ms / t.n < before - 8);
	ck_assert(t.min_slice >= 40 * SLICER_MIN);
	m.step_ms = 10;
	m.job_ms = 3;
	run(&s, &m, 40, SLICER_STEPS, &t);
	run(&s, &m, 40, 500, &t);
	ck_assert_msg(t.lane_ms / t.n > before - 1, "slice %.1f, was %.1f",
	    t.lane_ms / t.n, before);
}
END_TEST
SUITE_TEST("policy", test_speed_halves);

/* One late step in the window is ignored, two are not (SLICER_RANK). */
START_TEST(test_rank)
{
	struct slicer s;
	int i;

	slicer_init(&s);
	for (i = 0; i < SLICER_STEPS - 1; i++)
		slicer_observe(&s, 10);
	slicer_observe(&s, 30);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 8), 30, 1e-9);
	slicer_observe(&s, 25);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 8), 15, 1e-9);
	/* a window later both have left it */
	for (i = 0; i < SLICER_STEPS; i++)
		slicer_observe(&s, 12);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 8), 28, 1e-9);
}
END_TEST
SUITE_TEST("policy", test_rank);

/*
 * Before a step was measured, d is SLICER_GUESS unloaded steps; with one
 * measured, the larger of the two; with neither, or no target, no slice.
 * A d over the target leaves SLICER_MIN of it.
 */
START_TEST(test_unknowns)
{
	struct slicer s;

	slicer_init(&s);
	ck_assert_double_eq(slicer_slice(&s, 40, 0), 0);
	ck_assert_double_eq(slicer_slice(&s, 0, 10), 0);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 10),
	    40 - 10 * SLICER_GUESS, 1e-9);
	slicer_observe(&s, 20);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 10), 20, 1e-9);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 0), 20, 1e-9);
	slicer_observe(&s, 60);
	slicer_observe(&s, 60);
	ck_assert_double_eq_tol(slicer_slice(&s, 40, 10), 40 * SLICER_MIN,
	    1e-9);
}
END_TEST
SUITE_TEST("policy", test_unknowns);

/*
 * Sliced when the steps beside a split lane were measured over the
 * target; split while they keep under it or were never measured; never
 * without a target or an estimate of d.
 */
START_TEST(test_prefer)
{
	struct slicer s;
	int i;

	slicer_init(&s);
	ck_assert(!slicer_prefer(&s, 0, 10, 15));
	ck_assert(!slicer_prefer(&s, 0, 10, 50));
	ck_assert(!slicer_prefer(&s, 40, 0, 50));
	ck_assert(slicer_prefer(&s, 40, 10, 50));
	for (i = 0; i < SLICER_STEPS; i++)
		slicer_observe(&s, 12);
	ck_assert(!slicer_prefer(&s, 40, 10, 15));
	ck_assert(!slicer_prefer(&s, 40, 10, 40));
	ck_assert(slicer_prefer(&s, 40, 10, 41));
	ck_assert(!slicer_prefer(&s, 40, 10, 0));	/* never measured */
}
END_TEST
SUITE_TEST("policy", test_prefer);

int
main(void)
{
	return suite_main(suite_registered("slicer"));
}
