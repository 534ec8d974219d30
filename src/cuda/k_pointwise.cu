/* k_pointwise.cu: relu, add, mul, dropout, gelu and add_broadcast on the GPU.
 *
 * Each op is the CPU's (src/ops/elementwise.c, gelu.c, tensor_ops.c)
 * element by element, with the same floating-point operations in the same
 * order: products that the CPU rounds before adding are written with
 * __fmul_rn / __fadd_rn so that nvcc cannot fuse them into one FMA (the
 * CPU build never contracts), which keeps relu, add, mul, dropout and
 * add_broadcast's forward bitwise equal to the CPU's; GELU differs only by
 * the device's erff/expf.
 *
 * Elementwise kernels walk the first n4 = n / 4 groups of four as float4
 * (every buffer is 256-byte aligned; n4 = 0 when a pointer is not 16-byte
 * aligned), then the last n - 4 n4 elements one at a time, in grid-stride
 * loops. Backward accumulates into din[i] (+=); two din[] may be one
 * buffer (add(x, x), mul(x, x)), so each thread finishes one gradient's
 * read-modify-write before the next one's, as the CPU's loops do, and no
 * din pointer is __restrict__.
 *
 * Dropout regenerates the CPU's mask: element i keeps its value iff word
 * g % 4 of Philox at counter (g / 4, node, step, stream ^ (g / 4) >> 32),
 * key (seed low, seed high), satisfies (r >> 8) >= ceil(p 2^24), where
 * g = kctx.elem0 + i is the element's index in the whole tensor (the bf16
 * views run a large dropout slice by slice, each slice's elem0 its first
 * element). One thread per four elements, one Philox call each, when
 * elem0 % 4 == 0; nothing is saved.
 *
 * add_broadcast's db (M) is a sum over the R leading rows of dy (R, M):
 * P chunks of C consecutive rows each summed in double by one thread per
 * column (and dx += dy fused into that pass), the P partials (P, M) in the
 * workspace, then a second kernel adds them: per column, 8 runs of
 * consecutive chunks each in chunk order, then the 8 run sums in order.
 * P and C depend on (R, M) only, so the order of every sum is fixed by
 * the shape.
 *
 * Under the bf16 policy relu, add, mul, dropout and gelu take their
 * values in their stored dtypes (pw16.cuh): each op's functor below is
 * its float32 kernel's element functions, so the bits are the float32
 * views'. add_broadcast runs on views.
 */
#include "cuda-impl.h"
#include "pw16.cuh"
#include "reduce.cuh"

#include <math.h>

#include <type_traits>

#define DROPOUT_STREAM 0x64726f70u /* elementwise.c's "drop": the same counters */

/* -------------------------------------------------------------- helpers */

static __device__ __forceinline__ int64_t pw_tid(void) { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ __forceinline__ int64_t pw_stride(void) { return (int64_t)gridDim.x * blockDim.x; }

/* Quads [0, n4) as float4, then elements [4 n4, n) one by one. */
#define PW_QUADS(q, n4) for (int64_t q = pw_tid(); q < (n4); q += pw_stride())
#define PW_TAIL(i, n, n4) for (int64_t i = 4 * (n4) + pw_tid(); i < (n); i += pw_stride())

static int pw_aligned(const void *p) { return p == NULL || ((uintptr_t)p & 15) == 0; }

/* Float4 groups for n elements when every pointer given is 16-byte
 * aligned, else 0 (all elements go through the scalar loop). */
static int64_t pw_quads(int64_t n, const void *a, const void *b, const void *c, const void *d) {
    return pw_aligned(a) && pw_aligned(b) && pw_aligned(c) && pw_aligned(d) ? n / 4 : 0;
}

/* Blocks for n elements of which n4 quads: one thread per work item. */
static unsigned pw_blocks(const remat__cuda *cu, int64_t n, int64_t n4) { return remat__cu_blocks(cu, n - 3 * n4); }

static int64_t pw_numel(const remat__kctx *k) { return remat__numel(&k->node->shape); }

/* dx (n) += dy (n): backward of add, dropout in eval mode. */
static __global__ void pw_acc_kernel(float *dx, const float *dy, int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 d = ld4(dx, q), g = ld4(dy, q);
        d.x = __fadd_rn(d.x, g.x), d.y = __fadd_rn(d.y, g.y), d.z = __fadd_rn(d.z, g.z), d.w = __fadd_rn(d.w, g.w);
        st4(dx, q, d);
    }
    PW_TAIL(i, n, n4) dx[i] = __fadd_rn(dx[i], dy[i]);
}

static remat_status pw_acc(const remat__kctx *k, float *dx, const float *dy, int64_t n) {
    remat__cuda *cu = remat__cu(k);
    int64_t n4 = pw_quads(n, dx, dy, NULL, NULL);
    pw_acc_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(dx, dy, n, n4);
    return remat__cu_launched(k, "pw_acc_kernel");
}

/* ------------------------------------------------------------------ relu */

/* NaN stays NaN (as PyTorch and the CPU kernel), x <= 0 (-0 too) gives +0. */
static __device__ __forceinline__ float relu1(float x) { return x <= 0.0f ? 0.0f : x; }
/* y > 0 exactly where x > 0; the gradient also passes where y is NaN, as
 * PyTorch's (y <= 0 ? 0 : g); adding -0 leaves d's bits as they are. */
static __device__ __forceinline__ float relu_grad1(float d, float y, float g) {
    return __fadd_rn(d, y <= 0.0f ? -0.0f : g);
}

static __global__ void relu_fwd_kernel(const float *__restrict__ x, float *__restrict__ y, int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 v = ld4(x, q);
        st4(y, q, make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w)));
    }
    PW_TAIL(i, n, n4) y[i] = relu1(x[i]);
}

static __global__ void relu_bwd_kernel(const float *__restrict__ y, const float *__restrict__ dy, float *dx, int64_t n,
                                       int64_t n4) {
    PW_QUADS(q, n4) {
        float4 v = ld4(y, q), g = ld4(dy, q), d = ld4(dx, q);
        d.x = relu_grad1(d.x, v.x, g.x), d.y = relu_grad1(d.y, v.y, g.y);
        d.z = relu_grad1(d.z, v.z, g.z), d.w = relu_grad1(d.w, v.w, g.w);
        st4(dx, q, d);
    }
    PW_TAIL(i, n, n4) dx[i] = relu_grad1(dx[i], y[i], dy[i]);
}

struct relu16 {
    __device__ float fwd(float a, float, int64_t) const { return relu1(a); }
    __device__ float grad(int, float d, float, float, float y, float g, int64_t) const { return relu_grad1(d, y, g); }
};

static remat_status relu_forward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, relu16(), 0, "pw16_fwd_kernel<relu>");
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data; // (n)
    float *y = (float *)k->out->data;               // (n)
    int64_t n = pw_numel(k), n4 = pw_quads(n, x, y, NULL, NULL);
    if (n == 0) return REMAT_OK;
    relu_fwd_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(x, y, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "relu_fwd_kernel"));
    return REMAT_OK;
}

/* Reads only the saved output. */
static remat_status relu_backward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, relu16(), 1, "pw16_bwd_kernel<relu>");
    remat__cuda *cu = remat__cu(k);
    const float *y = (const float *)k->out->data, *dy = k->dout; // (n)
    float *dx = k->din[0];                                       // (n)
    int64_t n = pw_numel(k), n4 = pw_quads(n, y, dy, dx, NULL);
    if (!dx || n == 0) return REMAT_OK;
    relu_bwd_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(y, dy, dx, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "relu_bwd_kernel"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_relu = {relu_forward, relu_backward, NULL, NULL, NULL, pw16_ws_dev};

/* ------------------------------------------------------------------- add */

static __global__ void add_fwd_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ y,
                                      int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 u = ld4(a, q), v = ld4(b, q);
        st4(y, q, make_float4(__fadd_rn(u.x, v.x), __fadd_rn(u.y, v.y), __fadd_rn(u.z, v.z), __fadd_rn(u.w, v.w)));
    }
    PW_TAIL(i, n, n4) y[i] = __fadd_rn(a[i], b[i]);
}

/* da += dy, then db += dy (either may be NULL; they may be one buffer). */
static __global__ void add_bwd_kernel(const float *__restrict__ dy, float *da, float *db, int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 g = ld4(dy, q);
        if (da) {
            float4 d = ld4(da, q);
            d.x = __fadd_rn(d.x, g.x), d.y = __fadd_rn(d.y, g.y), d.z = __fadd_rn(d.z, g.z), d.w = __fadd_rn(d.w, g.w);
            st4(da, q, d);
        }
        if (db) {
            float4 d = ld4(db, q);
            d.x = __fadd_rn(d.x, g.x), d.y = __fadd_rn(d.y, g.y), d.z = __fadd_rn(d.z, g.z), d.w = __fadd_rn(d.w, g.w);
            st4(db, q, d);
        }
    }
    PW_TAIL(i, n, n4) {
        float g = dy[i];
        if (da) da[i] = __fadd_rn(da[i], g);
        if (db) db[i] = __fadd_rn(db[i], g);
    }
}

struct add16 {
    __device__ float fwd(float a, float b, int64_t) const { return __fadd_rn(a, b); }
    __device__ float grad(int, float d, float, float, float, float g, int64_t) const { return __fadd_rn(d, g); }
};

static remat_status add_forward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, add16(), 0, "pw16_fwd_kernel<add>");
    remat__cuda *cu = remat__cu(k);
    const float *a = (const float *)k->in[0]->data, *b = (const float *)k->in[1]->data; // (n)
    float *y = (float *)k->out->data;                                                   // (n)
    int64_t n = pw_numel(k), n4 = pw_quads(n, a, b, y, NULL);
    if (n == 0) return REMAT_OK;
    add_fwd_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(a, b, y, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "add_fwd_kernel"));
    return REMAT_OK;
}

static remat_status add_backward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, add16(), 1, "pw16_bwd_kernel<add>");
    remat__cuda *cu = remat__cu(k);
    const float *dy = k->dout;              // (n)
    float *da = k->din[0], *db = k->din[1]; // (n) each, or NULL
    int64_t n = pw_numel(k), n4 = pw_quads(n, dy, da, db, NULL);
    if ((!da && !db) || n == 0) return REMAT_OK;
    add_bwd_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(dy, da, db, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "add_bwd_kernel"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_add = {add_forward, add_backward, NULL, NULL, NULL, pw16_ws_dev};

/* ------------------------------------------------------------------- mul */

static __global__ void mul_fwd_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ y,
                                      int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 u = ld4(a, q), v = ld4(b, q);
        st4(y, q, make_float4(__fmul_rn(u.x, v.x), __fmul_rn(u.y, v.y), __fmul_rn(u.z, v.z), __fmul_rn(u.w, v.w)));
    }
    PW_TAIL(i, n, n4) y[i] = __fmul_rn(a[i], b[i]);
}

/* d += g * o, the product rounded first as on the CPU. */
static __device__ __forceinline__ float4 mul_grad4(float4 d, float4 g, float4 o) {
    d.x = __fadd_rn(d.x, __fmul_rn(g.x, o.x)), d.y = __fadd_rn(d.y, __fmul_rn(g.y, o.y));
    d.z = __fadd_rn(d.z, __fmul_rn(g.z, o.z)), d.w = __fadd_rn(d.w, __fmul_rn(g.w, o.w));
    return d;
}

/* da += dy * b, then db += dy * a (either may be NULL; they may be one
 * buffer, and a and b one input). */
static __global__ void mul_bwd_kernel(const float *a, const float *b, const float *__restrict__ dy, float *da,
                                      float *db, int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 g = ld4(dy, q);
        if (da) st4(da, q, mul_grad4(ld4(da, q), g, ld4(b, q)));
        if (db) st4(db, q, mul_grad4(ld4(db, q), g, ld4(a, q)));
    }
    PW_TAIL(i, n, n4) {
        float g = dy[i];
        if (da) da[i] = __fadd_rn(da[i], __fmul_rn(g, b[i]));
        if (db) db[i] = __fadd_rn(db[i], __fmul_rn(g, a[i]));
    }
}

/* da += dy * b, db += dy * a, the product rounded first. */
struct mul16 {
    __device__ float fwd(float a, float b, int64_t) const { return __fmul_rn(a, b); }
    __device__ float grad(int j, float d, float a, float b, float, float g, int64_t) const {
        return __fadd_rn(d, __fmul_rn(g, j == 0 ? b : a));
    }
};

static remat_status mul_forward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, mul16(), 0, "pw16_fwd_kernel<mul>");
    remat__cuda *cu = remat__cu(k);
    const float *a = (const float *)k->in[0]->data, *b = (const float *)k->in[1]->data; // (n)
    float *y = (float *)k->out->data;                                                   // (n)
    int64_t n = pw_numel(k), n4 = pw_quads(n, a, b, y, NULL);
    if (n == 0) return REMAT_OK;
    mul_fwd_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(a, b, y, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "mul_fwd_kernel"));
    return REMAT_OK;
}

/* Both inputs are saved. */
static remat_status mul_backward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, mul16(), 1, "pw16_bwd_kernel<mul>");
    remat__cuda *cu = remat__cu(k);
    const float *a = (const float *)k->in[0]->data, *b = (const float *)k->in[1]->data, *dy = k->dout; // (n)
    float *da = k->din[0], *db = k->din[1];                                                            // (n) or NULL
    int64_t n = pw_numel(k);
    if ((!da && !db) || n == 0) return REMAT_OK;
    int64_t n4 = pw_aligned(a) && pw_aligned(b) ? pw_quads(n, dy, da, db, NULL) : 0;
    mul_bwd_kernel<<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(a, b, dy, da, db, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "mul_bwd_kernel"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_mul = {mul_forward, mul_backward, NULL, NULL, NULL, pw16_ws_dev};

/* --------------------------------------------------------------- dropout */

/* The mask's constants for one node and step. */
typedef struct {
    uint32_t t;  /* keep iff (r >> 8) >= t, t = ceil(p 2^24) */
    float scale; /* 1 / (1 - p), rounded in float as on the CPU */
    uint32_t node, step, k0, k1;
} drop_args;

/* The four words for elements 4q .. 4q + 3: remat__philox_x4's counter
 * for quad q (elementwise.c's dropout_apply). */
static __device__ __forceinline__ void drop_words(uint64_t q, const drop_args &a, uint32_t r[4]) {
    const uint32_t ctr[4] = {(uint32_t)q, a.node, a.step, DROPOUT_STREAM ^ (uint32_t)(q >> 32)};
    const uint32_t key[2] = {a.k0, a.k1};
    remat__philox(ctr, key, r);
}

/* Forward: y = keep ? x * scale : 0. Backward (BWD): dx += keep ? dy *
 * scale : -0. in is x or dy. */
template <bool BWD>
static __global__ void drop_kernel(const float *__restrict__ in, float *out, int64_t n, int64_t n4, drop_args a,
                                   int64_t e0) {
    PW_QUADS(q, n4) { /* n4 > 0 only when e0 % 4 == 0 */
        uint32_t r[4];
        drop_words((uint64_t)(q + e0 / 4), a, r);
        float4 v = ld4(in, q);
        float s0 = __fmul_rn(v.x, a.scale), s1 = __fmul_rn(v.y, a.scale);
        float s2 = __fmul_rn(v.z, a.scale), s3 = __fmul_rn(v.w, a.scale);
        bool k0 = (r[0] >> 8) >= a.t, k1 = (r[1] >> 8) >= a.t, k2 = (r[2] >> 8) >= a.t, k3 = (r[3] >> 8) >= a.t;
        if (BWD) {
            float4 d = ld4(out, q);
            d.x = __fadd_rn(d.x, k0 ? s0 : -0.0f), d.y = __fadd_rn(d.y, k1 ? s1 : -0.0f);
            d.z = __fadd_rn(d.z, k2 ? s2 : -0.0f), d.w = __fadd_rn(d.w, k3 ? s3 : -0.0f);
            st4(out, q, d);
        } else {
            st4(out, q, make_float4(k0 ? s0 : 0.0f, k1 ? s1 : 0.0f, k2 ? s2 : 0.0f, k3 ? s3 : 0.0f));
        }
    }
    PW_TAIL(i, n, n4) {
        uint32_t r[4];
        const uint64_t gi = (uint64_t)(i + e0);
        drop_words(gi >> 2, a, r);
        int j = (int)(gi & 3);
        uint32_t w = j == 0 ? r[0] : j == 1 ? r[1] : j == 2 ? r[2] : r[3]; /* no local array */
        float s = __fmul_rn(in[i], a.scale);
        bool keep = (w >> 8) >= a.t;
        if (BWD) out[i] = __fadd_rn(out[i], keep ? s : -0.0f);
        else out[i] = keep ? s : 0.0f;
    }
}

static drop_args drop_args_of(const remat__kctx *k) {
    float p = k->node->fattr[0];
    drop_args a;
    a.t = (uint32_t)ceil((double)p * 16777216.0);
    a.scale = 1.0f / (1.0f - p);
    a.node = (uint32_t)k->node_id;
    a.step = (uint32_t)k->step;
    a.k0 = (uint32_t)k->seed;
    a.k1 = (uint32_t)(k->seed >> 32);
    return a;
}

/* Element i of the tensor: in training with p > 0, y = keep ? x * scale
 * : 0 and dx += keep ? dy * scale : -0, the mask drop_kernel's; else a
 * copy, and dx += dy. */
struct drop16 {
    drop_args a;
    int64_t e0;
    bool on;
    __device__ bool keep(int64_t i) const {
        uint32_t r[4];
        const uint64_t gi = (uint64_t)(i + e0);
        drop_words(gi >> 2, a, r);
        int j = (int)(gi & 3);
        uint32_t w = j == 0 ? r[0] : j == 1 ? r[1] : j == 2 ? r[2] : r[3];
        return (w >> 8) >= a.t;
    }
    __device__ float fwd(float x, float, int64_t i) const {
        if (!on) return x;
        float s = __fmul_rn(x, a.scale);
        return keep(i) ? s : 0.0f;
    }
    __device__ float grad(int, float d, float, float, float, float g, int64_t i) const {
        if (!on) return __fadd_rn(d, g);
        float s = __fmul_rn(g, a.scale);
        return __fadd_rn(d, keep(i) ? s : -0.0f);
    }
};

static drop16 drop16_of(const remat__kctx *k) {
    drop16 op;
    op.a = drop_args_of(k);
    op.e0 = k->elem0;
    op.on = k->train && k->node->fattr[0] != 0.0f;
    return op;
}

static remat_status dropout_forward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, drop16_of(k), 0, "pw16_fwd_kernel<dropout>");
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data; // (n)
    float *y = (float *)k->out->data;               // (n)
    int64_t n = pw_numel(k);
    if (n == 0) return REMAT_OK;
    if (!k->train || k->node->fattr[0] == 0.0f)
        return remat__cu_rt_ok(cudaMemcpyAsync(y, x, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, cu->stream),
                               k, "cudaMemcpyAsync");
    int64_t n4 = k->elem0 % 4 == 0 ? pw_quads(n, x, y, NULL, NULL) : 0;
    drop_kernel<false>
        <<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(x, y, n, n4, drop_args_of(k), k->elem0);
    REMAT__CU_TRY(remat__cu_launched(k, "drop_kernel<fwd>"));
    return REMAT_OK;
}

/* Regenerates the forward's mask: nothing was saved. */
static remat_status dropout_backward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, drop16_of(k), 1, "pw16_bwd_kernel<dropout>");
    remat__cuda *cu = remat__cu(k);
    const float *dy = k->dout; // (n)
    float *dx = k->din[0];     // (n)
    int64_t n = pw_numel(k);
    if (!dx || n == 0) return REMAT_OK;
    if (!k->train || k->node->fattr[0] == 0.0f) return pw_acc(k, dx, dy, n);
    int64_t n4 = k->elem0 % 4 == 0 ? pw_quads(n, dy, dx, NULL, NULL) : 0;
    drop_kernel<true>
        <<<pw_blocks(cu, n, n4), REMAT__CU_THREADS, 0, cu->stream>>>(dy, dx, n, n4, drop_args_of(k), k->elem0);
    REMAT__CU_TRY(remat__cu_launched(k, "drop_kernel<bwd>"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_dropout = {dropout_forward, dropout_backward, NULL, NULL, NULL,
                                                           pw16_ws_dev};

/* ------------------------------------------------------------------ gelu */

/* gelu.c's constants and formulas, operation for operation. */
#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f
#define GELU_C 0.044715f

/* tanh form: u = sqrt(2/pi) (v + C v^3); 1 + exp(-2u), whose inverse is
 * the sigmoid s. Forward divides v by it (y = v / (1 + exp(-2u))), as
 * the CPU does, rather than multiplying by s. */
static __device__ __forceinline__ float gelu_den(float v) {
    float v3 = __fmul_rn(__fmul_rn(__fmul_rn(GELU_C, v), v), v);
    float u = __fmul_rn(SQRT_2_OVER_PI, __fadd_rn(v, v3));
    return __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, u)));
}

static __device__ __forceinline__ float gelu1(float v, bool tanh_form) {
    if (tanh_form) return __fdiv_rn(v, gelu_den(v));
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, erff(__fmul_rn(v, INV_SQRT_2))));
}

/* d + g * gelu'(v). */
static __device__ __forceinline__ float gelu_grad1(float d, float v, float g, bool tanh_form) {
    float dv;
    if (tanh_form) {
        float sg = __fdiv_rn(1.0f, gelu_den(v));
        /* sg + 2 v sg (1 - sg) sqrt(2/pi) (1 + 3 C v^2), left to right */
        float t = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(2.0f, v), sg), __fsub_rn(1.0f, sg)), SQRT_2_OVER_PI);
        float w = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * GELU_C, v), v));
        dv = __fadd_rn(sg, __fmul_rn(t, w));
    } else {
        /* (1 + erf(v / sqrt 2)) / 2 + v exp(-v^2 / 2) / sqrt(2 pi) */
        float a = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(v, INV_SQRT_2))));
        float b = __fmul_rn(__fmul_rn(v, expf(__fmul_rn(__fmul_rn(-0.5f, v), v))), INV_SQRT_2PI);
        dv = __fadd_rn(a, b);
    }
    return __fadd_rn(d, __fmul_rn(g, dv));
}

template <bool TANH>
static __global__ void gelu_fwd_kernel(const float *__restrict__ x, float *__restrict__ y, int64_t n, int64_t n4) {
    PW_QUADS(q, n4) {
        float4 v = ld4(x, q);
        st4(y, q, make_float4(gelu1(v.x, TANH), gelu1(v.y, TANH), gelu1(v.z, TANH), gelu1(v.w, TANH)));
    }
    PW_TAIL(i, n, n4) y[i] = gelu1(x[i], TANH);
}

template <bool TANH>
static __global__ void gelu_bwd_kernel(const float *__restrict__ x, const float *__restrict__ dy, float *dx, int64_t n,
                                       int64_t n4) {
    PW_QUADS(q, n4) {
        float4 v = ld4(x, q), g = ld4(dy, q), d = ld4(dx, q);
        d.x = gelu_grad1(d.x, v.x, g.x, TANH), d.y = gelu_grad1(d.y, v.y, g.y, TANH);
        d.z = gelu_grad1(d.z, v.z, g.z, TANH), d.w = gelu_grad1(d.w, v.w, g.w, TANH);
        st4(dx, q, d);
    }
    PW_TAIL(i, n, n4) dx[i] = gelu_grad1(dx[i], x[i], dy[i], TANH);
}

template <bool TANH> struct gelu16 {
    __device__ float fwd(float a, float, int64_t) const { return gelu1(a, TANH); }
    __device__ float grad(int, float d, float a, float, float, float g, int64_t) const {
        return gelu_grad1(d, a, g, TANH);
    }
};

static remat_status gelu_forward(const remat__kctx *k) {
    if (k->dt && k->node->iattr[0]) return pw16_run(k, gelu16<true>(), 0, "pw16_fwd_kernel<gelu tanh>");
    if (k->dt) return pw16_run(k, gelu16<false>(), 0, "pw16_fwd_kernel<gelu>");
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data; // (n)
    float *y = (float *)k->out->data;               // (n)
    int64_t n = pw_numel(k), n4 = pw_quads(n, x, y, NULL, NULL);
    if (n == 0) return REMAT_OK;
    unsigned nb = pw_blocks(cu, n, n4);
    if (k->node->iattr[0]) gelu_fwd_kernel<true><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(x, y, n, n4);
    else gelu_fwd_kernel<false><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(x, y, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "gelu_fwd_kernel"));
    return REMAT_OK;
}

/* Reads the saved input. */
static remat_status gelu_backward(const remat__kctx *k) {
    if (k->dt && k->node->iattr[0]) return pw16_run(k, gelu16<true>(), 1, "pw16_bwd_kernel<gelu tanh>");
    if (k->dt) return pw16_run(k, gelu16<false>(), 1, "pw16_bwd_kernel<gelu>");
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data, *dy = k->dout; // (n)
    float *dx = k->din[0];                                         // (n)
    int64_t n = pw_numel(k), n4 = pw_quads(n, x, dy, dx, NULL);
    if (!dx || n == 0) return REMAT_OK;
    unsigned nb = pw_blocks(cu, n, n4);
    if (k->node->iattr[0]) gelu_bwd_kernel<true><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(x, dy, dx, n, n4);
    else gelu_bwd_kernel<false><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(x, dy, dx, n, n4);
    REMAT__CU_TRY(remat__cu_launched(k, "gelu_bwd_kernel"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_gelu = {gelu_forward, gelu_backward, NULL, NULL, NULL, pw16_ws_dev};

/* --------------------------------------------------------- add_broadcast */

/* y (R, M) = x (R, M) + b (M), b repeated over the rows. I is the index
 * type: 32-bit when n < 2^31 (the column is an index modulo M). */
template <typename I>
static __global__ void addb_fwd_kernel(const float *__restrict__ x, const float *__restrict__ b, float *__restrict__ y,
                                       I n, I n4, I M) {
    const I tid = (I)blockIdx.x * blockDim.x + threadIdx.x, stride = (I)gridDim.x * blockDim.x;
    const I M4 = M / 4; /* n4 > 0 only when M % 4 == 0 */
    for (I q = tid; q < n4; q += stride) {
        float4 u = ld4(x, (int64_t)q), v = ld4(b, (int64_t)(q % M4));
        st4(y, (int64_t)q,
            make_float4(__fadd_rn(u.x, v.x), __fadd_rn(u.y, v.y), __fadd_rn(u.z, v.z), __fadd_rn(u.w, v.w)));
    }
    for (I i = 4 * n4 + tid; i < n; i += stride) y[i] = __fadd_rn(x[i], b[i % M]);
}

/* db's chunks: P chunks of C rows (the last may be shorter), from the
 * shape only: about 2^17 (chunk, column) sums, at most 1024 chunks. */
static void addb_chunks(int64_t R, int64_t M, int64_t *P, int64_t *C) {
    int64_t p = ((int64_t)1 << 17) / (M > 0 ? M : 1);
    if (p > 1024) p = 1024;
    if (p > R) p = R;
    if (p < 1) p = 1;
    int64_t c = R > 0 ? (R + p - 1) / p : 1;
    *C = c;
    *P = R > 0 ? (R + c - 1) / c : 1;
}

static void addb_dims(const remat_graph *g, const remat__node *n, int64_t *R, int64_t *M) {
    *M = remat__numel(remat__in_shape(g, n, 1));
    *R = *M > 0 ? remat__numel(&n->shape) / *M : 0;
}

/* Workspace: part (P, M) doubles when P > 1. */
static size_t addb_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    int64_t R, M, P, C;
    addb_dims(g, n, &R, &M);
    addb_chunks(R, M, &P, &C);
    return P > 1 ? (size_t)P * (size_t)M * sizeof(double) : 0;
}

/* Stage 1: thread (p, u) sums rows [p C, p C + C) of V columns from u V of
 * dy (R, M) in double, in row order, adding each dy to dx (R, M) on the
 * way (dx may be NULL). With one chunk it adds the sums to db (M) itself
 * (CPU: db[j] += (float)s[j]); otherwise it writes part (P, M). dx and
 * db are one buffer for add_broadcast(x, x) (R = 1): not __restrict__,
 * so db is read after dx's store, the CPU's order. Rows go ADDB_BATCH at
 * a time, all loads before any store: dx is not __restrict__, so the
 * compiler would not move a row's loads above the last row's store. */
#define ADDB_BATCH 4
template <int V>
static __global__ void addb_bwd_partial(const float *__restrict__ dy, float *dx, double *__restrict__ part, float *db,
                                        int64_t R, int64_t M, int64_t P, int64_t C) {
    typedef typename std::conditional<V == 4, float4, float>::type vec;
    const int64_t units = M / V, items = P * units;
    for (int64_t it = pw_tid(); it < items; it += pw_stride()) {
        int64_t p = it / units, u = it - p * units, j = u * V;
        int64_t r0 = p * C, r1 = r0 + C < R ? r0 + C : R;
        const vec *g = (const vec *)dy + u; /* row r at g[r * units] */
        vec *d = dx ? (vec *)dx + u : NULL;
        double s[V];
#pragma unroll
        for (int v = 0; v < V; v++) s[v] = 0.0;
        for (int64_t r = r0; r < r1; r += ADDB_BATCH) {
            vec gv[ADDB_BATCH], dv[ADDB_BATCH];
#pragma unroll
            for (int b = 0; b < ADDB_BATCH; b++)
                if (r + b < r1) {
                    gv[b] = g[(r + b) * units];
                    if (d) dv[b] = d[(r + b) * units];
                }
#pragma unroll
            for (int b = 0; b < ADDB_BATCH; b++)
                if (r + b < r1) {
                    if constexpr (V == 4) {
                        s[0] += (double)gv[b].x, s[1] += (double)gv[b].y, s[2] += (double)gv[b].z,
                            s[3] += (double)gv[b].w;
                        if (d) d[(r + b) * units] = add4(dv[b], gv[b]);
                    } else {
                        s[0] += (double)gv[b];
                        if (d) d[(r + b) * units] = __fadd_rn(dv[b], gv[b]);
                    }
                }
        }
#pragma unroll
        for (int v = 0; v < V; v++) {
            if (P == 1) db[j + v] = __fadd_rn(db[j + v], (float)s[v]);
            else part[p * M + j + v] = s[v];
        }
    }
}

/* Stage 2, block (32, 8) for 32 columns of part (P, M): row-lane ty sums
 * chunks [ty Q, ty Q + Q) (Q = ceil(P / 8)) in order, then ty = 0 adds
 * the 8 sums in order: db[j] += (float)total. */
static __global__ void addb_bwd_combine(const double *__restrict__ part, float *__restrict__ db, int64_t M, int64_t P) {
    __shared__ double t[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * 32 + tx, Q = (P + 7) / 8, p0 = ty * Q, p1 = p0 + Q < P ? p0 + Q : P;
    double acc = 0.0;
    if (j < M)
        for (int64_t p = p0; p < p1; p++) acc += part[p * M + j];
    t[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && j < M) {
        double s = 0.0;
#pragma unroll
        for (int y = 0; y < 8; y++) s += t[y][tx];
        db[j] = __fadd_rn(db[j], (float)s);
    }
}

static remat_status addb_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data; // (R, M)
    const float *b = (const float *)k->in[1]->data; // (M)
    float *y = (float *)k->out->data;               // (R, M)
    int64_t M = remat__numel(k->in[1]->shape), n = pw_numel(k);
    if (n == 0 || M == 0) return REMAT_OK;
    int64_t n4 = M % 4 == 0 ? pw_quads(n, x, b, y, NULL) : 0;
    unsigned nb = pw_blocks(cu, n, n4);
    if (n < ((int64_t)1 << 31))
        addb_fwd_kernel<uint32_t>
            <<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(x, b, y, (uint32_t)n, (uint32_t)n4, (uint32_t)M);
    else
        addb_fwd_kernel<uint64_t>
            <<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(x, b, y, (uint64_t)n, (uint64_t)n4, (uint64_t)M);
    REMAT__CU_TRY(remat__cu_launched(k, "addb_fwd_kernel"));
    return REMAT_OK;
}

static remat_status addb_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const float *dy = k->dout;              // (R, M)
    float *dx = k->din[0], *db = k->din[1]; // (R, M), (M), either NULL; one buffer when x is b
    int64_t M = remat__numel(k->in[1]->shape), n = pw_numel(k), R = M > 0 ? n / M : 0, P, C;
    if (n == 0 || (!dx && !db)) return REMAT_OK;
    if (!db) return pw_acc(k, dx, dy, n);
    addb_chunks(R, M, &P, &C);
    double *part = (double *)k->ws; // (P, M) when P > 1
    int v4 = M % 4 == 0 && pw_aligned(dy) && pw_aligned(dx);
    unsigned nb = remat__cu_blocks(cu, P * (v4 ? M / 4 : M));
    if (v4) addb_bwd_partial<4><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(dy, dx, part, db, R, M, P, C);
    else addb_bwd_partial<1><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(dy, dx, part, db, R, M, P, C);
    REMAT__CU_TRY(remat__cu_launched(k, "addb_bwd_partial"));
    if (P == 1) return REMAT_OK;
    addb_bwd_combine<<<(unsigned)((M + 31) / 32), dim3(32, 8), 0, cu->stream>>>(part, db, M, P);
    REMAT__CU_TRY(remat__cu_launched(k, "addb_bwd_combine"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_add_broadcast = {addb_forward, addb_backward, NULL,
                                                                 addb_bwd_ws,  NULL,          NULL};
