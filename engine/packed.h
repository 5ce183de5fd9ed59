/*
 * packed.h - a model's weights repacked for the CPU kernels (repack.h),
 * made once per model and shared by every CPU backend on it.
 *
 * The matrices of each layer and the output whose type has a repacked
 * kernel on this CPU (and whose row count is a multiple of REPACK_ROWS)
 * are copied into one anonymous mapping in the repacked layout; the
 * others stay the model's.  The mapped file's pages under each repacked
 * matrix are then dropped from this process (madvise(MADV_DONTNEED) on
 * the private read-only mapping: the file is unchanged and a later read,
 * say of an embedding row of a tied output, faults a page back in), so
 * resident memory does not double.  The model itself is not changed: a
 * device backend still uploads its tensors from the file.
 *
 * Set CP_NO_REPACK to a value other than 0 to keep every matrix in the
 * GGUF layout (packed_get() then hands out nothing), for tests that
 * compare the two and for measurements.
 */
#ifndef CP_PACKED_H
#define CP_PACKED_H

#include <stddef.h>

#include "error.h"
#include "model.h"

struct packed;

struct threadpool;

/*
 * The repacked weights of m (borrowed; outlives them), made on the first
 * call for m (on tp's threads, or this one when tp is NULL) and shared
 * with later callers until each has called packed_put().  *out is NULL (and 0 returned) when nothing of m has a
 * repacked kernel on this CPU or CP_NO_REPACK is set.  0, or -ENOMEM with
 * e.  Thread-safe.
 */
int packed_get(const struct model *m, struct threadpool *tp,
    struct packed **out, struct cp_err *e);

/* Drop one reference from packed_get(); the last frees.  Accepts NULL. */
void packed_put(struct packed *p);

/*
 * m's layers with the repacked matrices in place of the file's (an array
 * of n_layer owned by p, valid until the last packed_put()).
 */
const struct model_layer *packed_layers(const struct packed *p);

/* m's output matrix, repacked or the model's (owned by p, as above). */
const struct model_tensor *packed_output(const struct packed *p);

/* Bytes of repacked copies, and the seconds repacking took. */
size_t packed_bytes(const struct packed *p);
double packed_seconds(const struct packed *p);

#endif
