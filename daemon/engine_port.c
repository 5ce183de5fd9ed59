/*
 * engine_port.c - the two queues between the io loop and the engine thread
 * (see engine_port.h for what each side promises).
 *
 * Each queue is guarded by its own mutex, held only to link or swap
 * buffers, never across a syscall that can block.  An eventfd per queue
 * carries "something is waiting": the pusher writes it after unlocking, the
 * taker reads it (non-blocking) before taking, so a push racing with a take
 * leaves the eventfd readable and is never lost.
 */
#include "engine_port.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* The events and text bytes the port's buffer holds from the start. */
#define EP_RESERVE_EVENTS	256
#define EP_RESERVE_TEXT		16384

struct engine_port {
	pthread_mutex_t cmd_lock;
	struct ep_cmd *cmd_head;	/* FIFO, cmd_lock */
	struct ep_cmd **cmd_tailp;
	int cmd_efd;

	pthread_mutex_t ev_lock;
	pthread_cond_t ev_taken;	/* the io loop took the pending events */
	struct ep_batch ev;		/* pending events, ev_lock */
	int ev_efd;
	int shutdown;			/* SHUTDOWN pushed, ev_lock */

	pthread_mutex_t stats_lock;
	struct ep_stats stats;
};

static void
efd_signal(int fd)
{
	uint64_t one = 1;

	/* EAGAIN means the counter is already huge: still readable. */
	while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

static void
efd_drain(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
}

/* Grows an array of size elements so that it holds at least want; 0 or -ENOMEM. */
static int
grow(void **arr, size_t *cap, size_t want, size_t size)
{
	size_t ncap;
	void *n;

	if (want <= *cap)
		return 0;
	ncap = *cap ? *cap : 16;
	while (ncap < want) {
		if (ncap > SIZE_MAX / 2 / size)
			return -ENOMEM;
		ncap *= 2;
	}
	n = realloc(*arr, ncap * size);
	if (n == NULL)
		return -ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

struct engine_port *
ep_new(void)
{
	struct engine_port *p;

	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return NULL;
	p->cmd_efd = p->ev_efd = -1;
	p->cmd_tailp = &p->cmd_head;
	pthread_mutex_init(&p->cmd_lock, NULL);
	pthread_mutex_init(&p->ev_lock, NULL);
	pthread_cond_init(&p->ev_taken, NULL);
	pthread_mutex_init(&p->stats_lock, NULL);
	p->cmd_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->cmd_efd < 0)
		goto err;
	p->ev_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->ev_efd < 0)
		goto err;
	/* The event buffers' first memory (see ep_take_events()). */
	if (grow((void **)&p->ev.ev, &p->ev.cap, EP_RESERVE_EVENTS,
	    sizeof(*p->ev.ev)) < 0 ||
	    grow((void **)&p->ev.text, &p->ev.text_cap, EP_RESERVE_TEXT, 1) < 0)
		goto err;
	return p;
err:
	ep_free(p);
	return NULL;
}

void
ep_free(struct engine_port *p)
{
	int saved = errno;

	if (p == NULL)
		return;
	ep_cmd_free_list(p->cmd_head);
	ep_batch_fini(&p->ev);
	if (p->cmd_efd >= 0)
		close(p->cmd_efd);
	if (p->ev_efd >= 0)
		close(p->ev_efd);
	pthread_mutex_destroy(&p->cmd_lock);
	pthread_mutex_destroy(&p->ev_lock);
	pthread_cond_destroy(&p->ev_taken);
	pthread_mutex_destroy(&p->stats_lock);
	free(p);
	errno = saved;
}

struct ep_cmd *
ep_cmd_new(uint32_t kind, size_t data_bytes)
{
	struct ep_cmd *c;

	if (data_bytes > SIZE_MAX - sizeof(*c))
		return NULL;
	c = calloc(1, sizeof(*c) + data_bytes);
	if (c == NULL)
		return NULL;
	c->kind = kind;
	return c;
}

void
ep_cmd_free(struct ep_cmd *c)
{
	free(c);
}

void
ep_cmd_free_list(struct ep_cmd *c)
{
	while (c != NULL) {
		struct ep_cmd *next = c->next;

		free(c);
		c = next;
	}
}

int
ep_push(struct engine_port *p, struct ep_cmd *c)
{
	/* Once queued, c is the engine's: it may be freed at once. */
	uint32_t kind = c->kind;

	c->next = NULL;
	pthread_mutex_lock(&p->cmd_lock);
	*p->cmd_tailp = c;
	p->cmd_tailp = &c->next;
	pthread_mutex_unlock(&p->cmd_lock);
	if (kind == EP_CMD_SHUTDOWN) {
		/* An engine waiting in ep_post() must see it. */
		pthread_mutex_lock(&p->ev_lock);
		p->shutdown = 1;
		pthread_cond_broadcast(&p->ev_taken);
		pthread_mutex_unlock(&p->ev_lock);
	}
	efd_signal(p->cmd_efd);
	return 0;
}

int
ep_push_simple(struct engine_port *p, uint32_t kind, uint32_t client,
    uint64_t id)
{
	struct ep_cmd *c;

	c = ep_cmd_new(kind, 0);
	if (c == NULL)
		return -ENOMEM;
	c->client = client;
	c->id = id;
	return ep_push(p, c);
}

int
ep_cmd_fd(const struct engine_port *p)
{
	return p->cmd_efd;
}

struct ep_cmd *
ep_take_cmds(struct engine_port *p)
{
	struct ep_cmd *list;

	efd_drain(p->cmd_efd);
	pthread_mutex_lock(&p->cmd_lock);
	list = p->cmd_head;
	p->cmd_head = NULL;
	p->cmd_tailp = &p->cmd_head;
	pthread_mutex_unlock(&p->cmd_lock);
	return list;
}

void
ep_wake_engine(struct engine_port *p)
{
	efd_signal(p->cmd_efd);
}

int
ep_wait_cmds(struct engine_port *p, int timeout_ms)
{
	struct pollfd pfd = { .fd = p->cmd_efd, .events = POLLIN };
	int r;

	r = poll(&pfd, 1, timeout_ms);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	return r > 0;
}

int
ep_batch_add(struct ep_batch *b, const struct ep_event *ev, const void *text,
    size_t len)
{
	return ep_batch_add_top(b, ev, text, len, NULL, 0);
}

int
ep_batch_add_top(struct ep_batch *b, const struct ep_event *ev,
    const void *text, size_t len, const struct cp_top *top, uint32_t n_top)
{
	size_t top_bytes = (size_t)n_top * sizeof(*top), all;
	struct ep_event *e;

	if (n_top > CP_TOPN_MAX)
		return -EINVAL;
	if (len > UINT32_MAX - top_bytes)
		return -ENOMEM;
	all = len + top_bytes;
	if (b->text_len > UINT32_MAX - all)
		return -ENOMEM;
	if (grow((void **)&b->ev, &b->cap, b->n + 1, sizeof(*b->ev)) < 0)
		return -ENOMEM;
	if (grow((void **)&b->text, &b->text_cap, b->text_len + all, 1) < 0)
		return -ENOMEM;
	e = &b->ev[b->n++];
	*e = *ev;
	e->text_off = (uint32_t)b->text_len;
	e->text_len = (uint32_t)len;
	e->n_top = n_top;
	if (len > 0)
		memcpy(b->text + b->text_len, text, len);
	if (top_bytes > 0)
		memcpy(b->text + b->text_len + len, top, top_bytes);
	b->text_len += all;
	return 0;
}

void
ep_batch_clear(struct ep_batch *b)
{
	b->n = 0;
	b->text_len = 0;
	b->steps = 0;
}

void
ep_batch_fini(struct ep_batch *b)
{
	free(b->ev);
	free(b->text);
	memset(b, 0, sizeof(*b));
}

int
ep_post(struct engine_port *p, struct ep_batch *b, int step)
{
	struct ep_batch *q = &p->ev;
	size_t i;

	pthread_mutex_lock(&p->ev_lock);
	if (q->n == 0 && q->text_len == 0) {
		/* Common case: swap buffers instead of copying. */
		struct ep_batch t = *q;

		t.steps = q->steps;
		*q = *b;
		q->steps = t.steps + b->steps;
		*b = t;
		b->steps = 0;
	} else {
		if (grow((void **)&q->ev, &q->cap, q->n + b->n,
		    sizeof(*q->ev)) < 0 ||
		    grow((void **)&q->text, &q->text_cap,
		    q->text_len + b->text_len, 1) < 0 ||
		    q->text_len + b->text_len > UINT32_MAX) {
			pthread_mutex_unlock(&p->ev_lock);
			return -ENOMEM;
		}
		for (i = 0; i < b->n; i++) {
			q->ev[q->n + i] = b->ev[i];
			q->ev[q->n + i].text_off += (uint32_t)q->text_len;
		}
		if (b->text_len > 0)
			memcpy(q->text + q->text_len, b->text, b->text_len);
		q->n += b->n;
		q->text_len += b->text_len;
		q->steps += b->steps;
	}
	if (step)
		q->steps++;
	ep_batch_clear(b);
	efd_signal(p->ev_efd);
	while (q->steps >= EP_MAX_LAG && !p->shutdown)
		pthread_cond_wait(&p->ev_taken, &p->ev_lock);
	pthread_mutex_unlock(&p->ev_lock);
	return 0;
}

int
ep_event_fd(const struct engine_port *p)
{
	return p->ev_efd;
}

size_t
ep_take_events(struct engine_port *p, struct ep_batch *out)
{
	struct ep_batch t;

	ep_batch_clear(out);
	efd_drain(p->ev_efd);
	pthread_mutex_lock(&p->ev_lock);
	/*
	 * The engine gets out's memory in exchange for its events: grow it
	 * first to what the engine gives, so that buffers only grow on this
	 * side and, once they hold a busy turn's events, the engine's steps
	 * allocate nothing.  A failure here only forgoes that.
	 */
	(void)grow((void **)&out->ev, &out->cap, p->ev.cap, sizeof(*out->ev));
	(void)grow((void **)&out->text, &out->text_cap, p->ev.text_cap, 1);
	t = p->ev;
	p->ev = *out;
	*out = t;
	pthread_cond_broadcast(&p->ev_taken);
	pthread_mutex_unlock(&p->ev_lock);
	return out->n;
}

void
ep_stats_set(struct engine_port *p, const struct ep_stats *s)
{
	pthread_mutex_lock(&p->stats_lock);
	p->stats = *s;
	pthread_mutex_unlock(&p->stats_lock);
}

void
ep_stats_get(struct engine_port *p, struct ep_stats *s)
{
	pthread_mutex_lock(&p->stats_lock);
	*s = p->stats;
	pthread_mutex_unlock(&p->stats_lock);
}
