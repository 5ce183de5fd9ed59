/*
 * futex.h - waiting on a 32-bit word shared by the threads of this
 * process (private futexes), for the engine's pools and the daemon's
 * prefill lane.
 */
#ifndef CP_FUTEX_H
#define CP_FUTEX_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Sleep while *word is val (returns at once when it is not; may wake early). */
static inline void
cp_futex_wait(atomic_uint *word, unsigned val)
{
	(void)syscall(SYS_futex, (void *)word, FUTEX_WAIT_PRIVATE, val,
	    NULL, NULL, 0);
}

/* Wake every thread waiting on word. */
static inline void
cp_futex_wake(atomic_uint *word)
{
	(void)syscall(SYS_futex, (void *)word, FUTEX_WAKE_PRIVATE, INT_MAX,
	    NULL, NULL, 0);
}

#endif
