/*
 * cpbench.h - the benchmark tool's subcommands and shared helpers.
 */
#ifndef CP_CPBENCH_H
#define CP_CPBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* `cpbench engine ...`: prompt processing and generation throughput. */
int bench_engine(int argc, char **argv);

/* `cpbench mixed ...`: a prompt chunk's cost to the decode rows beside it. */
int bench_mixed(int argc, char **argv);

struct backend;
struct batch_seq;
struct cp_err;

/* n token ids in [0, n_vocab) from a fixed seed, the same every run. */
void bench_tokens(int32_t *t, int n, int n_vocab);

/*
 * Prefills sequence seq of be with toks[0..len) in steps of chunk rows
 * (logits for the last); 0 or -errno with e.
 */
int bench_fill(struct backend *be, int seq, const int32_t *toks, int len,
    int chunk, struct cp_err *e);

/*
 * One step of be over entries bs[0..n) (rows tokens in all; each entry at
 * its sequence's length), then each sequence truncated back, so that the
 * next step sees the same positions; *secs gets the step's time.  0 or
 * -errno with e.
 */
int bench_step_back(struct backend *be, const int32_t *toks,
    struct batch_seq *bs, int n, int rows, double *secs, struct cp_err *e);

/* `cpbench split ...`: decoding streams and a prefill on a core each. */
int bench_split(int argc, char **argv);

/* `cpbench kernels ...`: matrix-product kernels and read bandwidth. */
int bench_kernels(int argc, char **argv);

/* `cpbench bandwidth ...`: a plain streaming read's bandwidth. */
int bench_bandwidth(int argc, char **argv);

struct threadpool;

/*
 * Reads bytes at buf reps + 1 times, summing them as floats on tp (one
 * part per thread, four monotonic streams a part); secs[0..reps) gets the
 * times of the last reps, sorted.  Returns the bytes each read covered
 * (bytes rounded down to whole parts).
 */
size_t bench_read(struct threadpool *tp, const void *buf, size_t bytes,
    int reps, double *secs);

/* `cpbench serve ...`: clients streaming through the daemon (bench_serve.c). */
int bench_serve(int argc, char **argv);

/* `cpbench prefix ...`: a shared prompt prefix through the daemon. */
int bench_prefix(int argc, char **argv);

/* `cpbench ipc ...`: ring round trip and token delivery (bench_ipc.c). */
int bench_ipc(int argc, char **argv);

/*
 * Each subcommand's usage lines (cpbench.c), for its errors and for
 * `cpbench COMMAND --help`.
 */
extern const char bench_engine_usage[], bench_mixed_usage[],
    bench_split_usage[], bench_kernels_usage[], bench_bandwidth_usage[], bench_serve_usage[],
    bench_ipc_usage[], bench_prefix_usage[], bench_grammar_usage[];

/* cpbench grammar: a grammar's mask and accept cost per token. */
int bench_grammar(int argc, char **argv);

/* Parses s as an integer in min..max into *out; 0, or -EINVAL (printed). */
int bench_int_arg(const char *cmd, const char *opt, const char *s, int min,
    int max, int *out);

/* Parses -o's md or json into *json; 0, or -EINVAL (printed). */
int bench_format_arg(const char *cmd, const char *s, bool *json);

/* Monotonic time in seconds. */
double bench_now(void);

/* Mean and sample standard deviation of x[0..n). */
void bench_stats(const double *x, int n, double *mean, double *sd);

#endif
