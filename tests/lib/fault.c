/*
 * fault.c - the wrappers that objcopy's renaming sends the daemon's calls
 * to, and their shared counters (see fault.h).
 */
#include "fault.h"

#include <errno.h>
#include <execinfo.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

struct fault_state {
	uint64_t calls[FAULT_NCLASS];
	uint64_t nth;
	int cls, err;
	int counting;		/* fault_count() */
	pid_t pid;		/* fault_target(); 0: any process */
	int fired;
};

static struct fault_state *fs;
static __thread int thread_ignored;	/* fault_ignore_thread() */

static const char *const class_names[FAULT_NCLASS] = {
	"alloc", "submit", "cqe", "io", "mem", "thread", "futex",
};

const char *
fault_class_name(int cls)
{
	return cls >= 0 && cls < FAULT_NCLASS ? class_names[cls] : NULL;
}

int
fault_class_parse(const char *name)
{
	int i;

	for (i = 0; i < FAULT_NCLASS; i++)
		if (strcmp(name, class_names[i]) == 0)
			return i;
	return -1;
}

int
fault_setup(void)
{
	void *p;

	if (fs == NULL) {
		p = mmap(NULL, sizeof(*fs), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -errno;
		fs = p;
	}
	memset(fs, 0, sizeof(*fs));
	fs->cls = -1;
	return 0;
}

void
fault_plan(int cls, uint64_t nth, int err)
{
	if (fs == NULL)
		return;
	__atomic_store_n(&fs->counting, 0, __ATOMIC_SEQ_CST);
	memset(fs->calls, 0, sizeof(fs->calls));
	fs->cls = cls;
	fs->nth = nth;
	fs->err = err;
	fs->fired = 0;
	fs->pid = 0;
}

void
fault_target(pid_t pid)
{
	if (fs != NULL)
		__atomic_store_n(&fs->pid, pid, __ATOMIC_SEQ_CST);
}

void
fault_count(int on)
{
	if (fs != NULL)
		__atomic_store_n(&fs->counting, on, __ATOMIC_SEQ_CST);
}

void
fault_ignore_thread(int on)
{
	thread_ignored = on;
}

uint64_t
fault_calls(int cls)
{
	if (fs == NULL || cls < 0 || cls >= FAULT_NCLASS)
		return 0;
	return __atomic_load_n(&fs->calls[cls], __ATOMIC_SEQ_CST);
}

int
fault_fired(void)
{
	return fs != NULL && __atomic_load_n(&fs->fired, __ATOMIC_SEQ_CST);
}

/* What a call can be failed with, for hit(): */
#define CAN_ERR		1u	/* any errno */
#define CAN_SHORT	2u	/* a short count */
#define CAN_EINTR	4u	/* EINTR (implied by CAN_ERR) */

/*
 * Counts a call of class cls; the errno to fail it with (FAULT_SHORT for
 * a short count), or 0 to let it through.  can: CAN_* (a plan the call
 * cannot meet in the kernel lets it through).
 */
static int
hit_can(int cls, unsigned can)
{
	uint64_t n;

	if (fs == NULL || thread_ignored ||
	    !__atomic_load_n(&fs->counting, __ATOMIC_SEQ_CST))
		return 0;
	if (fs->pid != 0 && getpid() != fs->pid)
		return 0;
	n = __atomic_add_fetch(&fs->calls[cls], 1, __ATOMIC_SEQ_CST);
	if (cls != fs->cls || n != fs->nth)
		return 0;
	if (fs->err == FAULT_SHORT ? !(can & CAN_SHORT) :
	    !(can & CAN_ERR) && !(fs->err == EINTR && (can & CAN_EINTR)))
		return 0;
	__atomic_store_n(&fs->fired, 1, __ATOMIC_SEQ_CST);
	if (getenv("CP_FAULT_VERBOSE") != NULL) {
		void *bt[16];

		backtrace_symbols_fd(bt, backtrace(bt, 16), 2);
	}
	return fs->err;
}

static int
hit(int cls, int can_short)
{
	return hit_can(cls, CAN_ERR | (can_short ? CAN_SHORT : 0));
}

/* As hit(), setting errno for a call that reports through it. */
static int
hit_errno(int cls)
{
	int e = hit(cls, 0);

	if (e != 0)
		errno = e;
	return e;
}

/*
 * The wrappers.  Nothing calls them by these names: objcopy renames the
 * daemon's calls (tests/lib/fault.syms).
 */
void *fault_malloc(size_t n);
void *fault_calloc(size_t n, size_t size);
void *fault_realloc(void *p, size_t n);
int fault_io_uring_submit(struct io_uring *ring);
int fault_io_uring_submit_and_wait_timeout(struct io_uring *ring,
    struct io_uring_cqe **cqe, unsigned wait_nr,
    struct __kernel_timespec *ts, sigset_t *sigmask);
int fault___io_uring_get_cqe(struct io_uring *ring,
    struct io_uring_cqe **cqe, unsigned submit, unsigned wait_nr,
    sigset_t *sigmask);
int fault_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms);
ssize_t fault_read(int fd, void *buf, size_t n);
ssize_t fault_write(int fd, const void *buf, size_t n);
ssize_t fault_recvmsg(int fd, struct msghdr *m, int flags);
ssize_t fault_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t fault_recv(int fd, void *buf, size_t n, int flags);
ssize_t fault_send(int fd, const void *buf, size_t n, int flags);
int fault_connect(int fd, const struct sockaddr *addr, socklen_t len);
long fault_syscall(long nr, ...);
ssize_t fault_sendto(int fd, const void *buf, size_t n, int flags,
    const struct sockaddr *to, socklen_t tolen);
int fault_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
int fault_memfd_create(const char *name, unsigned flags);
void *fault_mmap(void *addr, size_t len, int prot, int flags, int fd,
    off_t off);
int fault_ftruncate(int fd, off_t len);
int fault_eventfd(unsigned init, int flags);
int fault_pipe2(int p[2], int flags);
int fault_pthread_create(pthread_t *th, const pthread_attr_t *attr,
    void *(*fn)(void *), void *arg);

void *
fault_malloc(size_t n)
{
	return hit_errno(FAULT_ALLOC) ? NULL : malloc(n);
}

void *
fault_calloc(size_t n, size_t size)
{
	return hit_errno(FAULT_ALLOC) ? NULL : calloc(n, size);
}

void *
fault_realloc(void *p, size_t n)
{
	return hit_errno(FAULT_ALLOC) ? NULL : realloc(p, n);
}

/*
 * Completions: each final one (a multishot poll's continuing ones are
 * never errors) is counted once, when a wait returns; the planned one
 * gets res = -err (the kernel's way to fail an operation).  The rings of one process are few: their progress is kept
 * in a small table.
 */
#define FAULT_RINGS 8
static struct {
	const struct io_uring *ring;
	unsigned seen;		/* completions counted up to this index */
} rings[FAULT_RINGS];
static pthread_mutex_t rings_mu = PTHREAD_MUTEX_INITIALIZER;

static void
scan_cqes(struct io_uring *ring)
{
	unsigned head, tail, i;
	int e, slot = -1, k;

	if (fs == NULL || !__atomic_load_n(&fs->counting, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&rings_mu);
	for (k = 0; k < FAULT_RINGS; k++) {
		if (rings[k].ring == ring) {
			slot = k;
			break;
		}
		if (slot < 0 && rings[k].ring == NULL)
			slot = k;
	}
	if (slot < 0)
		goto out;
	if (rings[slot].ring != ring) {
		rings[slot].ring = ring;
		rings[slot].seen = *ring->cq.khead;
	}
	head = __atomic_load_n(ring->cq.khead, __ATOMIC_ACQUIRE);
	tail = __atomic_load_n(ring->cq.ktail, __ATOMIC_ACQUIRE);
	i = (int)(rings[slot].seen - head) > 0 ? rings[slot].seen : head;
	for (; i != tail; i++) {
		struct io_uring_cqe *c = &ring->cq.cqes[i & ring->cq.ring_mask];

		/* The kernel fails only a request's last completion. */
		if (c->flags & IORING_CQE_F_MORE)
			continue;
		if ((e = hit(FAULT_CQE, 0)) != 0)
			c->res = -e;
	}
	rings[slot].seen = tail;
out:
	pthread_mutex_unlock(&rings_mu);
}

int
fault_io_uring_submit(struct io_uring *ring)
{
	int e = hit(FAULT_SUBMIT, 0);

	return e ? -e : io_uring_submit(ring);
}

/* A wait's result r, after counting the completions it brought. */
static int
scanned(struct io_uring *ring, int r)
{
	scan_cqes(ring);
	return r;
}

int
fault_io_uring_submit_and_wait_timeout(struct io_uring *ring,
    struct io_uring_cqe **cqe, unsigned wait_nr,
    struct __kernel_timespec *ts, sigset_t *sigmask)
{
	int e = hit(FAULT_SUBMIT, 0);

	return e ? -e : scanned(ring, io_uring_submit_and_wait_timeout(ring,
	    cqe, wait_nr, ts, sigmask));
}

int
fault___io_uring_get_cqe(struct io_uring *ring, struct io_uring_cqe **cqe,
    unsigned submit, unsigned wait_nr, sigset_t *sigmask)
{
	int e = hit(FAULT_SUBMIT, 0);

	return e ? -e : scanned(ring, __io_uring_get_cqe(ring, cqe, submit,
	    wait_nr, sigmask));
}

int
fault_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms)
{
	return hit_errno(FAULT_SUBMIT) ? -1 : epoll_wait(epfd, ev, max, ms);
}

/* Counts shorter than this (eventfd words, wake bytes) are never cut. */
#define SHORT_MIN 9

/* The count a read() or write() asks for under fault e (-1: fail it). */
static ssize_t
io_count(int e, size_t n)
{
	if (e == FAULT_SHORT)
		return (ssize_t)(n / 2);
	if (e == 0)
		return (ssize_t)n;
	errno = e;
	return -1;
}

ssize_t
fault_read(int fd, void *buf, size_t n)
{
	ssize_t k = io_count(hit(FAULT_IO, n >= SHORT_MIN), n);

	return k < 0 ? -1 : read(fd, buf, (size_t)k);
}

/*
 * A write of 8 bytes or less signals (an eventfd word, a wake byte): the
 * kernel fails it only with EINTR, its EAGAIN meaning "already signalled".
 */
ssize_t
fault_write(int fd, const void *buf, size_t n)
{
	ssize_t k = io_count(hit_can(FAULT_IO, n >= SHORT_MIN ?
	    CAN_ERR | CAN_SHORT : CAN_EINTR), n);

	return k < 0 ? -1 : write(fd, buf, (size_t)k);
}

ssize_t
fault_recvmsg(int fd, struct msghdr *m, int flags)
{
	return hit_errno(FAULT_IO) ? -1 : recvmsg(fd, m, flags);
}

ssize_t
fault_sendmsg(int fd, const struct msghdr *m, int flags)
{
	return hit_errno(FAULT_IO) ? -1 : sendmsg(fd, m, flags);
}

ssize_t
fault_sendto(int fd, const void *buf, size_t n, int flags,
    const struct sockaddr *to, socklen_t tolen)
{
	return hit_errno(FAULT_IO) ? -1 : sendto(fd, buf, n, flags, to, tolen);
}

ssize_t
fault_recv(int fd, void *buf, size_t n, int flags)
{
	return hit_errno(FAULT_IO) ? -1 : recv(fd, buf, n, flags);
}

ssize_t
fault_send(int fd, const void *buf, size_t n, int flags)
{
	return hit_errno(FAULT_IO) ? -1 : send(fd, buf, n, flags);
}

int
fault_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	return hit_errno(FAULT_IO) ? -1 : connect(fd, addr, len);
}

/*
 * syscall(): futex calls count in their class; every call passes six
 * arguments on, as syscall() itself reads them.
 */
long
fault_syscall(long nr, ...)
{
	long a[6];
	va_list ap;
	int i;

	va_start(ap, nr);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (nr == SYS_futex && hit_errno(FAULT_FUTEX))
		return -1;
	return syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int
fault_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	return hit_errno(FAULT_IO) ? -1 : accept4(fd, addr, len, flags);
}

int
fault_memfd_create(const char *name, unsigned flags)
{
	return hit_errno(FAULT_MEM) ? -1 : memfd_create(name, flags);
}

void *
fault_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return hit_errno(FAULT_MEM) ? MAP_FAILED :
	    mmap(addr, len, prot, flags, fd, off);
}

int
fault_ftruncate(int fd, off_t len)
{
	return hit_errno(FAULT_MEM) ? -1 : ftruncate(fd, len);
}

int
fault_eventfd(unsigned init, int flags)
{
	return hit_errno(FAULT_MEM) ? -1 : eventfd(init, flags);
}

int
fault_pipe2(int p[2], int flags)
{
	return hit_errno(FAULT_MEM) ? -1 : pipe2(p, flags);
}

int
fault_pthread_create(pthread_t *th, const pthread_attr_t *attr,
    void *(*fn)(void *), void *arg)
{
	int e = hit(FAULT_THREAD, 0);

	return e ? e : pthread_create(th, attr, fn, arg);
}
