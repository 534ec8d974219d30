/* philox.h: the Philox4x32-10 counter-based generator (Salmon, Moraes,
 * Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 *
 * A counter-based generator has no state: the output is a pure function of
 * (counter, key), so a recomputed dropout mask is the same mask, with
 * nothing saved between the two executions. It is inline because dropout
 * calls it once per four elements: as a call it cost more than its ten
 * rounds.
 */
#ifndef REMAT_PHILOX_H
#define REMAT_PHILOX_H

#include <stdint.h>

/* Compiled for the host and, in the CUDA backend, for the device: the
 * same streams on both. */
#ifdef __CUDACC__
#define REMAT__HD __host__ __device__
#else
#define REMAT__HD
#endif

#define REMAT__PHILOX_M0 0xD2511F53u
#define REMAT__PHILOX_M1 0xCD9E8D57u
#define REMAT__PHILOX_W0 0x9E3779B9u
#define REMAT__PHILOX_W1 0xBB67AE85u

static inline REMAT__HD uint32_t remat__mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

static inline REMAT__HD void remat__philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = remat__mulhilo(REMAT__PHILOX_M0, c0, &hi0);
        uint32_t lo1 = remat__mulhilo(REMAT__PHILOX_M1, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += REMAT__PHILOX_W0;
        k1 += REMAT__PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* remat__philox for the four counters (q + i, c1, c2, c3 ^ ((q + i) >> 32)),
 * i < 4, out[4 i + j] = word j of counter i. The four chains are
 * interleaved round by round: each round's multiplies wait on the last
 * round's, and four independent chains keep the multiplier busy. */
static inline REMAT__HD void remat__philox_x4(uint64_t q, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2],
                                              uint32_t out[16]) {
    uint32_t a[4], b[4], c[4], d[4];
    for (int i = 0; i < 4; i++) {
        uint64_t qi = q + (uint64_t)i;
        a[i] = (uint32_t)qi, b[i] = c1, c[i] = c2, d[i] = c3 ^ (uint32_t)(qi >> 32);
    }
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 4; i++) {
            uint32_t hi0, hi1;
            uint32_t lo0 = remat__mulhilo(REMAT__PHILOX_M0, a[i], &hi0);
            uint32_t lo1 = remat__mulhilo(REMAT__PHILOX_M1, c[i], &hi1);
            a[i] = hi1 ^ b[i] ^ k0, b[i] = lo1, c[i] = hi0 ^ d[i] ^ k1, d[i] = lo0;
        }
        k0 += REMAT__PHILOX_W0;
        k1 += REMAT__PHILOX_W1;
    }
    for (int i = 0; i < 4; i++) out[4 * i] = a[i], out[4 * i + 1] = b[i], out[4 * i + 2] = c[i], out[4 * i + 3] = d[i];
}

/* A uniform float in [0,1) with 24 random bits, from one word. */
static inline REMAT__HD float remat__u01(uint32_t r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }

#endif
