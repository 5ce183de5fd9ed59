/*
 * ioloop.h - the daemon's event loop backends: io_uring with futex
 * opcodes, io_uring without them, and epoll.
 *
 * The server speaks to one small interface; which backend runs is chosen
 * at start-up by probing (or forced, for tests and odd kernels):
 *
 *	IOLOOP_URING_FUTEX  io_uring; idle waits are FUTEX_WAIT (opcode 51)
 *			    on clients' sq_tail words, wake-ups of sleeping
 *			    clients FUTEX_WAKE (52), batched into one
 *			    io_uring_enter.  Kernels from 6.7.
 *	IOLOOP_URING_FD	    io_uring without futex opcodes: clients and daemon
 *			    wake each other through wake pipes, polled and
 *			    written through the ring.
 *	IOLOOP_EPOLL	    io_uring refused (kernel.io_uring_disabled, a
 *			    seccomp profile): epoll over the same pipes.
 *
 * Every backend delivers the same events: readiness of a watched
 * descriptor, completion of a futex wait.  Tags are the caller's 64-bit
 * names for them; tag 0 is reserved.  Watches are persistent until
 * ioloop_unwatch(); a watch the kernel ended by itself is reported once
 * with IOLOOP_F_ENDED and must be renewed by the caller if still wanted.
 * Queued work (wakes, pipe writes, cancels) goes to the kernel at the next
 * ioloop_flush() or ioloop_wait(), in one system call on io_uring.
 */
#ifndef CP_IOLOOP_H
#define CP_IOLOOP_H

#include <stdint.h>

#define IOLOOP_AUTO		0
#define IOLOOP_URING_FUTEX	1
#define IOLOOP_URING_FD		2
#define IOLOOP_EPOLL		3

#define IOLOOP_EV_READY		1	/* res: poll revents (>= 0) or -errno */
#define IOLOOP_EV_FUTEX		2	/* res: 0 woken, -EAGAIN changed, -errno */

#define IOLOOP_F_ENDED		0x1u	/* watch no longer armed */

struct ioloop_ev {
	uint64_t tag;
	int32_t res;
	uint16_t type;		/* IOLOOP_EV_* */
	uint16_t flags;		/* IOLOOP_F_* */
};

struct ioloop;

/*
 * Makes a loop of the given kind; IOLOOP_AUTO probes for the best that
 * works here.  Returns 0 and *out, or a negative errno (-EOPNOTSUPP when a
 * forced kind is unavailable).
 */
int ioloop_new(int kind, struct ioloop **out);

/* Frees l (NULL accepted); descriptors it watched stay open. */
void ioloop_free(struct ioloop *l);

/* The kind that runs (IOLOOP_URING_FUTEX, _URING_FD or _EPOLL). */
int ioloop_kind(const struct ioloop *l);

/* Static name of a kind: "io_uring+futex", "io_uring+pipes", "epoll", "auto". */
const char *ioloop_kind_name(int kind);

/* Parses "auto", "futex", "fd" (or "uring"), "epoll" into *kind; 0 or -EINVAL. */
int ioloop_kind_parse(const char *s, int *kind);

/* Watch fd for poll events (POLLIN, POLLRDHUP...) under tag; 0 or -errno. */
int ioloop_watch(struct ioloop *l, int fd, uint32_t events, uint64_t tag);

/* Stop watching fd (tag as watched); call before closing fd; 0 or -errno. */
int ioloop_unwatch(struct ioloop *l, int fd, uint64_t tag);

/*
 * IOLOOP_URING_FUTEX only: wait while *addr == val (a shared, not private,
 * futex), one completion under tag.  0 or -EOPNOTSUPP / -errno.
 */
int ioloop_futex_wait(struct ioloop *l, uint32_t *addr, uint32_t val,
    uint64_t tag);

/* Cancel a pending futex wait by tag (its completion may still arrive). */
int ioloop_futex_cancel(struct ioloop *l, uint64_t tag);

/* IOLOOP_URING_FUTEX only: queue a FUTEX_WAKE of all waiters on *addr. */
int ioloop_futex_wake(struct ioloop *l, uint32_t *addr);

/* Queue a one-byte write to a non-blocking wake pipe fd (EAGAIN ignored). */
int ioloop_signal_fd(struct ioloop *l, int fd);

/* Hand queued work to the kernel now; 0 or -errno. */
int ioloop_flush(struct ioloop *l);

/*
 * Submits queued work and waits up to timeout_ms (-1: no limit) for at
 * least one event; stores up to max events in ev.  Returns the number
 * stored (0 on timeout or a signal) or a negative errno.
 */
int ioloop_wait(struct ioloop *l, int timeout_ms, struct ioloop_ev *ev,
    int max);

/* 1 when this kernel's io_uring runs FUTEX_WAIT/FUTEX_WAKE, else 0 (a real probe). */
int ioloop_probe_futex(void);

#endif
