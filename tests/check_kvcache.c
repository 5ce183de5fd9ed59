/*
 * check_kvcache.c - paged KV cache bookkeeping: sizing, block accounting,
 * the sequence lifecycle, the storage layout arithmetic and the prefix
 * cache (invariants 1-5 of kvcache.h).  Expected values are worked out by
 * hand from the layout in kvcache.h.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "lib/suite.h"
#include "ttype.h"


/* A small pool: 2 layers, kv_dim 64, F16, 16-token blocks, 8 blocks. */
static struct kv_params
small_params(void)
{
	struct kv_params p = {
		.n_layer = 2, .kv_dim = 64, .type = CP_T_F16,
		.block_tokens = 0, .n_blocks = 8, .max_seqs = 4, .n_ctx = 100,
	};
	return p;
}

static struct kv_cache *
small_cache(void)
{
	struct kv_params p = small_params();
	struct kv_cache *kv;

	ck_assert_int_eq(kv_new(&p, &kv, NULL), 0);
	return kv;
}

static void
assert_consistent(const struct kv_cache *kv)
{
	struct cp_err e = { 0 };

	ck_assert_msg(kv_check(kv, &e) == 0, "%s", e.msg);
}

START_TEST(test_sizing)
{
	struct kv_params p = small_params();

	/* 2 layers x (K + V) x 64 x 2 bytes */
	ck_assert_uint_eq(kv_token_bytes(&p), 512);
	p.type = CP_T_F32;
	ck_assert_uint_eq(kv_token_bytes(&p), 1024);
	p.type = CP_T_Q8_0;
	ck_assert_uint_eq(kv_token_bytes(&p), 0);
	p = small_params();
	ck_assert_int_eq(kv_blocks_for_tokens(&p, 0), 0);
	ck_assert_int_eq(kv_blocks_for_tokens(&p, 1), 1);
	ck_assert_int_eq(kv_blocks_for_tokens(&p, 16), 1);
	ck_assert_int_eq(kv_blocks_for_tokens(&p, 100), 7);
	/* 1 MiB / (512 bytes x 16 tokens) */
	ck_assert_int_eq(kv_blocks_for_mib(&p, 1), 128);
	p.block_tokens = 32;
	ck_assert_int_eq(kv_blocks_for_tokens(&p, 100), 4);
	ck_assert_int_eq(kv_blocks_for_mib(&p, 1), 64);
	ck_assert_int_eq(kv_blocks_for_tokens(&p, UINT64_MAX), INT32_MAX);
	ck_assert_int_eq(kv_blocks_for_mib(&p, UINT64_MAX), INT32_MAX);
}
END_TEST
SUITE_TEST("core", test_sizing);

START_TEST(test_new_errors)
{
	struct kv_params p;
	struct kv_cache *kv = (struct kv_cache *)1;
	struct cp_err e = { 0 };

	p = small_params();
	p.type = CP_T_Q8_0;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_null(kv);
	ck_assert_ptr_nonnull(strstr(e.msg, "q8_0"));
	p = small_params();
	p.n_layer = 0;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "n_layer"));
	p = small_params();
	p.block_tokens = -1;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "block_tokens"));
	p = small_params();
	p.n_blocks = 0;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "n_blocks"));
	p = small_params();
	p.max_seqs = 0;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "max_seqs"));
	p = small_params();
	p.n_ctx = 0;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "n_ctx"));
	p = small_params();
	p.n_blocks = INT32_MAX;
	p.kv_dim = INT32_MAX;
	p.n_layer = INT32_MAX;
	ck_assert_int_eq(kv_new(&p, &kv, &e), -EINVAL);
	ck_assert_ptr_null(kv);
	kv_free(NULL);
}
END_TEST
SUITE_TEST("core", test_new_errors);

START_TEST(test_layout)
{
	struct kv_cache *kv = small_cache();
	/* slab = 16 tokens x 64 x 2 bytes; block = 2 layers x 2 kinds x slab */
	size_t slab = 16 * 64 * 2, block = 4 * slab;

	ck_assert_int_eq(kv_params(kv)->block_tokens, 16);
	ck_assert_uint_eq(kv_elem_bytes(kv), 2);
	ck_assert_uint_eq(kv_block_bytes(kv), block);
	ck_assert_uint_eq(kv_storage_bytes(kv), 8 * block);
	ck_assert_uint_eq(kv_block_offset(kv, 0, 0, KV_K), 0);
	ck_assert_uint_eq(kv_block_offset(kv, 0, 0, KV_V), slab);
	ck_assert_uint_eq(kv_block_offset(kv, 0, 1, KV_K), 2 * slab);
	ck_assert_uint_eq(kv_block_offset(kv, 3, 1, KV_V),
	    3 * block + 3 * slab);
	ck_assert_uint_eq(kv_block_offset(kv, 7, 1, KV_V) + slab,
	    kv_storage_bytes(kv));
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_layout);

START_TEST(test_append_blocks)
{
	struct kv_cache *kv = small_cache();
	const int32_t *t;
	int s;

	ck_assert_int_eq(kv_blocks_total(kv), 8);
	ck_assert_int_eq(kv_blocks_free(kv), 8);
	s = kv_seq_new(kv);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(kv_seq_len(kv, s), 0);
	ck_assert_int_eq(kv_seq_blocks_needed(kv, s, 1), 1);
	ck_assert_int_eq(kv_seq_append(kv, s, 1), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 7);
	ck_assert_int_eq(kv_seq_blocks_needed(kv, s, 15), 0);
	ck_assert_int_eq(kv_seq_append(kv, s, 15), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 7);
	ck_assert_int_eq(kv_seq_blocks_needed(kv, s, 17), 2);
	ck_assert_int_eq(kv_seq_append(kv, s, 1), 0);
	ck_assert_int_eq(kv_seq_len(kv, s), 17);
	ck_assert_int_eq(kv_blocks_free(kv), 6);
	t = kv_seq_blocks(kv, s);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_ne(t[0], t[1]);
	ck_assert_int_ge(t[0], 0);
	ck_assert_int_lt(t[1], 8);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_append_blocks);

/* kv_free_peek() names the blocks appends then take, in that order. */
START_TEST(test_free_peek)
{
	struct kv_cache *kv = small_cache();
	int32_t peek[10];
	const int32_t *t;
	int a, b, i;

	a = kv_seq_new(kv);
	b = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_append(kv, a, 40), 0);	/* 3 blocks */
	ck_assert_int_eq(kv_seq_append(kv, b, 20), 0);	/* 2 blocks */
	ck_assert_int_eq(kv_seq_free(kv, a), 0);	/* 3 back, LIFO */
	ck_assert_int_eq(kv_free_peek(kv, peek, 0), 0);
	ck_assert_int_eq(kv_free_peek(kv, peek, 10), 6);
	ck_assert_int_eq(kv_free_peek(kv, peek, 4), 4);
	ck_assert_int_eq(kv_blocks_free(kv), 6);	/* peeking takes none */
	a = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_append(kv, a, 64), 0);	/* 4 blocks */
	t = kv_seq_blocks(kv, a);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(t[i], peek[i]);
	ck_assert_int_eq(kv_free_peek(kv, peek, 10), 2);
	ck_assert_int_eq(kv_seq_append(kv, b, 30), 0);	/* 20 -> 50: 2 */
	t = kv_seq_blocks(kv, b);
	ck_assert_int_eq(t[2], peek[0]);
	ck_assert_int_eq(t[3], peek[1]);
	ck_assert_int_eq(kv_free_peek(kv, peek, 10), 0);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_free_peek);

START_TEST(test_append_limits)
{
	struct kv_cache *kv = small_cache();
	int a, b;

	a = kv_seq_new(kv);
	b = kv_seq_new(kv);
	ck_assert_int_ne(a, b);
	/* n_ctx is 100 tokens = 7 blocks */
	ck_assert_int_eq(kv_seq_append(kv, a, 101), -E2BIG);
	ck_assert_int_eq(kv_seq_append(kv, a, 100), 0);
	ck_assert_int_eq(kv_seq_append(kv, a, 1), -E2BIG);
	ck_assert_int_eq(kv_blocks_free(kv), 1);
	/* b fits one block, not two; a failed append changes nothing */
	ck_assert_int_eq(kv_seq_append(kv, b, 17), -ENOSPC);
	ck_assert_int_eq(kv_seq_len(kv, b), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 1);
	ck_assert_int_eq(kv_seq_append(kv, b, 16), 0);
	ck_assert_int_eq(kv_seq_append(kv, b, 1), -ENOSPC);
	ck_assert_int_eq(kv_seq_len(kv, b), 16);
	ck_assert_int_eq(kv_seq_append(kv, b, -1), -EINVAL);
	ck_assert_int_eq(kv_seq_append(kv, b, 0), 0);
	assert_consistent(kv);
	ck_assert_int_eq(kv_seq_free(kv, a), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 7);
	ck_assert_int_eq(kv_seq_append(kv, b, 17), 0);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_append_limits);

START_TEST(test_truncate)
{
	struct kv_cache *kv = small_cache();
	int s;

	s = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_append(kv, s, 40), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 5);
	ck_assert_int_eq(kv_seq_set_written(kv, s, 40), 0);
	ck_assert_int_eq(kv_seq_set_written(kv, s, 41), -EINVAL);
	ck_assert_int_eq(kv_seq_truncate(kv, s, 41), -EINVAL);
	ck_assert_int_eq(kv_seq_truncate(kv, s, -1), -EINVAL);
	ck_assert_int_eq(kv_seq_truncate(kv, s, 32), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 6);
	ck_assert_int_eq(kv_seq_written(kv, s), 32);
	ck_assert_int_eq(kv_seq_truncate(kv, s, 17), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 6);
	ck_assert_int_eq(kv_seq_truncate(kv, s, 16), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 7);
	ck_assert_int_eq(kv_seq_len(kv, s), 16);
	ck_assert_int_eq(kv_seq_written(kv, s), 16);
	assert_consistent(kv);
	ck_assert_int_eq(kv_seq_truncate(kv, s, 0), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 8);
	ck_assert_int_eq(kv_seq_written(kv, s), 0);
	ck_assert(kv_seq_live(kv, s));
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_truncate);

START_TEST(test_seq_lifecycle)
{
	struct kv_cache *kv = small_cache();
	int ids[4], i;

	for (i = 0; i < 4; i++) {
		ids[i] = kv_seq_new(kv);
		ck_assert_int_ge(ids[i], 0);
		ck_assert_int_lt(ids[i], 4);
		ck_assert_int_eq(kv_seq_append(kv, ids[i], 20), 0);
	}
	ck_assert_int_eq(kv_seqs_live(kv), 4);
	ck_assert_int_eq(kv_seq_new(kv), -ENOSPC);
	ck_assert_int_eq(kv_blocks_free(kv), 0);
	assert_consistent(kv);
	ck_assert_int_eq(kv_seq_free(kv, ids[2]), 0);
	ck_assert_int_eq(kv_seq_free(kv, ids[2]), -EINVAL);
	ck_assert(!kv_seq_live(kv, ids[2]));
	ck_assert_int_eq(kv_seq_len(kv, ids[2]), -EINVAL);
	ck_assert_int_eq(kv_seq_written(kv, ids[2]), -EINVAL);
	ck_assert_int_eq(kv_seq_append(kv, ids[2], 1), -EINVAL);
	ck_assert_int_eq(kv_seq_truncate(kv, ids[2], 0), -EINVAL);
	ck_assert_int_eq(kv_seq_blocks_needed(kv, ids[2], 1), -EINVAL);
	ck_assert_ptr_null(kv_seq_blocks(kv, ids[2]));
	ck_assert_int_eq(kv_blocks_free(kv), 2);
	ck_assert_int_eq(kv_seq_new(kv), ids[2]);
	ck_assert_int_eq(kv_seq_len(kv, ids[2]), 0);
	ck_assert_int_eq(kv_seq_len(kv, -1), -EINVAL);
	ck_assert_int_eq(kv_seq_len(kv, 4), -EINVAL);
	ck_assert_int_eq(kv_seq_free(kv, 99), -EINVAL);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(kv_seq_free(kv, ids[i]), 0);
	ck_assert_int_eq(kv_seqs_live(kv), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 8);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_seq_lifecycle);

/* Random appends, truncates and frees against a simple model of lengths. */
START_TEST(test_random_ops)
{
	struct kv_params p = small_params();
	struct kv_cache *kv;
	int len[6], i, op, s, n, rc, used;
	unsigned r = 12345;

	p.n_blocks = 20;
	p.max_seqs = 6;
	p.n_ctx = 90;
	p.block_tokens = 7;
	ck_assert_int_eq(kv_new(&p, &kv, NULL), 0);
	for (i = 0; i < 6; i++)
		len[i] = -1;
	for (i = 0; i < 5000; i++) {
		r = r * 1103515245u + 12345u;
		op = (int)((r >> 16) % 4);
		s = (int)((r >> 8) % 6);
		n = (int)((r >> 20) % 40);
		if (len[s] < 0) {
			if (op == 0 && (rc = kv_seq_new(kv)) >= 0)
				len[rc] = 0;
			continue;
		}
		switch (op) {
		case 0:
		case 1:
			rc = kv_seq_append(kv, s, n);
			if (rc == 0)
				len[s] += n;
			else
				ck_assert(rc == -ENOSPC || rc == -E2BIG);
			break;
		case 2:
			ck_assert_int_eq(kv_seq_truncate(kv, s,
			    len[s] ? n % (len[s] + 1) : 0), 0);
			len[s] = len[s] ? n % (len[s] + 1) : 0;
			break;
		default:
			ck_assert_int_eq(kv_seq_free(kv, s), 0);
			len[s] = -1;
			break;
		}
		used = 0;
		for (s = 0; s < 6; s++) {
			if (len[s] < 0)
				continue;
			ck_assert_int_eq(kv_seq_len(kv, s), len[s]);
			used += (len[s] + 6) / 7;
		}
		ck_assert_int_eq(kv_blocks_free(kv), 20 - used);
		assert_consistent(kv);
	}
	for (s = 0; s < 6; s++)
		if (len[s] >= 0)
			ck_assert_int_eq(kv_seq_free(kv, s), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 20);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_random_ops);

/* ---- the prefix cache ------------------------------------------------ */

/* ids[i] = base + i for i < n. */
static void
fill_ids(int32_t *ids, int n, int base)
{
	for (int i = 0; i < n; i++)
		ids[i] = base + i;
}

/* A sequence of n written tokens ids, published under salt; its id. */
static int
written_seq(struct kv_cache *kv, const int32_t *ids, int n, uint64_t salt)
{
	int seq = kv_seq_new(kv);

	ck_assert_int_ge(seq, 0);
	ck_assert_int_eq(kv_seq_append(kv, seq, n), 0);
	ck_assert_int_eq(kv_seq_set_written(kv, seq, n), 0);
	ck_assert_int_ge(kv_seq_publish(kv, seq, salt, ids, n), 0);
	return seq;
}

/*
 * 40 written tokens leave 2 full blocks cached after their sequence ends;
 * a prompt with the same first 32 ids under the same salt finds both, a
 * different id in the second block or another salt finds fewer, and a
 * shared sequence holds them with len = written = 32.
 */
START_TEST(test_prefix_match_share)
{
	struct kv_cache *kv = small_cache();
	int32_t ids[48], other[48], got[4];
	int seq;

	fill_ids(ids, 48, 100);
	seq = written_seq(kv, ids, 40, 7);
	ck_assert_int_eq(kv_blocks_cached(kv), 0);	/* still held */
	ck_assert_int_eq(kv_seq_free(kv, seq), 0);
	ck_assert_int_eq(kv_blocks_cached(kv), 2);
	ck_assert_int_eq(kv_blocks_free(kv), 8);
	assert_consistent(kv);

	ck_assert_int_eq(kv_prefix_match(kv, 7, ids, 48, got, 4), 2);
	ck_assert_int_eq(kv_prefix_match(kv, 7, ids, 31, got, 4), 1);
	ck_assert_int_eq(kv_prefix_match(kv, 7, ids, 48, got, 1), 1);
	ck_assert_int_eq(kv_prefix_match(kv, 8, ids, 48, got, 4), 0);
	memcpy(other, ids, sizeof(ids));
	other[20] = 5;
	ck_assert_int_eq(kv_prefix_match(kv, 7, other, 48, got, 4), 1);
	other[20] = ids[20];
	other[3] = 5;
	ck_assert_int_eq(kv_prefix_match(kv, 7, other, 48, got, 4), 0);

	ck_assert_int_eq(kv_prefix_match(kv, 7, ids, 48, got, 4), 2);
	seq = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_share(kv, seq, got, 2), 0);
	ck_assert_int_eq(kv_seq_len(kv, seq), 32);
	ck_assert_int_eq(kv_seq_written(kv, seq), 32);
	ck_assert_int_eq(kv_blocks_cached(kv), 0);
	ck_assert_int_eq(memcmp(kv_seq_blocks(kv, seq), got,
	    2 * sizeof(int32_t)), 0);
	/* a second sequence shares them too; no shared block is cut */
	{
		int s2 = kv_seq_new(kv);

		ck_assert_int_eq(kv_seq_share(kv, s2, got, 2), 0);
		ck_assert_int_eq(kv_seq_truncate(kv, s2, 20), -EBUSY);
		ck_assert_int_eq(kv_seq_truncate(kv, s2, 16), 0);
		assert_consistent(kv);
		ck_assert_int_eq(kv_seq_free(kv, s2), 0);
	}
	/* the sequence goes on past its shared blocks: fresh ones */
	ck_assert_int_eq(kv_seq_append(kv, seq, 10), 0);
	ck_assert_int_eq(kv_seq_blocks(kv, seq)[2] != got[0] &&
	    kv_seq_blocks(kv, seq)[2] != got[1], 1);
	ck_assert_int_eq(kv_seq_share(kv, seq, got, 1), -EINVAL);
	assert_consistent(kv);
	ck_assert_int_eq(kv_seq_free(kv, seq), 0);
	ck_assert_int_eq(kv_blocks_cached(kv), 2);
	ck_assert_int_eq(kv_blocks_free(kv), 8);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_prefix_match_share);

/*
 * Appends take free blocks first, then idle cached ones oldest first:
 * the cache never makes an append fail, and an evicted prefix is no
 * longer found.
 */
START_TEST(test_prefix_eviction)
{
	struct kv_params p = small_params();
	struct kv_cache *kv;
	int32_t a[32], b[32], got[2], peek[4];
	int s1, s2;

	p.n_blocks = 4;
	ck_assert_int_eq(kv_new(&p, &kv, NULL), 0);
	fill_ids(a, 32, 1000);
	fill_ids(b, 32, 2000);
	s1 = written_seq(kv, a, 16, 1);	/* cached first: the oldest */
	s2 = written_seq(kv, b, 16, 1);
	ck_assert_int_eq(kv_seq_free(kv, s1), 0);
	ck_assert_int_eq(kv_seq_free(kv, s2), 0);
	ck_assert_int_eq(kv_blocks_cached(kv), 2);
	ck_assert_int_eq(kv_blocks_free(kv), 4);
	/* the order appends will take them: 2 free, then a's, then b's */
	ck_assert_int_eq(kv_free_peek(kv, peek, 4), 4);
	ck_assert_int_eq(kv_prefix_match(kv, 1, a, 16, got, 1), 1);
	ck_assert_int_eq(peek[2], got[0]);

	s1 = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_append(kv, s1, 48), 0);	/* 3 blocks */
	ck_assert_int_eq(kv_evictions(kv), 1);
	ck_assert_int_eq(kv_prefix_match(kv, 1, a, 16, got, 1), 0);
	ck_assert_int_eq(kv_prefix_match(kv, 1, b, 16, got, 1), 1);
	ck_assert_int_eq(kv_seq_append(kv, s1, 16), 0);	/* all 4 */
	ck_assert_int_eq(kv_evictions(kv), 2);
	ck_assert_int_eq(kv_prefix_match(kv, 1, b, 16, got, 1), 0);
	ck_assert_int_eq(kv_seq_append(kv, s1, 1), -ENOSPC);
	assert_consistent(kv);
	ck_assert_int_eq(kv_seq_free(kv, s1), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 4);
	ck_assert_int_eq(kv_blocks_cached(kv), 0);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_prefix_eviction);

/*
 * The block after the shared ones: kv_prefix_extend() finds, among the
 * cached blocks that follow the same blocks, the one whose leading ids
 * are the most of the next ones (never a whole block), and kv_seq_extend()
 * gives the sequence a block of its own for them, counted written, with
 * the source kept from eviction while the pool is empty of anything else.
 */
START_TEST(test_prefix_extend)
{
	struct kv_params p = small_params();
	struct kv_cache *kv;
	int32_t a[48], b[48], c[48], got[4];
	int s, src, nb;

	p.n_blocks = 4;
	ck_assert_int_eq(kv_new(&p, &kv, NULL), 0);
	fill_ids(a, 48, 100);
	memcpy(b, a, sizeof(a));
	b[16 + 9] = 7;		/* b's second block: 9 ids of a's, then not */
	memcpy(c, a, sizeof(a));
	c[16 + 3] = 8;		/* c's: 3 of a's */
	ck_assert_int_eq(kv_seq_free(kv, written_seq(kv, a, 32, 5)), 0);
	ck_assert_int_eq(kv_seq_free(kv, written_seq(kv, c, 32, 5)), 0);
	ck_assert_int_eq(kv_blocks_cached(kv), 3);	/* a0 = c0, a1, c1 */
	assert_consistent(kv);

	ck_assert_int_eq(kv_prefix_match(kv, 5, b, 47, got, 4), 1);
	ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 1, b + 16, 31, &src),
	    9);
	ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 1, a + 16, 10, &src),
	    10);
	/* a whole block is never a part: at most block_tokens - 1 */
	ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 1, a + 16, 31, &src),
	    15);
	/* another salt, or another parent, finds nothing */
	ck_assert_int_eq(kv_prefix_extend(kv, 6, got, 0, b, 12, &src), 0);
	ck_assert_int_eq(src, -1);
	ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 0, b + 16, 31, &src),
	    0);
	/* the first block itself, from the salt */
	ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 0, b, 12, &src), 12);
	ck_assert_int_eq(src, got[0]);

	ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 1, b + 16, 31, &src),
	    9);
	s = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_share(kv, s, got, 1), 0);
	ck_assert_int_eq(kv_seq_extend(kv, s, src, 16), -EINVAL);
	ck_assert_int_eq(kv_seq_extend(kv, s, got[0], 0), -EINVAL);
	/* 4 blocks: a0 held, a1 and c1 idle, one free; fill the free one */
	{
		int t = kv_seq_new(kv);

		ck_assert_int_eq(kv_seq_append(kv, t, 16), 0);
		ck_assert_int_eq(kv_evictions(kv), 0);
		/* the append may evict c1 but never its source a1 */
		nb = kv_seq_extend(kv, s, src, 9);
		ck_assert_int_ge(nb, 0);
		ck_assert_int_ne(nb, src);
		ck_assert_int_eq(kv_evictions(kv), 1);
		ck_assert_int_eq(kv_seq_len(kv, s), 25);
		ck_assert_int_eq(kv_seq_written(kv, s), 25);
		ck_assert_int_eq(kv_seq_blocks(kv, s)[1], nb);
		ck_assert_int_eq(kv_prefix_extend(kv, 5, got, 1, b + 16, 31,
		    &src), 9);	/* a1 is still cached */
		assert_consistent(kv);
		/* nothing left to take but a1, held meanwhile: no room */
		ck_assert_int_eq(kv_seq_free(kv, s), 0);
		s = kv_seq_new(kv);
		ck_assert_int_eq(kv_seq_share(kv, s, got, 1), 0);
		ck_assert_int_eq(kv_seq_append(kv, t, 16), 0);
		ck_assert_int_eq(kv_seq_extend(kv, s, src, 9), -ENOSPC);
		ck_assert_int_eq(kv_seq_len(kv, s), 16);
		assert_consistent(kv);
		ck_assert_int_eq(kv_seq_free(kv, t), 0);
	}
	ck_assert_int_eq(kv_seq_free(kv, s), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 4);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_prefix_extend);

/*
 * A retired sequence of 40 written tokens leaves its 2 full blocks and,
 * as a donor, its last 8 positions: found by kv_prefix_extend() (at most
 * those 8), never by kv_prefix_match() nor shareable, idle and evicted
 * like any cached block; a block shared elsewhere or a sequence ending on
 * a block boundary leaves none.
 */
START_TEST(test_prefix_retire)
{
	struct kv_params p = small_params();
	struct kv_cache *kv;
	int32_t a[48], got[4];
	int s, src, t;

	p.n_blocks = 4;
	ck_assert_int_eq(kv_new(&p, &kv, NULL), 0);
	fill_ids(a, 48, 300);
	s = written_seq(kv, a, 40, 9);
	ck_assert_int_eq(kv_seq_len(kv, s), 40);
	ck_assert_int_eq(kv_seq_retire(kv, s, 9, a, 40), 0);
	ck_assert(!kv_seq_live(kv, s));
	ck_assert_int_eq(kv_blocks_cached(kv), 3);
	ck_assert_int_eq(kv_blocks_free(kv), 4);
	assert_consistent(kv);
	ck_assert_int_eq(kv_prefix_match(kv, 9, a, 47, got, 4), 2);
	ck_assert_int_eq(kv_prefix_extend(kv, 9, got, 2, a + 32, 15, &src),
	    8);
	/* a donor is copied, never shared */
	t = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_share(kv, t, &src, 1), -EINVAL);
	ck_assert_int_eq(kv_seq_share(kv, t, got, 2), 0);
	ck_assert_int_ge(kv_seq_extend(kv, t, src, 8), 0);
	ck_assert_int_eq(kv_seq_len(kv, t), 40);
	assert_consistent(kv);
	/* ending on a block boundary leaves no donor */
	ck_assert_int_eq(kv_seq_retire(kv, t, 9, a, 32), 0);
	ck_assert_int_eq(kv_blocks_cached(kv), 3);
	assert_consistent(kv);
	/* every block taken: the donor is evicted like the others */
	t = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_append(kv, t, 64), 0);
	ck_assert_int_eq(kv_blocks_cached(kv), 0);
	ck_assert_int_eq(kv_prefix_extend(kv, 9, got, 2, a + 32, 15, &src),
	    0);
	assert_consistent(kv);
	ck_assert_int_eq(kv_seq_free(kv, t), 0);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_prefix_retire);

/*
 * Random appends, writes, publishes, shares, partial copies, truncations,
 * frees and retirements over a few token streams that share prefixes: the invariants hold after every
 * operation, every pool count balances, and a shared prefix's blocks are
 * the ones the match found.
 */
START_TEST(test_prefix_random)
{
	struct kv_params p = small_params();
	struct kv_cache *kv;
	int32_t ids[3][96], got[16];
	int len[5], which[5], i, s, n, rc, b;
	unsigned r = 777;

	p.n_blocks = 18;
	p.max_seqs = 5;
	p.n_ctx = 96;
	p.block_tokens = 8;
	ck_assert_int_eq(kv_new(&p, &kv, NULL), 0);
	/* streams 1 and 2 share their first 40 ids with stream 0 */
	for (i = 0; i < 96; i++) {
		ids[0][i] = i;
		ids[1][i] = i < 40 ? i : 500 + i;
		ids[2][i] = i < 40 ? i : 900 + i;
	}
	for (s = 0; s < 5; s++)
		len[s] = -1;
	for (i = 0; i < 4000; i++) {
		r = r * 1103515245u + 12345u;
		s = (int)((r >> 8) % 5);
		n = (int)((r >> 20) % 30);
		if (len[s] < 0) {
			int m;

			if ((rc = kv_seq_new(kv)) < 0)
				continue;
			which[rc] = (int)((r >> 12) % 3);
			m = kv_prefix_match(kv, 3, ids[which[rc]], 96, got, 16);
			ck_assert_int_eq(kv_seq_share(kv, rc, got, m), 0);
			len[rc] = m * 8;
			/* and part of the block after them, copied */
			if ((n = kv_prefix_extend(kv, 3, got, m,
			    ids[which[rc]] + m * 8, 95 - m * 8, &b)) > 0 &&
			    kv_seq_extend(kv, rc, b, n) >= 0)
				len[rc] += n;
			continue;
		}
		switch ((r >> 16) % 4) {
		case 0:
			rc = kv_seq_append(kv, s, n);
			ck_assert(rc == 0 || rc == -ENOSPC || rc == -E2BIG);
			if (rc == 0) {
				len[s] += n;
				ck_assert_int_eq(kv_seq_set_written(kv, s,
				    len[s]), 0);
				ck_assert_int_ge(kv_seq_publish(kv, s, 3,
				    ids[which[s]], len[s]), 0);
			}
			break;
		case 1:
			rc = kv_seq_truncate(kv, s, n < len[s] ? n : len[s]);
			ck_assert(rc == 0 || rc == -EBUSY);
			if (rc == 0 && n < len[s])
				len[s] = n;
			break;
		default:
			/* half of the ends leave a donor behind */
			ck_assert_int_eq((r >> 24) & 1 ? kv_seq_free(kv, s) :
			    kv_seq_retire(kv, s, 3, ids[which[s]], len[s]), 0);
			len[s] = -1;
			break;
		}
		for (int q = 0; q < 5; q++)
			if (len[q] >= 0)
				ck_assert_int_eq(kv_seq_len(kv, q), len[q]);
		assert_consistent(kv);
	}
	for (s = 0; s < 5; s++)
		if (len[s] >= 0)
			ck_assert_int_eq(kv_seq_free(kv, s), 0);
	ck_assert_int_eq(kv_blocks_free(kv), 18);
	assert_consistent(kv);
	kv_free(kv);
}
END_TEST
SUITE_TEST("core", test_prefix_random);

SUITE_CASE("core", 30);

int
main(void)
{
	return suite_main(suite_registered("kvcache"));
}
