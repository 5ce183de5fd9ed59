/*
 * tokfmt.c - a token's bytes as text (tokfmt.h).
 */
#include "tokfmt.h"

#include <stdint.h>
#include <string.h>

#include "cp_proto.h"

size_t
tokfmt_utf8(const char *str, size_t n, char *out)
{
	const uint8_t *s = (const uint8_t *)str;
	size_t i = 0, o = 0, len;

	while (i < n) {
		if ((len = cp_utf8_seq(s + i, n - i)) == 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, s + i, len);
		o += len;
		i += len;
	}
	return o;
}
