/*
 * prog.c - running one of the project's programs from a test (prog.h).
 */
#include "prog.h"

#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int
prog_find(char *path, size_t size, const char *name, const char *env)
{
	const char *e = env != NULL ? getenv(env) : NULL;
	const char *build = getenv("BUILD");

	if (e != NULL && e[0] != '\0')
		snprintf(path, size, "%s", e);
	else
		snprintf(path, size, "%s/bin/%s",
		    build != NULL && build[0] != '\0' ? build : "build", name);
	return access(path, X_OK) == 0 ? 0 : -1;
}

int
prog_runv(const char *const *argv, const char *out)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out != NULL ? out :
	    "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL,
	    (char *const *)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "%s died (signal %d)", argv[0],
	    WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return WEXITSTATUS(st);
}

int
prog_run(const char *prog, const char *out, ...)
{
	const char *argv[64];
	va_list ap;
	int n = 0;

	argv[n++] = prog;
	va_start(ap, out);
	while (n < 63 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	return prog_runv(argv, out);
}

int
prog_capture(const char *const *argv, char *out, size_t cap)
{
	char scratch[4096];
	size_t used = 0;
	ssize_t r;
	int p[2], st;
	pid_t pid;

	ck_assert_uint_gt(cap, 0);
	ck_assert_int_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(p[1], 1);
		if (fd >= 0)
			dup2(fd, 2);
		close(p[0]);
		close(p[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	while (used < cap - 1 &&
	    (r = read(p[0], out + used, cap - 1 - used)) > 0)
		used += (size_t)r;
	/* the rest is read and dropped: the program never gets SIGPIPE */
	while (read(p[0], scratch, sizeof(scratch)) > 0)
		;
	close(p[0]);
	out[used] = '\0';
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "%s died (signal %d)", argv[0],
	    WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return WEXITSTATUS(st);
}

int
prog_in_path(char *path, size_t size, const char *name)
{
	const char *p = getenv("PATH"), *end;

	for (; p != NULL && *p != '\0'; p = *end ? end + 1 : end) {
		end = strchrnul(p, ':');
		snprintf(path, size, "%.*s/%s", (int)(end - p), p, name);
		if (access(path, X_OK) == 0)
			return 0;
	}
	return -1;
}
