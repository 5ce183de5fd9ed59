/*
 * backend_host.h - be_ops buffers in host memory, shared by the backends
 * whose "device" is the host (cpu, null): anonymous mappings, zero-filled,
 * page aligned; be_buf_host() is the memory itself.
 *
 * host_buf_alloc() faults every page in when it maps the buffer, as a
 * device backend allocates its memory up front: a step that first writes
 * a KV block, or a copy into many (be_kv_import), then takes no page
 * faults, which cost a 66 MB copy three quarters of its 20 ms.
 * host_buf_alloc_lazy() leaves the pages to first use (the null backend,
 * whose KV storage nothing reads; a CPU backend asked for kv_on_demand),
 * and host_buf_release() gives them back.
 */
#ifndef CP_BACKEND_HOST_H
#define CP_BACKEND_HOST_H

#include <stddef.h>

struct backend;
struct be_buf;

int host_buf_alloc(struct backend *be, size_t size, struct be_buf **out);
int host_buf_alloc_lazy(struct backend *be, size_t size,
    struct be_buf **out);
int host_buf_release(struct backend *be, struct be_buf *b);
void host_buf_free(struct backend *be, struct be_buf *b);
int host_buf_set(struct backend *be, struct be_buf *b, size_t off,
    const void *src, size_t n);
int host_buf_get(struct backend *be, const struct be_buf *b, size_t off,
    void *dst, size_t n);
void *host_buf_host(struct be_buf *b);

#endif
