/*
 * check_repack.c - repacked weights (repack.h): the layout gives every
 * GGUF row back bit for bit, and the products over repacked weights are
 * the plain kernels' products bit for bit (the plain dot products stay
 * the reference), on random blocks with extreme scales (F16: extreme
 * values) over many seeds
 * and on every weight of every synth fixture whose type has a layout.
 * Whole models too: every synth fixture's greedy logits, prompt and
 * generation, are the same bits with CP_NO_REPACK set and not.  The
 * product checks need a CPU with the repacked kernels (AVX-512 VNNI) and
 * are skipped without one.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "lib/fixtures.h"
#include "lib/refcheck.h"
#include "lib/rig.h"
#include "lib/suite.h"
#include "matmul.h"
#include "model.h"
#include "packed.h"
#include "quant.h"
#include "repack.h"
#include "ttype.h"

static const uint32_t types[] = { CP_T_F16, CP_T_Q4_0, CP_T_Q8_0, CP_T_Q4_K,
    CP_T_Q6_K };
#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

static uint64_t rng;

static uint32_t
rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

/*
 * An F16 scale: mostly ordinary, often extreme (the largest finite
 * values, subnormals, zero, either sign).
 */
static uint16_t
rnd_scale(void)
{
	static const uint16_t extreme[] = { 0x7bff, 0xfbff, 0x0001, 0x8001,
	    0x03ff, 0x0000, 0x8000, 0x0400, 0x7800 };
	uint32_t u = rnd();

	if (u % 4 == 0)
		return extreme[(u >> 8) % (sizeof(extreme) / sizeof(extreme[0]))];
	return (uint16_t)(0x1c00 + (u >> 16) % 0x2000) | (uint16_t)(u & 0x8000);
}

/*
 * Offsets of the F16 scales in a block of type t, -1 terminated (F16:
 * every value is one; Q4_0 and Q8_0 start with theirs).
 */
static const int *
scale_offsets(uint32_t t)
{
	static const int first[] = { 0, -1 }, q4_k[] = { 0, 2, -1 };
	static const int q6_k[] = { 208, -1 };

	switch (t) {
	case CP_T_F16:
	case CP_T_Q4_0:
	case CP_T_Q8_0:
		return first;
	case CP_T_Q4_K:
		return q4_k;
	case CP_T_Q6_K:
		return q6_k;
	}
	ck_abort_msg("no scales listed for type %u", t);
	return NULL;
}

/* rows x k random blocks of t: random bytes, scales from rnd_scale(). */
static uint8_t *
rnd_weights(uint32_t t, int rows, int k, size_t *rb)
{
	const struct ttype_info *ti = ttype_info(t);
	uint64_t n;
	uint8_t *w;

	ck_assert_int_eq(ttype_nbytes(t, (uint64_t)k, &n), 0);
	*rb = (size_t)n;
	w = malloc(*rb * (size_t)rows);
	ck_assert_ptr_nonnull(w);
	for (size_t i = 0; i < *rb * (size_t)rows; i++)
		w[i] = (uint8_t)rnd();
	for (size_t b = 0; b < *rb * (size_t)rows / ti->bytes; b++)
		for (const int *o = scale_offsets(t); *o >= 0; o++) {
			uint16_t s = rnd_scale();

			memcpy(w + b * ti->bytes + *o, &s, 2);
		}
	return w;
}

/* Every row of the repacked w unpacks to the GGUF row. */
static void
check_unpack(uint32_t t, const uint8_t *w, size_t rb, int rows, int k,
    const uint8_t *packed)
{
	uint8_t *row = malloc(rb);

	ck_assert_ptr_nonnull(row);
	for (int r = 0; r < rows; r++) {
		repack_row_unpack(t, packed, r, k, row);
		ck_assert_msg(memcmp(row, w + (size_t)r * rb, rb) == 0,
		    "%s row %d of %d does not unpack", ttype_name(t), r, rows);
	}
	free(row);
}

/*
 * The product of m activation rows with the rows x k weights w, plain and
 * repacked, cut into row ranges of chunk rows: the same bits.
 */
static void
check_product(uint32_t t, const uint8_t *w, size_t rb, int rows, int k,
    const uint8_t *packed, int m, int chunk, const char *what)
{
	size_t sb = mm_scratch_bytes(t, k, m);
	float *x = malloc((size_t)m * (size_t)k * sizeof(float));
	float *y0 = malloc((size_t)m * (size_t)rows * sizeof(float));
	float *y1 = malloc((size_t)m * (size_t)rows * sizeof(float));
	void *scr = malloc(sb + 64);
	struct mm_args a;

	ck_assert(x != NULL && y0 != NULL && y1 != NULL && scr != NULL);
	for (size_t i = 0; i < (size_t)m * (size_t)k; i++)
		x[i] = (float)(int32_t)rnd() / 2147483648.0f *
		    (rnd() % 8 == 0 ? 1e4f : 1.0f);
	memset(&a, 0, sizeof(a));
	a.wtype = t;
	a.w = w;
	a.w_stride = rb;
	a.n_out = rows;
	a.k = k;
	a.x = x;
	a.ldx = (size_t)k;
	a.m = m;
	a.y = y0;
	a.ldy = (size_t)rows;
	mm_prepare(&a, scr);
	mm_rows(&a, scr, 0, rows);
	a.w = packed;
	a.packed = true;
	a.y = y1;
	ck_assert_int_eq(mm_rows_align(&a), REPACK_ROWS);
	for (int o = 0; o < rows; o += chunk)
		mm_rows(&a, scr, o, o + chunk < rows ? o + chunk : rows);
	for (size_t i = 0; i < (size_t)m * (size_t)rows; i++)
		ck_assert_msg(memcmp(&y0[i], &y1[i], sizeof(float)) == 0,
		    "%s: %s k %d rows %d m %d: output %zu: plain %a, "
		    "repacked %a", what, ttype_name(t), k, rows, m, i, y0[i],
		    y1[i]);
	free(scr);
	free(y1);
	free(y0);
	free(x);
}

/* rows % REPACK_ROWS != 0 and k off the block are refused. */
START_TEST(test_bad_shapes)
{
	uint8_t buf[4096] = { 0 };

	ck_assert_int_eq(repack_rows(CP_T_Q8_0, buf, 34, 3, 32, buf + 2048),
	    -EINVAL);
	ck_assert_int_eq(repack_rows(CP_T_Q8_0, buf, 34, 4, 31, buf + 2048),
	    -EINVAL);
	ck_assert_int_eq(repack_rows(CP_T_F16, buf, 24, 4, 12, buf + 2048),
	    -EINVAL);
	ck_assert_int_eq(repack_rows(CP_T_F32, buf, 128, 4, 32, buf + 2048),
	    -EINVAL);
	ck_assert_int_eq(repack_block(CP_T_F32), 0);
	ck_assert_int_eq(repack_block(CP_T_BF16), 0);
	ck_assert_int_eq(repack_block(CP_T_F16), 8);
	ck_assert_int_eq(repack_block(CP_T_Q4_0), 32);
	ck_assert_int_eq(repack_block(CP_T_Q8_0), 32);
	ck_assert_int_eq(repack_block(CP_T_Q4_K), 256);
}
END_TEST
SUITE_TEST("layout", test_bad_shapes);

/*
 * Random blocks, extreme scales, 64 seeds per type: round trip, and the
 * products for 1..9 activation rows cut at every multiple of
 * REPACK_ROWS.
 */
START_TEST(test_fuzz)
{
	uint32_t t = types[_i % N_TYPES];

	for (int seed = 0; seed < 64; seed++) {
		int rows = REPACK_ROWS * (1 + seed % 9);
		int k = repack_block(t) * (1 + (seed * 7) % 11);
		uint8_t *w, *p;
		size_t rb;

		rng = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1) + t;
		w = rnd_weights(t, rows, k, &rb);
		p = malloc(rb * (size_t)rows);
		ck_assert_ptr_nonnull(p);
		ck_assert_int_eq(repack_rows(t, w, rb, rows, k, p), 0);
		check_unpack(t, w, rb, rows, k, p);
		if (repack_kernel(t) != NULL)
			check_product(t, w, rb, rows, k, p, 1 + seed % 9,
			    REPACK_ROWS * (1 + seed % 3), "fuzz");
		free(p);
		free(w);
	}
}
END_TEST
SUITE_LOOP("layout", test_fuzz, 0, N_TYPES);

/*
 * Calls fn(rel, path) for each .gguf in the fixtures' folder sub ("synth"
 * or "arch"); returns how many.
 */
static int
each_fixture(const char *sub, void (*fn)(const char *rel, const char *path,
    int *seen), int *seen)
{
	char *dir = fx_path(sub);
	struct dirent *de;
	int n_files = 0;
	DIR *d;

	ck_assert_ptr_nonnull(dir);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL) {
		char path[1024], rel[300];
		size_t n = strlen(de->d_name);

		if (n < 5 || strcmp(de->d_name + n - 5, ".gguf") != 0 ||
		    n > 200)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		snprintf(rel, sizeof(rel), "%s/%s", sub, de->d_name);
		fn(rel, path, seen);
		n_files++;
	}
	closedir(d);
	free(dir);
	return n_files;
}

/* Every weight of a repackable type in the file at path. */
static void
fixture_weights(const char *name, const char *path, int *seen)
{
	struct gguf_file *gf;
	struct cp_err e;

	ck_assert_msg(gguf_open(path, &gf, &e) == 0, "%s", e.msg);
	for (size_t i = 0; i < gguf_n_tensors(gf); i++) {
		const struct gguf_tensor *tn = gguf_tensor_at(gf, i);
		int rows = (int)tn->ne[1], k = (int)tn->ne[0];
		size_t rb = tn->nbytes / (size_t)rows;
		uint8_t *p;

		if (repack_block(tn->type) == 0 || tn->n_dims != 2 ||
		    rows % REPACK_ROWS != 0 || k % repack_block(tn->type) != 0)
			continue;
		p = malloc(tn->nbytes);
		ck_assert_ptr_nonnull(p);
		ck_assert_int_eq(repack_rows(tn->type, tn->data, rb, rows, k,
		    p), 0);
		check_unpack(tn->type, tn->data, rb, rows, k, p);
		rng = 12345 + i;
		if (repack_kernel(tn->type) != NULL) {
			check_product(tn->type, tn->data, rb, rows, k, p, 1,
			    rows, name);
			check_product(tn->type, tn->data, rb, rows, k, p, 7,
			    2 * REPACK_ROWS, name);
		}
		free(p);
		(*seen)++;
	}
	gguf_close(gf);
}

START_TEST(test_fixtures)
{
	int seen = 0;

	ck_assert_int_gt(each_fixture("synth", fixture_weights, &seen), 0);
	ck_assert_int_gt(seen, 0);
}
END_TEST
SUITE_TEST("fixtures", test_fixtures);

/* The model at rel gets repacked weights (CP_NO_REPACK unset). */
static bool
packed_made(const char *rel)
{
	char *path = fx_path(rel);
	struct model *m;
	struct packed *p;
	struct cp_err e;
	bool made;

	unsetenv("CP_NO_REPACK");
	ck_assert_msg(model_load(path, &m, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(packed_get(m, NULL, &p, &e), 0);
	made = p != NULL && packed_bytes(p) > 0;
	packed_put(p);
	model_free(m);
	free(path);
	return made;
}

/*
 * Greedy logits of the model at path (relative to the fixtures), 24
 * prompt ids fed in chunks of 7 then 6 generated, on 2 threads.
 */
static void
greedy(const char *rel, bool repack, float *lg, int32_t *ids, int *n_vocab)
{
	struct be_params p = rig_params(2, 16, 2);
	int32_t prompt[24];
	struct rig r;

	setenv("CP_NO_REPACK", repack ? "0" : "1", 1);
	rig_init(&r, rel, "cpu", &p);
	for (int i = 0; i < 24; i++)
		prompt[i] = (int32_t)((i * 7919 + 13) % r.n_vocab);
	*n_vocab = r.n_vocab;
	if (lg != NULL)
		ref_greedy(&r, prompt, 24, 7, 6, ids, lg);
	rig_fini(&r);
}

/*
 * Whole-model logits with and without repacking: the same bits.  The
 * arch fixtures include tied embeddings (gemma), whose rows a step reads
 * back from the repacked output.
 */
static void
fixture_model(const char *rel, const char *path, int *seen)
{
	const char *name = strrchr(rel, '/') + 1;
	float *a, *b;
	int32_t ia[6], ib[6];
	int nv;

	(void)path;
	greedy(rel, false, NULL, NULL, &nv);
	a = malloc((size_t)nv * 6 * sizeof(float));
	b = malloc((size_t)nv * 6 * sizeof(float));
	ck_assert(a != NULL && b != NULL);
	greedy(rel, false, a, ia, &nv);
	greedy(rel, true, b, ib, &nv);
	ck_assert_msg(packed_made(rel) || repack_kernel(CP_T_Q8_0) == NULL ||
	    (strstr(name, "Q8_0") == NULL && strstr(name, "K") == NULL &&
	    strstr(name, "-F16.") == NULL && strstr(name, "Q4_0") == NULL),
	    "%s: nothing repacked", name);
	ck_assert_msg(memcmp(ia, ib, sizeof(ia)) == 0, "%s: greedy ids "
	    "differ", name);
	for (size_t i = 0; i < (size_t)nv * 6; i++)
		ck_assert_msg(memcmp(&a[i], &b[i], sizeof(float)) == 0,
		    "%s: logit %zu: plain %a, repacked %a", name, i, a[i],
		    b[i]);
	free(b);
	free(a);
	(*seen)++;
}

START_TEST(test_models)
{
	int seen = 0;

	ck_assert_int_gt(each_fixture("synth", fixture_model, &seen), 0);
	ck_assert_int_gt(each_fixture("arch", fixture_model, &seen), 0);
}
END_TEST
SUITE_TEST("fixtures", test_models);

SUITE_CASE("fixtures", 300);

int
main(void)
{
	return fx_main("repack", "synth");
}
