/*
 * check_cpq_json.c - cpq's JSON reader for --history (libclient/cpq_json.c):
 * the one shape it takes, decoded as RFC 8259 says (escapes, surrogate
 * pairs worked out by hand from the RFC's examples), and every malformed
 * input refused with the line, column and rule; and its string writer
 * read back by the reader, agreeing with tokfmt.c's token text.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpq_json.h"
#include "lib/suite.h"
#include "tokfmt.h"

static int
parse(const char *text, size_t max, struct cpq_history *h, char *err)
{
	return cpq_history_parse(text, strlen(text), max, h, err, 256);
}

START_TEST(test_shapes)
{
	struct cpq_history h;
	char err[256];

	ck_assert_int_eq(parse(" [ ] \n", 8, &h, err), 0);
	ck_assert_uint_eq(h.n, 0);
	cpq_history_free(&h);

	/* Members in either order, whitespace anywhere, every role. */
	ck_assert_int_eq(parse("[{\"role\":\"system\",\"content\":\"S\"},\r\n"
	    "\t{ \"content\" : \"u\" , \"role\" : \"user\" },"
	    "{\"role\":\"assistant\",\"content\":\"\"},"
	    "{\"role\":\"tool\",\"content\":\"t t\"}]", 8, &h, err), 0);
	ck_assert_uint_eq(h.n, 4);
	ck_assert_int_eq(h.msgs[0].role, CP_CHAT_SYSTEM);
	ck_assert_uint_eq(h.msgs[0].len, 1);
	ck_assert(memcmp(h.msgs[0].content, "S", 1) == 0);
	ck_assert_int_eq(h.msgs[1].role, CP_CHAT_USER);
	ck_assert(h.msgs[1].len == 1 && h.msgs[1].content[0] == 'u');
	ck_assert_int_eq(h.msgs[2].role, CP_CHAT_ASSISTANT);
	ck_assert_uint_eq(h.msgs[2].len, 0);
	ck_assert_ptr_null(h.msgs[2].content);
	ck_assert_int_eq(h.msgs[3].role, CP_CHAT_TOOL);
	ck_assert(h.msgs[3].len == 3 && memcmp(h.msgs[3].content, "t t",
	    3) == 0);
	cpq_history_free(&h);
	cpq_history_free(&h);		/* a zeroed one is fine */
}
END_TEST
SUITE_TEST("reader", test_shapes);

/*
 * Every escape of RFC 8259 section 7; U+1D11E as the surrogate pair
 * \ud834\udd1e (the RFC's own example) is F0 9D 84 9E; raw UTF-8 kept;
 * \u0000 is a NUL inside the content.
 */
START_TEST(test_escapes)
{
	static const char want[] = "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac"
	    "\xf0\x9d\x84\x9e\xc3\xa9\0z";
	struct cpq_history h;
	char err[256];

	ck_assert_int_eq(parse("[{\"role\":\"user\",\"content\":"
	    "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00E9\\u20ac\\ud834\\uDD1E"
	    "\xc3\xa9\\u0000z\"}]", 1, &h, err), 0);
	ck_assert_uint_eq(h.n, 1);
	ck_assert_uint_eq(h.msgs[0].len, sizeof(want) - 1);
	ck_assert(memcmp(h.msgs[0].content, want, sizeof(want) - 1) == 0);
	cpq_history_free(&h);
}
END_TEST
SUITE_TEST("reader", test_escapes);

/* Malformed input: -EINVAL, nothing to free, the place and the rule. */
static const struct {
	const char *text, *want;
} bad[] = {
	{ "", "line 1, column 1: expected '[' opening the array of messages, "
	    "found the end of the file" },
	{ "{}", "line 1, column 1: expected '['" },
	{ "[", "line 1, column 2: expected '{' opening message object, found "
	    "the end of the file" },
	{ "[{}]", "line 1, column 3: expected '\"' opening a key" },
	{ "[{\"role\":\"user\"}]", "line 1, column 2: message 1 has no "
	    "\"content\"" },
	{ "[{\"content\":\"x\"}]", "message 1 has no \"role\"" },
	{ "[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]",
	    "line 1, column 31: message 1: unknown key" },
	{ "[{\"role\":\"user\",\"role\":\"user\",\"content\":\"x\"}]",
	    "message 1: \"role\" given twice" },
	{ "[{\"role\":\"user\",\"content\":\"x\",\"content\":\"y\"}]",
	    "message 1: \"content\" given twice" },
	{ "[{\"role\":\"User\",\"content\":\"x\"}]", "role 'User', expected "
	    "system, user, assistant or tool" },
	{ "[{\"role\":1,\"content\":\"x\"}]", "line 1, column 10: expected a "
	    "string (the role), found '1'" },
	{ "[{\"role\":\"user\",\"content\":null}]", "expected a string (the "
	    "content), found 'n'" },
	{ "[{\"role\":\"user\",\"content\":\"x\"},]", "line 1, column 32: "
	    "expected '{'" },
	{ "[{\"role\":\"user\",\"content\":\"x\"}", "expected ',' or ']' "
	    "after message 1, found the end of the file" },
	{ "[{\"role\":\"user\",\"content\":\"x\"} {}]", "expected ',' or ']'" },
	{ "[{\"role\":\"user\" \"content\":\"x\"}]", "expected ',' or '}' in "
	    "message 1, found '\"'" },
	{ "[{\"role\" \"user\"}]", "expected ':' after a key" },
	{ "[]x", "line 1, column 3: 'x' after the array" },
	{ "[] []", "'[' after the array" },
	{ "[{\"role\":\"user\",\"content\":\"x", "a string is not closed" },
	{ "[{\"role\":\"user\",\"content\":\"a\nb\"}]", "control character "
	    "0x0a in a string" },
	{ "[{\"role\":\"user\",\"content\":\"\\x\"}]", "line 1, column 28: "
	    "unknown escape '\\x'" },
	{ "[{\"role\":\"user\",\"content\":\"\\u12g4\"}]", "\\u needs four hex "
	    "digits" },
	{ "[{\"role\":\"user\",\"content\":\"\\udd1e\"}]", "\\udd1e is a low "
	    "surrogate without a high one" },
	{ "[{\"role\":\"user\",\"content\":\"\\ud834x\"}]", "\\ud834 is a high "
	    "surrogate without a \\u escape of a low one" },
	{ "[{\"role\":\"user\",\"content\":\"\\ud834\\u0041\"}]", "\\u0041 "
	    "after the high surrogate \\ud834 is not a low surrogate" },
	{ "[{\"role\":\"user\",\"content\":\"\\", "a string ends inside an "
	    "escape" },
	{ "[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]", "line 1, column 28: "
	    "bytes that are not UTF-8" },
	{ "[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]", "not UTF-8" },
	{ "[{\"role\":\"user\",\"content\":\"\xf4\x90\x80\x80\"}]",
	    "not UTF-8" },
	{ "[{\"role\":\"user\",\"content\":\"\xe2\x82\"}]", "not UTF-8" },
	{ "\xef\xbb\xbf[]", "expected '[' opening the array of messages, "
	    "found 0xef" },
	{ "[\n{\"role\":\"user\",\"content\":\"x\"},\n{\"role\":\"user\","
	    "\"content\":\"y\"},\n{\"role\":\"user\",\"content\":\"z\"}]",
	    "line 4, column 1: more than 2 messages" },
};

#define N_BAD	((int)(sizeof(bad) / sizeof(bad[0])))

START_TEST(test_malformed)
{
	struct cpq_history h;
	char err[256];

	memset(&h, 0xaa, sizeof(h));
	ck_assert_int_eq(parse(bad[_i].text, 2, &h, err), -EINVAL);
	ck_assert_ptr_null(h.msgs);
	ck_assert_ptr_null(h.buf);
	ck_assert_uint_eq(h.n, 0);
	ck_assert_msg(strstr(err, bad[_i].want) != NULL, "input %d: %s, "
	    "want %s", _i, err, bad[_i].want);
}
END_TEST
SUITE_LOOP("reader", test_malformed, 0, N_BAD);

/* A short error buffer still ends with a NUL. */
START_TEST(test_short_error_buffer)
{
	struct cpq_history h;
	char err[12];

	memset(err, 'x', sizeof(err));
	ck_assert_int_eq(cpq_history_parse("{", 1, 8, &h, err, sizeof(err)),
	    -EINVAL);
	ck_assert_str_eq(err, "line 1, col");
}
END_TEST
SUITE_TEST("reader", test_short_error_buffer);

/*
 * s[0..len) written by cpq_json_string() as a history message's content
 * and read back by cpq_history_parse() into *h (free it).
 */
static void
json_round_trip(const char *s, size_t len, struct cpq_history *h)
{
	char err[256], *buf = NULL;
	size_t blen = 0;
	FILE *f;

	f = open_memstream(&buf, &blen);
	ck_assert_ptr_nonnull(f);
	fputs("[{\"role\":\"user\",\"content\":", f);
	cpq_json_string(f, s, len);
	fputs("}]", f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_msg(cpq_history_parse(buf, blen, 1, h, err, sizeof(err)) ==
	    0, "%s", err);
	free(buf);
}

/* What cpq_json_string() writes reads back as the same valid UTF-8. */
START_TEST(test_string_round_trip)
{
	static const char s[] = "q\"b\\s/\x01\x1f\x7f\n\r\t\xc3\xa9\xf0\x9d"
	    "\x84\x9e\0end";
	struct cpq_history h;

	json_round_trip(s, sizeof(s) - 1, &h);
	ck_assert_uint_eq(h.msgs[0].len, sizeof(s) - 1);
	ck_assert(memcmp(h.msgs[0].content, s, sizeof(s) - 1) == 0);
	cpq_history_free(&h);
}
END_TEST
SUITE_TEST("reader", test_string_round_trip);

#define R "\xef\xbf\xbd"	/* U+FFFD */

/*
 * tokfmt_utf8() (cpd-http's token text) keeps valid UTF-8 and gives each
 * byte that starts no valid sequence (stray continuation, truncated,
 * overlong, surrogate) U+FFFD, the same text cpq_json_string() writes.
 */
START_TEST(test_tokfmt_utf8)
{
	static const char s[] = "a\x80" "b\xe2\x82" "c\xc0\xaf\xed\xa0\x80"
	    "\xc3\xa9\xf0\x9d\x84\x9e\xf0\x9d";
	static const char want[] = "a" R "b" R R "c" R R R R R "\xc3\xa9"
	    "\xf0\x9d\x84\x9e" R R;
	char out[3 * sizeof(s)];
	struct cpq_history h;
	size_t n;

	n = tokfmt_utf8(s, sizeof(s) - 1, out);
	ck_assert_uint_eq(n, sizeof(want) - 1);
	ck_assert(memcmp(out, want, n) == 0);
	ck_assert_uint_eq(tokfmt_utf8("", 0, out), 0);
	json_round_trip(s, sizeof(s) - 1, &h);
	ck_assert_uint_eq(h.msgs[0].len, n);
	ck_assert(memcmp(h.msgs[0].content, out, n) == 0);
	cpq_history_free(&h);
}
END_TEST
SUITE_TEST("reader", test_tokfmt_utf8);

SUITE_CASE("reader", 10);

int
main(void)
{
	return suite_main(suite_registered("cpq_json"));
}
