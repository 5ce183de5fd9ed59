/*
 * prog.h - running one of the project's programs from a test.
 */
#ifndef CP_TEST_PROG_H
#define CP_TEST_PROG_H

/*
 * Run prog with the NULL-terminated arguments after out (argv[0] is prog),
 * its stdout and stderr into the file out (created or truncated; NULL for
 * /dev/null); returns its exit status.  Asserts (Check) that it started
 * and exited rather than died.
 */
int prog_run(const char *prog, const char *out, ...);

#endif
