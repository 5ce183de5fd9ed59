/*
 * check_logprobs.c - top-n log-probabilities (cp_params.logprobs = n) as
 * clients see them: a real build/bin/cpd on the synth-tiny-F32 fixture
 * driven through libcpclient, cpq --json and a program of the first
 * interface; and a lying daemon (tests/lib/fake_cpd.h) whose CP_EV_TOP
 * entries the library must refuse.
 *
 * Golden values are llama.cpp's (../shared/models/synth/REFERENCE.json,
 * llama-server n_probs 10 and its steptop client, see the README there):
 * the top-10 after the prompt, and the two most likely tokens of every
 * greedy step, compared with the README's tolerance for F32 (1e-2, exact
 * greedy ids).  Each list must also agree with itself: the greedy token
 * first, its logprob the one the TOKEN carries, descending order.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpclient.h"
#include "lib/cpd_proc.h"
#include "lib/fake_cpd.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/prog.h"
#include "lib/refcheck.h"
#include "lib/suite.h"
#include "engine_port.h"
#include "ring.h"
#include "session.h"

#define MODEL_FILE	"synth-tiny-F32.gguf"
#define MODEL_REL	"synth/" MODEL_FILE
#define REF_REL		"synth/REFERENCE.json"
#define TOL		1e-2	/* the README's F32 tolerance */
#define MAX_STEPS	64
#define WAIT_MS		60000

static char cpd_bin[512];
static struct cpd dp;

/* Every TOKEN of one request, with its top-n list, up to its DONE. */
struct run {
	int n;
	int32_t ids[MAX_STEPS];
	float lp[MAX_STEPS];
	uint32_t n_top[MAX_STEPS];
	int32_t top_ids[MAX_STEPS][CP_TOP_LOGPROBS_MAX];
	float top_lp[MAX_STEPS][CP_TOP_LOGPROBS_MAX];
	int finish;
};

/* Starts cpd on the fixture, chat requests rendered as ChatML. */
static void
start(void)
{
	const char *args[] = { "--chat-template", "chatml", NULL };
	char *model = fx_path(MODEL_REL);

	ck_assert_ptr_nonnull(model);
	cpd_start_bin(&dp, cpd_bin, model, args);
	free(model);
}

/* start() and a client connected to it (by $CPD_SOCKET); down() closes both. */
static struct cp_client *
up(void)
{
	struct cp_client *c = NULL;
	int r;

	start();
	ck_assert_int_eq(setenv("CPD_SOCKET", dp.sock, 1), 0);
	if ((r = cp_connect(NULL, &c)) < 0)
		ck_abort_msg("cp_connect %s: %s", dp.sock, cp_strerror(r));
	return c;
}

static void
down(struct cp_client *c)
{
	cp_close(c);
	cpd_cleanup(&dp);
}

static void
greedy_params(struct cp_params *p, int logprobs, int max_tokens)
{
	cp_params_init(p);
	p->temperature = 0;
	p->max_tokens = (uint32_t)max_tokens;
	p->logprobs = logprobs;
}

/* Reads request id's events into *o until its DONE (an ERROR fails). */
static void
collect(struct cp_client *c, int id, struct run *o)
{
	struct cp_event ev;
	int r;

	memset(o, 0, sizeof(*o));
	while ((r = cp_next_event(c, &ev, WAIT_MS)) == 0) {
		ck_assert_int_eq(ev.req_id, id);
		ck_assert_msg(ev.type != CP_EVENT_ERROR, "request failed: %.*s",
		    (int)ev.text_len, ev.text);
		if (ev.type == CP_EVENT_DONE) {
			o->finish = ev.finish;
			return;
		}
		if (ev.type != CP_EVENT_TOKEN || ev.token < 0)
			continue;
		ck_assert_int_lt(o->n, MAX_STEPS);
		ck_assert_uint_le(ev.n_top, CP_TOP_LOGPROBS_MAX);
		o->ids[o->n] = ev.token;
		o->lp[o->n] = ev.logprob;
		o->n_top[o->n] = ev.n_top;
		if (ev.n_top > 0) {
			memcpy(o->top_ids[o->n], ev.top_ids,
			    ev.n_top * sizeof(*ev.top_ids));
			memcpy(o->top_lp[o->n], ev.top_logprobs,
			    ev.n_top * sizeof(*ev.top_logprobs));
		} else {
			ck_assert_ptr_null(ev.top_ids);
			ck_assert_ptr_null(ev.top_logprobs);
		}
		o->n++;
	}
	ck_abort_msg("cp_next_event: %s", cp_strerror(r));
}

/*
 * Each step of a greedy run with lists of n: n entries, descending, in
 * the vocabulary, probabilities summing to at most 1, the greedy token
 * first with the logprob its TOKEN carries.
 */
static void
check_greedy_lists(const struct run *o, uint32_t n)
{
	double sum;
	uint32_t j;
	int k;

	ck_assert_int_gt(o->n, 0);
	for (k = 0; k < o->n; k++) {
		ck_assert_uint_eq(o->n_top[k], n);
		ck_assert_int_eq(o->top_ids[k][0], o->ids[k]);
		ck_assert_float_eq(o->top_lp[k][0], o->lp[k]);
		sum = 0;
		for (j = 0; j < n; j++) {
			ck_assert_int_ge(o->top_ids[k][j], 0);
			ck_assert_int_lt(o->top_ids[k][j], 512);
			ck_assert(o->top_lp[k][j] <= 0);
			if (j > 0)
				ck_assert(o->top_lp[k][j] <=
				    o->top_lp[k][j - 1]);
			sum += exp(o->top_lp[k][j]);
		}
		ck_assert_double_le(sum, 1 + 1e-5);
	}
}

/* The logprob of id in step k's list, or NAN when the list lacks it. */
static double
lp_of(const struct run *o, int k, int32_t id)
{
	uint32_t j;

	for (j = 0; j < o->n_top[k]; j++)
		if (o->top_ids[k][j] == id)
			return o->top_lp[k][j];
	return NAN;
}

/* ---- against llama.cpp ------------------------------------------------ */

static const char *const ref_keys[] = { "tiny_once", "tiny_dog",
    "tiny_long295" };

/*
 * Greedy generation with logprobs 10 from the reference prompt ids: the
 * ids are llama.cpp's; step 0's list holds its top-10 (at least 9 of the
 * 10 ids, each within TOL, near the 10th place one may swap); at every
 * step our first two entries are its top1 and top2 within TOL.
 */
START_TEST(test_reference_top10)
{
	struct json *ref = ref_load(REF_REL);
	const struct json *res = ref_result(ref, MODEL_FILE, ref_keys[_i]);
	const struct json *top10, *steps, *s;
	static int32_t prompt[512], gen[MAX_STEPS];
	static struct run o;
	struct cp_client *c;
	struct cp_params p;
	int np, ng, k, common = 0;
	size_t j;
	double y;

	ck_assert_ptr_nonnull(res);
	np = ref_ids(json_get(res, "prompt_ids"), prompt, 512);
	ng = ref_ids(json_get(res, "generated_ids"), gen, MAX_STEPS);
	ck_assert_int_gt(np, 0);
	ck_assert_int_gt(ng, 0);
	c = up();
	greedy_params(&p, 10, ng);
	collect(c, cp_submit_tokens(c, prompt, (size_t)np, &p), &o);
	ck_assert_int_eq(o.finish, CP_DONE_LENGTH);
	ck_assert_int_eq(o.n, ng);
	check_greedy_lists(&o, 10);
	for (k = 0; k < ng; k++)
		ck_assert_msg(o.ids[k] == gen[k], "%s step %d: id %d, "
		    "llama.cpp %d", ref_keys[_i], k, o.ids[k], gen[k]);

	top10 = json_get(res, "top10");
	ck_assert_ptr_nonnull(top10);
	ck_assert_uint_eq(top10->n, 10);
	for (j = 0; j < top10->n; j++) {
		const struct json *e = json_at(top10, j);

		y = lp_of(&o, 0, (int32_t)json_at(e, 0)->num);
		if (isnan(y))
			continue;
		common++;
		ck_assert_msg(fabs(y - log(json_at(e, 1)->num)) <= TOL,
		    "%s top10[%zu]: id %d logprob %g, llama.cpp %g",
		    ref_keys[_i], j, (int)json_at(e, 0)->num, y,
		    log(json_at(e, 1)->num));
	}
	ck_assert_int_ge(common, 9);

	steps = json_get(res, "greedy_step_top2");
	ck_assert_ptr_nonnull(steps);
	ck_assert_uint_eq(steps->n, (size_t)ng);
	for (k = 0; k < ng; k++) {
		s = json_at(steps, (size_t)k);
		ck_assert_int_eq(o.top_ids[k][0], (int32_t)json_at(s, 0)->num);
		ck_assert_double_le(fabs(o.top_lp[k][0] - json_at(s, 1)->num),
		    TOL);
		y = lp_of(&o, k, (int32_t)json_at(s, 2)->num);
		ck_assert_msg(!isnan(y) && fabs(y - json_at(s, 3)->num) <= TOL,
		    "%s step %d: top2 %d logprob %g, llama.cpp %g",
		    ref_keys[_i], k, (int)json_at(s, 2)->num, y,
		    json_at(s, 3)->num);
	}
	json_free(ref);
	down(c);
}
END_TEST
SUITE_LOOP("reference", test_reference_top10, 0, 3);

/* ---- the limits of n ---------------------------------------------------- */

#define PROMPT	"Once upon a time"

/*
 * n tokens of greedy generation after PROMPT, or after a conversation
 * with it as the user's turn (chat, rendered as ChatML), with logprobs.
 */
static void
run_greedy(struct cp_client *c, int logprobs, int n, bool chat,
    struct run *o)
{
	const struct cp_message m[] = {
		{ CP_CHAT_SYSTEM, "Be brief.", 9 },
		{ CP_CHAT_USER, PROMPT, strlen(PROMPT) },
	};
	struct cp_params p;

	greedy_params(&p, logprobs, n);
	collect(c, chat ? cp_submit_chat(c, m, 2, &p) :
	    cp_submit(c, PROMPT, strlen(PROMPT), &p), o);
	ck_assert_int_eq(o->n, n);
}

/*
 * n = 20, the most: 20 entries each step; n = 21 and n < 0 are refused
 * before anything is sent, and the connection goes on.
 */
START_TEST(test_n_limits)
{
	static struct run o;
	struct cp_client *c = up();
	struct cp_params p;

	greedy_params(&p, 21, 4);
	ck_assert_int_eq(cp_submit(c, PROMPT, strlen(PROMPT), &p), -EINVAL);
	p.logprobs = -1;
	ck_assert_int_eq(cp_submit(c, PROMPT, strlen(PROMPT), &p), -EINVAL);
	run_greedy(c, 20, 4, false, &o);
	check_greedy_lists(&o, 20);
	down(c);
}
END_TEST
SUITE_TEST("daemon", test_n_limits);

/* Without logprobs nothing is sent: n_top 0, no lists, logprob 0. */
START_TEST(test_off)
{
	static struct run o;
	struct cp_client *c = up();
	int k;

	run_greedy(c, 0, 6, false, &o);
	for (k = 0; k < o.n; k++) {
		ck_assert_uint_eq(o.n_top[k], 0);
		ck_assert_float_eq(o.lp[k], 0);
	}
	down(c);
}
END_TEST
SUITE_TEST("daemon", test_off);

/* A conversation (cp_submit_chat) gets its lists too. */
START_TEST(test_chat)
{
	static struct run o;
	struct cp_client *c = up();

	run_greedy(c, 5, 8, true, &o);
	check_greedy_lists(&o, 5);
	down(c);
}
END_TEST
SUITE_TEST("daemon", test_chat);

/* ---- cpq and the first interface ------------------------------------- */

/*
 * cpq --json --logprobs 3 prints each token's list as top_logprobs; its
 * first step's ids are llama.cpp's top 3.  --logprobs 21, or without
 * --json, is a usage error.
 */
START_TEST(test_cpq_json)
{
	static const int32_t ref_top3[] = { 164, 356, 443 };	/* tiny_once */
	char cpq[512];
	static char out[65536];
	const char *argv[] = { cpq, "-s", NULL, "--json", "--logprobs", "3",
	    "-n", "4", "--temp", "0", PROMPT, NULL };
	const char *bad21[] = { cpq, "-s", NULL, "--json", "--logprobs", "21",
	    "x", NULL };
	const char *nojson[] = { cpq, "-s", NULL, "--logprobs", "3", "x", NULL };
	char *line, *save = NULL;
	int n = 0;
	size_t j;

	ck_assert_int_eq(prog_find(cpq, sizeof(cpq), "cpq", "CPQ"), 0);
	start();
	argv[2] = bad21[2] = nojson[2] = dp.sock;
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	for (line = strtok_r(out, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		struct json *j1 = json_parse(line, strlen(line), NULL, 0);
		const struct json *top;

		ck_assert_msg(j1 != NULL, "not JSON: %s", line);
		if (strcmp(json_get(j1, "event")->str, "token") == 0) {
			top = json_get(j1, "top_logprobs");
			ck_assert_ptr_nonnull(top);
			ck_assert_uint_eq(top->n, 3);
			ck_assert_double_eq(json_get(json_at(top, 0), "id")->num,
			    json_get(j1, "token")->num);
			ck_assert_double_eq(json_get(json_at(top, 0),
			    "logprob")->num, json_get(j1, "logprob")->num);
			for (j = 0; n == 0 && j < 3; j++)
				ck_assert_double_eq(json_get(json_at(top, j),
				    "id")->num, ref_top3[j]);
			n++;
		}
		json_free(j1);
	}
	ck_assert_int_eq(n, 4);
	ck_assert_int_eq(prog_capture(bad21, out, sizeof(out)), 2);
	ck_assert_int_eq(prog_capture(nojson, out, sizeof(out)), 2);
	cpd_cleanup(&dp);
}
END_TEST
SUITE_TEST("daemon", test_cpq_json);

/*
 * A program built against the first header (tests/abi/abi_v0.c: logprobs
 * = 1, greedy, 64 tokens) still gets each token's logprob: its first 32
 * ids and logprobs are llama.cpp's tiny_once steps.
 */
START_TEST(test_v0_program)
{
	struct json *ref = ref_load(REF_REL);
	const struct json *steps = json_get(ref_result(ref, MODEL_FILE,
	    "tiny_once"), "greedy_step_top2");
	const char *argv[] = { CP_BUILD_TESTS "/abi_v0", NULL, PROMPT,
	    "no such stop string", NULL };
	static char out[65536];
	char *line, *save = NULL;
	int n = 0, id;
	double lp;

	ck_assert_ptr_nonnull(steps);
	start();
	argv[1] = dp.sock;
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	for (line = strtok_r(out, "\n", &save); line != NULL && n < 32;
	    line = strtok_r(NULL, "\n", &save)) {
		if (sscanf(line, "%d %lf", &id, &lp) != 2 ||
		    strncmp(line, "n_ctx", 5) == 0)
			continue;
		ck_assert_int_eq(id, (int)json_at(json_at(steps, (size_t)n),
		    0)->num);
		ck_assert_double_le(fabs(lp - json_at(json_at(steps,
		    (size_t)n), 1)->num), TOL);
		n++;
	}
	ck_assert_int_eq(n, 32);
	json_free(ref);
	cpd_cleanup(&dp);
}
END_TEST
SUITE_TEST("daemon", test_v0_program);

SUITE_CASE("reference", 300);
SUITE_CASE("daemon", 300);

/* ---- a daemon that lies ------------------------------------------------ */

/* A TOKEN head for request 1 announcing n_top entries, more to come. */
static void
top_head(struct cp_cqe *q, uint32_t n_top)
{
	memset(q, 0, sizeof(*q));
	q->req_id = 1;
	q->type = CP_EV_TOKEN;
	q->token = 7;
	q->logprob = -0.5f;
	q->n_top = n_top;
	q->flags = CP_CQF_MORE;
}

/* A CP_EV_TOP continuation of n entries, ids from id, logprobs from lp down. */
static void
top_cont(struct cp_cqe *q, uint32_t n, int32_t id, float lp, int more)
{
	struct cp_top t;
	uint32_t i;

	memset(q, 0, sizeof(*q));
	q->req_id = 1;
	q->type = CP_EV_TOP;
	q->token = -1;
	q->flags = more ? CP_CQF_MORE : 0;
	q->text_len = (uint8_t)(n * sizeof(t));
	for (i = 0; i < n; i++) {
		t.id = id + (int32_t)i;
		t.logprob = lp - (float)i;
		memcpy(q->text + i * sizeof(t), &t, sizeof(t));
	}
}

/* Publishes q[0..n) as the CQ's first entries. */
static void
fake_publish(struct fake *f, const struct cp_cqe *q, uint32_t n)
{
	memcpy(f->s->cq, q, n * sizeof(*q));
	ring_store_release(&f->s->ctl->cq_tail.v, n);
}

/*
 * A group as cp_proto.h's TOP-N describes it: the TOKEN, a text
 * continuation, two TOP continuations (4 + 1 entries).  The request asked
 * for 5; the flags carried n.  A daemon without CP_FEAT_TOPN is asked
 * for logprob alone.
 */
START_TEST(test_fake_top)
{
	struct cp_cqe q[4];
	struct cp_client *c;
	struct cp_params p;
	struct cp_event ev;
	struct fake f;
	int i;

	cp_params_init(&p);
	p.logprobs = 5;
	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	ck_assert_int_eq(cp_submit(c, "abc", 3, &p), 1);
	ck_assert_uint_eq(f.s->sq[0].params.flags, CP_PF_LOGPROB |
	    CP_PF_TOPN(5));
	top_head(&q[0], 5);
	q[0].text_len = 32;
	memset(q[0].text, 'a', 32);
	memset(&q[1], 0, sizeof(q[1]));
	q[1].req_id = 1;
	q[1].type = CP_EV_TEXT;
	q[1].token = -1;
	q[1].flags = CP_CQF_MORE;
	q[1].text_len = 2;
	memcpy(q[1].text, "bc", 2);
	top_cont(&q[2], 4, 7, -0.5f, 1);
	top_cont(&q[3], 1, 11, -4.5f, 0);
	fake_publish(&f, q, 4);
	ck_assert_int_eq(cp_next_event(c, &ev, 1000), 0);
	ck_assert_int_eq(ev.type, CP_EVENT_TOKEN);
	ck_assert_int_eq(ev.token, 7);
	ck_assert_uint_eq(ev.text_len, 34);
	ck_assert_int_eq(memcmp(ev.text + 32, "bc", 3), 0);
	ck_assert_uint_eq(ev.n_top, 5);
	for (i = 0; i < 5; i++) {
		ck_assert_int_eq(ev.top_ids[i], 7 + i);
		ck_assert_float_eq(ev.top_logprobs[i], -0.5f - (float)i);
	}
	cp_close(c);
	fake_stop(&f);

	fake_start(&f, FAKE_NOFEAT);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	ck_assert_int_eq(cp_submit(c, "abc", 3, &p), 1);
	ck_assert_uint_eq(f.s->sq[0].params.flags, CP_PF_LOGPROB);
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_TEST("lying", test_fake_top);

/*
 * Top-n lists that break a rule of cp_proto.h's TOP-N: the library fails
 * the connection with CP_EPROTO and reads nothing past the CQEs.
 */
START_TEST(test_lying_top)
{
	struct cp_cqe q[4];
	struct cp_client *c;
	struct cp_params p;
	struct cp_event ev;
	struct cp_top t;
	struct fake f;
	uint32_t n = 2;

	cp_params_init(&p);
	p.logprobs = _i == 1 ? 0 : 3;
	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	ck_assert_int_eq(cp_submit(c, "abc", 3, &p), 1);
	top_head(&q[0], 3);
	top_cont(&q[1], 3, 7, -0.5f, 0);
	switch (_i) {
	case 0:		/* more entries than asked for */
		top_head(&q[0], 4);
		top_cont(&q[1], 4, 7, -0.5f, 0);
		break;
	case 1:		/* a list nobody asked for */
		break;
	case 2:		/* fewer entries than the head announced */
		top_cont(&q[1], 2, 7, -0.5f, 0);
		break;
	case 3:		/* more entries than announced */
		top_head(&q[0], 2);
		break;
	case 4:		/* a partial entry */
		q[1].text_len = 20;
		break;
	case 5:		/* an id past the vocabulary */
		top_cont(&q[1], 3, FAKE_N_VOCAB - 1, -0.5f, 0);
		break;
	case 6:		/* a positive logprob */
		top_cont(&q[1], 3, 7, 0.5f, 0);
		break;
	case 7:		/* NaN */
		t.id = 8;
		t.logprob = NAN;
		memcpy(q[1].text + sizeof(t), &t, sizeof(t));
		break;
	case 8:		/* ascending */
		t.id = 9;
		t.logprob = 0;
		memcpy(q[1].text + 2 * sizeof(t), &t, sizeof(t));
		break;
	case 9:		/* text after the list */
		top_cont(&q[1], 3, 7, -0.5f, 1);
		memset(&q[2], 0, sizeof(q[2]));
		q[2].req_id = 1;
		q[2].type = CP_EV_TEXT;
		q[2].token = -1;
		q[2].text_len = 1;
		n = 3;
		break;
	case 10:	/* a list on a text-only TOKEN */
		q[0].token = -1;
		break;
	case 11:	/* a list on a DONE */
		q[0].type = CP_EV_DONE;
		q[0].finish = CP_FINISH_STOP;
		break;
	case 12:	/* an announced count past any list */
		q[0].n_top = 1000;
		break;
	case 13:	/* an empty continuation */
		top_cont(&q[1], 3, 7, -0.5f, 1);
		top_cont(&q[2], 0, 0, 0, 0);
		n = 3;
		break;
	}
	fake_publish(&f, q, n);
	ck_assert_int_eq(cp_next_event(c, &ev, 1000), CP_EPROTO);
	ck_assert_int_eq(cp_next_event(c, &ev, 0), CP_EPROTO);
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_LOOP("lying", test_lying_top, 0, 14);

/* ---- the daemon's side of the ring ------------------------------------ */

/* The daemon takes what the client put in the SQ: its commands' count. */
static int
fake_consume(struct fake *f, uint32_t *top_n)
{
	struct sess_out out;
	int r;

	sess_out_init(&out);
	r = sess_consume(f->s, &out);
	if (r > 0 && top_n != NULL)
		*top_n = out.head->params.top_n;
	ep_cmd_free_list(out.head);
	return r;
}

/*
 * The session writes a TOKEN with a list after its text as TOP-N says,
 * in a CQ of 16: text past text_chunk less the list's CQEs goes ahead
 * in text-only TOKENs (rule 4), and the client joins it back; a list
 * longer than the request asked for is not sent.
 */
START_TEST(test_session_writes_top)
{
	static char buf[300 + CP_TOPN_MAX * sizeof(struct cp_top)];
	static char text[300];
	struct cp_top t[4];
	struct ep_event ev;
	struct cp_client *c;
	struct cp_params p;
	struct cp_event e;
	struct fake f;
	size_t got = 0;
	uint32_t top_n = 0, i, ahead = 0;

	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	cp_params_init(&p);
	p.logprobs = 3;
	ck_assert_int_eq(cp_submit(c, "abc", 3, &p), 1);
	ck_assert_int_eq(fake_consume(&f, &top_n), 1);
	ck_assert_uint_eq(top_n, 3);
	for (i = 0; i < sizeof(text); i++)
		text[i] = (char)('a' + i % 26);
	for (i = 0; i < 4; i++) {
		t[i].id = 40 + (int32_t)i;
		t[i].logprob = -1.0f - (float)i;
	}
	memcpy(buf, text, sizeof(text));
	memcpy(buf + sizeof(text), t, 3 * sizeof(t[0]));
	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_TOKEN;
	ev.token = 40;
	ev.logprob = -1.0f;
	ev.text_len = sizeof(text);
	ev.n_top = 3;
	ck_assert_int_eq(sess_post(f.s, 1, &ev, buf), 0);
	ck_assert_int_ge(sess_flush(f.s), 0);
	for (;;) {
		ck_assert_int_eq(cp_next_event(c, &e, 1000), 0);
		ck_assert_int_eq(e.type, CP_EVENT_TOKEN);
		ck_assert_uint_le(got + e.text_len, sizeof(text));
		ck_assert_int_eq(memcmp(e.text, text + got, e.text_len), 0);
		got += e.text_len;
		if (e.token >= 0)
			break;
		ck_assert_uint_eq(e.n_top, 0);
		ahead++;
	}
	/* 300 bytes in groups of 16 / 2 - 5 CQEs, 96 bytes: 3 ahead */
	ck_assert_uint_eq(ahead, 3);
	ck_assert_uint_eq(got, sizeof(text));
	ck_assert_int_eq(e.token, 40);
	ck_assert_uint_eq(e.n_top, 3);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(e.top_ids[i], t[i].id);
		ck_assert_float_eq(e.top_logprobs[i], t[i].logprob);
	}

	/* Four entries for a request that asked for three: none sent. */
	memcpy(buf, t, 4 * sizeof(t[0]));
	ev.text_len = 0;
	ev.n_top = 4;
	ck_assert_int_eq(sess_post(f.s, 1, &ev, buf), 0);
	ck_assert_int_ge(sess_flush(f.s), 0);
	ck_assert_int_eq(cp_next_event(c, &e, 1000), 0);
	ck_assert_int_eq(e.token, 40);
	ck_assert_uint_eq(e.n_top, 0);
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_TEST("session", test_session_writes_top);

/* A client that asks for more than CP_TOPN_MAX breaks the protocol. */
START_TEST(test_session_refuses_n)
{
	struct cp_client *c;
	struct cp_sqe e;
	struct fake f;

	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	ck_assert_int_eq(cp_submit(c, "abc", 3, NULL), 1);
	memcpy(&e, &f.s->sq[0], sizeof(e));
	e.req_id = 2;
	e.params.flags |= CP_PF_TOPN(_i == 0 ? CP_TOPN_MAX : CP_TOPN_MAX + 1);
	memcpy(&f.s->sq[1], &e, sizeof(e));
	ring_store_release(&f.s->ctl->sq_tail.v, 2);
	if (_i == 0) {
		ck_assert_int_eq(fake_consume(&f, NULL), 2);
	} else {
		ck_assert_int_eq(fake_consume(&f, NULL), -EPROTO);
		ck_assert_msg(strstr(f.s->why, "top-n 21 over 20") != NULL,
		    "reason: %s", f.s->why);
	}
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_LOOP("session", test_session_refuses_n, 0, 2);

int
main(void)
{
	char *path = fx_path(MODEL_REL);
	bool all = path != NULL &&
	    prog_find(cpd_bin, sizeof(cpd_bin), "cpd", NULL) == 0;

	free(path);
	signal(SIGPIPE, SIG_IGN);
	if (!all) {
		suite_case_skip("reference");
		suite_case_skip("daemon");
	}
	return suite_main_some(suite_registered("logprobs"), all,
	    "check_logprobs: %s or build/bin/cpd missing: only the lying "
	    "daemon's tests ran\n", MODEL_REL);
}
