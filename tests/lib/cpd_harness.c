/*
 * cpd_harness.c - a daemon in a child process and a raw protocol client
 * for tests (see cpd_harness.h).
 */
#include "cpd_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chat.h"
#include "clock.h"
#include "cpd_proc.h"
#include "engine_port.h"
#include "ioloop.h"
#include "log.h"
#include "ring.h"
#include "tmpdir.h"

#define HD_MAX 8

static struct server *hd_server;
static struct hd *hd_live[HD_MAX];	/* for the exit-time clean-up */
static pid_t hd_owner;

/* A failing assertion exits the test process: stop its daemons then too. */
static void
hd_atexit(void)
{
	int i;

	if (getpid() != hd_owner)
		return;		/* a forked client of the test */
	for (i = 0; i < HD_MAX; i++)
		if (hd_live[i] != NULL)
			hd_stop(hd_live[i]);
}

static void
hd_register(struct hd *d, int add)
{
	static int once;
	int i;

	if (!once) {
		once = 1;
		hd_owner = getpid();
		atexit(hd_atexit);
	}
	for (i = 0; i < HD_MAX; i++) {
		if (add && hd_live[i] == NULL) {
			hd_live[i] = d;
			return;
		}
		if (!add && hd_live[i] == d)
			hd_live[i] = NULL;
	}
}

static void
hd_on_term(int sig)
{
	if (hd_server == NULL)
		return;
	if (sig == SIGUSR1)
		srv_drain(hd_server);
	else
		srv_stop(hd_server);
}
/* The child: runs the server until SIGTERM; never returns. */
static void
hd_child(struct hd *d, const struct srv_config *cfg,
    const struct mock_opts *mo, int ready)
{
	struct srv_config c = *cfg;
	struct mock_opts o = *mo;
	struct engine_port *port;
	struct mock_engine *m = NULL;
	struct sigaction sa;
	pid_t parent;
	int logfd, r, rc = 1;
	char ok = 1;

	/*
	 * The test process may _exit() on a failed assertion, and Check then
	 * SIGKILLs its process group: leave the group, follow the parent's
	 * death with SIGTERM instead, and clean up below.
	 */
	parent = getppid();
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		raise(SIGTERM);
	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	log_init(LOG_LVL_DEBUG, logfd);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = hd_on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	c.socket_path = d->path;
	port = ep_new();
	if (port == NULL)
		_exit(1);
	/* The mock serves the model the configuration describes. */
	o.chat = chat_from_name(c.model.chat_template);
	snprintf(o.model, sizeof(o.model), "%s", c.model.name);
	if (mock_engine_start(port, &o, &m) < 0)
		_exit(1);
	r = srv_new(&c, port, &hd_server);
	if (r < 0) {
		log_warnx("srv_new: %s", strerror(-r));
		_exit(1);
	}
	log_info("harness: io loop %s",
	    ioloop_kind_name(srv_ioloop(hd_server)));
	if (write(ready, &ok, 1) != 1)
		_exit(1);
	close(ready);
	if (srv_run(hd_server) == 0)
		rc = 0;
	srv_free(hd_server);
	hd_server = NULL;
	mock_engine_stop(m);
	ep_free(port);
	if (getppid() != parent && getenv("CP_TEST_KEEP") == NULL) {
		/* Orphaned: nobody will run hd_stop(). */
		unlink(d->log);
		rmdir(d->dir);
	}
	exit(rc);	/* not _exit: a sanitizer build checks for leaks here */
}

void
hd_config(struct srv_config *c)
{
	srv_config_defaults(c);
	c->handshake_timeout_ms = 2000;
	snprintf(c->model.name, sizeof(c->model.name), "mock-model");
	snprintf(c->model.arch, sizeof(c->model.arch), "llama");
	snprintf(c->model.backend, sizeof(c->model.backend), "cpu");
	c->model.n_ctx = 4096;
	c->model.n_vocab = 256;
	c->model.n_embd = 64;
	c->model.n_layer = 4;
	c->model.n_head = 8;
	c->model.n_head_kv = 4;
	c->model.bos = 1;
	c->model.eos = 2;
	c->model.n_params = 260000;
}

int
hd_start(struct hd *d, const struct srv_config *cfg,
    const struct mock_opts *mo)
{
	struct mock_opts def;
	struct pollfd pfd;
	int p[2], n;
	char c;

	memset(d, 0, sizeof(*d));
	if (mo == NULL) {
		mock_opts_default(&def);
		mo = &def;
	}
	n = snprintf(d->dir, sizeof(d->dir), "%s/cpdtest.XXXXXX", tmp_dir());
	if (n < 0 || (size_t)n >= sizeof(d->dir) || mkdtemp(d->dir) == NULL)
		return -EIO;
	if (strlen(d->dir) + 3 > sizeof(d->path))
		return -ENAMETOOLONG;
	memcpy(d->path, d->dir, strlen(d->dir));
	memcpy(d->path + strlen(d->dir), "/s", 3);
	snprintf(d->log, sizeof(d->log), "%s/cpd.log", d->dir);
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		d->pid = 0;
		return -errno;
	}
	if (d->pid == 0) {
		close(p[0]);
		hd_child(d, cfg, mo, p[1]);
	}
	close(p[1]);
	hd_register(d, 1);
	pfd.fd = p[0];
	pfd.events = POLLIN;
	n = poll(&pfd, 1, 10000);
	if (n != 1 || read(p[0], &c, 1) != 1) {
		close(p[0]);
		hd_kill(d);
		return -EIO;
	}
	/* End of file: the child has closed its end, its fd count is settled. */
	while (poll(&pfd, 1, 5000) == 1 && read(p[0], &c, 1) == 1)
		;
	close(p[0]);
	return 0;
}

/* Signals and reaps the daemon; its wait status, or 0 if it was already gone. */
static int
hd_reap(struct hd *d, int sig, int wait_ms)
{
	int st = 0, i;

	if (d->pid <= 0)
		return 0;
	kill(d->pid, sig);
	for (i = 0; i < wait_ms; i += 10) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return st;
		}
		usleep(10000);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return st == 0 ? -1 : st;
}

void
hd_kill(struct hd *d)
{
	hd_reap(d, SIGKILL, 5000);
}

void
hd_drain(struct hd *d)
{
	if (d->pid > 0)
		kill(d->pid, SIGUSR1);
}

int
hd_wait(struct hd *d, int ms)
{
	int st = 0, i;

	if (d->pid <= 0)
		return -1;
	for (i = 0; i <= ms; i += 5) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return st;
		}
		usleep(5000);
	}
	return -1;
}

int
hd_stop(struct hd *d)
{
	int st;

	hd_register(d, 0);
	st = hd_reap(d, SIGTERM, 5000);
	if (getenv("CP_TEST_KEEP") != NULL && d->dir[0] != '\0') {
		fprintf(stderr, "kept %s\n", d->dir);
		return st;
	}
	if (d->dir[0] != '\0') {
		unlink(d->path);
		unlink(d->log);
		rmdir(d->dir);
		d->dir[0] = '\0';
	}
	return st;
}

int
hd_log_has(const struct hd *d, const char *needle)
{
	return cpd_file_has(d->log, needle);
}

int
hd_count_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
	dir = opendir(path);
	if (dir == NULL)
		return -1;
	while ((e = readdir(dir)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

int
hd_count_memfd_maps(pid_t pid)
{
	char path[64], line[512];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
	f = fopen(path, "re");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, "memfd:cpd-session") != NULL)
			n++;
	fclose(f);
	return n;
}

int
hd_stats(const struct hd *d, struct cp_wire_stats *st)
{
	struct raw_client rc;
	int r;

	r = raw_connect(d->path, &rc, 0, 0, 0);
	if (r == 0)
		r = raw_stats(&rc, st);
	raw_close(&rc);
	return r;
}

/* ---- raw client ------------------------------------------------------ */

void
raw_hello_init(struct cp_hello *h, uint32_t sq, uint32_t cq, uint32_t arena)
{
	memset(h, 0, sizeof(*h));
	h->hdr.magic = CP_PROTO_MAGIC;
	h->hdr.type = CP_MSG_HELLO;
	h->hdr.version = CP_PROTO_VERSION;
	h->sq_entries = sq;
	h->cq_entries = cq;
	h->arena_bytes = arena;
}

ssize_t
raw_send_fd(int sock, const void *msg, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cb;
	struct iovec iov;
	struct msghdr m;
	struct cmsghdr *c;

	iov.iov_base = (void *)msg;
	iov.iov_len = len;
	memset(&m, 0, sizeof(m));
	memset(&cb, 0, sizeof(cb));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cb.b;
	m.msg_controllen = sizeof(cb.b);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &m, 0);
}

int
raw_socket(const char *path)
{
	struct sockaddr_un sa;
	int fd;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int
raw_connect(const char *path, struct raw_client *rc, uint32_t sq, uint32_t cq,
    uint32_t arena)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * CP_FD_MAX)];
	} cb;
	struct cp_hello h;
	struct iovec iov;
	struct msghdr m;
	struct cmsghdr *c;
	struct pollfd pfd;
	ssize_t n;
	int i;

	memset(rc, 0, sizeof(*rc));
	for (i = 0; i < CP_FD_MAX; i++)
		rc->fds[i] = -1;
	rc->fd = raw_socket(path);
	if (rc->fd < 0)
		return rc->fd;
	raw_hello_init(&h, sq, cq, arena);
	send(rc->fd, &h, sizeof(h), MSG_NOSIGNAL);	/* may fail if refused */
	pfd.fd = rc->fd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, 5000) != 1)
		return -ETIMEDOUT;
	iov.iov_base = &rc->w;
	iov.iov_len = sizeof(rc->w);
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cb.b;
	m.msg_controllen = sizeof(cb.b);
	n = recvmsg(rc->fd, &m, MSG_CMSG_CLOEXEC);
	if (n < 0 && errno == ECONNRESET) {
		/* Closed with our HELLO unread: the welcome is still queued. */
		m.msg_controllen = sizeof(cb.b);
		n = recvmsg(rc->fd, &m, MSG_CMSG_CLOEXEC);
	}
	if (n < 0)
		return -errno;
	for (c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			rc->nfds = (int)((c->cmsg_len - CMSG_LEN(0)) /
			    sizeof(int));
			if (rc->nfds > CP_FD_MAX)
				rc->nfds = CP_FD_MAX;
			memcpy(rc->fds, CMSG_DATA(c),
			    sizeof(int) * (size_t)rc->nfds);
		}
	}
	if ((size_t)n != sizeof(rc->w))
		return n == 0 ? -EPIPE : -EPROTO;
	if (rc->w.status != 0)
		return rc->w.status;
	if (rc->nfds < 2)
		return -EPROTO;
	rc->map_len = rc->w.seg_bytes;
	rc->map = mmap(NULL, rc->map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
	    rc->fds[CP_FD_MEMFD], 0);
	if (rc->map == MAP_FAILED) {
		rc->map = NULL;
		return -errno;
	}
	rc->hdr = (struct cp_seg_hdr *)rc->map;
	rc->ctl = (struct cp_seg_ctl *)(rc->map + rc->hdr->ctl_off);
	rc->sq = (struct cp_sqe *)(rc->map + rc->hdr->sq_off);
	rc->arena = rc->map + rc->hdr->arena_off;
	rc->cq = (struct cp_cqe *)(rc->map + rc->hdr->cq_off);
	return 0;
}

void
raw_close(struct raw_client *rc)
{
	int i;

	if (rc->map != NULL)
		munmap(rc->map, rc->map_len);
	rc->map = NULL;
	for (i = 0; i < rc->nfds && i < CP_FD_MAX; i++)
		if (rc->fds[i] >= 0)
			close(rc->fds[i]);
	rc->nfds = 0;
	if (rc->fd > 0)
		close(rc->fd);
	rc->fd = -1;
}

void
raw_wake(struct raw_client *rc)
{
	char b = 1;
	ssize_t n;

	ring_fence();
	if (ring_load_relaxed(&rc->ctl->daemon_idle.v) == 0)
		return;
	if (rc->w.wake_mode == CP_WAKE_FUTEX)
		syscall(SYS_futex, &rc->ctl->sq_tail.v, FUTEX_WAKE, 1, NULL,
		    NULL, 0);
	else {
		n = write(rc->fds[CP_FD_SQ_WAKE], &b, 1);
		(void)n;
	}
}

int
raw_submit(struct raw_client *rc, uint32_t req_id, const char *prompt,
    uint32_t max_tokens)
{
	return raw_submit_bytes(rc, req_id, 0, prompt, strlen(prompt),
	    max_tokens);
}

int
raw_submit_bytes(struct raw_client *rc, uint32_t req_id, uint8_t flags,
    const void *prompt, size_t n, uint32_t max_tokens)
{
	uint32_t len = (uint32_t)n;
	struct cp_sqe e;

	if (n > rc->w.arena_bytes || rc->arena_pos + len > rc->w.arena_bytes)
		return -ENOSPC;
	memcpy(rc->arena + rc->arena_pos, prompt, len);
	memset(&e, 0, sizeof(e));
	e.op = CP_OP_SUBMIT;
	e.flags = flags;
	e.req_id = req_id;
	e.arena_off = rc->arena_pos;
	e.arena_len = len;
	e.params.max_tokens = max_tokens;
	e.params.temperature = 0.0f;
	e.params.top_p = 1.0f;
	e.params.repeat_penalty = 1.0f;
	rc->arena_pos += len;
	memcpy(&rc->sq[rc->sq_tail & (rc->w.sq_entries - 1)], &e, sizeof(e));
	ring_store_release(&rc->ctl->sq_tail.v, ++rc->sq_tail);
	raw_wake(rc);
	return 0;
}

int
raw_collect(struct raw_client *rc, uint32_t req_id, char *out, size_t size,
    int timeout_ms, uint8_t *finish)
{
	struct cp_cqe last;
	int r;

	r = raw_collect_end(rc, req_id, out, size, timeout_ms, &last, NULL, 0);
	if (r > 0 && finish != NULL)
		*finish = last.finish;
	return r;
}

int
raw_collect_end(struct raw_client *rc, uint32_t req_id, char *out,
    size_t size, int timeout_ms, struct cp_cqe *last, char *msg,
    size_t msg_size)
{
	uint64_t end = clock_ms() + (uint64_t)timeout_ms;
	size_t used = out ? strlen(out) : 0, mused = 0;
	int more = 0;

	if (msg != NULL && msg_size > 0)
		msg[0] = '\0';

	for (;;) {
		uint32_t tail = ring_load_acquire(&rc->ctl->cq_tail.v);

		if (!ring_sane(tail, rc->cq_head, rc->w.cq_entries))
			return -EPROTO;
		while (rc->cq_head != tail) {
			struct cp_cqe q;

			memcpy(&q, &rc->cq[rc->cq_head &
			    (rc->w.cq_entries - 1)], sizeof(q));
			rc->cq_head++;
			ring_store_release(&rc->ctl->cq_head.v, rc->cq_head);
			if (q.req_id != req_id)
				continue;
			/* The terminal event's text and its continuations. */
			if ((more || q.type == CP_EV_DONE ||
			    q.type == CP_EV_ERROR) && msg != NULL &&
			    q.text_len <= CP_CQE_TEXT &&
			    mused + q.text_len < msg_size) {
				memcpy(msg + mused, q.text, q.text_len);
				mused += q.text_len;
				msg[mused] = '\0';
			}
			if (more) {
				if (!(q.flags & CP_CQF_MORE))
					return last->type;
				continue;
			}
			if (out != NULL && q.text_len <= CP_CQE_TEXT &&
			    used + q.text_len < size &&
			    (q.type == CP_EV_TOKEN || q.type == CP_EV_TEXT)) {
				memcpy(out + used, q.text, q.text_len);
				used += q.text_len;
				out[used] = '\0';
			}
			if (q.type == CP_EV_DONE || q.type == CP_EV_ERROR) {
				*last = q;
				if (msg == NULL || !(q.flags & CP_CQF_MORE))
					return q.type;
				more = 1;	/* the group is published whole */
			}
		}
		if (clock_ms() >= end)
			return 0;
		usleep(500);
	}
}

int
raw_wait_closed(struct raw_client *rc, int timeout_ms)
{
	uint64_t end = clock_ms() + (uint64_t)timeout_ms;
	struct pollfd pfd;
	char buf[512];

	for (;;) {
		uint64_t now = clock_ms();

		if (now >= end)
			return 0;
		pfd.fd = rc->fd;
		pfd.events = POLLIN | POLLRDHUP;
		pfd.revents = 0;
		if (poll(&pfd, 1, (int)(end - now)) <= 0)
			return 0;
		if (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR))
			return 1;
		if (recv(rc->fd, buf, sizeof(buf), MSG_DONTWAIT) == 0)
			return 1;
	}
}

int
raw_stats(struct raw_client *rc, struct cp_wire_stats *st)
{
	struct cp_stats_req q;
	struct cp_stats_msg m;
	struct pollfd pfd;
	ssize_t n;

	memset(&q, 0, sizeof(q));
	q.hdr.magic = CP_PROTO_MAGIC;
	q.hdr.type = CP_MSG_STATS_REQ;
	q.hdr.version = CP_PROTO_VERSION;
	if (send(rc->fd, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q))
		return -errno;
	pfd.fd = rc->fd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, 5000) != 1)
		return -ETIMEDOUT;
	n = recv(rc->fd, &m, sizeof(m), 0);
	if (n != (ssize_t)sizeof(m) || m.hdr.type != CP_MSG_STATS ||
	    m.stats_version != CP_STATS_VERSION ||
	    m.stats_bytes != sizeof(m.stats))
		return -EPROTO;
	*st = m.stats;
	return 0;
}
