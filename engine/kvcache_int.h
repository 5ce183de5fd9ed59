/*
 * kvcache_int.h - the KV cache's bookkeeping, shared by kvcache.c (blocks,
 * sequences) and kvcache_prefix.c (the prefix cache).  Not for other
 * modules.
 *
 * free_stack[0..n_free) holds the free block ids; taking and returning a
 * block is a pop or a push.  Sequence slots likewise come from
 * seq_free_stack.  tables is max_seqs x max_blocks_per_seq block ids, one
 * row per sequence slot, so nothing is allocated after kv_new().
 *
 * A block is in one of three states: free (on free_stack), held (ref > 0:
 * in the tables of ref live sequences), or idle (ref 0, cached: on the LRU
 * list, findable by its prefix).  Only full, written blocks are cached
 * for sharing, and a held block that is cached is never written again
 * (its positions are below every holder's written count); a retired
 * sequence's partial last block may be cached as a donor, idle from the
 * start, found only by its parent, and only ever copied.
 */
#ifndef CP_KVCACHE_INT_H
#define CP_KVCACHE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kvcache.h"

struct kv_seq {
	bool live;
	int len;		/* reserved tokens */
	int written;		/* tokens with computed K/V, <= len */
	int n_blocks;		/* ceil(len / block_tokens) */
	int n_seen;		/* leading blocks kv_seq_publish() has seen */
	uint64_t tail_hash;	/* prefix hash after those blocks */
};

struct kv_block {
	int ref;		/* sequences whose table holds it */
	bool cached;		/* in the prefix tables */
	int part;		/* cached: 0 for a full block (both tables),
				   else the leading positions a donor holds
				   (kv_seq_retire(); the parent table only,
				   never shared, only copied) */
	uint64_t hash;		/* prefix hash through this block */
	uint64_t parent;	/* prefix hash before it (the salt for the
				   first block) */
	int lru_prev, lru_next;	/* idle list, oldest first; -1 ends */
};

struct kv_cache {
	struct kv_params p;
	size_t elem;			/* bytes of one element */
	size_t row_bytes;		/* kv_dim * elem */
	size_t slab_bytes;		/* block_tokens * row_bytes */
	size_t block_bytes;		/* n_layer * 2 * slab_bytes */
	int max_blocks_per_seq;
	int32_t *free_stack;		/* n_blocks entries */
	int n_free;
	int *seq_free_stack;		/* max_seqs entries */
	int n_seq_free;
	struct kv_seq *seqs;		/* max_seqs */
	int32_t *tables;		/* max_seqs x max_blocks_per_seq */
	/* The prefix cache (kvcache_prefix.c). */
	struct kv_block *blocks;	/* n_blocks */
	int32_t *ids;			/* n_blocks x block_tokens token ids */
	int32_t *htab;			/* hcap slots: block id or -1, by
					   hash */
	int32_t *ptab;			/* hcap slots: the same blocks by
					   parent (several may share one) */
	uint32_t hcap;			/* power of two >= 2 n_blocks */
	int lru_head, lru_tail;		/* idle cached blocks */
	int n_idle;
	uint64_t key[2];		/* the prefix hash's secret key */
	uint64_t evictions;
};

/* Allocate and reset the prefix cache's part; 0 or -ENOMEM. */
int kv_prefix_init(struct kv_cache *kv);
void kv_prefix_fini(struct kv_cache *kv);

/*
 * A block for an append: a free one, else the oldest idle cached one
 * (evicted from the prefix table); ref becomes 1.  -1 when none is left.
 */
int kv_block_take(struct kv_cache *kv);

/*
 * The prefix tables agree with the blocks: each cached block is found by
 * its hash and among its parent's children, and the tables hold nothing
 * else.  0 or -EFAULT with e (kv_check()).
 */
int kv_prefix_check(const struct kv_cache *kv, struct cp_err *e);

/* One holder lets block b go: idle if cached, else free, at ref 0. */
void kv_block_drop(struct kv_cache *kv, int b);

#endif
