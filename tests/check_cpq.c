/*
 * check_cpq.c - cpq, the shell tool, as a user runs it: the program
 * ($CPQ, else $BUILD/bin/cpq, else build/bin/cpq) in a child process,
 * talking to a daemon process (daemon/server.c with the mock engine of
 * tests/lib, see cpd_harness.h and cpq_run.h; --info and --stats are in
 * check_cpq_stats.c).
 *
 * The mock engine echoes a text prompt one byte per token (token id = the
 * byte's value, logprob of the n-th token -(n + 1) / 8), stops after the
 * prompt (finish "stop"), after max_tokens ("length") or when the output
 * ends with a stop string (the stop string included), and fails prompts
 * that start with "!error".  So the expected output of every request is
 * the prompt, or a prefix of it, worked out by hand.  A chat request is
 * rendered by the daemon's renderer (daemon/chatwire.c) in the template
 * the daemon's configuration names, and echoed: the expected chat
 * prompts are llama.cpp's llama_chat_apply_template() output, as in
 * check_chat.c and lib/chat_goldens.h.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cp_proto.h"
#include "lib/chat_goldens.h"
#include "lib/clock.h"
#include "lib/cpd_harness.h"
#include "lib/cpq_run.h"
#include "lib/json.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"


/* ---- streaming --------------------------------------------------------- */

START_TEST(test_text)
{
	const char *args[] = { "--socket", NULL, "Hello, world", NULL };
	struct cq_buf out, err;
	struct hd d;

	cq_start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	/* a pipe gets the text's newline too */
	ck_assert_str_eq(out.p, "Hello, world\n");
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* Several words are one prompt, joined by single spaces. */
	{
		const char *a2[] = { "--socket", d.path, "-n", "100", "one",
		    "two  three", "", "four", NULL };

		ck_assert_int_eq(cq_run(a2, &out, &err), 0);
		ck_assert_str_eq(out.p, "one two  three  four\n");
		cq_buf_free(&out);
		cq_buf_free(&err);
	}
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("stream", test_text);

/* Each token reaches the pipe as it is made, not at exit. */
START_TEST(test_streams)
{
	const char *args[] = { "--socket", NULL, "abcdefghijklmnopqrstuvwxyz",
	    NULL };
	struct cq_buf out = { 0 }, err = { 0 }, first = { 0 };
	struct cq_proc p;
	int st;
	struct hd d;

	cq_start(&d, "", 100000);		/* 100 ms a token: 2.6 s in all */
	args[1] = d.path;
	cq_spawn(&p, args, NULL);
	ck_assert(cq_read_until(p.out, &first, "a", 5000));
	ck_assert_uint_lt(first.len, 26);
	ck_assert_int_eq(waitpid(p.pid, &st, WNOHANG), 0);
	st = cq_finish(&p, NULL, 0, &out, &err);
	ck_assert_int_eq(st, 0);
	cq_buf_add(&first, out.p, out.len);
	ck_assert_str_eq(first.p, "abcdefghijklmnopqrstuvwxyz\n");
	cq_buf_free(&out);
	cq_buf_free(&err);
	cq_buf_free(&first);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_streams);

START_TEST(test_stdin)
{
	static const char prompt[] = "from stdin\nsecond line\n";
	const char *args[] = { "--socket", NULL, NULL };
	struct cq_buf out, err;
	struct hd d;

	cq_start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(cq_run_in(args, prompt, strlen(prompt), &out, &err), 0);
	ck_assert_str_eq(out.p, prompt);
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* Empty standard input: nothing to send. */
	ck_assert_int_eq(cq_run_in(args, "", 0, &out, &err), 2);
	ck_assert_str_eq(out.p, "");
	ck_assert_ptr_nonnull(strstr(err.p, "empty prompt"));
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_stdin);

START_TEST(test_ids)
{
	const char *args[] = { "--socket", NULL, "--ids", "AB z", NULL };
	struct cq_buf out, err;
	struct hd d;

	cq_start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_str_eq(out.p, "65 66 32 122\n");
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_ids);

START_TEST(test_max_tokens_and_stop)
{
	const char *a1[] = { "--socket", NULL, "-n", "3", "abcdef", NULL };
	const char *a2[] = { "--socket", NULL, "--stop", "lo", "hello world",
	    NULL };
	const char *a3[] = { "--socket", NULL, "--stop", "xyz", "--stop", "o w",
	    "--json", "hello world", NULL };
	const char *a4[] = { "--socket", NULL, "--max-tokens", "4", "--json",
	    "abcdef", NULL };
	struct json *js[16];
	struct cq_buf out, err;
	size_t n;
	struct hd d;

	cq_start(&d, "", 200);
	a1[1] = a2[1] = a3[1] = a4[1] = d.path;
	ck_assert_int_eq(cq_run(a1, &out, &err), 0);
	ck_assert_str_eq(out.p, "abc\n");
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* The mock stops once the output ends with a stop string. */
	ck_assert_int_eq(cq_run(a2, &out, &err), 0);
	ck_assert_str_eq(out.p, "hello\n");
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a3, &out, &err), 0);
	n = cq_json_lines(out.p, js, 16);
	ck_assert_uint_eq(n, 8);	/* "hello w" and done */
	ck_assert_str_eq(cq_jstr(js[6], "text"), "w");
	ck_assert_str_eq(cq_jstr(js[7], "event"), "done");
	ck_assert_str_eq(cq_jstr(js[7], "finish"), "stop");
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a4, &out, &err), 0);
	n = cq_json_lines(out.p, js, 16);
	ck_assert_uint_eq(n, 5);
	ck_assert_str_eq(cq_jstr(js[4], "finish"), "length");
	ck_assert(cq_jnum(js[4], "n_gen") == 4);
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_max_tokens_and_stop);

/* One JSON object per event, valid whatever bytes the text holds. */
START_TEST(test_json)
{
	/* Quote, backslash, newline, control, DEL, UTF-8 "é" split in two. */
	static const char prompt[] = "A\"\\\n\x01\x7f\xc3\xa9";
	static const char *const texts[] = {
		"A", "\"", "\\", "\n", "\x01", "\x7f", "\xef\xbf\xbd",
		"\xef\xbf\xbd",
	};
	const char *args[] = { "--socket", NULL, "--json", prompt, NULL };
	const struct json *tm;
	struct json *js[16];
	struct cq_buf out, err;
	size_t n, i;
	double t_prev = 0;
	struct hd d;

	cq_start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	/* Raw control bytes never appear inside a line. */
	for (i = 0; i < out.len; i++)
		ck_assert(out.p[i] == '\n' || (unsigned char)out.p[i] >= 0x20);
	n = cq_json_lines(out.p, js, 16);
	ck_assert_uint_eq(n, 9);
	for (i = 0; i < 8; i++) {
		ck_assert_str_eq(cq_jstr(js[i], "event"), "token");
		ck_assert(cq_jnum(js[i], "token") ==
		    (unsigned char)prompt[i]);
		ck_assert_str_eq(cq_jstr(js[i], "text"), texts[i]);
		ck_assert_double_eq(cq_jnum(js[i], "logprob"),
		    -(double)(i + 1) / 8);
		ck_assert(cq_jnum(js[i], "t_ms") >= t_prev);
		t_prev = cq_jnum(js[i], "t_ms");
	}
	ck_assert_str_eq(cq_jstr(js[8], "event"), "done");
	ck_assert_str_eq(cq_jstr(js[8], "finish"), "stop");
	ck_assert(cq_jnum(js[8], "n_prompt") == 8);
	ck_assert(cq_jnum(js[8], "n_gen") == 8);
	tm = json_get(js[8], "timings");
	ck_assert_ptr_nonnull(tm);
	ck_assert_int_eq(tm->type, JSON_OBJECT);
	ck_assert(cq_jnum(tm, "total_ms") >= cq_jnum(tm, "ttft_ms"));
	ck_assert(cq_jnum(tm, "ttft_ms") >= 0);
	ck_assert(cq_jnum(tm, "ttft_ms") <= cq_jnum(js[0], "t_ms"));
	ck_assert(cq_jnum(tm, "gen_tokens_per_s") > 0);
	ck_assert_ptr_nonnull(json_get(tm, "prompt_tokens_per_s"));
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_json);

/*
 * --json --progress: a "progress" object per prefill report before the
 * tokens (the mock computes 4 of the 10 prompt bytes a step: 4, 8, 10,
 * in consecutive steps); plain --json prints none.
 */
START_TEST(test_json_progress)
{
	static const double want[] = { 4, 8, 10 };
	const char *args[] = { "--socket", NULL, "--json", "--progress",
	    "0123456789", NULL };
	struct json *js[32];
	struct cq_buf out, err;
	size_t n, i;
	struct hd d;

	cq_start_prefill(&d, 200, 4);
	args[1] = d.path;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	n = cq_json_lines(out.p, js, 32);
	ck_assert_uint_eq(n, 3 + 10 + 1);
	for (i = 0; i < 3; i++) {
		ck_assert_str_eq(cq_jstr(js[i], "event"), "progress");
		ck_assert_double_eq(cq_jnum(js[i], "done"), want[i]);
		ck_assert_double_eq(cq_jnum(js[i], "total"), 10);
		ck_assert(cq_jnum(js[i], "t_ms") >= 0);
		if (i > 0)
			ck_assert_double_eq(cq_jnum(js[i], "step"),
			    cq_jnum(js[i - 1], "step") + 1);
	}
	for (i = 3; i < 13; i++)
		ck_assert_str_eq(cq_jstr(js[i], "event"), "token");
	ck_assert_str_eq(cq_jstr(js[13], "event"), "done");
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* Without --progress, JSON output is what it always was. */
	args[3] = "0123456789";
	args[4] = NULL;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	n = cq_json_lines(out.p, js, 32);
	ck_assert_uint_eq(n, 10 + 1);
	for (i = 0; i < n; i++)
		ck_assert_str_ne(cq_jstr(js[i], "event"), "progress");
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_json_progress);

/* An ERROR event: its message, exit status 1; --json reports it too. */
START_TEST(test_request_error)
{
	const char *a1[] = { "--socket", NULL, "!error please", NULL };
	const char *a2[] = { "--socket", NULL, "--json", "!error please",
	    NULL };
	struct json *js[4];
	struct cq_buf out, err;
	size_t n;
	struct hd d;

	cq_start(&d, "", 200);
	a1[1] = a2[1] = d.path;
	ck_assert_int_eq(cq_run(a1, &out, &err), 1);
	ck_assert_str_eq(out.p, "");
	ck_assert_ptr_nonnull(strstr(err.p, "mock: error requested"));
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a2, &out, &err), 1);
	n = cq_json_lines(out.p, js, 4);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(cq_jstr(js[0], "event"), "error");
	ck_assert(cq_jnum(js[0], "error") == -EINVAL);
	ck_assert_str_eq(cq_jstr(js[0], "message"), "mock: error requested");
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_request_error);

/* A prompt over the daemon's limit, from the arguments or standard input. */
START_TEST(test_prompt_too_long)
{
	const char *a1[] = { "--socket", NULL, NULL, NULL };
	const char *a2[] = { "--socket", NULL, "--no-newline", NULL };
	struct srv_config cfg;
	struct cq_buf out, err;
	char big[200];
	struct hd d;

	cq_cfg_init(&cfg, "");
	cfg.max_prompt_bytes = 100;
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	a1[1] = a2[1] = d.path;
	a1[2] = big;
	ck_assert_int_eq(cq_run(a1, &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "100 bytes"));
	ck_assert_str_eq(out.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);
	ck_assert_int_eq(cq_run_in(a2, big, strlen(big), &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "100 bytes"));
	cq_buf_free(&out);
	cq_buf_free(&err);
	/* At the limit it goes through. */
	big[100] = '\0';
	ck_assert_int_eq(cq_run_in(a2, big, 100, &out, &err), 0);
	ck_assert_str_eq(out.p, big);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("stream", test_prompt_too_long);

/* ---- chat ---------------------------------------------------------------- */

START_TEST(test_chat)
{
	/* llama_chat_apply_template("chatml"), system + user. */
	static const char chatml[] = "<|im_start|>system\nYou are a helpful "
	    "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
	    "<|im_start|>assistant\n";
	/* ("llama3"), system " \tBe brief.\n", user "Hi\n". */
	static const char llama3[] = "<|start_header_id|>system"
	    "<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
	    "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
	    "<|end_header_id|>\n\n";
	/* ("gemma"), user "  Who are you?\n" alone. */
	static const char gemma[] = "<start_of_turn>user\nWho are you?"
	    "<end_of_turn>\n<start_of_turn>model\n";
	const char *a1[] = { "--socket", NULL, "--chat", "--system",
	    "You are a helpful assistant", "Hello", NULL };
	const char *a2[] = { "--socket", NULL, "--system", " \tBe brief.\n",
	    "Hi\n", NULL };
	const char *a3[] = { "--socket", NULL, "--chat", NULL };
	const char *a4[] = { "--socket", NULL, "--chat", "Hello", NULL };
	struct cq_buf out, err;
	struct hd d, d2, d3;

	cq_start(&d, "chatml", 50);
	a1[1] = a4[1] = d.path;
	ck_assert_int_eq(cq_run(a1, &out, &err), 0);
	ck_assert_str_eq(out.p, chatml);
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* The daemon's template decides: the same options, other daemons. */
	cq_start(&d2, "llama3", 50);
	a2[1] = d2.path;
	ck_assert_int_eq(cq_run(a2, &out, &err), 0);
	ck_assert_str_eq(out.p, llama3);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d2);

	cq_start(&d3, "gemma", 50);
	a3[1] = d3.path;
	ck_assert_int_eq(cq_run_in(a3, "  Who are you?\n", 15, &out, &err), 0);
	ck_assert_str_eq(out.p, gemma);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d3);

	/* Without --system: no system turn. */
	ck_assert_int_eq(cq_run(a4, &out, &err), 0);
	ck_assert_str_eq(out.p, "<|im_start|>user\nHello<|im_end|>\n"
	    "<|im_start|>assistant\n");
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("chat", test_chat);

/*
 * --history: llama.cpp's conversation (lib/chat_goldens.h) but its last
 * turn from a JSON file, the last turn as the prompt, to a daemon
 * rendering format _i: llama.cpp's rendering of the whole conversation.
 */
START_TEST(test_chat_history)
{
	const struct chat_golden *g = &llamacpp_goldens[_i];
	const char *args[] = { "--socket", NULL, "--no-newline", "--history",
	    NULL, conv_llamacpp[CONV_LLAMACPP_N - 1].content, NULL };
	static const char *const role[] = { "system", "user", "assistant" };
	struct cq_buf out, err;
	char path[300];
	FILE *f;
	struct hd d;

	ck_assert_int_eq(conv_llamacpp[CONV_LLAMACPP_N - 1].role,
	    CHAT_ROLE_USER);
	cq_start(&d, chat_name(g->kind), 20);
	snprintf(path, sizeof(path), "%s/history.json", d.dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	/* The contents hold no character JSON escapes. */
	fputs("[\n", f);
	for (int i = 0; i < CONV_LLAMACPP_N - 1; i++)
		fprintf(f, "  {\"role\": \"%s\", \"content\": \"%s\"}%s\n",
		    role[conv_llamacpp[i].role], conv_llamacpp[i].content,
		    i < CONV_LLAMACPP_N - 2 ? "," : "");
	fputs("]\n", f);
	ck_assert_int_eq(fclose(f), 0);
	args[1] = d.path;
	args[4] = path;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_msg(strcmp(out.p, g->prompt) == 0, "%s:\n%s\nwant\n%s",
	    chat_name(g->kind), out.p, g->prompt);
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_LOOP("chat", test_chat_history, 0, LLAMACPP_GOLDENS_N);

/* A --history file that is not the expected JSON: exit 2, where and why. */
START_TEST(test_chat_history_bad)
{
	static const struct {
		const char *text, *want;
	} bad[] = {
		{ "", "line 1, column 1: expected '['" },
		{ "[{\"role\": \"user\"}]", "message 1 has no \"content\"" },
		{ "[\n {\"role\": \"bot\", \"content\": \"x\"}]",
		    "line 2, column 3: message 1: role 'bot'" },
		{ "[{\"role\": \"user\", \"content\": \"x\"},]",
		    "line 1, column 35: expected '{'" },
		{ "[{\"role\": \"user\", \"content\": \"\xc0\xaf\"}]",
		    "not UTF-8" },
	};
	const char *args[] = { "--socket", "/nonexistent/cpq-test/sock",
	    "--history", NULL, "x", NULL };
	struct cq_buf out, err;
	char path[300];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cpq-history-%ld.json", tmp_dir(),
	    (long)getpid());
	args[3] = path;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fputs(bad[i].text, f);
		ck_assert_int_eq(fclose(f), 0);
		/* Before connecting: no daemon listens, the file is the error. */
		ck_assert_int_eq(cq_run(args, &out, &err), 2);
		ck_assert_msg(strstr(err.p, bad[i].want) != NULL &&
		    strstr(err.p, path) != NULL, "stderr: %s, want %s", err.p,
		    bad[i].want);
		cq_buf_free(&out);
		cq_buf_free(&err);
	}
	unlink(path);
	args[3] = "/nonexistent/cpq-test/history.json";
	ck_assert_int_eq(cq_run(args, &out, &err), 2);
	ck_assert_ptr_nonnull(strstr(err.p, "No such file"));
	cq_buf_free(&out);
	cq_buf_free(&err);
}
END_TEST
SUITE_TEST("chat", test_chat_history_bad);

/*
 * A model without a recognised template: exit 1 before reading the
 * prompt, naming the key that configures one.  A template the daemon
 * names but cannot apply fails the request, with the daemon's message.
 * cpq itself applies no template.
 */
START_TEST(test_chat_unknown)
{
	const char *a1[] = { "--socket", NULL, "--chat", NULL };
	const char *a2[] = { "--socket", NULL, "--chat", "Hi", NULL };
	const char *a3[] = { "--socket", NULL, "--chat-template", "chatml",
	    "Hi", NULL };
	struct cq_buf out, err;
	struct hd d, d2;

	cq_start(&d, "", 200);
	a1[1] = a3[1] = d.path;
	/* stdin is /dev/null: had cpq read it first, it would say "empty". */
	ck_assert_int_eq(cq_run(a1, &out, &err), 1);
	ck_assert_str_eq(out.p, "");
	ck_assert_ptr_nonnull(strstr(err.p, "'mock-model'"));
	ck_assert_ptr_nonnull(strstr(err.p, "no chat template"));
	ck_assert_ptr_nonnull(strstr(err.p, "chat_template key of cpd.yaml"));
	ck_assert_ptr_null(strstr(err.p, "empty"));
	cq_buf_free(&out);
	cq_buf_free(&err);

	ck_assert_int_eq(cq_run(a3, &out, &err), 2);
	ck_assert_ptr_nonnull(strstr(err.p, "the daemon renders chat "
	    "templates"));
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);

	cq_start(&d2, "falcon3", 200);
	a2[1] = d2.path;
	ck_assert_int_eq(cq_run(a2, &out, &err), 1);
	ck_assert_str_eq(out.p, "");
	ck_assert_msg(strstr(err.p, "chat: model 'mock-model' has no chat "
	    "template cpd knows") != NULL, "stderr: %s", err.p);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d2);
}
END_TEST
SUITE_TEST("chat", test_chat_unknown);

/* ---- failures --------------------------------------------------------- */

START_TEST(test_no_daemon)
{
	const char *a1[] = { "--socket", NULL, "hello", NULL };
	const char *a2[] = { "hello", NULL };
	const char *a3[] = { "--socket", NULL, "hello", NULL };
	struct cq_spawn_opts so = { 0 };
	struct sockaddr_un sa;
	struct cq_buf out = { 0 }, err = { 0 };
	char path[300], msg[400];
	struct cq_proc p;
	int fd;

	snprintf(path, sizeof(path), "%s/cpq-none-%ld", tmp_dir(),
	    (long)getpid());
	unlink(path);
	a1[1] = path;
	ck_assert_int_eq(cq_run(a1, &out, &err), 3);
	snprintf(msg, sizeof(msg), "no daemon listening on %s (start it "
	    "with: cpd -m MODEL)", path);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	ck_assert_str_eq(out.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* $CPD_SOCKET names the socket when --socket does not, and the
	 * message names it (cp_socket_path()); so it does when --socket is
	 * empty, as for cp_connect() and cpd. */
	so.env_socket = path;
	cq_spawn(&p, a2, &so);
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 3);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	cq_buf_free(&out);
	cq_buf_free(&err);
	a3[1] = "";
	cq_spawn(&p, a3, &so);
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 3);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	cq_buf_free(&out);
	cq_buf_free(&err);

	/* A socket file nobody listens on (a dead daemon's). */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_int_eq(cq_run(a1, &out, &err), 3);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	cq_buf_free(&out);
	cq_buf_free(&err);
	unlink(path);
}
END_TEST
SUITE_TEST("failures", test_no_daemon);

/* Bad arguments: exit 2 before connecting (no daemon listens at all). */
static const char *const bad_args[][8] = {
	{ "--temp", "abc", "x" },
	{ "--temp", "-1", "x" },
	{ "--temp", "101", "x" },
	{ "--temp", "nan", "x" },
	{ "--temp", "", "x" },
	{ "--top-p", "0", "x" },
	{ "--top-p", "1.5", "x" },
	{ "--min-p", "2", "x" },
	{ "--top-k", "-1", "x" },
	{ "--top-k", "1048577", "x" },
	{ "--repeat-penalty", "0", "x" },
	{ "--repeat-penalty", "17", "x" },
	{ "--repeat-last-n", "1048577", "x" },
	{ "-n", "ten", "x" },
	{ "-n", "-3", "x" },
	{ "--max-tokens", "2147483648", "x" },
	{ "--seed", "18446744073709551616", "x" },
	{ "--seed", "-1", "x" },
	{ "--seed", "1x", "x" },
	{ "--stop", "", "x" },
	{ "--stop", "1", "--stop", "2", "--stop", "3", "--stop", "4" },	/* + 5 more below */
	{ "--ids", "--json", "x" },
	{ "--prometheus", "x" },
	{ "--stats", "--prometheus", "--json" },
	{ "--info", "a prompt" },
	{ "--stats", "x" },
	{ "--bogus", "x" },
	{ "-x", "x" },
	{ "x", "--temp" },
	{ "" },
	{ "--chat-template", "chatml", "x" },
	{ "--history", "/nonexistent/cpq-test/h.json", "x" },
	{ "--history" },
};

#define N_BAD	((int)(sizeof(bad_args) / sizeof(bad_args[0])))

START_TEST(test_bad_args)
{
	const char *args[32];
	struct cq_buf out, err;
	int n = 0, k;

	args[n++] = "--socket";
	args[n++] = "/nonexistent/cpq-test/sock";
	for (k = 0; k < 8 && bad_args[_i][k] != NULL; k++)
		args[n++] = bad_args[_i][k];
	if (strcmp(args[2], "--stop") == 0 && strcmp(args[3], "1") == 0) {
		/* Nine stop strings, one more than the protocol carries. */
		static const char *const more[] = { "--stop", "5", "--stop",
		    "6", "--stop", "7", "--stop", "8", "--stop", "9", "x" };

		memcpy(args + n, more, sizeof(more));
		n += (int)(sizeof(more) / sizeof(more[0]));
	}
	args[n] = NULL;
	ck_assert_int_eq(cq_run(args, &out, &err), 2);
	ck_assert_str_eq(out.p, "");
	ck_assert_msg(strncmp(err.p, "cpq: ", 5) == 0, "stderr: %s", err.p);
	cq_buf_free(&out);
	cq_buf_free(&err);
}
END_TEST
SUITE_LOOP("failures", test_bad_args, 0, N_BAD);

START_TEST(test_stops_too_long)
{
	char s1[300], s2[300];
	const char *args[] = { "--socket", "/nonexistent/cpq-test/sock",
	    "--stop", s1, "--stop", s2, "x", NULL };
	struct cq_buf out, err;

	/* 256 + 257 bytes with their NULs: 513, one over the limit. */
	memset(s1, 'a', 255);
	s1[255] = '\0';
	memset(s2, 'b', 256);
	s2[256] = '\0';
	ck_assert_int_eq(cq_run(args, &out, &err), 2);
	ck_assert_ptr_nonnull(strstr(err.p, "512"));
	cq_buf_free(&out);
	cq_buf_free(&err);
	/* 512 exactly is fine: then the missing daemon is the problem. */
	s2[255] = '\0';
	ck_assert_int_eq(cq_run(args, &out, &err), 3);
	cq_buf_free(&out);
	cq_buf_free(&err);
}
END_TEST
SUITE_TEST("failures", test_stops_too_long);

START_TEST(test_help)
{
	const char *args[] = { "--help", NULL };
	struct cq_buf out, err;

	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_int_eq(strncmp(out.p, "usage: cpq", 10), 0);
	ck_assert_ptr_nonnull(strstr(out.p, "--prometheus"));
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);
}
END_TEST
SUITE_TEST("failures", test_help);

/* The daemon dies mid-answer: exit 1 with a message, no hang. */
START_TEST(test_daemon_dies)
{
	const char *args[] = { "--socket", NULL, "a long enough prompt for "
	    "the daemon to die in the middle", NULL };
	struct cq_buf out = { 0 }, err = { 0 }, first = { 0 };
	struct cq_proc p;
	struct hd d;

	cq_start(&d, "", 20000);
	args[1] = d.path;
	cq_spawn(&p, args, NULL);
	ck_assert(cq_read_until(p.out, &first, "a l", 5000));
	hd_kill(&d);
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "lost the daemon"));
	cq_buf_free(&out);
	cq_buf_free(&err);
	cq_buf_free(&first);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("failures", test_daemon_dies);

/* ---- interrupts and terminals ------------------------------------------ */

/* SIGINT: the daemon cancels the request (its DONE says so), exit 130. */
START_TEST(test_sigint)
{
	const char *args[] = { "--socket", NULL, "--json", NULL, NULL };
	struct cq_buf out = { 0 }, err = { 0 }, first = { 0 };
	struct cp_wire_stats st;
	struct json *js[512];
	char prompt[3001];
	struct cq_proc p;
	size_t n;
	struct hd d;

	memset(prompt, 'z', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	cq_start(&d, "", 2000);		/* 3000 tokens: 6 s uncancelled */
	args[1] = d.path;
	args[3] = prompt;
	cq_spawn(&p, args, NULL);
	/* Five token lines, then Ctrl-C. */
	ck_assert(cq_read_lines(p.out, &first, 5, 5000));
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 130);
	cq_buf_add(&first, out.p, out.len);
	n = cq_json_lines(first.p, js, 512);
	ck_assert_uint_ge(n, 6);
	ck_assert_str_eq(cq_jstr(js[n - 1], "event"), "done");
	ck_assert_str_eq(cq_jstr(js[n - 1], "finish"), "cancelled");
	ck_assert(cq_jnum(js[n - 1], "n_gen") < 3000);
	ck_assert(cq_jnum(js[n - 1], "n_gen") == n - 1);
	cq_json_lines_free(js, n);

	/* The daemon stopped generating: nothing active, far fewer tokens. */
	ck_assert_int_eq(hd_stats(&d, &st), 0);
	ck_assert_uint_eq(st.requests_active, 0);
	ck_assert_uint_lt(st.tokens_generated, 3000);
	usleep(200000);
	ck_assert_int_eq(hd_stats(&d, &st), 0);
	ck_assert_uint_lt(st.tokens_generated, 3000);
	cq_buf_free(&out);
	cq_buf_free(&err);
	cq_buf_free(&first);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("signals", test_sigint);

#ifndef __SANITIZE_THREAD__
/* SIGINT while cpq still reads its prompt: nothing to cancel, exit 130. */
START_TEST(test_sigint_before_prompt)
{
	const char *args[] = { "--socket", NULL, NULL };
	struct cq_spawn_opts so = { .stdin_pipe = 1 };
	struct cq_buf out = { 0 }, err = { 0 };
	struct cp_wire_stats st;
	struct cq_proc p;
	uint64_t end;
	struct hd d;
	int in;

	cq_start(&d, "", 200);
	args[1] = d.path;
	cq_spawn(&p, args, &so);
	end = clock_ms() + 5000;
	do {
		ck_assert(clock_ms() < end);
		usleep(10000);
		ck_assert_int_eq(hd_stats(&d, &st), 0);
	} while (st.clients < 2);	/* cpq and this check */
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	/* stdin stays open: only the signal can end it. */
	in = p.in;
	p.in = -1;
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 130);
	close(in);
	ck_assert_str_eq(out.p, "");
	ck_assert_int_eq(hd_stats(&d, &st), 0);
	ck_assert_uint_eq(st.requests_total, 0);
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("signals", test_sigint_before_prompt);
#endif

/*
 * On a terminal, a long prompt's wait for its first token is shown on
 * stderr, then cleared.  The daemon is stopped (SIGSTOP) while cpq waits
 * for its prompt on stdin, so the wait is certain to be long.
 */
START_TEST(test_wait_line_on_tty)
{
	const char *args[] = { "--socket", NULL, "--no-newline", NULL };
	struct cq_buf out = { 0 }, err = { 0 }, tty = { 0 };
	struct cq_spawn_opts so = { .stdin_pipe = 1 };
	struct raw_client rc;
	struct cp_wire_stats st;
	char prompt[2001], *slave;
	struct cq_proc p;
	uint64_t end;
	ssize_t k;
	int m, i, fl;
	struct hd d;

	memset(prompt, 'w', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(m, 0);
	ck_assert_int_eq(grantpt(m), 0);
	ck_assert_int_eq(unlockpt(m), 0);
	slave = ptsname(m);
	ck_assert_ptr_nonnull(slave);
	fl = fcntl(m, F_GETFL);
	fcntl(m, F_SETFL, fl | O_NONBLOCK);

	cq_start(&d, "", 50);
	args[1] = d.path;
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	so.err_path = slave;
	cq_spawn(&p, args, &so);
	/* cpq connects first, then reads its prompt. */
	end = clock_ms() + 5000;
	do {
		ck_assert_int_eq(raw_stats(&rc, &st), 0);
		ck_assert(clock_ms() < end);
		usleep(10000);
	} while (st.clients < 2);
	ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
	ck_assert_int_eq(write(p.in, prompt, sizeof(prompt) - 1),
	    (ssize_t)sizeof(prompt) - 1);
	close(p.in);
	p.in = -1;
	ck_assert(cq_read_until(m, &tty, "waiting for the first token", 5000));
	ck_assert_ptr_nonnull(strstr(tty.p, "2000-byte prompt"));
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 0);
	ck_assert_str_eq(out.p, prompt);
	/* The line was erased once the first token came. */
	for (i = 0; i < 20; i++) {
		char b[1024];

		k = read(m, b, sizeof(b));
		if (k > 0)
			cq_buf_add(&tty, b, (size_t)k);
		else
			break;
	}
	ck_assert_ptr_nonnull(strstr(strstr(tty.p, "waiting"), "\r\033[K"));
	close(m);
	raw_close(&rc);
	cq_buf_free(&out);
	cq_buf_free(&err);
	cq_buf_free(&tty);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("signals", test_wait_line_on_tty);

/* A pseudo-terminal: its master (non-blocking); its slave's name in *slave. */
static int
open_pty(char **slave)
{
	int m, fl;

	m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(m, 0);
	ck_assert_int_eq(grantpt(m), 0);
	ck_assert_int_eq(unlockpt(m), 0);
	*slave = ptsname(m);
	ck_assert_ptr_nonnull(*slave);
	fl = fcntl(m, F_GETFL);
	fcntl(m, F_SETFL, fl | O_NONBLOCK);
	return m;
}

/*
 * On a terminal, a long prompt's prefill progress is shown on stderr and
 * updated in place, then erased by the first token: 1024 prompt bytes,
 * 64 a step of 50 ms, so reports 64, 128, ... 1024 over 0.8 s, and the
 * line shows from 0.5 s on.
 */
START_TEST(test_progress_line_on_tty)
{
	const char *args[] = { "--socket", NULL, "-n", "2", NULL, NULL };
	struct cq_spawn_opts so = { 0 };
	struct cq_buf out = { 0 }, err = { 0 }, tty = { 0 };
	char prompt[1025], *slave, *last, *q;
	unsigned done, total;
	struct cq_proc p;
	ssize_t k;
	int m, i, n_lines = 0;
	struct hd d;

	memset(prompt, 'p', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	m = open_pty(&slave);
	cq_start_prefill(&d, 50000, 64);
	args[1] = d.path;
	args[4] = prompt;
	so.err_path = slave;
	cq_spawn(&p, args, &so);
	ck_assert(cq_read_until(m, &tty, "/1024 tokens", 5000));
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 0);
	ck_assert_str_eq(out.p, "pp\n");
	for (i = 0; i < 20; i++) {
		char b[1024];

		k = read(m, b, sizeof(b));
		if (k > 0)
			cq_buf_add(&tty, b, (size_t)k);
		else
			break;
	}
	/* Each line in place: carriage return, text, erase to the end. */
	last = NULL;
	for (q = tty.p; (q = strstr(q, "\rcpq: prefill: ")) != NULL; q++) {
		ck_assert_int_eq(sscanf(q, "\rcpq: prefill: %u/%u tokens",
		    &done, &total), 2);
		ck_assert_uint_eq(total, 1024);
		ck_assert_uint_eq(done % 64, 0);
		ck_assert_uint_gt(done, 0);
		ck_assert_uint_le(done, 1024);
		last = q;
		n_lines++;
	}
	ck_assert_int_ge(n_lines, 1);
	ck_assert_ptr_null(strstr(tty.p, "waiting for the first token"));
	/* The first token erased it. */
	ck_assert(last != NULL && strstr(last + 1, "\r\033[K") != NULL);
	close(m);
	cq_buf_free(&out);
	cq_buf_free(&err);
	cq_buf_free(&tty);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("signals", test_progress_line_on_tty);

/*
 * Reads the terminal's master m into b until needle shows at or after
 * b->p + *from; then *from is the offset just past it.  1, or 0 after
 * timeout_ms.
 */
static int
pty_until(int m, struct cq_buf *b, size_t *from, const char *needle,
    int timeout_ms)
{
	uint64_t end = clock_ms() + (uint64_t)timeout_ms;
	struct pollfd pfd = { .fd = m, .events = POLLIN };
	const char *q;
	char buf[512];
	ssize_t k;

	for (;;) {
		if (b->p != NULL && (q = strstr(b->p + *from, needle)) != NULL) {
			*from = (size_t)(q - b->p) + strlen(needle);
			return 1;
		}
		if (clock_ms() >= end)
			return 0;
		if (poll(&pfd, 1, 50) == 1 && (k = read(m, buf,
		    sizeof(buf))) > 0)
			cq_buf_add(b, buf, (size_t)k);
	}
}

/*
 * --chat on a terminal without a prompt is a conversation: each line a
 * turn whose answer (the mock echoes the ChatML text the daemon renders,
 * so the answer shows what was sent) joins the history; Ctrl-C mid-answer
 * cancels it in the daemon and drops that turn; Ctrl-D ends, status 0.
 */
START_TEST(test_chat_conversation_on_tty)
{
	/* llama_chat_apply_template("chatml") of the turns, as the mock
	 * echoes them (the terminal writes each "\n" as "\r\n"). */
	static const char turn1[] = "<|im_start|>user\r\nHello<|im_end|>\r\n"
	    "<|im_start|>assistant\r\n";
	struct cq_buf b = { 0 };
	struct cp_wire_stats st;
	size_t at = 0, t3;
	char path[300];
	int m, st_exit;
	pid_t pid;
	struct hd d;

	cq_start(&d, "chatml", 5000);
	snprintf(path, sizeof(path), "%s", d.path);
	pid = forkpty(&m, NULL, NULL, NULL);
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl(cq_cpq_path, "cpq", "--socket", path, "--chat",
		    (char *)NULL);
		_exit(127);
	}
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	ck_assert(pty_until(m, &b, &at, ">>> ", 5000));
	ck_assert_int_eq(write(m, "Hello\n", 6), 6);
	ck_assert_msg(pty_until(m, &b, &at, turn1, 10000), "tty: %s", b.p);
	ck_assert(pty_until(m, &b, &at, ">>> ", 5000));

	/* Turn 2 sends turn 1 and its answer first: Ctrl-C inside them. */
	ck_assert_int_eq(write(m, "Again\n", 6), 6);
	ck_assert(pty_until(m, &b, &at, "Again\r\n", 5000));
	ck_assert_msg(pty_until(m, &b, &at, "user\r\nHello", 10000),
	    "tty: %s", b.p);
	ck_assert_int_eq(write(m, "\x03", 1), 1);
	ck_assert(pty_until(m, &b, &at, ">>> ", 5000));
	ck_assert_ptr_null(strstr(b.p + at - 40, "user\r\nAgain"));
	ck_assert_int_eq(hd_stats(&d, &st), 0);
	ck_assert_uint_eq(st.requests_active, 0);

	/* Turn 3: turn 1 and its answer, not the cancelled turn 2. */
	ck_assert_int_eq(write(m, "Bye\n", 4), 4);
	t3 = at;
	ck_assert(pty_until(m, &b, &at, "<|im_start|>user\r\nBye<|im_end|>"
	    "\r\n<|im_start|>assistant\r\n", 10000));
	ck_assert(pty_until(m, &b, &at, ">>> ", 5000));
	{
		const char *a = strstr(b.p + t3, "<|im_start|>user");

		ck_assert_ptr_nonnull(a);
		/* The history: turn 1, its answer (turn 1's text echoed) as
		 * the assistant's turn, then turn 3. */
		ck_assert_msg(strncmp(a, "<|im_start|>user\r\nHello<|im_end|>"
		    "\r\n<|im_start|>assistant\r\n<|im_start|>user\r\n"
		    "Hello<|im_end|>\r\n<|im_start|>assistant\r\n<|im_end|>"
		    "\r\n<|im_start|>user\r\nBye", 128) == 0, "turn 3: %s",
		    a);
		ck_assert_ptr_null(strstr(a, "Again"));
	}
	ck_assert_int_eq(write(m, "\x04", 1), 1);
	ck_assert_int_eq(waitpid(pid, &st_exit, 0), pid);
	ck_assert_msg(WIFEXITED(st_exit) && WEXITSTATUS(st_exit) == 0,
	    "status %d, tty: %s", st_exit, b.p);
	ck_assert_int_eq(hd_stats(&d, &st), 0);
	ck_assert_uint_eq(st.requests_total, 3);
	ck_assert_uint_eq(st.requests_active, 0);
	close(m);
	cq_buf_free(&b);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("signals", test_chat_conversation_on_tty);

SUITE_CASE("stream", 30);
SUITE_CASE("chat", 30);
SUITE_CASE("failures", 30);
SUITE_CASE("signals", 30);

int
main(void)
{
	if (cq_find_cpq() < 0)
		return 77;
	return suite_main(suite_registered("cpq"));
}
