/* dnnl_conv1x1.c: the bf16 policy's 1x1 convolutions (stride 1, no
 * padding, no bias, x in bf16) as bf16 products on NCHW, one image at a
 * time, through oneDNN's matmul (remat__dnnl_bf16_gemm), with no
 * reorders: on these shapes oneDNN's convolution spends more moving NCHW
 * to its blocked layouts and back than AMX saves (bench_kernels' 1x1 rows
 * in bf16: backward 0.67-1.23x the float32 GEMM's time).
 *
 * With P = H W and image n's x_n (C, P), y_n and dy_n (O, P):
 *   forward         y_n = bf16(W16 x_n), W16 = W rounded to bf16 per call;
 *   backward-data   dx_n = bf16(dx_n + bf16(W16^T dy_n)), the product in
 *                   float32 rounded once, then added (REMAT__CVT_ACC_BF16,
 *                   as the convolution's reorder with a sum post-op adds);
 *   backward-weights each thread sums dy_n x_n^T over its images in float32
 *                   (a product per image into a buffer, added in image
 *                   order), the threads' partials are summed in thread
 *                   order, and dW += bf16(the sum): rounded once, as the
 *                   convolution's path rounds it.
 * The rule reads the dims alone (remat__dnnl_conv1x1_use), so a node takes
 * the same path, and gives the same bits, in every schedule. Every buffer,
 * the products' scratchpads included, is a slice of the op's planned
 * workspace: [W16] then, per thread (min(N, nth) of them), its own.
 */
#include "dnnl.h"

#include "../core/bf16.h"
#include "pw16.h"

#ifndef REMAT_HAVE_DNNL

int remat__dnnl_conv1x1_use(const remat__conv_dims *cd, int nth, size_t *fwd_ws, size_t *bwd_ws) {
    (void)cd, (void)nth;
    *fwd_ws = *bwd_ws = 0;
    return 0;
}
int remat__dnnl_conv1x1_forward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w, void *y,
                                void *ws, remat__pool *pool, int ith, int nth) {
    (void)d, (void)cd, (void)x, (void)w, (void)y, (void)ws, (void)pool, (void)ith, (void)nth;
    return 0;
}
int remat__dnnl_conv1x1_backward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w,
                                 const void *dy, void *dx, float *dw, void *ws, remat__pool *pool, int ith, int nth) {
    (void)d, (void)cd, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)ws, (void)pool, (void)ith, (void)nth;
    return 0;
}

#else /* REMAT_HAVE_DNNL */

#include "dnnl-impl.h"

/* The three products of image n, row-major: forward (O, P) = W (O, C)
 * x_n (C, P); backward-data (C, P) = W^T dy_n (O, P); backward-weights
 * (O, C) = dy_n x_n^T. */
typedef struct {
    remat__mm f, bd, bw;
} mms;

static mms mms_of(const remat__conv_dims *cd) {
    int64_t P = cd->H * cd->W;
    mms m = {
        .f = {.M = cd->O, .N = P, .K = cd->C, .lda = cd->C, .ldb = P, .ldc = P},
        .bd = {.ta = 1, .M = cd->C, .N = P, .K = cd->O, .lda = cd->C, .ldb = P, .ldc = P},
        .bw = {.tb = 1, .M = cd->O, .N = cd->C, .K = P, .lda = P, .ldb = P, .ldc = cd->C},
    };
    return m;
}

/* The shape rule: a 1x1 convolution at stride 1 without padding or bias,
 * x and y in bf16. */
static int shape_ok(const remat__conv_dims *cd) {
    return cd->bf16 && cd->xbf16 && cd->KH == 1 && cd->KW == 1 && cd->s == 1 && cd->p == 0 && !cd->bias &&
           cd->OH == cd->H && cd->OW == cd->W && cd->N >= 1 && cd->C >= 1 && cd->O >= 1;
}

/* The workspace's parts, in bytes (each a multiple of 64). */
typedef struct {
    size_t w16;               /* W rounded to bf16, shared */
    size_t sf;                /* forward: a thread's scratchpad */
    size_t dxf, dwt, dwp, sb; /* backward, per thread: dx_n in float32, image n's dW, the partial, scratchpad */
    size_t fwd_per, bwd_per;
} parts;

static parts parts_of(const remat__conv_dims *cd, size_t sf, size_t sbd, size_t sbw) {
    parts q;
    q.w16 = remat__dnnl_up((size_t)(cd->O * cd->C) * 2);
    q.sf = remat__dnnl_up(sf);
    q.dxf = remat__dnnl_up((size_t)(cd->C * cd->H * cd->W) * sizeof(float));
    q.dwt = q.dwp = remat__dnnl_up((size_t)(cd->O * cd->C) * sizeof(float));
    q.sb = remat__dnnl_up(sbd > sbw ? sbd : sbw);
    q.fwd_per = q.sf;
    q.bwd_per = q.dxf + q.dwt + q.dwp + q.sb;
    return q;
}

int remat__dnnl_conv1x1_use(const remat__conv_dims *cd, int nth, size_t *fwd_ws, size_t *bwd_ws) {
    *fwd_ws = *bwd_ws = 0;
    if (!shape_ok(cd)) return 0;
    mms m = mms_of(cd);
    size_t sf, sbd, sbw;
    if (!remat__dnnl_bf16_gemm_use(&m.f, REMAT__MM_BF16, &sf) ||
        !remat__dnnl_bf16_gemm_use(&m.bd, REMAT__MM_F32, &sbd) ||
        !remat__dnnl_bf16_gemm_use(&m.bw, REMAT__MM_F32, &sbw))
        return 0;
    parts q = parts_of(cd, sf, sbd, sbw);
    size_t S = (size_t)(cd->N < nth ? cd->N : nth);
    *fwd_ws = q.w16 + S * q.fwd_per;
    *bwd_ws = q.w16 + S * q.bwd_per;
    return 1;
}

/* The parts from the context's primitives (the planner's answer); 0 where
 * the rule says no (the same answer on every thread, so a kernel decides
 * before its first barrier). */
static int parts_now(remat__dnnl *d, const remat__conv_dims *cd, const mms *m, parts *q) {
    size_t sf, sbd, sbw;
    if (!d || !shape_ok(cd) || !remat__dnnl_bf16_gemm_have(d, &m->f, REMAT__MM_BF16, &sf) ||
        !remat__dnnl_bf16_gemm_have(d, &m->bd, REMAT__MM_F32, &sbd) ||
        !remat__dnnl_bf16_gemm_have(d, &m->bw, REMAT__MM_F32, &sbw))
        return 0;
    *q = parts_of(cd, sf, sbd, sbw);
    return 1;
}

/* W16 = W rounded to bf16, its elements split over the threads; a barrier
 * after. */
static void round_w(const remat__conv_dims *cd, const float *w, uint16_t *w16, remat__pool *pool, int ith, int nth) {
    int64_t lo, hi;
    remat__split(cd->O * cd->C, ith, nth, &lo, &hi);
    if (hi > lo) remat__pw16_best()->convert(w16, w, lo, hi, REMAT__CVT_DOWN);
    remat__pool_barrier(pool);
}

int remat__dnnl_conv1x1_forward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w, void *y,
                                void *ws, remat__pool *pool, int ith, int nth) {
    mms m = mms_of(cd);
    parts q;
    if (!parts_now(d, cd, &m, &q)) return 0;
    uint16_t *w16 = ws;
    round_w(cd, w, w16, pool, ith, nth);
    const int64_t xi = cd->C * cd->H * cd->W, yi = cd->O * cd->H * cd->W;
    int64_t lo, hi;
    remat__split(cd->N, ith, nth, &lo, &hi);
    if (hi <= lo) return 1; /* a thread past the images has no slot */
    char *sc = (char *)ws + q.w16 + (size_t)ith * q.fwd_per;
    for (int64_t n = lo; n < hi; n++)
        if (!remat__dnnl_bf16_gemm(d, ith, &m.f, REMAT__MM_BF16, w16, (const uint16_t *)x + n * xi, NULL,
                                   (uint16_t *)y + n * yi, sc))
            break;
    return 1;
}

/* Sums the threads' partials (the first S) in thread order into thread
 * 0's, elements split over the threads. */
static void sum_partials(const remat__conv_dims *cd, const parts *q, char *ws, int ith, int nth) {
    int64_t S = cd->N < nth ? cd->N : nth, lo, hi;
    char *p0 = ws + q->w16 + q->dxf + q->dwt;
    remat__split(cd->O * cd->C, ith, nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++) {
        float acc = ((float *)p0)[e];
        for (int64_t th = 1; th < S; th++) acc += ((const float *)(p0 + (size_t)th * q->bwd_per))[e];
        ((float *)p0)[e] = acc;
    }
}

int remat__dnnl_conv1x1_backward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w,
                                 const void *dy, void *dx, float *dw, void *ws, remat__pool *pool, int ith, int nth) {
    mms m = mms_of(cd);
    parts q;
    if (!parts_now(d, cd, &m, &q)) return 0;
    int ok = 1;
    uint16_t *w16 = ws;
    if (dx) round_w(cd, w, w16, pool, ith, nth);
    else remat__pool_barrier(pool);
    const int64_t P = cd->H * cd->W, xi = cd->C * P, yi = cd->O * P, nw = cd->O * cd->C;
    const remat__pw16_kernels *K = remat__pw16_best();
    int64_t lo, hi;
    remat__split(cd->N, ith, nth, &lo, &hi);
    /* this thread's slot (a thread past the images has none) */
    char *mine = hi > lo ? (char *)ws + q.w16 + (size_t)ith * q.bwd_per : NULL;
    float *dxf = mine ? (float *)mine : NULL, *dwt = mine ? (float *)(mine + q.dxf) : NULL;
    float *dwp = mine ? (float *)(mine + q.dxf + q.dwt) : NULL;
    void *sc = mine ? mine + q.dxf + q.dwt + q.dwp : NULL;
    for (int64_t n = lo; ok && n < hi; n++) {
        const uint16_t *xn = (const uint16_t *)x + n * xi, *dyn = (const uint16_t *)dy + n * yi;
        if (dx) {
            ok = remat__dnnl_bf16_gemm(d, ith, &m.bd, REMAT__MM_F32, w16, dyn, NULL, dxf, sc);
            if (ok) K->convert((uint16_t *)dx + n * xi, dxf, 0, xi, REMAT__CVT_ACC_BF16);
        }
        if (dw && ok) {
            float *c = n == lo ? dwp : dwt;
            ok = remat__dnnl_bf16_gemm(d, ith, &m.bw, REMAT__MM_F32, dyn, xn, NULL, c, sc);
            if (ok && n != lo)
                for (int64_t e = 0; e < nw; e++) dwp[e] += dwt[e];
        }
    }
    if (!dw) return 1; /* the same on every thread: no barrier needed */
    remat__pool_barrier(pool);
    if (ok) sum_partials(cd, &q, ws, ith, nth);
    remat__pool_barrier(pool);
    if (ith != 0 || !ok) return 1;
    const float *sum = (const float *)((char *)ws + q.w16 + q.dxf + q.dwt);
    for (int64_t e = 0; e < nw; e++) dw[e] += remat__bf16_round(sum[e]);
    return 1;
}

#endif /* REMAT_HAVE_DNNL */
