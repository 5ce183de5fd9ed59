#include "threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define TP_SPIN 4096	/* polls of the job word before sleeping */

struct tp_worker {
	struct threadpool *tp;
	pthread_t th;
	int index;		/* 1..n-1; the caller of tp_run() is 0 */
};

/*
 * A job is published by storing fn/arg/n_tasks, resetting next and active,
 * then bumping gen under mu (release).  A worker that sees a new gen claims
 * tasks from next until they run out and decrements active; the last one
 * signals done.  tp_run() returns only when active is 0, so no worker
 * still touches a job once the next one is published.
 */
struct threadpool {
	int n;				/* threads, caller included */
	int n_workers;			/* started workers */
	struct tp_worker *workers;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_cond_t done;
	atomic_uint gen;
	atomic_int next;
	atomic_int active;
	tp_fn *fn;
	void *arg;
	int n_tasks;
	bool stop;			/* under mu */
};

static void
tp_work(struct threadpool *tp, int thread)
{
	int t;

	while ((t = atomic_fetch_add_explicit(&tp->next, 1,
	    memory_order_relaxed)) < tp->n_tasks)
		tp->fn(tp->arg, t, thread);
}

static void *
tp_main(void *p)
{
	struct tp_worker *w = p;
	struct threadpool *tp = w->tp;
	unsigned seen = 0, g;
	int i;

	for (;;) {
		g = seen;
		for (i = 0; i < TP_SPIN; i++)
			if ((g = atomic_load_explicit(&tp->gen,
			    memory_order_acquire)) != seen)
				break;
		if (g == seen) {
			pthread_mutex_lock(&tp->mu);
			while ((g = atomic_load_explicit(&tp->gen,
			    memory_order_acquire)) == seen && !tp->stop)
				pthread_cond_wait(&tp->wake, &tp->mu);
			if (tp->stop) {
				pthread_mutex_unlock(&tp->mu);
				return NULL;
			}
			pthread_mutex_unlock(&tp->mu);
		}
		seen = g;
		tp_work(tp, w->index);
		if (atomic_fetch_sub_explicit(&tp->active, 1,
		    memory_order_acq_rel) == 1) {
			pthread_mutex_lock(&tp->mu);
			pthread_cond_signal(&tp->done);
			pthread_mutex_unlock(&tp->mu);
		}
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
	if ((tp = calloc(1, sizeof(*tp))) == NULL)
		return -ENOMEM;
	tp->n = n_threads;
	if ((tp->workers = calloc((size_t)n_threads,
	    sizeof(*tp->workers))) == NULL) {
		free(tp);
		return -ENOMEM;
	}
	pthread_mutex_init(&tp->mu, NULL);
	pthread_cond_init(&tp->wake, NULL);
	pthread_cond_init(&tp->done, NULL);
	atomic_init(&tp->gen, 0);
	atomic_init(&tp->next, 0);
	atomic_init(&tp->active, 0);
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
	pthread_mutex_lock(&tp->mu);
	tp->stop = true;
	pthread_cond_broadcast(&tp->wake);
	pthread_mutex_unlock(&tp->mu);
	for (i = 0; i < tp->n_workers; i++)
		pthread_join(tp->workers[i].th, NULL);
	pthread_cond_destroy(&tp->done);
	pthread_cond_destroy(&tp->wake);
	pthread_mutex_destroy(&tp->mu);
	free(tp->workers);
	free(tp);
}

int
tp_threads(const struct threadpool *tp)
{
	return tp->n;
}

void
tp_run(struct threadpool *tp, tp_fn *fn, void *arg, int n_tasks)
{
	int i;

	if (n_tasks <= 0)
		return;
	if (tp->n_workers == 0 || n_tasks == 1) {
		for (i = 0; i < n_tasks; i++)
			fn(arg, i, 0);
		return;
	}
	tp->fn = fn;
	tp->arg = arg;
	tp->n_tasks = n_tasks;
	atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
	atomic_store_explicit(&tp->active, tp->n_workers,
	    memory_order_relaxed);
	pthread_mutex_lock(&tp->mu);
	atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
	pthread_cond_broadcast(&tp->wake);
	pthread_mutex_unlock(&tp->mu);
	tp_work(tp, 0);
	for (i = 0; i < TP_SPIN; i++)
		if (atomic_load_explicit(&tp->active,
		    memory_order_acquire) == 0)
			return;
	pthread_mutex_lock(&tp->mu);
	while (atomic_load_explicit(&tp->active, memory_order_acquire) != 0)
		pthread_cond_wait(&tp->done, &tp->mu);
	pthread_mutex_unlock(&tp->mu);
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
