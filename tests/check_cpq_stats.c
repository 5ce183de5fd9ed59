/*
 * check_cpq_stats.c - cpq --info and --stats against a daemon process
 * (daemon/server.c with the mock engine of tests/lib): the table, the
 * JSON and the Prometheus text forms.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cp_proto.h"
#include "lib/cpd_harness.h"
#include "lib/cpq_run.h"
#include "lib/json.h"
#include "lib/suite.h"


START_TEST(test_info)
{
	const char *a1[] = { "--socket", NULL, "--info", NULL };
	const char *a2[] = { "--socket", NULL, "--info", "--json", NULL };
	struct srv_config cfg;
	struct json *js[4];
	struct cq_buf out, err;
	size_t n;
	struct hd d;

	cq_cfg_init(&cfg, "llama3");
	/* Valid UTF-8 kept, an invalid byte replaced (U+FFFD). */
	snprintf(cfg.model.name, sizeof(cfg.model.name), "mod\xc3\xa8le-\xff");
	cfg.max_prompt_bytes = 12345;
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	a1[1] = a2[1] = d.path;
	ck_assert_int_eq(cq_run(a1, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	ck_assert_ptr_nonnull(strstr(out.p, "model:          mod\xc3\xa8le-"));
	ck_assert_ptr_nonnull(strstr(out.p, "\nchat template:  llama3\n"));
	ck_assert_ptr_nonnull(strstr(out.p, "\ncontext:        4096 tokens\n"));
	ck_assert_ptr_nonnull(strstr(out.p, "\nmax prompt:     12345 bytes\n"));
	ck_assert_ptr_nonnull(strstr(out.p, "\nheads:          8 (4 for"));
	ck_assert_ptr_nonnull(strstr(out.p, d.path));
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a2, &out, &err), 0);
	n = cq_json_lines(out.p, js, 4);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(cq_jstr(js[0], "name"), "mod\xc3\xa8le-\xef\xbf\xbd");
	ck_assert_str_eq(cq_jstr(js[0], "arch"), "llama");
	ck_assert_str_eq(cq_jstr(js[0], "chat_template"), "llama3");
	ck_assert_str_eq(cq_jstr(js[0], "socket"), d.path);
	ck_assert(cq_jnum(js[0], "n_ctx") == 4096);
	ck_assert(cq_jnum(js[0], "n_params") == 260000);
	ck_assert(cq_jnum(js[0], "eos") == 2);
	ck_assert(cq_jnum(js[0], "max_prompt_bytes") == 12345);
	ck_assert(cq_jnum(js[0], "clients") == 1);
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("info", test_info);

/* Value of "name value" line name in a table, or -1. */
static long long
table_value(const char *text, const char *name)
{
	size_t n = strlen(name);
	const char *p = text;

	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, n) == 0 && p[n] == ' ')
			return strtoll(p + n, NULL, 10);
		p = strchr(p, '\n');
		if (p != NULL)
			p++;
	}
	return -1;
}

/* A metric family seen in a Prometheus text. */
struct family {
	char name[64];
	char type[16];		/* "" until its TYPE line */
	int helped;
	double last_bucket;	/* histograms: running bucket count */
	double inf_bucket;	/* the le="+Inf" bucket, NAN before it */
};

static struct family *
family(struct family *f, size_t *n, const char *name)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (strcmp(f[i].name, name) == 0)
			return &f[i];
	ck_assert_uint_lt(*n, 64);
	ck_assert_uint_lt(strlen(name), sizeof(f[*n].name));
	memset(&f[*n], 0, sizeof(f[*n]));
	strcpy(f[*n].name, name);
	f[*n].inf_bucket = NAN;
	return &f[(*n)++];
}

static int
ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);

	return a >= b && strcmp(s + a - b, tail) == 0;
}

/*
 * Checks text against the Prometheus text format (version 0.0.4): HELP and
 * TYPE before each family's samples, counters named *_total, histograms
 * with cumulative buckets ending at le="+Inf" == _count, label values
 * quoted.  Returns the value of the sample written exactly want (name
 * and labels), NAN if none.
 */
static double
prometheus_check(char *text, const char *want)
{
	static const char name_chars[] = "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ_:0123456789";
	struct family fams[64], *f;
	size_t nf = 0, k, i;
	char *line, *save = NULL;
	double found = NAN;

	for (line = strtok_r(text, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		char name[64], kind[16], base[64], *end, *labels = NULL;
		double v;

		if (strncmp(line, "# HELP ", 7) == 0) {
			ck_assert_int_eq(sscanf(line + 7, "%63s", name), 1);
			ck_assert_uint_gt(strlen(line + 7), strlen(name) + 1);
			f = family(fams, &nf, name);
			ck_assert_msg(!f->helped, "second HELP for %s", name);
			f->helped = 1;
			continue;
		}
		if (strncmp(line, "# TYPE ", 7) == 0) {
			ck_assert_int_eq(sscanf(line + 7, "%63s %15s", name,
			    kind), 2);
			ck_assert_msg(strcmp(kind, "counter") == 0 ||
			    strcmp(kind, "gauge") == 0 ||
			    strcmp(kind, "histogram") == 0, "type %s", kind);
			/* Counters, and only they, end in _total. */
			ck_assert_int_eq(strcmp(kind, "counter") == 0,
			    ends_with(name, "_total"));
			f = family(fams, &nf, name);
			ck_assert_msg(f->helped && f->type[0] == '\0',
			    "TYPE for %s without HELP, or twice", name);
			strcpy(f->type, kind);
			continue;
		}
		ck_assert_msg(line[0] != '#', "stray comment %s", line);
		/* A sample: name, optional {labels}, one space, a number. */
		k = strspn(line, name_chars);
		ck_assert_msg(k > 0 && k < sizeof(name) && !(line[0] >= '0' &&
		    line[0] <= '9'), "bad sample line %s", line);
		memcpy(name, line, k);
		name[k] = '\0';
		ck_assert_int_eq(strncmp(name, "cpd_", 4), 0);
		if (line[k] == '{') {
			char *close = strchr(line + k, '}');

			ck_assert_msg(close != NULL, "unclosed: %s", line);
			labels = line + k + 1;
			/* key="value" pairs, comma-separated. */
			for (i = 0; labels + i < close;) {
				size_t kl = strspn(labels + i, name_chars);
				char *q;

				ck_assert_msg(kl > 0 && labels[i + kl] == '=' &&
				    labels[i + kl + 1] == '"', "label in %s",
				    line);
				q = strchr(labels + i + kl + 2, '"');
				ck_assert_ptr_nonnull(q);
				i = (size_t)(q - labels) + 1;
				if (labels[i] == ',')
					i++;
			}
			k = (size_t)(close - line) + 1;
		}
		ck_assert_msg(line[k] == ' ', "bad sample line %s", line);
		v = strtod(line + k + 1, &end);
		ck_assert_msg(*end == '\0' && end != line + k + 1,
		    "bad value in %s", line);

		/* Its family: the name, or a histogram's name less a suffix. */
		strcpy(base, name);
		f = NULL;
		for (i = 0; i < nf; i++)
			if (strcmp(fams[i].name, name) == 0)
				f = &fams[i];
		if (f == NULL) {
			static const char *const sfx[] = { "_bucket", "_sum",
			    "_count" };

			for (i = 0; i < 3 && f == NULL; i++) {
				size_t j;

				if (!ends_with(name, sfx[i]))
					continue;
				base[strlen(name) - strlen(sfx[i])] = '\0';
				for (j = 0; j < nf; j++)
					if (strcmp(fams[j].name, base) == 0)
						f = &fams[j];
			}
			ck_assert_msg(f != NULL &&
			    strcmp(f->type, "histogram") == 0,
			    "%s: no HELP/TYPE family", name);
			if (ends_with(name, "_bucket")) {
				ck_assert_msg(labels != NULL &&
				    strncmp(labels, "le=\"", 4) == 0,
				    "bucket without le: %s", line);
				ck_assert_msg(v >= f->last_bucket,
				    "buckets not cumulative: %s", line);
				f->last_bucket = v;
				if (strncmp(labels, "le=\"+Inf\"", 9) == 0)
					f->inf_bucket = v;
			} else if (ends_with(name, "_count")) {
				ck_assert_msg(f->inf_bucket == v,
				    "%s: +Inf bucket %g, count %g", name,
				    f->inf_bucket, v);
			}
		} else {
			ck_assert_msg(f->type[0] != '\0' &&
			    strcmp(f->type, "histogram") != 0,
			    "%s without TYPE", name);
		}
		if (strncmp(line, want, strlen(want)) == 0 &&
		    line[strlen(want)] == ' ')
			found = v;
	}
	/* Every family has HELP and TYPE; every histogram a +Inf bucket. */
	for (i = 0; i < nf; i++) {
		ck_assert_msg(fams[i].helped && fams[i].type[0] != '\0',
		    "%s: HELP or TYPE missing", fams[i].name);
		if (strcmp(fams[i].type, "histogram") == 0)
			ck_assert_msg(!isnan(fams[i].inf_bucket),
			    "%s: no +Inf bucket", fams[i].name);
	}
	return found;
}

/* prometheus_check() on a copy of text. */
static double
prom_get(const char *text, const char *want)
{
	char *copy = strdup(text);
	double v;

	ck_assert_ptr_nonnull(copy);
	v = prometheus_check(copy, want);
	free(copy);
	return v;
}

START_TEST(test_stats)
{
	const char *a0[] = { "--socket", NULL, "abc", NULL };
	const char *a1[] = { "--socket", NULL, "--stats", NULL };
	const char *a2[] = { "--socket", NULL, "--stats", "--prometheus",
	    NULL };
	const char *a3[] = { "--socket", NULL, "--stats", "--json", NULL };
	const char *a4[] = { "--socket", NULL, "--info", "--stats", NULL };
	struct json *js[4];
	struct cq_buf out, err;
	size_t n;
	struct hd d;

	cq_start(&d, "", 200);
	a0[1] = a1[1] = a2[1] = a3[1] = a4[1] = d.path;
	ck_assert_int_eq(cq_run(a0, &out, &err), 0);
	ck_assert_str_eq(out.p, "abc\n");
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a1, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	ck_assert_int_eq(table_value(out.p, "requests_total"), 1);
	ck_assert_int_eq(table_value(out.p, "tokens_generated"), 3);
	ck_assert_int_eq(table_value(out.p, "tokens_prompt"), 3);
	ck_assert_int_eq(table_value(out.p, "clients"), 1);
	ck_assert_int_eq(table_value(out.p, "clients_total"), 2);
	ck_assert_int_eq(table_value(out.p, "requests_active"), 0);
	ck_assert_int_ge(table_value(out.p, "uptime_ms"), 0);
	ck_assert_int_ge(table_value(out.p, "kv_blocks_total"), 0);
	ck_assert_int_eq(table_value(out.p, "disconnects_closed") +
	    table_value(out.p, "disconnects_exited"), 1);
	ck_assert_int_eq(table_value(out.p, "disconnects_timeout"), 0);
	ck_assert_int_eq(table_value(out.p, "ttft_us"), 0);
	ck_assert_ptr_nonnull(strstr(out.p, "\ndraining "));
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* One scrape, every value read from it (each read checks the
	 * whole text's format). */
	ck_assert_int_eq(cq_run(a2, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	ck_assert_double_eq(prom_get(out.p, "cpd_requests_total"), 1);
	ck_assert_double_eq(prom_get(out.p, "cpd_generated_tokens_total"), 3);
	ck_assert_double_eq(prom_get(out.p, "cpd_clients_total"), 3);
	ck_assert(prom_get(out.p, "cpd_uptime_seconds") > 0);
	/* The two cpq runs before it have ended (closed, or exited first). */
	ck_assert_double_eq(prom_get(out.p,
	    "cpd_disconnects_total{reason=\"closed\"}") + prom_get(out.p,
	    "cpd_disconnects_total{reason=\"exited\"}"), 2);
	/* The mock engine keeps no histograms: empty, but well formed. */
	ck_assert_double_eq(prom_get(out.p,
	    "cpd_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 0);
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a3, &out, &err), 0);
	n = cq_json_lines(out.p, js, 4);
	ck_assert_uint_eq(n, 1);
	ck_assert(cq_jnum(js[0], "requests_total") == 1);
	ck_assert(cq_jnum(js[0], "tokens_generated") == 3);
	ck_assert(cq_jnum(js[0], "clients_total") == 4);
	ck_assert(cq_jnum(json_get(js[0], "disconnects"), "closed") +
	    cq_jnum(json_get(js[0], "disconnects"), "exited") == 3);
	ck_assert(cq_jnum(json_get(js[0], "ttft_us"), "count") == 0);
	ck_assert_uint_eq(json_get(json_get(js[0], "itl_us"), "buckets")->n,
	    20);
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* Both: the information, then the table. */
	ck_assert_int_eq(cq_run(a4, &out, &err), 0);
	ck_assert_ptr_nonnull(strstr(out.p, "model:          mock-model\n"));
	ck_assert_int_eq(table_value(strstr(out.p, "\nuptime_ms") + 1,
	    "requests_total"), 1);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("info", test_stats);

SUITE_CASE("info", 30);

int
main(void)
{
	if (cq_find_cpq() < 0)
		return 77;
	return suite_main(suite_registered("cpq_stats"));
}
