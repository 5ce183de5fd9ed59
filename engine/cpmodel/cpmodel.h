/*
 * cpmodel.h - the subcommands of cpmodel.  Each takes the argument vector
 * after the program name (argv[0] is the subcommand name), prints its
 * result to stdout and errors to stderr, and returns the process exit status.
 */
#ifndef CP_CPMODEL_H
#define CP_CPMODEL_H

#include <stddef.h>
#include <stdio.h>

/* cpmodel info FILE: a table of a GGUF file's metadata and tensors; 0 or 1. */
int cmd_info(int, char **);
/* info's model part: the family and each layer's choices, or why not. */
struct gguf_file;
void info_model(struct gguf_file *f);
/* cpmodel synth -o FILE ...: write a deterministic random llama GGUF; 0, 1 or 2 (usage). */
int cmd_synth(int, char **);
/* cpmodel tokenize MODEL TEXT: print the token ids and pieces; 0 or 1. */
int cmd_tokenize(int, char **);
/* cpmodel generate MODEL PROMPT [options]: generate in-process, no daemon; 0 or 1. */
int cmd_generate(int, char **);
/* Each subcommand's usage, to fp (stdout for `cpmodel COMMAND --help`). */
void info_usage(FILE *fp);
void synth_usage(FILE *fp);
void tokenize_usage(FILE *fp);
void gen_usage(FILE *fp);
/* Length of the valid UTF-8 sequence at p (n > 0 bytes left), or 0. */
size_t utf8_valid_len(const unsigned char *p, size_t n);

#endif
