/*
 * mock_engine.c - deterministic engine thread for tests (see mock_engine.h).
 */
#include "mock_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chatwire.h"

struct mock_req {
	struct ep_cmd *cmd;		/* owned */
	size_t pos;			/* next prompt element to echo */
	size_t prefilled;		/* prompt elements "computed" */
	uint32_t gen;
	int paused;
	char *chat;			/* a chat request's rendered text */
	char *out;			/* generated text, for stop strings */
	size_t out_len, out_cap;
};

struct mock_engine {
	struct engine_port *port;
	struct mock_opts o;
	pthread_t th;
	struct mock_req *reqs;
	size_t n, cap;
	struct ep_batch batch;
	struct ep_stats stats;
	uint64_t cur_step;		/* the step running, else 0 */
};

void
mock_opts_default(struct mock_opts *o)
{
	o->step_us = 200;
	o->text_repeat = 1;
	o->default_max_tokens = 4096;
	o->prefill_chunk = 0;
	o->chat = CHAT_UNKNOWN;
	snprintf(o->model, sizeof(o->model), "mock-model");
}

/*
 * Queues one event as the worker's emit() does: out of memory, the events
 * so far go to the io loop (which hands back an empty buffer) and the add
 * is tried once more.
 */
static void
mock_emit(struct mock_engine *m, const struct ep_event *ev, const void *text,
    size_t len)
{
	if (ep_batch_add(&m->batch, ev, text, len) == 0)
		return;
	if (ep_post(m->port, &m->batch, 0) == 0)
		(void)ep_batch_add(&m->batch, ev, text, len);
}

static size_t
prompt_len(const struct ep_cmd *c)
{
	return (c->flags & EP_SUBMIT_TOKENS) ? c->n_tokens : c->text_len;
}

static void
req_free(struct mock_req *r)
{
	ep_cmd_free(r->cmd);
	free(r->chat);
	free(r->out);
}

static void
finish(struct mock_engine *m, size_t i, uint32_t type, uint32_t why, int err,
    const char *msg)
{
	struct mock_req *r = &m->reqs[i];
	struct ep_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.id = r->cmd->id;
	ev.type = type;
	ev.finish = why;
	ev.token = -1;
	ev.error = err;
	ev.n_prompt = (uint32_t)prompt_len(r->cmd);
	ev.n_gen = r->gen;
	ev.step = m->cur_step;
	mock_emit(m, &ev, msg, msg ? strlen(msg) : 0);
	req_free(r);
	m->reqs[i] = m->reqs[--m->n];
}

static ssize_t
find(struct mock_engine *m, uint64_t id)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		if (m->reqs[i].cmd->id == id)
			return (ssize_t)i;
	return -1;
}

/*
 * A chat request's block rendered: the command's text becomes the
 * rendering (owned by r); a refused block ends the request at once
 * (-1).
 */
static int
render_chat(struct mock_engine *m, size_t i)
{
	struct mock_req *r = &m->reqs[i];
	struct cp_err e;
	size_t len;

	memset(&e, 0, sizeof(e));
	if (chatwire_render(m->o.chat, m->o.model, r->cmd->text,
	    r->cmd->text_len, &r->chat, &len, &e) < 0) {
		finish(m, i, EP_EV_ERROR, 0, e.code, e.msg);
		return -1;
	}
	r->cmd->text = r->chat;
	r->cmd->text_len = len;
	return 0;
}

/* Applies one command; returns 1 for SHUTDOWN. */
static int
command(struct mock_engine *m, struct ep_cmd *c)
{
	ssize_t i = c->kind == EP_CMD_SUBMIT ? -1 : find(m, c->id);
	struct mock_req *n;

	switch (c->kind) {
	case EP_CMD_SUBMIT:
		if (m->n == m->cap) {
			size_t cap = m->cap ? m->cap * 2 : 16;

			n = realloc(m->reqs, cap * sizeof(*n));
			if (n == NULL)
				break;
			m->reqs = n;
			m->cap = cap;
		}
		n = &m->reqs[m->n++];
		memset(n, 0, sizeof(*n));
		n->cmd = c;
		if ((c->flags & EP_SUBMIT_CHAT) && render_chat(m, m->n - 1) < 0)
			return 0;	/* c ended and freed */
		m->stats.tokens_prompt += prompt_len(c);
		return 0;
	case EP_CMD_CANCEL:
		if (i >= 0)
			finish(m, (size_t)i, EP_EV_DONE, CP_FINISH_CANCELLED, 0,
			    NULL);
		break;
	case EP_CMD_PAUSE:
		if (i >= 0)
			m->reqs[i].paused = 1;
		break;
	case EP_CMD_RESUME:
		if (i >= 0)
			m->reqs[i].paused = 0;
		break;
	case EP_CMD_SHUTDOWN:
		ep_cmd_free(c);
		return 1;
	}
	ep_cmd_free(c);
	return 0;
}

static int
ends_with_stop(const struct mock_req *r)
{
	uint32_t k;

	for (k = 0; k < r->cmd->n_stop; k++) {
		size_t sl = strlen(r->cmd->stop[k]);

		if (sl <= r->out_len &&
		    memcmp(r->out + r->out_len - sl, r->cmd->stop[k], sl) == 0)
			return 1;
	}
	return 0;
}

/*
 * Computes this step's share of r's prompt and reports it when asked;
 * returns 1 when the prompt is complete (the step goes on to a token).
 */
static int
prefill(struct mock_engine *m, struct mock_req *r)
{
	size_t total = prompt_len(r->cmd), n = total - r->prefilled;
	struct ep_event ev;

	if (m->o.prefill_chunk > 0 && n > m->o.prefill_chunk)
		n = m->o.prefill_chunk;
	r->prefilled += n;
	if (r->cmd->flags & EP_SUBMIT_PROGRESS) {
		memset(&ev, 0, sizeof(ev));
		ev.id = r->cmd->id;
		ev.type = EP_EV_PROGRESS;
		ev.token = -1;
		ev.n_prompt = (uint32_t)r->prefilled;
		ev.n_total = (uint32_t)total;
		ev.step = m->cur_step;
		mock_emit(m, &ev, NULL, 0);
	}
	return r->prefilled == total;
}

/* One token for request i; may finish it. */
static void
step_one(struct mock_engine *m, size_t i)
{
	struct mock_req *r = &m->reqs[i];
	const struct ep_cmd *c = r->cmd;
	uint32_t max = c->params.max_tokens ? c->params.max_tokens :
	    m->o.default_max_tokens;
	char text[256];
	struct ep_event ev;
	size_t len = 0, k;

	if (r->gen == 0 && !(c->flags & EP_SUBMIT_TOKENS) &&
	    c->text_len >= 6 && memcmp(c->text, "!error", 6) == 0) {
		finish(m, i, EP_EV_ERROR, 0, -EINVAL, "mock: error requested");
		return;
	}
	if (r->prefilled < prompt_len(c) && !prefill(m, r))
		return;
	if (r->pos >= prompt_len(c)) {
		finish(m, i, EP_EV_DONE, CP_FINISH_STOP, 0, NULL);
		return;
	}
	memset(&ev, 0, sizeof(ev));
	ev.id = c->id;
	ev.type = EP_EV_TOKEN;
	ev.step = m->cur_step;
	if (c->flags & EP_SUBMIT_TOKENS) {
		ev.token = c->tokens[r->pos];
		len = (size_t)snprintf(text, sizeof(text), "%d ", ev.token);
	} else {
		unsigned char b = (unsigned char)c->text[r->pos];

		ev.token = b;
		for (k = 0; k < m->o.text_repeat && k < sizeof(text); k++)
			text[k] = (char)b;
		len = k;
	}
	if (c->flags & EP_SUBMIT_LOGPROB)
		ev.logprob = -(float)(r->gen + 1) / 8.0f;
	r->pos++;
	r->gen++;
	m->stats.tokens_generated++;
	mock_emit(m, &ev, text, len);
	if (r->out_len + len > r->out_cap) {
		size_t cap = (r->out_len + len) * 2;
		char *o = realloc(r->out, cap);

		if (o != NULL) {
			r->out = o;
			r->out_cap = cap;
		}
	}
	if (r->out_len + len <= r->out_cap) {
		memcpy(r->out + r->out_len, text, len);
		r->out_len += len;
	}
	if (ends_with_stop(r))
		finish(m, i, EP_EV_DONE, CP_FINISH_STOP, 0, NULL);
	else if (r->gen >= max)
		finish(m, i, EP_EV_DONE, CP_FINISH_LENGTH, 0, NULL);
}

static void *
mock_main(void *arg)
{
	struct mock_engine *m = arg;
	struct ep_cmd *c, *next;
	size_t i, runnable;

	for (;;) {
		for (i = 0, runnable = 0; i < m->n; i++)
			runnable += !m->reqs[i].paused;
		if (runnable == 0)
			ep_wait_cmds(m->port, 100);
		for (c = ep_take_cmds(m->port); c != NULL; c = next) {
			next = c->next;
			if (command(m, c)) {
				ep_cmd_free_list(next);
				goto out;
			}
		}
		runnable = 0;
		m->cur_step = m->stats.steps + 1;
		/* Backwards: finish() moves the last request into slot i. */
		for (i = m->n; i-- > 0;) {
			if (m->reqs[i].paused)
				continue;
			runnable++;
			step_one(m, i);
		}
		m->cur_step = 0;
		if (runnable == 0 && m->batch.n == 0)
			continue;
		m->stats.steps++;
		ep_stats_set(m->port, &m->stats);
		ep_post(m->port, &m->batch, 1);
		if (m->o.step_us > 0)
			usleep((useconds_t)m->o.step_us);
	}
out:
	for (i = 0; i < m->n; i++)
		req_free(&m->reqs[i]);
	m->n = 0;
	return NULL;
}

int
mock_engine_start(struct engine_port *port, const struct mock_opts *o,
    struct mock_engine **out)
{
	struct mock_engine *m;
	int r;

	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	m->port = port;
	m->o = *o;
	if (m->o.text_repeat == 0)
		m->o.text_repeat = 1;
	r = pthread_create(&m->th, NULL, mock_main, m);
	if (r != 0) {
		free(m);
		return -r;
	}
	*out = m;
	return 0;
}

void
mock_engine_stop(struct mock_engine *m)
{
	if (m == NULL)
		return;
	ep_push_simple(m->port, EP_CMD_SHUTDOWN, 0, 0);
	pthread_join(m->th, NULL);
	ep_batch_fini(&m->batch);
	free(m->reqs);
	free(m);
}
