/* loss.c: mean cross-entropy over integer labels, and mean squared error.
 *
 * Both produce a scalar. Cross-entropy's labels get no gradient; both of
 * MSE's inputs do (PyTorch's semantics: the target may be computed). Sums
 * run in double in one fixed order on thread 0 (cross-entropy's rows are
 * computed in parallel first: a language model's logits are large), so
 * the loss does not depend on the thread count.
 */
#include "../remat-impl.h"

#include "pw16.h"

#include <math.h>
#include <stdio.h>

/* ---------------------------------------------------------- cross-entropy */

static remat_status ce_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *z = remat__in_shape(g, n, 0), *y = remat__in_shape(g, n, 1);
    char lb[128], zs[64], ys[64];
    if (z->ndim != 2 || y->ndim != 1 || y->d[0] != z->d[0])
        return remat__err(REMAT_SHAPE,
                          "%s: logits %s and labels %s do not match "
                          "(expected (N, C) and (N))",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(z, zs, sizeof zs),
                          remat__shape_str(y, ys, sizeof ys));
    if (g->nodes[n->in[1]].dtype != REMAT_I32 || g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: logits must be float32 and labels int32",
                          remat__node_label(n, lb, sizeof lb));
    n->shape = (remat__shape){0, {0}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

/* The largest logit of a row. */
static float row_max(const float *z, int64_t C) {
    float m = z[0];
    for (int64_t c = 1; c < C; c++) m = z[c] > m ? z[c] : m;
    return m;
}

/* sum_c e[c] in double, with a fixed rounding (remat__sum_partials). */
static double row_sum(const float *e, int64_t C) {
    double acc[REMAT__PARTIALS] = {0};
    remat__sum_partials(e, C, acc);
    return remat__partials_total(acc);
}

/* e[c] = exp(z[c] - max) for a row, in float (remat__expf on pw16's
 * vector kernels), and log(sum e) + max. */
static double row_lse(const float *z, float *e, int64_t C) {
    float m = row_max(z, C);
    remat__pw16_best()->exp_sub(e, z, m, C);
    return log(row_sum(e, C)) + (double)m;
}

/* Forward: each thread takes whole rows and writes their losses to the
 * workspace; thread 0 then sums them in row order, so the loss does not
 * depend on the thread count. Workspace: (N) doubles, then (nth, C) floats
 * of exponentials. */
static size_t ce_fwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    const remat__shape *z = remat__in_shape(g, n, 0);
    return (size_t)z->d[0] * sizeof(double) + (size_t)nth * (size_t)z->d[1] * sizeof(float);
}

static size_t ce_bwd_ws(const remat_graph *g, const remat__node *n, int nth);

/* Under the bf16 policy, logits stored in bf16 are read a row at a time
 * through a float32 row in the workspace (after the kernel's own), widened
 * exactly: the same arithmetic, so the same bits, as the executor's
 * float32 view of the whole tensor, without the view (a language model's
 * logits are its largest tensor). The backward rounds each gradient
 * through bf16 into the bf16 gradient, as the view's accumulation does. */
static int ce_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                      size_t *bwd) {
    if (dt[n->in[0]] != REMAT_BF16) return 0;
    size_t row = (size_t)nth * (size_t)remat__in_shape(g, n, 0)->d[1] * sizeof(float);
    *fwd = ce_fwd_ws(g, n, nth) + row;
    *bwd = ce_bwd_ws(g, n, nth) + row;
    return 1;
}

/* Row n of the logits as float32: z's own (float32), or widened into buf. */
static const float *logits_row(const remat__kctx *k, int64_t n, int64_t C, float *buf) {
    if (!k->dt) return (const float *)k->in[0]->data + n * C;
    remat__pw16_convert(buf, (const uint16_t *)k->in[0]->data + n * C, C, REMAT__CVT_UP);
    return buf;
}

static void ce_forward(const remat__kctx *k, int ith, int nth) {
    const int32_t *y = k->in[1]->data; // (N)
    int64_t N = k->in[0]->shape->d[0], C = k->in[0]->shape->d[1], lo, hi;
    double *row = k->ws;                                              // (N)
    float *e = (float *)(row + N) + (size_t)ith * (size_t)C;          // (C)
    float *zb = (float *)(row + N) + (size_t)(nth + ith) * (size_t)C; /* bf16: the row widened */
    remat__split(N, ith, nth, &lo, &hi);
    for (int64_t n = lo; n < hi; n++) { /* a bad label makes the loss NaN: the loss says so */
        const float *zn = logits_row(k, n, C, zb);
        row[n] = y[n] < 0 || y[n] >= C ? NAN : row_lse(zn, e, C) - (double)zn[y[n]];
    }
    remat__pool_barrier(k->pool);
    if (ith != 0) return;
    double sum = 0.0;
    for (int64_t n = 0; n < N; n++) sum += row[n];
    *(float *)k->out->data = (float)(sum / (double)N);
}

/* Backward: dz[n, c] += g (softmax(z_n)[c] - [c == y_n]), g = dloss / N,
 * one exponential per logit (kept in the thread's workspace row between
 * the sum and the update). Workspace: (nth, C) floats. */
static size_t ce_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    return (size_t)nth * (size_t)remat__in_shape(g, n, 0)->d[1] * sizeof(float);
}

static void ce_backward(const remat__kctx *k, int ith, int nth) {
    const int32_t *y = k->in[1]->data; // (N)
    float *dz = k->din[0];             // (N, C)
    if (!dz) return;
    int64_t N = k->in[0]->shape->d[0], C = k->in[0]->shape->d[1], lo, hi;
    float *e = (float *)k->ws + (size_t)ith * (size_t)C;          // (C)
    float *zb = (float *)k->ws + (size_t)(nth + ith) * (size_t)C; /* bf16: the row, then its gradient */
    double g = (double)k->dout[0] / (double)N;
    remat__split(N, ith, nth, &lo, &hi);
    for (int64_t n = lo; n < hi; n++) {
        const float *zn = logits_row(k, n, C, zb);
        float m = row_max(zn, C);
        remat__pw16_best()->exp_sub(e, zn, m, C);
        const double sum = row_sum(e, C);
        const float scale = (float)(g / sum); /* softmax times g = e * scale */
        float *dn = k->dt ? zb : dz + n * C;  /* bf16: the view's zeros, then rounded into dz */
        if (k->dt) memset(dn, 0, (size_t)C * sizeof *dn);
        int64_t t = y[n] >= 0 && y[n] < C ? y[n] : C;
        for (int64_t c = 0; c < t; c++) dn[c] += scale * e[c];
        if (t < C) dn[t] += (float)(g * ((double)e[t] / sum - 1.0));
        for (int64_t c = t + 1; c < C; c++) dn[c] += scale * e[c];
        if (k->dt) remat__pw16_convert((uint16_t *)dz + n * C, dn, C, REMAT__CVT_ACC_BF16);
    }
}

static double ce_flops(const remat_graph *g, const remat__node *n) {
    return 4.0 * (double)remat__numel(remat__in_shape(g, n, 0));
}

const remat__op remat__op_cross_entropy = {
    .autocast = REMAT__AC_FP32,
    .name = "cross_entropy",
    .min_in = 2,
    .max_in = 2,
    .shape = ce_shape,
    .forward = ce_forward,
    .backward = ce_backward,
    .fwd_ws = ce_fwd_ws,
    .bwd_ws = ce_bwd_ws,
    .bf16_ws = ce_bf16_ws,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1),
    .flags = REMAT__OP_LOSS | REMAT__OP_NODIFF_IN1,
    .flops = ce_flops,
    .family = REMAT_FAMILY_LOSS,
    .cuda = REMAT__CUDA(cross_entropy),
};

/* ------------------------------------------------------------------- mse */

static remat_status mse_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *a = remat__in_shape(g, n, 0), *b = remat__in_shape(g, n, 1);
    char lb[128], as[64], bs[64];
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->d[d] == b->d[d];
    if (!same || g->nodes[n->in[0]].dtype != REMAT_F32 || g->nodes[n->in[1]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: prediction %s and target %s must be float32 of one shape",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(a, as, sizeof as),
                          remat__shape_str(b, bs, sizeof bs));
    n->shape = (remat__shape){0, {0}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

/* Under bf16 (kctx.dt set) a bf16 prediction or target is read as
 * stored, each element widened, and its gradient computed into zero (the
 * view's buffer: 0 + d, or 0 - d for the target), rounded, added and
 * rounded again as the views do (pw16.h); float32 ones as under fp32. */
static void mse_forward(const remat__kctx *k, int ith, int nth) {
    (void)nth;
    if (ith != 0) return;
    const void *a = k->in[0]->data, *b = k->in[1]->data;
    int a16 = k->dt && k->dt[k->node->in[0]] == REMAT_BF16, b16 = k->dt && k->dt[k->node->in[1]] == REMAT_BF16;
    int64_t n = remat__numel(k->in[0]->shape);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)remat__pw16_ld(a, a16, i) - (double)remat__pw16_ld(b, b16, i);
        s += d * d;
    }
    *(float *)k->out->data = (float)(s / (double)n);
}

/* d/da = 2 (a - b) / n and d/db = -2 (a - b) / n, as PyTorch's mse_loss
 * when both inputs require grad (a siamese target that is another branch's
 * output); din[1] is NULL when the target is data. */
static void mse_backward(const remat__kctx *k, int ith, int nth) {
    const void *a = k->in[0]->data, *b = k->in[1]->data;
    int a16 = k->dt && k->dt[k->node->in[0]] == REMAT_BF16, b16 = k->dt && k->dt[k->node->in[1]] == REMAT_BF16;
    int64_t n = remat__numel(k->in[0]->shape), lo, hi;
    double g = 2.0 * (double)k->dout[0] / (double)n;
    remat__split(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float d = (float)(g * ((double)remat__pw16_ld(a, a16, i) - (double)remat__pw16_ld(b, b16, i)));
        if (k->din[0]) remat__pw16_acc(k->din[0], a16, i, d);
        if (!k->din[1]) continue;
        if (b16) { /* 0 - d: a NaN keeps its sign, as through the view */
            uint16_t *db = (uint16_t *)k->din[1];
            db[i] = remat__bf16_of(remat__f32_of(db[i]) + remat__bf16_round(0.0f - d));
        } else {
            k->din[1][i] -= d;
        }
    }
}

/* Under bf16 with a prediction or target in bf16 (its output, a loss, is
 * float32): the kernels above, no workspace. */
static int mse_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                       size_t *bwd) {
    (void)g, (void)nth;
    *fwd = *bwd = 0;
    return dt[n->in[0]] == REMAT_BF16 || dt[n->in[1]] == REMAT_BF16;
}

static double mse_flops(const remat_graph *g, const remat__node *n) {
    return 3.0 * (double)remat__numel(remat__in_shape(g, n, 0));
}

const remat__op remat__op_mse = {
    .autocast = REMAT__AC_FP32,
    .name = "mse",
    .min_in = 2,
    .max_in = 2,
    .shape = mse_shape,
    .forward = mse_forward,
    .backward = mse_backward,
    .bf16_ws = mse_bf16_ws,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1),
    .flags = REMAT__OP_LOSS,
    .flops = mse_flops,
    .family = REMAT_FAMILY_LOSS,
    .cuda = REMAT__CUDA(mse),
};
