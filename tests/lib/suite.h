/*
 * suite.h - building a Check suite from tables and running it from a test
 * program's main().
 */
#ifndef CP_TEST_SUITE_H
#define CP_TEST_SUITE_H

#include <stdbool.h>

#include <check.h>

/*
 * One test of a case: a plain test when lo and hi are both 0, else a loop
 * test run once for each _i in [lo, hi).  A NULL test ends a case's list.
 */
struct suite_test {
	const TTest	*test;
	int		 lo, hi;
};

/* Setup and teardown around a case's tests. */
struct suite_fixture {
	SFun		 setup, teardown;
	bool		 checked;	/* run in each test's process */
};

/* One test case: its tests in order, what they run under. */
struct suite_case {
	const char			*name;	/* NULL ends a list */
	int				 timeout; /* seconds; 0 keeps Check's */
	const struct suite_test		*tests;	/* NULL: the case left out */
	const struct suite_fixture	*fixture; /* or NULL */
};

/* Adds cases (ended by a case with a NULL name) to s, in order. */
void suite_add_cases(Suite *s, const struct suite_case *cases);

/* A new suite (the caller runs it) of cases, ended by a NULL name. */
Suite *suite_make(const char *name, const struct suite_case *cases);

/* Runs s (taken, freed) with CK_NORMAL output; the number of tests failed. */
int suite_run(Suite *s);

/* suite_run(s) for main(): 0 when every test passed, else 1. */
int suite_main(Suite *s);

/*
 * suite_main(s) for a program that could not run all its tests (all false):
 * when every test that ran passed, prints the printf-style fmt on stdout and
 * returns 77 (skipped).
 */
int suite_main_some(Suite *s, bool all, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
