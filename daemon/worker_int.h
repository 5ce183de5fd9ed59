/*
 * worker_int.h - the engine thread's state, shared by worker.c and
 * worker_lane.c (the prefill lane's side of the worker).  Not an API:
 * worker.h is.
 */
#ifndef CP_WORKER_INT_H
#define CP_WORKER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "engine_port.h"
#include "pacer.h"
#include "sched.h"
#include "tokenizer.h"
#include "worker.h"

/* Bytes the live requests' grammar matchers hold together, at most, by
 * default (grammar_bound() in worker.c). */
#define WK_GRAMMAR_BYTES	((size_t)256 << 20)

/* One live request; a free slot has handle -1. */
struct wreq {
	uint64_t id;		/* the port's request id */
	int handle;		/* sched handle; -1 when the slot is free */
	int seq;		/* KV sequence, -1 while holding none */
	int n_prompt;
	int cap;		/* toks[] entries: n_prompt + max_tokens */
	int n_gen;		/* generated tokens, toks[n_prompt..] */
	bool to_context;	/* the context's room capped max_tokens (or
				   it was 0): reaching it is CONTEXT */
	bool logprob;		/* EP_SUBMIT_LOGPROB */
	bool progress;		/* EP_SUBMIT_PROGRESS */
	int32_t *toks;		/* (cap) prompt, then generated ids */
	struct sampler *smp;	/* with the grammar's matcher, if any */
	struct grammar *gram;	/* the grammar it matches, or NULL */
	struct stopstr *ss;	/* NULL without stop strings */
	struct detok dt;
	uint64_t t_recv_ns;	/* the io loop took its SUBMIT (stats.h) */
	uint64_t t_last_ns;	/* its last TOKEN event; 0 before the first */
	bool paused;		/* PAUSEd (sched_pause), counted in n_paused */
	bool lane_ready;	/* the lane (lane_slot) has computed its
				   prompt: its first item imports it */
	int lane_shown;		/* prompt positions PROGRESS reported */
	int lane_from;		/* positions computed before the lane */
	bool lane_pf;		/* its import's blocks were prefaulted */
	uint32_t uid;		/* its client's user: the cache's scope */
	int32_t pid;		/* its client's process, for the log */
	uint64_t t_first_ns;	/* its first TOKEN event; 0 before */
	int n_cached;		/* prompt tokens its last admission took
				   from the prefix cache */
};

struct worker {
	struct engine_port *port;	/* borrowed */
	const struct model *model;	/* borrowed */
	const struct tokenizer *tok;	/* borrowed */
	struct backend *be;
	struct kv_cache *kv;		/* be_kv(be) */
	struct sched *sched;
	struct sampler_ws *smp_ws;	/* the draw scratch every request's
					   sampler shares (one thread) */
	bool slots_ready;		/* req[], free_slot[], id_* set up */
	int *id_head;			/* [id_mask + 1] live slots by id hash */
	int *id_next;			/* [max_requests] chain, -1 ends */
	uint32_t id_mask;
	int n_vocab;
	int n_ctx;			/* positions per sequence */
	int pool_tokens;		/* KV pool, token slots */
	int max_batch;			/* rows per step */
	int max_seqs;			/* entries per step */
	int max_requests;
	int max_clients;

	struct wreq *req;		/* (max_requests) by slot */
	int *free_slot;			/* (max_requests) stack of free slots */
	int n_free;

	int32_t *enc;			/* (n_ctx) prompt scratch */
	struct prep *prep;		/* text prompts' tokenizer thread */
	struct lane *lane;		/* long prompts' prefill, or NULL */
	int lane_min;			/* prompt tokens to use it */
	int lane_slot;			/* request whose prompt the lane has
					   (held in sched), or -1 */
	int move_slot;			/* request whose prompt the last step
					   chunked with lane_min positions
					   left, or -1: it may move to the
					   lane */
	int threads_all;		/* the backend's threads */
	int threads_lane;		/* the lane's, while steps run */
	int threads_now;		/* the steps' (be_set_threads) */

	int32_t *btok;			/* (max_batch) rows of the step */
	struct batch_seq *bseq;		/* (max_seqs) entries of the step */
	int *bitem;			/* (max_seqs) plan item of each entry */
	char *dbuf;			/* (dcap) detokenizer output */
	size_t dcap;
	char *sbuf;			/* (scap) stop matcher output */
	size_t scap;

	struct ep_batch out;		/* events of the turn being built */
	uint64_t cur_step;		/* number of the step running, else 0 */
	uint64_t t_step_ns;		/* when its batch came back */
	struct ep_stats es;		/* the port's counters and histograms,
					   counted here (ep_stats_set()) */
	int n_paused;			/* live requests with paused set */
	int n_gram;			/* live requests with a grammar */
	size_t gram_bytes;		/* their matchers' bound */
	bool dirty;			/* publish(): commands changed it */
	struct worker_stats st;		/* the worker's other counters */
	int prefix;			/* PREFIX_* of worker_params */
	int32_t *pfx_blocks;		/* (pfx_cap) kv_prefix_match() out */
	int pfx_cap;
	void *pfx_copy;			/* (kv_block_bytes()) a block on its
					   way (worker_prefix.c) */
	struct pacer pacer[2];		/* the latency target (pacer.h): the
					   model of steps on every thread,
					   and of steps beside the lane */
	uint64_t t_pace_log_ns;		/* its last line in the log */
	pthread_mutex_t pub_lock;
	struct worker_stats pub;	/* published copy, pub_lock */
	pthread_t th;
	bool started;
};

/* PROGRESS of r: its prompt computed up to position done (promise 8). */
void wk_emit_progress(struct worker *w, const struct wreq *r, int done);

/* The ERROR event of live request r (its slot is freed after commit). */
void wk_fail(struct worker *w, const struct wreq *r, int err,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- worker_prefix.c --------------------------------------------------- */

/* sched's admit_cached(): shares the cached blocks of the request. */
int wk_prefix_admit(void *arg, int req, uint64_t req_id, int n_seq);

/*
 * Positions of r's first n tokens the cache would give now, their blocks
 * in w->pfx_blocks (nothing shared yet).
 */
int wk_prefix_peek(struct worker *w, const struct wreq *r, int n);

/*
 * Hands r's prompt to the lane from the end of its cached blocks; the
 * positions given, or 0 (none cached, or the lane refused: nothing done).
 */
int wk_prefix_lane(struct worker *w, struct wreq *r);

/* Publishes r's full written blocks (after a step that ran it). */
void wk_prefix_publish(struct worker *w, const struct wreq *r);

/* Ends r's KV sequence, its blocks left to the cache (its partial last
 * one as a donor, kv_seq_retire()); r->seq becomes -1. */
void wk_prefix_retire(struct worker *w, struct wreq *r);

/* ---- worker_pace.c ----------------------------------------------------- */

/* The pacers for p's target, and their hooks in sc. */
void wk_pace_setup(struct worker *w, const struct worker_params *p,
    struct sched_config *sc);

/* Both pacers' target becomes max_inter_token_ms (a reload). */
void wk_pace_retarget(struct worker *w, int max_inter_token_ms);

/* Whether the target lets a long prompt go to the prefill lane. */
bool wk_pace_lane_ok(struct worker *w);

/* plan's n_ent entries ran from t0 to w->t_step_ns: into the model. */
void wk_pace_step(struct worker *w, const struct sched_plan *plan, int n_ent,
    uint64_t t0);

/* ---- worker_lane.c ----------------------------------------------------- */

/* Opens the lane when p asks for one and the backend can share its cores. */
int wk_lane_setup(struct worker *w, const struct worker_params *p,
    struct cp_err *e);

/* The request of n prompt tokens being added goes to the lane. */
bool wk_lane_wants(struct worker *w, int n);

/* Hands r's prompt (r was added held) to the lane, or unholds r. */
void wk_lane_give(struct worker *w, struct wreq *r, int slot);

/* Once a turn, before planning; true when it sent PROGRESS. */
bool wk_lane_poll(struct worker *w);

/* r's first item at pos after the lane: its K/V into r's sequence. */
int wk_lane_take(struct worker *w, struct wreq *r, int pos);

/* After planning: the plan's item k may make its request move_slot. */
void wk_lane_note(struct worker *w, const struct sched_plan *plan, int k);

#endif
