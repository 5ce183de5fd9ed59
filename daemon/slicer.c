/*
 * slicer.c - the prefill lane's time slices (see slicer.h).
 */
#include "slicer.h"

#include <string.h>

void
slicer_init(struct slicer *s)
{
	memset(s, 0, sizeof(*s));
}

void
slicer_observe(struct slicer *s, double d_ms)
{
	if (!(d_ms >= 0))
		d_ms = 0;
	s->d[s->next] = d_ms;
	s->next = (s->next + 1) % SLICER_STEPS;
	if (s->n < SLICER_STEPS)
		s->n++;
}

double
slicer_d(const struct slicer *s, double step_ms)
{
	double top[SLICER_RANK];
	int k, i, j, have = 0;

	if (s->n == 0)
		return step_ms > 0 ? step_ms * SLICER_GUESS : 0;
	/* the SLICER_RANK largest, in descending order */
	for (i = 0; i < s->n; i++) {
		double v = s->d[i];

		for (j = 0; j < have && top[j] >= v; j++)
			;
		if (j == SLICER_RANK)
			continue;
		k = have < SLICER_RANK ? have++ : SLICER_RANK - 1;
		for (; k > j; k--)
			top[k] = top[k - 1];
		top[j] = v;
	}
	if (have == SLICER_RANK)
		return top[SLICER_RANK - 1];
	return top[0] > step_ms * SLICER_GUESS ? top[0] : step_ms * SLICER_GUESS;
}

double
slicer_slice(const struct slicer *s, double target_ms, double step_ms)
{
	double d = slicer_d(s, step_ms), sl;

	if (!(target_ms > 0) || d == 0)
		return 0;
	sl = target_ms - d;
	return sl > target_ms * SLICER_MIN ? sl : target_ms * SLICER_MIN;
}

bool
slicer_prefer(const struct slicer *s, double target_ms, double step_ms,
    double beside_ms)
{
	double sl = slicer_slice(s, target_ms, step_ms);

	if (sl == 0)
		return false;
	return beside_ms > target_ms;
}
