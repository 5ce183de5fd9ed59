/*
 * sock_path.h - where the daemon's socket is, as cpd and libcpclient both
 * resolve it: the path given (when not empty), else $CPD_SOCKET, else
 * $XDG_RUNTIME_DIR/cpd.sock, else /run/cpd/cpd.sock (the system-wide
 * service's).
 */
#ifndef CP_SOCK_PATH_H
#define CP_SOCK_PATH_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* The path into buf: 0, or -ENAMETOOLONG when it does not fit size bytes. */
static inline int
sock_path_resolve(const char *given, char *buf, size_t size)
{
	const char *env;
	int n;

	if (given != NULL && *given != '\0')
		n = snprintf(buf, size, "%s", given);
	else if ((env = getenv("CPD_SOCKET")) != NULL && *env != '\0')
		n = snprintf(buf, size, "%s", env);
	else if ((env = getenv("XDG_RUNTIME_DIR")) != NULL && *env != '\0')
		n = snprintf(buf, size, "%s/cpd.sock", env);
	else
		n = snprintf(buf, size, "/run/cpd/cpd.sock");
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

#endif
