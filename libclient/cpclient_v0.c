/*
 * cpclient_v0.c - the entry points of libcpclient's first interface,
 * whose structures had no size field (cpclient.h, SIZES): programs built
 * against that header call cp_connect(), cp_submit(), cp_next_event()...
 * by these names, with these layouts.  Each converts to the sized
 * structure and calls its *_v1 entry point.  The layouts below are that
 * header's, frozen: never change them (tests/abi/v0/cpclient.h is the
 * header itself, which check_abi builds a program against).
 */
#define CPCLIENT_V0_ENTRY_POINTS
#include "cpclient.h"

#include <string.h>

struct cp_connect_opts_v0 {
	const char *socket_path;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint32_t arena_bytes;
	int timeout_ms;
};

struct cp_params_v0 {
	uint32_t max_tokens;
	float temperature;
	float top_p;
	float min_p;
	float repeat_penalty;
	int32_t top_k;
	uint32_t repeat_last_n;
	int use_seed;
	uint64_t seed;
	int logprobs;
	const char *const *stop;
	size_t n_stop;
	int progress;
};

struct cp_event_v0 {
	int type;
	int req_id;
	int32_t token;
	float logprob;
	const char *text;
	size_t text_len;
	int finish;
	int error;
	uint32_t n_prompt;
	uint32_t n_gen;
	uint32_t step;
	uint32_t n_total;	/* a union with n_cached, of one type */
};

struct cp_model_info_v0 {
	char name[64];
	char arch[32];
	char backend[16];
	uint32_t n_ctx;
	uint32_t n_vocab;
	uint32_t n_embd;
	uint32_t n_layer;
	uint32_t n_head;
	uint32_t n_head_kv;
	int32_t bos;
	int32_t eos;
	uint64_t n_params;
	char chat_template[32];
	uint32_t max_prompt_bytes;
	uint32_t max_requests;
};

CP_API void cp_connect_opts_init(struct cp_connect_opts_v0 *o);
CP_API int cp_connect(const struct cp_connect_opts_v0 *o,
    struct cp_client **out);
CP_API void cp_params_init(struct cp_params_v0 *p);
CP_API int cp_submit(struct cp_client *c, const char *prompt, size_t len,
    const struct cp_params_v0 *p);
CP_API int cp_submit_tokens(struct cp_client *c, const int32_t *ids,
    size_t n, const struct cp_params_v0 *p);
CP_API int cp_next_event(struct cp_client *c, struct cp_event_v0 *ev,
    int timeout_ms);
CP_API int cp_model_info(struct cp_client *c, struct cp_model_info_v0 *out);

void
cp_connect_opts_init(struct cp_connect_opts_v0 *o)
{
	struct cp_connect_opts n;

	cp_connect_opts_init_v1(&n, sizeof(n));
	o->socket_path = n.socket_path;
	o->sq_entries = n.sq_entries;
	o->cq_entries = n.cq_entries;
	o->arena_bytes = n.arena_bytes;
	o->timeout_ms = n.timeout_ms;
}

int
cp_connect(const struct cp_connect_opts_v0 *o, struct cp_client **out)
{
	struct cp_connect_opts n;

	if (o == NULL)
		return cp_connect_v1(NULL, out);
	cp_connect_opts_init_v1(&n, sizeof(n));
	n.socket_path = o->socket_path;
	n.sq_entries = o->sq_entries;
	n.cq_entries = o->cq_entries;
	n.arena_bytes = o->arena_bytes;
	n.timeout_ms = o->timeout_ms;
	return cp_connect_v1(&n, out);
}

void
cp_params_init(struct cp_params_v0 *p)
{
	struct cp_params n;

	cp_params_init_v1(&n, sizeof(n));
	memset(p, 0, sizeof(*p));
	p->max_tokens = n.max_tokens;
	p->temperature = n.temperature;
	p->top_p = n.top_p;
	p->min_p = n.min_p;
	p->repeat_penalty = n.repeat_penalty;
	p->top_k = n.top_k;
	p->repeat_last_n = n.repeat_last_n;
	p->use_seed = n.use_seed;
	p->seed = n.seed;
	p->logprobs = n.logprobs;
	p->stop = n.stop;
	p->n_stop = n.n_stop;
	p->progress = n.progress;
}

/* p in the sized layout (NULL: NULL); n is the storage. */
static const struct cp_params *
params_v1(const struct cp_params_v0 *p, struct cp_params *n)
{
	if (p == NULL)
		return NULL;
	cp_params_init_v1(n, sizeof(*n));
	n->max_tokens = p->max_tokens;
	n->temperature = p->temperature;
	n->top_p = p->top_p;
	n->min_p = p->min_p;
	n->repeat_penalty = p->repeat_penalty;
	n->top_k = p->top_k;
	n->repeat_last_n = p->repeat_last_n;
	n->use_seed = p->use_seed;
	n->seed = p->seed;
	/* "nonzero: fill logprob" then; any n asks for that now */
	n->logprobs = p->logprobs != 0;
	n->stop = p->stop;
	n->n_stop = p->n_stop;
	n->progress = p->progress;
	return n;
}

int
cp_submit(struct cp_client *c, const char *prompt, size_t len,
    const struct cp_params_v0 *p)
{
	struct cp_params n;

	return cp_submit_v1(c, prompt, len, params_v1(p, &n));
}

int
cp_submit_tokens(struct cp_client *c, const int32_t *ids, size_t n,
    const struct cp_params_v0 *p)
{
	struct cp_params q;

	return cp_submit_tokens_v1(c, ids, n, params_v1(p, &q));
}

int
cp_next_event(struct cp_client *c, struct cp_event_v0 *ev, int timeout_ms)
{
	struct cp_event n;
	int r;

	if ((r = cp_next_event_v1(c, &n, sizeof(n), timeout_ms)) < 0)
		return r;
	ev->type = n.type;
	ev->req_id = n.req_id;
	ev->token = n.token;
	ev->logprob = n.logprob;
	ev->text = n.text;
	ev->text_len = n.text_len;
	ev->finish = n.finish;
	ev->error = n.error;
	ev->n_prompt = n.n_prompt;
	ev->n_gen = n.n_gen;
	ev->step = n.step;
	ev->n_total = n.n_total;
	return 0;
}

int
cp_model_info(struct cp_client *c, struct cp_model_info_v0 *out)
{
	struct cp_model_info n;
	int r;

	if ((r = cp_model_info_v1(c, &n, sizeof(n))) < 0)
		return r;
	memcpy(out->name, n.name, sizeof(out->name));
	memcpy(out->arch, n.arch, sizeof(out->arch));
	memcpy(out->backend, n.backend, sizeof(out->backend));
	out->n_ctx = n.n_ctx;
	out->n_vocab = n.n_vocab;
	out->n_embd = n.n_embd;
	out->n_layer = n.n_layer;
	out->n_head = n.n_head;
	out->n_head_kv = n.n_head_kv;
	out->bos = n.bos;
	out->eos = n.eos;
	out->n_params = n.n_params;
	memcpy(out->chat_template, n.chat_template,
	    sizeof(out->chat_template));
	out->max_prompt_bytes = n.max_prompt_bytes;
	out->max_requests = n.max_requests;
	return 0;
}
