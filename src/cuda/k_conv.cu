/* k_conv.cu: conv2d on the GPU through cuDNN's convolution API, with its
 * algorithms chosen once per node and cached.
 *
 * Same semantics as src/ops/conv2d.c: x (N, Cin, H, W), weight
 * (Cout, Cin, KH, KW), optional bias (Cout) as input 2; iattr[0] is the
 * stride and iattr[1] the padding of both spatial dimensions; cross-
 * correlation, as PyTorch. Forward writes y = conv(x, w) (+ b); backward
 * accumulates dx (BackwardData, beta 1), dW (BackwardFilter, beta 1) and
 * db (our own reduction), each only when its din is non-NULL, and reads the
 * saved x and w.
 *
 * cuDNN's algorithms, chosen once per node, and the per-node cache of
 * descriptors are conv_cudnn.cu's (remat__conv_entry).
 *
 * 1x1 convolutions with padding 0 take another path, by a rule on the
 * shapes (remat__conv1x1_gemm): cuBLAS products, in k_conv1x1.cu, whose
 * workspace is known from the shapes, so they need no cache entry and no
 * device to be planned. The bias (forward's add and db) is this file's
 * on both paths.
 *
 * db is a two-stage reduction with a fixed order: stage 1 sums, per
 * (channel, chunk of images), the chunk's dy in double (per-thread partials,
 * then a fixed shuffle tree and the warps in index order); stage 2 adds the
 * chunks of each channel in index order. Not cudnnConvolutionBackwardBias,
 * whose determinism is not documented.
 *
 * Under the bf16 policy (kctx.dt set: conv16_ws said so) the kernels take
 * x (bf16 or float32), y and dy (bf16) in their stored dtypes, with the
 * CPU's bf16 semantics (src/ops/dnnl_conv.c): a second cache entry per
 * node (cu->conv's e16) holds CUDNN_DATA_BFLOAT16 tensors and filter with
 * a CUDNN_DATA_FLOAT convolution, its algorithms chosen by the same rule
 * (conv_cudnn.cu's choose; math: any but ALLOW_CONVERSION), except that past the cap it
 * takes the heuristics' deterministic bf16 algorithm that needs least
 * (choose_least16), and with none the node stays on views (conv16_ws
 * returns 0). The float32 weight is rounded to bf16 per call into the
 * workspace (x too when float32); y = bf16(conv) then, with a bias,
 * bf16(y + bf16(b)) (a second rounding where oneDNN rounds once); dx and
 * dW come out of cuDNN rounded to bf16 into the workspace (beta 0) and
 * are added in float32 (dx rounded again when bf16); db sums bf16 dy and
 * adds the sum rounded through bf16. The 1x1 path does the same with
 * cublasGemmEx (k_conv1x1.cu), dW's sum kept in float32 across its image
 * chunks and rounded once. Not yet run on a GPU.
 *
 * REMAT_CUDA_CONV16=nhwc (cu->conv16_nhwc, read once per session) gives
 * the bf16 entries NHWC tensor and KRSC filter descriptors, and the
 * kernels copy their operands to that layout in the workspace and the
 * results back (to_nhwc, from_nhwc: the same roundings and additions as
 * above, element for element). Not yet run on a GPU either.
 */
#include "conv1x1.h"
#include "conv_cudnn.h"
#include "reduce.cuh"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* db reduction: threads per block, and images per chunk chosen so that a
 * chunk holds about DB_CHUNK_ELEMS elements of one channel (at least one
 * whole image's plane): enough work per block to hide the final tree, and
 * enough blocks (channels x chunks) to fill the device on the ResNet
 * shapes. Depends on the shapes only, so the summation order does too. */
#define DB_THREADS 256
#define DB_CHUNK_ELEMS 16384

/* Images per db chunk and chunks per channel for N planes of P pixels. */
static void db_split(int64_t N, int64_t P, int *rows, int *chunks) {
    int64_t r = (DB_CHUNK_ELEMS + P - 1) / P;
    if (r < 1) r = 1;
    if (r > N) r = N;
    *rows = (int)r;
    *chunks = (int)((N + r - 1) / r);
}

/* The db reduction's sizes, from node n's shapes: dy (N, O, P), images
 * per chunk and chunks per channel. */
typedef struct {
    int N, O, P, rows, chunks;
} db_geom;

static db_geom db_of(const remat__node *n) {
    db_geom d;
    d.N = (int)n->shape.d[0], d.O = (int)n->shape.d[1], d.P = (int)(n->shape.d[2] * n->shape.d[3]);
    db_split(d.N, d.P, &d.rows, &d.chunks);
    return d;
}

/* Bytes of db partials: (O, chunks) doubles, none without a bias or with
 * one chunk (stage 1 then adds into db directly). */
static size_t db_bytes(const remat__node *n) {
    const db_geom d = db_of(n);
    return n->n_in == 3 && d.chunks > 1 ? (size_t)d.O * (size_t)d.chunks * sizeof(double) : 0;
}

/* ------------------------------------------------------------ db kernels */

/* Stage 1: block b = o*chunks + c sums channel o of images
 * [c*rows, min((c+1)*rows, N)) of dy (N, O, P), read as VEC-float vectors
 * (VEC 4 needs P % 4 == 0 and a 16-byte aligned dy). Each thread sums its
 * elements (strided by the block) in double, then block_sum_in_order
 * (a butterfly per warp, the warps in index order). One chunk: db[o] += the sum; else
 * part[o*chunks + c] = the sum. B16: dy is bf16 (VEC 1), its values
 * widened, and the sum added rounded through bf16 (the bf16 policy's db). */
template <int VEC, int B16>
__global__ void __launch_bounds__(DB_THREADS)
    db_partial_kernel(const void *__restrict__ dyv, int N, int O, int P, int rows, int chunks,
                      double *__restrict__ part, float *__restrict__ db) {
    const float *dy = (const float *)dyv;
    const uint16_t *dy16 = (const uint16_t *)dyv;
    // dy: (N, O, P), part: (O, chunks), db: (O)
    __shared__ double sh[DB_THREADS / 32];
    const int o = blockIdx.x / chunks, c = blockIdx.x - o * chunks;
    const int n0 = c * rows, n1 = min(n0 + rows, N);
    const unsigned L = (unsigned)(P / VEC);     /* vectors per plane */
    const unsigned E = (unsigned)(n1 - n0) * L; /* < 2^32: rows*P < DB_CHUNK_ELEMS + P */
    double acc = 0.0;
    for (unsigned j = threadIdx.x; j < E; j += DB_THREADS) {
        const unsigned r = j / L, q = j - r * L;
        const int64_t plane = ((int64_t)(n0 + (int)r) * O + o) * (int64_t)P;
        if (B16) {
            acc += (double)remat__f32_of(dy16[plane + q]);
        } else if (VEC == 4) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(dy + plane) + q);
            acc += ((double)v.x + (double)v.y) + ((double)v.z + (double)v.w);
        } else {
            acc += (double)__ldg(dy + plane + q);
        }
    }
    const double t = block_sum_in_order<DB_THREADS / 32>(acc, sh);
    if (threadIdx.x == 0) {
        if (chunks == 1) db[o] += B16 ? remat__bf16_round((float)t) : (float)t;
        else part[(int64_t)o * chunks + c] = t;
    }
}

/* Stage 2: db[o] += the chunks of channel o, added in index order
 * (rounded through bf16 when b16). */
__global__ void db_combine_kernel(const double *__restrict__ part, int O, int chunks, int b16, float *__restrict__ db) {
    // part: (O, chunks), db: (O)
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < O; o += gridDim.x * blockDim.x) {
        const double *p = part + (int64_t)o * chunks;
        double t = p[0];
        for (int c = 1; c < chunks; c++) t += p[c];
        db[o] += b16 ? remat__bf16_round((float)t) : (float)t;
    }
}

/* ------------------------------------------------------------ op kernels */

/* y (N, O, P) += b (O) broadcast over the images and pixels (the 1x1
 * path's bias): elementwise, each element written by one thread. */
static __global__ void bias_add_kernel(float *__restrict__ y, const float *__restrict__ b, int64_t O, int64_t P,
                                       int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[(i / P) % O];
}

/* The 1x1 path's forward: the product, then y += b as cuDNN's path adds
 * it (after the convolution). */
static remat_status conv1x1_forward(const remat__kctx *k) {
    REMAT__CU_TRY(remat__conv1x1_forward(k));
    if (k->node->n_in != 3) return REMAT_OK;
    remat__cuda *cu = remat__cu(k);
    const remat__shape *ys = &k->node->shape;
    const int64_t total = remat__numel(ys), P = ys->d[2] * ys->d[3];
    if (total == 0) return REMAT_OK;
    bias_add_kernel<<<remat__cu_blocks(cu, total), REMAT__CU_THREADS, 0, cu->stream>>>(
        (float *)k->out->data, (const float *)k->in[2]->data, ys->d[1], P, total);
    return remat__cu_launched(k, "bias_add_kernel");
}

static remat_status conv16_forward(const remat__kctx *k);
static remat_status conv16_backward(const remat__kctx *k);

static remat_status conv_forward(const remat__kctx *k) {
    if (k->dt) return conv16_forward(k); /* bf16: planned so (conv16_ws) */
    remat__cuda *cu = remat__cu(k);
    if (remat__conv1x1_gemm(cu->g, k->node)) return conv1x1_forward(k);
    conv_entry *e = NULL;
    REMAT__CU_TRY(remat__conv_entry(cu, cu->g, k->node, k, 0, &e));
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W)
    const float *w = (const float *)k->in[1]->data; // (O, C, KH, KW)
    float *y = (float *)k->out->data;               // (N, O, OH, OW)
    const float one = 1.0f, zero = 0.0f;
    const cudnnConvolutionFwdAlgo_t algo = (cudnnConvolutionFwdAlgo_t)e->algo[PASS_FWD];
    REMAT__CU_TRY(
        remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, e->math[PASS_FWD]), k, "cudnnSetConvolutionMathType"));
    REMAT__CU_TRY(remat__cu_dnn_ok(cudnnConvolutionForward(cu->dnn, &one, e->x, x, e->w, w, e->conv, algo, k->ws,
                                                           e->bytes[PASS_FWD], &zero, e->y, y),
                                   k, "cudnnConvolutionForward"));
    if (e->bias) { /* y += b broadcast over (N, OH, OW): elementwise, deterministic */
        const float *b = (const float *)k->in[2]->data; // (O)
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnAddTensor(cu->dnn, &one, e->b, b, &one, e->y, y), k, "cudnnAddTensor"));
    }
    return REMAT_OK;
}

/* db += the sums of dy (N, O, P) over images and pixels, after the
 * products, with the partials (when more than one chunk) at part (ws
 * offset 0 in float32). b16: dy is bf16 and the sums are added rounded
 * through bf16. */
static remat_status conv_db(const remat__kctx *k, const void *dy, int b16, double *part, float *db) {
    remat__cuda *cu = remat__cu(k);
    const db_geom d = db_of(k->node);
    if (d.N == 0 || d.O == 0 || d.P == 0) return REMAT_OK;
    // part: (O, chunks) when chunks > 1
    const unsigned blocks = (unsigned)d.O * (unsigned)d.chunks;
    if (b16) {
        db_partial_kernel<1, 1><<<blocks, DB_THREADS, 0, cu->stream>>>(dy, d.N, d.O, d.P, d.rows, d.chunks, part, db);
    } else if (d.P % 4 == 0 && ((uintptr_t)dy & 15) == 0) {
        db_partial_kernel<4, 0><<<blocks, DB_THREADS, 0, cu->stream>>>(dy, d.N, d.O, d.P, d.rows, d.chunks, part, db);
    } else {
        db_partial_kernel<1, 0><<<blocks, DB_THREADS, 0, cu->stream>>>(dy, d.N, d.O, d.P, d.rows, d.chunks, part, db);
    }
    REMAT__CU_TRY(remat__cu_launched(k, "db_partial_kernel"));
    if (d.chunks > 1) {
        db_combine_kernel<<<remat__cu_blocks(cu, d.O), REMAT__CU_THREADS, 0, cu->stream>>>(part, d.O, d.chunks, b16,
                                                                                           db);
        REMAT__CU_TRY(remat__cu_launched(k, "db_combine_kernel"));
    }
    return REMAT_OK;
}

/* dx and dW through cuDNN (the path of every convolution but the 1x1
 * ones). */
static remat_status conv_backward_dnn(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    conv_entry *e = NULL;
    REMAT__CU_TRY(remat__conv_entry(cu, cu->g, k->node, k, 0, &e));
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W), saved
    const float *w = (const float *)k->in[1]->data; // (O, C, KH, KW), saved
    const float *dy = k->dout;                      // (N, O, OH, OW)
    float *dx = k->din[0];                          // (N, C, H, W) or NULL
    float *dw = k->din[1];                          // (O, C, KH, KW) or NULL
    const float one = 1.0f;
    /* The two passes run one after the other on the stream, so they share
     * the workspace from offset 0. */
    if (dx) {
        const cudnnConvolutionBwdDataAlgo_t algo = (cudnnConvolutionBwdDataAlgo_t)e->algo[PASS_DATA];
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, e->math[PASS_DATA]), k,
                                       "cudnnSetConvolutionMathType"));
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnConvolutionBackwardData(cu->dnn, &one, e->w, w, e->y, dy, e->conv, algo,
                                                                    k->ws, e->bytes[PASS_DATA], &one, e->x, dx),
                                       k, "cudnnConvolutionBackwardData"));
    }
    if (dw) {
        const cudnnConvolutionBwdFilterAlgo_t algo = (cudnnConvolutionBwdFilterAlgo_t)e->algo[PASS_FILT];
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, e->math[PASS_FILT]), k,
                                       "cudnnSetConvolutionMathType"));
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnConvolutionBackwardFilter(cu->dnn, &one, e->x, x, e->y, dy, e->conv, algo,
                                                                      k->ws, e->bytes[PASS_FILT], &one, e->w, dw),
                                       k, "cudnnConvolutionBackwardFilter"));
    }
    return REMAT_OK;
}

/* dx and dW (cuDNN's or the 1x1 products), then db, all after one another
 * on the stream. */
static remat_status conv_backward(const remat__kctx *k) {
    if (k->dt) return conv16_backward(k);
    remat__cuda *cu = remat__cu(k);
    if (remat__conv1x1_gemm(cu->g, k->node)) {
        REMAT__CU_TRY(remat__conv1x1_backward(k));
    } else if (k->din[0] || k->din[1]) {
        REMAT__CU_TRY(conv_backward_dnn(k));
    }
    float *db = k->node->n_in == 3 ? k->din[2] : NULL; // (O) or NULL
    return db ? conv_db(k, k->dout, 0, (double *)k->ws, db) : REMAT_OK;
}

/* ---------------------------------------------------------- workspaces */

/* Without a device to ask cuDNN (a plan for a GPU that is not here): the
 * cap choose() keeps every algorithm under, an upper bound of the bytes
 * unless cuDNN offers no deterministic algorithm below it. */
static size_t conv_ws_estimate(const remat_graph *g, const remat__node *n) {
    const size_t tensors = ((size_t)remat__numel(remat__in_shape(g, n, 0)) +
                            (size_t)remat__numel(remat__in_shape(g, n, 1)) + (size_t)remat__numel(&n->shape)) *
                           sizeof(float);
    return align256(2 * tensors > CONV_WS_FLOOR ? 2 * tensors : CONV_WS_FLOOR);
}

/* Forward: the 1x1 products' bytes, or the forward algorithm's. */
static size_t conv_fwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    if (remat__conv1x1_gemm(g, n)) return remat__conv1x1_fwd_ws(g, n);
    if (!dev) return conv_ws_estimate(g, n);
    conv_entry *e = NULL;
    if (remat__conv_entry((remat__cuda *)dev, g, n, NULL, 0, &e) != REMAT_OK) return 0;
    return e->bytes[PASS_FWD];
}

/* Backward: dx's and dW's passes (cuDNN's BackwardData and BackwardFilter,
 * or the 1x1 products) run one after the other and the db partials after
 * them, so they reuse one region from offset 0: max(their bytes, db
 * partials), rounded to 256 bytes. */
static size_t conv_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    size_t b;
    if (remat__conv1x1_gemm(g, n)) {
        b = remat__conv1x1_bwd_ws(g, n);
    } else {
        if (!dev) return conv_ws_estimate(g, n); /* db's partials are far below the cap */
        conv_entry *e = NULL;
        if (remat__conv_entry((remat__cuda *)dev, g, n, NULL, 0, &e) != REMAT_OK) return 0;
        b = e->bytes[PASS_DATA] > e->bytes[PASS_FILT] ? e->bytes[PASS_DATA] : e->bytes[PASS_FILT];
    }
    if (db_bytes(n) > b) b = db_bytes(n);
    return align256(b);
}

/* Only cuDNN's algorithms need the device to size their workspace. */
static int conv_asks_device(const remat_graph *g, const remat__node *n) { return !remat__conv1x1_gemm(g, n); }

/* ------------------------------------------------ bf16 (native kernels) */

/* Offsets into the workspace of a bf16 pass, each 256-byte aligned (0
 * bytes where unused): cuDNN's algorithm (forward's, or the larger of
 * BackwardData's and BackwardFilter's: they run one after the other), W
 * in bf16, x in bf16 when it is float32 or the layout is channels-last
 * (nhwc), y (forward) or dy (backward) channels-last under nhwc,
 * backward's bf16 product (the larger of dx's and dW's, one after the
 * other) and db's partials. */
typedef struct {
    size_t wb, xb, yb, c, part, total;
} conv16_layout;

static conv16_layout conv16_of(const remat_graph *g, const remat__node *n, size_t algo, int xf32, int backward,
                               int nhwc) {
    const size_t X = (size_t)remat__numel(remat__in_shape(g, n, 0)),
                 Wn = (size_t)remat__numel(remat__in_shape(g, n, 1)), Y = (size_t)remat__numel(&n->shape);
    conv16_layout L;
    size_t at = align256(algo);
    L.wb = at, at += align256(Wn * 2);
    L.xb = at, at += xf32 || nhwc ? align256(X * 2) : 0;
    L.yb = at, at += nhwc ? align256(Y * 2) : 0;
    L.c = at, at += backward ? align256((X > Wn ? X : Wn) * 2) : 0;
    L.part = at, at += backward ? align256(db_bytes(n)) : 0;
    L.total = at;
    return L;
}

/* Channels-last copies (REMAT_CUDA_CONV16=nhwc): cuDNN's fast bf16
 * tensor-core algorithms take NHWC tensors and KRSC filters, which remat
 * does not store, so each pass copies its operands into that layout in
 * the workspace and its results back. A tensor (N, C, P) (P the spatial
 * positions; a filter is (O, C, KH*KW)) moves to (N, P, C) and back
 * through 32x32 tiles in shared memory, read and written along their
 * contiguous dimensions. The values are the bf16 policy's: to
 * channels-last rounds to bf16 as REMAT__CVT_DOWN does (bf16 sources are
 * copied), and back either stores the bf16 results or adds them in as
 * remat__cuda_add16 does, element for element. */
#define NHWC_TILE 32
#define NHWC_ROWS 8

/* dst (N, P, C) bf16 = bf16(src (N, C, P)), src bf16 (s16) or float32. */
static __global__ void to_nhwc_kernel(uint16_t *__restrict__ dst, const void *__restrict__ src, int s16, int64_t N,
                                      int64_t C, int64_t P) {
    __shared__ float tile[NHWC_TILE][NHWC_TILE + 1]; /* [c][p] */
    const int64_t c0 = (int64_t)blockIdx.y * NHWC_TILE, p0 = (int64_t)blockIdx.x * NHWC_TILE;
    for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
        for (int j = threadIdx.y; j < NHWC_TILE; j += NHWC_ROWS) {
            const int64_t c = c0 + j, p = p0 + threadIdx.x;
            if (c < C && p < P) {
                const int64_t i = (n * C + c) * P + p;
                tile[j][threadIdx.x] = s16 ? remat__f32_of(((const uint16_t *)src)[i]) : ((const float *)src)[i];
            }
        }
        __syncthreads();
        for (int j = threadIdx.y; j < NHWC_TILE; j += NHWC_ROWS) {
            const int64_t p = p0 + j, c = c0 + threadIdx.x;
            if (c < C && p < P) dst[(n * P + p) * C + c] = remat__bf16_of(tile[threadIdx.x][j]);
        }
        __syncthreads();
    }
}

/* dst (N, C, P) from src (N, P, C) bf16: stored as bf16 (add 0; dst
 * bf16), or added in (add 1): bf16 dst rounded again, float32 dst summed. */
static __global__ void from_nhwc_kernel(void *__restrict__ dst, int d16, int add, const uint16_t *__restrict__ src,
                                        int64_t N, int64_t C, int64_t P) {
    __shared__ float tile[NHWC_TILE][NHWC_TILE + 1]; /* [p][c] */
    const int64_t c0 = (int64_t)blockIdx.y * NHWC_TILE, p0 = (int64_t)blockIdx.x * NHWC_TILE;
    for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
        for (int j = threadIdx.y; j < NHWC_TILE; j += NHWC_ROWS) {
            const int64_t p = p0 + j, c = c0 + threadIdx.x;
            if (c < C && p < P) tile[j][threadIdx.x] = remat__f32_of(src[(n * P + p) * C + c]);
        }
        __syncthreads();
        for (int j = threadIdx.y; j < NHWC_TILE; j += NHWC_ROWS) {
            const int64_t c = c0 + j, p = p0 + threadIdx.x;
            if (c < C && p < P) {
                const int64_t i = (n * C + c) * P + p;
                const float v = tile[threadIdx.x][j];
                if (!add) ((uint16_t *)dst)[i] = remat__bf16_of(v);
                else if (d16) ((uint16_t *)dst)[i] = remat__bf16_of(remat__f32_of(((uint16_t *)dst)[i]) + v);
                else ((float *)dst)[i] += v;
            }
        }
        __syncthreads();
    }
}

/* The grid of a channels-last copy of (N, C, P): tiles over P and C, and
 * up to 65535 of the N planes at once (the kernels loop over the rest). */
static remat_status nhwc_grid(const remat__kctx *k, int64_t N, int64_t C, int64_t P, dim3 *grid) {
    const int64_t gc = (C + NHWC_TILE - 1) / NHWC_TILE, gp = (P + NHWC_TILE - 1) / NHWC_TILE;
    if (gc > 65535 || gp > INT_MAX) {
        char lb[128];
        return remat__err(REMAT_UNSUPPORTED, "%s: %lld channels of %lld positions exceed a channels-last copy's grid",
                          remat__kctx_label(k, lb, sizeof lb), (long long)C, (long long)P);
    }
    *grid = dim3((unsigned)gp, (unsigned)gc, (unsigned)(N < 65535 ? N : 65535));
    return REMAT_OK;
}

static remat_status to_nhwc(const remat__kctx *k, uint16_t *dst, const void *src, int s16, int64_t N, int64_t C,
                            int64_t P) {
    dim3 grid;
    if (N * C * P == 0) return REMAT_OK;
    REMAT__CU_TRY(nhwc_grid(k, N, C, P, &grid));
    to_nhwc_kernel<<<grid, dim3(NHWC_TILE, NHWC_ROWS), 0, remat__cu(k)->stream>>>(dst, src, s16, N, C, P);
    return remat__cu_launched(k, "to_nhwc_kernel");
}

static remat_status from_nhwc(const remat__kctx *k, void *dst, int d16, int add, const uint16_t *src, int64_t N,
                              int64_t C, int64_t P) {
    dim3 grid;
    if (N * C * P == 0) return REMAT_OK;
    REMAT__CU_TRY(nhwc_grid(k, N, C, P, &grid));
    from_nhwc_kernel<<<grid, dim3(NHWC_TILE, NHWC_ROWS), 0, remat__cu(k)->stream>>>(dst, d16, add, src, N, C, P);
    return remat__cu_launched(k, "from_nhwc_kernel");
}

/* The cuDNN bytes of node n's bf16 passes (forward; backward: the larger
 * of data's and filter's), or, without a device, the cap as the float32
 * path estimates. 0: no deterministic bf16 algorithm (the node stays on
 * views). */
static int conv16_algo_bytes(void *dev, const remat_graph *g, const remat__node *n, size_t *fwd, size_t *bwd,
                             int *nhwc) {
    if (!dev) {
        remat__cuda_switches sw;
        *fwd = *bwd = conv_ws_estimate(g, n);
        *nhwc = remat__cuda_bf16_env(&sw) == REMAT_OK && sw.conv_nhwc;
        return 1;
    }
    *nhwc = ((remat__cuda *)dev)->conv16_nhwc;
    conv_entry *e = NULL;
    if (remat__conv_entry((remat__cuda *)dev, g, n, NULL, 1, &e) != REMAT_OK) return 0;
    *fwd = e->bytes[PASS_FWD];
    *bwd = e->bytes[PASS_DATA] > e->bytes[PASS_FILT] ? e->bytes[PASS_DATA] : e->bytes[PASS_FILT];
    return 1;
}

/* The weight and bias must be float32 (master copies), as on the CPU.
 * The 1x1 convolutions that take the cuBLAS path keep it in bf16
 * (k_conv1x1.cu), their bytes from the shapes, db's partials at offset 0
 * after the products as in float32. */
static int conv16_ws(void *dev, const remat_graph *g, const remat__node *n, const uint8_t *dt, size_t *fwd,
                     size_t *bwd) {
    for (int i = 1; i < n->n_in; i++)
        if (dt[n->in[i]] != REMAT_F32) return 0;
    const int xf32 = dt[n->in[0]] != REMAT_BF16;
    if (remat__conv1x1_gemm(g, n)) {
        const size_t b = remat__conv1x1_bwd16_ws(g, n, xf32);
        *fwd = remat__conv1x1_fwd16_ws(g, n, xf32);
        *bwd = align256(b > db_bytes(n) ? b : db_bytes(n));
        return 1;
    }
    size_t af, ab;
    int nhwc;
    if (!conv16_algo_bytes(dev, g, n, &af, &ab, &nhwc)) return 0;
    *fwd = conv16_of(g, n, af, xf32, 0, nhwc).total;
    *bwd = conv16_of(g, n, ab, xf32, 1, nhwc).total;
    return 1;
}

/* y (N, O, P) bf16 = bf16(y + bf16(b[o])), b (O) float32. */
static __global__ void conv16_bias_kernel(uint16_t *__restrict__ y, const float *__restrict__ b, int64_t O, int64_t P,
                                          int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = remat__bf16_of(remat__f32_of(y[i]) + remat__bf16_round(b[(i / P) % O]));
}

/* y = bf16(conv(bf16 x, bf16(W))) through cuDNN (float32 accumulation,
 * one rounding), then, with a bias, y = bf16(y + bf16(b)): a second
 * rounding where the CPU's oneDNN rounds once (bias in its epilogue). */
static remat_status conv16_bias(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__shape *ys = &k->node->shape;
    const int64_t total = remat__numel(ys), P = ys->d[2] * ys->d[3];
    if (k->node->n_in != 3 || total == 0) return REMAT_OK;
    conv16_bias_kernel<<<remat__cu_blocks(cu, total), REMAT__CU_THREADS, 0, cu->stream>>>(
        (uint16_t *)k->out->data, (const float *)k->in[2]->data, ys->d[1], P, total);
    return remat__cu_launched(k, "conv16_bias_kernel");
}

static remat_status conv16_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__node *n = k->node;
    const int xf32 = k->dt[n->in[0]] != REMAT_BF16;
    if (remat__conv1x1_gemm(cu->g, n)) {
        REMAT__CU_TRY(remat__conv1x1_forward16(k));
        return conv16_bias(k);
    }
    conv_entry *e = NULL;
    REMAT__CU_TRY(remat__conv_entry(cu, cu->g, n, k, 1, &e));
    const conv16_layout L = conv16_of(cu->g, n, e->bytes[PASS_FWD], xf32, 0, e->nhwc);
    unsigned char *ws = (unsigned char *)k->ws;
    const remat__shape *xs = k->in[0]->shape, *wsh = k->in[1]->shape, *ys = &n->shape;
    uint16_t *wb = (uint16_t *)(ws + L.wb); // (O, C, KH, KW); nhwc: (O, KH, KW, C)
    const void *x = k->in[0]->data;         // (N, C, H, W), bf16 or float32
    uint16_t *y = (uint16_t *)k->out->data; // (N, O, OH, OW)
    if (e->nhwc) {
        REMAT__CU_TRY(to_nhwc(k, wb, k->in[1]->data, 0, wsh->d[0], wsh->d[1], wsh->d[2] * wsh->d[3]));
        REMAT__CU_TRY(to_nhwc(k, (uint16_t *)(ws + L.xb), x, !xf32, xs->d[0], xs->d[1], xs->d[2] * xs->d[3]));
        x = ws + L.xb;
    } else {
        REMAT__CU_TRY(remat__cuda_convert(k, wb, k->in[1]->data, remat__numel(wsh), REMAT__CVT_DOWN));
        if (xf32) {
            REMAT__CU_TRY(remat__cuda_convert(k, ws + L.xb, x, remat__numel(xs), REMAT__CVT_DOWN));
            x = ws + L.xb;
        }
    }
    uint16_t *yc = e->nhwc ? (uint16_t *)(ws + L.yb) : y; // cuDNN's y: (N, OH, OW, O) under nhwc
    const float one = 1.0f, zero = 0.0f;
    REMAT__CU_TRY(
        remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, e->math[PASS_FWD]), k, "cudnnSetConvolutionMathType"));
    REMAT__CU_TRY(remat__cu_dnn_ok(cudnnConvolutionForward(cu->dnn, &one, e->x, x, e->w, wb, e->conv,
                                                           (cudnnConvolutionFwdAlgo_t)e->algo[PASS_FWD], ws,
                                                           e->bytes[PASS_FWD], &zero, e->y, yc),
                                   k, "cudnnConvolutionForward (bf16)"));
    if (e->nhwc) REMAT__CU_TRY(from_nhwc(k, y, 1, 0, yc, ys->d[0], ys->d[1], ys->d[2] * ys->d[3]));
    return conv16_bias(k);
}

/* dx = bf16(BackwardData) into the workspace, added into dx (float32, or
 * bf16 rounded again); dW = bf16(BackwardFilter) the same way into the
 * float32 gradient; db from bf16 dy, rounded through bf16: the CPU's
 * (src/ops/dnnl_conv.c) order of roundings. */
static remat_status conv16_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__node *n = k->node;
    const int xf32 = k->dt[n->in[0]] != REMAT_BF16;
    const void *dy = k->dout;                    // (N, O, OH, OW) bf16
    void *dx = k->din[0];                        // (N, C, H, W), x's dtype, or NULL
    float *dw = k->din[1];                       // (O, C, KH, KW) float32 or NULL
    float *db = n->n_in == 3 ? k->din[2] : NULL; // (O) or NULL
    unsigned char *ws = (unsigned char *)k->ws;
    const float one = 1.0f, zero = 0.0f;
    if (remat__conv1x1_gemm(cu->g, n)) { /* the products, then db's partials at offset 0 */
        REMAT__CU_TRY(remat__conv1x1_backward16(k));
        return db ? conv_db(k, dy, 1, (double *)ws, db) : REMAT_OK;
    }
    conv_entry *e = NULL;
    REMAT__CU_TRY(remat__conv_entry(cu, cu->g, n, k, 1, &e));
    const size_t algo = e->bytes[PASS_DATA] > e->bytes[PASS_FILT] ? e->bytes[PASS_DATA] : e->bytes[PASS_FILT];
    const conv16_layout L = conv16_of(cu->g, n, algo, xf32, 1, e->nhwc);
    const remat__shape *xs = k->in[0]->shape, *wsh = k->in[1]->shape, *ys = &n->shape;
    const int64_t X = remat__numel(xs), Wn = remat__numel(wsh);
    const int64_t P = xs->d[2] * xs->d[3], KP = wsh->d[2] * wsh->d[3];
    uint16_t *c = (uint16_t *)(ws + L.c); // (N, C, H, W) or (O, C, KH, KW); nhwc: (N, H, W, C) or (O, KH, KW, C)
    const void *dyc = dy;                 // cuDNN's dy: (N, OH, OW, O) under nhwc (db reads the stored dy)
    if (e->nhwc) {
        REMAT__CU_TRY(to_nhwc(k, (uint16_t *)(ws + L.yb), dy, 1, ys->d[0], ys->d[1], ys->d[2] * ys->d[3]));
        dyc = ws + L.yb;
    }
    if (dx) {
        uint16_t *wb = (uint16_t *)(ws + L.wb); // (O, C, KH, KW); nhwc: (O, KH, KW, C)
        if (e->nhwc) REMAT__CU_TRY(to_nhwc(k, wb, k->in[1]->data, 0, wsh->d[0], wsh->d[1], KP));
        else REMAT__CU_TRY(remat__cuda_convert(k, wb, k->in[1]->data, Wn, REMAT__CVT_DOWN));
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, e->math[PASS_DATA]), k,
                                       "cudnnSetConvolutionMathType"));
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnConvolutionBackwardData(cu->dnn, &one, e->w, wb, e->y, dyc, e->conv,
                                                                    (cudnnConvolutionBwdDataAlgo_t)e->algo[PASS_DATA],
                                                                    ws, e->bytes[PASS_DATA], &zero, e->x, c),
                                       k, "cudnnConvolutionBackwardData (bf16)"));
        if (e->nhwc) REMAT__CU_TRY(from_nhwc(k, dx, !xf32, 1, c, xs->d[0], xs->d[1], P));
        else REMAT__CU_TRY(remat__cuda_add16(k, dx, !xf32, c, X));
    }
    if (dw) {
        const void *x = k->in[0]->data; // (N, C, H, W), saved
        if (e->nhwc) {
            REMAT__CU_TRY(to_nhwc(k, (uint16_t *)(ws + L.xb), x, !xf32, xs->d[0], xs->d[1], P));
            x = ws + L.xb;
        } else if (xf32) {
            REMAT__CU_TRY(remat__cuda_convert(k, ws + L.xb, x, X, REMAT__CVT_DOWN));
            x = ws + L.xb;
        }
        REMAT__CU_TRY(remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, e->math[PASS_FILT]), k,
                                       "cudnnSetConvolutionMathType"));
        REMAT__CU_TRY(
            remat__cu_dnn_ok(cudnnConvolutionBackwardFilter(cu->dnn, &one, e->x, x, e->y, dyc, e->conv,
                                                            (cudnnConvolutionBwdFilterAlgo_t)e->algo[PASS_FILT], ws,
                                                            e->bytes[PASS_FILT], &zero, e->w, c),
                             k, "cudnnConvolutionBackwardFilter (bf16)"));
        if (e->nhwc) REMAT__CU_TRY(from_nhwc(k, dw, 0, 1, c, wsh->d[0], wsh->d[1], KP));
        else REMAT__CU_TRY(remat__cuda_add16(k, dw, 0, c, Wn));
    }
    return db ? conv_db(k, dy, 1, (double *)(ws + L.part), db) : REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_conv2d = {conv_forward, conv_backward,    conv_fwd_ws,
                                                          conv_bwd_ws,  conv_asks_device, conv16_ws};
