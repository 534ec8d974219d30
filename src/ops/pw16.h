/* pw16.h: elementwise kernels on values in their stored dtypes, the bf16
 * policy's native CPU kernels for relu, add, mul and gelu's tanh form
 * (vectorized, pw16.c; gelu's also under fp32, as are the exponentials of
 * softmax, attention and cross-entropy) and for dropout, gelu's
 * exact form, reshape, global_avgpool, concat, slice, permute,
 * add_broadcast, softmax and mse (in their ops' files, through the loads,
 * stores, copies and accumulation below),
 * as src/cuda/pw16.cuh is the CUDA backend's; and remat__convert_range
 * on vectors (remat__pw16_convert).
 *
 * Each value (an input, the output, the output gradient, an input
 * gradient) is bf16 or float32 as the policy stores it (kctx.dt, by node
 * id). The arithmetic is the float32 kernel's, element by element, on the
 * same float32 numbers the views of exec/views.c would hold, so the
 * bits are the view path's:
 * - a bf16 input is widened (exact), a float32 one read as it is;
 * - a bf16 output is rounded from the float32 result (remat__bf16_of,
 *   ties to even: core/bf16.h), a float32 one stored as it is;
 * - the gradient of a bf16 input is the kernel's gradient computed into a
 *   zero (the views' zeroed buffer: 0 + g, which turns -0 into +0 as
 *   there), rounded through bf16, added to the gradient in float32 and
 *   rounded again (REMAT__CVT_ACC_BF16); a float32 input's gradient is
 *   accumulated in place, as the float32 kernel does when the views leave
 *   that input alone.
 * Two inputs may be one value (add(x, x)): every element of input 0's
 * gradient is finished before input 1's, the order in which the views add
 * their two buffers. No workspace.
 *
 * The vector kernels are chosen at run time, once, from what the CPU has
 * (AVX-512 with its bf16 conversion, AVX-512, AVX2), never from the build
 * machine; the plain scalar ones beside them are the reference the tests
 * hold them to (test_pw16) and run where no vector level applies.
 */
#ifndef REMAT_PW16_H
#define REMAT_PW16_H

#include "../core/bf16.h"
#include "../core/expf.h"
#include "../remat-impl.h"

/* A node's tensors as stored, and their dtypes (at most 2 inputs). NULL
 * where a pass does not read or write it (backward: an input or the
 * output that is not saved, an input that needs no gradient). */
typedef struct {
    const void *in[2];
    void *out;
    const void *dout;
    void *din[2];
    int in16[2], out16; /* bf16? (an input's gradient has its input's dtype,
                         * the output gradient the output's) */
    int n_in;
} remat__pw16;

/* Element i of a value stored in bf16 (b16) or float32, as float32. */
static inline float remat__pw16_ld(const void *p, int b16, int64_t i) {
    return b16 ? remat__f32_of(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Stores v as element i, rounded when the value is bf16. */
static inline void remat__pw16_st(void *p, int b16, int64_t i, float v) {
    if (b16) ((uint16_t *)p)[i] = remat__bf16_of(v);
    else ((float *)p)[i] = v;
}

/* Adds the gradient g into element i of an input's gradient: a bf16 one
 * as the views do (0 + g rounded through bf16, added, rounded), a float32
 * one in place. */
static inline void remat__pw16_acc(void *p, int b16, int64_t i, float g) {
    if (b16) {
        uint16_t *d = (uint16_t *)p;
        float c = 0.0f + g;
        d[i] = remat__bf16_of(remat__f32_of(d[i]) + remat__bf16_round(c));
    } else {
        ((float *)p)[i] += g;
    }
}

/* Copies n elements of a value stored as s16 (from element so) into one
 * stored as d16 (from element do_): the views' bits, each element widened
 * and rounded (a bf16 copied to bf16 stays as it is, but a signalling NaN
 * is made quiet, as rounding its float32 view makes it). */
static inline void remat__pw16_copy(void *dst, int d16, int64_t do_, const void *src, int s16, int64_t so, int64_t n) {
    if (!d16 && !s16) {
        memcpy((float *)dst + do_, (const float *)src + so, (size_t)n * sizeof(float));
    } else if (d16 && s16) {
        uint16_t *d = (uint16_t *)dst + do_;
        const uint16_t *s = (const uint16_t *)src + so;
        for (int64_t i = 0; i < n; i++) d[i] = (uint16_t)((s[i] & 0x7fffu) > 0x7f80u ? s[i] | 0x40u : s[i]);
    } else {
        for (int64_t i = 0; i < n; i++) remat__pw16_st(dst, d16, do_ + i, remat__pw16_ld(src, s16, so + i));
    }
}

/* Adds n elements of a gradient stored as g16 (from element go) into an
 * input's gradient stored as d16 (from element do_), each as
 * remat__pw16_acc adds it, in one pass of the chosen kernels' acc_n. */
void remat__pw16_acc_n(void *dst, int d16, int64_t do_, const void *grad, int g16, int64_t go, int64_t n);

/* Kernel k's tensors (kctx.dt set), for its forward or backward. */
remat__pw16 remat__pw16_of(const remat__kctx *k, int backward);

/* remat__op.bf16_ws of an elementwise op: 1 (no workspace) when node n
 * has a value in bf16, an input or its output; 0 when every value is
 * float32, and the float32 kernels run as under fp32. */
int remat__pw16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd, size_t *bwd);

/* GELU's tanh form (gelu.c) on one element, y and dy/dx: with
 * u = sqrt(2/pi) (x + 0.044715 x^3) and s = (1 + tanh u) / 2 =
 * 1 / (1 + e^-2u), y = x s and dy/dx = s + 2 x s (1 - s) du/dx. e^-2u is
 * remat__expf, which the vector kernels repeat lane by lane; its
 * overflow for large -u gives s = 0 exactly. */
#define REMAT__GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define REMAT__GELU_C 0.044715f
static inline float remat__gelu_tanh(float v) {
    float u = REMAT__GELU_S * (v + REMAT__GELU_C * v * v * v);
    return v / (1.0f + remat__expf(-2.0f * u));
}
static inline float remat__dgelu_tanh(float v) {
    float u = REMAT__GELU_S * (v + REMAT__GELU_C * v * v * v), sg = 1.0f / (1.0f + remat__expf(-2.0f * u));
    return sg + 2.0f * v * sg * (1.0f - sg) * REMAT__GELU_S * (1.0f + 3.0f * REMAT__GELU_C * v * v);
}

/* AdamW's per-step constants (torch.optim.AdamW, non-amsgrad): decay
 * = 1 - lr wd, b1c = 1 - beta1, b2, b2c = 1 - beta2, bc2s =
 * sqrt(1 - beta2^t), eps, step = lr / (1 - beta1^t). */
typedef struct {
    float decay, b1c, b2, b2c, bc2s, eps, step;
} remat__adamw_k;

/* One parameter's update, every operation rounded on its own (the vector
 * kernels repeat it lane by lane: sqrt and division are correctly rounded
 * in both): w *= decay; m += (g - m) b1c; v = v b2 + b2c g g;
 * w -= step m / (sqrt(v) / bc2s + eps). */
static inline void remat__adamw_one(const remat__adamw_k *k, float *w, float g, float *m, float *v) {
    float wd = *w * k->decay, mn = *m + (g - *m) * k->b1c, vn = *v * k->b2 + k->b2c * g * g;
    float denom = sqrtf(vn) / k->bc2s + k->eps;
    *m = mn, *v = vn, *w = wd - k->step * (mn / denom);
}

/* Elements [lo, hi) of a pass. */
typedef void (*remat__pw16_fn)(const remat__pw16 *t, int64_t lo, int64_t hi);

/* One instruction set's kernels. relu_bwd reads out and dout; add_bwd
 * dout; mul_bwd both inputs and dout; gelu_fwd and gelu_bwd are the tanh
 * form's (remat__gelu_tanh, remat__dgelu_tanh), gelu_bwd reading the
 * input and dout. convert is remat__convert_range
 * (core/bf16.h), the same bits, every kind on vectors. */
typedef struct {
    const char *isa; /* "scalar", "avx2", "avx512", "avx512bf16" */
    remat__pw16_fn relu_fwd, relu_bwd, add_fwd, add_bwd, mul_fwd, mul_bwd, gelu_fwd, gelu_bwd;
    /* dst[i] = remat__expf(src[i] - m) for i < n, float32 (dst may be
     * src): the exponentials of softmax and cross-entropy's rows */
    void (*exp_sub)(float *dst, const float *src, float m, int64_t n);
    /* Philox4x32-10 (core/philox.h) at the 16 counters (q + i, c1, c2,
     * c3 ^ ((q + i) >> 32)): out[4 i + j] = word j of counter i, as four
     * remat__philox_x4 from q, q + 4, q + 8, q + 12 give them; dropout's
     * masks, 64 elements a call */
    void (*philox16)(uint64_t q, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2], uint32_t out[64]);
    /* AdamW's update of n float32 parameters (remat__adamw_one, the CPU
     * backend's optimizer step) */
    void (*adamw)(const remat__adamw_k *k, int64_t n, float *w, const float *g, float *m, float *v);
    void (*convert)(void *dst, const void *src, int64_t lo, int64_t hi, remat__cvt kind);
    /* BatchNorm's channel sums (batchnorm.c), in double over n values as
     * stored (b16: bf16, else float32), element i into partial
     * i % REMAT__PARTIALS (remat__sum_partials' order): stat_sum adds x,
     * stat_sq (x - mu)^2, stat_dsum dy into ay and dy ((x - mu) is) into
     * ax. */
    void (*stat_sum)(const void *x, int b16, int64_t n, double *acc);
    void (*stat_sq)(const void *x, int b16, int64_t n, double mu, double *acc);
    void (*stat_dsum)(const void *x, const void *dy, int b16, int64_t n, double mu, double is, double *ay, double *ax);
    /* BatchNorm's planes, in float32 element by element: bn_apply stores
     * y = (x - mu) sc + b; bn_dx adds a (dy - mdy - (x - mu) is mdx) into
     * dx as remat__pw16_acc adds. */
    void (*bn_apply)(const void *x, void *y, int b16, int64_t n, float mu, float sc, float b);
    void (*bn_dx)(const void *x, const void *dy, void *dx, int b16, int64_t n, const float c[5]);
    /* dst[i] accumulates grad[i] as remat__pw16_acc adds, for i < n (d16,
     * g16: each in bf16): the copies' gradients, one pass */
    void (*acc_n)(void *dst, int d16, const void *grad, int g16, int64_t n);
} remat__pw16_kernels;

enum { REMAT__PW16_SCALAR, REMAT__PW16_AVX2, REMAT__PW16_AVX512, REMAT__PW16_AVX512BF16, REMAT__PW16_LEVELS };

/* The kernels of a level, or NULL when this CPU (or this build: not x86
 * or not GCC-compatible) cannot run them. The scalar level always exists. */
const remat__pw16_kernels *remat__pw16_level(int level);

/* The kernels the native bf16 ops run: the highest level this CPU has,
 * chosen once per process, at most the one REMAT_PW16 names (scalar,
 * avx2, avx512, avx512bf16: to compare or to rule a level out). */
const remat__pw16_kernels *remat__pw16_best(void);

/* remat__convert_range of elements [0, n) on the chosen kernels: what the
 * CPU backend's views, BatchNorm's and the poolings' planes convert with. */
static inline void remat__pw16_convert(void *dst, const void *src, int64_t n, remat__cvt kind) {
    remat__pw16_best()->convert(dst, src, 0, n, kind);
}

#endif
