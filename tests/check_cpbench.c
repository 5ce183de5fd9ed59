/*
 * check_cpbench.c - cpbench engine, mixed and split on the aidreams260K
 * fixture: they run, report what they were asked to measure in their JSON
 * (the shapes echoed, every time positive), and refuse bad arguments with
 * the documented exit codes (cpbench(1): 2 for usage, 1 for a failure).
 * The times themselves are for BENCHMARKS.md, never asserted here.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/cpd_harness.h"
#include "lib/cpq_run.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/mock_engine.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "server.h"


static char out[1 << 16];

/* $BUILD/bin/cpbench, else build/bin/cpbench. */
static const char *
cpbench_path(void)
{
	static char path[1024];

	prog_find(path, sizeof(path), "cpbench", NULL);
	return path;
}

/* The number under key in object j, asserted present and finite. */
static double
num(const struct json *j, const char *key)
{
	const struct json *v = json_get(j, key);

	ck_assert_msg(v != NULL && v->type == JSON_NUMBER, "no number %s",
	    key);
	ck_assert(isfinite(v->num));
	return v->num;
}

static struct json *
parse_out(void)
{
	char err[256];
	struct json *j = json_parse(out, strlen(out), err, sizeof(err));

	ck_assert_msg(j != NULL, "cpbench output: %s\n%s", err, out);
	return j;
}

START_TEST(test_mixed)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *argv[] = { cpbench_path(), "mixed", "-m", model, "-t",
	    "1", "-d", "2", "-D", "20", "-c", "4", "-P", "40", "-r", "3",
	    "-o", "json", NULL };
	struct json *j;

	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	j = parse_out();
	ck_assert_int_eq((int)num(j, "decode_rows"), 2);
	ck_assert_int_eq((int)num(j, "decode_pos"), 20);
	ck_assert_int_eq((int)num(j, "prompt_rows"), 4);
	ck_assert_int_eq((int)num(j, "prompt_pos"), 40);
	ck_assert_int_eq((int)num(j, "reps"), 3);
	ck_assert_int_eq((int)num(j, "block_tokens"), 16);
	ck_assert(num(j, "decode_ms") > 0);
	ck_assert(num(j, "mixed_ms") > 0);
	ck_assert(num(j, "ratio") > 0);
	ck_assert(num(j, "attention_cost_tokens") >= 0);
	(void)num(j, "prompt_row_ms");
	(void)num(j, "prompt_row_ms_at_0");
	json_free(j);
	free(model);
}
END_TEST
SUITE_TEST("runs", test_mixed);

/* At position 0 the timed steps read more tokens than the fill wrote. */
START_TEST(test_mixed_at_0)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *argv[] = { cpbench_path(), "mixed", "-m", model, "-t",
	    "2", "-d", "4", "-D", "0", "-c", "8", "-P", "0", "-r", "2",
	    "-o", "json", NULL };
	struct json *j;

	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	j = parse_out();
	ck_assert_int_eq((int)num(j, "decode_pos"), 0);
	ck_assert(num(j, "mixed_ms") > 0);
	json_free(j);
	free(model);
}
END_TEST
SUITE_TEST("runs", test_mixed_at_0);

START_TEST(test_engine)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *argv[] = { cpbench_path(), "engine", "-m", model, "-p",
	    "16", "-n", "8", "-r", "1", "-t", "1", "-o", "json", NULL };
	const struct json *t;
	struct json *j;

	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	j = parse_out();
	ck_assert_int_eq(j->type, JSON_ARRAY);
	ck_assert_uint_eq(j->n, 2);
	t = json_get(json_at(j, 0), "test");
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(t->str, "pp16");
	t = json_get(json_at(j, 1), "test");
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(t->str, "tg8");
	ck_assert(num(json_at(j, 0), "avg_ts") > 0);
	ck_assert(num(json_at(j, 1), "avg_ts") > 0);
	json_free(j);
	free(model);
}
END_TEST
SUITE_TEST("runs", test_engine);

START_TEST(test_split)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *argv[] = { cpbench_path(), "split", "-m", model, "-d",
	    "2", "-D", "20", "-P", "100", "-c", "32", "-o", "json", NULL };
	struct json *j;

	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	j = parse_out();
	ck_assert_int_eq((int)num(j, "decode_rows"), 2);
	ck_assert_int_eq((int)num(j, "prompt_tokens"), 100);
	ck_assert_int_eq((int)num(j, "chunk"), 32);
	ck_assert(num(j, "decode_alone_p50_ms") > 0);
	ck_assert(num(j, "decode_steps") >= 1);
	ck_assert(num(j, "decode_p99_ms") >= num(j, "decode_p50_ms"));
	ck_assert(num(j, "decode_max_ms") >= num(j, "decode_p99_ms"));
	ck_assert(num(j, "prefill_s") > 0);
	json_free(j);
	free(model);
}
END_TEST
SUITE_TEST("runs", test_split);

/*
 * cpbench serve --baseline against a daemon with the mock engine (2 ms
 * steps, prompts fed 16 elements a step, a token for each prompt element
 * it echoes): every gap of the streams that
 * overlapped the long prompt's prefill has its counterpart, between the
 * same tokens, in the run without it.
 */
START_TEST(test_serve_baseline)
{
	const char *argv[] = { cpbench_path(), "serve", "--socket", NULL, "-c",
	    "2", "--prompt-len", "150", "--gen-len", "150", "--long-prompt",
	    "400", "--long-every", "60", "--long-count", "1", "--baseline",
	    "-o", "json", NULL };
	const struct json *load, *base;
	struct srv_config cfg;
	struct mock_opts mo;
	struct json *j;
	struct hd d;

	cq_cfg_init(&cfg, "");
	mock_opts_default(&mo);
	mo.step_us = 2000;
	mo.prefill_chunk = 16;
	ck_assert_int_eq(hd_start(&d, &cfg, &mo), 0);
	argv[3] = d.path;
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	j = parse_out();
	load = json_get(j, "itl_prefill_ms");
	base = json_get(j, "itl_baseline_same_tokens_ms");
	ck_assert_ptr_nonnull(load);
	ck_assert_ptr_nonnull(base);
	ck_assert_msg(num(load, "n") > 0, "%s", out);
	ck_assert(num(base, "n") == num(load, "n"));
	ck_assert(num(base, "p50") > 0);
	json_free(j);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("runs", test_serve_baseline);

/*
 * bandwidth reads the model's tensors from the mapping and from the heap,
 * each row with a positive best and median; it needs exactly one of -m and
 * -b, and a GGUF file.
 */
START_TEST(test_bandwidth)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *ok[] = { cpbench_path(), "bandwidth", "-m", model, "-t",
	    "2", "-r", "3", NULL };
	const char *heap[] = { cpbench_path(), "bandwidth", "-b", "65536",
	    "-t", "1", "-r", "2", NULL };
	const char *none[] = { cpbench_path(), "bandwidth", NULL };
	const char *both[] = { cpbench_path(), "bandwidth", "-m", model, "-b",
	    "65536", NULL };
	const char *small[] = { cpbench_path(), "bandwidth", "-b", "100",
	    NULL };
	const char *notgguf[] = { cpbench_path(), "bandwidth", "-m",
	    "/dev/null", NULL };
	double best, median;

	ck_assert_int_eq(prog_capture(ok, out, sizeof(out)), 0);
	ck_assert_msg(sscanf(strstr(out, "| mapped file |"), "| mapped file "
	    "| %*f | 2 | %lf | %lf |", &best, &median) == 2, "%s", out);
	ck_assert(best > 0 && median > 0 && best >= median);
	ck_assert_ptr_nonnull(strstr(out, "| heap |"));
	ck_assert_int_eq(prog_capture(heap, out, sizeof(out)), 0);
	ck_assert_msg(sscanf(strstr(out, "| heap |"), "| heap | %*f | 1 | "
	    "%lf | %lf |", &best, &median) == 2, "%s", out);
	ck_assert(best > 0 && median > 0 && best >= median);
	ck_assert_int_eq(prog_capture(none, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(both, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(small, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(notgguf, out, sizeof(out)), 1);
	free(model);
}
END_TEST
SUITE_TEST("runs", test_bandwidth);

/* Usage errors exit 2; positions past the model's context exit 1. */
START_TEST(test_bad_args)
{
	char *model = fx_path("aidreams260K.gguf");
	const char *a1[] = { cpbench_path(), "mixed", "-m", model, "-c", "0",
	    NULL };
	const char *a2[] = { cpbench_path(), "mixed", "-m", model, "-o", "xml",
	    NULL };
	const char *a3[] = { cpbench_path(), "mixed", NULL };
	const char *a4[] = { cpbench_path(), "mixed", "-m", model, "-P", "200",
	    "-r", "1", NULL };
	const char *a5[] = { cpbench_path(), "nope", NULL };

	ck_assert_int_eq(prog_capture(a1, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(a2, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(a3, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(a4, out, sizeof(out)), 1);
	ck_assert_int_eq(prog_capture(a5, out, sizeof(out)), 2);
	free(model);
}
END_TEST
SUITE_TEST("runs", test_bad_args);

SUITE_CASE("runs", 120);

int
main(void)
{
	if (access(cpbench_path(), X_OK) != 0) {
		printf("check_cpbench: %s not built: skipped\n",
		    cpbench_path());
		return 77;
	}
	return fx_main("cpbench", "aidreams260K.gguf");
}
