/* linear.c: y = x W^T + b through remat__gemm (oneDNN's matmul or
 * cblas_sgemm by a rule on the product's shape: src/ops/dnnl.h). Where
 * oneDNN runs a product, its scratchpad is the op's workspace: one slice
 * per thread, the largest scratchpad of the pass's products.
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

#include "../core/bf16.h"
#include "pw16.h"

static remat_status linear_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    char lb[128], xs[64], ws[64];
    if (x->ndim != 2 || w->ndim != 2 || x->d[1] != w->d[1])
        return remat__err(REMAT_SHAPE,
                          "%s: input %s does not match weight %s "
                          "(expected input (N, %lld))",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs),
                          remat__shape_str(w, ws, sizeof ws), (long long)(w->ndim == 2 ? w->d[1] : -1));
    if (n->n_in == 3) {
        const remat__shape *b = remat__in_shape(g, n, 2);
        if (b->ndim != 1 || b->d[0] != w->d[0])
            return remat__err(REMAT_SHAPE, "%s: bias %s does not match weight %s", remat__node_label(n, lb, sizeof lb),
                              remat__shape_str(b, xs, sizeof xs), remat__shape_str(w, ws, sizeof ws));
    }
    n->shape = (remat__shape){2, {x->d[0], w->d[0]}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static void linear_forward_bf16(const remat__kctx *k, int ith, int nth);
static void linear_backward_bf16(const remat__kctx *k, int ith, int nth);

/* The products of a pass on rows lo..hi of thread ith (float32): the
 * forward's y rows = x rows W^T (+ y, holding the bias), backward's dx
 * rows += dy rows W and dW rows += dy^T x (rows of W). */
static remat__mm fwd_mm(int64_t rows, int64_t IN, int64_t OUT, int bias) {
    return (remat__mm){0, 1, rows, OUT, IN, IN, IN, OUT, bias};
}
static remat__mm dx_mm(int64_t rows, int64_t IN, int64_t OUT) {
    return (remat__mm){0, 0, rows, IN, OUT, OUT, IN, IN, 1};
}
static remat__mm dw_mm(int64_t rows, int64_t NB, int64_t IN, int64_t OUT) {
    return (remat__mm){1, 0, rows, IN, NB, OUT, IN, IN, 1};
}

/* oneDNN's scratchpad for one product, 0 when it does not run it: asked
 * afresh (d NULL: planning) or of the kernel's context (the same). */
static size_t mm_scratch(remat__dnnl *d, remat__mm mm) {
    size_t sc = 0;
    if (mm.M < 1) return 0;
    if (d) remat__dnnl_f32_gemm_scratch(d, &mm, &sc);
    else remat__dnnl_f32_gemm_use(&mm, &sc);
    return sc;
}

/* A thread's workspace slice: the largest scratchpad of the pass's
 * products over the row counts remat__split gives (q and q + 1). */
static size_t lin_slice(remat__dnnl *d, int64_t NB, int64_t IN, int64_t OUT, int bias, int backward, int nth) {
    size_t per = 0;
    for (int extra = 0; extra < 2; extra++) {
        int64_t rn = NB / nth + (extra && NB % nth), ro = OUT / nth + (extra && OUT % nth);
        size_t s[2] = {backward ? mm_scratch(d, dx_mm(rn, IN, OUT)) : mm_scratch(d, fwd_mm(rn, IN, OUT, bias)),
                       backward ? mm_scratch(d, dw_mm(ro, NB, IN, OUT)) : 0};
        for (int i = 0; i < 2; i++)
            if (s[i] > per) per = s[i];
    }
    return per;
}

static size_t lin_ws_bytes(const remat_graph *g, const remat__node *n, int backward, int nth) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    return (size_t)nth * lin_slice(NULL, x->d[0], x->d[1], w->d[0], n->n_in == 3, backward, nth);
}
static size_t linear_fwd_ws(const remat_graph *g, const remat__node *n, int nth) { return lin_ws_bytes(g, n, 0, nth); }
static size_t linear_bwd_ws(const remat_graph *g, const remat__node *n, int nth) { return lin_ws_bytes(g, n, 1, nth); }

/* Thread ith's scratchpad: its slice of the workspace. */
static void *kctx_scratch(const remat__kctx *k, int backward, int ith, int nth) {
    int64_t NB = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    size_t per = lin_slice(k->dnnl, NB, IN, OUT, k->node->n_in == 3, backward, nth);
    return per ? (unsigned char *)k->ws + (size_t)ith * per : NULL;
}

static void linear_forward(const remat__kctx *k, int ith, int nth) {
    if (k->dt) { /* bf16: planned so (linear_bf16_ws) */
        linear_forward_bf16(k, ith, nth);
        return;
    }
    const float *x = k->in[0]->data; // (N, in)
    const float *w = k->in[1]->data; // (out, in)
    float *y = k->out->data;         // (N, out)
    int64_t NB = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    int bias = k->node->n_in == 3;
    int64_t lo, hi;
    remat__split(NB, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    if (bias) {
        const float *b = k->in[2]->data;
        for (int64_t r = lo; r < hi; r++) memcpy(y + r * OUT, b, (size_t)OUT * sizeof *y);
    }
    remat__mm mm = fwd_mm(hi - lo, IN, OUT, bias);
    remat__gemm(k->dnnl, ith, &mm, x + lo * IN, w, y + lo * OUT, kctx_scratch(k, 0, ith, nth));
}

/* db[o] += the sum over rows n of dy[n, o] (bf16 when dy16, widened),
 * for o in [lo, hi): each column summed from 0 in row order, rounded
 * through bf16 before it is added when round16. Columns go 64 at a time
 * through sums on the stack, so that dy is read row by row. */
static void bias_grad(float *db, const void *dy, int dy16, int64_t NB, int64_t OUT, int64_t lo, int64_t hi,
                      int round16) {
    enum { COLS = 64 };
    for (int64_t o = lo; o < hi; o += COLS) {
        float sum[COLS] = {0};
        int64_t w = hi - o < COLS ? hi - o : COLS;
        for (int64_t n = 0; n < NB; n++) {
            if (dy16) {
                const uint16_t *r = (const uint16_t *)dy + n * OUT + o;
                for (int64_t j = 0; j < w; j++) sum[j] += remat__f32_of(r[j]);
            } else {
                const float *r = (const float *)dy + n * OUT + o;
                for (int64_t j = 0; j < w; j++) sum[j] += r[j];
            }
        }
        for (int64_t j = 0; j < w; j++) db[o + j] += round16 ? remat__bf16_round(sum[j]) : sum[j];
    }
}

static void linear_backward(const remat__kctx *k, int ith, int nth) {
    if (k->dt) {
        linear_backward_bf16(k, ith, nth);
        return;
    }
    const float *x = k->in[0]->data; // (N, in)
    const float *w = k->in[1]->data; // (out, in)
    const float *dy = k->dout;       // (N, out)
    int64_t NB = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    void *sc = kctx_scratch(k, 1, ith, nth);
    int64_t lo, hi;
    if (k->din[0]) { /* dx (N, in) += dy (N, out) W (out, in), split over rows n */
        remat__split(NB, ith, nth, &lo, &hi);
        remat__mm mm = dx_mm(hi - lo, IN, OUT);
        if (hi > lo) remat__gemm(k->dnnl, ith, &mm, dy + lo * OUT, w, k->din[0] + lo * IN, sc);
    }
    /* dW (out, in) += dy^T (out, N) x (N, in) and db (out), split over rows o */
    remat__split(OUT, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    remat__mm mm = dw_mm(hi - lo, NB, IN, OUT);
    if (k->din[1]) remat__gemm(k->dnnl, ith, &mm, dy + lo, x, k->din[1] + lo * IN, sc);
    if (k->node->n_in == 3 && k->din[2]) bias_grad(k->din[2], dy, 0, NB, OUT, lo, hi, 0);
}

/* ------------------------------------------------ bf16 (native kernels) */

/* Under the bf16 policy where oneDNN has bf16 products (linear_bf16_ws):
 * x and dx bf16 or float32 (xf32), y and dy bf16, W and b float32 and
 * rounded through bf16 per call. Products multiply bf16 and accumulate in
 * float32. The forward's product writes y itself, rounding the float32
 * sum plus the rounded bias once (no float32 buffer, no pass over y
 * after it). The backward's write a float32 buffer, and dx, dW, db are
 * rounded through bf16 before they are added (the float32 views'
 * semantics, exec/views.c). Workspace: W in bf16 (forward: and b), x in
 * bf16 (backward, when x is float32), then per thread (backward) its
 * float32 product or (forward, when x is float32) its rows of x in bf16,
 * and oneDNN's scratchpad. */
typedef struct {
    int64_t NB, IN, OUT;
    size_t wb, xb, xr, c, sc, per;
} lin_ws;

static size_t up64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Whether oneDNN runs the bf16 product, and its scratchpad: asked afresh
 * (d NULL: planning) or of the kernel's context, which keeps each shape's
 * primitive (the same answer, made once). */
static int product(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *sc) {
    if (mm->M < 1) return 1;
    if (d) return remat__dnnl_bf16_gemm_scratch(d, mm, out, sc);
    return remat__dnnl_bf16_gemm_use(mm, out, sc);
}

/* The passes' products on `rows` rows: the forward's y = x W^T (+ b),
 * rounded to bf16 by the product; the backward's dx = dy W and
 * dW = dy^T x, in float32. */
static remat__mm fwd16(const lin_ws *L, int64_t rows) {
    return (remat__mm){0, 1, rows, L->OUT, L->IN, L->IN, L->IN, L->OUT, 0};
}
static remat__mm dx16(const lin_ws *L, int64_t rows) {
    return (remat__mm){0, 0, rows, L->IN, L->OUT, L->OUT, L->IN, L->IN, 0};
}
static remat__mm dw16(const lin_ws *L, int64_t rows) {
    return (remat__mm){1, 0, rows, L->IN, L->NB, L->OUT, L->IN, L->IN, 0};
}

/* The product shapes of a pass on nth threads (rows split as remat__split
 * does: q or q + 1 per thread), their scratchpads' maximum in *sc; 0 when
 * oneDNN lacks one of them. */
static int lin_products(remat__dnnl *d, const lin_ws *L, int backward, int bias, int nth, size_t *sc) {
    int64_t n = L->NB, out = L->OUT;
    *sc = 0;
    for (int64_t extra = 0; extra < 2; extra++) {
        /* q rows, and q + 1 where nth does not divide the rows */
        int64_t rn = n / nth + (extra && n % nth), ro = out / nth + (extra && out % nth);
        size_t s[2] = {0, 0};
        int ok = 1;
        remat__mm f = fwd16(L, rn), x = dx16(L, rn), w = dw16(L, ro);
        if (!backward) ok = product(d, &f, bias ? REMAT__MM_BF16_BIAS : REMAT__MM_BF16, &s[0]);
        else ok = product(d, &x, REMAT__MM_F32, &s[0]) && product(d, &w, REMAT__MM_F32, &s[1]);
        if (!ok) return 0;
        for (int i = 0; i < 2; i++)
            if (s[i] > *sc) *sc = s[i];
    }
    return 1;
}

static lin_ws lin_layout(int64_t NB, int64_t IN, int64_t OUT, int xf32, int backward, int nth, size_t sc) {
    lin_ws L = {NB, IN, OUT, 0, 0, 0, 0, sc, 0};
    int64_t rn = (NB + nth - 1) / nth, ro = (OUT + nth - 1) / nth;
    L.wb = up64((size_t)(OUT * IN) * 2) + (backward ? 0 : up64((size_t)OUT * 2));
    L.xb = backward && xf32 ? up64((size_t)(NB * IN) * 2) : 0;
    L.xr = !backward && xf32 ? up64((size_t)(rn * IN) * 2) : 0;
    L.c = backward ? up64((size_t)((rn > ro ? rn : ro) * IN) * sizeof(float)) : 0;
    L.per = L.xr + L.c + sc;
    return L;
}

static int linear_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                          size_t *bwd) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    for (int i = 1; i < n->n_in; i++)
        if (dt[n->in[i]] != REMAT_F32) return 0;
    int xf32 = dt[n->in[0]] != REMAT_BF16;
    lin_ws L = {x->d[0], x->d[1], w->d[0], 0, 0, 0, 0, 0, 0};
    size_t sf, sb;
    if (!lin_products(NULL, &L, 0, n->n_in == 3, nth, &sf) || !lin_products(NULL, &L, 1, 0, nth, &sb)) return 0;
    L = lin_layout(x->d[0], x->d[1], w->d[0], xf32, 0, nth, sf);
    *fwd = L.wb + (size_t)nth * L.per;
    L = lin_layout(x->d[0], x->d[1], w->d[0], xf32, 1, nth, sb);
    *bwd = L.wb + L.xb + (size_t)nth * L.per;
    return 1;
}

/* The kernel's layout (the scratchpad as planned). */
static lin_ws kctx_layout(const remat__kctx *k, int backward, int nth, int *xf32) {
    *xf32 = k->dt[k->node->in[0]] != REMAT_BF16;
    lin_ws L = {k->in[0]->shape->d[0], k->in[0]->shape->d[1], k->in[1]->shape->d[0], 0, 0, 0, 0, 0, 0};
    size_t sc;
    lin_products(k->dnnl, &L, backward, k->node->n_in == 3, nth, &sc);
    return lin_layout(L.NB, L.IN, L.OUT, *xf32, backward, nth, sc);
}

/* dst[e] = bf16 of src[e] for this thread's share of n elements. */
static void to_bf16(uint16_t *dst, const float *src, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    remat__split(n, ith, nth, &lo, &hi);
    remat__pw16_convert(dst + lo, src + lo, hi - lo, REMAT__CVT_DOWN);
}

static void linear_forward_bf16(const remat__kctx *k, int ith, int nth) {
    int xf32;
    const lin_ws L = kctx_layout(k, 0, nth, &xf32);
    unsigned char *ws = k->ws;
    uint16_t *wb = (uint16_t *)ws, *bb = (uint16_t *)(ws + up64((size_t)(L.OUT * L.IN) * 2)), *y = k->out->data;
    const int bias = k->node->n_in == 3;
    to_bf16(wb, k->in[1]->data, L.OUT * L.IN, ith, nth);
    if (bias) to_bf16(bb, k->in[2]->data, L.OUT, ith, nth);
    remat__pool_barrier(k->pool);
    int64_t lo, hi;
    remat__split(L.NB, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    unsigned char *mine = ws + L.wb + (size_t)ith * L.per;
    const uint16_t *xr = (const uint16_t *)k->in[0]->data + lo * L.IN;
    if (xf32) {
        to_bf16((uint16_t *)mine, (const float *)k->in[0]->data + lo * L.IN, (hi - lo) * L.IN, 0, 1);
        xr = (const uint16_t *)mine;
    }
    const remat__mm mm = fwd16(&L, hi - lo);
    remat__dnnl_bf16_gemm(k->dnnl, ith, &mm, bias ? REMAT__MM_BF16_BIAS : REMAT__MM_BF16, xr, wb, bias ? bb : NULL,
                          y + lo * L.OUT, mine + L.xr);
}

/* g[e] += c[e] rounded through bf16, g bf16 (rounded again) or float32. */
static void add_rounded(void *g, int bf16, const float *c, int64_t n) {
    remat__pw16_convert(g, c, n, bf16 ? REMAT__CVT_ACC_BF16 : REMAT__CVT_ACC_F32);
}

static void linear_backward_bf16(const remat__kctx *k, int ith, int nth) {
    int xf32;
    const lin_ws L = kctx_layout(k, 1, nth, &xf32);
    unsigned char *ws = k->ws;
    uint16_t *wb = (uint16_t *)ws, *xb = xf32 ? (uint16_t *)(ws + L.wb) : (uint16_t *)k->in[0]->data;
    const uint16_t *dy = (const uint16_t *)k->dout;
    to_bf16(wb, k->in[1]->data, L.OUT * L.IN, ith, nth);
    if (xf32 && k->din[1]) to_bf16(xb, k->in[0]->data, L.NB * L.IN, ith, nth);
    remat__pool_barrier(k->pool);
    unsigned char *mine = ws + L.wb + L.xb + (size_t)ith * L.per;
    float *c = (float *)mine;
    void *sc = mine + L.c;
    int64_t lo, hi;
    remat__split(L.NB, ith, nth, &lo, &hi);
    const remat__mm xm = dx16(&L, hi - lo);
    if (k->din[0] && hi > lo && /* dx (N, in) += dy (N, out) W (out, in) */
        remat__dnnl_bf16_gemm(k->dnnl, ith, &xm, REMAT__MM_F32, dy + lo * L.OUT, wb, NULL, c, sc))
        add_rounded((unsigned char *)k->din[0] + (size_t)(lo * L.IN) * (xf32 ? 4 : 2), !xf32, c, (hi - lo) * L.IN);
    remat__split(L.OUT, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    const remat__mm wm = dw16(&L, hi - lo);
    if (k->din[1] && /* dW (out, in) += dy^T (out, N) x (N, in) */
        remat__dnnl_bf16_gemm(k->dnnl, ith, &wm, REMAT__MM_F32, dy + lo, xb, NULL, c, sc))
        add_rounded(k->din[1] + lo * L.IN, 0, c, (hi - lo) * L.IN);
    if (k->node->n_in == 3 && k->din[2]) bias_grad(k->din[2], dy, 1, L.NB, L.OUT, lo, hi, 1);
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
    .fwd_ws = linear_fwd_ws,
    .bwd_ws = linear_bwd_ws,
    .bf16_ws = linear_bf16_ws,
    .flops = linear_flops,
    .family = REMAT_FAMILY_LINEAR,
    .cuda = REMAT__CUDA(linear),
};
