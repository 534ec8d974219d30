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
 */
#include "../remat-impl.h"

#include <math.h>

static remat_status check_input(const remat_graph *g, remat__node *n, const char *lb) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char xs[64];
    if (g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: input must be float32", lb);
    if (x->ndim != 4)
        return remat__err(REMAT_SHAPE, "%s: input %s must be 4-D (N, C, H, W)", lb,
                          remat__shape_str(x, xs, sizeof xs));
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
    if (k < 1)
        return remat__err(REMAT_SHAPE, "%s: kernel size %lld must be at least 1", lb, (long long)k);
    if (s < 1)
        return remat__err(REMAT_SHAPE, "%s: stride %lld must be at least 1", lb, (long long)s);
    if (p < 0)
        return remat__err(REMAT_SHAPE, "%s: padding %lld must not be negative", lb, (long long)p);
    if (2 * p > k) /* PyTorch's rule: no window lies wholly in the padding */
        return remat__err(REMAT_SHAPE, "%s: padding %lld must be at most half the kernel size %lld",
                          lb, (long long)p, (long long)k);
    if (x->d[2] + 2 * p < k || x->d[3] + 2 * p < k)
        return remat__err(REMAT_SHAPE, "%s: kernel %lldx%lld is larger than input %s with "
                          "padding %lld (empty output)", lb, (long long)k, (long long)k,
                          remat__shape_str(x, xs, sizeof xs), (long long)p);
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

static void maxpool_forward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *x = k->in[0]->data;  // (N, C, H, W)
    float *y = k->out->data;          // (N, C, OH, OW)
    int64_t lo, hi;
    remat__split(G.planes, ith, nth, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * G.H * G.W;  // (H, W)
        float *yp = y + pl * G.OH * G.OW;      // (OH, OW)
        for (int64_t oh = 0; oh < G.OH; oh++)
            for (int64_t ow = 0; ow < G.OW; ow++) window_argmax(&G, xp, oh, ow, &yp[oh * G.OW + ow]);
    }
}

static void maxpool_backward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *x = k->in[0]->data;  // (N, C, H, W), saved
    const float *dy = k->dout;        // (N, C, OH, OW)
    float *dx = k->din[0];            // (N, C, H, W)
    if (!dx) return;
    int64_t lo, hi;
    remat__split(G.planes, ith, nth, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * G.H * G.W;    // (H, W)
        const float *dyp = dy + pl * G.OH * G.OW;  // (OH, OW)
        float *dxp = dx + pl * G.H * G.W;        // (H, W)
        for (int64_t oh = 0; oh < G.OH; oh++)
            for (int64_t ow = 0; ow < G.OW; ow++) {
                float m;
                dxp[window_argmax(&G, xp, oh, ow, &m)] += dyp[oh * G.OW + ow];
            }
    }
}

const remat__op remat__op_maxpool2d = {
    .name = "maxpool2d",
    .min_in = 1,
    .max_in = 1,
    .shape = window_shape,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
    .saves = REMAT__SAVE_IN(0),
    .flops = window_flops,
    .family = REMAT_FAMILY_POOL,
};

/* The in-bounds part [h0, h1) x [w0, w1) of the window at (oh, ow) and
 * PyTorch's divisor: the window's size clipped to the padded input. */
static int64_t avg_window(const pgeom *G, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                          int64_t *w0, int64_t *w1) {
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

static void avgpool_forward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *x = k->in[0]->data;  // (N, C, H, W)
    float *y = k->out->data;          // (N, C, OH, OW)
    int64_t lo, hi;
    remat__split(G.planes, ith, nth, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * G.H * G.W;  // (H, W)
        float *yp = y + pl * G.OH * G.OW;      // (OH, OW)
        for (int64_t oh = 0; oh < G.OH; oh++)
            for (int64_t ow = 0; ow < G.OW; ow++) {
                int64_t h0, h1, w0, w1;
                int64_t div = avg_window(&G, oh, ow, &h0, &h1, &w0, &w1);
                float s = 0.0f;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) s += xp[ih * G.W + iw];
                yp[oh * G.OW + ow] = s / (float)div;
            }
    }
}

static void avgpool_backward(const remat__kctx *k, int ith, int nth) {
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *dy = k->dout;  // (N, C, OH, OW)
    float *dx = k->din[0];      // (N, C, H, W)
    if (!dx) return;
    int64_t lo, hi;
    remat__split(G.planes, ith, nth, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *dyp = dy + pl * G.OH * G.OW;  // (OH, OW)
        float *dxp = dx + pl * G.H * G.W;        // (H, W)
        for (int64_t oh = 0; oh < G.OH; oh++)
            for (int64_t ow = 0; ow < G.OW; ow++) {
                int64_t h0, h1, w0, w1;
                int64_t div = avg_window(&G, oh, ow, &h0, &h1, &w0, &w1);
                float gd = dyp[oh * G.OW + ow] / (float)div;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dxp[ih * G.W + iw] += gd;
            }
    }
}

const remat__op remat__op_avgpool2d = {
    .name = "avgpool2d",
    .min_in = 1,
    .max_in = 1,
    .shape = window_shape,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
    .saves = 0,
    .flops = window_flops,
    .family = REMAT_FAMILY_POOL,
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
    const float *x = k->in[0]->data;  // (N, C, H, W)
    float *y = k->out->data;          // (N, C, 1, 1)
    const int64_t hw = xs->d[2] * xs->d[3];
    int64_t lo, hi;
    remat__split(xs->d[0] * xs->d[1], ith, nth, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * hw;  // (H*W)
        float s = 0.0f;
        for (int64_t i = 0; i < hw; i++) s += xp[i];
        y[pl] = s / (float)hw;
    }
}

static void global_backward(const remat__kctx *k, int ith, int nth) {
    const remat__shape *xs = k->in[0]->shape;
    const float *dy = k->dout;  // (N, C, 1, 1)
    float *dx = k->din[0];      // (N, C, H, W)
    if (!dx) return;
    const int64_t hw = xs->d[2] * xs->d[3];
    int64_t lo, hi;
    remat__split(xs->d[0] * xs->d[1], ith, nth, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        float gd = dy[pl] / (float)hw;
        float *dxp = dx + pl * hw;  // (H*W)
        for (int64_t i = 0; i < hw; i++) dxp[i] += gd;
    }
}

static double global_flops(const remat_graph *g, const remat__node *n) {
    return (double)remat__numel(remat__in_shape(g, n, 0));
}

const remat__op remat__op_global_avgpool = {
    .name = "global_avgpool",
    .min_in = 1,
    .max_in = 1,
    .shape = global_shape,
    .forward = global_forward,
    .backward = global_backward,
    .saves = 0,
    .flops = global_flops,
    .family = REMAT_FAMILY_POOL,
};
