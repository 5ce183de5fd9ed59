/*
 * fake_cpd.c - a daemon that lies (fake_cpd.h).
 */
#include "fake_cpd.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "session.h"
#include "tmpdir.h"

static void *
fake_daemon(void *arg)
{
	struct fake *f = arg;
	struct sess_limits lim;
	struct cp_welcome w;
	struct cp_hello h;
	unsigned char buf[512];
	int fds[CP_FD_MAX], nfds, fd, i;
	size_t len = 0;

	fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	f->s = sess_new(fd, 0, 0);
	for (i = 0; i < 200 && sess_recv(fd, buf, sizeof(buf), &len) == -EAGAIN;
	    i++)
		usleep(5000);
	if (sess_hello_check(buf, len, &h) < 0)
		return NULL;
	memset(&lim, 0, sizeof(lim));
	lim.sq_default = lim.sq_max = 16;
	lim.cq_default = lim.cq_max = 16;
	lim.arena_default = lim.arena_max = 4096;
	lim.max_reqs = 8;
	lim.max_prompt_bytes = 4096;
	lim.wake_mode = CP_WAKE_FD;
	if (sess_setup(f->s, &h, &lim, &w, fds, &nfds) < 0)
		return NULL;
	w.features |= CP_FEAT_DETOKENIZE;	/* answered by the test */
	switch (f->mode) {
	case FAKE_NOSEAL:
		close(fds[CP_FD_MEMFD]);
		fds[CP_FD_MEMFD] = memfd_create("liar", MFD_CLOEXEC);
		if (ftruncate(fds[CP_FD_MEMFD], w.seg_bytes) < 0)
			return NULL;
		break;
	case FAKE_HEADER:
		((struct cp_seg_hdr *)(void *)f->s->map)->magic ^= 1;
		break;
	case FAKE_ONEFD:
		nfds = 1;
		break;
	case FAKE_LAYOUT:
		w.cq_entries = 32;
		break;
	case FAKE_NOFEAT:
		w.features = 0;
		break;
	}
	w.model.n_vocab = FAKE_N_VOCAB;
	sess_send(fd, &w, f->mode == FAKE_SHORT ? 20 : sizeof(w), fds, nfds);
	for (i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return NULL;
}

void
fake_start(struct fake *f, int mode)
{
	struct sockaddr_un sa;

	memset(f, 0, sizeof(*f));
	f->mode = mode;
	snprintf(f->path, sizeof(f->path), "%s/cpfake.%ld", tmp_dir(),
	    (long)getpid());
	unlink(f->path);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 4), 0);
	ck_assert_int_eq(pthread_create(&f->th, NULL, fake_daemon, f), 0);
}

int
fake_connect(struct fake *f, struct cp_client **c)
{
	struct cp_connect_opts o;
	int r;

	cp_connect_opts_init(&o);
	o.socket_path = f->path;
	o.timeout_ms = 3000;
	r = cp_connect(&o, c);
	pthread_join(f->th, NULL);
	return r;
}

void
fake_stop(struct fake *f)
{
	sess_free(f->s);
	close(f->lfd);
	unlink(f->path);
}

