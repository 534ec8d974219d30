/* tensor_ops.c: permute (and transpose), slice, and a broadcasting add.
 *
 * permute: iattr[0..ndim) is a permutation p of the input's dimensions;
 *   out.shape[i] = x.shape[p[i]] (torch.permute), copied, not aliased.
 * slice: iattr = {dim, start, len}: elements [start, start + len) of
 *   dimension dim (x.narrow(dim, start, len)).
 * add_broadcast: y = x + b where b's shape equals the last b.ndim
 *   dimensions of x (b is repeated over the leading ones, as PyTorch
 *   broadcasting does); db sums dy over the leading dimensions.
 * Forward and backward of permute and slice are splits of the output into
 * disjoint rows, and every output element maps to a distinct input
 * element, so the backward scatter never races. add_broadcast's db is
 * split by elements of b, each summed by one thread in order in a double
 * workspace. Every result is the same for any thread count.
 * Under the bf16 policy each reads and writes its values as stored
 * (pw16.h: widened where read, rounded where written, a bf16 input's
 * gradient added as the float32 views add it), with the views' bits and
 * no views: permute and slice with no workspace, add_broadcast with its
 * float32 kernel's double sums of db.
 */
#include "pw16.h"

#include <stdio.h>

/* Whether a value of node k is stored in bf16 (kctx.dt set: the bf16
 * policy's native kernels); 0 for every value under fp32. */
static int b16_of(const remat__kctx *k, int32_t node) { return k->dt && k->dt[node] == REMAT_BF16; }

static double copy_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return (double)remat__numel(&n->shape);
}

/* --------------------------------------------------------------- permute */

static remat_status permute_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64];
    int seen[REMAT_MAX_DIMS] = {0}, ok = x->ndim >= 1;
    for (int i = 0; ok && i < x->ndim; i++) {
        int64_t p = n->iattr[i];
        ok = p >= 0 && p < x->ndim && !seen[p];
        if (ok) seen[p] = 1;
    }
    if (!ok) {
        char ps[64];
        size_t u = (size_t)snprintf(ps, sizeof ps, "(");
        for (int i = 0; i < x->ndim && u < sizeof ps; i++)
            u += (size_t)snprintf(ps + u, sizeof ps - u, "%s%lld", i ? ", " : "", (long long)n->iattr[i]);
        if (u < sizeof ps) snprintf(ps + u, sizeof ps - u, ")");
        return remat__err(REMAT_SHAPE, "%s: %s is not a permutation of the %d dimensions of input %s",
                          remat__node_label(n, lb, sizeof lb), ps, x->ndim, remat__shape_str(x, xs, sizeof xs));
    }
    n->shape.ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) n->shape.d[i] = x->d[n->iattr[i]];
    n->dtype = g->nodes[n->in[0]].dtype;
    return REMAT_OK;
}

/* Input strides in output order: stride[i] is the input stride of output
 * dimension i. */
static void permute_strides(const remat__kctx *k, int64_t stride[REMAT_MAX_DIMS]) {
    const remat__shape *x = k->in[0]->shape;
    int64_t in_stride[REMAT_MAX_DIMS], s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) in_stride[i] = s, s *= x->d[i];
    for (int i = 0; i < x->ndim; i++) stride[i] = in_stride[k->node->iattr[i]];
}

/* Offset in the input of the first element of output row r (all output
 * dimensions but the last). */
static int64_t permute_row_offset(const remat__shape *os, const int64_t *stride, int64_t r) {
    int64_t off = 0;
    for (int i = os->ndim - 2; i >= 0; i--) {
        off += (r % os->d[i]) * stride[i];
        r /= os->d[i];
    }
    return off;
}

static void permute_forward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *os = &k->node->shape;
    int64_t stride[REMAT_MAX_DIMS], L = os->d[os->ndim - 1], lo, hi;
    permute_strides(k, stride);
    int64_t sl = stride[os->ndim - 1];
    remat__split(remat__numel(os) / L, ith, nth, &lo, &hi);
    if (b16_of(k, k->node_id)) { /* bf16 in and out: copied as the views copy (a NaN made quiet) */
        const uint16_t *x = k->in[0]->data;
        uint16_t *y = k->out->data;
        for (int64_t r = lo; r < hi; r++) {
            const uint16_t *src = x + permute_row_offset(os, stride, r);
            uint16_t *dst = y + r * L;
            for (int64_t j = 0; j < L; j++) dst[j] = remat__bf16_of(remat__f32_of(src[j * sl]));
        }
        return;
    }
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    for (int64_t r = lo; r < hi; r++) {
        const float *src = x + permute_row_offset(os, stride, r);
        float *dst = y + r * L;
        for (int64_t j = 0; j < L; j++) dst[j] = src[j * sl];
    }
}

static void permute_backward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *os = &k->node->shape;
    int64_t stride[REMAT_MAX_DIMS], L = os->d[os->ndim - 1], lo, hi;
    permute_strides(k, stride);
    int64_t sl = stride[os->ndim - 1];
    remat__split(remat__numel(os) / L, ith, nth, &lo, &hi);
    if (b16_of(k, k->node_id)) { /* bf16: added as the views add */
        const uint16_t *dy = (const uint16_t *)k->dout;
        void *dx = k->din[0];
        for (int64_t r = lo; r < hi; r++) {
            int64_t o = permute_row_offset(os, stride, r);
            for (int64_t j = 0; j < L; j++) remat__pw16_acc(dx, 1, o + j * sl, remat__f32_of(dy[r * L + j]));
        }
        return;
    }
    const float *dy = k->dout;
    float *dx = k->din[0];
    for (int64_t r = lo; r < hi; r++) {
        float *dst = dx + permute_row_offset(os, stride, r);
        const float *src = dy + r * L;
        for (int64_t j = 0; j < L; j++) dst[j * sl] += src[j];
    }
}

/* Under bf16 with x stored in bf16 (so y, dy and dx are): the kernels
 * above read and write them as stored, with no workspace (permute and
 * slice). */
static int copy_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                        size_t *bwd) {
    (void)g, (void)nth;
    *fwd = *bwd = 0;
    return dt[n->in[0]] == REMAT_BF16;
}

const remat__op remat__op_permute = {
    .autocast = REMAT__AC_FIRST,
    .name = "permute",
    .min_in = 1,
    .max_in = 1,
    .shape = permute_shape,
    .forward = permute_forward,
    .backward = permute_backward,
    .saves = 0,
    .flops = copy_flops,
    .bf16_ws = copy_bf16_ws,
    .family = REMAT_FAMILY_COPY,
    .cuda = REMAT__CUDA(permute),
};

/* ----------------------------------------------------------------- slice */

static remat_status slice_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64];
    int64_t dim = n->iattr[0], start = n->iattr[1], len = n->iattr[2];
    if (dim < 0 || dim >= x->ndim || start < 0 || len <= 0 || start > x->d[dim] - len)
        return remat__err(REMAT_SHAPE, "%s: elements [%lld, %lld) of dimension %lld are not inside input %s",
                          remat__node_label(n, lb, sizeof lb), (long long)start, (long long)(start + len),
                          (long long)dim, remat__shape_str(x, xs, sizeof xs));
    n->shape = *x;
    n->shape.d[dim] = len;
    n->dtype = g->nodes[n->in[0]].dtype;
    return REMAT_OK;
}

/* The output as rows of `inner` elements: row r is (outer o, index i) and
 * starts at input offset (o * D + start + i) * inner. */
typedef struct {
    int64_t rows, len, D, start, inner;
} slice_geom;

static slice_geom slice_of(const remat__kctx *k) {
    const remat__shape *x = k->in[0]->shape;
    int64_t dim = k->node->iattr[0];
    slice_geom s = {1, k->node->iattr[2], x->d[dim], k->node->iattr[1], 1};
    for (int i = 0; i < dim; i++) s.rows *= x->d[i];
    for (int i = (int)dim + 1; i < x->ndim; i++) s.inner *= x->d[i];
    s.rows *= s.len;
    return s;
}

static void slice_forward(const remat__kctx *k, int ith, int nth) {
    slice_geom s = slice_of(k);
    int b16 = b16_of(k, k->node_id); /* x's dtype too */
    int64_t lo, hi;
    remat__split(s.rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / s.len, i = r % s.len;
        remat__pw16_copy(k->out->data, b16, r * s.inner, k->in[0]->data, b16, (o * s.D + s.start + i) * s.inner,
                         s.inner);
    }
}

/* Under bf16 the views add their whole zeroed dx, so the elements of a
 * bf16 dx outside the slice get 0 added and are rounded again (-0 becomes
 * +0, a signalling NaN quiet): the kernel does the same, splitting the
 * input's rows. */
static void slice_backward(const remat__kctx *k, int ith, int nth) {
    slice_geom s = slice_of(k);
    int64_t lo, hi;
    if (b16_of(k, k->node_id)) {
        remat__split(s.rows / s.len * s.D, ith, nth, &lo, &hi); /* rows of x */
        uint16_t *dx = (uint16_t *)k->din[0];
        for (int64_t r = lo; r < hi; r++) {
            int64_t o = r / s.D, i = r % s.D - s.start;
            if (i >= 0 && i < s.len) {
                remat__pw16_acc_n(dx, 1, r * s.inner, k->dout, 1, (o * s.len + i) * s.inner, s.inner);
            } else {
                for (int64_t j = r * s.inner; j < (r + 1) * s.inner; j++) remat__pw16_acc(dx, 1, j, 0.0f);
            }
        }
        return;
    }
    remat__split(s.rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / s.len, i = r % s.len;
        float *d = k->din[0] + (o * s.D + s.start + i) * s.inner;
        const float *g = k->dout + r * s.inner;
        for (int64_t j = 0; j < s.inner; j++) d[j] += g[j];
    }
}

const remat__op remat__op_slice = {
    .autocast = REMAT__AC_FIRST,
    .name = "slice",
    .min_in = 1,
    .max_in = 1,
    .shape = slice_shape,
    .forward = slice_forward,
    .backward = slice_backward,
    .saves = 0,
    .flops = copy_flops,
    .bf16_ws = copy_bf16_ws,
    .family = REMAT_FAMILY_COPY,
    .cuda = REMAT__CUDA(slice),
};

/* --------------------------------------------------------- add_broadcast */

static remat_status addb_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0), *b = remat__in_shape(g, n, 1);
    char lb[128], xs[64], bs[64];
    int ok = b->ndim >= 1 && b->ndim <= x->ndim && g->nodes[n->in[0]].dtype == REMAT_F32 &&
             g->nodes[n->in[1]].dtype == REMAT_F32;
    for (int i = 0; ok && i < b->ndim; i++) ok = b->d[i] == x->d[x->ndim - b->ndim + i];
    if (!ok)
        return remat__err(REMAT_SHAPE, "%s: %s is not the trailing shape of input %s (both float32)",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(b, bs, sizeof bs),
                          remat__shape_str(x, xs, sizeof xs));
    n->shape = *x;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static size_t addb_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    (void)nth;
    return (size_t)remat__numel(remat__in_shape(g, n, 1)) * sizeof(double);
}

static void addb_forward(const remat__kctx *k, int ith, int nth) {
    int64_t M = remat__numel(k->in[1]->shape), lo, hi;
    remat__split(remat__numel(&k->node->shape) / M, ith, nth, &lo, &hi);
    if (k->dt) { /* as stored: widened, added in float32, rounded */
        int x16 = b16_of(k, k->node->in[0]), b16 = b16_of(k, k->node->in[1]), y16 = b16_of(k, k->node_id);
        for (int64_t o = lo; o < hi; o++)
            for (int64_t j = 0; j < M; j++)
                remat__pw16_st(k->out->data, y16, o * M + j,
                               remat__pw16_ld(k->in[0]->data, x16, o * M + j) + remat__pw16_ld(k->in[1]->data, b16, j));
        return;
    }
    const float *x = k->in[0]->data, *b = k->in[1]->data;
    float *y = k->out->data;
    for (int64_t o = lo; o < hi; o++)
        for (int64_t j = 0; j < M; j++) y[o * M + j] = x[o * M + j] + b[j];
}

/* dx split by elements, then db split by b's elements: each summed in
 * double over the rows in order, then added as the float32 kernel adds it
 * (a bf16 db: computed into zero, rounded, added, rounded, as through its
 * view). */
static void addb_backward(const remat__kctx *k, int ith, int nth) {
    int64_t M = remat__numel(k->in[1]->shape), R = remat__numel(&k->node->shape) / M, lo, hi;
    int y16 = b16_of(k, k->node_id);
    const void *dy = k->dout;
    if (k->din[0]) {
        remat__split(R * M, ith, nth, &lo, &hi);
        if (hi > lo) remat__pw16_acc_n(k->din[0], b16_of(k, k->node->in[0]), lo, dy, y16, lo, hi - lo);
    }
    if (!k->din[1]) return;
    double *s = k->ws; // (M): this thread owns [lo, hi)
    remat__split(M, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    for (int64_t j = lo; j < hi; j++) s[j] = 0.0;
    for (int64_t o = 0; o < R; o++)
        for (int64_t j = lo; j < hi; j++) s[j] += remat__pw16_ld(dy, y16, o * M + j);
    int b16 = b16_of(k, k->node->in[1]);
    for (int64_t j = lo; j < hi; j++) remat__pw16_acc(k->din[1], b16, j, (float)s[j]);
}

/* Under bf16 with x or b (or both, and then y) in bf16: the kernels above
 * on the values as stored, with the float32 kernel's workspace. */
static int addb_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                        size_t *bwd) {
    *fwd = 0;
    *bwd = addb_bwd_ws(g, n, nth);
    return dt[n->in[0]] == REMAT_BF16 || dt[n->in[1]] == REMAT_BF16;
}

const remat__op remat__op_add_broadcast = {
    .autocast = REMAT__AC_PROMOTE,
    .name = "add_broadcast",
    .min_in = 2,
    .max_in = 2,
    .shape = addb_shape,
    .forward = addb_forward,
    .backward = addb_backward,
    .saves = 0,
    .bwd_ws = addb_bwd_ws,
    .bf16_ws = addb_bf16_ws,
    .flops = copy_flops,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(add_broadcast),
};
