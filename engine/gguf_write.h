/*
 * gguf_write.h - build a GGUF v3 file: key/value pairs of every type and
 * tensors, written with alignment 32 to a temporary file renamed into place.
 *
 * Key/value pairs are serialized when set (the writer owns a copy; a key set
 * twice keeps its first position and takes the new value).  Tensors are
 * borrowed: either a data pointer that must stay valid until
 * gguf_writer_write() returns, or a row generator called during the write,
 * row by row in file order, so a large model never has to be in memory.
 */
#ifndef CP_GGUF_WRITE_H
#define CP_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"

#define GGUF_WRITE_ALIGNMENT 32

struct gguf_writer;

/* A new empty writer (free with gguf_writer_free()), or NULL without memory. */
struct gguf_writer *gguf_writer_new(void);

/* Free w and everything it copied; accepts NULL. */
void gguf_writer_free(struct gguf_writer *w);

/*
 * Set key to a scalar.  Each returns 0, -EINVAL for an empty or too long key,
 * or -ENOMEM.
 */
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
/* Set key to the NUL-terminated string v (copied). */
int gguf_writer_set_str(struct gguf_writer *w, const char *key,
    const char *v);

/*
 * Set key to an array of n fixed-size elements of type (not STRING or
 * ARRAY: -EINVAL) read from data in host (little-endian) order; copied.
 */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key,
    enum gguf_vtype type, const void *data, size_t n);

/* Set key to an array of the n NUL-terminated strings strs[] (copied). */
int gguf_writer_set_strs(struct gguf_writer *w, const char *key,
    const char *const *strs, size_t n);

/*
 * Copy a key/value pair read by gguf.h, any type including nested arrays
 * (copied: the source file may be closed afterwards).  0, -EINVAL, -ENOMEM.
 */
int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);

/* Key/value pairs set so far. */
size_t gguf_writer_n_kv(const struct gguf_writer *w);

/*
 * Add tensor name (copied) of type (enum cp_ttype), n_dims dimensions ne[]
 * (ne[0] the row length, a multiple of the type's block size), whose
 * ttype_nbytes() bytes are at data until gguf_writer_write() returns.
 * Returns 0, -EEXIST for a name already added, -EINVAL for a bad name,
 * shape or type, -ENOMEM.
 */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
    uint32_t type, uint32_t n_dims, const uint64_t *ne, const void *data);

/*
 * Like gguf_writer_add_tensor(), but the data is produced during the write:
 * gen(arg, r, dst, row_bytes) fills row r (0 .. n_elems / ne[0] - 1, in
 * order) into dst and returns 0 or a negative errno, which aborts the write.
 */
int gguf_writer_add_tensor_gen(struct gguf_writer *w, const char *name,
    uint32_t type, uint32_t n_dims, const uint64_t *ne,
    int (*gen)(void *arg, uint64_t r, void *dst, size_t row_bytes),
    void *arg);

/*
 * Write the file to path through a temporary file in the same directory,
 * renamed over path on success (removed on failure).  Returns 0 or a
 * negative errno with e naming the path.
 */
int gguf_writer_write(struct gguf_writer *w, const char *path,
    struct cp_err *e);

#endif
