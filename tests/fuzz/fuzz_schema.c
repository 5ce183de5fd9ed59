/*
 * fuzz_schema.c - libFuzzer harness for the JSON-schema converter (and
 * the JSON reader under it): any input either converts to GBNF that the
 * parser compiles, or fails with a message; the grammar of a converted
 * schema then starts a matcher.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cp_err e = { 0 };
	struct grammar *g;
	char *gbnf;
	size_t n;
	int rc;

	rc = schema_to_gbnf((const char *)data, size, &gbnf, &n, &e);
	if (rc < 0) {
		if (e.msg[0] == '\0')
			abort();
		return 0;
	}
	/* what the converter writes must compile, unless it is too big or
	 * left-recursive (a schema whose $ref loops back to itself) */
	rc = grammar_from_gbnf(gbnf, n, &g, &e);
	if (rc < 0 && rc != -E2BIG && rc != -ENOMEM &&
	    strstr(e.msg, "left-recursive") == NULL)
		abort();
	free(gbnf);
	grammar_free(g);
	return 0;
}
