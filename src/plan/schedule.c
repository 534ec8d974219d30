/* schedule.c: graph analysis, the store-all schedule, liveness and the
 * memory simulator.
 *
 * The simulator replays a schedule's allocations exactly as the executor
 * makes them (same order, same sizes from the op table), so the peak it
 * predicts is the peak the executor's allocator measures.
 */
#include "schedule.h"

#include <stdlib.h>

remat_status remat__prog_init(remat__prog *p, const remat_graph *g, int nth) {
    memset(p, 0, sizeof *p);
    p->g = g;
    p->nth = nth;
    p->needs_grad = calloc((size_t)g->n + 1, 1);
    if (!p->needs_grad) return remat__err(REMAT_NOMEM, "out of memory analysing the graph");
    /* Creation order is topological: one forward sweep suffices. */
    for (int v = 0; v < g->n; v++) {
        const remat__node *n = &g->nodes[v];
        if (n->leaf == REMAT__LEAF_PARAM) {
            p->needs_grad[v] = 1;
            continue;
        }
        for (int i = 0; i < n->n_in; i++)
            if (p->needs_grad[n->in[i]]) p->needs_grad[v] = 1;
    }
    return REMAT_OK;
}

void remat__prog_free(remat__prog *p) {
    free(p->needs_grad);
    p->needs_grad = NULL;
}

size_t remat__value_bytes(const remat_graph *g, int32_t v) {
    const remat__node *n = &g->nodes[REMAT__VAL_NODE(v)];
    switch (REMAT__VAL_KIND(v)) {
    case REMAT__V_OUT:
    case REMAT__V_GRAD:
        return remat__out_bytes(n);
    case REMAT__V_AUX: {
        const remat__op *op = remat__ops[n->op];
        return op->aux_bytes ? op->aux_bytes(g, n) : 0;
    }
    }
    return 0;
}

int remat__bwd_writes(const remat__prog *p, const remat__node *n, int i) {
    if (i == 1 && (remat__ops[n->op]->flags & REMAT__OP_NODIFF_IN1)) return 0;
    return p->needs_grad[n->in[i]];
}

static remat_status push(remat__schedule *s, remat__instr in) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        remat__instr *ins = realloc(s->ins, (size_t)cap * sizeof *ins);
        if (!ins) return remat__err(REMAT_NOMEM, "out of memory building a schedule");
        s->ins = ins;
        s->cap = cap;
    }
    s->ins[s->n++] = in;
    return REMAT_OK;
}

void remat__schedule_free(remat__schedule *s) {
    free(s->ins);
    memset(s, 0, sizeof *s);
}

/* Marks every node that `root` depends on (explicit stack, no recursion). */
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

remat_status remat__schedule_all(const remat__prog *p, remat_node loss, remat_node fetch,
                                 int train, int backward, remat__schedule *out) {
    const remat_graph *g = p->g;
    memset(out, 0, sizeof *out);
    out->train = train;
    out->backward = backward;
    out->loss = loss;
    out->fetch = fetch;
    uint8_t *needed = calloc((size_t)g->n, 1);
    if (!needed) return remat__err(REMAT_NOMEM, "out of memory building a schedule");
    remat_status st = mark_needed(g, loss, needed);
    if (st == REMAT_OK) st = mark_needed(g, fetch, needed);
    for (int v = 0; v < g->n && st == REMAT_OK; v++)
        if (needed[v] && !remat__is_resident(&g->nodes[v]))
            st = push(out, (remat__instr){.kind = REMAT__I_FWD, .node = v});
    if (backward)
        for (int v = g->n - 1; v >= 0 && st == REMAT_OK; v--)
            if (needed[v] && p->needs_grad[v] && g->nodes[v].leaf == REMAT__LEAF_NONE)
                st = push(out, (remat__instr){.kind = REMAT__I_BWD, .node = v});
    free(needed);
    if (st == REMAT_OK) st = remat__schedule_finish(p, out);
    if (st != REMAT_OK) remat__schedule_free(out);
    return st;
}

/* Values an instruction reads or writes (at most 2 + 3*MAX_IN). */
static int instr_values(const remat__prog *p, const remat__instr *in, int32_t *vals, uint8_t *by_bwd) {
    const remat_graph *g = p->g;
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    int k = 0;
    if (in->kind == REMAT__I_FWD) {
        for (int i = 0; i < n->n_in; i++)
            if (!remat__is_resident(&g->nodes[n->in[i]])) vals[k] = REMAT__VAL(n->in[i], REMAT__V_OUT), by_bwd[k++] = 0;
        vals[k] = REMAT__VAL(in->node, REMAT__V_OUT), by_bwd[k++] = 0;
        if (op->aux_bytes) vals[k] = REMAT__VAL(in->node, REMAT__V_AUX), by_bwd[k++] = 0;
    } else if (in->kind == REMAT__I_BWD) {
        vals[k] = REMAT__VAL(in->node, REMAT__V_GRAD), by_bwd[k++] = 1;
        for (int i = 0; i < n->n_in; i++) {
            if ((op->saves & REMAT__SAVE_IN(i)) && !remat__is_resident(&g->nodes[n->in[i]]))
                vals[k] = REMAT__VAL(n->in[i], REMAT__V_OUT), by_bwd[k++] = 1;
            if (remat__bwd_writes(p, n, i) && g->nodes[n->in[i]].leaf != REMAT__LEAF_PARAM)
                vals[k] = REMAT__VAL(n->in[i], REMAT__V_GRAD), by_bwd[k++] = 1;
        }
        if (op->saves & REMAT__SAVE_OUT) vals[k] = REMAT__VAL(in->node, REMAT__V_OUT), by_bwd[k++] = 1;
        if (op->saves & REMAT__SAVE_AUX) vals[k] = REMAT__VAL(in->node, REMAT__V_AUX), by_bwd[k++] = 1;
    }
    return k;
}

remat_status remat__schedule_finish(const remat__prog *p, remat__schedule *s) {
    const remat_graph *g = p->g;
    size_t nv = (size_t)g->n * 3;
    int32_t *last = malloc(nv * sizeof *last);
    uint8_t *act = calloc(nv, 1);
    int32_t *defined_at = malloc(nv * sizeof *defined_at);
    if (!last || !act || !defined_at) {
        free(last), free(act), free(defined_at);
        return remat__err(REMAT_NOMEM, "out of memory building a schedule");
    }
    for (size_t v = 0; v < nv; v++) last[v] = -1, defined_at[v] = -1;
    int32_t vals[2 + 3 * REMAT__MAX_IN];
    uint8_t by_bwd[2 + 3 * REMAT__MAX_IN];
    for (int i = 0; i < s->n; i++) {
        int k = instr_values(p, &s->ins[i], vals, by_bwd);
        for (int j = 0; j < k; j++) {
            if (defined_at[vals[j]] < 0) defined_at[vals[j]] = i;
            last[vals[j]] = i;
            if (by_bwd[j]) act[vals[j]] = 1;
        }
    }
    /* Rebuild with frees after each last use, in value order. */
    remat__schedule old = *s;
    s->ins = NULL, s->n = 0, s->cap = 0;
    remat_status st = REMAT_OK;
    /* Bucket the values by their last use. */
    int32_t *head = malloc((size_t)(old.n + 1) * sizeof *head);
    int32_t *next = malloc(nv * sizeof *next);
    if (!head || !next) st = remat__err(REMAT_NOMEM, "out of memory building a schedule");
    for (int i = 0; st == REMAT_OK && i < old.n; i++) head[i] = -1;
    for (int64_t v = (int64_t)nv - 1; st == REMAT_OK && v >= 0; v--)
        if (last[v] >= 0) next[v] = head[last[v]], head[last[v]] = (int32_t)v;
    for (int i = 0; st == REMAT_OK && i < old.n; i++) {
        remat__instr in = old.ins[i];
        if (in.kind == REMAT__I_FWD) {
            in.cat = act[REMAT__VAL(in.node, REMAT__V_OUT)] ? REMAT_MEM_ACT : REMAT_MEM_TRANSIENT;
            in.aux_cat = act[REMAT__VAL(in.node, REMAT__V_AUX)] ? REMAT_MEM_ACT : REMAT_MEM_TRANSIENT;
        }
        st = push(s, in);
        for (int32_t v = head[i]; st == REMAT_OK && v >= 0; v = next[v])
            st = push(s, (remat__instr){.kind = REMAT__I_FREE, .node = REMAT__VAL_NODE(v), .value = v});
    }
    free(head), free(next), free(last), free(act), free(defined_at);
    free(old.ins);
    return st;
}

/* ------------------------------------------------------------- simulator */

typedef struct {
    remat_mem_stats st;
} sim;

static void sim_alloc(remat_mem_stats *st, int cat, size_t b) {
    st->live[cat] += b;
    st->live[REMAT_MEM_TOTAL] += b;
    if (st->live[cat] > st->peak[cat]) st->peak[cat] = st->live[cat];
    if (st->live[REMAT_MEM_TOTAL] > st->peak[REMAT_MEM_TOTAL])
        st->peak[REMAT_MEM_TOTAL] = st->live[REMAT_MEM_TOTAL];
}

static void sim_free(remat_mem_stats *st, int cat, size_t b) {
    st->live[cat] -= b;
    st->live[REMAT_MEM_TOTAL] -= b;
}

remat_status remat__simulate(const remat__prog *p, const remat__schedule *s,
                             const remat_mem_stats *start, remat_mem_stats *out) {
    const remat_graph *g = p->g;
    size_t nv = (size_t)g->n * 3;
    int8_t *cat = malloc(nv); /* -1: not resident */
    if (!cat) return remat__err(REMAT_NOMEM, "out of memory simulating a schedule");
    memset(cat, -1, nv);
    remat_mem_stats st = *start;
    for (int i = 0; i < REMAT_MEM_COUNT; i++) st.peak[i] = st.live[i];
    remat_status rc = REMAT_OK;
    for (int i = 0; i < s->n && rc == REMAT_OK; i++) {
        const remat__instr *in = &s->ins[i];
        const remat__node *n = &g->nodes[in->node];
        const remat__op *op = remat__ops[n->op];
        if (in->kind == REMAT__I_FWD) {
            int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
            if (cat[vo] >= 0) {
                rc = remat__err(REMAT_INTERNAL, "schedule computes node %d while its output is resident", in->node);
                break;
            }
            sim_alloc(&st, in->cat, remat__value_bytes(g, vo));
            cat[vo] = (int8_t)in->cat;
            if (op->aux_bytes && cat[va] < 0) {
                sim_alloc(&st, in->aux_cat, remat__value_bytes(g, va));
                cat[va] = (int8_t)in->aux_cat;
            }
            size_t ws = op->fwd_ws ? op->fwd_ws(g, n, p->nth) : 0;
            sim_alloc(&st, REMAT_MEM_WORKSPACE, ws);
            sim_free(&st, REMAT_MEM_WORKSPACE, ws);
        } else if (in->kind == REMAT__I_BWD) {
            int32_t vg = REMAT__VAL(in->node, REMAT__V_GRAD);
            if (cat[vg] < 0) { /* the loss: its gradient is seeded with 1 */
                sim_alloc(&st, REMAT_MEM_TRANSIENT, remat__value_bytes(g, vg));
                cat[vg] = REMAT_MEM_TRANSIENT;
            }
            for (int j = 0; j < n->n_in; j++) {
                if (!remat__bwd_writes(p, n, j) || g->nodes[n->in[j]].leaf == REMAT__LEAF_PARAM) continue;
                int32_t vi = REMAT__VAL(n->in[j], REMAT__V_GRAD);
                if (cat[vi] < 0) {
                    sim_alloc(&st, REMAT_MEM_TRANSIENT, remat__value_bytes(g, vi));
                    cat[vi] = REMAT_MEM_TRANSIENT;
                }
            }
            size_t ws = op->bwd_ws ? op->bwd_ws(g, n, p->nth) : 0;
            sim_alloc(&st, REMAT_MEM_WORKSPACE, ws);
            sim_free(&st, REMAT_MEM_WORKSPACE, ws);
        } else {
            if (cat[in->value] >= 0) {
                sim_free(&st, cat[in->value], remat__value_bytes(g, in->value));
                cat[in->value] = -1;
            }
        }
    }
    free(cat);
    *out = st;
    return rc;
}
