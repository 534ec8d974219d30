/* layernorm.c: LayerNorm over the last dimension, with PyTorch's semantics.
 *
 * Inputs: x (..., C), weight (C), bias (C); fattr[0] = eps. Each of the
 * R = numel / C rows is normalized on its own:
 *   mean = sum x / C,  var = sum (x - mean)^2 / C (biased),
 *   rstd = 1 / sqrt(var + eps),  y = (x - mean) * rstd * weight + bias
 * The aux value holds mean[R] then rstd[R] as floats, and the output is
 * computed from those rounded values. The statistics depend on x alone, so
 * a recomputation rewrites the same aux and output bits.
 * Backward, with xhat = (x - mean) * rstd and g = dy * weight:
 *   dx      += rstd * (g - mean_j(g) - xhat * mean_j(g xhat))
 *   dweight += sum_rows dy xhat
 *   dbias   += sum_rows dy
 * Statistics and row sums run in double. dx is split by rows and the
 * parameter sums by columns (each column summed by one thread over the
 * rows in order, in a double workspace of 2C), so results are bitwise the
 * same for any thread count.
 */
#include "../remat-impl.h"

#include <math.h>
#include <stdio.h>

static remat_status ln_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64], ps[64];
    if (x->ndim < 1 || g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: input %s must be a float32 tensor of at least 1 dimension",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs));
    int64_t C = x->d[x->ndim - 1];
    static const char *const what[3] = {"input", "weight", "bias"};
    for (int i = 1; i < 3; i++) {
        const remat__shape *p = remat__in_shape(g, n, i);
        if (p->ndim != 1 || p->d[0] != C || g->nodes[n->in[i]].dtype != REMAT_F32)
            return remat__err(REMAT_SHAPE, "%s: %s %s does not match input %s (expected float32 (%lld))",
                              remat__node_label(n, lb, sizeof lb), what[i], remat__shape_str(p, ps, sizeof ps),
                              remat__shape_str(x, xs, sizeof xs), (long long)C);
    }
    float eps = n->fattr[0];
    if (!(eps >= 0.0f) || isinf(eps))
        return remat__err(REMAT_INVALID, "%s: eps %g must be finite and >= 0",
                          remat__node_label(n, lb, sizeof lb), (double)eps);
    n->shape = *x;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static int64_t ln_cols(const remat__shape *s) { return s->d[s->ndim - 1]; }

static size_t ln_aux_bytes(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 2 * (size_t)(remat__numel(&n->shape) / ln_cols(&n->shape)) * sizeof(float);
}

static size_t ln_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    (void)g, (void)nth;
    return 2 * (size_t)ln_cols(&n->shape) * sizeof(double);
}

static void ln_forward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data; // (R, C)
    const float *w = k->in[1]->data; // (C)
    const float *b = k->in[2]->data; // (C)
    float *y = k->out->data;         // (R, C)
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C;
    float *amean = k->aux, *arstd = k->aux + R; // (R), (R)
    double eps = k->node->fattr[0];
    int64_t lo, hi;
    remat__split(R, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * C;
        double s = 0.0;
        for (int64_t c = 0; c < C; c++) s += xr[c];
        double mu = s / (double)C, q = 0.0;
        for (int64_t c = 0; c < C; c++) {
            double d = (double)xr[c] - mu;
            q += d * d;
        }
        amean[r] = (float)mu;
        arstd[r] = (float)(1.0 / sqrt(q / (double)C + eps));
        float m = amean[r], rs = arstd[r];
        float *yr = y + r * C;
        for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
    }
}

static void ln_backward(const remat__kctx *k, int ith, int nth) {
    const float *x = k->in[0]->data; // (R, C)
    const float *w = k->in[1]->data; // (C)
    const float *dy = k->dout;       // (R, C)
    float *dx = k->din[0], *dw = k->din[1], *db = k->din[2];
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C;
    const float *amean = k->aux, *arstd = k->aux + R; // (R), (R)
    int64_t lo, hi;
    if (dx) { /* rows */
        remat__split(R, ith, nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) {
            const float *xr = x + r * C, *dyr = dy + r * C;
            double mu = amean[r], rs = arstd[r], sg = 0.0, sgx = 0.0;
            for (int64_t c = 0; c < C; c++) {
                double gc = (double)dyr[c] * w[c];
                sg += gc;
                sgx += gc * (((double)xr[c] - mu) * rs);
            }
            sg /= (double)C, sgx /= (double)C;
            float *dxr = dx + r * C;
            for (int64_t c = 0; c < C; c++) {
                double xhat = ((double)xr[c] - mu) * rs;
                dxr[c] += (float)(rs * ((double)dyr[c] * w[c] - sg - xhat * sgx));
            }
        }
    }
    if (!dw && !db) return;
    /* columns: this thread owns [lo, hi) of the workspace's two C-vectors */
    double *sw = k->ws, *sb = sw + C; // (C), (C)
    remat__split(C, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    for (int64_t c = lo; c < hi; c++) sw[c] = sb[c] = 0.0;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C, *dyr = dy + r * C;
        double mu = amean[r], rs = arstd[r];
        for (int64_t c = lo; c < hi; c++) {
            sw[c] += (double)dyr[c] * (((double)xr[c] - mu) * rs);
            sb[c] += dyr[c];
        }
    }
    for (int64_t c = lo; c < hi; c++) {
        if (dw) dw[c] += (float)sw[c];
        if (db) db[c] += (float)sb[c];
    }
}

static double ln_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 8.0 * (double)remat__numel(&n->shape);
}

const remat__op remat__op_layernorm = {
    .autocast = REMAT__AC_FIRST,
    .name = "layernorm",
    .min_in = 3,
    .max_in = 3,
    .shape = ln_shape,
    .forward = ln_forward,
    .backward = ln_backward,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1) | REMAT__SAVE_AUX,
    .aux_bytes = ln_aux_bytes,
    .bwd_ws = ln_bwd_ws,
    .flops = ln_flops,
    .family = REMAT_FAMILY_NORM,    .cuda = REMAT__CUDA(layernorm),
};

/* ------------------------------------------------------------- builders */

remat_node remat_layernorm_op(remat_graph *g, remat_node x, remat_node w, remat_node b, float eps) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_LAYERNORM, .n_in = 3, .in = {x, w, b}, .fattr = {eps}};
    return remat__graph_add(g, &n);
}

/* nn.LayerNorm(C): weight ones, bias zeros, eps 1e-5, C the last dim of x. */
remat_node remat_layernorm(remat_graph *g, const char *name, remat_node x) {
    if (!g) return REMAT_NONE;
    if (x < 0 || x >= g->n) return remat_layernorm_op(g, x, REMAT_NONE, REMAT_NONE, 1e-5f);
    const remat__shape *xs = &g->nodes[x].shape;
    int64_t C = xs->ndim >= 1 ? xs->d[xs->ndim - 1] : 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s.weight", name ? name : "");
    remat_node w = remat_param(g, buf, 1, &C, REMAT_INIT_ONES, 0);
    snprintf(buf, sizeof buf, "%s.bias", name ? name : "");
    remat_node b = remat_param(g, buf, 1, &C, REMAT_INIT_ZEROS, 0);
    if (w == REMAT_NONE || b == REMAT_NONE) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_LAYERNORM, .n_in = 3, .in = {x, w, b}, .fattr = {1e-5f},
                     .name = (char *)name};
    return remat__graph_add(g, &n);
}
