/*
 * check_manhelp.c - each program's --help and its manual page name the
 * same options.  The options of the help text are the "--long" and "-x"
 * words of `PROG --help` and of `PROG COMMAND --help` for each command
 * (which must exit 0); the manual's are the arguments of its mdoc .Fl
 * macros (".Fl -json" is --json, ".Fl kt" is -k and -t, ".Fl -ids | -json"
 * both).  Every option in one must be in the other.  cpd's flags also
 * include one per key of cpd.yaml(5) (cpd(8) describes them together as
 * "--key value"): its help must list every key, and the rest of its
 * options must be cpd(8)'s.
 */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/prog.h"
#include "lib/suite.h"

/* tests.mk's: the tree's man/ (relative: run from the tree). */
#ifndef CP_SRC_MAN
#define CP_SRC_MAN "man"
#endif

#define OPT_MAX 256
#define OPT_LEN 48
#define TEXT_MAX (128 * 1024)

struct optset {
	char name[OPT_MAX][OPT_LEN];
	int n;
};

static const struct tool {
	const char *prog, *man;
	const char *cmds[10];	/* commands with their own --help */
} tools[] = {
	{ "cpd", "cpd.8", { NULL } },
	{ "cpq", "cpq.1", { NULL } },
	{ "cpmodel", "cpmodel.1", { "info", "synth", "tokenize", "generate",
	    NULL } },
	{ "cpbench", "cpbench.1", { "engine", "mixed", "split", "kernels",
	    "bandwidth", "serve", "ipc", "prefix", NULL } },
};

static int
has(const struct optset *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->name[i], name) == 0)
			return 1;
	return 0;
}

/* Adds dashes followed by name[0..len) to s, once. */
static void
add(struct optset *s, const char *dashes, const char *name, size_t len)
{
	char opt[OPT_LEN];

	ck_assert_uint_lt(strlen(dashes) + len, sizeof(opt));
	snprintf(opt, sizeof(opt), "%s%.*s", dashes, (int)len, name);
	if (has(s, opt))
		return;
	ck_assert_int_lt(s->n, OPT_MAX);
	memcpy(s->name[s->n++], opt, sizeof(opt));
}

/* A byte that continues a word: "-" in "top-k" or "Ctrl-C" is no flag. */
static int
wordch(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-';
}

/*
 * The options a help text names: "--" and lowercase letters, digits and
 * dashes, or "-" and one letter, each neither preceded nor followed by a
 * word character.
 */
static void
help_opts(const char *t, struct optset *s)
{
	for (size_t i = 0; t[i] != '\0'; i++) {
		size_t n = 0;

		if (t[i] != '-' || (i > 0 && wordch(t[i - 1])))
			continue;
		if (t[i + 1] == '-') {
			while (islower((unsigned char)t[i + 2 + n]) ||
			    isdigit((unsigned char)t[i + 2 + n]) ||
			    (n > 0 && t[i + 2 + n] == '-'))
				n++;
			if (n > 0 && !wordch(t[i + 2 + n]))
				add(s, "--", t + i + 2, n);
		} else if (isalpha((unsigned char)t[i + 1]) &&
		    !wordch(t[i + 2])) {
			add(s, "-", t + i + 1, 1);
		}
		i += n;
	}
}

/* An mdoc macro name among a line's words: "Ar", "Op", "Ns"... */
static int
is_macro(const char *w)
{
	size_t n = strlen(w);

	return (n == 2 || n == 3) && isupper((unsigned char)w[0]) &&
	    islower((unsigned char)w[1]) &&
	    (n == 2 || islower((unsigned char)w[2]));
}

/* The options of a manual's .Fl macros, and its ".It Ic key" keys. */
static void
man_opts(const char *file, struct optset *s, struct optset *keys)
{
	char path[600], line[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", CP_SRC_MAN, file);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: cannot open", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		int in_fl = 0, first = 1;
		char *w, *save;

		if (line[0] != '.')
			continue;
		for (w = strtok_r(line + 1, " \t\n", &save); w != NULL;
		    w = strtok_r(NULL, " \t\n", &save), first = 0) {
			size_t n = strlen(w);

			if (strcmp(w, "Fl") == 0) {
				in_fl = 1;
				continue;
			}
			if (is_macro(w)) {
				in_fl = 0;
				if (keys != NULL && first && strcmp(w, "It") ==
				    0 && strncmp(save, "Ic ", 3) == 0) {
					n = strcspn(save + 3, " \t\n");
					add(keys, "--", save + 3, n);
				}
				continue;
			}
			while (n > 0 && strchr(",;:.()", w[n - 1]) != NULL)
				n--;
			if (!in_fl || n == 0 || strcmp(w, "|") == 0 ||
			    (n == 1 && w[0] == '-'))
				continue;
			if (w[0] == '-')
				add(s, "--", w + 1, n - 1);
			else
				for (size_t k = 0; k < n; k++)
					add(s, "-", w + k, 1);
		}
	}
	fclose(f);
}

/* cpd.yaml(5)'s keys as cpd's flags: "--max_batch_tokens" -> dashes. */
static void
keys_as_flags(struct optset *keys)
{
	for (int i = 0; i < keys->n; i++)
		for (char *p = keys->name[i]; *p != '\0'; p++)
			if (*p == '_')
				*p = '-';
}

/* `prog [cmd] --help` exits 0; its options go into s. */
static void
help_of(const char *bin, const char *cmd, struct optset *s)
{
	static char out[TEXT_MAX];
	const char *argv[] = { bin, cmd != NULL ? cmd : "--help",
	    cmd != NULL ? "--help" : NULL, NULL };

	ck_assert_msg(prog_capture(argv, out, sizeof(out)) == 0,
	    "%s %s --help: not status 0", bin, cmd != NULL ? cmd : "");
	ck_assert_msg(strstr(out, "usage: ") != NULL, "%s %s --help: %s",
	    bin, cmd != NULL ? cmd : "", out);
	help_opts(out, s);
}

/* The options of a not in b (except those of skip), space-separated. */
static const char *
missing(const struct optset *a, const struct optset *b,
    const struct optset *skip, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; i < a->n; i++)
		if (!has(b, a->name[i]) && (skip == NULL ||
		    !has(skip, a->name[i])) && n + OPT_LEN + 1 < size)
			n += (size_t)snprintf(buf + n, size - n, " %s",
			    a->name[i]);
	return buf;
}

/* Tool _i's help texts and its manual name the same options. */
START_TEST(test_help_matches_man)
{
	const struct tool *t = &tools[_i];
	static struct optset help, man, keys;
	char bin[512], buf[OPT_MAX * OPT_LEN];

	memset(&help, 0, sizeof(help));
	memset(&man, 0, sizeof(man));
	memset(&keys, 0, sizeof(keys));
	ck_assert_int_eq(prog_find(bin, sizeof(bin), t->prog, NULL), 0);
	help_of(bin, NULL, &help);
	for (int k = 0; t->cmds[k] != NULL; k++)
		help_of(bin, t->cmds[k], &help);
	man_opts(t->man, &man, NULL);
	ck_assert_int_gt(help.n, 1);
	ck_assert_int_gt(man.n, 1);
	if (strcmp(t->prog, "cpd") == 0) {
		man_opts("cpd.yaml.5", &(struct optset){ 0 }, &keys);
		keys_as_flags(&keys);
		ck_assert_int_gt(keys.n, 20);
		ck_assert_msg(missing(&keys, &help, NULL, buf,
		    sizeof(buf))[0] == '\0', "cpd --help lacks the keys%s",
		    buf);
	}
	ck_assert_msg(missing(&help, &man, &keys, buf, sizeof(buf))[0] ==
	    '\0', "%s's help names options its manual lacks:%s", t->prog,
	    buf);
	ck_assert_msg(missing(&man, &help, NULL, buf, sizeof(buf))[0] ==
	    '\0', "%s(%s) names options its help lacks:%s", t->prog,
	    strchr(t->man, '.') + 1, buf);
}
END_TEST
SUITE_LOOP("tools", test_help_matches_man, 0,
    (int)(sizeof(tools) / sizeof(tools[0])));

/* The parsers: what they read as options, and what they leave. */
START_TEST(test_parsers)
{
	static struct optset s;

	memset(&s, 0, sizeof(s));
	help_opts("usage: x [-c FILE] [--max-batch-tokens N] -s, --socket\n"
	    "  top-k, Ctrl-C, non-negative, --KEY, -1, --x_y, md|json -o\n",
	    &s);
	ck_assert_int_eq(s.n, 5);
	ck_assert(has(&s, "-c") && has(&s, "--max-batch-tokens") &&
	    has(&s, "-s") && has(&s, "--socket") && has(&s, "-o"));
}
END_TEST
SUITE_TEST("parsers", test_parsers);

int
main(void)
{
	return suite_main(suite_registered("manhelp"));
}
