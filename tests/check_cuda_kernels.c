/*
 * check_cuda_kernels.c - every launcher of kernels/cuda/cuda_ops.h against
 * a CPU counterpart, on random data of awkward sizes.
 *
 * Counterparts: the engine's conversions (quant.h) where the kernel
 * converts, the CPU forward pass's formulas (static in forward.c, so
 * written out here) where the kernel follows them operation for operation,
 * and double-precision references for the sums.
 *
 * What "close" means, per kernel (err = |gpu - ref|, normalized as said):
 *
 *	embed, convert, add, RoPE + K/V store	bit-identical to the CPU
 *	RMSNorm		<= 2.5e-7 relative (2 ulp) to the CPU formula (its
 *			double sum of squares runs in another order), <= 2e-6
 *			relative to double
 *	SwiGLU		<= 2e-6 relative to double (CUDA's expf is within
 *			2 ulp)
 *	attention	<= 1e-4 of the weighted mean of |V| (sum w |v| /
 *			sum w), against double over the values the cache
 *			holds: the kernel works in F32, so this is its
 *			rounding alone
 *	matrix product	<= 1e-4 of sum |w x| against double over the inputs
 *			as converted (F32 accumulation alone); against the
 *			unconverted F32 inputs <= 1e-3 for F16 (two roundings
 *			of 2^-11 per product), 8e-3 for BF16 (2^-8 each),
 *			1e-4 for F32
 *
 * A NaN in an output fails unless the reference has one there; variants
 * with NaN (or infinities) in the inputs check that NaN propagates where
 * the CPU's does.  Outputs are poisoned (bytes 0xff: NaN in F32, F16 and
 * BF16) before each run and followed by a poisoned guard that must come
 * back untouched.  So is the paged KV pool: slots the cache does not hold
 * stay NaN, attention reading past a row's position yields NaN, and the
 * RoPE store must leave every byte it does not own as it was.
 *
 * The argument checks need no device and always run; the rest needs a
 * CUDA device, probed in a child (CUDA does not survive fork(), and every
 * test runs in a fork).  Without one the program says why and exits 77.
 */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_ops.h"
#include "cuda_probe.h"
#include "lib/child.h"
#include "lib/suite.h"
#include "quant.h"


#define GUARD_BYTES 4096	/* poisoned bytes after every output */
#define MAX_ALLOCS 64
#define TINY 1e-37		/* differences below this are rounding of 0 */
#define GEMM_WS (32u << 20)
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- random data ------------------------------------------------------ */

struct rng {
	uint64_t s;
};

static uint64_t
rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* N(0, 1) by Box-Muller from two uniforms in (0, 1). */
static double
rng_normal(struct rng *r)
{
	double u = ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
	double v = ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* x[0..n) ~ N(0, sd^2), rounded to float. */
static float *
rng_fill(struct rng *r, float *x, size_t n, double sd)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (float)(rng_normal(r) * sd);
	return x;
}

static int
rng_int(struct rng *r, int n)
{
	return (int)(rng_next(r) % (uint64_t)n);
}

/* ---- elements of device types, on the host ---------------------------- */

static size_t
dt_size(enum cu_dtype dt)
{
	return dt == CU_F32 ? 4 : 2;
}

static const char *
dt_name(enum cu_dtype dt)
{
	return dt == CU_F32 ? "F32" : dt == CU_F16 ? "F16" : "BF16";
}

/* Element i of an array of dt, as the CPU reads it. */
static float
el_get(enum cu_dtype dt, const void *base, size_t i)
{
	const unsigned char *p = (const unsigned char *)base + i * dt_size(dt);
	uint16_t h;
	float f;

	if (dt == CU_F32) {
		memcpy(&f, p, sizeof(f));
		return f;
	}
	memcpy(&h, p, sizeof(h));
	return dt == CU_F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

/* Store f as element i of an array of dt, converted as the CPU does. */
static void
el_set(enum cu_dtype dt, void *base, size_t i, float f)
{
	unsigned char *p = (unsigned char *)base + i * dt_size(dt);
	uint16_t h;

	if (dt == CU_F32) {
		memcpy(p, &f, sizeof(f));
		return;
	}
	h = dt == CU_F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
	memcpy(p, &h, sizeof(h));
}

/* f rounded to dt and back, as the CPU rounds it. */
static float
el_round(enum cu_dtype dt, float f)
{
	unsigned char b[4];

	el_set(dt, b, 0, f);
	return el_get(dt, b, 0);
}

/* v as a float result would hold it: beyond FLT_MAX it is infinite. */
static double
f32_range(double v)
{
	return fabs(v) > FLT_MAX ? copysign(INFINITY, v) : v;
}

static bool
el_bits_eq(enum cu_dtype dt, const void *a, const void *b, size_t i)
{
	size_t es = dt_size(dt);

	return memcmp((const unsigned char *)a + i * es,
	    (const unsigned char *)b + i * es, es) == 0;
}

/* ---- device memory, freed by the fixture ------------------------------ */

static struct cu_stream *g_st;
static void *g_dev[MAX_ALLOCS];
static void *g_host[MAX_ALLOCS];
static int g_ndev, g_nhost;

static void
setup(void)
{
	ck_assert_int_eq(cu_set_device(0), 0);
	ck_assert_int_eq(cu_stream_new(&g_st), 0);
}

static void
teardown(void)
{
	int i;

	cu_stream_free(g_st);
	g_st = NULL;
	for (i = 0; i < g_ndev; i++)
		cu_free(g_dev[i]);
	for (i = 0; i < g_nhost; i++)
		free(g_host[i]);
	g_ndev = g_nhost = 0;
}

/* n device bytes plus a guard, every byte 0xff; freed by teardown. */
static void *
dmalloc(size_t n)
{
	void *p = NULL;

	ck_assert_int_lt(g_ndev, MAX_ALLOCS);
	ck_assert_int_eq(cu_malloc(n + GUARD_BYTES, &p), 0);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq((uintptr_t)p % 256, 0);
	g_dev[g_ndev++] = p;
	ck_assert_int_eq(cu_memset_sync(p, 0xff, n + GUARD_BYTES), 0);
	return p;
}

/* n zeroed host bytes; freed by teardown. */
static void *
hmalloc(size_t n)
{
	void *p;

	ck_assert_int_lt(g_nhost, MAX_ALLOCS);
	p = calloc(1, n ? n : 1);
	ck_assert_ptr_nonnull(p);
	g_host[g_nhost++] = p;
	return p;
}

static void
htod(void *d, const void *h, size_t n)
{
	ck_assert_int_eq(cu_memcpy_htod_sync(d, h, n), 0);
}

static void
dtoh(void *h, const void *d, size_t n)
{
	ck_assert_int_eq(cu_memcpy_dtoh_sync(h, d, n), 0);
}

/* A device copy of n host bytes (plus a poisoned guard). */
static void *
dcopy(const void *h, size_t n)
{
	void *d = dmalloc(n);

	htod(d, h, n);
	return d;
}

static void
sync_ok(void)
{
	ck_assert_int_eq(cu_stream_sync(g_st), 0);
}

/* The guard of n bytes at d + off came back as it was poisoned. */
static void
expect_guard(const char *what, const void *d, size_t off)
{
	unsigned char *h = hmalloc(GUARD_BYTES);
	size_t i;

	dtoh(h, (const unsigned char *)d + off, GUARD_BYTES);
	for (i = 0; i < GUARD_BYTES; i++)
		if (h[i] != 0xff)
			ck_abort_msg("%s: byte %zu past the output was "
			    "written (0x%02x)", what, i, h[i]);
}

/* ---- comparisons ------------------------------------------------------ */

/*
 * got[i] against ref[i] within tol * mag[i] (mag NULL: |ref[i]|), plus
 * TINY.  A NaN in got passes only where ref is NaN, and a NaN in ref must
 * be a NaN in got; infinities must match exactly.  Prints the largest
 * normalized error.
 */
static void
expect_close(const char *what, const float *got, const double *ref,
    const double *mag, size_t n, double tol)
{
	double worst = 0, e, d, m;
	size_t i, at = 0, nans = 0;

	for (i = 0; i < n; i++) {
		bool gn = isnan(got[i]), rn = isnan(ref[i]);

		if (gn != rn || (!gn && (isinf(got[i]) || isinf(ref[i])) &&
		    (double)got[i] != ref[i]))
			ck_abort_msg("%s: element %zu: gpu %g, reference %g",
			    what, i, (double)got[i], ref[i]);
		nans += gn;
		if (gn || isinf(ref[i]))
			continue;
		d = fabs((double)got[i] - ref[i]);
		m = mag != NULL ? mag[i] : fabs(ref[i]);
		e = d <= TINY ? 0 : m > 0 ? d / m : INFINITY;
		if (e > worst) {
			worst = e;
			at = i;
		}
	}
	printf("  %-54s max err %.2e (bound %.2g)%s\n", what, worst, tol,
	    nans ? ", NaN where the reference has NaN" : "");
	ck_assert_msg(worst <= tol, "%s: element %zu: gpu %.9g, reference "
	    "%.9g: error %.3g exceeds %.3g", what, at, (double)got[at],
	    ref[at], worst, tol);
}

/* Bit for bit equal as dt elements, except that NaN matches any NaN. */
static void
expect_same(const char *what, enum cu_dtype dt, const void *got,
    const void *want, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		float g = el_get(dt, got, i), w = el_get(dt, want, i);

		if (isnan(w) && isnan(g))
			continue;
		if (isnan(g) || !el_bits_eq(dt, got, want, i))
			ck_abort_msg("%s: %s element %zu: %.9g, want %.9g",
			    what, dt_name(dt), i, (double)g, (double)w);
	}
	printf("  %-54s bit-identical\n", what);
}

/* ---- runtime: device, memory, streams --------------------------------- */

START_TEST(test_rt_memory)
{
	static const size_t sizes[] = { 1, 3, 255, 257, 1000003 };
	unsigned char *h, *back;
	float *pin;
	size_t free_b = 0, total_b = 0, i, k;
	char name[256] = "";
	int major = 0, minor = 0;
	void *d, *hp, *big = (void *)1;

	ck_assert_int_eq(cu_device_name(0, name, sizeof(name), &major, &minor),
	    0);
	ck_assert_uint_gt(strlen(name), 0);
	ck_assert_int_ge(major, 8);	/* the build targets sm_80 and newer */
	printf("  device 0: %s, sm_%d%d\n", name, major, minor);
	ck_assert_int_eq(cu_mem_info(&free_b, &total_b), 0);
	ck_assert(total_b > 0 && free_b <= total_b);

	/* Odd sizes and offsets, through the synchronous copies. */
	h = hmalloc(1000003 + 64);
	back = hmalloc(1000003 + 64);
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k], off = k * 7 % 61;

		d = dmalloc(n + off);
		for (i = 0; i < n; i++)
			h[64 + i] = (unsigned char)(i * 131 + k);
		htod((char *)d + off, h + 64, n);
		memset(h, 0xff, 64);
		dtoh(back, d, n + off + 1);
		ck_assert_int_eq(memcmp(back, h, off), 0);	/* poison */
		ck_assert_int_eq(memcmp(back + off, h + 64, n), 0);
		ck_assert_int_eq(back[off + n], 0xff);		/* guard */
		ck_assert_int_eq(cu_memset_sync((char *)d + off, 0x5a, n), 0);
		dtoh(back, (char *)d + off, n);
		memset(h, 0x5a, n);
		ck_assert_int_eq(memcmp(back, h, n), 0);
	}

	/* Page-locked memory, the stream's copies in order: in, x2, out. */
	ck_assert_int_eq(cu_host_alloc(2 * 4097 * sizeof(float), &hp), 0);
	pin = hp;
	d = dmalloc(4097 * sizeof(float));
	for (i = 0; i < 4097; i++)
		pin[i] = (float)i - 2048.5f;
	ck_assert_int_eq(cu_memcpy_htod(g_st, d, pin, 4097 * 4), 0);
	ck_assert_int_eq(cu_add(g_st, d, d, 4097), 0);
	ck_assert_int_eq(cu_memcpy_dtoh(g_st, pin + 4097, d, 4097 * 4), 0);
	sync_ok();
	for (i = 0; i < 4097; i++)
		if (pin[4097 + i] != 2.0f * pin[i])
			ck_abort_msg("stream copies: element %zu: %g", i,
			    (double)pin[4097 + i]);
	cu_host_free(pin);

	/* More than the device has: -ENOMEM, and the device still works. */
	ck_assert_int_eq(cu_malloc(total_b * 2 + (1u << 30), &big), -ENOMEM);
	ck_assert_ptr_null(big);
	d = dmalloc(4096);
	ck_assert_int_eq(cu_add(g_st, d, d, 1024), 0);
	sync_ok();
}
END_TEST
SUITE_TEST("runtime", test_rt_memory);

/*
 * A runtime call that fails (an invalid device) is reported by that call,
 * not again by the next kernel launch, which checks cudaGetLastError().
 */
START_TEST(test_rt_failed_call_not_reported_by_next_launch)
{
	float h[64], back[64];
	float *d = dmalloc(sizeof(h));
	char name[16];
	int major, minor, i;

	for (i = 0; i < 64; i++)
		h[i] = (float)i;
	htod(d, h, sizeof(h));
	ck_assert_int_eq(cu_set_device(1 << 20), -EIO);
	ck_assert_int_eq(cu_device_name(1 << 20, name, sizeof(name), &major,
	    &minor), -EIO);
	ck_assert_int_eq(cu_set_device(0), 0);
	ck_assert_int_eq(cu_add(g_st, d, d, 64), 0);
	sync_ok();
	dtoh(back, d, sizeof(back));
	for (i = 0; i < 64; i++)
		if (back[i] != 2.0f * (float)i)
			ck_abort_msg("element %d: %g", i, (double)back[i]);
}
END_TEST
SUITE_TEST("runtime", test_rt_failed_call_not_reported_by_next_launch);

/* ---- embedding -------------------------------------------------------- */

struct embed_case {
	enum cu_dtype dt;
	int n_vocab, n_embd, ld, n;
	bool nan;		/* a NaN in one table row that a token picks */
};

static const struct embed_case embed_cases[] = {
	{ CU_F32, 37, 1, 8, 1, false },
	{ CU_F16, 1000, 257, 264, 67, false },
	{ CU_BF16, 5, 4099, 4104, 3, false },
	{ CU_F32, 300, 255, 256, 130, false },
	{ CU_F16, 11, 64, 64, 9, true },
	{ CU_BF16, 11, 33, 40, 9, true },
	{ CU_F32, 11, 33, 33, 9, true },
};

START_TEST(test_embed)
{
	const struct embed_case *c = &embed_cases[_i];
	struct rng r = { 100u + (uint64_t)_i };
	size_t es = dt_size(c->dt), row = (size_t)c->ld * es;
	size_t xb = (size_t)c->n * (size_t)c->n_embd * sizeof(float);
	unsigned char *tab = hmalloc((size_t)c->n_vocab * row);
	int32_t *tok = hmalloc((size_t)c->n * sizeof(int32_t));
	float *want = hmalloc(xb), *got = hmalloc(xb);
	char what[128];
	void *d_tab;
	int32_t *d_tok;
	float *d_x;
	int t, j, i;

	memset(tab, 0xff, (size_t)c->n_vocab * row);	/* padding is NaN */
	for (t = 0; t < c->n_vocab; t++)
		for (j = 0; j < c->n_embd; j++)
			el_set(c->dt, tab + (size_t)t * row, (size_t)j,
			    (float)rng_normal(&r) * (t % 3 ? 1.0f : 1e-3f));
	if (c->nan)
		el_set(c->dt, tab + 4 * row, (size_t)(c->n_embd / 2), NAN);
	for (i = 0; i < c->n; i++)
		tok[i] = i == 0 ? c->n_vocab - 1 : i == 1 ? 0 :
		    i == 2 && c->nan ? 4 : rng_int(&r, c->n_vocab);
	for (i = 0; i < c->n; i++)
		for (j = 0; j < c->n_embd; j++)
			want[(size_t)i * c->n_embd + j] = el_get(c->dt,
			    tab + (size_t)tok[i] * row, (size_t)j);
	d_tab = dcopy(tab, (size_t)c->n_vocab * row);
	d_tok = dcopy(tok, (size_t)c->n * sizeof(int32_t));
	d_x = dmalloc(xb);
	ck_assert_int_eq(cu_embed(g_st, d_tab, c->dt, c->ld, c->n_embd, d_tok,
	    c->n, d_x), 0);
	sync_ok();
	dtoh(got, d_x, xb);
	snprintf(what, sizeof(what), "embed %s vocab %d embd %d ld %d n %d%s",
	    dt_name(c->dt), c->n_vocab, c->n_embd, c->ld, c->n,
	    c->nan ? " NaN" : "");
	expect_same(what, CU_F32, got, want, (size_t)c->n * c->n_embd);
	if (c->nan)
		ck_assert(isnan(got[2 * (size_t)c->n_embd + c->n_embd / 2]));
	expect_guard(what, d_x, xb);
}
END_TEST
SUITE_LOOP("rows", test_embed, 0, N_OF(embed_cases));

/* ---- RMSNorm and the logits-row gather -------------------------------- */

struct norm_case {
	int n_x, n, d;		/* rows of x, output rows, row width */
	bool gather;		/* rows[] picks (repeated) rows of x */
	float eps;
	bool nan;		/* a NaN in x row 1 */
};

static const struct norm_case norm_cases[] = {
	{ 1, 1, 1, false, 1e-5f, false },
	{ 5, 5, 7, false, 1e-5f, false },
	{ 67, 67, 4097, false, 1e-6f, false },
	{ 3, 3, 8192, false, 1e-5f, false },
	{ 9, 4, 255, true, 1e-5f, false },
	{ 130, 3, 768, true, 1e-6f, false },
	{ 5, 5, 64, false, 1e-5f, true },
	{ 5, 4, 64, true, 1e-5f, true },
};

/* The CPU forward pass's RMSNorm (forward.c, fwd_rmsnorm). */
static void
cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	double ss = 0;
	float mean, scale;
	int i;

	for (i = 0; i < n; i++)
		ss += (double)(x[i] * x[i]);
	mean = (float)(ss / n);
	scale = 1.0f / sqrtf(mean + eps);
	for (i = 0; i < n; i++)
		out[i] = (x[i] * scale) * w[i];
}

START_TEST(test_rmsnorm)
{
	const struct norm_case *c = &norm_cases[_i];
	struct rng r = { 200u + (uint64_t)_i };
	size_t d = (size_t)c->d, xb = (size_t)c->n_x * d * sizeof(float);
	size_t ob = (size_t)c->n * d * sizeof(float);
	float *x = hmalloc(xb), *w = hmalloc(d * sizeof(float));
	float *want = hmalloc(ob), *got = hmalloc(ob), *back;
	double *ref = hmalloc((size_t)c->n * d * sizeof(double));
	double *cpu = hmalloc((size_t)c->n * d * sizeof(double));
	int32_t *rows = hmalloc((size_t)c->n * sizeof(int32_t));
	float *d_x, *d_w, *d_out;
	int32_t *d_rows = NULL;
	char what[128];
	int i;
	size_t j;

	for (i = 0; i < c->n_x; i++)	/* rows of scales 1e-3 to 1e3 */
		rng_fill(&r, x + (size_t)i * d, d, pow(10.0, i % 7 - 3.0));
	rng_fill(&r, w, d, 0.5);
	for (j = 0; j < d; j++)
		w[j] += 1.0f;
	if (c->nan)
		x[1 * d + d / 2] = NAN;
	for (i = 0; i < c->n; i++)
		rows[i] = !c->gather ? i : i == 0 ? c->n_x - 1 : i == 2 ?
		    rows[0] : i == 1 ? 1 : rng_int(&r, c->n_x);
	for (i = 0; i < c->n; i++) {
		const float *xr = x + (size_t)rows[i] * d;
		double ss = 0, scale;

		cpu_rmsnorm(want + (size_t)i * d, xr, w, c->d, c->eps);
		for (j = 0; j < d; j++)
			ss += (double)xr[j] * (double)xr[j];
		scale = 1.0 / sqrt(ss / (double)d + (double)c->eps);
		for (j = 0; j < d; j++) {
			ref[(size_t)i * d + j] = (double)xr[j] * scale *
			    (double)w[j];
			cpu[(size_t)i * d + j] = want[(size_t)i * d + j];
		}
	}
	d_x = dcopy(x, xb);
	d_w = dcopy(w, d * sizeof(float));
	if (c->gather)
		d_rows = dcopy(rows, (size_t)c->n * sizeof(int32_t));
	d_out = dmalloc(ob);
	ck_assert_int_eq(cu_rmsnorm(g_st, d_x, d_rows, c->n, c->d, d_w,
	    c->eps, d_out), 0);
	sync_ok();
	dtoh(got, d_out, ob);
	snprintf(what, sizeof(what), "rmsnorm %s n %d d %d%s vs cpu formula",
	    c->gather ? "gather" : "rows", c->n, c->d, c->nan ? " NaN" : "");
	expect_close(what, got, cpu, NULL, (size_t)c->n * d, 2.5e-7);
	snprintf(what, sizeof(what), "rmsnorm %s n %d d %d%s vs double",
	    c->gather ? "gather" : "rows", c->n, c->d, c->nan ? " NaN" : "");
	expect_close(what, got, ref, NULL, (size_t)c->n * d, 2e-6);
	expect_guard(what, d_out, ob);
	back = hmalloc(xb);
	dtoh(back, d_x, xb);
	ck_assert_int_eq(memcmp(back, x, xb), 0);	/* read only */
}
END_TEST
SUITE_LOOP("rows", test_rmsnorm, 0, N_OF(norm_cases));

/* ---- the paged KV cache: RoPE + store, attention ---------------------- */

enum { NAN_NONE, NAN_Q, NAN_K, NAN_V };

struct kv_case {
	int n_head, n_head_kv, hd, n_rot, bt;
	enum cu_dtype dt;	/* the cache's */
	bool round_q;
	float qscale;		/* q ~ N(0, qscale^2) */
	float scale;		/* attention scale; 0: 1 / sqrt(hd) */
	int nan, n_seqs;
	struct {
		int first, count;	/* the step's rows: these positions */
	} seq[4];
};

/*
 * A step over a poisoned block pool.  Each sequence has its own block
 * table of shuffled pool blocks, covering positions 0..first + count - 1;
 * a few pool blocks belong to no one.  Inside a block, K of layer "this"
 * sits at k_off and V at v_off, with bytes of other layers around them.
 */
struct kv_rig {
	const struct kv_case *c;
	int n, qd, kvd, group, n_blocks, n_tab, max_pos;
	size_t es, block_bytes, k_off, v_off, pool_bytes;
	unsigned char *pool;		/* host image */
	int32_t *pos, *blk, *tab;	/* [n], [n], [n_tab] */
	int *seq_of;			/* [n] */
	int tab0[4];			/* first table entry of each seq */
	void *d_pool;
	int32_t *d_pos, *d_blk, *d_tab;
	struct cu_step st;
	struct cu_kv kv;
};

static void
kv_rig_init(struct kv_rig *g, const struct kv_case *c, struct rng *r)
{
	int s, i, j, row = 0, t;
	size_t slots;

	memset(g, 0, sizeof(*g));
	g->c = c;
	g->qd = c->n_head * c->hd;
	g->kvd = c->n_head_kv * c->hd;
	g->group = c->n_head / c->n_head_kv;
	g->es = dt_size(c->dt);
	slots = (size_t)c->bt * (size_t)g->kvd * g->es;
	g->k_off = 96;
	g->v_off = g->k_off + slots + 40;
	g->block_bytes = (g->v_off + slots + 24 + 7) / 8 * 8;
	for (s = 0; s < c->n_seqs; s++) {
		int top = c->seq[s].first + c->seq[s].count;

		g->tab0[s] = g->n_tab;
		g->n_tab += (top + c->bt - 1) / c->bt;
		g->n += c->seq[s].count;
		if (top - 1 > g->max_pos)
			g->max_pos = top - 1;
	}
	g->n_blocks = g->n_tab + 3;
	g->pool_bytes = (size_t)g->n_blocks * g->block_bytes;
	g->pool = hmalloc(g->pool_bytes);
	memset(g->pool, 0xff, g->pool_bytes);
	/* The tables: the first n_tab of the pool's blocks, shuffled. */
	g->tab = hmalloc((size_t)g->n_blocks * sizeof(int32_t));
	for (i = 0; i < g->n_blocks; i++)
		g->tab[i] = i;
	for (i = g->n_blocks - 1; i > 0; i--) {
		j = rng_int(r, i + 1);
		t = g->tab[i];
		g->tab[i] = g->tab[j];
		g->tab[j] = t;
	}
	g->pos = hmalloc((size_t)g->n * sizeof(int32_t));
	g->blk = hmalloc((size_t)g->n * sizeof(int32_t));
	g->seq_of = hmalloc((size_t)g->n * sizeof(int));
	for (s = 0; s < c->n_seqs; s++)
		for (i = 0; i < c->seq[s].count; i++, row++) {
			g->pos[row] = c->seq[s].first + i;
			g->blk[row] = g->tab0[s];
			g->seq_of[row] = s;
		}
}

/* K (off = k_off) or V (v_off) of sequence s at position p, in the image. */
static unsigned char *
kv_slot(const struct kv_rig *g, int s, int p, size_t off)
{
	int b = g->tab[g->tab0[s] + p / g->c->bt];

	return g->pool + (size_t)b * g->block_bytes + off +
	    (size_t)(p % g->c->bt) * (size_t)g->kvd * g->es;
}

/* Copy the step and the pool image to the device. */
static void
kv_rig_upload(struct kv_rig *g)
{
	g->d_pool = dcopy(g->pool, g->pool_bytes);
	g->d_pos = dcopy(g->pos, (size_t)g->n * sizeof(int32_t));
	g->d_blk = dcopy(g->blk, (size_t)g->n * sizeof(int32_t));
	g->d_tab = dcopy(g->tab, (size_t)g->n_tab * sizeof(int32_t));
	g->st = (struct cu_step){ g->n, g->d_pos, g->d_blk, g->d_tab };
	g->kv = (struct cu_kv){ g->d_pool, g->c->dt, g->block_bytes,
	    g->k_off, g->v_off, g->c->bt, g->kvd };
}

/* cos, sin of each rotated pair of positions 0..n_pos-1, base 10000. */
static float *
rope_table(int n_pos, int n_rot)
{
	float *cs = hmalloc((size_t)n_pos * (size_t)(n_rot ? n_rot : 1) *
	    sizeof(float));
	int p, i;

	for (p = 0; p < n_pos; p++)
		for (i = 0; i < n_rot / 2; i++) {
			double th = p * pow(10000.0, -2.0 * i / n_rot);

			cs[(size_t)p * n_rot + 2 * i] = (float)cos(th);
			cs[(size_t)p * n_rot + 2 * i + 1] = (float)sin(th);
		}
	return cs;
}

/* The CPU forward pass's rotation of a row's heads (fwd_rope_apply). */
static void
cpu_rope(float *v, int n_heads, int hd, int n_rot, const float *cs)
{
	float x0, x1, c, s;
	int h, i;

	for (h = 0; h < n_heads; h++) {
		float *p = v + (size_t)h * (size_t)hd;

		for (i = 0; i < n_rot / 2; i++) {
			c = cs[2 * i];
			s = cs[2 * i + 1];
			x0 = p[2 * i];
			x1 = p[2 * i + 1];
			p[2 * i] = x0 * c - x1 * s;
			p[2 * i + 1] = x0 * s + x1 * c;
		}
	}
}

static const struct kv_case rope_cases[] = {
	{ 4, 2, 64, 64, 16, CU_F16, true, 1, 0, NAN_NONE, 3,
	    { { 0, 21 }, { 37, 1 }, { 14, 4 } } },
	{ 6, 6, 80, 80, 5, CU_F32, false, 1, 0, NAN_NONE, 2,
	    { { 0, 9 }, { 3, 1 } } },
	{ 8, 1, 10, 8, 5, CU_F16, true, 1, 0, NAN_NONE, 2,
	    { { 0, 7 }, { 1000, 1 } } },
	{ 1, 1, 2, 0, 1, CU_F32, false, 1, 0, NAN_NONE, 1, { { 0, 3 } } },
	{ 32, 8, 128, 128, 16, CU_F16, true, 1, 0, NAN_NONE, 2,
	    { { 1000, 1 }, { 64, 16 } } },
	{ 4, 2, 64, 32, 16, CU_F32, true, 1, 0, NAN_NONE, 1, { { 0, 5 } } },
	{ 4, 2, 64, 64, 16, CU_F16, true, 1, 0, NAN_Q, 2,
	    { { 0, 5 }, { 20, 1 } } },
	{ 4, 2, 64, 64, 16, CU_F16, true, 1, 0, NAN_K, 2,
	    { { 0, 5 }, { 20, 1 } } },
	{ 6, 6, 80, 80, 5, CU_F32, false, 1, 0, NAN_V, 2,
	    { { 0, 5 }, { 20, 1 } } },
};

START_TEST(test_rope_store)
{
	const struct kv_case *c = &rope_cases[_i];
	struct rng r = { 300u + (uint64_t)_i };
	struct kv_rig g;
	size_t qb, kb, i, e;
	float *q, *k, *v, *cs, *want_q, *got_q, *kk, *back;
	unsigned char *want_pool, *got_pool, *mask;
	float *d_q, *d_k, *d_v, *d_rope;
	char what[200], tag[160];
	int row;

	kv_rig_init(&g, c, &r);
	snprintf(tag, sizeof(tag), "rope heads %d/%d hd %d rot %d bt %d %s%s%s",
	    c->n_head, c->n_head_kv, c->hd, c->n_rot, c->bt, dt_name(c->dt),
	    c->round_q ? " round_q" : "", c->nan == NAN_NONE ? "" : " NaN");
	qb = (size_t)g.n * (size_t)g.qd * sizeof(float);
	kb = (size_t)g.n * (size_t)g.kvd * sizeof(float);
	q = rng_fill(&r, hmalloc(qb), qb / 4, 1.0);
	k = rng_fill(&r, hmalloc(kb), kb / 4, 1.0);
	v = rng_fill(&r, hmalloc(kb), kb / 4, 1.0);
	if (c->nan == NAN_Q)
		q[0] = NAN;
	else if (c->nan == NAN_K)
		k[(size_t)g.kvd + 3] = NAN;
	else if (c->nan == NAN_V)
		v[(size_t)g.kvd - 1] = NAN;
	cs = rope_table(g.max_pos + 1, c->n_rot);

	/* The CPU's result: q in place, k rotated, k and v stored. */
	want_q = hmalloc(qb);
	kk = hmalloc(kb);
	memcpy(want_q, q, qb);
	memcpy(kk, k, kb);
	want_pool = hmalloc(g.pool_bytes);
	mask = hmalloc(g.pool_bytes);
	memcpy(want_pool, g.pool, g.pool_bytes);
	for (row = 0; row < g.n; row++) {
		float *qr = want_q + (size_t)row * g.qd;
		float *kr = kk + (size_t)row * g.kvd;
		const float *c_row = cs + (size_t)g.pos[row] * c->n_rot;
		unsigned char *ks = kv_slot(&g, g.seq_of[row], g.pos[row],
		    g.k_off) - g.pool + want_pool;
		unsigned char *vs = kv_slot(&g, g.seq_of[row], g.pos[row],
		    g.v_off) - g.pool + want_pool;

		cpu_rope(qr, c->n_head, c->hd, c->n_rot, c_row);
		cpu_rope(kr, c->n_head_kv, c->hd, c->n_rot, c_row);
		if (c->round_q)
			for (i = 0; i < (size_t)g.qd; i++)
				qr[i] = el_round(CU_F16, qr[i]);
		for (i = 0; i < (size_t)g.kvd; i++) {
			el_set(c->dt, ks, i, kr[i]);
			el_set(c->dt, vs, i, v[(size_t)row * g.kvd + i]);
		}
		memset(mask + (ks - want_pool), 1, (size_t)g.kvd * g.es);
		memset(mask + (vs - want_pool), 1, (size_t)g.kvd * g.es);
	}

	kv_rig_upload(&g);
	d_q = dcopy(q, qb);
	d_k = dcopy(k, kb);
	d_v = dcopy(v, kb);
	d_rope = dcopy(cs, (size_t)(g.max_pos + 1) * (size_t)(c->n_rot ?
	    c->n_rot : 1) * sizeof(float));
	ck_assert_int_eq(cu_rope_store(g_st, &g.st, &g.kv, d_q, d_k, d_v,
	    c->n_head, c->n_head_kv, c->hd, c->n_rot, false, d_rope, 0.0f,
	    c->round_q), 0);
	sync_ok();

	snprintf(what, sizeof(what), "%s: q", tag);
	got_q = hmalloc(qb);
	dtoh(got_q, d_q, qb);
	expect_same(what, CU_F32, got_q, want_q, (size_t)g.n * g.qd);
	expect_guard(what, d_q, qb);
	if (c->nan == NAN_Q)
		ck_assert(isnan(got_q[0]) && (c->n_rot < 2 ||
		    isnan(got_q[1])));

	back = hmalloc(2 * kb);		/* k and v are read only */
	dtoh(back, d_k, kb);
	dtoh(back + kb / 4, d_v, kb);
	ck_assert(memcmp(back, k, kb) == 0 &&
	    memcmp(back + kb / 4, v, kb) == 0);

	/*
	 * The pool: the rows' slots as the CPU stores them, every other
	 * byte (unowned blocks, other layers, other positions) untouched.
	 */
	snprintf(what, sizeof(what), "%s: K/V pool", tag);
	got_pool = hmalloc(g.pool_bytes);
	dtoh(got_pool, g.d_pool, g.pool_bytes);
	for (e = 0; e < g.pool_bytes / g.es; e++) {
		float gv = el_get(c->dt, got_pool, e);
		float wv = el_get(c->dt, want_pool, e);

		/* NaN for NaN only in a row's slot, where one was stored. */
		if (!el_bits_eq(c->dt, got_pool, want_pool, e) &&
		    !(mask[e * g.es] && isnan(gv) && isnan(wv)))
			ck_abort_msg("%s: pool element at byte %zu (%s): %.9g, "
			    "want %.9g", what, e * g.es, mask[e * g.es] ?
			    "a row's slot" : "no row's", (double)gv,
			    (double)wv);
	}
	printf("  %-54s bit-identical, the rest untouched\n", what);
	expect_guard(what, g.d_pool, g.pool_bytes);
}
END_TEST
SUITE_LOOP("kv", test_rope_store, 0, N_OF(rope_cases));

static const struct kv_case att_cases[] = {
	{ 4, 2, 64, 64, 16, CU_F16, false, 1, 0, NAN_NONE, 4,
	    { { 0, 41 }, { 300, 1 }, { 0, 1 }, { 125, 7 } } },
	{ 6, 3, 80, 80, 5, CU_F32, false, 1, 0, NAN_NONE, 3,
	    { { 0, 10 }, { 257, 1 }, { 128, 1 } } },
	{ 8, 1, 2, 2, 5, CU_F16, false, 1, 0, NAN_NONE, 2,
	    { { 0, 7 }, { 1000, 1 } } },
	{ 2, 2, 512, 512, 16, CU_F16, false, 1, 0, NAN_NONE, 2,
	    { { 130, 1 }, { 0, 3 } } },
	{ 32, 8, 128, 128, 16, CU_F16, false, 1, 0, NAN_NONE, 3,
	    { { 2047, 1 }, { 511, 1 }, { 64, 16 } } },
	{ 1, 1, 100, 100, 1, CU_F32, false, 1, 0, NAN_NONE, 2,
	    { { 0, 4 }, { 200, 1 } } },
	{ 4, 2, 64, 64, 16, CU_F16, false, 2, 0.5f, NAN_NONE, 2,
	    { { 0, 20 }, { 400, 1 } } },
	{ 4, 2, 64, 64, 5, CU_F16, false, 1, 0, NAN_K, 2,
	    { { 0, 12 }, { 30, 1 } } },
	{ 4, 2, 64, 64, 5, CU_F32, false, 1, 0, NAN_V, 2,
	    { { 0, 12 }, { 30, 1 } } },
	{ 4, 2, 64, 64, 16, CU_F16, false, 1, 0, NAN_Q, 2,
	    { { 0, 12 }, { 30, 1 } } },
};

/*
 * softmax(scale q.K) V for every row and head in double, from the values
 * the cache holds; mag gets sum w |v| / sum w per output.
 */
static void
att_reference(const struct kv_rig *g, const float *q, float scale,
    double *ref, double *mag)
{
	const struct kv_case *c = g->c;
	double *s = hmalloc((size_t)(g->max_pos + 1) * sizeof(double));
	double m, l, acc, am;
	int row, h, j, d, hd = c->hd;

	for (row = 0; row < g->n; row++)
		for (h = 0; h < c->n_head; h++) {
			const float *qh = q + (size_t)row * g->qd +
			    (size_t)h * hd;
			size_t ko = (size_t)(h / g->group) * (size_t)hd;
			size_t o = (size_t)row * g->qd + (size_t)h * hd;
			int pos = g->pos[row], sq = g->seq_of[row];

			m = -INFINITY;
			for (j = 0; j <= pos; j++) {
				const unsigned char *kr = kv_slot(g, sq, j,
				    g->k_off);
				double dot = 0;

				for (d = 0; d < hd; d++)
					dot += (double)qh[d] * (double)el_get(
					    c->dt, kr, ko + (size_t)d);
				s[j] = (double)scale * dot;
				if (s[j] > m)
					m = s[j];
			}
			l = 0;
			for (j = 0; j <= pos; j++) {
				s[j] = exp(s[j] - m);
				l += s[j];
			}
			for (d = 0; d < hd; d++) {
				acc = am = 0;
				for (j = 0; j <= pos; j++) {
					double vv = (double)el_get(c->dt,
					    kv_slot(g, sq, j, g->v_off),
					    ko + (size_t)d);

					acc += s[j] * vv;
					am += s[j] * fabs(vv);
				}
				ref[o + (size_t)d] = acc / l;
				mag[o + (size_t)d] = am / l;
			}
		}
}

START_TEST(test_attention)
{
	const struct kv_case *c = &att_cases[_i];
	struct rng r = { 400u + (uint64_t)_i };
	float scale = c->scale > 0 ? c->scale : 1.0f / sqrtf((float)c->hd);
	struct kv_rig g;
	size_t qb, no, i;
	float *q, *got, *one;
	double *ref, *mag;
	float *d_q, *d_out, *d_one;
	char what[160];
	int s, p, row, k;

	kv_rig_init(&g, c, &r);
	/* The cache holds positions 0..first + count - 1 of each sequence. */
	for (s = 0; s < c->n_seqs; s++)
		for (p = 0; p < c->seq[s].first + c->seq[s].count; p++) {
			unsigned char *ks = kv_slot(&g, s, p, g.k_off);
			unsigned char *vs = kv_slot(&g, s, p, g.v_off);

			for (i = 0; i < (size_t)g.kvd; i++) {
				el_set(c->dt, ks, i, (float)rng_normal(&r));
				el_set(c->dt, vs, i, (float)rng_normal(&r));
			}
		}
	if (c->nan == NAN_K)
		el_set(c->dt, kv_slot(&g, 0, 6, g.k_off), 1, NAN);
	else if (c->nan == NAN_V)
		el_set(c->dt, kv_slot(&g, 0, 6, g.v_off),
		    (size_t)g.kvd - 1, NAN);
	no = (size_t)g.n * (size_t)g.qd;
	qb = no * sizeof(float);
	q = rng_fill(&r, hmalloc(qb), no, c->qscale);
	if (c->nan == NAN_Q)
		q[3] = NAN;
	ref = hmalloc(no * sizeof(double));
	mag = hmalloc(no * sizeof(double));
	att_reference(&g, q, scale, ref, mag);

	kv_rig_upload(&g);
	d_q = dcopy(q, qb);
	d_out = dmalloc(qb);
	ck_assert_int_eq(cu_attention(g_st, &g.st, &g.kv, d_q, c->n_head,
	    c->n_head_kv, c->hd, scale, 0, 0.0f, d_out), 0);
	sync_ok();
	got = hmalloc(qb);
	dtoh(got, d_out, qb);
	snprintf(what, sizeof(what), "attention heads %d/%d hd %d bt %d %s "
	    "rows %d max pos %d%s", c->n_head, c->n_head_kv, c->hd, c->bt,
	    dt_name(c->dt), g.n, g.max_pos, c->nan == NAN_K ? " NaN in K" :
	    c->nan == NAN_V ? " NaN in V" : c->nan == NAN_Q ? " NaN in q" :
	    "");
	expect_close(what, got, ref, mag, no, 1e-4);
	expect_guard(what, d_out, qb);
	/* The NaN landed: q's in row 0 head 0 only; K's and V's (position
	 * 6 of seq 0) in row 11, not in row 5. */
	if (c->nan == NAN_Q)
		ck_assert(isnan(got[0]) && !isnan(got[(size_t)g.qd - 1]));
	else if (c->nan != NAN_NONE)
		ck_assert(!isnan(got[(size_t)5 * g.qd]) &&
		    isnan(got[(size_t)11 * g.qd + (c->nan == NAN_V ?
		    (size_t)g.qd - 1 : 0)]));

	/* Rows alone (first, middle, last) give the bits they had. */
	d_one = dmalloc((size_t)g.qd * sizeof(float));
	one = hmalloc((size_t)g.qd * sizeof(float));
	for (k = 0; k < 3; k++) {
		struct cu_step st1 = g.st;

		row = k == 0 ? 0 : k == 1 ? g.n / 2 : g.n - 1;
		st1.n_tokens = 1;
		st1.pos = g.d_pos + row;
		st1.blk = g.d_blk + row;
		ck_assert_int_eq(cu_attention(g_st, &st1, &g.kv, d_q +
		    (size_t)row * g.qd, c->n_head, c->n_head_kv, c->hd, scale,
		    0, 0.0f, d_one), 0);
		sync_ok();
		dtoh(one, d_one, (size_t)g.qd * sizeof(float));
		snprintf(what, sizeof(what), "attention row %d of %d alone, "
		    "heads %d/%d hd %d", row, g.n, c->n_head, c->n_head_kv,
		    c->hd);
		expect_same(what, CU_F32, one, got + (size_t)row * g.qd,
		    (size_t)g.qd);
	}
}
END_TEST
SUITE_LOOP("kv", test_attention, 0, N_OF(att_cases));

/* ---- element-wise: SwiGLU, residual add ------------------------------- */

struct ew_case {
	size_t n;
	bool special;		/* NaN, infinities, huge and tiny values */
};

static const struct ew_case ew_cases[] = {
	{ 1, false }, { 7, false }, { 1000003, false },
	{ 16777216 + 4097, false },	/* past one grid's reach */
	{ 4099, true },
};

#define EW_GUARD 1000		/* floats after n holding known values */

static void
ew_fill(struct rng *r, float *g, float *u, size_t n, bool special)
{
	static const float sv[] = { 0.0f, -0.0f, 100.0f, -100.0f, -88.5f,
	    88.5f, 1e-30f, -1e-30f, 3e38f, -3e38f, 1e-3f };
	size_t i;

	rng_fill(r, g, n + EW_GUARD, 4.0);
	rng_fill(r, u, n + EW_GUARD, 1.0);
	if (!special)
		return;
	for (i = 0; i < sizeof(sv) / sizeof(sv[0]); i++)
		g[10 * i] = sv[i];
	g[200] = NAN;
	u[201] = NAN;
	g[202] = INFINITY;
	g[203] = -INFINITY;
	g[204] = INFINITY;
	u[204] = 0.0f;
	u[205] = INFINITY;
	g[206] = 3e38f;		/* both overflow */
	u[206] = 3e38f;
	u[202] = -INFINITY;	/* inf + -inf in the add */
}

/*
 * cu_swiglu(g, u) and cu_add(x = g, u): g ~ N(0, 16), u ~ N(0, 1); the
 * special variant adds zeros of both signs, values whose exp() overflows
 * or underflows, overflowing products and sums, infinities and NaN.
 */
START_TEST(test_swiglu_add)
{
	const struct ew_case *c = &ew_cases[_i];
	struct rng r = { 500u + (uint64_t)_i };
	size_t n = c->n, nb = (n + EW_GUARD) * sizeof(float), i;
	float *g = malloc(nb), *u = malloc(nb), *got = malloc(nb);
	double *ref = calloc(n, sizeof(double));
	float *d_g, *d_x, *d_u;
	char what[128];

	ck_assert(g != NULL && u != NULL && got != NULL && ref != NULL);
	ew_fill(&r, g, u, n, c->special);
	d_g = dcopy(g, nb);
	d_x = dcopy(g, nb);
	d_u = dcopy(u, nb);
	ck_assert_int_eq(cu_swiglu(g_st, d_g, d_u, n), 0);
	ck_assert_int_eq(cu_add(g_st, d_x, d_u, n), 0);
	sync_ok();
	dtoh(got, d_g, nb);
	snprintf(what, sizeof(what), "swiglu n %zu%s", n,
	    c->special ? " NaN/inf/extremes" : "");
	for (i = 0; i < n; i++)
		ref[i] = f32_range((double)g[i] / (1.0 + exp(-(double)g[i])) *
		    (double)u[i]);
	expect_close(what, got, ref, NULL, n, 2e-6);
	ck_assert_int_eq(memcmp(got + n, g + n, EW_GUARD * sizeof(float)), 0);
	expect_guard(what, d_g, nb);

	dtoh(got, d_x, nb);
	ck_assert_int_eq(memcmp(got + n, g + n, EW_GUARD * sizeof(float)), 0);
	for (i = 0; i < n; i++)
		g[i] = g[i] + u[i];	/* the CPU's residual add */
	snprintf(what, sizeof(what), "add n %zu%s", n,
	    c->special ? " NaN/inf/extremes" : "");
	expect_same(what, CU_F32, got, g, n);
	expect_guard(what, d_x, nb);
	free(ref);
	free(got);
	free(u);
	free(g);
}
END_TEST
SUITE_LOOP("rows", test_swiglu_add, 0, N_OF(ew_cases));

/* ---- conversion of activations and the matrix product ---------------- */

struct mm_case {
	enum cu_dtype dt;
	int n, k, ldw, m;
	int nan;		/* NAN_NONE, NAN_Q (in x), NAN_K (in w) */
};

static const struct mm_case mm_cases[] = {
	{ CU_F16, 1, 8, 8, 1, NAN_NONE },
	{ CU_F16, 37, 5, 8, 3, NAN_NONE },
	{ CU_F16, 257, 259, 264, 65, NAN_NONE },
	{ CU_F16, 64, 4100, 4104, 130, NAN_NONE },
	{ CU_F16, 2051, 256, 256, 64, NAN_NONE },
	{ CU_BF16, 37, 5, 8, 3, NAN_NONE },
	{ CU_BF16, 257, 259, 264, 65, NAN_NONE },
	{ CU_BF16, 512, 1024, 1024, 1, NAN_NONE },
	{ CU_F32, 37, 5, 8, 3, NAN_NONE },
	{ CU_F32, 257, 259, 264, 65, NAN_NONE },
	{ CU_F32, 100, 2048, 2048, 129, NAN_NONE },
	{ CU_F16, 33, 70, 72, 5, NAN_Q },
	{ CU_F16, 33, 70, 72, 5, NAN_K },
	{ CU_BF16, 33, 70, 72, 5, NAN_Q },
	{ CU_F32, 33, 70, 72, 5, NAN_K },
};

static int
round_up(int n, int a)
{
	return (n + a - 1) / a * a;
}

/*
 * y[r, o] = sum_c w[o, c] x[r, c] in double, for w and x as given or
 * rounded to dt first; mag = sum |w x|.
 */
static void
mm_reference(const struct mm_case *c, const float *w, const float *x,
    int ldx, bool rounded, double *ref, double *mag)
{
	int r, o, j;

	for (r = 0; r < c->m; r++)
		for (o = 0; o < c->n; o++) {
			double acc = 0, am = 0, a, b;

			for (j = 0; j < c->k; j++) {
				a = w[(size_t)o * c->k + j];
				b = x[(size_t)r * ldx + j];
				if (rounded) {
					a = el_round(c->dt, (float)a);
					b = el_round(c->dt, (float)b);
				}
				acc += a * b;
				am += fabs(a * b);
			}
			ref[(size_t)r * c->n + o] = acc;
			mag[(size_t)r * c->n + o] = am;
		}
}

START_TEST(test_convert_gemm)
{
	const struct mm_case *c = &mm_cases[_i];
	struct rng r = { 700u + (uint64_t)_i };
	int ldx = c->k + 3, ldh = c->ldw, mp = round_up(c->m, CU_GEMM_ROWS);
	size_t es = dt_size(c->dt), i, no = (size_t)c->m * (size_t)c->n;
	size_t xb = (size_t)c->m * (size_t)ldx * sizeof(float);
	size_t hb = (size_t)mp * (size_t)ldh * es;
	size_t wb = (size_t)c->n * (size_t)c->ldw * es;
	size_t yb = (size_t)mp * (size_t)c->n * sizeof(float);
	float *w = hmalloc((size_t)c->n * (size_t)c->k * sizeof(float));
	float *x = hmalloc(xb), *y = hmalloc(yb), *y1;
	unsigned char *wh = hmalloc(wb), *xh_want = hmalloc(hb);
	unsigned char *xh_got = hmalloc(hb);
	double *ref = hmalloc(no * sizeof(double));
	double *mag = hmalloc(no * sizeof(double));
	double tol_in = c->dt == CU_F16 ? 1e-3 : c->dt == CU_BF16 ? 8e-3 : 1e-4;
	struct cu_gemm *gm = NULL;
	void *d_w, *d_xh, *d_xh1;
	float *d_x, *d_y, *d_y1;
	char what[160];
	int row, o, j;

	rng_fill(&r, w, (size_t)c->n * (size_t)c->k, 0.1);
	rng_fill(&r, x, (size_t)c->m * (size_t)ldx, 1.0);
	/* Values the conversion must round or saturate alike. */
	x[0] = 1e-6f;			/* an F16 subnormal */
	if (c->k > 2) {
		x[1] = -0.0f;
		x[2] = 1.0f + 1.0f / 2048.0f;	/* an F16 tie */
	}
	if (c->nan == NAN_Q && c->m > 1)
		x[(size_t)ldx + 2] = NAN;	/* row 1 */
	if (c->nan == NAN_K)
		w[3 * (size_t)c->k] = NAN;	/* output 3 */
	/* Weights in dt; the padding columns [k, ldw) are NaN. */
	memset(wh, 0xff, wb);
	for (o = 0; o < c->n; o++)
		for (j = 0; j < c->k; j++)
			el_set(c->dt, wh, (size_t)o * c->ldw + j,
			    w[(size_t)o * c->k + j]);

	/* cu_convert: rows < m as the CPU converts them, zeros elsewhere. */
	memset(xh_want, 0, hb);
	for (row = 0; row < c->m; row++)
		for (j = 0; j < c->k; j++)
			el_set(c->dt, xh_want, (size_t)row * ldh + j,
			    x[(size_t)row * ldx + j]);
	d_x = dcopy(x, xb);
	d_xh = dmalloc(hb);
	ck_assert_int_eq(cu_convert(g_st, d_x, ldx, c->m, c->k, c->dt, d_xh,
	    ldh, mp), 0);
	sync_ok();
	dtoh(xh_got, d_xh, hb);
	snprintf(what, sizeof(what), "convert %s m %d k %d ldx %d ldh %d "
	    "m_pad %d%s", dt_name(c->dt), c->m, c->k, ldx, ldh, mp,
	    c->nan == NAN_Q ? " NaN" : "");
	expect_same(what, c->dt, xh_got, xh_want, hb / es);
	expect_guard(what, d_xh, hb);

	/* cu_gemm over the converted rows. */
	d_w = dcopy(wh, wb);
	d_y = dmalloc(yb);
	ck_assert_int_eq(cu_gemm_new(g_st, GEMM_WS, &gm), 0);
	ck_assert_int_eq(cu_gemm(gm, d_w, c->dt, c->n, c->k, c->ldw, d_xh, ldh,
	    c->m, d_y), 0);
	sync_ok();
	dtoh(y, d_y, yb);
	snprintf(what, sizeof(what), "gemm %s n %d k %d ldw %d m %d%s",
	    dt_name(c->dt), c->n, c->k, c->ldw, c->m,
	    c->nan == NAN_Q ? " NaN in x" : c->nan == NAN_K ? " NaN in w" : "");
	mm_reference(c, w, x, ldx, true, ref, mag);
	expect_close(what, y, ref, mag, no, 1e-4);
	snprintf(what, sizeof(what), "gemm %s n %d k %d m %d vs F32 inputs%s",
	    dt_name(c->dt), c->n, c->k, c->m, c->nan != NAN_NONE ? " NaN" : "");
	mm_reference(c, w, x, ldx, false, ref, mag);
	expect_close(what, y, ref, mag, no, tol_in);
	/* The padding rows [m, m_pad) multiply zeros. */
	if (c->nan != NAN_K)
		for (i = no; i < (size_t)mp * (size_t)c->n; i++)
			if (y[i] != 0.0f)
				ck_abort_msg("%s: padding row %zu: %g", what,
				    i / (size_t)c->n, (double)y[i]);
	expect_guard(what, d_y, yb);

	/* The last row alone, converted alone: the same bits. */
	d_xh1 = dmalloc((size_t)CU_GEMM_ROWS * (size_t)ldh * es);
	d_y1 = dmalloc((size_t)CU_GEMM_ROWS * (size_t)c->n * sizeof(float));
	y1 = hmalloc((size_t)c->n * sizeof(float));
	ck_assert_int_eq(cu_convert(g_st, d_x + (size_t)(c->m - 1) * ldx, ldx,
	    1, c->k, c->dt, d_xh1, ldh, CU_GEMM_ROWS), 0);
	ck_assert_int_eq(cu_gemm(gm, d_w, c->dt, c->n, c->k, c->ldw, d_xh1,
	    ldh, 1, d_y1), 0);
	sync_ok();
	dtoh(y1, d_y1, (size_t)c->n * sizeof(float));
	snprintf(what, sizeof(what), "gemm %s row %d of %d alone",
	    dt_name(c->dt), c->m - 1, c->m);
	expect_same(what, CU_F32, y1, y + (size_t)(c->m - 1) * c->n,
	    (size_t)c->n);
	cu_gemm_free(gm);
}
END_TEST
SUITE_LOOP("gemm", test_convert_gemm, 0, N_OF(mm_cases));

/* ---- argument checks (no device needed) -------------------------------- */

START_TEST(test_args)
{
	/* Never dereferenced: every call below fails its checks first. */
	void *al = (void *)(uintptr_t)4096, *mis = (void *)(uintptr_t)4098;
	struct cu_step st = { 1, NULL, NULL, NULL };
	struct cu_kv kv = { NULL, CU_F16, 4096, 0, 1024, 16, 128 };
	enum cu_dtype bad = (enum cu_dtype)7;
	const int E = -EINVAL;
	float *f = al, *fm = mis;

	ck_assert(cu_dtype_size(CU_F32) == 4 && cu_dtype_size(CU_F16) == 2 &&
	    cu_dtype_size(CU_BF16) == 2);

	ck_assert_int_eq(cu_embed(NULL, al, CU_F16, 8, 9, al, 1, f), E);
	ck_assert_int_eq(cu_embed(NULL, al, CU_F16, 8, 0, al, 1, f), E);
	ck_assert_int_eq(cu_embed(NULL, al, CU_F16, 8, 8, al, -1, f), E);
	ck_assert_int_eq(cu_embed(NULL, al, bad, 8, 8, al, 1, f), E);
	ck_assert_int_eq(cu_embed(NULL, al, CU_F16, 8, 8, al, 0, f), 0);

	ck_assert_int_eq(cu_rmsnorm(NULL, f, NULL, -1, 8, f, 1e-5f, f), E);
	ck_assert_int_eq(cu_rmsnorm(NULL, f, NULL, 1, 0, f, 1e-5f, f), E);
	ck_assert_int_eq(cu_rmsnorm(NULL, f, NULL, 0, 8, f, 1e-5f, f), 0);

	/* kv: 2 KV heads of 64.  n_rot odd, > head_dim, negative; kv_dim
	 * != n_head_kv * head_dim; no heads; head_dim 0. */
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, 63,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, 66,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, -2,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 4, 64, 64,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 0, 2, 64, 64,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 0, 0,
	    false, f, 0.0f, true), E);
	/* No BF16 cache, in either kernel. */
	kv.dt = CU_BF16;
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, 64,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 4, 2, 64, 0.1f, 0, 0.0f,
	    f), E);
	kv.dt = CU_F16;
	/* Negative and zero rows. */
	st.n_tokens = -1;
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, 64,
	    false, f, 0.0f, true), E);
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 4, 2, 64, 0.1f, 0, 0.0f,
	    f), E);
	st.n_tokens = 0;
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, 64,
	    false, f, 0.0f, true), 0);
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 4, 2, 64, 0.1f, 0, 0.0f,
	    f), 0);
	st.n_tokens = 1;
	/* Heads that do not group, no KV heads, head_dim 0 and past the
	 * kernel's limit, more heads than a grid's y, no block tokens. */
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 5, 2, 64, 0.1f, 0, 0.0f,
	    f), E);
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 4, 0, 64, 0.1f, 0, 0.0f,
	    f), E);
	kv.kv_dim = 0;
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 2, 2, 0, 0.1f, 0, 0.0f,
	    f), E);
	kv.kv_dim = 2 * (CU_ATT_MAX_HEAD_DIM + 2);
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 2, 2,
	    CU_ATT_MAX_HEAD_DIM + 2, 0.1f, 0, 0.0f, f), E);
	kv.kv_dim = 65536 * 2;
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 65536, 65536, 2, 0.1f,
	    0, 0.0f, f), E);
	kv.kv_dim = 128;
	kv.block_tokens = 0;
	ck_assert_int_eq(cu_attention(NULL, &st, &kv, f, 4, 2, 64, 0.1f, 0, 0.0f,
	    f), E);
	ck_assert_int_eq(cu_rope_store(NULL, &st, &kv, f, f, f, 4, 2, 64, 64,
	    false, f, 0.0f, true), E);

	ck_assert_int_eq(cu_swiglu(NULL, NULL, NULL, 0), 0);
	ck_assert_int_eq(cu_add(NULL, NULL, NULL, 0), 0);

	/* ldh % 8, ldx < k, ldh < k, m_pad < m, m < 0, k < 1, the type. */
	ck_assert_int_eq(cu_convert(NULL, f, 8, 1, 8, CU_F16, al, 12, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 8, 1, 9, CU_F16, al, 16, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 16, 1, 9, CU_F16, al, 8, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 8, 65, 8, CU_F16, al, 8, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 8, -1, 8, CU_F16, al, 8, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 8, 1, 0, CU_F16, al, 8, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 8, 1, 8, bad, al, 8, 64), E);
	ck_assert_int_eq(cu_convert(NULL, f, 8, 0, 8, CU_F16, al, 8, 0), 0);

	/* n, k, m out of range, ldw < k, ldx < k, strides not multiples of
	 * 8, pointers not 256-byte aligned. */
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 0, 8, 8, al, 8, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 0, 8, al, 8, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 8, 8, al, 8, -1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 9, 8, al, 16, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 9, 16, al, 8, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 9, 12, al, 16, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 9, 16, al, 12, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, mis, CU_F16, 8, 8, 8, al, 8, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 8, 8, mis, 8, 1, f), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 8, 8, al, 8, 1, fm), E);
	ck_assert_int_eq(cu_gemm(NULL, al, CU_F16, 8, 8, 8, al, 8, 0, f), 0);

	cu_gemm_free(NULL);
	cu_stream_free(NULL);
	cu_free(NULL);
	cu_host_free(NULL);
}
END_TEST
SUITE_TEST("args", test_args);

/* ---- suites ----------------------------------------------------------- */


SUITE_FIXTURE("runtime", 120, setup, teardown, true);
SUITE_FIXTURE("rows", 120, setup, teardown, true);
SUITE_FIXTURE("kv", 120, setup, teardown, true);
SUITE_FIXTURE("gemm", 120, setup, teardown, true);
SUITE_CASE("args", 30);

int
main(void)
{
	const char *device_cases[] = { "runtime", "rows", "kv", "gemm" };
	char why[256];
	int n_dev;
	size_t i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	n_dev = child_probe(cuda_probe_usable, why, sizeof(why));
	for (i = 0; n_dev <= 0 && i < 4; i++)
		suite_case_skip(device_cases[i]);
	return suite_main_some(suite_registered("cuda_kernels"), n_dev > 0,
	    "check_cuda_kernels: kernel tests skipped, no usable CUDA device: "
	    "%s\n", why);
}
