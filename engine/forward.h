/*
 * forward.h - the CPU forward pass of a llama model over a batch step.
 *
 * One step (batch.h) runs every row of every sequence through the model
 * together: one matrix product per weight over all rows, RoPE at each
 * row's own position, K/V written into the paged cache, attention per
 * sequence over its cached positions, and logits for the rows that asked.
 *
 * Batch invariance: a row's result depends only on its token, its position
 * and the K/V its sequence holds at positions 0..pos, never on the other
 * rows of the step or on how a prompt was split into steps.  Matrix
 * products keep each output's inner sum in one fixed order (matmul.h);
 * every row of a step writes its K/V into the cache before any row
 * attends, and attention then reads positions 0..pos from the cache, block
 * by block in position order, with the same arithmetic for every row.
 *
 * All scratch memory is sized at fwd_new() from max_batch_tokens and
 * max_seqs; fwd_step() allocates nothing.
 */
#ifndef CP_FORWARD_H
#define CP_FORWARD_H

#include "batch.h"
#include "error.h"
#include "kvcache.h"
#include "model.h"
#include "threadpool.h"

struct fwd_params {
	int max_batch_tokens;	/* most rows in one step, >= 1 */
	int max_seqs;		/* most sequences in one step, >= 1 */
	struct threadpool *tp;	/* borrowed; NULL runs on the caller only */
	const struct model_layer *layers;	/* [n_layer] the matrices
				   to multiply by (packed.h), or NULL: the
				   model's; borrowed */
	const struct model_tensor *output;	/* the same for the output */
};

struct fwd;

/*
 * Prepare the forward pass of model m (borrowed) over cache kv (borrowed)
 * whose storage is kv_mem (kv_storage_bytes(kv) bytes, borrowed); the
 * three outlive the returned state.  Returns 0 and *out (free with
 * fwd_free()), -EINVAL with e naming a parameter that does not fit the
 * model or cache, or -ENOMEM.
 */
int fwd_new(const struct model *m, struct kv_cache *kv, void *kv_mem,
    const struct fwd_params *p, struct fwd **out, struct cp_err *e);

/* Release the scratch memory; accepts NULL. */
void fwd_free(struct fwd *f);

/*
 * Run step b, which the caller has checked against the cache (see
 * batch.h and be_batch_check()), and write n_vocab logits for each entry
 * of b whose logits flag is set, in entry order, to logits.  Returns 0;
 * -EINVAL when b exceeds the sizes given to fwd_new() or a kernel rejects
 * a tensor.  Does not update the cache's written counts.
 */
int fwd_step(struct fwd *f, const struct step_batch *b, float *logits);

#endif
