/*
 * check_worker.c - the engine thread end to end: a real worker on a real
 * engine_port, running the aidreams260K fixture on the engine's backend.
 *
 * Golden values come from the fixtures' REFERENCE.md (llama.cpp's greedy
 * ids and its server's "content" text for "Once upon a time"), from the
 * rules of engine_port.h, sched.h and DESIGN.md (counts derived by hand),
 * or from comparing our runs with each other: a request batched, chunked,
 * preempted or paused must give exactly the ids it gives alone.
 *
 * Every test also checks the port's promises as it drains events: one
 * terminal event per request and nothing after it, no event for an id
 * that was never submitted, step boundaries equal to the worker's steps,
 * step numbers in events that never decrease, never run ahead of the
 * boundaries posted with them, and rise by one token per request and step,
 * and all KV sequences and blocks back in the pool at the end.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "engine_port.h"
#include "kvcache.h"
#include "lib/clock.h"
#include "lib/fixtures.h"
#include "lib/suite.h"
#include "model.h"
#include "tokenizer.h"
#include "worker.h"


/* ---- REFERENCE.md, aidreams260K.gguf, greedy, 64 tokens ---------------- */

static const char ref_prompt[] = "Once upon a time";

static const int32_t ref_prompt_ids[] = {
	1, 429, 491, 433, 295, 429, 444, 445, 265, 262, 263, 342, 430,
};

static const int32_t ref_ids[64] = {
	446, 280, 432, 458, 375, 431, 422, 314, 280, 323, 290, 431, 448, 429,
	465, 438, 340, 431, 338, 353, 341, 431, 327, 446, 262, 429, 453, 435,
	285, 361, 437, 431, 440, 437, 445, 430, 275, 280, 302, 450, 405, 403,
	399, 306, 339, 290, 264, 309, 361, 441, 267, 395, 448, 429, 465, 438,
	340, 431, 338, 353, 341, 325, 266, 386,
};

static const char ref_content[] = ", pixels unfolding like petals. "
    "Classifications unfold, a kaleidoscope of probability revealing hidden "
    "patterns. Classification whispers sec";

/*
 * The control tests leave events untaken so that the worker stops in
 * ep_post() EP_MAX_LAG steps ahead, with every request still generating.
 */
_Static_assert(EP_MAX_LAG >= 1 && EP_MAX_LAG < 100,
    "requests of 100 tokens must outlast EP_MAX_LAG steps");

#define N_CTX		128	/* llama.context_length of the fixture */
#define N_VOCAB		512
#define REF_N_PROMPT	13

/* ---- a worker on a port ------------------------------------------------ */

#define MAX_IDS		160
#define MAX_TEXT	4096
#define MAX_RECS	16
#define MAX_PROG	64

struct rec {
	uint64_t id;
	int32_t ids[MAX_IDS];
	float logprob[MAX_IDS];
	int n_ids;
	int n_token_ev;		/* TOKEN events */
	char text[MAX_TEXT];
	size_t text_len;
	bool done;		/* terminal event seen */
	uint32_t type;		/* EP_EV_DONE or EP_EV_ERROR */
	uint32_t finish;
	int32_t error;
	uint32_t n_prompt, n_gen;
	uint64_t steps[MAX_IDS];	/* step of each token */
	uint64_t end_step;	/* of the terminal event */
	uint64_t end_bound;	/* step boundaries taken with it */
	int end_order;		/* 1 + terminal events taken before it */
	int after;		/* events after the terminal one */
	int n_prog;		/* PROGRESS events */
	uint32_t prog[MAX_PROG];	/* their n_prompt */
	uint32_t prog_total[MAX_PROG];	/* their n_total */
	uint64_t prog_step[MAX_PROG];	/* their step */
};

struct tw {
	struct model *m;
	struct tokenizer *tok;
	struct engine_port *port;
	struct worker *w;
	struct ep_batch b;
	uint64_t boundaries;	/* step boundaries taken from the port */
	uint64_t last_step;	/* largest step number seen in an event */
	struct rec *recs;
	int n_recs;
	int n_ended;		/* terminal events taken */
};

static void
tw_params(struct tw *t, struct worker_params *p, int max_batch, int chunk,
    int max_seqs, int kv_tokens)
{
	memset(p, 0, sizeof(*p));
	p->model = t->m;
	p->tok = t->tok;
	p->backend = "auto";
	p->be.n_threads = 1;
	p->be.max_batch_tokens = max_batch;
	p->be.max_seqs = max_seqs;
	p->be.kv_tokens = kv_tokens;
	p->max_prefill_chunk = chunk;
}

static void
tw_load(struct tw *t)
{
	struct cp_err e = { 0 };
	char *path = fx_path("aidreams260K.gguf");

	memset(t, 0, sizeof(*t));
	ck_assert_ptr_nonnull(path);
	ck_assert_msg(model_load(path, &t->m, &e) == 0, "%s", e.msg);
	ck_assert_msg(tok_load(t->m->gf, &t->tok, &e) == 0, "%s", e.msg);
	free(path);
	ck_assert_ptr_nonnull(t->port = ep_new());
}

/* Loads the fixture and builds a worker (0: the default of each limit). */
static void
tw_new(struct tw *t, struct rec *recs, int n_recs, int max_batch, int chunk,
    int max_seqs, int kv_tokens)
{
	struct worker_params p;
	struct cp_err e = { 0 };

	tw_load(t);
	tw_params(t, &p, max_batch, chunk, max_seqs, kv_tokens);
	ck_assert_msg(worker_new(&p, t->port, &t->w, &e) == 0, "%s", e.msg);
	t->recs = recs;
	t->n_recs = n_recs;
	memset(recs, 0, sizeof(*recs) * (size_t)n_recs);
}

/* tw_new(), then the worker's thread. */
static void
tw_open(struct tw *t, struct rec *recs, int n_recs, int max_batch, int chunk,
    int max_seqs, int kv_tokens)
{
	tw_new(t, recs, n_recs, max_batch, chunk, max_seqs, kv_tokens);
	ck_assert_int_eq(worker_start(t->w), 0);
}

static struct rec *
rec_of(struct tw *t, uint64_t id)
{
	int i;

	for (i = 0; i < t->n_recs; i++)
		if (t->recs[i].id == id && id != 0)
			return &t->recs[i];
	return NULL;
}

/* Takes what the port holds and files each event; returns the event count. */
static size_t
tw_take(struct tw *t)
{
	size_t i, n;

	n = ep_take_events(t->port, &t->b);
	t->boundaries += t->b.steps;
	for (i = 0; i < n; i++) {
		const struct ep_event *ev = &t->b.ev[i];
		struct rec *r = rec_of(t, ev->id);

		ck_assert_msg(r != NULL, "event for id %llu never submitted",
		    (unsigned long long)ev->id);
		/* A step's events come with its boundary, in step order. */
		ck_assert_uint_le(ev->step, t->boundaries);
		if (ev->step != 0) {
			ck_assert_uint_ge(ev->step, t->last_step);
			t->last_step = ev->step;
		}
		ck_assert_uint_le((uint64_t)ev->text_off + ev->text_len,
		    t->b.text_len);
		if (r->done) {
			r->after++;
			continue;
		}
		ck_assert_uint_le(r->text_len + ev->text_len, MAX_TEXT);
		if (ev->text_len > 0)
			memcpy(r->text + r->text_len,
			    t->b.text + ev->text_off, ev->text_len);
		r->text_len += ev->text_len;
		switch (ev->type) {
		case EP_EV_TOKEN:
			r->n_token_ev++;
			if (ev->token >= 0) {
				ck_assert_int_lt(r->n_ids, MAX_IDS);
				/* One token per request and step. */
				ck_assert_uint_gt(ev->step, r->n_ids > 0 ?
				    r->steps[r->n_ids - 1] : 0);
				r->steps[r->n_ids] = ev->step;
				r->logprob[r->n_ids] = ev->logprob;
				r->ids[r->n_ids++] = ev->token;
			}
			break;
		case EP_EV_PROGRESS:
			/* Promise 8: before the first TOKEN, no text. */
			ck_assert_int_eq(r->n_token_ev, 0);
			ck_assert_uint_eq(ev->text_len, 0);
			ck_assert_uint_gt(ev->n_prompt, 0);
			ck_assert_uint_le(ev->n_prompt, ev->n_total);
			ck_assert_uint_gt(ev->step, 0);
			ck_assert_int_lt(r->n_prog, MAX_PROG);
			r->prog[r->n_prog] = ev->n_prompt;
			r->prog_total[r->n_prog] = ev->n_total;
			r->prog_step[r->n_prog++] = ev->step;
			break;
		case EP_EV_DONE:
		case EP_EV_ERROR:
			r->done = true;
			r->end_order = ++t->n_ended;
			r->type = ev->type;
			r->finish = ev->finish;
			r->error = ev->error;
			r->n_prompt = ev->n_prompt;
			r->n_gen = ev->n_gen;
			r->end_step = ev->step;
			r->end_bound = t->boundaries;
			if (r->n_ids > 0 && ev->step != 0)
				ck_assert_uint_ge(ev->step,
				    r->steps[r->n_ids - 1]);
			break;
		default:
			ck_abort_msg("event type %u", ev->type);
		}
	}
	return n;
}

/* Waits for events up to ms; returns 1 when some are ready. */
static int
tw_poll(struct tw *t, int ms)
{
	struct pollfd pfd = { .fd = ep_event_fd(t->port), .events = POLLIN };

	return poll(&pfd, 1, ms) > 0;
}

/* Drains until recs[want] is done (want < 0: every rec with an id). */
static void
tw_drain(struct tw *t, int want, int timeout_ms)
{
	double end = clock_ms_f() + timeout_ms;
	int i, pending;

	for (;;) {
		pending = 0;
		for (i = 0; i < t->n_recs; i++)
			if (t->recs[i].id != 0 && !t->recs[i].done &&
			    (want < 0 || want == i))
				pending++;
		if (pending == 0)
			return;
		ck_assert_msg(clock_ms_f() < end, "%d requests still running "
		    "after %d ms", pending, timeout_ms);
		if (tw_poll(t, 20))
			tw_take(t);
	}
}

/* Nothing may arrive for ms milliseconds. */
static void
tw_quiet(struct tw *t, int ms)
{
	double end = clock_ms_f() + ms;

	while (clock_ms_f() < end)
		if (tw_poll(t, 5))
			ck_assert_uint_eq(tw_take(t), 0);
}

/* Every request ended once, nothing followed, the KV pool is whole. */
static void
tw_check_clean(struct tw *t)
{
	struct worker_stats st;
	struct ep_stats es;
	int i;

	tw_quiet(t, 20);
	for (i = 0; i < t->n_recs; i++)
		if (t->recs[i].id != 0) {
			ck_assert_msg(t->recs[i].done, "request %d not ended",
			    i);
			ck_assert_int_eq(t->recs[i].after, 0);
		}
	worker_stats(t->w, &st);
	ck_assert_int_eq(st.requests_live, 0);
	ck_assert_int_eq(st.kv_seqs_live, 0);
	ep_stats_get(t->port, &es);
	ck_assert_uint_eq(es.kv_blocks_used, 0);
	ck_assert_uint_gt(es.kv_blocks_total, 0);
	/* engine_port.h promise 4: one boundary per step. */
	ck_assert_uint_eq(t->boundaries, es.steps);
}

/* SHUTDOWN, join, then the cache's own invariants; frees everything. */
static void
tw_close(struct tw *t)
{
	struct cp_err e = { 0 };
	struct kv_cache *kv;

	ck_assert_int_eq(ep_push_simple(t->port, EP_CMD_SHUTDOWN, 0, 0), 0);
	ck_assert_int_eq(worker_join(t->w), 0);
	kv = be_kv(worker_backend(t->w));
	ck_assert_msg(kv_check(kv, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(kv_seqs_live(kv), 0);
	ck_assert_int_eq(kv_blocks_free(kv), kv_blocks_total(kv));
	worker_free(t->w);
	ep_batch_fini(&t->b);
	ep_free(t->port);
	tok_free(t->tok);
	model_free(t->m);
}

static struct ep_params
greedy(uint32_t max_tokens)
{
	struct ep_params p;

	memset(&p, 0, sizeof(p));
	p.max_tokens = max_tokens;
	p.temperature = 0;
	p.top_p = 1;
	p.min_p = 0;
	p.repeat_penalty = 1;
	p.top_k = 0;
	p.repeat_last_n = 64;
	return p;
}

static struct ep_params
seeded(uint32_t max_tokens, uint64_t seed)
{
	struct ep_params p = greedy(max_tokens);

	p.temperature = 0.8f;
	p.seed = seed;
	return p;
}

/* Queues a SUBMIT of text (or toks when text is NULL) as recs[i]. */
static void
tw_submit(struct tw *t, int i, uint64_t id, uint32_t client, const char *text,
    const int32_t *toks, size_t n_toks, const struct ep_params *p,
    uint32_t flags, const char *const *stops, int n_stop)
{
	size_t tl = text != NULL ? strlen(text) : 0, sl = 0, off, k;
	struct ep_cmd *c;
	char *d;
	int s;

	for (s = 0; s < n_stop; s++)
		sl += strlen(stops[s]) + 1;
	c = ep_cmd_new(EP_CMD_SUBMIT, n_toks * sizeof(int32_t) + tl + sl);
	ck_assert_ptr_nonnull(c);
	c->client = client;
	c->id = id;
	c->flags = flags | (text == NULL ? EP_SUBMIT_TOKENS : 0);
	c->params = *p;
	d = (char *)c->data;
	if (text == NULL) {
		int32_t *tp = (int32_t *)(void *)d;

		for (k = 0; k < n_toks; k++)
			tp[k] = toks[k];
		c->tokens = tp;
		c->n_tokens = n_toks;
	}
	off = n_toks * sizeof(int32_t);
	if (text != NULL) {
		memcpy(d + off, text, tl);
		c->text = d + off;
		c->text_len = tl;
		off += tl;
	}
	for (s = 0; s < n_stop; s++) {
		size_t l = strlen(stops[s]) + 1;

		memcpy(d + off, stops[s], l);
		c->stop[s] = d + off;
		off += l;
	}
	c->n_stop = (uint32_t)n_stop;
	ck_assert_int_lt(i, t->n_recs);
	t->recs[i].id = id;
	ck_assert_int_eq(ep_push(t->port, c), 0);
}

static void
tw_text(struct tw *t, int i, const char *text, const struct ep_params *p)
{
	tw_submit(t, i, 100 + (uint64_t)i, (uint32_t)i, text, NULL, 0, p, 0,
	    NULL, 0);
}

/* Steps run so far, as the port counts them. */
static uint64_t
tw_steps(struct tw *t)
{
	struct ep_stats es;

	ep_stats_get(t->port, &es);
	return es.steps;
}

/* Waits until the worker has run at least n steps. */
static void
tw_wait_steps(struct tw *t, uint64_t n)
{
	double end = clock_ms_f() + 20000;
	uint64_t k;

	while ((k = tw_steps(t)) < n) {
		ck_assert_msg(clock_ms_f() < end, "worker stuck at %llu steps",
		    (unsigned long long)k);
		usleep(1000);
	}
}

static void
assert_ids_eq(const struct rec *a, const int32_t *ids, int n)
{
	int i;

	ck_assert_int_eq(a->n_ids, n);
	for (i = 0; i < n; i++)
		ck_assert_msg(a->ids[i] == ids[i], "token %d: %d, expected "
		    "%d", i, (int)a->ids[i], (int)ids[i]);
}

static void
assert_same(const struct rec *a, const struct rec *b)
{
	assert_ids_eq(a, b->ids, b->n_ids);
	ck_assert_uint_eq(a->text_len, b->text_len);
	ck_assert(memcmp(a->text, b->text, a->text_len) == 0);
	ck_assert_uint_eq(a->type, b->type);
	ck_assert_uint_eq(a->finish, b->finish);
	ck_assert_uint_eq(a->n_gen, b->n_gen);
}

static void
assert_done(const struct rec *r, uint32_t finish)
{
	ck_assert(r->done);
	ck_assert_msg(r->type == EP_EV_DONE, "request %llu: ERROR %d: %.*s",
	    (unsigned long long)r->id, (int)r->error, (int)r->text_len,
	    r->text);
	ck_assert_uint_eq(r->finish, finish);
	ck_assert_uint_eq(r->n_gen, (uint32_t)r->n_ids);
	ck_assert_int_eq(r->n_token_ev, r->n_ids);
}

static void
assert_error(const struct rec *r, int err, const char *word)
{
	ck_assert(r->done);
	ck_assert_uint_eq(r->type, EP_EV_ERROR);
	ck_assert_int_eq(r->error, err);
	ck_assert_int_eq(r->n_token_ev, 0);
	ck_assert_uint_eq(r->n_gen, 0);
	ck_assert_msg(r->text_len > 0 && memmem(r->text, r->text_len, word,
	    strlen(word)) != NULL, "message '%.*s' lacks '%s'",
	    (int)r->text_len, r->text, word);
}

/* ---- the reference ----------------------------------------------------- */

START_TEST(test_reference_greedy)
{
	struct rec recs[3];
	struct ep_params p = greedy(64);
	struct tw t;
	int i;

	tw_open(&t, recs, 3, 0, 0, 0, 0);
	tw_submit(&t, 0, 7, 0, ref_prompt, NULL, 0, &p, EP_SUBMIT_LOGPROB,
	    NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[0], CP_FINISH_LENGTH);
	ck_assert_uint_eq(recs[0].n_prompt, REF_N_PROMPT);
	assert_ids_eq(&recs[0], ref_ids, 64);
	ck_assert_uint_eq(recs[0].text_len, strlen(ref_content));
	ck_assert(memcmp(recs[0].text, ref_content, recs[0].text_len) == 0);
	for (i = 0; i < recs[0].n_ids; i++)
		ck_assert(isfinite(recs[0].logprob[i]) &&
		    recs[0].logprob[i] <= 0);

	/* The same prompt as token ids, without logprobs. */
	tw_submit(&t, 1, 8, 3, NULL, ref_prompt_ids, REF_N_PROMPT, &p, 0,
	    NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[1], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[1], ref_ids, 64);
	for (i = 0; i < recs[1].n_ids; i++)
		ck_assert(recs[1].logprob[i] == 0);
	ck_assert_uint_eq(recs[1].text_len, strlen(ref_content));
	ck_assert(memcmp(recs[1].text, ref_content, recs[1].text_len) == 0);

	/* max_tokens 0: until the context is full, 128 - 13 tokens. */
	p = greedy(0);
	tw_submit(&t, 2, 9, 0, ref_prompt, NULL, 0, &p, 0, NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[2], CP_FINISH_CONTEXT);
	ck_assert_int_eq(recs[2].n_ids, N_CTX - REF_N_PROMPT);
	ck_assert(memcmp(recs[2].ids, ref_ids, sizeof(ref_ids)) == 0);
	ck_assert_uint_gt(recs[2].text_len, strlen(ref_content));
	ck_assert(memcmp(recs[2].text, ref_content, strlen(ref_content)) == 0);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("reference", test_reference_greedy);

/*
 * Step numbers and the published histograms of one request alone, by
 * hand: the 13-token prompt fits the default budget, so step 1 prefills
 * it and samples token 1; step k samples token k; the DONE comes with
 * step 64.  Per step: 64 steps of one sequence; prefill 13 tokens once
 * (bucket (8, 16]) and 0 tokens 63 times; decode 0 tokens once and 1
 * token 63 times.  One time to first token, 63 gaps between tokens.
 */
START_TEST(test_steps_and_histograms)
{
	struct rec recs[1];
	struct ep_params p = greedy(64);
	struct ep_stats es;
	struct tw t;
	int i;

	tw_open(&t, recs, 1, 0, 0, 0, 0);
	tw_submit(&t, 0, 7, 0, ref_prompt, NULL, 0, &p, 0, NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[0], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[0], ref_ids, 64);
	for (i = 0; i < 64; i++)
		ck_assert_uint_eq(recs[0].steps[i], (uint64_t)i + 1);
	ck_assert_uint_eq(recs[0].end_step, 64);
	tw_check_clean(&t);

	ep_stats_get(t.port, &es);
	ck_assert_uint_eq(es.steps, 64);
	ck_assert_uint_eq(es.tokens_prompt, REF_N_PROMPT);
	ck_assert_uint_eq(es.tokens_generated, 64);
	ck_assert_uint_eq(es.requests_waiting, 0);
	ck_assert_uint_eq(es.requests_running, 0);
	ck_assert_uint_eq(es.requests_paused, 0);
	ck_assert_uint_eq(es.preemptions, 0);
	ck_assert_uint_eq(es.kv_blocks_used, 0);
	ck_assert_uint_eq(es.step_seqs.count, 64);
	ck_assert_uint_eq(es.step_seqs.n[1], 64);	/* exactly 1 */
	ck_assert_uint_eq(es.step_seqs.max, 1);
	ck_assert_uint_eq(es.step_prefill.count, 64);
	ck_assert_uint_eq(es.step_prefill.n[0], 63);
	ck_assert_uint_eq(es.step_prefill.n[5], 1);	/* (8, 16] */
	ck_assert_uint_eq(es.step_prefill.sum, REF_N_PROMPT);
	ck_assert_uint_eq(es.step_prefill.max, REF_N_PROMPT);
	ck_assert_uint_eq(es.step_decode.n[0], 1);
	ck_assert_uint_eq(es.step_decode.n[1], 63);
	ck_assert_uint_eq(es.step_decode.sum, 63);
	ck_assert_uint_eq(es.ttft_us.count, 1);
	ck_assert_uint_eq(es.itl_us.count, 63);
	ck_assert_uint_ge(es.itl_us.max, es.itl_us.sum / 63);
	tw_close(&t);
}
END_TEST
SUITE_TEST("reference", test_steps_and_histograms);

/* ---- batching, chunking, preemption ------------------------------------ */

static const char *const prompts[8] = {
	"Once upon a time",
	"Classification",
	"In the quiet hum of the machine, a dream",
	"Pixels",
	"The kaleidoscope of probability revealing hidden patterns whispers "
	    "to the neural network about forgotten memories and electric "
	    "sheep dreaming",
	"Whispers of data",
	"A network of light and shadow unfolds, layer by layer, until the "
	    "patterns",
	"Hello",
};
static const uint32_t prompt_max[8] = { 40, 48, 40, 56, 40, 30, 48, 20 };

/* Runs prompts[0..n) one at a time into alone[], then all together. */
static void
alone_vs_together(struct tw *t, int n, const struct ep_params *ps,
    struct rec *alone, struct rec *together)
{
	int i;

	for (i = 0; i < n; i++) {
		tw_submit(t, i, 100 + (uint64_t)i, (uint32_t)i, prompts[i],
		    NULL, 0, &ps[i], 0, NULL, 0);
		tw_drain(t, i, 30000);
	}
	memcpy(alone, t->recs, sizeof(*alone) * (size_t)n);
	/*
	 * Clients past the default 256 share round-robin turns.  Together,
	 * with progress asked: it changes no token, and its last report, the
	 * step of the first token, is the whole prompt (promise 8), also when
	 * a preemption set the count back.
	 */
	for (i = 0; i < n; i++)
		tw_submit(t, n + i, 200 + (uint64_t)i, (uint32_t)(i * 300),
		    prompts[i], NULL, 0, &ps[i], EP_SUBMIT_PROGRESS, NULL, 0);
	tw_drain(t, -1, 30000);
	memcpy(together, t->recs + n, sizeof(*together) * (size_t)n);
	for (i = 0; i < n; i++) {
		const struct rec *r = &together[i];

		assert_done(&alone[i], CP_FINISH_LENGTH);
		ck_assert_uint_eq(alone[i].n_gen, ps[i].max_tokens);
		assert_same(r, &alone[i]);
		ck_assert_int_eq(alone[i].n_prog, 0);
		ck_assert_int_gt(r->n_prog, 0);
		ck_assert_uint_eq(r->prog[r->n_prog - 1], r->n_prompt);
		ck_assert_uint_eq(r->prog_total[r->n_prog - 1], r->n_prompt);
		ck_assert_uint_eq(r->prog_step[r->n_prog - 1], r->steps[0]);
	}
}

START_TEST(test_batched_equals_alone)
{
	static struct rec recs[16], alone[8], together[8];
	struct ep_params ps[8];
	struct worker_stats st0;
	struct ep_stats es;
	struct tw t;
	int i;

	for (i = 0; i < 8; i++)
		ps[i] = greedy(prompt_max[i]);
	/* 32 tokens a step, prefill chunks of 16: prompts of 23, 35 and 72
	 * tokens are chunked, and chunks share steps with decodes. */
	tw_open(&t, recs, 16, 32, 16, 8, 8 * N_CTX);
	alone_vs_together(&t, 8, ps, alone, together);
	/* The reference prompt alone is llama.cpp's. */
	assert_ids_eq(&alone[0], ref_ids, 40);
	tw_check_clean(&t);
	worker_stats(t.w, &st0);
	ep_stats_get(t.port, &es);
	ck_assert_uint_eq(es.preemptions, 0);
	ck_assert_uint_eq(st0.submitted, 16);
	tw_close(&t);
}
END_TEST
SUITE_TEST("batch", test_batched_equals_alone);

START_TEST(test_preempt_recompute)
{
	static struct rec recs[12], alone[6], together[6];
	struct ep_params ps[6];
	struct ep_stats es;
	struct tw t;
	int i;

	for (i = 0; i < 6; i++)
		ps[i] = greedy(prompt_max[i]);
	/*
	 * A pool of 6 blocks of 16 tokens: each request alone fits (at most
	 * 23 + 40 tokens, 4 blocks), six together cannot, so decodes run out
	 * of blocks and the newest requests are preempted and recomputed.
	 */
	ps[4] = greedy(16);	/* 72 + 16 tokens: 6 blocks */
	tw_open(&t, recs, 12, 32, 16, 6, 96);
	alone_vs_together(&t, 6, ps, alone, together);
	tw_check_clean(&t);
	ep_stats_get(t.port, &es);
	ck_assert_uint_gt(es.preemptions, 0);
	ck_assert_uint_eq(es.kv_blocks_total, 6);
	tw_close(&t);
}
END_TEST
SUITE_TEST("batch", test_preempt_recompute);

/* ---- prefill progress ---------------------------------------------------- */

/*
 * A 100-token prompt under a budget of 16 tokens a step: the scheduler
 * gives it 16 positions a step (DESIGN.md, rules 1 and 5), so PROGRESS
 * reports 16, 32, ..., 96, then 100 in the seventh step, the step that
 * samples the first token; each in its own step, all before that TOKEN.
 * The same prompt without EP_SUBMIT_PROGRESS gets none and the same ids.
 */
START_TEST(test_progress_chunks)
{
	static const uint32_t want[] = { 16, 32, 48, 64, 80, 96, 100 };
	struct rec recs[3];
	struct ep_params p = greedy(4);
	int32_t toks[100];
	struct tw t;
	int i;

	for (i = 0; i < 100; i++)
		toks[i] = (int32_t)(3 + (i * 37) % (N_VOCAB - 3));
	tw_open(&t, recs, 3, 16, 0, 4, 4 * N_CTX);
	tw_submit(&t, 0, 1, 0, NULL, toks, 100, &p, EP_SUBMIT_PROGRESS, NULL,
	    0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[0], CP_FINISH_LENGTH);
	ck_assert_int_eq(recs[0].n_prog, 7);
	for (i = 0; i < 7; i++) {
		ck_assert_uint_eq(recs[0].prog[i], want[i]);
		ck_assert_uint_eq(recs[0].prog_total[i], 100);
		if (i > 0)
			ck_assert_uint_eq(recs[0].prog_step[i],
			    recs[0].prog_step[i - 1] + 1);
	}
	/* The last chunk's step sampled the first token. */
	ck_assert_uint_eq(recs[0].prog_step[6], recs[0].steps[0]);

	tw_submit(&t, 1, 2, 0, NULL, toks, 100, &p, 0, NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[1], CP_FINISH_LENGTH);
	ck_assert_int_eq(recs[1].n_prog, 0);
	assert_same(&recs[1], &recs[0]);

	/* A prompt of one chunk: one PROGRESS, 13 of 13, then its tokens. */
	tw_submit(&t, 2, 3, 0, NULL, ref_prompt_ids, REF_N_PROMPT, &p,
	    EP_SUBMIT_PROGRESS, NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[2], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[2], ref_ids, 4);
	ck_assert_int_eq(recs[2].n_prog, 1);
	ck_assert_uint_eq(recs[2].prog[0], REF_N_PROMPT);
	ck_assert_uint_eq(recs[2].prog_total[0], REF_N_PROMPT);
	ck_assert_uint_eq(recs[2].prog_step[0], recs[2].steps[0]);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("control", test_progress_chunks);

/* ---- cancel ------------------------------------------------------------ */

START_TEST(test_cancel_mid_prefill)
{
	struct rec recs[4];
	struct ep_params p = greedy(8);
	struct worker_stats st;
	struct ep_stats es;
	int32_t toks[120];
	struct tw t;
	int i;

	for (i = 0; i < 120; i++)
		toks[i] = (int32_t)(3 + (i * 37) % (N_VOCAB - 3));
	/* One prompt token a step: 120 steps of prefill before a token. */
	tw_open(&t, recs, 4, 16, 1, 4, 4 * N_CTX);
	tw_submit(&t, 0, 1, 0, NULL, toks, 120, &p, 0, NULL, 0);
	/* Not taking events: the worker stops EP_MAX_LAG steps ahead. */
	tw_wait_steps(&t, 1);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 0, 1), 0);
	/* A second cancel, and ones for unknown ids, are ignored. */
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 0, 1), 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 0, 999), 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_PAUSE, 0, 998), 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_RESUME, 0, 997), 0);
	tw_drain(&t, -1, 20000);
	ck_assert(recs[0].done);
	ck_assert_uint_eq(recs[0].type, EP_EV_DONE);
	ck_assert_uint_eq(recs[0].finish, CP_FINISH_CANCELLED);
	ck_assert_int_eq(recs[0].n_token_ev, 0);
	ck_assert_uint_eq(recs[0].n_gen, 0);
	ck_assert_uint_eq(recs[0].n_prompt, 120);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.cancelled, 1);
	ep_stats_get(t.port, &es);
	ck_assert_uint_lt(es.tokens_prompt, 120);
	ck_assert_uint_gt(es.tokens_prompt, 0);

	/*
	 * A request cancelled before it ever ran, beside one that runs: the
	 * worker is held in ep_post() while both commands are queued, so
	 * it takes them in one go.
	 */
	p = greedy(100);
	tw_text(&t, 1, ref_prompt, &p);
	tw_wait_steps(&t, es.steps + EP_MAX_LAG);
	p = greedy(20);
	tw_text(&t, 2, "Pixels", &p);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 2, 102), 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[1], CP_FINISH_LENGTH);
	ck_assert_int_eq(recs[1].n_ids, 100);
	ck_assert(memcmp(recs[1].ids, ref_ids, sizeof(ref_ids)) == 0);
	ck_assert_uint_eq(recs[2].type, EP_EV_DONE);
	ck_assert_uint_eq(recs[2].finish, CP_FINISH_CANCELLED);
	ck_assert_int_eq(recs[2].n_token_ev, 0);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("control", test_cancel_mid_prefill);

/* ---- pause ------------------------------------------------------------- */

START_TEST(test_pause_resume)
{
	struct rec recs[4], alone;
	struct ep_params p = greedy(100);
	struct worker_stats st;
	struct tw t;
	uint64_t steps;
	int n_before;

	tw_open(&t, recs, 4, 32, 32, 4, 4 * N_CTX);
	tw_text(&t, 0, ref_prompt, &p);
	tw_drain(&t, 0, 20000);
	alone = recs[0];
	assert_done(&alone, CP_FINISH_LENGTH);

	steps = tw_steps(&t);
	tw_text(&t, 1, ref_prompt, &p);
	tw_text(&t, 2, "Whispers of data", &p);
	tw_text(&t, 3, "Pixels", &p);
	/*
	 * Without a take the worker blocks in ep_post() after EP_MAX_LAG
	 * steps (a prefill and decodes: both requests mid-generation).  The
	 * PAUSE is queued before the take that releases it, so it applies
	 * before the worker's next step: every event of request 1 is in the
	 * first take.
	 */
	tw_wait_steps(&t, steps + EP_MAX_LAG);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_PAUSE, 1, 101), 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_PAUSE, 3, 103), 0);
	ck_assert_uint_gt(tw_take(&t), 0);
	n_before = recs[1].n_token_ev;
	ck_assert_int_gt(n_before, 0);
	ck_assert_int_lt(n_before, 100);
	ck_assert(!recs[1].done);
	tw_drain(&t, 2, 20000);
	assert_done(&recs[2], CP_FINISH_LENGTH);
	ck_assert_int_eq(recs[2].n_ids, 100);
	ck_assert_int_eq(recs[1].n_token_ev, n_before);
	tw_quiet(&t, 50);
	ck_assert_int_eq(recs[1].n_token_ev, n_before);
	ck_assert(!recs[1].done);
	ck_assert(!recs[3].done);
	/* Paused, they keep their KV. */
	worker_stats(t.w, &st);
	ck_assert_int_eq(st.kv_seqs_live, 2);
	ck_assert_int_eq(st.requests_live, 2);

	/* A paused request that is cancelled ends with its DONE. */
	n_before = recs[3].n_token_ev;
	ck_assert_int_gt(n_before, 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 3, 103), 0);
	tw_drain(&t, 3, 20000);
	ck_assert_uint_eq(recs[3].type, EP_EV_DONE);
	ck_assert_uint_eq(recs[3].finish, CP_FINISH_CANCELLED);
	ck_assert_int_eq(recs[3].n_token_ev, n_before);
	ck_assert_uint_eq(recs[3].n_gen, (uint32_t)n_before);
	worker_stats(t.w, &st);
	ck_assert_int_eq(st.kv_seqs_live, 1);
	ck_assert(!recs[1].done);

	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_RESUME, 1, 101), 0);
	tw_drain(&t, -1, 20000);
	assert_same(&recs[1], &alone);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("control", test_pause_resume);

/* ---- stop strings, lengths, errors ------------------------------------- */

/* recs[i] must end with STOP and the reference text before stop. */
static void
check_stop(struct tw *t, int i, const char *stop)
{
	const char *at = strstr(ref_content, stop);
	size_t want;
	int k;

	ck_assert_ptr_nonnull(at);
	want = (size_t)(at - ref_content);
	assert_done(&t->recs[i], CP_FINISH_STOP);
	ck_assert_msg(t->recs[i].text_len == want &&
	    memcmp(t->recs[i].text, ref_content, want) == 0,
	    "stop '%s': got '%.*s'", stop, (int)t->recs[i].text_len,
	    t->recs[i].text);
	/* The ids are the reference's up to the one completing the stop. */
	ck_assert_int_lt(t->recs[i].n_ids, 64);
	for (k = 0; k < t->recs[i].n_ids; k++)
		ck_assert_int_eq(t->recs[i].ids[k], ref_ids[k]);
}

START_TEST(test_stop_strings)
{
	static const char *const s1[] = { "petals" };
	static const char *const s2[] = { "zzz", "Classif", "kaleido" };
	static const char *const s3[] = { "ls. C" };
	static const char *const s4[] = { "secx", "whispers secre" };
	struct rec recs[4];
	struct ep_params p = greedy(64);
	struct tw t;

	tw_open(&t, recs, 4, 0, 0, 0, 4 * N_CTX);
	tw_submit(&t, 0, 1, 0, ref_prompt, NULL, 0, &p, 0, s1, 1);
	tw_submit(&t, 1, 2, 1, ref_prompt, NULL, 0, &p, 0, s2, 3);
	tw_submit(&t, 2, 3, 2, ref_prompt, NULL, 0, &p, 0, s3, 1);
	/* Never matched, but the output ends on a prefix of both: the held
	 * bytes come out with DONE. */
	tw_submit(&t, 3, 4, 3, ref_prompt, NULL, 0, &p, 0, s4, 2);
	tw_drain(&t, -1, 20000);
	check_stop(&t, 0, "petals");
	check_stop(&t, 1, "Classif");
	check_stop(&t, 2, "ls. C");
	assert_done(&recs[3], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[3], ref_ids, 64);
	ck_assert_uint_eq(recs[3].text_len, strlen(ref_content));
	ck_assert(memcmp(recs[3].text, ref_content, recs[3].text_len) == 0);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("output", test_stop_strings);

START_TEST(test_length_and_errors)
{
	struct rec recs[10];
	struct ep_params p;
	int32_t toks[2 * N_CTX];
	const int32_t bad_hi[] = { 1, 429, N_VOCAB };
	const int32_t bad_lo[] = { 1, -1, 429 };
	struct tw t;
	int i;

	for (i = 0; i < 2 * N_CTX; i++)
		toks[i] = 1 + i % 400;
	/* A pool of 4 blocks (64 tokens) under a context of 128. */
	tw_open(&t, recs, 10, 0, 0, 0, 64);
	p = greedy(5);
	tw_text(&t, 0, ref_prompt, &p);
	/* 13 + 116 > 128, refused in strict mode only. */
	p = greedy(N_CTX - REF_N_PROMPT + 1);
	tw_submit(&t, 1, 101, 1, ref_prompt, NULL, 0, &p, EP_SUBMIT_STRICT,
	    NULL, 0);
	/* A prompt longer than the context. */
	p = greedy(4);
	tw_submit(&t, 2, 102, 2, NULL, toks, N_CTX + 1, &p, 0, NULL, 0);
	tw_submit(&t, 3, 103, 3, NULL, bad_hi, 3, &p, 0, NULL, 0);
	tw_submit(&t, 4, 104, 4, NULL, bad_lo, 3, &p, 0, NULL, 0);
	tw_submit(&t, 5, 105, 5, NULL, toks, 0, &p, 0, NULL, 0);
	/* 13 + 100 tokens fit the context but not the pool (strict). */
	p = greedy(100);
	tw_submit(&t, 6, 106, 6, ref_prompt, NULL, 0, &p, EP_SUBMIT_STRICT,
	    NULL, 0);
	/* A prompt filling the whole context leaves nothing to generate. */
	p = greedy(0);
	tw_submit(&t, 7, 107, 7, NULL, toks, N_CTX, &p, 0, NULL, 0);
	/* Unlimited with a pool of 64 tokens: the pool is the context. */
	tw_text(&t, 8, ref_prompt, &p);
	tw_drain(&t, -1, 20000);

	assert_done(&recs[0], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[0], ref_ids, 5);
	ck_assert_uint_le(recs[0].text_len, strlen(ref_content));
	ck_assert(memcmp(recs[0].text, ref_content, recs[0].text_len) == 0);
	assert_error(&recs[1], -E2BIG, "context");
	ck_assert_uint_eq(recs[1].n_prompt, REF_N_PROMPT);
	assert_error(&recs[2], -E2BIG, "context");
	assert_error(&recs[3], -EINVAL, "512");
	assert_error(&recs[4], -EINVAL, "-1");
	assert_error(&recs[5], -EINVAL, "empty");
	assert_error(&recs[6], -E2BIG, "KV");
	assert_error(&recs[7], -E2BIG, "context");
	assert_done(&recs[8], CP_FINISH_CONTEXT);
	ck_assert_int_eq(recs[8].n_ids, 64 - REF_N_PROMPT);
	assert_ids_eq(&recs[8], ref_ids, 64 - REF_N_PROMPT);

	/* The worker goes on serving after errors. */
	p = greedy(40);
	tw_text(&t, 9, ref_prompt, &p);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[9], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[9], ref_ids, 40);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("output", test_length_and_errors);

/*
 * A worker (KV pool kv_tokens, 0: the default) running request 0 (client
 * 0, the reference prompt, max_tokens n_a) for 2 steps, then given request
 * 1 (client 1): big, size bytes, filled with a story's opening over and
 * over, and request 2 (client 2, the reference ids, max_tokens n_c).
 */
static void
big_behind_stream(struct tw *t, struct rec *recs, int n_recs, char *big,
    size_t size, int kv_tokens, uint32_t n_a, uint32_t n_c)
{
	const char piece[] = "Once upon a time, ";
	struct ep_params p;
	size_t i;

	for (i = 0; i + 1 < size; i++)
		big[i] = piece[i % (sizeof(piece) - 1)];
	big[size - 1] = '\0';
	tw_open(t, recs, n_recs, 0, 0, 0, kv_tokens);
	p = greedy(n_a);
	tw_text(t, 0, ref_prompt, &p);
	tw_wait_steps(t, 2);
	p = greedy(4);
	tw_submit(t, 1, 101, 1, big, NULL, 0, &p, 0, NULL, 0);
	p = greedy(n_c);
	tw_submit(t, 2, 102, 2, NULL, ref_prompt_ids, REF_N_PROMPT, &p, 0,
	    NULL, 0);
}

/*
 * A text prompt is tokenized off the engine thread (prep.h).  While a
 * prompt of 6 MiB is tokenized (long enough to notice), a stream already
 * running and a request of another client submitted after it run to their
 * end; the same client's next request waits for it (per-client order),
 * and a CANCEL of that request waits for it in turn, instead of finding no
 * such request and being dropped.
 */
START_TEST(test_tokenize_off_thread)
{
	static char big[6 << 20];
	struct rec recs[4];
	struct ep_params p;
	struct tw t;

	big_behind_stream(&t, recs, 4, big, sizeof(big), 0, 60, 10);
	p = greedy(50);
	tw_submit(&t, 3, 103, 1, NULL, ref_prompt_ids, REF_N_PROMPT, &p, 0,
	    NULL, 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 1, 103), 0);
	tw_drain(&t, -1, 60000);

	assert_error(&recs[1], -E2BIG, "context");
	assert_done(&recs[0], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[0], ref_ids, 60);
	assert_done(&recs[2], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[2], ref_ids, 10);
	assert_done(&recs[3], CP_FINISH_CANCELLED);
	ck_assert_int_lt(recs[3].n_ids, 50);
	ck_assert_msg(recs[0].end_order < recs[1].end_order &&
	    recs[2].end_order < recs[1].end_order, "the stream (%d) and the "
	    "other client's request (%d) waited for the tokenization (%d)",
	    recs[0].end_order, recs[2].end_order, recs[1].end_order);
	ck_assert_int_gt(recs[3].end_order, recs[1].end_order);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("control", test_tokenize_off_thread);

/*
 * The step numbers of two streams while a 4 MiB prompt is tokenized: a
 * stream running before it (A) and one of another client submitted after
 * it (C) each get a token in every step from their first to their last,
 * and both end, A at the end of the context (115 steps), before the big
 * prompt (B) is answered: the step boundaries posted by then cover A's
 * last step.  With tokenization between steps B's answer comes with the
 * first step after its SUBMIT: A, submitted 2 steps earlier, runs at
 * most EP_MAX_LAG steps ahead of the events taken, so B's answer came
 * before A's end.
 */
START_TEST(test_tokenize_streams_every_step)
{
	static char big[4 << 20];
	struct rec recs[3];
	struct tw t;
	int k, n_a = N_CTX - REF_N_PROMPT;

	_Static_assert(EP_MAX_LAG + 2 < N_CTX - REF_N_PROMPT,
	    "A must outlast the steps tokenization on the engine thread "
	    "could leave it");
	/* A pool for both streams: no preemption. */
	big_behind_stream(&t, recs, 3, big, sizeof(big), 4 * N_CTX, 0, 40);
	tw_drain(&t, -1, 60000);

	assert_error(&recs[1], -E2BIG, "context");
	assert_done(&recs[0], CP_FINISH_CONTEXT);
	ck_assert_int_eq(recs[0].n_ids, n_a);
	for (k = 0; k < 64; k++)
		ck_assert_int_eq(recs[0].ids[k], ref_ids[k]);
	assert_done(&recs[2], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[2], ref_ids, 40);
	for (k = 0; k < n_a; k++)
		ck_assert_uint_eq(recs[0].steps[k], (uint64_t)k + 1);
	for (k = 1; k < 40; k++)
		ck_assert_uint_eq(recs[2].steps[k], recs[2].steps[0] +
		    (uint64_t)k);
	ck_assert_msg(recs[1].end_order > recs[0].end_order &&
	    recs[1].end_order > recs[2].end_order, "the 4 MiB prompt was "
	    "answered (%d) before the streams ended (%d, %d)",
	    recs[1].end_order, recs[0].end_order, recs[2].end_order);
	ck_assert_uint_ge(recs[1].end_bound, recs[0].steps[n_a - 1]);
	ck_assert_uint_ge(recs[1].end_bound, recs[2].steps[39]);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("control", test_tokenize_streams_every_step);

START_TEST(test_shutdown_in_flight)
{
	/* Prompts of at most 23 tokens: over 100 steps each to the end. */
	static const int pick[8] = { 0, 1, 2, 3, 5, 7, 0, 1 };
	struct rec recs[8];
	struct ep_params p = greedy(0);
	struct worker_stats st;
	struct ep_stats es;
	struct tw t;
	double t0;
	int i;

	tw_new(&t, recs, 8, 32, 16, 8, 8 * N_CTX);
	/* All queued before the worker starts: it admits them in its first
	 * step, before it can block with some still queued. */
	for (i = 0; i < 8; i++)
		tw_text(&t, i, prompts[pick[i]], &p);
	ck_assert_int_eq(worker_start(t.w), 0);
	/* Blocked in ep_post() with every request in flight (the counters
	 * are published after a step: wait for the one that admitted all). */
	tw_wait_steps(&t, EP_MAX_LAG);
	t0 = clock_ms_f();
	do {
		worker_stats(t.w, &st);
		if (st.requests_live == 8)
			break;
		usleep(1000);
	} while (clock_ms_f() - t0 < 10000);
	ck_assert_int_eq(st.requests_live, 8);
	t0 = clock_ms_f();
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_SHUTDOWN, 0, 0), 0);
	ck_assert_int_eq(worker_join(t.w), 0);
	ck_assert_msg(clock_ms_f() - t0 < 2000, "shutdown took %.0f ms",
	    clock_ms_f() - t0);
	worker_stats(t.w, &st);
	ck_assert_int_eq(st.requests_live, 0);
	ck_assert_int_eq(st.kv_seqs_live, 0);
	ep_stats_get(t.port, &es);
	ck_assert_uint_eq(es.kv_blocks_used, 0);
	/* Dropped without terminal events. */
	tw_take(&t);
	for (i = 0; i < 8; i++)
		ck_assert(!recs[i].done);
	worker_free(t.w);
	ep_batch_fini(&t.b);
	ep_free(t.port);
	tok_free(t.tok);
	model_free(t.m);
}
END_TEST
SUITE_TEST("control", test_shutdown_in_flight);

/* ---- the prefill lane (lane.h) ---------------------------------------- */

/*
 * A worker on 2 threads whose prompts of lane_min + 1 tokens use the lane,
 * in chunks of lane_chunk rows (0: LANE_CHUNK); the steps prefill chunk
 * tokens of a prompt at a time.
 */
static void
tw_open_lane(struct tw *t, struct rec *recs, int n_recs, int lane_min,
    int lane_chunk, int chunk)
{
	struct worker_params p;
	struct cp_err e = { 0 };

	tw_load(t);
	tw_params(t, &p, 32, chunk, 8, 8 * N_CTX);
	p.be.n_threads = 2;
	p.prefill_lane_tokens = lane_min;
	p.prefill_lane_chunk = lane_chunk;
	/* the lane's tests send one prompt again and again */
	p.prefix_cache = PREFIX_OFF;
	ck_assert_msg(worker_new(&p, t->port, &t->w, &e) == 0, "%s", e.msg);
	t->recs = recs;
	t->n_recs = n_recs;
	memset(recs, 0, sizeof(*recs) * (size_t)n_recs);
	ck_assert_int_eq(worker_start(t->w), 0);
}

/*
 * A live request that never runs: the lane takes a prompt only while
 * other requests are live.  recs[i], id 900 + i; tw_unhold() ends it.
 */
static void
tw_hold(struct tw *t, int i)
{
	struct ep_params p = greedy(100);

	tw_submit(t, i, 900 + (uint64_t)i, 77, "Hello", NULL, 0, &p, 0, NULL,
	    0);
	ck_assert_int_eq(ep_push_simple(t->port, EP_CMD_PAUSE, 77,
	    900 + (uint64_t)i), 0);
}

static void
tw_unhold(struct tw *t, int i)
{
	ck_assert_int_eq(ep_push_simple(t->port, EP_CMD_CANCEL, 77,
	    900 + (uint64_t)i), 0);
	tw_drain(t, i, 20000);
	ck_assert_uint_eq(t->recs[i].finish, CP_FINISH_CANCELLED);
}

/*
 * Prompts prefilled in the lane, beside others decoding and prefilling in
 * the steps, give the tokens of the same prompts run alone without a lane,
 * and the reference prompt llama.cpp's.  The lane takes one prompt at a
 * time, and only while other requests are live: a prompt alone, and the
 * others meanwhile, go through the steps.
 */
START_TEST(test_lane_equals_steps)
{
	static struct rec recs[16], alone[8], lane[10];
	struct ep_params ps[8];
	struct worker_stats st;
	struct tw t;
	int i;

	for (i = 0; i < 8; i++)
		ps[i] = greedy(prompt_max[i]);
	tw_open(&t, recs, 16, 32, 16, 8, 8 * N_CTX);
	for (i = 0; i < 8; i++) {
		tw_text(&t, i, prompts[i], &ps[i]);
		tw_drain(&t, i, 30000);
	}
	memcpy(alone, recs, sizeof(alone));
	tw_close(&t);

	/* Alone, a prompt goes through the steps. */
	tw_open_lane(&t, lane, 10, 4, 0, 16);
	tw_submit(&t, 8, 300, 0, ref_prompt, NULL, 0, &ps[0], 0, NULL, 0);
	tw_drain(&t, 8, 30000);
	assert_ids_eq(&lane[8], ref_ids, 40);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.lane_prompts, 0);
	memset(&lane[8], 0, sizeof(lane[8]));
	/* Beside another request, through the lane. */
	tw_hold(&t, 9);
	tw_submit(&t, 8, 301, 0, ref_prompt, NULL, 0, &ps[0],
	    EP_SUBMIT_PROGRESS, NULL, 0);
	tw_drain(&t, 8, 30000);
	assert_ids_eq(&lane[8], ref_ids, 40);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.lane_prompts, 1);
	tw_unhold(&t, 9);
	/* PROGRESS ends with the whole prompt, in the first token's step. */
	ck_assert_int_gt(lane[8].n_prog, 0);
	ck_assert_uint_eq(lane[8].prog[lane[8].n_prog - 1], REF_N_PROMPT);
	ck_assert_uint_eq(lane[8].prog_step[lane[8].n_prog - 1],
	    lane[8].steps[0]);
	for (i = 0; i < 8; i++)
		tw_submit(&t, i, 200 + (uint64_t)i, (uint32_t)i, prompts[i],
		    NULL, 0, &ps[i], EP_SUBMIT_PROGRESS, NULL, 0);
	tw_drain(&t, -1, 30000);
	for (i = 0; i < 8; i++) {
		assert_done(&alone[i], CP_FINISH_LENGTH);
		assert_same(&lane[i], &alone[i]);
		ck_assert_uint_eq(lane[i].prog[lane[i].n_prog - 1],
		    lane[i].n_prompt);
	}
	tw_check_clean(&t);
	worker_stats(t.w, &st);
	ck_assert_uint_ge(st.lane_prompts, 2);
	ck_assert_uint_eq(st.submitted, 11);
	tw_close(&t);
}
END_TEST
SUITE_TEST("batch", test_lane_equals_steps);

/*
 * A 110-token prompt of ids 3 + (i * mul) % (N_VOCAB - 3) into toks, and
 * its run without a lane (the steps, chunks of 16) into *ref.
 */
static void
lane_ref(int32_t *toks, int mul, const struct ep_params *p, struct rec *ref)
{
	struct tw t;
	int i;

	for (i = 0; i < 110; i++)
		toks[i] = (int32_t)(3 + (i * mul) % (N_VOCAB - 3));
	tw_open(&t, ref, 1, 32, 16, 8, 8 * N_CTX);
	tw_submit(&t, 0, 1, 0, NULL, toks, 110, p, 0, NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(ref, CP_FINISH_LENGTH);
	tw_close(&t);
}

/*
 * PROGRESS from the lane, chunk by chunk: a 110-token prompt whose first
 * 109 positions the lane computes in chunks of 16 reports counts out of
 * 16, 32, ..., 96, 109 (the worker may take several chunks in a turn), in
 * order, then 110 in the step of its first token (the turn that sees the
 * lane done reports 109 and admits it), whose ids are those of the steps
 * without a lane.
 */
START_TEST(test_lane_progress)
{
	struct rec recs[2], ref[1];
	struct ep_params p = greedy(8);
	struct worker_stats st;
	int32_t toks[110];
	struct tw t;
	int i;

	lane_ref(toks, 41, &p, ref);

	tw_open_lane(&t, recs, 2, 16, 16, 16);
	tw_hold(&t, 1);
	tw_submit(&t, 0, 1, 0, NULL, toks, 110, &p, EP_SUBMIT_PROGRESS, NULL,
	    0);
	tw_drain(&t, 0, 20000);
	tw_unhold(&t, 1);
	assert_done(&recs[0], CP_FINISH_LENGTH);
	assert_same(&recs[0], &ref[0]);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.lane_prompts, 1);
	ck_assert_int_ge(recs[0].n_prog, 2);
	for (i = 0; i < recs[0].n_prog; i++) {
		uint32_t v = recs[0].prog[i];

		ck_assert_uint_eq(recs[0].prog_total[i], 110);
		if (i + 1 < recs[0].n_prog)
			ck_assert_msg(v == 109 || (v % 16 == 0 && v <= 96),
			    "progress %u is no chunk's end", v);
		if (i > 0) {
			ck_assert_uint_gt(v, recs[0].prog[i - 1]);
			ck_assert_uint_ge(recs[0].prog_step[i],
			    recs[0].prog_step[i - 1]);
		}
	}
	ck_assert_uint_eq(recs[0].prog[recs[0].n_prog - 2], 109);
	ck_assert_uint_eq(recs[0].prog[recs[0].n_prog - 1], 110);
	ck_assert_uint_eq(recs[0].prog_step[recs[0].n_prog - 1],
	    recs[0].steps[0]);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("batch", test_lane_progress);

/*
 * A prompt that arrived alone is prefilled in the steps, one token a
 * step; when another request arrives (the worker held at EP_MAX_LAG steps
 * ahead, about 64 positions in), it moves to the lane with the positions
 * computed so far, and ends with the tokens of the steps alone.  Its
 * prompt positions are counted once.
 */
START_TEST(test_lane_move)
{
	struct rec recs[2], ref[1];
	struct ep_params p = greedy(8);
	struct worker_stats st;
	struct ep_stats es;
	int32_t toks[110];
	struct tw t;

	lane_ref(toks, 43, &p, ref);

	tw_open_lane(&t, recs, 2, 16, 16, 1);
	tw_submit(&t, 0, 1, 0, NULL, toks, 110, &p, 0, NULL, 0);
	tw_wait_steps(&t, EP_MAX_LAG);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.lane_prompts, 0);
	tw_hold(&t, 1);
	tw_drain(&t, 0, 20000);
	assert_done(&recs[0], CP_FINISH_LENGTH);
	assert_same(&recs[0], &ref[0]);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.lane_prompts, 1);
	/* 110, and the holder's few prompt tokens if it ran before its PAUSE */
	ep_stats_get(t.port, &es);
	ck_assert_uint_ge(es.tokens_prompt, 110);
	ck_assert_uint_le(es.tokens_prompt, 110 + 8);
	tw_unhold(&t, 1);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("batch", test_lane_move);

/*
 * A prompt cancelled while the lane prefills it ends at once; the lane
 * drops it and serves the next one, whose tokens are those of the steps.
 * A SHUTDOWN with a prompt in the lane returns without waiting for it.
 */
START_TEST(test_lane_cancel)
{
	struct rec recs[5], ref[1];
	struct ep_params p = greedy(8);
	struct worker_stats st;
	int32_t toks[110];
	struct tw t;
	double t0;

	lane_ref(toks, 37, &p, ref);

	tw_open_lane(&t, recs, 5, 16, 0, 16);
	tw_hold(&t, 4);
	tw_submit(&t, 0, 1, 0, NULL, toks, 110, &p, 0, NULL, 0);
	ck_assert_int_eq(ep_push_simple(t.port, EP_CMD_CANCEL, 0, 1), 0);
	tw_drain(&t, 0, 20000);
	ck_assert_uint_eq(recs[0].type, EP_EV_DONE);
	ck_assert_uint_eq(recs[0].finish, CP_FINISH_CANCELLED);
	ck_assert_int_eq(recs[0].n_token_ev, 0);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.lane_prompts, 1);
	ck_assert_uint_eq(st.cancelled, 1);
	/* The lane stops at its next chunk: then it takes the next prompt. */
	t0 = clock_ms_f();
	do {
		tw_submit(&t, 1, 2, 0, NULL, toks, 110, &p, 0, NULL, 0);
		tw_drain(&t, 1, 20000);
		assert_same(&recs[1], &ref[0]);
		worker_stats(t.w, &st);
		memset(&recs[1], 0, sizeof(recs[1]));
	} while (st.lane_prompts < 2 && clock_ms_f() - t0 < 10000);
	ck_assert_uint_eq(st.lane_prompts, 2);
	tw_unhold(&t, 4);
	tw_check_clean(&t);

	memset(&recs[4], 0, sizeof(recs[4]));
	tw_hold(&t, 4);
	tw_submit(&t, 2, 3, 0, NULL, toks, 110, &p, 0, NULL, 0);
	t0 = clock_ms_f();
	do {
		usleep(1000);
		worker_stats(t.w, &st);
	} while (st.lane_prompts < 3 && clock_ms_f() - t0 < 10000);
	ck_assert_uint_eq(st.lane_prompts, 3);
	t0 = clock_ms_f();
	tw_close(&t);
	ck_assert_msg(clock_ms_f() - t0 < 2000, "shutdown took %.0f ms",
	    clock_ms_f() - t0);
}
END_TEST
SUITE_TEST("batch", test_lane_cancel);

/* ---- a failing device -------------------------------------------------- */

/*
 * The worker's backend with its step_submit wrapped: the first batch of
 * two or more sequences fails as a device would, every other batch runs.
 */
static const struct be_ops *real_ops;
static struct be_ops faulty_ops;
static int faults;		/* batches failed so far */

static int
faulty_submit(struct backend *be, const struct step_batch *b,
    struct cp_err *e)
{
	if (b->n_seqs >= 2 && faults == 0) {
		faults++;
		return cp_err_set(e, -EIO, "injected device fault");
	}
	return real_ops->step_submit(be, b, e);
}

START_TEST(test_step_error)
{
	struct rec recs[3];
	struct ep_params p = greedy(30);
	struct worker_stats st;
	struct backend *be;
	struct tw t;
	int i;

	tw_new(&t, recs, 3, 32, 16, 4, 4 * N_CTX);
	be = worker_backend(t.w);
	real_ops = be->ops;
	faulty_ops = *real_ops;
	faulty_ops.step_submit = faulty_submit;
	be->ops = &faulty_ops;
	/* Both requests are queued before the worker starts, so they share
	 * its first steps however fast those are. */
	tw_text(&t, 0, ref_prompt, &p);
	tw_text(&t, 1, "Pixels", &p);
	ck_assert_int_eq(worker_start(t.w), 0);
	tw_drain(&t, -1, 20000);
	/* Both were in the failed batch: each ends with one ERROR, after
	 * the tokens of the steps before it. */
	for (i = 0; i < 2; i++) {
		ck_assert_uint_eq(recs[i].type, EP_EV_ERROR);
		ck_assert_int_eq(recs[i].error, -EIO);
		ck_assert_msg(memmem(recs[i].text, recs[i].text_len,
		    "injected device fault", 21) != NULL, "message '%.*s'",
		    (int)recs[i].text_len, recs[i].text);
		ck_assert_uint_eq(recs[i].n_gen, (uint32_t)recs[i].n_ids);
		ck_assert_int_lt(recs[i].n_ids, 30);
	}
	ck_assert(memcmp(recs[0].ids, ref_ids, (size_t)recs[0].n_ids *
	    sizeof(ref_ids[0])) == 0);
	ck_assert_int_eq(faults, 1);

	/* The worker goes on serving. */
	tw_text(&t, 2, ref_prompt, &p);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[2], CP_FINISH_LENGTH);
	assert_ids_eq(&recs[2], ref_ids, 30);
	worker_stats(t.w, &st);
	ck_assert_uint_eq(st.step_errors, 1);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("control", test_step_error);

/* ---- seeded sampling --------------------------------------------------- */

START_TEST(test_seeded_batch_invariance)
{
	static struct rec recs[12];
	struct ep_params p42 = seeded(48, 42), p43 = seeded(48, 43), g;
	struct tw t;
	int i, diff = 0;

	tw_open(&t, recs, 12, 32, 16, 8, 8 * N_CTX);
	tw_submit(&t, 0, 1, 0, ref_prompt, NULL, 0, &p42, EP_SUBMIT_SEED,
	    NULL, 0);
	tw_drain(&t, -1, 20000);
	tw_submit(&t, 1, 2, 0, ref_prompt, NULL, 0, &p42, EP_SUBMIT_SEED,
	    NULL, 0);
	tw_drain(&t, -1, 20000);
	assert_done(&recs[0], CP_FINISH_LENGTH);
	assert_same(&recs[1], &recs[0]);
	/* Another seed draws other tokens, so the seed is really used. */
	tw_submit(&t, 2, 3, 0, ref_prompt, NULL, 0, &p43, EP_SUBMIT_SEED,
	    NULL, 0);
	tw_drain(&t, -1, 20000);
	for (i = 0; i < 48; i++)
		diff += recs[2].ids[i] != recs[0].ids[i];
	ck_assert_int_gt(diff, 0);

	/* Batched among greedy, seeded and unseeded neighbours, chunked. */
	g = greedy(40);
	tw_submit(&t, 3, 10, 1, prompts[4], NULL, 0, &g, 0, NULL, 0);
	tw_submit(&t, 4, 11, 2, prompts[2], NULL, 0, &p43, EP_SUBMIT_SEED,
	    NULL, 0);
	tw_submit(&t, 5, 12, 3, prompts[6], NULL, 0, &p42, 0, NULL, 0);
	tw_submit(&t, 6, 13, 4, ref_prompt, NULL, 0, &p42, EP_SUBMIT_SEED,
	    NULL, 0);
	tw_submit(&t, 7, 14, 5, prompts[1], NULL, 0, &g, 0, NULL, 0);
	tw_drain(&t, -1, 30000);
	assert_same(&recs[6], &recs[0]);
	tw_check_clean(&t);
	tw_close(&t);
}
END_TEST
SUITE_TEST("batch", test_seeded_batch_invariance);

/*
 * Constrained requests (any JSON value, seeded) give the same tokens when
 * the worker keeps their matchers' caches and when it makes them give
 * their memory back after every step (grammar_bytes 1): the bound costs
 * time, never output.
 */
START_TEST(test_grammar_bound)
{
	static struct rec recs[2][4];
	struct worker_params p;
	struct worker_stats st;
	struct cp_err e = { 0 };
	struct ep_params g;
	struct tw t;
	int pass, i;

	for (pass = 0; pass < 2; pass++) {
		tw_load(&t);
		tw_params(&t, &p, 64, 16, 8, 8 * N_CTX);
		p.grammar_bytes = pass == 0 ? 0 : 1;
		ck_assert_msg(worker_new(&p, t.port, &t.w, &e) == 0, "%s",
		    e.msg);
		ck_assert_int_eq(worker_start(t.w), 0);
		t.recs = recs[pass];
		t.n_recs = 4;
		for (i = 0; i < 4; i++) {
			g = seeded(48, 7 + (uint64_t)i);
			g.grammar = CP_GRAM_JSON;
			tw_submit(&t, i, 20 + (uint64_t)i, (uint32_t)i,
			    prompts[i], NULL, 0, &g, EP_SUBMIT_SEED, NULL, 0);
		}
		tw_drain(&t, -1, 30000);
		worker_stats(t.w, &st);
		if (pass == 0)
			ck_assert_uint_eq(st.grammar_trims, 0);
		else
			ck_assert_uint_gt(st.grammar_trims, 0);
		tw_check_clean(&t);
		tw_close(&t);
	}
	for (i = 0; i < 4; i++) {
		ck_assert_int_gt(recs[0][i].n_ids, 0);
		ck_assert_uint_eq(recs[0][i].type, EP_EV_DONE);
		assert_same(&recs[1][i], &recs[0][i]);
	}
}
END_TEST
SUITE_TEST("batch", test_grammar_bound);

SUITE_CASE("reference", 60);
SUITE_CASE("batch", 60);
SUITE_CASE("control", 60);
SUITE_CASE("output", 60);

int
main(void)
{
	return fx_main("worker", "aidreams260K.gguf");
}
