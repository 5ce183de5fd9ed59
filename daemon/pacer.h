/*
 * pacer.h - a latency target for the decoding streams: how many prompt
 * rows each step may take so that the step, and so every stream's gap
 * between two tokens, stays under max_inter_token_ms.
 *
 * The pacer keeps an online model of a step's time,
 *
 *	t = c0 + c1 * rows + c2 * kp + c3 * kd	(milliseconds)
 *
 * rows: every row of the step (decode and prompt); kp and kd: the sum over
 * its prompt rows and over its decode rows of (position + 1) / 1024, the
 * attention's share, which grows with the context and costs a decode row
 * (its K/V streamed from memory) more than a prompt row (its tile shares
 * them).  The coefficients are a least-squares fit of the measured steps,
 * each weighted PACER_FORGET^age, so the model follows a machine that gets
 * slower (other load) or faster; nothing in it is a constant of one
 * machine.
 *
 * Each step: pacer_begin() with the decode rows the scheduler planned,
 * then pacer_rows() / pacer_take() for each prompt chunk: the most rows
 * whose predicted step stays under the aim: the target over the
 * PACER_RATIO_RANK-th largest ratio of measured to predicted time among
 * the last PACER_RATIO_STEPS paced steps (within [PACER_AIM_MIN,
 * PACER_AIM_MAX]), so that about one step in fifty misses however noisy
 * the machine or biased the model, and an exact model fills the target.
 * Until the model has seen prompt
 * rows it does not extrapolate: a chunk takes at most twice the most
 * prompt rows a measured step held (PACER_PROBE_ROWS at first).  A step
 * without decode rows is not paced: a prompt alone gets the whole
 * machine.  After the step ran, pacer_observe() with its measured time.
 *
 * The target is fixed (target_ms > 0), or derived (target_ms < 0):
 * PACER_AUTO_FACTOR times the median of the recent decode-only steps,
 * the unloaded step time of the streams, within [PACER_AUTO_MIN_MS,
 * PACER_AUTO_MAX_MS]; unknown until such a step was measured (the probe
 * limit then holds).  target_ms 0: off, every call lets everything
 * through.
 *
 * Pure computation: no clock, no I/O, nothing allocated; one thread.
 */
#ifndef CP_PACER_H
#define CP_PACER_H

#include <stdbool.h>
#include <stdint.h>

#define PACER_NCOEF		4
#define PACER_FORGET		0.99	/* weight of a step per newer step */
#define PACER_AIM_MIN		0.5
#define PACER_AIM_MAX		1.5
#define PACER_RATIO_STEPS	100
#define PACER_RATIO_RANK	2
#define PACER_PROBE_ROWS	32
#define PACER_AUTO_FACTOR	3.5
#define PACER_AUTO_MIN_MS	5.0
#define PACER_AUTO_MAX_MS	1000.0
#define PACER_MEDIAN_STEPS	31	/* decode-only steps the median uses */
#define PACER_MAX_TARGET_MS	600000

/* The rows of a step, as the model counts them. */
struct pacer_load {
	int rows;		/* decode and prompt rows */
	int prompt_rows;
	int decode_rows;
	double kp;		/* sum over prompt rows of (pos + 1) / 1024 */
	double kd;		/* the same over decode rows */
};

struct pacer_stats {
	double target_ms;	/* the target now; 0 when off or unknown */
	double aim;		/* the factor the target is aimed at */
	double est_ms;		/* the last measured step's prediction */
	double meas_ms;		/* and its measured time */
	double err_ms;		/* mean |estimate - measured|, recent steps */
	uint64_t steps;		/* steps measured with decode rows */
	uint64_t missed;	/* of those, over the target */
	double missed_ms;	/* their time over it, summed */
	double coef[PACER_NCOEF];	/* c0..c3 of the model */
};

struct pacer {
	double target_fixed;	/* > 0, or < 0 for auto, 0 for off */
	double target;		/* in use; 0 while unknown */
	double aim;
	double ratio[PACER_RATIO_STEPS];	/* measured / estimate of the
						   last paced steps */
	int n_ratio, ratio_next;
	double A[PACER_NCOEF][PACER_NCOEF];	/* weighted normal equations */
	double b[PACER_NCOEF];
	double coef[PACER_NCOEF];
	bool fitted;		/* coef from at least one step with prompt
				   rows */
	int max_prompt_rows;	/* most prompt rows of a measured step */
	double dec_ms[PACER_MEDIAN_STEPS];	/* recent decode-only steps */
	int n_dec, dec_next;
	struct pacer_load cur;	/* the step being planned */
	struct pacer_stats st;
};

/* target_ms > 0: fixed; < 0: derived; 0: off. */
void pacer_init(struct pacer *p, double target_ms);

/* The target becomes ms (> 0), fixed: e.g. another pacer's derived one. */
void pacer_set_target(struct pacer *p, double ms);

/*
 * The target becomes target_ms, as pacer_init() reads it (a reload); the
 * model of the step times and the recent decode steps are kept, so a
 * derived target is known at once when decode steps were seen.
 */
void pacer_retarget(struct pacer *p, double target_ms);

/* The median of the recent decode-only steps, ms; 0 before one. */
double pacer_decode_ms(const struct pacer *p);

/* Whether p paces at all (a target, fixed or derived). */
bool pacer_on(const struct pacer *p);

/* The step's decode rows are planned: n of them, positions summing to pos_sum. */
void pacer_begin(struct pacer *p, int n, int64_t pos_sum);

/*
 * The most of n prompt rows from position pos that the step being planned
 * may take (0..n); the chunk is not counted until pacer_take().
 */
int pacer_rows(const struct pacer *p, int pos, int n);

/* The step takes n prompt rows from position pos. */
void pacer_take(struct pacer *p, int pos, int n);

/* The model's time for a step of load ld, milliseconds. */
double pacer_predict(const struct pacer *p, const struct pacer_load *ld);

/* Add n rows from position pos to ld (prompt rows, or decode rows). */
void pacer_load_add(struct pacer_load *ld, int pos, int n, bool prompt);

/* A step of load ld ran in ms milliseconds. */
void pacer_observe(struct pacer *p, const struct pacer_load *ld, double ms);

/* Fill *out. */
void pacer_stats(const struct pacer *p, struct pacer_stats *out);

struct sched_config;

/* sc's pace hooks become p's (pacer_begin, _rows, _take), p the arg. */
void pacer_attach(struct pacer *p, struct sched_config *sc);

#endif
