/*
 * cpq_run.c - see cpq_run.h.
 */
#include "cpq_run.h"

#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "prog.h"

char cq_cpq_path[4096];

int
cq_find_cpq(void)
{
	if (prog_find(cq_cpq_path, sizeof(cq_cpq_path), "cpq", "CPQ") != 0) {
		printf("%s not built (make it, or set CPQ): skipped\n",
		    cq_cpq_path);
		return -1;
	}
	return 0;
}

void
cq_cfg_init(struct srv_config *c, const char *chat_template)
{
	hd_config(c);
	snprintf(c->model.chat_template, sizeof(c->model.chat_template), "%s",
	    chat_template);
}

/* A daemon with chat template tmpl and mock steps of step_us. */
void
cq_start(struct hd *d, const char *tmpl, int step_us)
{
	struct srv_config cfg;
	struct mock_opts mo;

	cq_cfg_init(&cfg, tmpl);
	mock_opts_default(&mo);
	mo.step_us = step_us;
	ck_assert_int_eq(hd_start(d, &cfg, &mo), 0);
}

/* A daemon whose mock computes chunk prompt bytes a step of step_us. */
void
cq_start_prefill(struct hd *d, int step_us, uint32_t chunk)
{
	struct srv_config cfg;
	struct mock_opts mo;

	cq_cfg_init(&cfg, "");
	mock_opts_default(&mo);
	mo.step_us = step_us;
	mo.prefill_chunk = chunk;
	ck_assert_int_eq(hd_start(d, &cfg, &mo), 0);
}

/* ---- running cpq ----------------------------------------------------- */

void
cq_buf_add(struct cq_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void
cq_buf_free(struct cq_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* Starts cpq with args (NULL-terminated, without argv[0]). */
void
cq_spawn(struct cq_proc *p, const char *const *args, const struct cq_spawn_opts *so)
{
	int in[2] = { -1, -1 }, out[2], err[2] = { -1, -1 }, n, fd;
	const char *argv[64];

	for (n = 0; args[n] != NULL; n++)
		;
	ck_assert_int_lt(n, 62);
	argv[0] = cq_cpq_path;
	memcpy(argv + 1, args, (size_t)(n + 1) * sizeof(*argv));
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	if (so == NULL || so->err_path == NULL)
		ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
	if (so != NULL && so->stdin_pipe)
		ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	fflush(NULL);
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		fd = in[0] >= 0 ? in[0] : open("/dev/null", O_RDONLY);
		dup2(fd, 0);
		dup2(out[1], 1);
		if (so != NULL && so->err_path != NULL) {
			fd = open(so->err_path, O_RDWR | O_NOCTTY);
			if (fd < 0)
				_exit(120);
			dup2(fd, 2);
		} else {
			dup2(err[1], 2);
		}
		unsetenv("XDG_RUNTIME_DIR");
		if (so != NULL && so->env_socket != NULL)
			setenv("CPD_SOCKET", so->env_socket, 1);
		else
			unsetenv("CPD_SOCKET");
		signal(SIGINT, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		execv(cq_cpq_path, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	p->out = out[0];
	p->err = err[0];
	if (err[1] >= 0)
		close(err[1]);
	p->in = in[1];
	if (in[0] >= 0)
		close(in[0]);
}

/*
 * Feeds in[0..in_len) to its stdin (then closes it), reads stdout and
 * stderr to their ends, reaps it.  Returns its exit status, or 1000 +
 * the signal that killed it.
 */
int
cq_finish(struct cq_proc *p, const char *in, size_t in_len, struct cq_buf *out,
    struct cq_buf *err)
{
	uint64_t end = clock_ms() + CQ_RUN_MS;
	size_t in_off = 0;
	char b[4096];
	int st;

	if (p->in >= 0 && in == NULL) {
		close(p->in);
		p->in = -1;
	}
	while (p->out >= 0 || p->err >= 0 || p->in >= 0) {
		struct pollfd pf[3];
		int n = 0, i;
		ssize_t k;

		ck_assert_msg(clock_ms() < end, "cpq did not finish");
		if (p->out >= 0)
			pf[n++] = (struct pollfd){ p->out, POLLIN, 0 };
		if (p->err >= 0)
			pf[n++] = (struct pollfd){ p->err, POLLIN, 0 };
		if (p->in >= 0)
			pf[n++] = (struct pollfd){ p->in, POLLOUT, 0 };
		if (poll(pf, (nfds_t)n, 100) <= 0)
			continue;
		for (i = 0; i < n; i++) {
			if (pf[i].revents == 0)
				continue;
			if (pf[i].fd == p->in) {
				k = write(p->in, in + in_off, in_len - in_off);
				if (k > 0)
					in_off += (size_t)k;
				if (k < 0 || in_off == in_len) {
					close(p->in);
					p->in = -1;
				}
				continue;
			}
			k = read(pf[i].fd, b, sizeof(b));
			if (k > 0) {
				cq_buf_add(pf[i].fd == p->out ? out : err, b,
				    (size_t)k);
				continue;
			}
			close(pf[i].fd);
			if (pf[i].fd == p->out)
				p->out = -1;
			else
				p->err = -1;
		}
	}
	ck_assert_int_eq(waitpid(p->pid, &st, 0), p->pid);
	if (out->p == NULL)
		cq_buf_add(out, "", 0);
	if (err->p == NULL)
		cq_buf_add(err, "", 0);
	st = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
	/* For the log of a failing test. */
	if (st != 0)
		fprintf(stderr, "cpq exit %d, stderr: %s\n", st, err->p);
	return st;
}

/* Runs cpq to its end; its exit status with out and err filled. */
int
cq_run_in(const char *const *args, const char *in, size_t in_len,
    struct cq_buf *out, struct cq_buf *err)
{
	struct cq_spawn_opts so = { .stdin_pipe = in != NULL };
	struct cq_proc p;

	memset(out, 0, sizeof(*out));
	memset(err, 0, sizeof(*err));
	cq_spawn(&p, args, &so);
	return cq_finish(&p, in, in_len, out, err);
}

int
cq_run(const char *const *args, struct cq_buf *out, struct cq_buf *err)
{
	return cq_run_in(args, NULL, 0, out, err);
}

/* Reads from fd into b until done(b, arg) (or the deadline); 1 if it held. */
static int
read_while(int fd, struct cq_buf *b, int timeout_ms,
    int (*done)(const struct cq_buf *, const void *), const void *arg)
{
	uint64_t end = clock_ms() + (uint64_t)timeout_ms;
	char tmp[4096];

	while (!done(b, arg)) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (clock_ms() >= end)
			return 0;
		if (poll(&pf, 1, 50) <= 0)
			continue;
		k = read(fd, tmp, sizeof(tmp));
		if (k <= 0)
			return 0;
		cq_buf_add(b, tmp, (size_t)k);
	}
	return 1;
}

static int
holds(const struct cq_buf *b, const void *needle)
{
	return b->p != NULL && strstr(b->p, needle) != NULL;
}

int
cq_read_until(int fd, struct cq_buf *b, const char *needle, int timeout_ms)
{
	return read_while(fd, b, timeout_ms, holds, needle);
}

int
cq_count_lines(const struct cq_buf *b)
{
	const char *q = b->p;
	int n = 0;

	while (q != NULL && (q = strchr(q, '\n')) != NULL) {
		n++;
		q++;
	}
	return n;
}

static int
has_lines(const struct cq_buf *b, const void *n)
{
	return cq_count_lines(b) >= *(const int *)n;
}

int
cq_read_lines(int fd, struct cq_buf *b, int n, int timeout_ms)
{
	return read_while(fd, b, timeout_ms, has_lines, &n);
}

/* ---- JSON lines -------------------------------------------------------- */

/* Parses each line of text; returns the count, trees in js[] (max n). */
size_t
cq_json_lines(const char *text, struct json **js, size_t max)
{
	const char *p = text, *nl;
	size_t n = 0;
	char err[128];

	while (*p != '\0') {
		nl = strchr(p, '\n');
		ck_assert_msg(nl != NULL, "unterminated line: %s", p);
		ck_assert_uint_lt(n, max);
		js[n] = json_parse(p, (size_t)(nl - p), err, sizeof(err));
		ck_assert_msg(js[n] != NULL, "bad JSON (%s): %.*s", err,
		    (int)(nl - p), p);
		ck_assert_int_eq(js[n]->type, JSON_OBJECT);
		n++;
		p = nl + 1;
	}
	return n;
}

void
cq_json_lines_free(struct json **js, size_t n)
{
	while (n-- > 0)
		json_free(js[n]);
}

const char *
cq_jstr(const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);

	ck_assert_msg(v != NULL && v->type == JSON_STRING, "no string %s", key);
	return v->str;
}

double
cq_jnum(const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);

	ck_assert_msg(v != NULL && v->type == JSON_NUMBER, "no number %s", key);
	return v->num;
}

