/*
 * http_parse.c - the body of POST /v1/chat/completions and /v1/completions
 * to cp_params and messages (or a prompt).
 *
 * Rules, each answered 400 with the field named in "param":
 *  1. The body is one JSON object (jansson parses it; its depth limit
 *     holds), at most --max-body bytes (http_main.c answers 413 before).
 *  2. Each field has OpenAI's type; null means absent.  A field that
 *     neither endpoint's list below names is refused, and so is a value
 *     cpd cannot honour (n other than 1, penalties, echo, suffix): a
 *     client never believes an option worked that was ignored.
 *     top_logprobs (chat) needs logprobs: true, as in OpenAI's API.
 *  3. Sampling starts from OpenAI's meaning of a request that names
 *     nothing: temperature 1, top_p 1, no top-k, no min-p.
 *  4. messages: 1 to --max-messages objects {role, content[, name]};
 *     content a string, null, or an array of {type: "text", text} parts
 *     (joined).  Roles: system (and developer), user, assistant, tool.
 *  5. stop: a string or up to 8 strings of 1..511 bytes (cpd's limits).
 *  6. Output constraints, at most one of: response_format {"type":
 *     "text"} (none), {"type": "json_object"} (any JSON object), {"type":
 *     "json_schema", "json_schema": {"name", "description", "schema",
 *     "strict"}} (schema an object, sent to cpd as jansson writes it);
 *     llama-server's "grammar" (GBNF text) and "json_schema" (an object).
 *     The text is at most CP_GRAMMAR_MAX_BYTES; cpd compiles it, and its
 *     errors come back as an ERROR event (http_error_event()).
 */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOP	8
#define MAX_STOP_LEN	511
#define MAX_TOKENS_CAP	(1u << 30)
#define MAX_IDS		16384

static const char *const chat_keys[] = {
	"model", "messages", "max_tokens", "max_completion_tokens",
	"temperature", "top_p", "seed", "stop", "n", "stream",
	"stream_options", "logprobs", "top_logprobs", "presence_penalty",
	"frequency_penalty", "user", "response_format", "grammar",
	"json_schema", NULL
};

static const char *const text_keys[] = {
	"model", "prompt", "max_tokens", "temperature", "top_p", "seed",
	"stop", "n", "stream", "stream_options", "logprobs", "echo", "suffix",
	"presence_penalty", "frequency_penalty", "best_of", "user",
	"response_format", "grammar", "json_schema", NULL
};

/* o's member key, NULL when absent or null. */
static json_t *
field(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_null(v) ? NULL : v;
}

static int
known_keys(json_t *root, const char *const *keys, struct http_error *e)
{
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach(root, key, v) {
		for (i = 0; keys[i] != NULL; i++)
			if (strcmp(key, keys[i]) == 0)
				break;
		if (keys[i] == NULL)
			return http_error_set(e, 400, "unknown_parameter", key,
			    "Unrecognized request argument supplied: %s", key);
	}
	return 0;
}

/* A number field in [lo, hi]: 1 and *out, 0 when absent, -1 with e. */
static int
number(json_t *root, const char *key, double lo, double hi, double *out,
    struct http_error *e)
{
	json_t *v = field(root, key);

	if (v == NULL)
		return 0;
	if (!json_is_number(v))
		return http_error_set(e, 400, "invalid_type", key,
		    "%s: expected a number", key);
	*out = json_number_value(v);
	if (!(*out >= lo && *out <= hi))
		return http_error_set(e, 400, "invalid_value", key,
		    "%s: %g is out of range [%g, %g]", key, *out, lo, hi);
	return 1;
}

/* An integer field in [lo, hi]: 1 and *out, 0 when absent, -1 with e. */
static int
integer(json_t *root, const char *key, json_int_t lo, json_int_t hi,
    json_int_t *out, struct http_error *e)
{
	json_t *v = field(root, key);

	if (v == NULL)
		return 0;
	if (!json_is_integer(v))
		return http_error_set(e, 400, "invalid_type", key,
		    "%s: expected an integer", key);
	*out = json_integer_value(v);
	if (*out < lo || *out > hi)
		return http_error_set(e, 400, "invalid_value", key,
		    "%s: %lld is out of range [%lld, %lld]", key,
		    (long long)*out, (long long)lo, (long long)hi);
	return 1;
}

/* A boolean field: its value, 0 when absent, -1 with e. */
static int
boolean(json_t *root, const char *key, struct http_error *e)
{
	json_t *v = field(root, key);

	if (v == NULL)
		return 0;
	if (!json_is_boolean(v))
		return http_error_set(e, 400, "invalid_type", key,
		    "%s: expected a boolean", key);
	return json_is_true(v);
}

static int
string_or_absent(json_t *root, const char *key, struct http_error *e)
{
	json_t *v = field(root, key);

	if (v != NULL && !json_is_string(v))
		return http_error_set(e, 400, "invalid_type", key,
		    "%s: expected a string", key);
	return 0;
}

static int
one_stop(struct http_req *r, json_t *s, struct http_error *e)
{
	size_t len;

	if (!json_is_string(s))
		return http_error_set(e, 400, "invalid_type", "stop",
		    "stop: expected a string or an array of strings");
	len = json_string_length(s);
	if (len == 0 || len > MAX_STOP_LEN)
		return http_error_set(e, 400, "invalid_value", "stop",
		    "stop: each string must have 1 to %d bytes",
		    MAX_STOP_LEN);
	if (r->p.n_stop == MAX_STOP)
		return http_error_set(e, 400, "invalid_value", "stop",
		    "stop: at most %d strings", MAX_STOP);
	r->stop[r->p.n_stop++] = json_string_value(s);
	return 0;
}

static int
stops(struct http_req *r, struct http_error *e)
{
	json_t *v = field(r->root, "stop"), *s;
	size_t i;

	if (v == NULL)
		return 0;
	if (json_is_array(v)) {
		json_array_foreach(v, i, s)
			if (one_stop(r, s, e) < 0)
				return -1;
	} else if (one_stop(r, v, e) < 0)
		return -1;
	r->p.stop = r->stop;
	return 0;
}

/* Constrains r's output with kind and text[0..len) that field set. */
static int
set_grammar(struct http_req *r, const char *field, const char *path,
    int kind, const char *text, size_t len, struct http_error *e)
{
	if (r->grammar_field != NULL)
		return http_error_set(e, 400, "invalid_value", field,
		    "%s: only one of response_format, grammar and json_schema "
		    "may constrain the output (%s does already)", field,
		    r->grammar_field);
	if (kind != CP_GRAMMAR_JSON && len == 0)
		return http_error_set(e, 400, "invalid_value", field,
		    "%s: empty", field);
	if (len > CP_GRAMMAR_MAX_BYTES)
		return http_error_set(e, 400, "invalid_value", field,
		    "%s: %zu bytes, at most %d", field, len,
		    CP_GRAMMAR_MAX_BYTES);
	r->grammar_field = field;
	r->grammar_path = path;
	r->p.grammar_kind = kind;
	r->p.grammar = text;
	r->p.grammar_len = len;
	return 0;
}

/* A JSON schema object as text, kept in r; path names it for errors. */
static int
schema(struct http_req *r, const char *field, const char *path, json_t *s,
    struct http_error *e)
{
	char *text;

	if (!json_is_object(s))
		return http_error_set(e, 400, "invalid_type", field,
		    "%s: expected a JSON schema object", path);
	if ((text = json_dumps(s, JSON_COMPACT)) == NULL)
		return http_error_set(e, 500, NULL, NULL, "out of memory");
	if (set_grammar(r, field, path, CP_GRAMMAR_JSON_SCHEMA, text,
	    strlen(text), e) < 0) {
		free(text);
		return -1;
	}
	r->grammar = text;
	return 0;
}

/* Members of response_format.json_schema besides schema: string or bool. */
static int
schema_member(const char *key, json_t *v, struct http_error *e)
{
	static const char f[] = "response_format";
	int strict = strcmp(key, "strict") == 0;

	if (!strict && strcmp(key, "name") != 0 &&
	    strcmp(key, "description") != 0)
		return http_error_set(e, 400, "unknown_parameter", f,
		    "response_format.json_schema.%s: not supported", key);
	if (!json_is_null(v) && (strict ? !json_is_boolean(v) :
	    !json_is_string(v)))
		return http_error_set(e, 400, "invalid_type", f,
		    "response_format.json_schema.%s: expected a %s", key,
		    strict ? "boolean" : "string");
	return 0;
}

/* OpenAI's response_format: text, json_object or json_schema. */
static int
response_format(struct http_req *r, json_t *rf, struct http_error *e)
{
	static const char any_object[] = "{\"type\":\"object\"}";
	static const char f[] = "response_format";
	json_t *t = json_object_get(rf, "type"), *js, *v;
	const char *type, *key;
	int is_schema;

	if (!json_is_object(rf))
		return http_error_set(e, 400, "invalid_type", f,
		    "response_format: expected an object");
	type = json_is_string(t) ? json_string_value(t) : "";
	is_schema = strcmp(type, "json_schema") == 0;
	if (!is_schema && strcmp(type, "text") != 0 &&
	    strcmp(type, "json_object") != 0)
		return http_error_set(e, 400, "invalid_value", f,
		    "response_format.type: expected \"text\", "
		    "\"json_object\" or \"json_schema\"");
	json_object_foreach(rf, key, v)
		if (strcmp(key, "type") != 0 &&
		    !(is_schema && strcmp(key, "json_schema") == 0))
			return http_error_set(e, 400, "unknown_parameter", f,
			    "response_format.%s: not a member of type %s",
			    key, type);
	if (strcmp(type, "text") == 0)
		return 0;
	if (!is_schema)		/* OpenAI's JSON mode: an object */
		return set_grammar(r, f, f, CP_GRAMMAR_JSON_SCHEMA, any_object,
		    sizeof(any_object) - 1, e);
	js = json_object_get(rf, "json_schema");
	if (!json_is_object(js))
		return http_error_set(e, 400, "invalid_type", f,
		    "response_format.json_schema: expected an object");
	json_object_foreach(js, key, v)
		if (strcmp(key, "schema") != 0 && schema_member(key, v, e) < 0)
			return -1;
	if ((v = json_object_get(js, "schema")) == NULL)
		return http_error_set(e, 400, "invalid_value", f,
		    "response_format.json_schema.schema: missing");
	return schema(r, f, "response_format.json_schema.schema", v, e);
}

/* Rule 6: response_format, or llama-server's grammar or json_schema. */
static int
constraint(struct http_req *r, struct http_error *e)
{
	json_t *v;

	if ((v = field(r->root, "response_format")) != NULL &&
	    response_format(r, v, e) < 0)
		return -1;
	if ((v = field(r->root, "grammar")) != NULL) {
		if (!json_is_string(v))
			return http_error_set(e, 400, "invalid_type",
			    "grammar", "grammar: expected a string (GBNF)");
		if (set_grammar(r, "grammar", "grammar", CP_GRAMMAR_GBNF,
		    json_string_value(v), json_string_length(v), e) < 0)
			return -1;
	}
	if ((v = field(r->root, "json_schema")) != NULL &&
	    schema(r, "json_schema", "json_schema", v, e) < 0)
		return -1;
	return 0;
}

/* Sampling, stopping and the fields both endpoints share. */
static int
common(struct http_req *r, struct http_error *e)
{
	json_t *so;
	json_int_t n;
	double x;
	int k;

	if (string_or_absent(r->root, "model", e) < 0 ||
	    string_or_absent(r->root, "user", e) < 0)
		return -1;
	if ((k = number(r->root, "temperature", 0, 2, &x, e)) < 0)
		return -1;
	if (k)
		r->p.temperature = (float)x;
	if ((k = number(r->root, "top_p", 0, 1, &x, e)) < 0)
		return -1;
	if (k && x > 0)
		r->p.top_p = (float)x;
	else if (k)
		r->p.temperature = 0;	/* only the likeliest token */
	if ((k = integer(r->root, "seed", INT64_MIN, INT64_MAX, &n, e)) < 0)
		return -1;
	if (k) {
		r->p.use_seed = 1;
		r->p.seed = (uint64_t)n;
	}
	if ((k = integer(r->root, "n", 1, 1, &n, e)) < 0) {
		snprintf(e->msg, sizeof(e->msg), "n: only 1 is supported "
		    "(cpd-http returns one choice per request)");
		return -1;
	}
	if (number(r->root, "presence_penalty", 0, 0, &x, e) < 0 ||
	    number(r->root, "frequency_penalty", 0, 0, &x, e) < 0) {
		snprintf(e->msg, sizeof(e->msg), "%s: only 0 is supported",
		    e->param);
		return -1;
	}
	if (stops(r, e) < 0)
		return -1;
	if ((r->stream = boolean(r->root, "stream", e)) < 0)
		return -1;
	if ((so = field(r->root, "stream_options")) != NULL) {
		if (!json_is_object(so))
			return http_error_set(e, 400, "invalid_type",
			    "stream_options", "stream_options: expected an "
			    "object");
		if (!r->stream)
			return http_error_set(e, 400, "invalid_value",
			    "stream_options", "stream_options: only with "
			    "stream: true");
		if ((r->include_usage = boolean(so, "include_usage", e)) < 0)
			return -1;
	}
	return constraint(r, e);
}

static int
max_tokens(struct http_req *r, const char *key, struct http_error *e)
{
	json_int_t n;
	int k;

	if ((k = integer(r->root, key, 1, MAX_TOKENS_CAP, &n, e)) < 0)
		return -1;
	if (k)
		r->p.max_tokens = (uint32_t)n;
	return 0;
}

static int
role_of(const char *s)
{
	if (strcmp(s, "system") == 0 || strcmp(s, "developer") == 0)
		return CP_CHAT_SYSTEM;
	if (strcmp(s, "user") == 0)
		return CP_CHAT_USER;
	if (strcmp(s, "assistant") == 0)
		return CP_CHAT_ASSISTANT;
	if (strcmp(s, "tool") == 0)
		return CP_CHAT_TOOL;
	return -1;
}

/* Joins the text parts of content array c into one string kept in r. */
static int
join_parts(struct http_req *r, json_t *c, size_t i, struct cp_message *m,
    struct http_error *e)
{
	size_t j, total = 0, at = 0;
	json_t *part, *t, *s;
	char *buf;

	json_array_foreach(c, j, part) {
		t = json_object_get(part, "type");
		if (!json_is_string(t) ||
		    strcmp(json_string_value(t), "text") != 0 ||
		    !json_is_string(json_object_get(part, "text")))
			return http_error_set(e, 400, "invalid_value",
			    "messages", "messages[%zu].content[%zu]: only "
			    "{\"type\": \"text\", \"text\": ...} parts are "
			    "supported", i, j);
		total += json_string_length(json_object_get(part, "text"));
	}
	if ((buf = malloc(total + 1)) == NULL)
		return http_error_set(e, 500, NULL, NULL, "out of memory");
	json_array_foreach(c, j, part) {
		t = json_object_get(part, "text");
		memcpy(buf + at, json_string_value(t), json_string_length(t));
		at += json_string_length(t);
	}
	s = json_stringn_nocheck(buf, total);	/* joined UTF-8 is UTF-8 */
	free(buf);
	if (s == NULL || json_array_append_new(r->keep, s) < 0)
		return http_error_set(e, 500, NULL, NULL, "out of memory");
	m->content = json_string_value(s);
	m->len = json_string_length(s);
	return 0;
}

static int
message(struct http_req *r, json_t *o, size_t i, struct http_error *e)
{
	struct cp_message *m = &r->msgs[i];
	const char *key;
	json_t *v, *c;

	if (!json_is_object(o))
		return http_error_set(e, 400, "invalid_type", "messages",
		    "messages[%zu]: expected an object", i);
	json_object_foreach(o, key, v)
		if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0 &&
		    strcmp(key, "name") != 0)
			return http_error_set(e, 400, "unknown_parameter",
			    "messages", "messages[%zu].%s is not supported",
			    i, key);
	v = json_object_get(o, "role");
	if (!json_is_string(v) || (m->role = role_of(json_string_value(v))) < 0)
		return http_error_set(e, 400, "invalid_value", "messages",
		    "messages[%zu].role: expected system, developer, user, "
		    "assistant or tool", i);
	c = field(o, "content");
	if (c == NULL) {
		m->content = NULL;
		m->len = 0;
	} else if (json_is_string(c)) {
		m->content = json_string_value(c);
		m->len = json_string_length(c);
	} else if (json_is_array(c)) {
		return join_parts(r, c, i, m, e);
	} else
		return http_error_set(e, 400, "invalid_type", "messages",
		    "messages[%zu].content: expected a string or an array of "
		    "text parts", i);
	return 0;
}

static int
chat(struct http_req *r, const struct http_cfg *cfg, struct http_error *e)
{
	json_t *msgs = json_object_get(r->root, "messages"), *o;
	json_int_t n;
	size_t i;
	int k;

	if (known_keys(r->root, chat_keys, e) < 0 || common(r, e) < 0 ||
	    max_tokens(r, "max_tokens", e) < 0 ||
	    max_tokens(r, "max_completion_tokens", e) < 0)
		return -1;
	if ((r->logprobs = boolean(r->root, "logprobs", e)) < 0)
		return -1;
	if ((k = integer(r->root, "top_logprobs", 0, CP_TOP_LOGPROBS_MAX, &n,
	    e)) < 0)
		return -1;
	if (k && n > 0 && !r->logprobs)
		return http_error_set(e, 400, "invalid_value", "top_logprobs",
		    "top_logprobs: needs logprobs: true");
	r->top_logprobs = k ? (int)n : 0;
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return http_error_set(e, 400, "invalid_type", "messages",
		    "messages: expected a non-empty array");
	if (json_array_size(msgs) > cfg->max_messages)
		return http_error_set(e, 400, "invalid_value", "messages",
		    "messages: at most %zu messages", cfg->max_messages);
	r->n_msgs = json_array_size(msgs);
	if ((r->msgs = calloc(r->n_msgs, sizeof(*r->msgs))) == NULL)
		return http_error_set(e, 500, NULL, NULL, "out of memory");
	json_array_foreach(msgs, i, o)
		if (message(r, o, i, e) < 0)
			return -1;
	return 0;
}

/* prompt as token ids: an array of integers in [0, 2^31). */
static int
token_ids(struct http_req *r, json_t *a, struct http_error *e)
{
	json_t *v;
	size_t i;

	if (json_array_size(a) == 0 || json_array_size(a) > MAX_IDS)
		return http_error_set(e, 400, "invalid_value", "prompt",
		    "prompt: 1 to %d token ids", MAX_IDS);
	r->n_ids = json_array_size(a);
	if ((r->ids = calloc(r->n_ids, sizeof(*r->ids))) == NULL)
		return http_error_set(e, 500, NULL, NULL, "out of memory");
	json_array_foreach(a, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > INT32_MAX)
			return http_error_set(e, 400, "invalid_type", "prompt",
			    "prompt[%zu]: expected a token id", i);
		r->ids[i] = (int32_t)json_integer_value(v);
	}
	return 0;
}

static int
text(struct http_req *r, struct http_error *e)
{
	json_t *pr = field(r->root, "prompt"), *v;
	json_int_t n;
	int k;

	r->p.max_tokens = 16;	/* OpenAI's default for completions */
	if (known_keys(r->root, text_keys, e) < 0 || common(r, e) < 0 ||
	    max_tokens(r, "max_tokens", e) < 0)
		return -1;
	/* OpenAI's legacy API takes 0..5 alternatives; cpd has up to 20. */
	if ((k = integer(r->root, "logprobs", 0, CP_TOP_LOGPROBS_MAX, &n,
	    e)) < 0)
		return -1;
	r->logprobs = k;
	r->top_logprobs = k ? (int)n : 0;
	if ((k = boolean(r->root, "echo", e)) != 0)
		return k < 0 ? -1 : http_error_set(e, 400,
		    "unsupported_parameter", "echo", "echo: not supported");
	v = field(r->root, "suffix");
	if (v != NULL && !(json_is_string(v) && json_string_length(v) == 0))
		return http_error_set(e, 400, "unsupported_parameter",
		    "suffix", "suffix: not supported");
	if (integer(r->root, "best_of", 1, 1, &n, e) < 0)
		return -1;
	/* A one-element array is its element. */
	if (json_is_array(pr) && json_array_size(pr) == 1 &&
	    (json_is_string(json_array_get(pr, 0)) ||
	    json_is_array(json_array_get(pr, 0))))
		pr = json_array_get(pr, 0);
	if (json_is_string(pr)) {
		r->prompt = json_string_value(pr);
		r->prompt_len = json_string_length(pr);
		return 0;
	}
	if (json_is_array(pr))
		return token_ids(r, pr, e);
	return http_error_set(e, 400, "invalid_type", "prompt",
	    "prompt: expected a string, one string in an array, or token ids");
}

int
http_req_parse(struct http_req *r, enum http_kind kind, const char *body,
    size_t len, const struct http_cfg *cfg, struct http_error *e)
{
	json_error_t je;

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	cp_params_init(&r->p);
	r->p.temperature = 1;
	r->p.top_p = 1;
	r->p.top_k = 0;
	r->p.min_p = 0;
	r->p.max_tokens = 0;
	if ((r->keep = json_array()) == NULL)
		return http_error_set(e, 500, NULL, NULL, "out of memory");
	r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (r->root == NULL)
		return http_error_set(e, 400, "invalid_json", NULL,
		    "the body is not valid JSON: %s (line %d, column %d)",
		    je.text, je.line, je.column);
	if (!json_is_object(r->root))
		return http_error_set(e, 400, "invalid_json", NULL,
		    "the body must be a JSON object");
	if (kind == HTTP_CHAT)
		return chat(r, cfg, e);
	return text(r, e);
}

void
http_req_fini(struct http_req *r)
{
	json_decref(r->root);
	json_decref(r->keep);
	free(r->msgs);
	free(r->ids);
	free(r->grammar);
	memset(r, 0, sizeof(*r));
}
