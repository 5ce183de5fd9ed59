/*
 * cpd_proc.h - the real cpd binary as a child process, for the tests that
 * drive it through its socket (check_daemon, check_cpd): started with its
 * stderr in a log file in a fresh directory under tmp_dir(), waited for
 * until it listens, stopped with SIGTERM or killed.  The functions assert
 * with Check: call them from a test.
 */
#ifndef CP_TEST_CPD_PROC_H
#define CP_TEST_CPD_PROC_H

#include <sys/types.h>

#define CPD_PROC_WAIT_MS 20000	/* start-up and exit, at most */

struct cpd {
	pid_t pid;		/* 0 once reaped */
	char dir[256];
	char sock[300];
	char log[300];		/* its stderr */
};

/*
 * Starts bin -m model --socket SOCK --threads 1, then extra (NULL-
 * terminated; later flags override earlier ones), and waits until it
 * listens.  The daemon gets SIGKILL if the test process dies first.
 */
void cpd_start_bin(struct cpd *d, const char *bin, const char *model,
    const char *const *extra);

/* The first 256 KiB of the file at path contain needle. */
int cpd_file_has(const char *path, const char *needle);

/* The daemon's stderr so far contains needle. */
int cpd_log_has(const struct cpd *d, const char *needle);

/* The daemon's stderr has needle within 10 s (asserts). */
void cpd_await_log(const struct cpd *d, const char *needle);

/* Waits up to CPD_PROC_WAIT_MS for cpd to exit; its status, -1 if killed. */
int cpd_wait(struct cpd *d);

/* Kills the daemon if it runs; removes its socket, log and directory. */
void cpd_cleanup(struct cpd *d);

/* SIGTERM with nothing in flight: exits 0 and removes its socket. */
void cpd_stop(struct cpd *d);

/*
 * For a test program's main(): finds the built cpd into cpd and, unless
 * cpmodel is NULL, cpmodel (size bytes each, see prog_find()), and the
 * fixture rel.  Returns rel's path (malloc'd, the caller frees), or NULL
 * after saying on stdout that the program who is skipped.
 */
char *cpd_need(const char *who, char *cpd, char *cpmodel, size_t size,
    const char *rel);

#endif
