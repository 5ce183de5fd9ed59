/*
 * sampler.h - choose the next token from a row of logits.
 *
 * One struct sampler per generating sequence.  It owns the sampling
 * parameters, a seeded random stream, the recent-token history for the
 * repetition penalty and all the scratch memory a draw needs, so that
 * sampler_sample() never allocates.
 *
 * The chain, in order (the order llama.cpp uses by default):
 *   1. repetition penalty: each distinct token among the last repeat_last_n
 *      accepted tokens has its logit divided by repeat_penalty when positive,
 *      multiplied by it otherwise (once per token, however often it recurs);
 *   2. log-probabilities for reporting (see below);
 *   3. ignore_eos: the end-of-generation ids (sampler_set_eog) get -inf;
 *      with a grammar (sampler_set_grammar), every token its matcher does
 *      not allow next gets -inf too (an end-of-generation id is allowed
 *      only where the grammar accepts); a sampler without one pays one
 *      pointer test;
 *   4. temp <= 0: greedy, the largest logit wins, ties to the lowest id;
 *      steps 5-8 are skipped and no random number is drawn;
 *   5. top-k: keep the k largest logits (ties to the lower id);
 *   6. top-p: over the softmax of what top-k kept, sorted descending, keep
 *      the shortest prefix whose cumulative probability is >= top_p (at
 *      least one token);
 *   7. min-p: keep tokens whose probability is >= min_p times that of the
 *      most likely token still drawable;
 *   8. temperature: probabilities softmax(logit / temp) over the survivors,
 *      and one draw from them with the seeded generator.
 *
 * Reported log-probabilities (sampler_out.logprob and .top) are the
 * log-softmax of the logits after the repetition penalty and before
 * anything else: the model's distribution as the penalty left it, not the
 * truncated, tempered one the draw used.  Masked end-of-generation ids and
 * tokens a grammar refuses keep their model log-probability there.
 *
 * Non-finite logits: -inf is a legitimate "impossible" token and is never
 * chosen.  A NaN or +inf logit anywhere in the row means the forward pass
 * is broken: sampler_sample() then returns -EDOM and samples nothing.  A
 * penalty that overflows a finite logit saturates at +-FLT_MAX.
 *
 * Cost: a few passes over the vocabulary, one fewer without logprob and
 * n_logprobs (about 0.7-1.3 ms for 150k entries on one core), plus a sort
 * of the top-p nucleus when top-p runs without top-k.  Memory: about 12
 * bytes per vocabulary entry per sampler.
 *
 * Reproducibility: the generator is xoshiro256** seeded through splitmix64
 * from params.seed; one 53-bit uniform is drawn per non-greedy token, so a
 * seed, the same logits and the same parameters give the same ids on any
 * machine.
 */
#ifndef CP_SAMPLER_H
#define CP_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define SAMPLER_MAX_LOGPROBS	20		/* most top-n entries per token */
#define SAMPLER_MAX_LAST_N	(1 << 20)	/* longest repetition window */
#define SAMPLER_MAX_VOCAB	(1 << 24)	/* largest n_vocab accepted */
#define SAMPLER_SEED_RANDOM	UINT64_MAX	/* seed: draw one from the OS */

struct sampler_params {
	float temp;		/* >= 0, finite; 0 = greedy (default 0.8) */
	int top_k;		/* >= 0; 0 = off (default 40) */
	float top_p;		/* [0, 1]; 1 = off (default 0.95) */
	float min_p;		/* [0, 1]; 0 = off (default 0.05) */
	float repeat_penalty;	/* > 0, finite; 1 = off (default 1) */
	int repeat_last_n;	/* [0, SAMPLER_MAX_LAST_N]; 0 = off (default 64) */
	uint64_t seed;		/* any; SAMPLER_SEED_RANDOM = from getrandom(2) */
	int n_logprobs;		/* [0, SAMPLER_MAX_LOGPROBS] top-n entries */
	bool logprob;		/* fill sampler_out.logprob (default true);
				   false with n_logprobs 0 skips the
				   log-softmax pass: 0 is reported */
	int max_tokens;		/* -1 = no limit, else >= 0 sampled tokens */
	bool ignore_eos;	/* mask the end-of-generation ids */
};

/* One (token, log-probability) pair. */
struct sampler_logprob {
	int32_t id;
	float logprob;
};

enum sampler_finish {
	SAMPLER_CONTINUE = 0,	/* keep generating */
	SAMPLER_FINISH_EOG,	/* the chosen id is an end-of-generation id */
	SAMPLER_FINISH_LENGTH,	/* this token is the max_tokens-th */
};

struct sampler_out {
	int32_t id;		/* chosen token, -1 when nothing was sampled */
	float logprob;		/* its log-probability (see the top comment) */
	int n_top;		/* entries in top: min(n_logprobs, finite logits) */
	struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];
				/* descending logprob, ties to the lower id */
	enum sampler_finish finish;	/* EOG wins over LENGTH */
};

struct sampler;

/* The defaults (llama.cpp's: temp 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * no repetition penalty over a window of 64, random seed, no logprobs, no
 * length limit, eos honoured). */
struct sampler_params sampler_params_default(void);

/* 0 when every field of p is in range, else -EINVAL with e naming the first
 * bad field and its allowed range. */
int sampler_params_check(const struct sampler_params *p, struct cp_err *e);

/* A new sampler for rows of n_vocab logits (1..SAMPLER_MAX_VOCAB), with p
 * copied; NULL on bad parameters (-EINVAL) or no memory (-ENOMEM), with e
 * set.  Free with sampler_free. */
struct sampler *sampler_new(const struct sampler_params *p, int n_vocab,
    struct cp_err *e);

/* Free s and everything it owns; NULL is accepted. */
void sampler_free(struct sampler *s);

/*
 * Draw scratch (about 12 bytes per vocabulary entry) that samplers used
 * one at a time can share: a server with many requests queued keeps one,
 * not one per request.  sampler_ws_new() returns NULL when out of memory
 * or n_vocab is out of range; sampler_ws_free() accepts NULL.
 */
struct sampler_ws;
struct sampler_ws *sampler_ws_new(int n_vocab);
void sampler_ws_free(struct sampler_ws *ws);

/*
 * sampler_new() drawing in ws (for a vocabulary of at most ws's): ws must
 * outlive the sampler, samplers sharing it must not sample concurrently,
 * and sampler_candidates() tells the last draw made in ws.  The draws are
 * those of a sampler of its own.
 */
struct sampler *sampler_new_ws(const struct sampler_params *p, int n_vocab,
    struct sampler_ws *ws, struct cp_err *e);

/* The parameters s runs with (seed replaced by the seed actually used);
 * borrowed, valid until sampler_free. */
const struct sampler_params *sampler_get_params(const struct sampler *s);

/* The seed actually used (differs from params.seed only for
 * SAMPLER_SEED_RANDOM), so that a run can be reproduced. */
uint64_t sampler_seed(const struct sampler *s);

/*
 * The end-of-generation ids of the samplers on ws that do not set their
 * own: ids[0..n) (copied; n may be 0); 0, or -EINVAL (unchanged) when an
 * id is outside [0, n_vocab) or n < 0, -ENOMEM.  Set once, before the
 * samplers draw: they read the set, they keep no copy.
 */
int sampler_ws_set_eog(struct sampler_ws *ws, const int32_t *ids, int n);

/* Replace s's end-of-generation ids by ids[0..n) (copied; n may be 0),
 * instead of its workspace's (none until set); 0, or -EINVAL (s
 * unchanged) when an id is outside [0, n_vocab) or n < 0, -ENOMEM.
 * Allocates n_vocab bits: call at set-up, not per token. */
int sampler_set_eog(struct sampler *s, const int32_t *ids, int n);

/* True when id is one of the end-of-generation ids. */
bool sampler_is_eog(const struct sampler *s, int32_t id);

struct gmatch;

/*
 * Constrain s's draws with the grammar matcher m (grammar.h), taken: s
 * frees it (sampler_free) and resets it (sampler_reset); NULL removes and
 * frees the one set.  m's vocabulary must have n_vocab tokens.  From then
 * on sampler_sample() draws only tokens m allows and sampler_accept()
 * advances m.  Other samplers sharing s's workspace are not affected.
 * 0, or -EINVAL when the vocabularies differ (m not taken).
 */
int sampler_set_grammar(struct sampler *s, struct gmatch *m);

/* s's grammar matcher, or NULL; borrowed, valid until sampler_free or
 * sampler_set_grammar. */
struct gmatch *sampler_grammar(const struct sampler *s);

/* Record one token of the sequence (sampled or prompt) for the repetition
 * penalty and, with a grammar, advance its matcher over the token; 0, or
 * -EINVAL when id is outside [0, n_vocab) or the grammar does not allow it
 * (then nothing is recorded), or the matcher's -E2BIG or -ENOMEM. */
int sampler_accept(struct sampler *s, int32_t id);

/* Record the prompt ids[0..n) (only the last repeat_last_n matter); does not
 * count towards max_tokens.  0, or -EINVAL (nothing recorded) when an id is
 * out of range or n < 0. */
int sampler_accept_prompt(struct sampler *s, const int32_t *ids, int n);

/* Choose the next token from logits[0..n_vocab) (borrowed, not modified)
 * into out.  Does not record the token: call sampler_accept() for each
 * token kept.  0; -EDOM when a logit is NaN or +inf or no token is left
 * with a finite logit (with a grammar: none it allows); -ERANGE when
 * max_tokens tokens were already sampled; the grammar matcher's -E2BIG or
 * -ENOMEM.
 * On error out->id is -1, n_top 0, and nothing changes but the candidate
 * list, which is then empty. */
int sampler_sample(struct sampler *s, const float *logits,
    struct sampler_out *out);

/* Tokens sampled since creation or the last reset. */
int sampler_n_sampled(const struct sampler *s);

/* Forget the history and the sampled count and restart the random stream
 * from the seed. */
void sampler_reset(struct sampler *s);

/* The candidates the last sampler_sample() drew from and their final
 * probabilities (summing to 1): copies the first min(n, cap) into ids and
 * probs (either may be NULL when cap is 0) and returns n, the number of
 * candidates; 0 before a sample and after a failed one.  Greedy gives one
 * candidate with probability 1.  The order is descending probability (ties
 * to the lower id) when top-k or top-p ranked them, ascending id otherwise. */
int sampler_candidates(const struct sampler *s, int32_t *ids, float *probs,
    int cap);

#endif
