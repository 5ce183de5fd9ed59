/*
 * threadpool.h - a persistent pool of worker threads for the CPU backend.
 *
 * tp_run() hands out task indices 0..n_tasks-1 to the workers and to the
 * calling thread, which works too, and returns when every task is done.
 * Which thread runs which task is not fixed, so a task's result must not
 * depend on it: the kernels split work by output rows and keep every
 * reduction inside one task.  Workers spin briefly between jobs, then
 * sleep on a condition variable.
 */
#ifndef CP_THREADPOOL_H
#define CP_THREADPOOL_H

#define TP_MAX_THREADS 256

struct threadpool;

/* fn(arg, task, thread): thread is the runner's index, 0..tp_threads()-1. */
typedef void tp_fn(void *arg, int task, int thread);

/*
 * Start a pool of n_threads threads in all, the caller of tp_run()
 * included (n_threads - 1 workers; 1 means no workers).  Returns 0 and
 * *out (free with tp_free()), -EINVAL for n_threads outside
 * 1..TP_MAX_THREADS, or a negative errno from thread creation.
 */
int tp_new(int n_threads, struct threadpool **out);

/* Stop and join the workers, release the pool; accepts NULL. */
void tp_free(struct threadpool *tp);

/* Threads in the pool, the caller included. */
int tp_threads(const struct threadpool *tp);

/*
 * Threads that take part in jobs from now on: the caller and workers
 * 1..n-1; the other workers sleep until the count rises again.  Call it
 * between tp_run() calls, from the thread that makes them; it returns when
 * the change is in effect (a wake-up or an empty job, tens of
 * microseconds).  0, or -EINVAL for n outside 1..tp_threads().
 */
int tp_set_active(struct threadpool *tp, int n);

/* Threads that take part in jobs (tp_threads() until tp_set_active()). */
int tp_active(const struct threadpool *tp);

/*
 * Run fn for every task in 0..n_tasks-1 and return when all have run.
 * Not reentrant: one tp_run() at a time per pool, never from inside fn.
 */
void tp_run(struct threadpool *tp, tp_fn *fn, void *arg, int n_tasks);

/*
 * Physical CPU cores available to this process (distinct core ids among
 * the CPUs in its affinity mask), at least 1.
 */
int tp_physical_cores(void);

#endif
