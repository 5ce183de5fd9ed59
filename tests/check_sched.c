/*
 * check_sched.c - the step scheduler: configuration, submission errors,
 * hand-worked plans for each rule of DESIGN.md's "Scheduler" section, and
 * a simulator that drives random workloads (fixed seeds) through
 * sched_step/sched_commit, mirrors every plan into the engine's paged KV
 * cache and checks the invariants of sched.c against its own model of
 * each request.  Expected plans are derived by hand from the rules in
 * DESIGN.md and sched.c, never from output of the code under test.
 */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "lib/suite.h"
#include "sched.h"
#include "ttype.h"


/* ---- helpers ------------------------------------------------------------- */

static struct sched *
mk(struct sched_config c)
{
	struct cp_err e = { 0 };
	struct sched *s = NULL;

	ck_assert_msg(sched_new(&c, &s, &e) == 0, "%s", e.msg);
	ck_assert_ptr_nonnull(s);
	return s;
}

static void
ok(const struct sched *s)
{
	struct cp_err e = { 0 };

	ck_assert_msg(sched_check(s, &e) == 0, "%s", e.msg);
}

static int
add_req(struct sched *s, int client, int n_prompt, int max_tokens,
    bool held)
{
	struct sched_request q = {
		.client = client, .req_id = 1000 + (uint64_t)client,
		.n_prompt = n_prompt, .max_tokens = max_tokens, .held = held,
	};
	struct cp_err e = { 0 };
	int h = sched_add(s, &q, &e);

	ck_assert_msg(h >= 0, "sched_add: %d %s", h, e.msg);
	return h;
}

static int
add(struct sched *s, int client, int n_prompt, int max_tokens)
{
	return add_req(s, client, n_prompt, max_tokens, false);
}

/* Queue a request held, as for the prefill lane. */
static int
add_held(struct sched *s, int client, int n_prompt, int max_tokens)
{
	return add_req(s, client, n_prompt, max_tokens, true);
}

static void
step(struct sched *s, struct sched_plan *p)
{
	ck_assert_int_eq(sched_step(s, p), 0);
}

static void
commit(struct sched *s, struct sched_plan *p)
{
	ck_assert_int_eq(sched_commit(s, p), 0);
	ok(s);
}

/* Index of h among p's releases (rel) or items (!rel), or -1. */
static int
find(const struct sched_plan *p, int h, bool rel)
{
	int k;

	for (k = 0; k < (rel ? p->n_rel : p->n_items); k++)
		if ((rel ? p->rel[k].req : p->items[k].req) == h)
			return k;
	return -1;
}

/* An expected item: handle, first position, tokens, logits row. */
struct want {
	int h, pos, n;
	bool logits;
};

/* p has n_rel releases and exactly the n items w, in that order. */
static void
plan_is(const struct sched_plan *p, int n_rel, int n, const struct want *w)
{
	int k, sum = 0;

	ck_assert_int_eq(p->n_rel, n_rel);
	ck_assert_int_eq(p->n_items, n);
	for (k = 0; k < n; k++) {
		ck_assert_int_eq(p->items[k].req, w[k].h);
		ck_assert_int_eq(p->items[k].pos, w[k].pos);
		ck_assert_int_eq(p->items[k].n, w[k].n);
		ck_assert_int_eq(p->items[k].logits, w[k].logits);
		ck_assert_int_eq(p->items[k].finish, SCHED_RUN);
		sum += w[k].n;
	}
	ck_assert_int_eq(p->n_tokens, sum);
}

/* Release k of p frees h, for why, with n_gen tokens kept. */
static void
rel_is(const struct sched_plan *p, int k, int h, int why, int n_gen)
{
	ck_assert_int_ge(k, 0);
	ck_assert_int_lt(k, p->n_rel);
	ck_assert_int_eq(p->rel[k].req, h);
	ck_assert_int_eq(p->rel[k].why, why);
	ck_assert_int_eq(p->rel[k].n_gen, n_gen);
}

static struct sched_req_info
info(const struct sched *s, int h)
{
	struct sched_req_info i;

	ck_assert_int_eq(sched_req_info(s, h, &i), 0);
	return i;
}

static int
free_blocks(const struct sched *s)
{
	struct sched_stats st;

	sched_stats(s, &st);
	return st.kv_free;
}

/* ---- configuration ------------------------------------------------------- */

START_TEST(test_config_defaults)
{
	struct sched_config c = { .kv_total_blocks = 1000, .n_ctx = 4096 };
	const struct sched_config *r;
	struct sched *s = mk(c);

	r = sched_config(s);
	ck_assert_int_eq(r->max_batch_tokens, 512);
	ck_assert_int_eq(r->max_prefill_chunk, 512);
	ck_assert_int_eq(r->max_seqs, 64);
	ck_assert_int_eq(r->max_requests, 1024);
	ck_assert_int_eq(r->max_clients, 256);
	ck_assert_int_eq(r->kv_block_tokens, 16);
	ck_assert_int_eq(r->kv_watermark_blocks, 10);	/* 1% of 1000 */
	ck_assert_int_eq(r->n_ctx, 4096);
	ck_assert_int_eq(free_blocks(s), 1000);
	sched_free(s);
	/* chunk follows the budget; max_seqs clamps to it; watermark >= 1 */
	c = (struct sched_config){ .max_batch_tokens = 32,
	    .kv_total_blocks = 50, .n_ctx = 64 };
	s = mk(c);
	r = sched_config(s);
	ck_assert_int_eq(r->max_prefill_chunk, 32);
	ck_assert_int_eq(r->max_seqs, 32);
	ck_assert_int_eq(r->kv_watermark_blocks, 1);
	sched_free(s);
	/* a one-block pool keeps no watermark; -1 asks for none */
	c = (struct sched_config){ .kv_total_blocks = 1, .n_ctx = 16 };
	s = mk(c);
	ck_assert_int_eq(sched_config(s)->kv_watermark_blocks, 0);
	sched_free(s);
	c.kv_total_blocks = 500;
	c.kv_watermark_blocks = SCHED_NO_WATERMARK;
	s = mk(c);
	ck_assert_int_eq(sched_config(s)->kv_watermark_blocks, 0);
	sched_free(s);
	sched_free(NULL);
}
END_TEST
SUITE_TEST("plans", test_config_defaults);

START_TEST(test_config_errors)
{
	/* one bad field at a time on top of a valid configuration */
#define BAD(f, v)	{ #f, offsetof(struct sched_config, f), v }
	static const struct {
		const char *field;
		size_t off;
		int v;
	} bad[] = {
		BAD(max_batch_tokens, -1),
		BAD(max_batch_tokens, SCHED_MAX_BATCH + 1),
		BAD(max_prefill_chunk, 65),	/* > max_batch_tokens */
		BAD(max_prefill_chunk, -3),
		BAD(max_seqs, 65),		/* > max_batch_tokens */
		BAD(max_requests, SCHED_MAX_REQUESTS + 1),
		BAD(max_clients, -2),
		BAD(kv_block_tokens, SCHED_MAX_BLOCK_TOKENS + 1),
		BAD(kv_block_tokens, -16),
		BAD(kv_total_blocks, 0),
		BAD(kv_total_blocks, (SCHED_MAX_KV_TOKENS / 16) + 1),
		BAD(n_ctx, 0),
		BAD(n_ctx, 1),
		BAD(n_ctx, SCHED_MAX_CTX + 1),
		BAD(kv_watermark_blocks, 8),	/* == kv_total_blocks */
		BAD(kv_watermark_blocks, -2),
	};
#undef BAD
	const struct sched_config base = { .max_batch_tokens = 64,
	    .kv_block_tokens = 16, .kv_total_blocks = 8, .n_ctx = 64 };
	struct sched_config c;
	struct cp_err e;
	struct sched *s;
	size_t i;

	sched_free(mk(base));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = base;
		memcpy((char *)&c + bad[i].off, &bad[i].v, sizeof(int));
		memset(&e, 0, sizeof(e));
		s = (struct sched *)&e;
		ck_assert_int_eq(sched_new(&c, &s, &e), -EINVAL);
		ck_assert_ptr_null(s);
		ck_assert_int_eq(e.code, -EINVAL);
		ck_assert_msg(strstr(e.msg, bad[i].field) != NULL,
		    "case %zu: \"%s\" does not name %s", i, e.msg,
		    bad[i].field);
	}
	/* a NULL error pointer is accepted */
	ck_assert_int_eq(sched_new(&c, &s, NULL), -EINVAL);
}
END_TEST
SUITE_TEST("plans", test_config_errors);

static void
add_fails(struct sched *s, int client, int n_prompt, int max_tokens,
    int rc, const char *msg)
{
	struct sched_request q = { .client = client, .n_prompt = n_prompt,
	    .max_tokens = max_tokens };
	struct cp_err e = { 0 };

	ck_assert_int_eq(sched_add(s, &q, &e), rc);
	ck_assert_int_eq(e.code, rc);
	ck_assert_msg(strstr(e.msg, msg) != NULL, "\"%s\" lacks \"%s\"",
	    e.msg, msg);
	ck_assert_int_eq(sched_add(s, &q, NULL), rc);
}

START_TEST(test_add_errors)
{
	struct sched_config c = { .kv_block_tokens = 16, .kv_total_blocks = 5,
	    .n_ctx = 100, .max_clients = 4, .max_requests = 3 };
	struct sched *s = mk(c);
	int h;

	add_fails(s, 0, 0, 10, -EINVAL, "empty prompt");
	add_fails(s, 0, -5, 10, -EINVAL, "empty prompt");
	add_fails(s, 0, 10, 0, -EINVAL, "max_tokens");
	add_fails(s, 4, 10, 10, -EINVAL, "client 4");
	add_fails(s, -1, 10, 10, -EINVAL, "client -1");
	/* context: 70 + 31 = 101 > 100 is refused, never truncated */
	add_fails(s, 0, 70, 31, -E2BIG, "context of 100");
	add_fails(s, 0, 2000000000, 2000000000, -E2BIG, "context of 100");
	/* pool: 5 blocks of 16 = 80 tokens; 70 + 11 = 81 needs 6 */
	add_fails(s, 0, 70, 11, -E2BIG, "6 KV blocks");
	/* 70 + 10 = 80 fits the whole pool exactly */
	h = add(s, 0, 70, 10);
	ck_assert_int_eq(info(s, h).state, SCHED_WAITING);
	ck_assert_int_eq(info(s, h).n_prompt, 70);
	ck_assert_int_eq(info(s, h).max_tokens, 10);
	/* a table of 3 */
	add(s, 1, 1, 1);
	add(s, 2, 1, 1);
	add_fails(s, 3, 1, 1, -ENOSPC, "3 requests");
	ok(s);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_add_errors);

/* Dead handles are refused, also once their slot holds a new request. */
START_TEST(test_dead_handles)
{
	struct sched_config c = { .kv_total_blocks = 64, .n_ctx = 256,
	    .max_requests = 1 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_plan p;
	int a = add(s, 0, 4, 1), b;

	ck_assert_int_eq(sched_req_info(s, -1, &ri), -ENOENT);
	ck_assert_int_eq(sched_req_info(s, 0x7fffffff, &ri), -ENOENT);
	ck_assert_int_eq(sched_cancel(s, 5), -ENOENT);
	step(s, &p);
	commit(s, &p);
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	b = add(s, 1, 4, 1);
	ck_assert_int_ne(a, b);
	ck_assert_int_eq(sched_req_info(s, a, &ri), -ENOENT);
	ck_assert_int_eq(sched_cancel(s, a), -ENOENT);
	ck_assert_int_eq(sched_pause(s, a, true), -ENOENT);
	ck_assert(!info(s, b).paused && !info(s, b).cancelled);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_dead_handles);

/* ---- plans worked by hand ------------------------------------------------ */

/* One 1000-token prompt, budget 256: chunks of 256 then decodes. */
START_TEST(test_chunked_prefill)
{
	struct sched_config c = { .max_batch_tokens = 256, .max_seqs = 4,
	    .kv_block_tokens = 16, .kv_total_blocks = 100, .n_ctx = 2048 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int h = add(s, 0, 1000, 3), k;
	static const int pos[] = { 0, 256, 512, 768, 1000, 1001 };
	static const int n[] = { 256, 256, 256, 232, 1, 1 };
	/* blocks after each step: ceil((pos + n) / 16) */
	static const int blocks[] = { 16, 32, 48, 63, 63, 63 };

	for (k = 0; k < 6; k++) {
		step(s, &p);
		ck_assert_int_eq(p.step, (uint64_t)k + 1);
		plan_is(&p, 0, 1, (struct want[]){ { h, pos[k], n[k],
		    k >= 3 } });
		ck_assert_int_eq(p.n_decode, k >= 4 ? 1 : 0);
		ck_assert_uint_eq(p.items[0].req_id, 1000);
		ck_assert_int_eq(info(s, h).n_blocks, blocks[k]);
		ck_assert_int_eq(free_blocks(s), 100 - blocks[k]);
		commit(s, &p);
		if (k == 5)
			break;
		ck_assert_int_eq(p.items[0].finish, SCHED_RUN);
		ck_assert_int_eq(info(s, h).state,
		    k < 3 ? SCHED_PREFILLING : SCHED_DECODING);
		ck_assert_int_eq(info(s, h).n_computed, pos[k] + n[k]);
		ck_assert_int_eq(info(s, h).n_gen, k < 3 ? 0 : k - 2);
	}
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(free_blocks(s), 100);
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_chunked_prefill);

/*
 * Three short requests decode while a 200-token prompt arrives: the
 * decodes come first, the prompt gets the rest of the 64-token budget,
 * 61 tokens a step, and its last 17 tokens carry the logits.
 */
START_TEST(test_decode_first)
{
	struct sched_config c = { .max_batch_tokens = 64, .max_seqs = 8,
	    .kv_total_blocks = 200, .n_ctx = 512 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a = add(s, 0, 4, 10), b = add(s, 1, 4, 10), d = add(s, 2, 4, 10);
	int big, k;

	step(s, &p);
	plan_is(&p, 0, 3, (struct want[]){ { a, 0, 4, 1 }, { b, 0, 4, 1 },
	    { d, 0, 4, 1 } });
	ck_assert_int_eq(p.n_decode, 0);
	commit(s, &p);
	big = add(s, 3, 200, 5);
	for (k = 0; k < 4; k++) {
		step(s, &p);
		plan_is(&p, 0, 4, (struct want[]){ { a, 4 + k, 1, 1 },
		    { b, 4 + k, 1, 1 }, { d, 4 + k, 1, 1 },
		    { big, 61 * k, k < 3 ? 61 : 17, k == 3 } });
		ck_assert_int_eq(p.n_decode, 3);
		commit(s, &p);
	}
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_decode_first);

/* max_prefill_chunk 30 caps every prompt's share of a 100-token budget. */
START_TEST(test_chunk_cap)
{
	struct sched_config c = { .max_batch_tokens = 100,
	    .max_prefill_chunk = 30, .max_seqs = 4, .kv_total_blocks = 100,
	    .n_ctx = 512 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a = add(s, 0, 70, 2), b = add(s, 1, 70, 2), d;

	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 0, 30, 0 }, { b, 0, 30, 0 } });
	commit(s, &p);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 30, 30, 0 },
	    { b, 30, 30, 0 } });
	commit(s, &p);
	d = add(s, 2, 50, 2);
	step(s, &p);
	plan_is(&p, 0, 3, (struct want[]){ { a, 60, 10, 1 }, { b, 60, 10, 1 },
	    { d, 0, 30, 0 } });
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_chunk_cap);

/*
 * attention_cost_tokens 100: a prompt token at position p costs
 * 1 + p / 100 of the budget (the chunk's sum rounded up), so a long
 * prompt's chunks shrink as it goes; a decode token costs 1.  The chunk
 * sizes below are worked out by hand from that rule.
 */
START_TEST(test_attention_cost)
{
	struct sched_config c = { .max_batch_tokens = 20, .max_seqs = 4,
	    .kv_total_blocks = 100, .n_ctx = 512,
	    .attention_cost_tokens = 100 };
	struct sched_config c2 = { .max_batch_tokens = 4, .max_seqs = 2,
	    .kv_total_blocks = 10, .n_ctx = 64, .attention_cost_tokens = 2 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a = add(s, 0, 300, 2), b;

	/* 18 + ceil(153 / 100) = 20 (19 tokens would cost 21): nothing is
	 * left for b */
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { a, 0, 18, 0 } });
	commit(s, &p);
	b = add(s, 1, 1, 5);
	/* 15 + ceil((15 * 18 + 105) / 100) = 19 (16 would cost 21); b's
	 * one prompt token takes the last */
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 18, 15, 0 }, { b, 0, 1, 1 } });
	commit(s, &p);
	/* b's decode leaves 19: 13 + ceil((13 * 33 + 78) / 100) = 19 (14
	 * would cost 20) */
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { b, 1, 1, 1 }, { a, 33, 13, 0 } });
	commit(s, &p);
	sched_free(s);

	/* a chunk keeps at least one token when one alone costs more than
	 * the budget: 2 + ceil(1 / 2) = 3, then one token a step */
	s = mk(c2);
	a = add(s, 0, 20, 1);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { a, 0, 2, 0 } });
	commit(s, &p);
	for (int k = 2; k < 20; k++) {
		step(s, &p);
		plan_is(&p, 0, 1, (struct want[]){ { a, k, 1, k == 19 } });
		commit(s, &p);
	}
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_attention_cost);

/* max_seqs 2: five 3-step requests run two at a time, in 3 rounds. */
START_TEST(test_max_seqs)
{
	struct sched_config c = { .max_batch_tokens = 64, .max_seqs = 2,
	    .kv_total_blocks = 100, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int k, h[5];

	for (k = 0; k < 5; k++)
		h[k] = add(s, k, 2, 3);
	for (k = 0; k < 9; k++) {
		step(s, &p);
		/* rounds start at steps 0, 3, 6 with h[0..1], h[2..3], h[4] */
		ck_assert_int_eq(p.n_items, k < 6 ? 2 : 1);
		ck_assert_int_eq(p.items[0].req, h[k / 3 * 2]);
		ck_assert_int_eq(p.items[0].pos, k % 3 ? 1 + k % 3 : 0);
		commit(s, &p);
	}
	ck_assert_int_eq(free_blocks(s), 100);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_max_seqs);

/*
 * Round-robin: client 0 queues 4 requests, then client 1 four, then client
 * 2 four.  Each prompt takes the whole budget and finishes in its
 * admission step, so one request is admitted per step, and the order
 * must alternate 0, 1, 2, 0, 1, 2, ... with FCFS inside each client.
 * Client 3, arriving when the rotation stands at 1, 2, 0, is served after
 * those three.
 */
START_TEST(test_round_robin)
{
	struct sched_config c = { .max_batch_tokens = 8, .max_seqs = 8,
	    .kv_total_blocks = 100, .n_ctx = 64 };
	/* expected admissions as (client, index); client 3 has one */
	static const int order[][2] = {
		{ 0, 0 }, { 1, 0 }, { 2, 0 }, { 0, 1 },
		{ 1, 1 }, { 2, 1 }, { 0, 2 }, { 3, 0 }, { 1, 2 }, { 2, 2 },
		{ 0, 3 }, { 1, 3 }, { 2, 3 },
	};
	struct sched *s = mk(c);
	struct sched_plan p;
	int h[4][4], k, cl;

	for (cl = 0; cl < 3; cl++)
		for (k = 0; k < 4; k++)
			h[cl][k] = add(s, cl, 8, 1);
	for (k = 0; k < 13; k++) {
		if (k == 4)
			h[3][0] = add(s, 3, 8, 1);
		step(s, &p);
		plan_is(&p, 0, 1, (struct want[]){
		    { h[order[k][0]][order[k][1]], 0, 8, 1 } });
		commit(s, &p);
		ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	}
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_round_robin);

/*
 * Three requests (prompt 4, 12 tokens each) decode in a pool of 6 blocks
 * of 4 tokens, without watermark.
 * steps 1-5: a, b, d prefill then decode up to position 7 (2 blocks each)
 * step 6:  each needs a 3rd block, none is free: the newest, d, is
 *          preempted and keeps its 5 tokens; a and b get its blocks
 * step 10: a and b need a 4th block: b, now the newest, is preempted
 * step 13: a has ended; d (9 positions, 3 blocks) fits again and is
 *          re-prefilled over prompt + generated, 4 + 5 positions, the last
 *          with logits; b (13 positions, 4 blocks) does not fit yet
 * steps 14-19: d decodes its remaining 6 tokens, 12 in all
 */
START_TEST(test_preempt_newest_recompute)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_block_tokens = 4, .kv_total_blocks = 6,
	    .kv_watermark_blocks = SCHED_NO_WATERMARK, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a = add(s, 0, 4, 12), b = add(s, 1, 4, 12), d = add(s, 2, 4, 12);
	int t, pos;

	for (t = 1; t <= 19; t++) {
		step(s, &p);
		pos = t + 2;	/* a's and b's decode position */
		if (t <= 5)
			plan_is(&p, 0, 3, (struct want[]){ { a, t > 1 ? pos : 0,
			    t > 1 ? 1 : 4, 1 }, { b, t > 1 ? pos : 0,
			    t > 1 ? 1 : 4, 1 }, { d, t > 1 ? pos : 0,
			    t > 1 ? 1 : 4, 1 } });
		else if (t <= 9)
			plan_is(&p, t == 6, 2, (struct want[]){
			    { a, pos, 1, 1 }, { b, pos, 1, 1 } });
		else if (t <= 12)
			plan_is(&p, t == 10, 1, (struct want[]){ { a, pos, 1,
			    1 } });
		else
			plan_is(&p, 0, 1, (struct want[]){ { d, t > 13 ?
			    t - 5 : 0, t > 13 ? 1 : 9, 1 } });
		if (t == 6) {
			rel_is(&p, 0, d, SCHED_REL_PREEMPT, 5);
			ck_assert_int_eq(info(s, d).state, SCHED_WAITING);
			ck_assert_int_eq(info(s, d).n_blocks, 0);
			ck_assert_int_eq(info(s, d).n_computed, 0);
			ck_assert_int_eq(info(s, d).n_gen, 5);
			ck_assert_int_eq(info(s, d).n_preempt, 1);
		}
		if (t == 10)
			rel_is(&p, 0, b, SCHED_REL_PREEMPT, 9);
		commit(s, &p);
		ck_assert_int_eq(p.items[0].finish, t == 12 || t == 19 ?
		    SCHED_FIN_LENGTH : SCHED_RUN);
	}
	ck_assert_int_eq(info(s, b).n_gen, 9);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_preempt_newest_recompute);

/*
 * An older prefill that needs a block preempts a newer request that the
 * decode phase had already planned: the decode leaves the plan.
 *   r: prompt 16 (5 blocks of 4 with its token), chunks of 4
 *   d: prompt 2, decoding from step 2; pool of 5 blocks
 * step 1: r [0,4) 1 block, d [0,2) 1 block         free 3
 * step 2: d pos 2, r [4,8) -> 2 blocks            free 2
 * step 3: d pos 3, r [8,12) -> 3 blocks           free 1
 * step 4: d pos 4 takes the last block; r [12,16) needs one more: d is
 *         preempted (unplanned), r runs alone and ends
 * step 5, 6: d again over prompt + 3 generated = 5 positions
 */
START_TEST(test_prefill_preempts_planned_decode)
{
	struct sched_config c = { .max_batch_tokens = 8,
	    .max_prefill_chunk = 4, .max_seqs = 2, .kv_block_tokens = 4,
	    .kv_total_blocks = 5, .kv_watermark_blocks = SCHED_NO_WATERMARK,
	    .n_ctx = 32 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int r = add(s, 0, 16, 1), d = add(s, 1, 2, 6), k;

	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { r, 0, 4, 0 }, { d, 0, 2, 1 } });
	commit(s, &p);
	for (k = 2; k <= 3; k++) {
		step(s, &p);
		plan_is(&p, 0, 2, (struct want[]){ { d, k, 1, 1 },
		    { r, 4 * (k - 1), 4, 0 } });
		ck_assert_int_eq(p.n_decode, 1);
		commit(s, &p);
	}
	step(s, &p);
	plan_is(&p, 1, 1, (struct want[]){ { r, 12, 4, 1 } });
	rel_is(&p, 0, d, SCHED_REL_PREEMPT, 3);
	ck_assert_int_eq(p.n_decode, 0);
	ck_assert_int_eq(free_blocks(s), 1);
	commit(s, &p);
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(free_blocks(s), 5);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { d, 0, 4, 0 } });
	commit(s, &p);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { d, 4, 1, 1 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, d).n_gen, 4);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_prefill_preempts_planned_decode);

/*
 * Watermark 3 of 10 blocks of 4 tokens.  a (20 tokens, 5 blocks) enters
 * the empty pool; b (8 tokens, 2 blocks) fits the 5 - 3 blocks above the
 * watermark; d (1 block) does not, nor does e behind it, until a and b
 * have ended.  Decodes may dip into the watermark; admissions may not.
 * Then a request that needs the whole pool is admitted when it is empty.
 */
START_TEST(test_watermark)
{
	struct sched_config c = { .max_batch_tokens = 64, .max_seqs = 8,
	    .kv_block_tokens = 4, .kv_total_blocks = 10,
	    .kv_watermark_blocks = 3, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a = add(s, 0, 20, 4), b = add(s, 1, 8, 4), d = add(s, 2, 4, 1);
	int e = add(s, 3, 1, 1), k;

	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 0, 20, 1 }, { b, 0, 8, 1 } });
	ck_assert_int_eq(free_blocks(s), 3);
	commit(s, &p);
	for (k = 0; k < 3; k++) {
		step(s, &p);
		plan_is(&p, 0, 2, (struct want[]){ { a, 20 + k, 1, 1 },
		    { b, 8 + k, 1, 1 } });
		ck_assert_int_eq(free_blocks(s), 1);
		commit(s, &p);
	}
	ck_assert_int_eq(free_blocks(s), 10);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { d, 0, 4, 1 }, { e, 0, 1, 1 } });
	commit(s, &p);
	sched_free(s);

	/* a request needing the whole pool (4 of 4 blocks) runs alone */
	c.kv_total_blocks = 4;
	s = mk(c);
	a = add(s, 0, 12, 4);
	b = add(s, 1, 4, 4);
	for (k = 0; k < 4; k++) {
		step(s, &p);
		plan_is(&p, 0, 1, (struct want[]){ { a, k ? 11 + k : 0,
		    k ? 1 : 12, 1 } });
		commit(s, &p);
	}
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { b, 0, 4, 1 } });
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_watermark);

/*
 * The newest request shrinks its chunk rather than preempt older ones,
 * and yields when not one token fits.  Blocks of 4, pool of 7, chunks of
 * 8; a1 and a2 (prompt 4) decode, b (prompt 20) prefills:
 * step 1: a1 [0,4) a2 [0,4) b [0,8)                 free 7-1-1-2 = 3
 * step 2: a1, a2 cross into their 2nd block          free 1
 *         b wants [8,16) (2 blocks), gets [8,12)     free 0
 * step 3: b needs a block, none free, it is the newest: preempted
 * steps 4-8: b's 5 blocks never fit beside a1 and a2, which end at 8
 * step 9: b starts again at 0
 */
START_TEST(test_newest_shrinks_then_yields)
{
	struct sched_config c = { .max_batch_tokens = 64,
	    .max_prefill_chunk = 8, .max_seqs = 4, .kv_block_tokens = 4,
	    .kv_total_blocks = 7, .kv_watermark_blocks = SCHED_NO_WATERMARK,
	    .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a1 = add(s, 0, 4, 8), a2 = add(s, 1, 4, 8), b = add(s, 2, 20, 1);
	int t;

	step(s, &p);
	plan_is(&p, 0, 3, (struct want[]){ { a1, 0, 4, 1 }, { a2, 0, 4, 1 },
	    { b, 0, 8, 0 } });
	commit(s, &p);
	step(s, &p);
	plan_is(&p, 0, 3, (struct want[]){ { a1, 4, 1, 1 }, { a2, 4, 1, 1 },
	    { b, 8, 4, 0 } });
	ck_assert_int_eq(free_blocks(s), 0);
	commit(s, &p);
	for (t = 3; t <= 8; t++) {
		step(s, &p);
		plan_is(&p, t == 3, 2, (struct want[]){ { a1, t + 2, 1, 1 },
		    { a2, t + 2, 1, 1 } });
		if (t == 3)
			rel_is(&p, 0, b, SCHED_REL_PREEMPT, 0);
		commit(s, &p);
	}
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(p.items[1].finish, SCHED_FIN_LENGTH);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { b, 0, 8, 0 } });
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_newest_shrinks_then_yields);

START_TEST(test_cancel_mid_prefill)
{
	struct sched_config c = { .max_batch_tokens = 32,
	    .max_prefill_chunk = 8, .max_seqs = 4, .kv_block_tokens = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_plan p;
	int a = add(s, 0, 30, 4), b;

	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { a, 0, 8, 0 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, a).state, SCHED_PREFILLING);
	ck_assert_int_eq(sched_cancel(s, a), 0);
	ck_assert_int_eq(sched_cancel(s, a), 0);	/* twice is fine */
	ck_assert(info(s, a).cancelled);
	ck_assert_int_eq(free_blocks(s), 18);	/* takes effect at the step */
	ok(s);
	b = add(s, 1, 4, 1);
	step(s, &p);
	plan_is(&p, 1, 1, (struct want[]){ { b, 0, 4, 1 } });
	rel_is(&p, 0, a, SCHED_REL_CANCEL, 0);
	ck_assert_int_eq(sched_req_info(s, a, &ri), -ENOENT);
	ck_assert_int_eq(sched_cancel(s, a), -ENOENT);
	ck_assert_int_eq(free_blocks(s), 19);
	commit(s, &p);
	ck_assert_int_eq(free_blocks(s), 20);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_cancel_mid_prefill);

/*
 * Cancels asked between sched_step and sched_commit wait for the next
 * step; one whose request finishes at that commit simply vanishes.
 * A dead client's requests, cancelled one by one as the worker does, go
 * in one step.
 */
START_TEST(test_cancel_during_step)
{
	struct sched_config c = { .max_batch_tokens = 32, .max_seqs = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_stats st;
	struct sched_plan p;
	int a = add(s, 0, 4, 5), b = add(s, 1, 4, 1), w;

	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 0, 4, 1 }, { b, 0, 4, 1 } });
	w = add(s, 2, 4, 5);	/* queued while a step is open */
	ck_assert_int_eq(sched_cancel(s, a), 0);
	ck_assert_int_eq(sched_cancel(s, b), 0);
	ck_assert_int_eq(sched_cancel(s, w), 0);
	commit(s, &p);
	ck_assert_int_eq(p.items[1].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(info(s, a).n_gen, 1);
	step(s, &p);
	plan_is(&p, 2, 0, NULL);
	rel_is(&p, find(&p, a, true), a, SCHED_REL_CANCEL, 1);
	rel_is(&p, find(&p, w, true), w, SCHED_REL_CANCEL, 0);
	commit(s, &p);
	sched_stats(s, &st);
	ck_assert_int_eq(st.n_live, 0);
	ck_assert_int_eq(st.kv_free, 20);
	ck_assert_uint_eq(st.cancelled, 2);
	ck_assert_uint_eq(st.finished, 1);

	/* a dead client: all its requests, running or queued, go at once */
	a = add(s, 0, 4, 5);
	b = add(s, 0, 4, 5);
	w = add(s, 1, 4, 5);
	step(s, &p);
	commit(s, &p);
	ck_assert_int_eq(sched_cancel(s, a), 0);
	ck_assert_int_eq(sched_cancel(s, b), 0);
	step(s, &p);
	plan_is(&p, 2, 1, (struct want[]){ { w, 4, 1, 1 } });
	rel_is(&p, find(&p, a, true), a, SCHED_REL_CANCEL, 1);
	rel_is(&p, find(&p, b, true), b, SCHED_REL_CANCEL, 1);
	commit(s, &p);
	ck_assert_int_eq(free_blocks(s), 19);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_cancel_during_step);

/*
 * a, paused while decoding, is not planned and keeps its KV; w1, paused
 * while waiting, is passed over by w2 of the same client.
 */
START_TEST(test_pause)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int a = add(s, 0, 4, 5), w1, w2;

	step(s, &p);
	commit(s, &p);
	ck_assert_int_eq(sched_pause(s, a, true), 0);
	w1 = add(s, 1, 4, 1);
	w2 = add(s, 1, 4, 1);
	ck_assert_int_eq(sched_pause(s, w1, true), 0);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { w2, 0, 4, 1 } });
	ck_assert_int_eq(info(s, a).n_blocks, 1);
	commit(s, &p);
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	ck_assert(info(s, a).paused);
	ck_assert_int_eq(info(s, w1).state, SCHED_WAITING);
	ck_assert_int_eq(sched_pause(s, a, false), 0);
	ck_assert_int_eq(sched_pause(s, w1, false), 0);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 4, 1, 1 }, { w1, 0, 4, 1 } });
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_pause);

/* ---- held requests (the prefill lane) ------------------------------------ */

/*
 * h, queued held, is never planned; b, queued after it by the same client,
 * is admitted past it and decodes to its end (3 tokens in steps 1-3).  A
 * hold cleared with n_cached 0 is an ordinary prefill from position 0.
 */
/*
 * sched_hold() takes a prefilling request back between steps.  Blocks of
 * 4, pool of 20, chunks of 8: h (prompt 30) is admitted with [0, 8), 2
 * blocks; held after the commit, it holds none and is not planned; after
 * sched_unhold(20) its item is [20, 28), ceil(28 / 4) = 7 blocks.  A
 * decoding request, a waiting one, a held one, an open plan and a dead
 * handle are refused.
 */
START_TEST(test_hold_prefilling)
{
	struct sched_config c = { .max_batch_tokens = 16,
	    .max_prefill_chunk = 8, .max_seqs = 4, .kv_block_tokens = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_stats st;
	struct sched_plan p;
	int h = add(s, 0, 30, 4), d = add(s, 1, 2, 8), w;

	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { h, 0, 8, 0 }, { d, 0, 2, 1 } });
	ck_assert_int_eq(sched_hold(s, h), -EINVAL);	/* plan open */
	commit(s, &p);
	ck_assert_int_eq(info(s, h).n_blocks, 2);
	ck_assert_int_eq(sched_hold(s, d), -EINVAL);	/* decoding */
	ck_assert_int_eq(sched_hold(s, h), 0);
	ok(s);
	ck_assert_int_eq(info(s, h).state, SCHED_WAITING);
	ck_assert(info(s, h).held);
	ck_assert_int_eq(info(s, h).n_blocks, 0);
	ck_assert_int_eq(info(s, h).n_computed, 0);
	ck_assert_int_eq(sched_hold(s, h), -EINVAL);	/* held */
	sched_stats(s, &st);
	ck_assert_int_eq(st.kv_free, 20 - 1);		/* d: 3 positions */
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { d, 2, 1, 1 } });
	commit(s, &p);
	ck_assert_int_eq(sched_unhold(s, h, 20), 0);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { d, 3, 1, 1 }, { h, 20, 8, 0 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, h).n_blocks, 7);
	ck_assert_int_eq(info(s, h).n_computed, 28);
	ok(s);
	w = add(s, 2, 4, 2);
	ck_assert_int_eq(sched_hold(s, w), -EINVAL);	/* waiting */
	ck_assert_int_eq(sched_cancel(s, w), 0);
	step(s, &p);
	commit(s, &p);
	ck_assert_int_eq(sched_hold(s, w), -ENOENT);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_hold_prefilling);

START_TEST(test_held_skipped)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_stats st;
	struct sched_plan p;
	int h = add_held(s, 0, 8, 4), b = add(s, 0, 4, 3), t;

	ck_assert(info(s, h).held);
	ck_assert(!info(s, b).held);
	for (t = 1; t <= 4; t++) {
		step(s, &p);
		if (t == 1)
			plan_is(&p, 0, 1, (struct want[]){ { b, 0, 4, 1 } });
		else if (t <= 3)
			plan_is(&p, 0, 1, (struct want[]){ { b, t + 2, 1,
			    1 } });
		else
			plan_is(&p, 0, 0, NULL);
		commit(s, &p);
		if (t == 3)
			ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
		ck_assert_int_eq(info(s, h).state, SCHED_WAITING);
		ck_assert(info(s, h).held && !info(s, h).paused);
		ck_assert_int_eq(info(s, h).n_blocks, 0);
		ck_assert_int_eq(info(s, h).n_cached, 0);
	}
	sched_stats(s, &st);
	ck_assert_int_eq(st.n_waiting, 1);
	ck_assert_int_eq(st.kv_free, 20);
	ck_assert_int_eq(sched_unhold(s, h, 0), 0);
	ok(s);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h, 0, 8, 1 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, h).n_computed, 8);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_held_skipped);

/*
 * Round-robin with a held request at the head of client 0's queue: each
 * 8-token prompt takes the whole budget and ends at its admission, so one
 * request a step, alternating 0, 1, 0, 1 as if h0 were absent; h0 comes
 * once its hold is cleared.
 */
START_TEST(test_held_round_robin)
{
	struct sched_config c = { .max_batch_tokens = 8, .max_seqs = 8,
	    .kv_total_blocks = 100, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int h0 = add_held(s, 0, 8, 1), a0 = add(s, 0, 8, 1);
	int a1 = add(s, 0, 8, 1), b0 = add(s, 1, 8, 1), b1 = add(s, 1, 8, 1);
	const int order[] = { a0, b0, a1, b1 };
	int k;

	for (k = 0; k < 4; k++) {
		step(s, &p);
		plan_is(&p, 0, 1, (struct want[]){ { order[k], 0, 8, 1 } });
		commit(s, &p);
		ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	}
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	ck_assert_int_eq(sched_unhold(s, h0, 0), 0);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h0, 0, 8, 1 } });
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_held_round_robin);

/*
 * Admission after sched_unhold(n_cached): the first item starts at
 * n_cached and reserves the blocks of [0, pos + n).  Blocks of 4, pool of
 * 40 (watermark 1), chunks of 16, budget 32.
 * h  (prompt 50) cached 37: [37, 50) is 13 tokens, the last with logits;
 *    ceil(50 / 4) = 13 blocks.
 * h2 (prompt 60) cached 10, beside h's decode: [10, 26) is one chunk of
 *    16, ceil(26 / 4) = 7 blocks; then [26, 42) 11 blocks, [42, 58) 15,
 *    [58, 60) with logits, 15.
 * h3 (prompt 5) cached 4: the one position left, [4, 5) with logits,
 *    ceil(5 / 4) = 2 blocks.
 */
START_TEST(test_unhold_cached)
{
	struct sched_config c = { .max_batch_tokens = 32,
	    .max_prefill_chunk = 16, .max_seqs = 4, .kv_block_tokens = 4,
	    .kv_total_blocks = 40, .n_ctx = 128 };
	struct sched_config c2 = { .max_batch_tokens = 20, .max_seqs = 4,
	    .kv_total_blocks = 100, .n_ctx = 512,
	    .attention_cost_tokens = 100 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_plan p;
	int h = add_held(s, 0, 50, 3), h2, h3;

	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	ck_assert_int_eq(sched_unhold(s, h, 37), 0);
	ri = info(s, h);
	ck_assert(!ri.held);
	ck_assert_int_eq(ri.state, SCHED_WAITING);
	ck_assert_int_eq(ri.n_cached, 37);
	ck_assert_int_eq(ri.n_computed, 0);
	ck_assert_int_eq(ri.n_blocks, 0);
	ok(s);

	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h, 37, 13, 1 } });
	ri = info(s, h);
	ck_assert_int_eq(ri.state, SCHED_PREFILLING);
	ck_assert_int_eq(ri.n_computed, 37);
	ck_assert_int_eq(ri.n_cached, 0);
	ck_assert_int_eq(ri.n_blocks, 13);
	ck_assert_int_eq(free_blocks(s), 27);
	ok(s);
	commit(s, &p);
	ri = info(s, h);
	ck_assert_int_eq(ri.state, SCHED_DECODING);
	ck_assert_int_eq(ri.n_computed, 50);
	ck_assert_int_eq(ri.n_gen, 1);
	ck_assert_int_eq(ri.n_blocks, 13);

	h2 = add_held(s, 1, 60, 2);
	ck_assert_int_eq(sched_unhold(s, h2, 10), 0);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { h, 50, 1, 1 },
	    { h2, 10, 16, 0 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, h2).n_computed, 26);
	ck_assert_int_eq(info(s, h2).n_blocks, 7);
	ck_assert_int_eq(free_blocks(s), 40 - 13 - 7);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { h, 51, 1, 1 },
	    { h2, 26, 16, 0 } });
	commit(s, &p);
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(info(s, h2).n_blocks, 11);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h2, 42, 16, 0 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, h2).n_blocks, 15);
	h3 = add_held(s, 2, 5, 1);
	ck_assert_int_eq(sched_unhold(s, h3, 4), 0);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { h2, 58, 2, 1 },
	    { h3, 4, 1, 1 } });
	ck_assert_int_eq(info(s, h3).n_blocks, 2);
	commit(s, &p);
	ck_assert_int_eq(p.items[1].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(info(s, h2).n_computed, 60);
	ck_assert_int_eq(info(s, h2).n_blocks, 15);
	ck_assert_int_eq(free_blocks(s), 40 - 15);
	sched_free(s);

	/*
	 * The attention cost counts from the cached position: budget 20,
	 * pos 18 (test_attention_cost's second chunk): 15 tokens cost
	 * 15 + ceil((15 * 18 + 105) / 100) = 19, 16 would cost 21.  From 0,
	 * 18 tokens would fit.  ceil(33 / 16) = 3 blocks.
	 */
	s = mk(c2);
	h = add_held(s, 0, 300, 2);
	ck_assert_int_eq(sched_unhold(s, h, 18), 0);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h, 18, 15, 0 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, h).n_computed, 33);
	ck_assert_int_eq(info(s, h).n_blocks, 3);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_unhold_cached);

/* Held and paused are independent: admission waits for both to clear. */
START_TEST(test_held_paused)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_plan p;
	int h = add_held(s, 0, 6, 2);

	ck_assert_int_eq(sched_pause(s, h, true), 0);
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	ck_assert(info(s, h).held && info(s, h).paused);
	/* resumed but still held */
	ck_assert_int_eq(sched_pause(s, h, false), 0);
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	ck_assert(info(s, h).held && !info(s, h).paused);
	/* unheld but paused again */
	ck_assert_int_eq(sched_pause(s, h, true), 0);
	ck_assert_int_eq(sched_unhold(s, h, 2), 0);
	step(s, &p);
	plan_is(&p, 0, 0, NULL);
	commit(s, &p);
	ck_assert(!info(s, h).held && info(s, h).paused);
	ck_assert_int_eq(info(s, h).n_cached, 2);
	/* neither: [2, 6) with logits */
	ck_assert_int_eq(sched_pause(s, h, false), 0);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h, 2, 4, 1 } });
	commit(s, &p);
	ck_assert_int_eq(info(s, h).state, SCHED_DECODING);
	ck_assert_int_eq(info(s, h).n_computed, 6);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_held_paused);

/* The caller's admit_cached(): what a test's table says per client. */
struct cached_calls {
	int n;			/* calls */
	int give[4];		/* answer for client req_id - 1000 */
	int last_seq;
};

static int
give_cached(void *arg, int req, uint64_t req_id, int n_seq)
{
	struct cached_calls *cc = arg;

	(void)req;
	cc->n++;
	cc->last_seq = n_seq;
	return cc->give[req_id - 1000];
}

/*
 * admit_cached() is asked once per admission of a request whose KV the
 * caller does not hold: the first chunk starts at its answer, the blocks
 * of the cached positions are counted for the request (the plan counts
 * shared blocks as the request's own), an answer out of range counts as
 * 0, and a request unheld with n_cached is not asked.
 */
START_TEST(test_admit_cached)
{
	struct cached_calls cc = { 0, { 32, 40, -3, 0 }, 0 };
	struct sched_config c = { .max_batch_tokens = 32,
	    .max_prefill_chunk = 16, .max_seqs = 4, .kv_block_tokens = 4,
	    .kv_total_blocks = 60, .n_ctx = 128, .admit_cached = give_cached,
	    .admit_arg = &cc };
	struct sched *s = mk(c);
	struct sched_plan p;
	int h0 = add(s, 0, 40, 2), h1, h2, h3;

	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h0, 32, 8, 1 } });
	ck_assert_int_eq(cc.n, 1);
	ck_assert_int_eq(cc.last_seq, 40);
	ck_assert_int_eq(info(s, h0).n_blocks, 10);
	ok(s);
	commit(s, &p);
	/* 40 of 40 and -3 are out of range: from position 0 */
	h1 = add(s, 1, 40, 2);
	h2 = add(s, 2, 20, 2);
	step(s, &p);
	ck_assert_int_eq(cc.n, 3);
	plan_is(&p, 0, 3, (struct want[]){ { h0, 40, 1, 1 },
	    { h1, 0, 16, 0 }, { h2, 0, 15, 0 } });
	ok(s);
	commit(s, &p);
	/* held, then unheld with its own cached count: not asked */
	h3 = add_held(s, 3, 30, 2);
	step(s, &p);
	commit(s, &p);
	ck_assert_int_eq(sched_unhold(s, h3, 12), 0);
	cc.n = 0;
	step(s, &p);
	ck_assert_int_eq(cc.n, 0);
	ok(s);
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_admit_cached);

START_TEST(test_unhold_errors)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_total_blocks = 20, .n_ctx = 64, .max_requests = 8 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_plan p;
	int h = add_held(s, 0, 6, 2), w = add(s, 1, 4, 2);

	ck_assert_int_eq(sched_unhold(s, w, 0), -EINVAL);	/* not held */
	ck_assert_int_eq(sched_unhold(s, h, 6), -EINVAL);	/* n_seq */
	ck_assert_int_eq(sched_unhold(s, h, -1), -EINVAL);
	ck_assert_int_eq(sched_unhold(s, -1, 0), -ENOENT);
	ck_assert_int_eq(sched_unhold(s, 0x7fffffff, 0), -ENOENT);
	ri = info(s, h);
	ck_assert(ri.held);
	ck_assert_int_eq(ri.n_cached, 0);
	ck_assert(!info(s, w).held);
	ok(s);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { w, 0, 4, 1 } });
	ck_assert_int_eq(sched_unhold(s, w, 0), -EINVAL);	/* running */
	commit(s, &p);
	ck_assert_int_eq(sched_unhold(s, h, 5), 0);	/* n_seq - 1 */
	ck_assert_int_eq(sched_unhold(s, h, 3), -EINVAL);	/* done once */
	ck_assert_int_eq(info(s, h).n_cached, 5);
	/* cancelled before its admission: released, then a dead handle */
	ck_assert_int_eq(sched_cancel(s, h), 0);
	step(s, &p);
	plan_is(&p, 1, 1, (struct want[]){ { w, 4, 1, 1 } });
	rel_is(&p, 0, h, SCHED_REL_CANCEL, 0);
	ck_assert_int_eq(sched_unhold(s, h, 0), -ENOENT);
	ck_assert_int_eq(sched_req_info(s, h, &ri), -ENOENT);
	commit(s, &p);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_unhold_errors);

/*
 * A held request is cancelled like any waiting one, at the next step,
 * unheld or not.
 */
START_TEST(test_cancel_held)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_total_blocks = 20, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_stats st;
	struct sched_plan p;
	int h = add_held(s, 0, 8, 2), b = add(s, 1, 4, 1), h2, h3, x;

	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { b, 0, 4, 1 } });
	commit(s, &p);
	ck_assert_int_eq(sched_cancel(s, h), 0);
	ck_assert(info(s, h).cancelled && info(s, h).held);
	ok(s);
	step(s, &p);
	plan_is(&p, 1, 0, NULL);
	rel_is(&p, 0, h, SCHED_REL_CANCEL, 0);
	ck_assert_int_eq(sched_req_info(s, h, &ri), -ENOENT);
	commit(s, &p);
	sched_stats(s, &st);
	ck_assert_int_eq(st.n_live, 0);
	ck_assert_uint_eq(st.cancelled, 1);

	h2 = add_held(s, 2, 8, 2);
	h3 = add_held(s, 2, 8, 2);
	ck_assert_int_eq(sched_unhold(s, h3, 4), 0);
	x = add(s, 3, 4, 1);
	ck_assert_int_eq(sched_cancel(s, h2), 0);
	ck_assert_int_eq(sched_cancel(s, h3), 0);
	step(s, &p);
	plan_is(&p, 2, 1, (struct want[]){ { x, 0, 4, 1 } });
	rel_is(&p, find(&p, h2, true), h2, SCHED_REL_CANCEL, 0);
	rel_is(&p, find(&p, h3, true), h3, SCHED_REL_CANCEL, 0);
	ck_assert_int_eq(free_blocks(s), 19);
	commit(s, &p);
	sched_stats(s, &st);
	ck_assert_int_eq(st.n_live, 0);
	ck_assert_uint_eq(st.cancelled, 3);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_cancel_held);

/*
 * A request admitted with cached positions is preempted as any other:
 * its KV goes, and its next prefill starts at 0.  Blocks of 4, pool of 6,
 * no watermark; a (prompt 4, 6 tokens) runs first.
 * step 2: a decodes pos 4 (2 blocks); h (prompt 10) is admitted at 8:
 *         [8, 10) with logits, ceil(10 / 4) = 3 blocks     free 1
 * steps 3-5: a at 5-7, h at 10-12; at 12 h takes the last block
 * step 6: a at 8 needs a 3rd block, none is free: h, the newest, is
 *         preempted (4 tokens generated); a ends there (6 tokens)
 * step 7: the pool is empty; h again from 0 over 10 + 4 = 14 positions,
 *         ceil(14 / 4) = 4 blocks
 */
START_TEST(test_preempt_cached)
{
	struct sched_config c = { .max_batch_tokens = 16, .max_seqs = 4,
	    .kv_block_tokens = 4, .kv_total_blocks = 6,
	    .kv_watermark_blocks = SCHED_NO_WATERMARK, .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_plan p;
	int a = add(s, 0, 4, 6), h, t;

	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { a, 0, 4, 1 } });
	commit(s, &p);
	h = add_held(s, 1, 10, 6);
	ck_assert_int_eq(sched_unhold(s, h, 8), 0);
	step(s, &p);
	plan_is(&p, 0, 2, (struct want[]){ { a, 4, 1, 1 }, { h, 8, 2, 1 } });
	ck_assert_int_eq(info(s, h).n_blocks, 3);
	ck_assert_int_eq(free_blocks(s), 1);
	commit(s, &p);
	ck_assert_int_eq(info(s, h).state, SCHED_DECODING);
	ck_assert_int_eq(info(s, h).n_computed, 10);
	for (t = 3; t <= 5; t++) {
		step(s, &p);
		plan_is(&p, 0, 2, (struct want[]){ { a, t + 2, 1, 1 },
		    { h, t + 7, 1, 1 } });
		commit(s, &p);
	}
	ck_assert_int_eq(free_blocks(s), 0);
	step(s, &p);
	plan_is(&p, 1, 1, (struct want[]){ { a, 8, 1, 1 } });
	rel_is(&p, 0, h, SCHED_REL_PREEMPT, 4);
	ri = info(s, h);
	ck_assert_int_eq(ri.state, SCHED_WAITING);
	ck_assert_int_eq(ri.n_computed, 0);
	ck_assert_int_eq(ri.n_cached, 0);
	ck_assert_int_eq(ri.n_blocks, 0);
	ck_assert_int_eq(ri.n_preempt, 1);
	ck_assert(!ri.held);
	commit(s, &p);
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	ck_assert_int_eq(free_blocks(s), 6);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h, 0, 14, 1 } });
	ck_assert_int_eq(info(s, h).n_blocks, 4);
	commit(s, &p);
	ck_assert_int_eq(info(s, h).n_computed, 14);
	ck_assert_int_eq(info(s, h).n_gen, 5);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { h, 14, 1, 1 } });
	commit(s, &p);
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_LENGTH);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_preempt_cached);

START_TEST(test_commit_rules)
{
	struct sched_config c = { .max_batch_tokens = 16,
	    .max_prefill_chunk = 8, .max_seqs = 4, .kv_total_blocks = 20,
	    .n_ctx = 64 };
	struct sched *s = mk(c);
	struct sched_req_info ri;
	struct sched_plan p, q;
	int a = add(s, 0, 12, 5), b = add(s, 1, 4, 5), d = add(s, 2, 20, 5);

	ck_assert_int_eq(sched_commit(s, &p), -EINVAL);	/* nothing open */
	step(s, &p);
	ck_assert_int_eq(sched_step(s, &q), -EBUSY);
	plan_is(&p, 0, 3, (struct want[]){ { a, 0, 8, 0 }, { b, 0, 4, 1 },
	    { d, 0, 4, 0 } });
	p.items[0].finish = SCHED_FIN_EOS;	/* no token sampled there */
	ck_assert_int_eq(sched_commit(s, &p), -EINVAL);
	p.items[0].finish = SCHED_FIN_LENGTH;	/* the scheduler's to set */
	ck_assert_int_eq(sched_commit(s, &p), -EINVAL);
	p.items[0].finish = 42;
	ck_assert_int_eq(sched_commit(s, &p), -EINVAL);
	p.items[0].finish = SCHED_RUN;
	q = p;
	q.step++;
	ck_assert_int_eq(sched_commit(s, &q), -EINVAL);
	ck_assert_int_eq(info(s, a).n_computed, 0);	/* nothing changed */
	ok(s);

	p.items[1].finish = SCHED_FIN_STOP;
	p.items[2].finish = SCHED_FIN_ERROR;	/* ends d mid-prefill */
	ck_assert_int_eq(sched_commit(s, &p), 0);
	ck_assert_int_eq(sched_commit(s, &p), -EINVAL);	/* only once */
	ck_assert_int_eq(p.items[0].finish, SCHED_RUN);
	ck_assert_int_eq(p.items[1].finish, SCHED_FIN_STOP);
	ck_assert_int_eq(p.items[2].finish, SCHED_FIN_ERROR);
	ck_assert_int_eq(sched_req_info(s, b, &ri), -ENOENT);
	ck_assert_int_eq(sched_req_info(s, d, &ri), -ENOENT);
	ck_assert_int_eq(info(s, a).n_computed, 8);
	ck_assert_int_eq(free_blocks(s), 19);
	ok(s);
	step(s, &p);
	plan_is(&p, 0, 1, (struct want[]){ { a, 8, 4, 1 } });
	p.items[0].finish = SCHED_FIN_EOS;
	commit(s, &p);
	ck_assert_int_eq(p.items[0].finish, SCHED_FIN_EOS);
	ck_assert_int_eq(free_blocks(s), 20);
	sched_free(s);
}
END_TEST
SUITE_TEST("plans", test_commit_rules);

/* ---- no starvation ------------------------------------------------------- */

static int
ceil_div(int a, int b)
{
	return (a + b - 1) / b;
}

/*
 * Clients 1..K each queue a request every step, far more than the two
 * slots serve, so their backlog grows without end.  A request of client 0
 * must still be admitted within a bound that does not depend on that
 * backlog.  Every request here lives exactly L = max_tokens steps once
 * admitted (1 step of prefill giving the first token, then L - 1 decodes)
 * and there is no KV pressure, so within any L consecutive steps each of
 * the S slots admits again; a client that starts waiting is served after
 * at most K other admissions (invariant 12), hence admitted within
 * ceil((K + 1) / S) * L steps.  Global FCFS would make it wait for the
 * whole backlog.
 */
START_TEST(test_no_starvation_stream)
{
	enum { K = 3, S = 2, L = 4, WARM = 60, PROBES = 20 };
	struct sched_config c = { .max_batch_tokens = 64, .max_seqs = S,
	    .kv_total_blocks = 1000, .n_ctx = 256, .max_requests = 4096 };
	struct sched *s = mk(c);
	struct sched_stats st;
	struct sched_plan p;
	const int bound = ceil_div(K + 1, S) * L;
	int t, cl, w = -1, added_at = 0, probe = 0, waited, worst = 0;

	for (t = 1; t <= WARM + PROBES * 2 * bound; t++) {
		for (cl = 1; cl <= K; cl++)
			add(s, cl, 16, L);
		if (t > WARM && w < 0 && probe < PROBES) {
			sched_stats(s, &st);
			/* the backlog alone would exceed the bound tenfold */
			ck_assert_int_gt(st.n_waiting / S * L, 10 * bound);
			w = add(s, 0, 16, L);
			added_at = t;
		}
		step(s, &p);
		if (w >= 0 && find(&p, w, false) >= 0) {
			ck_assert_int_eq(p.items[find(&p, w, false)].pos, 0);
			waited = t - added_at + 1;
			ck_assert_int_le(waited, bound);
			if (waited > worst)
				worst = waited;
			w = -1;
			probe++;
		}
		if (w >= 0)
			ck_assert_int_le(t - added_at + 1, bound);
		commit(s, &p);
	}
	ck_assert_int_eq(probe, PROBES);
	ck_assert_int_ge(worst, 1);
	sched_free(s);
}
END_TEST
SUITE_TEST("starvation", test_no_starvation_stream);

/*
 * KV pressure: a 900-token prompt w (57 of 64 blocks) arrives while three
 * clients keep sending short requests.  w's client holds the admission
 * turn after at most K admissions, and from then on nobody is admitted
 * until w fits (invariant 12), so w waits for the requests live at its
 * arrival plus those K; by invariant 11 the oldest running request
 * progresses at its solo rate, so each of them ends within solo(short)
 * steps of becoming the oldest, and w then within solo(w), where
 * solo(r) = ceil(prompt / c_min) + max_tokens and c_min =
 * min(max_prefill_chunk, max_batch_tokens - max_seqs + 1).
 */
START_TEST(test_no_starvation_kv_pressure)
{
	enum { K = 3, SHORT_P = 40, SHORT_G = 12, BIG_P = 900, BIG_G = 8 };
	struct sched_config c = { .max_batch_tokens = 64,
	    .max_prefill_chunk = 32, .max_seqs = 6, .kv_block_tokens = 16,
	    .kv_total_blocks = 64, .kv_watermark_blocks = 1, .n_ctx = 1024,
	    .max_requests = 4096 };
	struct sched *s = mk(c);
	struct sched_stats st;
	struct sched_plan p;
	const int solo_short = ceil_div(SHORT_P, 32) + SHORT_G;	/* c_min 32 */
	const int solo_big = ceil_div(BIG_P, 32) + BIG_G;
	int t, cl, k, w = -1, bound = 0, added_at = 0, ended = 0;
	uint64_t preempt0 = 0;

	for (t = 1; t <= 2000 && ended == 0; t++) {
		/* each client sends one short request every 8 steps */
		for (cl = 1; cl <= K; cl++)
			if ((t + cl * 3) % 8 == 0)
				add(s, cl, SHORT_P, SHORT_G);
		if (t == 40) {
			sched_stats(s, &st);
			ck_assert_int_gt(st.n_running, 0);
			w = add(s, 0, BIG_P, BIG_G);
			bound = (st.n_live + K) * solo_short + solo_big;
			added_at = t;
			preempt0 = st.preempted;
		}
		step(s, &p);
		k = w >= 0 ? find(&p, w, false) : -1;
		if (k >= 0)
			ck_assert_int_le(p.items[k].n, 32);
		commit(s, &p);
		if (k >= 0 && p.items[k].finish != SCHED_RUN) {
			ck_assert_int_eq(p.items[k].finish, SCHED_FIN_LENGTH);
			ended = t;
		}
	}
	ck_assert_int_gt(ended, 0);
	ck_assert_int_le(ended - added_at + 1, bound);
	/* the pool was really contended: w displaced the short requests */
	sched_stats(s, &st);
	ck_assert_uint_gt(st.preempted, preempt0);
	sched_free(s);
}
END_TEST
SUITE_TEST("starvation", test_no_starvation_kv_pressure);

/* ---- random workloads through a simulator -------------------------------- */

/*
 * Typed asserts for the simulator's inner loops: Check reports every
 * passing ck_assert through a pipe, a system call each, which would
 * dominate these runs; these call into Check only on failure.
 */
#define SIM_OP(T, F, X, OP, Y) do {					\
	T x_ = (X), y_ = (Y);						\
	if (!(x_ OP y_))						\
		ck_abort_msg("%s %s %s: " F " vs " F, #X, #OP, #Y,	\
		    x_, y_);						\
} while (0)
#define SIM_INT(X, OP, Y)	SIM_OP(intmax_t, "%jd", X, OP, Y)
#define SIM_UINT(X, OP, Y)	SIM_OP(uintmax_t, "%ju", X, OP, Y)
#define SIM_TRUE(C) do {						\
	if (!(C))							\
		ck_abort_msg("%s", #C);					\
} while (0)

struct sim_req {
	int h, client, n_prompt, max_tokens;
	int n_gen;		/* tokens sampled so far */
	int next_pos;		/* the next position a plan must start at */
	int blocks;		/* KV blocks the plans reserved for it */
	int kv_seq;		/* its sequence in the engine's cache or -1 */
	int eos_at;		/* n_gen at which EOS is reported, 0 never */
	int item;		/* its item in the current plan, -1 none */
	int said;		/* the finish the caller reported at commit */
	int cached;		/* sched_unhold()'s n_cached, until admitted */
	uint64_t arrival;
	uint64_t stamp;		/* last step that named it */
	bool live, running, decoding, paused, cancel, held;
	bool from_lane;		/* admitted at cached positions, not since
				   preempted */
};

/* A workload shape; probabilities are per mille, per request and step. */
struct workload {
	const char *name;
	struct sched_config cfg;
	uint64_t seed;
	int n_clients, steps, p_arrive, max_prompt, max_gen;
	int p_cancel, p_pause, p_unpause, p_error, p_stop, p_eos;
	int p_cancel_client;	/* per step */
	bool expect_preempt;
	int p_held;		/* per arrival: queued held */
	int p_unhold;		/* per held request and step */
	int p_hold;		/* per live request and step: sched_hold() */
	int p_pace;		/* per prompt chunk: a pacer cuts it, to 0
				   half the time (-1: no pacer) */
};

struct sim {
	const struct workload *w;
	struct sched_config c;
	struct sched *s;
	struct kv_cache *kv;
	struct sim_req *r;
	int n, cap, live, kv_free;
	uint64_t arrival, rng;
	/* what the workload exercised */
	int cancelled_prefill, cancelled_waiting, cancelled_decoding;
	int preempted, preempted_before, finished;
	int cached_admitted, cached_preempted;
	int held_back;		/* prefilling requests sched_hold() took */
	/* the pacer's view of the step being planned */
	int pace_decode;	/* pace_begin()'s decodes */
	int pace_rows;		/* pace_take()'s prompt rows */
	int pace_cut;		/* chunks the pacer cut, in all */
};

static uint64_t
rnd(struct sim *m, uint64_t below)
{
	uint64_t z = (m->rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31)) % below;
}

static bool
chance(struct sim *m, int per_mille)
{
	return (int)rnd(m, 1000) < per_mille;
}

/* x lost its KV: free its blocks in the model and in the engine's cache. */
static void
sim_drop_kv(struct sim *m, struct sim_req *x)
{
	m->kv_free += x->blocks;
	x->blocks = 0;
	if (x->kv_seq >= 0)
		SIM_INT(kv_seq_free(m->kv, x->kv_seq), ==, 0);
	x->kv_seq = -1;
	x->running = x->decoding = false;
	x->next_pos = 0;
}

static void
sim_gone(struct sim *m, struct sim_req *x)
{
	struct sched_req_info ri;

	sim_drop_kv(m, x);
	x->live = false;
	m->live--;
	SIM_INT(sched_req_info(m->s, x->h, &ri), ==, -ENOENT);
}

static void
sim_add(struct sim *m, int client)
{
	struct sched_request q = { .client = client, .req_id = (uint64_t)m->n,
	    .n_prompt = 1 + (int)rnd(m, (uint64_t)m->w->max_prompt),
	    .max_tokens = 1 + (int)rnd(m, (uint64_t)m->w->max_gen) };
	int h, len = q.n_prompt + q.max_tokens;

	q.held = chance(m, m->w->p_held);
	h = sched_add(m->s, &q, NULL);
	if (len > m->c.n_ctx ||
	    ceil_div(len, m->c.kv_block_tokens) > m->c.kv_total_blocks) {
		SIM_INT(h, ==, -E2BIG);
		return;
	}
	if (m->live == m->c.max_requests) {
		SIM_INT(h, ==, -ENOSPC);
		return;
	}
	SIM_INT(h, >=, 0);
	m->r[m->n++] = (struct sim_req){ .h = h, .client = client,
	    .n_prompt = q.n_prompt, .max_tokens = q.max_tokens, .kv_seq = -1,
	    .item = -1, .arrival = ++m->arrival, .live = true,
	    .held = q.held, .eos_at = chance(m, m->w->p_eos) ?
	    1 + (int)rnd(m, (uint64_t)q.max_tokens) : 0 };
	m->live++;
}

static void
sim_cancel(struct sim *m, struct sim_req *x)
{
	SIM_INT(sched_cancel(m->s, x->h), ==, 0);
	if (x->cancel)
		return;
	x->cancel = true;
	if (!x->running)
		m->cancelled_waiting++;
	else if (x->decoding)
		m->cancelled_decoding++;
	else
		m->cancelled_prefill++;
}

/*
 * Clear x's hold as the worker does when the prefill lane is done with it:
 * some prefix of the prompt computed, or none when the lane failed.  A
 * position count past the sequence, or a second call, is refused.
 */
static void
sim_unhold(struct sim *m, struct sim_req *x)
{
	int n = chance(m, 200) ? 0 : (int)rnd(m, (uint64_t)x->n_prompt);

	SIM_INT(sched_unhold(m->s, x->h, x->n_prompt), ==, -EINVAL);
	SIM_INT(sched_unhold(m->s, x->h, n), ==, 0);
	SIM_INT(sched_unhold(m->s, x->h, 0), ==, -EINVAL);
	x->held = false;
	x->cached = n;
}

/*
 * Take x back as the worker does when a prompt that the steps prefill
 * moves to the prefill lane: only while it prefills with nothing
 * generated (not recomputing after a preemption) and not held; its
 * blocks go back to the pool at once.  Anything else is refused and
 * changes nothing.
 */
static void
sim_hold(struct sim *m, struct sim_req *x)
{
	if (x->cancel)
		return;
	if (!x->running || x->decoding || x->n_gen > 0 || x->held) {
		SIM_INT(sched_hold(m->s, x->h), ==, -EINVAL);
		return;
	}
	SIM_INT(sched_hold(m->s, x->h), ==, 0);
	SIM_INT(sched_hold(m->s, x->h), ==, -EINVAL);
	sim_drop_kv(m, x);
	x->held = true;
	x->cached = 0;
	x->from_lane = false;
	m->held_back++;
}

/* Cancels, pauses, holds, unholds and new requests between two steps. */
static void
sim_events(struct sim *m)
{
	const struct workload *w = m->w;
	struct sim_req *x;
	int i, cl;

	for (x = m->r; x < m->r + m->n; x++) {
		if (!x->live)
			continue;
		if (chance(m, w->p_cancel))
			sim_cancel(m, x);
		if (chance(m, x->paused ? w->p_unpause : w->p_pause)) {
			x->paused = !x->paused;
			SIM_INT(sched_pause(m->s, x->h, x->paused), ==, 0);
		}
		if (x->held && chance(m, w->p_unhold))
			sim_unhold(m, x);
		else if (w->p_hold > 0 && chance(m, w->p_hold))
			sim_hold(m, x);
	}
	if (chance(m, w->p_cancel_client)) {
		/* a client gone: each of its requests cancelled */
		cl = (int)rnd(m, (uint64_t)w->n_clients);
		for (i = 0; i < m->n; i++)
			if (m->r[i].live && m->r[i].client == cl)
				sim_cancel(m, &m->r[i]);
	}
	for (cl = 0; cl < w->n_clients && m->n < m->cap; cl++)
		if (chance(m, w->p_arrive))
			sim_add(m, cl);
}

static struct sim_req *
sim_find(struct sim *m, uint64_t req_id, int h, uint64_t step)
{
	struct sim_req *x;

	SIM_UINT(req_id, <, (uint64_t)m->n);
	x = &m->r[req_id];
	SIM_INT(x->h, ==, h);
	SIM_TRUE(x->live);
	SIM_UINT(x->stamp, !=, step);	/* once per plan (inv. 9) */
	x->stamp = step;
	return x;
}

/* Check the releases of plan p and apply them to the model. */
static void
sim_releases(struct sim *m, const struct sched_plan *p)
{
	const struct sched_release *rl;
	struct sim_req *x;
	uint64_t min_pre = UINT64_MAX, max_kept = 0;

	for (rl = p->rel; rl < p->rel + p->n_rel; rl++) {
		x = sim_find(m, rl->req_id, rl->req, p->step);
		SIM_INT(rl->client, ==, x->client);
		SIM_INT(rl->n_gen, ==, x->n_gen);
		if (rl->why == SCHED_REL_CANCEL) {
			SIM_TRUE(x->cancel);
			sim_gone(m, x);
			continue;
		}
		SIM_INT(rl->why, ==, SCHED_REL_PREEMPT);
		SIM_TRUE(x->running && !x->cancel);
		m->cached_preempted += x->from_lane;
		x->from_lane = false;
		sim_drop_kv(m, x);
		if (x->arrival < min_pre)
			min_pre = x->arrival;
		m->preempted++;
	}
	for (x = m->r; x < m->r + m->n; x++) {
		/* cancellation takes effect at this step (invariant 13) */
		SIM_TRUE(!(x->live && x->cancel));
		if (x->running && x->arrival > max_kept)
			max_kept = x->arrival;
	}
	/* victims are the newest running requests (invariant 11) */
	if (min_pre != UINT64_MAX)
		SIM_UINT(max_kept, <, min_pre);
}

/*
 * Budget n prompt tokens from pos take: 1 each, plus the sum of their
 * positions over attention_cost_tokens, rounded up (sched.c's rule,
 * summed here position by position).
 */
static int64_t
sim_chunk_cost(const struct sched_config *c, int pos, int n)
{
	int64_t sum = 0;

	if (c->attention_cost_tokens <= 0)
		return n;
	for (int i = 0; i < n; i++)
		sum += pos + i;
	return n + (sum + c->attention_cost_tokens - 1) /
	    c->attention_cost_tokens;
}

/* Check the items of plan p and apply them to the model and the cache. */
static void
sim_items(struct sim *m, const struct sched_plan *p)
{
	const struct sched_config *c = &m->c;
	const struct sched_item *it;
	struct sim_req *x, *y, *oldest = NULL;
	int k, need, sum = 0, free_before, n_seq, want;
	bool admitting = false, adm;

	SIM_INT(p->n_items, <=, c->max_seqs);
	for (x = m->r; x < m->r + m->n; x++)
		if (x->running && (!oldest || x->arrival < oldest->arrival))
			oldest = x;
	for (k = 0; k < p->n_items; k++) {
		it = &p->items[k];
		x = sim_find(m, it->req_id, it->req, p->step);
		x->item = k;
		SIM_INT(it->client, ==, x->client);
		/* invariant 14 */
		SIM_TRUE(!x->paused && !x->cancel && !x->held);
		SIM_INT(it->finish, ==, SCHED_RUN);
		free_before = m->kv_free;
		n_seq = x->n_prompt + x->n_gen;
		/* admissions come last, never after a preemption (inv. 12) */
		adm = !x->running;
		SIM_TRUE(adm || !admitting);
		if ((admitting = adm)) {
			SIM_INT(k, >=, p->n_decode);
			SIM_INT(m->preempted, ==, m->preempted_before);
			for (y = m->r; y < m->r + m->n; y++)
				if (y != x && y->live && !y->running &&
				    !y->paused && !y->held &&
				    y->client == x->client)
					SIM_UINT(y->arrival, >, x->arrival);
			if (free_before != c->kv_total_blocks)
				SIM_INT(ceil_div(n_seq, c->kv_block_tokens),
				    <=, free_before - c->kv_watermark_blocks);
			x->running = true;
			/* the first item starts past the cached positions */
			x->next_pos = x->cached;
			x->from_lane = x->cached > 0;
			m->cached_admitted += x->from_lane;
			x->cached = 0;
		}
		/* exactly once, in order, between preemptions (inv. 8) */
		SIM_INT(it->pos, ==, x->next_pos);
		SIM_INT(it->n, >=, 1);
		SIM_INT(it->pos + it->n, <=, n_seq);
		SIM_INT(it->logits, ==, it->pos + it->n == n_seq);
		/* decodes first, 1 token; chunks capped (inv. 10) */
		SIM_INT(k < p->n_decode, ==, x->decoding);
		SIM_INT(it->n, <=, x->decoding ? 1 : c->max_prefill_chunk);
		need = ceil_div(it->pos + it->n, c->kv_block_tokens) -
		    x->blocks;
		SIM_INT(need, >=, 0);
		x->blocks += need;
		m->kv_free -= need;
		SIM_INT(m->kv_free, >=, 0);
		/* the engine's cache follows the plan without failing; the
		 * worker copies the lane's KV in at admission */
		if (x->kv_seq < 0) {
			SIM_INT(x->kv_seq = kv_seq_new(m->kv), >=, 0);
			SIM_INT(kv_seq_append(m->kv, x->kv_seq, it->pos), ==,
			    0);
			SIM_INT(kv_seq_set_written(m->kv, x->kv_seq, it->pos),
			    ==, 0);
		}
		SIM_INT(kv_seq_len(m->kv, x->kv_seq), ==, it->pos);
		SIM_INT(kv_seq_append(m->kv, x->kv_seq, it->n), ==, 0);
		sum += it->n;
	}
	SIM_INT(sum, ==, p->n_tokens);
	SIM_INT(sum, <=, c->max_batch_tokens);	/* invariant 9 */
	SIM_INT(kv_blocks_free(m->kv), ==, m->kv_free);
	for (x = m->r, k = 0; x < m->r + m->n; x++) {
		k += x->running;
		/* every unpaused decoding request decodes (invariant 10) */
		if (x->running && x->decoding && !x->paused)
			SIM_UINT(x->stamp, ==, p->step);
	}
	SIM_INT(k, <=, c->max_seqs);
	/* the oldest running request progresses at its solo rate (inv. 11) */
	if (oldest && oldest->running && !oldest->paused) {
		SIM_UINT(oldest->stamp, ==, p->step);
		it = &p->items[oldest->item];
		want = oldest->n_prompt + oldest->n_gen - it->pos;
		if (want > c->max_prefill_chunk)
			want = c->max_prefill_chunk;
		if (want > c->max_batch_tokens - c->max_seqs + 1)
			want = c->max_batch_tokens - c->max_seqs + 1;
		/* with an attention cost: the tokens whose cost fits what
		 * the decodes leave, at least one */
		while (want > 1 && sim_chunk_cost(c, it->pos, want) >
		    c->max_batch_tokens - c->max_seqs + 1)
			want--;
		if (m->w->p_pace >= 0)
			want = 1;	/* a pacer may cut it to one row */
		SIM_INT(it->n, >=, want);
	}
}

/* Decide each item's outcome as the engine and sampler would, commit, check. */
static void
sim_commit(struct sim *m, struct sched_plan *p)
{
	const struct workload *w = m->w;
	struct sched_item *it;
	struct sim_req *x;

	for (it = p->items; it < p->items + p->n_items; it++) {
		x = &m->r[it->req_id];
		if (chance(m, w->p_error))
			it->finish = SCHED_FIN_ERROR;
		else if (it->logits && x->eos_at == x->n_gen + 1)
			it->finish = SCHED_FIN_EOS;
		else if (it->logits && chance(m, w->p_stop))
			it->finish = SCHED_FIN_STOP;
		x->said = it->finish;
	}
	/* a cancel asked while the step runs waits for the next step */
	if (m->n > 0 && chance(m, w->p_cancel * 10)) {
		x = &m->r[rnd(m, (uint64_t)m->n)];
		if (x->live)
			sim_cancel(m, x);
	}
	/* so does an unhold */
	if (m->n > 0 && chance(m, w->p_unhold)) {
		x = &m->r[rnd(m, (uint64_t)m->n)];
		if (x->live && x->held)
			sim_unhold(m, x);
	}
	SIM_INT(sched_commit(m->s, p), ==, 0);
	for (it = p->items; it < p->items + p->n_items; it++) {
		x = &m->r[it->req_id];
		x->item = -1;
		if (it->finish != SCHED_FIN_ERROR) {
			x->next_pos = it->pos + it->n;
			SIM_INT(kv_seq_set_written(m->kv, x->kv_seq,
			    x->next_pos), ==, 0);
			x->n_gen += it->logits;
			x->decoding |= it->logits;
		}
		/* the caller's finish stands; else LENGTH at max_tokens */
		SIM_INT(it->finish, ==, x->said != SCHED_RUN ? x->said :
		    x->n_gen == x->max_tokens ? SCHED_FIN_LENGTH : SCHED_RUN);
		if (it->finish != SCHED_RUN) {
			m->finished++;
			sim_gone(m, x);
		}
	}
}

/* Compare the scheduler's view of every request with the model's. */
static void
sim_compare(struct sim *m)
{
	struct sched_req_info ri;
	struct sched_stats st;
	struct sim_req *x;
	int running = 0;

	ok(m->s);
	for (x = m->r; x < m->r + m->n; x++) {
		if (!x->live)
			continue;
		running += x->running;
		SIM_INT(sched_req_info(m->s, x->h, &ri), ==, 0);
		SIM_INT(ri.n_gen, ==, x->n_gen);
		SIM_INT(ri.n_blocks, ==, x->blocks);
		SIM_INT(ri.n_computed, ==, x->next_pos);
		SIM_INT(ri.paused, ==, x->paused);
		SIM_INT(ri.cancelled, ==, x->cancel);
		SIM_INT(ri.held, ==, x->held);
		SIM_INT(ri.n_cached, ==, x->cached);
		SIM_INT(ri.state, ==, !x->running ? SCHED_WAITING :
		    x->decoding ? SCHED_DECODING : SCHED_PREFILLING);
	}
	sched_stats(m->s, &st);
	SIM_INT(st.n_live, ==, m->live);
	SIM_INT(st.n_running, ==, running);
	SIM_INT(st.n_waiting, ==, m->live - running);
	SIM_INT(st.kv_free, ==, m->kv_free);
	SIM_UINT(st.preempted, ==, (uint64_t)m->preempted);
	SIM_UINT(st.finished, ==, (uint64_t)m->finished);
}

/*
 * A pacer that cuts p_pace % of the chunks, to 0 rows half of those times
 * (invariant 17: the step's first chunk still gets a row).
 */
static void
sim_pace_begin(void *arg, int n, int64_t pos_sum)
{
	struct sim *m = arg;

	(void)pos_sum;
	m->pace_decode = n;
	m->pace_rows = 0;
}

static int
sim_pace_rows(void *arg, int pos, int n)
{
	struct sim *m = arg;

	(void)pos;
	if ((int)rnd(m, 100) >= m->w->p_pace)
		return n;
	m->pace_cut++;
	return rnd(m, 2) == 0 ? 0 : (int)rnd(m, (uint64_t)n + 1);
}

static void
sim_pace_take(void *arg, int pos, int n)
{
	struct sim *m = arg;

	(void)pos;
	m->pace_rows += n;
}

/* The plan's decodes and prompt rows are what the pacer saw (inv. 17). */
static void
sim_pace_check(struct sim *m, const struct sched_plan *p)
{
	int rows = 0, preempts = 0;

	if (m->w->p_pace < 0)
		return;
	for (int k = p->n_decode; k < p->n_items; k++)
		rows += p->items[k].n;
	for (int k = 0; k < p->n_rel; k++)
		preempts += p->rel[k].why == SCHED_REL_PREEMPT;
	SIM_INT(p->n_decode, <=, m->pace_decode);
	SIM_INT(rows, <=, m->pace_rows);
	if (preempts == 0)
		SIM_INT(rows, ==, m->pace_rows);
}

static void
sim_one_step(struct sim *m)
{
	struct sched_plan p;

	m->preempted_before = m->preempted;
	SIM_INT(sched_step(m->s, &p), ==, 0);
	sim_pace_check(m, &p);
	sim_releases(m, &p);
	sim_items(m, &p);
	sim_commit(m, &p);
	sim_compare(m);
}

static void
run_workload(const struct workload *w)
{
	struct kv_params kp;
	struct cp_err e = { 0 };
	struct sim m = { .w = w, .rng = w->seed };
	struct sched_config c = w->cfg;
	struct sim_req *x;
	int t;

	if (w->p_pace >= 0) {
		c.pace_begin = sim_pace_begin;
		c.pace_rows = sim_pace_rows;
		c.pace_take = sim_pace_take;
		c.pace_arg = &m;
	}
	m.s = mk(c);
	m.c = *sched_config(m.s);
	m.kv_free = m.c.kv_total_blocks;
	m.cap = w->steps * w->n_clients;
	ck_assert_ptr_nonnull(m.r = calloc((size_t)m.cap, sizeof(*m.r)));
	kp = (struct kv_params){ .n_layer = 1, .kv_dim = 8, .type = CP_T_F32,
	    .block_tokens = m.c.kv_block_tokens,
	    .n_blocks = m.c.kv_total_blocks, .max_seqs = m.c.max_seqs,
	    .n_ctx = m.c.n_ctx };
	ck_assert_msg(kv_new(&kp, &m.kv, &e) == 0, "%s", e.msg);
	for (t = 0; t < w->steps; t++) {
		sim_events(&m);
		sim_one_step(&m);
	}
	/*
	 * drain: resume and unhold everything; all must end, no deadlock
	 * (inv. 5, 11)
	 */
	for (x = m.r; x < m.r + m.n; x++) {
		if (x->live && x->paused) {
			x->paused = false;
			SIM_INT(sched_pause(m.s, x->h, false), ==, 0);
		}
		if (x->live && x->held)
			sim_unhold(&m, x);
	}
	for (t = 0; m.live > 0; t++) {
		if (t == 20000)
			ck_abort_msg("%s: not drained", w->name);
		sim_one_step(&m);
	}
	/* every block comes back (invariant 3) */
	SIM_INT(m.kv_free, ==, m.c.kv_total_blocks);
	SIM_INT(kv_blocks_free(m.kv), ==, m.c.kv_total_blocks);
	SIM_INT(kv_seqs_live(m.kv), ==, 0);
	/* the workload exercised what it is for */
	SIM_INT(m.finished, >, m.n / 4);
	if (w->expect_preempt)
		ck_assert_msg(m.preempted > 0, "%s: no preemption", w->name);
	if (w->p_cancel > 0)
		ck_assert_msg(m.cancelled_prefill > 0 &&
		    m.cancelled_waiting > 0 && m.cancelled_decoding > 0,
		    "%s: cancels %d %d %d", w->name, m.cancelled_prefill,
		    m.cancelled_waiting, m.cancelled_decoding);
	if (w->p_held > 0)
		ck_assert_msg(m.cached_admitted > 0, "%s: no cached admission",
		    w->name);
	if (w->p_hold > 0)
		ck_assert_msg(m.held_back > 0, "%s: no prefill taken back",
		    w->name);
	if (w->p_pace > 0)
		ck_assert_msg(m.pace_cut > 0, "%s: the pacer cut nothing",
		    w->name);
	kv_free(m.kv);
	free(m.r);
	sched_free(m.s);
}

/*
 * Shapes of workload.  Columns: name; config (max_batch_tokens,
 * max_prefill_chunk, max_seqs, max_requests, max_clients, kv_block_tokens,
 * kv_total_blocks, kv_watermark_blocks, n_ctx, attention_cost_tokens);
 * seed, clients, steps, p_arrive, max_prompt, max_gen; p_cancel, p_pause,
 * p_unpause, p_error, p_stop, p_eos, p_cancel_client; expect_preempt;
 * p_held, p_unhold, p_hold.
 */
static const struct workload workloads[] = {
	{ "small pool, preemption",
	  { 32, 6, 8, 64, 8, 4, 24, 1, 96, 0, NULL, NULL, NULL, NULL, NULL, NULL },
	  1, 4, 600, 150, 48, 32, 3, 5, 100, 2, 10, 300, 5, true, 100, 100,
	  20, -1 },
	{ "long prompts, 16-token blocks",
	  { 64, 8, 6, 40, 5, 16, 12, 0, 200, 0, NULL, NULL, NULL, NULL, NULL, NULL },
	  2, 5, 600, 60, 160, 40, 3, 3, 200, 1, 5, 200, 3, true, 100, 100,
	  20, -1 },
	{ "big pool, table full",
	  { 128, 0, 16, 24, 3, 0, 1000, 0, 512, 0, NULL, NULL, NULL, NULL, NULL, NULL },
	  3, 3, 400, 400, 300, 30, 4, 5, 100, 2, 10, 300, 2, false, 100, 100,
	  0, -1 },
	{ "one-token blocks, no watermark",
	  { 8, 3, 4, 0, 3, 1, 20, SCHED_NO_WATERMARK, 20, 0, NULL, NULL, NULL, NULL, NULL, NULL },
	  4, 3, 800, 100, 14, 10, 4, 5, 150, 2, 10, 300, 3, true, 100, 100,
	  20, -1 },
	{ "max_seqs == max_batch_tokens",
	  { 4, 2, 4, 0, 6, 2, 16, 2, 32, 0, NULL, NULL, NULL, NULL, NULL, NULL },
	  5, 6, 800, 50, 12, 16, 4, 5, 150, 2, 10, 300, 3, true, 100, 100,
	  20, -1 },
	{ "no cancels, no pauses, heavy preemption",
	  { 48, 12, 12, 0, 4, 8, 30, 1, 240, 0, NULL, NULL, NULL, NULL, NULL, NULL },
	  6, 4, 600, 120, 100, 100, 0, 0, 0, 0, 5, 100, 0, true, 100, 100,
	  20, -1 },
	{ "attention cost, long prompts",
	  { 64, 32, 6, 40, 5, 16, 40, 0, 400, 50, NULL, NULL, NULL, NULL, NULL, NULL },
	  7, 5, 1200, 30, 360, 40, 3, 3, 200, 1, 5, 200, 3, true, 100, 100,
	  20, -1 },
	{ "attention cost larger than the budget",
	  { 8, 8, 4, 0, 3, 4, 30, 1, 64, 3, NULL, NULL, NULL, NULL, NULL, NULL },
	  8, 3, 800, 100, 40, 16, 4, 5, 150, 2, 10, 300, 3, false, 100, 100,
	  0, -1 },
	{ "a stingy pacer, long prompts",
	  { 64, 8, 6, 40, 5, 16, 12, 0, 200, 0, NULL, NULL, NULL, NULL, NULL,
	    NULL },
	  9, 5, 600, 60, 160, 40, 3, 3, 200, 1, 5, 200, 3, true, 100, 100,
	  20, 60 },
	{ "a stingy pacer, attention cost",
	  { 64, 32, 6, 40, 5, 16, 40, 0, 400, 50, NULL, NULL, NULL, NULL, NULL,
	    NULL },
	  10, 5, 1200, 30, 360, 40, 3, 3, 200, 1, 5, 200, 3, true, 100, 100,
	  20, 90 },
};

START_TEST(test_random_workloads)
{
	struct workload v = workloads[_i / 3];

	v.seed = v.seed * 1000003u + (uint64_t)(_i % 3);
	run_workload(&v);
}
END_TEST
SUITE_LOOP("random", test_random_workloads, 0, (int)(3 * sizeof(workloads) / sizeof(workloads[0])));

SUITE_CASE("starvation", 30);
SUITE_CASE("random", 60);

int
main(void)
{
	return suite_main(suite_registered("sched"));
}
