/* k_norm.cu: BatchNorm2d and LayerNorm on the GPU (CPU references:
 * src/ops/batchnorm.c and src/ops/layernorm.c, whose semantics these keep:
 * aux layouts, train vs eval, k->first, accumulation into din).
 *
 * BatchNorm reduces over N*H*W per channel, which for ResNet-50's first
 * stage is 802,816 elements in only 64 channels: one block per channel
 * would leave most of the 132 multiprocessors idle. So every channel is
 * cut into chunks (a run of whole planes, or a piece of one long plane), a
 * block reduces one chunk into double partial sums in the workspace, and
 * the next kernel combines a channel's partials in chunk order before it
 * uses them. That combine is cheap (tens of doubles), so every block of
 * the elementwise kernel repeats it for its own channel instead of paying
 * for a launch, and only chunk 0's block commits what must be written once
 * (aux, running statistics, dgamma and dbeta). Forward training: partials
 * of (x - K) and (x - K)^2 in double, shifted by the channel's first
 * element K so the one-pass variance does not cancel; then y. Backward:
 * partials of dy and dy (x - mean); then dx.
 *
 * LayerNorm normalizes rows of C (768 for GPT-2): one warp per row, the
 * row held in registers when C is a multiple of 4 up to 1024, else read
 * again from the cache per pass. Its parameter gradients are column sums
 * over all rows: blocks of 32 rows write double partial sums per column
 * into the workspace, and a second kernel adds them in row-block order.
 *
 * Every reduction has one order fixed by the shapes (per-thread strides,
 * shuffle trees, chunk order), so results are bitwise the same run to run.
 */
#include "cuda-impl.h"
#include "reduce.cuh"

#include <math.h>

/* V consecutive floats (V = 4: one 16-byte load; p is then 16-byte aligned). */
template <int V> struct fv { float v[V]; };
template <int V> static __device__ __forceinline__ fv<V> ldv(const float *p) {
    fv<V> r;
    if constexpr (V == 4) {
        float4 t = *(const float4 *)p;
        r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
    } else {
        r.v[0] = *p;
    }
    return r;
}
template <int V> static __device__ __forceinline__ void stv(float *p, const fv<V> &r) {
    if constexpr (V == 4) *(float4 *)p = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    else *p = r.v[0];
}

/* =============================================================== BatchNorm */

#define BN_THREADS 256
#define BN_TARGET 4096 /* vectors (of V floats) a block reduces: 16 per thread */
#define BN_UNROLL 4    /* loads in flight per thread */

/* How a channel's N planes of HW floats are cut into chunks, one block
 * each. Vectors are V = 4 floats when HW % 4 == 0 (every plane then starts
 * 16-byte aligned), else single floats. A plane longer than BN_TARGET
 * vectors is cut into `pieces` of L vectors (the last shorter); shorter
 * planes are grouped rpb to a block. */
typedef struct {
    int64_t C, HW, M; /* channels, plane size, elements per channel N*HW */
    int N, HWv;       /* images, vectors per plane */
    int L, pieces;    /* vectors per piece, pieces per plane */
    int rpb;          /* planes per block */
    int nchunk;       /* chunks (blocks) per channel */
} bn_geom;

static int bn_vec(const remat__shape *s) { return (s->d[2] * s->d[3]) % 4 == 0 ? 4 : 1; }

static bn_geom bn_make(const remat__shape *s) {
    bn_geom g;
    g.N = (int)s->d[0], g.C = s->d[1], g.HW = s->d[2] * s->d[3], g.M = (int64_t)g.N * g.HW;
    g.HWv = (int)(g.HW / bn_vec(s));
    if (g.HWv > BN_TARGET) {
        g.pieces = (g.HWv + BN_TARGET - 1) / BN_TARGET;
        g.L = (g.HWv + g.pieces - 1) / g.pieces;
        g.rpb = 1;
    } else {
        g.pieces = 1;
        g.L = g.HWv;
        g.rpb = g.HWv > 0 ? BN_TARGET / g.HWv : 1;
    }
    g.nchunk = (g.N + g.rpb - 1) / g.rpb * g.pieces;
    return g;
}

/* Chunk j of a channel: planes [n0, n0 + rows), vectors [i0, i0 + len) of each. */
typedef struct {
    int n0, rows, i0, len;
} bn_region;

static __device__ __forceinline__ bn_region bn_chunk(const bn_geom &g, int j) {
    bn_region r;
    int rb = j / g.pieces, pc = j - rb * g.pieces;
    r.n0 = rb * g.rpb;
    r.rows = min(g.rpb, g.N - r.n0);
    r.i0 = pc * g.L;
    r.len = min(g.L, g.HWv - r.i0);
    return r;
}

/* Float offset of the region's t-th vector (t < rows * len <= BN_TARGET,
 * row-major) in channel c: a 32-bit division. */
template <int V>
static __device__ __forceinline__ int64_t bn_off(const bn_geom &g, const bn_region &r, int64_t c, int t) {
    int row = t / r.len, col = t - row * r.len;
    return ((int64_t)(r.n0 + row) * g.C + c) * g.HW + (int64_t)(r.i0 + col) * V;
}

/* The loop every BatchNorm kernel runs over its chunk: BN_UNROLL vectors
 * per thread per step, all loads issued before they are used. BODY(u, off)
 * handles the vector at float offset off; LOAD(u, off) issues its loads. */
#define BN_CHUNK_LOOP(g, r, c, V, LOAD, BODY)                                                                          \
    do {                                                                                                               \
        const int total_ = (r).rows * (r).len;                                                                         \
        for (int t0_ = threadIdx.x; t0_ < total_; t0_ += BN_THREADS * BN_UNROLL) {                                     \
            int64_t off_[BN_UNROLL];                                                                                   \
            _Pragma("unroll") for (int u = 0; u < BN_UNROLL; u++) {                                                    \
                int t_ = t0_ + u * BN_THREADS;                                                                         \
                off_[u] = t_ < total_ ? bn_off<V>(g, r, c, t_) : -1;                                                   \
                if (off_[u] >= 0) LOAD(u, off_[u]);                                                                    \
            }                                                                                                          \
            _Pragma("unroll") for (int u = 0; u < BN_UNROLL; u++) if (off_[u] >= 0) BODY(u, off_[u]);                  \
        }                                                                                                              \
    } while (0)

/* Forward partials of chunk j of channel c: sum (x - K) and sum (x - K)^2,
 * K = x[0, c, 0, 0], in double. part: (C, nchunk, 2). */
template <int V>
static __global__ void __launch_bounds__(BN_THREADS)
    bn_stats_kernel(bn_geom g, const float *__restrict__ x, double *__restrict__ part) {
    __shared__ double sh[64];
    const int b = blockIdx.x, c = b / g.nchunk, j = b - c * g.nchunk;
    const bn_region r = bn_chunk(g, j);
    const double K = x[c * g.HW];
    double s1 = 0.0, s2 = 0.0;
    fv<V> xv[BN_UNROLL];
#define LD(u, off) xv[u] = ldv<V>(x + (off))
#define ACC(u, off)                                                                                                    \
    for (int e = 0; e < V; e++) {                                                                                      \
        double d = (double)xv[u].v[e] - K;                                                                             \
        s1 += d, s2 += d * d;                                                                                          \
    }
    BN_CHUNK_LOOP(g, r, c, V, LD, ACC);
#undef LD
#undef ACC
    block_sum2(&s1, &s2, sh);
    if (threadIdx.x == 0) part[2 * (int64_t)b] = s1, part[2 * (int64_t)b + 1] = s2;
}

/* Sums of channel c's partials over its chunks, in chunk order per lane
 * and a shuffle tree across lanes; called by a whole warp. */
static __device__ void bn_combine(const bn_geom &g, const double *__restrict__ part, int64_t c, double *s1,
                                  double *s2) {
    const int lane = threadIdx.x & 31;
    const double *p = part + 2 * c * g.nchunk;
    double a = 0.0, b = 0.0;
    for (int q = lane; q < g.nchunk; q += 32) a += p[2 * q], b += p[2 * q + 1];
    *s1 = warp_sum(a), *s2 = warp_sum(b);
}

enum { BN_EVAL, BN_RECOMPUTE, BN_FIRST };

/* The running statistics' update from a batch's mean and biased variance
 * over M elements per channel: the CPU's commit_channel
 * (src/ops/batchnorm.c) operation for operation, each product, quotient
 * and sum rounded on its own (never contracted into an FMA), so that this
 * kernel's commit and bn_commit's on the host (several ranks: the
 * statistics exported, committed in micro-batch order after the step)
 * give the same bits. */
static __device__ void bn_commit_channel(float *rmean, float *rvar, int64_t c, double mean, double var, double mom,
                                         int64_t M) {
    const double keep = 1.0 - mom;
    rmean[c] = (float)__dadd_rn(__dmul_rn(keep, (double)rmean[c]), __dmul_rn(mom, mean));
    if (M > 1)
        rvar[c] = (float)__dadd_rn(__dmul_rn(keep, (double)rvar[c]),
                                   __ddiv_rn(__dmul_rn(__dmul_rn(mom, var), (double)M), (double)(M - 1)));
}

/* y = (x - mean) * (invstd * gamma) + beta over chunk j of channel c, with
 * mean and invstd the rounded floats of aux. Warp 0 first gets them: from
 * the running statistics (eval), from aux (a recomputation), or from the
 * partials (the first training execution); chunk 0's block writes aux and
 * commits the running statistics as the CPU does, or, in a data-parallel
 * step (stats: kctx.stats, device memory), exports the mean and the biased
 * variance as doubles instead, (2, C), which the step commits later in
 * micro-batch order (bn_commit, the same arithmetic). */
template <int V>
static __global__ void __launch_bounds__(BN_THREADS)
    bn_out_kernel(bn_geom g, int mode, double eps, double mom, const float *__restrict__ x,
                  const float *__restrict__ gamma, const float *__restrict__ beta, float *rmean, float *rvar,
                  float *aux, const double *__restrict__ part, double *stats, float *__restrict__ y) {
    __shared__ float sh_mu, sh_sc, sh_b;
    const int b = blockIdx.x, c = b / g.nchunk, j = b - c * g.nchunk;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float mu, is;
        if (mode == BN_EVAL) {
            mu = rmean[c];
            is = (float)(1.0 / sqrt((double)rvar[c] + eps));
        } else if (mode == BN_RECOMPUTE) {
            mu = aux[c];
            is = aux[g.C + c];
        } else {
            double s1, s2;
            bn_combine(g, part, c, &s1, &s2);
            const double Md = (double)g.M, d = s1 / Md, mean = (double)x[c * g.HW] + d;
            double var = s2 / Md - d * d;
            if (var < 0.0) var = 0.0; /* rounding of the one-pass form; NaN stays */
            mu = (float)mean;
            is = (float)(1.0 / sqrt(var + eps));
            if (j == 0 && lane == 0) {
                if (stats) stats[c] = mean, stats[g.C + c] = var;
                else bn_commit_channel(rmean, rvar, c, mean, var, mom, g.M);
            }
        }
        if (lane == 0) {
            if (j == 0 && mode != BN_RECOMPUTE) aux[c] = mu, aux[g.C + c] = is;
            sh_mu = mu, sh_sc = is * gamma[c], sh_b = beta[c];
        }
    }
    __syncthreads();
    const float mu = sh_mu, sc = sh_sc, bb = sh_b;
    const bn_region r = bn_chunk(g, j);
    fv<V> xv[BN_UNROLL];
#define LD(u, off) xv[u] = ldv<V>(x + (off))
#define OUT(u, off)                                                                                                    \
    {                                                                                                                  \
        for (int e = 0; e < V; e++) xv[u].v[e] = (xv[u].v[e] - mu) * sc + bb;                                          \
        stv<V>(y + (off), xv[u]);                                                                                      \
    }
    BN_CHUNK_LOOP(g, r, c, V, LD, OUT);
#undef LD
#undef OUT
}

/* Backward partials of chunk j of channel c: sum dy and sum dy (x - mean)
 * in double (times invstd later: sum dy xhat). part: (C, nchunk, 2). */
template <int V>
static __global__ void __launch_bounds__(BN_THREADS)
    bn_dsums_kernel(bn_geom g, const float *__restrict__ x, const float *__restrict__ dy, const float *__restrict__ aux,
                    double *__restrict__ part) {
    __shared__ double sh[64];
    const int b = blockIdx.x, c = b / g.nchunk, j = b - c * g.nchunk;
    const bn_region r = bn_chunk(g, j);
    const double mu = aux[c];
    double sy = 0.0, sx = 0.0;
    fv<V> xv[BN_UNROLL], gv[BN_UNROLL];
#define LD(u, off) xv[u] = ldv<V>(x + (off)), gv[u] = ldv<V>(dy + (off))
#define ACC(u, off)                                                                                                    \
    for (int e = 0; e < V; e++) {                                                                                      \
        double d = (double)gv[u].v[e];                                                                                 \
        sy += d, sx += d * ((double)xv[u].v[e] - mu);                                                                  \
    }
    BN_CHUNK_LOOP(g, r, c, V, LD, ACC);
#undef LD
#undef ACC
    block_sum2(&sy, &sx, sh);
    if (threadIdx.x == 0) part[2 * (int64_t)b] = sy, part[2 * (int64_t)b + 1] = sx;
}

/* Backward: warp 0 combines the channel's partials (when sums are needed)
 * and chunk 0's block adds dgamma and dbeta; then, if dx is wanted,
 * dx += a (dy - mean(dy) - xhat mean(dy xhat)) with a = gamma invstd, the
 * means 0 in eval, per element in float as on the CPU. chunks: blocks per
 * channel of this launch (g.nchunk, or 1 when dx is not wanted). */
template <int V>
static __global__ void __launch_bounds__(BN_THREADS)
    bn_dx_kernel(bn_geom g, int chunks, int train, int sums, const float *__restrict__ x, const float *__restrict__ dy,
                 const float *__restrict__ gamma, const float *__restrict__ aux, const double *__restrict__ part,
                 float *dx, float *dgamma, float *dbeta) {
    __shared__ float sh_a, sh_mdy, sh_mdx;
    const int b = blockIdx.x, c = b / chunks, j = b - c * chunks;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const double is = aux[g.C + c];
        double sdy = 0.0, sdx = 0.0;
        if (sums) {
            bn_combine(g, part, c, &sdy, &sdx);
            sdx *= is;
            if (j == 0 && lane == 0) {
                if (dgamma) dgamma[c] += (float)sdx;
                if (dbeta) dbeta[c] += (float)sdy;
            }
        }
        if (lane == 0) {
            sh_a = (float)((double)gamma[c] * is);
            sh_mdy = train ? (float)(sdy / (double)g.M) : 0.0f;
            sh_mdx = train ? (float)(sdx / (double)g.M) : 0.0f;
        }
    }
    if (!dx) return;
    __syncthreads();
    const float a = sh_a, mdy = sh_mdy, mdx = sh_mdx, muf = aux[c], isf = aux[g.C + c];
    const bn_region r = bn_chunk(g, j);
    fv<V> xv[BN_UNROLL], gv[BN_UNROLL], dv[BN_UNROLL];
#define LD(u, off) xv[u] = ldv<V>(x + (off)), gv[u] = ldv<V>(dy + (off)), dv[u] = ldv<V>(dx + (off))
#define OUT(u, off)                                                                                                    \
    {                                                                                                                  \
        for (int e = 0; e < V; e++) {                                                                                  \
            float xhat = (xv[u].v[e] - muf) * isf;                                                                     \
            dv[u].v[e] += a * (gv[u].v[e] - mdy - xhat * mdx);                                                         \
        }                                                                                                              \
        stv<V>(dx + (off), dv[u]);                                                                                     \
    }
    BN_CHUNK_LOOP(g, r, c, V, LD, OUT);
#undef LD
#undef OUT
}

/* Partial sums: (C, nchunk, 2) doubles, for the forward (training) and the
 * backward alike. */
static size_t bn_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    const remat__shape *s = remat__in_shape(g, n, 0);
    if (remat__numel(s) == 0) return 0;
    bn_geom G = bn_make(s);
    return (size_t)G.C * (size_t)G.nchunk * 2 * sizeof(double);
}

static remat_status bn_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__shape *s = k->in[0]->shape;
    if (remat__numel(s) == 0) return REMAT_OK;
    const bn_geom g = bn_make(s);
    const float *x = (const float *)k->in[0]->data;     // (N, C, H, W)
    const float *gamma = (const float *)k->in[1]->data; // (C)
    const float *beta = (const float *)k->in[2]->data;  // (C)
    float *rmean = (float *)k->in[3]->data;             // (C), updated in place
    float *rvar = (float *)k->in[4]->data;              // (C), updated in place
    float *y = (float *)k->out->data;                   // (N, C, H, W)
    double *part = (double *)k->ws;                     // (C, nchunk, 2)
    const double eps = k->node->fattr[0], mom = k->node->fattr[1];
    const int mode = !k->train ? BN_EVAL : k->first ? BN_FIRST : BN_RECOMPUTE;
    const unsigned blocks = (unsigned)(g.C * g.nchunk);
    const bool v4 = bn_vec(s) == 4;
    double *stats = mode == BN_FIRST ? k->stats : NULL; /* (2, C) device: exported, not committed */
    if (mode == BN_FIRST) {
        if (v4) bn_stats_kernel<4><<<blocks, BN_THREADS, 0, cu->stream>>>(g, x, part);
        else bn_stats_kernel<1><<<blocks, BN_THREADS, 0, cu->stream>>>(g, x, part);
        REMAT__CU_TRY(remat__cu_launched(k, "bn_stats_kernel"));
    }
    if (v4)
        bn_out_kernel<4><<<blocks, BN_THREADS, 0, cu->stream>>>(g, mode, eps, mom, x, gamma, beta, rmean, rvar, k->aux,
                                                                part, stats, y);
    else
        bn_out_kernel<1><<<blocks, BN_THREADS, 0, cu->stream>>>(g, mode, eps, mom, x, gamma, beta, rmean, rvar, k->aux,
                                                                part, stats, y);
    REMAT__CU_TRY(remat__cu_launched(k, "bn_out_kernel"));
    return REMAT_OK;
}

static remat_status bn_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__shape *s = k->in[0]->shape;
    float *dx = k->din[0], *dgamma = k->din[1], *dbeta = k->din[2]; // (N, C, H, W), (C), (C)
    if ((!dx && !dgamma && !dbeta) || remat__numel(s) == 0) return REMAT_OK;
    const bn_geom g = bn_make(s);
    const float *x = (const float *)k->in[0]->data;     // (N, C, H, W), saved
    const float *gamma = (const float *)k->in[1]->data; // (C), saved
    const float *dy = k->dout;                          // (N, C, H, W)
    const float *aux = k->aux;                          // mean (C), invstd (C)
    double *part = (double *)k->ws;                     // (C, nchunk, 2)
    const bool v4 = bn_vec(s) == 4;
    /* eval's dx needs no sums */
    const int sums = dgamma || dbeta || k->train;
    if (sums) {
        const unsigned blocks = (unsigned)(g.C * g.nchunk);
        if (v4) bn_dsums_kernel<4><<<blocks, BN_THREADS, 0, cu->stream>>>(g, x, dy, aux, part);
        else bn_dsums_kernel<1><<<blocks, BN_THREADS, 0, cu->stream>>>(g, x, dy, aux, part);
        REMAT__CU_TRY(remat__cu_launched(k, "bn_dsums_kernel"));
    }
    const int chunks = dx ? g.nchunk : 1;
    const unsigned blocks = (unsigned)(g.C * chunks);
    if (v4)
        bn_dx_kernel<4><<<blocks, BN_THREADS, 0, cu->stream>>>(g, chunks, k->train, sums, x, dy, gamma, aux, part, dx,
                                                               dgamma, dbeta);
    else
        bn_dx_kernel<1><<<blocks, BN_THREADS, 0, cu->stream>>>(g, chunks, k->train, sums, x, dy, gamma, aux, part, dx,
                                                               dgamma, dbeta);
    REMAT__CU_TRY(remat__cu_launched(k, "bn_dx_kernel"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_batchnorm2d = {bn_forward, bn_backward, bn_ws, bn_ws, NULL, NULL};

/* =============================================================== LayerNorm */

#define LN_THREADS 256 /* 8 rows (warps) per block */
#define LN_MAXV 8      /* rows in registers up to 32 * 8 float4 = 1024 columns */
#define LN_RB 32       /* rows per block of the parameter-gradient partials */
#define LN_PT 128      /* columns (threads) per block of those partials */

static __device__ __forceinline__ float f4(const float4 &v, int e) {
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

/* Forward with row r held in registers: lane holds float4s q = lane + 32 j,
 * j < NV, of the C/4 (C % 4 == 0, C/4 <= 32 NV). Statistics in double. */
template <int NV>
static __global__ void __launch_bounds__(LN_THREADS)
    ln_fwd_reg(int64_t R, int C, double eps, const float *__restrict__ x, const float *__restrict__ w,
               const float *__restrict__ bias, float *__restrict__ y, float *__restrict__ aux) {
    const int lane = threadIdx.x & 31, C4 = C >> 2;
    const int64_t r = (int64_t)blockIdx.x * (LN_THREADS / 32) + (threadIdx.x >> 5);
    if (r >= R) return; /* whole warps leave together */
    const float *xr = x + r * C;
    float4 v[NV];
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int q = lane + 32 * j;
        v[j] = q < C4 ? ld4(xr, q) : make_float4(0.f, 0.f, 0.f, 0.f);
        if (q < C4) s += ((double)v[j].x + (double)v[j].y) + ((double)v[j].z + (double)v[j].w);
    }
    const double mu = warp_sum(s) / (double)C;
    double qs = 0.0;
#pragma unroll
    for (int j = 0; j < NV; j++)
        if (lane + 32 * j < C4)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                double d = (double)f4(v[j], e) - mu;
                qs += d * d;
            }
    const float m = (float)mu, rs = (float)(1.0 / sqrt(warp_sum(qs) / (double)C + eps));
    if (lane == 0) aux[r] = m, aux[R + r] = rs;
    float *yr = y + r * C;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int q = lane + 32 * j;
        if (q >= C4) continue;
        const float4 wv = ld4(w, q), bv = ld4(bias, q);
        float4 o;
        o.x = (v[j].x - m) * rs * wv.x + bv.x;
        o.y = (v[j].y - m) * rs * wv.y + bv.y;
        o.z = (v[j].z - m) * rs * wv.z + bv.z;
        o.w = (v[j].w - m) * rs * wv.w + bv.w;
        *(float4 *)(yr + 4 * q) = o;
    }
}

/* Forward for any C: one warp per row, three passes over the row (the
 * later ones from the cache). */
static __global__ void __launch_bounds__(LN_THREADS)
    ln_fwd_any(int64_t R, int C, double eps, const float *__restrict__ x, const float *__restrict__ w,
               const float *__restrict__ bias, float *__restrict__ y, float *__restrict__ aux) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (LN_THREADS / 32) + (threadIdx.x >> 5);
    if (r >= R) return;
    const float *xr = x + r * C;
    double s = 0.0;
    for (int c = lane; c < C; c += 32) s += (double)xr[c];
    const double mu = warp_sum(s) / (double)C;
    double qs = 0.0;
    for (int c = lane; c < C; c += 32) {
        double d = (double)xr[c] - mu;
        qs += d * d;
    }
    const float m = (float)mu, rs = (float)(1.0 / sqrt(warp_sum(qs) / (double)C + eps));
    if (lane == 0) aux[r] = m, aux[R + r] = rs;
    float *yr = y + r * C;
    for (int c = lane; c < C; c += 32) yr[c] = (xr[c] - m) * rs * w[c] + bias[c];
}

/* dx += rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, in double as on
 * the CPU; x and dy of row r in registers (as ln_fwd_reg), the weight read
 * from the cache in each pass (holding it too costs occupancy). */
template <int NV> /* two blocks per SM where that costs no spills */
static __global__ void __launch_bounds__(LN_THREADS, NV <= 6 ? 2 : 1)
    ln_dx_reg(int64_t R, int C, const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ dy,
              const float *__restrict__ aux, float *__restrict__ dx) {
    const int lane = threadIdx.x & 31, C4 = C >> 2;
    const int64_t r = (int64_t)blockIdx.x * (LN_THREADS / 32) + (threadIdx.x >> 5);
    if (r >= R) return;
    const float *xr = x + r * C, *dyr = dy + r * C;
    const double mu = aux[r], rs = aux[R + r];
    float4 xv[NV], gv[NV];
    double sg = 0.0, sgx = 0.0;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int q = lane + 32 * j;
        if (q < C4) xv[j] = ld4(xr, q), gv[j] = ld4(dyr, q);
    }
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int q = lane + 32 * j;
        if (q >= C4) continue;
        const float4 wv = ld4(w, q);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            double gc = (double)f4(gv[j], e) * (double)f4(wv, e);
            sg += gc, sgx += gc * (((double)f4(xv[j], e) - mu) * rs);
        }
    }
    sg = warp_sum(sg) / (double)C, sgx = warp_sum(sgx) / (double)C;
    float *dxr = dx + r * C;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int q = lane + 32 * j;
        if (q >= C4) continue;
        const float4 wv = ld4(w, q);
        float4 d = ld4(dxr, q);
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            double xhat = ((double)f4(xv[j], e) - mu) * rs;
            o[e] = (float)(rs * ((double)f4(gv[j], e) * (double)f4(wv, e) - sg - xhat * sgx));
        }
        d.x += o[0], d.y += o[1], d.z += o[2], d.w += o[3];
        *(float4 *)(dxr + 4 * q) = d;
    }
}

/* The same for any C, reading the row again from the cache. */
static __global__ void __launch_bounds__(LN_THREADS)
    ln_dx_any(int64_t R, int C, const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ dy,
              const float *__restrict__ aux, float *__restrict__ dx) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (LN_THREADS / 32) + (threadIdx.x >> 5);
    if (r >= R) return;
    const float *xr = x + r * C, *dyr = dy + r * C;
    const double mu = aux[r], rs = aux[R + r];
    double sg = 0.0, sgx = 0.0;
    for (int c = lane; c < C; c += 32) {
        double gc = (double)dyr[c] * (double)w[c];
        sg += gc, sgx += gc * (((double)xr[c] - mu) * rs);
    }
    sg = warp_sum(sg) / (double)C, sgx = warp_sum(sgx) / (double)C;
    float *dxr = dx + r * C;
    for (int c = lane; c < C; c += 32) {
        double xhat = ((double)xr[c] - mu) * rs;
        dxr[c] += (float)(rs * ((double)dyr[c] * (double)w[c] - sg - xhat * sgx));
    }
}

/* Column partials of the parameter gradients over rows [p LN_RB, (p+1)
 * LN_RB), in row order: part[p][c] = sum dy xhat, part[p][C + c] = sum dy.
 * Grid (P, ceil(C / LN_PT)); adjacent threads read adjacent columns. */
static __global__ void __launch_bounds__(LN_PT)
    ln_param_part(int64_t R, int C, const float *__restrict__ x, const float *__restrict__ dy,
                  const float *__restrict__ aux, double *__restrict__ part) {
    const int c = blockIdx.y * LN_PT + threadIdx.x;
    const int64_t p = blockIdx.x, r0 = p * LN_RB, r1 = r0 + LN_RB < R ? r0 + LN_RB : R;
    if (c >= C) return;
    double sw = 0.0, sb = 0.0;
#pragma unroll 8
    for (int64_t r = r0; r < r1; r++) {
        const double mu = aux[r], rs = aux[R + r];
        const float d = dy[r * C + c], xv = x[r * C + c];
        sw += (double)d * (((double)xv - mu) * rs);
        sb += (double)d;
    }
    part[p * 2 * C + c] = sw;
    part[p * 2 * C + C + c] = sb;
}

/* dweight += sum_p part[p][c], dbias += sum_p part[p][C + c]: a block of
 * 32 columns x 8 strides over the P row blocks, combined in stride order. */
static __global__ void __launch_bounds__(256)
    ln_param_sum(int C, int64_t P, const double *__restrict__ part, float *dw, float *db) {
    __shared__ double sh[8][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int64_t col = (int64_t)blockIdx.x * 32 + tx;
    double s = 0.0;
    if (col < 2 * (int64_t)C)
        for (int64_t p = ty; p < P; p += 8) s += part[p * 2 * C + col];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty != 0 || col >= 2 * (int64_t)C) return;
    for (int i = 1; i < 8; i++) s += sh[i][tx];
    if (col < C) {
        if (dw) dw[col] += (float)s;
    } else if (db) {
        db[col - C] += (float)s;
    }
}

static int64_t ln_cols(const remat__shape *s) { return s->ndim > 0 ? s->d[s->ndim - 1] : 1; }

/* Rows in registers: the smallest NV that holds C/4 float4s over a warp,
 * or 0 when the generic kernels must run. */
static int ln_nv(int64_t C) {
    if (C % 4 != 0 || C / 4 > 32 * LN_MAXV) return 0;
    return (int)((C / 4 + 31) / 32);
}

/* Backward workspace: the column partials, (P = ceil(R / LN_RB), 2C) doubles. */
static size_t ln_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev;
    const remat__shape *s = remat__in_shape(g, n, 0);
    int64_t C = ln_cols(s), R = C > 0 ? remat__numel(s) / C : 0;
    return (size_t)((R + LN_RB - 1) / LN_RB) * 2 * (size_t)C * sizeof(double);
}

static remat_status ln_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__shape *s = k->in[0]->shape;
    const int64_t C = ln_cols(s), R = C > 0 ? remat__numel(s) / C : 0;
    if (R == 0) return REMAT_OK;
    const float *x = (const float *)k->in[0]->data; // (R, C)
    const float *w = (const float *)k->in[1]->data; // (C)
    const float *b = (const float *)k->in[2]->data; // (C)
    float *y = (float *)k->out->data;               // (R, C)
    float *aux = k->aux;                            // mean (R), rstd (R)
    const double eps = k->node->fattr[0];
    const unsigned blocks = (unsigned)((R + LN_THREADS / 32 - 1) / (LN_THREADS / 32));
    const int Ci = (int)C;
    switch (ln_nv(C)) {
#define LN_FWD_CASE(NV)                                                                                                \
    case NV: ln_fwd_reg<NV><<<blocks, LN_THREADS, 0, cu->stream>>>(R, Ci, eps, x, w, b, y, aux); break;
        // clang-format off
        LN_FWD_CASE(1) LN_FWD_CASE(2) LN_FWD_CASE(3) LN_FWD_CASE(4)
        LN_FWD_CASE(5) LN_FWD_CASE(6) LN_FWD_CASE(7) LN_FWD_CASE(8)
// clang-format on
#undef LN_FWD_CASE
            default : ln_fwd_any<<<blocks, LN_THREADS, 0, cu->stream>>>(R, Ci, eps, x, w, b, y, aux);
    }
    REMAT__CU_TRY(remat__cu_launched(k, "ln_forward"));
    return REMAT_OK;
}

static remat_status ln_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__shape *s = k->in[0]->shape;
    const int64_t C = ln_cols(s), R = C > 0 ? remat__numel(s) / C : 0;
    float *dx = k->din[0], *dw = k->din[1], *db = k->din[2]; // (R, C), (C), (C)
    if (R == 0 || (!dx && !dw && !db)) return REMAT_OK;
    const float *x = (const float *)k->in[0]->data; // (R, C), saved
    const float *w = (const float *)k->in[1]->data; // (C), saved
    const float *dy = k->dout;                      // (R, C)
    const float *aux = k->aux;                      // mean (R), rstd (R)
    const int Ci = (int)C;
    if (dx) {
        const unsigned blocks = (unsigned)((R + LN_THREADS / 32 - 1) / (LN_THREADS / 32));
        switch (ln_nv(C)) {
#define LN_DX_CASE(NV)                                                                                                 \
    case NV: ln_dx_reg<NV><<<blocks, LN_THREADS, 0, cu->stream>>>(R, Ci, x, w, dy, aux, dx); break;
            // clang-format off
            LN_DX_CASE(1) LN_DX_CASE(2) LN_DX_CASE(3) LN_DX_CASE(4)
            LN_DX_CASE(5) LN_DX_CASE(6) LN_DX_CASE(7) LN_DX_CASE(8)
// clang-format on
#undef LN_DX_CASE
                default : ln_dx_any<<<blocks, LN_THREADS, 0, cu->stream>>>(R, Ci, x, w, dy, aux, dx);
        }
        REMAT__CU_TRY(remat__cu_launched(k, "ln_dx"));
    }
    if (!dw && !db) return REMAT_OK;
    double *part = (double *)k->ws; // (P, 2C)
    const int64_t P = (R + LN_RB - 1) / LN_RB;
    dim3 grid((unsigned)P, (unsigned)((C + LN_PT - 1) / LN_PT));
    ln_param_part<<<grid, LN_PT, 0, cu->stream>>>(R, Ci, x, dy, aux, part);
    REMAT__CU_TRY(remat__cu_launched(k, "ln_param_part"));
    ln_param_sum<<<(unsigned)((2 * C + 31) / 32), 256, 0, cu->stream>>>(Ci, P, part, dw, db);
    REMAT__CU_TRY(remat__cu_launched(k, "ln_param_sum"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_layernorm = {ln_forward, ln_backward, NULL, ln_bwd_ws, NULL, NULL};
