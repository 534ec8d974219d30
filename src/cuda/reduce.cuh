/* reduce.cuh: the sums and maxima over a warp or a block, and the float4
 * loads and stores, that the CUDA kernels (k_*.cu) share.
 *
 * A kernel's bits depend on the order of its additions, so every sum here
 * has one order, written in its comment, and two orders are two functions
 * (never one function with two behaviours):
 *   warp_sum               a butterfly over the 32 lanes
 *   block_sum, block_sum2  warp_sum per warp, then warp 0's warp_sum over
 *                          the warp sums (a tree)
 *   block_sum_in_order     warp_sum per warp, then the warp sums added one
 *                          after another in warp order
 * The maxima come in the same two shapes, each with its own comparison
 * (block_max: a > b ? a : b; block_fmax_in_order: fmaxf). Changing any
 * order changes the bits of every kernel that uses it.
 *
 * Every function is called by all threads of the block (all lanes of the
 * warp for the warp_ ones), with blockDim.x a multiple of 32.
 */
#ifndef REMAT_CUDA_REDUCE_CUH
#define REMAT_CUDA_REDUCE_CUH

#include <math.h>
#include <stdint.h>

/* ------------------------------------------------------------------ warps */

/* Sum of v over the warp by a butterfly: at step o (16, 8, 4, 2, 1) lane i
 * adds lane i ^ o's value to its own. Lanes i and i ^ o add the same two
 * values, so every lane ends with the same bits. (Lane 0's result is also
 * what a shuffle-down tree with the same offsets leaves in lane 0.) */
static __device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Maximum of v over the warp by the same butterfly, each step keeping
 * u > v ? u : v (the other lane's value u only when it is larger). Without
 * NaNs every lane ends with the maximum. */
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

/* Maximum of v over the warp by the same butterfly with fmaxf (which
 * drops a NaN operand): every lane ends with the same bits. */
static __device__ __forceinline__ float warp_fmax(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ------------------------------------------------- blocks, as a tree */

/* Sum of v over the block in a fixed tree, returned to every thread:
 * warp_sum in each warp, then warp 0 runs warp_sum over the nw warp sums
 * (lane w < nw holds warp w's, the others 0.0). sh: 33 doubles of shared
 * memory; back-to-back calls with the same sh are safe. */
static __device__ double block_sum(double v, double *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by an earlier call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = warp_sum(lane < nw ? sh[lane] : 0.0);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

/* block_sum of *a and of *b at once, in block_sum's tree, with fewer
 * barriers: the sums are valid in warp 0 only (the other warps get 0.0).
 * sh: 64 doubles of shared memory, in use until the caller's next
 * __syncthreads(). */
static __device__ void block_sum2(double *a, double *b, double *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    double x = warp_sum(*a), y = warp_sum(*b);
    if (lane == 0) sh[w] = x, sh[32 + w] = y;
    __syncthreads();
    x = y = 0.0;
    if (w == 0) {
        if (lane < nw) x = sh[lane], y = sh[32 + lane];
        x = warp_sum(x), y = warp_sum(y);
    }
    *a = x, *b = y;
}

/* Maximum of v over the block, returned to every thread: warp_max in each
 * warp, then warp 0's warp_max over the warp maxima (lanes past the last
 * warp hold -INFINITY). sh: 33 floats of shared memory; back-to-back calls
 * with the same sh are safe. */
static __device__ float block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = warp_max(lane < nw ? sh[lane] : -INFINITY);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

/* ----------------------------------------------- blocks, in warp order */

/* Sum of v over a block of NW warps (blockDim.x == 32 NW), returned to
 * every thread: warp_sum in each warp, then every thread adds the warp
 * sums in warp order, ((s0 + s1) + s2) + ... sh: NW doubles of shared
 * memory, not in use on entry and free again on return. */
template <int NW> static __device__ __forceinline__ double block_sum_in_order(double v, double *sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = sh[0];
    for (int w = 1; w < NW; w++) s += sh[w];
    __syncthreads();
    return s;
}

/* Maximum of v over a block of NW warps, returned to every thread:
 * warp_fmax in each warp, then fmaxf over the warp maxima in warp order.
 * sh: NW floats, as block_sum_in_order's. */
template <int NW> static __device__ __forceinline__ float block_fmax_in_order(float v, float *sh) {
    v = warp_fmax(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = sh[0];
    for (int w = 1; w < NW; w++) m = fmaxf(m, sh[w]);
    __syncthreads();
    return m;
}

/* ---------------------------------------------------------------- float4 */

/* Quad q of p: the floats p[4q] .. p[4q + 3] as one 16-byte load or
 * store (p 16-byte aligned). */
static __device__ __forceinline__ float4 ld4(const float *p, int64_t q) { return ((const float4 *)p)[q]; }
static __device__ __forceinline__ void st4(float *p, int64_t q, float4 v) { ((float4 *)p)[q] = v; }

/* a + b per component, each sum rounded on its own as the CPU's loops
 * round it (__fadd_rn: never fused with a product into an FMA). */
static __device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

#endif
