/* embedding.c: a lookup table, PyTorch's F.embedding.
 *
 * Inputs: ids, int32 of any shape (up to 3 dimensions), and weight
 * (num, dim). Output (..., dim): row ids[t] of the weight for each id t.
 * Backward scatter-adds dy into the weight's gradient:
 *   dweight[ids[t], :] += dy[t, :]
 * Several ids may name one row, so the work is split by columns of dim:
 * each thread owns a range of columns and walks the ids in order, which
 * never races and gives the same bits for any thread count.
 *
 * Out-of-range ids (< 0 or >= num) cannot be reported from a kernel. The
 * forward pass fills their output rows with NaN, so the loss of a step
 * that meets one is NaN (as cross-entropy does for a bad label), and the
 * backward pass adds nothing for them; nothing is read or written out of
 * bounds. Data paths should validate ids before binding them.
 */
#include "pw16.h"

#include <math.h>
#include <stdio.h>

static remat_status emb_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *ids = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    char lb[128], is[64], ws[64];
    if (g->nodes[n->in[0]].dtype != REMAT_I32 || ids->ndim + 1 > REMAT_MAX_DIMS)
        return remat__err(REMAT_SHAPE, "%s: ids %s must be int32 with at most %d dimensions",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(ids, is, sizeof is),
                          REMAT_MAX_DIMS - 1);
    if (w->ndim != 2 || g->nodes[n->in[1]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: weight %s must be float32 (num, dim)", remat__node_label(n, lb, sizeof lb),
                          remat__shape_str(w, ws, sizeof ws));
    if (w->d[0] > INT32_MAX)
        return remat__err(REMAT_SHAPE, "%s: weight %s has more rows than int32 ids can name",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(w, ws, sizeof ws));
    n->shape = *ids;
    n->shape.d[n->shape.ndim++] = w->d[1];
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static void emb_forward(const remat__kctx *k, int ith, int nth) {
    const int32_t *ids = k->in[0]->data;                    // (N)
    const void *w = k->in[1]->data;                         // (num, dim)
    void *y = k->out->data;                                 // (N, dim)
    int w16 = k->dt && k->dt[k->node->in[1]] == REMAT_BF16; /* y's dtype too */
    int64_t N = remat__numel(k->in[0]->shape), num = k->in[1]->shape->d[0], D = k->in[1]->shape->d[1];
    int64_t lo, hi;
    remat__split(N, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t id = ids[t];
        if (id >= 0 && id < num) remat__pw16_copy(y, w16, t * D, w, w16, id * D, D);
        else
            for (int64_t j = 0; j < D; j++) remat__pw16_st(y, w16, t * D + j, NAN); /* see the top of the file */
    }
}

/* b bytes rounded up to a cache line: each thread's part of the workspace
 * starts on one. */
static size_t lines(size_t b) { return (b + 63) & ~(size_t)63; }

/* The workspace of a bf16 weight's backward, per thread: the ids' order
 * sorted by row (N int32), the rows' starts in it (num + 1 int32) and a
 * float32 row of dim (the thread's columns of it). */
static size_t emb_bf16_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    int64_t N = remat__numel(remat__in_shape(g, n, 0));
    const remat__shape *w = remat__in_shape(g, n, 1);
    size_t per = (size_t)(N + w->d[0] + 1) * sizeof(int32_t) + (size_t)w->d[1] * sizeof(float);
    return (size_t)nth * lines(per);
}

static void emb_backward_bf16(const remat__kctx *k, int ith, int nth, int64_t lo, int64_t hi) {
    const int32_t *ids = k->in[0]->data;
    uint16_t *dw = (uint16_t *)k->din[1];
    const uint16_t *dy = (const uint16_t *)k->dout; // (N, dim), bf16 as the weight
    int64_t N = remat__numel(k->in[0]->shape), num = k->in[1]->shape->d[0], D = k->in[1]->shape->d[1];
    size_t per = lines((size_t)(N + num + 1) * sizeof(int32_t) + (size_t)D * sizeof(float));
    int32_t *order = (int32_t *)((unsigned char *)k->ws + (size_t)ith * per), *start = order + N; // (N), (num + 1)
    float *acc = (float *)(start + num + 1);                                                      // (D)
    (void)nth;
    memset(start, 0, (size_t)(num + 1) * sizeof *start);
    for (int64_t t = 0; t < N; t++)
        if (ids[t] >= 0 && ids[t] < num) start[ids[t] + 1]++;
    for (int64_t v = 0; v < num; v++) start[v + 1] += start[v];
    for (int64_t t = 0; t < N; t++) /* counting sort, stable: each row's ids in order */
        if (ids[t] >= 0 && ids[t] < num) order[start[ids[t]]++] = (int32_t)t;
    for (int64_t v = num; v > 0; v--) start[v] = start[v - 1]; /* the starts again */
    start[0] = 0;
    for (int64_t v = 0; v < num; v++) {
        for (int64_t j = lo; j < hi; j++) acc[j] = 0.0f;
        for (int32_t e = start[v]; e < start[v + 1]; e++)
            for (int64_t j = lo; j < hi; j++) acc[j] += remat__f32_of(dy[order[e] * D + j]);
        remat__pw16_best()->convert(dw + v * D, acc, lo, hi, REMAT__CVT_ACC_BF16);
    }
}

static void emb_backward(const remat__kctx *k, int ith, int nth) {
    const int32_t *ids = k->in[0]->data; // (N)
    const float *dy = k->dout;           // (N, dim)
    float *dw = k->din[1];               // (num, dim)
    if (!dw) return;
    int64_t N = remat__numel(k->in[0]->shape), num = k->in[1]->shape->d[0], D = k->in[1]->shape->d[1];
    int64_t lo, hi;
    remat__split(D, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    if (k->dt && k->dt[k->node->in[1]] == REMAT_BF16) {
        emb_backward_bf16(k, ith, nth, lo, hi);
        return;
    }
    for (int64_t t = 0; t < N; t++) {
        int64_t id = ids[t];
        if (id < 0 || id >= num) continue; /* its output was NaN: the loss says so */
        float *row = dw + id * D;
        const float *g = dy + t * D;
        for (int64_t j = lo; j < hi; j++) row[j] += g[j];
    }
}

/* Under bf16 with the weight a bf16 value (so the output is): the kernels
 * above, the backward with its per-thread sort and row. */
static int emb_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                       size_t *bwd) {
    *fwd = 0;
    *bwd = emb_bf16_bwd_ws(g, n, nth);
    return dt[n->in[1]] == REMAT_BF16;
}

static double emb_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return (double)remat__numel(&n->shape);
}

const remat__op remat__op_embedding = {
    .autocast = REMAT__AC_FIRST,
    .name = "embedding",
    .min_in = 2,
    .max_in = 2,
    .shape = emb_shape,
    .forward = emb_forward,
    .backward = emb_backward,
    .saves = REMAT__SAVE_IN(0),
    .bf16_ws = emb_bf16_ws,
    .flops = emb_flops,
    .family = REMAT_FAMILY_COPY,
    .cuda = REMAT__CUDA(embedding),
};
