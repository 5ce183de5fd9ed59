/*
 * cpq_run.h - running cpq as a user does, for check_cpq and
 * check_cpq_stats: the program in a child process with pipes (or a
 * terminal) for its stdin, stdout and stderr, against a daemon of
 * cpd_harness.h with the mock engine; and the JSON lines cpq --json
 * prints.  The functions assert with Check: call them from a test.
 */
#ifndef CP_TEST_CPQ_RUN_H
#define CP_TEST_CPQ_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cpd_harness.h"
#include "json.h"

#define CQ_RUN_MS	20000	/* longest a cpq run may take */

/* The cpq program the tests run ($CPQ, else $BUILD/bin/cpq, else build/bin/cpq). */
extern char cq_cpq_path[4096];

/* Fills cq_cpq_path; 0, or -1 when it is not an executable (say so, exit 77). */
int cq_find_cpq(void);


/* ---- daemons ---- */

/* hd_config() with chat template tmpl. */
void cq_cfg_init(struct srv_config *c, const char *chat_template);
/* A daemon with chat template tmpl and mock steps of step_us. */
void cq_start(struct hd *d, const char *tmpl, int step_us);
/* A daemon whose mock computes chunk prompt bytes a step of step_us. */
void cq_start_prefill(struct hd *d, int step_us, uint32_t chunk);

/* ---- cpq in a child ---- */

struct cq_buf {
	char *p;
	size_t len, cap;
};

struct cq_proc {
	pid_t pid;
	int in, out, err;	/* our ends of its stdin, stdout, stderr */
};

struct cq_spawn_opts {
	int stdin_pipe;		/* stdin from p->in, else /dev/null */
	const char *env_socket;	/* CPD_SOCKET for the child, else unset */
	const char *err_path;	/* the child's stderr (a tty), else a pipe */
};

void cq_buf_add(struct cq_buf *b, const char *s, size_t n);
void cq_buf_free(struct cq_buf *b);

/* Starts cpq with args (NULL-terminated, without argv[0]). */
void cq_spawn(struct cq_proc *p, const char *const *args,
    const struct cq_spawn_opts *so);
/*
 * Feeds in[0..in_len) to its stdin (then closes it), reads stdout and
 * stderr to their ends, reaps it.  Returns its exit status, or 1000 +
 * the signal that killed it.
 */
int cq_finish(struct cq_proc *p, const char *in, size_t in_len,
    struct cq_buf *out, struct cq_buf *err);
/* Runs cpq to its end; its exit status with out and err filled. */
int cq_run_in(const char *const *args, const char *in, size_t in_len,
    struct cq_buf *out, struct cq_buf *err);
int cq_run(const char *const *args, struct cq_buf *out, struct cq_buf *err);
/* Reads from fd until b holds needle (or the deadline); 1 if it does. */
int cq_read_until(int fd, struct cq_buf *b, const char *needle,
    int timeout_ms);
int cq_count_lines(const struct cq_buf *b);
/* Reads from fd until b holds at least n lines; 1 if it does in time. */
int cq_read_lines(int fd, struct cq_buf *b, int n, int timeout_ms);

/* ---- JSON lines ---- */

/* Parses each line of text; returns the count, trees in js[] (max n). */
size_t cq_json_lines(const char *text, struct json **js, size_t max);
void cq_json_lines_free(struct json **js, size_t n);
const char *cq_jstr(const struct json *o, const char *key);
double cq_jnum(const struct json *o, const char *key);

#endif
