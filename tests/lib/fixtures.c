#include "fixtures.h"
#include "suite.h"

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FX_DEFAULT "../shared/models"

static char fx_buf[PATH_MAX];

/*
 * Walk up from the working directory to the repository root (the first
 * directory holding both Makefile-or-.git and engine/), so the default works
 * from build/tests as well as from the root.
 */
static int
fx_find_root(char *root, size_t size)
{
	char probe[PATH_MAX + 16];
	char *slash;

	if (getcwd(root, size) == NULL)
		return -1;
	for (;;) {
		snprintf(probe, sizeof(probe), "%s/engine/gguf.h", root);
		if (access(probe, F_OK) == 0)
			return 0;
		slash = strrchr(root, '/');
		if (slash == NULL || slash == root)
			return -1;
		*slash = '\0';
	}
}

const char *
fx_dir(void)
{
	const char *env = getenv("CP_FIXTURES");
	char root[PATH_MAX];

	if (env != NULL && env[0] != '\0')
		return env;
	if (fx_buf[0] != '\0')
		return fx_buf;
	if (fx_find_root(root, sizeof(root)) == 0 &&
	    (size_t)snprintf(fx_buf, sizeof(fx_buf), "%s/%s", root,
	    FX_DEFAULT) < sizeof(fx_buf))
		return fx_buf;
	snprintf(fx_buf, sizeof(fx_buf), "%s", FX_DEFAULT);
	return fx_buf;
}

char *
fx_path(const char *rel)
{
	const char *dir = fx_dir();
	size_t n = strlen(dir) + 1 + strlen(rel) + 1;
	char *p;

	if ((p = malloc(n)) == NULL)
		return NULL;
	snprintf(p, n, "%s/%s", dir, rel);
	if (access(p, R_OK) != 0) {
		free(p);
		return NULL;
	}
	return p;
}

char *
fx_need(const char *rel)
{
	char *p = fx_path(rel);

	if (p == NULL)
		printf("fixtures not found in %s (%s): skipped\n", fx_dir(),
		    rel);
	return p;
}

int
fx_main(const char *name, const char *rel)
{
	char *p = fx_need(rel);

	if (p == NULL)
		return 77;
	free(p);
	return suite_main(suite_registered(name));
}
