// cuda_common.cuh - what every CUDA file of the backend shares: the error
// checks, the stream behind the opaque struct cu_stream, element
// conversions and block-wide reductions with a fixed order.
#ifndef CP_CUDA_COMMON_CUH
#define CP_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <stdio.h>

extern "C" {
#include "cuda_ops.h"
}

struct cu_stream {
	cudaStream_t s;
};

// Log a failed runtime call with its place and the runtime's message, and
// turn it into -EIO (0 when err is cudaSuccess).
static inline int
cu_check(cudaError_t err, const char *file, int line, const char *expr)
{
	if (err == cudaSuccess)
		return 0;
	fprintf(stderr, "cuda: %s:%d: %s: %s (%s)\n", file, line, expr,
	    cudaGetErrorString(err), cudaGetErrorName(err));
	// A failed call leaves its error as the runtime's last error; clear it
	// so the next launch check does not report it again (a sticky device
	// error stays and fails every later call anyway).
	(void)cudaGetLastError();
	return -EIO;
}

// cu_check() of one runtime call: 0 or -EIO.
#define CU_TRY(call) cu_check((call), __FILE__, __LINE__, #call)

// Return -EIO from the enclosing function when a runtime call fails.
#define CUDA_CHECK(call)						\
	do {								\
		int cu_rc_ = CU_TRY(call);				\
		if (cu_rc_ < 0)						\
			return cu_rc_;					\
	} while (0)

// After a kernel launch: a bad configuration or a missing kernel image
// shows up here; faults of the kernel itself surface at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Blocks for n items of t threads each, for grid-stride loops; at most
// max_blocks (n > 0).
static inline unsigned int
cu_blocks(size_t n, unsigned int t, unsigned int max_blocks)
{
	size_t b = (n + t - 1) / t;

	return b > max_blocks ? max_blocks : (unsigned int)b;
}

__device__ __forceinline__ float cu_to_f32(float x) { return x; }
__device__ __forceinline__ float cu_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float
cu_to_f32(__nv_bfloat16 x)
{
	return __bfloat162float(x);
}

// F32 into an element type, rounding to nearest even.
template <typename T> __device__ __forceinline__ T cu_from_f32(float x);
template <> __device__ __forceinline__ float cu_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half
cu_from_f32<__half>(float x)
{
	return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16
cu_from_f32<__nv_bfloat16>(float x)
{
	return __float2bfloat16_rn(x);
}

// Sum of v over the thread block, the same value in every thread.  The
// order is fixed by the block size alone: a butterfly within each warp
// (a + b and b + a are the same float, so all lanes agree), then the warp
// sums in warp order.  Every thread of the block must call it; blockDim.x
// is a multiple of 32; red holds blockDim.x / 32 slots.
template <typename T>
__device__ __forceinline__ T
cu_block_sum(T v, T *red)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;
	T s;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	s = red[0];
	for (int i = 1; i < nw; i++)
		s += red[i];
	__syncthreads();	// red is free again when this returns
	return s;
}

// Largest v over the thread block, in every thread (as cu_block_sum()).
__device__ __forceinline__ float
cu_block_max(float v, float *red)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;
	float m;

	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	m = red[0];
	for (int i = 1; i < nw; i++)
		m = fmaxf(m, red[i]);
	__syncthreads();
	return m;
}

#endif
