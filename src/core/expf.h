/* expf.h: e^x in float32 by one fixed sequence of float32 operations,
 * written out so that a vector kernel can repeat it lane by lane and get
 * the same bits as this scalar one (glibc's expf cannot be repeated: its
 * table and its rounding are its own). The CPU kernels that exponentiate
 * on vectors (GELU's tanh form: src/ops/pw16.c) and their scalar
 * reference both call this.
 *
 * Cody and Waite's reduction and Cephes' polynomial (Moshier's expf):
 *   n = round(x log2 e)                 (by adding and subtracting 1.5 2^23)
 *   r = x - n C1 - n C2                 (C1 + C2 = ln 2, C1 exact in 9 bits)
 *   e^r = 1 + r + r^2 p(r)              (p of degree 5, |r| <= ln2 / 2)
 *   e^x = e^r 2^n                       (2^n built from its exponent bits)
 * within 2 ulp of e^x on its range (test_pw16 measures it against double
 * exp). Every operation is rounded on its own: C11 mode keeps GCC from
 * contracting a product and a sum into one fused operation, here and in
 * the vector copies.
 *
 * Range: x > 88 gives +inf (e^88 is 1.65e38, 2^127 is the largest 2^n
 * the exponent bits hold), x < -87 gives +0 (e^-87 is 1.6e-38, at the
 * bottom of float32's normal numbers), a NaN itself.
 */
#ifndef REMAT_CORE_EXPF_H
#define REMAT_CORE_EXPF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define REMAT__EXP_HI 88.0f
#define REMAT__EXP_LO -87.0f
#define REMAT__EXP_LOG2E 1.44269504088896341f
#define REMAT__EXP_MAGIC 12582912.0f /* 1.5 2^23: adding it rounds to an integer */
#define REMAT__EXP_C1 0.693359375f
#define REMAT__EXP_C2 -2.12194440e-4f
#define REMAT__EXP_P0 1.9875691500e-4f
#define REMAT__EXP_P1 1.3981999507e-3f
#define REMAT__EXP_P2 8.3334519073e-3f
#define REMAT__EXP_P3 4.1665795894e-2f
#define REMAT__EXP_P4 1.6666665459e-1f
#define REMAT__EXP_P5 5.0000001201e-1f

static inline float remat__expf(float x) {
    if (x > REMAT__EXP_HI) return INFINITY;
    if (x < REMAT__EXP_LO) return 0.0f;
    if (x != x) return x;
    float n = (x * REMAT__EXP_LOG2E + REMAT__EXP_MAGIC) - REMAT__EXP_MAGIC;
    float r = x - n * REMAT__EXP_C1;
    r = r - n * REMAT__EXP_C2;
    float p = REMAT__EXP_P0;
    p = p * r + REMAT__EXP_P1;
    p = p * r + REMAT__EXP_P2;
    p = p * r + REMAT__EXP_P3;
    p = p * r + REMAT__EXP_P4;
    p = p * r + REMAT__EXP_P5;
    float y = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return y * s;
}

#endif
