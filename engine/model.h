/*
 * model.h - a decoder-only transformer of one of the families in
 * model_arch: hyperparameters from GGUF metadata and its weight tensors,
 * read in place from the mapped file.
 *
 * What differs between the families is data, filled by the loader: which
 * optional tensors a layer has (biases, per-head Q/K norms, post norms),
 * the activation, the scalings, the RoPE pairing and variants, and the
 * attention window of each layer.  One forward pass per backend reads it.
 * Fused tensors (phi3's attn_qkv and ffn_up) are split at load into views
 * of their rows, so a layer always has wq, wk, wv, w_gate and w_up.
 *
 * model_load() checks everything a forward pass relies on: the
 * architecture, every hyperparameter's presence and range, every tensor's
 * presence, type and shape against the hyperparameters, and that the file
 * holds no tensor the architecture does not use.  Errors name the key or
 * tensor and what was expected.  After a successful load a backend can run
 * the model without further checks.
 *
 * Shapes below are written [rows, row length]: a GGUF tensor with
 * ne = {k, n} is n rows of k elements, row-major, so weight W of shape
 * [n, k] maps k inputs to n outputs (y = W x, one dot product per row).
 */
#ifndef CP_MODEL_H
#define CP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"

/* Limits that keep every size product well inside int and size_t. */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_DIM (1 << 17)		/* n_embd, n_ff, q and kv widths */
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_VOCAB (1 << 22)
#define MODEL_MAX_CTX (1 << 24)

/* The families model_load() knows, as general.architecture names them. */
enum model_arch {
	ARCH_LLAMA,
	ARCH_QWEN2,
	ARCH_QWEN3,
	ARCH_PHI3,
	ARCH_GEMMA,
	ARCH_GEMMA2,
	ARCH_GEMMA3,
	ARCH_COUNT
};

enum model_act {
	ACT_SILU,		/* SwiGLU: silu(gate) * up */
	ACT_GELU,		/* GeGLU: gelu(gate) * up, tanh GELU through
				   F16 as the reference rounds it */
};

/*
 * One RoPE variant: pair i turns by theta_i = scale * pos *
 * base^(-2i/n_rot) / freqs[i]; with YaRN (ext_factor > 0) theta_i is mixed
 * with the unscaled angle over the pairs between corr[0] and corr[1] and
 * the magnitude grows by 1 + 0.1 ln(1 / scale); cos and sin are then
 * multiplied by attn_factor.
 */
struct model_rope {
	float base;
	float scale;		/* position multiplier: 1 / linear factor */
	const float *freqs;	/* [n_rot / 2] divisors, or NULL */
	float ext_factor;	/* YaRN: 1, else 0 */
	float attn_factor;	/* magnitude of cos and sin, usually 1 */
	float corr[2];		/* YaRN's first and last mixed dimension */
};

#define MODEL_ROPES 2		/* variants: global, and local layers' */

struct model_hparams {
	enum model_arch arch;
	int n_vocab;		/* rows of token_embd and output */
	int n_ctx_train;	/* llama.context_length */
	int n_embd;		/* width of the residual stream */
	int n_layer;
	int n_head;		/* query heads */
	int n_head_kv;		/* key/value heads; n_head % n_head_kv == 0 */
	int head_dim;		/* elements per head (q, k and v) */
	int n_ff;		/* feed-forward hidden width */
	int n_rot;		/* leading dims of a head RoPE rotates, even */
	float rms_eps;		/* <arch>.attention.layer_norm_rms_epsilon */
	bool rope_neox;		/* rotate (x[i], x[i + n_rot/2]), not
				   adjacent pairs (x[2i], x[2i+1]) */
	int n_rope;		/* variants in rope[], 1..MODEL_ROPES */
	struct model_rope rope[MODEL_ROPES];	/* [0]: <arch>.rope.* keys */
	enum model_act act;
	float embd_scale;	/* the embedding row is multiplied by it */
	float q_scale;		/* q is multiplied by it before attention
				   (0: not; the scores are scaled instead) */
	float kq_scale;		/* attention's score scale */
	float attn_softcap;	/* s = cap * tanh(s / cap), 0: none */
	float final_softcap;	/* the same on the logits, 0: none */
};

/* One weight tensor, in place in the mapping. */
struct model_tensor {
	const char *name;	/* NUL-terminated copy owned by the model */
	uint32_t type;		/* enum cp_ttype */
	int rows;		/* ne[1] (1 for vectors) */
	int cols;		/* ne[0]: elements per row */
	size_t row_bytes;	/* bytes between rows */
	const void *data;	/* rows * row_bytes bytes in the mapping */
	bool packed;		/* data is a repacked copy (repack.h, made by
				   packed.h for the CPU kernels), not GGUF
				   rows; the loader's tensors never are */
};

/*
 * A layer.  Vectors are F32 copies the model owns; the optional ones are
 * NULL where the family or the file has none.
 */
struct model_layer {
	const float *attn_norm;		/* [n_embd] */
	struct model_tensor wq;		/* [n_head * head_dim, n_embd] */
	struct model_tensor wk;		/* [n_head_kv * head_dim, n_embd] */
	struct model_tensor wv;		/* [n_head_kv * head_dim, n_embd] */
	const float *bq, *bk, *bv;	/* biases of q, k and v, or NULL */
	const float *q_norm, *k_norm;	/* [head_dim] per-head RMSNorm of q
					   and k before RoPE, or NULL */
	struct model_tensor wo;		/* [n_embd, n_head * head_dim] */
	const float *post_attn_norm;	/* [n_embd] on wo's output, or NULL */
	const float *ffn_norm;		/* [n_embd] */
	struct model_tensor w_gate;	/* [n_ff, n_embd] */
	struct model_tensor w_up;	/* [n_ff, n_embd] */
	struct model_tensor w_down;	/* [n_embd, n_ff] */
	const float *post_ffn_norm;	/* [n_embd] on w_down's, or NULL */
	int window;			/* query q sees key p iff q - p <
					   window; 0: every p <= q */
	int rope;			/* variant in hp.rope[] */
};

struct model {
	struct model_hparams hp;
	struct model_tensor tok_embd;	/* [n_vocab, n_embd], read by row */
	const float *out_norm;		/* [n_embd] */
	struct model_tensor output;	/* [n_vocab, n_embd], or tok_embd */
	bool tied;			/* the file has no output.weight */
	struct model_layer *layers;	/* [n_layer] */
	const float *rope_long;		/* phi3 LongRoPE divisors [n_rot/2]
					   past n_ctx_orig, or NULL; */
	const float *rope_short;	/* and up to it (hp.rope[0].freqs) */
	int n_ctx_orig;

	struct gguf_file *gf;		/* the file the tensors point into */
	bool owns_gf;			/* model_free() closes gf */
	float *vec_buf;			/* storage of all F32 vectors */
	size_t n_vec_floats;		/* floats of vec_buf in use */
	char *names;			/* storage of the tensor names */
};

/*
 * Open the GGUF file at path and load it as a model.  Returns 0 and *out
 * (release with model_free(), which also unmaps the file), or a negative
 * errno with e naming the file and the key or tensor at fault.
 */
int model_load(const char *path, struct model **out, struct cp_err *e);

/*
 * Load the model held in an already open file f, which the caller keeps
 * open until model_free() and closes afterwards.  Same checks and errors.
 */
int model_from_gguf(struct gguf_file *f, struct model **out,
    struct cp_err *e);

/* Release the model (and the file model_load() opened); accepts NULL. */
void model_free(struct model *m);

/* The name general.architecture gives the family ("qwen2"...). */
const char *model_arch_name(enum model_arch arch);

/* Every family's name, comma-separated ("llama, qwen2, ..."), static. */
const char *model_arch_list(void);

/*
 * cos and sin of each rotated pair of position pos into cs[0..n_rot) for
 * RoPE variant r: theta_i = pos * scale * base^(-2i / n_rot), the power
 * built by repeated multiplication in float, then divided by freqs[i]
 * where the variant has them (see struct model_rope for YaRN and the
 * magnitude).  The one definition every backend uses, so that they rotate
 * by the same bits.
 */
void model_rope_cs(float *cs, int pos, const struct model_rope *r, int n_rot);

/*
 * Variant r of m as a context of n_ctx positions uses it: phi3's LongRoPE
 * takes its long factors when n_ctx exceeds the original context.
 */
struct model_rope model_rope_for_ctx(const struct model *m, int r,
    int n_ctx);


/* Bytes of all weights the model uses (a tied tok_embd counted once). */
uint64_t model_weight_bytes(const struct model *m);

#endif
