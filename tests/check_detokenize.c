/*
 * check_detokenize.c - cp_detokenize() against a real cpd and a lying one.
 *
 * Golden values come from llama.cpp: for each vocabulary whose decoding
 * loses nothing (byte-level BPE, and SentencePiece with byte fallback),
 * the ids llama.cpp gave each test string (X.gguf.out) are named by the
 * daemon, and their pieces joined must be the string llama.cpp tokenized
 * (X.gguf.inp), with the one space a SentencePiece vocabulary adds in
 * front of a non-empty text (add_space_prefix: llama.cpp tokenized
 * " " + text).  WordPiece (bert-bge) lowercases and is left out.  Each
 * id named alone must give the same bytes as its slice of the batch.
 * Token texts of Llama 2's vocabulary (<s>, </s>, <0x0A>) pin the special
 * and byte tokens.  Then the limits and hostile records, each answered
 * with an error on a connection that keeps working; a lying daemon's
 * answers, each refused with CP_EPROTO; and cpq --json --logprobs, whose
 * first alternative's text must be the generated token's text.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpclient.h"
#include "lib/cpd_harness.h"
#include "lib/cpd_proc.h"
#include "lib/fake_cpd.h"
#include "lib/fixtures.h"
#include "lib/json.h"
#include "lib/prog.h"
#include "lib/served.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"
#include "lib/vocab_vecs.h"
#include "session.h"

static char cpd_bin[512], cpmodel_bin[512], cpq_bin[512];
static const char spm_rel[] = "vocab/ggml-vocab-llama-spm.gguf";

#define SPM_N_VOCAB	32000	/* Llama 2's vocabulary */
#define BUF_BYTES	8192

/* Vocabularies whose ids decode back to the text (check_tokenizer.c). */
static const struct {
	const char *rel;
	bool space_prefix;	/* SPM: llama.cpp tokenized " " + text */
} lossless[] = {
	{ "vocab/ggml-vocab-deepseek-coder.gguf", false },
	{ "vocab/ggml-vocab-deepseek-llm.gguf", false },
	{ "vocab/ggml-vocab-falcon.gguf", false },
	{ "vocab/ggml-vocab-gpt-2.gguf", false },
	{ "vocab/ggml-vocab-llama-bpe.gguf", false },
	{ "vocab/ggml-vocab-llama-spm.gguf", true },
	{ "vocab/ggml-vocab-mpt.gguf", false },
	{ "vocab/ggml-vocab-phi-3.gguf", true },
	{ "vocab/ggml-vocab-qwen2.gguf", false },
	{ "vocab/ggml-vocab-refact.gguf", false },
	{ "vocab/ggml-vocab-starcoder.gguf", false },
};

/* Serves the fixture rel, or says why not and returns false. */
static bool
serve_rel(struct served *s, const char *rel)
{
	char *path, why[512];

	if ((path = fx_path(rel)) == NULL) {
		printf("check_detokenize: %s skipped: not in the fixtures\n",
		    rel);
		return false;
	}
	if (!served_vocab_loads(path, why, sizeof(why))) {
		printf("check_detokenize: %s skipped: cpd cannot load its "
		    "tokenizer (%s)\n", rel, why);
		free(path);
		return false;
	}
	memset(s, 0, sizeof(*s));
	served_start(s, cpd_bin, cpmodel_bin, path);
	free(path);
	return true;
}

START_TEST(test_pieces_give_llama_cpp_text)
{
	const char *rel = lossless[_i].rel;
	static char buf[BUF_BYTES], one[BUF_BYTES], want[BUF_BYTES];
	uint32_t lens[256], len1;
	struct vocab_vecs vs;
	struct served s;
	size_t off, n_want;
	int i, j, n;

	if (!serve_rel(&s, rel))
		return;
	vv_read(rel, &vs);
	ck_assert_int_gt(vs.n, 0);
	for (i = 0; i < vs.n; i++) {
		const struct vocab_vec *v = &vs.v[i];
		bool prefix = lossless[_i].space_prefix && v->len > 0;

		ck_assert_uint_lt(v->len + 1, sizeof(want));
		n_want = 0;
		if (prefix)
			want[n_want++] = ' ';
		memcpy(want + n_want, v->s, v->len);
		n_want += v->len;
		n = cp_detokenize(s.c, v->ids, (size_t)v->n, buf, sizeof(buf),
		    lens, 0);
		ck_assert_msg(n == (int)n_want && memcmp(buf, want, n_want) == 0,
		    "%s: string %d: '%.*s' gave %d bytes '%.*s'", rel, i,
		    (int)n_want, want, n, n > 0 ? n : 0, buf);
		off = 0;
		for (j = 0; j < v->n; j++) {
			ck_assert_int_eq(cp_detokenize(s.c, &v->ids[j], 1, one,
			    sizeof(one), &len1, 0), (int)lens[j]);
			ck_assert_uint_eq(len1, lens[j]);
			ck_assert_int_eq(memcmp(one, buf + off, len1), 0);
			off += lens[j];
		}
		ck_assert_uint_eq(off, n_want);
	}
	vv_free(&vs);
	served_stop(&s);
}
END_TEST
SUITE_LOOP("fixtures", test_pieces_give_llama_cpp_text, 0,
    (int)(sizeof(lossless) / sizeof(lossless[0])));

/* The ids llama.cpp gave "Hello world" in vs; their number. */
static int
hello_world(const struct vocab_vecs *vs, const int32_t **ids)
{
	for (int i = 0; i < vs->n; i++)
		if (vs->v[i].len == 11 && memcmp(vs->v[i].s, "Hello world",
		    11) == 0) {
			*ids = vs->v[i].ids;
			return vs->v[i].n;
		}
	ck_abort_msg("no \"Hello world\" among the vectors");
	return 0;
}

/*
 * Special and byte tokens, the size the caller needs, and what the library
 * refuses before sending, on Llama 2's vocabulary.
 */
START_TEST(test_client_limits)
{
	/* Token texts of Llama 2's tokenizer.model: 1 <s>, 2 </s>, 3 + b <0xb>. */
	const int32_t special[] = { 1, 2 }, nl = 3 + 0x0A, e2 = 3 + 0xE2;
	static int32_t many[CP_DETOKENIZE_IDS_MAX + 1];
	struct vocab_vecs vs;
	const int32_t *hw;
	struct served s;
	uint32_t lens[4];
	char buf[64];
	int n_hw;

	ck_assert(serve_rel(&s, spm_rel));
	vv_read(spm_rel, &vs);
	n_hw = hello_world(&vs, &hw);
	ck_assert_int_eq(n_hw, 2);

	ck_assert_int_eq(cp_detokenize(s.c, special, 2, buf, sizeof(buf),
	    lens, 0), 0);
	ck_assert_uint_eq(lens[0] + lens[1], 0);
	ck_assert_int_eq(cp_detokenize(s.c, special, 2, buf, sizeof(buf),
	    lens, CP_DETOK_SPECIAL), 7);
	ck_assert_int_eq(memcmp(buf, "<s></s>", 7), 0);
	ck_assert_uint_eq(lens[0], 3);
	ck_assert_int_eq(cp_detokenize(s.c, &nl, 1, buf, sizeof(buf), lens,
	    0), 1);
	ck_assert_int_eq(buf[0], '\n');
	/* A piece that is part of a UTF-8 character is still its byte. */
	ck_assert_int_eq(cp_detokenize(s.c, &e2, 1, buf, sizeof(buf), lens,
	    0), 1);
	ck_assert_uint_eq((unsigned char)buf[0], 0xE2);

	/* Too small: the lengths say how much is needed, buf is untouched. */
	memset(buf, '#', sizeof(buf));
	lens[0] = lens[1] = 99;
	ck_assert_int_eq(cp_detokenize(s.c, hw, 2, buf, 11, lens, 0),
	    -ENOSPC);
	ck_assert_uint_eq(lens[0] + lens[1], 12);	/* " Hello world" */
	ck_assert_int_eq(buf[0], '#');
	ck_assert_int_eq(cp_detokenize(s.c, hw, 2, NULL, 0, lens, 0),
	    -ENOSPC);
	ck_assert_int_eq(cp_detokenize(s.c, hw, 2, buf, 12, lens, 0), 12);
	ck_assert_int_eq(memcmp(buf, " Hello world", 12), 0);
	ck_assert_int_eq(cp_detokenize(s.c, NULL, 0, NULL, 0, NULL, 0), 0);

	/* Refused before sending. */
	ck_assert_int_eq(cp_detokenize(s.c, hw, 2, buf, 12, lens, 0x2),
	    -EINVAL);
	ck_assert_int_eq(cp_detokenize(s.c, NULL, 2, buf, 12, lens, 0),
	    -EINVAL);
	ck_assert_int_eq(cp_detokenize(s.c, hw, 2, buf, 12, NULL, 0),
	    -EINVAL);
	ck_assert_int_eq(cp_detokenize(s.c, hw, 2, NULL, 12, lens, 0),
	    -EINVAL);
	ck_assert_int_eq(cp_detokenize(s.c, many, CP_DETOKENIZE_IDS_MAX + 1,
	    buf, sizeof(buf), NULL, 0), -EINVAL);
	{
		static uint32_t big_lens[CP_DETOKENIZE_IDS_MAX + 1];

		ck_assert_int_eq(cp_detokenize(s.c, many,
		    CP_DETOKENIZE_IDS_MAX + 1, buf, sizeof(buf), big_lens, 0),
		    -E2BIG);
		/* 4096 ids of <unk> (id 0): nothing each, accepted. */
		ck_assert_int_eq(cp_detokenize(s.c, many,
		    CP_DETOKENIZE_IDS_MAX, buf, sizeof(buf), big_lens, 0), 0);
	}
	vv_free(&vs);
	served_stop(&s);
}
END_TEST
SUITE_TEST("requests", test_client_limits);

/* Ids outside the vocabulary are refused; the daemon keeps serving. */
START_TEST(test_out_of_range)
{
	const int32_t bad[][2] = {
		{ -1, 5 }, { SPM_N_VOCAB, 5 }, { 5, SPM_N_VOCAB }, { INT32_MAX, 5 },
		{ INT32_MIN, 5 },
	};
	const int32_t last = SPM_N_VOCAB - 1;
	uint32_t lens[2];
	struct cp_stats st;
	struct served s;
	char buf[64];
	size_t i;

	ck_assert(serve_rel(&s, spm_rel));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(cp_detokenize(s.c, bad[i], 2, buf, sizeof(buf),
		    lens, 0), -ERANGE);
		ck_assert_int_ge(cp_detokenize(s.c, &last, 1, buf, sizeof(buf),
		    lens, 0), 1);
	}
	ck_assert_int_eq(cp_stats(s.c, &st), 0);
	ck_assert_uint_eq(st.protocol_errors, 0);
	ck_assert_uint_eq(st.clients, 1);
	served_stop(&s);
}
END_TEST
SUITE_TEST("requests", test_out_of_range);

/* One DETOKENIZE record by hand; the reply's status, checked for shape. */
static int
raw_detok(int fd, const struct cp_detokenize_req *q, const int32_t *ids,
    size_t n_sent, char *pieces, uint32_t *n_bytes)
{
	static unsigned char rec[sizeof(*q) + 4 * (CP_DETOKENIZE_IDS_MAX + 8)];
	static unsigned char reply[sizeof(struct cp_pieces_msg) +
	    4 * CP_DETOKENIZE_IDS_MAX + CP_DETOKENIZE_BYTES_MAX + 1];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct cp_pieces_msg m;
	ssize_t n;

	ck_assert_uint_le(n_sent, CP_DETOKENIZE_IDS_MAX + 8);
	memcpy(rec, q, sizeof(*q));
	if (n_sent > 0)
		memcpy(rec + sizeof(*q), ids, 4 * n_sent);
	ck_assert_int_eq(send(fd, rec, sizeof(*q) + 4 * n_sent, MSG_NOSIGNAL),
	    (ssize_t)(sizeof(*q) + 4 * n_sent));
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	n = recv(fd, reply, sizeof(reply), 0);
	ck_assert_int_ge(n, (ssize_t)sizeof(m));
	memcpy(&m, reply, sizeof(m));
	ck_assert_uint_eq(m.hdr.magic, CP_PROTO_MAGIC);
	ck_assert_uint_eq(m.hdr.type, CP_MSG_PIECES);
	ck_assert_uint_eq((size_t)n, sizeof(m) + 4 * (size_t)m.n_ids +
	    m.n_sent);
	if (m.status < 0)
		ck_assert_uint_eq(m.n_ids + m.n_bytes + m.n_sent, 0);
	if (pieces != NULL)
		memcpy(pieces, reply + sizeof(m) + 4 * (size_t)m.n_ids,
		    m.n_sent);
	if (n_bytes != NULL)
		*n_bytes = m.n_sent == m.n_bytes ? m.n_bytes : UINT32_MAX;
	return m.status;
}

static void
req_init(struct cp_detokenize_req *q, uint32_t n_ids, uint32_t max_bytes)
{
	memset(q, 0, sizeof(*q));
	cp_msg_hdr_set(&q->hdr, CP_MSG_DETOKENIZE);
	q->n_ids = n_ids;
	q->max_bytes = max_bytes;
}

/* Hostile records are answered with an error; the session stays. */
START_TEST(test_hostile_request)
{
	static int32_t ids[CP_DETOKENIZE_IDS_MAX + 1];
	const int32_t hw[2] = { 15043, 3186 };	/* llama-spm.gguf.out */
	struct cp_detokenize_req q;
	struct cp_wire_stats st;
	struct raw_client rc;
	struct served s;
	uint32_t n_bytes = 0;
	char pieces[64];

	ck_assert(serve_rel(&s, spm_rel));
	memset(&rc, 0, sizeof(rc));
	ck_assert_int_eq(raw_connect(s.d.sock, &rc, 0, 0, 0), 0);
	ck_assert_uint_ne(rc.w.features & CP_FEAT_DETOKENIZE, 0);

	req_init(&q, 2, 64);
	q.flags = 0x80;
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, NULL), -EINVAL);
	req_init(&q, 2, 64);
	q.reserved = 1;
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, NULL), -EINVAL);
	req_init(&q, 2, CP_DETOKENIZE_BYTES_MAX + 1);
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, NULL), -EINVAL);
	req_init(&q, 3, 64);		/* more ids said than sent */
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, NULL), -EINVAL);
	req_init(&q, 1, 64);		/* fewer */
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, NULL), -EINVAL);
	req_init(&q, UINT32_MAX, 64);
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, NULL), -E2BIG);
	req_init(&q, CP_DETOKENIZE_IDS_MAX + 1, 64);
	ck_assert_int_eq(raw_detok(rc.fd, &q, ids, CP_DETOKENIZE_IDS_MAX + 1,
	    NULL, NULL), -E2BIG);
	{
		struct cp_msg_hdr h;
		struct pollfd p = { .fd = rc.fd, .events = POLLIN };
		struct cp_pieces_msg m;

		cp_msg_hdr_set(&h, CP_MSG_DETOKENIZE);
		ck_assert_int_eq(send(rc.fd, &h, sizeof(h), MSG_NOSIGNAL),
		    (ssize_t)sizeof(h));
		ck_assert_int_eq(poll(&p, 1, 10000), 1);
		ck_assert_int_eq(recv(rc.fd, &m, sizeof(m), 0),
		    (ssize_t)sizeof(m));
		ck_assert_int_eq(m.status, -EINVAL);
	}

	/* Still served: the pieces, or only their lengths without room. */
	req_init(&q, 2, 64);
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, pieces, &n_bytes), 0);
	ck_assert_uint_eq(n_bytes, 12);
	ck_assert_int_eq(memcmp(pieces, " Hello world", 12), 0);
	req_init(&q, 2, 11);
	ck_assert_int_eq(raw_detok(rc.fd, &q, hw, 2, NULL, &n_bytes), 0);
	ck_assert_uint_eq(n_bytes, UINT32_MAX);	/* n_sent 0, n_bytes 12 */
	ck_assert_int_eq(raw_stats(&rc, &st), 0);
	ck_assert_uint_eq(st.protocol_errors, 0);
	raw_close(&rc);
	served_stop(&s);
}
END_TEST
SUITE_TEST("requests", test_hostile_request);

/* hd's piece hook: 100 bytes for every id below 512. */
static const char *
long_piece(const void *arg, int32_t id, uint32_t flags, size_t *len)
{
	static const char p[100];

	(void)arg;
	(void)flags;
	if (id < 0 || id >= 512)
		return NULL;
	*len = sizeof(p);
	return p;
}

/*
 * The daemon's io loop with the mock engine: without a piece hook the
 * feature is not offered; with one, pieces past CP_DETOKENIZE_BYTES_MAX
 * in all give -E2BIG.
 */
START_TEST(test_server_bounds)
{
	static int32_t ids[700];
	static uint32_t lens[700];
	static char buf[CP_DETOKENIZE_BYTES_MAX];
	struct srv_config cfg;
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	struct hd d;

	hd_config(&cfg);
	if (_i == 1)
		cfg.piece = long_piece;
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	cp_connect_opts_init(&o);
	o.socket_path = d.path;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	if (_i == 0) {
		ck_assert_int_eq(cp_detokenize(c, ids, 1, buf, sizeof(buf),
		    lens, 0), -EOPNOTSUPP);
	} else {
		ck_assert_int_eq(cp_detokenize(c, ids, 655, buf, sizeof(buf),
		    lens, 0), 65500);
		ck_assert_uint_eq(lens[654], 100);
		ck_assert_int_eq(cp_detokenize(c, ids, 656, buf, sizeof(buf),
		    lens, 0), -E2BIG);
		ck_assert_int_eq(cp_detokenize(c, ids, 700, buf, sizeof(buf),
		    lens, 0), -E2BIG);
		ids[3] = 512;
		ck_assert_int_eq(cp_detokenize(c, ids, 4, buf, sizeof(buf),
		    lens, 0), -ERANGE);
	}
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("requests", test_server_bounds, 0, 2);

/* ---- a lying daemon ---------------------------------------------------- */

/* How the answer to ids {7, 9} (pieces "abc", "de") is spoiled. */
enum lie {
	LIE_NONE,		/* honest */
	LIE_SUM,		/* lengths 4 + 2 for 5 bytes */
	LIE_N_IDS,		/* three lengths for two ids */
	LIE_SHORT,		/* n_sent 4 of n_bytes 5 */
	LIE_RECORD,		/* a byte more than it says */
	LIE_NOT_SENT,		/* n_sent 0 although 5 bytes fit */
	LIE_TOO_MANY,		/* n_bytes past the protocol's bound */
	LIE_STATUS,		/* status 1 */
	LIE_ERR_BODY,		/* -ERANGE, yet lengths follow */
	LIE_TYPE,		/* a TOKENS record */
	LIE_RANGE,		/* an honest -ERANGE */
	LIE_N
};

/* Queues on the fake's socket the answer the client will read. */
static void
queue_answer(struct fake *f, enum lie lie)
{
	unsigned char rec[128];
	struct cp_pieces_msg m;
	uint32_t lens[3] = { 3, 2, 0 };
	size_t n = sizeof(m);

	memset(&m, 0, sizeof(m));
	cp_msg_hdr_set(&m.hdr, lie == LIE_TYPE ? CP_MSG_TOKENS : CP_MSG_PIECES);
	m.n_ids = lie == LIE_N_IDS ? 3 : 2;
	m.n_bytes = 5;
	m.n_sent = lie == LIE_SHORT ? 4 : lie == LIE_NOT_SENT ? 0 : 5;
	if (lie == LIE_SUM)
		lens[0] = 4;
	if (lie == LIE_TOO_MANY) {
		lens[0] = CP_DETOKENIZE_BYTES_MAX;
		m.n_bytes = CP_DETOKENIZE_BYTES_MAX + 2;
		m.n_sent = 0;
	}
	if (lie == LIE_STATUS)
		m.status = 1;
	if (lie == LIE_ERR_BODY || lie == LIE_RANGE)
		m.status = -ERANGE;
	if (lie == LIE_RANGE)
		m.n_ids = m.n_bytes = m.n_sent = 0;
	memcpy(rec + n, lens, 4 * m.n_ids);
	n += 4 * m.n_ids;
	memcpy(rec + n, "abcde", m.n_sent);
	n += m.n_sent;
	if (lie == LIE_RECORD)
		rec[n++] = 'f';
	memcpy(rec, &m, sizeof(m));
	ck_assert_int_eq(sess_send(f->s->fd, rec, n, NULL, 0), 0);
}

START_TEST(test_lying_daemon)
{
	const int32_t ids[2] = { 7, 9 };
	struct cp_client *c;
	uint32_t lens[2] = { 0, 0 };
	char buf[16];
	struct fake f;
	int r;

	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	queue_answer(&f, (enum lie)_i);
	memset(buf, 0, sizeof(buf));
	r = cp_detokenize(c, ids, 2, buf, sizeof(buf), lens, 0);
	switch (_i) {
	case LIE_NONE:
		ck_assert_int_eq(r, 5);
		ck_assert_uint_eq(lens[0], 3);
		ck_assert_uint_eq(lens[1], 2);
		ck_assert_str_eq(buf, "abcde");
		break;
	case LIE_RANGE:
		ck_assert_int_eq(r, -ERANGE);
		/* Usable still: the next answer is read. */
		queue_answer(&f, LIE_NONE);
		ck_assert_int_eq(cp_detokenize(c, ids, 2, buf, sizeof(buf),
		    lens, 0), 5);
		break;
	default:
		ck_assert_msg(r == CP_EPROTO, "lie %d: %d", _i, r);
		ck_assert_uint_eq(lens[0] + lens[1], 0);
		/* The connection is broken for good. */
		ck_assert_int_eq(cp_detokenize(c, ids, 2, buf, sizeof(buf),
		    lens, 0), CP_EPROTO);
	}
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_LOOP("liar", test_lying_daemon, 0, LIE_N);

/* ---- cpq ---------------------------------------------------------------- */

/*
 * cpq --json --logprobs 3, greedy: each token's first alternative is the
 * token, and its "token" and "bytes" are the text the token streamed.
 */
START_TEST(test_cpq_logprobs_names)
{
	static char out[1 << 17];
	const char *argv[] = { cpq_bin, "-s", NULL, "--json", "--logprobs",
	    "3", "-n", "24", "--temp", "0", "Once upon a time", NULL };
	char *model, *line, *save = NULL;
	struct cpd d;
	int n = 0;

	ck_assert_ptr_nonnull(model = fx_path("aidreams260K.gguf"));
	cpd_start_bin(&d, cpd_bin, model, NULL);
	free(model);
	argv[2] = d.sock;
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	for (line = strtok_r(out, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		struct json *j = json_parse(line, strlen(line), NULL, 0);
		const struct json *text, *top0, *bytes;
		size_t k;

		ck_assert_msg(j != NULL, "not JSON: %s", line);
		if (strcmp(json_get(j, "event")->str, "token") != 0) {
			json_free(j);
			continue;
		}
		text = json_get(j, "text");
		ck_assert_uint_eq(json_get(j, "top_logprobs")->n, 3);
		top0 = json_at(json_get(j, "top_logprobs"), 0);
		ck_assert_double_eq(json_get(top0, "id")->num,
		    json_get(j, "token")->num);
		ck_assert_ptr_nonnull(json_get(top0, "token"));
		ck_assert_msg(json_get(top0, "token")->len == text->len &&
		    memcmp(json_get(top0, "token")->str, text->str,
		    text->len) == 0, "token %d: \"%s\", text \"%s\"", n,
		    json_get(top0, "token")->str, text->str);
		bytes = json_get(top0, "bytes");
		ck_assert_uint_eq(bytes->n, text->len);
		for (k = 0; k < bytes->n; k++)
			ck_assert_int_eq((int)json_at(bytes, k)->num,
			    (unsigned char)text->str[k]);
		n++;
		json_free(j);
	}
	ck_assert_int_eq(n, 24);
	cpd_stop(&d);
	cpd_cleanup(&d);
}
END_TEST
SUITE_TEST("cpq", test_cpq_logprobs_names);

/*
 * cpq --detokenize prints the text of llama.cpp's ids for "Hello world";
 * an id past the vocabulary names its range.
 */
START_TEST(test_cpq_detokenize)
{
	const char *argv[] = { cpq_bin, "--socket", NULL, "--detokenize",
	    "15043", "3186", NULL };
	const char *bad[] = { cpq_bin, "--socket", NULL, "--detokenize",
	    "15043", "32000", NULL };
	const char *junk[] = { cpq_bin, "--socket", NULL, "--detokenize",
	    "15043x", NULL };
	struct served s;
	char out[256], err[512];

	ck_assert(serve_rel(&s, spm_rel));
	argv[2] = bad[2] = junk[2] = s.d.sock;
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	ck_assert_str_eq(out, " Hello world\n");
	snprintf(err, sizeof(err), "%s/cpq-%d.err", tmp_dir(), (int)getpid());
	ck_assert_int_eq(prog_runv(bad, err), 1);
	ck_assert(cpd_file_has(err, "outside the vocabulary (0 to 31999)"));
	unlink(err);
	ck_assert_int_eq(prog_capture(junk, out, sizeof(out)), 2);
	served_stop(&s);
}
END_TEST
SUITE_TEST("cpq", test_cpq_detokenize);

SUITE_CASE("fixtures", 120);
SUITE_CASE("requests", 60);
SUITE_CASE("liar", 20);
SUITE_CASE("cpq", 60);

int
main(void)
{
	char *model;
	int rc;

	if ((model = cpd_need("check_detokenize", cpd_bin, cpmodel_bin,
	    sizeof(cpd_bin), spm_rel)) == NULL)
		return 77;
	if (prog_find(cpq_bin, sizeof(cpq_bin), "cpq", NULL) != 0) {
		printf("check_detokenize: skipped, %s is not built\n", cpq_bin);
		free(model);
		return 77;
	}
	rc = suite_main(suite_registered("detokenize"));
	free(model);
	return rc;
}
