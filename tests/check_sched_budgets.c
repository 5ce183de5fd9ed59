/*
 * check_sched_budgets.c - sched_set_budgets(): the budgets a reload
 * changes (max_batch_tokens, max_prefill_chunk, attention_cost_tokens)
 * apply from the next step, never within one, and a set that breaks the
 * scheduler's rules changes nothing.  Plans worked out by hand from
 * sched.c's phases.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "error.h"
#include "sched.h"
#include "lib/suite.h"

/* Two requests of 70 prompt tokens under 100 a step, 30 a chunk. */
static struct sched *
two_prompts(int *a, int *b)
{
	struct sched_config c = { .max_batch_tokens = 100,
	    .max_prefill_chunk = 30, .max_seqs = 4, .kv_total_blocks = 100,
	    .n_ctx = 512 };
	struct sched_request q = { .n_prompt = 70, .max_tokens = 4 };
	struct cp_err e = { 0 };
	struct sched *s = NULL;

	ck_assert_msg(sched_new(&c, &s, &e) == 0, "%s", e.msg);
	q.client = 0;
	*a = sched_add(s, &q, &e);
	q.client = 1;
	*b = sched_add(s, &q, &e);
	ck_assert_int_ge(*a, 0);
	ck_assert_int_ge(*b, 0);
	return s;
}

/* Steps once and commits; item k of the plan was (h, pos, n). */
static void
step_is(struct sched *s, int n_items, const int (*want)[3])
{
	struct cp_err e = { 0 };
	struct sched_plan p;

	ck_assert_int_eq(sched_step(s, &p), 0);
	ck_assert_int_eq(p.n_items, n_items);
	for (int k = 0; k < n_items; k++) {
		ck_assert_int_eq(p.items[k].req, want[k][0]);
		ck_assert_int_eq(p.items[k].pos, want[k][1]);
		ck_assert_int_eq(p.items[k].n, want[k][2]);
	}
	ck_assert_int_eq(sched_commit(s, &p), 0);
	ck_assert_msg(sched_check(s, &e) == 0, "%s", e.msg);
}

/*
 * Chunks of 30 under 100; then a budget of 40 (the chunk following it):
 * the oldest prompt takes all 40 and the other none; then chunks of 10.
 */
START_TEST(test_budgets_next_step)
{
	struct sched_budgets b = { .max_batch_tokens = 40 };
	struct cp_err e = { 0 };
	struct sched *s;
	int ra, rb;

	s = two_prompts(&ra, &rb);
	step_is(s, 2, (const int[][3]){ { ra, 0, 30 }, { rb, 0, 30 } });
	ck_assert_int_eq(sched_set_budgets(s, &b, &e), 0);
	ck_assert_int_eq(sched_config(s)->max_batch_tokens, 40);
	ck_assert_int_eq(sched_config(s)->max_prefill_chunk, 40);
	step_is(s, 1, (const int[][3]){ { ra, 30, 40 } });
	b.max_prefill_chunk = 10;
	ck_assert_int_eq(sched_set_budgets(s, &b, &e), 0);
	/* ra decodes (1 token), rb's prompt goes on 10 at a time */
	step_is(s, 2, (const int[][3]){ { ra, 70, 1 }, { rb, 30, 10 } });
	sched_free(s);
}
END_TEST
SUITE_TEST("budgets", test_budgets_next_step);

/*
 * attention_cost_tokens set live: a prompt token at position p then
 * costs 1 + p / 10, so the chunks from position 30 shrink.
 */
START_TEST(test_attention_cost_live)
{
	struct sched_budgets b = { .max_batch_tokens = 100,
	    .max_prefill_chunk = 30, .attention_cost_tokens = 10 };
	struct cp_err e = { 0 };
	struct sched_plan p;
	struct sched *s;
	int ra, rb;

	s = two_prompts(&ra, &rb);
	step_is(s, 2, (const int[][3]){ { ra, 0, 30 }, { rb, 0, 30 } });
	ck_assert_int_eq(sched_set_budgets(s, &b, &e), 0);
	ck_assert_int_eq(sched_step(s, &p), 0);
	ck_assert_int_eq(p.n_items, 2);
	/*
	 * ra from 30: n rows cost n + (30n + n(n-1)/2) / 10, 99 for 20 and
	 * 105 for 21; rb gets the one token left
	 */
	ck_assert_int_eq(p.items[0].req, ra);
	ck_assert_int_eq(p.items[0].n, 20);
	ck_assert_int_eq(p.items[1].req, rb);
	ck_assert_int_eq(p.items[1].n, 1);
	ck_assert_int_eq(sched_commit(s, &p), 0);
	sched_free(s);
}
END_TEST
SUITE_TEST("budgets", test_attention_cost_live);

/*
 * Budgets that break a rule (max_seqs above max_batch_tokens, a chunk
 * above the budget, a budget of 0) are refused and change nothing, and
 * none change within a step (between sched_step and sched_commit).
 */
START_TEST(test_budgets_refused)
{
	static const struct sched_budgets bad[] = {
		{ .max_batch_tokens = 3 },	/* max_seqs is 4 */
		{ .max_batch_tokens = 20, .max_prefill_chunk = 21 },
		{ .max_batch_tokens = 0 },
		{ .max_batch_tokens = 20, .attention_cost_tokens = -1 },
	};
	struct sched_budgets ok = { .max_batch_tokens = 20 };
	struct cp_err e = { 0 };
	struct sched_plan p;
	struct sched *s;
	int ra, rb;

	s = two_prompts(&ra, &rb);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(sched_set_budgets(s, &bad[i], &e), -EINVAL);
		ck_assert_int_eq(sched_config(s)->max_batch_tokens, 100);
		ck_assert_int_eq(sched_config(s)->max_prefill_chunk, 30);
		ck_assert_int_eq(sched_config(s)->attention_cost_tokens, 0);
	}
	ck_assert_ptr_nonnull(strstr(e.msg, "attention_cost_tokens"));
	ck_assert_int_eq(sched_step(s, &p), 0);
	ck_assert_int_eq(sched_set_budgets(s, &ok, &e), -EBUSY);
	ck_assert_int_eq(sched_config(s)->max_batch_tokens, 100);
	ck_assert_int_eq(sched_commit(s, &p), 0);
	step_is(s, 2, (const int[][3]){ { ra, 30, 30 }, { rb, 30, 30 } });
	sched_free(s);
}
END_TEST
SUITE_TEST("budgets", test_budgets_refused);

int
main(void)
{
	return suite_main(suite_registered("sched_budgets"));
}
