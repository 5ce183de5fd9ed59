/*
 * check_threadpool.c - the CPU backend's thread pool: every task runs
 * exactly once, and tp_set_active() decides which threads take part.
 */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/suite.h"
#include "threadpool.h"


#define NT 4		/* threads of the pools under test */
#define MAX_TASKS 4096

struct job {
	atomic_int runs[MAX_TASKS];	/* times each task ran */
	atomic_int by[NT];		/* tasks each thread ran */
	atomic_int entered;		/* tasks started */
	int meet;			/* a task waits for this many starts */
};

static void
task(void *arg, int t, int thread)
{
	struct job *j = arg;
	uint64_t t0;

	atomic_fetch_add(&j->runs[t], 1);
	atomic_fetch_add(&j->by[thread], 1);
	atomic_fetch_add(&j->entered, 1);
	/*
	 * With meet set, the first tasks wait (up to 10 s) until that many
	 * have started: they can only all start on distinct threads.
	 */
	t0 = clock_ms();
	while (t < j->meet && atomic_load(&j->entered) < j->meet &&
	    clock_ms() - t0 < 10000)
		;
}

/* Runs n tasks; asserts each ran once; returns the threads that ran any. */
static int
run(struct threadpool *tp, struct job *j, int n, int meet)
{
	int i, used = 0;

	memset(j, 0, sizeof(*j));
	j->meet = meet;
	tp_run(tp, task, j, n);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(atomic_load(&j->runs[i]), 1);
	for (i = 0; i < NT; i++)
		used += atomic_load(&j->by[i]) > 0;
	return used;
}

static int
ran_above(const struct job *j, int n)
{
	int i, k = 0;

	for (i = n; i < NT; i++)
		k += atomic_load(&j->by[i]);
	return k;
}

START_TEST(test_all_threads)
{
	static struct job j;
	struct threadpool *tp;

	ck_assert_int_eq(tp_new(NT, &tp), 0);
	ck_assert_int_eq(tp_threads(tp), NT);
	ck_assert_int_eq(tp_active(tp), NT);
	/* NT tasks that wait for each other: all NT threads took one. */
	ck_assert_int_eq(run(tp, &j, NT, NT), NT);
	/* many tasks: each once (run() asserts it) */
	(void)run(tp, &j, MAX_TASKS, 0);
	tp_free(tp);
}
END_TEST
SUITE_TEST("core", test_all_threads);

/*
 * Lowered to n, only threads 0..n-1 run tasks, job after job; raised
 * again, the parked workers take part at once (tasks that wait for each
 * other would time out, and be counted, without them).
 */
START_TEST(test_set_active)
{
	static struct job j;
	struct threadpool *tp;
	int n, k;

	ck_assert_int_eq(tp_new(NT, &tp), 0);
	for (n = 1; n <= NT; n++) {
		ck_assert_int_eq(tp_set_active(tp, n), 0);
		ck_assert_int_eq(tp_active(tp), n);
		for (k = 0; k < 20; k++) {
			run(tp, &j, 64, 0);
			ck_assert_int_eq(ran_above(&j, n), 0);
		}
		ck_assert_int_eq(run(tp, &j, n, n), n);
		ck_assert_int_eq(ran_above(&j, n), 0);
	}
	for (n = NT; n >= 1; n--) {
		ck_assert_int_eq(tp_set_active(tp, n), 0);
		ck_assert_int_eq(run(tp, &j, n, n), n);
		ck_assert_int_eq(ran_above(&j, n), 0);
	}
	ck_assert_int_eq(tp_set_active(tp, 0), -EINVAL);
	ck_assert_int_eq(tp_set_active(tp, NT + 1), -EINVAL);
	ck_assert_int_eq(tp_active(tp), 1);
	/* freed while workers are parked */
	tp_free(tp);
}
END_TEST
SUITE_TEST("core", test_set_active);

/* Random counts between random jobs: no task lost, none run twice. */
START_TEST(test_set_active_random)
{
	static struct job j;
	struct threadpool *tp;
	unsigned seed = 7;
	int i, n;

	ck_assert_int_eq(tp_new(NT, &tp), 0);
	for (i = 0; i < 3000; i++) {
		if (rand_r(&seed) % 3 == 0) {
			n = 1 + (int)(rand_r(&seed) % NT);
			ck_assert_int_eq(tp_set_active(tp, n), 0);
		}
		run(tp, &j, 1 + (int)(rand_r(&seed) % 200), 0);
		ck_assert_int_eq(ran_above(&j, tp_active(tp)), 0);
	}
	tp_free(tp);
}
END_TEST
SUITE_TEST("core", test_set_active_random);

SUITE_CASE("core", 60);

int
main(void)
{
	return suite_main(suite_registered("threadpool"));
}
