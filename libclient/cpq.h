/*
 * cpq.h - what the files of cpq share (cpq.c: arguments, output,
 * streaming, main; cpq_chat.c: conversations).  Not installed.
 */
#ifndef CPQ_H
#define CPQ_H

#include <signal.h>
#include <stddef.h>

#include "cp_proto.h"
#include "cpclient.h"
#include "cpq_json.h"

/* Exit statuses (cpq(1), EXIT STATUS). */
#define EXIT_DAEMON	1	/* the daemon refused or failed the request */
#define EXIT_USAGE	2	/* bad arguments */
#define EXIT_NO_DAEMON	3	/* nothing listens on the socket */
#define EXIT_INTR	130	/* interrupted (SIGINT) */

#define WAIT_SLICE_MS	100	/* longest wait before looking at the flags */
#define CANCEL_WAIT_MS	2000	/* after cancelling, wait this long for DONE */
#define PROGRESS_BYTES	1024	/* shorter prompts show no prefill line */
#define PROGRESS_MS	500	/* prefill line after this long, no token */
#define SIGINT_SAME_MS	200	/* a second SIGINT this soon: the same one */
#define RETRY_MIN_MS	50	/* --retry: first wait between connects */
#define RETRY_MAX_MS	1000	/* ... doubling up to this */
#define RETRY_MAX_S	86400	/* the longest --retry */

enum mode { MODE_TEXT, MODE_IDS, MODE_JSON };

struct opts {
	const char *socket;
	struct cp_params p;
	const char *stops[CP_STOP_MAX];
	size_t n_stop, stop_bytes;
	enum mode mode;
	int chat;
	const char *system;
	const char *history_path;	/* --history */
	struct cpq_history history;	/* its messages */
	int info, stats, prometheus;
	const char *tokenize;		/* --tokenize TEXT */
	int count;			/* --count */
	int detokenize;			/* --detokenize: args are ids */
	int progress;			/* --progress */
	int retry_s;			/* --retry SECONDS: wait for a daemon */
	int top_n;			/* --logprobs N; -1: not given */
	int no_newline;			/* --no-newline */
	const char *grammar_opt;	/* the grammar option given, or NULL */
	const char *grammar_path;	/* --grammar/--json-schema FILE */
	char *grammar_text;		/* its contents (read_grammar()) */
	char **args;			/* prompt words */
	int n_args;
};

/* Bytes collected (an answer's text); a NULL one collects nothing. */
struct cpq_text {
	char *p;
	size_t len, cap;
	int failed;		/* out of memory: p holds less */
};

extern volatile sig_atomic_t n_sigint;	/* SIGINTs since the submission */
extern volatile sig_atomic_t submitted;	/* a request may be in the daemon */
extern volatile sig_atomic_t at_prompt;	/* a conversation waits for a turn:
					   SIGINT only sets n_sigint */

/* Reads fd to its end, at most max bytes; 0, -EFBIG or -errno. */
int read_all(int fd, size_t max, char **out, size_t *len);

/*
 * Submits prompt[0..len), or the conversation msgs[0..n_msgs) when msgs is
 * not NULL (len: its size, for the prefill line), and streams its events to
 * stdout, the text also into answer unless NULL; the exit status.
 */
int generate(struct cp_client *c, const struct opts *o,
    const struct cp_message *msgs, size_t n_msgs, const char *prompt,
    size_t len, struct cpq_text *answer);

/* Appends s[0..n) to t (NULL: nothing). */
void cpq_text_add(struct cpq_text *t, const char *s, size_t n);

/* cpq_chat.c.  Reads and parses o->history_path; 0 or EXIT_USAGE (said). */
int read_history(struct opts *o);

/* 0, or EXIT_DAEMON saying why a model without a chat template cannot chat. */
int check_chat(const struct cp_model_info *mi);

/* --chat with a prompt: one turn after the system message and history. */
int chat_once(struct cp_client *c, const struct opts *o, const char *prompt,
    size_t len);

/*
 * --chat on a terminal without a prompt: a conversation, one turn a line,
 * until end of input; the exit status.
 */
int chat_loop(struct cp_client *c, const struct opts *o);

#endif
