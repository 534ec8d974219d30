/* k_pool.cu: max pooling, average pooling (count_include_pad) and global
 * average pooling on the GPU (CPU reference: src/ops/pool.c, whose window
 * geometry, tie rule and summation orders these keep).
 *
 * Forwards run one thread per output. Backwards are gathers, one thread
 * per input element: it visits the windows that contain it in output
 * order (row, then column) and adds their contributions to its own
 * gradient, so overlapping windows (ResNet's 3x3 stride 2) need no atomics
 * and every element receives its terms in the CPU's order, which makes
 * the results bitwise the CPU's. Max pooling's backward saves only the
 * input: a first pass writes each window's argmax as a byte (its position
 * kh k + kw) into the workspace, which the gather compares with its own
 * position in each window; windows over 256 elements have no byte
 * positions and are recomputed there. For ResNet-50's 3x3 stride-2 pool at
 * batch 64 on an H100 both passes take 0.36 ms, where recomputing every
 * visited window's argmax in the gather took 1.48 ms. An element that is
 * no window's argmax leaves its gradient untouched.
 *
 * Indices are 32-bit when the tensor allows it, and their divisions by the
 * plane's sizes and the stride are then multiplications (divider), 64-bit
 * otherwise: the gathers are bound by instructions more than by memory,
 * and a 32-bit division is some 20 of them.
 */
#include "cuda-impl.h"
#include "reduce.cuh"

#include <math.h>

/* Division of n < 2^31 by a fixed d >= 1 (d < 2^31) as a multiply-high,
 * an add and a shift (Granlund and Montgomery, PLDI'94, as in PyTorch's
 * IntDivider): q = (umulhi(n, m) + n) >> sh with 2^sh >= d and
 * m = floor(2^32 (2^sh - d) / d) + 1. */
typedef struct {
    uint32_t d, m, sh;
} divider;

static divider make_divider(int64_t d) {
    divider f;
    f.d = (uint32_t)d, f.sh = 0;
    while ((1ull << f.sh) < (uint64_t)d) f.sh++;
    f.m = (uint32_t)((((1ull << 32) * ((1ull << f.sh) - (uint64_t)d)) / (uint64_t)d) + 1);
    return f;
}

static __device__ __forceinline__ uint32_t dquot(const divider &f, uint32_t n) {
    return (__umulhi(n, f.m) + n) >> f.sh;
}

/* n / f.d for an index of type I: divider's for 32-bit indices (launched only
 * below 2^31), a division for 64-bit ones. */
template <typename I> static __device__ __forceinline__ I quot(I n, const divider &f) {
    if constexpr (sizeof(I) == 4) return dquot(f, n);
    else return n / f.d;
}

/* Window geometry of a pool: planes of H x W in, OH x OW out, and the
 * divisors by W, H, OW, OH and the stride. */
typedef struct {
    int H, W, OH, OW, k, s, p;
    divider dW, dH, dOW, dOH, ds;
} pgeom;

static pgeom make_pgeom(const remat__shape *x, const remat__node *n) {
    pgeom G;
    G.H = (int)x->d[2], G.W = (int)x->d[3];
    G.k = (int)n->iattr[0], G.s = (int)n->iattr[1], G.p = (int)n->iattr[2];
    G.OH = (G.H + 2 * G.p - G.k) / G.s + 1;
    G.OW = (G.W + 2 * G.p - G.k) / G.s + 1;
    G.dW = make_divider(G.W), G.dH = make_divider(G.H), G.dOW = make_divider(G.OW), G.dOH = make_divider(G.OH);
    G.ds = make_divider(G.s);
    return G;
}

/* The output rows (or columns) whose windows contain input row i of n
 * outputs: [*lo, *hi]; empty when *lo > *hi. Window o covers [o s - p,
 * o s - p + k). */
static __device__ __forceinline__ void covering(const pgeom &G, int i, int n, int *lo, int *hi) {
    const int a = i + G.p - G.k + 1;
    *lo = a <= 0 ? 0 : (int)dquot(G.ds, (uint32_t)(a + G.s - 1));
    const int b = (int)dquot(G.ds, (uint32_t)(i + G.p));
    *hi = b < n - 1 ? b : n - 1;
}

/* Position kh k + kw, from the window's unclipped origin (oh s - p, ow s -
 * p), of the maximum of window (oh, ow), chosen as the CPU does (pool.c,
 * after PyTorch's CPU kernel): the running maximum starts at -inf with the
 * first in-bounds element's position, and a later element replaces it only
 * if strictly greater or NaN. *val receives the maximum. */
static __device__ __forceinline__ int window_argmax(const pgeom &G, const float *__restrict__ xp, int oh, int ow,
                                                    float *val) {
    const int a = oh * G.s - G.p, b = ow * G.s - G.p;
    const int h0 = max(a, 0), w0 = max(b, 0), h1 = min(a + G.k, G.H), w1 = min(b + G.k, G.W);
    int best = (h0 - a) * G.k + (w0 - b);
    float m = -INFINITY;
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            const float v = xp[ih * G.W + iw];
            if (v > m || v != v) m = v, best = (ih - a) * G.k + (iw - b);
        }
    *val = m;
    return best;
}

/* PyTorch's divisor for window (oh, ow) with count_include_pad: its size
 * clipped to the padded input; [*h0, *h1) x [*w0, *w1) its in-bounds part. */
static __device__ __forceinline__ int avg_window(const pgeom &G, int oh, int ow, int *h0, int *h1, int *w0, int *w1) {
    const int a = oh * G.s - G.p, b = ow * G.s - G.p;
    const int c = min(a + G.k, G.H + G.p), d = min(b + G.k, G.W + G.p);
    *h0 = max(a, 0), *w0 = max(b, 0);
    *h1 = min(c, G.H), *w1 = min(d, G.W);
    return (c - a) * (d - b);
}

/* ------------------------------------------------------------- max pool */

template <typename I>
static __global__ void maxpool_fwd(pgeom G, I total, const float *__restrict__ x, float *__restrict__ y) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I t = quot(i, G.dOW), pl = quot(t, G.dOH);
        const int ow = (int)(i - t * (I)G.OW), oh = (int)(t - pl * (I)G.OH);
        float m;
        window_argmax(G, x + pl * (I)G.H * (I)G.W, oh, ow, &m);
        y[i] = m;
    }
}

/* The backward's first pass: each output's argmax position, one byte
 * (used when k*k <= 256). pos: (N, C, OH, OW). */
template <typename I>
static __global__ void maxpool_argpos(pgeom G, I total, const float *__restrict__ x, uint8_t *__restrict__ pos) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I t = quot(i, G.dOW), pl = quot(t, G.dOH);
        const int ow = (int)(i - t * (I)G.OW), oh = (int)(t - pl * (I)G.OH);
        float m;
        pos[i] = (uint8_t)window_argmax(G, x + pl * (I)G.H * (I)G.W, oh, ow, &m);
    }
}

/* dx[i] += dy of every window whose argmax is i, in output order. The
 * argmax positions come from maxpool_argpos (pos != NULL) or are
 * recomputed from x (windows over 256 elements). CM = ceil(k / s) > 0, the
 * most windows covering an element per dimension, unrolls the visit so
 * that all its loads (dx, positions, dy) are in flight at once (it needs
 * pos); 0 loops. dx is read unconditionally: its sectors are fetched
 * anyway, and the gather no longer waits for the positions to know. */
template <typename I, int CM>
static __global__ void maxpool_bwd(pgeom G, I total, const float *__restrict__ x, const uint8_t *__restrict__ pos,
                                   const float *__restrict__ dy, float *__restrict__ dx) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I t = quot(i, G.dW), pl = quot(t, G.dH);
        const int iw = (int)(i - t * (I)G.W), ih = (int)(t - pl * (I)G.H);
        const I o = pl * (I)G.OH * (I)G.OW; /* the plane's first output */
        int oh0, oh1, ow0, ow1;
        covering(G, ih, G.OH, &oh0, &oh1);
        covering(G, iw, G.OW, &ow0, &ow1);
        bool hit = false;
        float acc = 0.0f;
        if constexpr (CM > 0) {
            int bp[CM * CM];
            float g[CM * CM];
            acc = dx[i];
#pragma unroll
            for (int a = 0; a < CM; a++)
#pragma unroll
                for (int b = 0; b < CM; b++) {
                    const bool v = oh0 + a <= oh1 && ow0 + b <= ow1;
                    const I q = o + (I)((oh0 + a) * G.OW + ow0 + b);
                    bp[a * CM + b] = v ? (int)pos[q] : -1;
                    g[a * CM + b] = v ? dy[q] : 0.0f;
                }
#pragma unroll
            for (int a = 0; a < CM; a++)
#pragma unroll
                for (int b = 0; b < CM; b++) {
                    const int self = (ih - ((oh0 + a) * G.s - G.p)) * G.k + iw - ((ow0 + b) * G.s - G.p);
                    if (bp[a * CM + b] == self) acc += g[a * CM + b], hit = true;
                }
        } else {
            for (int oh = oh0; oh <= oh1; oh++)
                for (int ow = ow0; ow <= ow1; ow++) {
                    const int self = (ih - (oh * G.s - G.p)) * G.k + iw - (ow * G.s - G.p);
                    float m;
                    const int best =
                        pos ? pos[o + oh * G.OW + ow] : window_argmax(G, x + pl * (I)G.H * (I)G.W, oh, ow, &m);
                    if (best != self) continue;
                    if (!hit) acc = dx[i], hit = true;
                    acc += dy[o + oh * G.OW + ow];
                }
        }
        if (hit) dx[i] = acc;
    }
}

/* ------------------------------------------------------------- avg pool */

/* The window's in-bounds sum in float, row-major as on the CPU, / divisor. */
template <typename I>
static __global__ void avgpool_fwd(pgeom G, I total, const float *__restrict__ x, float *__restrict__ y) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I t = quot(i, G.dOW), pl = quot(t, G.dOH);
        const int ow = (int)(i - t * (I)G.OW), oh = (int)(t - pl * (I)G.OH);
        const float *xp = x + pl * (I)G.H * (I)G.W;
        int h0, h1, w0, w1;
        const int div = avg_window(G, oh, ow, &h0, &h1, &w0, &w1);
        float s = 0.0f;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) s += xp[ih * G.W + iw];
        y[i] = s / (float)div;
    }
}

/* dx[i] += dy / divisor of every window containing i, in output order;
 * CM as in maxpool_bwd. */
template <typename I, int CM>
static __global__ void avgpool_bwd(pgeom G, I total, const float *__restrict__ dy, float *__restrict__ dx) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I t = quot(i, G.dW), pl = quot(t, G.dH);
        const int iw = (int)(i - t * (I)G.W), ih = (int)(t - pl * (I)G.H);
        const float *dyp = dy + pl * (I)G.OH * (I)G.OW; // (OH, OW)
        int oh0, oh1, ow0, ow1, h0, h1, w0, w1;
        covering(G, ih, G.OH, &oh0, &oh1);
        covering(G, iw, G.OW, &ow0, &ow1);
        if (oh0 > oh1 || ow0 > ow1) continue; /* stride > kernel: in no window */
        float acc = dx[i];
        if constexpr (CM > 0) {
            float g[CM * CM];
#pragma unroll
            for (int a = 0; a < CM; a++)
#pragma unroll
                for (int b = 0; b < CM; b++) {
                    const bool v = oh0 + a <= oh1 && ow0 + b <= ow1;
                    g[a * CM + b] = v ? dyp[(oh0 + a) * G.OW + ow0 + b] : 0.0f;
                }
#pragma unroll
            for (int a = 0; a < CM; a++)
#pragma unroll
                for (int b = 0; b < CM; b++)
                    if (oh0 + a <= oh1 && ow0 + b <= ow1)
                        acc += g[a * CM + b] / (float)avg_window(G, oh0 + a, ow0 + b, &h0, &h1, &w0, &w1);
        } else {
            for (int oh = oh0; oh <= oh1; oh++)
                for (int ow = ow0; ow <= ow1; ow++)
                    acc += dyp[oh * G.OW + ow] / (float)avg_window(G, oh, ow, &h0, &h1, &w0, &w1);
        }
        dx[i] = acc;
    }
}

/* ------------------------------------------------------ global avg pool */

#define GAP_THREADS 256

/* One warp per plane: a double sum per lane in index order, a shuffle tree
 * across lanes, y = sum / hw. */
static __global__ void __launch_bounds__(GAP_THREADS)
    gap_fwd(int64_t planes, int64_t hw, const float *__restrict__ x, float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t pl = (int64_t)blockIdx.x * (GAP_THREADS / 32) + (threadIdx.x >> 5);
    if (pl >= planes) return;
    const float *xp = x + pl * hw;
    double s = 0.0;
    for (int64_t i = lane; i < hw; i += 32) s += (double)xp[i];
    s = warp_sum(s);
    if (lane == 0) y[pl] = (float)(s / (double)hw);
}

/* dx += dy[plane] / hw, as the CPU rounds it. */
template <typename I>
static __global__ void gap_bwd(I total, divider dhw, const float *__restrict__ dy, float *__restrict__ dx) {
    const float fhw = (float)dhw.d;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x)
        dx[i] += dy[quot(i, dhw)] / fhw;
}

/* --------------------------------------------------------------- entries */

/* Launches KERNEL<I> over `total` elements with I = unsigned 32-bit when
 * every index stays below 2^31 (divider's range), else 64-bit; POOL_LAUNCH_CM launches KERNEL<I, CM> for the
 * windows' CM = ceil(k / s) when it is at most 3, else KERNEL<I, 0>. */
#define POOL_LAUNCH_T(cu, total, KERNEL, CM, ...)                                                                      \
    do {                                                                                                               \
        const unsigned blocks_ = remat__cu_blocks(cu, (int64_t)(total));                                               \
        if ((uint64_t)(total) <= 0x7fffffffull - (uint64_t)blocks_ * REMAT__CU_THREADS)                                \
            KERNEL<unsigned CM><<<blocks_, REMAT__CU_THREADS, 0, (cu)->stream>>>(__VA_ARGS__);                         \
        else KERNEL<unsigned long long CM><<<blocks_, REMAT__CU_THREADS, 0, (cu)->stream>>>(__VA_ARGS__);              \
    } while (0)
#define POOL_LAUNCH(cu, total, KERNEL, ...) POOL_LAUNCH_T(cu, total, KERNEL, , __VA_ARGS__)
#define POOL_LAUNCH_CM(cu, total, cm, KERNEL, ...)                                                                     \
    do {                                                                                                               \
        switch (cm) {                                                                                                  \
        case 1: POOL_LAUNCH_T(cu, total, KERNEL, COMMA 1, __VA_ARGS__); break;                                         \
        case 2: POOL_LAUNCH_T(cu, total, KERNEL, COMMA 2, __VA_ARGS__); break;                                         \
        case 3: POOL_LAUNCH_T(cu, total, KERNEL, COMMA 3, __VA_ARGS__); break;                                         \
        default: POOL_LAUNCH_T(cu, total, KERNEL, COMMA 0, __VA_ARGS__);                                               \
        }                                                                                                              \
    } while (0)
#define COMMA ,

/* Windows covering an element, per dimension, at most. */
static int pool_cm(const pgeom &G) { return (G.k + G.s - 1) / G.s; }

static remat_status maxpool_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W)
    float *y = (float *)k->out->data;               // (N, C, OH, OW)
    const int64_t total = remat__numel(k->out->shape);
    if (total == 0) return REMAT_OK;
    POOL_LAUNCH(cu, total, maxpool_fwd, G, total, x, y);
    REMAT__CU_TRY(remat__cu_launched(k, "maxpool_fwd"));
    return REMAT_OK;
}

/* Backward workspace: a byte per output for the argmax positions, when
 * they fit one (k*k <= 256); else none, and the gather recomputes them. */
static bool maxpool_bytepos(const remat__node *n) { return n->iattr[0] * n->iattr[0] <= 256; }

static size_t maxpool_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    (void)dev, (void)g;
    return maxpool_bytepos(n) ? (size_t)remat__numel(&n->shape) : 0;
}

static remat_status maxpool_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    float *dx = k->din[0]; // (N, C, H, W)
    if (!dx) return REMAT_OK;
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W), saved
    const float *dy = k->dout;                      // (N, C, OH, OW)
    uint8_t *pos = NULL;                            // (N, C, OH, OW)
    const int64_t total = remat__numel(k->in[0]->shape), outs = remat__numel(k->out->shape);
    if (total == 0) return REMAT_OK;
    if (maxpool_bytepos(k->node)) {
        pos = (uint8_t *)k->ws;
        POOL_LAUNCH(cu, outs, maxpool_argpos, G, outs, x, pos);
        REMAT__CU_TRY(remat__cu_launched(k, "maxpool_argpos"));
    }
    POOL_LAUNCH_CM(cu, total, pos ? pool_cm(G) : 0, maxpool_bwd, G, total, x, pos, dy, dx);
    REMAT__CU_TRY(remat__cu_launched(k, "maxpool_bwd"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_maxpool2d = {
    maxpool_forward, maxpool_backward, NULL, maxpool_bwd_ws, NULL, NULL};

static remat_status avgpool_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W)
    float *y = (float *)k->out->data;               // (N, C, OH, OW)
    const int64_t total = remat__numel(k->out->shape);
    if (total == 0) return REMAT_OK;
    POOL_LAUNCH(cu, total, avgpool_fwd, G, total, x, y);
    REMAT__CU_TRY(remat__cu_launched(k, "avgpool_fwd"));
    return REMAT_OK;
}

static remat_status avgpool_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    float *dx = k->din[0]; // (N, C, H, W)
    if (!dx) return REMAT_OK;
    const pgeom G = make_pgeom(k->in[0]->shape, k->node);
    const float *dy = k->dout; // (N, C, OH, OW)
    const int64_t total = remat__numel(k->in[0]->shape);
    if (total == 0) return REMAT_OK;
    POOL_LAUNCH_CM(cu, total, pool_cm(G), avgpool_bwd, G, total, dy, dx);
    REMAT__CU_TRY(remat__cu_launched(k, "avgpool_bwd"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_avgpool2d = {avgpool_forward, avgpool_backward, NULL, NULL, NULL, NULL};

static remat_status gap_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const remat__shape *s = k->in[0]->shape;
    const float *x = (const float *)k->in[0]->data; // (N, C, H, W)
    float *y = (float *)k->out->data;               // (N, C, 1, 1)
    const int64_t planes = s->d[0] * s->d[1], hw = s->d[2] * s->d[3];
    if (planes == 0) return REMAT_OK;
    const unsigned blocks = (unsigned)((planes + GAP_THREADS / 32 - 1) / (GAP_THREADS / 32));
    gap_fwd<<<blocks, GAP_THREADS, 0, cu->stream>>>(planes, hw, x, y);
    REMAT__CU_TRY(remat__cu_launched(k, "gap_fwd"));
    return REMAT_OK;
}

static remat_status gap_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    float *dx = k->din[0]; // (N, C, H, W)
    if (!dx) return REMAT_OK;
    const remat__shape *s = k->in[0]->shape;
    const float *dy = k->dout; // (N, C, 1, 1)
    const int64_t hw = s->d[2] * s->d[3], total = remat__numel(s);
    if (total == 0) return REMAT_OK;
    POOL_LAUNCH(cu, total, gap_bwd, total, make_divider(hw), dy, dx);
    REMAT__CU_TRY(remat__cu_launched(k, "gap_bwd"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_global_avgpool = {gap_forward, gap_backward, NULL, NULL, NULL, NULL};
