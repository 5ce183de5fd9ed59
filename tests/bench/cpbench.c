/*
 * cpbench.c - benchmarks for cpd: `cpbench engine` (prompt processing and
 * generation throughput of the engine alone, in the spirit of llama-bench).
 */
#include "cpbench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/clock.h"

double
bench_now(void)
{
	return clock_ms_f() * 1e-3;
}

void
bench_stats(const double *x, int n, double *mean, double *sd)
{
	double s = 0, ss = 0;

	for (int i = 0; i < n; i++)
		s += x[i];
	*mean = n > 0 ? s / n : 0;
	for (int i = 0; i < n; i++)
		ss += (x[i] - *mean) * (x[i] - *mean);
	*sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

static void
usage(FILE *f)
{
	fputs("usage: cpbench engine -m FILE [-p N] [-n N] [-r N] [-t N] "
	    "[-b BACKEND] [-o md|json]\n"
	    "       cpbench mixed -m FILE [-d N] [-D POS] [-c N] [-P POS] "
	    "[-r N] [-t N] [-B BLOCK]\n"
	    "       cpbench split -m FILE [-d N] [-D POS] [-P N] [-c N]\n"
	    "       cpbench kernels [-w TYPES] [-k K] [-n N] [-m ROWS] "
	    "[-r REPS] [-t THREADS] [-f FILE]\n"
	    "       cpbench serve [--socket S] [-c N] [--prompt-len P] "
	    "[--gen-len G] [-r R]\n"
	    "           [--long-prompt L --long-every MS [--long-count M]] "
	    "[-o md|json]\n"
	    "       cpbench ipc [--socket S] [-c N,...] [-r R] [-g G] [-n N] "
	    "[-o md|json]\n"
	    "       cpbench prefix [--socket S] [-c N] [--system-len L] "
	    "[--question-len Q]\n"
	    "           [--turns T] [--turn-len U] [--gen-len G] "
	    "[-o md|json]\n"
	    "       cpbench grammar -m FILE (-g GBNF | -s SCHEMA | -j) "
	    "-i IDS [-r N]\n"
	    "       cpbench --help | --version\n", f);
}

int
main(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--version") == 0 ||
	    strcmp(argv[1], "-V") == 0)) {
		printf("cpbench %s\n", CP_VERSION);
		return 0;
	}
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "engine") == 0)
		return bench_engine(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "mixed") == 0)
		return bench_mixed(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "split") == 0)
		return bench_split(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "kernels") == 0)
		return bench_kernels(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "serve") == 0)
		return bench_serve(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "ipc") == 0)
		return bench_ipc(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "prefix") == 0)
		return bench_prefix(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "grammar") == 0)
		return bench_grammar(argc - 1, argv + 1);
	usage(stderr);
	return 2;
}

int
bench_format_arg(const char *cmd, const char *s, bool *json)
{
	if (strcmp(s, "json") == 0 || strcmp(s, "md") == 0) {
		*json = s[0] == 'j';
		return 0;
	}
	fprintf(stderr, "cpbench %s: -o '%s': expected md or json\n", cmd, s);
	return -EINVAL;
}

int
bench_int_arg(const char *cmd, const char *opt, const char *s, int min,
    int max, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0 || v < min || v > max) {
		fprintf(stderr, "cpbench %s: %s '%s': expected an integer in "
		    "%d..%d\n", cmd, opt, s, min, max);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}
