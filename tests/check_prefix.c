/*
 * check_prefix.c - the prefix cache as clients see it: a real build/bin/cpd
 * on the synth-tiny-F16 fixture (a 512-token vocabulary, 2048 positions),
 * driven by libcpclient clients.
 *
 * Golden values never come from the daemon's cache: greedy ids are those
 * of `cpmodel generate` (the engine alone, the whole prompt in one step),
 * and a cached request's ids and log-probabilities are compared bit for
 * bit with the same request run cold, on a daemon with the cache off.
 * How many prompt tokens the cache gives follows from the block size (16
 * tokens): the full blocks of the longest common prefix with what ran
 * before, short of the prompt's last token, which is always computed.
 */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpclient.h"
#include "lib/cpd_proc.h"
#include "lib/fixtures.h"
#include "lib/prog.h"
#include "lib/suite.h"


#define MODEL_REL "synth/synth-tiny-F16.gguf"
#define BT 16			/* KV block tokens (the default) */
#define MAX_IDS 2048
#define WAIT_MS 60000
#define N_GEN 12

static char cpd_bin[512];
static char cpmodel_bin[512];
static char *model;

/* One finished request as its client saw it. */
struct out {
	int32_t ids[MAX_IDS];
	float lp[MAX_IDS];
	int n;
	uint32_t n_prompt, n_gen, n_cached;
};

static void
start(struct cpd *d, const char *const *extra)
{
	cpd_start_bin(d, cpd_bin, model, extra);
}

static struct cp_client *
client(const struct cpd *d)
{
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	int r;

	cp_connect_opts_init(&o);
	o.socket_path = d->sock;
	r = cp_connect(&o, &c);
	ck_assert_msg(r == 0, "cp_connect: %s", cp_strerror(r));
	return c;
}

static void
stats(struct cp_client *c, struct cp_stats *st)
{
	int r = cp_stats(c, st);

	ck_assert_msg(r == 0, "cp_stats: %s", cp_strerror(r));
}

/* Submits ids (or text when text is set); its request id. */
static int
submit(struct cp_client *c, const int32_t *ids, int n, const char *text,
    int max_tokens)
{
	struct cp_params p;
	int id;

	cp_params_init(&p);
	p.max_tokens = (uint32_t)max_tokens;
	p.temperature = 0;
	p.logprobs = 1;
	id = text != NULL ? cp_submit(c, text, strlen(text), &p) :
	    cp_submit_tokens(c, ids, (size_t)n, &p);
	ck_assert_msg(id > 0, "cp_submit: %s", cp_strerror(id));
	return id;
}

/* Reads c's events until request id is done, into *o. */
static void
collect(struct cp_client *c, int id, struct out *o)
{
	struct cp_event ev;
	int r;

	memset(o, 0, sizeof(*o));
	while ((r = cp_next_event(c, &ev, WAIT_MS)) == 0) {
		if (ev.req_id != id)
			continue;
		if (ev.type == CP_EVENT_TOKEN && ev.token >= 0 &&
		    o->n < MAX_IDS) {
			o->ids[o->n] = ev.token;
			o->lp[o->n++] = ev.logprob;
		}
		if (ev.type == CP_EVENT_DONE || ev.type == CP_EVENT_ERROR) {
			ck_assert_msg(ev.type == CP_EVENT_DONE, "request "
			    "failed: %.*s", (int)ev.text_len, ev.text);
			o->n_prompt = ev.n_prompt;
			o->n_gen = ev.n_gen;
			o->n_cached = ev.n_cached;
			return;
		}
	}
	ck_abort_msg("cp_next_event: %s", cp_strerror(r));
}

/* One request from a connection of its own. */
static void
run(const struct cpd *d, const int32_t *ids, int n, const char *text,
    int max_tokens, struct out *o)
{
	struct cp_client *c = client(d);

	collect(c, submit(c, ids, n, text, max_tokens), o);
	cp_close(c);
}

/* A deterministic prompt of n ids in [3, 512), BOS first. */
static void
make_ids(int32_t *ids, int n, unsigned seed)
{
	ids[0] = 1;
	for (int i = 1; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		ids[i] = 3 + (int32_t)((seed >> 8) % 509u);
	}
}

/* The ids cpmodel gives for text (BOS included), or its greedy output. */
static int
cpmodel_ids(const char *verb, const char *text, int32_t *ids, int cap)
{
	char nbuf[16], *out = malloc(65536), *s, *end;
	const char *tok[] = { cpmodel_bin, "tokenize", model, text, NULL };
	const char *gen[] = { cpmodel_bin, "generate", model, text, "--temp",
	    "0", "--ids", "-n", nbuf, "--threads", "1", NULL };
	int k = 0;

	ck_assert_ptr_nonnull(out);
	snprintf(nbuf, sizeof(nbuf), "%d", N_GEN);
	ck_assert_int_eq(prog_capture(strcmp(verb, "tokenize") == 0 ? tok :
	    gen, out, 65536), 0);
	for (s = out; k < cap; s = end) {
		long v = strtol(s, &end, 10);

		if (end == s)
			break;
		ids[k++] = (int32_t)v;
	}
	free(out);
	return k;
}

/*
 * Positions the cache should give: the whole common prefix (its full
 * blocks shared, the rest copied from the block that follows them), but
 * never b's last position, which gives the logits.
 */
static uint32_t
expect_cached(const int32_t *a, int na, const int32_t *b, int nb)
{
	int l = 0;

	while (l < na && l < nb && a[l] == b[l])
		l++;
	if (l > nb - 1)
		l = nb - 1;
	return (uint32_t)l;
}

static void
assert_same(const struct out *a, const struct out *b, const char *what)
{
	ck_assert_msg(a->n == b->n && memcmp(a->ids, b->ids, (size_t)a->n *
	    sizeof(a->ids[0])) == 0, "%s: ids differ", what);
	ck_assert_msg(memcmp(a->lp, b->lp, (size_t)a->n * sizeof(a->lp[0])) ==
	    0, "%s: log-probabilities differ", what);
}

/* Every pool count balances: nothing held once nothing runs. */
static void
assert_pool_idle(const struct cpd *d)
{
	struct cp_client *c = client(d);
	struct cp_stats st;

	stats(c, &st);
	ck_assert_uint_eq(st.kv_blocks_used, 0);
	ck_assert_uint_eq(st.kv_blocks_free, st.kv_blocks_total);
	ck_assert_uint_le(st.kv_blocks_cached, st.kv_blocks_free);
	cp_close(c);
}

/* A system prompt of about 600 tokens, and two questions after it. */
static char sys_prompt[8192];

static void
make_sys_prompt(void)
{
	static const char *const words[] = { "river", "lantern", "market",
	    "north", "quiet", "stone", "ferry", "orchard", "bell", "harbor" };
	size_t len = 0;

	for (unsigned i = 0; len < sizeof(sys_prompt) - 64 && i < 170; i++)
		len += (size_t)snprintf(sys_prompt + len,
		    sizeof(sys_prompt) - len, "%s%s", i ? " " : "",
		    words[(i * 7 + i / 3) % 10]);
	snprintf(sys_prompt + len, sizeof(sys_prompt) - len, ".\n");
}

/*
 * Two clients with one ~600-token system prompt and different questions:
 * the second computes only what follows the cached blocks (its DONE and
 * the daemon's prompt counter say so), and both outputs are the engine's
 * alone.
 */
START_TEST(test_shared_prefix)
{
	static char q1[9000], q2[9000];
	int32_t t1[MAX_IDS], t2[MAX_IDS], g[N_GEN];
	int n1, n2;
	struct cp_client *c;
	struct cp_stats s0, s1;
	struct out o1, o2;
	struct cpd d;

	snprintf(q1, sizeof(q1), "%sWhere does the ferry go?", sys_prompt);
	snprintf(q2, sizeof(q2), "%sWho rings the bell at night?",
	    sys_prompt);
	n1 = cpmodel_ids("tokenize", q1, t1, MAX_IDS);
	n2 = cpmodel_ids("tokenize", q2, t2, MAX_IDS);
	ck_assert_int_ge(n1, 600);
	start(&d, NULL);
	run(&d, NULL, 0, q1, N_GEN, &o1);
	ck_assert_uint_eq(o1.n_prompt, (uint32_t)n1);
	ck_assert_uint_eq(o1.n_cached, 0);
	c = client(&d);
	stats(c, &s0);
	collect(c, submit(c, NULL, 0, q2, N_GEN), &o2);
	stats(c, &s1);
	cp_close(c);
	ck_assert_uint_eq(o2.n_prompt, (uint32_t)n2);
	ck_assert_uint_eq(o2.n_cached, expect_cached(t1, n1, t2, n2));
	ck_assert_uint_ge(o2.n_cached, 560);
	ck_assert_uint_eq(s1.tokens_prompt - s0.tokens_prompt,
	    o2.n_prompt - o2.n_cached);
	ck_assert_uint_eq(s1.tokens_prompt_cached - s0.tokens_prompt_cached,
	    o2.n_cached);
	ck_assert_int_eq(cpmodel_ids("generate", q1, g, N_GEN), N_GEN);
	ck_assert_int_eq(memcmp(o1.ids, g, sizeof(g)), 0);
	ck_assert_int_eq(cpmodel_ids("generate", q2, g, N_GEN), N_GEN);
	ck_assert_int_eq(memcmp(o2.ids, g, sizeof(g)), 0);
	assert_pool_idle(&d);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_shared_prefix);

/*
 * A request served from the cache gives the ids and log-probabilities of
 * the same request run cold, whatever the chunk size: prefill in chunks of
 * 1, 7 and 512 tokens, with the cached run beside another stream.
 */
START_TEST(test_cached_exact)
{
	static const char *const chunks[] = { "1", "7", "512" };
	const char *off[] = { "--prefix-cache", "off", NULL };
	const char *args[] = { "--max-prefill-chunk", chunks[_i],
	    "--max-batch-tokens", "512", NULL };
	int32_t ids[700], other[90];
	struct cp_client *a, *b;
	struct out cold, warm, side;
	struct cpd d;
	int ia, ib;

	make_ids(ids, 700, 11);
	make_ids(other, 90, 12);
	start(&d, off);
	run(&d, ids, 700, NULL, N_GEN, &cold);
	ck_assert_uint_eq(cold.n_cached, 0);
	cpd_stop(&d);

	start(&d, args);
	run(&d, ids, 700, NULL, N_GEN, &warm);	/* fills the cache */
	assert_same(&warm, &cold, "first run");
	/* again, with another stream in the same steps */
	a = client(&d);
	b = client(&d);
	ib = submit(b, other, 90, NULL, 40);
	ia = submit(a, ids, 700, NULL, N_GEN);
	collect(a, ia, &warm);
	collect(b, ib, &side);
	cp_close(a);
	cp_close(b);
	ck_assert_uint_eq(warm.n_cached, 699);	/* all but the last */
	assert_same(&warm, &cold, "cached run");
	assert_pool_idle(&d);
	cpd_stop(&d);
}
END_TEST
SUITE_LOOP("cpd", test_cached_exact, 0, 3);

/*
 * A conversation: each turn sends the whole history (the previous turns'
 * prompts and outputs) and a new message; the cache gives every computed
 * position of the history, generated tokens too, and the output is the
 * cold one.
 */
START_TEST(test_conversation)
{
	const char *off[] = { "--prefix-cache", "off", NULL };
	int32_t hist[MAX_IDS], msg[100];
	struct out o[4], cold;
	struct cpd d, dc;
	int n = 0;

	start(&d, NULL);
	start(&dc, off);
	for (int turn = 0; turn < 4; turn++) {
		make_ids(msg, 100, 50u + (unsigned)turn);
		memcpy(hist + n, turn ? msg + 1 : msg,
		    (size_t)(turn ? 99 : 100) * sizeof(int32_t));
		n += turn ? 99 : 100;
		run(&d, hist, n, NULL, 50, &o[turn]);
		run(&dc, hist, n, NULL, 50, &cold);
		assert_same(&o[turn], &cold, "turn");
		if (turn > 0)
			/* all the history but the last generated token,
			   never fed back: whole blocks shared, the last
			   one's positions copied from the block the
			   previous turn left */
			ck_assert_uint_eq(o[turn].n_cached, (uint32_t)(n - 99 -
			    1));
		else
			ck_assert_uint_eq(o[turn].n_cached, 0);
		memcpy(hist + n, o[turn].ids, (size_t)o[turn].n *
		    sizeof(int32_t));
		n += o[turn].n;
	}
	assert_pool_idle(&d);
	cpd_stop(&dc);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_conversation);

/*
 * A pool of 12 blocks: prompts that fit it run one after the other and
 * evict what the earlier ones left; none fails or is preempted, and the
 * pool balances.
 */
START_TEST(test_small_pool)
{
	const char *args[] = { "--kv-cache", "192", NULL };
	int32_t ids[150];
	struct cp_client *c;
	struct cp_stats st;
	struct out o;
	struct cpd d;

	start(&d, args);
	for (unsigned i = 0; i < 6; i++) {
		make_ids(ids, 150, 100u + i);
		run(&d, ids, 150, NULL, 30, &o);
		ck_assert_int_eq(o.n, 30);
		assert_pool_idle(&d);
	}
	c = client(&d);
	stats(c, &st);
	cp_close(c);
	ck_assert_uint_eq(st.kv_blocks_total, 12);
	ck_assert_uint_eq(st.preemptions, 0);
	ck_assert_uint_gt(st.prefix_evictions, 0);
	ck_assert_uint_gt(st.kv_blocks_cached, 0);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_small_pool);

/*
 * The prefill lane starts after the cached blocks: a long prompt that
 * shares 600 tokens with an earlier one goes to the lane (another stream
 * is live) from position 592, and its output is the cold one.
 */
START_TEST(test_lane)
{
	const char *off[] = { "--prefix-cache", "off", NULL };
	const char *args[] = { "--threads", "2", "--prefill-lane-tokens",
	    "64", "--max-inter-token-ms", "0", "--log-level", "debug", NULL };
	int32_t a[700], b[900], side[40];
	struct cp_client *cs, *cb;
	struct out cold, warm, o;
	struct cp_event ev;
	struct cpd d;
	int is, ib;

	make_ids(a, 700, 31);
	make_ids(b, 900, 32);
	memcpy(b, a, 600 * sizeof(int32_t));
	make_ids(side, 40, 33);
	start(&d, off);
	run(&d, b, 900, NULL, N_GEN, &cold);
	cpd_stop(&d);
	start(&d, args);
	run(&d, a, 700, NULL, 4, &o);
	cs = client(&d);
	cb = client(&d);
	is = submit(cs, side, 40, NULL, 400);
	/* the stream is live before the long prompt arrives */
	ck_assert_int_eq(cp_next_event(cs, &ev, WAIT_MS), 0);
	ck_assert_int_eq(ev.type, CP_EVENT_TOKEN);
	ib = submit(cb, b, 900, NULL, N_GEN);
	collect(cb, ib, &warm);
	collect(cs, is, &o);
	cp_close(cs);
	cp_close(cb);
	ck_assert_uint_eq(warm.n_cached, 592);
	ck_assert_msg(cpd_log_has(&d, "prefill lane after 592 cached tokens"),
	    "the prompt did not go to the lane from its cached blocks");
	assert_same(&warm, &cold, "lane after the cache");
	assert_pool_idle(&d);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_lane);

/* With the cache off, the same prompt twice is computed twice. */
START_TEST(test_off)
{
	const char *off[] = { "--prefix-cache", "off", NULL };
	int32_t ids[200];
	struct cp_client *c;
	struct cp_stats st;
	struct out o;
	struct cpd d;

	make_ids(ids, 200, 7);
	start(&d, off);
	run(&d, ids, 200, NULL, 4, &o);
	run(&d, ids, 200, NULL, 4, &o);
	ck_assert_uint_eq(o.n_cached, 0);
	c = client(&d);
	stats(c, &st);
	cp_close(c);
	ck_assert_uint_eq(st.tokens_prompt, 400);
	ck_assert_uint_eq(st.tokens_prompt_cached, 0);
	ck_assert_uint_eq(st.kv_blocks_cached, 0);
	cpd_stop(&d);
}
END_TEST
SUITE_TEST("cpd", test_off);

/*
 * Scopes across two users: the test runs as root, so a child process
 * becomes nobody to be the second user.  With uid scope the second user's
 * identical prompt is computed in full; with global it is served from the
 * cache.  Without root the test says so and checks nothing.
 */
static uint32_t
cached_as_nobody(const struct cpd *d, const int32_t *ids, int n)
{
	int fds[2];
	uint32_t got = UINT32_MAX;
	pid_t pid;
	int st;

	ck_assert_int_eq(pipe(fds), 0);
	if ((pid = fork()) == 0) {
		struct out o;

		close(fds[0]);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 ||
		    setuid(65534) < 0)
			_exit(2);
		run(d, ids, n, NULL, 4, &o);
		if (write(fds[1], &o.n_cached, sizeof(o.n_cached)) !=
		    (ssize_t)sizeof(o.n_cached))
			_exit(3);
		_exit(0);
	}
	ck_assert_int_gt(pid, 0);
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &got, sizeof(got)), (int)sizeof(got));
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d", st);
	return got;
}

START_TEST(test_scope_users)
{
	static const char *const scope[] = { "uid", "global" };
	char sock[108];
	const char *args[] = { "--prefix-cache", scope[_i], "--allowed-users",
	    "nobody", "--socket-mode", "0666", "--socket", sock, NULL };
	int32_t ids[200];
	struct out o;
	struct cpd d;

	if (geteuid() != 0) {
		printf("check_prefix: scope across users needs root: "
		    "skipped\n");
		return;
	}
	/* in /tmp, which every user can reach */
	snprintf(sock, sizeof(sock), "/tmp/check_prefix-%ld-%d.sock",
	    (long)getpid(), _i);
	make_ids(ids, 200, 21);
	start(&d, args);
	snprintf(d.sock, sizeof(d.sock), "%s", sock);
	run(&d, ids, 200, NULL, 4, &o);		/* root fills the cache */
	run(&d, ids, 200, NULL, 4, &o);
	ck_assert_uint_eq(o.n_cached, 199);	/* same uid: shared */
	ck_assert_uint_eq(cached_as_nobody(&d, ids, 200), _i == 0 ? 0 : 199);
	cpd_stop(&d);
}
END_TEST
SUITE_LOOP("cpd", test_scope_users, 0, 2);

SUITE_CASE("cpd", 300);

int
main(void)
{
	int rc;

	if ((model = cpd_need("check_prefix", cpd_bin, cpmodel_bin,
	    sizeof(cpd_bin), MODEL_REL)) == NULL)
		return 77;
	signal(SIGPIPE, SIG_IGN);
	make_sys_prompt();
	rc = suite_main(suite_registered("prefix"));
	free(model);
	return rc;
}
