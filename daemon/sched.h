/*
 * sched.h - the step scheduler: which tokens of which requests the engine
 * computes in the next batch.
 *
 * Pure bookkeeping, no I/O and no engine calls.  The caller (the daemon's
 * step loop) adds requests, asks for a plan with sched_step(), applies the
 * plan to the engine (first freeing the KV of every released request, then
 * running the scheduled token ranges as one batch), then reports the
 * outcome with sched_commit().  The scheduler counts KV blocks itself, with
 * the same block size and pool size as the engine's cache, so the engine's
 * kv_seq_append() for a planned range never runs out of blocks.
 *
 * A request's sequence is its prompt followed by the tokens generated so
 * far; positions are indices into that sequence.  The caller keeps the
 * token values; the scheduler keeps only counts.
 *
 * A request may be queued held, while the caller computes the KV of its
 * prompt's first positions elsewhere (the prefill lane); sched_unhold()
 * then says how many positions that KV covers, and the plan that admits
 * the request starts there.
 *
 * sched.c's opening comment lists the request states, the transitions and
 * the numbered invariants.  Not thread-safe: one thread drives it.
 */
#ifndef CP_SCHED_H
#define CP_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define SCHED_MAX_REQUESTS	65536	/* request table entries, at most */
#define SCHED_MAX_CLIENTS	65536	/* client ids are 0..max_clients-1 */
#define SCHED_MAX_BATCH		(1 << 20)	/* max_batch_tokens, at most */
#define SCHED_MAX_CTX		(1 << 24)	/* n_ctx, at most */
#define SCHED_MAX_KV_TOKENS	(1 << 30)	/* blocks * kv_block_tokens */
#define SCHED_MAX_BLOCK_TOKENS	1024
#define SCHED_NO_WATERMARK	(-1)	/* kv_watermark_blocks: keep none */

/*
 * Limits.  A field left 0 takes its default (in brackets); kv_total_blocks
 * and n_ctx have none and must be set.  max_prefill_chunk and max_seqs
 * may not exceed max_batch_tokens (so every running request can decode
 * in every step); kv_watermark_blocks must be below kv_total_blocks.
 */
struct sched_config {
	int max_batch_tokens;	/* tokens per step [512] */
	int max_prefill_chunk;	/* per request and step [max_batch_tokens] */
	int max_seqs;		/* requests holding KV at once [64] */
	int max_requests;	/* live requests, waiting or running [1024] */
	int max_clients;	/* client ids 0..max_clients-1 [256] */
	int kv_block_tokens;	/* token slots per KV block [16] */
	int kv_total_blocks;	/* blocks in the KV pool */
	int kv_watermark_blocks; /* left free by admission [1%, at least 1];
				    SCHED_NO_WATERMARK for none */
	int n_ctx;		/* most positions one sequence may hold */
	int attention_cost_tokens; /* > 0: a prompt token at position p
				    counts as 1 + p / this against
				    max_batch_tokens [0: as 1] */
	/*
	 * Optional, asked when a request whose leading positions the caller
	 * does not hold (n_cached 0) is admitted: how many leading positions
	 * of its n_seq the caller supplies itself from now on (the prefix
	 * cache), 0 <= n < n_seq; its first chunk then starts there, as
	 * after sched_unhold().  req is the handle, req_id the caller's id.
	 * A value out of range counts as 0.
	 */
	int (*admit_cached)(void *arg, int req, uint64_t req_id, int n_seq);
	void *admit_arg;
	/*
	 * Optional, a latency target's say in each step (the worker's pacer,
	 * pacer.h), all three or none: pace_begin() once the step's decodes
	 * are planned, with their count and the sum of their positions;
	 * pace_rows() before a prompt chunk, with its first position and the
	 * rows the budget allows it, returns the rows it may take (more
	 * than asked counts as all of them); pace_take() for each prompt
	 * chunk planned.  The step's first prompt chunk takes at least one
	 * row whatever pace_rows() says; after it, a chunk given 0 rows ends
	 * the step's prompt work.
	 */
	void (*pace_begin)(void *arg, int n_decode, int64_t pos_sum);
	int (*pace_rows)(void *arg, int pos, int n);
	void (*pace_take)(void *arg, int pos, int n);
	void *pace_arg;
};

enum sched_state {
	SCHED_WAITING = 1,	/* queued, holds no KV */
	SCHED_PREFILLING,	/* holds KV, some positions not computed */
	SCHED_DECODING,		/* holds KV, one token per step */
};

/* How a request ended, or SCHED_RUN while it goes on. */
enum sched_finish {
	SCHED_RUN = 0,
	SCHED_FIN_EOS,		/* caller: end-of-sequence token sampled */
	SCHED_FIN_STOP,		/* caller: a stop string matched */
	SCHED_FIN_LENGTH,	/* sched_commit: max_tokens generated */
	SCHED_FIN_ERROR,	/* caller: the step failed for this request */
};

/* Why a plan releases a request's KV. */
enum sched_release_why {
	SCHED_REL_PREEMPT = 1,	/* back to waiting; it is re-prefilled later */
	SCHED_REL_CANCEL,	/* cancelled; its handle is dead */
};

struct sched_request {
	int client;		/* 0..max_clients-1 */
	uint64_t req_id;	/* the client's id, carried for the caller */
	int n_prompt;		/* prompt tokens, >= 1 */
	int max_tokens;		/* tokens to generate at most, >= 1 */
	bool held;		/* not admitted until sched_unhold() */
};

/* One scheduled token range: positions [pos, pos + n) of the request. */
struct sched_item {
	int req;		/* request handle */
	int client;
	uint64_t req_id;
	int pos;		/* first position; its KV holds [0, pos):
				   on admission pos is 0, or the n_cached
				   of sched_unhold(), whose KV the caller
				   puts in the engine's cache first */
	int n;			/* tokens, >= 1 */
	bool logits;		/* row pos + n - 1 is sampled */
	int finish;		/* enum sched_finish: the caller sets EOS,
				   STOP or ERROR before sched_commit(),
				   which may set LENGTH */
};

struct sched_release {
	int req;		/* request handle */
	int client;
	uint64_t req_id;
	int why;		/* enum sched_release_why */
	int n_gen;		/* tokens generated, kept on preemption */
};

/*
 * One step.  The arrays belong to the scheduler and stay valid until the
 * next sched_step() or sched_free().  Apply rel[] before items[].
 */
struct sched_plan {
	uint64_t step;			/* 1, 2, ... */
	struct sched_release *rel;	/* KV to free: preempted, cancelled */
	int n_rel;
	struct sched_item *items;	/* decodes first, then prefill chunks */
	int n_items;
	int n_decode;			/* items[0..n_decode) are decodes */
	int n_tokens;			/* sum of items[].n, <= budget */
};

struct sched_req_info {
	int state;		/* enum sched_state */
	int client;
	uint64_t req_id;
	uint64_t arrival;	/* order of sched_add() calls, from 1 */
	int n_prompt;
	int max_tokens;
	int n_gen;		/* tokens generated so far */
	int n_computed;		/* positions with computed KV, 0 waiting */
	int n_cached;		/* sched_unhold()'s n_cached until admitted,
				   else 0 */
	int n_blocks;		/* KV blocks held */
	int n_preempt;		/* times preempted */
	bool held;		/* queued held, sched_unhold() not called */
	bool paused;
	bool cancelled;		/* cancel asked, effective at the next step */
};

struct sched_stats {
	int n_live;		/* requests waiting or running */
	int n_waiting;
	int n_running;
	int kv_free;		/* free blocks */
	int kv_total;
	uint64_t steps;
	uint64_t admitted;	/* admissions, readmissions included */
	uint64_t preempted;
	uint64_t cancelled;
	uint64_t finished;
	uint64_t tokens;	/* tokens scheduled */
};

struct sched;

/*
 * Build a scheduler for cfg (copied, defaults filled in).  Returns 0 and
 * *out (free with sched_free()), -EINVAL with e naming the bad field and
 * its range, or -ENOMEM.  All memory the scheduler uses is allocated here.
 */
int sched_new(const struct sched_config *cfg, struct sched **out,
    struct cp_err *e);

/* Release the scheduler and its plan; live requests vanish.  Accepts NULL. */
void sched_free(struct sched *s);

/* The configuration in use, defaults filled in; valid for s's lifetime. */
const struct sched_config *sched_config(const struct sched *s);

/* What a step may take, the part of sched_config that may change live. */
struct sched_budgets {
	int max_batch_tokens;	/* >= max_seqs */
	int max_prefill_chunk;	/* 0: max_batch_tokens */
	int attention_cost_tokens;	/* 0: a prompt token counts as 1 */
};

/*
 * From the next sched_step(), plan under budgets b (sched_config's
 * fields of the same names, with the same ranges; max_seqs stays, and
 * must not exceed b's max_batch_tokens).  Returns 0, -EINVAL with e
 * naming the field and its range (s unchanged), or -EBUSY between
 * sched_step() and sched_commit().
 */
int sched_set_budgets(struct sched *s, const struct sched_budgets *b,
    struct cp_err *e);

/*
 * Queue a request; the order of calls is the arrival order.  Returns its
 * handle (>= 0), or -EINVAL (bad client, empty prompt, max_tokens < 1),
 * -E2BIG (n_prompt + max_tokens past n_ctx, or more KV than the whole
 * pool: a caller that wants max_tokens as a cap lowers it first) or -ENOSPC (max_requests live), with e saying why.  The handle is
 * valid until the request finishes (sched_commit) or is released as
 * cancelled (sched_step); a dead handle is refused with -ENOENT.  A request
 * added with r->held waits, never admitted, until sched_unhold(); it does
 * not keep its client's later requests waiting.
 */
int sched_add(struct sched *s, const struct sched_request *r,
    struct cp_err *e);

/*
 * Ask that req stop.  It is released (listed in the next plan's rel[] as
 * SCHED_REL_CANCEL) at the next sched_step(), also mid-prefill.  Returns 0
 * (also when already asked) or -ENOENT.
 */
int sched_cancel(struct sched *s, int req);

/*
 * Clear req's hold: from the next step it may be admitted (once resumed,
 * if also paused).  The caller holds computed KV for the first n_cached
 * positions of its sequence, 0 <= n_cached < n_prompt (a held request has
 * generated nothing, so its sequence is its prompt); the item that admits
 * it starts at pos n_cached and reserves the blocks for [0, pos + n), and
 * the caller puts that KV in the engine's cache before running the
 * batch.  n_cached 0 asks for an ordinary prefill from position 0.
 * Should the request be cancelled before its admission, the caller drops
 * that KV on the release; once admitted it is treated as any running
 * request: a preemption drops its KV and its next prefill starts at 0.
 * Returns 0, -ENOENT, or -EINVAL (req not held, or n_cached out of range:
 * nothing changes).
 */
int sched_unhold(struct sched *s, int req, int n_cached);

/*
 * Take back a prefilling request that has generated nothing, between
 * steps (no plan open), to compute the rest of its prompt elsewhere: it
 * becomes WAITING and held, its blocks return to the pool at once (the
 * caller frees the engine's KV after copying what it needs; no release
 * is listed), and sched_unhold() later says how many positions the caller
 * holds.  Returns 0, -ENOENT, or -EINVAL (not prefilling, a token
 * generated, already held, or a plan open).
 */
int sched_hold(struct sched *s, int req);

/*
 * Pause (on) or resume (off) req from the next step: a paused request is
 * not scheduled or admitted but keeps its KV.  Pausing and holding are
 * independent: a request is admitted only when neither.  Returns 0 or
 * -ENOENT.
 */
int sched_pause(struct sched *s, int req, bool on);

/*
 * Plan the next step into *plan (arrays owned by s).  Returns 0, or
 * -EBUSY when the previous plan was not committed.  A plan may be empty.
 */
int sched_step(struct sched *s, struct sched_plan *plan);

/*
 * Report that plan (the last sched_step()'s) ran: every item's tokens are
 * computed, every logits row produced one sampled token.  Before the call
 * the caller may set items[i].finish to SCHED_FIN_EOS or SCHED_FIN_STOP on
 * a logits row, or SCHED_FIN_ERROR on any row (its tokens are then not
 * counted); on return an item whose finish is nonzero ended its request
 * (the handle is dead, the caller frees the engine's KV for it).  Returns
 * 0, or -EINVAL (not the open plan, or a bad finish value: nothing
 * changes).
 */
int sched_commit(struct sched *s, struct sched_plan *plan);

/* Fill *out for req; 0 or -ENOENT. */
int sched_req_info(const struct sched *s, int req, struct sched_req_info *out);

/* Fill *out with counters and current occupancy. */
void sched_stats(const struct sched *s, struct sched_stats *out);

/* Verify the invariants of sched.c; 0 or -EFAULT with e saying which broke. */
int sched_check(const struct sched *s, struct cp_err *e);

#endif
