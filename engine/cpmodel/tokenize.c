/*
 * tokenize.c - `cpmodel tokenize FILE TEXT [--pieces] [--no-bos]
 * [--no-parse-special]`: the token ids of TEXT (- reads standard input)
 * under FILE's tokenizer, space-separated on one line; with --pieces, one
 * line per token: the id, a tab, and what the token renders to (control
 * tokens by their text; bytes that are not printable or not valid UTF-8
 * written as \xNN, and \n, \t, \\ escaped).  BOS/EOS are added as the
 * metadata says unless --no-bos; special-token text is matched unless
 * --no-parse-special (as llama-tokenize does).
 */
#include "cpmodel.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#define TOKENIZE_MAX_STDIN (64u << 20)

void
tokenize_usage(FILE *fp)
{
	fputs("usage: cpmodel tokenize FILE TEXT|- [--pieces] [--no-bos] "
	    "[--no-parse-special]\n", fp);
}

size_t
utf8_valid_len(const unsigned char *p, size_t n)
{
	size_t len, i;

	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
		return 0;
	return len;
}

static void
tokenize_print_piece(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, len;

	while (i < n) {
		if (p[i] == '\n') {
			fputs("\\n", stdout);
			i++;
		} else if (p[i] == '\t') {
			fputs("\\t", stdout);
			i++;
		} else if (p[i] == '\\') {
			fputs("\\\\", stdout);
			i++;
		} else if (p[i] >= 0x20 && p[i] < 0x7f) {
			putchar(p[i++]);
		} else if (p[i] >= 0x80 &&
		    (len = utf8_valid_len(p + i, n - i)) > 0) {
			fwrite(p + i, 1, len, stdout);
			i += len;
		} else {
			printf("\\x%02x", p[i++]);
		}
	}
}

/* Read all of standard input into a malloc'd buffer; NULL on error. */
static char *
tokenize_read_stdin(size_t *len)
{
	size_t cap = 4096, n = 0, got;
	char *buf = malloc(cap), *nb;

	while (buf != NULL) {
		if (n == cap) {
			if (cap >= TOKENIZE_MAX_STDIN) {
				fprintf(stderr, "cpmodel tokenize: standard "
				    "input is over %u bytes\n",
				    TOKENIZE_MAX_STDIN);
				free(buf);
				return NULL;
			}
			cap *= 2;
			if ((nb = realloc(buf, cap)) == NULL)
				break;
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n, stdin);
		n += got;
		if (got == 0) {
			if (ferror(stdin)) {
				fprintf(stderr, "cpmodel tokenize: cannot read "
				    "standard input\n");
				free(buf);
				return NULL;
			}
			*len = n;
			return buf;
		}
	}
	free(buf);
	fprintf(stderr, "cpmodel tokenize: out of memory\n");
	return NULL;
}

int
cmd_tokenize(int argc, char **argv)
{
	const char *file = NULL, *text_arg = NULL;
	bool pieces = false, add_special = true, parse_special = true;
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	struct cp_err e = { 0 };
	char *text = NULL;
	size_t len;
	int32_t *ids = NULL;
	int i, n, rc = 1;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pieces") == 0)
			pieces = true;
		else if (strcmp(argv[i], "--no-bos") == 0)
			add_special = false;
		else if (strcmp(argv[i], "--no-parse-special") == 0)
			parse_special = false;
		else if (argv[i][0] == '-' && argv[i][1] == '-') {
			fprintf(stderr, "cpmodel tokenize: unknown option %s\n",
			    argv[i]);
			tokenize_usage(stderr);
			return 1;
		} else if (file == NULL)
			file = argv[i];
		else if (text_arg == NULL)
			text_arg = argv[i];
		else {
			tokenize_usage(stderr);
			return 1;
		}
	}
	if (file == NULL || text_arg == NULL) {
		tokenize_usage(stderr);
		return 1;
	}
	if (strcmp(text_arg, "-") == 0) {
		if ((text = tokenize_read_stdin(&len)) == NULL)
			return 1;
	} else {
		len = strlen(text_arg);
	}
	if (gguf_open(file, &f, &e) != 0 || tok_load(f, &t, &e) != 0) {
		fprintf(stderr, "cpmodel tokenize: %s\n", e.msg);
		goto out;
	}
	n = tok_encode(t, text ? text : text_arg, len, add_special,
	    parse_special, NULL, 0);
	if (n >= 0 && (ids = malloc(((size_t)n + 1) * sizeof(*ids))) == NULL)
		n = -ENOMEM;
	if (n >= 0)
		n = tok_encode(t, text ? text : text_arg, len, add_special,
		    parse_special, ids, n);
	if (n < 0) {
		fprintf(stderr, "cpmodel tokenize: %s\n", strerror(-n));
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (pieces) {
			size_t plen;
			const char *p = tok_piece(t, ids[i], true, &plen);

			printf("%d\t", ids[i]);
			tokenize_print_piece(p, plen);
			putchar('\n');
		} else {
			printf(i ? " %d" : "%d", ids[i]);
		}
	}
	if (!pieces)
		putchar('\n');
	if (fflush(stdout) != 0) {
		fprintf(stderr, "cpmodel tokenize: cannot write output\n");
		goto out;
	}
	rc = 0;
out:
	free(ids);
	free(text);
	tok_free(t);
	gguf_close(f);
	return rc;
}
