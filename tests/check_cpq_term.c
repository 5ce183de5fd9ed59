/*
 * check_cpq_term.c - cpq run from scripts rather than a terminal: two
 * SIGINTs within 200 ms are one Ctrl-C (a terminal and timeout(1) each
 * signal the process group), --progress reports on a stderr that is a
 * pipe, text output ends with a newline unless --no-newline, and
 * --retry waits for a daemon that is not there yet.  cpq
 * against a daemon process with the mock engine (lib/cpq_run.h), which
 * echoes its prompt a byte a token.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/cpq_run.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

#define SLOW_STEP_US 1000000	/* a step, so a cancel takes up to 1 s */

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * cpq --json on a daemon of 1 s steps: after its first token, SIGINT and
 * another gap_ms later; returns cpq's exit status and whether its last
 * line is the "cancelled" end event (1) or it has none (0).
 */
static int
two_sigints(int gap_ms, int *done_line)
{
	const char *args[] = { "--socket", NULL, "--json", "abcdefghij",
	    NULL };
	struct cq_buf out = { 0 }, err = { 0 }, first = { 0 };
	struct json *js[32];
	struct cq_proc p;
	struct hd d;
	size_t n;
	int rc;

	cq_start(&d, "", SLOW_STEP_US);
	args[1] = d.path;
	cq_spawn(&p, args, NULL);
	ck_assert(cq_read_lines(p.out, &first, 1, 5000));
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	sleep_ms(gap_ms);
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	rc = cq_finish(&p, NULL, 0, &out, &err);
	cq_buf_add(&first, out.p, out.len);
	n = cq_json_lines(first.p, js, 32);
	ck_assert_uint_ge(n, 1);
	*done_line = strcmp(cq_jstr(js[n - 1], "event"), "done") == 0;
	if (*done_line)
		ck_assert_str_eq(cq_jstr(js[n - 1], "finish"), "cancelled");
	else
		ck_assert_str_eq(cq_jstr(js[n - 1], "event"), "token");
	cq_json_lines_free(js, n);
	cq_buf_free(&out);
	cq_buf_free(&err);
	cq_buf_free(&first);
	hd_stop(&d);
	return rc;
}

/*
 * Two SIGINTs 50 ms apart are one Ctrl-C: the request is cancelled and
 * its end event printed (the daemon confirms only at its next step, up
 * to 1 s later), exit 130.  Regression: the second one exited at once.
 */
START_TEST(test_sigint_pair_is_one)
{
	int done;

	ck_assert_int_eq(two_sigints(50, &done), 130);
	ck_assert_int_eq(done, 1);
}
END_TEST
SUITE_TEST("signals", test_sigint_pair_is_one);

/* A second SIGINT 400 ms after the first exits at once, 130, no end event. */
START_TEST(test_sigint_second_exits)
{
	int done;

	ck_assert_int_eq(two_sigints(400, &done), 130);
	ck_assert_int_eq(done, 0);
}
END_TEST
SUITE_TEST("signals", test_sigint_second_exits);

SUITE_CASE("signals", 30);

/*
 * --progress with stderr a pipe: each report on a line of its own, no
 * terminal controls; 256 prompt bytes, 64 a step.  Without --progress,
 * nothing on stderr.
 */
START_TEST(test_progress_on_pipe)
{
	const char *args[] = { "--socket", NULL, "-n", "2", "--progress",
	    NULL, NULL };
	struct cq_buf out = { 0 }, err = { 0 };
	char prompt[257], want[64];
	struct hd d;

	memset(prompt, 'p', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	cq_start_prefill(&d, 20000, 64);
	args[1] = d.path;
	args[5] = prompt;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_str_eq(out.p, "pp\n");
	for (int k = 64; k <= 256; k += 64) {
		snprintf(want, sizeof(want), "cpq: prefill: %d/256 tokens, ", k);
		ck_assert_msg(strstr(err.p, want) != NULL, "no '%s' in:\n%s",
		    want, err.p);
	}
	ck_assert_int_eq(cq_count_lines(&err), 4);
	ck_assert_ptr_null(strchr(err.p, '\r'));
	ck_assert_ptr_null(strchr(err.p, '\033'));
	cq_buf_free(&out);
	cq_buf_free(&err);

	args[4] = prompt;
	args[5] = NULL;
	ck_assert_int_eq(cq_run(args, &out, &err), 0);
	ck_assert_str_eq(err.p, "");
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("output", test_progress_on_pipe);

/*
 * Text on a pipe ends with a newline: added when the text has none, not
 * doubled when it has; --no-newline prints the text as it came.
 */
START_TEST(test_newline_on_pipe)
{
	static const struct {
		const char *flag, *prompt, *out;
	} t[] = {
		{ NULL, "abc", "abc\n" },
		{ NULL, "ab\n", "ab\n" },
		{ "--no-newline", "abc", "abc" },
		{ "--no-newline", "ab\n", "ab\n" },
	};
	struct cq_buf out = { 0 }, err = { 0 };
	struct hd d;

	cq_start(&d, "", 200);
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		const char *args[] = { "--socket", d.path, t[i].prompt, NULL,
		    NULL };

		if (t[i].flag != NULL) {
			args[2] = t[i].flag;
			args[3] = t[i].prompt;
		}
		ck_assert_int_eq(cq_run(args, &out, &err), 0);
		ck_assert_str_eq(out.p, t[i].out);
		ck_assert_str_eq(err.p, "");
		cq_buf_free(&out);
		cq_buf_free(&err);
	}
	hd_stop(&d);
}
END_TEST
SUITE_TEST("output", test_newline_on_pipe);

/* A socket path in a new directory of its own, where nothing listens. */
static void
empty_socket_path(char *dir, size_t dsize, char *path, size_t psize)
{
	snprintf(dir, dsize, "%s/cpq-retry-XXXXXX", tmp_dir());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, psize, "%s/cpd.sock", dir);
}

/*
 * cpq --retry started before any daemon: it waits, and once a daemon
 * listens at the path (a link to the harness's socket) it runs the
 * prompt.  Without --retry the same start fails at once with status 3.
 */
START_TEST(test_retry_waits_for_daemon)
{
	const char *args[] = { "--socket", NULL, "--retry", "30", "abc",
	    NULL };
	const char *once[] = { "--socket", NULL, "abc", NULL };
	struct cq_buf out = { 0 }, err = { 0 };
	char dir[512], path[600];
	struct cq_proc p;
	int status;
	struct hd d;

	empty_socket_path(dir, sizeof(dir), path, sizeof(path));
	once[1] = path;
	ck_assert_int_eq(cq_run(once, &out, &err), 3);
	cq_buf_free(&out);
	cq_buf_free(&err);

	args[1] = path;
	cq_spawn(&p, args, NULL);
	sleep_ms(400);
	ck_assert_int_eq(waitpid(p.pid, &status, WNOHANG), 0);
	cq_start(&d, "", 200);
	ck_assert_int_eq(symlink(d.path, path), 0);
	ck_assert_int_eq(cq_finish(&p, NULL, 0, &out, &err), 0);
	ck_assert_str_eq(out.p, "abc\n");
	cq_buf_free(&out);
	cq_buf_free(&err);
	hd_stop(&d);
	unlink(path);
	rmdir(dir);
}
END_TEST
SUITE_TEST("retry", test_retry_waits_for_daemon);

/* --retry 1 with no daemon: status 3 after about a second, not before. */
START_TEST(test_retry_gives_up)
{
	const char *args[] = { "--socket", NULL, "--retry", "1", "abc",
	    NULL };
	struct cq_buf out = { 0 }, err = { 0 };
	char dir[512], path[600];
	uint64_t t0, ms;

	empty_socket_path(dir, sizeof(dir), path, sizeof(path));
	args[1] = path;
	t0 = clock_ms();
	ck_assert_int_eq(cq_run(args, &out, &err), 3);
	ms = clock_ms() - t0;
	ck_assert_uint_ge(ms, 1000);
	ck_assert_uint_lt(ms, 10000);
	ck_assert_ptr_nonnull(strstr(err.p, "no daemon listening"));
	cq_buf_free(&out);
	cq_buf_free(&err);
	rmdir(dir);
}
END_TEST
SUITE_TEST("retry", test_retry_gives_up);

SUITE_CASE("retry", 30);

int
main(void)
{
	if (cq_find_cpq() < 0)
		return 77;
	return suite_main(suite_registered("cpq_term"));
}
