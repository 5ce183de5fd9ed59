/*
 * check_faults.c - the daemon's own calls fail, one at a time, and it
 * still serves: fault sweeps over a fixed workload (tests/lib/fault.h).
 *
 * The daemon runs in a child process (cpd_harness.h: server.c and the mock
 * engine) linked with libcpdaemon-faults.a, whose allocations and system
 * calls go through the fault wrappers.  The workload: client B connects
 * and submits a long prompt; then counting starts, and client A connects,
 * submits a chunked prompt, reads a few tokens, cancels it, submits a
 * second one, a prompt of token ids and a chat request with a stop string
 * and reads each to its end, asks for the stats and closes; B reads its
 * request to the end.  A first run counts the calls N of each
 * class; then, per class, runs where call k fails (k = 1..N, or a seeded
 * sample when N is larger than the cap) each demand:
 *
 *  1. the daemon is alive and, stopped, exits 0 (no LSan report in a
 *     SAN=1 build: the leak check runs at its exit);
 *  2. every request the daemon accepted ended with a terminal event (DONE
 *     or ERROR), or its connection was closed (CP_EDEAD): never silence;
 *  3. B's output is exactly its prompt (the mock echoes it);
 *  4. its descriptors, session mappings and clients are back to what they
 *     were before the workload.
 *
 * test_engine_serving does the same for the real engine's threads (the
 * worker on aidreams260K): every request ends, the other's greedy ids
 * are llama.cpp's, its KV blocks come back.
 *
 * CP_FAULT_CAP (runs per class, default 200) and CP_FAULT_SEED change the
 * sample; `make check-faults` runs every call up to 2000 a class.  To
 * look into one run: CK_RUN_CASE=sweep CP_FAULT_ONLY=k[:i]
 * (call k, the class's i-th errno) CP_FAULT_VERBOSE=1 (the failed call's
 * stack and the daemon's log).
 */
#include "cpclient.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_port.h"
#include "lib/aidreams.h"
#include "lib/clock.h"
#include "lib/cpd_harness.h"
#include "lib/fault.h"
#include "lib/fixtures.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"
#include "model.h"
#include "tokenizer.h"
#include "worker.h"

#define WAIT_MS 3000		/* per event: longer is silence */
#define FAIL_MAX 12		/* failures described per class */

static const char prompt_b[] =
    "The other client's stream: it runs from before the fault until after "
    "it, and every byte of it must come back exactly as sent.";
static const char prompt_a1[] =
    "a chunked prompt, computed a few elements a step, then cancelled "
    "after its first tokens";
static const char prompt_a2[] = "a second request, read to its end";

/* The errno values swept for each class, in turn. */
static const int class_errs[FAULT_NCLASS][4] = {
	[FAULT_ALLOC] = { ENOMEM },
	[FAULT_SUBMIT] = { EAGAIN, EINTR, ENOMEM, EIO },
	[FAULT_CQE] = { EIO, ECANCELED, ENOMEM, EAGAIN },
	[FAULT_IO] = { EINTR, EAGAIN, EIO, FAULT_SHORT },
	[FAULT_MEM] = { ENOMEM, EMFILE },
	[FAULT_THREAD] = { EAGAIN },
	[FAULT_FUTEX] = { EINTR, EAGAIN },
};

/* The sweep fails the daemon's calls (0) or client A's (1). */
static int client_side;

struct tally {
	unsigned runs, fired, accepted, ended, dropped, lib_errors, failed;
	char why[FAIL_MAX][256];
};

/* What one run saw. */
struct outcome {
	unsigned accepted;	/* requests cp_submit() accepted */
	unsigned ended;		/* of those, with a DONE or ERROR event */
	unsigned dropped;	/* of those, ended by CP_EDEAD */
	unsigned lib_errors;	/* of those, ended by another error the
				   client library returned (client side) */
	char bad[160];		/* the first broken promise, or "" */
};

static void
bad(struct outcome *o, const char *fmt, const char *what, long v)
{
	if (o->bad[0] == '\0')
		snprintf(o->bad, sizeof(o->bad), fmt, what, v);
}

static int
connect_to(const struct hd *d, struct cp_client **c)
{
	struct cp_connect_opts o;

	cp_connect_opts_init(&o);
	o.socket_path = d->path;
	o.timeout_ms = WAIT_MS;
	return cp_connect(&o, c);
}

/*
 * Reads request id to its end, appending text to out (size bytes) unless
 * out is NULL; after ntok tokens (> 0) cancels it once.  Counts the
 * request's end in o; returns the terminal event type, CP_EDEAD, or 0
 * for silence.
 */
static int
drain(struct cp_client *c, int id, char *out, size_t size, int ntok,
    struct outcome *o, const char *who)
{
	struct cp_event ev;
	size_t used = out != NULL ? strlen(out) : 0;
	int r, seen = 0;

	for (;;) {
		r = cp_next_event(c, &ev, WAIT_MS);
		if (r == CP_EDEAD) {
			o->dropped++;
			return CP_EDEAD;
		}
		if (r < 0 && r != -ETIMEDOUT && client_side) {
			o->lib_errors++;	/* the library said why */
			return CP_EDEAD;
		}
		if (r < 0) {
			bad(o, "%s: no terminal event (%ld)", who, r);
			return 0;
		}
		if (ev.req_id != id)
			continue;
		if (ev.type == CP_EVENT_DONE || ev.type == CP_EVENT_ERROR) {
			o->ended++;
			return ev.type;
		}
		if (ev.type != CP_EVENT_TOKEN)
			continue;
		if (out != NULL && used + ev.text_len < size) {
			memcpy(out + used, ev.text, ev.text_len);
			used += ev.text_len;
			out[used] = '\0';
		}
		if (ntok > 0 && ++seen == ntok)
			(void)cp_cancel(c, id);
	}
}

/* Reads request id's first token into out: the daemon has taken it in. */
static void
first_token(struct cp_client *c, int id, char *out, size_t size)
{
	struct cp_event ev;

	do {
		ck_assert_int_eq(cp_next_event(c, &ev, WAIT_MS), 0);
		ck_assert_int_eq(ev.req_id, id);
	} while (ev.type != CP_EVENT_TOKEN);
	ck_assert_uint_lt(ev.text_len, size);
	memcpy(out, ev.text, ev.text_len);
	out[ev.text_len] = '\0';
}

/* Client A's part, under faults. */
static void
client_a(const struct hd *d, struct outcome *o)
{
	static const int32_t ids_a3[] = { 't', 'o', 'k', 'e', 'n', 's' };
	static const char *const stops[] = { "stop" };
	static const struct cp_message msgs[] = {
		{ CP_CHAT_SYSTEM, "Be brief.", 9 },
		{ CP_CHAT_USER, "a chat request, with a stop string", 34 },
	};
	struct cp_client *c = NULL;
	struct cp_params p;
	struct cp_stats st;
	int id;

	if (connect_to(d, &c) < 0)
		return;		/* refused: a clean error */
	cp_params_init(&p);
	id = cp_submit(c, prompt_a1, strlen(prompt_a1), &p);
	if (id >= 0) {
		o->accepted++;
		if (drain(c, id, NULL, 0, 3, o, "A1") == CP_EDEAD)
			goto out;
	}
	id = cp_submit(c, prompt_a2, strlen(prompt_a2), &p);
	if (id >= 0) {
		o->accepted++;
		if (drain(c, id, NULL, 0, 0, o, "A2") == CP_EDEAD)
			goto out;
	}
	id = cp_submit_tokens(c, ids_a3, sizeof(ids_a3) / sizeof(ids_a3[0]),
	    &p);
	if (id >= 0) {
		o->accepted++;
		if (drain(c, id, NULL, 0, 0, o, "A3") == CP_EDEAD)
			goto out;
	}
	p.stop = stops;
	p.n_stop = 1;
	id = cp_submit_chat(c, msgs, 2, &p);
	if (id >= 0) {
		o->accepted++;
		if (drain(c, id, NULL, 0, 0, o, "A4") == CP_EDEAD)
			goto out;
	}
	(void)cp_stats(c, &st);
out:
	cp_close(c);
}

/* Waits up to 2 s for pid's descriptors and session maps to come back to fds, maps. */
static int
settled(pid_t pid, int fds, int maps)
{
	int i;

	for (i = 0; i < 200; i++) {
		if (hd_count_fds(pid) == fds && hd_count_memfd_maps(pid) == maps)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* Prints the daemon's log after what went wrong (CP_FAULT_VERBOSE). */
static void
show_log(const struct hd *d, const char *what)
{
	char line[512];
	FILE *f = fopen(d->log, "re");

	printf("---- %s; the daemon's log:\n", what);
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		fputs(line, stdout);
	if (f != NULL)
		fclose(f);
}

/* One run of the workload with call nth of cls failing with err. */
static void
run_once(int cls, uint64_t nth, int err, struct outcome *o)
{
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_wire_stats st;
	struct cp_client *b = NULL;
	struct cp_params p;
	struct hd d;
	char out[512] = "";
	int fds, maps, own_fds, idb, r, st_exit;

	memset(o, 0, sizeof(*o));
	hd_config(&cfg);
	mock_opts_default(&mo);
	mo.step_us = 100;
	mo.prefill_chunk = 8;
	fault_plan(cls, nth, err);
	ck_assert_int_eq(hd_start(&d, &cfg, &mo), 0);
	fds = hd_count_fds(d.pid);
	maps = hd_count_memfd_maps(d.pid);
	ck_assert_int_eq(connect_to(&d, &b), 0);
	cp_params_init(&p);
	idb = cp_submit(b, prompt_b, strlen(prompt_b), &p);
	ck_assert_int_ge(idb, 0);
	first_token(b, idb, out, sizeof(out));

	fault_target(client_side ? getpid() : d.pid);
	own_fds = hd_count_fds(getpid());
	fault_count(1);
	client_a(&d, o);
	if (client_side)
		fault_count(0);
	r = drain(b, idb, out, sizeof(out), 0, o, "B");
	o->accepted++;
	fault_count(0);
	if (hd_count_fds(getpid()) != own_fds)
		bad(o, "%s: %ld descriptors left over in the client's process",
		    "A", (long)hd_count_fds(getpid()) - own_fds);

	if (r != CP_EVENT_DONE || strcmp(out, prompt_b) != 0)
		bad(o, "%s: the other client's output differs (end %ld)", "B",
		    r);
	cp_close(b);
	if (kill(d.pid, 0) < 0 || hd_wait(&d, 0) != -1) {
		bad(o, "%s: the daemon died (%ld)", "daemon", 0);
		if (getenv("CP_FAULT_VERBOSE") != NULL)
			show_log(&d, o->bad);
		hd_stop(&d);
		return;
	}
	if (!settled(d.pid, fds, maps))
		bad(o, "%s: %ld descriptors or session maps left over",
		    "daemon", (long)hd_count_fds(d.pid) - fds);
	if (hd_stats(&d, &st) < 0)
		bad(o, "%s: no stats (%ld)", "daemon", 0);
	else if (st.clients != 1 || st.requests_active != 0)
		bad(o, "%s: %ld clients or requests left over", "daemon",
		    (long)(st.clients - 1 + st.requests_active));
	if (o->bad[0] != '\0' && getenv("CP_FAULT_VERBOSE") != NULL)
		show_log(&d, o->bad);
	st_exit = hd_stop(&d);
	if (st_exit != 0)
		bad(o, "%s: exit status %ld at stop", "daemon", st_exit);
}

/* Cap on runs per class: CP_FAULT_CAP, else def. */
static unsigned
cap_runs(unsigned def)
{
	const char *s = getenv("CP_FAULT_CAP");

	return s != NULL && atoi(s) > 0 ? (unsigned)atoi(s) : def;
}

/* A small deterministic generator for the sample (xorshift64). */
static uint64_t
next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void
sweep(int cls, uint64_t n, struct tally *t)
{
	const char *only = getenv("CP_FAULT_ONLY");
	const char *seed_s = getenv("CP_FAULT_SEED");
	uint64_t seed = seed_s != NULL ? strtoull(seed_s, NULL, 0) : 20;
	unsigned cap = cap_runs(200), i, nerr = 0;
	struct outcome o;
	uint64_t k;
	int err;

	while (nerr < 4 && class_errs[cls][nerr] != 0)
		nerr++;
	seed = seed * 2654435761u + (uint64_t)cls + 1;
	if (only != NULL) {	/* one run, "k:i" (k: the call, i: errno index) */
		k = strtoull(only, NULL, 10);
		err = class_errs[cls][strchr(only, ':') != NULL ?
		    atoi(strchr(only, ':') + 1) % nerr : 0];
		run_once(cls, k, err, &o);
		printf("one run: %s\n", o.bad);
		return;
	}
	for (i = 0; i < (n <= cap ? n : cap); i++) {
		k = n <= cap ? i + 1 : 1 + next_rand(&seed) % n;
		err = class_errs[cls][i % nerr];
		run_once(cls, k, err, &o);
		t->runs++;
		t->fired += fault_fired();
		t->accepted += o.accepted;
		t->ended += o.ended;
		t->dropped += o.dropped;
		t->lib_errors += o.lib_errors;
		if (o.bad[0] != '\0') {
			if (t->failed < FAIL_MAX)
				snprintf(t->why[t->failed], sizeof(t->why[0]),
				    "%s call %llu (%s): %s", fault_class_name(cls),
				    (unsigned long long)k, err == FAULT_SHORT ?
				    "short" : strerror(err), o.bad);
			t->failed++;
		}
	}
}

/* The calls of each class one clean run makes, counted once per process. */
static uint64_t counted[FAULT_NCLASS];

static void
count_calls(void)
{
	struct outcome o;
	int c;

	ck_assert_int_eq(fault_setup(), 0);
	run_once(-1, 0, 0, &o);
	ck_assert_msg(o.bad[0] == '\0', "clean run: %s", o.bad);
	for (c = 0; c < FAULT_NCLASS; c++)
		counted[c] = fault_calls(c);
	ck_assert_uint_gt(counted[FAULT_ALLOC] + counted[FAULT_IO], 0);
}

/* Sweeps class cls and prints its counts; how many runs broke a promise. */
static unsigned
sweep_class(int cls)
{
	struct tally t;
	unsigned i;

	count_calls();
	memset(&t, 0, sizeof(t));
	sweep(cls, counted[cls], &t);
	printf("faults %s %-6s: %llu calls, %u runs, %u injected, %u "
	    "requests accepted, %u ended by an event, %u by a closed "
	    "connection, %u by a library error, %u runs failed\n",
	    client_side ? "client" : "daemon", fault_class_name(cls),
	    (unsigned long long)counted[cls], t.runs, t.fired, t.accepted,
	    t.ended, t.dropped, t.lib_errors, t.failed);
	for (i = 0; i < t.failed && i < FAIL_MAX; i++)
		printf("  %s\n", t.why[i]);
	fflush(stdout);
	return t.failed;
}

START_TEST(test_count)
{
	int c;

	for (client_side = 0; client_side < 2; client_side++) {
		count_calls();
		for (c = 0; c < FAULT_NCLASS; c++)
			printf("faults %s %-6s: %llu calls in the workload\n",
			    client_side ? "client" : "daemon",
			    fault_class_name(c), (unsigned long long)counted[c]);
	}
	fflush(stdout);
}
END_TEST
SUITE_TEST("count", test_count);

/*
 * A prompt whose copy cannot be allocated ends with ERROR -ENOMEM; the
 * session, and the daemon, go on (the session used to be closed).
 */
START_TEST(test_submit_oom_fails_the_request)
{
	struct srv_config cfg;
	struct cp_client *c;
	struct cp_params p;
	struct cp_event ev;
	struct hd d;
	int id;

	ck_assert_int_eq(fault_setup(), 0);
	hd_config(&cfg);
	fault_plan(FAULT_ALLOC, 1, ENOMEM);
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	cp_params_init(&p);
	fault_count(1);
	id = cp_submit(c, prompt_a2, strlen(prompt_a2), &p);
	ck_assert_int_ge(id, 0);
	ck_assert_int_eq(cp_next_event(c, &ev, WAIT_MS), 0);
	fault_count(0);
	ck_assert_int_eq(fault_fired(), 1);
	ck_assert_int_eq(ev.req_id, id);
	ck_assert_int_eq(ev.type, CP_EVENT_ERROR);
	ck_assert_int_eq(ev.error, -ENOMEM);
	/* The same session serves the next request. */
	id = cp_submit(c, prompt_a2, strlen(prompt_a2), &p);
	ck_assert_int_ge(id, 0);
	do {
		ck_assert_int_eq(cp_next_event(c, &ev, WAIT_MS), 0);
	} while (ev.type == CP_EVENT_TOKEN);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("count", test_submit_oom_fails_the_request);

/* The daemon's classes the workload sweeps, one loop test each. */
static const int sweep_classes[] = {
	FAULT_ALLOC, FAULT_SUBMIT, FAULT_CQE, FAULT_IO, FAULT_MEM,
};

START_TEST(test_sweep)
{
	ck_assert_uint_eq(sweep_class(sweep_classes[_i]), 0);
}
END_TEST
SUITE_LOOP("sweep", test_sweep, 0,
    (int)(sizeof(sweep_classes) / sizeof(sweep_classes[0])));

/* libcpclient's calls in client A fail: each call returns, nothing leaks. */
START_TEST(test_client)
{
	static const int classes[] = {
		FAULT_ALLOC, FAULT_IO, FAULT_MEM, FAULT_FUTEX,
	};
	unsigned i, failed = 0;

	client_side = 1;
	for (i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
		failed += sweep_class(classes[i]);
	ck_assert_msg(failed == 0, "%u client runs broke a promise", failed);
}
END_TEST
SUITE_TEST("client", test_client);

/* ---- release objects ---------------------------------------------------- */

/* Lines of `nm files` (stderr dropped) that contain needle. */
static int
nm_count(const char *files, const char *needle)
{
	char cmd[1024], line[512];
	FILE *f;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "nm %s 2>/dev/null", files);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, needle) != NULL)
			n++;
	pclose(f);
	return n;
}

/*
 * cpd and the libraries programs link carry no trace of the hook; the
 * copies check_faults links do call it.
 */
START_TEST(test_release_untouched)
{
	const char *build = getenv("BUILD");
	char cpd[512], files[1536];

	if (build == NULL || build[0] == '\0')
		build = "build";
	ck_assert_int_eq(prog_find(cpd, sizeof(cpd), "cpd", NULL), 0);
	snprintf(files, sizeof(files), "%s %s/lib/libcpdaemon.a "
	    "%s/lib/libcpengine.a %s/lib/libcpclient.a", cpd, build, build,
	    build);
	ck_assert_int_gt(nm_count(files, " T "), 100);
	ck_assert_int_eq(nm_count(files, "fault_"), 0);
	snprintf(files, sizeof(files), "%s/lib/libcpdaemon-faults.a", build);
	ck_assert_int_gt(nm_count(files, "U fault_malloc"), 0);
}
END_TEST
SUITE_TEST("count", test_release_untouched);

/* ---- the engine's steps ------------------------------------------------ */

/* Takes the port's events into b; the tokens among them, and whether a terminal one came. */
static int
take_tokens(struct engine_port *port, struct ep_batch *b, int *ended)
{
	struct pollfd pfd = { .fd = ep_event_fd(port), .events = POLLIN };
	size_t i, n;
	int tokens = 0;

	if (poll(&pfd, 1, WAIT_MS) != 1)
		return 0;
	n = ep_take_events(port, b);
	for (i = 0; i < n; i++) {
		if (b->ev[i].type == EP_EV_TOKEN)
			tokens++;
		if (b->ev[i].type == EP_EV_DONE || b->ev[i].type == EP_EV_ERROR)
			*ended = 1;
	}
	return tokens;
}

/*
 * One request of the steady-state test (id): the tokens of its steps
 * after the first two turns of events, and the allocations the engine's
 * threads made in them.
 */
static int
steady_once(struct engine_port *port, uint64_t id, uint64_t *allocs)
{
	static const char text[] = "Once upon a time";
	struct ep_batch b;
	struct ep_cmd *c;
	int got = 0, ended = 0, i;

	memset(&b, 0, sizeof(b));
	c = ep_cmd_new(EP_CMD_SUBMIT, sizeof(text) - 1);
	ck_assert_ptr_nonnull(c);
	c->id = id;
	c->params.max_tokens = 0;	/* the context's 128 */
	c->params.top_p = 1.0f;
	c->params.repeat_penalty = 1.0f;
	memcpy(c->data, text, sizeof(text) - 1);
	c->text = (const char *)c->data;
	c->text_len = sizeof(text) - 1;
	ck_assert_int_eq(ep_push(port, c), 0);
	for (i = 0; i < 2 && !ended; i++)
		got += take_tokens(port, &b, &ended);

	fault_plan(-1, 0, 0);
	fault_ignore_thread(1);
	fault_count(1);
	for (got = 0; !ended;)
		got += take_tokens(port, &b, &ended);
	fault_count(0);
	fault_ignore_thread(0);
	*allocs = fault_calls(FAULT_ALLOC);
	ep_batch_fini(&b);
	return got;
}

/*
 * The worker (the real engine on aidreams260K, CPU, one thread) makes no
 * allocation in steady-state decode steps: its buffers are sized before
 * it serves.  Counting starts after two turns of events (the event
 * buffers that circulate between the engine, the port and the io loop
 * reach their size in the first ones: ep_take_events()) and covers the
 * request's decode steps to its end, on the engine's threads only: this
 * one plays the io loop.  A request counts when at least 8 of its steps
 * came after those turns (a busy machine can hold this thread back while
 * the engine runs ahead): up to 5 requests, until one does.
 */
START_TEST(test_steady_steps_allocate_nothing)
{
	struct worker_params wp;
	struct cp_err e = { 0 };
	struct model *m = NULL;
	struct tokenizer *tok = NULL;
	struct engine_port *port;
	struct worker *w = NULL;
	char *path = fx_path("aidreams260K.gguf");
	uint64_t allocs;
	int got = 0, i;

	ck_assert_ptr_nonnull(path);
	ck_assert_int_eq(fault_setup(), 0);
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	ck_assert_msg(tok_load(m->gf, &tok, &e) == 0, "%s", e.msg);
	ck_assert_ptr_nonnull(port = ep_new());
	memset(&wp, 0, sizeof(wp));
	wp.model = m;
	wp.tok = tok;
	wp.backend = "cpu";
	wp.be.n_threads = 1;
	ck_assert_msg(worker_new(&wp, port, &w, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(worker_start(w), 0);
	for (i = 0; i < 5 && got < 8; i++) {
		got = steady_once(port, (uint64_t)i + 1, &allocs);
		printf("faults: %d tokens of steady-state decode steps, %llu "
		    "allocations\n", got, (unsigned long long)allocs);
		ck_assert_uint_eq(allocs, 0);
	}
	ck_assert_int_ge(got, 8);

	ck_assert_int_eq(ep_push_simple(port, EP_CMD_SHUTDOWN, 0, 0), 0);
	ck_assert_int_eq(worker_join(w), 0);
	worker_free(w);
	ep_free(port);
	tok_free(tok);
	model_free(m);
	free(path);
}
END_TEST
SUITE_TEST("engine", test_steady_steps_allocate_nothing);

/* ---- start-up --------------------------------------------------------- */

/*
 * What a start-up sweep runs: starts something with counting on, stops
 * and frees it with counting off; returns 0 or start-up's error.
 */
typedef int (*startup_fn)(void *arg);

struct startup_model {
	struct model *m;
	struct tokenizer *tok;
};

/* ---- the engine serving ------------------------------------------------ */

/* What one run of the engine workload saw. */
struct wk_outcome {
	int ended[2];		/* A's and B's terminal event types, or 0 */
	int ids_b[AID_N_REF];	/* B's greedy ids */
	int n_b;
	char bad[160];		/* the first broken promise, or "" */
};

/* A SUBMIT of text for request id: greedy, at most max_tokens. */
static struct ep_cmd *
greedy_cmd(uint64_t id, const char *text, uint32_t max_tokens)
{
	size_t len = strlen(text);
	struct ep_cmd *c = ep_cmd_new(EP_CMD_SUBMIT, len);

	ck_assert_ptr_nonnull(c);
	c->id = id;
	c->params.max_tokens = max_tokens;
	c->params.top_p = 1.0f;
	c->params.repeat_penalty = 1.0f;
	memcpy(c->data, text, len);
	c->text = (const char *)c->data;
	c->text_len = len;
	return c;
}

/*
 * The engine's side of the workload, this thread playing the io loop:
 * request 1 (A) is cancelled after its third token, request 2 (B, the
 * fixture's prompt) runs to 24 tokens.  Counting on, in the engine's
 * threads only, while they serve.
 */
static void
wk_serve(struct engine_port *port, struct wk_outcome *o)
{
	struct pollfd pfd = { .fd = ep_event_fd(port), .events = POLLIN };
	struct ep_batch b;
	int a_tokens = 0;
	size_t i, n;

	memset(&b, 0, sizeof(b));
	fault_ignore_thread(1);
	fault_count(1);
	ck_assert_int_eq(ep_push(port, greedy_cmd(1, "Lily wanted to", 32)),
	    0);
	ck_assert_int_eq(ep_push(port, greedy_cmd(2, AID_PROMPT, 24)), 0);
	while (o->ended[0] == 0 || o->ended[1] == 0) {
		if (poll(&pfd, 1, WAIT_MS) != 1) {
			snprintf(o->bad, sizeof(o->bad), "%s: no terminal "
			    "event", o->ended[0] == 0 ? "A" : "B");
			break;
		}
		n = ep_take_events(port, &b);
		for (i = 0; i < n; i++) {
			const struct ep_event *ev = &b.ev[i];
			int r = (int)ev->id - 1;

			ck_assert(r == 0 || r == 1);
			if (ev->type == EP_EV_DONE || ev->type == EP_EV_ERROR)
				o->ended[r] = (int)ev->type;
			if (ev->type != EP_EV_TOKEN || ev->token < 0)
				continue;
			if (r == 1 && o->n_b < AID_N_REF)
				o->ids_b[o->n_b++] = ev->token;
			if (r == 0 && ++a_tokens == 3)
				ck_assert_int_eq(ep_push_simple(port,
				    EP_CMD_CANCEL, 0, 1), 0);
		}
	}
	fault_count(0);
	fault_ignore_thread(0);
	ep_batch_fini(&b);
}

/* Waits up to 2 s for the worker to hold no request, sequence or block. */
static int
wk_settled(struct engine_port *port, struct worker *w)
{
	struct worker_stats ws;
	struct ep_stats es;

	for (int i = 0; i < 200; i++) {
		worker_stats(w, &ws);
		ep_stats_get(port, &es);
		if (ws.requests_live == 0 && ws.kv_seqs_live == 0 &&
		    es.kv_blocks_used == 0)
			return 1;
		usleep(10000);
	}
	return 0;
}

/*
 * One run: a fresh worker (one CPU thread) on sm's model, call nth of cls
 * failing with err while it serves; its promises checked into o.
 */
static void
wk_run_once(const struct startup_model *sm, int cls, uint64_t nth, int err,
    struct wk_outcome *o)
{
	struct worker_params wp;
	struct cp_err e = { 0 };
	struct engine_port *port;
	struct worker *w = NULL;

	memset(o, 0, sizeof(*o));
	fault_plan(-1, 0, 0);
	ck_assert_ptr_nonnull(port = ep_new());
	memset(&wp, 0, sizeof(wp));
	wp.model = sm->m;
	wp.tok = sm->tok;
	wp.backend = "cpu";
	wp.be.n_threads = 1;
	wp.no_warmup = true;
	ck_assert_msg(worker_new(&wp, port, &w, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(worker_start(w), 0);
	fault_plan(cls, nth, err);
	wk_serve(port, o);
	/* B's tokens, as far as they went, are llama.cpp's */
	for (int i = 0; i < o->n_b && o->bad[0] == '\0'; i++)
		if (o->ids_b[i] != aid_ref_ids[i])
			snprintf(o->bad, sizeof(o->bad), "B: token %d is %d, "
			    "llama.cpp's %d", i, o->ids_b[i], aid_ref_ids[i]);
	if (o->bad[0] == '\0' && o->ended[1] == EP_EV_DONE && o->n_b != 24)
		snprintf(o->bad, sizeof(o->bad), "B: done after %d tokens",
		    o->n_b);
	if (o->bad[0] == '\0' && !wk_settled(port, w))
		snprintf(o->bad, sizeof(o->bad), "requests, sequences or KV "
		    "blocks left over");
	ck_assert_int_eq(ep_push_simple(port, EP_CMD_SHUTDOWN, 0, 0), 0);
	ck_assert_int_eq(worker_join(w), 0);
	worker_free(w);
	ep_free(port);
}

/*
 * The real engine (aidreams260K) serving two requests while its own
 * allocations or reads and writes fail, one call at a time: every request
 * ends with DONE or ERROR (never silence), B's tokens are llama.cpp's
 * greedy ids as far as they go (all 24 when it ends with DONE), and the
 * requests' KV blocks and sequences all come back.
 */
START_TEST(test_engine_serving)
{
	static const int classes[] = { FAULT_ALLOC, FAULT_IO };
	struct startup_model sm;
	struct wk_outcome o;
	struct cp_err e = { 0 };
	char *path = fx_path("aidreams260K.gguf");
	unsigned cap = cap_runs(200), failed = 0;

	ck_assert_ptr_nonnull(path);
	ck_assert_int_eq(fault_setup(), 0);
	ck_assert_msg(model_load(path, &sm.m, &e) == 0, "%s", e.msg);
	ck_assert_msg(tok_load(sm.m->gf, &sm.tok, &e) == 0, "%s", e.msg);
	for (size_t ci = 0; ci < sizeof(classes) / sizeof(classes[0]); ci++) {
		int cls = classes[ci], nerr = 0, fired = 0, errors = 0;
		uint64_t n, k;

		wk_run_once(&sm, -1, 0, 0, &o);
		ck_assert_msg(o.bad[0] == '\0', "clean run: %s", o.bad);
		ck_assert_int_eq(o.ended[1], EP_EV_DONE);
		n = fault_calls(cls);
		while (nerr < 4 && class_errs[cls][nerr] != 0)
			nerr++;
		for (k = 1; k <= n && k <= cap; k++) {
			wk_run_once(&sm, cls, k, class_errs[cls][k % nerr],
			    &o);
			fired += fault_fired();
			errors += (o.ended[0] == EP_EV_ERROR) +
			    (o.ended[1] == EP_EV_ERROR);
			if (o.bad[0] != '\0') {
				printf("  engine %s call %llu: %s\n",
				    fault_class_name(cls),
				    (unsigned long long)k, o.bad);
				failed++;
			}
		}
		printf("faults engine %-6s: %llu calls, %llu runs, %d injected, "
		    "%d requests ended by ERROR, the others by DONE\n",
		    fault_class_name(cls), (unsigned long long)n,
		    (unsigned long long)(k - 1), fired, errors);
	}
	fflush(stdout);
	ck_assert_uint_eq(failed, 0);
	tok_free(sm.tok);
	model_free(sm.m);
	free(path);
}
END_TEST
SUITE_TEST("engine", test_engine_serving);

/* A port and a worker (two CPU threads, the prefill lane) on aidreams260K. */
static int
start_worker(void *arg)
{
	const struct startup_model *sm = arg;
	struct worker_params wp;
	struct cp_err e = { 0 };
	struct engine_port *port;
	struct worker *w = NULL;
	int r = -ENOMEM;

	fault_count(1);
	port = ep_new();
	if (port == NULL)
		goto out;
	memset(&wp, 0, sizeof(wp));
	wp.model = sm->m;
	wp.tok = sm->tok;
	wp.backend = "cpu";
	wp.be.n_threads = 2;
	wp.prefill_lane_tokens = 32;
	wp.no_warmup = true;
	r = worker_new(&wp, port, &w, &e);
	if (r == 0)
		r = worker_start(w);
	fault_count(0);
	if (r == 0) {
		ck_assert_int_eq(ep_push_simple(port, EP_CMD_SHUTDOWN, 0, 0), 0);
		ck_assert_int_eq(worker_join(w), 0);
	}
out:
	fault_count(0);
	worker_free(w);
	ep_free(port);
	return r;
}

/* A port and a server (the io loop kind the kernel offers) on a socket in dir. */
static int
start_server(void *arg)
{
	const char *dir = arg;
	struct srv_config cfg;
	struct engine_port *port;
	struct server *srv = NULL;
	char path[300];
	int r = -ENOMEM;

	snprintf(path, sizeof(path), "%s/s", dir);
	hd_config(&cfg);
	cfg.socket_path = path;
	fault_count(1);
	port = ep_new();
	if (port != NULL)
		r = srv_new(&cfg, port, &srv);
	fault_count(0);
	srv_free(srv);
	ep_free(port);
	return r;
}

/*
 * For each class, counts the calls fn makes, then fails each in turn:
 * start-up must return an error or succeed, never crash or hang, and leave
 * nothing behind (no LSan report in a SAN=1 build).
 */
static void
sweep_startup(const char *what, startup_fn fn, void *arg)
{
	static const int classes[] = {
		FAULT_ALLOC, FAULT_MEM, FAULT_THREAD, FAULT_IO, FAULT_SUBMIT,
		FAULT_CQE,
	};
	unsigned cap = cap_runs(200), ci, nerr;
	uint64_t n, k;
	int cls, fired, failed;

	ck_assert_int_eq(fault_setup(), 0);
	for (ci = 0; ci < sizeof(classes) / sizeof(classes[0]); ci++) {
		cls = classes[ci];
		fault_plan(-1, 0, 0);
		ck_assert_int_eq(fn(arg), 0);
		n = fault_calls(cls);
		for (nerr = 0; nerr < 4 && class_errs[cls][nerr] != 0; nerr++)
			;
		fired = failed = 0;
		for (k = 1; k <= n && k <= cap; k++) {
			fault_plan(cls, k, class_errs[cls][k % nerr]);
			if (fn(arg) < 0)
				failed++;
			fired += fault_fired();
		}
		printf("faults start-up %-6s %-6s: %llu calls, %llu runs, %d "
		    "injected, %d start-ups failed cleanly, the others "
		    "started\n", what, fault_class_name(cls),
		    (unsigned long long)n, (unsigned long long)(k - 1), fired,
		    failed);
	}
	fflush(stdout);
}

START_TEST(test_startup_worker)
{
	struct startup_model sm;
	struct cp_err e = { 0 };
	char *path = fx_path("aidreams260K.gguf");

	ck_assert_ptr_nonnull(path);
	ck_assert_msg(model_load(path, &sm.m, &e) == 0, "%s", e.msg);
	ck_assert_msg(tok_load(sm.m->gf, &sm.tok, &e) == 0, "%s", e.msg);
	sweep_startup("worker", start_worker, &sm);
	tok_free(sm.tok);
	model_free(sm.m);
	free(path);
}
END_TEST
SUITE_TEST("engine", test_startup_worker);

START_TEST(test_startup_server)
{
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/faults.XXXXXX", tmp_dir());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	sweep_startup("server", start_server, dir);
	rmdir(dir);
}
END_TEST
SUITE_TEST("count", test_startup_server);

SUITE_CASE("count", 120);
SUITE_CASE("sweep", 600);
SUITE_CASE("client", 600);
SUITE_CASE("engine", 300);

int
main(void)
{
	char *path = fx_path("aidreams260K.gguf");

	if (path == NULL)
		suite_case_skip("engine");
	free(path);
	return suite_main(suite_registered("faults"));
}
