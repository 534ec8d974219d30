/* pw16.c: relu, add and mul on their values in their stored dtypes (the
 * bf16 policy's native CPU kernels; pw16.h says what they promise): the
 * plain scalar reference, and the same loops on AVX2, AVX-512 and
 * AVX-512 with its bf16 conversion (VCVTNEPS2BF16), compiled for those
 * sets with target pragmas whatever the build machine is, and chosen at
 * run time from the CPU's own (__builtin_cpu_supports).
 *
 * Widening a bf16 is a shift. Narrowing is remat__bf16_of's integer
 * rounding, lane by lane (ties to even; a NaN made quiet); the AVX-512
 * BF16 instruction rounds the same way except that it flushes a denormal
 * input to zero, so a vector with a denormal lane is narrowed the integer
 * way instead (a rare case; test_pw16 holds every level to the reference
 * on denormals, ties, infinities and NaNs). Beside the ops, each level
 * has remat__convert_range's conversions (every kind on vectors), which
 * the CPU backend's views, the bf16 planes of BatchNorm and the poolings
 * and the bf16 linear layers' operands and gradients use, and so does
 * remat__pw16_acc_n, the copies' (concat, slice, add_broadcast)
 * accumulation of a gradient.
 */
#include "pw16.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

remat__pw16 remat__pw16_of(const remat__kctx *k, int backward) {
    const remat__node *n = k->node;
    remat__pw16 t;
    memset(&t, 0, sizeof t);
    t.n_in = n->n_in < 2 ? n->n_in : 2;
    for (int j = 0; j < t.n_in; j++) {
        t.in[j] = k->in[j]->data;
        t.in16[j] = k->dt[n->in[j]] == REMAT_BF16;
        t.din[j] = backward ? (void *)k->din[j] : NULL;
    }
    t.out = k->out->data;
    t.out16 = k->dt[k->node_id] == REMAT_BF16;
    t.dout = backward ? (const void *)k->dout : NULL;
    return t;
}

int remat__pw16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd, size_t *bwd) {
    (void)nth;
    int any = dt[n - g->nodes] == REMAT_BF16;
    for (int i = 0; i < n->n_in; i++) any |= dt[n->in[i]] == REMAT_BF16;
    *fwd = *bwd = 0;
    return any;
}

void remat__pw16_acc_n(void *dst, int d16, int64_t do_, const void *grad, int g16, int64_t go, int64_t n) {
    /* a bf16 gradient the views' way: g widened, 0 + g (their zeroed
     * buffer: -0 becomes +0), rounded, added, rounded (remat__pw16_acc) */
    void *d = (unsigned char *)dst + do_ * (d16 ? 2 : 4);
    const void *g = (const unsigned char *)grad + go * (g16 ? 2 : 4);
    remat__pw16_best()->acc_n(d, d16, g, g16, n);
}

/* ------------------------------------------------------------ reference */

static void relu_fwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        float x = remat__pw16_ld(t->in[0], t->in16[0], i);
        remat__pw16_st(t->out, t->out16, i, x <= 0.0f ? 0.0f : x);
    }
}

static void relu_bwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    if (!t->din[0]) return;
    for (int64_t i = lo; i < hi; i++) {
        float y = remat__pw16_ld(t->out, t->out16, i), g = remat__pw16_ld(t->dout, t->out16, i);
        remat__pw16_acc(t->din[0], t->in16[0], i, y <= 0.0f ? -0.0f : g);
    }
}

static void add_fwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++)
        remat__pw16_st(t->out, t->out16, i,
                       remat__pw16_ld(t->in[0], t->in16[0], i) + remat__pw16_ld(t->in[1], t->in16[1], i));
}

static void add_bwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        float g = remat__pw16_ld(t->dout, t->out16, i);
        for (int j = 0; j < 2; j++)
            if (t->din[j]) remat__pw16_acc(t->din[j], t->in16[j], i, g);
    }
}

static void mul_fwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++)
        remat__pw16_st(t->out, t->out16, i,
                       remat__pw16_ld(t->in[0], t->in16[0], i) * remat__pw16_ld(t->in[1], t->in16[1], i));
}

static void mul_bwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        float g = remat__pw16_ld(t->dout, t->out16, i);
        if (t->din[0]) remat__pw16_acc(t->din[0], t->in16[0], i, g * remat__pw16_ld(t->in[1], t->in16[1], i));
        if (t->din[1]) remat__pw16_acc(t->din[1], t->in16[1], i, g * remat__pw16_ld(t->in[0], t->in16[0], i));
    }
}

static void gelu_fwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++)
        remat__pw16_st(t->out, t->out16, i, remat__gelu_tanh(remat__pw16_ld(t->in[0], t->in16[0], i)));
}

static void gelu_bwd_ref(const remat__pw16 *t, int64_t lo, int64_t hi) {
    if (!t->din[0]) return;
    for (int64_t i = lo; i < hi; i++) {
        float v = remat__pw16_ld(t->in[0], t->in16[0], i);
        remat__pw16_acc(t->din[0], t->in16[0], i, remat__pw16_ld(t->dout, t->out16, i) * remat__dgelu_tanh(v));
    }
}

static void exp_sub_ref(float *dst, const float *src, float m, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = remat__expf(src[i] - m);
}

static void philox16_ref(uint64_t q, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2], uint32_t out[64]) {
    for (int m = 0; m < 4; m++) remat__philox_x4(q + 4 * (uint64_t)m, c1, c2, c3, key, out + 16 * m);
}

static void adamw_ref(const remat__adamw_k *k, int64_t n, float *w, const float *g, float *m, float *v) {
    for (int64_t i = 0; i < n; i++) remat__adamw_one(k, w + i, g[i], m + i, v + i);
}

static void convert_ref(void *dst, const void *src, int64_t lo, int64_t hi, remat__cvt kind) {
    remat__convert_range(dst, src, lo, hi, kind);
}

/* BatchNorm's sums from element lo on (the vector kernels' tails). */
static void stat_sum_ref(const void *x, int b16, int64_t lo, int64_t n, double *acc) {
    for (int64_t i = lo; i < n; i++) acc[i % REMAT__PARTIALS] += (double)remat__pw16_ld(x, b16, i);
}

static void stat_sq_ref(const void *x, int b16, int64_t lo, int64_t n, double mu, double *acc) {
    for (int64_t i = lo; i < n; i++) {
        double d = (double)remat__pw16_ld(x, b16, i) - mu;
        acc[i % REMAT__PARTIALS] += d * d;
    }
}

static void stat_dsum_ref(const void *x, const void *dy, int b16, int64_t lo, int64_t n, double mu, double is,
                          double *ay, double *ax) {
    for (int64_t i = lo; i < n; i++) {
        double g = (double)remat__pw16_ld(dy, b16, i);
        ay[i % REMAT__PARTIALS] += g;
        ax[i % REMAT__PARTIALS] += g * (((double)remat__pw16_ld(x, b16, i) - mu) * is);
    }
}

static void bn_apply_ref(const void *x, void *y, int b16, int64_t lo, int64_t n, float mu, float sc, float b) {
    for (int64_t i = lo; i < n; i++) remat__pw16_st(y, b16, i, (remat__pw16_ld(x, b16, i) - mu) * sc + b);
}

/* c: mu, is, a, mdy, mdx (remat__pw16_kernels.bn_dx) */
static void bn_dx_ref(const void *x, const void *dy, void *dx, int b16, int64_t lo, int64_t n, const float c[5]) {
    for (int64_t i = lo; i < n; i++) {
        float xhat = (remat__pw16_ld(x, b16, i) - c[0]) * c[1];
        remat__pw16_acc(dx, b16, i, c[2] * (remat__pw16_ld(dy, b16, i) - c[3] - xhat * c[4]));
    }
}

static void bn_apply_scalar(const void *x, void *y, int b16, int64_t n, float mu, float sc, float b) {
    bn_apply_ref(x, y, b16, 0, n, mu, sc, b);
}
static void bn_dx_scalar(const void *x, const void *dy, void *dx, int b16, int64_t n, const float c[5]) {
    bn_dx_ref(x, dy, dx, b16, 0, n, c);
}

static void acc_n_ref(void *dst, int d16, const void *grad, int g16, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) remat__pw16_acc(dst, d16, i, remat__pw16_ld(grad, g16, i));
}
static void acc_n_scalar(void *dst, int d16, const void *grad, int g16, int64_t n) {
    acc_n_ref(dst, d16, grad, g16, 0, n);
}

static void stat_sum_scalar(const void *x, int b16, int64_t n, double *acc) { stat_sum_ref(x, b16, 0, n, acc); }
static void stat_sq_scalar(const void *x, int b16, int64_t n, double mu, double *acc) {
    stat_sq_ref(x, b16, 0, n, mu, acc);
}
static void stat_dsum_scalar(const void *x, const void *dy, int b16, int64_t n, double mu, double is, double *ay,
                             double *ax) {
    stat_dsum_ref(x, dy, b16, 0, n, mu, is, ay, ax);
}

static const remat__pw16_kernels scalar_kernels = {
    .isa = "scalar",
    .convert = convert_ref,
    .relu_fwd = relu_fwd_ref,
    .relu_bwd = relu_bwd_ref,
    .add_fwd = add_fwd_ref,
    .add_bwd = add_bwd_ref,
    .mul_fwd = mul_fwd_ref,
    .mul_bwd = mul_bwd_ref,
    .gelu_fwd = gelu_fwd_ref,
    .gelu_bwd = gelu_bwd_ref,
    .exp_sub = exp_sub_ref,
    .philox16 = philox16_ref,
    .adamw = adamw_ref,
    .stat_sum = stat_sum_scalar,
    .stat_sq = stat_sq_scalar,
    .stat_dsum = stat_dsum_scalar,
    .bn_apply = bn_apply_scalar,
    .bn_dx = bn_dx_scalar,
    .acc_n = acc_n_scalar,
};

/* GCC's target pragmas on x86-64; elsewhere (another architecture, or a
 * compiler without them: clang) the scalar kernels alone. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PW16_X86 1
#include <immintrin.h>

/* ----------------------------------------------------------------- AVX2 */

#pragma GCC push_options
#pragma GCC target("avx2")

static inline __m256 ld8(const void *p, int b16, int64_t i) {
    if (!b16) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* remat__bf16_of of each lane, in the lane's upper 16 bits. */
static inline __m256i rnd8(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
}

static inline void st8(void *p, int b16, int64_t i, __m256 v) {
    if (!b16) {
        _mm256_storeu_ps((float *)p + i, v);
        return;
    }
    __m256i h = _mm256_srli_epi32(rnd8(v), 16);
    /* packus works within 128-bit halves: lanes 0-3 land in qword 0,
     * lanes 4-7 in qword 2 */
    __m256i k = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    _mm_storeu_si128((__m128i *)((uint16_t *)p + i), _mm256_castsi256_si128(k));
}

/* remat__bf16_round of each lane: the rounded bits, widened back (the
 * low half cleared). */
static inline __m256 round8(__m256 v) {
    return _mm256_castsi256_ps(_mm256_and_si256(rnd8(v), _mm256_set1_epi32((int)0xffff0000u)));
}

/* REMAT__CVT_ACC_BF16 of 8 lanes: v rounded through bf16, added,
 * rounded. */
static inline void accr8(void *p, int64_t i, __m256 v) { st8(p, 1, i, _mm256_add_ps(ld8(p, 1, i), round8(v))); }

static inline void acc8(void *p, int b16, int64_t i, __m256 g) {
    if (!b16) {
        float *d = (float *)p + i;
        _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), g));
        return;
    }
    accr8(p, i, _mm256_add_ps(_mm256_setzero_ps(), g)); /* the view's zero plus g */
}

static inline __m256 relu8(__m256 x) {
    __m256 z = _mm256_setzero_ps();
    return _mm256_blendv_ps(x, z, _mm256_cmp_ps(x, z, _CMP_LE_OQ));
}

static inline __m256 relu_g8(__m256 y, __m256 g) {
    __m256 le = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LE_OQ);
    return _mm256_blendv_ps(g, _mm256_set1_ps(-0.0f), le);
}

/* remat__expf lane by lane (core/expf.h: the same operations in the same
 * order; the lanes out of range computed on 0 and replaced). */
static inline __m256 exp8(__m256 x) {
    __m256 hi = _mm256_cmp_ps(x, _mm256_set1_ps(REMAT__EXP_HI), _CMP_GT_OQ);
    __m256 lo = _mm256_cmp_ps(x, _mm256_set1_ps(REMAT__EXP_LO), _CMP_LT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), z = _mm256_setzero_ps();
    __m256 xc = _mm256_blendv_ps(x, z, _mm256_or_ps(_mm256_or_ps(hi, lo), nan)),
           magic = _mm256_set1_ps(REMAT__EXP_MAGIC);
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(REMAT__EXP_LOG2E)), magic), magic);
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(REMAT__EXP_C1)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(REMAT__EXP_C2)));
    __m256 p = _mm256_set1_ps(REMAT__EXP_P0);
    const float c[] = {REMAT__EXP_P1, REMAT__EXP_P2, REMAT__EXP_P3, REMAT__EXP_P4, REMAT__EXP_P5};
    for (int k = 0; k < 5; k++) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c[k]));
    __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), hi);
    y = _mm256_blendv_ps(y, z, lo);
    return _mm256_blendv_ps(y, x, nan);
}

/* The high 32 bits of each lane's 32 x 32 product with m (m in both
 * halves of every 64-bit lane): the even lanes' and the odd lanes'
 * products, merged. */
static inline __m256i mulhi8(__m256i x, __m256i m) {
    __m256i even = _mm256_mul_epu32(x, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
    return _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
}

/* philox16 (pw16.h) on 8 lanes: 8 counters at a time, the rounds of
 * remat__philox lane by lane. */
static void philox16_avx2(uint64_t q, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2], uint32_t out[64]) {
    const __m256i m0 = _mm256_set1_epi32((int)REMAT__PHILOX_M0), m1 = _mm256_set1_epi32((int)REMAT__PHILOX_M1);
    for (int h = 0; h < 2; h++) {
        uint32_t a0[8], d0[8], w[4][8];
        for (int i = 0; i < 8; i++) {
            uint64_t qi = q + (uint64_t)(8 * h + i);
            a0[i] = (uint32_t)qi, d0[i] = c3 ^ (uint32_t)(qi >> 32);
        }
        __m256i a = _mm256_loadu_si256((const __m256i *)a0), b = _mm256_set1_epi32((int)c1);
        __m256i c = _mm256_set1_epi32((int)c2), d = _mm256_loadu_si256((const __m256i *)d0);
        uint32_t k0 = key[0], k1 = key[1];
        for (int round = 0; round < 10; round++) {
            __m256i lo0 = _mm256_mullo_epi32(a, m0), hi0 = mulhi8(a, m0);
            __m256i lo1 = _mm256_mullo_epi32(c, m1), hi1 = mulhi8(c, m1);
            a = _mm256_xor_si256(_mm256_xor_si256(hi1, b), _mm256_set1_epi32((int)k0));
            c = _mm256_xor_si256(_mm256_xor_si256(hi0, d), _mm256_set1_epi32((int)k1));
            b = lo1, d = lo0;
            k0 += REMAT__PHILOX_W0, k1 += REMAT__PHILOX_W1;
        }
        _mm256_storeu_si256((__m256i *)w[0], a), _mm256_storeu_si256((__m256i *)w[1], b);
        _mm256_storeu_si256((__m256i *)w[2], c), _mm256_storeu_si256((__m256i *)w[3], d);
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 4; j++) out[32 * h + 4 * i + j] = w[j][i];
    }
    _mm256_zeroupper();
}

/* Eight doubles (BatchNorm's partials), as two vectors of four. */
typedef struct {
    __m256d a, b;
} d8_avx2;
static inline d8_avx2 d8_ld(const void *p, int b16, int64_t i) {
    __m256 v = ld8(p, b16, i);
    return (d8_avx2){_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
}
static inline d8_avx2 d8_load(const double *a) { return (d8_avx2){_mm256_loadu_pd(a), _mm256_loadu_pd(a + 4)}; }
static inline void d8_store(double *a, d8_avx2 v) { _mm256_storeu_pd(a, v.a), _mm256_storeu_pd(a + 4, v.b); }
static inline d8_avx2 d8_set1(double x) { return (d8_avx2){_mm256_set1_pd(x), _mm256_set1_pd(x)}; }
static inline d8_avx2 d8_add(d8_avx2 x, d8_avx2 y) {
    return (d8_avx2){_mm256_add_pd(x.a, y.a), _mm256_add_pd(x.b, y.b)};
}
static inline d8_avx2 d8_sub(d8_avx2 x, d8_avx2 y) {
    return (d8_avx2){_mm256_sub_pd(x.a, y.a), _mm256_sub_pd(x.b, y.b)};
}
static inline d8_avx2 d8_mul(d8_avx2 x, d8_avx2 y) {
    return (d8_avx2){_mm256_mul_pd(x.a, y.a), _mm256_mul_pd(x.b, y.b)};
}

#define PW_D8 d8_avx2
#define PW_D8_LD d8_ld
#define PW_D8_LOAD d8_load
#define PW_D8_STORE d8_store
#define PW_D8_SET1 d8_set1
#define PW_D8_ADD d8_add
#define PW_D8_SUB d8_sub
#define PW_D8_MUL d8_mul
#define PW_N 8
#define PW_V __m256
#define PW_LD ld8
#define PW_ST st8
#define PW_ACC acc8
#define PW_ACCR accr8
#define PW_RND round8
#define PW_EXP exp8
#define PW_DIV _mm256_div_ps
#define PW_SQRT _mm256_sqrt_ps
#define PW_ADD _mm256_add_ps
#define PW_MUL _mm256_mul_ps
#define PW_SUB _mm256_sub_ps
#define PW_SET1 _mm256_set1_ps
#define PW_RELU relu8
#define PW_RELU_G relu_g8
#define PW_FN(name) avx2_##name
#define PW_ISA "avx2"
#define PW_PHILOX philox16_avx2
#include "pw16_simd.h"
#undef PW_N
#undef PW_V
#undef PW_LD
#undef PW_ST
#undef PW_ACC
#undef PW_ACCR
#undef PW_RND
#undef PW_EXP
#undef PW_DIV
#undef PW_SQRT
#undef PW_ADD
#undef PW_MUL
#undef PW_SUB
#undef PW_SET1
#undef PW_RELU
#undef PW_RELU_G
#undef PW_FN
#undef PW_ISA
#undef PW_PHILOX
#undef PW_D8
#undef PW_D8_LD
#undef PW_D8_LOAD
#undef PW_D8_STORE
#undef PW_D8_SET1
#undef PW_D8_ADD
#undef PW_D8_SUB
#undef PW_D8_MUL

#pragma GCC pop_options

/* -------------------------------------------------------------- AVX-512 */

#pragma GCC push_options
#pragma GCC target("avx512f")

static inline __m512 ld16(const void *p, int b16, int64_t i) {
    if (!b16) return _mm512_loadu_ps((const float *)p + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512i rnd16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
}

static inline __m512 round16(__m512 v) {
    return _mm512_castsi512_ps(_mm512_and_si512(rnd16(v), _mm512_set1_epi32((int)0xffff0000u)));
}

static inline __m256i narrow16(__m512 v) { return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rnd16(v), 16)); }

#define ST16(name, narrow)                                                                                             \
    static inline void name(void *p, int b16, int64_t i, __m512 v) {                                                   \
        if (b16) _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), narrow(v));                                       \
        else _mm512_storeu_ps((float *)p + i, v);                                                                      \
    }
ST16(st16, narrow16)

/* REMAT__CVT_ACC_BF16 of 16 lanes (accr: v rounded through bf16, the
 * rounded bits widened back, added, rounded by st), and a gradient's
 * accumulation (acc: a bf16 one takes 0 + g that way). */
#define ACC16(acc, accr, st)                                                                                           \
    static inline void accr(void *p, int64_t i, __m512 v) { st(p, 1, i, _mm512_add_ps(ld16(p, 1, i), round16(v))); }   \
    static inline void acc(void *p, int b16, int64_t i, __m512 g) {                                                    \
        if (!b16) {                                                                                                    \
            float *d = (float *)p + i;                                                                                 \
            _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), g));                                                 \
            return;                                                                                                    \
        }                                                                                                              \
        accr(p, i, _mm512_add_ps(_mm512_setzero_ps(), g));                                                             \
    }
ACC16(acc16, accr16, st16)

static inline __m512 relu16(__m512 x) {
    __m512 z = _mm512_setzero_ps();
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, z, _CMP_LE_OQ), z);
}

static inline __m512 relu_g16(__m512 y, __m512 g) {
    __mmask16 le = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LE_OQ);
    return _mm512_mask_mov_ps(g, le, _mm512_set1_ps(-0.0f));
}

/* remat__expf lane by lane, as exp8. */
static inline __m512 exp16(__m512 x) {
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(REMAT__EXP_HI), _CMP_GT_OQ);
    __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(REMAT__EXP_LO), _CMP_LT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 z = _mm512_setzero_ps(), xc = _mm512_mask_mov_ps(x, hi | lo | nan, z);
    __m512 magic = _mm512_set1_ps(REMAT__EXP_MAGIC);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(REMAT__EXP_LOG2E)), magic), magic);
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(REMAT__EXP_C1)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(REMAT__EXP_C2)));
    __m512 p = _mm512_set1_ps(REMAT__EXP_P0);
    const float c[] = {REMAT__EXP_P1, REMAT__EXP_P2, REMAT__EXP_P3, REMAT__EXP_P4, REMAT__EXP_P5};
    for (int k = 0; k < 5; k++) p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c[k]));
    __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    y = _mm512_mask_mov_ps(y, hi, _mm512_set1_ps(INFINITY));
    y = _mm512_mask_mov_ps(y, lo, z);
    return _mm512_mask_mov_ps(y, nan, x);
}

/* mulhi8 on 16 lanes. */
static inline __m512i mulhi16(__m512i x, __m512i m) {
    __m512i even = _mm512_mul_epu32(x, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    return _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(even, 32), odd);
}

/* philox16 (pw16.h) on 16 lanes, as philox16_avx2. */
static void philox16_avx512(uint64_t q, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2],
                            uint32_t out[64]) {
    const __m512i m0 = _mm512_set1_epi32((int)REMAT__PHILOX_M0), m1 = _mm512_set1_epi32((int)REMAT__PHILOX_M1);
    uint32_t a0[16], d0[16], w[4][16];
    for (int i = 0; i < 16; i++) {
        uint64_t qi = q + (uint64_t)i;
        a0[i] = (uint32_t)qi, d0[i] = c3 ^ (uint32_t)(qi >> 32);
    }
    __m512i a = _mm512_loadu_si512(a0), b = _mm512_set1_epi32((int)c1);
    __m512i c = _mm512_set1_epi32((int)c2), d = _mm512_loadu_si512(d0);
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        __m512i lo0 = _mm512_mullo_epi32(a, m0), hi0 = mulhi16(a, m0);
        __m512i lo1 = _mm512_mullo_epi32(c, m1), hi1 = mulhi16(c, m1);
        a = _mm512_xor_si512(_mm512_xor_si512(hi1, b), _mm512_set1_epi32((int)k0));
        c = _mm512_xor_si512(_mm512_xor_si512(hi0, d), _mm512_set1_epi32((int)k1));
        b = lo1, d = lo0;
        k0 += REMAT__PHILOX_W0, k1 += REMAT__PHILOX_W1;
    }
    _mm512_storeu_si512(w[0], a), _mm512_storeu_si512(w[1], b);
    _mm512_storeu_si512(w[2], c), _mm512_storeu_si512(w[3], d);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = w[j][i];
    _mm256_zeroupper();
}

/* Eight doubles (BatchNorm's partials) from eight values as stored. */
static inline __m512d d8_ld512(const void *p, int b16, int64_t i) {
    if (!b16) return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)p + i));
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}

#define PW_D8 __m512d
#define PW_D8_LD d8_ld512
#define PW_D8_LOAD _mm512_loadu_pd
#define PW_D8_STORE _mm512_storeu_pd
#define PW_D8_SET1 _mm512_set1_pd
#define PW_D8_ADD _mm512_add_pd
#define PW_D8_SUB _mm512_sub_pd
#define PW_D8_MUL _mm512_mul_pd
#define PW_N 16
#define PW_V __m512
#define PW_LD ld16
#define PW_RND round16
#define PW_EXP exp16
#define PW_DIV _mm512_div_ps
#define PW_SQRT _mm512_sqrt_ps
#define PW_ADD _mm512_add_ps
#define PW_MUL _mm512_mul_ps
#define PW_SUB _mm512_sub_ps
#define PW_SET1 _mm512_set1_ps
#define PW_RELU relu16
#define PW_RELU_G relu_g16

#define PW_PHILOX philox16_avx512
#define PW_ST st16
#define PW_ACC acc16
#define PW_ACCR accr16
#define PW_FN(name) avx512_##name
#define PW_ISA "avx512"
#include "pw16_simd.h"
#undef PW_ST
#undef PW_ACC
#undef PW_ACCR
#undef PW_FN
#undef PW_ISA

#pragma GCC pop_options

/* ------------------------------------------------- AVX-512 with BF16 */

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")

/* The same with VCVTNEPS2BF16, which flushes a denormal to zero: a vector
 * with a denormal lane (exponent 0, significand not) goes the integer way. */
static inline __m256i narrow16_bf(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __mmask16 expo = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    __mmask16 sig = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
    if (sig & ~expo) return narrow16(v);
    return (__m256i)_mm512_cvtneps_pbh(v);
}

ST16(st16_bf, narrow16_bf)
ACC16(acc16_bf, accr16_bf, st16_bf)
#undef ST16
#undef ACC16

#define PW_ST st16_bf
#define PW_ACC acc16_bf
#define PW_ACCR accr16_bf
#define PW_FN(name) avx512bf16_##name
#define PW_ISA "avx512bf16"
#include "pw16_simd.h"

#pragma GCC pop_options
#endif

/* -------------------------------------------------------------- choice */

const remat__pw16_kernels *remat__pw16_level(int level) {
    if (level == REMAT__PW16_SCALAR) return &scalar_kernels;
#ifdef PW16_X86
    __builtin_cpu_init();
    if (level == REMAT__PW16_AVX2 && __builtin_cpu_supports("avx2")) return &avx2_kernels;
    if (level == REMAT__PW16_AVX512 && __builtin_cpu_supports("avx512f")) return &avx512_kernels;
    if (level == REMAT__PW16_AVX512BF16 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"))
        return &avx512bf16_kernels;
#endif
    return NULL;
}

static const remat__pw16_kernels *best;

static void choose(void) {
    static const char *const names[REMAT__PW16_LEVELS] = {"scalar", "avx2", "avx512", "avx512bf16"};
    const char *cap = getenv("REMAT_PW16");
    int top = REMAT__PW16_LEVELS - 1;
    for (int l = 0; cap && l < REMAT__PW16_LEVELS; l++)
        if (!strcmp(cap, names[l])) top = l;
    for (int l = top; l >= 0 && !best; l--) best = remat__pw16_level(l);
}

const remat__pw16_kernels *remat__pw16_best(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, choose);
    return best;
}
