/*
 * packed.c - repacked copies of a model's matrices for the CPU kernels,
 * one per model, reference counted (packed.h).
 *
 * The registry is a list of live copies under one mutex: CPU backends are
 * opened and closed rarely (a daemon's lanes, a test's backends), and
 * repacking happens under the mutex so two backends opened together on
 * one model wait for one copy instead of making two.
 */
#include "packed.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "repack.h"
#include "threadpool.h"

#define PACKED_ALIGN 64

struct packed {
	const struct model *m;
	int refs;
	struct model_layer *layers;	/* [n_layer] copies */
	struct model_tensor output;
	void *mem;			/* anonymous mapping of the copies */
	size_t mem_bytes;
	size_t bytes;			/* repacked bytes in mem */
	double seconds;
	struct packed *next;
};

static pthread_mutex_t packed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct packed *packed_list;

static bool
packed_off(void)
{
	const char *v = getenv("CP_NO_REPACK");

	return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

/* t gets a repacked copy on this CPU. */
static bool
packable(const struct model_tensor *t)
{
	int blk = repack_block(t->type);

	return t->data != NULL && repack_kernel(t->type) != NULL && blk > 0 &&
	    t->rows % REPACK_ROWS == 0 && t->cols > 0 && t->cols % blk == 0;
}

/* The matrices of a layer a step multiplies by. */
static const size_t mat_off[] = {
	offsetof(struct model_layer, wq), offsetof(struct model_layer, wk),
	offsetof(struct model_layer, wv), offsetof(struct model_layer, wo),
	offsetof(struct model_layer, w_gate),
	offsetof(struct model_layer, w_up),
	offsetof(struct model_layer, w_down),
};
#define N_MATS ((int)(sizeof(mat_off) / sizeof(mat_off[0])))

static const struct model_tensor *
mat(const struct model_layer *l, int i)
{
	return (const struct model_tensor *)(const void *)((const char *)l +
	    mat_off[i]);
}

static struct model_tensor *
mat_rw(struct model_layer *l, int i)
{
	return (struct model_tensor *)(void *)((char *)l + mat_off[i]);
}

static size_t
slot_bytes(const struct model_tensor *t)
{
	return ((size_t)t->rows * t->row_bytes + PACKED_ALIGN - 1) /
	    PACKED_ALIGN * PACKED_ALIGN;
}

/* Drop this process's pages of the mapped file under t's whole pages. */
static void
release(const struct model *m, const struct model_tensor *t)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)t->data, z = a + (size_t)t->rows *
	    t->row_bytes;

	if (!gguf_mapped(m->gf))
		return;
	a = (a + pg - 1) / pg * pg;
	z = z / pg * pg;
	if (a < z)
		(void)madvise((void *)a, z - a, MADV_DONTNEED);
}

/* One matrix to copy: from the file's rows to its slot. */
struct pack_job {
	const void *src;
	void *dst;			/* its slot */
	const struct model_tensor *t;
};

/* The copies, each cut into parts of whole groups for the pool. */
struct pack_run {
	const struct pack_job *jobs;
	int parts;
};

static void
pack_task(void *arg, int task, int thread)
{
	const struct pack_run *pr = arg;
	const struct pack_job *j = &pr->jobs[task / pr->parts];
	const struct model_tensor *t = j->t;
	int per = (t->rows / REPACK_ROWS + pr->parts - 1) / pr->parts *
	    REPACK_ROWS, r0 = task % pr->parts * per, r1 = r0 + per;
	size_t off;

	(void)thread;
	if (r1 > t->rows)
		r1 = t->rows;
	if (r0 >= r1)
		return;
	/* groups are the size of their rows: rows r0.. start at r0 rows */
	off = (size_t)r0 * t->row_bytes;
	(void)repack_rows(t->type, (const char *)j->src + off, t->row_bytes,
	    r1 - r0, t->cols, (char *)j->dst + off);
}

/*
 * Give t the next slot at *at of p->mem and note the copy to make in
 * jobs[(*n)++]; the file's rows are released after every copy is made
 * (tensors may share pages).
 */
static void
pack_one(struct packed *p, struct model_tensor *t, size_t *at,
    struct pack_job *jobs, int *n)
{
	jobs[*n].src = t->data;
	jobs[*n].dst = (char *)p->mem + *at;
	jobs[*n].t = t;
	t->data = jobs[(*n)++].dst;
	t->packed = true;
	*at += slot_bytes(t);
	p->bytes += (size_t)t->rows * t->row_bytes;
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * A new copy of m's packable matrices, made on tp (NULL: this thread);
 * *out NULL when there are none.
 */
static int
packed_new(const struct model *m, struct threadpool *tp,
    struct packed **out, struct cp_err *e)
{
	int nl = m->hp.n_layer, n_jobs = 0;
	double t0 = now();
	struct packed *p = NULL;
	struct pack_job *jobs = NULL;
	struct pack_run pr;
	size_t need = 0, at = 0;

	*out = NULL;
	for (int il = 0; il < nl; il++)
		for (int i = 0; i < N_MATS; i++)
			if (packable(mat(&m->layers[il], i)))
				need += slot_bytes(mat(&m->layers[il], i));
	if (packable(&m->output))
		need += slot_bytes(&m->output);
	if (need == 0)
		return 0;
	if ((p = calloc(1, sizeof(*p))) == NULL ||
	    (p->layers = malloc((size_t)nl * sizeof(*p->layers))) == NULL ||
	    (jobs = malloc(((size_t)nl * N_MATS + 1) * sizeof(*jobs))) == NULL)
		goto nomem;
	p->mem = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE |
	    MAP_ANONYMOUS, -1, 0);
	if (p->mem == MAP_FAILED)
		goto nomem;
	p->mem_bytes = need;
	(void)madvise(p->mem, need, MADV_HUGEPAGE);
	memcpy(p->layers, m->layers, (size_t)nl * sizeof(*p->layers));
	p->output = m->output;
	for (int il = 0; il < nl; il++)
		for (int i = 0; i < N_MATS; i++)
			if (packable(mat(&p->layers[il], i)))
				pack_one(p, mat_rw(&p->layers[il], i), &at,
				    jobs, &n_jobs);
	if (packable(&p->output))
		pack_one(p, &p->output, &at, jobs, &n_jobs);
	pr.jobs = jobs;
	pr.parts = tp != NULL ? 2 * tp_active(tp) : 1;
	if (tp != NULL)
		tp_run(tp, pack_task, &pr, n_jobs * pr.parts);
	else
		for (int i = 0; i < n_jobs; i++)
			pack_task(&pr, i, 0);
	free(jobs);
	jobs = NULL;
	/* every copy made: now the file's pages can go */
	for (int il = 0; il < nl; il++)
		for (int i = 0; i < N_MATS; i++)
			if (mat(&p->layers[il], i)->packed)
				release(m, mat(&m->layers[il], i));
	if (p->output.packed)
		release(m, &m->output);
	(void)mprotect(p->mem, need, PROT_READ);
	p->m = m;
	p->seconds = now() - t0;
	*out = p;
	return 0;
nomem:
	free(jobs);
	if (p != NULL) {
		if (p->mem != NULL && p->mem != MAP_FAILED)
			munmap(p->mem, need);
		free(p->layers);
		free(p);
	}
	return cp_err_set(e, -ENOMEM, "cpu backend: out of memory for %zu "
	    "bytes of repacked weights", need);
}

int
packed_get(const struct model *m, struct threadpool *tp, struct packed **out,
    struct cp_err *e)
{
	struct packed *p;
	int rc = 0;

	*out = NULL;
	if (packed_off())
		return 0;
	pthread_mutex_lock(&packed_lock);
	for (p = packed_list; p != NULL && p->m != m; p = p->next)
		;
	if (p == NULL && (rc = packed_new(m, tp, &p, e)) == 0 && p != NULL) {
		p->next = packed_list;
		packed_list = p;
	}
	if (p != NULL) {
		p->refs++;
		*out = p;
	}
	pthread_mutex_unlock(&packed_lock);
	return rc;
}

void
packed_put(struct packed *p)
{
	struct packed **pp;

	if (p == NULL)
		return;
	pthread_mutex_lock(&packed_lock);
	if (--p->refs > 0) {
		pthread_mutex_unlock(&packed_lock);
		return;
	}
	for (pp = &packed_list; *pp != p; pp = &(*pp)->next)
		;
	*pp = p->next;
	pthread_mutex_unlock(&packed_lock);
	munmap(p->mem, p->mem_bytes);
	free(p->layers);
	free(p);
}

const struct model_layer *
packed_layers(const struct packed *p)
{
	return p->layers;
}

const struct model_tensor *
packed_output(const struct packed *p)
{
	return &p->output;
}

size_t
packed_bytes(const struct packed *p)
{
	return p->bytes;
}

double
packed_seconds(const struct packed *p)
{
	return p->seconds;
}
