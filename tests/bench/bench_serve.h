/*
 * bench_serve.h - client processes driving a running daemon, shared by
 * `cpbench serve` and `cpbench ipc`: fork, common start, per-token time
 * stamps back through pipes, and the statistics both report.
 */
#ifndef CP_BENCH_SERVE_H
#define CP_BENCH_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cp_model_info;

/* What each client process of bench_clients() runs. */
struct bench_load {
	const char *socket;	/* NULL: the library's default */
	int n_prompt;		/* prompt tokens of each request */
	int n_gen;		/* max_tokens of each request (greedy) */
	int reps;		/* requests per client, one after another */
	int long_prompt;	/* > 0: one more client, prompts this long */
	int long_every_ms;	/* ... at start + k * this, one at a time */
	int long_count;		/* at most this many of them; 0: no limit */
};

/* One request as its client saw it; times are bench_now() seconds. */
struct bench_req {
	int client;
	bool is_long;
	int n_tok;		/* TOKEN events carrying a token */
	int n_gen, finish, err;	/* from the DONE or ERROR event */
	double t_submit, t_done;
	double *tok;		/* (n_tok) arrival time of each TOKEN */
};

struct bench_run {
	double t0;		/* the common start */
	struct bench_req *req;	/* (n_req), owned */
	int n_req, cap_req;
};

/* A growable array of doubles; zero-initialise, bench_vec_free() after. */
struct bench_vec {
	double *x;
	size_t n, cap;
};

/*
 * Forks n streaming clients (plus the long-prompt one), starts them
 * together, and collects every request into *run (free with
 * bench_run_free()).  0, or a negative errno with a message printed.
 */
int bench_clients(const struct bench_load *l, int n, struct bench_run *run);
void bench_run_free(struct bench_run *run);

/* Connects once to read the served model's description; 0 or < 0 (printed). */
int bench_model_info(const char *socket, struct cp_model_info *mi);

/*
 * n ids: BOS (when bos >= 0), then ids in [0, n_vocab) that seed fixes,
 * never bos or eos.
 */
void bench_prompt(int32_t *ids, int n, int n_vocab, int bos, int eos,
    uint64_t seed);

/* Sorts x[0..n) and returns its nearest-rank p-th percentile; 0 when n is 0. */
double bench_pct(double *x, size_t n, double p);

/* Appends x: 0 or -ENOMEM. */
int bench_vec_add(struct bench_vec *v, double x);
void bench_vec_free(struct bench_vec *v);

#endif
