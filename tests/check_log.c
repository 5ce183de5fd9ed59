/*
 * check_log.c - the daemon's log lines (daemon/log.c): the five levels of
 * log_level, and the syslog priority each line carries when its
 * descriptor is the journal's stream ($JOURNAL_STREAM, systemd.exec(5)).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

static char path[300];
static int fd = -1;

/* A fresh log file in fd; journal: $JOURNAL_STREAM names it. */
static void
open_log(int journal)
{
	struct stat st;
	char env[64];

	snprintf(path, sizeof(path), "%s/log-%d.txt", tmp_dir(),
	    (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
	    (unsigned long long)st.st_ino);
	if (journal)
		ck_assert_int_eq(setenv("JOURNAL_STREAM", env, 1), 0);
	else
		unsetenv("JOURNAL_STREAM");
}

/* What was logged, NUL-terminated in buf; the file is removed. */
static const char *
read_log(char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	close(fd);
	fd = -1;
	unlink(path);
	return buf;
}

/* One line at each level, the debug one last. */
static void
log_each(void)
{
	log_errx("e");
	log_warnx("w");
	log_notice("n");
	log_info("i");
	log_debug("d");
}

/* On the journal's stream a notice is "<5>", between warnings and info. */
START_TEST(test_notice_priority)
{
	char buf[512];

	open_log(1);
	log_init(LOG_LVL_DEBUG, fd);
	log_each();
	ck_assert_str_eq(read_log(buf, sizeof(buf)),
	    "<3>cpd: error: e\n<4>cpd: warning: w\n<5>cpd: n\n<6>cpd: i\n"
	    "<7>cpd: debug: d\n");
}
END_TEST
SUITE_TEST("levels", test_notice_priority);

/* Each level logs what is as severe as it, and nothing less severe. */
START_TEST(test_levels_filter)
{
	static const char *const want[] = {
		[LOG_LVL_ERROR] = "cpd: error: e\n",
		[LOG_LVL_WARN] = "cpd: error: e\ncpd: warning: w\n",
		[LOG_LVL_NOTICE] = "cpd: error: e\ncpd: warning: w\ncpd: n\n",
		[LOG_LVL_INFO] = "cpd: error: e\ncpd: warning: w\ncpd: n\n"
		    "cpd: i\n",
	};
	char buf[512];

	for (int lvl = LOG_LVL_ERROR; lvl <= LOG_LVL_INFO; lvl++) {
		open_log(0);
		log_init(lvl, fd);
		log_each();
		ck_assert_str_eq(read_log(buf, sizeof(buf)), want[lvl]);
	}
}
END_TEST
SUITE_TEST("levels", test_levels_filter);

/* cpd.yaml's log_level names the levels; warn is still read as warning. */
START_TEST(test_log_level_values)
{
	static const struct {
		const char *yaml;
		int level;
	} t[] = {
		{ "log_level: error\n", LOG_LVL_ERROR },
		{ "log_level: warning\n", LOG_LVL_WARN },
		{ "log_level: warn\n", LOG_LVL_WARN },
		{ "log_level: notice\n", LOG_LVL_NOTICE },
		{ "log_level: info\n", LOG_LVL_INFO },
		{ "log_level: debug\n", LOG_LVL_DEBUG },
	};
	struct cpd_config c;
	struct cp_err e;
	char buf[64];

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		config_defaults(&c);
		ck_assert_int_eq(config_parse("t.yaml", t[i].yaml,
		    strlen(t[i].yaml), &c, &e), 0);
		ck_assert_int_eq(c.log_level, t[i].level);
	}
	/* written back with the level's name */
	ck_assert_int_eq(config_format(&c, CONFIG_LOG_LEVEL, buf,
	    sizeof(buf)), 0);
	ck_assert_str_eq(buf, "debug");
	c.log_level = LOG_LVL_WARN;
	ck_assert_int_eq(config_format(&c, CONFIG_LOG_LEVEL, buf,
	    sizeof(buf)), 0);
	ck_assert_str_eq(buf, "warning");
	ck_assert_int_eq(config_parse("t.yaml", "log_level: notic\n", 17, &c,
	    &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg,
	    "allowed: error, warning, notice, info, debug"));
}
END_TEST
SUITE_TEST("levels", test_log_level_values);

int
main(void)
{
	return suite_main(suite_registered("log"));
}
