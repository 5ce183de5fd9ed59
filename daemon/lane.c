/*
 * lane.c - the prefill lane (see lane.h).
 *
 * The job's fields (state, n, from, progress, rc, toks, pf_*) change
 * under mu; the thread reads them after taking the job and owns the
 * backend from then until it sets DONE or IDLE, so the worker touches the
 * backend only outside a job: lane_resume() fills the cache in IDLE,
 * before the job starts, and lane_import() reads it in DONE.  In
 * RELEASING the thread owns the backend again, to give its pages back.
 * cancel and busy are read by the thread between chunks without the lock;
 * n_done is its progress.
 */
#include "lane.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvcache.h"
#include "log.h"

/*
 * The lane thread's nice value.  While the lane and the steps keep every
 * core busy, the threads that deliver tokens (the io loop, the clients)
 * then take their time from the lane rather than from the steps.
 */
#define LANE_NICE 5

struct lane {
	struct backend *be;
	int threads, all;	/* while the worker runs, and alone */
	int chunk;		/* rows per step */
	int n_ctx;
	void (*wake)(void *arg);
	void *wake_arg;

	pthread_t th;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;		/* lane_free() */
	bool pending;		/* a job waits for the thread */
	bool release;		/* RELEASING: the thread has to release */
	int state;		/* enum lane_state */
	int n;			/* positions of the job */
	int from;		/* positions it started with (lane_resume) */
	bool progress;		/* wake the worker after each chunk */
	int rc;
	int seq;		/* the job's KV sequence, -1 when none */
	int32_t *toks;		/* (n_ctx) the job's tokens */
	struct backend *pf_be;	/* lane_prefault(): whose blocks, */
	int32_t *pf_blocks;	/* which (malloc'd, the lane's), */
	int pf_n;		/* how many */

	atomic_bool cancel;
	atomic_bool busy;
	atomic_int n_done;
};

/* Prefill the job in chunks; 0, -ECANCELED, or a failed step's -errno. */
static int
lane_run(struct lane *l)
{
	struct kv_cache *kv = be_kv(l->be);
	struct batch_seq bs;
	struct step_batch b;
	struct cp_err e = { 0 };
	const float *lg;
	int pos, n, rc, want, have = l->all;

	if (l->seq < 0 && (l->seq = kv_seq_new(kv)) < 0)
		return l->seq;
	for (pos = l->from; pos < l->n; pos += n) {
		if (atomic_load(&l->cancel))
			return -ECANCELED;
		want = atomic_load(&l->busy) ? l->threads : l->all;
		if (want != have && be_set_threads(l->be, want, &e) == 0)
			have = want;
		n = l->n - pos < l->chunk ? l->n - pos : l->chunk;
		if ((rc = kv_seq_append(kv, l->seq, n)) < 0)
			return rc;
		bs.seq = l->seq;
		bs.pos = pos;
		bs.n_tokens = n;
		bs.logits = false;
		b.tokens = l->toks + pos;
		b.n_tokens = n;
		b.seqs = &bs;
		b.n_seqs = 1;
		if ((rc = be_step(l->be, &b, &lg, NULL, &e)) < 0) {
			log_warnx("lane: prefill step at %d failed: %s", pos,
			    e.msg);
			return rc;
		}
		atomic_store(&l->n_done, pos + n);
		if (l->progress && pos + n < l->n)
			l->wake(l->wake_arg);
	}
	return 0;
}

static void
lane_end_seq(struct lane *l)
{
	if (l->seq >= 0)
		(void)kv_seq_free(be_kv(l->be), l->seq);
	l->seq = -1;
}

/* End the job's sequence and give the cache's pages back, on this thread. */
static void
lane_drop_seq(struct lane *l)
{
	lane_end_seq(l);
	(void)be_kv_release(l->be);
}

/*
 * DONE, with mu held: end the job's sequence and have the thread give the
 * cache's pages back (RELEASING), off the worker's thread.
 */
static void
lane_retire(struct lane *l)
{
	lane_end_seq(l);
	l->state = LANE_RELEASING;
	l->release = true;
	pthread_cond_signal(&l->cv);
}

/*
 * After the prefill, with mu held: map the blocks lane_prefault() named,
 * if the job is still wanted, without the lock (the worker touches pf_*
 * only in lane_prefault(), under mu).
 */
static void
lane_take_prefault(struct lane *l, int rc)
{
	int32_t *blocks = l->pf_blocks;
	int n = l->pf_n;

	l->pf_blocks = NULL;
	l->pf_n = 0;
	pthread_mutex_unlock(&l->mu);
	if (rc == 0 && n > 0 && !atomic_load(&l->cancel))
		(void)be_kv_prefault(l->pf_be, blocks, n);
	free(blocks);
	pthread_mutex_lock(&l->mu);
}

static void *
lane_main(void *arg)
{
	struct lane *l = arg;
	int rc;

	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), LANE_NICE);
	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (!l->stop && !l->pending && !l->release)
			pthread_cond_wait(&l->cv, &l->mu);
		if (l->stop)
			break;
		if (l->release) {
			/* RELEASING: the worker leaves the backend alone. */
			l->release = false;
			pthread_mutex_unlock(&l->mu);
			(void)be_kv_release(l->be);
			pthread_mutex_lock(&l->mu);
			l->state = LANE_IDLE;
			continue;
		}
		l->pending = false;
		pthread_mutex_unlock(&l->mu);
		rc = lane_run(l);
		pthread_mutex_lock(&l->mu);
		lane_take_prefault(l, rc);
		if (atomic_load(&l->cancel) || rc == -ECANCELED) {
			lane_drop_seq(l);
			l->state = LANE_IDLE;
			continue;
		}
		l->rc = rc;
		l->state = LANE_DONE;
		pthread_mutex_unlock(&l->mu);
		l->wake(l->wake_arg);
		pthread_mutex_lock(&l->mu);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

int
lane_new(const struct lane_params *p, struct lane **out, struct cp_err *e)
{
	struct be_params bp = *p->be;
	struct lane *l;
	int rc;

	*out = NULL;
	if (p->threads < 1 || p->threads >= p->be->n_threads)
		return cp_err_set(e, -EINVAL, "lane: %d threads, not in 1..%d",
		    p->threads, p->be->n_threads - 1);
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return cp_err_set(e, -ENOMEM, "lane: out of memory");
	l->threads = p->threads;
	l->all = p->be->n_threads;
	l->n_ctx = p->be->n_ctx;
	l->chunk = p->chunk > 0 ? p->chunk : LANE_CHUNK;
	l->wake = p->wake;
	l->wake_arg = p->wake_arg;
	l->seq = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	atomic_init(&l->cancel, false);
	atomic_init(&l->busy, false);
	atomic_init(&l->n_done, 0);
	/* One sequence of the whole context, in the worker's block layout. */
	bp.max_batch_tokens = l->chunk;
	bp.max_seqs = 1;
	bp.kv_tokens = bp.n_ctx;
	bp.kv_mib = 0;
	if ((rc = be_open("cpu", p->model, &bp, &l->be, e)) < 0)
		goto err;
	if ((l->toks = malloc((size_t)l->n_ctx * sizeof(*l->toks))) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "lane: out of memory");
		goto err;
	}
	if ((rc = pthread_create(&l->th, NULL, lane_main, l)) != 0) {
		rc = cp_err_set(e, -rc, "lane: cannot start its thread");
		goto err;
	}
	l->started = true;
	*out = l;
	return 0;
err:
	lane_free(l);
	return rc;
}

void
lane_free(struct lane *l)
{
	if (l == NULL)
		return;
	if (l->started) {
		atomic_store(&l->cancel, true);
		pthread_mutex_lock(&l->mu);
		l->stop = true;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->th, NULL);
	}
	if (l->be != NULL)
		lane_drop_seq(l);
	be_close(l->be);
	free(l->pf_blocks);
	free(l->toks);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* Start the job of positions [from, n) of toks; l->seq holds [0, from). */
static int
lane_job(struct lane *l, const int32_t *toks, int n,
    bool progress, int from)
{
	int rc = 0;

	pthread_mutex_lock(&l->mu);
	if (l->state != LANE_IDLE) {
		rc = -EBUSY;
	} else {
		memcpy(l->toks, toks, (size_t)n * sizeof(*toks));
		l->n = n;
		l->from = from;
		l->progress = progress;
		l->rc = 0;
		l->state = LANE_RUNNING;
		l->pending = true;
		atomic_store(&l->cancel, false);
		atomic_store(&l->n_done, from);
		pthread_cond_signal(&l->cv);
	}
	pthread_mutex_unlock(&l->mu);
	return rc;
}

int
lane_start(struct lane *l, const int32_t *toks, int n,
    bool progress)
{
	if (n < 1 || n > l->n_ctx)
		return -EINVAL;
	return lane_job(l, toks, n, progress, 0);
}

int
lane_resume(struct lane *l, const int32_t *toks, int n,
    bool progress, struct backend *src, int src_seq, int from,
    struct cp_err *e)
{
	struct kv_cache *kv = be_kv(l->be);
	int rc, state;

	if (n < 1 || n > l->n_ctx || from < 1 || from >= n)
		return cp_err_set(e, -EINVAL, "lane: resume at %d of %d", from,
		    n);
	pthread_mutex_lock(&l->mu);
	state = l->state;
	pthread_mutex_unlock(&l->mu);
	if (state != LANE_IDLE)
		return cp_err_set(e, -EBUSY, "lane: busy");
	/* IDLE: the thread waits for a job and leaves the backend alone. */
	if ((l->seq = kv_seq_new(kv)) < 0) {
		rc = l->seq;
		l->seq = -1;
		return cp_err_set(e, rc, "lane: no sequence");
	}
	if ((rc = kv_seq_append(kv, l->seq, from)) < 0) {
		lane_drop_seq(l);
		return cp_err_set(e, rc, "lane: %d positions do not fit",
		    from);
	}
	if ((rc = be_kv_import(l->be, l->seq, src, src_seq, from, e)) < 0 ||
	    (rc = lane_job(l, toks, n, progress, from)) < 0) {
		lane_drop_seq(l);
		return rc;
	}
	return 0;
}

void
lane_status(struct lane *l, struct lane_status *st)
{
	pthread_mutex_lock(&l->mu);
	st->state = l->state;
	st->rc = l->rc;
	pthread_mutex_unlock(&l->mu);
	st->n_done = atomic_load(&l->n_done);
	st->chunk = l->chunk;
}

int
lane_import(struct lane *l, struct backend *dst, int dst_seq,
    struct cp_err *e)
{
	int rc;

	pthread_mutex_lock(&l->mu);
	if (l->state != LANE_DONE || l->rc < 0) {
		pthread_mutex_unlock(&l->mu);
		return cp_err_set(e, -EINVAL, "lane: no prefill to import");
	}
	pthread_mutex_unlock(&l->mu);
	/* DONE: the thread waits for a job and leaves the backend alone. */
	if ((rc = be_kv_import(dst, dst_seq, l->be, l->seq, l->n, e)) < 0)
		return rc;
	pthread_mutex_lock(&l->mu);
	lane_retire(l);
	pthread_mutex_unlock(&l->mu);
	return 0;
}

void
lane_prefault(struct lane *l, struct backend *dst, int32_t *blocks, int n)
{
	pthread_mutex_lock(&l->mu);
	if (l->state == LANE_RUNNING) {
		free(l->pf_blocks);
		l->pf_be = dst;
		l->pf_blocks = blocks;
		l->pf_n = n;
		blocks = NULL;
	}
	pthread_mutex_unlock(&l->mu);
	free(blocks);
}

void
lane_cancel(struct lane *l)
{
	pthread_mutex_lock(&l->mu);
	if (l->state == LANE_RUNNING) {
		atomic_store(&l->cancel, true);
	} else if (l->state == LANE_DONE) {
		lane_retire(l);
	}
	pthread_mutex_unlock(&l->mu);
}

void
lane_set_busy(struct lane *l, bool busy)
{
	atomic_store(&l->busy, busy);
}
