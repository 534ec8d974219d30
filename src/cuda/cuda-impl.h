/* cuda-impl.h: what the CUDA backend's files share (CUDA C++, built by
 * nvcc into libremat when REMAT_HAVE_CUDA).
 *
 * The backend (backend.cu) owns one remat__cuda per session: a device, a
 * stream on which every kernel of the session is enqueued in schedule
 * order, and cuBLAS and cuDNN handles bound to that stream. Kernel files
 * (k_*.cu) define one remat__dev_kernels per op, remat__cuda_<name>, the
 * entry the op table points at (remat-impl.h).
 *
 * Rules every kernel keeps (they are what the promises rest on):
 * - Deterministic by construction: no floating-point atomics; every
 *   reduction runs in one fixed order that depends on the shapes only
 *   (per-block partial sums combined in index order, never by arrival;
 *   the warp and block sums are reduce.cuh's, each with its one order).
 * - No allocation: scratch memory is the planned workspace k->ws, of the
 *   bytes the op's workspace function returned for that node.
 * - No host synchronization, no cudaMalloc, no managed memory.
 * - cuBLAS users set the handle's workspace to their own planned bytes
 *   (remat__cuda_blas_ws) before every call: the handle otherwise keeps a
 *   pointer into memory that the plan has given to another value.
 * - TF32 only when the session asked for it (cu->tf32): cuBLAS math mode
 *   and cuDNN math type follow it (cuDNN's CUDNN_DEFAULT_MATH allows TF32
 *   on Ampere and later, so off means CUDNN_FMA_MATH).
 */
#ifndef REMAT_CUDA_IMPL_H
#define REMAT_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "../remat-impl.h"
}
#include "../core/bf16.h"

struct remat__cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    int tf32;             /* TF32 tensor-core math allowed (default off) */
    int least_ws;         /* convolutions: the least-workspace algorithms (k_conv.cu) */
    int conv16_nhwc;      /* bf16 convolutions on channels-last copies (REMAT_CUDA_CONV16=nhwc, k_conv.cu) */
    int sms;              /* multiprocessors of the device */
    const remat_graph *g; /* the session's graph (per-node caches index it) */
    void *conv;           /* k_conv.cu's per-node algorithm cache, or NULL */
};
typedef struct remat__cuda remat__cuda;

static inline remat__cuda *remat__cu(const remat__kctx *k) { return (remat__cuda *)k->dev; }

/* Threads per block for elementwise kernels, and a grid for n elements
 * with grid-stride loops (at most 32 blocks per multiprocessor). */
#define REMAT__CU_THREADS 256
static inline unsigned remat__cu_blocks(const remat__cuda *cu, int64_t n) {
    int64_t b = (n + REMAT__CU_THREADS - 1) / REMAT__CU_THREADS, cap = (int64_t)cu->sms * 32;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

extern "C" {
/* kernel_common.cu. After a launch: REMAT_OK, or REMAT_INTERNAL naming the node's op and
 * label and the kernel (cudaGetLastError; it does not synchronize). */
remat_status remat__cu_launched(const remat__kctx *k, const char *kernel);
/* A cuBLAS / cuDNN / CUDA runtime status: REMAT_OK, or REMAT_INTERNAL
 * naming the node (k may be NULL), the call and the library's message. */
remat_status remat__cu_blas_ok(cublasStatus_t st, const remat__kctx *k, const char *call);
remat_status remat__cu_dnn_ok(cudnnStatus_t st, const remat__kctx *k, const char *call);
remat_status remat__cu_rt_ok(cudaError_t st, const remat__kctx *k, const char *call);
/* Points the cuBLAS handle at this kernel's workspace (k->ws, bytes) and
 * sets its math mode from cu->tf32; call before every cuBLAS call. */
remat_status remat__cuda_blas_ws(const remat__kctx *k, size_t bytes);
/* The bf16 policy's conversion of n elements (core/bf16.h, the CPU's
 * arithmetic bit for bit), enqueued on the stream: what the native bf16
 * kernels round their weights and add their gradients with. */
remat_status remat__cuda_convert(const remat__kctx *k, void *dst, const void *src, int64_t n, remat__cvt kind);
/* The same on cu's stream for the backend's own conversions (k NULL: an
 * error names the backend, not a node). */
remat_status remat__cuda_convert_on(remat__cuda *cu, const remat__kctx *k, void *dst, const void *src, int64_t n,
                                    remat__cvt kind);
/* d (n) += t (n), t bf16 (a product's output, rounded already): d float32
 * (d += t), or (d16) bf16 (d = bf16(d + t) in float32): what the native
 * bf16 products add their gradients with, as the views' accumulation. */
remat_status remat__cuda_add16(const remat__kctx *k, void *d, int d16, const uint16_t *t, int64_t n);
/* Frees k_conv.cu's per-node cache (backend teardown). */
void remat__cuda_conv_release(remat__cuda *cu);

/* Optimizer updates (k_optim.cu), enqueued on cu->stream, the same rules
 * as the CPU's (src/cpu/cpu.c): SGD with momentum buffer b (NULL: no
 * momentum), `first` the first update; AdamW at step t >= 1. */
remat_status remat__cuda_sgd(remat__cuda *cu, const remat_optim_opts *o, int first, int64_t n, float *w, const float *g,
                             float *b);
remat_status remat__cuda_adamw(remat__cuda *cu, const remat_optim_opts *o, int64_t t, int64_t n, float *w,
                               const float *g, float *m, float *v);
}

/* Checks inside kernel functions: return the status on failure. */
#define REMAT__CU_TRY(expr)                                                                                            \
    do {                                                                                                               \
        remat_status remat__st_ = (expr);                                                                              \
        if (remat__st_ != REMAT_OK) return remat__st_;                                                                 \
    } while (0)

#endif
