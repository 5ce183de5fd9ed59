/*
 * check_stopstr.c - stop strings over streamed text.  Expected outputs are
 * worked out by hand from the semantics in stopstr.h, and a randomised test
 * compares against a naive matcher written here from the same definition
 * (whole text, every end position, every string).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/suite.h"
#include "stopstr.h"


/* Everything a stream of feeds emitted, and how it ended. */
struct run {
	char text[4096];
	size_t n;
	int match;
	int feeds_to_match;	/* 1-based feed that matched, 0 if none */
};

static struct stopstr *
make(const char *const *strs, int n)
{
	struct cp_err e = { 0 };
	struct stopstr *ss = stopstr_new(strs, NULL, n, &e);

	ck_assert_msg(ss != NULL, "%s", e.msg);
	return ss;
}

/* Feed NULL-terminated pieces one after another, then flush. */
static void
run_pieces(struct stopstr *ss, const char *const *pieces, struct run *rn)
{
	struct stopstr_res r;
	char out[1024];
	size_t len;
	int i;

	memset(rn, 0, sizeof(*rn));
	rn->match = -1;
	for (i = 0; pieces[i] != NULL; i++) {
		len = strlen(pieces[i]);
		ck_assert_int_eq(stopstr_feed(ss, pieces[i], len, out,
		    sizeof(out), &r), 0);
		ck_assert_uint_le(rn->n + r.emit, sizeof(rn->text) - 1);
		memcpy(rn->text + rn->n, out, r.emit);
		rn->n += r.emit;
		ck_assert_uint_eq(r.held, stopstr_held(ss));
		if (r.match >= 0) {
			rn->match = r.match;
			rn->feeds_to_match = i + 1;
			ck_assert_uint_eq(r.held, 0);
			break;
		}
	}
	ck_assert_int_eq(stopstr_flush(ss, out, sizeof(out), &r), 0);
	memcpy(rn->text + rn->n, out, r.emit);
	rn->n += r.emit;
	rn->text[rn->n] = '\0';
}

START_TEST(test_inside_one_token)
{
	const char *stops[] = { "STOP" };
	const char *pieces[] = { "abcSTOPdef", NULL };
	struct stopstr *ss = make(stops, 1);
	struct run rn;

	run_pieces(ss, pieces, &rn);
	ck_assert_str_eq(rn.text, "abc");
	ck_assert_int_eq(rn.match, 0);
	ck_assert(stopstr_matched(ss));
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_inside_one_token);

START_TEST(test_across_two_tokens)
{
	const char *stops[] = { "STOP" };
	struct stopstr *ss = make(stops, 1);
	struct stopstr_res r;
	char out[64];

	ck_assert_int_eq(stopstr_feed(ss, "abST", 4, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 2);
	ck_assert_uint_eq(r.held, 2);
	ck_assert_int_eq(r.match, -1);
	ck_assert_int_eq(memcmp(out, "ab", 2), 0);
	ck_assert_int_eq(stopstr_feed(ss, "OPxy", 4, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 0);
	ck_assert_uint_eq(r.held, 0);
	ck_assert_int_eq(r.match, 0);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_across_two_tokens);

START_TEST(test_across_three_tokens)
{
	const char *stops[] = { "<|end|>" };
	const char *pieces[] = { "Hi <|", "en", "d|>tail", NULL };
	struct stopstr *ss = make(stops, 1);
	struct run rn;

	run_pieces(ss, pieces, &rn);
	ck_assert_str_eq(rn.text, "Hi ");
	ck_assert_int_eq(rn.match, 0);
	ck_assert_int_eq(rn.feeds_to_match, 3);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_across_three_tokens);

START_TEST(test_partial_then_mismatch_releases)
{
	const char *stops[] = { "STOP" };
	struct stopstr *ss = make(stops, 1);
	struct stopstr_res r;
	char out[64];

	ck_assert_int_eq(stopstr_feed(ss, "xST", 3, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 1);
	ck_assert_uint_eq(r.held, 2);
	/* "STA" cannot begin "STOP": the held "ST" goes out with "Ay" */
	ck_assert_int_eq(stopstr_feed(ss, "Ay", 2, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 4);
	ck_assert_uint_eq(r.held, 0);
	ck_assert_int_eq(r.match, -1);
	ck_assert_int_eq(memcmp(out, "STAy", 4), 0);
	/* a held prefix that stays a prefix after a mismatch: "SS" */
	ck_assert_int_eq(stopstr_feed(ss, "S", 1, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 0);
	ck_assert_int_eq(stopstr_feed(ss, "S", 1, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 1);
	ck_assert_uint_eq(r.held, 1);
	ck_assert_int_eq(out[0], 'S');
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_partial_then_mismatch_releases);

START_TEST(test_self_overlapping_prefix)
{
	/* "aab" inside "aaab": the held "aa" slides by one byte */
	const char *stops[] = { "aab" };
	const char *pieces[] = { "aa", "a", "b", NULL };
	struct stopstr *ss = make(stops, 1);
	struct run rn;

	run_pieces(ss, pieces, &rn);
	ck_assert_str_eq(rn.text, "a");
	ck_assert_int_eq(rn.match, 0);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_self_overlapping_prefix);

START_TEST(test_several_strings)
{
	const char *stops[] = { "</s>", "\n\n", "User:" };
	const char *p1[] = { "Sure.", "\n", "Us", "er: hi\n\n", NULL };
	const char *p2[] = { "a\n", "\nUser:", NULL };
	const char *p3[] = { "no stop here\n", NULL };
	struct stopstr *ss = make(stops, 3);
	struct run rn;

	run_pieces(ss, p1, &rn);
	ck_assert_str_eq(rn.text, "Sure.\n");
	ck_assert_int_eq(rn.match, 2);
	stopstr_reset(ss);
	ck_assert(!stopstr_matched(ss));
	run_pieces(ss, p2, &rn);
	ck_assert_str_eq(rn.text, "a");
	ck_assert_int_eq(rn.match, 1);
	stopstr_reset(ss);
	/* no match: the held "\n" comes out at the flush */
	run_pieces(ss, p3, &rn);
	ck_assert_str_eq(rn.text, "no stop here\n");
	ck_assert_int_eq(rn.match, -1);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_several_strings);

START_TEST(test_overlapping_prefixes)
{
	const char *ab_abc[] = { "ab", "abc" };
	const char *abc_bc[] = { "abc", "bc" };
	const char *bc_abc[] = { "bc", "abc" };
	const char *bcd_abcde[] = { "bcd", "abcde" };
	const char *xabc[] = { "xa", "bc", NULL };
	const char *abcdef[] = { "abcdef", NULL };
	struct stopstr *ss;
	struct run rn;

	/* "ab" ends first: it wins over the longer "abc" */
	ss = make(ab_abc, 2);
	run_pieces(ss, xabc, &rn);
	ck_assert_str_eq(rn.text, "x");
	ck_assert_int_eq(rn.match, 0);
	ck_assert_int_eq(rn.feeds_to_match, 2);
	stopstr_free(ss);
	/* both end at 'c': the longer (earlier-starting) one wins */
	ss = make(abc_bc, 2);
	run_pieces(ss, xabc, &rn);
	ck_assert_str_eq(rn.text, "x");
	ck_assert_int_eq(rn.match, 0);
	stopstr_free(ss);
	ss = make(bc_abc, 2);
	run_pieces(ss, xabc, &rn);
	ck_assert_str_eq(rn.text, "x");
	ck_assert_int_eq(rn.match, 1);
	stopstr_free(ss);
	/* the earliest end wins even though "abcde" would start earlier */
	ss = make(bcd_abcde, 2);
	run_pieces(ss, abcdef, &rn);
	ck_assert_str_eq(rn.text, "a");
	ck_assert_int_eq(rn.match, 0);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_overlapping_prefixes);

START_TEST(test_binary_and_lens)
{
	const char *stops[] = { "a\0b", "zz-ignored" };
	size_t lens[] = { 3, 2 };
	struct cp_err e = { 0 };
	struct stopstr *ss = stopstr_new(stops, lens, 2, &e);
	struct stopstr_res r;
	char out[64];

	ck_assert_msg(ss != NULL, "%s", e.msg);
	ck_assert_uint_eq(stopstr_max_held(ss), 2);
	ck_assert_int_eq(stopstr_feed(ss, "xa\0", 3, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 1);
	ck_assert_uint_eq(r.held, 2);
	ck_assert_int_eq(stopstr_feed(ss, "by", 2, NULL, 0, &r), 0);
	ck_assert_int_eq(r.match, 0);
	ck_assert_uint_eq(r.emit, 0);
	stopstr_reset(ss);
	ck_assert_int_eq(stopstr_feed(ss, "-zz-", 4, NULL, 0, &r), 0);
	ck_assert_int_eq(r.match, 1);
	ck_assert_uint_eq(r.emit, 1);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_binary_and_lens);

START_TEST(test_no_strings_passes_through)
{
	struct stopstr *ss = make(NULL, 0);
	struct stopstr_res r;
	char out[16];

	ck_assert_uint_eq(stopstr_max_held(ss), 0);
	ck_assert_int_eq(stopstr_feed(ss, "hello", 5, out, 5, &r), 0);
	ck_assert_uint_eq(r.emit, 5);
	ck_assert_uint_eq(r.held, 0);
	ck_assert_int_eq(stopstr_feed(ss, NULL, 0, out, 0, &r), 0);
	ck_assert_uint_eq(r.emit, 0);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_no_strings_passes_through);

START_TEST(test_rejects_bad_strings)
{
	const char *empty[] = { "ok", "" };
	const char *null[] = { "ok", NULL };
	const char *one[] = { "x" };
	char big[STOPSTR_MAX_LEN + 2];
	const char *bigs[] = { big };
	const char *many[STOPSTR_MAX_N + 1];
	size_t zero[] = { 0 };
	struct cp_err e = { 0 };
	int i;

	ck_assert_ptr_null(stopstr_new(empty, NULL, 2, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "stop string 1"));
	ck_assert_ptr_null(stopstr_new(one, zero, 1, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "stop string 0"));
	memset(&e, 0, sizeof(e));
	ck_assert_ptr_null(stopstr_new(null, NULL, 2, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memset(&e, 0, sizeof(e));
	ck_assert_ptr_null(stopstr_new(bigs, NULL, 1, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	big[STOPSTR_MAX_LEN] = '\0';	/* exactly the limit is fine */
	stopstr_free(make(bigs, 1));
	ck_assert_ptr_null(stopstr_new(one, NULL, -1, NULL));
	ck_assert_ptr_null(stopstr_new(NULL, NULL, 1, NULL));
	for (i = 0; i <= STOPSTR_MAX_N; i++)
		many[i] = "s";
	ck_assert_ptr_null(stopstr_new(many, NULL, STOPSTR_MAX_N + 1, &e));
	ck_assert_int_eq(e.code, -EINVAL);
	stopstr_free(make(many, STOPSTR_MAX_N));
	stopstr_free(NULL);
}
END_TEST
SUITE_TEST("core", test_rejects_bad_strings);

START_TEST(test_feed_errors)
{
	const char *stops[] = { "STOP" };
	struct stopstr *ss = make(stops, 1);
	struct stopstr_res r;
	char out[8];

	ck_assert_int_eq(stopstr_feed(ss, NULL, 1, NULL, 0, &r), -EINVAL);
	ck_assert_int_eq(stopstr_feed(ss, "STO", 3, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.held, 3);
	/* 3 held + 6 new > 8 */
	ck_assert_int_eq(stopstr_feed(ss, "abcdef", 6, out, sizeof(out), &r),
	    -ENOBUFS);
	ck_assert_int_eq(r.match, -1);
	ck_assert_uint_eq(stopstr_held(ss), 3);
	ck_assert_int_eq(stopstr_flush(ss, out, 2, &r), -ENOBUFS);
	ck_assert_uint_eq(stopstr_held(ss), 3);
	ck_assert_int_eq(stopstr_feed(ss, "P!", 2, out, sizeof(out), &r), 0);
	ck_assert_int_eq(r.match, 0);
	ck_assert_int_eq(stopstr_feed(ss, "more", 4, out, sizeof(out), &r),
	    -EALREADY);
	ck_assert_int_eq(stopstr_flush(ss, out, sizeof(out), &r), 0);
	ck_assert_uint_eq(r.emit, 0);
	ck_assert_int_eq(r.match, 0);
	stopstr_free(ss);
}
END_TEST
SUITE_TEST("core", test_feed_errors);

/* ---- randomised comparison with a naive matcher ---- */

static uint64_t rs = 12345;

static uint32_t
rnd(uint32_t n)
{
	rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(rs >> 33) % n;
}

/* Longest k < len(stop) with text[0..n) ending in stop[0..k), over all. */
static size_t
naive_held(const char *const *stops, int ns, const char *text, size_t n)
{
	size_t best = 0, k, l;
	int i;

	for (i = 0; i < ns; i++) {
		l = strlen(stops[i]);
		for (k = l - 1; k > best; k--)
			if (k <= n && memcmp(text + n - k, stops[i], k) == 0)
				break;
		if (k > best)
			best = k;
	}
	return best;
}

/* First end position with a stop string ending there; the longest such
 * (lowest index among equals).  Returns the end, or 0 with *m = -1. */
static size_t
naive_match(const char *const *stops, int ns, const char *text, size_t n,
    int *m)
{
	size_t e, l, bl;
	int i;

	for (e = 1; e <= n; e++) {
		*m = -1;
		bl = 0;
		for (i = 0; i < ns; i++) {
			l = strlen(stops[i]);
			if (l <= e && memcmp(text + e - l, stops[i], l) == 0 &&
			    l > bl) {
				bl = l;
				*m = i;
			}
		}
		if (*m >= 0)
			return e;
	}
	*m = -1;
	return 0;
}

START_TEST(test_random_against_naive)
{
	char strbuf[4][8], text[200], out[256], got[256];
	const char *stops[4];
	struct stopstr_res r;
	struct stopstr *ss;
	size_t n, pos, len, ng, end;
	int iter, ns, i, m;

	for (iter = 0; iter < 3000; iter++) {
		ns = 1 + (int)rnd(4);
		for (i = 0; i < ns; i++) {
			len = 1 + rnd(5);
			for (n = 0; n < len; n++)
				strbuf[i][n] = (char)('a' + rnd(3));
			strbuf[i][len] = '\0';
			stops[i] = strbuf[i];
		}
		n = 1 + rnd(60);
		for (pos = 0; pos < n; pos++)
			text[pos] = (char)('a' + rnd(3));
		text[n] = '\0';
		end = naive_match(stops, ns, text, n, &m);

		ss = make(stops, ns);
		ng = 0;
		for (pos = 0; pos < n; pos += len) {
			len = 1 + rnd(6);
			if (len > n - pos)
				len = n - pos;
			ck_assert_int_eq(stopstr_feed(ss, text + pos, len, out,
			    sizeof(out), &r), 0);
			memcpy(got + ng, out, r.emit);
			ng += r.emit;
			if (r.match >= 0)
				break;
			ck_assert_uint_eq(r.held, naive_held(stops, ns, text,
			    pos + len));
			ck_assert_uint_eq(ng + r.held, pos + len);
		}
		ck_assert_int_eq(r.match, m);
		ck_assert_int_eq(stopstr_flush(ss, out, sizeof(out), &r), 0);
		memcpy(got + ng, out, r.emit);
		ng += r.emit;
		if (m >= 0)
			ck_assert_uint_eq(ng, end - strlen(stops[m]));
		else
			ck_assert_uint_eq(ng, n);
		ck_assert_int_eq(memcmp(got, text, ng), 0);
		stopstr_free(ss);
	}
}
END_TEST
SUITE_TEST("core", test_random_against_naive);

SUITE_CASE("core", 30);

int
main(void)
{
	return suite_main(suite_registered("stopstr"));
}
