/* build.c: turns checkpoint levels into a schedule.
 *
 * level[u] says from which pass on node u's output is kept for the backward
 * pass: 0 = by the forward pass; d > 0 = by a recomputation at depth d (a
 * nested checkpoint); REMAT__LEVEL_NONE = only in the tail of the pass that
 * computes it. The forward pass keeps level-0 nodes (a strategy gives
 * level 0 to everything it keeps, the tail after its last boundary
 * included) and frees every other output after its last forward use.
 *
 * When a backward needs a value that is not resident, the stretch of
 * dropped nodes around it, from the nearest resident boundary up to the
 * node being differentiated, is recomputed at once (Chen et al.'s sqrt(n)
 * scheme: a segment is recomputed once, not once per node). A
 * recomputation started from a boundary held at depth d runs at depth d+1:
 * it keeps the nodes of level <= d+1 and everything after the last of them
 * (the part whose backward comes next), and drops the rest again, to be
 * recomputed from those nested boundaries when their turn comes. Anything
 * else a recomputation needs that is not resident is recomputed too (the
 * closure of missing ancestors), so any levels give a valid schedule. With
 * everything at level 0 this is the store-all schedule.
 *
 * Frees are emitted as soon as a value has no use left: no forward consumer
 * still to run in the current pass, no backward still to read it (for the
 * values its pass keeps), and, for a boundary that a later recomputation
 * may start from, the backward frontier has passed it. Aux values
 * (BatchNorm's batch statistics) are kept from the first forward to their
 * backward, so a recomputation reuses them and commits no state twice.
 */
#include "schedule.h"

#include <stdlib.h>

typedef struct {
    const remat__prog *p;
    const remat_graph *g;
    const uint8_t *level;
    remat__schedule *out;
    int backward;
    uint8_t *needed;   /* per node: the loss or fetch depends on it */
    uint8_t *res;      /* per value: resident */
    int32_t *pend_bwd; /* per value: backward instructions still to read it */
    int32_t *pend_fwd; /* per node: forward consumers still to run in this pass */
    uint8_t *source;   /* per node: a boundary recomputations may start from */
    uint8_t *held;     /* per node: the pass that computed it keeps it */
    uint8_t *depth;    /* per node: depth of the pass that computed it */
    uint8_t *in_r;     /* scratch: in the current recomputation */
    int32_t *stack;    /* scratch */
    int32_t frontier;  /* nodes > frontier have finished their backward */
    remat_status st;
} builder;

static void emit(builder *b, remat__instr in) {
    if (b->st != REMAT_OK) return;
    remat__schedule *s = b->out;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        remat__instr *ins = realloc(s->ins, (size_t)cap * sizeof *ins);
        if (!ins) {
            b->st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
            return;
        }
        s->ins = ins;
        s->cap = cap;
    }
    s->ins[s->n++] = in;
}

static int is_value_node(const builder *b, int32_t u) { return !remat__is_resident(&b->g->nodes[u]); }

static int out_resident(const builder *b, int32_t u) { return b->res[REMAT__VAL(u, REMAT__V_OUT)]; }

/* Frees v if nothing needs it any more. */
static void maybe_free(builder *b, int32_t v) {
    if (!b->res[v]) return;
    int32_t u = REMAT__VAL_NODE(v);
    switch (REMAT__VAL_KIND(v)) {
    case REMAT__V_OUT:
        if (b->pend_fwd[u] > 0) return;
        if (b->held[u] && b->pend_bwd[v] > 0) return;
        if (b->held[u] && b->source[u] && u < b->frontier) return;
        break;
    case REMAT__V_AUX:
    case REMAT__V_GRAD:
        if (b->pend_bwd[v] > 0) return;
        break;
    }
    b->res[v] = 0;
    emit(b, (remat__instr){.kind = REMAT__I_FREE, .node = u, .value = v});
}

/* Computes u in a pass at `depth` that keeps it (held) or not. */
static void fwd(builder *b, int32_t u, int held, int depth) {
    const remat__node *n = &b->g->nodes[u];
    emit(b, (remat__instr){.kind = REMAT__I_FWD, .node = u});
    b->res[REMAT__VAL(u, REMAT__V_OUT)] = 1;
    b->held[u] = (uint8_t)held;
    b->depth[u] = (uint8_t)depth;
    if (remat__ops[n->op]->aux_bytes) b->res[REMAT__VAL(u, REMAT__V_AUX)] = 1;
    for (int i = 0; i < n->n_in; i++) {
        int32_t x = n->in[i];
        if (!is_value_node(b, x)) continue;
        if (b->pend_fwd[x] > 0) b->pend_fwd[x]--;
        maybe_free(b, REMAT__VAL(x, REMAT__V_OUT));
    }
    /* The forward pass: what the framework's code held until u is let go. */
    for (int32_t h = depth == 0 && b->g->traced ? b->g->traced[u].holds : 0; h; h = b->g->traced[h - 1].hold_next)
        if (b->pend_fwd[h - 1] > 0) {
            b->pend_fwd[h - 1]--;
            maybe_free(b, REMAT__VAL(h - 1, REMAT__V_OUT));
        }
    maybe_free(b, REMAT__VAL(u, REMAT__V_OUT));
    maybe_free(b, REMAT__VAL(u, REMAT__V_AUX));
}

/* Values BWD(v) reads; returns their count. */
static int bwd_reads(const builder *b, int32_t v, int32_t *vals) {
    const remat__node *n = &b->g->nodes[v];
    int k = 0;
    for (int i = 0; i < n->n_in; i++)
        if ((n->saves & REMAT__SAVE_IN(i)) && is_value_node(b, n->in[i])) {
            int32_t val = REMAT__VAL(n->in[i], REMAT__V_OUT);
            int dup = 0;
            for (int j = 0; j < k; j++) dup |= vals[j] == val;
            if (!dup) vals[k++] = val;
        }
    if (n->saves & REMAT__SAVE_OUT) vals[k++] = REMAT__VAL(v, REMAT__V_OUT);
    if (n->saves & REMAT__SAVE_AUX) vals[k++] = REMAT__VAL(v, REMAT__V_AUX);
    return k;
}

/* Adds the missing ancestors of the nodes on the stack to the recomputation;
 * returns the deepest depth among the resident values it stops at. */
static int close_over_inputs(builder *b, int top, int32_t *rmin) {
    int depth = 0;
    while (top > 0) {
        const remat__node *nd = &b->g->nodes[b->stack[--top]];
        for (int i = 0; i < nd->n_in; i++) {
            int32_t x = nd->in[i];
            if (!is_value_node(b, x) || b->in_r[x]) continue;
            if (out_resident(b, x)) {
                if (b->depth[x] > depth) depth = b->depth[x];
            } else {
                b->in_r[x] = 1;
                b->stack[top++] = x;
                if (x < *rmin) *rmin = x;
            }
        }
    }
    return depth;
}

/* Recomputes the missing outputs `miss` (and their segments) before BWD(v). */
static void recompute(builder *b, int32_t v, const int32_t *miss, int nmiss) {
    const remat_graph *g = b->g;
    int32_t lo = v, top = 0;
    for (int j = 0; j < nmiss; j++) {
        int32_t x = REMAT__VAL_NODE(miss[j]);
        if (!b->in_r[x]) b->in_r[x] = 1, b->stack[top++] = x;
        if (x < lo) lo = x;
    }
    int32_t first = lo;
    int depth = close_over_inputs(b, top, &first) + 1;
    /* Complete the segment: dropped nodes after the missing ones, up to v,
     * whose outputs a pending backward reads, stopping at a boundary held
     * by a coarser pass. */
    top = 0;
    for (int32_t w = lo + 1; w <= v; w++) {
        if (out_resident(b, w) && b->held[w] && b->source[w] && b->depth[w] < depth) break;
        if (b->needed[w] && is_value_node(b, w) && !out_resident(b, w) && !b->in_r[w] &&
            b->pend_bwd[REMAT__VAL(w, REMAT__V_OUT)] > 0)
            b->in_r[w] = 1, b->stack[top++] = w;
    }
    int d2 = close_over_inputs(b, top, &first) + 1;
    if (d2 > depth) depth = d2;
    if (depth > 254) depth = 254;
    /* This depth's nested boundaries; what follows the last one is kept. */
    int32_t last = -1;
    for (int32_t u = first; u <= v; u++)
        if (b->in_r[u] && b->level[u] <= depth) last = u;
    /* Consumers within this recomputation keep their inputs alive. */
    for (int32_t u = first; u <= v; u++) {
        if (!b->in_r[u]) continue;
        const remat__node *nd = &g->nodes[u];
        for (int i = 0; i < nd->n_in; i++)
            if (is_value_node(b, nd->in[i])) b->pend_fwd[nd->in[i]]++;
    }
    for (int32_t u = first; u <= v && b->st == REMAT_OK; u++) {
        if (!b->in_r[u]) continue;
        b->in_r[u] = 0;
        fwd(b, u, b->level[u] <= depth || u > last, depth);
    }
}

static void bwd(builder *b, int32_t v) {
    const remat__node *n = &b->g->nodes[v];
    /* Moving the frontier to v releases the boundaries above it. */
    int32_t old = b->frontier;
    b->frontier = v;
    for (int32_t u = v + 1; u <= old && u < b->g->n; u++)
        if (b->source[u]) maybe_free(b, REMAT__VAL(u, REMAT__V_OUT));
    int32_t reads[REMAT__MAX_IN + 2], miss[REMAT__MAX_IN + 2];
    int k = bwd_reads(b, v, reads), nmiss = 0;
    for (int j = 0; j < k; j++)
        if (!b->res[reads[j]]) miss[nmiss++] = reads[j];
    if (nmiss) recompute(b, v, miss, nmiss);
    emit(b, (remat__instr){.kind = REMAT__I_BWD, .node = v});
    for (int i = 0; i < n->n_in; i++)
        if (remat__bwd_writes(b->p, n, i) && b->g->nodes[n->in[i]].leaf != REMAT__LEAF_PARAM)
            b->res[REMAT__VAL(n->in[i], REMAT__V_GRAD)] = 1;
    b->res[REMAT__VAL(v, REMAT__V_GRAD)] = 1; /* the loss's seed */
    for (int j = 0; j < k; j++) b->pend_bwd[reads[j]]--;
    b->pend_bwd[REMAT__VAL(v, REMAT__V_GRAD)] = 0;
    for (int j = 0; j < k; j++) maybe_free(b, reads[j]);
    maybe_free(b, REMAT__VAL(v, REMAT__V_GRAD));
}

/* Counts each value's forward consumers and backward readers; returns
 * whether a backward reads a value the forward drops. */
static int count_uses(builder *b) {
    const remat_graph *g = b->g;
    int32_t reads[REMAT__MAX_IN + 2];
    int dropped_read = 0;
    for (int32_t u = 0; u < g->n; u++) {
        if (!b->needed[u]) continue;
        const remat__node *nd = &g->nodes[u];
        for (int i = 0; i < nd->n_in; i++)
            if (is_value_node(b, nd->in[i])) b->pend_fwd[nd->in[i]]++;
        /* held by the framework's code in the forward pass: a use there;
         * by its caller to the step's end: a use that never comes */
        int32_t held = g->traced && is_value_node(b, u) ? g->traced[u].held : 0;
        if (held == REMAT__HELD_TO_END || (held > 0 && b->needed[held - 1])) b->pend_fwd[u]++;
        if (b->backward && b->p->needs_grad[u] && nd->leaf == REMAT__LEAF_NONE) {
            int k = bwd_reads(b, u, reads);
            for (int j = 0; j < k; j++) {
                b->pend_bwd[reads[j]]++;
                if (REMAT__VAL_KIND(reads[j]) == REMAT__V_OUT && b->level[REMAT__VAL_NODE(reads[j])] > 0)
                    dropped_read = 1;
            }
            b->pend_bwd[REMAT__VAL(u, REMAT__V_GRAD)] = 1;
        }
    }
    return dropped_read;
}

/* Boundaries: nodes kept at some level that feed a node dropped at that
 * level. They are held until the backward frontier passes them, as
 * recomputations start there; when no backward reads a dropped value
 * (add's backward, for one, reads nothing), nothing is ever recomputed
 * and no boundary is needed (the caller does not call this). */
static void mark_sources(builder *b) {
    const remat_graph *g = b->g;
    for (int32_t u = 0; u < g->n; u++) {
        const remat__node *nd = &g->nodes[u];
        if (!b->needed[u] || remat__is_resident(nd)) continue;
        for (int i = 0; i < nd->n_in; i++) {
            int32_t x = nd->in[i];
            if (is_value_node(b, x) && b->level[x] < b->level[u]) b->source[x] = 1;
        }
    }
}

remat_status remat__schedule_build(const remat__prog *p, remat_node loss, remat_node fetch, int train, int backward,
                                   const uint8_t *level_in, remat__schedule *out) {
    const remat_graph *g = p->g;
    int n = g->n;
    size_t nv = (size_t)n * 3;
    memset(out, 0, sizeof *out);
    out->train = train;
    out->backward = backward;
    out->loss = loss;
    out->fetch = fetch;
    out->origin = "levels";
    builder b = {.p = p, .g = g, .out = out, .backward = backward, .frontier = n};
    uint8_t *level_all = calloc((size_t)n + 1, 1);
    b.needed = calloc((size_t)n + 1, 1);
    b.res = calloc(nv + 1, 1);
    b.pend_bwd = calloc(nv + 1, sizeof *b.pend_bwd);
    b.pend_fwd = calloc((size_t)n + 1, sizeof *b.pend_fwd);
    b.source = calloc((size_t)n + 1, 1);
    b.held = calloc((size_t)n + 1, 1);
    b.depth = calloc((size_t)n + 1, 1);
    b.in_r = calloc((size_t)n + 1, 1);
    b.stack = malloc(((size_t)n + 1) * sizeof *b.stack);
    if (!level_all || !b.needed || !b.res || !b.pend_bwd || !b.pend_fwd || !b.source || !b.held || !b.depth ||
        !b.in_r || !b.stack) {
        b.st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
        goto done;
    }
    b.level = level_in ? level_in : level_all;
    remat__mark_needed(g, loss, b.needed, b.stack);
    remat__mark_needed(g, fetch, b.needed, b.stack);
    int dropped_read = count_uses(&b);
    if (backward && dropped_read) mark_sources(&b);
    /* Forward. */
    for (int32_t u = 0; u < n && b.st == REMAT_OK; u++)
        if (b.needed[u] && is_value_node(&b, u)) fwd(&b, u, b.level[u] == 0, 0);
    /* Backward, in reverse creation order. */
    if (backward)
        for (int32_t v = n - 1; v >= 0 && b.st == REMAT_OK; v--)
            if (b.needed[v] && p->needs_grad[v] && g->nodes[v].leaf == REMAT__LEAF_NONE) bwd(&b, v);
    /* Whatever is left (boundaries without later use). */
    for (int32_t v = 0; v < (int32_t)nv && b.st == REMAT_OK; v++)
        if (b.res[v]) {
            b.res[v] = 0;
            emit(&b, (remat__instr){.kind = REMAT__I_FREE, .node = REMAT__VAL_NODE(v), .value = v});
        }
    if (b.st == REMAT_OK) b.st = remat__schedule_categorize(p, out);
done:
    free(level_all), free(b.needed), free(b.res), free(b.pend_bwd), free(b.pend_fwd), free(b.source);
    free(b.held), free(b.depth), free(b.in_r), free(b.stack);
    if (b.st != REMAT_OK) remat__schedule_free(out);
    return b.st;
}
