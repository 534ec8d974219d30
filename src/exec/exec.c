/* exec.c: the executor, the only code that runs schedules.
 *
 * It walks the instruction list, allocating each value through the
 * session's accounting allocator in exactly the order the simulator
 * assumes, and calls the op table's kernels on the thread pool. A node's
 * first forward in a run commits its side effects (BatchNorm's running
 * statistics); later ones are recomputations.
 */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>

static remat_status need(remat_session *s, int32_t v, const char *what, int node) {
    if (s->vals[v]) return REMAT_OK;
    char lb[128];
    return remat__err(REMAT_INTERNAL, "schedule error: %s of %s (node %d) is not resident",
                      what, remat__node_label(&s->g->nodes[REMAT__VAL_NODE(v)], lb, sizeof lb), node);
}

/* The tensor seen by a kernel for input i of node n. */
static void input_tensor(remat_session *s, const remat__node *n, int i, remat__tensor *t) {
    int32_t in = n->in[i];
    const remat__node *src = &s->g->nodes[in];
    t->shape = &src->shape;
    if (remat__is_resident(src))
        t->data = s->params[s->pindex[in]].data;
    else
        t->data = s->vals[REMAT__VAL(in, REMAT__V_OUT)];
}

static void run_fwd(void *ctx, int ith, int nth) {
    const remat__kctx *k = ctx;
    remat__ops[k->node->op]->forward(k, ith, nth);
}

static void run_bwd(void *ctx, int ith, int nth) {
    const remat__kctx *k = ctx;
    remat__ops[k->node->op]->backward(k, ith, nth);
}

/* Runs a kernel on the pool, or inline when the node is small. */
static void run(remat_session *s, int nt, remat__task fn, remat__kctx *k) {
    if (nt == 1) {
        k->pool = NULL; /* barriers are no-ops for one thread */
        fn(k, 0, 1);
    } else {
        remat__pool_run(s->pool, fn, k);
    }
}

static remat_status exec_fwd(remat_session *s, const remat__schedule *sc, const remat__instr *in,
                             float *loss, float *fetch_out) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
    size_t ob = remat__out_bytes(n);
    if (s->vals[vo]) return remat__err(REMAT_INTERNAL, "schedule error: node %d computed twice while resident", in->node);
    s->vals[vo] = remat__alloc_get(&s->alloc, in->cat, ob);
    if (!s->vals[vo]) return REMAT_NOMEM;
    if (n->leaf == REMAT__LEAF_INPUT) {
        if (!s->bound[in->node])
            return remat__err(REMAT_INVALID, "input '%s' has no data: call remat_session_bind", n->name);
        memcpy(s->vals[vo], s->bound[in->node], ob);
    } else {
        size_t ab = op->aux_bytes ? op->aux_bytes(g, n) : 0;
        if (op->aux_bytes && !s->vals[va]) {
            s->vals[va] = remat__alloc_get(&s->alloc, in->aux_cat, ab);
            if (!s->vals[va]) return REMAT_NOMEM;
        }
        remat__tensor ins[REMAT__MAX_IN], out = {s->vals[vo], &n->shape};
        remat__kctx k = {.node = n, .out = &out, .aux = s->vals[va], .train = sc->train,
                         .first = in->first, .seed = s->opts.seed, .step = s->step,
                         .node_id = in->node, .pool = s->pool};
        for (int i = 0; i < n->n_in; i++) {
            input_tensor(s, n, i, &ins[i]);
            if (!ins[i].data) return need(s, REMAT__VAL(n->in[i], REMAT__V_OUT), "the input", in->node);
            k.in[i] = &ins[i];
        }
        int nt = remat__node_threads(g, n, remat__pool_size(s->pool));
        size_t wb = op->fwd_ws ? op->fwd_ws(g, n, nt) : 0;
        k.ws = remat__alloc_get(&s->alloc, REMAT_MEM_WORKSPACE, wb);
        if (!k.ws) return REMAT_NOMEM;
        run(s, nt, run_fwd, &k);
        remat__alloc_put(&s->alloc, REMAT_MEM_WORKSPACE, k.ws, wb);
    }
    if (in->node == sc->loss && loss) *loss = *(const float *)s->vals[vo];
    if (in->node == sc->fetch && fetch_out) memcpy(fetch_out, s->vals[vo], ob);
    return REMAT_OK;
}

static remat_status exec_bwd(remat_session *s, const remat__schedule *sc, const remat__instr *in) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    int32_t vg = REMAT__VAL(in->node, REMAT__V_GRAD);
    if (!s->vals[vg]) {
        if (in->node != sc->loss) return need(s, vg, "the gradient", in->node);
        s->vals[vg] = remat__alloc_get(&s->alloc, REMAT_MEM_TRANSIENT, remat__out_bytes(n));
        if (!s->vals[vg]) return REMAT_NOMEM;
        *(float *)s->vals[vg] = 1.0f;
    }
    remat__tensor ins[REMAT__MAX_IN];
    remat__tensor out = {NULL, &n->shape};
    remat__kctx k = {.node = n, .out = &out, .dout = s->vals[vg], .train = sc->train, .first = 0,
                     .seed = s->opts.seed, .step = s->step, .node_id = in->node, .pool = s->pool};
    for (int i = 0; i < n->n_in; i++) {
        int32_t src = n->in[i];
        input_tensor(s, n, i, &ins[i]);
        if (op->saves & REMAT__SAVE_IN(i)) {
            if (!ins[i].data) return need(s, REMAT__VAL(src, REMAT__V_OUT), "the saved input", in->node);
        } else if (!remat__is_resident(&g->nodes[src])) {
            ins[i].data = NULL; /* not promised: never read */
        }
        k.in[i] = &ins[i];
        if (!remat__bwd_writes(&s->prog, n, i)) continue;
        if (g->nodes[src].leaf == REMAT__LEAF_PARAM) {
            k.din[i] = s->params[s->pindex[src]].grad;
        } else {
            int32_t vi = REMAT__VAL(src, REMAT__V_GRAD);
            if (!s->vals[vi]) {
                s->vals[vi] = remat__alloc_zeroed(&s->alloc, REMAT_MEM_TRANSIENT, remat__out_bytes(&g->nodes[src]));
                if (!s->vals[vi]) return REMAT_NOMEM;
            }
            k.din[i] = s->vals[vi];
        }
    }
    if (op->saves & REMAT__SAVE_OUT) {
        out.data = s->vals[REMAT__VAL(in->node, REMAT__V_OUT)];
        if (!out.data) return need(s, REMAT__VAL(in->node, REMAT__V_OUT), "the saved output", in->node);
    }
    if (op->saves & REMAT__SAVE_AUX) {
        k.aux = s->vals[REMAT__VAL(in->node, REMAT__V_AUX)];
        if (!k.aux) return need(s, REMAT__VAL(in->node, REMAT__V_AUX), "the saved aux", in->node);
    }
    int nt = remat__node_threads(g, n, remat__pool_size(s->pool));
    size_t wb = op->bwd_ws ? op->bwd_ws(g, n, nt) : 0;
    k.ws = remat__alloc_get(&s->alloc, REMAT_MEM_WORKSPACE, wb);
    if (!k.ws) return REMAT_NOMEM;
    run(s, nt, run_bwd, &k);
    remat__alloc_put(&s->alloc, REMAT_MEM_WORKSPACE, k.ws, wb);
    return REMAT_OK;
}

/* Frees every value still resident (after a failed step). */
static void release_all(remat_session *s) {
    int nv = s->g->n * 3;
    for (int v = 0; v < nv; v++)
        if (s->vals[v]) {
            remat__alloc_put(&s->alloc, (remat_mem)s->vcat[v], s->vals[v], remat__value_bytes(s->g, v));
            s->vals[v] = NULL;
        }
}

remat_status remat__exec(remat_session *s, const remat__schedule *sc, float *loss, float *fetch_out) {
    remat_status st = REMAT_OK;
    for (int i = 0; i < sc->n && st == REMAT_OK; i++) {
        const remat__instr *in = &sc->ins[i];
        switch (in->kind) {
        case REMAT__I_FWD:
            if (!s->vals[REMAT__VAL(in->node, REMAT__V_AUX)])
                s->vcat[REMAT__VAL(in->node, REMAT__V_AUX)] = (int8_t)in->aux_cat;
            s->vcat[REMAT__VAL(in->node, REMAT__V_OUT)] = (int8_t)in->cat;
            st = exec_fwd(s, sc, in, loss, fetch_out);
            break;
        case REMAT__I_BWD:
            st = exec_bwd(s, sc, in);
            break;
        case REMAT__I_FREE:
            if (s->vals[in->value]) {
                remat__alloc_put(&s->alloc, (remat_mem)s->vcat[in->value], s->vals[in->value],
                                 remat__value_bytes(s->g, in->value));
                s->vals[in->value] = NULL;
            }
            break;
        }
    }
    if (st != REMAT_OK) release_all(s);
    return st;
}
