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
 * The prefix cache (kvcache_prefix.c): a full, written block can be
 * published under its prefix (every token id up to its end, salted by the
 * caller); it then stays cached after its sequences end and a new
 * sequence can start by sharing it (kv_prefix_match(), kv_seq_share()).
 *
 * Invariants (kv_check() verifies them):
 *  1. every block is in exactly one state: free (on the free stack),
 *     idle (reference count 0, cached, on the idle list), or held (in the
 *     tables of as many live sequences as its reference count);
 *  2. a live sequence of len tokens holds exactly ceil(len / block_tokens)
 *     blocks, in table entries 0..n-1;
 *  3. written <= len <= n_ctx for every live sequence: positions below
 *     written hold K/V computed by a step, positions in [written, len)
 *     are reserved but not yet computed;
 *  4. a cached block is full and lies below the written count of every
 *     sequence that holds it, so no step writes it again (the truncation
 *     that would make it partial is refused);
 *  5. appends take free blocks before idle ones, and idle ones oldest
 *     first (evicting them from the cache): kv_blocks_free() counts both,
 *     so the cache never makes an append fail;
 *  6. the prefix tables hold exactly the cached blocks, each under its
 *     hash and under its parent's; a partial reuse copies a cached block
 *     into a block of the sequence's own (never shares a partial one),
 *     and the append that takes it cannot evict its source.
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

/*
 * Blocks in the pool, and blocks an append can take: free ones and idle
 * cached ones.
 */
int kv_blocks_total(const struct kv_cache *kv);
int kv_blocks_free(const struct kv_cache *kv);

/*
 * The first n blocks appends will take, in that order (free ones, then
 * idle cached ones oldest first), into out; returns how many (at most n
 * and kv_blocks_free()).
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
 * them to the pool; written is clamped to n.  Returns 0, -EINVAL, or
 * -EBUSY when the block n falls inside is shared or cached (it would be
 * written again).
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

/* ---- the prefix cache ---- */

/*
 * The longest run of cached blocks that holds ids[0..n_ids) from its start
 * (whole blocks only) under salt, at most max, into blocks; returns the
 * count.
 */
int kv_prefix_match(const struct kv_cache *kv, uint64_t salt,
    const int32_t *ids, int n_ids, int32_t *blocks, int max);

/*
 * Empty sequence seq starts with the n cached blocks (from
 * kv_prefix_match()): it holds them (reference + 1), len and written
 * n * block_tokens.  0, or -EINVAL (seq not live and empty, or a block not
 * cached).
 */
int kv_seq_share(struct kv_cache *kv, int seq, const int32_t *blocks, int n);

/*
 * After the n_blocks cached blocks kv_prefix_match() found for a prefix
 * under salt, the cached block that follows them and whose leading ids
 * equal the most of ids[0..n_ids) (at most block_tokens - 1 of them):
 * *block gets it (-1 when none) and the count is returned, 0 when none
 * shares even its first id.
 */
int kv_prefix_extend(const struct kv_cache *kv, uint64_t salt,
    const int32_t *blocks, int n_blocks, const int32_t *ids, int n_ids,
    int *block);

/*
 * seq, whose len is whole blocks all written (as after kv_seq_share()),
 * takes a block of its own for n more positions (1 <= n < block_tokens)
 * and counts them written: the caller copies cached block src's bytes
 * into it (whole blocks: the slots past n are not written yet) before the
 * next step.  src cannot be evicted by the append.  Returns the new
 * block's id, or kv_seq_append()'s error, -EINVAL (seq, src or n).
 */
int kv_seq_extend(struct kv_cache *kv, int seq, int src, int n);

/*
 * Publish seq's full written blocks not yet seen, whose tokens are
 * ids[0..n_ids) from position 0, under salt; a block whose prefix is
 * already cached stays private.  Returns how many blocks were added, or
 * -EINVAL.  Call with the same salt and ids for a sequence each time.
 */
int kv_seq_publish(struct kv_cache *kv, int seq, uint64_t salt,
    const int32_t *ids, int n_ids);

/*
 * End seq as kv_seq_free() does, after publishing its full blocks
 * (kv_seq_publish() with salt and ids[0..n_ids)); its last block, when
 * partly written and its own alone, stays cached as a donor: never
 * shared, but kv_prefix_extend() finds it, so that the next request that
 * goes on from the same tokens (a conversation's next turn) copies those
 * positions instead of computing them.  0 or -EINVAL.
 */
int kv_seq_retire(struct kv_cache *kv, int seq, uint64_t salt,
    const int32_t *ids, int n_ids);

/* Idle cached blocks, and blocks evicted from the cache so far. */
int kv_blocks_cached(const struct kv_cache *kv);
uint64_t kv_evictions(const struct kv_cache *kv);

/* Verify invariants 1-4 and 6 above; 0 or -EFAULT (with e saying which
 * broke). */
int kv_check(const struct kv_cache *kv, struct cp_err *e);

#endif
