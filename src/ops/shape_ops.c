/* shape_ops.c: reshape (and so flatten) and channel concatenation.
 *
 * Reshape copies rather than aliasing, so that every value owns its bytes
 * and the accounting stays a plain sum. Concat joins along dimension 1 of
 * 2-D or 4-D tensors. Under the bf16 policy both read and write their
 * values as stored (pw16.h), with the float32 views' bits: a concat of
 * bf16 and float32 inputs (a float32 output, by the policy's rule) widens
 * the bf16 parts and adds into their gradients as the views add.
 */
#include "pw16.h"

#include <stdio.h>

/* Copies do no arithmetic; one "operation" per element moved keeps their
 * cost visible to the cost model. */
static double copy_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return (double)remat__numel(&n->shape);
}

static remat_status reshape_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64], ts[64];
    remat__shape t = {(int)n->iattr[0], {0}};
    for (int i = 0; i < t.ndim; i++) t.d[i] = n->iattr[1 + i];
    if (remat__numel(&t) != remat__numel(x))
        return remat__err(REMAT_SHAPE, "%s: cannot reshape %s (%lld elements) to %s (%lld elements)",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs),
                          (long long)remat__numel(x), remat__shape_str(&t, ts, sizeof ts), (long long)remat__numel(&t));
    n->shape = t;
    n->dtype = g->nodes[n->in[0]].dtype;
    return REMAT_OK;
}

static void reshape_forward(const remat__kctx *k, int ith, int nth) {
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    if (k->dt) { /* bf16 (pw16.h): widened and rounded, as the views (a NaN made quiet) */
        for (int64_t i = lo; i < hi; i++) remat__pw16_st(y, 1, i, remat__pw16_ld(x, 1, i));
        return;
    }
    if (hi > lo) memcpy(y + lo, x + lo, (size_t)(hi - lo) * sizeof *y);
}

static void reshape_backward(const remat__kctx *k, int ith, int nth) {
    int64_t lo, hi;
    remat__split(remat__numel(&k->node->shape), ith, nth, &lo, &hi);
    if (k->dt) { /* bf16: added as the views add */
        for (int64_t i = lo; i < hi; i++) remat__pw16_acc(k->din[0], 1, i, remat__pw16_ld(k->dout, 1, i));
        return;
    }
    for (int64_t i = lo; i < hi; i++) k->din[0][i] += k->dout[i];
}

/* Under bf16 with x stored in bf16 (so y, dy and dx are): the kernels
 * above read and write them as stored, with no workspace. */
static int reshape_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                           size_t *bwd) {
    (void)g, (void)nth;
    *fwd = *bwd = 0;
    return dt[n->in[0]] == REMAT_BF16;
}

const remat__op remat__op_reshape = {
    .autocast = REMAT__AC_FIRST,
    .name = "reshape",
    .min_in = 1,
    .max_in = 1,
    .shape = reshape_shape,
    .forward = reshape_forward,
    .backward = reshape_backward,
    .saves = 0,
    .flops = copy_flops,
    .bf16_ws = reshape_bf16_ws,
    .family = REMAT_FAMILY_COPY,
    .cuda = REMAT__CUDA(reshape),
    .flags = REMAT__OP_ELEMENTWISE, /* element i is element i, in flat order */
};

/* ---------------------------------------------------------------- concat */

static remat_status concat_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *a = remat__in_shape(g, n, 0);
    char lb[128], as[64], bs[64];
    if (a->ndim != 2 && a->ndim != 4)
        return remat__err(REMAT_SHAPE, "%s: inputs must be 2-D or 4-D, got %s", remat__node_label(n, lb, sizeof lb),
                          remat__shape_str(a, as, sizeof as));
    remat__shape out = *a;
    for (int i = 1; i < n->n_in; i++) {
        const remat__shape *b = remat__in_shape(g, n, i);
        int ok = b->ndim == a->ndim;
        for (int d = 0; ok && d < a->ndim; d++) ok = d == 1 || a->d[d] == b->d[d];
        if (!ok)
            return remat__err(REMAT_SHAPE, "%s: input %d %s does not match input 0 %s outside dimension 1",
                              remat__node_label(n, lb, sizeof lb), i, remat__shape_str(b, bs, sizeof bs),
                              remat__shape_str(a, as, sizeof as));
        out.d[1] += b->d[1];
    }
    for (int i = 0; i < n->n_in; i++)
        if (g->nodes[n->in[i]].dtype != REMAT_F32)
            return remat__err(REMAT_SHAPE, "%s: inputs must be float32", remat__node_label(n, lb, sizeof lb));
    n->shape = out;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

/* Elements per batch item after dimension 1, for a part with c channels. */
static int64_t inner(const remat__shape *s) {
    int64_t r = 1;
    for (int d = 2; d < s->ndim; d++) r *= s->d[d];
    return r;
}

/* Whether a value of node k is stored in bf16 (kctx.dt set: the bf16
 * policy's native kernels); 0 for every value under fp32. */
static int b16_of(const remat__kctx *k, int32_t node) { return k->dt && k->dt[node] == REMAT_BF16; }

static void concat_forward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *os = &k->node->shape;
    int64_t N = os->d[0], in_sz = inner(os), lo, hi;
    int out16 = b16_of(k, k->node_id);
    remat__split(N, ith, nth, &lo, &hi);
    void *y = k->out->data; // (N, sum C_i, ...), bf16 or float32 as stored
    for (int64_t b = lo; b < hi; b++) {
        int64_t off = 0;
        for (int i = 0; i < k->node->n_in; i++) {
            int64_t c = k->in[i]->shape->d[1];
            const void *x = k->in[i]->data; // (N, C_i, ...)
            remat__pw16_copy(y, out16, (b * os->d[1] + off) * in_sz, x, b16_of(k, k->node->in[i]), b * c * in_sz,
                             c * in_sz);
            off += c;
        }
    }
}

/* Input i's gradient is finished for a batch item before input i + 1's
 * (concat(x, x): the order in which the views add their buffers). */
static void concat_backward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *os = &k->node->shape;
    int64_t N = os->d[0], in_sz = inner(os), lo, hi;
    int out16 = b16_of(k, k->node_id);
    remat__split(N, ith, nth, &lo, &hi);
    const void *dy = k->dout; // (N, sum C_i, ...)
    for (int64_t b = lo; b < hi; b++) {
        int64_t off = 0;
        for (int i = 0; i < k->node->n_in; i++) {
            int64_t c = k->in[i]->shape->d[1], m = c * in_sz;
            void *dx = k->din[i]; // (N, C_i, ...)
            if (dx) remat__pw16_acc_n(dx, b16_of(k, k->node->in[i]), b * m, dy, out16, (b * os->d[1] + off) * in_sz, m);
            off += c;
        }
    }
}

const remat__op remat__op_concat = {
    .autocast = REMAT__AC_PROMOTE,
    .name = "concat",
    .min_in = 1,
    .max_in = REMAT__MAX_IN,
    .shape = concat_shape,
    .forward = concat_forward,
    .backward = concat_backward,
    .saves = 0,
    .flops = copy_flops,
    .bf16_ws = remat__pw16_ws, /* any bf16 input: copied and added as stored, no workspace */
    .family = REMAT_FAMILY_COPY,
    .cuda = REMAT__CUDA(concat),
};
