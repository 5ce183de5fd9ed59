/*
 * kvcache_prefix.c - the prefix cache inside the KV cache: full blocks
 * that outlive their sequences and are found again by the token ids they
 * hold and every id before them.
 *
 * A block's identity is its prefix hash: SipHash-2-4, under a key drawn at
 * start-up, of the previous block's prefix hash (for the first block, the
 * caller's salt: model, KV type, scope) followed by its block_tokens ids.
 * The table maps a prefix hash to the one block registered under it; a
 * match also compares the stored ids and the parent hash, so two prefixes
 * meet only if they are equal or a secret-keyed 64-bit hash collides.
 *
 * A second table maps a parent hash to the cached blocks that follow it,
 * so that a sequence whose next tokens fill only part of a block can
 * start with a copy of a cached block's leading positions
 * (kv_prefix_extend()).
 *
 * Idle cached blocks (ref 0) sit on an LRU list, oldest at the head; an
 * append takes free blocks first and evicts idle ones only when none is
 * free, oldest first.  kv_blocks_free() counts both: caching never makes
 * an append fail that would have succeeded without it.
 */
#include "kvcache.h"
#include "kvcache_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- SipHash-2-4 ------------------------------------------------------ */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void
sip_round(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = ROTL(v[1], 13);
	v[1] ^= v[0];
	v[0] = ROTL(v[0], 32);
	v[2] += v[3];
	v[3] = ROTL(v[3], 16);
	v[3] ^= v[2];
	v[0] += v[3];
	v[3] = ROTL(v[3], 21);
	v[3] ^= v[0];
	v[2] += v[1];
	v[1] = ROTL(v[1], 17);
	v[1] ^= v[2];
	v[2] = ROTL(v[2], 32);
}

static void
sip_word(uint64_t v[4], uint64_t m)
{
	v[3] ^= m;
	sip_round(v);
	sip_round(v);
	v[0] ^= m;
}

/*
 * SipHash-2-4 of the message parent (8 bytes, little-endian) followed by
 * n ids (4 bytes each, little-endian), under key k.
 */
static uint64_t
kv_sip(const uint64_t k[2], uint64_t parent, const int32_t *ids, int n)
{
	uint64_t v[4] = { k[0] ^ 0x736f6d6570736575ULL,
	    k[1] ^ 0x646f72616e646f6dULL, k[0] ^ 0x6c7967656e657261ULL,
	    k[1] ^ 0x7465646279746573ULL };
	uint64_t len = 8 + 4 * (uint64_t)n, w;
	int i;

	sip_word(v, parent);
	for (i = 0; i + 1 < n; i += 2)
		sip_word(v, (uint64_t)(uint32_t)ids[i] |
		    (uint64_t)(uint32_t)ids[i + 1] << 32);
	w = (len & 0xff) << 56;
	if (i < n)
		w |= (uint64_t)(uint32_t)ids[i];
	sip_word(v, w);
	v[2] ^= 0xff;
	for (i = 0; i < 4; i++)
		sip_round(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* ---- the table -------------------------------------------------------- */

int
kv_prefix_init(struct kv_cache *kv)
{
	uint32_t cap = 16;
	int n = kv->p.n_blocks;

	while (cap < 2u * (uint32_t)n)
		cap *= 2;
	kv->hcap = cap;
	kv->htab = malloc((size_t)cap * sizeof(*kv->htab));
	kv->ptab = malloc((size_t)cap * sizeof(*kv->ptab));
	kv->ids = calloc((size_t)n * (size_t)kv->p.block_tokens,
	    sizeof(*kv->ids));
	if (kv->htab == NULL || kv->ptab == NULL || kv->ids == NULL)
		return -ENOMEM;
	memset(kv->htab, 0xff, (size_t)cap * sizeof(*kv->htab));
	memset(kv->ptab, 0xff, (size_t)cap * sizeof(*kv->ptab));
	for (int b = 0; b < n; b++)
		kv->blocks[b].lru_prev = kv->blocks[b].lru_next = -1;
	kv->lru_head = kv->lru_tail = -1;
	if (getrandom(kv->key, sizeof(kv->key), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(kv->key)) {
		kv->key[0] = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL;
		kv->key[1] = (uint64_t)getpid() ^ (uint64_t)(uintptr_t)kv;
	}
	return 0;
}

void
kv_prefix_fini(struct kv_cache *kv)
{
	free(kv->htab);
	free(kv->ptab);
	free(kv->ids);
}

static uint32_t
kv_slot(const struct kv_cache *kv, uint64_t h)
{
	return (uint32_t)(h ^ (h >> 32)) & (kv->hcap - 1);
}

/* The cached block registered under h, or -1. */
static int
kv_find(const struct kv_cache *kv, uint64_t h)
{
	for (uint32_t i = kv_slot(kv, h);; i = (i + 1) & (kv->hcap - 1)) {
		int b = kv->htab[i];

		if (b < 0)
			return -1;
		if (kv->blocks[b].hash == h)
			return b;
	}
}

/* Key of block b in table tab: its hash in htab, its parent in ptab. */
static uint64_t
kv_key(const struct kv_cache *kv, const int32_t *tab, int b)
{
	return tab == kv->htab ? kv->blocks[b].hash : kv->blocks[b].parent;
}

static void
kv_tab_add(struct kv_cache *kv, int32_t *tab, int b)
{
	uint32_t i = kv_slot(kv, kv_key(kv, tab, b));

	while (tab[i] >= 0)
		i = (i + 1) & (kv->hcap - 1);
	tab[i] = b;
}

/* Remove b from tab (linear probing: shift the run back). */
static void
kv_tab_del(struct kv_cache *kv, int32_t *tab, int b)
{
	uint32_t m = kv->hcap - 1, i = kv_slot(kv, kv_key(kv, tab, b)), j, k;

	while (tab[i] != b)
		i = (i + 1) & m;
	tab[i] = -1;
	for (j = (i + 1) & m; tab[j] >= 0; j = (j + 1) & m) {
		k = kv_slot(kv, kv_key(kv, tab, tab[j]));
		/* j's entry may move to i unless its home lies in (i, j] */
		if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
			tab[i] = tab[j];
			tab[j] = -1;
			i = j;
		}
	}
}

static void
kv_insert(struct kv_cache *kv, int b)
{
	if (kv->blocks[b].part == 0)
		kv_tab_add(kv, kv->htab, b);
	kv_tab_add(kv, kv->ptab, b);
	kv->blocks[b].cached = true;
}

static void
kv_remove(struct kv_cache *kv, int b)
{
	if (kv->blocks[b].part == 0)
		kv_tab_del(kv, kv->htab, b);
	kv_tab_del(kv, kv->ptab, b);
	kv->blocks[b].cached = false;
	kv->blocks[b].part = 0;
}

/* ---- the idle list ---------------------------------------------------- */

static void
kv_lru_unlink(struct kv_cache *kv, int b)
{
	struct kv_block *k = &kv->blocks[b];

	if (k->lru_prev >= 0)
		kv->blocks[k->lru_prev].lru_next = k->lru_next;
	else
		kv->lru_head = k->lru_next;
	if (k->lru_next >= 0)
		kv->blocks[k->lru_next].lru_prev = k->lru_prev;
	else
		kv->lru_tail = k->lru_prev;
	k->lru_prev = k->lru_next = -1;
	kv->n_idle--;
}

static void
kv_lru_push(struct kv_cache *kv, int b)
{
	struct kv_block *k = &kv->blocks[b];

	k->lru_prev = kv->lru_tail;
	k->lru_next = -1;
	if (kv->lru_tail >= 0)
		kv->blocks[kv->lru_tail].lru_next = b;
	else
		kv->lru_head = b;
	kv->lru_tail = b;
	kv->n_idle++;
}

int
kv_block_take(struct kv_cache *kv)
{
	int b;

	if (kv->n_free > 0) {
		b = kv->free_stack[--kv->n_free];
	} else if ((b = kv->lru_head) >= 0) {
		kv_lru_unlink(kv, b);
		kv_remove(kv, b);
		kv->evictions++;
	} else {
		return -1;
	}
	kv->blocks[b].ref = 1;
	return b;
}

/* One more holder of block b (off the idle list if it was idle). */
static void
kv_block_hold(struct kv_cache *kv, int b)
{
	if (kv->blocks[b].ref++ == 0)
		kv_lru_unlink(kv, b);
}

void
kv_block_drop(struct kv_cache *kv, int b)
{
	if (--kv->blocks[b].ref > 0)
		return;
	if (kv->blocks[b].cached)
		kv_lru_push(kv, b);
	else
		kv->free_stack[kv->n_free++] = b;
}

/* ---- the public side -------------------------------------------------- */

/* Block b holds ids and follows parent. */
static bool
kv_block_is(const struct kv_cache *kv, int b, uint64_t parent,
    const int32_t *ids)
{
	size_t bt = (size_t)kv->p.block_tokens;

	return kv->blocks[b].parent == parent &&
	    memcmp(kv->ids + (size_t)b * bt, ids, bt * sizeof(*ids)) == 0;
}

int
kv_prefix_match(const struct kv_cache *kv, uint64_t salt,
    const int32_t *ids, int n_ids, int32_t *blocks, int max)
{
	int bt = kv->p.block_tokens, n = 0, b;
	uint64_t h = salt, next;

	while (n < max && (n + 1) * bt <= n_ids) {
		next = kv_sip(kv->key, h, ids + (size_t)n * (size_t)bt, bt);
		if ((b = kv_find(kv, next)) < 0 ||
		    !kv_block_is(kv, b, h, ids + (size_t)n * (size_t)bt))
			break;
		blocks[n++] = b;
		h = next;
	}
	return n;
}

int
kv_seq_share(struct kv_cache *kv, int seq, const int32_t *blocks, int n)
{
	struct kv_seq *s;
	int32_t *t;
	int i;

	if (!kv_seq_live(kv, seq) || n < 0 ||
	    n > kv->max_blocks_per_seq)
		return -EINVAL;
	s = &kv->seqs[seq];
	if (s->len != 0)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (blocks[i] < 0 || blocks[i] >= kv->p.n_blocks ||
		    !kv->blocks[blocks[i]].cached ||
		    kv->blocks[blocks[i]].part != 0)
			return -EINVAL;
	t = kv->tables + (size_t)seq * (size_t)kv->max_blocks_per_seq;
	for (i = 0; i < n; i++) {
		kv_block_hold(kv, blocks[i]);
		t[i] = blocks[i];
	}
	s->n_blocks = n;
	s->len = s->written = n * kv->p.block_tokens;
	s->n_seen = n;
	s->tail_hash = n > 0 ? kv->blocks[blocks[n - 1]].hash : 0;
	return 0;
}

int
kv_seq_publish(struct kv_cache *kv, int seq, uint64_t salt,
    const int32_t *ids, int n_ids)
{
	struct kv_seq *s;
	const int32_t *t;
	int bt = kv->p.block_tokens, full, added = 0;

	if (!kv_seq_live(kv, seq) || n_ids < 0)
		return -EINVAL;
	s = &kv->seqs[seq];
	t = kv->tables + (size_t)seq * (size_t)kv->max_blocks_per_seq;
	full = (s->written < n_ids ? s->written : n_ids) / bt;
	if (s->n_seen == 0)
		s->tail_hash = salt;
	for (; s->n_seen < full; s->n_seen++) {
		const int32_t *bid = ids + (size_t)s->n_seen * (size_t)bt;
		uint64_t h = kv_sip(kv->key, s->tail_hash, bid, bt);
		int b = t[s->n_seen];
		struct kv_block *k = &kv->blocks[b];

		/* a twin already registered (or a collision): b stays private */
		if (!k->cached && kv_find(kv, h) < 0) {
			k->hash = h;
			k->parent = s->tail_hash;
			memcpy(kv->ids + (size_t)b * (size_t)bt, bid,
			    (size_t)bt * sizeof(*bid));
			kv_insert(kv, b);
			added++;
		}
		s->tail_hash = h;
	}
	return added;
}

/* Whether tab holds b under its key (kv_key()). */
static bool
kv_tab_has(const struct kv_cache *kv, const int32_t *tab, int b)
{
	for (uint32_t i = kv_slot(kv, kv_key(kv, tab, b)); tab[i] >= 0;
	    i = (i + 1) & (kv->hcap - 1))
		if (tab[i] == b)
			return true;
	return false;
}

int
kv_prefix_check(const struct kv_cache *kv, struct cp_err *e)
{
	uint32_t i, in_h = 0, in_p = 0;
	int b, cached = 0, donors = 0;

	for (i = 0; i < kv->hcap; i++) {
		in_h += kv->htab[i] >= 0;
		in_p += kv->ptab[i] >= 0;
	}
	for (b = 0; b < kv->p.n_blocks; b++) {
		if (!kv->blocks[b].cached)
			continue;
		cached++;
		donors += kv->blocks[b].part > 0;
		if (kv->blocks[b].part > 0 && (kv->blocks[b].ref != 0 ||
		    kv->blocks[b].part >= kv->p.block_tokens))
			return cp_err_set(e, -EFAULT, "kv check: donor block "
			    "%d held or of %d positions", b,
			    kv->blocks[b].part);
		if ((kv->blocks[b].part == 0 &&
		    kv_find(kv, kv->blocks[b].hash) != b) ||
		    !kv_tab_has(kv, kv->ptab, b))
			return cp_err_set(e, -EFAULT, "kv check: cached block "
			    "%d missing from the prefix tables", b);
	}
	if (in_h != (uint32_t)(cached - donors) || in_p != (uint32_t)cached)
		return cp_err_set(e, -EFAULT, "kv check: %u and %u prefix "
		    "table entries for %d cached blocks (%d donors)", in_h,
		    in_p, cached, donors);
	return 0;
}

/* Leading ids of cached block b equal to ids[0..n). */
static int
kv_block_common(const struct kv_cache *kv, int b, const int32_t *ids, int n)
{
	const int32_t *have = kv->ids + (size_t)b * (size_t)kv->p.block_tokens;
	int j = 0;

	while (j < n && have[j] == ids[j])
		j++;
	return j;
}

int
kv_prefix_extend(const struct kv_cache *kv, uint64_t salt,
    const int32_t *blocks, int n_blocks, const int32_t *ids, int n_ids,
    int *block)
{
	uint64_t parent = n_blocks > 0 ? kv->blocks[blocks[n_blocks - 1]].hash :
	    salt;
	int bt = kv->p.block_tokens, best = 0, j, b;

	*block = -1;
	if (n_ids > bt - 1)
		n_ids = bt - 1;
	for (uint32_t i = kv_slot(kv, parent); n_ids > 0 &&
	    (b = kv->ptab[i]) >= 0; i = (i + 1) & (kv->hcap - 1)) {
		if (kv->blocks[b].parent != parent)
			continue;
		j = kv_block_common(kv, b, ids, kv->blocks[b].part > 0 &&
		    kv->blocks[b].part < n_ids ? kv->blocks[b].part : n_ids);
		if (j > best) {
			best = j;
			*block = b;
		}
	}
	return best;
}

int
kv_seq_extend(struct kv_cache *kv, int seq, int src, int n)
{
	struct kv_seq *s;
	int rc;

	if (!kv_seq_live(kv, seq) || src < 0 || src >= kv->p.n_blocks ||
	    !kv->blocks[src].cached || n < 1 || n >= kv->p.block_tokens)
		return -EINVAL;
	s = &kv->seqs[seq];
	if (s->len % kv->p.block_tokens != 0 || s->written != s->len)
		return -EINVAL;
	/* held meanwhile, so that the append cannot evict it */
	kv_block_hold(kv, src);
	rc = kv_seq_append(kv, seq, n);
	kv_block_drop(kv, src);
	if (rc < 0)
		return rc;
	s->written = s->len;
	return kv->tables[(size_t)seq * (size_t)kv->max_blocks_per_seq +
	    (size_t)s->n_blocks - 1];
}

int
kv_seq_retire(struct kv_cache *kv, int seq, uint64_t salt,
    const int32_t *ids, int n_ids)
{
	struct kv_seq *s;
	struct kv_block *k;
	int bt = kv->p.block_tokens, part, b, rc;

	if ((rc = kv_seq_publish(kv, seq, salt, ids, n_ids)) < 0)
		return rc;
	s = &kv->seqs[seq];
	part = (s->written < n_ids ? s->written : n_ids) - s->n_seen * bt;
	if (part > 0 && part < bt && s->n_blocks == s->n_seen + 1) {
		b = kv->tables[(size_t)seq * (size_t)kv->max_blocks_per_seq +
		    (size_t)s->n_seen];
		k = &kv->blocks[b];
		if (k->ref == 1 && !k->cached) {
			k->part = part;
			k->hash = 0;
			k->parent = s->tail_hash;
			memcpy(kv->ids + (size_t)b * (size_t)bt,
			    ids + (size_t)s->n_seen * (size_t)bt,
			    (size_t)part * sizeof(*ids));
			/* out of the table first, so that it is never held
			   while cached */
			s->n_blocks--;
			s->len = s->written = s->n_seen * bt;
			kv_insert(kv, b);
			kv_block_drop(kv, b);
		}
	}
	return kv_seq_free(kv, seq);
}

int
kv_blocks_cached(const struct kv_cache *kv)
{
	return kv->n_idle;
}

uint64_t
kv_evictions(const struct kv_cache *kv)
{
	return kv->evictions;
}
