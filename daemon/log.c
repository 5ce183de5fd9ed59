/*
 * log.c - the daemon's diagnostics (see log.h).
 */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOG_LINE 1024

static int log_level = LOG_LVL_INFO;
static int log_fd = -1;

void
log_init(int level, int fd)
{
	__atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
	__atomic_store_n(&log_fd, fd, __ATOMIC_RELAXED);
}

int
log_setlevel(int level)
{
	return __atomic_exchange_n(&log_level, level, __ATOMIC_RELAXED);
}

int
log_getlevel(void)
{
	return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

/* Formats "cpd: <tag><message>[: <strerror(err)>]\n" and writes it once. */
static void
log_vwrite(const char *tag, int err, const char *fmt, va_list ap)
{
	char line[LOG_LINE];
	size_t n;
	int fd, r;

	r = snprintf(line, sizeof(line), "cpd: %s", tag);
	n = r < 0 ? 0 : (size_t)r;
	if (n < sizeof(line)) {
		r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
		if (r > 0)
			n += (size_t)r;
	}
	if (err != 0 && n < sizeof(line)) {
		r = snprintf(line + n, sizeof(line) - n, ": %s", strerror(err));
		if (r > 0)
			n += (size_t)r;
	}
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;	/* truncated: keep room for '\n' */
	line[n++] = '\n';
	fd = __atomic_load_n(&log_fd, __ATOMIC_RELAXED);
	if (fd < 0)
		fd = STDERR_FILENO;
	while (write(fd, line, n) < 0 && errno == EINTR)
		;
}

void
log_warn(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (log_getlevel() >= LOG_LVL_WARN) {
		va_start(ap, fmt);
		log_vwrite("warning: ", saved, fmt, ap);
		va_end(ap);
	}
	errno = saved;
}

void
log_warnx(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (log_getlevel() >= LOG_LVL_WARN) {
		va_start(ap, fmt);
		log_vwrite("warning: ", 0, fmt, ap);
		va_end(ap);
	}
	errno = saved;
}

void
log_info(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (log_getlevel() >= LOG_LVL_INFO) {
		va_start(ap, fmt);
		log_vwrite("", 0, fmt, ap);
		va_end(ap);
	}
	errno = saved;
}

void
log_debug(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (log_getlevel() >= LOG_LVL_DEBUG) {
		va_start(ap, fmt);
		log_vwrite("debug: ", 0, fmt, ap);
		va_end(ap);
	}
	errno = saved;
}

void
fatal(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite("fatal: ", saved, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite("fatal: ", 0, fmt, ap);
	va_end(ap);
	exit(1);
}
