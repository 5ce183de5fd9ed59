/*
 * cpbench.h - the benchmark tool's subcommands and shared helpers.
 */
#ifndef CP_CPBENCH_H
#define CP_CPBENCH_H

#include <stdint.h>

/* `cpbench engine ...`: prompt processing and generation throughput. */
int bench_engine(int argc, char **argv);

/* Monotonic time in seconds. */
double bench_now(void);

/* Mean and sample standard deviation of x[0..n). */
void bench_stats(const double *x, int n, double *mean, double *sd);

#endif
