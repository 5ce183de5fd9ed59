/*
 * error.h - error values carried out of the engine.
 *
 * Engine functions return 0 or a negative errno value.  Where a caller needs
 * to tell a user what was wrong (a bad file, a missing key), the function
 * also fills a struct cp_err whose message names the file, key or tensor and
 * the expected range.  A NULL struct cp_err pointer is always accepted.
 */
#ifndef CP_ERROR_H
#define CP_ERROR_H

#define CP_ERR_MSG 320

struct cp_err {
	int code;		/* negative errno, 0 when unset */
	char msg[CP_ERR_MSG];	/* NUL-terminated, human readable */
};

/* Record code (negative errno) and a printf-style message in e (may be NULL); returns code. */
int cp_err_set(struct cp_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix e's message with a printf-style context ("file.gguf: "); returns e->code. */
int cp_err_prefix(struct cp_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
