/*
 * worker.h - cpd's engine thread: turns the requests of an engine_port
 * into tokens.
 *
 * The worker joins the scheduler (sched.h), a backend (backend.h) for the
 * model, the tokenizer, one sampler, one streaming detokenizer and one
 * stop-string matcher per request.  It keeps every promise of
 * engine_port.h (numbered 1-8 there); worker.c's opening comment says how.
 *
 * Ownership: the caller loads the model and its tokenizer (it needs them
 * for the model information it hands to clients) and keeps both alive
 * until worker_free(); the worker opens, owns and closes the backend, and
 * all per-request state.  The port is borrowed too.
 *
 * Use: worker_new() -> worker_start() (or run worker_run() on a thread of
 * your own) -> ... -> push EP_CMD_SHUTDOWN -> worker_join() -> worker_free().
 */
#ifndef CP_WORKER_H
#define CP_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "chat.h"
#include "engine_port.h"
#include "error.h"
#include "model.h"
#include "tokenizer.h"

struct worker_params {
	const struct model *model;	/* borrowed, outlives the worker */
	const struct tokenizer *tok;	/* borrowed; the model's vocabulary */
	const char *backend;		/* be_open() name; NULL = "auto" */
	struct be_params be;		/* threads, max_batch_tokens, max_seqs,
					   n_ctx, KV pool (0 = defaults, as
					   backend.h says) */
	int max_prefill_chunk;		/* prompt tokens per request and step
					   (0 or above max_batch_tokens: the
					   budget) */
	int attention_cost_tokens;	/* sched_config's (0: off) */
	int max_inter_token_ms;		/* the latency target (pacer.h):
					   > 0 ms, -1 derived, 0 none (and
					   the prefill lane may run) */
	int prefill_lane_tokens;	/* prompts this long (and longer)
					   prefill in the lane (lane.h) when
					   it is free; 0: no lane.  CPU
					   backend with 2+ threads only */
	int prefill_lane_chunk;		/* its rows per step (0: LANE_CHUNK) */
	int max_requests;		/* live requests, queued or running
					   (0: 1024) */
	int max_clients;		/* distinct round-robin turns (0: 256);
					   client numbers at or above it share
					   turns (client % max_clients) */
	int kv_watermark_blocks;	/* sched_config's (0: its default) */
	bool no_warmup;			/* skip warm_up() (worker.c) */
	enum chat_kind chat;		/* the format chat SUBMITs are rendered
					   in; CHAT_UNKNOWN: refused */
	const char *model_name;		/* for messages; borrowed */
	int prefix_cache;		/* PREFIX_UID (0, the default),
					   PREFIX_GLOBAL or PREFIX_OFF
					   (worker_prefix.c) */
	size_t grammar_bytes;		/* the live requests' grammar
					   matchers together (0: 256 MiB) */
};

/* Scopes of the prefix cache (worker_params.prefix_cache). */
#define PREFIX_UID	0	/* shared between clients of one uid */
#define PREFIX_GLOBAL	1	/* shared between all clients */
#define PREFIX_OFF	2	/* every prompt computed */

/*
 * Counters and occupancy the port's ep_stats (ep_stats_get()) does not
 * hold, for tests and logs; see worker_stats().  Steps, prompt and
 * generated tokens, preemptions and KV blocks are counted there only:
 * steps that ran a batch, released KV or reported the prefill lane's
 * progress; prompt positions computed, recomputes too; tokens sent in
 * TOKEN events.
 */
struct worker_stats {
	uint64_t step_errors;	/* steps whose batch the backend failed */
	uint64_t submitted;	/* SUBMITs accepted into the scheduler */
	uint64_t rejected;	/* SUBMITs answered with ERROR at once */
	uint64_t cancelled;	/* requests ended by CANCEL */
	uint64_t lane_prompts;	/* prompts handed to the prefill lane */
	uint64_t grammar_trims;	/* matchers made to give their caches back
				   (worker_params.grammar_bytes) */
	uint64_t prefix_partial;	/* admissions that began with a copy of
				   part of a cached block */
	int requests_live;	/* requests queued or running */
	int kv_seqs_live;	/* KV sequences alive in the backend */
	int kv_block_tokens;
	int n_ctx;		/* positions per sequence */
	int max_batch_tokens;
	int max_seqs;
};

struct worker;

/*
 * Open the backend for p->model and build the scheduler and every buffer
 * the steps need (nothing on the step path allocates once the event
 * buffers have grown).  Returns 0 and *out (free with worker_free()), or
 * a negative errno with e set: -EINVAL (bad params, tokenizer and model
 * disagree), be_open()'s and sched_new()'s errors, -ENOMEM.  The port is
 * borrowed and must outlive the worker.
 */
int worker_new(const struct worker_params *p, struct engine_port *port,
    struct worker **out, struct cp_err *e);

/*
 * The engine thread's body: serve the port's commands until SHUTDOWN.
 * Returns 0 after a SHUTDOWN (every request dropped without events, all
 * KV freed).  Call once per worker, from one thread.
 */
int worker_run(struct worker *w);

/* Run worker_run() on a new thread; 0 or a negative errno. */
int worker_start(struct worker *w);

/* Waits for worker_start()'s thread (after SHUTDOWN); worker_run()'s result. */
int worker_join(struct worker *w);

/*
 * Latest counters, published after every step with the port's
 * (ep_stats_set()); callable from any thread.
 */
void worker_stats(struct worker *w, struct worker_stats *out);

/*
 * The worker's backend (borrowed, lives until worker_free()).  Its name and
 * be_params() may be read at any time; its cache and steps belong to the
 * worker's thread while that runs.
 */
struct backend *worker_backend(struct worker *w);

/*
 * Release everything the worker owns (not the model, tokenizer or port);
 * NULL accepted.  Its thread, if started, must have been joined.
 */
void worker_free(struct worker *w);

#endif
