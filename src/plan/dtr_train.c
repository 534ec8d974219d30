/* dtr_train.c: the DTR fallback on a model's training step.
 *
 * The chain planner sees a graph as stages between articulation points and
 * can only keep or drop what is inside a stage as a whole (or its selective
 * subset). A graph that does not reduce to a chain (two branches that meet
 * at the loss, dense connections) is one big stage to it. This file hands
 * the whole training step to the DTR planner (dtr.c) instead, as one DAG:
 *
 *   F(u) for each op node u the loss needs, in creation order: its forward,
 *        of cost forward(u) and size out(u);
 *   B(u) for each such u that has a backward, in reverse creation order:
 *        its backward, of cost 2 forward(u) (the cost model's rule) and size
 *        the gradients it is the first to write (a gradient that several
 *        backwards accumulate into is allocated by the first of them, the
 *        backward of the input's last consumer), depending on the F of every value it
 *        reads and on the B of every consumer of u (the gradient of u is
 *        complete only then). B nodes are never evicted: a backward
 *        accumulates into its inputs' gradients and must run exactly once.
 *
 * The DTR schedule's COMPUTE operations become FWD and BWD instructions;
 * frees follow from the last use of each value instance (add_frees), which
 * is never later than DTR's own frees. The DAG leaves out aux values,
 * transients and workspace, and frees a backward's gradients together, so optimal.c simulates each schedule exactly and keeps it
 * only where its real peak fits.
 */
#include "dtr.h"
#include "schedule.h"

#include <stdlib.h>

#define SMALL_NODES 2000
#define MAX_NODES 20000

struct remat__train_dag {
    remat__dtr_node *nd;
    int32_t *deps;
    int32_t *node;   /* DAG index -> graph node */
    uint8_t *bwd;    /* DAG index is a B node */
    int n;
    int32_t *inputs; /* input leaves the loss needs */
    int n_inputs;
    int64_t total;   /* sum of sizes: the store-all DTR peak bound */
    int64_t floor;   /* no DTR schedule fits below */
    remat_node loss;
};

void remat__train_dag_free(remat__train_dag *d) {
    if (!d) return;
    free(d->nd), free(d->deps), free(d->node), free(d->bwd), free(d->inputs);
    free(d);
}

int64_t remat__train_dag_floor(const remat__train_dag *d) { return d->floor; }
int64_t remat__train_dag_total(const remat__train_dag *d) { return d->total; }

static int add_dep(int32_t *deps, int n, int32_t x) {
    for (int i = 0; i < n; i++)
        if (deps[i] == x) return n;
    deps[n] = x;
    return n + 1;
}

remat_status remat__train_dag_build(const remat__prog *p, remat_node loss, remat__train_dag **out) {
    const remat_graph *g = p->g;
    int n = g->n;
    *out = NULL;
    remat__train_dag *d = calloc(1, sizeof *d);
    uint8_t *needed = calloc((size_t)n + 1, 1);
    int32_t *stack = malloc(((size_t)n + 1) * sizeof *stack);
    int32_t *fidx = malloc(((size_t)n + 1) * sizeof *fidx); /* graph node -> F index, -1 */
    int32_t *bidx = malloc(((size_t)n + 1) * sizeof *bidx); /* graph node -> B index, -1 */
    int64_t *ncons = calloc((size_t)n + 1, sizeof *ncons);
    int32_t *lastc = malloc(((size_t)n + 1) * sizeof *lastc); /* last consumer with a backward */
    remat_status st = REMAT_OK;
    if (!d || !needed || !stack || !fidx || !bidx || !ncons || !lastc) goto nomem;
    d->loss = loss;
    remat__mark_needed(g, loss, needed, stack);
    int nf = 0, nb = 0;
    size_t ndeps = 0;
    for (int32_t u = 0; u < n; u++) {
        fidx[u] = bidx[u] = lastc[u] = -1;
        if (!needed[u]) continue;
        const remat__node *nd = &g->nodes[u];
        if (nd->leaf != REMAT__LEAF_NONE) continue;
        nf++;
        ndeps += (size_t)nd->n_in;
        if (p->needs_grad[u]) nb++, ndeps += (size_t)nd->n_in + 2;
        for (int i = 0; i < nd->n_in; i++) {
            ncons[nd->in[i]]++;
            if (p->needs_grad[u]) lastc[nd->in[i]] = u;
        }
    }
    /* B(u) also depends on the B of each consumer of u. */
    for (int32_t u = 0; u < n; u++) ndeps += (size_t)ncons[u];
    d->n = nf + nb;
    d->nd = calloc((size_t)d->n + 1, sizeof *d->nd);
    d->deps = malloc((ndeps + 1) * sizeof *d->deps);
    d->node = malloc(((size_t)d->n + 1) * sizeof *d->node);
    d->bwd = calloc((size_t)d->n + 1, 1);
    d->inputs = malloc(((size_t)n + 1) * sizeof *d->inputs);
    if (!d->nd || !d->deps || !d->node || !d->bwd || !d->inputs) goto nomem;
    int k = 0;
    for (int32_t u = 0; u < n; u++) {
        if (!needed[u]) continue;
        if (g->nodes[u].leaf == REMAT__LEAF_INPUT) d->inputs[d->n_inputs++] = u;
        if (g->nodes[u].leaf == REMAT__LEAF_NONE) fidx[u] = k, d->node[k++] = u;
    }
    for (int32_t u = n - 1; u >= 0; u--)
        if (fidx[u] >= 0 && p->needs_grad[u]) bidx[u] = k, d->node[k] = u, d->bwd[k] = 1, k++;
    /* Consumers of u, for B(u): scan once, writing B deps per node. The
     * consumer lists are gathered into a CSR array first. */
    int64_t *coff = calloc((size_t)n + 2, sizeof *coff);
    int32_t *cons = malloc((ndeps + 1) * sizeof *cons);
    if (!coff || !cons) {
        free(coff), free(cons);
        goto nomem;
    }
    for (int32_t u = 0; u < n; u++) coff[u + 1] = coff[u] + ncons[u];
    for (int32_t u = 0; u < n; u++) ncons[u] = coff[u];
    for (int32_t c = 0; c < n; c++)
        if (fidx[c] >= 0)
            for (int i = 0; i < g->nodes[c].n_in; i++) cons[ncons[g->nodes[c].in[i]]++] = c;
    size_t at = 0;
    for (int i = 0; i < d->n; i++) {
        int32_t u = d->node[i];
        const remat__node *nd = &g->nodes[u];
        remat__dtr_node *x = &d->nd[i];
        int32_t *dp = d->deps + at;
        int m = 0;
        double t = remat__node_rec_seconds(p, nd); /* what evicting it costs */
        if (!d->bwd[i]) {
            x->cost = t;
            x->size = remat__vbytes(p, nd);
            for (int q = 0; q < nd->n_in; q++)
                if (fidx[nd->in[q]] >= 0) m = add_dep(dp, m, fidx[nd->in[q]]);
            x->required = u == loss;
        } else {
            x->cost = remat__node_bwd_seconds(p, nd);
            x->no_evict = 1;
            x->required = 1;
            for (int q = 0; q < nd->n_in; q++) {
                int32_t y = nd->in[q];
                if ((nd->saves & REMAT__SAVE_IN(q)) && fidx[y] >= 0) m = add_dep(dp, m, fidx[y]);
                if (remat__bwd_writes(p, nd, q) && g->nodes[y].leaf != REMAT__LEAF_PARAM && lastc[y] == u) {
                    int dup = 0;
                    for (int r = 0; r < q; r++) dup |= nd->in[r] == y;
                    if (!dup) x->size += remat__vbytes(p, &g->nodes[y]);
                }
            }
            if (nd->saves & (REMAT__SAVE_OUT | REMAT__SAVE_AUX)) m = add_dep(dp, m, fidx[u]);
            for (int64_t j = coff[u]; j < coff[u + 1]; j++)
                if (bidx[cons[j]] >= 0) m = add_dep(dp, m, bidx[cons[j]]);
        }
        x->deps = dp;
        x->n_deps = m;
        at += (size_t)m;
        d->total += x->size;
        int64_t need = x->size;
        for (int j = 0; j < m; j++) need += d->nd[dp[j]].size;
        if (need > d->floor) d->floor = need;
    }
    free(coff), free(cons);
    goto done;
nomem:
    st = remat__err(REMAT_NOMEM, "out of memory planning");
done:
    free(needed), free(stack), free(fidx), free(bidx), free(ncons), free(lastc);
    if (st != REMAT_OK) remat__train_dag_free(d);
    else *out = d;
    return st;
}

remat_status remat__train_dag_schedule(const remat__prog *p, const remat__train_dag *d, int64_t budget,
                                       int64_t max_work, remat__schedule *out) {
    memset(out, 0, sizeof *out);
    /* The heuristics that walk the evicted neighbourhood cost O(n) per
     * candidate victim, too much on long graphs (heavy's 200,000 DAG
     * nodes); there the O(1) ones run, and not at all beyond MAX_NODES. */
    if (d->n > MAX_NODES) return remat__err(REMAT_BUDGET, "the DTR fallback skips graphs of over %d steps", MAX_NODES);
    unsigned cheap = 1u << REMAT__DTR_H_LOCAL | 1u << REMAT__DTR_H_LRU | 1u << REMAT__DTR_H_SIZE |
                     1u << REMAT__DTR_H_BELADY;
    remat__dtr_opts opts = {.max_work = max_work, .heuristics = d->n > SMALL_NODES ? cheap : 0, .max_runs = 8};
    remat__dtr_result r;
    remat_status st = remat__dtr_plan(d->nd, d->n, budget, &opts, &r);
    if (st != REMAT_OK) return st;
    out->train = 1;
    out->backward = 1;
    out->loss = d->loss;
    out->fetch = REMAT_NONE;
    out->origin = "dtr";
    out->cap = d->n_inputs + r.n_ops + 1;
    out->ins = malloc((size_t)out->cap * sizeof *out->ins);
    if (!out->ins) {
        remat__dtr_result_free(&r);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    for (int j = 0; j < d->n_inputs; j++) out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = d->inputs[j]};
    for (int i = 0; i < r.n_ops; i++) {
        if (r.ops[i].kind != REMAT__DTR_COMPUTE) continue;
        int32_t x = r.ops[i].node;
        out->ins[out->n++] =
            (remat__instr){.kind = d->bwd[x] ? REMAT__I_BWD : REMAT__I_FWD, .node = d->node[x]};
    }
    remat__dtr_result_free(&r);
    st = remat__schedule_add_frees(p, out);
    if (st == REMAT_OK) st = remat__schedule_categorize(p, out);
    if (st != REMAT_OK) remat__schedule_free(out);
    return st;
}
