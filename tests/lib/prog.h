/*
 * prog.h - running one of the project's programs from a test.
 */
#ifndef CP_TEST_PROG_H
#define CP_TEST_PROG_H

#include <stddef.h>

/*
 * Run prog with the NULL-terminated arguments after out (argv[0] is prog),
 * its stdout and stderr into the file out (created or truncated; NULL for
 * /dev/null); returns its exit status.  Asserts (Check) that it started
 * and exited rather than died.
 */
int prog_run(const char *prog, const char *out, ...);

/*
 * Run argv[0] with argv (NULL-terminated), its stdout read into out
 * (NUL-terminated, at most cap - 1 bytes), its stderr to /dev/null;
 * returns its exit status.  Asserts (Check) that it exited.
 */
int prog_capture(const char *const *argv, char *out, size_t cap);

#endif
