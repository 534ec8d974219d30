/* attention.c: softmax over the last dimension, and causal multi-head
 * self-attention as in GPT-2.
 *
 * softmax: y = exp(x - max) / sum exp(x - max) per row of the last
 * dimension (exp: remat__expf on pw16's vector kernels, as attention's
 * rows); backward reads the output: dx += y (dy - sum_j dy_j y_j).
 * Under the bf16 policy a bf16 x (so y, dy and dx) is read a row at a
 * time into the thread's float32 rows of the workspace, where the float32
 * kernel's loops run; y is rounded as written and dx added as the views
 * add it (pw16.h): the views' bits, with C floats per thread forward and
 * 2 C backward in place of whole views.
 *
 * attention: input qkv (B, T, 3C), q, k and v concatenated on the last
 * dimension in that order (GPT-2's c_attn output); iattr[0] = H heads of
 * width D = C / H. For each batch item b and head h, with Q, K, V the
 * (T, D) slices of head h:
 *   S = Q K^T / sqrt(D),  P = softmax(S) over j <= i (causal; P_ij = 0 for
 *   j > i),  O = P V, written to columns [h D, (h+1) D) of out (B, T, C).
 * The probabilities P (B, H, T, T) are the aux value: backward reads them
 * and qkv, never recomputing the softmax:
 *   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),
 *   dQ += dS K / sqrt(D),  dK += dS^T Q / sqrt(D)
 * (dS of the masked entries is 0). The products run through cblas_sgemm
 * on the full T x T square (the masked half is zeros: simpler than
 * blocking, and attention is a small share of GPT-2's FLOPs next to its
 * linear layers). Work is split by (b, h) pairs; each pair is computed by
 * one thread with the same calls in the same order, so results do not
 * depend on the thread count. Backward needs a T x T workspace per thread.
 * Under the bf16 policy (attn_bf16_ws: y, and so dy, is bf16) the kernels
 * read qkv and dy and write y and dqkv as stored, a (b, h) pair at a
 * time: the head's q, k, v (and dO) widened into the thread's float32
 * (T, D) matrices in the workspace (a float32 qkv rounded through bf16,
 * as a product's view rounds it), the same cblas_sgemm calls on them, O
 * rounded into y, and dq, dk, dv computed into zeroed matrices and added
 * into dqkv as the views add their zeroed gradient (REMAT__CVT_ACC_BF16,
 * or _ACC_F32 into a float32 one): every element of qkv belongs to one
 * pair, so these are the views' bits (test_pw16), with 3 (T, D) floats
 * per thread forward and 7 more backward in place of whole views of qkv,
 * y and dqkv. P stays float32 in aux either way.
 */
#include "pw16.h"

#include <cblas.h>
#include <math.h>

/* ---------------------------------------------------------------- softmax */

static remat_status softmax_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64];
    if (x->ndim < 1 || g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: input %s must be a float32 tensor of at least 1 dimension",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs));
    n->shape = *x;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

/* Softmax of the first `len` of the C entries of one row in place; the
 * entries from len on become 0 (the causal mask). */
static void softmax_row(float *r, int64_t len, int64_t C) {
    float m = r[0];
    for (int64_t j = 1; j < len; j++) m = r[j] > m ? r[j] : m;
    remat__pw16_best()->exp_sub(r, r, m, len);
    double s = 0.0;
    for (int64_t j = 0; j < len; j++) s += r[j];
    float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < len; j++) r[j] *= inv;
    for (int64_t j = len; j < C; j++) r[j] = 0.0f;
}

static void softmax_forward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *s = k->in[0]->shape;
    int64_t C = s->d[s->ndim - 1], R = remat__numel(s) / C, lo, hi;
    remat__split(R, ith, nth, &lo, &hi);
    if (k->dt) { /* bf16 (softmax_bf16_ws): row by row through this thread's float32 row */
        const remat__pw16_kernels *K = remat__pw16_best();
        const uint16_t *x = k->in[0]->data;
        uint16_t *y = k->out->data;
        float *row = (float *)k->ws + (size_t)ith * (size_t)C; // (C)
        for (int64_t r = lo; r < hi; r++) {
            K->convert(row, x + r * C, 0, C, REMAT__CVT_UP);
            softmax_row(row, C, C);
            K->convert(y + r * C, row, 0, C, REMAT__CVT_DOWN);
        }
        return;
    }
    const float *x = k->in[0]->data;
    float *y = k->out->data;
    if (hi > lo) memcpy(y + lo * C, x + lo * C, (size_t)((hi - lo) * C) * sizeof *y);
    for (int64_t r = lo; r < hi; r++) softmax_row(y + r * C, C, C);
}

/* dx_j += y_j (dy_j - sum_k dy_k y_k) for the first len entries of a row. */
static void softmax_row_backward(const float *y, const float *dy, float *dx, int64_t len) {
    double d = 0.0;
    for (int64_t j = 0; j < len; j++) d += (double)dy[j] * y[j];
    float df = (float)d;
    for (int64_t j = 0; j < len; j++) dx[j] += y[j] * (dy[j] - df);
}

/* bf16: y and dy widened into this thread's two rows; the gradient
 * computed into zeros (the second row, once dy is read: the views'
 * zeroed buffer), then rounded and added into dx. */
static void softmax_backward_bf16(const remat__kctx *k, int64_t C, int64_t lo, int64_t hi, int ith) {
    const remat__pw16_kernels *K = remat__pw16_best();
    const uint16_t *y = k->out->data, *dy = (const uint16_t *)k->dout;
    uint16_t *dx = (uint16_t *)k->din[0];
    float *yr = (float *)k->ws + (size_t)(2 * ith) * (size_t)C, *gr = yr + C; // (C) each
    for (int64_t r = lo; r < hi; r++) {
        K->convert(yr, y + r * C, 0, C, REMAT__CVT_UP);
        K->convert(gr, dy + r * C, 0, C, REMAT__CVT_UP);
        double d = 0.0;
        for (int64_t j = 0; j < C; j++) d += (double)gr[j] * yr[j];
        float df = (float)d;
        for (int64_t j = 0; j < C; j++) gr[j] = 0.0f + yr[j] * (gr[j] - df);
        K->convert(dx + r * C, gr, 0, C, REMAT__CVT_ACC_BF16);
    }
}

static void softmax_backward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *s = k->in[0]->shape;
    int64_t C = s->d[s->ndim - 1], R = remat__numel(s) / C, lo, hi;
    remat__split(R, ith, nth, &lo, &hi);
    if (k->dt) {
        softmax_backward_bf16(k, C, lo, hi, ith);
        return;
    }
    const float *y = k->out->data, *dy = k->dout;
    float *dx = k->din[0];
    for (int64_t r = lo; r < hi; r++) softmax_row_backward(y + r * C, dy + r * C, dx + r * C, C);
}

/* Under bf16 with x stored in bf16 (so y, dy and dx are): the kernels
 * above, with a float32 row per thread forward and two backward. */
static int softmax_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                           size_t *bwd) {
    (void)g;
    size_t row = (size_t)n->shape.d[n->shape.ndim - 1] * sizeof(float);
    *fwd = (size_t)nth * row;
    *bwd = 2 * (size_t)nth * row;
    return dt[n->in[0]] == REMAT_BF16;
}

static double softmax_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 5.0 * (double)remat__numel(&n->shape);
}

const remat__op remat__op_softmax = {
    .autocast = REMAT__AC_FIRST,
    .name = "softmax",
    .min_in = 1,
    .max_in = 1,
    .shape = softmax_shape,
    .forward = softmax_forward,
    .backward = softmax_backward,
    .saves = REMAT__SAVE_OUT,
    .flops = softmax_flops,
    .bf16_ws = softmax_bf16_ws,
    .family = REMAT_FAMILY_POINTWISE,
    .cuda = REMAT__CUDA(softmax),
};

/* -------------------------------------------------------------- attention */

static remat_status attn_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64];
    int64_t H = n->iattr[0];
    if (x->ndim != 3 || g->nodes[n->in[0]].dtype != REMAT_F32 || x->d[2] % 3 != 0)
        return remat__err(REMAT_SHAPE, "%s: input %s must be float32 (B, T, 3C): q, k and v concatenated",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs));
    int64_t C = x->d[2] / 3;
    if (H <= 0 || C % H != 0)
        return remat__err(REMAT_SHAPE, "%s: %lld heads do not divide the width C = %lld of input %s",
                          remat__node_label(n, lb, sizeof lb), (long long)H, (long long)C,
                          remat__shape_str(x, xs, sizeof xs));
    if (x->d[1] > INT32_MAX / x->d[1] || 3 * C > INT32_MAX)
        return remat__err(REMAT_SHAPE, "%s: input %s is too large for BLAS's int dimensions",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs));
    n->shape = (remat__shape){3, {x->d[0], x->d[1], C}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

/* Floats of one T x T matrix, rounded up to whole 64-byte lines so that
 * every per-thread and per-head matrix starts equally aligned. */
static int64_t square_stride(int64_t T) { return (T * T + 15) & ~(int64_t)15; }

static size_t attn_aux_bytes(const remat_graph *g, const remat__node *n) {
    (void)g;
    const remat__shape *s = &n->shape;
    return (size_t)(s->d[0] * n->iattr[0]) * (size_t)square_stride(s->d[1]) * sizeof(float);
}

static size_t attn_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    (void)g;
    return (size_t)nth * (size_t)square_stride(n->shape.d[1]) * sizeof(float);
}

/* Floats of one head's (T, D) matrix in the bf16 kernels' workspace,
 * whole 64-byte lines. */
static int64_t head_stride(int64_t T, int64_t D) { return (T * D + 15) & ~(int64_t)15; }

/* The (T, D) block of rows of width ld from element off of a value stored
 * in bf16 (b16: widened) or float32 (rounded through bf16: a product's
 * view) into dst (T, D). */
static void head_in(float *dst, const void *src, int b16, int64_t off, int64_t T, int64_t D, int64_t ld) {
    const remat__pw16_kernels *K = remat__pw16_best();
    for (int64_t t = 0; t < T; t++)
        if (b16) K->convert(dst + t * D, (const uint16_t *)src + off + t * ld, 0, D, REMAT__CVT_UP);
        else K->convert(dst + t * D, (const float *)src + off + t * ld, 0, D, REMAT__CVT_ROUND);
}

/* src (T, D) into the (T, D) block of rows of width ld from element off of
 * a value stored in bf16 or float32, as `kind` converts (REMAT__CVT_DOWN:
 * rounded into a bf16 output; _ACC_BF16, _ACC_F32: added into a
 * gradient). */
static void head_out(void *dst, int64_t off, const float *src, int64_t T, int64_t D, int64_t ld, remat__cvt kind) {
    const remat__pw16_kernels *K = remat__pw16_best();
    int b16 = kind != REMAT__CVT_ACC_F32;
    for (int64_t t = 0; t < T; t++) {
        void *d = b16 ? (void *)((uint16_t *)dst + off + t * ld) : (void *)((float *)dst + off + t * ld);
        K->convert(d, src + t * D, 0, D, kind);
    }
}

/* bf16 (k->dt): pair by pair through this thread's q, k, v matrices; O is
 * written over q's (read by the first product only) and rounded into y. */
static void attn_forward_bf16(const remat__kctx *k, int64_t lo, int64_t hi, int ith) {
    const void *qkv = k->in[0]->data; // (B, T, 3C), bf16 or float32
    uint16_t *y = k->out->data;       // (B, T, C) bf16
    float *P = k->aux;                // (B, H, T, T)
    int64_t T = k->node->shape.d[1], C = k->node->shape.d[2];
    int64_t H = k->node->iattr[0], D = C / H, TT = square_stride(T), HS = head_stride(T, D);
    float scale = (float)(1.0 / sqrt((double)D));
    int iT = (int)T, iD = (int)D, b16 = k->dt[k->node->in[0]] == REMAT_BF16;
    float *q = (float *)k->ws + ith * 3 * HS, *kk = q + HS, *v = kk + HS; // (T, D) each
    for (int64_t p = lo; p < hi; p++) {
        int64_t b = p / H, h = p % H, off = b * T * 3 * C + h * D;
        float *pp = P + p * TT;
        head_in(q, qkv, b16, off, T, D, 3 * C);
        head_in(kk, qkv, b16, off + C, T, D, 3 * C);
        head_in(v, qkv, b16, off + 2 * C, T, D, 3 * C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iT, iT, iD, scale, q, iD, kk, iD, 0.0f, pp, iT);
        for (int64_t i = 0; i < T; i++) softmax_row(pp + i * T, i + 1, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iT, iD, iT, 1.0f, pp, iT, v, iD, 0.0f, q, iD);
        head_out(y, b * T * C + h * D, q, T, D, C, REMAT__CVT_DOWN);
    }
}

static void attn_forward(const remat__kctx *k, int ith, int nth) {
    const float *qkv = k->in[0]->data; // (B, T, 3C)
    float *y = k->out->data;           // (B, T, C)
    float *P = k->aux;                 // (B, H, T, T), each T x T padded to square_stride
    int64_t B = k->node->shape.d[0], T = k->node->shape.d[1], C = k->node->shape.d[2];
    int64_t H = k->node->iattr[0], D = C / H, TT = square_stride(T);
    float scale = (float)(1.0 / sqrt((double)D));
    int iT = (int)T, iD = (int)D, ld = (int)(3 * C);
    int64_t lo, hi;
    remat__split(B * H, ith, nth, &lo, &hi);
    if (k->dt) {
        attn_forward_bf16(k, lo, hi, ith);
        return;
    }
    for (int64_t p = lo; p < hi; p++) {
        int64_t b = p / H, h = p % H;
        const float *q = qkv + b * T * 3 * C + h * D, *kk = q + C, *v = q + 2 * C;
        float *pp = P + p * TT;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iT, iT, iD, scale, q, ld, kk, ld, 0.0f, pp, iT);
        for (int64_t i = 0; i < T; i++) softmax_row(pp + i * T, i + 1, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iT, iD, iT, 1.0f, pp, iT, v, ld, 0.0f,
                    y + b * T * C + h * D, (int)C);
    }
}

/* dS = P * (dP - rowsum(P * dP)) in place of dP (T, T), causal. */
static void attn_ds(const float *pp, float *dS, int64_t T) {
    for (int64_t i = 0; i < T; i++) {
        const float *pr = pp + i * T;
        float *sr = dS + i * T;
        double d = 0.0;
        for (int64_t j = 0; j <= i; j++) d += (double)pr[j] * sr[j];
        float df = (float)d;
        for (int64_t j = 0; j <= i; j++) sr[j] = pr[j] * (sr[j] - df);
        for (int64_t j = i + 1; j < T; j++) sr[j] = 0.0f;
    }
}

/* bf16 (k->dt): pair by pair, the products of attn_backward on this
 * thread's matrices (after the nth dS squares): q, k, v and dO widened,
 * dq, dk, dv computed into zeros (the views' zeroed gradient) and added
 * into dqkv. */
static void attn_backward_bf16(const remat__kctx *k, float *dS, int64_t lo, int64_t hi, int ith, int nth) {
    const void *qkv = k->in[0]->data;               // (B, T, 3C), bf16 or float32
    const uint16_t *dy = (const uint16_t *)k->dout; // (B, T, C) bf16
    const float *P = k->aux;                        // (B, H, T, T)
    void *dqkv = k->din[0];                         // (B, T, 3C), qkv's dtype
    int64_t T = k->node->shape.d[1], C = k->node->shape.d[2];
    int64_t H = k->node->iattr[0], D = C / H, TT = square_stride(T), HS = head_stride(T, D);
    float scale = (float)(1.0 / sqrt((double)D));
    int iT = (int)T, iD = (int)D, b16 = k->dt[k->node->in[0]] == REMAT_BF16;
    remat__cvt acc = b16 ? REMAT__CVT_ACC_BF16 : REMAT__CVT_ACC_F32;
    float *q = (float *)k->ws + nth * TT + ith * 7 * HS, *kk = q + HS, *v = kk + HS; // (T, D) each
    float *dO = v + HS, *dq = dO + HS, *dk = dq + HS, *dv = dk + HS;                 // (T, D) each
    for (int64_t p = lo; p < hi; p++) {
        int64_t b = p / H, h = p % H, off = b * T * 3 * C + h * D;
        const float *pp = P + p * TT;
        head_in(q, qkv, b16, off, T, D, 3 * C);
        head_in(kk, qkv, b16, off + C, T, D, 3 * C);
        head_in(v, qkv, b16, off + 2 * C, T, D, 3 * C);
        head_in(dO, dy, 1, b * T * C + h * D, T, D, C);
        memset(dq, 0, (size_t)(3 * HS) * sizeof *dq); /* dq, dk, dv */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iT, iD, iT, 1.0f, pp, iT, dO, iD, 1.0f, dv, iD);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iT, iT, iD, 1.0f, dO, iD, v, iD, 0.0f, dS, iT);
        attn_ds(pp, dS, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iT, iD, iT, scale, dS, iT, kk, iD, 1.0f, dq, iD);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iT, iD, iT, scale, dS, iT, q, iD, 1.0f, dk, iD);
        head_out(dqkv, off, dq, T, D, 3 * C, acc);
        head_out(dqkv, off + C, dk, T, D, 3 * C, acc);
        head_out(dqkv, off + 2 * C, dv, T, D, 3 * C, acc);
    }
}

static void attn_backward(const remat__kctx *k, int ith, int nth) {
    const float *qkv = k->in[0]->data; // (B, T, 3C)
    const float *dy = k->dout;         // (B, T, C)
    const float *P = k->aux;           // (B, H, T, T)
    float *dqkv = k->din[0];           // (B, T, 3C)
    if (!dqkv) return;
    int64_t B = k->node->shape.d[0], T = k->node->shape.d[1], C = k->node->shape.d[2];
    int64_t H = k->node->iattr[0], D = C / H, TT = square_stride(T);
    float scale = (float)(1.0 / sqrt((double)D));
    float *dS = (float *)k->ws + ith * TT; // (T, T): dP, then dS in place
    int iT = (int)T, iD = (int)D, ld = (int)(3 * C), ldo = (int)C;
    int64_t lo, hi;
    remat__split(B * H, ith, nth, &lo, &hi);
    if (k->dt) {
        attn_backward_bf16(k, dS, lo, hi, ith, nth);
        return;
    }
    for (int64_t p = lo; p < hi; p++) {
        int64_t b = p / H, h = p % H;
        const float *q = qkv + b * T * 3 * C + h * D, *kk = q + C, *v = q + 2 * C;
        const float *pp = P + p * TT, *dO = dy + b * T * C + h * D;
        float *dq = dqkv + b * T * 3 * C + h * D, *dk = dq + C, *dv = dq + 2 * C;
        /* dV (T, D) += P^T (T, T) dO (T, D) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iT, iD, iT, 1.0f, pp, iT, dO, ldo, 1.0f, dv, ld);
        /* dP (T, T) = dO (T, D) V^T (D, T) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iT, iT, iD, 1.0f, dO, ldo, v, ld, 0.0f, dS, iT);
        attn_ds(pp, dS, T);
        /* dQ (T, D) += dS (T, T) K (T, D) / sqrt(D); dK (T, D) += dS^T Q / sqrt(D) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iT, iD, iT, scale, dS, iT, kk, ld, 1.0f, dq, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iT, iD, iT, scale, dS, iT, q, ld, 1.0f, dk, ld);
    }
}

/* Under bf16 (y, and so dy, stored in bf16: always, a product's rule):
 * the kernels above, with q, k, v per thread forward and, after the dS
 * squares, q, k, v, dO, dq, dk, dv per thread backward. */
static int attn_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                        size_t *bwd) {
    size_t head = (size_t)head_stride(n->shape.d[1], n->shape.d[2] / n->iattr[0]) * sizeof(float);
    *fwd = (size_t)nth * 3 * head;
    *bwd = attn_bwd_ws(g, n, nth) + (size_t)nth * 7 * head;
    return dt[n - g->nodes] == REMAT_BF16;
}

/* Two T x T x D products per head, and the softmax. */
static double attn_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    double B = (double)n->shape.d[0], T = (double)n->shape.d[1], C = (double)n->shape.d[2];
    return 4.0 * B * T * T * C + 5.0 * B * (double)n->iattr[0] * T * T;
}

const remat__op remat__op_attention = {
    .autocast = REMAT__AC_LOW,
    .name = "attention",
    .min_in = 1,
    .max_in = 1,
    .shape = attn_shape,
    .forward = attn_forward,
    .backward = attn_backward,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_AUX,
    .aux_bytes = attn_aux_bytes,
    .bwd_ws = attn_bwd_ws,
    .bf16_ws = attn_bf16_ws,
    .flops = attn_flops,
    .family = REMAT_FAMILY_LINEAR,
    .cuda = REMAT__CUDA(attention),
};
