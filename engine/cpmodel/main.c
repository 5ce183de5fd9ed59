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
	const char *what;
} cmds[] = {
	{ "info", cmd_info, "FILE: metadata and tensors of a GGUF file" },
	{ "synth", cmd_synth, "-o FILE ...: write a synthetic llama model" },
	{ "tokenize", cmd_tokenize, "FILE TEXT: token ids of a text" },
	{ "generate", cmd_generate, "FILE PROMPT [options]: generate text "
	    "in-process" },
};

static void
usage(FILE *fp)
{
	size_t i;

	fputs("usage: cpmodel COMMAND [ARGS...]\n", fp);
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(fp, "  cpmodel %s %s\n", cmds[i].name, cmds[i].what);
}

int
main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("cpmodel %s\n", CP_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "cpmodel: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
