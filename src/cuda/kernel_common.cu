/* kernel_common.cu: what every CUDA kernel file uses beside its own
 * kernels: the status checks that name the node a kernel runs for
 * (remat__kctx_label), the cuBLAS workspace, and the bf16 policy's
 * conversion and accumulation on the stream. The backend (backend.cu)
 * calls the kernels and these; neither these nor the kernels call the
 * backend.
 */
#include "cuda-impl.h"

#include <stdio.h>

extern "C" remat_status remat__cu_rt_ok(cudaError_t st, const remat__kctx *k, const char *call) {
    if (st == cudaSuccess) return REMAT_OK;
    char lb[128];
    return remat__err(REMAT_INTERNAL, "%s: %s failed: %s (%s)", remat__kctx_label(k, lb, sizeof lb), call,
                      cudaGetErrorString(st), cudaGetErrorName(st));
}

extern "C" remat_status remat__cu_launched(const remat__kctx *k, const char *kernel) {
    return remat__cu_rt_ok(cudaGetLastError(), k, kernel);
}

extern "C" remat_status remat__cu_blas_ok(cublasStatus_t st, const remat__kctx *k, const char *call) {
    if (st == CUBLAS_STATUS_SUCCESS) return REMAT_OK;
    char lb[128];
    return remat__err(REMAT_INTERNAL, "%s: %s failed: %s (%s)", remat__kctx_label(k, lb, sizeof lb), call,
                      cublasGetStatusString(st), cublasGetStatusName(st));
}

extern "C" remat_status remat__cu_dnn_ok(cudnnStatus_t st, const remat__kctx *k, const char *call) {
    if (st == CUDNN_STATUS_SUCCESS) return REMAT_OK;
    char lb[128];
    return remat__err(REMAT_INTERNAL, "%s: %s failed: %s", remat__kctx_label(k, lb, sizeof lb), call,
                      cudnnGetErrorString(st));
}

extern "C" remat_status remat__cuda_blas_ws(const remat__kctx *k, size_t bytes) {
    remat__cuda *cu = remat__cu(k);
    return remat__cu_blas_ok(cublasSetWorkspace(cu->blas, bytes ? k->ws : NULL, bytes), k, "cublasSetWorkspace");
}

/* ---------------------------------------------------- bf16 on the stream */

/* The bf16 policy's conversions (core/bf16.h, the CPU's arithmetic, bit for
 * bit): one element per thread, grid-stride. */
static __global__ void convert_kernel(void *dst, const void *src, int64_t n, int kind) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        remat__convert_range(dst, src, i, i + 1, (remat__cvt)kind);
}

extern "C" remat_status remat__cuda_convert_on(remat__cuda *cu, const remat__kctx *k, void *dst, const void *src,
                                               int64_t n, remat__cvt kind) {
    if (n <= 0) return REMAT_OK;
    convert_kernel<<<remat__cu_blocks(cu, n), REMAT__CU_THREADS, 0, cu->stream>>>(dst, src, n, (int)kind);
    return remat__cu_launched(k, "convert_kernel");
}

extern "C" remat_status remat__cuda_convert(const remat__kctx *k, void *dst, const void *src, int64_t n,
                                            remat__cvt kind) {
    return remat__cuda_convert_on(remat__cu(k), k, dst, src, n, kind);
}

static __global__ void add16_kernel(void *d, int d16, const uint16_t *__restrict__ t, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = remat__f32_of(t[i]);
        if (d16) {
            uint16_t *b = (uint16_t *)d;
            b[i] = remat__bf16_of(remat__f32_of(b[i]) + v);
        } else {
            ((float *)d)[i] += v;
        }
    }
}

extern "C" remat_status remat__cuda_add16(const remat__kctx *k, void *d, int d16, const uint16_t *t, int64_t n) {
    remat__cuda *cu = remat__cu(k);
    if (n <= 0) return REMAT_OK;
    add16_kernel<<<remat__cu_blocks(cu, n), REMAT__CU_THREADS, 0, cu->stream>>>(d, d16, t, n);
    return remat__cu_launched(k, "add16_kernel");
}
