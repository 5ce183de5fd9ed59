/*
 * session.c - one client of cpd (see session.h).
 *
 * STATES.
 *
 *	HELLO	accepted; the server waits (with a deadline) for the first
 *		record, which must be a well-formed cp_hello.
 *	ACTIVE	the segment exists and is shared: sess_setup() made it,
 *		the server sent the welcome.  sess_consume() drains the SQ,
 *		sess_post()/sess_flush() fill the CQ.
 *	(gone)	server.c's one teardown function cancels the session's
 *		requests in the engine, stops the loop's watches and waits,
 *		then sess_free() unmaps and closes everything.  Hangup, a
 *		violation, a failed handshake and daemon shutdown all take
 *		this path; a session is never repaired.
 *
 * INVARIANTS.
 *
 *  1. Every size and offset used to reach the segment is a private copy
 *     fixed by sess_setup(); the header page is never read back.
 *  2. Client-written words (sq_tail, cq_head, client_waiting, SQ slots) are
 *     each read once per use into a local, and only the local is checked
 *     and used.  Arena bytes are copied out before sq_head moves past the
 *     entry naming them.
 *  3. sq_head == the value last released to the client; cq_pub == the
 *     value last released as cq_tail; cq_pub <= cq_tail and
 *     cq_tail - (client's cq_head) <= cq_entries.
 *  4. A request id is in reqs[] from its complete SUBMIT until the engine's
 *     terminal event for it is written (to the CQ or the overflow); the
 *     engine is told about a request only while it is in reqs[].
 *  5. SUBMIT ids strictly increase; a CANCEL or APPEND naming an id that
 *     was never submitted is a violation, a CANCEL of an ended one a no-op.
 *  6. The overflow queue holds whole CQE groups in order; while it is not
 *     empty nothing is written to the CQ around it, so the client sees
 *     every request's events in engine order.
 *  7. n_reqs + (build.active ? 1 : 0) <= max_reqs.
 *  8. A PROGRESS event reaches the CQ only for a request that asked for it
 *     (CP_PF_PROGRESS), only when its whole CQE fits at once with nothing
 *     in the overflow, and with 0 < n_prompt <= n_total; otherwise it is
 *     dropped.  Progress is advisory: it never pauses a client nor takes
 *     room that tokens need.
 */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring.h"

#define SESS_RECV_FDS	8	/* room for descriptors we refuse and close */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD	77	/* Linux 6.5; older C libraries lack the name */
#endif

/* Records the reason for ending the session in s->why; returns -EPROTO. */
static int violation(struct session *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int
violation(struct session *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
	return -EPROTO;
}

struct session *
sess_new(int fd, uint32_t slot, uint32_t gen)
{
	struct session *s;

	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		close(fd);
		return NULL;
	}
	s->fd = fd;
	s->slot = slot;
	s->gen = gen;
	s->state = SESS_HELLO;
	s->cq_wfd = -1;
	s->sq_rfd = -1;
	s->pidfd = -1;
	return s;
}

void
sess_free(struct session *s)
{
	if (s == NULL)
		return;
	if (s->map != NULL)
		munmap(s->map, s->map_len);
	if (s->fd >= 0)
		close(s->fd);
	if (s->cq_wfd >= 0)
		close(s->cq_wfd);
	if (s->sq_rfd >= 0)
		close(s->sq_rfd);
	if (s->pidfd >= 0)
		close(s->pidfd);
	free(s->reqs);
	free(s->build.buf);
	free(s->ovf);
	free(s);
}

int
sess_peercred(struct session *s)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(s->fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (len != sizeof(uc))
		return -EPROTO;
	s->pid = uc.pid;
	s->uid = uc.uid;
	s->gid = uc.gid;
	len = sizeof(s->pidfd);
	if (getsockopt(s->fd, SOL_SOCKET, SO_PEERPIDFD, &s->pidfd, &len) < 0 ||
	    len != sizeof(s->pidfd))
		s->pidfd = -1;
	return 0;
}

int
sess_recv(int fd, void *buf, size_t size, size_t *len)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * SESS_RECV_FDS)];
	} cb;
	struct iovec iov = { .iov_base = buf, .iov_len = size };
	struct msghdr m;
	struct cmsghdr *c;
	int had_cmsg = 0;
	ssize_t n;

	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cb.b;
	m.msg_controllen = sizeof(cb.b);
	do
		n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -EAGAIN;
		if (errno == ECONNRESET)
			return -EPIPE;
		return -errno;
	}
	/* Descriptors from a client are never used: close them all. */
	for (c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
		had_cmsg = 1;
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			size_t k, nfd;
			int fdv;

			nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (k = 0; k < nfd; k++) {
				memcpy(&fdv, CMSG_DATA(c) + k * sizeof(int),
				    sizeof(int));
				close(fdv);
			}
		}
	}
	if (had_cmsg || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)))
		return -EPROTO;
	if (n == 0)
		return -EPIPE;
	*len = (size_t)n;
	return 0;
}

int
sess_send(int fd, const void *msg, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * CP_FD_MAX)];
	} cb;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr m;
	struct cmsghdr *c;
	ssize_t n;

	if (nfds < 0 || nfds > CP_FD_MAX)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	memset(&cb, 0, sizeof(cb));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	if (nfds > 0) {
		m.msg_control = cb.b;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	do
		n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n != len)
		return -EIO;
	return 0;
}

int
sess_hello_check(const void *buf, size_t len, struct cp_hello *out)
{
	struct cp_hello h;
	size_t i;

	if (len != sizeof(h))
		return -EPROTO;
	memcpy(&h, buf, sizeof(h));
	if (h.hdr.magic != CP_PROTO_MAGIC || h.hdr.type != CP_MSG_HELLO)
		return -EPROTO;
	if (h.hdr.version != CP_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	if (h.flags != 0)
		return -EPROTO;
	for (i = 0; i < sizeof(h.reserved) / sizeof(h.reserved[0]); i++)
		if (h.reserved[i] != 0)
			return -EPROTO;
	*out = h;
	return 0;
}

/* want (0 = def) rounded up to a power of two within [min, max] (max a power of two). */
static uint32_t
clamp_pow2(uint32_t want, uint32_t def, uint32_t min, uint32_t max)
{
	uint32_t v = min;

	if (want == 0)
		want = def;
	while (v < want && v < max)
		v <<= 1;
	return v;
}

static void
close_fds(int *fds, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

int
sess_setup(struct session *s, const struct cp_hello *hello,
    const struct sess_limits *lim, struct cp_welcome *w,
    int fds[CP_FD_MAX], int *nfds)
{
	struct cp_seg_layout l;
	struct cp_seg_hdr *h;
	uint32_t sq, cq, arena;
	int cqp[2] = { -1, -1 }, sqp[2] = { -1, -1 };
	int memfd = -1, r, i;
	void *map = MAP_FAILED;

	for (i = 0; i < CP_FD_MAX; i++)
		fds[i] = -1;
	*nfds = 0;
	if (lim->max_reqs == 0 || lim->max_reqs > SESS_MAX_REQS ||
	    (lim->wake_mode != CP_WAKE_FUTEX && lim->wake_mode != CP_WAKE_FD))
		return -EINVAL;
	sq = clamp_pow2(hello->sq_entries, lim->sq_default, CP_SQ_MIN,
	    lim->sq_max);
	cq = clamp_pow2(hello->cq_entries, lim->cq_default, CP_CQ_MIN,
	    lim->cq_max);
	arena = clamp_pow2(hello->arena_bytes, lim->arena_default,
	    CP_ARENA_MIN, lim->arena_max);
	if ((r = cp_seg_layout(sq, cq, arena, &l)) < 0)
		return r;

	memfd = memfd_create("cpd-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0)
		goto err_errno;
	if (ftruncate(memfd, (off_t)l.seg_bytes) < 0)
		goto err_errno;
	map = mmap(NULL, l.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
	    memfd, 0);
	if (map == MAP_FAILED)
		goto err_errno;
	h = map;
	h->magic = CP_SEG_MAGIC;
	h->version = CP_PROTO_VERSION;
	h->hdr_bytes = sizeof(*h);
	h->wake_mode = lim->wake_mode;
	h->seg_bytes = l.seg_bytes;
	h->ctl_off = l.ctl_off;
	h->sq_off = l.sq_off;
	h->arena_off = l.arena_off;
	h->cq_off = l.cq_off;
	h->sq_entries = sq;
	h->cq_entries = cq;
	h->arena_bytes = arena;
	h->sqe_bytes = sizeof(struct cp_sqe);
	h->cqe_bytes = sizeof(struct cp_cqe);
	if (fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
	    F_SEAL_SEAL) < 0)
		goto err_errno;
	if (pipe2(cqp, O_CLOEXEC | O_NONBLOCK) < 0)
		goto err_errno;
	if (lim->wake_mode == CP_WAKE_FD &&
	    pipe2(sqp, O_CLOEXEC | O_NONBLOCK) < 0)
		goto err_errno;

	s->reqs = calloc(lim->max_reqs, sizeof(*s->reqs));
	/*
	 * Room for what the engine makes between a pause and its effect
	 * (EP_MAX_LAG steps a request, a few CQEs each), on top of the CQ.
	 */
	s->ovf_max = (size_t)cq * 4 + (size_t)lim->max_reqs *
	    (EP_MAX_LAG + 2) * 4;
	if (s->ovf_max < 4096)
		s->ovf_max = 4096;
	if (s->reqs == NULL) {
		r = -ENOMEM;
		goto err;
	}
	s->map = map;
	s->map_len = l.seg_bytes;
	s->ctl = (struct cp_seg_ctl *)(s->map + l.ctl_off);
	s->sq = (struct cp_sqe *)(s->map + l.sq_off);
	s->arena = s->map + l.arena_off;
	s->cq = (struct cp_cqe *)(s->map + l.cq_off);
	s->sq_entries = sq;
	s->cq_entries = cq;
	s->arena_bytes = arena;
	s->wake_mode = lim->wake_mode;
	s->sq_head = s->cq_tail = s->cq_pub = 0;
	/* A group never needs more than half the ring (rule 5 of cp_proto.h). */
	s->text_chunk = CP_CQE_TEXT * (cq / 2);
	if (s->text_chunk > CP_EVENT_TEXT_MAX)
		s->text_chunk = CP_EVENT_TEXT_MAX;
	s->max_reqs = lim->max_reqs;
	s->max_prompt = lim->max_prompt_bytes;
	s->cq_wfd = cqp[1];
	s->sq_rfd = sqp[0];
	s->state = SESS_ACTIVE;

	memset(w, 0, sizeof(*w));
	w->hdr.magic = CP_PROTO_MAGIC;
	w->hdr.type = CP_MSG_WELCOME;
	w->hdr.version = CP_PROTO_VERSION;
	w->status = 0;
	w->wake_mode = lim->wake_mode;
	w->seg_bytes = l.seg_bytes;
	w->sq_entries = sq;
	w->cq_entries = cq;
	w->arena_bytes = arena;
	w->max_prompt_bytes = lim->max_prompt_bytes;
	w->max_reqs = lim->max_reqs;
	w->features = CP_FEAT_PROGRESS | CP_FEAT_STRICT | CP_FEAT_CHAT |
	    CP_FEAT_TOPN;
	s->features = w->features;
	fds[CP_FD_MEMFD] = memfd;
	fds[CP_FD_CQ_WAKE] = cqp[0];
	*nfds = 2;
	if (lim->wake_mode == CP_WAKE_FD) {
		fds[CP_FD_SQ_WAKE] = sqp[1];
		*nfds = 3;
	}
	w->n_fds = (uint32_t)*nfds;
	return 0;

err_errno:
	r = -errno;
err:
	close_fds(cqp, 2);
	close_fds(sqp, 2);
	if (map != MAP_FAILED)
		munmap(map, l.seg_bytes);
	if (memfd >= 0)
		close(memfd);
	free(s->reqs);
	s->reqs = NULL;
	return r;
}

void
sess_out_init(struct sess_out *o)
{
	o->head = NULL;
	o->tail = &o->head;
	o->n = 0;
}

static void
out_add(struct sess_out *o, struct ep_cmd *c)
{
	c->next = NULL;
	*o->tail = c;
	o->tail = &c->next;
	o->n++;
}

struct sess_req *
sess_req_find(struct session *s, uint32_t req_id)
{
	uint32_t i;

	for (i = 0; i < s->n_reqs; i++)
		if (s->reqs[i].req_id == req_id)
			return &s->reqs[i];
	return NULL;
}

static void
req_remove(struct session *s, struct sess_req *r)
{
	/* Order does not matter: move the last entry into the hole. */
	*r = s->reqs[--s->n_reqs];
}

/* The n of p's top-n list (CP_PF_TOPN_BITS). */
static uint32_t
wire_top_n(const struct cp_wire_params *p)
{
	return (p->flags & CP_PF_TOPN_BITS) >> CP_PF_TOPN_SHIFT;
}

/* The CP_GRAM_* kind of p's grammar, 0 for none. */
static uint32_t
wire_grammar(const struct cp_wire_params *p)
{
	return (p->flags & CP_PF_GRAMMAR_BITS) >> CP_PF_GRAMMAR_SHIFT;
}

/* Checks SUBMIT e's grammar fields against what s offers; 0 or a
 * violation. */
static int
grammar_check(struct session *s, const struct cp_sqe *e)
{
	uint32_t k = wire_grammar(&e->params);

	if (k != 0 && !(s->features & CP_FEAT_GRAMMAR))
		return violation(s, "req %u: a grammar, which this daemon "
		    "does not offer", e->req_id);
	if (k == CP_GRAM_GBNF || k == CP_GRAM_SCHEMA ?
	    e->grammar_bytes == 0 || e->grammar_bytes > CP_GRAMMAR_BYTES_MAX :
	    e->grammar_bytes != 0)
		return violation(s, "req %u: grammar of kind %u with %u bytes",
		    e->req_id, k, e->grammar_bytes);
	return 0;
}

/* Checks sampling parameters; 0 or a violation. */
static int
params_check(struct session *s, uint32_t req_id, const struct cp_wire_params *p)
{
	if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
		return violation(s, "req %u: temperature %g outside [0, 100]",
		    req_id, (double)p->temperature);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return violation(s, "req %u: top_p %g outside (0, 1]", req_id,
		    (double)p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return violation(s, "req %u: min_p %g outside [0, 1]", req_id,
		    (double)p->min_p);
	if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= 16.0f))
		return violation(s, "req %u: repeat_penalty %g outside (0, 16]",
		    req_id, (double)p->repeat_penalty);
	if (p->top_k < 0 || p->top_k > CP_PARAM_TOPK_MAX)
		return violation(s, "req %u: top_k %d outside [0, %d]", req_id,
		    p->top_k, CP_PARAM_TOPK_MAX);
	if (p->repeat_last_n > CP_PARAM_LASTN_MAX)
		return violation(s, "req %u: repeat_last_n %u over %u", req_id,
		    p->repeat_last_n, CP_PARAM_LASTN_MAX);
	if (p->flags & ~CP_PF_MASK)
		return violation(s, "req %u: unknown parameter flags %#x",
		    req_id, p->flags & ~CP_PF_MASK);
	if (wire_top_n(p) > CP_TOPN_MAX)
		return violation(s, "req %u: top-n %u over %u", req_id,
		    wire_top_n(p), CP_TOPN_MAX);
	return 0;
}

/* Checks the stop block copied to stops[len]; 0 or a violation. */
static int
stops_check(struct session *s, uint32_t req_id, const char *stops,
    uint32_t len)
{
	uint32_t i, start = 0, n = 0;

	if (len == 0)
		return 0;
	if (stops[len - 1] != '\0')
		return violation(s, "req %u: stop block not NUL-terminated",
		    req_id);
	for (i = 0; i < len; i++) {
		if (stops[i] != '\0')
			continue;
		if (i == start)
			return violation(s, "req %u: empty stop string",
			    req_id);
		if (++n > CP_STOP_MAX)
			return violation(s, "req %u: more than %u stop strings",
			    req_id, CP_STOP_MAX);
		start = i + 1;
	}
	return 0;
}

static int
is_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != 0)
			return 0;
	return 1;
}

static int
build_append(struct session *s, const unsigned char *src, uint32_t len)
{
	struct sess_build *b = &s->build;
	unsigned char *n;
	size_t cap;

	if (len == 0)
		return 0;
	if (b->len + len > b->cap) {
		cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		n = realloc(b->buf, cap);
		if (n == NULL)
			return -ENOMEM;
		b->buf = n;
		b->cap = cap;
	}
	memcpy(b->buf + b->len, src, len);
	b->len += len;
	return 0;
}

/*
 * Ends the request being built with ERROR -ENOMEM: an allocation for it
 * failed.  Its entry is made only to carry that event, which removes it.
 */
static int
build_fail_oom(struct session *s)
{
	static const char msg[] = "cpd: out of memory for this request";
	struct sess_build *b = &s->build;
	struct ep_event ev;
	int r;

	memset(&s->reqs[s->n_reqs], 0, sizeof(s->reqs[0]));
	s->reqs[s->n_reqs++].req_id = b->req_id;
	b->active = 0;
	b->len = 0;
	b->oom = 0;
	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_ERROR;
	ev.token = -1;
	ev.error = -ENOMEM;
	ev.text_len = sizeof(msg) - 1;
	r = sess_post(s, b->req_id, &ev, msg);
	return r < 0 ? r : 0;
}

/* Adds prompt bytes to the build; out of memory marks it failed (b->oom). */
static int
build_add(struct session *s, const unsigned char *src, uint32_t len)
{
	int r;

	if (s->build.oom)
		return 0;
	r = build_append(s, src, len);
	if (r == -ENOMEM) {
		s->build.oom = 1;
		r = 0;
	}
	return r;
}

/* Turns the finished build into a SUBMIT command and a request entry. */
static int
build_finish(struct session *s, struct sess_out *out)
{
	struct sess_build *b = &s->build;
	const struct cp_wire_params *wp = &b->params;
	struct ep_cmd *c;
	char *stops;
	uint32_t i, start;

	if (b->oom)
		return build_fail_oom(s);
	if (b->len < b->gram_pad)
		return violation(s, "req %u: prompt stream of %zu bytes ends "
		    "inside its grammar of %u", b->req_id, b->len,
		    b->gram_bytes);
	if (b->gram_pad > b->gram_bytes &&
	    !is_zero(b->buf + b->gram_bytes, b->gram_pad - b->gram_bytes))
		return violation(s, "req %u: grammar padding not zero",
		    b->req_id);
	c = ep_cmd_new(EP_CMD_SUBMIT, b->len + b->stop_bytes);
	if (c == NULL)
		return build_fail_oom(s);
	c->client = s->slot;
	c->uid = (uint32_t)s->uid;
	c->pid = (int32_t)s->pid;
	c->id = sess_port_id(s->slot, s->gen, b->req_id);
	if (b->len > 0)
		memcpy(c->data, b->buf, b->len);
	if (b->gram_bytes > 0) {
		c->gram = (const char *)c->data;
		c->gram_len = b->gram_bytes;
	}
	if (b->sqe_flags & CP_SQF_TOKENS) {
		c->flags |= EP_SUBMIT_TOKENS;
		c->tokens = (const int32_t *)(void *)(c->data + b->gram_pad);
		c->n_tokens = (b->len - b->gram_pad) / 4;
	} else {
		c->text = (const char *)c->data + b->gram_pad;
		c->text_len = b->len - b->gram_pad;
		if (b->sqe_flags & CP_SQF_CHAT)
			c->flags |= EP_SUBMIT_CHAT;
	}
	stops = (char *)c->data + b->len;
	memcpy(stops, b->stops, b->stop_bytes);
	for (i = 0, start = 0; i < b->stop_bytes; i++) {
		if (stops[i] == '\0') {
			c->stop[c->n_stop++] = stops + start;
			start = i + 1;
		}
	}
	if (wp->flags & CP_PF_SEED)
		c->flags |= EP_SUBMIT_SEED;
	if (wp->flags & CP_PF_LOGPROB)
		c->flags |= EP_SUBMIT_LOGPROB;
	if (wp->flags & CP_PF_PROGRESS)
		c->flags |= EP_SUBMIT_PROGRESS;
	if (wp->flags & CP_PF_STRICT)
		c->flags |= EP_SUBMIT_STRICT;
	c->params.max_tokens = wp->max_tokens;
	c->params.temperature = wp->temperature;
	c->params.top_p = wp->top_p;
	c->params.min_p = wp->min_p;
	c->params.repeat_penalty = wp->repeat_penalty;
	c->params.top_k = wp->top_k;
	c->params.repeat_last_n = wp->repeat_last_n;
	c->params.seed = wp->seed;
	c->params.top_n = wire_top_n(wp);
	c->params.grammar = wire_grammar(wp);

	memset(&s->reqs[s->n_reqs], 0, sizeof(s->reqs[0]));
	s->reqs[s->n_reqs].progress = (wp->flags & CP_PF_PROGRESS) != 0;
	s->reqs[s->n_reqs].top_n = (uint8_t)wire_top_n(wp);
	s->reqs[s->n_reqs++].req_id = b->req_id;
	s->n_submitted++;
	b->active = 0;
	b->len = 0;
	out_add(out, c);
	return 0;
}

/* Applies one validated-on-the-way SQ entry (a private copy). */
static int
sqe_apply(struct session *s, const struct cp_sqe *e, struct sess_out *out)
{
	struct sess_build *b = &s->build;
	struct sess_req *r;
	uint32_t frag, gpad;
	int rc;

	if (e->reserved != 0)
		return violation(s, "SQ entry with its reserved word set");
	if (e->op != CP_OP_SUBMIT && e->op != CP_OP_APPEND &&
	    e->op != CP_OP_CANCEL)
		return violation(s, "unknown opcode %u", e->op);
	if (e->req_id == 0)
		return violation(s, "request id 0");
	if (e->arena_len > s->arena_bytes ||
	    e->arena_off > s->arena_bytes - e->arena_len)
		return violation(s, "req %u: arena range %u+%u outside %u "
		    "bytes", e->req_id, e->arena_off, e->arena_len, s->arena_bytes);
	if (e->op != CP_OP_SUBMIT) {
		if (e->stop_bytes != 0 || e->grammar_bytes != 0 ||
		    !is_zero(&e->params, sizeof(e->params)))
			return violation(s, "req %u: op %u with parameters set",
			    e->req_id, e->op);
		if (e->req_id > s->last_req_id)
			return violation(s, "op %u for unknown request %u",
			    e->op, e->req_id);
	}

	switch (e->op) {
	case CP_OP_SUBMIT:
		if (e->flags & ~CP_SQF_SUBMIT_MASK)
			return violation(s, "req %u: reserved flags %#x",
			    e->req_id, e->flags & ~CP_SQF_SUBMIT_MASK);
		if (b->active)
			return violation(s, "SUBMIT %u while request %u is "
			    "incomplete", e->req_id, b->req_id);
		if (e->req_id <= s->last_req_id)
			return violation(s, "SUBMIT id %u not above %u",
			    e->req_id, s->last_req_id);
		if (s->n_reqs >= s->max_reqs)
			return violation(s, "SUBMIT %u: more than %u requests "
			    "in flight", e->req_id, s->max_reqs);
		if (e->stop_bytes > CP_STOP_BYTES_MAX ||
		    e->stop_bytes > e->arena_len)
			return violation(s, "req %u: stop block of %u bytes",
			    e->req_id, e->stop_bytes);
		if ((rc = params_check(s, e->req_id, &e->params)) < 0 ||
		    (rc = grammar_check(s, e)) < 0)
			return rc;
		if ((e->flags & CP_SQF_TOKENS) && (e->flags & CP_SQF_CHAT))
			return violation(s, "req %u: a chat SUBMIT of tokens",
			    e->req_id);
		frag = e->arena_len - e->stop_bytes;
		if ((e->flags & CP_SQF_TOKENS) && frag % 4 != 0)
			return violation(s, "req %u: token prompt of %u bytes",
			    e->req_id, frag);
		gpad = (e->grammar_bytes + 3) / 4 * 4;
		if (frag > s->max_prompt + gpad)
			return violation(s, "req %u: prompt over %u bytes",
			    e->req_id, s->max_prompt);
		s->last_req_id = e->req_id;
		b->active = 1;
		b->req_id = e->req_id;
		b->sqe_flags = e->flags;
		b->params = e->params;
		b->stop_bytes = e->stop_bytes;
		b->gram_bytes = e->grammar_bytes;
		b->gram_pad = gpad;
		b->len = 0;
		b->oom = 0;
		memcpy(b->stops, s->arena + e->arena_off, e->stop_bytes);
		if ((rc = stops_check(s, e->req_id, b->stops,
		    e->stop_bytes)) < 0)
			return rc;
		if ((rc = build_add(s, s->arena + e->arena_off +
		    e->stop_bytes, frag)) < 0)
			return rc;
		break;
	case CP_OP_APPEND:
		if (e->flags & ~CP_SQF_APPEND_MASK)
			return violation(s, "req %u: reserved flags %#x",
			    e->req_id, e->flags & ~CP_SQF_APPEND_MASK);
		if (!b->active || b->req_id != e->req_id)
			return violation(s, "APPEND for request %u, which is "
			    "not being built", e->req_id);
		if ((b->sqe_flags & CP_SQF_TOKENS) && e->arena_len % 4 != 0)
			return violation(s, "req %u: token fragment of %u "
			    "bytes", e->req_id, e->arena_len);
		if (e->arena_len > s->max_prompt + b->gram_pad - b->len)
			return violation(s, "req %u: prompt over %u bytes",
			    e->req_id, s->max_prompt);
		if ((rc = build_add(s, s->arena + e->arena_off,
		    e->arena_len)) < 0)
			return rc;
		break;
	case CP_OP_CANCEL:
		if (e->flags != 0 || e->arena_off != 0 || e->arena_len != 0)
			return violation(s, "req %u: CANCEL with flags or "
			    "arena range", e->req_id);
		if (b->active && b->req_id == e->req_id) {
			/* Abandoned half-sent prompt: the engine never saw it. */
			b->active = 0;
			b->len = 0;
			b->oom = 0;
			return 0;
		}
		r = sess_req_find(s, e->req_id);
		if (r != NULL && !r->cancelled) {
			struct ep_cmd *c = ep_cmd_new(EP_CMD_CANCEL, 0);

			if (c == NULL)
				return -EAGAIN;	/* retried: sess_consume() */
			c->client = s->slot;
			c->id = sess_port_id(s->slot, s->gen, e->req_id);
			r->cancelled = 1;
			out_add(out, c);
		}
		return 0;
	}
	if (!(e->flags & CP_SQF_MORE))
		return build_finish(s, out);
	return 0;
}

int
sess_consume(struct session *s, struct sess_out *out)
{
	uint32_t tail, n, i, mask = s->sq_entries - 1;
	struct cp_sqe e;
	int r;

	if (s->state != SESS_ACTIVE)
		return 0;
	tail = ring_load_acquire(&s->ctl->sq_tail.v);
	n = ring_count(tail, s->sq_head);
	if (n > s->sq_entries)
		return violation(s, "sq_tail %u - sq_head %u exceeds %u "
		    "entries", tail, s->sq_head, s->sq_entries);
	memset(&e, 0, sizeof(e));
	for (i = 0; i < n; i++) {
		ring_copy_out(&e, &s->sq[ring_slot(s->sq_head, mask)],
		    sizeof(e));
		if ((r = sqe_apply(s, &e, out)) == -EAGAIN)
			break;		/* this entry again, next time */
		if (r < 0)
			return r;
		s->sq_head++;
	}
	n = i;
	if (n > 0)
		ring_store_release(&s->ctl->sq_head.v, s->sq_head);
	return (int)n;
}

int
sess_sq_pending(const struct session *s)
{
	if (s->state != SESS_ACTIVE)
		return 0;
	return ring_load_acquire(&s->ctl->sq_tail.v) != s->sq_head;
}

int
sess_idle_enter(struct session *s, uint32_t *tail)
{
	uint32_t t;

	ring_store_relaxed(&s->ctl->daemon_idle.v, 1);
	ring_fence();
	t = ring_load_acquire(&s->ctl->sq_tail.v);
	*tail = t;
	return t != s->sq_head;
}

void
sess_idle_leave(struct session *s)
{
	ring_store_relaxed(&s->ctl->daemon_idle.v, 0);
}

/* CQEs needed for an event carrying len bytes of text (len <= text_chunk). */
static uint32_t
group_size(uint32_t len)
{
	if (len <= CP_CQE_TEXT)
		return 1;
	return 1 + (len - CP_CQE_TEXT + CP_CQE_TEXT - 1) / CP_CQE_TEXT;
}

/* Free CQ slots, from the client's cq_head (read once); -EPROTO if it is impossible. */
static int
cq_space(struct session *s, uint32_t *space)
{
	uint32_t head = ring_load_acquire(&s->ctl->cq_head.v);

	if (!ring_sane(s->cq_pub, head, s->cq_entries))
		return violation(s, "cq_head %u inconsistent with cq_tail %u",
		    head, s->cq_pub);
	*space = ring_space(s->cq_tail, head, s->cq_entries);
	return 0;
}

static int
ovf_push(struct session *s, const struct cp_cqe *q)
{
	struct cp_cqe *n;
	size_t cap, i;

	if (s->ovf_n >= s->ovf_max)
		return -ENOBUFS;
	if (s->ovf_n == s->ovf_cap) {
		cap = s->ovf_cap ? s->ovf_cap * 2 : 64;
		n = malloc(cap * sizeof(*n));
		if (n == NULL)
			return -ENOMEM;
		for (i = 0; i < s->ovf_n; i++)
			n[i] = s->ovf[(s->ovf_head + i) % s->ovf_cap];
		free(s->ovf);
		s->ovf = n;
		s->ovf_cap = cap;
		s->ovf_head = 0;
	}
	s->ovf[(s->ovf_head + s->ovf_n) % s->ovf_cap] = *q;
	s->ovf_n++;
	return 0;
}

/* One CQE of a group into the CQ, or into the overflow with its group. */
static int
put_cqe(struct session *s, const struct cp_cqe *q, int to_ovf)
{
	if (to_ovf)
		return ovf_push(s, q);
	memcpy(&s->cq[ring_slot(s->cq_tail, s->cq_entries - 1)], q, sizeof(*q));
	s->cq_tail++;
	return 0;
}

/*
 * Emits one group (first CQE, its text continuations, then n_top entries
 * of a top-n list at top in CP_EV_TOP continuations) to the CQ or the
 * overflow, space being the free CQ slots the caller read (once) from
 * cq_head; returns 1 when it went to the overflow, 0, or -ENOMEM.
 */
static int
emit_into(struct session *s, const struct cp_cqe *first, const char *text,
    uint32_t len, const unsigned char *top, uint32_t n_top, uint32_t space)
{
	uint32_t n_text = group_size(len), n_tq, need, i, off = 0;
	struct cp_cqe q;
	int to_ovf, r;

	n_tq = (n_top + CP_TOP_PER_CQE - 1) / CP_TOP_PER_CQE;
	need = n_text + n_tq;
	to_ovf = s->ovf_n > 0 || space < need;
	for (i = 0; i < need; i++) {
		uint32_t take;

		if (i == 0) {
			q = *first;
		} else {
			memset(&q, 0, sizeof(q));
			q.req_id = first->req_id;
			q.type = i < n_text ? CP_EV_TEXT : CP_EV_TOP;
			q.token = -1;
		}
		memset(q.text, 0, sizeof(q.text));
		if (i < n_text) {
			take = len - off > CP_CQE_TEXT ? CP_CQE_TEXT :
			    len - off;
			if (take > 0)
				memcpy(q.text, text + off, take);
			off += take;
		} else {
			take = n_top - (i - n_text) * CP_TOP_PER_CQE;
			take = (take > CP_TOP_PER_CQE ? CP_TOP_PER_CQE : take) *
			    (uint32_t)sizeof(struct cp_top);
			memcpy(q.text, top + (i - n_text) * CP_CQE_TEXT, take);
		}
		q.text_len = (uint8_t)take;
		q.flags = i + 1 < need ? CP_CQF_MORE : 0;
		if ((r = put_cqe(s, &q, to_ovf)) < 0)
			return r;
	}
	s->flush_pending = 1;
	return to_ovf;
}

/* emit_into() with the CQ's free slots read now. */
static int
emit_group(struct session *s, const struct cp_cqe *first, const char *text,
    uint32_t len, const unsigned char *top, uint32_t n_top)
{
	uint32_t space = 0;
	int r;

	if ((r = cq_space(s, &space)) < 0)
		return r;
	return emit_into(s, first, text, len, top, n_top, space);
}

/* A PROGRESS event into the CQ, or nowhere (invariant 8); 0 or -EPROTO. */
static int
post_progress(struct session *s, const struct sess_req *r, uint32_t req_id,
    const struct ep_event *ev)
{
	struct cp_cqe q;
	uint32_t space = 0;
	int rc;

	if (!r->progress || ev->n_prompt == 0 || ev->n_prompt > ev->n_total ||
	    s->ovf_n > 0)
		return 0;
	if ((rc = cq_space(s, &space)) < 0)
		return rc;
	if (space == 0)
		return 0;
	memset(&q, 0, sizeof(q));
	q.req_id = req_id;
	q.type = CP_EV_PROGRESS;
	q.token = -1;
	q.n_prompt = ev->n_prompt;
	q.n_total = ev->n_total;
	q.step = (uint32_t)ev->step;
	/* the space read above: one slot, so never the overflow */
	rc = emit_into(s, &q, NULL, 0, NULL, 0, space);
	return rc < 0 ? rc : 0;
}

int
sess_post(struct session *s, uint32_t req_id, const struct ep_event *ev,
    const char *text)
{
	struct sess_req *r;
	struct cp_cqe q;
	uint32_t len = ev->text_len, chunk = s->text_chunk, n_top = 0;
	const unsigned char *top = (const unsigned char *)text + ev->text_len;
	int rc, any_ovf = 0, terminal;

	if (s->state != SESS_ACTIVE)
		return 0;
	r = sess_req_find(s, req_id);
	if (r == NULL)
		return 0;
	terminal = ev->type == EP_EV_DONE || ev->type == EP_EV_ERROR;
	if (ev->type == EP_EV_PROGRESS)
		return post_progress(s, r, req_id, ev);
	/* A list the request did not ask for (or longer) is not sent. */
	if (ev->type == EP_EV_TOKEN && ev->token >= 0 && ev->n_top > 0 &&
	    ev->n_top <= r->top_n) {
		n_top = ev->n_top;
		chunk -= CP_TOP_CQES_MAX * CP_CQE_TEXT;	/* TOP-N rule 4 */
	}

	/* Text beyond one group goes ahead as text-only token events. */
	while (len > chunk) {
		memset(&q, 0, sizeof(q));
		q.req_id = req_id;
		q.type = CP_EV_TOKEN;
		q.token = -1;
		q.step = (uint32_t)ev->step;
		if ((rc = emit_group(s, &q, text, chunk, NULL, 0)) < 0)
			return rc;
		any_ovf |= rc;
		text += chunk;
		len -= chunk;
	}
	memset(&q, 0, sizeof(q));
	q.req_id = req_id;
	q.token = -1;
	/* The wire carries the step counter's low 32 bits (cp_proto.h). */
	q.step = (uint32_t)ev->step;
	switch (ev->type) {
	case EP_EV_TOKEN:
		q.type = CP_EV_TOKEN;
		q.token = ev->token;
		q.logprob = ev->logprob;
		q.n_top = n_top;
		break;
	case EP_EV_DONE:
		q.type = CP_EV_DONE;
		q.finish = ev->finish <= CP_FINISH_MAX ?
		    (uint8_t)ev->finish : CP_FINISH_NONE;
		if (r->stalled && q.finish == CP_FINISH_CANCELLED)
			q.finish = CP_FINISH_STALLED;
		q.n_prompt = ev->n_prompt;
		q.n_gen = ev->n_gen;
		q.n_cached = ev->n_cached <= ev->n_prompt ? ev->n_cached : 0;
		break;
	default:
		q.type = CP_EV_ERROR;
		q.error = ev->error < 0 ? ev->error : -EIO;
		q.n_prompt = ev->n_prompt;
		q.n_gen = ev->n_gen;
		break;
	}
	if ((rc = emit_group(s, &q, text, len, top, n_top)) < 0)
		return rc;
	any_ovf |= rc;
	if (terminal)
		req_remove(s, r);
	return any_ovf;
}

int
sess_flush(struct session *s)
{
	uint32_t space = 0, need, i, w;
	int r, wake = 0;

	if (s->state != SESS_ACTIVE)
		return 0;
	while (s->ovf_n > 0) {
		if ((r = cq_space(s, &space)) < 0)
			return r;
		/* Length of the group at the front of the overflow. */
		for (need = 1; need <= s->ovf_n; need++) {
			size_t k = (s->ovf_head + need - 1) % s->ovf_cap;

			if (!(s->ovf[k].flags & CP_CQF_MORE))
				break;
		}
		if (need > s->ovf_n || need > space)
			break;
		for (i = 0; i < need; i++) {
			memcpy(&s->cq[ring_slot(s->cq_tail, s->cq_entries - 1)],
			    &s->ovf[s->ovf_head], sizeof(struct cp_cqe));
			s->cq_tail++;
			s->ovf_head = (s->ovf_head + 1) % s->ovf_cap;
			s->ovf_n--;
		}
	}
	s->flush_pending = s->ovf_n > 0;
	if (s->cq_tail == s->cq_pub)
		return 0;
	ring_store_release(&s->ctl->cq_tail.v, s->cq_tail);
	s->cq_pub = s->cq_tail;
	ring_fence();
	w = ring_load_relaxed(&s->ctl->client_waiting.v);
	if (w & CP_WAIT_SLEEP)
		wake |= s->wake_mode == CP_WAKE_FUTEX ?
		    SESS_WAKE_FUTEX : SESS_WAKE_FD;
	if (w & CP_WAIT_FD)
		wake |= SESS_WAKE_FD;
	return wake;
}

int
sess_drain_wake(struct session *s)
{
	char buf[64];
	ssize_t n;
	int any = 0;

	if (s->sq_rfd < 0)
		return 0;
	for (;;) {
		n = read(s->sq_rfd, buf, sizeof(buf));
		if (n > 0) {
			any = 1;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	return any;
}
