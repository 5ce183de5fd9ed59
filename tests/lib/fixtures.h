/*
 * fixtures.h - where tests find the shared, read-only model fixtures.
 *
 * The directory is $CP_FIXTURES when set and non-empty, else ../shared/models
 * relative to the repository root (tests run from the root or from a
 * directory below it, such as build/tests).
 */
#ifndef CP_TEST_FIXTURES_H
#define CP_TEST_FIXTURES_H

/* The fixtures directory (static storage, valid for the process); never NULL. */
const char *fx_dir(void);

/* Malloc'd path of fx_dir()/rel (caller frees), or NULL when that file is absent. */
char *fx_path(const char *rel);

/*
 * fx_path(rel) for a test program's main(): when the file is absent, says
 * on stdout that the program is skipped (it then returns 77) and returns
 * NULL.
 */
char *fx_need(const char *rel);

struct Suite;

/*
 * A test program's main(): when the fixture rel exists, runs the registered
 * tests as suite name and returns 0 (every test passed) or 1; else says so on
 * stdout and returns 77 (skipped).
 */
int fx_main(const char *name, const char *rel);

#endif
