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
 * transients and workspace, and frees a backward's gradients together, so optimal.c simulates each schedule exactly and
 * keeps it only where its real peak fits.
 */
#include "dtr.h"
#include "schedule.h"

#include <stdlib.h>

#define SMALL_NODES 2000
#define MAX_NODES 20000

struct remat__train_dag {
    remat__dtr_node *nd;
    int32_t *deps;
    int32_t *node; /* DAG index -> graph node */
    uint8_t *bwd;  /* DAG index is a B node */
    int n;
    int32_t *inputs; /* input leaves the loss needs */
    int n_inputs;
    int64_t total; /* sum of sizes: the store-all DTR peak bound */
    int64_t floor; /* no DTR schedule fits below */
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

/* What building the DAG needs per graph node besides the DAG itself. */
typedef struct {
    uint8_t *needed; /* the loss needs it */
    int32_t *stack;  /* remat__mark_needed's */
    int32_t *fidx;   /* graph node -> F index, -1 */
    int32_t *bidx;   /* graph node -> B index, -1 */
    int64_t *ncons;  /* its consumers that are op nodes (then a cursor into cons) */
    int32_t *lastc;  /* its last consumer with a backward, -1 */
    int64_t *coff;   /* consumers of u: cons[coff[u] .. coff[u + 1]) */
    int32_t *cons;
} scratch;

static int scratch_alloc(scratch *s, int n) {
    s->needed = calloc((size_t)n + 1, 1);
    s->stack = malloc(((size_t)n + 1) * sizeof *s->stack);
    s->fidx = malloc(((size_t)n + 1) * sizeof *s->fidx);
    s->bidx = malloc(((size_t)n + 1) * sizeof *s->bidx);
    s->ncons = calloc((size_t)n + 1, sizeof *s->ncons);
    s->lastc = malloc(((size_t)n + 1) * sizeof *s->lastc);
    return s->needed && s->stack && s->fidx && s->bidx && s->ncons && s->lastc;
}

static void scratch_free(scratch *s) {
    free(s->needed), free(s->stack), free(s->fidx), free(s->bidx), free(s->ncons), free(s->lastc);
    free(s->coff), free(s->cons);
}

/* Counts the DAG's nodes into d->n (an F per op node the loss needs, a B
 * per such node with a backward) and each node's consumers and last
 * consumer with a backward; returns a bound on the dependencies. */
static size_t count_nodes(const remat__prog *p, remat__train_dag *d, scratch *s) {
    const remat_graph *g = p->g;
    int nf = 0, nb = 0;
    size_t ndeps = 0;
    for (int32_t u = 0; u < g->n; u++) {
        s->fidx[u] = s->bidx[u] = s->lastc[u] = -1;
        if (!s->needed[u]) continue;
        const remat__node *nd = &g->nodes[u];
        if (nd->leaf != REMAT__LEAF_NONE) continue;
        nf++;
        ndeps += (size_t)nd->n_in;
        if (p->needs_grad[u]) nb++, ndeps += (size_t)nd->n_in + 2;
        for (int i = 0; i < nd->n_in; i++) {
            s->ncons[nd->in[i]]++;
            if (p->needs_grad[u]) s->lastc[nd->in[i]] = u;
        }
    }
    /* B(u) also depends on the B of each consumer of u. */
    for (int32_t u = 0; u < g->n; u++) ndeps += (size_t)s->ncons[u];
    d->n = nf + nb;
    return ndeps;
}

static int dag_alloc(remat__train_dag *d, int n, size_t ndeps) {
    d->nd = calloc((size_t)d->n + 1, sizeof *d->nd);
    d->deps = malloc((ndeps + 1) * sizeof *d->deps);
    d->node = malloc(((size_t)d->n + 1) * sizeof *d->node);
    d->bwd = calloc((size_t)d->n + 1, 1);
    d->inputs = malloc(((size_t)n + 1) * sizeof *d->inputs);
    return d->nd && d->deps && d->node && d->bwd && d->inputs;
}

/* Numbers the DAG: the F nodes in creation order, then the B nodes in
 * reverse; lists the input leaves the loss needs. */
static void number_nodes(const remat__prog *p, remat__train_dag *d, scratch *s) {
    const remat_graph *g = p->g;
    int k = 0;
    for (int32_t u = 0; u < g->n; u++) {
        if (!s->needed[u]) continue;
        if (g->nodes[u].leaf == REMAT__LEAF_INPUT) d->inputs[d->n_inputs++] = u;
        if (g->nodes[u].leaf == REMAT__LEAF_NONE) s->fidx[u] = k, d->node[k++] = u;
    }
    for (int32_t u = g->n - 1; u >= 0; u--)
        if (s->fidx[u] >= 0 && p->needs_grad[u]) s->bidx[u] = k, d->node[k] = u, d->bwd[k] = 1, k++;
}

/* The consumer lists of every node (for B(u)), in one CSR array: 0 when
 * out of memory. */
static int gather_consumers(const remat_graph *g, scratch *s, size_t ndeps) {
    int n = g->n;
    s->coff = calloc((size_t)n + 2, sizeof *s->coff);
    s->cons = malloc((ndeps + 1) * sizeof *s->cons);
    if (!s->coff || !s->cons) return 0;
    for (int32_t u = 0; u < n; u++) s->coff[u + 1] = s->coff[u] + s->ncons[u];
    for (int32_t u = 0; u < n; u++) s->ncons[u] = s->coff[u];
    for (int32_t c = 0; c < n; c++)
        if (s->fidx[c] >= 0)
            for (int i = 0; i < g->nodes[c].n_in; i++) s->cons[s->ncons[g->nodes[c].in[i]]++] = c;
    return 1;
}

/* F(u): the forward of u, evicted at its recomputation's cost; depends on
 * the F of its op inputs. Writes the dependencies at dp, returns how many. */
static int f_node(const remat__prog *p, const scratch *s, int32_t u, remat_node loss, remat__dtr_node *x, int32_t *dp) {
    const remat__node *nd = &p->g->nodes[u];
    int m = 0;
    x->cost = remat__node_rec_seconds(p, nd); /* what evicting it costs */
    x->size = remat__vbytes(p, nd);
    for (int q = 0; q < nd->n_in; q++)
        if (s->fidx[nd->in[q]] >= 0) m = add_dep(dp, m, s->fidx[nd->in[q]]);
    x->required = u == loss;
    return m;
}

/* B(u): the backward of u, never evicted; its size is the gradients it is
 * the first to write (it is their input's last consumer with a backward);
 * depends on the F of what it reads and on the B of every consumer of u. */
static int b_node(const remat__prog *p, const scratch *s, int32_t u, remat__dtr_node *x, int32_t *dp) {
    const remat_graph *g = p->g;
    const remat__node *nd = &g->nodes[u];
    int m = 0;
    x->cost = remat__node_bwd_seconds(p, nd);
    x->no_evict = 1;
    x->required = 1;
    for (int q = 0; q < nd->n_in; q++) {
        int32_t y = nd->in[q];
        if ((nd->saves & REMAT__SAVE_IN(q)) && s->fidx[y] >= 0) m = add_dep(dp, m, s->fidx[y]);
        if (remat__bwd_writes(p, nd, q) && g->nodes[y].leaf != REMAT__LEAF_PARAM && s->lastc[y] == u) {
            int dup = 0;
            for (int r = 0; r < q; r++) dup |= nd->in[r] == y;
            if (!dup) x->size += remat__vbytes(p, &g->nodes[y]);
        }
    }
    if (nd->saves & (REMAT__SAVE_OUT | REMAT__SAVE_AUX)) m = add_dep(dp, m, s->fidx[u]);
    for (int64_t j = s->coff[u]; j < s->coff[u + 1]; j++)
        if (s->bidx[s->cons[j]] >= 0) m = add_dep(dp, m, s->bidx[s->cons[j]]);
    return m;
}

/* Every DAG node's cost, size and dependencies; the DAG's total size and
 * its floor (the largest node with its dependencies). */
static void fill_nodes(const remat__prog *p, remat__train_dag *d, const scratch *s) {
    size_t at = 0;
    for (int i = 0; i < d->n; i++) {
        remat__dtr_node *x = &d->nd[i];
        int32_t *dp = d->deps + at;
        int m = d->bwd[i] ? b_node(p, s, d->node[i], x, dp) : f_node(p, s, d->node[i], d->loss, x, dp);
        x->deps = dp;
        x->n_deps = m;
        at += (size_t)m;
        d->total += x->size;
        int64_t need = x->size;
        for (int j = 0; j < m; j++) need += d->nd[dp[j]].size;
        if (need > d->floor) d->floor = need;
    }
}

remat_status remat__train_dag_build(const remat__prog *p, remat_node loss, remat__train_dag **out) {
    *out = NULL;
    remat__train_dag *d = calloc(1, sizeof *d);
    scratch s = {0};
    int ok = scratch_alloc(&s, p->g->n) && d;
    if (ok) {
        d->loss = loss;
        remat__mark_needed(p->g, loss, s.needed, s.stack);
        size_t ndeps = count_nodes(p, d, &s);
        ok = dag_alloc(d, p->g->n, ndeps);
        if (ok) number_nodes(p, d, &s);
        ok = ok && gather_consumers(p->g, &s, ndeps);
    }
    if (ok) fill_nodes(p, d, &s);
    scratch_free(&s);
    if (!ok) {
        remat__train_dag_free(d);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    *out = d;
    return REMAT_OK;
}

remat_status remat__train_dag_schedule(const remat__prog *p, const remat__train_dag *d, int64_t budget,
                                       int64_t max_work, remat__schedule *out) {
    memset(out, 0, sizeof *out);
    /* The heuristics that walk the evicted neighbourhood cost O(n) per
     * candidate victim, too much on long graphs (heavy's 200,000 DAG
     * nodes); there the O(1) ones run, and not at all beyond MAX_NODES. */
    if (d->n > MAX_NODES) return remat__err(REMAT_BUDGET, "the DTR fallback skips graphs of over %d steps", MAX_NODES);
    unsigned cheap =
        1u << REMAT__DTR_H_LOCAL | 1u << REMAT__DTR_H_LRU | 1u << REMAT__DTR_H_SIZE | 1u << REMAT__DTR_H_BELADY;
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
    for (int j = 0; j < d->n_inputs; j++)
        out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = d->inputs[j]};
    for (int i = 0; i < r.n_ops; i++) {
        if (r.ops[i].kind != REMAT__DTR_COMPUTE) continue;
        int32_t x = r.ops[i].node;
        out->ins[out->n++] = (remat__instr){.kind = d->bwd[x] ? REMAT__I_BWD : REMAT__I_FWD, .node = d->node[x]};
    }
    remat__dtr_result_free(&r);
    st = remat__schedule_add_frees(p, out);
    if (st == REMAT_OK) st = remat__schedule_categorize(p, out);
    if (st != REMAT_OK) remat__schedule_free(out);
    return st;
}
