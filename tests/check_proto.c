/*
 * check_proto.c - the shared-memory ABI (cp_proto.h) and the ring helpers
 * (ring.h): segment layout arithmetic, free-running index wraparound,
 * full/empty detection, and a two-thread producer/consumer run across the
 * 2^32 wrap.
 */
#include "cp_proto.h"
#include "lib/suite.h"
#include "ring.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>


/*
 * Golden offsets worked out by hand from the layout rules in cp_proto.h:
 * header page, control page (768 bytes rounded up), SQ pages, arena, CQ.
 */
START_TEST(test_layout_defaults)
{
	struct cp_seg_layout l;

	ck_assert_int_eq(cp_seg_layout(64, 1024, 1u << 20, &l), 0);
	ck_assert_uint_eq(l.ctl_off, 4096);
	ck_assert_uint_eq(l.sq_off, 8192);
	ck_assert_uint_eq(l.arena_off, 12288);		/* 64 x 64 = one page */
	ck_assert_uint_eq(l.cq_off, 12288 + 1048576);
	ck_assert_uint_eq(l.seg_bytes, 12288 + 1048576 + 65536);
}
END_TEST
SUITE_TEST("layout", test_layout_defaults);

START_TEST(test_layout_minimum)
{
	struct cp_seg_layout l;

	/* 8 x 64 = 512 bytes of SQ and 16 x 64 = 1024 of CQ, each one page. */
	ck_assert_int_eq(cp_seg_layout(CP_SQ_MIN, CP_CQ_MIN, CP_ARENA_MIN, &l),
	    0);
	ck_assert_uint_eq(l.sq_off, 8192);
	ck_assert_uint_eq(l.arena_off, 12288);
	ck_assert_uint_eq(l.cq_off, 16384);
	ck_assert_uint_eq(l.seg_bytes, 20480);
}
END_TEST
SUITE_TEST("layout", test_layout_minimum);

START_TEST(test_layout_maximum)
{
	struct cp_seg_layout l;
	uint64_t want;

	ck_assert_int_eq(cp_seg_layout(CP_SQ_MAX, CP_CQ_MAX, CP_ARENA_MAX, &l),
	    0);
	want = 8192ull + 4096ull * 64 + (64ull << 20) + 65536ull * 64;
	ck_assert_uint_eq(l.seg_bytes, want);
	ck_assert_uint_eq(l.seg_bytes % CP_PAGE, 0);
	ck_assert_uint_lt(l.sq_off, l.arena_off);
	ck_assert_uint_lt(l.arena_off, l.cq_off);
}
END_TEST
SUITE_TEST("layout", test_layout_maximum);

START_TEST(test_layout_rejects)
{
	struct cp_seg_layout l;

	ck_assert_int_eq(cp_seg_layout(0, 1024, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(48, 1024, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(4, 1024, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(8192, 1024, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(64, 8, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(64, 1u << 17, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(64, 1000, 1u << 20, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(64, 1024, 3000, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(64, 1024, 1u << 27, &l), -EINVAL);
	ck_assert_int_eq(cp_seg_layout(64, 1024, 0x80000000u, &l), -EINVAL);
	ck_assert_int_eq(cp_is_pow2(0), 0);
	ck_assert_int_eq(cp_is_pow2(1), 1);
	ck_assert_int_eq(cp_is_pow2(0x80000000u), 1);
	ck_assert_int_eq(cp_is_pow2(0x80000001u), 0);
}
END_TEST
SUITE_TEST("layout", test_layout_rejects);

/* Control words sit 128 bytes apart: no two share a cache line pair. */
START_TEST(test_ctl_lines)
{
	struct cp_seg_ctl ctl;
	uintptr_t a = (uintptr_t)&ctl.sq_tail.v;
	uintptr_t words[6] = {
		(uintptr_t)&ctl.sq_tail.v, (uintptr_t)&ctl.sq_head.v,
		(uintptr_t)&ctl.cq_tail.v, (uintptr_t)&ctl.cq_head.v,
		(uintptr_t)&ctl.client_waiting.v, (uintptr_t)&ctl.daemon_idle.v,
	};
	int i;

	for (i = 0; i < 6; i++)
		ck_assert_uint_eq(words[i] - a, (uintptr_t)i * 128);
}
END_TEST
SUITE_TEST("layout", test_ctl_lines);

START_TEST(test_ring_count_wrap)
{
	/* Indices just below and just past the 2^32 wrap. */
	ck_assert_uint_eq(ring_count(2u, 0xfffffffeu), 4);
	ck_assert_uint_eq(ring_count(0u, 0u), 0);
	ck_assert_uint_eq(ring_count(0x80000000u, 0x7fffffffu), 1);
	ck_assert_int_eq(ring_sane(2u, 0xfffffffeu, 4), 1);	/* full */
	ck_assert_uint_eq(ring_space(2u, 0xfffffffeu, 4), 0);
	ck_assert_int_eq(ring_sane(3u, 0xfffffffeu, 4), 0);	/* tail-head > entries */
	ck_assert_int_eq(ring_sane(7u, 7u, 4), 1);		/* empty */
	ck_assert_uint_eq(ring_space(7u, 7u, 4), 4);
	/* A head that ran past the tail reads as a huge count: insane. */
	ck_assert_int_eq(ring_sane(7u, 8u, 4), 0);
	ck_assert_uint_eq(ring_count(7u, 8u), 0xffffffffu);
	ck_assert_uint_eq(ring_slot(0xffffffffu, 7), 7);
	ck_assert_uint_eq(ring_slot(0x100000000ull & 0xffffffffu, 7), 0);
	ck_assert_uint_eq(ring_slot(13u, 7), 5);
}
END_TEST
SUITE_TEST("ring", test_ring_count_wrap);

START_TEST(test_copy_words)
{
	struct cp_sqe a, b;
	size_t i;

	memset(&a, 0, sizeof(a));
	a.op = CP_OP_SUBMIT;
	a.flags = CP_SQF_MORE;
	a.stop_bytes = 7;
	a.req_id = 0xdeadbeefu;
	a.arena_off = 12;
	a.arena_len = 99;
	a.params.temperature = 0.5f;
	a.params.seed = 0x0123456789abcdefull;
	a.reserved = 3;
	memset(&b, 0xa5, sizeof(b));
	ring_copy_out(&b, &a, sizeof(b));
	ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
	memset(&b, 0, sizeof(b));
	ring_copy_in(&b, &a, sizeof(a));
	for (i = 0; i < sizeof(a); i++)
		ck_assert_uint_eq(((unsigned char *)&a)[i],
		    ((unsigned char *)&b)[i]);
}
END_TEST
SUITE_TEST("ring", test_copy_words);

/*
 * Producer and consumer threads over an 8-slot ring whose indices start 50
 * items before the 2^32 wrap, following the protocol of cp_proto.h rule 3.
 * The consumer checks order and the ring's sanity on every load.
 */
#define SPSC_ENTRIES	8u
#define SPSC_ITEMS	200000u
#define SPSC_START	(0u - 50u)

struct spsc {
	uint32_t tail __attribute__((aligned(128)));
	uint32_t head __attribute__((aligned(128)));
	uint32_t slot[SPSC_ENTRIES] __attribute__((aligned(128)));
	int insane;
};

static void *
spsc_producer(void *arg)
{
	struct spsc *r = arg;
	uint32_t tail = SPSC_START, n = 0;

	while (n < SPSC_ITEMS) {
		uint32_t head = ring_load_acquire(&r->head);

		if (ring_space(tail, head, SPSC_ENTRIES) == 0) {
			sched_yield();	/* the consumer may share our core */
			continue;
		}
		ring_store_relaxed(&r->slot[ring_slot(tail, SPSC_ENTRIES - 1)],
		    n * 2654435761u);
		ring_store_release(&r->tail, ++tail);
		n++;
	}
	return NULL;
}

START_TEST(test_spsc_threads)
{
	struct spsc *r;
	pthread_t th;
	uint32_t head = SPSC_START, n = 0;

	r = aligned_alloc(128, sizeof(*r));
	ck_assert_ptr_nonnull(r);
	memset(r, 0, sizeof(*r));
	r->tail = r->head = SPSC_START;
	ck_assert_int_eq(pthread_create(&th, NULL, spsc_producer, r), 0);
	while (n < SPSC_ITEMS) {
		uint32_t tail = ring_load_acquire(&r->tail);

		if (!ring_sane(tail, head, SPSC_ENTRIES))
			r->insane++;
		if (head == tail)
			sched_yield();	/* the producer may share our core */
		while (head != tail) {
			uint32_t v;

			v = ring_load_relaxed(&r->slot[ring_slot(head,
			    SPSC_ENTRIES - 1)]);
			ck_assert_uint_eq(v, n * 2654435761u);
			head++;
			n++;
		}
		ring_store_release(&r->head, head);
	}
	pthread_join(th, NULL);
	ck_assert_int_eq(r->insane, 0);
	/* The run crossed the wrap and ended where the arithmetic says. */
	ck_assert_uint_eq(head, SPSC_START + SPSC_ITEMS);
	ck_assert_uint_lt(head, SPSC_START);
	free(r);
}
END_TEST
SUITE_TEST("ring", test_spsc_threads);

SUITE_CASE("ring", 30);

int
main(void)
{
	return suite_main(suite_registered("proto"));
}
