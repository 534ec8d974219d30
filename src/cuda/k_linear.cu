/* k_linear.cu: the linear op on the GPU, y = x W^T + b, through cuBLAS.
 *
 * The data are row-major and cuBLAS is column-major, so every product is
 * written for the transposes: a row-major (r, c) matrix with leading
 * dimension c is a column-major (c, r) one. Forward computes
 * y^T (out, N) = W (out, in) x^T (in, N) after copying b into every row of
 * y, with beta 1: the same rounding as the CPU's (src/ops/linear.c), which
 * also copies b and accumulates with cblas_sgemm. Backward:
 *   dx (N, in)   += dy W       as dx^T (in, N)  = W^T (in, out) dy^T (out, N)
 *   dW (out, in) += dy^T x     as dW^T (in, out) = x^T (in, N) dy (N, out)
 *   db (out)     += column sums of dy over N, in two stages of fixed order
 * (per-chunk partial sums in double, then the chunks in index order).
 *
 * Workspace: cuBLAS's (a fixed size per node, from the product's size:
 * its results are bitwise reproducible on one stream with a fixed
 * workspace), then, 256-byte aligned, backward's db partials
 * (ceil(N / 256) x out doubles; fewer, longer chunks past 16.7M rows)
 * when the node has a bias.
 *
 * Under the bf16 policy (kctx.dt set: lin16_ws) the products take bf16
 * operands and accumulate in float32 (cublasGemmEx, CUBLAS_COMPUTE_32F),
 * with the CPU's bf16 semantics (src/ops/linear.c, the float32 views'):
 * x and dx bf16 or float32, y and dy bf16, W and b float32 and rounded
 * to bf16 per call into the workspace (ties to even: core/bf16.h).
 *   y  = bf16(x W^T + bf16(b)): y's rows are filled with bf16(b) and the
 *        product added with beta 1, one rounding of the float32 sum;
 *   dx : dy W rounded to bf16 (cuBLAS's bf16 output: its float32 sum
 *        rounded to nearest even) into the workspace, then added to dx in
 *        float32 (and rounded again when dx is bf16): REMAT__CVT_ACC_BF16
 *        or _ACC_F32's arithmetic;
 *   dW : dy^T x the same way into the float32 gradient (x rounded to
 *        bf16 in the workspace when it is float32);
 *   db : bf16 dy's column sums in double as above, rounded through bf16
 *        and added.
 * The same cuBLAS workspace as float32 (the handle's, first), so the same
 * determinism: no split-K atomics (cuBLAS's default atomics mode is off),
 * a fixed workspace on one stream. Workspace after it, each 256-byte
 * aligned: forward W in bf16, x in bf16 when float32; backward W in
 * bf16, x in bf16 when float32, the bf16 product (the larger of dx's and
 * dW's: they run one after the other) and db's partials. Less than the
 * float32 views' (x, W, y or dy, dx, dW in float32).
 */
#include "cuda-impl.h"

#include <limits.h>

/* Rows of dy summed by one block of the db reduction: 256, more when N
 * would need over 65535 chunks (the grid's y limit). A function of N only,
 * so that the order of the sum depends on the shape, not on the device. */
#define LIN_DB_ROWS 256
static int64_t lin_db_rows(int64_t N) {
    int64_t r = (N + 65534) / 65535;
    return r > LIN_DB_ROWS ? r : LIN_DB_ROWS;
}

static size_t lin_align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* cuBLAS workspace for a product of 2 N in out flops: 32 MiB (what NVIDIA
 * advises for Hopper) for large products, 4 MiB for small ones. */
static size_t lin_blas_bytes(const remat_graph *g, const remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    double flops = 2.0 * (double)x->d[0] * (double)x->d[1] * (double)n->shape.d[1];
    return flops >= (double)(1 << 30) ? (size_t)32 << 20 : (size_t)4 << 20;
}

static size_t lin_fwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    return lin_blas_bytes(g, n);
}

static int64_t lin_db_chunks(int64_t N) { return (N + lin_db_rows(N) - 1) / lin_db_rows(N); }

static size_t lin_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    size_t b = lin_align256(lin_blas_bytes(g, n));
    if (n->n_in == 3) b += (size_t)lin_db_chunks(n->shape.d[0]) * (size_t)n->shape.d[1] * sizeof(double);
    return b;
}

/* y (N, out): every row = b (out). Blocks walk rows; threads walk columns,
 * four at a time when out % 4 == 0 (every row is then 16-byte aligned). */
static __global__ void lin_bias_rows(float *__restrict__ y, const float *__restrict__ b, int64_t N, int out) {
    if ((out & 3) == 0) {
        int q = out >> 2;
        const float4 *b4 = (const float4 *)b;
        for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
            float4 *y4 = (float4 *)(y + r * out);
            for (int c = threadIdx.x; c < q; c += blockDim.x) y4[c] = b4[c];
        }
    } else {
        for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
            float *yr = y + r * out;
            for (int c = threadIdx.x; c < out; c += blockDim.x) yr[c] = b[c];
        }
    }
}

/* db stage 1: block (32, 8) sums rows [chunk * rows, +rows) of 32 columns
 * of dy (N, out): thread (tx, ty) takes rows ty, ty + 8, ... in double,
 * then row-lane ty = 0 adds the 8 lanes in order. Writes part (chunks,
 * out). Grid (ceil(out / 32), chunks). */
static __device__ __forceinline__ float lin_widen(float v) { return v; }
static __device__ __forceinline__ float lin_widen(uint16_t b) { return remat__f32_of(b); }

template <typename T>
static __global__ void lin_db_partial(const T *__restrict__ dy, double *__restrict__ part, int64_t N, int out,
                                      int64_t rows) {
    __shared__ double s[8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t c = (int64_t)blockIdx.x * 32 + tx;
    int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    double acc = 0.0;
    if (c < out)
        for (int64_t r = r0 + ty; r < r1; r += 8) acc += (double)lin_widen(dy[r * out + c]);
    s[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < out) {
        double t = s[0][tx];
        for (int i = 1; i < 8; i++) t += s[i][tx];
        part[(int64_t)blockIdx.y * out + c] = t;
    }
}

/* db stage 2: db[c] += sum over chunks of part[k][c], k in index order
 * (round16: the sum rounded through bf16 first, as a bf16 dy's view). */
static __global__ void lin_db_final(const double *__restrict__ part, float *__restrict__ db, int64_t chunks, int out,
                                    int round16) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < out; c += gridDim.x * blockDim.x) {
        double t = 0.0;
        for (int64_t k = 0; k < chunks; k++) t += part[k * out + c];
        float v = (float)t;
        db[c] += round16 ? remat__bf16_round(v) : v;
    }
}

/* db (k->din[2], out) += the sum of dy (N, out) over its rows, in part's
 * (chunks, out) doubles of the workspace; a bf16 dy widened, and each sum
 * rounded through bf16 before it is added. */
template <typename T>
static remat_status lin_db(const remat__kctx *k, const T *dy, double *part, int64_t N, int64_t OUT) {
    remat__cuda *cu = remat__cu(k);
    int64_t chunks = lin_db_chunks(N);
    if (chunks <= 0) return REMAT_OK;
    dim3 grid((unsigned)((OUT + 31) / 32), (unsigned)chunks), block(32, 8);
    lin_db_partial<T><<<grid, block, 0, cu->stream>>>(dy, part, N, (int)OUT, lin_db_rows(N));
    REMAT__CU_TRY(remat__cu_launched(k, "lin_db_partial"));
    lin_db_final<<<remat__cu_blocks(cu, OUT), REMAT__CU_THREADS, 0, cu->stream>>>(part, k->din[2], chunks, (int)OUT,
                                                                                  sizeof(T) == sizeof(uint16_t));
    return remat__cu_launched(k, "lin_db_final");
}

/* cuBLAS takes int dimensions. */
static remat_status lin_dims(const remat__kctx *k, int64_t N, int64_t IN, int64_t OUT) {
    if (N > INT_MAX || IN > INT_MAX || OUT > INT_MAX) {
        char lb[128];
        return remat__err(REMAT_UNSUPPORTED, "%s: dimensions (%lld, %lld, %lld) exceed cuBLAS's int range",
                          remat__kctx_label(k, lb, sizeof lb), (long long)N, (long long)IN, (long long)OUT);
    }
    return REMAT_OK;
}

/* ------------------------------------------------ bf16 (native kernels) */

/* Offsets into the workspace of a bf16 pass (0 bytes where unused). */
typedef struct {
    size_t wb, xb, c, part, total;
} lin16_layout;

static lin16_layout lin16_of(const remat_graph *g, const remat__node *n, int xf32, int backward) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    int64_t N = x->d[0], IN = x->d[1], OUT = n->shape.d[1];
    lin16_layout L;
    size_t at = lin_align256(lin_blas_bytes(g, n));
    L.wb = at, at += lin_align256((size_t)(OUT * IN) * 2);
    L.xb = at, at += xf32 ? lin_align256((size_t)(N * IN) * 2) : 0;
    L.c = at, at += backward ? lin_align256((size_t)((N > OUT ? N : OUT) * IN) * 2) : 0;
    L.part = at, at += backward && n->n_in == 3 ? (size_t)lin_db_chunks(N) * (size_t)OUT * sizeof(double) : 0;
    L.total = at;
    return L;
}

/* The weight and bias must be float32 (master copies), as on the CPU. */
static int lin16_ws(void *dev, const remat_graph *g, const remat__node *n, const uint8_t *dt, size_t *fwd,
                    size_t *bwd) {
    (void)dev;
    for (int i = 1; i < n->n_in; i++)
        if (dt[n->in[i]] != REMAT_F32) return 0;
    int xf32 = dt[n->in[0]] != REMAT_BF16;
    *fwd = lin16_of(g, n, xf32, 0).total;
    *bwd = lin16_of(g, n, xf32, 1).total;
    return 1;
}

/* y (N, out) bf16: every row = bf16(b) (out), b float32. */
static __global__ void lin16_bias_rows(uint16_t *__restrict__ y, const float *__restrict__ b, int64_t N, int out) {
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        uint16_t *yr = y + r * out;
        for (int c = threadIdx.x; c < out; c += blockDim.x) yr[c] = remat__bf16_of(b[c]);
    }
}

/* C (m, n) bf16 = op(A) op(B) (+ C when beta is 1), column-major, bf16 A
 * and B, float32 accumulation and epilogue, one rounding into C. */
static remat_status lin16_gemm(const remat__kctx *k, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int kk,
                               const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                               const char *what) {
    remat__cuda *cu = remat__cu(k);
    float one = 1.0f;
    return remat__cu_blas_ok(cublasGemmEx(cu->blas, ta, tb, m, n, kk, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb,
                                          &beta, C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             k, what);
}

static remat_status lin16_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__node *n = k->node;
    int xf32 = k->dt[n->in[0]] != REMAT_BF16, bias = n->n_in == 3;
    int64_t N = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    REMAT__CU_TRY(lin_dims(k, N, IN, OUT));
    if (N == 0 || OUT == 0) return REMAT_OK;
    const lin16_layout L = lin16_of(cu->g, n, xf32, 0);
    unsigned char *ws = (unsigned char *)k->ws;
    uint16_t *wb = (uint16_t *)(ws + L.wb); // (out, in)
    const void *x = k->in[0]->data;         // (N, in), bf16 or float32
    uint16_t *y = (uint16_t *)k->out->data; // (N, out)
    REMAT__CU_TRY(remat__cuda_convert(k, wb, k->in[1]->data, OUT * IN, REMAT__CVT_DOWN));
    if (xf32) {
        REMAT__CU_TRY(remat__cuda_convert(k, ws + L.xb, x, N * IN, REMAT__CVT_DOWN));
        x = ws + L.xb;
    }
    if (bias) {
        unsigned grid = (unsigned)(N < (int64_t)cu->sms * 16 ? N : (int64_t)cu->sms * 16);
        lin16_bias_rows<<<grid, REMAT__CU_THREADS, 0, cu->stream>>>(y, (const float *)k->in[2]->data, N, (int)OUT);
        REMAT__CU_TRY(remat__cu_launched(k, "lin16_bias_rows"));
    }
    if (IN == 0) { /* no product: y = bf16(b), or 0 */
        if (bias) return REMAT_OK;
        return remat__cu_rt_ok(cudaMemsetAsync(y, 0, (size_t)(N * OUT) * 2, cu->stream), k, "cudaMemsetAsync");
    }
    REMAT__CU_TRY(remat__cuda_blas_ws(k, lin_blas_bytes(cu->g, n)));
    /* y^T (out, N) (+)= W (out, in) x^T (in, N), as lin_forward */
    return lin16_gemm(k, CUBLAS_OP_T, CUBLAS_OP_N, (int)OUT, (int)N, (int)IN, wb, (int)IN, x, (int)IN,
                      bias ? 1.0f : 0.0f, y, (int)OUT, "cublasGemmEx (linear forward, bf16)");
}

static remat_status lin16_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__node *n = k->node;
    int xf32 = k->dt[n->in[0]] != REMAT_BF16;
    int64_t N = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    REMAT__CU_TRY(lin_dims(k, N, IN, OUT));
    const lin16_layout L = lin16_of(cu->g, n, xf32, 1);
    unsigned char *ws = (unsigned char *)k->ws;
    uint16_t *wb = (uint16_t *)(ws + L.wb);         // (out, in)
    const uint16_t *dy = (const uint16_t *)k->dout; // (N, out)
    uint16_t *c = (uint16_t *)(ws + L.c);           // (N, in) or (out, in)
    int prod = N > 0 && IN > 0 && OUT > 0;
    if ((k->din[0] || k->din[1]) && prod) REMAT__CU_TRY(remat__cuda_blas_ws(k, lin_blas_bytes(cu->g, n)));
    if (k->din[0] && prod) { /* dx^T (in, N) = W^T (in, out) dy^T (out, N), then added rounded */
        REMAT__CU_TRY(remat__cuda_convert(k, wb, k->in[1]->data, OUT * IN, REMAT__CVT_DOWN));
        REMAT__CU_TRY(lin16_gemm(k, CUBLAS_OP_N, CUBLAS_OP_N, (int)IN, (int)N, (int)OUT, wb, (int)IN, dy, (int)OUT,
                                 0.0f, c, (int)IN, "cublasGemmEx (linear dx, bf16)"));
        REMAT__CU_TRY(remat__cuda_add16(k, k->din[0], !xf32, c, N * IN));
    }
    if (k->din[1] && prod) {            /* dW^T (in, out) = x^T (in, N) dy (N, out), then added rounded */
        const void *x = k->in[0]->data; // (N, in)
        if (xf32) {
            REMAT__CU_TRY(remat__cuda_convert(k, ws + L.xb, x, N * IN, REMAT__CVT_DOWN));
            x = ws + L.xb;
        }
        REMAT__CU_TRY(lin16_gemm(k, CUBLAS_OP_N, CUBLAS_OP_T, (int)IN, (int)OUT, (int)N, x, (int)IN, dy, (int)OUT, 0.0f,
                                 c, (int)IN, "cublasGemmEx (linear dW, bf16)"));
        REMAT__CU_TRY(remat__cuda_add16(k, k->din[1], 0, c, OUT * IN));
    }
    if (n->n_in == 3 && k->din[2] && OUT > 0) return lin_db(k, dy, (double *)(ws + L.part), N, OUT);
    return REMAT_OK;
}

/* ------------------------------------------------------------- float32 */

static remat_status lin_forward(const remat__kctx *k) {
    if (k->dt) return lin16_forward(k); /* bf16: planned so (lin16_ws) */
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data; // (N, in)
    const float *w = (const float *)k->in[1]->data; // (out, in)
    float *y = (float *)k->out->data;               // (N, out)
    int64_t N = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    int bias = k->node->n_in == 3;
    REMAT__CU_TRY(lin_dims(k, N, IN, OUT));
    if (N == 0 || OUT == 0) return REMAT_OK;
    if (bias) {
        const float *b = (const float *)k->in[2]->data; // (out)
        unsigned grid = (unsigned)(N < (int64_t)cu->sms * 16 ? N : (int64_t)cu->sms * 16);
        lin_bias_rows<<<grid, REMAT__CU_THREADS, 0, cu->stream>>>(y, b, N, (int)OUT);
        REMAT__CU_TRY(remat__cu_launched(k, "lin_bias_rows"));
    }
    REMAT__CU_TRY(remat__cuda_blas_ws(k, lin_blas_bytes(cu->g, k->node)));
    float one = 1.0f, beta = bias ? 1.0f : 0.0f;
    /* y^T (out, N) = W (out, in) x^T (in, N): W is stored as a column-major
     * (in, out) matrix, so it enters transposed; x is stored as (in, N). */
    REMAT__CU_TRY(remat__cu_blas_ok(cublasSgemm(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)OUT, (int)N, (int)IN, &one, w,
                                                (int)IN, x, (int)IN, &beta, y, (int)OUT),
                                    k, "cublasSgemm (linear forward)"));
    return REMAT_OK;
}

static remat_status lin_backward(const remat__kctx *k) {
    if (k->dt) return lin16_backward(k);
    remat__cuda *cu = remat__cu(k);
    const float *x = (const float *)k->in[0]->data; // (N, in)
    const float *w = (const float *)k->in[1]->data; // (out, in)
    const float *dy = k->dout;                      // (N, out)
    int64_t N = k->in[0]->shape->d[0], IN = k->in[0]->shape->d[1], OUT = k->in[1]->shape->d[0];
    REMAT__CU_TRY(lin_dims(k, N, IN, OUT));
    size_t blas = lin_blas_bytes(cu->g, k->node);
    float one = 1.0f;
    if ((k->din[0] || k->din[1]) && N > 0 && IN > 0 && OUT > 0) REMAT__CU_TRY(remat__cuda_blas_ws(k, blas));
    if (k->din[0] && N > 0 && IN > 0 && OUT > 0) /* dx^T (in, N) += W^T (in, out) dy^T (out, N) */
        REMAT__CU_TRY(remat__cu_blas_ok(cublasSgemm(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)IN, (int)N, (int)OUT, &one,
                                                    w, (int)IN, dy, (int)OUT, &one, k->din[0], (int)IN),
                                        k, "cublasSgemm (linear dx)"));
    if (k->din[1] && N > 0 && IN > 0 && OUT > 0) /* dW^T (in, out) += x^T (in, N) dy (N, out) */
        REMAT__CU_TRY(remat__cu_blas_ok(cublasSgemm(cu->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)IN, (int)OUT, (int)N, &one,
                                                    x, (int)IN, dy, (int)OUT, &one, k->din[1], (int)IN),
                                        k, "cublasSgemm (linear dW)"));
    if (k->node->n_in == 3 && k->din[2] && OUT > 0)
        REMAT__CU_TRY(lin_db(k, dy, (double *)((char *)k->ws + lin_align256(blas)), N, OUT)); /* (chunks, out) */
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_linear = {lin_forward, lin_backward, lin_fwd_ws,
                                                          lin_bwd_ws,  NULL,         lin16_ws};
