// cuda_probe.cu - device discovery and a kernel round trip, exported to C.
#include <cuda_runtime.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "cuda_probe.h"
}

extern "C" int
cuda_probe_count(char *why, size_t why_len)
{
	int n = 0;
	cudaError_t err = cudaGetDeviceCount(&n);

	if (err != cudaSuccess) {
		if (why != NULL && why_len > 0)
			snprintf(why, why_len, "%s", cudaGetErrorString(err));
		cudaGetLastError();	/* clear the sticky error state */
		return 0;
	}
	if (n == 0 && why != NULL && why_len > 0)
		snprintf(why, why_len, "no CUDA device");
	return n;
}

extern "C" int
cuda_probe_device(int dev, struct cuda_device_info *out)
{
	cudaDeviceProp prop;
	size_t free_b = 0, total_b = 0;

	if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
		return -ENODEV;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", prop.name);
	out->major = prop.major;
	out->minor = prop.minor;
	if (cudaSetDevice(dev) != cudaSuccess ||
	    cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
		return -EIO;
	out->total_mem = total_b;
	out->free_mem = free_b;
	return 0;
}

// y[i] = a * x[i] + i: enough to prove that code for this device was built.
__global__ void
probe_kernel(float *y, const float *x, float a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * x[i] + (float)i;
}

extern "C" int
cuda_probe_selftest(int dev)
{
	enum { N = 1000 };
	float hx[N], hy[N];
	float *dx = NULL, *dy = NULL;
	int ret = -EIO;

	for (int i = 0; i < N; i++)
		hx[i] = (float)(i % 7);
	if (cudaSetDevice(dev) != cudaSuccess ||
	    cudaMalloc(&dx, sizeof(hx)) != cudaSuccess ||
	    cudaMalloc(&dy, sizeof(hy)) != cudaSuccess ||
	    cudaMemcpy(dx, hx, sizeof(hx), cudaMemcpyHostToDevice) != cudaSuccess)
		goto out;
	probe_kernel<<<(N + 255) / 256, 256>>>(dy, dx, 3.0f, N);
	if (cudaGetLastError() != cudaSuccess ||
	    cudaMemcpy(hy, dy, sizeof(hy), cudaMemcpyDeviceToHost) != cudaSuccess)
		goto out;
	ret = 0;
	for (int i = 0; i < N; i++)
		if (hy[i] != 3.0f * hx[i] + (float)i)
			ret = -EIO;
out:
	cudaFree(dx);
	cudaFree(dy);
	return ret;
}

extern "C" int
cuda_probe_usable(char *why, size_t why_len)
{
	int n = cuda_probe_count(why, why_len);

	if (n > 0 && cuda_probe_selftest(0) != 0) {
		if (why != NULL && why_len > 0)
			snprintf(why, why_len, "device 0 fails the self-test");
		return 0;
	}
	return n;
}
