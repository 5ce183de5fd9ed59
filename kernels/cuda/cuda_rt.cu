// cuda_rt.cu - device selection, memory and streams for the CUDA backend,
// exported to C (cuda_ops.h).
#include "cuda_common.cuh"

#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

extern "C" size_t
cu_dtype_size(enum cu_dtype dt)
{
	return dt == CU_F32 ? 4 : 2;
}

extern "C" int
cu_set_device(int dev)
{
	CUDA_CHECK(cudaSetDevice(dev));
	return 0;
}

extern "C" int
cu_device_name(int dev, char *name, size_t len, int *major, int *minor)
{
	cudaDeviceProp prop;

	CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
	if (name != NULL && len > 0)
		snprintf(name, len, "%s", prop.name);
	*major = prop.major;
	*minor = prop.minor;
	return 0;
}

extern "C" int
cu_mem_info(size_t *free_b, size_t *total_b)
{
	*free_b = 0;
	*total_b = 0;
	CUDA_CHECK(cudaMemGetInfo(free_b, total_b));
	return 0;
}

extern "C" int
cu_malloc(size_t n, void **out)
{
	size_t free_b = 0, total_b = 0;
	cudaError_t err;

	*out = NULL;
	err = cudaMalloc(out, n ? n : 1);
	if (err == cudaSuccess)
		return 0;
	*out = NULL;
	if (err != cudaErrorMemoryAllocation)
		return CU_TRY(err);
	(void)cudaGetLastError();	// out of memory is not sticky: clear it
	(void)cudaMemGetInfo(&free_b, &total_b);
	fprintf(stderr, "cuda: cannot allocate %.1f MiB of device memory: "
	    "%.1f MiB free of %.1f MiB\n", (double)n / MIB,
	    (double)free_b / MIB, (double)total_b / MIB);
	return -ENOMEM;
}

extern "C" void
cu_free(void *p)
{
	if (p != NULL)
		(void)CU_TRY(cudaFree(p));
}

extern "C" int
cu_host_alloc(size_t n, void **out)
{
	cudaError_t err;

	*out = NULL;
	err = cudaMallocHost(out, n ? n : 1);
	if (err == cudaSuccess)
		return 0;
	*out = NULL;
	(void)CU_TRY(err);
	(void)cudaGetLastError();
	return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

extern "C" void
cu_host_free(void *p)
{
	if (p != NULL)
		(void)CU_TRY(cudaFreeHost(p));
}

extern "C" int
cu_memcpy_htod_sync(void *dst, const void *src, size_t n)
{
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaDeviceSynchronize());
	return 0;
}

extern "C" int
cu_memcpy_dtoh_sync(void *dst, const void *src, size_t n)
{
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
	return 0;
}

extern "C" int
cu_memset_sync(void *dst, int byte, size_t n)
{
	CUDA_CHECK(cudaMemset(dst, byte, n));
	CUDA_CHECK(cudaDeviceSynchronize());
	return 0;
}

extern "C" int
cu_stream_new(struct cu_stream **out)
{
	struct cu_stream *s;
	int rc;

	*out = NULL;
	if ((s = (struct cu_stream *)calloc(1, sizeof(*s))) == NULL)
		return -ENOMEM;
	// A blocking stream: the synchronous copies above, which run on the
	// legacy default stream, wait for its work.
	if ((rc = CU_TRY(cudaStreamCreate(&s->s))) < 0) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

extern "C" void
cu_stream_free(struct cu_stream *s)
{
	if (s == NULL)
		return;
	(void)CU_TRY(cudaStreamSynchronize(s->s));
	(void)CU_TRY(cudaStreamDestroy(s->s));
	free(s);
}

extern "C" int
cu_stream_sync(struct cu_stream *s)
{
	CUDA_CHECK(cudaStreamSynchronize(s->s));
	return 0;
}

extern "C" int
cu_memcpy_htod(struct cu_stream *s, void *dst, const void *src, size_t n)
{
	CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s->s));
	return 0;
}

extern "C" int
cu_memcpy_dtoh(struct cu_stream *s, void *dst, const void *src, size_t n)
{
	CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s->s));
	return 0;
}
