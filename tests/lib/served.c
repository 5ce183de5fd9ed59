/*
 * served.c - cpd serving a vocabulary of the fixtures (served.h).
 */
#include "served.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "fixtures.h"
#include "prog.h"
#include "tmpdir.h"
#include "tokenizer.h"

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
served_find_vocabs(char **rels, int cap)
{
	char dir[1024];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/vocab", fx_dir());
	if ((d = opendir(dir)) == NULL)
		return 0;
	while ((de = readdir(d)) != NULL && n < cap) {
		size_t len = strlen(de->d_name);

		if (len > 9 && strcmp(de->d_name + len - 9, ".gguf.inp") == 0 &&
		    asprintf(&rels[n], "vocab/%.*s", (int)(len - 4),
		    de->d_name) > 0)
			n++;
	}
	closedir(d);
	qsort(rels, (size_t)n, sizeof(rels[0]), cmp_str);
	return n;
}

int
served_vocab_loads(const char *path, char *why, size_t size)
{
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	struct cp_err e = { 0 };
	int r;

	if ((r = gguf_open(path, &f, &e)) == 0 &&
	    (r = tok_load(f, &t, &e)) == 0)
		tok_free(t);
	if (r < 0)
		snprintf(why, size, "%s", e.msg);
	gguf_close(f);
	return r == 0;
}

void
served_start(struct served *s, const char *cpd, const char *cpmodel,
    const char *path)
{
	static const char *const extra[] = { "--backend", "cpu", NULL };
	struct cp_connect_opts o;

	snprintf(s->model, sizeof(s->model), "%s/tok-%d.gguf", tmp_dir(),
	    (int)getpid());
	ck_assert_int_eq(prog_run(cpmodel, NULL, "synth", "--vocab-from",
	    path, "-o", s->model, "--layers", "1", "--embd", "32", "--heads",
	    "1", "--kv-heads", "1", "--ff", "32", "--ctx", "64",
	    (char *)NULL), 0);
	cpd_start_bin(&s->d, cpd, s->model, extra);
	cp_connect_opts_init(&o);
	o.socket_path = s->d.sock;
	ck_assert_int_eq(cp_connect(&o, &s->c), 0);
}

void
served_stop(struct served *s)
{
	cp_close(s->c);
	cpd_stop(&s->d);
	cpd_cleanup(&s->d);
	unlink(s->model);
}
