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

const char bench_engine_usage[] =
    "usage: cpbench engine -m FILE [-p N] [-n N] [-r N] [-t N] "
    "[-b BACKEND] [-o md|json]\n";
const char bench_mixed_usage[] =
    "usage: cpbench mixed -m FILE [-d N] [-D POS] [-c N] [-P POS] [-r N] "
    "[-t N] [-B BLOCK]\n"
    "           [-b BACKEND] [-o md|json]\n";
const char bench_split_usage[] =
    "usage: cpbench split -m FILE [-d N] [-D POS] [-P N] [-c N] "
    "[-b BACKEND] [-o md|json]\n";
const char bench_kernels_usage[] =
    "usage: cpbench kernels [-w TYPES] [-k K] [-n N] [-m ROWS] [-r REPS] "
    "[-t THREADS] [-f FILE]\n";
const char bench_bandwidth_usage[] =
    "usage: cpbench bandwidth (-m FILE | -b BYTES) [-r REPS] [-t THREADS]\n";
const char bench_serve_usage[] =
    "usage: cpbench serve [--socket S] [-c N] [--prompt-len P] "
    "[--gen-len G] [-r R]\n"
    "           [--long-prompt L --long-every MS [--long-count M] "
    "[--baseline]] [-o md|json]\n";
const char bench_ipc_usage[] =
    "usage: cpbench ipc [--socket S] [-c N,...] [-r R] [-g G] [-n N] "
    "[-o md|json]\n";
const char bench_prefix_usage[] =
    "usage: cpbench prefix [--socket S] [-c N] [--system-len L] "
    "[--question-len Q]\n"
    "           [--turns T] [--turn-len U] [--gen-len G] [-o md|json]\n";
const char bench_grammar_usage[] =
    "usage: cpbench grammar -m FILE (-g GBNF | -s SCHEMA | -j) -i IDS "
    "[-r N]\n";

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *usage;
} cmds[] = {
	{ "engine", bench_engine, bench_engine_usage },
	{ "mixed", bench_mixed, bench_mixed_usage },
	{ "split", bench_split, bench_split_usage },
	{ "kernels", bench_kernels, bench_kernels_usage },
	{ "bandwidth", bench_bandwidth, bench_bandwidth_usage },
	{ "serve", bench_serve, bench_serve_usage },
	{ "ipc", bench_ipc, bench_ipc_usage },
	{ "prefix", bench_prefix, bench_prefix_usage },
	{ "grammar", bench_grammar, bench_grammar_usage },
};

/* Every subcommand's usage, "usage: " only on the first. */
static void
usage(FILE *f)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "%s%s", i > 0 ? "       " : "",
		    cmds[i].usage + (i > 0 ? strlen("usage: ") : 0));
	fputs("       cpbench [COMMAND] --help | --version\n", f);
}

int
main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "", *next = "";
	size_t k;

	if (argc > 2)
		next = argv[2];
	for (k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++)
		if (strcmp(cmd, cmds[k].name) == 0)
			break;
	if (k == sizeof(cmds) / sizeof(cmds[0])) {
		/* no command: only --help and --version */
		next = cmd;
	}
	if (strcmp(next, "--version") == 0 || strcmp(next, "-V") == 0) {
		printf("cpbench %s\n", CP_VERSION);
		return 0;
	}
	if (strcmp(next, "--help") == 0 || strcmp(next, "-h") == 0) {
		if (k < sizeof(cmds) / sizeof(cmds[0]))
			fputs(cmds[k].usage, stdout);
		else
			usage(stdout);
		return 0;
	}
	if (k < sizeof(cmds) / sizeof(cmds[0]))
		return cmds[k].fn(argc - 1, argv + 1);
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
