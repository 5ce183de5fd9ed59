/*
 * log.h - the daemon's diagnostics, in the manner of OpenBSD daemons.
 *
 * One line per call, written with a single write(2) to the log descriptor
 * (stderr unless log_init() says otherwise), so lines from the io loop and
 * the engine thread never interleave mid-line.  log_warn() and fatal()
 * append ": " and strerror(errno); the x variants do not.  fatal() and
 * fatalx() exit(1): only for start-up failures and broken invariants, never
 * for a bad client.  When stderr is the journal's stream ($JOURNAL_STREAM),
 * each line starts with its syslog priority, "<3>" for errors, "<4>"
 * warnings, "<5>" notices, "<6>" information and "<7>" debug messages, as
 * systemd-journald reads them.
 */
#ifndef CP_LOG_H
#define CP_LOG_H

#include <stdarg.h>

/* The levels, from the most severe; cpd.yaml's log_level values in order. */
#define LOG_LVL_ERROR	0	/* fatal messages only */
#define LOG_LVL_WARN	1
#define LOG_LVL_NOTICE	2	/* a change of the daemon's state: serving,
				   reloaded, draining, shutting down */
#define LOG_LVL_INFO	3
#define LOG_LVL_DEBUG	4

/* Send lines at or below level to fd (borrowed; -1 = stderr). */
void log_init(int level, int fd);

/* Change the level; returns the previous one. */
int log_setlevel(int level);

/* The current level. */
int log_getlevel(void);

/*
 * An error that stops cpd (start-up), with and without ": strerror(errno)";
 * logged at every level.
 */
void log_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Warning with ": strerror(errno)" appended; errno is preserved. */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Warning. */
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A change of the daemon's state that an operator wants to see at a
 * quieter level than info (what systemd's daemons log at notice).
 */
void log_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Informational message. */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Debug message (only at LOG_LVL_DEBUG). */
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Logs with ": strerror(errno)" and exits with status 1. */
void fatal(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

/* Logs and exits with status 1. */
void fatalx(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

#endif
