/*
 * jschema.h - whether a JSON value satisfies a JSON schema, for the
 * keywords the grammar tests' schemas use (type, const, enum, anyOf,
 * minimum/maximum, minLength/maxLength, items, minItems/maxItems,
 * properties, required, additionalProperties false, $ref to #/$defs/),
 * written from the JSON Schema specification, not from cpd's converter;
 * and ten schemas that cover them.
 */
#ifndef CP_TEST_JSCHEMA_H
#define CP_TEST_JSCHEMA_H

#include <stdbool.h>

#include "json.h"

#define JSCHEMA_TESTS 10

/* The test schemas, as JSON text. */
extern const char *const jschema_tests[JSCHEMA_TESTS];

/*
 * Whether v satisfies schema s; root is the whole schema (for $ref).  On
 * false, *why names the keyword that failed.
 */
bool jschema_valid(const struct json *root, const struct json *s,
    const struct json *v, const char **why);

#endif
