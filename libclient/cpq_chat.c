/*
 * cpq_chat.c - cpq's conversations (cpq(1), --chat): the messages sent
 * with cp_submit_chat() (the --system text, the --history turns, the
 * user's), one turn from the arguments or standard input, or, on a
 * terminal without a prompt, a conversation a line at a time.
 *
 * The conversation: each line typed is the user's next turn; the answer
 * streams to the terminal and joins the conversation as the assistant's
 * turn.  Ctrl-C while an answer streams cancels it in the daemon
 * (cp_cancel()), and that turn (the line and its partial answer) is
 * dropped; at the prompt the terminal discards the line being typed.
 * Ctrl-D (end of input) ends the conversation, exit status 0; a request
 * the daemon fails ends it with its message, status 1.
 */
#include "cpq.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROMPT	">>> "

/*
 * Reads and parses the --history file (at most CP_ARENA_MAX bytes, more
 * than any daemon takes); 0 or EXIT_USAGE with the message printed.
 */
int
read_history(struct opts *o)
{
	char err[256], *text;
	size_t len;
	int fd, r;

	if ((fd = open(o->history_path, O_RDONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "cpq: --history: %s: %s\n", o->history_path,
		    strerror(errno));
		return EXIT_USAGE;
	}
	r = read_all(fd, CP_ARENA_MAX, &text, &len);
	close(fd);
	if (r < 0) {
		fprintf(stderr, "cpq: --history: %s: %s\n", o->history_path,
		    r == -EFBIG ? "larger than 64 MiB" : strerror(-r));
		return EXIT_USAGE;
	}
	/* Room for --system and the prompt besides. */
	r = cpq_history_parse(text, len, CP_CHAT_MAX_MSGS - 2, &o->history,
	    err, sizeof(err));
	free(text);
	if (r == -EINVAL) {
		fprintf(stderr, "cpq: --history: %s: %s\n", o->history_path,
		    err);
		return EXIT_USAGE;
	}
	if (r < 0) {
		fprintf(stderr, "cpq: --history: %s\n", strerror(-r));
		return EXIT_USAGE;
	}
	return 0;
}

/*
 * The conversation --chat sends: the system message, the history, the
 * prompt as the user's turn, in *msgs (malloc'd; contents borrowed from o
 * and prompt) and *n; 0 or EXIT_DAEMON.
 */
static int
chat_messages(const struct opts *o, const char *prompt, size_t len,
    struct cp_message **msgs, size_t *n)
{
	struct cp_message *m;
	size_t k = 0;

	m = calloc(o->history.n + 2, sizeof(*m));
	if (m == NULL) {
		fprintf(stderr, "cpq: out of memory\n");
		return EXIT_DAEMON;
	}
	if (o->system != NULL) {
		m[k].role = CP_CHAT_SYSTEM;
		m[k].content = o->system;
		m[k++].len = strlen(o->system);
	}
	if (o->history.n > 0)
		memcpy(m + k, o->history.msgs, o->history.n * sizeof(*m));
	k += o->history.n;
	m[k].role = CP_CHAT_USER;
	m[k].content = prompt;
	m[k++].len = len;
	*msgs = m;
	*n = k;
	return 0;
}

/* A model without a chat template: 0, or EXIT_DAEMON with the reason. */
int
check_chat(const struct cp_model_info *mi)
{
	if (mi->chat_template[0] != '\0')
		return 0;
	fprintf(stderr, "cpq: --chat: model '%s' has no chat template cpd "
	    "knows; name its format with the chat_template key of cpd.yaml "
	    "(or cpd --chat-template)\n", mi->name);
	return EXIT_DAEMON;
}

int
chat_once(struct cp_client *c, const struct opts *o, const char *prompt,
    size_t len)
{
	struct cp_message *msgs;
	size_t n;
	int rc;

	if ((rc = chat_messages(o, prompt, len, &msgs, &n)) != 0)
		return rc;
	rc = generate(c, o, msgs, n, prompt, len, NULL);
	free(msgs);
	return rc;
}

void
cpq_text_add(struct cpq_text *t, const char *s, size_t n)
{
	char *p;
	size_t cap;

	if (t == NULL || t->failed || n == 0)
		return;
	if (t->len + n > t->cap) {
		cap = t->cap ? t->cap : 256;
		while (cap < t->len + n)
			cap *= 2;
		if ((p = realloc(t->p, cap)) == NULL) {
			t->failed = 1;
			return;
		}
		t->p = p;
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
}

/* The turns of a conversation: every message's text is owned here. */
struct turns {
	struct cp_message *m;
	size_t n, cap;
};

/* Appends a message owning text (taken); 0 or -ENOMEM (text freed). */
static int
turn_add(struct turns *t, int role, char *text, size_t len)
{
	struct cp_message *m;

	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		if ((m = realloc(t->m, t->cap * sizeof(*m))) == NULL) {
			free(text);
			return -ENOMEM;
		}
		t->m = m;
	}
	t->m[t->n].role = role;
	t->m[t->n].content = text;
	t->m[t->n++].len = len;
	return 0;
}

/* Frees the turns from index keep on (their texts). */
static void
turns_cut(struct turns *t, size_t keep)
{
	while (t->n > keep)
		free((char *)t->m[--t->n].content);
}

/*
 * One line of standard input (its newline dropped) in *line, malloc'd;
 * 1, 0 at end of input with nothing read, or -errno.
 */
static int
read_line(char **line, size_t *len)
{
	struct cpq_text t = { NULL, 0, 0, 0 };
	ssize_t k;
	char c;

	for (;;) {
		k = read(0, &c, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			free(t.p);
			return -errno;
		}
		if (k == 0 && t.len == 0) {
			free(t.p);
			return 0;
		}
		if (k == 0 || c == '\n')
			break;
		cpq_text_add(&t, &c, 1);
	}
	if (t.failed) {
		free(t.p);
		return -ENOMEM;
	}
	*line = t.p;
	*len = t.len;
	return 1;
}

int
chat_loop(struct cp_client *c, const struct opts *o)
{
	struct cpq_text ans;
	struct turns t = { NULL, 0, 0 };
	size_t len = 0, keep, i;
	char *line = NULL, *sys;
	int r, rc = 0;

	if (o->system != NULL) {
		if ((sys = strdup(o->system)) == NULL ||
		    turn_add(&t, CP_CHAT_SYSTEM, sys, strlen(sys)) < 0)
			goto nomem;
	}
	for (i = 0; i < o->history.n; i++) {
		const struct cp_message *h = &o->history.msgs[i];
		char *s = malloc(h->len + 1);

		if (s == NULL)
			goto nomem;
		if (h->len > 0)
			memcpy(s, h->content, h->len);
		if (turn_add(&t, h->role, s, h->len) < 0)
			goto nomem;
	}
	fputs("cpq: a conversation; Ctrl-C stops an answer, Ctrl-D ends\n",
	    stderr);
	for (;;) {
		at_prompt = 1;
		fputs(PROMPT, stdout);
		fflush(stdout);
		r = read_line(&line, &len);
		if (r == 0) {
			fputc('\n', stdout);
			break;
		}
		if (r < 0) {
			fprintf(stderr, "cpq: standard input: %s\n",
			    strerror(-r));
			rc = EXIT_DAEMON;
			break;
		}
		if (len == 0) {
			free(line);
			continue;
		}
		keep = t.n;
		if (turn_add(&t, CP_CHAT_USER, line, len) < 0)
			goto nomem;
		memset(&ans, 0, sizeof(ans));
		n_sigint = 0;
		at_prompt = 0;
		rc = generate(c, o, t.m, t.n, line, len, &ans);
		submitted = 0;
		n_sigint = 0;
		if (rc == 0 && !ans.failed) {
			if (turn_add(&t, CP_CHAT_ASSISTANT, ans.p, ans.len) < 0)
				goto nomem;
			continue;
		}
		/* A cancelled or failed turn is not part of the conversation. */
		free(ans.p);
		turns_cut(&t, keep);
		if (rc != EXIT_INTR && rc != 0)
			break;
		rc = 0;
	}
	at_prompt = 0;
	turns_cut(&t, 0);
	free(t.m);
	return rc;
nomem:
	fprintf(stderr, "cpq: out of memory\n");
	turns_cut(&t, 0);
	free(t.m);
	return EXIT_DAEMON;
}
