/* elementwise.c: relu, add, mul and dropout, the pointwise ops.
 *
 * All split their elements evenly over the threads. Dropout draws its mask
 * from Philox keyed by (seed, step, node, element), so the backward pass
 * and any recomputation regenerate it: nothing is saved.
 */
#include "pw16.h"

#include <math.h>

#include <stdio.h>

static remat_status same_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *a = remat__in_shape(g, n, 0);
    char lb[128], as[64], bs[64];
    if (g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: input must be float32", remat__node_label(n, lb, sizeof lb));
    for (int i = 1; i < n->n_in; i++) {
        const remat__shape *b = remat__in_shape(g, n, i);
        int same = a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++) same = a->d[d] == b->d[d];
        if (!same || g->nodes[n->in[i]].dtype != REMAT_F32)
            return remat__err(REMAT_SHAPE, "%s: inputs %s and %s differ (shapes must be equal)",
                              remat__node_label(n, lb, sizeof lb), remat__shape_str(a, as, sizeof as),
                              remat__shape_str(b, bs, sizeof bs));
    }
    n->shape = *a;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static int64_t numel_of(const remat__kctx *k) { return remat__numel(&k->node->shape); }

/* -0.0f, read through a volatile so the compiler cannot fold "x + -0" back
 * into "leave x alone", which would make a loop's store conditional and
 * stop it from vectorizing (SSE2 has no masked stores). */
static volatile float neg_zero = -0.0f;
static inline float remat__neg_zero(void) { return neg_zero; }

/* ------------------------------------------------------------------ relu */

static void relu_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        remat__pw16 t = remat__pw16_of(k, 0);
        remat__pw16_best()->relu_fwd(&t, lo, hi);
        return;
    }
    /* NaN stays NaN, as in PyTorch (a comparison with NaN is false, so a
     * NaN takes the `: x` side); every other x <= 0 gives +0 (PyTorch
     * keeps -0's sign). A select, so the loop vectorizes (compare, and). */
    for (int64_t i = lo; i < hi; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

/* Needs only the output: y > 0 exactly where x > 0. The gradient passes
 * where y is not <= 0, so where y is NaN too, as PyTorch's
 * threshold_backward(grad, y, 0) = (y <= 0 ? 0 : grad) does. */
static void relu_backward(const remat__kctx *k, int ith, int nth) {
    const float *y = k->out->data, *dy = k->dout;
    float *dx = k->din[0];
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        remat__pw16 t = remat__pw16_of(k, 1);
        remat__pw16_best()->relu_bwd(&t, lo, hi);
        return;
    }
    /* A select rather than a branch (signs are data: branches mispredict),
     * so the loop vectorizes. Adding -0 leaves every float's bits as they
     * are (-0 + -0 = -0, +0 + -0 = +0), unlike adding +0. */
    const float nz = remat__neg_zero();
    for (int64_t i = lo; i < hi; i++) {
        float g = dy[i]; /* loaded unconditionally, or the select is not if-converted */
        dx[i] += y[i] <= 0.0f ? nz : g;
    }
}

static double pointwise_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return (double)remat__numel(&n->shape);
}

const remat__op remat__op_relu = {
    .autocast = REMAT__AC_FIRST,
    .name = "relu",
    .min_in = 1,
    .max_in = 1,
    .shape = same_shape,
    .forward = relu_forward,
    .backward = relu_backward,
    .saves = REMAT__SAVE_OUT,
    .flops = pointwise_flops,
    .bf16_ws = remat__pw16_ws,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(relu),
    .flags = REMAT__OP_ELEMENTWISE,
};

/* ------------------------------------------------------------------- add */

static void add_forward(const remat__kctx *k, int ith, int nth) {
    const float *a = k->in[0]->data, *b = k->in[1]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        remat__pw16 t = remat__pw16_of(k, 0);
        remat__pw16_best()->add_fwd(&t, lo, hi);
        return;
    }
    for (int64_t i = lo; i < hi; i++) y[i] = a[i] + b[i];
}

static void add_backward(const remat__kctx *k, int ith, int nth) {
    const float *dy = k->dout;
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        remat__pw16 t = remat__pw16_of(k, 1);
        remat__pw16_best()->add_bwd(&t, lo, hi);
        return;
    }
    for (int j = 0; j < 2; j++)
        if (k->din[j])
            for (int64_t i = lo; i < hi; i++) k->din[j][i] += dy[i];
}

const remat__op remat__op_add = {
    .autocast = REMAT__AC_PROMOTE,
    .name = "add",
    .min_in = 2,
    .max_in = 2,
    .shape = same_shape,
    .forward = add_forward,
    .backward = add_backward,
    .saves = 0,
    .flops = pointwise_flops,
    .bf16_ws = remat__pw16_ws,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(add),
    .flags = REMAT__OP_ELEMENTWISE,
};

/* ------------------------------------------------------------------- mul */

static void mul_forward(const remat__kctx *k, int ith, int nth) {
    const float *a = k->in[0]->data, *b = k->in[1]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        remat__pw16 t = remat__pw16_of(k, 0);
        remat__pw16_best()->mul_fwd(&t, lo, hi);
        return;
    }
    for (int64_t i = lo; i < hi; i++) y[i] = a[i] * b[i];
}

/* da += dy * b; db += dy * a: both inputs are saved. */
static void mul_backward(const remat__kctx *k, int ith, int nth) {
    const float *a = k->in[0]->data, *b = k->in[1]->data, *dy = k->dout;
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        remat__pw16 t = remat__pw16_of(k, 1);
        remat__pw16_best()->mul_bwd(&t, lo, hi);
        return;
    }
    if (k->din[0])
        for (int64_t i = lo; i < hi; i++) k->din[0][i] += dy[i] * b[i];
    if (k->din[1])
        for (int64_t i = lo; i < hi; i++) k->din[1][i] += dy[i] * a[i];
}

const remat__op remat__op_mul = {
    .autocast = REMAT__AC_PROMOTE,
    .name = "mul",
    .min_in = 2,
    .max_in = 2,
    .shape = same_shape,
    .forward = mul_forward,
    .backward = mul_backward,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1),
    .flops = pointwise_flops,
    .bf16_ws = remat__pw16_ws,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(mul),
    .flags = REMAT__OP_ELEMENTWISE,
};

/* --------------------------------------------------------------- dropout */

#define DROPOUT_STREAM 0x64726f70u /* "drop": keeps dropout's counters apart */

static remat_status dropout_shape(const remat_graph *g, remat__node *n) {
    char lb[128];
    float p = n->fattr[0];
    if (!(p >= 0.0f && p < 1.0f))
        return remat__err(REMAT_INVALID, "%s: probability %g is outside [0, 1)", remat__node_label(n, lb, sizeof lb),
                          (double)p);
    return same_shape(g, n);
}

/* Element i keeps its value when word i % 4 of Philox at counter
 * (i / 4, node, step, stream ^ (i >> 34)), as a uniform u01 in [0, 1), is
 * at least p. u01(r) = (r >> 8) / 2^24 exactly, so that test is the
 * integer test (r >> 8) >= ceil(p 2^24), which is what the loops use.
 * i is the element's index in the global batch's tensor (kctx.elem0 + its
 * index here): micro-batch k of a step draws what rows k*M.. of the whole
 * batch would, whichever rank computes it. */
static uint32_t keep_threshold(float p) { return (uint32_t)ceil((double)p * 16777216.0); }

/* Forward (dx == NULL): y = keep ? x * scale : 0. Backward: dx += keep ?
 * dy * scale : -0 (adding -0 leaves a dropped element's bits as they
 * are). in is x or dy. Elements [lo, hi), 64 (sixteen counters, drawn on
 * pw16's vector kernels: philox16) at a time. Selects, not branches: the
 * mask is random. */
static void dropout_apply(const remat__kctx *k, int64_t lo, int64_t hi, const float *in, float *y, float *dx) {
    const uint32_t t = keep_threshold(k->node->fattr[0]);
    const float scale = 1.0f / (1.0f - k->node->fattr[0]), nz = remat__neg_zero();
    const uint32_t key[2] = {(uint32_t)k->seed, (uint32_t)(k->seed >> 32)};
    /* global index g = e0 + i, i the element's index here */
    const int64_t e0 = k->elem0, glo = lo + e0, ghi = hi + e0;
    const remat__pw16_kernels *K = remat__pw16_best();
    for (int64_t base = glo & ~(int64_t)63; base < ghi; base += 64) {
        uint32_t r[64];
        K->philox16((uint64_t)base >> 2, (uint32_t)k->node_id, (uint32_t)k->step, DROPOUT_STREAM, key, r);
        int64_t a = (base < glo ? glo : base) - e0, b = (base + 64 < ghi ? base + 64 : ghi) - e0;
        const int64_t sh = e0 - base; /* r[i + sh] is element i's word */
        if (dx)
            for (int64_t i = a; i < b; i++) {
                float v = in[i] * scale;
                dx[i] += (r[i + sh] >> 8) >= t ? v : nz;
            }
        else
            for (int64_t i = a; i < b; i++) {
                float v = in[i] * scale;
                y[i] = (r[i + sh] >> 8) >= t ? v : 0.0f;
            }
    }
}

/* Elements [lo, hi) of the forward or the backward on the values as
 * stored (kctx.dt: pw16.h): dropout_apply's mask and arithmetic, element
 * by element, on each value widened, the output rounded and the gradient
 * added as the views do. */
static void dropout16(const remat__kctx *k, int64_t lo, int64_t hi, int backward) {
    const remat__pw16 t = remat__pw16_of(k, backward);
    const void *in = backward ? t.dout : t.in[0];
    const int in16 = backward ? t.out16 : t.in16[0];
    if (backward && !t.din[0]) return;
    if (!k->train || k->node->fattr[0] == 0.0f) {
        for (int64_t i = lo; i < hi; i++) {
            float v = remat__pw16_ld(in, in16, i);
            if (backward) remat__pw16_acc(t.din[0], t.in16[0], i, v);
            else remat__pw16_st(t.out, t.out16, i, v);
        }
        return;
    }
    const uint32_t thr = keep_threshold(k->node->fattr[0]);
    const float scale = 1.0f / (1.0f - k->node->fattr[0]);
    const uint32_t key[2] = {(uint32_t)k->seed, (uint32_t)(k->seed >> 32)};
    const int64_t e0 = k->elem0, glo = lo + e0, ghi = hi + e0;
    const remat__pw16_kernels *K = remat__pw16_best();
    for (int64_t base = glo & ~(int64_t)63; base < ghi; base += 64) {
        uint32_t r[64];
        K->philox16((uint64_t)base >> 2, (uint32_t)k->node_id, (uint32_t)k->step, DROPOUT_STREAM, key, r);
        int64_t a = (base < glo ? glo : base) - e0, b = (base + 64 < ghi ? base + 64 : ghi) - e0;
        for (int64_t i = a; i < b; i++) {
            float v = remat__pw16_ld(in, in16, i) * scale;
            int keep = (r[i + e0 - base] >> 8) >= thr;
            if (backward) remat__pw16_acc(t.din[0], t.in16[0], i, keep ? v : -0.0f);
            else remat__pw16_st(t.out, t.out16, i, keep ? v : 0.0f);
        }
    }
}

static void dropout_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        dropout16(k, lo, hi, 0);
        return;
    }
    if (!k->train || k->node->fattr[0] == 0.0f) {
        for (int64_t i = lo; i < hi; i++) y[i] = x[i];
        return;
    }
    dropout_apply(k, lo, hi, x, y, NULL);
}

static void dropout_backward(const remat__kctx *k, int ith, int nth) {
    const float *dy = k->dout;
    float *dx = k->din[0];
    int64_t lo, hi;
    remat__split(numel_of(k), ith, nth, &lo, &hi);
    if (k->dt) {
        dropout16(k, lo, hi, 1);
        return;
    }
    if (!k->train || k->node->fattr[0] == 0.0f) {
        for (int64_t i = lo; i < hi; i++) dx[i] += dy[i];
        return;
    }
    dropout_apply(k, lo, hi, dy, NULL, dx);
}

const remat__op remat__op_dropout = {
    .autocast = REMAT__AC_FIRST,
    .name = "dropout",
    .min_in = 1,
    .max_in = 1,
    .shape = dropout_shape,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .saves = 0,
    .flags = REMAT__OP_RANDOM | REMAT__OP_ELEMENTWISE,
    .flops = pointwise_flops,
    .bf16_ws = remat__pw16_ws,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(dropout),
};
