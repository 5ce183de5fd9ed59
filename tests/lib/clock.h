/*
 * clock.h - the monotonic clock in milliseconds, for the tests' deadlines
 * and timings.
 */
#ifndef CP_TEST_CLOCK_H
#define CP_TEST_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in whole milliseconds. */
uint64_t clock_ms(void);

/* CLOCK_MONOTONIC in milliseconds, with the fraction. */
double clock_ms_f(void);

#endif
