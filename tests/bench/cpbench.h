/*
 * cpbench.h - the benchmark tool's subcommands and shared helpers.
 */
#ifndef CP_CPBENCH_H
#define CP_CPBENCH_H

#include <stdbool.h>
#include <stdint.h>

/* `cpbench engine ...`: prompt processing and generation throughput. */
int bench_engine(int argc, char **argv);

/* `cpbench mixed ...`: a prompt chunk's cost to the decode rows beside it. */
int bench_mixed(int argc, char **argv);

/* `cpbench split ...`: decoding streams and a prefill on a core each. */
int bench_split(int argc, char **argv);

/* `cpbench kernels ...`: matrix-product kernels and read bandwidth. */
int bench_kernels(int argc, char **argv);

/* `cpbench serve ...`: clients streaming through the daemon (bench_serve.c). */
int bench_serve(int argc, char **argv);

/* `cpbench ipc ...`: ring round trip and token delivery (bench_ipc.c). */
int bench_ipc(int argc, char **argv);

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
