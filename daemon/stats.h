/*
 * stats.h - cpd's statistics: fixed-bucket histograms and the assembly of
 * the counters that cp_stats() returns (cp_proto.h, struct cp_wire_stats).
 *
 * Two threads keep counters and neither locks for the other:
 *	the engine thread	steps, tokens, KV blocks, requests waiting and
 *				running, preemptions, and the histograms
 *				(tokens and sequences per step, TTFT, ITL);
 *				published through the port (ep_stats_set());
 *	the io loop		clients, disconnects by reason, requests
 *				handed over, refused and in flight, stalls
 *				(struct stats_io, its own).
 * stats_wire() joins a copy of each into the wire layout.
 *
 * Histograms have CP_STATS_BUCKETS buckets with fixed bounds, one table per
 * kind: latencies in microseconds on a 1-2-5 series from 100 us to 20 s,
 * then 30 s and 60 s; counts 0, 1 and the powers of two up to 2^17; the
 * last bucket of each is unbounded.  A zeroed struct stats_hist is an
 * empty histogram.
 */
#ifndef CP_STATS_H
#define CP_STATS_H

#include <stdint.h>

#include "cp_proto.h"

#define STATS_BUCKETS	CP_STATS_BUCKETS

/* Histogram kinds: which bound table. */
#define STATS_LAT_US	0	/* latencies, microseconds */
#define STATS_COUNT	1	/* tokens or sequences per step */

struct stats_hist {
	uint64_t count;			/* samples */
	uint64_t sum;			/* of the samples, wrapping */
	uint64_t max;			/* largest sample, 0 when none */
	uint64_t n[STATS_BUCKETS];	/* samples per bucket */
};

/* The io loop's counters (server.c). */
struct stats_io {
	uint64_t uptime_ms;
	uint64_t clients;		/* sessions now, any state */
	uint64_t clients_total;		/* sessions ever accepted */
	uint64_t clients_rejected;	/* refused before a session existed */
	uint64_t protocol_errors;
	uint64_t requests_total;	/* SUBMITs pushed to the engine */
	uint64_t requests_active;	/* pushed, terminal event not back */
	uint64_t requests_refused;	/* SUBMITs answered ERROR by the loop */
	uint64_t cq_stalls;
	uint64_t disconnects[CP_END_REASONS];
	int draining;
};

struct ep_stats;

/* Inclusive upper bound of bucket i of kind (UINT64_MAX for the last). */
uint64_t stats_bound(int kind, unsigned i);

/* The bucket of kind that holds v. */
unsigned stats_bucket(int kind, uint64_t v);

/* Counts sample v into h (a histogram of kind). */
void stats_hist_add(struct stats_hist *h, int kind, uint64_t v);

/* Writes h of kind with its bounds into the wire layout w. */
void stats_hist_wire(const struct stats_hist *h, int kind,
    struct cp_wire_hist *w);

/* Fills w (every byte) from the io loop's and the engine's counters. */
void stats_wire(const struct stats_io *io, const struct ep_stats *es,
    struct cp_wire_stats *w);

/* Nanoseconds on the monotonic clock. */
uint64_t stats_now_ns(void);

#endif
