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
 *   PW_ADD, PW_MUL     float32 arithmetic, lane by lane
 *   PW_RELU(x)         x <= 0 ? +0 : x (NaN stays)
 *   PW_RELU_G(y, g)    y <= 0 ? -0 : g
 *   PW_FN(name)        the level's name for a kernel
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

static void PW_FN(convert)(void *dst, const void *src, int64_t lo, int64_t hi, remat__cvt kind) {
    int64_t i = lo;
    if (kind == REMAT__CVT_UP)
        for (; i + PW_N <= hi; i += PW_N) PW_ST(dst, 0, i, PW_LD(src, 1, i));
    else if (kind == REMAT__CVT_DOWN)
        for (; i + PW_N <= hi; i += PW_N) PW_ST(dst, 1, i, PW_LD(src, 0, i));
    else if (kind == REMAT__CVT_ACC_BF16)
        for (; i + PW_N <= hi; i += PW_N) PW_ACCR(dst, i, PW_LD(src, 0, i));
    _mm256_zeroupper();
    remat__convert_range(dst, src, i, hi, kind);
}

static const remat__pw16_kernels PW_FN(kernels) = {
    .isa = PW_ISA,
    .relu_fwd = PW_FN(relu_fwd),
    .relu_bwd = PW_FN(relu_bwd),
    .add_fwd = PW_FN(add_fwd),
    .add_bwd = PW_FN(add_bwd),
    .mul_fwd = PW_FN(mul_fwd),
    .mul_bwd = PW_FN(mul_bwd),
    .convert = PW_FN(convert),
};
