/*
 * prep.c - prompts tokenized off the engine thread (prep.h).
 *
 * Held commands wait in one FIFO in arrival order.  A text SUBMIT, or one
 * with a grammar, is also queued for the tokenizer thread, which fills in
 * its ids and grammar and marks it ready under the lock.  prep_next()
 * walks the FIFO from its head and returns the first command that is
 * ready (anything but a SUBMIT the thread still works on) and waits for
 * no earlier held command: a SUBMIT
 * for none of its client's SUBMITs, a CANCEL, PAUSE or RESUME for none
 * naming its id.
 */
#include "prep.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "chatwire.h"
#include "engine_port.h"
#include "grammar.h"
#include "tokenizer.h"

struct pjob {
	struct pjob *next;	/* the FIFO of held commands */
	struct pjob *tnext;	/* the tokenizer thread's queue */
	struct ep_cmd *c;
	bool work;		/* for the thread: a text SUBMIT or one
				   with a grammar */
	bool ready;		/* work: done (under lock) */
	struct prep_out o;	/* work: its results */
};

struct prep {
	const struct tokenizer *tok;
	enum chat_kind chat;
	const char *model;
	struct engine_port *port;
	int max_ids;
	struct pjob *head, **tailp;	/* held, engine thread only */
	int n_held;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct pjob *todo, **todo_tailp;	/* lock */
	bool stop;			/* lock */
	bool started;
	pthread_t th;
	struct gvocab *gv;		/* the thread's, from the first grammar */
};

struct prep *
prep_new(const struct tokenizer *tok, int max_ids, enum chat_kind chat,
    const char *model, struct engine_port *port)
{
	struct prep *p;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->tok = tok;
	p->chat = chat;
	p->model = model;
	p->port = port;
	p->max_ids = max_ids;
	p->tailp = &p->head;
	p->todo_tailp = &p->todo;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	return p;
}

int
prep_encode(const struct prep *p, const struct ep_cmd *c, int32_t *ids,
    int max_ids, struct cp_err *e)
{
	const char *text = c->text != NULL ? c->text : "";
	char *chat = NULL;
	size_t len = c->text_len;
	int n;

	if ((c->flags & EP_SUBMIT_CHAT) && (n = chatwire_render(p->chat,
	    p->model, text, len, &chat, &len, e)) < 0)
		return n;
	n = tok_encode(p->tok, chat != NULL ? chat : text, len, true, true,
	    ids, max_ids);
	free(chat);
	return n;
}

/* The grammar of SUBMIT c and its matcher into o; the thread only. */
static void
prep_grammar(struct prep *p, const struct ep_cmd *c, struct prep_out *o)
{
	struct cp_err *e = &o->gram_e;
	int rc;

	if (p->gv == NULL && (rc = gvocab_new(p->tok, &p->gv, e)) < 0) {
		o->gram_rc = rc;
		return;
	}
	switch (c->params.grammar) {
	case CP_GRAM_GBNF:
		rc = grammar_from_gbnf(c->gram, c->gram_len, &o->gram, e);
		break;
	case CP_GRAM_SCHEMA:
		rc = grammar_from_schema(c->gram, c->gram_len, &o->gram, e);
		break;
	case CP_GRAM_JSON:
		rc = grammar_any_json(&o->gram, e);
		break;
	default:
		rc = cp_err_set(e, -EINVAL, "unknown grammar kind %u",
		    c->params.grammar);
		break;
	}
	if (rc == 0 && (o->gm = gmatch_new(o->gram, p->gv, e)) == NULL)
		rc = e->code < 0 ? e->code : -ENOMEM;
	if (rc < 0) {
		grammar_free(o->gram);
		o->gram = NULL;
		o->gram_rc = rc;
	}
}

static void *
prep_thread(void *arg)
{
	struct prep *p = arg;
	struct prep_out o;
	struct pjob *j;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->todo == NULL)
			pthread_cond_wait(&p->cond, &p->lock);
		if (p->stop)
			break;
		j = p->todo;
		if ((p->todo = j->tnext) == NULL)
			p->todo_tailp = &p->todo;
		pthread_mutex_unlock(&p->lock);
		/* j->c is read-only while queued; the engine frees it only
		 * once j is ready */
		memset(&o, 0, sizeof(o));
		if (j->c->params.grammar != 0)
			prep_grammar(p, j->c, &o);
		/* a grammar that failed fails the request: no ids needed */
		if (!(j->c->flags & EP_SUBMIT_TOKENS) && o.gram_rc == 0) {
			o.ids = malloc((size_t)p->max_ids * sizeof(*o.ids));
			o.n = o.ids == NULL ? -ENOMEM : prep_encode(p, j->c,
			    o.ids, p->max_ids, &o.e);
		}
		pthread_mutex_lock(&p->lock);
		j->o = o;
		j->ready = true;
		pthread_mutex_unlock(&p->lock);
		ep_wake_engine(p->port);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void
prep_out_free(struct prep_out *o)
{
	free(o->ids);
	gmatch_free(o->gm);
	grammar_free(o->gram);
}

void
prep_free(struct prep *p)
{
	struct pjob *j, *next;

	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->th, NULL);
	for (j = p->head; j != NULL; j = next) {
		next = j->next;
		ep_cmd_free(j->c);
		prep_out_free(&j->o);
		free(j);
	}
	gvocab_free(p->gv);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/*
 * True when c has to wait for a command held before stop (NULL: any held
 * command): a SUBMIT for a SUBMIT of its client, another command for one
 * with its id.
 */
static bool
waits(const struct prep *p, const struct pjob *stop, const struct ep_cmd *c)
{
	for (const struct pjob *j = p->head; j != stop; j = j->next) {
		if (c->kind == EP_CMD_SUBMIT ? j->c->kind == EP_CMD_SUBMIT &&
		    j->c->client == c->client : j->c->id == c->id)
			return true;
	}
	return false;
}

int
prep_hold(struct prep *p, struct ep_cmd *c)
{
	bool sub = c->kind == EP_CMD_SUBMIT;
	bool text = sub && !(c->flags & EP_SUBMIT_TOKENS);
	bool work = text || (sub && c->params.grammar != 0);
	struct pjob *j;

	if ((!work || (text && c->params.grammar == 0 &&
	    c->text_len <= PREP_INLINE_BYTES &&
	    !(c->flags & EP_SUBMIT_CHAT))) && !waits(p, NULL, c))
		return 0;
	if ((j = calloc(1, sizeof(*j))) == NULL)
		return -ENOMEM;
	j->c = c;
	j->work = work;
	if (work && !p->started) {
		if (pthread_create(&p->th, NULL, prep_thread, p) != 0) {
			free(j);
			return -ENOMEM;
		}
		p->started = true;
	}
	*p->tailp = j;
	p->tailp = &j->next;
	p->n_held++;
	if (work) {
		pthread_mutex_lock(&p->lock);
		*p->todo_tailp = j;
		p->todo_tailp = &j->tnext;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
	return 1;
}

struct ep_cmd *
prep_next(struct prep *p, struct prep_out *o)
{
	struct pjob *j, **prev;
	struct ep_cmd *c;
	bool ready;

	memset(o, 0, sizeof(*o));
	for (prev = &p->head; (j = *prev) != NULL; prev = &j->next) {
		if (j->work) {
			pthread_mutex_lock(&p->lock);
			ready = j->ready;
			pthread_mutex_unlock(&p->lock);
			if (!ready)
				continue;
		}
		if (waits(p, j, j->c))
			continue;
		if ((*prev = j->next) == NULL)
			p->tailp = prev;
		p->n_held--;
		c = j->c;
		*o = j->o;
		free(j);
		return c;
	}
	return NULL;
}

int
prep_held(const struct prep *p)
{
	return p->n_held;
}
