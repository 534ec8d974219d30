/* schedule.c: graph analysis, liveness (the frees of a schedule), the
 * categories of its values, and its predicted peaks (from its memory
 * plan, memplan.c, the same events the executor takes).
 */
#include "schedule.h"

#include <stdlib.h>

remat_status remat__prog_init(remat__prog *p, const remat_graph *g, int nth, remat_device device, void *dev) {
    memset(p, 0, sizeof *p);
    p->g = g;
    p->nth = nth;
    p->device = device;
    p->dev = dev;
    p->needs_grad = calloc((size_t)g->n + 1, 1);
    p->ws = calloc(2 * (size_t)g->n + 1, sizeof *p->ws);
    p->node_cost = calloc(3 * (size_t)g->n + 1, sizeof *p->node_cost);
    p->vbytes = calloc(3 * (size_t)g->n + 1, sizeof *p->vbytes);
    if (!p->needs_grad || !p->ws || !p->node_cost || !p->vbytes) {
        remat__prog_free(p);
        return remat__err(REMAT_NOMEM, "out of memory analysing the graph");
    }
    for (int v = 0; v < g->n; v++) {
        const remat__node *n = &g->nodes[v];
        const remat__op *op = remat__ops[n->op];
        if (n->leaf != REMAT__LEAF_NONE) continue;
        if (device == REMAT_DEVICE_CPU) {
            int nt = remat__node_threads(g, n, nth);
            p->ws[2 * v] = op->fwd_ws ? op->fwd_ws(g, n, nt) : 0;
            p->ws[2 * v + 1] = op->bwd_ws ? op->bwd_ws(g, n, nt) : 0;
        } else if (op->cuda) {
            p->ws[2 * v] = op->cuda->fwd_ws ? op->cuda->fwd_ws(dev, g, n) : 0;
            p->ws[2 * v + 1] = op->cuda->bwd_ws ? op->cuda->bwd_ws(dev, g, n) : 0;
            p->estimated += !dev && op->cuda->asks_device && op->cuda->asks_device(g, n);
        } else {
            remat__prog_free(p);
            return remat__err(REMAT_UNSUPPORTED, "op '%s' has no %s kernels in this build", op->name,
                              remat_device_str(device));
        }
    }
    remat__prog_size_values(p);
    remat__prog_set_cost(p, NULL);
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
    free(p->dt);
    free(p->native);
    p->dt = p->native = NULL;
    free(p->needs_grad);
    free(p->ws);
    free(p->node_cost);
    free(p->vbytes);
    p->vbytes = NULL;
    p->needs_grad = NULL;
    p->ws = NULL;
    p->node_cost = NULL;
}

void remat__mark_needed(const remat_graph *g, remat_node root, uint8_t *needed, int32_t *stack) {
    if (root == REMAT_NONE) return;
    int top = 0;
    if (!needed[root]) needed[root] = 1, stack[top++] = root;
    while (top > 0) {
        const remat__node *n = &g->nodes[stack[--top]];
        for (int i = 0; i < n->n_in; i++)
            if (!needed[n->in[i]]) needed[n->in[i]] = 1, stack[top++] = n->in[i];
    }
}

int remat__cut_points(const remat_graph *g, const uint8_t *needed, int32_t *out, int32_t *reach) {
    int n = g->n, k = 0;
    for (int u = 0; u < n; u++) reach[u] = u; /* the last op consumer of u */
    for (int c = 0; c < n; c++) {
        const remat__node *nd = &g->nodes[c];
        if ((needed && !needed[c]) || nd->leaf != REMAT__LEAF_NONE) continue;
        for (int i = 0; i < nd->n_in; i++)
            if (reach[nd->in[i]] < c) reach[nd->in[i]] = c;
    }
    int32_t far = -1; /* the farthest consumer of any op node before u */
    for (int u = 0; u < n; u++) {
        if ((needed && !needed[u]) || g->nodes[u].leaf != REMAT__LEAF_NONE) continue;
        if (far <= u) out[k++] = u;
        if (reach[u] > far) far = reach[u];
    }
    return k;
}

/* The bytes of value v, from the graph (remat__value_bytes reads them
 * from p->vbytes). */
static size_t value_bytes(const remat__prog *p, int32_t v) {
    const remat_graph *g = p->g;
    const remat__node *n = &g->nodes[REMAT__VAL_NODE(v)];
    switch (REMAT__VAL_KIND(v)) {
    case REMAT__V_GRAD:
        if (g->traced && g->traced[REMAT__VAL_NODE(v)].grad >= 0) return (size_t)g->traced[REMAT__VAL_NODE(v)].grad;
        return remat__node_bytes(p, REMAT__VAL_NODE(v));
    case REMAT__V_OUT: return remat__node_bytes(p, REMAT__VAL_NODE(v));
    case REMAT__V_AUX: {
        const remat__op *op = remat__ops[n->op];
        return op->aux_bytes ? op->aux_bytes(g, n) : 0;
    }
    }
    return 0;
}

void remat__prog_size_values(remat__prog *p) {
    for (int32_t v = 0; v < 3 * p->g->n; v++) p->vbytes[v] = value_bytes(p, v);
}

int remat__bwd_writes(const remat__prog *p, const remat__node *n, int i) {
    if (i == 1 && (remat__ops[n->op]->flags & REMAT__OP_NODIFF_IN1)) return 0;
    return p->needs_grad[n->in[i]];
}

void remat__schedule_free(remat__schedule *s) {
    free(s->ins);
    memset(s, 0, sizeof *s);
}

/* The frees of a schedule while they are found: per value the
 * instruction of its open instance's last use, and per instruction the
 * values freed after it, chained from head through next. */
typedef struct {
    int32_t *last; /* per value: last use of the open instance, -1 none */
    int32_t *head; /* per instruction: its first freed entry, -1 none */
    int32_t *fv;   /* per entry: the freed value */
    int32_t *next; /* per entry: the next entry of the same instruction */
    int nf, capf;
} frees;

/* Ends value v's open instance: freed after its last use. 0 when out of
 * memory. */
static int close_value(frees *f, int32_t v) {
    if (f->nf == f->capf) {
        f->capf = f->capf ? 2 * f->capf : 1024;
        int32_t *a = realloc(f->fv, (size_t)f->capf * sizeof *f->fv);
        int32_t *b = realloc(f->next, (size_t)f->capf * sizeof *f->next);
        if (a) f->fv = a;
        if (b) f->next = b;
        if (!a || !b) return 0;
    }
    f->fv[f->nf] = v, f->next[f->nf] = f->head[f->last[v]], f->head[f->last[v]] = f->nf, f->nf++;
    f->last[v] = -1;
    return 1;
}

/* Whether the caller holds node u's value to the step's end. */
static int to_end(const remat_graph *g, int32_t u) { return g->traced && g->traced[u].held == REMAT__HELD_TO_END; }

/* The uses of forward instruction i: its inputs, in the forward pass
 * (fwd: no backward ran yet) the values the framework's code holds until
 * it, and its output and aux, whose older instances (a recomputation's)
 * end first, or at the schedule's last instruction `end` where the
 * caller holds them. 0 when out of memory. */
static int fwd_uses(const remat_graph *g, frees *f, const remat__instr *in, int i, int fwd, int end) {
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    for (int j = 0; j < n->n_in; j++)
        if (!remat__is_resident(&g->nodes[n->in[j]])) f->last[REMAT__VAL(n->in[j], REMAT__V_OUT)] = i;
    for (int32_t h = fwd && g->traced ? g->traced[in->node].holds : 0; h; h = g->traced[h - 1].hold_next)
        if (f->last[REMAT__VAL(h - 1, REMAT__V_OUT)] >= 0) f->last[REMAT__VAL(h - 1, REMAT__V_OUT)] = i;
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
    if (f->last[vo] >= 0 && to_end(g, in->node)) f->last[vo] = end;
    if (f->last[vo] >= 0 && !close_value(f, vo)) return 0; /* a recomputation: the old instance ends before */
    f->last[vo] = i;
    /* A stateful op's recomputation reuses the aux of its first execution
     * (the batch statistics: state changes once); any other op's aux is
     * made again, like its output, so the first one goes after its last
     * use (attention's probabilities are what recomputing it is for). */
    if (op->aux_bytes && !(op->flags & REMAT__OP_STATEFUL) && f->last[va] >= 0 && !close_value(f, va)) return 0;
    if (op->aux_bytes) f->last[va] = i;
    return 1;
}

/* The uses of backward instruction i: its gradient, what it saved, and
 * the gradients it writes. */
static void bwd_uses(const remat__prog *p, frees *f, const remat__instr *in, int i) {
    const remat_graph *g = p->g;
    const remat__node *n = &g->nodes[in->node];
    f->last[REMAT__VAL(in->node, REMAT__V_GRAD)] = i;
    for (int j = 0; j < n->n_in; j++) {
        if ((n->saves & REMAT__SAVE_IN(j)) && !remat__is_resident(&g->nodes[n->in[j]]))
            f->last[REMAT__VAL(n->in[j], REMAT__V_OUT)] = i;
        if (remat__bwd_writes(p, n, j) && g->nodes[n->in[j]].leaf != REMAT__LEAF_PARAM)
            f->last[REMAT__VAL(n->in[j], REMAT__V_GRAD)] = i;
    }
    if (n->saves & REMAT__SAVE_OUT) f->last[REMAT__VAL(in->node, REMAT__V_OUT)] = i;
    if (n->saves & REMAT__SAVE_AUX) f->last[REMAT__VAL(in->node, REMAT__V_AUX)] = i;
}

/* Rewrites s with each instruction followed by its frees, in value order. */
static remat_status insert_frees(remat__schedule *s, const frees *f) {
    remat__schedule old = *s;
    remat__instr *ins = malloc(((size_t)old.n + (size_t)f->nf + 1) * sizeof *ins);
    if (!ins) return remat__err(REMAT_NOMEM, "out of memory building a schedule");
    int k = 0;
    for (int i = 0; i < old.n; i++) {
        ins[k++] = old.ins[i];
        int base = k;
        for (int32_t e = f->head[i]; e >= 0; e = f->next[e]) {
            int32_t v = f->fv[e];
            int pos = k;
            while (pos > base && ins[pos - 1].value > v) ins[pos] = ins[pos - 1], pos--;
            ins[pos] = (remat__instr){.kind = REMAT__I_FREE, .node = REMAT__VAL_NODE(v), .value = v};
            k++;
        }
    }
    free(old.ins);
    s->ins = ins;
    s->n = k;
    s->cap = (int)(old.n + f->nf + 1);
    return REMAT_OK;
}

remat_status remat__schedule_add_frees(const remat__prog *p, remat__schedule *s) {
    size_t nv = (size_t)p->g->n * 3;
    frees f = {.last = malloc(nv * sizeof *f.last), .head = malloc(((size_t)s->n + 1) * sizeof *f.head)};
    int ok = f.last && f.head;
    if (ok) {
        for (size_t v = 0; v < nv; v++) f.last[v] = -1;
        for (int i = 0; i <= s->n; i++) f.head[i] = -1;
    }
    for (int i = 0, fwd = 1; ok && i < s->n; i++) {
        const remat__instr *in = &s->ins[i];
        if (in->kind == REMAT__I_FWD) ok = fwd_uses(p->g, &f, in, i, fwd, s->n - 1);
        else if (in->kind == REMAT__I_BWD) bwd_uses(p, &f, in, i), fwd = 0;
        else if (in->kind == REMAT__I_OUT || in->kind == REMAT__I_IN) f.last[in->value] = i;
        else if (in->kind == REMAT__I_FREE) f.last[in->value] = -1; /* freed where the schedule says */
    }
    /* every instance still open ends after its last use (the caller's after the last instruction) */
    for (size_t v = 0; ok && v < nv; v++) {
        if (f.last[v] >= 0 && REMAT__VAL_KIND(v) == REMAT__V_OUT && to_end(p->g, REMAT__VAL_NODE(v)))
            f.last[v] = s->n - 1;
        if (f.last[v] >= 0) ok = close_value(&f, (int32_t)v);
    }
    remat_status st = ok ? insert_frees(s, &f) : remat__err(REMAT_NOMEM, "out of memory building a schedule");
    free(f.last), free(f.head), free(f.next), free(f.fv);
    return st;
}

remat_status remat__schedule_add_reduces(const remat__prog *p, remat__schedule *s, const int32_t *bucket_of, int nb,
                                         int at_end) {
    const remat_graph *g = p->g;
    int32_t *after = malloc(((size_t)nb + 1) * sizeof *after); /* per bucket: its instruction */
    int32_t *first = malloc(((size_t)nb + 1) * sizeof *first); /* per bucket: its first parameter */
    remat__instr *ins = malloc(((size_t)s->n + (size_t)nb + 1) * sizeof *ins);
    if (!after || !first || !ins) {
        free(after), free(first), free(ins);
        return remat__err(REMAT_NOMEM, "out of memory placing gradient reductions");
    }
    for (int b = 0; b < nb; b++) after[b] = at_end ? s->n - 1 : -1, first[b] = -1;
    for (int u = g->n - 1; u >= 0; u--)
        if (bucket_of[u] >= 0) first[bucket_of[u]] = u;
    for (int i = 0; i < s->n && !at_end; i++) {
        const remat__instr *in = &s->ins[i];
        if (in->kind != REMAT__I_BWD) continue;
        const remat__node *n = &g->nodes[in->node];
        for (int j = 0; j < n->n_in; j++) {
            int32_t u = n->in[j];
            if (bucket_of[u] >= 0 && remat__bwd_writes(p, n, j)) after[bucket_of[u]] = i;
        }
    }
    remat_status st = REMAT_OK;
    for (int b = 0; b < nb && st == REMAT_OK; b++)
        if (after[b] < 0 || first[b] < 0)
            st = remat__err(REMAT_INTERNAL, "gradient bucket %d: no backward writes its parameters", b);
    int k = 0;
    for (int i = 0; i < s->n && st == REMAT_OK; i++) {
        ins[k++] = s->ins[i];
        for (int b = 0; b < nb; b++)
            if (after[b] == i) ins[k++] = (remat__instr){.kind = REMAT__I_REDUCE, .node = first[b], .value = b};
    }
    if (st == REMAT_OK) {
        free(s->ins);
        s->ins = ins, s->n = k, s->cap = s->n + nb + 1;
    } else {
        free(ins);
    }
    free(after), free(first);
    return st;
}

remat_status remat__schedule_categorize(const remat__prog *p, remat__schedule *s) {
    const remat_graph *g = p->g;
    size_t nv = (size_t)g->n * 3;
    /* open[v]: index of the FWD that allocated the live instance of v */
    int32_t *open = malloc(nv * sizeof *open);
    uint8_t *seen = calloc((size_t)g->n + 1, 1); /* per node: computed already */
    if (!open || !seen) {
        free(open), free(seen);
        return remat__err(REMAT_NOMEM, "out of memory building a schedule");
    }
    for (size_t v = 0; v < nv; v++) open[v] = -1;
    for (int i = 0; i < s->n; i++) {
        remat__instr *in = &s->ins[i];
        if (in->kind == REMAT__I_FWD) {
            int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
            in->first = !seen[in->node];
            seen[in->node] = 1;
            in->cat = REMAT_MEM_TRANSIENT;
            in->aux_cat = REMAT_MEM_TRANSIENT;
            open[vo] = i;
            if (open[va] < 0) open[va] = i; /* a recomputation reuses a live aux */
        } else if (in->kind == REMAT__I_BWD) {
            const remat__node *n = &g->nodes[in->node];
            for (int j = 0; j < n->n_in; j++)
                if ((n->saves & REMAT__SAVE_IN(j)) && open[REMAT__VAL(n->in[j], REMAT__V_OUT)] >= 0)
                    s->ins[open[REMAT__VAL(n->in[j], REMAT__V_OUT)]].cat = REMAT_MEM_ACT;
            if ((n->saves & REMAT__SAVE_OUT) && open[REMAT__VAL(in->node, REMAT__V_OUT)] >= 0)
                s->ins[open[REMAT__VAL(in->node, REMAT__V_OUT)]].cat = REMAT_MEM_ACT;
            if ((n->saves & REMAT__SAVE_AUX) && open[REMAT__VAL(in->node, REMAT__V_AUX)] >= 0)
                s->ins[open[REMAT__VAL(in->node, REMAT__V_AUX)]].aux_cat = REMAT_MEM_ACT;
        } else if (in->kind == REMAT__I_FREE) {
            open[in->value] = -1;
        } else if (in->kind == REMAT__I_OUT && open[in->value] >= 0) {
            /* kept for backward, on the host for a while */
            remat__instr *mk = &s->ins[open[in->value]];
            if (REMAT__VAL_KIND(in->value) == REMAT__V_AUX) mk->aux_cat = REMAT_MEM_ACT;
            else mk->cat = REMAT_MEM_ACT;
        } else if (in->kind == REMAT__I_IN) {
            in->cat = REMAT_MEM_ACT;
            open[in->value] = i;
        }
    }
    free(open), free(seen);
    return REMAT_OK;
}
