/* optimal_exchange.c: the exchange, the last search between `optimal`'s
 * candidates (optimal.c), after the first splitting and before the
 * second. The searches before it (optimal_relax.c) walk from a
 * candidate one value at a time, each step the one that moves the most
 * bytes per cost, so they keep the choices a step made: on test_ilp's traced GPT-2 layer, remat's plans at two
 * budgets recomputed the layer's largest product (its MLP's first
 * linear, 16 KiB, a quarter of a million FLOPs), where the
 * rematerialization ILP's optimum holds the same peak by recomputing
 * a dozen cheap values of 4 KiB each instead, for half the cost (5.66%
 * and 3.81% above the optimum). No one of those small values lowers the
 * peak of the schedule that keeps the product; several do together.
 *
 * So from each candidate on the frontier of what the candidates hold and
 * cost (tightest first), the exchange takes the level mask of what it
 * recomputes, gives back one of its EXCHANGE_KEEP costliest
 * recomputations (the value kept from its first forward), and tightens
 * the mask again (relax.c, remat__tighten_step: the move that takes the
 * most bytes off the peak per cost it adds, the schedules measured with
 * their recomputations sunk, as the candidate is made) until its peak is
 * back at the source's or the cost reaches the source's. A mask so found
 * below the source's cost at no more than its peak is a candidate (sunk),
 * and so is every state on the way that costs less than the source: the
 * exchanged candidates on the frontier are split again (optimal.c), and
 * a state above the source's peak can be where a split gets below it.
 * The target of every search is its source's own peak, never the budget,
 * so the candidate set still does not depend on the budget. The searches
 * build at most EXCHANGE_WORK instructions per planning. */
#include "optimal-impl.h"
#include "refine.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXCHANGE_WORK 1e6
#define EXCHANGE_KEEP 4

/* What one planning's exchange works with. */
typedef struct {
    const gen_ctx *x;
    size_t held_outside;
    uint8_t *level, *live;
    int32_t *group;
    double work;
    cand **cands;
    int *nc, cap;
    uint8_t ***masks; /* the candidates' masks, owned */
    int *n_masks, room;
} exchange;

/* Appends k, with a copy of the mask level, to the candidates. */
static remat_status add(exchange *e, cand k, const uint8_t *level) {
    size_t n = (size_t)e->x->p->g->n;
    if (*e->n_masks == e->room) {
        uint8_t **more = realloc(*e->masks, (size_t)(e->room = 2 * e->room + 8) * sizeof *more);
        if (!more) return remat__err(REMAT_NOMEM, "out of memory planning");
        *e->masks = more;
    }
    uint8_t *m = malloc(n);
    if (!m) return remat__err(REMAT_NOMEM, "out of memory planning");
    memcpy(m, level, n);
    (*e->masks)[(*e->n_masks)++] = m;
    k.mask = m;
    return remat__optimal_append(e->cands, e->nc, &e->cap, k);
}

/* A state of an exchange (e->level, its peak and cost) as a candidate from
 * src, where it costs less than limit. */
static remat_status offer(exchange *e, const cand *src, size_t peak, double cost, double limit) {
    if (cost >= limit) return REMAT_OK;
    cand c = {.gi = src->gi, .j = src->j, .count = src->count, .cost = cost, .lb = peak + e->held_outside};
    c.sink = 1, c.last = -1;
    return add(e, c, e->level);
}

/* e->level, with its peak and cost given, tightened step by step until it
 * holds at most target or costs at least limit, each state on the way a
 * candidate from src (the ones above target are the second splitting's
 * sources: optimal.c): REMAT_OK with the last one's cost where it got
 * there below limit, REMAT_BUDGET where it did not. */
static remat_status tighten_to(exchange *e, const cand *src, size_t target, double limit, size_t *peak, double *cost) {
    const remat__prog *p = e->x->p;
    remat_status st = offer(e, src, *peak, *cost, limit);
    while (st == REMAT_OK && *peak > target && *cost < limit && e->work > 0) {
        int32_t move;
        st = remat__tighten_step(p, e->x->loss, e->level, e->live, REMAT__TIGHTEN_DEPTH, 1, e->group, *peak, *cost,
                                 &move, peak, cost, &e->work, NULL, NULL, e->x->memo);
        if (st != REMAT_OK) break;
        remat__tighten_apply(p->g, e->level, move, e->group);
        st = remat__level_peak(p, e->x->loss, e->level, 1, peak, cost, e->live, &e->work,
                               e->x->memo); /* live: the new peak's */
        if (st == REMAT_OK) st = offer(e, src, *peak, *cost, limit);
    }
    if (st == REMAT_UNSUPPORTED) st = REMAT_BUDGET;
    return st == REMAT_OK && (*peak > target || *cost >= limit) ? REMAT_BUDGET : st;
}

/* The nodes sc recomputes, in mask (dropped, the rest kept), and the
 * EXCHANGE_KEEP costliest of them in keep (-1 past the last). */
static void recomputed(const remat__prog *p, const remat__schedule *sc, uint8_t *mask, int32_t keep[EXCHANGE_KEEP]) {
    memset(mask, 0, (size_t)p->g->n);
    for (int i = 0; i < EXCHANGE_KEEP; i++) keep[i] = -1;
    for (int i = 0; i < sc->n; i++) {
        int32_t u = sc->ins[i].node;
        if (sc->ins[i].kind != REMAT__I_FWD || sc->ins[i].first || mask[u]) continue;
        mask[u] = REMAT__LEVEL_NONE;
        double c = remat__node_rec_seconds(p, &p->g->nodes[u]);
        for (int k = 0; k < EXCHANGE_KEEP; k++) { /* insertion, costliest first, ties by node */
            if (keep[k] >= 0 && remat__node_rec_seconds(p, &p->g->nodes[keep[k]]) >= c) continue;
            memmove(&keep[k + 1], &keep[k], (size_t)(EXCHANGE_KEEP - 1 - k) * sizeof *keep);
            keep[k] = u;
            break;
        }
    }
}

/* The exchanges from candidate src: each of its costliest recomputations
 * given back and the mask tightened again; the ones that end cheaper than
 * the best so far at no more than src's peak are candidates. */
static remat_status exchange_from(exchange *e, const cand *src) {
    const remat__prog *p = e->x->p;
    size_t n = (size_t)p->g->n, target = src->lb - e->held_outside;
    remat__schedule sc;
    double made = 0, best = src->cost;
    remat_status st = e->x->make(e->x, src, &sc, &made);
    if (st != REMAT_OK) return st;
    e->work -= made;
    uint8_t *mask = malloc(n);
    int32_t keep[EXCHANGE_KEEP];
    if (!mask) st = remat__err(REMAT_NOMEM, "out of memory planning");
    if (st == REMAT_OK) recomputed(p, &sc, mask, keep);
    remat__schedule_free(&sc);
    for (int k = 0; st == REMAT_OK && k < EXCHANGE_KEEP && keep[k] >= 0 && e->work > 0; k++) {
        size_t peak = 0;
        double cost = 0;
        memcpy(e->level, mask, n);
        e->level[keep[k]] = 0;
        st = remat__level_peak(p, e->x->loss, e->level, 1, &peak, &cost, e->live, &e->work, e->x->memo);
        if (st == REMAT_OK) st = tighten_to(e, src, target, best, &peak, &cost);
        if (st == REMAT_OK) best = cost;                                  /* the next exchange must do better */
        if (st == REMAT_BUDGET || st == REMAT_UNSUPPORTED) st = REMAT_OK; /* no exchange from this one */
    }
    free(mask);
    return st;
}

remat_status remat__optimal_exchange(const gen_ctx *x, size_t held_outside, cand **cands, int *nc, uint8_t ***masks,
                                     int *n_masks) {
    const remat_graph *g = x->p->g;
    *masks = NULL, *n_masks = 0;
    qsort(*cands, (size_t)*nc, sizeof **cands, remat__optimal_by_lb);
    int n0 = *nc, nf = 0, *front = malloc(((size_t)n0 + 1) * sizeof *front);
    exchange e = {.x = x,
                  .held_outside = held_outside,
                  .work = EXCHANGE_WORK,
                  .cands = cands,
                  .nc = nc,
                  .cap = *nc,
                  .masks = masks,
                  .n_masks = n_masks};
    e.level = malloc((size_t)g->n + 1), e.live = malloc((size_t)g->n + 1);
    e.group = malloc(((size_t)g->n + 1) * sizeof *e.group);
    remat_status st =
        front && e.level && e.live && e.group ? REMAT_OK : remat__err(REMAT_NOMEM, "out of memory planning");
    double least = INFINITY;
    for (int k = 0; st == REMAT_OK && k < n0; k++) /* ascending in what it holds, each cheaper than every one before */
        if ((*cands)[k].cost < least) least = (*cands)[k].cost, front[nf++] = k;
    for (int f = 0; f < nf && st == REMAT_OK && e.work > 0; f++) {
        cand src = (*cands)[front[f]]; /* a copy: adding may move the array */
        st = exchange_from(&e, &src);
    }
    free(front), free(e.level), free(e.live), free(e.group);
    return st;
}
