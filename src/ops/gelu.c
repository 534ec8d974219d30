/* gelu.c: the Gaussian error linear unit, PyTorch's F.gelu.
 *
 * iattr[0] selects the form (approximate='none' or 'tanh'):
 *   exact: y = x/2 (1 + erf(x / sqrt 2))
 *          dy/dx = (1 + erf(x / sqrt 2)) / 2 + x exp(-x^2/2) / sqrt(2 pi)
 *   tanh:  u = sqrt(2/pi) (x + 0.044715 x^3),  y = x/2 (1 + tanh u)
 *          dy/dx = (1 + tanh u) / 2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 0.044715 x^2)
 * The tanh form is computed as a sigmoid, (1 + tanh u) / 2 = s =
 * 1 / (1 + exp(-2u)), so y = x s and dy/dx = s + 2 x s (1 - s) du/dx:
 * one expf instead of tanhf (several times faster in glibc, and GELU is
 * about a tenth of a GPT-2 step otherwise), with no cancellation near 0,
 * and exp's overflow for large -u giving s = 0 exactly.
 * Backward reads the input. Elements are split evenly over the threads and
 * each is computed on its own, so any thread count gives the same bits.
 * Under the bf16 policy a node with a bf16 value runs on its values as
 * stored (gelu16, pw16.h), with the float32 views' bits and no views.
 */
#include "pw16.h"

#include <math.h>

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f
#define GELU_C 0.044715f

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

/* y and dy/dx of one element, in each form: one definition for the
 * float32 kernels and the bf16 ones, so their arithmetic is the same. */
static inline float gelu_tanh(float v) {
    float u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
    return v / (1.0f + expf(-2.0f * u));
}

static inline float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * INV_SQRT_2)); }

static inline float dgelu_tanh(float v) {
    float u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v), sg = 1.0f / (1.0f + expf(-2.0f * u));
    return sg + 2.0f * v * sg * (1.0f - sg) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
}

static inline float dgelu_erf(float v) {
    return 0.5f * (1.0f + erff(v * INV_SQRT_2)) + v * expf(-0.5f * v * v) * INV_SQRT_2PI;
}

/* Under the bf16 policy with a bf16 value (kctx.dt: bf16_ws), elements
 * [lo, hi) on the values as stored (pw16.h): the same per element
 * arithmetic on x widened, y rounded, dx added as the views add. */
static void gelu16(const remat__kctx *k, int64_t lo, int64_t hi, int backward) {
    const remat__pw16 t = remat__pw16_of(k, backward);
    const int tanh_form = k->node->iattr[0] != 0;
    if (backward && !t.din[0]) return;
    for (int64_t i = lo; i < hi; i++) {
        float v = remat__pw16_ld(t.in[0], t.in16[0], i);
        if (backward)
            remat__pw16_acc(t.din[0], t.in16[0], i,
                            remat__pw16_ld(t.dout, t.out16, i) * (tanh_form ? dgelu_tanh(v) : dgelu_erf(v)));
        else remat__pw16_st(t.out, t.out16, i, tanh_form ? gelu_tanh(v) : gelu_erf(v));
    }
}

static void gelu_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->dt) {
        gelu16(k, lo, hi, 0);
        return;
    }
    if (k->node->iattr[0])
        for (int64_t i = lo; i < hi; i++) y[i] = gelu_tanh(x[i]);
    else
        for (int64_t i = lo; i < hi; i++) y[i] = gelu_erf(x[i]);
}

static void gelu_backward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data, *dy = k->dout;
    float *dx = k->din[0];
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->dt) {
        gelu16(k, lo, hi, 1);
        return;
    }
    if (k->node->iattr[0])
        for (int64_t i = lo; i < hi; i++) dx[i] += dy[i] * dgelu_tanh(x[i]);
    else
        for (int64_t i = lo; i < hi; i++) dx[i] += dy[i] * dgelu_erf(x[i]);
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
