/*
 * http_gen.c - one generation of cpd-http: its own libcpclient connection,
 * the submission, the wait for events, and the non-streamed answer.
 *
 * Invariants:
 *  1. A struct http_gen owns one connection and at most one request on it;
 *     http_gen_free() is the only place that closes it, after cancelling
 *     a request not yet ended (cp_close() alone would cancel it too, when
 *     the daemon sees the hang-up; cp_cancel() reaches it in the next SQ
 *     drain).
 *  2. A wait never blocks on the daemon alone: it polls the client's event
 *     descriptor and the HTTP socket (POLLRDHUP) together, so a hang-up of
 *     the HTTP client is seen within one poll and cancels the request.
 *  3. The text collected for one answer is bounded (MAX_ANSWER); the
 *     daemon bounds it anyway by the context.
 */
#include "http.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "tokfmt.h"

#define MAX_ANSWER	(16u << 20)
#define POLL_MS		500

int http_stopping;

static void
make_id(struct http_gen *g)
{
	unsigned char b[12];
	size_t i, at;

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		memset(b, 0, sizeof(b));
	at = (size_t)snprintf(g->cid, sizeof(g->cid), "%s",
	    g->rq.kind == HTTP_CHAT ? "chatcmpl-" : "cmpl-");
	for (i = 0; i < sizeof(b); i++)
		at += (size_t)snprintf(g->cid + at, sizeof(g->cid) - at,
		    "%02x", b[i]);
}

int
http_gen_start(struct http_gen *g, const struct http_cfg *cfg, int conn_fd,
    struct http_error *e)
{
	struct cp_model_info mi;
	struct http_req *r = &g->rq;
	int id;

	g->conn_fd = conn_fd;
	g->created = (long long)time(NULL);
	make_id(g);
	if (http_info_connect(cfg, &g->c, e) < 0)
		return -1;
	if (cp_model_info(g->c, &mi) == 0)
		snprintf(g->model, sizeof(g->model), "%s", mi.name);
	/* The library fills the list only for n > 0: ask for one at least. */
	r->p.logprobs = !r->logprobs ? 0 :
	    r->top_logprobs > 1 ? r->top_logprobs : 1;
	if (r->kind == HTTP_CHAT)
		id = cp_submit_chat(g->c, r->msgs, r->n_msgs, &r->p);
	else if (r->ids != NULL)
		id = cp_submit_tokens(g->c, r->ids, r->n_ids, &r->p);
	else
		id = cp_submit(g->c, r->prompt, r->prompt_len, &r->p);
	if (id == -EOPNOTSUPP && r->grammar_field != NULL)
		return http_error_set(e, 400, "unsupported_parameter",
		    r->grammar_field, "%s: cpd: %s (a daemon without "
		    "grammars?)", r->grammar_field, cp_strerror(id));
	if (id < 0)
		return http_error_cp(e, id, "submit");
	g->id = id;
	return 0;
}

int
http_gen_next(struct http_gen *g, struct cp_event *ev)
{
	struct pollfd pf[2];
	int r;

	for (;;) {
		r = cp_next_event(g->c, ev, 0);
		if (r == 0 && ev->type == CP_EVENT_PROGRESS)
			continue;
		if (r == 0 && ev->req_id == g->id &&
		    (ev->type == CP_EVENT_DONE || ev->type == CP_EVENT_ERROR))
			g->ended = 1;
		if (r != -EAGAIN)
			return r;
		if (__atomic_load_n(&http_stopping, __ATOMIC_RELAXED))
			return -ESHUTDOWN;
		pf[0].fd = cp_event_fd(g->c);
		pf[0].events = POLLIN;
		pf[1].fd = g->conn_fd;
		pf[1].events = POLLRDHUP;
		pf[0].revents = pf[1].revents = 0;
		if (poll(pf, g->conn_fd >= 0 ? 2 : 1, POLL_MS) < 0 &&
		    errno != EINTR)
			return -errno;
		if (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
			return -ECONNRESET;
	}
}

void
http_gen_cancel(struct http_gen *g)
{
	if (g->c != NULL && g->id > 0 && !g->ended)
		(void)cp_cancel(g->c, g->id);
}

void
http_gen_free(struct http_gen *g)
{
	if (g == NULL)
		return;
	http_gen_cancel(g);
	cp_close(g->c);
	http_req_fini(&g->rq);
	free(g->out.p);
	free(g);
}

const char *
http_finish_reason(int finish)
{
	switch (finish) {
	case CP_DONE_STOP:
		return "stop";
	case CP_DONE_LENGTH:
	case CP_DONE_CONTEXT:
		return "length";
	default:
		return "cancelled";
	}
}

json_t *
http_usage(const struct cp_event *ev)
{
	uint32_t cached = ev->type == CP_EVENT_DONE ? ev->n_cached : 0;

	return json_pack("{s:I, s:I, s:I, s:{s:I}}",
	    "prompt_tokens", (json_int_t)ev->n_prompt,
	    "completion_tokens", (json_int_t)ev->n_gen,
	    "total_tokens", (json_int_t)ev->n_prompt + (json_int_t)ev->n_gen,
	    "prompt_tokens_details", "cached_tokens", (json_int_t)cached);
}

/* A sampled token and its alternatives, named by one cp_detokenize(). */
struct names {
	int32_t ids[1 + CP_TOP_LOGPROBS_MAX];	/* the token, then the list */
	uint32_t lens[1 + CP_TOP_LOGPROBS_MAX];
	size_t n;			/* ids */
	int ok;				/* buf and lens hold their pieces */
	char *buf;			/* small or allocated */
	char small[1024];
};

/*
 * Names ev's token and the first rq.top_logprobs ids of its list (a
 * daemon that cannot name tokens leaves nm->ok 0).
 */
static void
names_get(struct http_gen *g, const struct cp_event *ev, struct names *nm)
{
	size_t i, total = 0;
	int r;

	nm->n = 1;
	nm->ids[0] = ev->token;
	for (i = 0; i < ev->n_top && i < (size_t)g->rq.top_logprobs &&
	    i < CP_TOP_LOGPROBS_MAX; i++)
		nm->ids[nm->n++] = ev->top_ids[i];
	nm->buf = nm->small;
	r = cp_detokenize(g->c, nm->ids, nm->n, nm->buf, sizeof(nm->small),
	    nm->lens, 0);
	if (r == -ENOSPC) {
		for (i = 0; i < nm->n; i++)
			total += nm->lens[i];
		if ((nm->buf = malloc(total)) == NULL) {
			nm->buf = nm->small;
			return;
		}
		r = cp_detokenize(g->c, nm->ids, nm->n, nm->buf, total,
		    nm->lens, 0);
	}
	nm->ok = r >= 0;
}

static void
names_free(struct names *nm)
{
	if (nm->buf != nm->small)
		free(nm->buf);
}

/* Piece i of nm (0: the token itself; ev's text where nm has none). */
static const char *
names_piece(const struct names *nm, const struct cp_event *ev, size_t i,
    size_t *len)
{
	const char *p = nm->buf;
	size_t j;

	if (!nm->ok) {
		*len = ev->text_len;
		return ev->text;
	}
	for (j = 0; j < i; j++)
		p += nm->lens[j];
	*len = nm->lens[i];
	return p;
}

/* s[0..n) as a JSON string, invalid UTF-8 as U+FFFD (tokfmt_utf8()). */
static json_t *
token_text(const char *s, size_t n)
{
	char small[192], *buf = small;
	json_t *j;

	if (n > sizeof(small) / 3 && (buf = malloc(3 * n)) == NULL)
		return NULL;
	j = json_stringn(buf, tokfmt_utf8(s, n, buf));
	if (buf != small)
		free(buf);
	return j;
}

/* s[0..n) as an array of byte values. */
static json_t *
token_bytes(const char *s, size_t n)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a != NULL && i < n; i++)
		json_array_append_new(a, json_integer((unsigned char)s[i]));
	return a;
}

/* {"token", "logprob", "bytes"} of the piece s[0..n). */
static json_t *
token_json(const char *s, size_t n, float logprob)
{
	return json_pack("{s:o, s:f, s:o}", "token", token_text(s, n),
	    "logprob", (double)logprob, "bytes", token_bytes(s, n));
}

json_t *
http_logprob_entry(struct http_gen *g, const struct cp_event *ev)
{
	struct names nm = { .ok = 0 };
	json_t *top = json_array(), *entry;
	const char *p;
	size_t i, len;

	names_get(g, ev, &nm);
	for (i = 1; nm.ok && top != NULL && i < nm.n; i++) {
		p = names_piece(&nm, ev, i, &len);
		json_array_append_new(top, token_json(p, len,
		    ev->top_logprobs[i - 1]));
	}
	p = names_piece(&nm, ev, 0, &len);
	entry = token_json(p, len, ev->logprob);
	if (entry != NULL && top != NULL)
		json_object_set_new(entry, "top_logprobs", top);
	else {
		json_decref(entry);
		json_decref(top);
		entry = NULL;
	}
	names_free(&nm);
	return entry;
}

json_t *
http_logprobs_text_new(void)
{
	return json_pack("{s:[], s:[], s:[], s:[]}", "tokens",
	    "token_logprobs", "top_logprobs", "text_offset");
}

int
http_logprobs_text_add(struct http_gen *g, json_t *lp,
    const struct cp_event *ev, size_t offset)
{
	struct names nm = { .ok = 0 };
	json_t *top = json_object(), *t;
	const char *p;
	size_t i, len;
	int r = 0;

	names_get(g, ev, &nm);
	for (i = 1; nm.ok && top != NULL && i < nm.n; i++) {
		p = names_piece(&nm, ev, i, &len);
		if ((t = token_text(p, len)) == NULL)
			continue;
		/* Two ids may read the same: the likelier one stays. */
		if (json_object_get(top, json_string_value(t)) == NULL)
			json_object_set_new(top, json_string_value(t),
			    json_real((double)ev->top_logprobs[i - 1]));
		json_decref(t);
	}
	p = names_piece(&nm, ev, 0, &len);
	if (top == NULL ||
	    json_array_append_new(json_object_get(lp, "tokens"),
	    token_text(p, len)) < 0 ||
	    json_array_append_new(json_object_get(lp, "token_logprobs"),
	    json_real((double)ev->logprob)) < 0 ||
	    json_array_append_new(json_object_get(lp, "top_logprobs"),
	    top) < 0 ||
	    json_array_append_new(json_object_get(lp, "text_offset"),
	    json_integer((json_int_t)offset)) < 0)
		r = -ENOMEM;
	names_free(&nm);
	return r;
}

int
http_buf_add(struct http_buf *b, const char *s, size_t n, size_t max)
{
	char *p;
	size_t cap;

	if (n == 0)
		return 0;
	if (b->len > max || n > max - b->len)
		return -E2BIG;
	if (b->len + n + 1 > b->cap) {
		cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		if ((p = realloc(b->p, cap)) == NULL)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

/* The answer collected so far. */
struct answer {
	struct http_buf text;
	json_t *lp;		/* chat: logprobs.content entries; text: the
				   logprobs object; NULL: none wanted */
};

static json_t *
answer_json(const struct http_gen *g, const struct answer *a,
    const struct cp_event *end)
{
	const char *finish = http_finish_reason(end->finish);
	json_t *text = json_stringn(a->text.p != NULL ? a->text.p : "",
	    a->text.len);
	json_t *choice;

	if (text == NULL)
		return NULL;	/* not UTF-8: the daemon never sends that */
	if (g->rq.kind == HTTP_CHAT)
		choice = json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", 0,
		    "message", "role", "assistant", "content", text,
		    "logprobs", a->lp != NULL ?
		    json_pack("{s:O}", "content", a->lp) : json_null(),
		    "finish_reason", finish);
	else
		choice = json_pack("{s:i, s:o, s:O?, s:s}", "index", 0, "text",
		    text, "logprobs", a->lp, "finish_reason", finish);
	return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", g->cid,
	    "object", g->rq.kind == HTTP_CHAT ? "chat.completion" :
	    "text_completion", "created", (json_int_t)g->created, "model",
	    g->model, "choices", choice, "usage", http_usage(end));
}

enum MHD_Result
http_gen_answer(struct http_gen *g, struct MHD_Connection *conn)
{
	struct answer a = { { NULL, 0, 0 }, NULL };
	struct http_error e;
	struct cp_event ev;
	enum MHD_Result ret;
	json_t *body;
	int r;

	size_t off;

	if (g->rq.logprobs && (a.lp = g->rq.kind == HTTP_CHAT ? json_array() :
	    http_logprobs_text_new()) == NULL)
		return MHD_NO;
	for (;;) {
		if ((r = http_gen_next(g, &ev)) == -ECONNRESET) {
			http_gen_cancel(g);
			ret = MHD_NO;
			goto out;
		}
		if (r < 0) {
			http_error_cp(&e, r, "generation");
			ret = http_error_send(conn, &e);
			goto out;
		}
		if (ev.type == CP_EVENT_ERROR) {
			http_error_event(&e, &ev, &g->rq);
			ret = http_error_send(conn, &e);
			goto out;
		}
		off = a.text.len;
		if ((r = http_buf_add(&a.text, ev.text, ev.text_len,
		    MAX_ANSWER)) < 0) {
			http_gen_cancel(g);
			http_error_set(&e, 500, NULL, NULL, "answer: %s",
			    cp_strerror(r));
			ret = http_error_send(conn, &e);
			goto out;
		}
		if (a.lp != NULL && ev.type == CP_EVENT_TOKEN &&
		    ev.token >= 0 && (g->rq.kind == HTTP_CHAT ?
		    json_array_append_new(a.lp, http_logprob_entry(g, &ev)) :
		    http_logprobs_text_add(g, a.lp, &ev, off)) < 0) {
			http_gen_cancel(g);
			http_error_set(&e, 500, NULL, NULL, "out of memory");
			ret = http_error_send(conn, &e);
			goto out;
		}
		if (ev.type == CP_EVENT_DONE)
			break;
	}
	if ((body = answer_json(g, &a, &ev)) == NULL) {
		http_error_set(&e, 500, NULL, NULL, "cannot encode the answer");
		ret = http_error_send(conn, &e);
	} else
		ret = http_json_send(conn, 200, body);
out:
	free(a.text.p);
	json_decref(a.lp);
	return ret;
}
