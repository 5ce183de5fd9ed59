/*
 * server.c - cpd's socket, admission, and io loop (see server.h).
 *
 * LOOP.  Every descriptor and futex the loop waits on carries a tag:
 * kind, slot and the slot's generation, so a completion that arrives after
 * its client was torn down (and the slot reused) is recognised and dropped.
 * One pass of srv_run():
 *
 *	wait	ioloop_wait(): submits everything queued since the last pass
 *		(FUTEX_WAKEs and pipe writes for sleeping clients, new waits,
 *		removals) in the same io_uring_enter that waits, with a
 *		timeout from the nearest deadline;
 *	events	accept, socket records and hangups, the engine's events,
 *		client wake-ups (futex or pipe), stop;
 *	timers	handshake deadlines, paused clients' flushes and stall
 *		deadlines, a safety drain of every SQ while the engine runs;
 *	idle	with no runnable request in the engine, each client's
 *		daemon_idle is set and a wait armed on its sq_tail (futex
 *		mode) or its SQ pipe (pipe modes);
 *	drain	while draining, cancel at the drain deadline, and end the
 *		loop once drain_done() or at the grace deadline.
 *
 * STATES OF THE SERVER.
 *
 *	SERVING	 accepting clients and requests.
 *	DRAINING srv_drain(): drain_start() has closed the listener; SUBMITs
 *		 get an ERROR (-ESHUTDOWN), a HELLO a refusal; requests in
 *		 flight go on until drain_cancel_ms, then are cancelled.
 *	STOPPING srv_stop(), or drain_check() found everything ended and
 *		 delivered (or drain_end_ms passed): srv_run() returns.
 *
 * INVARIANTS.
 *
 *  1. A slot's generation changes when its session is freed; a tag or a
 *     port id whose generation differs from the slot's names nothing.
 *  2. srv_drop() is the only way a session ends.  It cancels the session's
 *     requests in the engine, removes its watches and waits, flushes those
 *     removals to the kernel, releases its uid's counts, then frees it.
 *  3. inflight counts SUBMITs pushed to the engine whose terminal event has
 *     not come back; paused counts those among them under PAUSE.  The
 *     engine has runnable work iff inflight > paused.
 *  4. Per uid, clients counts live sessions (any state) and reqs the
 *     requests in their tables; both fall in srv_drop() at the latest.
 *  5. A client's CQ is written only from the loop thread, its wakes are
 *     queued after the cq_tail store that they announce.
 *  6. clients_total == n_sessions + the sum of disconnects[]: a session is
 *     counted once when accepted and once, under one CP_END_* reason, by
 *     srv_drop().
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ioloop.h"
#include "log.h"
#include "session.h"
#include "sock_path.h"
#include "stats.h"

#define TAG_LISTEN	1
#define TAG_STOP	2
#define TAG_ENGINE	3
#define TAG_SOCK	4	/* a client's socket */
#define TAG_SQPIPE	5	/* a client's SQ wake pipe (pipe modes) */
#define TAG_SQFUTEX	6	/* a futex wait on a client's sq_tail */
#define TAG_PIDFD	7	/* the client process's pidfd */

#define GEN_MASK	0xffffu	/* generation bits that tags and ids carry */
#define LOOP_BATCH	64
#define LOOP_RETRY_MAX	1000	/* failed waits in a row (1 ms apart) before giving up */
#define TICK_PAUSED_MS	5	/* re-check the CQs of paused clients */
#define TICK_BUSY_MS	100	/* drain every SQ while the engine runs */
#define TICK_MAX_MS	1000	/* no wait is longer */
#define PEER_GROUPS	64
#define DRAIN_GRACE_MS	5000	/* after the drain's cancel, for the DONEs */

struct slot {
	struct session *s;
	uint32_t gen;
};

struct uid_count {
	uid_t uid;
	uint32_t clients;
	uint32_t reqs;
};

struct server {
	struct srv_config cfg;
	struct sess_limits lim;
	char path[SRV_PATH_MAX];	/* the socket we bound, "" for one
					   handed over */
	char shown[SRV_PATH_MAX + 16];	/* what the logs call it */
	int lfd;
	int stop_efd;
	struct engine_port *port;
	struct ioloop *loop;
	int kind;

	struct slot *slots;
	uint32_t *free_slots;		/* stack of unused slot numbers */
	uint32_t n_free;
	struct session **live;		/* every session, any order */
	uint32_t n_sessions;
	struct uid_count *uids;
	size_t n_uids, cap_uids;

	struct ep_batch batch;		/* events taken from the engine */
	uint64_t inflight;		/* invariant 3 */
	uint64_t paused;
	int idle;			/* daemon_idle set in the segments */
	int stopping;
	uint32_t next_client_id;
	uint64_t t_start_ms;

	/* Asked for by srv_stop() / srv_drain(), maybe from a signal handler. */
	int stop_req, drain_req, reload_req;	/* atomic */
	int draining;			/* DRAINING below */
	int drain_cancelled;		/* what was left has been cancelled */
	uint64_t drain_cancel_ms;	/* cancel what is left then */
	uint64_t drain_end_ms;		/* stop then, delivered or not */

	uint64_t clients_total;
	uint64_t clients_rejected;
	uint64_t protocol_errors;
	uint64_t requests_total;
	uint64_t requests_refused;
	uint64_t cq_stalls;
	uint64_t disconnects[CP_END_REASONS];	/* invariant 6 */

	unsigned char *rbuf;		/* (RBUF_BYTES) a socket record */
	unsigned char *tbuf;		/* (TBUF_BYTES) a TOKENS or PIECES
					   reply */
};

/* The longest record an active session may send, and the longest reply. */
#define RBUF_BYTES	(sizeof(struct cp_tokenize_req) + CP_TOKENIZE_TEXT_MAX)
#define TOKENS_BYTES	(sizeof(struct cp_tokens_msg) + \
	sizeof(int32_t) * CP_TOKENIZE_IDS_MAX)
#define PIECES_BYTES	(sizeof(struct cp_pieces_msg) + \
	sizeof(uint32_t) * CP_DETOKENIZE_IDS_MAX + CP_DETOKENIZE_BYTES_MAX)
#define TBUF_BYTES	(TOKENS_BYTES > PIECES_BYTES ? TOKENS_BYTES : \
	PIECES_BYTES)
_Static_assert(sizeof(struct cp_detokenize_req) + sizeof(int32_t) *
    CP_DETOKENIZE_IDS_MAX <= RBUF_BYTES, "a full DETOKENIZE fits rbuf");

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t
tag_make(int kind, uint32_t slot, uint32_t gen)
{
	return ((uint64_t)kind << 56) | ((uint64_t)(gen & GEN_MASK) << 32) |
	    slot;
}

static int
tag_kind(uint64_t tag)
{
	return (int)((tag >> 56) & 0x7f);
}

/* The live session a tag or port id (slot, gen) names, or NULL. */
static struct session *
slot_session(struct server *srv, uint32_t slot, uint32_t gen)
{
	if (slot >= srv->cfg.max_clients)
		return NULL;
	if (srv->slots[slot].s == NULL ||
	    (srv->slots[slot].gen & GEN_MASK) != (gen & GEN_MASK))
		return NULL;
	return srv->slots[slot].s;
}

static struct session *
tag_session(struct server *srv, uint64_t tag)
{
	return slot_session(srv, (uint32_t)tag, (uint32_t)(tag >> 32));
}

void
srv_config_defaults(struct srv_config *c)
{
	memset(c, 0, sizeof(*c));
	c->socket_mode = 0600;
	c->socket_gid = -1;
	c->listen_fd = -1;
	c->max_clients = 256;
	c->per_uid_max_clients = 64;
	c->per_uid_max_requests = 256;
	c->max_reqs = 64;
	c->sq_entries = CP_SQ_DEFAULT;
	c->cq_entries = CP_CQ_DEFAULT;
	c->arena_bytes = CP_ARENA_DEFAULT;
	c->max_prompt_bytes = 4u << 20;
	c->stall_timeout_ms = 30000;
	c->handshake_timeout_ms = 5000;
	c->drain_timeout_ms = 10000;
	c->ioloop = 0;
	c->model.bos = -1;
	c->model.eos = -1;
}

int
srv_socket_path(const char *configured, char *buf, size_t size)
{
	return sock_path_resolve(configured, buf, size);
}

/* A power of two in [min, max] no larger than v (v already > 0). */
static uint32_t
pow2_floor(uint32_t v, uint32_t min, uint32_t max)
{
	uint32_t p = min;

	while (p * 2 <= v && p * 2 <= max)
		p *= 2;
	return p;
}

/*
 * 1 when the process that listens behind connected socket fd is gone: a
 * daemon killed with io_uring polls armed keeps its listening socket alive
 * (and connectable) until the kernel has torn its ring down.
 */
static int
listener_dead(int fd)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 ||
	    len != sizeof(uc) || uc.pid <= 0)
		return 0;
	return kill(uc.pid, 0) < 0 && errno == ESRCH;
}

/*
 * Binds path with c's mode and group, replacing a stale socket; returns
 * the listening fd or -errno.
 */
static int
bind_socket(const struct srv_config *c, const char *path)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd, probe, r;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			log_warnx("%s exists and is not a socket", path);
			return -EEXIST;
		}
		probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe < 0)
			return -errno;
		r = connect(probe, (struct sockaddr *)&sa, sizeof(sa));
		if (r == 0 && !listener_dead(probe)) {
			close(probe);
			log_warnx("%s: another daemon is listening", path);
			return -EADDRINUSE;
		}
		close(probe);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto err;
	if (c->socket_mode >= 0 && chmod(path, (mode_t)c->socket_mode) < 0)
		goto err_unlink;
	if (c->socket_gid >= 0 &&
	    chown(path, (uid_t)-1, (gid_t)c->socket_gid) < 0)
		goto err_unlink;
	if (listen(fd, 128) < 0)
		goto err_unlink;
	return fd;
err_unlink:
	r = -errno;
	unlink(path);
	close(fd);
	return r;
err:
	r = -errno;
	close(fd);
	return r;
}

/*
 * A listening socket handed over (systemd's socket units): its path into
 * srv->path for the logs, non-blocking; returns fd or -errno.  Not ours
 * to unlink: the path becomes "" so that nothing removes it.
 */
static int
handed_socket(struct server *srv, int fd)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int type = 0, fl;
	socklen_t tl = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    type != SOCK_SEQPACKET || getsockname(fd, (struct sockaddr *)&sa,
	    &len) < 0 || sa.sun_family != AF_UNIX) {
		log_warnx("the socket handed over (LISTEN_FDS) is not a Unix "
		    "SOCK_SEQPACKET socket: use ListenSequentialPacket=");
		return -EINVAL;
	}
	if ((fl = fcntl(fd, F_GETFL)) < 0 ||
	    fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	snprintf(srv->shown, sizeof(srv->shown), "%.*s (handed over)",
	    (int)(len > offsetof(struct sockaddr_un, sun_path) ? len -
	    offsetof(struct sockaddr_un, sun_path) : 0), sa.sun_path);
	srv->path[0] = '\0';
	return fd;
}

int
srv_listen(const struct srv_config *c)
{
	char path[SRV_PATH_MAX];
	int r;

	if ((r = srv_socket_path(c->socket_path, path, sizeof(path))) < 0)
		return r;
	if ((r = bind_socket(c, path)) < 0 && r != -EADDRINUSE &&
	    r != -EEXIST)	/* those said already */
		log_warnx("%s: %s", path, strerror(-r));
	return r;
}

int
srv_new(const struct srv_config *c, struct engine_port *port,
    struct server **out)
{
	struct server *srv;
	const char *env;
	int kind = c->ioloop, r;
	uint32_t i;

	*out = NULL;
	if (c->max_clients == 0 || c->max_clients > SRV_MAX_CLIENTS ||
	    c->max_reqs == 0 || c->max_reqs > SESS_MAX_REQS ||
	    c->sq_entries == 0 || c->cq_entries == 0 || c->arena_bytes == 0 ||
	    c->n_allow_uids > SRV_MAX_ALLOW || c->n_allow_gids > SRV_MAX_ALLOW)
		return -EINVAL;
	if (kind == IOLOOP_AUTO && (env = getenv("CPD_IOLOOP")) != NULL &&
	    ioloop_kind_parse(env, &kind) < 0) {
		log_warnx("CPD_IOLOOP=%s: expected auto, futex, fd or epoll",
		    env);
		return -EINVAL;
	}
	srv = calloc(1, sizeof(*srv));
	if (srv == NULL)
		return -ENOMEM;
	srv->cfg = *c;
	srv->cfg.socket_path = NULL;
	srv->lfd = srv->stop_efd = -1;
	srv->port = port;
	srv->t_start_ms = now_ms();
	if ((r = srv_socket_path(c->socket_path, srv->path,
	    sizeof(srv->path))) < 0)
		goto err;

	srv->slots = calloc(c->max_clients, sizeof(*srv->slots));
	srv->free_slots = calloc(c->max_clients, sizeof(*srv->free_slots));
	srv->live = calloc(c->max_clients, sizeof(*srv->live));
	srv->rbuf = malloc(RBUF_BYTES);
	srv->tbuf = malloc(TBUF_BYTES);
	if (srv->slots == NULL || srv->free_slots == NULL ||
	    srv->live == NULL || srv->rbuf == NULL || srv->tbuf == NULL) {
		r = -ENOMEM;
		goto err;
	}
	for (i = 0; i < c->max_clients; i++)
		srv->free_slots[i] = c->max_clients - 1 - i;
	srv->n_free = c->max_clients;

	if ((r = ioloop_new(kind, &srv->loop)) < 0) {
		log_warnx("io loop %s: %s", ioloop_kind_name(kind),
		    strerror(-r));
		goto err;
	}
	srv->kind = ioloop_kind(srv->loop);
	srv->lim.sq_max = pow2_floor(c->sq_entries, CP_SQ_MIN, CP_SQ_MAX);
	srv->lim.sq_default = srv->lim.sq_max;
	srv->lim.cq_max = pow2_floor(c->cq_entries, CP_CQ_MIN, CP_CQ_MAX);
	srv->lim.cq_default = srv->lim.cq_max;
	srv->lim.arena_max = pow2_floor(c->arena_bytes, CP_ARENA_MIN,
	    CP_ARENA_MAX);
	srv->lim.arena_default = srv->lim.arena_max;
	srv->lim.max_reqs = c->max_reqs;
	srv->lim.max_prompt_bytes = c->max_prompt_bytes;
	srv->lim.wake_mode = srv->kind == IOLOOP_URING_FUTEX ?
	    CP_WAKE_FUTEX : CP_WAKE_FD;

	srv->stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (srv->stop_efd < 0) {
		r = -errno;
		goto err;
	}
	if (c->listen_fd >= 0 && c->listen_owned) {
		r = c->listen_fd;	/* srv_listen()'s, at srv->path */
	} else if (c->listen_fd >= 0) {
		r = handed_socket(srv, c->listen_fd);
	} else if ((r = bind_socket(&srv->cfg, srv->path)) < 0) {
		if (r != -EADDRINUSE && r != -EEXIST)	/* said already */
			log_warnx("%s: %s", srv->path, strerror(-r));
		goto err;
	}
	if (r < 0)
		goto err;
	srv->lfd = r;
	if ((r = ioloop_watch(srv->loop, srv->lfd, POLLIN,
	    tag_make(TAG_LISTEN, 0, 0))) < 0 ||
	    (r = ioloop_watch(srv->loop, srv->stop_efd, POLLIN,
	    tag_make(TAG_STOP, 0, 0))) < 0 ||
	    (r = ioloop_watch(srv->loop, ep_event_fd(port), POLLIN,
	    tag_make(TAG_ENGINE, 0, 0))) < 0)
		goto err;
	if (srv->path[0] != '\0')
		snprintf(srv->shown, sizeof(srv->shown), "%s", srv->path);
	log_info("listening on %s, io loop %s", srv->shown,
	    ioloop_kind_name(srv->kind));
	*out = srv;
	return 0;
err:
	srv_free(srv);
	return r;
}

/* Async-signal-safe: an atomic store and a write(2). */
static void
srv_signal(struct server *srv, int *flag)
{
	uint64_t one = 1;
	ssize_t n;

	__atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
	n = write(srv->stop_efd, &one, sizeof(one));
	(void)n;
}

void
srv_stop(struct server *srv)
{
	srv_signal(srv, &srv->stop_req);
}

void
srv_drain(struct server *srv)
{
	srv_signal(srv, &srv->drain_req);
}

void
srv_reload(struct server *srv)
{
	srv_signal(srv, &srv->reload_req);
}

void
srv_set_limits(struct server *srv, const struct srv_config *c)
{
	struct srv_config *d = &srv->cfg;

	memcpy(d->allow_uids, c->allow_uids, sizeof(d->allow_uids));
	d->n_allow_uids = c->n_allow_uids;
	memcpy(d->allow_gids, c->allow_gids, sizeof(d->allow_gids));
	d->n_allow_gids = c->n_allow_gids;
	d->per_uid_max_clients = c->per_uid_max_clients;
	d->per_uid_max_requests = c->per_uid_max_requests;
	d->stall_timeout_ms = c->stall_timeout_ms;
	d->drain_timeout_ms = c->drain_timeout_ms;
}

int
srv_ioloop(const struct server *srv)
{
	return srv->kind;
}

const char *
srv_path(const struct server *srv)
{
	return srv->shown;
}

void
srv_stats(struct server *srv, struct cp_wire_stats *st)
{
	struct ep_stats es;
	struct stats_io io;
	unsigned i;

	ep_stats_get(srv->port, &es);
	memset(&io, 0, sizeof(io));
	io.uptime_ms = now_ms() - srv->t_start_ms;
	io.clients = srv->n_sessions;
	io.clients_total = srv->clients_total;
	io.clients_rejected = srv->clients_rejected;
	io.protocol_errors = srv->protocol_errors;
	io.requests_total = srv->requests_total;
	io.requests_active = srv->inflight;
	io.requests_refused = srv->requests_refused;
	io.cq_stalls = srv->cq_stalls;
	for (i = 0; i < CP_END_REASONS; i++)
		io.disconnects[i] = srv->disconnects[i];
	io.draining = srv->draining;
	stats_wire(&io, &es, st);
}

/* ---- per-uid accounting ------------------------------------------- */

static struct uid_count *
uid_get(struct server *srv, uid_t uid, int create)
{
	struct uid_count *n;
	size_t i;

	for (i = 0; i < srv->n_uids; i++)
		if (srv->uids[i].uid == uid)
			return &srv->uids[i];
	if (!create)
		return NULL;
	if (srv->n_uids == srv->cap_uids) {
		size_t cap = srv->cap_uids ? srv->cap_uids * 2 : 8;

		n = realloc(srv->uids, cap * sizeof(*n));
		if (n == NULL)
			return NULL;
		srv->uids = n;
		srv->cap_uids = cap;
	}
	n = &srv->uids[srv->n_uids++];
	memset(n, 0, sizeof(*n));
	n->uid = uid;
	return n;
}

static void
uid_put(struct server *srv, uid_t uid, uint32_t reqs)
{
	struct uid_count *u = uid_get(srv, uid, 0);

	if (u == NULL)
		return;
	u->reqs -= reqs < u->reqs ? reqs : u->reqs;
	if (u->clients > 0)
		u->clients--;
	if (u->clients == 0 && u->reqs == 0)
		*u = srv->uids[--srv->n_uids];
}

/* ---- teardown ------------------------------------------------------ */

/* The CP_END_* reason for a session error r (-EPROTO, -ENOBUFS, else). */
static int
end_reason(int r)
{
	if (r == -EPROTO)
		return CP_END_PROTOCOL;
	if (r == -ENOBUFS)
		return CP_END_OVERFLOW;
	return CP_END_ERROR;
}

/*
 * The CP_END_* reason when a reply to the client could not be sent (r
 * from sess_send()): the client's doing, not the daemon's, when it hung up
 * (CLOSED) or leaves its replies unread (PROTOCOL); else ERROR.
 */
static int
send_end_reason(struct session *s, int r)
{
	if (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN)
		return CP_END_CLOSED;
	if (r == -EAGAIN || r == -EWOULDBLOCK || r == -ENOBUFS) {
		snprintf(s->why, sizeof(s->why), "does not read its replies");
		return CP_END_PROTOCOL;
	}
	return CP_END_ERROR;
}

/*
 * Ends session s, whatever the reason (invariant 2), counted under reason
 * (CP_END_*).  A violation (PROTOCOL, TIMEOUT, OVERFLOW) counts a protocol
 * error and logs s->why as a warning.
 */
static void
srv_drop(struct server *srv, struct session *s, int reason, const char *why)
{
	struct session *last;
	uint32_t i, n_paused = 0, n_pushed = 0, slot = s->slot;
	int violation = reason == CP_END_PROTOCOL ||
	    reason == CP_END_TIMEOUT || reason == CP_END_OVERFLOW;

	if (reason < 0 || reason >= (int)CP_END_REASONS)
		reason = CP_END_ERROR;
	srv->disconnects[reason]++;
	if (violation) {
		srv->protocol_errors++;
		log_warnx("client %u (pid %ld, uid %lu): %s; disconnected",
		    s->client_id, (long)s->pid, (unsigned long)s->uid,
		    s->why[0] ? s->why : why);
	} else {
		log_debug("client %u (pid %ld): %s", s->client_id,
		    (long)s->pid, why);
	}
	for (i = 0; i < s->n_reqs; i++) {
		struct sess_req *r = &s->reqs[i];

		if (!r->pushed)
			continue;
		n_pushed++;
		if (r->paused)
			n_paused++;
		if (!r->cancelled &&
		    ep_push_simple(srv->port, EP_CMD_CANCEL, s->slot,
		    sess_port_id(s->slot, s->gen, r->req_id)) < 0)
			log_warnx("client %u: cancel of request %u lost",
			    s->client_id, r->req_id);
	}
	/* Cancelled requests run no more: they count as not paused. */
	srv->paused -= n_paused < srv->paused ? n_paused : srv->paused;

	ioloop_unwatch(srv->loop, s->fd, tag_make(TAG_SOCK, slot, s->gen));
	if (s->sq_rfd >= 0)
		ioloop_unwatch(srv->loop, s->sq_rfd,
		    tag_make(TAG_SQPIPE, slot, s->gen));
	if (s->pidfd >= 0)
		ioloop_unwatch(srv->loop, s->pidfd,
		    tag_make(TAG_PIDFD, slot, s->gen));
	if (s->idle_armed)
		ioloop_futex_cancel(srv->loop,
		    tag_make(TAG_SQFUTEX, slot, s->gen));
	/* Removals and any queued wake of this segment reach the kernel first. */
	ioloop_flush(srv->loop);

	uid_put(srv, s->uid, n_pushed);
	srv->slots[slot].s = NULL;
	srv->slots[slot].gen++;
	srv->free_slots[srv->n_free++] = slot;
	last = srv->live[--srv->n_sessions];
	srv->live[s->live_idx] = last;
	last->live_idx = s->live_idx;
	sess_free(s);
}

/* ---- admission and handshake --------------------------------------- */

static int
peer_allowed(struct server *srv, struct session *s)
{
	gid_t groups[PEER_GROUPS];
	socklen_t len = sizeof(groups);
	size_t i, j, ng = 0;

	if (srv->cfg.n_allow_uids == 0 && srv->cfg.n_allow_gids == 0)
		return s->uid == geteuid();
	for (i = 0; i < srv->cfg.n_allow_uids; i++)
		if (srv->cfg.allow_uids[i] == s->uid)
			return 1;
	if (srv->cfg.n_allow_gids == 0)
		return 0;
	if (getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
		ng = len / sizeof(gid_t);
	for (i = 0; i < srv->cfg.n_allow_gids; i++) {
		if (srv->cfg.allow_gids[i] == s->gid)
			return 1;
		for (j = 0; j < ng; j++)
			if (srv->cfg.allow_gids[i] == groups[j])
				return 1;
	}
	return 0;
}

/* Sends a welcome that only carries a refusal (best effort). */
static void
send_status(int fd, int status)
{
	struct cp_welcome w;

	memset(&w, 0, sizeof(w));
	cp_msg_hdr_set(&w.hdr, CP_MSG_WELCOME);
	w.status = status;
	sess_send(fd, &w, sizeof(w), NULL, 0);
}

/*
 * Tells a client refused at accept time why, and closes its socket.  Its
 * HELLO, if already here, is read first: closing a socket with unread data
 * makes the peer's next receive fail with ECONNRESET before it reads the
 * refusal (the client library retries once for that reason).
 */
static void
refuse(struct server *srv, int fd, int status)
{
	unsigned char buf[512];
	size_t len;

	send_status(fd, status);
	while (sess_recv(fd, buf, sizeof(buf), &len) == 0)
		;
	close(fd);
	srv->clients_rejected++;
}

static void
accept_one(struct server *srv, int fd)
{
	struct session *s;
	struct uid_count *u;
	uint32_t slot;
	int r;

	if (srv->n_free == 0) {
		log_info("connection refused: %u clients already",
		    srv->cfg.max_clients);
		refuse(srv, fd, -EAGAIN);
		return;
	}
	slot = srv->free_slots[srv->n_free - 1];
	s = sess_new(fd, slot, srv->slots[slot].gen);
	if (s == NULL) {
		srv->clients_rejected++;
		return;
	}
	if ((r = sess_peercred(s)) < 0) {
		log_warnx("SO_PEERCRED: %s", strerror(-r));
		goto refused;
	}
	if (!peer_allowed(srv, s)) {
		log_info("connection refused: pid %ld uid %lu gid %lu not "
		    "allowed", (long)s->pid, (unsigned long)s->uid,
		    (unsigned long)s->gid);
		r = -EACCES;
		goto refused;
	}
	u = uid_get(srv, s->uid, 1);
	if (u == NULL) {
		r = -ENOMEM;
		goto refused;
	}
	if (u->clients >= srv->cfg.per_uid_max_clients) {
		log_info("connection refused: uid %lu has %u connections",
		    (unsigned long)s->uid, u->clients);
		if (u->clients == 0 && u->reqs == 0)
			uid_put(srv, s->uid, 0);
		r = -EUSERS;
		goto refused;
	}
	if ((r = ioloop_watch(srv->loop, s->fd, POLLIN | POLLRDHUP,
	    tag_make(TAG_SOCK, slot, s->gen))) < 0) {
		if (u->clients == 0 && u->reqs == 0)
			uid_put(srv, s->uid, 0);
		goto refused;
	}
	/* The connecting process's exit ends the session, socket or not. */
	if (s->pidfd >= 0 && ioloop_watch(srv->loop, s->pidfd, POLLIN,
	    tag_make(TAG_PIDFD, slot, s->gen)) < 0) {
		close(s->pidfd);
		s->pidfd = -1;
	}
	u->clients++;
	srv->n_free--;
	srv->slots[slot].s = s;
	s->live_idx = srv->n_sessions;
	srv->live[srv->n_sessions++] = s;
	srv->clients_total++;
	s->client_id = ++srv->next_client_id;
	s->deadline_ms = now_ms() + (uint64_t)srv->cfg.handshake_timeout_ms;
	log_debug("client %u: pid %ld uid %lu connected", s->client_id,
	    (long)s->pid, (unsigned long)s->uid);
	return;
refused:
	refuse(srv, s->fd, r);
	s->fd = -1;
	sess_free(s);
}

static void
on_listen(struct server *srv)
{
	int fd;

	for (;;) {
		fd = accept4(srv->lfd, NULL, NULL,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				log_warn("accept");
			return;
		}
		accept_one(srv, fd);
	}
}

/* The HELLO record arrived (or failed): set the session up or drop it. */
static void
handshake(struct server *srv, struct session *s)
{
	unsigned char buf[512];
	struct cp_hello hello;
	struct cp_welcome w;
	int fds[CP_FD_MAX], nfds = 0, r, i;
	size_t len = 0;

	r = sess_recv(s->fd, buf, sizeof(buf), &len);
	if (r == -EAGAIN)
		return;
	if (r == -EPIPE) {
		srv_drop(srv, s, CP_END_CLOSED, "hung up before HELLO");
		return;
	}
	if (r < 0) {
		snprintf(s->why, sizeof(s->why), "handshake: %s",
		    r == -EPROTO ? "descriptors or truncated record" :
		    strerror(-r));
		srv_drop(srv, s, CP_END_PROTOCOL, "bad handshake");
		return;
	}
	r = sess_hello_check(buf, len, &hello);
	if (r == -EPROTONOSUPPORT) {
		send_status(s->fd, -EPROTONOSUPPORT);
		snprintf(s->why, sizeof(s->why), "protocol version %u",
		    ((const struct cp_hello *)(const void *)buf)->hdr.version);
		srv_drop(srv, s, CP_END_PROTOCOL, "version");
		return;
	}
	if (r < 0) {
		snprintf(s->why, sizeof(s->why), "malformed HELLO (%zu bytes)",
		    len);
		srv_drop(srv, s, CP_END_PROTOCOL, "bad hello");
		return;
	}
	if (srv->draining) {
		send_status(s->fd, -ESHUTDOWN);
		srv_drop(srv, s, CP_END_SHUTDOWN, "refused: draining");
		return;
	}
	if ((r = sess_setup(s, &hello, &srv->lim, &w, fds, &nfds)) < 0) {
		log_warnx("client %u: segment: %s", s->client_id, strerror(-r));
		send_status(s->fd, r);
		srv_drop(srv, s, CP_END_ERROR, "segment set-up failed");
		return;
	}
	w.client_id = s->client_id;
	w.model = srv->cfg.model;
	if (srv->cfg.tokenize != NULL)
		w.features |= CP_FEAT_TOKENIZE;
	if (srv->cfg.piece != NULL)
		w.features |= CP_FEAT_DETOKENIZE;
	if (srv->cfg.grammar)
		w.features |= CP_FEAT_GRAMMAR;
	s->features = w.features;
	r = sess_send(s->fd, &w, sizeof(w), fds, nfds);
	for (i = 0; i < nfds; i++)
		close(fds[i]);
	if (r < 0) {
		srv_drop(srv, s, send_end_reason(s, r), "welcome not sent");
		return;
	}
	if (s->sq_rfd >= 0 && ioloop_watch(srv->loop, s->sq_rfd, POLLIN,
	    tag_make(TAG_SQPIPE, s->slot, s->gen)) < 0) {
		srv_drop(srv, s, CP_END_ERROR, "cannot watch the SQ pipe");
		return;
	}
	log_debug("client %u: segment %u bytes, sq %u cq %u arena %u",
	    s->client_id, w.seg_bytes, w.sq_entries, w.cq_entries,
	    w.arena_bytes);
}

/*
 * Answers a TOKENIZE record of len bytes in srv->rbuf (cp_proto.h, TOKENIZE
 * rules 1-3); 0, or -1 after dropping s because the reply could not be sent.
 */
static int
on_tokenize(struct server *srv, struct session *s, size_t len)
{
	struct cp_tokenize_req req;
	struct cp_tokens_msg *msg = (struct cp_tokens_msg *)srv->tbuf;
	int32_t *ids = (int32_t *)(srv->tbuf + sizeof(*msg));
	uint32_t sent = 0;
	int n;

	memset(&req, 0, sizeof(req));
	memcpy(&req, srv->rbuf, len < sizeof(req) ? len : sizeof(req));
	if (srv->cfg.tokenize == NULL)
		n = -EOPNOTSUPP;
	else if (len < sizeof(req) || (req.flags & ~CP_TOKF_MASK) != 0 ||
	    req.max_ids > CP_TOKENIZE_IDS_MAX || req.reserved != 0)
		n = -EINVAL;
	else if (req.text_len > CP_TOKENIZE_TEXT_MAX)
		n = -E2BIG;
	else if (len != sizeof(req) + req.text_len)
		n = -EINVAL;
	else {
		n = srv->cfg.tokenize(srv->cfg.tokenize_arg,
		    (const char *)srv->rbuf + sizeof(req), req.text_len,
		    req.flags, ids, CP_TOKENIZE_IDS_MAX);
		if (n > (int)CP_TOKENIZE_IDS_MAX)
			n = -E2BIG;
	}
	if (n < 0)
		log_debug("client %u: tokenize: %s", s->client_id,
		    strerror(-n));
	else
		sent = (uint32_t)n < req.max_ids ? (uint32_t)n : req.max_ids;
	memset(msg, 0, sizeof(*msg));
	cp_msg_hdr_set(&msg->hdr, CP_MSG_TOKENS);
	msg->status = n < 0 ? n : 0;
	msg->n_ids = n < 0 ? 0 : (uint32_t)n;
	msg->n_sent = sent;
	if (sess_send(s->fd, msg, sizeof(*msg) + sizeof(int32_t) * sent,
	    NULL, 0) < 0) {
		srv_drop(srv, s, CP_END_ERROR, "tokens reply not sent");
		return -1;
	}
	return 0;
}

/*
 * The pieces of the n ids in srv->rbuf after the request into lens[] and
 * out (cp_proto.h, DETOKENIZE rules 1-3): their total length, or -ERANGE
 * for an id outside the vocabulary, -E2BIG past CP_DETOKENIZE_BYTES_MAX.
 * Writes the bytes only when the total is at most max_bytes.
 */
static long
detok_pieces(struct server *srv, uint32_t n, uint32_t flags,
    uint32_t max_bytes, uint32_t *lens, unsigned char *out)
{
	const unsigned char *p = srv->rbuf + sizeof(struct cp_detokenize_req);
	uint64_t total = 0;
	size_t len, pos = 0;
	int32_t id;
	uint32_t i;

	for (i = 0; i < n; i++) {
		memcpy(&id, p + sizeof(id) * i, sizeof(id));
		if (srv->cfg.piece(srv->cfg.tokenize_arg, id, flags, &len) ==
		    NULL)
			return -ERANGE;
		total += len;
		if (total > CP_DETOKENIZE_BYTES_MAX)
			return -E2BIG;
		lens[i] = (uint32_t)len;
	}
	if (total > max_bytes)
		return (long)total;
	for (i = 0; i < n; i++) {
		const char *s;

		memcpy(&id, p + sizeof(id) * i, sizeof(id));
		s = srv->cfg.piece(srv->cfg.tokenize_arg, id, flags, &len);
		memcpy(out + pos, s, len);
		pos += len;
	}
	return (long)total;
}

/* A DETOKENIZE request of a len-byte record: 0, -EINVAL or -E2BIG (rule 1). */
static int
detok_req_check(const struct cp_detokenize_req *q, size_t len)
{
	if (len < sizeof(*q))
		return -EINVAL;
	if (q->n_ids > CP_DETOKENIZE_IDS_MAX)
		return -E2BIG;
	if ((q->flags & ~CP_DETOKF_MASK) != 0 || q->reserved != 0 ||
	    q->max_bytes > CP_DETOKENIZE_BYTES_MAX ||
	    len != sizeof(*q) + sizeof(int32_t) * (size_t)q->n_ids)
		return -EINVAL;
	return 0;
}

/*
 * Answers a DETOKENIZE record of len bytes in srv->rbuf (cp_proto.h,
 * DETOKENIZE rules 1-3); 0, or -1 after dropping s because the reply could
 * not be sent.
 */
static int
on_detokenize(struct server *srv, struct session *s, size_t len)
{
	struct cp_detokenize_req req;
	struct cp_pieces_msg *msg = (struct cp_pieces_msg *)srv->tbuf;
	uint32_t *lens = (uint32_t *)(srv->tbuf + sizeof(*msg));
	unsigned char *bytes;
	size_t reply;
	long n;

	memset(&req, 0, sizeof(req));
	memcpy(&req, srv->rbuf, len < sizeof(req) ? len : sizeof(req));
	n = srv->cfg.piece == NULL ? -EOPNOTSUPP : detok_req_check(&req, len);
	if (n == 0)
		n = detok_pieces(srv, req.n_ids, req.flags, req.max_bytes,
		    lens, srv->tbuf + sizeof(*msg) +
		    sizeof(uint32_t) * req.n_ids);
	memset(msg, 0, sizeof(*msg));
	cp_msg_hdr_set(&msg->hdr, CP_MSG_PIECES);
	if (n < 0) {
		log_debug("client %u: detokenize: %s", s->client_id,
		    strerror((int)-n));
		msg->status = (int32_t)n;
		reply = sizeof(*msg);
	} else {
		msg->n_ids = req.n_ids;
		msg->n_bytes = (uint32_t)n;
		msg->n_sent = (uint32_t)n <= req.max_bytes ? (uint32_t)n : 0;
		bytes = srv->tbuf + sizeof(*msg) + sizeof(uint32_t) * req.n_ids;
		reply = (size_t)(bytes - srv->tbuf) + msg->n_sent;
	}
	if (sess_send(s->fd, msg, reply, NULL, 0) < 0) {
		srv_drop(srv, s, CP_END_ERROR, "pieces reply not sent");
		return -1;
	}
	return 0;
}

/* A record on an active session's socket: stats, tokenize and detokenize. */
static void
on_message(struct server *srv, struct session *s)
{
	struct cp_stats_req req;
	struct cp_msg_hdr hdr;
	struct cp_stats_msg msg;
	size_t len = 0;
	int r;

	for (;;) {
		r = sess_recv(s->fd, srv->rbuf, RBUF_BYTES, &len);
		if (r == -EAGAIN)
			return;
		if (r == -EPIPE) {
			srv_drop(srv, s, CP_END_CLOSED, "hung up");
			return;
		}
		if (r < 0) {
			snprintf(s->why, sizeof(s->why), "socket record: %s",
			    r == -EPROTO ? "descriptors or truncated record" :
			    strerror(-r));
			srv_drop(srv, s, CP_END_PROTOCOL, "bad record");
			return;
		}
		memset(&hdr, 0, sizeof(hdr));
		memcpy(&hdr, srv->rbuf, len < sizeof(hdr) ? len : sizeof(hdr));
		if (len >= sizeof(hdr) && hdr.magic == CP_PROTO_MAGIC &&
		    hdr.version == CP_PROTO_VERSION &&
		    (hdr.type == CP_MSG_TOKENIZE ||
		    hdr.type == CP_MSG_DETOKENIZE)) {
			r = hdr.type == CP_MSG_TOKENIZE ?
			    on_tokenize(srv, s, len) :
			    on_detokenize(srv, s, len);
			if (r < 0)
				return;
			continue;
		}
		memcpy(&req, srv->rbuf, len < sizeof(req) ? len : sizeof(req));
		if (len != sizeof(req) || req.hdr.magic != CP_PROTO_MAGIC ||
		    req.hdr.type != CP_MSG_STATS_REQ ||
		    req.hdr.version != CP_PROTO_VERSION ||
		    req.reserved[0] != 0 || req.reserved[1] != 0) {
			snprintf(s->why, sizeof(s->why), "unexpected record "
			    "of %zu bytes", len);
			srv_drop(srv, s, CP_END_PROTOCOL, "bad record");
			return;
		}
		memset(&msg, 0, sizeof(msg));
		cp_msg_hdr_set(&msg.hdr, CP_MSG_STATS);
		msg.stats_version = CP_STATS_VERSION;
		msg.stats_bytes = sizeof(msg.stats);
		srv_stats(srv, &msg.stats);
		if ((r = sess_send(s->fd, &msg, sizeof(msg), NULL, 0)) < 0) {
			srv_drop(srv, s, send_end_reason(s, r),
			    "stats reply not sent");
			return;
		}
	}
}

static void
on_socket(struct server *srv, struct session *s, const struct ioloop_ev *ev)
{
	if (ev->res < 0)
		return;		/* our own poll removal, or a dead poll */
	if (ev->res & POLLIN) {
		if (s->state == SESS_HELLO)
			handshake(srv, s);
		else
			on_message(srv, s);
		/* It may be gone now. */
		if (tag_session(srv, ev->tag) != s)
			return;
	}
	if (ev->res & (POLLRDHUP | POLLHUP | POLLERR)) {
		srv_drop(srv, s, CP_END_CLOSED, "hung up");
		return;
	}
	if (ev->flags & IOLOOP_F_ENDED)
		ioloop_watch(srv->loop, s->fd, POLLIN | POLLRDHUP, ev->tag);
}

static void flush_session(struct server *, struct session *);

/* ---- requests: clients to engine ------------------------------------ */

/* Answers a SUBMIT that will not run with an ERROR event; -1 if s was dropped. */
static int
reject_request(struct server *srv, struct session *s, uint32_t req_id,
    int err, const char *msg)
{
	struct ep_event ev;
	int r;

	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_ERROR;
	ev.token = -1;
	ev.error = err;
	ev.text_len = (uint32_t)strlen(msg);
	r = sess_post(s, req_id, &ev, msg);
	if (r < 0) {
		srv_drop(srv, s, end_reason(r), "completion overflow");
		return -1;
	}
	return 0;
}

/* Drains s's SQ into the engine; s may be dropped on return (returns -1 then). */
static int
drain_sq(struct server *srv, struct session *s)
{
	struct sess_out out;
	struct ep_cmd *c, *next;
	struct uid_count *u;
	struct sess_req *rq;
	uint64_t id, t_recv;
	int r;

	sess_out_init(&out);
	r = sess_consume(s, &out);
	t_recv = stats_now_ns();
	if (r < 0) {
		ep_cmd_free_list(out.head);
		if (r == -ENOMEM)
			snprintf(s->why, sizeof(s->why), "out of memory");
		srv_drop(srv, s, end_reason(r), "SQ");
		return -1;
	}
	u = uid_get(srv, s->uid, 0);
	for (c = out.head; c != NULL; c = next) {
		uint32_t req_id = (uint32_t)c->id;

		next = c->next;
		if (c->kind != EP_CMD_SUBMIT) {
			if (ep_push(srv->port, c) < 0)
				ep_cmd_free(c);
			continue;
		}
		if (srv->draining || u == NULL ||
		    u->reqs >= srv->cfg.per_uid_max_requests) {
			ep_cmd_free(c);
			srv->requests_refused++;
			r = srv->draining ? reject_request(srv, s, req_id,
			    -ESHUTDOWN, "cpd is shutting down: no new requests") :
			    reject_request(srv, s, req_id, -EUSERS,
			    "too many requests in flight for this user");
			if (r < 0) {
				ep_cmd_free_list(next);
				return -1;
			}
			continue;
		}
		if ((rq = sess_req_find(s, req_id)) == NULL) {
			ep_cmd_free(c);		/* cannot happen: just added */
			continue;
		}
		id = c->id;
		c->t_recv_ns = t_recv;
		u->reqs++;
		srv->inflight++;
		srv->requests_total++;
		rq->pushed = 1;
		ep_push(srv->port, c);
		if (s->paused && ep_push_simple(srv->port, EP_CMD_PAUSE,
		    s->slot, id) == 0) {
			rq->paused = 1;
			srv->paused++;
		}
	}
	return 0;
}

/*
 * Walks the live list backwards, so that a drop (which moves the last
 * entry into the hole) skips nothing.
 */
static void
drain_all(struct server *srv)
{
	uint32_t i;

	for (i = srv->n_sessions; i-- > 0;) {
		struct session *s = srv->live[i];

		if (s->state == SESS_ACTIVE)
			drain_sq(srv, s);
	}
}

static void
flush_all(struct server *srv)
{
	uint32_t i;

	for (i = srv->n_sessions; i-- > 0;) {
		struct session *s = srv->live[i];

		if (s->state == SESS_ACTIVE && s->flush_pending)
			flush_session(srv, s);
	}
}

/* ---- events: engine to clients ------------------------------------- */

static void
pause_session(struct server *srv, struct session *s)
{
	uint32_t i;

	if (s->paused)
		return;
	s->paused = 1;
	s->paused_since_ms = now_ms();
	for (i = 0; i < s->n_reqs; i++) {
		struct sess_req *r = &s->reqs[i];

		if (r->paused || r->cancelled)
			continue;
		if (ep_push_simple(srv->port, EP_CMD_PAUSE, s->slot,
		    sess_port_id(s->slot, s->gen, r->req_id)) == 0) {
			r->paused = 1;
			srv->paused++;
		}
	}
	log_debug("client %u: completion ring full, paused", s->client_id);
}

static void
resume_session(struct server *srv, struct session *s)
{
	uint32_t i;

	s->paused = 0;
	for (i = 0; i < s->n_reqs; i++) {
		struct sess_req *r = &s->reqs[i];

		if (!r->paused)
			continue;
		r->paused = 0;
		srv->paused--;
		if (!r->cancelled)
			ep_push_simple(srv->port, EP_CMD_RESUME, s->slot,
			    sess_port_id(s->slot, s->gen, r->req_id));
	}
	log_debug("client %u: resumed", s->client_id);
}

/* Publishes s's new CQEs and queues the wake-ups it asks for. */
static void
flush_session(struct server *srv, struct session *s)
{
	int w = sess_flush(s);

	if (w < 0) {
		srv_drop(srv, s, CP_END_PROTOCOL, "CQ");
		return;
	}
	if ((w & SESS_WAKE_FUTEX) &&
	    ioloop_futex_wake(srv->loop, &s->ctl->cq_tail.v) < 0)
		w |= SESS_WAKE_FD;
	if (w & SESS_WAKE_FD)
		ioloop_signal_fd(srv->loop, s->cq_wfd);
	if (s->paused && s->ovf_n == 0)
		resume_session(srv, s);
}

static void
on_engine(struct server *srv)
{
	struct ep_batch *b = &srv->batch;
	size_t i;

	ep_take_events(srv->port, b);
	for (i = 0; i < b->n; i++) {
		const struct ep_event *ev = &b->ev[i];
		uint32_t slot = (uint32_t)(ev->id >> 48);
		uint32_t gen = (uint32_t)(ev->id >> 32) & GEN_MASK;
		uint32_t req_id = (uint32_t)ev->id;
		int terminal = ev->type == EP_EV_DONE ||
		    ev->type == EP_EV_ERROR;
		struct session *s = slot_session(srv, slot, gen);
		struct sess_req *r = NULL;
		uint64_t tlen;
		int rc;

		if (terminal && srv->inflight > 0)
			srv->inflight--;
		if (s == NULL || s->state != SESS_ACTIVE)
			continue;
		r = sess_req_find(s, req_id);
		if (r == NULL)
			continue;
		if (terminal) {
			struct uid_count *u = uid_get(srv, s->uid, 0);

			if (r->paused && srv->paused > 0)
				srv->paused--;
			if (u != NULL && u->reqs > 0)
				u->reqs--;
		}
		tlen = (uint64_t)ev->text_len +
		    (uint64_t)ev->n_top * sizeof(struct cp_top);
		if (ev->n_top > CP_TOPN_MAX || (tlen > 0 &&
		    (ev->text_off > b->text_len ||
		    tlen > b->text_len - ev->text_off))) {
			log_warnx("engine event for request %u: text %u+%u "
			    "and %u top entries outside %zu bytes", req_id,
			    ev->text_off, ev->text_len, ev->n_top, b->text_len);
			continue;
		}
		rc = sess_post(s, req_id, ev,
		    tlen > 0 ? b->text + ev->text_off : "");
		if (rc < 0) {
			if (rc == -ENOBUFS)
				snprintf(s->why, sizeof(s->why), "completion "
				    "overflow past %zu events", s->ovf_max);
			srv_drop(srv, s, end_reason(rc), "CQ");
			continue;
		}
		if (rc == 1)
			pause_session(srv, s);
	}
	if (b->steps > 0)
		drain_all(srv);
}

/* ---- timers and idle ------------------------------------------------ */

/* Handshake deadlines, paused clients; returns the ms until the next timer. */
static int
timers(struct server *srv)
{
	uint64_t now = now_ms(), next = now + TICK_MAX_MS;
	uint32_t i, j, slot;

	for (i = srv->n_sessions; i-- > 0;) {
		struct session *s = srv->live[i];

		slot = s->slot;
		if (s->state == SESS_HELLO) {
			if (now >= s->deadline_ms) {
				snprintf(s->why, sizeof(s->why),
				    "no HELLO within %d ms",
				    srv->cfg.handshake_timeout_ms);
				srv_drop(srv, s, CP_END_TIMEOUT, "handshake timeout");
				continue;
			}
			if (s->deadline_ms < next)
				next = s->deadline_ms;
			continue;
		}
		if (s->ovf_n > 0) {
			flush_session(srv, s);
			if (srv->slots[slot].s != s)
				continue;
		}
		if (!s->paused)
			continue;
		if (now - s->paused_since_ms >=
		    (uint64_t)srv->cfg.stall_timeout_ms) {
			unsigned cancelled = 0;

			for (j = 0; j < s->n_reqs; j++) {
				struct sess_req *r = &s->reqs[j];

				if (r->cancelled)
					continue;
				r->cancelled = 1;
				r->stalled = 1;
				srv->cq_stalls++;
				cancelled++;
				ep_push_simple(srv->port, EP_CMD_CANCEL,
				    s->slot, sess_port_id(s->slot, s->gen,
				    r->req_id));
			}
			s->paused_since_ms = now;
			/* said when something changed, not every period */
			if (cancelled > 0)
				log_info("client %u: completion ring full for "
				    "%d ms, %u requests cancelled",
				    s->client_id, srv->cfg.stall_timeout_ms,
				    cancelled);
		}
		if (now + TICK_PAUSED_MS < next)
			next = now + TICK_PAUSED_MS;
	}
	if (srv->inflight > srv->paused && now + TICK_BUSY_MS < next)
		next = now + TICK_BUSY_MS;
	if (srv->draining) {
		uint64_t d = srv->drain_cancelled ? srv->drain_end_ms :
		    srv->drain_cancel_ms;

		if (d < next)
			next = d;
	}
	return next > now ? (int)(next - now) : 0;
}

/*
 * With no runnable request in the engine, marks every client's segment
 * idle and arms a wait on its SQ; with work, clears the marks.  Returns 1
 * when some client had entries waiting (drain them before sleeping).
 */
static int
idle_pass(struct server *srv)
{
	int busy = srv->inflight > srv->paused, pending = 0;
	uint32_t i, tail;

	for (i = 0; i < srv->n_sessions; i++) {
		struct session *s = srv->live[i];

		if (s->state != SESS_ACTIVE)
			continue;
		if (busy) {
			if (srv->idle)
				sess_idle_leave(s);
			continue;
		}
		if (sess_idle_enter(s, &tail)) {
			pending = 1;
			continue;
		}
		if (srv->kind == IOLOOP_URING_FUTEX && !s->idle_armed) {
			if (ioloop_futex_wait(srv->loop, &s->ctl->sq_tail.v,
			    tail, tag_make(TAG_SQFUTEX, s->slot, s->gen)) == 0)
				s->idle_armed = 1;
			else
				pending = 1;	/* poll again soon */
		}
	}
	srv->idle = !busy;
	return pending;
}

/* ---- draining ------------------------------------------------------- */

/* Stops accepting clients and requests; in-flight work goes on. */
static void
drain_start(struct server *srv)
{
	uint64_t now = now_ms();

	srv->draining = 1;
	if (srv->lfd >= 0) {
		/* The removal reaches the kernel first: a poll pins the socket. */
		ioloop_unwatch(srv->loop, srv->lfd, tag_make(TAG_LISTEN, 0, 0));
		ioloop_flush(srv->loop);
		close(srv->lfd);
		srv->lfd = -1;
		if (srv->path[0] != '\0')
			unlink(srv->path);
	}
	srv->drain_cancel_ms = now + (uint64_t)srv->cfg.drain_timeout_ms;
	srv->drain_end_ms = srv->drain_cancel_ms + DRAIN_GRACE_MS;
	log_notice("draining: %llu requests in flight, %u clients; what is "
	    "left after %d ms is cancelled", (unsigned long long)srv->inflight,
	    srv->n_sessions, srv->cfg.drain_timeout_ms);
}

/* The drain timeout passed: cancel every request still in the engine. */
static void
drain_cancel(struct server *srv)
{
	uint32_t i, j, n = 0;

	for (i = 0; i < srv->n_sessions; i++) {
		struct session *s = srv->live[i];

		for (j = 0; j < s->n_reqs; j++) {
			struct sess_req *r = &s->reqs[j];

			if (!r->pushed || r->cancelled)
				continue;
			if (ep_push_simple(srv->port, EP_CMD_CANCEL, s->slot,
			    sess_port_id(s->slot, s->gen, r->req_id)) < 0)
				continue;
			r->cancelled = 1;
			n++;
		}
	}
	srv->drain_cancelled = 1;
	log_notice("draining: %d ms passed, %u requests cancelled",
	    srv->cfg.drain_timeout_ms, n);
}

/* 1 when no request is in flight and every event is in its client's CQ. */
static int
drain_done(const struct server *srv)
{
	uint32_t i;

	if (srv->inflight > 0)
		return 0;
	for (i = 0; i < srv->n_sessions; i++)
		if (srv->live[i]->state == SESS_ACTIVE &&
		    srv->live[i]->ovf_n > 0)
			return 0;
	return 1;
}

/* After each pass while draining: cancel at the deadline, stop when done. */
static void
drain_check(struct server *srv)
{
	uint64_t now = now_ms();

	if (!srv->drain_cancelled && now >= srv->drain_cancel_ms)
		drain_cancel(srv);
	if (drain_done(srv)) {
		log_notice("drained: every request ended and delivered");
		srv->stopping = 1;
	} else if (now >= srv->drain_end_ms) {
		log_warnx("draining: %llu requests still in flight or events "
		    "unread %d ms after the cancel; stopping anyway",
		    (unsigned long long)srv->inflight, DRAIN_GRACE_MS);
		srv->stopping = 1;
	}
}

static void
dispatch(struct server *srv, const struct ioloop_ev *ev)
{
	struct session *s;
	uint64_t v;
	ssize_t n;

	switch (tag_kind(ev->tag)) {
	case TAG_LISTEN:
		if (srv->lfd < 0)
			break;		/* closed by drain_start() */
		on_listen(srv);
		if (ev->flags & IOLOOP_F_ENDED)
			ioloop_watch(srv->loop, srv->lfd, POLLIN, ev->tag);
		break;
	case TAG_STOP:
		n = read(srv->stop_efd, &v, sizeof(v));
		(void)n;
		if (__atomic_load_n(&srv->stop_req, __ATOMIC_SEQ_CST))
			srv->stopping = 1;
		else if (__atomic_load_n(&srv->drain_req, __ATOMIC_SEQ_CST) &&
		    !srv->draining)
			drain_start(srv);
		if (__atomic_exchange_n(&srv->reload_req, 0, __ATOMIC_SEQ_CST) &&
		    srv->cfg.on_reload != NULL)
			srv->cfg.on_reload(srv->cfg.reload_arg, srv);
		if (ev->flags & IOLOOP_F_ENDED)
			ioloop_watch(srv->loop, srv->stop_efd, POLLIN, ev->tag);
		break;
	case TAG_ENGINE:
		on_engine(srv);
		if (ev->flags & IOLOOP_F_ENDED)
			ioloop_watch(srv->loop, ep_event_fd(srv->port), POLLIN,
			    ev->tag);
		break;
	case TAG_SOCK:
		if ((s = tag_session(srv, ev->tag)) != NULL)
			on_socket(srv, s, ev);
		break;
	case TAG_SQPIPE:
		if ((s = tag_session(srv, ev->tag)) == NULL)
			break;
		sess_drain_wake(s);
		if (drain_sq(srv, s) < 0)
			break;
		if ((ev->flags & IOLOOP_F_ENDED) && ev->res >= 0)
			ioloop_watch(srv->loop, s->sq_rfd, POLLIN, ev->tag);
		break;
	case TAG_SQFUTEX:
		if ((s = tag_session(srv, ev->tag)) == NULL)
			break;
		s->idle_armed = 0;
		drain_sq(srv, s);
		break;
	case TAG_PIDFD:
		if ((s = tag_session(srv, ev->tag)) != NULL && ev->res > 0)
			srv_drop(srv, s, CP_END_EXITED, "process exited");
		break;
	}
}

int
srv_run(struct server *srv)
{
	struct ioloop_ev ev[LOOP_BATCH];
	int n, i, timeout, pending = 0, rc = 0, fails = 0;

	while (!srv->stopping) {
		timeout = timers(srv);
		if (pending)
			timeout = 0;
		n = ioloop_wait(srv->loop, timeout, ev, LOOP_BATCH);
		if (n < 0) {
			/*
			 * The kernel may refuse a submission for a while (out
			 * of memory): what was queued stays queued, so wait a
			 * little and try again; a wait that fails for a second
			 * is not transient.
			 */
			if (fails++ == 0)
				log_warnx("io loop: %s: retrying", strerror(-n));
			if (fails < LOOP_RETRY_MAX) {
				(void)poll(NULL, 0, 1);
				continue;
			}
			log_warnx("io loop: %s", strerror(-n));
			rc = n;
			break;
		}
		fails = 0;
		for (i = 0; i < n; i++)
			dispatch(srv, &ev[i]);
		if (n == 0 && srv->inflight > srv->paused)
			drain_all(srv);		/* safety net, see TICK_BUSY_MS */
		pending = idle_pass(srv);
		if (pending)
			drain_all(srv);
		flush_all(srv);
		if (srv->draining && !srv->stopping)
			drain_check(srv);
	}
	return rc;
}

void
srv_free(struct server *srv)
{
	uint32_t i;

	if (srv == NULL)
		return;
	if (srv->live != NULL) {
		for (i = srv->n_sessions; i-- > 0;)
			srv_drop(srv, srv->live[i], CP_END_SHUTDOWN,
			    "daemon shutting down");
	}
	if (srv->lfd >= 0) {
		if (srv->loop != NULL)
			ioloop_unwatch(srv->loop, srv->lfd,
			    tag_make(TAG_LISTEN, 0, 0));
		close(srv->lfd);
		if (srv->path[0] != '\0')
			unlink(srv->path);
	}
	ioloop_free(srv->loop);
	if (srv->stop_efd >= 0)
		close(srv->stop_efd);
	ep_batch_fini(&srv->batch);
	free(srv->slots);
	free(srv->free_slots);
	free(srv->live);
	free(srv->uids);
	free(srv->rbuf);
	free(srv->tbuf);
	free(srv);
}
