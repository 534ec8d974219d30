/* strategy.c: the strategies, each a keep mask for build.c, and the
 * summary of a schedule (memory from the simulator, FLOPs and seconds from
 * the op table and a per-op cost model).
 *
 * - all: keep everything (keep = NULL).
 * - manual: keep the nodes marked with remat_checkpoint outside any
 *   remat_checkpoint_begin/end scope, the inputs, and everything after the
 *   last such mark; marks inside k scopes are nested boundaries of level k,
 *   kept only while the enclosing segment is being recomputed. A traced
 *   step (a graph file) with checkpoint regions: per-layer checkpointing
 *   of them (region_levels).
 * - sqrt: Chen et al.'s scheme: among the graph's articulation points (the
 *   nodes every path from the inputs to the loss goes through), keep
 *   round(sqrt(k)) - 1 evenly spaced ones, dropping the rest, and keep the
 *   last segment (its backward starts right after its forward).
 */
#include "memplan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------- the table */

remat_status remat__plan_finish(const remat__plan_req *r, remat__schedule *sc, remat__planned *out) {
    remat_status st = REMAT_OK;
    if (r->buckets) st = remat__schedule_add_reduces(r->p, sc, r->buckets->bucket_of, r->buckets->nb, r->buckets->at_end);
    out->sc = *sc;
    memset(sc, 0, sizeof *sc);
    if (st == REMAT_OK) st = remat__memplan_make(r->p, &out->sc, &out->mem);
    out->valid = st == REMAT_OK;
    return st;
}

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
    [REMAT_STRATEGY_MANUAL] = {"manual", "keep the remat_checkpoint boundaries, recompute between them",
                               plan_manual},
    [REMAT_STRATEGY_SQRT] = {"sqrt", "Chen et al.: about sqrt(n) boundaries at articulation points", plan_sqrt},
    [REMAT_STRATEGY_OPTIMAL] = {"optimal", "the least recomputation within the budget (rotor's DP over stages, "
                                "DTR and selective candidates)", plan_optimal},
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

int remat__has_regions(const remat_graph *g) {
    for (int u = 0; g->traced && u < g->n; u++)
        if (g->traced[u].region) return 1;
    return 0;
}

/* A traced step's checkpoint regions as levels: per-layer checkpointing
 * (torch.utils.checkpoint around each call of a module): what a region
 * makes is dropped after the forward and recomputed, the region whole,
 * when its backward comes, but for its outputs (what an op outside it
 * reads), which the next region's checkpoint saves; everything outside
 * the regions is kept. */
static remat_status region_levels(const remat_graph *g, uint8_t *level) {
    for (int u = 0; u < g->n; u++)
        level[u] = g->traced[u].region && g->nodes[u].leaf == REMAT__LEAF_NONE ? REMAT__LEVEL_NONE : 0;
    for (int v = 0; v < g->n; v++)
        for (int k = 0; k < g->nodes[v].n_in; k++) {
            int32_t u = g->nodes[v].in[k];
            if (g->traced[u].region && g->traced[u].region != g->traced[v].region) level[u] = 0;
        }
    return REMAT_OK;
}

remat_status remat__strategy_levels(const remat_graph *g, remat_strategy st, uint8_t **level_out) {
    *level_out = NULL;
    if (st == REMAT_STRATEGY_ALL || st == REMAT_STRATEGY_AUTO || st == REMAT_STRATEGY_OPTIMAL) return REMAT_OK;
    int n = g->n;
    if (st == REMAT_STRATEGY_MANUAL && remat__has_regions(g)) {
        uint8_t *level = malloc((size_t)n + 1);
        if (!level) return remat__err(REMAT_NOMEM, "out of memory planning");
        *level_out = level;
        return region_levels(g, level);
    }
    uint8_t *level = malloc((size_t)n + 1);
    int32_t *cand = malloc(((size_t)n + 1) * sizeof *cand);
    if (!level || !cand) {
        free(level), free(cand);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    memset(level, REMAT__LEVEL_NONE, (size_t)n);
    int32_t last = -1; /* the last level-0 boundary */
    if (st == REMAT_STRATEGY_MANUAL) {
        for (int u = 0; u < n; u++) {
            int c = g->nodes[u].checkpoint;
            if (!c) continue;
            level[u] = (uint8_t)(c - 1 < REMAT__LEVEL_NONE ? c - 1 : REMAT__LEVEL_NONE - 1);
            if (c == 1) last = u;
        }
    } else if (st == REMAT_STRATEGY_SQRT) {
        int32_t *reach = malloc(((size_t)n + 1) * sizeof *reach);
        if (!reach) {
            free(level), free(cand);
            return remat__err(REMAT_NOMEM, "out of memory planning");
        }
        int k = remat__cut_points(g, NULL, cand, reach);
        free(reach);
        int nseg = (int)lround(sqrt((double)k));
        for (int j = 1; j < nseg; j++) {
            int32_t u = cand[(int64_t)j * k / nseg];
            level[u] = 0;
            last = u;
        }
    } else {
        free(level), free(cand);
        return remat__err(REMAT_INVALID, "unknown strategy %d", (int)st);
    }
    for (int u = 0; u < n; u++)
        if (g->nodes[u].leaf != REMAT__LEAF_NONE || u > last) level[u] = 0;
    free(cand);
    *level_out = level;
    return REMAT_OK;
}

remat_status remat__schedule_summary(const remat__prog *p, const remat__planned *pl, const remat_mem_stats *start,
                                     size_t held_outside, remat_plan_summary *out) {
    const remat_graph *g = p->g;
    const remat__schedule *s = &pl->sc;
    memset(out, 0, sizeof *out);
    remat__memplan_peaks(&pl->mem, start, &out->predicted);
    out->arena_bytes = pl->mem.arena;
    out->held_bytes = pl->mem.arena + held_outside;
    out->placement = pl->mem.placer;
    uint8_t *again = calloc((size_t)g->n, 1);
    if (!again) {
        return remat__err(REMAT_NOMEM, "out of memory summarizing a plan");
    }
    out->instructions = s->n;
    for (int i = 0; i < s->n; i++) {
        const remat__instr *in = &s->ins[i];
        out->offloaded_values += in->kind == REMAT__I_OUT;
        if (in->kind != REMAT__I_FWD && in->kind != REMAT__I_BWD) continue;
        const remat__node *n = &g->nodes[in->node];
        double f = remat__node_flops(g, n), t = remat__node_seconds(p, n);
        if (in->kind == REMAT__I_BWD) {
            out->flops += 2 * f, out->seconds += remat__node_bwd_seconds(p, n);
        } else if (in->first) {
            out->forwards++;
            out->flops += f, out->seconds += t;
        } else {
            out->forwards++, out->recomputations++;
            out->extra_flops += f, out->extra_seconds += remat__node_rec_seconds(p, n);
            if (!again[in->node]) again[in->node] = 1, out->recomputed_nodes++;
        }
    }
    out->seconds += out->extra_seconds + s->stall;
    out->stall_seconds = s->stall;
    out->host_bytes = pl->mem.host_arena;
    free(again);
    /* Each cost is bounded (cost.c, the graph reader), so this sum stays
     * finite; a cost that got past them is refused, not printed as inf. */
    if (!isfinite(out->seconds))
        return remat__err(REMAT_INVALID, "the step's predicted cost overflows (%g %s over %d instructions): a node "
                          "costs more than a step can sum", out->seconds, p->cost.calibrated ? "s" : "FLOPs", s->n);
    out->calibrated = p->cost.calibrated;
    out->planner = s->origin ? s->origin : "levels";
    snprintf(out->candidate, sizeof out->candidate, "%s", s->candidate);
    return REMAT_OK;
}
