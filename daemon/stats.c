/*
 * stats.c - histograms and the wire form of cpd's counters (see stats.h).
 *
 * The bound tables are the whole definition of the buckets: the wire
 * carries them (cp_wire_hist.le[]), so a reader never assumes a table of
 * its own.  Each table strictly increases and ends with UINT64_MAX, which
 * is what libcpclient checks.
 */
#include "stats.h"

#include <string.h>
#include <time.h>

#include "engine_port.h"

/* Microseconds, 1-2-5 from 0.1 ms, then 30 s and 60 s, then the rest. */
static const uint64_t lat_le[STATS_BUCKETS] = {
	100, 200, 500,
	1000, 2000, 5000,
	10000, 20000, 50000,
	100000, 200000, 500000,
	1000000, 2000000, 5000000,
	10000000, 20000000, 30000000, 60000000,
	UINT64_MAX,
};

_Static_assert(STATS_BUCKETS == 20, "bound tables have 20 entries");

uint64_t
stats_bound(int kind, unsigned i)
{
	if (i >= STATS_BUCKETS - 1)
		return UINT64_MAX;
	if (kind == STATS_LAT_US)
		return lat_le[i];
	/* Counts: 0, 1, 2, 4, ..., 2^17. */
	return i == 0 ? 0 : (uint64_t)1 << (i - 1);
}

unsigned
stats_bucket(int kind, uint64_t v)
{
	unsigned i;

	if (kind != STATS_LAT_US) {
		/* Bucket i > 0 holds (2^(i-2), 2^(i-1)]: 1 + ceil(log2 v). */
		if (v == 0)
			return 0;
		for (i = 1; i < STATS_BUCKETS - 1; i++)
			if (v <= (uint64_t)1 << (i - 1))
				return i;
		return STATS_BUCKETS - 1;
	}
	for (i = 0; i < STATS_BUCKETS - 1; i++)
		if (v <= lat_le[i])
			return i;
	return STATS_BUCKETS - 1;
}

void
stats_hist_add(struct stats_hist *h, int kind, uint64_t v)
{
	h->n[stats_bucket(kind, v)]++;
	h->count++;
	h->sum += v;
	if (v > h->max)
		h->max = v;
}

void
stats_hist_wire(const struct stats_hist *h, int kind, struct cp_wire_hist *w)
{
	unsigned i;

	memset(w, 0, sizeof(*w));
	w->count = h->count;
	w->sum = h->sum;
	w->max = h->max;
	for (i = 0; i < STATS_BUCKETS; i++) {
		w->le[i] = stats_bound(kind, i);
		w->n[i] = h->n[i];
	}
}

void
stats_wire(const struct stats_io *io, const struct ep_stats *es,
    struct cp_wire_stats *w)
{
	unsigned i;

	memset(w, 0, sizeof(*w));
	w->uptime_ms = io->uptime_ms;
	w->clients = io->clients;
	w->clients_total = io->clients_total;
	w->clients_rejected = io->clients_rejected;
	w->protocol_errors = io->protocol_errors;
	w->requests_total = io->requests_total;
	w->requests_active = io->requests_active;
	w->requests_refused = io->requests_refused;
	w->cq_stalls = io->cq_stalls;
	for (i = 0; i < CP_END_REASONS; i++)
		w->disconnects[i] = io->disconnects[i];
	w->flags = io->draining ? CP_STATS_DRAINING : 0;

	w->tokens_prompt = es->tokens_prompt;
	w->tokens_prompt_cached = es->tokens_prompt_cached;
	w->kv_blocks_cached = es->kv_blocks_cached;	/* clamped below */
	w->prefix_evictions = es->prefix_evictions;
	w->pace_target_us = es->pace_target_us;
	w->pace_est_us = es->pace_est_us;
	w->pace_meas_us = es->pace_meas_us;
	w->pace_err_us = es->pace_err_us;
	w->pace_steps = es->pace_steps;
	w->pace_missed = es->pace_missed < es->pace_steps ? es->pace_missed :
	    es->pace_steps;
	w->pace_missed_us = es->pace_missed_us;
	w->tokens_generated = es->tokens_generated;
	w->steps = es->steps;
	/* used + free == total on the wire, whatever was published. */
	w->kv_blocks_total = es->kv_blocks_total;
	w->kv_blocks_used = es->kv_blocks_used < es->kv_blocks_total ?
	    es->kv_blocks_used : es->kv_blocks_total;
	w->kv_blocks_free = w->kv_blocks_total - w->kv_blocks_used;
	if (w->kv_blocks_cached > w->kv_blocks_free)
		w->kv_blocks_cached = w->kv_blocks_free;
	w->requests_waiting = es->requests_waiting;
	w->requests_running = es->requests_running;
	w->requests_paused = es->requests_paused;
	w->preemptions = es->preemptions;
	stats_hist_wire(&es->step_prefill, STATS_COUNT, &w->step_prefill);
	stats_hist_wire(&es->step_decode, STATS_COUNT, &w->step_decode);
	stats_hist_wire(&es->step_seqs, STATS_COUNT, &w->step_seqs);
	stats_hist_wire(&es->ttft_us, STATS_LAT_US, &w->ttft_us);
	stats_hist_wire(&es->itl_us, STATS_LAT_US, &w->itl_us);
}

uint64_t
stats_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
