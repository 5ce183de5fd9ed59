#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "quant.h"
#include "ttype.h"

#define MODEL_NAME_MAX 64	/* bytes per stored tensor name */
#define MODEL_TENSORS_PER_LAYER 20	/* names a layer may store, at most */
#define MODEL_GLOBAL_TENSORS 8

/*
 * What each family has beyond the plain llama layer, as llama.cpp's graph
 * builders and convert_hf_to_gguf.py lay it out.
 */
#define AF_BIAS_OPT	0x001	/* attn_{q,k,v}.bias may be present */
#define AF_BIAS		0x002	/* attn_{q,k,v}.bias always */
#define AF_QK_NORM	0x004	/* attn_q_norm, attn_k_norm [head_dim] */
#define AF_POST_NORMS	0x008	/* post_attention_norm, post_ffw_norm */
#define AF_FUSED	0x010	/* attn_qkv; ffn_up holds gate then up */
#define AF_GEMMA	0x020	/* embedding x sqrt(n_embd), GeGLU, q scaled */
#define AF_NEOX		0x040	/* RoPE pairs (i, i + n_rot / 2) */
#define AF_ROPE_FREQS	0x080	/* rope_freqs.weight may be present */
#define AF_ROPE_LONG	0x100	/* rope_factors_{long,short} may be */
#define AF_Q_SCALED	0x200	/* q x 1/sqrt(head_dim) after RoPE */

static const struct model_arch_desc {
	const char *name;
	unsigned flags;
} model_archs[ARCH_COUNT] = {
	[ARCH_LLAMA] = { "llama", AF_BIAS_OPT | AF_ROPE_FREQS },
	[ARCH_QWEN2] = { "qwen2", AF_BIAS | AF_NEOX },
	[ARCH_QWEN3] = { "qwen3", AF_QK_NORM | AF_NEOX },
	[ARCH_PHI3] = { "phi3", AF_FUSED | AF_NEOX | AF_ROPE_LONG |
	    AF_Q_SCALED },
	[ARCH_GEMMA] = { "gemma", AF_GEMMA | AF_NEOX | AF_Q_SCALED },
	[ARCH_GEMMA2] = { "gemma2", AF_GEMMA | AF_NEOX | AF_Q_SCALED |
	    AF_POST_NORMS },
	[ARCH_GEMMA3] = { "gemma3", AF_GEMMA | AF_NEOX | AF_Q_SCALED |
	    AF_POST_NORMS | AF_QK_NORM },
};

const char *
model_arch_name(enum model_arch arch)
{
	return (unsigned)arch < ARCH_COUNT ? model_archs[arch].name : "";
}

const char *
model_arch_list(void)
{
	return "llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3";
}

/* Loading state: the file, the model under construction, used tensors. */
struct model_ld {
	struct gguf_file *f;
	const char *path;
	struct model *m;
	char arch[32];
	unsigned flags;		/* AF_* of the family */
	bool *used;		/* [gguf_n_tensors()] */
	size_t n_names;		/* names stored so far */
	size_t max_names;
	size_t max_vec;		/* floats of vec_buf */
};

/*
 * Read hyperparameter "<arch>.<key>" into *iout (a uint32 key) or, when
 * iout is NULL, *fout (a float32 key); def when it is absent and not
 * required.  It must lie in [min, max].
 */
static int
model_hp(struct model_ld *ld, const char *key, bool required, double def,
    double min, double max, int *iout, float *fout, struct cp_err *e)
{
	char full[128];
	uint32_t u = 0;
	float f = 0;
	double v;
	int rc;

	snprintf(full, sizeof(full), "%s.%s", ld->arch, key);
	rc = iout != NULL ? gguf_get_u32(ld->f, full, &u, e) :
	    gguf_get_f32(ld->f, full, &f, e);
	v = iout != NULL ? (double)u : (double)f;
	if (rc == -ENOENT && !required)
		v = def;
	else if (rc == -ENOENT)
		return cp_err_set(e, -EINVAL, "%s: required key '%s' missing",
		    ld->path, full);
	else if (rc < 0)
		return rc;
	else if (!(v >= min && v <= max))
		return cp_err_set(e, -EINVAL, iout != NULL ?
		    "%s: key '%s' = %.0f, expected %.0f..%.0f" :
		    "%s: key '%s' = %g, expected %g..%g", ld->path, full, v,
		    min, max);
	if (iout != NULL)
		*iout = (int)v;
	else
		*fout = (float)v;
	return 0;
}

static int
model_hp_int(struct model_ld *ld, const char *key, bool required, int def,
    int min, int max, int *out, struct cp_err *e)
{
	return model_hp(ld, key, required, def, min, max, out, NULL, e);
}

static int
model_hp_float(struct model_ld *ld, const char *key, bool required,
    float def, float min, float max, float *out, struct cp_err *e)
{
	return model_hp(ld, key, required, def, min, max, NULL, out, e);
}

static int
model_arch(struct model_ld *ld, struct cp_err *e)
{
	struct gguf_str s;
	int rc;

	rc = gguf_get_str(ld->f, "general.architecture", &s, e);
	if (rc == -ENOENT)
		return cp_err_set(e, -EINVAL, "%s: key 'general.architecture' "
		    "missing", ld->path);
	if (rc < 0)
		return rc;
	for (int a = 0; a < ARCH_COUNT; a++) {
		if (gguf_str_eq(s, model_archs[a].name)) {
			ld->m->hp.arch = (enum model_arch)a;
			ld->flags = model_archs[a].flags;
			snprintf(ld->arch, sizeof(ld->arch), "%s",
			    model_archs[a].name);
			return 0;
		}
	}
	return cp_err_set(e, -ENOTSUP, "%s: unsupported architecture "
	    "'%.*s' (supported: %s)", ld->path,
	    (int)(s.len > 64 ? 64 : s.len), s.ptr, model_arch_list());
}

/*
 * The extrapolation window of YaRN: the dimension whose wavelength turns
 * n_rot_turns times over the original context (fractional).
 */
static float
model_yarn_dim(int n_rot, int n_ctx_orig, float turns, float base)
{
	return (float)n_rot * logf((float)n_ctx_orig / (turns * 2.0f *
	    (float)M_PI)) / (2.0f * logf(base));
}

/*
 * Rope scaling of variant 0: none, linear (positions divided by the
 * factor) or yarn; llama3 and longrope files carry their factors as
 * tensors (rope_freqs, rope_factors_*) and need no scaling here.
 */
static int
model_rope_scaling(struct model_ld *ld, struct model_hparams *hp,
    struct cp_err *e)
{
	struct model_rope *r = &hp->rope[0];
	char key[96];
	struct gguf_str s;
	float factor = 1.0f;
	int rc, orig;

	r->scale = 1.0f;
	r->attn_factor = 1.0f;
	if ((rc = model_hp_float(ld, "rope.scaling.attn_factor", false, 1.0f,
	    1e-3f, 1e3f, &r->attn_factor, e)) < 0)
		return rc;
	snprintf(key, sizeof(key), "%s.rope.scaling.type", ld->arch);
	rc = gguf_get_str(ld->f, key, &s, e);
	if (rc == -ENOENT) {
		/* Older files: "<arch>.rope.scale_linear" = factor. */
		if ((rc = model_hp_float(ld, "rope.scale_linear", false, 1.0f,
		    1e-3f, 1e6f, &factor, e)) < 0)
			return rc;
		r->scale = 1.0f / factor;
		goto done;
	}
	if (rc < 0)
		return rc;
	if (gguf_str_eq(s, "none") || gguf_str_eq(s, "llama3") ||
	    gguf_str_eq(s, "longrope"))
		goto done;
	if (!gguf_str_eq(s, "linear") && !gguf_str_eq(s, "yarn"))
		return cp_err_set(e, -ENOTSUP, "%s: key '%s' = '%.*s' "
		    "unsupported (supported: none, linear, yarn, llama3, "
		    "longrope)", ld->path, key, (int)(s.len > 32 ? 32 : s.len),
		    s.ptr);
	if ((rc = model_hp_float(ld, "rope.scaling.factor", false, 1.0f,
	    1e-3f, 1e6f, &factor, e)) < 0)
		return rc;
	r->scale = 1.0f / factor;
	if (gguf_str_eq(s, "yarn")) {
		if ((rc = model_hp_int(ld, "rope.scaling.original_context_"
		    "length", false, hp->n_ctx_train, 1, MODEL_MAX_CTX, &orig,
		    e)) < 0)
			return rc;
		r->ext_factor = 1.0f;
		/* beta_fast 32 and beta_slow 1 turns, the usual defaults */
		r->corr[0] = floorf(model_yarn_dim(hp->n_rot, orig, 32.0f,
		    r->base));
		r->corr[1] = ceilf(model_yarn_dim(hp->n_rot, orig, 1.0f,
		    r->base));
		if (r->corr[0] < 0)
			r->corr[0] = 0;
		if (r->corr[1] > (float)(hp->n_rot - 1))
			r->corr[1] = (float)(hp->n_rot - 1);
	}
done:
	hp->n_rope = 1;
	return 0;
}

/*
 * What the family fixes rather than the file: activation, scalings,
 * soft-capping, the second RoPE variant and each layer's window are set
 * in model_layers_plan() once the layers exist.
 */
static int
model_family(struct model_ld *ld, struct cp_err *e)
{
	struct model_hparams *hp = &ld->m->hp;
	int rc;

	hp->rope_neox = (ld->flags & AF_NEOX) != 0;
	hp->act = (ld->flags & AF_GEMMA) ? ACT_GELU : ACT_SILU;
	hp->embd_scale = (ld->flags & AF_GEMMA) ?
	    sqrtf((float)hp->n_embd) : 1.0f;
	hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim);
	if (ld->flags & AF_Q_SCALED) {
		hp->q_scale = hp->kq_scale;
		hp->kq_scale = 1.0f;
	}
	/* Gemma 2 27B and Gemma 3 27B scale q by n_embd / n_head. */
	if ((hp->arch == ARCH_GEMMA2 && hp->n_layer == 46) ||
	    (hp->arch == ARCH_GEMMA3 && hp->n_layer == 62))
		hp->q_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
	if (hp->arch == ARCH_GEMMA2 &&
	    ((rc = model_hp_float(ld, "attn_logit_softcapping", false, 50.0f,
	    0, 1e6f, &hp->attn_softcap, e)) < 0 ||
	    (rc = model_hp_float(ld, "final_logit_softcapping", false, 30.0f,
	    0, 1e6f, &hp->final_softcap, e)) < 0))
		return rc;
	if (hp->arch == ARCH_GEMMA3 &&
	    (rc = model_hp_float(ld, "final_logit_softcapping", false, 0,
	    0, 1e6f, &hp->final_softcap, e)) < 0)
		return rc;
	if (hp->arch == ARCH_GEMMA3) {
		/* local layers: base 10000, no scaling */
		hp->rope[1] = (struct model_rope){ .base = 10000.0f,
		    .scale = 1.0f, .attn_factor = 1.0f };
		hp->n_rope = 2;
	}
	return 0;
}

/*
 * The attention window: phi3 on every layer (older files without the key
 * get llama.cpp's defaults for the Phi-3 shapes), gemma2 on the even
 * layers, gemma3 on five layers of every six (the sixth is global and
 * uses RoPE variant 0, the local ones variant 1).
 */
static int
model_layers_plan(struct model_ld *ld, struct cp_err *e)
{
	struct model_hparams *hp = &ld->m->hp;
	char key[96];
	int rc, w = 0, il;

	snprintf(key, sizeof(key), "%s.attention.sliding_window", ld->arch);
	if (hp->arch == ARCH_PHI3 && gguf_find_kv(ld->f, key) == NULL) {
		if ((hp->n_layer == 32 || hp->n_layer == 40) &&
		    hp->n_ctx_train == 4096)
			w = 2047;
		else if (hp->n_layer == 32 && hp->n_head_kv == 32 &&
		    hp->n_ctx_train == 131072)
			w = 262144;
		else if (hp->n_layer == 40 && hp->n_ctx_train == 131072)
			w = 131072;
		else
			return cp_err_set(e, -EINVAL, "%s: required key '%s' "
			    "missing", ld->path, key);
	} else if (hp->arch == ARCH_PHI3 || hp->arch == ARCH_GEMMA2 ||
	    hp->arch == ARCH_GEMMA3) {
		if ((rc = model_hp_int(ld, "attention.sliding_window",
		    hp->arch != ARCH_GEMMA2, 4096, 0, MODEL_MAX_CTX, &w,
		    e)) < 0)
			return rc;
	}
	for (il = 0; il < hp->n_layer; il++) {
		struct model_layer *l = &ld->m->layers[il];

		l->window = hp->arch == ARCH_PHI3 ||
		    (hp->arch == ARCH_GEMMA2 && il % 2 == 0) ||
		    (hp->arch == ARCH_GEMMA3 && il % 6 < 5) ? w : 0;
		l->rope = hp->arch == ARCH_GEMMA3 && il % 6 < 5 ? 1 : 0;
	}
	return 0;
}

static int
model_hparams_read(struct model_ld *ld, struct cp_err *e)
{
	struct model_hparams *hp = &ld->m->hp;
	int rc, n_expert = 0, kl, vl;
	char key[96];

	if ((rc = model_hp_int(ld, "context_length", true, 0, 1,
	    MODEL_MAX_CTX, &hp->n_ctx_train, e)) < 0 ||
	    (rc = model_hp_int(ld, "embedding_length", true, 0, 1,
	    MODEL_MAX_DIM, &hp->n_embd, e)) < 0 ||
	    (rc = model_hp_int(ld, "block_count", true, 0, 1,
	    MODEL_MAX_LAYERS, &hp->n_layer, e)) < 0 ||
	    (rc = model_hp_int(ld, "feed_forward_length", true, 0, 1,
	    MODEL_MAX_DIM, &hp->n_ff, e)) < 0 ||
	    (rc = model_hp_int(ld, "attention.head_count", true, 0, 1,
	    MODEL_MAX_HEADS, &hp->n_head, e)) < 0 ||
	    (rc = model_hp_int(ld, "attention.head_count_kv", false,
	    hp->n_head, 1, MODEL_MAX_HEADS, &hp->n_head_kv, e)) < 0 ||
	    (rc = model_hp_int(ld, "expert_count", false, 0, 0, 1 << 16,
	    &n_expert, e)) < 0)
		return rc;
	if (n_expert > 0)
		return cp_err_set(e, -ENOTSUP, "%s: key '%s.expert_count' = "
		    "%d: mixture of experts unsupported", ld->path, ld->arch,
		    n_expert);
	if (hp->n_head % hp->n_head_kv != 0)
		return cp_err_set(e, -EINVAL, "%s: head_count %d is not a "
		    "multiple of head_count_kv %d", ld->path, hp->n_head,
		    hp->n_head_kv);
	snprintf(key, sizeof(key), "%s.attention.key_length", ld->arch);
	if (hp->n_embd % hp->n_head != 0 && gguf_find_kv(ld->f, key) == NULL)
		return cp_err_set(e, -EINVAL, "%s: embedding_length %d is not "
		    "a multiple of head_count %d", ld->path, hp->n_embd,
		    hp->n_head);
	if ((rc = model_hp_int(ld, "attention.key_length", false,
	    hp->n_embd / hp->n_head, 2, MODEL_MAX_DIM, &kl, e)) < 0 ||
	    (rc = model_hp_int(ld, "attention.value_length", false, kl, 2,
	    MODEL_MAX_DIM, &vl, e)) < 0)
		return rc;
	if (kl != vl)
		return cp_err_set(e, -ENOTSUP, "%s: key_length %d != "
		    "value_length %d unsupported", ld->path, kl, vl);
	hp->head_dim = kl;
	if ((long)hp->n_head * hp->head_dim > MODEL_MAX_DIM)
		return cp_err_set(e, -EINVAL, "%s: head_count %d x head size "
		    "%d exceeds %d", ld->path, hp->n_head, hp->head_dim,
		    MODEL_MAX_DIM);
	if ((rc = model_hp_int(ld, "rope.dimension_count", false,
	    hp->head_dim, 0, hp->head_dim, &hp->n_rot, e)) < 0)
		return rc;
	if (hp->n_rot % 2 != 0)
		return cp_err_set(e, -EINVAL, "%s: key "
		    "'%s.rope.dimension_count' = %d must be even", ld->path,
		    ld->arch, hp->n_rot);
	if ((rc = model_hp_float(ld, "rope.freq_base", false, 10000.0f,
	    1e-3f, 1e12f, &hp->rope[0].base, e)) < 0 ||
	    (rc = model_hp_float(ld, "attention.layer_norm_rms_epsilon",
	    true, 0, 0, 1.0f, &hp->rms_eps, e)) < 0 ||
	    (rc = model_rope_scaling(ld, hp, e)) < 0)
		return rc;
	return model_family(ld, e);
}

/*
 * Find tensor name with ne = {cols, rows} (rows 0 for a vector) and a type
 * that want() accepts; fill *t.  Returns -ENOENT (message set) when absent.
 */
static int
model_tensor(struct model_ld *ld, const char *name, int cols, int rows,
    bool (*want)(uint32_t), const char *what, struct model_tensor *t,
    struct cp_err *e)
{
	const struct gguf_tensor *g;
	uint64_t rb;
	char *slot;
	int d;

	if ((g = gguf_find_tensor(ld->f, name)) == NULL)
		return cp_err_set(e, -ENOENT, "%s: tensor '%s' missing",
		    ld->path, name);
	ld->used[g - gguf_tensor_at(ld->f, 0)] = true;
	for (d = rows ? 2 : 1; d < GGUF_MAX_DIMS; d++)
		if (g->ne[d] != 1)
			goto shape;
	if (g->ne[0] != (uint64_t)cols || (rows && g->ne[1] != (uint64_t)rows))
		goto shape;
	if (!want(g->type))
		return cp_err_set(e, -ENOTSUP, "%s: tensor '%s' has type %s, "
		    "unsupported for %s", ld->path, name, ttype_name(g->type),
		    what);
	if (ttype_nbytes(g->type, (uint64_t)cols, &rb) != 0)
		return cp_err_set(e, -EINVAL, "%s: tensor '%s': row of %d is "
		    "not a whole number of %s blocks", ld->path, name, cols,
		    ttype_name(g->type));
	if (rb * (uint64_t)(rows ? rows : 1) != g->nbytes)
		return cp_err_set(e, -EINVAL, "%s: tensor '%s': %llu bytes, "
		    "expected %llu", ld->path, name,
		    (unsigned long long)g->nbytes,
		    (unsigned long long)(rb * (uint64_t)(rows ? rows : 1)));
	slot = ld->m->names + ld->n_names++ * MODEL_NAME_MAX;
	snprintf(slot, MODEL_NAME_MAX, "%s", name);
	t->name = slot;
	t->type = g->type;
	t->rows = rows ? rows : 1;
	t->cols = cols;
	t->row_bytes = (size_t)rb;
	t->data = g->data;
	t->packed = false;
	return 0;
shape:
	if (rows)
		return cp_err_set(e, -EINVAL, "%s: tensor '%s' has shape "
		    "[%llu, %llu, %llu, %llu], expected [%d, %d]", ld->path,
		    name, (unsigned long long)g->ne[0],
		    (unsigned long long)g->ne[1],
		    (unsigned long long)g->ne[2],
		    (unsigned long long)g->ne[3], cols, rows);
	return cp_err_set(e, -EINVAL, "%s: tensor '%s' has shape "
	    "[%llu, %llu, %llu, %llu], expected [%d]", ld->path, name,
	    (unsigned long long)g->ne[0], (unsigned long long)g->ne[1],
	    (unsigned long long)g->ne[2], (unsigned long long)g->ne[3], cols);
}

static bool
model_want_mm(uint32_t t)
{
	return mm_supported(t);
}

static bool
model_want_embd(uint32_t t)
{
	return quant_can_dequant(t);
}

/*
 * A vector of n weights, converted to F32 into the model's storage; with
 * optional, NULL when the file has no such tensor.
 */
static int
model_vec(struct model_ld *ld, const char *name, int n, bool optional,
    const float **out, struct cp_err *e)
{
	struct model_tensor t;
	float *dst;
	int rc;

	*out = NULL;
	if (optional && gguf_find_tensor(ld->f, name) == NULL)
		return 0;
	if ((rc = model_tensor(ld, name, n, 0, model_want_embd, "a vector",
	    &t, e)) < 0)
		return rc;
	if (ld->m->n_vec_floats + (size_t)n > ld->max_vec)
		return cp_err_set(e, -EINVAL, "%s: tensor '%s': more vectors "
		    "than a %s model has", ld->path, name, ld->arch);
	dst = ld->m->vec_buf + ld->m->n_vec_floats;
	ld->m->n_vec_floats += (size_t)n;
	if (dequant_row(t.type, t.data, dst, (size_t)t.cols) != 0)
		return cp_err_set(e, -EINVAL, "%s: tensor '%s': cannot convert "
		    "%s to f32", ld->path, name, ttype_name(t.type));
	*out = dst;
	return 0;
}

static int
model_norm(struct model_ld *ld, const char *name, const float **out,
    struct cp_err *e)
{
	return model_vec(ld, name, ld->m->hp.n_embd, false, out, e);
}

static int
model_mat(struct model_ld *ld, const char *name, int cols, int rows,
    struct model_tensor *t, struct cp_err *e)
{
	return model_tensor(ld, name, cols, rows, model_want_mm,
	    "a matrix product", t, e);
}

/* Rows [r0, r0 + n) of t as a tensor of their own (a fused tensor's part). */
static struct model_tensor
model_rows(const struct model_tensor *t, int r0, int n)
{
	struct model_tensor v = *t;

	v.rows = n;
	v.data = (const unsigned char *)t->data + (size_t)r0 * t->row_bytes;
	return v;
}

static int
model_layer_load(struct model_ld *ld, int il, struct cp_err *e)
{
	const struct model_hparams *hp = &ld->m->hp;
	struct model_layer *l = &ld->m->layers[il];
	int qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
	int ne = hp->n_embd, hd = hp->head_dim;
	bool bias_opt = !(ld->flags & AF_BIAS);
	struct model_tensor fused;
	char name[MODEL_NAME_MAX];
	int rc;

#define LNAME(s) (snprintf(name, sizeof(name), "blk.%d." s, il), name)
	if ((rc = model_norm(ld, LNAME("attn_norm.weight"), &l->attn_norm,
	    e)) < 0)
		return rc;
	if (ld->flags & AF_FUSED) {
		if ((rc = model_mat(ld, LNAME("attn_qkv.weight"), ne,
		    qd + 2 * kvd, &fused, e)) < 0)
			return rc;
		l->wq = model_rows(&fused, 0, qd);
		l->wk = model_rows(&fused, qd, kvd);
		l->wv = model_rows(&fused, qd + kvd, kvd);
	} else if ((rc = model_mat(ld, LNAME("attn_q.weight"), ne, qd, &l->wq,
	    e)) < 0 ||
	    (rc = model_mat(ld, LNAME("attn_k.weight"), ne, kvd, &l->wk,
	    e)) < 0 ||
	    (rc = model_mat(ld, LNAME("attn_v.weight"), ne, kvd, &l->wv,
	    e)) < 0)
		return rc;
	if ((ld->flags & (AF_BIAS | AF_BIAS_OPT)) &&
	    ((rc = model_vec(ld, LNAME("attn_q.bias"), qd, bias_opt, &l->bq,
	    e)) < 0 ||
	    (rc = model_vec(ld, LNAME("attn_k.bias"), kvd, bias_opt, &l->bk,
	    e)) < 0 ||
	    (rc = model_vec(ld, LNAME("attn_v.bias"), kvd, bias_opt, &l->bv,
	    e)) < 0))
		return rc;
	if ((ld->flags & AF_QK_NORM) &&
	    ((rc = model_vec(ld, LNAME("attn_q_norm.weight"), hd, false,
	    &l->q_norm, e)) < 0 ||
	    (rc = model_vec(ld, LNAME("attn_k_norm.weight"), hd, false,
	    &l->k_norm, e)) < 0))
		return rc;
	if ((rc = model_mat(ld, LNAME("attn_output.weight"), qd, ne, &l->wo,
	    e)) < 0 ||
	    (rc = model_norm(ld, LNAME("ffn_norm.weight"), &l->ffn_norm,
	    e)) < 0)
		return rc;
	if (ld->flags & AF_FUSED) {
		if ((rc = model_mat(ld, LNAME("ffn_up.weight"), ne,
		    2 * hp->n_ff, &fused, e)) < 0)
			return rc;
		l->w_gate = model_rows(&fused, 0, hp->n_ff);
		l->w_up = model_rows(&fused, hp->n_ff, hp->n_ff);
	} else if ((rc = model_mat(ld, LNAME("ffn_gate.weight"), ne, hp->n_ff,
	    &l->w_gate, e)) < 0 ||
	    (rc = model_mat(ld, LNAME("ffn_up.weight"), ne, hp->n_ff,
	    &l->w_up, e)) < 0)
		return rc;
	if ((rc = model_mat(ld, LNAME("ffn_down.weight"), hp->n_ff, ne,
	    &l->w_down, e)) < 0)
		return rc;
	if ((ld->flags & AF_POST_NORMS) &&
	    ((rc = model_norm(ld, LNAME("post_attention_norm.weight"),
	    &l->post_attn_norm, e)) < 0 ||
	    (rc = model_norm(ld, LNAME("post_ffw_norm.weight"),
	    &l->post_ffn_norm, e)) < 0))
		return rc;
#undef LNAME
	return 0;
}

/*
 * Per-dimension RoPE divisors: llama's rope_freqs.weight (Llama 3.1+),
 * phi3's rope_factors_long / _short (LongRoPE: the long ones when the
 * context used exceeds the original one, which the forward pass decides;
 * variant 0 starts with the short ones).
 */
static int
model_rope_freqs(struct model_ld *ld, struct cp_err *e)
{
	struct model *m = ld->m;
	struct model_hparams *hp = &m->hp;
	int rc, n = hp->n_rot / 2;

	if (n < 1)
		return 0;
	if ((ld->flags & AF_ROPE_FREQS) &&
	    (rc = model_vec(ld, "rope_freqs.weight", n, true,
	    &hp->rope[0].freqs, e)) < 0)
		return rc;
	if ((ld->flags & AF_ROPE_LONG) &&
	    ((rc = model_vec(ld, "rope_factors_long.weight", n, true,
	    &m->rope_long, e)) < 0 ||
	    (rc = model_vec(ld, "rope_factors_short.weight", n, true,
	    &m->rope_short, e)) < 0))
		return rc;
	if ((m->rope_long == NULL) != (m->rope_short == NULL))
		return cp_err_set(e, -EINVAL, "%s: tensor 'rope_factors_%s."
		    "weight' missing (the file has its pair)", ld->path,
		    m->rope_long == NULL ? "long" : "short");
	if (m->rope_short != NULL) {
		hp->rope[0].freqs = m->rope_short;
		if ((rc = model_hp_int(ld, "rope.scaling.original_context_"
		    "length", true, 0, 1, MODEL_MAX_CTX, &m->n_ctx_orig,
		    e)) < 0)
			return rc;
	}
	return 0;
}

/* n_vocab from token_embd, cross-checked with the metadata that states it. */
static int
model_vocab(struct model_ld *ld, struct cp_err *e)
{
	struct model_hparams *hp = &ld->m->hp;
	const struct gguf_tensor *g;
	const struct gguf_array *a;
	int rc, nv;

	if ((g = gguf_find_tensor(ld->f, "token_embd.weight")) == NULL)
		return cp_err_set(e, -ENOENT, "%s: tensor 'token_embd.weight' "
		    "missing", ld->path);
	if (g->ne[1] < 1 || g->ne[1] > MODEL_MAX_VOCAB)
		return cp_err_set(e, -EINVAL, "%s: tensor 'token_embd.weight' "
		    "has %llu rows, expected 1..%d", ld->path,
		    (unsigned long long)g->ne[1], MODEL_MAX_VOCAB);
	hp->n_vocab = (int)g->ne[1];
	if ((rc = model_hp_int(ld, "vocab_size", false, hp->n_vocab, 1,
	    MODEL_MAX_VOCAB, &nv, e)) < 0)
		return rc;
	if (nv != hp->n_vocab)
		return cp_err_set(e, -EINVAL, "%s: key '%s.vocab_size' = %d "
		    "but tensor 'token_embd.weight' has %d rows", ld->path,
		    ld->arch, nv, hp->n_vocab);
	rc = gguf_get_arr(ld->f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &a,
	    e);
	if (rc == 0 && a->n != (uint64_t)hp->n_vocab)
		return cp_err_set(e, -EINVAL, "%s: key 'tokenizer.ggml.tokens' "
		    "has %llu tokens but tensor 'token_embd.weight' has %d "
		    "rows", ld->path, (unsigned long long)a->n, hp->n_vocab);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	return 0;
}

static int
model_build(struct model_ld *ld, struct cp_err *e)
{
	struct model *m = ld->m;
	const struct model_hparams *hp = &m->hp;
	size_t n_tensors = gguf_n_tensors(ld->f), i;
	size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim;
	size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
	int rc, il;

	/* a layer's vectors at most: 4 norms, 3 biases, 2 head norms */
	ld->max_vec = (size_t)hp->n_layer * (4 * (size_t)hp->n_embd + qd +
	    2 * kvd + 2 * (size_t)hp->head_dim) + (size_t)hp->n_embd +
	    3 * (size_t)(hp->n_rot / 2);
	ld->max_names = (size_t)hp->n_layer * MODEL_TENSORS_PER_LAYER +
	    MODEL_GLOBAL_TENSORS;
	if ((ld->used = calloc(n_tensors ? n_tensors : 1, 1)) == NULL ||
	    (m->names = calloc(ld->max_names, MODEL_NAME_MAX)) == NULL ||
	    (m->vec_buf = calloc(ld->max_vec, sizeof(float))) == NULL ||
	    (m->layers = calloc((size_t)hp->n_layer,
	    sizeof(*m->layers))) == NULL)
		return cp_err_set(e, -ENOMEM, "%s: out of memory", ld->path);
	if ((rc = model_tensor(ld, "token_embd.weight", hp->n_embd,
	    hp->n_vocab, model_want_embd, "the token embedding", &m->tok_embd,
	    e)) < 0)
		return rc;
	for (il = 0; il < hp->n_layer; il++)
		if ((rc = model_layer_load(ld, il, e)) < 0)
			return rc;
	if ((rc = model_norm(ld, "output_norm.weight", &m->out_norm, e)) < 0 ||
	    (rc = model_rope_freqs(ld, e)) < 0 ||
	    (rc = model_layers_plan(ld, e)) < 0)
		return rc;
	if (gguf_find_tensor(ld->f, "output.weight") != NULL) {
		if ((rc = model_tensor(ld, "output.weight", hp->n_embd,
		    hp->n_vocab, model_want_mm, "a matrix product", &m->output,
		    e)) < 0)
			return rc;
	} else {
		if (!mm_supported(m->tok_embd.type))
			return cp_err_set(e, -ENOTSUP, "%s: tensor "
			    "'token_embd.weight' (tied output) has type %s, "
			    "unsupported for a matrix product", ld->path,
			    ttype_name(m->tok_embd.type));
		m->output = m->tok_embd;
		m->tied = true;
	}
	for (i = 0; i < n_tensors; i++) {
		const struct gguf_tensor *g = gguf_tensor_at(ld->f, i);

		if (!ld->used[i])
			return cp_err_set(e, -ENOTSUP, "%s: unexpected tensor "
			    "'%.*s' (not part of a %s model)", ld->path,
			    (int)(g->name.len > 96 ? 96 : g->name.len),
			    g->name.ptr, ld->arch);
	}
	return 0;
}

int
model_from_gguf(struct gguf_file *f, struct model **out, struct cp_err *e)
{
	struct model_ld ld = { 0 };
	int rc;

	*out = NULL;
	ld.f = f;
	ld.path = gguf_path(f);
	if ((ld.m = calloc(1, sizeof(*ld.m))) == NULL)
		return cp_err_set(e, -ENOMEM, "%s: out of memory", ld.path);
	ld.m->gf = f;
	if ((rc = model_arch(&ld, e)) < 0 ||
	    (rc = model_hparams_read(&ld, e)) < 0 ||
	    (rc = model_vocab(&ld, e)) < 0 ||
	    (rc = model_build(&ld, e)) < 0)
		goto err;
	free(ld.used);
	*out = ld.m;
	return 0;
err:
	free(ld.used);
	model_free(ld.m);
	return rc;
}

int
model_load(const char *path, struct model **out, struct cp_err *e)
{
	struct gguf_file *f;
	int rc;

	*out = NULL;
	if ((rc = gguf_open(path, &f, e)) < 0)
		return rc;
	if ((rc = model_from_gguf(f, out, e)) < 0) {
		gguf_close(f);
		return rc;
	}
	(*out)->owns_gf = true;
	return 0;
}

void
model_free(struct model *m)
{
	if (m == NULL)
		return;
	if (m->owns_gf)
		gguf_close(m->gf);
	free(m->layers);
	free(m->vec_buf);
	free(m->names);
	free(m);
}

static uint64_t
model_tensor_bytes(const struct model_tensor *t)
{
	return (uint64_t)t->rows * t->row_bytes;
}

uint64_t
model_weight_bytes(const struct model *m)
{
	uint64_t n = model_tensor_bytes(&m->tok_embd);
	int il;

	if (!m->tied)
		n += model_tensor_bytes(&m->output);
	for (il = 0; il < m->hp.n_layer; il++) {
		const struct model_layer *l = &m->layers[il];

		n += model_tensor_bytes(&l->wq) + model_tensor_bytes(&l->wk) +
		    model_tensor_bytes(&l->wv) + model_tensor_bytes(&l->wo) +
		    model_tensor_bytes(&l->w_gate) +
		    model_tensor_bytes(&l->w_up) +
		    model_tensor_bytes(&l->w_down);
	}
	return n + (uint64_t)m->n_vec_floats * sizeof(float);
}

void
model_rope_cs(float *cs, int pos, const struct model_rope *r, int n_rot)
{
	float theta_scale = powf(r->base, -2.0f / (float)n_rot);
	float t = (float)pos, te, theta, mscale, ramp, y;
	int i;

	for (i = 0; i < n_rot / 2; i++) {
		te = r->freqs != NULL ? t / r->freqs[i] : t;
		theta = r->scale * te;
		mscale = r->attn_factor;
		if (r->ext_factor != 0.0f) {
			y = ((float)i - r->corr[0]) / fmaxf(0.001f,
			    r->corr[1] - r->corr[0]);
			ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) *
			    r->ext_factor;
			theta = theta * (1.0f - ramp) + te * ramp;
			mscale *= 1.0f + 0.1f * logf(1.0f / r->scale);
		}
		cs[2 * i] = cosf(theta) * mscale;
		cs[2 * i + 1] = sinf(theta) * mscale;
		t *= theta_scale;
	}
}

struct model_rope
model_rope_for_ctx(const struct model *m, int r, int n_ctx)
{
	struct model_rope v = m->hp.rope[r];

	if (r == 0 && m->rope_long != NULL && n_ctx > m->n_ctx_orig)
		v.freqs = m->rope_long;
	return v;
}
