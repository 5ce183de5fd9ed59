/*
 * check_cuda.c - the CUDA build works: the runtime links, the fat binary has
 * code for the device, and a kernel round trip gives the right numbers.
 * Skips (exit 77) on machines without a usable GPU.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_probe.h"
#include "lib/suite.h"

START_TEST(test_probe_device)
{
	struct cuda_device_info info;

	ck_assert_int_eq(cuda_probe_device(0, &info), 0);
	ck_assert_int_gt(info.major, 0);
	ck_assert_uint_gt(info.total_mem, 0);
	ck_assert_uint_le(info.free_mem, info.total_mem);
}
END_TEST

START_TEST(test_selftest_kernel)
{
	ck_assert_int_eq(cuda_probe_selftest(0), 0);
}
END_TEST

START_TEST(test_bad_device)
{
	struct cuda_device_info info;

	ck_assert_int_eq(cuda_probe_device(1 << 20, &info), -19 /* ENODEV */);
}
END_TEST

static Suite *
cuda_suite(void)
{
	const struct suite_test probe[] = {
		{ test_probe_device, 0, 0 },
		{ test_selftest_kernel, 0, 0 },
		{ test_bad_device, 0, 0 },
		{ NULL, 0, 0 }
	};
	const struct suite_case tcases[] = {
		{ "probe", 60, probe, NULL },
		{ NULL, 0, NULL, NULL }
	};

	return suite_make("cuda", tcases);
}

/*
 * Devices seen by a child process: the CUDA runtime must not be started in
 * this process, whose Check tests run in forked children (CUDA does not
 * survive fork()).  The child writes its reason into why through a pipe.
 */
static int
probe_in_child(char *why, size_t len)
{
	int fd[2], st, n = 0;
	ssize_t got;
	pid_t pid;

	if (pipe(fd) < 0 || (pid = fork()) < 0)
		return 0;
	if (pid == 0) {
		char buf[256] = "";

		close(fd[0]);
		n = cuda_probe_count(buf, sizeof(buf));
		(void)!write(fd[1], buf, strlen(buf));
		_exit(n > 100 ? 100 : n);
	}
	close(fd[1]);
	got = read(fd[0], why, len - 1);
	why[got > 0 ? got : 0] = '\0';
	close(fd[0]);
	if (waitpid(pid, &st, 0) == pid && WIFEXITED(st))
		n = WEXITSTATUS(st);
	return n;
}

int
main(void)
{
	char why[256] = "";

	if (probe_in_child(why, sizeof(why)) == 0) {
		printf("check_cuda: skipped, no usable CUDA device: %s\n", why);
		return 77;
	}
	return suite_main(cuda_suite());
}
