/*
 * suite.h - running a Check suite from a test program's main().
 */
#ifndef CP_TEST_SUITE_H
#define CP_TEST_SUITE_H

#include <check.h>

/* Runs s (taken, freed) with CK_NORMAL output; the number of tests failed. */
int suite_run(Suite *s);

#endif
