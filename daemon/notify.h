/*
 * notify.h - telling a service manager how cpd is doing: systemd's
 * sd_notify datagrams, written directly (no libsystemd).
 *
 * When $NOTIFY_SOCKET names a socket (a path, or "@name" in the abstract
 * namespace), each call sends one datagram of "KEY=value" lines to it:
 * STATUS= while loading and serving, READY=1 once the model is loaded,
 * warmed up and the socket listens, STOPPING=1 when a drain starts, and
 * WATCHDOG=1 every half $WATCHDOG_USEC when the unit asks for a watchdog
 * (a thread of notify_start()'s, with the serving STATUS line every
 * NOTIFY_STATUS_MS).  Without $NOTIFY_SOCKET every call does nothing.
 */
#ifndef CP_NOTIFY_H
#define CP_NOTIFY_H

#include <stdint.h>

#define NOTIFY_STATUS_MS	5000

struct engine_port;

/* Reads $NOTIFY_SOCKET and opens the datagram socket; 0, or -errno. */
int notify_init(void);

/* Sends msg as it is (async-signal-safe: for STOPPING=1 from a handler). */
void notify_raw(const char *msg);

/* Sends "STATUS=<fmt ...>" */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Starts the thread that sends WATCHDOG=1 (when $WATCHDOG_USEC asks) and a
 * STATUS line of the port's counters (requests, tokens per second) while
 * cpd serves; 0 or -errno.  Does nothing without $NOTIFY_SOCKET.
 */
int notify_start(struct engine_port *port);

/* Stops that thread and closes the socket. */
void notify_stop(void);

#endif
