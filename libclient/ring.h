/*
 * ring.h - acquire/release helpers for the shared-memory rings of
 * cp_proto.h, used by the daemon and by libcpclient.
 *
 * Indices are free-running u32: the number of filled slots is the unsigned
 * difference tail - head, correct across wraparound at 2^32, and a ring is
 * sane only while that difference is at most its entries (cp_proto.h,
 * invariant 2).  Words the peer can write are read exactly once through
 * these helpers and the copy is what gets validated; ring_copy_out() moves a
 * slot out word by word so that no field is ever read twice.
 */
#ifndef CP_RING_H
#define CP_RING_H

#include <stddef.h>
#include <stdint.h>

/* A peer-written word, ordered before later reads (pairs with release). */
static inline uint32_t
ring_load_acquire(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Publishes v after every earlier write (slots, arena bytes). */
static inline void
ring_store_release(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* A single untorn read of a word, no ordering. */
static inline uint32_t
ring_load_relaxed(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* A single untorn write of a word, no ordering. */
static inline void
ring_store_relaxed(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* Full fence between setting a wait flag and re-checking the ring (invariant 6). */
static inline void
ring_fence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Filled slots between head and tail (may exceed entries if the peer lies). */
static inline uint32_t
ring_count(uint32_t tail, uint32_t head)
{
	return tail - head;
}

/* 1 when tail and head describe a possible ring of entries slots, else 0. */
static inline int
ring_sane(uint32_t tail, uint32_t head, uint32_t entries)
{
	return tail - head <= entries;
}

/* Free slots; only meaningful when ring_sane() holds. */
static inline uint32_t
ring_space(uint32_t tail, uint32_t head, uint32_t entries)
{
	return entries - (tail - head);
}

/* Slot number of free-running index i in a ring of mask + 1 entries. */
static inline uint32_t
ring_slot(uint32_t i, uint32_t mask)
{
	return i & mask;
}

/*
 * Copies n bytes (a multiple of 4, both pointers 4-aligned) out of shared
 * memory, reading each word once.
 */
static inline void
ring_copy_out(void *dst, const void *shared, size_t n)
{
	const uint32_t *s = (const uint32_t *)shared;
	uint32_t *d = (uint32_t *)dst;
	size_t i;

	for (i = 0; i < n / 4; i++)
		d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

/* Copies n bytes (a multiple of 4, both 4-aligned) into shared memory, word by word. */
static inline void
ring_copy_in(void *shared, const void *src, size_t n)
{
	const uint32_t *s = (const uint32_t *)src;
	uint32_t *d = (uint32_t *)shared;
	size_t i;

	for (i = 0; i < n / 4; i++)
		__atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
}

#endif /* CP_RING_H */
