/*
 * ioloop.c - io_uring and epoll backends of the daemon's event loop (see
 * ioloop.h).
 *
 * io_uring: watches are multishot polls whose user_data is the caller's
 * tag; futex waits carry the tag with IOLOOP_TAG_FUTEX set so their
 * completions read as IOLOOP_EV_FUTEX; everything the loop issues for
 * itself (poll removals, cancels, wakes, pipe writes) carries user_data 0
 * and its completion is dropped here.  Queued SQEs reach the kernel in the
 * io_uring_enter of the next flush or wait, so the wake-ups after an engine
 * step cost one system call however many clients sleep.
 *
 * epoll: level-triggered watches with the tag in data.u64; pipe writes are
 * immediate non-blocking write()s; futex operations are unavailable.
 */
#include "ioloop.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <liburing.h>

#include "log.h"
#include "uring_futex.h"

#define IOLOOP_TAG_FUTEX	(1ull << 63)
#define URING_ENTRIES		256
#define URING_CQ_ENTRIES	4096
#define EPOLL_BATCH		64

struct ioloop {
	int kind;
	struct io_uring ring;	/* URING kinds */
	int ring_ready;
	int epfd;		/* EPOLL */
	struct epoll_event eev[EPOLL_BATCH];
};

/* The byte written to wake pipes; static so it outlives any queued write. */
static const unsigned char wake_byte = 1;

const char *
ioloop_kind_name(int kind)
{
	switch (kind) {
	case IOLOOP_URING_FUTEX:
		return "io_uring+futex";
	case IOLOOP_URING_FD:
		return "io_uring+pipes";
	case IOLOOP_EPOLL:
		return "epoll";
	default:
		return "auto";
	}
}

int
ioloop_kind_parse(const char *s, int *kind)
{
	if (s == NULL || *s == '\0' || strcmp(s, "auto") == 0)
		*kind = IOLOOP_AUTO;
	else if (strcmp(s, "futex") == 0)
		*kind = IOLOOP_URING_FUTEX;
	else if (strcmp(s, "fd") == 0 || strcmp(s, "uring") == 0)
		*kind = IOLOOP_URING_FD;
	else if (strcmp(s, "epoll") == 0)
		*kind = IOLOOP_EPOLL;
	else
		return -EINVAL;
	return 0;
}

static int
uring_init(struct io_uring *ring)
{
	struct io_uring_params p;
	int r;

	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CQSIZE;
	p.cq_entries = URING_CQ_ENTRIES;
	r = io_uring_queue_init_params(URING_ENTRIES, ring, &p);
	if (r == -EINVAL)
		r = io_uring_queue_init(URING_ENTRIES, ring, 0);
	return r;
}

int
ioloop_probe_futex(void)
{
	struct io_uring ring;
	int ok;

	if (uring_init(&ring) < 0)
		return 0;
	ok = uring_futex_probe(&ring);
	io_uring_queue_exit(&ring);
	return ok;
}

int
ioloop_new(int kind, struct ioloop **out)
{
	struct ioloop *l;
	int r;

	*out = NULL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	l->epfd = -1;
	if (kind != IOLOOP_EPOLL) {
		r = uring_init(&l->ring);
		if (r < 0) {
			if (kind != IOLOOP_AUTO) {
				log_warnx("io_uring refused: %s", strerror(-r));
				goto err;
			}
			log_info("io_uring refused (%s), using epoll",
			    strerror(-r));
			kind = IOLOOP_EPOLL;
		} else {
			l->ring_ready = 1;
			if (uring_futex_probe(&l->ring)) {
				if (kind == IOLOOP_AUTO)
					kind = IOLOOP_URING_FUTEX;
			} else if (kind == IOLOOP_URING_FUTEX) {
				r = -EOPNOTSUPP;
				goto err;
			} else {
				kind = IOLOOP_URING_FD;
			}
		}
	}
	if (kind == IOLOOP_EPOLL) {
		if (l->ring_ready) {
			io_uring_queue_exit(&l->ring);
			l->ring_ready = 0;
		}
		l->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (l->epfd < 0) {
			r = -errno;
			goto err;
		}
	}
	l->kind = kind;
	*out = l;
	return 0;
err:
	ioloop_free(l);
	return r;
}

void
ioloop_free(struct ioloop *l)
{
	if (l == NULL)
		return;
	if (l->ring_ready)
		io_uring_queue_exit(&l->ring);
	if (l->epfd >= 0)
		close(l->epfd);
	free(l);
}

int
ioloop_kind(const struct ioloop *l)
{
	return l->kind;
}

/* A free SQE, submitting what is queued when the SQ ring is full; NULL if none. */
static struct io_uring_sqe *
uring_sqe(struct ioloop *l)
{
	struct io_uring_sqe *sqe;

	sqe = io_uring_get_sqe(&l->ring);
	if (sqe == NULL) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

int
ioloop_watch(struct ioloop *l, int fd, uint32_t events, uint64_t tag)
{
	struct io_uring_sqe *sqe;
	struct epoll_event ev;

	if (tag == 0 || (tag & IOLOOP_TAG_FUTEX))
		return -EINVAL;
	if (l->kind == IOLOOP_EPOLL) {
		memset(&ev, 0, sizeof(ev));
		ev.events = events;	/* POLL* and EPOLL* bits agree */
		ev.data.u64 = tag;
		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			return -errno;
		return 0;
	}
	if ((sqe = uring_sqe(l)) == NULL)
		return -EBUSY;
	io_uring_prep_poll_multishot(sqe, fd, events);
	io_uring_sqe_set_data64(sqe, tag);
	return 0;
}

int
ioloop_unwatch(struct ioloop *l, int fd, uint64_t tag)
{
	struct io_uring_sqe *sqe;

	if (l->kind == IOLOOP_EPOLL) {
		if (epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL) < 0)
			return -errno;
		return 0;
	}
	if ((sqe = uring_sqe(l)) == NULL)
		return -EBUSY;
	io_uring_prep_poll_remove(sqe, tag);
	io_uring_sqe_set_data64(sqe, 0);
	return 0;
}

int
ioloop_futex_wait(struct ioloop *l, uint32_t *addr, uint32_t val, uint64_t tag)
{
	struct io_uring_sqe *sqe;

	if (l->kind != IOLOOP_URING_FUTEX)
		return -EOPNOTSUPP;
	if (tag == 0 || (tag & IOLOOP_TAG_FUTEX))
		return -EINVAL;
	if ((sqe = uring_sqe(l)) == NULL)
		return -EBUSY;
	uring_prep_futex_wait(sqe, addr, val);
	io_uring_sqe_set_data64(sqe, tag | IOLOOP_TAG_FUTEX);
	return 0;
}

int
ioloop_futex_cancel(struct ioloop *l, uint64_t tag)
{
	struct io_uring_sqe *sqe;

	if (l->kind != IOLOOP_URING_FUTEX)
		return -EOPNOTSUPP;
	if ((sqe = uring_sqe(l)) == NULL)
		return -EBUSY;
	io_uring_prep_cancel64(sqe, tag | IOLOOP_TAG_FUTEX, 0);
	io_uring_sqe_set_data64(sqe, 0);
	return 0;
}

int
ioloop_futex_wake(struct ioloop *l, uint32_t *addr)
{
	struct io_uring_sqe *sqe;

	if (l->kind != IOLOOP_URING_FUTEX)
		return -EOPNOTSUPP;
	if ((sqe = uring_sqe(l)) == NULL)
		return -EBUSY;
	uring_prep_futex_wake(sqe, addr, INT_MAX);
	io_uring_sqe_set_data64(sqe, 0);
	return 0;
}

int
ioloop_signal_fd(struct ioloop *l, int fd)
{
	struct io_uring_sqe *sqe;

	if (l->kind == IOLOOP_EPOLL) {
		/* Our own non-blocking end: a full pipe is already readable. */
		while (write(fd, &wake_byte, 1) < 0 && errno == EINTR)
			;
		return 0;
	}
	if ((sqe = uring_sqe(l)) == NULL)
		return -EBUSY;
	io_uring_prep_write(sqe, fd, &wake_byte, 1, (uint64_t)-1);
	io_uring_sqe_set_data64(sqe, 0);
	return 0;
}

int
ioloop_flush(struct ioloop *l)
{
	int r;

	if (l->kind == IOLOOP_EPOLL)
		return 0;
	r = io_uring_submit(&l->ring);
	return r < 0 ? r : 0;
}

static int
uring_wait(struct ioloop *l, int timeout_ms, struct ioloop_ev *ev, int max)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	int r, n = 0;

	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
	}
	r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1,
	    timeout_ms >= 0 ? &ts : NULL, NULL);
	if (r < 0 && r != -ETIME && r != -EINTR && r != -EAGAIN &&
	    r != -EBUSY)
		return r;
	io_uring_for_each_cqe(&l->ring, head, cqe) {
		uint64_t ud = cqe->user_data;

		if (n >= max)
			break;
		seen++;
		if (ud == 0 || ud == LIBURING_UDATA_TIMEOUT) {
			if (cqe->res < 0 && cqe->res != -ENOENT &&
			    cqe->res != -EALREADY && cqe->res != -EAGAIN)
				log_debug("io_uring internal op: %s",
				    strerror(-cqe->res));
			continue;
		}
		ev[n].tag = ud & ~IOLOOP_TAG_FUTEX;
		ev[n].res = cqe->res;
		if (ud & IOLOOP_TAG_FUTEX) {
			ev[n].type = IOLOOP_EV_FUTEX;
			ev[n].flags = IOLOOP_F_ENDED;
		} else {
			ev[n].type = IOLOOP_EV_READY;
			ev[n].flags = (cqe->flags & IORING_CQE_F_MORE) ?
			    0 : IOLOOP_F_ENDED;
		}
		n++;
	}
	io_uring_cq_advance(&l->ring, seen);
	return n;
}

static int
epoll_wait_events(struct ioloop *l, int timeout_ms, struct ioloop_ev *ev,
    int max)
{
	int i, r;

	if (max > EPOLL_BATCH)
		max = EPOLL_BATCH;
	r = epoll_wait(l->epfd, l->eev, max, timeout_ms);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	for (i = 0; i < r; i++) {
		ev[i].tag = l->eev[i].data.u64;
		ev[i].res = (int32_t)(l->eev[i].events & 0x7fffffffu);
		ev[i].type = IOLOOP_EV_READY;
		ev[i].flags = 0;
	}
	return r;
}

int
ioloop_wait(struct ioloop *l, int timeout_ms, struct ioloop_ev *ev, int max)
{
	if (max <= 0)
		return -EINVAL;
	if (l->kind == IOLOOP_EPOLL)
		return epoll_wait_events(l, timeout_ms, ev, max);
	return uring_wait(l, timeout_ms, ev, max);
}
