/*
 * lane.h - the prefill lane: a long prompt's K/V computed by a second
 * forward pass, on a thread of its own, while the worker's steps go on.
 *
 * On the CPU a step shares all cores among its rows, so a long prompt's
 * chunks lengthen every step of the streams decoding beside it.  The lane
 * gives the prompt cores of its own instead: a second CPU backend on the
 * same model (the weights are shared through the file mapping; the lane
 * has its own scratch and a KV cache for one sequence) prefills the prompt
 * in chunks, on `threads` threads while the worker's steps run on the
 * rest, and on all of them while the worker has nothing to run.  When the
 * prefill ends, the worker copies the K/V into its own cache
 * (lane_import()) and the request goes on in its steps from there.  A
 * prompt the steps started can move to the lane too (lane_resume()).
 *
 * The worker thread calls every function here; the lane's thread only
 * runs the prefill.  A job: lane_start() (IDLE -> RUNNING), the thread
 * prefills and sets DONE (and calls wake), lane_import() or lane_cancel()
 * (DONE -> RELEASING; the thread gives its cache's pages back, a few ms
 * that the worker need not wait for, and goes IDLE).  lane_cancel() on a
 * RUNNING job makes the thread stop at its next chunk and go IDLE by
 * itself.
 */
#ifndef CP_LANE_H
#define CP_LANE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "model.h"

#define LANE_CHUNK 128		/* prompt rows per lane step, by default */

enum lane_state {
	LANE_IDLE = 0,		/* takes a job */
	LANE_RUNNING,		/* prefilling (or stopping after a cancel) */
	LANE_DONE,		/* the K/V waits for lane_import() */
	LANE_RELEASING,		/* imported or cancelled: the thread gives
				   the cache's pages back, then IDLE */
};

struct lane_params {
	const struct model *model;	/* borrowed, outlives the lane */
	const struct be_params *be;	/* the worker's backend's effective
					   parameters: threads, n_ctx, KV
					   storage type and block size */
	int threads;			/* the lane's threads while the
					   worker's steps run (1..be->
					   n_threads - 1) */
	int chunk;			/* prompt rows per lane step
					   (0: LANE_CHUNK) */
	void (*wake)(void *arg);	/* called when a job is DONE, and
					   after each chunk of a job that
					   reports progress */
	void *wake_arg;
};

struct lane_status {
	int state;		/* enum lane_state */
	int n_done;		/* positions computed so far */
	int rc;			/* DONE: 0, or the failed step's -errno */
	int chunk;		/* prompt rows per step (lane_params.chunk,
				   or LANE_CHUNK) */
};

struct lane;

/*
 * Open the lane's CPU backend and start its thread.  0 and *out (free
 * with lane_free()), or a negative errno with e set.
 */
int lane_new(const struct lane_params *p, struct lane **out,
    struct cp_err *e);

/* Stop the thread (after its current chunk) and release everything. */
void lane_free(struct lane *l);

/*
 * Prefill positions [0, n) of toks (copied); with progress, wake
 * the worker after every chunk.  0; -EBUSY unless IDLE; -EINVAL for n
 * outside 1..n_ctx.
 */
int lane_start(struct lane *l, const int32_t *toks, int n,
    bool progress);

/*
 * Like lane_start(), for a prompt whose positions [0, from) src_seq of src
 * holds already (a prefill that started in the worker's steps): they are
 * copied into the lane's cache first, and the lane goes on from there.
 * 0, or -EBUSY, -EINVAL, or be_kv_import()'s error, with e set.
 */
int lane_resume(struct lane *l, const int32_t *toks, int n,
    bool progress, struct backend *src, int src_seq, int from,
    struct cp_err *e);

/* The job's state and progress. */
void lane_status(struct lane *l, struct lane_status *st);

/*
 * Copy the DONE job's K/V (its n positions) into dst_seq of dst, which
 * has reserved them, and go RELEASING (then IDLE by itself).  0, -EINVAL when not DONE, or
 * be_kv_import()'s error (the lane stays DONE).
 */
int lane_import(struct lane *l, struct backend *dst, int dst_seq,
    struct cp_err *e);

/*
 * Have the lane's thread map the n blocks of dst's cache in blocks
 * (be_kv_prefault()) once the RUNNING job's prefill ends and before it is
 * DONE: the blocks lane_import() will most likely write, so that the
 * worker's copy does not stop for page faults.  blocks is malloc'd and
 * becomes the lane's.  Ignored when no job is RUNNING; a later call
 * replaces an earlier one.
 */
void lane_prefault(struct lane *l, struct backend *dst, int32_t *blocks,
    int n);

/* Drop the job, RUNNING or DONE; nothing happens when IDLE. */
void lane_cancel(struct lane *l);

/*
 * Tell the lane whether the worker's steps are running: the lane then
 * keeps to its threads, else it uses all of them (from its next chunk).
 */
void lane_set_busy(struct lane *l, bool busy);

#endif
