/*
 * http_sse.c - a streamed answer ("stream": true) as server-sent events in
 * OpenAI's chunk format.
 *
 * The stream, each event a "data: JSON\n\n" line:
 *  1. The headers go out with the first event of the request, so a
 *     request the daemon refuses at once (its limits: 429) still gets its
 *     status and OpenAI's error object instead of a stream.
 *  2. Chat: a first chunk {"delta": {"role": "assistant", "content": ""}},
 *     then one chunk per event with text (and, with logprobs, one entry
 *     per sampled token), then a chunk with an empty delta and the
 *     finish_reason.  Completions: one chunk per text (with logprobs,
 *     one token of the logprobs object per sampled token), then the
 *     finish_reason.
 *  3. With stream_options.include_usage, a last chunk with "choices": []
 *     and "usage".
 *  4. An error after the headers is one data: {"error": {...}} event.
 *  5. The stream ends with "data: [DONE]\n\n".
 * libmicrohttpd asks for bytes with sse_read() from the connection's own
 * thread; it blocks there in http_gen_next(), which also sees the client
 * hang up: then the request is cancelled and the connection closed.
 * g->out holds the server-sent events of one daemon event at most.
 */
#include "http.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
out_add(struct http_gen *g, const char *s, size_t n)
{
	return http_buf_add(&g->out, s, n, SIZE_MAX);
}

/* Appends "data: JSON\n\n" for obj (taken). */
static int
out_event(struct http_gen *g, json_t *obj)
{
	char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
	int r;

	json_decref(obj);
	if (s == NULL)
		return -ENOMEM;
	r = out_add(g, "data: ", 6);
	if (r == 0)
		r = out_add(g, s, strlen(s));
	if (r == 0)
		r = out_add(g, "\n\n", 2);
	free(s);
	return r;
}

/* A chunk object around choice (taken); choice NULL: "choices": []. */
static json_t *
chunk(const struct http_gen *g, json_t *choice)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", g->cid, "object",
	    g->rq.kind == HTTP_CHAT ? "chat.completion.chunk" :
	    "text_completion", "created", (json_int_t)g->created, "model",
	    g->model, "choices", choice != NULL ? json_pack("[o]", choice) :
	    json_array());
}

/* A choice with text (n bytes, may be 0) and finish (NULL: null). */
static json_t *
choice(const struct http_gen *g, const char *text, size_t n,
    const char *finish, json_t *lp)
{
	json_t *delta;

	if (g->rq.kind == HTTP_TEXT)
		return json_pack("{s:i, s:s%, s:o?, s:s?}", "index", 0, "text",
		    text, n, "logprobs", lp, "finish_reason", finish);
	delta = finish != NULL && n == 0 ? json_object() :
	    json_pack("{s:s%}", "content", text, n);
	return json_pack("{s:i, s:o, s:o, s:s?}", "index", 0, "delta", delta,
	    "logprobs", lp != NULL ? lp : json_null(), "finish_reason",
	    finish);
}

static int
on_event(struct http_gen *g, const struct cp_event *ev)
{
	struct http_error e;
	json_t *lp = NULL;
	int r = 0;

	if (ev->type == CP_EVENT_ERROR) {
		http_error_event(&e, ev, &g->rq);
		return out_event(g, http_error_json(&e));
	}
	if (g->rq.logprobs && g->rq.kind == HTTP_CHAT && ev->token >= 0)
		lp = json_pack("{s:[o]}", "content", http_logprob_entry(g, ev));
	else if (g->rq.logprobs && ev->token >= 0 &&
	    (lp = http_logprobs_text_new()) != NULL &&
	    http_logprobs_text_add(g, lp, ev, g->text_off) < 0) {
		json_decref(lp);
		lp = NULL;
	}
	g->text_off += ev->text_len;
	if (ev->text_len > 0 || lp != NULL)
		r = out_event(g, chunk(g, choice(g, ev->text, ev->text_len,
		    NULL, lp)));
	if (r == 0 && ev->type == CP_EVENT_DONE)
		r = out_event(g, chunk(g, choice(g, "", 0,
		    http_finish_reason(ev->finish), NULL)));
	if (r == 0 && ev->type == CP_EVENT_DONE && g->rq.include_usage) {
		json_t *c = chunk(g, NULL);

		if (c != NULL)
			json_object_set_new(c, "usage", http_usage(ev));
		r = out_event(g, c);
	}
	return r;
}

static int
end_stream(struct http_gen *g)
{
	g->sse_done = 1;
	return out_add(g, "data: [DONE]\n\n", 14);
}

/* Waits for the next event and appends its server-sent events. */
static int
fill(struct http_gen *g)
{
	struct http_error e;
	struct cp_event ev;
	int r;

	if ((r = http_gen_next(g, &ev)) == -ECONNRESET)
		return r;
	if (r < 0) {
		http_error_cp(&e, r, "generation");
		r = out_event(g, http_error_json(&e));
		return r < 0 ? r : end_stream(g);
	}
	if ((r = on_event(g, &ev)) < 0)
		return r;
	return g->ended ? end_stream(g) : 0;
}

static ssize_t
sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_gen *g = cls;
	size_t n;

	(void)pos;
	while (g->out_off == g->out.len) {
		if (g->sse_done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		g->out_off = g->out.len = 0;
		if (fill(g) < 0) {
			http_gen_cancel(g);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	n = g->out.len - g->out_off;
	if (n > max)
		n = max;
	memcpy(buf, g->out.p + g->out_off, n);
	g->out_off += n;
	return (ssize_t)n;
}

enum MHD_Result
http_sse_answer(struct http_gen *g, struct MHD_Connection *conn)
{
	struct MHD_Response *res;
	struct http_error e;
	struct cp_event ev;
	enum MHD_Result ret;
	int r;

	if ((r = http_gen_next(g, &ev)) == -ECONNRESET) {
		http_gen_cancel(g);
		return MHD_NO;
	}
	if (r < 0) {
		http_error_cp(&e, r, "generation");
		return http_error_send(conn, &e);
	}
	if (ev.type == CP_EVENT_ERROR) {
		http_error_event(&e, &ev, &g->rq);
		return http_error_send(conn, &e);
	}
	if (g->rq.kind == HTTP_CHAT && out_event(g, chunk(g, json_pack(
	    "{s:i, s:{s:s, s:s}, s:n, s:n}", "index", 0, "delta", "role",
	    "assistant", "content", "", "logprobs", "finish_reason"))) < 0)
		return MHD_NO;
	if (on_event(g, &ev) < 0 || (g->ended && end_stream(g) < 0))
		return MHD_NO;
	res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
	    sse_read, g, NULL);
	if (res == NULL)
		return MHD_NO;
	MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE,
	    "text/event-stream");
	MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL,
	    "no-cache");
	ret = MHD_queue_response(conn, 200, res);
	MHD_destroy_response(res);
	return ret;
}
