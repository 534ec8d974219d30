/* pool.c: max pooling, average pooling and global average pooling.
 *
 * maxpool2d and avgpool2d take iattr[0] = kernel, iattr[1] = stride and
 * iattr[2] = padding, the same for both spatial dimensions, with PyTorch's
 * semantics and output size OH = (H + 2p - k) / s + 1 (floor). Max pooling
 * pads with -inf and follows PyTorch's CPU kernel: the running maximum starts
 * at -inf with the index of the window's first in-bounds element, a later
 * element replaces it only if strictly greater or NaN, so the first maximum
 * in scan order wins ties. Backward saves only the input and recomputes the
 * argmax. Average pooling counts the padding (count_include_pad=True): it
 * divides by the size of the window clipped to the padded input, which is
 * k*k unless the window runs past the padded border. global_avgpool maps
 * (N, C, H, W) to (N, C, 1, 1).
 *
 * Every op splits the N*C planes over the threads; a plane's input gradient
 * is written only by the thread that owns it, in a fixed order.
 *
 * Under the bf16 policy, with x stored in bf16, the kernels take x, y, dy
 * and dx as stored: the windowed pools a plane at a time through float32
 * planes per thread (pool16), global average pooling element by element
 * (pw16.h's loads, stores and gradient accumulation); either way the
 * float32 views' bits without the views.
 */
#include "pw16.h"

#include <math.h>
#include <string.h>

static remat_status check_input(const remat_graph *g, remat__node *n, const char *lb) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char xs[64];
    if (g->nodes[n->in[0]].dtype != REMAT_F32) return remat__err(REMAT_SHAPE, "%s: input must be float32", lb);
    if (x->ndim != 4)
        return remat__err(REMAT_SHAPE, "%s: input %s must be 4-D (N, C, H, W)", lb, remat__shape_str(x, xs, sizeof xs));
    return REMAT_OK;
}

/* ------------------------------------------------------- windowed pools */

typedef struct {
    int64_t planes, H, W, OH, OW, k, s, p;
} pgeom;

static pgeom make_pgeom(const remat__shape *x, const remat__node *n) {
    pgeom G;
    G.planes = x->d[0] * x->d[1];
    G.H = x->d[2], G.W = x->d[3];
    G.k = n->iattr[0], G.s = n->iattr[1], G.p = n->iattr[2];
    G.OH = (G.H + 2 * G.p - G.k) / G.s + 1;
    G.OW = (G.W + 2 * G.p - G.k) / G.s + 1;
    return G;
}

static remat_status window_shape(const remat_graph *g, remat__node *n) {
    char lb[128], xs[64];
    remat__node_label(n, lb, sizeof lb);
    remat_status st = check_input(g, n, lb);
    if (st != REMAT_OK) return st;
    const remat__shape *x = remat__in_shape(g, n, 0);
    int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
    if (k < 1) return remat__err(REMAT_SHAPE, "%s: kernel size %lld must be at least 1", lb, (long long)k);
    if (s < 1) return remat__err(REMAT_SHAPE, "%s: stride %lld must be at least 1", lb, (long long)s);
    if (p < 0) return remat__err(REMAT_SHAPE, "%s: padding %lld must not be negative", lb, (long long)p);
    if (2 * p > k) /* PyTorch's rule: no window lies wholly in the padding */
        return remat__err(REMAT_SHAPE, "%s: padding %lld must be at most half the kernel size %lld", lb, (long long)p,
                          (long long)k);
    if (x->d[2] + 2 * p < k || x->d[3] + 2 * p < k)
        return remat__err(REMAT_SHAPE,
                          "%s: kernel %lldx%lld is larger than input %s with "
                          "padding %lld (empty output)",
                          lb, (long long)k, (long long)k, remat__shape_str(x, xs, sizeof xs), (long long)p);
    pgeom G = make_pgeom(x, n);
    n->shape = (remat__shape){4, {x->d[0], x->d[1], G.OH, G.OW}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static double window_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return (double)remat__numel(&n->shape) * (double)n->iattr[0] * (double)n->iattr[0];
}

/* Index in the plane of the maximum of the window at (oh, ow), chosen as
 * PyTorch's CPU kernel does; *val receives it. */
static int64_t window_argmax(const pgeom *G, const float *x, int64_t oh, int64_t ow, float *val) {
    // x: (H, W)
    int64_t h0 = oh * G->s - G->p, w0 = ow * G->s - G->p;
    int64_t h1 = h0 + G->k < G->H ? h0 + G->k : G->H;
    int64_t w1 = w0 + G->k < G->W ? w0 + G->k : G->W;
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    int64_t best = h0 * G->W + w0;
    float m = -INFINITY;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            float v = x[ih * G->W + iw];
            if (v > m || isnan(v)) {
                m = v;
                best = ih * G->W + iw;
            }
        }
    *val = m;
    return best;
}

/* Does v replace the running maximum m under that rule? Written so that
 * loops over it become selects (the signs of activations are data, so
 * branches mispredict) and vectorize. */
static inline int takes(float v, float m) { return v > m || v != v; }

/* Output rows [*olo, *ohi) and columns [*wlo, *whi) whose windows lie
 * wholly inside the plane; the others are clipped by the padding and take
 * window_argmax. */
static void inner_range(const pgeom *G, int64_t *olo, int64_t *ohi, int64_t *wlo, int64_t *whi) {
    *olo = (G->p + G->s - 1) / G->s;
    *ohi = G->H - G->k + G->p >= 0 ? (G->H - G->k + G->p) / G->s + 1 : 0;
    *wlo = (G->p + G->s - 1) / G->s;
    *whi = G->W - G->k + G->p >= 0 ? (G->W - G->k + G->p) / G->s + 1 : 0;
    if (*ohi > G->OH) *ohi = G->OH;
    if (*whi > G->OW) *whi = G->OW;
    if (*olo > *ohi) *olo = *ohi;
    if (*wlo > *whi) *wlo = *whi;
}

/* Scans one window element (kh, kw) for the inner windows ow in [0, n) of
 * a row: r[ow * S] is that element of window ow, pos its position kh*k+kw
 * (a float, so every select in the loop has one element type). Windows are
 * scanned element by element in row-major order, each for all outputs of
 * the row at once, which keeps every window's own scan order. */
static inline void scan_elem(const float *r, int64_t S, int64_t n, float pos, float *m, float *j) {
    for (int64_t ow = 0; ow < n; ow++) {
        float v = r[ow * S], mo = m[ow], jo = j[ow];
        int t = takes(v, mo);
        m[ow] = t ? v : mo;
        j[ow] = t ? pos : jo;
    }
}

#define ROW_CHUNK 256

/* The maximum m[i] and its window position j[i] (kh*k + kw) of the inner
 * windows ow = w0 + i, i in [0, n), n <= ROW_CHUNK, of output row oh. */
static void row_argmax(const pgeom *G, const float *xp, int64_t oh, int64_t w0, int64_t n, float *m, float *j) {
    const int64_t k = G->k, s = G->s, W = G->W;
    const float *x0 = xp + (oh * s - G->p) * W + w0 * s - G->p; /* window w0's first element */
    for (int64_t i = 0; i < n; i++) m[i] = -INFINITY, j[i] = 0.0f;
    for (int64_t kh = 0; kh < k; kh++)
        for (int64_t kw = 0; kw < k; kw++) {
            const float *r = x0 + kh * W + kw;
            float pos = (float)(kh * k + kw);
            /* constant strides for the compiler where it matters */
            if (s == 1) scan_elem(r, 1, n, pos, m, j);
            else if (s == 2) scan_elem(r, 2, n, pos, m, j);
            else scan_elem(r, s, n, pos, m, j);
        }
}

/* Plane index of window position j of the inner window (oh, ow). */
static inline int64_t window_index(const pgeom *G, int64_t oh, int64_t ow, float j) {
    int64_t q = (int64_t)j;
    return (oh * G->s - G->p + q / G->k) * G->W + ow * G->s - G->p + q % G->k;
}

/* 2x2 windows with stride 2 and no padding, the common case, one output
 * row at a time: r0, r1 are the window's two input rows. */
static void max22_row(const float *r0, const float *r1, float *y, int64_t OW) {
    for (int64_t ow = 0; ow < OW; ow++) {
        float m = r0[2 * ow], v; /* the first element always replaces -inf or ties it */
        v = r0[2 * ow + 1], m = takes(v, m) ? v : m;
        v = r1[2 * ow], m = takes(v, m) ? v : m;
        v = r1[2 * ow + 1], m = takes(v, m) ? v : m;
        y[ow] = m;
    }
}

static volatile float neg_zero = -0.0f; /* read at run time: see max22_row_bwd */

/* Its backward: the windows do not overlap, so each input receives the
 * gradient of at most one output; the others get -0, which leaves their
 * bits as they are (+0 would turn -0 into +0). -0 is read through a
 * volatile because the compiler would fold "+= -0" into a conditional
 * store, and the loop would no longer vectorize. */
static void max22_row_bwd(const float *r0, const float *r1, const float *dy, float *d0, float *d1, int64_t OW) {
    const float nz = neg_zero;
    for (int64_t ow = 0; ow < OW; ow++) {
        float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1], g = dy[ow];
        int t1 = takes(b, a);
        float m = t1 ? b : a;
        int t2 = takes(c, m);
        m = t2 ? c : m;
        int t3 = takes(d, m);
        /* the gradient goes to the last position that took the maximum
         * (selects into locals, then plain loads, adds and stores: the form
         * the vectorizer accepts) */
        float g3 = t3 ? g : nz, r3 = t3 ? nz : g;
        float g2 = t2 ? r3 : nz, r2 = t2 ? nz : r3;
        float g1 = t1 ? r2 : nz, g0 = t1 ? nz : r2;
        float x0 = d0[2 * ow] + g0, x1 = d0[2 * ow + 1] + g1;
        float x2 = d1[2 * ow] + g2, x3 = d1[2 * ow + 1] + g3;
        d0[2 * ow] = x0, d0[2 * ow + 1] = x1, d1[2 * ow] = x2, d1[2 * ow + 1] = x3;
    }
}

static int is22(const pgeom *G) { return G->k == 2 && G->s == 2 && G->p == 0; }

/* Calls out(ow, idx, val) ... for every window of output row oh in
 * increasing ow: the plane index of its maximum and the maximum. */
typedef void (*row_sink)(void *ctx, int64_t ow, int64_t idx, float val);

static void row_windows(const pgeom *G, const float *xp, int64_t oh, int inner_row, int64_t wlo, int64_t whi,
                        row_sink out, void *ctx) {
    float m[ROW_CHUNK], j[ROW_CHUNK];
    int64_t ow = 0;
    if (inner_row)
        for (; ow < wlo; ow++) {
            float v;
            int64_t i = window_argmax(G, xp, oh, ow, &v);
            out(ctx, ow, i, v);
        }
    if (inner_row)
        for (int64_t w0 = wlo; w0 < whi; w0 += ROW_CHUNK) {
            int64_t n = whi - w0 < ROW_CHUNK ? whi - w0 : ROW_CHUNK;
            row_argmax(G, xp, oh, w0, n, m, j);
            for (int64_t i = 0; i < n; i++) out(ctx, w0 + i, window_index(G, oh, w0 + i, j[i]), m[i]);
            ow = w0 + n;
        }
    for (; ow < G->OW; ow++) {
        float v;
        int64_t i = window_argmax(G, xp, oh, ow, &v);
        out(ctx, ow, i, v);
    }
}

typedef struct {
    float *y;        /* output row */
    float *dx;       /* input plane */
    const float *dy; /* output row */
} sink_ctx;

static void sink_value(void *ctx, int64_t ow, int64_t idx, float val) {
    (void)idx;
    ((sink_ctx *)ctx)->y[ow] = val;
}

static void sink_grad(void *ctx, int64_t ow, int64_t idx, float val) {
    (void)val;
    sink_ctx *c = ctx;
    c->dx[idx] += c->dy[ow];
}

/* ------------------------------------------------ bf16 planes (native) */

/* A kernel's planes. Float32 values are used where they lie; under the
 * bf16 policy with x stored in bf16 (so y, dy and dx are: kctx.dt) each
 * plane goes through this thread's float32 planes in the workspace,
 * [x: H*W][y or dy: OH*OW][dx: H*W] (pool_bf16_ws): x and dy widened, y
 * rounded from its plane, dx's plane zeroed and then added as the views
 * add (REMAT__CVT_ACC_BF16). The arithmetic on a plane is the float32
 * kernel's, so the bits are the float32 views', without the views. */
typedef struct {
    const pgeom *G;
    int bf, backward;
    const void *in[2]; /* x; dy (backward) */
    void *out;         /* y; dx (backward) */
    float *buf;        /* this thread's planes (bf) */
} pool16;

static size_t pool16_floats(const pgeom *G, int backward) {
    return (size_t)(G->H * G->W + G->OH * G->OW + (backward ? G->H * G->W : 0));
}

static pool16 pool16_of(const remat__kctx *k, const pgeom *G, int ith, int backward) {
    pool16 b = {G, k->dt && k->dt[k->node->in[0]] == REMAT_BF16, backward, {k->in[0]->data, NULL}, NULL, NULL};
    b.in[1] = backward ? (const void *)k->dout : NULL;
    b.out = backward ? (void *)k->din[0] : k->out->data;
    if (b.bf) b.buf = (float *)k->ws + (size_t)ith * pool16_floats(G, backward);
    return b;
}

/* Plane pl of x (i = 0, H*W) or dy (i = 1, OH*OW) as float32. */
static const float *plane_in(const pool16 *b, int i, int64_t pl) {
    int64_t len = i ? b->G->OH * b->G->OW : b->G->H * b->G->W;
    if (!b->bf) return (const float *)b->in[i] + pl * len;
    float *f = b->buf + (i ? b->G->H * b->G->W : 0);
    remat__pw16_convert(f, (const uint16_t *)b->in[i] + pl * len, len, REMAT__CVT_UP);
    return f;
}

/* Plane pl of y (OH*OW) or dx (H*W, backward; zeroed when bf16) to write. */
static float *plane_out(const pool16 *b, int64_t pl) {
    int64_t hw = b->G->H * b->G->W, ohw = b->G->OH * b->G->OW;
    if (!b->bf) return (float *)b->out + pl * (b->backward ? hw : ohw);
    if (!b->backward) return b->buf + hw;
    memset(b->buf + hw + ohw, 0, (size_t)hw * sizeof(float));
    return b->buf + hw + ohw;
}

/* Plane pl written: into the bf16 value (rounded, or added). */
static void plane_done(const pool16 *b, int64_t pl) {
    int64_t hw = b->G->H * b->G->W, ohw = b->G->OH * b->G->OW;
    if (!b->bf) return;
    if (b->backward) remat__pw16_convert((uint16_t *)b->out + pl * hw, b->buf + hw + ohw, hw, REMAT__CVT_ACC_BF16);
    else remat__pw16_convert((uint16_t *)b->out + pl * ohw, b->buf + hw, ohw, REMAT__CVT_DOWN);
}

static int pool_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                        size_t *bwd) {
    if (dt[n->in[0]] != REMAT_BF16) return 0;
    const pgeom G = make_pgeom(remat__in_shape(g, n, 0), n);
    *fwd = (size_t)nth * pool16_floats(&G, 0) * sizeof(float);
    *bwd = (size_t)nth * pool16_floats(&G, 1) * sizeof(float);
    return 1;
}

/* One plane: x (H, W) to y (OH, OW); [olo, ohi) x [wlo, whi) the inner
 * windows (inner_range). */
static void maxpool_plane(const pgeom *G, const float *xp, float *yp, const int64_t r[4]) {
    for (int64_t oh = 0; oh < G->OH; oh++) {
        if (is22(G)) {
            max22_row(xp + 2 * oh * G->W, xp + (2 * oh + 1) * G->W, yp + oh * G->OW, G->OW);
            continue;
        }
        sink_ctx c = {yp + oh * G->OW, NULL, NULL};
        row_windows(G, xp, oh, oh >= r[0] && oh < r[1], r[2], r[3], sink_value, &c);
    }
}

/* Its backward: dy (OH, OW) added into dx (H, W). */
static void maxpool_plane_bwd(const pgeom *G, const float *xp, const float *dyp, float *dxp, const int64_t r[4]) {
    for (int64_t oh = 0; oh < G->OH; oh++) {
        if (is22(G)) {
            int64_t o = 2 * oh * G->W;
            max22_row_bwd(xp + o, xp + o + G->W, dyp + oh * G->OW, dxp + o, dxp + o + G->W, G->OW);
            continue;
        }
        /* overlapping windows: gradients are added in output order */
        sink_ctx c = {NULL, dxp, dyp + oh * G->OW};
        row_windows(G, xp, oh, oh >= r[0] && oh < r[1], r[2], r[3], sink_grad, &c);
    }
}

static void maxpool_forward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    int64_t lo, hi, r[4];
    remat__split(G.planes, ith, nth, &lo, &hi);
    inner_range(&G, &r[0], &r[1], &r[2], &r[3]);
    pool16 b = pool16_of(k, &G, ith, 0);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = plane_in(&b, 0, pl); // (H, W)
        float *yp = plane_out(&b, pl);         // (OH, OW)
        maxpool_plane(&G, xp, yp, r);
        plane_done(&b, pl);
    }
}

static void maxpool_backward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    if (!k->din[0]) return;
    int64_t lo, hi, r[4];
    remat__split(G.planes, ith, nth, &lo, &hi);
    inner_range(&G, &r[0], &r[1], &r[2], &r[3]);
    pool16 b = pool16_of(k, &G, ith, 1);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = plane_in(&b, 0, pl);  // (H, W), saved
        const float *dyp = plane_in(&b, 1, pl); // (OH, OW)
        maxpool_plane_bwd(&G, xp, dyp, plane_out(&b, pl), r);
        plane_done(&b, pl);
    }
}

const remat__op remat__op_maxpool2d = {
    .autocast = REMAT__AC_FIRST,
    .name = "maxpool2d",
    .min_in = 1,
    .max_in = 1,
    .shape = window_shape,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
    .flags = REMAT__OP_PLANEWISE,
    .saves = REMAT__SAVE_IN(0),
    .flops = window_flops,
    .bf16_ws = pool_bf16_ws,
    .family = REMAT_FAMILY_POOL,
    .cuda = REMAT__CUDA(maxpool2d),
};

/* The in-bounds part [h0, h1) x [w0, w1) of the window at (oh, ow) and
 * PyTorch's divisor: the window's size clipped to the padded input. */
static int64_t avg_window(const pgeom *G, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1) {
    int64_t a = oh * G->s - G->p, b = ow * G->s - G->p;
    int64_t c = a + G->k < G->H + G->p ? a + G->k : G->H + G->p;
    int64_t d = b + G->k < G->W + G->p ? b + G->k : G->W + G->p;
    int64_t div = (c - a) * (d - b);
    *h0 = a > 0 ? a : 0;
    *w0 = b > 0 ? b : 0;
    *h1 = c < G->H ? c : G->H;
    *w1 = d < G->W ? d : G->W;
    return div;
}

static void avgpool_plane(const pgeom *G, const float *xp, float *yp) {
    for (int64_t oh = 0; oh < G->OH; oh++)
        for (int64_t ow = 0; ow < G->OW; ow++) {
            int64_t h0, h1, w0, w1;
            int64_t div = avg_window(G, oh, ow, &h0, &h1, &w0, &w1);
            float s = 0.0f;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) s += xp[ih * G->W + iw];
            yp[oh * G->OW + ow] = s / (float)div;
        }
}

static void avgpool_plane_bwd(const pgeom *G, const float *dyp, float *dxp) {
    for (int64_t oh = 0; oh < G->OH; oh++)
        for (int64_t ow = 0; ow < G->OW; ow++) {
            int64_t h0, h1, w0, w1;
            int64_t div = avg_window(G, oh, ow, &h0, &h1, &w0, &w1);
            float gd = dyp[oh * G->OW + ow] / (float)div;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) dxp[ih * G->W + iw] += gd;
        }
}

static void avgpool_forward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    int64_t lo, hi;
    remat__split(G.planes, ith, nth, &lo, &hi);
    pool16 b = pool16_of(k, &G, ith, 0);
    for (int64_t pl = lo; pl < hi; pl++) {
        avgpool_plane(&G, plane_in(&b, 0, pl), plane_out(&b, pl)); // (H, W) to (OH, OW)
        plane_done(&b, pl);
    }
}

static void avgpool_backward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    if (!k->din[0]) return;
    int64_t lo, hi;
    remat__split(G.planes, ith, nth, &lo, &hi);
    pool16 b = pool16_of(k, &G, ith, 1);
    for (int64_t pl = lo; pl < hi; pl++) {
        avgpool_plane_bwd(&G, plane_in(&b, 1, pl), plane_out(&b, pl)); // (OH, OW) into (H, W)
        plane_done(&b, pl);
    }
}

const remat__op remat__op_avgpool2d = {
    .autocast = REMAT__AC_FIRST,
    .name = "avgpool2d",
    .min_in = 1,
    .max_in = 1,
    .shape = window_shape,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
    .flags = REMAT__OP_PLANEWISE,
    .saves = 0,
    .flops = window_flops,
    .bf16_ws = pool_bf16_ws,
    .family = REMAT_FAMILY_POOL,
    .cuda = REMAT__CUDA(avgpool2d),
};

/* -------------------------------------------------------- global average */

static remat_status global_shape(const remat_graph *g, remat__node *n) {
    char lb[128];
    remat__node_label(n, lb, sizeof lb);
    remat_status st = check_input(g, n, lb);
    if (st != REMAT_OK) return st;
    const remat__shape *x = remat__in_shape(g, n, 0);
    n->shape = (remat__shape){4, {x->d[0], x->d[1], 1, 1}};
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static void global_forward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *xs = k->in[0]->shape;
    const float *x = k->in[0]->data; // (N, C, H, W)
    float *y = k->out->data;         // (N, C, 1, 1)
    const int64_t hw = xs->d[2] * xs->d[3];
    int64_t lo, hi;
    remat__split(xs->d[0] * xs->d[1], ith, nth, &lo, &hi);
    if (k->dt) { /* bf16 (global_bf16_ws): each element widened, the mean rounded */
        for (int64_t pl = lo; pl < hi; pl++) {
            float s = 0.0f;
            for (int64_t i = 0; i < hw; i++) s += remat__pw16_ld(x, 1, pl * hw + i);
            remat__pw16_st(y, 1, pl, s / (float)hw);
        }
        return;
    }
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * hw; // (H*W)
        float s = 0.0f;
        for (int64_t i = 0; i < hw; i++) s += xp[i];
        y[pl] = s / (float)hw;
    }
}

static void global_backward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *xs = k->in[0]->shape;
    const float *dy = k->dout; // (N, C, 1, 1)
    float *dx = k->din[0];     // (N, C, H, W)
    if (!dx) return;
    const int64_t hw = xs->d[2] * xs->d[3];
    int64_t lo, hi;
    remat__split(xs->d[0] * xs->d[1], ith, nth, &lo, &hi);
    if (k->dt) { /* bf16: dx added as the views add (pw16.h) */
        for (int64_t pl = lo; pl < hi; pl++) {
            float gd = remat__pw16_ld(dy, 1, pl) / (float)hw;
            for (int64_t i = 0; i < hw; i++) remat__pw16_acc(dx, 1, pl * hw + i, gd);
        }
        return;
    }
    for (int64_t pl = lo; pl < hi; pl++) {
        float gd = dy[pl] / (float)hw;
        float *dxp = dx + pl * hw; // (H*W)
        for (int64_t i = 0; i < hw; i++) dxp[i] += gd;
    }
}

/* Under bf16 with x stored in bf16 (so y, dy and dx are): the kernels
 * above read and write them in place, with no workspace. */
static int global_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                          size_t *bwd) {
    (void)g, (void)nth;
    *fwd = *bwd = 0;
    return dt[n->in[0]] == REMAT_BF16;
}

static double global_flops(const remat_graph *g, const remat__node *n) {
    return (double)remat__numel(remat__in_shape(g, n, 0));
}

const remat__op remat__op_global_avgpool = {
    .autocast = REMAT__AC_FIRST,
    .name = "global_avgpool",
    .min_in = 1,
    .max_in = 1,
    .shape = global_shape,
    .forward = global_forward,
    .backward = global_backward,
    .flags = REMAT__OP_PLANEWISE,
    .saves = 0,
    .flops = global_flops,
    .bf16_ws = global_bf16_ws,
    .family = REMAT_FAMILY_POOL,
    .cuda = REMAT__CUDA(global_avgpool),
};
