// layer_ops.cu - the per-row pieces of a layer: embedding lookup,
// RMSNorm, biases and per-head norms of q and k, RoPE with the K/V store
// into the paged cache, SwiGLU and GeGLU, the residual add, scaling and
// soft-capping (cuda_ops.h).
//
// The arithmetic follows the CPU forward pass (engine/forward.c) operation
// for operation; products and sums that the CPU rounds one at a time use
// the explicitly rounded intrinsics (__fmul_rn, __fadd_rn...) so nvcc
// cannot fuse them into FMAs.  Each row is handled by one thread block
// whose size is fixed, so a row's reductions never depend on the batch.
#include "cuda_common.cuh"

#include <stdint.h>

#define ROW_THREADS 256
#define EW_THREADS 256
#define EW_MAX_BLOCKS 65535u

template <typename T>
__global__ void
embed_kernel(const T *__restrict__ emb, int ld, int n_embd,
    const int32_t *__restrict__ tokens, float *__restrict__ x)
{
	int r = blockIdx.x;
	const T *e = emb + (size_t)tokens[r] * (size_t)ld;
	float *xr = x + (size_t)r * (size_t)n_embd;

	for (int i = threadIdx.x; i < n_embd; i += blockDim.x)
		xr[i] = cu_to_f32(e[i]);
}

extern "C" int
cu_embed(struct cu_stream *s, const void *emb, enum cu_dtype dt, int ld,
    int n_embd, const int32_t *tokens, int n, float *x)
{
	if (n < 0 || n_embd < 1 || ld < n_embd)
		return -EINVAL;
	if (n == 0)
		return 0;
	switch (dt) {
	case CU_F32:
		embed_kernel<float><<<n, ROW_THREADS, 0, s->s>>>(
		    (const float *)emb, ld, n_embd, tokens, x);
		break;
	case CU_F16:
		embed_kernel<__half><<<n, ROW_THREADS, 0, s->s>>>(
		    (const __half *)emb, ld, n_embd, tokens, x);
		break;
	case CU_BF16:
		embed_kernel<__nv_bfloat16><<<n, ROW_THREADS, 0, s->s>>>(
		    (const __nv_bfloat16 *)emb, ld, n_embd, tokens, x);
		break;
	default:
		return -EINVAL;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

// One block per output row.  As the CPU: the sum of the squares (each
// rounded to float) in double, mean rounded to float, scale =
// 1 / sqrtf(mean + eps), out = (x * scale) * w.
__global__ void
rmsnorm_kernel(const float *__restrict__ x, const int32_t *__restrict__ rows,
    int d, const float *__restrict__ w, float eps, float *__restrict__ out)
{
	__shared__ double red[ROW_THREADS / 32];
	int r = blockIdx.x, src = rows != NULL ? rows[r] : r;
	const float *xr = x + (size_t)src * (size_t)d;
	float *o = out + (size_t)r * (size_t)d;
	double ss = 0;
	float mean, scale;

	for (int i = threadIdx.x; i < d; i += blockDim.x)
		ss += (double)__fmul_rn(xr[i], xr[i]);
	ss = cu_block_sum(ss, red);
	mean = (float)(ss / (double)d);
	scale = 1.0f / sqrtf(__fadd_rn(mean, eps));
	for (int i = threadIdx.x; i < d; i += blockDim.x)
		o[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

extern "C" int
cu_rmsnorm(struct cu_stream *s, const float *x, const int32_t *rows, int n,
    int d, const float *w, float eps, float *out)
{
	if (n < 0 || d < 1)
		return -EINVAL;
	if (n == 0)
		return 0;
	rmsnorm_kernel<<<n, ROW_THREADS, 0, s->s>>>(x, rows, d, w, eps, out);
	CUDA_CHECK_LAUNCH();
	return 0;
}

// The pair (x0, x1) rotated by (c, s), rounded as the CPU rounds it.
__device__ __forceinline__ void
rope_pair(float x0, float x1, float c, float s, float *y0, float *y1)
{
	*y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
	*y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

__device__ __forceinline__ float
round_f16(float x)
{
	return __half2float(__float2half_rn(x));
}

// One block per row.  Every element is read and written by one thread:
// the loops run over rotated pairs, then over the dims past n_rot.
template <typename KT>
__global__ void
rope_store_kernel(const int32_t *__restrict__ pos_of, const int32_t *__restrict__ blk_of,
    const int32_t *__restrict__ blocks, unsigned char *kv_base,
    size_t block_bytes, size_t k_off, size_t v_off, int bt, int kvd,
    float *__restrict__ q, const float *__restrict__ k,
    const float *__restrict__ v, int n_head, int n_head_kv, int hd,
    int n_rot, bool neox, const float *__restrict__ rope, float q_scale,
    bool round_q)
{
	int r = blockIdx.x, pos = pos_of[r];
	int half = n_rot / 2, rest = hd - n_rot, qd = n_head * hd;
	const float *cs = rope + (size_t)pos * (size_t)n_rot;
	size_t blk = (size_t)blocks[blk_of[r] + pos / bt];
	size_t slot = (size_t)(pos % bt) * (size_t)kvd;
	KT *kd = (KT *)(kv_base + blk * block_bytes + k_off) + slot;
	KT *vd = (KT *)(kv_base + blk * block_bytes + v_off) + slot;
	float *qr = q + (size_t)r * (size_t)qd;
	const float *kr = k + (size_t)r * (size_t)kvd;
	const float *vr = v + (size_t)r * (size_t)kvd;
	float y0, y1;

	// the two elements of pair p: (2p, 2p+1), or (p, p + half)
	int a1 = neox ? half : 1, a0 = neox ? 1 : 2;

	for (int i = threadIdx.x; i < n_head * half; i += blockDim.x) {
		int h = i / half, p = i % half;
		float *e = qr + (size_t)h * (size_t)hd + a0 * p;

		rope_pair(e[0], e[a1], cs[2 * p], cs[2 * p + 1], &y0, &y1);
		y0 = q_scale != 0.0f ? __fmul_rn(y0, q_scale) : y0;
		y1 = q_scale != 0.0f ? __fmul_rn(y1, q_scale) : y1;
		e[0] = round_q ? round_f16(y0) : y0;
		e[a1] = round_q ? round_f16(y1) : y1;
	}
	if (round_q || q_scale != 0.0f)
		for (int i = threadIdx.x; i < n_head * rest; i += blockDim.x) {
			float *e = qr + (size_t)(i / rest) * (size_t)hd +
			    n_rot + i % rest;
			float y = q_scale != 0.0f ? __fmul_rn(*e, q_scale) : *e;

			*e = round_q ? round_f16(y) : y;
		}
	for (int i = threadIdx.x; i < n_head_kv * half; i += blockDim.x) {
		int h = i / half, p = i % half;
		size_t o = (size_t)h * (size_t)hd + (size_t)(a0 * p);

		rope_pair(kr[o], kr[o + a1], cs[2 * p], cs[2 * p + 1], &y0,
		    &y1);
		kd[o] = cu_from_f32<KT>(y0);
		kd[o + a1] = cu_from_f32<KT>(y1);
	}
	for (int i = threadIdx.x; i < n_head_kv * rest; i += blockDim.x) {
		size_t o = (size_t)(i / rest) * (size_t)hd + n_rot + i % rest;

		kd[o] = cu_from_f32<KT>(kr[o]);
	}
	for (int i = threadIdx.x; i < kvd; i += blockDim.x)
		vd[i] = cu_from_f32<KT>(vr[i]);
}

extern "C" int
cu_rope_store(struct cu_stream *s, const struct cu_step *st,
    const struct cu_kv *kv, float *q, const float *k, const float *v,
    int n_head, int n_head_kv, int head_dim, int n_rot, bool neox,
    const float *rope, float q_scale, bool round_q)
{
	unsigned char *base = (unsigned char *)kv->base;
	int n = st->n_tokens;

	if (n < 0 || n_head < 1 || n_head_kv < 1 || head_dim < 1 ||
	    n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0 ||
	    kv->kv_dim != n_head_kv * head_dim || kv->block_tokens < 1)
		return -EINVAL;
	if (n == 0)
		return 0;
	switch (kv->dt) {
	case CU_F16:
		rope_store_kernel<__half><<<n, ROW_THREADS, 0, s->s>>>(st->pos,
		    st->blk, st->blocks, base, kv->block_bytes, kv->k_off,
		    kv->v_off, kv->block_tokens, kv->kv_dim, q, k, v, n_head,
		    n_head_kv, head_dim, n_rot, neox, rope, q_scale, round_q);
		break;
	case CU_F32:
		rope_store_kernel<float><<<n, ROW_THREADS, 0, s->s>>>(st->pos,
		    st->blk, st->blocks, base, kv->block_bytes, kv->k_off,
		    kv->v_off, kv->block_tokens, kv->kv_dim, q, k, v, n_head,
		    n_head_kv, head_dim, n_rot, neox, rope, q_scale, round_q);
		break;
	default:
		return -EINVAL;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

// One block per (row, head): grid.y counts the heads of q, then of k,
// then of v.  The bias is added, then (q and k) the head is normed: the
// sum of squares in double, as rmsnorm_kernel.
__global__ void
qkv_prep_kernel(float *__restrict__ q, float *__restrict__ k,
    float *__restrict__ v, const float *__restrict__ bq,
    const float *__restrict__ bk, const float *__restrict__ bv,
    const float *__restrict__ q_norm, const float *__restrict__ k_norm,
    int n_head, int n_head_kv, int hd, float eps)
{
	__shared__ double red[ROW_THREADS / 32];
	int r = blockIdx.x, h = blockIdx.y, kvd = n_head_kv * hd;
	float *x;
	const float *b, *w;
	double ss = 0;
	float mean, scale;

	if (h < n_head) {
		x = q + (size_t)r * (size_t)(n_head * hd) + (size_t)h * hd;
		b = bq != NULL ? bq + (size_t)h * hd : NULL;
		w = q_norm;
	} else if (h < n_head + n_head_kv) {
		h -= n_head;
		x = k + (size_t)r * (size_t)kvd + (size_t)h * hd;
		b = bk != NULL ? bk + (size_t)h * hd : NULL;
		w = k_norm;
	} else {
		h -= n_head + n_head_kv;
		x = v + (size_t)r * (size_t)kvd + (size_t)h * hd;
		b = bv != NULL ? bv + (size_t)h * hd : NULL;
		w = NULL;
	}
	if (b != NULL)
		for (int i = threadIdx.x; i < hd; i += blockDim.x)
			x[i] = __fadd_rn(x[i], b[i]);
	if (w == NULL)
		return;
	for (int i = threadIdx.x; i < hd; i += blockDim.x)
		ss += (double)__fmul_rn(x[i], x[i]);
	ss = cu_block_sum(ss, red);
	mean = (float)(ss / (double)hd);
	scale = 1.0f / sqrtf(__fadd_rn(mean, eps));
	for (int i = threadIdx.x; i < hd; i += blockDim.x)
		x[i] = __fmul_rn(__fmul_rn(x[i], scale), w[i]);
}

extern "C" int
cu_qkv_prep(struct cu_stream *s, int n, float *q, float *k, float *v,
    const float *bq, const float *bk, const float *bv, const float *q_norm,
    const float *k_norm, int n_head, int n_head_kv, int head_dim, float eps)
{
	if (n < 0 || n_head < 1 || n_head_kv < 1 || head_dim < 1 ||
	    n_head + 2 * n_head_kv > 65535 || (q_norm == NULL) !=
	    (k_norm == NULL))
		return -EINVAL;
	if (n == 0 || (bq == NULL && bk == NULL && bv == NULL &&
	    q_norm == NULL))
		return 0;
	qkv_prep_kernel<<<dim3((unsigned int)n, (unsigned int)(n_head +
	    2 * n_head_kv), 1), ROW_THREADS, 0, s->s>>>(q, k, v, bq, bk, bv,
	    q_norm, k_norm, n_head, n_head_kv, head_dim, eps);
	CUDA_CHECK_LAUNCH();
	return 0;
}

// As the CPU: g / (1 + expf(-g)) * u, each operation rounded.
__global__ void
swiglu_kernel(float *__restrict__ g, const float *__restrict__ u, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += stride) {
		float x = g[i];

		g[i] = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), u[i]);
	}
}

extern "C" int
cu_swiglu(struct cu_stream *s, float *g, const float *u, size_t n)
{
	if (n == 0)
		return 0;
	swiglu_kernel<<<cu_blocks(n, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0,
	    s->s>>>(g, u, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

// As the CPU: the tanh GELU of g rounded to F16, computed in float and
// rounded to F16 again (the reference's table), times u.
__global__ void
geglu_kernel(float *__restrict__ g, const float *__restrict__ u, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += stride) {
		float x = g[i], y, t;

		if (x <= -10.0f) {
			y = 0.0f;
		} else if (x >= 10.0f) {
			y = x;
		} else {
			x = round_f16(x);
			t = __fmul_rn(__fmul_rn(0.797884560802865356f, x),
			    __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x),
			    x)));
			y = round_f16(__fmul_rn(__fmul_rn(0.5f, x),
			    __fadd_rn(1.0f, tanhf(t))));
		}
		g[i] = __fmul_rn(y, u[i]);
	}
}

extern "C" int
cu_geglu(struct cu_stream *s, float *g, const float *u, size_t n)
{
	if (n == 0)
		return 0;
	geglu_kernel<<<cu_blocks(n, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0,
	    s->s>>>(g, u, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

// x * a, or with cap != 0: tanh(x * (1 / cap)) * cap.
__global__ void
scale_kernel(float *__restrict__ x, float a, float cap, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += stride)
		x[i] = cap != 0.0f ? __fmul_rn(tanhf(__fmul_rn(x[i],
		    __fdiv_rn(1.0f, cap))), cap) : __fmul_rn(x[i], a);
}

extern "C" int
cu_scale(struct cu_stream *s, float *x, float a, size_t n)
{
	if (n == 0)
		return 0;
	scale_kernel<<<cu_blocks(n, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0,
	    s->s>>>(x, a, 0.0f, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int
cu_softcap(struct cu_stream *s, float *x, float cap, size_t n)
{
	if (n == 0 || cap == 0.0f)
		return 0;
	scale_kernel<<<cu_blocks(n, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0,
	    s->s>>>(x, 1.0f, cap, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ void
add_kernel(float *__restrict__ x, const float *__restrict__ y, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += stride)
		x[i] = __fadd_rn(x[i], y[i]);
}

extern "C" int
cu_add(struct cu_stream *s, float *x, const float *y, size_t n)
{
	if (n == 0)
		return 0;
	add_kernel<<<cu_blocks(n, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0,
	    s->s>>>(x, y, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}
