/*
 * bench_ipc.c - `cpbench ipc`: what the daemon costs between a client and
 * the engine, measured against a daemon that runs no model
 * (cpd --backend null), so that every microsecond is rings, wake-ups,
 * scheduling, sampling and detokenizing.
 *
 *	cpbench ipc [--socket S] [-c 1,64] [-r R] [-g G] [-n N] [-o md|json]
 *
 * For each client count C in the list, C client processes (bench_clients())
 * run two tests, one after the other:
 *
 *	round trip	R requests per client, one at a time: a 1-token
 *			prompt, max_tokens 1; time from before cp_submit to
 *			the DONE event (and to the TOKEN before it).
 *	delivery	N requests per client: a 1-token prompt and G tokens;
 *			the gap between consecutive TOKEN events, tokens per
 *			second of one stream, and of all C together.
 *
 * The daemon must admit C connections from one user (per_uid_max_clients)
 * and C requests (per_uid_max_requests, max_seqs).  Against a real backend
 * the same numbers include the model's compute.
 */
#include "bench_serve.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpbench.h"
#include "cpclient.h"

#define BI_MAX_COUNTS 16

struct bi_opts {
	const char *socket;
	int counts[BI_MAX_COUNTS];
	int n_counts;
	int reps;		/* round trips per client */
	int gen;		/* tokens of a delivery request; 0: n_ctx - 1 */
	int n_deliv;		/* delivery requests per client */
	bool json;
};

struct bi_result {
	int clients;
	/* round trip, microseconds */
	int rt_n, rt_err;
	double rt_p50, rt_p99, rt_mean, rt_tok_p50, rt_per_s;
	/* delivery */
	int dl_req, dl_err;
	long dl_tokens;
	double dl_tps, dl_stream_tps, itl_p50, itl_p99, itl_max;
};

/* "1,64" into o->counts. */
static int
bi_counts(const char *s, struct bi_opts *o)
{
	char buf[128], *tok, *save = NULL;

	if (strlen(s) >= sizeof(buf)) {
		fprintf(stderr, "cpbench ipc: -c '%s' is too long\n", s);
		return -EINVAL;
	}
	strcpy(buf, s);
	o->n_counts = 0;
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		if (o->n_counts == BI_MAX_COUNTS) {
			fprintf(stderr, "cpbench ipc: -c: at most %d counts\n",
			    BI_MAX_COUNTS);
			return -EINVAL;
		}
		if (bench_int_arg("ipc", "-c", tok, 1, 1024,
		    &o->counts[o->n_counts++]) < 0)
			return -EINVAL;
	}
	if (o->n_counts == 0) {
		fprintf(stderr, "cpbench ipc: -c: no client count\n");
		return -EINVAL;
	}
	return 0;
}

static int
bi_parse(int argc, char **argv, struct bi_opts *o)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 }
	};
	int c, rc = 0;

	memset(o, 0, sizeof(*o));
	o->counts[0] = 1;
	o->counts[1] = 64;
	o->n_counts = 2;
	o->reps = 200;
	o->n_deliv = 2;
	optind = 1;
	while (rc == 0 && (c = getopt_long(argc, argv, "s:c:r:g:n:o:", lo,
	    NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'c': rc = bi_counts(optarg, o); break;
		case 'r':
			rc = bench_int_arg("ipc", "-r", optarg, 1, 1000000,
			    &o->reps);
			break;
		case 'g':
			rc = bench_int_arg("ipc", "-g", optarg, 1, 1 << 20,
			    &o->gen);
			break;
		case 'n':
			rc = bench_int_arg("ipc", "-n", optarg, 1, 100000,
			    &o->n_deliv);
			break;
		case 'o':
			if (bench_format_arg("ipc", optarg, &o->json) < 0)
				rc = -EINVAL;
			break;
		default:
			rc = -EINVAL;
		}
	}
	if (rc == 0 && optind != argc)
		rc = -EINVAL;
	if (rc < 0)
		fputs(bench_ipc_usage, stderr);
	return rc;
}

/* Last DONE of the run, seconds after its start. */
static double
bi_wall(const struct bench_run *run)
{
	double t = run->t0;

	for (int i = 0; i < run->n_req; i++)
		t = fmax(t, run->req[i].t_done);
	return t - run->t0;
}

static int
bi_round_trip(const struct bi_opts *o, int n, struct bi_result *r)
{
	struct bench_load l = { o->socket, 1, 1, o->reps, 0, 0, 0 };
	struct bench_vec rt = { 0 }, tk = { 0 };
	struct bench_run run;
	double sum = 0, wall;
	int rc;

	if ((rc = bench_clients(&l, n, &run)) < 0)
		return rc;
	for (int i = 0; i < run.n_req && rc == 0; i++) {
		const struct bench_req *q = &run.req[i];

		if (q->err != 0) {
			r->rt_err++;
			continue;
		}
		sum += q->t_done - q->t_submit;
		rc = bench_vec_add(&rt, q->t_done - q->t_submit);
		if (rc == 0 && q->n_tok > 0)
			rc = bench_vec_add(&tk, q->tok[0] - q->t_submit);
	}
	wall = bi_wall(&run);
	r->rt_n = (int)rt.n;
	r->rt_mean = rt.n > 0 ? sum / (double)rt.n * 1e6 : 0;
	r->rt_p50 = bench_pct(rt.x, rt.n, 50) * 1e6;
	r->rt_p99 = bench_pct(rt.x, rt.n, 99) * 1e6;
	r->rt_tok_p50 = bench_pct(tk.x, tk.n, 50) * 1e6;
	r->rt_per_s = wall > 0 ? (double)rt.n / wall : 0;
	bench_vec_free(&rt);
	bench_vec_free(&tk);
	bench_run_free(&run);
	return rc;
}

static int
bi_delivery(const struct bi_opts *o, int n, int gen, struct bi_result *r)
{
	struct bench_load l = { o->socket, 1, gen, o->n_deliv, 0, 0, 0 };
	struct bench_vec itl = { 0 }, stream = { 0 };
	struct bench_run run;
	double wall, sum = 0;
	int rc;

	if ((rc = bench_clients(&l, n, &run)) < 0)
		return rc;
	for (int i = 0; i < run.n_req && rc == 0; i++) {
		const struct bench_req *q = &run.req[i];

		r->dl_req++;
		r->dl_err += q->err != 0;
		r->dl_tokens += q->n_tok;
		for (int k = 1; k < q->n_tok && rc == 0; k++)
			rc = bench_vec_add(&itl, q->tok[k] - q->tok[k - 1]);
		if (rc == 0 && q->n_tok > 1 && q->tok[q->n_tok - 1] > q->tok[0])
			rc = bench_vec_add(&stream, (q->n_tok - 1) /
			    (q->tok[q->n_tok - 1] - q->tok[0]));
	}
	wall = bi_wall(&run);
	r->dl_tps = wall > 0 ? (double)r->dl_tokens / wall : 0;
	for (size_t i = 0; i < stream.n; i++)
		sum += stream.x[i];
	r->dl_stream_tps = stream.n > 0 ? sum / (double)stream.n : 0;
	for (size_t i = 0; i < itl.n; i++)
		r->itl_max = fmax(r->itl_max, itl.x[i] * 1e6);
	r->itl_p50 = bench_pct(itl.x, itl.n, 50) * 1e6;
	r->itl_p99 = bench_pct(itl.x, itl.n, 99) * 1e6;
	bench_vec_free(&itl);
	bench_vec_free(&stream);
	bench_run_free(&run);
	return rc;
}

static void
bi_print(const struct bi_opts *o, const struct cp_model_info *mi, int gen,
    const struct bi_result *r, int n)
{
	if (o->json) {
		printf("{\"model\": \"%s\", \"backend\": \"%s\", "
		    "\"round_trips_per_client\": %d, \"gen\": %d, "
		    "\"delivery_requests_per_client\": %d, \"results\": [\n",
		    mi->name, mi->backend, o->reps, gen, o->n_deliv);
		for (int i = 0; i < n; i++)
			printf("  {\"clients\": %d, \"rt_n\": %d, "
			    "\"rt_errors\": %d, \"rt_p50_us\": %.2f, "
			    "\"rt_p99_us\": %.2f, \"rt_mean_us\": %.2f, "
			    "\"rt_token_p50_us\": %.2f, \"rt_per_s\": %.1f, "
			    "\"dl_requests\": %d, \"dl_errors\": %d, "
			    "\"dl_tokens\": %ld, \"dl_tok_s\": %.1f, "
			    "\"dl_stream_tok_s\": %.1f, \"itl_p50_us\": %.2f, "
			    "\"itl_p99_us\": %.2f, \"itl_max_us\": %.2f}%s\n",
			    r[i].clients, r[i].rt_n, r[i].rt_err, r[i].rt_p50,
			    r[i].rt_p99, r[i].rt_mean, r[i].rt_tok_p50,
			    r[i].rt_per_s, r[i].dl_req, r[i].dl_err,
			    r[i].dl_tokens, r[i].dl_tps, r[i].dl_stream_tps,
			    r[i].itl_p50, r[i].itl_p99, r[i].itl_max,
			    i + 1 < n ? "," : "");
		printf("]}\n");
		return;
	}
	printf("model %s, backend %s; round trip: 1-token prompt, max_tokens "
	    "1, %d per client; delivery: %d tokens, %d requests per client\n\n",
	    mi->name, mi->backend, o->reps, gen, o->n_deliv);
	printf("| clients | round trips | RT p50 us | RT p99 us | RT mean us "
	    "| to TOKEN p50 us | round trips/s | tokens | tok/s all | "
	    "tok/s per stream | ITL p50 us | ITL p99 us | ITL max us |\n");
	printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
	    "| ---: | ---: | ---: | ---: |\n");
	for (int i = 0; i < n; i++)
		printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.0f | %ld | "
		    "%.0f | %.0f | %.1f | %.1f | %.1f |\n", r[i].clients,
		    r[i].rt_n, r[i].rt_p50, r[i].rt_p99, r[i].rt_mean,
		    r[i].rt_tok_p50, r[i].rt_per_s, r[i].dl_tokens, r[i].dl_tps,
		    r[i].dl_stream_tps, r[i].itl_p50, r[i].itl_p99,
		    r[i].itl_max);
	for (int i = 0; i < n; i++)
		if (r[i].rt_err + r[i].dl_err > 0)
			printf("\n%d clients: %d requests ended with an "
			    "error\n", r[i].clients, r[i].rt_err + r[i].dl_err);
}

int
bench_ipc(int argc, char **argv)
{
	struct bi_opts o;
	struct cp_model_info mi;
	struct bi_result res[BI_MAX_COUNTS];
	int i, gen, rc = 0, errors = 0;

	if (bi_parse(argc, argv, &o) < 0)
		return 2;
	if (bench_model_info(o.socket, &mi) < 0)
		return 1;
	if (mi.n_ctx < 2) {
		fprintf(stderr, "cpbench ipc: a context of %u leaves no room "
		    "to generate\n", mi.n_ctx);
		return 1;
	}
	gen = o.gen > 0 ? o.gen : (int)mi.n_ctx - 1;
	if ((uint64_t)gen + 1 > mi.n_ctx) {
		fprintf(stderr, "cpbench ipc: -g %d: 1 + %d tokens exceed the "
		    "served context of %u\n", gen, gen, mi.n_ctx);
		return 2;
	}
	if (strcmp(mi.backend, "null") != 0)
		fprintf(stderr, "cpbench ipc: the daemon runs the %s backend, "
		    "not null: times include the model\n", mi.backend);
	memset(res, 0, sizeof(res));
	for (i = 0; i < o.n_counts && rc == 0; i++) {
		res[i].clients = o.counts[i];
		if ((rc = bi_round_trip(&o, o.counts[i], &res[i])) == 0)
			rc = bi_delivery(&o, o.counts[i], gen, &res[i]);
		errors += res[i].rt_err + res[i].dl_err;
	}
	if (rc < 0) {
		fprintf(stderr, "cpbench ipc: %d clients: %s\n",
		    o.counts[i - 1], cp_strerror(rc));
		return 1;
	}
	bi_print(&o, &mi, gen, res, o.n_counts);
	return errors > 0 ? 1 : 0;
}
