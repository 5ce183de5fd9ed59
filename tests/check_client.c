/*
 * check_client.c - libcpclient end to end: client processes, a daemon
 * process (daemon/server.c with the mock engine of tests/lib), and each
 * io loop path (io_uring + futex, io_uring + pipes, epoll); plus a fake
 * daemon that lies, to check that the library validates what it reads.
 *
 * The mock engine echoes a text prompt one byte per token (token id = the
 * byte), so every expected output below is the prompt itself, or a prefix
 * of it, worked out by hand.
 */
#include "cpclient.h"

#include <check.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ioloop.h"
#include "lib/clock.h"
#include "lib/cpd_harness.h"
#include "lib/fake_cpd.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"
#include "ring.h"
#include "session.h"
#include "stats.h"

/* _i picks the io loop: futex, pipes, epoll (from first_loop()). */
static const int loop_kinds[3] = {
	IOLOOP_URING_FUTEX, IOLOOP_URING_FD, IOLOOP_EPOLL
};

/* The first loop kind the end-to-end tests run: 1 (not the futex loop) when
 * this kernel lacks the io_uring futex opcodes. */
static int
first_loop(void)
{
	static int k0 = -1;

	if (k0 < 0)
		k0 = ioloop_probe_futex() ? 0 : 1;
	return k0;
}

static void
cfg_init(struct srv_config *c, int kind)
{
	hd_config(c);
	c->ioloop = kind;
}

/* Starts a daemon of loop kind (skips the test if this kernel lacks it). */
static void
start(struct hd *d, const struct srv_config *c, const struct mock_opts *mo)
{
	/* test_daemon_killed's second futex case (main skips the rest) */
	if (c->ioloop == IOLOOP_URING_FUTEX && !ioloop_probe_futex()) {
		fprintf(stderr, "io_uring futex opcodes unavailable here\n");
		exit(0);
	}
	ck_assert_int_eq(hd_start(d, c, mo), 0);
	if (c->ioloop != IOLOOP_AUTO)
		ck_assert_msg(hd_log_has(d, ioloop_kind_name(c->ioloop)),
		    "daemon does not run %s", ioloop_kind_name(c->ioloop));
}

static int
connect_to(const struct hd *d, struct cp_client **c)
{
	struct cp_connect_opts o;

	cp_connect_opts_init(&o);
	o.socket_path = d->path;
	o.timeout_ms = 3000;
	return cp_connect(&o, c);
}

/*
 * Reads events of request id until its end, appending text to out.
 * Returns the terminal event type (DONE / ERROR) with *fin, or a negative
 * error.  Checks that token ids are the text bytes, in order, and come
 * one a step (their step numbers rise).
 */
static int
collect(struct cp_client *c, int id, char *out, size_t size, int *fin,
    int timeout_ms)
{
	struct cp_event ev;
	size_t used = strlen(out);
	uint32_t step = 0;
	int r;

	for (;;) {
		r = cp_next_event(c, &ev, timeout_ms);
		if (r < 0)
			return r;
		if (ev.req_id != id)
			return -EBADMSG;
		if (ev.type == CP_EVENT_TOKEN) {
			if (ev.text_len == 1 && ev.token != -1 &&
			    ev.token != (unsigned char)ev.text[0])
				return -EILSEQ;
			/* The mock: one token a step, numbered from 1. */
			if (ev.token != -1 && ev.step <= step)
				return -ERANGE;
			step = ev.step;
			if (used + ev.text_len >= size)
				return -ENOSPC;
			memcpy(out + used, ev.text, ev.text_len);
			used += ev.text_len;
			out[used] = '\0';
			continue;
		}
		if (fin != NULL)
			*fin = ev.type == CP_EVENT_DONE ? ev.finish : ev.error;
		return ev.type;
	}
}

/* ---- end to end, once per io loop ------------------------------------- */

START_TEST(test_echo)
{
	struct srv_config cfg;
	struct cp_model_info mi;
	struct cp_client *c;
	char out[256] = "";
	int id, fin = 0;
	struct hd d;

	cfg_init(&cfg, loop_kinds[_i]);
	start(&d, &cfg, NULL);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	ck_assert_int_eq(cp_model_info(c, &mi), 0);
	ck_assert_str_eq(mi.name, "mock-model");
	ck_assert_str_eq(mi.arch, "llama");
	ck_assert_uint_eq(mi.n_ctx, 4096);
	ck_assert_uint_eq(mi.max_requests, 64);
	id = cp_submit(c, "Hello, world", 12, NULL);
	ck_assert_int_eq(id, 1);
	ck_assert_int_eq(collect(c, id, out, sizeof(out), &fin, 5000),
	    CP_EVENT_DONE);
	ck_assert_str_eq(out, "Hello, world");
	ck_assert_int_eq(fin, CP_DONE_STOP);
	/* Nothing more: a poll without waiting says so. */
	{
		struct cp_event ev;

		ck_assert_int_eq(cp_next_event(c, &ev, 0), -EAGAIN);
		ck_assert_int_eq(cp_next_event(c, &ev, 50), -ETIMEDOUT);
	}
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_echo, first_loop(), 3);

/* Each child process checks its own requests; exit status 0 means all good. */
static int
child_run(const struct hd *d, int k)
{
	char prompt[3][64], out[3][64];
	struct cp_client *c;
	struct cp_event ev;
	int id[3], done = 0, j, fin;

	if (connect_to(d, &c) < 0)
		return 10;
	for (j = 0; j < 3; j++) {
		snprintf(prompt[j], sizeof(prompt[j]), "client %d request %d: "
		    "%.*s", k, j, 8 + 3 * k + j, "abcdefghijklmnopqrstuvwxyz");
		id[j] = cp_submit(c, prompt[j], strlen(prompt[j]), NULL);
		if (id[j] != j + 1)
			return 11;
		out[j][0] = '\0';
	}
	/* Interleaved streams: each request's events in its own order. */
	while (done < 3) {
		if (cp_next_event(c, &ev, 10000) < 0)
			return 12;
		j = ev.req_id - 1;
		if (j < 0 || j > 2)
			return 13;
		if (ev.type == CP_EVENT_TOKEN) {
			size_t n = strlen(out[j]);

			if (ev.text_len != 1 || n + 1 >= sizeof(out[j]) ||
			    ev.token != (unsigned char)prompt[j][n])
				return 14;
			out[j][n] = ev.text[0];
			out[j][n + 1] = '\0';
		} else {
			fin = ev.type == CP_EVENT_DONE ? ev.finish : -1;
			if (fin != CP_DONE_STOP ||
			    strcmp(out[j], prompt[j]) != 0)
				return 15;
			done++;
		}
	}
	cp_close(c);
	return 0;
}

START_TEST(test_many_processes)
{
	struct srv_config cfg;
	struct mock_opts mo;
	pid_t pid[6];
	int k, st;
	struct hd d;

	cfg_init(&cfg, loop_kinds[_i]);
	mock_opts_default(&mo);
	mo.step_us = 100;
	start(&d, &cfg, &mo);
	for (k = 0; k < 6; k++) {
		pid[k] = fork();
		ck_assert_int_ge(pid[k], 0);
		if (pid[k] == 0)
			_exit(child_run(&d, k));
	}
	for (k = 0; k < 6; k++) {
		ck_assert_int_eq(waitpid(pid[k], &st, 0), pid[k]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		    "client %d: status %d", k, st);
	}
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_many_processes, first_loop(), 3);

START_TEST(test_cancel)
{
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	char prompt[600], out[700] = "";
	int id, fin = 0, r;
	struct hd d;

	memset(prompt, 'x', sizeof(prompt));
	cfg_init(&cfg, loop_kinds[_i]);
	mock_opts_default(&mo);
	mo.step_us = 2000;		/* 600 tokens would take over a second */
	start(&d, &cfg, &mo);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	id = cp_submit(c, prompt, sizeof(prompt), NULL);
	ck_assert_int_gt(id, 0);
	ck_assert_int_eq(cp_cancel(c, id), 0);
	r = collect(c, id, out, sizeof(out), &fin, 5000);
	ck_assert_int_eq(r, CP_EVENT_DONE);
	ck_assert_int_eq(fin, CP_DONE_CANCELLED);
	ck_assert_uint_lt(strlen(out), sizeof(prompt));
	/* Cancelling an ended request is harmless; an unknown one is refused. */
	ck_assert_int_eq(cp_cancel(c, id), 0);
	ck_assert_int_eq(cp_cancel(c, id + 1), -EINVAL);
	ck_assert_int_eq(cp_cancel(c, 0), -EINVAL);
	out[0] = '\0';
	id = cp_submit(c, "after", 5, NULL);
	ck_assert_int_eq(collect(c, id, out, sizeof(out), &fin, 5000),
	    CP_EVENT_DONE);
	ck_assert_str_eq(out, "after");
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_cancel, first_loop(), 3);

START_TEST(test_client_killed)
{
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_stats st;
	struct cp_client *c;
	int p[2], base_fds, fds = -1, maps = -1, i;
	char b;
	pid_t pid;
	struct hd d;

	cfg_init(&cfg, loop_kinds[_i]);
	mock_opts_default(&mo);
	mo.step_us = 5000;
	start(&d, &cfg, &mo);
	base_fds = hd_count_fds(d.pid);
	ck_assert_int_gt(base_fds, 0);
	ck_assert_int_eq(hd_count_memfd_maps(d.pid), 0);
	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		static char prompt[4000];

		memset(prompt, 'k', sizeof(prompt));
		struct cp_event ev;
		int seen = 0;

		if (connect_to(&d, &c) < 0 ||
		    cp_submit(c, prompt, sizeof(prompt), NULL) < 0 ||
		    cp_submit(c, prompt, sizeof(prompt), NULL) < 0)
			_exit(1);
		/* Both running in the engine once each has a token. */
		while (seen != 3 && cp_next_event(c, &ev, 5000) == 0)
			seen |= ev.req_id;
		b = 1;
		if (write(p[1], &b, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &b, 1), 1);
	close(p[0]);
	ck_assert_int_gt(hd_count_fds(d.pid), base_fds);
	ck_assert_int_eq(hd_count_memfd_maps(d.pid), 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	for (i = 0; i < 300; i++) {
		fds = hd_count_fds(d.pid);
		maps = hd_count_memfd_maps(d.pid);
		if (fds == base_fds && maps == 0)
			break;
		usleep(10000);
	}
	ck_assert_int_eq(fds, base_fds);
	ck_assert_int_eq(maps, 0);
	/* Its requests were cancelled in the engine too. */
	ck_assert_int_eq(connect_to(&d, &c), 0);
	for (i = 0; i < 300; i++) {
		ck_assert_int_eq(cp_stats(c, &st), 0);
		if (st.requests_active == 0)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.requests_active, 0);
	ck_assert_uint_eq(st.requests_total, 2);
	ck_assert_uint_eq(st.clients, 1);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_client_killed, first_loop(), 3);

START_TEST(test_daemon_killed)
{
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	struct cp_event ev;
	char prompt[2000];
	uint64_t t0;
	int r, n = 0, timeout = _i == 0 ? 10000 : -1;
	struct hd d;

	memset(prompt, 'd', sizeof(prompt));
	cfg_init(&cfg, loop_kinds[_i % 3]);
	mock_opts_default(&mo);
	mo.step_us = 2000;
	start(&d, &cfg, &mo);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	ck_assert_int_gt(cp_submit(c, prompt, sizeof(prompt), NULL), 0);
	ck_assert_int_eq(cp_next_event(c, &ev, 5000), 0);
	hd_kill(&d);
	t0 = clock_ms();
	/* Events written before the death, then CP_EDEAD: never a hang. */
	while ((r = cp_next_event(c, &ev, timeout)) == 0)
		n++;
	ck_assert_int_eq(r, CP_EDEAD);
	ck_assert_uint_lt(clock_ms() - t0, 2000);
	ck_assert_int_lt(n, (int)sizeof(prompt));
	ck_assert_int_eq(cp_submit(c, "x", 1, NULL), CP_EDEAD);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_daemon_killed, first_loop(), 6);

START_TEST(test_event_fd)
{
	struct srv_config cfg;
	struct cp_client *c;
	struct cp_event ev;
	struct pollfd p;
	char out[64] = "";
	int fd, id, r, done = 0;
	struct hd d;

	cfg_init(&cfg, loop_kinds[_i]);
	start(&d, &cfg, NULL);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	fd = cp_event_fd(c);
	ck_assert_int_ge(fd, 0);
	p.fd = fd;
	p.events = POLLIN;
	ck_assert_int_eq(poll(&p, 1, 0), 0);
	id = cp_submit(c, "evented", 7, NULL);
	/* The way a GLib or epoll loop drives it. */
	while (!done) {
		p.revents = 0;
		ck_assert_int_eq(poll(&p, 1, 5000), 1);
		ck_assert(p.revents & POLLIN);
		while ((r = cp_next_event(c, &ev, 0)) == 0) {
			ck_assert_int_eq(ev.req_id, id);
			if (ev.type == CP_EVENT_TOKEN)
				strncat(out, ev.text, ev.text_len);
			else
				done = 1;
		}
		ck_assert_int_eq(r, -EAGAIN);
	}
	ck_assert_str_eq(out, "evented");
	/* Drained: quiet again until the daemon goes. */
	p.revents = 0;
	ck_assert_int_eq(poll(&p, 1, 0), 0);
	hd_kill(&d);
	p.events = POLLIN;
	ck_assert_int_eq(poll(&p, 1, 2000), 1);
	ck_assert_int_eq(cp_next_event(c, &ev, 0), CP_EDEAD);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_event_fd, first_loop(), 3);

START_TEST(test_long_prompt_fragments)
{
	struct cp_connect_opts o;
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	static char prompt[20000], out[20001];
	int id, fin = 0, i;
	struct hd d;

	for (i = 0; i < (int)sizeof(prompt); i++)
		prompt[i] = (char)('a' + (i * 7) % 26);
	cfg_init(&cfg, loop_kinds[_i]);
	mock_opts_default(&mo);
	mo.step_us = 0;
	mo.default_max_tokens = 1u << 20;
	start(&d, &cfg, &mo);
	/* A 4 KiB arena and 8 slots: the prompt goes in 1 KiB fragments. */
	cp_connect_opts_init(&o);
	o.socket_path = d.path;
	o.arena_bytes = 4096;
	o.sq_entries = 8;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	id = cp_submit(c, prompt, sizeof(prompt), NULL);
	ck_assert_int_eq(id, 1);
	out[0] = '\0';
	ck_assert_int_eq(collect(c, id, out, sizeof(out), &fin, 20000),
	    CP_EVENT_DONE);
	ck_assert_uint_eq(strlen(out), sizeof(prompt));
	ck_assert_int_eq(memcmp(out, prompt, sizeof(prompt)), 0);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_long_prompt_fragments, first_loop(), 3);

/*
 * Round trips with an idle daemon and a sleeping client: each one needs
 * the client's wake of the daemon (futex or pipe) and the daemon's wake of
 * the client.  A lost wake-up would cost a 50 ms sleep slice (client) or a
 * 1 s tick (daemon) per trip, far over the bound.
 */
START_TEST(test_wake_latency)
{
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	struct cp_event ev;
	uint64_t t0;
	int i, id;
	struct hd d;

	cfg_init(&cfg, loop_kinds[_i]);
	mock_opts_default(&mo);
	mo.step_us = 0;
	start(&d, &cfg, &mo);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	t0 = clock_ms();
	for (i = 0; i < 40; i++) {
		usleep(2000);	/* let both sides go to sleep */
		id = cp_submit(c, "w", 1, NULL);
		ck_assert_int_gt(id, 0);
		do
			ck_assert_int_eq(cp_next_event(c, &ev, -1), 0);
		while (ev.type == CP_EVENT_TOKEN);
		ck_assert_int_eq(ev.req_id, id);
	}
	/* 40 x 2 ms of naps, plus well under a slice a trip. */
	ck_assert_uint_lt(clock_ms() - t0, 40 * 2 + 40 * 25);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_LOOP("e2e", test_wake_latency, first_loop(), 3);

/* ---- features, on the default loop ------------------------------------- */

START_TEST(test_params_stops_tokens)
{
	static const char *stops[] = { "zz", "lo w" };
	static const int32_t ids[3] = { 7, 300, -4 };
	struct srv_config cfg;
	struct cp_params p;
	struct cp_client *c;
	struct cp_event ev;
	char out[128] = "";
	int id, fin = 0, n = 0;
	struct hd d;

	cfg_init(&cfg, IOLOOP_AUTO);
	start(&d, &cfg, NULL);
	ck_assert_int_eq(connect_to(&d, &c), 0);

	cp_params_init(&p);
	p.stop = stops;
	p.n_stop = 2;
	id = cp_submit(c, "hello world", 11, &p);
	ck_assert_int_eq(collect(c, id, out, sizeof(out), &fin, 5000),
	    CP_EVENT_DONE);
	ck_assert_str_eq(out, "hello w");
	ck_assert_int_eq(fin, CP_DONE_STOP);

	cp_params_init(&p);
	p.max_tokens = 3;
	p.logprobs = 1;
	id = cp_submit(c, "abcdef", 6, &p);
	while (cp_next_event(c, &ev, 5000) == 0 && ev.type == CP_EVENT_TOKEN) {
		n++;
		ck_assert_float_eq(ev.logprob, -(float)n / 8.0f);
	}
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_int_eq(ev.finish, CP_DONE_LENGTH);
	ck_assert_uint_eq(ev.n_prompt, 6);
	ck_assert_uint_eq(ev.n_gen, 3);

	id = cp_submit_tokens(c, ids, 3, NULL);
	out[0] = '\0';
	ck_assert_int_eq(collect(c, id, out, sizeof(out), &fin, 5000),
	    CP_EVENT_DONE);
	ck_assert_str_eq(out, "7 300 -4 ");

	id = cp_submit(c, "!error", 6, NULL);
	ck_assert_int_eq(cp_next_event(c, &ev, 5000), 0);
	ck_assert_int_eq(ev.type, CP_EVENT_ERROR);
	ck_assert_int_eq(ev.error, -EINVAL);
	ck_assert_str_eq(ev.text, "mock: error requested");

	/* Bad arguments never reach the daemon. */
	cp_params_init(&p);
	p.top_p = 0.0f;
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EINVAL);
	cp_params_init(&p);
	p.stop = stops;
	p.n_stop = 9;
	ck_assert_int_eq(cp_submit(c, "x", 1, &p), -EINVAL);
	ck_assert_int_eq(cp_submit(c, NULL, 1, NULL), -EINVAL);
	ck_assert_int_eq(cp_submit(c, "x", (size_t)5 << 20, NULL), -E2BIG);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("features", test_params_stops_tokens);

START_TEST(test_busy_and_stats)
{
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	struct cp_stats st;
	struct cp_event ev;
	int i, ends = 0;
	struct hd d;

	cfg_init(&cfg, IOLOOP_AUTO);
	cfg.max_reqs = 3;
	mock_opts_default(&mo);
	mo.step_us = 1000;
	start(&d, &cfg, &mo);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(cp_submit(c, "abcdefgh", 8, NULL), i + 1);
	ck_assert_int_eq(cp_submit(c, "abcdefgh", 8, NULL), -EBUSY);
	while (ends < 3) {
		ck_assert_int_eq(cp_next_event(c, &ev, 5000), 0);
		ends += ev.type != CP_EVENT_TOKEN;
	}
	ck_assert_int_eq(cp_submit(c, "ab", 2, NULL), 4);
	ck_assert_int_eq(cp_stats(c, &st), 0);
	ck_assert_uint_eq(st.clients, 1);
	ck_assert_uint_eq(st.requests_total, 4);
	ck_assert_uint_eq(st.protocol_errors, 0);
	ck_assert_uint_ge(st.tokens_generated, 24);
	ck_assert_uint_ge(st.steps, 8);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("features", test_busy_and_stats);

/* A client that stops reading: paused (no token lost), then cancelled. */
START_TEST(test_full_cq_stalls)
{
	struct cp_connect_opts o;
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	struct cp_stats st;
	char prompt[200], out[256] = "";
	int id, fin = 0;
	struct hd d;

	memset(prompt, 's', sizeof(prompt));
	memcpy(prompt, "0123456789", 10);
	cfg_init(&cfg, IOLOOP_AUTO);
	cfg.stall_timeout_ms = 300;
	mock_opts_default(&mo);
	mo.step_us = 100;
	start(&d, &cfg, &mo);
	cp_connect_opts_init(&o);
	o.socket_path = d.path;
	o.cq_entries = 16;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	id = cp_submit(c, prompt, sizeof(prompt), NULL);
	usleep(900 * 1000);	/* not reading: 16 slots fill at once */
	ck_assert_int_eq(collect(c, id, out, sizeof(out), &fin, 5000),
	    CP_EVENT_DONE);
	ck_assert_int_eq(fin, CP_DONE_STALLED);
	/* What arrived is an unbroken prefix: paused, nothing dropped. */
	ck_assert_uint_ge(strlen(out), 16);
	ck_assert_uint_lt(strlen(out), sizeof(prompt));
	ck_assert_int_eq(memcmp(out, prompt, strlen(out)), 0);
	ck_assert_int_eq(cp_stats(c, &st), 0);
	ck_assert_uint_eq(st.cq_stalls, 1);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("features", test_full_cq_stalls);

static void *
reader_thread(void *arg)
{
	struct cp_client *c = arg;
	struct cp_event ev;
	long ends = 0;

	while (ends < 20 && cp_next_event(c, &ev, 10000) == 0)
		ends += ev.type != CP_EVENT_TOKEN;
	return (void *)ends;
}

START_TEST(test_threads)
{
	struct srv_config cfg;
	struct cp_client *c;
	pthread_t th;
	void *ends;
	int i;
	struct hd d;

	cfg_init(&cfg, IOLOOP_AUTO);
	start(&d, &cfg, NULL);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, reader_thread, c), 0);
	for (i = 0; i < 20; i++) {
		int r;

		while ((r = cp_submit(c, "threads", 7, NULL)) == -EBUSY)
			usleep(1000);
		ck_assert_int_eq(r, i + 1);
	}
	pthread_join(th, &ends);
	ck_assert_int_eq((long)ends, 20);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("features", test_threads);

START_TEST(test_refusals)
{
	struct cp_connect_opts o;
	struct srv_config cfg;
	struct cp_client *c, *c2;
	struct hd d;

	cp_connect_opts_init(&o);
	o.socket_path = "/nonexistent/cpd.sock";
	ck_assert_int_eq(cp_connect(&o, &c), -ENOENT);
	ck_assert_ptr_null(c);

	cfg_init(&cfg, IOLOOP_AUTO);
	cfg.allow_uids[0] = getuid() + 1000;
	cfg.n_allow_uids = 1;
	start(&d, &cfg, NULL);
	ck_assert_int_eq(connect_to(&d, &c), -EACCES);
	ck_assert_int_eq(hd_stop(&d), 0);

	cfg_init(&cfg, IOLOOP_AUTO);
	cfg.per_uid_max_clients = 1;
	start(&d, &cfg, NULL);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	ck_assert_int_eq(connect_to(&d, &c2), -EUSERS);
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
	ck_assert_str_eq(cp_strerror(CP_EDEAD),
	    "the daemon closed the connection");
	ck_assert_str_eq(cp_strerror(-ENOMEM), "Cannot allocate memory");
	ck_assert_str_eq(cp_strerror(-999999), "unknown error");
}
END_TEST
SUITE_TEST("features", test_refusals);

START_TEST(test_env_forces_loop)
{
	struct srv_config cfg;
	struct cp_client *c;
	char out[16] = "";
	int fin;
	struct hd d;

	setenv("CPD_IOLOOP", "epoll", 1);
	cfg_init(&cfg, IOLOOP_AUTO);
	start(&d, &cfg, NULL);
	ck_assert(hd_log_has(&d, "io loop epoll"));
	setenv("CPD_SOCKET", d.path, 1);
	ck_assert_int_eq(cp_connect(NULL, &c), 0);
	ck_assert_int_eq(collect(c, cp_submit(c, "env", 3, NULL), out,
	    sizeof(out), &fin, 5000), CP_EVENT_DONE);
	ck_assert_str_eq(out, "env");
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("features", test_env_forces_loop);

/*
 * cp_socket_path(): the path given, else $CPD_SOCKET, else
 * $XDG_RUNTIME_DIR/cpd.sock, else /run/cpd/cpd.sock; an empty string is
 * no path; a path too long for a socket address is refused.
 */
START_TEST(test_socket_path)
{
	char buf[200], big[300];

	unsetenv("CPD_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	ck_assert_int_eq(cp_socket_path(NULL, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/cpd/cpd.sock");
	setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
	ck_assert_int_eq(cp_socket_path("", buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/user/7/cpd.sock");
	setenv("CPD_SOCKET", "/tmp/e.sock", 1);
	ck_assert_int_eq(cp_socket_path(NULL, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/tmp/e.sock");
	ck_assert_int_eq(cp_socket_path("/tmp/g.sock", buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/tmp/g.sock");
	ck_assert_int_eq(cp_socket_path("/tmp/g.sock", buf, 5), -ENAMETOOLONG);
	memset(big, 'a', sizeof(big) - 1);
	big[0] = '/';
	big[sizeof(big) - 1] = '\0';
	ck_assert_int_eq(cp_socket_path(big, buf, sizeof(buf)), -ENAMETOOLONG);
	unsetenv("CPD_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
}
END_TEST
SUITE_TEST("features", test_socket_path);

/* Every dynamic symbol libcpclient.so.0 defines is cp_* (or its version node). */
START_TEST(test_exports_only_cp)
{
	const char *path = CP_LIBCPCLIENT_SO;
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	struct stat st;
	unsigned char *m;
	size_t i, j, defined = 0;
	int fd;
	void *h;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	ck_assert_int_eq(fstat(fd, &st), 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	eh = (const Elf64_Ehdr *)m;
	ck_assert_int_eq(memcmp(eh->e_ident, ELFMAG, SELFMAG), 0);
	sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	for (i = 0; i < eh->e_shnum; i++) {
		const Elf64_Sym *sym;
		const char *str;

		if (sh[i].sh_type != SHT_DYNSYM)
			continue;
		sym = (const Elf64_Sym *)(m + sh[i].sh_offset);
		str = (const char *)(m + sh[sh[i].sh_link].sh_offset);
		for (j = 0; j < sh[i].sh_size / sizeof(*sym); j++) {
			const char *name = str + sym[j].st_name;

			if (sym[j].st_shndx == SHN_UNDEF ||
			    ELF64_ST_BIND(sym[j].st_info) == STB_LOCAL ||
			    strncmp(name, "LIBCPCLIENT_", 12) == 0)
				continue;
			ck_assert_msg(strncmp(name, "cp_", 3) == 0,
			    "exported: %s", name);
			defined++;
		}
	}
	ck_assert_uint_ge(defined, 12);
	munmap(m, (size_t)st.st_size);
	close(fd);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(dlsym(h, "cp_next_event"));
	ck_assert_ptr_null(dlsym(h, "cpc_now_ms"));
	dlclose(h);
}
END_TEST
SUITE_TEST("features", test_exports_only_cp);

/*
 * Prefill progress through the real io loop and session: the mock
 * computes 4 prompt bytes a step, so a 10-byte prompt reports 4, 8 and 10
 * of 10 in consecutive steps, the last in the step of the first token;
 * the same prompt without cp_params.progress reports nothing.
 */
START_TEST(test_progress)
{
	static const uint32_t want[] = { 4, 8, 10 };
	struct srv_config cfg;
	struct mock_opts mo;
	struct cp_client *c;
	struct cp_params p;
	struct cp_event ev;
	char out[64];
	uint32_t steps[3];
	size_t used;
	int id, k, n_prog;
	struct hd d;

	cfg_init(&cfg, IOLOOP_AUTO);
	mock_opts_default(&mo);
	mo.prefill_chunk = 4;
	start(&d, &cfg, &mo);
	ck_assert_int_eq(connect_to(&d, &c), 0);
	cp_params_init(&p);
	for (k = 0; k < 2; k++) {
		p.progress = k == 0;
		id = cp_submit(c, "0123456789", 10, &p);
		ck_assert_int_eq(id, k + 1);
		n_prog = 0;
		used = 0;
		for (;;) {
			ck_assert_int_eq(cp_next_event(c, &ev, 5000), 0);
			ck_assert_int_eq(ev.req_id, id);
			if (ev.type == CP_EVENT_PROGRESS) {
				ck_assert_int_eq(used, 0);
				ck_assert_int_lt(n_prog, 3);
				ck_assert_uint_eq(ev.n_prompt, want[n_prog]);
				ck_assert_uint_eq(ev.n_total, 10);
				ck_assert_uint_eq(ev.text_len, 0);
				if (n_prog > 0)
					ck_assert_uint_eq(ev.step,
					    steps[n_prog - 1] + 1);
				steps[n_prog++] = ev.step;
				continue;
			}
			if (ev.type != CP_EVENT_TOKEN)
				break;
			if (used == 0 && k == 0)
				ck_assert_uint_eq(ev.step, steps[2]);
			ck_assert_uint_lt(used + ev.text_len, sizeof(out));
			memcpy(out + used, ev.text, ev.text_len);
			used += ev.text_len;
		}
		ck_assert_int_eq(ev.type, CP_EVENT_DONE);
		ck_assert_int_eq(n_prog, k == 0 ? 3 : 0);
		ck_assert_uint_eq(used, 10);
		ck_assert(memcmp(out, "0123456789", 10) == 0);
	}
	cp_close(c);
	ck_assert_int_eq(hd_stop(&d), 0);
}
END_TEST
SUITE_TEST("features", test_progress);

/* ---- a daemon that lies ------------------------------------------------ */

START_TEST(test_lying_handshake)
{
	static const int modes[] = { FAKE_SHORT, FAKE_NOSEAL, FAKE_HEADER,
	    FAKE_ONEFD, FAKE_LAYOUT };
	struct cp_client *c;
	struct fake f;
	size_t i;
	int before = hd_count_fds(getpid());

	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		fake_start(&f, modes[i]);
		ck_assert_msg(fake_connect(&f, &c) == CP_EPROTO,
		    "mode %d accepted", modes[i]);
		ck_assert_ptr_null(c);
		fake_stop(&f);
	}
	/* Nothing the liars sent was kept open. */
	ck_assert_int_eq(hd_count_fds(getpid()), before);
}
END_TEST
SUITE_TEST("lying", test_lying_handshake);

/* A valid handshake, then the fake daemon writes nonsense into the CQ or SQ head. */
START_TEST(test_lying_rings)
{
	struct cp_client *c;
	struct cp_event ev;
	struct cp_cqe q;
	struct fake f;
	int r;

	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	memset(&q, 0, sizeof(q));
	switch (_i) {
	case 0:		/* tail far ahead of head */
		ring_store_release(&f.s->ctl->cq_tail.v, 1000);
		break;
	case 1:		/* text_len past the slot */
		q.req_id = 1;
		q.type = CP_EV_TOKEN;
		q.text_len = 200;
		break;
	case 2:		/* an event for a request never submitted */
		q.req_id = 5;
		q.type = CP_EV_TOKEN;
		break;
	case 3:		/* half a group */
		q.req_id = 1;
		q.type = CP_EV_TOKEN;
		q.flags = CP_CQF_MORE;
		break;
	case 4:		/* a continuation without a head */
		q.req_id = 1;
		q.type = CP_EV_TEXT;
		break;
	case 6:		/* progress past the prompt's end */
	case 7:		/* progress for a request never submitted */
	case 8:		/* progress nobody asked for */
	case 9:		/* progress of nothing */
	case 10:	/* progress with text */
		q.req_id = _i == 7 ? 5 : 1;
		q.type = CP_EV_PROGRESS;
		q.token = -1;
		q.n_prompt = _i == 6 ? 11 : _i == 9 ? 0 : 3;
		q.n_total = 10;
		q.text_len = _i == 10 ? 1 : 0;
		q.step = 1;
		break;
	}
	if (_i < 5 || _i == 8)
		ck_assert_int_eq(cp_submit(c, "a", 1, NULL), 1);
	if (_i >= 6 && _i != 8) {
		struct cp_params p;

		cp_params_init(&p);
		p.progress = 1;
		ck_assert_int_eq(cp_submit(c, "a", 1, &p), 1);
	}
	if (_i != 0 && _i != 5) {
		memcpy(&f.s->cq[0], &q, sizeof(q));
		ring_store_release(&f.s->ctl->cq_tail.v, 1);
	}
	if (_i == 5) {
		/* The daemon claims to have consumed entries never written. */
		ring_store_release(&f.s->ctl->sq_head.v, 3);
		r = cp_submit(c, "a", 1, NULL);
	} else {
		r = cp_next_event(c, &ev, 1000);
	}
	ck_assert_int_eq(r, CP_EPROTO);
	/* Latched: the client is unusable from now on. */
	ck_assert_int_eq(cp_next_event(c, &ev, 0), CP_EPROTO);
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_LOOP("lying", test_lying_rings, 0, 11);

/*
 * Progress as cp_proto.h defines it is passed on whole; a daemon that
 * does not offer progress is never asked for it (an older daemon would
 * take the unknown flag for a violation).
 */
START_TEST(test_fake_progress)
{
	struct cp_client *c;
	struct cp_params p;
	struct cp_event ev;
	struct cp_cqe q;
	struct fake f;
	int i;

	cp_params_init(&p);
	p.progress = 1;
	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	ck_assert_int_eq(cp_submit(c, "abc", 3, &p), 1);
	ck_assert_uint_eq(f.s->sq[0].params.flags & CP_PF_PROGRESS,
	    CP_PF_PROGRESS);
	memset(&q, 0, sizeof(q));
	q.req_id = 1;
	q.type = CP_EV_PROGRESS;
	q.token = -1;
	q.n_prompt = 2;
	q.n_total = 3;
	q.step = 41;
	memcpy(&f.s->cq[0], &q, sizeof(q));
	q.n_prompt = 3;
	q.step = 42;
	memcpy(&f.s->cq[1], &q, sizeof(q));
	ring_store_release(&f.s->ctl->cq_tail.v, 2);
	ck_assert_int_eq(cp_next_event(c, &ev, 1000), 0);
	ck_assert_int_eq(ev.type, CP_EVENT_PROGRESS);
	ck_assert_int_eq(ev.req_id, 1);
	ck_assert_uint_eq(ev.n_prompt, 2);
	ck_assert_uint_eq(ev.n_total, 3);
	ck_assert_uint_eq(ev.step, 41);
	ck_assert_uint_eq(ev.text_len, 0);
	ck_assert_int_eq(ev.token, -1);
	ck_assert_int_eq(cp_next_event(c, &ev, 1000), 0);
	ck_assert_int_eq(ev.type, CP_EVENT_PROGRESS);
	ck_assert_uint_eq(ev.n_prompt, 3);
	ck_assert_uint_eq(ev.step, 42);
	ck_assert_int_eq(cp_next_event(c, &ev, 0), -EAGAIN);
	/* Not terminal: request 1 still counts against the 8 in flight. */
	for (i = 2; i <= 8; i++)
		ck_assert_int_eq(cp_submit(c, "a", 1, NULL), i);
	ck_assert_int_eq(cp_submit(c, "a", 1, NULL), -EBUSY);
	cp_close(c);
	fake_stop(&f);

	fake_start(&f, FAKE_NOFEAT);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	ck_assert_int_eq(cp_submit(c, "abc", 3, &p), 1);
	ck_assert_uint_eq(f.s->sq[0].params.flags & CP_PF_PROGRESS, 0);
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_TEST("lying", test_fake_progress);

/*
 * A consistent statistics record, by hand: 3 clients accepted, 1 still
 * connected, 2 ended (one closed, one violation); 10 of 40 KV blocks
 * used; one sample of 7 sequences in a step (bucket (4, 8]).
 */
static void
good_stats(struct cp_stats_msg *m)
{
	struct stats_io io;
	struct ep_stats es;

	memset(m, 0, sizeof(*m));
	memset(&io, 0, sizeof(io));
	memset(&es, 0, sizeof(es));
	io.clients = 1;
	io.clients_total = 3;
	io.disconnects[CP_END_CLOSED] = 1;
	io.disconnects[CP_END_PROTOCOL] = 1;
	io.protocol_errors = 1;
	io.requests_total = 5;
	io.requests_active = 2;
	es.kv_blocks_total = 40;
	es.kv_blocks_used = 10;
	es.steps = 9;
	stats_hist_add(&es.step_seqs, STATS_COUNT, 7);
	stats_hist_add(&es.ttft_us, STATS_LAT_US, 150);
	m->hdr.magic = CP_PROTO_MAGIC;
	m->hdr.type = CP_MSG_STATS;
	m->hdr.version = CP_PROTO_VERSION;
	m->stats_version = CP_STATS_VERSION;
	m->stats_bytes = sizeof(m->stats);
	stats_wire(&io, &es, &m->stats);
}

/*
 * The fake daemon answers cp_stats() with a record queued in advance:
 * _i = 0 a good one, 1 another stats version (the call fails, the
 * connection lives), then one broken rule each (CP_EPROTO, latched).
 */
START_TEST(test_lying_stats)
{
	struct cp_stats_msg m;
	struct cp_client *c;
	struct cp_stats st;
	struct fake f;
	size_t len = sizeof(m);
	int want = CP_EPROTO;

	fake_start(&f, 0);
	ck_assert_int_eq(fake_connect(&f, &c), 0);
	good_stats(&m);
	switch (_i) {
	case 0:
		want = 0;
		break;
	case 1:
		m.stats_version = CP_STATS_VERSION + 1;
		want = -EPROTONOSUPPORT;
		break;
	case 2:
		m.stats_bytes -= 8;
		break;
	case 3:
		len = 16 + 128;		/* the version 1 record */
		break;
	case 4:
		m.stats.kv_blocks_used = 41;
		break;
	case 5:
		m.stats.kv_blocks_free = 31;
		break;
	case 6:
		m.stats.disconnects[CP_END_EXITED] = 1;
		break;
	case 7:
		m.stats.ttft_us.le[3] = m.stats.ttft_us.le[2];
		break;
	case 8:
		m.stats.step_seqs.count = 2;
		break;
	case 9:
		m.stats.step_seqs.max = 9;	/* not in (4, 8] */
		break;
	case 10:
		m.stats.itl_us.le[CP_STATS_BUCKETS - 1] = 1u << 30;
		break;
	case 11:
		m.stats.flags = 0x8;
		break;
	case 12:
		m.stats.requests_active = 6;
		break;
	case 13:
		m.hdr.type = CP_MSG_WELCOME;
		break;
	case 14:
		m.stats.pace_missed = m.stats.pace_steps + 1;
		break;
	}
	ck_assert_int_eq(sess_send(f.s->fd, &m, len, NULL, 0), 0);
	memset(&st, 0xa5, sizeof(st));
	ck_assert_int_eq(cp_stats(c, &st), want);
	if (want == 0) {
		ck_assert_uint_eq(st.clients, 1);
		ck_assert_uint_eq(st.clients_total, 3);
		ck_assert_uint_eq(st.disconnects[CP_DISC_CLOSED], 1);
		ck_assert_uint_eq(st.disconnects[CP_DISC_PROTOCOL], 1);
		ck_assert_uint_eq(st.disconnects[CP_DISC_EXITED], 0);
		ck_assert_uint_eq(st.kv_blocks_free, 30);
		ck_assert_uint_eq(st.steps, 9);
		ck_assert_int_eq(st.draining, 0);
		/* Counts: bounds 0, 1, 2, 4, 8...; 7 lands in (4, 8]. */
		ck_assert_uint_eq(st.step_seqs.count, 1);
		ck_assert_uint_eq(st.step_seqs.le[4], 8);
		ck_assert_uint_eq(st.step_seqs.n[4], 1);
		ck_assert_uint_eq(st.step_seqs.max, 7);
		/* Latency: 100, 200, 500 us...; 150 us lands in (100, 200]. */
		ck_assert_uint_eq(st.ttft_us.le[1], 200);
		ck_assert_uint_eq(st.ttft_us.n[1], 1);
		ck_assert_uint_eq(st.ttft_us.sum, 150);
		ck_assert_uint_eq(st.itl_us.count, 0);
		ck_assert_uint_eq(st.itl_us.le[CP_HIST_BUCKETS - 1],
		    UINT64_MAX);
	} else if (want == -EPROTONOSUPPORT) {
		/* Not fatal: the next good record is read. */
		good_stats(&m);
		ck_assert_int_eq(sess_send(f.s->fd, &m, sizeof(m), NULL, 0),
		    0);
		ck_assert_int_eq(cp_stats(c, &st), 0);
		ck_assert_uint_eq(st.clients_total, 3);
	} else {
		ck_assert_int_eq(cp_stats(c, &st), CP_EPROTO);
	}
	cp_close(c);
	fake_stop(&f);
}
END_TEST
SUITE_LOOP("lying", test_lying_stats, 0, 15);

SUITE_CASE("e2e", 30);
SUITE_CASE("features", 30);
SUITE_CASE("lying", 20);

int
main(void)
{
	/* Without the io_uring futex opcodes, the futex loop's cases are
	 * not run (not counted as passes). */
	if (first_loop() > 0)
		printf("check_client: io_uring futex opcodes unavailable on "
		    "this kernel: the futex loop's cases skipped\n");
	return suite_main(suite_registered("client"));
}
