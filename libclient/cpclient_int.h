/*
 * cpclient_int.h - libcpclient's private state, shared by cpclient.c
 * (connection, handshake, statistics) and cpclient_ring.c (submissions and
 * events).  Not installed.
 *
 * Every size and offset below is the library's own copy, checked at
 * connect time; the segment header is never read again.
 */
#ifndef CPCLIENT_INT_H
#define CPCLIENT_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cp_proto.h"
#include "cpclient.h"

struct cp_client {
	int sock;
	int cq_rfd;			/* CQ wake pipe, read end */
	int sq_wfd;			/* SQ wake pipe, write end (CP_WAKE_FD) */
	int timeout_ms;
	uint32_t wake_mode;

	unsigned char *map;
	size_t map_len;
	struct cp_seg_ctl *ctl;
	struct cp_sqe *sq;
	unsigned char *arena;
	const struct cp_cqe *cq;
	uint32_t sq_entries, cq_entries, arena_bytes;
	uint32_t max_prompt, max_reqs;
	uint32_t features;		/* CP_FEAT_* of the welcome */
	struct cp_model_info info;

	int broken;			/* CP_EPROTO or another fatal error, atomic */
	int gone;			/* the daemon hung up, atomic */
	uint32_t live;			/* requests not ended yet, atomic */
	uint32_t last_id;		/* highest id submitted, atomic */
	int progress_asked;		/* progress asked for once, atomic */
	uint32_t top_asked;		/* longest top-n list asked, atomic */

	pthread_mutex_t sq_lock;	/* everything below up to cq_lock */
	uint32_t sq_tail;		/* published */
	uint32_t sq_head;		/* as last read from the daemon */
	uint32_t arena_tail;		/* free-running bytes handed out */
	uint32_t *slot_start;		/* arena_tail before slot i's bytes */

	pthread_mutex_t cq_lock;	/* everything below up to sock_lock */
	uint32_t cq_head;
	char *text;			/* the current event's joined text */
	size_t text_cap;
	int32_t top_ids[CP_TOPN_MAX];	/* and its top-n list */
	float top_lp[CP_TOPN_MAX];

	pthread_mutex_t sock_lock;	/* the socket after the handshake */
};

/*
 * The size of each sized structure (cpclient.h, SIZES) as its first
 * sized header had it: a caller's structure is at least this long.
 */
#define CPC_END(type, field) \
	(offsetof(type, field) + sizeof(((type *)0)->field))
#define CPC_OPTS_MIN	CPC_END(struct cp_connect_opts, timeout_ms)
#define CPC_PARAMS_MIN	CPC_END(struct cp_params, strict)
#define CPC_EVENT_MIN	CPC_END(struct cp_event, n_total)
#define CPC_INFO_MIN	CPC_END(struct cp_model_info, max_requests)

/*
 * The caller's structure src (starting with its uint32_t size) into dst,
 * the library's own of dst_size bytes: the bytes both have, zero past the
 * caller's, dst's size set to dst_size.  0, or -EINVAL when src's size is
 * below min.
 */
int cpc_copy_in(void *dst, size_t dst_size, const void *src, size_t min);

/*
 * The library's structure src (src_size bytes) out to the caller's dst of
 * dst_size bytes: as many bytes as both have, then dst's size field says
 * how many.  0, or -EINVAL when dst_size is below min.
 */
int cpc_copy_out(void *dst, size_t dst_size, const void *src,
    size_t src_size, size_t min);

/* Milliseconds on the monotonic clock. */
uint64_t cpc_now_ms(void);

/* Latches a fatal error on c (first one wins); returns err. */
int cpc_fail(struct cp_client *c, int err);

/* The latched fatal error, or 0. */
int cpc_broken(struct cp_client *c);

/* 1 when the socket or the CQ pipe says the daemon is gone (does not block). */
int cpc_daemon_gone(struct cp_client *c);

/* Writes one byte to a pipe without raising SIGPIPE; 0 or -errno (EAGAIN ignored). */
int cpc_pipe_signal(int fd);

#endif
