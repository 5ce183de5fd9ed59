/*
 * cpd_proc.c - see cpd_proc.h.
 */
#include "cpd_proc.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixtures.h"
#include "prog.h"
#include "tmpdir.h"

int
cpd_file_has(const char *path, const char *needle)
{
	static char buf[1 << 18];
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

int
cpd_log_has(const struct cpd *d, const char *needle)
{
	return cpd_file_has(d->log, needle);
}

void
cpd_await_log(const struct cpd *d, const char *needle)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	for (int i = 0; i < 500 && !cpd_log_has(d, needle); i++)
		nanosleep(&ts, NULL);
	ck_assert_msg(cpd_log_has(d, needle), "no '%s' in the log", needle);
}

void
cpd_start_bin(struct cpd *d, const char *bin, const char *model,
    const char *const *extra)
{
	const char *argv[40];
	int n = 0, i;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s/cpdd.XXXXXX", tmp_dir());
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/s", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/cpd.log", d->dir);
	argv[n++] = bin;
	argv[n++] = "-m";
	argv[n++] = model;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--threads";
	argv[n++] = "1";
	while (extra != NULL && *extra != NULL && n < 39)
		argv[n++] = *extra++;
	argv[n] = NULL;
	fflush(NULL);
	d->pid = fork();
	ck_assert_int_ge(d->pid, 0);
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(126);
		close(fd);
		fd = open("/dev/null", O_WRONLY);
		if (fd >= 0)
			dup2(fd, 1);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < CPD_PROC_WAIT_MS / 10; i++) {
		if (cpd_log_has(d, "listening on "))
			return;
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			d->pid = 0;
			ck_abort_msg("cpd exited at start-up; see %s", d->log);
		}
		usleep(10000);
	}
	ck_abort_msg("cpd did not start within %d ms", CPD_PROC_WAIT_MS);
}

int
cpd_wait(struct cpd *d)
{
	int st = 0, i;

	for (i = 0; i < CPD_PROC_WAIT_MS / 10; i++) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		}
		usleep(10000);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

void
cpd_cleanup(struct cpd *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
	unlink(d->sock);
	unlink(d->log);
	rmdir(d->dir);
}

void
cpd_stop(struct cpd *d)
{
	struct stat sb;

	ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
	ck_assert_int_eq(cpd_wait(d), 0);
	ck_assert_int_eq(stat(d->sock, &sb), -1);
	cpd_cleanup(d);
}


char *
cpd_need(const char *who, char *cpd, char *cpmodel, size_t size,
    const char *rel)
{
	if (prog_find(cpd, size, "cpd", NULL) != 0) {
		printf("%s: skipped, %s is not built\n", who, cpd);
		return NULL;
	}
	if (cpmodel != NULL && prog_find(cpmodel, size, "cpmodel",
	    NULL) != 0) {
		printf("%s: skipped, %s is not built\n", who, cpmodel);
		return NULL;
	}
	return fx_need(rel);
}
