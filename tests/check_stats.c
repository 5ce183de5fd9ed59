/*
 * check_stats.c - daemon/stats.c: the histogram buckets and the wire form
 * of the counters.
 *
 * The bounds are the ones stats.h promises, written out by hand: latencies
 * on a 1-2-5 series from 100 us to 20 s, then 30 s and 60 s; counts 0, 1
 * and the powers of two up to 2^17; the last bucket of both unbounded.
 * The wire invariants are cp_proto.h's (struct cp_wire_stats).
 */
#include "stats.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine_port.h"
#include "lib/suite.h"


static const uint64_t want_lat[CP_STATS_BUCKETS] = {
	100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
	200000, 500000, 1000000, 2000000, 5000000, 10000000, 20000000,
	30000000, 60000000, UINT64_MAX,
};

static const uint64_t want_count[CP_STATS_BUCKETS] = {
	0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
	16384, 32768, 65536, 131072, UINT64_MAX,
};

START_TEST(test_bounds)
{
	unsigned i;

	for (i = 0; i < CP_STATS_BUCKETS; i++) {
		ck_assert_uint_eq(stats_bound(STATS_LAT_US, i), want_lat[i]);
		ck_assert_uint_eq(stats_bound(STATS_COUNT, i), want_count[i]);
	}
	/* Past the end: the unbounded last bucket. */
	ck_assert_uint_eq(stats_bound(STATS_LAT_US, CP_STATS_BUCKETS),
	    UINT64_MAX);
}
END_TEST
SUITE_TEST("stats", test_bounds);

/* Each bound is the inclusive top of its bucket; one past goes up one. */
START_TEST(test_buckets)
{
	unsigned i;

	for (i = 0; i + 1 < CP_STATS_BUCKETS; i++) {
		ck_assert_uint_eq(stats_bucket(STATS_LAT_US, want_lat[i]), i);
		ck_assert_uint_eq(stats_bucket(STATS_LAT_US, want_lat[i] + 1),
		    i + 1);
		ck_assert_uint_eq(stats_bucket(STATS_COUNT, want_count[i]), i);
		ck_assert_uint_eq(stats_bucket(STATS_COUNT,
		    want_count[i] + 1), i + 1);
	}
	ck_assert_uint_eq(stats_bucket(STATS_LAT_US, 0), 0);
	ck_assert_uint_eq(stats_bucket(STATS_COUNT, 3), 3);	/* (2, 4] */
	ck_assert_uint_eq(stats_bucket(STATS_COUNT, 28), 6);	/* (16, 32] */
	ck_assert_uint_eq(stats_bucket(STATS_LAT_US, UINT64_MAX),
	    CP_STATS_BUCKETS - 1);
	ck_assert_uint_eq(stats_bucket(STATS_COUNT, UINT64_MAX),
	    CP_STATS_BUCKETS - 1);
}
END_TEST
SUITE_TEST("stats", test_buckets);

START_TEST(test_hist_add)
{
	struct stats_hist h;
	struct cp_wire_hist w;
	unsigned i;

	memset(&h, 0, sizeof(h));
	stats_hist_add(&h, STATS_LAT_US, 150);		/* (100, 200] */
	stats_hist_add(&h, STATS_LAT_US, 100);		/* <= 100 */
	stats_hist_add(&h, STATS_LAT_US, 90000000);	/* over 60 s */
	ck_assert_uint_eq(h.count, 3);
	ck_assert_uint_eq(h.sum, 90000250);
	ck_assert_uint_eq(h.max, 90000000);
	ck_assert_uint_eq(h.n[0], 1);
	ck_assert_uint_eq(h.n[1], 1);
	ck_assert_uint_eq(h.n[CP_STATS_BUCKETS - 1], 1);
	stats_hist_wire(&h, STATS_LAT_US, &w);
	ck_assert_uint_eq(w.count, 3);
	ck_assert_uint_eq(w.sum, 90000250);
	ck_assert_uint_eq(w.max, 90000000);
	ck_assert_uint_eq(w.reserved, 0);
	for (i = 0; i < CP_STATS_BUCKETS; i++) {
		ck_assert_uint_eq(w.le[i], want_lat[i]);
		ck_assert_uint_eq(w.n[i], h.n[i]);
	}
}
END_TEST
SUITE_TEST("stats", test_hist_add);

START_TEST(test_wire)
{
	struct cp_wire_stats w;
	struct stats_io io;
	struct ep_stats es;
	unsigned i;

	memset(&io, 0, sizeof(io));
	memset(&es, 0, sizeof(es));
	memset(&w, 0xa5, sizeof(w));
	io.uptime_ms = 1234;
	io.clients = 2;
	io.clients_total = 9;
	io.clients_rejected = 4;
	io.protocol_errors = 3;
	io.requests_total = 20;
	io.requests_active = 5;
	io.requests_refused = 6;
	io.cq_stalls = 1;
	for (i = 0; i < CP_END_REASONS; i++)
		io.disconnects[i] = i;	/* 0 + 1 + ... + 7 = 28 */
	io.draining = 1;
	es.steps = 77;
	es.tokens_prompt = 300;
	es.tokens_generated = 400;
	es.kv_blocks_total = 64;
	es.kv_blocks_used = 70;		/* more than there is: clamped */
	es.requests_waiting = 3;
	es.requests_running = 4;
	es.requests_paused = 2;
	es.preemptions = 8;
	es.tokens_prompt_cached = 96;
	es.kv_blocks_cached = 5;	/* more than free: clamped */
	es.prefix_evictions = 11;
	es.pace_target_us = 40000;
	es.pace_est_us = 38000;
	es.pace_meas_us = 41000;
	es.pace_err_us = 900;
	es.pace_steps = 12;
	es.pace_missed = 13;		/* more than the steps: clamped */
	es.pace_missed_us = 7000;
	stats_hist_add(&es.step_seqs, STATS_COUNT, 5);
	stats_wire(&io, &es, &w);
	ck_assert_uint_eq(w.uptime_ms, 1234);
	ck_assert_uint_eq(w.clients, 2);
	ck_assert_uint_eq(w.clients_total, 9);
	ck_assert_uint_eq(w.clients_rejected, 4);
	ck_assert_uint_eq(w.protocol_errors, 3);
	ck_assert_uint_eq(w.requests_total, 20);
	ck_assert_uint_eq(w.requests_active, 5);
	ck_assert_uint_eq(w.requests_refused, 6);
	ck_assert_uint_eq(w.cq_stalls, 1);
	for (i = 0; i < CP_END_REASONS; i++)
		ck_assert_uint_eq(w.disconnects[i], i);
	ck_assert_uint_eq(w.flags, CP_STATS_DRAINING);
	ck_assert_uint_eq(w.steps, 77);
	ck_assert_uint_eq(w.tokens_prompt, 300);
	ck_assert_uint_eq(w.tokens_generated, 400);
	ck_assert_uint_eq(w.kv_blocks_total, 64);
	ck_assert_uint_eq(w.kv_blocks_used, 64);
	ck_assert_uint_eq(w.kv_blocks_free, 0);
	ck_assert_uint_eq(w.requests_waiting, 3);
	ck_assert_uint_eq(w.requests_running, 4);
	ck_assert_uint_eq(w.requests_paused, 2);
	ck_assert_uint_eq(w.preemptions, 8);
	ck_assert_uint_eq(w.tokens_prompt_cached, 96);
	ck_assert_uint_eq(w.kv_blocks_cached, 0);
	ck_assert_uint_eq(w.prefix_evictions, 11);
	ck_assert_uint_eq(w.pace_target_us, 40000);
	ck_assert_uint_eq(w.pace_est_us, 38000);
	ck_assert_uint_eq(w.pace_meas_us, 41000);
	ck_assert_uint_eq(w.pace_err_us, 900);
	ck_assert_uint_eq(w.pace_steps, 12);
	ck_assert_uint_eq(w.pace_missed, 12);
	ck_assert_uint_eq(w.pace_missed_us, 7000);
	ck_assert_uint_eq(w.reserved, 0);
	ck_assert_uint_eq(w.step_seqs.count, 1);
	ck_assert_uint_eq(w.step_seqs.n[4], 1);		/* (4, 8] */
	ck_assert_uint_eq(w.step_seqs.le[4], 8);
	/* Empty histograms still carry their bounds. */
	ck_assert_uint_eq(w.itl_us.count, 0);
	ck_assert_uint_eq(w.itl_us.le[0], 100);
	ck_assert_uint_eq(w.step_decode.le[CP_STATS_BUCKETS - 1], UINT64_MAX);

	es.kv_blocks_used = 10;
	io.draining = 0;
	stats_wire(&io, &es, &w);
	ck_assert_uint_eq(w.kv_blocks_used, 10);
	ck_assert_uint_eq(w.kv_blocks_free, 54);
	ck_assert_uint_eq(w.flags, 0);
}
END_TEST
SUITE_TEST("stats", test_wire);

START_TEST(test_clock)
{
	uint64_t a = stats_now_ns(), b = stats_now_ns();

	ck_assert_uint_gt(a, 0);
	ck_assert_uint_ge(b, a);
}
END_TEST
SUITE_TEST("stats", test_clock);

int
main(void)
{
	return suite_main(suite_registered("stats"));
}
