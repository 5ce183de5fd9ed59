/*
 * tfile.h - whole files read and written by tests, with a Check failure
 * where that does not work.  Call them from a test.
 */
#ifndef CP_TEST_TFILE_H
#define CP_TEST_TFILE_H

#include <stddef.h>

/*
 * The whole file at path, NUL-terminated (malloc'd; caller frees); its
 * size in *n when n is not NULL.
 */
char *tfile_read(const char *path, size_t *n);

/* Replace the file at path with the n bytes at p. */
void tfile_write(const char *path, const void *p, size_t n);

#endif
