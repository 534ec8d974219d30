/* build.c: turns a keep mask into a schedule.
 *
 * keep[u] says whether the forward pass keeps node u's output for the
 * backward pass. Outputs not kept are freed after their last forward use
 * and recomputed when a backward needs them: the whole stretch of dropped
 * nodes around the missing value (its segment, between kept boundaries) is
 * recomputed at once, as in Chen et al.'s sqrt(n) scheme, so that the
 * backward passes through a segment recompute it once, not once per node.
 * Anything else a recomputation needs that is not resident is recomputed
 * too (the closure of missing ancestors), so any mask gives a valid
 * schedule. With every node kept this is the store-all schedule.
 *
 * Frees are emitted as soon as a value has no use left: no forward consumer
 * still to run in the current pass, no backward still to read it, and, for
 * a kept boundary that a later recomputation may start from, the backward
 * frontier has passed it. Aux values (BatchNorm's batch statistics) are
 * kept from the first forward to their backward, so a recomputation reuses
 * them and commits no state twice.
 */
#include "schedule.h"

#include <stdlib.h>

typedef struct {
    const remat__prog *p;
    const remat_graph *g;
    const uint8_t *keep;
    remat__schedule *out;
    int backward;
    uint8_t *needed;     /* per node: the loss or fetch depends on it */
    uint8_t *res;        /* per value: resident */
    int32_t *pend_bwd;   /* per value: backward instructions still to read it */
    int32_t *pend_fwd;   /* per node: forward consumers still to run in this pass */
    uint8_t *source;     /* per node: kept, with a dropped consumer */
    int32_t *seg;        /* per node: segment id (kept sources close segments) */
    int32_t *cons_off, *cons; /* CSR: forward consumers of each node */
    int32_t frontier;    /* nodes >= frontier have finished their backward */
    int in_backward;
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

static int is_value_node(const builder *b, int32_t u) {
    return !remat__is_resident(&b->g->nodes[u]);
}

/* Frees v if nothing needs it any more. */
static void maybe_free(builder *b, int32_t v) {
    if (!b->res[v]) return;
    int32_t u = REMAT__VAL_NODE(v);
    switch (REMAT__VAL_KIND(v)) {
    case REMAT__V_OUT:
        if (b->pend_fwd[u] > 0) return;
        if (b->pend_bwd[v] > 0 && (b->in_backward || b->keep[u])) return;
        if (b->source[u] && u < b->frontier && b->backward) return;
        break;
    case REMAT__V_AUX:
    case REMAT__V_GRAD:
        if (b->pend_bwd[v] > 0) return;
        break;
    }
    b->res[v] = 0;
    emit(b, (remat__instr){.kind = REMAT__I_FREE, .node = u, .value = v});
}

static void fwd(builder *b, int32_t u) {
    const remat__node *n = &b->g->nodes[u];
    emit(b, (remat__instr){.kind = REMAT__I_FWD, .node = u});
    b->res[REMAT__VAL(u, REMAT__V_OUT)] = 1;
    if (remat__ops[n->op]->aux_bytes) b->res[REMAT__VAL(u, REMAT__V_AUX)] = 1;
    for (int i = 0; i < n->n_in; i++) {
        int32_t x = n->in[i];
        if (!is_value_node(b, x)) continue;
        if (b->pend_fwd[x] > 0) b->pend_fwd[x]--;
        maybe_free(b, REMAT__VAL(x, REMAT__V_OUT));
    }
    maybe_free(b, REMAT__VAL(u, REMAT__V_OUT));
    maybe_free(b, REMAT__VAL(u, REMAT__V_AUX));
}

/* Values BWD(v) reads; returns their count. */
static int bwd_reads(const builder *b, int32_t v, int32_t *vals) {
    const remat__node *n = &b->g->nodes[v];
    const remat__op *op = remat__ops[n->op];
    int k = 0;
    for (int i = 0; i < n->n_in; i++)
        if ((op->saves & REMAT__SAVE_IN(i)) && is_value_node(b, n->in[i])) {
            int32_t val = REMAT__VAL(n->in[i], REMAT__V_OUT);
            int dup = 0;
            for (int j = 0; j < k; j++) dup |= vals[j] == val;
            if (!dup) vals[k++] = val;
        }
    if (op->saves & REMAT__SAVE_OUT) vals[k++] = REMAT__VAL(v, REMAT__V_OUT);
    if (op->saves & REMAT__SAVE_AUX) vals[k++] = REMAT__VAL(v, REMAT__V_AUX);
    return k;
}

/* Recomputes the missing outputs `miss` (and their segments) before BWD(v). */
static void recompute(builder *b, int32_t v, const int32_t *miss, int nmiss) {
    const remat_graph *g = b->g;
    int n = g->n;
    uint8_t *in_r = calloc((size_t)n, 1);
    int32_t *stack = malloc((size_t)n * sizeof *stack);
    if (!in_r || !stack) {
        free(in_r), free(stack);
        b->st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
        return;
    }
    int top = 0;
    /* The segments of the missing values: every dropped node in them, up to
     * v, whose output a pending backward reads. */
    for (int j = 0; j < nmiss; j++) {
        int32_t x = REMAT__VAL_NODE(miss[j]);
        if (!in_r[x]) in_r[x] = 1, stack[top++] = x;
        for (int32_t w = x - 1; w >= 0 && b->seg[w] == b->seg[x]; w--)
            if (b->needed[w] && is_value_node(b, w) && !b->res[REMAT__VAL(w, REMAT__V_OUT)] && !in_r[w] &&
                b->pend_bwd[REMAT__VAL(w, REMAT__V_OUT)] > 0)
                in_r[w] = 1, stack[top++] = w;
        for (int32_t w = x + 1; w <= v && w < n && b->seg[w] == b->seg[x]; w++)
            if (b->needed[w] && is_value_node(b, w) && !b->res[REMAT__VAL(w, REMAT__V_OUT)] && !in_r[w] &&
                b->pend_bwd[REMAT__VAL(w, REMAT__V_OUT)] > 0)
                in_r[w] = 1, stack[top++] = w;
    }
    /* Close over missing inputs. */
    while (top > 0) {
        const remat__node *nd = &g->nodes[stack[--top]];
        for (int i = 0; i < nd->n_in; i++) {
            int32_t x = nd->in[i];
            if (is_value_node(b, x) && !b->res[REMAT__VAL(x, REMAT__V_OUT)] && !in_r[x])
                in_r[x] = 1, stack[top++] = x;
        }
    }
    /* Consumers within this recomputation keep their inputs alive. */
    for (int32_t u = 0; u < n; u++) {
        if (!in_r[u]) continue;
        const remat__node *nd = &g->nodes[u];
        for (int i = 0; i < nd->n_in; i++)
            if (is_value_node(b, nd->in[i])) b->pend_fwd[nd->in[i]]++;
    }
    for (int32_t u = 0; u < n && b->st == REMAT_OK; u++)
        if (in_r[u]) fwd(b, u);
    free(in_r), free(stack);
}

static void bwd(builder *b, int32_t v) {
    const remat__node *n = &b->g->nodes[v];
    /* Moving the frontier to v releases kept boundaries above it. */
    int32_t old = b->frontier;
    b->frontier = v;
    for (int32_t u = v + 1; u < old && u < b->g->n; u++)
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

/* Marks every node `root` depends on (explicit stack, no recursion). */
static remat_status mark_needed(const remat_graph *g, remat_node root, uint8_t *needed) {
    if (root == REMAT_NONE) return REMAT_OK;
    int32_t *stack = malloc((size_t)g->n * sizeof *stack);
    if (!stack) return remat__err(REMAT_NOMEM, "out of memory walking the graph");
    int top = 0;
    if (!needed[root]) needed[root] = 1, stack[top++] = root;
    while (top > 0) {
        const remat__node *n = &g->nodes[stack[--top]];
        for (int i = 0; i < n->n_in; i++)
            if (!needed[n->in[i]]) needed[n->in[i]] = 1, stack[top++] = n->in[i];
    }
    free(stack);
    return REMAT_OK;
}

remat_status remat__schedule_build(const remat__prog *p, remat_node loss, remat_node fetch, int train,
                                   int backward, const uint8_t *keep_in, remat__schedule *out) {
    const remat_graph *g = p->g;
    int n = g->n;
    size_t nv = (size_t)n * 3;
    memset(out, 0, sizeof *out);
    out->train = train;
    out->backward = backward;
    out->loss = loss;
    out->fetch = fetch;
    builder b = {.p = p, .g = g, .out = out, .backward = backward, .frontier = n};
    uint8_t *keep_all = NULL;
    b.needed = calloc((size_t)n, 1);
    b.res = calloc(nv, 1);
    b.pend_bwd = calloc(nv, sizeof *b.pend_bwd);
    b.pend_fwd = calloc((size_t)n, sizeof *b.pend_fwd);
    b.source = calloc((size_t)n, 1);
    b.seg = calloc((size_t)n, sizeof *b.seg);
    keep_all = malloc((size_t)n);
    if (!b.needed || !b.res || !b.pend_bwd || !b.pend_fwd || !b.source || !b.seg || !keep_all) {
        b.st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
        goto done;
    }
    if (!keep_in) memset(keep_all, 1, (size_t)n);
    b.keep = keep_in ? keep_in : keep_all;
    b.st = mark_needed(g, loss, b.needed);
    if (b.st == REMAT_OK) b.st = mark_needed(g, fetch, b.needed);
    if (b.st != REMAT_OK) goto done;
    /* Counts: forward consumers, backward readers, sources, segments. */
    int32_t reads[REMAT__MAX_IN + 2];
    for (int32_t u = 0; u < n; u++) {
        if (!b.needed[u]) continue;
        const remat__node *nd = &g->nodes[u];
        for (int i = 0; i < nd->n_in; i++)
            if (is_value_node(&b, nd->in[i])) {
                b.pend_fwd[nd->in[i]]++;
                if (!b.keep[u] && b.keep[nd->in[i]] && !remat__is_resident(nd)) b.source[nd->in[i]] = 1;
            }
        if (backward && p->needs_grad[u] && nd->leaf == REMAT__LEAF_NONE) {
            int k = bwd_reads(&b, u, reads);
            for (int j = 0; j < k; j++) b.pend_bwd[reads[j]]++;
            b.pend_bwd[REMAT__VAL(u, REMAT__V_GRAD)] = 1;
        }
    }
    int32_t seg = 0;
    for (int32_t u = 0; u < n; u++) {
        b.seg[u] = seg;
        if (b.source[u]) seg++;
    }
    /* A boundary is worth keeping only if a segment it feeds holds a dropped
     * value that some backward reads (else nothing is ever recomputed from
     * it: add's backward, for one, reads nothing). */
    uint8_t *seg_needed = calloc((size_t)seg + 1, 1);
    if (!seg_needed) {
        b.st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
        goto done;
    }
    for (int32_t u = 0; u < n; u++)
        if (b.needed[u] && !b.keep[u] && b.pend_bwd[REMAT__VAL(u, REMAT__V_OUT)] > 0) seg_needed[b.seg[u]] = 1;
    uint8_t *useful = calloc((size_t)n, 1);
    if (!useful) {
        free(seg_needed);
        b.st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
        goto done;
    }
    for (int32_t w = 0; w < n; w++) {
        const remat__node *nd = &g->nodes[w];
        if (!b.needed[w] || b.keep[w] || remat__is_resident(nd) || !seg_needed[b.seg[w]]) continue;
        for (int i = 0; i < nd->n_in; i++) useful[nd->in[i]] = 1;
    }
    seg = 0;
    for (int32_t u = 0; u < n; u++) {
        b.source[u] = b.source[u] && useful[u];
        b.seg[u] = seg;
        if (b.source[u]) seg++;
    }
    free(useful);
    free(seg_needed);
    /* Forward. */
    for (int32_t u = 0; u < n && b.st == REMAT_OK; u++)
        if (b.needed[u] && is_value_node(&b, u)) fwd(&b, u);
    /* Backward, in reverse creation order. */
    if (backward) {
        b.in_backward = 1;
        for (int32_t v = n - 1; v >= 0 && b.st == REMAT_OK; v--)
            if (b.needed[v] && p->needs_grad[v] && g->nodes[v].leaf == REMAT__LEAF_NONE) bwd(&b, v);
        b.frontier = -1;
    }
    /* Whatever is left (kept boundaries without later use). */
    for (int32_t v = 0; v < (int32_t)nv && b.st == REMAT_OK; v++)
        if (b.res[v]) {
            b.res[v] = 0;
            emit(&b, (remat__instr){.kind = REMAT__I_FREE, .node = REMAT__VAL_NODE(v), .value = v});
        }
    if (b.st == REMAT_OK) remat__schedule_categorize(p, out);
done:
    free(b.needed), free(b.res), free(b.pend_bwd), free(b.pend_fwd), free(b.source), free(b.seg);
    free(keep_all);
    if (b.st != REMAT_OK) remat__schedule_free(out);
    return b.st;
}
