/* gelu.c: the Gaussian error linear unit, PyTorch's F.gelu.
 *
 * iattr[0] selects the form (approximate='none' or 'tanh'):
 *   exact: y = x/2 (1 + erf(x / sqrt 2))
 *          dy/dx = (1 + erf(x / sqrt 2)) / 2 + x exp(-x^2/2) / sqrt(2 pi)
 *   tanh:  u = sqrt(2/pi) (x + 0.044715 x^3),  y = x/2 (1 + tanh u)
 *          dy/dx = (1 + tanh u) / 2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 0.044715 x^2)
 * The tanh form is computed as a sigmoid, (1 + tanh u) / 2 = s =
 * 1 / (1 + exp(-2u)), so y = x s and dy/dx = s + 2 x s (1 - s) du/dx:
 * one exponential instead of tanhf, with no cancellation near 0, and
 * exp's overflow for large -u giving s = 0 exactly. Its exponential is
 * remat__expf (core/expf.h), which pw16.c's vector kernels repeat lane
 * by lane: the tanh form runs on them under both policies (pw16.h's
 * remat__gelu_tanh is the element's arithmetic), the exact form on
 * glibc's erff and expf, element by element.
 * Backward reads the input. Elements are split evenly over the threads and
 * each is computed on its own, so any thread count gives the same bits.
 * Under the bf16 policy a node with a bf16 value runs on its values as
 * stored (gelu16, pw16.h), with the float32 views' bits and no views.
 */
#include "pw16.h"

#include <math.h>

#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

static remat_status gelu_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64];
    if (g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: input %s must be float32", remat__node_label(n, lb, sizeof lb),
                          remat__shape_str(x, xs, sizeof xs));
    n->shape = *x;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

/* y and dy/dx of one element in the exact form (the tanh form's are
 * pw16.h's). */
static inline float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * INV_SQRT_2)); }

static inline float dgelu_erf(float v) {
    return 0.5f * (1.0f + erff(v * INV_SQRT_2)) + v * expf(-0.5f * v * v) * INV_SQRT_2PI;
}

/* The tensors of kernel k as pw16's kernels take them: as stored under
 * the bf16 policy, float32 throughout under fp32. */
static remat__pw16 gelu_tensors(const remat__kctx *k, int backward) {
    if (k->dt) return remat__pw16_of(k, backward);
    remat__pw16 t = {.in = {k->in[0]->data}, .out = k->out->data, .n_in = 1};
    if (backward) t.dout = k->dout, t.din[0] = k->din[0];
    return t;
}

/* Under the bf16 policy with a bf16 value (kctx.dt: bf16_ws), elements
 * [lo, hi) on the values as stored (pw16.h): the same per element
 * arithmetic on x widened, y rounded, dx added as the views add. */
static void gelu16(const remat__kctx *k, int64_t lo, int64_t hi, int backward) {
    const remat__pw16 t = remat__pw16_of(k, backward);
    if (backward && !t.din[0]) return;
    for (int64_t i = lo; i < hi; i++) {
        float v = remat__pw16_ld(t.in[0], t.in16[0], i);
        if (backward) remat__pw16_acc(t.din[0], t.in16[0], i, remat__pw16_ld(t.dout, t.out16, i) * dgelu_erf(v));
        else remat__pw16_st(t.out, t.out16, i, gelu_erf(v));
    }
}

static void gelu_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->node->iattr[0]) {
        const remat__pw16 t = gelu_tensors(k, 0);
        remat__pw16_best()->gelu_fwd(&t, lo, hi);
    } else if (k->dt) {
        gelu16(k, lo, hi, 0);
    } else {
        for (int64_t i = lo; i < hi; i++) y[i] = gelu_erf(x[i]);
    }
}

static void gelu_backward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data, *dy = k->dout;
    float *dx = k->din[0];
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->node->iattr[0]) {
        const remat__pw16 t = gelu_tensors(k, 1);
        remat__pw16_best()->gelu_bwd(&t, lo, hi);
    } else if (k->dt) {
        gelu16(k, lo, hi, 1);
    } else {
        for (int64_t i = lo; i < hi; i++) dx[i] += dy[i] * dgelu_erf(x[i]);
    }
}

static double gelu_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 8.0 * (double)remat__numel(&n->shape);
}

const remat__op remat__op_gelu = {
    .autocast = REMAT__AC_FIRST,
    .name = "gelu",
    .min_in = 1,
    .max_in = 1,
    .shape = gelu_shape,
    .forward = gelu_forward,
    .backward = gelu_backward,
    .saves = REMAT__SAVE_IN(0),
    .flops = gelu_flops,
    .bf16_ws = remat__pw16_ws,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(gelu),
    .flags = REMAT__OP_ELEMENTWISE,
};
