/*
 * cpclient.c - libcpclient: connecting (the handshake of cp_proto.h and
 * the checks on what the daemon sends), closing, model information,
 * statistics and error strings.  The rings are cpclient_ring.c's.
 */
#include "cpclient.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpclient_int.h"
#include "ring.h"
#include "sock_path.h"

#define CPC_TIMEOUT_MS	5000
#define CPC_RECV_FDS	8	/* room for more descriptors than we accept */

uint64_t
cpc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int
cpc_fail(struct cp_client *c, int err)
{
	int zero = 0;

	__atomic_compare_exchange_n(&c->broken, &zero, err, 0,
	    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return err;
}

int
cpc_broken(struct cp_client *c)
{
	return __atomic_load_n(&c->broken, __ATOMIC_SEQ_CST);
}

int
cpc_daemon_gone(struct cp_client *c)
{
	struct pollfd p[2];

	if (__atomic_load_n(&c->gone, __ATOMIC_SEQ_CST))
		return 1;
	p[0].fd = c->sock;
	p[0].events = POLLRDHUP;
	p[1].fd = c->cq_rfd;
	p[1].events = 0;	/* POLLHUP is always reported */
	p[0].revents = p[1].revents = 0;
	if (poll(p, 2, 0) > 0 &&
	    ((p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) ||
	    (p[1].revents & (POLLHUP | POLLERR)))) {
		__atomic_store_n(&c->gone, 1, __ATOMIC_SEQ_CST);
		return 1;
	}
	return 0;
}

int
cpc_pipe_signal(int fd)
{
	sigset_t pipe_set, old, pending;
	char b = 1;
	int had, err = 0;
	ssize_t n;

	/* A pipe has no MSG_NOSIGNAL: block SIGPIPE, eat one we caused. */
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&pending);
	had = sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	do
		n = write(fd, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno != EAGAIN) {
		err = -errno;
		if (err == -EPIPE && !had) {
			struct timespec zero = { 0, 0 };

			sigtimedwait(&pipe_set, NULL, &zero);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

int
cpc_copy_in(void *dst, size_t dst_size, const void *src, size_t min)
{
	uint32_t size;

	memcpy(&size, src, sizeof(size));
	if (size < min)
		return -EINVAL;
	memset(dst, 0, dst_size);
	memcpy(dst, src, size < dst_size ? size : dst_size);
	size = (uint32_t)dst_size;
	memcpy(dst, &size, sizeof(size));
	return 0;
}

int
cpc_copy_out(void *dst, size_t dst_size, const void *src, size_t src_size,
    size_t min)
{
	uint32_t n = (uint32_t)(dst_size < src_size ? dst_size : src_size);

	if (dst_size < min)
		return -EINVAL;
	memcpy(dst, src, n);
	memcpy(dst, &n, sizeof(n));
	return 0;
}

void
cp_connect_opts_init_v1(struct cp_connect_opts *o, size_t size)
{
	struct cp_connect_opts d;

	memset(&d, 0, sizeof(d));
	d.timeout_ms = CPC_TIMEOUT_MS;
	memset(o, 0, size);
	(void)cpc_copy_out(o, size, &d, sizeof(d), 0);
}

void
cp_params_init_v1(struct cp_params *p, size_t size)
{
	struct cp_params d;

	memset(&d, 0, sizeof(d));
	d.temperature = 0.8f;
	d.top_p = 0.95f;
	d.min_p = 0.05f;
	d.repeat_penalty = 1.0f;
	d.top_k = 40;
	d.repeat_last_n = 64;
	memset(p, 0, size);
	(void)cpc_copy_out(p, size, &d, sizeof(d), 0);
}

/* given, else $CPD_SOCKET, $XDG_RUNTIME_DIR/cpd.sock, /run/cpd/cpd.sock. */
int
cp_socket_path(const char *given, char *buf, size_t size)
{
	struct sockaddr_un sa;
	int r;

	if ((r = sock_path_resolve(given, buf, size)) < 0)
		return r;
	return strlen(buf) < sizeof(sa.sun_path) ? 0 : -ENAMETOOLONG;
}

static int
dial(const char *path)
{
	struct sockaddr_un sa;
	int fd, r;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if ((r = cp_socket_path(path, sa.sun_path, sizeof(sa.sun_path))) < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	do
		r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/*
 * Receives the welcome and its descriptors (at most CP_FD_MAX kept in
 * fds[], the rest closed).  Returns the record length, or -errno /
 * CP_EPROTO / CP_EDEAD.
 */
static int
recv_welcome(int fd, struct cp_welcome *w, int fds[CP_FD_MAX], int *nfds,
    int timeout_ms)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * CPC_RECV_FDS)];
	} cb;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct iovec iov;
	struct msghdr m;
	struct cmsghdr *cm;
	int tries, r, bad = 0;
	ssize_t n = -1;

	*nfds = 0;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return -errno;
	for (tries = 0; tries < 2; tries++) {
		iov.iov_base = w;
		iov.iov_len = sizeof(*w);
		memset(&m, 0, sizeof(m));
		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = cb.b;
		m.msg_controllen = sizeof(cb.b);
		n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		/* A refusal closes with our HELLO unread: the reset comes first. */
		if (n < 0 && errno == ECONNRESET)
			continue;
		break;
	}
	if (n < 0)
		return errno == ECONNRESET ? CP_EDEAD : -errno;
	for (cm = CMSG_FIRSTHDR(&m); cm != NULL; cm = CMSG_NXTHDR(&m, cm)) {
		size_t k, cnt;
		int v;

		if (cm->cmsg_level != SOL_SOCKET ||
		    cm->cmsg_type != SCM_RIGHTS) {
			bad = 1;
			continue;
		}
		cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < cnt; k++) {
			memcpy(&v, CMSG_DATA(cm) + k * sizeof(int), sizeof(v));
			if (*nfds < CP_FD_MAX)
				fds[(*nfds)++] = v;
			else {
				close(v);
				bad = 1;
			}
		}
	}
	if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		bad = 1;
	if (n == 0)
		return CP_EDEAD;
	if (bad || (size_t)n != sizeof(*w))
		return CP_EPROTO;
	return (int)n;
}

/* Checks the welcome's numbers; 0, the refusal status, or CP_EPROTO. */
static int
check_welcome(const struct cp_welcome *w, int nfds, struct cp_seg_layout *l)
{
	if (w->hdr.magic != CP_PROTO_MAGIC || w->hdr.type != CP_MSG_WELCOME ||
	    w->hdr.version != CP_PROTO_VERSION)
		return CP_EPROTO;
	if (w->status < 0)
		return w->status < -4095 ? CP_EPROTO : w->status;
	if (w->status > 0)
		return CP_EPROTO;
	if (w->wake_mode == CP_WAKE_FUTEX) {
		if (w->n_fds != 2 || nfds != 2)
			return CP_EPROTO;
	} else if (w->wake_mode == CP_WAKE_FD) {
		if (w->n_fds != 3 || nfds != 3)
			return CP_EPROTO;
	} else {
		return CP_EPROTO;
	}
	if (cp_seg_layout(w->sq_entries, w->cq_entries, w->arena_bytes,
	    l) < 0 || l->seg_bytes != w->seg_bytes)
		return CP_EPROTO;
	if (w->max_reqs == 0 || w->max_reqs > 65536 || w->max_prompt_bytes == 0)
		return CP_EPROTO;
	return 0;
}

/* The memfd: a sealed regular file at least seg_bytes long. */
static int
check_memfd(int fd, uint32_t seg_bytes)
{
	struct stat st;
	int seals;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < (off_t)seg_bytes)
		return CP_EPROTO;
	/* Without F_SEAL_SHRINK a truncation could fault us with SIGBUS. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return CP_EPROTO;
	return 0;
}

/* A pipe end open for mode (O_RDONLY / O_WRONLY), made non-blocking. */
static int
check_pipe(int fd, int mode)
{
	struct stat st;
	int fl;

	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode))
		return CP_EPROTO;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) != mode)
		return CP_EPROTO;
	if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* Checks the header page against the welcome and the layout (read once). */
static int
check_header(const unsigned char *map, const struct cp_welcome *w,
    const struct cp_seg_layout *l)
{
	struct cp_seg_hdr h;

	ring_copy_out(&h, map, sizeof(h));
	if (h.magic != CP_SEG_MAGIC || h.version != CP_PROTO_VERSION ||
	    h.hdr_bytes != sizeof(h) || h.wake_mode != w->wake_mode ||
	    h.seg_bytes != l->seg_bytes || h.ctl_off != l->ctl_off ||
	    h.sq_off != l->sq_off || h.arena_off != l->arena_off ||
	    h.cq_off != l->cq_off || h.sq_entries != w->sq_entries ||
	    h.cq_entries != w->cq_entries || h.arena_bytes != w->arena_bytes ||
	    h.sqe_bytes != sizeof(struct cp_sqe) ||
	    h.cqe_bytes != sizeof(struct cp_cqe))
		return CP_EPROTO;
	return 0;
}

static void
copy_str(char *dst, const char *src, size_t size)
{
	memcpy(dst, src, size);
	dst[size - 1] = '\0';
}

int
cp_connect_v1(const struct cp_connect_opts *o, struct cp_client **out)
{
	struct cp_connect_opts def;
	struct cp_client *c;
	struct cp_welcome w;
	struct cp_hello h;
	struct cp_seg_layout l;
	int fds[CP_FD_MAX] = { -1, -1, -1 }, nfds = 0, r, i;
	void *map;

	*out = NULL;
	if (o == NULL)
		cp_connect_opts_init(&def);
	else if ((r = cpc_copy_in(&def, sizeof(def), o, CPC_OPTS_MIN)) < 0)
		return r;
	o = &def;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->sock = c->cq_rfd = c->sq_wfd = -1;
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : CPC_TIMEOUT_MS;
	pthread_mutex_init(&c->sq_lock, NULL);
	pthread_mutex_init(&c->cq_lock, NULL);
	pthread_mutex_init(&c->sock_lock, NULL);

	if ((r = dial(o->socket_path)) < 0)
		goto err;
	c->sock = r;
	memset(&h, 0, sizeof(h));
	cp_msg_hdr_set(&h.hdr, CP_MSG_HELLO);
	h.sq_entries = o->sq_entries;
	h.cq_entries = o->cq_entries;
	h.arena_bytes = o->arena_bytes;
	/* A refused peer may be closed already; its answer is still queued. */
	(void)send(c->sock, &h, sizeof(h), MSG_NOSIGNAL);

	r = recv_welcome(c->sock, &w, fds, &nfds, c->timeout_ms);
	if (r < 0)
		goto err;
	if ((r = check_welcome(&w, nfds, &l)) < 0)
		goto err;
	if ((r = check_memfd(fds[CP_FD_MEMFD], w.seg_bytes)) < 0 ||
	    (r = check_pipe(fds[CP_FD_CQ_WAKE], O_RDONLY)) < 0 ||
	    (w.wake_mode == CP_WAKE_FD &&
	    (r = check_pipe(fds[CP_FD_SQ_WAKE], O_WRONLY)) < 0))
		goto err;
	map = mmap(NULL, w.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
	    fds[CP_FD_MEMFD], 0);
	if (map == MAP_FAILED) {
		r = -errno;
		goto err;
	}
	c->map = map;
	c->map_len = w.seg_bytes;
	if ((r = check_header(c->map, &w, &l)) < 0)
		goto err;
	close(fds[CP_FD_MEMFD]);
	fds[CP_FD_MEMFD] = -1;
	c->cq_rfd = fds[CP_FD_CQ_WAKE];
	fds[CP_FD_CQ_WAKE] = -1;
	c->sq_wfd = fds[CP_FD_SQ_WAKE];
	fds[CP_FD_SQ_WAKE] = -1;

	c->wake_mode = w.wake_mode;
	c->ctl = (struct cp_seg_ctl *)(c->map + l.ctl_off);
	c->sq = (struct cp_sqe *)(c->map + l.sq_off);
	c->arena = c->map + l.arena_off;
	c->cq = (const struct cp_cqe *)(c->map + l.cq_off);
	c->sq_entries = w.sq_entries;
	c->cq_entries = w.cq_entries;
	c->arena_bytes = w.arena_bytes;
	c->max_prompt = w.max_prompt_bytes;
	c->max_reqs = w.max_reqs;
	c->features = w.features;
	c->slot_start = calloc(c->sq_entries, sizeof(*c->slot_start));
	if (c->slot_start == NULL) {
		r = -ENOMEM;
		goto err;
	}

	copy_str(c->info.name, w.model.name, sizeof(c->info.name));
	copy_str(c->info.arch, w.model.arch, sizeof(c->info.arch));
	copy_str(c->info.backend, w.model.backend, sizeof(c->info.backend));
	c->info.n_ctx = w.model.n_ctx;
	c->info.n_vocab = w.model.n_vocab;
	c->info.n_embd = w.model.n_embd;
	c->info.n_layer = w.model.n_layer;
	c->info.n_head = w.model.n_head;
	c->info.n_head_kv = w.model.n_head_kv;
	c->info.bos = w.model.bos;
	c->info.eos = w.model.eos;
	c->info.n_params = w.model.n_params;
	copy_str(c->info.chat_template, w.model.chat_template,
	    sizeof(c->info.chat_template));
	c->info.max_prompt_bytes = w.max_prompt_bytes;
	c->info.max_requests = w.max_reqs;
	*out = c;
	return 0;
err:
	for (i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	cp_close(c);
	return r;
}

void
cp_close(struct cp_client *c)
{
	if (c == NULL)
		return;
	if (c->map != NULL)
		munmap(c->map, c->map_len);
	if (c->sock >= 0)
		close(c->sock);
	if (c->cq_rfd >= 0)
		close(c->cq_rfd);
	if (c->sq_wfd >= 0)
		close(c->sq_wfd);
	pthread_mutex_destroy(&c->sq_lock);
	pthread_mutex_destroy(&c->cq_lock);
	pthread_mutex_destroy(&c->sock_lock);
	free(c->slot_start);
	free(c->text);
	free(c);
}

int
cp_model_info_v1(struct cp_client *c, struct cp_model_info *out, size_t size)
{
	return cpc_copy_out(out, size, &c->info, sizeof(c->info),
	    CPC_INFO_MIN);
}

_Static_assert(CP_HIST_BUCKETS == CP_STATS_BUCKETS, "histogram buckets");
_Static_assert(CP_DISC_REASONS == CP_END_REASONS &&
    CP_DISC_CLOSED == CP_END_CLOSED && CP_DISC_EXITED == CP_END_EXITED &&
    CP_DISC_PROTOCOL == CP_END_PROTOCOL && CP_DISC_TIMEOUT == CP_END_TIMEOUT &&
    CP_DISC_OVERFLOW == CP_END_OVERFLOW && CP_DISC_ERROR == CP_END_ERROR &&
    CP_DISC_SHUTDOWN == CP_END_SHUTDOWN, "disconnect reasons");

/* Checks one histogram (cp_proto.h's rules) and copies it; 0 or CP_EPROTO. */
static int
hist_copy(const struct cp_wire_hist *w, struct cp_histogram *h)
{
	uint64_t total = 0;
	int i, top = -1;

	if (w->reserved != 0 || w->le[CP_STATS_BUCKETS - 1] != UINT64_MAX)
		return CP_EPROTO;
	for (i = 0; i < (int)CP_STATS_BUCKETS; i++) {
		if (i > 0 && w->le[i] <= w->le[i - 1])
			return CP_EPROTO;
		if (w->n[i] > UINT64_MAX - total)
			return CP_EPROTO;
		total += w->n[i];
		if (w->n[i] > 0)
			top = i;
		h->le[i] = w->le[i];
		h->n[i] = w->n[i];
	}
	if (total != w->count)
		return CP_EPROTO;
	if (top < 0 && w->max != 0)
		return CP_EPROTO;
	if (top >= 0 && (w->max > w->le[top] ||
	    (top > 0 && w->max <= w->le[top - 1])))
		return CP_EPROTO;
	h->count = w->count;
	h->sum = w->sum;
	h->max = w->max;
	return 0;
}

/* Checks cp_proto.h's invariants of w and fills out; 0 or CP_EPROTO. */
static int
stats_copy(const struct cp_wire_stats *w, struct cp_stats *out)
{
	uint64_t ended = 0;
	unsigned i;

	for (i = 0; i < CP_END_REASONS; i++) {
		if (w->disconnects[i] > UINT64_MAX - ended)
			return CP_EPROTO;
		ended += w->disconnects[i];
		out->disconnects[i] = w->disconnects[i];
	}
	if (w->clients > w->clients_total ||
	    ended != w->clients_total - w->clients)
		return CP_EPROTO;
	if (w->kv_blocks_used > w->kv_blocks_total ||
	    w->kv_blocks_free != w->kv_blocks_total - w->kv_blocks_used ||
	    w->kv_blocks_cached > w->kv_blocks_free)
		return CP_EPROTO;
	if (w->requests_active > w->requests_total ||
	    w->pace_missed > w->pace_steps ||
	    (w->flags & ~(uint64_t)CP_STATS_DRAINING))
		return CP_EPROTO;
	if (w->reserved != 0)
		return CP_EPROTO;
	if (hist_copy(&w->step_prefill, &out->step_prefill) < 0 ||
	    hist_copy(&w->step_decode, &out->step_decode) < 0 ||
	    hist_copy(&w->step_seqs, &out->step_seqs) < 0 ||
	    hist_copy(&w->ttft_us, &out->ttft_us) < 0 ||
	    hist_copy(&w->itl_us, &out->itl_us) < 0)
		return CP_EPROTO;
	out->uptime_ms = w->uptime_ms;
	out->clients = w->clients;
	out->clients_total = w->clients_total;
	out->clients_rejected = w->clients_rejected;
	out->protocol_errors = w->protocol_errors;
	out->requests_total = w->requests_total;
	out->requests_active = w->requests_active;
	out->tokens_prompt = w->tokens_prompt;
	out->tokens_prompt_cached = w->tokens_prompt_cached;
	out->kv_blocks_cached = w->kv_blocks_cached;
	out->prefix_evictions = w->prefix_evictions;
	out->pace_target_us = w->pace_target_us;
	out->pace_est_us = w->pace_est_us;
	out->pace_meas_us = w->pace_meas_us;
	out->pace_err_us = w->pace_err_us;
	out->pace_steps = w->pace_steps;
	out->pace_missed = w->pace_missed;
	out->pace_missed_us = w->pace_missed_us;
	out->tokens_generated = w->tokens_generated;
	out->steps = w->steps;
	out->cq_stalls = w->cq_stalls;
	out->kv_blocks_used = w->kv_blocks_used;
	out->kv_blocks_total = w->kv_blocks_total;
	out->kv_blocks_free = w->kv_blocks_free;
	out->requests_waiting = w->requests_waiting;
	out->requests_running = w->requests_running;
	out->requests_refused = w->requests_refused;
	out->preemptions = w->preemptions;
	out->requests_paused = w->requests_paused;
	out->draining = (w->flags & CP_STATS_DRAINING) != 0;
	return 0;
}

/*
 * One request and its reply on the socket, under sock_lock: sends one
 * record of q (qlen bytes) followed by tail (tail_len bytes, maybe none),
 * waits up to the connection's timeout and receives one record of at most
 * rcap bytes into r, *rlen its length.  0, -ETIMEDOUT, CP_EDEAD or a
 * negative errno.
 */
static int
sock_call(struct cp_client *c, const void *q, size_t qlen, const void *tail,
    size_t tail_len, void *r, size_t rcap, size_t *rlen)
{
	struct iovec iov[2] = {
		{ .iov_base = (void *)(uintptr_t)q, .iov_len = qlen },
		{ .iov_base = (void *)(uintptr_t)tail, .iov_len = tail_len },
	};
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	struct pollfd p;
	uint64_t end;
	ssize_t n;
	int rc;

	do
		n = sendmsg(c->sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)(qlen + tail_len))
		return (n < 0 && errno != EPIPE && errno != ECONNRESET) ?
		    -errno : CP_EDEAD;
	end = cpc_now_ms() + (uint64_t)c->timeout_ms;
	for (;;) {
		uint64_t now = cpc_now_ms();

		if (now >= end)
			return -ETIMEDOUT;
		p.fd = c->sock;
		p.events = POLLIN;
		p.revents = 0;
		rc = poll(&p, 1, (int)(end - now));
		if (rc < 0 && errno != EINTR)
			return -errno;
		if (rc > 0)
			break;
	}
	do
		n = recv(c->sock, r, rcap, MSG_DONTWAIT | MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n == 0 || (n < 0 && errno == ECONNRESET))
		return CP_EDEAD;
	if (n < 0)
		return -errno;
	*rlen = (size_t)n;
	return 0;
}

int
cp_stats(struct cp_client *c, struct cp_stats *out)
{
	struct cp_stats_req q;
	struct cp_stats_msg *m;
	struct cp_stats st;
	size_t n = 0;
	int r;

	if ((r = cpc_broken(c)) < 0)
		return r;
	/* About 2 KiB: off the stack of callers with small ones. */
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return -ENOMEM;
	memset(&q, 0, sizeof(q));
	cp_msg_hdr_set(&q.hdr, CP_MSG_STATS_REQ);
	pthread_mutex_lock(&c->sock_lock);
	if ((r = sock_call(c, &q, sizeof(q), NULL, 0, m, sizeof(*m), &n)) < 0)
		goto out;
	if (n < offsetof(struct cp_stats_msg, stats) ||
	    m->hdr.magic != CP_PROTO_MAGIC || m->hdr.type != CP_MSG_STATS ||
	    m->hdr.version != CP_PROTO_VERSION) {
		r = cpc_fail(c, CP_EPROTO);
		goto out;
	}
	/* Another layout of the counters: this call fails, nothing else. */
	if (m->stats_version != CP_STATS_VERSION) {
		r = -EPROTONOSUPPORT;
		goto out;
	}
	if (n != sizeof(*m) ||
	    m->stats_bytes != sizeof(struct cp_wire_stats) ||
	    stats_copy(&m->stats, &st) < 0) {
		r = cpc_fail(c, CP_EPROTO);
		goto out;
	}
	*out = st;
	r = 0;
out:
	pthread_mutex_unlock(&c->sock_lock);
	free(m);
	return r;
}

_Static_assert(CP_TOK_BOS == CP_TOKF_BOS &&
    CP_TOK_PARSE_SPECIAL == CP_TOKF_PARSE_SPECIAL,
    "cp_tokenize flags are the wire's");

int
cp_tokenize(struct cp_client *c, const char *text, size_t len, int32_t *ids,
    size_t cap, uint32_t flags)
{
	struct cp_tokenize_req q;
	struct cp_tokens_msg *m;
	size_t n = 0, want;
	int r;

	if ((r = cpc_broken(c)) < 0)
		return r;
	if ((flags & ~(uint32_t)CP_TOKF_MASK) != 0 ||
	    (text == NULL && len > 0) || (ids == NULL && cap > 0))
		return -EINVAL;
	if (!(c->features & CP_FEAT_TOKENIZE))
		return -EOPNOTSUPP;
	if (len > CP_TOKENIZE_TEXT_MAX)
		return -E2BIG;
	want = cap < CP_TOKENIZE_IDS_MAX ? cap : CP_TOKENIZE_IDS_MAX;
	if ((m = calloc(1, sizeof(*m) + sizeof(int32_t) * want)) == NULL)
		return -ENOMEM;
	memset(&q, 0, sizeof(q));
	cp_msg_hdr_set(&q.hdr, CP_MSG_TOKENIZE);
	q.flags = flags;
	q.text_len = (uint32_t)len;
	q.max_ids = (uint32_t)want;
	pthread_mutex_lock(&c->sock_lock);
	if ((r = sock_call(c, &q, sizeof(q), text, len, m,
	    sizeof(*m) + sizeof(int32_t) * want, &n)) < 0)
		goto out;
	if (n < sizeof(*m) || m->hdr.magic != CP_PROTO_MAGIC ||
	    m->hdr.type != CP_MSG_TOKENS ||
	    m->hdr.version != CP_PROTO_VERSION) {
		r = cpc_fail(c, CP_EPROTO);
		goto out;
	}
	if (m->status < 0) {
		r = m->status > -4096 ? m->status : CP_EPROTO;
		goto out;
	}
	/* TOKENIZE rule 3: exactly min(n_ids, max_ids) ids. */
	if (m->status != 0 || m->n_ids > CP_TOKENIZE_IDS_MAX ||
	    m->n_sent != (m->n_ids < want ? m->n_ids : want) ||
	    n != sizeof(*m) + sizeof(int32_t) * m->n_sent) {
		r = cpc_fail(c, CP_EPROTO);
		goto out;
	}
	if (m->n_sent > 0)
		memcpy(ids, m + 1, sizeof(int32_t) * m->n_sent);
	r = (int)m->n_ids;
out:
	pthread_mutex_unlock(&c->sock_lock);
	free(m);
	return r;
}

_Static_assert(CP_DETOK_SPECIAL == CP_DETOKF_SPECIAL,
    "cp_detokenize flags are the wire's");

/*
 * Checks a PIECES reply of rlen bytes to a request for n ids with room for
 * max_bytes (cp_proto.h, DETOKENIZE rule 3): 0 or CP_EPROTO.
 */
static int
pieces_check(const struct cp_pieces_msg *m, size_t rlen, size_t n,
    uint32_t max_bytes)
{
	const unsigned char *p = (const unsigned char *)(m + 1);
	uint64_t sum = 0;
	uint32_t len;
	size_t i;

	if (m->status < 0)
		return m->status > -4096 && m->n_ids == 0 &&
		    m->n_bytes == 0 && m->n_sent == 0 &&
		    rlen == sizeof(*m) ? 0 : CP_EPROTO;
	if (m->status != 0 || m->n_ids != n ||
	    m->n_bytes > CP_DETOKENIZE_BYTES_MAX ||
	    m->n_sent != (m->n_bytes <= max_bytes ? m->n_bytes : 0) ||
	    rlen != sizeof(*m) + sizeof(uint32_t) * n + m->n_sent)
		return CP_EPROTO;
	for (i = 0; i < n; i++) {
		memcpy(&len, p + sizeof(len) * i, sizeof(len));
		sum += len;
	}
	return sum == m->n_bytes ? 0 : CP_EPROTO;
}

int
cp_detokenize(struct cp_client *c, const int32_t *ids, size_t n, char *buf,
    size_t size, uint32_t *lens, uint32_t flags)
{
	struct cp_detokenize_req q;
	struct cp_pieces_msg *m;
	size_t rlen = 0, rcap;
	uint32_t room;
	int r;

	if ((r = cpc_broken(c)) < 0)
		return r;
	if ((flags & ~(uint32_t)CP_DETOKF_MASK) != 0 ||
	    (n > 0 && (ids == NULL || lens == NULL)) ||
	    (buf == NULL && size > 0))
		return -EINVAL;
	if (!(c->features & CP_FEAT_DETOKENIZE))
		return -EOPNOTSUPP;
	if (n > CP_DETOKENIZE_IDS_MAX)
		return -E2BIG;
	room = size < CP_DETOKENIZE_BYTES_MAX ? (uint32_t)size :
	    CP_DETOKENIZE_BYTES_MAX;
	rcap = sizeof(*m) + sizeof(uint32_t) * n + room;
	if ((m = calloc(1, rcap)) == NULL)
		return -ENOMEM;
	memset(&q, 0, sizeof(q));
	cp_msg_hdr_set(&q.hdr, CP_MSG_DETOKENIZE);
	q.n_ids = (uint32_t)n;
	q.max_bytes = room;
	q.flags = flags;
	pthread_mutex_lock(&c->sock_lock);
	if ((r = sock_call(c, &q, sizeof(q), ids, sizeof(int32_t) * n, m, rcap,
	    &rlen)) < 0)
		goto out;
	if (rlen < sizeof(*m) || m->hdr.magic != CP_PROTO_MAGIC ||
	    m->hdr.type != CP_MSG_PIECES ||
	    m->hdr.version != CP_PROTO_VERSION ||
	    pieces_check(m, rlen, n, room) < 0) {
		r = cpc_fail(c, CP_EPROTO);
		goto out;
	}
	if (m->status < 0) {
		r = m->status;
		goto out;
	}
	if (n > 0)
		memcpy(lens, m + 1, sizeof(uint32_t) * n);
	if (m->n_bytes > size) {
		r = -ENOSPC;
		goto out;
	}
	if (m->n_sent > 0)
		memcpy(buf, (const unsigned char *)(m + 1) +
		    sizeof(uint32_t) * n, m->n_sent);
	r = (int)m->n_bytes;
out:
	pthread_mutex_unlock(&c->sock_lock);
	free(m);
	return r;
}

const char *
cp_strerror(int err)
{
	const char *s;

	switch (err) {
	case 0:
		return "success";
	case CP_EDEAD:
		return "the daemon closed the connection";
	case CP_EPROTO:
		return "the daemon sent invalid data";
	case -EACCES:
		return "permission denied (not on the daemon's allow list?)";
	case -EUSERS:
		return "too many connections or requests for this user";
	case -EAGAIN:
		return "nothing ready, or the daemon is full: try again";
	case -EBUSY:
		return "too many requests in flight: read events first";
	case -E2BIG:
		return "too long: the prompt or text exceeds the connection's "
		    "limit or the model's context";
	case -EPROTONOSUPPORT:
		return "the daemon speaks another protocol version";
	case -ENOENT:
	case -ECONNREFUSED:
		return "no daemon listening on the socket";
	case -ESHUTDOWN:
		return "the daemon is shutting down";
	case -ETIMEDOUT:
		return "timed out";
	}
	if (err < 0 && err > -4096 && (s = strerrordesc_np(-err)) != NULL)
		return s;
	return "unknown error";
}
