/* strategy.c: the table of planners, one per strategy (planner.h), and
 * the strategies' names. The hand strategies (all, manual, sqrt) are
 * checkpoint levels (levels.c) made into a schedule by build.c; optimal is
 * optimal.c.
 */
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------- the table */

/* A strategy given as checkpoint levels (all, manual, sqrt). */
static remat_status plan_levels(const remat__plan_req *r, remat_strategy st, remat__planned *out) {
    uint8_t *level = NULL;
    remat__schedule sc = {0};
    remat_status rc = remat__strategy_levels(r->p->g, st, &level);
    if (rc == REMAT_OK) rc = remat__schedule_build(r->p, r->loss, REMAT_NONE, 1, 1, level, &sc);
    free(level);
    if (rc == REMAT_OK) return remat__plan_finish(r, &sc, out);
    remat__schedule_free(&sc);
    return rc;
}

static remat_status plan_all(const remat__plan_req *r, remat__planned *out) {
    return plan_levels(r, REMAT_STRATEGY_ALL, out);
}
static remat_status plan_manual(const remat__plan_req *r, remat__planned *out) {
    return plan_levels(r, REMAT_STRATEGY_MANUAL, out);
}
static remat_status plan_sqrt(const remat__plan_req *r, remat__planned *out) {
    return plan_levels(r, REMAT_STRATEGY_SQRT, out);
}
/* Without a budget there is nothing to trade: store everything. */
static remat_status plan_optimal(const remat__plan_req *r, remat__planned *out) {
    if (!r->budget) return plan_all(r, out);
    return remat__optimal_plan(r, out);
}

const remat__planner remat__planners[REMAT_STRATEGY_COUNT] = {
    [REMAT_STRATEGY_AUTO] = {"auto", "optimal when a budget is given, all without", NULL},
    [REMAT_STRATEGY_ALL] = {"all", "keep everything backward needs (no recomputation)", plan_all},
    [REMAT_STRATEGY_MANUAL] = {"manual", "keep the remat_checkpoint boundaries, recompute between them", plan_manual},
    [REMAT_STRATEGY_SQRT] = {"sqrt", "Chen et al.: about sqrt(n) boundaries at articulation points", plan_sqrt},
    [REMAT_STRATEGY_OPTIMAL] = {"optimal",
                                "the least recomputation within the budget (rotor's DP over stages, "
                                "DTR and selective candidates)",
                                plan_optimal},
};

const char *remat_strategy_str(remat_strategy s) {
    return (unsigned)s < REMAT_STRATEGY_COUNT ? remat__planners[s].name : "unknown";
}

const char *remat_strategy_summary(remat_strategy s) {
    return (unsigned)s < REMAT_STRATEGY_COUNT ? remat__planners[s].summary : "";
}

remat_status remat_strategy_parse(const char *name, remat_strategy *out) {
    char known[256] = "";
    for (int s = 0; s < REMAT_STRATEGY_COUNT; s++) {
        if (name && strcmp(name, remat__planners[s].name) == 0) {
            *out = (remat_strategy)s;
            return REMAT_OK;
        }
        size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, "%s%s", s ? ", " : "", remat__planners[s].name);
    }
    return remat__err(REMAT_NOT_FOUND, "unknown strategy '%s' (known: %s)", name ? name : "", known);
}
