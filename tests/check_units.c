/*
 * check_units.c - the systemd units that make builds from etc/ (etc.mk:
 * @BINDIR@ and @SYSCONFDIR@ filled in) pass `systemd-analyze verify`:
 * the system ones as the system manager reads them, the per-user ones
 * with --user.  verify exits 0 after a key it cannot parse (it logs the
 * line and "ignoring"), so a unit passes only when verify also says
 * nothing.  The installed cpd does not exist yet: the copy verified runs
 * this build's cpd instead of BINDIR's (whichever prefix the units were
 * last built for: make install PREFIX=... rebuilds them).
 *
 * Exits 77 (skipped) where systemd-analyze is not installed.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

/* tests.mk's (these, for a tree built with the defaults, run from it). */
#ifndef CP_BUILD_ETC
#define CP_SRC_ETC "etc"
#define CP_BUILD_ETC "build/etc"
#define CP_BUILD_BIN "build/bin"
#endif

#define UNIT_MAX (64 * 1024)

static char analyze[512];

/* systemd-analyze in $PATH into analyze; 0, or -1 when absent. */
static int
find_analyze(void)
{
	const char *path = getenv("PATH");
	char dir[sizeof(analyze) - sizeof("/systemd-analyze")];

	if (path == NULL || path[0] == '\0')
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path != '\0') {
		size_t n = strcspn(path, ":");

		if (n > 0 && n < sizeof(dir)) {
			memcpy(dir, path, n);
			dir[n] = '\0';
			snprintf(analyze, sizeof(analyze), "%s/systemd-analyze",
			    dir);
			if (access(analyze, X_OK) == 0)
				return 0;
		}
		path += n + (path[n] == ':');
	}
	return -1;
}

/* The file at path into buf (NUL-terminated); its length. */
static size_t
slurp(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "r");
	size_t n;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	n = fread(buf, 1, size - 1, f);
	ck_assert_int_eq(ferror(f), 0);
	fclose(f);
	buf[n] = '\0';
	return n;
}

/*
 * Writes the unit base/rel (CP_BUILD_ETC's, or CP_SRC_ETC's for one that
 * is installed as it is) to dir/name, each ExecStart='s program taken
 * from this build's bin/ instead of its directory.
 */
static void
copy_unit(const char *base, const char *rel, const char *dir,
    const char *name)
{
	static const char exec[] = "ExecStart=";
	static char in[UNIT_MAX];
	char src[600], dst[600];
	const char *line, *end, *prog, *slash;
	FILE *f;

	snprintf(src, sizeof(src), "%s/%s", base, rel);
	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	slurp(src, in, sizeof(in));
	ck_assert_msg(strstr(in, "@BINDIR@") == NULL &&
	    strstr(in, "@SYSCONFDIR@") == NULL, "%s: a path left unfilled",
	    src);
	f = fopen(dst, "w");
	ck_assert_ptr_nonnull(f);
	for (line = in; *line != '\0'; line = end) {
		end = line + strcspn(line, "\n");
		end += *end == '\n';
		if (strncmp(line, exec, strlen(exec)) != 0) {
			fprintf(f, "%.*s", (int)(end - line), line);
			continue;
		}
		prog = line + strlen(exec);
		slash = prog + strcspn(prog, " \n");
		while (slash > prog && slash[-1] != '/')
			slash--;
		ck_assert_msg(slash > prog, "%s: %.*s: no directory", src,
		    (int)(end - line), line);
		fprintf(f, "%s%s/%.*s", exec, CP_BUILD_BIN, (int)(end - slash),
		    slash);
	}
	ck_assert_int_eq(fclose(f), 0);
}

/*
 * `systemd-analyze verify [--user] --man=no` of the service and socket
 * in dir: exits 0 and prints nothing.
 */
static void
verify(const char *dir, int user)
{
	char service[600], sock[600], out[600], log[4096];
	const char *argv[7];
	int k = 0, rc;

	snprintf(service, sizeof(service), "%s/cpd.service", dir);
	snprintf(sock, sizeof(sock), "%s/cpd.socket", dir);
	snprintf(out, sizeof(out), "%s/verify.txt", dir);
	argv[k++] = analyze;
	argv[k++] = "verify";
	if (user)
		argv[k++] = "--user";
	argv[k++] = "--man=no";
	argv[k++] = service;
	argv[k++] = sock;
	argv[k] = NULL;
	rc = prog_runv(argv, out);
	slurp(out, log, sizeof(log));
	ck_assert_msg(rc == 0 && log[0] == '\0',
	    "systemd-analyze verify%s: exit %d:\n%s", user ? " --user" : "",
	    rc, log);
}

/* A fresh directory for one instance's units. */
static void
unit_dir(char *dir, size_t size, const char *what)
{
	snprintf(dir, size, "%s/units-%s-%d", tmp_dir(), what, (int)getpid());
	ck_assert_msg(mkdir(dir, 0700) == 0 || errno == EEXIST, "%s: %s",
	    dir, strerror(errno));
}

static void
remove_dir(const char *dir)
{
	static const char *const files[] = { "cpd.service", "cpd.socket",
	    "verify.txt" };
	char path[600];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

/* cpd.service and cpd.socket of the system instance. */
START_TEST(test_system_units_verify)
{
	char dir[400];

	unit_dir(dir, sizeof(dir), "system");
	copy_unit(CP_BUILD_ETC, "cpd.service", dir, "cpd.service");
	copy_unit(CP_SRC_ETC, "cpd.socket", dir, "cpd.socket");
	verify(dir, 0);
	remove_dir(dir);
}
END_TEST
SUITE_TEST("verify", test_system_units_verify);

/*
 * The per-user instance's, installed as cpd.service and cpd.socket; the
 * user manager's verify wants a runtime directory of the user's.
 */
START_TEST(test_user_units_verify)
{
	char dir[400], run[400];

	unit_dir(dir, sizeof(dir), "user");
	unit_dir(run, sizeof(run), "run");
	ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", run, 1), 0);
	copy_unit(CP_BUILD_ETC, "user/cpd.service", dir, "cpd.service");
	copy_unit(CP_BUILD_ETC, "user/cpd.socket", dir, "cpd.socket");
	verify(dir, 1);
	remove_dir(dir);
	rmdir(run);
}
END_TEST
SUITE_TEST("verify", test_user_units_verify);

SUITE_CASE("verify", 120);

int
main(void)
{
	if (find_analyze() != 0) {
		printf("check_units: no systemd-analyze in PATH, skipped\n");
		return 77;
	}
	return suite_main(suite_registered("units"));
}
