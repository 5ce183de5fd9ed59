/*
 * check_http.c - cpd-http between a real cpd and real HTTP clients: curl
 * (the raw server-sent-event framing, errors and statuses), a socket of
 * our own (a client that hangs up mid-stream) and the official openai npm
 * package in Node (tests/http/openai_client.cjs; skipped when node, npm or
 * the package is missing).
 *
 * cpd serves aidreams260K.gguf rendering chat in Llama 2's format (its
 * greedy answers are text, where ChatML's are newlines); greedy answers
 * through HTTP must equal cpq's for the same messages, and a completion of
 * "Once upon a time" must start with llama.cpp's continuation
 * (../shared/models/REFERENCE.md).  The hang-up case runs on a synthetic
 * model with a context of 4096, long enough that a generation the hang-up
 * failed to cancel would still be running when the stats are read; so do
 * the structured-output cases, whose random weights write JSON only when
 * the daemon's grammar makes them.
 */
#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpclient.h"
#include "lib/aidreams.h"
#include "lib/cpd_proc.h"
#include "lib/json.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

#define OUT_CAP		(1u << 20)
#define MAX_TOK_CANCEL	3000

static char cpd_bin[512], http_bin[512], cpq_bin[512], cpmodel_bin[512];
static char curl_bin[512];
static char *model;
static char synth[600];
static struct cpd dp;

/* cpd-http as a child process, its stderr in a file. */
static struct {
	pid_t pid;
	char log[320];
	int port;
} hp;

static void
http_up(const char *const *extra)
{
	const char *argv[24];
	char buf[512];
	size_t n = 0;
	FILE *f;
	int i, fd;

	argv[n++] = http_bin;
	argv[n++] = "--socket";
	argv[n++] = dp.sock;
	argv[n++] = "--port";
	argv[n++] = "0";
	for (i = 0; extra != NULL && extra[i] != NULL && n < 22; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	snprintf(hp.log, sizeof(hp.log), "%s/http.log", dp.dir);
	hp.pid = fork();
	ck_assert_int_ge(hp.pid, 0);
	if (hp.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open(hp.log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(126);
		execv(http_bin, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	hp.port = 0;
	for (i = 0; i < 200 && hp.port == 0; i++) {
		usleep(20000);
		if ((f = fopen(hp.log, "r")) == NULL)
			continue;
		while (fgets(buf, sizeof(buf), f) != NULL)
			if (strstr(buf, "listening on") != NULL)
				sscanf(strstr(buf, "port ") + 5, "%d", &hp.port);
		fclose(f);
	}
	ck_assert_msg(hp.port > 0, "cpd-http did not start (%s)", hp.log);
}

/* SIGTERM: cpd-http must exit 0. */
static void
http_down(void)
{
	int st;

	if (hp.pid <= 0)
		return;
	kill(hp.pid, SIGTERM);
	ck_assert_int_eq(waitpid(hp.pid, &st, 0), hp.pid);
	hp.pid = 0;
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "cpd-http exit status %d", st);
}

static void
up_chat(void)
{
	const char *args[] = { "--max-batch-tokens", "32", "--chat-template",
	    "llama2", NULL };

	cpd_start_bin(&dp, cpd_bin, model, args);
	http_up(NULL);
}

static void
up_small_body(void)
{
	const char *args[] = { "--chat-template", "chatml", NULL };
	const char *h[] = { "--max-body", "4096", "--max-messages", "4", NULL };

	cpd_start_bin(&dp, cpd_bin, model, args);
	http_up(h);
}

#define KEY "sk-cpd-test-0123456789"

static void
up_key(void)
{
	char path[400];
	const char *h[] = { "--api-key-file", path, NULL };
	FILE *f;

	cpd_start_bin(&dp, cpd_bin, model, NULL);
	snprintf(path, sizeof(path), "%s/key", dp.dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs(KEY "\n", f);
	fclose(f);
	http_up(h);
}

/* The synthetic model, chat in ChatML: the structured-output cases. */
static void
up_grammar(void)
{
	const char *args[] = { "--chat-template", "chatml", NULL };

	cpd_start_bin(&dp, cpd_bin, synth, args);
	http_up(NULL);
}

static void
up_synth(void)
{
	cpd_start_bin(&dp, cpd_bin, synth, NULL);
	http_up(NULL);
}

/* One connection per user: a second HTTP request meets cpd's limit. */
static void
up_quota(void)
{
	const char *args[] = { "--per-uid-max-clients", "1", NULL };

	cpd_start_bin(&dp, cpd_bin, synth, args);
	http_up(NULL);
}

static void
down(void)
{
	http_down();
	cpd_cleanup(&dp);
}

/*
 * curl -X method path with body (NULL: none; "@file" a file), one extra
 * header (NULL: none); the response body into out, the status returned.
 */
static int
curl(char *out, const char *method, const char *path, const char *body,
    const char *header)
{
	const char *argv[20];
	char url[256], *nl;
	size_t n = 0;
	int status;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", hp.port, path);
	argv[n++] = curl_bin;
	argv[n++] = "-sS";
	argv[n++] = "-N";
	argv[n++] = "-w";
	argv[n++] = "\n%{http_code}";
	argv[n++] = "-X";
	argv[n++] = method;
	argv[n++] = "-H";
	argv[n++] = "Content-Type: application/json";
	if (header != NULL) {
		argv[n++] = "-H";
		argv[n++] = header;
	}
	if (body != NULL) {
		argv[n++] = "--data-binary";
		argv[n++] = body;
	}
	argv[n++] = url;
	argv[n] = NULL;
	ck_assert_int_eq(prog_capture(argv, out, OUT_CAP), 0);
	ck_assert_ptr_nonnull(nl = strrchr(out, '\n'));
	status = atoi(nl + 1);
	*nl = '\0';
	return status;
}

static struct json *
parse(const char *text)
{
	char err[128];
	struct json *j = json_parse(text, strlen(text), err, sizeof(err));

	ck_assert_msg(j != NULL, "not JSON (%s): %.300s", err, text);
	return j;
}

/* The string at obj.k1[i].k2...: keys, with "#" taking element 0. */
static const struct json *
dig(const struct json *j, const char *const *keys)
{
	for (; j != NULL && *keys != NULL; keys++)
		j = strcmp(*keys, "#") == 0 ? json_at(j, 0) : json_get(j, *keys);
	return j;
}

#define DIG(j, ...) dig((j), (const char *const []){ __VA_ARGS__, NULL })

/* The status and the error object's param of a request answered with one. */
static void
expect_error(int want, const char *param, const char *method,
    const char *path, const char *body)
{
	char *out = malloc(OUT_CAP);
	const struct json *p;
	struct json *j;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(curl(out, method, path, body, NULL), want);
	j = parse(out);
	ck_assert_ptr_nonnull(DIG(j, "error", "message"));
	ck_assert_ptr_nonnull(DIG(j, "error", "type"));
	p = DIG(j, "error", "param");
	if (param == NULL)
		ck_assert(p == NULL || p->type == JSON_NULL);
	else
		ck_assert_str_eq(p->str, param);
	json_free(j);
	free(out);
}

static const char chat_body[] =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Tell a "
    "story.\"},{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
    "\"temperature\":0,\"max_tokens\":24%s}";

/* cpq --chat's greedy answer to chat_body's messages (stdout not a tty,
 * --no-newline: the text alone). */
static void
cpq_answer(char *out, size_t cap)
{
	const char *argv[] = { cpq_bin, "--socket", dp.sock, "--temp", "0",
	    "-n", "24", "--no-newline", "--system", "Tell a story.",
	    "Once upon a time", NULL };

	ck_assert_int_eq(prog_capture(argv, out, cap), 0);
	ck_assert_uint_gt(strlen(out), 0);
}

/* ---- chat ----------------------------------------------------------- */

START_TEST(test_chat_equals_cpq)
{
	char *out = malloc(OUT_CAP), body[512], ref[4096];
	const struct json *c;
	struct json *j;

	ck_assert_ptr_nonnull(out);
	cpq_answer(ref, sizeof(ref));
	snprintf(body, sizeof(body), chat_body, "");
	ck_assert_int_eq(curl(out, "POST", "/v1/chat/completions", body, NULL),
	    200);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "object")->str, "chat.completion");
	ck_assert_str_eq(DIG(j, "choices", "#", "message", "role")->str,
	    "assistant");
	c = DIG(j, "choices", "#", "message", "content");
	ck_assert_str_eq(c->str, ref);
	ck_assert_str_eq(DIG(j, "choices", "#", "finish_reason")->str,
	    "length");
	ck_assert_int_eq((int)DIG(j, "usage", "completion_tokens")->num, 24);
	ck_assert_int_gt((int)DIG(j, "usage", "prompt_tokens")->num, 0);
	ck_assert_ptr_nonnull(DIG(j, "usage", "prompt_tokens_details",
	    "cached_tokens"));
	ck_assert(strncmp(DIG(j, "id")->str, "chatcmpl-", 9) == 0);
	json_free(j);
	free(out);
}
END_TEST
SUITE_TEST("http", test_chat_equals_cpq);

/*
 * logprobs with top_logprobs 3, greedy: each sampled token has 3
 * alternatives, most likely first, and the first is the token itself
 * (greedy picks it): same text, bytes and logprob.
 */
START_TEST(test_chat_top_logprobs)
{
	char *out = malloc(OUT_CAP), body[512];
	const struct json *c, *it, *top, *a, *b;
	struct json *j;
	size_t i, k;

	ck_assert_ptr_nonnull(out);
	snprintf(body, sizeof(body), chat_body,
	    ",\"logprobs\":true,\"top_logprobs\":3");
	ck_assert_int_eq(curl(out, "POST", "/v1/chat/completions", body, NULL),
	    200);
	j = parse(out);
	c = DIG(j, "choices", "#", "logprobs", "content");
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_gt(c->n, 0);
	ck_assert_uint_le(c->n, 24);
	for (i = 0; i < c->n; i++) {
		it = json_at(c, i);
		top = json_get(it, "top_logprobs");
		ck_assert_ptr_nonnull(top);
		ck_assert_uint_eq(top->n, 3);
		a = json_at(top, 0);
		ck_assert_str_eq(json_get(a, "token")->str,
		    json_get(it, "token")->str);
		ck_assert_double_eq_tol(json_get(a, "logprob")->num,
		    json_get(it, "logprob")->num, 1e-6);
		ck_assert_uint_eq(json_get(a, "bytes")->n,
		    json_get(it, "bytes")->n);
		for (k = 0; k < json_get(it, "bytes")->n; k++)
			ck_assert_double_eq(json_at(json_get(a, "bytes"),
			    k)->num, json_at(json_get(it, "bytes"), k)->num);
		for (k = 1; k < top->n; k++) {
			a = json_at(top, k - 1);
			b = json_at(top, k);
			ck_assert_double_le(json_get(b, "logprob")->num,
			    json_get(a, "logprob")->num);
			ck_assert_ptr_nonnull(json_get(b, "token"));
			ck_assert_ptr_nonnull(json_get(b, "bytes"));
		}
	}
	json_free(j);
	free(out);
}
END_TEST
SUITE_TEST("http", test_chat_top_logprobs);

/*
 * The raw stream: every event "data: JSON\n\n", a first chunk with the
 * role, deltas that join to the non-streamed answer, a finish chunk, the
 * usage chunk asked for, and "data: [DONE]\n\n" last.
 */
START_TEST(test_chat_stream_framing)
{
	char *out = malloc(OUT_CAP), body[512], ref[4096], text[4096] = "";
	char *ev, *end;
	int n = 0, finished = 0, usage = 0;
	const struct json *d;

	ck_assert_ptr_nonnull(out);
	cpq_answer(ref, sizeof(ref));
	snprintf(body, sizeof(body), chat_body, ",\"stream\":true,"
	    "\"stream_options\":{\"include_usage\":true},\"logprobs\":true,"
	    "\"top_logprobs\":2");
	ck_assert_int_eq(curl(out, "POST", "/v1/chat/completions", body, NULL),
	    200);
	for (ev = out; *ev != '\0'; ev = end + 2, n++) {
		ck_assert_msg(strncmp(ev, "data: ", 6) == 0, "event %d: %.80s",
		    n, ev);
		ck_assert_ptr_nonnull(end = strstr(ev, "\n\n"));
		*end = '\0';
		if (strcmp(ev + 6, "[DONE]") == 0) {
			ck_assert_str_eq(end + 2, "");
			break;
		}
		struct json *j = parse(ev + 6);

		ck_assert_str_eq(DIG(j, "object")->str,
		    "chat.completion.chunk");
		if (n == 0)
			ck_assert_str_eq(DIG(j, "choices", "#", "delta",
			    "role")->str, "assistant");
		if ((d = DIG(j, "choices", "#", "delta", "content")) != NULL)
			strncat(text, d->str, sizeof(text) - strlen(text) - 1);
		if (d != NULL && d->len > 0) {
			ck_assert_ptr_nonnull(DIG(j, "choices", "#", "logprobs",
			    "content", "#", "logprob"));
			ck_assert_uint_eq(DIG(j, "choices", "#", "logprobs",
			    "content", "#", "top_logprobs")->n, 2);
		}
		if ((d = DIG(j, "choices", "#", "finish_reason")) != NULL &&
		    d->type == JSON_STRING) {
			ck_assert_str_eq(d->str, "length");
			finished++;
		}
		if ((d = DIG(j, "usage", "completion_tokens")) != NULL) {
			ck_assert_int_eq((int)d->num, 24);
			ck_assert_uint_eq(DIG(j, "choices")->n, 0);
			ck_assert_int_eq(finished, 1);
			usage++;
		}
		json_free(j);
	}
	ck_assert_int_eq(finished, 1);
	ck_assert_int_eq(usage, 1);
	ck_assert_str_eq(text, ref);
	free(out);
}
END_TEST
SUITE_TEST("http", test_chat_stream_framing);

/* /v1/completions: llama.cpp's greedy continuation, whole and streamed. */
START_TEST(test_completion_golden)
{
	char *out = malloc(OUT_CAP), *p;
	const char *body = "{\"prompt\":\"" AID_PROMPT "\",\"temperature\":0,"
	    "\"max_tokens\":32}";
	const char *sbody = "{\"prompt\":[\"" AID_PROMPT "\"],\"temperature\":0,"
	    "\"max_tokens\":32,\"stream\":true}";
	struct json *j;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(curl(out, "POST", "/v1/completions", body, NULL), 200);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "object")->str, "text_completion");
	p = DIG(j, "choices", "#", "text")->str;
	ck_assert_uint_gt(strlen(p), 0);
	ck_assert_msg(strncmp(p, aid_ref_text, strlen(p)) == 0, "got '%s'", p);
	ck_assert_int_eq((int)DIG(j, "usage", "prompt_tokens")->num,
	    AID_N_PROMPT);
	json_free(j);
	ck_assert_int_eq(curl(out, "POST", "/v1/completions", sbody, NULL),
	    200);
	ck_assert_ptr_nonnull(strstr(out, "\"finish_reason\":\"length\""));
	ck_assert_ptr_nonnull(p = strstr(out, "data: [DONE]\n\n"));
	ck_assert_str_eq(p + 14, "");
	free(out);
}
END_TEST
SUITE_TEST("http", test_completion_golden);

/*
 * /v1/completions with logprobs 2, greedy: OpenAI's legacy shape, one
 * entry per token in each array, the tokens joining to the text at their
 * text_offset, each token the likeliest of its 2 alternatives.
 */
START_TEST(test_completion_logprobs)
{
	char *out = malloc(OUT_CAP), joined[4096] = "";
	const char *body = "{\"prompt\":\"" AID_PROMPT "\",\"temperature\":0,"
	    "\"max_tokens\":12,\"logprobs\":2}";
	const struct json *lp, *toks, *lps, *tops, *offs, *alt;
	struct json *j;
	size_t i;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(curl(out, "POST", "/v1/completions", body, NULL), 200);
	j = parse(out);
	ck_assert_ptr_nonnull(lp = DIG(j, "choices", "#", "logprobs"));
	toks = json_get(lp, "tokens");
	lps = json_get(lp, "token_logprobs");
	tops = json_get(lp, "top_logprobs");
	offs = json_get(lp, "text_offset");
	ck_assert_ptr_nonnull(toks);
	ck_assert_uint_gt(toks->n, 0);
	ck_assert_uint_eq(lps->n, toks->n);
	ck_assert_uint_eq(tops->n, toks->n);
	ck_assert_uint_eq(offs->n, toks->n);
	for (i = 0; i < toks->n; i++) {
		ck_assert_double_eq(json_at(offs, i)->num,
		    (double)strlen(joined));
		strncat(joined, json_at(toks, i)->str,
		    sizeof(joined) - strlen(joined) - 1);
		alt = json_at(tops, i);
		ck_assert_uint_ge(alt->n, 1);
		ck_assert_uint_le(alt->n, 2);
		ck_assert_ptr_nonnull(json_get(alt, json_at(toks, i)->str));
		ck_assert_double_eq_tol(json_get(alt,
		    json_at(toks, i)->str)->num, json_at(lps, i)->num, 1e-6);
	}
	ck_assert_str_eq(joined, DIG(j, "choices", "#", "text")->str);
	json_free(j);
	free(out);
}
END_TEST
SUITE_TEST("http", test_completion_logprobs);

START_TEST(test_models_health_metrics)
{
	char *out = malloc(OUT_CAP);
	struct json *j;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(curl(out, "GET", "/v1/models", NULL, NULL), 200);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "object")->str, "list");
	ck_assert_str_eq(DIG(j, "data", "#", "object")->str, "model");
	ck_assert_ptr_nonnull(DIG(j, "data", "#", "id"));
	json_free(j);
	ck_assert_int_eq(curl(out, "GET", "/health", NULL, NULL), 200);
	ck_assert_str_eq(out, "{\"status\":\"ok\"}");
	ck_assert_int_eq(curl(out, "GET", "/metrics", NULL, NULL), 200);
	ck_assert_ptr_nonnull(strstr(out, "# TYPE cpd_requests_total counter\n"
	    "cpd_requests_total "));
	ck_assert_ptr_nonnull(strstr(out, "cpd_time_to_first_token_seconds_"
	    "bucket{le=\"+Inf\"}"));
	free(out);
}
END_TEST
SUITE_TEST("http", test_models_health_metrics);

/* ---- errors: the documented status, and cpd-http keeps serving ------- */

/* A chat field and a value cpd-http refuses (400, param naming it). */
static const struct {
	const char *param, *value;
} bad_fields[] = {
	{ "temperature", "\"hot\"" },
	{ "max_tokens", "-3" },
	{ "n", "2" },
	{ "top_logprobs", "2" },	/* without logprobs: true */
	{ "stop", "[\"a\", 3]" },
	{ "tools", "[]" },
	{ "stream", "1" },
	{ "presence_penalty", "0.5" },
	{ "response_format", "\"json\"" },
	{ "response_format", "{\"type\": \"xml\"}" },
	{ "response_format", "{\"type\": \"json_schema\"}" },
	{ "response_format", "{\"type\": \"json_schema\", \"json_schema\": "
	    "{\"name\": \"x\"}}" },
	{ "response_format", "{\"type\": \"json_schema\", \"json_schema\": "
	    "{\"schema\": true}}" },
	{ "response_format", "{\"type\": \"json_object\", \"x\": 1}" },
	{ "grammar", "3" },
	{ "grammar", "\"\"" },
	{ "json_schema", "[]" },
};

START_TEST(test_bad_requests)
{
	static const char cc[] = "/v1/chat/completions";
	char *out = malloc(OUT_CAP), body[256];
	size_t i;

	ck_assert_ptr_nonnull(out);
	expect_error(400, NULL, "POST", cc, "{\"messages\": [");
	expect_error(400, NULL, "POST", cc, "[1, 2]");
	expect_error(400, "messages", "POST", cc, "{\"messages\": \"hi\"}");
	expect_error(400, "messages", "POST", cc, "{\"messages\": []}");
	expect_error(400, "messages", "POST", cc,
	    "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}");
	for (i = 0; i < sizeof(bad_fields) / sizeof(bad_fields[0]); i++) {
		snprintf(body, sizeof(body), "{\"messages\": [{\"role\": "
		    "\"user\", \"content\": \"x\"}], \"%s\": %s}",
		    bad_fields[i].param, bad_fields[i].value);
		expect_error(400, bad_fields[i].param, "POST", cc, body);
	}
	expect_error(400, "top_logprobs", "POST", cc, "{\"messages\": "
	    "[{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, "
	    "\"top_logprobs\": 21}");
	expect_error(400, "logprobs", "POST", "/v1/completions",
	    "{\"prompt\": \"x\", \"logprobs\": 21}");
	expect_error(400, "json_schema", "POST", "/v1/completions",
	    "{\"prompt\": \"x\", \"response_format\": {\"type\": "
	    "\"json_object\"}, \"json_schema\": {}}");
	expect_error(400, "prompt", "POST", "/v1/completions",
	    "{\"prompt\": {\"a\": 1}}");
	expect_error(404, NULL, "GET", "/v1/nothing", NULL);
	expect_error(404, NULL, "POST", "/", "{}");
	expect_error(405, NULL, "GET", cc, NULL);
	ck_assert_int_eq(curl(out, "GET", "/health", NULL, NULL), 200);
	free(out);
}
END_TEST
SUITE_TEST("http", test_bad_requests);

/* A body over --max-body is 413 (announced or not); too many messages 400. */
START_TEST(test_limits)
{
	char *out = malloc(OUT_CAP), path[400], big[6000];
	FILE *f;

	ck_assert_ptr_nonnull(out);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	snprintf(path, sizeof(path), "@%s/big.json", dp.dir);
	ck_assert_ptr_nonnull(f = fopen(path + 1, "w"));
	fprintf(f, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
	    big);
	fclose(f);
	expect_error(413, NULL, "POST", "/v1/chat/completions", path);
	ck_assert_int_eq(curl(out, "POST", "/v1/chat/completions", path,
	    "Transfer-Encoding: chunked"), 413);
	expect_error(400, "messages", "POST", "/v1/chat/completions",
	    "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
	    "{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\","
	    "\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\"},"
	    "{\"role\":\"user\",\"content\":\"a\"}]}");
	ck_assert_int_eq(curl(out, "POST", "/v1/chat/completions",
	    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
	    "\"text\":\"Once\"}]}],\"max_tokens\":2}", NULL), 200);
	free(out);
}
END_TEST
SUITE_TEST("limits", test_limits);

/* With cpd gone: 503 from /health, a completion and the models. */
START_TEST(test_daemon_gone)
{
	char *out = malloc(OUT_CAP);
	struct json *j;

	ck_assert_ptr_nonnull(out);
	cpd_stop(&dp);
	expect_error(503, NULL, "GET", "/health", NULL);
	expect_error(503, NULL, "POST", "/v1/completions", "{\"prompt\":\"x\"}");
	ck_assert_int_eq(curl(out, "GET", "/v1/models", NULL, NULL), 503);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "error", "code")->str, "daemon_unavailable");
	json_free(j);
	free(out);
}
END_TEST
SUITE_TEST("limits", test_daemon_gone);

/* --api-key-file: 401 without the key or with another, 200 with it. */
START_TEST(test_api_key)
{
	static const char *const wrong[] = { NULL, "Authorization: Bearer x",
	    "Authorization: Bearer " KEY "0", "Authorization: Basic " KEY,
	    "Authorization: Bearer sk-cpd-test-012345678" };
	char *out = malloc(OUT_CAP);
	struct json *j;
	size_t i;

	ck_assert_ptr_nonnull(out);
	for (i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		ck_assert_int_eq(curl(out, "GET", "/v1/models", NULL,
		    wrong[i]), 401);
		j = parse(out);
		ck_assert_str_eq(DIG(j, "error", "code")->str,
		    "invalid_api_key");
		json_free(j);
	}
	ck_assert_int_eq(curl(out, "POST", "/v1/completions",
	    "{\"prompt\":\"x\",\"max_tokens\":1}", NULL), 401);
	ck_assert_int_eq(curl(out, "GET", "/v1/models", NULL,
	    "Authorization: Bearer " KEY), 200);
	ck_assert_int_eq(curl(out, "POST", "/v1/completions",
	    "{\"prompt\":\"x\",\"max_tokens\":1}",
	    "Authorization: Bearer " KEY), 200);
	ck_assert_int_eq(curl(out, "GET", "/health", NULL, NULL), 200);
	free(out);
}
END_TEST
SUITE_TEST("key", test_api_key);

/* ---- structured output (response_format, grammar, json_schema) -------- */

/*
 * A random-weight model writes nothing like JSON unconstrained: what the
 * grammar cases get back parses (tests/lib/json.c, not the daemon's
 * grammar code) only if cpd enforced the constraint.  The schema's strings
 * and integers are bounded and extra members refused, so its objects end
 * well within max_tokens; the daemon ends the request there ("stop").
 */
#define PERSON	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":" \
	"\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\"},\"ok\":" \
	"{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"ok\"]," \
	"\"additionalProperties\":false}"

static const char gchat[] = "{\"messages\":[{\"role\":\"user\",\"content\":"
    "\"Who are you?\"}],\"max_tokens\":200,\"seed\":%d%s}";
static const char gtext[] = "{\"prompt\":\"Who are you?\",\"max_tokens\":200,"
    "\"seed\":%d%s}";
/* The same with room for a random model's long strings, for any object. */
static const char gchat_long[] = "{\"messages\":[{\"role\":\"user\","
    "\"content\":\"Who are you?\"}],\"max_tokens\":3000,\"seed\":%d%s}";
static const char gtext_long[] = "{\"prompt\":\"Who are you?\","
    "\"max_tokens\":3000,\"seed\":%d%s}";

/*
 * POSTs the body fmt makes of seed and extra to path, wants 200 and
 * finish_reason stop; the answer's text (malloc'd).
 */
static char *
constrained(const char *path, const char *fmt, int seed, const char *extra)
{
	char *out = malloc(OUT_CAP), *text, body[1024];
	const struct json *t;
	struct json *j;
	int chat = strstr(path, "chat") != NULL;

	ck_assert_ptr_nonnull(out);
	snprintf(body, sizeof(body), fmt, seed, extra);
	ck_assert_int_eq(curl(out, "POST", path, body, NULL), 200);
	j = parse(out);
	t = chat ? DIG(j, "choices", "#", "message", "content") :
	    DIG(j, "choices", "#", "text");
	ck_assert_ptr_nonnull(t);
	ck_assert_msg(strcmp(DIG(j, "choices", "#", "finish_reason")->str,
	    "stop") == 0, "seed %d: not complete: %s", seed, t->str);
	ck_assert_int_lt((int)DIG(j, "usage", "completion_tokens")->num,
	    strstr(fmt, "3000") != NULL ? 3000 : 200);
	ck_assert_ptr_nonnull(text = strdup(t->str));
	json_free(j);
	free(out);
	return text;
}

/* The text parses as one JSON object. */
static void
expect_object(const char *text)
{
	struct json *j = parse(text);

	ck_assert_msg(j->type == JSON_OBJECT, "not an object: %s", text);
	json_free(j);
}

/* json_object: a JSON object (OpenAI's JSON mode), whole text; chat and
 * completions. */
START_TEST(test_json_object)
{
	const char *rf = ",\"response_format\":{\"type\":\"json_object\"}";
	char *text;
	int seed;

	for (seed = 1; seed <= 3; seed++) {
		text = constrained("/v1/chat/completions", gchat_long, seed, rf);
		expect_object(text);
		free(text);
		text = constrained("/v1/completions", gtext_long, seed, rf);
		expect_object(text);
		free(text);
	}
}
END_TEST
SUITE_TEST("grammar", test_json_object);

/* An object with exactly PERSON's members, of its types, in its order. */
static void
expect_person(const char *text)
{
	static const char *const keys[] = { "name", "age", "ok" };
	struct json *j = parse(text);
	const struct json *v;
	size_t i;

	ck_assert_msg(j->type == JSON_OBJECT, "not an object: %s", text);
	ck_assert_uint_eq(j->n, 3);
	for (i = 0; i < 3; i++)
		ck_assert_str_eq(j->keys[i], keys[i]);
	v = json_get(j, "name");
	ck_assert_int_eq(v->type, JSON_STRING);
	ck_assert_uint_le(v->len, 12 * 4);	/* 12 characters of UTF-8 */
	v = json_get(j, "age");
	ck_assert_int_eq(v->type, JSON_NUMBER);
	ck_assert_msg(v->num == (double)(long long)v->num, "age %g", v->num);
	ck_assert_int_eq(json_get(j, "ok")->type, JSON_BOOL);
	json_free(j);
}

/*
 * response_format json_schema, greedy and sampled, and llama-server's
 * json_schema: PERSON's objects; llama-server's grammar: its words.
 */
START_TEST(test_json_schema)
{
	const char *rf = ",\"response_format\":{\"type\":\"json_schema\","
	    "\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":"
	    PERSON "}}";
	const char *greedy = ",\"temperature\":0,\"response_format\":{\"type\":"
	    "\"json_schema\",\"json_schema\":{\"name\":\"person\",\"schema\":"
	    PERSON "}}";
	const char *ls = ",\"json_schema\":" PERSON;
	const char *gbnf = ",\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") "
	    "\\\".\\\"\"";
	char *text;
	int seed;

	for (seed = 1; seed <= 4; seed++) {
		text = constrained("/v1/chat/completions", gchat, seed, rf);
		expect_person(text);
		free(text);
		text = constrained("/v1/completions", gtext, seed, ls);
		expect_person(text);
		free(text);
		text = constrained("/v1/completions", gtext, seed, gbnf);
		ck_assert_msg(strcmp(text, "yes.") == 0 ||
		    strcmp(text, "no.") == 0, "got '%s'", text);
		free(text);
	}
	text = constrained("/v1/chat/completions", gchat, 0, greedy);
	expect_person(text);
	free(text);
}
END_TEST
SUITE_TEST("grammar", test_json_schema);

/* Streamed json_object: the deltas join to one JSON object. */
START_TEST(test_json_object_stream)
{
	static char text[1 << 16];
	char *out = malloc(OUT_CAP), body[512], *ev, *end;
	const struct json *d;
	int seed, finished;

	ck_assert_ptr_nonnull(out);
	for (seed = 1; seed <= 3; seed++) {
		snprintf(body, sizeof(body), gchat_long, seed,
		    ",\"stream\":true,"
		    "\"response_format\":{\"type\":\"json_object\"}");
		ck_assert_int_eq(curl(out, "POST", "/v1/chat/completions",
		    body, NULL), 200);
		text[0] = '\0';
		finished = 0;
		for (ev = out; strncmp(ev, "data: [DONE]", 12) != 0;
		    ev = end + 2) {
			ck_assert_msg(strncmp(ev, "data: ", 6) == 0, "%.80s",
			    ev);
			ck_assert_ptr_nonnull(end = strstr(ev, "\n\n"));
			*end = '\0';
			struct json *j = parse(ev + 6);

			if ((d = DIG(j, "choices", "#", "delta", "content")) !=
			    NULL)
				strncat(text, d->str, sizeof(text) -
				    strlen(text) - 1);
			if ((d = DIG(j, "choices", "#", "finish_reason")) !=
			    NULL && d->type == JSON_STRING) {
				ck_assert_str_eq(d->str, "stop");
				finished++;
			}
			json_free(j);
		}
		ck_assert_int_eq(finished, 1);
		ck_assert_uint_gt(strlen(text), 0);
		expect_object(text);
	}
	free(out);
}
END_TEST
SUITE_TEST("grammar", test_json_object_stream);

/*
 * A request and the 400 it gets from the daemon's grammar compiler: param
 * names the field, the message what (a schema path, a rule).
 */
static void
expect_grammar_error(const char *path, const char *body, const char *param,
    const char *msg)
{
	char *out = malloc(OUT_CAP);
	struct json *j;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(curl(out, "POST", path, body, NULL), 400);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "error", "type")->str,
	    "invalid_request_error");
	ck_assert_str_eq(DIG(j, "error", "param")->str, param);
	ck_assert_msg(strstr(DIG(j, "error", "message")->str, msg) != NULL,
	    "message: %s", DIG(j, "error", "message")->str);
	json_free(j);
	free(out);
}

START_TEST(test_grammar_errors)
{
	static const char bad[] = "{\"type\":\"object\",\"properties\":{"
	    "\"age\":{\"type\":\"int\"}}}";
	char body[1024], rf[512], *out = malloc(OUT_CAP);

	ck_assert_ptr_nonnull(out);
	snprintf(rf, sizeof(rf), ",\"response_format\":{\"type\":"
	    "\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":%s}}",
	    bad);
	snprintf(body, sizeof(body), gchat, 1, rf);
	expect_grammar_error("/v1/chat/completions", body, "response_format",
	    "response_format.json_schema.schema: #/properties/age/type: ");
	/* Streamed: the status comes before any event. */
	snprintf(rf + strlen(rf), sizeof(rf) - strlen(rf), ",\"stream\":true");
	snprintf(body, sizeof(body), gchat, 1, rf);
	expect_grammar_error("/v1/chat/completions", body, "response_format",
	    "#/properties/age/type: ");
	snprintf(rf, sizeof(rf), ",\"json_schema\":%s", bad);
	snprintf(body, sizeof(body), gtext, 1, rf);
	expect_grammar_error("/v1/completions", body, "json_schema",
	    "json_schema: #/properties/age/type: ");
	snprintf(body, sizeof(body), gtext, 1,
	    ",\"grammar\":\"root ::= item+\"");
	expect_grammar_error("/v1/completions", body, "grammar", "'item'");
	/* cpd-http serves on. */
	snprintf(body, sizeof(body), gtext, 1, "");
	ck_assert_int_eq(curl(out, "POST", "/v1/completions", body, NULL),
	    200);
	free(out);
}
END_TEST
SUITE_TEST("grammar", test_grammar_errors);

/* ---- a client that hangs up mid-stream -------------------------------- */

static int
tcp_connect(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* A libcpclient connection straight to cpd, as the test's own user. */
static struct cp_client *
direct_client(void)
{
	struct cp_connect_opts o;
	struct cp_client *c = NULL;

	cp_connect_opts_init(&o);
	o.socket_path = dp.sock;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	return c;
}

static void
stats(struct cp_stats *st)
{
	struct cp_client *c = direct_client();

	ck_assert_int_eq(cp_stats(c, st), 0);
	cp_close(c);
}

START_TEST(test_hangup_cancels)
{
	char req[512], body[256], buf[4096];
	struct cp_stats st;
	size_t got = 0;
	ssize_t n;
	int fd, i;

	snprintf(body, sizeof(body), "{\"prompt\":\"Once upon a time\","
	    "\"max_tokens\":%d,\"temperature\":0,\"stream\":true}",
	    MAX_TOK_CANCEL);
	snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\n"
	    "Host: x\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	fd = tcp_connect(hp.port);
	ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	/* A few tokens' events, then hang up. */
	while (got < 2000 && (n = read(fd, buf, sizeof(buf))) > 0)
		got += (size_t)n;
	ck_assert_uint_ge(got, 2000);
	close(fd);
	for (i = 0; i < 100; i++) {
		stats(&st);
		if (st.requests_active == 0)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.requests_active, 0);
	ck_assert_uint_lt(st.tokens_generated, MAX_TOK_CANCEL);
	/* Nothing ran on after the hang-up. */
	usleep(200000);
	stats(&st);
	ck_assert_uint_lt(st.tokens_generated, MAX_TOK_CANCEL);
}
END_TEST
SUITE_TEST("hangup", test_hangup_cancels);

/*
 * While another client of the same user holds the one connection cpd
 * allows it, a request through cpd-http is answered 429 with OpenAI's
 * rate-limit error; once that client hangs up, requests pass again.  The
 * connection is held directly, not by a stream through cpd-http: a
 * stream can finish (or be absorbed by the socket buffers) before the
 * second request arrives on a fast machine.
 */
START_TEST(test_user_limit_429)
{
	const char *small = "{\"prompt\":\"Once\",\"max_tokens\":2}";
	char *out = malloc(OUT_CAP);
	struct cp_client *c;
	struct json *j;
	int i, st = 0;

	ck_assert_ptr_nonnull(out);
	c = direct_client();
	ck_assert_int_eq(curl(out, "POST", "/v1/completions", small, NULL),
	    429);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "error", "code")->str, "rate_limit_exceeded");
	ck_assert_str_eq(DIG(j, "error", "type")->str, "rate_limit_error");
	json_free(j);
	/* Still refused while the connection stays. */
	ck_assert_int_eq(curl(out, "POST", "/v1/completions", small, NULL),
	    429);
	cp_close(c);
	for (i = 0; i < 100 && st != 200; i++) {
		usleep(20000);
		st = curl(out, "POST", "/v1/completions", small, NULL);
	}
	ck_assert_int_eq(st, 200);
	free(out);
}
END_TEST
SUITE_TEST("quota", test_user_limit_429);

/* ---- the openai npm package ------------------------------------------ */

static char node_bin[512];

START_TEST(test_openai_node)
{
	char url[64], ref[4096], *out = malloc(OUT_CAP);
	const char *argv[] = { node_bin, CP_HTTP_SCRIPT, url, NULL };
	struct json *j;

	ck_assert_ptr_nonnull(out);
	cpq_answer(ref, sizeof(ref));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", hp.port);
	ck_assert_int_eq(prog_capture(argv, out, OUT_CAP), 0);
	j = parse(out);
	ck_assert_str_eq(DIG(j, "chat")->str, ref);
	ck_assert_str_eq(DIG(j, "streamed")->str, ref);
	ck_assert_uint_gt(DIG(j, "completion")->len, 0);
	ck_assert(strncmp(DIG(j, "completion")->str, aid_ref_text,
	    DIG(j, "completion")->len) == 0);
	json_free(j);
	free(out);
}
END_TEST
SUITE_TEST("openai", test_openai_node);

SUITE_FIXTURE("http", 120, up_chat, down, true);
SUITE_FIXTURE("openai", 120, up_chat, down, true);
SUITE_FIXTURE("limits", 120, up_small_body, down, true);
SUITE_FIXTURE("key", 120, up_key, down, true);
SUITE_FIXTURE("hangup", 120, up_synth, down, true);
SUITE_FIXTURE("grammar", 600, up_grammar, down, true);	/* TSan */
SUITE_FIXTURE("quota", 120, up_quota, down, true);

/* A synthetic model with a long context, for the hang-up case. */
static int
make_synth(void)
{
	const char *argv[] = { cpmodel_bin, "synth", "-o", synth, "--layers",
	    "4", "--embd", "256", "--heads", "8", "--kv-heads", "4", "--ff",
	    "768", "--vocab", "512", "--ctx", "4096", "--seed", "1", NULL };
	pid_t pid;
	int st;

	snprintf(synth, sizeof(synth), "%s/check_http-synth-%d.gguf",
	    tmp_dir(), (int)getpid());
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		if (fd >= 0)
			dup2(fd, 1);
		execv(cpmodel_bin, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/*
 * node, and the openai package in CP_NODE_DIR (npm installs it there when
 * missing): 0, or -1 after saying why not.
 */
static int
node_ready(void)
{
	const char *argv[] = { NULL, "install", "--prefix", CP_NODE_DIR,
	    "--no-audit", "--no-fund", "--loglevel=error", "openai", NULL };
	char npm[512], mod[600];
	pid_t pid;
	int st;

	if (prog_in_path(node_bin, sizeof(node_bin), "node") != 0) {
		printf("check_http: node is absent: the openai case skipped\n");
		return -1;
	}
	snprintf(mod, sizeof(mod), "%s/node_modules", CP_NODE_DIR);
	setenv("NODE_PATH", mod, 1);
	snprintf(mod, sizeof(mod), "%s/node_modules/openai/package.json",
	    CP_NODE_DIR);
	if (access(mod, R_OK) == 0)
		return 0;
	if (prog_in_path(npm, sizeof(npm), "npm") != 0) {
		printf("check_http: npm is absent: the openai case skipped\n");
		return -1;
	}
	argv[0] = npm;
	if ((pid = fork()) == 0) {
		execv(npm, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0 || access(mod, R_OK) != 0) {
		printf("check_http: npm install openai failed: the openai case "
		    "skipped\n");
		return -1;
	}
	return 0;
}

int
main(void)
{
	int nfail, node;

	if ((model = cpd_need("check_http", cpd_bin, cpmodel_bin,
	    sizeof(cpd_bin), "aidreams260K.gguf")) == NULL)
		return 77;
	if (prog_find(http_bin, sizeof(http_bin), "cpd-http", NULL) != 0 ||
	    prog_find(cpq_bin, sizeof(cpq_bin), "cpq", "CPQ") != 0) {
		printf("check_http: skipped, cpd-http or cpq is not built\n");
		return 77;
	}
	if (prog_in_path(curl_bin, sizeof(curl_bin), "curl") != 0) {
		printf("check_http: skipped, no curl\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	if (make_synth() != 0) {
		printf("check_http: cpmodel synth failed\n");
		return 1;
	}
	if ((node = node_ready()) != 0)
		suite_case_skip("openai");
	nfail = suite_main_some(suite_registered("http"), node == 0,
	    "check_http: passed without the openai case\n");
	unlink(synth);
	free(model);
	return nfail;
}
