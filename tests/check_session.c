/*
 * check_session.c - one client's session (daemon/session.c): handshake
 * records, segment set-up, SQ validation, CQ writing.
 *
 * The tests play the client by writing its shared segment directly:
 * every rule of cp_proto.h's validation list is broken once and must end
 * the session (-EPROTO), never be repaired.  check_server.c does the same
 * through a running daemon.
 */
#include "session.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/cpd_harness.h"	/* hd_count_fds, raw_hello_init */
#include "lib/suite.h"
#include "ring.h"


/* ---- a session and a hand-written client side -------------------- */

struct sf {
	struct session *s;
	int peer;
	int fds[CP_FD_MAX];
	int nfds;
	struct cp_welcome w;
	unsigned char *map;
	struct cp_seg_ctl *ctl;
	struct cp_sqe *sq;
	unsigned char *arena;
	struct cp_cqe *cq;
	uint32_t tail;		/* client's next SQ index */
	uint32_t apos;		/* next free arena byte */
};

static void
limits(struct sess_limits *l, uint32_t wake, uint32_t max_reqs,
    uint32_t max_prompt)
{
	l->sq_default = 64;
	l->sq_max = 256;
	l->cq_default = 64;
	l->cq_max = 1024;
	l->arena_default = 65536;
	l->arena_max = 1u << 20;
	l->max_reqs = max_reqs;
	l->max_prompt_bytes = max_prompt;
	l->wake_mode = wake;
}

static void
sf_open_lim(struct sf *f, uint32_t sq, uint32_t cq, uint32_t arena,
    const struct sess_limits *l)
{
	struct cp_hello h;
	struct cp_seg_hdr *hdr;
	int sv[2];

	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
	    sv), 0);
	f->peer = sv[1];
	f->s = sess_new(sv[0], 3, 7);
	ck_assert_ptr_nonnull(f->s);
	raw_hello_init(&h, sq, cq, arena);
	ck_assert_int_eq(sess_setup(f->s, &h, l, &f->w, f->fds, &f->nfds), 0);
	f->map = mmap(NULL, f->w.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
	    f->fds[CP_FD_MEMFD], 0);
	ck_assert_ptr_ne(f->map, MAP_FAILED);
	hdr = (struct cp_seg_hdr *)f->map;
	f->ctl = (struct cp_seg_ctl *)(f->map + hdr->ctl_off);
	f->sq = (struct cp_sqe *)(f->map + hdr->sq_off);
	f->arena = f->map + hdr->arena_off;
	f->cq = (struct cp_cqe *)(f->map + hdr->cq_off);
}

static void
sf_open(struct sf *f, uint32_t wake, uint32_t max_reqs)
{
	struct sess_limits l;

	limits(&l, wake, max_reqs, 1u << 20);
	sf_open_lim(f, 16, 16, 4096, &l);
}

static void
sf_close(struct sf *f)
{
	int i;

	munmap(f->map, f->w.seg_bytes);
	for (i = 0; i < f->nfds; i++)
		close(f->fds[i]);
	close(f->peer);
	sess_free(f->s);
}

/* Copies bytes into the arena; returns their offset. */
static uint32_t
sf_arena(struct sf *f, const void *bytes, uint32_t len)
{
	uint32_t off = f->apos;

	ck_assert_uint_le(off + len, f->w.arena_bytes);
	memcpy(f->arena + off, bytes, len);
	f->apos += len;
	return off;
}

static void
sf_put(struct sf *f, const struct cp_sqe *e)
{
	memcpy(&f->sq[f->tail & (f->w.sq_entries - 1)], e, sizeof(*e));
	f->tail++;
	ring_store_release(&f->ctl->sq_tail.v, f->tail);
}

static struct cp_sqe
sqe_submit(uint32_t id, uint32_t off, uint32_t len)
{
	struct cp_sqe e;

	memset(&e, 0, sizeof(e));
	e.op = CP_OP_SUBMIT;
	e.req_id = id;
	e.arena_off = off;
	e.arena_len = len;
	e.params.temperature = 0.8f;
	e.params.top_p = 1.0f;
	e.params.repeat_penalty = 1.0f;
	return e;
}

static struct cp_sqe
sqe_simple(uint8_t op, uint32_t id)
{
	struct cp_sqe e;

	memset(&e, 0, sizeof(e));
	e.op = op;
	e.req_id = id;
	return e;
}

/* Submits text prompt as request id and consumes it; returns the command. */
static struct ep_cmd *
sf_submit_text(struct sf *f, uint32_t id, const char *prompt)
{
	struct sess_out out;
	struct cp_sqe e;
	uint32_t len = (uint32_t)strlen(prompt);

	e = sqe_submit(id, sf_arena(f, prompt, len), len);
	sf_put(f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f->s, &out), 1);
	ck_assert_uint_eq(out.n, 1);
	return out.head;
}

/* Consumes and expects a violation whose reason contains what. */
static void
expect_violation(struct sf *f, const char *what)
{
	struct sess_out out;
	int r;

	sess_out_init(&out);
	r = sess_consume(f->s, &out);
	ep_cmd_free_list(out.head);
	ck_assert_int_eq(r, -EPROTO);
	ck_assert_msg(strstr(f->s->why, what) != NULL,
	    "reason \"%s\" lacks \"%s\"", f->s->why, what);
}

/* A fresh session (futex wake, 8 requests) refuses e for a reason with what. */
static void
expect_bad_sqe(const struct cp_sqe *e, const char *what)
{
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	sf_put(&f, e);
	expect_violation(&f, what);
	sf_close(&f);
}

static int
count_fds(void)
{
	return hd_count_fds(getpid());
}

/* ---- handshake ------------------------------------------------------ */

START_TEST(test_setup_segment)
{
	struct sf f;
	struct cp_seg_hdr *h;
	struct cp_seg_layout l;
	struct stat st;
	int seals;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ck_assert_int_eq(f.nfds, 2);
	ck_assert_uint_eq(f.w.n_fds, 2);
	ck_assert_int_eq(f.w.status, 0);
	ck_assert_uint_eq(f.w.sq_entries, 16);
	ck_assert_uint_eq(f.w.cq_entries, 16);
	ck_assert_uint_eq(f.w.arena_bytes, 4096);
	ck_assert_uint_eq(f.w.max_reqs, 8);
	ck_assert_uint_eq(f.w.features, CP_FEAT_PROGRESS | CP_FEAT_STRICT |
	    CP_FEAT_CHAT | CP_FEAT_TOPN);
	ck_assert_uint_eq(f.w.reserved[0] | f.w.reserved[1] | f.w.reserved[2],
	    0);
	ck_assert_int_eq(cp_seg_layout(16, 16, 4096, &l), 0);
	ck_assert_uint_eq(f.w.seg_bytes, l.seg_bytes);
	h = (struct cp_seg_hdr *)f.map;
	ck_assert_uint_eq(h->magic, CP_SEG_MAGIC);
	ck_assert_uint_eq(h->version, CP_PROTO_VERSION);
	ck_assert_uint_eq(h->cq_off, l.cq_off);
	ck_assert_uint_eq(h->arena_off, l.arena_off);
	ck_assert_uint_eq(h->sqe_bytes, 64);
	ck_assert_uint_eq(h->wake_mode, CP_WAKE_FUTEX);
	ck_assert_int_eq(fstat(f.fds[CP_FD_MEMFD], &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)l.seg_bytes);
	seals = fcntl(f.fds[CP_FD_MEMFD], F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
	    F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	/* The client cannot resize the segment under the daemon. */
	ck_assert_int_eq(ftruncate(f.fds[CP_FD_MEMFD], 4096), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(ftruncate(f.fds[CP_FD_MEMFD], (off_t)l.seg_bytes * 2),
	    -1);
	/* Its wake pipe end is the read end. */
	ck_assert_int_eq(fcntl(f.fds[CP_FD_CQ_WAKE], F_GETFL) & O_ACCMODE,
	    O_RDONLY);
	sf_close(&f);
}
END_TEST
SUITE_TEST("handshake", test_setup_segment);

START_TEST(test_setup_fd_mode)
{
	struct sf f;
	char b = 1;

	sf_open(&f, CP_WAKE_FD, 8);
	ck_assert_int_eq(f.nfds, 3);
	ck_assert_int_eq(fcntl(f.fds[CP_FD_SQ_WAKE], F_GETFL) & O_ACCMODE,
	    O_WRONLY);
	ck_assert_int_eq(sess_drain_wake(f.s), 0);
	ck_assert_int_eq(write(f.fds[CP_FD_SQ_WAKE], &b, 1), 1);
	ck_assert_int_eq(sess_drain_wake(f.s), 1);
	ck_assert_int_eq(sess_drain_wake(f.s), 0);
	sf_close(&f);
}
END_TEST
SUITE_TEST("handshake", test_setup_fd_mode);

START_TEST(test_clamp_sizes)
{
	struct sess_limits l;
	struct sf f;

	limits(&l, CP_WAKE_FUTEX, 4, 4096);
	sf_open_lim(&f, 3, 100, 5000, &l);
	ck_assert_uint_eq(f.w.sq_entries, CP_SQ_MIN);
	ck_assert_uint_eq(f.w.cq_entries, 128);
	ck_assert_uint_eq(f.w.arena_bytes, 8192);
	sf_close(&f);
	sf_open_lim(&f, 1u << 20, 0, 0xffffffffu, &l);
	ck_assert_uint_eq(f.w.sq_entries, 256);
	ck_assert_uint_eq(f.w.cq_entries, 64);
	ck_assert_uint_eq(f.w.arena_bytes, 1u << 20);
	sf_close(&f);
}
END_TEST
SUITE_TEST("handshake", test_clamp_sizes);

START_TEST(test_recv_closes_client_fds)
{
	struct cp_hello h;
	unsigned char buf[512];
	size_t len = 0;
	int sv[2], efd, before;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
	    sv), 0);
	efd = eventfd(0, EFD_CLOEXEC);
	raw_hello_init(&h, 0, 0, 0);
	ck_assert_int_eq(raw_send_fd(sv[1], &h, sizeof(h), efd),
	    (ssize_t)sizeof(h));
	before = count_fds();
	ck_assert_int_eq(sess_recv(sv[0], buf, sizeof(buf), &len), -EPROTO);
	/* The descriptor that arrived with it was closed again. */
	ck_assert_int_eq(count_fds(), before);
	close(efd);
	close(sv[0]);
	close(sv[1]);
}
END_TEST
SUITE_TEST("handshake", test_recv_closes_client_fds);

START_TEST(test_recv_truncated_and_bad)
{
	unsigned char big[600], buf[512];
	struct cp_hello h, out;
	size_t len = 0;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
	    sv), 0);
	ck_assert_int_eq(sess_recv(sv[0], buf, sizeof(buf), &len), -EAGAIN);
	memset(big, 0, sizeof(big));
	ck_assert_int_eq(send(sv[1], big, sizeof(big), 0),
	    (ssize_t)sizeof(big));
	ck_assert_int_eq(sess_recv(sv[0], buf, sizeof(buf), &len), -EPROTO);

	raw_hello_init(&h, 0, 0, 0);
	ck_assert_int_eq(send(sv[1], &h, 10, 0), 10);
	ck_assert_int_eq(sess_recv(sv[0], buf, sizeof(buf), &len), 0);
	ck_assert_uint_eq(len, 10);
	ck_assert_int_eq(sess_hello_check(buf, len, &out), -EPROTO);
	ck_assert_int_eq(sess_hello_check(&h, sizeof(h), &out), 0);
	h.hdr.version = 99;
	ck_assert_int_eq(sess_hello_check(&h, sizeof(h), &out),
	    -EPROTONOSUPPORT);
	raw_hello_init(&h, 0, 0, 0);
	h.hdr.magic ^= 1;
	ck_assert_int_eq(sess_hello_check(&h, sizeof(h), &out), -EPROTO);
	raw_hello_init(&h, 0, 0, 0);
	h.hdr.type = CP_MSG_STATS_REQ;
	ck_assert_int_eq(sess_hello_check(&h, sizeof(h), &out), -EPROTO);
	raw_hello_init(&h, 0, 0, 0);
	h.reserved[3] = 1;
	ck_assert_int_eq(sess_hello_check(&h, sizeof(h), &out), -EPROTO);
	raw_hello_init(&h, 0, 0, 0);
	h.flags = 1;
	ck_assert_int_eq(sess_hello_check(&h, sizeof(h), &out), -EPROTO);

	close(sv[1]);
	ck_assert_int_eq(sess_recv(sv[0], buf, sizeof(buf), &len), -EPIPE);
	close(sv[0]);
}
END_TEST
SUITE_TEST("handshake", test_recv_truncated_and_bad);

/* ---- SQ validation --------------------------------------------------- */

START_TEST(test_submit_ok)
{
	static const char stops[] = "END\0\n\n";	/* two, 7 bytes */
	struct sess_out out;
	struct ep_cmd *c;
	struct cp_sqe e;
	struct sf f;
	uint32_t off;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	off = sf_arena(&f, stops, sizeof(stops));
	sf_arena(&f, "hello", 5);
	e = sqe_submit(42, off, (uint32_t)sizeof(stops) + 5);
	e.stop_bytes = sizeof(stops);
	e.params.top_k = 40;
	e.params.max_tokens = 9;
	e.params.seed = 1234;
	e.params.flags = CP_PF_SEED | CP_PF_LOGPROB;
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 1);
	ck_assert_uint_eq(out.n, 1);
	c = out.head;
	ck_assert_uint_eq(c->kind, EP_CMD_SUBMIT);
	ck_assert_uint_eq(c->id, sess_port_id(3, 7, 42));
	ck_assert_uint_eq(c->client, 3);
	ck_assert_uint_eq(c->text_len, 5);
	ck_assert_int_eq(memcmp(c->text, "hello", 5), 0);
	ck_assert_uint_eq(c->n_stop, 2);
	ck_assert_str_eq(c->stop[0], "END");
	ck_assert_str_eq(c->stop[1], "\n\n");
	ck_assert_uint_eq(c->flags, EP_SUBMIT_SEED | EP_SUBMIT_LOGPROB);
	ck_assert_uint_eq(c->params.max_tokens, 9);
	ck_assert_int_eq(c->params.top_k, 40);
	ck_assert_float_eq(c->params.temperature, 0.8f);
	ck_assert_uint_eq(c->params.seed, 1234);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->sq_head.v), 1);
	ck_assert_ptr_nonnull(sess_req_find(f.s, 42));
	ep_cmd_free_list(out.head);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_submit_ok);

START_TEST(test_append_fragments)
{
	static const int32_t ids[3] = { 5, -1, 70000 };
	struct sess_out out;
	struct cp_sqe e;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_submit(1, sf_arena(&f, "ab", 2), 2);
	e.flags = CP_SQF_MORE;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 1);
	e.flags = CP_SQF_MORE;
	e.arena_off = sf_arena(&f, "cd", 2);
	e.arena_len = 2;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 1);
	e.arena_off = sf_arena(&f, "ef", 2);
	e.arena_len = 2;
	sf_put(&f, &e);
	/* A token prompt in two fragments. */
	e = sqe_submit(2, sf_arena(&f, ids, 8), 8);
	e.flags = CP_SQF_MORE | CP_SQF_TOKENS;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 2);
	e.arena_off = sf_arena(&f, &ids[2], 4);
	e.arena_len = 4;
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 5);
	ck_assert_uint_eq(out.n, 2);
	ck_assert_uint_eq(out.head->text_len, 6);
	ck_assert_int_eq(memcmp(out.head->text, "abcdef", 6), 0);
	ck_assert_uint_eq(out.head->next->flags & EP_SUBMIT_TOKENS,
	    EP_SUBMIT_TOKENS);
	ck_assert_uint_eq(out.head->next->n_tokens, 3);
	ck_assert_int_eq(out.head->next->tokens[0], 5);
	ck_assert_int_eq(out.head->next->tokens[1], -1);
	ck_assert_int_eq(out.head->next->tokens[2], 70000);
	ep_cmd_free_list(out.head);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_append_fragments);

START_TEST(test_tail_ahead)
{
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ring_store_release(&f.ctl->sq_tail.v, 17);	/* 16 entries */
	expect_violation(&f, "exceeds");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_tail_ahead);

START_TEST(test_tail_behind_head)
{
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ring_store_release(&f.ctl->sq_tail.v, 0xffffffffu);
	expect_violation(&f, "exceeds");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_tail_behind_head);

START_TEST(test_tail_wraps)
{
	struct ep_cmd *c;
	struct cp_sqe e;
	struct sf f;
	int i;

	/* Forty entries through a 16-slot ring: indices wrap, all sane. */
	sf_open(&f, CP_WAKE_FUTEX, 64);
	for (i = 1; i <= 40; i++) {
		struct sess_out out;

		e = sqe_submit((uint32_t)i, 0, 0);
		sf_put(&f, &e);
		e = sqe_simple(CP_OP_CANCEL, (uint32_t)i);
		sf_put(&f, &e);
		sess_out_init(&out);
		ck_assert_int_eq(sess_consume(f.s, &out), 2);
		ck_assert_uint_eq(out.n, 2);
		c = out.head;
		ck_assert_uint_eq(c->next->kind, EP_CMD_CANCEL);
		ep_cmd_free_list(c);
	}
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->sq_head.v), 80);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_tail_wraps);

START_TEST(test_unknown_opcode)
{
	struct cp_sqe e;

	e = sqe_simple(9, 1);
	expect_bad_sqe(&e, "unknown opcode");
}
END_TEST
SUITE_TEST("sq", test_unknown_opcode);

START_TEST(test_reserved_bits)
{
	struct cp_sqe e;
	struct sf f;

	e = sqe_submit(1, 0, 0);
	e.reserved = 1;
	expect_bad_sqe(&e, "reserved");

	e = sqe_submit(1, 0, 0);
	e.flags = 0x80;
	expect_bad_sqe(&e, "reserved flags");

	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_submit(1, 0, 0);
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_CANCEL, 1);
	e.params.seed = 1;
	sf_put(&f, &e);
	expect_violation(&f, "parameters set");
	sf_close(&f);

	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_submit(1, 0, 0);
	e.flags = CP_SQF_MORE;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 1);
	e.flags = CP_SQF_TOKENS;	/* only MORE is allowed on APPEND */
	sf_put(&f, &e);
	expect_violation(&f, "reserved flags");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_reserved_bits);

START_TEST(test_arena_range)
{
	static const uint32_t bad[][2] = {
		{ 4096 - 10, 20 },	/* runs off the end */
		{ 0, 4097 },		/* longer than the arena */
		{ 0xffffffffu, 2 },	/* off + len wraps in 32 bits */
		{ 4097, 0 },		/* empty, but starts outside */
	};
	struct cp_sqe e;
	struct sf f;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		e = sqe_submit(1, bad[i][0], bad[i][1]);
		expect_bad_sqe(&e, "arena range");
	}
	/* The last byte exactly is fine. */
	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_submit(1, 4095, 1);
	sf_put(&f, &e);
	{
		struct sess_out out;

		sess_out_init(&out);
		ck_assert_int_eq(sess_consume(f.s, &out), 1);
		ep_cmd_free_list(out.head);
	}
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_arena_range);

START_TEST(test_unknown_req_id)
{
	struct cp_sqe e;
	struct sf f;

	e = sqe_simple(CP_OP_CANCEL, 5);
	expect_bad_sqe(&e, "unknown request 5");

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "x"));
	e = sqe_simple(CP_OP_APPEND, 1);	/* 1 is complete */
	sf_put(&f, &e);
	expect_violation(&f, "not being built");
	sf_close(&f);

	e = sqe_submit(0, 0, 0);
	expect_bad_sqe(&e, "request id 0");
}
END_TEST
SUITE_TEST("sq", test_unknown_req_id);

START_TEST(test_ids_increase)
{
	struct cp_sqe e;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 2, "x"));
	e = sqe_submit(2, 0, 0);
	sf_put(&f, &e);
	expect_violation(&f, "not above");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_ids_increase);

START_TEST(test_cancel_active_and_ended)
{
	struct sess_out out;
	struct ep_event ev;
	struct cp_sqe e;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ep_cmd_free(sf_submit_text(&f, 2, "b"));
	/* 1 ends (its DONE is written), then the client cancels both. */
	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_DONE;
	ev.finish = CP_FINISH_STOP;
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	e = sqe_simple(CP_OP_CANCEL, 1);
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_CANCEL, 2);
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_CANCEL, 2);	/* twice: one command */
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 3);
	ck_assert_uint_eq(out.n, 1);
	ck_assert_uint_eq(out.head->kind, EP_CMD_CANCEL);
	ck_assert_uint_eq(out.head->id, sess_port_id(3, 7, 2));
	ep_cmd_free_list(out.head);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_cancel_active_and_ended);

START_TEST(test_cancel_while_building)
{
	struct sess_out out;
	struct cp_sqe e;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_submit(1, sf_arena(&f, "ab", 2), 2);
	e.flags = CP_SQF_MORE;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_CANCEL, 1);
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 2);
	ck_assert_uint_eq(out.n, 0);	/* the engine never heard of it */
	ck_assert_ptr_null(sess_req_find(f.s, 1));
	ep_cmd_free(sf_submit_text(&f, 2, "c"));
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_cancel_while_building);

START_TEST(test_bad_params)
{
	struct cp_sqe e;
	int i;

	for (i = 0; i < 12; i++) {
		e = sqe_submit(1, 0, 0);
		switch (i) {
		case 0: e.params.temperature = NAN; break;
		case 1: e.params.temperature = -1.0f; break;
		case 2: e.params.temperature = 101.0f; break;
		case 3: e.params.top_p = 0.0f; break;
		case 4: e.params.top_p = 1.5f; break;
		case 5: e.params.min_p = -0.1f; break;
		case 6: e.params.repeat_penalty = 0.0f; break;
		case 7: e.params.repeat_penalty = 17.0f; break;
		case 8: e.params.top_k = -1; break;
		case 9: e.params.top_k = (1 << 20) + 1; break;
		case 10: e.params.repeat_last_n = (1u << 20) + 1; break;
		case 11: e.params.flags = CP_PF_MASK + 1; break;
		}
		expect_bad_sqe(&e, "req 1");
	}
}
END_TEST
SUITE_TEST("sq", test_bad_params);

START_TEST(test_bad_stops)
{
	static const struct {
		const char *bytes;
		uint32_t len;
		const char *why;
	} bad[] = {
		{ "\0", 1, "empty stop" },
		{ "a\0\0", 3, "empty stop" },
		{ "ab", 2, "NUL-terminated" },
		{ "1\0" "2\0" "3\0" "4\0" "5\0" "6\0" "7\0" "8\0" "9", 18,
		    "more than 8" },
	};
	struct cp_sqe e;
	struct sf f;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sf_open(&f, CP_WAKE_FUTEX, 8);
		e = sqe_submit(1, sf_arena(&f, bad[i].bytes, bad[i].len),
		    bad[i].len);
		e.stop_bytes = (uint16_t)bad[i].len;
		sf_put(&f, &e);
		expect_violation(&f, bad[i].why);
		sf_close(&f);
	}
	e = sqe_submit(1, 0, 100);
	e.stop_bytes = 101;		/* longer than its range */
	expect_bad_sqe(&e, "stop block");
	e = sqe_submit(1, 0, 1000);
	e.stop_bytes = CP_STOP_BYTES_MAX + 1;
	expect_bad_sqe(&e, "stop block");
}
END_TEST
SUITE_TEST("sq", test_bad_stops);

START_TEST(test_max_reqs)
{
	struct cp_sqe e;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 2);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ep_cmd_free(sf_submit_text(&f, 2, "b"));
	e = sqe_submit(3, 0, 0);
	sf_put(&f, &e);
	expect_violation(&f, "in flight");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_max_reqs);

START_TEST(test_max_prompt)
{
	struct sess_limits l;
	struct cp_sqe e;
	struct sf f;

	limits(&l, CP_WAKE_FUTEX, 8, 16);
	sf_open_lim(&f, 16, 16, 4096, &l);
	e = sqe_submit(1, 0, 17);
	sf_put(&f, &e);
	expect_violation(&f, "prompt over 16");
	sf_close(&f);

	sf_open_lim(&f, 16, 16, 4096, &l);
	e = sqe_submit(1, 0, 10);
	e.flags = CP_SQF_MORE;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 1);
	e.arena_len = 10;
	sf_put(&f, &e);
	expect_violation(&f, "prompt over 16");
	sf_close(&f);

	sf_open_lim(&f, 16, 16, 4096, &l);
	e = sqe_submit(1, 0, 6);
	e.flags = CP_SQF_TOKENS;
	sf_put(&f, &e);
	expect_violation(&f, "token prompt");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_max_prompt);

/* ---- grammars (cp_proto.h, GRAMMAR) --------------------------------- */

/* A session that offers grammars, as the server's welcome does. */
static void
sf_open_gram(struct sf *f, uint32_t max_prompt)
{
	struct sess_limits l;

	limits(&l, CP_WAKE_FUTEX, 8, max_prompt);
	sf_open_lim(f, 16, 16, 4096, &l);
	f->s->features |= CP_FEAT_GRAMMAR;
}

/* A SUBMIT of kind k whose stream is len bytes of the arena at off. */
static struct cp_sqe
sqe_gram(uint32_t id, uint32_t k, uint32_t gbytes, uint32_t off,
    uint32_t len)
{
	struct cp_sqe e = sqe_submit(id, off, len);

	e.params.flags = CP_PF_GRAMMAR(k);
	e.grammar_bytes = gbytes;
	return e;
}

/* The grammar's text, then its padding, then the prompt, in two
 * fragments that split the text; and a token prompt after one. */
START_TEST(test_grammar_stream)
{
	static const char st[] = "root::=\0prompt";	/* 7 + 1 pad */
	static const int32_t ids[2] = { 5, 9 };
	struct sess_out out;
	struct cp_sqe e;
	struct ep_cmd *c;
	unsigned char tb[4 + sizeof(ids)] = "ab";
	struct sf f;

	sf_open_gram(&f, 8);		/* the prompt alone counts */
	e = sqe_gram(1, CP_GRAM_GBNF, 7, sf_arena(&f, st, 4), 4);
	e.flags = CP_SQF_MORE;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 1);
	e.arena_off = sf_arena(&f, st + 4, 10);
	e.arena_len = 10;
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 2);
	ck_assert_uint_eq(out.n, 1);
	c = out.head;
	ck_assert_uint_eq(c->params.grammar, CP_GRAM_GBNF);
	ck_assert_uint_eq(c->gram_len, 7);
	ck_assert_mem_eq(c->gram, "root::=", 7);
	ck_assert_uint_eq(c->text_len, 6);
	ck_assert_mem_eq(c->text, "prompt", 6);
	ep_cmd_free_list(out.head);

	memcpy(tb + 4, ids, sizeof(ids));
	e = sqe_gram(2, CP_GRAM_SCHEMA, 2, sf_arena(&f, tb, sizeof(tb)),
	    sizeof(tb));
	e.flags = CP_SQF_TOKENS;
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 1);
	c = out.head;
	ck_assert_uint_eq(c->params.grammar, CP_GRAM_SCHEMA);
	ck_assert_uint_eq(c->gram_len, 2);
	ck_assert_uint_eq(c->n_tokens, 2);
	ck_assert_int_eq(c->tokens[0], 5);
	ck_assert_int_eq(c->tokens[1], 9);
	ep_cmd_free_list(out.head);

	e = sqe_gram(3, CP_GRAM_JSON, 0, sf_arena(&f, "hi", 2), 2);
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 1);
	c = out.head;
	ck_assert_uint_eq(c->params.grammar, CP_GRAM_JSON);
	ck_assert_ptr_null(c->gram);
	ck_assert_uint_eq(c->text_len, 2);
	ep_cmd_free_list(out.head);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_grammar_stream);

/* Each grammar rule broken once: the session ends, naming it. */
START_TEST(test_grammar_violations)
{
	static const char bad_pad[] = "ab\0xpromptxxxx";
	static const struct {
		uint32_t kind, gbytes, len;
		uint8_t op;
		const char *what;
	} t[] = {
		{ CP_GRAM_GBNF, 0, 4, CP_OP_SUBMIT, "kind 1 with 0 bytes" },
		{ CP_GRAM_SCHEMA, CP_GRAMMAR_BYTES_MAX + 1, 4, CP_OP_SUBMIT,
		    "kind 2 with 262145" },
		{ CP_GRAM_JSON, 4, 8, CP_OP_SUBMIT, "kind 3 with 4 bytes" },
		{ 0, 4, 8, CP_OP_SUBMIT, "kind 0 with 4 bytes" },
		{ CP_GRAM_GBNF, 9, 8, CP_OP_SUBMIT, "ends inside its grammar" },
		{ CP_GRAM_GBNF, 2, 10, CP_OP_SUBMIT, "padding not zero" },
		{ CP_GRAM_GBNF, 2, 4 + 7, CP_OP_SUBMIT, "prompt over 6" },
	};
	struct cp_sqe e;
	struct sf f;
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		sf_open_gram(&f, 6);
		e = sqe_gram(1, t[i].kind, t[i].gbytes, 0, t[i].len);
		memcpy(f.arena, i == 5 ? bad_pad : "ab\0\0promptxxxx", 14);
		sf_put(&f, &e);
		expect_violation(&f, t[i].what);
		sf_close(&f);
	}
	/* a session whose welcome did not offer them */
	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_gram(1, CP_GRAM_JSON, 0, sf_arena(&f, "hi", 2), 2);
	sf_put(&f, &e);
	expect_violation(&f, "does not offer");
	sf_close(&f);
	/* grammar_bytes on an APPEND */
	sf_open_gram(&f, 64);
	e = sqe_submit(1, sf_arena(&f, "hi", 2), 2);
	e.flags = CP_SQF_MORE;
	sf_put(&f, &e);
	e = sqe_simple(CP_OP_APPEND, 1);
	e.grammar_bytes = 4;
	sf_put(&f, &e);
	expect_violation(&f, "parameters set");
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_grammar_violations);

/* xorshift64, for reproducible garbage. */
static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

START_TEST(test_random_garbage)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	struct sess_out out;
	struct ep_cmd *c;
	struct cp_sqe e;
	struct sf f;
	int it, r, violations = 0, accepted = 0;
	uint32_t i;

	for (it = 0; it < 1500; it++) {
		sf_open(&f, CP_WAKE_FUTEX, 8);
		for (i = 0; i < 4096 / 8; i++) {
			uint64_t v = rnd(&seed);

			memcpy(f.arena + i * 8, &v, 8);
		}
		/* Plausible entries, then a random byte or two broken. */
		for (i = 0; i < 16; i++) {
			e = sqe_submit(1 + (uint32_t)(rnd(&seed) % 6),
			    (uint32_t)(rnd(&seed) % 4200),
			    (uint32_t)(rnd(&seed) % 300));
			e.op = (uint8_t)(1 + rnd(&seed) % 3);
			e.flags = (uint8_t)(rnd(&seed) % 4);
			if (e.op != CP_OP_SUBMIT) {
				memset(&e.params, 0, sizeof(e.params));
				e.flags &= CP_SQF_MORE;
				if (e.op == CP_OP_CANCEL)
					e.flags = 0, e.arena_off = 0,
					    e.arena_len = 0;
			}
			if (rnd(&seed) % 3 == 0)
				e.stop_bytes = (uint16_t)(rnd(&seed) % 16);
			if (rnd(&seed) % 4 == 0)
				((unsigned char *)&e)[rnd(&seed) % sizeof(e)] =
				    (unsigned char)rnd(&seed);
			memcpy(&f.sq[i], &e, sizeof(e));
		}
		ring_store_release(&f.ctl->sq_tail.v,
		    (uint32_t)(rnd(&seed) % 20));
		sess_out_init(&out);
		r = sess_consume(f.s, &out);
		ck_assert(r == -EPROTO || (r >= 0 && r <= 16));
		if (r < 0)
			violations++;
		for (c = out.head; c != NULL; c = c->next) {
			if (c->kind != EP_CMD_SUBMIT)
				continue;
			accepted++;
			ck_assert_uint_le(c->n_stop, CP_STOP_MAX);
			ck_assert_uint_le(c->text_len + c->n_tokens * 4,
			    1u << 20);
			for (i = 0; i < c->n_stop; i++)
				ck_assert_uint_gt(strlen(c->stop[i]), 0);
		}
		ep_cmd_free_list(out.head);
		sf_close(&f);
	}
	/* The generator reaches both outcomes. */
	ck_assert_int_gt(violations, 100);
	ck_assert_int_gt(accepted, 50);
}
END_TEST
SUITE_TEST("sq", test_random_garbage);

struct scribble {
	struct sf *f;
	int stop;		/* __atomic */
};

static void *
scribbler(void *arg)
{
	struct scribble *sc = arg;
	uint64_t seed = 12345;
	uint32_t *w = (uint32_t *)(void *)sc->f->map;
	size_t words = sc->f->w.seg_bytes / 4;

	while (!__atomic_load_n(&sc->stop, __ATOMIC_RELAXED)) {
		size_t k = (size_t)(rnd(&seed) % words);

		__atomic_store_n(&w[k], (uint32_t)rnd(&seed), __ATOMIC_RELAXED);
		if (rnd(&seed) % 8 == 0)
			__atomic_store_n(&sc->f->ctl->sq_tail.v,
			    (uint32_t)(rnd(&seed) % 24), __ATOMIC_RELEASE);
	}
	return NULL;
}

/* The client rewrites its whole segment while the daemon reads it. */
START_TEST(test_concurrent_scribbler)
{
	struct scribble sc;
	struct sess_out out;
	struct ep_event ev;
	struct sf f;
	pthread_t th;
	int i, r;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	sc.f = &f;
	sc.stop = 0;
	ck_assert_int_eq(pthread_create(&th, NULL, scribbler, &sc), 0);
	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_TOKEN;
	ev.token = 1;
	ev.text_len = 3;
	for (i = 0; i < 200000; i++) {
		sess_out_init(&out);
		r = sess_consume(f.s, &out);
		if (r != -EPROTO && r < 0)	/* a passing ck_assert costs a
						   pipe write: not in here */
			ck_abort_msg("sess_consume: %d", r);
		ep_cmd_free_list(out.head);
		sess_post(f.s, 1, &ev, "abc");
		sess_flush(f.s);
		if (r < 0) {
			/* A new session over the same memory: keep hammering. */
			f.s->sq_head = ring_load_relaxed(&f.ctl->sq_tail.v);
			f.s->build.active = 0;
			f.s->n_reqs = 0;
			f.s->last_req_id = 0;
		}
	}
	__atomic_store_n(&sc.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_concurrent_scribbler);

/* CP_PF_PROGRESS becomes EP_SUBMIT_PROGRESS, and nothing else asks for it. */
START_TEST(test_submit_progress_flag)
{
	struct sess_out out;
	struct cp_sqe e;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	e = sqe_submit(1, sf_arena(&f, "abc", 3), 3);
	e.params.flags = CP_PF_PROGRESS;
	sf_put(&f, &e);
	e = sqe_submit(2, sf_arena(&f, "abc", 3), 3);
	e.params.flags = CP_PF_LOGPROB;
	sf_put(&f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f.s, &out), 2);
	ck_assert_uint_eq(out.n, 2);
	ck_assert_uint_eq(out.head->flags, EP_SUBMIT_PROGRESS);
	ck_assert_uint_eq(out.head->next->flags, EP_SUBMIT_LOGPROB);
	ck_assert_uint_eq(sess_req_find(f.s, 1)->progress, 1);
	ck_assert_uint_eq(sess_req_find(f.s, 2)->progress, 0);
	ep_cmd_free_list(out.head);
	sf_close(&f);
}
END_TEST
SUITE_TEST("sq", test_submit_progress_flag);

/* ---- CQ ---------------------------------------------------------------- */


static struct ep_event
token_ev(int32_t tok, uint32_t text_len)
{
	struct ep_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_TOKEN;
	ev.token = tok;
	ev.logprob = -0.5f;
	ev.text_len = text_len;
	return ev;
}

START_TEST(test_cq_post_flush)
{
	struct ep_event ev;
	struct cp_cqe q;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ev = token_ev(77, 2);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, "hi"), 0);
	/* Not visible before the flush. */
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 0);
	ck_assert_int_eq(sess_flush(f.s), 0);	/* nobody sleeps */
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 1);
	memcpy(&q, &f.cq[0], sizeof(q));
	ck_assert_uint_eq(q.req_id, 1);
	ck_assert_uint_eq(q.type, CP_EV_TOKEN);
	ck_assert_int_eq(q.token, 77);
	ck_assert_float_eq(q.logprob, -0.5f);
	ck_assert_uint_eq(q.text_len, 2);
	ck_assert_int_eq(memcmp(q.text, "hi", 2), 0);
	ck_assert_uint_eq(q.flags, 0);

	ring_store_relaxed(&f.ctl->client_waiting.v, CP_WAIT_SLEEP);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, "hi"), 0);
	ck_assert_int_eq(sess_flush(f.s), SESS_WAKE_FUTEX);
	ck_assert_int_eq(sess_flush(f.s), 0);	/* nothing new: no wake */
	ring_store_relaxed(&f.ctl->client_waiting.v, CP_WAIT_FD);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, "hi"), 0);
	ck_assert_int_eq(sess_flush(f.s), SESS_WAKE_FD);
	sf_close(&f);

	/* Pipe mode: a sleeper is woken through its pipe. */
	sf_open(&f, CP_WAKE_FD, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ring_store_relaxed(&f.ctl->client_waiting.v, CP_WAIT_SLEEP);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, "hi"), 0);
	ck_assert_int_eq(sess_flush(f.s), SESS_WAKE_FD);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_cq_post_flush);

START_TEST(test_cq_groups)
{
	char text[100];
	struct ep_event ev;
	struct cp_cqe q[3];
	struct sf f;
	int i;

	/* 90 bytes in 32-byte CQEs (cp_proto.h): 32 + 32 + 26. */
	for (i = 0; i < 100; i++)
		text[i] = (char)('A' + i % 26);
	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ev = token_ev(5, 90);
	ev.step = 0x100000007ull;	/* the wire keeps the low 32 bits */
	ck_assert_int_eq(sess_post(f.s, 1, &ev, text), 0);
	sess_flush(f.s);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 3);
	memcpy(q, f.cq, sizeof(q));
	ck_assert_uint_eq(q[0].type, CP_EV_TOKEN);
	ck_assert_int_eq(q[0].token, 5);
	ck_assert_uint_eq(q[0].step, 7);
	ck_assert_uint_eq(q[0].text_len, 32);
	ck_assert_uint_eq(q[0].flags, CP_CQF_MORE);
	ck_assert_uint_eq(q[1].type, CP_EV_TEXT);
	ck_assert_uint_eq(q[1].step, 0);
	ck_assert_uint_eq(q[1].text_len, 32);
	ck_assert_uint_eq(q[1].flags, CP_CQF_MORE);
	ck_assert_uint_eq(q[2].type, CP_EV_TEXT);
	ck_assert_uint_eq(q[2].text_len, 26);
	ck_assert_uint_eq(q[2].flags, 0);
	ck_assert_int_eq(memcmp(q[0].text, text, 32), 0);
	ck_assert_int_eq(memcmp(q[1].text, text + 32, 32), 0);
	ck_assert_int_eq(memcmp(q[2].text, text + 64, 26), 0);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_cq_groups);

static struct ep_event
progress_ev(uint32_t done, uint32_t total, uint64_t step)
{
	struct ep_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_PROGRESS;
	ev.token = -1;
	ev.n_prompt = done;
	ev.n_total = total;
	ev.step = step;
	return ev;
}

/* Submits request id as the client would, with flags (CP_PF_*). */
static void
sf_submit_flags(struct sf *f, uint32_t id, uint32_t flags)
{
	struct sess_out out;
	struct cp_sqe e;

	e = sqe_submit(id, sf_arena(f, "abcd", 4), 4);
	e.params.flags = flags;
	sf_put(f, &e);
	sess_out_init(&out);
	ck_assert_int_eq(sess_consume(f->s, &out), 1);
	ep_cmd_free_list(out.head);
}

/*
 * Session invariant 8: PROGRESS reaches the CQ as one CQE for a request
 * that asked, is dropped for one that did not, for impossible counts and
 * when the CQ has no room (never overflowed, never a pause), and is not
 * terminal.
 */
START_TEST(test_cq_progress)
{
	struct ep_event ev;
	struct cp_cqe q;
	struct sf f;
	uint32_t i;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	sf_submit_flags(&f, 1, CP_PF_PROGRESS);
	sf_submit_flags(&f, 2, 0);
	ev = progress_ev(16, 100, 0x100000005ull);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	ck_assert_int_eq(sess_post(f.s, 2, &ev, ""), 0);	/* not asked */
	ev = progress_ev(101, 100, 6);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);	/* past total */
	ev = progress_ev(0, 100, 6);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);	/* nothing */
	sess_flush(f.s);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 1);
	memcpy(&q, &f.cq[0], sizeof(q));
	ck_assert_uint_eq(q.req_id, 1);
	ck_assert_uint_eq(q.type, CP_EV_PROGRESS);
	ck_assert_uint_eq(q.n_prompt, 16);
	ck_assert_uint_eq(q.n_total, 100);
	ck_assert_uint_eq(q.step, 5);
	ck_assert_int_eq(q.token, -1);
	ck_assert_uint_eq(q.text_len, 0);
	ck_assert_uint_eq(q.flags, 0);
	ck_assert_uint_eq(q.finish, 0);
	ck_assert_ptr_nonnull(sess_req_find(f.s, 1));

	/* Fill the CQ (16 entries) with tokens: progress finds no room. */
	for (i = 1; i < 16; i++) {
		ev = token_ev((int32_t)i, 0);
		ck_assert_int_eq(sess_post(f.s, 2, &ev, ""), 0);
	}
	ev = progress_ev(32, 100, 7);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	ck_assert_uint_eq(f.s->ovf_n, 0);
	/* Behind overflowed tokens it is dropped too, even with room. */
	ev = token_ev(99, 0);
	ck_assert_int_eq(sess_post(f.s, 2, &ev, ""), 1);
	ring_store_release(&f.ctl->cq_head.v, 1);
	ev = progress_ev(32, 100, 7);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	ck_assert_uint_eq(f.s->ovf_n, 1);
	sess_flush(f.s);
	ck_assert_uint_eq(f.s->ovf_n, 0);
	ring_store_release(&f.ctl->cq_head.v, 2);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	sess_flush(f.s);
	/* 16 before, the overflowed token, then this one. */
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 18);
	ck_assert_int_eq(f.cq[16 & 15].token, 99);
	memcpy(&q, &f.cq[17 & 15], sizeof(q));
	ck_assert_uint_eq(q.type, CP_EV_PROGRESS);
	ck_assert_uint_eq(q.n_prompt, 32);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_cq_progress);

START_TEST(test_cq_overflow_keeps_order)
{
	struct ep_event ev;
	struct sf f;
	uint32_t head = 0, i;
	int expect = 0;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	for (i = 0; i < 20; i++) {
		ev = token_ev((int32_t)i, 0);
		ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), i < 16 ? 0 : 1);
	}
	ck_assert_uint_eq(f.s->ovf_n, 4);
	sess_flush(f.s);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 16);
	/* Tokens 16.. wait behind; a new event queues behind them too. */
	ev = token_ev(20, 0);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 1);
	for (; head < 8; head++)
		ck_assert_int_eq(f.cq[head & 15].token, expect++);
	ring_store_release(&f.ctl->cq_head.v, head);
	sess_flush(f.s);
	ck_assert_uint_eq(f.s->ovf_n, 0);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 21);
	for (; head < 21; head++)
		ck_assert_int_eq(f.cq[head & 15].token, expect++);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_cq_overflow_keeps_order);

START_TEST(test_cq_bad_head)
{
	struct ep_event ev;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ev = token_ev(1, 0);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	sess_flush(f.s);
	/* Consumed more than was published. */
	ring_store_release(&f.ctl->cq_head.v, 2);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), -EPROTO);
	ck_assert_ptr_nonnull(strstr(f.s->why, "cq_head"));
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_cq_bad_head);

START_TEST(test_cq_overflow_limit)
{
	struct ep_event ev;
	struct sf f;
	int i, r = 0;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ev = token_ev(1, 0);
	for (i = 0; i < 16 + 4096 + 1 && r >= 0; i++)
		r = sess_post(f.s, 1, &ev, "");
	ck_assert_int_eq(r, -ENOBUFS);
	ck_assert_int_eq(i, 16 + 4096 + 1);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_cq_overflow_limit);

START_TEST(test_terminal_and_stalled)
{
	struct ep_event ev;
	struct cp_cqe q;
	struct sf f;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	sess_req_find(f.s, 1)->stalled = 1;
	memset(&ev, 0, sizeof(ev));
	ev.type = EP_EV_DONE;
	ev.finish = CP_FINISH_CANCELLED;
	ev.n_prompt = 1;
	ev.n_gen = 4;
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	ck_assert_ptr_null(sess_req_find(f.s, 1));
	/* Events after the end, or for requests never made, are dropped. */
	ev = token_ev(3, 0);
	ck_assert_int_eq(sess_post(f.s, 1, &ev, ""), 0);
	ck_assert_int_eq(sess_post(f.s, 99, &ev, ""), 0);
	sess_flush(f.s);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->cq_tail.v), 1);
	memcpy(&q, &f.cq[0], sizeof(q));
	ck_assert_uint_eq(q.type, CP_EV_DONE);
	ck_assert_uint_eq(q.finish, CP_FINISH_STALLED);
	ck_assert_uint_eq(q.n_prompt, 1);
	ck_assert_uint_eq(q.n_gen, 4);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_terminal_and_stalled);

START_TEST(test_long_text_split)
{
	char text[2000], got[2000];
	struct ep_event ev;
	struct sf f;
	uint32_t head, tail, used = 0, groups = 0;
	int saw_real = 0;

	for (head = 0; head < sizeof(text); head++)
		text[head] = (char)(head * 7);
	sf_open(&f, CP_WAKE_FUTEX, 8);
	ep_cmd_free(sf_submit_text(&f, 1, "a"));
	ck_assert_uint_eq(f.s->text_chunk, 32 * 8);	/* 16-entry CQ */
	ev = token_ev(9, sizeof(text));
	head = 0;
	ck_assert_int_ge(sess_post(f.s, 1, &ev, text), 0);
	for (;;) {
		sess_flush(f.s);
		tail = ring_load_acquire(&f.ctl->cq_tail.v);
		if (tail == head)
			break;
		for (; head != tail; head++) {
			struct cp_cqe q = f.cq[head & 15];

			memcpy(got + used, q.text, q.text_len);
			used += q.text_len;
			if (q.type == CP_EV_TOKEN) {
				groups++;
				if (q.token == 9)
					saw_real = 1;
				else
					ck_assert_int_eq(q.token, -1);
			}
		}
		ring_store_release(&f.ctl->cq_head.v, head);
	}
	ck_assert_uint_eq(used, sizeof(text));
	ck_assert_int_eq(memcmp(got, text, sizeof(text)), 0);
	ck_assert_uint_eq(groups, 8);	/* ceil(2000 / 256) */
	ck_assert_int_eq(saw_real, 1);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_long_text_split);

START_TEST(test_idle_enter)
{
	struct cp_sqe e;
	struct sf f;
	uint32_t tail = 99;

	sf_open(&f, CP_WAKE_FUTEX, 8);
	ck_assert_int_eq(sess_idle_enter(f.s, &tail), 0);
	ck_assert_uint_eq(tail, 0);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->daemon_idle.v), 1);
	ck_assert_int_eq(sess_sq_pending(f.s), 0);
	e = sqe_submit(1, 0, 0);
	sf_put(&f, &e);
	ck_assert_int_eq(sess_sq_pending(f.s), 1);
	ck_assert_int_eq(sess_idle_enter(f.s, &tail), 1);
	ck_assert_uint_eq(tail, 1);
	sess_idle_leave(f.s);
	ck_assert_uint_eq(ring_load_acquire(&f.ctl->daemon_idle.v), 0);
	sf_close(&f);
}
END_TEST
SUITE_TEST("cq", test_idle_enter);

SUITE_CASE("sq", 60);

int
main(void)
{
	return suite_main(suite_registered("session"));
}
