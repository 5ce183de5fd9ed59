/*
 * pacer.c - the step-time model and the prompt rows it allows (pacer.h).
 */
#include "pacer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

/* Feature scales: each feature of a usual step near 1. */
#define SC_ROWS		64.0
#define SC_KP		64.0
#define SC_KD		16.0
#define RIDGE		1e-3	/* keeps a direction no step varied solvable */
#define ERR_ALPHA	0.05	/* weight of a step in err_ms */

void
pacer_init(struct pacer *p, double target_ms)
{
	memset(p, 0, sizeof(*p));
	p->target_fixed = target_ms;
	p->target = target_ms > 0 ? target_ms : 0;
	p->aim = 1.0;
}

void
pacer_set_target(struct pacer *p, double ms)
{
	if (ms > 0)
		p->target_fixed = p->target = ms;
}

/* A derived target from the recent decode-only steps (some were seen). */
static double
derived(const struct pacer *p)
{
	double t = PACER_AUTO_FACTOR * pacer_decode_ms(p);

	return t < PACER_AUTO_MIN_MS ? PACER_AUTO_MIN_MS :
	    t > PACER_AUTO_MAX_MS ? PACER_AUTO_MAX_MS : t;
}

void
pacer_retarget(struct pacer *p, double target_ms)
{
	p->target_fixed = target_ms;
	p->target = target_ms > 0 ? target_ms :
	    target_ms < 0 && p->n_dec > 0 ? derived(p) : 0;
}

bool
pacer_on(const struct pacer *p)
{
	return p->target_fixed != 0;
}

void
pacer_load_add(struct pacer_load *ld, int pos, int n, bool prompt)
{
	/* positions pos .. pos + n - 1, each counted as pos + 1 */
	double k = ((double)n * pos + (double)n * (n + 1) / 2) / 1024.0;

	ld->rows += n;
	if (prompt) {
		ld->prompt_rows += n;
		ld->kp += k;
	} else {
		ld->decode_rows += n;
		ld->kd += k;
	}
}

static void
features(const struct pacer_load *ld, double x[PACER_NCOEF])
{
	x[0] = 1.0;
	x[1] = ld->rows / SC_ROWS;
	x[2] = ld->kp / SC_KP;
	x[3] = ld->kd / SC_KD;
}

/*
 * The model's time; the marginal costs are taken as at least 0 (a fit on
 * few steps may make one negative) and the time as at least 0, so that
 * more rows never predict less time.
 */
double
pacer_predict(const struct pacer *p, const struct pacer_load *ld)
{
	double x[PACER_NCOEF], t = p->coef[0];

	features(ld, x);
	for (int i = 1; i < PACER_NCOEF; i++)
		t += (p->coef[i] > 0 ? p->coef[i] : 0) * x[i];
	return t > 0 ? t : 0;
}

void
pacer_begin(struct pacer *p, int n, int64_t pos_sum)
{
	memset(&p->cur, 0, sizeof(p->cur));
	p->cur.rows = p->cur.decode_rows = n;
	p->cur.kd = ((double)pos_sum + n) / 1024.0;
}

int
pacer_rows(const struct pacer *p, int pos, int n)
{
	int lo = 0, hi, cap;
	double aim = p->target * p->aim;
	struct pacer_load ld;

	if (!pacer_on(p) || p->cur.decode_rows == 0 || n <= 0)
		return n > 0 ? n : 0;
	cap = p->fitted ? 2 * p->max_prompt_rows : PACER_PROBE_ROWS;
	if (cap < PACER_PROBE_ROWS)
		cap = PACER_PROBE_ROWS;
	cap -= p->cur.prompt_rows;
	hi = n < cap ? n : cap;
	if (hi <= 0 || p->target <= 0)
		return hi > 0 ? hi : 0;
	/* the largest m <= hi whose step is predicted within the aim */
	while (lo < hi) {
		int mid = lo + (hi - lo + 1) / 2;

		ld = p->cur;
		pacer_load_add(&ld, pos, mid, true);
		if (pacer_predict(p, &ld) <= aim)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

void
pacer_take(struct pacer *p, int pos, int n)
{
	if (n > 0)
		pacer_load_add(&p->cur, pos, n, true);
}

/* Solves (A + ridge) c = b by elimination with partial pivoting. */
static bool
solve(const double A[PACER_NCOEF][PACER_NCOEF], const double b[PACER_NCOEF],
    double c[PACER_NCOEF])
{
	double M[PACER_NCOEF][PACER_NCOEF + 1];
	const int n = PACER_NCOEF;

	for (int i = 0; i < n; i++) {
		for (int j = 0; j < n; j++)
			M[i][j] = A[i][j] + (i == j ? RIDGE : 0);
		M[i][n] = b[i];
	}
	for (int k = 0; k < n; k++) {
		int piv = k;

		for (int i = k + 1; i < n; i++)
			if (fabs(M[i][k]) > fabs(M[piv][k]))
				piv = i;
		if (fabs(M[piv][k]) < 1e-12)
			return false;
		if (piv != k)
			for (int j = k; j <= n; j++) {
				double t = M[k][j];

				M[k][j] = M[piv][j];
				M[piv][j] = t;
			}
		for (int i = k + 1; i < n; i++) {
			double f = M[i][k] / M[k][k];

			for (int j = k; j <= n; j++)
				M[i][j] -= f * M[k][j];
		}
	}
	for (int i = n - 1; i >= 0; i--) {
		double s = M[i][n];

		for (int j = i + 1; j < n; j++)
			s -= M[i][j] * c[j];
		c[i] = s / M[i][i];
	}
	for (int i = 0; i < n; i++)
		if (!isfinite(c[i]))
			return false;
	return true;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double
pacer_decode_ms(const struct pacer *p)
{
	double v[PACER_MEDIAN_STEPS];

	if (p->n_dec == 0)
		return 0;
	memcpy(v, p->dec_ms, (size_t)p->n_dec * sizeof(v[0]));
	qsort(v, (size_t)p->n_dec, sizeof(v[0]), cmp_double);
	return v[p->n_dec / 2];
}

/* A decode-only step's time joins the median a derived target follows. */
static void
note_decode_step(struct pacer *p, double ms)
{
	p->dec_ms[p->dec_next] = ms;
	p->dec_next = (p->dec_next + 1) % PACER_MEDIAN_STEPS;
	if (p->n_dec < PACER_MEDIAN_STEPS)
		p->n_dec++;
	if (p->target_fixed < 0)
		p->target = derived(p);
}

/*
 * A paced step's measured / estimated time joins the window; the aim
 * becomes 1 over the PACER_RATIO_RANK-th largest ratio in it.
 */
static void
note_ratio(struct pacer *p, double r)
{
	double v[PACER_RATIO_STEPS];
	int n;

	p->ratio[p->ratio_next] = r;
	p->ratio_next = (p->ratio_next + 1) % PACER_RATIO_STEPS;
	if (p->n_ratio < PACER_RATIO_STEPS)
		p->n_ratio++;
	n = p->n_ratio;
	memcpy(v, p->ratio, (size_t)n * sizeof(v[0]));
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	r = v[n >= PACER_RATIO_RANK ? n - PACER_RATIO_RANK : n - 1];
	p->aim = r > 0 ? 1.0 / r : PACER_AIM_MAX;
	if (p->aim < PACER_AIM_MIN)
		p->aim = PACER_AIM_MIN;
	if (p->aim > PACER_AIM_MAX)
		p->aim = PACER_AIM_MAX;
}

void
pacer_observe(struct pacer *p, const struct pacer_load *ld, double ms)
{
	double x[PACER_NCOEF], c[PACER_NCOEF], est;

	if (!(ms >= 0) || !isfinite(ms) || ld->rows <= 0)
		return;
	est = pacer_predict(p, ld);
	p->st.est_ms = est;
	p->st.meas_ms = ms;
	p->st.err_ms += ERR_ALPHA * (fabs(est - ms) - p->st.err_ms);
	features(ld, x);
	for (int i = 0; i < PACER_NCOEF; i++) {
		for (int j = 0; j < PACER_NCOEF; j++)
			p->A[i][j] = PACER_FORGET * p->A[i][j] + x[i] * x[j];
		p->b[i] = PACER_FORGET * p->b[i] + x[i] * ms;
	}
	if (solve(p->A, p->b, c))
		memcpy(p->coef, c, sizeof(c));
	if (ld->prompt_rows > 0) {
		p->fitted = true;
		if (ld->prompt_rows > p->max_prompt_rows)
			p->max_prompt_rows = ld->prompt_rows;
	}
	if (ld->decode_rows == 0)
		return;
	p->st.steps++;
	if (p->target > 0 && ms > p->target) {
		p->st.missed++;
		p->st.missed_ms += ms - p->target;
	}
	if (ld->prompt_rows == 0) {
		note_decode_step(p, ms);
		return;
	}
	if (est > 0)
		note_ratio(p, ms / est);
}

static void
hook_begin(void *arg, int n, int64_t pos_sum)
{
	pacer_begin(arg, n, pos_sum);
}

static int
hook_rows(void *arg, int pos, int n)
{
	return pacer_rows(arg, pos, n);
}

static void
hook_take(void *arg, int pos, int n)
{
	pacer_take(arg, pos, n);
}

void
pacer_attach(struct pacer *p, struct sched_config *sc)
{
	sc->pace_begin = hook_begin;
	sc->pace_rows = hook_rows;
	sc->pace_take = hook_take;
	sc->pace_arg = p;
}

void
pacer_stats(const struct pacer *p, struct pacer_stats *out)
{
	*out = p->st;
	out->target_ms = pacer_on(p) ? p->target : 0;
	out->aim = p->aim;
	out->coef[0] = p->coef[0];
	out->coef[1] = p->coef[1] / SC_ROWS;
	out->coef[2] = p->coef[2] / SC_KP;
	out->coef[3] = p->coef[3] / SC_KD;
}
