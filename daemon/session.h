/*
 * session.h - one connected client: its handshake, its shared segment,
 * the validation of everything it writes, and the events written back.
 *
 * A session does no waiting and knows nothing of the event loop, the other
 * clients or the engine thread: server.c drives it and owns its teardown.
 * session.c's opening comment gives the states and numbered invariants.
 */
#ifndef CP_SESSION_H
#define CP_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cp_proto.h"
#include "engine_port.h"

#define SESS_MAX_REQS		1024	/* max_reqs, at most */

/* Session states. */
#define SESS_HELLO		0	/* accepted, waiting for cp_hello */
#define SESS_ACTIVE		1	/* segment shared, rings live */

/* Wake-ups sess_flush() asks for. */
#define SESS_WAKE_FUTEX		0x1	/* FUTEX_WAKE on the client's cq_tail */
#define SESS_WAKE_FD		0x2	/* a byte into the CQ wake pipe */

/* What the daemon grants; sizes are powers of two within cp_proto.h's ranges. */
struct sess_limits {
	uint32_t sq_default, sq_max;
	uint32_t cq_default, cq_max;
	uint32_t arena_default, arena_max;
	uint32_t max_reqs;		/* requests in flight per client */
	uint32_t max_prompt_bytes;	/* prompt of one request, all fragments */
	uint32_t wake_mode;		/* CP_WAKE_* */
};

struct sess_req {
	uint32_t req_id;
	uint8_t cancelled;	/* CANCEL sent to the engine */
	uint8_t stalled;	/* cancelled because the CQ stayed full */
	uint8_t paused;		/* PAUSE sent, no RESUME yet */
	uint8_t pushed;		/* handed to the engine (server.c sets it) */
	uint8_t progress;	/* submitted with CP_PF_PROGRESS */
	uint8_t top_n;		/* its CP_PF_TOPN n, <= CP_TOPN_MAX */
};

/* The request being assembled from one SUBMIT and its APPEND entries. */
struct sess_build {
	int active;
	uint32_t req_id;
	uint8_t sqe_flags;	/* CP_SQF_TOKENS of the SUBMIT */
	struct cp_wire_params params;
	uint32_t stop_bytes;
	char stops[CP_STOP_BYTES_MAX];
	uint32_t gram_bytes;	/* the grammar's text at the head of buf */
	uint32_t gram_pad;	/* and the bytes it takes there */
	unsigned char *buf;	/* prompt stream so far (grammar, prompt) */
	size_t len, cap;
	int oom;		/* an allocation failed: the request ends
				   with ERROR -ENOMEM once fully read */
};

/* Commands produced by sess_consume(), in ring order. */
struct sess_out {
	struct ep_cmd *head;
	struct ep_cmd **tail;
	unsigned n;
};

struct session {
	uint32_t slot, gen;	/* place in the server's table */
	uint32_t client_id;	/* for logs */
	int fd;			/* the socket */
	int state;		/* SESS_* */
	pid_t pid;		/* SO_PEERCRED */
	int pidfd;		/* SO_PEERPIDFD, -1 where the kernel has none */
	uid_t uid;
	gid_t gid;
	uint64_t deadline_ms;	/* handshake must finish by then */

	/* Segment; every size and offset is the daemon's private copy. */
	unsigned char *map;
	size_t map_len;
	struct cp_seg_ctl *ctl;
	struct cp_sqe *sq;
	const unsigned char *arena;
	struct cp_cqe *cq;
	uint32_t sq_entries, cq_entries, arena_bytes, wake_mode;
	uint32_t sq_head;	/* next SQ index to consume, published */
	uint32_t cq_tail;	/* next CQ index to fill */
	uint32_t cq_pub;	/* cq_tail as last published */
	uint32_t text_chunk;	/* longest event text in one CQE group */
	int cq_wfd;		/* our end of the CQ wake pipe (write) */
	int sq_rfd;		/* our end of the SQ wake pipe (read), or -1 */

	/* Requests handed to the engine and not yet ended. */
	struct sess_req *reqs;
	uint32_t n_reqs, max_reqs;
	uint32_t last_req_id;	/* highest SUBMIT id seen */
	uint32_t max_prompt;
	uint32_t features;	/* CP_FEAT_* its welcome offered */
	struct sess_build build;

	/* CQEs that did not fit in the CQ, oldest first (whole groups). */
	struct cp_cqe *ovf;
	size_t ovf_head, ovf_n, ovf_cap, ovf_max;

	/* Flow control and loop state, kept by server.c. */
	int paused;
	uint64_t paused_since_ms;
	uint32_t live_idx;	/* index in the server's list of sessions */
	int idle_armed;		/* a futex wait on sq_tail is pending */
	int flush_pending;	/* CQEs written since the last flush */

	uint64_t n_submitted;	/* requests accepted */
	char why[192];		/* the violation that ends this session */
};

/* Request id as the engine sees it: slot, generation and the client's id. */
static inline uint64_t
sess_port_id(uint32_t slot, uint32_t gen, uint32_t req_id)
{
	return ((uint64_t)(slot & 0xffffu) << 48) |
	    ((uint64_t)(gen & 0xffffu) << 32) | req_id;
}

/* A session owning accepted socket fd; NULL on ENOMEM (fd closed then). */
struct session *sess_new(int fd, uint32_t slot, uint32_t gen);

/* Unmaps, closes the socket and pipes, frees everything (NULL accepted). */
void sess_free(struct session *s);

/*
 * Fills pid, uid, gid from SO_PEERCRED and pidfd from SO_PEERPIDFD (Linux
 * 6.5; left -1 on older kernels); 0 or -errno.
 */
int sess_peercred(struct session *s);

/*
 * Receives one record from fd without blocking into buf (size bytes),
 * length in *len.  Returns 0, -EAGAIN (nothing yet), -EPIPE (hangup), or
 * -EPROTO when the record carried descriptors (all closed) or was
 * truncated.
 */
int sess_recv(int fd, void *buf, size_t size, size_t *len);

/* Sends one record, with nfds descriptors (borrowed) when nfds > 0; 0 or -errno. */
int sess_send(int fd, const void *msg, size_t len, const int *fds, int nfds);

/*
 * Checks a received HELLO of len bytes and copies it to *out.  Returns 0,
 * -EPROTONOSUPPORT for another protocol version, -EPROTO for anything else
 * malformed (size, magic, type, nonzero reserved words).
 */
int sess_hello_check(const void *buf, size_t len, struct cp_hello *out);

/*
 * Creates s's segment and wake pipes for hello's sizes clamped by lim,
 * and fills w (all but model and client_id) and fds[] with the client's
 * descriptors (*nfds of them; the caller sends then closes them).  The
 * memfd is sealed against shrinking, growing and new seals.  0 or -errno;
 * on error nothing is left open in fds.
 */
int sess_setup(struct session *s, const struct cp_hello *hello,
    const struct sess_limits *lim, struct cp_welcome *w,
    int fds[CP_FD_MAX], int *nfds);

/* Initialise an empty command list. */
void sess_out_init(struct sess_out *o);

/*
 * Consumes every SQ entry the client has published: validates each copy,
 * assembles prompts, appends SUBMIT and CANCEL commands to out and
 * releases sq_head.  Returns the number of entries consumed, or -EPROTO
 * (s->why says what) at the first violation.  Out of memory, a SUBMIT ends
 * with an ERROR event (-ENOMEM) instead of a command, and a CANCEL stays
 * in the SQ for a later call; only an ERROR that finds no room in the CQ
 * fails the session (with sess_post()'s error).
 */
int sess_consume(struct session *s, struct sess_out *out);

/* 1 when the client has published SQ entries not yet consumed, else 0. */
int sess_sq_pending(const struct session *s);

/*
 * Marks the daemon idle in s's segment and re-checks the SQ (rule 6):
 * returns 1 when entries wait (do not sleep), else 0 with *tail set to the
 * sq_tail value to wait on.
 */
int sess_idle_enter(struct session *s, uint32_t *tail);

/* Clears daemon_idle in s's segment. */
void sess_idle_leave(struct session *s);

/*
 * Writes one engine event for req_id as CQEs: into the CQ when the whole
 * group fits and nothing waits before it, else into the overflow queue.
 * Events of unknown or ended requests are dropped, and so is a PROGRESS
 * the request did not ask for or that finds no room in the CQ at once (it
 * never goes to the overflow).  A terminal event ends the request.
 * Returns 0, 1 when the event went to overflow (pause the
 * client), -ENOBUFS when the overflow limit is passed, -EPROTO for a bad
 * cq_head (s->why set).  text holds ev->text_len bytes, then for a TOKEN
 * ev->n_top struct cp_top (unaligned): its top-n list, sent when the
 * request asked for at least that many (cp_proto.h, TOP-N).
 */
int sess_post(struct session *s, uint32_t req_id, const struct ep_event *ev,
    const char *text);

/*
 * Moves overflow into the CQ as room allows and publishes cq_tail.
 * Returns the SESS_WAKE_* bits the client asked for (0 when nothing new was
 * published or it does not sleep), or -EPROTO.
 */
int sess_flush(struct session *s);

/* The entry for req_id among requests in flight, or NULL. */
struct sess_req *sess_req_find(struct session *s, uint32_t req_id);

/* Drains the SQ wake pipe (CP_WAKE_FD); returns 1 if anything was read. */
int sess_drain_wake(struct session *s);

#endif
