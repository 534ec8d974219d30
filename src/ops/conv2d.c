/* conv2d.c: 2-D convolution through im2col and cblas_sgemm.
 *
 * Inputs: x (N, Cin, H, W), weight (Cout, Cin, KH, KW), optional bias
 * (Cout); iattr[0] is the stride and iattr[1] the padding, the same for both
 * spatial dimensions. The output is (N, Cout, OH, OW) with
 * OH = (H + 2p - KH) / s + 1. Seen as matrices per image, with
 * K = Cin*KH*KW and P = OH*OW:
 *   y_n  = W col_n (+ b)                 (Cout, P) = (Cout, K) (K, P)
 *   dx_n += col2im(W^T dy_n)             (K, P) = (K, Cout) (Cout, P)
 *   dW  += sum_n dy_n col_n^T            (Cout, K) = (Cout, P) (P, K)
 *   db  += sum_n sum_p dy_n              (Cout)
 * where col_n = im2col(x_n). A 1x1 convolution with stride 1 and no padding
 * has col_n = x_n and skips the copy. Otherwise col_n is made and used a
 * band of output rows at a time (band_rows), so that it stays in the L2
 * cache between im2col and the GEMM that reads it, from a copy of the image
 * with its zero border, so that unfolding has no bounds tests.
 *
 * Images are split over the threads; each thread unfolds its images into
 * its own slice of the workspace. Backward sums dW and db per thread into a
 * zeroed partial buffer, then, after a pool barrier, reduces the partials
 * in thread order with the elements split over the threads, so results are
 * bitwise reproducible for a given thread count.
 *
 * Where oneDNN has a direct convolution for the shape that is faster
 * (remat__dnnl_conv_use, src/ops/dnnl.h: a rule on the shape and thread
 * count), the kernels hand the whole pass to it instead, with the
 * workspace it plans.
 */
#include "../remat-impl.h"
#include "dnnl.h"

#include <cblas.h>
#include <limits.h>

/* Everything the kernels derive from the shapes. */
typedef struct {
    int64_t N, C, H, W; /* input */
    int64_t O, KH, KW;  /* weight (O, C, KH, KW) */
    int64_t OH, OW;     /* output spatial size */
    int64_t s, p;       /* stride, padding */
    int64_t K, P;       /* gemm sizes: K = C*KH*KW, P = OH*OW */
    int direct;         /* 1x1, stride 1, no padding: col_n is x_n */
    int bias;
} geom;

static geom make_geom(const remat__shape *x, const remat__shape *w, const remat__node *n) {
    geom G;
    G.N = x->d[0], G.C = x->d[1], G.H = x->d[2], G.W = x->d[3];
    G.O = w->d[0], G.KH = w->d[2], G.KW = w->d[3];
    G.s = n->iattr[0], G.p = n->iattr[1];
    G.OH = (G.H + 2 * G.p - G.KH) / G.s + 1;
    G.OW = (G.W + 2 * G.p - G.KW) / G.s + 1;
    G.K = G.C * G.KH * G.KW;
    G.P = G.OH * G.OW;
    G.direct = G.KH == 1 && G.KW == 1 && G.s == 1 && G.p == 0;
    G.bias = n->n_in == 3;
    return G;
}

static geom graph_geom(const remat_graph *g, const remat__node *n) {
    return make_geom(remat__in_shape(g, n, 0), remat__in_shape(g, n, 1), n);
}

static geom kctx_geom(const remat__kctx *k) { return make_geom(k->in[0]->shape, k->in[1]->shape, k->node); }

/* Threads that receive at least one image under remat__split: the first
 * min(nth, N). Only they need workspace slices. */
static int64_t slices(const geom *G, int nth) { return G->N < nth ? G->N : nth; }

static remat__conv_dims dims_of(const geom *G) {
    return (remat__conv_dims){G->N, G->C, G->H, G->W, G->O, G->KH, G->KW, G->OH, G->OW, G->s, G->p, G->bias, 0, 0};
}

/* The kernel's dims: bf16 ones when the bf16 policy runs it natively
 * (k->dt set: its values in their stored dtypes). */
static remat__conv_dims kctx_dims(const remat__kctx *k, const geom *G) {
    remat__conv_dims cd = dims_of(G);
    if (k->dt) cd.bf16 = 1, cd.xbf16 = k->dt[k->node->in[0]] == REMAT_BF16;
    return cd;
}

/* Whether oneDNN runs this convolution on nth threads, with its workspace. */
static int dnnl_ws(const geom *G, int nth, size_t *fwd, size_t *bwd) {
    remat__conv_dims cd = dims_of(G);
    return remat__dnnl_conv_use(&cd, nth, fwd, bwd);
}

static remat_status conv_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    char lb[128], xs[64], ws[64];
    for (int i = 0; i < n->n_in; i++)
        if (g->nodes[n->in[i]].dtype != REMAT_F32)
            return remat__err(REMAT_SHAPE, "%s: input %d must be float32", remat__node_label(n, lb, sizeof lb), i);
    if (x->ndim != 4)
        return remat__err(REMAT_SHAPE, "%s: input %s must be 4-D (N, C, H, W)", remat__node_label(n, lb, sizeof lb),
                          remat__shape_str(x, xs, sizeof xs));
    if (w->ndim != 4)
        return remat__err(REMAT_SHAPE, "%s: weight %s must be 4-D (Cout, Cin, KH, KW)",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(w, ws, sizeof ws));
    if (x->d[1] != w->d[1])
        return remat__err(REMAT_SHAPE, "%s: input %s has %lld channels, weight %s expects %lld",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs), (long long)x->d[1],
                          remat__shape_str(w, ws, sizeof ws), (long long)w->d[1]);
    if (n->n_in == 3) {
        const remat__shape *b = remat__in_shape(g, n, 2);
        char bs[64];
        if (b->ndim != 1 || b->d[0] != w->d[0])
            return remat__err(REMAT_SHAPE, "%s: bias %s does not match weight %s (expected (%lld))",
                              remat__node_label(n, lb, sizeof lb), remat__shape_str(b, bs, sizeof bs),
                              remat__shape_str(w, ws, sizeof ws), (long long)w->d[0]);
    }
    int64_t s = n->iattr[0], p = n->iattr[1];
    if (s < 1)
        return remat__err(REMAT_SHAPE, "%s: stride %lld must be at least 1", remat__node_label(n, lb, sizeof lb),
                          (long long)s);
    if (p < 0)
        return remat__err(REMAT_SHAPE, "%s: padding %lld must not be negative", remat__node_label(n, lb, sizeof lb),
                          (long long)p);
    if (x->d[2] + 2 * p < w->d[2] || x->d[3] + 2 * p < w->d[3])
        return remat__err(REMAT_SHAPE,
                          "%s: kernel %lldx%lld of weight %s is larger than input %s "
                          "with padding %lld (empty output)",
                          remat__node_label(n, lb, sizeof lb), (long long)w->d[2], (long long)w->d[3],
                          remat__shape_str(w, ws, sizeof ws), remat__shape_str(x, xs, sizeof xs), (long long)p);
    n->shape = (remat__shape){4, {x->d[0], w->d[0], 0, 0}};
    n->dtype = REMAT_F32;
    geom G = make_geom(x, w, n);
    n->shape.d[2] = G.OH;
    n->shape.d[3] = G.OW;
    /* cblas takes int sizes and leading dimensions. */
    if (G.K > INT_MAX || G.P > INT_MAX || G.O > INT_MAX || G.H * G.W > INT_MAX)
        return remat__err(REMAT_UNSUPPORTED,
                          "%s: input %s with weight %s is too large for "
                          "32-bit BLAS sizes",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs),
                          remat__shape_str(w, ws, sizeof ws));
    return REMAT_OK;
}

/* Output columns ow whose input column iw = ow*s + off lies in [0, W):
 * [*lo, *hi), clipped to [0, OW). */
static void valid_cols(int64_t off, int64_t W, int64_t s, int64_t OW, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t h = W - 1 - off >= 0 ? (W - 1 - off) / s + 1 : 0;
    if (h > OW) h = OW;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* Output rows per unfolding chunk. A whole image's col can be far larger
 * than the L2 cache (128->32 channels at 32x32: 4.5 MB), so col is made
 * and consumed a band of output rows at a time: about 1 MiB of col (half
 * of a 2 MiB L2; 192 KiB measured 5-13% slower on the cnn's convolutions
 * with bench_kernels), but at least 128 columns so that the GEMMs stay
 * wide. Depends on the shapes only. */
static int64_t band_rows(const geom *G) {
    int64_t row_bytes = G->K * G->OW * (int64_t)sizeof(float);
    int64_t r = ((int64_t)1024 << 10) / (row_bytes > 0 ? row_bytes : 1);
    int64_t min_r = (128 + G->OW - 1) / G->OW;
    if (r < min_r) r = min_r;
    if (r < 1) r = 1;
    return r < G->OH ? r : G->OH;
}

/* Floats of one slice of unfolding workspace: col for one band (K, R*OW)
 * and, with padding, the padded image (C, H + 2p, W + 2p) it copies from. */
static size_t col_floats(const geom *G) {
    if (G->direct) return 0;
    size_t pad = G->p ? (size_t)G->C * (size_t)(G->H + 2 * G->p) * (size_t)(G->W + 2 * G->p) : 0;
    return (size_t)G->K * (size_t)(band_rows(G) * G->OW) + pad;
}

/* The image with its zero border, (C, H + 2p, W + 2p), in buf; x itself
 * when p = 0. The border stays zero from image to image: `fresh` says buf
 * is new in this kernel call and must be zeroed first. */
static const float *pad_image(const geom *G, const float *x, float *buf, int fresh) {
    // x: (C, H, W), buf: (C, Hp, Wp)
    const int64_t p = G->p, Hp = G->H + 2 * p, Wp = G->W + 2 * p;
    if (!p) return x;
    if (fresh) memset(buf, 0, (size_t)(G->C * Hp * Wp) * sizeof *buf);
    for (int64_t c = 0; c < G->C; c++)
        for (int64_t h = 0; h < G->H; h++) {
            float *br = buf + (c * Hp + h + p) * Wp + p;
            const float *xr = x + (c * G->H + h) * G->W;
            for (int64_t w = 0; w < G->W; w++) br[w] = xr[w];
        }
    return buf;
}

/* Unfolds output rows [oh0, oh1) of the padded image xp: row (c, kh, kw),
 * column (oh - oh0, ow) of col (K, (oh1 - oh0)*OW) holds
 * xp[c][oh*s + kh][ow*s + kw]. Rows of col are short (OW elements), so the
 * copies are plain loops (the padding made them branch-free), not calls. */
static void im2col(const geom *G, const float *xp, float *col, int64_t oh0, int64_t oh1) {
    const int64_t s = G->s, OW = G->OW, Hp = G->H + 2 * G->p, Wp = G->W + 2 * G->p;
    const int64_t Pc = (oh1 - oh0) * OW;
    for (int64_t c = 0; c < G->C; c++)
        for (int64_t kh = 0; kh < G->KH; kh++)
            for (int64_t kw = 0; kw < G->KW; kw++) {
                float *row = col + ((c * G->KH + kh) * G->KW + kw) * Pc;
                const float *src = xp + (c * Hp + kh) * Wp + kw;
                for (int64_t oh = oh0; oh < oh1; oh++) {
                    float *r = row + (oh - oh0) * OW;
                    const float *xr = src + oh * s * Wp;
                    if (s == 1)
                        for (int64_t ow = 0; ow < OW; ow++) r[ow] = xr[ow];
                    else if (s == 2)
                        for (int64_t ow = 0; ow < OW; ow++) r[ow] = xr[2 * ow];
                    else
                        for (int64_t ow = 0; ow < OW; ow++) r[ow] = xr[ow * s];
                }
            }
}

/* The adjoint of im2col for output rows [oh0, oh1), into the unpadded dx:
 * adds every in-bounds entry of col to its source pixel, in row order then
 * column order. */
static void col2im_add(const geom *G, const float *col, float *dx, int64_t oh0, int64_t oh1) {
    // col: (K, (oh1 - oh0)*OW), dx: (C, H, W)
    const int64_t H = G->H, W = G->W, s = G->s, OW = G->OW, Pc = (oh1 - oh0) * OW;
    for (int64_t c = 0; c < G->C; c++)
        for (int64_t kh = 0; kh < G->KH; kh++)
            for (int64_t kw = 0; kw < G->KW; kw++) {
                const float *row = col + ((c * G->KH + kh) * G->KW + kw) * Pc;
                int64_t off = kw - G->p, wlo, whi;
                valid_cols(off, W, s, OW, &wlo, &whi);
                for (int64_t oh = oh0; oh < oh1; oh++) {
                    int64_t ih = oh * s - G->p + kh;
                    if (ih < 0 || ih >= H) continue;
                    const float *r = row + (oh - oh0) * OW;
                    float *dr = dx + (c * H + ih) * W + off;
                    if (s == 1) /* a row's targets are distinct: this vectorizes */
                        for (int64_t ow = wlo; ow < whi; ow++) dr[ow] += r[ow];
                    else
                        for (int64_t ow = wlo; ow < whi; ow++) dr[ow * s] += r[ow];
                }
            }
}

/* Sum of a row of n floats in 8 interleaved partial sums (element i goes
 * to partial i % 8), combined in a fixed order: a fixed rounding, and eight
 * independent chains the compiler can keep in vector registers. */
static float row_sum(const float *x, int64_t n) {
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += x[i + j];
    for (int j = 0; i + j < n; j++) acc[j] += x[i + j];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static size_t conv_fwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    geom G = graph_geom(g, n);
    size_t f, b;
    if (dnnl_ws(&G, nth, &f, &b)) return f;
    return (size_t)slices(&G, nth) * col_floats(&G) * sizeof(float);
}

/* Backward workspace, per slice: col_floats unless direct, then the dW
 * partial (O, K) and, with a bias, the db partial (O). */
static size_t conv_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    geom G = graph_geom(g, n);
    size_t f, b;
    if (dnnl_ws(&G, nth, &f, &b)) return b;
    size_t per = col_floats(&G) + (size_t)G.O * (size_t)G.K + (G.bias ? (size_t)G.O : 0);
    return (size_t)slices(&G, nth) * per * sizeof(float);
}

static void conv_forward(const remat__kctx *k, int ith, int nth) {
    const geom G = kctx_geom(k);
    const float *x = k->in[0]->data;                 // (N, C, H, W)
    const float *w = k->in[1]->data;                 // (O, C, KH, KW) = (O, K)
    const float *b = G.bias ? k->in[2]->data : NULL; // (O)
    float *y = k->out->data;                         // (N, O, OH, OW)
    remat__conv_dims cd = kctx_dims(k, &G);
    if (cd.bf16 || remat__dnnl_conv_uses(k->dnnl, &cd, nth)) { /* bf16: planned so (conv_bf16_ws) */
        remat__dnnl_conv_forward(k->dnnl, &cd, x, w, b, y, k->ws, k->pool, ith, nth);
        return;
    }
    const int64_t R = band_rows(&G);
    int64_t lo, hi;
    remat__split(G.N, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    float *col = G.direct ? NULL : (float *)k->ws + (size_t)ith * col_floats(&G); // (K, R*OW)
    float *pad = col ? col + G.K * R * G.OW : NULL;                               // (C, Hp, Wp)
    for (int64_t n = lo; n < hi; n++) {
        const float *xn = x + n * G.C * G.H * G.W; // (C, H, W) = (K, P) when direct
        float *yn = y + n * G.O * G.P;             // (O, P)
        if (b)
            for (int64_t o = 0; o < G.O; o++)
                for (int64_t q = 0; q < G.P; q++) yn[o * G.P + q] = b[o];
        if (G.direct) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)G.O, (int)G.P, (int)G.K, 1.0f, w, (int)G.K, xn,
                        (int)G.P, b ? 1.0f : 0.0f, yn, (int)G.P);
            continue;
        }
        const float *xp = pad_image(&G, xn, pad, n == lo);
        for (int64_t oh0 = 0; oh0 < G.OH; oh0 += R) {
            int64_t oh1 = oh0 + R < G.OH ? oh0 + R : G.OH, Pc = (oh1 - oh0) * G.OW;
            im2col(&G, xp, col, oh0, oh1);
            /* y_n[:, band] (O, Pc) = W (O, K) col (K, Pc) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)G.O, (int)Pc, (int)G.K, 1.0f, w, (int)G.K, col,
                        (int)Pc, b ? 1.0f : 0.0f, yn + oh0 * G.OW, (int)G.P);
        }
    }
}

/* Backward of one image of a direct convolution (col_n = x_n): dW += dy_n
 * x_n^T when mw, dx_n += W^T dy_n when dxn. */
static void bwd_direct(const geom *G, const float *w, const float *xn, const float *dyn, float *dxn, float *mw) {
    if (mw) /* dW (O, K) += dy_n (O, P) x_n^T (P, K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)G->O, (int)G->K, (int)G->P, 1.0f, dyn, (int)G->P, xn,
                    (int)G->P, 1.0f, mw, (int)G->K);
    if (dxn) /* dx_n (K, P) += W^T (K, O) dy_n (O, P) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)G->K, (int)G->P, (int)G->O, 1.0f, w, (int)G->K, dyn,
                    (int)G->P, 1.0f, dxn, (int)G->P);
}

/* Backward of one image, a band of R output rows at a time through col:
 * dW += dy_n[:, band] col^T when mw (xp: the padded image), and dx_n +=
 * col2im(W^T dy_n[:, band]) when dxn. */
static void bwd_bands(const geom *G, int64_t R, const float *w, const float *xp, const float *dyn, float *dxn,
                      float *mw, float *col) {
    for (int64_t oh0 = 0; oh0 < G->OH; oh0 += R) {
        int64_t oh1 = oh0 + R < G->OH ? oh0 + R : G->OH, Pc = (oh1 - oh0) * G->OW;
        const float *dyb = dyn + oh0 * G->OW; // (O, Pc), row stride P
        if (mw) {                             /* dW (O, K) += dy_n[:, band] (O, Pc) col^T (Pc, K) */
            im2col(G, xp, col, oh0, oh1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)G->O, (int)G->K, (int)Pc, 1.0f, dyb, (int)G->P,
                        col, (int)Pc, 1.0f, mw, (int)G->K);
        }
        if (dxn) { /* col (K, Pc) = W^T (K, O) dy_n[:, band] (O, Pc), folded into dx_n */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)G->K, (int)Pc, (int)G->O, 1.0f, w, (int)G->K, dyb,
                        (int)G->P, 0.0f, col, (int)Pc);
            col2im_add(G, col, dxn, oh0, oh1);
        }
    }
}

/* out[e] += the S partials' e (part: (S, n)), added in thread order 0..S-1,
 * for this thread's share of the n elements. */
static void reduce_partials(const float *part, int64_t S, size_t n, float *out, int ith, int nth) {
    int64_t lo, hi;
    remat__split((int64_t)n, ith, nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++) {
        float s = part[e];
        for (int64_t t = 1; t < S; t++) s += part[(size_t)t * n + (size_t)e];
        out[e] += s;
    }
}

static void conv_backward(const remat__kctx *k, int ith, int nth) {
    const geom G = kctx_geom(k);
    const float *x = k->in[0]->data;       // (N, C, H, W)
    const float *w = k->in[1]->data;       // (O, K)
    const float *dy = k->dout;             // (N, O, OH, OW)
    float *dx = k->din[0];                 // (N, C, H, W) or NULL
    float *dw = k->din[1];                 // (O, K) or NULL
    float *db = G.bias ? k->din[2] : NULL; // (O) or NULL
    remat__conv_dims cd = kctx_dims(k, &G);
    if (cd.bf16 || remat__dnnl_conv_uses(k->dnnl, &cd, nth)) { /* bf16: planned so (conv_bf16_ws) */
        remat__dnnl_conv_backward(k->dnnl, &cd, x, w, dy, dx, dw, db, k->ws, k->pool, ith, nth);
        return;
    }
    const int64_t S = slices(&G, nth), R = band_rows(&G);
    const size_t colsz = col_floats(&G);
    const size_t wsz = (size_t)(G.O * G.K), bsz = G.bias ? (size_t)G.O : 0;
    float *cols = k->ws;                  // (S, colsz) unless direct
    float *pw = cols + (size_t)S * colsz; // (S, O, K) dW partials
    float *pb = pw + (size_t)S * wsz;     // (S, O) db partials, with bias
    int64_t lo, hi;
    remat__split(G.N, ith, nth, &lo, &hi);
    if (hi > lo) {
        float *col = cols + (size_t)ith * colsz;             // (K, R*OW)
        float *pad = G.direct ? NULL : col + G.K * R * G.OW; // (C, Hp, Wp) with padding
        float *mw = dw ? pw + (size_t)ith * wsz : NULL;      // (O, K)
        float *mb = pb + (size_t)ith * bsz;                  // (O)
        if (dw) memset(mw, 0, wsz * sizeof *mw);
        if (db) memset(mb, 0, bsz * sizeof *mb);
        for (int64_t n = lo; n < hi; n++) {
            const float *xn = x + n * G.C * G.H * G.W;         // (C, H, W) = (K, P) when direct
            const float *dyn = dy + n * G.O * G.P;             // (O, P)
            float *dxn = dx ? dx + n * G.C * G.H * G.W : NULL; // (C, H, W) = (K, P) when direct
            if (db)
                for (int64_t o = 0; o < G.O; o++) mb[o] += row_sum(dyn + o * G.P, G.P);
            if (G.direct) bwd_direct(&G, w, xn, dyn, dxn, mw);
            else bwd_bands(&G, R, w, dw ? pad_image(&G, xn, pad, n == lo) : NULL, dyn, dxn, mw, col);
        }
    }
    if (!dw && !db) return; /* the same on every thread: no barrier needed */
    remat__pool_barrier(k->pool);
    if (dw) reduce_partials(pw, S, wsz, dw, ith, nth);
    if (db) reduce_partials(pb, S, bsz, db, ith, nth);
}

/* The bf16 policy's native kernels: through oneDNN in bf16 where its rule
 * says so (float32 weights and bias, which are rounded per call). */
static int conv_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                        size_t *bwd) {
    geom G = graph_geom(g, n);
    remat__conv_dims cd = dims_of(&G);
    for (int i = 1; i < n->n_in; i++)
        if (dt[n->in[i]] != REMAT_F32) return 0;
    cd.bf16 = 1, cd.xbf16 = dt[n->in[0]] == REMAT_BF16;
    return remat__dnnl_conv_use(&cd, nth, fwd, bwd);
}

static double conv_flops(const remat_graph *g, const remat__node *n) {
    geom G = graph_geom(g, n);
    return 2.0 * (double)G.N * (double)G.O * (double)G.P * (double)G.K;
}

const remat__op remat__op_conv2d = {
    .autocast = REMAT__AC_LOW,
    .name = "conv2d",
    .min_in = 2,
    .max_in = 3,
    .shape = conv_shape,
    .forward = conv_forward,
    .backward = conv_backward,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1),
    .fwd_ws = conv_fwd_ws,
    .bwd_ws = conv_bwd_ws,
    .bf16_ws = conv_bf16_ws,
    .flops = conv_flops,
    .family = REMAT_FAMILY_CONV,
    .cuda = REMAT__CUDA(conv2d),
};
