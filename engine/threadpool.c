/*
 * threadpool.c - persistent workers that spin, then sleep on a futex.
 *
 * A decode step runs about sixty short jobs (matrix products of tens of
 * microseconds each, with serial work of a few microseconds in between),
 * so a job's start and end must cost far less than a wake-up through the
 * kernel.  Workers therefore poll the job counter after each job, and the
 * caller polls for the workers' end, for an adaptive time (tp_spin()),
 * then sleep on a futex.  tp_run() wakes sleepers only when there are
 * any, so a busy pool makes no system call.
 */
#include "threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TP_PAUSE() _mm_pause()
#else
#define TP_PAUSE() ((void)0)
#endif

#define TP_SPIN_MAX_NS 200000	/* longest polling before a thread sleeps */
#define TP_SPIN_MIN_NS 4000	/* shortest */
#define TP_CLOCK_EVERY 64	/* polls between clock reads */

struct tp_worker {
	struct threadpool *tp;
	pthread_t th;
	int index;		/* 1..n-1; the caller of tp_run() is 0 */
};

/*
 * Protocol.  tp_run() stores fn, arg and n_tasks, resets next and sets
 * pending to the number of workers, then bumps gen (sequentially
 * consistent); if sleepers is non-zero it wakes the futex on gen.  A
 * worker that sees gen change claims task indices from next until they
 * run out, then decrements pending; the one that brings it to zero wakes
 * the futex on pending if the caller sleeps there (waiting set).  A
 * worker about to sleep increments sleepers and then waits on gen with
 * the value it last saw, so a bump in between is never missed; the
 * caller's wait on pending mirrors that.  tp_run() returns only when
 * pending is zero, so no worker still touches a job's fields when the
 * next job is stored.
 *
 * Active threads.  Only workers with index < active take part in jobs;
 * pending counts those.  The others are parked: they wait on the futex
 * word active and never look at gen, so they neither poll nor wake for
 * jobs that are not theirs.  tp_set_active() changes active between jobs
 * only, and returns when every worker is where the new count says: to
 * lower it, it stores the count and runs an empty job, which the
 * workers now left out see and answer by parking, and waits until they
 * all count themselves in parked; to raise it, it stores the count,
 * wakes the parked workers and waits until those now included have read
 * gen (which no job changes meanwhile) and left parked.  So a worker
 * never mistakes a job for one it was counted in.
 */
struct threadpool {
	int n;				/* threads, caller included */
	int n_workers;			/* started workers */
	struct tp_worker *workers;
	_Alignas(64) atomic_uint gen;	/* futex word: job counter */
	atomic_int sleepers;		/* workers in or entering a wait */
	atomic_int stop;
	_Alignas(64) atomic_int next;	/* next task index to claim */
	_Alignas(64) atomic_uint pending; /* futex word: workers not done */
	atomic_int waiting;		/* the caller sleeps on pending */
	_Alignas(64) atomic_uint active; /* futex word: threads in jobs */
	atomic_int parked;		/* workers waiting on active */
	int64_t budget;			/* the caller's polling budget, ns */
	_Alignas(64) tp_fn *fn;
	void *arg;
	int n_tasks;
};

static void
tp_futex_wait(atomic_uint *word, unsigned val)
{
	(void)syscall(SYS_futex, (void *)word, FUTEX_WAIT_PRIVATE, val,
	    NULL, NULL, 0);
}

static void
tp_futex_wake(atomic_uint *word)
{
	(void)syscall(SYS_futex, (void *)word, FUTEX_WAKE_PRIVATE, INT_MAX,
	    NULL, NULL, 0);
}

static int64_t
tp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Poll until *word != val or *budget ns pass; returns true if it changed.
 * The clock is read only every TP_CLOCK_EVERY polls.  The budget adapts:
 * it doubles (up to TP_SPIN_MAX_NS) when the wait ends while polling and
 * falls to a quarter (down to TP_SPIN_MIN_NS) when it runs out.  On an
 * idle machine waits are short and polling wins; when other processes
 * take the cores, the thread being waited for is often descheduled, and
 * long polling would only burn the time slice it needs.  No sched_yield():
 * on a loaded machine it hands the rest of the slice to another process.
 */
static bool
tp_spin(const atomic_uint *word, unsigned val, int64_t *budget)
{
	int64_t t0 = 0;

	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(word, memory_order_acquire) != val) {
			if (t0 != 0 && *budget < TP_SPIN_MAX_NS)
				*budget = *budget * 2 < TP_SPIN_MAX_NS ?
				    *budget * 2 : TP_SPIN_MAX_NS;
			return true;
		}
		TP_PAUSE();
		if (i % TP_CLOCK_EVERY == 0) {
			if (t0 == 0) {
				t0 = tp_now_ns();
			} else if (tp_now_ns() - t0 > *budget) {
				*budget = *budget / 4 > TP_SPIN_MIN_NS ?
				    *budget / 4 : TP_SPIN_MIN_NS;
				return false;
			}
		}
	}
}

static void
tp_work(struct threadpool *tp, int thread)
{
	int t;

	while ((t = atomic_fetch_add_explicit(&tp->next, 1,
	    memory_order_relaxed)) < tp->n_tasks)
		tp->fn(tp->arg, t, thread);
}

/*
 * Wait on active while w is left out of jobs.  Returns the gen to watch
 * from once included, or 0 with *stop set.
 */
static unsigned
tp_park(struct threadpool *tp, struct tp_worker *w, bool *stop)
{
	unsigned a, seen;

	atomic_fetch_add(&tp->parked, 1);
	while ((a = atomic_load(&tp->active)) <= (unsigned)w->index &&
	    !atomic_load(&tp->stop))
		tp_futex_wait(&tp->active, a);
	seen = atomic_load(&tp->gen);
	*stop = atomic_load(&tp->stop) != 0;
	atomic_fetch_sub(&tp->parked, 1);
	return seen;
}

static void *
tp_main(void *p)
{
	struct tp_worker *w = p;
	struct threadpool *tp = w->tp;
	int64_t budget = TP_SPIN_MAX_NS;
	unsigned seen = 0;
	bool stop = false;

	for (;;) {
		if (atomic_load(&tp->active) <= (unsigned)w->index) {
			seen = tp_park(tp, w, &stop);
			if (stop)
				return NULL;
		}
		if (!tp_spin(&tp->gen, seen, &budget)) {
			atomic_fetch_add(&tp->sleepers, 1);
			while (atomic_load(&tp->gen) == seen &&
			    !atomic_load(&tp->stop))
				tp_futex_wait(&tp->gen, seen);
			atomic_fetch_sub(&tp->sleepers, 1);
		}
		if (atomic_load(&tp->stop))
			return NULL;
		seen = atomic_load_explicit(&tp->gen, memory_order_acquire);
		/* Left out of this job (tp_set_active lowered the count). */
		if (atomic_load(&tp->active) <= (unsigned)w->index)
			continue;
		tp_work(tp, w->index);
		if (atomic_fetch_sub(&tp->pending, 1) == 1 &&
		    atomic_load(&tp->waiting))
			tp_futex_wake(&tp->pending);
	}
}

int
tp_new(int n_threads, struct threadpool **out)
{
	struct threadpool *tp;
	int i, rc;

	*out = NULL;
	if (n_threads < 1 || n_threads > TP_MAX_THREADS)
		return -EINVAL;
	if ((tp = aligned_alloc(64, sizeof(*tp))) == NULL)
		return -ENOMEM;
	tp->n = n_threads;
	tp->n_workers = 0;
	tp->fn = NULL;
	tp->arg = NULL;
	tp->n_tasks = 0;
	atomic_init(&tp->gen, 0);
	atomic_init(&tp->sleepers, 0);
	atomic_init(&tp->stop, 0);
	atomic_init(&tp->next, 0);
	atomic_init(&tp->pending, 0);
	atomic_init(&tp->waiting, 0);
	atomic_init(&tp->active, (unsigned)n_threads);
	atomic_init(&tp->parked, 0);
	tp->budget = TP_SPIN_MAX_NS;
	if ((tp->workers = calloc((size_t)n_threads,
	    sizeof(*tp->workers))) == NULL) {
		free(tp);
		return -ENOMEM;
	}
	for (i = 1; i < n_threads; i++) {
		struct tp_worker *w = &tp->workers[i - 1];

		w->tp = tp;
		w->index = i;
		if ((rc = pthread_create(&w->th, NULL, tp_main, w)) != 0) {
			tp_free(tp);
			return -rc;
		}
		tp->n_workers++;
	}
	*out = tp;
	return 0;
}

void
tp_free(struct threadpool *tp)
{
	int i;

	if (tp == NULL)
		return;
	atomic_store(&tp->stop, 1);
	atomic_fetch_add(&tp->gen, 1);
	tp_futex_wake(&tp->gen);
	tp_futex_wake(&tp->active);
	for (i = 0; i < tp->n_workers; i++)
		pthread_join(tp->workers[i].th, NULL);
	free(tp->workers);
	free(tp);
}

int
tp_threads(const struct threadpool *tp)
{
	return tp->n;
}

int
tp_active(const struct threadpool *tp)
{
	return (int)atomic_load_explicit(&tp->active, memory_order_relaxed);
}

/* Hand task indices to the caller and the active workers; wait for them. */
static void
tp_job(struct threadpool *tp, tp_fn *fn, void *arg, int n_tasks)
{
	unsigned p;

	tp->fn = fn;
	tp->arg = arg;
	tp->n_tasks = n_tasks;
	atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
	atomic_store_explicit(&tp->pending, atomic_load(&tp->active) - 1,
	    memory_order_relaxed);
	atomic_fetch_add(&tp->gen, 1);
	if (atomic_load(&tp->sleepers) > 0)
		tp_futex_wake(&tp->gen);
	tp_work(tp, 0);
	/* pending only falls: spin while it is not 0, then sleep */
	while ((p = atomic_load_explicit(&tp->pending,
	    memory_order_acquire)) != 0) {
		if (tp_spin(&tp->pending, p, &tp->budget))
			continue;
		atomic_store(&tp->waiting, 1);
		while ((p = atomic_load(&tp->pending)) != 0)
			tp_futex_wait(&tp->pending, p);
		atomic_store(&tp->waiting, 0);
	}
}

/* Wait (rarely: only when the count changes) until want workers park. */
static void
tp_wait_parked(struct threadpool *tp, int want)
{
	const struct timespec ts = { 0, 20000 };

	while (atomic_load(&tp->parked) != want)
		nanosleep(&ts, NULL);
}

int
tp_set_active(struct threadpool *tp, int n)
{
	int old = tp_active(tp);

	if (n < 1 || n > tp->n)
		return -EINVAL;
	if (n == old)
		return 0;
	atomic_store(&tp->active, (unsigned)n);
	if (n < old) {
		/* The workers left out see this job's gen and park. */
		tp_job(tp, NULL, NULL, 0);
		tp_wait_parked(tp, tp->n - n);
	} else {
		tp_futex_wake(&tp->active);
		tp_wait_parked(tp, tp->n - n);
	}
	return 0;
}

void
tp_run(struct threadpool *tp, tp_fn *fn, void *arg, int n_tasks)
{
	int i;

	if (n_tasks <= 0)
		return;
	if (tp->n_workers == 0 || n_tasks == 1 || tp_active(tp) == 1) {
		for (i = 0; i < n_tasks; i++)
			fn(arg, i, 0);
		return;
	}
	tp_job(tp, fn, arg, n_tasks);
}

/* Read one small non-negative integer from a sysfs file; -1 on failure. */
static long
tp_read_long(const char *path)
{
	FILE *fp;
	long v = -1;

	if ((fp = fopen(path, "r")) == NULL)
		return -1;
	if (fscanf(fp, "%ld", &v) != 1)
		v = -1;
	fclose(fp);
	return v;
}

int
tp_physical_cores(void)
{
	cpu_set_t set;
	long seen[CPU_SETSIZE][2];
	char path[128];
	long core, pkg;
	int cpu, n = 0, logical, i;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 1;
	logical = CPU_COUNT(&set);
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &set))
			continue;
		snprintf(path, sizeof(path),
		    "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
		core = tp_read_long(path);
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/"
		    "topology/physical_package_id", cpu);
		pkg = tp_read_long(path);
		if (core < 0 || pkg < 0)
			return logical > 0 ? logical : 1;
		for (i = 0; i < n; i++)
			if (seen[i][0] == core && seen[i][1] == pkg)
				break;
		if (i == n) {
			seen[n][0] = core;
			seen[n][1] = pkg;
			n++;
		}
	}
	return n > 0 ? n : 1;
}
