/*
 * check_stall.c - a client that stops reading its completion ring, as the
 * daemon's log tells it: the requests are paused, then cancelled once
 * client_stall_timeout has passed, and that is logged once per stall,
 * however many periods the client then stays paused.  A daemon process
 * (daemon/server.c with the mock engine of tests/lib) and a libcpclient
 * client.
 */
#include "cpclient.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/cpd_harness.h"
#include "lib/suite.h"

#define STALL_MS 200
#define NEEDLE "completion ring full for"

/* How many times needle occurs in the daemon's log. */
static int
log_count(const struct hd *d, const char *needle)
{
	static char buf[1 << 18];
	const char *p;
	ssize_t n;
	int fd, k = 0;

	fd = open(d->log, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	for (p = buf; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		k++;
	return k;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * Regression: "completion ring full for 1000 ms, requests cancelled" was
 * logged again every period while the client stayed paused, although
 * nothing new was cancelled.  Here the client stays paused for many
 * periods: one line.  A second stall (new requests, the ring still full)
 * is a second line.
 */
START_TEST(test_stall_logged_once)
{
	struct cp_connect_opts o;
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	char prompt[200];
	struct hd d;
	int id;

	memset(prompt, 's', sizeof(prompt));
	hd_config(&cfg);
	cfg.stall_timeout_ms = STALL_MS;
	mock_opts_default(&mo);
	mo.step_us = 100;
	ck_assert_int_eq(hd_start(&d, &cfg, &mo), 0);
	cp_connect_opts_init(&o);
	o.socket_path = d.path;
	o.cq_entries = 16;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	id = cp_submit(c, prompt, sizeof(prompt), NULL);
	ck_assert_int_gt(id, 0);
	/* not reading: 16 slots fill at once, then 8 periods pass */
	sleep_ms(9 * STALL_MS);
	ck_assert_int_eq(log_count(&d, NEEDLE), 1);
	ck_assert_int_eq(hd_log_has(&d, NEEDLE " 200 ms, 1 requests "
	    "cancelled"), 1);
	/* a second stall: the ring is still full, a new request pauses */
	id = cp_submit(c, prompt, sizeof(prompt), NULL);
	ck_assert_int_gt(id, 0);
	sleep_ms(6 * STALL_MS);
	ck_assert_int_eq(log_count(&d, NEEDLE), 2);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("stall", test_stall_logged_once);

SUITE_CASE("stall", 30);

int
main(void)
{
	return suite_main(suite_registered("stall"));
}
