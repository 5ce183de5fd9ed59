/*
 * check_alloc.c - nothing on the per-token path allocates heap memory.
 *
 * This program interposes the C allocator: its own malloc, calloc,
 * realloc, free, aligned_alloc, posix_memalign, memalign and valloc
 * forward to glibc's __libc_* entry points and, while counting is on,
 * count every call from any thread (the CPU backend's workers included).
 * With counting on, the tests drive a CPU backend as the daemon's engine
 * thread does: kv_seq_append(), be_step() (prefill chunks after the
 * backend's first step, decode steps, a step mixing a decode row with
 * another sequence's prompt chunk), sampler_sample() and sampler_accept();
 * then they assert that nothing was allocated or freed.  A first test
 * checks that the interposition sees allocations at all (libc's strdup(),
 * an engine constructor), so the others cannot pass by not counting.
 *
 * Under AddressSanitizer or ThreadSanitizer the allocator belongs to the
 * sanitizer runtime and cannot be interposed here: the program then exits
 * 77 (skipped).
 */
#include <check.h>
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "lib/fixtures.h"
#include "lib/suite.h"
#include "model.h"
#include "sampler.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ALLOC_SANITIZED 1
#endif
#endif


static atomic_int counting;
static atomic_long n_allocs, n_frees;

#ifndef ALLOC_SANITIZED

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static void
count_alloc(void)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add(&n_allocs, 1);
}

void *
malloc(size_t n)
{
	count_alloc();
	return __libc_malloc(n);
}

void *
calloc(size_t n, size_t size)
{
	count_alloc();
	return __libc_calloc(n, size);
}

void *
realloc(void *p, size_t n)
{
	count_alloc();
	return __libc_realloc(p, n);
}

void
free(void *p)
{
	if (p != NULL && atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add(&n_frees, 1);
	__libc_free(p);
}

void *
aligned_alloc(size_t align, size_t n)
{
	count_alloc();
	return __libc_memalign(align, n);
}

void *
memalign(size_t align, size_t n)
{
	count_alloc();
	return __libc_memalign(align, n);
}

int
posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	count_alloc();
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	if ((p = __libc_memalign(align, n)) == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

void *
valloc(size_t n)
{
	count_alloc();
	return __libc_memalign(4096, n);
}

#endif /* !ALLOC_SANITIZED */

static void
count_start(void)
{
	atomic_store(&n_allocs, 0);
	atomic_store(&n_frees, 0);
	atomic_store(&counting, 1);
}

static void
count_stop(long *allocs, long *frees)
{
	atomic_store(&counting, 0);
	*allocs = atomic_load(&n_allocs);
	*frees = atomic_load(&n_frees);
}

/* The interposition sees libc's and the engine's allocations. */
START_TEST(test_counter_counts)
{
	struct sampler_params sp = sampler_params_default();
	struct cp_err e = { 0 };
	char *(*volatile dup)(const char *) = strdup;
	struct sampler *s;
	long a, f;
	char *p;

	count_start();
	p = dup("interposed");
	free(p);
	count_stop(&a, &f);
	ck_assert_int_eq(a, 1);
	ck_assert_int_eq(f, 1);
	count_start();
	s = sampler_new(&sp, 100, &e);
	count_stop(&a, &f);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_gt(a, 0);
	sampler_free(s);
}
END_TEST
SUITE_TEST("per-token path", test_counter_counts);

static const char *const models[] = {
	"aidreams260K.gguf",
	"synth/synth-gqa-F16.gguf",
	"synth/synth-gqa-Q8_0.gguf",
	"synth/synth-tiny-Q4_K_M.gguf",
};
#define N_MODELS (sizeof(models) / sizeof(models[0]))

#define CHUNK 16
#define N_DECODE 12

/*
 * Inside the counted region nothing may call Check's assertions (each
 * records its location with strdup()): failures are kept in struct run
 * and asserted after counting stops.
 */
struct run {
	struct backend *be;
	struct sampler *s;
	int rc;			/* first failure, 0 if none */
	const char *what;	/* what failed */
	char msg[sizeof(((struct cp_err *)0)->msg)];
};

static void
run_fail(struct run *r, int rc, const char *what, const struct cp_err *e)
{
	if (r->rc != 0)
		return;
	r->rc = rc;
	r->what = what;
	if (e != NULL)
		memcpy(r->msg, e->msg, sizeof(r->msg));
}

/* One step of the given entries; the logits of the last entry asked. */
static const float *
step(struct run *r, const int32_t *toks, int n_toks,
    const struct batch_seq *seqs, int n_seqs)
{
	struct step_batch b = { toks, n_toks, seqs, n_seqs };
	struct cp_err e = { 0 };
	struct kv_cache *kv = be_kv(r->be);
	const float *logits = NULL;
	int n_logits = 0, rc, i;

	for (i = 0; i < n_seqs; i++)
		if ((rc = kv_seq_append(kv, seqs[i].seq,
		    seqs[i].n_tokens)) != 0)
			run_fail(r, rc, "kv_seq_append", NULL);
	if ((rc = be_step(r->be, &b, &logits, &n_logits, &e)) != 0) {
		run_fail(r, rc, "be_step", &e);
		return NULL;
	}
	for (i = 0; i < n_seqs; i++)
		if ((rc = kv_seq_set_written(kv, seqs[i].seq, seqs[i].pos +
		    seqs[i].n_tokens)) != 0)
			run_fail(r, rc, "kv_seq_set_written", NULL);
	if (n_logits < 1)
		run_fail(r, -EINVAL, "be_step gave no logits", NULL);
	return logits;
}

/* Sample from logits and accept the id; -1 after a failure. */
static int32_t
sample(struct run *r, const float *logits)
{
	struct sampler_out out;
	int rc;

	if (logits == NULL)
		return -1;
	if ((rc = sampler_sample(r->s, logits, &out)) != 0) {
		run_fail(r, rc, "sampler_sample", NULL);
		return -1;
	}
	if ((rc = sampler_accept(r->s, out.id)) != 0)
		run_fail(r, rc, "sampler_accept", NULL);
	return out.id;
}

/*
 * Prefill and decode on the CPU backend with two threads, counting from
 * the second step on: no allocation, no free.
 */
START_TEST(test_steps_allocate_nothing)
{
	char *path = fx_path(models[_i]);
	struct cp_err e = { 0 };
	struct model *m = NULL;
	struct be_params bp = { 0 };
	struct sampler_params sp = sampler_params_default();
	struct run run = { 0 };
	struct kv_cache *kv;
	int32_t toks[3 * CHUNK + N_DECODE + 2], mixed[CHUNK + 1], id;
	int sa, sb, pos, i;
	const float *logits;
	long a, f;

	if (path == NULL) {
		printf("check_alloc: %s not in %s, skipped\n", models[_i],
		    fx_dir());
		return;
	}
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	bp.n_threads = 2;
	bp.max_batch_tokens = 2 * CHUNK;
	bp.max_seqs = 2;
	bp.n_ctx = 3 * CHUNK + N_DECODE + 2;
	bp.kv_tokens = 2 * bp.n_ctx;
	ck_assert_msg(be_open("cpu", m, &bp, &run.be, &e) == 0, "%s", e.msg);
	sp.seed = 7;
	sp.n_logprobs = 5;
	sp.repeat_penalty = 1.1f;
	run.s = sampler_new(&sp, m->hp.n_vocab, &e);
	ck_assert_msg(run.s != NULL, "%s", e.msg);
	for (i = 0; i < (int)(sizeof(toks) / sizeof(toks[0])); i++)
		toks[i] = (int32_t)((i * 37 + 11) % m->hp.n_vocab);
	for (i = 0; i < CHUNK + 1; i++)
		mixed[i] = (int32_t)((i * 53 + 5) % m->hp.n_vocab);
	kv = be_kv(run.be);
	sa = kv_seq_new(kv);
	sb = kv_seq_new(kv);
	ck_assert_int_ge(sa, 0);
	ck_assert_int_ge(sb, 0);

	/* the backend's first step is not counted */
	{
		struct batch_seq bs = { sa, 0, CHUNK, true };

		(void)step(&run, toks, CHUNK, &bs, 1);
	}
	ck_assert_msg(run.rc == 0, "%s: %d %s", run.what, run.rc, run.msg);
	count_start();
	/* the rest of the prompt in chunks, then sampling and decoding */
	logits = NULL;
	for (pos = CHUNK; pos < 3 * CHUNK; pos += CHUNK) {
		struct batch_seq bs = { sa, pos, CHUNK, true };

		logits = step(&run, toks + pos, CHUNK, &bs, 1);
	}
	for (i = 0; i < N_DECODE && run.rc == 0; i++, pos++) {
		struct batch_seq bs = { sa, pos, 1, true };

		if ((id = sample(&run, logits)) >= 0)
			toks[pos] = id;
		logits = step(&run, toks + pos, 1, &bs, 1);
	}
	/* a decode row of sa next to sb's first prompt chunk */
	if (run.rc == 0) {
		struct batch_seq bs[2] = { { sa, pos, 1, true },
		    { sb, 0, CHUNK, true } };

		if ((id = sample(&run, logits)) >= 0)
			mixed[0] = id;
		logits = step(&run, mixed, CHUNK + 1, bs, 2);
		(void)sample(&run, logits);
	}
	count_stop(&a, &f);
	ck_assert_msg(run.rc == 0, "%s: %d %s", run.what, run.rc, run.msg);
	ck_assert_msg(a == 0 && f == 0, "%s: %ld allocations and %ld frees "
	    "in steps and sampling", models[_i], a, f);

	sampler_free(run.s);
	be_close(run.be);
	model_free(m);
	free(path);
}
END_TEST
SUITE_LOOP("per-token path", test_steps_allocate_nothing, 0, N_MODELS);

SUITE_CASE("per-token path", 60);

int
main(void)
{
#ifdef ALLOC_SANITIZED
	puts("check_alloc: the allocator cannot be interposed under "
	    "a sanitizer, skipped");
	return 77;
#endif
	{
		/* Without any model the one real test cannot run. */
		size_t i, have = 0;

		for (i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
			char *p = fx_path(models[i]);

			have += p != NULL;
			free(p);
		}
		if (have == 0) {
			printf("check_alloc: no model fixture in %s, "
			    "skipped\n", fx_dir());
			return 77;
		}
	}
	return suite_main(suite_registered("alloc"));
}
