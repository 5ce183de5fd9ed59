/*
 * uring_futex.c - io_uring futex opcodes by number, and their probe.
 */
#include "uring_futex.h"

#include <errno.h>
#include <string.h>

#include "log.h"

/* Common part of both opcodes; see uring_futex.h for the field layout. */
static void
prep_futex(struct io_uring_sqe *sqe, uint8_t op, uint32_t *addr, uint64_t val)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = (int32_t)URING_FUTEX2_SIZE_U32;
	sqe->addr = (uint64_t)(uintptr_t)addr;
	sqe->off = val;
	sqe->addr3 = URING_FUTEX_BITSET_ANY;
}

void
uring_prep_futex_wait(struct io_uring_sqe *sqe, uint32_t *addr, uint32_t val)
{
	prep_futex(sqe, URING_OP_FUTEX_WAIT, addr, val);
}

void
uring_prep_futex_wake(struct io_uring_sqe *sqe, uint32_t *addr, uint32_t nr)
{
	prep_futex(sqe, URING_OP_FUTEX_WAKE, addr, nr);
}

int
uring_futex_probe(struct io_uring *ring)
{
	struct io_uring_probe *probe;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	static uint32_t word = 7;
	int ok, i, wake_res = -1, wait_res = -1;

	probe = io_uring_get_probe_ring(ring);
	if (probe == NULL)
		return 0;
	ok = io_uring_opcode_supported(probe, URING_OP_FUTEX_WAIT) &&
	    io_uring_opcode_supported(probe, URING_OP_FUTEX_WAKE);
	io_uring_free_probe(probe);
	if (!ok)
		return 0;

	/* The opcode table can say yes on a kernel built without futexes. */
	if ((sqe = io_uring_get_sqe(ring)) == NULL)
		return 0;
	uring_prep_futex_wake(sqe, &word, 1);
	sqe->user_data = 1;
	if ((sqe = io_uring_get_sqe(ring)) == NULL)
		return 0;
	uring_prep_futex_wait(sqe, &word, 8);	/* mismatch: -EAGAIN at once */
	sqe->user_data = 2;
	if (io_uring_submit(ring) != 2)
		return 0;
	for (i = 0; i < 2; i++) {
		if (io_uring_wait_cqe(ring, &cqe) < 0)
			return 0;
		if (cqe->user_data == 1)
			wake_res = cqe->res;
		else if (cqe->user_data == 2)
			wait_res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
	}
	if (wake_res < 0 || wait_res != -EAGAIN) {
		log_debug("io_uring futex probe: wake %d, wait %d", wake_res,
		    wait_res);
		return 0;
	}
	return 1;
}
