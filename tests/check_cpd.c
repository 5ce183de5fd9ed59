/*
 * check_cpd.c - the cpd program end to end: start build/bin/cpd on a real
 * model, talk to it through libcpclient, stop it with a signal; its exit
 * codes (sysexits(3)), and what it tells a service manager: sd_notify
 * datagrams (this test binds the NOTIFY_SOCKET, as systemd does) and
 * syslog priorities on the journal's stream ($JOURNAL_STREAM,
 * systemd.exec(5)).
 *
 * Golden values are llama.cpp's (../shared/models/REFERENCE.md): greedy
 * "Once upon a time" on aidreams260K.gguf, 64 tokens.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpclient.h"
#include "lib/cpd_proc.h"
#include "lib/fixtures.h"
#include "lib/prog.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

static const int ref_ids[64] = {
	446, 280, 432, 458, 375, 431, 422, 314, 280, 323, 290, 431, 448, 429,
	465, 438, 340, 431, 338, 353, 341, 431, 327, 446, 262, 429, 453, 435,
	285, 361, 437, 431, 440, 437, 445, 430, 275, 280, 302, 450, 405, 403,
	399, 306, 339, 290, 264, 309, 361, 441, 267, 395, 448, 429, 465, 438,
	340, 431, 338, 353, 341, 325, 266, 386,
};
static const char ref_text[] = ", pixels unfolding like petals. "
    "Classifications unfold, a kaleidoscope of probability revealing hidden "
    "patterns. Classification whispers sec";

static char cpd_bin[512];
static char sock[512];
static char *model;

/* A socket path of this process's own, for the invocations' tests. */
static void
paths(void)
{
	snprintf(sock, sizeof(sock), "%s/cpd-test-%d.sock", tmp_dir(),
	    (int)getpid());
}

/* Connects, retrying while the daemon loads; the daemon must be up in 20 s. */
static struct cp_client *
connect_retry(void)
{
	struct cp_connect_opts o;
	struct cp_client *c = NULL;
	struct timespec ts = { 0, 50 * 1000 * 1000 };

	cp_connect_opts_init(&o);
	o.socket_path = sock;
	for (int i = 0; i < 400; i++) {
		if (cp_connect(&o, &c) == 0)
			return c;
		nanosleep(&ts, NULL);
	}
	ck_abort_msg("cpd did not come up on %s", sock);
	return NULL;
}

/* The daemon of the tests that talk to one; sock is its socket. */
static struct cpd daemon_proc;

static void
start_daemon(void)
{
	const char *args[] = { "--max-batch-tokens", "32", NULL };

	cpd_start_bin(&daemon_proc, cpd_bin, model, args);
	snprintf(sock, sizeof(sock), "%s", daemon_proc.sock);
}

/* SIGTERM: exits 0, and a clean stop removes the socket. */
static void
stop_daemon(void)
{
	cpd_stop(&daemon_proc);
}

START_TEST(test_greedy_reference)
{
	start_daemon();
	struct cp_client *c = connect_retry();
	struct cp_model_info mi;
	struct cp_params p;
	struct cp_event ev;
	char text[1024] = "";
	size_t tl = 0;
	int id, n = 0, r;

	ck_assert_int_eq(cp_model_info(c, &mi), 0);
	ck_assert_str_eq(mi.arch, "llama");
	ck_assert_uint_eq(mi.n_vocab, 512);
	ck_assert_uint_eq(mi.n_layer, 4);
	ck_assert_uint_eq(mi.n_ctx, 128);
	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = 64;
	id = cp_submit(c, "Once upon a time", 16, &p);
	ck_assert_int_gt(id, 0);
	while ((r = cp_next_event(c, &ev, 20000)) == 0) {
		ck_assert_int_eq(ev.req_id, id);
		if (ev.type == CP_EVENT_TOKEN) {
			if (ev.token >= 0) {
				ck_assert_int_lt(n, 64);
				ck_assert_int_eq(ev.token, ref_ids[n]);
				n++;
			}
			ck_assert_uint_lt(tl + ev.text_len, sizeof(text));
			memcpy(text + tl, ev.text, ev.text_len);
			tl += ev.text_len;
			continue;
		}
		ck_assert_int_eq(ev.type, CP_EVENT_DONE);
		ck_assert_int_eq(ev.finish, CP_DONE_LENGTH);
		ck_assert_uint_eq(ev.n_prompt, 13);
		ck_assert_uint_eq(ev.n_gen, 64);
		memcpy(text + tl, ev.text, ev.text_len);
		tl += ev.text_len;
		break;
	}
	ck_assert_int_eq(r, 0);
	ck_assert_int_eq(n, 64);
	text[tl] = '\0';
	ck_assert_str_eq(text, ref_text);
	cp_close(c);
	/* the finished request's line in the log, with its process */
	snprintf(text, sizeof(text), ": pid %d, prompt 13 tokens (0 cached), "
	    "generated 64, first token ", (int)getpid());
	ck_assert_msg(cpd_log_has(&daemon_proc, text), "no '%s' logged",
	    text);
	ck_assert(cpd_log_has(&daemon_proc, " tokens/s, length\n"));
	stop_daemon();
}
END_TEST
SUITE_TEST("program", test_greedy_reference);

/* Three clients at once each get exactly the reference stream. */
START_TEST(test_clients_share_model)
{
	start_daemon();
	struct cp_client *c[3];
	struct cp_params p;
	struct cp_event ev;
	int id[3], n[3] = { 0 }, done = 0;

	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = 64;
	for (int i = 0; i < 3; i++) {
		c[i] = connect_retry();
		id[i] = cp_submit(c[i], "Once upon a time", 16, &p);
		ck_assert_int_gt(id[i], 0);
	}
	while (done < 3) {
		for (int i = 0; i < 3; i++) {
			if (n[i] < 0)
				continue;
			int r = cp_next_event(c[i], &ev, 20);

			if (r == -ETIMEDOUT)
				continue;
			ck_assert_int_eq(r, 0);
			ck_assert_int_eq(ev.req_id, id[i]);
			if (ev.type == CP_EVENT_TOKEN && ev.token >= 0) {
				ck_assert_int_eq(ev.token, ref_ids[n[i]]);
				n[i]++;
			} else if (ev.type != CP_EVENT_TOKEN) {
				ck_assert_int_eq(ev.type, CP_EVENT_DONE);
				ck_assert_int_eq(n[i], 64);
				n[i] = -1;
				done++;
			}
		}
	}
	for (int i = 0; i < 3; i++)
		cp_close(c[i]);
	stop_daemon();
}
END_TEST
SUITE_TEST("program", test_clients_share_model);

START_TEST(test_check_config)
{
	char bad[600], eq[700];
	const char *argv[] = { cpd_bin, "--check-config", bad, NULL };
	const char *argv_eq[] = { cpd_bin, eq, NULL };
	FILE *f;

	snprintf(bad, sizeof(bad), "%s.yaml", sock);
	f = fopen(bad, "w");
	ck_assert_ptr_nonnull(f);
	fputs("max_batch_tokens: 512\nthreads: many\n", f);
	fclose(f);
	ck_assert_int_eq(prog_runv(argv, NULL), 78);
	f = fopen(bad, "w");
	ck_assert_ptr_nonnull(f);
	fputs("max_batch_tokens: 256\nmax_prefill_chunk: 128\n", f);
	fclose(f);
	ck_assert_int_eq(prog_runv(argv, NULL), 0);
	/* --key=value is --key value */
	snprintf(eq, sizeof(eq), "--check-config=%s", bad);
	ck_assert_int_eq(prog_runv(argv_eq, NULL), 0);
	unlink(bad);
}
END_TEST
SUITE_TEST("program", test_check_config);

START_TEST(test_bad_invocations)
{
	const char *unknown[] = { cpd_bin, "--no-such-flag", "1", NULL };
	const char *range[] = { cpd_bin, "--max-batch-tokens", "0", "-m",
	    model, NULL };
	const char *range_eq[] = { cpd_bin, "--max-batch-tokens=0", "-m",
	    model, NULL };
	const char *notgguf[] = { cpd_bin, "-m", "/dev/null", "-s", sock,
	    NULL };
	const char *badsock[] = { cpd_bin, "-m", model, "-s",
	    "/nonexistent/dir/s.sock", NULL };
	char log[600];
	const char *nomodel[] = { cpd_bin, "-s", sock, NULL };
	const char *missing[] = { cpd_bin, "-m", "/nonexistent/model.gguf",
	    "-s", sock, NULL };

	ck_assert_int_eq(prog_runv(unknown, NULL), 2);
	ck_assert_int_eq(prog_runv(range, NULL), 78);	/* EX_CONFIG */
	ck_assert_int_eq(prog_runv(nomodel, NULL), 78);
	ck_assert_int_eq(prog_runv(missing, NULL), 66);	/* EX_NOINPUT */
	ck_assert_int_eq(prog_runv(notgguf, NULL), 65);	/* EX_DATAERR */
	/* a socket it cannot bind is said before the model loads */
	snprintf(log, sizeof(log), "%s.log", sock);
	ck_assert_int_eq(prog_runv(badsock, log), 69);	/* EX_UNAVAILABLE */
	ck_assert(cpd_file_has(log, "/nonexistent/dir/s.sock: "));
	ck_assert(!cpd_file_has(log, "loading"));
	unlink(log);
	ck_assert_int_eq(prog_runv(range_eq, NULL), 78);
}
END_TEST
SUITE_TEST("program", test_bad_invocations);

/* A second daemon on a live socket refuses to start; the first keeps serving. */
START_TEST(test_socket_in_use)
{
	start_daemon();
	struct cp_client *c = connect_retry();
	const char *argv[] = { cpd_bin, "-m", model, "-s", sock, NULL };
	struct cp_model_info mi;

	ck_assert_int_eq(prog_runv(argv, NULL), 69);	/* EX_UNAVAILABLE */
	ck_assert_int_eq(cp_model_info(c, &mi), 0);
	cp_close(c);
	c = connect_retry();
	cp_close(c);
	stop_daemon();
}
END_TEST
SUITE_TEST("program", test_socket_in_use);

/*
 * cpq against the real daemon: the greedy text, whole, also when its last
 * bytes ("sec", a prefix of the stop string "sec!") are held back until
 * the request ends and arrive with DONE.
 */
START_TEST(test_cpq_text)
{
	static const char *const stops[] = { NULL, "sec!" };
	start_daemon();
	struct cp_client *c = connect_retry();
	char cpq[600], out[700], text[1024];
	FILE *f;
	size_t n;

	cp_close(c);
	ck_assert_int_eq(prog_find(cpq, sizeof(cpq), "cpq", "CPQ"), 0);
	snprintf(out, sizeof(out), "%s.out", sock);
	for (int i = 0; i < 2; i++) {
		const char *argv[] = { cpq, "--socket", sock, "--temp", "0",
		    "--no-newline", "-n", "64", "Once upon a time", NULL, NULL,
		    NULL };

		if (stops[i] != NULL) {
			argv[8] = "--stop";
			argv[9] = stops[i];
			argv[10] = "Once upon a time";
		}
		ck_assert_int_eq(prog_runv(argv, out), 0);
		f = fopen(out, "r");
		ck_assert_ptr_nonnull(f);
		n = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
		text[n] = '\0';
		ck_assert_str_eq(text, ref_text);
	}
	unlink(out);
	stop_daemon();
}
END_TEST
SUITE_TEST("program", test_cpq_text);

/* KiB of pid's mappings of a file whose path ends with name, in memory. */
static long
mapped_rss_kib(pid_t pid, const char *name)
{
	char path[64], line[1024], dash;
	size_t nl = strlen(name), len;
	unsigned long lo;
	long kib, sum = 0;
	int in = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		len = strcspn(line, "\n");
		line[len] = '\0';
		if (sscanf(line, "%lx%c", &lo, &dash) == 2 && dash == '-') {
			/* a mapping's first line: "lo-hi perms ... path" */
			in = len >= nl && strcmp(line + len - nl, name) == 0;
			continue;
		}
		if (in && sscanf(line, "Rss: %ld kB", &kib) == 1)
			sum += kib;
	}
	fclose(f);
	return sum;
}

/*
 * cpd warms up before it listens: the F16 matrices of the model's file
 * are in its memory by then (19 of the 36 MB: all but token_embd, read a
 * row per token), and with warmup: false almost none are.  The matrices
 * stay in the file's layout here (CP_NO_REPACK), as on a CPU without
 * repacked kernels: a repacked copy is in memory from the open on.
 */
START_TEST(test_warmup)
{
	static const char *const on[] = { NULL };
	static const char *const off[] = { "--warmup", "false", NULL };
	char *path = fx_path("synth/synth-gqa-F16.gguf");
	struct cpd d;
	struct stat st;
	long kib[2];

	ck_assert_ptr_nonnull(path);
	ck_assert_int_eq(stat(path, &st), 0);
	setenv("CP_NO_REPACK", "1", 1);
	for (int i = 0; i < 2; i++) {
		cpd_start_bin(&d, cpd_bin, path, i == 0 ? on : off);
		kib[i] = mapped_rss_kib(d.pid, "/synth-gqa-F16.gguf");
		ck_assert_int_eq(cpd_log_has(&d, "warmed up in "), i == 0);
		cpd_stop(&d);
	}
	unsetenv("CP_NO_REPACK");
	ck_assert_msg(kib[0] > st.st_size / 1024 / 3 && kib[1] <
	    st.st_size / 1024 / 10, "model in memory when listening: %ld KiB "
	    "warmed up, %ld KiB not, of %ld KiB", kib[0], kib[1],
	    (long)st.st_size / 1024);
	free(path);
}
END_TEST
SUITE_TEST("program", test_warmup);

#define MAX_MSGS 64

struct msgs {
	char m[MAX_MSGS][512];
	int n;
};

/* A datagram socket at path, as a service manager's. */
static int
notify_socket(char *path, size_t size)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	snprintf(path, size, "%s/notify-%d.sock", tmp_dir(), (int)getpid());
	unlink(path);
	ck_assert_uint_lt(strlen(path), sizeof(a.sun_path));
	memcpy(a.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Datagrams into ms until one holds want (returns its index) or 20 s. */
static int
read_until(int fd, struct msgs *ms, const char *want)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (int waited = 0; waited < 20000;) {
		ssize_t n;

		if (poll(&p, 1, 100) <= 0) {
			waited += 100;
			continue;
		}
		ck_assert_int_lt(ms->n, MAX_MSGS);
		n = recv(fd, ms->m[ms->n], sizeof(ms->m[0]) - 1, 0);
		ck_assert_int_gt(n, 0);
		ms->m[ms->n][n] = '\0';
		if (strstr(ms->m[ms->n++], want) != NULL)
			return ms->n - 1;
	}
	ck_abort_msg("no datagram with '%s' in 20 s", want);
	return -1;
}

/* The first datagram of ms that holds s, or -1. */
static int
find(const struct msgs *ms, const char *s)
{
	for (int i = 0; i < ms->n; i++)
		if (strstr(ms->m[i], s) != NULL)
			return i;
	return -1;
}

/*
 * STATUS lines while it loads, READY=1 once it serves (after them), and
 * STOPPING=1 when SIGTERM starts the drain.
 */
START_TEST(test_ready_and_stopping)
{
	const char *extra[] = { "--max-batch-tokens=64", NULL };
	struct msgs ms = { .n = 0 };
	char path[300];
	struct cpd d;
	int fd, ready, k;

	fd = notify_socket(path, sizeof(path));
	ck_assert_int_eq(setenv("NOTIFY_SOCKET", path, 1), 0);
	cpd_start_bin(&d, cpd_bin, model, extra);
	unsetenv("NOTIFY_SOCKET");
	ready = read_until(fd, &ms, "READY=1");
	k = find(&ms, "STATUS=loading ");
	ck_assert_msg(k >= 0 && k < ready, "no STATUS=loading before READY");
	k = find(&ms, "STATUS=warming up");
	ck_assert_msg(k >= 0 && k < ready, "no warm-up STATUS before READY");
	k = find(&ms, "STATUS=serving ");
	ck_assert_msg(k >= 0 && k <= ready, "no serving STATUS by READY");
	ck_assert_int_lt(find(&ms, "STOPPING=1"), 0);
	cpd_stop(&d);
	(void)read_until(fd, &ms, "STOPPING=1");
	close(fd);
	unlink(path);
}
END_TEST
SUITE_TEST("program", test_ready_and_stopping);

/* Where the journal reads stderr, each line starts with its priority. */
START_TEST(test_journal_priorities)
{
	char out[300], env[64], text[4096], flag[600];
	const char *argv[] = { cpd_bin, "-m", "/nonexistent/m.gguf", flag,
	    NULL };
	struct stat st;
	FILE *f;
	size_t n;

	snprintf(out, sizeof(out), "%s/journal-%d.txt", tmp_dir(),
	    (int)getpid());
	snprintf(flag, sizeof(flag), "--socket-path=%s", sock);
	f = fopen(out, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(stat(out, &st), 0);
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
	    (unsigned long long)st.st_ino);
	for (int journal = 1; journal >= 0; journal--) {
		if (journal)
			ck_assert_int_eq(setenv("JOURNAL_STREAM", env, 1), 0);
		ck_assert_int_eq(prog_runv(argv, out), 66);
		unsetenv("JOURNAL_STREAM");
		f = fopen(out, "r");
		ck_assert_ptr_nonnull(f);
		n = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
		text[n] = '\0';
		if (journal) {
			ck_assert_msg(strncmp(text, "<6>cpd: loading ", 16) == 0,
			    "%s", text);
			ck_assert_msg(strstr(text, "\n<3>cpd: error: ") != NULL,
			    "%s", text);
		} else {
			ck_assert_msg(strncmp(text, "cpd: loading ", 13) == 0,
			    "%s", text);
			ck_assert_msg(strstr(text, "\ncpd: error: ") != NULL,
			    "%s", text);
		}
	}
	unlink(out);
}
END_TEST
SUITE_TEST("program", test_journal_priorities);

/*
 * Without -c, cpd reads $XDG_CONFIG_HOME/cpd/cpd.yaml; --print-config
 * shows every value and where it came from; a bad default file is a
 * configuration error.
 */
START_TEST(test_default_config)
{
	const char *argv[] = { cpd_bin, "--threads=3", "--print-config",
	    NULL };
	char dir[400], file[450], out[8192], want[600];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/xdg-%d", tmp_dir(), (int)getpid());
	snprintf(file, sizeof(file), "%s/cpd", dir);
	ck_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
	ck_assert(mkdir(file, 0700) == 0 || errno == EEXIST);
	snprintf(file, sizeof(file), "%s/cpd/cpd.yaml", dir);
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fputs("threads: 2\nmax_seqs: 7\n", f);
	fclose(f);
	ck_assert_int_eq(setenv("XDG_CONFIG_HOME", dir, 1), 0);
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "\nmax_seqs: 7  # %s:2:11\n", file);
	ck_assert_msg(strstr(out, want) != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\nthreads: 3  # command line\n") != NULL,
	    "%s", out);
	ck_assert_msg(strstr(out, "\nmax_batch_tokens: 512  # default\n") !=
	    NULL, "%s", out);
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fputs("max_seqs: many\n", f);
	fclose(f);
	ck_assert_int_eq(prog_capture(argv, out, sizeof(out)), 78);
	unsetenv("XDG_CONFIG_HOME");
	unlink(file);
	snprintf(file, sizeof(file), "%s/cpd", dir);
	rmdir(file);
	rmdir(dir);
}
END_TEST
SUITE_TEST("program", test_default_config);

/*
 * SIGHUP reloads: a lowered per-uid limit applies at once (the next
 * connection of the uid is refused) while a client already streaming
 * finishes its request; a changed key that needs a restart is logged so
 * and keeps its value.
 */
START_TEST(test_reload)
{
	char file[300];
	const char *extra[] = { "-c", file, NULL };
	struct cp_connect_opts o;
	struct cp_client *a, *b = NULL;
	struct cp_params p;
	struct cp_event ev;
	struct cpd d;
	FILE *f;
	int id, n = 0, r;

	snprintf(file, sizeof(file), "%s/reload-%d.yaml", tmp_dir(),
	    (int)getpid());
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fputs("per_uid_max_clients: 4\n", f);
	fclose(f);
	cpd_start_bin(&d, cpd_bin, model, extra);
	cp_connect_opts_init(&o);
	o.socket_path = d.sock;
	ck_assert_int_eq(cp_connect(&o, &a), 0);
	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = 64;
	id = cp_submit(a, "Once upon a time", 16, &p);
	ck_assert_int_gt(id, 0);
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fputs("per_uid_max_clients: 1\ncontext: 64\n", f);
	fclose(f);
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	cpd_await_log(&d, "reload: per_uid_max_clients: 4 -> 1\n");
	cpd_await_log(&d, "reload: context: 0 -> 64 needs a restart; it stays 0");
	ck_assert_int_eq(cp_connect(&o, &b), -EUSERS);
	while ((r = cp_next_event(a, &ev, 20000)) == 0) {
		ck_assert_int_eq(ev.req_id, id);
		if (ev.type == CP_EVENT_TOKEN && ev.token >= 0)
			ck_assert_int_eq(ev.token, ref_ids[n++]);
		if (ev.type != CP_EVENT_TOKEN)
			break;
	}
	ck_assert_int_eq(r, 0);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_int_eq(n, 64);
	cp_close(a);
	cpd_stop(&d);
	unlink(file);
}
END_TEST
SUITE_TEST("program", test_reload);

/*
 * Socket activation: cpd serves a listening socket handed over as fd 3
 * with LISTEN_FDS=1 and LISTEN_PID (sd_listen_fds(3)); a client that
 * connected while it was still loading gets its answer, and the socket,
 * the service manager's, is left in place when cpd exits.
 */
START_TEST(test_socket_activation)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cp_connect_opts o;
	struct cp_client *c;
	struct cp_params p;
	struct cp_event ev;
	struct stat st;
	char path[200], pidbuf[32];
	int lfd, id, n = 0, status;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/act-%d.sock", tmp_dir(),
	    (int)getpid());
	unlink(path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 16), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(lfd, 3);
		dup2(null, 2);
		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
		setenv("LISTEN_PID", pidbuf, 1);
		setenv("LISTEN_FDS", "1", 1);
		execl(cpd_bin, cpd_bin, "-m", model, "--threads", "1",
		    (char *)NULL);
		_exit(127);
	}
	close(lfd);
	cp_connect_opts_init(&o);
	o.socket_path = path;
	o.timeout_ms = 20000;
	ck_assert_int_eq(cp_connect(&o, &c), 0);
	cp_params_init(&p);
	p.temperature = 0;
	p.max_tokens = 8;
	id = cp_submit(c, "Once upon a time", 16, &p);
	ck_assert_int_gt(id, 0);
	while (cp_next_event(c, &ev, 20000) == 0 && ev.type == CP_EVENT_TOKEN)
		if (ev.token >= 0)
			ck_assert_int_eq(ev.token, ref_ids[n++]);
	ck_assert_int_eq(ev.type, CP_EVENT_DONE);
	ck_assert_int_eq(n, 8);
	cp_close(c);
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(stat(path, &st), 0);
	unlink(path);
}
END_TEST
SUITE_TEST("program", test_socket_activation);

/* Every program answers --help and --version, with status 0. */
START_TEST(test_help_and_version)
{
	static const char *const progs[] = { "cpd", "cpq", "cpmodel",
	    "cpbench" };
	char bin[512], out[4096], want[64];

	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		const char *help[] = { bin, "--help", NULL };
		const char *version[] = { bin, "--version", NULL };

		ck_assert_int_eq(prog_find(bin, sizeof(bin), progs[i], NULL),
		    0);
		ck_assert_int_eq(prog_capture(help, out, sizeof(out)), 0);
		ck_assert_msg(strstr(out, "usage: ") != NULL ||
		    strstr(out, "Usage: ") != NULL, "%s --help: %s", progs[i],
		    out);
		ck_assert_int_eq(prog_capture(version, out, sizeof(out)), 0);
		snprintf(want, sizeof(want), "%s ", progs[i]);
		ck_assert_msg(strncmp(out, want, strlen(want)) == 0 &&
		    strchr(out, '.') != NULL, "%s --version: %s", progs[i],
		    out);
	}
}
END_TEST
SUITE_TEST("program", test_help_and_version);

SUITE_CASE("program", 120);

int
main(void)
{
	int rc;

	paths();
	if ((model = cpd_need("check_cpd", cpd_bin, NULL, sizeof(cpd_bin),
	    "aidreams260K.gguf")) == NULL)
		return 77;
	rc = suite_main(suite_registered("cpd"));
	free(model);
	return rc;
}
