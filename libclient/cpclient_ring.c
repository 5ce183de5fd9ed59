/*
 * cpclient_ring.c - libcpclient's side of the rings: submissions (SQ and
 * prompt arena, producer) and events (CQ, consumer), and the wake-ups in
 * both directions (cp_proto.h, invariants 1-6).
 *
 * The arena is a byte ring with free-running counters like the SQ: each
 * entry's bytes are contiguous (an allocation that would run past the end
 * skips to offset 0), slot_start[] remembers where each SQ slot's
 * allocation began, and the bytes up to the oldest unconsumed slot's start
 * are free again once the daemon's sq_head has passed it (invariant 4).
 * A prompt larger than a quarter of the arena goes out in fragments
 * (SUBMIT with CP_SQF_MORE, APPEND...), so any prompt up to
 * max_prompt_bytes fits whatever the arena size.
 */
#include "cpclient.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpclient_int.h"
#include "ring.h"

_Static_assert(CP_TOP_LOGPROBS_MAX == CP_TOPN_MAX, "top-n lists");

#define WAIT_SLICE_MS	50	/* futex sleeps: how often to look for death */
#define SPIN_MAX_US	1000	/* longest nap while waiting for ring room */

static void
wake_daemon(struct cp_client *c)
{
	ring_fence();
	if (ring_load_relaxed(&c->ctl->daemon_idle.v) == 0)
		return;
	if (c->wake_mode == CP_WAKE_FUTEX)
		syscall(SYS_futex, &c->ctl->sq_tail.v, FUTEX_WAKE, 1, NULL,
		    NULL, 0);
	else
		cpc_pipe_signal(c->sq_wfd);
}

/* Re-reads sq_head; 0, or CP_EPROTO if the daemon claims unsubmitted entries. */
static int
update_head(struct cp_client *c)
{
	uint32_t h = ring_load_acquire(&c->ctl->sq_head.v);

	if (h - c->sq_head > c->sq_tail - c->sq_head)
		return cpc_fail(c, CP_EPROTO);
	c->sq_head = h;
	return 0;
}

/* Arena bytes held by entries the daemon has not consumed yet. */
static uint32_t
arena_used(const struct cp_client *c)
{
	if (c->sq_head == c->sq_tail)
		return 0;
	return c->arena_tail - c->slot_start[ring_slot(c->sq_head,
	    c->sq_entries - 1)];
}

/*
 * Waits until one SQ slot and len contiguous arena bytes are free; sets
 * *start (the arena counter before) and *off (where the bytes go).
 * Returns 0, -ETIMEDOUT, CP_EDEAD or CP_EPROTO.
 */
static int
reserve(struct cp_client *c, uint32_t len, uint64_t end, uint32_t *start,
    uint32_t *off)
{
	uint32_t pos, pad, nap = 20;
	int r;

	for (;;) {
		if ((r = cpc_broken(c)) < 0)
			return r;
		if ((r = update_head(c)) < 0)
			return r;
		pos = c->arena_tail & (c->arena_bytes - 1);
		pad = (len > 0 && pos + len > c->arena_bytes) ?
		    c->arena_bytes - pos : 0;
		if (ring_space(c->sq_tail, c->sq_head, c->sq_entries) > 0 &&
		    arena_used(c) + pad + len <= c->arena_bytes)
			break;
		if (cpc_daemon_gone(c))
			return CP_EDEAD;
		if (cpc_now_ms() >= end)
			return -ETIMEDOUT;
		wake_daemon(c);
		usleep(nap);
		if (nap < SPIN_MAX_US)
			nap *= 2;
	}
	*start = c->arena_tail;
	*off = pad ? 0 : pos;
	c->arena_tail += pad + len;
	return 0;
}

/* Fills the reserved slot with e (its bytes already placed), publishes it. */
static void
publish(struct cp_client *c, const struct cp_sqe *e, uint32_t start)
{
	uint32_t slot = ring_slot(c->sq_tail, c->sq_entries - 1);

	c->slot_start[slot] = start;
	ring_copy_in(&c->sq[slot], e, sizeof(*e));
	ring_store_release(&c->ctl->sq_tail.v, ++c->sq_tail);
	wake_daemon(c);
}

/* One entry: reserve, copy the two byte runs (a then b) into the arena, publish. */
static int
put_entry(struct cp_client *c, struct cp_sqe *e, const void *a, uint32_t alen,
    const void *b, uint32_t blen, uint64_t end)
{
	uint32_t start, off;
	int r;

	if ((r = reserve(c, alen + blen, end, &start, &off)) < 0)
		return r;
	if (alen > 0)
		memcpy(c->arena + off, a, alen);
	if (blen > 0)
		memcpy(c->arena + off + alen, b, blen);
	e->arena_off = alen + blen > 0 ? off : 0;
	e->arena_len = alen + blen;
	publish(c, e, start);
	return 0;
}

static int
params_to_wire(const struct cp_params *p, struct cp_wire_params *w,
    char *stops, uint32_t *stop_bytes)
{
	size_t i, n, used = 0;

	if (!(p->temperature >= 0.0f && p->temperature <= 100.0f) ||
	    !(p->top_p > 0.0f && p->top_p <= 1.0f) ||
	    !(p->min_p >= 0.0f && p->min_p <= 1.0f) ||
	    !(p->repeat_penalty > 0.0f && p->repeat_penalty <= 16.0f) ||
	    p->top_k < 0 || p->top_k > CP_PARAM_TOPK_MAX ||
	    p->repeat_last_n > CP_PARAM_LASTN_MAX ||
	    p->n_stop > CP_STOP_MAX || (p->n_stop > 0 && p->stop == NULL))
		return -EINVAL;
	for (i = 0; i < p->n_stop; i++) {
		if (p->stop[i] == NULL)
			return -EINVAL;
		n = strlen(p->stop[i]);
		if (n == 0 || used + n + 1 > CP_STOP_BYTES_MAX)
			return -EINVAL;
		memcpy(stops + used, p->stop[i], n + 1);
		used += n + 1;
	}
	memset(w, 0, sizeof(*w));
	w->max_tokens = p->max_tokens;
	w->temperature = p->temperature;
	w->top_p = p->top_p;
	w->min_p = p->min_p;
	w->repeat_penalty = p->repeat_penalty;
	w->top_k = p->top_k;
	w->repeat_last_n = p->repeat_last_n;
	if (p->use_seed) {
		w->flags |= CP_PF_SEED;
		w->seed = p->seed;
	}
	if (p->logprobs < 0 || p->logprobs > CP_TOP_LOGPROBS_MAX)
		return -EINVAL;
	if (p->logprobs)
		w->flags |= CP_PF_LOGPROB;
	*stop_bytes = (uint32_t)used;
	return 0;
}

_Static_assert(CP_GRAMMAR_GBNF == CP_GRAM_GBNF &&
    CP_GRAMMAR_JSON_SCHEMA == CP_GRAM_SCHEMA && CP_GRAMMAR_JSON == CP_GRAM_JSON &&
    CP_GRAMMAR_MAX_BYTES == CP_GRAMMAR_BYTES_MAX, "grammar kinds");

/*
 * p's grammar into e (kind flag, grammar_bytes); *pad gets the bytes its
 * text takes at the head of the prompt stream (0 without text).  0,
 * -EINVAL, -E2BIG, or -EOPNOTSUPP where the daemon has no grammars.
 */
static int
grammar_to_wire(const struct cp_client *c, const struct cp_params *p,
    struct cp_sqe *e, uint32_t *pad)
{
	*pad = 0;
	if (p->grammar_kind == CP_GRAMMAR_NONE)
		return 0;
	if (p->grammar_kind != CP_GRAMMAR_GBNF &&
	    p->grammar_kind != CP_GRAMMAR_JSON_SCHEMA &&
	    p->grammar_kind != CP_GRAMMAR_JSON)
		return -EINVAL;
	if (p->grammar_kind == CP_GRAMMAR_JSON ? p->grammar_len != 0 :
	    p->grammar_len == 0 || p->grammar == NULL)
		return -EINVAL;
	if (p->grammar_len > CP_GRAMMAR_MAX_BYTES)
		return -E2BIG;
	if (!(c->features & CP_FEAT_GRAMMAR))
		return -EOPNOTSUPP;
	e->params.flags |= CP_PF_GRAMMAR(p->grammar_kind);
	e->grammar_bytes = (uint32_t)p->grammar_len;
	*pad = (uint32_t)(p->grammar_len + 3) / 4 * 4;
	return 0;
}

/* Raises the longest top-n list asked for on c to n. */
static void
ask_top(struct cp_client *c, uint32_t n)
{
	uint32_t was = __atomic_load_n(&c->top_asked, __ATOMIC_SEQ_CST);

	while (was < n && !__atomic_compare_exchange_n(&c->top_asked, &was,
	    n, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}

/*
 * Submits len prompt bytes (a multiple of unit) with SUBMIT flags flags
 * besides MORE and TOKENS; returns the id or an error.
 */
static int
submit(struct cp_client *c, const unsigned char *prompt, size_t len,
    uint32_t unit, uint8_t flags, const struct cp_params *p)
{
	char stops[CP_STOP_BYTES_MAX];
	struct cp_params def;
	struct cp_sqe e;
	uint32_t stop_bytes = 0, frag_max, first, done, id, pad;
	unsigned char *body = NULL;
	uint64_t end;
	int r;

	if (p == NULL)
		cp_params_init(&def);
	else if ((r = cpc_copy_in(&def, sizeof(def), p, CPC_PARAMS_MIN)) < 0)
		return r;
	p = &def;
	memset(&e, 0, sizeof(e));
	if ((r = params_to_wire(p, &e.params, stops, &stop_bytes)) < 0)
		return r;
	/* Asked of a daemon that does not offer it: quietly no progress. */
	if (p->progress && (c->features & CP_FEAT_PROGRESS))
		e.params.flags |= CP_PF_PROGRESS;
	if (p->logprobs > 0 && (c->features & CP_FEAT_TOPN))
		e.params.flags |= CP_PF_TOPN(p->logprobs);
	/* Ignoring it would generate what the caller wanted refused. */
	if (p->strict && !(c->features & CP_FEAT_STRICT))
		return -EOPNOTSUPP;
	if (p->strict)
		e.params.flags |= CP_PF_STRICT;
	if (len > c->max_prompt)
		return -E2BIG;
	if ((len > 0 && prompt == NULL) || len % unit != 0)
		return -EINVAL;
	if ((r = grammar_to_wire(c, p, &e, &pad)) < 0)
		return r;
	if (pad > 0) {
		/* the stream: the text, zero padding, then the prompt */
		if ((body = calloc(1, pad + len)) == NULL)
			return -ENOMEM;
		memcpy(body, p->grammar, p->grammar_len);
		if (len > 0)
			memcpy(body + pad, prompt, len);
		prompt = body;
		len += pad;
	}
	pthread_mutex_lock(&c->sq_lock);
	if ((r = cpc_broken(c)) < 0)
		goto out;
	if (__atomic_load_n(&c->gone, __ATOMIC_SEQ_CST)) {
		r = CP_EDEAD;
		goto out;
	}
	if (__atomic_load_n(&c->live, __ATOMIC_SEQ_CST) >= c->max_reqs) {
		r = -EBUSY;
		goto out;
	}
	id = __atomic_load_n(&c->last_id, __ATOMIC_SEQ_CST) + 1;
	if (id > INT_MAX) {
		r = -EOVERFLOW;
		goto out;
	}
	/* Fragments of a quarter arena always fit once the ring drains. */
	frag_max = (c->arena_bytes / 4) / unit * unit;
	first = (uint32_t)(len < frag_max - stop_bytes ? len :
	    (frag_max - stop_bytes) / unit * unit);
	end = cpc_now_ms() + (uint64_t)c->timeout_ms;

	e.op = CP_OP_SUBMIT;
	e.flags = flags | (unit == 4 ? CP_SQF_TOKENS : 0) |
	    (first < len ? CP_SQF_MORE : 0);
	e.stop_bytes = (uint16_t)stop_bytes;
	e.req_id = id;
	/*
	 * Counted before it is published: a consumer thread may read its
	 * events before put_entry() returns.  Taken back if never published.
	 */
	__atomic_store_n(&c->last_id, id, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&c->live, 1, __ATOMIC_SEQ_CST);
	if (e.params.flags & CP_PF_PROGRESS)
		__atomic_store_n(&c->progress_asked, 1, __ATOMIC_SEQ_CST);
	if (e.params.flags & CP_PF_TOPN_BITS)
		ask_top(c, (e.params.flags & CP_PF_TOPN_BITS) >>
		    CP_PF_TOPN_SHIFT);
	if ((r = put_entry(c, &e, stops, stop_bytes, prompt, first, end)) < 0) {
		__atomic_store_n(&c->last_id, id - 1, __ATOMIC_SEQ_CST);
		__atomic_sub_fetch(&c->live, 1, __ATOMIC_SEQ_CST);
		goto out;
	}
	for (done = first; done < len; done += first) {
		first = (uint32_t)(len - done < frag_max ? len - done :
		    frag_max);
		memset(&e, 0, sizeof(e));
		e.op = CP_OP_APPEND;
		e.flags = done + first < len ? CP_SQF_MORE : 0;
		e.req_id = id;
		r = put_entry(c, &e, prompt + done, first, NULL, 0, end);
		if (r == 0)
			continue;
		/* Abandon the half-sent prompt so the ring stays usable. */
		memset(&e, 0, sizeof(e));
		e.op = CP_OP_CANCEL;
		e.req_id = id;
		if (r == -ETIMEDOUT && put_entry(c, &e, NULL, 0, NULL, 0,
		    cpc_now_ms() + (uint64_t)c->timeout_ms) < 0)
			cpc_fail(c, -ETIMEDOUT);
		__atomic_sub_fetch(&c->live, 1, __ATOMIC_SEQ_CST);
		goto out;
	}
	r = (int)id;
out:
	pthread_mutex_unlock(&c->sq_lock);
	free(body);
	return r;
}

int
cp_submit_v1(struct cp_client *c, const char *prompt, size_t len,
    const struct cp_params *p)
{
	return submit(c, (const unsigned char *)prompt, len, 1, 0, p);
}

int
cp_submit_tokens_v1(struct cp_client *c, const int32_t *ids, size_t n,
    const struct cp_params *p)
{
	if (n > SIZE_MAX / 4)
		return -E2BIG;
	return submit(c, (const unsigned char *)ids, n * 4, 4, 0, p);
}

_Static_assert(CP_CHAT_SYSTEM == CP_ROLE_SYSTEM && CP_CHAT_USER == CP_ROLE_USER &&
    CP_CHAT_ASSISTANT == CP_ROLE_ASSISTANT && CP_CHAT_TOOL == CP_ROLE_TOOL &&
    CP_CHAT_TOOL + 1 == CP_ROLES, "chat roles");

#define MSG_MIN	(offsetof(struct cp_message, len) + sizeof(size_t))

int
cp_submit_chat_v1(struct cp_client *c, const struct cp_message *msgs,
    size_t n, size_t msg_size, const struct cp_params *p)
{
	const unsigned char *base = (const unsigned char *)msgs;
	struct cp_chat_hdr h;
	struct cp_chat_msg w;
	struct cp_message m;
	struct cp_params def;
	unsigned char *blk;
	size_t i, total = sizeof(h), off;
	int r;

	if (!(c->features & CP_FEAT_CHAT))
		return -EOPNOTSUPP;
	if (n == 0 || n > CP_CHAT_MAX_MSGS || msgs == NULL ||
	    msg_size < MSG_MIN)
		return -EINVAL;
	if (p == NULL)
		cp_params_init(&def);
	else if ((r = cpc_copy_in(&def, sizeof(def), p, CPC_PARAMS_MIN)) < 0)
		return r;
	for (i = 0; i < n; i++) {
		memcpy(&m, base + i * msg_size, MSG_MIN);
		if (m.role < CP_CHAT_SYSTEM || m.role > CP_CHAT_TOOL ||
		    (m.content == NULL && m.len > 0) || m.len > UINT32_MAX ||
		    cp_utf8_bad((const uint8_t *)m.content, m.len) != m.len)
			return -EINVAL;
		if (m.len > c->max_prompt)
			return -E2BIG;
		total += sizeof(w) + (m.len + 3) / 4 * 4;
		if (total > c->max_prompt)
			return -E2BIG;
	}
	if ((blk = calloc(1, total)) == NULL)
		return -ENOMEM;
	h.n_msgs = (uint32_t)n;
	h.flags = def.no_generation_prompt ? 0 : CP_CHAT_GEN;
	memcpy(blk, &h, sizeof(h));
	for (i = 0, off = sizeof(h); i < n; i++) {
		memcpy(&m, base + i * msg_size, MSG_MIN);
		w.role = (uint32_t)m.role;
		w.len = (uint32_t)m.len;
		memcpy(blk + off, &w, sizeof(w));
		if (m.len > 0)
			memcpy(blk + off + sizeof(w), m.content, m.len);
		off += sizeof(w) + (m.len + 3) / 4 * 4;
	}
	r = submit(c, blk, total, 1, CP_SQF_CHAT, &def);
	free(blk);
	return r;
}

int
cp_cancel(struct cp_client *c, int req_id)
{
	struct cp_sqe e;
	int r;

	memset(&e, 0, sizeof(e));
	e.op = CP_OP_CANCEL;
	e.req_id = (uint32_t)req_id;
	pthread_mutex_lock(&c->sq_lock);
	/* Under the lock: an id being submitted is either published or not. */
	r = cpc_broken(c);
	if (r == 0 && __atomic_load_n(&c->gone, __ATOMIC_SEQ_CST))
		r = CP_EDEAD;
	if (r == 0 && (req_id <= 0 || (uint32_t)req_id >
	    __atomic_load_n(&c->last_id, __ATOMIC_SEQ_CST)))
		r = -EINVAL;
	if (r == 0)
		r = put_entry(c, &e, NULL, 0, NULL, 0,
		    cpc_now_ms() + (uint64_t)c->timeout_ms);
	pthread_mutex_unlock(&c->sq_lock);
	return r;
}

/* ---- events ------------------------------------------------------------ */

static int
text_reserve(struct cp_client *c, size_t need)
{
	char *n;
	size_t cap;

	if (need <= c->text_cap)
		return 0;
	cap = c->text_cap ? c->text_cap : 256;
	while (cap < need)
		cap *= 2;
	n = realloc(c->text, cap);
	if (n == NULL)
		return -ENOMEM;
	c->text = n;
	c->text_cap = cap;
	return 0;
}

/*
 * A PROGRESS CQE as cp_proto.h defines it: asked for on this connection,
 * 0 < n_prompt <= n_total, alone (no text, no continuation), no token.
 */
static int
progress_ok(struct cp_client *c, const struct cp_cqe *q)
{
	return __atomic_load_n(&c->progress_asked, __ATOMIC_SEQ_CST) &&
	    q->n_prompt > 0 && q->n_prompt <= q->n_total &&
	    q->text_len == 0 && q->flags == 0 && q->finish == 0 &&
	    q->token == -1;
}

/*
 * The entries of a CP_EV_TOP continuation q into c's top-n list after the
 * *got already taken, of n_top (cp_proto.h, TOP-N rules 2 and 3); 0, or
 * CP_EPROTO.
 */
static int
take_top(struct cp_client *c, const struct cp_cqe *q, uint32_t n_top,
    uint32_t *got)
{
	struct cp_top t;
	uint32_t i, k = q->text_len / (uint32_t)sizeof(t);

	if (q->text_len == 0 || q->text_len % sizeof(t) != 0 ||
	    k > n_top - *got)
		return CP_EPROTO;
	for (i = 0; i < k; i++) {
		memcpy(&t, q->text + i * sizeof(t), sizeof(t));
		if (t.id < 0 || (uint32_t)t.id >= c->info.n_vocab ||
		    !(t.logprob <= 0.0f && t.logprob >= -FLT_MAX) ||
		    (*got > 0 && t.logprob > c->top_lp[*got - 1]))
			return CP_EPROTO;
		c->top_ids[*got] = t.id;
		c->top_lp[(*got)++] = t.logprob;
	}
	return 0;
}

/*
 * The head q of a group as cp_proto.h allows it: a known type for a
 * submitted request, and a top-n list only on a sampled TOKEN and no
 * longer than any asked for on this connection.
 */
static int
head_ok(struct cp_client *c, const struct cp_cqe *q, uint32_t last)
{
	if ((q->type != CP_EV_TOKEN && q->type != CP_EV_DONE &&
	    q->type != CP_EV_ERROR && q->type != CP_EV_PROGRESS) ||
	    q->req_id == 0 || q->req_id > last || q->finish > CP_FINISH_MAX ||
	    (q->type == CP_EV_PROGRESS && !progress_ok(c, q)))
		return 0;
	return q->type != CP_EV_TOKEN || q->n_top == 0 ||
	    (q->token >= 0 && q->n_top <= CP_TOPN_MAX &&
	    q->n_top <= __atomic_load_n(&c->top_asked, __ATOMIC_SEQ_CST));
}

/*
 * Takes one whole event group from the CQ into *ev.  Returns 1, 0 when the
 * ring is empty, or CP_EPROTO / -ENOMEM.
 */
static int
take_event(struct cp_client *c, struct cp_event *ev)
{
	uint32_t tail, i, n, mask = c->cq_entries - 1;
	uint32_t last = __atomic_load_n(&c->last_id, __ATOMIC_SEQ_CST);
	uint32_t n_top = 0, got = 0;
	struct cp_cqe q, first;
	size_t used = 0;

	tail = ring_load_acquire(&c->ctl->cq_tail.v);
	if (!ring_sane(tail, c->cq_head, c->cq_entries))
		return cpc_fail(c, CP_EPROTO);
	n = ring_count(tail, c->cq_head);
	if (n == 0)
		return 0;
	memset(&q, 0, sizeof(q));
	memset(&first, 0, sizeof(first));
	for (i = 0; i < n; i++) {
		ring_copy_out(&q, &c->cq[ring_slot(c->cq_head + i, mask)],
		    sizeof(q));
		if (i == 0) {
			first = q;
			if (!head_ok(c, &q, last))
				return cpc_fail(c, CP_EPROTO);
			if (q.type == CP_EV_TOKEN)
				n_top = q.n_top;
		} else if (q.req_id != first.req_id ||
		    (q.type != CP_EV_TEXT && q.type != CP_EV_TOP) ||
		    (q.type == CP_EV_TEXT && got > 0)) {
			return cpc_fail(c, CP_EPROTO);
		}
		if (q.text_len > CP_CQE_TEXT || (q.flags & ~CP_CQF_MORE))
			return cpc_fail(c, CP_EPROTO);
		if (i > 0 && q.type == CP_EV_TOP) {
			if (take_top(c, &q, n_top, &got) < 0)
				return cpc_fail(c, CP_EPROTO);
		} else {
			if (used + q.text_len > CP_EVENT_TEXT_MAX)
				return cpc_fail(c, CP_EPROTO);
			if (text_reserve(c, used + q.text_len + 1) < 0)
				return -ENOMEM;
			memcpy(c->text + used, q.text, q.text_len);
			used += q.text_len;
		}
		if (!(q.flags & CP_CQF_MORE))
			break;
	}
	if (i == n)
		return cpc_fail(c, CP_EPROTO);	/* half a group (invariant 5) */
	if (got != n_top)
		return cpc_fail(c, CP_EPROTO);	/* TOP-N rule 2 */
	c->text[used] = '\0';
	c->cq_head += i + 1;
	ring_store_release(&c->ctl->cq_head.v, c->cq_head);

	memset(ev, 0, sizeof(*ev));
	ev->req_id = (int)first.req_id;
	ev->text = c->text;
	ev->text_len = used;
	ev->token = -1;
	ev->step = first.step;
	switch (first.type) {
	case CP_EV_TOKEN:
		ev->type = CP_EVENT_TOKEN;
		ev->token = first.token;
		ev->logprob = first.logprob;
		if (n_top > 0) {
			ev->n_top = n_top;
			ev->top_ids = c->top_ids;
			ev->top_logprobs = c->top_lp;
		}
		return 1;
	case CP_EV_PROGRESS:
		ev->type = CP_EVENT_PROGRESS;
		ev->n_prompt = first.n_prompt;
		ev->n_total = first.n_total;
		return 1;
	case CP_EV_DONE:
		ev->type = CP_EVENT_DONE;
		ev->finish = first.finish;
		ev->n_cached = first.n_cached <= first.n_prompt ?
		    first.n_cached : 0;
		break;
	default:
		ev->type = CP_EVENT_ERROR;
		ev->error = first.error < 0 ? first.error : CP_EPROTO;
		break;
	}
	ev->n_prompt = first.n_prompt;
	ev->n_gen = first.n_gen;
	if (__atomic_load_n(&c->live, __ATOMIC_SEQ_CST) > 0)
		__atomic_sub_fetch(&c->live, 1, __ATOMIC_SEQ_CST);
	return 1;
}

/* Empties the CQ wake pipe; sets gone on end-of-file. */
static void
drain_pipe(struct cp_client *c)
{
	char buf[128];
	ssize_t n;

	for (;;) {
		n = read(c->cq_rfd, buf, sizeof(buf));
		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			__atomic_store_n(&c->gone, 1, __ATOMIC_SEQ_CST);
		return;
	}
}

/* Sleeps until the CQ may have changed, the daemon is gone, or ms pass. */
static void
sleep_for_events(struct cp_client *c, uint32_t seen_tail, int ms)
{
	struct pollfd p[2];
	struct timespec ts;

	if (c->wake_mode == CP_WAKE_FUTEX) {
		if (ms > WAIT_SLICE_MS)
			ms = WAIT_SLICE_MS;
		ts.tv_sec = ms / 1000;
		ts.tv_nsec = (long)(ms % 1000) * 1000000;
		syscall(SYS_futex, &c->ctl->cq_tail.v, FUTEX_WAIT, seen_tail,
		    &ts, NULL, 0);
		return;
	}
	p[0].fd = c->cq_rfd;
	p[0].events = POLLIN;
	p[1].fd = c->sock;
	p[1].events = POLLRDHUP;
	p[0].revents = p[1].revents = 0;
	if (poll(p, 2, ms) > 0 && (p[0].revents & POLLIN))
		drain_pipe(c);
}

static int
next_event(struct cp_client *c, struct cp_event *ev, int timeout_ms)
{
	uint64_t end = 0;
	uint32_t tail;
	int r, wait_fd, left;

	if (timeout_ms > 0)
		end = cpc_now_ms() + (uint64_t)timeout_ms;
	pthread_mutex_lock(&c->cq_lock);
	wait_fd = (__atomic_load_n(&c->ctl->client_waiting.v,
	    __ATOMIC_RELAXED) & CP_WAIT_FD) != 0;
	for (;;) {
		if ((r = cpc_broken(c)) < 0)
			break;
		/* Drain first: a wake-up that races with the check is kept. */
		if (wait_fd)
			drain_pipe(c);
		if ((r = take_event(c, ev)) != 0) {
			if (r > 0)
				r = 0;
			break;
		}
		if (__atomic_load_n(&c->gone, __ATOMIC_SEQ_CST) ||
		    cpc_daemon_gone(c)) {
			/* Gone: but first whatever it wrote before dying. */
			if ((r = take_event(c, ev)) == 0)
				r = CP_EDEAD;
			else if (r > 0)
				r = 0;
			break;
		}
		if (timeout_ms == 0) {
			r = -EAGAIN;
			break;
		}
		left = WAIT_SLICE_MS * 20;
		if (timeout_ms > 0) {
			uint64_t now = cpc_now_ms();

			if (now >= end) {
				r = -ETIMEDOUT;
				break;
			}
			if (end - now < (uint64_t)left)
				left = (int)(end - now);
		}
		/* Invariant 6: flag, fence, re-check, sleep. */
		__atomic_fetch_or(&c->ctl->client_waiting.v, CP_WAIT_SLEEP,
		    __ATOMIC_SEQ_CST);
		ring_fence();
		tail = ring_load_acquire(&c->ctl->cq_tail.v);
		if (tail == c->cq_head)
			sleep_for_events(c, tail, left);
		__atomic_fetch_and(&c->ctl->client_waiting.v, ~CP_WAIT_SLEEP,
		    __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&c->cq_lock);
	return r;
}

int
cp_event_fd(struct cp_client *c)
{
	__atomic_fetch_or(&c->ctl->client_waiting.v, CP_WAIT_FD,
	    __ATOMIC_SEQ_CST);
	return c->cq_rfd;
}

int
cp_next_event_v1(struct cp_client *c, struct cp_event *ev, size_t size,
    int timeout_ms)
{
	struct cp_event e;
	int r;

	if (size < CPC_EVENT_MIN)
		return -EINVAL;
	memset(&e, 0, sizeof(e));
	if ((r = next_event(c, &e, timeout_ms)) == 0)
		(void)cpc_copy_out(ev, size, &e, sizeof(e), CPC_EVENT_MIN);
	return r;
}
