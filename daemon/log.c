/*
 * log.c - the daemon's diagnostics (see log.h).
 */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_LINE 1024

/* syslog(3) priorities, the journal's "<N>" prefixes. */
#define PRIO_ERR	3
#define PRIO_WARNING	4
#define PRIO_NOTICE	5
#define PRIO_INFO	6
#define PRIO_DEBUG	7

static int log_level = LOG_LVL_INFO;
static int log_fd = -1;
static int log_journal;		/* 1: lines start with "<N>" */

/*
 * Whether fd is the journal's stream: $JOURNAL_STREAM ("DEV:INODE", set
 * by systemd for a unit's stdout and stderr) names the same file.
 */
static int
is_journal(int fd)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (js == NULL || sscanf(js, "%llu:%llu%c", &dev, &ino, &end) != 2 ||
	    fstat(fd, &st) != 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	    (unsigned long long)st.st_ino == ino;
}

void
log_init(int level, int fd)
{
	__atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
	__atomic_store_n(&log_fd, fd, __ATOMIC_RELAXED);
	__atomic_store_n(&log_journal, is_journal(fd < 0 ? STDERR_FILENO : fd),
	    __ATOMIC_RELAXED);
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

/*
 * Formats "[<prio>]cpd: <tag><message>[: <strerror(err)>]\n" and writes it
 * once.
 */
static void
log_vwrite(int prio, const char *tag, int err, const char *fmt, va_list ap)
{
	char line[LOG_LINE];
	size_t n;
	int fd, r;

	if (__atomic_load_n(&log_journal, __ATOMIC_RELAXED))
		r = snprintf(line, sizeof(line), "<%d>cpd: %s", prio, tag);
	else
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

/*
 * One logging function: written when the level allows, with ": " and
 * strerror(errno) when err, errno kept.
 */
#define LOG_FN(name, lvl, prio, tag, err)				\
void									\
name(const char *fmt, ...)						\
{									\
	int saved = errno;						\
	va_list ap;							\
									\
	if (log_getlevel() >= (lvl)) {					\
		va_start(ap, fmt);					\
		log_vwrite((prio), (tag), (err) ? saved : 0, fmt, ap);	\
		va_end(ap);						\
	}								\
	errno = saved;							\
}

LOG_FN(log_err, LOG_LVL_ERROR, PRIO_ERR, "error: ", 1)
LOG_FN(log_errx, LOG_LVL_ERROR, PRIO_ERR, "error: ", 0)
LOG_FN(log_warn, LOG_LVL_WARN, PRIO_WARNING, "warning: ", 1)
LOG_FN(log_warnx, LOG_LVL_WARN, PRIO_WARNING, "warning: ", 0)
LOG_FN(log_notice, LOG_LVL_NOTICE, PRIO_NOTICE, "", 0)
LOG_FN(log_info, LOG_LVL_INFO, PRIO_INFO, "", 0)
LOG_FN(log_debug, LOG_LVL_DEBUG, PRIO_DEBUG, "debug: ", 0)

void
fatal(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(PRIO_ERR, "fatal: ", saved, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(PRIO_ERR, "fatal: ", 0, fmt, ap);
	va_end(ap);
	exit(1);
}
