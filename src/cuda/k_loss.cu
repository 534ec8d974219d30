/* k_loss.cu: mean cross-entropy over integer labels and mean squared error
 * on the GPU (CPU reference: src/ops/loss.c; same label rule, same
 * backward formulas, dout read from device memory).
 *
 * Cross-entropy has one block per row of logits (GPT-2: 8192 rows of
 * 50257). A row is read once for its log-sum-exp: each thread keeps a
 * running maximum m and sum s = sum expf(z - m) in double, rescaling s
 * when m grows (checked once per 16 logits), and the block combines the
 * threads' pairs in a fixed tree against the row maximum.
 * The row maximum is exact, so the backward's exponentials expf(z - max)
 * take the CPU's arguments; the double sum differs only in its order. Row losses go
 * to the workspace in double and one block adds them in a fixed tree.
 * Rows are read with 16-byte loads from the first aligned element (a row
 * of 50257 floats starts anywhere mod 16 bytes).
 *
 * MSE: a fixed number of blocks (from the element count only) writes
 * double partial sums, one block adds them in a fixed tree.
 */
#include "cuda-impl.h"
#include "reduce.cuh"

#include <math.h>
#include <stdint.h>

/* ========================================================= cross-entropy */

/* A row of C floats at p: `head` single floats up to the first 16-byte
 * boundary, `body` float4s, then `tail` floats. The split depends only on
 * p mod 16, the same for a row of logits and its gradient. */
typedef struct {
    int head, tail;
    int64_t body;
} ce_split;

static __device__ __forceinline__ ce_split ce_row_split(const float *p, int64_t C, bool vec) {
    ce_split s;
    int64_t h = vec ? (int64_t)((16 - ((uintptr_t)p & 15)) & 15) / 4 : C;
    if (h > C) h = C;
    s.head = (int)h;
    s.body = vec ? (C - h) / 4 : 0;
    s.tail = (int)(C - h - 4 * s.body);
    return s;
}

/* Adds logit v to a thread's running (m, s), s = sum expf(z - m). -inf
 * adds nothing (expf(-inf - m) = 0, and -inf - -inf would be NaN); NaN
 * makes s NaN, as on the CPU. */
static __device__ __forceinline__ void lse_add(float v, float &m, double &s) {
    if (v > m) {
        s *= exp((double)m - (double)v);
        m = v;
    }
    if (v != -INFINITY) s += (double)expf(v - m);
}

/* The same for v <= m or NaN (m already covers v). */
static __device__ __forceinline__ void lse_add_below(float v, float m, double &s) {
    if (v != -INFINITY) s += (double)expf(v - m);
}

#define CE_UNROLL 4

/* The row maximum M and S = sum expf(z - M) (double) of row z, returned to
 * every thread of the block. */
static __device__ void ce_row_stats(const float *__restrict__ z, int64_t C, bool vec, float *M, double *S) {
    __shared__ double shd[33];
    __shared__ float shf[33];
    const ce_split sp = ce_row_split(z, C, vec);
    float m = -INFINITY;
    double s = 0.0;
    const int t = threadIdx.x, bs = blockDim.x;
    if (t < sp.head) lse_add(z[t], m, s);
    /* the body in batches of CE_UNROLL float4s, rescaling at most once per
     * batch: checked per element, a warp took the rescale's branch (a
     * double exp) on most steps, as one lane or another kept meeting a new
     * maximum (GPT-2's logits: 0.88 ms against 0.55 ms on an H100) */
    const float4 *zb = (const float4 *)(z + sp.head);
    for (int64_t i0 = t; i0 < sp.body; i0 += (int64_t)bs * CE_UNROLL) {
        float4 v[CE_UNROLL];
        float bm = -INFINITY;
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            v[u] = i0 + u * bs < sp.body ? zb[i0 + u * bs] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            bm = v[u].x > bm ? v[u].x : bm, bm = v[u].y > bm ? v[u].y : bm;
            bm = v[u].z > bm ? v[u].z : bm, bm = v[u].w > bm ? v[u].w : bm;
        }
        if (bm > m) {
            s *= exp((double)m - (double)bm);
            m = bm;
        }
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            lse_add_below(v[u].x, m, s), lse_add_below(v[u].y, m, s);
            lse_add_below(v[u].z, m, s), lse_add_below(v[u].w, m, s);
        }
    }
    if (t < sp.tail) lse_add(z[sp.head + 4 * sp.body + t], m, s);
    const float mx = block_max(m, shf);
    /* a thread that saw no finite logit has s = 0 (or NaN), m = -inf */
    *S = block_sum(s * exp((double)m - (double)mx), shd);
    *M = mx;
}

/* Loss of row n: log(S) + M - z[y], NaN for a label outside [0, C). */
static __global__ void ce_fwd_rows(int64_t C, bool vec, const float *__restrict__ z, const int32_t *__restrict__ y,
                                   double *__restrict__ rows) {
    const int64_t n = blockIdx.x;
    const float *zn = z + n * C;
    float M;
    double S;
    ce_row_stats(zn, C, vec, &M, &S);
    if (threadIdx.x != 0) return;
    const int32_t t = y[n];
    rows[n] = t < 0 || t >= C ? (double)NAN : log(S) + (double)M - (double)zn[t];
}

/* out = sum_n rows[n] / N, in a fixed tree; one block. */
static __global__ void ce_fwd_total(int64_t N, const double *__restrict__ rows, float *__restrict__ out) {
    __shared__ double sh[33];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += rows[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)(s / (double)N);
}

/* dz[n, c] += g (softmax(z_n)[c] - [c == y_n]), g = dout / N: e = expf(z -
 * M) times scale = g / S in float, and the label's logit in double, as on
 * the CPU. One block per row; a second read of the row. */
static __device__ __forceinline__ float ce_grad(float zc, int64_t c, int64_t t, float M, double S, double g,
                                                float scale) {
    const float e = expf(zc - M);
    return c == t ? (float)(g * ((double)e / S - 1.0)) : scale * e;
}

static __global__ void ce_bwd_rows(int64_t C, bool vec, const float *__restrict__ z, const int32_t *__restrict__ y,
                                   const float *__restrict__ dout, int64_t N, float *__restrict__ dz) {
    const int64_t n = blockIdx.x;
    const float *zn = z + n * C;
    float *dn = dz + n * C;
    float M;
    double S;
    ce_row_stats(zn, C, vec, &M, &S);
    const double g = (double)dout[0] / (double)N;
    const float scale = (float)(g / S);
    const int64_t t = y[n] >= 0 && y[n] < C ? y[n] : C;
    const ce_split sp = ce_row_split(zn, C, vec);
    const int tid = threadIdx.x, bs = blockDim.x;
    if (tid < sp.head) dn[tid] += ce_grad(zn[tid], tid, t, M, S, g, scale);
    const float4 *zb = (const float4 *)(zn + sp.head);
    float4 *db = (float4 *)(dn + sp.head);
    for (int64_t i0 = tid; i0 < sp.body; i0 += (int64_t)bs * CE_UNROLL) {
        float4 v[CE_UNROLL], d[CE_UNROLL];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++)
            if (i0 + u * bs < sp.body) v[u] = zb[i0 + u * bs], d[u] = db[i0 + u * bs];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            const int64_t i = i0 + u * bs, c = sp.head + 4 * i;
            if (i >= sp.body) continue;
            d[u].x += ce_grad(v[u].x, c, t, M, S, g, scale);
            d[u].y += ce_grad(v[u].y, c + 1, t, M, S, g, scale);
            d[u].z += ce_grad(v[u].z, c + 2, t, M, S, g, scale);
            d[u].w += ce_grad(v[u].w, c + 3, t, M, S, g, scale);
            db[i] = d[u];
        }
    }
    if (tid < sp.tail) {
        const int64_t c = sp.head + 4 * sp.body + tid;
        dn[c] += ce_grad(zn[c], c, t, M, S, g, scale);
    }
}

/* Threads per row: enough for one float4 each, 32 to 512. */
static int ce_threads(int64_t C) {
    int bs = 32;
    while (bs < 512 && (int64_t)bs * 4 < C) bs *= 2;
    return bs;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Forward workspace: the row losses, (N) doubles. */
static size_t ce_fwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    return (size_t)remat__in_shape(g, n, 0)->d[0] * sizeof(double);
}

static remat_status ce_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const float *z = (const float *)k->in[0]->data;     // (N, C)
    const int32_t *y = (const int32_t *)k->in[1]->data; // (N)
    float *out = (float *)k->out->data;                 // ()
    double *rows = (double *)k->ws;                     // (N)
    const int64_t N = k->in[0]->shape->d[0], C = k->in[0]->shape->d[1];
    if (N > 0 && C > 0) {
        ce_fwd_rows<<<(unsigned)N, ce_threads(C), 0, cu->stream>>>(C, true, z, y, rows);
        REMAT__CU_TRY(remat__cu_launched(k, "ce_fwd_rows"));
    }
    /* N == 0 gives 0/0 = NaN, as on the CPU; C == 0 leaves rows unset on
     * the CPU too (it reads z[-1]): not a valid shape in practice */
    ce_fwd_total<<<1, 1024, 0, cu->stream>>>(N, rows, out);
    REMAT__CU_TRY(remat__cu_launched(k, "ce_fwd_total"));
    return REMAT_OK;
}

static remat_status ce_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    float *dz = k->din[0]; // (N, C)
    if (!dz) return REMAT_OK;
    const float *z = (const float *)k->in[0]->data;     // (N, C), saved
    const int32_t *y = (const int32_t *)k->in[1]->data; // (N), saved
    const int64_t N = k->in[0]->shape->d[0], C = k->in[0]->shape->d[1];
    if (N == 0 || C == 0) return REMAT_OK;
    /* z and dz rows must share their offset mod 16 for the float4 body */
    const bool vec = ((uintptr_t)z & 15) == ((uintptr_t)dz & 15);
    ce_bwd_rows<<<(unsigned)N, ce_threads(C), 0, cu->stream>>>(C, vec, z, y, k->dout, N, dz);
    REMAT__CU_TRY(remat__cu_launched(k, "ce_bwd_rows"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_cross_entropy = {ce_forward, ce_backward, ce_fwd_ws, NULL, NULL, NULL};

/* =================================================================== MSE */

#define MSE_THREADS 256
#define MSE_MAX_BLOCKS 1024

/* Blocks of the forward's partial sums: from the element count only. */
static int64_t mse_blocks(int64_t n) {
    int64_t b = (n + 8191) / 8192;
    return b < 1 ? 1 : b > MSE_MAX_BLOCKS ? MSE_MAX_BLOCKS : b;
}

/* part[block] = sum (a - b)^2 in double over the block's grid-stride share. */
template <bool VEC>
static __global__ void __launch_bounds__(MSE_THREADS)
    mse_part(int64_t n, const float *__restrict__ a, const float *__restrict__ b, double *__restrict__ part) {
    __shared__ double sh[33];
    const int64_t tid = (int64_t)blockIdx.x * MSE_THREADS + threadIdx.x, nt = (int64_t)gridDim.x * MSE_THREADS;
    double s = 0.0;
    int64_t done = 0;
    if (VEC) {
        const int64_t n4 = n / 4;
        const float4 *a4 = (const float4 *)a, *b4 = (const float4 *)b;
        for (int64_t i = tid; i < n4; i += nt) {
            const float4 u = a4[i], v = b4[i];
            double d0 = (double)u.x - (double)v.x, d1 = (double)u.y - (double)v.y;
            double d2 = (double)u.z - (double)v.z, d3 = (double)u.w - (double)v.w;
            s += d0 * d0, s += d1 * d1, s += d2 * d2, s += d3 * d3;
        }
        done = 4 * n4;
    }
    for (int64_t i = done + tid; i < n; i += nt) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

static __global__ void mse_total(int64_t nb, int64_t n, const double *__restrict__ part, float *__restrict__ out) {
    __shared__ double sh[33];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)(s / (double)n);
}

/* d = (float)(g (a - b)), g = 2 dout / n: da += d, db -= d. */
static __device__ __forceinline__ float mse_d(double g, float a, float b) {
    return (float)(g * ((double)a - (double)b));
}

/* da and db are not restrict: mse(x, x) may give both the same buffer. */
template <bool VEC>
static __global__ void mse_bwd(int64_t n, const float *__restrict__ a, const float *__restrict__ b,
                               const float *__restrict__ dout, float *da, float *db) {
    const double g = 2.0 * (double)dout[0] / (double)n;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (VEC) {
        const int64_t n4 = n / 4;
        for (int64_t i = tid; i < n4; i += nt) {
            const float4 u = ((const float4 *)a)[i], v = ((const float4 *)b)[i];
            const float d0 = mse_d(g, u.x, v.x), d1 = mse_d(g, u.y, v.y);
            const float d2 = mse_d(g, u.z, v.z), d3 = mse_d(g, u.w, v.w);
            if (da) {
                float4 t = ((float4 *)da)[i];
                t.x += d0, t.y += d1, t.z += d2, t.w += d3;
                ((float4 *)da)[i] = t;
            }
            if (db) {
                float4 t = ((float4 *)db)[i];
                t.x -= d0, t.y -= d1, t.z -= d2, t.w -= d3;
                ((float4 *)db)[i] = t;
            }
        }
        done = 4 * n4;
    }
    for (int64_t i = done + tid; i < n; i += nt) {
        const float d = mse_d(g, a[i], b[i]);
        if (da) da[i] += d;
        if (db) db[i] -= d;
    }
}

/* Forward workspace: one double per block of partial sums. */
static size_t mse_fwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    return (size_t)mse_blocks(remat__numel(remat__in_shape(g, n, 0))) * sizeof(double);
}

static remat_status mse_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const float *a = (const float *)k->in[0]->data; // (...)
    const float *b = (const float *)k->in[1]->data; // (...), same shape
    float *out = (float *)k->out->data;             // ()
    double *part = (double *)k->ws;                 // (blocks)
    const int64_t n = remat__numel(k->in[0]->shape), nb = mse_blocks(n);
    if (aligned16(a) && aligned16(b)) mse_part<true><<<(unsigned)nb, MSE_THREADS, 0, cu->stream>>>(n, a, b, part);
    else mse_part<false><<<(unsigned)nb, MSE_THREADS, 0, cu->stream>>>(n, a, b, part);
    REMAT__CU_TRY(remat__cu_launched(k, "mse_part"));
    mse_total<<<1, 1024, 0, cu->stream>>>(nb, n, part, out);
    REMAT__CU_TRY(remat__cu_launched(k, "mse_total"));
    return REMAT_OK;
}

static remat_status mse_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    float *da = k->din[0], *db = k->din[1]; // (...), either may be NULL
    if (!da && !db) return REMAT_OK;
    const float *a = (const float *)k->in[0]->data; // saved
    const float *b = (const float *)k->in[1]->data; // saved
    const int64_t n = remat__numel(k->in[0]->shape);
    if (n == 0) return REMAT_OK;
    const bool vec = aligned16(a) && aligned16(b) && aligned16(da) && aligned16(db); /* NULL is aligned */
    const unsigned blocks = remat__cu_blocks(cu, vec ? (n + 3) / 4 : n);
    if (vec) mse_bwd<true><<<blocks, REMAT__CU_THREADS, 0, cu->stream>>>(n, a, b, k->dout, da, db);
    else mse_bwd<false><<<blocks, REMAT__CU_THREADS, 0, cu->stream>>>(n, a, b, k->dout, da, db);
    REMAT__CU_TRY(remat__cu_launched(k, "mse_bwd"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_mse = {mse_forward, mse_backward, mse_fwd_ws, NULL, NULL, NULL};
