/* test_peak_memo.c: the peaks of schedules already measured (peak_memo.h).
 *
 * On resnet18's training step (batch 2 at 16x16): for store-all and 40
 * schedules that recompute a random third of the nodes, the peak the memo
 * gives is the one the schedule's memory plan gives, measured the first
 * time (a miss) and found the second (a hit), and each distinct schedule
 * is kept once. A schedule's key is the same for a copy of it and changes
 * with any one field of any one instruction (kind, category, aux
 * category, first, node, value) and with its loss, fetch and mode. The
 * table keeps 20,000 keys through its growth, each with its own peak, and
 * misses keys it was not given. A level mask measured through the memo
 * (remat__level_peak) gives the peak, cost and work it gives without it,
 * and a pruning through it (remat__prune) keeps the schedule and takes
 * the work it does without it.
 */
#include "check.h"

#include "../src/plan/peak_memo.h"
#include "../src/plan/refine.h"
#include "../src/remat-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static int same(remat__skey a, remat__skey b) { return a.a == b.a && a.b == b.b; }

/* The memo's peaks against the memory plan's, on real schedules. */
static void peaks(const remat__prog *p, remat_node loss) {
    const remat_graph *g = p->g;
    remat__peak_memo memo = {0};
    uint8_t *level = malloc((size_t)g->n + 1);
    int distinct = 0;
    for (int t = 0; t <= 40 && level; t++) {
        for (int32_t u = 0; u < g->n; u++) level[u] = t && next() % 3 == 0 ? REMAT__LEVEL_NONE : 0;
        remat__schedule sc = {0};
        CHECK_OK(remat__schedule_build(p, loss, REMAT_NONE, 1, 1, t ? level : NULL, &sc));
        size_t want = 0, got = 0, again = 0;
        CHECK_OK(remat__values_peak(p, &sc, &want));
        long before = memo.hits;
        CHECK_OK(remat__values_peak_memo(p, &sc, &got, &memo));
        distinct += memo.hits == before; /* measured: not asked before */
        long first = memo.hits;
        CHECK_OK(remat__values_peak_memo(p, &sc, &again, &memo));
        CHECK_MSG(got == want && again == want && memo.hits == first + 1,
                  "schedule %d: peak %zu, the memo's %zu then %zu (hits %ld, then %ld)", t, want, got, again, first,
                  memo.hits);
        remat__schedule_free(&sc);
    }
    CHECK_MSG(memo.n == (size_t)distinct, "%zu schedules kept, %d distinct", memo.n, distinct);
    printf("peaks: 41 schedules, %d distinct, each measured once (%ld of %ld asks found)\n", distinct, memo.hits,
           memo.asks);
    free(level);
    remat__peak_memo_free(&memo);
}

/* Any one field of any one instruction, and the schedule's own fields,
 * change its key. */
static void keys(const remat__prog *p, remat_node loss) {
    remat__schedule sc = {0};
    CHECK_OK(remat__schedule_build(p, loss, REMAT_NONE, 1, 1, NULL, &sc));
    remat__skey k0 = remat__schedule_key(&sc);
    remat__schedule copy = sc;
    copy.ins = malloc((size_t)sc.n * sizeof *copy.ins);
    if (!copy.ins) return;
    memcpy(copy.ins, sc.ins, (size_t)sc.n * sizeof *copy.ins);
    CHECK(same(remat__schedule_key(&copy), k0));
    int changed = 0, tried = 0;
    for (int t = 0; t < 200; t++) {
        int i = (int)(next() % (uint64_t)sc.n), f = (int)(next() % 6);
        remat__instr keep = copy.ins[i];
        remat__instr *in = &copy.ins[i];
        if (f == 0) in->kind ^= 1;
        if (f == 1) in->cat ^= 1;
        if (f == 2) in->aux_cat ^= 2;
        if (f == 3) in->first ^= 1;
        if (f == 4) in->node += 1;
        if (f == 5) in->value += 1 + (int32_t)(next() % 2);
        tried++, changed += !same(remat__schedule_key(&copy), k0);
        copy.ins[i] = keep;
    }
    CHECK_MSG(changed == tried, "%d of %d one-field changes changed the key", changed, tried);
    copy.loss++;
    CHECK(!same(remat__schedule_key(&copy), k0));
    copy.loss--, copy.fetch = loss;
    CHECK(!same(remat__schedule_key(&copy), k0));
    copy.fetch = sc.fetch, copy.train = !copy.train;
    CHECK(!same(remat__schedule_key(&copy), k0));
    copy.train = sc.train, copy.n--;
    CHECK(!same(remat__schedule_key(&copy), k0));
    printf("keys: a copy's equal; %d of %d one-field changes, loss, fetch, mode and length change it\n", changed,
           tried);
    free(copy.ins);
    remat__schedule_free(&sc);
}

/* Level masks: remat__level_peak with the memo measures what it measures
 * without it (peak, cost, the work taken), sunk or not; a mask's key
 * changes with any one level and with sink. */
static void levels(const remat__prog *p, remat_node loss) {
    const remat_graph *g = p->g;
    remat__peak_memo memo = {0};
    uint8_t *level = malloc((size_t)g->n + 1);
    int agree = 0, tried = 0, keyed = 0;
    for (int t = 0; t < 20 && level; t++) {
        for (int32_t u = 0; u < g->n; u++) level[u] = next() % 3 == 0 ? REMAT__LEVEL_NONE : 0;
        int sink = t % 2;
        size_t pk0 = 0, pk1 = 0, pk2 = 0;
        double c0 = 0, c1 = 0, c2 = 0, w0 = 1e9, w1 = 1e9, w2 = 1e9;
        remat_status s0 = remat__level_peak(p, loss, level, sink, &pk0, &c0, NULL, &w0, NULL);
        remat_status s1 = remat__level_peak(p, loss, level, sink, &pk1, &c1, NULL, &w1, &memo); /* measured */
        remat_status s2 = remat__level_peak(p, loss, level, sink, &pk2, &c2, NULL, &w2, &memo); /* found */
        tried++;
        agree += s0 == s1 && s1 == s2 && pk0 == pk1 && pk1 == pk2 && c0 == c1 && c1 == c2 && w0 == w1 && w1 == w2;
        remat__skey k = remat__level_key(level, g->n, sink, loss);
        int32_t u = (int32_t)(next() % (uint64_t)g->n);
        level[u] ^= 1;
        keyed += !same(remat__level_key(level, g->n, sink, loss), k) &&
                 !same(remat__level_key(level, g->n, !sink, loss), remat__level_key(level, g->n, sink, loss));
    }
    CHECK_MSG(agree == tried && keyed == tried && memo.hits >= tried / 2,
              "%d of %d masks measured alike with the memo, %d keys changed, %ld found", agree, tried, keyed,
              memo.hits);
    printf("levels: %d of %d masks measure alike with and without the memo (%ld found)\n", agree, tried, memo.hits);
    free(level);
    remat__peak_memo_free(&memo);
}

static int same_schedule(const remat__schedule *a, const remat__schedule *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->ins[i].kind != b->ins[i].kind || a->ins[i].node != b->ins[i].node || a->ins[i].value != b->ins[i].value)
            return 0;
    return 1;
}

/* Pruning through the memo (twice: its tries measured, then found)
 * keeps what pruning without it keeps and takes the same work. */
static void prunings(const remat__prog *p, remat_node loss) {
    const remat_graph *g = p->g;
    remat__peak_memo memo = {0};
    uint8_t *level = malloc((size_t)g->n + 1);
    int agree = 0, tried = 0, dropped = 0;
    for (int t = 0; t < 12 && level; t++) {
        for (int32_t u = 0; u < g->n; u++) level[u] = next() % 2 ? REMAT__LEVEL_NONE : 0;
        remat__schedule sc[3] = {{0}};
        double work[3] = {1e7, 1e7, 1e7};
        for (int k = 0; k < 3; k++) {
            CHECK_OK(remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, &sc[k]));
            if (k == 0) dropped -= sc[0].n;
            CHECK_OK(remat__prune(p, &sc[k], &work[k], k ? &memo : NULL));
        }
        tried++;
        agree +=
            same_schedule(&sc[0], &sc[1]) && same_schedule(&sc[0], &sc[2]) && work[0] == work[1] && work[1] == work[2];
        dropped += sc[0].n;
        for (int k = 0; k < 3; k++) remat__schedule_free(&sc[k]);
    }
    CHECK_MSG(agree == tried && dropped < 0 && memo.hits > 0,
              "%d of %d prunings alike with and without the memo (%ld found; %d instructions dropped)", agree, tried,
              memo.hits, -dropped);
    printf("prunings: %d of %d alike with and without the memo, the same work (%ld tries found)\n", agree, tried,
           memo.hits);
    free(level);
    remat__peak_memo_free(&memo);
}

/* The table through its growth. */
static void table(void) {
    enum { N = 20000 };
    remat__peak_memo memo = {0};
    remat__skey *k = malloc(N * sizeof *k);
    if (!k) return;
    for (int i = 0; i < N; i++) k[i] = (remat__skey){next() | 1, next()};
    for (int i = 0; i < N; i++) remat__peak_memo_put(&memo, k[i], (remat__measured){(size_t)i * 7, i, -i, i % 5});
    int found = 0, missed = 0;
    for (int i = 0; i < N; i++) {
        remat__measured v;
        found += remat__peak_memo_get(&memo, k[i], &v) && v.peak == (size_t)i * 7 && v.cost == i && v.work == -i &&
                 v.runs == i % 5;
        remat__skey other = {k[i].a, k[i].b ^ 1}; /* the same slot, another key */
        missed += !remat__peak_memo_get(&memo, other, &v);
    }
    CHECK_MSG(found == N && missed == N && memo.n == N && memo.cap >= 2 * (size_t)N,
              "%d of %d found, %d missed, %zu kept in %zu slots", found, N, missed, memo.n, memo.cap);
    remat__measured v;
    CHECK(!remat__peak_memo_get(NULL, k[0], &v));
    remat__peak_memo_put(NULL, k[0], (remat__measured){1, 1, 1, 1}); /* no memo: nothing kept, nothing fails */
    printf("table: %d keys kept in %zu slots, each found with its peak; %d others missed\n", found, memo.cap, missed);
    free(k);
    remat__peak_memo_free(&memo);
}

int main(void) {
    remat_graph *g = NULL;
    remat_model m;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "resnet18"));
    mo.batch = 2, mo.height = 16, mo.width = 16, mo.classes = 10, mo.base_channels = 4;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat__prog p;
    CHECK_OK(remat__prog_init(&p, g, 1, REMAT_DEVICE_CPU, NULL));
    peaks(&p, m.loss);
    keys(&p, m.loss);
    levels(&p, m.loss);
    prunings(&p, m.loss);
    table();
    remat__prog_free(&p);
    remat_graph_destroy(g);
    return check_exit("test_peak_memo");
}
