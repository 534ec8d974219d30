/* peak_memo.c: the peaks of schedules already measured (peak_memo.h). */
#include "peak_memo.h"

#include <stdlib.h>

_Static_assert(REMAT_MEM_COUNT <= 16, "a category takes 4 bits of a schedule key's word");

void remat__peak_memo_free(remat__peak_memo *m) {
    free(m->key);
    free(m->val);
    *m = (remat__peak_memo){0};
}

/* One 64-bit word into a running hash (a multiply and an xor-shift per
 * word, as in splitmix64's finalizer). */
static uint64_t mix(uint64_t h, uint64_t w, uint64_t k) {
    h = (h ^ w) * k;
    return h ^ (h >> 31);
}

remat__skey remat__schedule_key(const remat__schedule *sc) {
    const uint64_t ka = 0x9e3779b97f4a7c15ull, kb = 0xbf58476d1ce4e5b9ull;
    uint64_t head = (uint64_t)(uint32_t)sc->loss | (uint64_t)(uint32_t)sc->fetch << 32;
    uint64_t mode = (uint64_t)(sc->train != 0) | (uint64_t)(sc->backward != 0) << 1;
    remat__skey s = {mix(mix(0x243f6a8885a308d3ull, head, ka), mode, ka),
                     mix(mix(0x13198a2e03707344ull, mode, kb), head, kb)};
    for (int i = 0; i < sc->n; i++) {
        /* one word per instruction, distinct for distinct instructions: a
         * FREE's, OUT's or IN's value is 3 node + its kind, a REDUCE's its
         * bucket (below 2^20 buckets), a FWD's or BWD's unused */
        const remat__instr *in = &sc->ins[i];
        uint64_t w = (uint64_t)(uint32_t)in->node | (uint64_t)(in->kind & 7) << 32 | (uint64_t)(in->cat & 15) << 35 |
                     (uint64_t)(in->aux_cat & 15) << 39 | (uint64_t)(in->first & 1) << 43 |
                     (uint64_t)((uint32_t)in->value & 0xfffff) << 44;
        s.a = mix(s.a, w, ka);
        s.b = mix(s.b, w, kb);
    }
    if (!s.a && !s.b) s.a = 1; /* {0, 0} marks an empty slot */
    return s;
}

remat__skey remat__level_key(const uint8_t *level, int32_t n, int sink, remat_node loss) {
    const uint64_t ka = 0x94d049bb133111ebull, kb = 0xd6e8feb86659fd93ull;
    uint64_t head = (uint64_t)(uint32_t)n | (uint64_t)(uint32_t)loss << 32;
    remat__skey s = {mix(mix(0xa4093822299f31d0ull, head, ka), (uint64_t)(sink != 0), ka),
                     mix(mix(0x082efa98ec4e6c89ull, (uint64_t)(sink != 0), kb), head, kb)};
    int32_t u = 0;
    for (; u + 8 <= n; u += 8) { /* eight levels a word */
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= (uint64_t)level[u + k] << 8 * k;
        s.a = mix(s.a, w, ka);
        s.b = mix(s.b, w, kb);
    }
    uint64_t w = 0;
    for (int k = 0; u + k < n; k++) w |= (uint64_t)level[u + k] << 8 * k;
    s.a = mix(s.a, w, ka);
    s.b = mix(s.b, w, kb);
    if (!s.a && !s.b) s.a = 1;
    return s;
}

/* The slot of key: its own, or the empty one where it would go. */
static size_t slot(const remat__peak_memo *m, remat__skey key) {
    size_t i = (size_t)key.a & (m->cap - 1);
    while ((m->key[i].a || m->key[i].b) && (m->key[i].a != key.a || m->key[i].b != key.b)) i = (i + 1) & (m->cap - 1);
    return i;
}

int remat__peak_memo_get(remat__peak_memo *m, remat__skey key, remat__measured *out) {
    if (!m) return 0;
    m->asks++;
    if (!m->cap) return 0;
    size_t i = slot(m, key);
    if (!m->key[i].a && !m->key[i].b) return 0;
    *out = m->val[i];
    m->hits++;
    return 1;
}

/* Doubles the table (or makes its first 1024 slots). 0 when out of
 * memory (the table as it was). */
static int grow(remat__peak_memo *m) {
    size_t cap = m->cap ? 2 * m->cap : 1024;
    remat__peak_memo g = {.key = calloc(cap, sizeof *g.key), .val = malloc(cap * sizeof *g.val), .cap = cap};
    if (!g.key || !g.val) {
        free(g.key), free(g.val);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->key[i].a || m->key[i].b) {
            size_t j = slot(&g, m->key[i]);
            g.key[j] = m->key[i], g.val[j] = m->val[i], g.n++;
        }
    g.hits = m->hits, g.asks = m->asks;
    free(m->key), free(m->val);
    *m = g;
    return 1;
}

void remat__peak_memo_put(remat__peak_memo *m, remat__skey key, remat__measured v) {
    if (!m || (2 * (m->n + 1) > m->cap && !grow(m))) return;
    size_t i = slot(m, key);
    if (!m->key[i].a && !m->key[i].b) m->n++;
    m->key[i] = key, m->val[i] = v;
}
