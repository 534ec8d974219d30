/* exec.c: the executor, the only code that runs schedules.
 *
 * It interprets a schedule and its memory plan (plan/memplan.c): each
 * instruction takes its allocation events in order, each at its planned
 * offset in the session's arena, and checks that the value and the size it
 * needs are the planned ones (an internal error otherwise: the plan and the
 * executor disagree). Bytes are counted through the session's accounting
 * as they are taken and given back, so the measured peaks are the plan's.
 * Kernels come from the op table entry of the session's backend; bound
 * inputs are uploaded and the loss and fetched values downloaded through
 * the backend's explicit copies, and a run ends at the backend's one
 * synchronization point. A node's first forward in a run commits its side
 * effects (BatchNorm's running statistics); later ones are recomputations.
 */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>


/* Takes the next planned event, for value v (-1: a workspace) of `bytes`
 * and category cat. */
static remat_status take(remat_session *s, int32_t v, remat_mem cat, size_t bytes, void **out) {
    const remat__memplan *m = s->cur;
    int32_t e = s->ev++;
    if (e >= m->n || m->ev[e].value != v || m->ev[e].bytes != bytes || m->ev[e].cat != (uint8_t)cat)
        return remat__err(REMAT_INTERNAL,
                          "memory plan mismatch at event %d: the executor needs %zu bytes of %s for value %d, "
                          "the plan has %zu bytes of %s for value %d",
                          e, bytes, remat_mem_str(cat), v, e < m->n ? m->ev[e].bytes : 0,
                          e < m->n ? remat_mem_str((remat_mem)m->ev[e].cat) : "nothing",
                          e < m->n ? m->ev[e].value : -2);
    *out = (unsigned char *)s->arena + m->ev[e].off;
    remat__alloc_count(&s->alloc, cat, bytes);
    if (v >= 0) s->vev[v] = e;
    if (m->ev[e].zero) return s->be->zero(s->dev, *out, bytes);
    return REMAT_OK;
}

static void give_value(remat_session *s, int32_t v) {
    const remat__mev *x = &s->cur->ev[s->vev[v]];
    remat__alloc_uncount(&s->alloc, (remat_mem)x->cat, x->bytes);
    s->vals[v] = NULL;
}

static remat_status take_value(remat_session *s, int32_t v, remat_mem cat) {
    return take(s, v, cat, remat__value_bytes(s->g, v), &s->vals[v]);
}

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

/* Runs a kernel with its planned workspace. */
static remat_status run(remat_session *s, remat__kctx *k, int32_t node, int backward) {
    size_t wb = remat__ws_bytes(&s->prog, node, backward);
    remat_status st = take(s, -1, REMAT_MEM_WORKSPACE, wb, &k->ws);
    if (st != REMAT_OK) return st;
    st = s->be->run(s->dev, k, backward);
    remat__alloc_uncount(&s->alloc, REMAT_MEM_WORKSPACE, wb);
    return st;
}

/* Where node n's tensor starts in the global batch's (dropout's key): a
 * step's micro-batch k of the global batch is its k-th slice. */
static int64_t elem0(const remat_session *s, const remat__node *n) {
    return s->dp.j >= 0 ? (s->dp.first + s->dp.j) * remat__numel(&n->shape) : 0;
}

static remat_status exec_fwd(remat_session *s, const remat__schedule *sc, const remat__instr *in,
                             float *loss, float *fetch_out) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
    size_t ob = remat__out_bytes(n);
    if (s->vals[vo]) return remat__err(REMAT_INTERNAL, "schedule error: node %d computed twice while resident", in->node);
    if (n->leaf == REMAT__LEAF_INPUT && !s->bound[in->node])
        return remat__err(REMAT_INVALID, "input '%s' has no data: call remat_session_bind", n->name);
    remat_status st = take_value(s, vo, (remat_mem)in->cat);
    if (st != REMAT_OK) return st;
    if (n->leaf == REMAT__LEAF_INPUT) {
        /* a step's micro-batch j is the j-th of the bound buffer's */
        const unsigned char *src = s->bound[in->node];
        st = s->be->upload(s->dev, s->vals[vo], src + (s->dp.j > 0 ? (size_t)s->dp.j * ob : 0), ob);
    } else {
        if (op->aux_bytes && !s->vals[va] && (st = take_value(s, va, (remat_mem)in->aux_cat)) != REMAT_OK) return st;
        remat__tensor ins[REMAT__MAX_IN], out = {s->vals[vo], &n->shape};
        remat__kctx k = {.graph = g, .node = n, .out = &out, .aux = s->vals[va], .train = sc->train,
                         .first = in->first, .seed = s->opts.seed, .step = s->step, .node_id = in->node,
                         .elem0 = elem0(s, n), .dev = s->dev};
        const remat__dp *d = &s->dp;
        if (d->j >= 0 && in->first && sc->train && d->soff && d->soff[in->node] != SIZE_MAX)
            k.stats = d->stats + (size_t)d->j * d->sdoubles + d->soff[in->node]; /* committed after the step */
        for (int i = 0; i < n->n_in; i++) {
            input_tensor(s, n, i, &ins[i]);
            if (!ins[i].data) return need(s, REMAT__VAL(n->in[i], REMAT__V_OUT), "the input", in->node);
            k.in[i] = &ins[i];
        }
        st = run(s, &k, in->node, 0);
    }
    if (st != REMAT_OK) return st;
    if (in->node == sc->loss && loss) st = s->be->download(s->dev, loss, s->vals[vo], sizeof *loss);
    if (st == REMAT_OK && in->node == sc->fetch && fetch_out) st = s->be->download(s->dev, fetch_out, s->vals[vo], ob);
    return st;
}

static remat_status exec_bwd(remat_session *s, const remat__schedule *sc, const remat__instr *in) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    int32_t vg = REMAT__VAL(in->node, REMAT__V_GRAD);
    remat_status st = REMAT_OK;
    if (!s->vals[vg]) {
        if (in->node != sc->loss) return need(s, vg, "the gradient", in->node);
        if ((st = take_value(s, vg, REMAT_MEM_TRANSIENT)) != REMAT_OK) return st;
        if ((st = s->be->one(s->dev, s->vals[vg])) != REMAT_OK) return st;
    }
    remat__tensor ins[REMAT__MAX_IN];
    remat__tensor out = {NULL, &n->shape};
    remat__kctx k = {.graph = g, .node = n, .out = &out, .dout = s->vals[vg], .train = sc->train, .first = 0,
                     .seed = s->opts.seed, .step = s->step, .node_id = in->node, .elem0 = elem0(s, n),
                     .dev = s->dev};
    for (int i = 0; i < n->n_in; i++) {
        int32_t src = n->in[i];
        input_tensor(s, n, i, &ins[i]);
        if (n->saves & REMAT__SAVE_IN(i)) {
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
            if (!s->vals[vi] && (st = take_value(s, vi, REMAT_MEM_TRANSIENT)) != REMAT_OK) return st;
            k.din[i] = s->vals[vi];
        }
    }
    if (n->saves & REMAT__SAVE_OUT) {
        out.data = s->vals[REMAT__VAL(in->node, REMAT__V_OUT)];
        if (!out.data) return need(s, REMAT__VAL(in->node, REMAT__V_OUT), "the saved output", in->node);
    }
    if (n->saves & REMAT__SAVE_AUX) {
        k.aux = s->vals[REMAT__VAL(in->node, REMAT__V_AUX)];
        if (!k.aux) return need(s, REMAT__VAL(in->node, REMAT__V_AUX), "the saved aux", in->node);
    }
    return run(s, &k, in->node, 1);
}

/* Gives back every value still resident (after a failed run). */
static void release_all(remat_session *s) {
    int nv = s->g->n * 3;
    for (int v = 0; v < nv; v++)
        if (s->vals[v]) give_value(s, v);
}

/* Walks the schedule once. */
static remat_status walk(remat_session *s, const remat__schedule *sc, float *loss, float *fetch_out) {
    remat_status st = REMAT_OK;
    s->ev = 0;
    for (int i = 0; i < sc->n && st == REMAT_OK; i++) {
        const remat__instr *in = &sc->ins[i];
        double t0 = s->profiling ? remat__now() : 0.0;
        switch (in->kind) {
        case REMAT__I_FWD:
            st = exec_fwd(s, sc, in, loss, fetch_out);
            break;
        case REMAT__I_BWD:
            st = exec_bwd(s, sc, in);
            break;
        case REMAT__I_FREE:
            if (s->vals[in->value]) give_value(s, in->value);
            break;
        case REMAT__I_REDUCE:
            st = remat__dp_reduce(s, in->value);
            break;
        }
        /* reductions in flight advance between instructions */
        if (st == REMAT_OK && s->dp.n_flying) st = remat__dp_progress(s);
        if (s->profiling && in->kind != REMAT__I_REDUCE) {
            /* A device runs asynchronously: wait, so the time is this
             * instruction's. */
            if (st == REMAT_OK && in->kind != REMAT__I_FREE) st = s->be->sync(s->dev);
            int op = s->g->nodes[in->kind == REMAT__I_FREE ? REMAT__VAL_NODE(in->value) : in->node].op;
            int slot = in->kind == REMAT__I_FWD ? !in->first : in->kind + 1;
            double dt = remat__now() - t0;
            s->prof_s[op][slot] += dt;
            s->prof_n[op][slot]++;
            if (in->kind != REMAT__I_FREE && s->prof_node) {
                double *pn = s->prof_node + REMAT__PROF_NODE * (size_t)in->node;
                pn[slot] += dt;
                pn[3] += slot == 1; /* recomputations */
            }
        }
    }
    if (st == REMAT_OK && s->ev != s->cur->n)
        st = remat__err(REMAT_INTERNAL, "memory plan mismatch: the run took %d of the plan's %d events", s->ev,
                        s->cur->n);
    return st;
}

/* ---------------------------------------------------------------- memory */

void remat__planned_free(remat__planned *pl) {
    remat__schedule_free(&pl->sc);
    remat__memplan_free(&pl->mem);
    pl->valid = 0;
}

remat_status remat__plan_memory(remat_session *s, remat__planned *pl) {
    remat__memplan_free(&pl->mem);
    remat_status st = remat__memplan_build(&s->prog, &pl->sc, &pl->mem);
    if (st == REMAT_OK) st = remat__memplan_place(&pl->mem);
    if (st != REMAT_OK) remat__memplan_free(&pl->mem);
    return st;
}

/* Makes the arena at least `bytes` large. Called between runs, when no
 * value lies in it. */
static remat_status grow_arena(remat_session *s, size_t bytes) {
    if (bytes <= s->arena_bytes && s->arena) return REMAT_OK;
    if (s->arena) s->be->release(s->dev, s->arena);
    s->arena = NULL;
    s->arena_bytes = 0;
    remat_status st = s->be->alloc(s->dev, bytes, &s->arena);
    if (st != REMAT_OK)
        return remat__err(st, "cannot allocate the step's %zu-byte arena on the %s: %s", bytes,
                          remat_device_str(s->opts.device), remat_last_error());
    s->arena_bytes = bytes;
    return REMAT_OK;
}

void remat__exec_release(remat_session *s) {
    if (s->vals && s->cur) release_all(s);
    if (s->arena) s->be->release(s->dev, s->arena);
    s->arena = NULL;
    s->arena_bytes = 0;
}

remat_status remat__exec(remat_session *s, const remat__planned *pl, float *loss, float *fetch_out) {
    remat_status st = grow_arena(s, pl->mem.arena);
    if (st != REMAT_OK) return st;
    s->cur = &pl->mem;
    st = walk(s, &pl->sc, loss, fetch_out);
    /* The run's one synchronization point: downloads land, device errors
     * surface. */
    remat_status sy = s->be->sync(s->dev);
    if (st == REMAT_OK) st = sy;
    if (st != REMAT_OK) release_all(s);
    s->cur = NULL;
    return st;
}
