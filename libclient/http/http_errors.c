/*
 * http_errors.c - answers of cpd-http that are not a generation: OpenAI's
 * error object {"error": {"message", "type", "param", "code"}} with its
 * HTTP status, and the plain JSON and text responses.
 *
 * Statuses: 400 a request cpd-http or cpd refuses, 401 a missing or wrong
 * key, 404 an unknown path, 405 a known path with another method, 413 a
 * body over --max-body, 429 cpd's per-user limits (-EUSERS, -EBUSY,
 * -EAGAIN), 503 cpd unreachable, stopping or gone, 500 anything else.
 * A grammar the daemon cannot compile is a 400 naming the request's field
 * that set it, with the daemon's message (the rule or the schema path).
 */
#include "http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *
type_of(unsigned status)
{
	switch (status) {
	case 400: case 404: case 405: case 413:
		return "invalid_request_error";
	case 401:
		return "authentication_error";
	case 429:
		return "rate_limit_error";
	case 503:
		return "service_unavailable";
	default:
		return "server_error";
	}
}

int
http_error_set(struct http_error *e, unsigned status, const char *code,
    const char *param, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->type = type_of(status);
	e->code = code;
	snprintf(e->param, sizeof(e->param), "%s", param != NULL ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

int
http_error_cp(struct http_error *e, int r, const char *what)
{
	const char *why = cp_strerror(r);

	switch (r) {
	case -ENOENT:
	case -ECONNREFUSED:
	case -ESHUTDOWN:
	case -ETIMEDOUT:
	case CP_EDEAD:
		return http_error_set(e, 503, "daemon_unavailable", NULL,
		    "%s: cpd: %s", what, why);
	case -EUSERS:
	case -EBUSY:
	case -EAGAIN:
		return http_error_set(e, 429, "rate_limit_exceeded", NULL,
		    "%s: cpd: %s", what, why);
	case -E2BIG:
		return http_error_set(e, 400, "context_length_exceeded", NULL,
		    "%s: cpd: %s", what, why);
	case -EINVAL:
	case -EOPNOTSUPP:
		return http_error_set(e, 400, NULL, NULL, "%s: cpd: %s", what,
		    why);
	default:
		return http_error_set(e, 500, NULL, NULL, "%s: cpd: %s", what,
		    why);
	}
}

int
http_error_event(struct http_error *e, const struct cp_event *ev,
    const struct http_req *rq)
{
	/* The daemon's text for a grammar that does not compile (or that a
	   matcher cannot follow): "grammar: " and the rule or schema path. */
	if (rq->grammar_field != NULL && ev->text_len > 9 &&
	    strncmp(ev->text, "grammar: ", 9) == 0)
		return http_error_set(e, 400, "invalid_value",
		    rq->grammar_field, "%s: %s", rq->grammar_path,
		    ev->text + 9);
	http_error_cp(e, ev->error, "generation");
	if (ev->text_len > 0)
		snprintf(e->msg, sizeof(e->msg), "cpd: %s", ev->text);
	return -1;
}

json_t *
http_error_json(const struct http_error *e)
{
	return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error",
	    "message", e->msg, "type", e->type,
	    "param", e->param[0] != '\0' ? e->param : NULL,
	    "code", e->code);
}

static enum MHD_Result
queue(struct MHD_Connection *conn, unsigned status, const char *type,
    struct MHD_Response *res)
{
	enum MHD_Result r;

	if (res == NULL)
		return MHD_NO;
	MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == 401)
		MHD_add_response_header(res, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
		    "Bearer");
	r = MHD_queue_response(conn, status, res);
	MHD_destroy_response(res);
	return r;
}

enum MHD_Result
http_text_send(struct MHD_Connection *conn, unsigned status, const char *type,
    const char *text, size_t len)
{
	return queue(conn, status, type, MHD_create_response_from_buffer(len,
	    (void *)(uintptr_t)text, MHD_RESPMEM_MUST_COPY));
}

enum MHD_Result
http_json_send(struct MHD_Connection *conn, unsigned status, json_t *body)
{
	struct MHD_Response *res = NULL;
	char *s;

	s = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (s == NULL)
		return MHD_NO;
	res = MHD_create_response_from_buffer_with_free_callback(strlen(s), s,
	    free);
	if (res == NULL)
		free(s);
	return queue(conn, status, "application/json", res);
}

enum MHD_Result
http_error_send(struct MHD_Connection *conn, const struct http_error *e)
{
	return http_json_send(conn, e->status, http_error_json(e));
}
