/*
 * check_tokenize.c - cp_tokenize() against a real cpd: for each vocabulary
 * of ../shared/models/vocab with test vectors, a tiny model carrying it
 * (cpmodel synth --vocab-from) is served, and the daemon's ids for every
 * test string must be llama.cpp's (X.gguf.out); with BOS and special
 * tokens, they must be what `cpmodel tokenize` prints.  Then the request's
 * limits and hostile records: each is answered with an error and the
 * connection keeps working; and a daemon without the feature.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpclient.h"
#include "lib/cpd_harness.h"
#include "lib/cpd_proc.h"
#include "lib/fixtures.h"
#include "lib/prog.h"
#include "lib/served.h"
#include "lib/suite.h"
#include "lib/vocab_vecs.h"

static char cpd_bin[512], cpmodel_bin[512], cpq_bin[512];

/*
 * Every vocabulary of the fixtures with test vectors: "vocab/X.gguf" for
 * each X.gguf.inp found (sorted, the llama-spm one, which the request
 * tests use, among them).  Found before the tests register (a constructor
 * of higher priority), since SUITE_LOOP reads n_vocabs then: found in
 * main(), the loop ran once, on the first vocabulary only.
 */
#define MAX_VOCABS	64
static char *vocabs[MAX_VOCABS];
static int n_vocabs;

__attribute__((constructor(101))) static void
find_vocabs(void)
{
	n_vocabs = served_find_vocabs(vocabs, MAX_VOCABS);
}
static const char spm_rel[] = "vocab/ggml-vocab-llama-spm.gguf";

/* Parses space-separated ids; their number. */
static int
parse_ids(const char *s, int32_t *ids, int cap)
{
	int n = 0;
	char *end;

	for (;;) {
		long v = strtol(s, &end, 10);

		if (end == s)
			return n;
		ck_assert_int_lt(n, cap);
		ids[n++] = (int32_t)v;
		s = end;
	}
}

static void
assert_ids(const int32_t *got, int n, const int32_t *want, int n_want,
    const char *what, int i)
{
	int j;

	ck_assert_msg(n == n_want, "%s: string %d: %d ids, want %d", what, i,
	    n, n_want);
	for (j = 0; j < n; j++)
		ck_assert_msg(got[j] == want[j], "%s: string %d: id %d is %d, "
		    "want %d", what, i, j, (int)got[j], (int)want[j]);
}

START_TEST(test_vocab_matches_llama_cpp)
{
	static const char prompt[] = "Hello world <s> <|endoftext|> x";
	const char *rel = vocabs[_i];
	const char *argv[5];
	struct vocab_vecs vs;
	struct served s;
	int32_t ids[300], want[300];
	char *path, why[512], out[4096];
	int i, n, n_want;

	if ((path = fx_path(rel)) == NULL) {
		printf("check_tokenize: %s skipped: only its vectors are in "
		    "the fixtures, not the vocabulary\n", rel);
		return;
	}
	if (!served_vocab_loads(path, why, sizeof(why))) {
		printf("check_tokenize: %s skipped: cpd cannot load its "
		    "tokenizer (%s)\n", rel, why);
		free(path);
		return;
	}
	memset(&s, 0, sizeof(s));
	served_start(&s, cpd_bin, cpmodel_bin, path);
	vv_read(rel, &vs);
	ck_assert_int_gt(vs.n, 0);
	for (i = 0; i < vs.n; i++) {
		const struct vocab_vec *v = &vs.v[i];

		n = cp_tokenize(s.c, v->s, v->len, ids, 300, 0);
		assert_ids(ids, n, v->ids, v->n, rel, i);
	}
	vv_free(&vs);

	/* As a prompt: what cpmodel tokenize prints (BOS, specials parsed). */
	argv[0] = cpmodel_bin;
	argv[1] = "tokenize";
	argv[2] = s.model;
	argv[3] = prompt;
	argv[4] = NULL;
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	n_want = parse_ids(out, want, 300);
	ck_assert_int_gt(n_want, 0);
	n = cp_tokenize(s.c, prompt, strlen(prompt), ids, 300,
	    CP_TOK_BOS | CP_TOK_PARSE_SPECIAL);
	assert_ids(ids, n, want, n_want, "cpmodel tokenize", 0);
	served_stop(&s);
	free(path);
}
END_TEST
SUITE_LOOP("fixtures", test_vocab_matches_llama_cpp, 0, n_vocabs);

/* Counting, a short buffer, and what the library refuses before sending. */
START_TEST(test_client_limits)
{
	static const char text[] = "The quick brown fox";
	struct served s;
	int32_t ids[64], few[3];
	char *path, *big;
	int n;

	ck_assert_ptr_nonnull(path = fx_path(spm_rel));
	memset(&s, 0, sizeof(s));
	served_start(&s, cpd_bin, cpmodel_bin, path);
	n = cp_tokenize(s.c, text, strlen(text), ids, 64, CP_TOK_BOS);
	ck_assert_int_gt(n, 3);
	ck_assert_int_eq(ids[0], 1);	/* llama-spm's BOS */
	ck_assert_int_eq(cp_tokenize(s.c, text, strlen(text), NULL, 0,
	    CP_TOK_BOS), n);
	few[2] = -7;
	ck_assert_int_eq(cp_tokenize(s.c, text, strlen(text), few, 2,
	    CP_TOK_BOS), n);
	ck_assert_int_eq(few[0], ids[0]);
	ck_assert_int_eq(few[1], ids[1]);
	ck_assert_int_eq(few[2], -7);
	ck_assert_int_eq(cp_tokenize(s.c, "", 0, ids, 64, 0), 0);

	ck_assert_int_eq(cp_tokenize(s.c, text, 3, ids, 64, 0x4), -EINVAL);
	ck_assert_int_eq(cp_tokenize(s.c, NULL, 3, ids, 64, 0), -EINVAL);
	ck_assert_int_eq(cp_tokenize(s.c, text, 3, NULL, 64, 0), -EINVAL);
	ck_assert_ptr_nonnull(big = malloc(CP_TOKENIZE_TEXT_MAX + 1));
	memset(big, 'a', CP_TOKENIZE_TEXT_MAX + 1);
	ck_assert_int_eq(cp_tokenize(s.c, big, CP_TOKENIZE_TEXT_MAX + 1, NULL,
	    0, 0), -E2BIG);
	/* Byte fallback: one id a byte, past CP_TOKENIZE_IDS_MAX. */
	memset(big, 0x01, CP_TOKENIZE_IDS_MAX + 1);
	ck_assert_int_eq(cp_tokenize(s.c, big, CP_TOKENIZE_IDS_MAX + 1, NULL,
	    0, 0), -E2BIG);
	free(big);
	/* The connection still works. */
	ck_assert_int_eq(cp_tokenize(s.c, text, strlen(text), NULL, 0,
	    CP_TOK_BOS), n);
	served_stop(&s);
	free(path);
}
END_TEST
SUITE_TEST("requests", test_client_limits);

/* cpq --tokenize prints a prompt's ids (BOS, specials), --count their number. */
START_TEST(test_cpq_tokenize)
{
	static const char text[] = "Hello <s> world";
	const char *argv[] = { cpq_bin, "--socket", NULL, "--tokenize", text,
	    NULL, NULL };
	struct served s;
	int32_t ids[64], want[64];
	char out[1024], num[32];
	char *path;
	int n;

	ck_assert_int_eq(prog_find(cpq_bin, sizeof(cpq_bin), "cpq", NULL), 0);
	ck_assert_ptr_nonnull(path = fx_path(spm_rel));
	memset(&s, 0, sizeof(s));
	served_start(&s, cpd_bin, cpmodel_bin, path);
	argv[2] = s.d.sock;
	n = cp_tokenize(s.c, text, strlen(text), want, 64,
	    CP_TOK_BOS | CP_TOK_PARSE_SPECIAL);
	ck_assert_int_gt(n, 2);
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	ck_assert_ptr_nonnull(strchr(out, '\n'));
	assert_ids(ids, parse_ids(out, ids, 64), want, n, "cpq --tokenize", 0);
	argv[5] = "--count";
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	snprintf(num, sizeof(num), "%d\n", n);
	ck_assert_str_eq(out, num);
	served_stop(&s);
	free(path);
}
END_TEST
SUITE_TEST("requests", test_cpq_tokenize);

/* One TOKENIZE record by hand: hdr fields and text; the reply's status. */
static int
raw_tokenize(int fd, uint32_t flags, uint32_t text_len, uint32_t max_ids,
    uint32_t reserved, const char *text, size_t sent, int32_t *ids,
    uint32_t *n_ids)
{
	unsigned char rec[256], reply[sizeof(struct cp_tokens_msg) + 256];
	struct cp_tokenize_req q;
	struct cp_tokens_msg m;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	memset(&q, 0, sizeof(q));
	q.hdr.magic = CP_PROTO_MAGIC;
	q.hdr.type = CP_MSG_TOKENIZE;
	q.hdr.version = CP_PROTO_VERSION;
	q.flags = flags;
	q.text_len = text_len;
	q.max_ids = max_ids;
	q.reserved = reserved;
	ck_assert_uint_le(sizeof(q) + sent, sizeof(rec));
	memcpy(rec, &q, sizeof(q));
	memcpy(rec + sizeof(q), text, sent);
	ck_assert_int_eq(send(fd, rec, sizeof(q) + sent, MSG_NOSIGNAL),
	    (ssize_t)(sizeof(q) + sent));
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	n = recv(fd, reply, sizeof(reply), 0);
	ck_assert_int_ge(n, (ssize_t)sizeof(m));
	memcpy(&m, reply, sizeof(m));
	ck_assert_uint_eq(m.hdr.magic, CP_PROTO_MAGIC);
	ck_assert_uint_eq(m.hdr.type, CP_MSG_TOKENS);
	ck_assert_uint_eq((size_t)n, sizeof(m) + 4 * (size_t)m.n_sent);
	ck_assert_uint_le(m.n_sent, max_ids);
	if (m.status < 0)
		ck_assert_uint_eq(m.n_ids, 0);
	if (ids != NULL)
		memcpy(ids, reply + sizeof(m), 4 * (size_t)m.n_sent);
	if (n_ids != NULL)
		*n_ids = m.n_ids;
	return m.status;
}

/* Hostile records are answered with an error; the session stays. */
START_TEST(test_hostile_request)
{
	static const char text[] = "Hello world";
	const size_t len = sizeof(text) - 1;
	struct raw_client rc;
	struct cp_stats_req sq;
	struct cp_stats_msg *sm;
	struct served s;
	int32_t ids[64];
	uint32_t n_ids = 0;
	char *path;

	ck_assert_ptr_nonnull(path = fx_path(spm_rel));
	memset(&s, 0, sizeof(s));
	served_start(&s, cpd_bin, cpmodel_bin, path);
	memset(&rc, 0, sizeof(rc));
	ck_assert_int_eq(raw_connect(s.d.sock, &rc, 0, 0, 0), 0);
	ck_assert_uint_ne(rc.w.features & CP_FEAT_TOKENIZE, 0);

	/* Bad flags, reserved, max_ids; text_len past the record; too long. */
	ck_assert_int_eq(raw_tokenize(rc.fd, 0x80, len, 8, 0, text, len, NULL,
	    NULL), -EINVAL);
	ck_assert_int_eq(raw_tokenize(rc.fd, 0, len, 8, 1, text, len, NULL,
	    NULL), -EINVAL);
	ck_assert_int_eq(raw_tokenize(rc.fd, 0, len, CP_TOKENIZE_IDS_MAX + 1,
	    0, text, len, NULL, NULL), -EINVAL);
	ck_assert_int_eq(raw_tokenize(rc.fd, 0, len + 100, 8, 0, text, len,
	    NULL, NULL), -EINVAL);
	ck_assert_int_eq(raw_tokenize(rc.fd, 0, len - 1, 8, 0, text, len,
	    NULL, NULL), -EINVAL);
	ck_assert_int_eq(raw_tokenize(rc.fd, 0, UINT32_MAX, 8, 0, text, len,
	    NULL, NULL), -E2BIG);
	ck_assert_int_eq(raw_tokenize(rc.fd, 0, CP_TOKENIZE_TEXT_MAX + 1, 8,
	    0, text, len, NULL, NULL), -E2BIG);

	/* A record shorter than the request struct. */
	{
		struct cp_msg_hdr h = { CP_PROTO_MAGIC, CP_MSG_TOKENIZE,
		    CP_PROTO_VERSION };
		unsigned char reply[64];
		struct cp_tokens_msg m;
		struct pollfd p = { .fd = rc.fd, .events = POLLIN };

		ck_assert_int_eq(send(rc.fd, &h, sizeof(h), MSG_NOSIGNAL),
		    (ssize_t)sizeof(h));
		ck_assert_int_eq(poll(&p, 1, 10000), 1);
		ck_assert_int_eq(recv(rc.fd, reply, sizeof(reply), 0),
		    (ssize_t)sizeof(m));
		memcpy(&m, reply, sizeof(m));
		ck_assert_int_eq(m.status, -EINVAL);
	}

	/* Still served: a good request, with fewer ids sent than needed. */
	ck_assert_int_eq(raw_tokenize(rc.fd, CP_TOKF_BOS, len, 64, 0, text,
	    len, ids, &n_ids), 0);
	ck_assert_uint_ge(n_ids, 2);
	ck_assert_int_eq(ids[0], 1);
	ck_assert_int_eq(raw_tokenize(rc.fd, CP_TOKF_BOS, len, 1, 0, text,
	    len, ids, &n_ids), 0);
	ck_assert_int_eq(ids[0], 1);
	/* And so are statistics, which count no protocol error. */
	memset(&sq, 0, sizeof(sq));
	sq.hdr.magic = CP_PROTO_MAGIC;
	sq.hdr.type = CP_MSG_STATS_REQ;
	sq.hdr.version = CP_PROTO_VERSION;
	ck_assert_int_eq(send(rc.fd, &sq, sizeof(sq), MSG_NOSIGNAL),
	    (ssize_t)sizeof(sq));
	ck_assert_ptr_nonnull(sm = malloc(sizeof(*sm)));
	{
		struct pollfd p = { .fd = rc.fd, .events = POLLIN };

		ck_assert_int_eq(poll(&p, 1, 10000), 1);
	}
	ck_assert_int_eq(recv(rc.fd, sm, sizeof(*sm), 0),
	    (ssize_t)sizeof(*sm));
	ck_assert_uint_eq(sm->hdr.type, CP_MSG_STATS);
	ck_assert_uint_eq(sm->stats.protocol_errors, 0);
	free(sm);
	raw_close(&rc);
	served_stop(&s);
	free(path);
}
END_TEST
SUITE_TEST("requests", test_hostile_request);

/* A daemon that does not offer CP_FEAT_TOKENIZE (the mock engine's). */
START_TEST(test_not_offered)
{
	struct srv_config cfg;
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	struct hd d;

	hd_config(&cfg);
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	cp_connect_opts_init(&o);
	o.socket_path = d.path;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	ck_assert_int_eq(cp_tokenize(c, "hi", 2, NULL, 0, 0), -EOPNOTSUPP);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("requests", test_not_offered);

SUITE_CASE("fixtures", 120);
SUITE_CASE("requests", 60);

int
main(void)
{
	char *model;
	int rc;

	if ((model = cpd_need("check_tokenize", cpd_bin, cpmodel_bin,
	    sizeof(cpd_bin), spm_rel)) == NULL)
		return 77;
	if (n_vocabs == 0) {
		fprintf(stderr, "check_tokenize: no vectors in %s/vocab\n",
		    fx_dir());
		free(model);
		return 1;
	}
	rc = suite_main(suite_registered("tokenize"));
	for (int i = 0; i < n_vocabs; i++)
		free(vocabs[i]);
	free(model);
	return rc;
}
