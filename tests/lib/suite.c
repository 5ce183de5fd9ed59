/*
 * suite.c - building a Check suite and running it from a test program's
 * main() (suite.h).
 */
#include "suite.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the constructors registered, before main(). */
struct reg_test {
	const char	*tcase;
	const TTest	*test;
	bool		 loop;
	int		 lo, hi, line;
};

struct reg_case {
	const char			*name;
	int				 timeout, line;
	const struct suite_fixture	*fixture;
	bool				 skip;
};

static struct reg_test	*reg_tests;
static struct reg_case	*reg_cases;
static size_t		 n_tests, n_cases;

static void *
grow(void *p, size_t n, size_t size)
{
	/* Called with n a count before an append: doubles at powers of 2. */
	if (n != 0 && (n & (n - 1)) != 0)
		return p;
	p = realloc(p, (n == 0 ? 8 : 2 * n) * size);
	if (p == NULL) {
		fprintf(stderr, "suite: out of memory\n");
		exit(1);
	}
	return p;
}

static struct reg_case *
find_case(const char *name)
{
	size_t i;

	for (i = 0; i < n_cases; i++)
		if (strcmp(reg_cases[i].name, name) == 0)
			return &reg_cases[i];
	return NULL;
}

static struct reg_case *
get_case(const char *name, int line)
{
	struct reg_case *c = find_case(name);

	if (c == NULL) {
		reg_cases = grow(reg_cases, n_cases, sizeof(*reg_cases));
		c = &reg_cases[n_cases++];
		memset(c, 0, sizeof(*c));
		c->name = name;
		c->line = line;
	}
	if (line < c->line)
		c->line = line;
	return c;
}

void
suite_register_test(const char *tcase, const TTest *test, bool loop,
    int lo, int hi, int line)
{
	struct reg_test *t;

	get_case(tcase, line);
	reg_tests = grow(reg_tests, n_tests, sizeof(*reg_tests));
	t = &reg_tests[n_tests++];
	t->tcase = tcase;
	t->test = test;
	t->loop = loop;
	t->lo = lo;
	t->hi = hi;
	t->line = line;
}

void
suite_register_case(const char *tcase, int timeout,
    const struct suite_fixture *fixture, int line)
{
	struct reg_case *c = get_case(tcase, line);

	c->timeout = timeout;
	c->fixture = fixture;
}

void
suite_case_skip(const char *tcase)
{
	struct reg_case *c = find_case(tcase);

	if (c == NULL) {
		fprintf(stderr, "suite: skipping case \"%s\", which has no "
		    "test\n", tcase);
		exit(1);
	}
	c->skip = true;
}

static int
by_line_case(const void *a, const void *b)
{
	const struct reg_case *x = a, *y = b;

	return (x->line > y->line) - (x->line < y->line);
}

static int
by_line_test(const void *a, const void *b)
{
	const struct reg_test *x = a, *y = b;

	return (x->line > y->line) - (x->line < y->line);
}

static void
add_case(TCase *tc, const struct suite_fixture *fixture, int timeout)
{
	if (timeout != 0)
		tcase_set_timeout(tc, timeout);
	if (fixture != NULL && fixture->checked)
		tcase_add_checked_fixture(tc, fixture->setup,
		    fixture->teardown);
	else if (fixture != NULL)
		tcase_add_unchecked_fixture(tc, fixture->setup,
		    fixture->teardown);
}

static void
add_test(TCase *tc, const struct reg_test *t, const char *suite)
{
	if (!t->loop) {
		tcase_add_test(tc, t->test);
		return;
	}
	if (t->hi <= t->lo) {
		fprintf(stderr, "suite %s: loop test %s (line %d) has the empty "
		    "range [%d, %d)\n", suite, t->test->name, t->line, t->lo,
		    t->hi);
		exit(1);
	}
	tcase_add_loop_test(tc, t->test, t->lo, t->hi);
}

Suite *
suite_registered(const char *name)
{
	Suite *s = suite_create(name);
	size_t i, j, n;
	TCase *tc;

	if (n_cases == 0) {
		fprintf(stderr, "suite %s: no test registered\n", name);
		exit(1);
	}
	qsort(reg_cases, n_cases, sizeof(*reg_cases), by_line_case);
	qsort(reg_tests, n_tests, sizeof(*reg_tests), by_line_test);
	for (i = 0; i < n_cases; i++) {
		const struct reg_case *c = &reg_cases[i];

		for (j = n = 0; j < n_tests; j++)
			n += strcmp(reg_tests[j].tcase, c->name) == 0;
		if (n == 0) {
			fprintf(stderr, "suite %s: case \"%s\" has no test\n",
			    name, c->name);
			exit(1);
		}
		if (c->skip)
			continue;
		tc = tcase_create(c->name);
		add_case(tc, c->fixture, c->timeout);
		for (j = 0; j < n_tests; j++)
			if (strcmp(reg_tests[j].tcase, c->name) == 0)
				add_test(tc, &reg_tests[j], name);
		suite_add_tcase(s, tc);
	}
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
