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
 */
#include "../remat-impl.h"

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

static void gelu_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->node->iattr[0]) {
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i], u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
            y[i] = v / (1.0f + expf(-2.0f * u));
        }
    } else {
        for (int64_t i = lo; i < hi; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * INV_SQRT_2));
    }
}

static void gelu_backward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data, *dy = k->dout;
    float *dx = k->din[0];
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->node->iattr[0]) {
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i], u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v), sg = 1.0f / (1.0f + expf(-2.0f * u));
            float d = sg + 2.0f * v * sg * (1.0f - sg) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
            dx[i] += dy[i] * d;
        }
    } else {
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i];
            float d = 0.5f * (1.0f + erff(v * INV_SQRT_2)) + v * expf(-0.5f * v * v) * INV_SQRT_2PI;
            dx[i] += dy[i] * d;
        }
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
    .family = REMAT_FAMILY_POINTWISE,    .cuda = REMAT__CUDA(gelu),
    .flags = REMAT__OP_ELEMENTWISE,
};

remat_node remat_gelu(remat_graph *g, remat_node x, int tanh_approx) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_GELU, .n_in = 1, .in = {x}, .iattr = {tanh_approx ? 1 : 0}};
    return remat__graph_add(g, &n);
}
