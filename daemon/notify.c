/*
 * notify.c - sd_notify datagrams (notify.h).
 */
#include "notify.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine_port.h"
#include "stats.h"

static int nfd = -1;
static struct sockaddr_un naddr;
static socklen_t nlen;

static pthread_t nth;
static bool nth_started;
static pthread_mutex_t nmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ncv = PTHREAD_COND_INITIALIZER;
static bool nquit;

int
notify_init(void)
{
	const char *p = getenv("NOTIFY_SOCKET");
	size_t n;

	if (p == NULL || p[0] == '\0')
		return 0;
	n = strlen(p);
	if ((p[0] != '/' && p[0] != '@') || n >= sizeof(naddr.sun_path))
		return -EINVAL;
	memset(&naddr, 0, sizeof(naddr));
	naddr.sun_family = AF_UNIX;
	memcpy(naddr.sun_path, p, n);
	if (p[0] == '@')
		naddr.sun_path[0] = '\0';	/* abstract namespace */
	nlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
	    (p[0] == '/'));
	if ((nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	return 0;
}

void
notify_raw(const char *msg)
{
	if (nfd >= 0)
		(void)sendto(nfd, msg, strlen(msg), MSG_NOSIGNAL,
		    (const struct sockaddr *)&naddr, nlen);
}

void
notify_status(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	if (nfd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "STATUS=");
	va_start(ap, fmt);
	(void)vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	notify_raw(buf);
}

/* $WATCHDOG_USEC when it is meant for this process, else 0. */
static uint64_t
watchdog_usec(void)
{
	const char *u = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	char *end;
	unsigned long long v;

	if (u == NULL)
		return 0;
	if (pid != NULL && strtol(pid, NULL, 10) != (long)getpid())
		return 0;
	errno = 0;
	v = strtoull(u, &end, 10);
	return errno == 0 && *end == '\0' ? v : 0;
}

struct nthread {
	struct engine_port *port;
	uint64_t period_ms;
	bool watchdog;
};

static struct nthread nt;

static void *
notify_thread(void *arg)
{
	struct nthread *t = arg;
	struct ep_stats es;
	struct timespec ts;
	uint64_t last_tok = 0, last_ns = stats_now_ns(), since = 0;

	pthread_mutex_lock(&nmu);
	while (!nquit) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)(t->period_ms / 1000);
		ts.tv_nsec += (long)(t->period_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (pthread_cond_timedwait(&ncv, &nmu, &ts) != ETIMEDOUT ||
		    nquit)
			continue;
		pthread_mutex_unlock(&nmu);
		if (t->watchdog)
			notify_raw("WATCHDOG=1");
		since += t->period_ms;
		if (since >= NOTIFY_STATUS_MS) {
			uint64_t now = stats_now_ns();

			ep_stats_get(t->port, &es);
			notify_status("serving: %llu requests running, %llu "
			    "waiting; %.1f tokens/s",
			    (unsigned long long)es.requests_running,
			    (unsigned long long)es.requests_waiting,
			    now > last_ns ? (double)(es.tokens_generated -
			    last_tok) * 1e9 / (double)(now - last_ns) : 0);
			last_tok = es.tokens_generated;
			last_ns = now;
			since = 0;
		}
		pthread_mutex_lock(&nmu);
	}
	pthread_mutex_unlock(&nmu);
	return NULL;
}

int
notify_start(struct engine_port *port)
{
	uint64_t wd = watchdog_usec();
	int rc;

	if (nfd < 0)
		return 0;
	nt.port = port;
	nt.watchdog = wd > 0;
	nt.period_ms = NOTIFY_STATUS_MS;
	if (wd > 0 && wd / 2000 < nt.period_ms)
		nt.period_ms = wd / 2000 > 0 ? wd / 2000 : 1;
	nquit = false;
	if ((rc = pthread_create(&nth, NULL, notify_thread, &nt)) != 0)
		return -rc;
	nth_started = true;
	return 0;
}

void
notify_stop(void)
{
	if (nth_started) {
		pthread_mutex_lock(&nmu);
		nquit = true;
		pthread_cond_signal(&ncv);
		pthread_mutex_unlock(&nmu);
		pthread_join(nth, NULL);
		nth_started = false;
	}
	if (nfd >= 0) {
		close(nfd);
		nfd = -1;
	}
}
