/*
 * fake_cpd.h - a daemon that lies, in a thread of the test: it answers one
 * client's HELLO with a segment made by the daemon's own session code
 * (sess_setup()), spoiled as its mode says, and then leaves the rings to
 * the test, which writes CQ entries and control words by hand through
 * f->s to check that libcpclient validates what it reads.  Its welcome
 * offers CP_FEAT_DETOKENIZE too (but in FAKE_NOFEAT): a test queues the
 * PIECES answer on f->s->fd itself, before the client asks.
 */
#ifndef CP_TEST_FAKE_CPD_H
#define CP_TEST_FAKE_CPD_H

#include <pthread.h>

#include "cpclient.h"
#include "server.h"

#define FAKE_N_VOCAB	512	/* the welcome's model.n_vocab */

/* Modes: 0 is an honest handshake. */
#define FAKE_SHORT	1	/* welcome of the wrong size */
#define FAKE_NOSEAL	2	/* an unsealed memfd */
#define FAKE_HEADER	3	/* header magic wrong */
#define FAKE_ONEFD	4	/* too few descriptors */
#define FAKE_LAYOUT	5	/* welcome sizes disagree with seg_bytes */
#define FAKE_NOFEAT	6	/* a daemon that offers no features */

struct fake {
	int lfd;
	char path[SRV_PATH_MAX];
	int mode;
	struct session *s;	/* after fake_connect(): the segment (CQ of
				   16 entries, 8 requests in flight) */
	pthread_t th;
};

/* Listens on a fresh socket and answers the first client in a thread. */
void fake_start(struct fake *f, int mode);

/* cp_connect() to f (3 s timeout) into *c; its result. */
int fake_connect(struct fake *f, struct cp_client **c);

/* Frees the session and the socket. */
void fake_stop(struct fake *f);

#endif
