/*
 * prog.h - running one of the project's programs from a test.
 */
#ifndef CP_TEST_PROG_H
#define CP_TEST_PROG_H

#include <stddef.h>

/*
 * The program name of this build into path (size bytes): $env when env
 * names a variable that is set and not empty, else $BUILD/bin/name (BUILD
 * unset or empty: build/bin/name).  Returns 0 when it is executable, else
 * -1.
 */
int prog_find(char *path, size_t size, const char *name, const char *env);

/*
 * The first executable name in a folder of $PATH, into path (size bytes);
 * 0, or -1 when there is none.
 */
int prog_in_path(char *path, size_t size, const char *name);

/*
 * Run argv[0] with argv (NULL-terminated), its stdout and stderr into the
 * file out (created or truncated; NULL for /dev/null); returns its exit
 * status.  Asserts (Check) that it started and exited rather than died.
 */
int prog_runv(const char *const *argv, const char *out);

/* prog_runv() of prog and the NULL-terminated arguments after out. */
int prog_run(const char *prog, const char *out, ...);

/*
 * Run argv[0] with argv (NULL-terminated), its stdout read into out
 * (NUL-terminated, at most cap - 1 bytes, the rest read and dropped),
 * its stderr to /dev/null;
 * returns its exit status.  Asserts (Check) that it exited.
 */
int prog_capture(const char *const *argv, char *out, size_t cap);

#endif
