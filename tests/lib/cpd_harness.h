/*
 * cpd_harness.h - test helpers around a real cpd server: a daemon in a
 * forked child process (server.c + the mock engine), and a raw protocol
 * client that speaks cp_proto.h by hand, for tests that must misbehave.
 *
 * Everything lives in a fresh directory under $TMPDIR (else build/tmp,
 * else /tmp) and is removed by hd_stop(), which also runs at exit of the
 * process that started the daemon (a failed assertion exits the test), and
 * the daemon dies with that process.  Forked clients must leave with
 * _exit().  With CP_TEST_KEEP set in the environment, hd_stop() keeps the
 * directory (and the daemon's log) and prints its name.
 */
#ifndef CP_TEST_CPD_HARNESS_H
#define CP_TEST_CPD_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cp_proto.h"
#include "mock_engine.h"
#include "server.h"

struct hd {
	pid_t pid;		/* the daemon process, 0 when gone */
	char dir[256];
	char path[SRV_PATH_MAX];	/* its socket */
	char log[300];		/* its log file (level debug) */
};

/*
 * srv_config_defaults() for the mock engine's model ("mock-model", llama,
 * n_ctx 4096, n_vocab 256, BOS 1, EOS 2, no chat template), with a
 * handshake timeout of 2 s.
 */
void hd_config(struct srv_config *c);

/*
 * Starts a daemon with cfg (socket_path replaced) and the mock engine with
 * mo (NULL: defaults); returns 0 once it listens, or -errno.
 */
int hd_start(struct hd *d, const struct srv_config *cfg,
    const struct mock_opts *mo);

/*
 * SIGTERM, wait (SIGKILL after 5 s), remove the directory.  Returns the
 * daemon's wait status: 0 for a clean exit (no leak, in a sanitizer
 * build), also 0 when hd_kill() already reaped it.
 */
int hd_stop(struct hd *d);

/* SIGKILL and reap, leaving the files (hd_stop() still cleans up). */
void hd_kill(struct hd *d);

/* SIGUSR1: the daemon drains (srv_drain()), then exits by itself. */
void hd_drain(struct hd *d);

/*
 * Waits up to ms for the daemon to exit by itself and reaps it; its wait
 * status, or -1 while it still runs.
 */
int hd_wait(struct hd *d, int ms);

/* 1 when the daemon's log contains needle, else 0. */
int hd_log_has(const struct hd *d, const char *needle);

/* Open descriptors of process pid (/proc/pid/fd), or -1. */
int hd_count_fds(pid_t pid);

/* Mappings of session memfds in process pid (/proc/pid/maps), or -1. */
int hd_count_memfd_maps(pid_t pid);

/*
 * The daemon's counters, through a connection of the caller's own;
 * 0 or -errno.
 */
int hd_stats(const struct hd *d, struct cp_wire_stats *st);

/* A client speaking the protocol by hand. */
struct raw_client {
	int fd;
	struct cp_welcome w;
	int fds[CP_FD_MAX];
	int nfds;
	unsigned char *map;
	size_t map_len;
	struct cp_seg_hdr *hdr;
	struct cp_seg_ctl *ctl;
	struct cp_sqe *sq;
	unsigned char *arena;
	struct cp_cqe *cq;
	uint32_t sq_tail;	/* next SQ slot to fill */
	uint32_t cq_head;	/* next CQ slot to read */
	uint32_t arena_pos;	/* next free arena byte (no reuse) */
};

/* A HELLO of this protocol version asking for these sizes (0: defaults). */
void raw_hello_init(struct cp_hello *h, uint32_t sq, uint32_t cq,
    uint32_t arena);

/* sendmsg() of msg (len bytes) on sock with fd attached (SCM_RIGHTS). */
ssize_t raw_send_fd(int sock, const void *msg, size_t len, int fd);

/* Connected SOCK_SEQPACKET socket to path, or -errno. */
int raw_socket(const char *path);

/*
 * Connects, says HELLO (sizes 0 = defaults), reads the welcome and maps
 * the segment.  Returns 0, the welcome's negative status (refused), or
 * -errno.
 */
int raw_connect(const char *path, struct raw_client *rc, uint32_t sq,
    uint32_t cq, uint32_t arena);

/* Closes and unmaps everything (safe on a zeroed or failed client). */
void raw_close(struct raw_client *rc);

/* Wakes the daemon after publishing SQ entries (futex or pipe, per the welcome). */
void raw_wake(struct raw_client *rc);

/* Queues a plain text SUBMIT, publishes it and wakes; 0 or -ENOSPC. */
int raw_submit(struct raw_client *rc, uint32_t req_id, const char *prompt,
    uint32_t max_tokens);

/* The same for n bytes of prompt whatever they are, with SQE flags. */
int raw_submit_bytes(struct raw_client *rc, uint32_t req_id, uint8_t flags,
    const void *prompt, size_t n, uint32_t max_tokens);

/*
 * Reads events until a terminal one for req_id or timeout_ms; appends
 * token text to out (size bytes, NUL-terminated).  Returns the terminal
 * CQE's type, 0 on timeout, -EPROTO on a bad ring.
 */
int raw_collect(struct raw_client *rc, uint32_t req_id, char *out,
    size_t size, int timeout_ms, uint8_t *finish);

/*
 * raw_collect() that also gives the terminal CQE in *last and its text,
 * continuations joined, in msg (msg_size bytes, NUL-terminated; NULL:
 * not wanted).
 */
int raw_collect_end(struct raw_client *rc, uint32_t req_id, char *out,
    size_t size, int timeout_ms, struct cp_cqe *last, char *msg,
    size_t msg_size);

/* 1 when the daemon closed rc's socket within timeout_ms, else 0. */
int raw_wait_closed(struct raw_client *rc, int timeout_ms);

/* Asks for stats over the socket; 0 or -errno. */
int raw_stats(struct raw_client *rc, struct cp_wire_stats *st);

#endif
