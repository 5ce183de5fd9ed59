/*
 * bench_bandwidth.c - `cpbench bandwidth [-m FILE | -b BYTES] [-r REPS]
 * [-t THREADS]`: the read bandwidth a plain streaming read reaches, the
 * roofline of a decode step (which reads every weight once).
 *
 * The read sums the buffer as floats on the thread pool the forward pass
 * uses (threadpool.h), one part per thread, each part's four quarters
 * read side by side (four monotonic streams, as the matrix-vector kernels
 * read weights).  With -m the bytes are those of the model's tensors: read
 * once where the model's weights are read from, the file's private
 * read-only mapping (page-cache pages), and once from a heap copy (where
 * repacked weights live).  With -b, BYTES of heap.  Prints the best and
 * the median of REPS timed reads (default 10, after one untimed read) in
 * GB/s (1e9 bytes per second).
 */
#include "cpbench.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"
#include "gguf.h"
#include "threadpool.h"

struct bw_sum {
	const float *buf;
	size_t per;		/* floats per part, a multiple of 64 */
	double out[TP_MAX_THREADS];
};

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx2")))
static void
bw_sum_task(void *arg, int task, int thread)
{
	struct bw_sum *s = arg;
	size_t q = s->per / 4;
	const float *p = s->buf + (size_t)task * s->per;
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	float l[8];

	(void)thread;
	for (size_t i = 0; i < q; i += 8) {
		a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
		a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + q + i));
		a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + 2 * q + i));
		a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + 3 * q + i));
	}
	_mm256_storeu_ps(l, _mm256_add_ps(_mm256_add_ps(a0, a1),
	    _mm256_add_ps(a2, a3)));
	s->out[task] = (double)(l[0] + l[1] + l[2] + l[3] + l[4] + l[5] +
	    l[6] + l[7]);
}
#else
static void
bw_sum_task(void *arg, int task, int thread)
{
	struct bw_sum *s = arg;
	const float *p = s->buf + (size_t)task * s->per;
	float l[8] = { 0 };

	(void)thread;
	for (size_t i = 0; i < s->per; i += 8)
		for (int j = 0; j < 8; j++)
			l[j] += p[i + j];
	s->out[task] = (double)(l[0] + l[1] + l[2] + l[3] + l[4] + l[5] +
	    l[6] + l[7]);
}
#endif

static int
bw_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

size_t
bench_read(struct threadpool *tp, const void *buf, size_t bytes, int reps,
    double *secs)
{
	struct bw_sum s;
	int parts = tp_threads(tp);

	s.buf = buf;
	s.per = bytes / sizeof(float) / (size_t)parts / 64 * 64;
	for (int r = 0; r <= reps; r++) {
		double t0 = bench_now();

		tp_run(tp, bw_sum_task, &s, parts);
		if (r > 0)		/* run 0 warms up */
			secs[r - 1] = bench_now() - t0;
	}
	qsort(secs, (size_t)reps, sizeof(*secs), bw_cmp);
	return s.per * (size_t)parts * sizeof(float);
}

/* Prints one table row for reps reads of bytes at buf. */
static int
bw_row(struct threadpool *tp, const char *what, const void *buf,
    size_t bytes, int reps)
{
	double *secs = malloc((size_t)reps * sizeof(*secs));
	size_t n;

	if (secs == NULL)
		return -ENOMEM;
	n = bench_read(tp, buf, bytes, reps, secs);
	printf("| %s | %.1f | %d | %.2f | %.2f |\n", what, (double)n / 1048576,
	    tp_threads(tp), (double)n / secs[0] / 1e9, (double)n /
	    secs[reps / 2] / 1e9);
	free(secs);
	return 0;
}

int
bench_bandwidth(int argc, char **argv)
{
	int reps = 10, threads = 0, rc = 1, c;
	long long bytes = 0;
	const char *file = NULL;
	struct gguf_file *gf = NULL;
	struct threadpool *tp = NULL;
	struct cp_err e;
	const char *src = NULL;
	float *heap = NULL;
	char *end;

	optind = 1;
	while ((c = getopt(argc, argv, "m:b:r:t:")) != -1) {
		switch (c) {
		case 'm':
			file = optarg;
			break;
		case 'b':
			errno = 0;
			bytes = strtoll(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || errno != 0 ||
			    bytes < 4096 || bytes > (1LL << 40)) {
				fprintf(stderr, "cpbench bandwidth: -b '%s': "
				    "expected bytes in 4096..2^40\n", optarg);
				return 2;
			}
			break;
		case 'r':
			if (bench_int_arg("bandwidth", "-r", optarg, 1, 1 << 16,
			    &reps) < 0)
				return 2;
			break;
		case 't':
			if (bench_int_arg("bandwidth", "-t", optarg, 1,
			    TP_MAX_THREADS, &threads) < 0)
				return 2;
			break;
		default:
			goto usage;
		}
	}
	if (optind != argc || (file == NULL) == (bytes == 0))
		goto usage;
	if (file != NULL) {
		uint64_t lo = UINT64_MAX, hi = 0;

		if (gguf_open(file, &gf, &e) < 0) {
			fprintf(stderr, "cpbench bandwidth: %s\n", e.msg);
			return 1;
		}
		/* the tensors' bytes, from the first to the end of the last */
		for (size_t i = 0; i < gguf_n_tensors(gf); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(gf, i);

			if (t->offset < lo) {
				lo = t->offset;
				src = t->data;
			}
			if (t->offset + t->nbytes > hi)
				hi = t->offset + t->nbytes;
		}
		if (src == NULL || hi - lo < 4096) {
			fprintf(stderr, "cpbench bandwidth: %s: less than "
			    "4096 bytes of tensors\n", file);
			goto out;
		}
		bytes = (long long)(hi - lo);
	}
	if (threads == 0)
		threads = tp_physical_cores();
	if (tp_new(threads, &tp) < 0) {
		fprintf(stderr, "cpbench bandwidth: cannot start %d threads\n",
		    threads);
		goto out;
	}
	if ((heap = malloc((size_t)bytes)) == NULL) {
		fprintf(stderr, "cpbench bandwidth: out of memory for %lld "
		    "bytes\n", bytes);
		goto out;
	}
	if (src != NULL)
		memcpy(heap, src, (size_t)bytes);
	else
		for (size_t i = 0; i < (size_t)bytes / sizeof(float); i++)
			heap[i] = (float)(i & 255);
	printf("| read | MiB | threads | best GB/s | median GB/s |\n");
	printf("| --- | ---: | ---: | ---: | ---: |\n");
	if ((src != NULL && bw_row(tp, "mapped file", src, (size_t)bytes,
	    reps) < 0) || bw_row(tp, "heap", heap, (size_t)bytes, reps) < 0) {
		fprintf(stderr, "cpbench bandwidth: out of memory\n");
		goto out;
	}
	rc = 0;
out:
	free(heap);
	tp_free(tp);
	gguf_close(gf);
	return rc;
usage:
	fputs(bench_bandwidth_usage, stderr);
	return 2;
}
