/*
 * tfile.c - whole files read and written by tests (tfile.h).
 */
#include "tfile.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

char *
tfile_read(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	char *buf;
	long len;

	ck_assert_msg(fp != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(fp, 0, SEEK_END), 0);
	len = ftell(fp);
	ck_assert_int_ge(len, 0);
	ck_assert_int_eq(fseek(fp, 0, SEEK_SET), 0);
	buf = malloc((size_t)len + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)len, fp), (size_t)len);
	buf[len] = '\0';
	fclose(fp);
	if (n != NULL)
		*n = (size_t)len;
	return buf;
}

void
tfile_write(const char *path, const void *p, size_t n)
{
	FILE *fp = fopen(path, "wb");

	ck_assert_msg(fp != NULL, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(p, 1, n, fp), n);
	ck_assert_int_eq(fclose(fp), 0);
}
