/* relax.c: the plans between optimal.c's candidates. The generators make
 * a few dozen schedules each, so between two candidates on the frontier of
 * held bytes and cost there can be a budget at which neither is the
 * cheapest plan that fits: test_ilp found the rematerialization ILP's
 * optimum 2.79% cheaper than remat's plan at a traced Llama layer's floor,
 * holding 128 bytes more, and gaps of 2-17% on random graphs where the
 * ILP's plan fitted remat's budget. So from each candidate on that
 * frontier, the schedules that keep one more value at a time (relaxation:
 * each step gives back the recomputation that saves the most cost per
 * byte it adds to the peak, while the peak stays below the next frontier
 * candidate's) are candidates too. The steps do not depend on the budget,
 * so the candidate set still does not, and a larger budget still never
 * gets a costlier plan. */
#include "chain.h"
#include "refine.h"
#include "schedule.h"

#include <stdint.h>

/* Whether a saving of s at a peak rise of r beats bs at br. */
static int better(double s, size_t r, double bs, size_t br) {
    if (r == 0 || br == 0) return br != 0 || (r == 0 && s > bs);
    return s * (double)br > bs * (double)r;
}

remat_status remat__relax_step(const remat__prog *p, const remat__schedule *sc, size_t peak, double cost,
                               remat__schedule *out, int *drop, size_t *out_peak, double *out_cost, double *work,
                               remat__relax_seen seen, void *ctx) {
    int found = 0;
    remat_status st = REMAT_OK;
    for (int i = 0; st == REMAT_OK && *work > 0 && i < sc->n; i++) {
        if (sc->ins[i].kind != REMAT__I_FWD || sc->ins[i].first) continue; /* not a recomputation */
        remat__schedule t;
        size_t pk = 0;
        st = remat__without(p, sc, i, &t);
        if (st != REMAT_OK) break;
        *work -= t.n;
        st = remat__values_peak(p, &t, &pk);
        double c = remat__schedule_cost(p, &t);
        if (st == REMAT_OK && c < cost && seen) st = seen(ctx, i, pk, c);
        if (st == REMAT_UNSUPPORTED) st = REMAT_OK; /* it would read a value overwritten in place */
        else if (st == REMAT_OK && c < cost &&
                 (!found || better(cost - c, pk > peak ? pk - peak : 0, cost - *out_cost,
                                   *out_peak > peak ? *out_peak - peak : 0))) {
            if (found) remat__schedule_free(out);
            *out = t, *drop = i, *out_peak = pk, *out_cost = c, found = 1;
            continue;
        }
        remat__schedule_free(&t);
    }
    if (st != REMAT_OK && found) remat__schedule_free(out);
    return st != REMAT_OK ? st : found ? REMAT_OK : REMAT_BUDGET;
}

remat_status remat__tighten_step(const remat__prog *p, remat_node loss, uint8_t *level, const uint8_t *live,
                                 size_t peak, double cost, int32_t *node, size_t *out_peak, double *out_cost,
                                 double *work, remat__relax_seen seen, void *ctx) {
    const remat_graph *g = p->g;
    int found = 0;
    remat_status st = REMAT_OK;
    for (int32_t u = 0; st == REMAT_OK && *work > 0 && u < g->n; u++) {
        if (level[u] != 0 || g->nodes[u].leaf != REMAT__LEAF_NONE || remat__is_resident(&g->nodes[u])) continue;
        if (live && !live[u]) continue; /* not held at the peak: dropping it cannot lower it */
        remat__schedule t;
        size_t pk = 0;
        level[u] = REMAT__LEVEL_NONE;
        st = remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, &t);
        level[u] = 0;
        if (st != REMAT_OK) break;
        *work -= t.n;
        if (!remat__runnable(p, &t, p->recompute_once)) {
            remat__schedule_free(&t);
            continue;
        }
        st = remat__values_peak(p, &t, &pk);
        double c = remat__schedule_cost(p, &t);
        remat__schedule_free(&t);
        if (st == REMAT_UNSUPPORTED) { /* it would read a value overwritten in place */
            st = REMAT_OK;
            continue;
        }
        if (st != REMAT_OK || pk >= peak) continue;
        if (seen) st = seen(ctx, u, pk, c);
        /* the most bytes off the peak per cost added (none added first) */
        double add = c > cost ? c - cost : 0, best = *out_cost > cost ? *out_cost - cost : 0;
        if (!found || (add == 0 ? best > 0 || pk < *out_peak
                                : best > 0 && (double)(peak - pk) * best > (double)(peak - *out_peak) * add))
            *node = u, *out_peak = pk, *out_cost = c, found = 1;
    }
    return st != REMAT_OK ? st : found ? REMAT_OK : REMAT_BUDGET;
}
