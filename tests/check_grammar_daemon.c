/*
 * check_grammar_daemon.c - constrained output (cp_params.grammar_kind) as
 * clients see it: a real build/bin/cpd on the random-weight synth-tiny-F32
 * fixture, whose unconstrained text is noise, driven through libcpclient
 * and cpq:
 *
 *   - 10 JSON schemas x 5 seeds, all in flight at once: every output
 *     parses and satisfies its schema (tests/lib/jschema.h, a check of
 *     the tests' own), and the request ends (STOP) when the grammar is
 *     complete; any JSON value; a "yes" | "no" grammar gives exactly
 *     those, also for a token prompt and a chat;
 *   - a grammar that does not compile ends its request with an ERROR
 *     naming the rule or schema path, and the client goes on;
 *   - unconstrained requests batched beside constrained ones keep the ids
 *     and logprobs they have alone, and a constrained one keeps its own;
 *   - cpq --grammar, --json-schema, --json-output, and their errors;
 *   - a daemon without grammars: cp_submit() says -EOPNOTSUPP.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpclient.h"
#include "lib/cpd_proc.h"
#include "lib/fake_cpd.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/jschema.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tfile.h"
#include "lib/tmpdir.h"

#define MODEL_REL	"synth/synth-tiny-F32.gguf"
#define MAX_GEN		200
#define SEEDS		5
#define MAX_RUNS	(JSCHEMA_TESTS * SEEDS)
#define WAIT_MS		60000
#define TEXT_CAP	4096

static const char yes_no[] = "root ::= \"yes\" | \"no\"\n";

static char cpd_bin[512];
static struct cpd dp;

/* One request's events up to its end. */
struct run {
	int id;
	int n;				/* TOKEN events with a token */
	int32_t ids[MAX_GEN];
	float lp[MAX_GEN];
	char text[TEXT_CAP];
	size_t len;
	bool ended;
	int type;			/* CP_EVENT_DONE or _ERROR */
	int finish, error;
};

static struct cp_client *
up(void)
{
	const char *args[] = { "--chat-template", "chatml", NULL };
	char *model = fx_path(MODEL_REL);
	struct cp_client *c = NULL;
	struct cp_connect_opts o;
	int r;

	ck_assert_ptr_nonnull(model);
	cpd_start_bin(&dp, cpd_bin, model, args);
	free(model);
	cp_connect_opts_init(&o);
	o.socket_path = dp.sock;
	if ((r = cp_connect(&o, &c)) < 0)
		ck_abort_msg("cp_connect %s: %s", dp.sock, cp_strerror(r));
	return c;
}

static void
down(struct cp_client *c)
{
	cp_close(c);
	cpd_cleanup(&dp);
}

static void
params(struct cp_params *p, int kind, const char *text, uint64_t seed,
    float temp)
{
	cp_params_init(p);
	p->max_tokens = MAX_GEN;
	p->temperature = temp;
	p->top_k = 0;
	p->top_p = 1.0f;
	p->min_p = 0.0f;
	p->use_seed = 1;
	p->seed = seed;
	p->logprobs = 1;
	p->grammar_kind = kind;
	p->grammar = text;
	p->grammar_len = text != NULL ? strlen(text) : 0;
}

/* Reads events until every one of runs[0..n) has ended. */
static void
collect(struct cp_client *c, struct run *runs, int n)
{
	struct cp_event ev;
	struct run *r;
	int i, left = n;

	while (left > 0) {
		ck_assert_int_eq(cp_next_event(c, &ev, WAIT_MS), 0);
		for (i = 0, r = NULL; i < n && r == NULL; i++)
			if (runs[i].id == ev.req_id)
				r = &runs[i];
		ck_assert_msg(r != NULL && !r->ended, "event for request %d",
		    ev.req_id);
		if (ev.type == CP_EVENT_ERROR) {
			r->type = ev.type;
			r->error = ev.error;
			snprintf(r->text, sizeof(r->text), "%.*s",
			    (int)ev.text_len, ev.text);
			r->ended = true;
			left--;
			continue;
		}
		ck_assert_uint_le(r->len + ev.text_len, TEXT_CAP - 1);
		memcpy(r->text + r->len, ev.text, ev.text_len);
		r->len += ev.text_len;
		r->text[r->len] = '\0';
		if (ev.type == CP_EVENT_TOKEN && ev.token >= 0) {
			ck_assert_int_lt(r->n, MAX_GEN);
			r->ids[r->n] = ev.token;
			r->lp[r->n++] = ev.logprob;
		}
		if (ev.type == CP_EVENT_DONE) {
			r->type = ev.type;
			r->finish = ev.finish;
			r->ended = true;
			left--;
		}
	}
}

/* Submits prompt with p as runs[i]. */
static void
submit(struct cp_client *c, struct run *r, const char *prompt,
    const struct cp_params *p)
{
	memset(r, 0, sizeof(*r));
	r->id = cp_submit(c, prompt, strlen(prompt), p);
	ck_assert_msg(r->id > 0, "cp_submit: %s", cp_strerror(r->id));
}

/* ---- generation --------------------------------------------------------- */

/* Every schema, SEEDS seeds each, in flight together at temperature 1. */
START_TEST(test_schemas)
{
	static struct run runs[MAX_RUNS];
	struct json *schema[JSCHEMA_TESTS], *out;
	struct cp_client *c = up();
	struct cp_params p;
	const char *why = "";
	char err[128];
	int i, k;

	for (i = 0; i < MAX_RUNS; i++) {
		k = i / SEEDS;
		params(&p, CP_GRAMMAR_JSON_SCHEMA, jschema_tests[k],
		    (uint64_t)i * 7919 + 3, 1.0f);
		submit(c, &runs[i], "Answer in JSON:", &p);
	}
	collect(c, runs, MAX_RUNS);
	for (k = 0; k < JSCHEMA_TESTS; k++)
		ck_assert_ptr_nonnull(schema[k] = json_parse(jschema_tests[k],
		    strlen(jschema_tests[k]), err, sizeof(err)));
	for (i = 0; i < MAX_RUNS; i++) {
		k = i / SEEDS;
		ck_assert_msg(runs[i].type == CP_EVENT_DONE, "schema %d run %d: "
		    "%s", k, i, runs[i].text);
		ck_assert_msg(runs[i].finish == CP_DONE_STOP, "schema %d run "
		    "%d: finish %d after %d tokens: %s", k, i,
		    runs[i].finish, runs[i].n, runs[i].text);
		out = json_parse(runs[i].text, runs[i].len, err, sizeof(err));
		ck_assert_msg(out != NULL, "schema %d run %d: not JSON (%s): %s",
		    k, i, err, runs[i].text);
		ck_assert_msg(jschema_valid(schema[k], schema[k], out, &why),
		    "schema %d run %d: fails %s: %s", k, i, why, runs[i].text);
		json_free(out);
	}
	for (k = 0; k < JSCHEMA_TESTS; k++)
		json_free(schema[k]);
	down(c);
}
END_TEST
SUITE_TEST("generate", test_schemas);

/* Any JSON value, and yes or no, from a text, a token and a chat prompt. */
START_TEST(test_json_and_yes_no)
{
	static const int32_t toks[] = { 1, 72, 101, 108 };
	static const struct cp_message chat[] = {
		{ CP_CHAT_USER, "Is it?", 6 },
	};
	struct run runs[24];
	struct cp_client *c = up();
	struct cp_params p;
	struct json *out;
	char err[128];
	int i, yes = 0;

	for (i = 0; i < 8; i++) {
		params(&p, CP_GRAMMAR_JSON, NULL, (uint64_t)i + 1, 1.0f);
		submit(c, &runs[i], "JSON:", &p);
	}
	for (i = 8; i < 24; i++) {
		params(&p, CP_GRAMMAR_GBNF, yes_no, (uint64_t)i, 1.5f);
		if (i < 16) {
			submit(c, &runs[i], "Is it?", &p);
			continue;
		}
		memset(&runs[i], 0, sizeof(runs[i]));
		runs[i].id = i < 20 ? cp_submit_tokens(c, toks, 4, &p) :
		    cp_submit_chat(c, chat, 1, &p);
		ck_assert_int_gt(runs[i].id, 0);
	}
	collect(c, runs, 24);
	for (i = 0; i < 8; i++) {
		ck_assert_msg(runs[i].type == CP_EVENT_DONE, "%s", runs[i].text);
		/* a value may be cut by max_tokens; complete ones parse */
		if (runs[i].finish != CP_DONE_STOP)
			continue;
		out = json_parse(runs[i].text, runs[i].len, err, sizeof(err));
		ck_assert_msg(out != NULL, "run %d: not JSON (%s): %s", i, err,
		    runs[i].text);
		json_free(out);
	}
	for (i = 8; i < 24; i++) {
		ck_assert_msg(runs[i].type == CP_EVENT_DONE, "%s", runs[i].text);
		ck_assert_msg(strcmp(runs[i].text, "yes") == 0 ||
		    strcmp(runs[i].text, "no") == 0, "run %d: \"%s\"", i,
		    runs[i].text);
		ck_assert_int_eq(runs[i].finish, CP_DONE_STOP);
		yes += runs[i].text[0] == 'y';
	}
	ck_assert(yes > 0 && yes < 16);		/* the model chose, both ways */
	down(c);
}
END_TEST
SUITE_TEST("generate", test_json_and_yes_no);

/* ---- errors ------------------------------------------------------------- */

/*
 * Grammars that do not compile end their requests with an ERROR whose
 * text names the rule, line and column or the schema path; the client's
 * next request is served.  Bad fields fail in cp_submit().
 */
START_TEST(test_errors)
{
	static const struct {
		int kind;
		const char *text, *what;
		int error;
	} t[] = {
		{ CP_GRAMMAR_GBNF, "root ::= \"a\" | [b-\n", "rule 'root'",
		    -EINVAL },
		{ CP_GRAMMAR_GBNF, "root ::= item\n", "item", -EINVAL },
		{ CP_GRAMMAR_GBNF, "start ::= \"x\"\n", "root", -EINVAL },
		{ CP_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":"
		    "{\"age\":{\"type\":\"int\"}}}", "#/properties/age/type",
		    -EINVAL },
		{ CP_GRAMMAR_JSON_SCHEMA, "{\"type\":", "line 1 col 9", -EINVAL },
		{ CP_GRAMMAR_JSON_SCHEMA, "{\"$ref\":\"#/$defs/none\"}",
		    "none", -EINVAL },
	};
	enum { N = sizeof(t) / sizeof(t[0]) };
	struct run runs[N + 1];
	struct cp_client *c = up();
	struct cp_params p;
	char *big;
	size_t i;

	for (i = 0; i < N; i++) {
		params(&p, t[i].kind, t[i].text, 1, 0);
		submit(c, &runs[i], "x", &p);
	}
	params(&p, CP_GRAMMAR_GBNF, yes_no, 1, 0);
	submit(c, &runs[N], "x", &p);
	collect(c, runs, N + 1);
	for (i = 0; i < N; i++) {
		ck_assert_msg(runs[i].type == CP_EVENT_ERROR, "%zu: %s", i,
		    runs[i].text);
		ck_assert_int_eq(runs[i].error, t[i].error);
		ck_assert_msg(strncmp(runs[i].text, "grammar: ", 9) == 0 &&
		    strstr(runs[i].text, t[i].what) != NULL,
		    "%zu: \"%s\" lacks \"%s\"", i, runs[i].text, t[i].what);
	}
	ck_assert_int_eq(runs[N].type, CP_EVENT_DONE);

	params(&p, CP_GRAMMAR_JSON, "x", 1, 0);		/* text for JSON */
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EINVAL);
	params(&p, CP_GRAMMAR_GBNF, NULL, 1, 0);	/* no text */
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EINVAL);
	params(&p, 7, yes_no, 1, 0);
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EINVAL);
	ck_assert_ptr_nonnull(big = calloc(1, CP_GRAMMAR_MAX_BYTES + 2));
	memset(big, ' ', CP_GRAMMAR_MAX_BYTES + 1);
	params(&p, CP_GRAMMAR_GBNF, big, 1, 0);
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -E2BIG);
	free(big);
	down(c);
}
END_TEST
SUITE_TEST("errors", test_errors);

/* A daemon that offers no grammars: cp_submit() refuses, nothing is sent. */
START_TEST(test_no_feature)
{
	struct cp_client *c = NULL;
	struct cp_params p;
	struct fake f;

	fake_start(&f, FAKE_NOFEAT);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	params(&p, CP_GRAMMAR_JSON, NULL, 1, 0);
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EOPNOTSUPP);
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_TEST("feature", test_no_feature);

/* ---- batch invariance --------------------------------------------------- */

/*
 * Two unconstrained requests (greedy, and seeded at temperature 0.9) and
 * a constrained greedy one, each alone, then all three beside six
 * constrained requests at temperature 1: the same ids and logprobs.
 */
START_TEST(test_batch_invariance)
{
	struct run alone[3], mixed[9];
	struct cp_client *c = up();
	struct cp_params p[3], q;
	int i;

	params(&p[0], CP_GRAMMAR_NONE, NULL, 11, 0);
	params(&p[1], CP_GRAMMAR_NONE, NULL, 12, 0.9f);
	params(&p[2], CP_GRAMMAR_JSON_SCHEMA, jschema_tests[4], 13, 0);
	p[0].max_tokens = p[1].max_tokens = 48;
	for (i = 0; i < 3; i++) {
		submit(c, &alone[i], "Once upon a time", &p[i]);
		collect(c, &alone[i], 1);
	}
	for (i = 0; i < 9; i++) {
		if (i % 3 == 0) {
			submit(c, &mixed[i], "Once upon a time", &p[i / 3]);
			continue;
		}
		params(&q, CP_GRAMMAR_JSON_SCHEMA, jschema_tests[i],
		    (uint64_t)i, 1.0f);
		submit(c, &mixed[i], "Answer in JSON:", &q);
	}
	collect(c, mixed, 9);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(alone[i].type, CP_EVENT_DONE);
		ck_assert_int_eq(mixed[3 * i].type, CP_EVENT_DONE);
		ck_assert_int_eq(mixed[3 * i].n, alone[i].n);
		ck_assert_mem_eq(mixed[3 * i].ids, alone[i].ids,
		    sizeof(alone[i].ids[0]) * (size_t)alone[i].n);
		ck_assert_mem_eq(mixed[3 * i].lp, alone[i].lp,
		    sizeof(alone[i].lp[0]) * (size_t)alone[i].n);
	}
	ck_assert_int_eq(alone[0].n, 48);
	ck_assert_int_eq(alone[2].finish, CP_DONE_STOP);
	down(c);
}
END_TEST
SUITE_TEST("batch", test_batch_invariance);

/* ---- cpq ---------------------------------------------------------------- */

/* A file of the build's tmp directory named name holding text; its path. */
static void
tmp_file(char *path, size_t size, const char *name, const char *text)
{
	snprintf(path, size, "%s/%d-%s", tmp_dir(), (int)getpid(), name);
	tfile_write(path, text, strlen(text));
}

/* Runs cpq with argv; its exit status, stdout and stderr in out. */
static int
cpq_out(const char *const *argv, char *out, size_t cap)
{
	char path[4096];
	char *text;
	size_t len;
	int rc;

	tmp_file(path, sizeof(path), "cpq.out", "");
	rc = prog_runv(argv, path);
	ck_assert_ptr_nonnull(text = tfile_read(path, &len));
	snprintf(out, cap, "%s", text);
	free(text);
	unlink(path);
	return rc;
}

/*
 * cpq --json-schema FILE prints JSON its schema allows; --grammar FILE
 * yes or no; --json-output a JSON value.  A missing file or two of them
 * is a usage error (2); a grammar the daemon refuses, a failure (1)
 * naming the rule.
 */
START_TEST(test_cpq)
{
	static char out[8192];
	char cpq[512], schema[4096], gbnf[4096], bad[4096], err[128];
	const char *why = "";
	struct json *s, *v;
	const char *a_schema[] = { cpq, "-s", NULL, "--json-schema", schema,
	    "--seed", "5", "--temp", "1", "--no-newline", "JSON:", NULL };
	const char *a_gbnf[] = { cpq, "-s", NULL, "--grammar", gbnf,
	    "--no-newline", "Is it?", NULL };
	const char *a_json[] = { cpq, "-s", NULL, "--json-output", "-n", "60",
	    "--no-newline", "JSON:", NULL };
	const char *a_bad[] = { cpq, "-s", NULL, "--grammar", bad, "x", NULL };
	const char *a_none[] = { cpq, "-s", NULL, "--grammar",
	    "/nonexistent/g.gbnf", "x", NULL };
	const char *a_two[] = { cpq, "-s", NULL, "--grammar", gbnf,
	    "--json-output", "x", NULL };
	int rc;

	ck_assert_int_eq(prog_find(cpq, sizeof(cpq), "cpq", "CPQ"), 0);
	cp_close(up());
	a_schema[2] = a_gbnf[2] = a_json[2] = a_bad[2] = a_none[2] =
	    a_two[2] = dp.sock;
	tmp_file(schema, sizeof(schema), "schema.json", jschema_tests[0]);
	tmp_file(gbnf, sizeof(gbnf), "yn.gbnf", yes_no);
	tmp_file(bad, sizeof(bad), "bad.gbnf", "root ::= (\"a\"\n");

	ck_assert_int_eq(prog_capture(a_schema, out, sizeof(out)), 0);
	ck_assert_ptr_nonnull(s = json_parse(jschema_tests[0],
	    strlen(jschema_tests[0]), err, sizeof(err)));
	v = json_parse(out, strlen(out), err, sizeof(err));
	ck_assert_msg(v != NULL, "not JSON (%s): %s", err, out);
	ck_assert_msg(jschema_valid(s, s, v, &why), "fails %s: %s", why, out);
	json_free(v);
	json_free(s);
	ck_assert_int_eq(prog_capture(a_gbnf, out, sizeof(out)), 0);
	ck_assert_msg(strcmp(out, "yes") == 0 || strcmp(out, "no") == 0,
	    "\"%s\"", out);
	ck_assert_int_eq(prog_capture(a_json, out, sizeof(out)), 0);
	ck_assert(strlen(out) > 0);
	rc = cpq_out(a_bad, out, sizeof(out));
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out, "grammar: rule 'root'") != NULL, "%s", out);
	ck_assert_int_eq(cpq_out(a_none, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "--grammar: /nonexistent/g.gbnf") != NULL,
	    "%s", out);
	ck_assert_int_eq(cpq_out(a_two, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "exclude each other") != NULL, "%s", out);
	unlink(schema);
	unlink(gbnf);
	unlink(bad);
	cpd_cleanup(&dp);
}
END_TEST
SUITE_TEST("cpq", test_cpq);

SUITE_CASE("generate", 300);
SUITE_CASE("errors", 120);
SUITE_CASE("feature", 30);
SUITE_CASE("batch", 120);
SUITE_CASE("cpq", 120);

int
main(void)
{
	char *path = fx_path(MODEL_REL);
	bool all = path != NULL &&
	    prog_find(cpd_bin, sizeof(cpd_bin), "cpd", NULL) == 0;

	free(path);
	signal(SIGPIPE, SIG_IGN);
	if (!all) {
		suite_case_skip("generate");
		suite_case_skip("errors");
		suite_case_skip("batch");
		suite_case_skip("cpq");
	}
	return suite_main_some(suite_registered("grammar_daemon"), all,
	    "check_grammar_daemon: %s or build/bin/cpd missing: only the "
	    "feature test ran\n", MODEL_REL);
}
