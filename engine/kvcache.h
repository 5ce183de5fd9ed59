/*
 * kvcache.h - the paged KV cache: block accounting and storage layout.
 *
 * The cache is a pool of fixed-size blocks of block_tokens token slots.
 * A sequence owns a block table: entry i holds the block of its positions
 * [i * block_tokens, (i + 1) * block_tokens).  Blocks are taken from and
 * returned to a free stack, O(1) each.  This module only does the
 * bookkeeping and the address arithmetic; the bytes live in a buffer the
 * backend allocates (host memory for the CPU, device memory for CUDA) of
 * kv_storage_bytes() bytes.
 *
 * Storage layout (elements of kv_params.type, F16 or F32):
 *
 *	storage[block][layer][kind][slot][kv_dim]
 *
 * kind 0 is K, 1 is V; kv_dim = n_head_kv * head_dim.  One block holds the
 * K and V of block_tokens positions for every layer, contiguously, so a
 * block is a unit that can be copied or freed on its own.
 *
 * Invariants (kv_check() verifies them):
 *  1. every block is either on the free stack or in exactly one live
 *     sequence's table, never both;
 *  2. a live sequence of len tokens owns exactly ceil(len / block_tokens)
 *     blocks, in table entries 0..n-1;
 *  3. written <= len <= n_ctx for every live sequence: positions below
 *     written hold K/V computed by a step, positions in [written, len)
 *     are reserved but not yet computed.
 */
#ifndef CP_KVCACHE_H
#define CP_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define KV_BLOCK_TOKENS 16	/* default tokens per block */
#define KV_MAX_BLOCK_TOKENS 1024
#define KV_MAX_SEQS 65536

enum kv_kind {
	KV_K = 0,
	KV_V = 1
};

struct kv_params {
	int n_layer;		/* layers of the model */
	int kv_dim;		/* K (or V) elements per token per layer */
	uint32_t type;		/* CP_T_F16 or CP_T_F32 */
	int block_tokens;	/* token slots per block (0: KV_BLOCK_TOKENS) */
	int n_blocks;		/* blocks in the pool */
	int max_seqs;		/* sequences alive at once */
	int n_ctx;		/* most tokens one sequence holds */
};

struct kv_cache;

/*
 * Bytes one token takes in the cache (all layers, K and V) for p's
 * n_layer, kv_dim and type; 0 when they are invalid.
 */
size_t kv_token_bytes(const struct kv_params *p);

/*
 * Blocks needed to hold tokens tokens, or to fill mib MiB, for p's shape
 * (p->block_tokens 0 means the default); clamped to INT32_MAX, 0 on bad
 * parameters.
 */
int kv_blocks_for_tokens(const struct kv_params *p, uint64_t tokens);
int kv_blocks_for_mib(const struct kv_params *p, uint64_t mib);

/*
 * Build the bookkeeping for a pool described by p (copied).  Returns 0 and
 * *out (free with kv_free()), -EINVAL with e naming the bad parameter, or
 * -ENOMEM.  All memory the cache needs is allocated here.
 */
int kv_new(const struct kv_params *p, struct kv_cache **out,
    struct cp_err *e);

/* Release the bookkeeping (not the storage buffer); accepts NULL. */
void kv_free(struct kv_cache *kv);

/* The parameters the cache was built with (block_tokens filled in). */
const struct kv_params *kv_params(const struct kv_cache *kv);

/* Bytes of the storage buffer the backend must provide, and of one block. */
size_t kv_storage_bytes(const struct kv_cache *kv);
size_t kv_block_bytes(const struct kv_cache *kv);

/* Element size of the storage type (2 or 4). */
size_t kv_elem_bytes(const struct kv_cache *kv);

/*
 * Byte offset, in the storage buffer, of block's K or V region for layer:
 * block_tokens rows of kv_dim elements.  How the rows lie inside is the
 * backend's: slot-major (slot s at kv_dim * kv_elem_bytes() * s) on the
 * GPU, head-major ([head][slot][head_dim]) on the CPU (forward.c).
 * Arguments must be in range (programmer error otherwise).
 */
size_t kv_block_offset(const struct kv_cache *kv, int block, int layer,
    enum kv_kind kind);

/* Blocks in the pool, and blocks on the free stack. */
int kv_blocks_total(const struct kv_cache *kv);
int kv_blocks_free(const struct kv_cache *kv);

/*
 * The first n blocks the free stack will give, in the order appends take
 * them, into out; returns how many (at most n and kv_blocks_free()).
 */
int kv_free_peek(const struct kv_cache *kv, int32_t *out, int n);

/* Live sequences. */
int kv_seqs_live(const struct kv_cache *kv);

/*
 * Start an empty sequence.  Returns its id (>= 0, below max_seqs), or
 * -ENOSPC when max_seqs sequences are alive.
 */
int kv_seq_new(struct kv_cache *kv);

/*
 * Reserve n more token slots at the end of seq (positions len..len+n-1),
 * taking blocks as needed.  Returns 0; -ENOSPC when the pool lacks free
 * blocks, -E2BIG past n_ctx, -EINVAL for a dead seq or n < 0; on error
 * nothing changes.
 */
int kv_seq_append(struct kv_cache *kv, int seq, int n);

/*
 * Shrink seq to its first n tokens (n <= len), returning the blocks past
 * them to the pool; written is clamped to n.  Returns 0 or -EINVAL.
 */
int kv_seq_truncate(struct kv_cache *kv, int seq, int n);

/* End seq and return all its blocks to the pool; 0 or -EINVAL (dead seq). */
int kv_seq_free(struct kv_cache *kv, int seq);

/* seq is a live sequence id. */
bool kv_seq_live(const struct kv_cache *kv, int seq);

/* Reserved tokens of seq, or -EINVAL when seq is not live. */
int kv_seq_len(const struct kv_cache *kv, int seq);

/* Tokens of seq whose K/V a step has written, or -EINVAL. */
int kv_seq_written(const struct kv_cache *kv, int seq);

/*
 * Record that positions [0, n) of seq now hold computed K/V; n must be
 * <= len.  Returns 0 or -EINVAL.  Only the step calls this.
 */
int kv_seq_set_written(struct kv_cache *kv, int seq, int n);

/*
 * The block table of seq: ceil(len / block_tokens) block ids, valid until
 * the next append, truncate or free of seq; NULL when seq is not live.
 */
const int32_t *kv_seq_blocks(const struct kv_cache *kv, int seq);

/*
 * Blocks that appending n tokens to seq would take from the pool;
 * -EINVAL for a dead seq or n < 0, -E2BIG past n_ctx.
 */
int kv_seq_blocks_needed(const struct kv_cache *kv, int seq, int n);

/* Verify invariants 1-3 above; 0 or -EFAULT (with e saying which broke). */
int kv_check(const struct kv_cache *kv, struct cp_err *e);

#endif
