/* optimal.c: the `optimal` strategy.
 *
 * The graph is cut into a chain of stages at its articulation points (the
 * value nodes every input-to-loss path goes through). Each stage is
 * measured: forward and backward seconds from the cost model, the bytes of
 * its input, and the bytes of everything its backward reads that the stage
 * produces (its output included). Rotor's dynamic program
 * (remat_chain_solve) picks, within the memory left after parameters,
 * gradients and optimizer state, the operation sequence of least cost; the
 * sequence becomes a schedule (each stage's forward or backward is the
 * FWD/BWD of its nodes, and frees follow the last use of each value).
 *
 * The chain model leaves out transient values (a stage's internal values
 * between their computation and last forward use, gradients in flight) and
 * workspace, so the schedule is simulated exactly, and while its real peak
 * is above the budget the DP is solved again with that much less memory.
 */
#include "rotor.h"
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_STAGES 32

typedef struct {
    int32_t *nodes; /* value op nodes, creation order; stage i = [off[i], off[i+1]) */
    int32_t *off;
    int n_stages;
    int32_t *inputs; /* input leaves the loss needs */
    int n_inputs;
    double *fwd;         /* per stage: forward cost (for merging) */
    remat__stage_ex *ex; /* per stage: the options the DP chooses from */
    uint8_t *sel;        /* per node: recomputed before its stage's backward
                          * under the selective option */
    int64_t output;
} chain;

static void chain_free(chain *c) {
    free(c->nodes), free(c->off), free(c->inputs), free(c->fwd), free(c->ex), free(c->sel);
    memset(c, 0, sizeof *c);
}

static int expensive(const remat__node *n) {
    remat_family f = remat__ops[n->op]->family;
    return f == REMAT_FAMILY_LINEAR || f == REMAT_FAMILY_CONV;
}

/* The storage options of stage i (nodes [off[i], off[i+1])):
 * 0: keep everything its backward reads (a value counts once, however many
 *    backwards read it), its output included;
 * 1 (selective, PLANNING.md 7): keep only the outputs of the expensive
 *    nodes (linear, conv), the aux values and the stage output; recompute
 *    the cheap values the backward reads (and the cheap values they are
 *    computed from) just before the stage's backward. Offered when it
 *    keeps less. mark: scratch of g->n bytes, zero on entry and exit;
 *    stack: scratch of g->n ints. */
static void measure_stage(const remat__prog *p, chain *c, int i, uint8_t *mark, int32_t *stack) {
    const remat_graph *g = p->g;
    remat__stage_ex *ex = &c->ex[i];
    int a = c->off[i], b = c->off[i + 1];
    int32_t lo = c->nodes[a], hi = c->nodes[b - 1];
    memset(ex, 0, sizeof *ex);
    if (i == 0) {
        for (int j = 0; j < c->n_inputs; j++) ex->input += (int64_t)remat__out_bytes(&g->nodes[c->inputs[j]]);
    } else {
        ex->input = (int64_t)remat__out_bytes(&g->nodes[c->nodes[a - 1]]);
    }
    remat__stage_option *all = &ex->opt[0], *sel = &ex->opt[1];
    all->saved = (int64_t)remat__out_bytes(&g->nodes[hi]);
    int32_t reads[2 + REMAT__MAX_IN];
    /* mark bits: 1 = output read by a backward, 2 = aux read, 4 = recomputed */
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        const remat__node *nd = &g->nodes[u];
        const remat__op *op = remat__ops[nd->op];
        double t = remat__node_seconds(p, nd);
        ex->forward += t;
        if (!p->needs_grad[u]) continue;
        all->backward += 2 * t;
        int r = 0;
        for (int q = 0; q < nd->n_in; q++)
            if ((op->saves & REMAT__SAVE_IN(q)) && nd->in[q] >= lo && nd->in[q] < hi)
                reads[r++] = REMAT__VAL(nd->in[q], REMAT__V_OUT);
        if ((op->saves & REMAT__SAVE_OUT) && u != hi) reads[r++] = REMAT__VAL(u, REMAT__V_OUT);
        if (op->saves & REMAT__SAVE_AUX) reads[r++] = REMAT__VAL(u, REMAT__V_AUX);
        for (int q = 0; q < r; q++) {
            int32_t owner = REMAT__VAL_NODE(reads[q]);
            uint8_t bit = REMAT__VAL_KIND(reads[q]) == REMAT__V_AUX ? 2 : 1;
            if (mark[owner] & bit) continue;
            mark[owner] |= bit;
            all->saved += (int64_t)remat__value_bytes(g, reads[q]);
        }
    }
    ex->n_options = 1;
    /* The selective option: cheap values read by a backward, closed over
     * their cheap producers inside the stage. */
    int top = 0;
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        if ((mark[u] & 1) && u != hi && !expensive(&g->nodes[u])) mark[u] |= 4, stack[top++] = u;
    }
    while (top > 0) {
        const remat__node *nd = &g->nodes[stack[--top]];
        for (int q = 0; q < nd->n_in; q++) {
            int32_t x = nd->in[q];
            if (x >= lo && x < hi && !(mark[x] & 4) && !expensive(&g->nodes[x]) && g->nodes[x].leaf == REMAT__LEAF_NONE)
                mark[x] |= 4, stack[top++] = x;
        }
    }
    *sel = *all;
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        if (!(mark[u] & 4)) continue;
        int64_t bytes = (int64_t)remat__out_bytes(&g->nodes[u]);
        if (mark[u] & 1) sel->saved -= bytes;
        sel->backward += remat__node_seconds(p, &g->nodes[u]);
        sel->bwd_tmp += bytes;
    }
    if (sel->saved < all->saved) {
        ex->n_options = 2;
        for (int j = a; j < b; j++) c->sel[c->nodes[j]] = (mark[c->nodes[j]] & 4) != 0;
    }
    for (int j = a; j < b; j++) mark[c->nodes[j]] = 0;
}

/* Cuts the graph into stages and measures them. */
static remat_status chain_init(const remat__prog *p, remat_node loss, chain *c) {
    const remat_graph *g = p->g;
    int n = g->n;
    memset(c, 0, sizeof *c);
    uint8_t *needed = calloc((size_t)n, 1);
    int32_t *stack = malloc((size_t)n * sizeof *stack);
    int32_t *cut = malloc((size_t)n * sizeof *cut);
    c->nodes = malloc((size_t)n * sizeof *c->nodes);
    c->off = malloc(((size_t)n + 2) * sizeof *c->off);
    c->inputs = malloc((size_t)n * sizeof *c->inputs);
    c->fwd = calloc((size_t)n + 1, sizeof *c->fwd);
    remat_status rc = REMAT_OK;
    if (!needed || !stack || !cut || !c->nodes || !c->off || !c->inputs || !c->fwd) {
        rc = remat__err(REMAT_NOMEM, "out of memory planning");
        goto out;
    }
    remat__mark_needed(g, loss, needed, stack);
    for (int32_t u = 0; u < n; u++)
        if (needed[u] && g->nodes[u].leaf == REMAT__LEAF_INPUT) c->inputs[c->n_inputs++] = u;
    int k = remat__cut_points(g, needed, cut, stack);
    /* Stages: (cut[j-1], cut[j]], the last one ending at the loss. */
    int m = 0, s = 0;
    c->off[0] = 0;
    for (int32_t u = 0; u < n; u++) {
        const remat__node *nd = &g->nodes[u];
        if (!needed[u] || nd->leaf != REMAT__LEAF_NONE) continue;
        c->nodes[m++] = u;
        if (s < k && u == cut[s]) {
            s++;
            c->off[++c->n_stages] = m;
        }
    }
    if (c->off[c->n_stages] != m) c->off[++c->n_stages] = m;
    for (int i = 0; i < c->n_stages; i++)
        for (int j = c->off[i]; j < c->off[i + 1]; j++) c->fwd[i] += remat__node_seconds(p, &g->nodes[c->nodes[j]]);
    c->output = (int64_t)remat__out_bytes(&g->nodes[loss]);
    /* Long chains (heavy's 100,000 adds) are merged into at most
     * MAX_STAGES stages of about equal forward cost: the DP is cubic in the
     * number of stages. A merged stage's backward needs what each of its
     * parts needs. */
    if (c->n_stages > MAX_STAGES) {
        double total = 0, acc = 0;
        for (int i = 0; i < c->n_stages; i++) total += c->fwd[i] + 1e-30;
        int out_n = 0;
        for (int i = 0; i < c->n_stages; i++) {
            acc += c->fwd[i] + 1e-30;
            if (acc >= total * (out_n + 1) / MAX_STAGES || i == c->n_stages - 1) c->off[++out_n] = c->off[i + 1];
        }
        c->n_stages = out_n;
    }
    c->ex = calloc((size_t)c->n_stages + 1, sizeof *c->ex);
    c->sel = calloc((size_t)n, 1);
    if (!c->ex || !c->sel) {
        rc = remat__err(REMAT_NOMEM, "out of memory planning");
        goto out;
    }
    memset(needed, 0, (size_t)n);
    for (int i = 0; i < c->n_stages; i++) measure_stage(p, c, i, needed, stack);
out:
    free(needed), free(stack), free(cut);
    if (rc != REMAT_OK) chain_free(c);
    return rc;
}

/* The schedule of a chain operation sequence: inputs first, then per
 * operation the FWD or BWD instructions of its stage's nodes; frees follow
 * from the last use of each value instance. */
static remat_status emit(const remat__prog *p, const chain *c, const remat_chain_plan *plan, remat_node loss,
                         remat__schedule *out) {
    memset(out, 0, sizeof *out);
    out->train = 1;
    out->backward = 1;
    out->loss = loss;
    out->fetch = REMAT_NONE;
    out->origin = "chain";
    int nops = remat_chain_plan_length(plan);
    size_t cap = (size_t)c->n_inputs + 1;
    for (int i = 0; i < nops; i++) {
        remat_chain_op op = remat_chain_plan_op(plan, i);
        if (op.stage < c->n_stages) cap += 2 * (size_t)(c->off[op.stage + 1] - c->off[op.stage]);
    }
    out->ins = malloc(cap * sizeof *out->ins);
    if (!out->ins) return remat__err(REMAT_NOMEM, "out of memory planning");
    out->cap = (int)cap;
    for (int j = 0; j < c->n_inputs; j++) out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = c->inputs[j]};
    for (int i = 0; i < nops; i++) {
        remat_chain_op op = remat_chain_plan_op(plan, i);
        if (op.kind == REMAT_CHAIN_LOSS || op.stage >= c->n_stages) continue;
        int a = c->off[op.stage], b = c->off[op.stage + 1];
        if (op.kind == REMAT_CHAIN_B) {
            if (op.option == 1) /* selective: recompute the cheap values first */
                for (int j = a; j < b; j++)
                    if (c->sel[c->nodes[j]]) out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = c->nodes[j]};
            for (int j = b - 1; j >= a; j--)
                if (p->needs_grad[c->nodes[j]]) out->ins[out->n++] = (remat__instr){.kind = REMAT__I_BWD, .node = c->nodes[j]};
        } else {
            for (int j = a; j < b; j++) out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = c->nodes[j]};
        }
    }
    remat_status st = remat__schedule_add_frees(p, out);
    if (st == REMAT_OK) st = remat__schedule_categorize(p, out);
    if (st != REMAT_OK) remat__schedule_free(out);
    return st;
}

/* What the planner compares candidates by. */
typedef struct {
    const remat_mem_stats *start;
    size_t held_outside;
} basis;

/* Predicted seconds and bytes held (the placed arena and the resident
 * blocks) of a schedule. */
static remat_status measure(const remat__prog *p, const remat__schedule *sc, const basis *b, double *cost,
                            size_t *peak) {
    remat_plan_summary sum;
    remat_status st = remat__schedule_summary(p, sc, b->start, b->held_outside, &sum);
    *cost = sum.seconds;
    *peak = sum.held_bytes;
    return st;
}

/* Plans and emits the chain at `mem` bytes of chain-model memory. */
static remat_status chain_schedule(const remat__prog *p, const chain *c, remat_node loss, int64_t mem,
                                   remat__schedule *sc) {
    remat_chain_plan *plan = NULL;
    remat_status st = remat__chain_solve_ex(c->ex, c->n_stages, c->output, mem, 0, &plan);
    if (st != REMAT_OK) return st;
    st = emit(p, c, plan, loss, sc);
    remat_chain_plan_destroy(plan);
    return st;
}

/* A strategy's schedule as a candidate (store-all, sqrt). */
static remat_status strategy_schedule(const remat__prog *p, remat_node loss, remat_strategy strategy,
                                      remat__schedule *sc) {
    uint8_t *level = NULL;
    remat_status st = remat__strategy_levels(p->g, strategy, &level);
    if (st == REMAT_OK) st = remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, sc);
    free(level);
    return st;
}

/* The memory-efficient form of dense and branchy graphs as candidates:
 * keep the outputs of the expensive nodes (linear, conv) and of the nodes
 * after the last of them, drop every cheap value (concat, normalization,
 * pointwise, pooling) and recompute it from the kept ones just before the
 * backward that reads it (build.c's segment recomputation). Candidate j of
 * N_SELECTIVE also drops the expensive outputs that are cheapest to
 * recompute per byte, in that order, until j/N_SELECTIVE of their bytes
 * are gone: on DenseNet it drops the bottleneck convolutions' wide outputs
 * first (a 1x1 convolution from few channels costs little per byte) and
 * keeps each layer's new features, the per-layer checkpointing people
 * write by hand, at the end. */
#define N_SELECTIVE 8

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

static remat_status keep_expensive_schedule(const remat__prog *p, remat_node loss, int j, remat__schedule *sc) {
    const remat_graph *g = p->g;
    uint8_t *level = malloc((size_t)g->n + 1);
    exp_node *e = malloc(((size_t)g->n + 1) * sizeof *e);
    if (!level || !e) {
        free(level), free(e);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    int32_t last = -1;
    for (int32_t u = 0; u < g->n; u++)
        if (g->nodes[u].leaf == REMAT__LEAF_NONE && expensive(&g->nodes[u])) last = u;
    int ne = 0;
    size_t total = 0;
    for (int32_t u = 0; u < g->n; u++) {
        const remat__node *nd = &g->nodes[u];
        level[u] = nd->leaf != REMAT__LEAF_NONE || u >= last || expensive(nd) ? 0 : REMAT__LEVEL_NONE;
        if (nd->leaf == REMAT__LEAF_NONE && u < last && expensive(nd)) {
            size_t b = remat__out_bytes(nd);
            e[ne++] = (exp_node){remat__node_seconds(p, nd) / (double)(b ? b : 1), b, u};
            total += b;
        }
    }
    qsort(e, (size_t)ne, sizeof *e, by_cost_per_byte);
    size_t dropped = 0, goal = (size_t)((double)total * j / N_SELECTIVE);
    for (int i = 0; i < ne && dropped < goal; i++) {
        level[e[i].node] = REMAT__LEVEL_NONE;
        dropped += e[i].bytes;
    }
    free(e);
    remat_status st = remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, sc);
    free(level);
    if (st == REMAT_OK) sc->origin = "keep-expensive";
    return st;
}

/* ------------------------------------------------------ the candidates */

/* What the candidate generators share. */
typedef struct {
    const remat__prog *p;
    remat_node loss;
    const chain *c;
    const remat__train_dag *dag;
    int64_t floor, top;   /* the chain model's floor and store-all */
    int64_t dfloor, dtop; /* the step DAG's */
} gen_ctx;

/* DTR work per candidate (values visited): about 0.1 s on one core. */
#define DTR_WORK ((int64_t)10 * 1000 * 1000)

static remat_status gen_keep_expensive(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    (void)n;
    return keep_expensive_schedule(x->p, x->loss, j, sc);
}
static remat_status gen_all(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    (void)j, (void)n;
    return strategy_schedule(x->p, x->loss, REMAT_STRATEGY_ALL, sc);
}
static remat_status gen_sqrt(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    (void)j, (void)n;
    return strategy_schedule(x->p, x->loss, REMAT_STRATEGY_SQRT, sc);
}
/* The chain DP at chain-model budgets from the floor to store-all. */
static remat_status gen_chain(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    int64_t mem = x->floor + (int64_t)((double)(x->top - x->floor) * j / (n - 1));
    return chain_schedule(x->p, x->c, x->loss, mem, sc);
}
/* DTR on the whole step at DAG budgets from its floor to below its total
 * (the top is store-all, a candidate already). */
static remat_status gen_dtr(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    int64_t mem = x->dfloor + (int64_t)((double)(x->dtop - x->dfloor) * j / n);
    return remat__train_dag_schedule(x->p, x->dag, mem, DTR_WORK, sc);
}

/* The candidate families, each a generator of `count` schedules:
 * - keep-expensive: the selective schedules above (N_SELECTIVE of them);
 * - all and sqrt: the strategies' own schedules (the DP works on merged
 *   stages, and on a long homogeneous chain such as heavy's, sqrt's finer
 *   boundaries reach below the merged chain's floor);
 * - chain: the DP's plans at a fixed grid of chain-model budgets;
 * - dtr: the DTR fallback's schedules for the whole step as one DAG (for
 *   graphs, or parts of graphs, that do not reduce to a chain: a branchy
 *   stage is all-or-selective to the DP).
 * Every candidate's memory is planned exactly (its arena placed); the
 * fastest under the cost model that holds at most the budget wins. The
 * candidates do not depend on the budget, so a larger budget only adds
 * candidates: the chosen cost never grows with it. */
static const struct {
    const char *name;
    int count;
    remat_status (*make)(const gen_ctx *x, int j, int n, remat__schedule *sc);
} generators[] = {
    {"keep-expensive", N_SELECTIVE, gen_keep_expensive},
    {"all", 1, gen_all},
    {"sqrt", 1, gen_sqrt},
    {"chain", 24, gen_chain},
    {"dtr", 8, gen_dtr},
};

remat_status remat__optimal_schedule(const remat__prog *p, remat_node loss, size_t budget,
                                     const remat_mem_stats *live, size_t held_outside, remat__schedule *out) {
    memset(out, 0, sizeof *out);
    const basis bs = {live, held_outside}, *start = &bs;
    chain c;
    remat__train_dag *dag = NULL;
    remat_status st = chain_init(p, loss, &c);
    if (st != REMAT_OK) return st;
    st = remat__train_dag_build(p, loss, &dag);
    if (st != REMAT_OK) {
        chain_free(&c);
        return st;
    }
    gen_ctx x = {.p = p, .loss = loss, .c = &c, .dag = dag};
    /* The chain model's floor (by bisection on feasibility) and top. */
    x.top = c.output + 1;
    for (int i = 0; i < c.n_stages; i++) x.top += c.ex[i].input + c.ex[i].opt[0].saved;
    int64_t lo = 0, hi = x.top;
    while (lo + 1 < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        remat_chain_plan *plan = NULL;
        if (remat__chain_solve_ex(c.ex, c.n_stages, c.output, mid, 0, &plan) == REMAT_OK) {
            remat_chain_plan_destroy(plan);
            hi = mid;
        } else {
            lo = mid;
        }
    }
    x.floor = hi;
    x.dfloor = remat__train_dag_floor(dag), x.dtop = remat__train_dag_total(dag);
    double best_cost = 0;
    size_t best_peak = 0, min_peak = (size_t)-1;
    int have = 0;
    for (size_t gi = 0; gi < sizeof generators / sizeof generators[0] && st != REMAT_NOMEM; gi++)
        for (int j = 0; j < generators[gi].count; j++) {
            remat__schedule sc;
            double cost = 0;
            size_t peak = 0;
            st = generators[gi].make(&x, j, generators[gi].count, &sc);
            if (st == REMAT_OK) {
                st = measure(p, &sc, start, &cost, &peak);
                if (st != REMAT_OK) remat__schedule_free(&sc);
            }
            if (st == REMAT_BUDGET) continue;
            if (st != REMAT_OK) goto out;
            if (peak < min_peak) min_peak = peak;
            if (peak <= budget && (!have || cost < best_cost || (cost == best_cost && peak < best_peak))) {
                if (have) remat__schedule_free(out);
                *out = sc, best_cost = cost, best_peak = peak, have = 1;
                snprintf(out->candidate, sizeof out->candidate, "%s %d/%d", generators[gi].name, j + 1,
                         generators[gi].count);
            } else {
                remat__schedule_free(&sc);
            }
        }
    st = have ? REMAT_OK
              : remat__err(REMAT_BUDGET,
                           "no schedule fits the budget of %zu bytes (%.1f MiB); the smallest feasible budget "
                           "is %zu bytes (%.1f MiB), of which %zu are parameters, gradients and optimizer state",
                           budget, (double)budget / 1048576.0, min_peak, (double)min_peak / 1048576.0,
                           held_outside);
out:
    chain_free(&c);
    remat__train_dag_free(dag);
    return st;
}
