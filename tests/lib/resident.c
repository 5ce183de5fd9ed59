/*
 * resident.c - see resident.h.
 */
#include "resident.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

bool
resident(const void *p, size_t n)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p / pg * pg;
	uintptr_t z = ((uintptr_t)p + n + pg - 1) / pg * pg;
	size_t np = (z - a) / pg, i;
	unsigned char *v = malloc(np);
	bool all = true;

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(mincore((void *)a, z - a, v), 0);
	for (i = 0; i < np; i++)
		all = all && (v[i] & 1);
	free(v);
	return all;
}
