/*
 * backend_host.c - see backend_host.h.
 */
#include "backend_host.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"

struct be_buf {
	void *p;		/* mmap'd, page aligned, zero-filled */
	size_t size;
};

int
host_buf_alloc(struct backend *be, size_t size, struct be_buf **out)
{
	struct be_buf *b;
	void *p;

	(void)be;
	*out = NULL;
	if ((b = calloc(1, sizeof(*b))) == NULL)
		return -ENOMEM;
	p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(b);
		return -ENOMEM;
	}
	b->p = p;
	b->size = size;
	*out = b;
	return 0;
}

int
host_buf_release(struct backend *be, struct be_buf *b)
{
	(void)be;
	/* A private anonymous mapping reads as zeros after this. */
	return madvise(b->p, b->size ? b->size : 1, MADV_DONTNEED) == 0 ? 0 :
	    -errno;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23	/* Linux 5.14 */
#endif

int
host_buf_prefault(struct backend *be, struct be_buf *b, size_t off,
    size_t n)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a, z;

	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	if (n == 0)
		return 0;
	/* Whole pages: the mapping is page aligned, so this stays inside. */
	a = (uintptr_t)b->p + off;
	z = a + n;
	a -= a % page;
	/*
	 * MADV_POPULATE_WRITE faults pages in as a write would, without
	 * writing: pages already there keep what they hold.
	 */
	if (madvise((void *)a, z - a, MADV_POPULATE_WRITE) != 0)
		return errno == EINVAL ? -ENOTSUP : -errno;
	return 0;
}

void
host_buf_free(struct backend *be, struct be_buf *b)
{
	(void)be;
	if (b == NULL)
		return;
	munmap(b->p, b->size ? b->size : 1);
	free(b);
}

int
host_buf_set(struct backend *be, struct be_buf *b, size_t off,
    const void *src, size_t n)
{
	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	memcpy((char *)b->p + off, src, n);
	return 0;
}

int
host_buf_get(struct backend *be, const struct be_buf *b, size_t off,
    void *dst, size_t n)
{
	(void)be;
	if (off > b->size || n > b->size - off)
		return -EINVAL;
	memcpy(dst, (const char *)b->p + off, n);
	return 0;
}

void *
host_buf_host(struct be_buf *b)
{
	return b->p;
}
