/*
 * check_chat_daemon.c - what a client asks of a real cpd beyond a plain
 * prompt: max_tokens as a cap (the context's room ends a request with
 * CP_DONE_CONTEXT, strict mode refuses up front), on aidreams260K.gguf,
 * whose context is 128 tokens.
 *
 * Golden values are llama.cpp's (../shared/models/REFERENCE.md): the
 * greedy continuation of "Once upon a time" on aidreams260K.gguf, a prompt
 * of 13 tokens, the first 64 ids.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpclient.h"
#include "lib/aidreams.h"
#include "lib/cpd_harness.h"
#include "lib/cpd_proc.h"
#include "lib/fixtures.h"
#include "lib/prog.h"
#include "lib/suite.h"

static char cpd_bin[512];
static char *model;
static struct cpd dp;

/* What one request produced, up to its DONE or ERROR. */
struct gen {
	int32_t ids[4096];
	int n_ids;
	char text[16384];
	size_t text_len;
	int type;		/* CP_EVENT_DONE or CP_EVENT_ERROR */
	int finish;
	int error;
	uint32_t n_prompt, n_gen;
};

static void
daemon_up(void)
{
	const char *args[] = { "--max-batch-tokens", "32", NULL };

	cpd_start_bin(&dp, cpd_bin, model, args);
}

/* The same daemon rendering chat requests as ChatML. */
static void
daemon_up_chatml(void)
{
	const char *args[] = { "--max-batch-tokens", "32", "--chat-template",
	    "chatml", NULL };

	cpd_start_bin(&dp, cpd_bin, model, args);
}

static void
daemon_down(void)
{
	cpd_cleanup(&dp);
}

static struct cp_client *
client(void)
{
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	int r;

	cp_connect_opts_init(&o);
	o.socket_path = dp.sock;
	r = cp_connect(&o, &c);
	ck_assert_msg(r == 0, "cp_connect: %s", cp_strerror(r));
	return c;
}

/* Reads request id's events (the only request in flight) into g. */
static void
collect(struct cp_client *c, int id, struct gen *g)
{
	struct cp_event ev;
	int r;

	memset(g, 0, sizeof(*g));
	while ((r = cp_next_event(c, &ev, 20000)) == 0) {
		ck_assert_int_eq(ev.req_id, id);
		ck_assert_uint_eq(ev.size, sizeof(ev));
		if (ev.type == CP_EVENT_PROGRESS)
			continue;
		if (ev.type == CP_EVENT_TOKEN && ev.token >= 0) {
			ck_assert_int_lt(g->n_ids, 4096);
			g->ids[g->n_ids++] = ev.token;
		}
		if (ev.type != CP_EVENT_ERROR) {
			ck_assert_uint_lt(g->text_len + ev.text_len,
			    sizeof(g->text));
			memcpy(g->text + g->text_len, ev.text, ev.text_len);
			g->text_len += ev.text_len;
		}
		if (ev.type == CP_EVENT_DONE || ev.type == CP_EVENT_ERROR) {
			g->type = ev.type;
			g->finish = ev.finish;
			g->error = ev.error;
			g->n_prompt = ev.n_prompt;
			g->n_gen = ev.n_gen;
			if (ev.type == CP_EVENT_ERROR)
				snprintf(g->text, sizeof(g->text), "%s",
				    ev.text);
			return;
		}
	}
	ck_abort_msg("cp_next_event: %s", cp_strerror(r));
}

/* Greedy parameters with max_tokens n. */
static void
greedy(struct cp_params *p, uint32_t n)
{
	cp_params_init(p);
	p->temperature = 0;
	p->max_tokens = n;
}

/* ---- max_tokens is a cap ---------------------------------------------- */

/*
 * max_tokens past the room the context leaves: the request runs to the
 * last position and ends with CP_DONE_CONTEXT; its first 64 tokens are
 * llama.cpp's.  With max_tokens 0 the same.
 */
START_TEST(test_cap_ends_at_context)
{
	static const uint32_t caps[] = { 1000, AID_N_CTX, 0 };
	struct cp_client *c = client();
	struct cp_params p;
	struct gen *g = malloc(sizeof(*g));

	ck_assert_ptr_nonnull(g);
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		greedy(&p, caps[i]);
		collect(c, cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p),
		    g);
		ck_assert_int_eq(g->type, CP_EVENT_DONE);
		ck_assert_int_eq(g->finish, CP_DONE_CONTEXT);
		ck_assert_uint_eq(g->n_prompt, AID_N_PROMPT);
		ck_assert_uint_eq(g->n_gen, AID_N_CTX - AID_N_PROMPT);
		ck_assert_int_eq(g->n_ids, AID_N_CTX - AID_N_PROMPT);
		for (int k = 0; k < 64; k++)
			ck_assert_int_eq(g->ids[k], aid_ref_ids[k]);
		ck_assert_uint_ge(g->text_len, strlen(aid_ref_text));
		ck_assert(memcmp(g->text, aid_ref_text, strlen(aid_ref_text)) == 0);
	}
	/* Exactly the room: max_tokens ends it. */
	greedy(&p, AID_N_CTX - AID_N_PROMPT);
	collect(c, cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p), g);
	ck_assert_int_eq(g->finish, CP_DONE_LENGTH);
	ck_assert_uint_eq(g->n_gen, AID_N_CTX - AID_N_PROMPT);
	free(g);
	cp_close(c);
}
END_TEST
SUITE_TEST("limits", test_cap_ends_at_context);

/* Strict mode refuses what does not fit, and still runs what does. */
START_TEST(test_strict_refuses_up_front)
{
	struct cp_client *c = client();
	struct cp_params p;
	struct gen *g = malloc(sizeof(*g));

	ck_assert_ptr_nonnull(g);
	greedy(&p, AID_N_CTX - AID_N_PROMPT + 1);
	p.strict = 1;
	collect(c, cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_ERROR);
	ck_assert_int_eq(g->error, -E2BIG);
	ck_assert_msg(strstr(g->text, "prompt of 13 tokens plus max_tokens "
	    "116 exceeds the context of 128 tokens") != NULL, "error: %s",
	    g->text);
	ck_assert_uint_eq(g->n_gen, 0);
	greedy(&p, 64);
	p.strict = 1;
	collect(c, cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p), g);
	ck_assert_int_eq(g->finish, CP_DONE_LENGTH);
	ck_assert_int_eq(g->n_ids, 64);
	for (int k = 0; k < 64; k++)
		ck_assert_int_eq(g->ids[k], aid_ref_ids[k]);
	free(g);
	cp_close(c);
}
END_TEST
SUITE_TEST("limits", test_strict_refuses_up_front);

/*
 * A prompt that alone does not fit is refused, naming both numbers, and
 * so is one that fills the context exactly; the daemon serves on.
 */
START_TEST(test_prompt_past_context_refused)
{
	struct cp_client *c = client();
	struct cp_params p;
	struct gen *g = malloc(sizeof(*g));
	int32_t ids[AID_N_CTX + 1];
	char msg[128];

	ck_assert_ptr_nonnull(g);
	for (int i = 0; i <= AID_N_CTX; i++)
		ids[i] = aid_ref_ids[i % 64];
	greedy(&p, 4);
	collect(c, cp_submit_tokens(c, ids, AID_N_CTX + 1, &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_ERROR);
	ck_assert_int_eq(g->error, -E2BIG);
	snprintf(msg, sizeof(msg), "prompt of %d tokens exceeds the context "
	    "of %d", AID_N_CTX + 1, AID_N_CTX);
	ck_assert_msg(strstr(g->text, msg) != NULL, "error: %s", g->text);
	collect(c, cp_submit_tokens(c, ids, AID_N_CTX, &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_ERROR);
	ck_assert_int_eq(g->error, -E2BIG);
	/* One position left: one token, then the context is full. */
	collect(c, cp_submit_tokens(c, ids, AID_N_CTX - 1, &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_DONE);
	ck_assert_int_eq(g->finish, CP_DONE_CONTEXT);
	ck_assert_uint_eq(g->n_gen, 1);
	free(g);
	cp_close(c);
}
END_TEST
SUITE_TEST("limits", test_prompt_past_context_refused);

/*
 * Runs argv (the daemon's socket in CPD_SOCKET) with exit status 0; its
 * stdout and stderr together, in the order written, into text.
 */
static void
run_client(const char *const *argv, char *text, size_t cap)
{
	static char sockenv[400];
	char out[600];
	FILE *f;
	size_t n;

	snprintf(sockenv, sizeof(sockenv), "CPD_SOCKET=%s", dp.sock);
	ck_assert_int_eq(putenv(sockenv), 0);
	snprintf(out, sizeof(out), "%s/client.out", dp.dir);
	ck_assert_int_eq(prog_runv(argv, out), 0);
	f = fopen(out, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(text, 1, cap - 1, f);
	fclose(f);
	text[n] = '\0';
	unlink(out);
}

/*
 * The libcpclient(3) example (max_tokens 128) on a context of 128 runs
 * unchanged: it prints the greedy text and the counts.  _i 1: the same
 * built against the first header and linked with this library.
 */
START_TEST(test_manual_example_runs)
{
	const char *argv[] = { _i == 0 ? CP_EXAMPLE : CP_BUILD_TESTS
	    "/cpclient_example_v0", AID_PROMPT, NULL };
	char text[2048];

	run_client(argv, text, sizeof(text));
	ck_assert_msg(strstr(text, "\n" AID_PROMPT) == NULL &&
	    strstr(text, aid_ref_text) != NULL, "output: %.300s", text);
	ck_assert_msg(strstr(text, "13 prompt tokens, 115 generated\n") !=
	    NULL, "output: %.300s", text);
}
END_TEST
SUITE_LOOP("limits", test_manual_example_runs, 0, 2);

/* cpq --json names the new finish reason. */
START_TEST(test_cpq_json_context)
{
	static char text[65536];
	char cpq[600], out[600];
	const char *argv[] = { cpq, "--socket", dp.sock, "--temp", "0",
	    "-n", "1000", "--json", AID_PROMPT, NULL };
	FILE *f;
	size_t n;

	ck_assert_int_eq(prog_find(cpq, sizeof(cpq), "cpq", "CPQ"), 0);
	snprintf(out, sizeof(out), "%s/cpq.out", dp.dir);
	ck_assert_int_eq(prog_runv(argv, out), 0);
	f = fopen(out, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	ck_assert_msg(strstr(text, "\"finish\":\"context\"") != NULL,
	    "output: %.300s", text);
	unlink(out);
}
END_TEST
SUITE_TEST("limits", test_cpq_json_context);

/* ---- sized structures ------------------------------------------------- */

/*
 * A program of the first interface (tests/abi/abi_v0.c) against this
 * library: defaults, model information, stop strings and logprobs reach
 * it as they did.  Greedy ids are llama.cpp's, up to the stop string.
 */
START_TEST(test_v0_program_runs)
{
	const char *argv[] = { CP_BUILD_TESTS "/abi_v0", dp.sock, AID_PROMPT,
	    "whispers", NULL };
	static char text[16384];
	char *line, *save = NULL;
	int n = 0, fin = -1;
	unsigned np = 0, ng = 0;

	run_client(argv, text, sizeof(text));
	ck_assert_msg(strncmp(text, "n_ctx 128 vocab 512 max_requests ", 33)
	    == 0, "output: %.300s", text);
	ck_assert_msg(strstr(text, "\ndefaults ok\n") != NULL, "output: %.300s",
	    text);
	for (line = strtok_r(text, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		int id;
		double lp;

		if (sscanf(line, "done %d %u %u", &fin, &np, &ng) == 3)
			break;
		if (sscanf(line, "%d %lf", &id, &lp) != 2)
			continue;
		ck_assert_int_lt(n, AID_N_REF);
		ck_assert_int_eq(id, aid_ref_ids[n]);
		ck_assert(lp < 0 && lp > -20);
		n++;
	}
	/* "... Classification whispers" ends it: a stop, before token 64 */
	ck_assert_int_eq(fin, CP_DONE_STOP);
	ck_assert_uint_eq(np, AID_N_PROMPT);
	ck_assert_int_gt(n, 50);
	ck_assert_int_lt(n, AID_N_REF);
	ck_assert_uint_eq(ng, (unsigned)n);
}
END_TEST
SUITE_TEST("limits", test_v0_program_runs);

/*
 * Sizes: filled in by the init functions and by the calls that fill a
 * structure; a structure shorter than the first sized one is refused; a
 * longer one (a newer header) is read with its unknown tail as 0 and
 * filled only as far as the library knows.
 */
START_TEST(test_sizes)
{
	struct {
		struct cp_model_info mi;
		unsigned char tail[16];
	} big;
	struct {
		struct cp_params p;
		unsigned char tail[16];
	} bigp;
	struct cp_client *c = client();
	struct cp_model_info mi;
	struct cp_params p;
	struct gen *g = malloc(sizeof(*g));
	size_t k;

	ck_assert_ptr_nonnull(g);
	memset(&mi, 0xaa, sizeof(mi));
	ck_assert_int_eq(cp_model_info(c, &mi), 0);
	ck_assert_uint_eq(mi.size, sizeof(mi));
	ck_assert_uint_eq(mi.n_ctx, AID_N_CTX);
	memset(&big, 0xaa, sizeof(big));
	ck_assert_int_eq(cp_model_info_v1(c, &big.mi, sizeof(big)), 0);
	ck_assert_uint_eq(big.mi.size, sizeof(mi));
	ck_assert_uint_eq(big.mi.n_ctx, AID_N_CTX);
	for (k = 0; k < sizeof(big.tail); k++)
		ck_assert_uint_eq(big.tail[k], 0xaa);
	ck_assert_int_eq(cp_model_info_v1(c, &mi, 8), -EINVAL);

	greedy(&p, 8);
	ck_assert_uint_eq(p.size, sizeof(p));
	p.size = 8;
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EINVAL);
	memset(&bigp, 0, sizeof(bigp));
	cp_params_init_v1(&bigp.p, sizeof(bigp));
	ck_assert_uint_eq(bigp.p.size, sizeof(p));
	bigp.p.size = sizeof(bigp);
	bigp.p.temperature = 0;
	bigp.p.max_tokens = 8;
	collect(c, cp_submit_v1(c, AID_PROMPT, strlen(AID_PROMPT), &bigp.p),
	    g);
	ck_assert_int_eq(g->finish, CP_DONE_LENGTH);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(g->ids[i], aid_ref_ids[i]);
	free(g);
	cp_close(c);
}
END_TEST
SUITE_TEST("limits", test_sizes);

/* ---- chat ------------------------------------------------------------ */

#define MSG(r, t)	{ .role = CP_CHAT_ ## r, .content = t, \
	.len = sizeof(t) - 1 }

/*
 * A conversation sent as messages gets the greedy ids of its ChatML text
 * sent as a prompt (the text written by ChatML's rule, as llama.cpp's
 * llama_chat_apply_template("chatml") writes it), with and without the
 * generation prompt.
 */
START_TEST(test_chat_is_its_text)
{
	static const struct cp_message conv[] = {
		MSG(SYSTEM, "Be"), MSG(USER, "Hi"), MSG(ASSISTANT, "Yo"),
	};
	static const char *const text[2] = {
		"<|im_start|>system\nBe<|im_end|>\n<|im_start|>user\nHi"
		"<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
		"<|im_start|>assistant\n",
		"<|im_start|>system\nBe<|im_end|>\n<|im_start|>user\nHi"
		"<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
	};
	struct cp_client *c = client();
	struct cp_model_info mi;
	struct cp_params p;
	struct gen *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(cp_model_info(c, &mi), 0);
	ck_assert_str_eq(mi.chat_template, "chatml");
	for (int i = 0; i < 2; i++) {
		greedy(&p, 8);
		p.no_generation_prompt = i;
		collect(c, cp_submit_chat(c, conv, 3, &p), a);
		collect(c, cp_submit(c, text[i], strlen(text[i]), &p), b);
		ck_assert_msg(a->type == CP_EVENT_DONE, "error: %s", a->text);
		ck_assert_uint_gt(a->n_prompt, 40);
		ck_assert_uint_eq(a->n_prompt, b->n_prompt);
		ck_assert_int_eq(a->n_ids, 8);
		ck_assert_int_eq(b->n_ids, 8);
		for (int k = 0; k < 8; k++)
			ck_assert_int_eq(a->ids[k], b->ids[k]);
	}
	free(a);
	free(b);
	cp_close(c);
}
END_TEST
SUITE_TEST("chat", test_chat_is_its_text);

/*
 * Bad message lists are refused with -EINVAL before anything is sent;
 * the connection serves on.
 */
START_TEST(test_chat_refused)
{
	static const struct cp_message good[] = { MSG(USER, "Hi") };
	struct cp_message bad[2] = { MSG(USER, "Hi"), MSG(USER, "x") };
	struct cp_client *c = client();
	struct cp_params p;
	struct gen *g = malloc(sizeof(*g));

	ck_assert_ptr_nonnull(g);
	greedy(&p, 4);
	ck_assert_int_eq(cp_submit_chat(c, good, 0, &p), -EINVAL);
	ck_assert_int_eq(cp_submit_chat(c, NULL, 1, &p), -EINVAL);
	bad[1].role = 4;
	ck_assert_int_eq(cp_submit_chat(c, bad, 2, &p), -EINVAL);
	bad[1].role = -1;
	ck_assert_int_eq(cp_submit_chat(c, bad, 2, &p), -EINVAL);
	bad[1].role = CP_CHAT_TOOL;
	bad[1].content = "\xc0\xaf";		/* overlong '/' */
	bad[1].len = 2;
	ck_assert_int_eq(cp_submit_chat(c, bad, 2, &p), -EINVAL);
	bad[1].content = "\xed\xa0\x80";	/* a surrogate */
	bad[1].len = 3;
	ck_assert_int_eq(cp_submit_chat(c, bad, 2, &p), -EINVAL);
	bad[1].content = NULL;
	ck_assert_int_eq(cp_submit_chat(c, bad, 2, &p), -EINVAL);
	bad[1].len = 0;
	collect(c, cp_submit_chat(c, bad, 2, &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_DONE);
	collect(c, cp_submit_chat(c, good, 1, &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_DONE);
	ck_assert_int_eq(g->n_ids, 4);
	free(g);
	cp_close(c);
}
END_TEST
SUITE_TEST("chat", test_chat_refused);

/*
 * aidreams260K has no chat template cpd knows: a chat request fails
 * naming the model and the key, the daemon serves on.  A name that is no
 * format stops cpd at start-up.
 */
START_TEST(test_chat_without_template)
{
	const char *argv[] = { cpd_bin, "-m", model, "--socket", "/nonexistent",
	    "--chat-template", "falcon9", NULL };
	static const struct cp_message m[] = { MSG(USER, "Hi") };
	struct cp_client *c = client();
	struct cp_model_info mi;
	struct cp_params p;
	struct gen *g = malloc(sizeof(*g));

	ck_assert_ptr_nonnull(g);
	ck_assert_int_eq(cp_model_info(c, &mi), 0);
	ck_assert_str_eq(mi.chat_template, "");
	greedy(&p, 4);
	collect(c, cp_submit_chat(c, m, 1, &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_ERROR);
	ck_assert_int_eq(g->error, -EOPNOTSUPP);
	ck_assert_msg(strstr(g->text, "aidreams260K.gguf'") != NULL &&
	    strstr(g->text, "chat_template") != NULL, "error: %s", g->text);
	collect(c, cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p), g);
	ck_assert_int_eq(g->type, CP_EVENT_DONE);
	for (int k = 0; k < 4; k++)
		ck_assert_int_eq(g->ids[k], aid_ref_ids[k]);
	ck_assert_int_eq(prog_runv(argv, NULL), 78);	/* EX_CONFIG */
	free(g);
	cp_close(c);
}
END_TEST
SUITE_TEST("limits", test_chat_without_template);

/* A chat block's bytes, built as a hostile client would write them. */
struct blk {
	uint32_t w[16];
	size_t len;
};

/*
 * Chat blocks that break each rule of cp_proto.h (CHAT BLOCK), written
 * straight into the ring (not through libcpclient, which would refuse to
 * send them), and the words of the error each must get.
 */
static const struct {
	struct blk b;
	const char *want;
} hostile[] = {
	{ { { 1 }, 4 }, "block of 4 bytes, shorter than its header" },
	{ { { 0, 1 }, 8 }, "0 messages, expected 1..65536" },
	{ { { 65537, 1 }, 8 }, "65537 messages, expected 1..65536" },
	{ { { 1, 0x3 }, 16 }, "unknown flags 0x2" },
	{ { { 3, 1, 1, 0 }, 16 }, "3 messages do not fit a block of 16 bytes" },
	{ { { 1, 1, 9, 0 }, 16 }, "message 0 has role 9, expected 0..3" },
	{ { { 1, 1, 1, 0xfffffff0u, 0x41414141 }, 20 },
	    "message 0 of 4294967280 bytes runs past the end" },
	{ { { 1, 1, 1, 5, 0x41414141, 0x41 }, 20 }, "message 0 of 5 bytes "
	    "runs past the end" },
	{ { { 1, 1, 1, 1, 0x00410041 }, 20 }, "message 0: padding byte not "
	    "zero" },
	{ { { 1, 1, 1, 2, 0xafc0 }, 20 }, "message 0 is not valid UTF-8 at "
	    "byte 0" },
	{ { { 1, 1, 1, 3, 0x80a0ed }, 20 }, "message 0 is not valid UTF-8" },
	{ { { 1, 1, 1, 1, 0x41, 0 }, 24 }, "4 bytes after the last of 1 "
	    "messages" },
	{ { { 2, 1, 1, 5, 0x41414141, 0x41 }, 24 }, "message 1 of 2 starts "
	    "past the end of the 24-byte block" },
};

#define N_HOSTILE	(sizeof(hostile) / sizeof(hostile[0]))

/*
 * Each hostile block gets an ERROR (-EINVAL) naming the rule it breaks;
 * the connection that sent it goes on (a good block on it runs), and so
 * does another client's request running all the while.
 */
START_TEST(test_chat_hostile_blocks)
{
	/* {1 message, GEN} user "Hi": the good block. */
	static const struct blk good = { { 1, 1, 1, 2, 0x6948 }, 20 };
	struct cp_client *c = client();
	struct raw_client rc;
	struct cp_wire_stats st;
	struct cp_event ev;
	struct cp_cqe last;
	struct cp_params p;
	char msg[512];
	uint32_t id = 1;
	int other, r;

	greedy(&p, AID_N_CTX - AID_N_PROMPT);
	other = cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p);
	ck_assert_int_gt(other, 0);
	ck_assert_int_eq(raw_connect(dp.sock, &rc, 0, 0, 0), 0);
	for (size_t i = 0; i < N_HOSTILE; i++, id++) {
		ck_assert_int_eq(raw_submit_bytes(&rc, id, CP_SQF_CHAT,
		    hostile[i].b.w, hostile[i].b.len, 4), 0);
		r = raw_collect_end(&rc, id, NULL, 0, 10000, &last, msg,
		    sizeof(msg));
		ck_assert_msg(r == CP_EV_ERROR, "block %zu: event %d", i, r);
		ck_assert_int_eq(last.error, -EINVAL);
		ck_assert_uint_eq(last.n_gen, 0);
		ck_assert_msg(strncmp(msg, "chat: ", 6) == 0 &&
		    strstr(msg, hostile[i].want) != NULL, "block %zu: '%s', "
		    "want '%s'", i, msg, hostile[i].want);
	}
	ck_assert_int_eq(raw_submit_bytes(&rc, id, CP_SQF_CHAT, good.w,
	    good.len, 4), 0);
	r = raw_collect_end(&rc, id, NULL, 0, 10000, &last, msg, sizeof(msg));
	ck_assert_msg(r == CP_EV_DONE, "good block: event %d: %s", r, msg);
	ck_assert_uint_eq(last.n_gen, 4);
	ck_assert_int_eq(raw_wait_closed(&rc, 0), 0);
	ck_assert_int_eq(raw_stats(&rc, &st), 0);
	ck_assert_uint_eq(st.protocol_errors, 0);
	raw_close(&rc);
	/* The other client's request ran to its end meanwhile. */
	while ((r = cp_next_event(c, &ev, 20000)) == 0 &&
	    ev.type == CP_EVENT_TOKEN)
		;
	ck_assert_int_eq(r, 0);
	ck_assert_int_eq(ev.req_id, other);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_uint_eq(ev.n_gen, AID_N_CTX - AID_N_PROMPT);
	cp_close(c);
}
END_TEST
SUITE_TEST("chat", test_chat_hostile_blocks);

SUITE_FIXTURE("limits", 120, daemon_up, daemon_down, true);
SUITE_FIXTURE("chat", 120, daemon_up_chatml, daemon_down, true);

int
main(void)
{
	int nfail;

	if (prog_find(cpd_bin, sizeof(cpd_bin), "cpd", NULL) != 0) {
		printf("check_chat_daemon: skipped, %s is not built\n",
		    cpd_bin);
		return 77;
	}
	if ((model = fx_need("aidreams260K.gguf")) == NULL)
		return 77;
	nfail = suite_main(suite_registered("chat_daemon"));
	free(model);
	return nfail;
}
