/* k_conv1x1.cu: 1x1 convolutions with padding 0 as cuBLAS products,
 * deterministic by construction, instead of cuDNN's deterministic
 * algorithms (whose strided 1x1 backward-data took 5.15 ms at ResNet-50
 * b64 on an H100 where the non-deterministic one takes 0.50 ms).
 *
 * x (N, C, H, W), w (O, C, 1, 1), y (N, O, OH, OW), stride s, padding 0:
 * OH = (H - 1) / s + 1, OW = (W - 1) / s + 1, P = OH * OW. The output
 * pixel (oh, ow) reads the input pixel (oh * s, ow * s) only. With X_n
 * (C, P) the strided input of image n (x_n itself when s == 1), per image
 * (the CPU's src/ops/conv2d.c: y_n = W col_n, col_n = X_n for a 1x1):
 *   y_n  = W X_n                      (O, P) = (O, C) (C, P)
 *   dX_n = W^T dy_n                   (C, P) = (C, O) (O, P)
 *   dW  += sum_n dy_n X_n^T           (O, C) = (O, N P) (N P, C)
 * and dx_n += dX_n at the strided pixels (the others get no gradient).
 *
 * Row-major data, column-major cuBLAS: a row-major (r, c) matrix with
 * leading dimension c is a column-major (c, r) one, so each product is
 * written for the transposes (see each call). Forward and s == 1
 * backward-data are one strided-batched product over the images (w's
 * batch stride 0); s > 1 first gathers X_n into the workspace (forward)
 * or computes dX_n there and scatter-adds it into dx (backward-data);
 * dW gathers G images of X and dy into channel-major (C, G P) and
 * (O, G P) and adds their one product into dW, chunk after chunk in image
 * order. G (images per chunk) is a function of the shapes only.
 *
 * cuBLAS is bitwise reproducible for a given problem, workspace and
 * device on one stream (the handle's atomics mode stays off, its default);
 * the workspace given to it is a fixed size per node (4 or 32 MiB, by the
 * product's size, as k_linear.cu's), so a node computes the same bits in
 * every schedule. TF32 only when the session asked (remat__cuda_blas_ws
 * sets the math mode). Gathers and scatters are elementwise: each
 * destination element is written by one thread, once.
 *
 * Workspace, 256-byte aligned regions from k->ws: [cuBLAS][gathers], where
 * the gathers are, forward: X of G images (G, C, P) when s > 1; backward:
 * max(dX of G images (G, C, P) when s > 1, X and dy channel-major
 * (C, G P) + (O, G P)) (dx's products finish before dW's gathers begin,
 * on the one stream).
 */
#include "conv1x1.h"

#include <limits.h>

/* Bytes of gathered images one chunk may take: enough for G P columns
 * that keep the dW product efficient (16 images of 56 x 56 at 256 + 64
 * channels), small against the tensors of the layers that need chunks. */
#define C1_CHUNK_BYTES ((size_t)64 << 20)

/* Everything the kernels derive from the shapes. */
typedef struct {
    int64_t N, C, H, W, O, OH, OW, P, s;
    int64_t G;   /* images per chunk */
    size_t blas; /* cuBLAS's workspace */
} c1geom;

static size_t c1_align(size_t b) { return (b + 255) & ~(size_t)255; }

static c1geom c1_geom(const remat_graph *g, const remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    c1geom G;
    G.N = x->d[0], G.C = x->d[1], G.H = x->d[2], G.W = x->d[3];
    G.O = w->d[0];
    G.s = n->iattr[0];
    G.OH = n->shape.d[2], G.OW = n->shape.d[3];
    G.P = G.OH * G.OW;
    /* dW's chunk holds (C + O) G P floats */
    const size_t per_image = (size_t)(G.C + G.O) * (size_t)G.P * sizeof(float);
    G.G = per_image ? (int64_t)(C1_CHUNK_BYTES / per_image) : G.N;
    if (G.G < 1) G.G = 1;
    if (G.G > G.N) G.G = G.N;
    const double flops = 2.0 * (double)G.N * (double)G.C * (double)G.O * (double)G.P;
    G.blas = flops >= (double)(1 << 30) ? (size_t)32 << 20 : (size_t)4 << 20;
    return G;
}

extern "C" int remat__conv1x1_gemm(const remat_graph *g, const remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0), *w = remat__in_shape(g, n, 1);
    if (w->d[2] != 1 || w->d[3] != 1 || n->iattr[1] != 0 || n->iattr[0] < 1) return 0;
    /* every size, leading dimension and index below then fits an int */
    return remat__numel(x) <= INT_MAX && remat__numel(w) <= INT_MAX && remat__numel(&n->shape) <= INT_MAX;
}

extern "C" size_t remat__conv1x1_fwd_ws(const remat_graph *g, const remat__node *n) {
    const c1geom G = c1_geom(g, n);
    size_t b = c1_align(G.blas);
    if (G.s > 1) b += c1_align((size_t)(G.G * G.C * G.P) * sizeof(float));
    return b;
}

extern "C" size_t remat__conv1x1_bwd_ws(const remat_graph *g, const remat__node *n) {
    const c1geom G = c1_geom(g, n);
    size_t data = G.s > 1 ? c1_align((size_t)(G.G * G.C * G.P) * sizeof(float)) : 0;
    size_t filt =
        c1_align((size_t)(G.G * G.C * G.P) * sizeof(float)) + c1_align((size_t)(G.G * G.O * G.P) * sizeof(float));
    return c1_align(G.blas) + (data > filt ? data : filt);
}

/* ------------------------------------------------------------ kernels */

/* Gathers the strided pixels of images [0, G) of src (G, Ch, H, W) (the
 * caller offsets src to the chunk's first image): element (i, c, q) with
 * q = oh * OW + ow reads src[i][c][oh * s][ow * s] and goes to
 * dst[c * dc + i * di + q]: (dc, di) = (P, Ch P) lays dst out as
 * (G, Ch, P), (G P, P) as (Ch, G P). Consecutive threads take consecutive
 * q, so writes are coalesced (and reads too when s == 1). */
static __global__ void c1_gather(float *__restrict__ dst, const float *__restrict__ src, int64_t G, int64_t Ch,
                                 int64_t OH, int64_t OW, int64_t H, int64_t W, int64_t s, int64_t dc, int64_t di) {
    const int64_t P = OH * OW, total = G * Ch * P;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t q = e % P, ic = e / P, c = ic % Ch, i = ic / Ch;
        const int64_t oh = q / OW, ow = q - oh * OW;
        dst[c * dc + i * di + q] = src[(i * Ch + c) * H * W + oh * s * W + ow * s];
    }
}

/* dx[i][c][oh * s][ow * s] += t[i][c][oh * OW + ow] for images [0, G) of
 * dx (G, C, H, W) (offset by the caller) and t (G, C, OH, OW). The strided
 * pixels are distinct, so each dx element has at most one writer. */
static __global__ void c1_scatter_add(float *__restrict__ dx, const float *__restrict__ t, int64_t G, int64_t C,
                                      int64_t OH, int64_t OW, int64_t H, int64_t W, int64_t s) {
    const int64_t P = OH * OW, total = G * C * P;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t q = e % P, ic = e / P;
        const int64_t oh = q / OW, ow = q - oh * OW;
        dx[ic * H * W + oh * s * W + ow * s] += t[e];
    }
}

static remat_status c1_gather_launch(const remat__kctx *k, float *dst, const float *src, int64_t G, int64_t Ch,
                                     const c1geom *g, int64_t s, int64_t H, int64_t W, int channel_major) {
    remat__cuda *cu = remat__cu(k);
    const int64_t dc = channel_major ? G * g->P : g->P, di = channel_major ? g->P : Ch * g->P;
    c1_gather<<<remat__cu_blocks(cu, G * Ch * g->P), REMAT__CU_THREADS, 0, cu->stream>>>(dst, src, G, Ch, g->OH, g->OW,
                                                                                         H, W, s, dc, di);
    return remat__cu_launched(k, "c1_gather");
}

/* ---------------------------------------------------------- products */

/* y_n (O, P) = W (O, C) X_n (C, P) for `batch` images, as column-major
 * y_n^T (P, O) = X_n^T (P, C) W^T (C, O): X_n row-major (C, P) is
 * column-major (P, C) with ld P; W row-major (O, C) is column-major
 * (C, O) with ld C, the same for every image (stride 0); y_n is
 * column-major (P, O) with ld P. */
static remat_status c1_fwd_gemm(const remat__kctx *k, const c1geom *g, const float *X, const float *w, float *y,
                                int64_t batch) {
    remat__cuda *cu = remat__cu(k);
    const float one = 1.0f, zero = 0.0f;
    return remat__cu_blas_ok(cublasSgemmStridedBatched(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->P, (int)g->O,
                                                       (int)g->C, &one, X, (int)g->P, (long long)(g->C * g->P), w,
                                                       (int)g->C, 0LL, &zero, y, (int)g->P, (long long)(g->O * g->P),
                                                       (int)batch),
                             k, "cublasSgemmStridedBatched (1x1 conv forward)");
}

extern "C" remat_status remat__conv1x1_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const c1geom g = c1_geom(cu->g, k->node);
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W)
    const float *w = (const float *)k->in[1]->data; // (O, C, 1, 1)
    float *y = (float *)k->out->data;               // (N, O, OH, OW)
    if (g.N == 0 || g.O == 0 || g.P == 0) return REMAT_OK;
    if (g.C == 0) /* an empty sum */
        return remat__cu_rt_ok(cudaMemsetAsync(y, 0, (size_t)(g.N * g.O * g.P) * sizeof(float), cu->stream), k,
                               "cudaMemsetAsync (1x1 conv forward)");
    REMAT__CU_TRY(remat__cuda_blas_ws(k, g.blas));
    if (g.s == 1) return c1_fwd_gemm(k, &g, x, w, y, g.N);
    float *xs = (float *)((unsigned char *)k->ws + c1_align(g.blas)); // (G, C, P)
    for (int64_t n0 = 0; n0 < g.N; n0 += g.G) {
        const int64_t G = g.N - n0 < g.G ? g.N - n0 : g.G;
        REMAT__CU_TRY(c1_gather_launch(k, xs, x + n0 * g.C * g.H * g.W, G, g.C, &g, g.s, g.H, g.W, 0));
        REMAT__CU_TRY(c1_fwd_gemm(k, &g, xs, w, y + n0 * g.O * g.P, G));
    }
    return REMAT_OK;
}

/* dX_n (C, P) = W^T (C, O) dy_n (O, P) for `batch` images, into dst with
 * image stride dst_stride (beta 0: a workspace; 1: dx itself), as
 * column-major dX_n^T (P, C) = dy_n^T (P, O) W (O, C): dy_n row-major
 * (O, P) is column-major (P, O) with ld P; W is column-major (C, O) with
 * ld C, transposed to (O, C); dX_n is column-major (P, C) with ld P. */
static remat_status c1_data_gemm(const remat__kctx *k, const c1geom *g, const float *dy, const float *w, float *dst,
                                 int64_t dst_stride, float beta, int64_t batch) {
    remat__cuda *cu = remat__cu(k);
    const float one = 1.0f;
    return remat__cu_blas_ok(cublasSgemmStridedBatched(cu->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)g->P, (int)g->C,
                                                       (int)g->O, &one, dy, (int)g->P, (long long)(g->O * g->P), w,
                                                       (int)g->C, 0LL, &beta, dst, (int)g->P, (long long)dst_stride,
                                                       (int)batch),
                             k, "cublasSgemmStridedBatched (1x1 conv dx)");
}

/* dx += conv's input gradient: for s == 1 one product accumulating into
 * dx (X_n's pixels are x_n's); else per chunk, dX into the workspace and
 * its scatter-add into dx's strided pixels. */
static remat_status c1_backward_data(const remat__kctx *k, const c1geom *g, const float *dy, const float *w,
                                     float *dx) {
    remat__cuda *cu = remat__cu(k);
    if (g->s == 1) return c1_data_gemm(k, g, dy, w, dx, g->C * g->P, 1.0f, g->N);
    float *t = (float *)((unsigned char *)k->ws + c1_align(g->blas)); // (G, C, P)
    for (int64_t n0 = 0; n0 < g->N; n0 += g->G) {
        const int64_t G = g->N - n0 < g->G ? g->N - n0 : g->G;
        REMAT__CU_TRY(c1_data_gemm(k, g, dy + n0 * g->O * g->P, w, t, g->C * g->P, 0.0f, G));
        c1_scatter_add<<<remat__cu_blocks(cu, G * g->C * g->P), REMAT__CU_THREADS, 0, cu->stream>>>(
            dx + n0 * g->C * g->H * g->W, t, G, g->C, g->OH, g->OW, g->H, g->W, g->s);
        REMAT__CU_TRY(remat__cu_launched(k, "c1_scatter_add"));
    }
    return REMAT_OK;
}

/* dW += sum over chunks, in image order, of dy_c X_c^T, with X_c (C, G P)
 * and dy_c (O, G P) gathered channel-major: column-major
 * dW^T (C, O) += X_c (C, G P) dy_c^T (G P, O), where X_c row-major
 * (C, G P) is column-major (G P, C) with ld G P, transposed; dy_c
 * row-major (O, G P) is column-major (G P, O) with ld G P; dW row-major
 * (O, C) is column-major (C, O) with ld C. */
static remat_status c1_backward_filter(const remat__kctx *k, const c1geom *g, const float *x, const float *dy,
                                       float *dw) {
    remat__cuda *cu = remat__cu(k);
    float *xc = (float *)((unsigned char *)k->ws + c1_align(g->blas));                                    // (C, G P)
    float *dyc = (float *)((unsigned char *)xc + c1_align((size_t)(g->G * g->C * g->P) * sizeof(float))); // (O, G P)
    const float one = 1.0f;
    for (int64_t n0 = 0; n0 < g->N; n0 += g->G) {
        const int64_t G = g->N - n0 < g->G ? g->N - n0 : g->G, cols = G * g->P;
        REMAT__CU_TRY(c1_gather_launch(k, xc, x + n0 * g->C * g->H * g->W, G, g->C, g, g->s, g->H, g->W, 1));
        REMAT__CU_TRY(c1_gather_launch(k, dyc, dy + n0 * g->O * g->P, G, g->O, g, 1, g->OH, g->OW, 1));
        REMAT__CU_TRY(remat__cu_blas_ok(cublasSgemm(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->C, (int)g->O, (int)cols,
                                                    &one, xc, (int)cols, dyc, (int)cols, &one, dw, (int)g->C),
                                        k, "cublasSgemm (1x1 conv dW)"));
    }
    return REMAT_OK;
}

extern "C" remat_status remat__conv1x1_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const c1geom g = c1_geom(cu->g, k->node);
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W), saved
    const float *w = (const float *)k->in[1]->data; // (O, C, 1, 1), saved
    const float *dy = k->dout;                      // (N, O, OH, OW)
    float *dx = k->din[0];                          // (N, C, H, W) or NULL
    float *dw = k->din[1];                          // (O, C, 1, 1) or NULL
    /* an empty product adds nothing */
    if (g.N == 0 || g.C == 0 || g.O == 0 || g.P == 0 || (!dx && !dw)) return REMAT_OK;
    REMAT__CU_TRY(remat__cuda_blas_ws(k, g.blas));
    if (dx) REMAT__CU_TRY(c1_backward_data(k, &g, dy, w, dx));
    if (dw) REMAT__CU_TRY(c1_backward_filter(k, &g, x, dy, dw));
    return REMAT_OK;
}

/* ------------------------------------------------ bf16 (native kernels) */

/* Regions of a bf16 pass after cuBLAS's, each 256-byte aligned (0 bytes
 * where unused). Forward: W in bf16; X of G images (G, C, P) in bf16 when
 * s > 1 or x is float32 (gathered, or copied and rounded). Backward: W in
 * bf16 (dx), then one region that dx's products and dW's use one after
 * the other: dX of G images (G, C, P) in bf16, or X and dy channel-major
 * (C, G P) + (O, G P) in bf16 and dW's float32 sum (O, C). */
typedef struct {
    size_t wb, xs, t, xc, dyc, acc, total;
} c1_16layout;

static c1_16layout c1_16of(const c1geom *g, int xf32, int backward) {
    c1_16layout L;
    size_t at = c1_align(g->blas);
    const size_t gcp = c1_align((size_t)(g->G * g->C * g->P) * 2);
    L.wb = at, at += c1_align((size_t)(g->O * g->C) * 2);
    L.xs = L.t = L.xc = L.dyc = L.acc = at;
    if (!backward) {
        at += g->s > 1 || xf32 ? gcp : 0;
    } else {
        L.dyc = L.xc + gcp;
        L.acc = L.dyc + c1_align((size_t)(g->G * g->O * g->P) * 2);
        const size_t filt = L.acc + c1_align((size_t)(g->O * g->C) * sizeof(float));
        at = at + gcp > filt ? at + gcp : filt;
    }
    L.total = at;
    return L;
}

extern "C" size_t remat__conv1x1_fwd16_ws(const remat_graph *g, const remat__node *n, int xf32) {
    const c1geom G = c1_geom(g, n);
    return c1_16of(&G, xf32, 0).total;
}

extern "C" size_t remat__conv1x1_bwd16_ws(const remat_graph *g, const remat__node *n, int xf32) {
    const c1geom G = c1_geom(g, n);
    return c1_16of(&G, xf32, 1).total;
}

/* c1_gather's bf16 version: the source bf16 (copied) or float32 (src32:
 * rounded, ties to even). */
static __global__ void c1_gather16(uint16_t *__restrict__ dst, const void *__restrict__ src, int src32, int64_t G,
                                   int64_t Ch, int64_t OH, int64_t OW, int64_t H, int64_t W, int64_t s, int64_t dc,
                                   int64_t di) {
    const int64_t P = OH * OW, total = G * Ch * P;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t q = e % P, ic = e / P, c = ic % Ch, i = ic / Ch;
        const int64_t oh = q / OW, ow = q - oh * OW;
        const int64_t at = (i * Ch + c) * H * W + oh * s * W + ow * s;
        dst[c * dc + i * di + q] = src32 ? remat__bf16_of(((const float *)src)[at]) : ((const uint16_t *)src)[at];
    }
}

/* c1_scatter_add's bf16 version: dx (float32, or bf16 when d16) at the
 * strided pixels += t (bf16), added in float32 and rounded again when dx
 * is bf16 (REMAT__CVT_ACC_F32 / _ACC_BF16 of a value already bf16). */
static __global__ void c1_scatter_add16(void *__restrict__ dx, int d16, const uint16_t *__restrict__ t, int64_t G,
                                        int64_t C, int64_t OH, int64_t OW, int64_t H, int64_t W, int64_t s) {
    const int64_t P = OH * OW, total = G * C * P;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t q = e % P, ic = e / P;
        const int64_t oh = q / OW, ow = q - oh * OW;
        const int64_t at = ic * H * W + oh * s * W + ow * s;
        const float v = remat__f32_of(t[e]);
        if (d16) {
            uint16_t *b = (uint16_t *)dx;
            b[at] = remat__bf16_of(remat__f32_of(b[at]) + v);
        } else {
            ((float *)dx)[at] += v;
        }
    }
}

static remat_status c1_gather16_launch(const remat__kctx *k, uint16_t *dst, const void *src, int src32, int64_t G,
                                       int64_t Ch, const c1geom *g, int64_t s, int64_t H, int64_t W,
                                       int channel_major) {
    remat__cuda *cu = remat__cu(k);
    const int64_t dc = channel_major ? G * g->P : g->P, di = channel_major ? g->P : Ch * g->P;
    c1_gather16<<<remat__cu_blocks(cu, G * Ch * g->P), REMAT__CU_THREADS, 0, cu->stream>>>(
        dst, src, src32, G, Ch, g->OH, g->OW, H, W, s, dc, di);
    return remat__cu_launched(k, "c1_gather16");
}

extern "C" remat_status remat__conv1x1_forward16(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const c1geom g = c1_geom(cu->g, k->node);
    const int xf32 = k->dt[k->node->in[0]] != REMAT_BF16;
    const c1_16layout L = c1_16of(&g, xf32, 0);
    unsigned char *ws = (unsigned char *)k->ws;
    const void *x = k->in[0]->data;         // (N, C, H, W), bf16 or float32
    uint16_t *y = (uint16_t *)k->out->data; // (N, O, OH, OW)
    uint16_t *wb = (uint16_t *)(ws + L.wb); // (O, C)
    uint16_t *xs = (uint16_t *)(ws + L.xs); // (G, C, P) when gathered
    if (g.N == 0 || g.O == 0 || g.P == 0) return REMAT_OK;
    if (g.C == 0) /* an empty sum */
        return remat__cu_rt_ok(cudaMemsetAsync(y, 0, (size_t)(g.N * g.O * g.P) * 2, cu->stream), k,
                               "cudaMemsetAsync (1x1 conv forward, bf16)");
    REMAT__CU_TRY(remat__cuda_convert(k, wb, k->in[1]->data, g.O * g.C, REMAT__CVT_DOWN));
    REMAT__CU_TRY(remat__cuda_blas_ws(k, g.blas));
    const float one = 1.0f, zero = 0.0f;
    const int gathered = g.s > 1 || xf32;
    for (int64_t n0 = 0; n0 < g.N; n0 += gathered ? g.G : g.N) {
        const int64_t G = gathered ? (g.N - n0 < g.G ? g.N - n0 : g.G) : g.N;
        const void *X = (const uint16_t *)x + n0 * g.C * g.H * g.W;
        if (gathered) {
            const void *src = xf32 ? (const void *)((const float *)x + n0 * g.C * g.H * g.W) : X;
            REMAT__CU_TRY(c1_gather16_launch(k, xs, src, xf32, G, g.C, &g, g.s, g.H, g.W, 0));
            X = xs;
        }
        /* y_n^T (P, O) = X_n^T (P, C) W^T (C, O), as c1_fwd_gemm */
        REMAT__CU_TRY(remat__cu_blas_ok(
            cublasGemmStridedBatchedEx(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.P, (int)g.O, (int)g.C, &one, X,
                                       CUDA_R_16BF, (int)g.P, (long long)(g.C * g.P), wb, CUDA_R_16BF, (int)g.C, 0LL,
                                       &zero, y + n0 * g.O * g.P, CUDA_R_16BF, (int)g.P, (long long)(g.O * g.P), (int)G,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            k, "cublasGemmStridedBatchedEx (1x1 conv forward, bf16)"));
    }
    return REMAT_OK;
}

extern "C" remat_status remat__conv1x1_backward16(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const c1geom g = c1_geom(cu->g, k->node);
    const int xf32 = k->dt[k->node->in[0]] != REMAT_BF16;
    const c1_16layout L = c1_16of(&g, xf32, 1);
    unsigned char *ws = (unsigned char *)k->ws;
    const void *x = k->in[0]->data;                 // (N, C, H, W), saved, bf16 or float32
    const uint16_t *dy = (const uint16_t *)k->dout; // (N, O, OH, OW)
    void *dx = k->din[0];                           // (N, C, H, W), x's dtype, or NULL
    float *dw = k->din[1];                          // (O, C, 1, 1) or NULL
    if (g.N == 0 || g.C == 0 || g.O == 0 || g.P == 0 || (!dx && !dw)) return REMAT_OK;
    REMAT__CU_TRY(remat__cuda_blas_ws(k, g.blas));
    const float one = 1.0f, zero = 0.0f;
    if (dx) {
        uint16_t *wb = (uint16_t *)(ws + L.wb); // (O, C)
        uint16_t *t = (uint16_t *)(ws + L.t);   // (G, C, P)
        REMAT__CU_TRY(remat__cuda_convert(k, wb, k->in[1]->data, g.O * g.C, REMAT__CVT_DOWN));
        for (int64_t n0 = 0; n0 < g.N; n0 += g.G) {
            const int64_t G = g.N - n0 < g.G ? g.N - n0 : g.G;
            /* dX_n^T (P, C) = dy_n^T (P, O) W (O, C), as c1_data_gemm */
            REMAT__CU_TRY(remat__cu_blas_ok(
                cublasGemmStridedBatchedEx(cu->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)g.P, (int)g.C, (int)g.O, &one,
                                           dy + n0 * g.O * g.P, CUDA_R_16BF, (int)g.P, (long long)(g.O * g.P), wb,
                                           CUDA_R_16BF, (int)g.C, 0LL, &zero, t, CUDA_R_16BF, (int)g.P,
                                           (long long)(g.C * g.P), (int)G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                k, "cublasGemmStridedBatchedEx (1x1 conv dx, bf16)"));
            void *dxn =
                xf32 ? (void *)((float *)dx + n0 * g.C * g.H * g.W) : (void *)((uint16_t *)dx + n0 * g.C * g.H * g.W);
            c1_scatter_add16<<<remat__cu_blocks(cu, G * g.C * g.P), REMAT__CU_THREADS, 0, cu->stream>>>(
                dxn, !xf32, t, G, g.C, g.OH, g.OW, g.H, g.W, g.s);
            REMAT__CU_TRY(remat__cu_launched(k, "c1_scatter_add16"));
        }
    }
    if (dw) {
        uint16_t *xc = (uint16_t *)(ws + L.xc);   // (C, G P)
        uint16_t *dyc = (uint16_t *)(ws + L.dyc); // (O, G P)
        float *acc = (float *)(ws + L.acc);       // (O, C): the float32 sum over every image
        for (int64_t n0 = 0; n0 < g.N; n0 += g.G) {
            const int64_t G = g.N - n0 < g.G ? g.N - n0 : g.G, cols = G * g.P;
            const void *src = xf32 ? (const void *)((const float *)x + n0 * g.C * g.H * g.W)
                                   : (const void *)((const uint16_t *)x + n0 * g.C * g.H * g.W);
            REMAT__CU_TRY(c1_gather16_launch(k, xc, src, xf32, G, g.C, &g, g.s, g.H, g.W, 1));
            REMAT__CU_TRY(c1_gather16_launch(k, dyc, dy + n0 * g.O * g.P, 0, G, g.O, &g, 1, g.OH, g.OW, 1));
            /* acc^T (C, O) (+)= X_c (C, G P) dy_c^T (G P, O), as c1_backward_filter, in float32 */
            const float beta = n0 == 0 ? 0.0f : 1.0f;
            REMAT__CU_TRY(
                remat__cu_blas_ok(cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g.C, (int)g.O, (int)cols, &one,
                                               xc, CUDA_R_16BF, (int)cols, dyc, CUDA_R_16BF, (int)cols, &beta, acc,
                                               CUDA_R_32F, (int)g.C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                  k, "cublasGemmEx (1x1 conv dW, bf16)"));
        }
        /* dW += bf16(acc), as the CPU rounds its float32 sum */
        REMAT__CU_TRY(remat__cuda_convert(k, dw, acc, g.O * g.C, REMAT__CVT_ACC_F32));
    }
    return REMAT_OK;
}
