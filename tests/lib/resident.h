/*
 * resident.h - whether memory is mapped in (mincore), for the tests of
 * the KV cache's page handling.  Asserts with Check: call from a test.
 */
#ifndef CP_TEST_RESIDENT_H
#define CP_TEST_RESIDENT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether every page of [p, p + n) is resident. */
bool resident(const void *p, size_t n);

#endif
