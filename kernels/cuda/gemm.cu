// gemm.cu - matrix products through cuBLAS (the only file that calls it)
// and the conversion of F32 activations into the weights' element type.
//
// Layout: weights w [n, k] and inputs xh [m, k] are row-major, outputs
// y [m, n] row-major F32.  In cuBLAS's column-major terms w is a k x n
// matrix with leading dimension ldw, so y^T = op(w) . xh^T is one
// cublasGemmEx(transa = T, transb = N, m = n, n = rows, k = k) with
// lda = ldw, ldb = ldx, ldc = n.
//
// Why fixed-shape calls: cuBLAS chooses its kernel (tile sizes, split-K,
// stream-K) from the problem's shape, strides, alignment and workspace,
// and different kernels sum the k products in different orders.  Calling
// it with one shape per weight, CU_GEMM_ROWS rows at a time, with the
// same strides and 256-byte aligned pointers, makes every call for a
// weight run the same kernel; that kernel's arithmetic for an output
// element involves only its own input row, so a row's result is the same
// whatever rows share the step.  cuBLAS is deterministic run to run on one
// stream with a workspace of its own (cublasSetWorkspace), which is how
// the handle is set up.  The cost is the unused rows of the last call of
// a step (zeros), and the weights read once per CU_GEMM_ROWS rows.
//
// cuBLAS is loaded at run time (dlopen) when the first handle is made, not
// linked: a CPU-only run never maps its libraries (well over 100 MiB of
// resident pages once relocated) and the programs start on machines that
// have no cuBLAS at all.
#include "cuda_common.cuh"

#include <cublas_api.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define CB_STR_(x) #x
#define CB_STR(x) CB_STR_(x)
#define CB_SONAME "libcublas.so." CB_STR(CUBLAS_VER_MAJOR)

// The cuBLAS entry points this file uses, resolved by cb_load().
static struct {
	decltype(&cublasCreate_v2) create;
	decltype(&cublasDestroy_v2) destroy;
	decltype(&cublasSetStream_v2) set_stream;
	decltype(&cublasSetWorkspace_v2) set_workspace;
	decltype(&cublasSetMathMode) set_math_mode;
	decltype(&cublasSetPointerMode_v2) set_pointer_mode;
	// cublasGemmEx is overloaded in C++: the C entry point's type.
	cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t,
	    cublasOperation_t, int, int, int, const void *, const void *,
	    cudaDataType, int, const void *, cudaDataType, int, const void *,
	    void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
	decltype(&cublasGetStatusString) status_string;
} cb;
static int cb_status = 1;	// 1 not tried, 0 loaded, -ENOENT failed
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

static void
cb_load_once(void)
{
#ifdef CP_CUDA_LIBDIR
	static const char *const names[] = { CB_SONAME,
	    CP_CUDA_LIBDIR "/" CB_SONAME };
#else
	static const char *const names[] = { CB_SONAME };
#endif
	void *h = NULL;

	for (size_t i = 0; h == NULL && i < sizeof(names) / sizeof(*names);
	    i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "cuda: cannot load %s: %s\n", CB_SONAME,
		    dlerror());
		cb_status = -ENOENT;
		return;
	}
#define CB_SYM(field, name)						\
	if ((*(void **)&cb.field = dlsym(h, name)) == NULL) {		\
		fprintf(stderr, "cuda: %s lacks %s\n", CB_SONAME, name);	\
		cb_status = -ENOENT;					\
		return;							\
	}
	CB_SYM(create, "cublasCreate_v2");
	CB_SYM(destroy, "cublasDestroy_v2");
	CB_SYM(set_stream, "cublasSetStream_v2");
	CB_SYM(set_workspace, "cublasSetWorkspace_v2");
	CB_SYM(set_math_mode, "cublasSetMathMode");
	CB_SYM(set_pointer_mode, "cublasSetPointerMode_v2");
	CB_SYM(gemm_ex, "cublasGemmEx");
	CB_SYM(status_string, "cublasGetStatusString");
#undef CB_SYM
	cb_status = 0;
}

// 0 once cuBLAS is loaded, -ENOENT (logged) when it cannot be.
static int
cb_load(void)
{
	pthread_once(&cb_once, cb_load_once);
	return cb_status;
}

#define CONVERT_THREADS 256
#define CONVERT_MAX_BLOCKS 65535u

struct cu_gemm {
	cublasHandle_t h;
	cudaStream_t s;
	void *ws;		// cuBLAS workspace, device
};

static int
cublas_check(cublasStatus_t st, const char *file, int line, const char *expr)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return 0;
	fprintf(stderr, "cuda: %s:%d: %s: %s\n", file, line, expr,
	    cb.status_string(st));
	return -EIO;
}

#define CUBLAS_TRY(call) cublas_check((call), __FILE__, __LINE__, #call)
#define CUBLAS_CHECK(call)						\
	do {								\
		int cb_rc_ = CUBLAS_TRY(call);				\
		if (cb_rc_ < 0)						\
			return cb_rc_;					\
	} while (0)

static cudaDataType_t
gemm_cuda_type(enum cu_dtype dt)
{
	switch (dt) {
	case CU_F16:
		return CUDA_R_16F;
	case CU_BF16:
		return CUDA_R_16BF;
	default:
		return CUDA_R_32F;
	}
}

static bool
gemm_aligned(const void *p)
{
	return ((uintptr_t)p & 255) == 0;
}

extern "C" int
cu_gemm_new(struct cu_stream *s, size_t ws_bytes, struct cu_gemm **out)
{
	struct cu_gemm *g;
	int rc;

	*out = NULL;
	if ((rc = cb_load()) < 0)
		return rc;
	if ((g = (struct cu_gemm *)calloc(1, sizeof(*g))) == NULL)
		return -ENOMEM;
	g->s = s->s;
	if ((rc = CUBLAS_TRY(cb.create(&g->h))) < 0) {
		g->h = NULL;
		goto err;
	}
	if ((rc = cu_malloc(ws_bytes, &g->ws)) < 0)
		goto err;
	// Default math keeps F32 products in F32 (no TF32); F16 and BF16
	// inputs use tensor cores with F32 accumulation.
	if ((rc = CUBLAS_TRY(cb.set_stream(g->h, g->s))) < 0 ||
	    (rc = CUBLAS_TRY(cb.set_workspace(g->h, g->ws, ws_bytes))) < 0 ||
	    (rc = CUBLAS_TRY(cb.set_math_mode(g->h, (cublasMath_t)
	    (CUBLAS_DEFAULT_MATH |
	    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)))) < 0 ||
	    (rc = CUBLAS_TRY(cb.set_pointer_mode(g->h,
	    CUBLAS_POINTER_MODE_HOST))) < 0)
		goto err;
	*out = g;
	return 0;
err:
	cu_gemm_free(g);
	return rc;
}

extern "C" void
cu_gemm_free(struct cu_gemm *g)
{
	if (g == NULL)
		return;
	if (g->h != NULL)
		(void)CUBLAS_TRY(cb.destroy(g->h));
	cu_free(g->ws);
	free(g);
}

template <typename T>
__global__ void
convert_kernel(const float *__restrict__ x, int ldx, int m, int k,
    T *__restrict__ xh, int ldh, int m_pad)
{
	size_t total = (size_t)m_pad * (size_t)ldh;
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	    i < total; i += stride) {
		int r = (int)(i / (size_t)ldh), c = (int)(i % (size_t)ldh);
		float v = 0.0f;

		if (r < m && c < k)
			v = x[(size_t)r * (size_t)ldx + (size_t)c];
		xh[i] = cu_from_f32<T>(v);
	}
}

extern "C" int
cu_convert(struct cu_stream *s, const float *x, int ldx, int m, int k,
    enum cu_dtype dt, void *xh, int ldh, int m_pad)
{
	size_t total = (size_t)m_pad * (size_t)ldh;
	unsigned int nb;

	if (m < 0 || k < 1 || ldx < k || ldh < k || m_pad < m ||
	    ldh % CU_LD_ALIGN != 0)
		return -EINVAL;
	if (total == 0)
		return 0;
	nb = cu_blocks(total, CONVERT_THREADS, CONVERT_MAX_BLOCKS);
	switch (dt) {
	case CU_F16:
		convert_kernel<__half><<<nb, CONVERT_THREADS, 0, s->s>>>(x, ldx,
		    m, k, (__half *)xh, ldh, m_pad);
		break;
	case CU_BF16:
		convert_kernel<__nv_bfloat16><<<nb, CONVERT_THREADS, 0, s->s>>>(
		    x, ldx, m, k, (__nv_bfloat16 *)xh, ldh, m_pad);
		break;
	case CU_F32:
		convert_kernel<float><<<nb, CONVERT_THREADS, 0, s->s>>>(x, ldx,
		    m, k, (float *)xh, ldh, m_pad);
		break;
	default:
		return -EINVAL;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int
cu_gemm(struct cu_gemm *g, const void *w, enum cu_dtype dt, int n, int k,
    int ldw, const void *xh, int ldx, int m, float *y)
{
	const float one = 1.0f, zero = 0.0f;
	cudaDataType_t ct = gemm_cuda_type(dt);
	size_t es = cu_dtype_size(dt);
	int r0;

	if (n < 1 || k < 1 || m < 0 || ldw < k || ldx < k ||
	    ldw % CU_LD_ALIGN != 0 || ldx % CU_LD_ALIGN != 0 ||
	    !gemm_aligned(w) || !gemm_aligned(xh) || !gemm_aligned(y))
		return -EINVAL;
	for (r0 = 0; r0 < m; r0 += CU_GEMM_ROWS) {
		// Offsets keep 256-byte alignment: r0 * ldx * es is a multiple
		// of 64 * 8 * 2 bytes, r0 * n * 4 one of 256.
		const char *xb = (const char *)xh + (size_t)r0 * (size_t)ldx * es;
		float *yb = y + (size_t)r0 * (size_t)n;

		CUBLAS_CHECK(cb.gemm_ex(g->h, CUBLAS_OP_T, CUBLAS_OP_N, n,
		    CU_GEMM_ROWS, k, &one, w, ct, ldw, xb, ct, ldx, &zero, yb,
		    CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	}
	return 0;
}
