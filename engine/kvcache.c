#include "kvcache.h"
#include "kvcache_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ttype.h"

static size_t
kv_type_size(uint32_t t)
{
	if (t == CP_T_F16)
		return 2;
	if (t == CP_T_F32)
		return 4;
	return 0;
}

size_t
kv_token_bytes(const struct kv_params *p)
{
	size_t es = kv_type_size(p->type);

	if (es == 0 || p->n_layer <= 0 || p->kv_dim <= 0)
		return 0;
	/* int x int x 2 x 4 fits in size_t on 64-bit targets. */
	return (size_t)p->n_layer * 2 * (size_t)p->kv_dim * es;
}

static int
kv_bt(const struct kv_params *p)
{
	return p->block_tokens == 0 ? KV_BLOCK_TOKENS : p->block_tokens;
}

int
kv_blocks_for_tokens(const struct kv_params *p, uint64_t tokens)
{
	int bt = kv_bt(p);
	uint64_t n;

	if (bt <= 0 || bt > KV_MAX_BLOCK_TOKENS)
		return 0;
	n = tokens / (uint64_t)bt + (tokens % (uint64_t)bt != 0);
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

int
kv_blocks_for_mib(const struct kv_params *p, uint64_t mib)
{
	size_t tb = kv_token_bytes(p);
	int bt = kv_bt(p);
	uint64_t bytes, per_block, n;

	if (tb == 0 || bt <= 0 || bt > KV_MAX_BLOCK_TOKENS)
		return 0;
	if (mib > UINT64_MAX >> 20)
		return INT32_MAX;
	bytes = mib << 20;
	per_block = (uint64_t)tb * (uint64_t)bt;
	n = bytes / per_block;
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

int
kv_new(const struct kv_params *p, struct kv_cache **out, struct cp_err *e)
{
	struct kv_cache *kv;
	size_t tb, nt;
	int i;

	*out = NULL;
	tb = kv_token_bytes(p);
	if (kv_type_size(p->type) == 0)
		return cp_err_set(e, -EINVAL,
		    "kv cache: type %s unsupported (want f16 or f32)",
		    ttype_name(p->type));
	if (tb == 0)
		return cp_err_set(e, -EINVAL,
		    "kv cache: n_layer %d, kv_dim %d must be positive",
		    p->n_layer, p->kv_dim);
	if (kv_bt(p) <= 0 || kv_bt(p) > KV_MAX_BLOCK_TOKENS)
		return cp_err_set(e, -EINVAL,
		    "kv cache: block_tokens %d not in 1..%d", p->block_tokens,
		    KV_MAX_BLOCK_TOKENS);
	if (p->n_blocks <= 0)
		return cp_err_set(e, -EINVAL,
		    "kv cache: n_blocks %d must be positive", p->n_blocks);
	if (p->max_seqs <= 0 || p->max_seqs > KV_MAX_SEQS)
		return cp_err_set(e, -EINVAL,
		    "kv cache: max_seqs %d not in 1..%d", p->max_seqs,
		    KV_MAX_SEQS);
	if (p->n_ctx <= 0)
		return cp_err_set(e, -EINVAL,
		    "kv cache: n_ctx %d must be positive", p->n_ctx);
	/* The storage size must fit a size_t with room to spare. */
	if ((size_t)p->n_blocks > (SIZE_MAX / 2) / tb / (size_t)kv_bt(p))
		return cp_err_set(e, -EINVAL,
		    "kv cache: %d blocks of %d tokens overflow", p->n_blocks,
		    kv_bt(p));

	if ((kv = calloc(1, sizeof(*kv))) == NULL)
		return cp_err_set(e, -ENOMEM, "kv cache: out of memory");
	kv->p = *p;
	kv->p.block_tokens = kv_bt(p);
	kv->elem = kv_type_size(p->type);
	kv->row_bytes = (size_t)p->kv_dim * kv->elem;
	kv->slab_bytes = (size_t)kv->p.block_tokens * kv->row_bytes;
	kv->block_bytes = (size_t)p->n_layer * 2 * kv->slab_bytes;
	kv->max_blocks_per_seq = kv_blocks_for_tokens(&kv->p,
	    (uint64_t)p->n_ctx);
	nt = (size_t)p->max_seqs * (size_t)kv->max_blocks_per_seq;
	kv->free_stack = calloc((size_t)p->n_blocks, sizeof(*kv->free_stack));
	kv->blocks = calloc((size_t)p->n_blocks, sizeof(*kv->blocks));
	kv->seq_free_stack = calloc((size_t)p->max_seqs,
	    sizeof(*kv->seq_free_stack));
	kv->seqs = calloc((size_t)p->max_seqs, sizeof(*kv->seqs));
	kv->tables = calloc(nt, sizeof(*kv->tables));
	if (kv->free_stack == NULL || kv->seq_free_stack == NULL ||
	    kv->seqs == NULL || kv->tables == NULL || kv->blocks == NULL ||
	    kv_prefix_init(kv) < 0) {
		kv_free(kv);
		return cp_err_set(e, -ENOMEM, "kv cache: out of memory "
		    "(%d blocks, %d sequences)", p->n_blocks, p->max_seqs);
	}
	/* Pop order: block 0 first, then 1, ... (the stack top is the end). */
	for (i = 0; i < p->n_blocks; i++)
		kv->free_stack[i] = p->n_blocks - 1 - i;
	kv->n_free = p->n_blocks;
	for (i = 0; i < p->max_seqs; i++)
		kv->seq_free_stack[i] = p->max_seqs - 1 - i;
	kv->n_seq_free = p->max_seqs;
	*out = kv;
	return 0;
}

void
kv_free(struct kv_cache *kv)
{
	if (kv == NULL)
		return;
	kv_prefix_fini(kv);
	free(kv->blocks);
	free(kv->tables);
	free(kv->seqs);
	free(kv->seq_free_stack);
	free(kv->free_stack);
	free(kv);
}

const struct kv_params *
kv_params(const struct kv_cache *kv)
{
	return &kv->p;
}

size_t
kv_storage_bytes(const struct kv_cache *kv)
{
	return (size_t)kv->p.n_blocks * kv->block_bytes;
}

size_t
kv_block_bytes(const struct kv_cache *kv)
{
	return kv->block_bytes;
}

size_t
kv_elem_bytes(const struct kv_cache *kv)
{
	return kv->elem;
}

size_t
kv_block_offset(const struct kv_cache *kv, int block, int layer,
    enum kv_kind kind)
{
	return (size_t)block * kv->block_bytes +
	    ((size_t)layer * 2 + (size_t)kind) * kv->slab_bytes;
}

int
kv_blocks_total(const struct kv_cache *kv)
{
	return kv->p.n_blocks;
}

int
kv_blocks_free(const struct kv_cache *kv)
{
	return kv->n_free + kv->n_idle;
}

int
kv_free_peek(const struct kv_cache *kv, int32_t *out, int n)
{
	int m = 0, b = kv->lru_head;

	for (int i = kv->n_free - 1; i >= 0 && m < n; i--)
		out[m++] = kv->free_stack[i];
	for (; b >= 0 && m < n; b = kv->blocks[b].lru_next)
		out[m++] = b;
	return m;
}

int
kv_seqs_live(const struct kv_cache *kv)
{
	return kv->p.max_seqs - kv->n_seq_free;
}

bool
kv_seq_live(const struct kv_cache *kv, int seq)
{
	return seq >= 0 && seq < kv->p.max_seqs && kv->seqs[seq].live;
}

static int32_t *
kv_table(const struct kv_cache *kv, int seq)
{
	return kv->tables + (size_t)seq * (size_t)kv->max_blocks_per_seq;
}

int
kv_seq_new(struct kv_cache *kv)
{
	int seq;

	if (kv->n_seq_free == 0)
		return -ENOSPC;
	seq = kv->seq_free_stack[--kv->n_seq_free];
	memset(&kv->seqs[seq], 0, sizeof(kv->seqs[seq]));
	kv->seqs[seq].live = true;
	return seq;
}

static int
kv_blocks_for(const struct kv_cache *kv, int tokens)
{
	return tokens / kv->p.block_tokens +
	    (tokens % kv->p.block_tokens != 0);
}

int
kv_seq_blocks_needed(const struct kv_cache *kv, int seq, int n)
{
	const struct kv_seq *s;

	if (!kv_seq_live(kv, seq) || n < 0)
		return -EINVAL;
	s = &kv->seqs[seq];
	if (n > kv->p.n_ctx - s->len)
		return -E2BIG;
	return kv_blocks_for(kv, s->len + n) - s->n_blocks;
}

int
kv_seq_append(struct kv_cache *kv, int seq, int n)
{
	struct kv_seq *s;
	int32_t *t;
	int need;

	if ((need = kv_seq_blocks_needed(kv, seq, n)) < 0)
		return need;
	if (need > kv_blocks_free(kv))
		return -ENOSPC;
	s = &kv->seqs[seq];
	t = kv_table(kv, seq);
	while (need-- > 0)
		t[s->n_blocks++] = kv_block_take(kv);
	s->len += n;
	return 0;
}

int
kv_seq_truncate(struct kv_cache *kv, int seq, int n)
{
	struct kv_seq *s;
	int32_t *t;
	int keep;

	if (!kv_seq_live(kv, seq))
		return -EINVAL;
	s = &kv->seqs[seq];
	if (n < 0 || n > s->len)
		return -EINVAL;
	t = kv_table(kv, seq);
	keep = kv_blocks_for(kv, n);
	/* A partly kept shared block would be written again. */
	if (n % kv->p.block_tokens != 0 && (kv->blocks[t[keep - 1]].ref > 1 ||
	    kv->blocks[t[keep - 1]].cached))
		return -EBUSY;
	/* Push in reverse so a following append takes the same blocks back. */
	while (s->n_blocks > keep)
		kv_block_drop(kv, t[--s->n_blocks]);
	if (s->n_seen > keep)
		s->n_seen = 0;
	s->len = n;
	if (s->written > n)
		s->written = n;
	return 0;
}

int
kv_seq_free(struct kv_cache *kv, int seq)
{
	int rc;

	if ((rc = kv_seq_truncate(kv, seq, 0)) != 0)
		return rc;
	kv->seqs[seq].live = false;
	kv->seq_free_stack[kv->n_seq_free++] = seq;
	return 0;
}

int
kv_seq_len(const struct kv_cache *kv, int seq)
{
	if (!kv_seq_live(kv, seq))
		return -EINVAL;
	return kv->seqs[seq].len;
}

int
kv_seq_written(const struct kv_cache *kv, int seq)
{
	if (!kv_seq_live(kv, seq))
		return -EINVAL;
	return kv->seqs[seq].written;
}

int
kv_seq_set_written(struct kv_cache *kv, int seq, int n)
{
	if (!kv_seq_live(kv, seq) || n < 0 || n > kv->seqs[seq].len)
		return -EINVAL;
	kv->seqs[seq].written = n;
	return 0;
}

const int32_t *
kv_seq_blocks(const struct kv_cache *kv, int seq)
{
	if (!kv_seq_live(kv, seq))
		return NULL;
	return kv_table(kv, seq);
}

int
kv_check(const struct kv_cache *kv, struct cp_err *e)
{
	int *held;
	unsigned char *seen;
	int rc = 0, i, j, b, live = 0, idle = 0;

	held = calloc((size_t)kv->p.n_blocks, sizeof(*held));
	seen = calloc((size_t)kv->p.n_blocks, 1);
	if (held == NULL || seen == NULL) {
		rc = cp_err_set(e, -ENOMEM, "kv check: out of memory");
		goto out;
	}
	for (i = 0; i < kv->n_free; i++) {
		b = kv->free_stack[i];
		if (b < 0 || b >= kv->p.n_blocks || seen[b] ||
		    kv->blocks[b].ref != 0 || kv->blocks[b].cached) {
			rc = cp_err_set(e, -EFAULT,
			    "kv check: free stack entry %d (block %d) bad, "
			    "repeated, held or cached", i, b);
			goto out;
		}
		seen[b] = 1;
	}
	for (b = kv->lru_head; b >= 0; b = kv->blocks[b].lru_next) {
		if (seen[b] || kv->blocks[b].ref != 0 ||
		    !kv->blocks[b].cached || ++idle > kv->p.n_blocks) {
			rc = cp_err_set(e, -EFAULT, "kv check: idle block %d "
			    "free, held, uncached or listed twice", b);
			goto out;
		}
		seen[b] = 1;
	}
	if (idle != kv->n_idle) {
		rc = cp_err_set(e, -EFAULT, "kv check: %d idle blocks listed, "
		    "%d counted", idle, kv->n_idle);
		goto out;
	}
	for (i = 0; i < kv->p.max_seqs; i++) {
		const struct kv_seq *s = &kv->seqs[i];
		const int32_t *t = kv_table(kv, i);

		if (!s->live)
			continue;
		live++;
		if (s->written < 0 || s->written > s->len ||
		    s->len > kv->p.n_ctx ||
		    s->n_blocks != kv_blocks_for(kv, s->len)) {
			rc = cp_err_set(e, -EFAULT, "kv check: seq %d: len %d, "
			    "written %d, %d blocks", i, s->len, s->written,
			    s->n_blocks);
			goto out;
		}
		for (j = 0; j < s->n_blocks; j++) {
			b = t[j];
			if (b < 0 || b >= kv->p.n_blocks || seen[b] == 1) {
				rc = cp_err_set(e, -EFAULT, "kv check: seq %d "
				    "table entry %d (block %d) bad, free or "
				    "idle", i, j, b);
				goto out;
			}
			/* a cached block is full and below written */
			if (kv->blocks[b].cached &&
			    (j + 1) * kv->p.block_tokens > s->written) {
				rc = cp_err_set(e, -EFAULT, "kv check: seq %d "
				    "holds cached block %d at entry %d past "
				    "its written %d", i, b, j, s->written);
				goto out;
			}
			seen[b] = 2;
			held[b]++;
		}
	}
	for (b = 0; b < kv->p.n_blocks; b++) {
		if (!seen[b]) {
			rc = cp_err_set(e, -EFAULT,
			    "kv check: block %d leaked", b);
			goto out;
		}
		if (seen[b] == 2 && held[b] != kv->blocks[b].ref) {
			rc = cp_err_set(e, -EFAULT, "kv check: block %d in %d "
			    "tables, reference count %d", b, held[b],
			    kv->blocks[b].ref);
			goto out;
		}
	}
	if (live != kv->p.max_seqs - kv->n_seq_free) {
		rc = cp_err_set(e, -EFAULT, "kv check: %d live sequences, "
		    "%d slots taken", live, kv->p.max_seqs - kv->n_seq_free);
		goto out;
	}
	rc = kv_prefix_check(kv, e);
out:
	free(seen);
	free(held);
	return rc;
}
