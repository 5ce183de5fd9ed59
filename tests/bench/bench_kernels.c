/*
 * bench_kernels.c - `cpbench kernels [-w TYPES] [-k K] [-n N] [-m ROWS]
 * [-r REPS] [-t THREADS] [-f FILE]`: throughput of the matrix-product
 * kernels alone, and the read bandwidth.
 *
 * For each weight type in TYPES (comma-separated ggml names, default
 * f16,q8_0,q4_K,q6_K) and each activation row count in ROWS (default
 * 1,512), a weight of N rows of K random elements is multiplied by ROWS
 * random activation rows: mm_prepare() once, then mm_rows_wide() split
 * into output-row chunks over a persistent thread pool, each thread with
 * a widening scratch of its own, as the forward pass splits it.  Prints
 * the best of REPS runs (default 5) as time per product, weight bytes
 * read per second (the number to hold against the
 * memory bandwidth when ROWS is 1) and multiply-adds per second.  The
 * last line is the read bandwidth of a plain sum over a buffer of the
 * size of the largest weight, or with -f over the whole of FILE as mapped
 * (e.g. a model: its weights' pages), the roofline a one-row product
 * cannot beat.
 */
#include "cpbench.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "matmul.h"
#include "quant.h"
#include "repack.h"
#include "threadpool.h"
#include "ttype.h"

#define BK_MAX_LIST 16
#define BK_CHUNKS 4		/* output-row chunks per thread */

struct bk_job {
	struct mm_args a;
	const void *scratch;
	char *wide;		/* wide_bytes for each thread */
	size_t wide_bytes;
	int chunk;
};

static void
bk_task(void *arg, int task, int thread)
{
	struct bk_job *j = arg;
	int o0 = task * j->chunk, o1 = o0 + j->chunk;

	if (o1 > j->a.n_out)
		o1 = j->a.n_out;
	mm_rows_wide(&j->a, j->scratch, j->wide + (size_t)thread *
	    j->wide_bytes, o0, o1);
}

static int
bk_list(const char *s, int *out, bool types)
{
	char buf[256], *tok, *save = NULL;
	int n = 0;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		char *end;
		long v;

		if (n == BK_MAX_LIST)
			return -EINVAL;
		if (types) {
			if ((v = ttype_from_name(tok)) < 0 ||
			    !mm_supported((uint32_t)v)) {
				fprintf(stderr, "cpbench kernels: no kernel "
				    "for type '%s'\n", tok);
				return -EINVAL;
			}
		} else {
			errno = 0;
			v = strtol(tok, &end, 10);
			if (*end != '\0' || errno != 0 || v < 1 ||
			    v > 1 << 16) {
				fprintf(stderr, "cpbench kernels: '%s': "
				    "expected an integer in 1..%d\n", tok,
				    1 << 16);
				return -EINVAL;
			}
		}
		out[n++] = (int)v;
	}
	return n > 0 ? n : -EINVAL;
}

static float
bk_rand(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return (float)(*s >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/*
 * Best seconds of reps products of type wt, n x k weights, m rows; with
 * packed, the weights repacked (repack.h).
 */
static int
bk_one(struct threadpool *tp, uint32_t wt, bool packed, int k, int n, int m,
    int reps, double *best, size_t *wbytes)
{
	struct bk_job j;
	uint64_t rowb, seed = 0x2545f4914f6cdd1dull;
	float *tmp = NULL, *x = NULL, *y = NULL;
	char *w = NULL, *wide = NULL;
	void *scr = NULL;
	int rc = -ENOMEM, tasks;

	if (ttype_nbytes(wt, (uint64_t)k, &rowb) != 0)
		return -EINVAL;
	*wbytes = (size_t)rowb * (size_t)n;
	w = malloc(*wbytes);
	tmp = malloc((size_t)k * sizeof(float));
	x = malloc((size_t)m * (size_t)k * sizeof(float));
	y = malloc((size_t)m * (size_t)n * sizeof(float));
	scr = malloc(mm_scratch_bytes(wt, k, m) + 1);
	j.wide_bytes = mm_wide_bytes(wt, k, packed);
	wide = malloc((size_t)tp_threads(tp) * j.wide_bytes + 1);
	if (w == NULL || tmp == NULL || x == NULL || y == NULL || scr == NULL ||
	    wide == NULL)
		goto out;
	for (int o = 0; o < n; o++) {
		for (int i = 0; i < k; i++)
			tmp[i] = bk_rand(&seed);
		if ((rc = quant_row(wt, tmp, w + (size_t)o * rowb,
		    (size_t)k)) < 0)
			goto out;
	}
	for (size_t i = 0; i < (size_t)m * (size_t)k; i++)
		x[i] = bk_rand(&seed);
	if (packed) {
		char *pw = malloc(*wbytes);

		if (pw == NULL || repack_rows(wt, w, (size_t)rowb, n, k,
		    pw) < 0) {
			free(pw);
			rc = -EINVAL;
			goto out;
		}
		free(w);
		w = pw;
	}
	j.a = (struct mm_args){ wt, w, (size_t)rowb, n, k, x, (size_t)k, m,
	    y, (size_t)n, packed };
	j.scratch = scr;
	j.wide = wide;
	tasks = tp_threads(tp) * BK_CHUNKS;
	j.chunk = (n + tasks - 1) / tasks;
	j.chunk = (j.chunk + mm_rows_align(&j.a) - 1) / mm_rows_align(&j.a) *
	    mm_rows_align(&j.a);
	tasks = (n + j.chunk - 1) / j.chunk;
	*best = 1e30;
	for (int r = 0; r <= reps; r++) {
		double t0 = bench_now(), t;

		mm_prepare(&j.a, scr);
		tp_run(tp, bk_task, &j, tasks);
		t = bench_now() - t0;
		if (r > 0 && t < *best)		/* run 0 warms up */
			*best = t;
	}
	rc = 0;
out:
	free(wide);
	free(scr);
	free(y);
	free(x);
	free(tmp);
	free(w);
	return rc;
}

/*
 * Best read bandwidth (bytes / s) of a plain streaming read
 * (bench_read()) with tp: a heap buffer, or when path is set the file's
 * private read-only mapping (page cache pages, as a model's weights are
 * read).
 */
static double
bk_bandwidth(struct threadpool *tp, size_t bytes, int reps, const char *path,
    size_t *used)
{
	float *buf = NULL;
	void *map = MAP_FAILED;
	const void *src;
	struct stat st;
	double *secs, bw;
	size_t n;
	int fd = -1;

	if ((secs = malloc((size_t)reps * sizeof(*secs))) == NULL)
		return 0;
	if (path != NULL) {
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
		    fstat(fd, &st) != 0 || st.st_size < 4096) {
			if (fd >= 0)
				close(fd);
			free(secs);
			return 0;
		}
		bytes = (size_t)st.st_size / 4096 * 4096;
		map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
		close(fd);
		if (map == MAP_FAILED) {
			free(secs);
			return 0;
		}
		src = map;
	} else {
		bytes = bytes / 256 * 256 + 256;
		if ((buf = malloc(bytes)) == NULL) {
			free(secs);
			return 0;
		}
		for (size_t i = 0; i < bytes / sizeof(float); i++)
			buf[i] = (float)(i & 255);
		src = buf;
	}
	*used = bytes;
	n = bench_read(tp, src, bytes, reps, secs);
	if (map != MAP_FAILED)
		munmap(map, bytes);
	free(buf);
	bw = (double)n / secs[0];
	free(secs);
	return bw;
}

int
bench_kernels(int argc, char **argv)
{
	int types[BK_MAX_LIST], ms[BK_MAX_LIST], nt, nm, c;
	int k = 768, n = 32000, reps = 5, threads = 0, rc = 1;
	struct threadpool *tp = NULL;
	const char *file = NULL;
	size_t maxw = 0, used = 0;
	double bw;

	nt = bk_list("f16,q8_0,q4_K,q6_K", types, true);
	nm = bk_list("1,512", ms, false);
	optind = 1;
	while ((c = getopt(argc, argv, "w:k:n:m:r:t:f:")) != -1) {
		switch (c) {
		case 'f':
			file = optarg;
			break;
		case 'w':
			if ((nt = bk_list(optarg, types, true)) < 0)
				return 2;
			break;
		case 'm':
			if ((nm = bk_list(optarg, ms, false)) < 0)
				return 2;
			break;
		case 'k':
			if (bench_int_arg("kernels", "-k", optarg, 1, 1 << 16,
			    &k) < 0)
				return 2;
			break;
		case 'n':
			if (bench_int_arg("kernels", "-n", optarg, 1, 1 << 20,
			    &n) < 0)
				return 2;
			break;
		case 'r':
			if (bench_int_arg("kernels", "-r", optarg, 1, 1 << 16,
			    &reps) < 0)
				return 2;
			break;
		case 't':
			if (bench_int_arg("kernels", "-t", optarg, 1, 1 << 16,
			    &threads) < 0)
				return 2;
			break;
		default:
			goto usage;
		}
	}
	if (optind != argc)
		goto usage;
	if (threads == 0)
		threads = tp_physical_cores();
	if (threads > TP_MAX_THREADS || tp_new(threads, &tp) < 0) {
		fprintf(stderr, "cpbench kernels: cannot start %d threads\n",
		    threads);
		return 1;
	}
	printf("| type | k | n | m | threads | ms | weight GB/s | "
	    "GMAC/s |\n");
	printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (int ti = 0; ti < 2 * nt; ti++) {
		uint32_t wt = (uint32_t)types[ti / 2];
		bool packed = ti % 2 == 1;

		if (packed && (repack_kernel(wt) == NULL ||
		    n % REPACK_ROWS != 0))
			continue;
		for (int mi = 0; mi < nm; mi++) {
			double best;
			size_t wb;

			if (bk_one(tp, wt, packed, k, n, ms[mi], reps, &best,
			    &wb) < 0) {
				fprintf(stderr, "cpbench kernels: %s: k %d "
				    "does not fit the type, or out of "
				    "memory\n", ttype_name(wt), k);
				goto out;
			}
			if (wb > maxw)
				maxw = wb;
			printf("| %s%s | %d | %d | %d | %d | %.3f | %.2f | "
			    "%.2f |\n", ttype_name(wt), packed ? "/packed" :
			    "", k, n,
			    ms[mi], threads, best * 1e3, (double)wb / best /
			    1e9, (double)k * n * ms[mi] / best / 1e9);
		}
	}
	bw = bk_bandwidth(tp, maxw, reps, file, &used);
	if (bw <= 0) {
		fprintf(stderr, "cpbench kernels: cannot read %s\n",
		    file != NULL ? file : "a buffer");
		goto out;
	}
	printf("\nread bandwidth (%s, %zu MiB, %d threads): %.2f GB/s\n",
	    file != NULL ? file : "heap buffer", used >> 20, threads,
	    bw / 1e9);
	rc = 0;
out:
	tp_free(tp);
	return rc;
usage:
	fputs(bench_kernels_usage, stderr);
	return 2;
}
