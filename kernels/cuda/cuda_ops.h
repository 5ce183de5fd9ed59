/*
 * cuda_ops.h - the CUDA backend's device operations, callable from C.
 *
 * Plain C: no CUDA type appears here.  Device memory is passed as void *
 * or typed host-language pointers that the caller must not dereference;
 * a stream and a cuBLAS handle are opaque structs.  Every function returns
 * 0 or a negative errno: -EIO for any CUDA or cuBLAS error (logged to
 * stderr with file:line and the runtime's message), -ENOMEM when device or
 * pinned memory runs out, -EINVAL for arguments out of range.
 *
 * The kernel launchers (cu_embed() .. cu_attention()) only enqueue work
 * on the stream; their -EIO reports a failed launch.  Errors of the work
 * itself surface at the next synchronizing call (cu_stream_sync()), and a
 * device fault is sticky: after it every call fails.
 *
 * Row-major throughout: a matrix [rows, cols] with stride ld holds element
 * (r, c) at r * ld + c.
 *
 * Files: cuda_rt.cu (device, memory, streams), gemm.cu (the only cuBLAS
 * user: matrix products and their input conversion), layer_ops.cu
 * (embedding, RMSNorm, RoPE and the K/V store, SwiGLU, residual add),
 * attention.cu (attention over the paged KV cache).
 */
#ifndef CP_CUDA_OPS_H
#define CP_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element types of device matrices and of the KV cache. */
enum cu_dtype {
	CU_F32 = 0,
	CU_F16 = 1,
	CU_BF16 = 2
};

/* Bytes of one element of dt (4 or 2). */
size_t cu_dtype_size(enum cu_dtype dt);

/*
 * Rows of one cuBLAS call.  cu_gemm() always multiplies CU_GEMM_ROWS rows
 * at a time, so its outputs (and the converted inputs) need their row
 * count rounded up to a multiple of this.
 */
#define CU_GEMM_ROWS 64

/* Row strides of converted inputs and device weights are multiples of this. */
#define CU_LD_ALIGN 8

/* Largest head_dim cu_attention() supports. */
#define CU_ATT_MAX_HEAD_DIM 512

struct cu_stream;
struct cu_gemm;

/* ---- device and memory (cuda_rt.cu) ----------------------------------- */

/* Make dev the calling thread's current device; 0 or -EIO. */
int cu_set_device(int dev);

/* Name (into name[0..len)) and compute capability of device dev; 0, -EIO. */
int cu_device_name(int dev, char *name, size_t len, int *major, int *minor);

/* Free and total bytes of the current device; 0 or -EIO. */
int cu_mem_info(size_t *free_b, size_t *total_b);

/*
 * n bytes of device memory (256-byte aligned) in *out.  On failure logs
 * how much was asked for and what the device has free, and returns
 * -ENOMEM (out of memory) or -EIO.
 */
int cu_malloc(size_t n, void **out);

/* Release device memory from cu_malloc(); accepts NULL. */
void cu_free(void *p);

/* n bytes of page-locked host memory in *out; 0, -ENOMEM. */
int cu_host_alloc(size_t n, void **out);

/* Release cu_host_alloc() memory; accepts NULL. */
void cu_host_free(void *p);

/* Synchronous copies and fill (wait for all earlier work on the device). */
int cu_memcpy_htod_sync(void *dst, const void *src, size_t n);
int cu_memcpy_dtoh_sync(void *dst, const void *src, size_t n);
int cu_memset_sync(void *dst, int byte, size_t n);

/* A new stream of the current device in *out; 0 or -EIO/-ENOMEM. */
int cu_stream_new(struct cu_stream **out);

/* Wait for the stream's work, then destroy it; accepts NULL. */
void cu_stream_free(struct cu_stream *s);

/* Wait until all work on s is done; 0 or -EIO (a fault of that work). */
int cu_stream_sync(struct cu_stream *s);

/* Asynchronous copies on s (host memory should be cu_host_alloc()'d). */
int cu_memcpy_htod(struct cu_stream *s, void *dst, const void *src,
    size_t n);
int cu_memcpy_dtoh(struct cu_stream *s, void *dst, const void *src,
    size_t n);

/* ---- matrix products (gemm.cu) ----------------------------------------- */

/*
 * A cuBLAS handle bound to stream s (borrowed, outlives the handle) with
 * its own workspace of ws_bytes device bytes.  0, -ENOMEM or -EIO.
 */
int cu_gemm_new(struct cu_stream *s, size_t ws_bytes, struct cu_gemm **out);

/* Release the handle and its workspace; accepts NULL. */
void cu_gemm_free(struct cu_gemm *g);

/*
 * Convert rows [0, m) of x (F32, stride ldx, k columns) to dt into xh
 * (stride ldh >= k, ldh a multiple of CU_LD_ALIGN), and zero columns
 * [k, ldh) and rows [m, m_pad) of xh.  dt F16 and BF16 round to nearest
 * even.  Enqueued on s.
 */
int cu_convert(struct cu_stream *s, const float *x, int ldx, int m, int k,
    enum cu_dtype dt, void *xh, int ldh, int m_pad);

/*
 * y[r, :] = w . xh[r, :] for rows r < m rounded up to CU_GEMM_ROWS:
 * w [n, k] of type dt with stride ldw, xh the converted inputs (same dt,
 * stride ldx, at least round_up(m) rows), y F32 [round_up(m), n] with
 * stride n.  Products of dt values are summed in F32.  Enqueued on the
 * handle's stream.
 *
 * Batch invariance: every cuBLAS call has the same shape (n, k,
 * CU_GEMM_ROWS), the same strides and 256-byte aligned pointers, so cuBLAS
 * picks the same kernel every time and a row's result does not depend on m
 * or on the other rows.  w, xh and y must be 256-byte aligned, ldx and ldw
 * multiples of CU_LD_ALIGN.
 */
int cu_gemm(struct cu_gemm *g, const void *w, enum cu_dtype dt, int n,
    int k, int ldw, const void *xh, int ldx, int m, float *y);

/* ---- per-row operations (layer_ops.cu) --------------------------------- */

/*
 * Where the rows of one step sit: device arrays of n_tokens entries.
 * Row r is at position pos[r] of its sequence, whose block table (the
 * sequence's KV block ids, in position order) starts at
 * blocks[blk[r]].
 */
struct cu_step {
	int n_tokens;
	const int32_t *pos;	/* [n_tokens] */
	const int32_t *blk;	/* [n_tokens] offsets into blocks */
	const int32_t *blocks;	/* block tables, concatenated */
};

/*
 * One layer's view of the paged KV cache (see kvcache.h): the K row of
 * position p is at base + blocks[p / block_tokens] * block_bytes + k_off
 * + (p % block_tokens) * kv_dim * elem bytes; V likewise with v_off.
 */
struct cu_kv {
	void *base;		/* device storage */
	enum cu_dtype dt;	/* CU_F16 or CU_F32 */
	size_t block_bytes;	/* kv_block_bytes() */
	size_t k_off, v_off;	/* kv_block_offset(kv, 0, layer, KV_K / KV_V) */
	int block_tokens;
	int kv_dim;
};

/* x[r, :] = the row tokens[r] of emb ([n_vocab, ld] of dt) as F32. */
int cu_embed(struct cu_stream *s, const void *emb, enum cu_dtype dt,
    int ld, int n_embd, const int32_t *tokens, int n, float *x);

/*
 * out[r, :] = x[src, :] / sqrt(mean(x[src, :]^2) + eps) * w for r < n,
 * src = rows[r] (rows may be NULL: src = r); rows of width d.  The sum of
 * squares is taken in double.
 */
int cu_rmsnorm(struct cu_stream *s, const float *x, const int32_t *rows,
    int n, int d, const float *w, float eps, float *out);

/*
 * For every row of st: rotate the first n_rot dims of each head of q
 * ([n_tokens, n_head * head_dim]) and k ([n_tokens, n_head_kv * head_dim])
 * by the row's position, in adjacent pairs (2i, 2i+1) or with neox in
 * pairs (i, i + n_rot/2), with cos/sin pairs from rope ([n_ctx, n_rot],
 * row pos); multiply q by q_scale unless it is 0; round q to F16
 * precision when round_q; store k and v into the cache at the row's
 * position (converted to kv->dt).  q is updated in place, k and v are
 * left as they were.
 */
int cu_rope_store(struct cu_stream *s, const struct cu_step *st,
    const struct cu_kv *kv, float *q, const float *k, const float *v,
    int n_head, int n_head_kv, int head_dim, int n_rot, bool neox,
    const float *rope, float q_scale, bool round_q);

/*
 * Before RoPE, for the n rows of q, k and v: add the biases bq, bk, bv
 * (each may be NULL), then RMSNorm each head of q with q_norm and of k
 * with k_norm ([head_dim] each, both or neither NULL), as the CPU does.
 */
int cu_qkv_prep(struct cu_stream *s, int n, float *q, float *k, float *v,
    const float *bq, const float *bk, const float *bv, const float *q_norm,
    const float *k_norm, int n_head, int n_head_kv, int head_dim, float eps);

/* g[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n. */
int cu_swiglu(struct cu_stream *s, float *g, const float *u, size_t n);

/*
 * g[i] = gelu(g[i]) * u[i] for i < n: the tanh GELU of g rounded to F16,
 * the result rounded to F16 (0 below -10, g itself above 10), as the CPU.
 */
int cu_geglu(struct cu_stream *s, float *g, const float *u, size_t n);

/* x[i] += y[i] for i < n. */
int cu_add(struct cu_stream *s, float *x, const float *y, size_t n);

/* x[i] *= a for i < n. */
int cu_scale(struct cu_stream *s, float *x, float a, size_t n);

/* x[i] = tanh(x[i] * (1 / cap)) * cap for i < n. */
int cu_softcap(struct cu_stream *s, float *x, float cap, size_t n);

/* ---- attention (attention.cu) ------------------------------------------ */

/*
 * For every row of st and query head h: softmax(scale * q . K) . V over
 * positions lo..pos[r] of the row's sequence (lo = 0, or with a window
 * pos[r] - window + 1 when that is above 0), read from the cache, each
 * score soft-capped (cap * tanh(s / cap)) unless softcap is 0, with
 * K/V head h / (n_head / n_head_kv).  q and out are [n_tokens, n_head *
 * head_dim] F32.  Positions are walked in order in fixed tiles with an
 * online softmax in F32, so memory does not grow with the context and a
 * row's result depends only on its query and the cache.  head_dim at most
 * CU_ATT_MAX_HEAD_DIM.
 */
int cu_attention(struct cu_stream *s, const struct cu_step *st,
    const struct cu_kv *kv, const float *q, int n_head, int n_head_kv,
    int head_dim, float scale, int window, float softcap, float *out);

#endif
