/* bf16.h: bfloat16 as the precision policy stores it (remat_precision).
 *
 * A bf16 is a float32's upper 16 bits: float32's range, 8 bits of
 * significand. A float32 becomes bf16 by rounding to nearest, ties to even
 * (a NaN stays a NaN, made quiet, its sign kept; what rounds past the
 * largest bf16 becomes an infinity), as PyTorch's c10::BFloat16 and the
 * AVX-512 BF16 instructions do; a bf16 becomes float32 exactly.
 */
#ifndef REMAT_BF16_H
#define REMAT_BF16_H

#include <stdint.h>
#include <string.h>

/* The same functions on the host and, in CUDA sources, on the device: one
 * rounding for the CPU backend and the CUDA one. */
#ifdef __CUDACC__
#define REMAT__HD __host__ __device__
#else
#define REMAT__HD
#endif

static inline REMAT__HD uint16_t remat__bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline REMAT__HD float remat__f32_of(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded through bf16, as a float32. */
static inline REMAT__HD float remat__bf16_round(float f) { return remat__f32_of(remat__bf16_of(f)); }

/* What a conversion between a value's storage and a kernel's float32
 * buffers does, element by element (remat__backend.convert). */
typedef enum {
    REMAT__CVT_UP = 0,  /* float dst = bf16 src */
    REMAT__CVT_DOWN,    /* bf16 dst = float src, rounded */
    REMAT__CVT_ROUND,   /* float dst = float src rounded through bf16 */
    REMAT__CVT_ACC_F32, /* float dst += float src rounded through bf16 */
    REMAT__CVT_ACC_BF16 /* bf16 dst = (dst + src rounded through bf16), rounded */
} remat__cvt;

/* One conversion of elements [lo, hi): the CPU's, which its pool splits,
 * and each CUDA thread's. */
static inline REMAT__HD void remat__convert_range(void *dst, const void *src, int64_t lo, int64_t hi, remat__cvt kind) {
    float *fd = (float *)dst;
    uint16_t *bd = (uint16_t *)dst;
    const float *fs = (const float *)src;
    const uint16_t *bs = (const uint16_t *)src;
    switch (kind) {
    case REMAT__CVT_UP:
        for (int64_t i = lo; i < hi; i++) fd[i] = remat__f32_of(bs[i]);
        break;
    case REMAT__CVT_DOWN:
        for (int64_t i = lo; i < hi; i++) bd[i] = remat__bf16_of(fs[i]);
        break;
    case REMAT__CVT_ROUND:
        for (int64_t i = lo; i < hi; i++) fd[i] = remat__bf16_round(fs[i]);
        break;
    case REMAT__CVT_ACC_F32:
        for (int64_t i = lo; i < hi; i++) fd[i] += remat__bf16_round(fs[i]);
        break;
    case REMAT__CVT_ACC_BF16:
        for (int64_t i = lo; i < hi; i++) bd[i] = remat__bf16_of(remat__f32_of(bd[i]) + remat__bf16_round(fs[i]));
        break;
    }
}

#endif
