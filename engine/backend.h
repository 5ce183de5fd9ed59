/*
 * backend.h - where a model runs: the backend interface and its wrappers.
 *
 * A backend is a table of operations (struct be_ops) plus its own state
 * (be->ctx).  The CPU backend reads the weights in place from the mapped
 * file; a device backend (CUDA) uploads them in init and keeps the KV
 * storage and all scratch in device buffers.  Host and device meet only at
 * the edges of a step: the batch (token ids, positions, block tables) goes
 * in, the requested logits come out.
 *
 * The generic layer (backend.c) owns what every backend shares: the KV
 * block bookkeeping (kvcache.h), the KV storage buffer allocated through
 * the backend's buffer operations, validation of every batch against the
 * cache, and the written counts after a step.  A backend's step therefore
 * sees only batches that are valid.
 *
 * Use: be_open() -> per step: kv_seq_new()/kv_seq_append() on be_kv(),
 * be_step_submit(), be_step_wait() -> be_close().  The step is
 * asynchronous: between submit and wait the caller may prepare the next
 * batch, but must not touch the submitted batch or the cache.
 */
#ifndef CP_BACKEND_H
#define CP_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "error.h"
#include "kvcache.h"
#include "model.h"

#define BE_DEFAULT_BATCH_TOKENS 512
#define BE_DEFAULT_MAX_SEQS 16

struct be_params {
	int n_threads;		/* CPU threads (0: physical cores) */
	int max_batch_tokens;	/* rows per step (0: BE_DEFAULT_BATCH_TOKENS) */
	int max_seqs;		/* sequences alive in the cache, and per step
				   (0: BE_DEFAULT_MAX_SEQS) */
	int n_ctx;		/* tokens per sequence (0: the model's
				   context_length; at most that) */
	int kv_tokens;		/* pool size in tokens (0: kv_mib, or n_ctx) */
	uint64_t kv_mib;	/* pool size in MiB when kv_tokens is 0 */
	bool kv_f32;		/* F32 K/V storage instead of F16 */
	int block_tokens;	/* tokens per KV block (0: KV_BLOCK_TOKENS) */
};

/* A buffer in the backend's memory (device memory for a GPU). */
struct be_buf;

struct backend;

/*
 * The operations of one backend.  Required: name, init, fini, buf_alloc,
 * buf_free, buf_set, buf_get, step_submit, step_wait.  Optional members
 * may be NULL; the wrappers say what happens then.
 */
struct be_ops {
	const char *name;	/* "cpu", "cuda" */
	/* 0 when the backend can run on this machine, else -ENODEV with e. */
	int (*probe)(struct cp_err *e);
	/*
	 * Optional: 0 when the backend runs every part of model m, else
	 * -ENOTSUP with e (NULL accepted) naming what it lacks; "auto" then
	 * goes on to the next backend.
	 */
	int (*supports)(const struct model *m, struct cp_err *e);
	/*
	 * Set up be->ctx for be->model with be->params (defaults filled in)
	 * and be->kv; be->kv_buf is already allocated.  Returns 0 or a
	 * negative errno with e set; on error nothing is left to fini.
	 */
	int (*init)(struct backend *be, struct cp_err *e);
	/* Release be->ctx (not kv_buf, which the wrapper frees after). */
	void (*fini)(struct backend *be);
	/* size bytes of backend memory, zeroed; 0, -ENOMEM. */
	int (*buf_alloc)(struct backend *be, size_t size, struct be_buf **out);
	void (*buf_free)(struct backend *be, struct be_buf *buf);
	/* Copy n bytes from the host to off / from off to the host. */
	int (*buf_set)(struct backend *be, struct be_buf *buf, size_t off,
	    const void *src, size_t n);
	int (*buf_get)(struct backend *be, const struct be_buf *buf,
	    size_t off, void *dst, size_t n);
	/* Host address of the buffer's byte 0 when it is host memory. */
	void *(*buf_host)(struct be_buf *buf);
	/*
	 * Start step b (validated).  b and the cache are the backend's until
	 * step_wait returns.  0, or a negative errno with e set.
	 */
	int (*step_submit)(struct backend *be, const struct step_batch *b,
	    struct cp_err *e);
	/*
	 * Finish the submitted step: *logits gets host memory holding the
	 * requested logits (n_vocab floats per requesting entry, in entry
	 * order), valid until the next submit.  0 or a negative errno.
	 */
	int (*step_wait)(struct backend *be, const float **logits,
	    struct cp_err *e);
	/* Give buf's pages back to the system; it reads as zeros after. */
	int (*buf_release)(struct backend *be, struct be_buf *buf);
	/*
	 * Map n bytes at off to memory now, without changing what they
	 * hold; safe beside a step that uses other bytes of buf.  0 or a
	 * negative errno.
	 */
	int (*buf_prefault)(struct backend *be, struct be_buf *buf,
	    size_t off, size_t n);
	/* Use n threads (1..params.n_threads) from the next step; 0. */
	int (*set_threads)(struct backend *be, int n);
};

/* State shared by the wrappers and the backend implementing them. */
struct backend {
	const struct be_ops *ops;
	void *ctx;			/* the backend's own state */
	const struct model *model;	/* borrowed, outlives the backend */
	struct be_params params;	/* defaults filled in */
	struct kv_cache *kv;		/* block bookkeeping */
	struct be_buf *kv_buf;		/* K/V storage, kv_storage_bytes() */
	const struct step_batch *inflight;	/* submitted, not waited for */
	int n_logits;			/* logits rows of the inflight step */
};

/* The CPU backend's table (backend_cpu.c). */
extern const struct be_ops be_cpu_ops;

/*
 * Names of the backends compiled in, in "auto" preference order, as a
 * NULL-terminated static array.
 */
const char *const *be_names(void);

/*
 * Open backend name ("auto": the first of be_names() whose probe
 * succeeds) for model m (borrowed; must outlive the backend) with params p
 * (NULL: all defaults).  Returns 0 and *out (release with be_close()), or
 * a negative errno with e set: -ENOENT unknown name, -ENODEV backend not
 * usable here, -EINVAL bad params, -ENOMEM.
 */
int be_open(const char *name, const struct model *m,
    const struct be_params *p, struct backend **out, struct cp_err *e);

/* Release everything; waits for an in-flight step first; accepts NULL. */
void be_close(struct backend *be);

/* The backend's name. */
const char *be_name(const struct backend *be);

/* The effective parameters (defaults filled in); borrowed. */
const struct be_params *be_params(const struct backend *be);

/* The KV block bookkeeping, owned by the backend: sequences live here. */
struct kv_cache *be_kv(struct backend *be);

/*
 * Check b against the cache and the backend's limits: entries in 1..
 * max_seqs, distinct live sequences, rows in 1..max_batch_tokens adding up
 * to n_tokens, pos <= written, pos + n_tokens <= len, token ids in
 * [0, n_vocab).  0 or -EINVAL with e naming the entry at fault.
 */
int be_batch_check(const struct backend *be, const struct step_batch *b,
    struct cp_err *e);

/*
 * Validate and start step b (see be_ops.step_submit).  -EBUSY when a step
 * is in flight, -EINVAL for a bad batch; otherwise the backend's result.
 */
int be_step_submit(struct backend *be, const struct step_batch *b,
    struct cp_err *e);

/*
 * Finish the in-flight step: *logits as in be_ops.step_wait, *n_logits
 * (may be NULL) the rows it holds.  On success the written count of every
 * sequence of the step covers its range.  -EINVAL when none is in flight.
 */
int be_step_wait(struct backend *be, const float **logits, int *n_logits,
    struct cp_err *e);

/* be_step_submit() then be_step_wait(). */
int be_step(struct backend *be, const struct step_batch *b,
    const float **logits, int *n_logits, struct cp_err *e);

/*
 * Run the next steps on n of the backend's params.n_threads threads, so
 * that another backend can use the rest (a second forward pass beside
 * this one).  0; -ENOTSUP when the backend's thread count is fixed,
 * -EINVAL for n outside 1..n_threads, -EBUSY with a step in flight.
 */
int be_set_threads(struct backend *be, int n, struct cp_err *e);

/*
 * Copy the K/V of positions [0, n) of src_seq in src into dst_seq in dst,
 * which has reserved them (kv_seq_len >= n), and count them written.
 * dst and src are distinct backends of the same kind on caches of the
 * same shape, storage type and block size, with no step in flight; src
 * has computed the positions (kv_seq_written >= n).  Whole blocks are
 * copied, so the slots past n in dst's last block are overwritten too
 * (they are not written yet).  Host-memory backends only (cpu, null):
 * 0, or -EINVAL, -EBUSY, -ENOTSUP with e set.
 */
int be_kv_import(struct backend *dst, int dst_seq, struct backend *src,
    int src_seq, int n, struct cp_err *e);

/*
 * Give the KV storage's memory back to the system while no sequence is
 * live (a host backend's pages are taken again on first use).  0;
 * -EBUSY with live sequences or a step in flight; -ENOTSUP when the
 * backend keeps its memory.
 */
int be_kv_release(struct backend *be);

/*
 * Have the storage of the n blocks in blocks mapped now, so that the first
 * writes into them do not stop for page faults (a host backend takes its
 * pages on first use).  What the blocks hold does not change, and it may be
 * called from another thread while be runs steps: it touches no state but
 * the memory's mapping.  0; -EINVAL for a block out of range; -ENOTSUP
 * when the backend has nothing to do, or the kernel cannot (Linux before
 * 5.14).
 */
int be_kv_prefault(struct backend *be, const int32_t *blocks, int n);

/*
 * Run the two kinds of step once, on a sequence of its own that it frees
 * again: a prompt of up to 8 copies of tok with logits, then one decode
 * row.  What a first request would otherwise pay happens here: the
 * model's pages read from its file, scratch memory faulted in, a GPU's
 * libraries and kernels loaded.  0, or a negative errno with e set (a
 * free sequence or the KV blocks missing, or a failed step).
 */
int be_warmup(struct backend *be, int32_t tok, struct cp_err *e);

/* Host <-> backend copies of the KV storage (tests, swapping). */
int be_kv_read(struct backend *be, size_t off, void *dst, size_t n);
int be_kv_write(struct backend *be, size_t off, const void *src, size_t n);

#endif
