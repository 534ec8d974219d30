/* pw16_simd.h: the body of pw16.c's vector kernels, written once and
 * included once per instruction set (pw16.c defines, before each
 * inclusion, inside that set's #pragma GCC target):
 *   PW_N               lanes per vector
 *   PW_V               the float vector type
 *   PW_LD(p, b16, i)   PW_N elements at i as float32 (remat__pw16_ld)
 *   PW_ST(p, b16, i, v)  stored, rounded when bf16 (remat__pw16_st)
 *   PW_ACC(p, b16, i, g) added into a gradient (remat__pw16_acc)
 *   PW_ACCR(p, i, v)   REMAT__CVT_ACC_BF16: bf16 p[i] = p[i] + v rounded
 *                      through bf16, rounded (PW_ACC is 0 + g into it)
 *   PW_RND(v)          v rounded through bf16, as float32 (remat__bf16_round)
 *   PW_ADD, PW_MUL, PW_SUB, PW_DIV, PW_SQRT  float32 arithmetic, lane by
 *                      lane
 *   PW_EXP(x)          remat__expf, lane by lane
 *   PW_PHILOX          the level's philox16
 *   PW_SET1(x)         x in every lane
 *   PW_RELU(x)         x <= 0 ? +0 : x (NaN stays)
 *   PW_RELU_G(y, g)    y <= 0 ? -0 : g
 *   PW_FN(name)        the level's name for a kernel
 *   PW_D8              eight doubles (BatchNorm's partials), with
 *                      PW_D8_LD (eight values as stored, widened),
 *                      PW_D8_LOAD and _STORE (eight partials), _SET1,
 *                      _ADD, _SUB and _MUL, lane by lane
 * Each loop runs whole vectors, and the scalar reference the rest: every
 * element's arithmetic is the reference's (no contraction: C11 mode
 * turns it off), so the bits are. The reference is SSE code, called as a
 * tail call, before which GCC does not clear the vector registers' upper
 * halves: each kernel does (VZEROUPPER), or every SSE instruction after
 * it pays for the dirty state (on this project's AMD EPYC it made the
 * BatchNorm backward that follows a relu's three times slower).
 */

static void PW_FN(relu_fwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + PW_N <= hi; i += PW_N) PW_ST(t->out, t->out16, i, PW_RELU(PW_LD(t->in[0], t->in16[0], i)));
    _mm256_zeroupper(); /* before SSE code: see the top */
    relu_fwd_ref(t, i, hi);
}

static void PW_FN(relu_bwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    if (!t->din[0]) return;
    for (; i + PW_N <= hi; i += PW_N) {
        PW_V g = PW_RELU_G(PW_LD(t->out, t->out16, i), PW_LD(t->dout, t->out16, i));
        PW_ACC(t->din[0], t->in16[0], i, g);
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    relu_bwd_ref(t, i, hi);
}

static void PW_FN(add_fwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + PW_N <= hi; i += PW_N)
        PW_ST(t->out, t->out16, i, PW_ADD(PW_LD(t->in[0], t->in16[0], i), PW_LD(t->in[1], t->in16[1], i)));
    _mm256_zeroupper(); /* before SSE code: see the top */
    add_fwd_ref(t, i, hi);
}

static void PW_FN(add_bwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + PW_N <= hi; i += PW_N) {
        PW_V g = PW_LD(t->dout, t->out16, i);
        for (int j = 0; j < 2; j++) /* input 0's lanes before input 1's: add(x, x) */
            if (t->din[j]) PW_ACC(t->din[j], t->in16[j], i, g);
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    add_bwd_ref(t, i, hi);
}

static void PW_FN(mul_fwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + PW_N <= hi; i += PW_N)
        PW_ST(t->out, t->out16, i, PW_MUL(PW_LD(t->in[0], t->in16[0], i), PW_LD(t->in[1], t->in16[1], i)));
    _mm256_zeroupper(); /* before SSE code: see the top */
    mul_fwd_ref(t, i, hi);
}

static void PW_FN(mul_bwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + PW_N <= hi; i += PW_N) {
        PW_V g = PW_LD(t->dout, t->out16, i);
        if (t->din[0]) PW_ACC(t->din[0], t->in16[0], i, PW_MUL(g, PW_LD(t->in[1], t->in16[1], i)));
        if (t->din[1]) PW_ACC(t->din[1], t->in16[1], i, PW_MUL(g, PW_LD(t->in[0], t->in16[0], i)));
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    mul_bwd_ref(t, i, hi);
}

/* GELU's tanh form: remat__gelu_tanh and remat__dgelu_tanh (pw16.h),
 * the same operations in the same order. gelu_den is 1 + e^-2u. */
static inline PW_V PW_FN(gelu_den)(PW_V v) {
    PW_V u = PW_MUL(PW_SET1(REMAT__GELU_S), PW_ADD(v, PW_MUL(PW_MUL(PW_MUL(PW_SET1(REMAT__GELU_C), v), v), v)));
    return PW_ADD(PW_SET1(1.0f), PW_EXP(PW_MUL(PW_SET1(-2.0f), u)));
}

static void PW_FN(gelu_fwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + PW_N <= hi; i += PW_N) {
        PW_V v = PW_LD(t->in[0], t->in16[0], i);
        PW_ST(t->out, t->out16, i, PW_DIV(v, PW_FN(gelu_den)(v)));
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    gelu_fwd_ref(t, i, hi);
}

static void PW_FN(gelu_bwd)(const remat__pw16 *t, int64_t lo, int64_t hi) {
    int64_t i = lo;
    if (!t->din[0]) return;
    const PW_V one = PW_SET1(1.0f);
    for (; i + PW_N <= hi; i += PW_N) {
        PW_V v = PW_LD(t->in[0], t->in16[0], i), sg = PW_DIV(one, PW_FN(gelu_den)(v));
        PW_V du = PW_ADD(one, PW_MUL(PW_MUL(PW_SET1(3.0f * REMAT__GELU_C), v), v));
        PW_V d =
            PW_MUL(PW_MUL(PW_MUL(PW_MUL(PW_MUL(PW_SET1(2.0f), v), sg), PW_SUB(one, sg)), PW_SET1(REMAT__GELU_S)), du);
        PW_ACC(t->din[0], t->in16[0], i, PW_MUL(PW_LD(t->dout, t->out16, i), PW_ADD(sg, d)));
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    gelu_bwd_ref(t, i, hi);
}

static void PW_FN(exp_sub)(float *dst, const float *src, float m, int64_t n) {
    int64_t i = 0;
    const PW_V mv = PW_SET1(m);
    for (; i + PW_N <= n; i += PW_N) PW_ST(dst, 0, i, PW_EXP(PW_SUB(PW_LD(src, 0, i), mv)));
    _mm256_zeroupper(); /* before SSE code: see the top */
    exp_sub_ref(dst + i, src + i, m, n - i);
}

static void PW_FN(adamw)(const remat__adamw_k *k, int64_t n, float *w, const float *g, float *m, float *v) {
    int64_t i = 0;
    const PW_V decay = PW_SET1(k->decay), b1c = PW_SET1(k->b1c), b2 = PW_SET1(k->b2), b2c = PW_SET1(k->b2c);
    const PW_V bc2s = PW_SET1(k->bc2s), eps = PW_SET1(k->eps), step = PW_SET1(k->step);
    for (; i + PW_N <= n; i += PW_N) {
        PW_V gi = PW_LD(g, 0, i), mi = PW_LD(m, 0, i), vi = PW_LD(v, 0, i);
        PW_V wd = PW_MUL(PW_LD(w, 0, i), decay), mn = PW_ADD(mi, PW_MUL(PW_SUB(gi, mi), b1c));
        PW_V vn = PW_ADD(PW_MUL(vi, b2), PW_MUL(PW_MUL(b2c, gi), gi));
        PW_V denom = PW_ADD(PW_DIV(PW_SQRT(vn), bc2s), eps);
        PW_ST(m, 0, i, mn), PW_ST(v, 0, i, vn);
        PW_ST(w, 0, i, PW_SUB(wd, PW_MUL(step, PW_DIV(mn, denom))));
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    adamw_ref(k, n - i, w + i, g + i, m + i, v + i);
}

static void PW_FN(convert)(void *dst, const void *src, int64_t lo, int64_t hi, remat__cvt kind) {
    int64_t i = lo;
    if (kind == REMAT__CVT_UP)
        for (; i + PW_N <= hi; i += PW_N) PW_ST(dst, 0, i, PW_LD(src, 1, i));
    else if (kind == REMAT__CVT_DOWN)
        for (; i + PW_N <= hi; i += PW_N) PW_ST(dst, 1, i, PW_LD(src, 0, i));
    else if (kind == REMAT__CVT_ACC_BF16)
        for (; i + PW_N <= hi; i += PW_N) PW_ACCR(dst, i, PW_LD(src, 0, i));
    else if (kind == REMAT__CVT_ROUND)
        for (; i + PW_N <= hi; i += PW_N) PW_ST(dst, 0, i, PW_RND(PW_LD(src, 0, i)));
    else if (kind == REMAT__CVT_ACC_F32)
        for (; i + PW_N <= hi; i += PW_N) PW_ST(dst, 0, i, PW_ADD(PW_LD(dst, 0, i), PW_RND(PW_LD(src, 0, i))));
    _mm256_zeroupper();
    remat__convert_range(dst, src, i, hi, kind);
}

static void PW_FN(stat_sum)(const void *x, int b16, int64_t n, double *acc) {
    int64_t i = 0;
    PW_D8 a = PW_D8_LOAD(acc);
    for (; i + REMAT__PARTIALS <= n; i += REMAT__PARTIALS) a = PW_D8_ADD(a, PW_D8_LD(x, b16, i));
    PW_D8_STORE(acc, a);
    _mm256_zeroupper(); /* before SSE code: see the top */
    stat_sum_ref(x, b16, i, n, acc);
}

static void PW_FN(stat_sq)(const void *x, int b16, int64_t n, double mu, double *acc) {
    int64_t i = 0;
    PW_D8 a = PW_D8_LOAD(acc), m = PW_D8_SET1(mu);
    for (; i + REMAT__PARTIALS <= n; i += REMAT__PARTIALS) {
        PW_D8 d = PW_D8_SUB(PW_D8_LD(x, b16, i), m);
        a = PW_D8_ADD(a, PW_D8_MUL(d, d));
    }
    PW_D8_STORE(acc, a);
    _mm256_zeroupper(); /* before SSE code: see the top */
    stat_sq_ref(x, b16, i, n, mu, acc);
}

static void PW_FN(stat_dsum)(const void *x, const void *dy, int b16, int64_t n, double mu, double is, double *ay,
                             double *ax) {
    int64_t i = 0;
    PW_D8 a = PW_D8_LOAD(ay), b = PW_D8_LOAD(ax), m = PW_D8_SET1(mu), s = PW_D8_SET1(is);
    for (; i + REMAT__PARTIALS <= n; i += REMAT__PARTIALS) {
        PW_D8 g = PW_D8_LD(dy, b16, i);
        a = PW_D8_ADD(a, g);
        b = PW_D8_ADD(b, PW_D8_MUL(g, PW_D8_MUL(PW_D8_SUB(PW_D8_LD(x, b16, i), m), s)));
    }
    PW_D8_STORE(ay, a), PW_D8_STORE(ax, b);
    _mm256_zeroupper(); /* before SSE code: see the top */
    stat_dsum_ref(x, dy, b16, i, n, mu, is, ay, ax);
}

static void PW_FN(bn_apply)(const void *x, void *y, int b16, int64_t n, float mu, float sc, float b) {
    int64_t i = 0;
    PW_V m = PW_SET1(mu), s = PW_SET1(sc), c = PW_SET1(b);
    for (; i + PW_N <= n; i += PW_N) PW_ST(y, b16, i, PW_ADD(PW_MUL(PW_SUB(PW_LD(x, b16, i), m), s), c));
    _mm256_zeroupper(); /* before SSE code: see the top */
    bn_apply_ref(x, y, b16, i, n, mu, sc, b);
}

static void PW_FN(bn_dx)(const void *x, const void *dy, void *dx, int b16, int64_t n, const float c[5]) {
    int64_t i = 0;
    PW_V mu = PW_SET1(c[0]), is = PW_SET1(c[1]), a = PW_SET1(c[2]), mdy = PW_SET1(c[3]), mdx = PW_SET1(c[4]);
    for (; i + PW_N <= n; i += PW_N) {
        PW_V xhat = PW_MUL(PW_SUB(PW_LD(x, b16, i), mu), is);
        PW_ACC(dx, b16, i, PW_MUL(a, PW_SUB(PW_SUB(PW_LD(dy, b16, i), mdy), PW_MUL(xhat, mdx))));
    }
    _mm256_zeroupper(); /* before SSE code: see the top */
    bn_dx_ref(x, dy, dx, b16, i, n, c);
}

static void PW_FN(acc_n)(void *dst, int d16, const void *grad, int g16, int64_t n) {
    int64_t i = 0;
    for (; i + PW_N <= n; i += PW_N) PW_ACC(dst, d16, i, PW_LD(grad, g16, i));
    _mm256_zeroupper(); /* before SSE code: see the top */
    acc_n_ref(dst, d16, grad, g16, i, n);
}

static const remat__pw16_kernels PW_FN(kernels) = {
    .isa = PW_ISA,
    .relu_fwd = PW_FN(relu_fwd),
    .relu_bwd = PW_FN(relu_bwd),
    .add_fwd = PW_FN(add_fwd),
    .add_bwd = PW_FN(add_bwd),
    .mul_fwd = PW_FN(mul_fwd),
    .mul_bwd = PW_FN(mul_bwd),
    .gelu_fwd = PW_FN(gelu_fwd),
    .gelu_bwd = PW_FN(gelu_bwd),
    .exp_sub = PW_FN(exp_sub),
    .philox16 = PW_PHILOX,
    .adamw = PW_FN(adamw),
    .convert = PW_FN(convert),
    .stat_sum = PW_FN(stat_sum),
    .stat_sq = PW_FN(stat_sq),
    .stat_dsum = PW_FN(stat_dsum),
    .bn_apply = PW_FN(bn_apply),
    .bn_dx = PW_FN(bn_dx),
    .acc_n = PW_FN(acc_n),
};
