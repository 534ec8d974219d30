/* linear.c: y = x W^T + b through remat__gemm (oneDNN's sgemm or
 * cblas_sgemm by a rule on the product's shape: src/ops/dnnl.h).
 *
 * Inputs: x (N, in), W (out, in), optional b (out). Backward needs x and W:
 *   dx += dy W        (N, in)
 *   dW += dy^T x      (out, in)
 *   db += sum_n dy    (out)
 * Work is split by rows of the result, so every element is reduced by one
 * thread in one fixed order: results do not depend on timing.
 */
#include "../remat-impl.h"
#include "dnnl.h"

static remat_status linear_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    char lb[128], xs[64], ws[64];
    if (x->ndim != 2 || w->ndim != 2 || x->d[1] != w->d[1])
        return remat__err(REMAT_SHAPE, "%s: input %s does not match weight %s "
                          "(expected input (N, %lld))", remat__node_label(n, lb, sizeof lb),
                          remat__shape_str(x, xs, sizeof xs), remat__shape_str(w, ws, sizeof ws),
                          (long long)(w->ndim == 2 ? w->d[1] : -1));
    if (n->n_in == 3) {
        const remat__shape *b = remat__in_shape(g, n, 2);
        if (b->ndim != 1 || b->d[0] != w->d[0])
            return remat__err(REMAT_SHAPE, "%s: bias %s does not match weight %s",
                              remat__node_label(n, lb, sizeof lb),
                              remat__shape_str(b, xs, sizeof xs), remat__shape_str(w, ws, sizeof ws));
    }
    n->shape = (remat__shape){2, {x->d[0], w->d[0]}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static void linear_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;  // (N, in)
    const float *w = k->in[1]->data;  // (out, in)
    float *y = k->out->data;          // (N, out)
    int64_t NB = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    int64_t lo, hi;
    remat__split(NB, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    if (k->node->n_in == 3) {
        const float *b = k->in[2]->data;
        for (int64_t r = lo; r < hi; r++) memcpy(y + r * OUT, b, (size_t)OUT * sizeof *y);
    }
    remat__gemm(k->dnnl, 0, 1, hi - lo, OUT, IN, 1.0f, x + lo * IN, IN, w, IN, k->node->n_in == 3 ? 1.0f : 0.0f,
                y + lo * OUT, OUT);
}

static void linear_backward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data;  // (N, in)
    const float *w = k->in[1]->data;  // (out, in)
    const float *dy = k->dout;        // (N, out)
    int64_t NB = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    int64_t lo, hi;
    if (k->din[0]) { /* dx (N, in) += dy (N, out) W (out, in), split over rows n */
        remat__split(NB, ith, nth, &lo, &hi);
        if (hi > lo)
            remat__gemm(k->dnnl, 0, 0, hi - lo, IN, OUT, 1.0f, dy + lo * OUT, OUT, w, IN, 1.0f, k->din[0] + lo * IN,
                        IN);
    }
    /* dW (out, in) += dy^T (out, N) x (N, in) and db (out), split over rows o */
    remat__split(OUT, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    if (k->din[1])
        remat__gemm(k->dnnl, 1, 0, hi - lo, IN, NB, 1.0f, dy + lo, OUT, x, IN, 1.0f, k->din[1] + lo * IN, IN);
    if (k->node->n_in == 3 && k->din[2]) {
        float *db = k->din[2];
        for (int64_t o = lo; o < hi; o++) {
            float s = 0.0f;
            for (int64_t n = 0; n < NB; n++) s += dy[n * OUT + o];
            db[o] += s;
        }
    }
}

static double linear_flops(const remat_graph *g, const remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    return 2.0 * (double)x->d[0] * (double)x->d[1] * (double)n->shape.d[1];
}

const remat__op remat__op_linear = {
    .autocast = REMAT__AC_LOW,
    .name = "linear",
    .min_in = 2,
    .max_in = 3,
    .shape = linear_shape,
    .forward = linear_forward,
    .backward = linear_backward,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1),
    .flops = linear_flops,
    .family = REMAT_FAMILY_LINEAR,    .cuda = REMAT__CUDA(linear),
};
