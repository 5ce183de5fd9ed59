/*
 * fault.h - fault injection for tests: the Nth call of a class of
 * allocations or system calls made by the daemon fails with a chosen
 * errno, or returns a short count.
 *
 * How the calls get here.  Release objects are not touched: the test
 * build makes copies of libcpdaemon.a, libcpengine.a and libcpclient.a
 * with objcopy --redefine-syms (tests/lib/fault.syms), so that in the
 * copies each call to malloc(), read(), io_uring_submit() ... names
 * fault_malloc(), fault_read(), fault_io_uring_submit() ... instead.  Only
 * test programs that link the copies (check_faults) run these wrappers;
 * cpd and every other program link the original archives and carry no
 * trace of them.  Each wrapper
 * counts the call in its class and either fails it or calls the real
 * function.
 *
 * Counters and the plan live in one shared anonymous mapping made by
 * fault_setup(), so a daemon forked by cpd_harness.h counts into memory
 * the test reads, and the test turns counting on and off there while the
 * daemon runs (fault_count()).
 */
#ifndef CP_TEST_FAULT_H
#define CP_TEST_FAULT_H

#include <stdint.h>
#include <sys/types.h>

enum fault_class {
	FAULT_ALLOC,	/* malloc, calloc, realloc */
	FAULT_SUBMIT,	/* io_uring_submit*, __io_uring_get_cqe, epoll_wait */
	FAULT_CQE,	/* a completion's result, rewritten */
	FAULT_IO,	/* read, write, send*, recv*, accept4, connect */
	FAULT_MEM,	/* memfd_create, mmap, ftruncate, eventfd, pipe2 */
	FAULT_THREAD,	/* pthread_create */
	FAULT_FUTEX,	/* syscall(SYS_futex, ...) */
	FAULT_NCLASS
};

/* The err of a plan that makes read() and write() return a short count. */
#define FAULT_SHORT	(-1)

/* The class's name ("alloc", "submit" ...), or NULL. */
const char *fault_class_name(int cls);

/* The class named name, or -1. */
int fault_class_parse(const char *name);

/*
 * Makes the shared counters (once per process; a forked child shares
 * them); 0 or -errno.  Resets the counters and clears the plan.
 */
int fault_setup(void);

/*
 * Resets the counters and stops counting; once counting, call nth (from
 * 1) of class cls will fail with err (an errno value or FAULT_SHORT); nth
 * 0 injects nothing.
 */
void fault_plan(int cls, uint64_t nth, int err);

/* Turns counting (and so injecting) on (1) or off (0), in every process. */
void fault_count(int on);

/* Only process pid's calls count from now on (0, as after fault_plan(): any). */
void fault_target(pid_t pid);

/*
 * The calling thread's own calls are not counted (on 1) or are again (0):
 * a test that plays the io loop leaves its own allocations out.
 */
void fault_ignore_thread(int on);

/* Calls of class cls counted since the plan was set. */
uint64_t fault_calls(int cls);

/* 1 when the planned failure was injected. */
int fault_fired(void);

#endif
