/* k_optim.cu: the optimizer updates on the GPU, SGD and AdamW.
 *
 * Elementwise, with the CPU's arithmetic (src/cpu/cpu.c) in its order:
 * every product is rounded before it is added (__fmul_rn / __fadd_rn, so
 * that nvcc cannot fuse them into FMAs the CPU build never makes), and the
 * loop-invariant scalars (1 - dampening, 1 - lr wd, the bias corrections
 * with powf and sqrtf) are computed here on the host in float, as the
 * CPU computes them. The updates are therefore the CPU's bits, element
 * for element (sqrt and division are correctly rounded on both).
 *
 * Each thread updates four elements at a time (float4) when every pointer
 * is 16-byte aligned, then the last n % 4 one at a time.
 */
#include "cuda-impl.h"

#include <math.h>

static __device__ __forceinline__ int64_t opt_tid(void) { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ __forceinline__ int64_t opt_stride(void) { return (int64_t)gridDim.x * blockDim.x; }

static int opt_aligned(const void *p) { return p == NULL || ((uintptr_t)p & 15) == 0; }

/* ------------------------------------------------------------------- SGD */

typedef struct {
    float wd, momentum, one_m_damp, lr; /* one_m_damp = 1 - dampening */
    int nesterov, first;
} sgd_args;

/* torch.optim.SGD, cpu.c's sgd(): g += wd w; b = first ? g : mu b +
 * (1 - dampening) g; g = nesterov ? g + mu b : b; w -= lr g. b may be NULL
 * (no momentum). */
static __device__ __forceinline__ void sgd1(float &w, float grad, float *b, const sgd_args &a) {
    float g = grad;
    if (a.wd != 0.0f) g = __fadd_rn(g, __fmul_rn(a.wd, w));
    if (b) {
        *b = a.first ? g : __fadd_rn(__fmul_rn(a.momentum, *b), __fmul_rn(a.one_m_damp, g));
        g = a.nesterov ? __fadd_rn(g, __fmul_rn(a.momentum, *b)) : *b;
    }
    w = __fsub_rn(w, __fmul_rn(a.lr, g));
}

static __global__ void sgd_kernel(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ b, int64_t n,
                                  int64_t n4, sgd_args a) {
    for (int64_t q = opt_tid(); q < n4; q += opt_stride()) {
        float4 wv = ((float4 *)w)[q], gv = ((const float4 *)g)[q], bv;
        if (b) bv = ((float4 *)b)[q];
        sgd1(wv.x, gv.x, b ? &bv.x : NULL, a);
        sgd1(wv.y, gv.y, b ? &bv.y : NULL, a);
        sgd1(wv.z, gv.z, b ? &bv.z : NULL, a);
        sgd1(wv.w, gv.w, b ? &bv.w : NULL, a);
        ((float4 *)w)[q] = wv;
        if (b) ((float4 *)b)[q] = bv;
    }
    for (int64_t i = 4 * n4 + opt_tid(); i < n; i += opt_stride()) {
        float wi = w[i];
        sgd1(wi, g[i], b ? &b[i] : NULL, a);
        w[i] = wi;
    }
}

/* w (n) -= the step from gradient g (n) and momentum buffer b (n, or NULL
 * without momentum); `first`: the first update (b = g). */
extern "C" remat_status remat__cuda_sgd(remat__cuda *cu, const remat_optim_opts *o, int first, int64_t n, float *w,
                                        const float *g, float *b) {
    if (n <= 0) return REMAT_OK;
    sgd_args a;
    a.wd = o->weight_decay;
    a.momentum = o->momentum;
    a.one_m_damp = 1.0f - o->dampening;
    a.lr = o->lr;
    a.nesterov = o->nesterov != 0;
    a.first = first != 0;
    int64_t n4 = opt_aligned(w) && opt_aligned(g) && opt_aligned(b) ? n / 4 : 0;
    sgd_kernel<<<remat__cu_blocks(cu, n - 3 * n4), REMAT__CU_THREADS, 0, cu->stream>>>(w, g, b, n, n4, a);
    return remat__cu_rt_ok(cudaGetLastError(), NULL, "sgd_kernel");
}

/* ----------------------------------------------------------------- AdamW */

typedef struct {
    float decay; /* 1 - lr wd */
    float beta2;
    float one_m_b1;  /* 1 - beta1 */
    float one_m_b2;  /* 1 - beta2 */
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float eps;
} adamw_args;

/* torch.optim.AdamW, cpu.c's adamw(): w *= 1 - lr wd; m += (g - m)(1 -
 * b1); v = b2 v + (1 - b2) g g; w -= step_size m / (sqrt(v) / bc2_sqrt +
 * eps). */
static __device__ __forceinline__ void adamw1(float &w, float g, float &m, float &v, const adamw_args &a) {
    w = __fmul_rn(w, a.decay);
    m = __fadd_rn(m, __fmul_rn(__fsub_rn(g, m), a.one_m_b1));
    v = __fadd_rn(__fmul_rn(v, a.beta2), __fmul_rn(__fmul_rn(a.one_m_b2, g), g));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2_sqrt), a.eps);
    w = __fsub_rn(w, __fmul_rn(a.step_size, __fdiv_rn(m, denom)));
}

static __global__ void adamw_kernel(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ m,
                                    float *__restrict__ v, int64_t n, int64_t n4, adamw_args a) {
    for (int64_t q = opt_tid(); q < n4; q += opt_stride()) {
        float4 wv = ((float4 *)w)[q], gv = ((const float4 *)g)[q], mv = ((float4 *)m)[q], vv = ((float4 *)v)[q];
        adamw1(wv.x, gv.x, mv.x, vv.x, a);
        adamw1(wv.y, gv.y, mv.y, vv.y, a);
        adamw1(wv.z, gv.z, mv.z, vv.z, a);
        adamw1(wv.w, gv.w, mv.w, vv.w, a);
        ((float4 *)w)[q] = wv, ((float4 *)m)[q] = mv, ((float4 *)v)[q] = vv;
    }
    for (int64_t i = 4 * n4 + opt_tid(); i < n; i += opt_stride()) {
        float wi = w[i], mi = m[i], vi = v[i];
        adamw1(wi, g[i], mi, vi, a);
        w[i] = wi, m[i] = mi, v[i] = vi;
    }
}

/* Update t (>= 1) of w (n) from gradient g (n), with moments m and v (n). */
extern "C" remat_status remat__cuda_adamw(remat__cuda *cu, const remat_optim_opts *o, int64_t t, int64_t n, float *w,
                                          const float *g, float *m, float *v) {
    if (n <= 0) return REMAT_OK;
    /* cpu.c's scalars, in float on the host (the same libm powf) */
    float bc1 = 1.0f - powf(o->beta1, (float)t);
    float bc2 = 1.0f - powf(o->beta2, (float)t);
    adamw_args a;
    a.decay = 1.0f - o->lr * o->weight_decay;
    a.beta2 = o->beta2;
    a.one_m_b1 = 1.0f - o->beta1;
    a.one_m_b2 = 1.0f - o->beta2;
    a.step_size = o->lr / bc1;
    a.bc2_sqrt = sqrtf(bc2);
    a.eps = o->eps;
    int64_t n4 = opt_aligned(w) && opt_aligned(g) && opt_aligned(m) && opt_aligned(v) ? n / 4 : 0;
    adamw_kernel<<<remat__cu_blocks(cu, n - 3 * n4), REMAT__CU_THREADS, 0, cu->stream>>>(w, g, m, v, n, n4, a);
    return remat__cu_rt_ok(cudaGetLastError(), NULL, "adamw_kernel");
}
