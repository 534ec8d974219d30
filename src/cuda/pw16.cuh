/* pw16.cuh: elementwise ops on their values in their stored dtypes, the
 * bf16 policy's native CUDA kernels for REMAT__OP_ELEMENTWISE ops (relu,
 * add, mul, dropout, gelu: k_pointwise.cu; reshape: k_shape.cu).
 *
 * Each value (an input, the output, the output gradient, an input
 * gradient) is bf16 or float32 as the policy stores it (kctx.dt, by node
 * id). The arithmetic is the float32 kernel's, element by element, on the
 * same float32 numbers the views of exec/views.c would hold, so the
 * bits are the view path's:
 * - a bf16 input is widened (exact), a float32 one read as it is;
 * - a bf16 output is rounded from the float32 result (remat__bf16_of,
 *   ties to even: core/bf16.h), a float32 one stored as it is;
 * - the gradient of a bf16 input is the kernel's gradient computed into a
 *   zero (the views' zeroed buffer: d = 0 + ..., which turns -0 into +0
 *   as there), then rounded through bf16 and added to the gradient in
 *   float32 and rounded again (REMAT__CVT_ACC_BF16); a float32 input's
 *   gradient is accumulated in place, as the float32 kernel does when the
 *   views leave that input alone.
 * Two inputs may be one value (add(x, x)): each thread finishes input 0's
 * gradient before input 1's, the order in which the views add their two
 * buffers. One element per thread in a grid-stride loop; no workspace.
 *
 * An op is a functor with
 *   __device__ float fwd(float a, float b, int64_t i) const;
 *   __device__ float grad(int j, float d, float a, float b, float y, float g, int64_t i) const;
 * (a, b: inputs 0 and 1, zero where absent or not saved; y: the output,
 * zero where not saved; g: the output gradient; d: the gradient of input
 * j so far; i: the element's index in the tensor). fwd returns the
 * output, grad the new gradient of input j.
 */
#ifndef REMAT_PW16_CUH
#define REMAT_PW16_CUH

#include "cuda-impl.h"

#include "../core/bf16.h"

/* Element i of a value stored in bf16 (b16) or float32. */
static __device__ __forceinline__ float pw16_ld(const void *p, int b16, int64_t i) {
    return b16 ? remat__f32_of(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static __device__ __forceinline__ void pw16_st(void *p, int b16, int64_t i, float v) {
    if (b16) ((uint16_t *)p)[i] = remat__bf16_of(v);
    else ((float *)p)[i] = v;
}

/* A node's tensors (device pointers) and their dtypes; at most 2 inputs. */
typedef struct {
    const void *in[2];
    void *out;
    const void *dout;
    void *din[2];
    int in16[2], out16; /* bf16? (an input's gradient has its input's dtype,
                         * the output gradient the output's) */
    int n_in;
    int64_t n;
} pw16_args;

template <class OP> static __global__ void pw16_fwd_kernel(pw16_args t, OP op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = pw16_ld(t.in[0], t.in16[0], i);
        float b = t.n_in > 1 ? pw16_ld(t.in[1], t.in16[1], i) : 0.0f;
        pw16_st(t.out, t.out16, i, op.fwd(a, b, i));
    }
}

template <class OP> static __global__ void pw16_bwd_kernel(pw16_args t, OP op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = t.in[0] ? pw16_ld(t.in[0], t.in16[0], i) : 0.0f;
        float b = t.n_in > 1 && t.in[1] ? pw16_ld(t.in[1], t.in16[1], i) : 0.0f;
        float y = t.out ? pw16_ld(t.out, t.out16, i) : 0.0f;
        float g = pw16_ld(t.dout, t.out16, i);
        for (int j = 0; j < t.n_in; j++) {
            if (!t.din[j]) continue;
            if (t.in16[j]) {
                uint16_t *d = (uint16_t *)t.din[j];
                float c = op.grad(j, 0.0f, a, b, y, g, i);
                d[i] = remat__bf16_of(remat__f32_of(d[i]) + remat__bf16_round(c)); /* REMAT__CVT_ACC_BF16 */
            } else {
                float *d = (float *)t.din[j];
                d[i] = op.grad(j, d[i], a, b, y, g, i);
            }
        }
    }
}

/* Whether node n has a value in bf16 (an input or its output): then its
 * elementwise kernels take them as stored (no workspace); otherwise every
 * value is float32 and the float32 kernels run as under fp32. */
static inline int pw16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, size_t *fwd, size_t *bwd) {
    int any = dt[n - g->nodes] == REMAT_BF16;
    for (int i = 0; i < n->n_in; i++) any |= dt[n->in[i]] == REMAT_BF16;
    *fwd = *bwd = 0;
    return any;
}

/* pw16_ws as a device kernel's bf16_ws (remat__dev_kernels). */
static inline int pw16_ws_dev(void *dev, const remat_graph *g, const remat__node *n, const uint8_t *dt, size_t *fwd,
                              size_t *bwd) {
    (void)dev;
    return pw16_ws(g, n, dt, fwd, bwd);
}

/* Node k->node's forward or backward on its stored dtypes, enqueued on
 * the backend's stream. */
template <class OP> static remat_status pw16_run(const remat__kctx *k, OP op, int backward, const char *name) {
    remat__cuda *cu = remat__cu(k);
    const remat__node *n = k->node;
    pw16_args t;
    memset(&t, 0, sizeof t);
    t.n = remat__numel(&n->shape);
    t.n_in = n->n_in < 2 ? n->n_in : 2;
    for (int j = 0; j < t.n_in; j++) {
        t.in[j] = k->in[j]->data;
        t.in16[j] = k->dt[n->in[j]] == REMAT_BF16;
        t.din[j] = backward ? (void *)k->din[j] : NULL;
    }
    t.out = k->out->data;
    t.out16 = k->dt[k->node_id] == REMAT_BF16;
    t.dout = backward ? (const void *)k->dout : NULL;
    if (t.n == 0 || (backward && !t.din[0] && !t.din[1])) return REMAT_OK;
    unsigned nb = remat__cu_blocks(cu, t.n);
    if (backward) pw16_bwd_kernel<OP><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(t, op);
    else pw16_fwd_kernel<OP><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(t, op);
    return remat__cu_launched(k, name);
}

#endif
