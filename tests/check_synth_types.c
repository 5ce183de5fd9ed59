/*
 * check_synth_types.c - the weight quantizers of every GGUF type cpd writes
 * (Q4_1, Q5_0, Q5_1, Q2_K..Q6_K) and models written by `cpmodel synth` in
 * each type, run through the engine.
 *
 * (quant_row() against llama-quantize's synth-tiny files, byte for byte,
 * is in check_quant.c.)  On random data every value must come back within
 * one quantization step of its block.  The engine test writes a model of
 * each type with cpmodel ($CPMODEL, else
 * $BUILD/bin/cpmodel, else build/bin/cpmodel), checks its weights against
 * the F32 file of the same seed, then runs it against an F32 copy of its own
 * dequantized weights, with the tolerances of synth/README.md for a
 * "dequantize, multiply in F32" engine.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "gguf.h"
#include "gguf_write.h"
#include "kvcache.h"
#include "lib/prog.h"
#include "lib/rig.h"
#include "lib/suite.h"
#include "lib/tgguf.h"
#include "lib/tmpdir.h"
#include "model.h"
#include "quant.h"
#include "ttype.h"


/*
 * Inside long loops: Check records every passing ck_assert (a write to its
 * pipe), so loops test by hand and only call Check on a failure.
 */
#define EXPECT(cond, ...) do {						\
	if (!(cond))							\
		ck_abort_msg(__VA_ARGS__);				\
} while (0)

/* Ends run()'s argument list (a null pointer of the type va_arg reads). */
#define END ((char *)NULL)

static char cpmodel[1024];

/* cpmodel with the arguments, output to a file (prog.h). */
#define run(...) prog_run(cpmodel, __VA_ARGS__)

/* The types quantize_k.c writes. */
static const uint32_t qtypes[] = {
	CP_T_Q4_1, CP_T_Q5_0, CP_T_Q5_1, CP_T_Q2_K, CP_T_Q3_K, CP_T_Q4_K,
	CP_T_Q5_K, CP_T_Q6_K,
};
#define N_QTYPES (sizeof(qtypes) / sizeof(qtypes[0]))

/* ---- error bounds ----------------------------------------------------- */

/*
 * Largest error of one value of a K-quant, as a fraction of the largest
 * magnitude in its 256-value super-block: one step of the format's grid
 * spanning that magnitude (2 amax over 2^bits - 1 levels with a min,
 * amax over 2^(bits - 1) symmetric), with 25% room for the fitted (not
 * min/max) scales and their 4-8 bit quantization.
 */
static double
k_step(uint32_t t)
{
	switch (t) {
	case CP_T_Q2_K: return 2.0 / 3 * 1.25;
	case CP_T_Q3_K: return 1.0 / 4 * 1.25;
	case CP_T_Q4_K: return 2.0 / 15 * 1.25;
	case CP_T_Q5_K: return 2.0 / 31 * 1.25;
	case CP_T_Q6_K: return 1.0 / 32 * 1.25;
	default: return -1;
	}
}

/*
 * Largest error of value x[j] of a 32-value block x of a legacy type:
 * Q4_1 / Q5_1 round to nearest on nmax steps over [min, max]; Q5_0 has
 * steps of amax / 16 and clamps the end opposite the largest magnitude a
 * whole step.  Plus the f16 rounding of d (times up to nmax levels) and m.
 */
static double
legacy_bound(uint32_t t, const float *x)
{
	double lo = x[0], hi = x[0], amax = 0;
	int nmax = t == CP_T_Q4_1 ? 15 : 31;

	for (int j = 0; j < 32; j++) {
		lo = fmin(lo, x[j]);
		hi = fmax(hi, x[j]);
		amax = fmax(amax, fabs(x[j]));
	}
	if (t == CP_T_Q5_0)
		return amax / 16 + amax * ldexp(1, -10);
	return (hi - lo) / nmax * 0.5 + (fabs(lo) + hi - lo) * ldexp(1, -10);
}

/*
 * Largest relative RMS error (error RMS over the data's RMS) on N(0, s^2)
 * data: N(0, 1) blocks of 32 have amax near 2.1, of 16 near 1.8, and a
 * uniform quantizer with step D has error RMS D / sqrt(12).  The bounds
 * are those step estimates with 50% room.
 */
static double
gauss_rms_bound(uint32_t t)
{
	switch (t) {
	case CP_T_F16: return ldexp(1, -11);
	case CP_T_BF16: return ldexp(1, -8);
	case CP_T_Q8_0: return 2.1 / 127 / sqrt(12) * 1.5;
	case CP_T_Q4_0: return 2.1 / 8 / sqrt(12) * 1.5;
	case CP_T_Q4_1: case CP_T_Q4_K: return 2.1 * 2 / 15 / sqrt(12) * 1.5;
	case CP_T_Q5_0: return 2.1 / 16 / sqrt(12) * 1.5;
	case CP_T_Q5_1: case CP_T_Q5_K: return 2.1 * 2 / 31 / sqrt(12) * 1.5;
	case CP_T_Q6_K: return 1.8 / 32 / sqrt(12) * 1.5;
	case CP_T_Q3_K: return 1.8 / 4 / sqrt(12) * 1.5;
	case CP_T_Q2_K: return 1.8 * 2 / 3 / sqrt(12) * 1.5;
	default: return -1;
	}
}

/* ---- random data ------------------------------------------------------ */

struct rng {
	uint64_t s;
};

/* splitmix64: 64 random bits. */
static uint64_t
rng_u64(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static double
rng_unit(struct rng *r)
{
	return ((double)(rng_u64(r) >> 11) + 0.5) * 0x1.0p-53;
}

/* Standard normal (Box-Muller, one of the pair). */
static double
rng_normal(struct rng *r)
{
	double u = rng_unit(r), v = rng_unit(r);

	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

#define N_RAND 4096		/* values per random row: 16 super-blocks */
#define N_PATTERNS 9

/* Random row of pattern p (0: N(0, 1), the others shapes that stress fits). */
static void
fill_pattern(int p, float *x, int n, uint64_t seed)
{
	struct rng r = { seed * 1000 + (uint64_t)p };
	double sub = 1;

	for (int j = 0; j < n; j++) {
		double g = rng_normal(&r);

		switch (p) {
		case 0:		/* N(0, 1) */
			x[j] = (float)g;
			break;
		case 1:		/* uniform in [-1, 1) */
			x[j] = (float)(2 * rng_unit(&r) - 1);
			break;
		case 2:		/* all positive, offset well away from 0 */
			x[j] = (float)(3 + 0.3 * g);
			break;
		case 3:		/* all negative */
			x[j] = (float)(-0.5 - fabs(g));
			break;
		case 4:		/* 1% outliers twenty times the rest */
			x[j] = (float)(rng_unit(&r) < 0.01 ? 20 * g : g);
			break;
		case 5:		/* per 16 values a magnitude in 1e-3..1e3 */
			if (j % 16 == 0)
				sub = pow(10, -3 + 6 * rng_unit(&r));
			x[j] = (float)(sub * g);
			break;
		case 6:		/* 90% zeros */
			x[j] = rng_unit(&r) < 0.9 ? 0.0f : (float)g;
			break;
		case 7:		/* per 32 values a constant, every 4th 0 */
			if (j % 32 == 0)
				sub = j % 128 == 0 ? 0 : 2 * g;
			x[j] = (float)sub;
			break;
		default:	/* +amax and -amax in every sub-block */
			x[j] = (float)(j % 16 == 0 ? 4 : j % 16 == 1 ? -4 : g);
			break;
		}
	}
}

/* Per-element bounds on every pattern; zeros stay exactly zero. */
START_TEST(test_random_bounds)
{
	uint32_t t = qtypes[_i];
	int bs = (int)ttype_info(t)->block;
	static float x[N_RAND], y[N_RAND];
	static uint8_t q[N_RAND * 2];
	double worst = 0;

	ck_assert(quant_can_quant(t));
	for (int p = 0; p < N_PATTERNS; p++) {
		fill_pattern(p, x, N_RAND, 1);
		memset(y, 0xff, sizeof(y));
		ck_assert_int_eq(quant_row(t, x, q, N_RAND), 0);
		ck_assert_int_eq(dequant_row(t, q, y, N_RAND), 0);
		for (int b = 0; b < N_RAND; b += bs) {
			double amax = 0, bound;

			for (int j = b; j < b + bs; j++)
				amax = fmax(amax, fabs(x[j]));
			for (int j = b; j < b + bs; j++) {
				double e = fabs((double)y[j] - x[j]);

				bound = bs == 32 ? legacy_bound(t, x + b) :
				    k_step(t) * amax;
				EXPECT(e <= bound, "%s pattern %d element %d: "
				    "%.9g -> %.9g, error above %.4g",
				    ttype_name(t), p, j, x[j], y[j], bound);
				if (amax > 0 && e / amax > worst)
					worst = e / amax;
				if (amax == 0)
					EXPECT(y[j] == 0.0f, "%s pattern %d "
					    "element %d: zero block decodes "
					    "to %g", ttype_name(t), p, j, y[j]);
			}
		}
	}
	fprintf(stderr, "%s: worst error / block amax on random data %.4g\n",
	    ttype_name(t), worst);
}
END_TEST
SUITE_LOOP("random", test_random_bounds, 0, (int)N_QTYPES);

/* Relative RMS error on N(0, 1) data; values on the grid kept exactly. */
START_TEST(test_random_rms)
{
	uint32_t t = qtypes[_i];
	static float x[N_RAND], y[N_RAND];
	static uint8_t q[N_RAND * 2];
	double se = 0, ss = 0, rel;

	for (uint64_t seed = 1; seed <= 4; seed++) {
		fill_pattern(0, x, N_RAND, seed);
		ck_assert_int_eq(quant_row(t, x, q, N_RAND), 0);
		ck_assert_int_eq(dequant_row(t, q, y, N_RAND), 0);
		for (int j = 0; j < N_RAND; j++) {
			se += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
			ss += (double)x[j] * x[j];
		}
	}
	rel = sqrt(se / ss);
	fprintf(stderr, "%s: relative RMS error on N(0, 1) %.4g (bound %.4g)\n",
	    ttype_name(t), rel, gauss_rms_bound(t));
	ck_assert_double_le(rel, gauss_rms_bound(t));

	/*
	 * Values on the format's grid, with scales exact in f16, come back
	 * exactly: every level of Q4_1 (d 0.5, m -3) and Q5_1 (d 0.25, m -4);
	 * Q5_0 with max -2 (d 1/8); Q3_K and Q6_K with -4 / -32 in every
	 * sub-block (scale 1, super-block d -1/32 and -1/128).  The affine
	 * K-quants' d = max scale / 63 or / 15 is not exact in f16.
	 */
	for (int j = 0; j < 256; j++) {
		switch (t) {
		case CP_T_Q4_1: x[j] = 0.5f * (float)(j % 16) - 3; break;
		case CP_T_Q5_1: x[j] = 0.25f * (float)(j % 32) - 4; break;
		case CP_T_Q5_0: x[j] = 0.125f * (float)(j % 32 - 16); break;
		case CP_T_Q3_K: x[j] = (float)(j % 8 - 4); break;
		case CP_T_Q6_K:
			x[j] = j % 16 == 0 ? -32 : (float)(j * 7 % 64 - 32);
			break;
		default: return;
		}
	}
	ck_assert_int_eq(quant_row(t, x, q, 256), 0);
	ck_assert_int_eq(dequant_row(t, q, y, 256), 0);
	for (int j = 0; j < 256; j++)
		ck_assert_msg(y[j] == x[j], "%s grid element %d: %g -> %g",
		    ttype_name(t), j, x[j], y[j]);
}
END_TEST
SUITE_LOOP("random", test_random_rms, 0, (int)N_QTYPES);

/*
 * Hostile values never trap (the sanitizer build checks the conversions),
 * finite rows come back finite, and bad lengths are refused.
 */
START_TEST(test_random_hostile)
{
	uint32_t t = qtypes[_i];
	int bs = (int)ttype_info(t)->block;
	static float x[512], y[512];
	static uint8_t q[1024];
	static const float odd[] = {
		NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-38f, 1e-45f, -0.0f,
		65504.0f, 70000.0f,
	};

	for (int k = 0; k < 64; k++) {
		for (int j = 0; j < 512; j++)
			x[j] = (float)((j * 7 + k) % 11) - 5.0f;
		for (int j = k % 5; j < 512; j += 37 + k)
			x[j] = odd[(j + k) % (sizeof(odd) / sizeof(odd[0]))];
		ck_assert_int_eq(quant_row(t, x, q, 512), 0);
		ck_assert_int_eq(dequant_row(t, q, y, 512), 0);
	}
	/* tiny and large finite magnitudes, one per row */
	for (int k = -40; k <= 4; k += 4) {
		for (int j = 0; j < 512; j++)
			x[j] = (float)(ldexp(1, k) * ((j % 9) - 4.5));
		ck_assert_int_eq(quant_row(t, x, q, 512), 0);
		ck_assert_int_eq(dequant_row(t, q, y, 512), 0);
		for (int j = 0; j < 512; j++)
			ck_assert_msg(isfinite(y[j]), "%s 2^%d row element "
			    "%d: %g", ttype_name(t), k, j, y[j]);
	}
	ck_assert_int_eq(quant_row(t, x, q, (size_t)bs / 2), -EINVAL);
	ck_assert_int_eq(quant_row(t, x, q, (size_t)bs + 16), -EINVAL);
	ck_assert_int_eq(quant_row(t, x, q, 0), 0);
}
END_TEST
SUITE_LOOP("random", test_random_hostile, 0, (int)N_QTYPES);

/* Tensor name as a C string in buf (GGUF_MAX_NAME_LEN + 1 bytes). */
static const char *
tensor_name(const struct gguf_tensor *t, char *buf)
{
	ck_assert_uint_le(t->name.len, GGUF_MAX_NAME_LEN);
	memcpy(buf, t->name.ptr, t->name.len);
	buf[t->name.len] = '\0';
	return buf;
}

/* ---- cpmodel synth models through the engine -------------------------- */
static void
tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/check_synth_types-%ld-%s", tmp_dir(),
	    (long)getpid(), name);
}

/*
 * The model: 2 layers, embd 256 (4 heads of 64, 2 KV heads), ff 512, so
 * every row is a multiple of the 256-value K-quant super-block; std 0.1 as
 * the synth-tiny fixtures, whose tolerances apply.
 */
#define M_ARGS "--layers", "2", "--embd", "256", "--heads", "4", \
	"--kv-heads", "2", "--ff", "512", "--ctx", "128", "--vocab", "320", \
	"--std", "0.1", "--seed", "11"
#define M_VOCAB 320
#define N_PROMPT 24
#define N_GEN 16

struct engine_case {
	const char *name;	/* --type */
	uint32_t type;
	uint32_t file_type;	/* llama.cpp's enum llama_ftype */
	double tol;		/* logprob tolerance (synth/README.md) */
};

/*
 * Tolerances: synth/README.md's measurements of a "dequantize, multiply in
 * F32" engine against llama.cpp (B), which rounds the activations to the
 * weight's type before each product as this engine does: 2e-2 for F16,
 * 0.1 for BF16, 0.35 for the quantized types.
 */
static const struct engine_case engine_cases[] = {
	{ "f16", CP_T_F16, 1, 2e-2 },
	{ "bf16", CP_T_BF16, 32, 0.1 },
	{ "q8_0", CP_T_Q8_0, 7, 0.35 },
	{ "q4_0", CP_T_Q4_0, 2, 0.35 },
	{ "q4_1", CP_T_Q4_1, 3, 0.35 },
	{ "q5_0", CP_T_Q5_0, 8, 0.35 },
	{ "q5_1", CP_T_Q5_1, 9, 0.35 },
	{ "q2_k", CP_T_Q2_K, 10, 0.35 },
	{ "q3_k", CP_T_Q3_K, 11, 0.35 },
	{ "q4_k", CP_T_Q4_K, 14, 0.35 },
	{ "q5_k", CP_T_Q5_K, 16, 0.35 },
	{ "q6_k", CP_T_Q6_K, 18, 0.35 },
};
#define N_ENGINE (sizeof(engine_cases) / sizeof(engine_cases[0]))

/*
 * The file written in type c->type against the F32 file of the same seed:
 * every matrix in that type, norms F32, the file type key, and each
 * matrix's values within the type's error (per 32 or 256 values, and RMS).
 */
static void
check_weights(const struct engine_case *c, const char *pq, const char *pf)
{
	struct gguf_file *fq = tgguf_open(pq), *ff = tgguf_open(pf);
	const struct gguf_kv *kv = gguf_find_kv(fq, "general.file_type");

	ck_assert_ptr_nonnull(kv);
	ck_assert_uint_eq(kv->val.v.u64, c->file_type);
	ck_assert_uint_eq(gguf_n_tensors(fq), gguf_n_tensors(ff));
	for (size_t i = 0; i < gguf_n_tensors(fq); i++) {
		const struct gguf_tensor *tq = gguf_tensor_at(fq, i), *tf;
		char name[GGUF_MAX_NAME_LEN + 1];
		float *x, *y;
		double se = 0, ss = 0;
		int bs = c->type == CP_T_F16 || c->type == CP_T_BF16 ? 32 :
		    (int)ttype_info(c->type)->block;

		tf = gguf_find_tensor(ff, tensor_name(tq, name));
		ck_assert_ptr_nonnull(tf);
		ck_assert_uint_eq(tf->n_elems, tq->n_elems);
		if (tq->n_dims == 1) {
			ck_assert_msg(tq->type == CP_T_F32, "%s: %s", name,
			    ttype_name(tq->type));
			continue;
		}
		ck_assert_msg(tq->type == c->type, "%s: %s, want %s", name,
		    ttype_name(tq->type), ttype_name(c->type));
		x = tgguf_floats(tf);
		y = tgguf_floats(tq);
		for (uint64_t b = 0; b < tq->n_elems; b += (uint64_t)bs) {
			double amax = 0, bound;

			for (int j = 0; j < bs; j++)
				amax = fmax(amax, fabs(x[b + j]));
			for (int j = 0; j < bs; j++) {
				double e = fabs((double)y[b + j] - x[b + j]);

				switch (c->type) {
				case CP_T_F16:
					bound = amax * ldexp(1, -11);
					break;
				case CP_T_BF16:
					bound = amax * ldexp(1, -8);
					break;
				case CP_T_Q8_0:
					bound = amax / 127 * (0.5 + 127 *
					    ldexp(1, -11));
					break;
				case CP_T_Q4_0:
					bound = amax / 8 *
					    (1 + 8 * ldexp(1, -10));
					break;
				default:
					bound = bs == 32 ? legacy_bound(c->type,
					    x + b) : k_step(c->type) * amax;
					break;
				}
				EXPECT(e <= bound, "%s %s element %llu: %.9g "
				    "vs %.9g (bound %.3g)", c->name, name,
				    (unsigned long long)(b + (uint64_t)j),
				    y[b + j], x[b + j], bound);
				se += e * e;
				ss += (double)x[b + j] * x[b + j];
			}
		}
		ck_assert_msg(sqrt(se / ss) <= gauss_rms_bound(c->type),
		    "%s %s: relative RMS error %.4g > %.4g", c->name, name,
		    sqrt(se / ss), gauss_rms_bound(c->type));
		free(y);
		free(x);
	}
	gguf_close(ff);
	gguf_close(fq);
}

/*
 * An F32 copy of the GGUF at src at dst: every key (file type 0, no
 * quantization version), every tensor dequantized.
 */
static void
write_f32_copy(const char *src, const char *dst)
{
	struct gguf_file *f = tgguf_open(src);
	struct gguf_writer *w = gguf_writer_new();
	size_t nt = gguf_n_tensors(f);
	float **data = calloc(nt, sizeof(*data));
	struct cp_err e = { 0 };

	ck_assert(w != NULL && data != NULL);
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);

		if (gguf_str_eq(kv->key, "general.quantization_version"))
			continue;
		ck_assert_int_eq(gguf_writer_copy_kv(w, kv), 0);
	}
	ck_assert_int_eq(gguf_writer_set_u32(w, "general.file_type", 0), 0);
	for (size_t i = 0; i < nt; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		char name[GGUF_MAX_NAME_LEN + 1];

		data[i] = tgguf_floats(t);
		ck_assert_int_eq(gguf_writer_add_tensor(w, tensor_name(t, name),
		    CP_T_F32, t->n_dims, t->ne, data[i]), 0);
	}
	ck_assert_msg(gguf_writer_write(w, dst, &e) == 0, "%s", e.msg);
	gguf_writer_free(w);
	for (size_t i = 0; i < nt; i++)
		free(data[i]);
	free(data);
	gguf_close(f);
}

/* A rig (lib/rig.h) on path's model, CPU backend, one thread; its sequence. */
static int
rig_open(struct rig *r, const char *path)
{
	struct be_params p = { 0 };
	struct cp_err e = { 0 };
	int seq;

	p.n_threads = 1;
	memset(r, 0, sizeof(*r));
	ck_assert_msg(model_load(path, &r->m, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(r->m->hp.n_vocab, M_VOCAB);
	r->n_vocab = M_VOCAB;
	ck_assert_msg(be_open("cpu", r->m, &p, &r->be, &e) == 0, "%s", e.msg);
	seq = kv_seq_new(be_kv(r->be));
	ck_assert_int_ge(seq, 0);
	return seq;
}

static void
rig_close(struct rig *r)
{
	be_close(r->be);
	model_free(r->m);
}

/* The k best ids of lp (k <= 16), best first. */
static void
top_k(const double *lp, int n, int k, int *ids)
{
	for (int a = 0; a < k; a++) {
		int best = -1;

		for (int i = 0; i < n; i++) {
			bool taken = false;

			for (int b = 0; b < a; b++)
				taken |= ids[b] == i;
			if (!taken && (best < 0 || lp[i] > lp[best]))
				best = i;
		}
		ids[a] = best;
	}
}

/*
 * A synth model of the case's type against the F32 copy of its own
 * dequantized weights.  The F32 copy runs greedy from the prompt; the
 * model is teacher-forced on those ids.  After the prompt its logprobs of
 * the copy's top 10 are within tol; at every step the copy's top1 is
 * within tol of the model's best, and the top1 and top2 logprobs within
 * tol of the copy's (synth/README.md, "Greedy check for synth-tiny").
 */
START_TEST(test_engine)
{
	const struct engine_case *c = &engine_cases[_i];
	char pq[512], pf[512], pd[512], log[512];
	int32_t prompt[N_PROMPT], gen[N_GEN];
	static float ref[N_GEN][M_VOCAB], got[N_GEN][M_VOCAB];
	double lr[M_VOCAB], lq[M_VOCAB], worst = 0;
	int top[10], seq;
	struct rig r;

	tmp_path(pq, sizeof(pq), "q.gguf");
	tmp_path(pf, sizeof(pf), "f32.gguf");
	tmp_path(pd, sizeof(pd), "deq.gguf");
	tmp_path(log, sizeof(log), "log");
	ck_assert_msg(run(log, "synth", "-o", pq, M_ARGS, "--type", c->name,
	    END) == 0, "cpmodel synth --type %s failed (see %s)", c->name, log);
	ck_assert_int_eq(run(log, "synth", "-o", pf, M_ARGS, END), 0);
	check_weights(c, pq, pf);
	write_f32_copy(pq, pd);

	prompt[0] = 1;
	for (int i = 1; i < N_PROMPT; i++)
		prompt[i] = 3 + (37 * i + 11) % (M_VOCAB - 3);
	seq = rig_open(&r, pd);
	rig_feed(&r, seq, 0, prompt, N_PROMPT, 0, ref[0]);
	for (int i = 0; i < N_GEN; i++) {
		gen[i] = vec_argmax(ref[i], M_VOCAB);
		if (i + 1 < N_GEN)
			rig_feed(&r, seq, N_PROMPT + i, &gen[i], 1, 0,
			    ref[i + 1]);
	}
	rig_close(&r);
	seq = rig_open(&r, pq);
	rig_feed(&r, seq, 0, prompt, N_PROMPT, 0, got[0]);
	for (int i = 1; i < N_GEN; i++)
		rig_feed(&r, seq, N_PROMPT + i - 1, &gen[i - 1], 1, 0,
		    got[i]);
	rig_close(&r);

	vec_logsoftmax(ref[0], M_VOCAB, lr);
	vec_logsoftmax(got[0], M_VOCAB, lq);
	top_k(lr, M_VOCAB, 10, top);
	for (int k = 0; k < 10; k++) {
		double d = fabs(lq[top[k]] - lr[top[k]]);

		ck_assert_msg(d <= c->tol, "%s: top-10 token %d logprob %g vs "
		    "%g, tolerance %g", c->name, top[k], lq[top[k]],
		    lr[top[k]], c->tol);
	}
	for (int i = 0; i < N_GEN; i++) {
		double gap, e1, e2;

		vec_logsoftmax(ref[i], M_VOCAB, lr);
		vec_logsoftmax(got[i], M_VOCAB, lq);
		top_k(lr, M_VOCAB, 2, top);
		ck_assert_int_eq(top[0], gen[i]);
		gap = lq[vec_argmax(got[i], M_VOCAB)] - lq[top[0]];
		e1 = fabs(lq[top[0]] - lr[top[0]]);
		e2 = fabs(lq[top[1]] - lr[top[1]]);
		ck_assert_msg(gap <= c->tol && e1 <= c->tol && e2 <= c->tol,
		    "%s step %d: gap %g, top1 error %g, top2 error %g, "
		    "tolerance %g", c->name, i, gap, e1, e2, c->tol);
		worst = fmax(worst, fmax(gap, fmax(e1, e2)));
	}
	fprintf(stderr, "%s: worst teacher-forced logprob difference %.4g "
	    "(tolerance %g)\n", c->name, worst, c->tol);
	unlink(pq);
	unlink(pf);
	unlink(pd);
	unlink(log);
}
END_TEST
SUITE_LOOP("engine", test_engine, 0, (int)N_ENGINE);

SUITE_CASE("random", 60);
SUITE_CASE("engine", 120);

int
main(void)
{
	bool engine;

	engine = prog_find(cpmodel, sizeof(cpmodel), "cpmodel",
	    "CPMODEL") == 0;
	/* The engine test needs cpmodel. */
	if (!engine)
		suite_case_skip("engine");
	return suite_main_some(suite_registered("synth_types"), engine, "%s not "
	    "built (make it, or set CPMODEL): the engine test skipped\n",
	    cpmodel);
}
