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
#define MODEL_TENSORS_PER_LAYER 9

/* Loading state: the file, the model under construction, used tensors. */
struct model_ld {
	struct gguf_file *f;
	const char *path;
	struct model *m;
	char arch[32];
	bool *used;		/* [gguf_n_tensors()] */
	size_t n_names;		/* names stored so far */
	size_t n_norms;		/* norm vectors stored so far */
};

/* Read an integer hyperparameter "<arch>.<key>" into *out. */
static int
model_hp_int(struct model_ld *ld, const char *key, bool required, int def,
    int min, int max, int *out, struct cp_err *e)
{
	char full[128];
	uint32_t v;
	int rc;

	snprintf(full, sizeof(full), "%s.%s", ld->arch, key);
	rc = gguf_get_u32(ld->f, full, &v, e);
	if (rc == -ENOENT && !required) {
		*out = def;
		return 0;
	}
	if (rc == -ENOENT)
		return cp_err_set(e, -EINVAL, "%s: required key '%s' missing",
		    ld->path, full);
	if (rc < 0)
		return rc;
	if (v < (uint32_t)min || v > (uint32_t)max)
		return cp_err_set(e, -EINVAL, "%s: key '%s' = %u, expected "
		    "%d..%d", ld->path, full, v, min, max);
	*out = (int)v;
	return 0;
}

static int
model_hp_float(struct model_ld *ld, const char *key, bool required,
    float def, float min, float max, float *out, struct cp_err *e)
{
	char full[128];
	float v;
	int rc;

	snprintf(full, sizeof(full), "%s.%s", ld->arch, key);
	rc = gguf_get_f32(ld->f, full, &v, e);
	if (rc == -ENOENT && !required) {
		*out = def;
		return 0;
	}
	if (rc == -ENOENT)
		return cp_err_set(e, -EINVAL, "%s: required key '%s' missing",
		    ld->path, full);
	if (rc < 0)
		return rc;
	if (!(v >= min && v <= max))
		return cp_err_set(e, -EINVAL, "%s: key '%s' = %g, expected "
		    "%g..%g", ld->path, full, (double)v, (double)min,
		    (double)max);
	*out = v;
	return 0;
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
	if (!gguf_str_eq(s, "llama"))
		return cp_err_set(e, -ENOTSUP, "%s: unsupported architecture "
		    "'%.*s' (supported: llama)", ld->path,
		    (int)(s.len > 64 ? 64 : s.len), s.ptr);
	snprintf(ld->arch, sizeof(ld->arch), "llama");
	return 0;
}

/* Rope scaling: none, or linear (positions divided by the factor). */
static int
model_rope_scaling(struct model_ld *ld, struct model_hparams *hp,
    struct cp_err *e)
{
	char key[96];
	struct gguf_str s;
	float factor = 1.0f;
	int rc;

	hp->rope_scale = 1.0f;
	snprintf(key, sizeof(key), "%s.rope.scaling.type", ld->arch);
	rc = gguf_get_str(ld->f, key, &s, e);
	if (rc == -ENOENT) {
		/* Older files: "<arch>.rope.scale_linear" = factor. */
		if ((rc = model_hp_float(ld, "rope.scale_linear", false, 1.0f,
		    1e-3f, 1e6f, &factor, e)) < 0)
			return rc;
		hp->rope_scale = 1.0f / factor;
		return 0;
	}
	if (rc < 0)
		return rc;
	if (gguf_str_eq(s, "none"))
		return 0;
	if (!gguf_str_eq(s, "linear"))
		return cp_err_set(e, -ENOTSUP, "%s: key '%s' = '%.*s' "
		    "unsupported (supported: none, linear)", ld->path, key,
		    (int)(s.len > 32 ? 32 : s.len), s.ptr);
	if ((rc = model_hp_float(ld, "rope.scaling.factor", false, 1.0f,
	    1e-3f, 1e6f, &factor, e)) < 0)
		return rc;
	hp->rope_scale = 1.0f / factor;
	return 0;
}

static int
model_hparams_read(struct model_ld *ld, struct cp_err *e)
{
	struct model_hparams *hp = &ld->m->hp;
	int rc, n_expert = 0, kl, vl;

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
	if (hp->n_embd % hp->n_head != 0 &&
	    gguf_find_kv(ld->f, "llama.attention.key_length") == NULL)
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
	    1e-3f, 1e12f, &hp->rope_base, e)) < 0 ||
	    (rc = model_hp_float(ld, "attention.layer_norm_rms_epsilon",
	    true, 0, 0, 1.0f, &hp->rms_eps, e)) < 0)
		return rc;
	return model_rope_scaling(ld, hp, e);
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

/* A vector of n_embd weights, converted to F32 into the model's storage. */
static int
model_norm(struct model_ld *ld, const char *name, const float **out,
    struct cp_err *e)
{
	struct model_tensor t;
	float *dst;
	int rc;

	if ((rc = model_tensor(ld, name, ld->m->hp.n_embd, 0, model_want_embd,
	    "a norm weight", &t, e)) < 0)
		return rc;
	dst = ld->m->norm_buf + ld->n_norms++ * (size_t)ld->m->hp.n_embd;
	if (dequant_row(t.type, t.data, dst, (size_t)t.cols) != 0)
		return cp_err_set(e, -EINVAL, "%s: tensor '%s': cannot convert "
		    "%s to f32", ld->path, name, ttype_name(t.type));
	*out = dst;
	return 0;
}

static int
model_layer_load(struct model_ld *ld, int il, struct cp_err *e)
{
	const struct model_hparams *hp = &ld->m->hp;
	struct model_layer *l = &ld->m->layers[il];
	int qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
	char name[MODEL_NAME_MAX];
	int rc;

#define LNAME(s) (snprintf(name, sizeof(name), "blk.%d." s, il), name)
	if ((rc = model_norm(ld, LNAME("attn_norm.weight"), &l->attn_norm,
	    e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("attn_q.weight"), hp->n_embd, qd,
	    model_want_mm, "a matrix product", &l->wq, e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("attn_k.weight"), hp->n_embd, kvd,
	    model_want_mm, "a matrix product", &l->wk, e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("attn_v.weight"), hp->n_embd, kvd,
	    model_want_mm, "a matrix product", &l->wv, e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("attn_output.weight"), qd,
	    hp->n_embd, model_want_mm, "a matrix product", &l->wo, e)) < 0 ||
	    (rc = model_norm(ld, LNAME("ffn_norm.weight"), &l->ffn_norm,
	    e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("ffn_gate.weight"), hp->n_embd,
	    hp->n_ff, model_want_mm, "a matrix product", &l->w_gate, e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("ffn_up.weight"), hp->n_embd,
	    hp->n_ff, model_want_mm, "a matrix product", &l->w_up, e)) < 0 ||
	    (rc = model_tensor(ld, LNAME("ffn_down.weight"), hp->n_ff,
	    hp->n_embd, model_want_mm, "a matrix product", &l->w_down,
	    e)) < 0)
		return rc;
#undef LNAME
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
	size_t max_names = (size_t)hp->n_layer * MODEL_TENSORS_PER_LAYER + 3;
	int rc, il;

	if ((ld->used = calloc(n_tensors ? n_tensors : 1, 1)) == NULL ||
	    (m->names = calloc(max_names, MODEL_NAME_MAX)) == NULL ||
	    (m->norm_buf = calloc((size_t)(2 * hp->n_layer + 1) *
	    (size_t)hp->n_embd, sizeof(float))) == NULL ||
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
	if ((rc = model_norm(ld, "output_norm.weight", &m->out_norm, e)) < 0)
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
			    "'%.*s' (not part of a llama model)", ld->path,
			    (int)(g->name.len > 96 ? 96 : g->name.len),
			    g->name.ptr);
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
	free(m->norm_buf);
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
	n += (uint64_t)(2 * m->hp.n_layer + 1) * (uint64_t)m->hp.n_embd * 4;
	return n;
}

void
model_rope_row(float *cs, int pos, const struct model_hparams *hp)
{
	float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
	float t = (float)pos, theta;
	int i;

	for (i = 0; i < hp->n_rot / 2; i++) {
		theta = hp->rope_scale * t;
		cs[2 * i] = cosf(theta);
		cs[2 * i + 1] = sinf(theta);
		t *= theta_scale;
	}
}
