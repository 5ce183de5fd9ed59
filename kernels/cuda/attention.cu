// attention.cu - attention of a step's rows over the paged KV cache
// (cuda_ops.h, cu_attention()).
//
// One thread block per (row, query head).  The block walks the row's
// positions lo..pos in tiles of ATT_THREADS positions, in position order,
// starting at lo (0, or the first position of the row's window), reading
// K and V through the sequence's
// block table.  Per tile: each thread computes the score of one position
// (q . k summed over head_dim in order, times scale); the tile's maximum
// and the sum of exp(score - max) come from fixed-order block reductions;
// the running output is rescaled and the tile's V rows added in position
// order (online softmax, F32).  State per (row, head) is O(head_dim), so
// nothing grows with the context, and every number a row produces depends
// only on its query, its position and the cache: not on the batch, and
// not on how its prompt was split into steps.
#include "cuda_common.cuh"

#include <math.h>
#include <stdint.h>

#define ATT_THREADS 128
#define ATT_PER_THREAD (CU_ATT_MAX_HEAD_DIM / ATT_THREADS)

template <typename KT>
__global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(const int32_t *__restrict__ pos_of,
    const int32_t *__restrict__ blk_of, const int32_t *__restrict__ blocks,
    const unsigned char *__restrict__ kv_base, size_t block_bytes,
    size_t k_off, size_t v_off, int bt, int kvd, const float *__restrict__ q,
    int n_head, int group, int hd, float scale, int window, float softcap,
    float *__restrict__ out)
{
	__shared__ float sq[CU_ATT_MAX_HEAD_DIM];	// the query head
	__shared__ float sp[ATT_THREADS];		// the tile's exp(s - m)
	__shared__ float red[ATT_THREADS / 32];
	int r = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
	int pos = pos_of[r];
	const int32_t *tab = blocks + blk_of[r];
	size_t qd = (size_t)n_head * (size_t)hd;
	size_t hoff = (size_t)(h / group) * (size_t)hd;	// KV head in a row
	const float *qh = q + (size_t)r * qd + (size_t)h * (size_t)hd;
	float *o = out + (size_t)r * qd + (size_t)h * (size_t)hd;
	float acc[ATT_PER_THREAD];	// output dims tid + i * ATT_THREADS
	float m = -INFINITY, l = 0.0f, inv;
	int lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;

	for (int d = tid; d < hd; d += ATT_THREADS)
		sq[d] = qh[d];
#pragma unroll
	for (int i = 0; i < ATT_PER_THREAD; i++)
		acc[i] = 0.0f;
	__syncthreads();

	for (int p0 = lo; p0 <= pos; p0 += ATT_THREADS) {
		int p = p0 + tid, n = min(ATT_THREADS, pos - p0 + 1);
		float s = -INFINITY, m_new, e, corr, sum;

		if (p <= pos) {
			const KT *kr = (const KT *)(kv_base +
			    (size_t)tab[p / bt] * block_bytes + k_off) +
			    (size_t)(p % bt) * (size_t)kvd + hoff;
			float dot = 0.0f;

			for (int d = 0; d < hd; d++)
				dot = fmaf(sq[d], cu_to_f32(kr[d]), dot);
			s = dot * scale;
			if (softcap != 0.0f)
				s = tanhf(s * (1.0f / softcap)) * softcap;
		}
		// The tile holds position p0 (thread 0), so m_new is finite.
		m_new = fmaxf(m, cu_block_max(s, red));
		e = p <= pos ? expf(s - m_new) : 0.0f;
		sp[tid] = e;
		sum = cu_block_sum(e, red);	// its barrier publishes sp
		corr = expf(m - m_new);		// 0 on the first tile
		l = fmaf(l, corr, sum);
#pragma unroll
		for (int i = 0; i < ATT_PER_THREAD; i++) {
			int d = tid + i * ATT_THREADS;
			float a;

			if (d >= hd)
				continue;
			a = acc[i] * corr;
			for (int j = 0; j < n; j++) {
				int pj = p0 + j;
				const KT *vr = (const KT *)(kv_base +
				    (size_t)tab[pj / bt] * block_bytes + v_off) +
				    (size_t)(pj % bt) * (size_t)kvd + hoff;

				a = fmaf(sp[j], cu_to_f32(vr[d]), a);
			}
			acc[i] = a;
		}
		m = m_new;
		__syncthreads();	// sp is rewritten by the next tile
	}

	inv = 1.0f / l;
#pragma unroll
	for (int i = 0; i < ATT_PER_THREAD; i++) {
		int d = tid + i * ATT_THREADS;

		if (d < hd)
			o[d] = acc[i] * inv;
	}
}

extern "C" int
cu_attention(struct cu_stream *s, const struct cu_step *st,
    const struct cu_kv *kv, const float *q, int n_head, int n_head_kv,
    int head_dim, float scale, int window, float softcap, float *out)
{
	const unsigned char *base = (const unsigned char *)kv->base;
	int n = st->n_tokens;
	dim3 grid;

	if (n < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0 ||
	    n_head > 65535 || head_dim < 1 ||
	    head_dim > CU_ATT_MAX_HEAD_DIM || window < 0 ||
	    kv->kv_dim != n_head_kv * head_dim || kv->block_tokens < 1)
		return -EINVAL;
	if (n == 0)
		return 0;
	grid = dim3((unsigned int)n, (unsigned int)n_head, 1);
	switch (kv->dt) {
	case CU_F16:
		attention_kernel<__half><<<grid, ATT_THREADS, 0, s->s>>>(
		    st->pos, st->blk, st->blocks, base, kv->block_bytes,
		    kv->k_off, kv->v_off, kv->block_tokens, kv->kv_dim, q,
		    n_head, n_head / n_head_kv, head_dim, scale, window,
		    softcap, out);
		break;
	case CU_F32:
		attention_kernel<float><<<grid, ATT_THREADS, 0, s->s>>>(
		    st->pos, st->blk, st->blocks, base, kv->block_bytes,
		    kv->k_off, kv->v_off, kv->block_tokens, kv->kv_dim, q,
		    n_head, n_head / n_head_kv, head_dim, scale, window,
		    softcap, out);
		break;
	default:
		return -EINVAL;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}
