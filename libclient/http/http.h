/*
 * http.h - cpd-http, the OpenAI-compatible HTTP front of cpd: one more
 * client of libcpclient, in its own process.
 *
 * One HTTP request that generates is one libcpclient connection (see
 * BENCHMARKS-serve.md for why not a pool): the connection lives in a
 * struct http_gen from the request's parse to its completion, and the
 * daemon's per-uid limits apply to cpd-http's uid.  libmicrohttpd runs a
 * thread per HTTP connection; a generation blocks that thread, waiting on
 * the client's event descriptor and on the HTTP socket together, so that
 * an HTTP client that hangs up cancels its request in the daemon at once.
 *
 * Files: http_main.c (options, the HTTP daemon, routing, body, key),
 * http_parse.c (request JSON to cp_params and messages), http_gen.c (a
 * request's connection and events, the non-streamed answer), http_sse.c
 * (the streamed answer as server-sent events), http_info.c (models,
 * health, metrics), http_errors.c (OpenAI's error JSON and statuses).
 */
#ifndef CP_HTTP_H
#define CP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "cpclient.h"

/* The command line, read-only once the server runs. */
struct http_cfg {
	const char *socket;		/* cpd's socket; NULL: the default */
	unsigned char *api_key;		/* bearer token; NULL: none needed */
	size_t api_key_len;
	size_t max_body;		/* request body bytes, at most */
	size_t max_messages;		/* messages of one chat request */
	int connect_ms;			/* connecting to cpd */
};

/* An error for the client: OpenAI's {"error": {...}} and an HTTP status. */
struct http_error {
	unsigned status;		/* 400, 404, 413, 429, 503 ... */
	const char *type;		/* "invalid_request_error" ... */
	const char *code;		/* NULL or a machine-readable code */
	char param[64];			/* the field at fault, "" for none */
	char msg[256];
};

/* ---- http_errors.c ---- */

/* Fills e; param may be NULL.  Returns -1 (for `return http_error_set()`). */
int http_error_set(struct http_error *e, unsigned status, const char *code,
    const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/*
 * Fills e for a libcpclient error r (negative errno or CP_E*) met while
 * doing what (a few words); returns -1.
 */
int http_error_cp(struct http_error *e, int r, const char *what);

struct http_req;

/*
 * Fills e for an ERROR event of request rq (its error code and message);
 * returns -1.  An error about rq's grammar is a 400 naming its field.
 */
int http_error_event(struct http_error *e, const struct cp_event *ev,
    const struct http_req *rq);

/* e as the JSON object {"error": {...}} (a new reference). */
json_t *http_error_json(const struct http_error *e);

/* Queues e as the response of conn. */
enum MHD_Result http_error_send(struct MHD_Connection *conn,
    const struct http_error *e);

/* Queues body (taken: decref'd) as JSON with status. */
enum MHD_Result http_json_send(struct MHD_Connection *conn, unsigned status,
    json_t *body);

/* Queues len bytes of text (copied) with status and content type. */
enum MHD_Result http_text_send(struct MHD_Connection *conn, unsigned status,
    const char *type, const char *text, size_t len);

/* ---- http_parse.c ---- */

enum http_kind { HTTP_CHAT, HTTP_TEXT };

/* A generation request, parsed; borrows strings of root. */
struct http_req {
	enum http_kind kind;
	json_t *root;			/* the body (owned) */
	json_t *keep;			/* strings made while parsing (owned) */
	struct cp_params p;
	const char *stop[8];
	struct cp_message *msgs;	/* HTTP_CHAT (owned) */
	size_t n_msgs;
	const char *prompt;		/* HTTP_TEXT: text, or */
	size_t prompt_len;
	int32_t *ids;			/* HTTP_TEXT: token ids (owned) */
	size_t n_ids;
	int stream;
	int include_usage;		/* stream_options.include_usage */
	int logprobs;			/* sampled token's logprob wanted */
	int top_logprobs;		/* and its n most likely alternatives
					   (0..CP_TOP_LOGPROBS_MAX) */
	char *grammar;			/* p.grammar when made here: a schema
					   serialised (owned) */
	const char *grammar_field;	/* the field p.grammar_kind came from
					   ("response_format", "grammar",
					   "json_schema"), NULL: none */
	const char *grammar_path;	/* where in the body its text is */
};

/*
 * Parses body (len bytes) as a request of kind into r, checking every
 * field against OpenAI's types and cpd's ranges; 0, or -1 with e filled
 * (400).  Frees nothing on failure: call http_req_fini() either way.
 */
int http_req_parse(struct http_req *r, enum http_kind kind, const char *body,
    size_t len, const struct http_cfg *cfg, struct http_error *e);

/* Frees what r owns; r may be zeroed. */
void http_req_fini(struct http_req *r);

/* ---- http_gen.c ---- */

/* Bytes that grow; zeroed is empty. */
struct http_buf {
	char *p;		/* NUL-terminated once not empty */
	size_t len, cap;
};

/* Appends n bytes of s, keeping len <= max; 0, -E2BIG or -ENOMEM. */
int http_buf_add(struct http_buf *b, const char *s, size_t n, size_t max);

/* One generation: its connection to cpd and what it produced so far. */
struct http_gen {
	struct http_req rq;
	struct cp_client *c;
	int id;				/* request id, 0 before submitting */
	int ended;			/* its DONE or ERROR was read */
	int conn_fd;			/* the HTTP client's socket */
	char cid[48];			/* "chatcmpl-..." or "cmpl-..." */
	long long created;		/* Unix time */
	char model[64];
	/* server-sent events not yet handed to libmicrohttpd (http_sse.c) */
	struct http_buf out;
	size_t out_off;			/* of out, handed on */
	int sse_done;			/* [DONE] is in out */
	size_t text_off;		/* streamed completion bytes so far */
};

/* Set (atomically) when cpd-http stops: waits end with -ESHUTDOWN. */
extern int http_stopping;

/*
 * Connects to cpd and submits g->rq (parsed, taken by g); 0, or -1 with
 * e filled (503 daemon gone, 429 over its limits, 400 refused).
 */
int http_gen_start(struct http_gen *g, const struct http_cfg *cfg,
    int conn_fd, struct http_error *e);

/*
 * The request's next event other than PROGRESS into *ev (text valid until
 * the next call), waiting; 0, -ECONNRESET when the HTTP client hung up,
 * -ESHUTDOWN when cpd-http stops, or a libcpclient error.  Marks g ended
 * at DONE or ERROR.
 */
int http_gen_next(struct http_gen *g, struct cp_event *ev);

/* Cancels the request in the daemon if it has not ended. */
void http_gen_cancel(struct http_gen *g);

/* Cancels, closes and frees g; NULL accepted. */
void http_gen_free(struct http_gen *g);

/*
 * Runs g to its end and queues the whole answer on conn (or the error).
 * MHD_NO when the HTTP client hung up (its request cancelled).
 */
enum MHD_Result http_gen_answer(struct http_gen *g,
    struct MHD_Connection *conn);

/* OpenAI's finish_reason for a CP_DONE_* value. */
const char *http_finish_reason(int finish);

/* The "usage" object of a DONE or ERROR event. */
json_t *http_usage(const struct cp_event *ev);

/*
 * One sampled token's entry of a chat "logprobs.content" array: token,
 * logprob, bytes, and top_logprobs, g's rq.top_logprobs alternatives as
 * {token, logprob, bytes}.  A token's text is its piece (cp_detokenize(),
 * one call for the token and its alternatives) as UTF-8, invalid bytes as
 * U+FFFD; bytes are the piece's exact bytes.  Where the daemon cannot
 * name tokens, the token is ev's text and top_logprobs is empty.  NULL
 * when out of memory.
 */
json_t *http_logprob_entry(struct http_gen *g, const struct cp_event *ev);

/*
 * A completion's "logprobs" object, empty: tokens, token_logprobs,
 * top_logprobs, text_offset (OpenAI's legacy shape).
 */
json_t *http_logprobs_text_new(void);

/*
 * Appends ev's token to lp (from http_logprobs_text_new()): its text (as
 * above), logprob, an object alternative text -> logprob (the likelier of
 * two that read the same), and offset, its text's byte offset in the
 * completion.  0 or -ENOMEM.
 */
int http_logprobs_text_add(struct http_gen *g, json_t *lp,
    const struct cp_event *ev, size_t offset);

/* ---- http_sse.c ---- */

/*
 * Waits for g's first event, then queues the streamed answer on conn (or
 * an error with its status, if the first event is one).  MHD_NO when the
 * HTTP client hung up.
 */
enum MHD_Result http_sse_answer(struct http_gen *g,
    struct MHD_Connection *conn);

/* ---- http_info.c ---- */

/* GET /v1/models: the served model. */
enum MHD_Result http_info_models(struct MHD_Connection *conn,
    const struct http_cfg *cfg);

/* GET /health: 200 when cpd answers, else 503. */
enum MHD_Result http_info_health(struct MHD_Connection *conn,
    const struct http_cfg *cfg);

/* GET /metrics: the daemon's counters as Prometheus text. */
enum MHD_Result http_info_metrics(struct MHD_Connection *conn,
    const struct http_cfg *cfg);

/* A connection to cpd with cfg's socket and timeout; 0 or -1 with e. */
int http_info_connect(const struct http_cfg *cfg, struct cp_client **c,
    struct http_error *e);

#endif
