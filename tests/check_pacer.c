/*
 * check_pacer.c - the latency target (daemon/pacer.c) with the scheduler,
 * on synthetic machines: a step's time is a formula of its rows and their
 * positions (no clock, no engine), the pacer is the one the worker uses,
 * and the scheduler plans the steps.  The load is the one the issue names:
 * four streams decoding, then a long prompt arriving.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/suite.h"
#include "pacer.h"
#include "sched.h"


/* A machine: ms = a + b rows + c kp + d kd, times (1 + noise * u), u in [-1, 1]. */
struct machine {
	double a, b, c, d;
	double noise;
	uint64_t rng;
};

static double
machine_ms(struct machine *m, const struct pacer_load *ld)
{
	double t = m->a + m->b * ld->rows + m->c * ld->kp + m->d * ld->kd;
	double u;

	m->rng = m->rng * 6364136223846793005ull + 1442695040888963407ull;
	u = (double)(m->rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
	return t * (1.0 + m->noise * u);
}

/* 110M F16 on two cores, roughly: 10 ms for a decode-only step of four. */
static const struct machine fast = { 3.6, 1.6, 0.9, 2.0, 0, 1 };
/* four times slower everywhere */
static const struct machine slow = { 14.4, 6.4, 3.6, 8.0, 0, 1 };

#define STREAMS		4
#define LONG_PROMPT	1800

struct run {
	struct pacer pc;
	struct sched *s;
	struct machine m;
	int long_req;		/* handle, -1 before it arrives */
	int long_done_step;	/* step that sampled its token, 0 before */
	double t_ms;		/* simulated time */
	double t_long_arrival, t_long_first;
	/* steps with decode rows and prompt rows of the long prompt */
	double *paced_ms;
	int *paced_rows;
	int n_paced, cap_paced;
	int max_alone_rows;	/* largest prompt chunk of a step without
				   decodes */
};

static void
run_init(struct run *r, const struct machine *m, double target_ms)
{
	struct sched_config c = { .max_batch_tokens = 512, .max_seqs = 16,
	    .kv_block_tokens = 16, .kv_total_blocks = 4096, .n_ctx = 4096 };
	struct cp_err e = { 0 };

	memset(r, 0, sizeof(*r));
	pacer_init(&r->pc, target_ms);
	r->m = *m;
	r->long_req = -1;
	pacer_attach(&r->pc, &c);
	ck_assert_msg(sched_new(&c, &r->s, &e) == 0, "%s", e.msg);
	r->cap_paced = 4096;
	r->paced_ms = calloc((size_t)r->cap_paced, sizeof(double));
	r->paced_rows = calloc((size_t)r->cap_paced, sizeof(int));
	ck_assert(r->paced_ms != NULL && r->paced_rows != NULL);
}

static void
run_fini(struct run *r)
{
	sched_free(r->s);
	free(r->paced_ms);
	free(r->paced_rows);
}

static int
add(struct run *r, int client, int n_prompt, int max_tokens)
{
	struct sched_request q = { .client = client, .req_id = (uint64_t)client,
	    .n_prompt = n_prompt, .max_tokens = max_tokens };
	struct cp_err e = { 0 };
	int h = sched_add(r->s, &q, &e);

	ck_assert_msg(h >= 0, "%s", e.msg);
	return h;
}

/* One step: plan, time it on the machine, tell the pacer, commit. */
static void
step(struct run *r)
{
	struct sched_plan p;
	struct pacer_load ld = { 0 };
	int long_rows = 0;
	double ms;

	ck_assert_int_eq(sched_step(r->s, &p), 0);
	for (int k = 0; k < p.n_items; k++) {
		const struct sched_item *it = &p.items[k];

		pacer_load_add(&ld, it->pos, it->n, k >= p.n_decode);
		if (it->req == r->long_req)
			long_rows = it->n;
	}
	if (ld.rows > 0) {
		ms = machine_ms(&r->m, &ld);
		pacer_observe(&r->pc, &ld, ms);
		r->t_ms += ms;
		if (long_rows > 0 && ld.decode_rows > 0 &&
		    r->n_paced < r->cap_paced) {
			r->paced_ms[r->n_paced] = ms;
			r->paced_rows[r->n_paced++] = long_rows;
		}
		if (ld.decode_rows == 0 && ld.prompt_rows > r->max_alone_rows)
			r->max_alone_rows = ld.prompt_rows;
	}
	for (int k = 0; k < p.n_items; k++)
		if (p.items[k].req == r->long_req && p.items[k].logits) {
			r->long_done_step = (int)p.step;
			r->t_long_first = r->t_ms;
		}
	ck_assert_int_eq(sched_commit(r->s, &p), 0);
}

/* Streams decode for warm steps, then the long prompt arrives and is served. */
static void
run_mixed(struct run *r, int warm)
{
	for (int c = 0; c < STREAMS; c++)
		(void)add(r, c, 16, 3000);
	for (int i = 0; i < warm; i++)
		step(r);
	r->long_req = add(r, STREAMS, LONG_PROMPT, 1);
	r->t_long_arrival = r->t_ms;
	for (int i = 0; i < 20000 && r->long_done_step == 0; i++)
		step(r);
	ck_assert_msg(r->long_done_step > 0, "the long prompt never finished");
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of the paced steps from skip on. */
static double
quantile(const struct run *r, int skip, double q)
{
	int n = r->n_paced - skip;
	double *v = malloc((size_t)n * sizeof(*v)), x;

	ck_assert(n > 0 && v != NULL);
	memcpy(v, r->paced_ms + skip, (size_t)n * sizeof(*v));
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	x = v[(int)ceil(q * n) - 1 < 0 ? 0 : (int)ceil(q * n) - 1];
	free(v);
	return x;
}

static double
mean(const double *v, int n)
{
	double s = 0;

	for (int i = 0; i < n; i++)
		s += v[i];
	return n > 0 ? s / n : 0;
}

static double
mean_rows(const struct run *r, int from, int to)
{
	double s = 0;

	for (int i = from; i < to; i++)
		s += r->paced_rows[i];
	return to > from ? s / (to - from) : 0;
}

/* Steps the pacer may take to learn the machine. */
#define LEARN	12

/*
 * On a fast and a slow machine the streams' steps stay under the target
 * once the model has seen a few, and the prompt takes what is left: the
 * paced steps are nearly full, and the slow machine's chunks are smaller.
 */
START_TEST(test_target_fast_and_slow)
{
	struct run rf, rs;
	double p99f, p99s;

	run_init(&rf, &fast, 40);
	run_mixed(&rf, 50);
	run_init(&rs, &slow, 160);
	run_mixed(&rs, 50);
	p99f = quantile(&rf, LEARN, 0.99);
	p99s = quantile(&rs, LEARN, 0.99);
	ck_assert_msg(p99f <= 40.0, "fast: p99 step %.1f ms", p99f);
	ck_assert_msg(p99s <= 160.0, "slow: p99 step %.1f ms", p99s);
	/* the prompt got what the streams leave: steps at least 85 % full */
	ck_assert_msg(mean(rf.paced_ms + LEARN, rf.n_paced - LEARN) >= 34.0,
	    "fast: mean paced step %.1f ms",
	    mean(rf.paced_ms + LEARN, rf.n_paced - LEARN));
	ck_assert_msg(mean(rs.paced_ms + LEARN, rs.n_paced - LEARN) >= 136.0,
	    "slow: mean paced step %.1f ms",
	    mean(rs.paced_ms + LEARN, rs.n_paced - LEARN));
	/*
	 * the same target on the slow machine leaves less for the prompt:
	 * 40 ms there holds fewer rows than 40 ms here
	 */
	run_fini(&rs);
	run_init(&rs, &slow, 40);
	run_mixed(&rs, 50);
	ck_assert_msg(mean_rows(&rs, LEARN, rs.n_paced) * 3 <
	    mean_rows(&rf, LEARN, rf.n_paced),
	    "rows per step: slow %.1f, fast %.1f",
	    mean_rows(&rs, LEARN, rs.n_paced),
	    mean_rows(&rf, LEARN, rf.n_paced));
	run_fini(&rf);
	run_fini(&rs);
}
END_TEST
SUITE_TEST("policy", test_target_fast_and_slow);

/*
 * The machine's speed halves in the middle of the prefill (another load
 * took half of it): a few steps miss, then the model follows and the
 * steps are under the target, and full again once the misses have left
 * the window of ratios that sets the aim.  (At 40 ms the halved
 * machine's four decodes and the one row a step always gets would come
 * near the target by themselves: 60 ms leaves the prompt room.)
 */
START_TEST(test_speed_halves)
{
	struct run r;
	int mid, over = 0;

	run_init(&r, &fast, 60);
	for (int c = 0; c < STREAMS; c++)
		(void)add(&r, c, 16, 3000);
	for (int i = 0; i < 50; i++)
		step(&r);
	r.long_req = add(&r, STREAMS, 3000, 1);
	while (r.n_paced < 60)
		step(&r);
	mid = r.n_paced;
	r.m.a *= 2;
	r.m.b *= 2;
	r.m.c *= 2;
	r.m.d *= 2;
	for (int i = 0; i < 20000 && r.long_done_step == 0; i++)
		step(&r);
	ck_assert(r.long_done_step > 0);
	ck_assert_msg(r.n_paced > mid + PACER_RATIO_STEPS + 60,
	    "%d paced steps after the change", r.n_paced - mid);
	for (int i = mid; i < r.n_paced; i++)
		over += r.paced_ms[i] > 60.0;
	ck_assert_msg(over <= 8, "%d steps over the target after the change",
	    over);
	over = 0;
	for (int i = mid + 20; i < r.n_paced; i++)
		over += r.paced_ms[i] > 60.0 * 1.02;
	ck_assert_msg(over * 100 <= 3 * (r.n_paced - mid - 20),
	    "%d of %d steps over the target once the model followed", over,
	    r.n_paced - mid - 20);
	/* once the misses left the window of ratios, full again */
	mid += PACER_RATIO_STEPS + 20;
	ck_assert_msg(mean(r.paced_ms + mid, r.n_paced - mid) >= 51.0,
	    "mean step from %d after the change: %.1f ms",
	    PACER_RATIO_STEPS + 20, mean(r.paced_ms + mid, r.n_paced - mid));
	run_fini(&r);
}
END_TEST
SUITE_TEST("policy", test_speed_halves);

/*
 * A noisy machine (each step +-20 %): the aim settles below the target so
 * that few steps miss, not half of them, and the steps stay two thirds
 * full or more.
 */
START_TEST(test_noise)
{
	struct run r;
	struct machine m = fast;
	struct pacer_stats ps;
	double p99;
	int over = 0;

	m.noise = 0.2;
	run_init(&r, &m, 40);
	r.long_req = -1;
	for (int c = 0; c < STREAMS; c++)
		(void)add(&r, c, 16, 3000);
	for (int i = 0; i < 50; i++)
		step(&r);
	/* three long prompts one after the other: a long paced run */
	for (int k = 0; k < 3; k++) {
		r.long_req = add(&r, STREAMS + 1 + k, LONG_PROMPT, 1);
		r.long_done_step = 0;
		for (int i = 0; i < 20000 && r.long_done_step == 0; i++)
			step(&r);
	}
	for (int i = r.n_paced / 2; i < r.n_paced; i++)
		over += r.paced_ms[i] > 40.0;
	p99 = quantile(&r, r.n_paced / 2, 0.99);
	pacer_stats(&r.pc, &ps);
	ck_assert_msg(over * 100 <= 3 * (r.n_paced - r.n_paced / 2),
	    "%d of %d steps over the target", over,
	    r.n_paced - r.n_paced / 2);
	ck_assert_msg(p99 <= 44.0, "p99 %.1f ms", p99);
	ck_assert_msg(ps.aim < 1.0 && ps.aim > PACER_AIM_MIN, "aim %.2f",
	    ps.aim);
	ck_assert_msg(mean(r.paced_ms + r.n_paced / 2, r.n_paced -
	    r.n_paced / 2) >= 26.0, "mean paced step %.1f ms",
	    mean(r.paced_ms + r.n_paced / 2, r.n_paced - r.n_paced / 2));
	run_fini(&r);
}
END_TEST
SUITE_TEST("policy", test_noise);

/* A prompt with no stream decoding gets whole chunks (the budget). */
START_TEST(test_alone_whole_machine)
{
	struct run r;

	run_init(&r, &fast, 40);
	r.long_req = add(&r, 0, LONG_PROMPT, 1);
	for (int i = 0; i < 100 && r.long_done_step == 0; i++)
		step(&r);
	ck_assert_int_eq(r.max_alone_rows, 512);
	ck_assert_int_eq(r.long_done_step, (LONG_PROMPT + 511) / 512);
	run_fini(&r);
}
END_TEST
SUITE_TEST("policy", test_alone_whole_machine);

/*
 * The derived target: PACER_AUTO_FACTOR times the median decode-only step (10 ms on the
 * fast machine: 3.6 + 4 x 1.6 plus the decodes' attention), unknown
 * before one was measured; off lets everything through.
 */
START_TEST(test_auto_target)
{
	struct run r;
	struct pacer_stats ps;
	struct pacer_load ld = { 0 };
	struct machine m = fast;
	double t4;

	run_init(&r, &fast, -1);
	pacer_stats(&r.pc, &ps);
	ck_assert(ps.target_ms == 0.0);
	for (int c = 0; c < STREAMS; c++)
		(void)add(&r, c, 16, 3000);
	for (int i = 0; i < 40; i++)
		step(&r);
	pacer_stats(&r.pc, &ps);
	/* a decode step of the four at the middle of the last 31 steps */
	for (int c = 0; c < STREAMS; c++)
		pacer_load_add(&ld, 16 + 40 - 16, 1, false);
	t4 = machine_ms(&m, &ld);
	ck_assert_msg(fabs(ps.target_ms - PACER_AUTO_FACTOR * t4) < 0.1,
	    "target %.2f ms for decode steps of %.2f ms", ps.target_ms, t4);
	run_mixed(&r, 0);
	ck_assert_msg(quantile(&r, LEARN, 0.99) <= ps.target_ms * 1.01,
	    "p99 %.1f ms over the derived %.1f", quantile(&r, LEARN, 0.99),
	    ps.target_ms);
	run_fini(&r);

	pacer_init(&r.pc, 0);
	pacer_begin(&r.pc, 4, 100);
	ck_assert(!pacer_on(&r.pc));
	ck_assert_int_eq(pacer_rows(&r.pc, 0, 512), 512);
}
END_TEST
SUITE_TEST("policy", test_auto_target);

/*
 * A reload's new target (pacer_retarget()): off to fixed to off, and back
 * to derived, which is known at once from the decode steps seen before.
 */
START_TEST(test_retarget)
{
	struct pacer_stats ps;
	struct run r;
	double derived;

	run_init(&r, &fast, -1);
	for (int c = 0; c < STREAMS; c++)
		(void)add(&r, c, 16, 3000);
	for (int i = 0; i < 40; i++)
		step(&r);
	pacer_stats(&r.pc, &ps);
	derived = ps.target_ms;
	ck_assert(derived > 0);
	pacer_retarget(&r.pc, 0);
	ck_assert(!pacer_on(&r.pc));
	pacer_stats(&r.pc, &ps);
	ck_assert(ps.target_ms == 0.0);
	pacer_begin(&r.pc, 4, 100);
	ck_assert_int_eq(pacer_rows(&r.pc, 0, 512), 512);
	pacer_retarget(&r.pc, 40);
	ck_assert(pacer_on(&r.pc));
	pacer_stats(&r.pc, &ps);
	ck_assert(ps.target_ms == 40.0);
	pacer_begin(&r.pc, 4, 100);
	ck_assert_int_lt(pacer_rows(&r.pc, 0, 4096), 4096);
	pacer_retarget(&r.pc, -1);
	pacer_stats(&r.pc, &ps);
	ck_assert(ps.target_ms == derived);
	run_fini(&r);

	/* derived before any decode step: unknown until one */
	pacer_init(&r.pc, 0);
	pacer_retarget(&r.pc, -1);
	ck_assert(pacer_on(&r.pc));
	pacer_stats(&r.pc, &ps);
	ck_assert(ps.target_ms == 0.0);
}
END_TEST
SUITE_TEST("policy", test_retarget);

/* The model fits an exact machine: its estimate meets the measured time. */
START_TEST(test_model_converges)
{
	struct run r;
	struct pacer_stats ps;

	run_init(&r, &fast, 40);
	run_mixed(&r, 50);
	pacer_stats(&r.pc, &ps);
	ck_assert_msg(fabs(ps.est_ms - ps.meas_ms) < 0.05 * ps.meas_ms,
	    "estimate %.2f, measured %.2f", ps.est_ms, ps.meas_ms);
	ck_assert_msg(fabs(ps.coef[1] - fast.b) < 0.1 * fast.b,
	    "per row %.3f ms, machine %.3f", ps.coef[1], fast.b);
	ck_assert_uint_gt(ps.steps, 100);
	run_fini(&r);
}
END_TEST
SUITE_TEST("policy", test_model_converges);

int
main(void)
{
	return suite_main(suite_registered("pacer"));
}
