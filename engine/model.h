/*
 * model.h - a llama-family model: hyperparameters from GGUF metadata and
 * its weight tensors, read in place from the mapped file.
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

struct model_hparams {
	int n_vocab;		/* rows of token_embd and output */
	int n_ctx_train;	/* llama.context_length */
	int n_embd;		/* width of the residual stream */
	int n_layer;
	int n_head;		/* query heads */
	int n_head_kv;		/* key/value heads; n_head % n_head_kv == 0 */
	int head_dim;		/* elements per head (q, k and v) */
	int n_ff;		/* feed-forward hidden width */
	int n_rot;		/* leading dims of a head RoPE rotates, even */
	float rope_base;	/* llama.rope.freq_base */
	float rope_scale;	/* position multiplier: 1 / linear factor */
	float rms_eps;		/* llama.attention.layer_norm_rms_epsilon */
};

/* One weight tensor, in place in the mapping. */
struct model_tensor {
	const char *name;	/* NUL-terminated copy owned by the model */
	uint32_t type;		/* enum cp_ttype */
	int rows;		/* ne[1] (1 for vectors) */
	int cols;		/* ne[0]: elements per row */
	size_t row_bytes;	/* bytes between rows */
	const void *data;	/* rows * row_bytes bytes in the mapping */
};

struct model_layer {
	const float *attn_norm;		/* [n_embd], F32 copy the model owns */
	struct model_tensor wq;		/* [n_head * head_dim, n_embd] */
	struct model_tensor wk;		/* [n_head_kv * head_dim, n_embd] */
	struct model_tensor wv;		/* [n_head_kv * head_dim, n_embd] */
	struct model_tensor wo;		/* [n_embd, n_head * head_dim] */
	const float *ffn_norm;		/* [n_embd] */
	struct model_tensor w_gate;	/* [n_ff, n_embd] */
	struct model_tensor w_up;	/* [n_ff, n_embd] */
	struct model_tensor w_down;	/* [n_embd, n_ff] */
};

struct model {
	struct model_hparams hp;
	struct model_tensor tok_embd;	/* [n_vocab, n_embd], read by row */
	const float *out_norm;		/* [n_embd] */
	struct model_tensor output;	/* [n_vocab, n_embd], or tok_embd */
	bool tied;			/* the file has no output.weight */
	struct model_layer *layers;	/* [n_layer] */
	struct gguf_file *gf;		/* the file the tensors point into */
	bool owns_gf;			/* model_free() closes gf */
	float *norm_buf;		/* storage of all norm vectors */
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

/*
 * cos and sin of each rotated pair of position pos into cs[0..n_rot):
 * theta_i = pos * rope_scale * rope_base^(-2i / n_rot), the power built by
 * repeated multiplication in float.  The one definition every backend
 * uses, so that they rotate by the same bits.
 */
void model_rope_row(float *cs, int pos, const struct model_hparams *hp);

/* Bytes of all weights the model uses (a tied tok_embd counted once). */
uint64_t model_weight_bytes(const struct model *m);

#endif
