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
 *
 * Under the bf16 policy, with x stored in bf16 (so y, dy and dx are), the
 * kernels read and write them in place (bf16_ws): each element widened
 * where it is read, y rounded where it is written, dx added as the
 * float32 view's accumulation would be (its zeros plus the kernel's term,
 * rounded through bf16 and added, rounded again): the view's bits, with
 * no view. The weight and bias stay float32.
 */
#include "../remat-impl.h"
#include "../core/bf16.h"

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
        return remat__err(REMAT_INVALID, "%s: eps %g must be finite and >= 0", remat__node_label(n, lb, sizeof lb),
                          (double)eps);
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

/* Element i of a value stored in float32 or (bf) bf16, as float. */
static inline float ld(const void *p, int bf, int64_t i) {
    return bf ? remat__f32_of(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Rows [lo, hi) of the forward; bf: x and y are bf16 (a constant at each
 * call, so each form is compiled on its own). */
static inline __attribute__((always_inline)) void ln_rows(const remat__kctx *k, int64_t lo, int64_t hi, int bf) {
    const void *x = k->in[0]->data;  // (R, C)
    const float *w = k->in[1]->data; // (C)
    const float *b = k->in[2]->data; // (C)
    void *y = k->out->data;          // (R, C)
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C;
    float *amean = k->aux, *arstd = k->aux + R; // (R), (R)
    double eps = k->node->fattr[0];
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r * C;
        double s = 0.0;
        for (int64_t c = 0; c < C; c++) s += ld(x, bf, o + c);
        double mu = s / (double)C, q = 0.0;
        for (int64_t c = 0; c < C; c++) {
            double d = (double)ld(x, bf, o + c) - mu;
            q += d * d;
        }
        amean[r] = (float)mu;
        arstd[r] = (float)(1.0 / sqrt(q / (double)C + eps));
        float m = amean[r], rs = arstd[r];
        for (int64_t c = 0; c < C; c++) {
            float v = (ld(x, bf, o + c) - m) * rs * w[c] + b[c];
            if (bf) ((uint16_t *)y)[o + c] = remat__bf16_of(v);
            else ((float *)y)[o + c] = v;
        }
    }
}

static int ln_bf16(const remat__kctx *k) { return k->dt && k->dt[k->node->in[0]] == REMAT_BF16; }

static void ln_forward(const remat__kctx *k, int ith, int nth) {
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C, lo, hi;
    remat__split(R, ith, nth, &lo, &hi);
    if (ln_bf16(k)) ln_rows(k, lo, hi, 1);
    else ln_rows(k, lo, hi, 0);
}

/* Rows [lo, hi) of dx; bf: x, dy and dx are bf16. */
static inline __attribute__((always_inline)) void ln_dx_rows(const remat__kctx *k, int64_t lo, int64_t hi, int bf) {
    const void *x = k->in[0]->data, *dy = k->dout; // (R, C)
    const float *w = k->in[1]->data;               // (C)
    void *dx = k->din[0];
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C;
    const float *amean = k->aux, *arstd = k->aux + R; // (R), (R)
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r * C;
        double mu = amean[r], rs = arstd[r], sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < C; c++) {
            double gc = (double)ld(dy, bf, o + c) * w[c];
            sg += gc;
            sgx += gc * (((double)ld(x, bf, o + c) - mu) * rs);
        }
        sg /= (double)C, sgx /= (double)C;
        for (int64_t c = 0; c < C; c++) {
            double xhat = ((double)ld(x, bf, o + c) - mu) * rs;
            float v = (float)(rs * ((double)ld(dy, bf, o + c) * w[c] - sg - xhat * sgx));
            if (bf) { /* the view: its zero plus v, rounded through bf16, added, rounded */
                float t = 0.0f;
                t += v;
                uint16_t *d = (uint16_t *)dx + o + c;
                *d = remat__bf16_of(remat__f32_of(*d) + remat__bf16_round(t));
            } else {
                ((float *)dx)[o + c] += v;
            }
        }
    }
}

/* Columns [lo, hi) of the parameter sums over every row, in order. */
static inline __attribute__((always_inline)) void ln_param_cols(const remat__kctx *k, int64_t lo, int64_t hi, int bf) {
    const void *x = k->in[0]->data, *dy = k->dout; // (R, C)
    float *dw = k->din[1], *db = k->din[2];
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C;
    const float *amean = k->aux, *arstd = k->aux + R; // (R), (R)
    double *sw = k->ws, *sb = sw + C;                 // (C), (C)
    for (int64_t c = lo; c < hi; c++) sw[c] = sb[c] = 0.0;
    for (int64_t r = 0; r < R; r++) {
        int64_t o = r * C;
        double mu = amean[r], rs = arstd[r];
        for (int64_t c = lo; c < hi; c++) {
            float g = ld(dy, bf, o + c);
            sw[c] += (double)g * (((double)ld(x, bf, o + c) - mu) * rs);
            sb[c] += g;
        }
    }
    for (int64_t c = lo; c < hi; c++) {
        if (dw) dw[c] += (float)sw[c];
        if (db) db[c] += (float)sb[c];
    }
}

static void ln_backward(const remat__kctx *k, int ith, int nth) {
    int64_t C = ln_cols(k->in[0]->shape), R = remat__numel(k->in[0]->shape) / C, lo, hi;
    int bf = ln_bf16(k);
    if (k->din[0]) { /* rows */
        remat__split(R, ith, nth, &lo, &hi);
        if (bf) ln_dx_rows(k, lo, hi, 1);
        else ln_dx_rows(k, lo, hi, 0);
    }
    if (!k->din[1] && !k->din[2]) return;
    /* columns: this thread owns [lo, hi) of the workspace's two C-vectors */
    remat__split(C, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    if (bf) ln_param_cols(k, lo, hi, 1);
    else ln_param_cols(k, lo, hi, 0);
}

/* Under bf16 with x stored in bf16: the kernels above take x, y, dy and dx
 * as they are stored, with the float32 kernels' workspace. */
static int ln_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                      size_t *bwd) {
    if (dt[n->in[0]] != REMAT_BF16 || dt[n->in[1]] != REMAT_F32 || dt[n->in[2]] != REMAT_F32) return 0;
    *fwd = 0;
    *bwd = ln_bwd_ws(g, n, nth);
    return 1;
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
    .bf16_ws = ln_bf16_ws,
    .flops = ln_flops,
    .family = REMAT_FAMILY_NORM,
    .cuda = REMAT__CUDA(layernorm),
};
