/*
 * cp_proto.h - the protocol between cpd and libcpclient: socket handshake
 * messages and the layout of the shared-memory segment (versioned ABI).
 *
 * Everything here is fixed-width, little-endian (the daemon and its
 * clients share one machine), and checked by _Static_assert: a change of
 * any size or offset is a new CP_PROTO_VERSION.  The segment holds offsets
 * only, never pointers.
 *
 * HANDSHAKE.  The client connects a SOCK_SEQPACKET Unix socket and sends
 * one struct cp_hello (no file descriptors).  The daemon checks the peer's
 * credentials, clamps the requested sizes, makes a memfd, sizes and seals
 * it and answers one struct cp_welcome carrying, in SCM_RIGHTS, the memfd,
 * the read end of a pipe the daemon signals (CQ side) and, in CP_WAKE_FD
 * mode, the write end of a pipe the client signals (SQ side).  Wake pipes,
 * not eventfds: an eventfd is one open file the client could switch to
 * blocking mode and fill, stalling the daemon's next write or read on it;
 * the daemon's end of a pipe is its own open file, always non-blocking.
 * The CQ pipe also reports the daemon's death (POLLHUP) to a poll loop.
 * A refused client gets a welcome with a negative status and no
 * descriptors, then the socket closes.  After the handshake the socket
 * carries only CP_MSG_STATS_REQ / CP_MSG_STATS and, where the welcome
 * offers CP_FEAT_TOKENIZE, CP_MSG_TOKENIZE / CP_MSG_TOKENS and, where it
 * offers CP_FEAT_DETOKENIZE, CP_MSG_DETOKENIZE / CP_MSG_PIECES; its hangup
 * means death of either side (the daemon also watches the client's
 * pidfd).  Any descriptor sent by a client, any message of the wrong
 * size, type, magic or version closes it, except a TOKENIZE or DETOKENIZE
 * whose fields are wrong: that is answered with a TOKENS or PIECES
 * carrying the error (below).  The statistics inside CP_MSG_STATS carry a layout
 * version and size of their own (CP_STATS_VERSION), so that they can grow
 * without a new protocol version: a client that meets another stats
 * version only loses cp_stats().
 *
 * SEGMENT (all offsets page aligned, all regions disjoint):
 *
 *	0		struct cp_seg_hdr (one page; written once by the daemon)
 *	ctl_off		struct cp_seg_ctl: six 32-bit control words, each on
 *			its own 128-byte line
 *	sq_off		sq_entries x struct cp_sqe	(client -> daemon)
 *	arena_off	arena_bytes of prompt bytes	(client -> daemon)
 *	cq_off		cq_entries x struct cp_cqe	(daemon -> client)
 *
 * RING INVARIANTS.  Both rings are single-producer single-consumer with
 * free-running u32 indices; slot of index i is i & (entries - 1).
 *
 *  1. Only the producer writes a ring's tail, only the consumer its head:
 *     the client writes sq_tail, cq_head, client_waiting and the SQ slots
 *     and the arena; the daemon writes sq_head, cq_tail, daemon_idle and
 *     the CQ slots.  No lock ever lives in shared memory.
 *  2. tail - head (unsigned) <= entries at every moment a consumer reads
 *     it.  A reader that observes otherwise has met a broken or hostile
 *     peer: the daemon disconnects that client, the client library fails
 *     the connection with CP_EPROTO.  Neither side ever repairs.
 *  3. A producer fills slots [tail, tail + n), then store-releases
 *     tail + n.  A consumer load-acquires tail, copies slots out into
 *     private memory, validates the copies, then store-releases its head.
 *     A slot between head and tail is never written by its producer.
 *  4. The arena bytes an SQ entry names belong to the client again once
 *     sq_head has passed that entry: the daemon copies them out before it
 *     releases sq_head.
 *  5. Every event group (an event with CP_CQF_MORE and its CP_EV_TEXT and
 *     CP_EV_TOP continuations) is published by a single cq_tail store: a
 *     client never sees half a group, and a group takes at most half the
 *     ring.
 *  6. Waiting: a waiter sets its flag (client_waiting / daemon_idle), runs
 *     a full fence, re-checks the ring, then sleeps on the 32-bit tail word
 *     (futex without FUTEX_PRIVATE: the word is shared between processes)
 *     or on its wake pipe.  A producer publishes its tail, runs a full fence,
 *     reads the flag and wakes only a sleeper.  With both fences, either the
 *     waiter sees the new tail or the producer sees the flag.
 *  7. Each side reads the header only at set-up; the daemon keeps private
 *     copies of every size and offset and never re-reads anything the
 *     client could have written except through rule 3.
 */
#ifndef CP_PROTO_H
#define CP_PROTO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The public structures of cpclient.h are not these: the library converts,
 * and they carry a size field of their own (cpclient.h, SIZES), so that
 * either side can grow without the other.  Wire structures grow by a new
 * CP_PROTO_VERSION, or within one by the rule below.
 *
 * 2: cp_cqe.step, stats version 2.  What a peer of this version meets only
 * when it asks (a CP_FEAT_* bit the welcome offers, then the flag and the
 * event it enables) is added without a new version: an older client never
 * sets the flag, so never sees the event, and a newer client sets it only
 * where the welcome offers it.
 */
#define CP_PROTO_VERSION	2
#define CP_PROTO_MAGIC		0x31445043u	/* "CPD1": socket messages */
#define CP_SEG_MAGIC		0x47455343u	/* "CSEG": segment header */

#define CP_PAGE			4096u
#define CP_LINE			128u	/* one control word per line */

/* Ring and arena sizes: powers of two; requests are clamped into range. */
#define CP_SQ_MIN		8u
#define CP_SQ_DEFAULT		64u
#define CP_SQ_MAX		4096u
#define CP_CQ_MIN		16u
#define CP_CQ_DEFAULT		1024u
#define CP_CQ_MAX		65536u
#define CP_ARENA_MIN		4096u
#define CP_ARENA_DEFAULT	(1u << 20)
#define CP_ARENA_MAX		(64u << 20)

/* Stop strings: at most CP_STOP_MAX, NUL-terminated, in CP_STOP_BYTES_MAX. */
#define CP_STOP_MAX		8u
#define CP_STOP_BYTES_MAX	512u

/* Longest text of one event after continuations are joined. */
#define CP_EVENT_TEXT_MAX	65536u

/* Wake modes (segment header and welcome). */
#define CP_WAKE_FUTEX		1u	/* sleepers wait on the tail futex word */
#define CP_WAKE_FD		2u	/* sleepers wait on the wake pipes */

/* client_waiting bits. */
#define CP_WAIT_SLEEP		0x1u	/* client sleeps for CQ events */
#define CP_WAIT_FD		0x2u	/* signal the CQ wake pipe on new events */
#define CP_WAIT_MASK		0x3u

/*
 * ---- segment --------------------------------------------------------
 */

/* The first page.  Written once by the daemon before the memfd is sent. */
struct cp_seg_hdr {
	uint32_t magic;		/* CP_SEG_MAGIC */
	uint16_t version;	/* CP_PROTO_VERSION */
	uint16_t hdr_bytes;	/* sizeof(struct cp_seg_hdr) */
	uint32_t wake_mode;	/* CP_WAKE_* */
	uint32_t seg_bytes;	/* whole segment, a multiple of CP_PAGE */
	uint32_t ctl_off;	/* struct cp_seg_ctl */
	uint32_t sq_off;	/* sq_entries x struct cp_sqe */
	uint32_t arena_off;	/* arena_bytes */
	uint32_t cq_off;	/* cq_entries x struct cp_cqe */
	uint32_t sq_entries;	/* power of two */
	uint32_t cq_entries;	/* power of two */
	uint32_t arena_bytes;	/* power of two */
	uint16_t sqe_bytes;	/* sizeof(struct cp_sqe) */
	uint16_t cqe_bytes;	/* sizeof(struct cp_cqe) */
	uint32_t reserved[4];	/* zero */
};

struct cp_ctl_word {
	uint32_t v;
	uint8_t pad[CP_LINE - sizeof(uint32_t)];
};

/* Control words, each alone on a 128-byte line (no false sharing). */
struct cp_seg_ctl {
	struct cp_ctl_word sq_tail;		/* client: next SQ index to fill */
	struct cp_ctl_word sq_head;		/* daemon: next SQ index to consume */
	struct cp_ctl_word cq_tail;		/* daemon: next CQ index to fill */
	struct cp_ctl_word cq_head;		/* client: next CQ index to consume */
	struct cp_ctl_word client_waiting;	/* client: CP_WAIT_* bits */
	struct cp_ctl_word daemon_idle;		/* daemon: 1 while it waits for SQ work */
};

/* SQ opcodes. */
#define CP_OP_SUBMIT		1u	/* new request req_id */
#define CP_OP_APPEND		2u	/* more prompt for the request being built */
#define CP_OP_CANCEL		3u	/* cancel req_id (no-op if it already ended) */

/* SQ entry flags. */
#define CP_SQF_MORE		0x01u	/* SUBMIT/APPEND: prompt continues in APPEND */
#define CP_SQF_TOKENS		0x02u	/* SUBMIT: prompt is little-endian int32 ids */
#define CP_SQF_CHAT		0x04u	/* SUBMIT: prompt is a chat block (only
					   where CP_FEAT_CHAT; not with TOKENS) */
#define CP_SQF_SUBMIT_MASK	(CP_SQF_MORE | CP_SQF_TOKENS | CP_SQF_CHAT)
#define CP_SQF_APPEND_MASK	CP_SQF_MORE

/* Sampling parameter flags. */
#define CP_PF_SEED		0x1u	/* use seed (otherwise the daemon picks one) */
#define CP_PF_LOGPROB		0x2u	/* fill cp_cqe.logprob for sampled tokens */
#define CP_PF_PROGRESS		0x4u	/* CP_EV_PROGRESS during the prefill
					   (only where CP_FEAT_PROGRESS) */
#define CP_PF_STRICT		0x8u	/* refuse a prompt plus max_tokens
					   past the context up front (only
					   where CP_FEAT_STRICT) */
#define CP_PF_TOPN_SHIFT	8	/* bits 8..12: n of the top-n list
					   (only where CP_FEAT_TOPN; see
					   TOP-N below), 0 = none */
#define CP_PF_TOPN_BITS		(0x1fu << CP_PF_TOPN_SHIFT)
#define CP_PF_TOPN(n)		((uint32_t)(n) << CP_PF_TOPN_SHIFT)
#define CP_PF_GRAMMAR_SHIFT	13	/* bits 13..14: CP_GRAM_* (only where
					   CP_FEAT_GRAMMAR; see GRAMMAR
					   below), 0 = none */
#define CP_PF_GRAMMAR_BITS	(0x3u << CP_PF_GRAMMAR_SHIFT)
#define CP_PF_GRAMMAR(k)	((uint32_t)(k) << CP_PF_GRAMMAR_SHIFT)
#define CP_PF_MASK		(0xfu | CP_PF_TOPN_BITS | CP_PF_GRAMMAR_BITS)
#define CP_TOPN_MAX		20u	/* longest top-n list */

/* Sampling parameters as they cross the ring (SUBMIT only; zero otherwise). */
struct cp_wire_params {
	uint32_t max_tokens;	/* most tokens to generate, capped by the
				   room the context leaves (CP_FINISH_CONTEXT
				   there) unless CP_PF_STRICT; 0 = until the
				   context is full */
	float temperature;	/* [0, 100]; 0 = greedy */
	float top_p;		/* (0, 1]; 1 = off */
	float min_p;		/* [0, 1]; 0 = off */
	float repeat_penalty;	/* (0, 16]; 1 = off */
	int32_t top_k;		/* [0, 1 << 20]; 0 = off */
	uint32_t repeat_last_n;	/* [0, 1 << 20] tokens the penalty looks at */
	uint32_t flags;		/* CP_PF_* */
	uint64_t seed;		/* with CP_PF_SEED */
};

/*
 * CHAT BLOCK.  A SUBMIT with CP_SQF_CHAT carries, as its prompt (all its
 * fragments joined), a conversation that the daemon renders with the
 * served model's chat template and tokenizes; clients never see
 * templates.  Layout, little-endian:
 *
 *	struct cp_chat_hdr	n_msgs, flags (CP_CHAT_*)
 *	n_msgs times:
 *	  struct cp_chat_msg	role (CP_ROLE_*), len
 *	  len bytes of UTF-8 content, then zero bytes up to a multiple of 4
 *
 * Rules (the daemon checks them on its private copy, after the bytes left
 * the arena): 1 <= n_msgs <= CP_CHAT_MAX_MSGS; no flag outside
 * CP_CHAT_MASK; role < CP_ROLES; each message and its padding lie inside
 * the block, and the last one ends exactly at its end; padding bytes are
 * zero; content is valid UTF-8 (no overlong form, no surrogate, at most
 * U+10FFFF).  A block that breaks one is not a protocol violation: the
 * request ends with an ERROR (-EINVAL) saying which rule, and the
 * connection goes on.  So does a chat request to a model whose template
 * the daemon does not know (-EOPNOTSUPP).
 */
#define CP_ROLE_SYSTEM		0u
#define CP_ROLE_USER		1u
#define CP_ROLE_ASSISTANT	2u
#define CP_ROLE_TOOL		3u
#define CP_ROLES		4u

#define CP_CHAT_GEN		0x1u	/* append the opening of the
					   assistant's turn */
#define CP_CHAT_MASK		0x1u
#define CP_CHAT_MAX_MSGS	65536u

struct cp_chat_hdr {
	uint32_t n_msgs;
	uint32_t flags;		/* CP_CHAT_* */
};

struct cp_chat_msg {
	uint32_t role;		/* CP_ROLE_* */
	uint32_t len;		/* content bytes that follow */
};

/*
 * GRAMMAR.  A SUBMIT whose parameter flags carry a kind in
 * CP_PF_GRAMMAR_BITS (only where the welcome offers CP_FEAT_GRAMMAR) has
 * its sampling constrained: every token it generates keeps the output a
 * prefix of a sentence of the grammar, and it ends (DONE, CP_FINISH_STOP)
 * once the grammar allows nothing more, or at an end-of-generation token
 * where the grammar accepts.  Kinds:
 *
 *	CP_GRAM_GBNF	grammar_bytes of GBNF text (llama.cpp's dialect)
 *	CP_GRAM_SCHEMA	grammar_bytes of a JSON schema (JSON text)
 *	CP_GRAM_JSON	any JSON value; grammar_bytes 0
 *
 * The text comes first in the request's prompt stream (the SUBMIT's arena
 * bytes after its stop block, then its APPENDs), padded with zero bytes
 * to a multiple of 4; the prompt (text, tokens or chat block) follows and
 * alone counts against max_prompt_bytes.  1 <= grammar_bytes <=
 * CP_GRAMMAR_BYTES_MAX for GBNF and SCHEMA, else 0, and a stream shorter
 * than the padded text, are protocol violations.  A grammar that does not
 * compile (syntax, a limit, an unknown schema keyword) is not: the
 * request ends with an ERROR (-EINVAL, or -E2BIG past a limit) whose text
 * names the rule or schema path, and the connection goes on.
 */
#define CP_GRAM_GBNF		1u
#define CP_GRAM_SCHEMA		2u
#define CP_GRAM_JSON		3u
#define CP_GRAMMAR_BYTES_MAX	(256u * 1024)

#define CP_PARAM_TOPK_MAX	(1 << 20)
#define CP_PARAM_LASTN_MAX	(1u << 20)

/*
 * One submission.  SUBMIT's arena range holds stop_bytes of stop strings
 * (each NUL-terminated, non-empty, at most CP_STOP_MAX) followed by the
 * prompt stream (or its first fragment when CP_SQF_MORE is set): a
 * grammar's text (GRAMMAR), then the prompt.  APPEND's range
 * holds the next fragment.  CANCEL has no arena range.
 */
struct cp_sqe {
	uint8_t op;		/* CP_OP_* */
	uint8_t flags;		/* CP_SQF_* allowed for op */
	uint16_t stop_bytes;	/* SUBMIT: <= CP_STOP_BYTES_MAX; else 0 */
	uint32_t req_id;	/* nonzero; SUBMIT ids strictly increase */
	uint32_t arena_off;	/* len <= arena && off <= arena - len */
	uint32_t arena_len;
	struct cp_wire_params params;
	uint32_t grammar_bytes;	/* SUBMIT with CP_GRAM_GBNF or _SCHEMA:
				   the text's length (GRAMMAR); else 0 */
	uint32_t reserved;	/* zero */
};

/* CQ event types. */
#define CP_EV_TOKEN		1u	/* a sampled token and its text */
#define CP_EV_TEXT		2u	/* continuation of the previous event's text */
#define CP_EV_DONE		3u	/* request finished (finish says why) */
#define CP_EV_ERROR		4u	/* request failed (error, text = message) */
#define CP_EV_PROGRESS		5u	/* prefill progress (CP_PF_PROGRESS) */
#define CP_EV_TOP		6u	/* continuation of a TOKEN: entries of
					   its top-n list (CP_PF_TOPN) */

/* CQ event flags. */
#define CP_CQF_MORE		0x01u	/* text continues in the next CP_EV_TEXT */

/* Finish reasons (CP_EV_DONE). */
#define CP_FINISH_NONE		0u
#define CP_FINISH_STOP		1u	/* end-of-sequence token or stop string */
#define CP_FINISH_LENGTH	2u	/* max_tokens reached */
#define CP_FINISH_CANCELLED	3u	/* cancelled by the client */
#define CP_FINISH_CONTEXT	4u	/* context window full: the last
					   token took its last position */
#define CP_FINISH_STALLED	5u	/* cancelled: the client left its CQ full */
#define CP_FINISH_MAX		5u

/* A CP_FINISH_* value's name, as logs and JSON spell it. */
static inline const char *
cp_finish_name(unsigned finish)
{
	static const char *const names[CP_FINISH_MAX + 1] = {
		"none", "stop", "length", "cancelled", "context", "stalled",
	};

	return finish <= CP_FINISH_MAX ? names[finish] : "unknown";
}

#define CP_CQE_TEXT		32u

/*
 * TOP-N.  A request whose parameter flags carry n = 1..CP_TOPN_MAX in
 * CP_PF_TOPN_BITS (only where the welcome offers CP_FEAT_TOPN) gets, with
 * each sampled token, the n most likely tokens of the distribution the
 * model produced at that position: the log-softmax over the whole
 * vocabulary of the logits after the repetition penalty, before
 * end-of-generation masking, top-k, top-p, min-p and temperature (as
 * llama-server's n_probs reports the raw distribution); the TOKEN's
 * logprob is its own entry of that same distribution.  Rules:
 *  1. The TOKEN event of a sampled token (token >= 0) says in n_top how
 *     many entries follow, 0 < n_top <= n (fewer only where fewer logits
 *     are finite); every other event has n_top 0 (a text-only TOKEN, with
 *     token -1, too).
 *  2. The entries travel in CP_EV_TOP continuations of that TOKEN's group,
 *     after its CP_EV_TEXT continuations: each carries text_len bytes
 *     (a multiple of sizeof(struct cp_top), at most CP_TOP_PER_CQE
 *     entries, none empty) of struct cp_top in text[]; together they hold
 *     exactly n_top entries.  No TEXT follows a TOP.
 *  3. Entries are in descending logprob (ties: lower id first), each id
 *     in [0, n_vocab), each logprob finite and <= 0.
 *  4. A group with top entries carries at most text_chunk -
 *     CP_TOP_CQES_MAX * CP_CQE_TEXT bytes of text, so it still needs at
 *     most half the ring (rule 5 of the ring invariants holds).
 * A client that meets a violation fails the connection with CP_EPROTO.
 */
struct cp_top {
	int32_t id;		/* token id */
	float logprob;		/* natural log */
};

#define CP_TOP_PER_CQE		(CP_CQE_TEXT / (uint32_t)sizeof(struct cp_top))
#define CP_TOP_CQES_MAX		\
	((CP_TOPN_MAX + CP_TOP_PER_CQE - 1) / CP_TOP_PER_CQE)

/*
 * One completion event.  step numbers the engine's steps from 1 (the step
 * counter of the statistics, low 32 bits: compare with unsigned
 * subtraction); a TOKEN carries the step that sampled it, a DONE or ERROR
 * the step that ended the request, or 0 when no step did (a request
 * refused before it ran).  Continuations (CP_EV_TEXT) carry 0.
 *
 * PROGRESS (only for a request submitted with CP_PF_PROGRESS) follows a
 * step that computed some of the request's prompt: step is that step,
 * n_prompt the prompt tokens computed so far, n_total the prompt's length
 * in tokens (0 < n_prompt <= n_total), no text, token -1, no flags.  It
 * is not terminal and comes only before the request's first TOKEN (the
 * step that completes the prompt reports n_total, then its TOKEN); after a
 * preemption by recompute n_prompt starts again from the recomputed
 * positions.  The daemon drops a PROGRESS that finds the CQ full rather
 * than wait, so a client may see any subset of them, in step order.
 */
struct cp_cqe {
	uint32_t req_id;
	uint8_t type;		/* CP_EV_* */
	uint8_t flags;		/* CP_CQF_* */
	uint8_t text_len;	/* <= CP_CQE_TEXT */
	uint8_t finish;		/* CP_FINISH_* (DONE); else 0 */
	int32_t token;		/* TOKEN: token id; else -1 */
	float logprob;		/* TOKEN with CP_PF_LOGPROB: natural log; else 0 */
	union {
		int32_t error;	/* ERROR: negative errno or CP_E*; else 0 */
		uint32_t n_total;	/* PROGRESS: the prompt's tokens */
		uint32_t n_cached;	/* DONE: of n_prompt, the tokens
					   the prefix cache gave (a client
					   that does not know it reads 0
					   as its error) */
		uint32_t n_top;		/* TOKEN: entries of its top-n
					   list in CP_EV_TOP continuations
					   (TOP-N above) */
	};
	uint32_t n_prompt;	/* DONE/ERROR: prompt tokens processed;
				   PROGRESS: prompt tokens computed so far */
	uint32_t n_gen;		/* DONE/ERROR: tokens generated */
	uint32_t step;		/* engine step of the event, see above */
	uint8_t text[CP_CQE_TEXT];
};

/*
 * ---- socket messages ------------------------------------------------
 * One message per SOCK_SEQPACKET record; its length must be exactly the
 * size of its struct.
 */
#define CP_MSG_HELLO		1u	/* client -> daemon, first message */
#define CP_MSG_WELCOME		2u	/* daemon -> client, answer to HELLO */
#define CP_MSG_STATS_REQ	3u	/* client -> daemon */
#define CP_MSG_STATS		4u	/* daemon -> client */
#define CP_MSG_TOKENIZE		5u	/* client -> daemon (CP_FEAT_TOKENIZE) */
#define CP_MSG_TOKENS		6u	/* daemon -> client, answer to TOKENIZE */
#define CP_MSG_DETOKENIZE	7u	/* client -> daemon (CP_FEAT_DETOKENIZE) */
#define CP_MSG_PIECES		8u	/* daemon -> client, answer to DETOKENIZE */

struct cp_msg_hdr {
	uint32_t magic;		/* CP_PROTO_MAGIC */
	uint16_t type;		/* CP_MSG_* */
	uint16_t version;	/* CP_PROTO_VERSION */
};

/* A header of this protocol for a message of type t (CP_MSG_*). */
static inline void
cp_msg_hdr_set(struct cp_msg_hdr *h, uint16_t t)
{
	h->magic = CP_PROTO_MAGIC;
	h->type = t;
	h->version = CP_PROTO_VERSION;
}

struct cp_hello {
	struct cp_msg_hdr hdr;
	uint32_t sq_entries;	/* wanted; 0 = default; clamped by the daemon */
	uint32_t cq_entries;
	uint32_t arena_bytes;
	uint32_t flags;		/* zero */
	uint32_t reserved[4];	/* zero */
};

/* Model description, NUL-terminated strings. */
struct cp_wire_model {
	char name[64];		/* general.name or the file's base name */
	char arch[32];		/* general.architecture */
	char backend[16];	/* "cpu", "cuda" */
	uint32_t n_ctx;		/* context length the daemon serves */
	uint32_t n_vocab;
	uint32_t n_embd;
	uint32_t n_layer;
	uint32_t n_head;
	uint32_t n_head_kv;
	int32_t bos;		/* -1 when none */
	int32_t eos;		/* -1 when none */
	uint64_t n_params;
	char chat_template[32];	/* detected format's name (chat.h), "" = unknown */
	uint32_t reserved[4];
};

/* Welcome: the descriptors in SCM_RIGHTS come in this order. */
#define CP_FD_MEMFD		0
#define CP_FD_CQ_WAKE		1	/* read end: readable after new events */
#define CP_FD_SQ_WAKE		2	/* write end, CP_WAKE_FD only */
#define CP_FD_MAX		3

/* Welcome features: what a client may ask for (older daemons send 0). */
#define CP_FEAT_PROGRESS	0x1u	/* CP_PF_PROGRESS, CP_EV_PROGRESS */
#define CP_FEAT_STRICT		0x2u	/* CP_PF_STRICT */
#define CP_FEAT_CHAT		0x4u	/* CP_SQF_CHAT */
#define CP_FEAT_TOKENIZE	0x8u	/* CP_MSG_TOKENIZE */
#define CP_FEAT_TOPN		0x10u	/* CP_PF_TOPN, CP_EV_TOP */
#define CP_FEAT_DETOKENIZE	0x20u	/* CP_MSG_DETOKENIZE */
#define CP_FEAT_GRAMMAR		0x40u	/* CP_PF_GRAMMAR, cp_sqe.grammar_bytes */

struct cp_welcome {
	struct cp_msg_hdr hdr;
	int32_t status;		/* 0, or a negative error and no descriptors */
	uint32_t wake_mode;	/* CP_WAKE_* */
	uint32_t n_fds;		/* 2 (CP_WAKE_FUTEX) or 3 (CP_WAKE_FD) */
	uint32_t seg_bytes;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint32_t arena_bytes;
	uint32_t max_prompt_bytes;	/* longest prompt, all fragments */
	uint32_t max_reqs;		/* requests in flight per client */
	uint32_t client_id;		/* daemon's session number, for logs */
	uint32_t features;		/* CP_FEAT_* the daemon offers */
	uint32_t reserved[3];
	struct cp_wire_model model;
};

struct cp_stats_req {
	struct cp_msg_hdr hdr;
	uint32_t reserved[2];	/* zero */
};

/*
 * TOKENIZE: the daemon tokenizes text_len bytes of text (following the
 * struct in the same record) exactly as a prompt is tokenized, where the
 * flags ask for the prompt's BOS/EOS and special-token parsing, and
 * answers one TOKENS record.  Rules:
 *  1. A record is sizeof(struct cp_tokenize_req) + text_len bytes, and at
 *     most sizeof(struct cp_tokenize_req) + CP_TOKENIZE_TEXT_MAX; a longer
 *     record is a violation (closes the session, like any oversized
 *     record).  Every other fault of a TOKENIZE is answered, the session
 *     stays: a record shorter than the struct or not matching text_len,
 *     flags outside CP_TOKF_MASK, max_ids past CP_TOKENIZE_IDS_MAX or
 *     reserved not zero give status -EINVAL; text_len past
 *     CP_TOKENIZE_TEXT_MAX gives -E2BIG.
 *  2. The text needing more than CP_TOKENIZE_IDS_MAX ids gives -E2BIG.
 *  3. Otherwise status 0, n_ids the number of ids the text needs, and the
 *     first n_sent = min(n_ids, max_ids) of them follow the struct: the
 *     record is sizeof(struct cp_tokens_msg) + 4 * n_sent bytes.  With an
 *     error, n_ids and n_sent are 0.
 *  4. Requests are answered in order, one reply each.
 */
#define CP_TOKENIZE_TEXT_MAX	65536u	/* bytes of text per request */
#define CP_TOKENIZE_IDS_MAX	16384u	/* ids per reply */

#define CP_TOKF_BOS		0x1u	/* add BOS (and EOS) as a prompt does */
#define CP_TOKF_PARSE_SPECIAL	0x2u	/* special-token text becomes the token */
#define CP_TOKF_MASK		0x3u

struct cp_tokenize_req {
	struct cp_msg_hdr hdr;
	uint32_t flags;		/* CP_TOKF_* */
	uint32_t text_len;	/* bytes of text after the struct */
	uint32_t max_ids;	/* ids wanted back, <= CP_TOKENIZE_IDS_MAX */
	uint32_t reserved;	/* zero */
};

struct cp_tokens_msg {
	struct cp_msg_hdr hdr;
	int32_t status;		/* 0 or a negative errno */
	uint32_t n_ids;		/* ids the text needs */
	uint32_t n_sent;	/* little-endian int32 ids after the struct */
	uint32_t reserved;	/* zero */
};

/*
 * DETOKENIZE: the daemon answers, for each of n_ids token ids (little-
 * endian int32 after the struct in the same record), the bytes that token
 * alone renders to (its piece: SPM's U+2581 as a space, a byte token
 * <0xNN> as its byte, BPE's byte stand-ins as the bytes), in one PIECES
 * record.  A piece may end or start inside a UTF-8 character: pieces are
 * bytes, not text.  Control and unknown tokens render nothing, as in
 * generated text, unless CP_DETOKF_SPECIAL asks for their text.  Rules:
 *  1. A record is sizeof(struct cp_detokenize_req) + 4 * n_ids bytes; one
 *     longer than the longest TOKENIZE record is a violation (closes the
 *     session).  Every other fault is answered, the session stays: a
 *     record shorter than the struct gives status -EINVAL; then n_ids
 *     past CP_DETOKENIZE_IDS_MAX gives -E2BIG; then a record not matching
 *     n_ids, flags outside CP_DETOKF_MASK, max_bytes past
 *     CP_DETOKENIZE_BYTES_MAX or reserved not zero give -EINVAL; then an
 *     id outside [0, n_vocab) gives -ERANGE.
 *  2. The pieces needing more than CP_DETOKENIZE_BYTES_MAX bytes in all
 *     give -E2BIG.
 *  3. Otherwise status 0, n_ids as asked, n_bytes the sum of the pieces'
 *     lengths, and after the struct n_ids little-endian uint32 lengths,
 *     one per id in order, then n_sent bytes: the pieces concatenated when
 *     n_bytes <= max_bytes (n_sent = n_bytes), none otherwise (n_sent =
 *     0: the lengths say how much room the client needs).  The record is
 *     sizeof(struct cp_pieces_msg) + 4 * n_ids + n_sent bytes.  With an
 *     error, n_ids, n_bytes and n_sent are 0 and nothing follows.
 *  4. Requests are answered in order, one reply each, in the same order
 *     as TOKENIZE requests around them.
 * A client checks all of it (the lengths sum to n_bytes, n_sent is 0 or
 * n_bytes, the record's size) and treats a reply that breaks it as a
 * broken daemon.  The bounds keep the longest reply (about 80 KiB) well
 * inside a Unix socket's default send buffer, which caps a record.
 */
#define CP_DETOKENIZE_IDS_MAX	4096u	/* ids per request */
#define CP_DETOKENIZE_BYTES_MAX	65536u	/* piece bytes per reply */

#define CP_DETOKF_SPECIAL	0x1u	/* control/unknown tokens: their text */
#define CP_DETOKF_MASK		0x1u

struct cp_detokenize_req {
	struct cp_msg_hdr hdr;
	uint32_t flags;		/* CP_DETOKF_* */
	uint32_t n_ids;		/* int32 ids after the struct */
	uint32_t max_bytes;	/* piece bytes wanted back, <=
				   CP_DETOKENIZE_BYTES_MAX */
	uint32_t reserved;	/* zero */
};

struct cp_pieces_msg {
	struct cp_msg_hdr hdr;
	int32_t status;		/* 0 or a negative errno */
	uint32_t n_ids;		/* uint32 lengths after the struct */
	uint32_t n_bytes;	/* their sum */
	uint32_t n_sent;	/* piece bytes after the lengths: n_bytes or 0 */
};

/*
 * Statistics, layout version CP_STATS_VERSION.  Counters run from the
 * daemon's start; "now" values are a snapshot.  Invariants a reader may
 * check (libcpclient does):
 *  - clients + sum(disconnects[]) == clients_total: every accepted client
 *    is connected or ended for exactly one CP_END_* reason;
 *  - kv_blocks_used + kv_blocks_free == kv_blocks_total, and
 *    kv_blocks_cached <= kv_blocks_free (idle cached blocks are free to
 *    take);
 *  - requests_active <= requests_total;
 *  - pace_missed <= pace_steps;
 *  - each histogram: le[] strictly increasing up to le[CP_STATS_BUCKETS -
 *    1] == UINT64_MAX, sum(n[]) == count, max in the last bucket holding
 *    samples (0 with no samples).
 */
#define CP_STATS_VERSION	4u	/* 3: the prefix cache's counters;
					   4: the latency target's */
#define CP_STATS_BUCKETS	20u	/* histogram buckets */

/* Why a session ended (disconnects[]). */
#define CP_END_CLOSED		0u	/* the client closed its socket */
#define CP_END_EXITED		1u	/* the client process exited (pidfd) */
#define CP_END_PROTOCOL		2u	/* a protocol violation (logged) */
#define CP_END_TIMEOUT		3u	/* no HELLO in time */
#define CP_END_OVERFLOW		4u	/* events left unread past the limit */
#define CP_END_ERROR		5u	/* a failure inside the daemon */
#define CP_END_SHUTDOWN		6u	/* the daemon stopped */
#define CP_END_REASONS		8u	/* entries of disconnects[] */

/* Stats flags. */
#define CP_STATS_DRAINING	0x1u	/* stopping: no new clients, requests */

/* A histogram: bucket i counts samples v with le[i - 1] < v <= le[i]. */
struct cp_wire_hist {
	uint64_t count;			/* samples */
	uint64_t sum;			/* of the samples (wraps) */
	uint64_t max;			/* largest sample, 0 when none */
	uint64_t reserved;		/* zero */
	uint64_t le[CP_STATS_BUCKETS];	/* upper bounds, inclusive */
	uint64_t n[CP_STATS_BUCKETS];
};

struct cp_wire_stats {
	uint64_t uptime_ms;
	uint64_t clients;		/* connected now */
	uint64_t clients_total;		/* accepted since start */
	uint64_t clients_rejected;	/* refused at the handshake */
	uint64_t protocol_errors;	/* sessions closed for a violation */
	uint64_t requests_total;	/* handed to the engine */
	uint64_t requests_active;	/* handed over, not yet ended */
	uint64_t tokens_prompt;		/* prompt positions computed */
	uint64_t tokens_generated;
	uint64_t steps;			/* engine steps */
	uint64_t cq_stalls;		/* requests cancelled for a full CQ */
	uint64_t kv_blocks_used;
	uint64_t kv_blocks_total;
	uint64_t kv_blocks_free;
	uint64_t requests_waiting;	/* engine: queued, holding no KV */
	uint64_t requests_running;	/* engine: holding KV */
	uint64_t requests_refused;	/* answered ERROR by the io loop */
	uint64_t preemptions;		/* sequences preempted by recompute */
	uint64_t flags;			/* CP_STATS_* */
	uint64_t disconnects[CP_END_REASONS];	/* ended sessions by reason */
	uint64_t requests_paused;	/* engine: held for a full CQ */
	uint64_t tokens_prompt_cached;	/* prompt positions the prefix
					   cache gave */
	uint64_t kv_blocks_cached;	/* idle blocks the cache keeps */
	uint64_t prefix_evictions;	/* blocks taken back from it */
	uint64_t pace_target_us;	/* max_inter_token_ms now; 0: none */
	uint64_t pace_est_us;		/* the step-time model's estimate of
					   the last step with decodes */
	uint64_t pace_meas_us;		/* and that step's measured time */
	uint64_t pace_err_us;		/* the model's mean |error| */
	uint64_t pace_steps;		/* steps with decodes measured */
	uint64_t pace_missed;		/* of those, over the target */
	uint64_t pace_missed_us;	/* their time over it, in all */
	uint64_t reserved;		/* zero */
	struct cp_wire_hist step_prefill;	/* prompt tokens per step */
	struct cp_wire_hist step_decode;	/* decode tokens per step */
	struct cp_wire_hist step_seqs;		/* sequences per step */
	struct cp_wire_hist ttft_us;	/* SUBMIT received to first TOKEN */
	struct cp_wire_hist itl_us;	/* between TOKENs of one request */
};

struct cp_stats_msg {
	struct cp_msg_hdr hdr;
	uint32_t stats_version;		/* CP_STATS_VERSION */
	uint32_t stats_bytes;		/* sizeof(struct cp_wire_stats) */
	struct cp_wire_stats stats;
};

/*
 * ---- layout checks ----------------------------------------------------
 */
_Static_assert(sizeof(float) == 4, "float is 32 bits");
_Static_assert(sizeof(struct cp_seg_hdr) == 64, "cp_seg_hdr size");
_Static_assert(offsetof(struct cp_seg_hdr, wake_mode) == 8, "hdr.wake_mode");
_Static_assert(offsetof(struct cp_seg_hdr, ctl_off) == 16, "hdr.ctl_off");
_Static_assert(offsetof(struct cp_seg_hdr, cq_off) == 28, "hdr.cq_off");
_Static_assert(offsetof(struct cp_seg_hdr, sq_entries) == 32, "hdr.sq_entries");
_Static_assert(offsetof(struct cp_seg_hdr, arena_bytes) == 40,
    "hdr.arena_bytes");
_Static_assert(offsetof(struct cp_seg_hdr, sqe_bytes) == 44, "hdr.sqe_bytes");
_Static_assert(offsetof(struct cp_seg_hdr, reserved) == 48, "hdr.reserved");

_Static_assert(sizeof(struct cp_ctl_word) == CP_LINE, "cp_ctl_word size");
_Static_assert(sizeof(struct cp_seg_ctl) == 6 * CP_LINE, "cp_seg_ctl size");
_Static_assert(offsetof(struct cp_seg_ctl, sq_tail) == 0 * CP_LINE,
    "ctl.sq_tail");
_Static_assert(offsetof(struct cp_seg_ctl, sq_head) == 1 * CP_LINE,
    "ctl.sq_head");
_Static_assert(offsetof(struct cp_seg_ctl, cq_tail) == 2 * CP_LINE,
    "ctl.cq_tail");
_Static_assert(offsetof(struct cp_seg_ctl, cq_head) == 3 * CP_LINE,
    "ctl.cq_head");
_Static_assert(offsetof(struct cp_seg_ctl, client_waiting) == 4 * CP_LINE,
    "ctl.client_waiting");
_Static_assert(offsetof(struct cp_seg_ctl, daemon_idle) == 5 * CP_LINE,
    "ctl.daemon_idle");

_Static_assert(sizeof(struct cp_wire_params) == 40, "cp_wire_params size");
_Static_assert(offsetof(struct cp_wire_params, top_k) == 20, "params.top_k");
_Static_assert(offsetof(struct cp_wire_params, seed) == 32, "params.seed");
_Static_assert(sizeof(struct cp_sqe) == 64, "cp_sqe size");
_Static_assert(offsetof(struct cp_sqe, req_id) == 4, "sqe.req_id");
_Static_assert(offsetof(struct cp_sqe, arena_off) == 8, "sqe.arena_off");
_Static_assert(offsetof(struct cp_sqe, arena_len) == 12, "sqe.arena_len");
_Static_assert(offsetof(struct cp_sqe, params) == 16, "sqe.params");
_Static_assert(offsetof(struct cp_sqe, grammar_bytes) == 56,
    "sqe.grammar_bytes");
_Static_assert(offsetof(struct cp_sqe, reserved) == 60, "sqe.reserved");

_Static_assert(sizeof(struct cp_cqe) == 64, "cp_cqe size");
_Static_assert(offsetof(struct cp_cqe, type) == 4, "cqe.type");
_Static_assert(offsetof(struct cp_cqe, text_len) == 6, "cqe.text_len");
_Static_assert(offsetof(struct cp_cqe, token) == 8, "cqe.token");
_Static_assert(offsetof(struct cp_cqe, logprob) == 12, "cqe.logprob");
_Static_assert(offsetof(struct cp_cqe, error) == 16, "cqe.error");
_Static_assert(offsetof(struct cp_cqe, n_total) == 16, "cqe.n_total");
_Static_assert(offsetof(struct cp_cqe, n_prompt) == 20, "cqe.n_prompt");
_Static_assert(offsetof(struct cp_cqe, n_gen) == 24, "cqe.n_gen");
_Static_assert(offsetof(struct cp_cqe, step) == 28, "cqe.step");
_Static_assert(offsetof(struct cp_cqe, text) == 32, "cqe.text");
_Static_assert(CP_CQE_TEXT <= UINT8_MAX, "text_len fits a byte");
_Static_assert(offsetof(struct cp_cqe, n_top) == 16, "cqe.n_top");
_Static_assert(sizeof(struct cp_top) == 8, "cp_top size");
_Static_assert(CP_CQE_TEXT % sizeof(struct cp_top) == 0, "whole entries");
_Static_assert(CP_TOPN_MAX <= (CP_PF_TOPN_BITS >> CP_PF_TOPN_SHIFT),
    "n fits its bits");
_Static_assert(CP_CQ_MIN / 2 > CP_TOP_CQES_MAX, "a group keeps text room");

_Static_assert(sizeof(struct cp_chat_hdr) == 8, "cp_chat_hdr size");
_Static_assert(sizeof(struct cp_chat_msg) == 8, "cp_chat_msg size");
_Static_assert(sizeof(struct cp_msg_hdr) == 8, "cp_msg_hdr size");
_Static_assert(sizeof(struct cp_hello) == 40, "cp_hello size");
_Static_assert(offsetof(struct cp_hello, sq_entries) == 8, "hello.sq_entries");
_Static_assert(offsetof(struct cp_hello, flags) == 20, "hello.flags");
_Static_assert(sizeof(struct cp_wire_model) == 200, "cp_wire_model size");
_Static_assert(offsetof(struct cp_wire_model, n_ctx) == 112, "model.n_ctx");
_Static_assert(offsetof(struct cp_wire_model, n_params) == 144,
    "model.n_params");
_Static_assert(offsetof(struct cp_wire_model, chat_template) == 152,
    "model.chat_template");
_Static_assert(sizeof(struct cp_welcome) == 264, "cp_welcome size");
_Static_assert(offsetof(struct cp_welcome, status) == 8, "welcome.status");
_Static_assert(offsetof(struct cp_welcome, seg_bytes) == 20,
    "welcome.seg_bytes");
_Static_assert(offsetof(struct cp_welcome, max_reqs) == 40, "welcome.max_reqs");
_Static_assert(offsetof(struct cp_welcome, features) == 48,
    "welcome.features");
_Static_assert(offsetof(struct cp_welcome, model) == 64, "welcome.model");
_Static_assert(sizeof(struct cp_stats_req) == 16, "cp_stats_req size");
_Static_assert(sizeof(struct cp_tokenize_req) == 24, "cp_tokenize_req size");
_Static_assert(offsetof(struct cp_tokenize_req, text_len) == 12,
    "tokenize_req.text_len");
_Static_assert(sizeof(struct cp_tokens_msg) == 24, "cp_tokens_msg size");
_Static_assert(offsetof(struct cp_tokens_msg, n_sent) == 16,
    "tokens_msg.n_sent");
_Static_assert(sizeof(struct cp_detokenize_req) == 24,
    "cp_detokenize_req size");
_Static_assert(offsetof(struct cp_detokenize_req, n_ids) == 12,
    "detokenize_req.n_ids");
_Static_assert(sizeof(struct cp_pieces_msg) == 24, "cp_pieces_msg size");
_Static_assert(offsetof(struct cp_pieces_msg, n_sent) == 20,
    "pieces_msg.n_sent");
_Static_assert(sizeof(struct cp_wire_hist) == 32 + 16 * CP_STATS_BUCKETS,
    "cp_wire_hist size");
_Static_assert(offsetof(struct cp_wire_stats, kv_blocks_free) == 104,
    "stats.kv_blocks_free");
_Static_assert(offsetof(struct cp_wire_stats, disconnects) == 152,
    "stats.disconnects");
_Static_assert(offsetof(struct cp_wire_stats, step_prefill) == 312,
    "stats.step_prefill");
_Static_assert(sizeof(struct cp_wire_stats) == 312 + 5 * 352,
    "cp_wire_stats size");
_Static_assert(sizeof(struct cp_stats_msg) == 16 + 2072, "cp_stats_msg size");
_Static_assert(offsetof(struct cp_stats_msg, stats_bytes) == 12,
    "stats_msg.stats_bytes");
_Static_assert(offsetof(struct cp_stats_msg, stats) == 16, "stats_msg.stats");

/*
 * ---- layout computation -------------------------------------------------
 * The daemon builds a segment from these offsets; the client recomputes
 * them from the sizes and rejects a header that disagrees.
 */
struct cp_seg_layout {
	uint32_t ctl_off;
	uint32_t sq_off;
	uint32_t arena_off;
	uint32_t cq_off;
	uint32_t seg_bytes;
};

static inline int
cp_is_pow2(uint32_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

static inline uint32_t
cp_page_round(uint32_t v)
{
	return (v + CP_PAGE - 1) & ~(CP_PAGE - 1);
}

/* Fills l for the given sizes; returns 0, or -EINVAL when a size is out of range. */
static inline int
cp_seg_layout(uint32_t sq_entries, uint32_t cq_entries, uint32_t arena_bytes,
    struct cp_seg_layout *l)
{
	if (!cp_is_pow2(sq_entries) || sq_entries < CP_SQ_MIN ||
	    sq_entries > CP_SQ_MAX)
		return -EINVAL;
	if (!cp_is_pow2(cq_entries) || cq_entries < CP_CQ_MIN ||
	    cq_entries > CP_CQ_MAX)
		return -EINVAL;
	if (!cp_is_pow2(arena_bytes) || arena_bytes < CP_ARENA_MIN ||
	    arena_bytes > CP_ARENA_MAX)
		return -EINVAL;
	/* The maxima keep every sum below 2^32 (about 69 MiB in all). */
	l->ctl_off = CP_PAGE;
	l->sq_off = l->ctl_off +
	    cp_page_round((uint32_t)sizeof(struct cp_seg_ctl));
	l->arena_off = l->sq_off +
	    cp_page_round(sq_entries * (uint32_t)sizeof(struct cp_sqe));
	l->cq_off = l->arena_off + arena_bytes;
	l->seg_bytes = l->cq_off +
	    cp_page_round(cq_entries * (uint32_t)sizeof(struct cp_cqe));
	return 0;
}

/*
 * ---- UTF-8 ----------------------------------------------------------------
 * What "valid UTF-8" means wherever the protocol asks for it (a chat
 * block's contents): RFC 3629, so no overlong form, no surrogate, nothing
 * past U+10FFFF.  Both sides check with this one definition.
 */

/* Length of the valid UTF-8 sequence at s[0..n) (n > 0), 0 if invalid. */
static inline size_t
cp_utf8_seq(const uint8_t *s, size_t n)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xbf;
	size_t len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	/* The second byte's range rules out the overlong forms, the
	 * surrogates (ED A0..BF) and what lies past U+10FFFF. */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* Offset of the first byte of s[0..n) that starts no valid sequence, or n. */
static inline size_t
cp_utf8_bad(const uint8_t *s, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		if ((k = cp_utf8_seq(s + i, n - i)) == 0)
			return i;
		i += k;
	}
	return n;
}

#endif /* CP_PROTO_H */
