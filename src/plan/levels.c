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
 *
 * And the keep masks of optimal.c's keep-expensive and drop-expensive
 * candidates (remat__selective_levels).
 */
#include "chain.h"
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

/* The memory-efficient form of dense and branchy graphs, for optimal.c's
 * candidates: keep the outputs of the expensive nodes (linear, conv) and
 * of the nodes after the last of them, drop every cheap value (concat,
 * normalization, pointwise, pooling) and recompute it from the kept ones
 * just before the backward that reads it (build.c's segment
 * recomputation). The j-th of n also drops the expensive outputs that are
 * cheapest to recompute per byte, in that order, until j/n of their bytes
 * are gone: on DenseNet it drops the bottleneck convolutions' wide outputs
 * first (a 1x1 convolution from few channels costs little per byte) and
 * keeps each layer's new features, the per-layer checkpointing people
 * write by hand, at the end. With keep_cheap, every cheap value is kept
 * too (drop-expensive: store-all less those expensive products), which is
 * what the rematerialization ILP's optimum does at the floor of a traced
 * MLP with BatchNorm (test_ilp's mlp_bn: drop the first linear's output
 * once BatchNorm's forward has read it, recompute it from the input just
 * before BatchNorm's backward): a non-persistent schedule, outside the
 * chain DP's space, 9.4% cheaper than the chain's plan there. */
typedef struct {
    double per_byte; /* forward cost of recomputing per byte kept */
    size_t bytes;
    int32_t node;
} exp_node;

static int by_cost_per_byte(const void *a, const void *b) {
    const exp_node *x = a, *y = b;
    if (x->per_byte != y->per_byte) return x->per_byte < y->per_byte ? -1 : 1;
    return (x->node > y->node) - (x->node < y->node);
}

remat_status remat__selective_levels(const remat__prog *p, int j, int n, int keep_cheap, uint8_t **level_out) {
    const remat_graph *g = p->g;
    uint8_t *level = malloc((size_t)g->n + 1);
    exp_node *e = malloc(((size_t)g->n + 1) * sizeof *e);
    *level_out = NULL;
    if (!level || !e) {
        free(level), free(e);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    int32_t last = -1;
    for (int32_t u = 0; u < g->n; u++)
        if (g->nodes[u].leaf == REMAT__LEAF_NONE && remat__expensive(g, &g->nodes[u])) last = u;
    int ne = 0;
    size_t total = 0;
    for (int32_t u = 0; u < g->n; u++) {
        const remat__node *nd = &g->nodes[u];
        level[u] =
            keep_cheap || nd->leaf != REMAT__LEAF_NONE || u >= last || remat__expensive(g, nd) ? 0 : REMAT__LEVEL_NONE;
        if (nd->leaf == REMAT__LEAF_NONE && u < last && remat__expensive(g, nd)) {
            size_t b = (size_t)remat__vbytes(p, nd);
            e[ne++] = (exp_node){remat__node_rec_seconds(p, nd) / (double)(b ? b : 1), b, u};
            total += b;
        }
    }
    qsort(e, (size_t)ne, sizeof *e, by_cost_per_byte);
    size_t dropped = 0, goal = (size_t)((double)total * j / n);
    for (int i = 0; i < ne && dropped < goal; i++) {
        level[e[i].node] = REMAT__LEVEL_NONE;
        dropped += e[i].bytes;
    }
    free(e);
    *level_out = level;
    return REMAT_OK;
}
