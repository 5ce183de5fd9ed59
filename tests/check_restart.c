/*
 * check_restart.c - cpd dies under a streaming client and a new one takes
 * its socket: the client's every call reports the death (CP_EDEAD), a
 * call blocked at that moment returns at once, none hangs, and
 * cp_connect() works again as soon as the new daemon listens, which gives
 * the same greedy ids (build/bin/cpd on aidreams260K).
 */
#include "cpclient.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/aidreams.h"
#include "lib/clock.h"
#include "lib/cpd_proc.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

#define WAIT_MS	5000		/* a call that takes longer hangs */

static char cpd_bin[512];
static char *model;

static int
connect_to(const char *path, struct cp_client **c)
{
	struct cp_connect_opts o;

	cp_connect_opts_init(&o);
	o.socket_path = path;
	o.timeout_ms = WAIT_MS;
	return cp_connect(&o, c);
}

/* Submits the fixture's prompt, greedy, n tokens; the request's id. */
static int
submit_ref(struct cp_client *c, uint32_t n)
{
	struct cp_params p;
	int id;

	cp_params_init(&p);
	p.max_tokens = n;
	p.temperature = 0.0f;
	id = cp_submit(c, AID_PROMPT, strlen(AID_PROMPT), &p);
	ck_assert_int_ge(id, 0);
	return id;
}

/*
 * Reads request id's tokens into ids (at most n) until it ends or max
 * tokens came; how many came.  *end: the terminal event's type, or the
 * negative result of the call that failed.
 */
static int
read_ids(struct cp_client *c, int id, int *ids, int n, int *end)
{
	struct cp_event ev;
	int got = 0, r;

	for (;;) {
		r = cp_next_event(c, &ev, WAIT_MS);
		if (r < 0) {
			*end = r;
			return got;
		}
		ck_assert_int_eq(ev.req_id, id);
		if (ev.type == CP_EVENT_TOKEN && ev.token >= 0 && got < n)
			ids[got++] = ev.token;
		if (ev.type == CP_EVENT_DONE || ev.type == CP_EVENT_ERROR) {
			*end = ev.type;
			return got;
		}
		if (got == n && *end == 0)
			return got;
	}
}

struct blocked {
	struct cp_client *c;
	int r;
	double ms;		/* how long the call blocked */
};

static void *
blocked_next(void *arg)
{
	struct blocked *b = arg;
	struct cp_event ev;
	double t0 = clock_ms_f();

	b->r = cp_next_event(b->c, &ev, 3 * WAIT_MS);
	b->ms = clock_ms_f() - t0;
	return NULL;
}

START_TEST(test_restart_under_a_streaming_client)
{
	const char *extra[3] = { "--socket", NULL, NULL };
	struct cp_client *c, *c2 = NULL;
	struct cp_stats st;
	struct cp_event ev;
	struct blocked blk;
	struct cpd d1, d2;
	pthread_t th;
	char dir[512], path[600];
	int ids[AID_N_REF + 1], id, got, end = 0, i, r;
	double t0;

	snprintf(dir, sizeof(dir), "%s/restart.XXXXXX", tmp_dir());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cpd.sock", dir);
	extra[1] = path;

	cpd_start_bin(&d1, cpd_bin, model, extra);
	ck_assert_int_eq(connect_to(path, &c), 0);
	id = submit_ref(c, AID_N_REF);
	got = read_ids(c, id, ids, 8, &end);
	ck_assert_int_eq(got, 8);
	for (i = 0; i < got; i++)
		ck_assert_int_eq(ids[i], aid_ref_ids[i]);

	/* The daemon dies mid-stream: every call says so, at once. */
	ck_assert_int_eq(kill(d1.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(d1.pid, NULL, 0), d1.pid);
	d1.pid = 0;
	t0 = clock_ms_f();
	/* Events already in the ring come first (the engine runs ahead). */
	while ((r = cp_next_event(c, &ev, WAIT_MS)) == 0)
		ck_assert_int_eq(ev.req_id, id);
	ck_assert_int_eq(r, CP_EDEAD);
	ck_assert_int_eq(cp_next_event(c, &ev, WAIT_MS), CP_EDEAD);
	ck_assert_int_eq(cp_submit(c, "x", 1, NULL), CP_EDEAD);
	ck_assert_int_eq(cp_cancel(c, id), CP_EDEAD);
	r = cp_stats(c, &st);
	ck_assert_msg(r == CP_EDEAD || r == -EPIPE || r == -ECONNRESET,
	    "cp_stats on a dead daemon: %d (%s)", r, cp_strerror(r));
	ck_assert_msg(clock_ms_f() - t0 < WAIT_MS, "%.0f ms to report the "
	    "death", clock_ms_f() - t0);
	cp_close(c);

	/* Nobody listens: connecting fails, and does not hang. */
	t0 = clock_ms_f();
	r = connect_to(path, &c2);
	ck_assert_int_lt(r, 0);
	ck_assert_ptr_null(c2);
	ck_assert_msg(clock_ms_f() - t0 < WAIT_MS, "connect took %.0f ms",
	    clock_ms_f() - t0);

	/* A new daemon on the same socket: connecting works again. */
	cpd_start_bin(&d2, cpd_bin, model, extra);
	ck_assert_int_eq(connect_to(path, &c2), 0);
	id = submit_ref(c2, AID_N_REF);
	end = 0;
	got = read_ids(c2, id, ids, AID_N_REF + 1, &end);
	ck_assert_int_eq(end, CP_EVENT_DONE);
	ck_assert_int_eq(got, AID_N_REF);
	for (i = 0; i < got; i++)
		ck_assert_int_eq(ids[i], aid_ref_ids[i]);

	/* A call blocked when the daemon dies returns at once. */
	blk.c = c2;
	ck_assert_int_eq(pthread_create(&th, NULL, blocked_next, &blk), 0);
	usleep(200000);
	ck_assert_int_eq(kill(d2.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(d2.pid, NULL, 0), d2.pid);
	d2.pid = 0;
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(blk.r, CP_EDEAD);
	ck_assert_msg(blk.ms < WAIT_MS, "blocked %.0f ms", blk.ms);
	cp_close(c2);
	cpd_cleanup(&d2);
	cpd_cleanup(&d1);
	unlink(path);
	rmdir(dir);
}
END_TEST
SUITE_TEST("restart", test_restart_under_a_streaming_client);

SUITE_CASE("restart", 60);

int
main(void)
{
	int rc = 77;

	model = cpd_need("check_restart", cpd_bin, NULL, sizeof(cpd_bin),
	    "aidreams260K.gguf");
	if (model != NULL)
		rc = suite_main(suite_registered("restart"));
	free(model);
	return rc;
}
