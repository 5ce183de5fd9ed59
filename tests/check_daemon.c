/*
 * check_daemon.c - cpd as its clients see it: a real build/bin/cpd on the
 * aidreams260K fixture, on a socket of its own, driven by libcpclient
 * clients (several processes where it matters) and by raw protocol
 * clients that misbehave on purpose.
 *
 * Golden values never come from the daemon: greedy ids are those of
 * `cpmodel generate FILE PROMPT --temp 0 --ids -n N`, the engine run in
 * one process without the daemon, its scheduler or chunking (the whole
 * prompt in one step), and REFERENCE.md's llama.cpp ids for "Once upon a
 * time".  Counts of steps follow from the scheduler's rules (DESIGN.md):
 * with a budget of 32 tokens and 4 decoding streams, a prompt of 100
 * tokens is prefilled 28 tokens a step, so over at least 4 steps.
 *
 * Progress is asserted on the step numbers that TOKEN and DONE events
 * carry, never on wall time.  Where a test needs a request to stay in
 * flight, its client connects with a 16-slot completion ring and does not
 * read: the daemon pauses it (cp_stats().requests_paused), it can neither
 * finish nor be forgotten.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpclient.h"
#include "lib/clock.h"
#include "lib/cpd_harness.h"
#include "lib/cpd_proc.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"
#include "ring.h"


/* REFERENCE.md: aidreams260K, greedy, "Once upon a time", 64 tokens. */
static const int ref_ids[64] = {
	446, 280, 432, 458, 375, 431, 422, 314, 280, 323, 290, 431, 448, 429,
	465, 438, 340, 431, 338, 353, 341, 431, 327, 446, 262, 429, 453, 435,
	285, 361, 437, 431, 440, 437, 445, 430, 275, 280, 302, 450, 405, 403,
	399, 306, 339, 290, 264, 309, 361, 441, 267, 395, 448, 429, 465, 438,
	340, 431, 338, 353, 341, 325, 266, 386,
};
static const char ref_prompt[] = "Once upon a time";
#define REF_N_PROMPT	13	/* REFERENCE.md's prompt ids, BOS included */
#define N_CTX		128	/* llama.context_length of the fixture */

/* 100 tokens with BOS (`cpmodel tokenize` counts them; the test asserts it). */
static const char long_prompt[] = "The quantum garden hums with electric "
    "bees. Each petal holds a tiny star, and the wind counts prime numbers "
    "while the river writes poems in binary. A small robot collects the "
    "light";
#define LONG_N_PROMPT	100

#define MAX_IDS		160
#define WAIT_MS		20000	/* no single wait of a test is longer */

static char cpd_bin[512];
static char cpmodel_bin[512];
static char *model;

/* ---- the daemon ------------------------------------------------------- */

/* cpd on the fixture, with extra flags (lib/cpd_proc.h). */
static void
cpd_start(struct cpd *d, const char *const *extra)
{
	cpd_start_bin(d, cpd_bin, model, extra);
}

/* ---- golden values: cpmodel generate ---------------------------------- */

/* Greedy ids of prompt, at most n, from `cpmodel generate`; how many. */
static int
golden(const char *prompt, int n, int32_t *ids)
{
	char nbuf[16], out[4096];
	const char *argv[] = { cpmodel_bin, "generate", model, prompt,
	    "--temp", "0", "--ids", "-n", nbuf, "--threads", "1", NULL };
	char *s, *end;
	int k = 0;

	snprintf(nbuf, sizeof(nbuf), "%d", n);
	ck_assert_msg(prog_capture(argv, out, sizeof(out)) == 0,
	    "cpmodel generate failed for '%s'", prompt);
	for (s = out; k < n; s = end) {
		long v = strtol(s, &end, 10);

		if (end == s)
			break;
		ids[k++] = (int32_t)v;
	}
	return k;
}

/* Number of tokens of text, from `cpmodel tokenize`. */
static int
count_tokens(const char *text)
{
	const char *argv[] = { cpmodel_bin, "tokenize", model, text, NULL };
	char out[4096];
	char *s, *end;
	int k = 0;

	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	for (s = out;; s = end) {
		strtol(s, &end, 10);
		if (end == s)
			break;
		k++;
	}
	return k;
}

/* ---- clients ---------------------------------------------------------- */

static struct cp_client *
client(const struct cpd *d, uint32_t cq_entries)
{
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	int r;

	cp_connect_opts_init(&o);
	o.socket_path = d->sock;
	o.cq_entries = cq_entries;
	r = cp_connect(&o, &c);
	ck_assert_msg(r == 0, "cp_connect: %s", cp_strerror(r));
	return c;
}

static void
greedy(struct cp_params *p, uint32_t max_tokens)
{
	cp_params_init(p);
	p->temperature = 0;
	p->max_tokens = max_tokens;
}

/* What one request produced. */
struct stream {
	int id;
	int32_t ids[MAX_IDS];
	uint32_t steps[MAX_IDS];	/* step of each token */
	int n;
	bool done;
	int type;		/* CP_EVENT_DONE or CP_EVENT_ERROR */
	int finish;
	int error;
	uint32_t n_prompt, n_gen;
	uint32_t end_step;
	int n_prog;			/* PROGRESS events */
	uint32_t prog[MAX_IDS];		/* their n_prompt */
	uint32_t prog_total[MAX_IDS];	/* their n_total */
	uint32_t prog_step[MAX_IDS];	/* their step */
};

static void
stream_init(struct stream *s, int id)
{
	memset(s, 0, sizeof(*s));
	s->id = id;
}

/* Files ev into the stream it belongs to; the stream must not be done. */
static void
stream_add(struct stream *s, const struct cp_event *ev)
{
	ck_assert_int_eq(ev->req_id, s->id);
	ck_assert_msg(!s->done, "event after the end of request %d", s->id);
	if (ev->type == CP_EVENT_PROGRESS) {
		/* Only before the first token (cpclient.h, PROGRESS). */
		ck_assert_int_eq(s->n, 0);
		ck_assert_int_lt(s->n_prog, MAX_IDS);
		s->prog[s->n_prog] = ev->n_prompt;
		s->prog_total[s->n_prog] = ev->n_total;
		s->prog_step[s->n_prog++] = ev->step;
		return;
	}
	if (ev->type == CP_EVENT_TOKEN) {
		if (ev->token < 0)
			return;		/* text alone */
		ck_assert_int_lt(s->n, MAX_IDS);
		s->ids[s->n] = ev->token;
		s->steps[s->n++] = ev->step;
		return;
	}
	s->done = true;
	s->type = ev->type;
	s->finish = ev->finish;
	s->error = ev->error;
	s->n_prompt = ev->n_prompt;
	s->n_gen = ev->n_gen;
	s->end_step = ev->step;
}

/* Reads c's events into the streams (by id) until each is done. */
static void
drain_streams(struct cp_client *c, struct stream *s, int n)
{
	struct cp_event ev;
	int left = 0, i, r;

	for (i = 0; i < n; i++)
		left += !s[i].done;
	while (left > 0) {
		r = cp_next_event(c, &ev, WAIT_MS);
		ck_assert_msg(r == 0, "cp_next_event: %s", cp_strerror(r));
		for (i = 0; i < n && s[i].id != ev.req_id; i++)
			;
		ck_assert_msg(i < n, "event for unknown request %d",
		    ev.req_id);
		stream_add(&s[i], &ev);
		if (s[i].done)
			left--;
	}
}

static void
stats(struct cp_client *c, struct cp_stats *st)
{
	int r = cp_stats(c, st);

	ck_assert_msg(r == 0, "cp_stats: %s", cp_strerror(r));
}

/* Polls the stats until pred holds (up to WAIT_MS); the last stats in *st. */
static void
stats_until(struct cp_client *c, struct cp_stats *st,
    bool (*pred)(const struct cp_stats *), const char *what)
{
	int i;

	for (i = 0; i < WAIT_MS / 5; i++) {
		stats(c, st);
		if (pred(st))
			return;
		usleep(5000);
	}
	ck_abort_msg("stats never showed %s (active %llu, waiting %llu, "
	    "running %llu, paused %llu, steps %llu, generated %llu, prompt "
	    "%llu)", what, (unsigned long long)st->requests_active,
	    (unsigned long long)st->requests_waiting,
	    (unsigned long long)st->requests_running,
	    (unsigned long long)st->requests_paused,
	    (unsigned long long)st->steps,
	    (unsigned long long)st->tokens_generated,
	    (unsigned long long)st->tokens_prompt);
}

static void
assert_ids(const struct stream *s, const int32_t *want, int n)
{
	int i;

	ck_assert_int_eq(s->n, n);
	for (i = 0; i < n; i++)
		ck_assert_msg(s->ids[i] == want[i], "request %d token %d: %d, "
		    "expected %d", s->id, i, s->ids[i], want[i]);
}

/* ---- 16 client processes ---------------------------------------------- */

#define N_PROC		16
#define PROC_TOKENS	48

static const char *const proc_prompts[N_PROC] = {
	"Once upon a time", "The little robot", "A cat sat", "In the deep "
	"ocean", "Stars above the city", "My grandmother said", "The old "
	"tree", "Rain fell on", "A kaleidoscope of", "Numbers dance", "Under "
	"the bridge", "The quiet library", "Electric dreams", "Far away",
	"Pixels unfold", "The garden at night",
};

struct proc_result {
	int32_t rc;		/* 0, or the step that failed */
	int32_t n;
	int32_t finish;
	uint32_t n_gen;
	int32_t ids[PROC_TOKENS];
};

/* A forked client: connect, wait for the start, generate, report. */
static void
proc_client(const struct cpd *d, int i, int ready, int start, int out)
{
	struct proc_result res;
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	struct cp_params p;
	struct cp_event ev;
	char b = 1;
	int id, r;

	memset(&res, 0, sizeof(res));
	cp_connect_opts_init(&o);
	o.socket_path = d->sock;
	if (cp_connect(&o, &c) < 0) {
		res.rc = 1;
		goto out;
	}
	if (write(ready, &b, 1) != 1 || read(start, &b, 1) != 0) {
		res.rc = 2;
		goto out;
	}
	greedy(&p, PROC_TOKENS);
	if ((id = cp_submit(c, proc_prompts[i], strlen(proc_prompts[i]),
	    &p)) < 0) {
		res.rc = 3;
		goto out;
	}
	while ((r = cp_next_event(c, &ev, WAIT_MS)) == 0) {
		if (ev.req_id != id) {
			res.rc = 4;
			break;
		}
		if (ev.type == CP_EVENT_TOKEN) {
			if (ev.token >= 0 && res.n < PROC_TOKENS)
				res.ids[res.n++] = ev.token;
			continue;
		}
		res.finish = ev.type == CP_EVENT_DONE ? ev.finish : -1;
		res.n_gen = ev.n_gen;
		break;
	}
	if (r != 0)
		res.rc = 5;
out:
	cp_close(c);
	if (write(out, &res, sizeof(res)) != (ssize_t)sizeof(res))
		_exit(1);
	_exit(0);
}

START_TEST(test_sixteen_processes)
{
	const char *args[] = { "--per-uid-max-clients", "32", "--kv-cache",
	    "4096", NULL };
	int32_t want[N_PROC][PROC_TOKENS];
	int n_want[N_PROC], ready[2], start[2], out[N_PROC][2], i, k, st;
	uint64_t multi;
	pid_t pids[N_PROC];
	struct cp_client *c;
	struct cp_stats s;
	struct cpd d;
	char b;

	for (i = 0; i < N_PROC; i++)
		n_want[i] = golden(proc_prompts[i], PROC_TOKENS, want[i]);
	cpd_start(&d, args);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(start), 0);
	for (i = 0; i < N_PROC; i++) {
		ck_assert_int_eq(pipe(out[i]), 0);
		fflush(NULL);
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			close(ready[0]);
			close(start[1]);
			proc_client(&d, i, ready[1], start[0], out[i][1]);
		}
		close(out[i][1]);
	}
	close(ready[1]);
	close(start[0]);
	/* All connected, then all submit at once. */
	for (i = 0; i < N_PROC; i++)
		ck_assert_int_eq(read(ready[0], &b, 1), 1);
	close(ready[0]);
	close(start[1]);
	for (i = 0; i < N_PROC; i++) {
		struct proc_result res;

		ck_assert_int_eq(read(out[i][0], &res, sizeof(res)),
		    (ssize_t)sizeof(res));
		close(out[i][0]);
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		ck_assert_msg(res.rc == 0, "client %d failed at %d", i, res.rc);
		ck_assert_int_eq(res.n, n_want[i]);
		for (k = 0; k < res.n; k++)
			ck_assert_msg(res.ids[k] == want[i][k], "client %d "
			    "('%s') token %d: %d, expected %d", i,
			    proc_prompts[i], k, res.ids[k], want[i][k]);
		ck_assert_uint_eq(res.n_gen, (uint32_t)res.n);
		ck_assert_int_eq(res.finish, n_want[i] == PROC_TOKENS ?
		    CP_DONE_LENGTH : CP_DONE_STOP);
	}
	c = client(&d, 0);
	stats(c, &s);
	ck_assert_uint_eq(s.requests_total, N_PROC);
	ck_assert_uint_eq(s.requests_active, 0);
	ck_assert_uint_eq(s.protocol_errors, 0);
	ck_assert_uint_eq(s.clients, 1);
	ck_assert_uint_eq(s.disconnects[CP_DISC_CLOSED] +
	    s.disconnects[CP_DISC_EXITED], N_PROC);
	/* Steps that carried two sequences or more: buckets past "1". */
	ck_assert_uint_eq(s.step_seqs.le[0], 0);
	ck_assert_uint_eq(s.step_seqs.le[1], 1);
	multi = s.step_seqs.count - s.step_seqs.n[0] - s.step_seqs.n[1];
	ck_assert_uint_gt(multi, 0);
	ck_assert_uint_ge(s.step_seqs.max, 2);
	/* One TTFT per request with a token, one gap per further token. */
	for (i = 0, k = 0, st = 0; i < N_PROC; i++) {
		k += n_want[i];
		st += n_want[i] > 0;
	}
	ck_assert_uint_eq(s.ttft_us.count, (uint64_t)st);
	ck_assert_uint_eq(s.tokens_generated, (uint64_t)k);
	ck_assert_uint_eq(s.itl_us.count, (uint64_t)(k - st));
	ck_assert_uint_eq(s.kv_blocks_used, 0);
	ck_assert_uint_eq(s.kv_blocks_free, s.kv_blocks_total);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_sixteen_processes);

/* ---- chunked prefill while others stream ------------------------------- */

/*
 * One attempt: 4 streams decoding, then the 100-token prompt, whose first
 * token comes at least min_steps steps after it arrived; with lp, the
 * prompt asks for progress and its stream is copied to *lp.  Returns 1
 * when the streams outlived its prefill (the situation under test; every
 * property is asserted then), 0 when one ended first (try again).
 */
static int
chunk_attempt(const struct cpd *d, const int32_t *want, int n_want,
    uint32_t min_steps, struct stream *lp)
{
	static const char *const shorts[4] = {
		"Once upon a time", "The little robot", "A cat sat",
		"Stars above the city",
	};
	struct cp_client *c[5];
	struct stream s[5];
	struct cp_params p;
	struct cp_event ev;
	uint32_t seen = 0, first;
	int i, k, r, left = 5, ok = 1;

	greedy(&p, 0);		/* until the context is full */
	for (i = 0; i < 4; i++) {
		c[i] = client(d, 0);
		stream_init(&s[i], cp_submit(c[i], shorts[i],
		    strlen(shorts[i]), &p));
		ck_assert_int_gt(s[i].id, 0);
	}
	/* Every stream decoding: each has a token. */
	for (i = 0; i < 4; i++) {
		while (s[i].n == 0) {
			r = cp_next_event(c[i], &ev, WAIT_MS);
			ck_assert_int_eq(r, 0);
			stream_add(&s[i], &ev);
			ck_assert(!s[i].done);
		}
		if (s[i].steps[s[i].n - 1] - seen < 0x80000000u)
			seen = s[i].steps[s[i].n - 1];
	}
	c[4] = client(d, 0);
	greedy(&p, (uint32_t)n_want);
	p.progress = lp != NULL;
	stream_init(&s[4], cp_submit(c[4], long_prompt,
	    strlen(long_prompt), &p));
	ck_assert_int_gt(s[4].id, 0);
	while (left > 0) {
		for (i = 0; i < 5; i++) {
			if (s[i].done)
				continue;
			r = cp_next_event(c[i], &ev, 0);
			if (r == -EAGAIN)
				continue;
			ck_assert_int_eq(r, 0);
			stream_add(&s[i], &ev);
			left -= s[i].done;
		}
		usleep(200);
	}
	for (i = 0; i < 5; i++)
		cp_close(c[i]);

	if (lp != NULL)
		*lp = s[4];
	/* The long prompt: all of it, and the unchunked ids. */
	ck_assert_int_eq(s[4].type, CP_EVENT_DONE);
	ck_assert_uint_eq(s[4].n_prompt, LONG_N_PROMPT);
	assert_ids(&s[4], want, n_want);
	first = s[4].steps[0];
	/* Prefill ran after step `seen` (in 28-token chunks at most). */
	ck_assert_uint_ge(first - seen, min_steps);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(s[i].type, CP_EVENT_DONE);
		ck_assert_int_eq(s[i].finish, CP_DONE_CONTEXT);
		ck_assert_uint_eq(s[i].n_prompt + s[i].n_gen, N_CTX);
		/* A token at every step from its first to its last. */
		for (k = 1; k < s[i].n; k++)
			ck_assert_msg(s[i].steps[k] == s[i].steps[k - 1] + 1,
			    "stream %d: token %d at step %u, the one before "
			    "at %u", i, k, s[i].steps[k], s[i].steps[k - 1]);
		if (s[i].steps[s[i].n - 1] - first >= 0x80000000u)
			ok = 0;		/* ended before the prefill did */
	}
	return ok;
}

START_TEST(test_chunked_prefill)
{
	const char *args[] = { "--max-batch-tokens", "32", "--prefix-cache",
	    "off", "--max-inter-token-ms", "0", NULL };
	int32_t want[16];
	int n_want, tries;
	struct cp_client *c;
	struct cp_stats st;
	struct cpd d;

	ck_assert_int_eq(count_tokens(long_prompt), LONG_N_PROMPT);
	n_want = golden(long_prompt, 16, want);
	ck_assert_int_eq(n_want, 16);
	cpd_start(&d, args);
	for (tries = 0; tries < 5 && !chunk_attempt(&d, want, n_want, 4,
	    NULL); tries++)
		;
	ck_assert_msg(tries < 5, "the streams never outlived the prefill");
	c = client(&d, 0);
	stats(c, &st);
	/* No step ran more than the budget of prompt tokens. */
	ck_assert_uint_le(st.step_prefill.max, 32);
	ck_assert_uint_ge(st.step_prefill.max, 28);
	ck_assert_uint_le(st.step_seqs.max, 5);
	ck_assert_uint_eq(st.preemptions, 0);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_chunked_prefill);

/*
 * The same under a latency target: the pacer sizes the prompt's chunks
 * (how, depends on the machine's speed; check_pacer.c tests the policy),
 * the ids are still the unchunked ones, the streams keep a token every
 * step, and the stats carry the target and the measured steps.
 */
START_TEST(test_paced_prefill)
{
	const char *args[] = { "--max-batch-tokens", "32", "--prefix-cache",
	    "off", "--max-inter-token-ms", "40", NULL };
	int32_t want[16];
	int n_want, tries;
	struct cp_client *c;
	struct cp_stats st;
	struct cpd d;

	n_want = golden(long_prompt, 16, want);
	ck_assert_int_eq(n_want, 16);
	cpd_start(&d, args);
	for (tries = 0; tries < 5 && !chunk_attempt(&d, want, n_want, 1,
	    NULL); tries++)
		;
	ck_assert_msg(tries < 5, "the streams never outlived the prefill");
	c = client(&d, 0);
	stats(c, &st);
	ck_assert_uint_eq(st.pace_target_us, 40000);
	ck_assert_uint_gt(st.pace_steps, 0);
	ck_assert_uint_le(st.pace_missed, st.pace_steps);
	ck_assert_uint_gt(st.pace_meas_us, 0);
	ck_assert_uint_le(st.step_prefill.max, 32);
	ck_assert_uint_eq(st.preemptions, 0);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_paced_prefill);

/*
 * The same through the prefill lane (2 threads, prompts of 16 tokens or
 * more): the long prompt's first 99 positions are computed beside the
 * steps, in one lane chunk (LANE_CHUNK rows), so its progress reports 99
 * and then 100 in the step of its first token (the steps, 28 prompt
 * tokens at a time beside 4 decodes, would report 28, 56, 84, 100); its
 * ids are still the unchunked ones, and every stream gets a token at
 * every step.
 */
START_TEST(test_prefill_lane)
{
	const char *args[] = { "--max-batch-tokens", "32", "--threads", "2",
	    "--prefill-lane-tokens", "16",
	    "--max-inter-token-ms", "0", "--prefix-cache", "off", NULL };
	int32_t want[16];
	int n_want, tries;
	struct cp_client *c;
	struct cp_stats st;
	struct stream lp;
	struct cpd d;

	n_want = golden(long_prompt, 16, want);
	ck_assert_int_eq(n_want, 16);
	cpd_start(&d, args);
	for (tries = 0; tries < 5 && !chunk_attempt(&d, want, n_want, 1,
	    &lp); tries++)
		;
	ck_assert_msg(tries < 5, "the streams never outlived the prefill");
	ck_assert_int_eq(lp.n_prog, 2);
	ck_assert_uint_eq(lp.prog[0], LONG_N_PROMPT - 1);
	ck_assert_uint_eq(lp.prog[1], LONG_N_PROMPT);
	ck_assert_uint_eq(lp.prog_step[1], lp.steps[0]);
	c = client(&d, 0);
	stats(c, &st);
	ck_assert_uint_eq(st.preemptions, 0);
	ck_assert_uint_eq(st.kv_blocks_used, 0);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_prefill_lane);

/*
 * Prefill progress from the real engine: under a budget of 16 tokens a
 * step (and max_prefill_chunk clamped to it), the 100-token prompt alone
 * is computed 16 tokens a step, so it reports 16, 32, ..., 96 and 100 in
 * consecutive steps, the last one in the step of its first token, with
 * the unchunked greedy ids.  The same prompt without progress reports
 * nothing.
 */
START_TEST(test_prefill_progress)
{
	const char *args[] = { "--max-batch-tokens", "16", NULL };
	int32_t want[8];
	struct cp_client *c;
	struct cp_params p;
	struct stream s[2];
	int i, k, n_want;
	struct cpd d;

	n_want = golden(long_prompt, 8, want);
	ck_assert_int_eq(n_want, 8);
	cpd_start(&d, args);
	c = client(&d, 0);
	for (k = 0; k < 2; k++) {
		greedy(&p, (uint32_t)n_want);
		p.progress = k == 0;
		stream_init(&s[k], cp_submit(c, long_prompt,
		    strlen(long_prompt), &p));
		ck_assert_int_gt(s[k].id, 0);
		drain_streams(c, &s[k], 1);
		ck_assert_int_eq(s[k].type, CP_EVENT_DONE);
		ck_assert_uint_eq(s[k].n_prompt, LONG_N_PROMPT);
		assert_ids(&s[k], want, n_want);
	}
	ck_assert_int_eq(s[0].n_prog, 7);
	for (i = 0; i < 7; i++) {
		ck_assert_uint_eq(s[0].prog[i], i < 6 ? 16 * (i + 1) :
		    LONG_N_PROMPT);
		ck_assert_uint_eq(s[0].prog_total[i], LONG_N_PROMPT);
		if (i > 0)
			ck_assert_uint_eq(s[0].prog_step[i],
			    s[0].prog_step[i - 1] + 1);
	}
	ck_assert_uint_eq(s[0].prog_step[6], s[0].steps[0]);
	ck_assert_int_eq(s[1].n_prog, 0);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_prefill_progress);

/* ---- a client killed -------------------------------------------------- */

static bool
settled_one(const struct cp_stats *st)
{
	return st->clients == 1 && st->requests_active == 0 &&
	    st->kv_blocks_used == 0;
}

/* requests_total before the submission paused_or_ended() waits for. */
static uint64_t requests_before;

/*
 * The request submitted after requests_before paused, or already ended:
 * on a loaded machine the engine thread can run a request to the end of
 * the context before the I/O thread, which pauses it, sees its events.
 */
static bool
paused_or_ended(const struct cp_stats *st)
{
	return st->requests_total > requests_before &&
	    (st->requests_paused == 1 || st->requests_active == 0);
}

/*
 * Submits ref_prompt with p on c (16 CQ slots, nothing else in flight)
 * until the request is paused, mid-stream, with its ring full; the
 * attempts that ran to their end first are read and dropped.
 */
static void
submit_paused(struct cp_client *c, const struct cp_params *p,
    struct stream *s)
{
	struct cp_stats st;
	int tries;

	for (tries = 0; tries < 10; tries++) {
		stats(c, &st);
		requests_before = st.requests_total;
		stream_init(s, cp_submit(c, ref_prompt, strlen(ref_prompt),
		    p));
		ck_assert_int_gt(s->id, 0);
		stats_until(c, &st, paused_or_ended, "the request paused");
		if (st.requests_paused == 1)
			return;
		drain_streams(c, s, 1);
	}
	ck_abort_msg("the request ran to its end %d times", tries);
}

START_TEST(test_client_killed)
{
	struct cp_client *c;
	struct cp_stats st, st0;
	struct cp_params p;
	struct stream s;
	struct cpd d;
	int base_fds, fds = -1, maps = -1, i, tries, pipefd[2], again[2];
	pid_t k;
	char b;

	cpd_start(&d, NULL);
	c = client(&d, 0);
	stats(c, &st0);
	base_fds = hd_count_fds(d.pid);
	ck_assert_int_gt(base_fds, 0);
	ck_assert_int_eq(hd_count_memfd_maps(d.pid), 1);
	ck_assert_int_eq(pipe(pipefd), 0);
	ck_assert_int_eq(pipe(again), 0);
	fflush(NULL);
	k = fork();
	ck_assert_int_ge(k, 0);
	if (k == 0) {
		struct cp_connect_opts o;
		struct cp_client *kc;
		struct cp_event ev;

		close(pipefd[0]);
		close(again[1]);
		cp_connect_opts_init(&o);
		o.socket_path = d.sock;
		o.cq_entries = 16;
		greedy(&p, 0);
		if (cp_connect(&o, &kc) < 0)
			_exit(1);
		/*
		 * A byte on `again`: the last request ended; read its events
		 * to its DONE (the ring empty again), submit anew.
		 */
		for (;;) {
			if (cp_submit(kc, ref_prompt, strlen(ref_prompt),
			    &p) < 0 || cp_next_event(kc, &ev, WAIT_MS) < 0)
				_exit(1);
			b = 1;
			if (write(pipefd[1], &b, 1) != 1)
				_exit(1);
			if (read(again[0], &b, 1) != 1)
				break;
			do
				if (cp_next_event(kc, &ev, WAIT_MS) < 0)
					_exit(1);
			while (ev.type != CP_EVENT_DONE);
		}
		pause();	/* mid-stream, its ring full */
		_exit(0);
	}
	close(pipefd[1]);
	close(again[0]);
	/* Its request holds KV, paused once its 16 slots are full. */
	for (tries = 0; tries < 10; tries++) {
		requests_before = st0.requests_total + (uint64_t)tries;
		ck_assert_int_eq(read(pipefd[0], &b, 1), 1);
		stats_until(c, &st, paused_or_ended,
		    "the killed client's request paused");
		if (st.requests_paused == 1)
			break;
		ck_assert_int_eq(write(again[1], &b, 1), 1);
	}
	ck_assert_msg(tries < 10, "the request ran to its end %d times", tries);
	close(again[1]);
	close(pipefd[0]);
	ck_assert_uint_gt(st.kv_blocks_used, 0);
	ck_assert_uint_eq(st.clients, 2);
	ck_assert_int_gt(hd_count_fds(d.pid), base_fds);
	ck_assert_int_eq(hd_count_memfd_maps(d.pid), 2);

	greedy(&p, 64);
	stream_init(&s, cp_submit(c, ref_prompt, strlen(ref_prompt), &p));
	ck_assert_int_gt(s.id, 0);
	kill(k, SIGKILL);
	ck_assert_int_eq(waitpid(k, NULL, 0), k);
	drain_streams(c, &s, 1);
	assert_ids(&s, (const int32_t *)ref_ids, 64);
	ck_assert_int_eq(s.finish, CP_DONE_LENGTH);

	/* Blocks, descriptors and mapping of the dead client released. */
	stats_until(c, &st, settled_one, "the dead client gone");
	ck_assert_uint_eq(st.kv_blocks_free, st.kv_blocks_total);
	ck_assert_uint_eq(st.requests_paused, 0);
	ck_assert_uint_eq(st.disconnects[CP_DISC_CLOSED] +
	    st.disconnects[CP_DISC_EXITED], st0.disconnects[CP_DISC_CLOSED] +
	    st0.disconnects[CP_DISC_EXITED] + 1);
	ck_assert_uint_eq(st.protocol_errors, 0);
	for (i = 0; i < 500; i++) {
		fds = hd_count_fds(d.pid);
		maps = hd_count_memfd_maps(d.pid);
		if (fds == base_fds && maps == 1)
			break;
		usleep(10000);
	}
	ck_assert_int_eq(fds, base_fds);
	ck_assert_int_eq(maps, 1);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_client_killed);

/* ---- clients that write garbage --------------------------------------- */

/* Publishes one SQ entry as is (a raw client may write anything). */
static void
raw_put(struct raw_client *rc, const struct cp_sqe *e)
{
	memcpy(&rc->sq[rc->sq_tail & (rc->w.sq_entries - 1)], e, sizeof(*e));
	ring_store_release(&rc->ctl->sq_tail.v, ++rc->sq_tail);
	raw_wake(rc);
}

START_TEST(test_garbage_clients)
{
	struct raw_client rc[5];
	struct cp_client *c;
	struct cp_stats st;
	struct cp_params p;
	struct cp_sqe e;
	struct stream s;
	struct cpd d;
	char want[128];
	int i;

	cpd_start(&d, NULL);
	c = client(&d, 0);
	greedy(&p, 64);
	stream_init(&s, cp_submit(c, ref_prompt, strlen(ref_prompt), &p));
	ck_assert_int_gt(s.id, 0);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(raw_connect(d.sock, &rc[i], 0, 0, 0), 0);

	/* 0: sq_tail more than the ring's capacity past sq_head. */
	ring_store_release(&rc[0].ctl->sq_tail.v, rc[0].w.sq_entries + 1);
	raw_wake(&rc[0]);
	/* 1: cq_head ahead of cq_tail, then a request to answer. */
	ring_store_release(&rc[1].ctl->cq_head.v, 5);
	ck_assert_int_eq(raw_submit(&rc[1], 1, "Once", 4), 0);
	/* 2: an opcode that does not exist. */
	memset(&e, 0, sizeof(e));
	e.op = 9;
	e.req_id = 1;
	raw_put(&rc[2], &e);
	/* 3: an arena range past the arena's end. */
	memset(&e, 0, sizeof(e));
	e.op = CP_OP_SUBMIT;
	e.req_id = 1;
	e.arena_off = rc[3].w.arena_bytes - 2;
	e.arena_len = 16;
	e.params.top_p = 1.0f;
	e.params.repeat_penalty = 1.0f;
	raw_put(&rc[3], &e);
	/* 4: a CANCEL of a request never submitted. */
	memset(&e, 0, sizeof(e));
	e.op = CP_OP_CANCEL;
	e.req_id = 7;
	raw_put(&rc[4], &e);

	for (i = 0; i < 5; i++) {
		ck_assert_msg(raw_wait_closed(&rc[i], WAIT_MS),
		    "garbage client %d still connected", i);
		raw_close(&rc[i]);
	}
	drain_streams(c, &s, 1);
	assert_ids(&s, (const int32_t *)ref_ids, 64);
	ck_assert_int_eq(s.finish, CP_DONE_LENGTH);

	/* Each one's reason is on cpd's stderr, as a warning. */
	snprintf(want, sizeof(want), "sq_tail %u - sq_head 0 exceeds %u "
	    "entries; disconnected", CP_SQ_DEFAULT + 1, CP_SQ_DEFAULT);
	ck_assert_msg(cpd_log_has(&d, want), "log lacks '%s'", want);
	ck_assert(cpd_log_has(&d, "cq_head 5 inconsistent with cq_tail 0; "
	    "disconnected"));
	ck_assert(cpd_log_has(&d, "unknown opcode 9; disconnected"));
	snprintf(want, sizeof(want), "req 1: arena range %u+16 outside %u "
	    "bytes; disconnected", CP_ARENA_DEFAULT - 2, CP_ARENA_DEFAULT);
	ck_assert_msg(cpd_log_has(&d, want), "log lacks '%s'", want);
	ck_assert(cpd_log_has(&d, "op 3 for unknown request 7; disconnected"));
	ck_assert(cpd_log_has(&d, "cpd: warning: client "));

	stats(c, &st);
	ck_assert_uint_eq(st.protocol_errors, 5);
	ck_assert_uint_eq(st.disconnects[CP_DISC_PROTOCOL], 5);
	ck_assert_uint_eq(st.clients, 1);
	cp_close(c);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_garbage_clients);

/* ---- cancel mid-prefill and mid-decode ---------------------------------- */

/*
 * Both requests paused, or every live one paused after one of them ended:
 * on a loaded machine the engine thread can run A to the end of the
 * context before the I/O thread, which pauses requests, sees its events.
 */
static bool
settled(const struct cp_stats *st)
{
	return st->requests_paused == 2 || (st->requests_active < 2 &&
	    st->requests_paused == st->requests_active);
}

/*
 * One attempt on a fresh client with a 16-slot ring: B (100 tokens,
 * prefilled one token a step) is submitted, then A; A's events fill the
 * ring and both are paused, A mid-decode and B, unless it was slow to
 * arrive, mid-prefill; then both are cancelled.  (One of them may also run
 * to its end first; that attempt is not counted.)  Nothing else runs, so the
 * steps after the pause are the release steps, and the DONEs say which.
 * Returns 1 when B was cancelled mid-prefill (asserted then), 0 to retry.
 */
static int
cancel_attempt(const struct cpd *d, const int32_t *want, int n_want)
{
	struct cp_client *c;
	struct cp_stats st;
	struct cp_params p;
	struct stream s[2];	/* A, B */
	uint64_t s0;
	int mid_prefill;

	c = client(d, 16);
	greedy(&p, 16);
	stream_init(&s[1], cp_submit(c, long_prompt, strlen(long_prompt),
	    &p));
	greedy(&p, 0);
	stream_init(&s[0], cp_submit(c, ref_prompt, strlen(ref_prompt), &p));
	ck_assert_int_gt(s[0].id, 0);
	ck_assert_int_gt(s[1].id, 0);
	stats_until(c, &st, settled, "both requests paused or one ended");
	if (st.requests_paused != 2) {
		/* One ran to its end first: cancel the other, try again. */
		ck_assert_int_eq(cp_cancel(c, s[0].id), 0);
		ck_assert_int_eq(cp_cancel(c, s[1].id), 0);
		drain_streams(c, s, 2);
		cp_close(c);
		return 0;
	}
	ck_assert_uint_eq(st.requests_running, 2);
	ck_assert_uint_eq(st.requests_waiting, 0);
	ck_assert_uint_gt(st.kv_blocks_used, 0);
	s0 = st.steps;
	ck_assert_int_eq(cp_cancel(c, s[1].id), 0);
	ck_assert_int_eq(cp_cancel(c, s[0].id), 0);
	drain_streams(c, s, 2);
	ck_assert_int_eq(s[0].finish, CP_DONE_CANCELLED);
	ck_assert_int_eq(s[1].finish, CP_DONE_CANCELLED);
	/* Mid-decode: tokens sent, the cpmodel ids so far. */
	ck_assert_int_gt(s[0].n, 0);
	ck_assert_int_lt(s[0].n, n_want);
	assert_ids(&s[0], want, s[0].n);
	/* Released by the next step after each cancel reached the engine. */
	ck_assert_uint_gt(s[0].end_step, s0);
	ck_assert_uint_gt(s[1].end_step, s0);
	ck_assert_uint_le(s[0].end_step, s0 + 2);
	ck_assert_uint_le(s[1].end_step, s0 + 2);
	stats(c, &st);
	ck_assert_uint_eq(st.steps, s[0].end_step > s[1].end_step ?
	    s[0].end_step : s[1].end_step);
	ck_assert_uint_eq(st.kv_blocks_used, 0);
	ck_assert_uint_eq(st.kv_blocks_free, st.kv_blocks_total);
	ck_assert_uint_eq(st.requests_running, 0);
	ck_assert_uint_eq(st.requests_paused, 0);
	ck_assert_uint_eq(st.requests_active, 0);
	mid_prefill = s[1].n == 0;
	if (mid_prefill) {
		ck_assert_uint_eq(s[1].n_gen, 0);
		ck_assert_int_ge(s[0].n, 16);	/* A alone filled the ring */
	}
	cp_close(c);
	return mid_prefill;
}

START_TEST(test_cancel_frees_blocks)
{
	const char *args[] = { "--max-batch-tokens", "32",
	    "--max-prefill-chunk", "1", NULL };
	int32_t want[N_CTX];
	struct cpd d;
	int n_want, tries;

	n_want = golden(ref_prompt, N_CTX - REF_N_PROMPT, want);
	ck_assert_int_eq(n_want, N_CTX - REF_N_PROMPT);
	cpd_start(&d, args);
	for (tries = 0; tries < 10 && !cancel_attempt(&d, want, n_want);
	    tries++)
		;
	ck_assert_msg(tries < 10, "never paused mid-prefill");
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_cancel_frees_blocks);

/* ---- the daemon killed --------------------------------------------------- */

START_TEST(test_daemon_killed)
{
	struct cp_client *c;
	struct cp_stats st;
	struct cp_params p;
	struct cp_event ev;
	struct stream s;
	struct cpd d;
	uint64_t t0;
	pid_t k;

	cpd_start(&d, NULL);
	c = client(&d, 0);
	greedy(&p, 8);
	stream_init(&s, cp_submit(c, ref_prompt, strlen(ref_prompt), &p));
	ck_assert_int_gt(s.id, 0);
	drain_streams(c, &s, 1);
	assert_ids(&s, (const int32_t *)ref_ids, 8);
	/* The client waits for events; the daemon dies meanwhile. */
	fflush(NULL);
	k = fork();
	ck_assert_int_ge(k, 0);
	if (k == 0) {
		usleep(200 * 1000);
		kill(d.pid, SIGKILL);
		_exit(0);
	}
	t0 = clock_ms();
	ck_assert_int_eq(cp_next_event(c, &ev, 10000), CP_EDEAD);
	ck_assert_uint_lt(clock_ms() - t0, 10000);
	ck_assert_int_eq(waitpid(k, NULL, 0), k);
	ck_assert_int_eq(cpd_wait(&d), -1);	/* killed by the signal */
	ck_assert_int_eq(cp_stats(c, &st), CP_EDEAD);
	ck_assert_int_eq(cp_submit(c, "x", 1, NULL), CP_EDEAD);
	cp_close(c);
	cpd_cleanup(&d);
}
END_TEST
SUITE_TEST("cpd", test_daemon_killed);

/* ---- SIGTERM: drain ----------------------------------------------------- */

static bool
is_draining(const struct cp_stats *st)
{
	return st->draining != 0;
}

static bool
none_active(const struct cp_stats *st)
{
	return st->requests_active == 0;
}

/* The request in flight finishes; a new one and a new client are refused. */
START_TEST(test_drain_finishes)
{
	struct cp_connect_opts o;
	struct cp_client *c, *c2 = NULL;
	struct cp_stats st;
	struct cp_params p;
	struct stream s[2];
	struct stat sb;
	int32_t want[100];
	struct cpd d;
	int n_want;

	n_want = golden(ref_prompt, 100, want);
	ck_assert_int_eq(n_want, 100);
	cpd_start(&d, NULL);
	c = client(&d, 16);
	greedy(&p, 100);
	/* In flight for sure: paused until we read. */
	submit_paused(c, &p, &s[0]);
	stats(c, &st);
	ck_assert_uint_eq(st.requests_active, 1);
	ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
	stats_until(c, &st, is_draining, "the drain");
	/* No new clients: the socket is gone. */
	ck_assert_int_eq(stat(d.sock, &sb), -1);
	cp_connect_opts_init(&o);
	o.socket_path = d.sock;
	ck_assert_int_lt(cp_connect(&o, &c2), 0);
	/* No new requests: an ERROR event says why. */
	stream_init(&s[1], cp_submit(c, "x", 1, &p));
	ck_assert_int_gt(s[1].id, 0);
	drain_streams(c, s, 2);
	ck_assert_int_eq(s[0].type, CP_EVENT_DONE);
	ck_assert_int_eq(s[0].finish, CP_DONE_LENGTH);
	ck_assert_uint_eq(s[0].n_gen, 100);
	assert_ids(&s[0], want, 100);
	ck_assert_int_eq(s[1].type, CP_EVENT_ERROR);
	ck_assert_int_eq(s[1].error, -ESHUTDOWN);
	ck_assert_int_eq(cpd_wait(&d), 0);
	ck_assert(cpd_log_has(&d, "draining"));
	ck_assert(cpd_log_has(&d, "drained"));
	cp_close(c);
	cpd_cleanup(&d);
}
END_TEST
SUITE_TEST("cpd", test_drain_finishes);

/* A request outlasting the drain timeout is cancelled, its DONE delivered. */
START_TEST(test_drain_cancels)
{
	const char *args[] = { "--drain-timeout", "100ms", NULL };
	struct cp_client *c;
	struct cp_stats st;
	struct cp_params p;
	struct stream s;
	int32_t want[N_CTX];
	struct cpd d;
	int n_want;

	n_want = golden(ref_prompt, N_CTX - REF_N_PROMPT, want);
	ck_assert_int_eq(n_want, N_CTX - REF_N_PROMPT);
	cpd_start(&d, args);
	c = client(&d, 16);
	greedy(&p, 0);
	submit_paused(c, &p, &s);
	ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
	/* Cancelled at the timeout; its DONE waits for room in the ring. */
	stats_until(c, &st, none_active, "the request cancelled");
	ck_assert(st.draining);
	drain_streams(c, &s, 1);
	ck_assert_int_eq(s.type, CP_EVENT_DONE);
	ck_assert_int_eq(s.finish, CP_DONE_CANCELLED);
	ck_assert_int_ge(s.n, 16);
	ck_assert_int_lt(s.n, n_want);
	assert_ids(&s, want, s.n);
	ck_assert_int_eq(cpd_wait(&d), 0);
	ck_assert(cpd_log_has(&d, "requests cancelled"));
	cp_close(c);
	cpd_cleanup(&d);
}
END_TEST
SUITE_TEST("cpd", test_drain_cancels);

/* A second SIGTERM stops at once, long before the drain timeout. */
START_TEST(test_second_signal)
{
	const char *args[] = { "--drain-timeout", "3600s", NULL };
	struct cp_client *c;
	struct cp_stats st;
	struct cp_params p;
	struct cp_event ev;
	struct stream s;
	struct cpd d;
	int r;

	cpd_start(&d, args);
	c = client(&d, 16);
	greedy(&p, 0);
	submit_paused(c, &p, &s);
	ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
	stats_until(c, &st, is_draining, "the drain");
	ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
	ck_assert_int_eq(cpd_wait(&d), 0);
	while ((r = cp_next_event(c, &ev, WAIT_MS)) == 0)
		ck_assert_int_eq(ev.type, CP_EVENT_TOKEN);
	ck_assert_int_eq(r, CP_EDEAD);
	cp_close(c);
	cpd_cleanup(&d);
}
END_TEST
SUITE_TEST("cpd", test_second_signal);

/* A bad --drain-timeout is refused before anything starts. */
START_TEST(test_drain_timeout_flag)
{
	static const char *const bad[] = { "10", "-1s", "1h", "3601s", "s",
	    "" };
	const char *argv[] = { cpd_bin, "-m", model, "--drain-timeout", NULL,
	    NULL };
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		argv[4] = bad[i];
		ck_assert_msg(prog_runv(argv, NULL) == 78,
		    "--drain-timeout '%s' accepted", bad[i]);
	}
}
END_TEST
SUITE_TEST("cpd", test_drain_timeout_flag);

SUITE_CASE("cpd", 120);

int
main(void)
{
	int rc;

	if ((model = cpd_need("check_daemon", cpd_bin, cpmodel_bin,
	    sizeof(cpd_bin), "aidreams260K.gguf")) == NULL)
		return 77;
	signal(SIGPIPE, SIG_IGN);
	rc = suite_main(suite_registered("daemon"));
	free(model);
	return rc;
}
