/*
 * server.h - cpd's listening socket, client admission and io loop.
 *
 * One thread runs srv_run(): it accepts clients on a SOCK_SEQPACKET Unix
 * socket, checks SO_PEERCRED against the allow list and the per-uid
 * limits, performs the handshake (session.c), moves requests from the
 * clients' rings to the engine thread and the engine's events back into the
 * rings, and wakes sleeping clients, all without ever waiting on compute.
 * The engine thread is the other side of an engine_port (engine_port.h);
 * main.c starts it and stops it.
 *
 * Start-up (main.c):
 *	srv_config_defaults(&sc); ... fill from cpd_config ...
 *	srv_new(&sc, port, &srv);	binds the socket, picks the io loop
 *	srv_run(srv);			until srv_stop(), or a drain ends
 *	srv_free(srv);			tears every client down, unlinks
 *
 * Stopping: srv_stop() makes srv_run() return at once.  srv_drain() (the
 * first SIGTERM) closes and removes the listening socket, answers every
 * new request with an ERROR event (-ESHUTDOWN) and lets the requests in
 * flight finish; after drain_timeout_ms it cancels what is left.  srv_run()
 * returns once every request has ended and its events are in the client's
 * completion ring (clients read them even after the daemon has gone), or
 * five seconds after the cancel whatever is left.
 */
#ifndef CP_SERVER_H
#define CP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cp_proto.h"
#include "engine_port.h"

#define SRV_MAX_CLIENTS		65536	/* max_clients, at most */
#define SRV_MAX_ALLOW		64	/* entries of each allow list */
#define SRV_PATH_MAX		108	/* sun_path, NUL included */

struct server;

struct srv_config {
	const char *socket_path;	/* NULL: srv_socket_path(NULL) */
	int socket_mode;		/* permission bits; -1 = umask's */
	long socket_gid;		/* group of the socket; -1 = ours */
	uid_t allow_uids[SRV_MAX_ALLOW];
	size_t n_allow_uids;
	gid_t allow_gids[SRV_MAX_ALLOW];	/* primary or supplementary */
	size_t n_allow_gids;		/* both 0: only our own uid */
	uint32_t max_clients;		/* connections in all */
	uint32_t per_uid_max_clients;	/* connections per uid */
	uint32_t per_uid_max_requests;	/* requests in flight per uid */
	uint32_t max_reqs;		/* requests in flight per client */
	uint32_t sq_entries;		/* granted at most (and by default) */
	uint32_t cq_entries;
	uint32_t arena_bytes;
	uint32_t max_prompt_bytes;	/* one prompt, all fragments */
	int stall_timeout_ms;		/* full CQ: cancel the client's work */
	int handshake_timeout_ms;	/* HELLO must come within */
	int drain_timeout_ms;		/* srv_drain(): cancel what is left */
	int ioloop;			/* IOLOOP_*; AUTO reads $CPD_IOLOOP */
	int listen_fd;			/* >= 0: a listening socket handed
					   over (socket activation), used as
					   it is and never unlinked; -1: bind
					   socket_path */
	bool listen_owned;		/* listen_fd is srv_listen()'s, for
					   socket_path: unlinked at the end */
	struct cp_wire_model model;	/* sent in every welcome */
	/*
	 * Optional: called on the io loop's thread after srv_reload(), where
	 * it may call srv_set_limits().
	 */
	void (*on_reload)(void *arg, struct server *srv);
	void *reload_arg;
	/*
	 * CP_MSG_TOKENIZE (NULL: not offered).  Called on the io loop's
	 * thread with flags within CP_TOKF_MASK; writes at most max_ids ids
	 * and returns how many the text needs, or a negative errno.
	 */
	int (*tokenize)(const void *arg, const char *text, size_t len,
	    uint32_t flags, int32_t *ids, size_t max_ids);
	const void *tokenize_arg;
	/*
	 * CP_MSG_DETOKENIZE (NULL: not offered).  Called on the io loop's
	 * thread with tokenize_arg and flags within CP_DETOKF_MASK: the
	 * bytes token id alone renders to, *len their length, borrowed for
	 * the server's life; NULL when id is outside the vocabulary.
	 */
	const char *(*piece)(const void *arg, int32_t id, uint32_t flags,
	    size_t *len);
	/* The engine constrains output with grammars (CP_FEAT_GRAMMAR). */
	bool grammar;
};

/*
 * Binds and listens on c's socket path (as srv_new() would) before the
 * model loads, so that a wrong path is reported at once and clients that
 * connect meanwhile wait in the backlog: the fd (give it to srv_new() as
 * listen_fd with listen_owned), or -errno, logged.
 */
int srv_listen(const struct srv_config *c);

/*
 * Ask for a reload (async-signal-safe): the io loop calls c->on_reload
 * between its events.
 */
void srv_reload(struct server *srv);

/*
 * From on_reload: the limits that change without dropping anyone take
 * c's values (allow lists, per-uid clients and requests, the stall and
 * drain timeouts); a client already over a lowered limit keeps what it
 * has, later ones are refused.
 */
void srv_set_limits(struct server *srv, const struct srv_config *c);

/* Fills c with the defaults (allow list empty = our uid, 0600 socket, auto loop). */
void srv_config_defaults(struct srv_config *c);

/*
 * Socket path: configured when non-NULL and non-empty, else $CPD_SOCKET,
 * else $XDG_RUNTIME_DIR/cpd.sock, else /run/cpd/cpd.sock, into buf.
 * 0 or -ENAMETOOLONG.
 */
int srv_socket_path(const char *configured, char *buf, size_t size);

/*
 * Binds and listens (a stale socket file left by a dead daemon is
 * replaced; a live one gives -EADDRINUSE), and sets up the io loop.
 * port is borrowed and must outlive the server.  0 and *out, or -errno.
 */
int srv_new(const struct srv_config *c, struct engine_port *port,
    struct server **out);

/* Runs the loop until srv_stop(); 0, or -errno on a failure of the loop itself. */
int srv_run(struct server *srv);

/* Asks srv_run() to return; async-signal-safe, callable from any thread. */
void srv_stop(struct server *srv);

/* Asks srv_run() to drain, then return (see above); async-signal-safe. */
void srv_drain(struct server *srv);

/* Tears down every client, closes and unlinks the socket, frees (NULL accepted). */
void srv_free(struct server *srv);

/* The io loop kind running (IOLOOP_*). */
int srv_ioloop(const struct server *srv);

/* The bound socket path (valid while srv lives). */
const char *srv_path(const struct server *srv);

/* Current counters in the wire layout (every byte written); io loop thread. */
void srv_stats(struct server *srv, struct cp_wire_stats *st);

#endif
