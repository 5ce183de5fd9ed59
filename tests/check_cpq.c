/*
 * check_cpq.c - cpq, the shell tool, as a user runs it: the program
 * ($CPQ, else $BUILD/bin/cpq, else build/bin/cpq) in a child process,
 * talking to a daemon process (daemon/server.c with the mock engine of
 * tests/lib, see cpd_harness.h).
 *
 * The mock engine echoes a text prompt one byte per token (token id = the
 * byte's value, logprob of the n-th token -(n + 1) / 8), stops after the
 * prompt (finish "stop"), after max_tokens ("length") or when the output
 * ends with a stop string (the stop string included), and fails prompts
 * that start with "!error".  So the expected output of every request is
 * the prompt, or a prefix of it, worked out by hand.  The expected chat
 * prompts are llama.cpp's llama_chat_apply_template() output, as in
 * check_chat.c.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cp_proto.h"
#include "lib/cpd_harness.h"
#include "lib/json.h"

Suite *cpq_suite(void);

static char cpq_path[4096];

#define T_RUN_MS	20000	/* longest a cpq run may take */

static uint64_t
ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- daemons ----------------------------------------------------------- */

static void
cfg_init(struct srv_config *c, const char *chat_template)
{
	srv_config_defaults(c);
	c->handshake_timeout_ms = 2000;
	snprintf(c->model.name, sizeof(c->model.name), "mock-model");
	snprintf(c->model.arch, sizeof(c->model.arch), "llama");
	snprintf(c->model.backend, sizeof(c->model.backend), "cpu");
	snprintf(c->model.chat_template, sizeof(c->model.chat_template), "%s",
	    chat_template);
	c->model.n_ctx = 4096;
	c->model.n_vocab = 256;
	c->model.n_embd = 64;
	c->model.n_layer = 4;
	c->model.n_head = 8;
	c->model.n_head_kv = 4;
	c->model.bos = 1;
	c->model.eos = 2;
	c->model.n_params = 260000;
}

/* A daemon with chat template tmpl and mock steps of step_us. */
static void
start(struct hd *d, const char *tmpl, int step_us)
{
	struct srv_config cfg;
	struct mock_opts mo;

	cfg_init(&cfg, tmpl);
	mock_opts_default(&mo);
	mo.step_us = step_us;
	ck_assert_int_eq(hd_start(d, &cfg, &mo), 0);
}

/* A daemon whose mock computes chunk prompt bytes a step of step_us. */
static void
start_prefill(struct hd *d, int step_us, uint32_t chunk)
{
	struct srv_config cfg;
	struct mock_opts mo;

	cfg_init(&cfg, "");
	mock_opts_default(&mo);
	mo.step_us = step_us;
	mo.prefill_chunk = chunk;
	ck_assert_int_eq(hd_start(d, &cfg, &mo), 0);
}

/* The daemon's counters, through a connection of the test's own. */
static void
stats(const struct hd *d, struct cp_wire_stats *st)
{
	struct raw_client rc;

	ck_assert_int_eq(raw_connect(d->path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(raw_stats(&rc, st), 0);
	raw_close(&rc);
}

/* ---- running cpq ----------------------------------------------------- */

struct buf {
	char *p;
	size_t len, cap;
};

static void
buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void
buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

struct proc {
	pid_t pid;
	int in, out, err;	/* our ends of its stdin, stdout, stderr */
};

struct spawn_opts {
	int stdin_pipe;		/* stdin from p->in, else /dev/null */
	const char *env_socket;	/* CPD_SOCKET for the child, else unset */
	const char *err_path;	/* the child's stderr (a tty), else a pipe */
};

/* Starts cpq with args (NULL-terminated, without argv[0]). */
static void
spawn(struct proc *p, const char *const *args, const struct spawn_opts *so)
{
	int in[2] = { -1, -1 }, out[2], err[2] = { -1, -1 }, n, fd;
	const char *argv[64];

	for (n = 0; args[n] != NULL; n++)
		;
	ck_assert_int_lt(n, 62);
	argv[0] = cpq_path;
	memcpy(argv + 1, args, (size_t)(n + 1) * sizeof(*argv));
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	if (so == NULL || so->err_path == NULL)
		ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
	if (so != NULL && so->stdin_pipe)
		ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	fflush(NULL);
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		fd = in[0] >= 0 ? in[0] : open("/dev/null", O_RDONLY);
		dup2(fd, 0);
		dup2(out[1], 1);
		if (so != NULL && so->err_path != NULL) {
			fd = open(so->err_path, O_RDWR | O_NOCTTY);
			if (fd < 0)
				_exit(120);
			dup2(fd, 2);
		} else {
			dup2(err[1], 2);
		}
		unsetenv("XDG_RUNTIME_DIR");
		if (so != NULL && so->env_socket != NULL)
			setenv("CPD_SOCKET", so->env_socket, 1);
		else
			unsetenv("CPD_SOCKET");
		signal(SIGINT, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		execv(cpq_path, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	p->out = out[0];
	p->err = err[0];
	if (err[1] >= 0)
		close(err[1]);
	p->in = in[1];
	if (in[0] >= 0)
		close(in[0]);
}

/*
 * Feeds in[0..in_len) to its stdin (then closes it), reads stdout and
 * stderr to their ends, reaps it.  Returns its exit status, or 1000 +
 * the signal that killed it.
 */
static int
finish(struct proc *p, const char *in, size_t in_len, struct buf *out,
    struct buf *err)
{
	uint64_t end = ms_now() + T_RUN_MS;
	size_t in_off = 0;
	char b[4096];
	int st;

	if (p->in >= 0 && in == NULL) {
		close(p->in);
		p->in = -1;
	}
	while (p->out >= 0 || p->err >= 0 || p->in >= 0) {
		struct pollfd pf[3];
		int n = 0, i;
		ssize_t k;

		ck_assert_msg(ms_now() < end, "cpq did not finish");
		if (p->out >= 0)
			pf[n++] = (struct pollfd){ p->out, POLLIN, 0 };
		if (p->err >= 0)
			pf[n++] = (struct pollfd){ p->err, POLLIN, 0 };
		if (p->in >= 0)
			pf[n++] = (struct pollfd){ p->in, POLLOUT, 0 };
		if (poll(pf, (nfds_t)n, 100) <= 0)
			continue;
		for (i = 0; i < n; i++) {
			if (pf[i].revents == 0)
				continue;
			if (pf[i].fd == p->in) {
				k = write(p->in, in + in_off, in_len - in_off);
				if (k > 0)
					in_off += (size_t)k;
				if (k < 0 || in_off == in_len) {
					close(p->in);
					p->in = -1;
				}
				continue;
			}
			k = read(pf[i].fd, b, sizeof(b));
			if (k > 0) {
				buf_add(pf[i].fd == p->out ? out : err, b,
				    (size_t)k);
				continue;
			}
			close(pf[i].fd);
			if (pf[i].fd == p->out)
				p->out = -1;
			else
				p->err = -1;
		}
	}
	ck_assert_int_eq(waitpid(p->pid, &st, 0), p->pid);
	if (out->p == NULL)
		buf_add(out, "", 0);
	if (err->p == NULL)
		buf_add(err, "", 0);
	st = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
	/* For the log of a failing test. */
	if (st != 0)
		fprintf(stderr, "cpq exit %d, stderr: %s\n", st, err->p);
	return st;
}

/* Runs cpq to its end; its exit status with out and err filled. */
static int
run_in(const char *const *args, const char *in, size_t in_len,
    struct buf *out, struct buf *err)
{
	struct spawn_opts so = { .stdin_pipe = in != NULL };
	struct proc p;

	memset(out, 0, sizeof(*out));
	memset(err, 0, sizeof(*err));
	spawn(&p, args, &so);
	return finish(&p, in, in_len, out, err);
}

static int
run(const char *const *args, struct buf *out, struct buf *err)
{
	return run_in(args, NULL, 0, out, err);
}

/* Reads from fd until b holds needle (or the deadline); 1 if it does. */
static int
read_until(int fd, struct buf *b, const char *needle, int timeout_ms)
{
	uint64_t end = ms_now() + (uint64_t)timeout_ms;
	char tmp[4096];

	while (b->p == NULL || strstr(b->p, needle) == NULL) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (ms_now() >= end)
			return 0;
		if (poll(&pf, 1, 50) <= 0)
			continue;
		k = read(fd, tmp, sizeof(tmp));
		if (k <= 0)
			return 0;
		buf_add(b, tmp, (size_t)k);
	}
	return 1;
}

static int
count_lines(const struct buf *b)
{
	const char *q = b->p;
	int n = 0;

	while (q != NULL && (q = strchr(q, '\n')) != NULL) {
		n++;
		q++;
	}
	return n;
}

/* Reads from fd until b holds at least n lines; 1 if it does in time. */
static int
read_lines(int fd, struct buf *b, int n, int timeout_ms)
{
	uint64_t end = ms_now() + (uint64_t)timeout_ms;
	char tmp[4096];

	while (count_lines(b) < n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (ms_now() >= end)
			return 0;
		if (poll(&pf, 1, 50) <= 0)
			continue;
		k = read(fd, tmp, sizeof(tmp));
		if (k <= 0)
			return 0;
		buf_add(b, tmp, (size_t)k);
	}
	return 1;
}

/* ---- JSON lines -------------------------------------------------------- */

/* Parses each line of text; returns the count, trees in js[] (max n). */
static size_t
json_lines(const char *text, struct json **js, size_t max)
{
	const char *p = text, *nl;
	size_t n = 0;
	char err[128];

	while (*p != '\0') {
		nl = strchr(p, '\n');
		ck_assert_msg(nl != NULL, "unterminated line: %s", p);
		ck_assert_uint_lt(n, max);
		js[n] = json_parse(p, (size_t)(nl - p), err, sizeof(err));
		ck_assert_msg(js[n] != NULL, "bad JSON (%s): %.*s", err,
		    (int)(nl - p), p);
		ck_assert_int_eq(js[n]->type, JSON_OBJECT);
		n++;
		p = nl + 1;
	}
	return n;
}

static void
json_lines_free(struct json **js, size_t n)
{
	while (n-- > 0)
		json_free(js[n]);
}

static const char *
jstr(const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);

	ck_assert_msg(v != NULL && v->type == JSON_STRING, "no string %s", key);
	return v->str;
}

static double
jnum(const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);

	ck_assert_msg(v != NULL && v->type == JSON_NUMBER, "no number %s", key);
	return v->num;
}

/* ---- streaming --------------------------------------------------------- */

START_TEST(test_text)
{
	const char *args[] = { "--socket", NULL, "Hello, world", NULL };
	struct buf out, err;
	struct hd d;

	start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(run(args, &out, &err), 0);
	ck_assert_str_eq(out.p, "Hello, world");
	ck_assert_str_eq(err.p, "");
	buf_free(&out);
	buf_free(&err);

	/* Several words are one prompt, joined by single spaces. */
	{
		const char *a2[] = { "--socket", d.path, "-n", "100", "one",
		    "two  three", "", "four", NULL };

		ck_assert_int_eq(run(a2, &out, &err), 0);
		ck_assert_str_eq(out.p, "one two  three  four");
		buf_free(&out);
		buf_free(&err);
	}
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST

/* Each token reaches the pipe as it is made, not at exit. */
START_TEST(test_streams)
{
	const char *args[] = { "--socket", NULL, "abcdefghijklmnopqrstuvwxyz",
	    NULL };
	struct buf out = { 0 }, err = { 0 }, first = { 0 };
	struct proc p;
	int st;
	struct hd d;

	start(&d, "", 100000);		/* 100 ms a token: 2.6 s in all */
	args[1] = d.path;
	spawn(&p, args, NULL);
	ck_assert(read_until(p.out, &first, "a", 5000));
	ck_assert_uint_lt(first.len, 26);
	ck_assert_int_eq(waitpid(p.pid, &st, WNOHANG), 0);
	st = finish(&p, NULL, 0, &out, &err);
	ck_assert_int_eq(st, 0);
	buf_add(&first, out.p, out.len);
	ck_assert_str_eq(first.p, "abcdefghijklmnopqrstuvwxyz");
	buf_free(&out);
	buf_free(&err);
	buf_free(&first);
	hd_stop(&d);
}
END_TEST

START_TEST(test_stdin)
{
	static const char prompt[] = "from stdin\nsecond line\n";
	const char *args[] = { "--socket", NULL, NULL };
	struct buf out, err;
	struct hd d;

	start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(run_in(args, prompt, strlen(prompt), &out, &err), 0);
	ck_assert_str_eq(out.p, prompt);
	ck_assert_str_eq(err.p, "");
	buf_free(&out);
	buf_free(&err);

	/* Empty standard input: nothing to send. */
	ck_assert_int_eq(run_in(args, "", 0, &out, &err), 2);
	ck_assert_str_eq(out.p, "");
	ck_assert_ptr_nonnull(strstr(err.p, "empty prompt"));
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

START_TEST(test_ids)
{
	const char *args[] = { "--socket", NULL, "--ids", "AB z", NULL };
	struct buf out, err;
	struct hd d;

	start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(run(args, &out, &err), 0);
	ck_assert_str_eq(out.p, "65 66 32 122\n");
	ck_assert_str_eq(err.p, "");
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

START_TEST(test_max_tokens_and_stop)
{
	const char *a1[] = { "--socket", NULL, "-n", "3", "abcdef", NULL };
	const char *a2[] = { "--socket", NULL, "--stop", "lo", "hello world",
	    NULL };
	const char *a3[] = { "--socket", NULL, "-s", "xyz", "--stop", "o w",
	    "--json", "hello world", NULL };
	const char *a4[] = { "--socket", NULL, "--max-tokens", "4", "--json",
	    "abcdef", NULL };
	struct json *js[16];
	struct buf out, err;
	size_t n;
	struct hd d;

	start(&d, "", 200);
	a1[1] = a2[1] = a3[1] = a4[1] = d.path;
	ck_assert_int_eq(run(a1, &out, &err), 0);
	ck_assert_str_eq(out.p, "abc");
	buf_free(&out);
	buf_free(&err);

	/* The mock stops once the output ends with a stop string. */
	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_str_eq(out.p, "hello");
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a3, &out, &err), 0);
	n = json_lines(out.p, js, 16);
	ck_assert_uint_eq(n, 8);	/* "hello w" and done */
	ck_assert_str_eq(jstr(js[6], "text"), "w");
	ck_assert_str_eq(jstr(js[7], "event"), "done");
	ck_assert_str_eq(jstr(js[7], "finish"), "stop");
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a4, &out, &err), 0);
	n = json_lines(out.p, js, 16);
	ck_assert_uint_eq(n, 5);
	ck_assert_str_eq(jstr(js[4], "finish"), "length");
	ck_assert(jnum(js[4], "n_gen") == 4);
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

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
	struct buf out, err;
	size_t n, i;
	double t_prev = 0;
	struct hd d;

	start(&d, "", 200);
	args[1] = d.path;
	ck_assert_int_eq(run(args, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	/* Raw control bytes never appear inside a line. */
	for (i = 0; i < out.len; i++)
		ck_assert(out.p[i] == '\n' || (unsigned char)out.p[i] >= 0x20);
	n = json_lines(out.p, js, 16);
	ck_assert_uint_eq(n, 9);
	for (i = 0; i < 8; i++) {
		ck_assert_str_eq(jstr(js[i], "event"), "token");
		ck_assert(jnum(js[i], "token") ==
		    (unsigned char)prompt[i]);
		ck_assert_str_eq(jstr(js[i], "text"), texts[i]);
		ck_assert_double_eq(jnum(js[i], "logprob"),
		    -(double)(i + 1) / 8);
		ck_assert(jnum(js[i], "t_ms") >= t_prev);
		t_prev = jnum(js[i], "t_ms");
	}
	ck_assert_str_eq(jstr(js[8], "event"), "done");
	ck_assert_str_eq(jstr(js[8], "finish"), "stop");
	ck_assert(jnum(js[8], "n_prompt") == 8);
	ck_assert(jnum(js[8], "n_gen") == 8);
	tm = json_get(js[8], "timings");
	ck_assert_ptr_nonnull(tm);
	ck_assert_int_eq(tm->type, JSON_OBJECT);
	ck_assert(jnum(tm, "total_ms") >= jnum(tm, "ttft_ms"));
	ck_assert(jnum(tm, "ttft_ms") >= 0);
	ck_assert(jnum(tm, "ttft_ms") <= jnum(js[0], "t_ms"));
	ck_assert(jnum(tm, "gen_tokens_per_s") > 0);
	ck_assert_ptr_nonnull(json_get(tm, "prompt_tokens_per_s"));
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

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
	struct buf out, err;
	size_t n, i;
	struct hd d;

	start_prefill(&d, 200, 4);
	args[1] = d.path;
	ck_assert_int_eq(run(args, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	n = json_lines(out.p, js, 32);
	ck_assert_uint_eq(n, 3 + 10 + 1);
	for (i = 0; i < 3; i++) {
		ck_assert_str_eq(jstr(js[i], "event"), "progress");
		ck_assert_double_eq(jnum(js[i], "done"), want[i]);
		ck_assert_double_eq(jnum(js[i], "total"), 10);
		ck_assert(jnum(js[i], "t_ms") >= 0);
		if (i > 0)
			ck_assert_double_eq(jnum(js[i], "step"),
			    jnum(js[i - 1], "step") + 1);
	}
	for (i = 3; i < 13; i++)
		ck_assert_str_eq(jstr(js[i], "event"), "token");
	ck_assert_str_eq(jstr(js[13], "event"), "done");
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);

	/* Without --progress, JSON output is what it always was. */
	args[3] = "0123456789";
	args[4] = NULL;
	ck_assert_int_eq(run(args, &out, &err), 0);
	n = json_lines(out.p, js, 32);
	ck_assert_uint_eq(n, 10 + 1);
	for (i = 0; i < n; i++)
		ck_assert_str_ne(jstr(js[i], "event"), "progress");
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

/* An ERROR event: its message, exit status 1; --json reports it too. */
START_TEST(test_request_error)
{
	const char *a1[] = { "--socket", NULL, "!error please", NULL };
	const char *a2[] = { "--socket", NULL, "--json", "!error please",
	    NULL };
	struct json *js[4];
	struct buf out, err;
	size_t n;
	struct hd d;

	start(&d, "", 200);
	a1[1] = a2[1] = d.path;
	ck_assert_int_eq(run(a1, &out, &err), 1);
	ck_assert_str_eq(out.p, "");
	ck_assert_ptr_nonnull(strstr(err.p, "mock: error requested"));
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a2, &out, &err), 1);
	n = json_lines(out.p, js, 4);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(jstr(js[0], "event"), "error");
	ck_assert(jnum(js[0], "error") == -EINVAL);
	ck_assert_str_eq(jstr(js[0], "message"), "mock: error requested");
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

/* A prompt over the daemon's limit, from the arguments or standard input. */
START_TEST(test_prompt_too_long)
{
	const char *a1[] = { "--socket", NULL, NULL, NULL };
	const char *a2[] = { "--socket", NULL, NULL };
	struct srv_config cfg;
	struct buf out, err;
	char big[200];
	struct hd d;

	cfg_init(&cfg, "");
	cfg.max_prompt_bytes = 100;
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	a1[1] = a2[1] = d.path;
	a1[2] = big;
	ck_assert_int_eq(run(a1, &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "100 bytes"));
	ck_assert_str_eq(out.p, "");
	buf_free(&out);
	buf_free(&err);
	ck_assert_int_eq(run_in(a2, big, strlen(big), &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "100 bytes"));
	buf_free(&out);
	buf_free(&err);
	/* At the limit it goes through. */
	big[100] = '\0';
	ck_assert_int_eq(run_in(a2, big, 100, &out, &err), 0);
	ck_assert_str_eq(out.p, big);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

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
	const char *a2[] = { "--socket", NULL, "--chat-template", "llama3",
	    "--system", " \tBe brief.\n", "Hi\n", NULL };
	const char *a3[] = { "--socket", NULL, "--chat-template", "gemma",
	    NULL };
	const char *a4[] = { "--socket", NULL, "--chat", "Hello", NULL };
	struct buf out, err;
	struct hd d;

	start(&d, "chatml", 50);
	a1[1] = a2[1] = a3[1] = a4[1] = d.path;
	ck_assert_int_eq(run(a1, &out, &err), 0);
	ck_assert_str_eq(out.p, chatml);
	ck_assert_str_eq(err.p, "");
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_str_eq(out.p, llama3);
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run_in(a3, "  Who are you?\n", 15, &out, &err), 0);
	ck_assert_str_eq(out.p, gemma);
	buf_free(&out);
	buf_free(&err);

	/* Without --system: no system turn. */
	ck_assert_int_eq(run(a4, &out, &err), 0);
	ck_assert_str_eq(out.p, "<|im_start|>user\nHello<|im_end|>\n"
	    "<|im_start|>assistant\n");
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

/* A model without a recognised template: exit 1 before reading the prompt. */
START_TEST(test_chat_unknown)
{
	const char *a1[] = { "--socket", NULL, "--chat", NULL };
	struct buf out, err;
	struct hd d, d2;

	start(&d, "", 200);
	a1[1] = d.path;
	/* stdin is /dev/null: had cpq read it first, it would say "empty". */
	ck_assert_int_eq(run(a1, &out, &err), 1);
	ck_assert_str_eq(out.p, "");
	ck_assert_ptr_nonnull(strstr(err.p, "mock-model"));
	ck_assert_ptr_nonnull(strstr(err.p, "chat template"));
	ck_assert_ptr_nonnull(strstr(err.p, "--chat-template"));
	ck_assert_ptr_nonnull(strstr(err.p, "chatml"));
	ck_assert_ptr_null(strstr(err.p, "empty"));
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);

	/* A name this cpq does not know (a newer daemon's, say) is named. */
	start(&d2, "phi3", 200);
	a1[1] = d2.path;
	ck_assert_int_eq(run(a1, &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "'phi3'"));
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d2);
}
END_TEST

/* ---- --info and --stats ------------------------------------------------ */

START_TEST(test_info)
{
	const char *a1[] = { "--socket", NULL, "--info", NULL };
	const char *a2[] = { "--socket", NULL, "--info", "--json", NULL };
	struct srv_config cfg;
	struct json *js[4];
	struct buf out, err;
	size_t n;
	struct hd d;

	cfg_init(&cfg, "llama3");
	/* Valid UTF-8 kept, an invalid byte replaced (U+FFFD). */
	snprintf(cfg.model.name, sizeof(cfg.model.name), "mod\xc3\xa8le-\xff");
	cfg.max_prompt_bytes = 12345;
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	a1[1] = a2[1] = d.path;
	ck_assert_int_eq(run(a1, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	ck_assert_ptr_nonnull(strstr(out.p, "model:          mod\xc3\xa8le-"));
	ck_assert_ptr_nonnull(strstr(out.p, "\nchat template:  llama3\n"));
	ck_assert_ptr_nonnull(strstr(out.p, "\ncontext:        4096 tokens\n"));
	ck_assert_ptr_nonnull(strstr(out.p, "\nmax prompt:     12345 bytes\n"));
	ck_assert_ptr_nonnull(strstr(out.p, "\nheads:          8 (4 for"));
	ck_assert_ptr_nonnull(strstr(out.p, d.path));
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a2, &out, &err), 0);
	n = json_lines(out.p, js, 4);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(jstr(js[0], "name"), "mod\xc3\xa8le-\xef\xbf\xbd");
	ck_assert_str_eq(jstr(js[0], "arch"), "llama");
	ck_assert_str_eq(jstr(js[0], "chat_template"), "llama3");
	ck_assert_str_eq(jstr(js[0], "socket"), d.path);
	ck_assert(jnum(js[0], "n_ctx") == 4096);
	ck_assert(jnum(js[0], "n_params") == 260000);
	ck_assert(jnum(js[0], "eos") == 2);
	ck_assert(jnum(js[0], "max_prompt_bytes") == 12345);
	ck_assert(jnum(js[0], "clients") == 1);
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

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
	struct buf out, err;
	size_t n;
	struct hd d;

	start(&d, "", 200);
	a0[1] = a1[1] = a2[1] = a3[1] = a4[1] = d.path;
	ck_assert_int_eq(run(a0, &out, &err), 0);
	ck_assert_str_eq(out.p, "abc");
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a1, &out, &err), 0);
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
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	ck_assert_double_eq(prometheus_check(out.p, "cpd_requests_total"), 1);
	buf_free(&out);
	buf_free(&err);
	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_double_eq(prometheus_check(out.p,
	    "cpd_generated_tokens_total"), 3);
	buf_free(&out);
	buf_free(&err);
	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_double_eq(prometheus_check(out.p, "cpd_clients_total"), 5);
	buf_free(&out);
	buf_free(&err);
	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert(prometheus_check(out.p, "cpd_uptime_seconds") > 0);
	buf_free(&out);
	buf_free(&err);
	/* Six cpq runs have ended (closed, or exited first), the same text. */
	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_double_eq(prom_get(out.p,
	    "cpd_disconnects_total{reason=\"closed\"}") + prom_get(out.p,
	    "cpd_disconnects_total{reason=\"exited\"}"), 6);
	buf_free(&out);
	buf_free(&err);
	/* The mock engine keeps no histograms: empty, but well formed. */
	ck_assert_int_eq(run(a2, &out, &err), 0);
	ck_assert_double_eq(prometheus_check(out.p,
	    "cpd_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 0);
	buf_free(&out);
	buf_free(&err);

	ck_assert_int_eq(run(a3, &out, &err), 0);
	n = json_lines(out.p, js, 4);
	ck_assert_uint_eq(n, 1);
	ck_assert(jnum(js[0], "requests_total") == 1);
	ck_assert(jnum(js[0], "tokens_generated") == 3);
	ck_assert(jnum(js[0], "clients_total") == 9);
	ck_assert(jnum(json_get(js[0], "disconnects"), "closed") +
	    jnum(json_get(js[0], "disconnects"), "exited") == 8);
	ck_assert(jnum(json_get(js[0], "ttft_us"), "count") == 0);
	ck_assert_uint_eq(json_get(json_get(js[0], "itl_us"), "buckets")->n,
	    20);
	json_lines_free(js, n);
	buf_free(&out);
	buf_free(&err);

	/* Both: the information, then the table. */
	ck_assert_int_eq(run(a4, &out, &err), 0);
	ck_assert_ptr_nonnull(strstr(out.p, "model:          mock-model\n"));
	ck_assert_int_eq(table_value(strstr(out.p, "\nuptime_ms") + 1,
	    "requests_total"), 1);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

/* ---- failures --------------------------------------------------------- */

START_TEST(test_no_daemon)
{
	const char *a1[] = { "--socket", NULL, "hello", NULL };
	const char *a2[] = { "hello", NULL };
	struct spawn_opts so = { 0 };
	struct sockaddr_un sa;
	struct buf out = { 0 }, err = { 0 };
	char path[300], msg[400];
	struct proc p;
	const char *t = getenv("TMPDIR");
	int fd;

	snprintf(path, sizeof(path), "%s/cpq-none-%ld", t ? t : "/tmp",
	    (long)getpid());
	unlink(path);
	a1[1] = path;
	ck_assert_int_eq(run(a1, &out, &err), 3);
	snprintf(msg, sizeof(msg), "no daemon listening on %s (start it "
	    "with: cpd -m MODEL)", path);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	ck_assert_str_eq(out.p, "");
	buf_free(&out);
	buf_free(&err);

	/* $CPD_SOCKET names the socket when --socket does not. */
	so.env_socket = path;
	spawn(&p, a2, &so);
	ck_assert_int_eq(finish(&p, NULL, 0, &out, &err), 3);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	buf_free(&out);
	buf_free(&err);

	/* A socket file nobody listens on (a dead daemon's). */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_int_eq(run(a1, &out, &err), 3);
	ck_assert_ptr_nonnull(strstr(err.p, msg));
	buf_free(&out);
	buf_free(&err);
	unlink(path);
}
END_TEST

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
	{ "-s", "1", "-s", "2", "-s", "3", "-s", "4" },	/* + 5 more below */
	{ "--ids", "--json", "x" },
	{ "--prometheus", "x" },
	{ "--stats", "--prometheus", "--json" },
	{ "--info", "a prompt" },
	{ "--stats", "x" },
	{ "--bogus", "x" },
	{ "-x", "x" },
	{ "x", "--temp" },
	{ "" },
	{ "--chat-template", "phi3", "x" },
	{ "--socket", "", "x" },
};

#define N_BAD	((int)(sizeof(bad_args) / sizeof(bad_args[0])))

START_TEST(test_bad_args)
{
	const char *args[32];
	struct buf out, err;
	int n = 0, k;

	args[n++] = "--socket";
	args[n++] = "/nonexistent/cpq-test/sock";
	for (k = 0; k < 8 && bad_args[_i][k] != NULL; k++)
		args[n++] = bad_args[_i][k];
	if (strcmp(args[2], "-s") == 0) {
		/* Nine stop strings, one more than the protocol carries. */
		static const char *const more[] = { "-s", "5", "-s", "6",
		    "-s", "7", "-s", "8", "-s", "9", "x" };

		memcpy(args + n, more, sizeof(more));
		n += (int)(sizeof(more) / sizeof(more[0]));
	}
	args[n] = NULL;
	ck_assert_int_eq(run(args, &out, &err), 2);
	ck_assert_str_eq(out.p, "");
	ck_assert_msg(strncmp(err.p, "cpq: ", 5) == 0, "stderr: %s", err.p);
	buf_free(&out);
	buf_free(&err);
}
END_TEST

START_TEST(test_stops_too_long)
{
	char s1[300], s2[300];
	const char *args[] = { "--socket", "/nonexistent/cpq-test/sock",
	    "--stop", s1, "--stop", s2, "x", NULL };
	struct buf out, err;

	/* 256 + 257 bytes with their NULs: 513, one over the limit. */
	memset(s1, 'a', 255);
	s1[255] = '\0';
	memset(s2, 'b', 256);
	s2[256] = '\0';
	ck_assert_int_eq(run(args, &out, &err), 2);
	ck_assert_ptr_nonnull(strstr(err.p, "512"));
	buf_free(&out);
	buf_free(&err);
	/* 512 exactly is fine: then the missing daemon is the problem. */
	s2[255] = '\0';
	ck_assert_int_eq(run(args, &out, &err), 3);
	buf_free(&out);
	buf_free(&err);
}
END_TEST

START_TEST(test_help)
{
	const char *args[] = { "--help", NULL };
	struct buf out, err;

	ck_assert_int_eq(run(args, &out, &err), 0);
	ck_assert_int_eq(strncmp(out.p, "usage: cpq", 10), 0);
	ck_assert_ptr_nonnull(strstr(out.p, "--prometheus"));
	ck_assert_str_eq(err.p, "");
	buf_free(&out);
	buf_free(&err);
}
END_TEST

/* The daemon dies mid-answer: exit 1 with a message, no hang. */
START_TEST(test_daemon_dies)
{
	const char *args[] = { "--socket", NULL, "a long enough prompt for "
	    "the daemon to die in the middle", NULL };
	struct buf out = { 0 }, err = { 0 }, first = { 0 };
	struct proc p;
	struct hd d;

	start(&d, "", 20000);
	args[1] = d.path;
	spawn(&p, args, NULL);
	ck_assert(read_until(p.out, &first, "a l", 5000));
	hd_kill(&d);
	ck_assert_int_eq(finish(&p, NULL, 0, &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err.p, "lost the daemon"));
	buf_free(&out);
	buf_free(&err);
	buf_free(&first);
	hd_stop(&d);
}
END_TEST

/* ---- interrupts and terminals ------------------------------------------ */

/* SIGINT: the daemon cancels the request (its DONE says so), exit 130. */
START_TEST(test_sigint)
{
	const char *args[] = { "--socket", NULL, "--json", NULL, NULL };
	struct buf out = { 0 }, err = { 0 }, first = { 0 };
	struct cp_wire_stats st;
	struct json *js[512];
	char prompt[3001];
	struct proc p;
	size_t n;
	struct hd d;

	memset(prompt, 'z', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	start(&d, "", 2000);		/* 3000 tokens: 6 s uncancelled */
	args[1] = d.path;
	args[3] = prompt;
	spawn(&p, args, NULL);
	/* Five token lines, then Ctrl-C. */
	ck_assert(read_lines(p.out, &first, 5, 5000));
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	ck_assert_int_eq(finish(&p, NULL, 0, &out, &err), 130);
	buf_add(&first, out.p, out.len);
	n = json_lines(first.p, js, 512);
	ck_assert_uint_ge(n, 6);
	ck_assert_str_eq(jstr(js[n - 1], "event"), "done");
	ck_assert_str_eq(jstr(js[n - 1], "finish"), "cancelled");
	ck_assert(jnum(js[n - 1], "n_gen") < 3000);
	ck_assert(jnum(js[n - 1], "n_gen") == n - 1);
	json_lines_free(js, n);

	/* The daemon stopped generating: nothing active, far fewer tokens. */
	stats(&d, &st);
	ck_assert_uint_eq(st.requests_active, 0);
	ck_assert_uint_lt(st.tokens_generated, 3000);
	usleep(200000);
	stats(&d, &st);
	ck_assert_uint_lt(st.tokens_generated, 3000);
	buf_free(&out);
	buf_free(&err);
	buf_free(&first);
	hd_stop(&d);
}
END_TEST

/* SIGINT while cpq still reads its prompt: nothing to cancel, exit 130. */
START_TEST(test_sigint_before_prompt)
{
	const char *args[] = { "--socket", NULL, NULL };
	struct spawn_opts so = { .stdin_pipe = 1 };
	struct buf out = { 0 }, err = { 0 };
	struct cp_wire_stats st;
	struct proc p;
	uint64_t end;
	struct hd d;
	int in;

	start(&d, "", 200);
	args[1] = d.path;
	spawn(&p, args, &so);
	end = ms_now() + 5000;
	do {
		ck_assert(ms_now() < end);
		usleep(10000);
		stats(&d, &st);
	} while (st.clients < 2);	/* cpq and this check */
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	/* stdin stays open: only the signal can end it. */
	in = p.in;
	p.in = -1;
	ck_assert_int_eq(finish(&p, NULL, 0, &out, &err), 130);
	close(in);
	ck_assert_str_eq(out.p, "");
	stats(&d, &st);
	ck_assert_uint_eq(st.requests_total, 0);
	buf_free(&out);
	buf_free(&err);
	hd_stop(&d);
}
END_TEST

/*
 * On a terminal, a long prompt's wait for its first token is shown on
 * stderr, then cleared.  The daemon is stopped (SIGSTOP) while cpq waits
 * for its prompt on stdin, so the wait is certain to be long.
 */
START_TEST(test_wait_line_on_tty)
{
	const char *args[] = { "--socket", NULL, NULL };
	struct buf out = { 0 }, err = { 0 }, tty = { 0 };
	struct spawn_opts so = { .stdin_pipe = 1 };
	struct raw_client rc;
	struct cp_wire_stats st;
	char prompt[2001], *slave;
	struct proc p;
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

	start(&d, "", 50);
	args[1] = d.path;
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	so.err_path = slave;
	spawn(&p, args, &so);
	/* cpq connects first, then reads its prompt. */
	end = ms_now() + 5000;
	do {
		ck_assert_int_eq(raw_stats(&rc, &st), 0);
		ck_assert(ms_now() < end);
		usleep(10000);
	} while (st.clients < 2);
	ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
	ck_assert_int_eq(write(p.in, prompt, sizeof(prompt) - 1),
	    (ssize_t)sizeof(prompt) - 1);
	close(p.in);
	p.in = -1;
	ck_assert(read_until(m, &tty, "waiting for the first token", 5000));
	ck_assert_ptr_nonnull(strstr(tty.p, "2000-byte prompt"));
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	ck_assert_int_eq(finish(&p, NULL, 0, &out, &err), 0);
	ck_assert_str_eq(out.p, prompt);
	/* The line was erased once the first token came. */
	for (i = 0; i < 20; i++) {
		char b[1024];

		k = read(m, b, sizeof(b));
		if (k > 0)
			buf_add(&tty, b, (size_t)k);
		else
			break;
	}
	ck_assert_ptr_nonnull(strstr(strstr(tty.p, "waiting"), "\r\033[K"));
	close(m);
	raw_close(&rc);
	buf_free(&out);
	buf_free(&err);
	buf_free(&tty);
	hd_stop(&d);
}
END_TEST

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
	struct spawn_opts so = { 0 };
	struct buf out = { 0 }, err = { 0 }, tty = { 0 };
	char prompt[1025], *slave, *last, *q;
	unsigned done, total;
	struct proc p;
	ssize_t k;
	int m, i, n_lines = 0;
	struct hd d;

	memset(prompt, 'p', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	m = open_pty(&slave);
	start_prefill(&d, 50000, 64);
	args[1] = d.path;
	args[4] = prompt;
	so.err_path = slave;
	spawn(&p, args, &so);
	ck_assert(read_until(m, &tty, "/1024 tokens", 5000));
	ck_assert_int_eq(finish(&p, NULL, 0, &out, &err), 0);
	ck_assert_str_eq(out.p, "pp");
	for (i = 0; i < 20; i++) {
		char b[1024];

		k = read(m, b, sizeof(b));
		if (k > 0)
			buf_add(&tty, b, (size_t)k);
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
	buf_free(&out);
	buf_free(&err);
	buf_free(&tty);
	hd_stop(&d);
}
END_TEST

Suite *
cpq_suite(void)
{
	Suite *s = suite_create("cpq");
	TCase *tc;

	tc = tcase_create("stream");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_text);
	tcase_add_test(tc, test_streams);
	tcase_add_test(tc, test_stdin);
	tcase_add_test(tc, test_ids);
	tcase_add_test(tc, test_max_tokens_and_stop);
	tcase_add_test(tc, test_json);
	tcase_add_test(tc, test_json_progress);
	tcase_add_test(tc, test_request_error);
	tcase_add_test(tc, test_prompt_too_long);
	suite_add_tcase(s, tc);

	tc = tcase_create("chat");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_chat);
	tcase_add_test(tc, test_chat_unknown);
	suite_add_tcase(s, tc);

	tc = tcase_create("info");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_info);
	tcase_add_test(tc, test_stats);
	suite_add_tcase(s, tc);

	tc = tcase_create("failures");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_no_daemon);
	tcase_add_loop_test(tc, test_bad_args, 0, N_BAD);
	tcase_add_test(tc, test_stops_too_long);
	tcase_add_test(tc, test_help);
	tcase_add_test(tc, test_daemon_dies);
	suite_add_tcase(s, tc);

	tc = tcase_create("signals");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_sigint);
	tcase_add_test(tc, test_sigint_before_prompt);
	tcase_add_test(tc, test_wait_line_on_tty);
	tcase_add_test(tc, test_progress_line_on_tty);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	const char *env = getenv("CPQ"), *build = getenv("BUILD");
	SRunner *sr;
	int failed;

	if (env != NULL && env[0] != '\0')
		snprintf(cpq_path, sizeof(cpq_path), "%s", env);
	else
		snprintf(cpq_path, sizeof(cpq_path), "%s/bin/cpq",
		    build != NULL && build[0] != '\0' ? build : "build");
	if (access(cpq_path, X_OK) != 0) {
		printf("%s not built (make it, or set CPQ): skipped\n",
		    cpq_path);
		return 77;
	}
	sr = srunner_create(cpq_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0 ? 1 : 0;
}
