/* k_attention.cu: softmax over the last dimension, and GPT-2's causal
 * multi-head self-attention, on the GPU (CPU reference: src/ops/attention.c,
 * whose layouts and roundings these kernels follow).
 *
 * Softmax rows run one warp per row while a row fits in registers (up to
 * 1024 entries, 32 per lane), one block of 256 per row beyond. Max is
 * exact in any order; the sums are per-lane double partials in index
 * order, then an xor-butterfly over the warp (every lane gets the same
 * bits: a + b == b + a), then the warps' sums in warp order. Values are
 * rounded as on the CPU: e = expf(x - max) in float, summed in double,
 * y = e * (float)(1 / sum); backward d = sum dy y in double,
 * dx += y (dy - (float)d).
 *
 * Attention: qkv (B, T, 3C), head h of batch item b at qkv + b T 3C + h D
 * with leading dimension 3C; P (B, H, T, T) is the aux, each T x T matrix
 * at p * square_stride(T) for the pair p = b H + h. The products go
 * through cublasSgemmBatched over all (b, h) pairs at once, with pointer
 * arrays built in the workspace by a small kernel (the pairs have no
 * single stride). Row-major matrices are column-major transposes, so each
 * product is written for the transposes (see the comments at the calls).
 * The causal mask is used to skip work: the T query rows are cut into nb
 * blocks of RB rows (RB about 128, nb at most 8), and block [i0, i1) only
 * touches key columns [0, i1), which removes close to half of the flops;
 * the skipped entries are the masked ones, which the kernels set to 0.
 *   forward, per row block: S = Q K^T / sqrt(D) into P; then the causal
 *     softmax of every row in place (entries j > i become exactly 0, up to
 *     column T); then, per row block, O = P V into out (B, T, C).
 *   backward, per chunk of G pairs and per row block (rows i0..i1):
 *     dP = dO V^T into the workspace (nr x i1 per pair), dS = P * (dP -
 *     rowsum(P * dP)) in place, then dQ[i0:i1] += dS K / sqrt(D),
 *     dK[0:i1] += dS^T Q[i0:i1] / sqrt(D), dV[0:i1] += P^T dO[i0:i1].
 *     dK and dV are sums over the row blocks, accumulated by successive
 *     GEMMs with beta 1 on one stream: a fixed order.
 * Workspace: forward, cuBLAS's (32 MiB, 4 MiB for small nodes) and the
 * pointer arrays ((2 + 3 nb) B H pointers); backward, cuBLAS's, the
 * pointer arrays ((5 + 4 nb) B H), and the dS buffer of G RB T floats with
 * G = min(B H, max(1, 64 MiB / (RB T 4))): for gpt2-small b8x1024 (RB 128,
 * G = 96 = B H) 48 MiB.
 */
#include "cuda-impl.h"
#include "reduce.cuh"

#include <limits.h>
#include <math.h>

/* ------------------------------------------------------------ row kernels */

#define SM_WARPS 8   /* warps per block of the warp-per-row kernels */
#define SM_BLOCK 256 /* threads of the block-per-row kernels */

/* Rows of one launch: row r is row ii = r % rpg of group g = r / rpg, its
 * entry j at base + g * gstride + ii * ld + j (each buffer has its own
 * gstride and ld). Causal rows are query rows i = i0 + ii of length i + 1,
 * with the entries (i, zend) set to 0; other rows have length len. */
typedef struct {
    int64_t nrows;
    int64_t rpg;
    int i0, len, zend;
} sm_rows;

/* Locates row r of a launch: its group's row offset for each layout. */
static __device__ __forceinline__ void sm_locate(const sm_rows &rs, int64_t r, int64_t *g, int *ii) {
    *g = r / rs.rpg;
    *ii = (int)(r - *g * rs.rpg);
}

/* Softmax forward, one warp per row, lane holds entries lane + 32 t
 * (t < K). x and y may be the same buffer. */
template <int K, bool CAUSAL>
static __global__ void __launch_bounds__(SM_WARPS * 32)
    sm_fwd_warp(const float *x, int64_t xgs, int xld, float *y, int64_t ygs, int yld, sm_rows rs) {
    int lane = threadIdx.x & 31;
    int64_t nw = (int64_t)gridDim.x * SM_WARPS;
    for (int64_t r = (int64_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5); r < rs.nrows; r += nw) {
        int64_t g;
        int ii;
        sm_locate(rs, r, &g, &ii);
        const float *xr = x + g * xgs + (int64_t)ii * xld;
        float *yr = y + g * ygs + (int64_t)ii * yld;
        int len = CAUSAL ? rs.i0 + ii + 1 : rs.len, zend = CAUSAL ? rs.zend : rs.len;
        float v[K];
        float m = -INFINITY;
#pragma unroll
        for (int t = 0; t < K; t++) {
            int j = lane + 32 * t;
            v[t] = j < len ? xr[j] : -INFINITY;
            m = fmaxf(m, v[t]);
        }
        m = warp_fmax(m);
        double s = 0.0;
#pragma unroll
        for (int t = 0; t < K; t++) {
            int j = lane + 32 * t;
            if (j < len) {
                v[t] = expf(v[t] - m);
                s += (double)v[t];
            }
        }
        float inv = (float)(1.0 / warp_sum(s));
#pragma unroll
        for (int t = 0; t < K; t++) {
            int j = lane + 32 * t;
            if (j < len) yr[j] = v[t] * inv;
            else if (CAUSAL && j < zend) yr[j] = 0.0f;
        }
    }
}

/* Softmax forward for long rows, one block per row, reading x three times
 * (max, sum, write). x and y may be the same buffer: each thread reads
 * and writes only its own entries. */
template <bool CAUSAL>
static __global__ void __launch_bounds__(SM_BLOCK)
    sm_fwd_block(const float *x, int64_t xgs, int xld, float *y, int64_t ygs, int yld, sm_rows rs) {
    __shared__ float shm[SM_BLOCK / 32];
    __shared__ double shs[SM_BLOCK / 32];
    for (int64_t r = blockIdx.x; r < rs.nrows; r += gridDim.x) {
        int64_t g;
        int ii;
        sm_locate(rs, r, &g, &ii);
        const float *xr = x + g * xgs + (int64_t)ii * xld;
        float *yr = y + g * ygs + (int64_t)ii * yld;
        int len = CAUSAL ? rs.i0 + ii + 1 : rs.len, zend = CAUSAL ? rs.zend : rs.len;
        float m = -INFINITY;
        for (int j = threadIdx.x; j < len; j += SM_BLOCK) m = fmaxf(m, xr[j]);
        m = block_fmax_in_order<SM_BLOCK / 32>(m, shm);
        double s = 0.0;
        for (int j = threadIdx.x; j < len; j += SM_BLOCK) s += (double)expf(xr[j] - m);
        float inv = (float)(1.0 / block_sum_in_order<SM_BLOCK / 32>(s, shs));
        for (int j = threadIdx.x; j < zend; j += SM_BLOCK) yr[j] = j < len ? expf(xr[j] - m) * inv : 0.0f;
    }
}

/* Softmax backward, one warp per row: d = sum_j dy_j y_j (double), then
 * plain rows accumulate dx += y (dy - d); causal rows (attention's dS)
 * write dx = y (dy - d) and 0 on (i, zend), in place over dy allowed. */
template <int K, bool CAUSAL>
static __global__ void __launch_bounds__(SM_WARPS * 32)
    sm_bwd_warp(const float *y, int64_t ygs, int yld, const float *dy, int64_t dgs, int dld, float *dx, int64_t xgs,
                int xld, sm_rows rs) {
    int lane = threadIdx.x & 31;
    int64_t nw = (int64_t)gridDim.x * SM_WARPS;
    for (int64_t r = (int64_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5); r < rs.nrows; r += nw) {
        int64_t g;
        int ii;
        sm_locate(rs, r, &g, &ii);
        const float *yr = y + g * ygs + (int64_t)ii * yld;
        const float *dyr = dy + g * dgs + (int64_t)ii * dld;
        float *dxr = dx + g * xgs + (int64_t)ii * xld;
        int len = CAUSAL ? rs.i0 + ii + 1 : rs.len, zend = CAUSAL ? rs.zend : rs.len;
        float yv[K], dv[K];
        double d = 0.0;
#pragma unroll
        for (int t = 0; t < K; t++) {
            int j = lane + 32 * t;
            yv[t] = j < len ? yr[j] : 0.0f;
            dv[t] = j < len ? dyr[j] : 0.0f;
            if (j < len) d += (double)dv[t] * (double)yv[t];
        }
        float df = (float)warp_sum(d);
#pragma unroll
        for (int t = 0; t < K; t++) {
            int j = lane + 32 * t;
            if (j < len) {
                if (CAUSAL) dxr[j] = yv[t] * (dv[t] - df);
                else dxr[j] += yv[t] * (dv[t] - df);
            } else if (CAUSAL && j < zend) {
                dxr[j] = 0.0f;
            }
        }
    }
}

/* Softmax backward for long rows, one block per row (as sm_bwd_warp). */
template <bool CAUSAL>
static __global__ void __launch_bounds__(SM_BLOCK)
    sm_bwd_block(const float *y, int64_t ygs, int yld, const float *dy, int64_t dgs, int dld, float *dx, int64_t xgs,
                 int xld, sm_rows rs) {
    __shared__ double shs[SM_BLOCK / 32];
    for (int64_t r = blockIdx.x; r < rs.nrows; r += gridDim.x) {
        int64_t g;
        int ii;
        sm_locate(rs, r, &g, &ii);
        const float *yr = y + g * ygs + (int64_t)ii * yld;
        const float *dyr = dy + g * dgs + (int64_t)ii * dld;
        float *dxr = dx + g * xgs + (int64_t)ii * xld;
        int len = CAUSAL ? rs.i0 + ii + 1 : rs.len, zend = CAUSAL ? rs.zend : rs.len;
        double d = 0.0;
        for (int j = threadIdx.x; j < len; j += SM_BLOCK) d += (double)dyr[j] * (double)yr[j];
        float df = (float)block_sum_in_order<SM_BLOCK / 32>(d, shs);
        for (int j = threadIdx.x; j < zend; j += SM_BLOCK) {
            if (j < len) {
                float v = yr[j] * (dyr[j] - df);
                if (CAUSAL) dxr[j] = v;
                else dxr[j] += v;
            } else {
                dxr[j] = 0.0f;
            }
        }
    }
}

/* Lanes' registers for rows of up to n entries: 1, 2, 4, 8, 16 or 32, or 0
 * when a row needs the block kernel. */
static int sm_regs(int64_t n) {
    int k = 1;
    while (k <= 32 && 32 * (int64_t)k < n) k *= 2;
    return k <= 32 ? k : 0;
}

static unsigned sm_grid(const remat__cuda *cu, int64_t nrows, int64_t per_block, int64_t per_sm) {
    int64_t b = (nrows + per_block - 1) / per_block, cap = (int64_t)cu->sms * per_sm;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

/* Launches softmax forward over rs (rows of up to `width` entries). */
template <bool CAUSAL>
static remat_status sm_forward_rows(const remat__kctx *k, const float *x, int64_t xgs, int xld, float *y, int64_t ygs,
                                    int yld, sm_rows rs, int64_t width) {
    remat__cuda *cu = remat__cu(k);
    if (rs.nrows == 0) return REMAT_OK;
    int K = sm_regs(width);
    unsigned gw = sm_grid(cu, rs.nrows, SM_WARPS, 16);
    switch (K) {
    case 1: sm_fwd_warp<1, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs); break;
    case 2: sm_fwd_warp<2, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs); break;
    case 4: sm_fwd_warp<4, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs); break;
    case 8: sm_fwd_warp<8, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs); break;
    case 16: sm_fwd_warp<16, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs); break;
    case 32: sm_fwd_warp<32, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs); break;
    default:
        sm_fwd_block<CAUSAL><<<sm_grid(cu, rs.nrows, 1, 8), SM_BLOCK, 0, cu->stream>>>(x, xgs, xld, y, ygs, yld, rs);
        return remat__cu_launched(k, "sm_fwd_block");
    }
    return remat__cu_launched(k, "sm_fwd_warp");
}

/* Launches softmax backward over rs (rows of up to `width` entries). */
template <bool CAUSAL>
static remat_status sm_backward_rows(const remat__kctx *k, const float *y, int64_t ygs, int yld, const float *dy,
                                     int64_t dgs, int dld, float *dx, int64_t xgs, int xld, sm_rows rs, int64_t width) {
    remat__cuda *cu = remat__cu(k);
    if (rs.nrows == 0) return REMAT_OK;
    int K = sm_regs(width);
    unsigned gw = sm_grid(cu, rs.nrows, SM_WARPS, 16);
#define SM_BWD_WARP(KK)                                                                                                \
    sm_bwd_warp<KK, CAUSAL><<<gw, SM_WARPS * 32, 0, cu->stream>>>(y, ygs, yld, dy, dgs, dld, dx, xgs, xld, rs);        \
    break;
    switch (K) {
    case 1: SM_BWD_WARP(1)
    case 2: SM_BWD_WARP(2)
    case 4: SM_BWD_WARP(4)
    case 8: SM_BWD_WARP(8)
    case 16: SM_BWD_WARP(16)
    case 32: SM_BWD_WARP(32)
    default:
        sm_bwd_block<CAUSAL>
            <<<sm_grid(cu, rs.nrows, 1, 8), SM_BLOCK, 0, cu->stream>>>(y, ygs, yld, dy, dgs, dld, dx, xgs, xld, rs);
        return remat__cu_launched(k, "sm_bwd_block");
    }
#undef SM_BWD_WARP
    return remat__cu_launched(k, "sm_bwd_warp");
}

/* ---------------------------------------------------------------- softmax */

/* Rows (R, C) of a tensor whose last dimension is C; C must fit an int. */
static remat_status sm_dims(const remat__kctx *k, int64_t *R, int64_t *C) {
    const remat__shape *s = k->in[0]->shape;
    *C = s->d[s->ndim - 1];
    *R = *C > 0 ? remat__numel(s) / *C : 0;
    if (*C > INT_MAX) {
        char lb[128];
        return remat__err(REMAT_UNSUPPORTED, "%s: rows of %lld entries exceed the kernel's int range",
                          remat__kctx_label(k, lb, sizeof lb), (long long)*C);
    }
    return REMAT_OK;
}

static remat_status softmax_forward(const remat__kctx *k) {
    const float *x = (const float *)k->in[0]->data; // (R, C)
    float *y = (float *)k->out->data;               // (R, C)
    int64_t R, C;
    REMAT__CU_TRY(sm_dims(k, &R, &C));
    sm_rows rs = {R, R > 0 ? R : 1, 0, (int)C, (int)C};
    return sm_forward_rows<false>(k, x, 0, (int)C, y, 0, (int)C, rs, C);
}

static remat_status softmax_backward(const remat__kctx *k) {
    const float *y = (const float *)k->out->data; // (R, C)
    const float *dy = k->dout;                    // (R, C)
    float *dx = k->din[0];                        // (R, C)
    int64_t R, C;
    if (!dx) return REMAT_OK;
    REMAT__CU_TRY(sm_dims(k, &R, &C));
    sm_rows rs = {R, R > 0 ? R : 1, 0, (int)C, (int)C};
    return sm_backward_rows<false>(k, y, 0, (int)C, dy, 0, (int)C, dx, 0, (int)C, rs, C);
}

extern "C" const remat__dev_kernels remat__cuda_softmax = {softmax_forward, softmax_backward, NULL, NULL, NULL, NULL};

/* -------------------------------------------------------------- attention */

/* Floats of one T x T matrix of P, as on the CPU (whole 64-byte lines). */
static int64_t square_stride(int64_t T) { return (T * T + 15) & ~(int64_t)15; }

static size_t att_align256(size_t b) { return (b + 255) & ~(size_t)255; }

#define ATT_MAX_BLOCKS 8                /* row blocks of the causal split */
#define ATT_DS_BYTES ((size_t)64 << 20) /* target size of backward's dS buffer */

typedef struct {
    int64_t B, T, C, H, D, TT, BH;
    int64_t RB, nb; /* rows per row block, row blocks */
    int64_t G, PS;  /* backward: pairs per chunk, floats of one pair's dS */
    float scale;
} att_dims;

static att_dims att_get(const remat__node *n) {
    att_dims a;
    a.B = n->shape.d[0];
    a.T = n->shape.d[1];
    a.C = n->shape.d[2];
    a.H = n->iattr[0];
    a.D = a.C / a.H;
    a.TT = square_stride(a.T);
    a.BH = a.B * a.H;
    a.scale = (float)(1.0 / sqrt((double)a.D));
    int64_t nb = a.T / 128;
    nb = nb < 1 ? 1 : nb > ATT_MAX_BLOCKS ? ATT_MAX_BLOCKS : nb;
    a.RB = ((a.T + nb - 1) / nb + 15) & ~(int64_t)15;
    a.nb = a.T > 0 ? (a.T + a.RB - 1) / a.RB : 0;
    a.PS = a.RB * a.T; /* a multiple of 16: every pair's matrix 64-byte aligned */
    int64_t G = a.PS > 0 ? (int64_t)(ATT_DS_BYTES / ((size_t)a.PS * sizeof(float))) : 1;
    G = G < 1 ? 1 : G;
    a.G = G < a.BH ? G : a.BH;
    return a;
}

/* cuBLAS workspace: 32 MiB for large nodes, 4 MiB for small ones. */
static size_t att_blas_bytes(const att_dims &a) {
    double flops = 4.0 * (double)a.B * (double)a.T * (double)a.T * (double)a.C;
    return flops >= (double)(1 << 30) ? (size_t)32 << 20 : (size_t)4 << 20;
}

/* Pointer arrays. A spec is one operand's pointers over the pairs p:
 * base + b bs + h hs + (p % G) gs + i0 rs (b = p / H, h = p % H); specs
 * with rs != 0 get one array per row block (slot), the others one. */
#define ATT_MAX_SPECS 9
#define ATT_MAX_SLOTS (ATT_MAX_SPECS * ATT_MAX_BLOCKS)

typedef struct {
    const float *base;
    int64_t bs, hs, gs, rs;
} att_spec;

typedef struct {
    att_spec spec[ATT_MAX_SPECS];
    unsigned char slot_spec[ATT_MAX_SLOTS];
    int slot_i0[ATT_MAX_SLOTS];
    int nslots;
    int64_t H, BH, G;
} att_table;

/* tab (nslots, BH): slot s, pair p. */
static __global__ void att_pointers(att_table t, const float **tab) {
    int64_t n = (int64_t)t.nslots * t.BH;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
        int s = (int)(q / t.BH);
        int64_t p = q - (int64_t)s * t.BH, b = p / t.H, h = p - b * t.H;
        const att_spec sp = t.spec[t.slot_spec[s]];
        tab[q] = sp.base + b * sp.bs + h * sp.hs + (p % t.G) * sp.gs + (int64_t)t.slot_i0[s] * sp.rs;
    }
}

/* Host side of a pointer table: slot[spec][block] indexes tab's rows. */
typedef struct {
    att_table t;
    int slot[ATT_MAX_SPECS][ATT_MAX_BLOCKS];
    const float **tab;
} att_ptrs;

static void att_ptrs_init(att_ptrs *pt, const att_dims &a, const att_spec *specs, int nspecs, void *where) {
    memset(pt, 0, sizeof *pt);
    pt->t.H = a.H;
    pt->t.BH = a.BH;
    pt->t.G = a.G;
    for (int s = 0; s < nspecs; s++) {
        pt->t.spec[s] = specs[s];
        for (int64_t r = 0; r < (specs[s].rs ? a.nb : 1); r++) {
            pt->t.slot_spec[pt->t.nslots] = (unsigned char)s;
            pt->t.slot_i0[pt->t.nslots] = (int)(r * a.RB);
            pt->slot[s][r] = pt->t.nslots++;
        }
        for (int64_t r = specs[s].rs ? a.nb : 1; r < ATT_MAX_BLOCKS; r++) pt->slot[s][r] = pt->slot[s][0];
    }
    pt->tab = (const float **)where;
}

static size_t att_ptrs_bytes(const att_dims &a, int fixed, int per_block) {
    return (size_t)(fixed + per_block * a.nb) * (size_t)a.BH * sizeof(float *);
}

static remat_status att_ptrs_build(const remat__kctx *k, const att_ptrs *pt) {
    remat__cuda *cu = remat__cu(k);
    int64_t n = (int64_t)pt->t.nslots * pt->t.BH;
    att_pointers<<<remat__cu_blocks(cu, n), REMAT__CU_THREADS, 0, cu->stream>>>(pt->t, pt->tab);
    return remat__cu_launched(k, "att_pointers");
}

/* The pointers of spec s for row block r, from pair p0 on. */
static const float *const *att_in(const att_ptrs *pt, int s, int64_t r, int64_t p0) {
    return pt->tab + (int64_t)pt->slot[s][r] * pt->t.BH + p0;
}
static float *const *att_out(const att_ptrs *pt, int s, int64_t r, int64_t p0) {
    return (float *const *)(pt->tab + (int64_t)pt->slot[s][r] * pt->t.BH + p0);
}

static remat_status att_gemm(const remat__kctx *k, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                             int64_t kk, float alpha, const float *const *A, int64_t lda, const float *const *Bm,
                             int64_t ldb, float beta, float *const *Cm, int64_t ldc, int64_t batch, const char *what) {
    remat__cuda *cu = remat__cu(k);
    return remat__cu_blas_ok(cublasSgemmBatched(cu->blas, ta, tb, (int)m, (int)n, (int)kk, &alpha, A, (int)lda, Bm,
                                                (int)ldb, &beta, Cm, (int)ldc, (int)batch),
                             k, what);
}

static size_t att_fwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    (void)g;
    att_dims a = att_get(n);
    return att_align256(att_blas_bytes(a)) + att_ptrs_bytes(a, 2, 3);
}

static size_t att_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    (void)g;
    att_dims a = att_get(n);
    return att_align256(att_blas_bytes(a)) + att_align256(att_ptrs_bytes(a, 5, 4)) +
           (size_t)a.G * (size_t)a.PS * sizeof(float);
}

/* cuBLAS takes int dimensions and batch counts. */
static remat_status att_check(const remat__kctx *k, const att_dims &a) {
    if (a.BH > INT_MAX || 3 * a.C > INT_MAX || a.T > INT_MAX / (a.T > 0 ? a.T : 1)) {
        char lb[128];
        return remat__err(REMAT_UNSUPPORTED, "%s: %lld (batch, head) pairs or T = %lld exceed cuBLAS's int range",
                          remat__kctx_label(k, lb, sizeof lb), (long long)a.BH, (long long)a.T);
    }
    return REMAT_OK;
}

/* Forward specs. */
enum { AF_K, AF_V, AF_Q, AF_P, AF_O, AF_N };

static remat_status att_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const float *qkv = (const float *)k->in[0]->data; // (B, T, 3C)
    float *out = (float *)k->out->data;               // (B, T, C)
    float *P = k->aux;                                // (B, H, T, T), each T x T at p * TT
    att_dims a = att_get(k->node);
    REMAT__CU_TRY(att_check(k, a));
    if (a.BH == 0 || a.T == 0 || a.D == 0) return REMAT_OK;
    int64_t T = a.T, C = a.C, D = a.D, C3 = 3 * C;
    size_t blas = att_blas_bytes(a);
    att_spec sp[AF_N] = {
        {qkv + C, T * C3, D, 0, 0},     /* K (b, h), rows from 0 */
        {qkv + 2 * C, T * C3, D, 0, 0}, /* V (b, h) */
        {qkv, T * C3, D, 0, C3},        /* Q (b, h) from row i0 */
        {P, a.H * a.TT, a.TT, 0, T},    /* P (b, h) from row i0 */
        {out, T * C, D, 0, C},          /* O (b, h) from row i0 */
    };
    att_ptrs pt;
    att_ptrs_init(&pt, a, sp, AF_N, (char *)k->ws + att_align256(blas));
    REMAT__CU_TRY(att_ptrs_build(k, &pt));
    REMAT__CU_TRY(remat__cuda_blas_ws(k, blas));
    /* S[i0:i1, 0:i1] (nr, i1) = Q[i0:i1] K[0:i1]^T / sqrt(D), as the
     * column-major S^T (i1, nr) = K (i1, D) Q^T (D, nr): K is stored as a
     * column-major (D, T) matrix with leading dimension 3C, so transposed. */
    for (int64_t r = 0; r < a.nb; r++) {
        int64_t i0 = r * a.RB, i1 = i0 + a.RB < T ? i0 + a.RB : T, nr = i1 - i0;
        REMAT__CU_TRY(att_gemm(k, CUBLAS_OP_T, CUBLAS_OP_N, i1, nr, D, a.scale, att_in(&pt, AF_K, r, 0), C3,
                               att_in(&pt, AF_Q, r, 0), C3, 0.0f, att_out(&pt, AF_P, r, 0), T, a.BH,
                               "cublasSgemmBatched (attention S = Q K^T)"));
    }
    /* P = causal softmax of every row of S, in place, zeros to column T. */
    sm_rows rs = {a.BH * T, T, 0, (int)T, (int)T};
    REMAT__CU_TRY(sm_forward_rows<true>(k, P, a.TT, (int)T, P, a.TT, (int)T, rs, T));
    /* O[i0:i1] (nr, D) = P[i0:i1, 0:i1] V[0:i1], as O^T (D, nr) =
     * V^T (D, i1) P^T (i1, nr): both stored that way. */
    for (int64_t r = 0; r < a.nb; r++) {
        int64_t i0 = r * a.RB, i1 = i0 + a.RB < T ? i0 + a.RB : T, nr = i1 - i0;
        REMAT__CU_TRY(att_gemm(k, CUBLAS_OP_N, CUBLAS_OP_N, D, nr, i1, 1.0f, att_in(&pt, AF_V, r, 0), C3,
                               att_in(&pt, AF_P, r, 0), T, 0.0f, att_out(&pt, AF_O, r, 0), C, a.BH,
                               "cublasSgemmBatched (attention O = P V)"));
    }
    return REMAT_OK;
}

/* Backward specs. */
enum { AB_V, AB_K, AB_S, AB_DK, AB_DV, AB_DO, AB_DQ, AB_Q, AB_P, AB_N };

static remat_status att_backward(const remat__kctx *k) {
    const float *qkv = (const float *)k->in[0]->data; // (B, T, 3C)
    const float *dy = k->dout;                        // (B, T, C)
    const float *P = k->aux;                          // (B, H, T, T), each T x T at p * TT
    float *dqkv = k->din[0];                          // (B, T, 3C)
    if (!dqkv) return REMAT_OK;
    att_dims a = att_get(k->node);
    REMAT__CU_TRY(att_check(k, a));
    if (a.BH == 0 || a.T == 0 || a.D == 0) return REMAT_OK;
    int64_t T = a.T, C = a.C, D = a.D, C3 = 3 * C;
    size_t blas = att_blas_bytes(a), ptrs = att_align256(att_ptrs_bytes(a, 5, 4));
    float *dS = (float *)((char *)k->ws + att_align256(blas) + ptrs); // G x (nr, i1), pair stride PS
    att_spec sp[AB_N] = {
        {qkv + 2 * C, T * C3, D, 0, 0},  /* V (b, h) */
        {qkv + C, T * C3, D, 0, 0},      /* K (b, h) */
        {dS, 0, 0, a.PS, 0},             /* dS of pair p at (p % G) PS */
        {dqkv + C, T * C3, D, 0, 0},     /* dK (b, h) */
        {dqkv + 2 * C, T * C3, D, 0, 0}, /* dV (b, h) */
        {dy, T * C, D, 0, C},            /* dO (b, h) from row i0 */
        {dqkv, T * C3, D, 0, C3},        /* dQ (b, h) from row i0 */
        {qkv, T * C3, D, 0, C3},         /* Q (b, h) from row i0 */
        {P, a.H * a.TT, a.TT, 0, T},     /* P (b, h) from row i0 */
    };
    att_ptrs pt;
    att_ptrs_init(&pt, a, sp, AB_N, (char *)k->ws + att_align256(blas));
    REMAT__CU_TRY(att_ptrs_build(k, &pt));
    REMAT__CU_TRY(remat__cuda_blas_ws(k, blas));
    for (int64_t p0 = 0; p0 < a.BH; p0 += a.G) {
        int64_t np = a.BH - p0 < a.G ? a.BH - p0 : a.G;
        for (int64_t r = 0; r < a.nb; r++) {
            int64_t i0 = r * a.RB, i1 = i0 + a.RB < T ? i0 + a.RB : T, nr = i1 - i0;
            /* dP (nr, i1) = dO[i0:i1] V[0:i1]^T, as dP^T (i1, nr) =
             * V (i1, D) dO^T (D, nr); leading dimension i1 in the buffer. */
            REMAT__CU_TRY(att_gemm(k, CUBLAS_OP_T, CUBLAS_OP_N, i1, nr, D, 1.0f, att_in(&pt, AB_V, r, p0), C3,
                                   att_in(&pt, AB_DO, r, p0), C, 0.0f, att_out(&pt, AB_S, r, p0), i1, np,
                                   "cublasSgemmBatched (attention dP = dO V^T)"));
            /* dS = P * (dP - rowsum(P * dP)) on j <= i, 0 on (i, i1). */
            sm_rows rs = {np * nr, nr, (int)i0, (int)i1, (int)i1};
            REMAT__CU_TRY(sm_backward_rows<true>(k, P + p0 * a.TT + i0 * T, a.TT, (int)T, dS, a.PS, (int)i1, dS, a.PS,
                                                 (int)i1, rs, i1));
            /* dQ[i0:i1] (nr, D) += dS (nr, i1) K[0:i1] / sqrt(D), as
             * dQ^T (D, nr) += K^T (D, i1) dS^T (i1, nr). */
            REMAT__CU_TRY(att_gemm(k, CUBLAS_OP_N, CUBLAS_OP_N, D, nr, i1, a.scale, att_in(&pt, AB_K, r, p0), C3,
                                   att_in(&pt, AB_S, r, p0), i1, 1.0f, att_out(&pt, AB_DQ, r, p0), C3, np,
                                   "cublasSgemmBatched (attention dQ = dS K)"));
            /* dK[0:i1] (i1, D) += dS^T (i1, nr) Q[i0:i1] / sqrt(D), as
             * dK^T (D, i1) += Q^T (D, nr) dS (nr, i1). */
            REMAT__CU_TRY(att_gemm(k, CUBLAS_OP_N, CUBLAS_OP_T, D, i1, nr, a.scale, att_in(&pt, AB_Q, r, p0), C3,
                                   att_in(&pt, AB_S, r, p0), i1, 1.0f, att_out(&pt, AB_DK, r, p0), C3, np,
                                   "cublasSgemmBatched (attention dK = dS^T Q)"));
            /* dV[0:i1] (i1, D) += P[i0:i1, 0:i1]^T dO[i0:i1], as
             * dV^T (D, i1) += dO^T (D, nr) P (nr, i1). */
            REMAT__CU_TRY(att_gemm(k, CUBLAS_OP_N, CUBLAS_OP_T, D, i1, nr, 1.0f, att_in(&pt, AB_DO, r, p0), C,
                                   att_in(&pt, AB_P, r, p0), T, 1.0f, att_out(&pt, AB_DV, r, p0), C3, np,
                                   "cublasSgemmBatched (attention dV = P^T dO)"));
        }
    }
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_attention = {att_forward, att_backward, att_fwd_ws,
                                                             att_bwd_ws,  NULL,         NULL};
