/*
 * child.h - asking a question in a child process, for probes that must
 * leave this one untouched (the CUDA runtime does not survive fork(), and
 * Check runs each test in a forked child).
 */
#ifndef CP_TEST_CHILD_H
#define CP_TEST_CHILD_H

#include <stddef.h>

/*
 * Runs fn(why, len) in a child process and returns its result, clamped to
 * 0..100; the text fn left in its why comes back in why (NUL-terminated).
 * 0, why saying so, when the child could not be started or did not exit.
 */
int child_probe(int (*fn)(char *why, size_t len), char *why, size_t len);

#endif
