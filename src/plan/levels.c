/* levels.c: the hand strategies, each a keep mask (checkpoint levels)
 * for build.c (remat__strategy_levels).
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
#include "schedule.h"

#include <math.h>
#include <stdlib.h>

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
