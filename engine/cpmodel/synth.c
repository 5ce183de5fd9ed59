/*
 * synth.c - `cpmodel synth`: write a llama- or qwen2-architecture GGUF with
 * deterministic random weights, of any shape and main tensor type, for tests
 * and benchmarks.  qwen2 adds the Q, K and V biases (random, F32);
 * --rope-freqs adds Llama 3.1's rope_freqs.weight, the divisors the
 * llama3 rope scaling (factor 8, low 1, high 4, original context 8192)
 * gives each dimension pair.
 *
 * Keys and tensor names are llama.cpp's.  Matrices are drawn i.i.d.
 * N(0, std^2) in float32 and converted row by row to the chosen type while
 * the file is written (memory stays O(row length), whatever the model size);
 * RMS-norm weights are 1.0 and always F32.  Each tensor has its own random
 * stream, seeded from --seed and the tensor's position, so a tensor's values
 * (before conversion) do not depend on --type: the F32 and Q8_0 files of one
 * seed hold the same weights up to rounding.
 *
 * Tokenizer: with --vocab-from FILE every tokenizer.* key is copied and the
 * vocabulary size is that file's token count.  Otherwise a small valid
 * SentencePiece (tokenizer.ggml.model "llama") vocabulary is written: <unk>,
 * <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then "▁" and lowercase
 * pieces in length order ("a".."z", "▁a".., "aa"...), each reachable by
 * merging two shorter ones, up to --vocab tokens.
 */
#include "cpmodel.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf.h"
#include "gguf_write.h"
#include "quant.h"
#include "ttype.h"

#define SYNTH_MAX_DIM (1u << 20)	/* bound on every size option */
#define SYNTH_N_SPECIAL 3		/* <unk> <s> </s> */
#define SYNTH_N_FIXED (SYNTH_N_SPECIAL + 256)
#define SYNTH_PIECE_MAX 16		/* bytes of a filler piece + NUL */

/* llama.cpp's token types (enum llama_token_type). */
enum {
	SYNTH_TT_NORMAL = 1,
	SYNTH_TT_UNKNOWN = 2,
	SYNTH_TT_CONTROL = 3,
	SYNTH_TT_BYTE = 6,
};

struct synth_opts {
	const char *out;
	const char *vocab_from;
	const char *name;
	const char *arch;	/* "llama" or "qwen2" */
	bool rope_freqs;	/* write llama3 rope_freqs.weight */
	uint32_t layers, embd, heads, kv_heads, ff, vocab, ctx;
	float rope_base;
	float rms_eps;
	float std;
	bool tied;
	uint32_t type;		/* enum cp_ttype of the matrices */
	uint64_t seed;
};

/* The random stream of one tensor: xoshiro256** and a spare normal. */
struct synth_rng {
	uint64_t s[4];
	bool have_spare;
	float spare;
};

/* Row generator state for one tensor (gguf_writer_add_tensor_gen()). */
struct synth_gen {
	struct synth_rng rng;
	uint32_t type;
	bool ones;		/* RMS-norm weight: every element 1.0 */
	const float *fixed;	/* these values instead, when not NULL */
	float std;
	float *row;		/* ne[0] floats, shared by all tensors */
	size_t n;		/* ne[0] */
};

static const struct {
	const char *name;
	uint32_t type;
	uint32_t file_type;	/* general.file_type (enum llama_ftype) */
} synth_types[] = {
	{ "f32", CP_T_F32, 0 },
	{ "f16", CP_T_F16, 1 },
	{ "bf16", CP_T_BF16, 32 },
	{ "q8_0", CP_T_Q8_0, 7 },
	{ "q4_0", CP_T_Q4_0, 2 },
	{ "q4_1", CP_T_Q4_1, 3 },
	{ "q5_0", CP_T_Q5_0, 8 },
	{ "q5_1", CP_T_Q5_1, 9 },
	/* K-quants: every matrix one type, so the _S file types. */
	{ "q2_k", CP_T_Q2_K, 10 },
	{ "q3_k", CP_T_Q3_K, 11 },
	{ "q4_k", CP_T_Q4_K, 14 },
	{ "q5_k", CP_T_Q5_K, 16 },
	{ "q6_k", CP_T_Q6_K, 18 },
};

/* The --type name of type t (t is in synth_types[]). */
static const char *
synth_type_name(uint32_t t)
{
	for (size_t i = 0; i < sizeof(synth_types) / sizeof(synth_types[0]);
	    i++)
		if (synth_types[i].type == t)
			return synth_types[i].name;
	return "f32";
}

static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void
rng_init(struct synth_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);

	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
	r->have_spare = false;
}

static uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(struct synth_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* Uniform in (0, 1]: 53 random bits, never 0 (log() below). */
static double
rng_unit(struct synth_rng *r)
{
	return (double)((rng_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* Standard normal by the Box-Muller transform (two per draw). */
static float
rng_normal(struct synth_rng *r)
{
	double rad, th;

	if (r->have_spare) {
		r->have_spare = false;
		return r->spare;
	}
	rad = sqrt(-2.0 * log(rng_unit(r)));
	th = 2.0 * M_PI * rng_unit(r);
	r->spare = (float)(rad * sin(th));
	r->have_spare = true;
	return (float)(rad * cos(th));
}

static int
synth_row(void *arg, uint64_t r, void *dst, size_t row_bytes)
{
	struct synth_gen *g = arg;

	(void)r;
	(void)row_bytes;
	for (size_t i = 0; i < g->n; i++)
		g->row[i] = g->fixed != NULL ? g->fixed[i] : g->ones ? 1.0f :
		    g->std * rng_normal(&g->rng);
	return quant_row(g->type, g->row, dst, g->n);
}

/* Filler piece k (0-based) after the fixed tokens, into buf. */
static void
synth_piece(uint32_t k, char *buf)
{
	char letters[8];
	uint32_t idx, len = 1, count = 26;
	int n = 0;

	if (k == 0) {
		strcpy(buf, "\xe2\x96\x81");	/* U+2581, SentencePiece space */
		return;
	}
	k--;
	/* Pieces come in pairs: k even is plain, k odd has the ▁ prefix. */
	idx = k / 2;
	while (idx >= count) {
		idx -= count;
		len++;
		count *= 26;
	}
	for (uint32_t i = 0; i < len; i++) {
		letters[len - 1 - i] = (char)('a' + idx % 26);
		idx /= 26;
	}
	if (k % 2 == 1) {
		memcpy(buf, "\xe2\x96\x81", 3);
		n = 3;
	}
	memcpy(buf + n, letters, len);
	buf[n + (int)len] = '\0';
}

/* The built-in SentencePiece vocabulary of o->vocab tokens. */
static int
synth_vocab(struct gguf_writer *w, const struct synth_opts *o)
{
	char (*pieces)[SYNTH_PIECE_MAX] = NULL;
	const char **strs = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	uint32_t n = o->vocab;
	int ret = -ENOMEM;

	if ((pieces = calloc(n, sizeof(*pieces))) == NULL ||
	    (strs = calloc(n, sizeof(*strs))) == NULL ||
	    (scores = calloc(n, sizeof(*scores))) == NULL ||
	    (types = calloc(n, sizeof(*types))) == NULL)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		strs[i] = pieces[i];
		if (i < SYNTH_N_SPECIAL) {
			static const char *const special[SYNTH_N_SPECIAL] = {
				"<unk>", "<s>", "</s>"
			};

			strcpy(pieces[i], special[i]);
			types[i] = i == 0 ? SYNTH_TT_UNKNOWN : SYNTH_TT_CONTROL;
		} else if (i < SYNTH_N_FIXED) {
			snprintf(pieces[i], SYNTH_PIECE_MAX, "<0x%02X>",
			    i - SYNTH_N_SPECIAL);
			types[i] = SYNTH_TT_BYTE;
		} else {
			synth_piece(i - SYNTH_N_FIXED, pieces[i]);
			types[i] = SYNTH_TT_NORMAL;
			/* Shorter (earlier) pieces merge first. */
			scores[i] = -(float)(i - SYNTH_N_FIXED + 1);
		}
	}
	if ((ret = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) < 0 ||
	    (ret = gguf_writer_set_strs(w, "tokenizer.ggml.tokens", strs,
	    n)) < 0 ||
	    (ret = gguf_writer_set_arr(w, "tokenizer.ggml.scores",
	    GGUF_VT_FLOAT32, scores, n)) < 0 ||
	    (ret = gguf_writer_set_arr(w, "tokenizer.ggml.token_type",
	    GGUF_VT_INT32, types, n)) < 0 ||
	    (ret = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id",
	    1)) < 0 ||
	    (ret = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id",
	    2)) < 0 ||
	    (ret = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id",
	    0)) < 0)
		goto out;
	ret = 0;
out:
	free(types);
	free(scores);
	free(strs);
	free(pieces);
	return ret;
}

/* Copy every tokenizer.* key of path; sets o->vocab to its token count. */
static int
synth_vocab_from(struct gguf_writer *w, struct synth_opts *o)
{
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };
	const struct gguf_array *toks;
	int ret;

	if ((ret = gguf_open(o->vocab_from, &f, &e)) < 0) {
		fprintf(stderr, "cpmodel synth: %s\n", e.msg);
		return ret;
	}
	if ((ret = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING,
	    &toks, &e)) < 0) {
		fprintf(stderr, "cpmodel synth: --vocab-from: %s\n", e.msg);
		goto out;
	}
	if (toks->n == 0 || toks->n > SYNTH_MAX_DIM) {
		fprintf(stderr, "cpmodel synth: %s: %" PRIu64 " tokens, "
		    "expected 1..%u\n", o->vocab_from, toks->n, SYNTH_MAX_DIM);
		ret = -EINVAL;
		goto out;
	}
	if (o->vocab != 0 && o->vocab != toks->n) {
		fprintf(stderr, "cpmodel synth: --vocab %" PRIu32 " disagrees "
		    "with the %" PRIu64 " tokens of %s\n", o->vocab, toks->n,
		    o->vocab_from);
		ret = -EINVAL;
		goto out;
	}
	o->vocab = (uint32_t)toks->n;
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);

		if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10))
			continue;
		if ((ret = gguf_writer_copy_kv(w, kv)) < 0) {
			fprintf(stderr, "cpmodel synth: %s: kv %zu: cannot copy: "
			    "%s\n", o->vocab_from, i, strerror(-ret));
			goto out;
		}
	}
	ret = 0;
out:
	gguf_close(f);
	return ret;
}

void
synth_usage(FILE *fp)
{
	fputs("usage: cpmodel synth -o FILE --layers N --embd N --heads N "
	    "--kv-heads N --ff N\n"
	    "           --vocab N --ctx N [--rope-base F] [--rms-eps F] "
	    "[--tied]\n"
	    "           [--type TYPE] [--vocab-from GGUF] [--seed N] "
	    "[--std F] [--name NAME]\n"
	    "           [--arch llama|qwen2] [--rope-freqs]\n"
	    "       TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 (--embd, --ff "
	    "multiples of 32)\n"
	    "             q2_k q3_k q4_k q5_k q6_k (multiples of 256)\n", fp);
}

/* Parse a whole decimal number in 1..max; 0 or -EINVAL (with a message). */
static int
synth_num(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0 ||
	    v > max) {
		fprintf(stderr, "cpmodel synth: --%s '%s': expected an integer "
		    "in 0..%" PRIu64 "\n", opt, s, max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int
synth_float(const char *opt, const char *s, float *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (s[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v) ||
	    v <= 0 || v > 1e30) {
		fprintf(stderr, "cpmodel synth: --%s '%s': expected a positive "
		    "number\n", opt, s);
		return -EINVAL;
	}
	*out = (float)v;
	return 0;
}

enum {
	OPT_LAYERS = 256, OPT_EMBD, OPT_HEADS, OPT_KV_HEADS, OPT_FF, OPT_VOCAB,
	OPT_CTX, OPT_ROPE, OPT_EPS, OPT_TIED, OPT_TYPE, OPT_VFROM, OPT_SEED,
	OPT_STD, OPT_NAME, OPT_ARCH, OPT_ROPE_FREQS,
};

static int
synth_parse(int argc, char **argv, struct synth_opts *o)
{
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "layers", required_argument, NULL, OPT_LAYERS },
		{ "embd", required_argument, NULL, OPT_EMBD },
		{ "heads", required_argument, NULL, OPT_HEADS },
		{ "kv-heads", required_argument, NULL, OPT_KV_HEADS },
		{ "ff", required_argument, NULL, OPT_FF },
		{ "vocab", required_argument, NULL, OPT_VOCAB },
		{ "ctx", required_argument, NULL, OPT_CTX },
		{ "rope-base", required_argument, NULL, OPT_ROPE },
		{ "rms-eps", required_argument, NULL, OPT_EPS },
		{ "tied", no_argument, NULL, OPT_TIED },
		{ "type", required_argument, NULL, OPT_TYPE },
		{ "vocab-from", required_argument, NULL, OPT_VFROM },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "std", required_argument, NULL, OPT_STD },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "arch", required_argument, NULL, OPT_ARCH },
		{ "rope-freqs", no_argument, NULL, OPT_ROPE_FREQS },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t *dims[] = { &o->layers, &o->embd, &o->heads, &o->kv_heads,
	    &o->ff, &o->vocab, &o->ctx };
	uint64_t v;
	int c;
	size_t i;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o->out = optarg;
			break;
		case OPT_LAYERS: case OPT_EMBD: case OPT_HEADS:
		case OPT_KV_HEADS: case OPT_FF: case OPT_VOCAB: case OPT_CTX:
			if (synth_num(longopts[c - OPT_LAYERS + 1].name, optarg,
			    SYNTH_MAX_DIM, &v) < 0)
				return -EINVAL;
			*dims[c - OPT_LAYERS] = (uint32_t)v;
			break;
		case OPT_ROPE:
			if (synth_float("rope-base", optarg, &o->rope_base) < 0)
				return -EINVAL;
			break;
		case OPT_EPS:
			if (synth_float("rms-eps", optarg, &o->rms_eps) < 0)
				return -EINVAL;
			break;
		case OPT_STD:
			if (synth_float("std", optarg, &o->std) < 0)
				return -EINVAL;
			break;
		case OPT_TIED:
			o->tied = true;
			break;
		case OPT_TYPE:
			for (i = 0; i < sizeof(synth_types) /
			    sizeof(synth_types[0]); i++)
				if (strcasecmp(optarg, synth_types[i].name) == 0)
					break;
			if (i == sizeof(synth_types) / sizeof(synth_types[0])) {
				fprintf(stderr, "cpmodel synth: --type '%s': "
				    "expected f32, f16, bf16, q8_0, q4_0, q4_1, "
				    "q5_0, q5_1, q2_k, q3_k, q4_k, q5_k or q6_k\n",
				    optarg);
				return -EINVAL;
			}
			o->type = synth_types[i].type;
			break;
		case OPT_VFROM:
			o->vocab_from = optarg;
			break;
		case OPT_SEED:
			if (synth_num("seed", optarg, UINT64_MAX, &o->seed) < 0)
				return -EINVAL;
			break;
		case OPT_NAME:
			o->name = optarg;
			break;
		case OPT_ARCH:
			if (strcmp(optarg, "llama") != 0 &&
			    strcmp(optarg, "qwen2") != 0) {
				fprintf(stderr, "cpmodel synth: --arch '%s': "
				    "expected llama or qwen2\n", optarg);
				return -EINVAL;
			}
			o->arch = optarg;
			break;
		case OPT_ROPE_FREQS:
			o->rope_freqs = true;
			break;
		default:
			fprintf(stderr, "cpmodel synth: unknown or incomplete "
			    "option '%s'\n", argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "cpmodel synth: unexpected argument '%s'\n",
		    argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* Shape rules; a message and -EINVAL on the first one broken. */
static int
synth_check(const struct synth_opts *o)
{
	const struct ttype_info *ti = ttype_info(o->type);
	static const char *const names[] = { "layers", "embd", "heads",
	    "kv-heads", "ff", "ctx" };
	const uint32_t vals[] = { o->layers, o->embd, o->heads, o->kv_heads,
	    o->ff, o->ctx };

	if (o->out == NULL) {
		fputs("cpmodel synth: -o FILE is required\n", stderr);
		return -EINVAL;
	}
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		if (vals[i] == 0) {
			fprintf(stderr, "cpmodel synth: --%s is required and "
			    "must be at least 1\n", names[i]);
			return -EINVAL;
		}
	}
	if (o->vocab_from == NULL && o->vocab < SYNTH_N_FIXED + 1) {
		fprintf(stderr, "cpmodel synth: --vocab %" PRIu32 ": the built-in "
		    "tokenizer needs at least %d tokens (or use --vocab-from)\n",
		    o->vocab, SYNTH_N_FIXED + 1);
		return -EINVAL;
	}
	if (o->embd % o->heads != 0 || (o->embd / o->heads) % 2 != 0) {
		fprintf(stderr, "cpmodel synth: --embd %" PRIu32 " must be "
		    "--heads %" PRIu32 " times an even head size\n", o->embd,
		    o->heads);
		return -EINVAL;
	}
	if (o->kv_heads > o->heads || o->heads % o->kv_heads != 0) {
		fprintf(stderr, "cpmodel synth: --kv-heads %" PRIu32 " must "
		    "divide --heads %" PRIu32 "\n", o->kv_heads, o->heads);
		return -EINVAL;
	}
	if (o->embd % ti->block != 0 || o->ff % ti->block != 0) {
		fprintf(stderr, "cpmodel synth: --type '%s': --embd %" PRIu32
		    " and --ff %" PRIu32 " must be multiples of %" PRIu32
		    ", the %s block size\n", synth_type_name(o->type), o->embd,
		    o->ff, ti->block, ti->name);
		return -EINVAL;
	}
	return 0;
}

/*
 * Declare every tensor in file order; gens[] (one per tensor) must outlive
 * the write.  Returns the number declared or a negative errno.
 */
/*
 * Llama 3.1's per-pair RoPE divisors for head size hd and base: 1 for
 * wavelengths below original / high, the factor above original / low,
 * and between the two a blend of the scaled and unscaled frequencies.
 */
static void
synth_llama3_freqs(float *out, uint64_t hd, float base)
{
	const double factor = 8, low = 1, high = 4, orig = 8192;

	for (uint64_t i = 0; i < hd / 2; i++) {
		double freq = pow(base, -2.0 * (double)i / (double)hd);
		double wavelen = 2 * M_PI / freq, smooth;

		if (wavelen < orig / high) {
			out[i] = 1.0f;
		} else if (wavelen > orig / low) {
			out[i] = (float)factor;
		} else {
			smooth = (orig / wavelen - low) / (high - low);
			out[i] = (float)(1.0 / ((1 - smooth) / factor +
			    smooth));
		}
	}
}

static int
synth_tensors(struct gguf_writer *w, const struct synth_opts *o,
    struct synth_gen *gens, float *row, float *freqs)
{
	uint64_t hd = o->embd / o->heads, kvd = hd * o->kv_heads;
	bool bias = strcmp(o->arch, "qwen2") == 0;
	struct {
		const char *fmt;
		uint32_t n_dims;
		uint64_t ne0, ne1;
		bool random;	/* a random vector (bias), not ones */
	} per_layer[] = {
		{ "blk.%" PRIu32 ".attn_norm.weight", 1, o->embd, 1, false },
		{ "blk.%" PRIu32 ".attn_q.weight", 2, o->embd, o->embd, false },
		{ "blk.%" PRIu32 ".attn_k.weight", 2, o->embd, kvd, false },
		{ "blk.%" PRIu32 ".attn_v.weight", 2, o->embd, kvd, false },
		{ "blk.%" PRIu32 ".attn_output.weight", 2, o->embd, o->embd,
		    false },
		{ "blk.%" PRIu32 ".ffn_norm.weight", 1, o->embd, 1, false },
		{ "blk.%" PRIu32 ".ffn_gate.weight", 2, o->embd, o->ff, false },
		{ "blk.%" PRIu32 ".ffn_up.weight", 2, o->embd, o->ff, false },
		{ "blk.%" PRIu32 ".ffn_down.weight", 2, o->ff, o->embd, false },
		{ "blk.%" PRIu32 ".attn_q.bias", 1, o->embd, 1, true },
		{ "blk.%" PRIu32 ".attn_k.bias", 1, kvd, 1, true },
		{ "blk.%" PRIu32 ".attn_v.bias", 1, kvd, 1, true },
	};
	const size_t n_per = sizeof(per_layer) / sizeof(per_layer[0]) -
	    (bias ? 0 : 3);
	int ret;

	if (o->rope_freqs) {
		struct synth_gen *g = &gens[2 + (size_t)o->layers * n_per + 1];
		uint64_t ne[2] = { hd / 2, 1 };

		synth_llama3_freqs(freqs, hd, o->rope_base);
		*g = (struct synth_gen){ .type = CP_T_F32, .fixed = freqs,
		    .row = row, .n = (size_t)(hd / 2) };
		if ((ret = gguf_writer_add_tensor_gen(w, "rope_freqs.weight",
		    CP_T_F32, 1, ne, synth_row, g)) < 0) {
			fprintf(stderr, "cpmodel synth: tensor rope_freqs: "
			    "%s\n", strerror(-ret));
			return ret;
		}
	}
	char name[GGUF_MAX_NAME_LEN];
	uint64_t ne[2];
	int n = 0;
	bool random = false;

	for (uint64_t i = 0; i < 2 + (uint64_t)o->layers * n_per +
	    (o->tied ? 0 : 1); i++) {
		struct synth_gen *g = &gens[n];
		uint32_t n_dims;

		if (i == 0) {
			snprintf(name, sizeof(name), "token_embd.weight");
			n_dims = 2;
			ne[0] = o->embd;
			ne[1] = o->vocab;
		} else if (i <= (uint64_t)o->layers * n_per) {
			size_t k = (size_t)((i - 1) % n_per);

			snprintf(name, sizeof(name), per_layer[k].fmt,
			    (uint32_t)((i - 1) / n_per));
			n_dims = per_layer[k].n_dims;
			ne[0] = per_layer[k].ne0;
			ne[1] = per_layer[k].ne1;
			random = per_layer[k].random;
		} else if (i == (uint64_t)o->layers * n_per + 1) {
			snprintf(name, sizeof(name), "output_norm.weight");
			n_dims = 1;
			ne[0] = o->embd;
			ne[1] = 1;
		} else {
			snprintf(name, sizeof(name), "output.weight");
			n_dims = 2;
			ne[0] = o->embd;
			ne[1] = o->vocab;
		}
		rng_init(&g->rng, o->seed, i);
		g->ones = n_dims == 1 && !random;
		g->type = n_dims == 1 ? CP_T_F32 : o->type;
		random = false;
		g->std = o->std;
		g->row = row;
		g->n = (size_t)ne[0];
		if ((ret = gguf_writer_add_tensor_gen(w, name, g->type, n_dims,
		    ne, synth_row, g)) < 0) {
			fprintf(stderr, "cpmodel synth: tensor %s: %s\n", name,
			    strerror(-ret));
			return ret;
		}
		n++;
	}
	return n;
}

/* "<arch>.key" = v. */
static int
synth_key_u32(struct gguf_writer *w, const struct synth_opts *o,
    const char *key, uint32_t v)
{
	char k[96];

	snprintf(k, sizeof(k), "%s.%s", o->arch, key);
	return gguf_writer_set_u32(w, k, v);
}

static int
synth_key_f32(struct gguf_writer *w, const struct synth_opts *o,
    const char *key, float v)
{
	char k[96];

	snprintf(k, sizeof(k), "%s.%s", o->arch, key);
	return gguf_writer_set_f32(w, k, v);
}

static int
synth_keys(struct gguf_writer *w, const struct synth_opts *o,
    uint32_t file_type)
{
	int ret;

	if ((ret = gguf_writer_set_str(w, "general.architecture",
	    o->arch)) < 0 ||
	    (ret = gguf_writer_set_str(w, "general.name", o->name)) < 0 ||
	    (ret = gguf_writer_set_u32(w, "general.file_type", file_type)) < 0 ||
	    (ret = synth_key_u32(w, o, "context_length", o->ctx)) < 0 ||
	    (ret = synth_key_u32(w, o, "embedding_length", o->embd)) < 0 ||
	    (ret = synth_key_u32(w, o, "block_count", o->layers)) < 0 ||
	    (ret = synth_key_u32(w, o, "feed_forward_length", o->ff)) < 0 ||
	    (ret = synth_key_u32(w, o, "attention.head_count",
	    o->heads)) < 0 ||
	    (ret = synth_key_u32(w, o, "attention.head_count_kv",
	    o->kv_heads)) < 0 ||
	    (ret = synth_key_f32(w, o, "rope.freq_base", o->rope_base)) < 0 ||
	    (ret = synth_key_u32(w, o, "rope.dimension_count",
	    o->embd / o->heads)) < 0 ||
	    (ret = synth_key_f32(w, o, "attention.layer_norm_rms_epsilon",
	    o->rms_eps)) < 0)
		return ret;
	if (file_type != 0 && file_type != 1 && file_type != 32 &&
	    (ret = gguf_writer_set_u32(w, "general.quantization_version",
	    2)) < 0)
		return ret;
	return 0;
}

int
cmd_synth(int argc, char **argv)
{
	struct synth_opts o = {
		.name = "synth", .arch = "llama", .rope_base = 10000.0f,
		.rms_eps = 1e-5f,
		.std = 0.02f, .type = CP_T_F32, .seed = 1,
	};
	struct gguf_writer *w = NULL;
	struct synth_gen *gens = NULL;
	struct cp_err e = { 0, "" };
	float *row = NULL, *freqs = NULL;
	uint32_t file_type = 0;
	int ret, rc = 1;

	if (synth_parse(argc, argv, &o) < 0 || synth_check(&o) < 0) {
		synth_usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < sizeof(synth_types) / sizeof(synth_types[0]);
	    i++)
		if (synth_types[i].type == o.type)
			file_type = synth_types[i].file_type;
	if ((w = gguf_writer_new()) == NULL)
		goto nomem;
	/* Key order: general, llama, tokenizer (the vocabulary sets n_vocab). */
	if (synth_keys(w, &o, file_type) < 0)
		goto nomem;
	if (o.vocab_from != NULL) {
		if (synth_vocab_from(w, &o) < 0)
			goto out;
	} else if (synth_vocab(w, &o) < 0) {
		goto nomem;
	}
	if (synth_key_u32(w, &o, "vocab_size", o.vocab) < 0)
		goto nomem;
	if ((gens = calloc(4 + (size_t)o.layers * 12, sizeof(*gens))) == NULL ||
	    (row = malloc((o.ff > o.embd ? o.ff : o.embd) * sizeof(*row))) ==
	    NULL || (freqs = calloc(o.embd / o.heads / 2 + 1,
	    sizeof(*freqs))) == NULL)
		goto nomem;
	if (synth_tensors(w, &o, gens, row, freqs) < 0)
		goto out;
	if ((ret = gguf_writer_write(w, o.out, &e)) < 0) {
		fprintf(stderr, "cpmodel synth: %s\n", e.msg);
		goto out;
	}
	printf("%s: %s, %" PRIu32 " layers, embd %" PRIu32 ", heads %"
	    PRIu32 "/%" PRIu32 ", ff %" PRIu32 ", vocab %" PRIu32 ", %s%s\n",
	    o.out, o.arch, o.layers, o.embd, o.heads, o.kv_heads, o.ff, o.vocab,
	    ttype_name(o.type), o.tied ? ", tied" : "");
	rc = 0;
	goto out;
nomem:
	fputs("cpmodel synth: out of memory\n", stderr);
out:
	free(freqs);
	free(row);
	free(gens);
	gguf_writer_free(w);
	return rc;
}
