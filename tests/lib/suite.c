/*
 * suite.c - running a Check suite from a test program's main() (suite.h).
 */
#include "suite.h"

int
suite_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}
