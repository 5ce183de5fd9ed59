/*
 * cpclient.h - client library of cpd, the local LLM inference daemon.
 *
 * A program connects once, submits prompts, and reads back a stream of
 * events (tokens with their text, then one DONE or ERROR per request).
 * Requests and events travel through rings in memory shared with the
 * daemon; the socket is used only to connect and for statistics.
 *
 *	struct cp_client *c;
 *	struct cp_event ev;
 *	int id, r;
 *
 *	if ((r = cp_connect(NULL, &c)) < 0)
 *		errx(1, "cpd: %s", cp_strerror(r));
 *	id = cp_submit(c, "Once upon a time", 16, NULL);
 *	while ((r = cp_next_event(c, &ev, 30000)) == 0) {
 *		if (ev.type != CP_EVENT_ERROR)	(DONE may carry the last bytes)
 *			fwrite(ev.text, 1, ev.text_len, stdout);
 *		if ((ev.type == CP_EVENT_DONE || ev.type == CP_EVENT_ERROR) &&
 *		    ev.req_id == id)
 *			break;
 *	}
 *	cp_close(c);
 *
 * PROGRESS.  A request submitted with cp_params.progress set may get
 * CP_EVENT_PROGRESS events before its first token: after each engine step
 * that computed some of its prompt, n_prompt of n_total prompt tokens
 * done (the last one says n_total).  They carry no text, end nothing, may
 * be skipped (the daemon drops them rather than wait for ring room), and
 * after the daemon set the request back to make room (recompute) the count
 * may start again lower.  A daemon that does not offer them sends none.
 *
 * LOGPROBS.  A request submitted with cp_params.logprobs = n (1..20) gets
 * with each sampled token its log-probability (cp_event.logprob) and the
 * n most likely tokens with theirs (n_top, top_ids, top_logprobs, as
 * llama-server's n_probs and OpenAI's top_logprobs).  All of them are
 * natural logs of the distribution the model produced at that position:
 * the log-softmax over the whole vocabulary of the logits after the
 * repetition penalty, before top-k, top-p, min-p and temperature (so a
 * sampled token may lie outside the list, and greedy picks its first
 * entry).  Without logprobs, nothing is computed and n_top is 0.  A
 * daemon that does not offer the lists sends none (n_top 0) but still
 * fills logprob.  Programs built against a header whose cp_event ends at
 * n_total never see the lists.  cp_detokenize() gives the bytes each
 * listed id stands for, to show the alternatives as text.
 *
 * GRAMMARS.  A request submitted with cp_params.grammar_kind set
 * generates only text its grammar allows: CP_GRAMMAR_GBNF takes
 * grammar[0..grammar_len) in llama.cpp's GBNF dialect (root is the start
 * rule), CP_GRAMMAR_JSON_SCHEMA a JSON schema (objects with properties,
 * required and additionalProperties, arrays with items and
 * minItems/maxItems, strings with enum/const, numbers and integers with
 * bounds, booleans, null, anyOf/oneOf, $ref to local $defs), and
 * CP_GRAMMAR_JSON (no text) any JSON value.  The daemon compiles it and
 * masks, at every step, each token whose bytes the grammar cannot accept;
 * the request ends (DONE, CP_DONE_STOP) as soon as the grammar allows
 * nothing more, or where it accepts and the model ends; max_tokens or a
 * stop string may still cut it short.  A grammar that does not compile
 * ends the request with an ERROR (-EINVAL, -E2BIG past a limit) whose
 * text names the rule or the schema path.  A daemon without grammars
 * makes cp_submit() fail with -EOPNOTSUPP.
 *
 * ERRORS.  Functions return 0 (or a request id, or a descriptor) on
 * success and a negative number on failure: a negative errno value, or one
 * of the CP_E* codes below.  cp_strerror() names either kind.  After
 * CP_EDEAD or CP_EPROTO the client can only be closed.
 *
 * THREADS.  Different clients are independent.  One client may be shared
 * by threads: cp_submit() and cp_cancel() serialise on one lock,
 * cp_next_event() on another (events go to whichever thread asks; the
 * event's text stays valid until that client's next cp_next_event() or
 * cp_close()), cp_stats() on a third; cp_model_info() and cp_event_fd()
 * take no lock.  cp_close() must not run concurrently with any other call
 * on the same client.  No function installs signal handlers; writes that
 * could raise SIGPIPE are guarded.
 *
 * SIZES.  Every structure a caller fills (cp_connect_opts, cp_params) or
 * receives (cp_event, cp_model_info) starts with its size in bytes, so
 * that fields can be added at its end without a new soname: the init
 * functions set it for the structures a caller fills, the calls that
 * fill one set it to what they wrote.  The functions below that take one
 * are inline wrappers passing sizeof as this header sees it to an
 * exported *_v1 entry point, which reads and writes no byte past it; a
 * field the caller's header lacks reads as 0, and every field added later
 * means, when 0, what the library did before it existed.  Programs built
 * against the first header, without sizes, call the entry points of the
 * old names, which the library keeps (libcpclient(3), ABI).  cp_stats is
 * outside the rule for now.
 *
 * TRUST.  The library checks everything the daemon writes (message sizes,
 * the segment's layout and seals, ring indices, event fields) and fails
 * the connection with CP_EPROTO rather than read out of bounds.
 */
#ifndef CPCLIENT_H
#define CPCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CP_API __attribute__((visibility("default")))

/* Library errors (besides negative errno values). */
#define CP_EDEAD	(-10001)	/* the daemon closed the connection or died */
#define CP_EPROTO	(-10002)	/* the daemon broke the protocol */

/* Event types. */
#define CP_EVENT_TOKEN	1	/* text (and usually a token) of a request */
#define CP_EVENT_DONE	2	/* the request finished; finish says why */
#define CP_EVENT_ERROR	3	/* the request failed; error and text say why */
#define CP_EVENT_PROGRESS 4	/* prefill: n_prompt of n_total prompt tokens
				   computed (cp_params.progress) */

/* Why a request finished (CP_EVENT_DONE). */
#define CP_DONE_STOP		1	/* end of sequence, or a stop string */
#define CP_DONE_LENGTH		2	/* max_tokens generated */
#define CP_DONE_CANCELLED	3	/* cp_cancel() */
#define CP_DONE_CONTEXT		4	/* the context window is full (before
					   max_tokens) */
#define CP_DONE_STALLED		5	/* cancelled: events were not read in time */

/* Why the daemon ended a client's connection (cp_stats.disconnects[]). */
#define CP_DISC_CLOSED		0	/* the client closed it */
#define CP_DISC_EXITED		1	/* the client process exited */
#define CP_DISC_PROTOCOL	2	/* the client broke the protocol */
#define CP_DISC_TIMEOUT		3	/* no handshake in time */
#define CP_DISC_OVERFLOW	4	/* too many events left unread */
#define CP_DISC_ERROR		5	/* a failure inside the daemon */
#define CP_DISC_SHUTDOWN	6	/* the daemon stopped */
#define CP_DISC_REASONS		8	/* entries of disconnects[] */

#define CP_HIST_BUCKETS		20	/* buckets of a cp_histogram */
#define CP_TOP_LOGPROBS_MAX	20	/* longest top-n list (logprobs) */

/* Kinds of output constraint (cp_params.grammar_kind; see GRAMMARS). */
#define CP_GRAMMAR_NONE		0
#define CP_GRAMMAR_GBNF		1	/* GBNF text */
#define CP_GRAMMAR_JSON_SCHEMA	2	/* a JSON schema */
#define CP_GRAMMAR_JSON		3	/* any JSON value (no text) */
#define CP_GRAMMAR_MAX_BYTES	(256 * 1024)	/* longest grammar text */

struct cp_client;

struct cp_connect_opts {
	uint32_t size;			/* sizeof; cp_connect_opts_init() */
	const char *socket_path;	/* NULL: $CPD_SOCKET, else
					   $XDG_RUNTIME_DIR/cpd.sock, else
					   /run/cpd/cpd.sock */
	uint32_t sq_entries;		/* submission slots wanted; 0 = daemon's */
	uint32_t cq_entries;		/* event slots wanted; 0 = daemon's */
	uint32_t arena_bytes;		/* prompt buffer wanted; 0 = daemon's */
	int timeout_ms;			/* connecting, waiting for ring room */
};

/* Sampling and stopping; start from cp_params_init(). */
struct cp_params {
	uint32_t size;			/* sizeof; cp_params_init() */
	uint32_t max_tokens;		/* at most, capped by the room the
					   context leaves; 0: until the
					   context is full */
	float temperature;		/* [0, 100]; 0 = greedy */
	float top_p;			/* (0, 1]; 1 = off */
	float min_p;			/* [0, 1]; 0 = off */
	float repeat_penalty;		/* (0, 16]; 1 = off */
	int32_t top_k;			/* [0, 1048576]; 0 = off */
	uint32_t repeat_last_n;		/* tokens the penalty looks back */
	int use_seed;			/* nonzero: sample with seed */
	uint64_t seed;
	int logprobs;			/* [0, CP_TOP_LOGPROBS_MAX]; n > 0:
					   fill cp_event.logprob and the
					   top-n list (see LOGPROBS) */
	const char *const *stop;	/* up to 8 non-empty strings, 511 bytes */
	size_t n_stop;
	int progress;			/* nonzero: CP_EVENT_PROGRESS events
					   until the first token (where the
					   daemon offers them; else none) */
	int strict;			/* nonzero: a prompt plus max_tokens
					   past the context fails at once
					   (-E2BIG) instead of generating
					   until the context is full */
	int no_generation_prompt;	/* cp_submit_chat(): nonzero ends
					   the prompt with the last message,
					   without opening the assistant's
					   turn (to continue it) */
	int grammar_kind;		/* CP_GRAMMAR_*: constrain the output
					   (see GRAMMARS); 0 = none */
	const char *grammar;		/* GBNF or JSON schema text (not for
					   CP_GRAMMAR_JSON), read during the
					   call only */
	size_t grammar_len;		/* its bytes, 1..CP_GRAMMAR_MAX_BYTES */
};

/* Roles of chat messages (cp_message.role). */
#define CP_CHAT_SYSTEM		0
#define CP_CHAT_USER		1
#define CP_CHAT_ASSISTANT	2
#define CP_CHAT_TOOL		3	/* a tool's result */

/*
 * One message of a conversation for cp_submit_chat(); content is len bytes
 * of UTF-8 (NULL when len is 0), read during the call only.  Arrays of it
 * are passed with their element size (cpclient.h, SIZES).
 */
struct cp_message {
	int role;			/* CP_CHAT_* */
	const char *content;
	size_t len;
};

struct cp_event {
	uint32_t size;		/* bytes cp_next_event() filled */
	int type;		/* CP_EVENT_* */
	int req_id;		/* as returned by cp_submit() */
	int32_t token;		/* TOKEN: token id, -1 for text alone */
	float logprob;		/* TOKEN with logprobs: natural log; else 0 */
	const char *text;	/* bytes (NUL-terminated too), see THREADS */
	size_t text_len;
	int finish;		/* DONE: CP_DONE_* */
	int error;		/* ERROR: negative errno or CP_E*; -EUSERS:
				   the user's quota, -ESHUTDOWN: the daemon
				   is stopping */
	uint32_t n_prompt;	/* DONE/ERROR: prompt tokens; PROGRESS:
				   prompt tokens computed so far (> 0) */
	uint32_t n_gen;		/* DONE/ERROR: generated tokens */
	uint32_t step;		/* the daemon's engine step (counted from 1,
				   wraps at 2^32) that sampled the token,
				   computed the prompt tokens (PROGRESS) or
				   ended the request; 0 when none did */
	union {
		uint32_t n_total;	/* PROGRESS: the prompt's tokens
					   (>= n_prompt); else 0 */
		uint32_t n_cached;	/* DONE: of n_prompt, the tokens the
					   prefix cache gave (their KV was
					   not computed again) */
	};
	uint32_t n_top;		/* TOKEN with logprobs n: entries of its
				   top-n list (<= n; 0 for text alone or
				   a daemon without them); else 0 */
	const int32_t *top_ids;	/* n_top token ids, most likely first;
				   valid as text is (THREADS) */
	const float *top_logprobs;	/* their natural-log probabilities */
};

struct cp_model_info {
	uint32_t size;		/* bytes cp_model_info() filled */
	char name[64];
	char arch[32];
	char backend[16];	/* "cpu", "cuda" */
	uint32_t n_ctx;		/* context length served */
	uint32_t n_vocab;
	uint32_t n_embd;
	uint32_t n_layer;
	uint32_t n_head;
	uint32_t n_head_kv;
	int32_t bos;		/* -1 when none */
	int32_t eos;
	uint64_t n_params;
	char chat_template[32];	/* chat format's name ("chatml", "llama3"...), "" = unknown */
	uint32_t max_prompt_bytes;	/* longest prompt this client may send */
	uint32_t max_requests;		/* requests in flight at once */
};

/*
 * A histogram of samples: bucket i counts samples v with
 * le[i - 1] < v <= le[i] (le[-1] taken as 0, inclusive); le[] increases
 * and its last entry is UINT64_MAX.
 */
struct cp_histogram {
	uint64_t count;			/* samples */
	uint64_t sum;			/* of all samples */
	uint64_t max;			/* largest sample; 0 when none */
	uint64_t le[CP_HIST_BUCKETS];	/* upper bounds, inclusive */
	uint64_t n[CP_HIST_BUCKETS];	/* samples per bucket */
};

/* The daemon's counters since it started, and a snapshot of its load. */
struct cp_stats {
	uint64_t uptime_ms;
	uint64_t clients;		/* connected now */
	uint64_t clients_total;		/* accepted since start */
	uint64_t clients_rejected;	/* refused when connecting */
	uint64_t protocol_errors;	/* connections closed for a violation */
	uint64_t requests_total;	/* accepted for generation */
	uint64_t requests_active;	/* accepted and not ended */
	uint64_t tokens_prompt;		/* prompt positions computed */
	uint64_t tokens_generated;
	uint64_t steps;			/* engine steps (see cp_event.step) */
	uint64_t cq_stalls;		/* requests ended CP_DONE_STALLED */
	uint64_t kv_blocks_used;	/* KV cache blocks held by requests */
	uint64_t kv_blocks_total;
	uint64_t kv_blocks_free;	/* total - used */
	uint64_t requests_waiting;	/* queued in the engine, no KV yet */
	uint64_t requests_running;	/* holding KV (prefill or decode) */
	uint64_t requests_refused;	/* answered ERROR at once (limits,
					   shutdown) */
	uint64_t preemptions;		/* requests set back for KV space */
	uint64_t requests_paused;	/* held: their client's event ring is
					   full */
	int draining;			/* nonzero: the daemon is stopping */
	uint64_t disconnects[CP_DISC_REASONS];	/* ended connections, by
						   CP_DISC_* reason */
	struct cp_histogram step_prefill;	/* prompt tokens per step */
	struct cp_histogram step_decode;	/* generated tokens per step */
	struct cp_histogram step_seqs;		/* requests per step */
	struct cp_histogram ttft_us;	/* request received to first token */
	struct cp_histogram itl_us;	/* between two tokens of a request */
	uint64_t tokens_prompt_cached;	/* prompt positions the prefix cache
					   gave instead of computing them */
	uint64_t kv_blocks_cached;	/* idle blocks it keeps (part of
					   kv_blocks_free) */
	uint64_t prefix_evictions;	/* cached blocks taken for new KV */
	/* the latency target (cpd.yaml(5) max_inter_token_ms): */
	uint64_t pace_target_us;	/* the target now; 0: none */
	uint64_t pace_est_us;		/* the step-time model's estimate of
					   the last step with decoding
					   streams */
	uint64_t pace_meas_us;		/* that step's measured time */
	uint64_t pace_err_us;		/* the model's mean |error|, recent
					   steps */
	uint64_t pace_steps;		/* steps with decoding streams */
	uint64_t pace_missed;		/* of those, over the target */
	uint64_t pace_missed_us;	/* by this much in all */
};

/* cp_connect_opts_init() for a structure of size bytes (see SIZES). */
CP_API void cp_connect_opts_init_v1(struct cp_connect_opts *o, size_t size);

/* cp_connect() reading o->size bytes of o. */
CP_API int cp_connect_v1(const struct cp_connect_opts *o,
    struct cp_client **out);

/* cp_params_init() for a structure of size bytes. */
CP_API void cp_params_init_v1(struct cp_params *p, size_t size);

/* cp_submit() reading p->size bytes of p. */
CP_API int cp_submit_v1(struct cp_client *c, const char *prompt, size_t len,
    const struct cp_params *p);

/* cp_submit_tokens() reading p->size bytes of p. */
CP_API int cp_submit_tokens_v1(struct cp_client *c, const int32_t *ids,
    size_t n, const struct cp_params *p);

/* cp_submit_chat() for messages msg_size bytes apart. */
CP_API int cp_submit_chat_v1(struct cp_client *c, const struct cp_message *msgs,
    size_t n, size_t msg_size, const struct cp_params *p);

/* cp_next_event() filling at most size bytes of ev. */
CP_API int cp_next_event_v1(struct cp_client *c, struct cp_event *ev,
    size_t size, int timeout_ms);

/* cp_model_info() filling at most size bytes of out. */
CP_API int cp_model_info_v1(struct cp_client *c, struct cp_model_info *out,
    size_t size);

/*
 * The socket cp_connect() dials for socket_path given (NULL or "": from the
 * environment), as a string in buf: 0, or -ENAMETOOLONG when it does not fit
 * size bytes or a socket address.
 */
CP_API int cp_socket_path(const char *given, char *buf, size_t size);

/* Disconnects (the daemon cancels what is still running) and frees c; NULL accepted. */
CP_API void cp_close(struct cp_client *c);

/*
 * Asks the daemon to stop request req_id; its DONE (CP_DONE_CANCELLED, or
 * another reason if it ended first) still arrives.  0, -EINVAL (never
 * submitted), -ETIMEDOUT, CP_EDEAD, CP_EPROTO.
 */
CP_API int cp_cancel(struct cp_client *c, int req_id);

#ifndef CPCLIENT_V0_ENTRY_POINTS	/* defined only where the library keeps
					   the old names' entry points */

/*
 * Fills o with defaults and its size: path from the environment, daemon's
 * sizes, 5 s timeout.
 */
static inline void
cp_connect_opts_init(struct cp_connect_opts *o)
{
	cp_connect_opts_init_v1(o, sizeof(*o));
}

/*
 * Connects to the daemon (o may be NULL for defaults).  Returns 0 and a new
 * client in *out (free with cp_close()), or: -ENOENT / -ECONNREFUSED (no
 * daemon), -EACCES (not on the daemon's allow list), -EUSERS (too many
 * connections for this user), -EAGAIN (daemon full), -ESHUTDOWN (the
 * daemon is draining), -ETIMEDOUT, -EINVAL (o->size too small), CP_EPROTO
 * (also a daemon of another protocol version), or another -errno.
 */
static inline int
cp_connect(const struct cp_connect_opts *o, struct cp_client **out)
{
	return cp_connect_v1(o, out);
}

/*
 * Fills p with defaults and its size: temperature 0.8, top_k 40,
 * top_p 0.95, min_p 0.05, no repetition penalty, the daemon's max_tokens,
 * no stops.
 */
static inline void
cp_params_init(struct cp_params *p)
{
	cp_params_init_v1(p, sizeof(*p));
}

/*
 * Submits a prompt of len bytes (copied; p NULL = defaults).  Returns the
 * request id (> 0), or -EINVAL (bad parameters, such as logprobs outside
 * 0..CP_TOP_LOGPROBS_MAX, p->size too small),
 * -E2BIG (prompt longer than max_prompt_bytes), -EOPNOTSUPP (strict, and
 * the daemon does not offer it), -EBUSY (max_requests in flight: read
 * events first), -ETIMEDOUT (no ring room in time), CP_EDEAD, CP_EPROTO.
 * May wait for ring room up to the connect timeout.
 */
static inline int
cp_submit(struct cp_client *c, const char *prompt, size_t len,
    const struct cp_params *p)
{
	return cp_submit_v1(c, prompt, len, p);
}

/* As cp_submit() for n token ids (the daemon checks them against the vocabulary). */
static inline int
cp_submit_tokens(struct cp_client *c, const int32_t *ids, size_t n,
    const struct cp_params *p)
{
	return cp_submit_tokens_v1(c, ids, n, p);
}

/*
 * Submits a conversation: msgs[0..n) (copied), which the daemon renders
 * with the served model's chat template (cp_model_info()'s chat_template)
 * and tokenizes, then opens the assistant's turn unless
 * p->no_generation_prompt.  Returns the request id, or as cp_submit(),
 * and -EINVAL also for no message, a role out of range, content NULL with
 * a length or not UTF-8, -EOPNOTSUPP for a daemon without chat.  A model
 * whose template the daemon does not know fails the request with an
 * ERROR event (-EOPNOTSUPP) naming it.
 */
static inline int
cp_submit_chat(struct cp_client *c, const struct cp_message *msgs, size_t n,
    const struct cp_params *p)
{
	return cp_submit_chat_v1(c, msgs, n, sizeof(*msgs), p);
}

/*
 * Next event into *ev, waiting up to timeout_ms (0: do not wait; -1: no
 * limit, though the daemon's death is still noticed).  Returns 0, -EAGAIN
 * (timeout 0 and nothing ready), -ETIMEDOUT, CP_EDEAD (the daemon is gone
 * and every event it wrote has been read), CP_EPROTO.
 */
static inline int
cp_next_event(struct cp_client *c, struct cp_event *ev, int timeout_ms)
{
	return cp_next_event_v1(c, ev, sizeof(*ev), timeout_ms);
}

/* Copies the served model's description and this client's limits; 0. */
static inline int
cp_model_info(struct cp_client *c, struct cp_model_info *out)
{
	return cp_model_info_v1(c, out, sizeof(*out));
}

#endif /* CPCLIENT_V0_ENTRY_POINTS */

/*
 * A descriptor that polls readable when events are ready or the daemon is
 * gone (for poll, epoll, GLib...); then call cp_next_event() with timeout
 * 0 until -EAGAIN.  Owned by c; valid until cp_close().
 */
CP_API int cp_event_fd(struct cp_client *c);

/*
 * Asks the daemon for its counters (checked for consistency); 0,
 * -ETIMEDOUT, -EPROTONOSUPPORT (the daemon's statistics have another
 * layout; the connection stays usable), CP_EDEAD, CP_EPROTO.
 */
CP_API int cp_stats(struct cp_client *c, struct cp_stats *out);

/* cp_tokenize() flags. */
#define CP_TOK_BOS		0x1u	/* add BOS (and EOS) as a prompt gets */
#define CP_TOK_PARSE_SPECIAL	0x2u	/* special-token text becomes the token */

/*
 * Tokenizes text[0..len) with the daemon's tokenizer, as it tokenizes a
 * prompt (a prompt gets both flags).  Writes at most cap ids (ids may be
 * NULL with cap 0 to count) and returns how many the text needs (above
 * cap: ids holds the first cap), or -EOPNOTSUPP (the daemon cannot),
 * -E2BIG (over 64 KiB of text or 16384 ids), -EINVAL, -ETIMEDOUT,
 * CP_EDEAD, CP_EPROTO.  The connection stays usable after an error but
 * the last two.
 */
CP_API int cp_tokenize(struct cp_client *c, const char *text, size_t len,
    int32_t *ids, size_t cap, uint32_t flags);

/* cp_detokenize() flags. */
#define CP_DETOK_SPECIAL	0x1u	/* control and unknown tokens give their
					   text (such as "</s>"), not nothing */

/*
 * Names tokens: the bytes each of ids[0..n) renders to alone, as the
 * daemon's tokenizer decodes one token (SPM's U+2581 as a space, a byte
 * token <0xNN> as its byte), concatenated into buf[0..size) (not
 * NUL-terminated), lens[i] the length of ids[i]'s piece so that the caller
 * can split them.  A piece may begin or end inside a UTF-8 character.
 * Control tokens give nothing, as in generated text, unless
 * CP_DETOK_SPECIAL.  Returns the total length, or -ENOSPC (size too small:
 * lens is filled all the same, its sum the size needed, buf untouched),
 * -ERANGE (an id outside the vocabulary), -E2BIG (n over 4096 or the
 * pieces over 64 KiB: ask in parts), -EINVAL, -EOPNOTSUPP (the daemon
 * cannot), -ETIMEDOUT, CP_EDEAD, CP_EPROTO (also a reply that breaks the
 * rules: lengths not adding up, out of bounds).  The connection stays
 * usable after an error but the last two.
 */
CP_API int cp_detokenize(struct cp_client *c, const int32_t *ids, size_t n,
    char *buf, size_t size, uint32_t *lens, uint32_t flags);

/* Static English message for err (negative errno or CP_E*); never NULL. */
CP_API const char *cp_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
