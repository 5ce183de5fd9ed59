/*
 * bench_prefix.c - `cpbench prefix`: what a shared prompt prefix costs
 * through a running daemon, the prefix cache's two cases.
 *
 *	cpbench prefix [--socket S] [-c N] [--system-len L] [--question-len Q]
 *	    [--gen-len G] [-o md|json]
 *	cpbench prefix [--socket S] --turns T [--turn-len U] [--gen-len G]
 *	    [-o md|json]
 *
 * Shared system prompt (the first form): N client processes, each with its
 * own connection, send the same L-token system prompt followed by a
 * Q-token question of their own (G tokens generated, greedy).  Client 1
 * goes first, alone (the cold request); once it is done, clients 2..N
 * start together.  Reported: each request's time to first token (TTFT) and
 * the total time from client 1's submission to the last client's end.
 *
 * Conversation (--turns): one client sends T turns; turn t's prompt is the
 * whole history (every earlier turn's prompt and generated tokens) and U
 * new tokens of its own; G tokens are generated.  Reported: each turn's
 * TTFT and prompt length.
 *
 * Prompts are token ids (cp_submit_tokens, so lengths are exact): BOS,
 * then ids fixed by the client or turn (bench_prompt()).  Only the
 * libcpclient calls cp_connect, cp_model_info, cp_submit_tokens and
 * cp_next_event are used, so a shim that serves them over another server's
 * protocol runs the same workload there.
 */
#include "bench_serve.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpbench.h"
#include "cpclient.h"

#define BP_EVENT_MS 300000
#define BP_MAX_CLIENTS 256

struct bp_opts {
	const char *socket;
	int clients, system_len, question_len, gen_len, turns, turn_len;
	bool json;
};

/* One request as its client saw it. */
struct bp_res {
	double ttft_ms, total_ms;
	int n_prompt, n_gen, n_cached, err;
	double t_submit, t_done;
};

static int
bp_connect(const char *socket, struct cp_client **c)
{
	struct cp_connect_opts o;
	int r;

	cp_connect_opts_init(&o);
	if (socket != NULL)
		o.socket_path = socket;
	if ((r = cp_connect(&o, c)) < 0)
		fprintf(stderr, "cpbench prefix: connect: %s\n",
		    cp_strerror(r));
	return r;
}

/*
 * One greedy request of ids on c; its tokens go to out[*n_out], out[*n_out
 * + 1] ... (*n_out advanced) when out is given.
 */
static int
bp_request(struct cp_client *c, const int32_t *ids, int n, int gen,
    struct bp_res *res, int32_t *out, int *n_out)
{
	struct cp_params p;
	struct cp_event ev;
	int id, r;

	memset(res, 0, sizeof(*res));
	cp_params_init(&p);
	p.max_tokens = (uint32_t)gen;
	p.temperature = 0;
	res->t_submit = bench_now();
	if ((id = cp_submit_tokens(c, ids, (size_t)n, &p)) < 0)
		return res->err = id;
	while ((r = cp_next_event(c, &ev, BP_EVENT_MS)) == 0) {
		if (ev.req_id != id)
			continue;
		if (ev.type == CP_EVENT_TOKEN && ev.token >= 0) {
			if (res->ttft_ms == 0)
				res->ttft_ms = (bench_now() - res->t_submit) *
				    1e3;
			if (out != NULL)
				out[(*n_out)++] = ev.token;
		}
		if (ev.type == CP_EVENT_DONE || ev.type == CP_EVENT_ERROR) {
			res->t_done = bench_now();
			res->total_ms = (res->t_done - res->t_submit) * 1e3;
			res->n_prompt = (int)ev.n_prompt;
			res->n_gen = (int)ev.n_gen;
			res->n_cached = ev.type == CP_EVENT_DONE ?
			    (int)ev.n_cached : 0;
			res->err = ev.type == CP_EVENT_ERROR ? ev.error : 0;
			return res->err;
		}
	}
	return res->err = r;
}

/*
 * Client i of the shared-prompt run: connects, builds its prompt, writes
 * a byte to ready, waits for the parent's byte on go, runs its request
 * and writes the result to out.
 */
static int
bp_client(const struct bp_opts *o, const struct cp_model_info *mi, int i,
    int ready, int go, int out)
{
	int n = o->system_len + o->question_len;
	int32_t *ids = malloc((size_t)n * sizeof(*ids));
	struct cp_client *c;
	struct bp_res res;
	char b = 1;

	if (ids == NULL || bp_connect(o->socket, &c) < 0)
		return 1;
	bench_prompt(ids, o->system_len, (int)mi->n_vocab, mi->bos, mi->eos,
	    1);
	/* the question: no BOS, ids of its own */
	bench_prompt(ids + o->system_len, o->question_len, (int)mi->n_vocab,
	    -1, mi->eos, 1000 + (uint64_t)i);
	if (write(ready, &b, 1) != 1 || read(go, &b, 1) != 1)
		return 1;
	(void)bp_request(c, ids, n, o->gen_len, &res, NULL, NULL);
	if (write(out, &res, sizeof(res)) != (ssize_t)sizeof(res))
		return 1;
	cp_close(c);
	free(ids);
	return 0;
}

static void
bp_print(const struct bp_opts *o, const char *what, int i,
    const struct bp_res *r, bool first)
{
	if (o->json)
		printf("%s{\"%s\":%d,\"n_prompt\":%d,\"n_cached\":%d,"
		    "\"ttft_ms\":%.3f,\"total_ms\":%.3f,\"n_gen\":%d,"
		    "\"error\":%d}", first ? "" : ",", what, i, r->n_prompt,
		    r->n_cached, r->ttft_ms, r->total_ms, r->n_gen, r->err);
	else
		printf("| %d | %d | %d | %.1f | %.1f | %d |\n", i, r->n_prompt,
		    r->n_cached, r->ttft_ms, r->total_ms, r->n_gen);
}

static int
bp_shared(const struct bp_opts *o, const struct cp_model_info *mi)
{
	int n = o->clients, ready[2], go[BP_MAX_CLIENTS][2], out[2], i, st;
	struct bp_res *res = calloc((size_t)n, sizeof(*res));
	pid_t *pid = calloc((size_t)n, sizeof(*pid));
	char b = 1;
	int rc = 0;

	if (res == NULL || pid == NULL || pipe(ready) < 0 || pipe(out) < 0)
		return 1;
	for (i = 0; i < n; i++) {
		if (pipe(go[i]) < 0 || (pid[i] = fork()) < 0)
			return 1;
		if (pid[i] == 0)
			_exit(bp_client(o, mi, i + 1, ready[1], go[i][0],
			    out[1]));
	}
	for (i = 0; i < n; i++)
		if (read(ready[0], &b, 1) != 1)
			return 1;
	/* client 1 alone, then the others together */
	if (write(go[0][1], &b, 1) != 1 ||
	    read(out[0], &res[0], sizeof(res[0])) != (ssize_t)sizeof(res[0]))
		return 1;
	for (i = 1; i < n; i++)
		if (write(go[i][1], &b, 1) != 1)
			return 1;
	for (i = 1; i < n; i++)
		if (read(out[0], &res[i], sizeof(res[i])) !=
		    (ssize_t)sizeof(res[i]))
			return 1;
	for (i = 0; i < n; i++) {
		if (waitpid(pid[i], &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			rc = 1;
		if (res[i].err != 0)
			rc = 1;
	}
	{
		double t1 = res[0].t_submit, tn = res[0].t_done;

		for (i = 1; i < n; i++)
			if (res[i].t_done > tn)
				tn = res[i].t_done;
		if (o->json)
			printf("{\"mode\":\"shared\",\"clients\":%d,"
			    "\"system_len\":%d,\"question_len\":%d,"
			    "\"total_ms\":%.3f,\"requests\":[", n,
			    o->system_len, o->question_len, (tn - t1) * 1e3);
		else
			printf("%d clients, system prompt %d tokens, question "
			    "%d tokens, total %.1f ms (in order of arrival "
			    "at the daemon's end)\n\n| request | prompt | "
			    "cached | TTFT ms | total ms | generated |\n"
			    "| ---: | ---: | ---: | ---: | ---: | ---: |\n",
			    n, o->system_len, o->question_len,
			    (tn - t1) * 1e3);
		for (i = 0; i < n; i++)
			bp_print(o, "request", i + 1, &res[i], i == 0);
		if (o->json)
			puts("]}");
	}
	free(res);
	free(pid);
	return rc;
}

static int
bp_chat(const struct bp_opts *o, const struct cp_model_info *mi)
{
	int cap = o->turns * (o->turn_len + o->gen_len) + 1, n = 0, t, rc = 0;
	int32_t *hist = malloc((size_t)cap * sizeof(*hist));
	struct cp_client *c;
	struct bp_res res;

	if (hist == NULL || bp_connect(o->socket, &c) < 0)
		return 1;
	if (o->json)
		printf("{\"mode\":\"chat\",\"turns\":%d,\"turn_len\":%d,"
		    "\"gen_len\":%d,\"requests\":[", o->turns, o->turn_len,
		    o->gen_len);
	else
		printf("one conversation, %d turns of %d new tokens and %d "
		    "generated\n\n| turn | prompt | cached | TTFT ms | "
		    "total ms | generated |\n| ---: | ---: | ---: | ---: | "
		    "---: | ---: |\n", o->turns, o->turn_len, o->gen_len);
	for (t = 0; t < o->turns; t++) {
		bench_prompt(hist + n, o->turn_len, (int)mi->n_vocab,
		    t == 0 ? mi->bos : -1, mi->eos, 2000 + (uint64_t)t);
		n += o->turn_len;
		if (bp_request(c, hist, n, o->gen_len, &res, hist, &n) != 0)
			rc = 1;
		bp_print(o, "turn", t + 1, &res, t == 0);
	}
	if (o->json)
		puts("]}");
	cp_close(c);
	free(hist);
	return rc;
}

int
bench_prefix(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "system-len", required_argument, NULL, 'L' },
		{ "question-len", required_argument, NULL, 'Q' },
		{ "gen-len", required_argument, NULL, 'g' },
		{ "turns", required_argument, NULL, 'T' },
		{ "turn-len", required_argument, NULL, 'U' },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	struct bp_opts o = { NULL, 8, 1500, 20, 16, 0, 100, false };
	struct cp_model_info mi;
	int c, rc = 0;

	optind = 1;
	while (rc == 0 && (c = getopt_long(argc, argv, "s:c:g:o:", lo,
	    NULL)) != -1) {
		switch (c) {
		case 's': o.socket = optarg; break;
		case 'c':
			rc = bench_int_arg("prefix", "-c", optarg, 1,
			    BP_MAX_CLIENTS, &o.clients);
			break;
		case 'L':
			rc = bench_int_arg("prefix", "--system-len", optarg, 1,
			    1 << 20, &o.system_len);
			break;
		case 'Q':
			rc = bench_int_arg("prefix", "--question-len", optarg,
			    1, 1 << 20, &o.question_len);
			break;
		case 'g':
			rc = bench_int_arg("prefix", "--gen-len", optarg, 1,
			    1 << 20, &o.gen_len);
			break;
		case 'T':
			rc = bench_int_arg("prefix", "--turns", optarg, 1,
			    1000, &o.turns);
			break;
		case 'U':
			rc = bench_int_arg("prefix", "--turn-len", optarg, 1,
			    1 << 20, &o.turn_len);
			break;
		case 'o': rc = bench_format_arg("prefix", optarg, &o.json); break;
		default: rc = -EINVAL; break;
		}
	}
	if (rc != 0 || optind != argc)
		return 2;
	if (bench_model_info(o.socket, &mi) < 0)
		return 1;
	return o.turns > 0 ? bp_chat(&o, &mi) : bp_shared(&o, &mi);
}
