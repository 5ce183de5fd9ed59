/*
 * check_server.c - the daemon's socket, handshake, admission and its
 * handling of misbehaving clients (daemon/server.c), through a daemon in a
 * child process (tests/lib/cpd_harness.c, mock engine) and raw clients
 * that speak cp_proto.h by hand: the culprit is disconnected, counted and
 * logged, and other clients keep being served.
 */
#include "server.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/cpd_harness.h"
#include "lib/suite.h"
#include "ring.h"


/* The daemon's protocol_errors counter. */
static uint64_t
protocol_errors(const struct hd *d)
{
	struct cp_wire_stats st;

	ck_assert_int_eq(hd_stats(d, &st), 0);
	return st.protocol_errors;
}

/* A well-behaved raw client gets its prompt echoed. */
static void
check_served(const char *path)
{
	struct raw_client rc;
	char out[64] = "";
	uint8_t fin = 0;

	ck_assert_int_eq(raw_connect(path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(raw_submit(&rc, 1, "served", 0), 0);
	ck_assert_int_eq(raw_collect(&rc, 1, out, sizeof(out), 5000, &fin),
	    CP_EV_DONE);
	ck_assert_str_eq(out, "served");
	ck_assert_uint_eq(fin, CP_FINISH_STOP);
	raw_close(&rc);
}

START_TEST(test_srv_handshake)
{
	struct srv_config c;
	struct raw_client rc;
	struct hd d;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 32, 64, 8192), 0);
	ck_assert_uint_eq(rc.w.sq_entries, 32);
	ck_assert_uint_eq(rc.w.cq_entries, 64);
	ck_assert_uint_eq(rc.w.arena_bytes, 8192);
	ck_assert_str_eq(rc.w.model.name, "mock-model");
	ck_assert_uint_eq(rc.w.model.n_ctx, 4096);
	ck_assert_uint_eq(rc.hdr->magic, CP_SEG_MAGIC);
	ck_assert_uint_eq(rc.hdr->sq_entries, 32);
	raw_close(&rc);
	check_served(d.path);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_handshake);

START_TEST(test_srv_fd_in_hello)
{
	struct srv_config c;
	struct raw_client rc;
	struct cp_hello h;
	struct hd d;
	int efd;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	memset(&rc, 0, sizeof(rc));
	rc.fd = raw_socket(d.path);
	ck_assert_int_ge(rc.fd, 0);
	efd = eventfd(0, EFD_CLOEXEC);
	raw_hello_init(&h, 0, 0, 0);
	ck_assert_int_eq(raw_send_fd(rc.fd, &h, sizeof(h), efd),
	    (ssize_t)sizeof(h));
	ck_assert_int_eq(raw_wait_closed(&rc, 3000), 1);
	close(efd);
	raw_close(&rc);
	ck_assert_uint_eq(protocol_errors(&d), 1);
	ck_assert(hd_log_has(&d, "descriptors or truncated"));
	check_served(d.path);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_fd_in_hello);

START_TEST(test_srv_truncated_hello)
{
	struct srv_config c;
	struct raw_client rc;
	struct cp_hello h;
	struct hd d;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	memset(&rc, 0, sizeof(rc));
	rc.fd = raw_socket(d.path);
	raw_hello_init(&h, 0, 0, 0);
	ck_assert_int_eq(send(rc.fd, &h, 7, 0), 7);
	ck_assert_int_eq(raw_wait_closed(&rc, 3000), 1);
	raw_close(&rc);
	ck_assert_uint_eq(protocol_errors(&d), 1);
	ck_assert(hd_log_has(&d, "malformed HELLO (7 bytes)"));
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_truncated_hello);

START_TEST(test_srv_version_mismatch)
{
	struct srv_config c;
	struct cp_welcome w;
	struct cp_hello h;
	struct hd d;
	int fd;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	fd = raw_socket(d.path);
	raw_hello_init(&h, 0, 0, 0);
	h.hdr.version = CP_PROTO_VERSION + 1;
	ck_assert_int_eq(send(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_int_eq(recv(fd, &w, sizeof(w), 0), (ssize_t)sizeof(w));
	ck_assert_int_eq(w.status, -EPROTONOSUPPORT);
	ck_assert_int_eq(recv(fd, &w, sizeof(w), 0), 0);	/* then closed */
	close(fd);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_version_mismatch);

START_TEST(test_srv_handshake_timeout)
{
	struct srv_config c;
	struct raw_client rc;
	struct hd d;

	hd_config(&c);
	c.handshake_timeout_ms = 200;
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	memset(&rc, 0, sizeof(rc));
	rc.fd = raw_socket(d.path);
	ck_assert_int_eq(raw_wait_closed(&rc, 3000), 1);
	raw_close(&rc);
	ck_assert(hd_log_has(&d, "no HELLO within 200 ms"));
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_handshake_timeout);

START_TEST(test_srv_allow_list)
{
	struct srv_config c;
	struct raw_client rc;
	struct hd d;

	hd_config(&c);
	c.allow_uids[0] = getuid() + 4242;
	c.n_allow_uids = 1;
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), -EACCES);
	ck_assert_int_eq(rc.nfds, 0);
	raw_close(&rc);
	ck_assert(hd_log_has(&d, "not allowed"));
	ck_assert_int_eq(hd_stop(&d), 0);

	/* Our primary group on the list lets us in. */
	hd_config(&c);
	c.allow_uids[0] = getuid() + 4242;
	c.n_allow_uids = 1;
	c.allow_gids[0] = getgid();
	c.n_allow_gids = 1;
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	check_served(d.path);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_allow_list);

START_TEST(test_srv_per_uid_limit)
{
	struct srv_config c;
	struct raw_client a, b, x;
	struct hd d;
	int i, r = -1;

	hd_config(&c);
	c.per_uid_max_clients = 2;
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	ck_assert_int_eq(raw_connect(d.path, &a, 0, 0, 0), 0);
	ck_assert_int_eq(raw_connect(d.path, &b, 0, 0, 0), 0);
	ck_assert_int_eq(raw_connect(d.path, &x, 0, 0, 0), -EUSERS);
	raw_close(&x);
	raw_close(&b);
	/* Once the daemon sees the hangup, there is room again. */
	for (i = 0; i < 200 && r != 0; i++) {
		r = raw_connect(d.path, &x, 0, 0, 0);
		if (r != 0) {
			raw_close(&x);
			usleep(10000);
		}
	}
	ck_assert_int_eq(r, 0);
	raw_close(&x);
	raw_close(&a);
	ck_assert(hd_log_has(&d, "has 2 connections"));
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_per_uid_limit);

/* One hostile write into shared memory per case; each must be disconnected. */
static void
hostile_case(const char *path, int which)
{
	struct raw_client rc;
	struct cp_sqe e;

	ck_assert_int_eq(raw_connect(path, &rc, 0, 0, 0), 0);
	memset(&e, 0, sizeof(e));
	e.op = CP_OP_SUBMIT;
	e.req_id = 1;
	e.params.top_p = 1.0f;
	e.params.repeat_penalty = 1.0f;
	switch (which) {
	case 0:	/* tail - head > entries */
		ring_store_release(&rc.ctl->sq_tail.v, rc.w.sq_entries + 3);
		raw_wake(&rc);
		goto wait;
	case 1:
		e.op = 77;
		break;
	case 2:
		e.reserved = 0x100;
		break;
	case 3:
		e.arena_off = rc.w.arena_bytes - 4;
		e.arena_len = 8;
		break;
	case 4:
		e.op = CP_OP_CANCEL;
		e.req_id = 77;
		e.params.top_p = 0;
		e.params.repeat_penalty = 0;
		break;
	}
	memcpy(&rc.sq[0], &e, sizeof(e));
	ring_store_release(&rc.ctl->sq_tail.v, 1);
	raw_wake(&rc);
wait:
	ck_assert_msg(raw_wait_closed(&rc, 3000) == 1, "case %d not closed",
	    which);
	raw_close(&rc);
}

START_TEST(test_srv_hostile_memory)
{
	static const char *why[] = { "exceeds", "unknown opcode",
	    "reserved word set", "arena range", "unknown request 77" };
	struct srv_config c;
	struct raw_client good;
	char out[64] = "";
	uint8_t fin = 0;
	struct hd d;
	int i;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	/* A good client connected throughout, with a request under way. */
	ck_assert_int_eq(raw_connect(d.path, &good, 0, 0, 0), 0);
	for (i = 0; i < 5; i++) {
		hostile_case(d.path, i);
		ck_assert_msg(hd_log_has(&d, why[i]), "log lacks \"%s\"",
		    why[i]);
	}
	ck_assert_int_eq(raw_submit(&good, 1, "still here", 0), 0);
	ck_assert_int_eq(raw_collect(&good, 1, out, sizeof(out), 5000, &fin),
	    CP_EV_DONE);
	ck_assert_str_eq(out, "still here");
	raw_close(&good);
	ck_assert_uint_eq(protocol_errors(&d), 5);
	ck_assert(hd_log_has(&d, "disconnected"));
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_hostile_memory);

START_TEST(test_srv_garbage_record)
{
	struct srv_config c;
	struct raw_client rc;
	struct hd d;
	char junk[16] = "junk";

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(send(rc.fd, junk, sizeof(junk), 0),
	    (ssize_t)sizeof(junk));
	ck_assert_int_eq(raw_wait_closed(&rc, 3000), 1);
	raw_close(&rc);
	ck_assert_uint_eq(protocol_errors(&d), 1);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_garbage_record);

START_TEST(test_srv_per_uid_requests)
{
	struct srv_config c;
	struct mock_opts mo;
	struct raw_client rc;
	uint8_t fin = 0;
	struct hd d;

	hd_config(&c);
	c.per_uid_max_requests = 1;
	mock_opts_default(&mo);
	mo.step_us = 2000;
	ck_assert_int_eq(hd_start(&d, &c, &mo), 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(raw_submit(&rc, 1, "a long enough prompt", 0), 0);
	ck_assert_int_eq(raw_submit(&rc, 2, "second", 0), 0);
	/* The second is refused with an error event, the first completes. */
	ck_assert_int_eq(raw_collect(&rc, 2, NULL, 0, 5000, &fin),
	    CP_EV_ERROR);
	ck_assert_int_eq(raw_collect(&rc, 1, NULL, 0, 5000, &fin), CP_EV_DONE);
	raw_close(&rc);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_per_uid_requests);

/*
 * The connecting process exits while a child it forked keeps the socket
 * open: no hangup ever comes, the pidfd ends the session.
 */
START_TEST(test_srv_pidfd_death)
{
	struct srv_config c;
	struct cp_wire_stats st;
	struct raw_client rc;
	int p[2], i;
	pid_t a;
	char b;
	struct hd d;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	ck_assert_int_eq(pipe(p), 0);
	a = fork();
	ck_assert_int_ge(a, 0);
	if (a == 0) {
		struct raw_client held;

		if (raw_connect(d.path, &held, 0, 0, 0) != 0)
			_exit(1);
		if (fork() == 0) {
			/* The heir: holds the socket until the pipe closes. */
			close(p[1]);
			while (read(p[0], &b, 1) > 0)
				;
			_exit(0);
		}
		_exit(0);
	}
	close(p[0]);
	waitpid(a, NULL, 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	for (i = 0; i < 200; i++) {
		ck_assert_int_eq(raw_stats(&rc, &st), 0);
		if (st.clients == 1)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.clients, 1);
	ck_assert(hd_log_has(&d, "process exited"));
	close(p[1]);
	raw_close(&rc);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_pidfd_death);

START_TEST(test_socket_path)
{
	char buf[SRV_PATH_MAX], longp[200];

	setenv("CPD_SOCKET", "/env/cpd.sock", 1);
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	ck_assert_int_eq(srv_socket_path("/flag.sock", buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/flag.sock");
	ck_assert_int_eq(srv_socket_path("", buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/env/cpd.sock");
	unsetenv("CPD_SOCKET");
	ck_assert_int_eq(srv_socket_path(NULL, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/user/1000/cpd.sock");
	unsetenv("XDG_RUNTIME_DIR");
	ck_assert_int_eq(srv_socket_path(NULL, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/cpd/cpd.sock");
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	ck_assert_int_eq(srv_socket_path(longp, buf, sizeof(buf)),
	    -ENAMETOOLONG);
}
END_TEST
SUITE_TEST("server", test_socket_path);

/* A second daemon on a live socket fails; a stale socket file is replaced. */
START_TEST(test_srv_socket_in_use)
{
	struct srv_config c;
	struct engine_port *port;
	struct server *srv = NULL;
	struct hd d;
	int fd;

	hd_config(&c);
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	port = ep_new();
	ck_assert_ptr_nonnull(port);
	c.socket_path = d.path;
	ck_assert_int_eq(srv_new(&c, port, &srv), -EADDRINUSE);
	ck_assert_ptr_null(srv);
	ck_assert_int_eq(hd_stop(&d), 0);

	/* A socket file nobody listens on (a daemon killed with -9). */
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	hd_kill(&d);
	c.socket_path = d.path;
	ck_assert_int_eq(srv_new(&c, port, &srv), 0);
	fd = raw_socket(d.path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	srv_free(srv);
	ck_assert_int_eq(access(d.path, F_OK), -1);	/* unlinked */
	ep_free(port);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("server", test_srv_socket_in_use);

/*
 * Every ended session is counted once under its reason, and the counts
 * add up: clients_total == clients + sum(disconnects) (invariant 6).
 */
START_TEST(test_srv_disconnect_reasons)
{
	struct srv_config c;
	struct raw_client rc, probe;
	struct cp_wire_stats st;
	struct hd d;
	char junk[16] = "junk";
	uint64_t sum = 0;
	int i;

	hd_config(&c);
	c.handshake_timeout_ms = 200;
	ck_assert_int_eq(hd_start(&d, &c, NULL), 0);
	/* Closed: a client that leaves. */
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	raw_close(&rc);
	/* Protocol: a record that is not a stats request. */
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(send(rc.fd, junk, sizeof(junk), 0),
	    (ssize_t)sizeof(junk));
	ck_assert_int_eq(raw_wait_closed(&rc, 3000), 1);
	raw_close(&rc);
	/* Timeout: no HELLO. */
	memset(&rc, 0, sizeof(rc));
	rc.fd = raw_socket(d.path);
	ck_assert_int_eq(raw_wait_closed(&rc, 3000), 1);
	raw_close(&rc);

	ck_assert_int_eq(raw_connect(d.path, &probe, 0, 0, 0), 0);
	for (i = 0; i < 300; i++) {
		ck_assert_int_eq(raw_stats(&probe, &st), 0);
		if (st.clients == 1)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.clients, 1);
	ck_assert_uint_eq(st.clients_total, 4);
	ck_assert_uint_eq(st.disconnects[CP_END_CLOSED], 1);
	ck_assert_uint_eq(st.disconnects[CP_END_PROTOCOL], 1);
	ck_assert_uint_eq(st.disconnects[CP_END_TIMEOUT], 1);
	for (i = 0; i < (int)CP_END_REASONS; i++)
		sum += st.disconnects[i];
	ck_assert_uint_eq(st.clients_total, st.clients + sum);
	/* A violation and a timeout are protocol errors; leaving is not. */
	ck_assert_uint_eq(st.protocol_errors, 2);
	ck_assert_uint_eq(st.flags, 0);
	raw_close(&probe);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("server", test_srv_disconnect_reasons);

/* The error code of the terminal event raw_collect() just consumed. */
static int32_t
last_error(const struct raw_client *rc)
{
	return rc->cq[(rc->cq_head - 1) & (rc->w.cq_entries - 1)].error;
}

/*
 * srv_drain(): the socket goes, a new SUBMIT gets -ESHUTDOWN, the request
 * in flight runs to its end, then srv_run() returns and the daemon exits 0.
 */
START_TEST(test_srv_drain_finishes)
{
	static const char prompt[] = "forty bytes of prompt, echoed bytewise!";
	struct srv_config c;
	struct mock_opts mo;
	struct raw_client rc, late;
	char out[64] = "";
	uint8_t fin = 0;
	int st, i;
	struct hd d;

	hd_config(&c);
	mock_opts_default(&mo);
	mo.step_us = 5000;	/* the echo takes about 200 ms */
	ck_assert_int_eq(hd_start(&d, &c, &mo), 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(raw_connect(d.path, &late, 0, 0, 0), 0);
	ck_assert_int_eq(raw_submit(&rc, 1, prompt, 0), 0);
	hd_drain(&d);
	for (i = 0; i < 300 && access(d.path, F_OK) == 0; i++)
		usleep(10000);
	ck_assert_int_eq(access(d.path, F_OK), -1);	/* no new clients */
	ck_assert_int_lt(raw_socket(d.path), 0);
	ck_assert_int_eq(raw_submit(&late, 1, "late", 0), 0);
	ck_assert_int_eq(raw_collect(&late, 1, NULL, 0, 5000, &fin),
	    CP_EV_ERROR);
	ck_assert_int_eq(last_error(&late), -ESHUTDOWN);
	ck_assert_int_eq(raw_collect(&rc, 1, out, sizeof(out), 5000, &fin),
	    CP_EV_DONE);
	ck_assert_uint_eq(fin, CP_FINISH_STOP);
	ck_assert_str_eq(out, prompt);
	st = hd_wait(&d, 5000);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "daemon status %#x", st);
	ck_assert(hd_log_has(&d, "draining: 1 requests in flight"));
	ck_assert(hd_log_has(&d, "drained"));
	raw_close(&rc);
	raw_close(&late);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("server", test_srv_drain_finishes);

/* Past drain_timeout_ms what runs is cancelled, its DONE delivered, exit 0. */
START_TEST(test_srv_drain_cancels)
{
	static char prompt[2000];
	struct srv_config c;
	struct mock_opts mo;
	struct raw_client rc;
	char out[2048] = "";
	uint8_t fin = 0;
	int st;
	struct hd d;

	memset(prompt, 'z', sizeof(prompt) - 1);
	hd_config(&c);
	c.drain_timeout_ms = 100;
	mock_opts_default(&mo);
	mo.step_us = 2000;	/* the echo would take 4 s */
	ck_assert_int_eq(hd_start(&d, &c, &mo), 0);
	ck_assert_int_eq(raw_connect(d.path, &rc, 0, 0, 0), 0);
	ck_assert_int_eq(raw_submit(&rc, 1, prompt, 0), 0);
	ck_assert_int_eq(raw_collect(&rc, 1, out, sizeof(out), 50, &fin), 0);
	hd_drain(&d);
	ck_assert_int_eq(raw_collect(&rc, 1, out, sizeof(out), 5000, &fin),
	    CP_EV_DONE);
	ck_assert_uint_eq(fin, CP_FINISH_CANCELLED);
	ck_assert_uint_gt(strlen(out), 0);
	ck_assert_uint_lt(strlen(out), sizeof(prompt) - 1);
	st = hd_wait(&d, 5000);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "daemon status %#x", st);
	ck_assert(hd_log_has(&d, "100 ms passed, 1 requests cancelled"));
	raw_close(&rc);
	hd_stop(&d);
}
END_TEST
SUITE_TEST("server", test_srv_drain_cancels);

SUITE_CASE("server", 30);

int
main(void)
{
	return suite_main(suite_registered("server"));
}
