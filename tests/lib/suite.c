/*
 * suite.c - building a Check suite from tables and running it from a test
 * program's main() (suite.h).
 */
#include "suite.h"

#include <stdarg.h>
#include <stdio.h>

void
suite_add_cases(Suite *s, const struct suite_case *cases)
{
	const struct suite_case *c;
	const struct suite_test *t;
	TCase *tc;

	for (c = cases; c->name != NULL; c++) {
		if (c->tests == NULL)
			continue;
		tc = tcase_create(c->name);
		if (c->timeout != 0)
			tcase_set_timeout(tc, c->timeout);
		if (c->fixture != NULL && c->fixture->checked)
			tcase_add_checked_fixture(tc, c->fixture->setup,
			    c->fixture->teardown);
		else if (c->fixture != NULL)
			tcase_add_unchecked_fixture(tc, c->fixture->setup,
			    c->fixture->teardown);
		for (t = c->tests; t->test != NULL; t++) {
			if (t->lo == 0 && t->hi == 0)
				tcase_add_test(tc, t->test);
			else
				tcase_add_loop_test(tc, t->test, t->lo, t->hi);
		}
		suite_add_tcase(s, tc);
	}
}

Suite *
suite_make(const char *name, const struct suite_case *cases)
{
	Suite *s = suite_create(name);

	suite_add_cases(s, cases);
	return s;
}

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

int
suite_main(Suite *s)
{
	return suite_run(s) == 0 ? 0 : 1;
}

int
suite_main_some(Suite *s, bool all, const char *fmt, ...)
{
	va_list ap;

	if (suite_run(s) != 0)
		return 1;
	if (all)
		return 0;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	return 77;
}
