/*
 * check_cuda.c - the CUDA build works: the runtime links, the fat binary has
 * code for the device, and a kernel round trip gives the right numbers.
 * Skips (exit 77) on machines without a usable GPU.
 */
#include <check.h>
#include <stdio.h>

#include "cuda_probe.h"
#include "lib/child.h"
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
SUITE_TEST("probe", test_probe_device);

START_TEST(test_selftest_kernel)
{
	ck_assert_int_eq(cuda_probe_selftest(0), 0);
}
END_TEST
SUITE_TEST("probe", test_selftest_kernel);

START_TEST(test_bad_device)
{
	struct cuda_device_info info;

	ck_assert_int_eq(cuda_probe_device(1 << 20, &info), -19 /* ENODEV */);
}
END_TEST
SUITE_TEST("probe", test_bad_device);

SUITE_CASE("probe", 60);

int
main(void)
{
	char why[256] = "";

	/* Counted in a child: this process's tests fork, CUDA does not. */
	if (child_probe(cuda_probe_count, why, sizeof(why)) == 0) {
		printf("check_cuda: skipped, no usable CUDA device: %s\n", why);
		return 77;
	}
	return suite_main(suite_registered("cuda"));
}
