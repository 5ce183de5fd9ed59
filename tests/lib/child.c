/*
 * child.c - asking a question in a child process (child.h).
 */
#include "child.h"

#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int
child_probe(int (*fn)(char *why, size_t len), char *why, size_t len)
{
	int fd[2], st, n = 0;
	ssize_t got;
	pid_t pid;

	snprintf(why, len, "probe failed");
	if (pipe(fd) != 0)
		return 0;
	if ((pid = fork()) < 0) {
		close(fd[0]);
		close(fd[1]);
		return 0;
	}
	if (pid == 0) {
		char w[256] = "";

		close(fd[0]);
		n = fn(w, sizeof(w));
		(void)!write(fd[1], w, strnlen(w, sizeof(w)));
		_exit(n < 0 ? 0 : n > 100 ? 100 : n);
	}
	close(fd[1]);
	got = read(fd[0], why, len - 1);
	close(fd[0]);
	if (got >= 0)
		why[got] = '\0';
	if (waitpid(pid, &st, 0) == pid && WIFEXITED(st))
		n = WEXITSTATUS(st);
	return n;
}
