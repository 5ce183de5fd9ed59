/*
 * worker_prefix.c - the prefix cache's side of the worker: a request
 * admitted with nothing in the KV cache starts with the cached blocks
 * that hold its leading tokens (sched's admit_cached()), and after every
 * step each request's newly full blocks are published, so that its
 * prompt and generated tokens serve the next request that begins the
 * same way, and the next turn of its conversation.
 *
 * The cache itself (which blocks, their identity, eviction) is the KV
 * cache's (kvcache.h); the policy is here: the scope.  A block is found
 * only under the salt it was published with: the client's uid with
 * PREFIX_UID (the default: a cache shared across users lets one user
 * time another's prompts), one salt for all with PREFIX_GLOBAL, never
 * with PREFIX_OFF.  The model, its KV type and the hash key are fixed
 * for the daemon's life, so only the scope is salted.
 *
 * Whole blocks are shared; the block after them may begin with a copy:
 * when a cached block follows the same blocks and its first tokens are
 * the request's next ones (the shared system prompt ends inside a block
 * whose rest was another client's question; the history of a
 * conversation ends inside its last block), the request takes a block
 * of its own holding a copy of that block (kv_seq_extend()) and starts
 * after those tokens.  A request that ends leaves its partial last block
 * behind as such a source (wk_prefix_retire()).  So only the tokens a
 * request does not share are computed, at any length.
 *
 * A prompt that goes to the prefill lane starts there after its cached
 * blocks too (wk_prefix_lane()): the lane copies them from a sequence
 * that shares them for the moment, as it copies a prompt's computed
 * positions when the prompt moves to it from the steps.
 *
 * Exactness: a block holds the same bits whichever request, chunk or
 * step computed it (the engine's batch and chunk invariance), so a
 * request served from the cache samples what it would have cold.
 */
#include "worker_int.h"

#include <errno.h>
#include <stdlib.h>

#include "backend.h"
#include "kvcache.h"
#include "lane.h"
#include "log.h"

static uint64_t
prefix_salt(const struct worker *w, const struct wreq *r)
{
	return w->prefix == PREFIX_UID ? (1ull << 32) | r->uid : 1;
}

int
wk_prefix_peek(struct worker *w, const struct wreq *r, int n)
{
	int bt, max;

	if (w->prefix == PREFIX_OFF || n < 2)
		return 0;
	bt = kv_params(w->kv)->block_tokens;
	max = (n - 1) / bt < w->pfx_cap ? (n - 1) / bt : w->pfx_cap;
	/* the last position is always computed: it gives the logits */
	return bt * kv_prefix_match(w->kv, prefix_salt(w, r), r->toks, n - 1,
	    w->pfx_blocks, max);
}

/*
 * seq (whole cached blocks so far) takes a block of its own holding the
 * first n positions of cached block src, copied whole; 0, or -errno with
 * seq as it was.
 */
static int
prefix_copy(struct worker *w, int seq, int src, int n)
{
	size_t bytes = kv_block_bytes(w->kv);
	int len = kv_seq_len(w->kv, seq), dst, rc;

	if (w->pfx_copy == NULL && (w->pfx_copy = malloc(bytes)) == NULL)
		return -ENOMEM;
	if ((dst = kv_seq_extend(w->kv, seq, src, n)) < 0)
		return dst;
	rc = be_kv_read(w->be, kv_block_offset(w->kv, src, 0, KV_K),
	    w->pfx_copy, bytes);
	if (rc == 0)
		rc = be_kv_write(w->be, kv_block_offset(w->kv, dst, 0, KV_K),
		    w->pfx_copy, bytes);
	if (rc < 0)
		(void)kv_seq_truncate(w->kv, seq, len);
	return rc;
}

int
wk_prefix_admit(void *arg, int req, uint64_t req_id, int n_seq)
{
	struct worker *w = arg;
	struct wreq *r;
	int from, seq, bt, part = 0, src = -1;

	(void)req;
	if (req_id >= (uint64_t)w->max_requests)
		return 0;
	r = &w->req[req_id];
	if (r->seq >= 0 || r->lane_ready || n_seq > r->n_prompt + r->n_gen ||
	    w->prefix == PREFIX_OFF || n_seq < 2)
		return 0;
	bt = kv_params(w->kv)->block_tokens;
	from = wk_prefix_peek(w, r, n_seq);
	/* the block after them: a cached one may begin as this one does */
	if (from < n_seq - 1)
		part = kv_prefix_extend(w->kv, prefix_salt(w, r),
		    w->pfx_blocks, from / bt, r->toks + from, n_seq - 1 - from,
		    &src);
	if ((from == 0 && part == 0) || (seq = kv_seq_new(w->kv)) < 0)
		return 0;
	if (kv_seq_share(w->kv, seq, w->pfx_blocks, from / bt) < 0) {
		(void)kv_seq_free(w->kv, seq);
		return 0;
	}
	if (part > 0 && prefix_copy(w, seq, src, part) == 0) {
		from += part;
		w->st.prefix_partial++;
	}
	if (from == 0) {
		(void)kv_seq_free(w->kv, seq);
		return 0;
	}
	r->seq = seq;
	r->n_cached = from < r->n_prompt ? from : r->n_prompt;
	w->es.tokens_prompt_cached += (uint64_t)r->n_cached;
	return from;
}

void
wk_prefix_publish(struct worker *w, const struct wreq *r)
{
	if (w->prefix == PREFIX_OFF || r->seq < 0)
		return;
	(void)kv_seq_publish(w->kv, r->seq, prefix_salt(w, r), r->toks,
	    r->n_prompt + r->n_gen);
}

void
wk_prefix_retire(struct worker *w, struct wreq *r)
{
	if (r->seq < 0)
		return;
	if (w->prefix == PREFIX_OFF)
		(void)kv_seq_free(w->kv, r->seq);
	else
		(void)kv_seq_retire(w->kv, r->seq, prefix_salt(w, r), r->toks,
		    r->n_prompt + r->n_gen);
	r->seq = -1;
}

int
wk_prefix_lane(struct worker *w, struct wreq *r)
{
	struct cp_err e = { 0 };
	int n = r->n_prompt - 1, from, seq, rc;

	if ((from = wk_prefix_peek(w, r, r->n_prompt)) == 0 || from >= n ||
	    (seq = kv_seq_new(w->kv)) < 0)
		return 0;
	rc = kv_seq_share(w->kv, seq, w->pfx_blocks, from /
	    kv_params(w->kv)->block_tokens);
	if (rc == 0)
		rc = lane_resume(w->lane, r->toks, n, r->progress, w->be, seq,
		    from, &e);
	(void)kv_seq_free(w->kv, seq);
	if (rc < 0)
		return 0;
	r->n_cached = from;
	r->lane_from = from;
	r->lane_shown = from;
	w->es.tokens_prompt_cached += (uint64_t)from;
	log_debug("worker: request %llu: prompt to the prefill lane after %d "
	    "cached tokens", (unsigned long long)r->id, from);
	return from;
}
