/*
 * engine_port.h - the hand-off between cpd's io loop and its engine thread.
 *
 * The io loop (server.c) owns sockets, shared memory and wake-ups and never
 * waits on compute; the engine thread owns the model, the tokenizer, the
 * sampler and the scheduler and never touches a client.  They meet here,
 * through two queues, each a mutex-protected buffer plus an eventfd:
 *
 *	commands   io loop -> engine	ep_push()  ...  ep_take_cmds()
 *	events     engine -> io loop	ep_post()  ...  ep_take_events()
 *
 * ep_cmd_fd() becomes readable when commands wait, ep_event_fd() when
 * events (or a step boundary) wait; the taker clears it.  Both functions of
 * a queue may run on any thread, but each side is meant to be one thread.
 *
 * A request is named by a 64-bit id the io loop picks; the engine treats it
 * as opaque and echoes it in every event.  `client` is a small stable
 * number per connected client (below EP_MAX_CLIENTS) for the scheduler's
 * round-robin across clients.
 *
 * What the engine promises (the io loop relies on each):
 *  1. Every SUBMIT ends in exactly one terminal event, DONE or ERROR, also
 *     when cancelled (DONE with CP_FINISH_CANCELLED); nothing follows it.
 *  2. CANCEL, PAUSE and RESUME for an id that is unknown or already ended
 *     are ignored.  A CANCEL takes effect at the next step, mid-prefill too.
 *     One that names a SUBMIT whose text is still being tokenized waits
 *     for it (prep.h), and a client's SUBMITs are applied in the order
 *     they came.
 *  3. A PAUSEd request is not scheduled (its KV state is kept) until RESUME
 *     or CANCEL (which ends it as usual, with its DONE): the io loop pauses
 *     a client whose completion ring is full, and cancels it if it stays
 *     full past the stall deadline.
 *  4. ep_post() runs after every step, even one without events: the io
 *     loop drains client rings at step boundaries.  It waits while
 *     EP_MAX_LAG step boundaries are still untaken by the io loop, so the
 *     engine never runs far ahead of the rings (a PAUSE takes effect
 *     within a bounded number of events); a pushed SHUTDOWN ends the wait.
 *  5. The engine validates what only it can: token ids below n_vocab, and
 *     a prompt that fits the context (an ERROR otherwise); max_tokens is a
 *     cap, lowered to the room the context leaves after the prompt, but
 *     with EP_SUBMIT_STRICT a prompt plus max_tokens past the context is
 *     an ERROR.
 *     Everything else (sizes, flags, ranges of parameters, stop strings)
 *     the session has validated before the command is made.
 *  6. Event text is raw bytes; the concatenation of a request's event
 *     texts is its output.  A detokenizer may hold bytes back (a partial
 *     UTF-8 sequence, a possible stop string) and release them later.
 *  7. SHUTDOWN: the engine drops every request without events and returns
 *     from its thread; the caller joins it.
 *  7a. BUDGETS applies between two steps, never within one: the steps
 *     planned after it are under its budgets, every request keeps
 *     running (none is dropped or restarted).
 *  8. PROGRESS events go only to a request submitted with
 *     EP_SUBMIT_PROGRESS, one after each step that computed some of its
 *     prompt, carrying that step, n_prompt (prompt tokens computed so
 *     far, > 0) and n_total (the prompt's tokens, >= n_prompt).  PROGRESS
 *     is not terminal; it comes only before the request's first TOKEN
 *     (the step that completes the prompt posts n_total, then the TOKEN)
 *     and never after its DONE or ERROR.  A preemption by recompute
 *     before the first TOKEN starts the count again: the next PROGRESS
 *     reports the positions recomputed so far, which may be fewer than
 *     reported before.
 */
#ifndef CP_ENGINE_PORT_H
#define CP_ENGINE_PORT_H

#include <stddef.h>
#include <stdint.h>

#include "cp_proto.h"
#include "stats.h"

#define EP_MAX_CLIENTS	65536
#define EP_MAX_LAG	64	/* steps the engine may post ahead of the io loop */

/* Command kinds. */
#define EP_CMD_SUBMIT	1	/* new request: prompt, params, stops */
#define EP_CMD_CANCEL	2	/* id */
#define EP_CMD_PAUSE	3	/* id: its client's completion ring is full */
#define EP_CMD_RESUME	4	/* id: room again */
#define EP_CMD_SHUTDOWN	5	/* stop the engine thread */
#define EP_CMD_BUDGETS	6	/* budgets: the scheduler's, from the next
				   step (a reload) */

/* Submit flags. */
#define EP_SUBMIT_TOKENS	0x1u	/* prompt is tokens[], not text */
#define EP_SUBMIT_SEED		0x2u	/* params.seed is the client's */
#define EP_SUBMIT_LOGPROB	0x4u	/* fill ep_event.logprob */
#define EP_SUBMIT_PROGRESS	0x8u	/* PROGRESS events (promise 8) */
#define EP_SUBMIT_CHAT		0x20u	/* text[] is a chat block (cp_proto.h),
					   rendered with the model's template */
#define EP_SUBMIT_STRICT	0x10u	/* refuse prompt + max_tokens past the
					   context (promise 5) */

/* Sampling parameters, already range-checked (cp_proto.h, cp_wire_params). */
struct ep_params {
	uint32_t max_tokens;	/* a cap; 0 = until the context is full */
	float temperature;	/* 0 = greedy */
	float top_p;		/* 1 = off */
	float min_p;		/* 0 = off */
	float repeat_penalty;	/* 1 = off */
	int32_t top_k;		/* 0 = off */
	uint32_t repeat_last_n;
	uint64_t seed;		/* meaningful with EP_SUBMIT_SEED */
	uint32_t top_n;		/* [0, CP_TOPN_MAX]: top-n list per token */
	uint32_t grammar;	/* CP_GRAM_* constraining the output, 0 none */
};

/* A step's budgets (cpd.yaml's keys of the same names), range-checked. */
struct ep_budgets {
	int32_t max_batch_tokens;	/* lowered to what the engine's
					   buffers hold */
	int32_t max_prefill_chunk;	/* 0 or above max_batch_tokens: it */
	int32_t attention_cost_tokens;	/* 0: off */
	int32_t max_inter_token_ms;	/* the latency target: > 0 ms, -1
					   derived, 0 none */
};

struct ep_cmd {
	struct ep_cmd *next;	/* queue link: the port's until taken */
	uint32_t kind;		/* EP_CMD_* */
	uint32_t client;	/* < EP_MAX_CLIENTS */
	uint64_t id;		/* request id (not for SHUTDOWN, BUDGETS) */
	struct ep_budgets budgets;	/* BUDGETS only */
	/* SUBMIT only; the pointers point into data[] */
	uint64_t t_recv_ns;	/* stats_now_ns() when the io loop took it
				   from the ring; 0 = unknown (the engine's
				   arrival time stands in) */
	uint32_t flags;		/* EP_SUBMIT_* */
	uint32_t uid;		/* the client's user (the prefix cache's
				   scope) */
	int32_t pid;		/* the client's process, for the log */
	struct ep_params params;
	const char *text;	/* prompt bytes (not NUL-terminated) */
	size_t text_len;
	const int32_t *tokens;	/* with EP_SUBMIT_TOKENS */
	size_t n_tokens;
	uint32_t n_stop;	/* <= CP_STOP_MAX */
	const char *stop[CP_STOP_MAX];	/* NUL-terminated, non-empty */
	const char *gram;	/* params.grammar GBNF or SCHEMA: its text
				   (not NUL-terminated), else NULL */
	size_t gram_len;
	_Alignas(8) unsigned char data[];
};

/* Event types. */
#define EP_EV_TOKEN	1	/* token (may be -1: text only) and its text */
#define EP_EV_DONE	2	/* finished: finish, counts, trailing text */
#define EP_EV_ERROR	3	/* failed: error, counts, text = message */
#define EP_EV_PROGRESS	4	/* prefill: n_prompt of n_total (promise 8) */

struct ep_event {
	uint64_t id;
	uint32_t type;		/* EP_EV_* */
	uint32_t finish;	/* CP_FINISH_* for DONE, else 0 */
	int32_t token;		/* TOKEN: sampled id or -1; else -1 */
	float logprob;		/* with EP_SUBMIT_LOGPROB, else 0 */
	int32_t error;		/* ERROR: negative errno or CP_E* code */
	uint32_t n_prompt;	/* DONE/ERROR: prompt tokens; PROGRESS:
				   prompt tokens computed so far */
	uint32_t n_gen;		/* DONE/ERROR: generated tokens */
	uint32_t n_total;	/* PROGRESS: the prompt's tokens; else 0 */
	uint32_t n_cached;	/* DONE: of n_prompt, the tokens the prefix
				   cache gave; else 0 */
	uint32_t text_off;	/* text is batch->text + text_off ... */
	uint32_t text_len;	/* ... for text_len bytes, */
	uint32_t n_top;		/* then TOKEN: n_top struct cp_top (top-n
				   list, <= CP_TOPN_MAX, unaligned) */
	uint64_t step;		/* the step that sampled the token, computed
				   the prompt tokens (PROGRESS) or ended
				   the request (ep_stats.steps after it), 0
				   when none did */
};

/* A growable list of events and their text bytes. */
struct ep_batch {
	struct ep_event *ev;
	size_t n, cap;
	char *text;
	size_t text_len, text_cap;
	uint64_t steps;		/* step boundaries folded into this batch */
};

/*
 * Counters the engine publishes for cp_stats() (stats.h).  Steps are
 * numbered from 1; steps counts those run so far, and every event a step
 * produces carries its number.  The per-step histograms count the steps
 * that ran a batch (a step may only release KV).
 */
struct ep_stats {
	uint64_t steps;
	uint64_t tokens_prompt;		/* prompt positions computed */
	uint64_t tokens_prompt_cached;	/* ... taken from the prefix cache */
	uint64_t kv_blocks_cached;	/* idle blocks the prefix cache keeps */
	uint64_t prefix_evictions;	/* blocks taken back from it */
	uint64_t tokens_generated;
	uint64_t kv_blocks_used;
	uint64_t kv_blocks_total;
	uint64_t requests_waiting;	/* queued, holding no KV */
	uint64_t requests_running;	/* holding KV */
	uint64_t requests_paused;	/* PAUSEd (some of the two above) */
	uint64_t preemptions;
	uint64_t pace_target_us;	/* the latency target; 0: none */
	uint64_t pace_est_us;		/* the last step's predicted time */
	uint64_t pace_meas_us;		/* and its measured time */
	uint64_t pace_err_us;		/* mean |predicted - measured| */
	uint64_t pace_steps;		/* steps measured with decode rows */
	uint64_t pace_missed;		/* of those, over the target */
	uint64_t pace_missed_us;	/* by this much in all */
	struct stats_hist step_prefill;	/* STATS_COUNT: prompt tokens */
	struct stats_hist step_decode;	/* STATS_COUNT: decode tokens */
	struct stats_hist step_seqs;	/* STATS_COUNT: sequences */
	struct stats_hist ttft_us;	/* STATS_LAT_US: t_recv_ns to the
					   first TOKEN event */
	struct stats_hist itl_us;	/* STATS_LAT_US: between TOKEN events
					   of one request */
};

struct engine_port;

/* A new port with both queues empty; NULL on failure (errno set). */
struct engine_port *ep_new(void);

/* Frees p and what is queued (NULL accepted); both sides must be done. */
void ep_free(struct engine_port *p);

/* A zeroed command with data_bytes of data[]; NULL when out of memory. */
struct ep_cmd *ep_cmd_new(uint32_t kind, size_t data_bytes);

/* Frees one command (NULL accepted); the engine frees what it takes. */
void ep_cmd_free(struct ep_cmd *c);

/* Frees a whole list linked by next (NULL accepted). */
void ep_cmd_free_list(struct ep_cmd *c);

/* io loop: queue c (ownership passes to the port) and signal the engine; 0 or -errno. */
int ep_push(struct engine_port *p, struct ep_cmd *c);

/* io loop: queue CANCEL, PAUSE, RESUME or SHUTDOWN; 0 or -ENOMEM. */
int ep_push_simple(struct engine_port *p, uint32_t kind, uint32_t client,
    uint64_t id);

/* Readable while commands wait (engine side). */
int ep_cmd_fd(const struct engine_port *p);

/* engine: every queued command in order (caller owns the list), or NULL. */
struct ep_cmd *ep_take_cmds(struct engine_port *p);

/* engine: wait up to timeout_ms (-1: no limit) for commands; 1, 0, -errno. */
int ep_wait_cmds(struct engine_port *p, int timeout_ms);

/*
 * Makes the engine's ep_wait_cmds() return, without a command: for the
 * engine's own helper threads (prep.h) when they have work ready for it.
 */
void ep_wake_engine(struct engine_port *p);

/* Adds one event; text (len bytes, copied) may be NULL when len is 0; 0 or -ENOMEM. */
int ep_batch_add(struct ep_batch *b, const struct ep_event *ev,
    const void *text, size_t len);

/* ep_batch_add() of a TOKEN with its top-n list top[0..n_top) after the
 * text (copied; n_top <= CP_TOPN_MAX); 0, -EINVAL or -ENOMEM. */
int ep_batch_add_top(struct ep_batch *b, const struct ep_event *ev,
    const void *text, size_t len, const struct cp_top *top, uint32_t n_top);

/* Empties b, keeping its memory. */
void ep_batch_clear(struct ep_batch *b);

/* Frees b's memory; b may be reused after ep_batch_clear-like zeroing. */
void ep_batch_fini(struct ep_batch *b);

/*
 * engine: move b's events to the io loop (b is left empty), count a step
 * boundary when step is nonzero, and signal; then wait while EP_MAX_LAG
 * boundaries are untaken (rule 4).  0 or -ENOMEM (b unchanged).
 */
int ep_post(struct engine_port *p, struct ep_batch *b, int step);

/* Readable while events or step boundaries wait (io loop side). */
int ep_event_fd(const struct engine_port *p);

/* io loop: swap the pending events into out (emptied first); how many. */
size_t ep_take_events(struct engine_port *p, struct ep_batch *out);

/* engine: publish counters (copied). */
void ep_stats_set(struct engine_port *p, const struct ep_stats *s);

/* io loop: latest published counters. */
void ep_stats_get(struct engine_port *p, struct ep_stats *s);

#endif
