/*
 * tmpdir.c - where tests write their temporary files (tmpdir.h).
 */
#include "tmpdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

const char *
tmp_dir(void)
{
	static char buf[4096];
	const char *t = getenv("TMPDIR");

	if (t != NULL && t[0] != '\0')
		return t;
	if (buf[0] == '\0') {
		snprintf(buf, sizeof(buf), "%s%s%s/tmp", CP_BUILD[0] == '/' ?
		    "" : CP_SRCDIR, CP_BUILD[0] == '/' ? "" : "/", CP_BUILD);
		(void)mkdir(buf, 0755);
	}
	return buf;
}
