#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
cp_err_set(struct cp_err *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (e == NULL)
		return code;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return code;
}

int
cp_err_prefix(struct cp_err *e, const char *fmt, ...)
{
	char old[CP_ERR_MSG];
	va_list ap;
	int n;

	if (e == NULL)
		return 0;
	memcpy(old, e->msg, sizeof(old));
	va_start(ap, fmt);
	n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(e->msg))
		snprintf(e->msg + n, sizeof(e->msg) - (size_t)n, "%s", old);
	return e->code;
}
