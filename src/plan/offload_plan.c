/* offload_plan.c: offload as the optimal planner's third choice beside
 * keeping and recomputing (memplan.h, remat__offload_plan).
 *
 * The chain `optimal` plans over is solved by the offload DP (offload.h)
 * at the budget less the resident blocks and at the host budget; its plan
 * becomes a schedule with OUT, FREE and IN instructions where the timeline
 * of offload_sim.c puts the copies (chain.c, remat__chain_schedule),
 * its exposed copy time (the simulated stall) is part of its cost, and its
 * memory plan is built and placed like any candidate's: the device arena
 * must fit the budget with the blocks, the host arena the host budget.
 * The chain model's peak is an estimate of the placed arena (optimal.c
 * says where it is not exact), so the DP is tried at a few budgets below
 * the real ones until the placed plan fits. Not at all when the best plan
 * without offload costs what store-all's step does (nothing is cheaper).
 * The DP takes seconds on a long chain (its tables up to 256 MiB), so a
 * plan with a host budget takes that much longer.
 *
 * Ownership: *out is the caller's when *won; nothing else outlives a call.
 */
#include "chain.h"
#include "planner.h"
#include "offload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Budgets tried: the budget, then 1/16 of it less each time. */
#define TRIES 8

/* The offload DP's plan at (device, host) bytes, as a finished candidate
 * in *pl (pl->valid 0 when it offloads nothing, or costs `best` or more:
 * then *dearer, and so would the plans at smaller budgets). */
static remat_status try_budget(const remat__plan_req *r, const remat__stage_ex *st, int n, int64_t output,
                               int64_t device, int64_t host, int slots, double best, int k, remat__planned *pl,
                               int *dearer) {
    remat__link link = {r->host_bandwidth, r->host_latency};
    remat_chain_plan *plan = NULL;
    remat__offload_result res;
    memset(pl, 0, sizeof *pl);
    remat_status rc = remat__offload_solve(st, n, output, link, device, host, slots, 16, &plan, &res);
    if (rc != REMAT_OK || !res.offloaded) {
        remat_chain_plan_destroy(plan);
        return rc;
    }
    remat__schedule sc;
    rc = remat__chain_schedule(r->p, r->loss, plan, &sc);
    remat_chain_plan_destroy(plan);
    if (rc != REMAT_OK) return rc;
    sc.stall = res.stall;
    snprintf(sc.candidate, sizeof sc.candidate, "offload %d/%d", k + 1, TRIES);
    if (remat__schedule_cost(r->p, &sc) >= best) {
        *dearer = 1;
        remat__schedule_free(&sc);
        return REMAT_OK;
    }
    rc = remat__plan_finish(r, &sc, pl);
    if (rc == REMAT_OK) pl->valid = 1;
    return rc;
}

remat_status remat__offload_plan(const remat__plan_req *r, double best, remat__planned *out, int *won) {
    *won = 0;
    if (!r->host_budget || !r->budget || r->budget <= r->held_outside || r->p->g->traced || r->p->recompute_once)
        return REMAT_OK;
    if (!(r->host_bandwidth > 0) || !(r->host_latency >= 0))
        return remat__err(REMAT_INVALID,
                          "offload: a host link of %g bytes and %g per copy (in the cost model's "
                          "units) cannot be planned with",
                          r->host_bandwidth, r->host_latency);
    /* nothing costs less than store-all's step (no recomputation, no
     * copies): when the best plan costs that, offload cannot win */
    remat__schedule all;
    remat_status rc = remat__schedule_build(r->p, r->loss, REMAT_NONE, 1, 1, NULL, &all);
    if (rc != REMAT_OK) return rc;
    double least = remat__schedule_cost(r->p, &all);
    remat__schedule_free(&all);
    if (best <= least) return REMAT_OK;
    remat__stage_ex *st = NULL;
    int n = 0;
    int64_t output = 0;
    rc = remat__optimal_chain(r->p, r->loss, &st, &n, &output, NULL);
    if (rc != REMAT_OK) return rc;
    int slots = remat__offload_slots(n, 16);
    int64_t device = (int64_t)(r->budget - r->held_outside), host = (int64_t)r->host_budget;
    for (int k = 0; k < TRIES && rc == REMAT_OK && !*won; k++) {
        remat__planned pl;
        int dearer = 0;
        rc = try_budget(r, st, n, output, device - device / 16 * k, host - host / 16 * k, slots, best, k, &pl, &dearer);
        if (rc == REMAT_BUDGET) { /* nothing fits the chain model here, nor below */
            rc = REMAT_OK;
            break;
        }
        if (rc != REMAT_OK || !pl.valid) {
            remat__planned_free(&pl);
            /* costs more, as smaller budgets will; or offloads nothing at the
             * budget while a plan without offload fits (where none does,
             * smaller budgets may still offload their way in) */
            if (dearer || (k == 0 && best < INFINITY)) break;
            continue;
        }
        if (pl.mem.arena + r->held_outside <= r->budget && pl.mem.host_arena <= r->host_budget) {
            *out = pl;
            *won = 1;
        } else {
            remat__planned_free(&pl);
        }
    }
    free(st);
    return rc;
}
