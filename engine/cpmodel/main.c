/*
 * main.c - cpmodel: the GGUF tool.  `cpmodel COMMAND ARGS...` runs one
 * subcommand (cpmodel.h) with the arguments after the program name, so
 * that the subcommand sees its own name as argv[0].
 */
#include "cpmodel.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*fn)(int, char **);
	void (*usage)(FILE *);
	const char *what;
} cmds[] = {
	{ "info", cmd_info, info_usage,
	    "FILE: metadata and tensors of a GGUF file" },
	{ "synth", cmd_synth, synth_usage,
	    "-o FILE ...: write a synthetic llama model" },
	{ "tokenize", cmd_tokenize, tokenize_usage,
	    "FILE TEXT: token ids of a text" },
	{ "generate", cmd_generate, gen_usage,
	    "FILE PROMPT [options]: generate text in-process" },
};

static void
usage(FILE *fp)
{
	size_t i;

	fputs("usage: cpmodel COMMAND [ARGS...]\n", fp);
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(fp, "  cpmodel %s %s\n", cmds[i].name, cmds[i].what);
	fputs("  cpmodel [COMMAND] --help | --version\n", fp);
}


/* Whether arg is one of the two spellings. */
static int
is(const char *arg, const char *s, const char *l)
{
	return strcmp(arg, s) == 0 || strcmp(arg, l) == 0;
}

int
main(int argc, char **argv)
{
	const char *sub = argc > 2 ? argv[2] : "";
	size_t i, n = sizeof(cmds) / sizeof(cmds[0]);

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	for (i = 0; i < n; i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			break;
	/* --help and --version: alone, or right after a command */
	if (is(argv[1], "-V", "--version") || (i < n && is(sub, "-V",
	    "--version"))) {
		printf("cpmodel %s\n", CP_VERSION);
		return 0;
	}
	if (i < n && is(sub, "-h", "--help")) {
		cmds[i].usage(stdout);
		return 0;
	}
	if (is(argv[1], "-h", "--help") || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (i < n)
		return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "cpmodel: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
