/*
 * statfmt.c - the daemon's counters (struct cp_stats) as text: a table,
 * one JSON object, or the Prometheus text exposition format.  cpq --stats
 * and cpd-http's GET /metrics both print through it.
 */
#include "statfmt.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct stat_row {
	const char *name;	/* table and JSON name */
	const char *metric;	/* Prometheus name */
	const char *type;	/* "counter" or "gauge" */
	const char *help;
	size_t off;		/* a uint64_t in struct cp_stats */
	double scale;		/* Prometheus unit per daemon unit; 0: as is */
};

#define ROW(n, m, t, h) { #n, m, t, h, offsetof(struct cp_stats, n), 0 }
#define ROWU(n, m, t, h, s) { #n, m, t, h, offsetof(struct cp_stats, n), s }
static const struct stat_row stat_rows[] = {
	ROW(uptime_ms, "cpd_uptime_seconds", "gauge",
	    "Time since the daemon started."),
	ROW(clients, "cpd_clients", "gauge", "Clients connected now."),
	ROW(clients_total, "cpd_clients_total", "counter",
	    "Clients accepted since start."),
	ROW(clients_rejected, "cpd_clients_rejected_total", "counter",
	    "Connections refused at the handshake."),
	ROW(protocol_errors, "cpd_protocol_errors_total", "counter",
	    "Connections closed for a protocol violation."),
	ROW(requests_total, "cpd_requests_total", "counter",
	    "Requests accepted for generation."),
	ROW(requests_active, "cpd_requests_active", "gauge",
	    "Requests accepted and not ended."),
	ROW(requests_waiting, "cpd_requests_waiting", "gauge",
	    "Requests queued in the engine, holding no KV cache yet."),
	ROW(requests_running, "cpd_requests_running", "gauge",
	    "Requests holding KV cache (prefill or decode)."),
	ROW(requests_paused, "cpd_requests_paused", "gauge",
	    "Requests held because their client's event ring is full."),
	ROW(requests_refused, "cpd_requests_refused_total", "counter",
	    "Requests answered with an error at once."),
	ROW(preemptions, "cpd_preemptions_total", "counter",
	    "Requests set back to free KV cache."),
	ROW(tokens_prompt, "cpd_prompt_tokens_total", "counter",
	    "Prompt positions computed."),
	ROW(tokens_prompt_cached, "cpd_prompt_tokens_cached_total", "counter",
	    "Prompt positions the prefix cache gave instead."),
	ROW(tokens_generated, "cpd_generated_tokens_total", "counter",
	    "Tokens generated."),
	ROW(steps, "cpd_steps_total", "counter", "Engine steps run."),
	ROW(cq_stalls, "cpd_cq_stalls_total", "counter",
	    "Requests cancelled because their client left its events unread."),
	ROW(kv_blocks_used, "cpd_kv_blocks_used", "gauge",
	    "KV cache blocks held by requests."),
	ROW(kv_blocks_free, "cpd_kv_blocks_free", "gauge",
	    "KV cache blocks free."),
	ROW(kv_blocks_total, "cpd_kv_blocks_capacity", "gauge",
	    "KV cache blocks in the pool."),
	ROW(kv_blocks_cached, "cpd_kv_blocks_cached", "gauge",
	    "Free KV cache blocks the prefix cache keeps."),
	ROW(prefix_evictions, "cpd_prefix_evictions_total", "counter",
	    "Cached blocks taken back for new KV."),
	ROWU(pace_target_us, "cpd_inter_token_target_seconds", "gauge",
	    "The latency target prompt work is paced to; 0 when none.", 1e-6),
	ROWU(pace_est_us, "cpd_step_estimated_seconds", "gauge",
	    "The step-time model's estimate of the last step with decoding "
	    "streams.", 1e-6),
	ROWU(pace_meas_us, "cpd_step_measured_seconds", "gauge",
	    "That step's measured time.", 1e-6),
	ROWU(pace_err_us, "cpd_step_estimate_error_seconds", "gauge",
	    "The step-time model's mean absolute error, recent steps.", 1e-6),
	ROW(pace_steps, "cpd_paced_steps_total", "counter",
	    "Steps with decoding streams, measured against the target."),
	ROW(pace_missed, "cpd_target_missed_steps_total", "counter",
	    "Of those, steps over the target."),
	ROWU(pace_missed_us, "cpd_target_missed_seconds_total", "counter",
	    "Time those steps took over the target, in all.", 1e-6),
};
#undef ROW
#undef ROWU

#define N_STAT_ROWS	(sizeof(stat_rows) / sizeof(stat_rows[0]))

/* disconnects[] by CP_DISC_*; a reason without a name here is "other". */
static const char *const disc_names[CP_DISC_REASONS] = {
	[CP_DISC_CLOSED] = "closed",
	[CP_DISC_EXITED] = "exited",
	[CP_DISC_PROTOCOL] = "protocol",
	[CP_DISC_TIMEOUT] = "timeout",
	[CP_DISC_OVERFLOW] = "overflow",
	[CP_DISC_ERROR] = "error",
	[CP_DISC_SHUTDOWN] = "shutdown",
};

struct hist_row {
	const char *name;	/* table and JSON name */
	const char *metric;	/* Prometheus name */
	const char *help;
	double scale;		/* Prometheus unit per daemon unit; 0: counts */
	size_t off;		/* a struct cp_histogram in struct cp_stats */
};

#define HROW(n, m, s, h) { #n, m, h, s, offsetof(struct cp_stats, n) }
static const struct hist_row hist_rows[] = {
	HROW(step_prefill, "cpd_step_prompt_tokens", 0,
	    "Prompt tokens per engine step."),
	HROW(step_decode, "cpd_step_decode_tokens", 0,
	    "Generated tokens per engine step."),
	HROW(step_seqs, "cpd_step_sequences", 0,
	    "Requests per engine step."),
	HROW(ttft_us, "cpd_time_to_first_token_seconds", 1e-6,
	    "Time from a request's arrival to its first token."),
	HROW(itl_us, "cpd_inter_token_latency_seconds", 1e-6,
	    "Time between two tokens of a request."),
};
#undef HROW

#define N_HIST_ROWS	(sizeof(hist_rows) / sizeof(hist_rows[0]))

static uint64_t
stat_value(const struct cp_stats *st, const struct stat_row *row)
{
	uint64_t v;

	memcpy(&v, (const char *)st + row->off, sizeof(v));
	return v;
}

static const struct cp_histogram *
hist_of(const struct cp_stats *st, const struct hist_row *row)
{
	return (const struct cp_histogram *)(const void *)
	    ((const char *)st + row->off);
}

static const char *
disc_name(unsigned i)
{
	return disc_names[i] != NULL ? disc_names[i] : "other";
}

/* Bound of the bucket where the q-quantile falls (q in (0, 1]), or NAN. */
static double
hist_quantile(const struct cp_histogram *h, double q)
{
	uint64_t seen = 0;
	unsigned i;

	if (h->count == 0)
		return NAN;
	for (i = 0; i < CP_HIST_BUCKETS; i++) {
		seen += h->n[i];
		if ((double)seen >= q * (double)h->count)
			return h->le[i] == UINT64_MAX ? (double)h->max :
			    (double)h->le[i];
	}
	return (double)h->max;
}

/* A Prometheus number: a bound or a sum in the metric's unit. */
static void
prom_value(FILE *f, uint64_t v, double scale)
{
	if (scale != 0)
		fprintf(f, "%.9g", (double)v * scale);
	else
		fprintf(f, "%llu", (unsigned long long)v);
}

static void
prom_hist(FILE *f, const struct hist_row *row, const struct cp_histogram *h)
{
	uint64_t cum = 0;
	unsigned i;

	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", row->metric, row->help,
	    row->metric);
	for (i = 0; i < CP_HIST_BUCKETS; i++) {
		cum += h->n[i];
		if (h->le[i] == UINT64_MAX)
			continue;	/* the +Inf bucket, below */
		fprintf(f, "%s_bucket{le=\"", row->metric);
		prom_value(f, h->le[i], row->scale);
		fprintf(f, "\"} %llu\n", (unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", row->metric,
	    (unsigned long long)h->count);
	fprintf(f, "%s_sum ", row->metric);
	prom_value(f, h->sum, row->scale);
	fprintf(f, "\n%s_count %llu\n", row->metric,
	    (unsigned long long)h->count);
}

void
statfmt_prometheus(FILE *f, const struct cp_stats *st)
{
	size_t i;

	for (i = 0; i < N_STAT_ROWS; i++) {
		const struct stat_row *row = &stat_rows[i];
		uint64_t v = stat_value(st, row);

		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", row->metric, row->help,
		    row->metric, row->type);
		if (row->off == offsetof(struct cp_stats, uptime_ms))
			fprintf(f, "%s %llu.%03llu\n", row->metric,
			    (unsigned long long)(v / 1000),
			    (unsigned long long)(v % 1000));
		else {
			fprintf(f, "%s ", row->metric);
			prom_value(f, v, row->scale);
			fputc('\n', f);
		}
	}
	fprintf(f, "# HELP cpd_draining Whether the daemon is stopping.\n"
	    "# TYPE cpd_draining gauge\ncpd_draining %d\n", st->draining != 0);
	fprintf(f, "# HELP cpd_disconnects_total Connections ended, by reason.\n"
	    "# TYPE cpd_disconnects_total counter\n");
	for (i = 0; i < CP_DISC_REASONS; i++)
		if (disc_names[i] != NULL || st->disconnects[i] != 0)
			fprintf(f, "cpd_disconnects_total{reason=\"%s\"} %llu\n",
			    disc_name((unsigned)i),
			    (unsigned long long)st->disconnects[i]);
	for (i = 0; i < N_HIST_ROWS; i++)
		prom_hist(f, &hist_rows[i], hist_of(st, &hist_rows[i]));
}

/* Of the prompt positions served, the share the prefix cache gave. */
static double
prefix_hit_ratio(const struct cp_stats *st)
{
	double all = (double)st->tokens_prompt +
	    (double)st->tokens_prompt_cached;

	return all > 0 ? (double)st->tokens_prompt_cached / all : 0;
}

void
statfmt_json(FILE *f, const struct cp_stats *st)
{
	size_t i;
	unsigned k;

	for (i = 0; i < N_STAT_ROWS; i++)
		fprintf(f, "%s\"%s\":%llu", i == 0 ? "{" : ",", stat_rows[i].name,
		    (unsigned long long)stat_value(st, &stat_rows[i]));
	fprintf(f, ",\"prefix_hit_ratio\":%.4f", prefix_hit_ratio(st));
	fprintf(f, ",\"draining\":%s,\"disconnects\":{",
	    st->draining ? "true" : "false");
	for (i = 0, k = 0; i < CP_DISC_REASONS; i++)
		if (disc_names[i] != NULL || st->disconnects[i] != 0)
			fprintf(f, "%s\"%s\":%llu", k++ ? "," : "",
			    disc_name((unsigned)i),
			    (unsigned long long)st->disconnects[i]);
	fputc('}', f);
	for (i = 0; i < N_HIST_ROWS; i++) {
		const struct cp_histogram *h = hist_of(st, &hist_rows[i]);

		fprintf(f, ",\"%s\":{\"count\":%llu,\"sum\":%llu,\"max\":%llu,"
		    "\"buckets\":[", hist_rows[i].name,
		    (unsigned long long)h->count, (unsigned long long)h->sum,
		    (unsigned long long)h->max);
		/* The last bound, UINT64_MAX, is null (no limit). */
		for (k = 0; k < CP_HIST_BUCKETS; k++) {
			fprintf(f, "%s{\"le\":", k ? "," : "");
			if (h->le[k] == UINT64_MAX)
				fputs("null", f);
			else
				fprintf(f, "%llu", (unsigned long long)h->le[k]);
			fprintf(f, ",\"n\":%llu}", (unsigned long long)h->n[k]);
		}
		fputs("]}", f);
	}
	fputs("}\n", f);
}

void
statfmt_table(FILE *f, const struct cp_stats *st)
{
	size_t i;

	for (i = 0; i < N_STAT_ROWS; i++)
		fprintf(f, "%-22s %llu\n", stat_rows[i].name,
		    (unsigned long long)stat_value(st, &stat_rows[i]));
	fprintf(f, "%-22s %.4f\n", "prefix_hit_ratio", prefix_hit_ratio(st));
	fprintf(f, "%-22s %s\n", "draining", st->draining ? "yes" : "no");
	for (i = 0; i < CP_DISC_REASONS; i++)
		if (disc_names[i] != NULL || st->disconnects[i] != 0)
			fprintf(f, "disconnects_%-10s %llu\n",
			    disc_name((unsigned)i),
			    (unsigned long long)st->disconnects[i]);
	/* Histograms: samples, mean, and the bucket bounds of p50/p90/p99. */
	for (i = 0; i < N_HIST_ROWS; i++) {
		const struct cp_histogram *h = hist_of(st, &hist_rows[i]);

		fprintf(f, "%-22s %llu", hist_rows[i].name,
		    (unsigned long long)h->count);
		if (h->count > 0)
			fprintf(f, " (mean %.1f, p50 <= %.0f, p90 <= %.0f, "
			    "p99 <= %.0f, max %llu)",
			    (double)h->sum / (double)h->count,
			    hist_quantile(h, 0.5), hist_quantile(h, 0.9),
			    hist_quantile(h, 0.99), (unsigned long long)h->max);
		fputc('\n', f);
	}
}
