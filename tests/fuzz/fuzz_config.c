/*
 * fuzz_config.c - libFuzzer harness for the YAML configuration reader:
 * parse the input on top of the defaults, then validate; every failure must
 * leave a message, and a success must leave a configuration that passes
 * validation again.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cpd_config c;
	struct cp_err e = { 0 };
	int rc;

	config_defaults(&c);
	rc = config_parse("fuzz.yaml", (const char *)data, size, &c, &e);
	if (rc < 0) {
		if (e.msg[0] == '\0')
			abort();	/* every error names what was wrong */
		return 0;
	}
	e.msg[0] = '\0';
	if (config_validate(&c, &e) < 0 && e.msg[0] == '\0')
		abort();
	return 0;
}
