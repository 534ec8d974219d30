/* fixture_fill.h: the PyTorch fixtures' deterministic initial values
 * (tests/fixtures/README.md), as scripts/gen_fixtures.py and
 * bench/torch/ddp_fixture.py compute them: a parameter's values are
 * fill(name_seed(its state_dict name), numel, bound), uniform on
 * [-bound, bound) from a hash of (seed, index). */
#ifndef REMAT_TEST_FIXTURE_FILL_H
#define REMAT_TEST_FIXTURE_FILL_H

#include <stdint.h>

static inline uint32_t name_seed(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
    return h;
}

static inline uint32_t fixture_hash(uint32_t seed, uint32_t i) {
    uint32_t h = i + 0x9E3779B9u * (seed + 1u);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

static inline void fill(uint32_t seed, int64_t n, float bound, float *out) {
    for (int64_t i = 0; i < n; i++) {
        float u = (float)(fixture_hash(seed, (uint32_t)i) >> 8) * (1.0f / 16777216.0f);
        out[i] = (2.0f * u - 1.0f) * bound;
    }
}

#endif
