/*
 * suite.h - building a Check suite and running it from a test program's
 * main().
 *
 * A test is registered where it is written, right after its END_TEST:
 *
 *	START_TEST(test_round_trip) { ... } END_TEST
 *	SUITE_TEST("api", test_round_trip);
 *
 * and main() runs every registered test:
 *
 *	return suite_main(suite_registered("gguf"));
 *
 * Cases are made on first use and run in the order they first appear in the
 * file, their tests in file order.  SUITE_CASE gives a case a timeout and
 * SUITE_FIXTURE its setup and teardown; suite_case_skip() leaves a case out
 * at run time (a fixture or a device that is missing).
 */
#ifndef CP_TEST_SUITE_H
#define CP_TEST_SUITE_H

#include <stdbool.h>

#include <check.h>

/* Setup and teardown around a case's tests. */
struct suite_fixture {
	SFun		 setup, teardown;
	bool		 checked;	/* run in each test's process */
};

/* Registration, for the macros below; line orders cases and tests. */
void suite_register_test(const char *tcase, const TTest *test, bool loop,
    int lo, int hi, int line);
void suite_register_case(const char *tcase, int timeout,
    const struct suite_fixture *fixture, int line);

#define SUITE_CAT_(a, b)	a ## b
#define SUITE_CAT(a, b)		SUITE_CAT_(a, b)

#define SUITE_REG_(tc, t, loop, lo, hi)					\
	__attribute__((constructor)) static void			\
	suite_reg_ ## t(void)						\
	{								\
		suite_register_test((tc), t, (loop), (lo), (hi),	\
		    __LINE__);						\
	}								\
	_Static_assert(1, "")

/* Test t (a START_TEST name) in case tc (a string), run once. */
#define SUITE_TEST(tc, t)	SUITE_REG_(tc, t, false, 0, 0)

/*
 * Test t in case tc, run once for each _i in [lo, hi).  The bounds are
 * evaluated before main(), so a count main() fills in comes too late: an
 * empty range stops the program (unless its case is skipped).
 */
#define SUITE_LOOP(tc, t, lo, hi)	SUITE_REG_(tc, t, true, lo, hi)

/* Case tc's timeout in seconds (0 keeps Check's). */
#define SUITE_CASE(tc, timeout)						\
	__attribute__((constructor)) static void			\
	SUITE_CAT(suite_case_, __LINE__)(void)				\
	{								\
		suite_register_case((tc), (timeout), NULL, __LINE__);	\
	}								\
	_Static_assert(1, "")

/* Case tc's timeout and its setup and teardown: checked (run in each test's
 * process) when checked is true, else once around the case. */
#define SUITE_FIXTURE(tc, timeout, setup, teardown, checked)		\
	static const struct suite_fixture				\
	    SUITE_CAT(suite_fix_, __LINE__) =				\
	    { (setup), (teardown), (checked) };				\
	__attribute__((constructor)) static void			\
	SUITE_CAT(suite_case_, __LINE__)(void)				\
	{								\
		suite_register_case((tc), (timeout),			\
		    &SUITE_CAT(suite_fix_, __LINE__), __LINE__);		\
	}								\
	_Static_assert(1, "")

/* Leaves registered case tc out of suite_registered(). */
void suite_case_skip(const char *tcase);

/*
 * A new suite (the caller runs it) of every registered case not skipped.
 * Exits the program with a message when a case has no test or a case was
 * skipped that does not exist, so that a typo cannot hide tests.
 */
Suite *suite_registered(const char *name);

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
