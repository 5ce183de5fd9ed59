/*
 * cpbench.h - the benchmark tool's subcommands and shared helpers.
 */
#ifndef CP_CPBENCH_H
#define CP_CPBENCH_H

#include <stdint.h>

/* `cpbench engine ...`: prompt processing and generation throughput. */
int bench_engine(int argc, char **argv);

/* `cpbench kernels ...`: matrix-product kernels and read bandwidth. */
int bench_kernels(int argc, char **argv);

/* `cpbench serve ...`: clients streaming through the daemon (bench_serve.c). */
int bench_serve(int argc, char **argv);

/* `cpbench ipc ...`: ring round trip and token delivery (bench_ipc.c). */
int bench_ipc(int argc, char **argv);

/* Parses s as an integer in min..max into *out; 0, or -EINVAL (printed). */
int bench_int_arg(const char *cmd, const char *opt, const char *s, int min,
    int max, int *out);

/* Monotonic time in seconds. */
double bench_now(void);

/* Mean and sample standard deviation of x[0..n). */
void bench_stats(const double *x, int n, double *mean, double *sd);

#endif
