/*
 * check_lane.c - the prefill lane on its own (daemon/lane.h): what it
 * computes is what a plain prefill computes, lane_prefault() maps the
 * target's blocks before the job is DONE, and after lane_import() the
 * lane gives its pages back on its own thread and takes the next job.
 * check_worker drives the lane through the worker.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "kvcache.h"
#include "lane.h"
#include "lib/fixtures.h"
#include "lib/resident.h"
#include "lib/suite.h"
#include "model.h"


#define MODEL "aidreams260K.gguf"
#define CHUNK 8
#define FAR 1024	/* first of the target blocks to prefault */
#define N_FAR 64

/*
 * The wake callback: after the first chunk it waits until the test lets
 * the lane go on, so that the test acts while the job is RUNNING.
 */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool hold;		/* stop the lane at its next wake */
	bool held;		/* the lane waits */
	int wakes;
};

static void
gate_wake(void *arg)
{
	struct gate *g = arg;

	pthread_mutex_lock(&g->mu);
	g->wakes++;
	if (g->hold) {
		g->held = true;
		pthread_cond_broadcast(&g->cv);
		while (g->hold)
			pthread_cond_wait(&g->cv, &g->mu);
		g->held = false;
	}
	pthread_mutex_unlock(&g->mu);
}

static void
gate_wait_held(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	while (!g->held)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

static void
gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->hold = false;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

struct fix {
	struct model *m;
	struct backend *dst;	/* the worker's backend */
	struct lane *lane;
	struct gate g;
};

static void
fix_open(struct fix *f)
{
	struct be_params p = { 0 };
	struct lane_params lp;
	struct cp_err e = { 0 };
	char *path = fx_path(MODEL);

	memset(f, 0, sizeof(*f));
	ck_assert_msg(path != NULL, "fixture %s missing", MODEL);
	ck_assert_msg(model_load(path, &f->m, &e) == 0, "%s", e.msg);
	free(path);
	p.n_threads = 2;
	p.max_batch_tokens = 64;
	p.max_seqs = 2;
	p.kv_tokens = 32768;
	ck_assert_msg(be_open("cpu", f->m, &p, &f->dst, &e) == 0, "%s",
	    e.msg);
	pthread_mutex_init(&f->g.mu, NULL);
	pthread_cond_init(&f->g.cv, NULL);
	memset(&lp, 0, sizeof(lp));
	lp.model = f->m;
	lp.be = be_params(f->dst);
	lp.threads = 1;
	lp.chunk = CHUNK;
	lp.wake = gate_wake;
	lp.wake_arg = &f->g;
	ck_assert_msg(lane_new(&lp, &f->lane, &e) == 0, "%s", e.msg);
}

static void
fix_close(struct fix *f)
{
	lane_free(f->lane);
	be_close(f->dst);
	model_free(f->m);
	pthread_cond_destroy(&f->g.cv);
	pthread_mutex_destroy(&f->g.mu);
}

/* The lane's state once it is no longer RUNNING (10 s at most). */
static int
wait_not(struct lane *l, int state)
{
	struct timespec ts = { 0, 1000000 };
	struct lane_status st;

	for (int i = 0; i < 10000; i++) {
		lane_status(l, &st);
		if (st.state != state)
			return st.state;
		nanosleep(&ts, NULL);
	}
	ck_abort_msg("the lane stayed in state %d for 10 s", state);
	return -1;
}

/* Blocks FAR .. FAR + N_FAR - 1, malloc'd: lane_prefault() takes them. */
static int32_t *
far_blocks(void)
{
	int32_t *b = malloc(N_FAR * sizeof(*b));

	ck_assert_ptr_nonnull(b);
	for (int i = 0; i < N_FAR; i++)
		b[i] = FAR + i;
	return b;
}

static void
make_prompt(int32_t *ids, int n, int n_vocab)
{
	for (int i = 0; i < n; i++)
		ids[i] = 1 + (int32_t)((uint32_t)(i * 2654435761u) %
		    (uint32_t)(n_vocab - 1));
}

/*
 * A job: the prompt's n positions in the lane, held after its first chunk
 * while lane_prefault() names the target's blocks FAR..; by DONE they are
 * mapped; the import then matches a prefill of the same prompt on dst
 * itself, and the lane goes IDLE again by itself.
 */
START_TEST(test_prefault_and_import)
{
	struct fix f;
	struct cp_err e = { 0 };
	struct kv_cache *kv;
	int32_t ids[40], far = FAR;
	unsigned char *mem;
	size_t bb;
	int seq, ref, i, n = 40, rc;

	fix_open(&f);
	kv = be_kv(f.dst);
	bb = kv_block_bytes(kv);
	ck_assert_int_ge(kv_blocks_total(kv), FAR + N_FAR);
	mem = f.dst->ops->buf_host(f.dst->kv_buf);
	make_prompt(ids, n, f.m->hp.n_vocab);
	ck_assert(!resident(mem + (size_t)FAR * bb, N_FAR * bb));

	f.g.hold = true;
	ck_assert_int_eq(lane_start(f.lane, ids, n, true), 0);
	gate_wait_held(&f.g);
	lane_prefault(f.lane, f.dst, far_blocks(), N_FAR);
	gate_open(&f.g);
	ck_assert_int_eq(wait_not(f.lane, LANE_RUNNING), LANE_DONE);
	ck_assert_int_ge(f.g.wakes, n / CHUNK);
	rc = be_kv_prefault(f.dst, &far, 1);
	if (rc == -ENOTSUP)
		fprintf(stderr, "check_lane: the kernel cannot prefault "
		    "(MADV_POPULATE_WRITE, Linux 5.14): not checked\n");
	else
		ck_assert(resident(mem + (size_t)FAR * bb, N_FAR * bb));

	/* the import equals dst's own prefill of the prompt */
	seq = kv_seq_new(kv);
	ck_assert_int_eq(kv_seq_append(kv, seq, n), 0);
	ck_assert_msg(lane_import(f.lane, f.dst, seq, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(kv_seq_written(kv, seq), n);
	ref = kv_seq_new(kv);
	{
		struct batch_seq bs = { ref, 0, n, false };
		struct step_batch b = { ids, n, &bs, 1 };
		const float *lg;

		ck_assert_int_eq(kv_seq_append(kv, ref, n), 0);
		ck_assert_msg(be_step(f.dst, &b, &lg, NULL, &e) == 0, "%s",
		    e.msg);
	}
	for (i = 0; i < (n + 15) / 16; i++) {
		int32_t a = kv_seq_blocks(kv, seq)[i];
		int32_t r = kv_seq_blocks(kv, ref)[i];

		ck_assert_mem_eq(mem + (size_t)a * bb, mem + (size_t)r * bb,
		    bb);
	}

	/* The lane releases on its thread and takes the next job. */
	ck_assert_int_eq(wait_not(f.lane, LANE_RELEASING), LANE_IDLE);
	ck_assert_int_eq(lane_start(f.lane, ids, 20, false), 0);
	ck_assert_int_eq(wait_not(f.lane, LANE_RUNNING), LANE_DONE);
	lane_cancel(f.lane);
	ck_assert_int_eq(wait_not(f.lane, LANE_RELEASING), LANE_IDLE);
	fix_close(&f);
}
END_TEST
SUITE_TEST("lane", test_prefault_and_import);

/* lane_prefault() outside a RUNNING job is ignored. */
START_TEST(test_prefault_idle_ignored)
{
	struct fix f;
	int32_t ids[20];
	unsigned char *mem;
	size_t bb;

	fix_open(&f);
	bb = kv_block_bytes(be_kv(f.dst));
	mem = f.dst->ops->buf_host(f.dst->kv_buf);
	lane_prefault(f.lane, f.dst, far_blocks(), N_FAR);
	make_prompt(ids, 20, f.m->hp.n_vocab);
	ck_assert_int_eq(lane_start(f.lane, ids, 20, false), 0);
	ck_assert_int_eq(wait_not(f.lane, LANE_RUNNING), LANE_DONE);
	ck_assert(!resident(mem + (size_t)FAR * bb, N_FAR * bb));
	fix_close(&f);
}
END_TEST
SUITE_TEST("lane", test_prefault_idle_ignored);

SUITE_CASE("lane", 60);

int
main(void)
{
	return fx_main("lane", MODEL);
}
