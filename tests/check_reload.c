/*
 * check_reload.c - SIGHUP and the scheduler's budgets: build/bin/cpd on
 * the aidreams260K fixture reloads max_prefill_chunk and max_batch_tokens
 * while a client streams, and the engine plans its next steps under them
 * (the chunks a prompt is computed in, as its PROGRESS events show),
 * without dropping the streaming client.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpclient.h"
#include "lib/cpd_proc.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

#define WAIT_MS 20000
#define STREAM_TOKENS 64

static const char prompt[] = "Once upon a time, in a quiet village by the "
    "sea, a small robot collected shells and counted the waves every "
    "morning before the fishermen woke up and the gulls began to sing";

static char cpd_bin[512];
static char *model;
static char file[300];

static void
write_config(const char *text)
{
	FILE *f = fopen(file, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* A client with cq_entries completion slots (0: the default). */
static struct cp_client *
client(const struct cpd *d, uint32_t cq_entries)
{
	struct cp_connect_opts o;
	struct cp_client *c = NULL;

	cp_connect_opts_init(&o);
	o.socket_path = d->sock;
	o.cq_entries = cq_entries;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	return c;
}

/*
 * The prompt on c, with PROGRESS, to its DONE: the most prompt tokens one
 * step computed, and the fewest (but the last step's).
 */
static void
chunks(struct cp_client *c, unsigned *most, unsigned *least)
{
	struct cp_params p;
	struct cp_event ev;
	unsigned prev = 0, last = 0, n_prog = 0;
	int id;

	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = 2;
	p.progress = 1;
	id = cp_submit(c, prompt, strlen(prompt), &p);
	ck_assert_int_gt(id, 0);
	*most = 0;
	*least = ~0u;
	while (cp_next_event(c, &ev, WAIT_MS) == 0 &&
	    (ev.type == CP_EVENT_TOKEN || ev.type == CP_EVENT_PROGRESS)) {
		if (ev.type != CP_EVENT_PROGRESS)
			continue;
		ck_assert_uint_gt(ev.n_prompt, prev);
		last = ev.n_prompt - prev;
		if (last > *most)
			*most = last;
		if (ev.n_prompt < ev.n_total && last < *least)
			*least = last;
		prev = ev.n_prompt;
		n_prog++;
	}
	ck_assert_int_eq(ev.req_id, id);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_uint_eq(prev, ev.n_prompt);
	ck_assert_uint_ge(n_prog, 3);
}

/*
 * cpd's configuration becomes yaml, then SIGHUP; once the log says each
 * of logs (NULL-terminated), the prompt on b is computed chunk tokens a
 * step (but its last step).
 */
static void
reload(const struct cpd *d, struct cp_client *b, const char *yaml,
    const char *const *logs, unsigned chunk)
{
	char text[512];
	unsigned most, least;

	snprintf(text, sizeof(text), "%smax_seqs: 4\nmax_inter_token_ms: 0\n"
	    "prefix_cache: off\n", yaml);
	write_config(text);
	if (logs != NULL) {
		ck_assert_int_eq(kill(d->pid, SIGHUP), 0);
		for (; *logs != NULL; logs++)
			cpd_await_log(d, *logs);
	}
	if (chunk == 0)
		return;
	chunks(b, &most, &least);
	ck_assert_uint_eq(most, chunk);
	ck_assert_uint_eq(least, chunk);
}

/*
 * A prompt computed 4 tokens a step; SIGHUP with max_prefill_chunk 16:
 * the same prompt (the prefix cache off) in chunks of 16; SIGHUP with
 * max_batch_tokens and max_prefill_chunk 8: chunks of 8.  A client in the
 * middle of its stream all along (paused: it reads nothing until the
 * end, and its 16 completion slots are full) gets every token and its
 * DONE.  max_batch_tokens above the value cpd started with needs a
 * restart.
 */
START_TEST(test_budgets_reload)
{
	const char *extra[] = { "-c", file, NULL };
	struct cp_client *a, *b;
	struct cp_params p;
	struct cp_event ev;
	int id, n = 0, r;
	struct cpd d;

	snprintf(file, sizeof(file), "%s/reload-budgets-%d.yaml", tmp_dir(),
	    (int)getpid());
	reload(NULL, NULL, "max_prefill_chunk: 4\nmax_batch_tokens: 64\n",
	    NULL, 0);
	cpd_start_bin(&d, cpd_bin, model, extra);
	a = client(&d, 16);
	b = client(&d, 0);
	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = STREAM_TOKENS;
	id = cp_submit(a, "Once upon a time", 16, &p);
	ck_assert_int_gt(id, 0);

	reload(&d, b, "max_prefill_chunk: 4\nmax_batch_tokens: 64\n", NULL,
	    4);
	reload(&d, b, "max_prefill_chunk: 16\nmax_batch_tokens: 64\n",
	    (const char *[]){ "reload: max_prefill_chunk: 4 -> 16\n",
	    "reloaded: 1 keys changed", NULL }, 16);
	reload(&d, b, "max_prefill_chunk: 8\nmax_batch_tokens: 8\n",
	    (const char *[]){ "reload: max_batch_tokens: 64 -> 8\n",
	    "reload: max_prefill_chunk: 16 -> 8\n",
	    "reloaded: 2 keys changed", NULL }, 8);
	reload(&d, b, "max_prefill_chunk: 8\nmax_batch_tokens: 128\n",
	    (const char *[]){ "reload: max_batch_tokens: 8 -> 128 needs a "
	    "restart; it stays 8", NULL }, 0);

	while ((r = cp_next_event(a, &ev, WAIT_MS)) == 0 &&
	    ev.type == CP_EVENT_TOKEN)
		n += ev.token >= 0;
	ck_assert_int_eq(r, 0);
	ck_assert_int_eq(ev.req_id, id);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_uint_eq(ev.n_gen, (unsigned)n);
	ck_assert_int_eq(n, STREAM_TOKENS);
	ck_assert_int_eq(ev.finish, CP_DONE_LENGTH);
	cp_close(a);
	cp_close(b);
	cpd_stop(&d);
	unlink(file);
}
END_TEST
SUITE_TEST("reload", test_budgets_reload);

/* The target in cpd's counters once a request has run a step. */
static uint64_t
target_after_a_step(struct cp_client *c)
{
	struct cp_params p;
	struct cp_event ev;
	struct cp_stats st;
	int id;

	cp_params_init(&p);
	p.max_tokens = 2;
	id = cp_submit(c, "Once", 4, &p);
	ck_assert_int_gt(id, 0);
	while (cp_next_event(c, &ev, WAIT_MS) == 0 &&
	    ev.type == CP_EVENT_TOKEN)
		;
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_int_eq(cp_stats(c, &st), 0);
	return st.pace_target_us;
}

/*
 * max_inter_token_ms reloads too: off, then a fixed 250 ms (the counters
 * show it once a step has run), then off again; never "needs a restart".
 */
START_TEST(test_target_reload)
{
	const char *extra[] = { "-c", file, NULL };
	struct cp_client *c;
	struct cpd d;

	snprintf(file, sizeof(file), "%s/reload-target-%d.yaml", tmp_dir(),
	    (int)getpid());
	write_config("max_inter_token_ms: 0\n");
	cpd_start_bin(&d, cpd_bin, model, extra);
	c = client(&d, 0);
	ck_assert_uint_eq(target_after_a_step(c), 0);
	write_config("max_inter_token_ms: 250\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	cpd_await_log(&d, "reload: max_inter_token_ms: 0 -> 250\n");
	cpd_await_log(&d, "reloaded: 1 keys changed");
	ck_assert_uint_eq(target_after_a_step(c), 250000);
	write_config("max_inter_token_ms: 0\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	cpd_await_log(&d, "reload: max_inter_token_ms: 250 -> 0\n");
	ck_assert_uint_eq(target_after_a_step(c), 0);
	ck_assert(!cpd_log_has(&d, "needs a restart"));
	cp_close(c);
	cpd_stop(&d);
	unlink(file);
}
END_TEST
SUITE_TEST("reload", test_target_reload);

SUITE_CASE("reload", 120);

int
main(void)
{
	int rc;

	if ((model = cpd_need("check_reload", cpd_bin, NULL, sizeof(cpd_bin),
	    "aidreams260K.gguf")) == NULL)
		return 77;
	rc = suite_main(suite_registered("reload"));
	free(model);
	return rc;
}
