/*
 * uring_futex.h - io_uring's futex opcodes, prepared by number.
 *
 * Linux 6.7 added IORING_OP_FUTEX_WAIT (51) and IORING_OP_FUTEX_WAKE (52);
 * liburing 2.3's headers predate them, so the SQEs are filled here by hand
 * with the kernel's field layout: addr = the futex word, addr2 (off) = the
 * value to compare (wait) or the number to wake (wake), addr3 = the bitset
 * mask, fd = FUTEX2_* flags, futex_flags (rw_flags) = 0.  The words cpd
 * waits on are shared between processes, so FUTEX2_PRIVATE is never set.
 */
#ifndef CP_URING_FUTEX_H
#define CP_URING_FUTEX_H

#include <stdint.h>

#include <liburing.h>

#define URING_OP_FUTEX_WAIT	51
#define URING_OP_FUTEX_WAKE	52
#define URING_FUTEX2_SIZE_U32	0x02u
#define URING_FUTEX_BITSET_ANY	0xffffffffu

/* Fill sqe: complete when woken, or at once with -EAGAIN if *addr != val. */
void uring_prep_futex_wait(struct io_uring_sqe *sqe, uint32_t *addr,
    uint32_t val);

/* Fill sqe: wake up to nr waiters on *addr; completes with the number woken. */
void uring_prep_futex_wake(struct io_uring_sqe *sqe, uint32_t *addr,
    uint32_t nr);

/*
 * 1 when ring runs both opcodes (checked by the opcode probe and by a wake
 * and a mismatched wait on a local word), else 0.  Leaves ring empty.
 */
int uring_futex_probe(struct io_uring *ring);

#endif
