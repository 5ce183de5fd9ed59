/*
 * bench_serve.c - `cpbench serve`: client processes streaming through a
 * running daemon, and the client machinery that `cpbench ipc` shares.
 *
 *	cpbench serve [--socket S] [-c N] [--prompt-len P] [--gen-len G]
 *	    [-r R] [--long-prompt L --long-every K [--long-count M]
 *	    [--baseline]] [-o md|json]
 *
 * N client processes are forked; each connects on its own (cp_connect),
 * builds its prompts, says it is ready and waits for the common start (a
 * pipe that the parent closes once every client is ready).  Each then runs
 * R requests one after the other: P token ids (cp_submit_tokens, so the
 * length is exact), at most G generated tokens, greedy.  Every TOKEN event
 * is stamped with CLOCK_MONOTONIC on arrival; the stamps travel back to
 * the parent through a pipe per client, after the client's last request.
 *
 * With --long-prompt L, one more client submits an L-token prompt (one
 * generated token) K ms after the start, then every K ms (one at a time,
 * at most M of them when --long-count is given) while the N streaming
 * clients still run.  Its TTFT is reported, and the
 * streams' inter-token gaps are split into those before the first long
 * prompt arrived (unloaded) and those overlapping a long prompt's prefill
 * (from its submission to its first token).  With --baseline the same
 * streams first run alone, and their gaps between the same tokens as the
 * gaps overlapping a prefill are reported too: the unloaded inter-token
 * time at the positions the streams had while the prompt was prefilled
 * (a stream's gaps grow with its context, so the gaps before the long
 * prompt arrived understate it).
 *
 * Definitions: TTFT = first TOKEN - submission; ITL = gap between
 * consecutive TOKENs of one request; throughput = generated tokens of the
 * streaming clients / (last DONE - start).  Percentiles are nearest-rank.
 * Prompts: BOS (when the model has one), then ids drawn from a fixed
 * sequence per client and request (bench_prompt()), never BOS or EOS.
 */
#include "bench_serve.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpbench.h"
#include "cpclient.h"

#define BS_EVENT_MS 300000	/* longest wait for one event */
#define BS_READY_MS 120000	/* longest wait for the clients to connect */
#define BS_MAX_CLIENTS 1024

/* Memory shared by the parent and every client process. */
struct bs_shared {
	double t0;		/* common start, set before the release */
	int abort;		/* nonzero: a client failed to get ready */
	int active;		/* streaming clients still running */
};

/* One request's record on the pipe, followed by n_tok doubles. */
struct bs_rec {
	int32_t client;
	int32_t is_long;
	int32_t n_tok;
	int32_t n_gen;
	int32_t finish;
	int32_t err;
	double t_submit;
	double t_done;
};

static uint64_t
bs_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void
bench_prompt(int32_t *ids, int n, int n_vocab, int bos, int eos,
    uint64_t seed)
{
	uint64_t k = 0;
	int i = 0;

	if (n > 0 && bos >= 0 && bos < n_vocab)
		ids[i++] = bos;
	while (i < n) {
		int32_t id = (int32_t)(bs_mix(bs_mix(seed) + k++) %
		    (uint64_t)n_vocab);

		if (id != bos && id != eos)
			ids[i++] = id;
	}
}

static int
bs_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double
bench_pct(double *x, size_t n, double p)
{
	size_t r;

	if (n == 0)
		return 0;
	qsort(x, n, sizeof(*x), bs_cmp);
	r = (size_t)ceil(p / 100.0 * (double)n);
	if (r < 1)
		r = 1;
	if (r > n)
		r = n;
	return x[r - 1];
}

void
bench_vec_free(struct bench_vec *v)
{
	free(v->x);
	v->x = NULL;
	v->n = v->cap = 0;
}

int
bench_vec_add(struct bench_vec *v, double x)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		double *p = realloc(v->x, cap * sizeof(*p));

		if (p == NULL)
			return -ENOMEM;
		v->x = p;
		v->cap = cap;
	}
	v->x[v->n++] = x;
	return 0;
}

/* ---- one client process ---------------------------------------------- */

static int
bs_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	ssize_t w;

	while (n > 0) {
		if ((w = write(fd, c, n)) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Sleeps until CLOCK_MONOTONIC reaches t (seconds). */
static void
bs_sleep_until(double t)
{
	struct timespec ts;

	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	    EINTR)
		;
}

/* Runs one request; stamps its tokens into *tok; fills rec. */
static int
bs_request(struct cp_client *c, const int32_t *ids, int n, int gen,
    struct bench_vec *tok, struct bs_rec *rec)
{
	struct cp_params p;
	struct cp_event ev;
	int id, rc;

	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = (uint32_t)gen;
	tok->n = 0;
	rec->t_submit = bench_now();
	if ((id = cp_submit_tokens(c, ids, (size_t)n, &p)) < 0)
		return id;
	for (;;) {
		if ((rc = cp_next_event(c, &ev, BS_EVENT_MS)) < 0)
			return rc;
		if (ev.req_id != id)
			continue;
		if (ev.type == CP_EVENT_TOKEN) {
			if (ev.token >= 0 && bench_vec_add(tok,
			    bench_now()) < 0)
				return -ENOMEM;
			continue;
		}
		rec->t_done = bench_now();
		rec->n_tok = (int32_t)tok->n;
		rec->n_gen = (int32_t)ev.n_gen;
		rec->finish = ev.type == CP_EVENT_DONE ? ev.finish : 0;
		rec->err = ev.type == CP_EVENT_ERROR ? ev.error : 0;
		return 0;
	}
}

struct bs_child {
	const struct bench_load *l;
	struct bs_shared *sh;
	int n;			/* streaming clients */
	int ready_w, go_r;
};

/* After cp_connect: ready byte, then wait for the release. 0, or -ECANCELED. */
static int
bs_sync(struct bs_child *ch)
{
	char b = 'r';

	if (bs_write_all(ch->ready_w, &b, 1) < 0)
		return -EPIPE;
	while (read(ch->go_r, &b, 1) < 0 && errno == EINTR)
		;
	return ch->sh->abort ? -ECANCELED : 0;
}

static int
bs_emit(int fd, struct bs_rec *rec, const struct bench_vec *tok)
{
	int rc;

	if ((rc = bs_write_all(fd, rec, sizeof(*rec))) < 0)
		return rc;
	return bs_write_all(fd, tok->x, tok->n * sizeof(double));
}

/* Client i (i == n: the long-prompt client); exit status of the process. */
static int
bs_client(struct bs_child *ch, int i, int out)
{
	const struct bench_load *l = ch->l;
	struct cp_connect_opts o;
	struct cp_model_info mi;
	struct cp_client *c = NULL;
	struct bench_vec tok = { 0 };
	struct bs_rec rec;
	int32_t *ids = NULL;
	bool is_long = i == ch->n;
	int np = is_long ? l->long_prompt : l->n_prompt;
	int gen = is_long ? 1 : l->n_gen, r = 0, rc, status = 1;
	char b = 'x';

	cp_connect_opts_init(&o);
	o.socket_path = l->socket;
	o.timeout_ms = 30000;
	if ((rc = cp_connect(&o, &c)) < 0) {
		fprintf(stderr, "cpbench: client %d: connect: %s\n", i,
		    cp_strerror(rc));
		goto fail;
	}
	cp_model_info(c, &mi);
	if ((ids = calloc((size_t)np, sizeof(*ids))) == NULL)
		goto fail;
	if ((rc = bs_sync(ch)) < 0)
		goto out;
	if (is_long) {
		for (r = 0; (l->long_count == 0 || r < l->long_count) &&
		    __atomic_load_n(&ch->sh->active, __ATOMIC_ACQUIRE) > 0;
		    r++) {
			double at = ch->sh->t0 + (r + 1) * l->long_every_ms /
			    1e3;

			while (bench_now() < at && __atomic_load_n(
			    &ch->sh->active, __ATOMIC_ACQUIRE) > 0)
				bs_sleep_until(fmin(at, bench_now() + 0.005));
			if (__atomic_load_n(&ch->sh->active,
			    __ATOMIC_ACQUIRE) == 0)
				break;
			bench_prompt(ids, np, (int)mi.n_vocab, mi.bos, mi.eos,
			    (1ull << 40) + (uint64_t)r);
			memset(&rec, 0, sizeof(rec));
			if ((rc = bs_request(c, ids, np, gen, &tok, &rec)) < 0)
				goto bad;
			rec.client = i;
			rec.is_long = 1;
			if (bs_emit(out, &rec, &tok) < 0)
				goto out;
		}
	} else {
		for (r = 0; r < l->reps; r++) {
			bench_prompt(ids, np, (int)mi.n_vocab, mi.bos, mi.eos,
			    (uint64_t)i * 4096u + (uint64_t)r);
			memset(&rec, 0, sizeof(rec));
			if ((rc = bs_request(c, ids, np, gen, &tok, &rec)) < 0)
				goto bad;
			rec.client = i;
			if (bs_emit(out, &rec, &tok) < 0)
				goto out;
		}
		__atomic_sub_fetch(&ch->sh->active, 1, __ATOMIC_RELEASE);
	}
	status = 0;
	goto out;
bad:
	fprintf(stderr, "cpbench: client %d: request %d: %s\n", i, r,
	    cp_strerror(rc));
	goto out;
fail:
	(void)bs_write_all(ch->ready_w, &b, 1);
out:
	if (!is_long && status != 0)
		__atomic_sub_fetch(&ch->sh->active, 1, __ATOMIC_RELEASE);
	bench_vec_free(&tok);
	free(ids);
	cp_close(c);
	return status;
}

/* ---- the parent ------------------------------------------------------ */

/* Reads fd to EOF into a malloc'd buffer. */
static int
bs_slurp(int fd, unsigned char **out, size_t *len)
{
	size_t cap = 0, n = 0;
	unsigned char *p = NULL, *q;
	ssize_t r;

	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			if ((q = realloc(p, cap)) == NULL) {
				free(p);
				return -ENOMEM;
			}
			p = q;
		}
		if ((r = read(fd, p + n, cap - n)) < 0) {
			if (errno == EINTR)
				continue;
			free(p);
			return -errno;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*out = p;
	*len = n;
	return 0;
}

/* Appends the records in buf[0..len) to run. */
static int
bs_parse(struct bench_run *run, const unsigned char *buf, size_t len)
{
	struct bs_rec rec;
	struct bench_req *rq;
	size_t off = 0, nb;

	while (off < len) {
		if (len - off < sizeof(rec))
			return -EPROTO;
		memcpy(&rec, buf + off, sizeof(rec));
		off += sizeof(rec);
		if (rec.n_tok < 0 || (size_t)rec.n_tok > (len - off) /
		    sizeof(double))
			return -EPROTO;
		nb = (size_t)rec.n_tok * sizeof(double);
		if (run->n_req == run->cap_req) {
			int cap = run->cap_req ? run->cap_req * 2 : 64;

			rq = realloc(run->req, (size_t)cap * sizeof(*rq));
			if (rq == NULL)
				return -ENOMEM;
			run->req = rq;
			run->cap_req = cap;
		}
		rq = &run->req[run->n_req];
		memset(rq, 0, sizeof(*rq));
		if (nb > 0 && (rq->tok = malloc(nb)) == NULL)
			return -ENOMEM;
		if (nb > 0)
			memcpy(rq->tok, buf + off, nb);
		off += nb;
		rq->client = rec.client;
		rq->is_long = rec.is_long != 0;
		rq->n_tok = rec.n_tok;
		rq->n_gen = rec.n_gen;
		rq->finish = rec.finish;
		rq->err = rec.err;
		rq->t_submit = rec.t_submit;
		rq->t_done = rec.t_done;
		run->n_req++;
	}
	return 0;
}

void
bench_run_free(struct bench_run *run)
{
	for (int i = 0; i < run->n_req; i++)
		free(run->req[i].tok);
	free(run->req);
	memset(run, 0, sizeof(*run));
}

int
bench_model_info(const char *socket, struct cp_model_info *mi)
{
	struct cp_connect_opts o;
	struct cp_client *c;
	int rc;

	cp_connect_opts_init(&o);
	o.socket_path = socket;
	if ((rc = cp_connect(&o, &c)) < 0) {
		fprintf(stderr, "cpbench: cannot connect to %s: %s\n",
		    socket != NULL ? socket : "the daemon", cp_strerror(rc));
		return rc;
	}
	rc = cp_model_info(c, mi);
	cp_close(c);
	return rc;
}

/* Waits for n ready bytes; -ECANCELED when a client failed. */
static int
bs_wait_ready(int fd, int n)
{
	struct pollfd pfd = { fd, POLLIN, 0 };
	double until = bench_now() + BS_READY_MS / 1e3;
	char b[64];
	int got = 0, bad = 0;
	ssize_t r;

	while (got < n) {
		int ms = (int)((until - bench_now()) * 1e3);

		if (ms <= 0 || poll(&pfd, 1, ms) <= 0)
			return -ETIMEDOUT;
		r = read(fd, b, sizeof(b) < (size_t)(n - got) ? sizeof(b) :
		    (size_t)(n - got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		for (ssize_t k = 0; k < r; k++)
			bad += b[k] != 'r';
		got += (int)r;
	}
	return bad ? -ECANCELED : 0;
}

int
bench_clients(const struct bench_load *l, int n, struct bench_run *run)
{
	int total = n + (l->long_prompt > 0), ready[2] = { -1, -1 };
	int go[2] = { -1, -1 }, *outs = NULL, i, rc = 0, status, failed = 0;
	struct bs_shared *sh;
	struct bs_child ch;
	pid_t *pids = NULL;

	memset(run, 0, sizeof(*run));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -ENOMEM;
	sh->active = n;
	pids = calloc((size_t)total, sizeof(*pids));
	outs = malloc((size_t)total * sizeof(*outs));
	if (pids == NULL || outs == NULL || pipe(ready) < 0 || pipe(go) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < total; i++)
		outs[i] = -1;
	ch = (struct bs_child){ l, sh, n, ready[1], go[0] };
	fflush(NULL);
	for (i = 0; i < total; i++) {
		int p[2];

		if (pipe(p) < 0) {
			rc = -errno;
			break;
		}
		if ((pids[i] = fork()) < 0) {
			rc = -errno;
			close(p[0]);
			close(p[1]);
			break;
		}
		if (pids[i] == 0) {
			close(p[0]);
			close(ready[0]);
			close(go[1]);
			for (int k = 0; k < i; k++)
				close(outs[k]);
			_exit(bs_client(&ch, i, p[1]));
		}
		close(p[1]);
		outs[i] = p[0];
	}
	close(ready[1]);
	ready[1] = -1;
	if (rc == 0)
		rc = bs_wait_ready(ready[0], total);
	if (rc < 0)
		sh->abort = 1;
	sh->t0 = bench_now();
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	close(go[1]);		/* the release */
	go[1] = -1;
	run->t0 = sh->t0;
	for (i = 0; i < total && pids[i] > 0; i++) {
		unsigned char *buf = NULL;
		size_t len = 0;
		int r2;

		if ((r2 = bs_slurp(outs[i], &buf, &len)) == 0) {
			if ((r2 = bs_parse(run, buf, len)) < 0 && rc == 0)
				rc = r2;
			free(buf);
		} else if (rc == 0)
			rc = r2;
	}
	for (i = 0; i < total && pids[i] > 0; i++) {
		while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	if (rc == 0 && failed > 0) {
		fprintf(stderr, "cpbench: %d of %d clients failed\n", failed,
		    total);
		rc = -EIO;
	}
out:
	for (i = 0; outs != NULL && i < total; i++)
		if (outs[i] >= 0)
			close(outs[i]);
	for (i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (go[i] >= 0)
			close(go[i]);
	}
	free(outs);
	free(pids);
	munmap(sh, sizeof(*sh));
	if (rc < 0)
		bench_run_free(run);
	return rc;
}

/* ---- cpbench serve --------------------------------------------------- */

struct bs_opts {
	struct bench_load l;
	int n;
	bool json;
	bool baseline;	/* --baseline: a first run without long prompts */
};

struct bs_dist {
	size_t n;
	double p50, p99, max;	/* milliseconds */
};

static void
bs_dist(struct bench_vec *v, struct bs_dist *d)
{
	d->n = v->n;
	d->max = 0;
	for (size_t i = 0; i < v->n; i++)
		d->max = fmax(d->max, v->x[i]);
	d->p50 = bench_pct(v->x, v->n, 50) * 1e3;
	d->p99 = bench_pct(v->x, v->n, 99) * 1e3;
	d->max *= 1e3;
}

struct bs_result {
	int n_req, n_err, n_long;
	int n_early;	/* streams done before the last long first token */
	long tokens;
	double wall, tps;
	struct bs_dist ttft, itl, lttft, itl_free, itl_load;
	struct bs_dist itl_base;	/* the baseline's gaps at the tokens of
					   itl_load */
};

static bool
bs_in_prefill(const struct bench_run *run, double a, double b)
{
	for (int i = 0; i < run->n_req; i++) {
		const struct bench_req *q = &run->req[i];
		double end = q->n_tok > 0 ? q->tok[0] : q->t_done;

		if (q->is_long && b > q->t_submit && a < end)
			return true;
	}
	return false;
}

/*
 * The streaming request of run that is the same client's same request as
 * q of another run (its k-th streaming request), or NULL.
 */
static const struct bench_req *
bs_same_req(const struct bench_run *run, const struct bench_run *other,
    const struct bench_req *q)
{
	int k = 0;

	for (const struct bench_req *p = other->req; p < q; p++)
		k += p->client == q->client && !p->is_long;
	for (int i = 0; i < run->n_req; i++) {
		const struct bench_req *p = &run->req[i];

		if (p->client == q->client && !p->is_long && k-- == 0)
			return p;
	}
	return NULL;
}

/*
 * Summarises run; with base (a run of the same streams without long
 * prompts), also the base's gaps between the same tokens as the gaps of
 * run that overlap a prefill: the streams' unloaded inter-token time at
 * the positions they had during it.
 */
static int
bs_summarise(const struct bench_run *run, const struct bench_run *base,
    struct bs_result *res)
{
	struct bench_vec ttft = { 0 }, itl = { 0 }, lttft = { 0 };
	struct bench_vec ifree = { 0 }, iload = { 0 }, ibase = { 0 };
	double t_end = run->t0, first_long = INFINITY, last_ttft = -INFINITY;
	int rc = 0;

	memset(res, 0, sizeof(*res));
	for (int i = 0; i < run->n_req; i++) {
		const struct bench_req *q = &run->req[i];

		if (!q->is_long)
			continue;
		first_long = fmin(first_long, q->t_submit);
		last_ttft = fmax(last_ttft, q->n_tok > 0 ? q->tok[0] :
		    q->t_done);
	}
	for (int i = 0; i < run->n_req && rc == 0; i++) {
		const struct bench_req *q = &run->req[i], *p;

		if (q->err != 0)
			res->n_err++;
		if (q->is_long) {
			res->n_long++;
			if (q->n_tok > 0)
				rc = bench_vec_add(&lttft, q->tok[0] -
				    q->t_submit);
			continue;
		}
		res->n_req++;
		res->tokens += q->n_tok;
		if (q->n_tok > 0 && q->tok[q->n_tok - 1] < last_ttft)
			res->n_early++;
		t_end = fmax(t_end, q->t_done);
		if (q->n_tok > 0)
			rc = bench_vec_add(&ttft, q->tok[0] - q->t_submit);
		p = base != NULL ? bs_same_req(base, run, q) : NULL;
		for (int k = 1; k < q->n_tok && rc == 0; k++) {
			double a = q->tok[k - 1], b = q->tok[k];

			rc = bench_vec_add(&itl, b - a);
			if (rc == 0 && b <= first_long)
				rc = bench_vec_add(&ifree, b - a);
			if (rc != 0 || !isfinite(first_long) ||
			    !bs_in_prefill(run, a, b))
				continue;
			rc = bench_vec_add(&iload, b - a);
			if (rc == 0 && p != NULL && k < p->n_tok)
				rc = bench_vec_add(&ibase, p->tok[k] -
				    p->tok[k - 1]);
		}
	}
	res->wall = t_end - run->t0;
	res->tps = res->wall > 0 ? (double)res->tokens / res->wall : 0;
	bs_dist(&ttft, &res->ttft);
	bs_dist(&itl, &res->itl);
	bs_dist(&lttft, &res->lttft);
	bs_dist(&ifree, &res->itl_free);
	bs_dist(&iload, &res->itl_load);
	bs_dist(&ibase, &res->itl_base);
	bench_vec_free(&ibase);
	bench_vec_free(&ttft);
	bench_vec_free(&itl);
	bench_vec_free(&lttft);
	bench_vec_free(&ifree);
	bench_vec_free(&iload);
	return rc;
}

static void
bs_json_dist(const char *name, const struct bs_dist *d, const char *sep)
{
	printf("  \"%s\": {\"n\": %zu, \"p50\": %.3f, \"p99\": %.3f, "
	    "\"max\": %.3f}%s\n", name, d->n, d->p50, d->p99, d->max, sep);
}

static void
bs_print(const struct bs_opts *o, const struct cp_model_info *mi,
    const struct bs_result *r)
{
	const struct bench_load *l = &o->l;

	if (l->long_prompt > 0 && r->n_early > 0)
		fprintf(stderr, "cpbench serve: warning: %d streams ended "
		    "before a long prompt's first token: the ITL in prefill "
		    "(%zu gaps) covers only part of its prefill; raise "
		    "--gen-len\n", r->n_early, r->itl_load.n);
	if (o->json) {
		printf("{\n  \"model\": \"%s\", \"backend\": \"%s\", "
		    "\"clients\": %d, \"prompt\": %d, \"gen\": %d, "
		    "\"reps\": %d,\n", mi->name, mi->backend, o->n,
		    l->n_prompt, l->n_gen, l->reps);
		printf("  \"requests\": %d, \"errors\": %d, \"tokens\": %ld, "
		    "\"wall_s\": %.4f, \"tok_s\": %.3f,\n", r->n_req,
		    r->n_err, r->tokens, r->wall, r->tps);
		bs_json_dist("ttft_ms", &r->ttft, ",");
		if (l->long_prompt > 0) {
			bs_json_dist("itl_ms", &r->itl, ",");
			printf("  \"long\": {\"prompt\": %d, \"every_ms\": %d, "
			    "\"count\": %d, \"n\": %d},\n", l->long_prompt,
			    l->long_every_ms, l->long_count, r->n_long);
			bs_json_dist("long_ttft_ms", &r->lttft, ",");
			printf("  \"streams_done_before_long_ttft\": %d,\n",
			    r->n_early);
			bs_json_dist("itl_unloaded_ms", &r->itl_free, ",");
			if (o->baseline)
				bs_json_dist("itl_baseline_same_tokens_ms",
				    &r->itl_base, ",");
			bs_json_dist("itl_prefill_ms", &r->itl_load, "");
		} else
			bs_json_dist("itl_ms", &r->itl, "");
		printf("}\n");
		return;
	}
	printf("| model | backend | clients | prompt | gen | requests | "
	    "tokens | wall s | tok/s | TTFT p50 ms | TTFT p99 ms | "
	    "ITL p50 ms | ITL p99 ms | ITL max ms |\n");
	printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
	    "| ---: | ---: | ---: | ---: | ---: |\n");
	printf("| %s | %s | %d | %d | %d | %d | %ld | %.3f | %.2f | %.2f | "
	    "%.2f | %.2f | %.2f | %.2f |\n", mi->name, mi->backend, o->n,
	    l->n_prompt, l->n_gen, r->n_req, r->tokens, r->wall, r->tps,
	    r->ttft.p50, r->ttft.p99, r->itl.p50, r->itl.p99, r->itl.max);
	if (l->long_prompt > 0) {
		printf("\n| long prompt | every ms | long requests | "
		    "long TTFT p50 ms | long TTFT max ms | ITL unloaded "
		    "p50/p99 ms | ITL in prefill p50/p99/max ms |\n");
		printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
		printf("| %d | %d | %d | %.2f | %.2f | %.2f / %.2f | "
		    "%.2f / %.2f / %.2f |\n", l->long_prompt,
		    l->long_every_ms, r->n_long, r->lttft.p50, r->lttft.max,
		    r->itl_free.p50, r->itl_free.p99, r->itl_load.p50,
		    r->itl_load.p99, r->itl_load.max);
		if (o->baseline)
			printf("\nbaseline run without the long prompt, the "
			    "same %zu gaps: ITL p50/p99/max %.2f / %.2f / "
			    "%.2f ms\n", r->itl_base.n, r->itl_base.p50,
			    r->itl_base.p99, r->itl_base.max);
	}
	if (r->n_err > 0)
		printf("\n%d requests ended with an error\n", r->n_err);
}

static int
bs_parse_opts(int argc, char **argv, struct bs_opts *o)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "prompt-len", required_argument, NULL, 'p' },
		{ "gen-len", required_argument, NULL, 'g' },
		{ "reps", required_argument, NULL, 'r' },
		{ "long-prompt", required_argument, NULL, 'L' },
		{ "long-every", required_argument, NULL, 'K' },
		{ "long-count", required_argument, NULL, 'M' },
		{ "output", required_argument, NULL, 'o' },
		{ "baseline", no_argument, NULL, 'B' },
		{ NULL, 0, NULL, 0 }
	};
	int c, rc = 0;

	memset(o, 0, sizeof(*o));
	o->n = 1;
	o->l.n_prompt = 16;
	o->l.n_gen = 64;
	o->l.reps = 1;
	o->l.long_every_ms = 2000;
	optind = 1;
	while (rc == 0 && (c = getopt_long(argc, argv, "s:c:p:g:r:o:", lo,
	    NULL)) != -1) {
		switch (c) {
		case 's': o->l.socket = optarg; break;
		case 'c':
			rc = bench_int_arg("serve", "-c", optarg, 1,
			    BS_MAX_CLIENTS, &o->n);
			break;
		case 'p':
			rc = bench_int_arg("serve", "--prompt-len", optarg, 1,
			    1 << 20, &o->l.n_prompt);
			break;
		case 'g':
			rc = bench_int_arg("serve", "--gen-len", optarg, 1,
			    1 << 20, &o->l.n_gen);
			break;
		case 'r':
			rc = bench_int_arg("serve", "-r", optarg, 1, 100000,
			    &o->l.reps);
			break;
		case 'L':
			rc = bench_int_arg("serve", "--long-prompt", optarg, 1,
			    1 << 20, &o->l.long_prompt);
			break;
		case 'K':
			rc = bench_int_arg("serve", "--long-every", optarg, 1,
			    3600 * 1000, &o->l.long_every_ms);
			break;
		case 'M':
			rc = bench_int_arg("serve", "--long-count", optarg, 0,
			    100000, &o->l.long_count);
			break;
		case 'o':
			if (bench_format_arg("serve", optarg, &o->json) < 0)
				rc = -EINVAL;
			break;
		case 'B': o->baseline = true; break;
		default:
			rc = -EINVAL;
		}
	}
	if (rc == 0 && (optind != argc || (o->baseline &&
	    o->l.long_prompt == 0)))
		rc = -EINVAL;
	if (rc < 0)
		fputs(bench_serve_usage, stderr);
	return rc;
}

int
bench_serve(int argc, char **argv)
{
	struct bs_opts o;
	struct cp_model_info mi;
	struct bench_run run, base = { 0 };
	struct bench_load bl;
	struct bs_result res;
	int rc;

	if (bs_parse_opts(argc, argv, &o) < 0)
		return 2;
	if (bench_model_info(o.l.socket, &mi) < 0)
		return 1;
	if ((uint64_t)o.l.n_prompt + (uint64_t)o.l.n_gen > mi.n_ctx ||
	    (uint64_t)o.l.long_prompt + 1 > mi.n_ctx) {
		fprintf(stderr, "cpbench serve: prompt + generated tokens "
		    "exceed the served context of %u\n", mi.n_ctx);
		return 2;
	}
	bl = o.l;
	bl.long_prompt = 0;
	if (o.baseline && (rc = bench_clients(&bl, o.n, &base)) < 0) {
		fprintf(stderr, "cpbench serve: baseline: %s\n",
		    cp_strerror(rc));
		return 1;
	}
	if ((rc = bench_clients(&o.l, o.n, &run)) < 0) {
		fprintf(stderr, "cpbench serve: %s\n", cp_strerror(rc));
		bench_run_free(&base);
		return 1;
	}
	rc = bs_summarise(&run, o.baseline ? &base : NULL, &res);
	bench_run_free(&run);
	bench_run_free(&base);
	if (rc < 0) {
		fprintf(stderr, "cpbench serve: %s\n", strerror(-rc));
		return 1;
	}
	bs_print(&o, &mi, &res);
	return res.n_err > 0 ? 1 : 0;
}
